"""llguidance's Lark dialect, read into plain Lark plus what plain Lark cannot say.

The grammars people write for constrained decoding use llguidance's extensions of
Lark (its ``docs/syntax.md``).  :func:`translate` reads the text with its own small
scanner and writes plain Lark for :func:`toolkit.grammar._from_lark`, with a side
table of what the IR adds afterwards:

* ``#`` comments (as ``//``), ``-`` in identifiers, ``expr{m,n}`` / ``{n}`` /
  ``{m,}`` / ``{,n}`` repetition (Lark's ``~ m..n``);
* ``%json { schema }`` as a nonterminal: the schema compiled by
  :mod:`toolkit.jsonschema` and spliced in (:class:`Dialect` ``json``), its
  ``x-guidance`` whitespace, separator, ``lenient`` and string-escape options honoured
  (:data:`toolkit.grammar.X_GUIDANCE`);
* terminals combined with ``&`` (intersection) and ``~`` (complement) with llguidance's
  precedence, at any depth (:func:`_finish_terminal`); at the top of a terminal they are
  :class:`~toolkit.grammar.Terminal` ``also``/``excluding``, deeper down a DFA written back as a regex;
* a nested ``%lark { grammar }``, read on its own and spliced in as a rule;
* parametric rules (``name::_``, ``%if``), expanded by :mod:`toolkit.grammar.parametric`;
* ``%regex {"substring_chunks" | "substring_words" | "substring_chars": ...}``;
* ``%llguidance {}`` with the options masklab's engines follow anyway (:data:`LLGUIDANCE_OPTIONS`);
* rule attributes ``capture``, ``temperature``, ``lazy``, ``suffix`` and ``max_tokens`` (see below);
* special tokens (``<|eom_id|>``, ``<[128010]>``) as token-level terminals.

Where the reading differs from llguidance's, on purpose or for now:

* ``~`` complements within UTF-8 text (the IR's languages are text); llguidance's
  also takes byte strings that are not UTF-8.
* ``%json`` compiles with :mod:`toolkit.jsonschema`, its strings spelled as
  llguidance spells them (``spelling="llguidance"``: keys as one plain text, ``\\u``
  escapes of controls and DEL only, no ``\\/``).  Its whitespace is llguidance's nested grammar's: JSON whitespace between the schema's
  tokens, none before its first or after its last, when the grammar ignores none;
  with an ``%ignore``, the IR's (global) ignore applies there, so ignored text may
  also stand before the schema's first token, where llguidance allows none.

Rule attributes (``name[...]``, :data:`ATTRIBUTES`) are read into
:attr:`toolkit.grammar.Grammar.attributes`.  ``capture`` and ``temperature`` steer
generation and leave the language alone.  ``lazy`` and ``suffix=S`` make the rule's
terminal (followed by ``S``) end at its first match, a language of its own
(:attr:`~toolkit.grammar.Terminal.lazy`).  ``max_tokens`` is kept and written back
by ``to_lark``; engines that cannot count a lexeme's tokens refuse such a grammar.
``stop`` is refused: llguidance hides the stop string by taking its tokens back,
which the mask protocol has no call for (nor has llguidance's own ``LLMatcher``, the
interface servers call: its ``consume_tokens`` fails on "unexpected backtracking", and
its docs list ``stop`` among the features to avoid).  Special tokens (``<|eom_id|>``, ``<[128010]>``,
``<[128000-128255]>``, ``<[^...]>``, ``<[*]>``) are token-level terminals
(:mod:`toolkit.grammar.special`, :class:`Dialect` ``special``).  References to other grammars
(``@name``) and parametric rules are refused
with :class:`~toolkit.core.errors.UnsupportedGrammar` naming the construct, its line and
column; a malformed construct is a :class:`~toolkit.core.errors.GrammarError` saying what
is wrong in the grammar's own terms.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toolkit.core.errors import GrammarError, UnsupportedGrammar, check_deadline
from toolkit.grammar import parametric
from toolkit.grammar.special import parse_spec

__all__ = ["Dialect", "LarkText", "translate", "substring_regex", "MAX_SUBSTRING_CHUNKS"]

MAX_SUBSTRING_CHUNKS = 512
"""Largest ``%regex`` substring list (the regex has one nested group per chunk and start)."""

_TOKEN = re.compile(
    r"""
    (?P<nl>\r?\n)
  | (?P<ws>[ \t]+)
  | (?P<comment>(?://|\#)[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?:[^/\\\n]|\\.)+/[imslux]*)
  | (?P<special><\|[^|\n]*\|>|<\[[^\]\n]*\]>|</?[A-Za-z_][^>\s]*>)
  | (?P<directive>%[A-Za-z_]+)
  | (?P<name>[A-Za-z_](?:[A-Za-z0-9_]|-(?!>))*)
  | (?P<number>0x[0-9a-fA-F]+|[0-9]+)
  | (?P<punct>->|\.\.|::|[:|()\[\]?*+{},~&!.=@^-])
    """,
    re.VERBOSE,
)

_JSON_DIRECTIVES = ("%json", "%regex", "%llguidance", "%lark")

LLGUIDANCE_OPTIONS = {"no_forcing": True, "allow_initial_skip": True}
"""``%llguidance {...}`` options read, with the one value each can take: what every
masklab engine does anyway (masks are never narrowed to a forced token; ignored text
may stand before the first token).  Any other option or value is refused by name."""


@dataclass(frozen=True)
class LarkText:
    """Lark text in llguidance's dialect, handed verbatim to an engine that reads it
    itself (``peer:llguidance``: the reference for this module's reading)."""

    #: the input format's name (:mod:`toolkit.grammar.inputs`): what ``native_inputs`` lists
    input_format: ClassVar[str] = "lark"
    text: str


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    column: int


@dataclass
class Dialect:
    """What :func:`translate` found beyond plain Lark, for the IR to add."""

    json: dict[str, Any] = field(default_factory=dict)  # rule name -> JSON schema
    lark: dict[str, tuple[str, int]] = field(default_factory=dict)  # rule name -> nested grammar, its line
    boolean: dict[str, BoolTree] = field(default_factory=dict)
    # terminal -> (helper terminals intersected, helper terminals subtracted)
    helpers: set[str] = field(default_factory=set)  # helper terminals and rules to drop
    renamed: dict[str, str] = field(default_factory=dict)  # a-b -> a_dash_b
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # rule -> its [...] attributes
    special: dict[str, str] = field(default_factory=dict)  # terminal -> the special token as written

    @property
    def plain(self) -> bool:
        lazy = any(a.get("lazy") or "suffix" in a for a in self.attributes.values())
        return not (self.json or self.lark or self.boolean or self.special or lazy)


def _scan(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos, line, col = 0, 1, 1
    while pos < len(text):
        if out and out[-1].kind == "directive" and out[-1].text in _JSON_DIRECTIVES:
            m = re.compile(r"[ \t\r\n]*").match(text, pos)
            start = m.end()
            if start < len(text) and text[start] == "{":
                end = _json_end(text, start, out[-1])
                block = text[pos:end]
                out.append(_Tok("json", text[start:end], line, col + (start - pos)))
                line += block.count("\n")
                col = len(block) - block.rfind("\n") if "\n" in block else col + len(block)
                pos = end
                continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GrammarError(f"unexpected character {text[pos]!r}", line, col)
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            out.append(_Tok(kind, m.group(), line, col))
        if kind == "nl":
            line, col = line + 1, 1
            if not line & 255:
                check_deadline(f"reading the Lark grammar, line {line}")
        else:
            col += m.end() - pos
        pos = m.end()
    return out


def _json_end(text: str, start: int, at: _Tok) -> int:
    """The end of the balanced ``{...}`` JSON block at ``start`` (strings skipped); for a
    nested ``%lark`` grammar, its braces (strings, regexes and comments skipped)."""
    depth, i = 0, start
    lark = at.text == "%lark"
    while i < len(text):
        c = text[i]
        if c == '"' or (lark and c == "/" and text[i + 1 : i + 2] != "/"):
            i += 1
            in_class = False  # a regex's "/" inside [...] does not end it
            while i < len(text) and (text[i] != c or in_class):
                if c == "/" and text[i] in "[]":
                    in_class = text[i] == "["
                i += 2 if text[i] == "\\" else 1
        elif lark and (c == "#" or c == "/"):  # a comment, to the end of its line
            while i < len(text) and text[i] != "\n":
                i += 1
        elif lark and c in "[]":
            pass
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise GrammarError(f"{at.text}: the {'grammar in braces' if lark else 'JSON object'} is not closed", at.line,
                       at.column)


def _safe(name: str, renamed: dict[str, str], taken: set[str]) -> str:
    """A Lark name for a dialect identifier (``-`` is not Lark), case kept."""
    if "-" not in name:
        return name
    if name not in renamed:
        base = name.replace("-", "_dash_")
        new, n = base, 0
        while new in taken:
            n += 1
            new = f"{base}{n}"
        renamed[name] = new
        taken.add(new)
    return renamed[name]


def substring_regex(chunks: list[str]) -> str:
    """Regex of ``"".join(chunks[n:m])`` for every ``n <= m``: for each start, the chunks
    from there as nested optional groups (one alternative per start)."""
    if len(chunks) > MAX_SUBSTRING_CHUNKS:
        raise GrammarError(f"%regex substring: {len(chunks)} chunks (at most {MAX_SUBSTRING_CHUNKS})")
    esc = [re.escape(c) for c in chunks]
    alts = []
    for n in range(len(esc)):
        body = ""
        for e in reversed(esc[n:]):
            body = f"(?:{e}{body})?" if body else f"(?:{e})?"
        alts.append(body)
    return "(?:" + "|".join(alts) + ")" if alts else ""


def _substring_chunks(spec: Any, at: _Tok) -> list[str]:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise GrammarError("%regex: expected one of substring_chunks, substring_words, substring_chars, "
                           f"not {json.dumps(spec)[:80]}", at.line, at.column)
    (kind, value), = spec.items()
    if kind == "substring_chunks" and isinstance(value, list) and all(isinstance(c, str) for c in value):
        return value
    if kind == "substring_words" and isinstance(value, str):
        return re.findall(r"\w+|\s|[^\w\s]", value)
    if kind == "substring_chars" and isinstance(value, str):
        return list(value)
    raise GrammarError(f"%regex: {kind!r} is not a substring form we know (substring_chunks takes a list of "
                       "strings; substring_words and substring_chars a string)", at.line, at.column)


def translate(text: str) -> tuple[str, Dialect]:
    """Plain Lark text for ``text``, and what the IR must add (see the module doc)."""
    toks = parametric.expand(_scan(text), _Tok)
    side = Dialect()
    taken = {t.text for t in toks if t.kind == "name"}
    out: list[str] = []
    extra: list[str] = []  # definitions appended after the grammar
    pending_nl = 0  # newlines swallowed by JSON blocks, given back at the next line end
    in_terminal: str | None = None  # the terminal being defined
    def_tok: _Tok | None = None  # its name, where it is defined
    refs: list[tuple[str, str, _Tok]] = []  # (terminal, a name in its definition, where)
    body_start = 0  # index in out where the current definition's body starts
    line_start = True
    i = 0

    def refuse(what: str, tok: _Tok) -> None:
        raise UnsupportedGrammar(f"{what} is not supported by masklab's Lark reader", tok.line, tok.column)

    while i < len(toks):
        t = toks[i]
        if t.kind == "nl":
            check_deadline(f"reading the Lark grammar, line {t.line}")
            if in_terminal is not None and not (i + 1 < len(toks) and toks[i + 1].text == "|"):
                _finish_terminal(in_terminal, def_tok, out, body_start, side, extra, taken)
                in_terminal = None
            out.append("\n" * (1 + pending_nl))
            pending_nl, line_start = 0, True
            i += 1
            continue
        if line_start and t.kind in ("name", "punct") and t.text not in ("|",):
            # a definition: [?!]name[.prio] [attrs] ':'
            j = i + (1 if t.text in ("?", "!") else 0)
            if j < len(toks) and toks[j].kind == "name":
                k = j + 1
                attrs: dict[str, Any] = {}
                if k < len(toks) and toks[k].text == "[":
                    attrs, k = _attributes(toks, k, toks[j].text)
                if k < len(toks) and toks[k].text in ("::", "{"):
                    refuse(f"a parametric rule ({toks[j].text}{toks[k].text})", toks[k])
                prio = k
                if k < len(toks) and toks[k].text == "." and k + 1 < len(toks) and toks[k + 1].kind == "number":
                    k += 2
                if k < len(toks) and toks[k].text == ":":
                    name = _safe(toks[j].text, side.renamed, taken)
                    if attrs:
                        side.attributes[name] = attrs
                        if attrs.get("suffix", ("",))[0] == "name":  # kept through lark's loader
                            attrs["suffix"] = ("name", _safe(attrs["suffix"][1], side.renamed, taken))
                            side.helpers.add(attrs["suffix"][1])
                    out.append(("" if j == i else t.text) + name + "".join(x.text for x in toks[prio:k]) + ": ")
                    if name.lstrip("_")[:1].isupper():
                        in_terminal, def_tok = name, toks[j]
                    body_start = len(out)
                    i, line_start = k + 1, False
                    continue
        line_start = False
        if t.kind == "special":
            if in_terminal is not None:
                raise UnsupportedGrammar(f"the special token {t.text} stands in terminal {in_terminal}: a special "
                                         "token is a whole token of its own, so it can stand in rules only",
                                         t.line, t.column)
            parse_spec(t.text, t.line, t.column)
            name = next((n for n, x in side.special.items() if x == t.text), None)
            if name is None:
                name = _fresh("SPECIAL", taken)
                side.special[name] = t.text
                extra.append(f'{name}: "\\u0001{name}"')
            out.append(f" {name} ")
            i += 1
            continue
        if t.kind == "directive":
            if t.text == "%json":
                blk, schema = _json_block(toks, i, "a JSON schema")
                if in_terminal is not None:
                    raise GrammarError("%json is a nonterminal: it cannot stand in a terminal "
                                       f"({in_terminal})", t.line, t.column)
                name = _fresh("json", taken)
                side.json[name] = schema
                extra.append(f'{name}: "\\u0000{name}"')
                out.append(f" {name} ")
                pending_nl += blk.text.count("\n")
                i += 2
                continue
            if t.text == "%regex":
                blk, spec = _json_block(toks, i, "a JSON object")
                rx = substring_regex(_substring_chunks(spec, blk)).replace("/", "\\/")
                out.append(f" /{rx}/ ")  # a regex literal: it may stand inside a terminal too
                pending_nl += blk.text.count("\n")
                i += 2
                continue
            if t.text == "%llguidance":
                blk, opts = _json_block(toks, i, "a JSON object of options")
                if not isinstance(opts, dict):
                    raise GrammarError("%llguidance takes a JSON object of options", blk.line, blk.column)
                for key in sorted(opts):
                    if key not in LLGUIDANCE_OPTIONS or opts[key] != LLGUIDANCE_OPTIONS[key]:
                        refuse(f"%llguidance option {key!r}={json.dumps(opts[key])} (read: "
                               + ", ".join(f"{k}={json.dumps(v)}" for k, v in LLGUIDANCE_OPTIONS.items()) + ")", t)
                pending_nl += blk.text.count("\n")
                i += 2
                continue
            if t.text == "%lark":
                blk = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "json" else None
                if blk is None:
                    raise GrammarError("%lark must be followed by a grammar in braces", t.line, t.column)
                if in_terminal is not None:
                    raise GrammarError(f"%lark is a nonterminal: it cannot stand in a terminal ({in_terminal})",
                                       t.line, t.column)
                name = _fresh("lark", taken)
                side.lark[name] = (blk.text[1:-1], blk.line)
                extra.append(f'{name}: "\\u0000{name}"')
                out.append(f" {name} ")
                pending_nl += blk.text.count("\n")
                i += 2
                continue
            if t.text == "%if":
                refuse("%if (parametric grammars)", t)
            if t.text == "%import":  # a dotted path: written back without spaces
                j = i + 1
                while j < len(toks) and toks[j].kind != "nl":
                    j += 1
                _check_import(toks[i + 1 : j], t)
                out.append("%import " + "".join(x.text if x.text != "(" else " (" for x in toks[i + 1 : j]))
                i = j
                continue
            out.append(t.text + " ")
            i += 1
            continue
        if t.text == '""' and in_terminal is None:  # the empty string, which Lark has no terminal for
            out.append("() ")
            i += 1
            continue
        if t.text == "@":
            refuse("a reference to another grammar (@name)", t)
        if t.text == "{":
            i = _repeat(toks, i, out, body_start)
            continue
        if t.text == "&" or (t.text == "~" and _negation(toks, i)):
            if in_terminal is None:
                raise GrammarError(f"'{t.text}' combines terminals: it can stand only in a terminal's definition",
                                   t.line, t.column)
            out.append(f" {t.text} ")
            i += 1
            continue
        if t.kind == "regex":
            flags = t.text[t.text.rindex("/") + 1 :]
            bad = sorted(set(flags) - set("ims"))
            if bad:
                raise GrammarError(f"{t.text}: the regex flag {bad[0]!r} is not supported (i, m and s are)",
                                   t.line, t.column)
        if t.text == ".." and not (i and toks[i - 1].kind == "number"):  # not a repeat's ~ m..n
            _check_range(toks, i)
        if t.kind == "name":
            out.append(_safe(t.text, side.renamed, taken) + " ")
            if in_terminal is not None:
                refs.append((in_terminal, _safe(t.text, side.renamed, taken), t))
        else:
            out.append(t.text + " ")
        i += 1
    if in_terminal is not None:
        _finish_terminal(in_terminal, def_tok, out, body_start, side, extra, taken)
    for outer, name, tok in refs:  # Lark would inline the placeholder, not the combination
        if name in side.boolean and outer != name:
            raise UnsupportedGrammar(f"terminal {outer} uses {name}, which combines terminals with & or ~: "
                                     "use it in rules only", tok.line, tok.column)
    return "".join(out) + ("\n" + "\n".join(extra) + "\n" if extra else ""), side


ATTRIBUTES = ("capture", "temperature", "max_tokens", "lazy", "suffix")
"""Rule attributes read (all reported in :attr:`toolkit.grammar.Grammar.attributes`).
``capture`` and ``temperature`` steer generation and leave the language and every
mask as they are.  ``lazy`` and ``suffix`` change the language: the rule's terminal
(followed by the suffix) ends at its first match (:attr:`Terminal.lazy
<toolkit.grammar.Terminal.lazy>`).  ``max_tokens`` limits the tokens of the rule's
lexeme: an engine that cannot count them refuses the grammar (``peer:llguidance``
honours it)."""

_NOT_YET = {
    "stop": "hides the stop string by taking its tokens back (llguidance backtracks), which the mask "
            "protocol has no call for; suffix= ends the lexeme the same way and keeps the text",
}


def _attributes(toks: list[_Tok], k: int, rule: str) -> tuple[dict[str, Any], int]:
    """``name[key, key=value, ...]`` at ``toks[k]`` (the ``[``): the attributes and the
    index after the ``]``."""
    at = toks[k]
    end = k + 1
    while end < len(toks) and toks[end].text != "]" and toks[end].kind != "nl":
        end += 1
    if end >= len(toks) or toks[end].text != "]":
        raise GrammarError(f"{rule}[...]: the attribute list is not closed", at.line, at.column)
    items: list[list[_Tok]] = [[]]
    for t in toks[k + 1 : end]:
        if t.text == ",":
            items.append([])
        else:
            items[-1].append(t)
    out: dict[str, Any] = {}
    for item in items:
        if not item:
            raise GrammarError(f"{rule}[...]: an empty attribute", at.line, at.column)
        key, where = item[0].text, item[0]
        if key in _NOT_YET:
            raise UnsupportedGrammar(f"the rule attribute {key!r} of {rule} {_NOT_YET[key]}; masklab does not "
                                     "read it yet", where.line, where.column)
        if key not in ATTRIBUTES:
            raise GrammarError(f"{rule}[...]: unknown attribute {key!r} (known: "
                               f"{', '.join(ATTRIBUTES + tuple(_NOT_YET))})", where.line, where.column)
        if len(item) == 1:
            if key not in ("capture", "lazy"):
                raise GrammarError(f"{rule}[{key}]: expected {key}=value", where.line, where.column)
            out[key] = True
            continue
        if key == "suffix":
            out[key] = _suffix(item[2:], rule, where) if item[1].text == "=" and len(item) >= 3 else None
            if out[key] is None:
                raise GrammarError(f"{rule}[suffix=...]: a string, a /regex/ or a TERMINAL", where.line,
                                   where.column)
            continue
        if item[1].text != "=" or len(item) < 3:
            raise GrammarError(f"{rule}[{key}...]: expected {key}=value", where.line, where.column)
        raw = "".join(t.text for t in item[2:])
        try:
            value = json.loads(raw)
        except ValueError:
            raise GrammarError(f"{rule}[{key}=...]: {raw!r} is not a string or a number", where.line,
                               where.column) from None
        if key == "temperature" and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise GrammarError(f"{rule}[temperature=...]: a number >= 0, not {raw}", where.line, where.column)
        if key == "max_tokens" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise GrammarError(f"{rule}[max_tokens=...]: a whole number >= 1, not {raw}", where.line, where.column)
        if key == "lazy":
            raise GrammarError(f"{rule}[lazy] takes no value", where.line, where.column)
        if key == "capture" and not isinstance(value, str):
            raise GrammarError(f"{rule}[capture=...]: a name in quotes, not {raw}", where.line, where.column)
        out[key] = value
    return out, end + 1


def _check_range(toks: list[_Tok], i: int) -> None:
    """``"a".."z"``: one character on each side, the first not after the second."""
    t = toks[i]
    ends = [toks[i - 1] if i else None, toks[i + 1] if i + 1 < len(toks) else None]
    if any(e is None or e.kind != "string" for e in ends):
        raise GrammarError("a range .. stands between two one-character strings (\"a\"..\"z\")", t.line, t.column)
    chars = []
    for e in ends:
        try:
            chars.append(json.loads(e.text.rstrip("i")))
        except ValueError:
            chars.append(e.text)
    written = f"{ends[0].text}..{ends[1].text}"
    if any(len(c) != 1 for c in chars):
        raise GrammarError(f"the range {written} takes one character on each side", ends[0].line, ends[0].column)
    if chars[0] > chars[1]:
        raise GrammarError(f"the range {written} is empty: {chars[0]!r} comes after {chars[1]!r}", ends[0].line,
                           ends[0].column)


def _check_import(path: list[_Tok], at: _Tok) -> None:
    """``%import common.NAME`` (or ``(A, B)``): lark's common grammar must define each name."""
    names = [p.text for p in path if p.kind == "name"]
    if not names or names[0] != "common":
        raise UnsupportedGrammar(f"%import {''.join(p.text for p in path)}: only lark's built-in common grammar "
                                 "can be imported", at.line, at.column)
    known = _common_names()
    for k, p in enumerate(path[1:], 1):
        if p.kind == "name" and p.text not in known and path[k - 1].text != "->":
            raise GrammarError(f"%import common.{p.text}: lark's common grammar has no {p.text} (it has "
                               f"{', '.join(sorted(n for n in known if not n.startswith('_'))[:12])}, ...)",
                               p.line, p.column)


_COMMON: set[str] = set()


def _common_names() -> set[str]:
    if not _COMMON:
        text = importlib.resources.files("lark").joinpath("grammars/common.lark").read_text()
        _COMMON.update(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*:", text, re.M))
    return _COMMON


def _suffix(toks: list[_Tok], rule: str, at: _Tok) -> tuple[str, str] | None:
    """``suffix=`` 's value: ``("regex", text)`` for a string literal or a ``/regex/``,
    ``("name", NAME)`` for a terminal; None when it is neither."""
    if len(toks) != 1:
        return None
    t = toks[0]
    if t.kind == "string" and not t.text.endswith("i"):
        try:
            return "regex", re.escape(json.loads(t.text))
        except ValueError:
            raise GrammarError(f"{rule}[suffix=...]: {t.text} is not a string we can read", at.line,
                               at.column) from None
    if t.kind == "regex" and t.text.endswith("/"):
        return "regex", t.text[1:-1].replace("\\/", "/")
    if t.kind == "name" and t.text.lstrip("_")[:1].isupper():
        return "name", t.text
    return None


def _json_block(toks: list[_Tok], i: int, what: str) -> tuple[_Tok, Any]:
    """The JSON block after the directive ``toks[i]``, and its value."""
    t = toks[i]
    blk = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "json" else None
    if blk is None:
        raise GrammarError(f"{t.text} must be followed by {what} in braces", t.line, t.column)
    try:
        return blk, json.loads(blk.text)
    except ValueError as e:
        raise GrammarError(f"{t.text}: not JSON ({e})", blk.line, blk.column) from None


def _fresh(base: str, taken: set[str]) -> str:
    n = 0
    while f"{base}_{n}" in taken:
        n += 1
    taken.add(f"{base}_{n}")
    return f"{base}_{n}"


def _negation(toks: list[_Tok], i: int) -> bool:
    """A ``~`` that complements the atom after it rather than repeats (``x ~ 3``): as
    llguidance reads it, a repetition's ``~`` follows an atom and comes before a number."""
    prev = toks[i - 1] if i else None
    opens = prev is None or prev.text in (":", "&", "|", "(", "[", "~") or prev.kind == "nl"
    return opens or not (i + 1 < len(toks) and toks[i + 1].kind == "number")


_MAX_BOOLEAN_COPIES = 64
"""Most copies a ``{m,n}`` repetition of an operand with ``&`` or ``~`` is written as."""


def _repeat(toks: list[_Tok], i: int, out: list[str], body_start: int) -> int:
    """``{m,n}`` / ``{n}`` / ``{m,}`` / ``{,n}`` after an atom, as Lark's ``~``; returns
    the index after the closing brace."""
    t = toks[i]
    j = i + 1
    parts: list[str] = []
    while j < len(toks) and toks[j].text != "}":
        parts.append(toks[j].text)
        j += 1
    spec = "".join(parts)
    m = re.fullmatch(r"(\d*)(,?)(\d*)", spec)
    if j >= len(toks):
        raise GrammarError(f"repetition {{{spec}: the brace is not closed", t.line, t.column)
    if m is None or (not m.group(1) and not m.group(3)) or (not m.group(2) and m.group(3)):
        raise GrammarError(f"repetition {{{spec}}}: expected {{n}}, {{m,n}}, {{m,}} or {{,n}}", t.line, t.column)
    if len(out) <= body_start:
        raise GrammarError(f"repetition {{{spec}}} has nothing before it to repeat", t.line, t.column)
    lo, comma, hi = m.groups()
    lo = lo or "0"
    # the atom: the last output piece, or a group back to its opening bracket
    k = len(out) - 1
    if out[k].strip() in (")", "]"):
        depth = 0
        while k >= body_start:
            s = out[k].strip()
            depth += s in (")", "]")
            depth -= s in ("(", "[")
            if depth == 0:
                break
            k -= 1
    pieces = out[k:]
    atom = "".join(pieces)
    del out[k:]
    if any(_is_boolean_piece(p) for p in pieces):  # copies, so the boolean terminal's reader sees the & and ~
        lo_n, hi_n = int(lo), (int(hi) if hi else None) if comma else int(lo)
        if max(lo_n, hi_n or 0) > _MAX_BOOLEAN_COPIES:
            raise UnsupportedGrammar(f"repetition {{{spec}}} of an operand with '&' or '~': at most "
                                     f"{_MAX_BOOLEAN_COPIES} copies are written", t.line, t.column)
        if hi_n is not None and hi_n < lo_n:
            raise GrammarError(f"repetition {{{spec}}}: {hi} is less than {lo}", t.line, t.column)
        group = ["( ", *pieces, ") "]
        out.extend(group * lo_n)
        if hi_n is None:
            out.extend([*group, "* "])
        else:
            out.extend([*group, "? "] * (hi_n - lo_n))
        return j + 1
    if not comma:
        out.append(f"({atom} ~ {lo}) ")
    elif hi:
        if int(hi) < int(lo):
            raise GrammarError(f"repetition {{{spec}}}: {hi} is less than {lo}", t.line, t.column)
        out.append(f"({atom} ~ {lo}..{hi}) ")
    else:
        out.append(f"({atom} ~ {lo} {atom}*) " if lo != "0" else f"({atom})* ")
    return j + 1


def _finish_terminal(name: str, where: _Tok, out: list[str], body_start: int, side: Dialect, extra: list[str],
                     taken: set[str]) -> None:
    """A terminal whose body uses ``&`` or ``~``: read with llguidance's precedence
    (its ``parser.rs``: ``|`` binds loosest, then ``&``, then concatenation, then the
    postfix operators; ``~`` complements the one atom after it), each part without
    ``&`` or ``~`` becomes a helper terminal, and the body a tree over them
    (:data:`BoolTree`, kept in :attr:`Dialect.boolean`) that the IR evaluates into the
    terminal's language."""
    body = [p for p in out[body_start:] if p.strip()]
    if not any(_is_boolean_piece(p) for p in body):
        return
    counter = [0]
    pos = 0

    def helper(lo: int, hi: int) -> BoolTree:
        h = _fresh(f"{name}__PART{counter[0]}", taken)
        counter[0] += 1
        extra.append(f"{h}: {''.join(body[lo:hi]).strip()}")
        side.helpers.add(h)
        return ("part", h)

    def peek() -> str | None:
        return body[pos].strip() if pos < len(body) else None

    def plain(lo: int) -> bool:
        return not any(_is_boolean_piece(p) for p in body[lo:pos])

    def alt() -> BoolTree:
        nonlocal pos
        lo, items = pos, [alias()]
        while peek() == "|":
            pos += 1
            items.append(alias())
        if plain(lo):
            return helper(lo, pos)
        return items[0] if len(items) == 1 else ("alt", tuple(items))

    def alias() -> BoolTree:
        nonlocal pos
        lo, items = pos, [seq()]
        while peek() == "&":
            pos += 1
            items.append(seq())
        if plain(lo):
            return helper(lo, pos)
        return items[0] if len(items) == 1 else ("and", tuple(items))

    def seq() -> BoolTree:
        lo, items = pos, []
        while peek() not in (None, "|", "&", ")", "]"):
            items.append(expr())
        if not items:
            raise GrammarError(f"terminal {name}: an empty operand of '&' or '|'", where.line, where.column)
        if plain(lo):
            return helper(lo, pos)
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def expr() -> BoolTree:
        nonlocal pos
        lo, a = pos, atom()
        if peek() in ("*", "+", "?"):
            op = peek()
            pos += 1
            return helper(lo, pos) if plain(lo) else ("repeat", a, op)
        if peek() == "~" and not _is_boolean_piece(body[pos]):  # Lark's own repetition, x ~ n or x ~ m..n
            pos += 1
            while pos < len(body) and (body[pos].strip().isdigit() or body[pos].strip() == ".."):
                pos += 1
            if not plain(lo):
                raise UnsupportedGrammar(f"terminal {name}: Lark's '~ n' repetition of an operand with '&' or '~' "
                                         "(write it {n})", where.line, where.column)
            return helper(lo, pos)
        return a

    def atom() -> BoolTree:
        nonlocal pos
        t = peek()
        if _is_boolean_piece(body[pos]):  # a complement (a '&' cannot start an atom: seq stops there)
            pos += 1
            if peek() in (None, "|", "&", ")", "]"):
                raise GrammarError(f"terminal {name}: '~' with nothing after it to complement", where.line,
                                   where.column)
            return ("not", atom())
        lo = pos
        pos += 1
        if t in ("(", "["):
            inner = alt()
            if peek() != {"(": ")", "[": "]"}[t]:
                raise GrammarError(f"terminal {name}: {t!r} is not closed", where.line, where.column)
            pos += 1
            if plain(lo):
                return helper(lo, pos)
            return inner if t == "(" else ("repeat", inner, "?")
        return helper(lo, pos)

    tree = alt()
    if pos != len(body):
        raise GrammarError(f"terminal {name}: unexpected {body[pos].strip()!r}", where.line, where.column)
    side.boolean[name] = tree
    del out[body_start:]
    out.append('"\\u0000placeholder"')


def _is_boolean_piece(piece: str) -> bool:
    """An output piece that is ``&`` or a complementing ``~`` (written ``" ~ "``; a
    repetition's ``~`` is written ``"~ "``)."""
    return piece == " & " or piece == " ~ "


BoolTree = tuple
"""A terminal's body with ``&`` or ``~`` (:func:`_finish_terminal`): ``("part", helper
terminal)``, ``("alt" | "and" | "seq", children)``, ``("not", child)`` or ``("repeat",
child, "*" | "+" | "?")``."""
