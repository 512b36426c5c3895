"""The C core of strategy ``xgrammar``: a byte-level Earley parser and the adaptive
token mask cache.

**The parser.**  Scannerless Earley over bytes, the algorithm of
:mod:`toolkit.grammar.earley` (the oracle) in C: an item is a dotted rule ``r`` (an index
into ``dr_sym``, where each production's symbols are followed by ``-1``) and an
origin chart; a *term* ``(t, o, s)`` is terminal ``t`` predicted at chart ``o``,
its DFA in state ``s``.  A byte advances the terms; a term whose state accepts
completes ``t`` for the items of chart ``o`` waiting on it.  Nullable symbols follow
Aycock & Horspool.  Charts are stacked, so undoing bytes is truncation.

**Positions.**  XGrammar (Dong et al. 2024) precomputes, for every position of its
byte-level pushdown automaton, which tokens are accepted, rejected or
context-dependent.  Here a position is ``(r, s)``: an item at dotted rule ``r``
whose next symbol is terminal ``t = dr_sym[r]``, with ``t``'s DFA in state ``s``.
The cache of a position is computed by a *base parse*: chart 0 holds the item
``(r, BASE)`` and the term ``(t, 0, s)`` only, and a completion of the base item
*pops* out of the rule, where the parse knows nothing more.  Chart 0 completes
nothing even when ``s`` accepts: that completion happened in the real chart already,
where it made positions of its own.  A token is

* **accepted** when its bytes keep the base parse alive (a term live, or the rule
  just completed): in any context the real parse is alive too;
* **context-dependent** (uncertain) when only a path that popped the rule can read
  it, and the byte after the pop is in ``FOLLOW(lhs)`` (the rule's follow set, first
  bytes: XGrammar's context expansion, which rejects more tokens up front);
* **rejected** otherwise.

**Sharing.**  Until its terminal's DFA accepts, a base parse is that DFA alone, so
the tokens it reads without the DFA dying (``S``) depend only on ``(t, s)``: an
*Inner* record computes them once per terminal state, with the *frontier*, the
outermost trie nodes where the DFA accepts and the token goes on.  A position then
only runs the base parse below its Inner's frontier nodes (replaying each node's
bytes first), adding the tokens accepted there outside ``S`` and the uncertain
ones.  ``S`` is stored as the smaller of its accepted and rejected id lists, or a
bitset when both are longer than one (XGrammar's adaptive storage).

An Inner's walk runs one root child at a time, and below a child's byte it depends
only on the child and the DFA state reached: a terminal's states that reach the same
state on that byte share the walk (kept while the terminal's Inners are built).  A
string terminal that excludes known keys has a state per key prefix, and all of them
go to one "inside the string" state on most bytes, so its hundred states cost about
one full walk.  And states that no string as long as the longest token tells apart
(the counter states of a ``maxLength`` string far from its bound) read every token
alike: the later ones copy the first one's Inner and position records (Moore's
refinement, stopped after that many rounds).  Dotted rules with the same rest of
production and the same follow set (the many ``value: STRING`` rules of a schema)
make the same base parses: the later ones copy the first one's records.  Across
terminals, states whose DFAs from there are the same up to renaming (every object's
key-excluding string has the same "inside the string" state, with its UTF-8 states)
get one canonical id: they share one Inner, and other states' walks into them are
kept for every terminal.

A mask is the union over the live positions of ``S`` (once per Inner) and the
extra ids, then the uncertain tokens checked one by one against the real parser,
in trie order so a token reuses the bytes it shares with the previous one.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport WorkCounters, hash_ints, mix64
from toolkit.core.session cimport StrategyOps, UndoStack, add_work, ops_capsule_of, undo_copy, undo_pop, undo_reserve
from toolkit.core.ids cimport token_t, word_t
from toolkit.core.trie cimport TokenTrie, TrieNode

from toolkit.core.errors import LimitExceeded
from toolkit.core.classform import check_class_form

cnp.import_array()

cdef class Parser

__all__ = ["Tables", "Parser", "KIND_NAMES", "ops_capsule"]

KIND_NAMES = ("accepted", "rejected", "bitset")

cdef enum:
    BASE = -1          # origin of the base item of a position's parse
    K_ACCEPTED = 0     # position stores its accepted ids
    K_REJECTED = 1     # ... its rejected ids
    K_BITSET = 2       # ... a bitset of its accepted ids
    ERR_ITEMS = -1     # push: too many items in one chart
    ERR_MEMORY = -2
    ERR_NO_CACHE = -3  # a fill without the tables' cache (or for another vocabulary)


cdef struct Item:
    int32_t r   # dotted rule
    int32_t o   # origin chart, BASE for a position's base item


cdef struct Term:
    int32_t t   # terminal symbol
    int32_t o   # chart that predicted it
    int32_t s   # its DFA state


cdef struct Inner:
    # A terminal's DFA state, shared by every position in it: the tokens its DFA reads
    # without dying (S), and the outermost trie nodes where the DFA accepts and the
    # token goes on (the frontier: below it, what follows the terminal decides).
    int64_t data     # S: offset into the id pool (kinds 0, 1) or the word pool (kind 2)
    int64_t fr       # first frontier record
    int32_t n_data   # ids (kinds 0, 1) or words (kind 2)
    int32_t n_fr
    uint8_t kind


cdef struct Frontier:
    int64_t path     # offset into the path byte pool: the node's bytes from the root
    int32_t node
    int32_t depth


cdef struct Pos:
    int64_t extra    # offset into the id pool: accepted ids outside S (token ids)
    int64_t unc      # offset into the id pool: uncertain tokens (trie indexes)
    int32_t inner
    int32_t n_extra
    int32_t n_unc


cdef struct Buf:
    char* p
    int64_t n      # items used
    int64_t cap    # items allocated


cdef enum:
    MEMO_BASES = 8
    CANON_MAX = 16     # states a canonical state may reach (dead not counted)
    CANON_MIN_BYTES = 128  # bytes a canonical state must be alive on


cdef struct Memo:
    # The walk of a root child's subtree with the DFA in state q after the child's
    # byte depends on (child, q) alone.  States of one terminal often share it (every
    # state of a key-excluding string goes to the same "inside" state on most bytes),
    # so while one terminal's Inners are built, the walks of pairs that several
    # states reach are kept: their trie indexes and their frontier records.
    int32_t t          # the terminal whose Inners are being built, -1 before any
    bint off           # keep nothing, build each Inner afresh (build_cache(share_walks=False))
    int32_t* indeg     # [k * n_states]: states going to state q on class c
    int64_t* hkeys     # (child << 32 | q) -> entry, open addressing
    int32_t* hvals
    int64_t hcap, hn
    Buf toks           # int32 trie indexes
    Buf ents           # MemoEntry
    # the root's children, and the tokens below each
    int32_t n_roots
    int32_t roots[256]
    int32_t root_ntok[256]
    # the Inner being built: per root child, its walk (trie indexes in the walk
    # buffer (pc_memo 0), this memo's toks (1) or the global memo's (2)), -1 tokens
    # when the DFA dies on the child's byte
    int64_t pc_off[256]
    int32_t pc_n[256]
    uint8_t pc_memo[256]
    # recent bitset Inners of the terminal: a new bitset starts as a copy of the one
    # whose state agrees most with its state on the root children's bytes
    int32_t base_state[MEMO_BASES]
    int64_t base_data[MEMO_BASES]
    int32_t n_base, base_next


cdef struct MemoEntry:
    int64_t tok
    int64_t fr         # first Frontier record (in Tables.frs) of the walk that made it
    int32_t n_tok
    int32_t n_fr


cdef int _reserve(Buf* b, int64_t more, size_t item) noexcept nogil:
    """Room for ``more`` items past ``b.n``; -1 when out of memory."""
    cdef int64_t need = b.n + more, c
    cdef void* q
    if need <= b.cap:
        return 0
    c = b.cap * 2 if b.cap else 1024
    while c < need:
        c *= 2
    q = realloc(b.p, c * item)
    if q == NULL:
        return -1
    b.p = <char*>q
    b.cap = c
    return 0


cdef enum:
    MEMO_MIN_NODES = 2             # smaller subtrees are walked again
    MEMO_MAX_TOKS = 1 << 26        # trie indexes kept per terminal (256 MiB)
    MEMO_MAX_INDEG = 1 << 24       # larger terminals (classes x states) keep nothing


cdef void _memo_reset(Memo* m, int32_t t) noexcept nogil:
    free(m.indeg)
    m.indeg = NULL
    m.t = t
    m.hn = 0
    m.toks.n = 0
    m.ents.n = 0
    m.n_base = 0
    m.base_next = 0
    if m.hvals != NULL:
        memset(m.hvals, 0xFF, m.hcap * sizeof(int32_t))


cdef void _memo_free(Memo* m) noexcept nogil:
    free(m.indeg)
    free(m.hkeys)
    free(m.hvals)
    free(m.toks.p)
    free(m.ents.p)


cdef int _memo_keep(Memo* m, int64_t key, const int32_t* toks, int32_t n_tok, int64_t fr, int64_t n_fr) noexcept nogil:
    """Keep a walk (its trie indexes, and its frontier records in Tables.frs) under
    ``key``, unless the memo is full."""
    cdef MemoEntry* me
    if m.toks.n + n_tok > MEMO_MAX_TOKS:
        return 0
    if _reserve(&m.toks, n_tok, sizeof(int32_t)) < 0 or _reserve(&m.ents, 1, sizeof(MemoEntry)) < 0:
        return ERR_MEMORY
    me = &(<MemoEntry*>m.ents.p)[m.ents.n]
    me.tok = m.toks.n
    me.n_tok = n_tok
    me.fr = fr
    me.n_fr = <int32_t>n_fr
    memcpy(&(<int32_t*>m.toks.p)[m.toks.n], toks, n_tok * sizeof(int32_t))
    m.toks.n += n_tok
    if _memo_put(m, key, <int32_t>m.ents.n) < 0:
        return ERR_MEMORY
    m.ents.n += 1
    return 0


cdef inline const int32_t* _piece(const Memo* memo, const Memo* gm, const int32_t* sb, int32_t ci) noexcept nogil:
    """Root child ci's trie indexes in the Inner being built (see Memo.pc_memo)."""
    if memo.pc_memo[ci] == 1:
        return <const int32_t*>memo.toks.p + memo.pc_off[ci]
    if memo.pc_memo[ci] == 2:
        return <const int32_t*>gm.toks.p + memo.pc_off[ci]
    return sb + memo.pc_off[ci]


cdef inline int64_t _memo_slot(const Memo* m, int64_t key) noexcept nogil:
    cdef int64_t h = <int64_t>(mix64(<uint64_t>key) & <uint64_t>(m.hcap - 1))
    while m.hvals[h] >= 0 and m.hkeys[h] != key:
        h = (h + 1) & (m.hcap - 1)
    return h


