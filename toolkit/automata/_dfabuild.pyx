"""Subset construction and Hopcroft minimization over byte classes, in C.

The two steps of :func:`toolkit.automata.regex.compile_regex` after the NFA is built, the
minimization of :mod:`toolkit.automata.dfaops`' products, and :func:`json_literal`, the DFA of
the JSON texts of one string (an object key) written down without a regex.  Both used to be Python and were
the start-up time (TTFM) of every strategy on large schemas; here they are C loops
over flat arrays without the GIL.  Same algorithms, same canonical result:

:func:`determinize` is the subset construction over byte *classes* (the coarsest
partition of the bytes that no edge range cuts).  A DFA state is the sorted set of
*kernel* NFA states (those with byte edges, and the final one) of an epsilon closure,
hash-consed (:mod:`toolkit.core.intsets`).  The closure of each NFA state is computed
once, as is the DFA state of each set of edge targets, so most transitions cost one
lookup.  Since every NFA state reachable from the start can reach the final state,
every nonempty set is a live state; the empty set is the dead state 0, the start
closure state 1.  More than ``max_states`` states raise :class:`LimitExceeded`.

:func:`minimize` is Hopcroft's partition refinement, O(m log n) for m (source,
target) pairs: from {accepting, not accepting} over the live states (the dead state
is its own block and never a splitter), a splitter block is processed for all byte
classes at once.  Each predecessor gets the bitset of its classes into the splitter
(its *signature*), every block splits by signature, and a block off the work list
puts all its pieces but the largest on it.  The minimal states are numbered
canonically: dead 0, start 1, then breadth-first with successors in order of the
smallest class that reaches them, so two equal languages give identical arrays.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport grow_array, hash_ints, hash_mix
from toolkit.core.intsets cimport (
    IntSets,
    intsets_add,
    intsets_find,
    intsets_free,
    intsets_init,
)

from toolkit.core.errors import LimitExceeded

cnp.import_array()

__all__ = ["byte_classes", "determinize", "json_literal", "literal_set", "minimize", "minus_words", "product", "renumber"]

cdef enum:
    ERR_MEMORY = 1
    ERR_STATES = 2
    _SMALL_UNION = 8   # up to this many targets: union of their closures; more: one search

# An edge as one sortable key: class range [a, b) (a, b <= 256: 9 bits each) and the
# absolute target NFA state (31 bits).
cdef inline int64_t _edge_key(int64_t a, int64_t b, int64_t t) noexcept nogil:
    return (a << 40) | (b << 31) | t

cdef inline int32_t _key_a(int64_t key) noexcept nogil:
    return <int32_t>(key >> 40)

cdef inline int32_t _key_b(int64_t key) noexcept nogil:
    return <int32_t>((key >> 31) & 0x1FF)

cdef inline int32_t _key_t(int64_t key) noexcept nogil:
    return <int32_t>(key & 0x7FFFFFFF)


cdef int _cmp_i32(const void* a, const void* b) noexcept nogil:
    cdef int32_t x = (<const int32_t*>a)[0]
    cdef int32_t y = (<const int32_t*>b)[0]
    return (x > y) - (x < y)


cdef int _cmp_i64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0]
    cdef int64_t y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


ctypedef fused _sortable:
    int32_t
    int64_t


cdef void _sort(_sortable* xs, int64_t n) noexcept nogil:
    """Sort xs[0..n) ascending: insertion sort when short, qsort otherwise."""
    cdef int64_t i, j
    cdef _sortable x
    if n <= 16:
        for i in range(1, n):
            x = xs[i]
            j = i - 1
            while j >= 0 and xs[j] > x:
                xs[j + 1] = xs[j]
                j -= 1
            xs[j + 1] = x
    elif _sortable is int32_t:
        qsort(xs, n, sizeof(int32_t), _cmp_i32)
    else:
        qsort(xs, n, sizeof(int64_t), _cmp_i64)


cdef int32_t _sort_unique_i32(int32_t* xs, int32_t n) noexcept nogil:
    """Sort xs[0..n) and drop repeats; returns the new length."""
    cdef int32_t i, j
    if n < 2:
        return n
    _sort(xs, n)
    j = 1
    for i in range(1, n):
        if xs[i] != xs[j - 1]:
            xs[j] = xs[i]
            j += 1
    return j


cdef bint _contains(const int32_t* xs, int32_t n, int32_t x) noexcept nogil:
    """Binary search in sorted xs[0..n)."""
    cdef int32_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo < n and xs[lo] == x


# ------------------------------------------------------------ determinizing ----


cdef class _Subsets:
    """The state of one subset construction (all C arrays, freed with the object; C
    fields of an extension type start zeroed, so the pointers start NULL)."""

    cdef int32_t n_nfa, k, final
    cdef int64_t max_states
    cdef int err
    cdef int64_t err_value
    # the NFA: epsilon moves and edges (keys, see _edge_key) in CSR form
    cdef int64_t* eps_off
    cdef int32_t* eps_to
    cdef int64_t* ed_off
    cdef int64_t* ed_key
    cdef uint8_t* kernel
    # memoized closures (clo_off -1: not computed yet)
    cdef int64_t* clo_off
    cdef int32_t* clo_len
    cdef int32_t* clo_pool
    cdef int64_t clo_len_total, clo_cap
    # one search's scratch
    cdef int32_t* seen
    cdef int32_t stamp
    cdef int32_t* stack
    cdef int32_t* buf
    # DFA states: their kernel sets, transition rows (k classes each), acceptance
    cdef IntSets sets
    cdef int32_t* table
    cdef int64_t table_cap   # rows
    cdef uint8_t* acc
    cdef int64_t acc_cap
    cdef int32_t* single     # DFA state of the closure of one NFA state, -1 unknown
    cdef IntSets multi       # sets of edge targets seen so far ...
    cdef int32_t* multi_val  # ... and their DFA states
    cdef int64_t multi_cap
    # per-state scratch
    cdef int64_t* out
    cdef int64_t out_cap
    cdef int32_t* pts
    cdef int64_t pts_cap
    cdef int32_t* tg
    cdef int64_t tg_cap
    cdef int32_t* ubuf
    cdef int64_t ubuf_cap

    def __dealloc__(self):
        free(self.eps_off)
        free(self.eps_to)
        free(self.ed_off)
        free(self.ed_key)
        free(self.kernel)
        free(self.clo_off)
        free(self.clo_len)
        free(self.clo_pool)
        free(self.seen)
        free(self.stack)
        free(self.buf)
        free(self.table)
        free(self.acc)
        free(self.single)
        free(self.multi_val)
        free(self.out)
        free(self.pts)
        free(self.tg)
        free(self.ubuf)
        intsets_free(&self.sets)
        intsets_free(&self.multi)

    cdef int _fail(self, int code, int64_t value) noexcept nogil:
        if not self.err:
            self.err = code
            self.err_value = value
        return -1

    cdef int32_t _search(self, const int32_t* starts, int32_t n) noexcept nogil:
        """The kernel states epsilon-reachable from starts[0..n), sorted into buf; their count."""
        cdef int32_t top = 0, nout = 0, i, s, u
        cdef int64_t e
        self.stamp += 1
        for i in range(n):
            s = starts[i]
            if self.seen[s] != self.stamp:
                self.seen[s] = self.stamp
                self.stack[top] = s
                top += 1
        while top:
            top -= 1
            s = self.stack[top]
            if self.kernel[s]:
                self.buf[nout] = s
                nout += 1
            for e in range(self.eps_off[s], self.eps_off[s + 1]):
                u = self.eps_to[e]
                if self.seen[u] != self.stamp:
                    self.seen[u] = self.stamp
                    self.stack[top] = u
                    top += 1
        return _sort_unique_i32(self.buf, nout)

    cdef int _closure(self, int32_t q) noexcept nogil:
        """Memoize the closure of NFA state q (clo_off[q], clo_len[q]); -1 out of memory."""
        cdef int32_t n
        cdef void* p
        if self.clo_off[q] >= 0:
            return 0
        if self.eps_off[q] == self.eps_off[q + 1]:
            n = 1 if self.kernel[q] else 0
            self.buf[0] = q
        else:
            n = self._search(&q, 1)
        p = grow_array(self.clo_pool, &self.clo_cap, self.clo_len_total + n, sizeof(int32_t))
        if p == NULL:
            return self._fail(ERR_MEMORY, self.clo_len_total + n)
        self.clo_pool = <int32_t*>p
        memcpy(self.clo_pool + self.clo_len_total, self.buf, n * sizeof(int32_t))
        self.clo_off[q] = self.clo_len_total
        self.clo_len[q] = n
        self.clo_len_total += n
        return 0

    cdef int32_t _state_of(self, const int32_t* xs, int32_t n) noexcept nogil:
        """The DFA state of kernel set xs[0..n) (sorted), made when new; -1 on error."""
        cdef uint64_t hv = hash_ints(xs, n)
        cdef int32_t j = intsets_find(&self.sets, xs, n, hv)
        cdef void* p
        if j >= 0:
            return j
        j = self.sets.n
        if j >= self.max_states:
            return self._fail(ERR_STATES, j + 1)
        p = grow_array(self.table, &self.table_cap, j + 1, self.k * sizeof(int32_t))
        if p == NULL:
            return self._fail(ERR_MEMORY, j + 1)
        self.table = <int32_t*>p
        p = grow_array(self.acc, &self.acc_cap, j + 1, sizeof(uint8_t))
        if p == NULL:
            return self._fail(ERR_MEMORY, j + 1)
        self.acc = <uint8_t*>p
        if intsets_add(&self.sets, xs, n, hv) < 0:
            return self._fail(ERR_MEMORY, j + 1)
        memset(self.table + <int64_t>j * self.k, 0, self.k * sizeof(int32_t))
        self.acc[j] = _contains(xs, n, self.final)
        return j

    cdef int32_t _single_state(self, int32_t t) noexcept nogil:
        cdef int32_t j = self.single[t]
        if j < 0:
            if self._closure(t) < 0:
                return -1
            j = self._state_of(self.clo_pool + self.clo_off[t], self.clo_len[t])
            if j < 0:
                return -1
            self.single[t] = j
        return j

    cdef int32_t _multi_state(self, const int32_t* ts, int32_t n) noexcept nogil:
        """The DFA state of the closure of the edge targets ts[0..n) (sorted, n > 1)."""
        cdef uint64_t hv = hash_ints(ts, n)
        cdef int32_t id_ = intsets_find(&self.multi, ts, n, hv)
        cdef int32_t i, t, j, m = 0
        cdef int64_t total = 0
        cdef void* p
        if id_ >= 0:
            return self.multi_val[id_]
        if n <= _SMALL_UNION:
            for i in range(n):
                if self._closure(ts[i]) < 0:
                    return -1
                total += self.clo_len[ts[i]]
            p = grow_array(self.ubuf, &self.ubuf_cap, total, sizeof(int32_t))
            if p == NULL:
                return self._fail(ERR_MEMORY, total)
            self.ubuf = <int32_t*>p
            for i in range(n):
                t = ts[i]
                memcpy(self.ubuf + m, self.clo_pool + self.clo_off[t], self.clo_len[t] * sizeof(int32_t))
                m += self.clo_len[t]
            m = _sort_unique_i32(self.ubuf, m)
            j = self._state_of(self.ubuf, m)
        else:  # one search: the closures of many targets tend to overlap
            m = self._search(ts, n)
            j = self._state_of(self.buf, m)
        if j < 0:
            return -1
        id_ = intsets_add(&self.multi, ts, n, hv)
        if id_ < 0:
            return self._fail(ERR_MEMORY, n)
        p = grow_array(self.multi_val, &self.multi_cap, id_ + 1, sizeof(int32_t))
        if p == NULL:
            return self._fail(ERR_MEMORY, id_ + 1)
        self.multi_val = <int32_t*>p
        self.multi_val[id_] = j
        return j

    cdef void _fill(self, int32_t i, int32_t a, int32_t b, int32_t j) noexcept nogil:
        cdef int32_t* row = self.table + <int64_t>i * self.k
        cdef int32_t c
        for c in range(a, b):
            row[c] = j

    cdef int _run(self, int32_t start) noexcept nogil:
        """The whole construction from NFA state start; -1 on error."""
        cdef int32_t i, m, q, x, j, a, b, prev, npts, seg, ntg
        cdef int64_t e, nout, r
        cdef const int32_t* members
        cdef bint disjoint
        cdef void* p
        if self._state_of(NULL, 0) < 0:  # the dead state: the empty set
            return -1
        if self._closure(start) < 0:
            return -1
        if self._state_of(self.clo_pool + self.clo_off[start], self.clo_len[start]) < 0:
            return -1
        i = 1
        while i < self.sets.n:
            # the edges out of state i's kernel states (copied: interning may move the pool)
            members = self.sets.pool + self.sets.off[i]
            m = self.sets.len[i]
            nout = 0
            for x in range(m):
                q = members[x]
                nout += self.ed_off[q + 1] - self.ed_off[q]
            p = grow_array(self.out, &self.out_cap, nout, sizeof(int64_t))
            if p == NULL:
                return self._fail(ERR_MEMORY, nout)
            self.out = <int64_t*>p
            nout = 0
            for x in range(m):
                q = members[x]
                for e in range(self.ed_off[q], self.ed_off[q + 1]):
                    self.out[nout] = self.ed_key[e]
                    nout += 1
            _sort(self.out, nout)
            disjoint = True
            prev = 0
            for r in range(nout):
                if _key_a(self.out[r]) < prev:
                    disjoint = False
                    break
                prev = _key_b(self.out[r])
            if disjoint:  # the usual case: each range is one target
                for r in range(nout):
                    j = self._single_state(_key_t(self.out[r]))
                    if j < 0:
                        return -1
                    if j:
                        self._fill(i, _key_a(self.out[r]), _key_b(self.out[r]), j)
                i += 1
                continue
            # overlapping ranges: the targets of each segment between range ends
            p = grow_array(self.pts, &self.pts_cap, 2 * nout, sizeof(int32_t))
            if p == NULL:
                return self._fail(ERR_MEMORY, 2 * nout)
            self.pts = <int32_t*>p
            p = grow_array(self.tg, &self.tg_cap, nout, sizeof(int32_t))
            if p == NULL:
                return self._fail(ERR_MEMORY, nout)
            self.tg = <int32_t*>p
            for r in range(nout):
                self.pts[2 * r] = _key_a(self.out[r])
                self.pts[2 * r + 1] = _key_b(self.out[r])
            npts = _sort_unique_i32(self.pts, <int32_t>(2 * nout))
            for seg in range(npts - 1):
                a = self.pts[seg]
                b = self.pts[seg + 1]
                ntg = 0
                for r in range(nout):
                    if _key_a(self.out[r]) > a:
                        break
                    if a < _key_b(self.out[r]):
                        self.tg[ntg] = _key_t(self.out[r])
                        ntg += 1
                if ntg == 0:
                    continue
                ntg = _sort_unique_i32(self.tg, ntg)
                if ntg == 1:
                    j = self._single_state(self.tg[0])
                else:
                    j = self._multi_state(self.tg, ntg)
                if j < 0:
                    return -1
                if j:
                    self._fill(i, a, b, j)
            i += 1
        return 0


def determinize(list eps, list edges, int32_t start, int32_t final, int64_t max_states):
    """Subset construction of the NFA of :class:`toolkit.automata.nfa._NFA` (``eps[s]``: deltas
    of epsilon moves; ``edges[s]``: ``(lo, hi, delta)`` inclusive byte ranges) from
    ``start`` with ``final`` accepting.  Returns ``(table, accepting, cuts)``: ``table``
    int32 ``(n, k)`` over the ``k`` byte classes (class ``c`` is bytes ``cuts[c]`` to
    ``cuts[c+1]-1``), state 0 dead and 1 the start, ``accepting`` bool ``(n,)``.
    Raises :class:`LimitExceeded` (``max_states``) past ``max_states`` states."""
    cdef int32_t n = len(eps), s, c, k, lo, hi, d
    cdef int64_t n_eps = 0, n_ed = 0, e
    cdef uint8_t is_cut[257]
    cdef int32_t cls[257]
    cdef _Subsets S = _Subsets()
    cdef object es
    if n != len(edges) or not (0 <= start < n and 0 <= final < n):
        raise ValueError("determinize: eps and edges must have one entry per NFA state, start and final in range")
    memset(is_cut, 0, sizeof(is_cut))
    is_cut[0] = is_cut[256] = 1
    for s in range(n):
        n_eps += len(<object>eps[s])
        es = edges[s]
        n_ed += len(es)
        for lo, hi, d in es:
            if not (0 <= lo <= hi <= 255 and 0 <= s + d < n):
                raise ValueError(f"determinize: NFA state {s} has the edge {(lo, hi, d)}: bytes must be "
                                 f"0 <= lo <= hi <= 255 and the target inside the {n} states")
            is_cut[lo] = 1
            is_cut[hi + 1] = 1
    cuts = [c for c in range(257) if is_cut[c]]
    k = len(cuts) - 1
    for c in range(k + 1):
        cls[cuts[c]] = c
    S.n_nfa, S.k, S.final, S.max_states = n, k, final, max_states
    S.eps_off = <int64_t*>malloc((n + 1) * sizeof(int64_t))
    S.eps_to = <int32_t*>malloc((n_eps + 1) * sizeof(int32_t))
    S.ed_off = <int64_t*>malloc((n + 1) * sizeof(int64_t))
    S.ed_key = <int64_t*>malloc((n_ed + 1) * sizeof(int64_t))
    S.kernel = <uint8_t*>malloc(n * sizeof(uint8_t))
    S.clo_off = <int64_t*>malloc(n * sizeof(int64_t))
    S.clo_len = <int32_t*>malloc(n * sizeof(int32_t))
    S.seen = <int32_t*>calloc(n, sizeof(int32_t))
    S.stack = <int32_t*>malloc(n * sizeof(int32_t))
    S.buf = <int32_t*>malloc(n * sizeof(int32_t))
    S.single = <int32_t*>malloc(n * sizeof(int32_t))
    if (S.eps_off == NULL or S.eps_to == NULL or S.ed_off == NULL or S.ed_key == NULL or S.kernel == NULL
            or S.clo_off == NULL or S.clo_len == NULL or S.seen == NULL or S.stack == NULL or S.buf == NULL
            or S.single == NULL or intsets_init(&S.sets) < 0 or intsets_init(&S.multi) < 0):
        raise MemoryError(f"determinize: no memory for an NFA of {n} states")
    n_eps = n_ed = 0
    for s in range(n):
        S.eps_off[s] = n_eps
        for d in <object>eps[s]:
            if not 0 <= s + d < n:
                raise ValueError(f"determinize: NFA state {s} has an epsilon move to {s + d}, outside the {n} states")
            S.eps_to[n_eps] = s + d
            n_eps += 1
        S.ed_off[s] = n_ed
        es = edges[s]
        S.kernel[s] = len(es) > 0 or s == final
        for lo, hi, d in es:
            S.ed_key[n_ed] = _edge_key(cls[lo], cls[hi + 1], s + d)
            n_ed += 1
        S.clo_off[s] = -1
        S.single[s] = -1
    S.eps_off[n] = n_eps
    S.ed_off[n] = n_ed
    cdef int rc
    with nogil:
        rc = S._run(start)
    if rc < 0:
        if S.err == ERR_STATES:
            raise LimitExceeded("max_states", S.err_value, max_states)
        raise MemoryError(f"determinize: out of memory at {S.err_value} elements")
    cdef int32_t states = S.sets.n
    table = np.empty((states, k), dtype=np.int32)
    accepting = np.empty(states, dtype=bool)
    memcpy(cnp.PyArray_DATA(table), S.table, <size_t>states * k * sizeof(int32_t))
    memcpy(cnp.PyArray_DATA(accepting), S.acc, <size_t>states)
    return table, accepting, cuts


# -------------------------------------------------------------- minimizing ----


cdef class _Refiner:
    """Hopcroft's refinement of one DFA (all C arrays, freed with the object)."""

    cdef int32_t n, k, w
    cdef const int32_t* T
    # inverse transitions: runs of classes [lo, hi) from src into each target
    cdef int64_t* inv_off
    cdef int32_t* inv_src
    cdef int32_t* inv_lo
    cdef int32_t* inv_hi
    # the partition: block b is elems[first[b] .. end[b])
    cdef int32_t* elems
    cdef int32_t* pos
    cdef int32_t* blk
    cdef int32_t* first
    cdef int32_t* end
    cdef int32_t nb
    cdef uint8_t* in_work
    cdef int32_t* work
    cdef int32_t nwork
    # one splitter's scratch
    cdef uint64_t* sig       # w words per state: its classes into the splitter
    cdef int64_t* sstamp
    cdef int32_t* touched
    cdef int64_t* bstamp
    cdef int32_t* bcnt
    cdef int32_t* boff
    cdef int32_t* bcur
    cdef int32_t* tblocks
    cdef int32_t* order
    cdef int32_t* gidx
    cdef int32_t* grep
    cdef int32_t* gsize
    cdef int32_t* gstart
    cdef int32_t* gfill
    cdef int64_t* hstamp
    cdef int32_t* hgid
    cdef int64_t hcap

    def __dealloc__(self):
        free(self.inv_off)
        free(self.inv_src)
        free(self.inv_lo)
        free(self.inv_hi)
        free(self.elems)
        free(self.pos)
        free(self.blk)
        free(self.first)
        free(self.end)
        free(self.in_work)
        free(self.work)
        free(self.sig)
        free(self.sstamp)
        free(self.touched)
        free(self.bstamp)
        free(self.bcnt)
        free(self.boff)
        free(self.bcur)
        free(self.tblocks)
        free(self.order)
        free(self.gidx)
        free(self.grep)
        free(self.gsize)
        free(self.gstart)
        free(self.gfill)
        free(self.hstamp)
        free(self.hgid)

    cdef bint _alloc(self, int32_t n) noexcept nogil:
        cdef size_t i4 = sizeof(int32_t), i8 = sizeof(int64_t)
        self.hcap = 16
        while self.hcap < 2 * <int64_t>n:
            self.hcap *= 2
        self.inv_off = <int64_t*>calloc(n + 1, i8)
        self.elems = <int32_t*>malloc(n * i4)
        self.pos = <int32_t*>malloc(n * i4)
        self.blk = <int32_t*>malloc(n * i4)
        self.first = <int32_t*>malloc(n * i4)
        self.end = <int32_t*>malloc(n * i4)
        self.in_work = <uint8_t*>calloc(n, 1)
        self.work = <int32_t*>malloc(n * i4)
        self.sig = <uint64_t*>malloc(<size_t>n * self.w * sizeof(uint64_t))
        self.sstamp = <int64_t*>calloc(n, i8)
        self.touched = <int32_t*>malloc(n * i4)
        self.bstamp = <int64_t*>calloc(n, i8)
        self.bcnt = <int32_t*>malloc(n * i4)
        self.boff = <int32_t*>malloc(n * i4)
        self.bcur = <int32_t*>malloc(n * i4)
        self.tblocks = <int32_t*>malloc(n * i4)
        self.order = <int32_t*>malloc(n * i4)
        self.gidx = <int32_t*>malloc(n * i4)
        self.grep = <int32_t*>malloc(n * i4)
        self.gsize = <int32_t*>malloc(n * i4)
        self.gstart = <int32_t*>malloc(n * i4)
        self.gfill = <int32_t*>malloc(n * i4)
        self.hstamp = <int64_t*>calloc(self.hcap, i8)
        self.hgid = <int32_t*>malloc(self.hcap * i4)
        return not (self.inv_off == NULL or self.elems == NULL or self.pos == NULL or self.blk == NULL
                    or self.first == NULL or self.end == NULL or self.in_work == NULL or self.work == NULL
                    or self.sig == NULL or self.sstamp == NULL or self.touched == NULL or self.bstamp == NULL
                    or self.bcnt == NULL or self.boff == NULL or self.bcur == NULL or self.tblocks == NULL
                    or self.order == NULL or self.gidx == NULL or self.grep == NULL or self.gsize == NULL
                    or self.gstart == NULL or self.gfill == NULL or self.hstamp == NULL or self.hgid == NULL)

    cdef bint _inverse(self) noexcept nogil:
        """Runs of equal targets per source row, grouped by target (CSR); False: no memory."""
        cdef int32_t s, c, d, t, k = self.k
        cdef const int32_t* row
        cdef int64_t m = 0, x
        cdef int fill
        for fill in range(2):  # count the runs per target, then place them
            for s in range(1, self.n):
                row = self.T + <int64_t>s * k
                c = 0
                while c < k:
                    t = row[c]
                    d = c + 1
                    while d < k and row[d] == t:
                        d += 1
                    if t and fill:
                        x = self.inv_off[t]
                        self.inv_off[t] += 1
                        self.inv_src[x] = s
                        self.inv_lo[x] = c
                        self.inv_hi[x] = d
                    elif t:
                        self.inv_off[t + 1] += 1
                        m += 1
                    c = d
            if not fill:
                for s in range(self.n):
                    self.inv_off[s + 1] += self.inv_off[s]
                self.inv_src = <int32_t*>malloc((m + 1) * sizeof(int32_t))
                self.inv_lo = <int32_t*>malloc((m + 1) * sizeof(int32_t))
                self.inv_hi = <int32_t*>malloc((m + 1) * sizeof(int32_t))
                if self.inv_src == NULL or self.inv_lo == NULL or self.inv_hi == NULL:
                    return False
        for s in range(self.n - 1, 0, -1):  # undo the fill's shift
            self.inv_off[s] = self.inv_off[s - 1]
        self.inv_off[0] = 0
        return True

    cdef inline void _push(self, int32_t b) noexcept nogil:
        if not self.in_work[b]:
            self.in_work[b] = 1
            self.work[self.nwork] = b
            self.nwork += 1

    cdef inline bint _same_sig(self, int32_t s, int32_t u) noexcept nogil:
        cdef int32_t i
        for i in range(self.w):
            if self.sig[<int64_t>s * self.w + i] != self.sig[<int64_t>u * self.w + i]:
                return False
        return True

    cdef void _split(self, int32_t x, const int32_t* S, int32_t cnt, int64_t* hround) noexcept nogil:
        """Split block x by the signatures of its members S[0..cnt) (the others have none)."""
        cdef int32_t i, s, g, ng = 0, u, q, p, size = self.end[x] - self.first[x], start = self.first[x]
        cdef int32_t g0, nb0, largest, largest_id, nbid, acc_
        cdef int64_t h, hmask = self.hcap - 1
        cdef uint64_t hv
        cdef bint was
        hround[0] += 1
        for i in range(cnt):
            s = S[i]
            hv = <uint64_t>0xcbf29ce484222325
            for g in range(self.w):
                hv = hash_mix(hv, self.sig[<int64_t>s * self.w + g])
            h = <int64_t>((hv ^ (hv >> 29)) & <uint64_t>hmask)
            while True:
                if self.hstamp[h] != hround[0]:
                    self.hstamp[h] = hround[0]
                    self.hgid[h] = ng
                    self.grep[ng] = s
                    self.gsize[ng] = 0
                    g = ng
                    ng += 1
                    break
                g = self.hgid[h]
                if self._same_sig(self.grep[g], s):
                    break
                h = (h + 1) & hmask
            self.gidx[i] = g
            self.gsize[g] += 1
        if ng == 1 and cnt == size:
            return
        acc_ = 0
        for g in range(ng):
            self.gstart[g] = acc_
            self.gfill[g] = 0
            acc_ += self.gsize[g]
        for i in range(cnt):  # each group contiguous at the front, in group order
            s = S[i]
            g = self.gidx[i]
            p = start + self.gstart[g] + self.gfill[g]
            self.gfill[g] += 1
            u = self.elems[p]
            q = self.pos[s]
            self.elems[q] = u
            self.pos[u] = q
            self.elems[p] = s
            self.pos[s] = p
        was = self.in_work[x]
        if cnt < size:  # the members without a signature keep x
            self.first[x] = start + cnt
            largest = size - cnt
            g0 = 0
        else:  # group 0 keeps x
            self.end[x] = start + self.gsize[0]
            largest = self.gsize[0]
            g0 = 1
        largest_id = x
        nb0 = self.nb
        for g in range(g0, ng):
            nbid = self.nb
            self.nb += 1
            self.first[nbid] = start + self.gstart[g]
            self.end[nbid] = self.first[nbid] + self.gsize[g]
            for p in range(self.first[nbid], self.end[nbid]):
                self.blk[self.elems[p]] = nbid
            if self.gsize[g] > largest:
                largest = self.gsize[g]
                largest_id = nbid
        if was:
            for nbid in range(nb0, self.nb):
                self._push(nbid)
        else:
            if largest_id != x:
                self._push(x)
            for nbid in range(nb0, self.nb):
                if nbid != largest_id:
                    self._push(nbid)

    cdef void _refine(self) noexcept nogil:
        cdef int32_t b, i, t, s, nt, ntb, x, off
        cdef int64_t e, rnd = 0, hround = 0, base
        cdef int32_t lo, hi, c
        while self.nwork:
            self.nwork -= 1
            b = self.work[self.nwork]
            self.in_work[b] = 0
            rnd += 1
            nt = 0
            for i in range(self.first[b], self.end[b]):
                t = self.elems[i]
                for e in range(self.inv_off[t], self.inv_off[t + 1]):
                    s = self.inv_src[e]
                    base = <int64_t>s * self.w
                    if self.sstamp[s] != rnd:
                        self.sstamp[s] = rnd
                        memset(self.sig + base, 0, self.w * sizeof(uint64_t))
                        self.touched[nt] = s
                        nt += 1
                    lo = self.inv_lo[e]
                    hi = self.inv_hi[e]
                    for c in range(lo, hi):
                        self.sig[base + (c >> 6)] |= (<uint64_t>1) << (c & 63)
            # the touched states grouped by block
            ntb = 0
            for i in range(nt):
                x = self.blk[self.touched[i]]
                if self.bstamp[x] != rnd:
                    self.bstamp[x] = rnd
                    self.bcnt[x] = 0
                    self.tblocks[ntb] = x
                    ntb += 1
                self.bcnt[x] += 1
            off = 0
            for i in range(ntb):
                x = self.tblocks[i]
                self.boff[x] = off
                self.bcur[x] = off
                off += self.bcnt[x]
            for i in range(nt):
                s = self.touched[i]
                x = self.blk[s]
                self.order[self.bcur[x]] = s
                self.bcur[x] += 1
            for i in range(ntb):
                x = self.tblocks[i]
                self._split(x, self.order + self.boff[x], self.bcnt[x], &hround)


