# The C declarations of strategies/llguidance/parser.pyx (its docstring describes the
# lexer, the Earley parser, the trie walk and the slicer): the lexer's sentinels, the
# slicer's marks, an Earley item, and the fields and C methods of its three classes.

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

from toolkit.core.cutil cimport Arena, I64Map, WorkCounters
from toolkit.core.ids cimport state_t, symbol_t, token_t, word_t
from toolkit.core.intsets cimport IntSets
from toolkit.core.session cimport UndoStack
from toolkit.core.trie cimport TokenTrie, TrieNode


# What an ls_trans entry holds besides a lexer state (an id >= 0).  A lexer state is a
# set of live lexeme states and state 0 is the first set interned, a real one: so the
# lexer's "no live pair" is not ids.pxd's DEAD (0, a ByteDFA's dead state), and gets a
# name of its own.  The lexemes' own DFAs keep DEAD = 0 (a set never holds a dead
# state).  An entry not computed yet is ids.pxd's MISSING (-1).
cdef enum:
    LS_END = -2        # no live pair after this byte: it ends the lexeme (when one accepts) or is refused
    LS_ERROR = -3      # a limit was hit (or memory ran out) computing it; returned, never stored

cdef enum:
    P_UNKNOWN = 0      # slicer memo: product pair not decided
    P_GOOD = 1         # no slice string from here kills the lexeme
    P_BAD = 2          # some slice string from here kills it
    P_OPEN = 3         # on the current search's stack
    P_DONE = 4         # searched in the current search, nothing found (yet)

cdef enum:
    MAX_MEMO_PAIRS = 1 << 26  # product pairs (bytes of memo) one (lexeme, slice) may use
    SPARSE_CAP = 4096         # slots of the small search's table; it gives up at half full

cdef enum:
    SL_KNOWN = 0x80000000  # ls_sl: the slices of this lexer state are decided

cdef enum:
    WC_MIN_NODES = 1024  # the state cache keeps a lexer state whose lexer walk saves this many nodes
    WC_TRIE_FULL = 63    # a boundary's trie: the whole vocabulary's (else a slice's, or the rest's)

cdef enum:
    F_SKIP_ACC = 1     # the skip lexeme accepts in this lexer state
    F_EXTEND = 2       # some byte keeps a pair alive


cdef struct Item:
    # One Earley item of a row.
    int32_t dr         # dotted rule: production's first rhs slot + dot
    int32_t origin     # row the production was predicted in


cdef class SliceSet:
    cdef readonly int32_t n          # slices (at most 31: a lexer state keeps their bits in a uint32)
    cdef readonly int32_t n_words    # words of a slice's mask
    cdef const state_t** trans       # per slice: its regex DFA, int32[n_states, 256] (dead state 0)
    cdef int32_t* n_states           # per slice: its DFA's states
    cdef state_t* starts             # per slice: its DFA's start state
    cdef const word_t** masks        # per slice: its tokens as a bitmask
    cdef int64_t* n_tokens           # per slice: the tokens of its mask (tokens_sliced when ORed in)
    cdef int32_t* order              # slices, each after every slice whose language holds it
    cdef uint8_t* incl               # incl[i * n + j]: slice i's language is inside slice j's
    cdef readonly list tries         # the slices' tries, then the trie of the tokens in none
    cdef list _keep                  # the numpy arrays behind trans and masks
    cdef const TrieNode** t_nodes    # tries[k]'s nodes (n + 1 tries)
    cdef int32_t* t_num              # tries[k]'s node count
    cdef const token_t** t_ids       # tries[k]'s token ids
    cdef readonly int32_t max_depth  # the deepest of the tries


