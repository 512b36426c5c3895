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
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.automata import _dfabuild
from toolkit.automata.dfa import DEFAULT_MAX_STATES, ByteDFA, freeze
from toolkit.automata.nfa import compile_nfa
from toolkit.automata.rxtext import class_body, escape_cp
from toolkit.automata.utf8 import complement
from toolkit.core.errors import LimitExceeded, UnsupportedSchema
from toolkit.core.memo import memo

__all__ = [
    "JSON_CHAR",
    "NOTHING",
    "MAX_STRING_LENGTH",
    "MAX_STRING_STATES",
    "json_string",
    "json_string_literal",
    "json_literal_dfa",
    "json_literals_dfa",
    "json_string_bounds",
    "json_string_dfa",
    "encode_codepoints",
    "SPELLINGS",
    "LLGUIDANCE_ESCAPES",
    "llguidance_spelling",
    "free_spelling",
    "key_spelling",
    "char_of",
    "any_chars",
    "check_spelling",
    "spelled_literal",
    "LLGUIDANCE_CHAR",
    "spelling",
    "SPELLING_VAR",
    "Ranges",
    "MAX_CP",
    "MAX_REPEAT",
    "MAX_BOUND_DIGITS",
    "DEC",
    "group",
    "atom",
    "atom_if_alt",
    "quant",
    "join_alt",
    "dec_class",
    "fixed_width",
    "normalize_ranges",
    "complement_ranges",
    "encode_ranges",
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

MAX_CP = 0x10FFFF
_SUR_LO, _SUR_HI = 0xD800, 0xDFFF

Ranges = tuple[tuple[int, int], ...]


# ------------------------------------------------------------ small helpers --


def group(parts: Sequence[str]) -> str:
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


def atom(text: str) -> str:
    """``text`` wrapped so that a quantifier after it applies to all of it."""
    units, alt, quant = _scan(text)
    if units == 1 and not alt and not quant:
        return text
    return "(?:" + text + ")"


def atom_if_alt(text: str) -> str:
    """``text`` grouped when it is a top-level alternation, so it can be concatenated."""
    return "(?:" + text + ")" if _scan(text)[1] else text


def quant(text: str, lo: int, hi: int | None) -> str:
    """``text`` repeated ``lo`` to ``hi`` times (``None``: unbounded)."""
    if hi == 0:
        return ""
    if (lo, hi) == (1, 1):
        return text
    return atom(text) + _quant_suffix(lo, hi)


def _quant_suffix(lo: int, hi: int | None) -> str:
    """The quantifier :func:`quant` writes after the atom (not for ``{1}`` or ``{0}``)."""
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


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges within U+0000..U+10FFFF with the surrogates removed."""
    items = sorted((max(lo, 0), min(hi, MAX_CP)) for lo, hi in ranges if lo <= hi)
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


_ALL: Ranges = ((0, _SUR_LO - 1), (_SUR_HI + 1, MAX_CP))


def complement_ranges(ranges: Ranges) -> Ranges:
    """Every non-surrogate code point not in ``ranges``."""
    return normalize_ranges(complement(normalize_ranges(ranges)))


def _intersect(ranges: Ranges, lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo]


def _class_of(ranges: Iterable[tuple[int, int]]) -> str:
    """A character class (or a single escaped character) for code point ranges.

    A large set is written as the negation of its complement: interegular expands
    a class into a set of characters, so ``[\\x20-\\U0010ffff]`` would cost a million
    entries while ``[^\\x00-\\x1f]`` costs 32.  Surrogates are outside every set
    here and never match a negated class either (they have no UTF-8 form).
    """
    rs = normalize_ranges(ranges)
    if not rs:
        return NOTHING
    if len(rs) == 1 and rs[0][0] == rs[0][1]:
        return escape_cp(rs[0][0], False)
    size = sum(hi - lo + 1 for lo, hi in rs)
    if size > 0x800:
        comp = complement_ranges(rs)
        if sum(hi - lo + 1 for lo, hi in comp) < size:
            return ("[^" + class_body(comp) + "]") if comp else _ANY
    return "[" + class_body(rs) + "]"


# ---------------------------------------------------- fixed-width digit ranges --


@dataclass(frozen=True)
class _Base:
    """A positional base and how to render a set of its digits as a class."""

    radix: int
    digit_class: Callable[[tuple[int, ...]], str]
    any_digit: str


def dec_class(digits: tuple[int, ...]) -> str:
    return _class_of((48 + d, 48 + d) for d in digits)


def _hex_class(digits: tuple[int, ...]) -> str:
    cps = []
    for d in digits:
        if d < 10:
            cps.append(48 + d)
        else:
            cps.extend((ord("a") + d - 10, ord("A") + d - 10))
    return _class_of((c, c) for c in cps)


DEC = _Base(10, dec_class, "[0-9]")
_HEX = _Base(16, _hex_class, "[0-9a-fA-F]")


@memo(maxsize=8192)
def fixed_width(ranges: Ranges, width: int, base: _Base) -> str:
    """Regex of the ``width``-digit numerals (leading zeros kept) of the numbers in ``ranges``.

    Leading digits whose remainders are the same set share one class, so ``[123, 456]``
    becomes ``1(?:2[3-9]|[3-9][0-9])|[23][0-9]{2}|4(?:[0-4][0-9]|5[0-6])``.
    """
    if width == 0:
        return ""
    full = base.radix**width
    if ranges == ((0, full - 1),):
        return quant(base.any_digit, width, width)
    unit = base.radix ** (width - 1)
    by_rest: dict[Ranges, list[int]] = {}
    for d in range(base.radix):
        sub = _intersect(ranges, d * unit, (d + 1) * unit - 1)
        if sub:
            key = tuple((a - d * unit, b - d * unit) for a, b in sub)
            by_rest.setdefault(key, []).append(d)
    parts = [
        base.digit_class(tuple(digits)) + atom_if_alt(fixed_width(rest, width - 1, base))
        for rest, digits in by_rest.items()
    ]
    return join_alt(parts)


def join_alt(parts: Sequence[str]) -> str:
    """A top-level alternation (not grouped); callers group with :func:`atom_if_alt`."""
    uniq = list(dict.fromkeys(parts))
    if not uniq:
        return NOTHING
    return "|".join(uniq)


def _hex4(ranges: Iterable[tuple[int, int]]) -> str:
    """Four hex digits (either case) spelling a code unit in ``ranges`` (within 0..0xFFFF)."""
    rs = tuple(sorted(ranges))
    return atom_if_alt(fixed_width(_merge_plain(rs), 4, _HEX))


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
_RAW_OK: Ranges = normalize_ranges([(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CP)])
_BSL = "\\\\"  # the regex of one backslash in the JSON text


SPELLINGS = ("json", "llguidance")
"""How the characters of JSON strings may be written (:func:`spelling`).  ``"json"``
(default): every spelling JSON allows.  ``"llguidance"``: the ones llguidance's schema
compiler allows, a subset: raw characters but ``"``, ``\\``, controls and DEL; the
short escapes but ``\\/``; ``\\u`` only for controls and DEL (``\\u00XX``,
``\\u007f``)."""

SPELLING_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("masklab_json_spelling", default="json")
_RAW_LLG: Ranges = normalize_ranges([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E), (0x80, MAX_CP)])
# per spelling: (raw characters, short escapes left out, code points with a \u escape,
# astral ones as surrogate pairs); "llguidance-key" is llguidance's spelling of keys no
# property lists (every \u escape, but no \/ and no raw DEL)
_SPELLING_RULES: dict[str, tuple[Ranges, frozenset[int], Ranges, bool]] = {
    "json": (_RAW_OK, frozenset(), ((0, 0xFFFF),), True),
    "llguidance": (_RAW_LLG, frozenset({0x2F}), ((0x00, 0x1F), (0x7F, 0x7F)), False),
    "llguidance-key": (_RAW_LLG, frozenset({0x2F}), ((0, 0xFFFF),), True),
}


LLGUIDANCE_ESCAPES = 'nrbtf"\\u'
"""The letters llguidance allows after a backslash by default (its ``json_allowed_escapes``)."""
_LETTER_CP = {'"': 0x22, "\\": 0x5C, "b": 0x08, "f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09}


def llguidance_spelling(escapes: str | None = None, general: bool = False) -> str:
    """The spelling name of llguidance's ``%json`` with its ``x-guidance`` options
    ``json_allowed_escapes`` (``escapes``: letters of ``nrbtf"\\u``; None: all) and
    ``json_allow_general_unicode_escapes`` (``general``).  ``"llguidance"`` for the defaults.

    llguidance writes each character of a string's text raw (not ``"``, ``\\``, a control
    or DEL), with a short escape whose letter ``escapes`` holds (never ``\\/``), or (``u``
    in ``escapes``) with ``\\u``: for controls and DEL only, or, in strings without a
    ``pattern`` and in keys when ``general``, for every character (surrogate pairs for
    astral ones).  A character with none of these cannot be written."""
    if escapes is not None:
        bad = sorted(set(escapes) - set(LLGUIDANCE_ESCAPES))
        if bad:
            raise ValueError(f"json_allowed_escapes: {bad[0]!r} is not an escape letter (letters: "
                             f"{LLGUIDANCE_ESCAPES})")
    letters = "".join(c for c in LLGUIDANCE_ESCAPES if escapes is None or c in escapes)
    if letters == LLGUIDANCE_ESCAPES and not general:
        return "llguidance"
    return f"llguidance;{letters};{'g' if general else ''}"


def _parse_spelling(name: str) -> tuple[str, str, bool]:
    """``(base, escape letters, general)`` of a spelling name (:func:`llguidance_spelling`)."""
    if name in ("json", "llguidance", "llguidance-key"):
        return name, LLGUIDANCE_ESCAPES, False
    base, sep, rest = name.partition(";")
    letters, sep2, g = rest.partition(";")
    if base not in ("llguidance", "llguidance-key") or not sep or not sep2 or g not in ("", "g") \
            or set(letters) - set(LLGUIDANCE_ESCAPES):
        raise ValueError(f"spelling must be one of {', '.join(map(repr, SPELLINGS))}, not {name!r}")
    return base, letters, g == "g"


def _rules_of(name: str) -> tuple[Ranges, frozenset[int], Ranges, bool]:
    rules = _SPELLING_RULES.get(name)
    if rules is None:
        base, letters, _ = _parse_spelling(name)
        no_short = frozenset({0x2F} | {cp for letter, cp in _LETTER_CP.items() if letter not in letters})
        u = "u" in letters
        every = base == "llguidance-key"
        u_escaped: Ranges = (((0, 0xFFFF),) if every else ((0x00, 0x1F), (0x7F, 0x7F))) if u else ()
        rules = _SPELLING_RULES[name] = (_RAW_LLG, no_short, u_escaped, every and u)
    return rules


def free_spelling(name: str) -> str:
    """The spelling of strings without a ``pattern`` (and keys of free objects) under
    ``name``: every ``\\u`` escape where llguidance's ``general`` option is on."""
    if name in ("json", "llguidance"):
        return name
    base, letters, general = _parse_spelling(name)
    return f"llguidance-key;{letters};" if general else name


def key_spelling(name: str) -> str:
    """The spelling of the keys llguidance's additional properties take under ``name``
    (every ``\\u`` escape its letters allow); ``name`` itself for ``"json"``."""
    if name in ("json", "llguidance"):
        return "llguidance-key" if name == "llguidance" else name
    return f"llguidance-key;{_parse_spelling(name)[1]};"


@memo(maxsize=256)
def char_of(name: str) -> str:
    """One character of a JSON string's text in the spelling ``name`` (one atom)."""
    return encode_ranges(_ALL, name)


@memo(maxsize=256)
def any_chars(name: str) -> str:
    """Any run of characters in the spelling ``name``."""
    return quant(char_of(name), 0, None)


def check_spelling(name: str) -> str:
    """``name`` when it is a spelling (:data:`SPELLINGS` or :func:`llguidance_spelling`), else ValueError."""
    if name not in SPELLINGS:
        _parse_spelling(name)
    return name


def spelled_literal(value: str, name: str) -> str:
    """Regex of the texts of the string ``value`` in the spelling ``name`` (every
    spelling of each character it allows); :data:`NOTHING` when a character cannot be written."""
    out = ['"']
    for ch in value:
        part = encode_codepoints(((ord(ch), ord(ch)),), name)
        if part == NOTHING:
            return NOTHING
        out.append(part)
    out.append('"')
    return "".join(out)


@contextlib.contextmanager
def spelling(name: str) -> Iterator[None]:
    """Within the block, the JSON string regexes of this module (:func:`json_string`,
    :func:`encode_codepoints`, :func:`ecma_pattern`...) use the spelling ``name``
    (:data:`SPELLINGS`, or an llguidance spelling with options, :func:`llguidance_spelling`)."""
    check_spelling(name)
    token = SPELLING_VAR.set(name)
    try:
        yield
    finally:
        SPELLING_VAR.reset(token)


@memo(maxsize=4096)
def encode_ranges(ranges: Ranges, how: str = "json") -> str:
    return encode_codepoints(ranges, how)


def encode_codepoints(ranges: Iterable[tuple[int, int]], how: str | None = None) -> str:
    """Regex (one atom) of every JSON-string encoding of one code point in ``ranges``.

    The alternatives are: the raw character (not ``"``, ``\\`` or a control
    character), its short escape where JSON has one, ``\\u`` with four hex digits of
    either case for BMP code points, and a ``\\u\\u`` surrogate pair for astral ones.
    Surrogate code points in ``ranges`` are ignored (see the module doc).  ``how``: a
    :data:`SPELLINGS` name (default: the one in force, :func:`spelling`).
    """
    raw_ok, no_short, u_escaped, pairs = _rules_of(SPELLING_VAR.get() if how is None else how)
    rs = normalize_ranges(ranges)
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
    astral = _intersect(rs, 0x10000, MAX_CP) if pairs else []
    if astral:
        parts.extend(_surrogate_pairs(astral))
    return group(parts)


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


JSON_CHAR: str = encode_ranges(_ALL)
"""One character of a JSON string as written between the quotes (one code point).

Raw ``[^"\\\\\\x00-\\x1f]``, a short escape, ``\\uXXXX`` of a non-surrogate BMP code
point, or a surrogate pair for an astral one.  Lone surrogates are not matched."""

LLGUIDANCE_CHAR: str = encode_ranges(_ALL, "llguidance")
"""One character of a JSON string as llguidance spells it (:data:`SPELLINGS`)."""


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
    name = SPELLING_VAR.get()
    if name != "json":
        return '"' + quant(char_of(free_spelling(name)), min_length, max_length) + '"'
    if (min_length, max_length) == (1, 1):
        return '"' + JSON_CHAR + '"'
    # quant(JSON_CHAR, ...), with the character's atom scanned once, not per string
    return _STRING_HEAD + _quant_suffix(min_length, max_length) + '"'


_STRING_HEAD = '"' + atom(JSON_CHAR)
_BOUNDS_RX = re.compile(r"(?:|\*|\+|\?|\{(\d+)\}|\{(\d+),\}|\{(\d+),(\d+)\})")


def json_string_bounds(regex: str, char: str = JSON_CHAR) -> tuple[int, int | None] | None:
    """``(min_length, max_length)`` when ``regex`` is exactly :func:`json_string` of them
    (a string terminal without ``pattern`` or ``format``), else None.  ``char``: the
    character of the spelling (:data:`JSON_CHAR`, or :data:`LLGUIDANCE_CHAR` for what
    :func:`json_string` writes under ``spelling("llguidance")``)."""
    if regex == '""':
        return 0, 0
    if regex == '"' + char + '"':
        return 1, 1
    head = _STRING_HEAD if char is JSON_CHAR else '"' + atom(char)
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


_CHAR_CODE: dict[str, Any] = {}


def _char_code(char: str = JSON_CHAR) -> tuple[np.ndarray, int, int, np.ndarray, np.ndarray] | None:
    """The DFA of ``char`` (:data:`JSON_CHAR` or :data:`LLGUIDANCE_CHAR`) as
    :func:`json_string_dfa` repeats it (:func:`toolkit.automata._dfabuild.string_copies`):
    ``(code, start, quote, classes, cols)``.  ``code`` has a row per state but the
    accepting one and a column per byte class plus a last one for the quote (``quote``):
    the next state's row, -1 dead, -2 the character done; ``start`` is the character's
    first state's row.  ``classes`` are the string DFA's canonical byte classes and
    ``cols[j]`` the column of class ``j``: two bytes share a class exactly when their
    columns of ``code`` are equal, as in every copy (the quote's column is its own: the
    state before the string reads the quote alone).  None when the character's DFA is
    not a prefix code (one accepting state, no way out of it).

    Built once per process and character: it depends on nothing but the module's
    constants (a table any JSON-specific engine has compiled in), so the harness's cache
    clearing between items leaves it alone.
    """
    if char not in _CHAR_CODE:
        made = None
        dfa = compile_nfa(char, DEFAULT_MAX_STATES, False)
        xclasses, xt = dfa.byte_classes()
        acc = np.flatnonzero(dfa.accepting)
        quote_col = int(xclasses[0x22])
        if not (len(acc) != 1 or xt[acc[0]].any() or dfa.start != 1 or dfa.accepting[1]
                or xt[1, quote_col] != 0):
            f, nx = int(acc[0]), xt.shape[0]
            inner = np.array([q for q in range(1, nx) if q != f], dtype=np.int64)  # the copy's states
            idx = np.full(nx, -1, dtype=np.int64)
            idx[inner] = np.arange(inner.size)
            xcols = np.concatenate([xt[inner], xt[inner, quote_col : quote_col + 1]], axis=1)
            code = np.where(xcols == f, -2, idx[xcols]).astype(np.int32)  # idx of the dead state 0 is -1
            quote = xt.shape[1]
            column = xclasses.astype(np.int32)
            column[0x22] = quote
            # the classes of a small table with the string DFA's kinds of rows: dead, the
            # one before the quote, and the character's (entries shifted to stay distinct)
            small = np.zeros((2 + code.shape[0], quote + 1), dtype=np.int32)
            small[1, quote] = 1
            small[2:] = code + 3
            classes, _ = _dfabuild.byte_classes(small, column)
            first = np.unique(classes, return_index=True)[1]  # the smallest byte of each class
            made = (code, int(idx[1]), quote, classes, column[first].astype(np.int32))
        _CHAR_CODE[char] = made
    return _CHAR_CODE[char]


def json_string_dfa(min_length: int = 0, max_length: int | None = None, *,
                    max_states: int = DEFAULT_MAX_STATES, char: str = JSON_CHAR) -> ByteDFA:
    """The minimal DFA of :func:`json_string` ``(min_length, max_length)`` (``char``: its
    character, :data:`JSON_CHAR`, or :data:`LLGUIDANCE_CHAR` for the llguidance spelling), written
    down directly: the same arrays as ``compile_regex`` of that regex (the tests compare
    them), without its NFA of ``max_length`` copies, subset construction and
    minimization, which took 0.3 s for ``maxLength: 8192`` (164k states).

    A JSON character is a prefix code: its minimal DFA (:data:`JSON_CHAR`, ~20 states)
    has one accepting state, with no way out.  The string's DFA is the opening quote,
    then one copy of that DFA per character already read, the accepting state of
    copy ``c`` merged into the start of copy ``c + 1``, and the closing quote from the
    start of every copy ``c >= min_length`` (the last copy, for an unbounded string,
    loops to its own start; for a bounded one it only closes).  Distinct copies are
    told apart by how many characters may still come, and states within one copy as
    in the character's DFA, so the whole is minimal.  It is numbered canonically as it
    is written, in one breadth-first pass in C over the copies
    (:func:`toolkit.automata._dfabuild.string_copies`: 65,535 characters in tens of ms).
    More than ``max_states`` states raise :class:`~toolkit.core.errors.LimitExceeded`
    before anything is built.
    """
    lo, hi = min_length, max_length
    for name, v in (("min_length", lo), ("max_length", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"json_string_dfa: {name} must be a non-negative int, got {v!r}")
    if lo is None:
        raise ValueError("json_string_dfa: min_length must be a non-negative int, got None")
    if hi is not None and lo > hi:
        return compile_nfa(NOTHING, DEFAULT_MAX_STATES, False)
    regex = json_string(lo, hi) if char is JSON_CHAR else ('""' if hi == 0 else '"' + quant(char, lo, hi) + '"')
    made = _char_code(char)
    if made is None:  # not the prefix code this relies on: the regex road
        return compile_nfa(regex, max_states, False)
    code, start, quote, classes, cols = made
    r = code.shape[0]
    loop = hi is None and lo > 0  # the last copy's characters are the previous copy's
    copies = (lo if hi is None else hi) + 1
    n_states = 3 + (copies - 1) * r + (r if hi is None and not loop else 1)  # dead, before, after + copies
    if n_states > max_states:
        raise LimitExceeded("max_states", n_states, max_states)
    table, accepting = _dfabuild.string_copies(code, start, quote, cols, lo, -1 if hi is None else hi)
    # every row of the character is reached in copy 0 unless no character may come: the
    # columns stay the classes computed on the code, but for "" (the quote's column alone)
    return freeze(table, accepting, 1, regex, classes.copy(), canonical=hi != 0)


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
        parts.append(escape_cp(cp, False))
    letter = _SHORT_ESCAPES.get(cp)
    if letter is not None:
        parts.append(_BSL + escape_cp(ord(letter), False))
    if cp <= 0xFFFF:
        parts.append(_BSL + "u" + _hex_digits(cp))
    else:
        a = cp - 0x10000
        parts.append(_BSL + "u" + _hex_digits(0xD800 + (a >> 10)) + _BSL + "u" + _hex_digits(0xDC00 + (a & 0x3FF)))
    return group(parts)


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


def json_literals_dfa(values: Sequence[str], max_states: int = DEFAULT_MAX_STATES) -> ByteDFA | None:
    """The minimal DFA of the union of :func:`json_string_literal` of each of ``values``
    (non-empty), written down directly in C (:func:`toolkit.automata._dfabuild.json_literals`:
    the values' trie, the texts of sibling characters merged), or None when a value
    holds a surrogate code point (:func:`toolkit.automata.dfaops.json_keys_dfa` then
    joins each value's :func:`json_literal_dfa`)."""
    built = _dfabuild.json_literals(list(values), max_states)
    if built is None:
        return None
    table, acc, column = built
    return freeze(table, acc, 1, None, column)


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
        return compile_nfa(NOTHING, DEFAULT_MAX_STATES, False)
    table, acc, column = built
    return freeze(table, acc, 1, None, column)
