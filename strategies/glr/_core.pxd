# The C declarations of strategies/glr/_core.pyx (its docstring describes the LR tables,
# the graph-structured stack in the rows and the view a scan reduces in).

from libc.stdint cimport int32_t, int64_t, uint8_t

from strategies.llguidance.parser cimport EarleyParser, ParserTables
from toolkit.core.cutil cimport Arena, I64Map
from toolkit.core.ids cimport state_t, token_t, word_t
from toolkit.core.trie cimport TrieNode


cdef enum:
    STORE_SCAN_ROWS = 4  # a scan or walk counts as this many rows (store_min_rows)
    UNSAFE_SUBSETS = 3 # unsafe candidates of a state whose subsets the making ahead tries
    REACH_MAX = 256    # states _reach follows (frontier, lookback) before it gives up
    LIN_MAX = 64       # LR states a linear simulation pushes above the stack's node, per level
    LIN_STEPS = 4096   # reductions it may make for one lexeme
    SAFE_WORK = 50000000  # steps the safe-lookahead fixpoint may take
    SAFE_FRONTIER = 512  # a reduction's states below (the lookback) beyond which a lookahead is left unsafe
    X_CLOSURE = 64     # lexer states the making ahead queues from one state a slice keeps alive
    X_TOKENS = 1024    # a context's making lists its row's tokens up to this many (no scan of the row)

cdef enum:
    VIRT = 0x40000000  # a row's header of a node of the level below it (made by a scan's reductions)
    EDGE = -1          # Item.dr of an edge item (its origin: the header it points to)
    NO_EDGE = -0x7fffffff  # _reduce's worklist: a node's every path (not one edge's)


