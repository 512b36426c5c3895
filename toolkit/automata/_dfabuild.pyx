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

:func:`string_copies` writes a bounded JSON string's DFA (one copy of a character's DFA per
character read: 1.31M states for ``maxLength: 65535``) already minimal and canonically
numbered, in one breadth-first pass over copies it never lays out.

:func:`horizon_classes` (``horizon_reps`` for the strategies' C code) is Moore's
refinement stopped after a number of rounds: the states no word of that many bytes
tells apart, which read every token of the vocabulary alike (a ``maxLength`` string's
positions away from its ends), so that the mask caches and tables of ``xgrammar`` and
``glr`` keep one entry for all of them.  A round re-examines only the predecessors of
the states the last round moved, and the largest part of a split block keeps its
name, so a long counter costs its ends per round, not its length.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport (
    BYTES,
    ERR_MAX_STATES,
    ERR_MEMORY,
    ERR_NONE,
    grow,
    hash_ints,
    hash_mix,
    i64map_clear,
    i64map_free,
    i64map_get,
    i64map_init,
    i64map_intern,
    i64map_put,
    I64Map,
    pair_key,
    sort_ints,
)
from toolkit.core.ids cimport DEAD, MISSING, state_t
from toolkit.core.intsets cimport (
    IntSets,
    intsets_add,
    intsets_find,
    intsets_free,
    intsets_init,
)

from toolkit.core.errors import error_of

cnp.import_array()

__all__ = ["byte_classes", "determinize", "horizon_classes", "json_literal", "literal_set", "minimize", "minus_words", "product",
           "renumber", "string_copies"]

cdef enum:
    _SMALL_UNION = 8   # up to this many targets: union of their closures; more: one search

# An edge as one sortable key: class range [a, b) (a, b <= BYTES: 9 bits each) and the
# absolute target NFA state (31 bits).
cdef inline int64_t _edge_key(int64_t a, int64_t b, int64_t t) noexcept nogil:
    return (a << 40) | (b << 31) | t

cdef inline int32_t _key_a(int64_t key) noexcept nogil:
    return <int32_t>(key >> 40)

cdef inline int32_t _key_b(int64_t key) noexcept nogil:
    return <int32_t>((key >> 31) & 0x1FF)

cdef inline state_t _key_t(int64_t key) noexcept nogil:
    return <state_t>(key & 0x7FFFFFFF)


cdef int32_t _sort_unique_i32(int32_t* xs, int32_t n) noexcept nogil:
    """Sort xs[0..n) and drop repeats; returns the new length."""
    cdef int32_t i, j
    if n < 2:
        return n
    sort_ints(xs, n)
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


cdef _raise(int code, int64_t value, int64_t limit, str where):
    """Raise the exception of a C function's error code (toolkit.core.errors.error_of):
    LimitExceeded("max_states") for ERR_MAX_STATES, MemoryError for ERR_MEMORY."""
    raise error_of(code, value, limit, where)


# ------------------------------------------------------------ determinizing ----


cdef class _Subsets:
    """The state of one subset construction (fields in _dfabuild.pxd)."""

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
        """Keep the first failure (its code and the size it was met at); returns code."""
        if self.err == ERR_NONE:
            self.err = code
            self.err_value = value
        return code

    cdef int32_t _search(self, const state_t* starts, int32_t n) noexcept nogil:
        """The kernel states epsilon-reachable from starts[0..n), sorted into buf; their count."""
        cdef int32_t top = 0, nout = 0, i
        cdef state_t s, u
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

    cdef int _closure(self, state_t q) noexcept nogil:
        """Memoize the closure of NFA state q (clo_off[q], clo_len[q]); ERR_MEMORY when out of memory."""
        cdef int32_t n
        if self.clo_off[q] != MISSING:
            return 0
        if self.eps_off[q] == self.eps_off[q + 1]:
            n = 1 if self.kernel[q] else 0
            self.buf[0] = q
        else:
            n = self._search(&q, 1)
        if grow(<void**>&self.clo_pool, &self.clo_cap, self.clo_len_total + n, sizeof(state_t)) < 0:
            return self._fail(ERR_MEMORY, self.clo_len_total + n)
        memcpy(self.clo_pool + self.clo_len_total, self.buf, n * sizeof(state_t))
        self.clo_off[q] = self.clo_len_total
        self.clo_len[q] = n
        self.clo_len_total += n
        return 0

    cdef state_t _state_of(self, const state_t* xs, int32_t n) noexcept nogil:
        """The DFA state of kernel set xs[0..n) (sorted), made when new; an error code
        (< 0) past max_states or out of memory."""
        cdef uint64_t hv = hash_ints(xs, n)
        cdef state_t j = intsets_find(&self.sets, xs, n, hv)
        if j >= 0:
            return j
        j = self.sets.n
        if j >= self.max_states:
            return self._fail(ERR_MAX_STATES, j + 1)
        if (grow(<void**>&self.table, &self.table_cap, j + 1, self.k * sizeof(state_t)) < 0
                or grow(<void**>&self.acc, &self.acc_cap, j + 1, sizeof(uint8_t)) < 0
                or intsets_add(&self.sets, xs, n, hv) < 0):
            return self._fail(ERR_MEMORY, j + 1)
        memset(self.table + <int64_t>j * self.k, 0, self.k * sizeof(state_t))
        self.acc[j] = _contains(xs, n, self.final)
        return j

    cdef state_t _single_state(self, state_t t) noexcept nogil:
        """The DFA state of the closure of NFA state t (memoized); < 0 on error."""
        cdef state_t j = self.single[t]
        cdef int rc
        if j == MISSING:
            rc = self._closure(t)
            if rc < 0:
                return rc
            j = self._state_of(self.clo_pool + self.clo_off[t], self.clo_len[t])
            if j < 0:
                return j
            self.single[t] = j
        return j

    cdef state_t _multi_state(self, const state_t* ts, int32_t n) noexcept nogil:
        """The DFA state of the closure of the edge targets ts[0..n) (sorted, n > 1); < 0 on error."""
        cdef uint64_t hv = hash_ints(ts, n)
        cdef int32_t id_ = intsets_find(&self.multi, ts, n, hv)
        cdef int32_t i, m = 0
        cdef state_t t, j
        cdef int64_t total = 0
        cdef int rc
        if id_ >= 0:
            return self.multi_val[id_]
        if n <= _SMALL_UNION:
            for i in range(n):
                rc = self._closure(ts[i])
                if rc < 0:
                    return rc
                total += self.clo_len[ts[i]]
            if grow(<void**>&self.ubuf, &self.ubuf_cap, total, sizeof(state_t)) < 0:
                return self._fail(ERR_MEMORY, total)
            for i in range(n):
                t = ts[i]
                memcpy(self.ubuf + m, self.clo_pool + self.clo_off[t], self.clo_len[t] * sizeof(state_t))
                m += self.clo_len[t]
            m = _sort_unique_i32(self.ubuf, m)
            j = self._state_of(self.ubuf, m)
        else:  # one search: the closures of many targets tend to overlap
            m = self._search(ts, n)
            j = self._state_of(self.buf, m)
        if j < 0:
            return j
        id_ = intsets_add(&self.multi, ts, n, hv)
        if id_ < 0:
            return self._fail(ERR_MEMORY, n)
        if grow(<void**>&self.multi_val, &self.multi_cap, id_ + 1, sizeof(state_t)) < 0:
            return self._fail(ERR_MEMORY, id_ + 1)
        self.multi_val[id_] = j
        return j

    cdef void _fill(self, state_t i, int32_t a, int32_t b, state_t j) noexcept nogil:
        """Classes a .. b-1 of state i's row go to state j."""
        cdef state_t* row = self.table + <int64_t>i * self.k
        cdef int32_t c
        for c in range(a, b):
            row[c] = j

    cdef int64_t _gather_edges(self, state_t i) noexcept nogil:
        """The edge keys out of DFA state i's kernel states, sorted into out; their
        count, or ERR_MEMORY.  (Copied out: interning a new state may move the pool
        that holds i's members.)"""
        cdef const state_t* members = self.sets.pool + self.sets.off[i]
        cdef int32_t m = self.sets.len[i], x
        cdef state_t q
        cdef int64_t nout = 0, e
        for x in range(m):
            q = members[x]
            nout += self.ed_off[q + 1] - self.ed_off[q]
        if grow(<void**>&self.out, &self.out_cap, nout, sizeof(int64_t)) < 0:
            return self._fail(ERR_MEMORY, nout)
        nout = 0
        for x in range(m):
            q = members[x]
            for e in range(self.ed_off[q], self.ed_off[q + 1]):
                self.out[nout] = self.ed_key[e]
                nout += 1
        sort_ints(self.out, nout)
        return nout

    cdef int _fill_disjoint(self, state_t i, int64_t nout) noexcept nogil:
        """State i's row when its edges out[0..nout) have disjoint class ranges (the usual
        case): each range goes to its one target's closure.  0, or an error code."""
        cdef int64_t r
        cdef state_t j
        for r in range(nout):
            j = self._single_state(_key_t(self.out[r]))
            if j < 0:
                return j
            if j != DEAD:
                self._fill(i, _key_a(self.out[r]), _key_b(self.out[r]), j)
        return 0

    cdef int _fill_overlapping(self, state_t i, int64_t nout) noexcept nogil:
        """State i's row when ranges of its edges out[0..nout) overlap: each segment
        between range ends goes to the closure of the targets of the ranges that hold
        it.  0, or an error code."""
        cdef int32_t a, b, npts, seg, ntg
        cdef int64_t r
        cdef state_t j
        if (grow(<void**>&self.pts, &self.pts_cap, 2 * nout, sizeof(int32_t)) < 0
                or grow(<void**>&self.tg, &self.tg_cap, nout, sizeof(state_t)) < 0):
            return self._fail(ERR_MEMORY, 2 * nout)
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
                return j
            if j != DEAD:
                self._fill(i, a, b, j)
        return 0

    cdef int _run(self, state_t start) noexcept nogil:
        """The whole construction from NFA state start, breadth-first; 0, or an error code."""
        cdef state_t i = 1
        cdef int32_t prev
        cdef int64_t nout, r
        cdef int rc
        cdef bint disjoint
        rc = self._state_of(NULL, 0)  # the dead state: the empty set
        if rc >= 0:
            rc = self._closure(start)
        if rc >= 0:
            rc = self._state_of(self.clo_pool + self.clo_off[start], self.clo_len[start])
        while rc >= 0 and i < self.sets.n:
            nout = self._gather_edges(i)
            if nout < 0:
                return <int>nout
            disjoint = True
            prev = 0
            for r in range(nout):
                if _key_a(self.out[r]) < prev:
                    disjoint = False
                    break
                prev = _key_b(self.out[r])
            rc = self._fill_disjoint(i, nout) if disjoint else self._fill_overlapping(i, nout)
            i += 1
        return rc if rc < 0 else 0

    cdef int _load(self, list eps, list edges, const int32_t* cls) except -1:
        """The NFA's moves in CSR form (bytes mapped to classes by cls; the edges were
        checked by _class_cuts, the epsilon moves are here), and the construction's arrays."""
        cdef int32_t n = self.n_nfa
        cdef state_t s
        cdef int32_t lo, hi, d
        cdef int64_t n_eps = 0, n_ed = 0
        for s in range(n):
            n_eps += len(<object>eps[s])
            n_ed += len(<object>edges[s])
        self.eps_off = <int64_t*>malloc((n + 1) * sizeof(int64_t))
        self.eps_to = <state_t*>malloc((n_eps + 1) * sizeof(state_t))
        self.ed_off = <int64_t*>malloc((n + 1) * sizeof(int64_t))
        self.ed_key = <int64_t*>malloc((n_ed + 1) * sizeof(int64_t))
        self.kernel = <uint8_t*>malloc(n * sizeof(uint8_t))
        self.clo_off = <int64_t*>malloc(n * sizeof(int64_t))
        self.clo_len = <int32_t*>malloc(n * sizeof(int32_t))
        self.seen = <int32_t*>calloc(n, sizeof(int32_t))
        self.stack = <state_t*>malloc(n * sizeof(state_t))
        self.buf = <state_t*>malloc(n * sizeof(state_t))
        self.single = <state_t*>malloc(n * sizeof(state_t))
        if (self.eps_off == NULL or self.eps_to == NULL or self.ed_off == NULL or self.ed_key == NULL
                or self.kernel == NULL or self.clo_off == NULL or self.clo_len == NULL or self.seen == NULL
                or self.stack == NULL or self.buf == NULL or self.single == NULL
                or intsets_init(&self.sets) < 0 or intsets_init(&self.multi) < 0):
            raise MemoryError(f"determinize: no memory for an NFA of {n} states")
        n_eps = n_ed = 0
        for s in range(n):
            self.eps_off[s] = n_eps
            for d in <object>eps[s]:
                if not 0 <= s + d < n:
                    raise ValueError(f"determinize: NFA state {s} has an epsilon move to {s + d}, outside the {n} states")
                self.eps_to[n_eps] = s + d
                n_eps += 1
            self.ed_off[s] = n_ed
            es = edges[s]
            self.kernel[s] = len(es) > 0 or s == self.final
            for lo, hi, d in es:
                self.ed_key[n_ed] = _edge_key(cls[lo], cls[hi + 1], s + d)
                n_ed += 1
            self.clo_off[s] = MISSING
            self.single[s] = MISSING
        self.eps_off[n] = n_eps
        self.ed_off[n] = n_ed
        return 0


cdef list _class_cuts(list edges, int32_t n, int32_t* cls):
    """The byte classes of the NFA's edges (``edges[s]``: ``(lo, hi, delta)``, checked
    here): the bytes where a class starts, and BYTES; ``cls[cut]`` is the class starting
    at each cut (``cls[BYTES]`` the number of classes)."""
    cdef uint8_t is_cut[BYTES + 1]
    cdef int32_t s, c, lo, hi, d
    memset(is_cut, 0, sizeof(is_cut))
    is_cut[0] = is_cut[BYTES] = 1
    for s in range(n):
        for lo, hi, d in edges[s]:
            if not (0 <= lo <= hi < BYTES and 0 <= s + d < n):
                raise ValueError(f"determinize: NFA state {s} has the edge {(lo, hi, d)}: bytes must be "
                                 f"0 <= lo <= hi <= 255 and the target inside the {n} states")
            is_cut[lo] = 1
            is_cut[hi + 1] = 1
    cuts = [c for c in range(BYTES + 1) if is_cut[c]]
    for c in range(len(cuts)):
        cls[cuts[c]] = c
    return cuts


def determinize(list eps, list edges, state_t start, state_t final, int64_t max_states):
    """Subset construction of the NFA of :class:`toolkit.automata.nfa._NFA` (``eps[s]``: deltas
    of epsilon moves; ``edges[s]``: ``(lo, hi, delta)`` inclusive byte ranges) from
    ``start`` with ``final`` accepting.  Returns ``(table, accepting, cuts)``: ``table``
    int32 ``(n, k)`` over the ``k`` byte classes (class ``c`` is bytes ``cuts[c]`` to
    ``cuts[c+1]-1``), state 0 dead and 1 the start, ``accepting`` bool ``(n,)``.
    Raises :class:`LimitExceeded` (``max_states``) past ``max_states`` states."""
    cdef int32_t n = len(eps)
    cdef int32_t cls[BYTES + 1]
    cdef _Subsets S = _Subsets()
    cdef int rc
    if n != len(edges) or not (0 <= start < n and 0 <= final < n):
        raise ValueError("determinize: eps and edges must have one entry per NFA state, start and final in range")
    cuts = _class_cuts(edges, n, cls)
    S.n_nfa, S.k, S.final, S.max_states = n, len(cuts) - 1, final, max_states
    S._load(eps, edges, cls)
    with nogil:
        rc = S._run(start)
    if rc < 0:
        _raise(rc, S.err_value, max_states, "determinize")
    cdef state_t states = S.sets.n
    table = np.empty((states, S.k), dtype=np.int32)
    accepting = np.empty(states, dtype=bool)
    memcpy(cnp.PyArray_DATA(table), S.table, <size_t>states * S.k * sizeof(state_t))
    memcpy(cnp.PyArray_DATA(accepting), S.acc, <size_t>states)
    return table, accepting, cuts


# -------------------------------------------------------------- minimizing ----


cdef class _Refiner:
    """Hopcroft's refinement of one DFA (fields in _dfabuild.pxd)."""

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
        i64map_free(&self.groups)
        free(self.gnext)
        free(self.gidx)
        free(self.grep)
        free(self.gsize)
        free(self.gstart)
        free(self.gfill)

    cdef bint _alloc(self, int32_t n) noexcept nogil:
        cdef size_t i4 = sizeof(int32_t), i8 = sizeof(int64_t)
        self.inv_off = <int64_t*>calloc(n + 1, i8)
        self.elems = <state_t*>malloc(n * i4)
        self.pos = <int32_t*>malloc(n * i4)
        self.blk = <int32_t*>malloc(n * i4)
        self.first = <int32_t*>malloc(n * i4)
        self.end = <int32_t*>malloc(n * i4)
        self.in_work = <uint8_t*>calloc(n, 1)
        self.work = <int32_t*>malloc(n * i4)
        self.sig = <uint64_t*>malloc(<size_t>n * self.w * sizeof(uint64_t))
        self.sstamp = <int64_t*>calloc(n, i8)
        self.touched = <state_t*>malloc(n * i4)
        self.bstamp = <int64_t*>calloc(n, i8)
        self.bcnt = <int32_t*>malloc(n * i4)
        self.boff = <int32_t*>malloc(n * i4)
        self.bcur = <int32_t*>malloc(n * i4)
        self.tblocks = <int32_t*>malloc(n * i4)
        self.order = <state_t*>malloc(n * i4)
        self.gnext = <int32_t*>malloc(n * i4)
        self.gidx = <int32_t*>malloc(n * i4)
        self.grep = <state_t*>malloc(n * i4)
        self.gsize = <int32_t*>malloc(n * i4)
        self.gstart = <int32_t*>malloc(n * i4)
        self.gfill = <int32_t*>malloc(n * i4)
        # room for n groups, so that no split ever grows the map (_group cannot fail)
        if i64map_init(&self.groups, 2 * <int64_t>n) < 0:
            return False
        return not (self.inv_off == NULL or self.elems == NULL or self.pos == NULL or self.blk == NULL
                    or self.first == NULL or self.end == NULL or self.in_work == NULL or self.work == NULL
                    or self.sig == NULL or self.sstamp == NULL or self.touched == NULL or self.bstamp == NULL
                    or self.bcnt == NULL or self.boff == NULL or self.bcur == NULL or self.tblocks == NULL
                    or self.order == NULL or self.gnext == NULL or self.gidx == NULL or self.grep == NULL
                    or self.gsize == NULL or self.gstart == NULL or self.gfill == NULL)

    cdef bint _inverse(self) noexcept nogil:
        """Runs of equal targets per source row, grouped by target (CSR); False: no memory."""
        cdef int32_t c, d, k = self.k
        cdef state_t s, t
        cdef const state_t* row
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
                    if t != DEAD and fill:
                        x = self.inv_off[t]
                        self.inv_off[t] += 1
                        self.inv_src[x] = s
                        self.inv_lo[x] = c
                        self.inv_hi[x] = d
                    elif t != DEAD:
                        self.inv_off[t + 1] += 1
                        m += 1
                    c = d
            if not fill:
                for s in range(self.n):
                    self.inv_off[s + 1] += self.inv_off[s]
                self.inv_src = <state_t*>malloc((m + 1) * sizeof(state_t))
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

    cdef inline bint _same_sig(self, state_t s, state_t u) noexcept nogil:
        cdef int32_t i
        for i in range(self.w):
            if self.sig[<int64_t>s * self.w + i] != self.sig[<int64_t>u * self.w + i]:
                return False
        return True

    cdef inline uint64_t _sig_hash(self, state_t s) noexcept nogil:
        """FNV-1a over state s's signature words."""
        cdef uint64_t hv = <uint64_t>0xcbf29ce484222325
        cdef int32_t g
        for g in range(self.w):
            hv = hash_mix(hv, self.sig[<int64_t>s * self.w + g])
        return hv

    cdef int32_t _group(self, const state_t* S, int32_t cnt) noexcept nogil:
        """Group the states S[0..cnt) by signature: gidx[i] is S[i]'s group, numbered in
        order of first appearance, grep and gsize each group's first member and size;
        returns the number of groups.  The map finds the groups by signature hash, each
        group links to the one made before with the same hash (gnext), and a chain is
        searched for an equal signature, so a 64-bit collision still splits right."""
        cdef int32_t i, g, head, ng = 0
        cdef int64_t key
        cdef state_t s
        i64map_clear(&self.groups)
        for i in range(cnt):
            s = S[i]
            key = <int64_t>self._sig_hash(s)
            head = i64map_intern(&self.groups, key, ng)  # ng: a hash not seen (never grows)
            g = -1
            if head != ng:  # the hash seen before: its group, unless only the hashes are equal
                g = head
                while g >= 0 and not self._same_sig(self.grep[g], s):
                    g = self.gnext[g]
                if g < 0:
                    i64map_put(&self.groups, key, ng)
            if g < 0:  # a new signature: a new group, chained to those of the same hash
                g = ng
                self.gnext[g] = head if head != ng else -1
                self.grep[g] = s
                self.gsize[g] = 0
                ng += 1
            self.gidx[i] = g
            self.gsize[g] += 1
        return ng

    cdef void _split(self, int32_t x, const state_t* S, int32_t cnt) noexcept nogil:
        """Split block x by the signatures of its members S[0..cnt) (the others have none)."""
        cdef int32_t i, g, ng, q, p, size = self.end[x] - self.first[x], start = self.first[x]
        cdef int32_t g0, nb0, largest, largest_id, nbid, acc_
        cdef state_t s, u
        cdef bint was
        ng = self._group(S, cnt)
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
        """Split blocks by the splitters on the work list until it is empty."""
        cdef int32_t b, i, nt, ntb, x, off
        cdef state_t s, t
        cdef int64_t e, rnd = 0, base
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
                self._split(x, self.order + self.boff[x], self.bcnt[x])


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
    cdef int32_t n = table.shape[0], k = table.shape[1], want, nel = 0, f, i, c, bt, m
    cdef state_t s, t, rep
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
                if t != DEAD:
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
                sv[i + 1, c] = new_id[R.blk[t]] if t != DEAD else DEAD
    return small, out_acc


# ------------------------------------------------------------ horizon classes ----

cdef inline uint64_t _succ_hash(const state_t* T, int32_t k, const int32_t* lab, state_t s) noexcept nogil:
    cdef uint64_t h = <uint64_t>0xcbf29ce484222325
    cdef int32_t c
    for c in range(k):
        h = hash_mix(h, <uint32_t>lab[T[<int64_t>s * k + c]])
    return h * <uint64_t>0x9e3779b97f4a7c15


cdef inline bint _succ_same(const state_t* T, int32_t k, const int32_t* lab, state_t s, state_t u) noexcept nogil:
    cdef int32_t c
    for c in range(k):
        if lab[T[<int64_t>s * k + c]] != lab[T[<int64_t>u * k + c]]:
            return False
    return True


cdef int horizon_reps(const state_t* T, int32_t n, int32_t k, const uint8_t* acc, int32_t rounds,
                      state_t* rep) noexcept nogil:
    """Moore's refinement of a DFA stopped after ``rounds`` rounds: ``rep[s]`` is the
    smallest state ``u`` that no word of at most ``rounds`` bytes tells from ``s`` (after
    every prefix of it both are dead, or both live and accepting alike).  ``T`` is the
    table (``n`` rows of ``k`` classes, state ``DEAD`` its own class), ``acc`` the
    accepting flags.  0, or -1 when memory ran out (``rep`` then unset).

    A round re-examines only the predecessors of the states whose class the last round
    changed, so a long counter (a string of ``maxLength`` 32,767: its positions differ
    only near the ends) costs its two ends per round, not its length.  Within a round
    every signature reads the classes of the round before (the new ones are written
    when the round ends), so after ``r`` rounds the classes are exactly r-equivalence."""
    cdef size_t i4 = sizeof(int32_t)
    cdef int32_t* lab = <int32_t*>malloc(max(1, n) * i4)       # each state's block
    cdef int32_t* elems = <int32_t*>malloc(max(1, n) * i4)     # states grouped by block
    cdef int32_t* pos = <int32_t*>malloc(max(1, n) * i4)       # each state's place in elems
    cdef int32_t* first = <int32_t*>malloc(max(1, n) * i4)     # block b is elems[first[b] .. end[b])
    cdef int32_t* end = <int32_t*>malloc(max(1, n) * i4)
    cdef int32_t* marked = <int32_t*>malloc(max(1, n) * i4)    # a block's states re-examined this round
    cdef int32_t* bstamp = <int32_t*>calloc(max(1, n), i4)     # the round that last touched a block
    cdef int32_t* cstamp = <int32_t*>calloc(max(1, n), i4)     # the round that last took a state
    cdef int32_t* tblocks = <int32_t*>malloc(max(1, n) * i4)   # the blocks touched this round
    cdef int32_t* chg = <int32_t*>malloc(max(1, n) * i4)       # the states a round moved (and their new block)
    cdef int32_t* chg_to = <int32_t*>malloc(max(1, n) * i4)
    cdef int64_t* pred_off = <int64_t*>calloc(n + 1, sizeof(int64_t))
    cdef int32_t* last = <int32_t*>malloc(max(1, n) * i4)
    cdef int32_t* pred = NULL
    cdef int32_t* gid = <int32_t*>malloc(max(1, n) * i4)       # one split: each state's group
    cdef int32_t* grep = <int32_t*>malloc(max(1, n) * i4)      # a group's first state
    cdef int32_t* gsize = <int32_t*>calloc(max(1, n), i4)
    cdef int32_t* gat = <int32_t*>malloc(max(1, n) * i4)       # where a group's states go
    cdef int32_t* tmp = <int32_t*>malloc(max(1, n) * i4)
    cdef int32_t* ht = NULL                                    # signature hash -> group (open addressing)
    cdef int64_t hmask = 1, e, m_edges = 0, h
    cdef int32_t nb = 0, n_chg = 0, nt, r, i, j, b, c, B, m, size, ng, keep, lo, at, g, mu, nu
    cdef state_t s, t, u
    cdef int ok = -1
    while hmask < 2 * <int64_t>max(1, n):
        hmask <<= 1
    ht = <int32_t*>malloc(hmask * i4)
    hmask -= 1
    while True:  # (once: a break leaves with the memory freed below)
        if (lab == NULL or elems == NULL or pos == NULL or first == NULL or end == NULL or marked == NULL
                or bstamp == NULL or cstamp == NULL or tblocks == NULL or chg == NULL or chg_to == NULL
                or pred_off == NULL or last == NULL or gid == NULL or grep == NULL or gsize == NULL or gat == NULL
                or tmp == NULL or ht == NULL):
            break
        memset(ht, 0xff, (hmask + 1) * i4)
        # the predecessors of each live state (each source once): counted, then placed
        for b in range(2):
            if b == 1:
                for s in range(n):
                    pred_off[s + 1] += pred_off[s]
                m_edges = pred_off[n]
                pred = <int32_t*>malloc(max(1, m_edges) * i4)
                if pred == NULL:
                    break
            for s in range(n):
                last[s] = -1
            for s in range(n):
                for c in range(k):
                    t = T[<int64_t>s * k + c]
                    if t != DEAD and last[t] != s:
                        last[t] = s
                        if b == 0:
                            pred_off[t + 1] += 1
                        else:
                            pred[pred_off[t]] = s
                            pred_off[t] += 1
        if pred == NULL:
            break
        for s in range(n - 1, -1, -1):
            pred_off[s + 1] = pred_off[s]
        pred_off[0] = 0
        # round 0: dead, live and not accepting, live and accepting
        at = 0
        for b in range(3):
            lo = at
            for s in range(n):
                if (0 if s == DEAD else 1 + (acc[s] != 0)) == b:
                    elems[at] = s
                    pos[s] = at
                    lab[s] = nb
                    at += 1
            if at > lo:
                first[nb] = lo
                end[nb] = at
                nb += 1
        # every live state is changed by round 0
        for s in range(n):
            if s != DEAD:
                chg[n_chg] = s
                n_chg += 1
        for r in range(1, rounds + 1):
            if n_chg == 0:
                break
            # the states whose successors changed, moved to the end of their block
            nt = 0
            for i in range(n_chg):
                for e in range(pred_off[chg[i]], pred_off[chg[i] + 1]):
                    s = pred[e]
                    if cstamp[s] == r:
                        continue
                    cstamp[s] = r
                    B = lab[s]
                    if end[B] - first[B] == 1:
                        continue  # (one state: nothing to split)
                    if bstamp[B] != r:
                        bstamp[B] = r
                        marked[B] = 0
                        tblocks[nt] = B
                        nt += 1
                    j = end[B] - 1 - marked[B]
                    u = elems[j]
                    elems[pos[s]] = u
                    pos[u] = pos[s]
                    elems[j] = s
                    pos[s] = j
                    marked[B] += 1
            n_chg = 0
            for i in range(nt):
                B = tblocks[i]
                m = marked[B]
                size = end[B] - first[B]
                lo = end[B] - m
                # group the marked states by their successors' blocks
                ng = 0
                for j in range(lo, end[B]):
                    s = elems[j]
                    h = <int64_t>(_succ_hash(T, k, lab, s) >> 1) & hmask
                    while ht[h] >= 0 and not _succ_same(T, k, lab, s, grep[ht[h]]):
                        h = (h + 1) & hmask
                    if ht[h] < 0:
                        ht[h] = ng
                        grep[ng] = s
                        gsize[ng] = 0
                        gat[ng] = <int32_t>h  # (its slot, cleared below)
                        ng += 1
                    g = ht[h]
                    gid[j - lo] = g
                    gsize[g] += 1
                # the part of the unmarked states: they and the group equal to them (mu)
                mu = -1
                if m < size:
                    u = elems[first[B]]
                    h = <int64_t>(_succ_hash(T, k, lab, u) >> 1) & hmask
                    while ht[h] >= 0:
                        if _succ_same(T, k, lab, u, grep[ht[h]]):
                            mu = ht[h]
                            break
                        h = (h + 1) & hmask
                for g in range(ng):  # (the table cleared: it holds the groups)
                    ht[gat[g]] = -1
                nu = size - m + (gsize[mu] if mu >= 0 else 0)
                if nu == size or (ng == 1 and m == size):
                    continue  # (nothing split)
                # the largest part keeps the block, the others are new blocks: the states
                # that move are the next round's work (few, as in Hopcroft's algorithm).
                # Laid out: the unmarked part, then the groups; grep (no longer needed)
                # takes each group's block
                keep = -2  # (-1: the unmarked part keeps it)
                if nu > 0:
                    keep = -1
                for g in range(ng):
                    if g != mu and (keep == -2 or gsize[g] > (nu if keep == -1 else gsize[keep])):
                        keep = g
                at = lo
                if mu >= 0:
                    gat[mu] = at
                    at += gsize[mu]
                if nu > 0:
                    if keep == -1:
                        end[B] = at
                        if mu >= 0:
                            grep[mu] = B
                    else:
                        first[nb] = first[B]
                        end[nb] = at
                        if mu >= 0:
                            grep[mu] = nb
                        for j in range(first[B], lo):
                            chg[n_chg] = elems[j]
                            chg_to[n_chg] = nb
                            n_chg += 1
                        nb += 1
                for g in range(ng):
                    if g != mu:
                        gat[g] = at
                        if g == keep:
                            grep[g] = B
                            first[B] = at
                            end[B] = at + gsize[g]
                        else:
                            grep[g] = nb
                            first[nb] = at
                            end[nb] = at + gsize[g]
                            nb += 1
                        at += gsize[g]
                for j in range(lo, lo + m):
                    tmp[j - lo] = elems[j]
                for j in range(m):
                    s = tmp[j]
                    g = gid[j]
                    elems[gat[g]] = s
                    pos[s] = gat[g]
                    gat[g] += 1
                    if grep[g] != B:
                        chg[n_chg] = s
                        chg_to[n_chg] = grep[g]
                        n_chg += 1
            for i in range(n_chg):  # (the new classes, once every signature of the round is read)
                lab[chg[i]] = chg_to[i]
        # each class's smallest state
        for b in range(nb):
            gat[b] = -1
        for s in range(n):
            if gat[lab[s]] < 0:
                gat[lab[s]] = s
            rep[s] = gat[lab[s]]
        ok = 0
        break
    free(lab); free(elems); free(pos); free(first); free(end); free(marked); free(bstamp); free(cstamp)
    free(tblocks); free(chg); free(chg_to); free(pred_off); free(last); free(pred); free(gid); free(grep)
    free(gsize); free(gat); free(tmp); free(ht)
    return ok


def horizon_classes(const int32_t[:, ::1] table, const uint8_t[::1] accepting, int32_t rounds):
    """Per state of ``table`` (int32 ``(n, k)`` over byte classes, state 0 dead) with
    ``accepting``: the smallest state no word of at most ``rounds`` bytes tells from it
    (:func:`horizon_reps`), as an int32 array.  Two states with the same entry give the
    same verdicts, dead, live or accepting, after every prefix of every word of at most
    ``rounds`` bytes: what a token trie of that depth can see."""
    cdef int32_t n = table.shape[0], k = table.shape[1], rc
    if accepting.shape[0] != n or n < 1:
        raise ValueError(f"horizon_classes: one flag per state and at least the dead one, got {n} states and "
                         f"{accepting.shape[0]} flags")
    if rounds < 0:
        raise ValueError(f"horizon_classes: rounds must be >= 0, got {rounds}")
    _check_targets("horizon_classes", table, n)
    out = np.zeros(n, dtype=np.int32)
    cdef int32_t[::1] ov = out
    with nogil:
        rc = horizon_reps(&table[0, 0] if k > 0 else NULL, n, k, &accepting[0], rounds, &ov[0])
    if rc < 0:
        raise MemoryError(f"horizon_classes: no memory for a DFA of {n} states")
    return out


# ----------------------------------------------------------------- products ----

cdef enum:
    OP_AND = 0
    OP_OR = 1
    OP_DIFF = 2


cdef inline bint _dead_pair(int op, state_t p, state_t q) noexcept nogil:
    if op == OP_AND:
        return p == DEAD or q == DEAD
    if op == OP_DIFF:
        return p == DEAD
    return p == DEAD and q == DEAD


cdef inline bint _accepts_pair(int op, bint a, bint b) noexcept nogil:
    if op == OP_AND:
        return a and b
    if op == OP_DIFF:
        return a and not b
    return a or b


cdef class _Product:
    """The breadth-first product of two DFAs (fields in _dfabuild.pxd)."""

    def __dealloc__(self):
        free(self.pp)
        free(self.pq)
        free(self.rows)
        i64map_free(&self.ids)

    cdef state_t _pair(self, state_t p, state_t q, int64_t max_states) noexcept nogil:
        """The id of pair (p, q), made when new; ERR_MEMORY, or ERR_MAX_STATES past max_states."""
        cdef state_t j = i64map_intern(&self.ids, pair_key(p, q), self.n)
        if j != self.n:  # known (or ERR_MEMORY)
            return j
        if j >= max_states:
            return ERR_MAX_STATES
        if (grow(<void**>&self.pp, &self.pp_cap, j + 1, sizeof(state_t)) < 0
                or grow(<void**>&self.pq, &self.pq_cap, j + 1, sizeof(state_t)) < 0
                or grow(<void**>&self.rows, &self.rows_cap, j + 1, self.k * sizeof(state_t)) < 0):
            return ERR_MEMORY
        self.pp[j] = p
        self.pq[j] = q
        self.n += 1
        return j

    cdef int _explore(self, const state_t* ta, int32_t ka, const int32_t* ca, const state_t* tb, int32_t kb,
                      const int32_t* cb, int op, int64_t max_states) noexcept nogil:
        """The rows of every pair reachable from pair 1 (k columns: column ``c`` of the
        product is column ``ca[c]`` of ``ta``, of ``ka`` columns, and ``cb[c]`` of ``tb``);
        0, or an error code."""
        cdef int32_t c, k = self.k
        cdef state_t i = 1, j, p, q, np_, nq
        memset(self.rows, 0, k * sizeof(state_t))  # the dead pair's row
        while i < self.n:
            p, q = self.pp[i], self.pq[i]
            for c in range(k):
                np_ = ta[<int64_t>p * ka + ca[c]]
                nq = tb[<int64_t>q * kb + cb[c]]
                if _dead_pair(op, np_, nq):
                    j = DEAD
                else:
                    j = self._pair(np_, nq, max_states)
                    if j < 0:
                        return j
                self.rows[<int64_t>i * k + c] = j
            i += 1
        return 0


cdef int _mark_live(int32_t n, int32_t k, const state_t* rows, uint8_t* live) noexcept nogil:
    """Trimming's search: ``live`` (n flags) holds the accepting states on entry and every
    state that can reach one on return, found backwards through predecessor lists of
    the table ``rows`` (``n * k``, 0 the dead state, never live).  0, or ERR_MEMORY."""
    cdef int64_t* po = <int64_t*>calloc(n + 1, sizeof(int64_t))
    cdef int64_t n_edges = 0, e
    cdef int32_t c, top = 0
    cdef state_t s, t
    if po == NULL:
        return ERR_MEMORY
    for s in range(1, n):
        for c in range(k):
            t = rows[<int64_t>s * k + c]
            if t != DEAD:
                po[t + 1] += 1
                n_edges += 1
    cdef state_t* pr = <state_t*>malloc((n_edges + 1) * sizeof(state_t))
    cdef state_t* st = <state_t*>malloc((n + 1) * sizeof(state_t))
    if pr == NULL or st == NULL:
        free(po); free(pr); free(st)
        return ERR_MEMORY
    for s in range(n):
        po[s + 1] += po[s]
    for s in range(1, n):
        for c in range(k):
            t = rows[<int64_t>s * k + c]
            if t != DEAD:
                pr[po[t]] = s
                po[t] += 1
    for s in range(n - 1, 0, -1):
        po[s] = po[s - 1]
    po[0] = 0
    live[DEAD] = 0
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


cdef _trimmed(_Product P, int op, const uint8_t[::1] acc_a, const uint8_t[::1] acc_b):
    """``(table, accepting)`` of the product's pairs that can reach acceptance, in the
    order they were made (dead 0, start 1), or None when the start cannot."""
    cdef int32_t k = P.k, c, m = 0
    cdef state_t n = P.n, s
    cdef int rc
    live = np.zeros(n, dtype=np.uint8)
    accepts = np.zeros(n, dtype=np.uint8)
    new = np.zeros(n, dtype=np.int32)
    cdef uint8_t[::1] lv = live
    cdef uint8_t[::1] ac = accepts
    cdef int32_t[::1] nw = new
    with nogil:
        for s in range(1, n):
            if _accepts_pair(op, acc_a[P.pp[s]] != 0, acc_b[P.pq[s]] != 0):
                lv[s] = ac[s] = 1
        rc = _mark_live(n, k, P.rows, &lv[0])
    if rc < 0:
        _raise(rc, n, 0, "product")
    if not live[1]:
        return None
    for s in range(1, n):
        if lv[s]:
            m += 1
            nw[s] = m
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


def product(const int32_t[:, ::1] ta, const uint8_t[::1] acc_a, state_t start_a,
            const int32_t[:, ::1] tb, const uint8_t[::1] acc_b, state_t start_b,
            str op, int64_t max_states, cols_a=None, cols_b=None):
    """The product of two DFAs over the same ``k`` byte classes (``ta``: int32
    ``(na, k)``, state 0 dead, ``acc_a`` uint8) for ``op`` ``"and"``, ``"or"`` or
    ``"diff"``, breadth-first from ``(start_a, start_b)``, trimmed to the states that
    can reach acceptance.  Returns ``(table, accepting)`` for :func:`minimize` (dead 0,
    start 1), or None when the language is empty.  Raises :class:`LimitExceeded`
    (``max_states``) past ``max_states`` reachable pairs.

    ``cols_a``, ``cols_b`` (int32, one entry per joint class, both or neither): the
    operands keep their own classes, and joint class ``c`` reads column ``cols_a[c]`` of
    ``ta`` and ``cols_b[c]`` of ``tb`` (no copy of either table over the joint classes)."""
    cdef int code = OP_AND if op == "and" else OP_OR if op == "or" else OP_DIFF if op == "diff" else -1
    cdef _Product P = _Product()
    cdef int rc
    if code < 0:
        raise ValueError(f"op must be and, or or diff, not {op!r}")
    if (cols_a is None) != (cols_b is None):
        raise ValueError("product: give the column maps of both DFAs or of neither")
    if cols_a is None:
        if tb.shape[1] != ta.shape[1]:
            raise ValueError("product: both DFAs need the same classes and one flag per state")
        cols_a = cols_b = np.arange(ta.shape[1], dtype=np.int32)
    col_a = np.ascontiguousarray(cols_a, dtype=np.int32).reshape(-1)
    col_b = np.ascontiguousarray(cols_b, dtype=np.int32).reshape(-1)
    if (col_a.size < 1 or col_b.size != col_a.size or acc_a.shape[0] != ta.shape[0] or acc_b.shape[0] != tb.shape[0]
            or col_a.min() < 0 or col_a.max() >= ta.shape[1] or col_b.min() < 0 or col_b.max() >= tb.shape[1]):
        raise ValueError("product: both DFAs need the same classes and one flag per state")
    cdef const int32_t[::1] ca = col_a
    cdef const int32_t[::1] cb = col_b
    cdef int32_t k = ca.shape[0]
    _check_targets("product", ta, ta.shape[0])
    _check_targets("product", tb, tb.shape[0])
    if not (0 <= start_a < ta.shape[0] and 0 <= start_b < tb.shape[0]):
        raise ValueError(f"product: start states {start_a}, {start_b} outside the DFAs")
    if _dead_pair(code, start_a, start_b):
        return None
    P.k = k
    P.n = 1  # pair 0 stands for the dead pair
    rc = i64map_init(&P.ids, 1024)
    if rc >= 0:
        rc = P._pair(start_a, start_b, max_states)
    if rc >= 0:
        with nogil:
            rc = P._explore(&ta[0, 0], ta.shape[1], &ca[0], &tb[0, 0], tb.shape[1], &cb[0], code, max_states)
    if rc < 0:
        _raise(rc, P.n + 1, max_states, "product")
    return _trimmed(P, code, acc_a, acc_b)


# ------------------------------------------------------------ JSON literals ----

cdef uint8_t _SHORT_LETTER[0x60]  # the short escape letter of a code point, 0 if none
memset(_SHORT_LETTER, 0, sizeof(_SHORT_LETTER))
for _cp, _letter in ((0x22, b'"'), (0x5C, b"\\"), (0x2F, b"/"), (0x08, b"b"), (0x0C, b"f"), (0x0A, b"n"),
                     (0x0D, b"r"), (0x09, b"t")):
    _SHORT_LETTER[_cp] = _letter[0]
del _cp, _letter


cdef inline int _utf8(uint32_t cp, uint8_t* out) noexcept nogil:
    """The UTF-8 bytes of code point cp (not a surrogate) into out; their count."""
    if cp < 0x80:
        out[0] = cp
        return 1
    if cp < 0x800:
        out[0], out[1] = 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)
        return 2
    if cp < 0x10000:
        out[0], out[1], out[2] = 0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)
        return 3
    out[0], out[1] = 0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F)
    out[2], out[3] = 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F)
    return 4


