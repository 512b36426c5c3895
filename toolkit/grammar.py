"""The grammar IR every strategy compiles.

A :class:`Grammar` is a context-free grammar whose terminals are regular languages
over bytes (each a regex of :mod:`toolkit.regex`'s dialect, flagged when it is a
literal string), plus an ``ignore`` set of terminals.  Its language is the
*scannerless* one: the strings the CFG derives when each terminal stands for its
regular language and any sequence of ``ignore`` terminals may appear before, between
and after terminals.  :meth:`Grammar.accepts` (an Earley recognizer over bytes, see
:mod:`toolkit._earley`) and the ``naive`` engine define that language.

Builders: :meth:`Grammar.from_lark` (parsed by the ``lark`` package, EBNF expanded),
:meth:`Grammar.from_regex`; writers: :meth:`Grammar.to_lark` (text llguidance's Lark
front end accepts, with regexes rewritten by :func:`toolkit.regex.canonical_regex` so
that every engine runs the very same language).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from toolkit.errors import GrammarError, RegexError
from toolkit.regex import ByteDFA, canonical_regex, compile_regex

__all__ = ["Grammar", "Terminal"]

_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TERM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Terminal:
    """A terminal: a regular language given as a regex over text (UTF-8 bytes).

    ``literal`` is True when the terminal is exactly the string ``value``.
    """

    name: str
    regex: str
    literal: bool = False
    value: str | None = None

    @staticmethod
    def from_literal(name: str, value: str) -> Terminal:
        return Terminal(name, re.escape(value), True, value)

    def dfa(self) -> ByteDFA:
        """The terminal's minimal byte DFA (cached by :func:`compile_regex`)."""
        return compile_regex(self.regex)


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

    def __post_init__(self) -> None:
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
        for t in self.terminals.values():
            try:
                t.dfa()
            except RegexError as e:
                raise GrammarError(f"terminal {t.name}: {e}") from e

    # ---------------------------------------------------------- builders --

    @staticmethod
    def from_lark(text: str, start: str = "start") -> Grammar:
        """Parse a Lark grammar (rules, terminals, ``%ignore``, ``%import common``).

        EBNF (``?``, ``*``, ``+``, ``[]``, ``~``) is expanded by lark.  Errors are
        :class:`GrammarError` with the line and column of the offending text.
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
    def from_json_schema(schema, *, whitespace: str = "flexible", strict: bool = True) -> Grammar:
        """Compile a JSON Schema; see :func:`toolkit.jsonschema.from_json_schema`."""
        from toolkit.jsonschema import from_json_schema

        return from_json_schema(schema, whitespace=whitespace, strict=strict)

    # ----------------------------------------------------------- queries --

    def is_terminal(self, name: str) -> bool:
        return name in self.terminals

    def symbols(self) -> list[str]:
        return list(self.rules) + list(self.terminals)

    def accepts(self, data: bytes | str) -> bool:
        """True when ``data`` (bytes, or text as UTF-8) is in the grammar's language."""
        from toolkit._earley import ByteRecognizer, compile_cfg

        if isinstance(data, str):
            data = data.encode("utf-8")
        rec = ByteRecognizer(compile_cfg(self))
        return rec.push_bytes(data) and rec.is_accepting()

    # ----------------------------------------------------------- writers --

    def to_lark(self) -> str:
        """Lark text for llguidance (and any Lark-syntax engine) with the same language.

        Names are sanitized to Lark's conventions; terminal regexes go through
        :func:`canonical_regex`, so shorthand classes and flags mean the same in
        every engine.
        """
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
            return term_names[s] if s in self.terminals else rule_names[s]

        for lhs, alts in rules.items():
            body = " | ".join(" ".join(sym(s) for s in alt) if alt else '""' for alt in alts)
            lines.append(f"{rule_names[lhs]}: {body}")
        used = {s for alts in rules.values() for alt in alts for s in alt} | set(self.ignore)
        for name, t in self.terminals.items():
            if name in used:
                lines.append(f"{term_names[name]}: {_lark_terminal(t)}")
        for name in self.ignore:
            lines.append(f"%ignore {term_names[name]}")
        return "\n".join(lines) + "\n"

    def _productive_rules(self) -> dict[str, tuple[tuple[str, ...], ...]]:
        """The rules without alternatives that derive no string (Lark cannot write them)."""
        live = {n for n, t in self.terminals.items() if not t.dfa().is_empty()}
        changed = True
        while changed:
            changed = False
            for lhs, alts in self.rules.items():
                if lhs not in live and any(all(s in live for s in alt) for alt in alts):
                    live.add(lhs)
                    changed = True
        if self.start not in live:
            raise GrammarError("the grammar's language is empty; Lark cannot express it")
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


def _lark_terminal(t: Terminal) -> str:
    if t.literal and t.value is not None and t.value.isprintable() and t.value.isascii():
        return json.dumps(t.value)
    return "/" + canonical_regex(t.regex) + "/"


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
    return (f"(?{flags}:{rx})" if flags else rx), False, None


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
    import lark
    from lark.exceptions import LarkError

    if not isinstance(text, str):
        raise TypeError("Lark grammar text must be str")
    try:
        lk = lark.Lark(text, start=start, parser="earley", lexer="dynamic", keep_all_tokens=True)
    except LarkError as e:
        raise _lark_error(text, e) from e
    except Exception as e:  # lark raises plain exceptions on some malformed input
        raise GrammarError(f"cannot read Lark grammar: {type(e).__name__}: {e}") from e

    terminals: dict[str, Terminal] = {}
    for td in lk.terminals:
        rx, literal, value = _pattern_regex(td.pattern)
        try:
            compile_regex(rx)
        except RegexError as e:
            line, column = _locate(text, td.name, skip_definition=False)
            if line is None:  # an anonymous terminal: find its text instead
                line, column = _locate_text(text, td.pattern.value)
            raise GrammarError(f"terminal {td.name}: {e}", line, column) from e
        terminals[td.name] = Terminal(td.name, rx, literal, value)

    rules: dict[str, list[tuple[str, ...]]] = {}
    for r in lk.rules:
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
        ignore=tuple(lk.ignore_tokens),
        source=text,
    )


@functools.lru_cache(maxsize=256)
def _cached_lark(text: str, start: str) -> Grammar:
    return _from_lark(text, start)


def grammar_from_spec(kind: str, text: str) -> Grammar:
    """Build a grammar from ``("lark"|"regex", text)``; used by datasets and the CLI."""
    if kind == "lark":
        return _cached_lark(text, "start")
    if kind == "regex":
        return Grammar.from_regex(text)
    raise GrammarError(f"unknown grammar kind {kind!r} (expected 'lark' or 'regex')")
