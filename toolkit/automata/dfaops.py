"""Boolean operations on byte DFAs: intersection, union, difference.

A regex cannot say "a string of at most 64 characters that matches this pattern"
or "any key except these names" without blowing up, but the product of two
minimal DFAs says it directly.  :class:`toolkit.grammar.Terminal` uses these
operations for its ``also`` (intersection) and ``excluding`` (difference) parts;
Lark writes them with llguidance's ``&`` and ``~`` terminal operators.

The product is built breadth-first over the *joint* byte classes of the operands
(bytes that both DFAs treat alike), trimmed, then minimized and canonically
renumbered as :mod:`toolkit.automata.regex` does (all three steps in C, :mod:`toolkit.automata._dfabuild`),
so the result is again a minimal :class:`ByteDFA`: equal languages give equal arrays
whichever way they were built.  ``max_states`` bounds the reachable pairs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.automata import _dfabuild
from toolkit.automata.dfa import DEFAULT_MAX_STATES, ByteDFA, freeze, minimize
from toolkit.automata.jsontext import (
    JSON_CHAR,
    MAX_STRING_STATES,
    json_literal_dfa,
    json_literals_dfa,
    json_string_dfa,
)
from toolkit.automata.regex import compile_regex
from toolkit.core.errors import LimitExceeded, check_deadline
from toolkit.core.memo import memo

__all__ = ["intersect", "union", "difference", "disjoint", "minus_words", "compile_boolean", "json_keys_dfa", "dfa_regex",
           "JsonStringForm", "WordsForm", "JsonKeysForm", "Form"]

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
    return rank[inverse].astype(np.int32), a.classes[first].astype(np.int32), b.classes[first].astype(np.int32)


def _product(a: ByteDFA, b: ByteDFA, op: str, max_states: int) -> ByteDFA:
    """The minimal DFA of ``a`` ``op`` ``b``: the product over the joint byte classes
    (:func:`toolkit.automata._dfabuild.product`, in C), trimmed, then minimized."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {_OPS}")
    column, cols_a, cols_b = _joint_columns(a, b)
    made = _dfabuild.product(  # each table read through its columns of the joint classes, not copied
        np.ascontiguousarray(a.table, dtype=np.int32), np.asarray(a.accepting, dtype=bool).view(np.uint8),
        int(a.start), np.ascontiguousarray(b.table, dtype=np.int32),
        np.asarray(b.accepting, dtype=bool).view(np.uint8), int(b.start), op, max_states, cols_a, cols_b)
    if made is None:
        return _empty()
    table, acc, start = minimize(made[0], made[1])
    return freeze(table, acc, start, None, column)


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
    (:func:`toolkit.automata._dfabuild.minus_words`) without the trie's own DFA."""
    made = _dfabuild.minus_words(dfa.table, dfa.classes, np.asarray(dfa.accepting, dtype=bool).view(np.uint8),
                                 int(dfa.start), words, max_states)
    if made is None:
        return _empty()
    return freeze(made[0], made[1], 1, None, made[2])


def _empty() -> ByteDFA:
    return freeze(np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=bool), 0, None, np.zeros(256, dtype=np.int32))


