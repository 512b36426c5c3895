"""The adaptive token mask cache of strategy ``xgrammar``.

**Positions.**  XGrammar (Dong et al. 2024) precomputes, for every position of its
byte-level pushdown automaton, which tokens are accepted, rejected or
context-dependent.  Here a position is ``(r, s)``: an item at dotted rule ``r``
whose next symbol is terminal ``t = dr_sym[r]``, with ``t``'s DFA in state ``s``.
The cache of a position is computed by a *base parse* (a
:class:`~strategies.xgrammar._charts.Charts` from ``start_base``): chart 0 holds the
item ``(r, BASE)`` and the term ``(t, 0, s)`` only, and a completion of the base item
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
kept for every terminal.  A position whose terminal ends its production, where no
byte may follow the production's lhs (free text at the end of a tool-calling format,
whose frontier is every token longer than a byte), walks nothing below the frontier:
past the terminal its base parse can only pop where nothing may follow, so it keeps
the tokens S keeps and no others.

A mask (:mod:`strategies.xgrammar._pda`) is the union over the live positions of
``S`` (once per Inner) and the extra ids, then the uncertain tokens checked one by
one against the real parser.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from strategies.xgrammar._charts cimport Charts, RuleTables
from toolkit.automata._dfabuild cimport horizon_reps
from toolkit.core.cutil cimport (BYTES, ERR_MEMORY, hash_ints, hash_mix, i64map_clear, i64map_free, i64map_get,
                                 i64map_init, i64map_intern, i64map_put, pair_key)
from toolkit.core.ids cimport DEAD, MISSING, state_t, symbol_t, token_t, word_t
from toolkit.core.intsets cimport IntSets, intsets_add, intsets_find, intsets_free, intsets_init
from toolkit.core.trie cimport TokenTrie, TrieNode

from toolkit.core.errors import LimitExceeded, TimeLimitExceeded, check_deadline

cnp.import_array()

__all__ = ["Tables", "KIND_NAMES"]

#: the storage kinds of an Inner's S, by K_ACCEPTED, K_REJECTED, K_BITSET
KIND_NAMES = ("accepted", "rejected", "bitset")


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


# ------------------------------------------------------------------ helpers ----

cdef inline int32_t _subtree_end(const TrieNode* nodes, int32_t num_nodes, int32_t p, int32_t n_tokens) noexcept nogil:
    """The end of node p's subtree's token indexes."""
    cdef int32_t q = p + nodes[p].subtree_size
    return nodes[q].token_start if q < num_nodes else n_tokens


cdef int _deadline_passed() noexcept with gil:
    """1 when the compile's deadline (:func:`toolkit.core.errors.deadline`) has passed:
    the build's loops ask every few hundred positions, then stop for the caller to raise."""
    try:
        check_deadline()
    except TimeLimitExceeded:
        return 1
    return 0


cdef int _cmp_uint64(const void* a, const void* b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t*>a)[0], y = (<const uint64_t*>b)[0]
    return (x > y) - (x < y)


cdef void _memo_free(Memo* m) noexcept nogil:
    free(m.indeg)
    i64map_free(&m.walks)
    free(m.toks.p)
    free(m.ents.p)


cdef int _memo_keep(Memo* m, int64_t key, const int32_t* toks, int32_t n_tok, int64_t fr, int64_t n_fr) noexcept nogil:
    """Keep a walk (its trie indexes, and its frontier records in Tables.frs) under
    ``key``, unless the memo is full."""
    cdef MemoEntry* me
    if m.toks.n + n_tok > MEMO_MAX_TOKS:
        return 0
    if buf_reserve(&m.toks, n_tok, sizeof(int32_t)) < 0 or buf_reserve(&m.ents, 1, sizeof(MemoEntry)) < 0:
        return ERR_MEMORY
    me = &(<MemoEntry*>m.ents.p)[m.ents.n]
    me.tok = m.toks.n
    me.n_tok = n_tok
    me.fr = fr
    me.n_fr = <int32_t>n_fr
    memcpy(&(<int32_t*>m.toks.p)[m.toks.n], toks, n_tok * sizeof(int32_t))
    m.toks.n += n_tok
    if i64map_put(&m.walks, key, <int32_t>m.ents.n) < 0:
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


