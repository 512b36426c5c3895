# Hash-consed sets of int32 (sorted arrays): equal sets get one id.
#
# Shared by the Cython modules that intern automaton states made of sets: the subset
# construction of toolkit.automata._dfabuild and the lazy lexer of strategies.llguidance.parser.
# A set's elements live in one growing pool; an open-addressing table of ids finds a
# set by its hash.  Everything is C, usable without the GIL; the functions return -1
# (ERR_MEMORY) when memory runs out and leave the table as it was.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from toolkit.core.cutil cimport ERR_MEMORY, grow_array, hash_ints


cdef struct IntSets:
    int32_t n           # sets interned; ids are 0 .. n-1 in order of interning
    int64_t cap_off, cap_len
    int64_t* off        # set i is pool[off[i] .. off[i] + len[i])
    int32_t* len
    int32_t* pool
    int64_t pool_len, pool_cap
    int32_t* ht         # open addressing: ids, -1 for an empty slot; ht_cap a power of 2
    int64_t ht_cap


cdef inline int intsets_init(IntSets* t) noexcept nogil:
    memset(t, 0, sizeof(IntSets))
    t.ht_cap = 64
    t.ht = <int32_t*>malloc(t.ht_cap * sizeof(int32_t))
    if t.ht == NULL:
        return -1
    memset(t.ht, 0xff, t.ht_cap * sizeof(int32_t))
    return 0


cdef inline void intsets_free(IntSets* t) noexcept nogil:
    free(t.off)
    free(t.len)
    free(t.pool)
    free(t.ht)
    memset(t, 0, sizeof(IntSets))


cdef inline int32_t intsets_find(const IntSets* t, const int32_t* xs, int32_t n, uint64_t hv) noexcept nogil:
    """The id of the set xs[0..n) (hash hv = hash_ints(xs, n)), or -1."""
    cdef int64_t h = <int64_t>(hv & <uint64_t>(t.ht_cap - 1))
    cdef int32_t id_, k
    cdef const int32_t* p
    while t.ht[h] >= 0:
        id_ = t.ht[h]
        if t.len[id_] == n:
            p = t.pool + t.off[id_]
            k = 0
            while k < n and p[k] == xs[k]:
                k += 1
            if k == n:
                return id_
        h = (h + 1) & (t.ht_cap - 1)
    return -1


cdef inline int _intsets_rehash(IntSets* t) noexcept nogil:
    cdef int64_t cap = t.ht_cap * 2, h
    cdef int32_t i
    cdef int32_t* ht = <int32_t*>malloc(cap * sizeof(int32_t))
    if ht == NULL:
        return -1
    memset(ht, 0xff, cap * sizeof(int32_t))
    for i in range(t.n):
        h = <int64_t>(hash_ints(t.pool + t.off[i], t.len[i]) & <uint64_t>(cap - 1))
        while ht[h] >= 0:
            h = (h + 1) & (cap - 1)
        ht[h] = i
    free(t.ht)
    t.ht = ht
    t.ht_cap = cap
    return 0


cdef inline int32_t intsets_add(IntSets* t, const int32_t* xs, int32_t n, uint64_t hv) noexcept nogil:
    """Intern xs[0..n), which intsets_find did not find (hash hv); returns its new id,
    or ERR_MEMORY."""
    cdef void* p
    cdef int64_t h
    if 2 * (<int64_t>t.n + 1) > t.ht_cap and _intsets_rehash(t) < 0:
        return ERR_MEMORY
    p = grow_array(t.off, &t.cap_off, t.n + 1, sizeof(int64_t))
    if p == NULL:
        return ERR_MEMORY
    t.off = <int64_t*>p
    p = grow_array(t.len, &t.cap_len, t.n + 1, sizeof(int32_t))
    if p == NULL:
        return ERR_MEMORY
    t.len = <int32_t*>p
    p = grow_array(t.pool, &t.pool_cap, t.pool_len + n, sizeof(int32_t))
    if p == NULL:
        return ERR_MEMORY
    t.pool = <int32_t*>p
    if n:
        memcpy(t.pool + t.pool_len, xs, n * sizeof(int32_t))
    t.off[t.n] = t.pool_len
    t.len[t.n] = n
    t.pool_len += n
    h = <int64_t>(hv & <uint64_t>(t.ht_cap - 1))
    while t.ht[h] >= 0:
        h = (h + 1) & (t.ht_cap - 1)
    t.ht[h] = t.n
    t.n += 1
    return t.n - 1