cdef class _Trie:
    """Edges (state, byte, target) of a DFA written down directly (fields in _dfabuild.pxd)."""

    def __dealloc__(self):
        free(self.e)

    cdef inline void edge(self, state_t s, int32_t b, state_t t) noexcept nogil:
        self.e[3 * self.ne] = s
        self.e[3 * self.ne + 1] = b
        self.e[3 * self.ne + 2] = t
        self.ne += 1

    cdef inline state_t state(self) noexcept nogil:
        self.n += 1
        return self.n - 1

    cdef state_t hex4(self, state_t s, uint32_t unit, state_t last) noexcept nogil:
        """Four hex digits (letters in either case) spelling ``unit``, from ``s`` to
        ``last`` (or to a new state when ``last`` is MISSING); returns the end state."""
        cdef int sh, d
        cdef state_t t
        for sh in range(12, -4, -4):
            d = (unit >> sh) & 0xF
            t = last if (sh == 0 and last != MISSING) else self.state()
            if d < 10:
                self.edge(s, 0x30 + d, t)
            else:
                self.edge(s, 0x61 + d - 10, t)
                self.edge(s, 0x41 + d - 10, t)
            s = t
        return s

    cdef void json_char(self, state_t cur, uint32_t cp, state_t nxt) noexcept nogil:
        """The texts of character ``cp`` (no surrogate) from ``cur`` to ``nxt``: raw
        (unless JSON must escape it), its short escape, and ``\\u`` with four hex
        digits (past the BMP, a surrogate pair of them)."""
        cdef uint8_t utf8[4]
        cdef int nb, b
        cdef uint32_t a
        cdef state_t s, t, esc
        if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
            nb = _utf8(cp, utf8)
            s = cur
            for b in range(nb):
                t = nxt if b == nb - 1 else self.state()
                self.edge(s, utf8[b], t)
                s = t
        esc = self.state()
        self.edge(cur, 0x5C, esc)
        if cp < 0x60 and _SHORT_LETTER[cp]:
            self.edge(esc, _SHORT_LETTER[cp], nxt)
        s = self.state()
        self.edge(esc, 0x75, s)
        if cp <= 0xFFFF:
            self.hex4(s, cp, nxt)
        else:
            a = cp - 0x10000
            s = self.hex4(s, 0xD800 + (a >> 10), MISSING)
            t = self.state()
            self.edge(s, 0x5C, t)
            s = self.state()
            self.edge(t, 0x75, s)
            self.hex4(s, 0xDC00 + (a & 0x3FF), nxt)


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
    cdef uint32_t cp
    cdef state_t cur, nxt, end, s, t
    if 3 + 6 * <int64_t>L > max_states:
        _raise(ERR_MAX_STATES, 3 + 6 * <int64_t>L, max_states, "json_literal")
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
        if 0xD800 <= cp <= 0xDFFF:  # a lone surrogate: only its \\u escape
            if cp < 0xDC00 and i + 1 < L and 0xDC00 <= cps[i + 1] <= 0xDFFF:
                free(cps)
                return None
            s = T.state()
            T.edge(cur, 0x5C, s)
            t = T.state()
            T.edge(s, 0x75, t)
            T.hex4(t, cp, nxt)
        else:
            T.json_char(cur, cp, nxt)
        cur = nxt
    free(cps)
    end = T.state()
    T.edge(cur, 0x22, end)
    if T.n > max_states:
        _raise(ERR_MAX_STATES, T.n, max_states, "json_literal")
    acc = np.zeros(T.n, dtype=np.uint8)
    acc[end] = 1
    # minimal as built: no two states have one future (each state is a place in one
    # character of value, and the texts left from two places decode to different
    # rests or start differently), so numbering it canonically is all there is to do
    return _minimal_of_edges(T, acc, True)


