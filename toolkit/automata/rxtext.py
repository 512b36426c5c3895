"""Regex text: a parse tree written back with explicit classes and no flags
(:func:`canonical_regex`, one meaning in Python and Rust), and the escapes and class
bodies the JSON regexes are written with."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from interegular.patterns import (
    Pattern,
    REFlags,
    _CharGroup,
    _Concatenation,
    _Repeated,
)

from toolkit.automata.nfa import TOO_DEEP, case_variants, parse_pattern
from toolkit.automata.utf8 import ranges_of
from toolkit.core.errors import RegexError

__all__ = ['canonical_regex', 'escape_cp', 'class_body', 'ANY', 'NOTHING']

# ------------------------------------------------------------- rendering ----


# interegular lists every character of a positive class, so "any" and "nothing" are
# written with complementary shorthands (one meaning in Python and Rust alike).
ANY = "[\\d\\D]"
NOTHING = "[^\\d\\D]"


def escape_cp(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    if 0x20 < cp < 0x7F and ch != "/":  # "/" delimits Lark regexes: always \x2F
        if ch.isalnum() or ch in "_<>":  # "\<" and "\>" are word boundaries in Rust
            return ch
        if not in_class and ch in "!\"#%&',:;=@`~":
            return ch
        return "\\" + ch
    if cp < 0x80:
        return f"\\x{cp:02X}"
    # Literal characters: interegular cannot read \\u escapes; Rust and Python can read both.
    return ch


def class_body(rs: Sequence[tuple[int, int]], escape: Callable[[int, bool], str] | None = None) -> str:
    """The inside of a character class for sorted disjoint code point ranges, each code
    point written by ``escape(cp, in_class)`` (default :func:`escape_cp`; GBNF has its own)."""
    esc = escape_cp if escape is None else escape
    body = []
    for lo, hi in rs:
        if lo == hi:
            body.append(esc(lo, True))
        elif hi == lo + 1:
            body.append(esc(lo, True) + esc(hi, True))
        else:
            body.append(esc(lo, True) + "-" + esc(hi, True))
    return "".join(body)


def _render_class(cps: Iterable[int], negated: bool) -> str:
    rs = ranges_of(set(cps))
    if not negated and len(rs) == 1 and rs[0][0] == rs[0][1]:
        return escape_cp(rs[0][0], False)
    if not rs:
        return NOTHING if not negated else ANY
    return ("[^" if negated else "[") + class_body(rs) + "]"


def _render(node: object, flags: REFlags) -> str:
    if isinstance(node, Pattern):
        inner = flags
        inner |= node.added_flags
        inner &= ~node.removed_flags
        opts = [_render(o, inner) for o in node.options]
        return "(?:" + "|".join(opts) + ")" if len(opts) != 1 else opts[0]
    if isinstance(node, _Concatenation):
        parts = [_render(p, flags) for p in node.parts]
        return "".join(p for p in parts if p != "(?:)") or "(?:)"
    if isinstance(node, _Repeated):
        base = _render(node.base, flags)
        if not isinstance(node.base, _CharGroup) and not type(node.base).__name__.endswith("DotCls"):
            base = "(?:" + base + ")"
        lo, hi = node.min, node.max
        if (lo, hi) == (0, None):
            q = "*"
        elif (lo, hi) == (1, None):
            q = "+"
        elif (lo, hi) == (0, 1):
            q = "?"
        elif hi is None:
            q = f"{{{lo},}}"
        elif lo == hi:
            q = f"{{{lo}}}"
        else:
            q = f"{{{lo},{hi}}}"
        return base + q
    if isinstance(node, _CharGroup):
        chars = node.chars
        cps = case_variants(chars) if flags & REFlags.CASE_INSENSITIVE else {ord(c) for c in chars}
        return _render_class(cps, node.negated)
    name = type(node).__name__
    if name.endswith("DotCls"):
        return ANY if flags & REFlags.SINGLE_LINE else "[^\\n]"
    if name.endswith("EmptyCls"):
        return "(?:)"
    raise RegexError(f"cannot render regex node {name}", "")


def canonical_regex(pattern: str, *, unicode: bool = False) -> str:
    """``pattern`` rewritten with explicit classes and no flags or shorthands.

    The result means the same thing in Python ``re`` and in Rust's ``regex`` crate
    (llguidance), so every engine runs the very same language: ``\\d`` becomes
    ``[0-9]``, ``.`` becomes ``[^\\n]``, case-insensitive letters become classes,
    non-ASCII characters are written as themselves.  ``unicode=True`` reads
    ``\\d \\w \\s`` as Unicode classes first (Rust's and Python's ``str`` reading).
    """
    parsed = parse_pattern(pattern, unicode)
    try:
        return _render(parsed, REFlags(0))
    except RecursionError:  # _render recurses once per level of nesting
        raise RegexError(TOO_DEEP, pattern) from None
