# The Outlines token index and its cursor (the code and the layout are in _index.pyx).

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from toolkit.core.cutil cimport WorkCounters
from toolkit.core.ids cimport state_t, token_t, word_t
from toolkit.core.session cimport UndoStack
from toolkit.core.trie cimport TokenEnd, TokenTrie

ctypedef TokenEnd Pair  # (token, next state); sparse rows keep them sorted by token


cdef class TokenIndex:
    cdef readonly int32_t num_states     # DFA states, the dead state 0 included
    cdef readonly int32_t vocab_size     # bitmask width in tokens
    cdef readonly int32_t n_words        # int32 words per bitmask row
    cdef readonly int32_t num_dense      # states stored as a bitmask row
    cdef readonly int64_t num_pairs      # (token, next) pairs stored for sparse rows
    cdef readonly int64_t nodes_visited  # trie nodes the build looked at (all states)
    cdef object _transitions             # numpy owner of trans
    cdef object _classes                 # numpy owner of cls
    cdef object _accepting               # numpy owner of accept
    cdef object _blob                    # bytes owning blob
    cdef object _token_offsets           # numpy owner of tok_off
    cdef const state_t* trans            # the DFA's table, num_states rows of n_classes
    cdef const uint8_t* cls              # [256] each byte's class
    cdef int32_t n_classes               # columns of trans
    cdef const uint8_t* accept           # [num_states] accepting flags
    cdef const uint8_t* blob             # every id's bytes, concatenated
    cdef const int64_t* tok_off          # [vocab_size + 1] token t's bytes: blob[tok_off[t] .. tok_off[t + 1])
    cdef int64_t* offsets                # [num_states + 1] a sparse row's pairs: pairs[offsets[s] .. offsets[s + 1])
    cdef int32_t* counts                 # [num_states] allowed text tokens
    cdef int32_t* dense_of               # [num_states] row in dense, or -1 (sparse)
    cdef Pair* pairs                     # [num_pairs] the sparse rows' (token, next state), by state then token
    cdef int64_t pairs_cap               # pairs allocated while building
    cdef word_t* dense                   # [num_dense, n_words] the dense rows' bitmasks
    cdef int64_t dense_cap               # dense rows allocated while building

    cdef _build(self, TokenTrie trie, int64_t max_memory, int64_t dense_min_tokens)
    cdef int _store_dense(self, state_t s, const Pair* row, int64_t k) noexcept nogil
    cdef int _store_sparse(self, state_t s, Pair* row, int64_t k) noexcept nogil
    cdef void _fill(self, state_t state, word_t* out) noexcept nogil
    cdef state_t _next(self, state_t state, token_t token) noexcept nogil


cdef class Cursor:
    cdef readonly TokenIndex index       # the compiled constraint's index (shared)
    cdef readonly state_t start          # the DFA's start state
    cdef public state_t state            # the state after the text tokens consumed
    cdef UndoStack undo_stack            # the state before each token consumed
    cdef WorkCounters work               # lexer steps of accepts (dense rows), tokens decided by the index

    cdef int c_advance(self, token_t token) noexcept nogil
    cdef int c_advance_bytes(self, const uint8_t* data, int32_t n) noexcept nogil
    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil
    cdef void c_undo(self) noexcept nogil
    cdef int c_fill(self, word_t* row, int64_t* count) noexcept nogil
