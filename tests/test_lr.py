"""LR automata and the GLR recognizer (toolkit.grammar.lr) against an Earley recognizer
over terminal sequences, on hand-picked grammars (LALR(1), not LALR(1), ambiguous,
ε-rules with hidden left recursion) and on random ones."""

from __future__ import annotations

import random

import numpy as np
import pytest

from toolkit.core.errors import LimitExceeded
from toolkit.grammar.cfg import trim
from toolkit.grammar.lr import (
    GLRRecognizer,
    build_lr,
    flat_repetitions,
    left_recursive,
    productions_of,
)


def earley_prefix(n_nt: int, prods: list[tuple[int, tuple[int, ...]]], words: list[int]) -> tuple[bool, bool]:
    """(whether ``words`` starts a sentence, whether it is one): Earley over terminals
    (``n_nt + i``), start 0, obviously right and slow."""
    null = [False] * n_nt
    changed = True
    while changed:
        changed = False
        for lhs, rhs in prods:
            if not null[lhs] and all(s < n_nt and null[s] for s in rhs):
                null[lhs] = changed = True
    sets: list[set[tuple[int, int, int]]] = []

    def close(items: set, k: int) -> set:
        todo = list(items)
        while todo:
            p, d, o = todo.pop()
            rhs = prods[p][1]
            new = []
            if d < len(rhs) and rhs[d] < n_nt:
                new += [(q, 0, k) for q, (lhs, _) in enumerate(prods) if lhs == rhs[d]]
                if null[rhs[d]]:
                    new.append((p, d + 1, o))
            elif d == len(rhs):
                lhs = prods[p][0]
                src = sets[o] if o < k else items
                new += [(q, e + 1, oo) for q, e, oo in list(src) if e < len(prods[q][1]) and prods[q][1][e] == lhs]
            for it in new:
                if it not in items:
                    items.add(it)
                    todo.append(it)
        return items

    sets.append(close({(p, 0, 0) for p, (lhs, _) in enumerate(prods) if lhs == 0}, 0))
    for k, w in enumerate(words, 1):
        nxt = {(p, d + 1, o) for p, d, o in sets[-1] if d < len(prods[p][1]) and prods[p][1][d] == w}
        if not nxt:
            return False, False
        sets.append(close(nxt, k))
    done = any(prods[p][0] == 0 and d == len(prods[p][1]) and o == 0 for p, d, o in sets[-1])
    return True, done


def _grammar(rules: dict[int, list[list[int]]], n_nt: int, n_term: int):
    """Trimmed productions (the layout's round trip through trim)."""
    lhs, off, syms = [], [0], []
    for a in range(n_nt):
        for alt in rules.get(a, []):
            lhs.append(a)
            syms.extend(alt)
            off.append(len(syms))
    nt_map, term_map, dr_sym, dr_lhs, nt_off, nt_drs, _ = trim(
        n_nt, n_term, np.asarray(lhs, dtype=np.int32), np.asarray(off, dtype=np.int32), np.asarray(syms, dtype=np.int32))
    prods = productions_of(dr_sym, dr_lhs, nt_off, nt_drs)
    return len(nt_map), len(term_map), prods, term_map


def _check(n_nt: int, n_term: int, prods, words_list, lookahead: int = 1) -> None:
    tables = build_lr(n_nt, n_term, prods, lookahead=lookahead)
    for words in words_list:
        r = GLRRecognizer(tables)
        for k, w in enumerate(words):
            viable, _ = earley_prefix(n_nt, prods, [n_nt + x for x in words[: k + 1]])
            allowed = r.allowed()
            want = {a for a in range(n_term) if earley_prefix(n_nt, prods, [n_nt + x for x in [*words[:k], a]])[0]}
            assert allowed == want, (prods, words[:k])
            assert r.accepting() == earley_prefix(n_nt, prods, [n_nt + x for x in words[:k]])[1], (prods, words[:k])
            assert r.feed(w) == viable, (prods, words[: k + 1])
            if not viable:
                break
        else:
            assert r.accepting() == earley_prefix(n_nt, prods, [n_nt + x for x in words])[1]


def test_an_lalr1_grammar_is_deterministic_and_exact() -> None:
    # S -> "a" S "b" | "c"   (a^n c b^n)
    n_nt = 1
    prods = [(0, (1, 0, 2)), (0, (3,))]  # terminals a, b, c are symbols 1, 2, 3
    tables = build_lr(n_nt, 3, prods)
    assert tables.is_deterministic()
    _check(n_nt, 3, prods, [[0, 0, 2, 1, 1], [0, 2, 1, 1], [2], [0, 1]])