cdef _column_array(const int32_t* column):
    """The BYTES byte columns as an int32 array (as :func:`byte_classes` takes them)."""
    out = np.empty(BYTES, dtype=np.int32)
    cdef int32_t[::1] v = out
    cdef int b
    for b in range(BYTES):
        v[b] = column[b]
    return out


cdef tuple _minimal_of_edges(_Trie T, acc, bint minimal):
    """``(table, accepting, column)`` of the deterministic edges ``T`` (states 0 dead,
    1 start, every state live) and ``acc`` (uint8, one per state), minimized (or, when
    the caller knows it is ``minimal`` already, only numbered canonically): each byte
    on an edge its own column (in byte order), the other bytes one dead column 0."""
    cdef uint8_t used[BYTES]
    cdef int32_t cls[BYTES]
    cdef int32_t k, b
    cdef int64_t j
    memset(used, 0, sizeof(used))
    for j in range(T.ne):
        used[T.e[3 * j + 1]] = 1
    k = 1
    for b in range(BYTES):
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


cdef state_t _goc(_Trie T, I64Map* m, state_t s, int32_t b, state_t t) noexcept nogil:
    """The target of ``(s, b)`` in the deterministic edges ``T`` (``m``: pair_key(s, b) ->
    target), made to ``t`` (a new state when ``t`` is MISSING) when there is none; -1 when
    it exists with another target than a given ``t`` (not deterministic), -2 out of memory."""
    cdef int64_t key = pair_key(s, b)
    cdef int32_t v = i64map_get(m, key)
    if v >= 0:
        return v if (t == MISSING or v == t) else -1
    if t == MISSING:
        t = T.state()
    T.edge(s, b, t)
    if i64map_put(m, key, t) < 0:
        return -2
    return t