cdef int _build_alloc(Build* b, TokenTrie trie, int64_t n_states_all) noexcept nogil:
    """The scratch of a build: 0, or ERR_MEMORY (free it with _build_free either way)."""
    cdef int64_t n_tok = max(1, trie.num_tokens), n_all = max(1, n_states_all), depth = trie.max_depth + 2
    cdef int32_t ri
    memset(b, 0, sizeof(Build))
    b.cls = <uint8_t*>malloc(n_tok)
    b.stack = <state_t*>malloc(depth * sizeof(state_t))
    b.path = <uint8_t*>malloc(depth)
    b.esc = <int32_t*>malloc(depth * sizeof(int32_t))
    b.eb = <int32_t*>malloc(n_tok * sizeof(int32_t))
    b.ub = <int32_t*>malloc(n_tok * sizeof(int32_t))
    b.rep = <state_t*>malloc(n_all * sizeof(state_t))
    b.canon = <int32_t*>malloc(n_all * sizeof(int32_t))
    b.canon_inner = <int32_t*>malloc(n_all * sizeof(int32_t))
    if (b.cls == NULL or b.stack == NULL or b.path == NULL or b.esc == NULL or b.eb == NULL or b.ub == NULL
            or b.rep == NULL or b.canon == NULL or b.canon_inner == NULL
            or i64map_init(&b.memo.walks, 1024) < 0 or i64map_init(&b.gm.walks, 1024) < 0):
        return ERR_MEMORY
    memset(b.canon, 0xFF, n_all * sizeof(int32_t))
    memset(b.canon_inner, 0xFF, n_all * sizeof(int32_t))
    b.memo.t = -1
    b.gm.t = -1
    # the root's children, and the tokens below each
    ri = 1
    while ri < trie.num_nodes:
        b.memo.roots[b.memo.n_roots] = ri
        b.memo.root_ntok[b.memo.n_roots] = (_subtree_end(trie.nodes, trie.num_nodes, ri, trie.num_tokens)
                                            - trie.nodes[ri].token_start)
        b.memo.n_roots += 1
        ri += trie.nodes[ri].subtree_size
    return 0


cdef void _build_free(Build* b) noexcept nogil:
    _memo_free(&b.memo)
    _memo_free(&b.gm)
    free(b.cls)
    free(b.stack)
    free(b.path)
    free(b.esc)
    free(b.eb)
    free(b.ub)
    free(b.rep)
    free(b.canon)
    free(b.canon_inner)


