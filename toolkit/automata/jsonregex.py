"""Regexes for the JSON *text* of values, for compiling JSON Schema to grammars.

Every regex here is a string in the dialect of :mod:`toolkit.automata.regex` (Python ``re``
syntax as parsed by ``interegular``, full-match semantics, non-ASCII characters
written literally) and matches the JSON text of a value, quotes included for
strings.  The contract is *exact or tighter*: a regex never matches the text of an
instance the schema keyword rejects.  Where a regex is tighter than the keyword
(it rejects some valid instances) the function's docstring says so and why.

The string model: a JSON string is a sequence of code points.  Each one appears
between the quotes raw (any character but ``"``, ``\\`` and U+0000..U+001F), as a
short escape (``\\"`` ``\\\\`` ``\\/`` ``\\b`` ``\\f`` ``\\n`` ``\\r`` ``\\t``), as
``\\uXXXX`` (hex digits in either case) when it is in the BMP, or as a surrogate
pair ``\\uD8xx\\uDCxx`` when it is astral.  Lone surrogates (``"\\uD800"``, which
Python's ``json`` decodes to an unpaired surrogate) are never matched by
:data:`JSON_CHAR`, :func:`json_string` or :func:`ecma_pattern` -- tighter, since
such strings are not Unicode text and cannot be written as UTF-8; only
:func:`json_string_literal` handles them, exactly.

Building blocks: code point sets are lists of disjoint ``(lo, hi)`` ranges without
surrogates; a fixed-width digit-range renderer (base 10 for integers, base 16 with
case-insensitive letters for ``\\u`` escapes) turns a set of numbers into a compact
regex by grouping leading digits with equal remainders.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np

from toolkit.automata import _dfabuild
from toolkit.automata._utf8 import complement
from toolkit.automata.dfaops import dfa_regex
from toolkit.automata.regex import (
    DEFAULT_MAX_STATES,
    ByteDFA,
    _class_body,
    _compile_nfa,
    _escape_cp,
    _freeze,
    _minimize,
    compile_regex,
)
from toolkit.core.errors import LimitExceeded, UnsupportedSchema
from toolkit.core.memo import memo

__all__ = [
    "JSON_CHAR",
    "NOTHING",
    "MAX_STRING_LENGTH",
    "MAX_STRING_STATES",
    "JSON_NUMBER",
    "FORMATS",
    "json_string",
    "json_string_literal",
    "json_literal_dfa",
    "json_string_bounds",
    "json_string_dfa",
    "int_range",
    "multiple_of",
    "decimal_step",
    "number_range",
    "json_format",
    "ecma_pattern",
    "encode_codepoints",
    "SPELLINGS",
    "LLGUIDANCE_CHAR",
    "LLGUIDANCE_KEY_CHAR",
    "spelling",
]

NOTHING = "[^\\d\\D]"
"""A regex with an empty language: a class of no character.

Valid in Python ``re`` and Rust ``regex`` too.  (``toolkit.automata.regex``'s
``[^\\x00-\\U0010ffff]`` means the same but takes seconds to compile: interegular
materializes the million characters of the class.)"""

_ANY = "[\\d\\D]"  # any character, cheaply (see NOTHING)

MAX_STRING_LENGTH = 65_536
"""Largest ``minLength``/``maxLength`` :func:`json_string` accepts (2^16).

A bound is the cap of the repeat: the minimal DFA of ``maxLength: n`` has 20 states
per character (the escape forms) plus 4, written down directly by
:func:`json_string_dfa` in linear time: ``n = 65,536`` is 1.31M states, a 115 MB table
over its 22 byte classes, built in 0.3 s (:data:`MAX_STRING_STATES`).  Larger bounds
are :class:`~toolkit.core.errors.UnsupportedSchema`, never a silently shorter string."""

MAX_STRING_STATES = 20 * MAX_STRING_LENGTH + 64
"""States a JSON string's DFA may have when written down directly
(:func:`toolkit.automata.regex.compile_regex` allows them whatever its ``max_states``, which
bounds the subset construction): enough for :data:`MAX_STRING_LENGTH` characters."""

MAX_REPEAT = 1000
"""Largest bound of a ``{n,m}`` quantifier in :func:`ecma_pattern` (the DFA grows
linearly with the bound, and each copy of the repeated part costs its states)."""

MAX_BOUND_DIGITS = 400
"""Largest number of decimal digits (integer plus fraction part) of a numeric bound."""

_MAX_CP = 0x10FFFF
_SUR_LO, _SUR_HI = 0xD800, 0xDFFF

Ranges = tuple[tuple[int, int], ...]


# ------------------------------------------------------------ small helpers --


def _group(parts: Sequence[str]) -> str:
    """Alternation of ``parts`` as one atom (``(?:a|b)``); one part is returned as is."""
    uniq = list(dict.fromkeys(parts))
    if not uniq:
        return NOTHING
    if len(uniq) == 1:
        return uniq[0]
    return "(?:" + "|".join(uniq) + ")"


def _scan(text: str) -> tuple[int, bool, bool]:
    """Top-level structure of a regex: (number of units, has ``|``, has a quantifier).

    A unit is one character, one escape (``\\x2F`` counts as one), one class or one
    group.  The regexes scanned are the ones this module builds.
    """
    units, alt, quant, i, n = 0, False, False, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 4 if text[i + 1 : i + 2] == "x" else 2
            units += 1
        elif c == "[":
            i += 1
            while i < n and text[i] != "]":
                i += 2 if text[i] == "\\" else 1
            i += 1
            units += 1
        elif c == "(":
            depth = 0
            while i < n:
                ch = text[i]
                if ch == "\\":
                    i += 2
                    continue
                if ch == "[":
                    i += 1
                    while i < n and text[i] != "]":
                        i += 2 if text[i] == "\\" else 1
                elif ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            i += 1
            units += 1
        elif c == "|":
            alt = True
            i += 1
        elif c in "*+?":
            quant = True
            i += 1
        elif c == "{":
            quant = True
            i = text.index("}", i) + 1
        else:
            units += 1
            i += 1
    return units, alt, quant


def _atom(text: str) -> str:
    """``text`` wrapped so that a quantifier after it applies to all of it."""
    units, alt, quant = _scan(text)
    if units == 1 and not alt and not quant:
        return text
    return "(?:" + text + ")"


def _atom_if_alt(text: str) -> str:
    """``text`` grouped when it is a top-level alternation, so it can be concatenated."""
    return "(?:" + text + ")" if _scan(text)[1] else text


def _quant(text: str, lo: int, hi: int | None) -> str:
    """``text`` repeated ``lo`` to ``hi`` times (``None``: unbounded)."""
    if hi == 0:
        return ""
    if (lo, hi) == (1, 1):
        return text
    return _atom(text) + _quant_suffix(lo, hi)


def _quant_suffix(lo: int, hi: int | None) -> str:
    """The quantifier :func:`_quant` writes after the atom (not for ``{1}`` or ``{0}``)."""
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


# ------------------------------------------------------------ code point sets --


def _normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges within U+0000..U+10FFFF with the surrogates removed."""
    items = sorted((max(lo, 0), min(hi, _MAX_CP)) for lo, hi in ranges if lo <= hi)
    out: list[list[int]] = []
    for lo, hi in items:
        if lo > hi:
            continue
        for a, b in ((lo, min(hi, _SUR_LO - 1)), (max(lo, _SUR_HI + 1), hi)):
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
    return tuple((a, b) for a, b in out)


_ALL: Ranges = ((0, _SUR_LO - 1), (_SUR_HI + 1, _MAX_CP))


def _complement(ranges: Ranges) -> Ranges:
    """Every non-surrogate code point not in ``ranges``."""
    return _normalize(complement(_normalize(ranges)))


def _intersect(ranges: Ranges, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo]


def _class_of(ranges: Iterable[tuple[int, int]]) -> str:
    """A character class (or a single escaped character) for code point ranges.

    A large set is written as the negation of its complement: interegular expands
    a class into a set of characters, so ``[\\x20-\\U0010ffff]`` would cost a million
    entries while ``[^\\x00-\\x1f]`` costs 32.  Surrogates are outside every set
    here and never match a negated class either (they have no UTF-8 form).
    """
    rs = _normalize(ranges)
    if not rs:
        return NOTHING
    if len(rs) == 1 and rs[0][0] == rs[0][1]:
        return _escape_cp(rs[0][0], False)
    size = sum(hi - lo + 1 for lo, hi in rs)
    if size > 0x800:
        comp = _complement(rs)
        if sum(hi - lo + 1 for lo, hi in comp) < size:
            return ("[^" + _class_body(comp) + "]") if comp else _ANY
    return "[" + _class_body(rs) + "]"


# ---------------------------------------------------- fixed-width digit ranges --


@dataclass(frozen=True)
class _Base:
    """A positional base and how to render a set of its digits as a class."""

    radix: int
    digit_class: Callable[[tuple[int, ...]], str]
    any_digit: str


def _dec_class(digits: tuple[int, ...]) -> str:
    return _class_of((48 + d, 48 + d) for d in digits)


def _hex_class(digits: tuple[int, ...]) -> str:
    cps = []
    for d in digits:
        if d < 10:
            cps.append(48 + d)
        else:
            cps.extend((ord("a") + d - 10, ord("A") + d - 10))
    return _class_of((c, c) for c in cps)