def _check_targets(str what, const int32_t[:, ::1] table, int64_t n):
    """ValueError unless every entry of ``table`` is a state id in ``[0, n)`` (the C loops
    index by them)."""
    a = np.asarray(table)
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ValueError(f"{what}: transition targets must be states 0..{n - 1}, found {a.min()}..{a.max()}")


def minimize(const int32_t[:, ::1] table, const uint8_t[::1] accepting):
    """The minimal DFA of ``table`` (int32 ``(n, k)`` over byte classes, state 0 dead,
    1 the start; every other state reachable and live) with ``accepting`` (uint8 or
    bool viewed as uint8, ``(n,)``), numbered canonically.  Returns ``(table, accepting)``
    of the minimal DFA over the same classes: dead 0, start 1, the others breadth-first
    with successors in order of the smallest class reaching them."""
    cdef int32_t n = table.shape[0], k = table.shape[1], s, want, nel = 0, f, i, b, c, t, bt, m, rep
    cdef _Refiner R = _Refiner()
    if n < 2 or accepting.shape[0] != n:
        raise ValueError(f"minimize: need the dead and the start state and one flag per state, got {n} "
                         f"states and {accepting.shape[0]} flags")
    _check_targets("minimize", table, n)
    R.n, R.k, R.w, R.T = n, k, (k + 63) // 64, &table[0, 0]
    if not R._alloc(n) or not R._inverse():
        raise MemoryError(f"minimize: no memory for a DFA of {n} states")
    cdef int32_t* new_id
    cdef int32_t* orderb
    out_acc = None
    with nogil:
        R.blk[0] = -1
        for want in range(1, -1, -1):
            f = nel
            for s in range(1, n):
                if (accepting[s] != 0) == want:
                    R.elems[nel] = s
                    R.pos[s] = nel
                    R.blk[s] = R.nb
                    nel += 1
            if nel > f:
                R.first[R.nb] = f
                R.end[R.nb] = nel
                R._push(R.nb)
                R.nb += 1
        R._refine()
        # canonical numbering, reusing scratch arrays (one entry per block)
        new_id = R.bcnt
        orderb = R.boff
        memset(new_id, 0, R.nb * sizeof(int32_t))
        orderb[0] = R.blk[1]
        new_id[orderb[0]] = 1
        m = 1
        i = 0
        while i < m:
            rep = R.elems[R.first[orderb[i]]]
            for c in range(k):
                t = table[rep, c]
                if t:
                    bt = R.blk[t]
                    if not new_id[bt]:
                        orderb[m] = bt
                        m += 1
                        new_id[bt] = m
            i += 1
    small = np.zeros((m + 1, k), dtype=np.int32)
    out_acc = np.zeros(m + 1, dtype=bool)
    cdef int32_t[:, ::1] sv = small
    cdef uint8_t[::1] av = out_acc.view(np.uint8)
    with nogil:
        for i in range(m):
            rep = R.elems[R.first[orderb[i]]]
            av[i + 1] = accepting[rep] != 0
            for c in range(k):
                t = table[rep, c]
                sv[i + 1, c] = new_id[R.blk[t]] if t else 0
    return small, out_acc


