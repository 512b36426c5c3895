"""GBNF, llama.cpp's grammar format, read into the IR and written back from it.

GBNF is what llama.cpp's grammar sampler reads (its ``grammars/README.md``; the parser
is ``src/llama-grammar.cpp``), and xgrammar's EBNF is a dialect of it.  :func:`read_gbnf`
turns GBNF text into a :class:`~toolkit.grammar.ir.Grammar` with the same language, so
every masklab strategy compiles the grammar llama.cpp would run; :func:`write_gbnf`
writes any Grammar as GBNF with the same language, so llama.cpp (and xgrammar's EBNF
front end) can be given the very grammar our strategies compile.  :class:`GbnfText` is
the wrapper an engine that reads GBNF itself is handed.

**What is read**, as llama.cpp's parser reads it:

* rules ``name ::= alternatives``, names of ASCII letters, digits and ``-`` (and ``_``,
  which the README allows); ``root`` is the start (``start=`` picks another);
* a rule ends at the end of its line; it goes on over newlines inside parentheses, after
  ``::=`` and after a ``|`` (a line that starts with ``|`` is an error, as in llama.cpp);
* ``|``, ``( )``, postfix ``*`` ``+`` ``?`` ``{m}`` ``{m,}`` ``{m,n}`` (and ``{,n}``,
  which xgrammar's EBNF takes and llama.cpp does not); a postfix applies to the item
  before it, which after a postfix is the repeated item (``"a"{2}*`` is ``("aa")*``), as
  in llama.cpp; spaces may stand between an item and its postfix;
* string literals ``"..."`` and classes ``[...]``, ``[^...]`` with ranges ``a-z``, both
  with the escapes ``\\xHH \\uHHHH \\UHHHHHHHH \\t \\n \\r \\\\ \\" \\[ \\] \\-`` (code points,
  not bytes: ``\\x85`` is U+0085); any other character stands for itself, a newline
  inside a string included; ``.`` is any character; classes, ``.`` and negations are
  over Unicode code points, i.e. UTF-8 text, as llama.cpp matches them;
* ``#`` comments to the end of the line wherever a space may stand;
* token references (newer llama.cpp): ``<[id]>``, ``<name>`` (``<think>``,
  ``<|im_start|>``) and the negated ``!<[id]>`` become the IR's special-token terminals
  (:mod:`toolkit.grammar.special`: ``<[id]>``, ``<name>`` and ``<[^id]>``).  ``!<name>``
  has no IR form (a negated name needs the vocabulary) and is refused with
  :class:`~toolkit.core.errors.UnsupportedGrammar`, naming ``!<[id]>`` as the way to say it.

Where the reading is stricter than llama.cpp's, on purpose: a rule defined twice (llama.cpp
keeps the last silently), an empty class ``[]``/``[^]`` (llama.cpp reads the empty
*string*), a range whose ends are reversed (llama.cpp: a class matching nothing) and
``{m,n}`` with ``m > n`` (and ``{,}``) are :class:`~toolkit.core.errors.GrammarError`; a bound above
:data:`MAX_REPETITION` is :class:`~toolkit.core.errors.LimitExceeded` (llama.cpp refuses
``m > 2000`` and reads ``n > 2000`` as unbounded); so is a grammar that expands to more
than :data:`MAX_SYMBOLS` symbols.  A surrogate code point (no UTF-8 form) in a string is
:class:`~toolkit.core.errors.UnsupportedGrammar`; in a class it is left out.  Left
recursion, which llama.cpp refuses, is read: the language is well defined.  Every error
gives the 1-based line and column of the offending character (an undefined rule: its
first use; a missing ``root``: none).

**Into the IR.**  GBNF is character-level and scannerless, like the IR's language.  Each
GBNF rule is an IR rule; groups and repetitions become helper rules named
``rule~N`` (``~`` is no GBNF name character, so they never clash).  ``x*`` is the
left-recursive ``R ::= R x | ε`` (linear for Earley, a loop for
:meth:`Grammar.to_regex`), ``x+`` ``P ::= P x | x``, ``x{m,n}`` ``m`` copies then the
nested optionals llama.cpp builds.

*Terminal shapes.*  Every strategy must give ``naive``'s masks on a GBNF grammar, and
the ``llguidance`` strategy lexes greedily: a byte that extends a live lexeme extends it.
Greedy lexing equals the scannerless language whenever the union of the terminals'
languages is *prefix-free* (no terminal's string is a proper prefix of another's): a
text then has one factorization into terminal strings, the lexer cannot end a lexeme
before that factorization does (its string would be a proper prefix of the next one) nor
extend it past it (nothing extends a complete one).  So every character class, ``.`` and
one-character literal is a one-character terminal (shared by every use of the same set:
``[a]`` and ``"a"`` are one terminal), and a longer string literal is kept as one literal
terminal only while that keeps the union prefix-free: its first character is in no
one-character terminal and no other kept literal is its prefix or extension; the others
are split into their characters (to a fixpoint, as splitting adds characters).  In
practice ``"yes" | "no"`` keeps its words and a JSON grammar (whose string characters
include every letter) is all characters.  Lifting whole regular rules into one regex
terminal would shorten the parse but makes the union lose prefix-freeness at once
(``[0-9]+`` before ``[0-9]``), so it is not done.  Special-token terminals (marks
``0xFF digits 0xFF``) start with a byte no text has and are prefix-free among themselves.
GBNF has no ``%ignore``: whitespace is whatever the rules say.

**Written back** (:func:`write_gbnf`): the start rule is ``root`` (a rule of that name
elsewhere is renamed); IR names become GBNF names (letters, digits, ``-``; the ``_`` of
Lark names becomes ``-``, since llama.cpp's parser does not take ``_``), collisions get
a suffix.  Terminals are written from their regex (the regex parser's tree
walked into GBNF classes, strings, groups and repetitions; ``.`` without the ``s`` flag is
``[^\\n]``, any character ``[\\x00-\\U0010FFFF]`` (xgrammar's EBNF has no ``.``); ``i`` makes
letters classes); terminals with ``also``/``excluding``/``lazy``
from a regex of their DFA (:func:`toolkit.automata.dfaops.dfa_regex`).  A string or a
single class is written inline, any other terminal as a rule of its own.  ``%ignore``:
``ign ::= (I1 | I2 ...)*`` stands before every terminal and once at the end
(``root ::= start ign``), exactly the scannerless language (ignored text before, between
and after terminals); one ignored ``x+`` is ``ign ::= x*``, not the ambiguous ``(x+)*``.
An empty alternative is written ``""`` (xgrammar's EBNF takes no bare empty one).  Direct left recursion ``A ::= A a | b`` is written ``A ::= b (a)*``
(same language; llama.cpp refuses left recursion); indirect left recursion is written
as it is.  Repetition bounds above 1000 are split into chunks (``x{0,2500}`` is
``x{0,1000} x{0,1000} x{0,500}``), and a repeated group that holds groups or repetitions
is a rule of its own, so llama.cpp's 2000-rule limit on one repetition is not met.
Special-token terminals ``<[id]>``, ``<name>``, ``<[^id]>`` and short id lists are written
as GBNF tokens; ``<[*]>`` and negated lists have no GBNF form:
:class:`~toolkit.core.errors.UnsupportedGrammar` naming the terminal.

:meth:`Grammar.from_gbnf` and :meth:`Grammar.to_gbnf` call these two functions
(:func:`toolkit.grammar.ir.bind_gbnf`, at the end of this module, which also registers
the GBNF input format of :mod:`toolkit.grammar.inputs`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from interegular.patterns import Pattern, REFlags, _CharGroup, _Concatenation, _Repeated

from toolkit.automata.dfaops import dfa_regex
from toolkit.automata.nfa import case_variants, parse_pattern
from toolkit.automata.rxtext import ANY, class_body, escape_cp
from toolkit.automata.utf8 import MAX_CODEPOINT, ranges_of
from toolkit.core.errors import (
    GrammarError,
    LimitExceeded,
    RegexError,
    UnsupportedGrammar,
    check_deadline,
)
from toolkit.grammar.earley import derives
from toolkit.grammar.inputs import InputFormat, register_format
from toolkit.grammar.ir import Grammar, Terminal, bind_gbnf
from toolkit.grammar.special import ANY_MARK_REGEX, MARK, parse_spec

__all__ = ["GbnfText", "read_gbnf", "write_gbnf", "MAX_REPETITION", "MAX_SYMBOLS", "WRITE_CHUNK"]

MAX_REPETITION = 10_000
"""Largest repetition bound ``{m,n}`` :func:`read_gbnf` expands by default (its
``max_repetition``; llama.cpp's own limit is 2000); a larger one is
:class:`~toolkit.core.errors.LimitExceeded` ``("max_repetition")``."""

MAX_SYMBOLS = 1_000_000
"""Most symbols (over all alternatives) the IR of one GBNF text may have after repetitions
are expanded, by default (:func:`read_gbnf`'s ``max_symbols``):
:class:`~toolkit.core.errors.LimitExceeded` ``("max_symbols")``."""

WRITE_CHUNK = 1000
"""Largest repetition bound :func:`write_gbnf` writes; larger ones are chunked."""

_SURROGATES = (0xD800, 0xDFFF)
_MARK_CP = ord(MARK)


@dataclass(frozen=True)
class GbnfText:
    """GBNF text (llama.cpp's grammar format) for an engine that reads it itself
    (``peer:llama.cpp``); masklab's strategies are given :func:`read_gbnf`'s IR."""

    #: the input format's name (:mod:`toolkit.grammar.inputs`): what ``native_inputs`` lists
    input_format: ClassVar[str] = "gbnf"
    text: str


# ====================================================================== reading ==

# Symbols while reading, before terminals get their names:
#   ("r", name, pos)  a GBNF rule (pos: where it is used, for "undefined rule")
#   ("h", name)       a helper rule
#   ("c", key)        a one-character terminal; key = (negated, ranges)
#   ("l", text)       a string literal of two or more characters
#   ("s", spec)       a special-token terminal, as toolkit.grammar.special writes it
_Sym = tuple
_Key = tuple  # (negated: bool, ranges: tuple[tuple[int, int], ...])


@dataclass
class _Item:
    """An item of a sequence: its symbols, and whether a postfix may follow it
    (llama.cpp: not after ``""`` or ``x{0}``, which leave nothing to repeat)."""

    syms: list[_Sym]
    repeatable: bool = True


@dataclass
class _Frame:
    """A group being read (the rule's body is the outermost): finished alternatives,
    the current sequence, where its ``(`` is."""

    alts: list[list[_Item]] = field(default_factory=list)
    seq: list[_Item] = field(default_factory=list)
    open_at: int = -1


def _is_name_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or ("0" <= c <= "9") or c == "-" or c == "_"


_HEX = {"x": 2, "u": 4, "U": 8}
_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}


class _Reader:
    """One pass over the text (see the module doc); groups use an explicit stack, so
    nesting depth costs no recursion."""

    def __init__(self, text: str, max_repetition: int = MAX_REPETITION, max_symbols: int = MAX_SYMBOLS) -> None:
        self.max_repetition = max_repetition
        self.max_symbols = max_symbols
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
        self.rules: dict[str, list[list[_Sym]]] = {}
        self.defined_at: dict[str, int] = {}
        self.helpers = 0
        self.size = 0  # symbols so far (max_symbols)

    # ----------------------------------------------------------- helpers --

    def where(self, i: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, i)
        return line, i - self.line_starts[line - 1] + 1

    def error(self, message: str, i: int) -> GrammarError:
        return GrammarError(message, *self.where(i))

    def unsupported(self, message: str, i: int) -> UnsupportedGrammar:
        return UnsupportedGrammar(message, *self.where(i))

    def shown(self, i: int) -> str:
        if i >= self.n:
            return "the end of the grammar"
        c = self.s[i]
        return {"\n": "a newline", "\r": "a newline", "\t": "a tab", " ": "a space"}.get(c, repr(c))

    def space(self, newline_ok: bool) -> None:
        """Skip spaces, tabs and comments (and newlines when ``newline_ok``): llama.cpp's
        ``parse_space``."""
        s, i, n = self.s, self.i, self.n
        while i < n:
            c = s[i]
            if c == " " or c == "\t" or (newline_ok and (c == "\n" or c == "\r")):
                i += 1
            elif c == "#":
                while i < n and s[i] != "\n" and s[i] != "\r":
                    i += 1
            else:
                break
        self.i = i

    def grow(self, k: int, at: int) -> None:
        self.size += k
        if self.size > self.max_symbols:
            line, col = self.where(at)
            raise LimitExceeded("max_symbols", self.size, self.max_symbols,
                                f"the grammar's repetitions expand to too many symbols (line {line}, column {col})")

    def helper(self, rule: str, alts: list[list[_Sym]], at: int) -> _Sym:
        self.helpers += 1
        name = f"{rule}~{self.helpers}"
        self.rules[name] = alts
        self.grow(sum(len(a) for a in alts) + 1, at)
        return ("h", name)

    # ------------------------------------------------------------ grammar --

    def read(self) -> None:
        self.space(True)
        if self.i >= self.n:
            raise self.error("empty grammar: no rule (a GBNF grammar is rules 'name ::= ...', "
                             "starting from 'root')", self.i)
        while self.i < self.n:
            check_deadline(f"reading the GBNF grammar, line {self.where(self.i)[0]}")
            self.rule()

    def name(self) -> str:
        s, i = self.s, self.i
        j = i
        while j < self.n and _is_name_char(s[j]):
            j += 1
        if j == i:
            if s[i] == "|":
                raise self.error("a line starts with '|': a rule goes on over a newline only after '|', "
                                 "'::=' or inside parentheses", i)
            raise self.error(f"expecting a rule name, found {self.shown(i)}", i)
        self.i = j
        return s[i:j]

    def rule(self) -> None:
        at = self.i
        name = self.name()
        self.space(False)
        if not self.s.startswith("::=", self.i):
            raise self.error(f"expecting '::=' after the rule name {name!r}, found {self.shown(self.i)}", self.i)
        if name in self.defined_at:
            line, col = self.where(self.defined_at[name])
            raise self.error(f"rule {name!r} is defined twice (first at line {line}, column {col})", at)
        self.defined_at[name] = at
        self.i += 3
        self.space(True)
        self.rules[name] = []  # defined before its body: helpers come after it in order
        self.rules[name] = [self.flatten(alt) for alt in self.body(name)]
        s, i = self.s, self.i
        if i < self.n:
            c = s[i]
            if c == "\r":
                self.i = i + (2 if s.startswith("\n", i + 1) else 1)
            elif c == "\n":
                self.i = i + 1
            elif c == ")":
                raise self.error("unbalanced ')': no '(' is open", i)
            else:
                raise self.error(f"unexpected {self.shown(i)}: expecting an item, '|' or the end of the line", i)
        self.space(True)

    @staticmethod
    def flatten(items: list[_Item]) -> list[_Sym]:
        return [sym for it in items for sym in it.syms]

    def body(self, rule: str) -> list[list[_Item]]:
        """The alternatives of a rule's body, each a list of items."""
        frames = [_Frame()]
        s, n = self.s, self.n
        while True:
            nested = len(frames) > 1
            f = frames[-1]
            i = self.i
            c = s[i] if i < n else ""
            if c == '"':
                f.seq.append(self.string())
                self.space(nested)
            elif c == "[":
                f.seq.append(_Item([("c", self.char_class())]))
                self.space(nested)
            elif c == "<" or c == "!":
                f.seq.append(_Item([("s", self.token())]))
                self.space(nested)
            elif c and _is_name_char(c):
                name = self.name()
                f.seq.append(_Item([("r", name, i)]))
                self.grow(1, i)
                self.space(nested)
            elif c == ".":
                self.i += 1
                f.seq.append(_Item([("c", (True, ()))]))
                self.grow(1, i)
                self.space(nested)
            elif c == "(":
                self.i += 1
                self.space(True)
                frames.append(_Frame(open_at=i))
            elif c == ")" and nested:
                self.i += 1
                f.alts.append(f.seq)
                frames.pop()
                frames[-1].seq.append(self.group(rule, f.alts, i))
                self.space(len(frames) > 1)
            elif c == "|":
                f.alts.append(f.seq)
                f.seq = []
                self.i += 1
                self.space(True)
            elif c in ("*", "+", "?", "{"):
                if c == "{":
                    lo, hi = self.bounds(nested)
                else:
                    self.i += 1
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                if not f.seq or not f.seq[-1].repeatable:
                    raise self.error(f"nothing to repeat before {c!r}", i)
                f.seq[-1] = self.repeat(rule, f.seq[-1], lo, hi, i)
                self.space(nested)
            elif nested:
                if i >= n:
                    raise self.error("unclosed '(': the grammar ends before its ')'", frames[-1].open_at)
                raise self.error(f"unexpected {self.shown(i)}: expecting an item, '|' or ')'", i)
            else:
                f.alts.append(f.seq)
                return f.alts

    def group(self, rule: str, alts: list[list[_Item]], at: int) -> _Item:
        flat = [self.flatten(a) for a in alts]
        if len(flat) == 1:
            return _Item(flat[0])
        return _Item([self.helper(rule, flat, at)])

    def repeat(self, rule: str, item: _Item, lo: int, hi: int | None, at: int) -> _Item:
        """``item{lo,hi}`` (hi None: unbounded) as symbols; helper rules as llama.cpp
        builds them (see the module doc)."""
        syms = item.syms
        if hi == 0:
            return _Item([], repeatable=False)
        if not syms:
            return _Item([])  # ()* and the like: the empty string
        copies = lo + (0 if hi == lo else 1)
        x = syms
        if len(syms) > 1 and copies > 1:
            x = [self.helper(rule, [list(syms)], at)]
        weight = sum(len(s[1]) if s[0] == "l" else 1 for s in x)
        out: list[_Sym] = []
        if hi is None:
            if lo == 0:  # R ::= R x | ε
                name = self._next(rule)
                self.rules[name] = [[("h", name), *x], []]
                self.grow(weight + 2, at)
                return _Item([("h", name)])
            out = x * (lo - 1)
            name = self._next(rule)  # P ::= P x | x
            self.rules[name] = [[("h", name), *x], list(x)]
            self.grow(weight * (lo + 1) + 2, at)
            return _Item([*out, ("h", name)])
        out = x * lo
        self.grow(weight * lo, at)
        prev: _Sym | None = None
        for _ in range(hi - lo):  # O_k ::= x O_(k-1) | ε
            name = self._next(rule)
            self.rules[name] = [[*x, prev] if prev is not None else list(x), []]
            self.grow(weight + 2, at)
            prev = ("h", name)
        if prev is not None:
            out.append(prev)
        return _Item(out)

    def _next(self, rule: str) -> str:
        self.helpers += 1
        return f"{rule}~{self.helpers}"

    def bounds(self, nested: bool) -> tuple[int, int | None]:
        at = self.i
        self.i += 1
        self.space(nested)
        lo = self.count(at, 0 if self.s.startswith(",", self.i) else None)
        self.space(nested)
        c = self.s[self.i] if self.i < self.n else ""
        if c == "}":
            self.i += 1
            return lo, lo
        if c != ",":
            raise self.error(f"expecting ',' or '}}' in the repetition, found {self.shown(self.i)}", self.i)
        self.i += 1
        self.space(nested)
        hi = None
        if self.i < self.n and self.s[self.i].isascii() and self.s[self.i].isdigit():
            hi = self.count(at, None)
            self.space(nested)
        if not self.s.startswith("}", self.i):
            raise self.error(f"expecting '}}' to close the repetition, found {self.shown(self.i)}", self.i)
        self.i += 1
        if hi is not None and lo > hi:
            raise self.error(f"repetition {{{lo},{hi}}}: the minimum is larger than the maximum", at)
        if hi is None and re.fullmatch(r"\{[ \t\r\n]*,", self.s[at : self.i - 1].rstrip(" \t\r\n")):
            raise self.error("repetition '{,}' has no bound (write '*')", at)
        return lo, hi

    def count(self, at: int, default: int | None) -> int:
        s, i = self.s, self.i
        j = i
        while j < self.n and "0" <= s[j] <= "9":
            j += 1
        if j == i:
            if default is not None:
                return default
            raise self.error(f"expecting a number in the repetition, found {self.shown(i)}", i)
        self.i = j
        if j - i > 9 or int(s[i:j]) > self.max_repetition:
            line, col = self.where(at)
            raise LimitExceeded("max_repetition", int(s[i:j]) if j - i <= 4000 else float("inf"), self.max_repetition,
                                f"a repetition bound at line {line}, column {col}")
        return int(s[i:j])

    # -------------------------------------------------------- characters --

    def char(self) -> int:
        """One character of a string or class (an escape or itself): its code point."""
        s, i = self.s, self.i
        c = s[i]
        if c != "\\":
            self.i = i + 1
            return ord(c)
        e = s[i + 1] if i + 1 < self.n else ""
        if e in _SIMPLE_ESCAPES:
            self.i = i + 2
            return ord(_SIMPLE_ESCAPES[e])
        if e in _HEX:
            k = _HEX[e]
            digits = s[i + 2 : i + 2 + k]
            if len(digits) < k or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"escape '\\{e}' needs {k} hex digits", i)
            cp = int(digits, 16)
            if cp > MAX_CODEPOINT:
                raise self.error(f"escape '\\{e}{digits}' is past the last code point U+10FFFF", i)
            self.i = i + 2 + k
            return cp
        if not e:
            raise self.error("a '\\' ends the grammar", i)
        raise self.error(f"unknown escape '\\{e}' (GBNF has \\x \\u \\U \\t \\n \\r \\\\ \\\" \\[ \\] \\-)", i)

    def string(self) -> _Item:
        at = self.i
        self.i += 1
        cps: list[int] = []
        while True:
            if self.i >= self.n:
                raise self.error("unterminated string: no closing '\"'", at)
            if self.s[self.i] == '"':
                break
            k = self.i
            cp = self.char()
            if _SURROGATES[0] <= cp <= _SURROGATES[1]:
                raise self.unsupported(f"the surrogate code point U+{cp:04X} has no UTF-8 form: "
                                       "no text holds it", k)
            cps.append(cp)
        self.i += 1
        self.grow(len(cps), at)
        if not cps:
            return _Item([], repeatable=False)  # llama.cpp: nothing to repeat after ""
        if len(cps) == 1:
            return _Item([("c", (False, ((cps[0], cps[0]),)))])
        return _Item([("l", "".join(map(chr, cps)))])

    def char_class(self) -> _Key:
        at = self.i
        self.i += 1
        negated = self.s.startswith("^", self.i)
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.i >= self.n:
                raise self.error("unterminated character class: no closing ']'", at)
            if self.s[self.i] == "]":
                break
            k = self.i
            lo = self.char()
            hi = lo
            if self.s.startswith("-", self.i) and self.i + 1 < self.n and self.s[self.i + 1] != "]":
                self.i += 1
                hi = self.char()
                if hi < lo:
                    raise self.error(f"range {self.s[k:self.i]!r} is empty: its end comes before its start", k)
            ranges.append((lo, hi))
        self.i += 1
        if not ranges:
            raise self.error("empty character class (llama.cpp reads it as the empty string; write \"\")", at)
        merged = _merge(ranges)
        if not negated:
            merged = _drop_surrogates(merged)
            if not merged:
                raise self.unsupported("the class holds only surrogate code points, which no UTF-8 text holds", at)
        self.grow(1, at)
        return (negated, tuple(merged))

    def token(self) -> str:
        """A token reference ``<[id]>``, ``<name>``, ``!<[id]>``: the special spec."""
        at = self.i
        s = self.s
        negated = s[at] == "!"
        i = at + 1 if negated else at
        if not s.startswith("<", i):
            raise self.error(f"expecting '<' after '!' (a negated token '!<[id]>'), found {self.shown(i)}", i)
        if s.startswith("[", i + 1):
            j = i + 2
            while j < self.n and "0" <= s[j] <= "9":
                j += 1
            if j == i + 2:
                raise self.error(f"expecting a token id in '<[...]>', found {self.shown(j)}", j)
            if not s.startswith("]>", j):
                raise self.error(f"expecting ']>' to close the token id, found {self.shown(j)}", j)
            tid = int(s[i + 2 : j])
            self.i = j + 2
            spec = f"<[^{tid}]>" if negated else f"<[{tid}]>"
        else:
            j = s.find(">", i)
            if j < 0:
                raise self.error("unterminated token: no closing '>'", i)
            self.i = j + 1
            spec = s[i : j + 1]
            if negated:
                raise self.unsupported(f"the negated token by name !{spec}: masklab's special terminals negate ids "
                                       f"only; write !<[id]> with the id of {spec}", at)
        parse_spec(spec, *self.where(i))
        self.grow(1, at)
        return spec


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _drop_surrogates(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in ranges:
        if hi < _SURROGATES[0] or lo > _SURROGATES[1]:
            out.append((lo, hi))
            continue
        if lo < _SURROGATES[0]:
            out.append((lo, _SURROGATES[0] - 1))
        if hi > _SURROGATES[1]:
            out.append((_SURROGATES[1] + 1, hi))
    return out


def _in_key(cp: int, key: _Key) -> bool:
    negated, ranges = key
    k = bisect.bisect_right(ranges, (cp, MAX_CODEPOINT + 1)) - 1
    inside = k >= 0 and ranges[k][0] <= cp <= ranges[k][1]
    return inside != negated


def _kept_literals(literals: set[str], keys: set[_Key]) -> set[str]:
    """The literals that stay whole terminals (see the module doc): the largest set
    found by splitting, to a fixpoint, every literal whose first character some
    one-character terminal holds or that another kept literal prefixes or extends."""
    keys = set(keys)
    kept = set(literals)
    while True:
        split = {w for w in kept if any(_in_key(ord(w[0]), k) for k in keys)}
        ordered = sorted(kept)
        for a, b in zip(ordered, ordered[1:], strict=False):
            if b.startswith(a):
                split.update((a, b))
        if not split:
            return kept
        kept -= split
        keys.update((False, ((ord(c), ord(c)),)) for w in split for c in w)


def _key_regex(key: _Key) -> str:
    negated, ranges = key
    if negated:
        return "[^" + class_body(ranges) + "]" if ranges else ANY
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return escape_cp(ranges[0][0], False)
    return "[" + class_body(ranges) + "]"


def read_gbnf(text: str, start: str = "root", *, max_repetition: int | None = None,
              max_symbols: int | None = None) -> Grammar:
    """The IR of GBNF ``text`` (see the module doc), its start rule ``start``.

    Errors: :class:`~toolkit.core.errors.GrammarError` with the line and column of the
    offending character; :class:`~toolkit.core.errors.UnsupportedGrammar` for what GBNF
    says and the IR cannot (``!<name>``, surrogates in strings), with its place;
    :class:`~toolkit.core.errors.LimitExceeded` naming ``max_repetition`` for a repetition
    bound above it (default :data:`MAX_REPETITION`) or ``max_symbols`` for more symbols
    than that (default :data:`MAX_SYMBOLS`), with the line and column;
    :class:`~toolkit.core.errors.Unsatisfiable` when the language is empty.  Rules are
    read in one pass and groups on a stack of their own, so no nesting depth or chain of
    rules meets Python's recursion limit; a compile's deadline is checked per rule.
    """
    if not isinstance(text, str):
        raise TypeError(f"GBNF text must be str, not {type(text).__name__}")
    r = _Reader(text, MAX_REPETITION if max_repetition is None else max_repetition,
                MAX_SYMBOLS if max_symbols is None else max_symbols)
    r.read()
    undefined = [(sym[2], sym[1]) for alts in r.rules.values() for alt in alts for sym in alt
                 if sym[0] == "r" and sym[1] not in r.defined_at]
    if undefined:
        at, name = min(undefined)
        raise r.error(f"undefined rule {name!r}", at)
    if start not in r.defined_at:
        raise GrammarError(f"no rule {start!r}: the grammar starts from it"
                           + (" (GBNF's start rule is 'root')" if start == "root" else ""))
    keys = {sym[1] for alts in r.rules.values() for alt in alts for sym in alt if sym[0] == "c"}
    literals = {sym[1] for alts in r.rules.values() for alt in alts for sym in alt if sym[0] == "l"}
    kept = _kept_literals(literals, keys)
    terminals: dict[str, Terminal] = {}
    names: dict[tuple, str] = {}

    def char_terminal(key: _Key) -> str:
        name = names.get(("c", key))
        if name is None:
            name = names[("c", key)] = _class_text(key)
            negated, ranges = key
            if not negated and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
                terminals[name] = Terminal.from_literal(name, chr(ranges[0][0]))
            else:
                terminals[name] = Terminal(name, _key_regex(key))
        return name

    def symbols(sym: _Sym) -> list[str]:
        kind = sym[0]
        if kind in ("r", "h"):
            return [sym[1]]
        if kind == "c":
            return [char_terminal(sym[1])]
        if kind == "l":
            w = sym[1]
            if w not in kept:
                return [char_terminal((False, ((ord(c), ord(c)),))) for c in w]
            name = names.get(("l", w))
            if name is None:
                name = names[("l", w)] = _string_text(w)
                terminals[name] = Terminal.from_literal(name, w)
            return [name]
        name = names.get(("s", sym[1]))
        if name is None:
            name = names[("s", sym[1])] = sym[1]
            terminals[name] = Terminal(name, ANY_MARK_REGEX, special=sym[1])
        return [name]

    rules = {name: tuple(tuple(x for sym in alt for x in symbols(sym)) for alt in alts)
             for name, alts in r.rules.items()}
    return Grammar(start=start, rules=rules, terminals=terminals, source=text)


# ====================================================================== writing ==


def _escape(cp: int, in_class: bool) -> str:
    """One code point as GBNF writes it in a string or a class."""
    c = chr(cp)
    if c == '"' or c == "\\":
        return "\\" + c
    if in_class and c in "[]-":
        return "\\" + c
    if in_class and c == "^":
        return "\\x5E"  # GBNF has no \^, and a leading ^ negates
    if c == "\t":
        return "\\t"
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if cp < 0x20 or 0x7F <= cp <= 0xA0 and not c.isprintable():
        return f"\\x{cp:02X}"
    if c == " " or c.isprintable():
        return c
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _string_text(value: str) -> str:
    return '"' + "".join(_escape(ord(c), False) for c in value) + '"'


_ANY_CHAR = "[\\x00-\\U0010FFFF]"
"""Any character: what ``.`` means in GBNF, written as a class (xgrammar's EBNF has no ``.``)."""


def _class_text(key: _Key) -> str:
    negated, ranges = key
    if negated and not ranges:
        return _ANY_CHAR
    if not negated and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _string_text(chr(ranges[0][0]))
    return ("[^" if negated else "[") + class_body(ranges, _escape) + "]"


@dataclass
class _Expr:
    """A GBNF expression being written: ``lit`` for a string (merged with its
    neighbours), else ``text`` with ``kind`` ``atom`` (a class, a rule, a group: a
    postfix may follow), ``seq`` (items side by side) or ``alt`` (``a | b``)."""

    text: str = ""
    kind: str = "atom"
    lit: str | None = None
    nested: bool = False  # holds a group or a repetition (llama.cpp counts its rules)

    def render(self) -> str:
        return _string_text(self.lit) if self.lit is not None else self.text


_EPS = _Expr(lit="")


class _Writer:
    """IR -> GBNF (see the module doc)."""

    def __init__(self, g: Grammar) -> None:
        self.g = g
        self.lines: dict[str, str] = {}
        self.used: set[str] = {"root"}
        self.extra: list[tuple[str, str]] = []  # rules made while writing terminals
        self.term_refs: dict[str, str] = {}
        self.current = "terminal"  # the terminal being written (names its helper rules)

    def fresh(self, base: str) -> str:
        name = re.sub(r"[^A-Za-z0-9-]+", "-", str(base)).strip("-") or "r"
        if not name[0].isalpha():
            name = "r-" + name
        out, k = name, 1
        while out in self.used:
            k += 1
            out = f"{name}-{k}"
        self.used.add(out)
        return out

    # ---------------------------------------------------------- terminals --

    def terminal(self, name: str) -> str:
        """How a rule refers to terminal ``name``: inline text or a rule's name."""
        ref = self.term_refs.get(name)
        if ref is not None:
            return ref
        t = self.g.terminals[name]
        if t.special is not None:
            ref = self.special(name, t.special)
        elif t.literal and t.value is not None and t.is_plain and not any(
                _SURROGATES[0] <= ord(c) <= _SURROGATES[1] for c in t.value):
            ref = _string_text(t.value)
        else:
            rx = t.regex if t.is_plain else dfa_regex(t.dfa())
            self.current = str(name)
            try:
                expr = self.regex(parse_pattern(rx), REFlags(0))
            except RecursionError:
                raise UnsupportedGrammar(f"terminal {name!r}: its regex is nested too deeply to write as GBNF") \
                    from None
            except RegexError as e:
                raise UnsupportedGrammar(f"terminal {name!r}: {e}") from e
            if expr is None:  # an empty language: the terminal's uses are unproductive
                raise AssertionError(f"terminal {name!r} is live but its regex matches nothing")
            if expr.lit is not None or (expr.kind == "atom" and not expr.nested):
                ref = expr.render()
            else:
                rule = self.fresh(name)
                self.extra.append((rule, expr.render()))
                ref = rule
        self.term_refs[name] = ref
        return ref

    def special(self, name: str, text: str) -> str:
        spec = parse_spec(text)
        if spec.name is not None:
            return spec.name
        ids = [i for lo, hi in spec.ranges for i in range(lo, hi + 1)] if len(spec.ranges) <= 64 and sum(
            hi - lo + 1 for lo, hi in spec.ranges) <= 4096 else None
        if spec.negated:
            if ids is not None and len(ids) == 1:
                return f"!<[{ids[0]}]>"
            raise UnsupportedGrammar(f"terminal {name!r}: the special token {text} (every token but a list) has no "
                                     "GBNF form (GBNF negates one token: !<[id]>)")
        if ids is None:
            raise UnsupportedGrammar(f"terminal {name!r}: the special token {text} names too many ids to list in GBNF")
        if len(ids) == 1:
            return f"<[{ids[0]}]>"
        return "(" + " | ".join(f"<[{i}]>" for i in ids) + ")"

    def regex(self, node: object, flags: REFlags) -> _Expr | None:
        """A regex parse tree (:mod:`toolkit.automata._rxparse`) as a GBNF expression;
        None for the empty language."""
        if isinstance(node, Pattern):
            inner = (flags | node.added_flags) & ~node.removed_flags
            alts = [e for e in (self.regex(o, inner) for o in node.options) if e is not None]
            return self.alternation(alts)
        if isinstance(node, _Concatenation):
            parts = []
            for p in node.parts:
                e = self.regex(p, flags)
                if e is None:
                    return None
                parts.append(e)
            return self.sequence(parts)
        if isinstance(node, _Repeated):
            inner, lo = node.base, node.min
            if node.max is None and _nullable(inner):  # x* with ε in x: llama.cpp sees left recursion
                inner, lo = _nonempty(inner), 0  # x{m,} is (x minus ε)*
                if inner is None:
                    return _EPS
            base = self.regex(inner, flags)
            return self.repetition(base, lo, node.max)
        if isinstance(node, _CharGroup):
            cps = case_variants(node.chars) if flags & REFlags.CASE_INSENSITIVE else {ord(c) for c in node.chars}
            ranges = ranges_of(cps)
            if node.negated:
                return _Expr(_class_text((True, tuple(ranges))))
            if _MARK_CP in cps and len(cps) == 1:
                raise UnsupportedGrammar("a regex holds the special-token mark U+DCFF (the byte 0xFF), which GBNF "
                                         "cannot write")
            ranges = _drop_surrogates(ranges)
            if not ranges:
                return None
            if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
                return _Expr(lit=chr(ranges[0][0]))
            return _Expr(_class_text((False, tuple(ranges))))
        kind = type(node).__name__
        if kind.endswith("DotCls"):
            return _Expr(_ANY_CHAR if flags & REFlags.SINGLE_LINE else "[^\\n]")
        if kind.endswith("EmptyCls"):
            return _EPS
        raise UnsupportedGrammar(f"cannot write the regex node {kind} as GBNF")

    @staticmethod
    def alternation(alts: Sequence[_Expr]) -> _Expr | None:
        unique = list({a.render(): a for a in alts}.items())
        if not unique:
            return None
        if len(unique) == 1:
            return unique[0][1]
        return _Expr(" | ".join(t for t, _ in unique), "alt", nested=True)

    @staticmethod
    def sequence(parts: Sequence[_Expr]) -> _Expr:
        merged: list[_Expr] = []
        for p in parts:
            if p.lit == "":
                continue
            if p.lit is not None and merged and merged[-1].lit is not None:
                merged[-1] = _Expr(lit=merged[-1].lit + p.lit)
            else:
                merged.append(p)
        if not merged:
            return _EPS
        if len(merged) == 1:
            return merged[0]
        text = " ".join("(" + p.text + ")" if p.kind == "alt" else p.render() for p in merged)
        return _Expr(text, "seq", nested=any(p.nested for p in merged))

    def repetition(self, base: _Expr | None, lo: int, hi: int | None) -> _Expr | None:
        if base is None:
            return _EPS if lo == 0 else None
        if base.lit == "" or hi == 0:
            return _EPS
        if (lo, hi) == (1, 1):
            return base
        if base.lit is not None or (base.kind == "atom" and not base.nested):
            atom = base.render()
        else:
            body = base.render()
            if base.nested and (hi or lo) > 1:  # llama.cpp multiplies the rules a group makes
                rule = self.fresh(f"{self.current}-rep")
                self.extra.append((rule, body))
                atom = rule
            else:
                atom = "(" + body + ")"
        return _Expr(" ".join(atom + q for q in _quantifiers(lo, hi)), "seq", nested=True)

    def ignored(self, ignore: list[str]) -> str:
        """The body of the rule of ignored text: any sequence of the ignore terminals.
        One terminal ``x+`` or ``x*`` (whitespace, usually) is written ``x*``, not the
        ambiguous ``(x+)*``, whose splits llama.cpp would each follow."""
        t = self.g.terminals[ignore[0]]
        if len(ignore) == 1 and t.is_plain and t.special is None:
            tree = parse_pattern(t.regex)
            while isinstance(tree, Pattern) and len(tree.options) == 1 and len(tree.options[0].parts) == 1 \
                    and not (tree.added_flags or tree.removed_flags):
                tree = tree.options[0].parts[0]
            if isinstance(tree, _Repeated) and tree.min <= 1 and tree.max is None:
                star = self.repetition(self.regex(tree.base, REFlags(0)), 0, None)
                if star is not None:
                    return star.render()
        refs = [self.terminal(n) for n in ignore]  # each an atom: a string, a class, a rule, a group
        return f"{refs[0]}*" if len(refs) == 1 else "(" + " | ".join(refs) + ")*"

    # -------------------------------------------------------------- rules --

    def write(self) -> str:
        g = self.g
        live_terms = {n for n, t in g.terminals.items() if t.dfa().start}
        prods = [(lhs, alt) for lhs, alts in g.rules.items() for alt in alts]
        live = derives(prods, live_terms)
        rules = {lhs: [alt for alt in alts if all(s in live for s in alt)]
                 for lhs, alts in g.rules.items() if lhs in live}
        reach = {g.start}
        todo = [g.start]
        while todo:
            for alt in rules[todo.pop()]:
                for s in alt:
                    if s in rules and s not in reach:
                        reach.add(s)
                        todo.append(s)
        ignore = [n for n in dict.fromkeys(g.ignore) if n in live_terms]
        names: dict[str, str] = {}
        if not ignore:
            names[g.start] = "root"
        for lhs in rules:
            if lhs in reach and lhs not in names:
                names[lhs] = self.fresh(lhs)
        ign = None
        if ignore:
            ign = self.fresh("ignored")
            self.lines[ign] = self.ignored(ignore)

        def sym(s: str) -> str:
            if s in rules:
                return names[s]
            ref = self.terminal(s)
            return f"{ign} {ref}" if ign else ref

        def seq(alt: Sequence[str]) -> str:
            return " ".join(sym(s) for s in alt) if alt else '""'

        out: list[tuple[str, str]] = []
        if ign:
            out.append(("root", f"{names[g.start]} {ign}"))
        for lhs, alts in rules.items():
            if lhs not in reach:
                continue
            alts = list(dict.fromkeys(alts))
            lefts = [alt[1:] for alt in alts if alt and alt[0] == lhs and len(alt) > 1]
            bases = [alt for alt in alts if not alt or alt[0] != lhs]
            if lefts:  # A ::= A a | b  as  A ::= b (a)*
                head = " | ".join(seq(b) for b in bases)
                tail = " | ".join(seq(a) for a in lefts)
                body = f"({tail})*" if head == '""' else (f"({head}) " if len(bases) > 1 else f"{head} ") + f"({tail})*"
            else:
                body = " | ".join(seq(a) for a in alts)
            out.append((names[lhs], body))
        if ign:
            out.append((ign, self.lines[ign]))
        out.extend(self.extra)
        return "".join(f"{name} ::= {body}\n" for name, body in out)


def _nullable(node: object) -> bool:
    """Whether a regex tree matches the empty string."""
    if isinstance(node, Pattern):
        return any(_nullable(o) for o in node.options)
    if isinstance(node, _Concatenation):
        return all(_nullable(p) for p in node.parts)
    if isinstance(node, _Repeated):
        return node.min == 0 or _nullable(node.base)
    return type(node).__name__.endswith("EmptyCls")


def _nonempty(node: object) -> object | None:
    """A regex tree for ``node``'s language without the empty string (None when that is
    empty): llama.cpp refuses a repetition whose item may be empty (it reads it as left
    recursion), so ``(a?b?)*`` is written ``(a b? | b)*``.  Flags stay on the groups
    that carry them."""
    if not _nullable(node):
        return node
    if isinstance(node, Pattern):
        opts = [x for x in (_nonempty(o) for o in node.options) if x is not None]
        if not opts:
            return None
        return Pattern(tuple(o if isinstance(o, _Concatenation) else _Concatenation((o,)) for o in opts),
                       node.added_flags, node.removed_flags)
    if isinstance(node, _Concatenation):  # every part nullable: the first non-empty one, then the rest
        opts = []
        for i, part in enumerate(node.parts):
            head = _nonempty(part)
            if head is not None:
                opts.append(_Concatenation((head, *node.parts[i + 1 :])))
        return Pattern(tuple(opts), REFlags(0), REFlags(0)) if opts else None
    if isinstance(node, _Repeated):
        if node.max == 0:
            return None
        if not _nullable(node.base):
            return _Repeated(node.base, 1, node.max)
        head = _nonempty(node.base)
        if head is None:
            return None
        if node.max is None:
            return _Repeated(head, 1, None)
        if node.max == 1:
            return head
        return _Concatenation((head, _Repeated(node.base, 0, node.max - 1)))
    return None  # the empty node


def _quantifiers(lo: int, hi: int | None) -> list[str]:
    """Postfixes whose concatenation repeats an item ``lo`` to ``hi`` times, each bound at
    most :data:`WRITE_CHUNK` (llama.cpp's limit is 2000)."""
    if hi is None:
        if lo == 0:
            return ["*"]
        if lo == 1:
            return ["+"]
        full, rest = divmod(lo - 1, WRITE_CHUNK)
        return [f"{{{WRITE_CHUNK}}}"] * full + ([f"{{{rest}}}"] if rest else []) + ["+"]
    if (lo, hi) == (0, 1):
        return ["?"]
    out = []
    full, rest = divmod(lo, WRITE_CHUNK)
    out += [f"{{{WRITE_CHUNK}}}"] * full + ([f"{{{rest}}}"] if rest else [])
    full, rest = divmod(hi - lo, WRITE_CHUNK)
    out += [f"{{0,{WRITE_CHUNK}}}"] * full + ([("?" if rest == 1 else f"{{0,{rest}}}")] if rest else [])
    return out


def write_gbnf(grammar: Grammar) -> str:
    """GBNF text with ``grammar``'s language (see the module doc): ``root`` is the start;
    terminals from their regexes, ``%ignore`` text before every terminal and at the end.
    :class:`~toolkit.core.errors.UnsupportedGrammar` for a special-token terminal GBNF
    cannot name (``<[*]>``, a negated list) and a regex too deeply nested to write."""
    if not isinstance(grammar, Grammar):
        raise TypeError(f"write_gbnf takes a Grammar, not {type(grammar).__name__}")
    return _Writer(grammar).write()


# ================================================================ registration ==


def _read_spec(spec: GbnfText) -> Grammar:
    return read_gbnf(spec.text)


register_format(InputFormat("gbnf", GbnfText, _read_spec, key="gbnf", flag="--gbnf", suffixes=(".gbnf",),
                            help="a GBNF grammar file (llama.cpp's format)", title="GBNF (GbnfText)"), replace=True)
bind_gbnf(read_gbnf, write_gbnf)
