"""The protocol's rules in C over a strategy's core, and the batch step over many.

:class:`Session` is one matcher of masklab's own strategies: the strategy's core (its
parse state and undo stack, reached through the core's ``StrategyOps``) plus what the
protocol keeps for every engine: EOS accepted (termination), the sticky error state,
the count of text tokens consumed (what ``rollback`` undoes).  Its methods are the
protocol's calls; its ``c_accept`` / ``c_fill`` are the same calls for C callers.

:class:`NativeBatch` steps many sessions without the GIL: ``threads`` workers (the
calling thread and ``threads - 1`` pool threads, each entering C once per step) take
lanes from a shared atomic counter; a lane is a run of rows whose cores share mutable
tables (one compiled grammar), stepped in row order by one worker.  Each row's accept
and fill are timed with the monotonic clock.  See :mod:`toolkit.core.batch` for the token
codes.

The probes of toolkit/core/cutil.pxd's inline C that its tests run are test code, in
``tests/_support/cutil_probe.pyx`` (built in place, never shipped).
"""

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.math cimport NAN
from libc.string cimport memcmp, memcpy, memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport (
    BYTES,
    ERR_MEMORY,
    WorkCounters,
    ctz64,
    grow,
    hash_basis,
    hash_bytes,
    hash_mix,
    mix64,
    popcount64,
)
from toolkit.core.bpe cimport BpeTable
from toolkit.core.ids cimport token_t, word_t

from toolkit.core.errors import raise_code

cnp.import_array()

__all__ = ["VocabTable", "Session", "NativeBatch", "OPS_CAPSULE", "or_bit_runs"]

OPS_CAPSULE = "masklab.StrategyOps"
"""The name of the capsule a strategy's ``ops_capsule()`` returns."""

cdef enum:
    K_TEXT = 0
    K_EOS = 1
    K_OTHER = 2
    T_NO_TOKEN = -1
    T_SKIP = -2

cdef extern from *:
    """
    static inline long long masklab_fetch_add(long long *p, long long v) {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    }
    /* The set bits of a row: the CPU's popcnt where it has one (a libgcc call per word
       otherwise, several times slower on a 128k-token row). */
    static long long masklab_popcount_sw(const unsigned int *w, long long n) {
        long long c = 0;
        for (long long i = 0; i < n; i++) c += __builtin_popcount(w[i]);
        return c;
    }
    #if defined(__x86_64__) && defined(__GNUC__)
    __attribute__((target("popcnt")))
    static long long masklab_popcount_hw(const unsigned int *w, long long n) {
        long long c = 0;
        for (long long i = 0; i < n; i++) c += __builtin_popcount(w[i]);
        return c;
    }
    static long long masklab_popcount_row(const unsigned int *w, long long n) {
        static int hw = -1;
        if (hw < 0) hw = __builtin_cpu_supports("popcnt") ? 1 : 0;
        return hw ? masklab_popcount_hw(w, n) : masklab_popcount_sw(w, n);
    }
    #else
    static long long masklab_popcount_row(const unsigned int *w, long long n) {
        return masklab_popcount_sw(w, n);
    }
    #endif
    """
    long long masklab_fetch_add(long long* p, long long v) noexcept nogil
    long long masklab_popcount_row(const word_t* w, long long n) noexcept nogil


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef word_t* _row_pointer(bitmask, row, int32_t n_words) except NULL:
    """Where row ``row`` of a writeable int32 numpy bitmask (2-D, or a 1-D row) starts;
    its words must be contiguous and as many as the vocabulary's."""
    cdef cnp.ndarray arr
    cdef int nd
    cdef int64_t r, n_rows
    if not cnp.PyArray_Check(bitmask) or cnp.PyArray_TYPE(<cnp.ndarray>bitmask) != cnp.NPY_INT32:
        raise ValueError(f"the bitmask must be a numpy int32 array, got {type(bitmask).__name__}")
    arr = <cnp.ndarray>bitmask
    nd = cnp.PyArray_NDIM(arr)
    if nd not in (1, 2) or not cnp.PyArray_ISWRITEABLE(arr):
        raise ValueError(f"the bitmask must be a writeable 1-D row or 2-D array, got {nd} dimensions")
    if cnp.PyArray_DIM(arr, nd - 1) != n_words or cnp.PyArray_STRIDE(arr, nd - 1) != sizeof(word_t):
        raise ValueError(f"bitmask row has {cnp.PyArray_DIM(arr, nd - 1)} words (contiguous: "
                         f"{cnp.PyArray_STRIDE(arr, nd - 1) == sizeof(word_t)}), vocabulary needs {n_words}")
    if nd == 1:
        return <word_t*>cnp.PyArray_DATA(arr)
    r = int(row)
    n_rows = cnp.PyArray_DIM(arr, 0)
    if r < 0:
        r += n_rows
    if not 0 <= r < n_rows:
        raise IndexError(f"row {row} is outside a bitmask of {n_rows} rows")
    return <word_t*>(<char*>cnp.PyArray_DATA(arr) + r * cnp.PyArray_STRIDE(arr, 0))


cdef word_t* _rows_pointer(bitmask, int64_t row, int64_t n, int32_t n_words) except NULL:
    """Where rows ``row .. row + n - 1`` of a writeable, C-contiguous 2-D int32 bitmask
    start (the draft calls write them as one block)."""
    if (not cnp.PyArray_Check(bitmask) or cnp.PyArray_TYPE(<cnp.ndarray>bitmask) != cnp.NPY_INT32
            or cnp.PyArray_NDIM(<cnp.ndarray>bitmask) != 2):
        raise ValueError("the draft rows go into a 2-D numpy int32 bitmask")
    cdef cnp.ndarray arr = <cnp.ndarray>bitmask
    if not cnp.PyArray_ISWRITEABLE(arr) or not cnp.PyArray_IS_C_CONTIGUOUS(arr):
        raise ValueError("the draft rows go into a writeable C-contiguous bitmask")
    if cnp.PyArray_DIM(arr, 1) != n_words:
        raise ValueError(f"bitmask rows have {cnp.PyArray_DIM(arr, 1)} words, the vocabulary needs {n_words}")
    if row < 0 or row + n > cnp.PyArray_DIM(arr, 0):
        raise ValueError(f"the draft needs rows {row}..{row + n - 1}; the bitmask has {cnp.PyArray_DIM(arr, 0)}")
    return <word_t*>cnp.PyArray_DATA(arr) + row * n_words


cdef inline int32_t _ancestor(const int32_t* parents, int32_t node, int32_t up) noexcept nogil:
    """The node ``up`` generations above ``node``."""
    while up > 0:
        node = parents[node]
        up -= 1
    return node