# ----------------------------------------------------------------- products ----

cdef enum:
    OP_AND = 0
    OP_OR = 1
    OP_DIFF = 2


cdef inline bint _dead_pair(int op, int32_t p, int32_t q) noexcept nogil:
    if op == OP_AND:
        return p == 0 or q == 0
    if op == OP_DIFF:
        return p == 0
    return p == 0 and q == 0


cdef inline uint64_t _hash_pair(uint64_t key) noexcept nogil:
    key ^= key >> 33
    key *= <uint64_t>0xff51afd7ed558ccd
    key ^= key >> 33
    return key


cdef class _Product:
    """The breadth-first product of two DFAs (all C arrays, freed with the object)."""

    cdef int32_t k
    cdef int64_t nb_states
    cdef int32_t* pp          # pair i is (pp[i], pq[i])
    cdef int32_t* pq
    cdef int64_t pp_cap, pq_cap
    cdef int32_t* rows        # k entries per pair
    cdef int64_t rows_cap
    cdef int64_t* hkey        # open addressing: key p * nb_states + q, -1 empty
    cdef int32_t* hval
    cdef int64_t hcap
    cdef int32_t n

    def __dealloc__(self):
        free(self.pp)
        free(self.pq)
        free(self.rows)
        free(self.hkey)
        free(self.hval)

    cdef bint _rehash(self) noexcept nogil:
        cdef int64_t cap = 1024 if self.hcap == 0 else self.hcap * 2, i, h
        cdef int64_t* keys = <int64_t*>malloc(cap * sizeof(int64_t))
        cdef int32_t* vals = <int32_t*>malloc(cap * sizeof(int32_t))
        if keys == NULL or vals == NULL:
            free(keys)
            free(vals)
            return False
        memset(keys, 0xff, cap * sizeof(int64_t))
        for i in range(1, self.n):
            h = <int64_t>(_hash_pair(<uint64_t>(self.pp[i] * self.nb_states + self.pq[i])) & <uint64_t>(cap - 1))
            while keys[h] >= 0:
                h = (h + 1) & (cap - 1)
            keys[h] = self.pp[i] * self.nb_states + self.pq[i]
            vals[h] = i
        free(self.hkey)
        free(self.hval)
        self.hkey, self.hval, self.hcap = keys, vals, cap
        return True

    cdef int32_t _pair(self, int32_t p, int32_t q, int64_t max_states) noexcept nogil:
        """The id of pair (p, q), made when new; -1 out of memory, -2 past max_states."""
        cdef int64_t key = p * self.nb_states + q
        cdef int64_t h = <int64_t>(_hash_pair(<uint64_t>key) & <uint64_t>(self.hcap - 1))
        cdef int32_t j
        cdef void* x
        while self.hkey[h] >= 0:
            if self.hkey[h] == key:
                return self.hval[h]
            h = (h + 1) & (self.hcap - 1)
        j = self.n
        if j >= max_states:
            return -2
        x = grow_array(self.pp, &self.pp_cap, j + 1, sizeof(int32_t))
        if x == NULL:
            return -1
        self.pp = <int32_t*>x
        x = grow_array(self.pq, &self.pq_cap, j + 1, sizeof(int32_t))
        if x == NULL:
            return -1
        self.pq = <int32_t*>x
        x = grow_array(self.rows, &self.rows_cap, j + 1, self.k * sizeof(int32_t))
        if x == NULL:
            return -1
        self.rows = <int32_t*>x
        self.pp[j] = p
        self.pq[j] = q
        self.hkey[h] = key
        self.hval[h] = j
        self.n += 1
        if 2 * <int64_t>self.n > self.hcap and not self._rehash():
            return -1
        return j