def test_an_ambiguous_grammar_keeps_its_conflicts_and_stays_exact() -> None:
    # E -> E "+" E | E "*" E | "n"
    prods = [(0, (0, 1, 0)), (0, (0, 2, 0)), (0, (3,))]
    tables = build_lr(1, 3, prods)
    assert tables.conflicts >= 4 and not tables.is_deterministic()
    _check(1, 3, prods, [[2, 0, 2, 1, 2, 0, 2], [2, 0, 0], [2, 1]])


def test_epsilon_rules_and_hidden_left_recursion() -> None:
    # S -> X S "b" | "c" ;  X -> ε   (hidden left recursion through a nullable X)
    # and L -> L N "a" | ε ; N -> ε | "b"
    # (nonterminals S=0, X=1; terminals a=0, b=1, c=2, numbered 2, 3, 4 as symbols)
    prods = [(0, (1, 0, 3)), (0, (4,)), (1, ())]
    _check(2, 3, prods, [[2, 1], [2, 1, 1], [0], [1]])
    prods = [(0, (0, 1, 2)), (0, ()), (1, ()), (1, (3,))]
    _check(2, 2, prods, [[0, 1, 0, 0, 1, 0], [1, 1], [1, 0]])


def test_a_grammar_lr1_but_not_lalr1_has_a_conflict_in_lalr_and_parses_under_glr() -> None:
    # S -> "a" E "c" | "a" F "d" | "b" F "c" | "b" E "d" ; E -> "e" ; F -> "e"
    a, b, c, d, e = range(5)
    S, E, F = 0, 1, 2
    n = 3
    prods = [(S, (n + a, E, n + c)), (S, (n + a, F, n + d)), (S, (n + b, F, n + c)), (S, (n + b, E, n + d)),
             (E, (n + e,)), (F, (n + e,))]
    tables = build_lr(n, 5, prods)
    assert tables.conflicts == 2  # the merged state of E -> e . and F -> e . reduces both on c and d
    _check(n, 5, prods, [[a, e, c], [a, e, d], [b, e, c], [b, e, d], [a, e, e]])


def test_lr0_tables_give_the_same_language() -> None:
    # E -> T "+" E | T ; T -> "n" | "(" E ")"   (SLR, not LR(0): after T, shift "+" or reduce)
    prods = [(0, (1, 2, 0)), (0, (1,)), (1, (3,)), (1, (4, 0, 5))]
    lr0, lalr = build_lr(2, 4, prods, lookahead=0), build_lr(2, 4, prods)
    assert lr0.conflicts > 0 and lalr.conflicts == 0
    walks = [[1, 0, 2, 3, 0, 1], [2, 1, 0, 1, 3, 0], [1, 1]]
    _check(2, 4, prods, walks, lookahead=0)
    _check(2, 4, prods, walks)


def test_the_state_limit_is_an_error_naming_it() -> None:
    prods = [(0, (0, 1, 0)), (0, (2, 0, 3)), (0, (4,))]
    with pytest.raises(LimitExceeded, match="max_states"):
        build_lr(1, 4, prods, max_states=3)
    with pytest.raises(ValueError, match="lookahead"):
        build_lr(1, 4, prods, lookahead=2)
    with pytest.raises(ValueError, match="outside"):
        build_lr(1, 4, [(0, (9,))])


def test_feed_refuses_without_changing_state_and_copies_are_independent() -> None:
    prods = [(0, (1, 0, 2)), (0, (3,))]
    r = GLRRecognizer(build_lr(1, 3, prods))
    assert r.feed(0) and not r.feed(1) and r.allowed() == {0, 2}
    f = r.copy()
    assert f.feed(2) and f.feed(1) and f.accepting()
    assert not r.accepting() and r.allowed() == {0, 2}
    assert not r.feed(7) and not r.feed(-1)


@pytest.mark.parametrize("seed", range(60))
def test_random_grammars_equal_earley(seed: int) -> None:
    rng = random.Random(seed)
    n_nt, n_term = rng.randint(1, 5), rng.randint(1, 3)
    rules = {a: [[rng.randrange(n_nt + n_term) for _ in range(rng.choice([0, 1, 1, 2, 2, 3]))]
                 for _ in range(rng.randint(1, 3))] for a in range(n_nt)}
    n, t, prods, term_map = _grammar(rules, n_nt, n_term)
    if n == 0:
        return  # the empty language (trim keeps nothing)
    words = [[rng.randrange(max(t, 1)) for _ in range(rng.randint(0, 7))] for _ in range(8)] if t else [[]]
    _check(n, t, prods, words)


