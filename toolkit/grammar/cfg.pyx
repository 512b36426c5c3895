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

cnp.import_array()

__all__ = ["trim"]


cdef int32_t* _count_fixpoint(int32_t n_sym, int32_t n_prod, const int32_t[::1] lhs, const int32_t[::1] off,
                              const int32_t[::1] syms, uint8_t* known) noexcept nogil:
    """Adds to ``known`` (per symbol) the lhs of every production whose symbols are
    all known, until none is left (-1 symbols never are).  Returns NULL, or a non-NULL
    sentinel when out of memory."""
    cdef int32_t* missing = <int32_t*>calloc(n_prod + 1, sizeof(int32_t))
    cdef int32_t* uses_off = <int32_t*>calloc(n_sym + 2, sizeof(int32_t))
    cdef int32_t* uses = <int32_t*>malloc(sizeof(int32_t) * (off[n_prod] + 1))
    cdef int32_t* stack = <int32_t*>malloc(sizeof(int32_t) * (n_sym + 1))
    cdef int32_t p, j, s, top = 0, a
    cdef int64_t e
    if missing == NULL or uses_off == NULL or uses == NULL or stack == NULL:
        free(missing); free(uses_off); free(uses); free(stack)
        return <int32_t*>1
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
    return NULL


def trim(int32_t n_nt, int32_t n_term, const int32_t[::1] lhs, const int32_t[::1] off, const int32_t[::1] syms):
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
    cdef int32_t n_prod = lhs.shape[0], n_sym = n_nt + n_term, p, j, s, a, m = 0, t = 0, top = 0, n_dr = 0, n_kept = 0
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
    cdef uint8_t* prod_known = <uint8_t*>calloc(n_sym + 1, 1)
    cdef uint8_t* kept = <uint8_t*>calloc(n_prod + 1, 1)
    cdef uint8_t* reach = <uint8_t*>calloc(n_nt + 1, 1)
    cdef int32_t* first = <int32_t*>calloc(n_nt + 1, sizeof(int32_t))
    cdef int32_t* stack = <int32_t*>malloc(sizeof(int32_t) * (n_nt + 1))
    cdef int32_t* new_id = <int32_t*>malloc(sizeof(int32_t) * (n_sym + 1))
    cdef uint8_t* nul = NULL
    cdef int32_t* failed = NULL
    if prod_known == NULL or kept == NULL or reach == NULL or first == NULL or stack == NULL or new_id == NULL:
        free(prod_known); free(kept); free(reach); free(first); free(stack); free(new_id)
        raise MemoryError("trim: out of memory")
    with nogil:
        for s in range(n_nt, n_sym):
            prod_known[s] = 1
        failed = _count_fixpoint(n_sym, n_prod, lhs, off, syms, prod_known)
        if failed == NULL:
            for p in range(n_prod):  # productions of a nonterminal: first[a] .. first[a + 1]
                first[lhs[p] + 1] = p + 1
            for a in range(n_nt):
                if first[a + 1] < first[a]:
                    first[a + 1] = first[a]
            for p in range(n_prod):
                kept[p] = 1
                for j in range(off[p], off[p + 1]):
                    s = syms[j]
                    if s < 0 or not prod_known[s]:
                        kept[p] = 0
                        break
            if n_nt and prod_known[0]:
                reach[0] = 1
                stack[0] = 0
                top = 1
            while top:
                top -= 1
                a = stack[top]
                for p in range(first[a], first[a + 1]):
                    if kept[p]:
                        for j in range(off[p], off[p + 1]):
                            s = syms[j]
                            if s < n_nt and not reach[s]:
                                reach[s] = 1
                                stack[top] = s
                                top += 1
            for s in range(n_sym):
                new_id[s] = -1
            for p in range(n_prod):
                if kept[p] and not reach[lhs[p]]:
                    kept[p] = 0
                if kept[p]:
                    n_kept += 1
                    n_dr += off[p + 1] - off[p] + 1
                    for j in range(off[p], off[p + 1]):
                        if syms[j] >= n_nt:
                            new_id[syms[j]] = 0  # used
            reach[0] = 1  # the start stays, with no productions when the language is empty
            for a in range(n_nt):
                if reach[a]:
                    new_id[a] = m
                    m += 1
            for s in range(n_nt, n_sym):
                if new_id[s] == 0:
                    new_id[s] = m + t
                    t += 1
    free(stack)
    if failed != NULL:
        free(prod_known); free(kept); free(reach); free(first); free(new_id)
        raise MemoryError("trim: out of memory")
    nt_map = np.empty(m, dtype=np.int32)
    term_map = np.empty(t, dtype=np.int32)
    dr_sym = np.empty(n_dr, dtype=np.int32)
    dr_lhs = np.empty(n_dr, dtype=np.int32)
    nt_off = np.empty(m + 1, dtype=np.int32)
    nt_drs = np.empty(n_kept, dtype=np.int32)
    nullable = np.zeros(m + t, dtype=np.uint8)
    new_lhs = np.empty(n_kept, dtype=np.int32)
    new_off = np.empty(n_kept + 1, dtype=np.int32)
    cdef int32_t[::1] ntm = nt_map, tm = term_map, ds = dr_sym, dl = dr_lhs, no = nt_off, nd = nt_drs
    cdef int32_t[::1] nl = new_lhs, nof = new_off
    cdef uint8_t[::1] nv = nullable
    cdef int32_t k = 0, d = 0, q = 0
    with nogil:
        for a in range(n_nt):
            if reach[a]:
                ntm[new_id[a]] = a
        for s in range(n_nt, n_sym):
            if new_id[s] >= 0:
                tm[new_id[s] - m] = s - n_nt
        no[0] = 0
        for a in range(n_nt):
            if not reach[a]:
                continue
            for p in range(first[a], first[a + 1]):
                if not kept[p]:
                    continue
                nd[k] = d
                nl[k] = new_id[a]
                nof[k] = q
                k += 1
                for j in range(off[p], off[p + 1]):
                    ds[d] = new_id[syms[j]]
                    dl[d] = new_id[a]
                    d += 1
                ds[d] = -1  # the production's end
                dl[d] = new_id[a]
                d += 1
                q = d - k  # symbols so far: dotted rules less one end per production
            no[new_id[a] + 1] = k
        nof[k] = q
    free(prod_known); free(kept); free(reach); free(first); free(new_id)
    # nullable over the kept productions (their symbols without the end markers)
    new_syms = dr_sym[dr_sym >= 0]
    nul = <uint8_t*>calloc(m + t + 1, 1)
    if nul == NULL:
        raise MemoryError("trim: out of memory")
    cdef const int32_t[::1] nsv = new_syms
    with nogil:
        failed = _count_fixpoint(m + t, n_kept, nl, nof, nsv, nul)
        if failed == NULL:
            for s in range(m + t):
                nv[s] = nul[s]
    free(nul)
    if failed != NULL:
        raise MemoryError("trim: out of memory")
    return nt_map, term_map, dr_sym, dr_lhs, nt_off, nt_drs, nullable