cdef int _mark_live(int32_t n, int32_t k, const int32_t* rows, uint8_t* live) noexcept nogil:
    """Trimming's search: ``live`` (n flags) holds the accepting states on entry and every
    state that can reach one on return, found backwards through predecessor lists of
    the table ``rows`` (``n * k``, 0 the dead state, never live).  0, or -1 when out of
    memory."""
    cdef int64_t* po = <int64_t*>calloc(n + 1, sizeof(int64_t))
    cdef int64_t n_edges = 0, e
    cdef int32_t s, c, t, top = 0
    if po == NULL:
        return -1
    for s in range(1, n):
        for c in range(k):
            t = rows[<int64_t>s * k + c]
            if t:
                po[t + 1] += 1
                n_edges += 1
    cdef int32_t* pr = <int32_t*>malloc((n_edges + 1) * sizeof(int32_t))
    cdef int32_t* st = <int32_t*>malloc((n + 1) * sizeof(int32_t))
    if pr == NULL or st == NULL:
        free(po); free(pr); free(st)
        return -1
    for s in range(n):
        po[s + 1] += po[s]
    for s in range(1, n):
        for c in range(k):
            t = rows[<int64_t>s * k + c]
            if t:
                pr[po[t]] = s
                po[t] += 1
    for s in range(n - 1, 0, -1):
        po[s] = po[s - 1]
    po[0] = 0
    live[0] = 0
    for s in range(1, n):
        if live[s]:
            st[top] = s
            top += 1
    while top:
        top -= 1
        t = st[top]
        for e in range(po[t], po[t + 1]):
            s = pr[e]
            if not live[s]:
                live[s] = 1
                st[top] = s
                top += 1
    free(po); free(pr); free(st)
    return 0


