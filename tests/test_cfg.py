"""toolkit.grammar.cfg.trim: the C bookkeeping of a grammar against the Python reference
(toolkit.grammar.earley.derives and dotted_rules) on random grammars, and its edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.grammar.cfg import trim
from toolkit.grammar.earley import derives, dotted_rules


def _reference(n_nt: int, n_term: int, prods: list[tuple[int, tuple[int, ...]]]):
    """What trim computes, the slow way: productive, reachable, renumbered, nullable."""
    live = derives(((a, [s if s >= 0 else "dead" for s in rhs]) for a, rhs in prods), set(range(n_nt, n_nt + n_term)))
    kept = [(a, rhs) for a, rhs in prods if all(s >= 0 and s in live for s in rhs)]
    reach = {0} if 0 in live else set()
    todo = list(reach)
    while todo:
        a = todo.pop()
        for b, rhs in kept:
            if b == a:
                for s in rhs:
                    if s < n_nt and s not in reach:
                        reach.add(s)
                        todo.append(s)
    reach.add(0)
    kept = [(a, rhs) for a, rhs in kept if a in reach]
    nts = sorted(reach)
    terms = sorted({s for _, rhs in kept for s in rhs if s >= n_nt})
    index = {s: i for i, s in enumerate(nts + terms)}
    rules = {a: [rhs for b, rhs in kept if b == a] for a in nts}
    arrays = dotted_rules(nts, rules, index)
    null = derives(((index[a], [index[s] for s in rhs]) for a, rhs in kept), set())
    nullable = np.zeros(len(nts) + len(terms), dtype=np.uint8)
    nullable[sorted(null)] = 1
    return nts, [t - n_nt for t in terms], arrays, nullable


def _flat(prods):
    lhs = np.asarray([a for a, _ in prods], dtype=np.int32)
    off = np.cumsum([0] + [len(r) for _, r in prods]).astype(np.int32)
    syms = np.asarray([s for _, r in prods for s in r], dtype=np.int32)
    return lhs, off, syms


@st.composite
def grammars(draw):
    n_nt, n_term = draw(st.integers(1, 6)), draw(st.integers(0, 4))
    sym = st.integers(-1, n_nt + n_term - 1)
    prods = []
    for a in range(n_nt):
        for _ in range(draw(st.integers(0, 3))):
            prods.append((a, tuple(draw(st.lists(sym, max_size=4)))))
    return n_nt, n_term, prods


@settings(max_examples=400, deadline=None)
@given(grammars())
def test_trim_is_the_python_bookkeeping(g) -> None:
    n_nt, n_term, prods = g
    nt_map, term_map, *arrays, nullable = trim(n_nt, n_term, *_flat(prods))
    nts, terms, want, want_null = _reference(n_nt, n_term, prods)
    assert nt_map.tolist() == nts and term_map.tolist() == terms
    for got, ref in zip(arrays, want, strict=True):
        assert got.tolist() == ref.tolist()
    assert nullable.tolist() == want_null.tolist()


def test_trim_cases() -> None:
    # 0 -> 1 T | 2 ; 1 -> ε ; 2 -> 2 T (unproductive) ; 3 -> T (unreachable)
    prods = [(0, (1, 4)), (0, (2,)), (1, ()), (2, (2, 4)), (3, (4,))]
    nt_map, term_map, dr_sym, dr_lhs, nt_off, nt_drs, nullable = trim(4, 1, *_flat(prods))
    assert nt_map.tolist() == [0, 1] and term_map.tolist() == [0]
    assert dr_sym.tolist() == [1, 2, -1, -1] and dr_lhs.tolist() == [0, 0, 0, 1]
    assert nt_off.tolist() == [0, 1, 2] and nt_drs.tolist() == [0, 3]
    assert nullable.tolist() == [0, 1, 0]
    # the empty language: the start alone, no productions
    nt_map, term_map, dr_sym, *_ = trim(2, 1, *_flat([(0, (1,)), (1, (1, 2))]))
    assert nt_map.tolist() == [0] and term_map.tolist() == [] and dr_sym.tolist() == []
    with pytest.raises(ValueError, match="out of order"):
        trim(2, 0, *_flat([(1, ()), (0, ())]))
    with pytest.raises(ValueError, match="outside"):
        trim(1, 0, *_flat([(0, (5,))]))
    with pytest.raises(ValueError, match="start nonterminal"):
        trim(0, 0, *_flat([]))
