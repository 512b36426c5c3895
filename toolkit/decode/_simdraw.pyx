# cython: language_level=3
"""The stand-in device's greedy draw under a mask (:meth:`toolkit.decode.sim.SimLogits.greedy`),
in C without the GIL: what a GPU's sampler does in microseconds must not cost the host
milliseconds, or the stand-in's step times would not predict a GPU's."""

from libc.stdint cimport int32_t, int64_t, uint32_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef extern from *:
    int __builtin_ctz(unsigned int x) nogil


def masked_greedy(const float[:, ::1] pool, const int32_t[:, ::1] order, const int64_t[::1] rows,
                  const int64_t[::1] bonus, const int32_t[:, ::1] mask, float bonus_value,
                  int64_t[::1] out, int scan=64) -> None:
    """``out[i]``: the argmax over the ids ``mask[i]`` allows of pool row ``rows[i]``
    plus ``bonus_value`` on id ``bonus[i]`` (-1: none), the lowest id among equals; -1
    where the mask allows nothing.  The row's ``order`` (ids best first, ties by id) is
    read for ``scan`` entries (a dense mask ends there), then every allowed id is."""
    cdef Py_ssize_t n = rows.shape[0], V = pool.shape[1], W = mask.shape[1], i, k, w
    cdef int64_t r, best, t, b
    cdef float bestv, v
    cdef uint32_t bits
    if order.shape[0] != pool.shape[0] or order.shape[1] != V or mask.shape[0] != n or bonus.shape[0] != n \
            or out.shape[0] != n or W * 32 < V:
        raise ValueError("masked_greedy: pool, order, rows, bonus, mask and out do not fit together")
    for i in range(n):
        if not 0 <= rows[i] < pool.shape[0] or bonus[i] >= V:
            raise ValueError(f"masked_greedy: row {i} names pool row {rows[i]} or bonus id {bonus[i]} out of range")
    with nogil:
        for i in range(n):
            r = rows[i]
            best = -1
            bestv = 0
            for k in range(scan if scan < V else V):
                t = order[r, k]
                if (<uint32_t> mask[i, t >> 5] >> (t & 31)) & 1:
                    best = t
                    bestv = pool[r, t]
                    break
            if best < 0:
                for w in range(W):
                    bits = <uint32_t> mask[i, w]
                    while bits:
                        t = w * 32 + __builtin_ctz(bits)
                        bits &= bits - 1
                        if t >= V:
                            break
                        v = pool[r, t]
                        if best < 0 or v > bestv:
                            best = t
                            bestv = v
            b = bonus[i]
            if b >= 0 and (<uint32_t> mask[i, b >> 5] >> (b & 31)) & 1:
                v = pool[r, b] + bonus_value
                if best < 0 or v > bestv or (v == bestv and b < best):
                    best = b
            out[i] = best


def spin_until(double deadline) -> None:
    """Spin without the GIL until ``time.perf_counter()`` (the monotonic clock on Linux)
    reaches ``deadline``."""
    cdef timespec ts
    with nogil:
        while True:
            clock_gettime(CLOCK_MONOTONIC, &ts)
            if ts.tv_sec + ts.tv_nsec * 1e-9 >= deadline:
                break