def product(const int32_t[:, ::1] ta, const uint8_t[::1] acc_a, int32_t start_a,
            const int32_t[:, ::1] tb, const uint8_t[::1] acc_b, int32_t start_b,
            str op, int64_t max_states):
    """The product of two DFAs over the same ``k`` byte classes (``ta``: int32
    ``(na, k)``, state 0 dead, ``acc_a`` uint8) for ``op`` ``"and"``, ``"or"`` or
    ``"diff"``, breadth-first from ``(start_a, start_b)``, trimmed to the states that
    can reach acceptance.  Returns ``(table, accepting)`` for :func:`minimize` (dead 0,
    start 1), or None when the language is empty.  Raises :class:`LimitExceeded`
    (``max_states``) past ``max_states`` reachable pairs."""
    cdef int code = OP_AND if op == "and" else OP_OR if op == "or" else OP_DIFF if op == "diff" else -1
    cdef int32_t k = ta.shape[1], i, c, p, q, np_, nq, j, s, t, top, m
    cdef int64_t e, total
    cdef _Product P = _Product()
    cdef int rc = 0
    if code < 0:
        raise ValueError(f"op must be and, or or diff, not {op!r}")
    if tb.shape[1] != k or acc_a.shape[0] != ta.shape[0] or acc_b.shape[0] != tb.shape[0]:
        raise ValueError("product: both DFAs need the same classes and one flag per state")
    _check_targets("product", ta, ta.shape[0])
    _check_targets("product", tb, tb.shape[0])
    if not (0 <= start_a < ta.shape[0] and 0 <= start_b < tb.shape[0]):
        raise ValueError(f"product: start states {start_a}, {start_b} outside the DFAs")
    P.k, P.nb_states = k, tb.shape[0]
    if _dead_pair(code, start_a, start_b):
        return None
    P.n = 1  # pair 0 stands for the dead pair
    if not P._rehash() or P._pair(start_a, start_b, max_states) < 0:
        raise MemoryError("product: out of memory")
    with nogil:
        memset(P.rows, 0, k * sizeof(int32_t))
        i = 1
        while i < P.n:
            p, q = P.pp[i], P.pq[i]
            for c in range(k):
                np_ = ta[p, c]
                nq = tb[q, c]
                if _dead_pair(code, np_, nq):
                    j = 0
                else:
                    j = P._pair(np_, nq, max_states)
                    if j < 0:
                        rc = j
                        break
                P.rows[<int64_t>i * k + c] = j
            if rc < 0:
                break
            i += 1
    if rc == -2:
        raise LimitExceeded("max_states", P.n + 1, max_states)
    if rc < 0:
        raise MemoryError(f"product: out of memory at {P.n} pairs")
    cdef int32_t n = P.n
    # trim: a state is live when it can reach acceptance
    live = np.zeros(n, dtype=np.uint8)
    accepts = np.zeros(n, dtype=np.uint8)
    new = np.zeros(n, dtype=np.int32)
    cdef uint8_t[::1] lv = live
    cdef uint8_t[::1] ac = accepts
    cdef int32_t[::1] nw = new
    with nogil:
        for s in range(1, n):
            p, q = P.pp[s], P.pq[s]
            if ((code == OP_AND and acc_a[p] and acc_b[q]) or (code == OP_DIFF and acc_a[p] and not acc_b[q])
                    or (code == OP_OR and (acc_a[p] or acc_b[q]))):
                lv[s] = ac[s] = 1
        rc = _mark_live(n, k, P.rows, &lv[0])
    if rc < 0:
        raise MemoryError(f"product: out of memory trimming {n} pairs")
    with nogil:
        m = 0
        for s in range(1, n):
            if lv[s]:
                m += 1
                nw[s] = m
    if not live[1]:
        return None
    table = np.zeros((m + 1, k), dtype=np.int32)
    accepting = np.zeros(m + 1, dtype=bool)
    cdef int32_t[:, ::1] tv = table
    cdef uint8_t[::1] av = accepting.view(np.uint8)
    with nogil:
        for s in range(1, n):
            if lv[s]:
                av[nw[s]] = ac[s]
                for c in range(k):
                    tv[nw[s], c] = nw[P.rows[<int64_t>s * k + c]]
    return table, accepting


