# The C state of toolkit.automata._dfabuild's constructions (the algorithms are in
# _dfabuild.pyx): one cdef class per construction, owning its C arrays, which are
# freed with the object.  The fields of an extension type start zeroed, so every
# pointer starts NULL and every I64Map or IntSets starts empty and unallocated.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from toolkit.core.cutil cimport I64Map
from toolkit.core.ids cimport state_t
from toolkit.core.intsets cimport IntSets


cdef class _Subsets:
    # one subset construction (determinize): the NFA, its memoized closures, the DFA made so far
    cdef int32_t n_nfa              # NFA states
    cdef int32_t k                  # byte classes: the columns of a DFA row
    cdef state_t final              # the NFA's accepting state
    cdef int64_t max_states         # DFA states allowed (ERR_MAX_STATES past them)
    cdef int err                    # the first ErrCode met (ERR_NONE while all is well)
    cdef int64_t err_value          # the size it was met at
    # the NFA in CSR form
    cdef int64_t* eps_off           # [n_nfa + 1] state s's epsilon moves: eps_to[eps_off[s] .. eps_off[s + 1])
    cdef state_t* eps_to            # epsilon targets
    cdef int64_t* ed_off            # [n_nfa + 1] state s's byte edges: ed_key[ed_off[s] .. ed_off[s + 1])
    cdef int64_t* ed_key            # a class range and a target packed in one sortable key (_edge_key)
    cdef uint8_t* kernel            # [n_nfa] 1 for a state with byte edges or the final one
    # memoized closures
    cdef int64_t* clo_off           # [n_nfa] where state q's closure starts in clo_pool (MISSING: not yet)
    cdef int32_t* clo_len           # [n_nfa] its length
    cdef state_t* clo_pool          # the closures, sorted kernel states, one after the other
    cdef int64_t clo_len_total      # entries of clo_pool used
    cdef int64_t clo_cap            # entries of clo_pool allocated
    # one search's scratch
    cdef int32_t* seen              # [n_nfa] the stamp of the search that last reached each state
    cdef int32_t stamp              # the current search's stamp
    cdef state_t* stack             # [n_nfa] the search's stack
    cdef state_t* buf               # [n_nfa] the kernel states it found
    # the DFA
    cdef IntSets sets               # each DFA state's kernel set; ids are DFA state ids
    cdef state_t* table             # transition rows, k entries per DFA state
    cdef int64_t table_cap          # rows allocated
    cdef uint8_t* acc               # accepting flag per DFA state
    cdef int64_t acc_cap            # flags allocated
    cdef state_t* single            # [n_nfa] DFA state of the closure of one NFA state (MISSING: not yet)
    cdef IntSets multi              # sets of edge targets seen so far ...
    cdef state_t* multi_val         # ... and their DFA states, by set id
    cdef int64_t multi_cap          # entries of multi_val allocated
    # one DFA state's scratch
    cdef int64_t* out               # the edge keys out of its kernel states
    cdef int64_t out_cap
    cdef int32_t* pts               # the ends of their class ranges
    cdef int64_t pts_cap
    cdef state_t* tg                # the targets of one segment between range ends
    cdef int64_t tg_cap
    cdef state_t* ubuf              # the union of a few targets' closures
    cdef int64_t ubuf_cap

    cdef int _fail(self, int code, int64_t value) noexcept nogil
    cdef int32_t _search(self, const state_t* starts, int32_t n) noexcept nogil
    cdef int _closure(self, state_t q) noexcept nogil
    cdef state_t _state_of(self, const state_t* xs, int32_t n) noexcept nogil
    cdef state_t _single_state(self, state_t t) noexcept nogil
    cdef state_t _multi_state(self, const state_t* ts, int32_t n) noexcept nogil
    cdef void _fill(self, state_t i, int32_t a, int32_t b, state_t j) noexcept nogil
    cdef int64_t _gather_edges(self, state_t i) noexcept nogil
    cdef int _fill_disjoint(self, state_t i, int64_t nout) noexcept nogil
    cdef int _fill_overlapping(self, state_t i, int64_t nout) noexcept nogil
    cdef int _run(self, state_t start) noexcept nogil
    cdef int _load(self, list eps, list edges, const int32_t* cls) except -1


