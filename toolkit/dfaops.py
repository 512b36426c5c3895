"""Boolean operations on byte DFAs: intersection, union, difference.

A regex cannot say "a string of at most 64 characters that matches this pattern"
or "any key except these names" without blowing up, but the product of two
minimal DFAs says it directly.  :class:`toolkit.grammar.Terminal` uses these
operations for its ``also`` (intersection) and ``excluding`` (difference) parts;
Lark writes them with llguidance's ``&`` and ``~`` terminal operators.

The product is built breadth-first over the *joint* byte classes of the operands
(bytes that both DFAs treat alike), trimmed, then minimized and canonically
renumbered as :mod:`toolkit.regex` does (all three steps in C, :mod:`toolkit._dfabuild`),
so the result is again a minimal :class:`ByteDFA`: equal languages give equal arrays
whichever way they were built.  ``max_states`` bounds the reachable pairs.
"""

from __future__ import annotations

import numpy as np

from toolkit import _dfabuild
from toolkit.memo import memo
from toolkit.regex import (
    DEFAULT_MAX_STATES,
    ByteDFA,
    _freeze,
    _minimize,
    compile_regex,
    literal_words,
)

__all__ = ["intersect", "union", "difference", "disjoint", "minus_words", "compile_boolean"]

_OPS = ("and", "or", "diff")


def _joint_columns(a: ByteDFA, b: ByteDFA) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The byte classes neither operand tells apart: ``(column, cols_a, cols_b)``,
    byte ``x`` in joint class ``column[x]``, whose columns in ``a.table`` and
    ``b.table`` are ``cols_a[column[x]]`` and ``cols_b[column[x]]``."""
    pair = a.classes.astype(np.int32) * 256 + b.classes.astype(np.int32)
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    # number the joint classes by their smallest byte, as the minimizer's canonical
    # numbering (successors in order of the smallest class) expects
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    first = first[order]
    return rank[inverse].astype(np.int32), a.classes[first].astype(np.intp), b.classes[first].astype(np.intp)


def _product(a: ByteDFA, b: ByteDFA, op: str, max_states: int) -> ByteDFA:
    """The minimal DFA of ``a`` ``op`` ``b``: the product over the joint byte classes
    (:func:`toolkit._dfabuild.product`, in C), trimmed, then minimized."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}")
    column, cols_a, cols_b = _joint_columns(a, b)
    made = _dfabuild.product(
        np.ascontiguousarray(a.table[:, cols_a], dtype=np.int32),
        np.asarray(a.accepting, dtype=bool).view(np.uint8), int(a.start),
        np.ascontiguousarray(b.table[:, cols_b], dtype=np.int32),
        np.asarray(b.accepting, dtype=bool).view(np.uint8), int(b.start),
        op, max_states)
    if made is None:
        return _empty()
    table, acc, start = _minimize(made[0], made[1])
    return _freeze(table, acc, start, None, column)


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


def minus_words(dfa: ByteDFA, words: list[bytes], *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of ``L(dfa)`` less a finite set of byte strings (sorted, without
    repeats): :func:`difference` with the words' trie, built in one pass in C
    (:func:`toolkit._dfabuild.minus_words`) without the trie's own DFA."""
    made = _dfabuild.minus_words(dfa.table, dfa.classes, np.asarray(dfa.accepting, dtype=bool).view(np.uint8),
                                 int(dfa.start), words, max_states)
    if made is None:
        return _empty()
    return _freeze(made[0], made[1], 1, None, made[2])


def _empty() -> ByteDFA:
    return _freeze(np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=bool), 0, None, np.zeros(256, dtype=np.int32))


def _words(patterns: tuple[str, ...]) -> list[bytes] | None:
    """The words of patterns that are all finite sets of literals (:func:`literal_words`), or None."""
    out: set[bytes] = set()
    for p in patterns:
        ws = literal_words(p)
        if ws is None:
            return None
        out.update(ws)
    return sorted(out)


@memo(maxsize=2048)
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
        words = _words(excluding)
        if words is not None:  # a list of keys: its trie in front of the DFA, no product
            return minus_words(dfa, words, max_states=max_states)
        if len(excluding) == 1:
            ex = compile_regex(excluding[0], max_states=max_states)
        else:
            ex = compile_regex("|".join(f"(?:{r})" for r in excluding), max_states=max_states)
        dfa = difference(dfa, ex, max_states=max_states)
    return dfa