# ------------------------------------------------------------ JSON literals ----

cdef uint8_t _SHORT_LETTER[0x60]  # the short escape letter of a code point, 0 if none
memset(_SHORT_LETTER, 0, sizeof(_SHORT_LETTER))
for _cp, _letter in ((0x22, b'"'), (0x5C, b"\\"), (0x2F, b"/"), (0x08, b"b"), (0x0C, b"f"), (0x0A, b"n"),
                     (0x0D, b"r"), (0x09, b"t")):
    _SHORT_LETTER[_cp] = _letter[0]
del _cp, _letter


cdef class _Trie:
    """Edges (state, byte, target) of a DFA written down directly (C arrays)."""

    cdef int32_t* e
    cdef int64_t ne
    cdef int32_t n

    def __dealloc__(self):
        free(self.e)

    cdef inline void edge(self, int32_t s, int32_t b, int32_t t) noexcept nogil:
        self.e[3 * self.ne] = s
        self.e[3 * self.ne + 1] = b
        self.e[3 * self.ne + 2] = t
        self.ne += 1

    cdef inline int32_t state(self) noexcept nogil:
        self.n += 1
        return self.n - 1

    cdef int32_t hex4(self, int32_t s, uint32_t unit, int32_t last) noexcept nogil:
        """Four hex digits (letters in either case) spelling ``unit``, from ``s`` to
        ``last`` (or to a new state when ``last`` is -1); returns the end state."""
        cdef int sh, d
        cdef int32_t t
        for sh in range(12, -4, -4):
            d = (unit >> sh) & 0xF
            t = last if (sh == 0 and last >= 0) else self.state()
            if d < 10:
                self.edge(s, 0x30 + d, t)
            else:
                self.edge(s, 0x61 + d - 10, t)
                self.edge(s, 0x41 + d - 10, t)
            s = t
        return s


def json_literal(str value, int64_t max_states):
    """The DFA of every JSON text that decodes to the string ``value``, written down
    directly: ``(table, accepting, column)``, ``table`` and ``accepting`` as
    :func:`minimize` returns them over columns and ``column`` int32 ``(256,)`` the
    column of each byte (as :func:`byte_classes` takes them), or None when no JSON
    text decodes to ``value``.

    The language is :func:`toolkit.automata.jsontext.json_string_literal`'s (its docstring has
    the rules): each character is raw (not ``"``, ``\\`` or a control character), its
    short escape, ``\\u`` and four hex digits of either case, or for an astral one a
    surrogate pair; a lone surrogate only as ``\\u``; a high surrogate directly followed
    by a low one is no JSON text's decoding (None).  Each character is a small trie
    from the state before it to the state after it (the raw form never starts with a
    backslash, and no short escape letter is ``u``), so the whole is deterministic as
    built; :func:`minimize`, over the classes of the bytes used, numbers it canonically.
    More than ``max_states`` states (the dead one included, as :func:`determinize`
    counts) raise :class:`LimitExceeded` (``max_states``); each character takes at least
    six, so a string too long for the limit is refused before anything is allocated.
    """
    cdef Py_ssize_t L = len(value), i = 0
    cdef Py_UCS4 ch
    cdef uint32_t cp, a
    cdef int32_t cur, nxt, esc, end, s, t, b, k, m
    cdef int64_t j
    cdef unsigned char utf8[4]
    cdef int nb
    if 3 + 6 * <int64_t>L > max_states:
        raise LimitExceeded("max_states", 3 + 6 * <int64_t>L, max_states)
    cdef _Trie T = _Trie()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (2 + 25 * L))
    if T.e == NULL:
        raise MemoryError(f"json_literal: no memory for a string of {L} characters")
    cdef uint32_t* cps = <uint32_t*>malloc(sizeof(uint32_t) * (L + 1))
    if cps == NULL:
        raise MemoryError(f"json_literal: no memory for a string of {L} characters")
    for ch in value:
        cps[i] = ch
        i += 1
    T.n = 2  # 0 dead, 1 the start
    cur = T.state()
    T.edge(1, 0x22, cur)
    for i in range(L):
        cp = cps[i]
        nxt = T.state()
        if 0xD800 <= cp <= 0xDFFF:
            if cp < 0xDC00 and i + 1 < L and 0xDC00 <= cps[i + 1] <= 0xDFFF:
                free(cps)
                return None
            s = T.state()
            T.edge(cur, 0x5C, s)
            t = T.state()
            T.edge(s, 0x75, t)
            T.hex4(t, cp, nxt)
            cur = nxt
            continue
        if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
            if cp < 0x80:
                utf8[0] = cp
                nb = 1
            elif cp < 0x800:
                utf8[0], utf8[1] = 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)
                nb = 2
            elif cp < 0x10000:
                utf8[0], utf8[1], utf8[2] = 0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)
                nb = 3
            else:
                utf8[0], utf8[1] = 0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F)
                utf8[2], utf8[3] = 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)
                nb = 4
            s = cur
            for b in range(nb):
                t = nxt if b == nb - 1 else T.state()
                T.edge(s, utf8[b], t)
                s = t
        esc = T.state()
        T.edge(cur, 0x5C, esc)
        if cp < 0x60 and _SHORT_LETTER[cp]:
            T.edge(esc, _SHORT_LETTER[cp], nxt)
        s = T.state()
        T.edge(esc, 0x75, s)
        if cp <= 0xFFFF:
            T.hex4(s, cp, nxt)
        else:
            a = cp - 0x10000
            s = T.hex4(s, 0xD800 + (a >> 10), -1)
            t = T.state()
            T.edge(s, 0x5C, t)
            s = T.state()
            T.edge(t, 0x75, s)
            T.hex4(s, 0xDC00 + (a & 0x3FF), nxt)
        cur = nxt
    free(cps)
    end = T.state()
    T.edge(cur, 0x22, end)
    if T.n > max_states:
        raise LimitExceeded("max_states", T.n, max_states)
    acc = np.zeros(T.n, dtype=np.uint8)
    acc[end] = 1
    # minimal as built: no two states have one future (each state is a place in one
    # character of value, and the texts left from two places decode to different
    # rests or start differently), so numbering it canonically is all there is to do
    return _minimal_of_edges(T, acc, True)


