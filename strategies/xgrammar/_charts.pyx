"""The byte-level Earley parser of strategy ``xgrammar``.

Scannerless Earley over bytes, the algorithm of :mod:`toolkit.grammar.earley` (the
oracle) in C: an item is a dotted rule ``r`` (an index into ``dr_sym``, where each
production's symbols are followed by ``-1``) and an origin chart; a *term*
``(t, o, s)`` is terminal ``t`` predicted at chart ``o``, its DFA in state ``s``.  A
byte advances the terms; a term whose state accepts completes ``t`` for the items of
chart ``o`` waiting on it.  Nullable symbols follow Aycock & Horspool.  Charts are
stacked, so undoing bytes is truncation.

:class:`RuleTables` holds a grammar as flat arrays; :class:`Charts` parses over them.
Besides a parse from the grammar's start (:meth:`Charts.start_root`), a Charts runs
the *base parses* of the mask cache (:mod:`strategies.xgrammar._tables`): chart 0
holds one item whose origin is ``BASE`` and the term of its next terminal, and the
completion of that item *pops* out of the rule (``popped``), where the base parse
knows nothing more.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport (BYTES, ERR_MAX_CHART_ITEMS, ERR_MEMORY, grow, i64map_clear, i64map_free,
                                 i64map_get, i64map_init, i64map_intern, pair_key, resize)
from toolkit.core.ids cimport DEAD, state_t, symbol_t

from toolkit.core.classform import check_class_form
from toolkit.core.errors import error_of

cnp.import_array()

__all__ = ["RuleTables", "Charts"]


def _terminal_arrays(terminals, int n_nt) -> dict:
    """The terminals' DFAs (class form) concatenated: per terminal ``(table, classes,
    accepting, start)`` in, the flat arrays of :class:`RuleTables` out."""
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
    return {"t_table": np.concatenate(tabs) if tabs else np.zeros(1, np.int32),
            "t_tab_off": np.asarray(tab_off, dtype=np.int64),
            "t_k": np.asarray(ks or [1], dtype=np.int32),
            "t_cls": np.concatenate(clss) if clss else np.zeros(BYTES, np.uint8),
            "t_acc_off": np.asarray(acc_off, dtype=np.int64),
            "t_acc": np.concatenate(accs) if accs else np.zeros(1, np.uint8),
            "t_start": np.asarray(starts or [0], dtype=np.int32)}


cdef class RuleTables:
    """A grammar's dotted rules, terminal DFAs (class form) and follow sets, as the C
    arrays a :class:`Charts` parses over."""

    def __init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, int n_nt, int start_nt, terminals, follow,
                 *, int max_items):
        """``terminals``: per terminal symbol ``n_nt + i``, ``(table, classes, accepting,
        start)``; ``follow``: bool ``[n_nt, 256]``."""
        if max_items < 1:
            raise ValueError(f"max_items must be positive, got {max_items}")
        dr_sym = np.ascontiguousarray(dr_sym, dtype=np.int32)
        dr_lhs = np.ascontiguousarray(dr_lhs, dtype=np.int32)
        nt_off = np.ascontiguousarray(nt_off, dtype=np.int32)
        nt_drs = np.ascontiguousarray(nt_drs, dtype=np.int32)
        nullable = np.ascontiguousarray(nullable, dtype=np.uint8)
        follow = np.ascontiguousarray(follow, dtype=np.uint8).reshape(n_nt, BYTES)
        _check_rules(dr_sym, dr_lhs, nt_off, nt_drs, nullable, n_nt, start_nt, len(terminals))
        keep = {"dr_sym": dr_sym, "dr_lhs": dr_lhs, "nt_off": nt_off, "nt_drs": nt_drs, "nullable": nullable,
                **_terminal_arrays(terminals, n_nt), "follow": follow}
        self._keep = keep
        self.n_nt, self.n_sym, self.n_dr, self.start_nt = n_nt, n_nt + len(terminals), dr_sym.shape[0], start_nt
        self.max_items = max_items
        self.dr_sym = <const symbol_t*>cnp.PyArray_DATA(dr_sym)
        self.dr_lhs = <const symbol_t*>cnp.PyArray_DATA(dr_lhs)
        self.nt_off = <const int32_t*>cnp.PyArray_DATA(nt_off)
        self.nt_drs = <const int32_t*>cnp.PyArray_DATA(nt_drs)
        self.nullable = <const uint8_t*>cnp.PyArray_DATA(nullable)
        self.t_table = <const state_t*>cnp.PyArray_DATA(keep["t_table"])
        self.t_tab_off = <const int64_t*>cnp.PyArray_DATA(keep["t_tab_off"])
        self.t_k = <const int32_t*>cnp.PyArray_DATA(keep["t_k"])
        self.t_cls = <const uint8_t*>cnp.PyArray_DATA(keep["t_cls"])
        self.t_acc_off = <const int64_t*>cnp.PyArray_DATA(keep["t_acc_off"])
        self.t_acc = <const uint8_t*>cnp.PyArray_DATA(keep["t_acc"])
        self.t_start = <const state_t*>cnp.PyArray_DATA(keep["t_start"])
        self.follow = <const uint8_t*>cnp.PyArray_DATA(follow)

    cdef object error(self, int code):
        """The exception of a chart op's error code (a full chart is reported as
        ``max_items + 1`` items)."""
        return error_of(code, self.max_items + 1 if code == ERR_MAX_CHART_ITEMS else 0, self.max_items, "xgrammar")

    def grammar_bytes(self):
        """The bytes of the grammar's arrays."""
        return int(sum(a.nbytes for a in self._keep.values()))


