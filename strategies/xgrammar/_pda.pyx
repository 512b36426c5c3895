"""The matcher core of strategy ``xgrammar``: a byte-level pushdown parser that fills
masks from the adaptive token mask cache.

A :class:`Parser` is the Earley charts of one sequence
(:class:`~strategies.xgrammar._charts.Charts`) over a grammar's
:class:`~strategies.xgrammar._tables.Tables`.  A mask is the union over the live
positions (a term of the last chart with an item of its origin chart waiting on its
terminal) of ``S`` (once per Inner) and the extra ids, then the uncertain tokens
checked one by one against the real parse, in trie order so a token reuses the bytes
it shares with the previous one.  Through the session (``StrategyOps.fill_over``) the
first live S that fills a whole row is copied over the row instead of zeroing the row
and ORing it in, and a fill with one live position says how many tokens it set (its S,
its extra ids and the candidates checked in are disjoint), so the row is not counted
again.

The parser counts its work (``MaskStats``, through the session's ``work`` op):

* ``earley_items``: items added to a chart by every byte read (``Charts.push``: the
  tokens accepted and the checks of a fill alike; chart 0 is the parser's making);
* ``lexer_steps``: terminal DFA transitions, one per term of the last chart per byte read;
* ``trie_nodes``: the bytes a fill's checks read, each a trie node below the shared
  prefix of the previous candidate;
* ``tokens_checked``: the uncertain tokens a fill checks one by one;
* ``tokens_cached``: the text tokens a fill decides from the cache alone, in a live
  position's S or extra ids, or in none of the live positions' sets (so, per fill,
  ``tokens_cached + tokens_checked`` is the vocabulary's text tokens).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

from strategies.xgrammar._charts cimport Charts
from strategies.xgrammar._tables cimport K_ACCEPTED, K_BITSET, Inner, Pos, Tables
from toolkit.core.cutil cimport BYTES, ERR_MEMORY, ERR_NO_CACHE, WorkCounters, grow, or_words, sort_ints
from toolkit.core.ids cimport DEAD, state_t, symbol_t, token_t, word_t
from toolkit.core.session cimport StrategyOps, add_work, ops_capsule_of, undo_copy, undo_pop, undo_reserve

__all__ = ["Parser", "ops_capsule"]

cdef extern from *:
    void prefetch "__builtin_prefetch"(const void* p) noexcept nogil


cdef class Parser(Charts):
    """An Earley parse over bytes that fills masks from ``tables``' cache.

    ``Parser(tables)`` starts at the grammar's start; ``base=True`` leaves it empty
    (a copy to fill).
    """

    def __cinit__(self, Tables tables not None, bint base=False):
        self.T = tables

    def __dealloc__(self):
        free(self.cand)
        free(self.cand_stamp)
        free(self.undo_stack.data)
        free(self.scratch)
        free(self.pos_seen)
        free(self.pos_stamp)
        free(self.inner_stamp)
        free(self.term_keys)
        free(self.sym_term)
        free(self.sym_stamp)

    # ---------------------------------------------------------- the mask --

    cdef int _prepare_fill(self) noexcept nogil:
        """The fill's arrays, allocated by the first fill."""
        if self.scratch != NULL:
            return 0
        self.cand = <int32_t*>malloc(max(1, self.T.n_tokens) * sizeof(int32_t))
        self.cand_stamp = <uint32_t*>malloc(max(1, self.T.n_tokens) * sizeof(uint32_t))
        self.scratch = <word_t*>malloc(max(1, self.T.n_words) * sizeof(word_t))
        self.pos_stamp = <uint32_t*>malloc(max(1, self.T.n_pos) * sizeof(uint32_t))
        self.pos_seen = <int64_t*>malloc(max(1, self.T.n_pos) * sizeof(int64_t))
        self.inner_stamp = <uint32_t*>malloc(max(1, self.T.inners.n) * sizeof(uint32_t))
        self.sym_term = <int64_t*>malloc(max(1, self.T.n_sym) * sizeof(int64_t))
        self.sym_stamp = <uint32_t*>calloc(max(1, self.T.n_sym), sizeof(uint32_t))
        if (self.sym_term == NULL or self.sym_stamp == NULL or self.inner_stamp == NULL or self.cand == NULL
                or self.cand_stamp == NULL or self.scratch == NULL or self.pos_stamp == NULL or self.pos_seen == NULL):
            return ERR_MEMORY
        memset(self.cand_stamp, 0, max(1, self.T.n_tokens) * sizeof(uint32_t))
        memset(self.pos_stamp, 0, max(1, self.T.n_pos) * sizeof(uint32_t))
        memset(self.inner_stamp, 0, max(1, self.T.inners.n) * sizeof(uint32_t))
        return 0

    cdef int _fill(self, word_t* row, bint over, int64_t* count) noexcept nogil:
        """OR the allowed text tokens into ``row`` (``over``: its words are garbage and
        the fill writes every one, its first full-row S copied over them): 0, or an
        error code.  ``*count``: the tokens set where one position is live (its S, its
        extra ids and the checked candidates, disjoint), else -1 (the caller counts)."""
        cdef int64_t n_cand, nodes = 0, accepted = 0
        cdef const Inner* inn
        cdef int rc = self._prepare_fill()
        count[0] = -1
        if rc < 0:
            return rc
        self.cstamp += 1
        if self.cstamp == 0:  # wrapped: nothing is stamped by a new fill
            memset(self.cand_stamp, 0, max(1, self.T.n_tokens) * sizeof(uint32_t))
            memset(self.pos_stamp, 0, max(1, self.T.n_pos) * sizeof(uint32_t))
            memset(self.inner_stamp, 0, max(1, self.T.inners.n) * sizeof(uint32_t))
            self.cstamp = 1
        rc = self._live_positions()
        if rc < 0:
            return rc
        if over:
            self._write_first(row)
        self._add_cached(row)
        n_cand = self._candidates(row)
        self.checked = n_cand
        rc = self._check(row, n_cand, &nodes, &accepted)
        self.work.trie_nodes += nodes
        self.work.tokens_checked += n_cand
        self.work.tokens_cached += self.T.n_tokens - n_cand
        if rc >= 0 and self.n_pos_seen <= 1:
            if self.n_pos_seen == 0:
                count[0] = 0
            else:
                inn = &(<const Inner*>self.T.inners.p)[self.T.pos[self.pos_seen[0]].inner]
                if inn.kind != K_BITSET:
                    count[0] = ((inn.n_data if inn.kind == K_ACCEPTED else self.T.n_tokens - inn.n_data)
                                + self.T.pos[self.pos_seen[0]].n_extra + accepted)
        return rc

    cdef void _write_first(self, word_t* row) noexcept nogil:
        """Write the first live position's S that fills a whole row (a bitset, or the
        text tokens but its rejected ids) over ``row``, its Inner stamped done; with
        none, zero ``row``."""
        cdef const int32_t* pool = <const int32_t*>self.T.pool.p
        cdef const Inner* inn
        cdef int64_t i, j
        cdef int32_t inner
        cdef token_t t
        for i in range(self.n_pos_seen):
            inner = self.T.pos[self.pos_seen[i]].inner
            inn = &(<const Inner*>self.T.inners.p)[inner]
            if inn.kind == K_ACCEPTED:
                continue
            if inn.kind == K_BITSET:
                memcpy(row, &(<const word_t*>self.T.wpool.p)[inn.data], self.T.n_words * sizeof(word_t))
            else:
                memcpy(row, self.T.text_words, self.T.n_words * sizeof(word_t))
                for j in range(inn.data, inn.data + inn.n_data):
                    t = pool[j]
                    row[t >> 5] &= ~((<word_t>1) << (t & 31))
            self.inner_stamp[inner] = self.cstamp
            return
        memset(row, 0, self.T.n_words * sizeof(word_t))

    cdef int _live_positions(self) noexcept nogil:
        """``pos_seen``: the positions of the last chart's terms, each once (a term
        with each item of its origin chart whose next symbol is its terminal).  The
        terms are grouped by origin and each origin chart's items are read once, so a
        choice among many literals (a tool's name out of 512) costs terms plus items,
        not their product.  A chart holds one term per (terminal, origin): a terminal is
        predicted once per chart and its DFA takes each term to one state.  0, or
        ERR_MEMORY."""
        cdef int32_t o, r
        cdef symbol_t x
        cdef int64_t i, j, k, g, g_end
        cdef int64_t first = self.ch_terms[self.n_charts - 1], n = self.n_terms - first
        self.n_pos_seen = 0
        self.positions = 0
        if grow(<void**>&self.term_keys, &self.cap_keys, n, sizeof(int64_t)) < 0:
            return ERR_MEMORY
        for i in range(n):
            self.term_keys[i] = (<int64_t>self.terms[first + i].o << 32) | i
        sort_ints(self.term_keys, n)
        g = 0
        while g < n:
            o = <int32_t>(self.term_keys[g] >> 32)
            g_end = g
            self.gstamp += 1
            if self.gstamp == 0:  # wrapped: no terminal is stamped by a new group
                memset(self.sym_stamp, 0, max(1, self.T.n_sym) * sizeof(uint32_t))
                self.gstamp = 1
            while g_end < n and (self.term_keys[g_end] >> 32) == o:
                i = self.term_keys[g_end] & <int64_t>0xFFFFFFFF
                x = self.terms[first + i].t
                self.sym_stamp[x] = self.gstamp
                self.sym_term[x] = first + i
                g_end += 1
            for j in range(self.ch_items[o], self.ch_items[o + 1]):
                r = self.items[j].r
                x = self.T.dr_sym[r]
                if x < self.T.n_nt or self.sym_stamp[x] != self.gstamp:
                    continue  # ends its rule, waits on a nonterminal, or on no term's terminal
                k = self.T.pos_start[r] + self.terms[self.sym_term[x]].s
                if self.pos_stamp[k] != self.cstamp:
                    self.pos_stamp[k] = self.cstamp
                    self.pos_seen[self.n_pos_seen] = k
                    self.n_pos_seen += 1
                    prefetch(&self.T.pos[k])
            g = g_end
        self.positions = self.n_pos_seen
        return 0

    cdef void _add_cached(self, word_t* row) noexcept nogil:
        """OR the live positions' context-independent sets into ``row``: each shared S
        once, then each position's extra ids.  Many positions (a choice among many
        literals) first prefetch their Inners and id lists, so the cache misses of a
        cold fill overlap instead of following one another."""
        cdef const int32_t* pool = <const int32_t*>self.T.pool.p
        cdef const word_t* wpool = <const word_t*>self.T.wpool.p
        cdef const Inner* inn
        cdef const Pos* ps
        cdef int64_t i, j
        cdef token_t t
        if self.n_pos_seen > 8:  # many positions: their Inners and id lists fetched together, not one by one
            for i in range(self.n_pos_seen):
                ps = &self.T.pos[self.pos_seen[i]]
                prefetch(&self.inner_stamp[ps.inner])
                prefetch(&(<const Inner*>self.T.inners.p)[ps.inner])
                if ps.n_extra:
                    prefetch(&pool[ps.extra])
            for i in range(self.n_pos_seen):
                inn = &(<const Inner*>self.T.inners.p)[self.T.pos[self.pos_seen[i]].inner]
                if inn.n_data:
                    prefetch(&pool[inn.data] if inn.kind != K_BITSET else <const void*>&wpool[inn.data])
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
                or_words(row, &wpool[inn.data], self.T.n_words)
            else:
                memcpy(self.scratch, self.T.text_words, self.T.n_words * sizeof(word_t))
                for j in range(inn.data, inn.data + inn.n_data):
                    t = pool[j]
                    self.scratch[t >> 5] &= ~((<word_t>1) << (t & 31))
                or_words(row, self.scratch, self.T.n_words)

    cdef int64_t _candidates(self, const word_t* row) noexcept nogil:
        """``cand``: the live positions' uncertain tokens not allowed already, each
        once, in trie order; returns how many."""
        cdef const int32_t* pool = <const int32_t*>self.T.pool.p
        cdef const Pos* ps
        cdef int64_t i, j, n_cand = 0
        cdef int32_t m, sources = 0
        cdef token_t t
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
        if sources > 1:  # one position's list is in trie order already
            sort_ints(self.cand, n_cand)
        return n_cand

    cdef int _check(self, word_t* row, int64_t n_cand, int64_t* nodes, int64_t* accepted) noexcept nogil:
        """Set the bits of the candidates the real parse reads, pushing each one's bytes
        past the prefix it shares with the previous one (a refused prefix skips the
        candidates that start with it); ``*nodes``: the bytes pushed, ``*accepted``: the
        candidates set.  The charts are as before.  0, or an error code."""
        cdef int32_t base = self.n_charts, lcp, fail_at = -1, depth = 0, m
        cdef const uint8_t* prev = NULL
        cdef const uint8_t* cur
        cdef int64_t i, start, prev_len = 0, cur_len, pushed = 0
        cdef token_t t
        cdef int rc
        for i in range(n_cand):
            m = self.cand[i]
            start = self.T.offsets[m]
            cur = self.T.blob + start
            cur_len = self.T.offsets[m + 1] - start
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
                pushed += 1
                if rc < 0:
                    self.pop(self.n_charts - base)
                    nodes[0] = pushed
                    return rc
                if rc == 0:
                    fail_at = depth + 1
                    break
                depth += 1
            if fail_at < 0:
                t = self.T.trie_ids[m]
                row[t >> 5] |= (<word_t>1) << (t & 31)
                accepted[0] += 1
        self.pop(self.n_charts - base)
        nodes[0] = pushed
        return 0

    # ------------------------------------------------------------ Python API --

    def fill(self, word_t[::1] row):
        """Set the bits of the allowed text tokens in ``row`` (zeroed by the caller)."""
        if self.T.pos == NULL:
            raise self.T.error(ERR_NO_CACHE)
        if row.shape[0] != self.T.n_words:
            raise ValueError(f"row has {row.shape[0]} words, the vocabulary needs {self.T.n_words}")
        cdef int rc
        cdef int64_t count
        with nogil:
            rc = self._fill(&row[0], False, &count)
        if rc < 0:
            raise self.T.error(rc)

    def copy(self):
        """An independent parser in the same state (its work counters at zero)."""
        cdef Parser other = Parser(self.T, base=True)
        self.copy_to(other)
        if undo_copy(&other.undo_stack, &self.undo_stack) < 0:
            raise MemoryError()
        return other

    def reset(self):
        """Back to the grammar's start."""
        self.undo_stack.n = 0
        Charts.reset(self)

    def error_text(self, int32_t code, int64_t value):
        """The message of an op's failure (``code``: its error code)."""
        e = self.T.error(code)
        return f"{type(e).__name__}: {e}"

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

    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil:
        """The ops' ``next_bytes``, exact: the bytes some term of the last chart does not
        die on (a byte is read when a term lives after it)."""
        cdef int64_t i
        cdef int32_t b
        cdef symbol_t ti
        cdef state_t s
        out[0] = out[1] = out[2] = out[3] = 0
        for i in range(self.ch_terms[self.n_charts - 1], self.n_terms):
            ti = self.terms[i].t - self.G.n_nt
            s = self.terms[i].s
            for b in range(BYTES):
                if self.G.step(ti, s, <uint8_t>b) != DEAD:
                    out[b >> 6] |= (<uint64_t>1) << (b & 63)
        return 2

    cdef void c_undo(self) noexcept nogil:
        self.pop(undo_pop(&self.undo_stack))

    cdef int c_fill(self, word_t* row, int32_t n_words, bint over, int64_t* count) noexcept nogil:
        cdef int rc
        if self.T.pos == NULL or n_words != self.T.n_words:
            self.last_err = ERR_NO_CACHE
            return -1
        rc = self._fill(row, over, count)
        if rc < 0:
            self.last_err = rc
            return -1
        return 0