cdef class GLRTables(ParserTables):
    # LR automaton over the lexemes (terminal l is lexeme l; the end marker is n_term)
    cdef readonly int32_t n_states   # LR states
    cdef readonly int32_t n_term     # LR terminals: the lexemes but the skip lexeme
    cdef readonly int32_t n_prods    # productions, the augmented S' -> start last
    cdef int32_t* sh_off             # CSR per state: its shifts,
    cdef int32_t* sh_lex             # sorted by lexeme
    cdef int32_t* sh_to              # and the states they lead to
    cdef int32_t* goto_off           # CSR per state: its transitions on nonterminals,
    cdef int32_t* goto_nt            # sorted by nonterminal
    cdef int32_t* goto_to            # and the states they lead to
    cdef int32_t* rd_off             # CSR per state: its reductions,
    cdef int32_t* rd_la              # sorted by lookahead (n_term: the end)
    cdef int32_t* rd_prod            # and the productions reduced by
    cdef int32_t* prod_lhs           # per production: its left-hand side (-1: the augmented one)
    cdef int32_t* prod_len           # per production: its length
    cdef int32_t* cand_off           # CSR per state: the lexemes it has an action on
    cdef int32_t* cand_lex
    cdef readonly int32_t conflicts  # action cells with more than one action
    # Lookaheads every stack allows (least fixpoint, made at init): per cand entry, 1 when
    # the state shifts the lexeme, or some reduction on it leads, under every stack the
    # state can top, to a state where it is so; per state, the same for the end ($: the
    # augmented production's reduction), and whether it has any action on the end
    cdef uint8_t* cand_safe
    cdef uint8_t* acc_safe
    cdef uint8_t* acc_any
    cdef state_t* cand_ss            # per state whose candidates are all safe: their start lexer state, else -1
    cdef int32_t* pred_off           # CSR per state: the states with a shift or goto into it
    cdef int32_t* pred
    cdef int32_t* r_mark             # _reach's scratch: per state its stamp, the frontier, the lookback
    cdef int32_t* r_fr
    cdef int32_t* r_lb
    cdef int32_t r_stamp
    cdef readonly int64_t safe_pairs       # (state, lookahead) pairs found safe
    cdef readonly bint safe_complete       # the fixpoint ran to its end (else: fewer marked, all sound)
    cdef readonly int64_t lr_bytes   # bytes of the arrays above
    # The mask store: masks fills made, shared by the grammar's parsers, each keyed by what it
    # was made from: the lexer state, the top row's start lexer state and the LR states of the
    # stack's linear top, down to the deepest node the fill read
    cdef I64Map st_index             # pair_key(lexer state, top LR state) -> its newest entry
    cdef int32_t* st_next            # per entry: the older entry of the same pair, or -1
    cdef int32_t* st_ls0             # per entry: the top row's start lexer state
    cdef int32_t* st_depth           # per entry: stack nodes read (from the top)
    cdef int64_t* st_soff            # per entry: where its states start in st_states
    cdef int64_t* st_count           # per entry: the tokens of its mask
    cdef uint8_t* st_sliced          # per entry: the fill used slices
    cdef int32_t* st_states          # the entries' LR states, top first
    cdef int64_t* st_moff            # per entry: its mask (st_words words) in st_ma
    cdef Arena st_ma                 # the masks (blocks that never move: storing copies no earlier mask)
    cdef int32_t st_n                # entries
    cdef int64_t st_cap, st_states_n, st_states_cap
    cdef int32_t st_words            # words of a stored mask (the first fill's)
    cdef readonly int64_t store_bytes      # bytes the store holds
    cdef readonly int64_t max_store_bytes  # the most it may hold (0: no store)
    cdef readonly int64_t store_min_rows   # a mask from the tables is stored when it made a context or
                                           # took this many rows (a scan or walk: STORE_SCAN_ROWS)
    cdef readonly int64_t store_hits       # fills that were a stored mask
    cdef readonly int64_t store_inserts    # masks stored
    # The mask tables (see the module doc): per lexer state a context, the tokens that end
    # inside the lexeme it is in (a row) and the tokens crossing its end grouped by the lexer
    # state the lexeme ends in; per (group, lexer state after the boundary) a child context
    cdef object cx_trie              # the trie and slices the contexts were made over (None: none yet)
    cdef object cx_slices
    cdef const int32_t** kw_off      # per trie _cx_trie numbers (ns + 2): its child index (TokenTrie.kid_off)
    cdef const int32_t** kw_node
    cdef const uint8_t** kw_byte
    cdef int32_t cx_words            # words of a row
    cdef I64Map cx_root              # lexer state -> its root context
    cdef state_t* g_rep              # per global state: the least one of its lexeme no token tells from it (NULL: none)
    cdef readonly int32_t horizon    # the bytes g_rep looks ahead (the longest token and two)
    cdef readonly int64_t roots_shared  # lexer states given another's root (horizon_rep)
    cdef int32_t cx_n, cx_cap        # contexts
    cdef int64_t* cx_roff            # per context: its row's offset in cx_wa (dense) or cx_si/cx_sw (sparse)
    cdef int32_t* cx_rlen            # per context: -1 dense, else the (word index, bits) pairs of its row
    cdef int64_t* cx_cnt             # per context: the tokens of its row
    cdef int32_t* cx_goff            # per context: its first group
    cdef int32_t* cx_gn              # per context: its groups
    cdef uint8_t* cx_sliced          # per context: its row took slices whole
    cdef Arena cx_wa                 # dense rows (blocks that never move: a new row copies no old one)
    cdef I64Map dr_index             # a hash of a dense row's words -> the first context with that row
    cdef readonly int64_t rows_shared  # contexts whose dense row is an older context's
    cdef int32_t* cx_si              # sparse rows: word index
    cdef word_t* cx_sw               # and its bits
    cdef int64_t cx_s_n, cx_s_cap
    cdef state_t* g_q                # per group: the lexer state the lexeme ends in
    cdef uint8_t* g_skip             # per group: it is the skip lexeme's end (no scan)
    cdef int64_t* g_noff             # per group: its nodes in nd_k/nd_i
    cdef int32_t* g_nn
    cdef int64_t* g_c1               # per group: its first child, pair_key(lexer state, context), or -1
    cdef int32_t* g_cn               # per group: the first group of its nodes (itself, or an older one whose
                                     # nodes it shares, and whose children are its: a child is its nodes' walk)
    cdef I64Map nl_index             # a hash of a group's node list -> the first group of that list
    cdef readonly int64_t groups_shared  # groups that share an older group's nodes and children
    cdef int32_t g_n, g_cap
    cdef int32_t* nd_k               # a group's node: its trie (the slices' tries, the rest's, ns + 1: the whole)
                                     # | its byte << 8 (a dead node is passed over without reading its record)
    cdef int32_t* nd_i               # and its index there
    cdef int64_t nd_n, nd_cap
    cdef I64Map ch_index             # pair_key(group, lexer state after the boundary) -> its child context (but the first)
    cdef readonly int64_t cx_bytes         # bytes of the mask tables
    cdef readonly int64_t max_cx_bytes     # the most they grow to (max_table_bytes less the LR arrays)
    cdef readonly int64_t cx_fills         # masks made from the tables
    cdef readonly int64_t cx_walks         # masks walked instead (the tables full, or another trie)
    cdef readonly int64_t cx_rows          # rows combined by those masks
    cdef readonly int64_t cx_scans         # scans (stacks walked) by those masks
    cdef readonly int64_t cx_dense         # of those rows, dense ones (the words of a vocabulary read)
    cdef readonly int64_t cx_fast          # boundary groups those masks took without a scan
    cdef readonly int64_t cx_nodes         # trie nodes the contexts' makings visited
    cdef readonly int64_t cx_walked        # groups walked (a child's group with no context)
    # scratch of a context's making
    cdef word_t* x_row               # its row (cx_words words, zero between makings)
    cdef state_t* x_bq               # its boundaries: the lexer state,
    cdef int32_t* x_bk               # the trie | the node's byte << 8 (nd_k)
    cdef int32_t* x_bi               # and the node
    cdef int64_t x_bn, x_bcap
    cdef int32_t* x_tok              # the tokens the making's row got (the first X_TOKENS of them)
    cdef int32_t* x_gat              # per lexer state: its group in the making (stamped by x_gstamp)
    cdef int32_t* x_gstamp
    cdef int64_t x_gcap
    cdef int32_t x_stamp
    # the making ahead (GLRParser.ahead): the lexer states whose root contexts are queued
    cdef bint x_collect              # contexts' makings queue the lexer states their tokens end in
    cdef uint8_t* x_enq              # per lexer state: queued
    cdef int64_t x_enq_cap
    cdef state_t* x_rq               # the queue
    cdef int64_t x_rq_n, x_rq_cap
    cdef readonly int64_t ahead_nodes      # trie nodes the making ahead visited
    cdef readonly bint ahead_complete      # it made every context it found (no limit cut it)

    cdef void _cx_account(self) noexcept nogil
    cdef int _horizon_init(self, int32_t depth) noexcept nogil
    cdef state_t horizon_rep(self, state_t x) noexcept nogil
    cdef int _stamps_reserve(self) noexcept nogil
    cdef int _init_safe(self, int64_t budget) noexcept nogil
    cdef int _reach_scratch(self) noexcept nogil
    cdef int32_t _reach(self, int32_t t, int32_t l, int32_t* out, int32_t cap) noexcept nogil
    cdef inline int32_t child_of(self, int32_t g, state_t s) noexcept nogil
    cdef inline bint _safe(self, int32_t t, int32_t c) noexcept nogil
    cdef inline int32_t goto(self, int32_t s, int32_t a) noexcept nogil
    cdef inline int32_t shift(self, int32_t s, int32_t l) noexcept nogil
    cdef inline int32_t reductions_from(self, int32_t s, int32_t la) noexcept nogil


