# The matcher core of strategy xgrammar (see _pda.pyx): the Earley charts of one
# sequence (a Charts) that fill masks from the tables' adaptive cache, and the
# StrategyOps a toolkit.core.session.Session drives it through.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from strategies.xgrammar._charts cimport Charts
from strategies.xgrammar._tables cimport Tables
from toolkit.core.ids cimport word_t
from toolkit.core.session cimport UndoStack


cdef class Parser(Charts):
    cdef Tables T                   # the grammar's tables with their cache (the same object as Charts.G)
    cdef int32_t* cand              # [n_tokens]: a fill's uncertain candidates (trie indexes)
    cdef uint32_t* cand_stamp       # [n_tokens]: the fill that made a trie index a candidate
    cdef uint32_t cstamp            # the fill's stamp (cand_stamp, pos_stamp, inner_stamp)
    cdef word_t* scratch            # [n_words]: the text tokens outside a rejected-ids Inner
    cdef int64_t* pos_seen          # [n_pos]: the live positions of a fill
    cdef int64_t n_pos_seen
    cdef uint32_t* pos_stamp        # [n_pos]: the fill that found a position live
    cdef uint32_t* inner_stamp      # [Inners]: the fill that added an Inner's S
    cdef int64_t* term_keys         # [cap_keys]: the last chart's terms as (origin << 32 | index), sorted
    cdef int64_t cap_keys
    cdef int64_t* sym_term          # [n_sym]: a terminal's term in the origin group being matched
    cdef uint32_t* sym_stamp        # [n_sym]: the origin group that set sym_term
    cdef uint32_t gstamp            # the origin group's stamp
    cdef readonly int64_t checked   # uncertain tokens checked by the last fill
    cdef readonly int64_t positions # live positions of the last fill
    cdef UndoStack undo_stack       # bytes of each token consumed through the ops
    cdef int last_err               # the error code of the last failed op

    cdef int _prepare_fill(self) noexcept nogil
    cdef int _fill(self, word_t* row, bint over, int64_t* count) noexcept nogil
    cdef void _write_first(self, word_t* row) noexcept nogil
    cdef int _live_positions(self) noexcept nogil
    cdef void _add_cached(self, word_t* row) noexcept nogil
    cdef int64_t _candidates(self, const word_t* row) noexcept nogil
    cdef int _check(self, word_t* row, int64_t n_cand, int64_t* nodes, int64_t* accepted) noexcept nogil
    cdef int c_advance(self, const uint8_t* data, int32_t n) noexcept nogil
    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil
    cdef void c_undo(self) noexcept nogil
    cdef int c_fill(self, word_t* row, int32_t n_words, bint over, int64_t* count) noexcept nogil