cdef class ParserTables:
    # grammar (symbols 0 .. n_nt-1 are nonterminals, n_nt + l is lexeme l)
    cdef readonly int32_t n_nt       # nonterminals
    cdef readonly int32_t n_lex      # lexemes (the skip lexeme included)
    cdef readonly int32_t skip       # the %ignore lexeme, or -1
    cdef readonly symbol_t start_sym # the augmented start nonterminal
    cdef readonly int32_t n_dr       # dotted rules
    cdef readonly int32_t n_global   # lexeme DFA states, all lexemes together
    cdef symbol_t* dr_sym            # per dotted rule: the symbol after the dot, -1 at the end
    cdef symbol_t* dr_lhs            # per dotted rule: its production's left-hand side
    cdef int32_t* nt_off             # CSR offsets into nt_drs, per nonterminal
    cdef int32_t* nt_drs             # the dot-0 dotted rules of each nonterminal
    cdef uint8_t* nullable           # per symbol: derives the empty string
    # lexemes (lexeme l's DFA states are the global states lex_off[l] + s)
    cdef int32_t* lex_off            # per lexeme: its first global state (n_lex + 1 entries)
    cdef state_t* lex_start          # per lexeme: its DFA's start state
    cdef const state_t** lex_trans   # per lexeme: its table over classes, lex_k[l] columns
    cdef const uint8_t** lex_cls     # per lexeme: the class of each byte
    cdef int32_t* lex_k              # per lexeme: its byte classes
    cdef int32_t* g_lex              # per global state: its lexeme
    cdef uint8_t* g_acc              # per global state: accepting (never a dead state)
    cdef uint8_t* g_ext              # per global state: some byte leads to a live state
    cdef uint64_t first_any[4]       # the bytes some lexeme starts with (256 bits: jump-forward's probes)
    cdef object _keep                # the lexemes' numpy tables, then their class arrays
    # lexer states (hash-consed sets of global states; filled lazily)
    cdef readonly int32_t n_ls       # lexer states interned
    cdef int64_t cap_ls              # capacity of the per-lexer-state arrays below
    cdef state_t* ls_trans           # ls_trans[x * BYTES + b]: the state after byte b, LS_END or MISSING
    cdef IntSets sets                # the global states of each lexer state (ids = lexer states)
    cdef int32_t* ls_acc_off         # per lexer state: its accepting lexemes' offset in acc_pool
    cdef int32_t* ls_acc_len         # per lexer state: how many there are
    cdef uint8_t* ls_flags           # per lexer state: F_SKIP_ACC, F_EXTEND
    cdef state_t* ls_single          # per lexer state: its global state when it has one, else -1
    cdef uint32_t* ls_sl             # slices contained in the state (bit k), SL_KNOWN once computed
    cdef int32_t* acc_pool           # each lexer state's accepting (non-skip) lexemes
    cdef int64_t acc_pool_len        # entries used in acc_pool
    cdef int64_t acc_pool_cap        # and its capacity
    # scratch shared by the parsers (they never run at once)
    cdef state_t* buf                # a lexer state's global states while it is made (n_lex + 1)
    cdef int32_t* allowed            # the lexemes a row allows, while it is closed (n_lex + 1)
    cdef int32_t* nt_stamp           # per nonterminal: predicted in the row of this stamp
    cdef int32_t* allow_stamp        # per lexeme: allowed in the row of this stamp
    cdef int32_t* scan_stamp         # per lexeme: accepted by the scan of this stamp
    cdef int32_t stamp               # the open row's (or scan's) stamp
    cdef I64Map row_items            # the open row's items: pair_key(dr, origin) -> item index
    # limits and errors
    cdef readonly int64_t max_lexer_states  # the limit on n_ls
    cdef readonly int64_t max_row_items     # the limit on the items of one row
    cdef readonly int64_t max_steps         # the limit on steps (items + lexer states) of one mask or token
    cdef int64_t steps                      # steps of the current mask or token
    cdef readonly int64_t peak_row_items    # the largest row made
    cdef readonly int64_t peak_steps        # the most steps one mask or token took
    cdef int err                            # the pending ErrCode (toolkit.core.cutil), ERR_NONE if none
    cdef int64_t err_value                  # and the value it reports
    # slicer
    cdef int8_t* slice_ok            # per (global state, slice): 0 unknown, 1 contained, 2 not
    cdef int32_t n_slices            # slices the tables were made for
    cdef uint8_t** memo              # per (lexeme, slice): P_* verdict per product pair, lazily
    cdef I64Map sparse               # the small search's P_* mark per product pair (SPARSE_CAP slots)
    cdef uint8_t* sp_full            # per (lexeme, slice): a small search of it filled its table
    cdef int64_t* dfs_pair           # the search's stack of product pairs
    cdef int64_t* dfs_seen           # the pairs the search visited
    cdef int32_t* dfs_byte           # per stack entry: the next byte to try
    cdef int64_t dfs_cap             # capacity of the three dfs_ arrays
    cdef readonly int64_t memo_bytes # bytes of the per (lexeme, slice) memos made
    # the state cache (set_state_cache): per lexer state, the part of a walk from it that
    # no parser state changes, made by the first fill there and shared by the parsers
    cdef I64Map wc_map               # lexer state -> entry (0: its walk is too small to keep)
    cdef Arena wc_masks              # the entries' masks, wc_words words each
    cdef int64_t* wc_mask_off        # per entry: its mask's offset in wc_masks
    cdef int64_t* wc_bnd_off         # per entry: its first boundary in wc_bnd
    cdef int32_t* wc_bnd_len         # per entry: its boundaries
    cdef int64_t* wc_sliced          # per entry: the tokens of the slices ORed in whole
    cdef uint8_t* wc_used            # per entry: slices were used (fill's 1)
    cdef int64_t* wc_count           # per entry: the tokens of its mask
    cdef int64_t wc_n                # entries (entry 0 is the "too small" mark)
    cdef int64_t wc_cap              # capacity of the per-entry arrays
    cdef int32_t* wc_bnd             # boundaries, 3 ints each: trie, node, lexer state before its byte
    cdef int64_t wc_nb               # ints used in wc_bnd
    cdef int64_t wc_bnd_cap          # and its capacity
    cdef word_t* wc_scratch          # a mask being made (wc_words words)
    cdef readonly int32_t wc_words   # the words of the entries' masks (0: none made yet)
    cdef readonly int64_t wc_budget  # bytes the entries may take (0: no cache)
    cdef readonly int64_t wc_min     # the nodes an entry must keep off a walk (WC_MIN_NODES)
    cdef readonly int64_t wc_bytes   # bytes they take
    cdef readonly int64_t wc_hits    # fills served from an entry
    cdef object wc_trie              # the walk the entries are of: the trie,
    cdef object wc_slices            # and the slices (set by the first parser's set_walk)

    cdef void _init_grammar(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable) except *
    cdef void _init_lexemes(self, lexemes) except *
    cdef void _init_global_states(self, lexemes) except *
    cdef void _init_caches(self) except *
    cdef int32_t* _copy_i32(self, arr) except NULL
    cdef int _fail(self, int code, int64_t value) noexcept nogil
    cdef inline int _spend(self, int64_t n) noexcept nogil
    cdef state_t intern(self, const state_t* gs, int32_t n) noexcept nogil
    cdef int _grow_ls(self, int64_t need) noexcept nogil
    cdef state_t step(self, state_t x, uint8_t b) noexcept nogil
    cdef void live_bytes(self, state_t x, uint64_t* out) noexcept nogil
    cdef void live_bytes_of(self, state_t g, uint64_t* out) noexcept nogil
    cdef state_t start_state(self, const int32_t* lexemes, int32_t n) noexcept nogil
    cdef state_t allowed_start(self, int32_t n) noexcept nogil
    cdef int contained(self, state_t g, int32_t k, const state_t* strans, int32_t sn,
                       state_t sstart) noexcept nogil
    cdef inline uint8_t _mark(self, uint8_t* memo, int64_t pr) noexcept nogil
    cdef inline int _set_mark(self, uint8_t* memo, int64_t pr, uint8_t v) noexcept nogil
    cdef int _search(self, int32_t l, int64_t root, int64_t ln, const state_t* strans,
                     uint8_t* memo) noexcept nogil
    cdef void _memo_record(self, uint8_t* memo, int result, int64_t n_seen, int64_t n_stack) noexcept nogil
    cdef int _dfs_reserve(self, int64_t need) noexcept nogil
    cdef int64_t slice_bits(self, state_t x, SliceSet sl) noexcept nogil
    cdef inline void note_steps(self) noexcept nogil
    cdef int _wc_bound(self, int32_t k, int32_t p, state_t x) noexcept nogil
    cdef int32_t _wc_keep(self, state_t x, int32_t n_words, int64_t nb0, int64_t sliced, bint used,
                          int64_t count) noexcept nogil


