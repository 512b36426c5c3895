"""The ``glr`` core: llguidance's lexer and trie walk over an LR automaton with a
graph-structured stack.

:class:`GLRTables` is :class:`strategies.llguidance.parser.ParserTables` (the lexemes,
their DFAs and the lazy lexer states: the lexer of our ``llguidance``, unchanged) plus
the LR automaton over the lexemes that :func:`toolkit.grammar.lr.build_lr` makes: per
state, its shifts, gotos and reductions as sorted lists and the lexemes it has an action
on, with the safe lookaheads and the predecessors made at init (below).

:class:`GLRParser` is :class:`~strategies.llguidance.parser.EarleyParser` with its
rows made by an LR parser instead of Earley's: the walk, the mask cache, the undo
records, the session's ops and the limits are that class's, and a row keeps its
meaning (the parse after one more lexeme: the lexer state its allowed lexemes start
from, and whether the grammar accepts there).  So on the same grammar the two parsers
see the same lexemes and give the same masks; what differs is the work a row costs.

**The stack in the rows.**  Row ``j`` holds the top level of the graph-structured
stack (Tomita) after ``j`` lexemes, in the parser's item arena (``Item.dr``,
``Item.origin`` used as two ints): a node is a *header* ``(state, n)`` followed by its
``n`` *edges* ``(EDGE, header below)``.  Rows are pushed by a scan and popped by
truncation, as Earley rows are, so a header never changes once its row is closed.

**A scan** of the lexemes a lexer state accepts: for each lexeme ``l``, the top
level is copied into a *view* (C arrays outside the arena: a view node is a header
of the level, ``orig``, plus edges of its own), every reduction on lookahead ``l`` is
performed in the view along every path of the production's length (new nodes, or
edges added to a node, of the top level; until nothing changes, which makes
ε-productions and hidden left recursion right: Farshi's fix of Tomita; from a worklist,
so an edge added to a node is reduced along the paths it starts, and all of a node's
only when the node is new or a path may run through a view node: ``_reduce``), then ``l`` is
shifted from every view node that can.  The view nodes a shift leaves from are written
into the new row as headers of the level below (flag ``VIRT``: they belong to the
level the reductions worked on), an unchanged one as its own header; then the row's
nodes, one per state, with an edge to each node it was shifted from.

**Closing a row** finds the lexemes it allows: a lexeme some node shifts is allowed,
and so is a *safe* one (``cand_safe``: the least fixpoint, made at init, of "the state
shifts it, or one of its reductions on it leads, from every state the production's
length below it through the LR(0) automaton's predecessors (the lookback), to a state
where it is safe": allowed whatever the stack); any other is tried in a view (an
LALR(1) lookahead the stack below may refuse).  ``$`` the same way (``acc_safe``; no
node with an action on it: refused) says whether the grammar accepts.  The lexer state
of the allowed lexemes (``ParserTables.start_state``) is the row's, as in Earley.

**The linear top** (:meth:`GLRParser._lin_sim`): where the stack is one path near its
top, a lexeme's reductions and shift are followed on it without rows (the LR states
pushed above a node of the arena, the arena's nodes read down their single edge), and
the start state after it is ``cand_ss`` of the state shifted into when its candidates
are all safe, else that of those the simulated stack allows.  A mask follows its
boundary groups this way, the acceptance check too; a conflict, a node of two edges or
the bottom send it back to the scan.

**The mask tables** (SynCode's "DFA mask store" and DOMINO's subterminal trees, over
llguidance's lexer; made ahead of the masks by :meth:`GLRParser.ahead`, and when first
met past it).  A token read from lexer state ``x`` either stays in the lexeme it is in
(its bytes all step, whatever the parser) or ends that lexeme at some byte: the lexer
state ``q`` the lexeme ends in fixes which lexemes the parser is asked to scan, and the
rest of the token is read from the start state ``s'`` of the lexemes the parser allows
after that scan.  So a *context* of ``x`` holds

* a row: the tokens that stay in the lexeme (dense, or ``(word, bits)`` pairs when a few
  words hold it), and
* its *groups*: per lexer state ``q`` a lexeme ends in, the trie nodes whose byte comes
  after the end (each node standing for its subtree);

and a group's *child*, per ``s'``, is the context of those nodes read from ``s'`` (its
own row and groups, the next boundary).  So a child depends on the group's nodes and
``s'`` alone, and groups with one node list (the tokens after a closing quote are the
same whichever string the quote closes) share it: a group whose list an older group
has keeps that group's nodes and children (``g_cn``, ``groups_shared``): a median
MaskBench schema's contexts 30 times fewer, its TTFM about half.  Contexts whose dense
rows are equal word for word (a string's contents, read from most of its lexer states)
share one row (``dr_index``, ``rows_shared``): on 40 MaskBench schemas with Llama-3 the
tables' bytes went from 158 to 49 MB, and the few rows masks read most stay in the cache.

A mask is then the root context's row, and per group one scan of the stack (the skip
lexeme's: none, ``s'`` is the row's own) and the child's row: ``O(groups x scan + rows)``
instead of a walk of the token trie, and exact by construction (a group's nodes see the
same scan a trie walk would make at each of them).  The rows of one mask are disjoint (a
token's first boundary is at one node), so the tokens a mask allows are the sum of its
rows' counts (no pass over the mask).

Made ahead (:meth:`GLRParser.ahead`): the roots of the lexer state a parse starts in
and of every LR state's candidate lexemes (the start state after a lexeme shifted into
it), then, queued as found, of every lexer state a token of a made context ends in (a
slice a root takes whole: its trie walked down to where every pair of the state keeps
the slice alive, then the lexer states bytes lead to from there, ``X_CLOSURE`` of
them).  Children: items ``(context, LR state on top)``; a root's group gets a child per
state a lexeme it ends is shifted into anywhere, a child's group per state
:meth:`GLRTables._reach` finds from the item's state through the lookbacks, each with
the start state of its candidates and, where up to ``UNSAFE_SUBSETS`` of them are
unsafe, of each subset.  What the making ahead cannot see (several stacks at once, a
lookback past ``REACH_MAX`` states, the ``ahead_nodes`` budget spent) is made when first
met.

**Several stacks at once** (:meth:`GLRParser.explore`, after the making ahead).  Where
the stack has several tops (alternatives of an ``anyOf`` in lockstep, a key two lexemes
accept), a row's lexemes start in the union of the tops' candidates, a lexer state no LR
state gives: its root was made at the mask, a walk of the trie's rest (5,300 nodes inside
a JSON key, 50-90 us with Llama 3).  So the parser's configurations are explored at
compile, depth first from row 0, a lexeme at a time: from a row's start state, each
allowed lexeme's shortest string leads to a lexer state that accepts it and every lexeme
that accepts that string too (as a real lexeme does), and that state is scanned; a
configuration (its top row's LR states, the states their edges lead to, and its start
state) is expanded once: keyed by the top row alone, a property list reached through
one key was not followed through another whose stack below differs, and 3 schemas kept
masks of 58-68 us.  Each row with several tops queues its start state for a root, made
with the states its tokens end in.  A prediction only makes contexts, each exact for
its lexer state, so a wrong one costs time, never a mask.  A stack whose configuration
repeats another's two top levels but not what lies below may be missed (then made at
the mask, as before).  ``max_cx_bytes`` (the engine's ``max_table_bytes`` less the LR arrays) bounds the
tables: past it, a mask is llguidance's walk (``cx_walks``).  The tables grow while masks
are served and never copy to grow (a realloc of tens of MB would cost the mask that made
a context milliseconds): dense rows and stored masks sit in blocks that never move
(``cutil.Arena``), the other arrays are page mappings grown by the kernel (``cutil.vgrow``).
A context's walk goes over the trie's child index (:meth:`TokenTrie.child_index`): a
child's byte is read from its parent's list, and its record only when the byte keeps the
lexeme alive, so the dead children a walk tests (most of them, where few first bytes
are allowed) cost no cache miss each; a group's nodes carry their byte for the same.

**Lexer states no token tells apart share a root.**  A counted repeat (a string of
``maxLength`` 32,767, a number of 30 digits) gives a lexer state per position, each of
which used to need a root of its own, made at the mask when the making ahead had not
reached it (a walk of the trie: hundreds of microseconds).  But a root is what tokens
read from its state: two states that no string of ``horizon`` bytes (the longest
token's and two: whether the state a token ends in can go on is seen too) tells apart
(dead, live, and which lexemes accept, after every byte) have the same row, the same
groups up to their lexer states, which accept the same lexemes, and so the same
children.  Per lexeme, Moore's refinement of its DFA stopped after ``horizon`` rounds
(:func:`toolkit.automata._dfabuild.horizon_reps`, when the tables get their walk)
maps each state to the least one no such string tells from it; a lexer state's
:meth:`GLRTables.horizon_rep` is the lexer state of its members' representatives, and
:meth:`GLRParser._root_of` gives the two one root (``roots_shared`` counts the
sharing).  The positions away from a count's ends then share one root, made once.

**The mask store** (lazy): a mask a fill made (when it made a context or took
``store_min_rows`` rows, a scan or walk counting ``STORE_SCAN_ROWS``: a cheap one is made
again faster than stored) is stored on the tables, shared by every parser of the grammar, keyed by what it was made from: the lexer state, the top row's
start lexer state (what follows a skipped lexeme) and the LR states of the stack's
linear top down to the deepest node the fill read (the fill records the lowest stack
node its scans reached; rows kept from earlier operations are made again so that every
read is the fill's).  A later fill whose stack shows the same states that deep copies
the stored row: exact by construction, since the fill read nothing else.  A stack that
is not linear where it was read is not stored; ``max_store_bytes`` bounds the store (0:
off).

Limits: the items of a row (headers and edges written) and the nodes and edges of the
level a scan reduces in (``max_row_items`` each), and the
steps of a mask or token (items, reductions and lexer states, ``max_steps``), raised
as the tables' errors.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy, memmove, memset

import numpy as np

cimport numpy as cnp

from strategies.llguidance.parser cimport EarleyParser, F_SKIP_ACC, LS_ERROR, ParserTables, SliceSet
from toolkit.automata._dfabuild cimport horizon_reps
from toolkit.core.cutil cimport (
    BYTES, ERR_MAX_ROW_ITEMS, ERR_MEMORY, ERR_NONE, arena_at, arena_bytes, arena_free, arena_init, arena_take, grow,
    hash_ints, i64map_free, i64map_get, i64map_init, i64map_put, mix64, next_cap, or_words, pair_key, resize, vfree,
    vgrow,
)
from toolkit.core.ids cimport MISSING, state_t, token_t, word_t
from toolkit.core.trie cimport TokenTrie, TrieNode

from toolkit.core.errors import TimeLimitExceeded, check_deadline

cnp.import_array()

__all__ = ["GLRTables", "GLRParser"]


cdef int _deadline_passed() noexcept with gil:
    """1 when the compile's deadline (:func:`toolkit.core.errors.deadline`) has passed:
    the making ahead asks every few dozen items, then stops for :meth:`GLRParser.ahead`
    to raise it."""
    try:
        check_deadline()
    except TimeLimitExceeded:
        return 1
    return 0


cdef inline int32_t _first(const int32_t* keys, int32_t lo, int32_t hi, int32_t key) noexcept nogil:
    """The first index in ``[lo, hi)`` of sorted ``keys`` whose key is not below ``key``."""
    cdef int32_t mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline int64_t _row_key(const word_t* w, int32_t n) noexcept nogil:
    """A dense row's key for sharing: two sums over its words (the second weighted by
    position), which vectorize (a row's FNV hash, word by word, would add microseconds
    per row to the compile); equal keys are compared word for word."""
    cdef uint64_t a = 0, b = 0
    cdef int32_t i
    for i in range(n):
        a += w[i]
        b += <uint64_t>w[i] * <uint64_t>(i + 1)
    return <int64_t>(mix64(a) ^ b)


cdef class GLRTables(ParserTables):
    """The lexer of :class:`ParserTables` and an LR automaton over its lexemes.

    Per state, as sorted lists (CSR, looked up by binary search: a grammar of 30,000 LR
    states over 1,700 lexemes fits): ``sh_off``/``sh_lex``/``sh_to``, its shifts by lexeme;
    ``goto_off``/``goto_nt``/``goto_to``, its transitions on nonterminals;
    ``rd_off``/``rd_la``/``rd_prod``, its reductions by lookahead (``n_term``: the end).
    ``prod_lhs``/``prod_len`` (the
    augmented production last, left-hand side -1); ``cand_off``/``cand_lex``: per state
    the lexemes it shifts or reduces on.
    """

    def __init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, int32_t n_nt, lexemes, int32_t skip, *,
                 int32_t n_states, int32_t n_term, sh_off, sh_lex, sh_to, goto_off, goto_nt, goto_to,
                 rd_off, rd_la, rd_prod, prod_lhs, prod_len, cand_off, cand_lex, int32_t conflicts,
                 int64_t max_lexer_states, int64_t max_row_items, int64_t max_steps, int32_t n_slices=0,
                 int64_t max_store_bytes=0, int64_t max_cx_bytes=0, int64_t store_min_rows=0):
        ParserTables.__init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, n_nt, 0, lexemes, skip,
                              max_lexer_states=max_lexer_states, max_row_items=max_row_items,
                              max_steps=max_steps, n_slices=n_slices)
        self.n_states = n_states
        self.n_term = n_term
        if n_term != self.n_lex - (skip >= 0):
            raise ValueError(f"the LR tables have {n_term} terminals, the lexer {self.n_lex - (skip >= 0)}")
        for name, off, a, b in (("sh", sh_off, sh_lex, sh_to), ("goto", goto_off, goto_nt, goto_to),
                                ("rd", rd_off, rd_la, rd_prod), ("cand", cand_off, cand_lex, cand_lex)):
            if len(off) != n_states + 1 or len(a) != len(b) or (n_states and off[n_states] != len(a)):
                raise ValueError(f"{name}_off and its lists disagree with {n_states} states")
        self.n_prods = len(prod_lhs)
        self.conflicts = conflicts
        self.sh_off = self._copy_i32(sh_off)
        self.sh_lex = self._copy_i32(sh_lex)
        self.sh_to = self._copy_i32(sh_to)
        self.goto_off = self._copy_i32(goto_off)
        self.goto_nt = self._copy_i32(goto_nt)
        self.goto_to = self._copy_i32(goto_to)
        self.rd_off = self._copy_i32(rd_off)
        self.rd_la = self._copy_i32(rd_la)
        self.rd_prod = self._copy_i32(rd_prod)
        self.prod_lhs = self._copy_i32(prod_lhs)
        self.prod_len = self._copy_i32(prod_len)
        self.cand_off = self._copy_i32(cand_off)
        self.cand_lex = self._copy_i32(cand_lex)
        self.max_store_bytes = max_store_bytes
        self.st_words = -1
        if (i64map_init(&self.st_index, 64) < 0 or i64map_init(&self.cx_root, 64) < 0
                or i64map_init(&self.ch_index, 64) < 0 or i64map_init(&self.nl_index, 64) < 0
                or i64map_init(&self.dr_index, 64) < 0):
            raise MemoryError()
        self.max_cx_bytes = max_cx_bytes
        self.store_min_rows = store_min_rows
        self.lr_bytes = 4 * (3 * (n_states + 1) + 2 * len(sh_lex) + 2 * len(goto_nt) + 2 * len(rd_la)
                             + 2 * self.n_prods + len(cand_off) + len(cand_lex)) + len(cand_lex) + 2 * n_states
        cdef int r
        cdef int32_t S
        cdef bint all_safe
        with nogil:
            r = self._init_safe(SAFE_WORK)
        if r < 0:
            raise MemoryError()
        self.cand_ss = <state_t*>malloc(max(1, n_states) * sizeof(state_t))
        if self.cand_ss == NULL:
            raise MemoryError()
        for S in range(n_states):
            all_safe = True
            for r in range(self.cand_off[S], self.cand_off[S + 1]):
                if not self.cand_safe[r]:
                    all_safe = False
                    break
            self.cand_ss[S] = -1
            if all_safe and self.cand_off[S + 1] > self.cand_off[S]:
                self.cand_ss[S] = self.start_state(&self.cand_lex[self.cand_off[S]], self.cand_off[S + 1] - self.cand_off[S])
                if self.cand_ss[S] == LS_ERROR:
                    self.raise_error()
        self.lr_bytes += 4 * n_states

    def __dealloc__(self):
        free(self.sh_off); free(self.sh_lex); free(self.sh_to)
        free(self.goto_off); free(self.goto_nt); free(self.goto_to)
        free(self.rd_off); free(self.rd_la); free(self.rd_prod)
        i64map_free(&self.st_index); free(self.st_next); free(self.st_ls0); free(self.st_depth); free(self.st_soff)
        free(self.st_sliced); free(self.st_states); free(self.st_moff); free(self.st_count)
        arena_free(&self.st_ma); arena_free(&self.cx_wa)
        i64map_free(&self.cx_root); i64map_free(&self.dr_index)
        vfree(self.cx_roff, self.cx_cap, 8); vfree(self.cx_rlen, self.cx_cap, 4); vfree(self.cx_cnt, self.cx_cap, 8)
        vfree(self.cx_goff, self.cx_cap, 4); vfree(self.cx_gn, self.cx_cap, 4); vfree(self.cx_sliced, self.cx_cap, 1)
        vfree(self.cx_si, self.cx_s_cap, 4); vfree(self.cx_sw, self.cx_s_cap, sizeof(word_t))
        vfree(self.g_q, self.g_cap, sizeof(state_t)); vfree(self.g_skip, self.g_cap, 1); vfree(self.g_noff, self.g_cap, 8)
        vfree(self.g_nn, self.g_cap, 4); vfree(self.g_c1, self.g_cap, 8); vfree(self.g_cn, self.g_cap, 4)
        i64map_free(&self.nl_index)
        vfree(self.nd_k, self.nd_cap, 4); vfree(self.nd_i, self.nd_cap, 4); i64map_free(&self.ch_index)
        free(self.x_enq); free(self.x_rq)
        free(self.x_row); free(self.x_tok); free(self.x_bq); free(self.x_bk); free(self.x_bi); free(self.x_gat); free(self.x_gstamp)
        free(self.prod_lhs); free(self.prod_len); free(self.cand_off); free(self.cand_lex)
        free(self.cand_safe); free(self.acc_safe); free(self.acc_any); free(self.cand_ss)
        free(self.pred_off); free(self.pred); free(self.r_mark); free(self.r_fr); free(self.r_lb)
        free(self.g_rep); free(<void*>self.kw_off); free(<void*>self.kw_node); free(<void*>self.kw_byte)

    cdef int _horizon_init(self, int32_t depth) noexcept nogil:
        """``g_rep`` for tokens of at most ``depth`` bytes: per lexeme, Moore's classes
        after ``depth + 2`` rounds (:func:`toolkit.automata._dfabuild.horizon_reps`; two
        more than a token's bytes, so that whether the state a token ends in can go on is
        seen too).  0, or -1 (memory)."""
        cdef int32_t l, lo, n
        cdef state_t s
        self.horizon = depth + 2
        self.g_rep = <state_t*>malloc(max(1, self.n_global) * sizeof(state_t))
        if self.g_rep == NULL:
            return self._fail(ERR_MEMORY, self.n_global)
        for l in range(self.n_lex):
            lo = self.lex_off[l]
            n = self.lex_off[l + 1] - lo
            if n <= self.horizon + 2:  # (a minimal DFA this small tells its states apart within the horizon)
                for s in range(n):
                    self.g_rep[lo + s] = lo + s
                continue
            if horizon_reps(self.lex_trans[l], n, self.lex_k[l], &self.g_acc[lo], self.horizon, &self.g_rep[lo]) < 0:
                free(self.g_rep)
                self.g_rep = NULL
                return self._fail(ERR_MEMORY, n)
            for s in range(n):
                self.g_rep[lo + s] += lo
        return 0

    cdef state_t horizon_rep(self, state_t x) noexcept nogil:
        """The lexer state of the ``g_rep`` of ``x``'s global states: no token tells it
        from ``x`` (after every byte of every token both are dead, or both hold the same
        accepting lexemes and can or cannot go on), so the two have one root context.
        ``x`` itself when it is its own; LS_ERROR on a limit of the lexer."""
        cdef int32_t n = self.sets.len[x], i, j, m = 0
        cdef const state_t* members = self.sets.pool + self.sets.off[x]
        cdef state_t g
        cdef bint same = True
        if self.g_rep == NULL:
            return x
        for i in range(n):
            g = self.g_rep[members[i]]
            same = same and g == members[i]
            j = m  # (insertion, dropping repeats: two members of one lexeme may share a rep)
            while j > 0 and self.buf[j - 1] > g:
                j -= 1
            if j > 0 and self.buf[j - 1] == g:
                continue
            memmove(&self.buf[j + 1], &self.buf[j], (m - j) * sizeof(state_t))
            self.buf[j] = g
            m += 1
        if same:
            return x
        return self.intern(self.buf, m)

    cdef inline int32_t child_of(self, int32_t g, state_t s) noexcept nogil:
        """Group ``g``'s child context after the boundary from lexer state ``s``, or -1."""
        g = self.g_cn[g]
        if self.g_c1[g] >= 0 and <state_t>(self.g_c1[g] >> 32) == s:
            return <int32_t>(self.g_c1[g] & <int64_t>0xffffffff)
        return i64map_get(&self.ch_index, pair_key(g, s))

    cdef inline bint _safe(self, int32_t t, int32_t c) noexcept nogil:
        """Whether lookahead ``c`` (``n_term``: the end) is safe in state ``t``."""
        cdef int32_t k
        if c == self.n_term:
            return self.acc_safe[t]
        k = _first(self.cand_lex, self.cand_off[t], self.cand_off[t + 1], c)
        return k < self.cand_off[t + 1] and self.cand_lex[k] == c and self.cand_safe[k]

    cdef int _reach_scratch(self) noexcept nogil:
        """:meth:`_reach`'s scratch (a stamp per state, the frontier, the lookback): 0, or -1
        (out of memory, the error set)."""
        if self.r_mark == NULL:
            self.r_mark = <int32_t*>calloc(self.n_states + 1, sizeof(int32_t))
            self.r_fr = <int32_t*>malloc(REACH_MAX * sizeof(int32_t))
            self.r_lb = <int32_t*>malloc(2 * REACH_MAX * sizeof(int32_t))
            if self.r_mark == NULL or self.r_fr == NULL or self.r_lb == NULL:
                return self._fail(ERR_MEMORY, self.n_states + 1)
        return 0

    cdef int32_t _reach(self, int32_t t, int32_t l, int32_t* out, int32_t cap) noexcept nogil:
        """The states lexeme ``l`` can be shifted into from a stack topped by state ``t``
        whatever is below it (reductions followed through the lookbacks): into ``out``,
        their number; -1 when more than ``cap`` states are in play (the caller does not
        predict), -2 out of memory."""
        cdef int32_t n = self.n_states, nf = 1, i, r, p, a, m, j, q, k, nl, nb, S, g, n_out = 0
        cdef int32_t* tmp
        if self._reach_scratch() < 0:
            return -2
        self.r_stamp += 1
        self.r_fr[0] = t
        self.r_mark[t] = self.r_stamp
        i = 0
        while i < nf:
            S = self.r_fr[i]
            i += 1
            g = self.shift(S, l)
            if g >= 0:
                for k in range(n_out):
                    if out[k] == g:
                        break
                else:
                    if n_out == cap:
                        return -1
                    out[n_out] = g
                    n_out += 1
            r = self.reductions_from(S, l)
            while r < self.rd_off[S + 1] and self.rd_la[r] == l:
                p = self.rd_prod[r]
                r += 1
                a = self.prod_lhs[p]
                if a < 0:
                    continue
                # the lookback: prod_len predecessor steps (the frontier in r_lb, two halves)
                self.r_lb[0] = S
                nl = 1
                for m in range(self.prod_len[p]):
                    nb = 0
                    for j in range(nl):
                        q = self.r_lb[(m & 1) * REACH_MAX + j]
                        for k in range(self.pred_off[q], self.pred_off[q + 1]):
                            if nb == REACH_MAX:
                                return -1
                            self.r_lb[((m + 1) & 1) * REACH_MAX + nb] = self.pred[k]
                            nb += 1
                    nl = nb
                for j in range(nl):
                    g = self.goto(self.r_lb[(self.prod_len[p] & 1) * REACH_MAX + j], a)
                    if g >= 0 and self.r_mark[g] != self.r_stamp:
                        if nf == REACH_MAX:
                            return -1
                        self.r_mark[g] = self.r_stamp
                        self.r_fr[nf] = g
                        nf += 1
        return n_out

    cdef int _init_safe(self, int64_t budget) noexcept nogil:
        """``cand_safe``, ``acc_safe``, ``acc_any``: the least fixpoint of "the state shifts
        the lookahead (the end: accepts), or one of its reductions on it reaches, from every
        state the production's length below it (the lookback, through the LR(0) automaton's
        predecessors), a state whose goto is safe".  Such a lookahead needs no check at a
        row's close whatever the stack (an LALR(1) lookahead the stack may refuse does).
        Stops after ``budget`` steps (a lookback over ``SAFE_FRONTIER`` states: unsafe); 0 or -1."""
        cdef int32_t n = self.n_states, S, k, c, r, p, a, m, i, j, q, t, nf, nb, total_in = 0
        cdef int64_t ncand = self.cand_off[n] if n > 0 else 0, work = 0
        cdef bint changed = True, ok
        cdef int32_t* pin_off = <int32_t*>calloc(n + 2, sizeof(int32_t))
        cdef int32_t* pin = NULL
        cdef int32_t* fa = <int32_t*>malloc(SAFE_FRONTIER * sizeof(int32_t))
        cdef int32_t* fb = <int32_t*>malloc(SAFE_FRONTIER * sizeof(int32_t))
        cdef int32_t* tmp
        cdef int32_t* mark = <int32_t*>calloc(n + 1, sizeof(int32_t))
        cdef int32_t stamp = 0
        self.cand_safe = <uint8_t*>calloc(ncand + 1, 1)
        self.acc_safe = <uint8_t*>calloc(n + 1, 1)
        self.acc_any = <uint8_t*>calloc(n + 1, 1)
        if pin_off == NULL or fa == NULL or fb == NULL or mark == NULL or self.cand_safe == NULL \
                or self.acc_safe == NULL or self.acc_any == NULL:
            free(pin_off); free(fa); free(fb); free(mark)
            return -1
        # the predecessors of each state (CSR): the sources of its shifts and gotos
        for S in range(n):
            for k in range(self.sh_off[S], self.sh_off[S + 1]):
                pin_off[self.sh_to[k] + 2] += 1
            for k in range(self.goto_off[S], self.goto_off[S + 1]):
                pin_off[self.goto_to[k] + 2] += 1
        for S in range(n):
            pin_off[S + 2] += pin_off[S + 1]
        total_in = pin_off[n + 1]
        pin = <int32_t*>malloc(max(1, total_in) * sizeof(int32_t))
        if pin == NULL:
            free(pin_off); free(fa); free(fb); free(mark)
            return -1
        for S in range(n):
            for k in range(self.sh_off[S], self.sh_off[S + 1]):
                pin[pin_off[self.sh_to[k] + 1]] = S
                pin_off[self.sh_to[k] + 1] += 1
            for k in range(self.goto_off[S], self.goto_off[S + 1]):
                pin[pin_off[self.goto_to[k] + 1]] = S
                pin_off[self.goto_to[k] + 1] += 1
        # (pin_off[S] .. pin_off[S + 1] now: S's predecessors)
        for S in range(n):
            for k in range(self.cand_off[S], self.cand_off[S + 1]):
                if self.shift(S, self.cand_lex[k]) >= 0:
                    self.cand_safe[k] = 1
                    self.safe_pairs += 1
            r = self.reductions_from(S, self.n_term)
            while r < self.rd_off[S + 1] and self.rd_la[r] == self.n_term:
                self.acc_any[S] = 1
                if self.prod_lhs[self.rd_prod[r]] < 0:
                    self.acc_safe[S] = 1
                    self.safe_pairs += 1
                r += 1
        while changed and work < budget:
            changed = False
            for S in range(n):
                for k in range(self.cand_off[S], self.cand_off[S + 1] + 1):
                    if k < self.cand_off[S + 1]:
                        if self.cand_safe[k]:
                            continue
                        c = self.cand_lex[k]
                    else:
                        if self.acc_safe[S] or not self.acc_any[S]:
                            continue
                        c = self.n_term
                    r = self.reductions_from(S, c)
                    while r < self.rd_off[S + 1] and self.rd_la[r] == c:
                        p = self.rd_prod[r]
                        r += 1
                        a = self.prod_lhs[p]
                        if a < 0:
                            continue
                        # the lookback: the states prod_len below S
                        fa[0] = S
                        nf = 1
                        ok = True
                        for m in range(self.prod_len[p]):
                            stamp += 1
                            nb = 0
                            for i in range(nf):
                                for j in range(pin_off[fa[i]], pin_off[fa[i] + 1]):
                                    q = pin[j]
                                    if mark[q] != stamp:
                                        mark[q] = stamp
                                        if nb == SAFE_FRONTIER:
                                            ok = False
                                            break
                                        fb[nb] = q
                                        nb += 1
                                if not ok:
                                    break
                            work += nf
                            tmp = fa
                            fa = fb
                            fb = tmp
                            nf = nb
                            if not ok or nf == 0:
                                break
                        if not ok or nf == 0:
                            continue
                        for i in range(nf):
                            t = self.goto(fa[i], a)
                            work += 1
                            if t < 0 or not self._safe(t, c):
                                ok = False
                                break
                        if ok:
                            if c == self.n_term:
                                self.acc_safe[S] = 1
                            else:
                                self.cand_safe[k] = 1
                            self.safe_pairs += 1
                            changed = True
                            break
        self.safe_complete = not changed
        self.pred_off = pin_off  # (kept: the making ahead follows lexemes through the lookbacks)
        self.pred = pin
        free(fa); free(fb); free(mark)
        return 0

    cdef inline int32_t goto(self, int32_t s, int32_t a) noexcept nogil:
        """The state after nonterminal ``a`` in state ``s``, or -1."""
        cdef int32_t k = _first(self.goto_nt, self.goto_off[s], self.goto_off[s + 1], a)
        return self.goto_to[k] if k < self.goto_off[s + 1] and self.goto_nt[k] == a else -1

    cdef inline int32_t shift(self, int32_t s, int32_t l) noexcept nogil:
        """The state after shifting lexeme ``l`` in state ``s``, or -1."""
        cdef int32_t k = _first(self.sh_lex, self.sh_off[s], self.sh_off[s + 1], l)
        return self.sh_to[k] if k < self.sh_off[s + 1] and self.sh_lex[k] == l else -1

    cdef inline int32_t reductions_from(self, int32_t s, int32_t la) noexcept nogil:
        """The first of state ``s``'s reductions on lookahead ``la`` in ``rd_prod`` (they
        run while ``rd_la`` is ``la``, up to ``rd_off[s + 1]``)."""
        return _first(self.rd_la, self.rd_off[s], self.rd_off[s + 1], la)

    def memory_bytes(self):
        """The lexer's tables (:meth:`ParserTables.memory_bytes`), the LR arrays, the
        mask tables and the mask store."""
        return (ParserTables.memory_bytes(self) + self.lr_bytes + self.cx_bytes + self.store_bytes
                + (4 * self.n_global if self.g_rep != NULL else 0))

    cdef int _stamps_reserve(self) noexcept nogil:
        """``x_gat`` and ``x_gstamp`` over every lexer state made so far: 0 or -1."""
        cdef int64_t cap = self.x_gcap
        if self.n_ls <= cap:
            return 0
        if grow(<void**>&self.x_gat, &cap, self.n_ls, sizeof(int32_t)) < 0 or resize(
                <void**>&self.x_gstamp, cap, sizeof(int32_t)) < 0:
            return self._fail(ERR_MEMORY, self.n_ls)
        memset(&self.x_gstamp[self.x_gcap], 0, (cap - self.x_gcap) * sizeof(int32_t))
        self.x_gcap = cap
        return 0

    cdef void _cx_account(self) noexcept nogil:
        """``cx_bytes`` from the capacities of the mask tables' arrays."""
        self.cx_bytes = (self.cx_cap * (8 + 4 + 8 + 4 + 4 + 1) + arena_bytes(&self.cx_wa)
                         + self.cx_s_cap * (4 + sizeof(word_t)) + self.g_cap * (4 + 1 + 8 + 4 + 8 + 4)
                         + self.nd_cap * 8 + (self.ch_index.cap + self.cx_root.cap + self.nl_index.cap + self.dr_index.cap) * 16)

    @property
    def contexts(self):
        """Contexts of the mask tables."""
        return self.cx_n

    def candidate_start(self, int32_t S):
        """The lexer state of LR state ``S``'s candidate lexemes (the one the making ahead
        assumes after a lexeme shifted into ``S``)."""
        if S < 0 or S >= self.n_states:
            raise IndexError(f"LR state {S} out of range [0, {self.n_states})")
        x = self.start_state(&self.cand_lex[self.cand_off[S]], self.cand_off[S + 1] - self.cand_off[S])
        if x == LS_ERROR:
            self.raise_error()
        return x

    def root(self, int32_t x):
        """The root context of lexer state ``x``, or None when none is made."""
        cdef int32_t c = i64map_get(&self.cx_root, x) if x >= 0 else -1
        return None if c < 0 else c

    def context(self, int32_t c):
        """Context ``c`` as a dict: its row (``dense``, ``tokens``, ``pairs``: the (word,
        bits) pairs of a sparse row) and its groups, each ``(lexer state the lexeme ends
        in, skip lexeme, trie nodes)``."""
        if c < 0 or c >= self.cx_n:
            raise IndexError(f"context {c} out of range [0, {self.cx_n})")
        cdef int32_t g
        return {
            "dense": self.cx_rlen[c] < 0, "tokens": self.cx_cnt[c], "pairs": max(0, self.cx_rlen[c]),
            "groups": [(self.g_q[g], bool(self.g_skip[g]), self.g_nn[g])
                       for g in range(self.cx_goff[c], self.cx_goff[c] + self.cx_gn[c])],
        }

    def child(self, int32_t c, int32_t i, int32_t s):
        """The child context of context ``c``'s ``i``-th group after the boundary from
        lexer state ``s``, or None when none is made."""
        if c < 0 or c >= self.cx_n or i < 0 or i >= self.cx_gn[c]:
            raise IndexError(f"no group {i} of context {c}")
        cdef int32_t ch = self.child_of(self.cx_goff[c] + i, s)
        return None if ch < 0 else ch

    @property
    def roots(self):
        """Lexer states with a root context."""
        return self.cx_root.n

    @property
    def groups(self):
        """Boundary groups of the mask tables' contexts."""
        return self.g_n

    @property
    def store_entries(self):
        """Masks in the store."""
        return self.st_n


