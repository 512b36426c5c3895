# The C utility layer every Cython module of masklab shares: the byte alphabet, the
# error codes, array growth, sorting, hashing, one open-addressing map and the work
# counters.
#
# Everything here is inline C usable without the GIL.  A function that can run out of
# memory returns a negative value (ERR_MEMORY where it returns a code) and leaves its
# structure as it was.  The Python half of the error codes (what each one raises) is
# toolkit/core/errors.py: ``error_of(code, value, limit)``; the two lists are checked
# against each other by tests/test_layers.py.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memset


cdef enum:
    BYTES = 256         # the byte alphabet: every byte-level table has this many columns


cdef extern from *:
    # the index of the lowest set bit (x != 0): a byte set's bits in order
    int ctz64 "__builtin_ctzll"(unsigned long long x) nogil
    # the set bits of x
    int popcount64 "__builtin_popcountll"(unsigned long long x) nogil


cdef enum ErrCode:
    # What a C function of masklab failed with.  Zero is success; every code is
    # negative, so ``rc < 0`` tests any of them and a code is a valid return value.
    ERR_NONE = 0
    ERR_MEMORY = -1             # malloc/realloc failed
    ERR_NO_CACHE = -2           # a fill without the tables' precomputed cache (or for another vocabulary)
    ERR_SHAPE = -3              # an array of the wrong size was handed in
    # the limits, each an option of its engine (toolkit.core.errors.LIMIT_OPTIONS)
    ERR_MAX_STATES = -10        # DFA states built (determinize, product)
    ERR_MAX_LEXER_STATES = -11  # llguidance: lexer states (sets of live lexeme states)
    ERR_MAX_ROW_ITEMS = -12     # llguidance: Earley items in one row
    ERR_MAX_STEPS = -13         # llguidance: parser items plus lexer states for one mask or token
    ERR_MAX_CHART_ITEMS = -14   # xgrammar: Earley items in one chart


cdef struct WorkCounters:
    # The work a matcher's core did, counted since it was made (toolkit.core.protocol.MaskStats).
    int64_t trie_nodes       # token-trie nodes visited while filling masks
    int64_t lexer_steps      # lexer transitions taken (bytes through a byte DFA or lexer state)
    int64_t earley_items     # Earley items added to a chart or row
    int64_t tokens_checked   # tokens whose verdict took a check of their own
    int64_t tokens_sliced    # tokens decided in bulk by a precomputed slice
    int64_t tokens_cached    # tokens decided by a lookup in a precomputed table


# ------------------------------------------------------------------ growth ----

cdef inline int64_t next_cap(int64_t cap, int64_t need) noexcept nogil:
    """A capacity for ``need`` elements: doubled from ``cap`` (at least 16) until it fits."""
    if cap < 16:
        cap = 16
    while cap < need:
        cap *= 2
    return cap


cdef inline void* grow_array(void* p, int64_t* cap, int64_t need, size_t elem) noexcept nogil:
    """realloc p so that it holds at least need elements (doubling from 16); NULL when
    out of memory (p is then still valid and cap unchanged).  Never NULL for need 0 when
    memory is there: p is allocated."""
    if need <= cap[0] and p != NULL:
        return p
    cdef int64_t c = next_cap(cap[0], need)
    cdef void* q = realloc(p, <size_t>c * elem)
    if q != NULL:
        cap[0] = c
    return q


cdef inline int grow(void** p, int64_t* cap, int64_t need, size_t elem) noexcept nogil:
    """:func:`grow_array` in place: 0, or ERR_MEMORY (``*p`` and ``*cap`` unchanged)."""
    cdef void* q = grow_array(p[0], cap, need, elem)
    if q == NULL:
        return ERR_MEMORY
    p[0] = q
    return 0


cdef inline int resize(void** p, int64_t n, size_t elem) noexcept nogil:
    """realloc ``*p`` to exactly n elements (at least one): 0, or ERR_MEMORY (``*p`` unchanged)."""
    cdef void* q = realloc(p[0], <size_t>(n if n > 0 else 1) * elem)
    if q == NULL:
        return ERR_MEMORY
    p[0] = q
    return 0


# ----------------------------------------------------------------- sorting ----

cdef inline int cmp_i32(const void* a, const void* b) noexcept nogil:
    """qsort's comparison of two int32_t."""
    cdef int32_t x = (<const int32_t*>a)[0], y = (<const int32_t*>b)[0]
    return (x > y) - (x < y)


cdef inline int cmp_i64(const void* a, const void* b) noexcept nogil:
    """qsort's comparison of two int64_t."""
    cdef int64_t x = (<const int64_t*>a)[0], y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


