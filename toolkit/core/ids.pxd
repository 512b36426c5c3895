# Named id types and sentinels shared by every Cython module of masklab.

from libc.stdint cimport int32_t, uint8_t, uint32_t

ctypedef int32_t token_t    # token id; the vocabulary size is the sentinel "no token"
ctypedef int32_t state_t    # automaton state id
ctypedef int32_t symbol_t   # grammar symbol id
ctypedef uint32_t word_t    # one bitmask word (stored as int32 for the peers' layout)

cdef enum:
    DEAD = 0        # every ByteDFA has its dead state at index 0
    MISSING = -1    # a lazily filled table entry not computed yet