# ---------------------------------------------------------------------------
# The parser as the core of a toolkit.core.session.Session
# ---------------------------------------------------------------------------

cdef int _ops_advance(void* core, token_t token, const uint8_t* data, int32_t n) noexcept nogil:
    return (<Parser>core).c_advance(data, n)


cdef void _ops_undo(void* core) noexcept nogil:
    (<Parser>core).c_undo()


cdef int _ops_fill(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    return (<Parser>core).c_fill(row, n_words, False, count)


cdef int _ops_fill_over(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    return (<Parser>core).c_fill(row, n_words, True, count)


cdef int _ops_accepting(void* core) noexcept nogil:
    return (<Parser>core).accepting()


cdef void _ops_take_error(void* core, int32_t* code, int64_t* value) noexcept nogil:
    code[0] = (<Parser>core).last_err
    value[0] = 0


cdef void _ops_work(void* core, WorkCounters* out) noexcept nogil:
    add_work(out, &(<Parser>core).work)


cdef int _ops_next_bytes(void* core, uint64_t* out) noexcept nogil:
    return (<Parser>core).c_next_bytes(out)


cdef StrategyOps _OPS = StrategyOps(_ops_advance, _ops_undo, _ops_fill, _ops_accepting, _ops_take_error, _ops_work,
                                    _ops_next_bytes, _ops_fill_over)


def ops_capsule():
    """The parser's C entry points for :class:`toolkit.core.session.Session`."""
    return ops_capsule_of(&_OPS)