cdef class VocabTable:
    """The vocabulary as a session reads it: token bytes, kinds, EOS ids (C arrays)."""

    def __init__(self, vocab):
        raw, offsets = vocab.byte_table()
        blob = np.frombuffer(raw + b"\0", dtype=np.uint8)  # never empty: &b[0] is valid
        kind = np.full(vocab.size, K_OTHER, dtype=np.uint8)
        text = np.asarray(vocab.text_token_mask(), dtype=bool)
        kind[text[: vocab.size]] = K_TEXT
        eos = np.asarray(sorted(set(int(e) for e in vocab.eos_ids)), dtype=np.int32)
        kind[eos] = K_EOS
        lengths = np.diff(offsets)
        rec = np.zeros((vocab.size, 2), dtype=np.uint64)
        rec[:, 0] = kind.astype(np.uint64) | (lengths.astype(np.uint64) << np.uint64(8))
        rec[:, 1] = offsets[:-1].astype(np.uint64)
        short = np.nonzero(lengths <= 8)[0]
        inline = np.zeros((len(short), 8), dtype=np.uint8)
        for j in range(8):  # (the bytes of a token of at most 8, in place of its offset)
            has = lengths[short] > j
            inline[has, j] = blob[offsets[short[has]] + j]
        rec[short, 1] = inline.view(np.uint64)[:, 0]
        self._keep = (blob, offsets, kind, eos, rec)
        cdef const uint8_t[::1] b = blob
        cdef const int64_t[::1] o = offsets
        cdef const uint8_t[::1] k = kind
        cdef const int32_t[::1] e = eos
        cdef const uint64_t[:, ::1] r = rec
        self.rec = &r[0, 0] if vocab.size > 0 else NULL
        self.blob = &b[0]
        self.offsets = &o[0]
        self.kind = &k[0]
        self.eos = &e[0] if len(eos) else NULL
        self.n_eos = <int32_t>len(eos)
        self.size = vocab.size
        self.n_words = (vocab.size + 31) // 32
        self._vocab = vocab

    def chop_width(self) -> int:
        """The longest token's bytes (the tokens sorted for the chop first)."""
        self.sort_by_bytes()
        return self.max_len

    def prepare_chop(self) -> None:
        """Sort the tokens for the chop's walks now (:meth:`sort_by_bytes`), not in the
        first jump-forward step."""
        self.sort_by_bytes()

    cdef int sort_by_bytes(self) except -1:
        """Make :attr:`by_bytes` (once): the text tokens in byte order, for the chop's
        walks; and :attr:`prefixes`, the strings some text token strictly extends (the
        walk's first question, asked of each suffix of the tail: one hash probe where two
        binary searches over the sorted tokens would touch memory the step left cold)."""
        if self._by_bytes_keep is not None:
            return 0
        vocab = self._vocab
        tb = vocab.token_bytes
        ids = sorted(vocab.text_token_ids().tolist(), key=lambda t: tb[t])
        arr = np.asarray(ids if ids else [0], dtype=np.int32)
        cdef const int32_t[::1] a = arr
        n_pre = sum(max(0, len(tb[t]) - 1) for t in ids)
        # more slots than prefixes, duplicates counted (a third as many are distinct in Llama 3)
        table = np.full(1 << max(4, n_pre.bit_length()), -1, dtype=np.int64)
        cdef int64_t[::1] slots = table
        cdef uint64_t mask = <uint64_t>(table.shape[0] - 1), h, k
        cdef int64_t i, length, off, e, n_ids = len(ids)
        cdef int32_t t
        with nogil:  # each proper prefix of each token, once
            for i in range(n_ids):
                t = a[i]
                off = self.offsets[t]
                h = hash_basis()
                for length in range(1, self.offsets[t + 1] - off):
                    h = hash_mix(h, self.blob[off + length - 1])
                    k = mix64(h) & mask
                    while True:
                        e = slots[k]
                        if e < 0:
                            slots[k] = (<int64_t>t << 32) | length
                            break
                        if (e & 0xffffffffLL) == length and memcmp(self.blob + self.offsets[<int32_t>(e >> 32)],
                                                                 self.blob + off, <size_t>length) == 0:
                            break
                        k = (k + 1) & mask
        self._prefixes_keep = table
        self.prefixes = &slots[0]
        self.prefix_mask = mask
        self._by_bytes_keep = arr
        self.by_bytes = &a[0]
        self.n_by_bytes = <int32_t>len(ids)
        self.max_len = <int32_t>max((len(tb[t]) for t in ids), default=0)
        return 0

    cdef bint extends_some(self, const uint8_t* s, int64_t n) noexcept nogil:
        """Does a text token strictly extend ``s[:n]`` (``n`` > 0; :meth:`sort_by_bytes` made)?"""
        cdef uint64_t k = hash_bytes(s, n) & self.prefix_mask
        cdef int64_t e
        while True:
            e = self.prefixes[k]
            if e < 0:
                return False
            if (e & 0xffffffffLL) == n and memcmp(self.blob + self.offsets[<int32_t>(e >> 32)], s, <size_t>n) == 0:
                return True
            k = (k + 1) & self.prefix_mask


