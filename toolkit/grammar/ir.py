"""The grammar IR every strategy compiles.

A :class:`Grammar` is a context-free grammar whose terminals are regular languages
over bytes (each a regex of :mod:`toolkit.automata.regex`'s dialect, flagged when it is a
literal string), plus an ``ignore`` set of terminals.  Its language is the
*scannerless* one: the strings the CFG derives when each terminal stands for its
regular language and any sequence of ``ignore`` terminals may appear before, between
and after terminals.  :meth:`Grammar.accepts` (an Earley recognizer over bytes, see
:mod:`toolkit.grammar.earley`) and the ``naive`` engine define that language.

Builders: :meth:`Grammar.from_lark` (parsed by the ``lark`` package, EBNF expanded),
:meth:`Grammar.from_regex`; writers: :meth:`Grammar.to_lark` (text llguidance's Lark
front end accepts, with regexes rewritten by :func:`toolkit.automata.regex.canonical_regex` so
that every engine runs the very same language).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from toolkit.automata.dfaops import Form, compile_boolean, dfa_regex, shortest_matches
from toolkit.automata.jsontext import json_literal_dfa, json_string_literal, llguidance_spelling
from toolkit.automata.nfa import strip_anchors
from toolkit.automata.regex import (
    DEFAULT_MAX_STATES,
    ByteDFA,
    canonical_regex,
    compile_literal,
    compile_regex,
)
from toolkit.core.errors import (
    GrammarError,
    LimitExceeded,
    RegexError,
    TimeLimitExceeded,
    Unsatisfiable,
    UnsupportedGrammar,
    check_deadline,
    deadline_left,
    time_limit,
)
from toolkit.grammar.earley import ByteRecognizer, compile_cfg, derives
from toolkit.grammar.embed import map_subschemas, schema_compiler
from toolkit.grammar.lark_dialect import translate
from toolkit.grammar.special import ANY_MARK_REGEX, mark_regex, parse_spec, resolve

__all__ = ["Grammar", "RegexText", "Terminal", "bind_gbnf"]

_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_GBNF: dict[str, Callable[..., Any]] = {}  # GBNF's reader and writer (bind_gbnf)
_TERM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Terminal:
    """A terminal: a regular language given as a regex over text (UTF-8 bytes).

    ``literal`` is True when the terminal is exactly the string ``value``.
    ``also`` and ``excluding`` make it a boolean combination: its language is
    ``regex``'s, intersected with every ``also`` regex, minus every ``excluding``
    regex (a length limit on a pattern, keys other than the listed properties).
    Lark writes those with llguidance's ``&`` and ``~`` operators; a plain regex
    cannot (see :attr:`is_plain`).  ``special`` makes it a token-level terminal, a
    special token of the vocabulary (:mod:`toolkit.grammar.special`; :meth:`Grammar.bind`
    resolves it).  ``json_string`` is True when the terminal is
    every JSON text of the string ``value`` (``regex`` is
    :func:`~toolkit.automata.jsontext.json_string_literal` of it: an object key, a string
    ``const``); its DFA is then written down directly, the same DFA at a fraction of
    the cost (:func:`~toolkit.automata.jsontext.json_literal_dfa`).
    """

    name: str
    regex: str
    literal: bool = False
    value: str | None = None
    also: tuple[str, ...] = ()
    excluding: tuple[str, ...] = ()
    json_string: bool = False
    #: a special-token terminal, as written (``<|eom_id|>``, ``<[128000-128255]>``):
    #: ``regex`` is then the marks of its tokens (:mod:`toolkit.grammar.special`)
    special: str | None = None
    #: a lazy lexeme (llguidance's ``[lazy]``, ``suffix``): the language is the strings
    #: of the rest's none of whose proper prefixes is in it (it ends at its first match)
    lazy: bool = False
    #: ``(text, form)`` for the parts (``regex``, ``also``, ``excluding``) whose writer gave
    #: their language as data (:data:`toolkit.automata.dfaops.Form`: a JSON string's length
    #: bounds, a set of words, a set of JSON string values): their DFAs are built from it,
    #: never read back from the text.  The text says the same; two terminals of equal text
    #: are equal with or without forms.
    forms: tuple[tuple[str, Form], ...] = field(default=(), compare=False, repr=False)

    @property
    def is_plain(self) -> bool:
        """True when the terminal is its ``regex`` alone (no ``also``/``excluding``, not lazy)."""
        return not (self.also or self.excluding or self.lazy)

    @staticmethod
    def from_literal(name: str, value: str) -> Terminal:
        return Terminal(name, re.escape(value), True, value)

    @staticmethod
    def from_json_string(name: str, value: str) -> Terminal:
        """The terminal of every JSON text (quotes, escapes) that decodes to ``value``."""

        return Terminal(name, json_string_literal(value), value=value, json_string=True)

    def _direct(self) -> bool:
        """True when the DFA can be written down from ``value`` without the regex: a
        literal, or the JSON texts of a string, whose ``regex`` says just that."""
        if self.literal:  # lone surrogates have no UTF-8: the regex road says what they mean
            # (and a chain longer than the state limit: the regex road raises LimitExceeded)
            return (self.regex == re.escape(self.value) and not _SURROGATE.search(self.value)
                    and len(self.value.encode()) + 2 <= DEFAULT_MAX_STATES)
        if self.json_string:
            return self.regex == json_string_literal(self.value)
        return False

    def dfa(self) -> ByteDFA:
        """The terminal's minimal byte DFA, built once per terminal.

        Kept on the terminal: :func:`compile_regex` caches only small DFAs, and a
        grammar's big ones (a string with a large ``maxLength``) are needed again by
        every engine that compiles the grammar after :class:`Grammar` checked them.
        """
        cached = self.__dict__.get("_dfa")
        if cached is not None:
            return cached
        combined = bool(self.also or self.excluding)
        if not combined and self.value is not None and self._direct():
            if self.literal:
                dfa = compile_literal(self.value.encode())
            else:
                dfa = json_literal_dfa(self.value)
        elif not combined and not self.forms:
            dfa = compile_regex(self.regex)
        else:
            parts = (self.regex, tuple(self.also), tuple(self.excluding))
            dfa = compile_boolean(*parts, forms=tuple(self.forms)) if self.forms else compile_boolean(*parts)
        if self.lazy:
            dfa = shortest_matches(dfa)
        object.__setattr__(self, "_dfa", dfa)
        return dfa


@dataclass(frozen=True)
class Grammar:
    """A CFG over regular terminals (see the module doc for its language).

    ``rules`` maps each nonterminal to its alternatives, each a tuple of symbol
    names; a name is a terminal when it is a key of ``terminals``.  An empty
    alternative derives the empty string.
    """

    start: str
    rules: Mapping[str, tuple[tuple[str, ...], ...]]
    terminals: Mapping[str, Terminal]
    ignore: tuple[str, ...] = ()
    source: str | None = field(default=None, compare=False, repr=False)
    #: per rule, the generation controls written on it (``name[capture, temperature=0.7]``
    #: in llguidance's Lark): reported, and no part of the language or of any mask
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType({k: MappingProxyType(dict(v))
                                                                 for k, v in self.attributes.items()}))
        rules = {k: tuple(tuple(a) for a in v) for k, v in self.rules.items()}
        object.__setattr__(self, "rules", MappingProxyType(rules))
        object.__setattr__(self, "terminals", MappingProxyType(dict(self.terminals)))
        object.__setattr__(self, "ignore", tuple(self.ignore))
        self._check()

    def _check(self) -> None:
        if self.start not in self.rules:
            raise GrammarError(f"start symbol {self.start!r} has no rule")
        clash = set(self.rules) & set(self.terminals)
        if clash:
            raise GrammarError(f"names used both as rule and terminal: {sorted(clash)}")
        for lhs, alts in self.rules.items():
            for alt in alts:
                for sym in alt:
                    if sym not in self.rules and sym not in self.terminals:
                        raise GrammarError(f"rule {lhs!r} uses undefined symbol {sym!r}")
        for name in self.ignore:
            if name not in self.terminals:
                raise GrammarError(f"ignored terminal {name!r} is not defined")
        live = set()
        for name, t in self.terminals.items():
            check_deadline(f"the DFA of terminal {name}")
            try:
                if t.dfa().start:
                    live.add(name)
            except RegexError as e:
                raise GrammarError(f"terminal {t.name}: {e}") from e
            except LimitExceeded as e:
                raise _terminal_limit(e, t.name) from e
        productive = derives(((lhs, alt) for lhs, alts in self.rules.items() for alt in alts), live)
        object.__setattr__(self, "_live", frozenset(productive))
        if self.start not in productive:
            chain = self._why_empty(productive)
            raise Unsatisfiable(f"the language is empty: rule {self.start!r} derives no string ("
                                + " -> ".join(repr(x) for x in chain) + f": {self._dead_end(chain[-1])})",
                                rule=chain[-1], path=tuple(chain))

    def _why_empty(self, productive: set) -> list[str]:
        """From the start, the first unproductive symbol of each first alternative,
        down to a dead end (a rule without alternatives, an empty terminal, a cycle)."""
        chain = [self.start]
        while chain[-1] in self.rules:
            alts = self.rules[chain[-1]]
            nxt = next((x for x in alts[0] if x not in productive), None) if alts else None
            if nxt is None or nxt in chain:
                if nxt is not None:
                    chain.append(nxt)
                break
            chain.append(nxt)
        return chain

    def _dead_end(self, name: str) -> str:
        if name in self.terminals:
            return f"terminal {name!r} matches no string"
        if not self.rules.get(name):
            return f"rule {name!r} has no alternative"
        return f"rule {name!r} only derives itself, never a string"

    # ---------------------------------------------------------- builders --

    @staticmethod
    def from_lark(text: str, start: str = "start") -> Grammar:
        """Parse a Lark grammar (rules, terminals, ``%ignore``, ``%import common``), in
        llguidance's dialect (``%json``, ``&``/``~``, ``{m,n}``, ``%regex``, ``#``
        comments: :mod:`toolkit.grammar.lark_dialect`).

        EBNF (``?``, ``*``, ``+``, ``[]``, ``~``) is expanded by lark's grammar loader.
        Errors are :class:`GrammarError` with the line and column of the offending
        text; a dialect construct masklab does not read is
        :class:`UnsupportedGrammar`, named, with its line and column.
        """
        return _from_lark(text, start)

    @staticmethod
    def from_regex(pattern: str) -> Grammar:
        """The grammar whose language is the regex's: ``start: PATTERN``."""
        compile_regex(pattern)  # RegexError early, with the pattern in the message
        return Grammar(
            start="start",
            rules={"start": (("PATTERN",),)},
            terminals={"PATTERN": Terminal("PATTERN", pattern)},
            source=pattern,
        )

    @staticmethod
    def from_json_schema(schema, *, whitespace: str = "flexible", strict: bool = True, **options: Any) -> Grammar:
        """Compile a JSON Schema; see :func:`toolkit.jsonschema.from_json_schema` (its
        limits ``max_rules`` and ``max_depth``, and ``property_order``, pass through)."""
        return schema_compiler()(schema, whitespace=whitespace, strict=strict, **options)

    # ---------------------------------------------------- special tokens --

    @property
    def special_terminals(self) -> tuple[str, ...]:
        """The terminals that are special tokens (``<|eom_id|>``, ``<[128010]>``)."""
        return tuple(n for n, t in self.terminals.items() if t.special is not None)

    def special_ids(self, vocab: Any) -> frozenset[int]:
        """The ids of every special token the grammar names, in ``vocab``
        (:func:`toolkit.grammar.special.resolve`: a typed error for an unknown name)."""
        return frozenset(i for ids in self._resolved(vocab).values() for i in ids)

    def bind(self, vocab: Any) -> Grammar:
        """The grammar for ``vocab``: each special terminal's language narrowed to the
        marks of its tokens there (:mod:`toolkit.grammar.special`); ``self`` when it has none.
        Engines compile the bound grammar over :func:`toolkit.grammar.special.vocab_view`."""
        if not self.special_terminals:
            return self
        resolved = self._resolved(vocab)
        cache = self.__dict__.setdefault("_bound", {})
        key = tuple(sorted(resolved.items()))  # what binding depends on (not the vocabulary's id)
        if key not in cache:
            terminals = {n: Terminal(n, mark_regex(resolved[n]), special=t.special) if t.special is not None else t
                         for n, t in self.terminals.items()}
            bound = Grammar(start=self.start, rules=self.rules, terminals=terminals, ignore=self.ignore,
                            source=self.source, attributes=self.attributes)
            bound.__dict__["_bound_to"] = vocab.name
            cache[key] = bound
        return cache[key]

    @property
    def bound_to(self) -> str | None:
        """The vocabulary name :meth:`bind` made this grammar for (None: not bound)."""
        return self.__dict__.get("_bound_to")

    def _resolved(self, vocab: Any) -> dict[str, tuple[int, ...]]:
        return {n: resolve(parse_spec(self.terminals[n].special), vocab) for n in self.special_terminals}

    # ----------------------------------------------------------- queries --

    def is_terminal(self, name: str) -> bool:
        return name in self.terminals

    def symbols(self) -> list[str]:
        return list(self.rules) + list(self.terminals)

    def accepts(self, data: bytes | str) -> bool:
        """True when ``data`` (bytes, or text as UTF-8) is in the grammar's language."""

        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")  # U+DCFF: a special token's mark
        rec = ByteRecognizer(compile_cfg(self))
        return rec.push_bytes(data) and rec.is_accepting()

    def accepts_prefix(self, data: bytes | str) -> bool:
        """True when ``data`` can be continued into a sentence of the grammar's language
        (the question every mask answers for one more token; ``naive``'s semantics)."""

        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        return ByteRecognizer(compile_cfg(self)).push_bytes(data)

    @staticmethod
    def from_gbnf(text: str, start: str = "root", **limits: int) -> Grammar:
        """Parse llama.cpp's GBNF (:func:`toolkit.grammar.gbnf.read_gbnf`): rules with
        ``::=``, ``root`` the start, alternation, groups, ``* + ?``, ``{m,n}``, strings and
        character classes with escapes, comments.  Errors are :class:`GrammarError` with
        the line and column; ``limits`` (``max_repetition``, ``max_symbols``) pass through
        to the reader, whose :class:`LimitExceeded` names them."""
        return _GBNF["read"](text, start, **limits)

    # ----------------------------------------------------------- writers --

    def to_gbnf(self) -> str:
        """The grammar as GBNF of the same language (:func:`toolkit.grammar.gbnf.write_gbnf`),
        which llama.cpp and xgrammar's EBNF read: ``%ignore`` matter allowed around every
        terminal, the root rule named ``root``."""
        return _GBNF["write"](self)

    def to_lark(self, *, boolean: str = "native", max_length: int = 1_000_000) -> str:
        """Lark text for llguidance (and any Lark-syntax engine) with the same language.

        Names are sanitized to Lark's conventions; terminal regexes go through
        :func:`canonical_regex`, so shorthand classes and flags mean the same in
        every engine.  An empty language is written as a terminal that matches nothing.

        Terminals that intersect or subtract regexes are written with llguidance's
        ``(/a/ & /b/ & ~/c/)`` (``boolean="native"``), or, for engines without those
        operators (xgrammar), as one plain regex written from the terminal's DFA
        (``boolean="regex"``; :class:`LimitExceeded` when it passes ``max_length``).
        """
        if boolean not in ("native", "regex"):
            raise ValueError(f"boolean must be 'native' or 'regex', not {boolean!r}")
        rules = self._productive_rules()
        rule_names = _sanitize(rules, _RULE_NAME, "r", str.lower)
        term_names = _sanitize(self.terminals, _TERM_NAME, "T", str.upper, taken=set(rule_names.values()))
        lines = []
        if rule_names.get(self.start) != "start":
            if "start" in rule_names.values():
                # A user rule already called "start" that is not the start symbol.
                raise GrammarError("cannot write Lark: a non-start rule is named 'start'")
            lines.append(f"start: {rule_names[self.start]}")

        def sym(s: str) -> str:
            if s in self.terminals:
                special = self.terminals[s].special
                return special if special is not None else term_names[s]
            return rule_names[s]

        for lhs, alts in rules.items():
            body = " | ".join(" ".join(sym(s) for s in alt) if alt else '""' for alt in alts)
            limit = self.attributes.get(lhs, {}).get("max_tokens")  # the one attribute that is not language
            lines.append(f"{rule_names[lhs]}{f'[max_tokens={limit}]' if limit else ''}: {body}")
        used = {s for alts in rules.values() for alt in alts for s in alt} | set(self.ignore)
        for name, t in self.terminals.items():
            if name in used and t.special is None:
                if boolean == "regex" and _boolean_terminal(t):
                    body = "/" + canonical_regex(_plain_regex(t, max_length)) + "/"
                else:
                    body = _lark_terminal(t)
                lines.append(f"{term_names[name]}: {body}")
        for name in self.ignore:
            lines.append(f"%ignore {term_names[name]}")
        return "\n".join(lines) + "\n"

    def to_regex(self, *, max_depth: int | None = None, max_length: int = 1_000_000,
                 max_steps: int | None = None) -> str:
        """A single regex (:mod:`toolkit.automata.regex`'s dialect) for the grammar's language.

        * A grammar built by :meth:`from_regex` gives back its pattern.
        * Rules are inlined (alternatives as ``(?:a|b)``, each terminal as ``(?:regex)``,
          literals as their escaped text); with ``ignore`` terminals, ``(?:IGN)*`` (the
          alternation of the ignore regexes) stands before every terminal and at the
          end, exactly the scannerless language (ignored matter before, between and
          after terminals, once per gap however many empty expansions sit in it).
        * Direct left or right self-recursion (``A: A b | a A | c`` with ``A`` in no
          other position, which is what Lark's ``x*``/``x+`` and list rules expand to)
          is the repetition ``(?:a)*c(?:b)*``: exact, and not counted as recursion.
        * Any other recursion is not regular.  With ``max_depth=None`` it raises
          :class:`UnsupportedGrammar` naming a rule on the cycle.  With
          ``max_depth=d`` it is unrolled: in a derivation tree (a loop above counting
          as one node however many times it repeats), every rule may occur at most
          ``d`` times *nested inside itself*, i.e. at most ``d + 1`` times on any path
          from the root.  ``d = 0`` allows no recursion at all; for ``s: "[" s* "]"``,
          ``d = 3`` accepts ``[[[[]]]]`` and rejects ``[[[[[]]]]]``.  Alternatives that
          would go deeper are dropped, so the regex accepts a **subset** of the
          grammar's language (deeper nesting is rejected: tighter, never looser), and
          exactly the language when nothing is recursive.  A productive start always
          has a derivation with no rule repeated on a path, so any ``d >= 0`` leaves
          one (``LimitExceeded("max_depth")`` guards the impossible case).
        * Unproductive rules and terminals with an empty language are dropped; a
          grammar whose language is empty gives ``[^\\d\\D]``.
        * A terminal that intersects or subtracts regexes (``also``/``excluding``:
          JSON keys other than the listed properties, patterns with length limits)
          is written from its DFA by state elimination: exact, though possibly long.

        Unrolling multiplies the text (each level repeats what it contains), so the
        text is capped: more than ``max_length`` characters raises
        :class:`LimitExceeded` ``("max_length")`` as soon as a piece exceeds it (and
        more than ``max_steps`` rule expansions, two million by default,
        ``("max_steps")``, whatever the text, so that no ``max_depth`` hangs).  Rules
        are rendered bottom-up on a stack of their own: a chain of any length meets no
        recursion limit.
        """
        return _grammar_to_regex(self, max_depth, max_length, _TO_REGEX_MAX_STEPS if max_steps is None else max_steps)

    def is_empty(self) -> bool:
        """True when the grammar derives no string.  Always False for a Grammar: one
        whose language is empty is refused at construction (:class:`Unsatisfiable`)."""
        return self.start not in self._live_symbols()

    def _live_symbols(self) -> set[str]:
        """The terminals with a nonempty language and the rules that derive a string
        (computed by the construction's check)."""
        return set(self.__dict__["_live"])

    def _productive_rules(self) -> dict[str, tuple[tuple[str, ...], ...]]:
        """The rules without alternatives that derive no string (Lark cannot write them)."""
        live = self._live_symbols()
        return {
            lhs: tuple(alt for alt in alts if all(s in live for s in alt))
            for lhs, alts in self.rules.items()
            if lhs in live
        }

    def __repr__(self) -> str:
        return (
            f"Grammar(start={self.start!r}, rules={len(self.rules)}, "
            f"terminals={len(self.terminals)}, ignore={list(self.ignore)})"
        )


