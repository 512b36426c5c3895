"""Code point ranges to UTF-8 byte-range sequences.

A range of code points ``[lo, hi]`` is split into pieces that each encode as a
fixed-length sequence of byte ranges, so that ``[lo, hi]`` is exactly the set of
UTF-8 strings matching one of the sequences.  Surrogates (U+D800..U+DFFF) have no
UTF-8 encoding and are left out.  The split follows the classic construction (Russ
Cox, "Regular Expression Matching in the Wild"): first by encoded length, then by
the boundaries below which the trailing bytes cover their full 0x80..0xBF range.
"""

from __future__ import annotations

__all__ = ["MAX_CODEPOINT", "utf8_sequences", "ranges_of", "complement"]

MAX_CODEPOINT = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF)

ByteRange = tuple[int, int]


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


def utf8_sequences(lo: int, hi: int) -> list[tuple[ByteRange, ...]]:
    """Byte-range sequences whose UTF-8 strings are exactly the code points in ``[lo, hi]``."""
    out: list[tuple[ByteRange, ...]] = []
    todo = [(lo, hi)]
    while todo:
        a, b = todo.pop()
        if a > b:
            continue
        if a <= _SURROGATES[1] and b >= _SURROGATES[0]:
            todo.append((a, _SURROGATES[0] - 1))
            todo.append((_SURROGATES[1] + 1, b))
            continue
        split = False
        for limit in _LENGTH_LIMITS:
            if a <= limit < b:
                todo.append((a, limit))
                todo.append((limit + 1, b))
                split = True
                break
        if split:
            continue
        if b <= 0x7F:
            out.append(((a, b),))
            continue
        n = len(_encode(a))
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if a & ~m != b & ~m:
                if a & m != 0:
                    todo.append((a, a | m))
                    todo.append(((a | m) + 1, b))
                    split = True
                    break
                if b & m != m:
                    todo.append((a, (b & ~m) - 1))
                    todo.append((b & ~m, b))
                    split = True
                    break
        if split:
            continue
        ea, eb = _encode(a), _encode(b)
        out.append(tuple(zip(ea, eb, strict=True)))
    return out


def ranges_of(codepoints: set[int] | frozenset[int]) -> list[tuple[int, int]]:
    """Sorted, merged inclusive ranges covering a set of code points."""
    out: list[tuple[int, int]] = []
    for cp in sorted(codepoints):
        if out and out[-1][1] + 1 == cp:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def complement(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """The code points of U+0000..U+10FFFF outside ``ranges``, surrogates left out."""
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    split: list[tuple[int, int]] = []
    for lo, hi in out:
        for a, b in ((lo, min(hi, _SURROGATES[0] - 1)), (max(lo, _SURROGATES[1] + 1), hi)):
            if a <= b:
                split.append((a, b))
    return split