cdef state_t _hex4_to(_Trie T, I64Map* m, state_t s, uint32_t unit, state_t last) noexcept nogil:
    """:meth:`_Trie.hex4` with shared prefixes (:func:`_goc`): to ``last``, or to a state
    made or found when ``last`` is MISSING; a negative value on failure."""
    cdef int sh, d
    cdef state_t t, u
    for sh in range(12, -4, -4):
        d = (unit >> sh) & 0xF
        if d < 10:
            t = _goc(T, m, s, 0x30 + d, last if sh == 0 else MISSING)
        else:
            t = _goc(T, m, s, 0x61 + d - 10, last if sh == 0 else MISSING)
            if t >= 0:
                u = _goc(T, m, s, 0x41 + d - 10, t)
                if u < 0:
                    return u
        if t < 0:
            return t
        s = t
    return s


cdef int _json_char_to(_Trie T, I64Map* m, state_t cur, uint32_t cp, state_t nxt) noexcept nogil:
    """:meth:`_Trie.json_char` with the texts merged into what ``cur`` already has (the
    texts of its other characters share a backslash, ``u`` and leading hex digits, or a
    UTF-8 lead byte): 0, or negative on failure."""
    cdef uint8_t utf8[4]
    cdef int nb, b
    cdef uint32_t a
    cdef state_t s, esc
    if cp >= 0x20 and cp != 0x22 and cp != 0x5C:
        nb = _utf8(cp, utf8)
        s = cur
        for b in range(nb):
            s = _goc(T, m, s, utf8[b], nxt if b == nb - 1 else MISSING)
            if s < 0:
                return s
    esc = _goc(T, m, cur, 0x5C, MISSING)
    if esc < 0:
        return esc
    if cp < 0x60 and _SHORT_LETTER[cp] and _goc(T, m, esc, _SHORT_LETTER[cp], nxt) < 0:
        return -1
    s = _goc(T, m, esc, 0x75, MISSING)
    if s < 0:
        return s
    if cp <= 0xFFFF:
        return min(0, _hex4_to(T, m, s, cp, nxt))
    a = cp - 0x10000
    s = _hex4_to(T, m, s, 0xD800 + (a >> 10), MISSING)
    if s >= 0:
        s = _goc(T, m, s, 0x5C, MISSING)
    if s >= 0:
        s = _goc(T, m, s, 0x75, MISSING)
    if s >= 0:
        s = _hex4_to(T, m, s, 0xDC00 + (a & 0x3FF), nxt)
    return min(0, s)