def _check_rules(dr_sym, dr_lhs, nt_off, nt_drs, nullable, int n_nt, int start_nt, int n_t):
    """Raise ValueError unless the dotted rules, their lhs and the per-nonterminal
    lists fit each other and the symbols."""
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


cdef class Charts:
    """An Earley parse over bytes: stacked charts of items and terms.

    ``Charts(rules)`` starts at the grammar's start; ``base=True`` leaves it empty, for
    the positions' base parses (``start_base``) or a copy to fill.
    """

    def __cinit__(self, RuleTables rules not None, bint base=False):
        self.G = rules
        self.cap_items = 256
        self.cap_terms = 64
        self.cap_charts = 64
        self.items = <Item*>malloc(self.cap_items * sizeof(Item))
        self.terms = <Term*>malloc(self.cap_terms * sizeof(Term))
        self.ch_items = <int64_t*>malloc((self.cap_charts + 1) * sizeof(int64_t))
        self.ch_terms = <int64_t*>malloc((self.cap_charts + 1) * sizeof(int64_t))
        self.popped = <uint8_t*>malloc(self.cap_charts + 1)
        self.nt_stamp = <uint32_t*>malloc(max(1, rules.n_nt) * sizeof(uint32_t))
        self.t_stamp = <uint32_t*>malloc(max(1, rules.n_sym) * sizeof(uint32_t))
        if (self.items == NULL or self.terms == NULL or self.ch_items == NULL or self.ch_terms == NULL
                or self.popped == NULL or self.nt_stamp == NULL or self.t_stamp == NULL
                or i64map_init(&self.seen, 1024) < 0 or i64map_init(&self.done, 256) < 0):
            raise MemoryError()
        memset(self.nt_stamp, 0, max(1, rules.n_nt) * sizeof(uint32_t))
        memset(self.t_stamp, 0, max(1, rules.n_sym) * sizeof(uint32_t))
        self.stamp = 0
        if not base:
            rc = self.start_root()
            if rc < 0:
                raise self.G.error(rc)

    def __dealloc__(self):
        free(self.items)
        free(self.terms)
        free(self.ch_items)
        free(self.ch_terms)
        free(self.popped)
        free(self.nt_stamp)
        free(self.t_stamp)
        i64map_free(&self.seen)
        i64map_free(&self.done)

    # ------------------------------------------------------------ C core --

    cdef int _open_chart(self) noexcept nogil:
        """Start chart n_charts (not counted until push closes it)."""
        cdef int32_t c
        if self.n_charts + 2 > self.cap_charts:
            c = self.cap_charts * 2
            if (resize(<void**>&self.ch_items, c + 1, sizeof(int64_t)) < 0
                    or resize(<void**>&self.ch_terms, c + 1, sizeof(int64_t)) < 0
                    or resize(<void**>&self.popped, c + 1, 1) < 0):
                return ERR_MEMORY
            self.cap_charts = c
        self.ch_items[self.n_charts] = self.n_items
        self.ch_terms[self.n_charts] = self.n_terms
        self.popped[self.n_charts] = 0
        i64map_clear(&self.seen)
        i64map_clear(&self.done)
        self.stamp += 1
        if self.stamp == 0:  # wrapped: no symbol is predicted under a new stamp
            memset(self.nt_stamp, 0, max(1, self.G.n_nt) * sizeof(uint32_t))
            memset(self.t_stamp, 0, max(1, self.G.n_sym) * sizeof(uint32_t))
            self.stamp = 1
        return 0

    cdef int _add(self, int32_t r, int32_t o) noexcept nogil:
        """Add item (r, o) to the chart being built unless it is there."""
        cdef int64_t key = pair_key(r, o)
        cdef int32_t n = <int32_t>(self.n_items - self.ch_items[self.n_charts]), v
        if n >= self.G.max_items:  # full: only an item it holds already is no error
            return 0 if i64map_get(&self.seen, key) >= 0 else ERR_MAX_CHART_ITEMS
        if self.n_items == self.cap_items and grow(<void**>&self.items, &self.cap_items, self.n_items + 1,
                                                   sizeof(Item)) < 0:
            return ERR_MEMORY
        v = i64map_intern(&self.seen, key, n)  # the index it has, or n when it is new
        if v != n:
            return ERR_MEMORY if v < 0 else 0
        self.items[self.n_items].r = r
        self.items[self.n_items].o = o
        self.n_items += 1
        return 0

    cdef int _add_term(self, symbol_t t, int32_t o, state_t s) noexcept nogil:
        if self.n_terms == self.cap_terms and grow(<void**>&self.terms, &self.cap_terms, self.n_terms + 1,
                                                   sizeof(Term)) < 0:
            return ERR_MEMORY
        self.terms[self.n_terms].t = t
        self.terms[self.n_terms].o = o
        self.terms[self.n_terms].s = s
        self.n_terms += 1
        return 0

    cdef int _completed_before(self, symbol_t sym, int32_t o) noexcept nogil:
        """1 when sym was completed from closed chart o into the chart being built
        already, else 0 (and it is now), or ERR_MEMORY."""
        cdef int64_t n = self.done.n
        if i64map_intern(&self.done, pair_key(sym, o), 0) < 0:
            return ERR_MEMORY
        return 1 if self.done.n == n else 0

    cdef int _complete(self, symbol_t sym, int32_t o) noexcept nogil:
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
            if self.G.dr_sym[r] == sym:
                rc = self._add(r + 1, self.items[i].o)
                if rc < 0:
                    return rc
                if o == self.n_charts:
                    end = self.n_items
            i += 1
        return 0

    cdef int _closure(self) noexcept nogil:
        """Predict and complete over the chart being built until nothing is added."""
        cdef int32_t k = self.n_charts, r, o, j
        cdef symbol_t x
        cdef int64_t i = self.ch_items[k]
        cdef int rc
        while i < self.n_items:
            r = self.items[i].r
            o = self.items[i].o
            i += 1
            x = self.G.dr_sym[r]
            if x < 0:
                if o == BASE:
                    self.popped[k] = 1
                    continue
                rc = self._complete(self.G.dr_lhs[r], o)
            elif x < self.G.n_nt:
                rc = 0
                if self.nt_stamp[x] != self.stamp:
                    self.nt_stamp[x] = self.stamp
                    for j in range(self.G.nt_off[x], self.G.nt_off[x + 1]):
                        rc = self._add(self.G.nt_drs[j], k)
                        if rc < 0:
                            return rc
                if self.G.nullable[x]:
                    rc = self._add(r + 1, o)
            else:
                rc = 0
                if self.t_stamp[x] != self.stamp:
                    self.t_stamp[x] = self.stamp
                    rc = self._add_term(x, k, self.G.t_start[x - self.G.n_nt])
                    if rc < 0:
                        return rc
                if self.G.nullable[x]:
                    rc = self._add(r + 1, o)
            if rc < 0:
                return rc
        return 0

    cdef int start_root(self) noexcept nogil:
        """Chart 0 of a parse from the grammar's start (its items are not counted as
        work: a parser just made has done none)."""
        cdef int rc
        cdef int32_t j
        self.n_items = 0
        self.n_terms = 0
        self.n_charts = 0
        rc = self._open_chart()
        if rc < 0:
            return rc
        for j in range(self.G.nt_off[self.G.start_nt], self.G.nt_off[self.G.start_nt + 1]):
            rc = self._add(self.G.nt_drs[j], 0)
            if rc < 0:
                return rc
        rc = self._closure()
        if rc < 0:
            return rc
        self.n_charts = 1
        self.ch_items[1] = self.n_items
        self.ch_terms[1] = self.n_terms
        return 0

    cdef void start_base(self, int32_t r, state_t s) noexcept nogil:
        """Chart 0 of position (r, s)'s base parse: the item (r, BASE) and the term of
        r's terminal in state s."""
        self.n_items = 1
        self.n_terms = 1
        self.items[0].r = r
        self.items[0].o = BASE
        self.terms[0].t = self.G.dr_sym[r]
        self.terms[0].o = 0
        self.terms[0].s = s
        self.ch_items[0] = 0
        self.ch_terms[0] = 0
        self.popped[0] = 0
        self.n_charts = 1
        self.ch_items[1] = 1
        self.ch_terms[1] = 1

    cdef int push(self, uint8_t b) noexcept nogil:
        """Read byte b: 0 when nothing lives (no chart added), else a new chart and
        bit 0 set when a term lives, bit 1 when the base item completed.  Counts one
        lexer step per term of the last chart (its DFA's transition on b, dead or not)
        and the items the new chart got (kept or not)."""
        cdef int64_t i, start = self.ch_terms[self.n_charts - 1], end = self.n_terms
        cdef symbol_t t, ti
        cdef state_t s2
        cdef int rc = self._open_chart()
        if rc < 0:
            return rc
        for i in range(start, end):
            t = self.terms[i].t
            ti = t - self.G.n_nt
            s2 = self.G.step(ti, self.terms[i].s, b)
            if s2 == DEAD:
                continue
            rc = self._add_term(t, self.terms[i].o, s2)
            if rc < 0:
                break
            if self.G.t_acc[self.G.t_acc_off[ti] + s2]:
                rc = self._complete(t, self.terms[i].o)
                if rc < 0:
                    break
        if rc >= 0:
            rc = self._closure()
        self.work.lexer_steps += end - start
        self.work.earley_items += self.n_items - self.ch_items[self.n_charts]
        if rc < 0 or (self.n_terms == end and not self.popped[self.n_charts]):
            self.n_items = self.ch_items[self.n_charts]
            self.n_terms = self.ch_terms[self.n_charts]
            return rc
        self.n_charts += 1
        self.ch_items[self.n_charts] = self.n_items
        self.ch_terms[self.n_charts] = self.n_terms
        return (self.n_terms > end) | (self.popped[self.n_charts - 1] << 1)

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

    cdef bint accepting(self) noexcept nogil:
        """The bytes read are a sentence: the last chart completed the start from chart 0."""
        cdef int64_t i
        cdef int32_t r
        for i in range(self.ch_items[self.n_charts - 1], self.n_items):
            r = self.items[i].r
            if self.G.dr_sym[r] < 0 and self.G.dr_lhs[r] == self.G.start_nt and self.items[i].o == 0:
                return True
        return False

    cdef int copy_to(self, Charts other) except -1:
        """Make ``other`` (made with ``base=True`` over the same rules) hold the same
        charts; its work counters are left alone."""
        cdef int64_t ni = max(1, self.n_items), nt = max(1, self.n_terms)
        if (resize(<void**>&other.items, ni, sizeof(Item)) < 0
                or resize(<void**>&other.terms, nt, sizeof(Term)) < 0
                or resize(<void**>&other.ch_items, self.cap_charts + 1, sizeof(int64_t)) < 0
                or resize(<void**>&other.ch_terms, self.cap_charts + 1, sizeof(int64_t)) < 0
                or resize(<void**>&other.popped, self.cap_charts + 1, 1) < 0):
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
        return 0

    # ------------------------------------------------------------ Python API --

    def push_bytes(self, const uint8_t[::1] data):
        """Read all of ``data`` (True) or nothing (False)."""
        cdef int rc
        if data.shape[0] == 0:
            return True
        with nogil:
            rc = self.push_data(&data[0], data.shape[0])
        if rc < 0:
            raise self.G.error(rc)
        return rc == 1

    def pop_bytes(self, int32_t n):
        """Undo the last ``n`` bytes read."""
        if not 0 <= n < self.n_charts:
            raise ValueError(f"cannot undo {n} bytes, {self.n_charts - 1} read")
        self.pop(n)

    def is_accepting(self):
        """True when the bytes read are a sentence of the grammar."""
        return bool(self.accepting())

    @property
    def n_bytes(self):
        """Bytes read since the start."""
        return self.n_charts - 1

    @property
    def chart_sizes(self):
        """``(items, terms)`` of the last chart."""
        return (int(self.n_items - self.ch_items[self.n_charts - 1]),
                int(self.n_terms - self.ch_terms[self.n_charts - 1]))

    def reset(self):
        """Back to the grammar's start."""
        cdef int rc = self.start_root()
        if rc < 0:
            raise self.G.error(rc)
