"""The C utility layer (toolkit/core/cutil.pxd), run directly.

cutil.pxd is inline C that every Cython module of masklab cimports; its map, growth and
key packing are reached here through the probes in :mod:`toolkit.core.session`
(``I64MapProbe``, ``grow_probe``, ``vgrow_probe``, ``or_words_probe``) and checked against Python: the map against a dict
under hypothesis (keys over the whole int64 range), growth against its doubling rule,
the masks' bulk OR against numpy's.
Its error codes are checked against their Python half, :mod:`toolkit.core.errors`.
Everything is seeded: hypothesis runs derandomized.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests._support.cutil_probe import I64MapProbe, grow_probe, or_words_probe, vgrow_probe

from toolkit.core.errors import ERROR_CODES, LIMIT_OPTIONS, LimitExceeded, error_of, raise_code

CUTIL = Path(__file__).resolve().parents[1] / "toolkit" / "core" / "cutil.pxd"
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
VALUES = st.integers(min_value=0, max_value=2**31 - 1)
# a few keys that land in one probe run, or differ only in one half: the map must mix them
_EDGE_KEYS = [0, -1, 1, -(2**63), 2**63 - 1, 2**32, -(2**32), 2**32 + 1, 1 << 40, 1 << 62]
KEYS = st.one_of(INT64, st.sampled_from(_EDGE_KEYS), st.integers(min_value=-40, max_value=40))

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, VALUES),
        st.tuples(st.just("intern"), KEYS, VALUES),
        st.tuples(st.just("get"), KEYS, st.just(0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0)),
    ),
    max_size=300,
)


def _check_shape(m: I64MapProbe) -> None:
    cap = m.capacity
    assert cap >= 16 and cap & (cap - 1) == 0, cap
    assert 2 * len(m) <= cap, (len(m), cap)


# ------------------------------------------------------------------ I64Map ----


@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPS, st.sampled_from([0, 16, 100]))
def test_the_map_is_a_dict(ops: list[tuple[str, int, int]], cap: int) -> None:
    m = I64MapProbe(cap)
    ref: dict[int, int] = {}
    for op, key, value in ops:
        if op == "put":
            m.put(key, value)
            ref[key] = value
        elif op == "intern":
            assert m.intern(key, value) == ref.setdefault(key, value)
        elif op == "get":
            assert m.get(key) == ref.get(key, -1)
        else:
            m.clear()
            ref.clear()
        assert len(m) == len(ref)
    _check_shape(m)
    for key, value in ref.items():
        assert m.get(key) == value
    for key in _EDGE_KEYS:
        assert m.get(key) == ref.get(key, -1)


def test_growth_through_many_rehashes_keeps_every_entry() -> None:
    rng = random.Random("test_growth_through_many_rehashes_keeps_every_entry")
    m = I64MapProbe()
    ref: dict[int, int] = {}
    caps = {m.capacity}
    for i in range(60_000):
        key = rng.randrange(-(2**63), 2**63) if i % 3 else i - 30_000  # wide and dense keys
        ref[key] = i
        m.put(key, i)
        caps.add(m.capacity)
    assert len(m) == len(ref)
    assert len(caps) >= 12  # 16 slots grew to over 120k: a dozen rehashes
    _check_shape(m)
    assert all(m.get(k) == v for k, v in ref.items())
    absent = [rng.randrange(-(2**63), 2**63) for _ in range(2000)]
    assert all(m.get(k) == -1 for k in absent if k not in ref)
    assert m.memory_bytes() == m.capacity * 16  # key, value and stamp per slot


def test_keys_that_differ_in_one_half_only() -> None:
    """Pairs packed as ``hi << 32 | lo`` differ in their high bits only when lo is fixed:
    the map mixes every bit in, so they still spread (and are all found)."""
    m = I64MapProbe()
    keys = [I64MapProbe.pair_key(hi, 7) for hi in range(-500, 500)]
    keys += [I64MapProbe.pair_key(1000, lo) for lo in range(-500, 500)]
    for i, k in enumerate(keys):
        assert m.intern(k, i) == i
    assert len(m) == len(set(keys)) == 2000
    assert [m.get(k) for k in keys] == list(range(2000))


def test_clear_then_reuse() -> None:
    m = I64MapProbe()
    for round_ in range(50):
        for k in range(-20, 20):
            assert m.get(k) == -1
            m.put(k * 1_000_003, round_)
        assert len(m) == 40
        cap = m.capacity
        m.clear()
        assert len(m) == 0 and m.capacity == cap  # clearing keeps the table
        assert m.get(0) == -1 and m.get(-20 * 1_000_003) == -1
    m.put(5, 1)
    assert m.intern(5, 9) == 1 and m.get(5) == 1 and len(m) == 1


def test_a_value_is_never_negative() -> None:
    m = I64MapProbe()
    with pytest.raises(ValueError):
        m.put(1, -1)
    with pytest.raises(ValueError):
        m.intern(1, -5)
    assert len(m) == 0


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(min_value=-(2**31), max_value=2**31 - 1), st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_pair_key_packs_two_ids(hi: int, lo: int) -> None:
    key = I64MapProbe.pair_key(hi, lo)
    unsigned = ((hi & 0xFFFFFFFF) << 32) | (lo & 0xFFFFFFFF)
    assert key == unsigned - (1 << 64 if unsigned >= 1 << 63 else 0)


# ------------------------------------------------------------------ growth ----


def test_grow_doubles_from_16_and_keeps_the_contents() -> None:
    assert grow_probe([0]) == [16]  # a buffer even for nothing
    assert grow_probe([1, 16, 17, 3, 33, 1000, 1024, 1025], elem=8) == [16, 16, 32, 32, 64, 1024, 1024, 2048]
    caps = grow_probe(range(0, 5000, 7), elem=12)
    assert all(c >= n for c, n in zip(caps, range(0, 5000, 7), strict=True))
    assert all(c == 16 or (c & (c - 1) == 0 and c < 2 * n) for c, n in zip(caps, range(0, 5000, 7), strict=True))


def test_resize_is_exact_both_ways() -> None:
    assert grow_probe([5, 100, 3, 0, 40], elem=4, exact=True) == [5, 100, 3, 0, 40]


def test_page_arrays_keep_their_contents_across_the_mapping_threshold() -> None:
    """Page arrays (``vgrow``, the glr mask tables' per-context, per-group and per-node
    arrays): malloc's below 1 MiB, then a mapping of their own, grown by the kernel
    (mremap); the contents kept at every step (the probe checks every byte), a mapping
    page-aligned, a smaller size keeping the array, freed by capacity."""
    kib = 1024 // 4  # (elements of 4 bytes in a KiB)
    needs = [1, 10, 600 * kib, 1023 * kib, 1024 * kib, 1500 * kib, 8 * 1024 * kib, 30 * 1024 * kib, 20 * 1024 * kib]
    addrs = vgrow_probe(needs)
    assert len(addrs) == len(needs) and all(addrs)
    assert all(a % 4096 == 0 for a in addrs[4:])  # (mappings from 1 MiB up)
    assert addrs[-1] == addrs[-2]  # (a smaller size keeps the array)
    with pytest.raises(ValueError, match="a size is >= 0"):
        vgrow_probe([-1])


# ------------------------------------------------------------- error codes ----


def _err_codes_of_pxd() -> dict[str, int]:
    text = CUTIL.read_text()
    block = re.search(r"cdef enum ErrCode:\n((?:[ \t]+.*\n|\n)+)", text)
    assert block, "no ErrCode enum in cutil.pxd"
    return {name: int(value) for name, value in re.findall(r"^\s+(ERR_\w+)\s*=\s*(-?\d+)", block.group(1), re.M)}


def test_error_codes_mirror_the_pxd() -> None:
    assert _err_codes_of_pxd() == ERROR_CODES
    assert ERROR_CODES["ERR_NONE"] == 0 and all(v < 0 for k, v in ERROR_CODES.items() if k != "ERR_NONE")
    assert set(LIMIT_OPTIONS) <= set(ERROR_CODES.values())


@pytest.mark.parametrize("code", sorted(LIMIT_OPTIONS))
def test_a_limit_code_is_its_option(code: int) -> None:
    option, _ = LIMIT_OPTIONS[code]
    e = error_of(code, 101, 100, "here")
    assert isinstance(e, LimitExceeded)
    assert (e.limit, e.value, e.maximum) == (option, 101, 100)
    with pytest.raises(LimitExceeded, match=option):
        raise_code(code, 101, 100)


def test_the_other_codes() -> None:
    assert error_of(ERROR_CODES["ERR_NONE"]) is None
    raise_code(ERROR_CODES["ERR_NONE"])  # nothing
    assert isinstance(error_of(ERROR_CODES["ERR_MEMORY"], 10), MemoryError)
    assert isinstance(error_of(ERROR_CODES["ERR_NO_CACHE"]), RuntimeError)
    assert isinstance(error_of(ERROR_CODES["ERR_SHAPE"], 3), ValueError)
    assert "where" in str(error_of(ERROR_CODES["ERR_MEMORY"], 10, where="where"))


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 31, 33, 64, 65, 4008])
@pytest.mark.parametrize("start", [0, 1, 3])
def test_or_words_is_numpys_or(n: int, start: int) -> None:
    """Every length about the vector widths (8 words of AVX2), from unaligned starts: the
    words in range ORed, the words around them untouched."""
    rng = np.random.default_rng(n * 7 + start)
    dst = rng.integers(0, 2**32, n + 8, dtype=np.uint32)
    src = rng.integers(0, 2**32, n + 8, dtype=np.uint32)
    want = dst.copy()
    want[start:start + n] |= src[start:start + n]
    or_words_probe(dst, src, start, n)
    assert np.array_equal(dst, want)


def test_or_words_probe_refuses_a_range_outside() -> None:
    with pytest.raises(IndexError, match="outside"):
        or_words_probe(np.zeros(4, np.uint32), np.zeros(4, np.uint32), 2, 3)