ctypedef fused sortable:
    int32_t
    int64_t


cdef inline void sort_ints(sortable* xs, int64_t n) noexcept nogil:
    """Sort xs[0..n) ascending: insertion sort when short, qsort otherwise."""
    cdef int64_t i, j
    cdef sortable x
    if n <= 16:
        for i in range(1, n):
            x = xs[i]
            j = i - 1
            while j >= 0 and xs[j] > x:
                xs[j + 1] = xs[j]
                j -= 1
            xs[j + 1] = x
    elif sortable is int32_t:
        qsort(xs, n, sizeof(int32_t), cmp_i32)
    else:
        qsort(xs, n, sizeof(int64_t), cmp_i64)


# Arrays of pages: a big table that grows while masks are served (the mask tables made
# at a mask) must not be copied to grow: realloc copies what the heap holds (the malloc
# mmap threshold rises to 32 MB as big blocks are freed), tens of MB in milliseconds.
# These arrays, from 1 MiB up, are mappings of their own, grown by the kernel moving pages
# (Linux's mremap; elsewhere a copy).  Freed with vfree and their capacity, never with free.
cdef extern from *:
    """
    #if defined(_WIN32)
    #include <stdlib.h>
    static void* masklab_vresize(void* p, size_t old_bytes, size_t new_bytes) {
        (void)old_bytes; return realloc(p, new_bytes ? new_bytes : 1);
    }
    static void masklab_vfree(void* p, size_t bytes) { (void)bytes; free(p); }
    #else
    #include <stdlib.h>
    #include <string.h>
    #include <sys/mman.h>
    /* below this an array is malloc's (a mapping per small array would spend the
       process's map count); from it up, a mapping of its own */
    #define MASKLAB_VBIG ((size_t)1 << 20)
    #define MASKLAB_PAGE(n) (((n) + (size_t)4095) & ~(size_t)4095)
    static void* masklab_vresize(void* p, size_t old_bytes, size_t new_bytes) {
        void* q;
        if (new_bytes == 0) new_bytes = 1;
        if (p != NULL && new_bytes <= old_bytes) return p;
        if (new_bytes < MASKLAB_VBIG) return realloc(p, new_bytes);
        new_bytes = MASKLAB_PAGE(new_bytes);
        if (p != NULL && old_bytes >= MASKLAB_VBIG) {
            old_bytes = MASKLAB_PAGE(old_bytes);
    #if defined(__linux__) && defined(MREMAP_MAYMOVE)
            q = mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE);
            return q == MAP_FAILED ? NULL : q;
    #endif
        }
        q = mmap(NULL, new_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) return NULL;
        if (p != NULL) {
            memcpy(q, p, old_bytes);
            if (old_bytes >= MASKLAB_VBIG) munmap(p, MASKLAB_PAGE(old_bytes)); else free(p);
        }
        return q;
    }
    static void masklab_vfree(void* p, size_t bytes) {
        if (p == NULL) return;
        if (bytes >= MASKLAB_VBIG) munmap(p, MASKLAB_PAGE(bytes)); else free(p);
    }
    #endif
    """
    void* masklab_vresize(void* p, size_t old_bytes, size_t new_bytes) nogil
    void masklab_vfree(void* p, size_t bytes) nogil


cdef inline int vgrow(void** p, int64_t old_n, int64_t new_n, size_t elem) noexcept nogil:
    """Page array ``*p`` of ``old_n`` elements grown to ``new_n`` (``*p`` NULL: made): 0,
    or ERR_MEMORY (``*p`` unchanged)."""
    cdef void* q = masklab_vresize(p[0], <size_t>old_n * elem, <size_t>new_n * elem)
    if q == NULL:
        return ERR_MEMORY
    p[0] = q
    return 0


cdef inline void vfree(void* p, int64_t n, size_t elem) noexcept nogil:
    """Free page array ``p`` of capacity ``n``."""
    masklab_vfree(p, <size_t>n * elem)

# ------------------------------------------------------------------ rows ----