def json_literals(list values, int64_t max_states):
    """The DFA of every JSON text that decodes to one of the strings ``values`` (the
    union of :func:`json_literal` of each), written down directly:
    ``(table, accepting, column)`` as :func:`json_literal` returns them, or None when a
    value holds a surrogate code point (the caller takes the general road).

    The values' code-point trie, each edge the texts of its character, made into
    deterministic edges as they are written: sibling characters share their texts'
    common bytes (a UTF-8 lead byte, the backslash, ``u`` and leading hex digits) and
    part where their texts differ, which the prefix code of JSON characters makes a
    deterministic graph; the closing quote goes to one accepting state; then minimized.
    What the keys an object lists cost to exclude from its other keys' DFA, in every
    spelling, without an alternation read back through an NFA.  More than
    ``max_states`` states raise :class:`LimitExceeded`.
    """
    cdef Py_ssize_t total = 0, i, L
    cdef str value
    cdef Py_UCS4 ch
    cdef state_t cur, nxt, final, r
    cdef I64Map edges, kids
    cdef int64_t key
    cdef int32_t v
    if not values:
        raise ValueError("json_literals: no values")
    for value in values:
        for ch in value:
            if 0xD800 <= ch <= 0xDFFF:
                return None
        total += 25 * len(value) + 3
    if total // 5 > max_states:
        _raise(ERR_MAX_STATES, total // 5, max_states, "json_literals")
    cdef _Trie T = _Trie()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (total + 2))
    if T.e == NULL:
        raise MemoryError(f"json_literals: no memory for {len(values)} strings")
    if i64map_init(&edges, 2 * total + 16) < 0 or i64map_init(&kids, total // 4 + 16) < 0:
        i64map_free(&edges)
        raise MemoryError(f"json_literals: no memory for {len(values)} strings")
    T.n = 2  # 0 dead, 1 the start
    final = T.state()
    r = 0
    try:
        for value in values:
            cur = _goc(T, &edges, 1, 0x22, MISSING)
            if cur < 0:
                r = cur
                break
            for ch in value:
                key = pair_key(cur, <int32_t>ch)
                v = i64map_get(&kids, key)
                if v >= 0:  # the character's texts from here are written: follow them
                    cur = v
                    continue
                nxt = T.state()
                if i64map_put(&kids, key, nxt) < 0:
                    r = -2
                    break
                r = _json_char_to(T, &edges, cur, ch, nxt)
                if r < 0:
                    break
                cur = nxt
            if r < 0:
                break
            r = min(0, _goc(T, &edges, cur, 0x22, final))
            if r < 0:
                break
    finally:
        i64map_free(&edges)
        i64map_free(&kids)
    if r == -2:
        raise MemoryError(f"json_literals: no memory for {len(values)} strings")
    if r < 0:
        raise AssertionError("json_literals: the texts of two characters collided (not a prefix code)")
    if T.n > max_states:
        _raise(ERR_MAX_STATES, T.n, max_states, "json_literals")
    acc = np.zeros(T.n, dtype=np.uint8)
    acc[final] = 1
    return _minimal_of_edges(T, acc, False)


def literal_set(list words, int64_t max_states):
    """The minimal DFA of a finite set of byte strings, written down as a trie:
    ``(table, accepting, column)`` as :func:`json_literal` returns them, or None when
    the trie (the dead state included, as :func:`determinize` counts the subset
    construction of the same alternation) has more than ``max_states`` states.

    ``words``: ``bytes``, sorted and without repeats (each word shares its longest
    common prefix with the one before it, so the trie is built in one pass).
    """
    cdef Py_ssize_t i, j, n = len(words), L, lcp, prev_len = 0, total = 0
    cdef state_t s, t
    cdef const unsigned char* w
    cdef const unsigned char* pw = NULL
    cdef bytes word, prev = None
    for word in words:
        total += len(word)
    cdef _Trie T = _Trie()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (total + 1))
    cdef state_t* path = <state_t*>malloc(sizeof(state_t) * (total + 1))
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