_DEC = _Base(10, _dec_class, "[0-9]")
_HEX = _Base(16, _hex_class, "[0-9a-fA-F]")


@memo(maxsize=8192)
def _fixed_width(ranges: Ranges, width: int, base: _Base) -> str:
    """Regex of the ``width``-digit numerals (leading zeros kept) of the numbers in ``ranges``.

    Leading digits whose remainders are the same set share one class, so ``[123, 456]``
    becomes ``1(?:2[3-9]|[3-9][0-9])|[23][0-9]{2}|4(?:[0-4][0-9]|5[0-6])``.
    """
    if width == 0:
        return ""
    full = base.radix**width
    if ranges == ((0, full - 1),):
        return _quant(base.any_digit, width, width)
    unit = base.radix ** (width - 1)
    by_rest: dict[Ranges, list[int]] = {}
    for d in range(base.radix):
        sub = _intersect(ranges, d * unit, (d + 1) * unit - 1)
        if sub:
            key = tuple((a - d * unit, b - d * unit) for a, b in sub)
            by_rest.setdefault(key, []).append(d)
    parts = [
        base.digit_class(tuple(digits)) + _atom_if_alt(_fixed_width(rest, width - 1, base))
        for rest, digits in by_rest.items()
    ]
    return _join_alt(parts)


def _join_alt(parts: Sequence[str]) -> str:
    """A top-level alternation (not grouped); callers group with :func:`_atom_if_alt`."""
    uniq = list(dict.fromkeys(parts))
    if not uniq:
        return NOTHING
    return "|".join(uniq)


def _hex4(ranges: Iterable[tuple[int, int]]) -> str:
    """Four hex digits (either case) spelling a code unit in ``ranges`` (within 0..0xFFFF)."""
    rs = tuple(sorted(ranges))
    return _atom_if_alt(_fixed_width(_merge_plain(rs), 4, _HEX))


def _merge_plain(ranges: Iterable[tuple[int, int]]) -> Ranges:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


# ----------------------------------------------------------- JSON encodings --

_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_RAW_OK: Ranges = _normalize([(0x20, 0x21), (0x23, 0x5B), (0x5D, _MAX_CP)])
_BSL = "\\\\"  # the regex of one backslash in the JSON text


SPELLINGS = ("json", "llguidance")
"""How the characters of JSON strings may be written (:func:`spelling`).  ``"json"``
(default): every spelling JSON allows.  ``"llguidance"``: the ones llguidance's schema
compiler allows, a subset: raw characters but ``"``, ``\\``, controls and DEL; the
short escapes but ``\\/``; ``\\u`` only for controls and DEL (``\\u00XX``,
``\\u007f``)."""

_SPELLING: contextvars.ContextVar[str] = contextvars.ContextVar("masklab_json_spelling", default="json")
_RAW_LLG: Ranges = _normalize([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E), (0x80, _MAX_CP)])
# per spelling: (raw characters, short escapes left out, code points with a \u escape,
# astral ones as surrogate pairs); "llguidance-key" is llguidance's spelling of keys no
# property lists (every \u escape, but no \/ and no raw DEL)
_SPELLING_RULES: dict[str, tuple[Ranges, frozenset[int], Ranges, bool]] = {
    "json": (_RAW_OK, frozenset(), ((0, 0xFFFF),), True),
    "llguidance": (_RAW_LLG, frozenset({0x2F}), ((0x00, 0x1F), (0x7F, 0x7F)), False),
    "llguidance-key": (_RAW_LLG, frozenset({0x2F}), ((0, 0xFFFF),), True),
}


@contextlib.contextmanager
def spelling(name: str) -> Iterator[None]:
    """Within the block, the JSON string regexes of this module (:func:`json_string`,
    :func:`encode_codepoints`, :func:`ecma_pattern`...) use the spelling ``name``
    (:data:`SPELLINGS`)."""
    if name not in SPELLINGS:
        raise ValueError(f"spelling must be one of {', '.join(map(repr, SPELLINGS))}, not {name!r}")
    token = _SPELLING.set(name)
    try:
        yield
    finally:
        _SPELLING.reset(token)


@memo(maxsize=4096)
def _encode(ranges: Ranges, how: str = "json") -> str:
    return encode_codepoints(ranges, how)


def encode_codepoints(ranges: Iterable[tuple[int, int]], how: str | None = None) -> str:
    """Regex (one atom) of every JSON-string encoding of one code point in ``ranges``.

    The alternatives are: the raw character (not ``"``, ``\\`` or a control
    character), its short escape where JSON has one, ``\\u`` with four hex digits of
    either case for BMP code points, and a ``\\u\\u`` surrogate pair for astral ones.
    Surrogate code points in ``ranges`` are ignored (see the module doc).  ``how``: a
    :data:`SPELLINGS` name (default: the one in force, :func:`spelling`).
    """
    raw_ok, no_short, u_escaped, pairs = _SPELLING_RULES[_SPELLING.get() if how is None else how]
    rs = _normalize(ranges)
    if not rs:
        return NOTHING
    parts: list[str] = []
    raw = [r for lo, hi in raw_ok for r in _intersect(rs, lo, hi)]
    if raw:
        parts.append(_class_of(raw))
    short = [ord(letter) for cp, letter in sorted(_SHORT_ESCAPES.items())
             if _intersect(rs, cp, cp) and cp not in no_short]
    if short:
        parts.append(_BSL + _class_of((c, c) for c in short))
    bmp = [r for lo, hi in u_escaped for r in _intersect(rs, lo, hi)]
    if bmp:
        parts.append(_BSL + "u" + _hex4(bmp))
    astral = _intersect(rs, 0x10000, _MAX_CP) if pairs else []
    if astral:
        parts.extend(_surrogate_pairs(astral))
    return _group(parts)


def _surrogate_pairs(astral: list[tuple[int, int]]) -> list[str]:
    """``\\uHIGH\\uLOW`` regexes for the astral code points in ``astral``."""
    # For each high surrogate offset (0..1023), the set of low offsets, as ranges.
    pieces: list[tuple[int, int, int, int]] = []  # (h_lo, h_hi, l_lo, l_hi)
    for lo, hi in astral:
        a, b = lo - 0x10000, hi - 0x10000
        ha, la, hb, lb = a >> 10, a & 0x3FF, b >> 10, b & 0x3FF
        if ha == hb:
            pieces.append((ha, ha, la, lb))
            continue
        pieces.append((ha, ha, la, 0x3FF))
        if ha + 1 <= hb - 1:
            pieces.append((ha + 1, hb - 1, 0, 0x3FF))
        pieces.append((hb, hb, 0, lb))
    # Group the high surrogates by their set of low surrogates.  A multi-high piece
    # always has every low one, and no other piece shares its highs (the input is
    # disjoint); single-high pieces may share a high, so their lows are merged first.
    singles: dict[int, list[tuple[int, int]]] = {}
    by_high: dict[Ranges, list[tuple[int, int]]] = {}
    for h_lo, h_hi, l_lo, l_hi in pieces:
        if h_lo == h_hi:
            singles.setdefault(h_lo, []).append((l_lo, l_hi))
        else:
            by_high.setdefault(((l_lo, l_hi),), []).append((h_lo, h_hi))
    for h, lows in singles.items():
        by_high.setdefault(_merge_plain(lows), []).append((h, h))
    out = []
    for lows, highs in by_high.items():
        hi_rx = _hex4((0xD800 + a, 0xD800 + b) for a, b in highs)
        lo_rx = _hex4((0xDC00 + a, 0xDC00 + b) for a, b in lows)
        out.append(_BSL + "u" + hi_rx + _BSL + "u" + lo_rx)
    return out


JSON_CHAR: str = _encode(_ALL)
"""One character of a JSON string as written between the quotes (one code point).

Raw ``[^"\\\\\\x00-\\x1f]``, a short escape, ``\\uXXXX`` of a non-surrogate BMP code
point, or a surrogate pair for an astral one.  Lone surrogates are not matched."""

LLGUIDANCE_CHAR: str = _encode(_ALL, "llguidance")
"""One character of a JSON string as llguidance spells it (:data:`SPELLINGS`)."""

LLGUIDANCE_KEY_CHAR: str = _encode(_ALL, "llguidance-key")
"""One character of an object key that no property lists, as llguidance spells it:
every ``\\u`` escape, but no ``\\/`` and no raw DEL."""

_ANY_CHARS = {"json": _quant(JSON_CHAR, 0, None), "llguidance": _quant(LLGUIDANCE_CHAR, 0, None)}