cdef class GLRParser(EarleyParser):
    cdef GLRTables G                 # self.T, typed
    # The view: the nodes of the top level while a scan (or a row's close) reduces on one
    # lookahead; a node of the view stands for a header of the level (orig) plus edges
    # of its own (a linked list), or only those (orig -1: made by a reduction)
    cdef int32_t n_vn, cap_vn
    cdef int32_t* vn_state           # its LR state
    cdef int32_t* vn_orig            # the level's header it extends, or -1
    cdef int32_t* vn_edge            # first extra edge, or -1
    cdef int32_t* vn_mat             # the header it was written as in the arena, or -1
    cdef int32_t* vn_stk             # _reduce's worklist: (view node, first edge or NO_EDGE) pairs
    cdef int64_t cap_stk
    cdef uint8_t* vn_inq             # per view node: in the worklist for all its paths
    cdef uint8_t* vn_mk              # scratch per view node (_requeue_above)
    cdef int32_t n_ve, cap_ve
    cdef int32_t* ve_to              # an extra edge's target: a header (>= 0) or view node -(v + 2)
    cdef int32_t* ve_next
    cdef int32_t* by_state           # per LR state: its view node, or -1 (reset through the view's nodes)
    # scratch of the path search and of the shifts a scan collects
    cdef int32_t* fr_a
    cdef int32_t* fr_b
    cdef int32_t cap_fr
    cdef int32_t* sh_state           # a shift: the target state
    cdef int32_t* sh_from            # and the header it leaves from (written)
    cdef int32_t n_sh, cap_sh
    cdef readonly int64_t reductions # reductions performed (work)
    # a fill's reading of the stack, for the mask store: headers below track_base are the
    # stack's when the fill began; track_min the lowest of them it read (track_base -1: none kept)
    cdef int64_t track_base
    cdef int64_t track_min
    cdef int32_t* chain              # scratch: the LR states of the stack's linear top
    cdef int32_t cap_chain
    cdef bint cx_ok                  # the walk set is the one the grammar's mask tables are over
    # the linear stack a mask's boundary groups are followed on without rows (_lin_step): per
    # level, LIN_MAX LR states pushed above the stack's node lin_h[level]
    cdef int32_t* lin_vs
    cdef int64_t* lin_h
    cdef int32_t* lin_vn
    cdef int32_t lin_cap             # levels
    cdef int32_t* kw_stk             # _cx_walk's stack: per depth the next child and the end of the list
    cdef int32_t dirty               # c_fill_over: the words of the mask not yet written (0: the mask is clean)
    cdef state_t prev_ls             # the last fill's key (lexer state, top row's id): a second fill
    cdef int64_t prev_row            # with the same key keeps its mask in EarleyParser's cache

    cdef int _view_reset(self, int32_t j) noexcept nogil
    cdef int _wl_push(self, int64_t* sn, int32_t v, int32_t first) noexcept nogil
    cdef int _requeue_above(self, int32_t v, int64_t* sn) noexcept nogil
    cdef int _vn_new(self, int32_t state, int32_t orig) noexcept nogil
    cdef bint _vn_has_edge(self, int32_t v, int32_t ref) noexcept nogil
    cdef int _vn_add_edge(self, int32_t v, int32_t ref) noexcept nogil
    cdef int _reduce(self, int32_t la) noexcept nogil
    cdef int _ancestors(self, int32_t ref, int32_t m, int32_t* n_out) noexcept nogil
    cdef inline int _frontier_add(self, int32_t ref, int32_t* nb) noexcept nogil
    cdef bint _row_shifts(self, int32_t j, int32_t c) noexcept nogil
    cdef int32_t _ref_state(self, int32_t ref) noexcept nogil
    cdef int32_t _materialize(self, int32_t v) noexcept nogil
    cdef int32_t _put(self, int32_t dr, int32_t origin) noexcept nogil
    cdef int _lr_close_row(self) noexcept nogil
    cdef int _shifts_on(self, int32_t la) noexcept nogil
    cdef int64_t _top_header(self) noexcept nogil
    cdef int32_t _store_lookup(self) noexcept nogil
    cdef int _store_insert(self, const word_t* mask, int32_t n_words, bint sliced, int64_t count) noexcept nogil
    cdef int32_t _cx_make(self, state_t s, int32_t parent_g) noexcept nogil
    cdef int64_t _groups_intern(self, int32_t g0) noexcept nogil
    cdef int32_t _root_of(self, state_t x) noexcept nogil
    cdef int _cx_walk(self, int32_t k, int32_t p, state_t q0, int64_t* cnt) noexcept nogil
    cdef int32_t _cx_child(self, int32_t g, state_t s) noexcept nogil
    cdef int _cx_fill(self, int32_t c, word_t* mask, int64_t* cnt, bint deep) noexcept nogil
    cdef int32_t _cx_lookup(self, int32_t g, state_t s) noexcept nogil
    cdef int _cx_walk_group(self, int32_t g, state_t s, word_t* mask, int64_t* cnt) noexcept nogil
    cdef int _queue_root(self, state_t y) noexcept nogil
    cdef int _collect_slice(self, int32_t k, state_t x) noexcept nogil
    cdef int _queue_closure(self, state_t y) noexcept nogil
    cdef int _ahead(self, int64_t max_nodes) noexcept nogil
    cdef int _cache_keep(self, const word_t* mask, int32_t n_words, bint sliced, int64_t count) noexcept nogil
    cdef int _explore(self, int64_t max_configs, int64_t max_nodes, int64_t* out) noexcept nogil
    cdef int _lin_reserve(self, int32_t level) noexcept nogil
    cdef void _cx_or(self, int32_t c, word_t* mask, int64_t* cnt) noexcept nogil
    cdef void _clean(self, word_t* mask) noexcept nogil
    cdef int32_t _lin_sim(self, int32_t level, int32_t l, int32_t out) noexcept nogil
    cdef int32_t _lin_step(self, int32_t level, state_t q) noexcept nogil
    cdef state_t _lin_start(self, int32_t level, int32_t t) noexcept nogil
    cdef int _fast_group(self, int32_t g, int32_t level, state_t s_row, word_t* mask, int64_t* cnt) noexcept nogil
    cdef int _accepting(self) noexcept nogil
    cdef int _cx_trie(self, int32_t k, const TrieNode** nodes, const token_t** ids) noexcept nogil
