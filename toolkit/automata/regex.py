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
the parse tree into a Thompson NFA over bytes (:mod:`toolkit.automata.nfa`): each character class
becomes the UTF-8 byte-range sequences of its code points (:mod:`toolkit.automata.utf8`;
surrogates have none, except U+DCFF written alone, which is the raw byte 0xFF that
marks a special token: :mod:`toolkit.grammar.special`), with equal continuations of a multi-byte character shared,
and a bounded repeat ``x{m,n}`` becomes ``n`` copies of ``x``'s fragment, the
optional ones nested (``x(x(x)?)?``) so that epsilon closures stay small; a limit on
NFA states turns a huge repeat into :class:`~toolkit.core.errors.LimitExceeded` rather
than an out-of-memory.  Fragments of the empty language are dropped while building,
so every NFA state that can be reached can also reach acceptance.  The subset
construction (:mod:`toolkit.automata.nfa`) runs over byte *classes* (the coarsest partition
of the bytes that no edge range cuts), with epsilon closures memoized, and stops at
``max_states``; every nonempty subset is then a live state.  Hopcroft's algorithm
(:func:`minimize`, O(m log n)) merges equivalent states, and the minimal states are
numbered with the dead state at 0 and the start state at 1, in breadth-first order
(successors by smallest byte), so two equal languages give identical arrays.  Both
steps are C (:mod:`toolkit.automata._dfabuild`, without the GIL); the parser and the NFA
construction are Python.  The result is kept over its byte classes (bytes every state
treats alike; :class:`ByteDFA`), typically a tenth of the 256-column byte table or
less.  A JSON string with length bounds, exactly as
:func:`toolkit.automata.jsontext.json_string` writes it, skips all of this: its minimal DFA
is written down directly (:func:`toolkit.automata.jsontext.json_string_dfa`, the same arrays).

The former construction (interegular's character FSM, expanded to bytes and
minimized by Moore's refinement: quadratic in repeat bounds, one round per state of
the longest chain) lives on in the tests (``tests/_support/regex_reference.py``), which
compare against it byte for byte.  The walks of the tree (the NFA's, and :func:`toolkit.automata.rxtext.canonical_regex`'s)
recurse once per level of group nesting; past Python's recursion limit (a few
hundred levels) they raise :class:`~toolkit.core.errors.RegexError`.
"""

from __future__ import annotations

import re

import numpy as np

from toolkit.automata import _dfabuild
from toolkit.automata.dfa import (
    DEFAULT_MAX_STATES,
    ByteDFA,
    check_class_form,
    freeze,
    from_transitions,
)
from toolkit.automata.jsontext import (
    JSON_CHAR,
    LLGUIDANCE_CHAR,
    MAX_STRING_STATES,
    json_string_bounds,
    json_string_dfa,
)
from toolkit.automata.nfa import compile_nfa
from toolkit.automata.rxtext import canonical_regex
from toolkit.core import memo as _memo
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
    or a JSON string with length bounds (:func:`toolkit.automata.jsontext.json_string_dfa`),
    whose NFA would be one copy of a 20-state character per unit of ``maxLength``.  These
    are shapes of regex text, whoever wrote it (a Lark file, a grammar read back from
    Lark); masklab's own terminals do not rely on them: they carry their bounds and
    words as data (:class:`toolkit.grammar.Terminal` ``forms``)."""
    words = literal_words(pattern)
    if words is not None:
        made = _dfabuild.literal_set(words, max_states)
        if made is None:  # over the limit: the usual road says so in its own words
            return None
        return freeze(made[0], made[1], 1, pattern, made[2])
    if not (pattern.startswith('"') and pattern.endswith('"')):
        return None
    for char in (JSON_CHAR, LLGUIDANCE_CHAR):  # the two spellings' strings
        bounds = json_string_bounds(pattern, char)
        if bounds is not None:
            # linear in the bound, not a subset construction: allowed up to MAX_STRING_LENGTH
            return json_string_dfa(*bounds, max_states=max(max_states, MAX_STRING_STATES), char=char)
    return None


def _compile(pattern: str, max_states: int, unicode: bool) -> ByteDFA:
    direct = None if unicode else _direct(pattern, max_states)
    return direct if direct is not None else compile_nfa(pattern, max_states, unicode)


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
    return freeze(table, acc, 1, None, column)
