"""Regexes to minimal byte-level DFAs.

The dialect is Python's ``re`` syntax (:mod:`toolkit.automata._rxparse` lists what it
takes), with the semantics of ``re.fullmatch(pattern, text, re.ASCII)``: ``\\d``,
``\\w`` and ``\\s`` are the ASCII classes (as in Outlines and ECMAScript's
``\\d``/``\\w``), while ``.`` and negated classes match any Unicode character (``.``
not ``\\n``).  A leading ``^`` and a trailing ``$`` of the whole pattern are
redundant under full-match semantics and are dropped; anchors elsewhere, lookarounds
and back-references raise :class:`~toolkit.core.errors.RegexError`, whose message gives
the offset of the fragment.

Parser and construction are our own.  :func:`toolkit.automata._rxparse.parse` reads a pattern
in one linear pass (no recursion, so any nesting depth) into the node classes of
``interegular.patterns``, which both constructions below walk; interegular's own
parser, super-linear and recursive, is no longer used.  :func:`compile_regex` walks
the parse tree into a Thompson NFA over bytes (:func:`_build`): each character class
becomes the UTF-8 byte-range sequences of its code points (:mod:`toolkit.automata._utf8`;
surrogates have none, except U+DCFF written alone, which is the raw byte 0xFF that
marks a special token: :mod:`toolkit.grammar.special`), with equal continuations of a multi-byte character shared,
and a bounded repeat ``x{m,n}`` becomes ``n`` copies of ``x``'s fragment, the
optional ones nested (``x(x(x)?)?``) so that epsilon closures stay small; a limit on
NFA states turns a huge repeat into :class:`~toolkit.core.errors.LimitExceeded` rather
than an out-of-memory.  Fragments of the empty language are dropped while building,
so every NFA state that can be reached can also reach acceptance.  The subset
construction (:func:`_determinize`) runs over byte *classes* (the coarsest partition
of the bytes that no edge range cuts), with epsilon closures memoized, and stops at
``max_states``; every nonempty subset is then a live state.  Hopcroft's algorithm
(:func:`_minimize`, O(m log n)) merges equivalent states, and the minimal states are
numbered with the dead state at 0 and the start state at 1, in breadth-first order
(successors by smallest byte), so two equal languages give identical arrays.  Both
steps are C (:mod:`toolkit.automata._dfabuild`, without the GIL); the parser and the NFA
construction are Python.  The result is kept over its byte classes (bytes every state
treats alike; :class:`ByteDFA`), typically a tenth of the 256-column byte table or
less.  A JSON string with length bounds, exactly as
:func:`toolkit.automata.jsonregex.json_string` writes it, skips all of this: its minimal DFA
is written down directly (:func:`toolkit.automata.jsonregex.json_string_dfa`, the same arrays).

The former construction (interegular's character FSM, expanded to bytes and
minimized by Moore's refinement: quadratic in repeat bounds, one round per state of
the longest chain) is kept as :func:`_compile_reference`, which the tests compare
against byte for byte.  The walks of the tree (:func:`_build`, :func:`_render`)
recurse once per level of group nesting; past Python's recursion limit (a few
hundred levels) they raise :class:`~toolkit.core.errors.RegexError`.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import (
    Pattern,
    REFlags,
    Unsupported,
    _CharGroup,
    _Concatenation,
    _Repeated,
)

from toolkit.automata import _dfabuild
from toolkit.automata._rxparse import parse
from toolkit.automata._utf8 import complement, ranges_of, utf8_sequences
from toolkit.core import memo as _memo
from toolkit.core.errors import LimitExceeded, RegexError
from toolkit.core.memo import memo

__all__ = [
    "ByteDFA",
    "from_transitions",
    "check_class_form",
    "compile_regex",
    "compile_literal",
    "clear_cache",
    "canonical_regex",
    "DEFAULT_MAX_STATES",
]

DEFAULT_MAX_STATES = 200_000
"""Default limit on DFA states; exceeding it raises :class:`LimitExceeded`."""

DEAD = 0


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A minimal complete DFA over bytes, stored over byte classes.

    ``table[s, classes[b]]`` is the state after byte ``b`` in state ``s``: bytes that
    move every state alike share a class (numbered in order of their smallest byte),
    so ``table`` is ``(n_states, n_classes)`` with typically 5 to 40 classes where a
    byte table has 256 columns.  ``transitions`` is that byte table, built on first
    use; the engines read the class form.  State 0 is dead (it loops on every byte
    and is not accepting), and every other state can still reach an accepting state.
    Arrays are read-only and C-contiguous.  Build one with :func:`compile_regex`,
    :func:`compile_literal` or :func:`from_transitions`.
    """

    table: np.ndarray
    classes: np.ndarray
    accepting: np.ndarray
    start: int
    pattern: str | None = None

    @property
    def n_states(self) -> int:
        return int(self.table.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.table.shape[1])

    @property
    def dead(self) -> int:
        return DEAD

    @functools.cached_property
    def transitions(self) -> np.ndarray:
        """The byte table ``int32[n_states, 256]`` (``table[:, classes]``), built on
        first use: for a DFA of 100k states that is 100 MB the class form avoids."""
        trans = np.ascontiguousarray(np.take(self.table, self.classes, axis=1), dtype=np.int32)
        trans.setflags(write=False)
        return trans

    def is_empty(self) -> bool:
        """True when the language is empty (the start state is dead)."""
        return self.start == DEAD

    def step(self, state: int, byte: int) -> int:
        return int(self.table[state, self.classes[byte]])

    def run(self, data: bytes, state: int | None = None) -> int:
        """The state after ``data`` from ``state`` (default: start); 0 once dead."""
        s = self.start if state is None else state
        table, classes = self.table, self.classes
        for b in data:
            s = table[s, classes[b]]
            if s == DEAD:
                return DEAD
        return int(s)

    def fullmatch(self, data: bytes) -> bool:
        """True when ``data`` is in the language."""
        return bool(self.accepting[self.run(data)])

    def byte_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(classes uint8[256], table int32[n_states, n_classes])``: bytes in one class
        behave identically in every state, so ``transitions[s, b] == table[s, classes[b]]``,
        and bytes in different classes differ in some state."""
        return self.classes, self.table

    def memory_bytes(self) -> int:
        """The class form's bytes (the byte table, if built, is a cache)."""
        return int(self.table.nbytes + self.classes.nbytes + self.accepting.nbytes)

    def __repr__(self) -> str:
        return f"ByteDFA(states={self.n_states}, classes={self.n_classes}, start={self.start}, pattern={self.pattern!r})"


