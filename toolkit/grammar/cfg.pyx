"""A context-free grammar's bookkeeping in C: productive and reachable rules, nullable
symbols, and the dotted-rule layout the Earley parsers read.

A strategy numbers its grammar's symbols (nonterminals ``0..n_nt-1``, the start 0,
then terminals) and passes the productions as flat int32 arrays; :func:`trim` does
what :func:`toolkit.grammar.earley.derives` and :func:`toolkit.grammar.earley.dotted_rules` do over
Python objects (the fixpoints count, per production, its symbols not yet known
productive or nullable, so each is linear), in one call.  Used where a compile's time
is the measurement (llguidance's TTFM): these loops were a tenth of it in Python.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport ERR_MEMORY
from toolkit.core.ids cimport symbol_t

from toolkit.core.errors import error_of

cnp.import_array()

__all__ = ["trim"]


cdef int _count_fixpoint(int32_t n_sym, int32_t n_prod, const symbol_t* lhs, const int32_t* off,
                         const symbol_t* syms, uint8_t* known) noexcept nogil:
    """Adds to ``known`` (per symbol) the lhs of every production whose symbols are
    all known, until none is left (-1 symbols never are).  0, or ERR_MEMORY."""
    cdef int32_t* missing = <int32_t*>calloc(n_prod + 1, sizeof(int32_t))
    cdef int32_t* uses_off = <int32_t*>calloc(n_sym + 2, sizeof(int32_t))
    cdef int32_t* uses = <int32_t*>malloc(sizeof(int32_t) * (off[n_prod] + 1))
    cdef symbol_t* stack = <symbol_t*>malloc(sizeof(symbol_t) * (n_sym + 1))
    cdef int32_t p, j, top = 0
    cdef symbol_t s, a
    cdef int64_t e
    if missing == NULL or uses_off == NULL or uses == NULL or stack == NULL:
        free(missing); free(uses_off); free(uses); free(stack)
        return ERR_MEMORY
    for p in range(n_prod):
        for j in range(off[p], off[p + 1]):
            s = syms[j]
            if s < 0 or not known[s]:
                missing[p] += 1
                if s >= 0:
                    uses_off[s + 2] += 1
    for s in range(n_sym):
        uses_off[s + 2] += uses_off[s + 1]
    for p in range(n_prod):
        if missing[p] <= 0:
            continue
        for j in range(off[p], off[p + 1]):
            s = syms[j]
            if s >= 0 and not known[s]:
                uses[uses_off[s + 1]] = p
                uses_off[s + 1] += 1
    for p in range(n_prod):
        if missing[p] == 0 and not known[lhs[p]]:
            known[lhs[p]] = 1
            stack[top] = lhs[p]
            top += 1
    while top:
        top -= 1
        s = stack[top]
        for e in range(uses_off[s], uses_off[s + 1]):
            p = uses[e]
            missing[p] -= 1
            if missing[p] == 0:
                a = lhs[p]
                if not known[a]:
                    known[a] = 1
                    stack[top] = a
                    top += 1
    free(missing); free(uses_off); free(uses); free(stack)
    return 0


cdef class _Trimmer:
    """The useful part of one grammar (fields in cfg.pxd)."""

    def __dealloc__(self):
        free(self.productive)
        free(self.kept)
        free(self.reach)
        free(self.first)
        free(self.stack)
        free(self.new_id)

    cdef int _find(self) noexcept nogil:
        """The productive symbols, the kept productions and the reachable nonterminals,
        numbered (nonterminals, then terminals); 0, or ERR_MEMORY."""
        cdef int32_t p, j
        cdef symbol_t s
        for s in range(self.n_nt, self.n_sym):  # terminals are productive
            self.productive[s] = 1
        if _count_fixpoint(self.n_sym, self.n_prod, self.lhs, self.off, self.syms, self.productive) < 0:
            return ERR_MEMORY
        for p in range(self.n_prod):  # productions of a nonterminal: first[a] .. first[a + 1]
            self.first[self.lhs[p] + 1] = p + 1
        for s in range(self.n_nt):
            if self.first[s + 1] < self.first[s]:
                self.first[s + 1] = self.first[s]
        for p in range(self.n_prod):
            self.kept[p] = 1
            for j in range(self.off[p], self.off[p + 1]):
                s = self.syms[j]
                if s < 0 or not self.productive[s]:
                    self.kept[p] = 0
                    break
        self._reachable()
        self._number()
        return 0

    cdef void _reachable(self) noexcept nogil:
        """The nonterminals reachable from the start through kept productions (none when
        the start is not productive)."""
        cdef int32_t p, j, top = 0
        cdef symbol_t a, s
        if self.n_nt and self.productive[0]:
            self.reach[0] = 1
            self.stack[0] = 0
            top = 1
        while top:
            top -= 1
            a = self.stack[top]
            for p in range(self.first[a], self.first[a + 1]):
                if self.kept[p]:
                    for j in range(self.off[p], self.off[p + 1]):
                        s = self.syms[j]
                        if s < self.n_nt and not self.reach[s]:
                            self.reach[s] = 1
                            self.stack[top] = s
                            top += 1

    cdef void _number(self) noexcept nogil:
        """Keep the productions of reachable nonterminals; number the kept nonterminals
        (the start first), then the terminals they use, each in increasing order."""
        cdef int32_t p, j
        cdef symbol_t s
        for s in range(self.n_sym):
            self.new_id[s] = -1
        for p in range(self.n_prod):
            if self.kept[p] and not self.reach[self.lhs[p]]:
                self.kept[p] = 0
            if self.kept[p]:
                self.n_kept += 1
                self.n_dr += self.off[p + 1] - self.off[p] + 1
                for j in range(self.off[p], self.off[p + 1]):
                    if self.syms[j] >= self.n_nt:
                        self.new_id[self.syms[j]] = 0  # used
        self.reach[0] = 1  # the start stays, with no productions when the language is empty
        for s in range(self.n_nt):
            if self.reach[s]:
                self.new_id[s] = self.m
                self.m += 1
        for s in range(self.n_nt, self.n_sym):
            if self.new_id[s] == 0:
                self.new_id[s] = self.m + self.t
                self.t += 1

    cdef void _layout(self, symbol_t* nt_map, symbol_t* term_map, symbol_t* dr_sym, symbol_t* dr_lhs,
                      int32_t* nt_off, int32_t* nt_drs, symbol_t* new_lhs, int32_t* new_off) noexcept nogil:
        """The kept grammar in the new numbering: the old numbers of the new symbols, the
        dotted rules (each production's symbols, then -1 for its end), per nonterminal its
        productions (nt_off into nt_drs, each a production's first dotted rule), and the
        kept productions as flat arrays again (new_lhs, new_off) for the nullable fixpoint."""
        cdef int32_t p, j, k = 0, d = 0, q = 0
        cdef symbol_t a, s
        for a in range(self.n_nt):
            if self.reach[a]:
                nt_map[self.new_id[a]] = a
        for s in range(self.n_nt, self.n_sym):
            if self.new_id[s] >= 0:
                term_map[self.new_id[s] - self.m] = s - self.n_nt
        nt_off[0] = 0
        for a in range(self.n_nt):
            if not self.reach[a]:
                continue
            for p in range(self.first[a], self.first[a + 1]):
                if not self.kept[p]:
                    continue
                nt_drs[k] = d
                new_lhs[k] = self.new_id[a]
                new_off[k] = q
                k += 1
                for j in range(self.off[p], self.off[p + 1]):
                    dr_sym[d] = self.new_id[self.syms[j]]
                    dr_lhs[d] = self.new_id[a]
                    d += 1
                dr_sym[d] = -1  # the production's end
                dr_lhs[d] = self.new_id[a]
                d += 1
                q = d - k  # symbols so far: dotted rules less one end per production
            nt_off[self.new_id[a] + 1] = k
        new_off[k] = q


cdef _check(int32_t n_nt, int32_t n_sym, const symbol_t[::1] lhs, const int32_t[::1] off,
            const symbol_t[::1] syms):
    """ValueError unless the productions are as :func:`trim` reads them."""
    cdef int32_t n_prod = lhs.shape[0], p, j
    if n_nt < 1:
        raise ValueError("trim: the grammar needs its start nonterminal (n_nt >= 1)")
    if off.shape[0] != n_prod + 1 or (n_prod and (off[0] != 0 or off[n_prod] != syms.shape[0])):
        raise ValueError("trim: off must have one entry more than lhs, from 0 to len(syms)")
    for p in range(n_prod):
        if not 0 <= lhs[p] < n_nt or (p and lhs[p] < lhs[p - 1]) or off[p + 1] < off[p]:
            raise ValueError(f"trim: production {p}: lhs {lhs[p]} out of order or range, or a negative length")
    for j in range(syms.shape[0]):
        if not -1 <= syms[j] < n_sym:
            raise ValueError(f"trim: symbol {syms[j]} at {j} outside [-1, {n_sym})")


def trim(int32_t n_nt, int32_t n_term, const symbol_t[::1] lhs, const int32_t[::1] off, const symbol_t[::1] syms):
    """The grammar's useful part, renumbered, in the Earley parsers' layout.

    Production ``p`` is ``lhs[p] -> syms[off[p]:off[p + 1]]``, productions grouped by
    ``lhs`` in increasing order; a symbol is a nonterminal below ``n_nt``, a terminal
    ``n_nt + i`` (``i < n_term``; terminals are productive), or -1 (an unproductive
    symbol).  Kept: the productions whose symbols are all productive, of the
    nonterminals reachable from 0 through kept productions (none when 0 is not
    productive: the empty language).  Returns ``(nt_map, term_map, dr_sym, dr_lhs,
    nt_off, nt_drs, nullable)``: the old numbers of the kept nonterminals (0 first)
    and of the used terminals (``i``), both increasing, which the new numbering
    follows (nonterminals, then terminals); the dotted rules as
    :func:`toolkit.grammar.earley.dotted_rules` lays them out; and per new symbol whether it
    derives the empty string (``uint8``; terminals never do).
    """
    cdef int32_t n_prod = lhs.shape[0], n_sym = n_nt + n_term, m, t
    cdef _Trimmer G = _Trimmer()
    cdef int rc
    _check(n_nt, n_sym, lhs, off, syms)
    G.n_nt, G.n_sym, G.n_prod = n_nt, n_sym, n_prod
    G.lhs, G.off = &lhs[0] if n_prod else NULL, &off[0]
    G.syms = &syms[0] if syms.shape[0] else NULL
    G.productive = <uint8_t*>calloc(n_sym + 1, 1)
    G.kept = <uint8_t*>calloc(n_prod + 1, 1)
    G.reach = <uint8_t*>calloc(n_nt + 1, 1)
    G.first = <int32_t*>calloc(n_nt + 1, sizeof(int32_t))
    G.stack = <symbol_t*>malloc(sizeof(symbol_t) * (n_nt + 1))
    G.new_id = <symbol_t*>malloc(sizeof(symbol_t) * (n_sym + 1))
    if (G.productive == NULL or G.kept == NULL or G.reach == NULL or G.first == NULL or G.stack == NULL
            or G.new_id == NULL):
        raise MemoryError("trim: out of memory")
    with nogil:
        rc = G._find()
    if rc < 0:
        raise error_of(rc, n_sym + n_prod, None, "trim")
    m, t = G.m, G.t
    nt_map = np.empty(m, dtype=np.int32)
    term_map = np.empty(t, dtype=np.int32)
    dr_sym = np.empty(G.n_dr, dtype=np.int32)
    dr_lhs = np.empty(G.n_dr, dtype=np.int32)
    nt_off = np.empty(m + 1, dtype=np.int32)
    nt_drs = np.empty(G.n_kept, dtype=np.int32)
    nullable = np.zeros(m + t, dtype=np.uint8)
    new_lhs = np.empty(G.n_kept, dtype=np.int32)
    new_off = np.empty(G.n_kept + 1, dtype=np.int32)
    cdef symbol_t[::1] ntm = nt_map, tm = term_map, ds = dr_sym, dl = dr_lhs, nl = new_lhs
    cdef int32_t[::1] no = nt_off, nd = nt_drs, nof = new_off
    with nogil:
        G._layout(&ntm[0] if m else NULL, &tm[0] if t else NULL, &ds[0] if G.n_dr else NULL,
                  &dl[0] if G.n_dr else NULL, &no[0], &nd[0] if G.n_kept else NULL,
                  &nl[0] if G.n_kept else NULL, &nof[0])
    # nullable over the kept productions (their symbols without the end markers)
    new_syms = dr_sym[dr_sym >= 0]
    cdef const symbol_t[::1] nsv = new_syms
    cdef uint8_t[::1] nv = nullable
    with nogil:
        rc = _count_fixpoint(m + t, G.n_kept, &nl[0] if G.n_kept else NULL, &nof[0],
                             &nsv[0] if nsv.shape[0] else NULL, &nv[0] if m + t else NULL)
    if rc < 0:
        raise error_of(rc, m + t + G.n_kept, None, "trim")
    return nt_map, term_map, dr_sym, dr_lhs, nt_off, nt_drs, nullable