cdef class _Refiner:
    # Hopcroft's refinement of one DFA (minimize)
    cdef int32_t n                  # DFA states, the dead one included
    cdef int32_t k                  # byte classes
    cdef int32_t w                  # 64-bit words of a signature: (k + 63) / 64
    cdef const state_t* T           # the DFA's table, n rows of k
    # inverse transitions: runs of classes [lo, hi) from src into each target (CSR by target)
    cdef int64_t* inv_off           # [n + 1] target t's runs: inv_off[t] .. inv_off[t + 1]
    cdef state_t* inv_src           # a run's source state
    cdef int32_t* inv_lo            # its first class
    cdef int32_t* inv_hi            # one past its last class
    # the partition: block b is elems[first[b] .. end[b])
    cdef state_t* elems             # [n] the states, grouped by block
    cdef int32_t* pos               # [n] each state's place in elems
    cdef int32_t* blk               # [n] each state's block (-1 for the dead state)
    cdef int32_t* first             # [n] a block's first place in elems
    cdef int32_t* end               # [n] one past its last
    cdef int32_t nb                 # blocks
    cdef uint8_t* in_work           # [n] 1 for a block on the work list
    cdef int32_t* work              # [n] the work list (a stack of blocks)
    cdef int32_t nwork              # blocks on it
    # one splitter's scratch
    cdef uint64_t* sig              # w words per state: the bitset of its classes into the splitter
    cdef int64_t* sstamp            # [n] the round that last cleared a state's signature
    cdef state_t* touched           # [n] the states with a signature this round
    cdef int64_t* bstamp            # [n] the round that last counted a block's touched states
    cdef int32_t* bcnt              # [n] touched states per block
    cdef int32_t* boff              # [n] where a block's touched states start in order
    cdef int32_t* bcur              # [n] where the next one goes
    cdef int32_t* tblocks           # [n] the touched blocks
    cdef state_t* order             # [n] the touched states grouped by block
    # one split's scratch: the groups of equal signature in the block split
    cdef I64Map groups              # signature hash -> the last group made with that hash
    cdef int32_t* gnext             # [n] the group made before it with the same hash (-1: none)
    cdef int32_t* gidx              # [n] each touched member's group
    cdef state_t* grep              # [n] a group's first member (its signature is the group's)
    cdef int32_t* gsize             # [n] members per group
    cdef int32_t* gstart            # [n] a group's first place in the block, relative
    cdef int32_t* gfill             # [n] members placed so far

    cdef bint _alloc(self, int32_t n) noexcept nogil
    cdef bint _inverse(self) noexcept nogil
    cdef inline void _push(self, int32_t b) noexcept nogil
    cdef inline bint _same_sig(self, state_t s, state_t u) noexcept nogil
    cdef inline uint64_t _sig_hash(self, state_t s) noexcept nogil
    cdef int32_t _group(self, const state_t* S, int32_t cnt) noexcept nogil
    cdef void _split(self, int32_t x, const state_t* S, int32_t cnt) noexcept nogil
    cdef void _refine(self) noexcept nogil


cdef class _Product:
    # the breadth-first product of two DFAs (product); pair 0 stands for the dead pair
    cdef int32_t k                  # joint byte classes (each a column of both DFAs)
    cdef I64Map ids                 # pair_key(p, q) -> pair id
    cdef state_t* pp                # pair i is (pp[i], pq[i])
    cdef state_t* pq
    cdef int64_t pp_cap, pq_cap     # entries allocated
    cdef state_t* rows              # k entries per pair: the product's table
    cdef int64_t rows_cap           # rows allocated
    cdef state_t n                  # pairs made

    cdef state_t _pair(self, state_t p, state_t q, int64_t max_states) noexcept nogil
    cdef int _explore(self, const state_t* ta, int32_t ka, const int32_t* ca, const state_t* tb, int32_t kb,
                      const int32_t* cb, int op, int64_t max_states) noexcept nogil


cdef class _Trie:
    # the edges of a DFA written down directly (json_literal, literal_set, minus_words)
    cdef int32_t* e                 # edge j is (e[3j], e[3j + 1], e[3j + 2]): state, byte, target
    cdef int64_t ne                 # edges written
    cdef state_t n                  # states made (0 dead and 1 the start are the first two)

    cdef inline void edge(self, state_t s, int32_t b, state_t t) noexcept nogil
    cdef inline state_t state(self) noexcept nogil
    cdef state_t hex4(self, state_t s, uint32_t unit, state_t last) noexcept nogil
    cdef void json_char(self, state_t cur, uint32_t cp, state_t nxt) noexcept nogil


cdef class _Minus:
    # L(dfa) \ words (minus_words): the trie of the words' paths through the DFA, put in
    # front of the DFA in one joint table
    cdef int32_t nb                 # the DFA's states (their ids stay in the joint table)
    cdef int32_t k                  # joint columns
    cdef state_t n                  # joint states: the DFA's, then trie node x as nb + x - 1
    cdef state_t* bs                # per trie node, the DFA state its path reaches
    cdef uint8_t* ends              # per trie node, 1 where a word ends (not accepting there)
    cdef state_t* tab               # the joint table, n rows of k
    cdef uint8_t* acc               # [n] accepting flags
    cdef state_t* new_id            # [n] breadth-first number of a state reached (0: not reached)
    cdef state_t* order             # [n] the states reached, breadth-first (order[0] dead)
    cdef uint8_t* live              # [n] 1 for a state that reaches acceptance
    cdef state_t* final_id          # [reached] the number of a reached live state in the result
    cdef state_t reached            # states reached from the start, the dead one included

    cdef _word_paths(self, _Trie T, const int32_t[:, ::1] table, const uint8_t[::1] classes, state_t start,
                     list words, Py_ssize_t total)
    cdef int32_t _columns(self, _Trie T, const uint8_t[::1] classes, int32_t* column, int32_t* rep) noexcept
    cdef int _joint(self, _Trie T, const int32_t[:, ::1] table, const uint8_t[::1] classes,
                    const uint8_t[::1] accepting, const int32_t* column, const int32_t* rep) noexcept nogil
    cdef _result(self)


# Moore's refinement stopped after `rounds` rounds (horizon_classes): rep[s] is the
# smallest state no word of at most `rounds` bytes tells from s.  0, or -1 (memory).
cdef int horizon_reps(const state_t* T, int32_t n, int32_t k, const uint8_t* acc, int32_t rounds,
                      state_t* rep) noexcept nogil