def check_class_form(table: object, classes: object, *, what: str = "the DFA",
                     targets: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(table, classes)`` as C-contiguous int32 ``(n >= 1, k <= 256)`` and uint8
    ``(256,)`` arrays, every class below ``k`` and (``targets``) every entry a state in
    ``[0, n)``, or a ValueError that names ``what``: the check the C walks over a class
    form rely on (llguidance's lexemes, outlines' token index, the trie walk).  The
    frozen arrays of a :class:`ByteDFA` this module built pass without a second look."""
    known = _BUILT.get((id(table), id(classes)))
    if known is not None and known[0]() is table and known[1]() is classes:
        return table, classes  # type: ignore[return-value]
    t, c = np.asarray(table), np.asarray(classes)
    for name, a in (("the table", t), ("classes", c)):
        if a.dtype.kind not in "iu":  # a float or object array is not cast silently
            raise ValueError(f"{what}: {name} must hold integers, got dtype {a.dtype}")
    if c.shape == (256,) and c.size and (int(c.min()) < 0 or int(c.max()) > 255):
        raise ValueError(f"{what}: classes must be 0..255, got {int(c.min())}..{int(c.max())}")
    if t.size and (int(t.min()) < np.iinfo(np.int32).min or int(t.max()) > np.iinfo(np.int32).max):
        raise ValueError(f"{what}: the table holds values beyond int32")
    t = np.ascontiguousarray(t, dtype=np.int32)
    c = np.ascontiguousarray(c, dtype=np.uint8)
    if t.ndim != 2 or t.shape[0] < 1 or not 1 <= t.shape[1] <= 256:
        raise ValueError(f"{what}: the table must be (n_states >= 1, n_classes <= 256), got {np.shape(table)}")
    if c.shape != (256,) or int(c.max()) >= t.shape[1]:
        raise ValueError(f"{what}: classes must be 256 entries below {t.shape[1]}")
    if targets and (int(t.min()) < 0 or int(t.max()) >= t.shape[0]):
        raise ValueError(f"{what}: the table holds a state outside [0, {t.shape[0]})")
    return t, c


_IDENTITY_COLUMNS = np.arange(256, dtype=np.int32)

#: the (table, classes) pairs :func:`_freeze` made: read-only, int32/uint8, every class
#: a column and every entry a state by construction (weak references: ids are reused)
_BUILT: dict[tuple[int, int], tuple[weakref.ref[np.ndarray], weakref.ref[np.ndarray]]] = {}
_BUILT_MAX = 1 << 17


def from_transitions(trans: np.ndarray, accepting: np.ndarray, start: int, pattern: str | None = None) -> ByteDFA:
    """A :class:`ByteDFA` from a byte table ``int32[n, 256]`` (already minimal and
    numbered as the module doc says; nothing is checked but the shapes)."""
    return _freeze(trans, accepting, start, pattern, _IDENTITY_COLUMNS)


# ---------------------------------------------------------------- parsing ----


def _strip_anchors(pattern: str) -> str:
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$"):
        backslashes = len(p[:-1]) - len(p[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            p = p[:-1]
    return p


_TOO_DEEP = "regex nested too deeply (groups within groups) to compile"


def _parse(pattern: str, unicode: bool = False) -> Pattern:
    """The tree of ``pattern`` without its end anchors (see :mod:`toolkit.automata._rxparse`)."""
    lead = 1 if pattern.startswith("^") else 0  # offsets in errors count in the full pattern
    return parse(_strip_anchors(pattern), source=pattern, offset=lead, unicode=unicode)


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
    of :func:`toolkit.automata._utf8.utf8_sequences` (surrogates have none), as in
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
    cps = _case_variants(chars) if case_insensitive else {ord(c) for c in chars}
    ranges = ranges_of(cps)
    return _template(complement(ranges) if negated else ranges, raw_ff=not negated and chars == _MARK_CHARS)


@memo(maxsize=2)
def _dot_template(single_line: bool):
    return _template(complement([] if single_line else [(0x0A, 0x0A)]))


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
    for _ in range(n_copies - 1):
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


def _minimize(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Minimize (Hopcroft, :func:`toolkit.automata._dfabuild.minimize`, in C) a DFA over byte
    classes whose states are all reachable and, but the dead state 0, live; returns
    ``(table, accepting, start)`` over the same columns, numbered as
    :func:`_minimize_moore` numbers: dead 0, start 1, then breadth-first, with targets
    in order of the smallest byte that reaches them."""
    if table.shape[0] == 1:
        return np.zeros((1, table.shape[1]), dtype=np.int32), np.zeros(1, dtype=bool), 0
    small, acc = _dfabuild.minimize(np.ascontiguousarray(table, dtype=np.int32),
                                    np.ascontiguousarray(accepting, dtype=bool).view(np.uint8))
    return small, acc, 1


def _freeze(table: np.ndarray, accepting: np.ndarray, start: int, pattern: str | None,
            column: np.ndarray) -> ByteDFA:
    """A :class:`ByteDFA` from a table over columns (byte ``b`` moves by column
    ``column[b]``), its columns merged into the canonical byte classes."""
    classes, table = _dfabuild.byte_classes(np.ascontiguousarray(table, dtype=np.int32),
                                            np.ascontiguousarray(column, dtype=np.int32))
    accepting = np.ascontiguousarray(accepting, dtype=bool)
    table.setflags(write=False)
    classes.setflags(write=False)
    accepting.setflags(write=False)
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.clear()
    _BUILT[(id(table), id(classes))] = (weakref.ref(table), weakref.ref(classes))
    return ByteDFA(table, classes, accepting, int(start), pattern)


_CACHE_ENTRIES = 4096
_CACHE_MAX_TABLE = 1 << 20  # bytes: larger DFAs are not kept (a worker compiles thousands)


def _compile_cached(pattern: str, max_states: int, unicode: bool = False) -> ByteDFA:
    """:func:`compile_regex` behind an LRU cache of the small DFAs (grammar terminals
    repeat; a big schema regex is compiled once and would only pin memory)."""
    key = (pattern, max_states, unicode)
    cache = _memo.current().table("toolkit.automata.regex.compile_regex")
    dfa = cache.get(key)
    if dfa is not None:
        cache.move_to_end(key)
        return dfa
    dfa = _compile(pattern, max_states, unicode)
    if dfa.memory_bytes() <= _CACHE_MAX_TABLE:
        cache[key] = dfa
        if len(cache) > _CACHE_ENTRIES:
            cache.popitem(last=False)
    return dfa


# re.escape's image: the characters it escapes, each after a backslash; all others bare
_SPECIAL = re.escape("\t\n\x0b\x0c\r #$&()*+-.?[\\]^{|}~")  # as a class body
_LIT = f"(?:[^{_SPECIAL}]|\\\\[{_SPECIAL}])*"
_LITERAL_GROUP = re.compile(f"({_LIT})(?:\\(\\?:({_LIT}(?:\\|{_LIT})*)\\)({_LIT}))?", re.S)
_ALTERNATIVE = re.compile(f"({_LIT})\\|", re.S)
_UNESCAPE = re.compile(r"\\(.)", re.S)
_SURROGATES = re.compile("[\ud800-\udfff]")


def literal_words(pattern: str) -> list[bytes] | None:
    """The UTF-8 words of a pattern that is a finite set of literals written as
    :func:`re.escape` writes them, around at most one group of alternatives
    (``P(?:A|B|...)S``, the shape of a list of excluded keys), sorted and without
    repeats; None for any other pattern (or one with a lone surrogate)."""
    m = _LITERAL_GROUP.fullmatch(pattern)
    if m is None:
        return None
    pre, body, post = (_UNESCAPE.sub(r"\1", g or "") for g in (m.group(1), m.group(2), m.group(3)))
    alts = [""] if m.group(2) is None else [_UNESCAPE.sub(r"\1", a) for a in _ALTERNATIVE.findall(m.group(2) + "|")]
    words = [pre + a + post for a in alts]
    if any(_SURROGATES.search(w.replace("\udcff", "")) for w in words):
        return None
    return sorted({w.encode("utf-8", "surrogateescape") for w in words})


def _direct(pattern: str, max_states: int) -> ByteDFA | None:
    """The DFA of a pattern whose minimal DFA is written down directly, or None: a
    finite set of literals (:func:`literal_words`; the trie of the words, minimized,
    where the subset construction would walk a Thompson NFA of the same alternation),
    or a JSON string with length bounds (:func:`toolkit.automata.jsonregex.json_string_dfa`),
    whose NFA would be one copy of a 20-state character per unit of ``maxLength``."""
    words = literal_words(pattern)
    if words is not None:
        made = _dfabuild.literal_set(words, max_states)
        if made is None:  # over the limit: the usual road says so in its own words
            return None
        return _freeze(made[0], made[1], 1, pattern, made[2])
    if not (pattern.startswith('"') and pattern.endswith('"')):
        return None
    from toolkit.automata.jsonregex import MAX_STRING_STATES, json_string_bounds, json_string_dfa

    bounds = json_string_bounds(pattern)
    if bounds is None:
        return None
    # linear in the bound, not a subset construction: allowed up to MAX_STRING_LENGTH
    return json_string_dfa(*bounds, max_states=max(max_states, MAX_STRING_STATES))


def _compile(pattern: str, max_states: int, unicode: bool) -> ByteDFA:
    direct = None if unicode else _direct(pattern, max_states)
    return direct if direct is not None else _compile_nfa(pattern, max_states, unicode)


def _compile_nfa(pattern: str, max_states: int, unicode: bool) -> ByteDFA:
    """Parse, Thompson NFA, subset construction, minimization: every pattern's road."""
    parsed = _parse(pattern, unicode)
    nfa = _NFA(_nfa_limit(max_states), pattern)
    try:
        frag = _build(nfa, parsed, 0)
    except RecursionError:  # _build recurses once per level of nesting
        raise RegexError(_TOO_DEEP, pattern) from None
    table, acc, cuts = _determinize(nfa, frag, max_states)
    table, acc, start = _minimize(table, acc)
    return _freeze(table, acc, start, pattern, _column_of_cuts(cuts))


def clear_cache() -> None:
    """Forget the cached DFAs of :func:`compile_regex` in the active memo scope
    (:mod:`toolkit.core.memo`; the harness measures cold starts)."""
    _memo.current().table("toolkit.automata.regex.compile_regex").clear()


def compile_regex(pattern: str, *, max_states: int = DEFAULT_MAX_STATES, unicode: bool = False) -> ByteDFA:
    """Compile ``pattern`` to a minimal :class:`ByteDFA` over its UTF-8 bytes.

    Raises :class:`RegexError` for syntax outside the dialect (see the module doc)
    and :class:`LimitExceeded` when determinization needs more than ``max_states``
    states (limit ``"max_states"``) or the NFA, where bounded repeats are copies,
    more than ``max(4 * max_states, 100_000)`` (limit ``"nfa_states"``).
    ``unicode=True`` reads ``\\d \\w \\s`` (and their negations) as Unicode classes,
    the way Rust's ``regex`` crate does (outlines-core's dialect; see
    :mod:`toolkit.automata._rxparse`).  Small results are cached; the DFA is immutable.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be str, not {type(pattern).__name__}")
    return _compile_cached(pattern, max_states, bool(unicode))


@memo(maxsize=4096)
def compile_literal(data: bytes) -> ByteDFA:
    """The DFA of exactly one byte string (a chain; already minimal)."""
    n = len(data)
    column = np.zeros(256, dtype=np.int32)
    used = sorted(set(data))
    column[used] = np.arange(1, len(used) + 1, dtype=np.int32)
    table = np.zeros((n + 2, len(used) + 1), dtype=np.int32)
    if n:
        table[np.arange(1, n + 1), column[np.frombuffer(data, dtype=np.uint8)]] = np.arange(2, n + 2)
    acc = np.zeros(n + 2, dtype=bool)
    acc[n + 1] = True
    return _freeze(table, acc, 1, None, column)


# ------------------------------------------- the former construction ----


def _symbol_sequences(alphabet) -> dict[int, list[tuple[tuple[int, int], ...]]]:
    """For each alphabet symbol, the UTF-8 byte-range sequences of its characters."""
    chars: dict[int, set[int]] = {}
    explicit: set[int] = set()
    else_symbol = None
    for ch, sym in alphabet.items():
        if ch is anything_else:
            else_symbol = sym
            continue
        cp = ord(ch)
        chars.setdefault(sym, set()).add(cp)
        explicit.add(cp)
    out: dict[int, list] = {}
    for sym, cps in chars.items():
        out[sym] = [seq for lo, hi in ranges_of(cps) for seq in utf8_sequences(lo, hi)]
    if else_symbol is not None:
        rest = complement(ranges_of(explicit))
        out.setdefault(else_symbol, []).extend(
            seq for a, b in rest for seq in utf8_sequences(a, b)
        )
    return out


def _bytes_from_fsm(fsm, max_states: int, pattern: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Determinize a character FSM over bytes.  Returns (transitions, accepting, start)."""
    seqs = _symbol_sequences(fsm.alphabet)
    # Node keys: ("s", fsm_state) for FSM states, or a frozenset of
    # (remaining byte ranges, target key) for the inside of a multi-byte character.
    ids: dict[object, int] = {}
    rows: list[np.ndarray] = [np.zeros(256, dtype=np.int32)]  # dead state
    accepting: list[bool] = [False]
    todo: deque[object] = deque()

    def node(key: object) -> int:
        i = ids.get(key)
        if i is None:
            i = len(rows)
            if i >= max_states:
                raise LimitExceeded("max_states", i + 1, max_states)
            ids[key] = i
            rows.append(np.zeros(256, dtype=np.int32))
            accepting.append(isinstance(key, tuple) and key[1] in fsm.finals)
            todo.append(key)
        return i

    start = node(("s", fsm.initial))
    while todo:
        key = todo.popleft()
        if isinstance(key, tuple):
            entries = [
                (seq, ("s", target))
                for sym, target in fsm.map.get(key[1], {}).items()
                for seq in seqs.get(sym, ())
            ]
        else:
            entries = list(key)
        row = rows[ids[key]]
        # Elementary intervals of lead bytes: every byte inside one has the same entries.
        cuts = sorted({seq[0][0] for seq, _ in entries} | {seq[0][1] + 1 for seq, _ in entries})
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            inside = [(seq[1:], tgt) for seq, tgt in entries if seq[0][0] <= lo and hi - 1 <= seq[0][1]]
            if not inside:
                continue
            if not inside[0][0]:
                # A complete character: UTF-8 is prefix-free and the classes are
                # disjoint, so every entry here is the same character's one target.
                target = node(inside[0][1])
            else:
                target = node(frozenset(inside))
            row[lo:hi] = target
    trans = np.stack(rows).astype(np.int32, copy=False)
    return trans, np.array(accepting, dtype=bool), start


def _minimize_moore(trans: np.ndarray, accepting: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Moore partition refinement, then renumber: dead 0, start 1, breadth-first."""
    classes, table = _dfabuild.byte_classes(np.ascontiguousarray(trans, dtype=np.int32), _IDENTITY_COLUMNS)
    block = accepting.astype(np.int64)
    n_blocks = len(np.unique(block))
    while True:
        sig = np.concatenate([block[:, None], block[table]], axis=1)
        _, new_block = np.unique(sig, axis=0, return_inverse=True)
        new_block = new_block.reshape(-1)
        n_new = int(new_block.max()) + 1
        block = new_block
        if n_new == n_blocks:
            break
        n_blocks = n_new
    # One representative state per block.
    rep = np.full(n_blocks, -1, dtype=np.int64)
    rep[block[::-1]] = np.arange(len(block))[::-1]
    dead_block = block[DEAD]
    new_id = {int(dead_block): 0}
    order = [int(dead_block)]
    queue = deque()
    if block[start] != dead_block:
        new_id[int(block[start])] = 1
        order.append(int(block[start]))
        queue.append(int(block[start]))
    while queue:
        b = queue.popleft()
        for c in range(table.shape[1]):
            t = int(block[table[rep[b], c]])
            if t not in new_id:
                new_id[t] = len(order)
                order.append(t)
                queue.append(t)
    remap = np.zeros(n_blocks, dtype=np.int32)
    for b, i in new_id.items():
        remap[b] = i
    reps = rep[order]
    small = remap[block[table[reps]]]  # [n_min, n_classes]
    out = np.ascontiguousarray(small[:, classes], dtype=np.int32)
    acc = accepting[reps].copy()
    return out, acc, (1 if len(order) > 1 else 0)


def _compile_reference(pattern: str, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """The former construction, kept as a reference for the tests only.

    interegular's character FSM (``to_fsm``, quadratic in repeat bounds), expanded to
    bytes and minimized by Moore refinement; no cache.
    """
    parsed = _parse(pattern)
    try:
        fsm = parsed.to_fsm()
    except Unsupported as e:
        raise RegexError(f"unsupported regex feature ({e})", pattern) from e
    except Exception as e:  # interegular raises bare Exception, e.g. for a{2,1}
        raise RegexError(f"cannot build the automaton ({e})", pattern) from e
    trans, acc, start = _bytes_from_fsm(fsm, max_states, pattern)
    trans, acc, start = _minimize_moore(trans, acc, start)
    return from_transitions(trans, acc, start, pattern)


# ------------------------------------------------------------- rendering ----


# interegular lists every character of a positive class, so "any" and "nothing" are
# written with complementary shorthands (one meaning in Python and Rust alike).
_ANY = "[\\d\\D]"
_NOTHING = "[^\\d\\D]"


def _escape_cp(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    if 0x20 < cp < 0x7F and ch != "/":  # "/" delimits Lark regexes: always \x2F
        if ch.isalnum() or ch in "_<>":  # "\<" and "\>" are word boundaries in Rust
            return ch
        if not in_class and ch in "!\"#%&',:;=@`~":
            return ch
        return "\\" + ch
    if cp < 0x80:
        return f"\\x{cp:02X}"
    # Literal characters: interegular cannot read \\u escapes; Rust and Python can read both.
    return ch


def _class_body(rs: Sequence[tuple[int, int]]) -> str:
    """The inside of a character class for sorted disjoint code point ranges."""
    body = []
    for lo, hi in rs:
        if lo == hi:
            body.append(_escape_cp(lo, True))
        elif hi == lo + 1:
            body.append(_escape_cp(lo, True) + _escape_cp(hi, True))
        else:
            body.append(_escape_cp(lo, True) + "-" + _escape_cp(hi, True))
    return "".join(body)


def _render_class(cps: Iterable[int], negated: bool) -> str:
    rs = ranges_of(set(cps))
    if not negated and len(rs) == 1 and rs[0][0] == rs[0][1]:
        return _escape_cp(rs[0][0], False)
    if not rs:
        return _NOTHING if not negated else _ANY
    return ("[^" if negated else "[") + _class_body(rs) + "]"


def _case_variants(chars: Iterable[str]) -> set[int]:
    out: set[int] = set()
    for c in chars:
        for v in (c, c.lower(), c.upper()):
            if len(v) == 1:
                out.add(ord(v))
    return out


def _render(node: object, flags: REFlags) -> str:
    if isinstance(node, Pattern):
        inner = flags
        inner |= node.added_flags
        inner &= ~node.removed_flags
        opts = [_render(o, inner) for o in node.options]
        return "(?:" + "|".join(opts) + ")" if len(opts) != 1 else opts[0]
    if isinstance(node, _Concatenation):
        parts = [_render(p, flags) for p in node.parts]
        return "".join(p for p in parts if p != "(?:)") or "(?:)"
    if isinstance(node, _Repeated):
        base = _render(node.base, flags)
        if not isinstance(node.base, _CharGroup) and not type(node.base).__name__.endswith("DotCls"):
            base = "(?:" + base + ")"
        lo, hi = node.min, node.max
        if (lo, hi) == (0, None):
            q = "*"
        elif (lo, hi) == (1, None):
            q = "+"
        elif (lo, hi) == (0, 1):
            q = "?"
        elif hi is None:
            q = f"{{{lo},}}"
        elif lo == hi:
            q = f"{{{lo}}}"
        else:
            q = f"{{{lo},{hi}}}"
        return base + q
    if isinstance(node, _CharGroup):
        chars = node.chars
        cps = _case_variants(chars) if flags & REFlags.CASE_INSENSITIVE else {ord(c) for c in chars}
        return _render_class(cps, node.negated)
    name = type(node).__name__
    if name.endswith("DotCls"):
        return _ANY if flags & REFlags.SINGLE_LINE else "[^\\n]"
    if name.endswith("EmptyCls"):
        return "(?:)"
    raise RegexError(f"cannot render regex node {name}", "")


def canonical_regex(pattern: str, *, unicode: bool = False) -> str:
    """``pattern`` rewritten with explicit classes and no flags or shorthands.

    The result means the same thing in Python ``re`` and in Rust's ``regex`` crate
    (llguidance), so every engine runs the very same language: ``\\d`` becomes
    ``[0-9]``, ``.`` becomes ``[^\\n]``, case-insensitive letters become classes,
    non-ASCII characters are written as themselves.  ``unicode=True`` reads
    ``\\d \\w \\s`` as Unicode classes first (Rust's and Python's ``str`` reading).
    """
    parsed = _parse(pattern, unicode)
    try:
        return _render(parsed, REFlags(0))
    except RecursionError:  # _render recurses once per level of nesting
        raise RegexError(_TOO_DEEP, pattern) from None