def _prefixes(n_nt: int, n_term: int, prods, length: int) -> set[tuple[tuple[int, ...], bool]]:
    """Every terminal sequence up to ``length`` that starts a sentence, and whether it is one."""
    out, todo = set(), [()]
    while todo:
        w = todo.pop()
        viable, done = earley_prefix(n_nt, prods, [n_nt + x for x in w])
        if viable:
            out.add((w, done))
            if len(w) < length:
                todo.extend((*w, a) for a in range(n_term))
    return out


def test_left_recursive_keeps_the_language_and_flattens_the_stack() -> None:
    """``items -> ε | "," item items`` (the schema compiler's repetition) and a right
    recursion with a base (``r -> "a" r | "b" | "c"``) become left-recursive: the same
    prefixes and sentences; the GLR recognizer's stack stays flat over a long list."""
    # 0: start -> "[" item 1 "]" | "[" "]";  1: items -> ε | "," item 1;  2: item -> "x";
    # 3: r -> "a" 3 | "b" | "c" (as 2's alternative: item -> "x" | "(" 3 ")")
    X, LB, RB, COMMA, A, B, C, LP, RP = range(4, 13)
    prods = [(0, (LB, 2, 1, RB)), (0, (LB, RB)), (1, ()), (1, (COMMA, 2, 1)), (2, (X,)), (2, (LP, 3, RP)),
             (3, (A, 3)), (3, (B,)), (3, (C,))]
    new, n_nt, done = left_recursive(prods, 4)
    assert done == {1: 1, 3: 4}
    assert n_nt == 5  # one nonterminal for r's repetition (items's base is ε alone)
    assert (1, (1, COMMA + 1, 2)) in new and (1, ()) in new
    assert _prefixes(4, 9, prods, 6) == _prefixes(5, 9, new, 6)
    flat = GLRRecognizer(build_lr(n_nt, 9, new))
    deep = GLRRecognizer(build_lr(4, 9, prods))
    for w in [LB, X] + [COMMA, X] * 30:
        assert flat.feed(w - 4) and deep.feed(w - 4)

    def depth(r: GLRRecognizer) -> int:
        node, n = r.top[0], 0
        while node.below:
            node, n = node.below[0], n + 1
        return n

    assert depth(flat) < 6 < 30 < depth(deep)


@pytest.mark.parametrize("seed", range(40))
def test_left_recursive_keeps_random_languages(seed: int) -> None:
    """Random grammars (right recursions among them, with and without a base) keep
    their prefixes and sentences, and their GLR recognizers equal Earley's on them."""
    rng = random.Random(1000 + seed)
    n_nt, n_term = rng.randint(1, 4), rng.randint(1, 3)
    rules: dict[int, list[list[int]]] = {}
    for a in range(n_nt):
        alts = [[rng.randrange(n_nt + n_term) for _ in range(rng.choice([0, 1, 2]))] for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.6:  # a repetition: α a
            alts.append([n_nt + rng.randrange(n_term)] * rng.randint(1, 2) + [a])
        rules[a] = alts
    n, t, prods, _ = _grammar(rules, n_nt, n_term)
    if n == 0 or t == 0:
        return
    new, n2, _ = left_recursive(prods, n)
    assert _prefixes(n, t, prods, 5) == _prefixes(n2, t, new, 5)
    _check(n2, t, new, [[rng.randrange(t) for _ in range(rng.randint(0, 6))] for _ in range(4)])


def test_flat_repetitions_keeps_a_repetition_whose_rewrite_conflicts() -> None:
    """``start -> "a" R "c" | "a" "x" "d"``, ``R -> ε | "x" R``: left-recursive, ``R -> ε``
    is reduced before the first ``x``, which the other alternative shifts (a conflict);
    so ``R`` stays right-recursive while another repetition is rewritten."""
    A, C, D, X, Y = range(3, 8)
    prods = [(0, (A, 1, C)), (0, (A, X, D)), (0, (2,)), (1, ()), (1, (X, 1)), (2, ()), (2, (Y, 2))]
    new, m, done = left_recursive(prods, 3)
    assert done == {1: 1, 2: 2} and build_lr(m, 5, new).conflicts > 0
    lr = flat_repetitions(prods, 3, 5)
    assert lr.conflicts == 0 and lr.n_nt == 3
    assert (1, (X, 1)) in lr.prods and (2, (2, Y)) in lr.prods  # R kept, the other flat
    _check(3, 5, lr.prods[:-1], [[0, 3, 3, 1], [0, 3, 2], [4, 4, 4], []])