cdef _column_array(const int32_t* column):
    """The 256 byte columns as an int32 array (as :func:`byte_classes` takes them)."""
    out = np.empty(256, dtype=np.int32)
    cdef int32_t[::1] v = out
    cdef int b
    for b in range(256):
        v[b] = column[b]
    return out


cdef tuple _minimal_of_edges(_Trie T, acc, bint minimal):
    """``(table, accepting, column)`` of the deterministic edges ``T`` (states 0 dead,
    1 start, every state live) and ``acc`` (uint8, one per state), minimized (or, when
    the caller knows it is ``minimal`` already, only numbered canonically): each byte
    on an edge its own column (in byte order), the other bytes one dead column 0."""
    cdef uint8_t used[256]
    cdef int32_t cls[256]
    cdef int32_t k, b
    cdef int64_t j
    memset(used, 0, sizeof(used))
    for j in range(T.ne):
        used[T.e[3 * j + 1]] = 1
    k = 1
    for b in range(256):
        if used[b]:
            cls[b] = k
            k += 1
        else:
            cls[b] = 0
    small = np.zeros((T.n, k), dtype=np.int32)
    cdef int32_t[:, ::1] sv = small
    for j in range(T.ne):
        sv[T.e[3 * j], cls[T.e[3 * j + 1]]] = T.e[3 * j + 2]
    if minimal:
        mt, macc = renumber(small, acc, 1)
    else:
        mt, macc = minimize(small, acc)
    return mt, macc, _column_array(cls)


def literal_set(list words, int64_t max_states):
    """The minimal DFA of a finite set of byte strings, written down as a trie:
    ``(table, accepting, column)`` as :func:`json_literal` returns them, or None when
    the trie (the dead state included, as :func:`determinize` counts the subset
    construction of the same alternation) has more than ``max_states`` states.

    ``words``: ``bytes``, sorted and without repeats (each word shares its longest
    common prefix with the one before it, so the trie is built in one pass).
    """
    cdef Py_ssize_t i, j, n = len(words), L, lcp, prev_len = 0, total = 0
    cdef int32_t s, t
    cdef const unsigned char* w
    cdef const unsigned char* pw = NULL
    cdef bytes word, prev = None
    for word in words:
        total += len(word)
    cdef _Trie T = _Trie()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (total + 1))
    cdef int32_t* path = <int32_t*>malloc(sizeof(int32_t) * (total + 1))
    if T.e == NULL or path == NULL:
        free(path)
        raise MemoryError(f"literal_set: no memory for {n} words of {total} bytes")
    acc_list = []
    T.n = 2
    path[0] = 1
    for i in range(n):
        word = words[i]
        w = word
        L = len(word)
        lcp = 0
        if pw != NULL:
            while lcp < L and lcp < prev_len and w[lcp] == pw[lcp]:
                lcp += 1
        s = path[lcp]
        for j in range(lcp, L):
            t = T.state()
            T.edge(s, w[j], t)
            path[j + 1] = t
            s = t
        acc_list.append(s)
        prev = word
        pw = prev
        prev_len = L
    free(path)
    if T.n > max_states:
        return None
    acc = np.zeros(T.n, dtype=np.uint8)
    for s in acc_list:
        acc[s] = 1
    return _minimal_of_edges(T, acc, False)


def minus_words(const int32_t[:, ::1] table, const uint8_t[::1] classes, const uint8_t[::1] accepting,
                int32_t start, list words, int64_t max_states):
    """``L(dfa) \\ words``: a DFA in class form (``table`` int32 ``(n, k)``, state 0
    dead; ``classes`` uint8 ``(256,)``; ``accepting`` uint8) less a finite set of byte
    strings (``bytes``, sorted, without repeats), as :func:`product` would build it
    with the words' trie but without that trie's DFA or the joint classes: the trie of
    the words' paths through the DFA (each node a copy of the DFA state it reaches, not
    accepting where a word ends) in front of the DFA itself, trimmed and minimized.
    Returns ``(table, accepting, column)`` as :func:`json_literal` does (each byte of a
    word its own column, the other bytes by their class), or None when the language
    is empty.  More than ``max_states`` reachable states raise :class:`LimitExceeded`.
    """
    cdef int32_t nb = table.shape[0], kb = table.shape[1], k = 0, c, b, q, s, t, x, m
    cdef Py_ssize_t i, j, L, lcp, n_words = len(words), total = 0, prev_depth = 0, prev_len = 0
    cdef const unsigned char* w
    cdef const unsigned char* pw = NULL
    cdef bytes word
    cdef bint dead
    if classes.shape[0] != 256 or accepting.shape[0] != nb or not 0 <= start < nb:
        raise ValueError(f"minus_words: need 256 classes, one flag per state and a start state, got "
                         f"{classes.shape[0]} classes, {accepting.shape[0]} flags for {nb} states, start {start}")
    _check_targets("minus_words", table, nb)
    for b in range(256):
        if classes[b] >= kb:
            raise ValueError(f"minus_words: byte {b} is in class {classes[b]}, the table has {kb}")
    if start == 0:
        return None
    for word in words:
        total += len(word)
    cdef _Trie T = _Trie()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (total + 1))
    cdef int32_t* path = <int32_t*>malloc(sizeof(int32_t) * (total + 1))
    cdef int32_t* bs = <int32_t*>malloc(sizeof(int32_t) * (total + 2))
    cdef uint8_t* ends = <uint8_t*>calloc(total + 2, 1)
    if T.e == NULL or path == NULL or bs == NULL or ends == NULL:
        free(path)
        free(bs)
        free(ends)
        raise MemoryError(f"minus_words: no memory for {n_words} words of {total} bytes")
    # the trie, word by word in sorted order: a word shares its longest common prefix
    # with the one before; a path stops where the DFA dies (no longer word is in L)
    T.n = 2
    path[0] = 1
    bs[1] = start
    for i in range(n_words):
        word = words[i]
        w = word
        L = len(word)
        lcp = 0
        if pw != NULL:  # over the word before's bytes, up to the one where it died
            while lcp < L and lcp < prev_len and lcp <= prev_depth and w[lcp] == pw[lcp]:
                lcp += 1
        pw = w
        prev_len = L
        if lcp > prev_depth:  # through the byte where the word before died: so does this one
            continue
        s = path[lcp]
        q = bs[s]
        dead = False
        j = lcp
        while j < L:
            q = table[q, classes[w[j]]]
            if q == 0:
                dead = True
                break
            t = T.state()
            bs[t] = q
            T.edge(s, w[j], t)
            path[j + 1] = t
            s = t
            j += 1
        if not dead:
            ends[s] = 1
        prev_depth = j
    free(path)
    # columns: each byte on a trie edge its own, the others by their class; numbered
    # in order of the smallest byte (the order minimize numbers in)
    cdef int32_t key_col[512]
    cdef int32_t column[256]
    cdef int32_t rep[256]
    cdef uint8_t used[256]
    memset(used, 0, sizeof(used))
    for j in range(T.ne):
        used[T.e[3 * j + 1]] = 1
    for c in range(512):
        key_col[c] = -1
    for b in range(256):
        c = 256 + b if used[b] else classes[b]
        if key_col[c] < 0:
            key_col[c] = k
            rep[k] = b
            k += 1
        column[b] = key_col[c]
    # states: the DFA's (same ids), then trie node x as nb + x - 1 (the root, x = 1, starts)
    cdef int32_t n = nb + T.n - 1
    cdef int32_t* tab = <int32_t*>malloc(sizeof(int32_t) * <int64_t>n * k)
    cdef uint8_t* acc = <uint8_t*>malloc(n)
    cdef int32_t* new_id = <int32_t*>calloc(n, sizeof(int32_t))
    cdef int32_t* order = <int32_t*>malloc(sizeof(int32_t) * n)
    cdef uint8_t* live = <uint8_t*>calloc(n, 1)
    if tab == NULL or acc == NULL or new_id == NULL or order == NULL or live == NULL:
        free(tab); free(acc); free(new_id); free(order); free(live); free(bs); free(ends)
        raise MemoryError(f"minus_words: no memory for {n} states")
    cdef int32_t reached = 0
    cdef int rc = 0
    with nogil:
        for s in range(nb):
            acc[s] = accepting[s] != 0
            for c in range(k):
                tab[<int64_t>s * k + c] = table[s, classes[rep[c]]]
        for x in range(1, T.n):
            s = nb + x - 1
            q = bs[x]
            acc[s] = accepting[q] != 0 and not ends[x]
            for c in range(k):
                tab[<int64_t>s * k + c] = table[q, classes[rep[c]]]
        for j in range(T.ne):
            tab[<int64_t>(nb + T.e[3 * j] - 1) * k + column[T.e[3 * j + 1]]] = nb + T.e[3 * j + 2] - 1
        # reachable from the start, breadth-first (order[0] is the dead state)
        order[0] = 0
        order[1] = nb
        new_id[nb] = 1
        m = 2
        i = 1
        while i < m:
            s = order[i]
            for c in range(k):
                t = tab[<int64_t>s * k + c]
                if t and not new_id[t]:
                    new_id[t] = m
                    order[m] = t
                    m += 1
            i += 1
        reached = m
        # live: reaches an accepting state
        for s in range(n):
            live[s] = acc[s]
        rc = _mark_live(n, k, tab, live)
    free(bs)
    free(ends)
    if rc < 0:
        free(tab); free(acc); free(new_id); free(order); free(live)
        raise MemoryError(f"minus_words: out of memory trimming {n} states")
    if reached > max_states:
        free(tab); free(acc); free(new_id); free(order); free(live)
        raise LimitExceeded("max_states", reached, max_states)
    if not live[nb]:
        free(tab); free(acc); free(new_id); free(order); free(live)
        return None
    # the reached live states, numbered in their breadth-first order (start 1)
    cdef int32_t* final_id = <int32_t*>calloc(reached, sizeof(int32_t))
    if final_id == NULL:
        free(tab); free(acc); free(new_id); free(order); free(live)
        raise MemoryError(f"minus_words: no memory for {n} states")
    m = 0
    for s in range(n):
        if new_id[s] and live[s]:
            final_id[new_id[s]] = 1  # mark, numbered below in breadth-first order
    for i in range(1, reached):
        if final_id[i]:
            m += 1
            final_id[i] = m
    small = np.zeros((m + 1, k), dtype=np.int32)
    small_acc = np.zeros(m + 1, dtype=np.uint8)
    cdef int32_t[:, ::1] sv = small
    cdef uint8_t[::1] sav = small_acc
    for s in range(n):
        if new_id[s] and live[s]:
            x = final_id[new_id[s]]
            sav[x] = acc[s]
            for c in range(k):
                t = tab[<int64_t>s * k + c]
                sv[x, c] = final_id[new_id[t]] if t and live[t] else 0
    free(tab); free(acc); free(new_id); free(order); free(live); free(final_id)
    mt, macc = minimize(small, small_acc)
    return mt, macc, _column_array(column)