cdef class Session:
    """One matcher of a masklab strategy: ``Session(core, ops_capsule, vocab_table)``.

    ``core`` is the strategy's C state for one sequence; ``ops_capsule`` its module's
    ``ops_capsule()``.  The methods follow :class:`toolkit.core.protocol.Matcher` (the
    Python matcher classes delegate to them); ``error_text(code, value)`` of the core
    makes the message of a failure."""

    def __init__(self, core, capsule, VocabTable vocab not None):
        if not PyCapsule_IsValid(capsule, b"masklab.StrategyOps"):
            raise TypeError("not a masklab.StrategyOps capsule")
        self.ops = <const StrategyOps*>PyCapsule_GetPointer(capsule, b"masklab.StrategyOps")
        self.core = core
        self.cp = <void*>core
        self.V = vocab

    # ------------------------------------------------------------- C --

    cdef void _fail(self) noexcept nogil:
        if not self.failed:
            self.failed = True
            self.err_code = 0
            self.err_value = 0
            self.ops.take_error(self.cp, &self.err_code, &self.err_value)

    cdef bint _accepting(self) noexcept nogil:
        cdef int r = self.ops.accepting(self.cp)
        if r < 0:
            self._fail()
            return False
        return r != 0

    cdef int c_accept(self, int32_t t) noexcept nogil:
        """``accept_token(t)``: 1 accepted, 0 refused (state unchanged)."""
        cdef int r
        cdef const uint64_t* rec
        cdef uint8_t kind
        cdef int32_t n
        if t < 0 or t >= self.V.size:
            return 0
        rec = self.V.rec + 2 * <int64_t>t  # (one cache line: the kind, the length, the bytes)
        kind = <uint8_t>(rec[0] & 0xFF)
        if kind == K_EOS:
            if self.failed or self.n_eos > 0 or self._accepting():
                self.n_eos += 1
                self.last_eos = t
                return 1
            return 0
        if self.failed or self.n_eos > 0 or kind != K_TEXT:
            return 0
        if self.n_text >= self.hist_cap and grow(<void**>&self.hist, &self.hist_cap, self.n_text + 1,
                                                 sizeof(int32_t)) < 0:
            self.failed = True  # out of memory for the history: the sticky error, as any failure
            self.err_code = ERR_MEMORY
            self.err_value = self.n_text + 1
            return 0
        n = <int32_t>(rec[0] >> 8)
        r = self.ops.advance(self.cp, <token_t>t, <const uint8_t*>&rec[1] if n <= 8 else self.V.blob + rec[1], n)
        if r < 0:
            self._fail()
            return 0
        if r == 0:
            return 0
        self.hist[self.n_text] = t
        self.n_text += 1
        return 1

    cdef void c_rollback(self, int64_t n) noexcept nogil:
        """Undo the last ``n`` tokens (the caller checked ``n``)."""
        cdef int64_t k = min(n, <int64_t>self.n_eos)
        self.n_eos -= <int32_t>k
        n -= k
        while n > 0:
            self.ops.undo(self.cp)
            self.n_text -= 1
            n -= 1

    cdef int c_try_bytes(self, const uint8_t* data, int32_t n) noexcept nogil:
        """Can ``data`` follow?  1 yes, 0 no (the state unchanged either way), < 0 a
        failure (the session fails).  The core reads raw bytes: token id -1."""
        cdef int r = self.ops.advance(self.cp, <token_t>-1, data, n)
        if r == 1:
            self.ops.undo(self.cp)
        elif r < 0:
            self._fail()
        return r

    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil:
        """The bytes the core may take next into ``out[0..3]`` (its ``next_bytes``; all 256
        where it gives none): 2 exactly those, 1 a superset, 0 all, < 0 a failure (the
        session fails)."""
        cdef int r = 0
        if self.ops.next_bytes != NULL:
            r = self.ops.next_bytes(self.cp, out)
            if r < 0:
                self._fail()
                return r
        if r == 0:
            out[0] = out[1] = out[2] = out[3] = ~(<uint64_t>0)
        return r

    cdef int64_t c_forced_bytes(self, uint8_t* out, int64_t limit) noexcept nogil:
        """The forced bytes into ``out`` (at most ``limit``): while the state does not
        accept, the one byte the core takes, taken; then all undone.  Only the bytes of
        the core's ``next_bytes`` are tried, until two are taken; an exact set is read
        without a try."""
        cdef int64_t n = 0
        cdef int32_t b, only, count, w
        cdef uint64_t cand[4]
        cdef uint64_t bits
        cdef uint8_t byte
        cdef int r, given
        if self.failed or self.n_eos > 0:
            return 0
        while n < limit and not self.failed:
            given = self.c_next_bytes(cand)
            if given < 0:
                break
            count = 0
            only = -1
            if given == 2:  # exact: forced when it holds one byte (and the state does not accept)
                count = popcount64(cand[0]) + popcount64(cand[1]) + popcount64(cand[2]) + popcount64(cand[3])
                if count != 1 or self._accepting():
                    break
                for w in range(4):
                    if cand[w] != 0:
                        only = w * 64 + ctz64(cand[w])
            else:
                if self._accepting():
                    break
                r = 0
                for w in range(4):
                    bits = cand[w]
                    while bits != 0 and count < 2:
                        b = w * 64 + ctz64(bits)
                        bits &= bits - 1
                        byte = <uint8_t>b
                        r = self.c_try_bytes(&byte, 1)
                        if r < 0:
                            count = 0
                            break
                        if r == 1:
                            count += 1
                            only = b
                    if r < 0 or count > 1:
                        break
                if count != 1:
                    break
            byte = <uint8_t>only
            if self.ops.advance(self.cp, <token_t>-1, &byte, 1) != 1:
                break
            out[n] = byte
            n += 1
        for b in range(n):
            self.ops.undo(self.cp)
        return n

    cdef int _key_cmp(self, int32_t j, const uint8_t* p, int64_t n) noexcept nogil:
        """The sorted token ``j``'s first ``n`` bytes against ``p``: < 0, 0 (it starts with
        ``p``), > 0; a token shorter than ``p`` that ``p`` starts with is below it."""
        cdef int32_t t = self.V.by_bytes[j]
        cdef int64_t off = self.V.offsets[t], m = self.V.offsets[t + 1] - off
        cdef int c = memcmp(self.V.blob + off, p, <size_t>(m if m < n else n))
        if c != 0:
            return c
        return -1 if m < n else 0

    cdef int32_t _first_at_least(self, const uint8_t* p, int64_t n, int32_t lo, int32_t hi,
                                 bint past) noexcept nogil:
        """The first sorted index in ``[lo, hi)`` whose token's prefix compares >= ``p``
        (``past``: > ``p``, i.e. the first token after those that start with ``p``)."""
        cdef int32_t mid
        cdef int c
        while lo < hi:
            mid = lo + (hi - lo) // 2
            c = self._key_cmp(mid, p, n)
            if c < 0 or (past and c == 0):
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef int c_extended(self, const uint8_t* s, int64_t ns, ChopScratch* w) noexcept nogil:
        """Does a text token strictly extend ``s`` with bytes the core takes from its
        state (each prefix in turn)?  1 / 0, < 0 a failure.  A depth-first walk of the
        sorted tokens under ``s``: at each depth only the bytes of the core's
        ``next_bytes`` that some token has there are tried, each taken byte undone at
        the end (``w`` holds the walk, see :c:type:`ChopScratch`)."""
        cdef int32_t n_keys = self.V.n_by_bytes, d = 0, b, lo, hi, t
        cdef uint64_t bits
        cdef uint64_t* cand
        cdef int r, found = 0
        if ns >= self.V.max_len or (ns > 0 and not self.V.extends_some(s, ns)):  # no token extends s
            return 0
        memcpy(w.prefix, s, <size_t>ns)
        lo = self._first_at_least(s, ns, 0, n_keys, False)
        hi = self._first_at_least(s, ns, lo, n_keys, True)
        if lo == hi:
            return 0
        w.lo[0], w.hi[0], w.next_byte[0] = lo, hi, 0
        if self.c_next_bytes(w.sets) < 0:
            return -1
        while d >= 0:
            # the next byte to try at depth d: in the core's set, from next_byte on
            cand = w.sets + 4 * d
            b = w.next_byte[d]
            bits = 0
            while b < BYTES:
                bits = cand[b >> 6] >> (b & 63)
                if bits != 0:
                    b += ctz64(bits)
                    break
                b = (b | 63) + 1
            if b >= BYTES:  # this depth is done: back up one byte
                if d > 0:
                    self.ops.undo(self.cp)
                d -= 1
                continue
            w.next_byte[d] = b + 1
            w.prefix[ns + d] = <uint8_t>b
            lo = self._first_at_least(w.prefix, ns + d + 1, w.lo[d], w.hi[d], False)
            if lo == w.hi[d] or self._key_cmp(lo, w.prefix, ns + d + 1) != 0:
                continue  # no token has this byte here
            r = self.ops.advance(self.cp, <token_t>-1, w.prefix + ns + d, 1)
            if r < 0:
                found = r
                break
            if r == 0:
                continue
            t = self.V.by_bytes[lo]
            if self.V.offsets[t + 1] - self.V.offsets[t] == ns + d + 1:  # a token ends here: found
                d += 1
                found = 1
                break
            hi = self._first_at_least(w.prefix, ns + d + 1, lo, w.hi[d], True)
            d += 1
            w.lo[d], w.hi[d], w.next_byte[d] = lo, hi, 0
            if self.c_next_bytes(w.sets + 4 * d) < 0:
                found = -1
                break
        while d > 0:
            self.ops.undo(self.cp)
            d -= 1
        return found

    cdef int64_t c_chop_start(self, const uint8_t* forced, int64_t nf, const uint8_t* tail, int64_t nt,
                              ChopScratch* w) noexcept nogil:
        """Where the longest suffix of ``tail`` starts that a text token strictly extends
        with bytes the core takes after ``forced``; -1 for none (or a failure, which
        fails the session)."""
        cdef int64_t start, out = -1
        cdef int r
        if self.failed or self.n_eos > 0 or nf <= 0:
            return -1
        r = self.ops.advance(self.cp, <token_t>-1, forced, <int32_t>nf)
        if r != 1:
            if r < 0:
                self._fail()
            return -1
        for start in range(nt):
            r = self.c_extended(tail + start, nt - start, w)
            if r < 0:
                self._fail()
                break
            if r == 1:
                out = start
                break
        self.ops.undo(self.cp)
        return out

    cdef int32_t c_fill_draft(self, const int32_t* draft, int32_t k, word_t* rows) noexcept nogil:
        """The draft masks into ``rows`` (k + 1 rows); the tokens accepted, undone."""
        cdef int32_t n_words = self.V.n_words, i, t, n = 0
        self.c_fill(rows)
        for i in range(k):
            t = draft[i]
            if t < 0 or t >= self.V.size or not ((rows[<int64_t>i * n_words + (t >> 5)] >> (t & 31)) & 1):
                break
            if not self.c_accept(t):
                break
            n += 1
            self.c_fill(rows + <int64_t>(i + 1) * n_words)
        if n < k:
            memset(rows + <int64_t>(n + 1) * n_words, 0, <size_t>(k - n) * n_words * sizeof(word_t))
        self.c_rollback(n)
        return n

    cdef void c_fill_tree(self, const int32_t* tokens, const int32_t* parents, int32_t n, word_t* rows,
                          uint8_t* ok, int32_t* path) noexcept nogil:
        """The tree's masks into ``rows`` (n + 1), ``ok`` per node; ``path`` (n ints) is
        scratch: the nodes consumed now.  The caller checked ``parents[i] < i``."""
        cdef int32_t n_words = self.V.n_words, depth = 0, i, j, p, t, keep, chain_len
        cdef word_t* prow
        self.c_fill(rows)
        for i in range(n):
            p = parents[i]
            t = tokens[i]
            ok[i] = 0
            prow = rows + <int64_t>(p + 1) * n_words
            if (p >= 0 and not ok[p]) or t < 0 or t >= self.V.size or not ((prow[t >> 5] >> (t & 31)) & 1):
                memset(rows + <int64_t>(i + 1) * n_words, 0, n_words * sizeof(word_t))
                continue
            # the parent's chain, root first, into path[depth ..): compare with the path taken
            chain_len = 0
            j = p
            while j >= 0:
                chain_len += 1
                j = parents[j]
            keep = 0
            j = p
            # walk down: the chain's node at depth d is the ancestor chain_len - 1 - d up from p
            while keep < depth and keep < chain_len and path[keep] == _ancestor(parents, p, chain_len - 1 - keep):
                keep += 1
            self.c_rollback(depth - keep)
            depth = keep
            while depth < chain_len:  # back down the parent's chain (taken before, so taken again)
                j = _ancestor(parents, p, chain_len - 1 - depth)
                self.c_accept(tokens[j])
                path[depth] = j
                depth += 1
            if self.c_accept(t):
                ok[i] = 1
                path[depth] = i
                depth += 1
                self.c_fill(rows + <int64_t>(i + 1) * n_words)
            else:
                memset(rows + <int64_t>(i + 1) * n_words, 0, n_words * sizeof(word_t))
        self.c_rollback(depth)

    cdef int32_t c_fill(self, word_t* row) noexcept nogil:
        """``fill_bitmask``: overwrite ``row``; returns the tokens it allows."""
        cdef int32_t n_words = self.V.n_words, i, e
        cdef int r
        cdef int64_t count = 0
        self.sliced = False
        self.n_masks += 1
        if not self.failed and self.n_eos == 0:
            count = -1
            if self.ops.fill_over != NULL:  # (the core writes every word)
                r = self.ops.fill_over(self.cp, row, n_words, &count)
            else:
                memset(row, 0, n_words * sizeof(word_t))
                r = self.ops.fill(self.cp, row, n_words, &count)
            if r < 0:
                self._fail()
                memset(row, 0, n_words * sizeof(word_t))
                count = 0
            else:
                self.sliced = r == 1
        else:
            memset(row, 0, n_words * sizeof(word_t))
        if count < 0:
            count = masklab_popcount_row(row, n_words)
        if self.n_eos > 0 or self.failed or self._accepting():
            for i in range(self.V.n_eos):  # EOS ids are never text: each adds one
                e = self.V.eos[i]
                row[e >> 5] |= (<word_t>1) << (e & 31)
            count += self.V.n_eos
        return <int32_t>count

    # -------------------------------------------------------- protocol --

    def accept_token(self, token_id) -> bool:
        t = int(token_id)
        if t < 0 or t >= self.V.size:
            return False
        return bool(self.c_accept(<int32_t>t))

    def fill_bitmask(self, bitmask, row=0):
        """Overwrite row ``row`` of a 2-D bitmask (or a 1-D row); ``(allowed, sliced)``."""
        cdef word_t* ptr = _row_pointer(bitmask, row, self.V.n_words)
        cdef int32_t n
        with nogil:
            n = self.c_fill(ptr)
        return n, bool(self.sliced)

    def rollback(self, int64_t n):
        if n < 0 or n > self.n_text + self.n_eos:
            raise ValueError(f"cannot roll back {n} tokens, {self.n_text + self.n_eos} accepted")
        self.c_rollback(n)

    def is_accepting(self) -> bool:
        return self.n_eos > 0 or bool(self._accepting())

    def is_terminated(self) -> bool:
        return self.n_eos > 0

    @property
    def num_tokens(self):
        return self.n_text + self.n_eos

    @property
    def error(self):
        """None, or why the session is in the sticky error state."""
        if not self.failed:
            return None
        if self.err_text is None:
            self.err_text = self.core.error_text(self.err_code, self.err_value)
        return self.err_text

    def last_token(self):
        """The last token consumed (None: none yet)."""
        if self.n_eos > 0:
            return int(self.last_eos)
        return int(self.hist[self.n_text - 1]) if self.n_text > 0 else None

    def allows_bytes(self, const uint8_t[::1] data) -> bool:
        """Can ``data`` (raw bytes) follow what was consumed?  The state is unchanged."""
        cdef int r
        if self.failed or self.n_eos > 0:
            return False
        if data.shape[0] == 0:
            return True
        with nogil:
            r = self.c_try_bytes(&data[0], <int32_t>data.shape[0])
        return r == 1

    def forced_bytes(self, int64_t limit):
        """The bytes every completion starts with (see the protocol), at most ``limit``
        (0 .. 2**20: the buffer is allocated up front)."""
        if not 0 <= limit <= 1 << 20:
            raise ValueError(f"forced_bytes: limit must be in [0, {1 << 20}], got {limit}")
        cdef bytearray out = bytearray(max(limit, 0))
        cdef uint8_t* buf = <uint8_t*>(<char*>out) if limit > 0 else NULL
        cdef int64_t n = 0
        if limit > 0:
            with nogil:
                n = self.c_forced_bytes(buf, limit)
        return bytes(out[:n])

    def chop_tokens(self, const uint8_t[::1] forced, tokens) -> int:
        """:func:`toolkit.core.forced.chop_count` of ``tokens`` (text token ids, the
        canonical tokens of ``forced`` after its last mark) in one C call, the state
        unchanged: how many trailing tokens to drop, the fewest that cover the longest
        suffix of the last :data:`~toolkit.core.forced.MAX_LOOKBACK` (4) tokens' bytes
        that a text token strictly extends with bytes the grammar allows after
        ``forced`` (:meth:`c_chop_start`)."""
        cdef int64_t n = len(tokens), j, t, r
        cdef int32_t ids[4]
        cdef int64_t lo = n - 4 if n > 4 else 0
        if forced.shape[0] == 0 or n == 0:
            return 0
        self._chop_scratch()
        for j in range(lo, n):
            t = tokens[j]
            if not 0 <= t < self.V.size:
                raise ValueError(f"chop_tokens: {t} is no token id")
            ids[j - lo] = <int32_t>t
        with nogil:
            r = self.c_chop_count(&forced[0], forced.shape[0], ids, n - lo)
        return r

    cdef int64_t c_chop_count(self, const uint8_t* forced, int64_t nf, const int32_t* toks,
                              int64_t n) noexcept nogil:
        """:meth:`chop_tokens` of the ``n`` ids ``toks`` (the chop's scratch made): how
        many trailing ones to drop."""
        cdef int64_t k, j, t, nt = 0, start, covered = 0, m
        cdef int64_t lo = n - 4 if n > 4 else 0
        if nf <= 0 or n <= 0:
            return 0
        for j in range(lo, n):  # the tail: the last tokens' bytes, at most the longest token's
            t = toks[j]
            m = self.V.offsets[t + 1] - self.V.offsets[t]
            memcpy(self.chop_tail + nt, self.V.blob + self.V.offsets[t], <size_t>m)
            nt += m
        j = nt - self.V.max_len if nt > self.V.max_len else 0
        start = self.c_chop_start(forced, nf, self.chop_tail + j, nt - j, &self.chop_w) if nt > j else -1
        if start < 0:
            return 0
        for k in range(1, n - lo + 1):
            t = toks[n - k]
            covered += self.V.offsets[t + 1] - self.V.offsets[t]
            if covered >= nt - j - start:
                return k
        return 0

    def forced_tokens_c(self, BpeTable bpe not None, const uint8_t[::1] forced):
        """:func:`toolkit.core.forced.forced_tokens` of ``forced`` (the bytes the grammar
        forces now) all in C (:meth:`c_forced_tokens`): the ids, or ``None`` where the C
        tokenizer cannot answer (the caller takes the Python rule)."""
        cdef int64_t nf = forced.shape[0], k, cap
        if nf == 0:
            return []
        self._chop_scratch()
        cap = self.V.max_len + nf + 1
        cdef uint8_t* b = <uint8_t*>malloc(<size_t>cap)
        cdef int32_t* o = <int32_t*>malloc(<size_t>cap * sizeof(int32_t))
        try:
            if b == NULL or o == NULL:
                raise MemoryError()
            with nogil:
                k = self.c_forced_tokens(bpe, &forced[0], nf, o, b)
            return None if k < 0 else [o[i] for i in range(k)]
        finally:
            free(b)
            free(o)

    cdef int64_t c_forced_tokens(self, BpeTable bpe, const uint8_t* forced, int64_t nf, int32_t* out,
                                 uint8_t* buf) noexcept nogil:
        """llguidance's forced tokens (the module doc of :mod:`toolkit.core.forced`) in C:
        the canonical tokens of the last token's bytes and ``forced`` (``forced`` alone
        when they do not start with that token), the chop, the last token left out.
        ``buf`` and ``out`` hold ``V.max_len + nf`` entries; the chop's scratch is made.
        Returns how many ids went to ``out``, -1 where the tokenizer cannot answer."""
        cdef int64_t n, np_ = 0, keep = 0, k, i
        cdef int32_t last
        cdef int64_t cap = self.V.max_len + nf
        if self.n_eos == 0 and self.n_text > 0:
            last = self.hist[self.n_text - 1]
            if self.V.kind[last] == K_TEXT:
                np_ = self.V.offsets[last + 1] - self.V.offsets[last]
        if np_ > 0:
            memcpy(buf, self.V.blob + self.V.offsets[last], <size_t>np_)
            memcpy(buf + np_, forced, <size_t>nf)
            n = bpe.encode(buf, np_ + nf, out, cap)
            if n < 0:
                return -1
            keep = 1 if n > 0 and out[0] == last else 0
        if keep == 0:
            n = bpe.encode(forced, nf, out, cap)
            if n < 0:
                return -1
        k = self.c_chop_count(forced, nf, out + keep, n - keep)
        n -= k
        if keep:
            for i in range(n - 1):
                out[i] = out[i + 1]
            n -= 1
        return n if n > 0 else 0

    cdef int _chop_scratch(self) except -1:
        """The chop's scratch, made once (for the vocabulary's longest token)."""
        cdef int64_t m
        cdef uint8_t* tail
        if self.chop_tail != NULL:
            return 0
        self.V.sort_by_bytes()
        m = <int64_t>self.V.max_len + 1
        self.chop_w.prefix = <uint8_t*>malloc(<size_t>m)
        self.chop_w.sets = <uint64_t*>malloc(<size_t>m * 4 * sizeof(uint64_t))
        self.chop_w.lo = <int32_t*>malloc(<size_t>m * 3 * sizeof(int32_t))
        tail = <uint8_t*>malloc(<size_t>m * 4)
        if self.chop_w.prefix == NULL or self.chop_w.sets == NULL or self.chop_w.lo == NULL or tail == NULL:
            free(tail)
            self._free_chop()
            raise MemoryError()
        self.chop_w.hi = self.chop_w.lo + m
        self.chop_w.next_byte = self.chop_w.lo + 2 * m
        self.chop_tail = tail
        return 0

    def next_bytes(self):
        """The bytes the core may take next (its ``next_bytes``; all 256 where the core
        gives none), as 256 booleans, and what they are: 2 exactly those, 1 a superset,
        0 all bytes (the core gives none)."""
        cdef uint64_t out[4]
        cdef int r
        with nogil:
            r = self.c_next_bytes(out)
        if r < 0:
            raise RuntimeError(self.error)
        words = np.asarray([out[0], out[1], out[2], out[3]], dtype=np.uint64)
        return np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool), r

    def fill_draft_bitmasks(self, draft, bitmask, int64_t row=0):
        """The draft masks of ``draft`` into rows ``row .. row + k`` of a 2-D int32
        bitmask (see the protocol); the tokens accepted."""
        cdef cnp.ndarray d = np.ascontiguousarray(draft, dtype=np.int32)
        cdef int32_t k = <int32_t>d.shape[0], n
        cdef word_t* rows = _rows_pointer(bitmask, row, k + 1, self.V.n_words)
        with nogil:
            n = self.c_fill_draft(<const int32_t*>cnp.PyArray_DATA(d), k, rows)
        return n

    def fill_draft_tree(self, tokens, parents, bitmask, int64_t row=0):
        """The draft tree's masks into rows ``row .. row + n`` (see the protocol); which
        nodes were accepted (a bool array)."""
        cdef cnp.ndarray tk = np.ascontiguousarray(tokens, dtype=np.int32)
        cdef cnp.ndarray pa = np.ascontiguousarray(parents, dtype=np.int32)
        cdef int32_t n = <int32_t>tk.shape[0], i
        if pa.shape[0] != n:
            raise ValueError(f"{n} tokens but {pa.shape[0]} parents")
        cdef const int32_t* pp = <const int32_t*>cnp.PyArray_DATA(pa)
        for i in range(n):  # C ints: no Python object per node
            if not -1 <= pp[i] < i:
                raise ValueError(f"node {i}: parent {pp[i]} is not an earlier node or -1")
        cdef word_t* rows = _rows_pointer(bitmask, row, n + 1, self.V.n_words)
        ok = np.zeros(n, dtype=np.uint8)
        path = np.zeros(max(n, 1), dtype=np.int32)
        cdef uint8_t[::1] okv = ok
        cdef int32_t[::1] pv = path
        with nogil:
            self.c_fill_tree(<const int32_t*>cnp.PyArray_DATA(tk), <const int32_t*>cnp.PyArray_DATA(pa), n, rows,
                             &okv[0] if n else NULL, &pv[0])
        return ok.astype(bool)

    def work(self):
        """The work counters of the cores behind this session (a dict of
        :class:`toolkit.core.protocol.MaskStats`'s fields, ``masks`` included)."""
        cdef WorkCounters w = self.work_before
        self.ops.work(self.cp, &w)
        return {"masks": self.n_masks, "trie_nodes": w.trie_nodes, "lexer_steps": w.lexer_steps,
                "earley_items": w.earley_items, "tokens_checked": w.tokens_checked,
                "tokens_sliced": w.tokens_sliced, "tokens_cached": w.tokens_cached}

    def restart(self, core):
        """Back to the start with a fresh ``core``; clears the error state.  The work
        counters go on (the replaced core's are kept)."""
        self.ops.work(self.cp, &self.work_before)
        self.core = core
        self.cp = <void*>core
        self.n_text = 0
        self.n_eos = 0
        self.failed = False
        self.err_text = None

    def fork(self, core):
        """A session over ``core`` (a copy of this one's) in the same protocol state."""
        cdef Session other = Session.__new__(Session)
        other.ops = self.ops
        other.core = core
        other.cp = <void*>core
        other.V = self.V
        other.n_text = self.n_text
        other.n_eos = self.n_eos
        other.failed = self.failed
        other.err_code = self.err_code
        other.err_value = self.err_value
        other.err_text = self.err_text
        other.last_eos = self.last_eos
        if self.n_text:
            if grow(<void**>&other.hist, &other.hist_cap, self.n_text, sizeof(int32_t)) < 0:
                raise MemoryError()
            memcpy(other.hist, self.hist, <size_t>self.n_text * sizeof(int32_t))
        return other

    def __dealloc__(self):
        free(self.hist)
        self._free_chop()

    cdef void _free_chop(self) noexcept:
        free(self.chop_w.prefix)
        free(self.chop_w.sets)
        free(self.chop_w.lo)
        free(self.chop_tail)
        self.chop_w.prefix = NULL
        self.chop_w.sets = NULL
        self.chop_w.lo = NULL
        self.chop_tail = NULL