cdef int _memo_put(Memo* m, int64_t key, int32_t entry) noexcept nogil:
    cdef int64_t c, i, h
    cdef int64_t* ok
    cdef int32_t* ov
    if 2 * (m.hn + 1) > m.hcap:
        c = m.hcap * 2 if m.hcap else 1024
        ok = m.hkeys
        ov = m.hvals
        m.hkeys = <int64_t*>malloc(c * sizeof(int64_t))
        m.hvals = <int32_t*>malloc(c * sizeof(int32_t))
        if m.hkeys == NULL or m.hvals == NULL:
            free(ok)
            free(ov)
            return ERR_MEMORY
        memset(m.hvals, 0xFF, c * sizeof(int32_t))
        i = m.hcap
        m.hcap = c
        while i > 0:
            i -= 1
            if ov[i] >= 0:
                h = _memo_slot(m, ok[i])
                m.hkeys[h] = ok[i]
                m.hvals[h] = ov[i]
        free(ok)
        free(ov)
    h = _memo_slot(m, key)
    m.hkeys[h] = key
    m.hvals[h] = entry
    m.hn += 1
    return 0


cdef int _cmp_uint64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0], y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef int _cmp_int32(const void* a, const void* b) noexcept nogil:
    cdef int32_t x = (<const int32_t*>a)[0], y = (<const int32_t*>b)[0]
    return (x > y) - (x < y)


def _twins(dr_sym, dr_lhs, follow) -> np.ndarray:
    """Per dotted rule, the first dotted rule with the same symbols up to the end of its
    production and the same follow set of its lhs.  Their positions' base parses are
    the same parse (the rest of the rule, then the follow set when it pops), so the
    later one copies the earlier one's records."""
    n = dr_sym.shape[0]
    twin = np.arange(n, dtype=np.int32)
    rows: dict[bytes, int] = {}
    ids: dict[tuple, int] = {}
    first: dict[int, int] = {}
    sid = [0] * n
    syms = dr_sym.tolist()
    lhs = dr_lhs.tolist()
    for r in range(n - 1, -1, -1):
        if syms[r] < 0:
            key = (-1, rows.setdefault(follow[lhs[r]].tobytes(), len(rows)))
        else:
            key = (syms[r], sid[r + 1])
        sid[r] = ids.setdefault(key, len(ids))
    for r in range(n):
        twin[r] = first.setdefault(sid[r], r)
    return twin


