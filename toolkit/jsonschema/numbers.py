"""Regexes for the JSON text of numbers: integer ranges, ``multipleOf``, decimal steps and
number ranges, exact or tighter (see :mod:`toolkit.automata.jsontext`)."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np

from toolkit.automata.dfa import freeze, minimize
from toolkit.automata.dfaops import dfa_regex
from toolkit.automata.jsontext import (
    DEC,
    MAX_BOUND_DIGITS,
    NOTHING,
    atom,
    atom_if_alt,
    dec_class,
    fixed_width,
    group,
    join_alt,
    quant,
)
from toolkit.core.errors import LimitExceeded, TimeLimitExceeded, UnsupportedSchema
from toolkit.core.memo import memo

# ------------------------------------------------------------------ integers --


def _nonneg_int(lo: int, hi: int | None) -> str | None:
    """Canonical decimal numerals (no leading zeros) of the integers in ``[lo, hi]``, ``lo >= 0``."""
    if hi is not None and lo > hi:
        return None
    la = len(str(lo))
    parts: list[str] = []
    top = 10**la - 1 if hi is None else min(hi, 10**la - 1)
    parts.append(fixed_width(((lo, top),), la, DEC))
    if hi is None:
        parts.append("[1-9]" + quant("[0-9]", la, None))
    else:
        lb = len(str(hi))
        if lb > la + 1:
            parts.append("[1-9]" + quant("[0-9]", la, lb - 2))
        if lb > la:
            parts.append(fixed_width(((10 ** (lb - 1), hi),), lb, DEC))
    return group(parts)


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
    table, accepting, start = minimize(renum[table[keep]], np.array(acc)[keep])
    dfa = freeze(table, accepting, start, None, column)
    try:
        return dfa_regex(dfa, 200_000)
    except TimeLimitExceeded:
        raise
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
        parts.append("-" + group(neg_parts))
    return group(parts)


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
        head = dec_class(tuple(digits))
        if rx is None:
            parts.append(head)
        elif tail_empty:
            star = {"[0-9]+": "[0-9]*", "0+": "0*"}.get(rx)
            parts.append(head + (star or quant(atom_if_alt(rx), 0, 1)))
        else:
            parts.append(head + atom_if_alt(rx))
    return (join_alt(parts) if parts else None), empty_ok


def _frac_part(lo: _FracBound | None, hi: _FracBound | None) -> str | None:
    """The optional ``.digits`` part of a number whose fraction value is within the bounds."""
    rx, empty_ok = _frac(lo, hi)
    if rx is None:
        return "" if empty_ok else None
    body = "\\." + atom_if_alt(rx)
    return quant(body, 0, 1) if empty_ok else body


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
            parts.append(atom_if_alt(int_rx) + frac_rx)

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
    return group(parts) if parts else None


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
            parts.append("-" + atom(m))
    return group(parts)