cdef class NativeBatch:
    """Sessions stepped together (``toolkit.core.batch`` for the step's contract).

    ``NativeBatch(sessions, lanes, threads)``: ``lanes`` lists the rows of each lane
    (rows sharing a compiled grammar in one lane); ``threads`` workers take lanes."""

    cdef list sessions
    cdef PyObject** ptrs
    cdef int32_t* lane_off
    cdef int32_t* lane_rows
    cdef int32_t n, n_lanes
    cdef long long next_lane
    cdef readonly int threads
    cdef object pool
    cdef const int32_t* tok
    cdef word_t* mask
    cdef int64_t stride
    cdef signed char* acc_out
    cdef int32_t* allowed_out
    cdef double* secs_out
    # lookahead (set_lookahead): after a fill that allows at most la_k tokens, each one's forced run
    cdef int32_t la_k
    cdef int64_t la_cap, la_pool, la_maxlen
    cdef int32_t* la_count
    cdef int32_t* la_tok
    cdef int32_t* la_n
    cdef int32_t* la_off
    cdef int32_t* la_run
    cdef double* la_secs
    cdef BpeTable la_bpe
    cdef object la_keep

    def __cinit__(self):
        self.ptrs = NULL
        self.lane_off = NULL
        self.lane_rows = NULL
        self.la_k = 0

    def __init__(self, sessions, lanes, int threads):
        cdef int32_t i, k, j
        self.sessions = list(sessions)
        self.n = <int32_t>len(self.sessions)
        for s in self.sessions:
            if not isinstance(s, Session):
                raise TypeError(f"a native batch steps Sessions, got {type(s).__name__}")
        self.ptrs = <PyObject**>malloc(max(1, self.n) * sizeof(PyObject*))
        self.lane_off = <int32_t*>malloc((len(lanes) + 1) * sizeof(int32_t))
        self.lane_rows = <int32_t*>malloc(max(1, self.n) * sizeof(int32_t))
        if self.ptrs == NULL or self.lane_off == NULL or self.lane_rows == NULL:
            raise MemoryError()
        for i in range(self.n):
            self.ptrs[i] = <PyObject*>self.sessions[i]
        seen = sorted(r for lane in lanes for r in lane)
        if seen != list(range(self.n)):
            raise ValueError("lanes must hold every row exactly once")
        self.n_lanes = <int32_t>len(lanes)
        k = 0
        for j in range(self.n_lanes):
            self.lane_off[j] = k
            for r in lanes[j]:
                self.lane_rows[k] = r
                k += 1
        self.lane_off[self.n_lanes] = k
        self.threads = max(1, min(threads, max(1, self.n_lanes)))
        self.pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None

    def __dealloc__(self):
        free(self.ptrs)
        free(self.lane_off)
        free(self.lane_rows)

    cdef void _work(self) noexcept nogil:
        cdef long long lane
        cdef int32_t k, i, acc
        cdef token_t t
        cdef double t0
        cdef uint8_t* fbuf = NULL
        if self.la_k > 0:  # the lookahead's scratch: the forced bytes, then the tokenizer's input
            fbuf = <uint8_t*>malloc(<size_t>(2 * self.la_cap + self.la_maxlen + 1))
        while True:
            lane = masklab_fetch_add(&self.next_lane, 1)
            if lane >= self.n_lanes:
                free(fbuf)
                return
            for k in range(self.lane_off[lane], self.lane_off[lane + 1]):
                i = self.lane_rows[k]
                t = self.tok[i]
                if t == T_SKIP:
                    self.acc_out[i] = -1
                    self.allowed_out[i] = -1
                    self.secs_out[i] = NAN
                    continue
                t0 = _now()
                acc = -1
                if t != T_NO_TOKEN:
                    acc = (<Session>self.ptrs[i]).c_accept(t)
                self.allowed_out[i] = (<Session>self.ptrs[i]).c_fill(self.mask + i * self.stride)
                self.acc_out[i] = <signed char>acc
                self.secs_out[i] = _now() - t0
                if self.la_k > 0:
                    t0 = _now()
                    self._lookahead(i, fbuf)
                    self.la_secs[i] = _now() - t0

    cdef void _lookahead(self, int32_t i, uint8_t* fbuf) noexcept nogil:
        """Row ``i``'s table after its fill: when its mask allows 1 to ``la_k`` tokens,
        each allowed token ``t`` (``la_tok``) with the forced run that would follow it,
        found by accepting ``t``, the forced bytes and tokens, and rolling ``t`` back:
        ``la_n`` its length (0 none; -1 unknown: the tokenizer cannot answer, the bytes
        fill ``la_cap``, the row's pool is full, or not a text token), the tokens at
        ``la_off`` in the row's pool of ``la_pool`` tokens.  ``la_count[i]``: the
        entries, -1 no table (no scratch, a failed or ended session, a wider mask)."""
        cdef int32_t allowed = self.allowed_out[i], j = 0, w, t, e
        cdef int64_t nb, k, pos = 0
        cdef uint64_t bits
        cdef word_t* row = self.mask + i * self.stride
        cdef int32_t* pool = self.la_run + <int64_t>i * self.la_pool
        self.la_count[i] = -1
        if fbuf == NULL or allowed < 1 or allowed > self.la_k or (<Session>self.ptrs[i]).failed \
                or (<Session>self.ptrs[i]).n_eos > 0:
            return
        for w in range(self.stride):
            bits = row[w]
            while bits != 0 and j < self.la_k:
                t = w * 32 + ctz64(bits)
                bits &= bits - 1
                if t >= (<Session>self.ptrs[i]).V.size:
                    break
                e = i * self.la_k + j
                self.la_tok[e] = t
                self.la_n[e] = -1
                self.la_off[e] = <int32_t>pos
                j += 1
                if (<Session>self.ptrs[i]).V.kind[t] == K_EOS:
                    self.la_n[e] = 0
                    continue
                if (<Session>self.ptrs[i]).V.kind[t] != K_TEXT or (<Session>self.ptrs[i]).c_accept(t) != 1:
                    continue
                if (<Session>self.ptrs[i]).n_eos == 0 and not (<Session>self.ptrs[i]).failed:
                    nb = (<Session>self.ptrs[i]).c_forced_bytes(fbuf, self.la_cap)
                    if nb == 0:
                        self.la_n[e] = 0
                    elif nb < self.la_cap and pos + nb + self.la_maxlen <= self.la_pool:
                        k = (<Session>self.ptrs[i]).c_forced_tokens(self.la_bpe, fbuf, nb, pool + pos,
                                                                     fbuf + self.la_cap)
                        self.la_n[e] = <int32_t>k
                        if k > 0:
                            pos += k
                (<Session>self.ptrs[i]).c_rollback(1)
        self.la_count[i] = j

    def set_lookahead(self, BpeTable bpe, int32_t[::1] count, int32_t[:, ::1] tok, int32_t[:, ::1] n,
                      int32_t[:, ::1] off, int32_t[:, ::1] run, double[::1] secs, int64_t cap):
        """From now on each fill also makes its row's lookahead table (see
        :meth:`_lookahead`) into ``count`` (a row each), ``tok``, ``n`` and ``off`` (a row
        each, ``k`` columns: the widest mask looked ahead) and ``run`` (a row's pool of
        runs, at least ``cap + max_len`` tokens), ``cap`` the forced bytes looked at;
        ``secs`` each row's seconds of it.  ``bpe`` None turns it off."""
        cdef int64_t m
        self.la_k = 0
        self.la_keep = None
        if bpe is None or self.n == 0:
            return
        m = (<Session>self.ptrs[0]).V.max_len
        if cap < 1 or count.shape[0] < self.n or secs.shape[0] < self.n or tok.shape[0] < self.n \
                or n.shape[0] < self.n or off.shape[0] < self.n or run.shape[0] < self.n \
                or tok.shape[1] != n.shape[1] or off.shape[1] != n.shape[1] or run.shape[1] < cap + m \
                or tok.shape[1] < 1:
            raise ValueError("set_lookahead: count and secs need a row per session, tok, n and off k >= 1 "
                             "columns, run cap + max_len")
        (<Session>self.ptrs[0]).V.sort_by_bytes()
        for sess in self.sessions:
            (<Session>sess)._chop_scratch()
        count[:] = -1
        self.la_bpe = bpe
        self.la_cap = cap
        self.la_maxlen = m
        self.la_pool = run.shape[1]
        self.la_count = &count[0]
        self.la_tok = &tok[0, 0]
        self.la_n = &n[0, 0]
        self.la_off = &off[0, 0]
        self.la_run = &run[0, 0]
        self.la_secs = &secs[0]
        self.la_keep = (bpe, count, tok, n, off, run, secs)
        self.la_k = <int32_t>tok.shape[1]

    def lookahead_runs(self, const int64_t[::1] ids, const int64_t[::1] rows, const uint8_t[::1] live,
                       const uint8_t[::1] held) -> dict:
        """Row ``i`` (live when ``live[i]``, not ``held[i]``) drew ``ids[rows[i]]``: row ->
        the forced run its table holds after that id (``la_n > 0``), a dict of lists made
        here (it is on the decode loop's critical path)."""
        cdef int32_t i, j, e, m, found = 0
        cdef int64_t t
        cdef int32_t* hit
        if rows.shape[0] < self.n or live.shape[0] < self.n or held.shape[0] < self.n:
            raise ValueError(f"lookahead_runs: every array needs {self.n} rows")
        for i in range(self.n):
            if not 0 <= rows[i] < ids.shape[0]:
                raise ValueError(f"lookahead_runs: row {i} names slot {rows[i]}, there are {ids.shape[0]}")
        out = {}
        if self.la_k == 0 or self.n == 0:
            return out
        hit = <int32_t*>malloc(self.n * sizeof(int32_t))
        if hit == NULL:
            raise MemoryError()
        with nogil:
            for i in range(self.n):
                hit[i] = -1
                if not live[i] or held[i]:
                    continue
                t = ids[rows[i]]
                for j in range(self.la_count[i] if self.la_count[i] > 0 else 0):
                    e = i * self.la_k + j
                    if self.la_tok[e] == t:
                        if self.la_n[e] > 0:
                            hit[i] = e
                            found += 1
                        break
        try:
            for i in range(self.n):
                if hit[i] >= 0:
                    e = hit[i]
                    out[i] = [self.la_run[<int64_t>i * self.la_pool + self.la_off[e] + m] for m in range(self.la_n[e])]
        finally:
            free(hit)
        return out

    def _run(self):
        with nogil:
            self._work()

    def step(self, const int32_t[::1] tokens, int32_t[:, ::1] bitmask, signed char[::1] accepted,
             int32_t[::1] allowed, double[::1] seconds):
        """Accept ``tokens`` and fill ``bitmask``'s rows (every array checked by the
        caller, :func:`toolkit.core.batch.check_step_args`); results into the three arrays."""
        if self.n == 0:
            return
        self.tok = &tokens[0]
        self.mask = <word_t*>&bitmask[0, 0]
        self.stride = bitmask.shape[1]
        self.acc_out = &accepted[0]
        self.allowed_out = &allowed[0]
        self.secs_out = &seconds[0]
        self.next_lane = 0
        helpers = [self.pool.submit(self._run) for _ in range(self.threads - 1)] if self.pool is not None else []
        with nogil:
            self._work()
        for f in helpers:
            f.result()

    def accept_forced(self, const int64_t[::1] ids, const int64_t[::1] rows, uint8_t[::1] live,
                      const int64_t[::1] n_out, int64_t max_tokens, int32_t[::1] tokens,
                      signed char[::1] accepted, int32_t[::1] n_forced, uint8_t[:, ::1] forced,
                      BpeTable bpe=None, int32_t[::1] n_ftok=None, int32_t[:, ::1] ftok=None) -> int:
        """Jump-forward's step, on the calling thread without the GIL.  Row ``i`` (live
        when ``live[i]``) takes the id its slot ``rows[i]`` drew, ``ids[rows[i]]``, into
        ``tokens[i]`` (SKIP when not live or nothing was drawn) and accepts it
        (``accepted[i]``: 1, 0 refused, -1 not live, -2 nothing drawn: an empty mask).
        A row that accepted a text token with room left (``n_out[i] + 1 < max_tokens``)
        finds the bytes its grammar forces next (:meth:`Session.forced_bytes`, at most
        ``forced.shape[1]``) into its row of ``forced`` (``n_forced[i]`` of them).  A row
        that ends here (nothing drawn, refused, EOS, out of room) is no longer ``live``.

        With ``bpe`` (the vocabulary's :class:`~toolkit.core.bpe.BpeTable`), a row with
        forced bytes (fewer than ``forced.shape[1]``: a full row may have more) also gets
        its forced tokens (:meth:`Session.c_forced_tokens`) into ``ftok[i, :n_ftok[i]]``;
        ``n_ftok[i]`` is -1 where they are left to the caller (no forced bytes, a full
        row, text the C tokenizer cannot answer for).  ``ftok`` needs
        ``forced.shape[1] + max_len`` columns (:attr:`VocabTable.max_len`).
        Returns the tokens accepted."""
        cdef int32_t i, acc, written = 0
        cdef int64_t t, cap = forced.shape[1], k
        cdef uint8_t* buf = NULL
        if rows.shape[0] < self.n or live.shape[0] < self.n or n_out.shape[0] < self.n \
                or tokens.shape[0] < self.n or accepted.shape[0] < self.n or n_forced.shape[0] < self.n \
                or forced.shape[0] < self.n:
            raise ValueError(f"accept_forced: every array needs {self.n} rows")
        for i in range(self.n):
            if not 0 <= rows[i] < ids.shape[0]:
                raise ValueError(f"accept_forced: row {i} names slot {rows[i]}, there are {ids.shape[0]}")
        if cap < 1:
            raise ValueError("accept_forced: forced needs at least one column")
        if bpe is not None:
            if self.n:
                (<Session>self.ptrs[0]).V.sort_by_bytes()
            for s in self.sessions:
                (<Session>s)._chop_scratch()
            if n_ftok is None or ftok is None or n_ftok.shape[0] < self.n or ftok.shape[0] < self.n \
                    or (self.n and ftok.shape[1] < cap + (<Session>self.ptrs[0]).V.max_len):
                raise ValueError("accept_forced: with bpe, n_ftok and ftok need a row per session and ftok "
                                 "forced.shape[1] + max_len columns")
            buf = <uint8_t*>malloc(<size_t>(cap + (<Session>self.ptrs[0]).V.max_len + 1 if self.n else 1))
            if buf == NULL:
                raise MemoryError()
        with nogil:
            for i in range(self.n):
                n_forced[i] = 0
                tokens[i] = T_SKIP
                if buf != NULL:
                    n_ftok[i] = -1
                if not live[i]:
                    accepted[i] = -1
                    continue
                t = ids[rows[i]]
                if t < 0:
                    accepted[i] = -2
                    live[i] = 0
                    continue
                if t > 0x7fffffff:  # no id: refused, as an id past the vocabulary is
                    t = 0x7fffffff
                tokens[i] = <int32_t>t
                acc = (<Session>self.ptrs[i]).c_accept(<int32_t>t)
                accepted[i] = <signed char>acc
                if acc != 1:
                    live[i] = 0
                    continue
                written += 1
                if (<Session>self.ptrs[i]).n_eos > 0 or n_out[i] + 1 >= max_tokens:
                    live[i] = 0
                    continue
                n_forced[i] = <int32_t>(<Session>self.ptrs[i]).c_forced_bytes(&forced[i, 0], cap)
                if buf != NULL:
                    k = -1
                    if 0 < n_forced[i] < cap:
                        k = (<Session>self.ptrs[i]).c_forced_tokens(bpe, &forced[i, 0], n_forced[i], &ftok[i, 0], buf)
                    n_ftok[i] = <int32_t>k
        free(buf)
        return written

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