cdef class EarleyParser:
    cdef ParserTables T              # the grammar's tables (shared by its parsers)
    cdef Item* items                 # the items of every row, row after row
    cdef int64_t n_items             # items in the rows on the stack
    cdef int64_t cap_items           # capacity of items
    cdef int32_t* row_beg            # row k's items: items[row_beg[k] : row_beg[k + 1]]
    cdef state_t* row_ls             # lexer state at the start of the next lexeme
    cdef uint8_t* row_acc            # the grammar accepts after this row's lexemes
    cdef state_t* row_key            # the lexer state whose lexemes were scanned into the row (-1: row 0)
    cdef int32_t n_rows              # rows on the stack
    cdef int32_t rows_valid          # rows 0 .. rows_valid-1 are intact in memory (truncation
                                     # keeps the rows above n_rows, so a rescan can reuse them)
    cdef int64_t cap_rows            # capacity of the row_ arrays
    cdef readonly state_t ls         # current lexer state
    cdef readonly bint fresh         # no byte consumed yet (ls is row 0's start state)
    cdef state_t* st_ls              # walk stack: the lexer state at each trie depth
    cdef int32_t* st_rows            # walk stack: the rows on the stack at each trie depth
    cdef int32_t st_cap              # capacity of the walk stacks
    cdef int64_t* row_id             # a number per row built, never reused by this parser: the
    cdef int64_t next_row_id         # row's content, and every row's below it, is fixed by it
    # The mask cache (llguidance's bias cache): the text tokens of the last mask made
    # walking, and its key.  A mask depends only on the lexer state and the rows; the
    # rows are fixed by the top row's id, so inside a long lexeme (a JSON string), where
    # the lexer state loops, the next mask is often the last one.
    cdef public bint use_cache       # fills may copy the cached mask
    cdef readonly int64_t cache_hits # fills that were the cache's copy
    cdef word_t* cache_mask          # the cached mask
    cdef int32_t cache_words         # its words
    cdef state_t cache_ls            # its key: the lexer state (-1: no entry)
    cdef int64_t cache_row           # and the top row's id
    cdef bint cache_sliced           # the cached mask used slices
    cdef int64_t cache_count         # its tokens (-1: not counted)
    # What fill walks (set_walk): the vocabulary's trie, and its slices or None
    cdef readonly TokenTrie walk_trie     # the vocabulary's trie
    cdef readonly SliceSet walk_slices    # its slices, or None
    cdef readonly int64_t last_visited    # trie nodes the last fill looked at (0: a cache copy)
    cdef bint wc_on                       # the tables' state cache serves this walk
    cdef int64_t walk_tokens              # the tokens the last _walk ORed in
    cdef int64_t fill_count               # the tokens the last c_fill ORed in when it counted them
                                          # (a subclass's tables), else -1: the session counts bits
    cdef WorkCounters work                # counted since the parser was made (a copy starts at zero)
    # The undo stack of the ops (toolkit.core.session): the state before each token consumed,
    # three values a token (lexer state, rows, fresh)
    cdef UndoStack undo_stack

    cdef int _start(self) noexcept nogil
    cdef int _reserve_rows(self, int64_t need) noexcept nogil
    cdef int _new_row(self) noexcept nogil
    cdef int _add(self, int32_t dr, int32_t origin) noexcept nogil
    cdef int _append(self, int32_t dr, int32_t origin) noexcept nogil
    cdef int _close_row(self) noexcept nogil
    cdef inline void _truncate(self, int32_t n_rows) noexcept nogil
    cdef bint _kept_row(self, state_t x) noexcept nogil
    cdef int _scan(self, state_t x) noexcept nogil
    cdef int _push_byte(self, state_t x, uint8_t b, state_t* out) noexcept nogil
    cdef int _accepting(self) noexcept nogil
    cdef int _ensure_stack(self, int32_t depth) noexcept nogil
    cdef int64_t _walk(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                       word_t* mask) noexcept nogil
    cdef int64_t _walk_at(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                          word_t* mask, state_t start) noexcept nogil
    cdef int64_t _walk_lex(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                           int32_t k, word_t* mask) noexcept nogil
    cdef int _fill_cached(self, word_t* mask, int32_t n_words) noexcept nogil
    cdef int64_t _slices_here(self, int32_t n_words) noexcept nogil
    cdef int c_fill(self, word_t* mask, int32_t n_words) noexcept nogil
    cdef int _cache_room(self, int32_t n_words) noexcept nogil
    cdef int c_fill_over(self, word_t* mask, int32_t n_words) noexcept nogil
    cdef int _fill_c(self, word_t* mask, int32_t n_words) noexcept nogil
    cdef int c_push(self, const uint8_t* data, int32_t n) noexcept nogil
    cdef int _consume(self, const uint8_t* data, Py_ssize_t n, state_t* x_out, bint* fresh_out) noexcept nogil
    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil
    cdef void c_undo(self) noexcept nogil
    cdef int c_accepting(self) noexcept nogil
    cdef void take_error(self, int32_t* code, int64_t* value) noexcept nogil