cdef class _Minus:
    """The joint table of :func:`minus_words` (fields in _dfabuild.pxd)."""

    def __dealloc__(self):
        free(self.bs)
        free(self.ends)
        free(self.tab)
        free(self.acc)
        free(self.new_id)
        free(self.order)
        free(self.live)
        free(self.final_id)

    cdef _word_paths(self, _Trie T, const int32_t[:, ::1] table, const uint8_t[::1] classes, state_t start,
                     list words, Py_ssize_t total):
        """The trie ``T`` of the words' paths through the DFA, word by word in sorted
        order: a word shares its longest common prefix with the one before; a path stops
        where the DFA dies (no longer word is in L).  ``bs`` gets each node's DFA state,
        ``ends`` marks the nodes where a word ends."""
        cdef Py_ssize_t i, j, L, lcp, prev_depth = 0, prev_len = 0
        cdef const unsigned char* w
        cdef const unsigned char* pw = NULL
        cdef state_t* path = <state_t*>malloc(sizeof(state_t) * (total + 1))
        cdef state_t s, t, q
        cdef bytes word
        cdef bint dead
        if path == NULL:
            raise MemoryError(f"minus_words: no memory for {len(words)} words of {total} bytes")
        T.n = 2
        path[0] = 1
        self.bs[1] = start
        for i in range(len(words)):
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
            q = self.bs[s]
            dead = False
            j = lcp
            while j < L:
                q = table[q, classes[w[j]]]
                if q == DEAD:
                    dead = True
                    break
                t = T.state()
                self.bs[t] = q
                T.edge(s, w[j], t)
                path[j + 1] = t
                s = t
                j += 1
            if not dead:
                self.ends[s] = 1
            prev_depth = j
        free(path)

    cdef int32_t _columns(self, _Trie T, const uint8_t[::1] classes, int32_t* column, int32_t* rep) noexcept:
        """The joint columns: each byte on a trie edge its own, the others by their
        class; numbered in order of the smallest byte (the order minimize numbers in).
        ``column[b]`` is byte b's, ``rep[c]`` column c's smallest byte; returns their count."""
        cdef int32_t key_col[2 * BYTES]
        cdef uint8_t used[BYTES]
        cdef int32_t b, c, k = 0
        cdef int64_t j
        memset(used, 0, sizeof(used))
        for j in range(T.ne):
            used[T.e[3 * j + 1]] = 1
        for c in range(2 * BYTES):
            key_col[c] = -1
        for b in range(BYTES):
            c = BYTES + b if used[b] else classes[b]
            if key_col[c] < 0:
                key_col[c] = k
                rep[k] = b
                k += 1
            column[b] = key_col[c]
        return k

    cdef int _joint(self, _Trie T, const int32_t[:, ::1] table, const uint8_t[::1] classes,
                    const uint8_t[::1] accepting, const int32_t* column, const int32_t* rep) noexcept nogil:
        """The joint table (the DFA's states, then the trie's nodes), the states reached
        from the trie's root breadth-first (new_id, order, reached) and those that reach
        acceptance (live).  0, or ERR_MEMORY."""
        cdef int32_t nb = self.nb, k = self.k, c, m, i
        cdef state_t s, t, q, x
        cdef int64_t j
        for s in range(nb):
            self.acc[s] = accepting[s] != 0
            for c in range(k):
                self.tab[<int64_t>s * k + c] = table[s, classes[rep[c]]]
        for x in range(1, T.n):
            s = nb + x - 1
            q = self.bs[x]
            self.acc[s] = accepting[q] != 0 and not self.ends[x]
            for c in range(k):
                self.tab[<int64_t>s * k + c] = table[q, classes[rep[c]]]
        for j in range(T.ne):
            self.tab[<int64_t>(nb + T.e[3 * j] - 1) * k + column[T.e[3 * j + 1]]] = nb + T.e[3 * j + 2] - 1
        # reachable from the start, breadth-first (order[0] is the dead state)
        self.order[0] = DEAD
        self.order[1] = nb
        self.new_id[nb] = 1
        m = 2
        i = 1
        while i < m:
            s = self.order[i]
            for c in range(k):
                t = self.tab[<int64_t>s * k + c]
                if t != DEAD and not self.new_id[t]:
                    self.new_id[t] = m
                    self.order[m] = t
                    m += 1
            i += 1
        self.reached = m
        # live: reaches an accepting state
        for s in range(self.n):
            self.live[s] = self.acc[s]
        return _mark_live(self.n, k, self.tab, self.live)

    cdef _result(self):
        """``(table, accepting)`` of the reached live states, numbered in their
        breadth-first order (start 1)."""
        cdef int32_t k = self.k, c, m = 0, i
        cdef state_t s, t, x
        self.final_id = <state_t*>calloc(self.reached, sizeof(state_t))
        if self.final_id == NULL:
            raise MemoryError(f"minus_words: no memory for {self.n} states")
        for s in range(self.n):
            if self.new_id[s] and self.live[s]:
                self.final_id[self.new_id[s]] = 1  # mark, numbered below in breadth-first order
        for i in range(1, self.reached):
            if self.final_id[i]:
                m += 1
                self.final_id[i] = m
        small = np.zeros((m + 1, k), dtype=np.int32)
        small_acc = np.zeros(m + 1, dtype=np.uint8)
        cdef int32_t[:, ::1] sv = small
        cdef uint8_t[::1] sav = small_acc
        for s in range(self.n):
            if self.new_id[s] and self.live[s]:
                x = self.final_id[self.new_id[s]]
                sav[x] = self.acc[s]
                for c in range(k):
                    t = self.tab[<int64_t>s * k + c]
                    sv[x, c] = self.final_id[self.new_id[t]] if t != DEAD and self.live[t] else DEAD
        return small, small_acc


