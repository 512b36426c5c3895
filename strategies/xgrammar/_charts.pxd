# The byte-level Earley parser of strategy xgrammar (see _charts.pyx): a grammar's
# rules and terminal DFAs as flat arrays (RuleTables), and stacked charts of items
# and terms over them (Charts).  The mask cache (_tables) runs its base parses on a
# Charts; the matcher core (_pda.Parser) is a Charts that also fills masks.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from toolkit.core.cutil cimport BYTES, I64Map, WorkCounters
from toolkit.core.ids cimport DEAD, state_t, symbol_t


cdef enum:
    BASE = -1   # the origin of a position's base item: no chart, its completion pops the rule


cdef struct Item:
    int32_t r   # dotted rule: an index into RuleTables.dr_sym
    int32_t o   # origin chart, BASE for a position's base item


cdef struct Term:
    symbol_t t  # terminal symbol (n_nt + the terminal's number)
    int32_t o   # chart that predicted it
    state_t s   # its DFA state (never DEAD)


cdef class RuleTables:
    cdef readonly int32_t n_nt        # nonterminals: symbols 0 .. n_nt - 1
    cdef readonly int32_t n_sym       # symbols: the terminals are n_nt .. n_sym - 1
    cdef readonly int32_t n_dr        # dotted rules
    cdef readonly symbol_t start_nt   # the start nonterminal
    cdef readonly int32_t max_items   # Earley items one chart may hold (the option max_items)
    cdef dict _keep                   # the numpy arrays behind the pointers, by name
    cdef const symbol_t* dr_sym       # per dotted rule: the symbol after the dot; -1 ends a production
    cdef const symbol_t* dr_lhs       # per dotted rule: its production's lhs
    cdef const int32_t* nt_off        # nonterminal a's dotted rules at their start: nt_drs[nt_off[a]:nt_off[a + 1]]
    cdef const int32_t* nt_drs
    cdef const uint8_t* nullable      # per symbol: derives the empty string
    cdef const state_t* t_table       # per terminal, from t_tab_off: its DFA table [states, t_k classes]
    cdef const int64_t* t_tab_off
    cdef const int32_t* t_k           # per terminal: its byte classes
    cdef const uint8_t* t_cls         # [terminals, BYTES]: a byte's class
    cdef const int64_t* t_acc_off     # per terminal: the offset of its states in t_acc (and in every
                                      # per-state array); the last entry counts all terminal states
    cdef const uint8_t* t_acc         # per terminal state: accepting
    cdef const state_t* t_start       # per terminal: its DFA's start state
    cdef const uint8_t* follow        # [n_nt, BYTES]: the bytes that may follow a nonterminal

    cdef object error(self, int code)

    cdef inline state_t step(self, symbol_t ti, state_t s, uint8_t b) noexcept nogil:
        """Terminal number ti's DFA from state s on byte b (DEAD when it dies)."""
        return self.t_table[self.t_tab_off[ti] + <int64_t>s * self.t_k[ti] + self.t_cls[<int64_t>ti * BYTES + b]]

    cdef inline int32_t n_states(self, symbol_t ti) noexcept nogil:
        """Terminal number ti's DFA states, the dead one included."""
        return <int32_t>(self.t_acc_off[ti + 1] - self.t_acc_off[ti])


cdef class Charts:
    cdef RuleTables G                 # the grammar (kept alive here)
    cdef Item* items                  # every chart's items, chart by chart
    cdef Term* terms                  # every chart's terms, chart by chart
    cdef int64_t n_items, cap_items
    cdef int64_t n_terms, cap_terms
    cdef int64_t* ch_items            # [n_charts + 1]: the first item of each chart (the last: the end)
    cdef int64_t* ch_terms            # [n_charts + 1]: the first term of each chart
    cdef uint8_t* popped              # per chart: the base item completed there
    cdef int32_t n_charts             # charts closed: bytes read + 1
    cdef int32_t cap_charts           # room for cap_charts + 1 entries of ch_items, ch_terms, popped
    cdef I64Map seen                  # the items (r, o) of the chart being built -> their index in it
    cdef I64Map done                  # the (symbol, closed chart) pairs completed into the chart being built
    cdef uint32_t* nt_stamp           # per nonterminal: the stamp of the chart that predicted it
    cdef uint32_t* t_stamp            # per symbol: the stamp of the chart that predicted the terminal
    cdef uint32_t stamp               # the chart being built's stamp
    cdef WorkCounters work            # counted since made (a copy starts at zero): earley_items and
                                      # lexer_steps here, the mask's counters in _pda.Parser

    cdef int _open_chart(self) noexcept nogil
    cdef int _add(self, int32_t r, int32_t o) noexcept nogil
    cdef int _add_term(self, symbol_t t, int32_t o, state_t s) noexcept nogil
    cdef int _completed_before(self, symbol_t sym, int32_t o) noexcept nogil
    cdef int _complete(self, symbol_t sym, int32_t o) noexcept nogil
    cdef int _closure(self) noexcept nogil
    cdef int start_root(self) noexcept nogil
    cdef void start_base(self, int32_t r, state_t s) noexcept nogil
    cdef int push(self, uint8_t b) noexcept nogil
    cdef int push_data(self, const uint8_t* data, int64_t n) noexcept nogil
    cdef bint accepting(self) noexcept nogil
    cdef int copy_to(self, Charts other) except -1

    cdef inline void pop(self, int32_t n) noexcept nogil:
        """Undo the last n bytes read (their charts)."""
        self.n_charts -= n
        self.n_items = self.ch_items[self.n_charts]
        self.n_terms = self.ch_terms[self.n_charts]

    cdef inline bint last_alive(self) noexcept nogil:
        """A term lives in the last chart (another byte may be read)."""
        return self.n_terms > self.ch_terms[self.n_charts - 1]

    cdef inline bint term_alive(self, symbol_t t, int32_t o) noexcept nogil:
        """A term (t, o, any state) lives in the last chart."""
        cdef int64_t i
        for i in range(self.ch_terms[self.n_charts - 1], self.n_terms):
            if self.terms[i].t == t and self.terms[i].o == o:
                return True
        return False