def json_keys_dfa(values: list[str], max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The minimal DFA of every JSON text of one of ``values`` (non-empty):
    :func:`~toolkit.automata.jsontext.json_literals_dfa`, or where a value holds a
    surrogate code point the union of each value's
    :func:`~toolkit.automata.jsontext.json_literal_dfa`, joined pairwise."""
    made = json_literals_dfa(values, max_states)
    if made is not None:
        return made
    dfas = [json_literal_dfa(v, max_states) for v in values]
    while len(dfas) > 1:
        check_deadline("joining the automata of JSON string literals")
        dfas = [union(dfas[i], dfas[i + 1], max_states=max_states) if i + 1 < len(dfas) else dfas[i]
                for i in range(0, len(dfas), 2)]
    return dfas[0]


# --- regular languages given as data -------------------------------------------------


@dataclass(frozen=True)
class JsonStringForm:
    """Every JSON string of ``min_length..max_length`` characters (None: no bound), each
    character spelled as ``char`` allows: the language of
    :func:`~toolkit.automata.jsontext.json_string` (``maxLength``/``minLength``), whose DFA
    is written down from the bounds (:func:`~toolkit.automata.jsontext.json_string_dfa`,
    linear in the bound: allowed up to ``MAX_STRING_LENGTH`` characters)."""

    min_length: int
    max_length: int | None = None
    char: str = JSON_CHAR

    def dfa(self, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        return json_string_dfa(self.min_length, self.max_length, max_states=max(max_states, MAX_STRING_STATES),
                               char=self.char)


@dataclass(frozen=True)
class WordsForm:
    """A finite set of byte strings (sorted, without repeats), e.g. the listed keys an
    additional key must not be; its DFA is the words' trie
    (:func:`toolkit.automata._dfabuild.literal_set`)."""

    words: tuple[bytes, ...]

    def dfa(self, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        made = _dfabuild.literal_set(list(self.words), max_states)
        if made is None:
            raise LimitExceeded("max_states", max_states + 1, max_states, f"the trie of {len(self.words)} words")
        return freeze(made[0], made[1], 1, None, made[2])


@dataclass(frozen=True)
class JsonKeysForm:
    """Every JSON text of one of ``values`` (a string ``enum`` or ``const``, listed keys):
    the language of the alternation of their
    :func:`~toolkit.automata.jsontext.json_string_literal`; its DFA is
    :func:`json_keys_dfa`."""

    values: tuple[str, ...]

    def dfa(self, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
        return json_keys_dfa(list(self.values), max_states)


Form = JsonStringForm | WordsForm | JsonKeysForm
"""A part of a terminal given as data (:class:`toolkit.grammar.Terminal` ``forms``): the
writer of its regex text knew what it means, so its DFA is built from that, never read
back from the text."""


def _part(regex: str, known: dict[str, Any], max_states: int) -> ByteDFA:
    form = known.get(regex)
    return form.dfa(max_states) if form is not None else compile_regex(regex, max_states=max_states)


def _excluded(excluding: Sequence[str], known: dict[str, Any], max_states: int) -> ByteDFA:
    """The union of the ``excluding`` languages: JSON keys given as values in one DFA
    written down directly, the other forms built from their data, the rest as one regex."""
    forms = [known.get(r) for r in excluding]
    values = list(dict.fromkeys(v for f in forms if isinstance(f, JsonKeysForm) for v in f.values))
    parts = [json_keys_dfa(values, max_states)] if values else []
    parts += [f.dfa(max_states) for f in forms if f is not None and not isinstance(f, JsonKeysForm)]
    rest = [r for r, f in zip(excluding, forms, strict=True) if f is None]
    if rest:
        parts.append(compile_regex(rest[0] if len(rest) == 1 else "|".join(f"(?:{r})" for r in rest),
                                   max_states=max_states))
    ex = parts[0]
    for other in parts[1:]:
        ex = union(ex, other, max_states=max_states)
    return ex


@memo(maxsize=2048)
def compile_boolean(
    regex: str, also: tuple[str, ...] = (), excluding: tuple[str, ...] = (), *,
    forms: tuple[tuple[str, Form], ...] = (), max_states: int = DEFAULT_MAX_STATES
) -> ByteDFA:
    """``regex`` ∩ every ``also`` regex, minus every ``excluding`` regex, as one minimal DFA.

    ``forms``: ``(text, form)`` pairs for the parts whose language their writer gave as
    data (:data:`Form`): those are built from it, the others compiled as regexes.
    Excluded words (every excluded part a :class:`WordsForm`) go in front of the DFA as
    their trie, without a product (:func:`minus_words`)."""
    known = dict(forms)
    dfa = _part(regex, known, max_states)
    for r in also:
        if dfa.is_empty():
            break
        dfa = intersect(dfa, _part(r, known, max_states), max_states=max_states)
    if excluding and not dfa.is_empty():
        excluded = [known.get(r) for r in excluding]
        if all(isinstance(f, WordsForm) for f in excluded):  # a list of keys: its trie in front of the DFA
            words = sorted({w for f in excluded for w in f.words})
            return minus_words(dfa, words, max_states=max_states)
        dfa = difference(dfa, _excluded(excluding, known, max_states), max_states=max_states)
    return dfa


# --- byte DFA -> regex (for terminals that intersect or subtract regexes) ---

_SURROGATES = (0xD800, 0xDFFF)
_MAX_CP = 0x10FFFF


def _escape_char(cp: int) -> str:
    """One code point as a regex atom, in or out of a class (non-ASCII as itself:
    interegular reads no ``\\u`` escapes)."""
    if cp < 0x80:
        c = chr(cp)
        return c if c.isalnum() else f"\\x{cp:02X}"
    return chr(cp)


def _char_class(ranges: list[tuple[int, int]]) -> str:
    """A class for sorted, disjoint code point ranges; negated when that is smaller
    (surrogates have no UTF-8 form, so either side may hold them)."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _escape_char(ranges[0][0])
    size = sum(hi - lo + 1 for lo, hi in ranges)
    with_surrogates = sorted([*ranges, _SURROGATES])
    comp, nxt = [], 0
    for lo, hi in with_surrogates:
        if lo > nxt:
            comp.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= _MAX_CP:
        comp.append((nxt, _MAX_CP))
    if not comp:
        return "[\\d\\D]"

    def body(rs: list[tuple[int, int]]) -> str:
        return "".join(
            _escape_char(lo) if lo == hi else _escape_char(lo) + ("" if hi == lo + 1 else "-") + _escape_char(hi)
            for lo, hi in rs
        )

    if sum(hi - lo + 1 for lo, hi in comp) < size:
        return "[^" + body(comp) + "]"
    return "[" + body(ranges) + "]"


def _char_edges(trans: list[list[int]], state: int, memo: dict) -> dict[int, list[tuple[int, int]]]:
    """From a state between characters: target state -> code point ranges."""

    def cont(t: int, n: int) -> list[tuple[int, int, int]]:
        key = (t, n)
        if key not in memo:
            out: list[tuple[int, int, int]] = []
            scale = 64 ** (n - 1)
            for c in range(64):
                t2 = trans[t][0x80 + c]
                if not t2:
                    continue
                subs = [(0, 0, t2)] if n == 1 else cont(t2, n - 1)
                for lo, hi, tg in subs:
                    lo, hi = c * scale + lo, c * scale + hi
                    if out and out[-1][2] == tg and out[-1][1] + 1 == lo:
                        out[-1] = (out[-1][0], hi, tg)
                    else:
                        out.append((lo, hi, tg))
            memo[key] = out
        return memo[key]

    edges: dict[int, list[tuple[int, int]]] = {}

    def add(lo: int, hi: int, tg: int) -> None:
        rs = edges.setdefault(tg, [])
        if rs and rs[-1][1] + 1 == lo:
            rs[-1] = (rs[-1][0], hi)
        else:
            rs.append((lo, hi))

    row = trans[state]
    for b in range(0x80):
        if row[b]:
            add(b, b, row[b])
    for b in range(0xC0, 0xF8):
        if row[b]:
            n = 1 if b < 0xE0 else 2 if b < 0xF0 else 3
            base = (b & (0x3F >> n)) << (6 * n)
            for lo, hi, tg in cont(row[b], n):
                add(base + lo, base + hi, tg)
    return edges


_TO_REGEX = "writing an automaton as a regex"  # where a compile deadline stops in dfa_regex


def dfa_regex(dfa: ByteDFA, max_length: int = 1_000_000) -> str:
    """A regex for a byte DFA's language, by state elimination (Brzozowski and
    McCluskey) over the DFA's character transitions; states with the fewest
    predecessor x successor pairs go first.  Raises ``LimitExceeded("max_length")``
    when a label outgrows ``max_length``."""

    def atom(alts: list[str]) -> str:
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    def star(alts: list[str]) -> str:
        a = atom(alts)
        single = len(a) == 1 or (a.startswith("\\x") and len(a) == 4) or (a[0] == "[" and a.count("]") == 1 and a[-1] == "]")
        return a + "*" if single else "(?:" + "|".join(alts) + ")*"

    def check(n: int) -> None:
        if n > max_length:
            raise LimitExceeded("max_length", n, max_length)

    if dfa.is_empty():
        return "[^\\d\\D]"  # the empty language (toolkit.automata.regex writes it so too)
    trans = np.asarray(dfa.transitions).tolist()
    accepting = np.asarray(dfa.accepting).tolist()
    memo: dict = {}
    start, final = -1, -2
    succ: dict[int, dict[int, list[str]]] = {start: {dfa.start: [""]}}
    pred: dict[int, set[int]] = {dfa.start: {start}, final: set()}
    todo = [dfa.start]
    while todo:
        if not len(succ) & 255:
            check_deadline(_TO_REGEX)
        q = todo.pop()
        succ[q] = {}
        for tg, ranges in _char_edges(trans, q, memo).items():
            succ[q][tg] = [_char_class(ranges)]
            pred.setdefault(tg, set()).add(q)
            if tg not in succ and tg not in todo:
                todo.append(tg)
        if accepting[q]:
            succ[q][final] = [""]
            pred[final].add(q)

    def cost(v: int) -> int:
        loops = v in succ[v]
        return (len(pred[v]) - loops) * (len(succ[v]) - loops)

    nodes = set(succ) - {start}
    heap = [(cost(v), v) for v in nodes]
    heapq.heapify(heap)
    while heap:
        check_deadline(_TO_REGEX)
        c, k = heapq.heappop(heap)
        if k not in nodes:
            continue
        if c != cost(k):  # stale: a neighbour went first
            heapq.heappush(heap, (cost(k), k))
            continue
        nodes.discard(k)
        loop = succ[k].pop(k, None)
        pred[k].discard(k)
        repeat = "" if not loop or loop == [""] else star(loop)
        for p in pred[k]:
            head = atom(succ[p].pop(k)) + repeat
            for q, labels in succ[k].items():
                label = head + atom(labels)
                check(len(label))
                alts = succ[p].setdefault(q, [])
                if label not in alts:
                    alts.append(label)
                    check(sum(map(len, alts)) + len(alts))
                pred[q].add(p)
        for q in succ[k]:
            pred[q].discard(k)
        for v in pred[k] | set(succ[k]):
            if v in nodes:
                heapq.heappush(heap, (cost(v), v))
        del succ[k], pred[k]
    return atom(succ[start][final])


def shortest_matches(dfa: ByteDFA) -> ByteDFA:
    """The minimal DFA of the strings of ``L(dfa)`` none of whose proper prefixes is in
    ``L(dfa)``: a *lazy* lexeme's language (llguidance's ``[lazy]``, ``suffix``), which
    ends at its first match.  Every edge out of an accepting state goes to the dead
    state; the states then out of reach are dropped before minimizing."""
    acc = np.asarray(dfa.accepting, dtype=bool)
    table = np.array(dfa.table, dtype=np.int32)
    table[acc] = 0
    if not dfa.start:
        return _empty()
    # the states still in reach, breadth first a level at a time (dead 0, then the start)
    seen = np.zeros(table.shape[0], dtype=bool)
    seen[[0, dfa.start]] = True
    levels = [np.array([0, dfa.start], dtype=np.int64)]
    frontier = levels[-1][1:]
    while frontier.size:
        nxt = np.unique(table[frontier])
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
        levels.append(frontier)
    keep = np.concatenate(levels)
    remap = np.zeros(table.shape[0], dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    small, small_acc, start = minimize(remap[table[keep]], acc[keep])
    return freeze(small, small_acc, start, None, np.asarray(dfa.classes, dtype=np.int32))