def minus_words(const int32_t[:, ::1] table, const uint8_t[::1] classes, const uint8_t[::1] accepting,
                state_t start, list words, int64_t max_states):
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
    cdef int32_t nb = table.shape[0], kb = table.shape[1], b
    cdef Py_ssize_t total = 0
    cdef int32_t column[BYTES]
    cdef int32_t rep[BYTES]
    cdef bytes word
    cdef int rc
    if classes.shape[0] != BYTES or accepting.shape[0] != nb or not 0 <= start < nb:
        raise ValueError(f"minus_words: need 256 classes, one flag per state and a start state, got "
                         f"{classes.shape[0]} classes, {accepting.shape[0]} flags for {nb} states, start {start}")
    _check_targets("minus_words", table, nb)
    for b in range(BYTES):
        if classes[b] >= kb:
            raise ValueError(f"minus_words: byte {b} is in class {classes[b]}, the table has {kb}")
    if start == DEAD:
        return None
    for word in words:
        total += len(word)
    cdef _Trie T = _Trie()
    cdef _Minus M = _Minus()
    T.e = <int32_t*>malloc(3 * sizeof(int32_t) * (total + 1))
    M.bs = <state_t*>malloc(sizeof(state_t) * (total + 2))
    M.ends = <uint8_t*>calloc(total + 2, 1)
    if T.e == NULL or M.bs == NULL or M.ends == NULL:
        raise MemoryError(f"minus_words: no memory for {len(words)} words of {total} bytes")
    M._word_paths(T, table, classes, start, words, total)
    M.nb = nb
    M.k = M._columns(T, classes, column, rep)
    M.n = nb + T.n - 1  # the DFA's states, then trie node x as nb + x - 1 (the root, x = 1, starts)
    M.tab = <state_t*>malloc(sizeof(state_t) * <int64_t>M.n * M.k)
    M.acc = <uint8_t*>malloc(M.n)
    M.new_id = <state_t*>calloc(M.n, sizeof(state_t))
    M.order = <state_t*>malloc(sizeof(state_t) * M.n)
    M.live = <uint8_t*>calloc(M.n, 1)
    if M.tab == NULL or M.acc == NULL or M.new_id == NULL or M.order == NULL or M.live == NULL:
        raise MemoryError(f"minus_words: no memory for {M.n} states")
    with nogil:
        rc = M._joint(T, table, classes, accepting, column, rep)
    if rc < 0:
        _raise(rc, M.n, 0, "minus_words")
    if M.reached > max_states:
        _raise(ERR_MAX_STATES, M.reached, max_states, "minus_words")
    if not M.live[nb]:
        return None
    small, small_acc = M._result()
    mt, macc = minimize(small, small_acc)
    return mt, macc, _column_array(column)