cdef class Tables:
    """A grammar's dotted rules, terminal DFAs (class form), follow sets and, once
    :meth:`build_cache` ran, every position's token sets."""

    cdef readonly int32_t n_nt, n_sym, n_dr, start_nt, max_items
    cdef readonly int64_t n_pos
    cdef readonly int64_t shared_walks  # root-child walks the cache build reused
    cdef readonly int64_t merged_positions  # positions copied from an equivalent state's
    cdef readonly int64_t twin_positions  # positions copied from an equivalent dotted rule's
    cdef readonly int64_t shared_inners  # terminal states given another terminal's Inner
    cdef readonly int32_t vocab_size, n_words, n_tokens
    cdef object _keep
    cdef int _n_grammar_arrays
    cdef const int32_t* dr_sym
    cdef const int32_t* dr_lhs
    cdef const int32_t* nt_off
    cdef const int32_t* nt_drs
    cdef const uint8_t* nullable
    cdef const int32_t* t_table     # per terminal, offset into tables
    cdef const int64_t* t_tab_off
    cdef const int32_t* t_k
    cdef const uint8_t* t_cls       # [n_terminals, 256]
    cdef const int64_t* t_acc_off   # per terminal, offset of its states (also into inner_of)
    cdef const uint8_t* t_acc
    cdef const int32_t* t_start
    cdef const uint8_t* follow      # [n_nt, 256]
    cdef const int64_t* pos_start   # per dotted rule; -1 when the next symbol is no terminal
    cdef const int32_t* dr_twin     # per dotted rule: the first with the same rest and follow set
    cdef Pos* pos
    cdef int32_t* inner_of          # per terminal DFA state: its Inner, -1 before it is built
    cdef Buf inners                 # Inner
    cdef Buf frs                    # Frontier
    cdef Buf paths                  # uint8
    cdef Buf pool                   # int32: id lists
    cdef Buf wpool                  # word_t: bitsets
    cdef const token_t* trie_ids    # the trie's ids in DFS order (for uncertain indexes)
    cdef const uint8_t* blob        # token bytes in trie order
    cdef const int64_t* offsets
    cdef const word_t* text_words   # bitset of every text token

    def __cinit__(self):
        self.pos = NULL
        self.inner_of = NULL
        memset(&self.inners, 0, sizeof(Buf))
        memset(&self.frs, 0, sizeof(Buf))
        memset(&self.paths, 0, sizeof(Buf))
        memset(&self.pool, 0, sizeof(Buf))
        memset(&self.wpool, 0, sizeof(Buf))

    def __dealloc__(self):
        free(self.pos)
        free(self.inner_of)
        free(self.inners.p)
        free(self.frs.p)
        free(self.paths.p)
        free(self.pool.p)
        free(self.wpool.p)

    def __init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, int n_nt, int start_nt, terminals, follow,
                 *, int max_items):
        """``terminals``: per terminal symbol ``n_nt + i``, ``(table, classes, accepting,
        start)``; ``follow``: bool ``[n_nt, 256]``."""
        cdef int i
        if max_items < 1:
            raise ValueError(f"max_items must be positive, got {max_items}")
        dr_sym = np.ascontiguousarray(dr_sym, dtype=np.int32)
        dr_lhs = np.ascontiguousarray(dr_lhs, dtype=np.int32)
        nt_off = np.ascontiguousarray(nt_off, dtype=np.int32)
        nt_drs = np.ascontiguousarray(nt_drs, dtype=np.int32)
        nullable = np.ascontiguousarray(nullable, dtype=np.uint8)
        follow = np.ascontiguousarray(follow, dtype=np.uint8).reshape(n_nt, 256)
        n_t = len(terminals)
        if nullable.shape[0] != n_nt + n_t or nt_off.shape[0] != n_nt + 1 or dr_lhs.shape[0] != dr_sym.shape[0]:
            raise ValueError("inconsistent grammar tables")
        if dr_sym.size and (dr_sym.min() < -1 or dr_sym.max() >= n_nt + n_t):
            raise ValueError("a dotted rule names an unknown symbol")
        if dr_sym.size and dr_sym[dr_sym.shape[0] - 1] != -1:
            raise ValueError("the last production is not closed by -1")
        if dr_lhs.size and (dr_lhs.min() < 0 or dr_lhs.max() >= n_nt):
            raise ValueError("a dotted rule's lhs is not a nonterminal")
        if n_nt < 1 or not 0 <= start_nt < n_nt:
            raise ValueError(f"start {start_nt} is not one of the {n_nt} nonterminals")
        if nt_off[0] != 0 or nt_off[n_nt] != nt_drs.shape[0] or np.any(np.diff(nt_off) < 0):
            raise ValueError("nt_off must rise from 0 to len(nt_drs)")
        if nt_drs.size and (nt_drs.min() < 0 or nt_drs.max() >= dr_sym.shape[0]
                            or np.any(dr_lhs[nt_drs] != np.repeat(np.arange(n_nt), np.diff(nt_off)))):
            raise ValueError("nt_drs must list dotted rules of each nonterminal")
        tabs, ks, clss, accs, starts, tab_off, acc_off = [], [], [], [], [], [0], [0]
        for i, (table, classes, acc, start) in enumerate(terminals):
            table, classes = check_class_form(table, classes, what=f"terminal {n_nt + i}")
            acc = np.ascontiguousarray(acc, dtype=np.uint8)
            if acc.shape[0] != table.shape[0] or not 0 <= int(start) < table.shape[0]:
                raise ValueError(f"terminal {n_nt + i}: accepting or start do not fit its table")
            tabs.append(table.ravel())
            ks.append(table.shape[1])
            clss.append(classes)
            accs.append(acc)
            starts.append(int(start))
            tab_off.append(tab_off[len(tab_off) - 1] + table.size)
            acc_off.append(acc_off[len(acc_off) - 1] + acc.shape[0])
        t_table = np.concatenate(tabs) if tabs else np.zeros(1, np.int32)
        t_cls = np.concatenate(clss) if clss else np.zeros(256, np.uint8)
        t_acc = np.concatenate(accs) if accs else np.zeros(1, np.uint8)
        t_k = np.asarray(ks or [1], dtype=np.int32)
        t_start = np.asarray(starts or [0], dtype=np.int32)
        t_tab_off = np.asarray(tab_off, dtype=np.int64)
        t_acc_off = np.asarray(acc_off, dtype=np.int64)
        # positions: one per (dotted rule before a terminal, DFA state)
        pos_start = np.full(dr_sym.shape[0], -1, dtype=np.int64)
        n_pos = 0
        for i in range(dr_sym.shape[0]):
            s = int(dr_sym[i])
            if s >= n_nt:
                pos_start[i] = n_pos
                n_pos += tabs[s - n_nt].shape[0] // ks[s - n_nt]
        dr_twin = _twins(dr_sym, dr_lhs, follow)
        self._keep = [dr_sym, dr_lhs, nt_off, nt_drs, nullable, t_table, t_tab_off, t_k, t_cls, t_acc_off,
                      t_acc, t_start, follow, pos_start, dr_twin]
        self._n_grammar_arrays = len(self._keep)
        self.n_nt, self.n_sym, self.n_dr, self.start_nt = n_nt, n_nt + n_t, dr_sym.shape[0], start_nt
        self.max_items = max_items
        self.n_pos = n_pos
        self.dr_sym = <const int32_t*>cnp.PyArray_DATA(dr_sym)
        self.dr_lhs = <const int32_t*>cnp.PyArray_DATA(dr_lhs)
        self.nt_off = <const int32_t*>cnp.PyArray_DATA(nt_off)
        self.nt_drs = <const int32_t*>cnp.PyArray_DATA(nt_drs)
        self.nullable = <const uint8_t*>cnp.PyArray_DATA(nullable)
        self.t_table = <const int32_t*>cnp.PyArray_DATA(t_table)
        self.t_tab_off = <const int64_t*>cnp.PyArray_DATA(t_tab_off)
        self.t_k = <const int32_t*>cnp.PyArray_DATA(t_k)
        self.t_cls = <const uint8_t*>cnp.PyArray_DATA(t_cls)
        self.t_acc_off = <const int64_t*>cnp.PyArray_DATA(t_acc_off)
        self.t_acc = <const uint8_t*>cnp.PyArray_DATA(t_acc)
        self.t_start = <const int32_t*>cnp.PyArray_DATA(t_start)
        self.follow = <const uint8_t*>cnp.PyArray_DATA(follow)
        self.pos_start = <const int64_t*>cnp.PyArray_DATA(pos_start)
        self.dr_twin = <const int32_t*>cnp.PyArray_DATA(dr_twin)

    # ---------------------------------------------------------------- cache --

    def build_cache(self, TokenTrie trie, blob, offsets, text_words, *, int64_t max_cache_bytes,
                    bint share_walks=True):
        """Every position's token sets (see the module doc).  ``blob``/``offsets``:
        the trie's tokens' bytes in trie order; ``text_words``: the bitset of every
        text token.  ``share_walks``: reuse a root child's walk across the states of a
        terminal that reach the same state on its byte (:c:type:`Memo`), one state's
        records for the states no token tells apart from it, one dotted rule's for its
        twins (:func:`_twins`), and one Inner for states alike across terminals
        (:meth:`_canon_states`); False builds every position afresh, for ablations
        and tests: the cache is the same.  Raises
        :class:`LimitExceeded` past ``max_cache_bytes``."""
        if self.inner_of != NULL:
            raise RuntimeError("build_cache runs once per Tables (it ran already)")
        blob = np.ascontiguousarray(blob, dtype=np.uint8)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        text_words = np.ascontiguousarray(text_words, dtype=np.uint32)
        if offsets.shape[0] != trie.num_tokens + 1 or text_words.shape[0] != (trie.vocab_size + 31) // 32:
            raise ValueError("token bytes or text bitset do not fit the trie")
        self._keep += [trie, blob, offsets, text_words]
        self.trie_ids = trie.token_ids
        self.blob = <const uint8_t*>cnp.PyArray_DATA(blob)
        self.offsets = <const int64_t*>cnp.PyArray_DATA(offsets)
        self.text_words = <const word_t*>cnp.PyArray_DATA(text_words)
        self.vocab_size = trie.vocab_size
        self.n_words = (trie.vocab_size + 31) // 32
        self.n_tokens = trie.num_tokens
        cdef Parser p = Parser(self, base=True)
        cdef int64_t n_pos = self.n_pos, n_states_all = self.t_acc_off[self.n_sym - self.n_nt]
        cdef int32_t depth_cap = trie.max_depth + 2
        cdef uint8_t* cls = <uint8_t*>malloc(max(1, trie.num_tokens))
        cdef int32_t* stack = <int32_t*>malloc(depth_cap * sizeof(int32_t))
        cdef uint8_t* path = <uint8_t*>malloc(depth_cap)
        cdef int32_t* eb = <int32_t*>malloc(max(1, trie.num_tokens) * sizeof(int32_t))
        cdef int32_t* ub = <int32_t*>malloc(max(1, trie.num_tokens) * sizeof(int32_t))
        self.pos = <Pos*>malloc(max(1, n_pos) * sizeof(Pos))
        self.inner_of = <int32_t*>malloc(max(1, n_states_all) * sizeof(int32_t))
        # per terminal state: the first state no token tells apart from it; its
        # canonical id; per canonical id, its Inner
        cdef int32_t* rep = <int32_t*>malloc(max(1, n_states_all) * sizeof(int32_t))
        cdef int32_t* canon = <int32_t*>malloc(max(1, n_states_all) * sizeof(int32_t))
        cdef int32_t* canon_inner = <int32_t*>malloc(max(1, n_states_all) * sizeof(int32_t))
        if (cls == NULL or stack == NULL or path == NULL or eb == NULL or ub == NULL or self.pos == NULL
                or self.inner_of == NULL or rep == NULL or canon == NULL or canon_inner == NULL):
            free(cls)
            free(stack)
            free(path)
            free(eb)
            free(ub)
            free(rep)
            free(canon)
            free(canon_inner)
            free(self.pos)
            self.pos = NULL  # no cache for fill to read
            raise MemoryError()
        memset(self.pos, 0, max(1, n_pos) * sizeof(Pos))
        memset(self.inner_of, 0xFF, max(1, n_states_all) * sizeof(int32_t))
        cdef int64_t used = 0, limit = max_cache_bytes, g
        cdef int32_t r, s, n_states, t
        cdef int rc = 0
        cdef Memo memo
        memset(&memo, 0, sizeof(Memo))
        memo.t = -1
        memo.off = not share_walks
        cdef Memo gm  # walks below states with a canonical id, for every terminal
        memset(&gm, 0, sizeof(Memo))
        gm.t = -1
        memset(canon, 0xFF, max(1, n_states_all) * sizeof(int32_t))
        memset(canon_inner, 0xFF, max(1, n_states_all) * sizeof(int32_t))
        cdef int64_t n_canon = 0
        cdef int32_t ri = 1
        while ri < trie.num_nodes:
            memo.roots[memo.n_roots] = ri
            memo.root_ntok[memo.n_roots] = _subtree_end(trie.nodes, trie.num_nodes, ri, trie.num_tokens) - trie.nodes[ri].token_start
            memo.n_roots += 1
            ri += trie.nodes[ri].subtree_size
        try:
            with nogil:
                if share_walks:
                    n_canon = self._canon_states(canon)
                    if n_canon < 0:
                        rc = ERR_MEMORY
                for t in range(self.n_sym - self.n_nt if rc == 0 else 0):
                    # a minimal DFA of n states tells any two apart with n - 2 bytes
                    if share_walks and self.t_acc_off[t + 1] - self.t_acc_off[t] - 2 > trie.max_depth:
                        rc = self._short_classes(t, trie.max_depth, rep + self.t_acc_off[t])
                        if rc < 0:
                            break
                    else:
                        for s in range(<int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t])):
                            rep[self.t_acc_off[t] + s] = s
                for r in range(self.n_dr if rc == 0 else 0):
                    if self.pos_start[r] < 0:
                        continue
                    t = self.dr_sym[r] - self.n_nt
                    n_states = <int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t])
                    if share_walks and self.dr_twin[r] != r:  # the same parse as an earlier rule's
                        memcpy(&self.pos[self.pos_start[r]], &self.pos[self.pos_start[self.dr_twin[r]]],
                               n_states * sizeof(Pos))
                        self.twin_positions += n_states - 1
                        continue
                    for s in range(1, n_states):
                        g = self.t_acc_off[t] + s
                        if rep[g] != s:  # reads every token as an earlier state does
                            self.pos[self.pos_start[r] + s] = self.pos[self.pos_start[r] + rep[g]]
                            self.inner_of[g] = self.inner_of[self.t_acc_off[t] + rep[g]]
                            self.merged_positions += 1
                            continue
                        if self.inner_of[g] < 0 and canon[g] >= 0 and canon_inner[canon[g]] >= 0:
                            self.inner_of[g] = canon_inner[canon[g]]  # another terminal's, alike
                            self.shared_inners += 1
                        if self.inner_of[g] < 0:
                            rc = self._inner(t, s, trie, &memo, &gm, canon + self.t_acc_off[t], cls, stack, path, eb)
                            if rc < 0:
                                break
                            self.inner_of[g] = <int32_t>(self.inners.n - 1)
                            if canon[g] >= 0:
                                canon_inner[canon[g]] = self.inner_of[g]
                        rc = self._occurrence(p, r, s, self.inner_of[g], trie, stack, eb, ub)
                        if rc < 0:
                            break
                        used = self._cache_bytes()
                        if used > limit:
                            rc = -3
                            break
                    if rc < 0:
                        break
        finally:
            _memo_free(&memo)
            _memo_free(&gm)
            free(rep)
            free(canon)
            free(canon_inner)
            free(cls)
            free(stack)
            free(path)
            free(eb)
            free(ub)
        if rc < 0:  # a half-built cache is no cache: fill refuses it
            free(self.pos)
            self.pos = NULL
        if rc == ERR_ITEMS:
            raise LimitExceeded("earley_items_per_chart", self.max_items + 1, self.max_items,
                                "while precomputing the token mask cache")
        if rc == ERR_MEMORY:
            raise MemoryError()
        if rc == -3:
            raise LimitExceeded("max_cache_bytes", used, limit, "the adaptive token mask cache")

    cdef int _short_classes(self, int32_t t, int32_t depth, int32_t* rep) noexcept nogil:
        """``rep[s]``, for terminal t's states: the first state that no string of at
        most ``depth`` bytes tells apart from s (dead, alive, accepting after each of
        its bytes).  Moore's refinement, stopped after ``depth`` rounds: a token of at
        most ``depth`` bytes is read the same from both, so they share the cache."""
        cdef const int32_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* acc = self.t_acc + self.t_acc_off[t]
        cdef int32_t n = <int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t]), k = self.t_k[t]
        cdef int32_t rnd, s, q, i, n_cls = 3, new_n
        cdef int64_t hcap = 16, h
        cdef uint64_t x
        cdef bint same
        while hcap < 2 * n:
            hcap *= 2
        cdef int32_t* cur = <int32_t*>malloc(n * sizeof(int32_t))
        cdef int32_t* nxt = <int32_t*>malloc(n * sizeof(int32_t))
        cdef int32_t* hs = <int32_t*>malloc(hcap * sizeof(int32_t))
        cdef int32_t* tmp
        if cur == NULL or nxt == NULL or hs == NULL:
            free(cur)
            free(nxt)
            free(hs)
            return ERR_MEMORY
        cur[0] = 0
        for s in range(1, n):
            cur[s] = 1 + (acc[s] != 0)
        for rnd in range(depth):
            memset(hs, 0xFF, hcap * sizeof(int32_t))
            new_n = 0
            for s in range(n):
                x = <uint64_t>cur[s] * <uint64_t>0x9E3779B97F4A7C15
                for i in range(k):
                    x = (x ^ <uint64_t>cur[tab[<int64_t>s * k + i]]) * <uint64_t>0x9E3779B97F4A7C15
                h = <int64_t>(mix64(x) & <uint64_t>(hcap - 1))
                while hs[h] >= 0:
                    q = hs[h]
                    same = cur[q] == cur[s]
                    i = 0
                    while same and i < k:
                        same = cur[tab[<int64_t>q * k + i]] == cur[tab[<int64_t>s * k + i]]
                        i += 1
                    if same:
                        break
                    h = (h + 1) & (hcap - 1)
                if hs[h] >= 0:
                    nxt[s] = nxt[hs[h]]
                else:
                    hs[h] = s
                    nxt[s] = new_n
                    new_n += 1
            tmp = cur
            cur = nxt
            nxt = tmp
            if new_n == n_cls:
                break  # stable: no longer string tells them apart either
            n_cls = new_n
        # the first state of each class (nxt: first state per class id)
        for i in range(n):
            nxt[i] = -1
        for s in range(n):
            if nxt[cur[s]] < 0:
                nxt[cur[s]] = s
            rep[s] = nxt[cur[s]]
        free(cur)
        free(nxt)
        free(hs)
        return 0

    cdef int64_t _canon_states(self, int32_t* canon) noexcept nogil:
        """``canon[g]`` for every terminal state: an id shared by the states, of any
        terminals, whose DFAs from there are the same up to renaming (so they read
        every token alike), or -1.  Only states that reach at most CANON_MAX states
        and are alive on at least CANON_MIN_BYTES bytes get one (a string's "inside"
        state: it reaches itself, the end and the UTF-8 states; short walks are not
        worth it); the id is that part of the DFA written out byte by byte in
        breadth-first order.  That is written out only for states whose cheap
        fingerprint (per reached state: accepting, bytes alive) other terminals'
        states share.  Returns the number of ids, or ERR_MEMORY."""
        cdef int32_t lst[CANON_MAX]
        cdef int32_t sig[CANON_MAX * 257]
        cdef uint64_t fpv[CANON_MAX]
        cdef int32_t csize[256]
        cdef int32_t t, q, m, i, j, c, x, k, n, L, stamp = 0
        cdef int64_t n_ids = 0, hcap = 1024, h, off, fcap = 1024, g, n_all
        cdef uint64_t hv
        cdef bint ok
        cdef const int32_t* tab
        cdef const uint8_t* cl
        cdef const uint8_t* acc
        cdef const int32_t* row
        cdef Buf sigs, offs   # int32 signatures; int64 per id: offset, then length
        memset(&sigs, 0, sizeof(Buf))
        memset(&offs, 0, sizeof(Buf))
        n_all = self.t_acc_off[self.n_sym - self.n_nt]
        while fcap < 2 * n_all:
            fcap *= 2
        cdef int32_t n_max = 1
        for t in range(self.n_sym - self.n_nt):
            n_max = max(n_max, <int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t]))
        # one block: per candidate state its fingerprint; the fingerprint table (key,
        # last terminal with it, terminals with it); per state of a terminal, the
        # stamp it was seen under and its breadth-first number
        cdef char* block = <char*>malloc(max(1, n_all) * (sizeof(uint64_t) + 2 * sizeof(int32_t))
                                         + fcap * (sizeof(uint64_t) + 2 * sizeof(int32_t)) + 2 * n_max * sizeof(int32_t))
        cdef int64_t* hid = <int64_t*>malloc(hcap * sizeof(int64_t))
        if block == NULL or hid == NULL:
            free(block)
            free(hid)
            return ERR_MEMORY
        cdef uint64_t* fp = <uint64_t*>block
        cdef uint64_t* fkey = fp + max(1, n_all)
        cdef int32_t* flast = <int32_t*>(fkey + fcap)
        cdef int32_t* fterms = flast + fcap
        cdef int32_t* seen = fterms + fcap
        cdef int32_t* pos_of = seen + n_max
        cdef int32_t* term_of = pos_of + n_max   # per candidate: its terminal and state
        cdef int32_t* state_of = term_of + max(1, n_all)
        cdef int64_t n_cand = 0
        memset(canon, 0xFF, max(1, n_all) * sizeof(int32_t))
        memset(seen, 0, n_max * sizeof(int32_t))
        memset(hid, 0xFF, hcap * sizeof(int64_t))
        memset(fkey, 0, fcap * sizeof(uint64_t))
        # pass 1: per state reaching at most CANON_MAX states, its fingerprint, and
        # how many terminals have a state with it
        for t in range(self.n_sym - self.n_nt):
            tab = self.t_table + self.t_tab_off[t]
            cl = self.t_cls + <int64_t>t * 256
            acc = self.t_acc + self.t_acc_off[t]
            k = self.t_k[t]
            n = <int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t])
            memset(csize, 0, k * sizeof(int32_t))
            for c in range(256):
                csize[cl[c]] += 1
            for q in range(1, n):
                # only states alive on most bytes: their walks are the long ones
                x = 0
                for c in range(k):
                    if tab[<int64_t>q * k + c] != 0:
                        x += csize[c]
                if x < CANON_MIN_BYTES:
                    continue
                lst[0] = q
                m = 1
                i = 0
                ok = True
                stamp += 1
                seen[q] = stamp
                while ok and i < m:
                    fpv[i] = <uint64_t>acc[lst[i]] << 16
                    for c in range(k):
                        x = tab[<int64_t>lst[i] * k + c]
                        if x == 0:
                            continue
                        fpv[i] += csize[c]
                        if seen[x] != stamp:
                            if m == CANON_MAX:
                                ok = False
                                break
                            seen[x] = stamp
                            lst[m] = x
                            m += 1
                    i += 1
                if not ok:
                    continue
                qsort(fpv, m, sizeof(uint64_t), _cmp_uint64)  # the fingerprint ignores the numbering
                hv = (<uint64_t>0xCBF29CE484222325) ^ <uint64_t>m
                for i in range(m):
                    hv = (hv ^ fpv[i]) * <uint64_t>0x100000001B3
                hv |= 1  # never 0
                fp[n_cand] = hv
                term_of[n_cand] = t
                state_of[n_cand] = q
                n_cand += 1
                h = <int64_t>(hv >> 17) & (fcap - 1)
                while fkey[h] != 0 and fkey[h] != hv:
                    h = (h + 1) & (fcap - 1)
                if fkey[h] == 0:
                    fkey[h] = hv
                    flast[h] = t
                    fterms[h] = 1
                elif flast[h] != t:
                    flast[h] = t
                    fterms[h] += 1
        # pass 2: the candidates whose fingerprint two terminals share, written out
        for g in range(n_cand):
            h = <int64_t>(fp[g] >> 17) & (fcap - 1)
            while fkey[h] != fp[g]:
                h = (h + 1) & (fcap - 1)
            if fterms[h] < 2:
                continue
            t = term_of[g]
            q = state_of[g]
            tab = self.t_table + self.t_tab_off[t]
            cl = self.t_cls + <int64_t>t * 256
            acc = self.t_acc + self.t_acc_off[t]
            k = self.t_k[t]
            # the part q reaches, byte by byte, its states numbered in breadth-first
            # order (pos_of: a state's number, under this q's stamp)
            lst[0] = q
            m = 1
            L = 0
            i = 0
            stamp += 1
            seen[q] = stamp
            pos_of[q] = 0
            while i < m:
                sig[L] = acc[lst[i]]
                L += 1
                row = tab + <int64_t>lst[i] * k
                for c in range(256):
                    x = row[cl[c]]
                    if x == 0:
                        sig[L] = -1
                    else:
                        if seen[x] != stamp:
                            seen[x] = stamp
                            pos_of[x] = m
                            lst[m] = x
                            m += 1
                        sig[L] = pos_of[x]
                    L += 1
                i += 1
            hv = hash_ints(sig, L)
            h = <int64_t>(hv >> 17) & (hcap - 1)
            while hid[h] >= 0:
                off = (<int64_t*>offs.p)[2 * hid[h]]
                if ((<int64_t*>offs.p)[2 * hid[h] + 1] == L
                        and memcmp(&(<int32_t*>sigs.p)[off], sig, L * sizeof(int32_t)) == 0):
                    break
                h = (h + 1) & (hcap - 1)
            if hid[h] < 0:  # a new id
                if _reserve(&sigs, L, sizeof(int32_t)) < 0 or _reserve(&offs, 2, sizeof(int64_t)) < 0:
                    n_ids = ERR_MEMORY
                    break
                memcpy(&(<int32_t*>sigs.p)[sigs.n], sig, L * sizeof(int32_t))
                (<int64_t*>offs.p)[offs.n] = sigs.n
                (<int64_t*>offs.p)[offs.n + 1] = L
                sigs.n += L
                offs.n += 2
                hid[h] = n_ids
                n_ids += 1
            canon[self.t_acc_off[t] + q] = <int32_t>hid[h]
            if 2 * n_ids > hcap:  # grow the table: rehash every id
                free(hid)
                hcap *= 2
                hid = <int64_t*>malloc(hcap * sizeof(int64_t))
                if hid == NULL:
                    n_ids = ERR_MEMORY
                    break
                memset(hid, 0xFF, hcap * sizeof(int64_t))
                for j in range(<int32_t>n_ids):
                    off = (<int64_t*>offs.p)[2 * j]
                    h = <int64_t>(hash_ints(&(<int32_t*>sigs.p)[off], <int32_t>(<int64_t*>offs.p)[2 * j + 1]) >> 17) & (hcap - 1)
                    while hid[h] >= 0:
                        h = (h + 1) & (hcap - 1)
                    hid[h] = j
        free(block)
        free(hid)
        free(sigs.p)
        free(offs.p)
        return n_ids

    cdef int _inner(self, int32_t t, int32_t s, TokenTrie trie, Memo* memo, Memo* gm, const int32_t* canon,
                    uint8_t* cls, int32_t* stack, uint8_t* path, int32_t* sb) noexcept nogil:
        """Build the Inner of terminal t's state s: a DFA walk of the trie (sb: room for
        every trie index; cls: n_tokens bytes of scratch), one root child at a time,
        reusing the walks kept in ``memo`` (see :c:type:`Memo`), or in ``gm`` (kept
        for every terminal) for a child whose state has a canonical id in ``canon``
        (t's states' ids, or NULL: see :meth:`_canon_states`)."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const int32_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* cl = self.t_cls + <int64_t>t * 256
        cdef int32_t k = self.t_k[t], ci, pi, s2, i, q, e, count = 0, walked = 0, b, best = -1
        cdef int32_t n = self.n_tokens, n_states = <int32_t>(self.t_acc_off[t + 1] - self.t_acc_off[t])
        cdef int64_t key, h, f0, agree, best_agree = 0, j
        cdef int rc
        cdef Inner* inn
        cdef MemoEntry* me
        cdef Memo* mm
        cdef int32_t c2
        cdef const int32_t* toks
        cdef word_t* w
        cdef token_t tok
        if memo.t != t:
            _memo_reset(memo, t)
            if not memo.off and <int64_t>k * n_states <= MEMO_MAX_INDEG:
                memo.indeg = <int32_t*>malloc(max(1, k * n_states) * sizeof(int32_t))
                if memo.indeg == NULL:
                    return ERR_MEMORY
                memset(memo.indeg, 0, k * n_states * sizeof(int32_t))
                for q in range(1, n_states):
                    for i in range(k):
                        memo.indeg[i * n_states + tab[<int64_t>q * k + i]] += 1
        if _reserve(&self.inners, 1, sizeof(Inner)) < 0:
            return ERR_MEMORY
        inn = &(<Inner*>self.inners.p)[self.inners.n]
        self.inners.n += 1
        inn.fr = self.frs.n
        inn.n_fr = 0
        # each root child's walk: kept from another state, or walked now into sb
        for ci in range(memo.n_roots):
            pi = memo.roots[ci]
            memo.pc_n[ci] = -1
            s2 = tab[<int64_t>s * k + cl[nodes[pi].byte]]
            if s2 == 0:
                continue
            c2 = canon[s2] if canon != NULL else -1
            mm = gm if c2 >= 0 else memo
            key = (<int64_t>pi << 32) | (c2 if c2 >= 0 else s2)
            if mm.hn:
                h = _memo_slot(mm, key)
                if mm.hvals[h] >= 0:  # walked already from another state
                    self.shared_walks += 1
                    me = &(<MemoEntry*>mm.ents.p)[mm.hvals[h]]
                    memo.pc_off[ci] = me.tok
                    memo.pc_n[ci] = me.n_tok
                    memo.pc_memo[ci] = 2 if c2 >= 0 else 1
                    count += me.n_tok
                    if me.n_fr:
                        if _reserve(&self.frs, me.n_fr, sizeof(Frontier)) < 0:
                            return ERR_MEMORY
                        memcpy(&(<Frontier*>self.frs.p)[self.frs.n], &(<Frontier*>self.frs.p)[me.fr],
                               me.n_fr * sizeof(Frontier))
                        self.frs.n += me.n_fr
                    continue
            e = walked
            f0 = self.frs.n
            rc = self._walk_child(t, s, pi, trie, stack, path, sb, &walked)
            if rc < 0:
                return rc
            memo.pc_off[ci] = e
            memo.pc_n[ci] = walked - e
            memo.pc_memo[ci] = 0
            count += walked - e
            if ((c2 >= 0 or (memo.indeg != NULL and memo.indeg[cl[nodes[pi].byte] * n_states + s2] > 1))
                    and nodes[pi].subtree_size >= MEMO_MIN_NODES):
                rc = _memo_keep(mm, key, &sb[e], walked - e, f0, self.frs.n - f0)
                if rc < 0:
                    return rc
        inn = &(<Inner*>self.inners.p)[self.inners.n - 1]
        inn.n_fr = <int32_t>(self.frs.n - inn.fr)
        if count <= self.n_words:
            inn.kind = K_ACCEPTED
        elif n - count <= self.n_words:
            inn.kind = K_REJECTED
        else:
            inn.kind = K_BITSET
        if inn.kind == K_BITSET:
            if _reserve(&self.wpool, self.n_words, sizeof(word_t)) < 0:
                return ERR_MEMORY
            inn.data = self.wpool.n
            inn.n_data = self.n_words
            w = &(<word_t*>self.wpool.p)[self.wpool.n]
            # start from the recent bitset whose state agrees on the most tokens' first
            # byte, when that leaves less than half the tokens to redo
            for b in range(memo.n_base):
                agree = 0
                for ci in range(memo.n_roots):
                    i = cl[nodes[memo.roots[ci]].byte]
                    if tab[<int64_t>s * k + i] == tab[<int64_t>memo.base_state[b] * k + i]:
                        agree += memo.root_ntok[ci]
                if agree > best_agree:
                    best_agree = agree
                    best = b
            if best >= 0 and 2 * (n - best_agree) < n:
                memcpy(w, &(<word_t*>self.wpool.p)[memo.base_data[best]], self.n_words * sizeof(word_t))
                b = memo.base_state[best]
            else:
                memset(w, 0, self.n_words * sizeof(word_t))
                b = -1
            for ci in range(memo.n_roots):
                pi = memo.roots[ci]
                i = cl[nodes[pi].byte]
                if b >= 0:
                    if tab[<int64_t>s * k + i] == tab[<int64_t>b * k + i]:
                        continue  # the same walk as the base's
                    for j in range(nodes[pi].token_start, nodes[pi].token_start + memo.root_ntok[ci]):
                        tok = self.trie_ids[j]
                        w[tok >> 5] &= ~((<word_t>1) << (tok & 31))
                if memo.pc_n[ci] <= 0:
                    continue
                toks = _piece(memo, gm, sb, ci)
                for i in range(memo.pc_n[ci]):
                    tok = self.trie_ids[toks[i]]
                    w[tok >> 5] |= (<word_t>1) << (tok & 31)
            if not memo.off:
                b = memo.base_next % MEMO_BASES
                memo.base_next += 1
                memo.base_state[b] = s
                memo.base_data[b] = self.wpool.n
                memo.n_base = min(memo.n_base + 1, <int32_t>MEMO_BASES)
            self.wpool.n += self.n_words
            return 0
        if inn.kind == K_ACCEPTED:
            inn.n_data = count
            if _reserve(&self.pool, count, sizeof(int32_t)) < 0:
                return ERR_MEMORY
            inn.data = self.pool.n
        else:
            inn.n_data = n - count
            if _reserve(&self.pool, n - count, sizeof(int32_t)) < 0:
                return ERR_MEMORY
            inn.data = self.pool.n
            memset(cls, 0, n)
        for ci in range(memo.n_roots):
            if memo.pc_n[ci] <= 0:
                continue
            toks = _piece(memo, gm, sb, ci)
            for i in range(memo.pc_n[ci]):
                if inn.kind == K_ACCEPTED:
                    (<int32_t*>self.pool.p)[self.pool.n] = self.trie_ids[toks[i]]
                    self.pool.n += 1
                else:
                    cls[toks[i]] = 1
        if inn.kind == K_REJECTED:
            for i in range(n):
                if not cls[i]:
                    (<int32_t*>self.pool.p)[self.pool.n] = self.trie_ids[i]
                    self.pool.n += 1
        return 0

    cdef int _walk_child(self, int32_t t, int32_t s, int32_t child, TokenTrie trie, int32_t* stack, uint8_t* path,
                         int32_t* sb, int32_t* count) noexcept nogil:
        """Terminal t's DFA from state s over root child ``child``'s subtree: append the
        trie indexes it reads without dying to sb, and its outermost accepting nodes
        with children (with their bytes) to the frontier records."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const TrieNode* node
        cdef const int32_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* cl = self.t_cls + <int64_t>t * 256
        cdef const uint8_t* acc = self.t_acc + self.t_acc_off[t]
        cdef int32_t k = self.t_k[t], pi = child, end = child + trie.nodes[child].subtree_size, depth = 1, s2, i
        cdef int32_t fr_end = 0, c = count[0]
        cdef Frontier* f
        stack[0] = s
        while pi < end:
            node = &nodes[pi]
            s2 = tab[<int64_t>stack[depth - 1] * k + cl[node.byte]]
            if s2 == 0:
                depth -= node.num_parents - 1
                pi += node.subtree_size
                continue
            path[depth] = node.byte
            for i in range(node.token_start, node.token_start + node.token_count):
                sb[c] = i
                c += 1
            if acc[s2] and node.subtree_size > 1 and pi >= fr_end:
                if _reserve(&self.frs, 1, sizeof(Frontier)) < 0 or _reserve(&self.paths, depth, 1) < 0:
                    count[0] = c
                    return ERR_MEMORY
                f = &(<Frontier*>self.frs.p)[self.frs.n]
                f.node = pi
                f.depth = depth
                f.path = self.paths.n
                memcpy(self.paths.p + self.paths.n, &path[1], depth)
                self.paths.n += depth
                self.frs.n += 1
                fr_end = pi + node.subtree_size
            stack[depth] = s2
            depth += 1 - node.num_parents * (node.subtree_size == 1)
            pi += 1
        count[0] = c
        return 0

    cdef int _occurrence(self, Parser p, int32_t r, int32_t s, int32_t inner, TokenTrie trie, int32_t* esc,
                         int32_t* eb, int32_t* ub) noexcept nogil:
        """Position (r, s): below each frontier node of its Inner, the base parse (see
        the module doc) sorts the tokens into accepted-outside-S (eb) and uncertain
        (ub); both are stored in the pool."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const TrieNode* node
        cdef const TrieNode* child
        cdef const Inner* inn = &(<Inner*>self.inners.p)[inner]
        cdef const Frontier* f
        cdef int32_t num_nodes = trie.num_nodes, q, q_end, depth, lhs = self.dr_lhs[r], base_t = self.dr_sym[r]
        cdef int32_t e, code, i, pi, end, j, ne = 0, nu = 0
        cdef const uint8_t* fol = self.follow + <int64_t>lhs * 256
        cdef const uint8_t* fpath
        cdef Pos* ps
        for j in range(inn.n_fr):
            f = &(<Frontier*>self.frs.p)[inn.fr + j]
            fpath = <const uint8_t*>self.paths.p + f.path
            p.start_base(r, s)
            for i in range(f.depth):
                code = p.push(fpath[i])
                if code < 0:
                    return code
            esc[f.depth] = 0
            pi = f.node + 1
            end = f.node + nodes[f.node].subtree_size
            depth = f.depth + 1
            while pi < end:
                node = &nodes[pi]
                if p.n_charts > depth:
                    p.pop(p.n_charts - depth)
                e = esc[depth - 1] | (p.popped[depth - 1] & fol[node.byte])
                code = p.push(node.byte) if p.last_alive() else 0
                if code < 0:
                    return code
                if code == 0:
                    if e:
                        for i in range(node.token_start, _subtree_end(nodes, num_nodes, pi, self.n_tokens)):
                            ub[nu] = i
                            nu += 1
                    depth -= node.num_parents - 1
                    pi += node.subtree_size
                    continue
                if node.token_count and not p.term_alive(base_t, 0):
                    for i in range(node.token_start, node.token_start + node.token_count):
                        eb[ne] = self.trie_ids[i]
                        ne += 1
                if not (code & 1):
                    # the rule popped and nothing else lives: each child's subtree is
                    # uncertain when its byte may follow the rule
                    q = pi + 1
                    q_end = pi + node.subtree_size
                    while q < q_end:
                        child = &nodes[q]
                        if e or fol[child.byte]:
                            for i in range(child.token_start, _subtree_end(nodes, num_nodes, q, self.n_tokens)):
                                ub[nu] = i
                                nu += 1
                        q += child.subtree_size
                    depth -= node.num_parents - 1
                    pi += node.subtree_size
                    continue
                esc[depth] = e
                depth += 1 - node.num_parents * (node.subtree_size == 1)
                pi += 1
        if _reserve(&self.pool, ne + nu, sizeof(int32_t)) < 0:
            return ERR_MEMORY
        ps = &self.pos[self.pos_start[r] + s]
        ps.inner = inner
        ps.extra = self.pool.n
        ps.n_extra = ne
        memcpy(&(<int32_t*>self.pool.p)[self.pool.n], eb, ne * sizeof(int32_t))
        self.pool.n += ne
        ps.unc = self.pool.n
        ps.n_unc = nu
        memcpy(&(<int32_t*>self.pool.p)[self.pool.n], ub, nu * sizeof(int32_t))
        self.pool.n += nu
        return 0

    cdef int64_t _cache_bytes(self) noexcept nogil:
        return (self.pool.n * sizeof(int32_t) + self.wpool.n * sizeof(word_t) + self.inners.n * sizeof(Inner)
                + self.frs.n * sizeof(Frontier) + self.paths.n
                + (self.n_pos * sizeof(Pos) if self.pos != NULL else 0))

    # ------------------------------------------------------------ inspection --

    cdef _inner_set(self, int32_t inner):
        cdef Inner* inn = &(<Inner*>self.inners.p)[inner]
        if inn.kind == K_BITSET:
            words = np.asarray(<word_t[:self.n_words]>&(<word_t*>self.wpool.p)[inn.data]).copy()
            return {int(x) for x in np.flatnonzero(
                np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size])}
        listed = {int((<int32_t*>self.pool.p)[inn.data + i]) for i in range(inn.n_data)}
        if inn.kind == K_ACCEPTED:
            return listed
        return {int(self.trie_ids[i]) for i in range(self.n_tokens)} - listed

    def position_sets(self, int32_t r, int32_t s):
        """``(kind of S, accepted ids, uncertain ids)`` of position ``(r, s)``: the ids
        it accepts in any context, and those the real parse decides."""
        if self.pos == NULL:
            raise RuntimeError("no cache")
        if not 0 <= r < self.n_dr or self.pos_start[r] < 0:
            raise ValueError(f"dotted rule {r} is not before a terminal")
        t = self.dr_sym[r] - self.n_nt
        if not 1 <= s < self.t_acc_off[t + 1] - self.t_acc_off[t]:
            raise ValueError(f"state {s} out of range")
        cdef Pos* ps = &self.pos[self.pos_start[r] + s]
        acc = self._inner_set(ps.inner) | {int((<int32_t*>self.pool.p)[ps.extra + i]) for i in range(ps.n_extra)}
        unc = sorted(int(self.trie_ids[(<int32_t*>self.pool.p)[ps.unc + i]]) for i in range(ps.n_unc))
        return KIND_NAMES[(<Inner*>self.inners.p)[ps.inner].kind], sorted(acc), unc

    def cache_stats(self):
        """Positions; shared terminal states (Inners) by storage kind and their frontier
        nodes; accepted-outside-S and uncertain ids over the positions; the root-child
        walks reused while building, the positions copied from an equivalent state's
        or dotted rule's, and the states given another terminal's Inner
        (``share_walks``); cache bytes."""
        kinds = [0, 0, 0]
        cdef int64_t i, n_extra = 0, n_unc = 0
        for i in range(self.inners.n):
            kinds[(<Inner*>self.inners.p)[i].kind] += 1
        if self.pos != NULL:
            for r in range(self.n_dr):
                if self.pos_start[r] < 0:
                    continue
                t = self.dr_sym[r] - self.n_nt
                for s in range(1, self.t_acc_off[t + 1] - self.t_acc_off[t]):
                    n_extra += self.pos[self.pos_start[r] + s].n_extra
                    n_unc += self.pos[self.pos_start[r] + s].n_unc
        return {"positions": int(self.n_pos), "inner_states": int(self.inners.n), "inner_accepted": kinds[0],
                "inner_rejected": kinds[1], "inner_bitset": kinds[2], "frontier_nodes": int(self.frs.n),
                "extra_ids": int(n_extra), "uncertain_ids": int(n_unc), "shared_walks": int(self.shared_walks),
                "merged_positions": int(self.merged_positions), "twin_positions": int(self.twin_positions),
                "shared_inners": int(self.shared_inners),
                "cache_bytes": self.cache_bytes()}

    def cache_bytes(self):
        return int(self._cache_bytes())

    def memory_bytes(self):
        """The grammar tables and the cache."""
        return int(sum(a.nbytes for a in self._keep[: self._n_grammar_arrays]) + self.cache_bytes())


cdef inline int32_t _subtree_end(const TrieNode* nodes, int32_t num_nodes, int32_t p, int32_t n_tokens) noexcept nogil:
    """The end of node p's subtree's token indexes."""
    cdef int32_t q = p + nodes[p].subtree_size
    return nodes[q].token_start if q < num_nodes else n_tokens


cdef int _grow(void** buf, int64_t* cap, int64_t need, size_t item) noexcept nogil:
    cdef int64_t c = cap[0] * 2 if cap[0] else 1024
    while c < need:
        c *= 2
    cdef void* b = realloc(buf[0], c * item)
    if b == NULL:
        return -1
    buf[0] = b
    cap[0] = c
    return 0


cdef class Parser:
    """An Earley parse over bytes: stacked charts of items and terms.

    ``Parser(tables)`` starts at the grammar's start; ``base=True`` makes a parser for
    positions' base parses (:meth:`start_base`).
    """

    cdef Tables T
    cdef Item* items
    cdef Term* terms
    cdef int64_t n_items, cap_items, n_terms, cap_terms
    cdef int64_t* ch_items   # first item of each chart
    cdef int64_t* ch_terms
    cdef uint8_t* popped     # per chart: the base item completed there
    cdef int32_t n_charts, cap_charts
    cdef uint64_t* hkeys     # scratch hash set of the chart being built
    cdef uint32_t* hstamp
    cdef int64_t hcap
    cdef uint64_t* dkeys     # scratch hash set: (symbol, closed chart) pairs completed
    cdef uint32_t* dstamp    # into the chart being built
    cdef int64_t dcap, dn
    cdef uint32_t dn_at
    cdef uint32_t* nt_stamp
    cdef uint32_t* t_stamp
    cdef uint32_t stamp
    cdef int32_t* cand       # mask: uncertain candidates
    cdef uint32_t* cand_stamp
    cdef uint32_t cstamp
    cdef word_t* scratch
    cdef int64_t* pos_seen
    cdef int64_t n_pos_seen
    cdef uint32_t* pos_stamp
    cdef uint32_t* inner_stamp
    cdef readonly int64_t checked   # uncertain tokens checked by the last fill
    cdef readonly int64_t positions # live positions of the last fill
    cdef WorkCounters work             # counted since the parser was made (a copy starts at zero)
    cdef UndoStack undo_stack             # bytes of each token consumed through the ops
    cdef int last_err               # the error code of the last failed op

    def __cinit__(self, Tables tables, bint base=False):
        self.T = tables
        self.cap_items = 256
        self.cap_terms = 64
        self.cap_charts = 64
        self.hcap = 1024
        self.items = <Item*>malloc(self.cap_items * sizeof(Item))
        self.terms = <Term*>malloc(self.cap_terms * sizeof(Term))
        self.ch_items = <int64_t*>malloc((self.cap_charts + 1) * sizeof(int64_t))
        self.ch_terms = <int64_t*>malloc((self.cap_charts + 1) * sizeof(int64_t))
        self.popped = <uint8_t*>malloc(self.cap_charts + 1)
        self.hkeys = <uint64_t*>malloc(self.hcap * sizeof(uint64_t))
        self.hstamp = <uint32_t*>malloc(self.hcap * sizeof(uint32_t))
        self.dcap = 256
        self.dn = 0
        self.dn_at = 0
        self.dkeys = <uint64_t*>malloc(self.dcap * sizeof(uint64_t))
        self.dstamp = <uint32_t*>malloc(self.dcap * sizeof(uint32_t))
        self.nt_stamp = <uint32_t*>malloc(max(1, tables.n_nt) * sizeof(uint32_t))
        self.t_stamp = <uint32_t*>malloc(max(1, tables.n_sym) * sizeof(uint32_t))
        self.cand = NULL
        self.cand_stamp = NULL
        self.scratch = NULL
        self.pos_seen = NULL
        self.pos_stamp = NULL
        self.inner_stamp = NULL
        if (self.items == NULL or self.terms == NULL or self.ch_items == NULL or self.ch_terms == NULL
                or self.popped == NULL or self.hkeys == NULL or self.hstamp == NULL or self.nt_stamp == NULL
                or self.dkeys == NULL or self.dstamp == NULL
                or self.t_stamp == NULL):
            raise MemoryError()
        memset(self.hstamp, 0, self.hcap * sizeof(uint32_t))
        memset(self.dstamp, 0, self.dcap * sizeof(uint32_t))
        memset(self.nt_stamp, 0, max(1, tables.n_nt) * sizeof(uint32_t))
        memset(self.t_stamp, 0, max(1, tables.n_sym) * sizeof(uint32_t))
        self.stamp = 0
        self.cstamp = 0
        if not base:
            rc = self.start_root()
            if rc < 0:
                _raise(rc, self.T)

    def __dealloc__(self):
        free(self.items)
        free(self.terms)
        free(self.ch_items)
        free(self.ch_terms)
        free(self.popped)
        free(self.hkeys)
        free(self.hstamp)
        free(self.dkeys)
        free(self.dstamp)
        free(self.nt_stamp)
        free(self.t_stamp)
        free(self.cand)
        free(self.cand_stamp)
        free(self.undo_stack.data)
        free(self.scratch)
        free(self.pos_seen)
        free(self.pos_stamp)
        free(self.inner_stamp)

    # ------------------------------------------------------------ C core --

    cdef int _next_stamp(self) noexcept nogil:
        self.stamp += 1
        if self.stamp == 0:  # wrapped: clear every stamp array
            memset(self.hstamp, 0, self.hcap * sizeof(uint32_t))
            memset(self.dstamp, 0, self.dcap * sizeof(uint32_t))
            self.dn_at = 0
            memset(self.nt_stamp, 0, max(1, self.T.n_nt) * sizeof(uint32_t))
            memset(self.t_stamp, 0, max(1, self.T.n_sym) * sizeof(uint32_t))
            self.stamp = 1
        return 0

    cdef int _open_chart(self) noexcept nogil:
        """Start chart n_charts (not counted until _close_chart)."""
        cdef int32_t c
        if self.n_charts + 2 > self.cap_charts:
            c = self.cap_charts * 2
            if (_grow_exact(<void**>&self.ch_items, c + 1, sizeof(int64_t)) < 0
                    or _grow_exact(<void**>&self.ch_terms, c + 1, sizeof(int64_t)) < 0
                    or _grow_exact(<void**>&self.popped, c + 1, 1) < 0):
                return ERR_MEMORY
            self.cap_charts = c
        self.ch_items[self.n_charts] = self.n_items
        self.ch_terms[self.n_charts] = self.n_terms
        self.popped[self.n_charts] = 0
        self._next_stamp()
        return 0

    cdef int _rehash(self) noexcept nogil:
        cdef int64_t c = self.hcap * 2, i, h
        cdef uint64_t key
        free(self.hkeys)
        free(self.hstamp)
        self.hkeys = <uint64_t*>malloc(c * sizeof(uint64_t))
        self.hstamp = <uint32_t*>malloc(c * sizeof(uint32_t))
        if self.hkeys == NULL or self.hstamp == NULL:
            return ERR_MEMORY
        memset(self.hstamp, 0, c * sizeof(uint32_t))
        self.hcap = c
        for i in range(self.ch_items[self.n_charts], self.n_items):
            key = (<uint64_t><uint32_t>self.items[i].r << 32) | <uint32_t>(self.items[i].o + 1)
            h = <int64_t>(mix64(key) & <uint64_t>(c - 1))
            while self.hstamp[h] == self.stamp:
                h = (h + 1) & (c - 1)
            self.hstamp[h] = self.stamp
            self.hkeys[h] = key
        return 0

    cdef int _add(self, int32_t r, int32_t o) noexcept nogil:
        """Add item (r, o) to the chart being built unless it is there."""
        cdef uint64_t key = (<uint64_t><uint32_t>r << 32) | <uint32_t>(o + 1)
        cdef int64_t h = <int64_t>(mix64(key) & <uint64_t>(self.hcap - 1))
        cdef int64_t n = self.n_items - self.ch_items[self.n_charts]
        while self.hstamp[h] == self.stamp:
            if self.hkeys[h] == key:
                return 0
            h = (h + 1) & (self.hcap - 1)
        if n >= self.T.max_items:
            return ERR_ITEMS
        if self.n_items == self.cap_items:
            if _grow(<void**>&self.items, &self.cap_items, self.n_items + 1, sizeof(Item)) < 0:
                return ERR_MEMORY
        self.items[self.n_items].r = r
        self.items[self.n_items].o = o
        self.n_items += 1
        self.hstamp[h] = self.stamp
        self.hkeys[h] = key
        if 2 * (n + 1) > self.hcap:
            return self._rehash()
        return 0

    cdef int _add_term(self, int32_t t, int32_t o, int32_t s) noexcept nogil:
        if self.n_terms == self.cap_terms:
            if _grow(<void**>&self.terms, &self.cap_terms, self.n_terms + 1, sizeof(Term)) < 0:
                return ERR_MEMORY
        self.terms[self.n_terms].t = t
        self.terms[self.n_terms].o = o
        self.terms[self.n_terms].s = s
        self.n_terms += 1
        return 0

    cdef int _completed_before(self, int32_t sym, int32_t o) noexcept nogil:
        """1 when sym was completed from closed chart o into the chart being built
        already, else 0 (and it is now), or ERR_MEMORY."""
        cdef uint64_t key = (<uint64_t><uint32_t>sym << 32) | <uint32_t>o, k2
        cdef int64_t h, i, c
        cdef uint64_t* ok
        cdef uint32_t* os
        if self.dn_at != self.stamp:
            self.dn_at = self.stamp
            self.dn = 0
        h = <int64_t>(mix64(key) & <uint64_t>(self.dcap - 1))
        while self.dstamp[h] == self.stamp:
            if self.dkeys[h] == key:
                return 1
            h = (h + 1) & (self.dcap - 1)
        self.dstamp[h] = self.stamp
        self.dkeys[h] = key
        self.dn += 1
        if 2 * self.dn > self.dcap:  # grow: keep this chart's keys
            c = self.dcap * 2
            ok = self.dkeys
            os = self.dstamp
            self.dkeys = <uint64_t*>malloc(c * sizeof(uint64_t))
            self.dstamp = <uint32_t*>malloc(c * sizeof(uint32_t))
            if self.dkeys == NULL or self.dstamp == NULL:
                free(self.dkeys)
                free(self.dstamp)
                self.dkeys = ok
                self.dstamp = os
                return ERR_MEMORY
            memset(self.dstamp, 0, c * sizeof(uint32_t))
            for i in range(self.dcap):
                if os[i] == self.stamp:
                    k2 = ok[i]
                    h = <int64_t>(mix64(k2) & <uint64_t>(c - 1))
                    while self.dstamp[h] == self.stamp:
                        h = (h + 1) & (c - 1)
                    self.dstamp[h] = self.stamp
                    self.dkeys[h] = k2
            self.dcap = c
            free(ok)
            free(os)
        return 0

    cdef int _complete(self, int32_t sym, int32_t o) noexcept nogil:
        """Advance the items of chart o waiting on sym into the chart being built.  A
        closed chart's items are scanned once per symbol: again, they would only add
        what is there."""
        cdef int64_t i, end = self.ch_items[o + 1] if o < self.n_charts else self.n_items
        cdef int32_t r
        cdef int rc
        if o < self.n_charts:
            rc = self._completed_before(sym, o)
            if rc != 0:
                return rc if rc < 0 else 0
        i = self.ch_items[o]
        while i < end:
            r = self.items[i].r
            if self.T.dr_sym[r] == sym:
                rc = self._add(r + 1, self.items[i].o)
                if rc < 0:
                    return rc
                if o == self.n_charts:
                    end = self.n_items
            i += 1
        return 0

    cdef int _closure(self) noexcept nogil:
        cdef int32_t k = self.n_charts, r, o, x, j
        cdef int64_t i = self.ch_items[k]
        cdef int rc
        while i < self.n_items:
            r = self.items[i].r
            o = self.items[i].o
            i += 1
            x = self.T.dr_sym[r]
            if x < 0:
                if o == BASE:
                    self.popped[k] = 1
                    continue
                rc = self._complete(self.T.dr_lhs[r], o)
            elif x < self.T.n_nt:
                rc = 0
                if self.nt_stamp[x] != self.stamp:
                    self.nt_stamp[x] = self.stamp
                    for j in range(self.T.nt_off[x], self.T.nt_off[x + 1]):
                        rc = self._add(self.T.nt_drs[j], k)
                        if rc < 0:
                            return rc
                if self.T.nullable[x]:
                    rc = self._add(r + 1, o)
            else:
                rc = 0
                if self.t_stamp[x] != self.stamp:
                    self.t_stamp[x] = self.stamp
                    rc = self._add_term(x, k, self.T.t_start[x - self.T.n_nt])
                    if rc < 0:
                        return rc
                if self.T.nullable[x]:
                    rc = self._add(r + 1, o)
            if rc < 0:
                return rc
        return 0

    cdef int start_root(self) noexcept nogil:
        cdef int rc
        cdef int32_t j
        self.n_items = 0
        self.n_terms = 0
        self.n_charts = 0
        rc = self._open_chart()
        if rc < 0:
            return rc
        for j in range(self.T.nt_off[self.T.start_nt], self.T.nt_off[self.T.start_nt + 1]):
            rc = self._add(self.T.nt_drs[j], 0)
            if rc < 0:
                return rc
        rc = self._closure()
        if rc < 0:
            return rc
        self.n_charts = 1
        self.ch_items[1] = self.n_items
        self.ch_terms[1] = self.n_terms
        return 0

    cdef void start_base(self, int32_t r, int32_t s) noexcept nogil:
        self.n_items = 1
        self.n_terms = 1
        self.items[0].r = r
        self.items[0].o = BASE
        self.terms[0].t = self.T.dr_sym[r]
        self.terms[0].o = 0
        self.terms[0].s = s
        self.ch_items[0] = 0
        self.ch_terms[0] = 0
        self.popped[0] = 0
        self.n_charts = 1
        self.ch_items[1] = 1
        self.ch_terms[1] = 1

    cdef bint term_alive(self, int32_t t, int32_t o) noexcept nogil:
        """A term (t, o, any state) lives in the last chart."""
        cdef int64_t i
        for i in range(self.ch_terms[self.n_charts - 1], self.n_terms):
            if self.terms[i].t == t and self.terms[i].o == o:
                return True
        return False

    cdef inline bint last_alive(self) noexcept nogil:
        return self.n_terms > self.ch_terms[self.n_charts - 1]

    cdef int push(self, uint8_t b) noexcept nogil:
        """Read byte b: 0 when nothing lives (no chart added), else a new chart and
        bit 0 set when a term lives, bit 1 when the base item completed."""
        cdef int64_t i, end = self.n_terms
        cdef int32_t t, s2, ti
        cdef int rc = self._open_chart()
        if rc < 0:
            return rc
        for i in range(self.ch_terms[self.n_charts - 1], end):
            t = self.terms[i].t
            ti = t - self.T.n_nt
            s2 = self.T.t_table[self.T.t_tab_off[ti] + <int64_t>self.terms[i].s * self.T.t_k[ti] + self.T.t_cls[<int64_t>ti * 256 + b]]
            if s2 == 0:
                continue
            rc = self._add_term(t, self.terms[i].o, s2)
            if rc < 0:
                break
            if self.T.t_acc[self.T.t_acc_off[ti] + s2]:
                rc = self._complete(t, self.terms[i].o)
                if rc < 0:
                    break
        if rc >= 0:
            rc = self._closure()
        if rc < 0 or (self.n_terms == end and not self.popped[self.n_charts]):
            self.n_items = self.ch_items[self.n_charts]
            self.n_terms = self.ch_terms[self.n_charts]
            return rc
        self.n_charts += 1
        self.ch_items[self.n_charts] = self.n_items
        self.ch_terms[self.n_charts] = self.n_terms
        return (self.n_terms > end) | (self.popped[self.n_charts - 1] << 1)

    cdef inline void pop(self, int32_t n) noexcept nogil:
        self.n_charts -= n
        self.n_items = self.ch_items[self.n_charts]
        self.n_terms = self.ch_terms[self.n_charts]

    cdef int push_data(self, const uint8_t* data, int64_t n) noexcept nogil:
        """All of data or nothing: 1 read, 0 refused, <0 an error."""
        cdef int64_t i
        cdef int rc
        for i in range(n):
            rc = self.push(data[i])
            if rc <= 0:
                self.pop(<int32_t>i)
                return rc
        return 1

    # ---------------------------------------------------------- the mask --

    cdef int _prepare_fill(self) noexcept nogil:
        if self.scratch != NULL:
            return 0
        self.cand = <int32_t*>malloc(max(1, self.T.n_tokens) * sizeof(int32_t))
        self.cand_stamp = <uint32_t*>malloc(max(1, self.T.n_tokens) * sizeof(uint32_t))
        self.scratch = <word_t*>malloc(max(1, self.T.n_words) * sizeof(word_t))
        self.pos_stamp = <uint32_t*>malloc(max(1, self.T.n_pos) * sizeof(uint32_t))
        self.pos_seen = <int64_t*>malloc(max(1, self.T.n_pos) * sizeof(int64_t))
        self.inner_stamp = <uint32_t*>malloc(max(1, self.T.inners.n) * sizeof(uint32_t))
        if (self.inner_stamp == NULL or self.cand == NULL or self.cand_stamp == NULL or self.scratch == NULL or self.pos_stamp == NULL
                or self.pos_seen == NULL):
            return ERR_MEMORY
        memset(self.cand_stamp, 0, max(1, self.T.n_tokens) * sizeof(uint32_t))
        memset(self.pos_stamp, 0, max(1, self.T.n_pos) * sizeof(uint32_t))
        memset(self.inner_stamp, 0, max(1, self.T.inners.n) * sizeof(uint32_t))
        return 0

    cdef int _fill(self, word_t* row) noexcept nogil:
        cdef int32_t c = self.n_charts - 1, o, r, x, lcp, fail_at, depth, m
        cdef int64_t i, j, k, n_cand = 0, start, end
        cdef int rc = self._prepare_fill()
        cdef Pos* ps
        cdef token_t t
        cdef int sources = 0
        if rc < 0:
            return rc
        self.cstamp += 1
        if self.cstamp == 0:
            memset(self.cand_stamp, 0, max(1, self.T.n_tokens) * sizeof(uint32_t))
            memset(self.pos_stamp, 0, max(1, self.T.n_pos) * sizeof(uint32_t))
            memset(self.inner_stamp, 0, max(1, self.T.inners.n) * sizeof(uint32_t))
            self.cstamp = 1
        # the live positions
        self.n_pos_seen = 0
        for i in range(self.ch_terms[c], self.n_terms):
            x = self.terms[i].t
            o = self.terms[i].o
            for j in range(self.ch_items[o], self.ch_items[o + 1]):
                r = self.items[j].r
                if self.T.dr_sym[r] == x:
                    k = self.T.pos_start[r] + self.terms[i].s
                    if self.pos_stamp[k] != self.cstamp:
                        self.pos_stamp[k] = self.cstamp
                        self.pos_seen[self.n_pos_seen] = k
                        self.n_pos_seen += 1
        self.positions = self.n_pos_seen
        # their context-independent sets: each shared S once, then each extra list
        cdef const int32_t* pool = <const int32_t*>self.T.pool.p
        cdef const word_t* wpool = <const word_t*>self.T.wpool.p
        cdef const Inner* inn
        for i in range(self.n_pos_seen):
            ps = &self.T.pos[self.pos_seen[i]]
            for j in range(ps.extra, ps.extra + ps.n_extra):
                t = pool[j]
                row[t >> 5] |= (<word_t>1) << (t & 31)
            if self.inner_stamp[ps.inner] == self.cstamp:
                continue
            self.inner_stamp[ps.inner] = self.cstamp
            inn = &(<const Inner*>self.T.inners.p)[ps.inner]
            if inn.kind == K_ACCEPTED:
                for j in range(inn.data, inn.data + inn.n_data):
                    t = pool[j]
                    row[t >> 5] |= (<word_t>1) << (t & 31)
            elif inn.kind == K_BITSET:
                for j in range(self.T.n_words):
                    row[j] |= wpool[inn.data + j]
            else:
                memcpy(self.scratch, self.T.text_words, self.T.n_words * sizeof(word_t))
                for j in range(inn.data, inn.data + inn.n_data):
                    t = pool[j]
                    self.scratch[t >> 5] &= ~((<word_t>1) << (t & 31))
                for j in range(self.T.n_words):
                    row[j] |= self.scratch[j]
        # the uncertain ones, not already allowed, in trie order
        for i in range(self.n_pos_seen):
            ps = &self.T.pos[self.pos_seen[i]]
            if ps.n_unc:
                sources += 1
            for j in range(ps.unc, ps.unc + ps.n_unc):
                m = pool[j]
                t = self.T.trie_ids[m]
                if self.cand_stamp[m] != self.cstamp and not (row[t >> 5] >> (t & 31)) & 1:
                    self.cand_stamp[m] = self.cstamp
                    self.cand[n_cand] = m
                    n_cand += 1
        if sources > 1:
            qsort(self.cand, n_cand, sizeof(int32_t), _cmp_int32)
        self.checked = n_cand
        # check them against the real parse, sharing prefixes
        cdef int32_t base = self.n_charts
        cdef const uint8_t* prev = NULL
        cdef const uint8_t* cur
        cdef int64_t prev_len = 0, cur_len
        fail_at = -1
        depth = 0
        for i in range(n_cand):
            m = self.cand[i]
            start = self.T.offsets[m]
            end = self.T.offsets[m + 1]
            cur = self.T.blob + start
            cur_len = end - start
            lcp = 0
            while lcp < cur_len and lcp < prev_len and cur[lcp] == prev[lcp]:
                lcp += 1
            prev = cur
            prev_len = cur_len
            if fail_at >= 0 and lcp >= fail_at:
                continue  # starts with a refused prefix
            fail_at = -1
            if depth > lcp:
                self.pop(depth - lcp)
                depth = lcp
            while depth < cur_len:
                rc = self.push(cur[depth])
                if rc < 0:
                    self.pop(self.n_charts - base)
                    return rc
                if rc == 0:
                    fail_at = depth + 1
                    break
                depth += 1
            if fail_at < 0:
                t = self.T.trie_ids[m]
                row[t >> 5] |= (<word_t>1) << (t & 31)
        self.pop(self.n_charts - base)
        return 0

    # ------------------------------------------------------------ Python API --

    def fill(self, word_t[::1] row):
        """Set the bits of the allowed text tokens in ``row`` (zeroed by the caller)."""
        if self.T.pos == NULL:
            raise RuntimeError("the tables have no cache (build_cache)")
        if row.shape[0] != self.T.n_words:
            raise ValueError(f"row has {row.shape[0]} words, the vocabulary needs {self.T.n_words}")
        cdef int rc
        with nogil:
            rc = self._fill(&row[0])
        if rc < 0:
            _raise(rc, self.T)

    def push_bytes(self, const uint8_t[::1] data):
        """Read all of ``data`` (True) or nothing (False)."""
        cdef int rc
        if data.shape[0] == 0:
            return True
        with nogil:
            rc = self.push_data(&data[0], data.shape[0])
        if rc < 0:
            _raise(rc, self.T)
        return rc == 1

    def pop_bytes(self, int32_t n):
        """Undo the last ``n`` bytes read."""
        if not 0 <= n < self.n_charts:
            raise ValueError(f"cannot undo {n} bytes, {self.n_charts - 1} read")
        self.pop(n)

    def is_accepting(self):
        """True when the bytes read are a sentence of the grammar."""
        cdef int64_t i
        cdef int32_t r
        for i in range(self.ch_items[self.n_charts - 1], self.n_items):
            r = self.items[i].r
            if self.T.dr_sym[r] < 0 and self.T.dr_lhs[r] == self.T.start_nt and self.items[i].o == 0:
                return True
        return False

    @property
    def n_bytes(self):
        """Bytes read since the start."""
        return self.n_charts - 1

    @property
    def chart_sizes(self):
        """``(items, terms)`` of the last chart."""
        return (int(self.n_items - self.ch_items[self.n_charts - 1]),
                int(self.n_terms - self.ch_terms[self.n_charts - 1]))

    def copy(self):
        """An independent parser in the same state."""
        cdef Parser other = Parser(self.T, base=True)
        cdef int64_t ni = max(1, self.n_items), nt = max(1, self.n_terms)
        if (_grow_exact(<void**>&other.items, ni, sizeof(Item)) < 0
                or _grow_exact(<void**>&other.terms, nt, sizeof(Term)) < 0
                or _grow_exact(<void**>&other.ch_items, self.cap_charts + 1, sizeof(int64_t)) < 0
                or _grow_exact(<void**>&other.ch_terms, self.cap_charts + 1, sizeof(int64_t)) < 0
                or _grow_exact(<void**>&other.popped, self.cap_charts + 1, 1) < 0):
            raise MemoryError()
        other.cap_items = ni
        other.cap_terms = nt
        other.cap_charts = self.cap_charts
        memcpy(other.items, self.items, self.n_items * sizeof(Item))
        memcpy(other.terms, self.terms, self.n_terms * sizeof(Term))
        memcpy(other.ch_items, self.ch_items, (self.n_charts + 1) * sizeof(int64_t))
        memcpy(other.ch_terms, self.ch_terms, (self.n_charts + 1) * sizeof(int64_t))
        memcpy(other.popped, self.popped, self.n_charts + 1)
        other.n_items = self.n_items
        other.n_terms = self.n_terms
        other.n_charts = self.n_charts
        if undo_copy(&other.undo_stack, &self.undo_stack) < 0:
            raise MemoryError()
        return other

    def reset(self):
        """Back to the grammar's start."""
        cdef int rc = self.start_root()
        self.undo_stack.n = 0
        if rc < 0:
            _raise(rc, self.T)

    # ------------------------------------------- the ops (toolkit.core.session) --

    cdef int c_advance(self, const uint8_t* data, int32_t n) noexcept nogil:
        cdef int rc
        if undo_reserve(&self.undo_stack, 1) < 0:
            self.last_err = ERR_MEMORY
            return -1
        rc = self.push_data(data, n)
        if rc < 0:
            self.last_err = rc
            return -1
        if rc == 0:
            return 0
        self.undo_stack.data[self.undo_stack.n] = n
        self.undo_stack.n += 1
        return 1

    cdef void c_undo(self) noexcept nogil:
        self.pop(undo_pop(&self.undo_stack))

    cdef int c_fill(self, word_t* row, int32_t n_words) noexcept nogil:
        cdef int rc
        if self.T.pos == NULL or n_words != self.T.n_words:
            self.last_err = ERR_NO_CACHE
            return -1
        rc = self._fill(row)
        if rc < 0:
            self.last_err = rc
            return -1
        return 0

    cdef int c_accepting(self) noexcept nogil:
        cdef int64_t i
        cdef int32_t r
        for i in range(self.ch_items[self.n_charts - 1], self.n_items):
            r = self.items[i].r
            if self.T.dr_sym[r] < 0 and self.T.dr_lhs[r] == self.T.start_nt and self.items[i].o == 0:
                return 1
        return 0

    def error_text(self, int32_t code, int64_t value):
        """The message of an op's failure (``code``: its error code)."""
        if code == ERR_NO_CACHE:
            return "RuntimeError: the tables have no cache (build_cache) for this vocabulary"
        try:
            _raise(code, self.T)
        except Exception as e:  # noqa: BLE001 - the message of what the Python call raises
            return f"{type(e).__name__}: {e}"