# ``dst |= src`` over ``n`` bitmask words: the masks' one bulk operation (a row of
# 128k tokens is 4,000 words).  -O3 alone vectorizes it with SSE2 (16 bytes); where the
# CPU has AVX2 the 32-byte version runs, chosen once per process (as the session's
# popcount is): a glr fill on Llama-3 took 21 % less at the median (six MaskBench
# schemas, least of 30 walks, AMD EPYC).  AVX-512 gave nothing more there.  (``static
# inline``: no warning in the modules that cimport this file and never call it.)
cdef extern from *:
    """
    static inline void masklab_or_words_sw(unsigned int* restrict d, const unsigned int* restrict s, long long n) {
        for (long long i = 0; i < n; i++) d[i] |= s[i];
    }
    #if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("avx2")))
    static inline void masklab_or_words_avx2(unsigned int* restrict d, const unsigned int* restrict s, long long n) {
        for (long long i = 0; i < n; i++) d[i] |= s[i];
    }
    static inline void masklab_or_words(unsigned int* d, const unsigned int* s, long long n) {
        static int avx2 = -1;
        if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
        if (avx2) masklab_or_words_avx2(d, s, n); else masklab_or_words_sw(d, s, n);
    }
    #else
    static inline void masklab_or_words(unsigned int* d, const unsigned int* s, long long n) {
        masklab_or_words_sw(d, s, n);
    }
    #endif
    """
    void or_words "masklab_or_words"(uint32_t* dst, const uint32_t* src, long long n) nogil


# ------------------------------------------------------------------ arena ----

cdef struct Arena:
    # Elements in blocks of 2**shift that never move: what was taken keeps its offset and
    # its address, and growing copies nothing (a realloc of a table of tens of MB, made
    # while masks are served, costs milliseconds).  A run taken never straddles two blocks.
    char** blk
    int64_t n_blk, cap_blk
    int64_t n          # elements taken (the offset of the next, block gaps included)
    int32_t shift      # log2 of a block's elements
    size_t elem


cdef inline void arena_init(Arena* a, size_t elem, int64_t min_block) noexcept nogil:
    """An empty arena of ``elem``-byte elements, blocks of at least ``min_block`` of them
    (a power of two, at least 2**16)."""
    memset(a, 0, sizeof(Arena))
    a.elem = elem
    a.shift = 16
    while (<int64_t>1 << a.shift) < min_block:
        a.shift += 1


cdef inline int64_t arena_take(Arena* a, int64_t k) noexcept nogil:
    """The offset of ``k`` (at most a block) new contiguous elements (uninitialized), or
    ERR_MEMORY (the arena as it was)."""
    cdef int64_t size = <int64_t>1 << a.shift, off = a.n, room = (a.n_blk << a.shift) - a.n
    cdef void* b
    if k > size:
        return ERR_MEMORY
    if room < k:
        if grow(<void**>&a.blk, &a.cap_blk, a.n_blk + 1, sizeof(char*)) < 0:
            return ERR_MEMORY
        b = malloc(<size_t>size * a.elem)
        if b == NULL:
            return ERR_MEMORY
        a.blk[a.n_blk] = <char*>b
        off = a.n_blk << a.shift
        a.n_blk += 1
    a.n = off + k
    return off


cdef inline void* arena_at(const Arena* a, int64_t off) noexcept nogil:
    """The address of element ``off``."""
    return a.blk[off >> a.shift] + <size_t>(off & ((<int64_t>1 << a.shift) - 1)) * a.elem


cdef inline int64_t arena_bytes(const Arena* a) noexcept nogil:
    """Bytes the blocks hold."""
    return (a.n_blk << a.shift) * <int64_t>a.elem


cdef inline void arena_free(Arena* a) noexcept nogil:
    cdef int64_t i
    for i in range(a.n_blk):
        free(a.blk[i])
    free(a.blk)
    a.blk = NULL
    a.n_blk = a.cap_blk = a.n = 0

# ----------------------------------------------------------------- hashing ----

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
    """One FNV-1a step: h with x folded in."""
    h ^= x
    h *= <uint64_t>0x100000001b3
    return h


cdef inline uint64_t hash_basis() noexcept nogil:
    """FNV-1a's offset basis: the hash of nothing, before a byte is folded in."""
    return <uint64_t>0xcbf29ce484222325


cdef inline uint64_t hash_ints(const int32_t* xs, int32_t n) noexcept nogil:
    """FNV-1a over the elements and the length, with a final shift to spread the low bits."""
    cdef uint64_t h = hash_basis()
    cdef int32_t i
    for i in range(n):
        h = hash_mix(h, <uint32_t>xs[i])
    h = hash_mix(h, <uint32_t>n)
    return h ^ (h >> 29)


cdef inline uint64_t hash_bytes(const uint8_t* p, int64_t n) noexcept nogil:
    """FNV-1a over ``p[:n]`` (from :func:`hash_basis`, a byte per :func:`hash_mix`),
    finished by :func:`mix64`: a table may take the low bits.  A caller hashing each
    prefix of a string in turn folds one byte more each time and mixes a copy."""
    cdef uint64_t h = hash_basis()
    cdef int64_t i
    for i in range(n):
        h = hash_mix(h, p[i])
    return mix64(h)


