"""The ``glr`` core: llguidance's lexer and trie walk over an LR automaton with a
graph-structured stack.

:class:`GLRTables` is :class:`strategies.llguidance.parser.ParserTables` (the lexemes,
their DFAs and the lazy lexer states: the lexer of our ``llguidance``, unchanged) plus
the LR automaton over the lexemes that :func:`toolkit.grammar.lr.build_lr` makes:
dense shift and goto tables, the reductions of each (state, lookahead) and, per state,
the lexemes it has an action on.

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
edges added to a node, of the top level; repeated until nothing changes, which makes
ε-productions and hidden left recursion right: Farshi's fix of Tomita), then ``l`` is
shifted from every view node that can.  The view nodes a shift leaves from are written
into the new row as headers of the level below (flag ``VIRT``: they belong to the
level the reductions worked on), an unchanged one as its own header; then the row's
nodes, one per state, with an edge to each node it was shifted from.

**Closing a row** finds the lexemes it allows: a lexeme some node shifts is allowed;
one only reduced on is tried in a view (LALR(1) lookaheads may reduce on a lexeme that
the stack below then refuses); ``$`` tried the same way says whether the grammar
accepts.  The lexer state of the allowed lexemes (``ParserTables.start_state``) is the
row's, as in Earley.

**The mask store** (the first of the tables the strategy keeps; lazy): a mask a fill
made is stored on the tables, shared by every parser of the grammar, keyed by what it
was made from: the lexer state, the top row's start lexer state (what follows a
skipped lexeme) and the LR states of the stack's linear top down to the deepest node
the fill read (the fill records the lowest stack node its reductions reached; rows kept
from earlier operations are made again so that every read is the fill's).  A later
fill whose stack shows the same states that deep ORs the stored row instead of
walking: exact by construction, since the walk read nothing else.  A stack that is not
linear where it was read is not stored; ``max_store_bytes`` bounds the store (0: off).

Limits: the items of a row (headers and edges written) and the nodes and edges of the
level a scan reduces in (``max_row_items`` each), and the
steps of a mask or token (items, reductions and lexer states, ``max_steps``), raised
as the tables' errors.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from strategies.llguidance.parser cimport EarleyParser, LS_ERROR, ParserTables
from toolkit.core.cutil cimport (
    ERR_MAX_ROW_ITEMS, ERR_MEMORY, grow, i64map_free, i64map_get, i64map_init, i64map_put, pair_key,
    resize,
)
from toolkit.core.ids cimport state_t, word_t

cnp.import_array()

__all__ = ["GLRTables", "GLRParser"]


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
                 int64_t max_store_bytes=0):
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
        if i64map_init(&self.st_index, 64) < 0:
            raise MemoryError()
        self.lr_bytes = 4 * (3 * (n_states + 1) + 2 * len(sh_lex) + 2 * len(goto_nt) + 2 * len(rd_la)
                             + 2 * self.n_prods + len(cand_off) + len(cand_lex))

    def __dealloc__(self):
        free(self.sh_off); free(self.sh_lex); free(self.sh_to)
        free(self.goto_off); free(self.goto_nt); free(self.goto_to)
        free(self.rd_off); free(self.rd_la); free(self.rd_prod)
        i64map_free(&self.st_index); free(self.st_next); free(self.st_ls0); free(self.st_depth); free(self.st_soff)
        free(self.st_sliced); free(self.st_states); free(self.st_masks)
        free(self.prod_lhs); free(self.prod_len); free(self.cand_off); free(self.cand_lex)

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
        """The lexer's tables (:meth:`ParserTables.memory_bytes`), the LR arrays and the
        mask store."""
        return ParserTables.memory_bytes(self) + self.lr_bytes + self.store_bytes

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

    def __init__(self, ParserTables tables not None, bint _empty=False, bint use_cache=True):
        EarleyParser.__init__(self, tables, _empty, use_cache)

    def __dealloc__(self):
        free(self.vn_state); free(self.vn_orig); free(self.vn_edge); free(self.vn_mat)
        free(self.ve_to); free(self.ve_next); free(self.by_state)
        free(self.fr_a); free(self.fr_b); free(self.sh_state); free(self.sh_from); free(self.chain)

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
                    or resize(<void**>&self.vn_mat, cap, sizeof(int32_t)) < 0):
                return self.T._fail(ERR_MEMORY, v + 1)
            self.cap_vn = <int32_t>cap
        if v + self.n_ve + 1 > self.T.max_row_items:  # the level a scan reduces in: its nodes and edges
            return self.T._fail(ERR_MAX_ROW_ITEMS, v + self.n_ve + 1)
        self.vn_state[v] = state
        self.vn_orig[v] = orig
        self.vn_edge[v] = -1
        self.vn_mat[v] = -1
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
        """Every reduction on lookahead ``la`` in the view, to a fixpoint: 0 or -1."""
        cdef bint changed = True
        cdef int32_t i, r, p, a, n, k, e, t, v, s
        while changed:
            changed = False
            i = 0
            while i < self.n_vn:
                s = self.vn_state[i]
                r = self.G.reductions_from(s, la)
                while r < self.G.rd_off[s + 1] and self.G.rd_la[r] == la:
                    p = self.G.rd_prod[r]
                    r += 1
                    a = self.G.prod_lhs[p]
                    if a < 0:
                        continue  # the augmented production: acceptance, read by the close
                    self.reductions += 1
                    if self._ancestors(-(i + 2), self.G.prod_len[p], &n) < 0:
                        return -1
                    for k in range(n):
                        e = self.fr_a[k]
                        t = self.G.goto(self._ref_state(e), a)
                        if t < 0:
                            continue  # (a reduction's goto always exists in an LR automaton)
                        v = self.by_state[t]
                        if v < 0:
                            v = self._vn_new(t, -1)
                            if v < 0 or self._vn_add_edge(v, e) < 0:
                                return -1
                            changed = True
                        elif not self._vn_has_edge(v, e):
                            if self._vn_add_edge(v, e) < 0:
                                return -1
                            changed = True
                i += 1
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
                    ok = self._row_shifts(j, c)
                    if not ok:
                        if self._view_reset(j) < 0 or self._reduce(c) < 0:
                            return -1
                        ok = self._shifts_on(c)
                    if ok:
                        self.T.allowed[n_allowed] = c
                        n_allowed += 1
            h += 1 + self.items[h].origin
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

    cdef int c_fill(self, word_t* mask, int32_t n_words) noexcept nogil:
        """The mask from the grammar's store when a stored one was made from what this
        stack shows (the lexer state, the top row's start state, the LR states down to
        the depth that fill read), else llguidance's fill, stored (see the module doc)."""
        cdef int32_t e, w
        cdef int r
        cdef int64_t hits
        cdef const word_t* stored
        if self.G.max_store_bytes <= 0 or self.walk_trie is None:
            return EarleyParser.c_fill(self, mask, n_words)
        if n_words == self.G.st_words:
            e = self._store_lookup()
            if e >= 0:
                stored = &self.G.st_masks[<int64_t>e * n_words]
                for w in range(n_words):
                    mask[w] |= stored[w]
                self.G.store_hits += 1
                self.work.tokens_cached += self.walk_trie.num_tokens
                self.last_visited = 0
                return self.G.st_sliced[e]
        hits = self.cache_hits
        # rows kept from before (built, truncated) were read by another operation: made
        # again, so that every read of the stack below is this fill's, seen by track_min
        self.rows_valid = self.n_rows
        self.track_base = self.n_items
        self.track_min = self.n_items
        r = EarleyParser.c_fill(self, mask, n_words)
        self.track_base = -1
        if r < 0 or self.cache_hits != hits:
            return r  # (a copy of the parser's own last mask: what it read is not known)
        if self._store_insert(mask, n_words, r == 1) < 0:
            return -1
        return r

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

    cdef int _store_insert(self, const word_t* mask, int32_t n_words, bint sliced) noexcept nogil:
        """Store the mask a fill just made, keyed by what it read: 0 (stored, or not
        storable: a stack not linear where it was read, the store full), -1 on memory."""
        cdef int64_t top = self._top_header(), h, need, cap
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
                    or resize(<void**>&self.G.st_masks, cap * n_words, sizeof(word_t)) < 0):
                return self.T._fail(ERR_MEMORY, e + 1)
            self.G.st_cap = cap
        if self.G.st_states_n + d > self.G.st_states_cap and grow(
                <void**>&self.G.st_states, &self.G.st_states_cap, self.G.st_states_n + d, sizeof(int32_t)) < 0:
            return self.T._fail(ERR_MEMORY, self.G.st_states_n + d)
        self.G.st_words = n_words
        memcpy(&self.G.st_masks[<int64_t>e * n_words], mask, n_words * sizeof(word_t))
        memcpy(&self.G.st_states[self.G.st_states_n], self.chain, d * sizeof(int32_t))
        self.G.st_soff[e] = self.G.st_states_n
        self.G.st_states_n += d
        self.G.st_depth[e] = d
        self.G.st_ls0[e] = self.row_ls[self.n_rows - 1]
        self.G.st_sliced[e] = sliced
        self.G.st_next[e] = i64map_get(&self.G.st_index, pair_key(self.ls, self.chain[0]))
        if i64map_put(&self.G.st_index, pair_key(self.ls, self.chain[0]), e) < 0:
            return self.T._fail(ERR_MEMORY, e + 1)
        self.G.st_n += 1
        self.G.store_inserts += 1
        self.G.store_bytes += need
        return 0

    # ------------------------------------------------------------ python --

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
