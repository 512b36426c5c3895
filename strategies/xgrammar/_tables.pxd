# The adaptive token mask cache of strategy xgrammar (see _tables.pyx): per position
# (a dotted rule before a terminal, the terminal's DFA state) the tokens accepted in
# any context and the context-dependent ones, built once per grammar and vocabulary.
# _pda.Parser reads it (Tables, Pos, Inner) to fill masks.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from strategies.xgrammar._charts cimport Charts, RuleTables
from toolkit.core.cutil cimport BYTES, I64Map, grow
from toolkit.core.ids cimport state_t, symbol_t, token_t, word_t
from toolkit.core.trie cimport TokenTrie


cdef enum:
    K_ACCEPTED = 0     # an Inner stores S as its accepted ids
    K_REJECTED = 1     # ... as its rejected ids (the text tokens not in S)
    K_BITSET = 2       # ... as a bitset of S


cdef struct Inner:
    # A terminal's DFA state, shared by every position in it: the tokens its DFA reads
    # without dying (S), and the outermost trie nodes where the DFA accepts and the
    # token goes on (the frontier: below it, what follows the terminal decides).
    int64_t data     # S: offset into the id pool (kinds K_ACCEPTED, K_REJECTED) or the word pool (K_BITSET)
    int64_t fr       # first frontier record
    int32_t n_data   # ids (K_ACCEPTED, K_REJECTED) or words (K_BITSET)
    int32_t n_fr     # frontier records
    uint8_t kind     # K_ACCEPTED, K_REJECTED or K_BITSET


cdef struct Frontier:
    int64_t path     # offset into the path byte pool: the node's bytes from the root
    int32_t node     # trie index of the node
    int32_t depth    # its bytes


cdef struct Pos:
    int64_t extra    # offset into the id pool: accepted token ids outside S
    int64_t unc      # offset into the id pool: uncertain tokens (trie indexes)
    int32_t inner    # its terminal state's Inner
    int32_t n_extra  # ids at extra
    int32_t n_unc    # trie indexes at unc


cdef struct Buf:
    # A growing array of fixed-size items (the item size is the caller's).
    char* p
    int64_t n        # items used
    int64_t cap      # items allocated


cdef inline int buf_reserve(Buf* b, int64_t more, size_t item) noexcept nogil:
    """Room for ``more`` items past ``b.n``: 0, or ERR_MEMORY."""
    return grow(<void**>&b.p, &b.cap, b.n + more, item)


cdef enum:
    MEMO_BASES = 8                 # recent bitset Inners a new one may start from
    MEMO_MIN_NODES = 2             # smaller subtrees are walked again
    MEMO_MAX_TOKS = 1 << 26        # trie indexes kept per terminal (256 MiB)
    MEMO_MAX_INDEG = 1 << 24       # larger terminals (classes x states) keep nothing
    CANON_MAX = 16                 # states a canonical state may reach (dead not counted)
    CANON_MIN_BYTES = 128          # bytes a canonical state must be alive on
    CANON_SHARED = 0x7FFFFFFF      # the owner of a fingerprint that several terminals' states have


cdef struct Memo:
    # The walk of a root child's subtree with the DFA in state q after the child's
    # byte depends on (child, q) alone.  States of one terminal often share it (every
    # state of a key-excluding string goes to the same "inside" state on most bytes),
    # so while one terminal's Inners are built, the walks of pairs that several
    # states reach are kept: their trie indexes and their frontier records.
    symbol_t t             # the terminal whose Inners are being built, -1 before any
    bint off               # keep nothing, build each Inner afresh (build_cache(share_walks=False))
    int32_t* indeg         # [k * n_states]: states going to state q on class c
    I64Map walks           # (child, q) -> its MemoEntry
    Buf toks               # int32 trie indexes of the walks kept
    Buf ents               # MemoEntry
    int32_t n_roots        # the root's children
    int32_t roots[BYTES]   # ... their trie indexes
    int32_t root_ntok[BYTES]  # ... the tokens below each
    # the Inner being built, per root child: its walk (trie indexes in the walk
    # buffer (pc_memo 0), this memo's toks (1) or the global memo's (2)), -1 tokens
    # when the DFA dies on the child's byte
    int64_t pc_off[BYTES]  # where the walk's trie indexes start
    int32_t pc_n[BYTES]    # how many, or -1
    uint8_t pc_memo[BYTES] # in which buffer
    # recent bitset Inners of the terminal: a new bitset starts as a copy of the one
    # whose state agrees most with its state on the root children's bytes
    state_t base_state[MEMO_BASES]  # their states
    int64_t base_data[MEMO_BASES]   # their bitsets in the word pool
    int32_t n_base         # bitsets kept (at most MEMO_BASES)
    int32_t base_next      # where the next one goes, modulo MEMO_BASES


cdef struct MemoEntry:
    int64_t tok        # its trie indexes in Memo.toks
    int64_t fr         # first Frontier record (in Tables.frs) of the walk that made it
    int32_t n_tok      # trie indexes
    int32_t n_fr       # frontier records