# ------------------------------------------------------------- byte classes ----


cdef bint _same_column(const int32_t[:, ::1] table, int32_t a, int32_t b) noexcept nogil:
    cdef state_t s
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
    cdef int32_t n = table.shape[0], k = table.shape[1], b, c, j, m = 0
    cdef state_t s
    cdef uint64_t h[BYTES]
    cdef int32_t col_class[BYTES]
    cdef int32_t rep[BYTES]
    if column.shape[0] != BYTES:
        raise ValueError(f"byte_classes: column must have 256 entries, got {column.shape[0]}")
    if k < 1 or k > BYTES:
        raise ValueError(f"byte_classes: need 1 to 256 columns, got {k}")
    for b in range(BYTES):
        if column[b] < 0 or column[b] >= k:
            raise ValueError(f"byte_classes: byte {b} maps to column {column[b]}, outside [0, {k})")
    classes = np.empty(BYTES, dtype=np.uint8)
    cdef uint8_t[::1] cv = classes
    with nogil:
        for c in range(k):
            h[c] = 0x9E3779B97F4A7C15ULL
            col_class[c] = -1
        for s in range(n):
            for c in range(k):
                h[c] = hash_mix(h[c], <uint32_t>table[s, c])
        for b in range(BYTES):
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


def renumber(const int32_t[:, ::1] table, const uint8_t[::1] accepting, state_t start):
    """The states of a DFA reachable from ``start``, numbered canonically: dead 0, start
    1, then breadth-first with successors in column order (the order :func:`minimize`
    numbers in, when the columns are in order of their smallest byte).  ``table`` int32
    ``(n, k)``, state 0 dead, ``start`` live; returns ``(table, accepting)``.  Applied to
    a minimal DFA this gives :func:`minimize`'s arrays without the refinement."""
    cdef int32_t n = table.shape[0], k = table.shape[1], m = 2, i = 1, c
    cdef state_t s, t
    if accepting.shape[0] != n or not 0 < start < n:
        raise ValueError(f"renumber: need one flag per state and a live start, got {n} states, "
                         f"{accepting.shape[0]} flags, start {start}")
    _check_targets("renumber", table, n)
    cdef state_t* new_id = <state_t*>calloc(n, sizeof(state_t))
    cdef state_t* order = <state_t*>malloc(n * sizeof(state_t))
    if new_id == NULL or order == NULL:
        free(new_id)
        free(order)
        raise MemoryError(f"renumber: no memory for a DFA of {n} states")
    with nogil:
        order[0] = DEAD
        order[1] = start
        new_id[start] = 1
        while i < m:
            s = order[i]
            for c in range(k):
                t = table[s, c]
                if t != DEAD and not new_id[t]:
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


cdef inline state_t _copy_target(const int32_t[:, ::1] code, int64_t s, int64_t c, int64_t q, int32_t col,
                                 int32_t r, int32_t s0, int32_t quote, int64_t copies, int64_t lo, bint bounded,
                                 bint loop) noexcept nogil:
    """The target of state ``s`` (copy ``c``, its state ``q``, for ``s >= 3``) on code
    column ``col`` in :func:`string_copies`' layout (dead 0, before the quote 1, after it
    2, then ``copies`` copies of ``r`` states)."""
    cdef int32_t v
    if s < 3:
        return 3 + s0 if s == 1 and col == quote else DEAD
    if q == s0:
        if col == quote:  # the closing quote, from the start of a copy: once lo characters are read
            return 2 if c >= lo else DEAD
        if c == copies - 1:
            if bounded:  # no character after the last one
                return DEAD
            if loop:  # the last copy's start reads as the one before it (it may also close)
                c -= 1
    v = code[q, col]
    if v >= 0:
        return <state_t>(3 + c * r + v)
    if v == -1:
        return DEAD
    if c < copies - 1:  # the character is done: the next copy's start
        return <state_t>(3 + (c + 1) * r + s0)
    return <state_t>(3 + c * r + s0) if not bounded and not loop else DEAD


def string_copies(const int32_t[:, ::1] code, int32_t s0, int32_t quote, const int32_t[::1] cols,
                  int64_t lo, int64_t hi):
    """The canonical DFA of a quoted string of ``lo..hi`` characters (``hi`` -1: no
    bound), each character a prefix code given as ``code`` (``r`` states by its columns:
    ``>= 0`` a state of the same character, -1 dead, -2 the character done), written
    down in one breadth-first pass: :func:`renumber`'s arrays of the layout dead,
    before the quote, after it, then one copy of ``code`` per character read, without
    building that layout.  ``s0`` is the character's start, ``quote`` the column of
    ``"`` (a character's start closes the string there), ``cols[j]`` the code column
    of output class ``j`` (the canonical classes, computed on ``code``).  Returns
    ``(table, accepting)``; the caller checks the state count first."""
    cdef int32_t r = code.shape[0], m = cols.shape[0], j
    cdef bint bounded = hi >= 0, loop = hi < 0 and lo > 0
    cdef int64_t copies = (hi if bounded else lo) + 1
    cdef int64_t n = 3 + copies * r
    if (r < 1 or not 0 <= s0 < r or not 0 <= quote < code.shape[1] or lo < 0 or (bounded and lo > hi)
            or not 1 <= m <= BYTES):
        raise ValueError(f"string_copies: bad layout (r={r}, s0={s0}, quote={quote}, lo={lo}, hi={hi}, "
                         f"{m} classes)")
    for j in range(m):
        if not 0 <= cols[j] < code.shape[1]:
            raise ValueError(f"string_copies: class {j} maps to column {cols[j]}, outside the code")
    cdef int32_t q, c
    for q in range(r):
        for c in range(code.shape[1]):
            if not -2 <= code[q, c] < r:
                raise ValueError(f"string_copies: code[{q}, {c}] = {code[q, c]}, outside [-2, {r})")
    if n >= 2147483647:
        raise ValueError(f"string_copies: {n} states do not fit int32")
    out = np.empty((n, m), dtype=np.int32)
    cdef int64_t found[2]
    if not _copies_bfs(code, s0, quote, cols, lo, copies, bounded, loop, out, found):
        raise MemoryError(f"string_copies: no memory for {n} states")
    out.resize((found[0], m), refcheck=False)  # the unreachable states are left out
    acc = np.zeros(found[0], dtype=bool)
    if found[1] > 0:
        acc[found[1]] = True
    return out, acc


cdef bint _copies_bfs(const int32_t[:, ::1] code, int32_t s0, int32_t quote, const int32_t[::1] cols, int64_t lo,
                      int64_t copies, bint bounded, bint loop, int32_t[:, ::1] ov, int64_t* found):
    """:func:`string_copies`' breadth-first pass into ``ov`` (its first rows): ``found``
    gets the number of states reached and the new number of the accepting one (0: not
    reached).  False when out of memory."""
    cdef int32_t r = code.shape[0], m = cols.shape[0], j
    cdef int64_t n = 3 + copies * r, i = 1, cnt = 2, s, c = 0, q = 0
    cdef state_t t
    cdef state_t* new_id = <state_t*>calloc(n, sizeof(state_t))
    cdef int64_t* order = <int64_t*>malloc(n * sizeof(int64_t))
    if new_id == NULL or order == NULL:
        free(new_id)
        free(order)
        return False
    with nogil:
        order[0] = DEAD
        order[1] = 1
        new_id[1] = 1
        memset(&ov[0, 0], 0, m * sizeof(int32_t))
        while i < cnt:
            s = order[i]
            if s >= 3:  # its copy and state there, once per row
                c = (s - 3) // r
                q = (s - 3) - c * r
            for j in range(m):
                t = _copy_target(code, s, c, q, cols[j], r, s0, quote, copies, lo, bounded, loop)
                if t != DEAD and not new_id[t]:
                    new_id[t] = <state_t>cnt
                    order[cnt] = t
                    cnt += 1
                ov[i, j] = new_id[t]
            i += 1
    found[0] = cnt
    found[1] = new_id[2]
    free(new_id)
    free(order)
    return True
