"""A regex's parse tree (:mod:`toolkit.automata._rxparse`) to a Thompson NFA over bytes,
then the subset construction over byte classes and minimization (:func:`compile_nfa`,
every pattern's road; :mod:`toolkit.automata.regex` has the shortcuts and the cache)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from interegular.patterns import (
    Pattern,
    REFlags,
    _CharGroup,
    _Concatenation,
    _Repeated,
)

from toolkit.automata import _dfabuild
from toolkit.automata._rxparse import parse
from toolkit.automata.dfa import ByteDFA, freeze, minimize
from toolkit.automata.utf8 import complement, ranges_of, utf8_sequences
from toolkit.core.errors import LimitExceeded, RegexError, check_deadline
from toolkit.core.memo import memo

__all__ = ['compile_nfa', 'parse_pattern', 'strip_anchors', 'TOO_DEEP']

def strip_anchors(pattern: str) -> str:
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$"):
        backslashes = len(p[:-1]) - len(p[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            p = p[:-1]
    return p


TOO_DEEP = "regex nested too deeply (groups within groups) to compile"


def parse_pattern(pattern: str, unicode: bool = False) -> Pattern:
    """The tree of ``pattern`` without its end anchors (see :mod:`toolkit.automata._rxparse`)."""
    lead = 1 if pattern.startswith("^") else 0  # offsets in errors count in the full pattern
    return parse(strip_anchors(pattern), source=pattern, offset=lead, unicode=unicode)


# ------------------------------------------------------------ the NFA ----

_NFA_STATES_PER_DFA_STATE = 4
_MIN_NFA_STATES = 100_000

_Fragment = tuple[int, int] | None
"""``(start, end)`` of an NFA fragment, or None when its language is empty."""


def _nfa_limit(max_states: int) -> int:
    """The most NFA states a compile with ``max_states`` may build (bounded repeats are copies)."""
    return max(_NFA_STATES_PER_DFA_STATE * max_states, _MIN_NFA_STATES)


class _NFA:
    """A Thompson NFA over bytes under construction; states are list indices.

    Moves are stored relative to their source state: ``edges[s]`` is a tuple of
    ``(lo, hi, delta)`` byte ranges (inclusive) to state ``s + delta``, and
    ``eps[s]`` holds the deltas of the epsilon moves.  A fragment ``(start, end)``
    has its states in one contiguous range with no move leaving it, so a bounded
    repeat copies a fragment by copying its slice of both lists: only the end of a
    finished fragment ever gets new moves (it is entered only at its start and left
    only from its end), so the copies share every other list and every edge tuple.
    Fragments of the empty language are never linked in (see :func:`_build`), so
    every state reachable from the start can reach the final state.
    """

    __slots__ = ("eps", "edges", "limit", "pattern")

    def __init__(self, limit: int, pattern: str) -> None:
        self.eps: list[list[int] | tuple[int, ...]] = []
        self.edges: list[tuple[tuple[int, int, int], ...]] = []
        self.limit = limit
        self.pattern = pattern

    def reserve(self, n: int) -> None:
        total = len(self.eps) + n
        if total > self.limit:
            raise LimitExceeded("nfa_states", total, self.limit)

    def state(self) -> int:
        self.reserve(1)
        self.eps.append([])
        self.edges.append(())
        return len(self.eps) - 1

    def link(self, a: int, b: int) -> None:
        """An epsilon move from ``a`` (a fragment's end, or a new state) to ``b``."""
        self.eps[a].append(b - a)

    def copy(self, lo: int, hi: int, end: int) -> int:
        """Append a copy of the finished fragment in states ``lo..hi-1`` ending at
        ``end``; returns the index offset of the copy."""
        self.reserve(hi - lo)
        off = len(self.eps) - lo
        self.eps.extend(self.eps[lo:hi])
        self.edges.extend(self.edges[lo:hi])
        self.eps[end + off] = list(self.eps[end])
        return off

    def instantiate(self, template: tuple[tuple[tuple[int, int, int], ...], ...]) -> _Fragment:
        """Append a one-character fragment (see :func:`_template`)."""
        if not template[0]:
            return None
        self.reserve(len(template))
        base = len(self.eps)
        self.edges.extend(template)
        self.eps.extend([()] * len(template))
        self.eps[base + 1] = []
        return base, base + 1


def _template(cp_ranges: list[tuple[int, int]], raw_ff: bool = False) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """The edges of a fragment matching one code point of ``cp_ranges`` in UTF-8.

    State 0 is the start and state 1 the end (edges relative, as in :class:`_NFA`);
    the states inside a multi-byte character are keyed by the byte ranges left to
    read, so equal continuations are one state.  The byte-range sequences are those
    of :func:`toolkit.automata.utf8.utf8_sequences` (surrogates have none), as in
    :func:`_symbol_sequences`.
    """
    states: list[list[tuple[int, int, int]]] = [[], []]
    ids: dict[tuple, int] = {(): 1}

    def node(rest: tuple[tuple[int, int], ...]) -> int:
        i = ids.get(rest)
        if i is None:
            nxt = node(rest[1:])
            i = len(states)
            states.append([(rest[0][0], rest[0][1], nxt - i)])
            ids[rest] = i
        return i

    for lo, hi in cp_ranges:
        for seq in _utf8_sequences(lo, hi):
            states[0].append((seq[0][0], seq[0][1], node(seq[1:])))
    if raw_ff:  # U+DCFF: the byte 0xFF that marks a special token (toolkit.grammar.special)
        states[0].append((0xFF, 0xFF, 1))
    return tuple(tuple(es) for es in states)


@memo(maxsize=8192)
def _utf8_sequences(lo: int, hi: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    if hi < 0x80:
        return (((lo, hi),),)
    return tuple(utf8_sequences(lo, hi))


_MARK_CHARS = frozenset("\udcff")
"""U+DCFF written alone (a literal, or ``[\\udcff]``) is the raw byte 0xFF (see
:mod:`toolkit.grammar.special`); in a range, and every other surrogate, it has no byte form."""


@memo(maxsize=8192)
def _char_group_template(chars: frozenset[str], negated: bool, case_insensitive: bool):
    cps = case_variants(chars) if case_insensitive else {ord(c) for c in chars}
    ranges = ranges_of(cps)
    return _template(complement(ranges) if negated else ranges, raw_ff=not negated and chars == _MARK_CHARS)


@memo(maxsize=2)
def _dot_template(single_line: bool):
    return _template(complement([] if single_line else [(0x0A, 0x0A)]))


_WHERE = "building a regex's automaton"  # where a compile deadline stops in here

# REFlags as plain ints: enum operators cost a microsecond each, per node built
_MULTILINE, _CASE_INSENSITIVE, _SINGLE_LINE = (REFlags.MULTILINE.value, REFlags.CASE_INSENSITIVE.value,
                                               REFlags.SINGLE_LINE.value)


def _build(nfa: _NFA, node: object, flags: int) -> _Fragment:
    """Append the fragment of an interegular AST node (see ``_render`` for the node
    types); ``flags``: the :class:`REFlags` in force, as an int."""
    if isinstance(node, _CharGroup):
        if flags & _MULTILINE:  # as interegular: (?m) is refused on characters
            raise RegexError(f"unsupported regex feature ({REFlags.MULTILINE})", nfa.pattern)
        ci = bool(flags & _CASE_INSENSITIVE)
        return nfa.instantiate(_char_group_template(node.chars, node.negated, ci))
    if isinstance(node, _Concatenation):
        check_deadline(_WHERE)  # (a compile deadline: once per sequence and alternation, not per character)
        frags = [_build(nfa, p, flags) for p in node.parts]  # all built: errors come out
        if None in frags:
            return None
        if not frags:
            s = nfa.state()
            return s, s
        start, end = frags[0]
        for s, e in frags[1:]:
            nfa.link(end, s)
            end = e
        return start, end
    if isinstance(node, Pattern):
        if node.added_flags or node.removed_flags:
            flags = (flags | node.added_flags.value) & ~node.removed_flags.value
        if len(node.options) == 1:
            return _build(nfa, node.options[0], flags)
        check_deadline(_WHERE)
        start = nfa.state()
        frags = [f for f in (_build(nfa, o, flags) for o in node.options) if f is not None]
        if not frags:
            return None
        end = nfa.state()
        for s, e in frags:
            nfa.link(start, s)
            nfa.link(e, end)
        return start, end
    if isinstance(node, _Repeated):
        return _build_repeat(nfa, node, flags)
    name = type(node).__name__
    if name.endswith("DotCls"):
        return nfa.instantiate(_dot_template(bool(flags & _SINGLE_LINE)))
    if name.endswith("EmptyCls"):
        s = nfa.state()
        return s, s
    raise RegexError(f"unsupported regex node {name}", nfa.pattern)


def _build_repeat(nfa: _NFA, node: _Repeated, flags: int) -> _Fragment:
    """``x{lo,hi}``: ``lo`` copies of ``x`` in a row, then a loop (``hi`` None: the
    last copy is ``x+``, or ``x*`` when ``lo`` is 0) or a nested chain of ``hi - lo``
    optional copies, ``x(x(x)?)?``, whose epsilon closures stay small."""
    lo, hi = node.min, node.max
    if hi is not None and lo > hi:
        raise RegexError(f"cannot build the automaton (bad repeat {{{lo},{hi}}})", nfa.pattern)
    inner = _unwrap(node.base)
    if isinstance(inner, _Repeated) and inner.min == 0 and inner.max != 0 and hi != 0:
        # (y{0,h}){lo,hi} is y{0,h*hi}: any count up to h*hi is a sum of hi counts
        # in 0..h.  Copies of a nullable unit would make closures (and subsets)
        # grow with the bound.
        h = None if inner.max is None or hi is None else inner.max * hi
        return _build_repeat(nfa, _Repeated(inner.base, 0, h), flags)
    first = len(nfa.eps)
    unit = _build(nfa, node.base, flags)  # built even for {0}: errors come out
    if hi == 0 or (unit is None and lo == 0):
        s = nfa.state()
        return s, s
    if unit is None:
        return None
    us, ue = unit
    last = len(nfa.eps)
    n_copies = (lo or 1) if hi is None else hi
    nfa.reserve((last - first) * (n_copies - 1))
    units = [unit]
    for i in range(n_copies - 1):
        if not i & 63:
            check_deadline(_WHERE)
        off = nfa.copy(first, last, ue)
        units.append((us + off, ue + off))
    link = nfa.link
    if hi is None:
        if lo == 0:
            h = nfa.state()
            link(h, us)
            link(ue, h)
            return h, h
        for (_, e), (s, _) in zip(units, units[1:], strict=False):
            link(e, s)
        s, e = units[-1]
        link(e, s)
        return us, e
    if lo:
        for (_, e), (s, _) in zip(units[:lo], units[1:lo], strict=False):
            link(e, s)
        start, end = us, units[lo - 1][1]
    else:
        start = end = nfa.state()
    if hi == lo:
        return start, end
    out = nfa.state()
    for s, e in units[lo:]:
        link(end, s)
        link(end, out)
        end = e
    link(end, out)
    return start, out


def _unwrap(node: object) -> object:
    """``node`` without groups that hold a single item and set no flags."""
    while True:
        if isinstance(node, Pattern) and len(node.options) == 1 and not (node.added_flags or node.removed_flags):
            node = node.options[0]
        elif isinstance(node, _Concatenation) and len(node.parts) == 1:
            node = node.parts[0]
        else:
            return node


# ------------------------------------------- determinizing, minimizing ----


def _determinize(nfa: _NFA, frag: _Fragment, max_states: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Subset construction over byte classes (:func:`toolkit.automata._dfabuild.determinize`,
    in C).  Returns ``(table, accepting, cuts)``: ``table[s, c]`` is the state after a
    byte of class ``c`` (bytes ``cuts[c]`` to ``cuts[c+1]-1``); state 0 is dead (the
    empty set), state 1 the start, every other state live."""
    if frag is None:
        return np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=bool), [0, 256]
    start, final = frag
    return _dfabuild.determinize(nfa.eps, nfa.edges, start, final, max_states)


def _column_of_cuts(cuts: Sequence[int]) -> np.ndarray:
    """The column of each byte when column ``c`` holds bytes ``cuts[c]`` to ``cuts[c+1]-1``."""
    return np.repeat(np.arange(len(cuts) - 1, dtype=np.int32), np.diff(cuts))


def compile_nfa(pattern: str, max_states: int, unicode: bool) -> ByteDFA:
    """Parse, Thompson NFA, subset construction, minimization: every pattern's road."""
    parsed = parse_pattern(pattern, unicode)
    nfa = _NFA(_nfa_limit(max_states), pattern)
    try:
        frag = _build(nfa, parsed, 0)
    except RecursionError:  # _build recurses once per level of nesting
        raise RegexError(TOO_DEEP, pattern) from None
    table, acc, cuts = _determinize(nfa, frag, max_states)
    table, acc, start = minimize(table, acc)
    return freeze(table, acc, start, pattern, _column_of_cuts(cuts))


def case_variants(chars: Iterable[str]) -> set[int]:
    out: set[int] = set()
    for c in chars:
        for v in (c, c.lower(), c.upper()):
            if len(v) == 1:
                out.add(ord(v))
    return out