def json_string(min_length: int = 0, max_length: int | None = None, *, pointer: str = "") -> str:
    """Regex of a JSON string literal (with quotes) of ``min_length..max_length`` code points.

    Lengths count code points, as JSON Schema (and Python's ``len``) does: a
    surrogate-pair escape is one character.  ``min_length > max_length`` gives
    :data:`NOTHING`.  Raises :class:`UnsupportedSchema` (keyword ``minLength`` or
    ``maxLength``) for a negative bound or one above :data:`MAX_STRING_LENGTH`,
    whose DFA would be too large to build in reasonable time.
    """
    for keyword, value in (("minLength", min_length), ("maxLength", max_length)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise UnsupportedSchema(keyword, pointer, f"{value!r} is not an integer")
        if value < 0:
            raise UnsupportedSchema(keyword, pointer, f"{value} is negative")
        if value > MAX_STRING_LENGTH:
            raise UnsupportedSchema(
                keyword,
                pointer,
                f"{value} exceeds {MAX_STRING_LENGTH}: the DFA needs one block of states per character",
            )
    if max_length is not None and min_length > max_length:
        return NOTHING
    if max_length == 0:
        return '""'
    if _SPELLING.get() != "json":
        return '"' + _quant(LLGUIDANCE_CHAR, min_length, max_length) + '"'
    if (min_length, max_length) == (1, 1):
        return '"' + JSON_CHAR + '"'
    # _quant(JSON_CHAR, ...), with the character's atom scanned once, not per string
    return _STRING_HEAD + _quant_suffix(min_length, max_length) + '"'


_STRING_HEAD = '"' + _atom(JSON_CHAR)
_BOUNDS_RX = re.compile(r"(?:|\*|\+|\?|\{(\d+)\}|\{(\d+),\}|\{(\d+),(\d+)\})")


def json_string_bounds(regex: str) -> tuple[int, int | None] | None:
    """``(min_length, max_length)`` when ``regex`` is exactly :func:`json_string` of them
    (a string terminal without ``pattern`` or ``format``), else None."""
    if regex == '""':
        return 0, 0
    if regex == '"' + JSON_CHAR + '"':
        return 1, 1
    head = _STRING_HEAD
    if not (regex.startswith(head) and regex.endswith('"') and len(regex) > len(head)):
        return None
    m = _BOUNDS_RX.fullmatch(regex, len(head), len(regex) - 1)
    if m is None:
        return None
    q = m.group(0)
    if q in ("", "*", "+", "?"):
        lo, hi = {"": (1, 1), "*": (0, None), "+": (1, None), "?": (0, 1)}[q]
    elif m.group(1) is not None:
        lo = hi = int(m.group(1))
    elif m.group(2) is not None:
        lo, hi = int(m.group(2)), None
    else:
        lo, hi = int(m.group(3)), int(m.group(4))
    if lo > MAX_STRING_LENGTH or (hi is not None and (hi > MAX_STRING_LENGTH or hi == 0 or lo > hi)):
        return None
    # json_string(lo, hi) == regex, without writing the character class again
    return (lo, hi) if (lo, hi) != (1, 1) and _quant_suffix(lo, hi) == q else None


_CHAR_CODE: list = []


def _char_code() -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] | None:
    """One copy of :data:`JSON_CHAR`'s DFA as :func:`json_string_dfa` lays copies out:
    ``(rel, dead, done, start, column)`` over its states but the accepting one (``r``
    rows) and its byte classes plus a last column for the quote: ``rel`` the target
    relative to the copy's first state (``r + start`` is the next copy's start), ``dead``
    and ``done`` where the target is dead or finishes the character, ``start`` the
    copy's first state's offset, ``column`` the column of each byte.  None when the
    character's DFA is not a prefix code (one accepting state, no way out of it).

    Built once per process: it depends on nothing but the module's constant
    :data:`JSON_CHAR` (a table any JSON-specific engine has compiled in), so the
    harness's cache clearing between items leaves it alone.
    """
    if not _CHAR_CODE:
        char = _compile_nfa(JSON_CHAR, DEFAULT_MAX_STATES, False)
        xclasses, xt = char.byte_classes()
        acc = np.flatnonzero(char.accepting)
        quote_col = int(xclasses[0x22])
        if (len(acc) != 1 or xt[acc[0]].any() or char.start != 1 or char.accepting[1]
                or xt[1, quote_col] != 0):
            _CHAR_CODE.append(None)
        else:
            f, nx = int(acc[0]), xt.shape[0]
            inner = np.array([q for q in range(1, nx) if q != f], dtype=np.int64)  # the copy's states
            r = inner.size
            idx = np.full(nx, -1, dtype=np.int64)
            idx[inner] = np.arange(r)
            xcols = np.concatenate([xt[inner], xt[inner, quote_col : quote_col + 1]], axis=1)  # (r, k)
            local = idx[xcols]  # -1: dead or the accepting state
            done = xcols == f
            rel = np.where(local >= 0, local, r + idx[1]).astype(np.int32)
            column = xclasses.astype(np.int32)
            column[0x22] = xt.shape[1]
            _CHAR_CODE.append((rel, (local < 0) & ~done, done, int(idx[1]), column))
    return _CHAR_CODE[0]


