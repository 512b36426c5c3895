# The C half of the matcher protocol for masklab's own strategies, and its batch.
#
# A strategy's Cython "core" (one sequence's parse state plus an undo stack) exposes
# six C entry points in a StrategyOps record, handed over as a PyCapsule
# (``ops_capsule()`` in the strategy's module).  A Session (toolkit/core/session.pyx) runs the
# protocol's rules (EOS and termination, the sticky error state, special ids, history
# counts) over any core in C, so the single calls and the batch step are one code path.

from cpython.pycapsule cimport PyCapsule_New
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport malloc
from libc.string cimport memcpy

from toolkit.core.bpe cimport BpeTable
from toolkit.core.cutil cimport WorkCounters, grow
from toolkit.core.ids cimport token_t, word_t


cdef struct StrategyOps:
    # consume a text token (its bytes): 1 = consumed, one undo record pushed;
    # 0 = refused, state unchanged; < 0 = failure (take_error says which).  Token -1:
    # raw bytes that are no token (the session's probes: forced bytes, allows_bytes)
    int (*advance)(void* core, token_t token, const uint8_t* data, int32_t n) noexcept nogil
    # pop the last undo record
    void (*undo)(void* core) noexcept nogil
    # OR the allowed text tokens into a zeroed row of n_words words: 0, 1 (the mask
    # used slices), < 0 = failure; *count is how many it set, or -1 when the core does
    # not know (the session then counts the bits)
    int (*fill)(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil
    # 1 when the bytes consumed are a sentence, 0 when not, < 0 = failure
    int (*accepting)(void* core) noexcept nogil
    # the failure pending in the core (its error code and value), then cleared
    void (*take_error)(void* core, int32_t* code, int64_t* value) noexcept nogil
    # add the core's work counters (since the core was made; a copy starts at zero) to *out
    void (*work)(void* core, WorkCounters* out) noexcept nogil
    # the bytes ``advance`` may take next (token -1, one byte), as 256 bits in out[0..3]
    # (byte b: bit b % 64 of out[b / 64]): 2 = exactly those, 1 = a superset, 0 = the
    # core cannot tell (the session tries all 256), < 0 = failure.  NULL: never given.
    # Jump-forward's probes (forced bytes, the chop's trie walk) try only these bytes;
    # an exact set of two or more bytes is no forced byte without a try.
    int (*next_bytes)(void* core, uint64_t* out) noexcept nogil
    # ``fill`` into a row whose words are garbage: the core writes every word (a copy
    # of its first row instead of zeroing the row and ORing it in).  NULL: the session
    # zeroes the row and calls ``fill``
    int (*fill_over)(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil


cdef struct UndoStack:
    # A core's undo records: int32 values, a record being one or more of them.  Zeroed
    # it is empty; free(data) releases it.
    int32_t* data
    int64_t n, cap


cdef inline int undo_reserve(UndoStack* s, int64_t k) noexcept nogil:
    """Room for ``k`` more values (cutil's doubling growth); -1 when out of memory."""
    return grow(<void**>&s.data, &s.cap, s.n + k, sizeof(int32_t))


cdef inline int32_t undo_pop(UndoStack* s) noexcept nogil:
    s.n -= 1
    return s.data[s.n]


cdef inline int undo_copy(UndoStack* dst, const UndoStack* src) noexcept nogil:
    """``dst`` (empty) as a copy of ``src``; -1 when out of memory."""
    if src.n == 0:
        return 0
    dst.data = <int32_t*>malloc(src.n * sizeof(int32_t))
    if dst.data == NULL:
        return -1
    memcpy(dst.data, src.data, src.n * sizeof(int32_t))
    dst.n = dst.cap = src.n
    return 0


cdef inline void add_work(WorkCounters* out, const WorkCounters* w) noexcept nogil:
    """out += w, field by field."""
    out.trie_nodes += w.trie_nodes
    out.lexer_steps += w.lexer_steps
    out.earley_items += w.earley_items
    out.tokens_checked += w.tokens_checked
    out.tokens_sliced += w.tokens_sliced
    out.tokens_cached += w.tokens_cached


cdef inline object ops_capsule_of(const StrategyOps* ops):
    """The capsule a strategy module's ``ops_capsule()`` returns (``ops`` is static)."""
    return PyCapsule_New(<void*>ops, b"masklab.StrategyOps", NULL)


cdef class VocabTable:
    cdef const uint8_t* blob       # every token's bytes, concatenated
    cdef const int64_t* offsets    # token t's bytes: blob[offsets[t] : offsets[t + 1]]
    cdef const uint8_t* kind       # K_TEXT, K_EOS or K_OTHER (special, padding, empty)
    cdef const uint64_t* rec       # per token two words, what accepting it reads in one cache line:
                                   # its kind | its length << 8, then its bytes when at most 8 (most
                                   # tokens), else their offset in blob
    cdef const int32_t* eos        # the EOS ids
    cdef int32_t n_eos
    cdef readonly int32_t size     # ids, padding included
    cdef readonly int32_t n_words  # words of a bitmask row
    cdef object _keep              # the numpy arrays behind the pointers
    cdef const int32_t* by_bytes   # the text tokens sorted by their bytes (made when first needed)
    cdef int32_t n_by_bytes
    cdef readonly int32_t max_len  # the longest token's bytes (with by_bytes)
    cdef object _by_bytes_keep
    cdef const int64_t* prefixes   # the byte strings that are proper prefixes of a text token, by
    cdef uint64_t prefix_mask      # hash (open addressing: t << 32 | length, -1 empty; with by_bytes)
    cdef object _prefixes_keep
    cdef object _vocab
    cdef int sort_by_bytes(self) except -1
    cdef bint extends_some(self, const uint8_t* s, int64_t n) noexcept nogil


cdef struct ChopScratch:
    # The chop's trie walk (Session.c_extended): per depth of the extension, the byte
    # set of the state there, the range of sorted tokens under the prefix, the next byte
    # to try; and the prefix itself (the tail's suffix, then the extension).
    uint8_t* prefix      # 2 * max_len + 1 bytes
    uint64_t* sets       # 4 words per depth (max_len + 1 depths)
    int32_t* lo
    int32_t* hi
    int32_t* next_byte


cdef class Session:
    cdef readonly object core      # the strategy's core object (kept alive here)
    cdef void* cp                  # the same object, borrowed, for the nogil calls
    cdef const StrategyOps* ops
    cdef readonly VocabTable V
    cdef readonly int64_t n_text   # text tokens consumed (the core's undo records)
    cdef readonly int32_t n_eos    # EOS ids accepted after them (terminated when > 0)
    cdef bint failed               # the sticky error state
    cdef int32_t err_code          # the core's error code and value at the failure
    cdef int64_t err_value
    cdef object err_text           # the message, made when first asked for
    cdef readonly bint sliced      # the last fill used slices
    cdef readonly int64_t n_masks  # fills made (every fill_bitmask, EOS-only ones too)
    cdef WorkCounters work_before  # the work of the cores a restart replaced
    cdef int32_t* hist             # the text tokens consumed, in order (n_text of them)
    cdef int64_t hist_cap          # hist's room
    cdef int32_t last_eos          # the EOS id accepted last (while n_eos > 0)
    cdef ChopScratch chop_w        # the chop's scratch (made by its first call, kept: one thread
    cdef uint8_t* chop_tail        # uses a session at a time), and its tail bytes

    cdef void _fail(self) noexcept nogil
    cdef bint _accepting(self) noexcept nogil
    cdef int c_accept(self, int32_t token) noexcept nogil
    cdef int32_t c_fill(self, word_t* row) noexcept nogil
    cdef void c_rollback(self, int64_t n) noexcept nogil
    cdef int c_try_bytes(self, const uint8_t* data, int32_t n) noexcept nogil
    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil
    cdef int64_t c_forced_bytes(self, uint8_t* out, int64_t limit) noexcept nogil
    cdef int _key_cmp(self, int32_t j, const uint8_t* p, int64_t n) noexcept nogil
    cdef int32_t _first_at_least(self, const uint8_t* p, int64_t n, int32_t lo, int32_t hi,
                                 bint past) noexcept nogil
    cdef int c_extended(self, const uint8_t* s, int64_t ns, ChopScratch* w) noexcept nogil
    cdef int64_t c_chop_start(self, const uint8_t* forced, int64_t nf, const uint8_t* tail, int64_t nt,
                              ChopScratch* w) noexcept nogil
    cdef int _chop_scratch(self) except -1
    cdef void _free_chop(self) noexcept
    cdef int64_t c_chop_count(self, const uint8_t* forced, int64_t nf, const int32_t* toks, int64_t n) noexcept nogil
    cdef int64_t c_forced_tokens(self, BpeTable bpe, const uint8_t* forced, int64_t nf, int32_t* out,
                                 uint8_t* buf) noexcept nogil
    cdef int32_t c_fill_draft(self, const int32_t* draft, int32_t k, word_t* rows) noexcept nogil
    cdef void c_fill_tree(self, const int32_t* tokens, const int32_t* parents, int32_t n, word_t* rows,
                          uint8_t* ok, int32_t* path) noexcept nogil