cdef inline int64_t pair_key(int32_t hi, int32_t lo) noexcept nogil:
    """Two int32 ids as one I64Map key."""
    return <int64_t>((<uint64_t><uint32_t>hi << 32) | <uint32_t>lo)


# ----------------------------------------------------- the open-addressing map ----

cdef struct I64Map:
    # int64 keys (any value) to int32 values (>= 0), linear probing over a power-of-2
    # table kept at most half full.  A slot is live when its stamp equals gen, so
    # clearing is one increment (the tables cleared once per Earley row stay cheap).
    int64_t* keys
    int32_t* vals
    uint32_t* stamp
    int64_t cap        # slots, a power of 2
    int64_t n          # live entries
    uint32_t gen       # the live stamp, >= 1


cdef inline int i64map_init(I64Map* m, int64_t cap) noexcept nogil:
    """An empty map with room for cap / 2 entries before it grows (cap rounded up to a
    power of 2, at least 16): 0, or ERR_MEMORY."""
    cdef int64_t c = 16
    while c < cap:
        c *= 2
    memset(m, 0, sizeof(I64Map))
    m.keys = <int64_t*>malloc(<size_t>c * sizeof(int64_t))
    m.vals = <int32_t*>malloc(<size_t>c * sizeof(int32_t))
    m.stamp = <uint32_t*>malloc(<size_t>c * sizeof(uint32_t))
    if m.keys == NULL or m.vals == NULL or m.stamp == NULL:
        i64map_free(m)
        return ERR_MEMORY
    memset(m.stamp, 0, <size_t>c * sizeof(uint32_t))
    m.cap = c
    m.gen = 1
    return 0


cdef inline void i64map_free(I64Map* m) noexcept nogil:
    free(m.keys)
    free(m.vals)
    free(m.stamp)
    memset(m, 0, sizeof(I64Map))


cdef inline void i64map_clear(I64Map* m) noexcept nogil:
    """Remove every entry (O(1) but once per 2**32 clears)."""
    m.n = 0
    m.gen += 1
    if m.gen == 0:
        memset(m.stamp, 0, <size_t>m.cap * sizeof(uint32_t))
        m.gen = 1


cdef inline int64_t i64map_slot(const I64Map* m, int64_t key) noexcept nogil:
    """The slot that holds key, or the free slot where it would go."""
    cdef int64_t h = <int64_t>(mix64(<uint64_t>key) & <uint64_t>(m.cap - 1))
    while m.stamp[h] == m.gen and m.keys[h] != key:
        h = (h + 1) & (m.cap - 1)
    return h


cdef inline int32_t i64map_get(const I64Map* m, int64_t key) noexcept nogil:
    """The value of key, or -1 when it has none."""
    cdef int64_t h = i64map_slot(m, key)
    return m.vals[h] if m.stamp[h] == m.gen else -1


cdef inline int _i64map_rehash(I64Map* m) noexcept nogil:
    cdef I64Map big
    cdef int64_t i, h
    if i64map_init(&big, 2 * m.cap) < 0:
        return ERR_MEMORY
    for i in range(m.cap):
        if m.stamp[i] == m.gen:
            h = i64map_slot(&big, m.keys[i])
            big.keys[h] = m.keys[i]
            big.vals[h] = m.vals[i]
            big.stamp[h] = big.gen
    big.n = m.n
    i64map_free(m)
    m[0] = big
    return 0


cdef inline int32_t i64map_intern(I64Map* m, int64_t key, int32_t val) noexcept nogil:
    """The value key has, or else val, stored as its value now (used as a set: ``m.n``
    grew when key was new).  ERR_MEMORY when the table could not grow (the map is
    unchanged)."""
    cdef int64_t h = i64map_slot(m, key)
    if m.stamp[h] == m.gen:
        return m.vals[h]
    if 2 * (m.n + 1) > m.cap:
        if _i64map_rehash(m) < 0:
            return ERR_MEMORY
        h = i64map_slot(m, key)
    m.keys[h] = key
    m.vals[h] = val
    m.stamp[h] = m.gen
    m.n += 1
    return val


cdef inline int i64map_put(I64Map* m, int64_t key, int32_t val) noexcept nogil:
    """Set key's value: 0, or ERR_MEMORY (the map is unchanged)."""
    cdef int64_t h = i64map_slot(m, key)
    if m.stamp[h] == m.gen:
        m.vals[h] = val
        return 0
    return 0 if i64map_intern(m, key, val) >= 0 else ERR_MEMORY


cdef inline int64_t i64map_bytes(const I64Map* m) noexcept nogil:
    """The bytes the map holds."""
    return m.cap * <int64_t>(sizeof(int64_t) + sizeof(int32_t) + sizeof(uint32_t))