def json_string_dfa(min_length: int = 0, max_length: int | None = None, *,
                    max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of :func:`json_string` ``(min_length, max_length)``, written down
    directly: the same arrays as ``compile_regex`` of that regex (the tests compare
    them), without its NFA of ``max_length`` copies, subset construction and
    minimization, which took 0.3 s for ``maxLength: 8192`` (164k states).

    A JSON character is a prefix code: its minimal DFA (:data:`JSON_CHAR`, ~20 states)
    has one accepting state, with no way out.  The string's DFA is the opening quote,
    then one copy of that DFA per character already read, the accepting state of
    copy ``c`` merged into the start of copy ``c + 1``, and the closing quote from the
    start of every copy ``c >= min_length`` (the last copy, for an unbounded string,
    loops to its own start; for a bounded one it only closes).  Distinct copies are
    told apart by how many characters may still come, and states within one copy as
    in the character's DFA, so the whole is minimal; it is numbered canonically
    (:func:`toolkit.automata._dfabuild.renumber`).  More than ``max_states`` states raise
    :class:`~toolkit.core.errors.LimitExceeded` before anything is built.
    """
    lo, hi = min_length, max_length
    for name, v in (("min_length", lo), ("max_length", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"json_string_dfa: {name} must be a non-negative int, got {v!r}")
    if lo is None:
        raise ValueError("json_string_dfa: min_length must be a non-negative int, got None")
    if hi is not None and lo > hi:
        return compile_regex(NOTHING)
    code = _char_code()
    if code is None:  # not the prefix code this relies on: the regex road
        return _compile_nfa(json_string(lo, hi), max_states, False)
    rel, dead, done, start, column = code
    r, k = rel.shape
    loop = hi is None and lo > 0  # the last copy's characters are the previous copy's
    copies = (lo if hi is None else hi) + 1
    n_states = 3 + (copies - 1) * r + (r if hi is None and not loop else 1)  # dead, before, after + copies
    if n_states > max_states:
        raise LimitExceeded("max_states", n_states, max_states)
    # each copy's targets relative to its first state: one add per copy, then the dead
    # entries back to 0
    base = 3
    table = np.zeros((3 + copies * r, k), dtype=np.int32)
    body = table[base:].reshape(copies, r, k)
    np.add(rel[None], (base + np.arange(copies, dtype=np.int32) * r)[:, None, None], out=body)
    body[:, dead] = 0
    # after the last copy: its own start (unbounded, lo == 0), else nothing
    body[-1][done] = base + (copies - 1) * r + start if hi is None and not loop else 0
    quote = k - 1
    table[1, quote] = base + start  # the opening quote: to the start of copy 0
    starts = base + np.arange(copies) * r + start
    table[starts, quote] = np.where(np.arange(copies) >= lo, 2, 0)  # the closing quote: to 2
    if hi is not None:
        table[starts[-1], :quote] = 0  # no character after the last one
    elif loop:  # the last copy is its start alone: as the previous start, but it may close
        table[starts[-1], :quote] = table[starts[-2], :quote]
    accepting = np.zeros(table.shape[0], dtype=np.uint8)
    accepting[2] = 1
    # canonical columns (in order of their smallest byte) first: renumber visits in that order
    classes, table = _dfabuild.byte_classes(table, column)
    table, accepting = _dfabuild.renumber(table, accepting, 1)
    return _freeze(table, accepting, 1, json_string(lo, hi), classes.astype(np.int32))


_HEX_RX = tuple(_hex_class((d,)) for d in range(16))  # one hex digit, either case


def _hex_digits(unit: int) -> str:
    """:func:`_hex4` of the one code unit ``unit``, written directly."""
    return "".join(_HEX_RX[(unit >> shift) & 0xF] for shift in (12, 8, 4, 0))


@functools.lru_cache(maxsize=8192)  # a pure string helper, called per character: no scope
def _literal_char(cp: int) -> str:
    """``encode_codepoints(((cp, cp),))`` of one non-surrogate code point, written
    directly: the general road (range sets, the hex digit renderer) is many times
    slower, and keys have many characters."""
    parts = []
    if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
        parts.append(_escape_cp(cp, False))
    letter = _SHORT_ESCAPES.get(cp)
    if letter is not None:
        parts.append(_BSL + _escape_cp(ord(letter), False))
    if cp <= 0xFFFF:
        parts.append(_BSL + "u" + _hex_digits(cp))
    else:
        a = cp - 0x10000
        parts.append(_BSL + "u" + _hex_digits(0xD800 + (a >> 10)) + _BSL + "u" + _hex_digits(0xDC00 + (a & 0x3FF)))
    return _group(parts)


@memo(maxsize=8192)
def json_string_literal(value: str) -> str:
    """Regex of every JSON text that decodes to exactly the string ``value``.

    Each character may be raw (when JSON allows it), short-escaped, ``\\u``-escaped
    with either hex case, or (astral) written as a surrogate pair, so the outputs of
    ``json.dumps(value)``, ``json.dumps(value, ensure_ascii=False)`` and hand-written
    escapes all match.  Lone surrogates in ``value`` are supported exactly (only as
    ``\\u`` escapes); a high surrogate directly followed by a low one cannot be the
    decoding of any JSON text (the pair decodes to one astral character), so such a
    value gives :data:`NOTHING`.
    """
    out = ['"']
    for i, ch in enumerate(value):
        cp = ord(ch)
        if _SUR_LO <= cp <= _SUR_HI:
            nxt = ord(value[i + 1]) if i + 1 < len(value) else -1
            if cp < 0xDC00 and 0xDC00 <= nxt <= _SUR_HI:
                return NOTHING
            out.append(_BSL + "u" + _hex_digits(cp))
        else:
            out.append(_literal_char(cp))
    out.append('"')
    return "".join(out)


@memo(maxsize=4096)
def json_literal_dfa(value: str, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of :func:`json_string_literal` ``(value)``, written down directly.

    The same arrays as ``compile_regex(json_string_literal(value))`` (the tests compare
    them), from :func:`toolkit.automata._dfabuild.json_literal` in C instead of writing, parsing
    and determinizing the regex: object keys are most of a schema grammar's terminals,
    and that road was the largest part of compiling a typical schema.  More than
    ``max_states`` states raise :class:`~toolkit.core.errors.LimitExceeded`, as
    :func:`~toolkit.automata.regex.compile_regex` does.
    """
    built = _dfabuild.json_literal(value, max_states)
    if built is None:
        return compile_regex(NOTHING)
    table, acc, column = built
    return _freeze(table, acc, 1, None, column)


# ------------------------------------------------------------------ integers --


def _nonneg_int(lo: int, hi: int | None) -> str | None:
    """Canonical decimal numerals (no leading zeros) of the integers in ``[lo, hi]``, ``lo >= 0``."""
    if hi is not None and lo > hi:
        return None
    la = len(str(lo))
    parts: list[str] = []
    top = 10**la - 1 if hi is None else min(hi, 10**la - 1)
    parts.append(_fixed_width(((lo, top),), la, _DEC))
    if hi is None:
        parts.append("[1-9]" + _quant("[0-9]", la, None))
    else:
        lb = len(str(hi))
        if lb > la + 1:
            parts.append("[1-9]" + _quant("[0-9]", la, lb - 2))
        if lb > la:
            parts.append(_fixed_width(((10 ** (lb - 1), hi),), lb, _DEC))
    return _group(parts)


MAX_MULTIPLE_STATES = 4096
"""Largest automaton :func:`multiple_of` builds (about ``p * (s + 2)`` states for a
step ``p / 10**s``)."""


def decimal_step(step: Any, *, pointer: str = "") -> tuple[int, int]:
    """``(p, s)`` with ``step == p / 10**s`` exactly, ``p`` a positive integer not
    divisible by 10 unless ``s == 0`` (a float is read as its shortest ``repr``, the
    decimal the schema wrote).  :class:`UnsupportedSchema` (``multipleOf``) for a
    step that is not a positive finite number."""
    if isinstance(step, bool) or not isinstance(step, (int, float, Decimal)):
        raise UnsupportedSchema("multipleOf", pointer, f"{step!r} is not a number")
    d = Decimal(repr(step)) if isinstance(step, float) else Decimal(step)
    if not d.is_finite() or d <= 0:
        raise UnsupportedSchema("multipleOf", pointer, f"{step!r} is not a positive number")
    sign, digits, exp = d.normalize().as_tuple()
    p = int("".join(map(str, digits)))
    if exp >= 0:
        if exp > MAX_BOUND_DIGITS:
            raise UnsupportedSchema("multipleOf", pointer, f"{step!r} has more than {MAX_BOUND_DIGITS} digits")
        return p * 10**exp, 0
    return p, -exp


def multiple_of(step: Any, *, integer: bool = False, negate: bool = False, pointer: str = "") -> str:
    """Regex of the JSON numbers, written without exponent, that are multiples of
    ``step`` (with ``negate``: that are not), in exact decimal arithmetic as JSON
    Schema specifies; with ``integer`` only plain integer numerals.

    The value of ``-?I.F`` is a multiple of ``p / 10**s`` when ``I`` followed by the
    first ``s`` fraction digits (padded with zeros) is a multiple of ``p`` and any
    further digits are zeros: the automaton reads the digits once, keeping the
    remainder modulo ``p`` and how many fraction digits it has read, and the regex is
    written from it (:func:`toolkit.automata.dfaops.dfa_regex`).  Tighter than the schema on
    purpose: exponent forms are not matched (nor, with ``integer``, ``2.0``).
    :class:`UnsupportedSchema` (``multipleOf``) when the automaton would pass
    :data:`MAX_MULTIPLE_STATES`.
    """
    p, s = decimal_step(step, pointer=pointer)
    fraction = not integer
    n_est = p * ((s + 2) if fraction else 1) + 4
    if n_est > MAX_MULTIPLE_STATES:
        raise UnsupportedSchema("multipleOf", pointer, f"{step!r} needs about {n_est} states to check "
                                f"(at most {MAX_MULTIPLE_STATES})")
    # columns: '-' 0, '.' 1, digits 2..11, anything else 12 (dead)
    column = np.full(256, 12, dtype=np.int32)
    column[ord("-")], column[ord(".")] = 0, 1
    column[ord("0") : ord("9") + 1] = np.arange(2, 12)
    cap = max(s, 1)
    ids: dict[tuple, int] = {("dead",): 0, ("start",): 1, ("sign",): 2}
    rows: list[list[int]] = [[0] * 13 for _ in range(3)]
    acc: list[bool] = [False, False, False]
    todo: list[tuple] = []

    def state(key: tuple) -> int:
        if key not in ids:
            ids[key] = len(rows)
            rows.append([0] * 13)
            kind = key[0]
            if kind == "zero":
                whole = True
            elif kind == "int":
                whole = (key[1] * 10**s) % p == 0
            elif kind == "off":  # a nonzero digit past the step's: never a multiple
                whole = False
            else:  # ("frac", r, k)
                whole = None if key[2] == 0 else (key[1] * 10 ** max(s - key[2], 0)) % p == 0
            acc.append(False if whole is None else whole != negate)
            todo.append(key)
        return ids[key]

    for q in (1, 2):
        if q == 1:
            rows[q][0] = 2
        rows[q][2] = state(("zero",))
        for d in range(1, 10):
            rows[q][2 + d] = state(("int", d % p))
    while todo:
        key = todo.pop()
        q, kind = ids[key], key[0]
        if kind in ("zero", "int"):
            r = 0 if kind == "zero" else key[1]
            if kind == "int":
                for d in range(10):
                    rows[q][2 + d] = state(("int", (10 * r + d) % p))
            if fraction:
                rows[q][1] = state(("frac", r, 0))
        elif kind == "off":
            rows[q][2:12] = [q] * 10
        else:
            _, r, k = key
            for d in range(10):
                if k < s:
                    rows[q][2 + d] = state(("frac", (10 * r + d) % p, k + 1))
                elif d == 0:  # past the step's digits: zeros keep the value's remainder
                    rows[q][2] = state(("frac", r, min(k + 1, cap)))
                elif negate:
                    rows[q][2 + d] = state(("off",))
    # trim to the states that can still finish (remainders past the step's digits
    # that are not zero cannot), then minimize: the regex is written from the result
    live = {q for q, a in enumerate(acc) if a}
    grew = True
    while grew:
        before = len(live)
        live |= {q for q, row in enumerate(rows) if q and any(t in live for t in row)}
        grew = len(live) != before
    if 1 not in live:
        return NOTHING
    table = np.array([[t if t in live else 0 for t in row] for row in rows], dtype=np.int32)
    keep = [0] + sorted(live)
    renum = np.zeros(len(rows), dtype=np.int32)
    renum[keep] = np.arange(len(keep), dtype=np.int32)
    table, accepting, start = _minimize(renum[table[keep]], np.array(acc)[keep])
    dfa = _freeze(table, accepting, start, None, column)
    try:
        return dfa_regex(dfa, 200_000)
    except LimitExceeded as e:
        raise UnsupportedSchema("multipleOf", pointer, f"the regex of multiples of {step!r} is too long ({e})") from None


def int_range(lo: int | None, hi: int | None) -> str:
    """Regex of the JSON integers (no fraction, no exponent) in ``[lo, hi]``; ``None`` is unbounded.

    Numerals are canonical (no leading zeros).  ``-0`` denotes 0, so it is accepted
    exactly when 0 is in range (JSON allows it and it decodes to the integer 0).
    An empty range gives :data:`NOTHING`.  Integer-valued texts such as ``1.0`` or
    ``1e2`` are not matched -- tighter than JSON Schema's ``integer``, which accepts
    any number with a zero fractional part.
    """
    for b in (lo, hi):
        if b is not None and (isinstance(b, bool) or not isinstance(b, int)):
            raise TypeError(f"int_range bounds must be int or None, not {type(b).__name__}")
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    parts: list[str] = []
    pos = _nonneg_int(max(lo, 0) if lo is not None else 0, hi) if hi is None or hi >= 0 else None
    if pos is not None:
        parts.append(pos)
    zero_in = (lo is None or lo <= 0) and (hi is None or hi >= 0)
    neg_parts = ["0"] if zero_in else []
    if lo is None or lo < 0:
        neg = _nonneg_int(max(-hi, 1) if hi is not None else 1, -lo if lo is not None else None)
        if neg is not None:
            neg_parts.append(neg)
    if neg_parts:
        parts.append("-" + _group(neg_parts))
    return _group(parts)


# ------------------------------------------------------------------- numbers --

JSON_NUMBER = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+\\-]?[0-9]+)?"
"""Regex of every JSON number text."""