cdef class GLRParser(EarleyParser):
    """One sequence's parse: :class:`EarleyParser` with LR rows (see the module doc)."""

    def __cinit__(self, ParserTables tables not None, *args, **kwargs):
        if not isinstance(tables, GLRTables):
            raise TypeError("GLRParser needs GLRTables")
        self.G = <GLRTables>tables
        self.by_state = <int32_t*>malloc(max(1, self.G.n_states) * sizeof(int32_t))
        if self.by_state == NULL:
            raise MemoryError()
        memset(self.by_state, 0xFF, max(1, self.G.n_states) * sizeof(int32_t))  # -1
        self.track_base = -1
        self.prev_ls = -1

    def __init__(self, ParserTables tables not None, bint _empty=False, bint use_cache=True):
        EarleyParser.__init__(self, tables, _empty, use_cache)

    def __dealloc__(self):
        free(self.vn_state); free(self.vn_orig); free(self.vn_edge); free(self.vn_mat)
        free(self.vn_stk); free(self.vn_inq); free(self.vn_mk)
        free(self.ve_to); free(self.ve_next); free(self.by_state)
        free(self.fr_a); free(self.fr_b); free(self.sh_state); free(self.sh_from); free(self.chain)
        free(self.lin_vs); free(self.lin_h); free(self.lin_vn); free(self.kw_stk)

    # ------------------------------------------------------------ arena --

    cdef int32_t _put(self, int32_t dr, int32_t origin) noexcept nogil:
        """Append an item to the open row (``EarleyParser._append``, its limits): its
        index, or -1."""
        if self._append(dr, origin) < 0:
            return -1
        return <int32_t>(self.n_items - 1)

    # ------------------------------------------------------------- view --

    cdef int _view_reset(self, int32_t j) noexcept nogil:
        """The view of the top level: a node per header of row ``j`` (not the headers of
        the level below it that the row holds)."""
        cdef int64_t k, end
        cdef int32_t v, dr
        for v in range(self.n_vn):
            self.by_state[self.vn_state[v]] = -1
        self.n_vn = 0
        self.n_ve = 0
        k = self.row_beg[j]
        end = self.row_beg[j + 1] if j + 1 < self.n_rows else self.n_items
        while k < end:
            dr = self.items[k].dr
            if not (dr & VIRT):
                if self._vn_new(dr, <int32_t>k) < 0:
                    return -1
            k += 1 + self.items[k].origin
        return 0

    cdef int _vn_new(self, int32_t state, int32_t orig) noexcept nogil:
        cdef int64_t cap = self.cap_vn
        cdef int32_t v = self.n_vn
        if v + 1 > cap:
            if (grow(<void**>&self.vn_state, &cap, v + 1, sizeof(int32_t)) < 0
                    or resize(<void**>&self.vn_orig, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.vn_edge, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.vn_mat, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.vn_inq, cap, 1) < 0
                    or resize(<void**>&self.vn_mk, cap, 1) < 0):
                return self.T._fail(ERR_MEMORY, v + 1)
            self.cap_vn = <int32_t>cap
        if v + self.n_ve + 1 > self.T.max_row_items:  # the level a scan reduces in: its nodes and edges
            return self.T._fail(ERR_MAX_ROW_ITEMS, v + self.n_ve + 1)
        self.vn_state[v] = state
        self.vn_orig[v] = orig
        self.vn_edge[v] = -1
        self.vn_mat[v] = -1
        self.vn_inq[v] = 0
        self.by_state[state] = v
        self.n_vn += 1
        return v

    cdef bint _vn_has_edge(self, int32_t v, int32_t ref) noexcept nogil:
        cdef int32_t h = self.vn_orig[v], e, i
        if h >= 0 and ref >= 0:
            for i in range(self.items[h].origin):
                if self.items[h + 1 + i].origin == ref:
                    return True
        e = self.vn_edge[v]
        while e >= 0:
            if self.ve_to[e] == ref:
                return True
            e = self.ve_next[e]
        return False

    cdef int _vn_add_edge(self, int32_t v, int32_t ref) noexcept nogil:
        cdef int64_t cap = self.cap_ve
        cdef int32_t e = self.n_ve
        if e + 1 > cap:
            if (grow(<void**>&self.ve_to, &cap, e + 1, sizeof(int32_t)) < 0
                    or resize(<void**>&self.ve_next, cap, sizeof(int32_t)) < 0):
                return self.T._fail(ERR_MEMORY, e + 1)
            self.cap_ve = <int32_t>cap
        if self.n_vn + e + 1 > self.T.max_row_items:
            return self.T._fail(ERR_MAX_ROW_ITEMS, self.n_vn + e + 1)
        self.ve_to[e] = ref
        self.ve_next[e] = self.vn_edge[v]
        self.vn_edge[v] = e
        self.n_ve += 1
        return 0

    cdef int32_t _ref_state(self, int32_t ref) noexcept nogil:
        """The LR state of a node: a header (>= 0) or a view node (-(v + 2))."""
        if ref >= 0:
            return self.items[ref].dr & ~VIRT
        return self.vn_state[-(ref + 2)]

    cdef int _ancestors(self, int32_t ref, int32_t m, int32_t* n_out) noexcept nogil:
        """The nodes ``m`` edges below ``ref``, each once, into ``fr_a[:n_out]``: 0 or -1."""
        cdef int32_t n = 1, nb, i, k, t, v, e, h, step
        cdef int64_t cap
        cdef int32_t* tmp
        if self.cap_fr < 1:
            cap = self.cap_fr
            if grow(<void**>&self.fr_a, &cap, 16, sizeof(int32_t)) < 0 or resize(<void**>&self.fr_b, cap,
                                                                              sizeof(int32_t)) < 0:
                return self.T._fail(ERR_MEMORY, 16)
            self.cap_fr = <int32_t>cap
        self.fr_a[0] = ref
        for step in range(m):
            nb = 0
            for i in range(n):
                t = self.fr_a[i]
                if t >= 0:  # a header: its edges follow it
                    for k in range(self.items[t].origin):
                        if self._frontier_add(self.items[t + 1 + k].origin, &nb) < 0:
                            return -1
                else:
                    v = -(t + 2)
                    h = self.vn_orig[v]
                    if h >= 0:
                        for k in range(self.items[h].origin):
                            if self._frontier_add(self.items[h + 1 + k].origin, &nb) < 0:
                                return -1
                    e = self.vn_edge[v]
                    while e >= 0:
                        if self._frontier_add(self.ve_to[e], &nb) < 0:
                            return -1
                        e = self.ve_next[e]
            tmp = self.fr_a
            self.fr_a = self.fr_b
            self.fr_b = tmp
            n = nb
            if self.T._spend(n) < 0:
                return -1
        n_out[0] = n
        return 0

    cdef inline int _frontier_add(self, int32_t ref, int32_t* nb) noexcept nogil:
        """Add ``ref`` to ``fr_b`` unless it is there (the frontiers are small)."""
        cdef int32_t i
        cdef int64_t cap
        if 0 <= ref < self.track_base and ref < self.track_min:
            self.track_min = ref  # a node of the stack the fill began on, read
        for i in range(nb[0]):
            if self.fr_b[i] == ref:
                return 0
        if nb[0] + 1 > self.cap_fr:
            cap = self.cap_fr
            if grow(<void**>&self.fr_b, &cap, nb[0] + 1, sizeof(int32_t)) < 0 or resize(
                    <void**>&self.fr_a, cap, sizeof(int32_t)) < 0:
                return self.T._fail(ERR_MEMORY, nb[0] + 1)
            self.cap_fr = <int32_t>cap
        self.fr_b[nb[0]] = ref
        nb[0] += 1
        return 0

    cdef int _reduce(self, int32_t la) noexcept nogil:
        """Every reduction on lookahead ``la`` in the view, to a fixpoint: 0 or -1.

        A worklist: a new view node's reductions are made along every path down from it;
        an edge added to a node, only along the paths that start with that edge (a
        right-recursive list that ends reduces once per element, not once per element
        and path), since a path down from a node runs along its own edges into the level
        below, which a reduction does not change.  Once a view node has an edge to
        another (an empty production's), a path can run through the other: an edge added
        to a node makes again every path of the nodes above it (:meth:`_requeue_above`).
        So a reduction follows a path once, close to RNGLR (Scott and Johnstone, 2006)."""
        cdef int32_t i, r, p, a, n, k, e, t, v, s, first, m
        cdef int64_t sn = 0
        cdef bint via_view = False
        for i in range(self.n_vn):
            if self._wl_push(&sn, i, NO_EDGE) < 0:
                return -1
            self.vn_inq[i] = 1
        while sn > 0:
            sn -= 1
            i = self.vn_stk[2 * sn]
            first = self.vn_stk[2 * sn + 1]
            if first == NO_EDGE:
                self.vn_inq[i] = 0
            s = self.vn_state[i]
            r = self.G.reductions_from(s, la)
            while r < self.G.rd_off[s + 1] and self.G.rd_la[r] == la:
                p = self.G.rd_prod[r]
                r += 1
                a = self.G.prod_lhs[p]
                if a < 0:
                    continue  # the augmented production: acceptance, read by the close
                m = self.G.prod_len[p]
                if first == NO_EDGE:
                    if self._ancestors(-(i + 2), m, &n) < 0:
                        return -1
                elif m == 0:
                    continue  # (made when the node was: no edge read)
                else:
                    if 0 <= first < self.track_base and first < self.track_min:
                        self.track_min = first
                    if self._ancestors(first, m - 1, &n) < 0:
                        return -1
                self.reductions += 1
                for k in range(n):
                    e = self.fr_a[k]
                    t = self.G.goto(self._ref_state(e), a)
                    if t < 0:
                        continue  # (a reduction's goto always exists in an LR automaton)
                    v = self.by_state[t]
                    if v < 0:
                        v = self._vn_new(t, -1)
                        if v < 0 or self._vn_add_edge(v, e) < 0 or self._wl_push(&sn, v, NO_EDGE) < 0:
                            return -1
                        self.vn_inq[v] = 1
                    elif not self._vn_has_edge(v, e):
                        if self._vn_add_edge(v, e) < 0:
                            return -1
                        if e >= 0:
                            if not self.vn_inq[v] and self._wl_push(&sn, v, e) < 0:
                                return -1
                        elif not self.vn_inq[v]:  # (a path from v through a view node: all again)
                            if self._wl_push(&sn, v, NO_EDGE) < 0:
                                return -1
                            self.vn_inq[v] = 1
                        if via_view and self._requeue_above(v, &sn) < 0:
                            return -1
                    if e < 0:
                        via_view = True
        return 0

    cdef int _requeue_above(self, int32_t v, int64_t* sn) noexcept nogil:
        """Queue for all their paths the view nodes whose paths can run through view node
        ``v`` (an edge to it, or to such a node), which just took an edge: 0, -1."""
        cdef int32_t u, e
        cdef bint more = True
        for u in range(self.n_vn):
            self.vn_mk[u] = 0
        self.vn_mk[v] = 1
        while more:  # (a pass per level of view edges, counted as steps: max_steps bounds it)
            if self.T._spend(self.n_vn) < 0:
                return -1
            more = False
            for u in range(self.n_vn):
                if self.vn_mk[u]:
                    continue
                e = self.vn_edge[u]
                while e >= 0:
                    if self.ve_to[e] < 0 and self.vn_mk[-(self.ve_to[e] + 2)]:
                        self.vn_mk[u] = 1
                        more = True
                        if not self.vn_inq[u]:
                            if self._wl_push(sn, u, NO_EDGE) < 0:
                                return -1
                            self.vn_inq[u] = 1
                        break
                    e = self.ve_next[e]
        return 0

    cdef int _wl_push(self, int64_t* sn, int32_t v, int32_t first) noexcept nogil:
        """Push (view node, first edge or NO_EDGE) on :meth:`_reduce`'s worklist: 0, -1."""
        cdef int64_t cap = self.cap_stk
        if 2 * (sn[0] + 1) > cap:
            if grow(<void**>&self.vn_stk, &cap, 2 * (sn[0] + 1), sizeof(int32_t)) < 0:
                return self.T._fail(ERR_MEMORY, sn[0] + 1)
            self.cap_stk = cap
        self.vn_stk[2 * sn[0]] = v
        self.vn_stk[2 * sn[0] + 1] = first
        sn[0] += 1
        return 0

    cdef int _shifts_on(self, int32_t la) noexcept nogil:
        """Whether some view node shifts ``la``."""
        cdef int32_t v
        for v in range(self.n_vn):
            if self.G.shift(self.vn_state[v], la) >= 0:
                return 1
        return 0

    cdef int32_t _materialize(self, int32_t v) noexcept nogil:
        """View node ``v`` as a header of the arena: its own header when the view added
        nothing to it, else a ``VIRT`` header written now (its edges' view nodes too)."""
        cdef int32_t h, n, k, e, ref, slot, i
        cdef int32_t orig = self.vn_orig[v]
        if self.vn_mat[v] >= 0:
            return self.vn_mat[v]
        if orig >= 0 and self.vn_edge[v] < 0:
            self.vn_mat[v] = orig
            return orig
        n = self.items[orig].origin if orig >= 0 else 0
        e = self.vn_edge[v]
        while e >= 0:
            n += 1
            e = self.ve_next[e]
        h = self._put(self.vn_state[v] | VIRT, n)
        if h < 0:
            return -1
        for i in range(n):  # the edge slots, filled below (a target may be written after them)
            if self._put(EDGE, -1) < 0:
                return -1
        self.vn_mat[v] = h
        slot = h + 1
        if orig >= 0:
            for i in range(self.items[orig].origin):
                self.items[slot].origin = self.items[orig + 1 + i].origin
                slot += 1
        e = self.vn_edge[v]
        while e >= 0:
            ref = self.ve_to[e]
            if ref < 0:
                ref = self._materialize(-(ref + 2))
                if ref < 0:
                    return -1
            self.items[slot].origin = ref
            slot += 1
            e = self.ve_next[e]
        return h

    # ------------------------------------------------------------- rows --

    cdef int _start(self) noexcept nogil:
        if self._new_row() < 0 or self._put(0, 0) < 0:  # the bottom node: state 0, no edges
            return -1
        if self._lr_close_row() < 0:
            return -1
        self.ls = self.row_ls[0]
        self.fresh = True
        return 0

    cdef int _scan(self, state_t x) noexcept nogil:
        """Push the row after the lexemes lexer state x accepts; -1 on a limit."""
        cdef int32_t j = self.n_rows - 1, off = self.T.ls_acc_off[x], n_acc = self.T.ls_acc_len[x]
        cdef int32_t i, l, v, t, h, a, b, cnt, tmp_s, tmp_f
        cdef int64_t cap
        if self._kept_row(x):
            return 0
        if self._new_row() < 0:
            return -1
        self.n_sh = 0
        for i in range(n_acc):
            l = self.T.acc_pool[off + i]
            if self._view_reset(j) < 0 or self._reduce(l) < 0:
                return -1
            for v in range(self.n_vn):
                t = self.G.shift(self.vn_state[v], l)
                if t < 0:
                    continue
                h = self._materialize(v)
                if h < 0:
                    return -1
                if self.n_sh + 1 > self.cap_sh:
                    cap = self.cap_sh
                    if grow(<void**>&self.sh_state, &cap, self.n_sh + 1, sizeof(int32_t)) < 0 or resize(
                            <void**>&self.sh_from, cap, sizeof(int32_t)) < 0:
                        return self.T._fail(ERR_MEMORY, self.n_sh + 1)
                    self.cap_sh = <int32_t>cap
                self.sh_state[self.n_sh] = t
                self.sh_from[self.n_sh] = h
                self.n_sh += 1
        # the row's nodes: one per target state, an edge per node shifted from (sorted,
        # then runs of one state; duplicates dropped)
        for a in range(1, self.n_sh):
            tmp_s, tmp_f = self.sh_state[a], self.sh_from[a]
            b = a - 1
            while b >= 0 and (self.sh_state[b] > tmp_s or (self.sh_state[b] == tmp_s and self.sh_from[b] > tmp_f)):
                self.sh_state[b + 1] = self.sh_state[b]
                self.sh_from[b + 1] = self.sh_from[b]
                b -= 1
            self.sh_state[b + 1] = tmp_s
            self.sh_from[b + 1] = tmp_f
        a = 0
        while a < self.n_sh:
            b = a
            cnt = 0
            while b < self.n_sh and self.sh_state[b] == self.sh_state[a]:
                if b == a or self.sh_from[b] != self.sh_from[b - 1]:
                    cnt += 1
                b += 1
            if self._put(self.sh_state[a], cnt) < 0:
                return -1
            for i in range(a, b):
                if i == a or self.sh_from[i] != self.sh_from[i - 1]:
                    if self._put(EDGE, self.sh_from[i]) < 0:
                        return -1
            a = b
        self.row_key[j + 1] = x
        return self._lr_close_row()

    cdef int _lr_close_row(self) noexcept nogil:
        """The open row's allowed lexemes (their lexer state) and acceptance."""
        cdef int32_t j = self.n_rows - 1, n_allowed = 0, c, s, r, v, k
        cdef int64_t h
        cdef bint ok
        cdef uint8_t acc = 0
        cdef state_t start
        self.T.stamp += 1
        if self._view_reset(j) < 0:
            return -1
        # the view of the plain row, kept while the candidates are tried: headers only
        h = self.row_beg[j]
        while h < self.n_items:
            s = self.items[h].dr
            if not (s & VIRT):
                for k in range(self.G.cand_off[s], self.G.cand_off[s + 1]):
                    c = self.G.cand_lex[k]
                    if self.T.allow_stamp[c] == self.T.stamp:
                        continue
                    self.T.allow_stamp[c] = self.T.stamp
                    ok = self.G.cand_safe[k] or self._row_shifts(j, c)  # (safe: allowed whatever the stack)
                    if not ok:
                        if self._view_reset(j) < 0 or self._reduce(c) < 0:
                            return -1
                        ok = self._shifts_on(c)
                    if ok:
                        self.T.allowed[n_allowed] = c
                        n_allowed += 1
            h += 1 + self.items[h].origin
        # the end: accepted when a node's state accepts whatever its stack, refused when no
        # node has an action on it, else tried in the view
        h = self.row_beg[j]
        k = 0  # nodes with an action on the end
        while h < self.n_items and not acc:
            s = self.items[h].dr
            if not (s & VIRT):
                acc = self.G.acc_safe[s]
                k += self.G.acc_any[s]
            h += 1 + self.items[h].origin
        if k and not acc:
            if self._view_reset(j) < 0 or self._reduce(self.G.n_term) < 0:
                return -1
            for v in range(self.n_vn):
                s = self.vn_state[v]
                r = self.G.reductions_from(s, self.G.n_term)
                while r < self.G.rd_off[s + 1] and self.G.rd_la[r] == self.G.n_term:
                    if self.G.prod_lhs[self.G.rd_prod[r]] < 0:
                        acc = 1
                    r += 1
        start = self.T.allowed_start(n_allowed)
        if start == LS_ERROR:
            return -1
        self.row_ls[j] = start
        self.row_acc[j] = acc
        self.row_beg[j + 1] = <int32_t>self.n_items
        self.rows_valid = j + 1
        return 0

    cdef bint _row_shifts(self, int32_t j, int32_t c) noexcept nogil:
        """Whether a node of row ``j`` (open) shifts lexeme ``c`` as it is."""
        cdef int64_t h = self.row_beg[j]
        cdef int32_t s
        while h < self.n_items:
            s = self.items[h].dr
            if not (s & VIRT) and self.G.shift(s, c) >= 0:
                return True
            h += 1 + self.items[h].origin
        return False

    # ------------------------------------------------------------ store --

    def set_walk(self, TokenTrie trie not None, SliceSet slices=None):
        """:meth:`EarleyParser.set_walk`; the first walk set on the grammar's tables is the
        one its mask tables are made over (a parser walking another walks every mask)."""
        cdef TokenTrie tt
        cdef int32_t k, n
        EarleyParser.set_walk(self, trie, slices)
        if self.G.cx_trie is None and self.G.max_cx_bytes > 0:
            # the tries _cx_trie numbers: the slices', the rest's, the whole vocabulary's
            tries = ([] if self.walk_slices is None else list(self.walk_slices.tries)) + [trie]
            n = len(tries)
            self.G.kw_off = <const int32_t**>calloc(n, sizeof(int32_t*))
            self.G.kw_node = <const int32_t**>calloc(n, sizeof(int32_t*))
            self.G.kw_byte = <const uint8_t**>calloc(n, sizeof(uint8_t*))
            if self.G.kw_off == NULL or self.G.kw_node == NULL or self.G.kw_byte == NULL:
                raise MemoryError()
            for k in range(n):
                tt = tries[k]
                tt.child_index()  # (kept by the trie, which outlives the tables through cx_trie/cx_slices)
                self.G.kw_off[k], self.G.kw_node[k], self.G.kw_byte[k] = tt.kid_off, tt.kid_node, tt.kid_byte
            self.G.cx_trie = trie
            self.G.cx_slices = self.walk_slices
            self.G.cx_words = (trie.vocab_size + 31) // 32
            arena_init(&self.G.cx_wa, sizeof(word_t), 16 * <int64_t>self.G.cx_words)
            if self.G._horizon_init(trie.max_depth) < 0:
                self.T.raise_error()
        self.cx_ok = self.G.max_cx_bytes > 0 and self.G.cx_trie is trie and self.G.cx_slices is self.walk_slices
        if self.cx_ok and resize(<void**>&self.kw_stk, 2 * (self.st_cap + 1), sizeof(int32_t)) < 0:
            raise MemoryError()

    cdef void _clean(self, word_t* mask) noexcept nogil:
        """Zero the mask if :meth:`c_fill_over` left it unwritten (a path that ORs)."""
        if self.dirty > 0:
            memset(mask, 0, self.dirty * sizeof(word_t))
            self.dirty = 0

    cdef int c_fill_over(self, word_t* mask, int32_t n_words) noexcept nogil:
        """:meth:`c_fill` into a row whose words are garbage: the mask's first row (a
        stored mask, the root context's dense row) is copied over it, where zeroing the
        row and ORing it in wrote it twice; a path that ORs zeroes it first."""
        cdef int r
        self.dirty = n_words
        r = self.c_fill(mask, n_words)
        self._clean(mask)  # (nothing written: no token, or an error)
        return r

    cdef int c_fill(self, word_t* mask, int32_t n_words) noexcept nogil:
        """A copy of the mask cache's when it was made in this lexer state and rows
        (``EarleyParser``'s cache, which a mask from the tables joins the second time in
        a row it is asked for there); else the mask from the grammar's store when a
        stored one was made from what this stack shows (the lexer state, the top row's
        start state, the LR states down to the depth that fill read); else from the mask
        tables (the lexer state's context and a scan per boundary group), stored; else,
        the tables full, llguidance's walk, stored (see the module doc)."""
        cdef int32_t e, w, c, made
        cdef int r
        cdef int64_t hits, cnt = 0, cost, top_id
        cdef const word_t* stored
        cdef bint keep
        if self.walk_trie is None:
            self._clean(mask)
            return EarleyParser.c_fill(self, mask, n_words)
        top_id = self.row_id[self.n_rows - 1]
        if self.use_cache and self.cache_ls == self.ls and self.cache_row == top_id and self.cache_words == n_words:
            # the mask of the lexer state and rows of the last fills (EarleyParser's cache:
            # inside a lexeme, as a string's, token after token)
            if self.dirty > 0:
                memcpy(mask, self.cache_mask, n_words * sizeof(word_t))
                self.dirty = 0
            else:
                or_words(mask, self.cache_mask, n_words)
            self.cache_hits += 1
            self.work.tokens_cached += self.walk_trie.num_tokens
            self.last_visited = 0
            self.fill_count = self.cache_count
            return self.cache_sliced
        # a second fill with the last one's key (and the mask its own: written over)
        # keeps its mask for the next: a copy only where the state repeats
        keep = self.use_cache and self.dirty > 0 and self.prev_ls == self.ls and self.prev_row == top_id
        self.prev_ls = self.ls
        self.prev_row = top_id
        if self.G.max_store_bytes > 0 and n_words == self.G.st_words:
            e = self._store_lookup()
            if e >= 0:
                stored = <const word_t*>arena_at(&self.G.st_ma, self.G.st_moff[e])
                if self.dirty > 0:
                    memcpy(mask, stored, n_words * sizeof(word_t))
                    self.dirty = 0
                else:
                    or_words(mask, stored, n_words)
                self.G.store_hits += 1
                self.work.tokens_cached += self.walk_trie.num_tokens
                self.last_visited = 0
                self.fill_count = self.G.st_count[e]
                return self.G.st_sliced[e]
        # rows kept from before (built, truncated) were read by another operation: made
        # again, so that every read of the stack below is this fill's, seen by track_min
        self.rows_valid = self.n_rows
        self.track_base = self.n_items
        self.track_min = self.n_items
        if self.cx_ok and n_words >= self.G.cx_words and self.G.cx_bytes < self.G.max_cx_bytes:
            self.T.steps = 0
            self.last_visited = 0
            if self.G.sets.len[self.ls] == 0:  # no lexeme can start or go on: no token
                self.track_base = -1
                self.fill_count = 0
                self.G.cx_fills += 1
                return 0
            c = self._root_of(self.ls)
            r = -1
            made = self.G.cx_n
            cost = self.G.cx_rows + STORE_SCAN_ROWS * (self.G.cx_scans + self.G.cx_walked)
            if c >= 0:
                r = self._cx_fill(c, mask, &cnt, False)
            self.track_base = -1
            self.T.note_steps()
            if r < 0:
                return -1
            self.G.cx_fills += 1
            self.work.tokens_cached += cnt
            self.fill_count = cnt
            r = self.G.cx_sliced[c]
            cost = self.G.cx_rows + STORE_SCAN_ROWS * (self.G.cx_scans + self.G.cx_walked) - cost
            if keep and self.dirty == 0 and self._cache_keep(mask, n_words, r == 1, cnt) < 0:
                return -1
            if self.G.cx_n == made and cost < self.G.store_min_rows:
                return r  # (a few rows: cheaper made again than stored)
        else:
            if self.G.max_cx_bytes > 0:
                self.G.cx_walks += 1
            hits = self.cache_hits
            self._clean(mask)
            r = EarleyParser.c_fill(self, mask, n_words)
            self.track_base = -1
            if r < 0 or self.cache_hits != hits:
                return r  # (a copy of the parser's own last mask: what it read is not known)
            cnt = -1
        if self.G.max_store_bytes > 0 and self._store_insert(mask, n_words, r == 1, cnt) < 0:
            return -1
        return r

    cdef int _cache_keep(self, const word_t* mask, int32_t n_words, bint sliced, int64_t count) noexcept nogil:
        """Keep ``mask``, made in this lexer state and rows, in EarleyParser's cache: 0, -1."""
        if self._cache_room(n_words) < 0:
            return -1
        memcpy(self.cache_mask, mask, n_words * sizeof(word_t))
        self.cache_ls = self.ls
        self.cache_row = self.row_id[self.n_rows - 1]
        self.cache_sliced = sliced
        self.cache_count = count
        return 0

    # ------------------------------------------------------- mask tables --

    cdef int _cx_trie(self, int32_t k, const TrieNode** nodes, const token_t** ids) noexcept nogil:
        """Trie ``k`` of the contexts' nodes: slice ``k``'s (``k`` < ns), the rest's
        (``k`` == ns), or (ns + 1) the whole vocabulary's; its node count."""
        if self.walk_slices is not None and k <= self.walk_slices.n:
            nodes[0] = self.walk_slices.t_nodes[k]
            ids[0] = self.walk_slices.t_ids[k]
            return self.walk_slices.t_num[k]
        nodes[0] = self.walk_trie.nodes
        ids[0] = self.walk_trie.token_ids
        return self.walk_trie.num_nodes

    cdef int _cx_walk(self, int32_t k, int32_t p, state_t q0, int64_t* cnt) noexcept nogil:
        """The subtrees of node ``p``'s children in trie ``k`` (``p`` in lexer state ``q0``;
        0: the whole trie): the tokens whose bytes stay in the lexeme into the making's row,
        a node whose byte ends the lexeme (one accepts) into its boundaries; 0 or -1 (a
        limit).  Depth first in the trie's order, over its child index: a child's byte is
        read from its parent's list, so a dead child (most of them: 840 of 854 nodes in a
        root made at a mask) costs no read of its record, which lies a subtree away."""
        cdef const TrieNode* nodes
        cdef const token_t* ids
        cdef const int32_t* koff = self.G.kw_off[k]
        cdef const int32_t* knode = self.G.kw_node[k]
        cdef const uint8_t* kbyte = self.G.kw_byte[k]
        cdef int32_t depth = 0, i, e, c
        cdef state_t y, parent
        cdef token_t t
        cdef const TrieNode* node
        cdef state_t* st = self.st_ls
        cdef int32_t* stk = self.kw_stk
        cdef int64_t cap, visited = 0
        cdef word_t* row = self.G.x_row
        self._cx_trie(k, &nodes, &ids)
        st[0] = q0
        stk[0] = koff[p]
        stk[1] = koff[p + 1]
        while depth >= 0:
            i = stk[2 * depth]
            if i == stk[2 * depth + 1]:
                depth -= 1
                continue
            stk[2 * depth] = i + 1
            parent = st[depth]
            visited += 1
            y = self.G.ls_trans[<int64_t>parent * BYTES + kbyte[i]]
            if y == MISSING:
                y = self.G.step(parent, kbyte[i])
            if y < 0:
                if y == LS_ERROR:
                    return -1
                if (self.G.ls_flags[parent] & F_SKIP_ACC) or self.G.ls_acc_len[parent] > 0:
                    if self.G.x_bn + 1 > self.G.x_bcap:
                        cap = self.G.x_bcap
                        if (grow(<void**>&self.G.x_bq, &cap, self.G.x_bn + 1, sizeof(state_t)) < 0
                                or resize(<void**>&self.G.x_bk, cap, sizeof(int32_t)) < 0
                                or resize(<void**>&self.G.x_bi, cap, sizeof(int32_t)) < 0):
                            return self.G._fail(ERR_MEMORY, self.G.x_bn + 1)
                        self.G.x_bcap = cap
                    self.G.x_bq[self.G.x_bn] = parent
                    self.G.x_bk[self.G.x_bn] = k | (<int32_t>kbyte[i] << 8)
                    self.G.x_bi[self.G.x_bn] = knode[i]
                    self.G.x_bn += 1
                continue
            c = knode[i]
            node = &nodes[c]
            e = node.token_start + node.token_count
            for i in range(node.token_start, e):
                t = ids[i]
                row[t >> 5] |= (<word_t>1) << (t & 31)
                if cnt[0] < X_TOKENS:
                    self.G.x_tok[cnt[0]] = t
                cnt[0] += 1
            if self.G.x_collect and node.token_count and self._queue_root(y) < 0:
                return -1
            if node.subtree_size > 1:
                depth += 1
                st[depth] = y
                stk[2 * depth] = koff[c]
                stk[2 * depth + 1] = koff[c + 1]
        self.work.trie_nodes += visited
        self.work.lexer_steps += visited
        self.G.cx_nodes += visited
        return 0

    cdef int32_t _cx_make(self, state_t s, int32_t parent_g) noexcept nogil:
        """A new context: the tokens from lexer state ``s`` (``parent_g`` -1: every token,
        ``s`` the lexer state at the mask; else group ``parent_g``'s nodes, each node's byte
        the first of the lexeme after the boundary, ``s`` its start state).  Its id, or -1."""
        cdef int32_t nw = self.G.cx_words, ns = 0 if self.walk_slices is None else self.walk_slices.n
        cdef int32_t k, n, w, nz = 0, c, g, g0, q, m
        cdef int64_t cnt = 0, bits = 0, b, off, pos, j, key
        cdef const TrieNode* nodes
        cdef const token_t* ids
        cdef const word_t* smask
        cdef state_t y
        cdef uint8_t sliced = 0
        cdef int64_t cap
        if self.G.x_row == NULL:
            self.G.x_row = <word_t*>malloc(max(1, nw) * sizeof(word_t))
            self.G.x_tok = <int32_t*>malloc(X_TOKENS * sizeof(int32_t))
            if self.G.x_row == NULL or self.G.x_tok == NULL:
                return self.G._fail(ERR_MEMORY, nw)
            memset(self.G.x_row, 0, nw * sizeof(word_t))
        self.G.x_bn = 0
        if parent_g < 0:
            if ns > 0:
                bits = self.G.slice_bits(s, self.walk_slices)
                if bits < 0:
                    return -1
            if bits != 0:
                sliced = 1
                for k in range(ns + 1):
                    if k < ns and (bits >> k) & 1:
                        smask = self.walk_slices.masks[k]
                        for w in range(self.walk_slices.n_words):
                            self.G.x_row[w] = self.G.x_row[w] | smask[w]
                        cnt += self.walk_slices.n_tokens[k]  # (a mask counts them cached, as the row's)
                        if self.G.x_collect and self._collect_slice(k, s) < 0:
                            return -1
                        continue
                    if self._cx_walk(k, 0, s, &cnt) < 0:
                        return -1
            else:
                if self._cx_walk(ns + 1, 0, s, &cnt) < 0:
                    return -1
        else:
            for j in range(self.G.g_noff[parent_g], self.G.g_noff[parent_g] + self.G.g_nn[parent_g]):
                b = self.G.nd_k[j] >> 8
                y = self.G.ls_trans[<int64_t>s * BYTES + b]
                if y == MISSING:
                    y = self.G.step(s, <uint8_t>b)
                if y == LS_ERROR:
                    return -1
                if y < 0:
                    continue  # the byte starts no lexeme allowed after the boundary
                k = self.G.nd_k[j] & 0xFF
                self._cx_trie(k, &nodes, &ids)
                n = self.G.nd_i[j]
                for w in range(nodes[n].token_start, nodes[n].token_start + nodes[n].token_count):
                    self.G.x_row[ids[w] >> 5] = self.G.x_row[ids[w] >> 5] | ((<word_t>1) << (ids[w] & 31))
                    if cnt < X_TOKENS:
                        self.G.x_tok[cnt] = ids[w]
                    cnt += 1
                if self.G.x_collect and nodes[n].token_count and self._queue_root(y) < 0:
                    return -1
                if nodes[n].subtree_size > 1 and self._cx_walk(k, n, y, &cnt) < 0:
                    return -1
        # the context
        c = self.G.cx_n
        if c + 1 > self.G.cx_cap:
            cap = next_cap(self.G.cx_cap, c + 1)
            if (vgrow(<void**>&self.G.cx_roff, self.G.cx_cap, cap, 8) < 0
                    or vgrow(<void**>&self.G.cx_rlen, self.G.cx_cap, cap, 4) < 0
                    or vgrow(<void**>&self.G.cx_cnt, self.G.cx_cap, cap, 8) < 0
                    or vgrow(<void**>&self.G.cx_goff, self.G.cx_cap, cap, 4) < 0
                    or vgrow(<void**>&self.G.cx_gn, self.G.cx_cap, cap, 4) < 0
                    or vgrow(<void**>&self.G.cx_sliced, self.G.cx_cap, cap, 1) < 0):
                return self.G._fail(ERR_MEMORY, c + 1)
            self.G.cx_cap = <int32_t>cap
        # its row: dense, or (word, bits) pairs when a few words hold it (a row of a few
        # tokens is read from their list: no pass over the row's words)
        self.G.cx_cnt[c] = cnt
        self.G.cx_sliced[c] = sliced
        if sliced or not (cnt <= X_TOKENS and cnt * 8 < nw):  # (a slice's tokens are not listed)
            for w in range(nw):
                nz += self.G.x_row[w] != 0
        if nz * 8 >= nw:
            # a row met before is that row (a string's contents after most lexer states):
            # fewer bytes, and the few rows masks read most stay in the cache
            key = _row_key(self.G.x_row, nw)
            q = i64map_get(&self.G.dr_index, key)
            if q >= 0 and memcmp(arena_at(&self.G.cx_wa, self.G.cx_roff[q]), self.G.x_row, nw * sizeof(word_t)) == 0:
                off = self.G.cx_roff[q]
                self.G.rows_shared += 1
            else:
                off = arena_take(&self.G.cx_wa, nw)
                if off < 0:
                    return self.G._fail(ERR_MEMORY, self.G.cx_wa.n + nw)
                memcpy(arena_at(&self.G.cx_wa, off), self.G.x_row, nw * sizeof(word_t))
                if q < 0 and i64map_put(&self.G.dr_index, key, c) < 0:  # (a clash keeps the first)
                    return self.G._fail(ERR_MEMORY, self.G.dr_index.n)
            self.G.cx_roff[c] = off
            self.G.cx_rlen[c] = -1
            memset(self.G.x_row, 0, nw * sizeof(word_t))
        else:
            m = <int32_t>cnt if nz == 0 else nz  # the pairs at most
            if self.G.cx_s_n + m > self.G.cx_s_cap:
                cap = next_cap(self.G.cx_s_cap, self.G.cx_s_n + m)
                if (vgrow(<void**>&self.G.cx_si, self.G.cx_s_cap, cap, 4) < 0
                        or vgrow(<void**>&self.G.cx_sw, self.G.cx_s_cap, cap, sizeof(word_t)) < 0):
                    return self.G._fail(ERR_MEMORY, self.G.cx_s_n + m)
                self.G.cx_s_cap = cap
            self.G.cx_roff[c] = self.G.cx_s_n
            for j in range(cnt if nz == 0 else nw):
                w = self.G.x_tok[j] >> 5 if nz == 0 else <int32_t>j
                if self.G.x_row[w] != 0:  # (a listed token's word moves out at its first token)
                    self.G.cx_si[self.G.cx_s_n] = w
                    self.G.cx_sw[self.G.cx_s_n] = self.G.x_row[w]
                    self.G.cx_s_n += 1
                    self.G.x_row[w] = 0
            self.G.cx_rlen[c] = <int32_t>(self.G.cx_s_n - self.G.cx_roff[c])
        # its groups: the boundaries by the lexer state the lexeme ends in
        if self.G._stamps_reserve() < 0:
            return -1
        self.G.x_stamp += 1
        g0 = self.G.g_n
        for b in range(self.G.x_bn):
            q = self.G.x_bq[b]
            if self.G.x_gstamp[q] != self.G.x_stamp:
                self.G.x_gstamp[q] = self.G.x_stamp
                g = self.G.g_n
                if g + 1 > self.G.g_cap:
                    cap = next_cap(self.G.g_cap, g + 1)
                    if (vgrow(<void**>&self.G.g_q, self.G.g_cap, cap, sizeof(state_t)) < 0
                            or vgrow(<void**>&self.G.g_skip, self.G.g_cap, cap, 1) < 0
                            or vgrow(<void**>&self.G.g_noff, self.G.g_cap, cap, 8) < 0
                            or vgrow(<void**>&self.G.g_nn, self.G.g_cap, cap, 4) < 0
                            or vgrow(<void**>&self.G.g_c1, self.G.g_cap, cap, 8) < 0
                            or vgrow(<void**>&self.G.g_cn, self.G.g_cap, cap, 4) < 0):
                        return self.G._fail(ERR_MEMORY, g + 1)
                    self.G.g_cap = <int32_t>cap
                self.G.g_q[g] = q
                self.G.g_c1[g] = -1
                self.G.g_skip[g] = (self.G.ls_flags[q] & F_SKIP_ACC) != 0
                self.G.g_nn[g] = 0
                self.G.x_gat[q] = g
                self.G.g_n += 1
            self.G.g_nn[self.G.x_gat[q]] = self.G.g_nn[self.G.x_gat[q]] + 1
        off = self.G.nd_n
        for g in range(g0, self.G.g_n):
            self.G.g_noff[g] = off
            off += self.G.g_nn[g]
            self.G.g_nn[g] = 0
        if off > self.G.nd_cap:
            cap = next_cap(self.G.nd_cap, off)
            if (vgrow(<void**>&self.G.nd_k, self.G.nd_cap, cap, 4) < 0
                    or vgrow(<void**>&self.G.nd_i, self.G.nd_cap, cap, 4) < 0):
                return self.G._fail(ERR_MEMORY, off)
            self.G.nd_cap = cap
        for b in range(self.G.x_bn):
            g = self.G.x_gat[self.G.x_bq[b]]
            pos = self.G.g_noff[g] + self.G.g_nn[g]
            self.G.nd_k[pos] = self.G.x_bk[b]
            self.G.nd_i[pos] = self.G.x_bi[b]
            self.G.g_nn[g] = self.G.g_nn[g] + 1
        off = self._groups_intern(g0)
        if off < 0:  # (out of memory: the tables as they were, the error set)
            return -1
        self.G.nd_n = off
        self.G.cx_goff[c] = g0
        self.G.cx_gn[c] = self.G.g_n - g0
        self.G.cx_n += 1
        self.G._cx_account()
        return c

    cdef int64_t _groups_intern(self, int32_t g0) noexcept nogil:
        """Groups ``g0`` .. (the ones a making just wrote, their nodes from ``nd_n`` on)
        whose node list an older group has share that group's nodes (``g_cn``: its
        children too, since a child is the walk of its nodes from the state after the
        boundary); the others' nodes are packed from ``nd_n`` on.  The new ``nd_n``, or -1.
        """
        cdef int32_t g, h, n
        cdef int64_t j, w = self.G.nd_n, key
        cdef uint64_t hv
        for g in range(g0, self.G.g_n):
            n = self.G.g_nn[g]
            hv = <uint64_t>14695981039346656037ULL ^ <uint64_t>n
            for j in range(self.G.g_noff[g], self.G.g_noff[g] + n):
                hv = (hv ^ ((<uint64_t>self.G.nd_k[j] << 32) | <uint32_t>self.G.nd_i[j])) * <uint64_t>1099511628211ULL
                hv ^= hv >> 29
            key = <int64_t>hv
            h = i64map_get(&self.G.nl_index, key)
            if (h >= 0 and self.G.g_nn[h] == n
                    and memcmp(&self.G.nd_k[self.G.g_noff[h]], &self.G.nd_k[self.G.g_noff[g]], n * sizeof(int32_t)) == 0
                    and memcmp(&self.G.nd_i[self.G.g_noff[h]], &self.G.nd_i[self.G.g_noff[g]], n * sizeof(int32_t)) == 0):
                self.G.g_cn[g] = h
                self.G.g_noff[g] = self.G.g_noff[h]
                self.G.groups_shared += 1
                continue
            if h < 0 and i64map_put(&self.G.nl_index, key, g) < 0:  # (a hash taken by another list: not shared)
                return self.G._fail(ERR_MEMORY, self.G.nl_index.n + 1)
            self.G.g_cn[g] = g
            if w != self.G.g_noff[g]:
                memmove(&self.G.nd_k[w], &self.G.nd_k[self.G.g_noff[g]], n * sizeof(int32_t))
                memmove(&self.G.nd_i[w], &self.G.nd_i[self.G.g_noff[g]], n * sizeof(int32_t))
                self.G.g_noff[g] = w
            w += n
        return w

    cdef int32_t _root_of(self, state_t x) noexcept nogil:
        """Lexer state ``x``'s root context, made when missing: the one of its
        :meth:`GLRTables.horizon_rep` (a string of ``maxLength`` 32,767 has one root for
        the positions a token cannot carry to either end, not one per position).  -1 on
        an error."""
        cdef int32_t c = i64map_get(&self.G.cx_root, x)
        cdef state_t y
        if c >= 0:
            return c
        y = self.G.horizon_rep(x)
        if y == LS_ERROR:
            return -1
        if y != x:
            c = i64map_get(&self.G.cx_root, y)
            self.G.roots_shared += 1
        if c < 0:
            c = self._cx_make(y, -1)
            if c < 0:
                return -1
            if y != x and i64map_put(&self.G.cx_root, y, c) < 0:
                return self.T._fail(ERR_MEMORY, self.G.cx_n)
        if i64map_put(&self.G.cx_root, x, c) < 0:
            return self.T._fail(ERR_MEMORY, self.G.cx_n)
        return c

    cdef int _queue_root(self, state_t y) noexcept nogil:
        """Queue lexer state ``y`` for a root context (the making ahead): 0 or -1."""
        cdef int64_t cap
        if y >= self.G.x_enq_cap:
            cap = self.G.x_enq_cap
            if grow(<void**>&self.G.x_enq, &cap, y + 1, sizeof(uint8_t)) < 0:
                return self.G._fail(ERR_MEMORY, y + 1)
            memset(&self.G.x_enq[self.G.x_enq_cap], 0, cap - self.G.x_enq_cap)
            self.G.x_enq_cap = cap
        if self.G.x_enq[y]:
            return 0
        self.G.x_enq[y] = 1
        if grow(<void**>&self.G.x_rq, &self.G.x_rq_cap, self.G.x_rq_n + 1, sizeof(state_t)) < 0:
            return self.G._fail(ERR_MEMORY, self.G.x_rq_n + 1)
        self.G.x_rq[self.G.x_rq_n] = y
        self.G.x_rq_n += 1
        return 0

    cdef int _collect_slice(self, int32_t k, state_t x) noexcept nogil:
        """Queue the lexer states slice ``k``'s tokens end in from ``x`` (the slice is taken
        whole there, its trie not walked): its trie is walked from ``x`` down to a node whose
        lexer state every pair of which keeps the slice alive; the lexer states bytes lead
        to from there are queued instead of the subtree's (:meth:`_queue_closure`).  0, -1."""
        cdef const TrieNode* nodes = self.walk_slices.t_nodes[k]
        cdef int32_t n = self.walk_slices.t_num[k], p = 1, depth = 1, i
        cdef state_t y, parent
        cdef state_t* st = self.st_ls
        cdef const TrieNode* node
        cdef bint closed
        cdef int c
        cdef int64_t visited = 0
        st[0] = x
        while p < n:
            node = &nodes[p]
            parent = st[depth - 1]
            visited += 1
            y = self.G.ls_trans[<int64_t>parent * BYTES + node.byte]
            if y == MISSING:
                y = self.G.step(parent, node.byte)
            if y == LS_ERROR:
                return -1
            closed = y >= 0
            if y >= 0:
                for i in range(self.G.sets.len[y]):
                    c = self.G.contained(self.G.sets.pool[self.G.sets.off[y] + i], k, self.walk_slices.trans[k],
                                         self.walk_slices.n_states[k], self.walk_slices.starts[k])
                    if c < 0:
                        return -1
                    if c == 0:
                        closed = False
                        break
            if y < 0 or closed:
                if closed and self._queue_closure(y) < 0:
                    return -1
                depth -= node.num_parents - 1
                p += node.subtree_size
                continue
            if node.token_count and self._queue_root(y) < 0:
                return -1
            st[depth] = y
            depth += 1 - node.num_parents * (node.subtree_size == 1)
            p += 1
        self.work.trie_nodes += visited
        return 0

    cdef int _queue_closure(self, state_t y) noexcept nogil:
        """Queue ``y`` and the lexer states bytes lead to from it, the first ``X_CLOSURE``
        of them (once per ``y``): 0 or -1."""
        cdef state_t q[X_CLOSURE]
        cdef int32_t n = 1, i = 0, b, j
        cdef state_t z
        cdef bint seen
        if self._queue_root(y) < 0:
            return -1
        if self.G.x_enq[y] & 2:
            return 0
        self.G.x_enq[y] = self.G.x_enq[y] | 2
        q[0] = y
        while i < n:
            for b in range(BYTES):
                z = self.G.ls_trans[<int64_t>q[i] * BYTES + b]
                if z == MISSING:
                    z = self.G.step(q[i], <uint8_t>b)
                if z == LS_ERROR:
                    return -1
                if z < 0:
                    continue
                seen = False
                for j in range(n):
                    if q[j] == z:
                        seen = True
                        break
                if seen:
                    continue
                if n == X_CLOSURE:
                    return 0  # (the rest are made when first met)
                if self._queue_root(z) < 0:
                    return -1
                q[n] = z
                n += 1
            i += 1
        return 0

    def ahead(self, int64_t max_nodes):
        """Make the mask tables ahead of the masks (see the module doc): the contexts of
        the lexer states a mask can start in and of the boundaries after them, until none
        is left, ``max_nodes`` trie nodes were visited or the tables hold their
        ``max_cx_bytes``.  Returns whether it made all it found."""
        cdef int r
        if not self.cx_ok:
            raise ValueError("the parser does not walk the trie and slices of the grammar's mask tables")
        with nogil:
            r = self._ahead(max_nodes)
        if r == -2:  # the deadline passed (it stays passed): raise it, saying where
            check_deadline(f"glr: the mask tables made ahead ({self.G.cx_n} contexts made)")
            raise RuntimeError("glr: the mask tables stopped for a deadline that has not passed")
        if r < 0:
            self.T.raise_error()
            raise RuntimeError("glr: the making of the mask tables failed")
        return self.G.ahead_complete

    def explore(self, int64_t max_configs, int64_t max_nodes):
        """Make ahead the roots of the lexer states where a stack of several tops starts a
        lexeme, which the making ahead cannot predict (see the module doc); on a fresh
        parser, after :meth:`ahead`.  ``(configurations met, such states found, trie nodes
        visited)``."""
        cdef int r
        cdef int64_t out[3]
        if not self.cx_ok:
            raise ValueError("the parser does not walk the trie and slices of the grammar's mask tables")
        with nogil:
            r = self._explore(max_configs, max_nodes, out)
        if r == -2:
            check_deadline(f"glr: the mask tables made ahead ({self.G.cx_n} contexts made)")
            raise RuntimeError("glr: the exploration stopped for a deadline that has not passed")
        if r < 0:
            self.T.raise_error()
            raise RuntimeError("glr: the exploration of the parser's configurations failed")
        return out[0], out[1], out[2]

    cdef int _explore(self, int64_t max_configs, int64_t max_nodes, int64_t* out) noexcept nogil:
        """:meth:`explore`: 0, -1 (memory) or -2 (the compile's deadline passed).

        Depth first over the parser's configurations from row 0, a lexeme at a time: from
        a row's start state, each allowed lexeme's shortest string is read (the lexer
        state it leads to accepts that lexeme and every other that accepts the string
        too, as a real lexeme does) and that state is scanned, once per distinct set of
        accepted lexemes; a configuration, keyed by its top row's LR states, the states
        their edges lead to and its start state, is expanded once, up to
        ``max_configs``.  The start state of each row with several tops is queued for a
        root, and the queue (those roots and the states their tokens end in) is made, up
        to ``max_nodes`` trie nodes.  Limits a mask would meet
        are left to the masks: the walk stops at half of ``max_lexer_states`` or when the
        tables are full, and a limit met on the way clears its error and skips."""
        cdef int32_t n_lex = self.G.n_term, l, ns, d, c, e, i, j, k, g, qn, base, ntop, mi, b
        cdef int32_t sw_n = 0, nf = 0, nseed = 0
        cdef int64_t configs = 0, h, node0 = self.work.trie_nodes, pos = self.G.x_rq_n
        cdef int64_t fr_cap = 0, pool_cap = 0, pool_n = 0, mm_cap = 0, mm_n = 0
        cdef int64_t sw_cap = 0, par_cap = 0, pby_cap = 0, dq_cap = 0
        cdef uint64_t key, akey
        cdef uint8_t tmp_b
        cdef state_t x, y
        cdef int r = 0
        cdef int32_t* sw_off = <int32_t*>malloc(max(1, n_lex) * sizeof(int32_t))  # per lexeme: its string
        cdef int32_t* sw_len = <int32_t*>malloc(max(1, n_lex) * sizeof(int32_t))
        cdef uint8_t* sw = NULL
        cdef int32_t* par = NULL     # the breadth-first search of a lexeme's DFA: parent,
        cdef uint8_t* pby = NULL     # the byte from it,
        cdef int32_t* dq = NULL      # and the queue
        cdef int64_t* fr = NULL      # frames: rows, memo entry, next
        cdef state_t* pool = NULL    # per start state met: its lexer states to scan
        cdef int64_t* mm = NULL      # memo entries: pool offset, count
        cdef I64Map seen, accs, memo
        out[0] = out[1] = out[2] = 0
        if sw_off == NULL or sw_len == NULL or i64map_init(&seen, 64) < 0:
            free(sw_off); free(sw_len)
            return self.G._fail(ERR_MEMORY, n_lex)
        if i64map_init(&memo, 64) < 0:
            free(sw_off); free(sw_len); i64map_free(&seen)
            return self.G._fail(ERR_MEMORY, 64)
        # per lexeme, a shortest non-empty string it accepts
        for l in range(n_lex):
            sw_off[l] = -1
            sw_len[l] = 0
            ns = self.G.lex_off[l + 1] - self.G.lex_off[l]
            if self.G.lex_start[l] == 0 or ns <= 0:  # (DEAD: the lexeme matches nothing)
                continue
            if (grow(<void**>&par, &par_cap, ns, sizeof(int32_t)) < 0 or grow(<void**>&pby, &pby_cap, ns, 1) < 0
                    or grow(<void**>&dq, &dq_cap, ns, sizeof(int32_t)) < 0):
                r = self.G._fail(ERR_MEMORY, ns)
                break
            for d in range(ns):
                par[d] = -2
            par[self.G.lex_start[l]] = -1
            dq[0] = self.G.lex_start[l]
            qn = 1
            i = 0
            e = -1
            while i < qn and e < 0:
                d = dq[i]
                i += 1
                for b in range(BYTES):
                    c = self.G.lex_trans[l][<int64_t>d * self.G.lex_k[l] + self.G.lex_cls[l][b]]
                    if c == 0 or par[c] != -2:
                        continue
                    par[c] = d
                    pby[c] = <uint8_t>b
                    dq[qn] = c
                    qn += 1
                    if self.G.g_acc[self.G.lex_off[l] + c]:
                        e = c
                        break
            if e < 0:
                continue
            sw_off[l] = sw_n
            d = e
            while d != self.G.lex_start[l]:
                if grow(<void**>&sw, &sw_cap, sw_n + 1, 1) < 0:
                    r = self.G._fail(ERR_MEMORY, sw_n + 1)
                    break
                sw[sw_n] = pby[d]
                sw_n += 1
                d = par[d]
            if r < 0:
                break
            sw_len[l] = sw_n - sw_off[l]
            i = sw_off[l]
            j = sw_n - 1
            while i < j:  # (read from the end)
                tmp_b = sw[i]
                sw[i] = sw[j]
                sw[j] = tmp_b
                i += 1
                j -= 1
        self.G.x_collect = True
        x = self.row_ls[self.n_rows - 1]
        while r == 0:
            # a frame for the top row (start state x): the lexer states to scan, once per x
            mi = i64map_get(&memo, x)
            if mi < 0:
                if grow(<void**>&mm, &mm_cap, 2 * (mm_n + 1), sizeof(int64_t)) < 0 or i64map_init(&accs, 16) < 0:
                    r = self.G._fail(ERR_MEMORY, mm_n + 1)
                    break
                mi = <int32_t>mm_n
                mm[2 * mi] = pool_n
                mm[2 * mi + 1] = 0
                mm_n += 1
                if i64map_put(&memo, x, mi) < 0:
                    r = self.G._fail(ERR_MEMORY, mm_n)
                for k in range(self.G.sets.len[x]):
                    l = self.G.g_lex[self.G.sets.pool[self.G.sets.off[x] + k]]
                    if r < 0 or l >= n_lex or sw_off[l] < 0:
                        continue
                    y = x
                    for i in range(sw_off[l], sw_off[l] + sw_len[l]):
                        y = self.G.step(y, sw[i])
                        if y < 0:
                            break
                    if y == LS_ERROR:
                        self.T.err = ERR_NONE
                    if y < 0 or self.G.ls_acc_len[y] == 0:
                        continue
                    akey = hash_ints(&self.G.acc_pool[self.G.ls_acc_off[y]], self.G.ls_acc_len[y])
                    if i64map_get(&accs, <int64_t>(akey >> 1)) >= 0:
                        continue
                    if (i64map_put(&accs, <int64_t>(akey >> 1), 1) < 0
                            or grow(<void**>&pool, &pool_cap, pool_n + 1, sizeof(state_t)) < 0):
                        r = self.G._fail(ERR_MEMORY, pool_n + 1)
                        continue
                    pool[pool_n] = y
                    pool_n += 1
                    mm[2 * mi + 1] += 1
                i64map_free(&accs)
                if r < 0:
                    break
            if grow(<void**>&fr, &fr_cap, 3 * (nf + 1), sizeof(int64_t)) < 0:
                r = self.G._fail(ERR_MEMORY, nf + 1)
                break
            fr[3 * nf] = self.n_rows
            fr[3 * nf + 1] = mi
            fr[3 * nf + 2] = 0
            nf += 1
            # the next configuration not met yet, depth first
            x = -1
            while nf > 0 and configs < max_configs and self.G.n_ls < self.G.max_lexer_states // 2:
                base = 3 * (nf - 1)
                mi = <int32_t>fr[base + 1]
                if fr[base + 2] == mm[2 * mi + 1]:
                    nf -= 1
                    continue
                y = pool[mm[2 * mi] + fr[base + 2]]
                fr[base + 2] += 1
                self._truncate(<int32_t>fr[base])
                self.T.steps = 0
                if self._scan(y) < 0:  # (a limit of the row or the steps: not followed)
                    self.T.err = ERR_NONE
                    self._truncate(<int32_t>fr[base])
                    continue
                j = self.n_rows - 1
                ntop = 0
                h = self.row_beg[j]
                key = <uint64_t>(self.row_ls[j] + 1) * 0x9E3779B97F4A7C15ULL
                while h < self.n_items:
                    if not (self.items[h].dr & VIRT):
                        ntop += 1
                        key = mix64(key ^ <uint64_t>(self.items[h].dr + 1))
                        for e in range(1, self.items[h].origin + 1):  # (and the states below it)
                            key = mix64(key ^ (<uint64_t>(self.items[self.items[h + e].origin].dr & ~VIRT) + 7))
                    h += 1 + self.items[h].origin
                if ntop == 0 or i64map_get(&seen, <int64_t>(key >> 1)) >= 0:
                    continue
                if i64map_put(&seen, <int64_t>(key >> 1), 1) < 0:
                    r = self.G._fail(ERR_MEMORY, configs + 1)
                    break
                configs += 1
                if (configs & 63) == 0 and _deadline_passed():
                    r = -2
                    break
                if ntop > 1 and self.G.sets.len[self.row_ls[j]] > 0:
                    nseed += 1
                    if self._queue_root(self.row_ls[j]) < 0:
                        r = -1
                        break
                x = self.row_ls[j]
                break
            if x < 0:
                break
        self._truncate(1)
        # the queued roots, and the states their tokens end in
        while r == 0 and pos < self.G.x_rq_n:
            if self.work.trie_nodes - node0 > max_nodes or self.G.cx_bytes >= self.G.max_cx_bytes:
                break
            if (pos & 63) == 0 and _deadline_passed():
                r = -2
                break
            x = self.G.x_rq[pos]
            pos += 1
            if i64map_get(&self.G.cx_root, x) >= 0:
                continue
            self.T.steps = 0
            if self._root_of(x) < 0:
                if self.T.err == ERR_MEMORY:
                    r = -1
                    break
                # a limit (left to a mask): the making's row cleared, no more made
                self.T.err = ERR_NONE
                if self.G.x_row != NULL:
                    memset(self.G.x_row, 0, self.G.cx_words * sizeof(word_t))
                break
        self.G.x_collect = False
        self.G.ahead_nodes += self.work.trie_nodes - node0
        out[0] = configs
        out[1] = nseed
        out[2] = self.work.trie_nodes - node0
        i64map_free(&seen)
        i64map_free(&memo)
        free(sw_off); free(sw_len); free(sw); free(par); free(pby); free(dq); free(fr); free(pool); free(mm)
        return r

    cdef int _ahead(self, int64_t max_nodes) noexcept nogil:
        """:meth:`ahead`: 0, -1 (a limit of the lexer, memory) or -2 (the compile's
        deadline passed: checked every 64 roots and items).

        Roots: the lexer state now and the start state of every LR state's candidates,
        then every lexer state a made context's token ends in.  Children: items
        ``(context, LR state on top)``; a root's group (the state below unknown) gets a
        child per state a lexeme it ends is shifted into anywhere, a child's group per
        state :meth:`GLRTables._reach` finds from the item's state; the skip lexeme's group
        keeps the item's state (a root's: every start state)."""
        cdef int32_t n = self.G.n_states, S, k, l, t, i, c, g, m, j, n_t, n_term = self.G.n_term
        cdef int32_t n_all = 0, ch, t2, nu, sub, k2, na, bit
        cdef int64_t node0 = self.work.trie_nodes, rq_pos = 0, wq_n = 0, wq_pos = 0, cap = 0, wq_cap = 0
        cdef int64_t items = 0
        cdef state_t x, s, s_row = -1
        cdef int r = -1
        cdef bint skip, gave_up = False
        cdef I64Map seen
        cdef state_t* ss = <state_t*>malloc(max(1, n) * sizeof(state_t))      # per LR state: start(cand)
        cdef state_t* all_ = <state_t*>malloc(max(1, n) * sizeof(state_t))   # the distinct ones
        cdef int32_t* tg_off = <int32_t*>malloc((n_term + 1) * sizeof(int32_t))  # per lexeme: its shift targets
        cdef int32_t n_sh = self.G.sh_off[n] if n > 0 else 0
        cdef int32_t* tg = <int32_t*>malloc(max(1, n_sh) * sizeof(int32_t))
        cdef int32_t* rch = <int32_t*>malloc(REACH_MAX * sizeof(int32_t))
        cdef int32_t* wq = NULL  # items: (context, LR state or -1) pairs
        if ss == NULL or all_ == NULL or tg_off == NULL or tg == NULL or rch == NULL or i64map_init(&seen, 64) < 0:
            self.G._fail(ERR_MEMORY, n)
            free(ss); free(all_); free(tg_off); free(tg); free(rch)
            return -1
        self.G.ahead_complete = False
        self.T.steps = 0
        # the start state of each LR state's candidate lexemes (the lexer state after a
        # lexeme shifted into it, when the stack allows them all: an LALR(1) lookahead
        # the stack refuses gives a state made when first met)
        for S in range(n):
            ss[S] = self.G.start_state(&self.G.cand_lex[self.G.cand_off[S]], self.G.cand_off[S + 1] - self.G.cand_off[S])
            if ss[S] == LS_ERROR:
                break
        else:
            if self.G._stamps_reserve() == 0:
                self.G.x_stamp += 1
                for S in range(n):
                    if self.G.sets.len[ss[S]] > 0 and self.G.x_gstamp[ss[S]] != self.G.x_stamp:
                        self.G.x_gstamp[ss[S]] = self.G.x_stamp
                        all_[n_all] = ss[S]
                        n_all += 1
                # per lexeme: the distinct states it is shifted into (bucketed from the shift
                # lists, then each bucket's repeats dropped)
                memset(tg_off, 0, (n_term + 1) * sizeof(int32_t))
                for k in range(n_sh):
                    tg_off[self.G.sh_lex[k] + 1] += 1
                for l in range(n_term):
                    tg_off[l + 1] += tg_off[l]
                for S in range(n):
                    for k in range(self.G.sh_off[S], self.G.sh_off[S + 1]):
                        l = self.G.sh_lex[k]
                        tg[tg_off[l]] = self.G.sh_to[k]
                        tg_off[l] += 1
                for l in range(n_term - 1, 0, -1):
                    tg_off[l] = tg_off[l - 1]
                tg_off[0] = 0
                if self.G._reach_scratch() == 0:  # (r stays -1, the error set, when it fails)
                    m = 0
                    for l in range(n_term):
                        self.G.r_stamp += 1
                        j = tg_off[l]
                        tg_off[l] = m
                        for k in range(j, tg_off[l + 1] if l + 1 < n_term else n_sh):
                            t = tg[k]
                            if self.G.r_mark[t] != self.G.r_stamp:
                                self.G.r_mark[t] = self.G.r_stamp
                                tg[m] = t
                                m += 1
                    tg_off[n_term] = m
                    self.G.x_collect = True
                    r = self._queue_root(self.ls)
                    for i in range(n_all):
                        if r == 0:
                            r = self._queue_root(all_[i])
                    while r == 0 and (rq_pos < self.G.x_rq_n or wq_pos < wq_n):
                        if (self.work.trie_nodes - node0 > max_nodes or self.G.cx_bytes >= self.G.max_cx_bytes
                                or items > max_nodes // 64):
                            break
                        if ((rq_pos + wq_pos) & 63) == 0 and _deadline_passed():
                            r = -2
                            break
                        self.T.steps = 0  # (max_steps: per context made)
                        if rq_pos < self.G.x_rq_n:  # (roots first: a root a mask lacks costs it a walk of the trie)
                            x = self.G.x_rq[rq_pos]
                            rq_pos += 1
                            if i64map_get(&self.G.cx_root, x) >= 0:
                                continue
                            c = self._root_of(x)
                            if c < 0:
                                r = -1
                                break
                            t = -1
                        else:
                            c = wq[3 * wq_pos]
                            t = wq[3 * wq_pos + 1]
                            s_row = wq[3 * wq_pos + 2]
                            wq_pos += 1
                            items += 1
                            for g in range(self.G.cx_goff[c], self.G.cx_goff[c] + self.G.cx_gn[c]):
                                skip = self.G.g_skip[g]
                                x = self.G.g_q[g]
                                k = 1 if skip else self.G.ls_acc_len[x]
                                for i in range(k):
                                    l = -1 if skip else self.G.acc_pool[self.G.ls_acc_off[x] + i]
                                    # the states the lexeme is shifted into (-1: the skip lexeme's, none)
                                    if l < 0:
                                        n_t = 1 if t >= 0 else n_all
                                    elif t >= 0:
                                        n_t = self.G._reach(t, l, rch, REACH_MAX)
                                        if n_t == -2:
                                            r = self.G._fail(ERR_MEMORY, REACH_MAX)
                                            break
                                        if n_t < 0:
                                            gave_up = True
                                            continue
                                    else:
                                        n_t = tg_off[l + 1] - tg_off[l]
                                    for j in range(n_t):
                                        if l < 0:
                                            t2 = t
                                        else:
                                            t2 = rch[j] if t >= 0 else tg[tg_off[l] + j]
                                        # the start states: of every candidate, and where the stack may
                                        # refuse some (unsafe, at most UNSAFE_SUBSETS of them), of each subset
                                        nu = 0
                                        if t2 >= 0 and self.G.cand_ss[t2] < 0:
                                            for k2 in range(self.G.cand_off[t2], self.G.cand_off[t2 + 1]):
                                                nu += not self.G.cand_safe[k2]
                                            if nu > UNSAFE_SUBSETS:
                                                nu = 0
                                        for sub in range((1 << nu) - 1, -1, -1):
                                            if l < 0:
                                                s = s_row if t >= 0 else all_[j]  # (the skip lexeme: the row's start)
                                            elif sub == (1 << nu) - 1:
                                                s = ss[t2]
                                            else:
                                                na = 0
                                                bit = 0
                                                for k2 in range(self.G.cand_off[t2], self.G.cand_off[t2 + 1]):
                                                    if not self.G.cand_safe[k2]:
                                                        bit += 1
                                                        if not ((sub >> (bit - 1)) & 1):
                                                            continue
                                                    self.G.allowed[na] = self.G.cand_lex[k2]
                                                    na += 1
                                                s = self.G.start_state(self.G.allowed, na)
                                                if s == LS_ERROR:
                                                    r = -1
                                                    break
                                            if self.G.sets.len[s] == 0:
                                                continue
                                            ch = self._cx_child(g, s)
                                            if ch < 0:
                                                r = -1
                                                break
                                            if i64map_get(&seen, pair_key(ch, t2 + 1)) >= 0:
                                                continue
                                            if i64map_put(&seen, pair_key(ch, t2 + 1), 1) < 0 or grow(
                                                    <void**>&wq, &wq_cap, 3 * (wq_n + 1), sizeof(int32_t)) < 0:
                                                r = self.G._fail(ERR_MEMORY, wq_n + 1)
                                                break
                                            wq[3 * wq_n] = ch
                                            wq[3 * wq_n + 1] = t2
                                            wq[3 * wq_n + 2] = s
                                            wq_n += 1
                                        if r < 0:
                                            break
                                    if r < 0:
                                        break
                                if r < 0:
                                    break
                            continue
                        # a root: its groups, the state below unknown
                        if grow(<void**>&wq, &wq_cap, 3 * (wq_n + 1), sizeof(int32_t)) < 0:
                            r = self.G._fail(ERR_MEMORY, wq_n + 1)
                            break
                        wq[3 * wq_n] = c
                        wq[3 * wq_n + 1] = -1
                        wq[3 * wq_n + 2] = -1
                        wq_n += 1
                    if r == 0:
                        self.G.ahead_complete = rq_pos == self.G.x_rq_n and wq_pos == wq_n and not gave_up
        self.G.x_collect = False
        self.G.ahead_nodes += self.work.trie_nodes - node0
        self.T.note_steps()
        i64map_free(&seen)
        free(ss); free(all_); free(tg_off); free(tg); free(rch); free(wq)
        return r

    cdef int _lin_reserve(self, int32_t level) noexcept nogil:
        """Room for linear simulation level ``level``: 0 or -1."""
        cdef int64_t cap = self.lin_cap
        if level < self.lin_cap:
            return 0
        if (grow(<void**>&self.lin_h, &cap, level + 1, sizeof(int64_t)) < 0
                or resize(<void**>&self.lin_vn, cap, sizeof(int32_t)) < 0
                or resize(<void**>&self.lin_vs, cap * LIN_MAX, sizeof(int32_t)) < 0):
            return self.T._fail(ERR_MEMORY, level + 1)
        self.lin_cap = <int32_t>cap
        return 0

    cdef int32_t _lin_sim(self, int32_t level, int32_t l, int32_t out) noexcept nogil:
        """Lexeme ``l`` on level ``level``'s linear stack (its states pushed above the stack
        node ``lin_h[level]``, whose own stack is followed down while it is linear), the
        stack after it into level ``out``: the state it is shifted into, -1 when it is
        refused, -2 when the simulation cannot tell (a conflict, a node of two edges, the
        bottom, a deep stack).  The nodes read update ``track_min`` (the store's key)."""
        cdef int32_t S, r, p, m, k, t, vn = self.lin_vn[level], steps = 0
        cdef int64_t h = self.lin_h[level]
        cdef int32_t* vs = &self.lin_vs[<int64_t>out * LIN_MAX]
        memcpy(vs, &self.lin_vs[<int64_t>level * LIN_MAX], vn * sizeof(int32_t))
        while True:
            S = vs[vn - 1] if vn > 0 else self.items[h].dr & ~VIRT
            r = self.G.reductions_from(S, l)
            if r < self.G.rd_off[S + 1] and self.G.rd_la[r] == l:
                if (r + 1 < self.G.rd_off[S + 1] and self.G.rd_la[r + 1] == l) or self.G.shift(S, l) >= 0:
                    return -2  # a conflict: more than one stack
                p = self.G.rd_prod[r]
                if self.G.prod_lhs[p] < 0 or steps == LIN_STEPS:
                    return -2
                steps += 1
                m = self.G.prod_len[p]
                if m <= vn:
                    vn -= m
                else:
                    for k in range(m - vn):
                        if self.items[h].origin != 1:
                            return -2  # the bottom, or a node two stacks share
                        h = self.items[h + 1].origin
                        if h < self.track_base and h < self.track_min:
                            self.track_min = h
                    vn = 0
                S = vs[vn - 1] if vn > 0 else self.items[h].dr & ~VIRT
                t = self.G.goto(S, self.G.prod_lhs[p])
                if t < 0 or vn == LIN_MAX:
                    return -2
                vs[vn] = t
                vn += 1
                continue
            t = self.G.shift(S, l)
            if t < 0:
                return -1
            if vn == LIN_MAX:
                return -2
            vs[vn] = t
            self.lin_h[out] = h
            self.lin_vn[out] = vn + 1
            return t

    cdef int32_t _lin_step(self, int32_t level, state_t q) noexcept nogil:
        """The scan of lexer state ``q``'s lexemes on level ``level``'s linear stack into
        level ``level + 1`` (:meth:`_lin_sim`): the state the one lexeme that shifts is
        shifted into; -1 when none shifts (the scan's row would be empty); -2 when the
        simulation cannot tell or two shift (two stacks: the caller scans); -3 on error."""
        cdef int32_t i, t, found = -1
        if self._lin_reserve(level + 2) < 0:
            return -3
        for i in range(self.T.ls_acc_len[q]):
            # on level + 1, or on level + 2 once a lexeme shifted (only to see whether this one does)
            t = self._lin_sim(level, self.T.acc_pool[self.T.ls_acc_off[q] + i], level + (1 if found < 0 else 2))
            if t == -2 or (t >= 0 and found >= 0):
                return -2
            if t >= 0:
                found = t
        return found

    cdef state_t _lin_start(self, int32_t level, int32_t t) noexcept nogil:
        """The start lexer state after a lexeme shifted into state ``t`` on level ``level``'s
        linear stack: ``cand_ss[t]`` when every candidate is safe, else that of the
        candidates the stack allows (each unsafe one simulated on level ``level + 1``);
        -2 when the simulation cannot tell, LS_ERROR on a limit."""
        cdef int32_t k, c, n = 0, r
        if self.G.cand_ss[t] >= 0:
            return self.G.cand_ss[t]
        if self._lin_reserve(level + 1) < 0:
            return LS_ERROR
        for k in range(self.G.cand_off[t], self.G.cand_off[t + 1]):
            c = self.G.cand_lex[k]
            if not self.G.cand_safe[k]:
                r = self._lin_sim(level, c, level + 1)
                if r == -2:
                    return -2
                if r < 0:
                    continue
            self.T.allowed[n] = c
            n += 1
        return self.T.start_state(self.T.allowed, n)

    cdef int _fast_group(self, int32_t g, int32_t level, state_t s_row, word_t* mask, int64_t* cnt) noexcept nogil:
        """Boundary group ``g`` on level ``level``'s linear stack (``s_row``: the start
        state of the lexeme the group's tokens are in), its lexeme scanned by
        :meth:`_lin_step` and the next start state the candidates of the state it is
        shifted into, every one safe: its child's row and, in turn, the child's groups,
        into ``mask``.  1 done, 0 the simulation cannot tell (the caller scans: what was
        ORed is part of what the scan allows), -1 error."""
        cdef int32_t t, ch, g2, nl
        cdef state_t s
        if self.G.g_skip[g]:
            s = s_row
            nl = level  # the skip lexeme leaves the parser as it is
        else:
            t = self._lin_step(level, self.G.g_q[g])
            if t == -3:
                return -1
            if t == -1:
                return 1
            if t == -2:
                return 0
            nl = level + 1
            s = self._lin_start(nl, t)
            if s == LS_ERROR:
                return -1
            if s < 0:
                return 0
        if self.G.sets.len[s] == 0:
            return 1
        ch = self._cx_child(g, s)
        if ch < 0:
            return -1
        self.G.cx_fast += 1
        self._cx_or(ch, mask, cnt)
        if nl == level and self.G.cx_gn[ch] > 0:
            # (the skip lexeme's child groups read the same level: copy it up one)
            if self._lin_reserve(level + 1) < 0:
                return -1
            self.lin_h[level + 1] = self.lin_h[level]
            self.lin_vn[level + 1] = self.lin_vn[level]
            memcpy(&self.lin_vs[<int64_t>(level + 1) * LIN_MAX], &self.lin_vs[<int64_t>level * LIN_MAX],
                   self.lin_vn[level] * sizeof(int32_t))
            nl = level + 1
        for g2 in range(self.G.cx_goff[ch], self.G.cx_goff[ch] + self.G.cx_gn[ch]):
            t = self._fast_group(g2, nl, s, mask, cnt)
            if t <= 0:
                return t
        return 1

    cdef int _accepting(self) noexcept nogil:
        """``EarleyParser._accepting``, the scan's row not made where :meth:`_lin_step`
        follows the lexeme onto a state where every stack accepts, or none does."""
        cdef int32_t t
        cdef int64_t top = -1
        if not self.fresh and not (self.T.ls_flags[self.ls] & F_SKIP_ACC) and self.T.ls_acc_len[self.ls] > 0:
            top = self._top_header()
            if top >= 0 and self._lin_reserve(1) == 0:
                self.lin_h[0] = top
                self.lin_vn[0] = 0
                t = self._lin_step(0, self.ls)
                if t == -1:
                    return 0
                if t >= 0 and (self.G.acc_safe[t] or not self.G.acc_any[t]):
                    return self.G.acc_safe[t]
        return EarleyParser._accepting(self)

    cdef void _cx_or(self, int32_t c, word_t* mask, int64_t* cnt) noexcept nogil:
        """OR context ``c``'s row into ``mask`` (a dense row over a dirty mask: copied,
        the words past the row zeroed), its tokens into ``cnt``."""
        cdef int64_t off = self.G.cx_roff[c], i
        cdef int32_t n = self.G.cx_rlen[c]
        cdef const word_t* row
        cdef const int32_t* si
        cdef const word_t* sw
        self.G.cx_rows += 1
        if n < 0:
            row = <const word_t*>arena_at(&self.G.cx_wa, off)
            self.G.cx_dense += 1
            if self.dirty > 0:
                memcpy(mask, row, self.G.cx_words * sizeof(word_t))
                if self.dirty > self.G.cx_words:
                    memset(mask + self.G.cx_words, 0, (self.dirty - self.G.cx_words) * sizeof(word_t))
                self.dirty = 0
            else:
                or_words(mask, row, self.G.cx_words)
        else:
            self._clean(mask)
            si = self.G.cx_si  # (locals: a store to mask could alias the tables' fields)
            sw = self.G.cx_sw
            for i in range(off, off + n):
                mask[si[i]] |= sw[i]
        cnt[0] += self.G.cx_cnt[c]

    cdef int32_t _cx_lookup(self, int32_t g, state_t s) noexcept nogil:
        """Group ``g``'s context after the boundary from lexer state ``s``, or -2: none made."""
        cdef int32_t c = self.G.child_of(g, s)
        return c if c >= 0 else -2

    cdef int _cx_walk_group(self, int32_t g, state_t s, word_t* mask, int64_t* cnt) noexcept nogil:
        """Group ``g``'s nodes after the boundary, the next lexeme from ``s``, walked as
        llguidance walks (the parser scanning at the next boundaries): 0 or -1."""
        cdef int64_t j, v
        cdef int32_t k, n, i
        cdef const TrieNode* nodes
        cdef const token_t* ids
        cdef state_t y, saved_ls = self.ls
        self.G.cx_walked += 1
        for j in range(self.G.g_noff[g], self.G.g_noff[g] + self.G.g_nn[g]):
            y = self.G.ls_trans[<int64_t>s * BYTES + (self.G.nd_k[j] >> 8)]
            if y == MISSING:
                y = self.G.step(s, <uint8_t>(self.G.nd_k[j] >> 8))
            if y == LS_ERROR:
                return -1
            if y < 0:
                continue
            k = self.G.nd_k[j] & 0xFF
            self._cx_trie(k, &nodes, &ids)
            n = self.G.nd_i[j]
            for i in range(nodes[n].token_start, nodes[n].token_start + nodes[n].token_count):
                mask[ids[i] >> 5] |= (<word_t>1) << (ids[i] & 31)
            cnt[0] += nodes[n].token_count
            if nodes[n].subtree_size > 1:
                self.ls = y  # (the walk starts from the parser's lexer state)
                v = self._walk(nodes + n, nodes[n].subtree_size, ids, mask)
                self.ls = saved_ls
                if v < 0:
                    return -1
                self.work.trie_nodes += v
                self.work.lexer_steps += v
                cnt[0] += self.walk_tokens
        return 0

    cdef int32_t _cx_child(self, int32_t g, state_t s) noexcept nogil:
        """Group ``g``'s context after the boundary, the next lexeme from lexer state ``s``
        (made the first time): its id, or -1."""
        cdef int32_t c = self.G.child_of(g, s)
        if c >= 0:
            return c
        g = self.G.g_cn[g]  # (the child is its nodes' walk: kept on the first group of them)
        c = self._cx_make(s, g)
        if c < 0:
            return -1
        if self.G.g_c1[g] < 0:
            self.G.g_c1[g] = pair_key(s, c)
        elif i64map_put(&self.G.ch_index, pair_key(g, s), c) < 0:
            return self.G._fail(ERR_MEMORY, self.G.ch_index.n + 1)
        self.G._cx_account()
        return c

    cdef int _cx_fill(self, int32_t c, word_t* mask, int64_t* cnt, bint deep) noexcept nogil:
        """OR context ``c``'s row into ``mask`` and, per boundary group, the scan of the
        lexeme it ends (the skip lexeme: none) and the context after it; 0 or -1.  A root
        (not ``deep``) follows each group on the stack's linear top first
        (:meth:`_fast_group`, no rows); a ``deep`` one's group whose child is not made
        walks its nodes."""
        cdef int32_t g, saved, ch, r
        cdef int64_t top = -1, part
        cdef state_t s
        self._cx_or(c, mask, cnt)
        if not deep and self.G.cx_gn[c] > 0:
            top = self._top_header()
            if top >= 0 and self._lin_reserve(0) < 0:
                return -1
        for g in range(self.G.cx_goff[c], self.G.cx_goff[c] + self.G.cx_gn[c]):
            if top >= 0:
                self.lin_h[0] = top
                self.lin_vn[0] = 0
                part = 0
                r = self._fast_group(g, 0, self.row_ls[self.n_rows - 1], mask, &part)
                if r < 0:
                    return -1
                if r == 1:
                    cnt[0] += part
                    continue
            saved = self.n_rows
            if not self.G.g_skip[g]:
                self.G.cx_scans += 1
                if self._scan(self.G.g_q[g]) < 0:
                    return -1
            s = self.row_ls[self.n_rows - 1]
            if self.G.sets.len[s] > 0:
                ch = self._cx_lookup(g, s) if deep else self._cx_child(g, s)
                if ch == -2:
                    if self._cx_walk_group(g, s, mask, cnt) < 0:
                        return -1
                elif ch < 0 or self._cx_fill(ch, mask, cnt, True) < 0:
                    return -1
            if self.n_rows != saved:
                self._truncate(saved)
        return 0

    cdef int64_t _top_header(self) noexcept nogil:
        """The top row's node when it has one (a linear stack's top), else -1."""
        cdef int64_t h = self.row_beg[self.n_rows - 1], top = -1
        while h < self.n_items:
            if not (self.items[h].dr & VIRT):
                if top >= 0:
                    return -1
                top = h
            h += 1 + self.items[h].origin
        return top

    cdef int32_t _store_lookup(self) noexcept nogil:
        """The stored entry this parser's state matches, or -1."""
        cdef int64_t top = self._top_header(), h
        cdef int32_t e, k, d
        cdef const int32_t* states
        if top < 0:
            return -1
        e = i64map_get(&self.G.st_index, pair_key(self.ls, self.items[top].dr))
        while e >= 0:
            if self.G.st_ls0[e] == self.row_ls[self.n_rows - 1]:
                d = self.G.st_depth[e]
                states = &self.G.st_states[self.G.st_soff[e]]
                h = top
                k = 1
                while k < d:  # down the linear stack, state by state
                    if self.items[h].origin != 1:
                        break
                    h = self.items[h + 1].origin
                    if (self.items[h].dr & ~VIRT) != states[k]:
                        break
                    k += 1
                if k == d:
                    return e
            e = self.G.st_next[e]
        return -1

    cdef int _store_insert(self, const word_t* mask, int32_t n_words, bint sliced, int64_t count) noexcept nogil:
        """Store the mask a fill just made, keyed by what it read: 0 (stored, or not
        storable: a stack not linear where it was read, the store full), -1 on memory."""
        cdef int64_t top = self._top_header(), h, need, cap, moff
        cdef int32_t d = 0, e
        if top < 0 or (self.G.st_words >= 0 and self.G.st_words != n_words):
            return 0
        h = top
        while True:  # the states down to the deepest node the fill read
            if d + 1 > self.cap_chain:
                cap = self.cap_chain
                if grow(<void**>&self.chain, &cap, d + 1, sizeof(int32_t)) < 0:
                    return self.T._fail(ERR_MEMORY, d + 1)
                self.cap_chain = <int32_t>cap
            self.chain[d] = self.items[h].dr & ~VIRT
            d += 1
            if h <= self.track_min:
                break  # the deepest node read
            if self.items[h].origin != 1:
                return 0  # read below a node with two edges (or none): not a linear stack
            h = self.items[h + 1].origin
        need = <int64_t>n_words * sizeof(word_t) + d * sizeof(int32_t) + 32
        if self.G.store_bytes + need > self.G.max_store_bytes:
            return 0
        e = self.G.st_n
        if e + 1 > self.G.st_cap:
            # double, but never past the entries the byte limit allows
            cap = min(max(16, 2 * self.G.st_cap), self.G.max_store_bytes // (<int64_t>n_words * sizeof(word_t)) + 1)
            if (resize(<void**>&self.G.st_next, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.G.st_ls0, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.G.st_depth, cap, sizeof(int32_t)) < 0
                    or resize(<void**>&self.G.st_soff, cap, sizeof(int64_t)) < 0
                    or resize(<void**>&self.G.st_sliced, cap, sizeof(uint8_t)) < 0
                    or resize(<void**>&self.G.st_count, cap, sizeof(int64_t)) < 0
                    or resize(<void**>&self.G.st_moff, cap, sizeof(int64_t)) < 0):
                return self.T._fail(ERR_MEMORY, e + 1)
            self.G.st_cap = cap
        if self.G.st_states_n + d > self.G.st_states_cap and grow(
                <void**>&self.G.st_states, &self.G.st_states_cap, self.G.st_states_n + d, sizeof(int32_t)) < 0:
            return self.T._fail(ERR_MEMORY, self.G.st_states_n + d)
        if self.G.st_words < 0:
            arena_init(&self.G.st_ma, sizeof(word_t), 16 * <int64_t>n_words)
        self.G.st_words = n_words
        moff = arena_take(&self.G.st_ma, n_words)
        if moff < 0:
            return self.T._fail(ERR_MEMORY, e + 1)
        memcpy(arena_at(&self.G.st_ma, moff), mask, n_words * sizeof(word_t))
        self.G.st_moff[e] = moff
        memcpy(&self.G.st_states[self.G.st_states_n], self.chain, d * sizeof(int32_t))
        self.G.st_soff[e] = self.G.st_states_n
        self.G.st_states_n += d
        self.G.st_depth[e] = d
        self.G.st_ls0[e] = self.row_ls[self.n_rows - 1]
        self.G.st_sliced[e] = sliced
        self.G.st_count[e] = count
        self.G.st_next[e] = i64map_get(&self.G.st_index, pair_key(self.ls, self.chain[0]))
        if i64map_put(&self.G.st_index, pair_key(self.ls, self.chain[0]), e) < 0:
            return self.T._fail(ERR_MEMORY, e + 1)
        self.G.st_n += 1
        self.G.store_inserts += 1
        self.G.store_bytes += need
        return 0

    # ------------------------------------------------------------ python --

    def row_start(self, int32_t k):
        """Row k's lexer state: where the lexeme after it starts."""
        if k < 0 or k >= self.n_rows:
            raise IndexError(f"row {k} out of range [0, {self.n_rows})")
        return self.row_ls[k]

    def row_nodes(self, int32_t k):
        """Row k's nodes ``(state, below, virtual)``, ``below`` the headers its edges
        point to (for tests and debugging)."""
        if k < 0 or k >= self.n_rows:
            raise IndexError(f"row {k} out of range [0, {self.n_rows})")
        out = []
        cdef int64_t h = self.row_beg[k]
        cdef int64_t end = self.row_beg[k + 1]
        while h < end:
            out.append((self.items[h].dr & ~VIRT, [self.items[h + 1 + i].origin for i in range(self.items[h].origin)],
                        bool(self.items[h].dr & VIRT)))
            h += 1 + self.items[h].origin
        return out
