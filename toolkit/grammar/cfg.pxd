# The C state of toolkit.grammar.cfg.trim (the loops are in cfg.pyx): a grammar's
# productions as flat arrays and what trim finds out about them.

from libc.stdint cimport int32_t, uint8_t

from toolkit.core.ids cimport symbol_t


cdef class _Trimmer:
    # The useful part of one grammar: productive, reachable, renumbered.  C arrays freed
    # with the object (the fields of an extension type start zeroed: pointers NULL).
    # The grammar (borrowed from trim's arguments): production p is lhs[p] -> syms[off[p] .. off[p + 1])
    cdef int32_t n_nt             # nonterminals 0 .. n_nt - 1, the start 0
    cdef int32_t n_sym            # symbols: the nonterminals, then the terminals
    cdef int32_t n_prod           # productions, grouped by lhs in increasing order
    cdef const symbol_t* lhs      # [n_prod] each production's left-hand side
    cdef const int32_t* off       # [n_prod + 1] where each production's symbols start in syms
    cdef const symbol_t* syms     # right-hand sides; -1 for an unproductive symbol
    # what trim finds
    cdef uint8_t* productive      # [n_sym] 1 for a symbol that derives some string of terminals
    cdef uint8_t* kept            # [n_prod] 1 for a production of the useful part
    cdef uint8_t* reach           # [n_nt] 1 for a nonterminal reachable from the start (the start always)
    cdef int32_t* first           # [n_nt + 1] nonterminal a's productions: first[a] .. first[a + 1]
    cdef symbol_t* stack          # [n_nt] the reachability search's stack
    cdef symbol_t* new_id         # [n_sym] a kept symbol's new number (-1: dropped)
    cdef int32_t m                # kept nonterminals
    cdef int32_t t                # used terminals
    cdef int32_t n_kept           # kept productions
    cdef int32_t n_dr             # dotted rules: the kept productions' symbols plus one end each

    cdef int _find(self) noexcept nogil
    cdef void _reachable(self) noexcept nogil
    cdef void _number(self) noexcept nogil
    cdef void _layout(self, symbol_t* nt_map, symbol_t* term_map, symbol_t* dr_sym, symbol_t* dr_lhs,
                      int32_t* nt_off, int32_t* nt_drs, symbol_t* new_lhs, int32_t* new_off) noexcept nogil
