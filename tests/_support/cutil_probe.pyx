# cython: language_level=3
"""Probes of the C utility layer (``toolkit/core/cutil.pxd``) for its tests
(``tests/test_cutil.py``): the inline C every Cython module of masklab shares, run as
they run it.  Test code: ``setup.py`` builds it only in place (``build_ext --inplace``,
what ``make`` runs), so no wheel ships it.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free

from toolkit.core.cutil cimport (
    I64Map,
    grow,
    i64map_bytes,
    i64map_clear,
    i64map_free,
    i64map_get,
    i64map_init,
    i64map_intern,
    i64map_put,
    or_words,
    pair_key,
    resize,
    vfree,
    vgrow,
)

from toolkit.core.errors import raise_code


cdef class I64MapProbe:
    """A probe of the C utility layer (toolkit/core/cutil.pxd) for its tests: one
    ``I64Map`` (int64 keys, int32 values >= 0) behind Python calls, so that the inline C
    every Cython module of masklab shares is run as they run it.  Not a container to use:
    a dict is the Python one.  ``I64MapProbe(cap=16)``: room for ``cap / 2`` entries
    before the table first grows."""

    cdef I64Map m   # the map probed

    def __cinit__(self, int64_t cap=16):
        if i64map_init(&self.m, cap) < 0:
            raise MemoryError(f"I64MapProbe: no memory for {cap} slots")

    def __dealloc__(self):
        i64map_free(&self.m)

    def put(self, int64_t key, int32_t value) -> None:
        """Set key's value (``i64map_put``)."""
        if value < 0:
            raise ValueError(f"an I64Map value is >= 0, got {value}")
        raise_code(i64map_put(&self.m, key, value), self.m.n + 1, None, "I64MapProbe")

    def get(self, int64_t key) -> int:
        """Key's value, or -1 when it has none (``i64map_get``)."""
        return i64map_get(&self.m, key)

    def intern(self, int64_t key, int32_t value) -> int:
        """The value key has, or else ``value``, stored now (``i64map_intern``)."""
        if value < 0:
            raise ValueError(f"an I64Map value is >= 0, got {value}")
        cdef int32_t got = i64map_intern(&self.m, key, value)
        raise_code(got if got < 0 else 0, self.m.n + 1, None, "I64MapProbe")
        return got

    def clear(self) -> None:
        """Remove every entry (``i64map_clear``: the generation moves on)."""
        i64map_clear(&self.m)

    def __len__(self):
        return self.m.n

    @property
    def capacity(self) -> int:
        """Slots in the table (a power of 2, at least twice the entries)."""
        return self.m.cap

    def memory_bytes(self) -> int:
        """``i64map_bytes``: the bytes the table holds."""
        return i64map_bytes(&self.m)

    @staticmethod
    def pair_key(int32_t hi, int32_t lo) -> int:
        """``pair_key``: two int32 ids as one key."""
        return pair_key(hi, lo)


cdef _probe_bytes(void* buf, int64_t kept, int64_t n, str who, int64_t need):
    """The probes' check: bytes ``0 .. kept`` still hold their pattern (else an
    AssertionError naming ``who`` and the size grown to), ``kept .. n`` get it."""
    cdef uint8_t* b = <uint8_t*>buf
    cdef int64_t i
    for i in range(kept):
        if b[i] != <uint8_t>(i * 7 + 1):
            raise AssertionError(f"{who}: byte {i} lost growing to {need}")
    for i in range(kept, n):
        b[i] = <uint8_t>(i * 7 + 1)


def grow_probe(needs, int64_t elem=4, bint exact=False):
    """A probe of cutil.pxd's growth for its tests: one buffer of ``elem``-byte elements
    grown to each size in ``needs`` in turn (``grow``, or ``resize`` when ``exact``), its
    bytes written after each step and checked after the next.  Returns the capacity
    after each step (``resize`` keeps none: the size itself)."""
    cdef void* buf = NULL
    cdef int64_t cap = 0, need, have = 0
    caps = []
    try:
        for need in needs:
            if need < 0:
                raise ValueError(f"a size is >= 0, got {need}")
            if exact:
                raise_code(resize(&buf, need, elem), need, None, "grow_probe")
                cap = need
            else:
                raise_code(grow(&buf, &cap, need, elem), need, None, "grow_probe")
            _probe_bytes(buf, min(have, need) * elem, need * elem, "grow_probe", need)
            have = need
            caps.append(cap)
    finally:
        free(buf)
    return caps


def vgrow_probe(needs, int64_t elem=4):
    """A probe of cutil.pxd's page arrays for its tests: one array of ``elem``-byte
    elements grown with ``vgrow`` to each size in ``needs`` in turn (sizes only grow;
    a smaller one keeps the array), its bytes written after each step and checked after
    the next, freed with ``vfree`` and its capacity.  Returns the array's address after
    each step."""
    cdef void* buf = NULL
    cdef int64_t cap = 0, need
    addrs = []
    try:
        for need in needs:
            if need < 0:
                raise ValueError(f"a size is >= 0, got {need}")
            if need > cap:
                raise_code(vgrow(&buf, cap, need, elem), need, None, "vgrow_probe")
                _probe_bytes(buf, cap * elem, need * elem, "vgrow_probe", need)
                cap = need
            addrs.append(<size_t>buf)
    finally:
        vfree(buf, cap, elem)
    return addrs


def or_words_probe(uint32_t[::1] dst, const uint32_t[::1] src, int64_t start, int64_t n):
    """``dst[start:start + n] |= src[start:start + n]`` by cutil's ``or_words`` (the
    masks' bulk OR, AVX2 where the CPU has it), for its tests."""
    if start < 0 or n < 0 or start + n > dst.shape[0] or start + n > src.shape[0]:
        raise IndexError(f"words [{start}, {start + n}) outside arrays of {dst.shape[0]} and {src.shape[0]}")
    if n > 0:
        or_words(&dst[start], &src[start], n)