cdef class Tables(RuleTables):
    """A grammar's :class:`~strategies.xgrammar._charts.RuleTables` with its positions
    and, once :meth:`build_cache` ran, every position's token sets."""

    def __cinit__(self, *args, **kwargs):
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
        """The arguments of :class:`RuleTables`; the positions are numbered here: one
        per (dotted rule before a terminal, DFA state)."""
        RuleTables.__init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, n_nt, start_nt, terminals, follow,
                            max_items=max_items)
        pos_start = np.full(self.n_dr, -1, dtype=np.int64)
        cdef int64_t[::1] ps = pos_start
        cdef int64_t n_pos = 0
        cdef int32_t r
        for r in range(self.n_dr):
            if self.dr_sym[r] >= self.n_nt:
                ps[r] = n_pos
                n_pos += self.n_states(self.dr_sym[r] - self.n_nt)
        dr_twin = _twins(self._keep["dr_sym"], self._keep["dr_lhs"], self._keep["follow"])
        self._keep["pos_start"] = pos_start
        self._keep["dr_twin"] = dr_twin
        self.n_pos = n_pos
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
        self._cache_keep = [trie, blob, offsets, text_words]
        self.trie_ids = trie.token_ids
        self.blob = <const uint8_t*>cnp.PyArray_DATA(blob)
        self.offsets = <const int64_t*>cnp.PyArray_DATA(offsets)
        self.text_words = <const word_t*>cnp.PyArray_DATA(text_words)
        self.vocab_size = trie.vocab_size
        self.n_words = (trie.vocab_size + 31) // 32
        self.n_tokens = trie.num_tokens
        cdef Charts p = Charts(self, base=True)
        cdef int64_t n_states_all = self.t_acc_off[self.n_sym - self.n_nt], used = 0
        cdef int rc
        cdef Build b
        self.pos = <Pos*>malloc(max(1, self.n_pos) * sizeof(Pos))
        self.inner_of = <int32_t*>malloc(max(1, n_states_all) * sizeof(int32_t))
        if _build_alloc(&b, trie, n_states_all) < 0 or self.pos == NULL or self.inner_of == NULL:
            _build_free(&b)
            free(self.pos)
            self.pos = NULL  # no cache for fill to read
            raise MemoryError()
        b.memo.off = not share_walks
        memset(self.pos, 0, max(1, self.n_pos) * sizeof(Pos))
        memset(self.inner_of, 0xFF, max(1, n_states_all) * sizeof(int32_t))
        try:
            with nogil:
                rc = self._build(p, trie, &b, share_walks, max_cache_bytes, &used)
        finally:
            _build_free(&b)
        if rc != 0:  # a half-built cache is no cache: fill refuses it
            free(self.pos)
            self.pos = NULL
        if rc == 1:
            raise LimitExceeded("max_cache_bytes", used, max_cache_bytes, "the adaptive token mask cache")
        if rc == 2:  # the deadline passed (it stays passed): raise it, saying where
            check_deadline(f"xgrammar: the adaptive token mask cache, dotted rule {used} of {self.n_dr}")
            raise RuntimeError("xgrammar: the mask cache stopped for a deadline that has not passed")
        if rc < 0:
            e = self.error(rc)
            e.add_note("while precomputing the token mask cache")
            raise e

    cdef int _build(self, Charts p, TokenTrie trie, Build* b, bint share_walks, int64_t limit,
                    int64_t* used) noexcept nogil:
        """build_cache's work: 0, 1 when the cache outgrew ``limit`` bytes (``*used``
        then), 2 when the compile's deadline passed (``*used``: the dotted rule it was
        building), or an error code."""
        cdef int rc
        cdef int32_t r, built = 0
        if share_walks and self._canon_states(b.canon) < 0:
            return ERR_MEMORY
        rc = self._state_reps(b.rep, trie.max_depth, share_walks)
        if rc < 0:
            return rc
        for r in range(self.n_dr):
            if self.pos_start[r] >= 0:
                if (built & 63) == 0 and _deadline_passed():
                    used[0] = r
                    return 2
                built += 1
                rc = self._rule_positions(p, r, trie, b, share_walks, limit, used)
                if rc != 0:
                    return rc
        return 0

    cdef int _state_reps(self, state_t* rep, int32_t depth, bint share_walks) noexcept nogil:
        """``rep`` for every terminal state: the first state that no string of at most
        ``depth`` bytes tells apart from it (dead, alive, accepting after each of its
        bytes; :func:`toolkit.automata._dfabuild.horizon_reps`, Moore's refinement
        stopped after ``depth`` rounds), so that a token is read the same from both and
        they share the cache; each state its own when not sharing or when the terminal
        is too small for two states to read every token of at most ``depth`` bytes
        alike."""
        cdef symbol_t t
        cdef state_t s
        for t in range(self.n_sym - self.n_nt):
            # a minimal DFA of n states tells any two apart with n - 2 bytes
            if share_walks and self.n_states(t) - 2 > depth:
                if horizon_reps(self.t_table + self.t_tab_off[t], self.n_states(t), self.t_k[t],
                                self.t_acc + self.t_acc_off[t], depth, rep + self.t_acc_off[t]) < 0:
                    return ERR_MEMORY
            else:
                for s in range(self.n_states(t)):
                    rep[self.t_acc_off[t] + s] = s
        return 0

    cdef int _rule_positions(self, Charts p, int32_t r, TokenTrie trie, Build* b, bint share_walks,
                             int64_t limit, int64_t* used) noexcept nogil:
        """The positions of dotted rule r (one per live state of its terminal): copied
        from its twin's, from an equivalent state's, or built on an Inner (built now,
        or another terminal's alike).  0, 1 past ``limit`` cache bytes, 2 past the
        compile's deadline (``*used`` then r), or an error."""
        cdef symbol_t t = self.dr_sym[r] - self.n_nt
        cdef int32_t n_states = self.n_states(t)
        cdef int64_t g, first = self.pos_start[r]
        cdef state_t s
        cdef int rc
        if share_walks and self.dr_twin[r] != r:  # the same parse as an earlier rule's
            memcpy(&self.pos[first], &self.pos[self.pos_start[self.dr_twin[r]]], n_states * sizeof(Pos))
            self.twin_positions += n_states - 1
            return 0
        for s in range(1, n_states):
            if (s & 255) == 0 and _deadline_passed():
                used[0] = r
                return 2
            g = self.t_acc_off[t] + s
            if b.rep[g] != s:  # reads every token as an earlier state does
                self.pos[first + s] = self.pos[first + b.rep[g]]
                self.inner_of[g] = self.inner_of[self.t_acc_off[t] + b.rep[g]]
                self.merged_positions += 1
                continue
            if self.inner_of[g] == MISSING and b.canon[g] >= 0 and b.canon_inner[b.canon[g]] >= 0:
                self.inner_of[g] = b.canon_inner[b.canon[g]]  # another terminal's, alike
                self.shared_inners += 1
            if self.inner_of[g] == MISSING:
                rc = self._inner(t, s, trie, b)
                if rc < 0:
                    return rc
                self.inner_of[g] = <int32_t>(self.inners.n - 1)
                if b.canon[g] >= 0:
                    b.canon_inner[b.canon[g]] = self.inner_of[g]
            rc = self._occurrence(p, r, s, self.inner_of[g], trie, b, share_walks)
            if rc < 0:
                return rc
            used[0] = self._cache_bytes()
            if used[0] > limit:
                return 1
        return 0

    # ------------------------------------------------- states read alike --

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
        cdef int64_t n_all = self.t_acc_off[self.n_sym - self.n_nt], n_ids = ERR_MEMORY
        cdef int32_t n_max = 1
        cdef symbol_t t
        cdef Canon c
        for t in range(self.n_sym - self.n_nt):
            n_max = max(n_max, self.n_states(t))
        memset(&c, 0, sizeof(Canon))
        memset(canon, 0xFF, max(1, n_all) * sizeof(int32_t))
        c.fp = <uint64_t*>malloc(max(1, n_all) * sizeof(uint64_t))
        c.term_of = <symbol_t*>malloc(max(1, n_all) * sizeof(symbol_t))
        c.state_of = <state_t*>malloc(max(1, n_all) * sizeof(state_t))
        c.seen = <uint32_t*>malloc(n_max * sizeof(uint32_t))
        c.pos_of = <int32_t*>malloc(n_max * sizeof(int32_t))
        if (c.fp != NULL and c.term_of != NULL and c.state_of != NULL and c.seen != NULL and c.pos_of != NULL
                and i64map_init(&c.owner, 2 * n_all) == 0):
            memset(c.seen, 0, n_max * sizeof(uint32_t))
            if self._canon_candidates(&c) == 0:
                n_ids = self._canon_ids(&c, canon)
        free(c.fp)
        free(c.term_of)
        free(c.state_of)
        free(c.seen)
        free(c.pos_of)
        i64map_free(&c.owner)
        return n_ids

    cdef int _canon_candidates(self, Canon* c) noexcept nogil:
        """Pass 1 of :meth:`_canon_states`: the candidate states with their
        fingerprints, and per fingerprint whether two terminals have it.  0 or ERR_MEMORY."""
        cdef int32_t csize[BYTES]
        cdef symbol_t t
        cdef state_t q
        cdef int32_t k, b, v
        cdef const uint8_t* cl
        cdef uint64_t hv
        for t in range(self.n_sym - self.n_nt):
            cl = self.t_cls + <int64_t>t * BYTES
            k = self.t_k[t]
            memset(csize, 0, k * sizeof(int32_t))
            for b in range(BYTES):
                csize[cl[b]] += 1
            for q in range(1, self.n_states(t)):
                hv = self._fingerprint(t, q, csize, c)
                if hv == 0:
                    continue
                c.fp[c.n_cand] = hv
                c.term_of[c.n_cand] = t
                c.state_of[c.n_cand] = q
                c.n_cand += 1
                v = i64map_intern(&c.owner, <int64_t>hv, t)
                if v < 0:
                    return ERR_MEMORY
                if v != t and v != CANON_SHARED and i64map_put(&c.owner, <int64_t>hv, CANON_SHARED) < 0:
                    return ERR_MEMORY
        return 0

    cdef uint64_t _fingerprint(self, symbol_t t, state_t q, const int32_t* csize, Canon* c) noexcept nogil:
        """The fingerprint of terminal t's state q (``csize``: the bytes of each of t's
        classes): per state q reaches, whether it accepts and on how many bytes it
        lives, sorted; 0 when q is no candidate (alive on too few bytes, or reaching
        more than CANON_MAX states)."""
        cdef const state_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* acc = self.t_acc + self.t_acc_off[t]
        cdef int32_t k = self.t_k[t], m = 1, i = 0, cls, alive = 0
        cdef state_t lst[CANON_MAX]
        cdef uint64_t fpv[CANON_MAX]
        cdef state_t x
        cdef uint64_t hv
        # only states alive on most bytes: their walks are the long ones
        for cls in range(k):
            if tab[<int64_t>q * k + cls] != DEAD:
                alive += csize[cls]
        if alive < CANON_MIN_BYTES:
            return 0
        lst[0] = q
        c.stamp += 1
        c.seen[q] = c.stamp
        while i < m:
            fpv[i] = <uint64_t>acc[lst[i]] << 16
            for cls in range(k):
                x = tab[<int64_t>lst[i] * k + cls]
                if x == DEAD:
                    continue
                fpv[i] += csize[cls]
                if c.seen[x] != c.stamp:
                    if m == CANON_MAX:
                        return 0
                    c.seen[x] = c.stamp
                    lst[m] = x
                    m += 1
            i += 1
        qsort(fpv, m, sizeof(uint64_t), _cmp_uint64)  # the fingerprint ignores the numbering
        hv = (<uint64_t>0xCBF29CE484222325) ^ <uint64_t>m
        for i in range(m):
            hv = hash_mix(hv, fpv[i])
        return hv | 1  # never 0

    cdef int64_t _canon_ids(self, Canon* c, int32_t* canon) noexcept nogil:
        """Pass 2 of :meth:`_canon_states`: the candidates whose fingerprint two
        terminals share, written out and interned.  The number of ids, or ERR_MEMORY."""
        cdef int32_t sig[CANON_MAX * (BYTES + 1)]
        cdef state_t lst[CANON_MAX]
        cdef int64_t g
        cdef int32_t m, L, i, b, id_ = 0
        cdef int64_t n_ids
        cdef symbol_t t
        cdef state_t q, x
        cdef const state_t* tab
        cdef const state_t* row
        cdef const uint8_t* cl
        cdef const uint8_t* acc
        cdef uint64_t hv
        cdef IntSets sets
        if intsets_init(&sets) < 0:
            return ERR_MEMORY
        for g in range(c.n_cand):
            if i64map_get(&c.owner, <int64_t>c.fp[g]) != CANON_SHARED:
                continue
            t = c.term_of[g]
            q = c.state_of[g]
            tab = self.t_table + self.t_tab_off[t]
            cl = self.t_cls + <int64_t>t * BYTES
            acc = self.t_acc + self.t_acc_off[t]
            # the part q reaches, byte by byte, its states numbered in breadth-first
            # order (pos_of: a state's number, under this q's stamp)
            lst[0] = q
            m = 1
            L = 0
            i = 0
            c.stamp += 1
            c.seen[q] = c.stamp
            c.pos_of[q] = 0
            while i < m:
                sig[L] = acc[lst[i]]
                L += 1
                row = tab + <int64_t>lst[i] * self.t_k[t]
                for b in range(BYTES):
                    x = row[cl[b]]
                    if x == DEAD:
                        sig[L] = -1
                    else:
                        if c.seen[x] != c.stamp:
                            c.seen[x] = c.stamp
                            c.pos_of[x] = m
                            lst[m] = x
                            m += 1
                        sig[L] = c.pos_of[x]
                    L += 1
                i += 1
            hv = hash_ints(sig, L)
            id_ = intsets_find(&sets, sig, L, hv)
            if id_ < 0:
                id_ = intsets_add(&sets, sig, L, hv)
                if id_ < 0:
                    break
            canon[self.t_acc_off[t] + q] = id_
        n_ids = sets.n if id_ >= 0 else ERR_MEMORY
        intsets_free(&sets)
        return n_ids

    # ------------------------------------------------------------ Inners --

    cdef int _memo_start(self, Memo* memo, symbol_t t) noexcept nogil:
        """Empty ``memo`` for terminal t's Inners; unless it keeps nothing (or t is too
        large), count each state's in-degree per class (a walk only a state reaches
        is not kept)."""
        cdef const state_t* tab = self.t_table + self.t_tab_off[t]
        cdef int32_t k = self.t_k[t], n_states = self.n_states(t), i
        cdef state_t q
        free(memo.indeg)
        memo.indeg = NULL
        memo.t = t
        i64map_clear(&memo.walks)
        memo.toks.n = 0
        memo.ents.n = 0
        memo.n_base = 0
        memo.base_next = 0
        if memo.off or <int64_t>k * n_states > MEMO_MAX_INDEG:
            return 0
        memo.indeg = <int32_t*>malloc(max(1, k * n_states) * sizeof(int32_t))
        if memo.indeg == NULL:
            return ERR_MEMORY
        memset(memo.indeg, 0, k * n_states * sizeof(int32_t))
        for q in range(1, n_states):
            for i in range(k):
                memo.indeg[i * n_states + tab[<int64_t>q * k + i]] += 1
        return 0

    cdef int _inner(self, symbol_t t, state_t s, TokenTrie trie, Build* b) noexcept nogil:
        """Build the Inner of terminal t's state s: a DFA walk of the trie, one root
        child at a time (:meth:`_inner_walks`), then S stored in the smallest form."""
        cdef int32_t count = 0, n = self.n_tokens
        cdef int rc
        cdef Inner* inn
        if b.memo.t != t:
            rc = self._memo_start(&b.memo, t)
            if rc < 0:
                return rc
        if buf_reserve(&self.inners, 1, sizeof(Inner)) < 0:
            return ERR_MEMORY
        inn = &(<Inner*>self.inners.p)[self.inners.n]
        self.inners.n += 1
        inn.fr = self.frs.n
        inn.n_fr = 0
        rc = self._inner_walks(t, s, trie, b, &count)
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
            return self._inner_bitset(inn, t, s, trie, b)
        return self._inner_ids(inn, b, count)

    cdef int _inner_walks(self, symbol_t t, state_t s, TokenTrie trie, Build* b, int32_t* count) noexcept nogil:
        """Each root child's walk from terminal t's state s into Memo.pc_*: kept from
        another state (in ``b.memo``, or in ``b.gm`` for a child whose state has a
        canonical id), or walked now into ``b.eb``; ``*count``: the trie indexes read."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const state_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* cl = self.t_cls + <int64_t>t * BYTES
        cdef const int32_t* canon = b.canon + self.t_acc_off[t]
        cdef Memo* memo = &b.memo
        cdef Memo* mm
        cdef MemoEntry* me
        cdef int32_t k = self.t_k[t], n_states = self.n_states(t), ci, pi, e, walked = 0, c2
        cdef state_t s2
        cdef int64_t key, f0
        cdef int rc
        for ci in range(memo.n_roots):
            pi = memo.roots[ci]
            memo.pc_n[ci] = -1
            s2 = tab[<int64_t>s * k + cl[nodes[pi].byte]]
            if s2 == DEAD:
                continue
            c2 = canon[s2]
            mm = &b.gm if c2 >= 0 else memo
            key = pair_key(pi, c2 if c2 >= 0 else s2)
            e = i64map_get(&mm.walks, key) if mm.walks.n else -1
            if e >= 0:  # walked already from another state
                self.shared_walks += 1
                me = &(<MemoEntry*>mm.ents.p)[e]
                memo.pc_off[ci] = me.tok
                memo.pc_n[ci] = me.n_tok
                memo.pc_memo[ci] = 2 if c2 >= 0 else 1
                count[0] += me.n_tok
                if me.n_fr:
                    if buf_reserve(&self.frs, me.n_fr, sizeof(Frontier)) < 0:
                        return ERR_MEMORY
                    memcpy(&(<Frontier*>self.frs.p)[self.frs.n], &(<Frontier*>self.frs.p)[me.fr],
                           me.n_fr * sizeof(Frontier))
                    self.frs.n += me.n_fr
                continue
            e = walked
            f0 = self.frs.n
            rc = self._walk_child(t, s, pi, trie, b.stack, b.path, b.eb, &walked)
            if rc < 0:
                return rc
            memo.pc_off[ci] = e
            memo.pc_n[ci] = walked - e
            memo.pc_memo[ci] = 0
            count[0] += walked - e
            if ((c2 >= 0 or (memo.indeg != NULL and memo.indeg[cl[nodes[pi].byte] * n_states + s2] > 1))
                    and nodes[pi].subtree_size >= MEMO_MIN_NODES):
                rc = _memo_keep(mm, key, &b.eb[e], walked - e, f0, self.frs.n - f0)
                if rc < 0:
                    return rc
        return 0

    cdef int _inner_bitset(self, Inner* inn, symbol_t t, state_t s, TokenTrie trie, Build* b) noexcept nogil:
        """S of terminal t's state s as a bitset: from the recent bitset whose state
        agrees on the most tokens' first byte, when that leaves less than half the
        tokens to redo, else from zero; then each root child's walk."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const state_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* cl = self.t_cls + <int64_t>t * BYTES
        cdef Memo* memo = &b.memo
        cdef int32_t k = self.t_k[t], n = self.n_tokens, ci, pi, i, j, best = -1, cls
        cdef int64_t agree, best_agree = 0
        cdef state_t base
        cdef const int32_t* toks
        cdef word_t* w
        cdef token_t tok
        if buf_reserve(&self.wpool, self.n_words, sizeof(word_t)) < 0:
            return ERR_MEMORY
        inn.data = self.wpool.n
        inn.n_data = self.n_words
        w = &(<word_t*>self.wpool.p)[self.wpool.n]
        for j in range(memo.n_base):
            agree = 0
            for ci in range(memo.n_roots):
                cls = cl[nodes[memo.roots[ci]].byte]
                if tab[<int64_t>s * k + cls] == tab[<int64_t>memo.base_state[j] * k + cls]:
                    agree += memo.root_ntok[ci]
            if agree > best_agree:
                best_agree = agree
                best = j
        if best >= 0 and 2 * (n - best_agree) < n:
            memcpy(w, &(<word_t*>self.wpool.p)[memo.base_data[best]], self.n_words * sizeof(word_t))
            base = memo.base_state[best]
        else:
            memset(w, 0, self.n_words * sizeof(word_t))
            base = -1
        for ci in range(memo.n_roots):
            pi = memo.roots[ci]
            cls = cl[nodes[pi].byte]
            if base >= 0:
                if tab[<int64_t>s * k + cls] == tab[<int64_t>base * k + cls]:
                    continue  # the same walk as the base's
                for j in range(nodes[pi].token_start, nodes[pi].token_start + memo.root_ntok[ci]):
                    tok = self.trie_ids[j]
                    w[tok >> 5] &= ~((<word_t>1) << (tok & 31))
            if memo.pc_n[ci] <= 0:
                continue
            toks = _piece(memo, &b.gm, b.eb, ci)
            for i in range(memo.pc_n[ci]):
                tok = self.trie_ids[toks[i]]
                w[tok >> 5] |= (<word_t>1) << (tok & 31)
        if not memo.off:
            j = memo.base_next % MEMO_BASES
            memo.base_next += 1
            memo.base_state[j] = s
            memo.base_data[j] = self.wpool.n
            memo.n_base = min(memo.n_base + 1, <int32_t>MEMO_BASES)
        self.wpool.n += self.n_words
        return 0

    cdef int _inner_ids(self, Inner* inn, Build* b, int32_t count) noexcept nogil:
        """S (``count`` trie indexes in the root children's walks) as its accepted ids,
        or as its rejected ids (the text tokens outside it)."""
        cdef Memo* memo = &b.memo
        cdef int32_t n = self.n_tokens, ci, i
        cdef const int32_t* toks
        inn.n_data = count if inn.kind == K_ACCEPTED else n - count
        if buf_reserve(&self.pool, inn.n_data, sizeof(int32_t)) < 0:
            return ERR_MEMORY
        inn.data = self.pool.n
        if inn.kind == K_REJECTED:
            memset(b.cls, 0, n)
        for ci in range(memo.n_roots):
            if memo.pc_n[ci] <= 0:
                continue
            toks = _piece(memo, &b.gm, b.eb, ci)
            for i in range(memo.pc_n[ci]):
                if inn.kind == K_ACCEPTED:
                    (<int32_t*>self.pool.p)[self.pool.n] = self.trie_ids[toks[i]]
                    self.pool.n += 1
                else:
                    b.cls[toks[i]] = 1
        if inn.kind == K_REJECTED:
            for i in range(n):
                if not b.cls[i]:
                    (<int32_t*>self.pool.p)[self.pool.n] = self.trie_ids[i]
                    self.pool.n += 1
        return 0

    cdef int _walk_child(self, symbol_t t, state_t s, int32_t child, TokenTrie trie, state_t* stack, uint8_t* path,
                         int32_t* sb, int32_t* count) noexcept nogil:
        """Terminal t's DFA from state s over root child ``child``'s subtree: append the
        trie indexes it reads without dying to sb, and its outermost accepting nodes
        with children (with their bytes) to the frontier records."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const TrieNode* node
        cdef const state_t* tab = self.t_table + self.t_tab_off[t]
        cdef const uint8_t* cl = self.t_cls + <int64_t>t * BYTES
        cdef const uint8_t* acc = self.t_acc + self.t_acc_off[t]
        cdef int32_t k = self.t_k[t], pi = child, end = child + trie.nodes[child].subtree_size, depth = 1, i
        cdef int32_t fr_end = 0, c = count[0]
        cdef state_t s2
        cdef Frontier* f
        stack[0] = s
        while pi < end:
            node = &nodes[pi]
            s2 = tab[<int64_t>stack[depth - 1] * k + cl[node.byte]]
            if s2 == DEAD:
                depth -= node.num_parents - 1
                pi += node.subtree_size
                continue
            path[depth] = node.byte
            for i in range(node.token_start, node.token_start + node.token_count):
                sb[c] = i
                c += 1
            if acc[s2] and node.subtree_size > 1 and pi >= fr_end:
                if buf_reserve(&self.frs, 1, sizeof(Frontier)) < 0 or buf_reserve(&self.paths, depth, 1) < 0:
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

    # --------------------------------------------------------- positions --

    cdef int _occurrence(self, Charts p, int32_t r, state_t s, int32_t inner, TokenTrie trie,
                         Build* b, bint share_walks) noexcept nogil:
        """Position (r, s): below each frontier node of its Inner, the base parse (see
        the module doc) sorts the tokens into accepted-outside-S (``b.eb``) and
        uncertain (``b.ub``); both are stored in the pool.  Where the terminal ends its
        production and no byte may follow the rule's lhs, the walks are left out
        (``share_walks``; counted in ``ended_positions``)."""
        cdef const Inner* inn = &(<Inner*>self.inners.p)[inner]
        cdef const uint8_t* fol = self.follow + <int64_t>self.dr_lhs[r] * BYTES
        cdef int32_t j, ne = 0, nu = 0, n_fr = inn.n_fr, followed = 0
        cdef int rc
        for j in range(BYTES):
            followed |= fol[j]
        if share_walks and self.dr_sym[r + 1] < 0 and not followed:
            # the terminal ends its production and no byte may follow the rule (free
            # text at the end of a tool-calling format): past the terminal the base
            # parse can only pop where nothing follows, so below the frontier it
            # keeps the tokens S keeps and no others, and no walk is needed
            n_fr = 0
            self.ended_positions += 1
        for j in range(n_fr):
            rc = self._below_frontier(p, r, s, &(<Frontier*>self.frs.p)[inn.fr + j], trie, b, &ne, &nu)
            if rc < 0:
                return rc
        return self._store_position(r, s, inner, b.eb, ne, b.ub, nu)

    cdef int _below_frontier(self, Charts p, int32_t r, state_t s, const Frontier* f, TokenTrie trie, Build* b,
                             int32_t* ne, int32_t* nu) noexcept nogil:
        """Position (r, s)'s base parse replays frontier node f's bytes, then walks its
        subtree: the tokens it accepts outside S are appended to ``b.eb`` (``*ne``),
        the uncertain ones to ``b.ub`` (``*nu``).  ``b.esc[d]``: a path left the rule
        at a byte that may follow it, above depth d."""
        cdef const TrieNode* nodes = trie.nodes
        cdef const TrieNode* node
        cdef const TrieNode* child
        cdef const uint8_t* fpath = <const uint8_t*>self.paths.p + f.path
        cdef const uint8_t* fol = self.follow + <int64_t>self.dr_lhs[r] * BYTES
        cdef int32_t num_nodes = trie.num_nodes, q, q_end, depth, e, code, i, pi, end
        cdef symbol_t base_t = self.dr_sym[r]
        cdef int32_t* esc = b.esc
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
                        b.ub[nu[0]] = i
                        nu[0] += 1
                depth -= node.num_parents - 1
                pi += node.subtree_size
                continue
            if node.token_count and not p.term_alive(base_t, 0):
                for i in range(node.token_start, node.token_start + node.token_count):
                    b.eb[ne[0]] = self.trie_ids[i]
                    ne[0] += 1
            if not (code & 1):
                # the rule popped and nothing else lives: each child's subtree is
                # uncertain when its byte may follow the rule
                q = pi + 1
                q_end = pi + node.subtree_size
                while q < q_end:
                    child = &nodes[q]
                    if e or fol[child.byte]:
                        for i in range(child.token_start, _subtree_end(nodes, num_nodes, q, self.n_tokens)):
                            b.ub[nu[0]] = i
                            nu[0] += 1
                    q += child.subtree_size
                depth -= node.num_parents - 1
                pi += node.subtree_size
                continue
            esc[depth] = e
            depth += 1 - node.num_parents * (node.subtree_size == 1)
            pi += 1
        return 0

    cdef int _store_position(self, int32_t r, state_t s, int32_t inner, const int32_t* eb, int32_t ne,
                             const int32_t* ub, int32_t nu) noexcept nogil:
        """Position (r, s)'s record: its Inner, and its ``ne`` extra ids and ``nu``
        uncertain trie indexes copied into the pool."""
        cdef Pos* ps
        if buf_reserve(&self.pool, ne + nu, sizeof(int32_t)) < 0:
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

    cdef object _inner_set(self, int32_t inner):
        cdef Inner* inn = &(<Inner*>self.inners.p)[inner]
        if inn.kind == K_BITSET:
            words = np.asarray(<word_t[:self.n_words]>&(<word_t*>self.wpool.p)[inn.data]).copy()
            return {int(x) for x in np.flatnonzero(
                np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size])}
        listed = {int((<int32_t*>self.pool.p)[inn.data + i]) for i in range(inn.n_data)}
        if inn.kind == K_ACCEPTED:
            return listed
        return {int(self.trie_ids[i]) for i in range(self.n_tokens)} - listed

    def position_sets(self, int32_t r, state_t s):
        """``(kind of S, accepted ids, uncertain ids)`` of position ``(r, s)``: the ids
        it accepts in any context, and those the real parse decides."""
        if self.pos == NULL:
            raise RuntimeError("no cache")
        if not 0 <= r < self.n_dr or self.pos_start[r] < 0:
            raise ValueError(f"dotted rule {r} is not before a terminal")
        if not 1 <= s < self.n_states(self.dr_sym[r] - self.n_nt):
            raise ValueError(f"state {s} out of range")
        cdef Pos* ps = &self.pos[self.pos_start[r] + s]
        acc = self._inner_set(ps.inner) | {int((<int32_t*>self.pool.p)[ps.extra + i]) for i in range(ps.n_extra)}
        unc = sorted(int(self.trie_ids[(<int32_t*>self.pool.p)[ps.unc + i]]) for i in range(ps.n_unc))
        return KIND_NAMES[(<Inner*>self.inners.p)[ps.inner].kind], sorted(acc), unc

    def cache_stats(self):
        """Positions; shared terminal states (Inners) by storage kind and their frontier
        nodes; accepted-outside-S and uncertain ids over the positions; the root-child
        walks reused while building, the positions copied from an equivalent state's
        or dotted rule's, the positions at a rule's end with nothing after it (no
        walks below the frontier), and the states given another terminal's Inner
        (``share_walks``); cache bytes."""
        kinds = [0, 0, 0]
        cdef int64_t i, n_extra = 0, n_unc = 0
        cdef int32_t r
        cdef state_t s
        for i in range(self.inners.n):
            kinds[(<Inner*>self.inners.p)[i].kind] += 1
        if self.pos != NULL:
            for r in range(self.n_dr):
                if self.pos_start[r] < 0:
                    continue
                for s in range(1, self.n_states(self.dr_sym[r] - self.n_nt)):
                    n_extra += self.pos[self.pos_start[r] + s].n_extra
                    n_unc += self.pos[self.pos_start[r] + s].n_unc
        return {"positions": int(self.n_pos), "inner_states": int(self.inners.n), "inner_accepted": kinds[0],
                "inner_rejected": kinds[1], "inner_bitset": kinds[2], "frontier_nodes": int(self.frs.n),
                "extra_ids": int(n_extra), "uncertain_ids": int(n_unc), "shared_walks": int(self.shared_walks),
                "merged_positions": int(self.merged_positions), "twin_positions": int(self.twin_positions),
                "ended_positions": int(self.ended_positions),
                "shared_inners": int(self.shared_inners),
                "cache_bytes": self.cache_bytes()}

    def cache_bytes(self):
        return int(self._cache_bytes())

    def memory_bytes(self):
        """The grammar tables and the cache."""
        return int(self.grammar_bytes() + self.cache_bytes())