# ------------------------------------------------------------ bit runs --


def or_bit_runs(const int32_t[::1] src, int32_t[::1] dst, const int64_t[:, ::1] runs) -> None:
    """For each row ``(s, d, n)`` of ``runs``: OR the ``n`` bits of ``src`` from bit ``s``
    into ``dst`` from bit ``d`` (bit ``t % 32`` of word ``t // 32``), 32 bits at a time
    and without the GIL.  The runs must lie inside both rows.  (How a
    :class:`strategies._base.DualMatcher` folds its shadow ids into their tokens.)"""
    cdef Py_ssize_t i
    cdef int64_t ns = src.shape[0], nd = dst.shape[0]
    for i in range(runs.shape[0]):
        if runs[i, 0] < 0 or runs[i, 1] < 0 or runs[i, 2] < 0 \
                or runs[i, 0] + runs[i, 2] > 32 * ns or runs[i, 1] + runs[i, 2] > 32 * nd:
            raise ValueError(f"bit run {tuple(runs[i])} is outside a row ({32 * ns} and {32 * nd} bits)")
    with nogil:
        for i in range(runs.shape[0]):
            _or_run(<const uint32_t*>&src[0], ns, <uint32_t*>&dst[0], nd, runs[i, 0], runs[i, 1], runs[i, 2])


cdef inline void _or_run(const uint32_t* src, int64_t ns, uint32_t* dst, int64_t nd,
                         int64_t s, int64_t d, int64_t n) noexcept nogil:
    cdef int64_t k, q, m
    cdef uint32_t v, hi
    cdef int r
    k = 0
    while k < n:
        m = n - k if n - k < 32 else 32
        q = (s + k) >> 5
        r = (s + k) & 31
        v = src[q]
        if r:
            hi = src[q + 1] if q + 1 < ns else 0
            v = (v >> r) | (hi << (32 - r))
        if m < 32:
            v &= (<uint32_t>1 << m) - 1
        if v:
            q = (d + k) >> 5
            r = (d + k) & 31
            dst[q] |= v << r
            if r and q + 1 < nd:
                dst[q + 1] |= v >> (32 - r)
        k += 32
