# Hash-consed sets of int32 (sorted arrays): equal sets get one id; and the hash
# functions the Cython modules' tables share (mix64, hash_ints).
#
# Shared by the Cython modules that intern automaton states made of sets: the subset
# construction of toolkit.automata._dfabuild and the lazy lexer of strategies.llguidance._parser.
# A set's elements live in one growing pool; an open-addressing table of ids finds a
# set by its hash.  Everything is C, usable without the GIL; the functions return -1
# (or INTSETS_OOM) when memory runs out and leave the table as it was.

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset


cdef enum:
    INTSETS_OOM = -2   # intsets_add: out of memory


cdef inline uint64_t mix64(uint64_t x) noexcept nogil:
    """A 64-bit finalizer (MurmurHash3's): every bit of x moves every bit of the
    result, so an open-addressing table may take the low bits of keys that differ
    only in their high half (a pair packed as hi << 32 | lo)."""
    x ^= x >> 33
    x *= <uint64_t>0xff51afd7ed558ccd
    x ^= x >> 33
    x *= <uint64_t>0xc4ceb9fe1a85ec53
    x ^= x >> 33
    return x


cdef inline uint64_t hash_mix(uint64_t h, uint64_t x) noexcept nogil:
    h ^= x
    h *= <uint64_t>0x100000001b3
    return h


cdef inline uint64_t hash_ints(const int32_t* xs, int32_t n) noexcept nogil:
    """FNV-1a over the elements and the length, with a final shift to spread the low bits."""
    cdef uint64_t h = <uint64_t>0xcbf29ce484222325
    cdef int32_t i
    for i in range(n):
        h = hash_mix(h, <uint32_t>xs[i])
    h = hash_mix(h, <uint32_t>n)
    return h ^ (h >> 29)


cdef inline void* grow_array(void* p, int64_t* cap, int64_t need, size_t elem) noexcept nogil:
    """realloc p so that it holds at least need elements (doubling); NULL when out of memory
    (p is then still valid and cap unchanged).  Never NULL for need 0: p is allocated."""
    cdef int64_t c = cap[0]
    if need <= c and p != NULL:
        return p
    if c < 16:
        c = 16
    while c < need:
        c *= 2
    cdef void* q = realloc(p, <size_t>c * elem)
    if q != NULL:
        cap[0] = c
    return q


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
    or INTSETS_OOM."""
    cdef void* p
    cdef int64_t h
    if 2 * (<int64_t>t.n + 1) > t.ht_cap and _intsets_rehash(t) < 0:
        return INTSETS_OOM
    p = grow_array(t.off, &t.cap_off, t.n + 1, sizeof(int64_t))
    if p == NULL:
        return INTSETS_OOM
    t.off = <int64_t*>p
    p = grow_array(t.len, &t.cap_len, t.n + 1, sizeof(int32_t))
    if p == NULL:
        return INTSETS_OOM
    t.len = <int32_t*>p
    p = grow_array(t.pool, &t.pool_cap, t.pool_len + n, sizeof(int32_t))
    if p == NULL:
        return INTSETS_OOM
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