_ANY_FRAC = "(?:\\.[0-9]+)?"


def _to_decimal(value: object, keyword: str, pointer: str) -> Decimal:
    """A finite numeric bound as an exact :class:`Decimal` (floats via their shortest repr)."""
    if isinstance(value, bool):
        raise UnsupportedSchema(keyword, pointer, f"{value!r} is not a number")
    try:
        if isinstance(value, int):
            d = Decimal(value)
        elif isinstance(value, float):
            # repr is the shortest decimal that round-trips: the number the schema's text meant.
            d = Decimal(repr(value))
        elif isinstance(value, Decimal):
            d = value
        elif isinstance(value, Fraction):
            den = value.denominator
            for p in (2, 5):
                while den % p == 0:
                    den //= p
            if den != 1:
                raise UnsupportedSchema(keyword, pointer, f"{value} has no finite decimal expansion")
            d = Decimal(value.numerator) / Decimal(value.denominator)
        else:
            raise UnsupportedSchema(keyword, pointer, f"{value!r} is not a number")
    except (InvalidOperation, ValueError, OverflowError) as e:
        raise UnsupportedSchema(keyword, pointer, f"{value!r} is not a number ({e})") from e
    if not d.is_finite():
        raise UnsupportedSchema(keyword, pointer, f"{value!r} is not finite")
    return d


def _split(d: Decimal, keyword: str, pointer: str) -> tuple[int, str]:
    """``|d|`` as (integer part, fraction digits without trailing zeros)."""
    text = format(abs(d), "f")
    int_part, _, frac = text.partition(".")
    frac = frac.rstrip("0")
    if len(int_part) + len(frac) > MAX_BOUND_DIGITS:
        raise UnsupportedSchema(
            keyword, pointer, f"bound {d} has more than {MAX_BOUND_DIGITS} significant digits"
        )
    return int(int_part), frac


_FracBound = tuple[bool, str]  # (strict, fraction digits without trailing zeros)


def _norm_lo(b: _FracBound | None) -> _FracBound | None:
    if b is None:
        return None
    strict, digits = b[0], b[1].rstrip("0")
    return None if (not strict and not digits) else (strict, digits)


def _norm_hi(b: _FracBound | None) -> _FracBound | None:
    return None if b is None else (b[0], b[1].rstrip("0"))


@memo(maxsize=4096)
def _frac(lo: _FracBound | None, hi: _FracBound | None) -> tuple[str | None, bool]:
    """Fraction digit strings ``G`` whose value ``0.G`` is within the bounds.

    ``lo``/``hi`` compare ``0.G`` with ``0.D`` (``>``/``>=`` and ``<``/``<=`` as
    ``strict`` says); ``None`` means no bound.  Returns ``(regex of the non-empty
    G, whether the empty G -- value 0, i.e. no fraction -- is in)``.
    """
    lo, hi = _norm_lo(lo), _norm_hi(hi)
    empty_ok = lo is None and (hi is None or bool(hi[1]) or not hi[0])
    lo_digits = lo is not None and bool(lo[1])
    hi_digits = hi is not None and bool(hi[1])
    if not lo_digits and not hi_digits:
        # Neither bound has digits left: lo is None or "> 0"; hi is None or "<(=) 0".
        if hi is not None and (lo is not None or hi[0]):
            return None, False  # > 0 and <= 0, or < 0: nothing
        if hi is not None:
            return "0+", True  # <= 0: all zeros
        if lo is not None:
            return "[0-9]*[1-9][0-9]*", False  # > 0: some non-zero digit
        return "[0-9]+", True
    by_tail: dict[tuple[str | None, bool], list[int]] = {}
    for g in range(10):
        nlo: _FracBound | None = None
        if lo is not None:
            d = int(lo[1][0]) if lo[1] else 0
            if g < d:
                continue
            nlo = (lo[0], lo[1][1:]) if g == d else None
        nhi: _FracBound | None = None
        if hi is not None:
            d = int(hi[1][0]) if hi[1] else 0
            if g > d:
                continue
            nhi = (hi[0], hi[1][1:]) if g == d else None
        tail = _frac(nlo, nhi)
        if tail[0] is not None or tail[1]:
            by_tail.setdefault(tail, []).append(g)
    parts = []
    for (rx, tail_empty), digits in by_tail.items():
        head = _dec_class(tuple(digits))
        if rx is None:
            parts.append(head)
        elif tail_empty:
            star = {"[0-9]+": "[0-9]*", "0+": "0*"}.get(rx)
            parts.append(head + (star or _quant(_atom_if_alt(rx), 0, 1)))
        else:
            parts.append(head + _atom_if_alt(rx))
    return (_join_alt(parts) if parts else None), empty_ok


def _frac_part(lo: _FracBound | None, hi: _FracBound | None) -> str | None:
    """The optional ``.digits`` part of a number whose fraction value is within the bounds."""
    rx, empty_ok = _frac(lo, hi)
    if rx is None:
        return "" if empty_ok else None
    body = "\\." + _atom_if_alt(rx)
    return _quant(body, 0, 1) if empty_ok else body


_Bound = tuple[bool, Decimal]  # (strict, value)


def _magnitude(lo: _Bound | None, hi: _Bound | None, kw: tuple[str, str], pointer: str) -> str | None:
    """Texts ``I(.F)?`` (no sign, no exponent) of the values ``v >= 0`` within the bounds."""
    if lo is None:
        lo = (False, Decimal(0))
    if hi is not None and (lo[1] > hi[1] or (lo[1] == hi[1] and (lo[0] or hi[0]))):
        return None
    ai, af = _split(lo[1], kw[0], pointer)
    lo_f: _FracBound = (lo[0], af)
    parts: list[str] = []

    def add(int_rx: str | None, frac_rx: str | None) -> None:
        if int_rx is not None and frac_rx is not None:
            parts.append(_atom_if_alt(int_rx) + frac_rx)

    if hi is None:
        add(str(ai), _frac_part(lo_f, None))
        add(_nonneg_int(ai + 1, None), _ANY_FRAC)
    else:
        bi, bf = _split(hi[1], kw[1], pointer)
        hi_f: _FracBound = (hi[0], bf)
        if ai == bi:
            add(str(ai), _frac_part(lo_f, hi_f))
        else:
            add(str(ai), _frac_part(lo_f, None))
            add(_nonneg_int(ai + 1, bi - 1), _ANY_FRAC)
            add(str(bi), _frac_part(None, hi_f))
    return _group(parts) if parts else None


def number_range(
    lo: int | float | Decimal | Fraction | None,
    hi: int | float | Decimal | Fraction | None,
    *,
    lo_exclusive: bool = False,
    hi_exclusive: bool = False,
    integer: bool = False,
    pointer: str = "",
) -> str:
    """Regex of the JSON numbers ``x`` with ``lo <= x <= hi`` (``<`` where exclusive).

    ``None`` leaves a side unbounded; with neither bound the result is
    :data:`JSON_NUMBER` (or every integer when ``integer``).  Bounds may be int,
    float (read as its shortest ``repr``, i.e. the decimal the schema wrote), Decimal
    or a Fraction with a finite decimal expansion; comparisons are exact decimal
    arithmetic, and non-integral bounds are exact too (fraction digits are compared
    digit by digit).

    Tighter than the schema, on purpose:

    * when a bound is set, exponent forms (``1e2``, ``5E-1``) are not matched: their
      value cannot be compared with a bound by a small automaton;
    * with ``integer``, only plain integer numerals match (see :func:`int_range`),
      not ``1.0`` or ``1e2``;
    * validators that compare in binary floating point may round a text with more
      than ~17 significant digits onto an exclusive bound; this regex uses the
      exact decimal value (which is what JSON Schema specifies).

    ``-0`` (and ``-0.0``) is zero: accepted exactly when 0 is in range.  Raises
    :class:`UnsupportedSchema` (``minimum``/``maximum``/``exclusiveMinimum``/
    ``exclusiveMaximum``) for a bound that is not a finite number or has more than
    :data:`MAX_BOUND_DIGITS` digits.
    """
    kw_lo = "exclusiveMinimum" if lo_exclusive else "minimum"
    kw_hi = "exclusiveMaximum" if hi_exclusive else "maximum"
    dlo = _to_decimal(lo, kw_lo, pointer) if lo is not None else None
    dhi = _to_decimal(hi, kw_hi, pointer) if hi is not None else None
    if integer:
        for d, kw in ((dlo, kw_lo), (dhi, kw_hi)):
            if d is not None:
                _split(d, kw, pointer)  # enforces the digit limit
        ilo = None if dlo is None else (math.floor(dlo) + 1 if lo_exclusive else math.ceil(dlo))
        ihi = None if dhi is None else (math.ceil(dhi) - 1 if hi_exclusive else math.floor(dhi))
        return int_range(ilo, ihi)
    if dlo is None and dhi is None:
        return JSON_NUMBER
    kw = (kw_lo, kw_hi)
    # Texts without a sign: x = v >= 0.
    pos_lo: _Bound | None = None
    pos_ok = True
    if dlo is not None and dlo >= 0:
        pos_lo = (lo_exclusive, dlo)
    pos_hi: _Bound | None = None
    if dhi is not None:
        if dhi < 0 or (dhi == 0 and hi_exclusive):
            pos_ok = False
        pos_hi = (hi_exclusive, dhi)
    # Texts "-v": x = -v, so x >= L <=> v <= -L and x <= H <=> v >= -H.
    neg_lo: _Bound | None = None
    neg_hi: _Bound | None = None
    neg_ok = True
    if dlo is not None:
        if dlo > 0 or (dlo == 0 and lo_exclusive):
            neg_ok = False
        neg_hi = (lo_exclusive, -dlo)
    if dhi is not None and (dhi < 0 or (dhi == 0 and hi_exclusive)):
        neg_lo = (hi_exclusive, -dhi)
    parts: list[str] = []
    if pos_ok:
        m = _magnitude(pos_lo, pos_hi, kw, pointer)
        if m is not None:
            parts.append(m)
    if neg_ok:
        m = _magnitude(neg_lo, neg_hi, (kw_hi, kw_lo), pointer)
        if m is not None:
            parts.append("-" + _atom(m))
    return _group(parts)


