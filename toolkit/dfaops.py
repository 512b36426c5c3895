"""Boolean operations on byte DFAs: intersection, union, difference.

A regex cannot say "a string of at most 64 characters that matches this pattern"
or "any key except these names" without blowing up, but the product of two
minimal DFAs says it directly.  :class:`toolkit.grammar.Terminal` uses these
operations for its ``also`` (intersection) and ``excluding`` (difference) parts;
Lark writes them with llguidance's ``&`` and ``~`` terminal operators.

The product is built breadth-first over the *joint* byte classes of the operands
(bytes that both DFAs treat alike), then minimized and canonically renumbered by
:mod:`toolkit.regex`, so the result is again a minimal :class:`ByteDFA`: equal
languages give equal arrays whichever way they were built.
"""

from __future__ import annotations

import functools
from array import array

import numpy as np

from toolkit.errors import LimitExceeded
from toolkit.regex import DEFAULT_MAX_STATES, ByteDFA, _freeze, _minimize, _SubsetDFA, compile_regex

__all__ = ["intersect", "union", "difference", "disjoint", "compile_boolean"]

_OPS = ("and", "or", "diff")


def _cuts(*dfas: ByteDFA) -> list[int]:
    """Byte intervals no operand tells apart: the starts of the runs, plus 256."""
    bounds = {0, 256}
    for d in dfas:
        t = np.asarray(d.transitions)
        change = np.nonzero((t[:, 1:] != t[:, :-1]).any(axis=0))[0] + 1
        bounds.update(int(x) for x in change)
    return sorted(bounds)


def _product(a: ByteDFA, b: ByteDFA, op: str, max_states: int) -> ByteDFA:
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}")
    cuts = _cuts(a, b)
    reps = np.array(cuts[:-1], dtype=np.int64)
    ta = np.asarray(a.transitions)[:, reps].tolist()
    tb = np.asarray(b.transitions)[:, reps].tolist()
    acc_a, acc_b = np.asarray(a.accepting).tolist(), np.asarray(b.accepting).tolist()
    k = len(reps)

    def dead(p: int, q: int) -> bool:
        if op == "and":
            return p == 0 or q == 0
        if op == "diff":
            return p == 0
        return p == 0 and q == 0

    def accepts(p: int, q: int) -> bool:
        if op == "and":
            return acc_a[p] and acc_b[q]
        if op == "diff":
            return acc_a[p] and not acc_b[q]
        return acc_a[p] or acc_b[q]

    ids: dict[tuple[int, int], int] = {}
    pairs: list[tuple[int, int]] = [(0, 0)]
    rows: list[list[int]] = [[0] * k]
    start = (a.start, b.start)
    if not dead(*start):
        ids[start] = 1
        pairs.append(start)
    i = 1
    while i < len(pairs):
        p, q = pairs[i]
        tp, tq = ta[p], tb[q]
        row = [0] * k
        for c in range(k):
            nxt = (tp[c], tq[c])
            if dead(*nxt):
                continue
            j = ids.get(nxt)
            if j is None:
                j = len(pairs)
                if j >= max_states:
                    raise LimitExceeded("max_states", j + 1, max_states)
                ids[nxt] = j
                pairs.append(nxt)
            row[c] = j
        rows.append(row)
        i += 1
    accepting = [False] + [bool(accepts(p, q)) for p, q in pairs[1:]]
    # Trim: states that cannot reach acceptance become the dead state.
    preds: list[list[int]] = [[] for _ in pairs]
    for s in range(1, len(pairs)):
        for t in set(rows[s]):
            if t:
                preds[t].append(s)
    live = [False] * len(pairs)
    stack = [s for s in range(1, len(pairs)) if accepting[s]]
    for s in stack:
        live[s] = True
    while stack:
        s = stack.pop()
        for r in preds[s]:
            if not live[r]:
                live[r] = True
                stack.append(r)
    if len(pairs) == 1 or not live[1]:
        return _freeze(np.zeros((1, 256), dtype=np.int32), np.zeros(1, dtype=bool), 0, None)
    # Renumber the live states (start stays 1) and hand over to the minimizer.
    new = [0] * len(pairs)
    order = [s for s in range(1, len(pairs)) if live[s]]
    for n_, s in enumerate(order, start=1):
        new[s] = n_
    out_rows: list[list[int]] = [[0] * k]
    succ: list[dict[int, int]] = [{}]
    for s in order:
        row = [new[t] for t in rows[s]]
        out_rows.append(row)
        d: dict[int, int] = {}
        for c, t in enumerate(row):
            if t:
                d[t] = d.get(t, 0) | (1 << c)
        succ.append(d)
    acc = [False] + [accepting[s] for s in order]
    table = array("i", [t for row in out_rows for t in row])
    trans, acc_arr, s0 = _minimize(_SubsetDFA(table, succ, acc, cuts))
    return _freeze(trans, acc_arr, s0, None)


def intersect(a: ByteDFA, b: ByteDFA, *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of ``L(a) ∩ L(b)``."""
    return _product(a, b, "and", max_states)


def union(a: ByteDFA, b: ByteDFA, *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of ``L(a) ∪ L(b)``."""
    return _product(a, b, "or", max_states)


def difference(a: ByteDFA, b: ByteDFA, *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of ``L(a) \\ L(b)``."""
    return _product(a, b, "diff", max_states)


def disjoint(a: ByteDFA, b: ByteDFA) -> bool:
    """True when no string is in both languages."""
    return intersect(a, b).is_empty()


@functools.lru_cache(maxsize=2048)
def compile_boolean(
    regex: str, also: tuple[str, ...] = (), excluding: tuple[str, ...] = (), *, max_states: int = DEFAULT_MAX_STATES
) -> ByteDFA:
    """``regex`` ∩ every ``also`` regex, minus every ``excluding`` regex, as one minimal DFA."""
    dfa = compile_regex(regex, max_states=max_states)
    for r in also:
        if dfa.is_empty():
            break
        dfa = intersect(dfa, compile_regex(r, max_states=max_states), max_states=max_states)
    if excluding and not dfa.is_empty():
        if len(excluding) == 1:
            ex = compile_regex(excluding[0], max_states=max_states)
        else:
            ex = compile_regex("|".join(f"(?:{r})" for r in excluding), max_states=max_states)
        dfa = difference(dfa, ex, max_states=max_states)
    return dfa