cdef struct Build:
    # The scratch of one build_cache.
    uint8_t* cls            # [n_tokens]: marks the trie indexes a walk read (for rejected lists)
    state_t* stack          # [max_depth + 2]: the DFA state per depth of a walk
    uint8_t* path           # [max_depth + 2]: the bytes from the root to the node walked
    int32_t* esc            # [max_depth + 2]: per depth of a base parse, a path left the rule there
    int32_t* eb             # [n_tokens]: trie indexes a walk read; a position's accepted ids
    int32_t* ub             # [n_tokens]: a position's uncertain trie indexes
    state_t* rep            # per terminal state: the first state that no token tells apart from it
    int32_t* canon          # per terminal state: its canonical id, or -1
    int32_t* canon_inner    # per canonical id: its Inner, -1 before it is built
    Memo memo               # walks shared by the states of the terminal being built
    Memo gm                 # walks below states with a canonical id, kept for every terminal


cdef struct Canon:
    # The scratch of _canon_states.
    uint64_t* fp            # per candidate state: its fingerprint (never 0)
    symbol_t* term_of       # per candidate: its terminal's number
    state_t* state_of       # per candidate: its state
    int64_t n_cand          # candidates
    I64Map owner            # fingerprint -> the terminal number with it, CANON_SHARED once two have it
    uint32_t* seen          # per state of the terminal walked: the stamp of the walk that reached it
    int32_t* pos_of         # per state: its breadth-first number in that walk
    uint32_t stamp          # the walk's stamp


cdef class Tables(RuleTables):
    cdef readonly int64_t n_pos             # positions: per dotted rule before a terminal, its states
    cdef readonly int64_t shared_walks      # root-child walks the cache build reused
    cdef readonly int64_t merged_positions  # positions copied from an equivalent state's
    cdef readonly int64_t twin_positions    # positions copied from an equivalent dotted rule's
    cdef readonly int64_t ended_positions   # positions that end their rule, nothing after it: no walks
    cdef readonly int64_t shared_inners     # terminal states given another terminal's Inner
    cdef readonly int32_t vocab_size        # the vocabulary's ids (a mask row's bits)
    cdef readonly int32_t n_words           # words of a mask row
    cdef readonly int32_t n_tokens          # the trie's (text) tokens
    cdef list _cache_keep                   # the trie and arrays behind the cache's pointers
    cdef const int64_t* pos_start           # per dotted rule: its first position, -1 when no terminal is next
    cdef const int32_t* dr_twin             # per dotted rule: the first with the same rest and follow set
    cdef Pos* pos                           # per position (NULL: no cache, fill refuses)
    cdef int32_t* inner_of                  # per terminal state: its Inner, -1 before it is built
    cdef Buf inners                         # Inner
    cdef Buf frs                            # Frontier
    cdef Buf paths                          # uint8: the frontier nodes' bytes
    cdef Buf pool                           # int32: id lists (token ids, or trie indexes for uncertain ones)
    cdef Buf wpool                          # word_t: bitsets
    cdef const token_t* trie_ids            # the trie's ids in DFS order (uncertain ones are indexes into it)
    cdef const uint8_t* blob                # token bytes in trie order
    cdef const int64_t* offsets             # trie index m's bytes: blob[offsets[m] : offsets[m + 1]]
    cdef const word_t* text_words           # bitset of every text token

    cdef int _build(self, Charts p, TokenTrie trie, Build* b, bint share_walks, int64_t limit,
                    int64_t* used) noexcept nogil
    cdef int _state_reps(self, state_t* rep, int32_t depth, bint share_walks) noexcept nogil
    cdef int _rule_positions(self, Charts p, int32_t r, TokenTrie trie, Build* b, bint share_walks,
                             int64_t limit, int64_t* used) noexcept nogil
    cdef int64_t _canon_states(self, int32_t* canon) noexcept nogil
    cdef int _canon_candidates(self, Canon* c) noexcept nogil
    cdef uint64_t _fingerprint(self, symbol_t t, state_t q, const int32_t* csize, Canon* c) noexcept nogil
    cdef int64_t _canon_ids(self, Canon* c, int32_t* canon) noexcept nogil
    cdef int _memo_start(self, Memo* memo, symbol_t t) noexcept nogil
    cdef int _inner(self, symbol_t t, state_t s, TokenTrie trie, Build* b) noexcept nogil
    cdef int _inner_walks(self, symbol_t t, state_t s, TokenTrie trie, Build* b, int32_t* count) noexcept nogil
    cdef int _inner_bitset(self, Inner* inn, symbol_t t, state_t s, TokenTrie trie, Build* b) noexcept nogil
    cdef int _inner_ids(self, Inner* inn, Build* b, int32_t count) noexcept nogil
    cdef int _walk_child(self, symbol_t t, state_t s, int32_t child, TokenTrie trie, state_t* stack, uint8_t* path,
                         int32_t* sb, int32_t* count) noexcept nogil
    cdef int _occurrence(self, Charts p, int32_t r, state_t s, int32_t inner, TokenTrie trie,
                         Build* b, bint share_walks) noexcept nogil
    cdef int _below_frontier(self, Charts p, int32_t r, state_t s, const Frontier* f, TokenTrie trie, Build* b,
                             int32_t* ne, int32_t* nu) noexcept nogil
    cdef int _store_position(self, int32_t r, state_t s, int32_t inner, const int32_t* eb, int32_t ne,
                             const int32_t* ub, int32_t nu) noexcept nogil
    cdef int64_t _cache_bytes(self) noexcept nogil
    cdef object _inner_set(self, int32_t inner)