# ------------------------------------------------------------------- formats --

_SL = "\\x2F"  # "/", never written raw: it delimits regexes in Lark grammars
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001..9999
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DAY31 = "(?:0[1-9]|[12][0-9]|3[01])"
_DAY30 = "(?:0[1-9]|[12][0-9]|30)"
_DAY28 = "(?:0[1-9]|1[0-9]|2[0-8])"
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-{_DAY31}|(?:0[469]|11)-{_DAY30}|02-{_DAY28})"
    f"|{_LEAP_YEAR}-02-29)"
)
_HOUR = "(?:[01][0-9]|2[0-3])"
_MINUTE = "[0-5][0-9]"
_OFFSET = f"(?:[zZ]|[+\\-]{_HOUR}:{_MINUTE})"
_TIME = f"{_HOUR}:{_MINUTE}:{_MINUTE}(?:\\.[0-9]+)?{_OFFSET}"

_DEC_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_DEC_OCTET}(?:\\.{_DEC_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"


def _ipv6() -> str:
    """RFC 4291 section 2.2 text forms, as the IPv6address rule of RFC 3986."""
    g = f"{_H16}:"
    alts = [
        f"(?:{g}){{6}}{_LS32}",
        f"::(?:{g}){{5}}{_LS32}",
        f"(?:{_H16})?::(?:{g}){{4}}{_LS32}",
    ]
    for k, tail in ((1, f"(?:{g}){{3}}{_LS32}"), (2, f"(?:{g}){{2}}{_LS32}"), (3, f"{g}{_LS32}"),
                    (4, _LS32), (5, _H16), (6, "")):
        alts.append(f"(?:(?:{g}){{0,{k}}}{_H16})?::{tail}")
    return "(?:" + "|".join(alts) + ")"


_IPV6 = _ipv6()

_ALNUM = "[A-Za-z0-9]"
_LDH = "[A-Za-z0-9\\-]"


def _label(first: str, max_len: int) -> str:
    """A hostname label: 1..max_len letters, digits, hyphens; alphanumeric at both ends;
    no ``--`` in positions 3 and 4 (reserved for IDNA A-labels, which must be valid
    Punycode -- not checkable here)."""
    short = f"{_LDH}{{0,2}}{_ALNUM}"  # total length 2..4
    long_ = f"{_LDH}(?:{_ALNUM}{_LDH}|\\-{_ALNUM}){_LDH}{{0,{max_len - 5}}}{_ALNUM}"  # 5..max_len
    return f"{first}(?:{short}|{long_})?"


def _hostname() -> str:
    """Labels with a total length of at most 253, as a union of shapes (see FORMATS doc)."""
    shapes = []
    # (labels, max label length, max length of the last label): each total <= 253.
    for n_labels, max_len, last_len in ((4, 63, 61), (8, 30, 30), (16, 14, 14)):
        label, last = _label(_ALNUM, max_len), _label("[A-Za-z]", last_len)
        shapes.append(f"(?:{label}\\.){{0,{n_labels - 1}}}{last}")
    return "(?:" + "|".join(shapes) + ")"


_UNRESERVED = "A-Za-z0-9\\-._~"
_SUB_DELIMS = "!$&'()*+,;="
_PCT = "%[0-9a-fA-F]{2}"
_PCHAR = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_QUERY = f"(?:{_PCHAR}|[{_SL}?])*"
_USERINFO = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_REG_NAME = f"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_IP_LITERAL = f"\\[(?:{_IPV6}|v[0-9a-fA-F]+\\.[{_UNRESERVED}{_SUB_DELIMS}:]+)\\]"
_AUTHORITY = f"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{_REG_NAME})(?::[0-9]*)?"
_PATH_ABEMPTY = f"(?:{_SL}{_SEGMENT})*"
_PATH_ABSOLUTE = f"{_SL}(?:{_SEGMENT_NZ}(?:{_SL}{_SEGMENT})*)?"
_SCHEME = "[A-Za-z][A-Za-z0-9+\\-.]*"
_TAIL = f"(?:\\?{_QUERY})?(?:#{_QUERY})?"
_URI = (
    f"{_SCHEME}:(?:{_SL}{_SL}{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
    f"|{_SEGMENT_NZ}(?:{_SL}{_SEGMENT})*|){_TAIL}"
)
_RELATIVE_REF = (
    f"(?:{_SL}{_SL}{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
    f"|{_SEGMENT_NZ_NC}(?:{_SL}{_SEGMENT})*|){_TAIL}"
)

_ATEXT = f"[A-Za-z0-9!#$%&'*+\\-{_SL}=?^_`{{|}}~]"
_EMAIL = (
    f"{_ATEXT}+(?:\\.{_ATEXT}+)*@{_ALNUM}(?:{_LDH}{{0,61}}{_ALNUM})?"
    f"(?:\\.{_ALNUM}(?:{_LDH}{{0,61}}{_ALNUM})?)*"
)

# RFC 3339 appendix A: P then a date part (with an optional time part), a time part, or weeks
_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = f"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"
# a regex as JSON text: literal characters, escaped metacharacters and \d \w \s (a
# backslash is \\ in JSON), ".", classes of literal characters, each at most once
# quantified, branches joined by "|", optional "^" and "$" at the ends
_RX_ATOM = r"(?:[ !#%&',\-/0-9:;<=>@A-Z_`a-z~]|\\\\[\^$.|?*+()\[\]{}/dDwWsS]|\.|\[[ !#-,./-Z_-~]+\])"
_RX_BRANCH = f"(?:{_RX_ATOM}[*+?]?)*"
_REGEX = f"\\^?{_RX_BRANCH}(?:\\|{_RX_BRANCH})*\\$?"

FORMATS: dict[str, str] = {
    "date-time": f'"{_DATE}[tT]{_TIME}"',
    "date": f'"{_DATE}"',
    "time": f'"{_TIME}"',
    "email": f'"{_EMAIL}"',
    "uuid": '"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"',
    "uri": f'"{_URI}"',
    "uri-reference": f'"(?:{_URI}|{_RELATIVE_REF})"',
    "ipv4": f'"{_IPV4}"',
    "ipv6": f'"{_IPV6}"',
    "hostname": f'"{_hostname()}"',
    "duration": f'"{_DURATION}"',
    "regex": f'"{_REGEX}"',
}
"""JSON string literal regexes (quotes included) of the supported ``format`` values.

Every value is written with raw ASCII characters only (no escapes): tighter than
JSON, which could spell ``"2020-01-01"`` with ``\\u0032``, but no producer does.
Per format, tighter than the RFC where noted:

* ``date``: RFC 3339 full-date, month lengths and leap years exact; years
  0001..9999 (year 0000 is RFC-valid but Python's ``date`` and so ``jsonschema``
  reject it).
* ``time`` / ``date-time``: RFC 3339 full-time / date-time with ``T``/``Z`` in
  either case, optional fraction, offset ``Z`` or ``+hh:mm``; the leap second
  ``:60`` is not accepted (it is valid only at 23:59 UTC, which depends on the offset).
* ``email``: RFC 5322 ``dot-atom "@" domain`` where the domain is dot-separated
  RFC 1123 labels (no quoted local parts, no IP-literal domains).
* ``uuid``: 8-4-4-4-12 hex digits, either case.
* ``uri`` / ``uri-reference``: the RFC 3986 grammar (``URI`` and ``URI-reference``)
  over ASCII, IP-literals included: exact.
* ``ipv4``: dotted quad, each 0..255 without leading zeros: exact (RFC 2673 form).
* ``ipv6``: the RFC 4291 text forms (RFC 3986 ``IPv6address``); no zone id.
* ``duration``: the RFC 3339 appendix A grammar (``P1Y2M``, ``PT5M``, ``P3W``): exact.
* ``regex``: a regular subset of the regexes valid in ECMA-262 and Python alike
  (nested groups are not regular): literal and escaped characters, ``\\d \\w \\s``,
  ``.``, classes of literal characters, one quantifier ``* + ?`` per atom, ``|``, and
  ``^``/``$`` at the ends.  No groups, ranges or counted repeats: tighter.
* ``hostname``: RFC 1123 labels (letters, digits, hyphens; alphanumeric at both
  ends; 1..63 characters).  Tighter: the last label starts with a letter (RFC 1123
  2.1: a top-level label is alphabetic, so no dotted-quad look-alikes); no label has
  ``--`` at positions 3-4 (IDNA A-labels need a Punycode check); and the 253
  character limit is enforced by shape: up to 4 labels of <= 63 (the last <= 61),
  or up to 8 labels of <= 30, or up to 16 labels of <= 14 characters.
"""


def json_format(name: str, *, pointer: str = "") -> str | None:
    """The JSON string literal regex of ``format: name``; ``None`` for an unknown format.

    An unknown format is an annotation in JSON Schema 2020-12, so the caller ignores
    it; ``pointer`` is accepted for symmetry with the other builders.
    """
    del pointer
    return FORMATS.get(name)


# ------------------------------------------------------------ ECMA patterns --


@dataclass(frozen=True)
class _Chars:
    ranges: Ranges


@dataclass(frozen=True)
class _Seq:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Alt:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Repeat:
    item: _Node
    lo: int
    hi: int | None


@dataclass(frozen=True)
class _Anchor:
    kind: str  # "^" or "$"


_Node = _Chars | _Seq | _Alt | _Repeat | _Anchor
_EMPTY = _Seq(())

_WS: Ranges = _normalize(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
     (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)
_DIGITS: Ranges = ((0x30, 0x39),)
_WORD: Ranges = _normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_DOT: Ranges = _complement(_normalize([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
_CLASS_ESCAPES = {
    "d": _DIGITS, "D": _complement(_DIGITS),
    "w": _WORD, "W": _complement(_WORD),
    "s": _WS, "S": _complement(_WS),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_HEXDIGITS = set("0123456789abcdefABCDEF")


class _EcmaParser:
    """Recursive-descent parser of ECMA-262 patterns (with Annex B leniency for ``{``)."""

    def __init__(self, source: str, pointer: str):
        self.src = source
        self.pointer = pointer
        self.i = 0

    def unsupported(self, what: str, start: int, end: int | None = None) -> UnsupportedSchema:
        frag = self.src[start : end if end is not None else self.i]
        return UnsupportedSchema("pattern", self.pointer, f"{what}: {frag!r} in {self.src!r}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.src[j] if j < len(self.src) else ""

    def parse(self) -> _Node:
        node = self.disjunction()
        if self.i < len(self.src):
            raise self.unsupported("unbalanced ')'", self.i, self.i + 1)
        return node

    def disjunction(self) -> _Node:
        options = [self.alternative()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.alternative())
        return options[0] if len(options) == 1 else _Alt(tuple(options))

    def alternative(self) -> _Node:
        items: list[_Node] = []
        while self.i < len(self.src) and self.peek() not in "|)":
            items.append(self.term())
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def term(self) -> _Node:
        start = self.i
        c = self.peek()
        if c in "^$":
            self.i += 1
            if self.peek() in ("*", "+", "?") or self.quantifier_ahead():
                raise self.unsupported("quantified anchor (invalid in ECMAScript)", start, self.i + 1)
            return _Anchor(c)
        atom = self.atom()
        q = self.quantifier()
        if q is None:
            return atom
        lo, hi = q
        if hi is not None and lo > hi:
            raise self.unsupported("quantifier range out of order", start)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise self.unsupported(f"repeat count above {MAX_REPEAT}", start)
        return _Repeat(atom, lo, hi)

    def quantifier_ahead(self) -> bool:
        save = self.i
        try:
            return self.peek() == "{" and self.braces() is not None
        finally:
            self.i = save

    def braces(self) -> tuple[int, int | None] | None:
        """Parse ``{n}``, ``{n,}`` or ``{n,m}`` at the cursor; None (cursor kept) if not one."""
        j = self.i + 1
        k = j
        while k < len(self.src) and self.src[k].isdigit() and self.src[k].isascii():
            k += 1
        if k == j:
            return None
        lo = int(self.src[j:k])
        hi: int | None = lo
        if k < len(self.src) and self.src[k] == ",":
            m = k + 1
            while m < len(self.src) and self.src[m].isdigit() and self.src[m].isascii():
                m += 1
            hi = int(self.src[k + 1 : m]) if m > k + 1 else None
            k = m
        if k < len(self.src) and self.src[k] == "}":
            self.i = k + 1
            return lo, hi
        return None

    def quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        q: tuple[int, int | None] | None
        if c == "*":
            q, self.i = (0, None), self.i + 1
        elif c == "+":
            q, self.i = (1, None), self.i + 1
        elif c == "?":
            q, self.i = (0, 1), self.i + 1
        elif c == "{":
            q = self.braces()
        else:
            q = None
        if q is not None and self.peek() == "?":
            self.i += 1  # lazy: same language
        return q

    def atom(self) -> _Node:
        start = self.i
        c = self.peek()
        if c == "(":
            return self.group()
        if c == ".":
            self.i += 1
            return _Chars(_DOT)
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.atom_escape()
        if c in "*+?" or (c == "{" and self.quantifier_ahead()):
            raise self.unsupported("nothing to repeat", start, start + 1)
        self.i += 1
        return _Chars(_normalize([(ord(c), ord(c))]))

    def group(self) -> _Node:
        start = self.i
        self.i += 1
        if self.peek() == "?":
            nxt = self.src[self.i + 1 : self.i + 3]
            if nxt.startswith(":"):
                self.i += 2
            elif nxt.startswith("=") or nxt.startswith("!") or nxt in ("<=", "<!"):
                raise self.unsupported("lookaround assertion", start, self.i + 1 + len(nxt))
            elif nxt.startswith("<"):
                end = self.src.find(">", self.i)
                if end < 0:
                    raise self.unsupported("unterminated group name", start)
                self.i = end + 1
            else:
                raise self.unsupported("unsupported group syntax", start, self.i + 2)
        inner = self.disjunction()
        if self.peek() != ")":
            raise self.unsupported("missing ')'", start)
        self.i += 1
        return inner

    def hex_digits(self, n: int) -> int | None:
        text = self.src[self.i : self.i + n]
        if len(text) == n and all(ch in _HEXDIGITS for ch in text):
            self.i += n
            return int(text, 16)
        return None

    def code_escape(self, start: int) -> int | None:
        """After a backslash: the code point of ``\\xHH``/``\\uHHHH``/``\\u{...}``/controls.

        Returns None when the escape is not one of those (the cursor is unchanged).
        """
        c = self.peek()
        if c in _CONTROL_ESCAPES:
            self.i += 1
            return _CONTROL_ESCAPES[c]
        if c == "0" and not self.peek(1).isdigit():
            self.i += 1
            return 0
        if c == "c":
            letter = self.peek(1)
            if letter.isascii() and letter.isalpha():
                self.i += 2
                return ord(letter) % 32
            raise self.unsupported("ambiguous \\c escape", start, self.i + 2)
        if c == "x":
            self.i += 1
            v = self.hex_digits(2)
            if v is None:
                raise self.unsupported("malformed \\x escape", start, self.i + 2)
            return v
        if c == "u":
            self.i += 1
            if self.peek() == "{":
                end = self.src.find("}", self.i)
                body = self.src[self.i + 1 : end] if end > 0 else ""
                if not body or not all(ch in _HEXDIGITS for ch in body) or int(body, 16) > _MAX_CP:
                    raise self.unsupported("malformed \\u{...} escape", start, end + 1 if end > 0 else None)
                self.i = end + 1
                return int(body, 16)
            v = self.hex_digits(4)
            if v is None:
                raise self.unsupported("malformed \\u escape", start, self.i + 4)
            if 0xD800 <= v <= 0xDBFF and self.src[self.i : self.i + 2] == "\\u":
                save = self.i
                self.i += 2
                low = self.hex_digits(4)
                if low is not None and 0xDC00 <= low <= 0xDFFF:
                    return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00)
                self.i = save
            return v
        return None

    def atom_escape(self) -> _Node:
        start = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.unsupported("trailing backslash", start)
        if c in _CLASS_ESCAPES:
            self.i += 1
            return _Chars(_CLASS_ESCAPES[c])
        if c in "bB":
            raise self.unsupported("word boundary assertion", start, self.i + 1)
        if c in "pP":
            raise self.unsupported("Unicode property escape", start, self.src.find("}", self.i) + 1 or None)
        if c == "k" or (c.isdigit() and c != "0"):
            raise self.unsupported("backreference", start, self.i + 1)
        cp = self.literal_escape(start, c)
        return _Chars(_normalize([(cp, cp)]))

    def class_atom(self) -> int | Ranges:
        """One class member: a code point, or a set for ``\\d`` and friends."""
        start = self.i
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        self.i += 1
        c = self.peek()
        if not c:
            raise self.unsupported("trailing backslash", start)
        if c in _CLASS_ESCAPES:
            self.i += 1
            return _CLASS_ESCAPES[c]
        if c == "b":
            self.i += 1
            return 0x08
        if c == "-":
            self.i += 1
            return 0x2D
        if c in "pP":
            raise self.unsupported("Unicode property escape", start, self.src.find("}", self.i) + 1 or None)
        if c.isdigit() and c != "0" or c == "k":
            raise self.unsupported("octal or backreference escape in a class", start, self.i + 1)
        return self.literal_escape(start, c)

    def literal_escape(self, start: int, c: str) -> int:
        """The code point of ``\\c`` once the special escapes are ruled out: a code
        escape (``\\x41``, ``\\u0041``, ``\\n``...) or an escaped punctuation mark;
        an unknown letter or digit escape is unsupported."""
        cp = self.code_escape(start)
        if cp is None:
            if c.isascii() and c.isalnum():
                raise self.unsupported("unknown escape", start, self.i + 1)
            self.i += 1
            cp = ord(c)
        return cp

    def char_class(self) -> _Node:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        members: list[tuple[int, int]] = []
        while True:
            if self.i >= len(self.src):
                raise self.unsupported("unterminated character class", start)
            if self.peek() == "]":
                self.i += 1
                break
            a = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                b = self.class_atom()
                if isinstance(a, int) and isinstance(b, int):
                    if a > b:
                        raise self.unsupported("class range out of order", start, self.i)
                    members.append((a, b))
                    continue
                # Annex B: a range with a class escape at either end is the union of
                # both ends and "-"; the cursor stays after b, so [\d-a-c] has no "b".
                members.append((0x2D, 0x2D))
                if isinstance(b, int):
                    members.append((b, b))
                else:
                    members.extend(b)
            if isinstance(a, int):
                members.append((a, a))
            else:
                members.extend(a)
        rs = _normalize(members)
        return _Chars(_complement(rs) if negated else rs)


def _nullable(node: _Node) -> bool:
    if isinstance(node, _Chars):
        return False
    if isinstance(node, _Seq):
        return all(_nullable(n) for n in node.items)
    if isinstance(node, _Alt):
        return any(_nullable(n) for n in node.items)
    if isinstance(node, _Repeat):
        return node.lo == 0 or _nullable(node.item)
    return True


_Forms = dict[tuple[bool, bool], list[_Node]]


def _add(forms: _Forms, key: tuple[bool, bool], node: _Node) -> None:
    bucket = forms.setdefault(key, [])
    if node not in bucket:
        bucket.append(node)


def _merged(nodes: list[_Node]) -> _Node:
    return nodes[0] if len(nodes) == 1 else _Alt(tuple(nodes))


MAX_ANCHORED_REPEAT = 16
"""Largest finite bound of a quantifier over a group that contains an anchor; such a
repeat is unrolled, so its size grows with the bound."""


def _forms(node: _Node, p: _EcmaParser) -> _Forms:
    """Split ``node`` by anchors: ``{(starts at 0, ends at end): [anchor-free nodes]}``.

    A match of ``node`` is a match of one of the anchor-free nodes, placed at the
    start of the string when the first flag is set and at its end when the second is.
    """
    if isinstance(node, _Chars):
        return {(False, False): [node]}
    if isinstance(node, _Anchor):
        return {(node.kind == "^", node.kind == "$"): [_EMPTY]}
    if isinstance(node, _Alt):
        out: _Forms = {}
        for item in node.items:
            for key, nodes in _forms(item, p).items():
                for n in nodes:
                    _add(out, key, n)
        return out
    if isinstance(node, _Seq):
        acc: _Forms = {(False, False): [_EMPTY]}
        for item in node.items:
            acc = _concat_forms(acc, _forms(item, p))
        return acc
    assert isinstance(node, _Repeat)
    inner = _forms(node.item, p)
    if set(inner) == {(False, False)}:
        return {(False, False): [_Repeat(_merged(inner[(False, False)]), node.lo, node.hi)]}
    if node.hi == 0:
        return {(False, False): [_EMPTY]}
    # An anchor inside a repeat: X{lo,hi} = X^lo (X?)^(hi-lo), or X^lo X* when unbounded.
    bound = node.lo if node.hi is None else node.hi
    if bound > MAX_ANCHORED_REPEAT:
        raise UnsupportedSchema(
            "pattern", p.pointer,
            f"anchor inside a group repeated more than {MAX_ANCHORED_REPEAT} times in {p.src!r}",
        )
    optional = {k: list(v) for k, v in inner.items()}
    _add(optional, (False, False), _EMPTY)
    acc = {(False, False): [_EMPTY]}
    for _ in range(node.lo):
        acc = _concat_forms(acc, inner)
    if node.hi is None:
        return _concat_forms(acc, _star_forms(inner))
    for _ in range(node.hi - node.lo):
        acc = _concat_forms(acc, optional)
    return acc


def _concat_forms(left: _Forms, right: _Forms) -> _Forms:
    """Forms of the concatenation of two split nodes (see :func:`_forms`)."""
    out: _Forms = {}
    for (s1, e1), left_nodes in left.items():
        for (s2, e2), right_nodes in right.items():
            a = _merged(left_nodes)
            b = _merged(right_nodes)
            if s2:  # the right part starts at 0: the left part matched "" there
                if not _nullable(a):
                    continue
                a = _EMPTY
            if e1:  # the left part ends at the end: the right part matches ""
                if not _nullable(b):
                    continue
                b = _EMPTY
            _add(out, (s1 or s2, e1 or e2), _seq(a, b))
    return out


def _star_forms(inner: _Forms) -> _Forms:
    """Forms of ``X*`` from those of ``X``.

    Iterations before one tied to the start matched "" at position 0, and iterations
    after one tied to the end match "" there; dropping them changes nothing, so a
    start-tied iteration can only come first and an end-tied one only last:
    ``U*``, ``S U*``, ``U* E``, and ``B | S U* E``.
    """
    u = _Repeat(_merged(inner[(False, False)]), 0, None) if (False, False) in inner else _EMPTY
    out: _Forms = {(False, False): [u]}
    if (True, False) in inner:
        out[(True, False)] = [_seq(_merged(inner[(True, False)]), u)]
    if (False, True) in inner:
        out[(False, True)] = [_seq(u, _merged(inner[(False, True)]))]
    both: list[_Node] = list(inner.get((True, True), []))
    if (True, False) in inner and (False, True) in inner:
        both.append(_seq(_seq(_merged(inner[(True, False)]), u), _merged(inner[(False, True)])))
    if both:
        out[(True, True)] = both
    return out


def _seq(a: _Node, b: _Node) -> _Node:
    items = (a.items if isinstance(a, _Seq) else (a,)) + (b.items if isinstance(b, _Seq) else (b,))
    return items[0] if len(items) == 1 else _Seq(items)


def _render_node(node: _Node) -> str:
    """The JSON-text regex of an anchor-free node (characters become their encodings)."""
    if isinstance(node, _Chars):
        return _encode(node.ranges, _SPELLING.get())
    if isinstance(node, _Seq):
        return "".join(_atom_if_alt(_render_node(n)) for n in node.items)
    if isinstance(node, _Alt):
        return _group([_render_node(n) for n in node.items])
    if isinstance(node, _Repeat):
        inner = _render_node(node.item)
        return _quant(inner, node.lo, node.hi) if inner else ""
    raise AssertionError(f"anchor left in {node!r}")


def ecma_pattern(pattern: str, *, pointer: str = "") -> str:
    """Regex of the JSON string literals (with quotes) whose value ``pattern`` matches.

    ``pattern`` is an ECMA-262 regex applied as JSON Schema does: a *search* in the
    decoded string, anchored only by ``^``/``$``.  Semantics are those of the ``u``
    flag the spec recommends: a character is a code point; ``\\d`` and ``\\w`` are
    ASCII; ``\\s`` is ECMAScript's Unicode white space and line terminators; ``.``
    is any character but ``\\n``, ``\\r``, U+2028, U+2029; ``[^...]`` is any other
    character.  Syntax follows Annex B where it is unambiguous (a ``{`` that starts no
    quantifier is literal; ``[\\w-.]`` has a literal ``-``).

    Anchors may appear anywhere: each alternative is split by whether it is tied to
    the start and/or end of the string, so ``^a|b$``, ``^$|^x+$`` and ``(a/|b$)*``
    are exact.
    Each character class then becomes the alternation of all JSON encodings of its
    characters (raw, short escape, ``\\u`` in either hex case, surrogate pairs).

    Raises :class:`UnsupportedSchema` (keyword ``pattern``, the fragment in the
    reason) for lookarounds, backreferences, ``\\b``/``\\B``, ``\\p{..}``,
    ambiguous escapes (e.g. ``\\a``, ``\\z``), repeat counts above
    :data:`MAX_REPEAT` (:data:`MAX_ANCHORED_REPEAT` for a group holding an anchor),
    and invalid syntax.  Strings with lone
    surrogates are never matched (see the module doc).
    """
    if not isinstance(pattern, str):
        raise UnsupportedSchema("pattern", pointer, f"{pattern!r} is not a string")
    parser = _EcmaParser(pattern, pointer)
    tree = parser.parse()
    parts = []
    for (start, end), nodes in _forms(tree, parser).items():
        body = _atom_if_alt(_render_node(_merged(nodes)))
        if not start and not end and not body:
            parts.append(_ANY_CHARS[_SPELLING.get()])
        else:
            anys = _ANY_CHARS[_SPELLING.get()]
            parts.append(("" if start else anys) + body + ("" if end else anys))
    return '"' + _group(parts) + '"'