# ------------------------------------------------------------- byte classes ----


cdef bint _same_column(const int32_t[:, ::1] table, int32_t a, int32_t b) noexcept nogil:
    cdef int32_t s
    for s in range(table.shape[0]):
        if table[s, a] != table[s, b]:
            return False
    return True


def byte_classes(const int32_t[:, ::1] table, const int32_t[::1] column):
    """The canonical byte classes of a DFA given over columns: byte ``b`` moves by
    ``table[:, column[b]]`` (``table`` int32 ``(n, k)``, ``k <= 256``; ``column`` int32
    ``(256,)``).  Returns ``(classes, out)``: ``classes`` uint8 ``(256,)`` and ``out``
    int32 ``(n, m)`` with ``out[:, classes[b]] == table[:, column[b]]``, where two bytes
    share a class exactly when their columns are equal, and the classes are numbered in
    order of their smallest byte (class 0 holds byte 0).  Columns are compared by a hash
    first, then entry by entry; one pass over the table, row by row."""
    cdef int32_t n = table.shape[0], k = table.shape[1], b, c, j, s, m = 0
    cdef uint64_t h[256]
    cdef int32_t col_class[256]
    cdef int32_t rep[256]
    if column.shape[0] != 256:
        raise ValueError(f"byte_classes: column must have 256 entries, got {column.shape[0]}")
    if k < 1 or k > 256:
        raise ValueError(f"byte_classes: need 1 to 256 columns, got {k}")
    for b in range(256):
        if column[b] < 0 or column[b] >= k:
            raise ValueError(f"byte_classes: byte {b} maps to column {column[b]}, outside [0, {k})")
    classes = np.empty(256, dtype=np.uint8)
    cdef uint8_t[::1] cv = classes
    with nogil:
        for c in range(k):
            h[c] = 0x9E3779B97F4A7C15ULL
            col_class[c] = -1
        for s in range(n):
            for c in range(k):
                h[c] = (h[c] ^ <uint32_t>table[s, c]) * 0x100000001B3ULL
        for b in range(256):
            c = column[b]
            if col_class[c] < 0:
                for j in range(m):
                    if h[rep[j]] == h[c] and _same_column(table, rep[j], c):
                        col_class[c] = j
                        break
                if col_class[c] < 0:
                    rep[m] = c
                    col_class[c] = m
                    m += 1
            cv[b] = <uint8_t>col_class[c]
    out = np.empty((n, m), dtype=np.int32)
    cdef int32_t[:, ::1] ov = out
    with nogil:
        for s in range(n):
            for j in range(m):
                ov[s, j] = table[s, rep[j]]
    return classes, out


def renumber(const int32_t[:, ::1] table, const uint8_t[::1] accepting, int32_t start):
    """The states of a DFA reachable from ``start``, numbered canonically: dead 0, start
    1, then breadth-first with successors in column order (the order :func:`minimize`
    numbers in, when the columns are in order of their smallest byte).  ``table`` int32
    ``(n, k)``, state 0 dead, ``start`` live; returns ``(table, accepting)``.  Applied to
    a minimal DFA this gives :func:`minimize`'s arrays without the refinement."""
    cdef int32_t n = table.shape[0], k = table.shape[1], m = 2, i = 1, c, s, t
    if accepting.shape[0] != n or not 0 < start < n:
        raise ValueError(f"renumber: need one flag per state and a live start, got {n} states, "
                         f"{accepting.shape[0]} flags, start {start}")
    _check_targets("renumber", table, n)
    cdef int32_t* new_id = <int32_t*>calloc(n, sizeof(int32_t))
    cdef int32_t* order = <int32_t*>malloc(n * sizeof(int32_t))
    if new_id == NULL or order == NULL:
        free(new_id)
        free(order)
        raise MemoryError(f"renumber: no memory for a DFA of {n} states")
    with nogil:
        order[0] = 0
        order[1] = start
        new_id[start] = 1
        while i < m:
            s = order[i]
            for c in range(k):
                t = table[s, c]
                if t and not new_id[t]:
                    new_id[t] = m
                    order[m] = t
                    m += 1
            i += 1
    out = np.zeros((m, k), dtype=np.int32)
    out_acc = np.zeros(m, dtype=bool)
    cdef int32_t[:, ::1] ov = out
    cdef uint8_t[::1] av = out_acc.view(np.uint8)
    with nogil:
        for i in range(1, m):
            s = order[i]
            av[i] = accepting[s] != 0
            for c in range(k):
                ov[i, c] = new_id[table[s, c]]
    free(new_id)
    free(order)
    return out, out_acc