cdef int _grow_exact(void** buf, int64_t n, size_t item) noexcept nogil:
    cdef void* b = realloc(buf[0], max(1, n) * item)
    if b == NULL:
        return -1
    buf[0] = b
    return 0


cdef _raise(int rc, Tables T):
    if rc == ERR_ITEMS:
        raise LimitExceeded("earley_items_per_chart", T.max_items + 1, T.max_items)
    raise MemoryError()


# ---------------------------------------------------------------------------
# The parser as the core of a toolkit.core.session.Session
# ---------------------------------------------------------------------------

cdef int _ops_advance(void* core, token_t token, const uint8_t* data, int32_t n) noexcept nogil:
    return (<Parser>core).c_advance(data, n)


cdef void _ops_undo(void* core) noexcept nogil:
    (<Parser>core).c_undo()


cdef int _ops_fill(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    return (<Parser>core).c_fill(row, n_words)


cdef int _ops_accepting(void* core) noexcept nogil:
    return (<Parser>core).c_accepting()


cdef void _ops_take_error(void* core, int32_t* code, int64_t* value) noexcept nogil:
    code[0] = (<Parser>core).last_err
    value[0] = 0


cdef void _ops_work(void* core, WorkCounters* out) noexcept nogil:
    add_work(out, &(<Parser>core).work)


cdef StrategyOps _OPS = StrategyOps(_ops_advance, _ops_undo, _ops_fill, _ops_accepting, _ops_take_error, _ops_work)


def ops_capsule():
    """The parser's C entry points for :class:`toolkit.core.session.Session`."""
    return ops_capsule_of(&_OPS)