def _sanitize(names: Iterable[str], ok: re.Pattern, prefix: str, case, taken: set[str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    used = set(taken or ())
    for i, n in enumerate(names):
        new = n if ok.match(n) else f"{prefix}{i}_" + re.sub(r"[^a-zA-Z0-9]+", "_", case(n)).strip("_")
        new = case(new) if not ok.match(new) else new
        while new in used:
            new += "_"
        used.add(new)
        out[n] = new
    return out


def _terminal_limit(e: LimitExceeded, name: str, line: int | None = None) -> LimitExceeded:
    """The regex compiler's limit (its default ``max_states``) met by terminal ``name``'s
    DFA, saying which terminal (and its grammar line); a deadline passes unchanged."""
    if isinstance(e, TimeLimitExceeded):
        return e
    where = f"the DFA of terminal {name}" + (f" (line {line})" if line is not None else "")
    where += ", built with toolkit.automata.regex.compile_regex's defaults"
    return LimitExceeded(e.limit, e.value, e.maximum, "; ".join(x for x in (e.detail, where) if x))


def _lark_terminal(t: Terminal) -> str:
    if t.literal and t.value is not None and t.value.isprintable() and t.value.isascii():
        return json.dumps(t.value)
    if t.lazy:  # a prefix-free language: the lexer's longest match is the shortest
        return "/" + canonical_regex(dfa_regex(t.dfa())) + "/"
    text = "/" + canonical_regex(t.regex) + "/"
    if t.is_plain:
        return text
    parts = [text] + ["/" + canonical_regex(r) + "/" for r in t.also]
    parts += ["~/" + canonical_regex(r) + "/" for r in t.excluding]
    return "(" + " & ".join(parts) + ")"


# ------------------------------------------------------------- from_lark --


def _pattern_regex(pattern) -> tuple[str, bool, str | None]:
    """A lark Pattern as (regex, literal, value)."""
    flags = "".join(sorted(pattern.flags))
    if type(pattern).__name__ == "PatternStr":
        rx = re.escape(pattern.value)
        if flags:
            return f"(?{flags}:{rx})", False, None
        return rx, True, pattern.value
    rx = pattern.value
    rx = f"(?{flags}:{rx})" if flags else rx
    if _SHORTHAND.search(rx):  # Lark's (Python's) and llguidance's (Rust's) \d \w \s are Unicode
        rx = canonical_regex(rx, unicode=True)
    return rx, False, None


def _locate(text: str, name: str, skip_definition: bool = True) -> tuple[int | None, int | None]:
    """1-based line and column of the first use of ``name`` in the grammar text."""
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(rf"(?<![\w.]){re.escape(name)}(?!\w)", line):
            before = line[: m.start()].strip()
            after = line[m.end() :].lstrip()
            if skip_definition and not before.lstrip("?!_") and after.startswith(":"):
                continue
            return lineno, m.start() + 1
    return None, None


def _locate_text(text: str, fragment: str) -> tuple[int | None, int | None]:
    for lineno, line in enumerate(text.splitlines(), 1):
        col = line.find(fragment)
        if col >= 0:
            return lineno, col + 1
    return None, None


def _lark_error(text: str, e: Exception) -> GrammarError:
    msg = str(e).strip()
    first = msg.splitlines()[0] if msg else type(e).__name__
    line = getattr(e, "line", None)
    column = getattr(e, "column", None)
    if isinstance(line, int) and line < 0:
        line = column = None
    m = re.search(r"at line (\d+) column (\d+)", msg)
    if m and line is None:
        line, column = int(m.group(1)), int(m.group(2))
    m = re.search(r"Rule '([^']+)' used but not defined", msg) or re.search(
        r"undefined rule: NonTerminal\('([^']+)'\)", msg
    ) or re.search(r"Terminal used but not defined: (\w+)", msg)
    if m and line is None:
        line, column = _locate(text, m.group(1))
        first = f"undefined symbol {m.group(1)!r}: {first}"
    return GrammarError(first, line, column)


def _from_lark(text: str, start: str) -> Grammar:
    """Lark text, in llguidance's dialect (:mod:`toolkit.grammar.lark_dialect`), to a Grammar."""
    if not isinstance(text, str):
        raise TypeError("Lark grammar text must be str")
    try:
        plain, side = translate(text)
        if side.plain:
            return _from_plain_lark(plain, start, frozenset(side.helpers), source=text, attributes=side.attributes)
        return _with_dialect(_from_plain_lark(plain, start, frozenset(side.helpers)), side, text)
    except RecursionError as e:  # the dialect's readers (a %if condition, a terminal's & and ~) recurse
        raise GrammarError("cannot read Lark grammar: nested too deeply (a few hundred levels of parentheses or "
                           "of a %if condition at most)") from e


def _with_dialect(g: Grammar, side: Any, source: str) -> Grammar:
    """``g`` with what plain Lark could not say: boolean terminals (from their helper
    terminals), ``%regex`` terminals, and ``%json`` schemas spliced in as rules; the
    grammar of the Lark text ``source``, with its rule attributes."""
    terminals = dict(g.terminals)
    rules = {k: list(v) for k, v in g.rules.items()}
    for name, text in side.special.items():
        terminals[name] = Terminal(name, ANY_MARK_REGEX, special=text)
    for name, tree in side.boolean.items():
        terminals[name] = _terminal_of_tree(name, tree, terminals)
    for rule, attrs in side.attributes.items():
        if attrs.get("lazy") or "suffix" in attrs:
            _make_lazy(rule, attrs, rules, terminals)
    ws_ignored = bool(g.ignore) and all(terminals[n].dfa().fullmatch(b" \t\n\r") for n in g.ignore)
    for name, schema in side.json.items():
        check_deadline(f"reading the Lark grammar, %json of {name}")
        schema, opts = _x_guidance(schema, ws_ignored)
        sub = schema_compiler()(schema, whitespace="compact", spelling=opts["spelling"], strict=not opts["lenient"])
        prefix = f"{name}__"
        ren = {s: prefix + s for s in (*sub.rules, *sub.terminals)}
        separators = {} if opts["whitespace_flexible"] else {",": opts["item_separator"], ":": opts["key_separator"]}
        for t, term in sub.terminals.items():
            if term.literal and term.value in separators:  # llguidance's separators, when not flexible
                terminals[ren[t]] = Terminal.from_literal(ren[t], separators[term.value])
                continue
            terminals[ren[t]] = _renamed(term, ren[t])
        wrap = {}
        if not ws_ignored and opts["whitespace_flexible"]:  # JSON whitespace between the schema's tokens
            ws = prefix + "WS"
            terminals[ws] = Terminal(ws, opts["whitespace_pattern"])
            for t in sub.terminals:
                wrap[t] = f"{prefix}ws_{t}"
                rules[wrap[t]] = [(ren[t],), (ws, ren[t])]
        for r, alts in sub.rules.items():
            rules[ren[r]] = [tuple(wrap.get(s, ren[s]) for s in alt) for alt in alts]
        rules[name] = [(_json_lead(sub, sub.start, ren, wrap, rules, prefix),)] if wrap else [(ren[sub.start],)]
    for name, (text, line) in side.lark.items():
        _splice_lark(name, text, line, g, rules, terminals)
    used = {s for alts in rules.values() for alt in alts for s in alt} | set(g.ignore)
    for h in side.helpers:
        rules.pop(h, None)
    terminals = {k: v for k, v in terminals.items() if k in used}
    return Grammar(start=g.start, rules={k: tuple(v) for k, v in rules.items()}, terminals=terminals,
                   ignore=g.ignore, source=source, attributes=side.attributes)


def _renamed(t: Terminal, name: str) -> Terminal:
    """``t`` under another name (a spliced grammar's terminal), with the DFA it has built
    already: the language is the same, and a nested grammar's terminals were checked
    (their DFAs built) when it was read."""
    new = dataclasses.replace(t, name=name)
    dfa = t.__dict__.get("_dfa")
    if dfa is not None:
        object.__setattr__(new, "_dfa", dfa)
    return new


_ANY_TEXT = "[\\d\\D]*"


def _splice_lark(name: str, text: str, line: int, g: Grammar, rules: dict[str, list], terminals: dict) -> None:
    """A nested ``%lark { ... }`` grammar read on its own and spliced in as the rule
    ``name``: its rules and terminals renamed under ``name``'s prefix.  llguidance lexes
    a nested grammar apart from the outer one, which one lexer over both matches
    unless either ignores text: such a grammar is refused."""
    sub = _from_lark(text, "start")  # its errors' lines count from the nested grammar's brace
    if sub.ignore or g.ignore:
        raise UnsupportedGrammar(f"%lark at line {line}: %ignore in the nested or the outer grammar (llguidance "
                                 "ignores text apart in each)", line, 1)
    prefix = f"{name}__"
    ren = {s: prefix + s for s in (*sub.rules, *sub.terminals)}
    for t, term in sub.terminals.items():
        terminals[ren[t]] = _renamed(term, ren[t])
    for r, alts in sub.rules.items():
        rules[ren[r]] = [tuple(ren[s] for s in alt) for alt in alts]
    rules[name] = [(ren[sub.start],)]


def _terminal_of_tree(name: str, tree: tuple, terminals: Mapping[str, Terminal]) -> Terminal:
    """The terminal of a body with ``&`` and ``~`` (:data:`toolkit.grammar.lark_dialect.BoolTree`).

    Intersections of parts and complemented parts at its top are the terminal's
    ``also`` and ``excluding`` (one DFA product, no regex written); a ``&`` or ``~``
    deeper down is built as its own DFA and written back as a regex
    (:func:`~toolkit.automata.dfaops.dfa_regex`) into the body around it."""
    conjuncts = tree[1] if tree[0] == "and" else (tree,)
    pos = [c[1] for c in conjuncts if c[0] == "part"]
    neg = [c[1][1] for c in conjuncts if c[0] == "not" and c[1][0] == "part"]
    if len(pos) + len(neg) == len(conjuncts):
        forms = tuple(dict.fromkeys(f for h in (*pos, *neg) for f in terminals[h].forms))
        return Terminal(name, terminals[pos[0]].regex if pos else _ANY_TEXT,
                        also=tuple(terminals[h].regex for h in pos[1:]),
                        excluding=tuple(terminals[h].regex for h in neg), forms=forms)
    return Terminal(name, _bool_regex(tree, terminals))


def _bool_regex(tree: tuple, terminals: Mapping[str, Terminal]) -> str:
    """A regex of a :data:`~toolkit.grammar.lark_dialect.BoolTree`'s language."""
    kind = tree[0]
    if kind == "part":
        t = terminals[tree[1]]
        return _embeddable(t.regex if t.is_plain else dfa_regex(t.dfa()))
    if kind == "alt":
        return "|".join(f"(?:{_bool_regex(c, terminals)})" for c in tree[1])
    if kind == "seq":
        return "".join(f"(?:{_bool_regex(c, terminals)})" for c in tree[1])
    if kind == "repeat":
        return f"(?:{_bool_regex(tree[1], terminals)}){tree[2]}"
    if kind == "not":
        return _embeddable(dfa_regex(compile_boolean(_ANY_TEXT, (), (_bool_regex(tree[1], terminals),))))
    parts = [_bool_regex(c, terminals) for c in tree[1]]  # "and"
    return _embeddable(dfa_regex(compile_boolean(parts[0], tuple(parts[1:]))))


X_GUIDANCE = {"whitespace_flexible": True, "whitespace_pattern": "[ \\t\\n\\r]+", "item_separator": ",",
              "key_separator": ":", "lenient": False, "json_allowed_escapes": 'nrbtf"\\u',
              "json_allow_general_unicode_escapes": False, "coerce_one_of": False}
"""``x-guidance`` options of a ``%json`` schema read (with llguidance's defaults): JSON
whitespace between the schema's tokens (``whitespace_pattern``) or, not flexible, the
separators alone; ``lenient`` drops the keywords masklab cannot express (a grammar
looser than the schema, as asked); ``json_allowed_escapes`` (the letters a string may
escape) and ``json_allow_general_unicode_escapes`` (``\\u`` for every character of
strings without a ``pattern`` and of keys) choose how strings are spelled
(:func:`toolkit.automata.jsontext.llguidance_spelling`); ``coerce_one_of`` reads every
``oneOf`` as ``anyOf`` (looser than the schema, as asked: a value may match two
branches).  Others are refused by name."""


def _x_guidance(schema: Any, ws_ignored: bool) -> tuple[Any, dict[str, Any]]:
    """``schema`` without its ``x-guidance``, and the options (:data:`X_GUIDANCE`)."""
    opts = dict(X_GUIDANCE, spelling="llguidance")
    if not isinstance(schema, dict) or "x-guidance" not in schema:
        return schema, opts
    given = schema["x-guidance"]
    if not isinstance(given, dict):
        raise GrammarError(f"%json: x-guidance must be an object of options, not {json.dumps(given)[:40]}")
    for key, value in given.items():
        if key not in X_GUIDANCE:
            raise UnsupportedGrammar(f"%json: the x-guidance option {key!r} is not read by masklab (read: "
                                     f"{', '.join(X_GUIDANCE)})")
        if not isinstance(value, type(X_GUIDANCE[key])):
            raise GrammarError(f"%json: x-guidance {key} must be a {type(X_GUIDANCE[key]).__name__}, not "
                               f"{json.dumps(value)[:40]}")
        opts[key] = value
    if ws_ignored and set(given) & {"whitespace_flexible", "whitespace_pattern", "item_separator", "key_separator"}:
        raise UnsupportedGrammar("%json: x-guidance whitespace options in a grammar with %ignore (the ignored "
                                 "text stands between the schema's tokens too)")
    if opts["whitespace_pattern"] != X_GUIDANCE["whitespace_pattern"]:
        try:
            compile_regex(opts["whitespace_pattern"], unicode=True)
        except RegexError as e:
            raise GrammarError(f"%json: x-guidance whitespace_pattern: {e}") from e
        opts["whitespace_pattern"] = canonical_regex(opts["whitespace_pattern"], unicode=True)
    try:
        opts["spelling"] = llguidance_spelling(opts["json_allowed_escapes"], opts["json_allow_general_unicode_escapes"])
    except ValueError as e:
        raise GrammarError(f"%json: x-guidance {e}") from e
    schema = {k: v for k, v in schema.items() if k != "x-guidance"}
    if opts["coerce_one_of"]:
        schema = map_subschemas(schema, _one_of_as_any_of)
    return schema, opts


def _one_of_as_any_of(node: dict[str, Any]) -> dict[str, Any]:
    """``oneOf`` read as ``anyOf`` (beside an ``anyOf``: both, in an ``allOf``)."""
    if "oneOf" not in node:
        return node
    branches = node.pop("oneOf")
    if "anyOf" not in node:
        node["anyOf"] = branches
    else:
        node["allOf"] = [*node.get("allOf", []), {"anyOf": branches}]
    return node


def _make_lazy(rule: str, attrs: Mapping[str, Any], rules: dict[str, list[tuple[str, ...]]],
               terminals: dict[str, Terminal]) -> None:
    """``rule[lazy]`` / ``rule[suffix=S]``: the rule's one terminal (followed by ``S``)
    becomes a lazy terminal of its own (:attr:`Terminal.lazy`)."""
    alts = rules.get(rule) or []
    if len(alts) != 1 or len(alts[0]) != 1 or alts[0][0] not in terminals:
        raise UnsupportedGrammar(f"{rule}[{'lazy' if attrs.get('lazy') else 'suffix=...'}]: the rule's body must be "
                                 "one terminal (a string, a /regex/ or a TERMINAL), as llguidance requires")
    base = terminals[alts[0][0]]
    if base.special is not None:
        raise UnsupportedGrammar(f"{rule}[lazy/suffix]: its body is the special token {base.special}, not text")
    rx = _embeddable(base.regex if base.is_plain else dfa_regex(base.dfa()))
    if "suffix" in attrs:
        kind, value = attrs["suffix"]
        if kind == "name":
            if value not in terminals:
                raise GrammarError(f"{rule}[suffix={value}]: {value} is not a terminal")
            t = terminals[value]
            value = t.regex if t.is_plain else dfa_regex(t.dfa())
        rx = f"(?:{rx})(?:{_embeddable(value)})"
    name, n = f"{rule.upper().lstrip('_')}_LAZY", 0
    while f"{name}{n or ''}" in terminals:
        n += 1
    name = f"{name}{n or ''}"
    terminals[name] = Terminal(name, rx, lazy=True)
    rules[rule] = [(name,)]


def _json_lead(sub: Grammar, rule: str, ren: dict[str, str], wrap: dict[str, str],
               rules: dict[str, list[tuple[str, ...]]], prefix: str) -> str:
    """The spliced ``%json`` rule ``rule`` with no whitespace before its first token
    (llguidance allows JSON whitespace between the schema's tokens only): a copy of
    each rule at the leftmost position whose first symbol is its bare terminal or that
    rule's copy, the rest as wrapped.  A JSON value is never empty, so the first
    symbol of every leftmost alternative is where its first token comes from (a
    nullable one there is refused rather than guessed)."""
    nullable = derives(((lhs, alt) for lhs, alts in sub.rules.items() for alt in alts), set())
    made: dict[str, str] = {rule: f"{prefix}lead_{rule}"}
    # depth first from ``rule`` on a stack of its own (a schema's leftmost rules can nest
    # as deep as the schema): per rule being copied, the alternative it is at and the
    # copies made so far; a rule is written when all its alternatives are, as a
    # recursive walk would (a rule met again, on a cycle, is referred to by its name)
    stack: list[tuple[str, int, list[tuple[str, ...]]]] = [(rule, 0, [])]
    while stack:
        r, i, alts = stack[-1]
        if i == len(sub.rules[r]):
            stack.pop()
            rules[made[r]] = alts
            continue
        alt = sub.rules[r][i]
        if not alt:
            raise UnsupportedGrammar(f"%json: the schema's rule {r!r} may be empty where the value starts")
        first, rest = alt[0], alt[1:]
        if first in sub.terminals:
            head = ren[first]
        elif first in nullable:
            raise UnsupportedGrammar(f"%json: the schema's rule {first!r} may be empty where the value starts")
        elif first not in made:
            made[first] = f"{prefix}lead_{first}"
            stack.append((first, 0, []))
            continue  # this alternative again once ``first`` is copied
        else:
            head = made[first]
        alts.append((head, *(wrap.get(x, ren[x]) for x in rest)))
        stack[-1] = (r, i + 1, alts)
    return made[rule]


def _from_plain_lark(text: str, start: str, keep: frozenset[str] = frozenset(), *, source: str | None = None,
                     attributes: Mapping[str, Mapping[str, Any]] | None = None) -> Grammar:
    """Plain Lark text to a Grammar: lark reads the text and expands EBNF (its grammar
    loader; no lark parser is built, so a terminal may match the empty string, as in
    llguidance).  ``keep``: terminals to keep though no rule uses them.  ``source`` and
    ``attributes``: the Grammar's (default: ``text``, none), when ``text`` is the plain
    Lark written for a text in llguidance's dialect.

    lark's loader is one call that checks no deadline (about a millisecond per rule:
    20,000 rules take a minute or more), so under a compile's :func:`deadline` it runs
    under :func:`~toolkit.core.errors.time_limit` for the time left (in the main thread;
    elsewhere it runs to its end and the deadline is checked after it)."""
    # lark loads with the first Lark text read (commands that read none start without it)
    from lark.exceptions import LarkError
    from lark.load_grammar import load_grammar

    check_deadline("reading the Lark grammar")
    left = deadline_left()
    try:
        with time_limit(max(left[0], 1e-3) if left is not None else None, left[1] if left is not None else "time"):
            loaded, _ = load_grammar(text, "<grammar>", [], True)
            tds, lark_rules, ignore = loaded.compile([start], set(keep))
    except TimeLimitExceeded:
        check_deadline("reading the Lark grammar (lark's grammar loader)")
        raise
    except LarkError as e:
        raise _lark_error(text, e) from e
    except RecursionError as e:
        raise GrammarError("cannot read Lark grammar: nested too deeply for lark's grammar loader (its parse "
                           "tree is walked recursively: a few hundred levels of parentheses at most)") from e
    except Exception as e:  # lark raises plain exceptions on some malformed input
        raise GrammarError(f"cannot read Lark grammar: {type(e).__name__}: {e}") from e

    terminals: dict[str, Terminal] = {}
    for td in tds:
        check_deadline(f"reading the Lark grammar, terminal {td.name}")
        rx, literal, value = _pattern_regex(td.pattern)
        try:
            compile_regex(rx)
        except LimitExceeded as e:
            raise _terminal_limit(e, td.name, _locate(text, td.name, skip_definition=False)[0]) from e
        except RegexError as e:
            line, column = _locate(text, td.name, skip_definition=False)
            if line is None:  # an anonymous terminal: find its text instead
                line, column = _locate_text(text, td.pattern.value)
            raise GrammarError(f"terminal {td.name}: {e}", line, column) from e
        terminals[td.name] = Terminal(td.name, rx, literal, value)

    rules: dict[str, list[tuple[str, ...]]] = {}
    for r in lark_rules:
        rules.setdefault(r.origin.name, []).append(tuple(s.name for s in r.expansion))
    for alts in rules.values():
        for alt in alts:
            for s in alt:
                if s not in rules and s not in terminals:
                    line, column = _locate(text, s)
                    raise GrammarError(f"undefined symbol {s!r}", line, column)
    return Grammar(
        start=start,
        rules={k: tuple(v) for k, v in rules.items()},
        terminals=terminals,
        ignore=tuple(ignore),
        source=text if source is None else source,
        attributes=attributes or {},
    )


def bind_gbnf(read: Callable[..., Grammar], write: Callable[[Grammar], str]) -> None:
    """Give :meth:`Grammar.from_gbnf` and :meth:`Grammar.to_gbnf` their reader and writer:
    :mod:`toolkit.grammar.gbnf` imports this module, so it hands them down when imported
    (``toolkit.grammar`` imports it, so they are there wherever a Grammar is)."""
    _GBNF.update(read=read, write=write)


@dataclass(frozen=True)
class RegexText:
    """A regular expression (Python ``re`` syntax, as :meth:`Grammar.from_regex` reads
    it) for an engine's ``compile``: a bare ``str`` could be a regex, Lark or a schema's
    JSON text, so engines refuse one (:func:`toolkit.grammar.inputs.untold_text`)."""

    #: the input format's name (:mod:`toolkit.grammar.inputs`): what ``native_inputs`` lists
    input_format: ClassVar[str] = "regex"
    text: str


# ------------------------------------------------------------ to_regex --


_SHORTHAND = re.compile(r"\\[dDwWsS]")
_NOTHING_REGEX = "[^\\d\\D]"  # the empty language (toolkit.automata.regex writes it so too)
_EPS: tuple[bool, str] = (False, "")
_GLOBAL_FLAGS = re.compile(r"^\(\?([aiLmsux]+)\)")
_CLASS_PLUS = re.compile(r"^\[\^?[^\[\]\\]*(?:\\.[^\[\]\\]*)*\]\+$")  # one class, then +
_TO_REGEX_MAX_STEPS = 2_000_000
"""Backstop on the rule expansions one :meth:`Grammar.to_regex` visits, so that a huge
``max_depth`` fails fast even before any text grows (``LimitExceeded("max_steps")``, its
``max_steps`` argument)."""


def _boolean_terminal(t: Terminal) -> bool:
    """True when ``t`` intersects or subtracts regexes (``also``/``excluding``) or is
    lazy: its language is written as a regex from its DFA."""
    return bool(getattr(t, "also", ()) or getattr(t, "excluding", ()) or getattr(t, "lazy", False))


def _plain_regex(t: Terminal, max_length: int) -> str:
    """The terminal's regex; for one that intersects or subtracts regexes, a regex
    written from its DFA (:func:`toolkit.automata.dfaops.dfa_regex`)."""
    if _boolean_terminal(t):
        return dfa_regex(t.dfa(), max_length)
    return t.regex


def _embeddable(pattern: str) -> str:
    """``pattern`` fit to sit inside a group of a larger pattern, same language.

    A leading ``^`` and a trailing ``$`` are dropped (redundant under full match, an
    error inside a larger pattern), and leading global flags ``(?i)`` become a
    scoped group ``(?i:...)``.
    """
    p = strip_anchors(pattern)
    m = _GLOBAL_FLAGS.match(p)
    if m:
        p = f"(?{m.group(1)}:{p[m.end():]})"
    return p


def _sccs(nodes: list[str], succ: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's, iterative: grammars can be deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


class _RegexWriter:
    """:meth:`Grammar.to_regex` (see there for the language and the depth rule).

    A rendering is ``(lead, body)``: the regex ``W body`` when ``lead`` (``W`` being
    ``(?:IGN)*``, hoisted out of alternatives whose branches all start with it),
    else just ``body``; ``body`` is always safe to concatenate.  ``_EPS`` is the
    empty string, ``None`` the empty language.  Renderings are memoized per
    ``(rule, counts)``, ``counts`` being the occurrences of each rule of the rule's
    recursive component on the current path (``()`` outside recursion).
    """

    def __init__(self, g: Grammar, max_depth: int | None, max_length: int,
                 max_steps: int = _TO_REGEX_MAX_STEPS) -> None:
        self.max_length = max_length
        self.max_steps = max_steps
        self.max_depth = max_depth
        self.steps = 0
        live = g._live_symbols()
        terms = {n for n in g.terminals if n in live}
        self.empty = g.start not in live
        # Productive alternatives only; A -> A adds nothing to the language.
        self.rules = {
            lhs: tuple(dict.fromkeys(
                alt for alt in alts if all(s in live for s in alt) and alt != (lhs,)
            ))
            for lhs, alts in g.rules.items()
            if lhs in live
        }
        ign = [g.terminals[n] for n in dict.fromkeys(g.ignore) if n in terms]
        texts = list(dict.fromkeys(_embeddable(_plain_regex(t, max_length)) for t in ign))
        if len(texts) == 1 and _CLASS_PLUS.match(texts[0]):
            self.ws = texts[0][:-1] + "*"  # (?:[...]+)* is [...]*
        elif len(texts) == 1:
            self.ws = "(?:" + texts[0] + ")*"
        elif texts:
            self.ws = "(?:" + "|".join(f"(?:{x})" for x in texts) + ")*"
        else:
            self.ws = ""
        self.terminals = g.terminals
        self.term_item: dict[str, tuple[bool, str]] = {}  # filled as terminals are used
        # Direct left/right self-recursion (A -> A b | a A | c, A elsewhere in no
        # alternative) is the repetition a* c b*: a loop, not a nesting.
        self.loops: dict[str, tuple[tuple, tuple, tuple]] = {}
        for lhs, alts in self.rules.items():
            left, right, base, linear, rec = [], [], [], True, False
            for alt in alts:
                n = alt.count(lhs)
                if n == 0:
                    base.append(alt)
                elif n == 1 and alt[0] == lhs:
                    left.append(alt[1:])
                    rec = True
                elif n == 1 and alt[-1] == lhs:
                    right.append(alt[:-1])
                    rec = True
                else:
                    linear = False
            if linear and rec:
                self.loops[lhs] = (tuple(right), tuple(base), tuple(left))
        succ: dict[str, list[str]] = {}
        for lhs, alts in self.rules.items():
            parts = self.loops[lhs] if lhs in self.loops else (alts,)
            succ[lhs] = list(dict.fromkeys(
                s for group in parts for alt in group for s in alt if s in self.rules
            ))
        # The rules the start reaches, and their recursive components.
        reach: set[str] = set() if self.empty else {g.start}
        todo = list(reach)
        while todo:
            for s in succ[todo.pop()]:
                if s not in reach:
                    reach.add(s)
                    todo.append(s)
        order = [r for r in self.rules if r in reach]
        rank = {r: i for i, r in enumerate(order)}
        self.scc: dict[str, tuple[int, int, int]] = {}  # rule -> (component, position, size)
        recursive: list[list[str]] = []
        for comp in _sccs(order, {r: [s for s in succ[r] if s in reach] for r in order}):
            if len(comp) > 1 or comp[0] in succ[comp[0]]:
                comp = sorted(comp, key=rank.__getitem__)
                for i, r in enumerate(comp):
                    self.scc[r] = (len(recursive), i, len(comp))
                recursive.append(comp)
        if recursive and max_depth is None:
            first = min((c[0] for c in recursive), key=rank.__getitem__)
            raise UnsupportedGrammar(
                f"the grammar is recursive: rule {str(first)!r} derives itself "
                f"({self._cycle(first, succ)}); pass max_depth to unroll the recursion "
                "(the regex then accepts a subset of the language)"
            )
        self.limit = (max_depth or 0) + 1  # occurrences of a rule on a path
        self.memo: dict[tuple[str, tuple[int, ...]], tuple[bool, str] | None] = {}

    def _cycle(self, rule: str, succ: Mapping[str, list[str]]) -> str:
        comp = self.scc[rule][0]
        prev: dict[str, str] = {}
        todo = [rule]
        while todo:
            nxt = []
            for v in todo:
                for w in succ[v]:
                    if w == rule:
                        path = [str(rule)]
                        while v != rule:
                            path.append(str(v))
                            v = prev[v]
                        return " -> ".join([str(rule)] + path[:0:-1] + [str(rule)])
                    if w not in prev and self.scc.get(w, (None,))[0] == comp:
                        prev[w] = v
                        nxt.append(w)
            todo = nxt
        return str(rule)  # unreachable: a recursive rule is on a cycle

    # ------------------------------------------------------------ pieces --

    def _terminal(self, name: str) -> tuple[bool, str]:
        item = self.term_item.get(name)
        if item is None:
            t = self.terminals[name]
            rx = _plain_regex(t, self.max_length)
            if t.literal and t.value and rx == re.escape(t.value):
                text = rx  # an escaped string: a plain concatenation
            else:
                text = "(?:" + _embeddable(rx) + ")"
            item = self.term_item[name] = (bool(self.ws), text)
        return item

    def _full(self, item: tuple[bool, str]) -> str:
        return self.ws + item[1] if item[0] else item[1]

    def _check(self, pieces: list[str], extra: int = 0) -> None:
        n = sum(map(len, pieces)) + extra
        if n > self.max_length:
            raise LimitExceeded("max_length", n, self.max_length)

    def _join(self, pieces: list[str]) -> str:
        self._check(pieces)
        return "".join(pieces)

    def _concat(self, items: list[tuple[bool, str]]) -> tuple[bool, str]:
        items = [it for it in items if it != _EPS]
        if not items:
            return _EPS
        pieces = [items[0][1]] + [self._full(it) for it in items[1:]]
        return items[0][0], self._join(pieces)

    def _group(self, pieces: list[str], suffix: str = "") -> str:
        return self._join(["(?:", "|".join(pieces) if len(pieces) > 1 else pieces[0], ")", suffix])

    def _alternation(self, seqs: list[list[tuple[bool, str]] | None]) -> tuple[bool, str] | None:
        """The union of concatenations, common prefixes and suffixes factored out.

        ``a S | b S`` is ``(?:a|b) S``: without this an optional item that a shared
        tail follows would repeat the tail, and a chain of them (the optional
        properties of a JSON object) would double the text per link.

        The factoring nests once per branching point along the alternatives (``a | a b |
        a b c ...``: as deep as they are long), so it runs on a stack of its own: each
        level is a :meth:`_factor` generator that yields the alternatives it needs
        factored and is sent the result.
        """
        alts = [(q, 0, len(q)) for q in dict.fromkeys(tuple(q) for q in seqs if q is not None)]
        stack = [self._factor(alts)]
        value: tuple[bool, str] | None = None
        while True:
            if len(stack) > 64:
                check_deadline(f"writing the grammar's regex, alternatives factored {len(stack)} deep")
            try:
                sub = stack[-1].send(value)
            except StopIteration as done:
                stack.pop()
                value = done.value
                if not stack:
                    return value
                continue
            stack.append(self._factor(sub))
            value = None

    def _factor(self, alts: list[tuple[tuple, int, int]]) -> Iterator[list[tuple[tuple, int, int]]]:
        """One level of :meth:`_alternation`: a generator that yields each sub-alternation
        it needs (its prefix-free middle, a group sharing a first item), is sent its
        rendering, and returns the union's.  An alternative is ``(items, lo, hi)``, the
        slice ``items[lo:hi]`` (distinct ones: what the top level's are cut to stays
        distinct), so that a level costs its alternatives' count and what it factors out,
        not their length."""
        if not alts:
            return None
        if len(alts) == 1:
            q, lo, hi = alts[0]
            return self._concat(list(q[lo:hi]))
        shortest = min(hi - lo for _, lo, hi in alts)
        q0, lo0, hi0 = alts[0]
        pre = 0
        while pre < shortest and all(q[lo + pre] == q0[lo0 + pre] for q, lo, _ in alts):
            pre += 1
        suf = 0
        while suf < shortest - pre and all(q[hi - 1 - suf] == q0[hi0 - 1 - suf] for q, _, hi in alts):
            suf += 1
        if pre or suf:
            middle = yield [(q, lo + pre, hi - suf) for q, lo, hi in alts]
            assert middle is not None
            return self._concat([*q0[lo0 : lo0 + pre], middle, *q0[hi0 - suf : hi0]])
        # Alternatives that share a first item are factored among themselves.
        by_first: dict[tuple[bool, str] | None, list[tuple[tuple, int, int]]] = {}
        for alt in alts:
            q, lo, hi = alt
            by_first.setdefault(q[lo] if hi > lo else None, []).append(alt)
        items = []
        for group in by_first.values():
            if len(group) == 1:
                q, lo, hi = group[0]
                items.append(self._concat(list(q[lo:hi])))
            else:
                items.append((yield group))
        rest = [it for it in dict.fromkeys(items) if it != _EPS]
        if not rest:
            return _EPS
        if len(rest) == 1:
            inner = rest[0]
        elif all(lead for lead, _ in rest):
            self._check([b for _, b in rest], len(rest))  # before joining with "|"
            inner = (True, self._group([b for _, b in rest]))
        else:
            full = [self._full(it) for it in rest]
            self._check(full, len(rest))
            inner = (False, self._group(full))
        if _EPS in items:
            return False, self._group([self._full(inner)], "?")
        return inner

    # --------------------------------------------------------- rendering --

    def _child(self, parent: str, counts: tuple[int, ...], s: str) -> tuple[str, tuple[int, ...]] | None:
        where = self.scc.get(s)
        if where is None:
            return s, ()
        comp, i, size = where
        if parent in self.scc and self.scc[parent][0] == comp:
            n = counts[i] + 1
            if n > self.limit:
                return None
            return s, counts[:i] + (n,) + counts[i + 1 :]
        return s, tuple(1 if j == i else 0 for j in range(size))

    def _groups(self, rule: str) -> tuple[tuple[tuple[str, ...], ...], ...]:
        return self.loops[rule] if rule in self.loops else (self.rules[rule],)

    def _seq(self, rule: str, counts: tuple[int, ...], alt: tuple[str, ...]) -> list[tuple[bool, str]] | None:
        items: list[tuple[bool, str]] = []
        for s in alt:
            if s in self.terminals:
                items.append(self._terminal(s))
                continue
            key = self._child(rule, counts, s)
            it = None if key is None else self.memo[key]
            if it is None:
                return None
            if it != _EPS:
                items.append(it)
        return items

    def _build(self, rule: str, counts: tuple[int, ...]) -> tuple[bool, str] | None:
        groups = self._groups(rule)
        if rule not in self.loops:
            return self._alternation([self._seq(rule, counts, alt) for alt in groups[0]])
        # a* c b*: ε in a or b repeats nothing, so it is left out.
        a, c, b = (
            self._alternation([
                x for x in (self._seq(rule, counts, alt) for alt in group) if x != [] or k == 1
            ])
            for k, group in enumerate(groups)
        )
        if c is None:
            return None
        if (a is None) != (b is None) and (a or b) == c:
            return False, self._group([self._full(c)], "+")  # c c* or c* c: c+
        items = []
        if a is not None:
            items.append((False, self._group([self._full(a)], "*")))
        items.append(c)
        if b is not None:
            items.append((False, self._group([self._full(b)], "*")))
        return self._concat(items)

    def _solve(self, root: tuple[str, tuple[int, ...]]) -> tuple[bool, str] | None:
        """Render ``root`` bottom-up with an explicit stack (the key graph is acyclic:
        every step into the same component raises a count, loops excepted)."""
        memo = self.memo
        stack = [root]
        while stack:
            key = stack[-1]
            if key in memo:
                stack.pop()
                continue
            rule, counts = key
            self.steps += 1
            if not self.steps & 255:
                check_deadline(f"writing the grammar's regex, rule {rule}")
            if self.steps > self.max_steps:
                raise LimitExceeded("max_steps", self.steps, self.max_steps,
                                    f"rule expansions writing the regex, the recursion unrolled to max_depth="
                                    f"{self.max_depth} (at rule {rule})")
            missing = [
                k
                for group in self._groups(rule)
                for alt in group
                for s in alt
                if s in self.rules and (k := self._child(rule, counts, s)) is not None and k not in memo
            ]
            if missing:
                stack.extend(dict.fromkeys(missing))
                continue
            memo[key] = self._build(rule, counts)
            stack.pop()
        return memo[root]

    def regex(self, start: str, max_depth: int | None) -> str:
        if self.empty:
            return _NOTHING_REGEX
        key = self._child("", (), start)
        assert key is not None
        top = self._solve(key)
        if top is None:
            # Unreachable for max_depth >= 0: replacing a subtree by a same-rule
            # subtree below it leaves a derivation with no rule repeated on a path.
            raise LimitExceeded("max_depth", (max_depth or 0) + 1, max_depth or 0)
        return self._join([self._full(top), self.ws])


def _grammar_to_regex(g: Grammar, max_depth: int | None, max_length: int,
                      max_steps: int = _TO_REGEX_MAX_STEPS) -> str:
    if max_depth is not None and (not isinstance(max_depth, int) or max_depth < 0):
        raise ValueError(f"max_depth must be None or an int >= 0, not {max_depth!r}")
    if max_length < 1:
        raise ValueError(f"max_length must be positive, not {max_length!r}")
    alts = g.rules[g.start]
    only = alts[0][0] if len(g.rules) == 1 and len(alts) == 1 and len(alts[0]) == 1 else None
    if not g.ignore and only in g.terminals and not _boolean_terminal(g.terminals[only]):
        rx = g.terminals[only].regex  # from_regex(p): p itself
    else:
        rx = _RegexWriter(g, max_depth, max_length, max_steps).regex(g.start, max_depth)
    if len(rx) > max_length:
        raise LimitExceeded("max_length", len(rx), max_length)
    return rx
