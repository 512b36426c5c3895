"""Regexes to minimal byte-level DFAs.

The dialect is Python's ``re`` syntax as parsed by ``interegular``, with the
semantics of ``re.fullmatch(pattern, text, re.ASCII)``: ``\\d``, ``\\w`` and ``\\s``
are the ASCII classes (as in Outlines and ECMAScript's ``\\d``/``\\w``), while ``.``
and negated classes match any Unicode character (``.`` not ``\\n``).  A leading
``^`` and a trailing ``$`` of the whole pattern are redundant under full-match
semantics and are dropped; anchors elsewhere, lookarounds and back-references raise
:class:`~toolkit.errors.RegexError`.

interegular gives a DFA over *characters* whose alphabet is a set of character
classes.  :func:`compile_regex` expands each class into UTF-8 byte-range sequences
(:mod:`toolkit._utf8`), determinizes the result over bytes (the continuation of a
multi-byte character is hash-consed, so equal continuations share states), and
minimizes it (Moore's partition refinement over byte classes).  States are numbered
with the dead state at 0 and the start state at 1, in breadth-first order, so two
equal languages give identical arrays.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import interegular
import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import (
    InvalidSyntax,
    Pattern,
    REFlags,
    Unsupported,
    _CharGroup,
    _Concatenation,
    _NonCapturing,
    _Repeated,
)

from toolkit._utf8 import complement, ranges_of, utf8_sequences
from toolkit.errors import LimitExceeded, RegexError

__all__ = [
    "ByteDFA",
    "compile_regex",
    "compile_literal",
    "canonical_regex",
    "DEFAULT_MAX_STATES",
]

DEFAULT_MAX_STATES = 200_000
"""Default limit on DFA states; exceeding it raises :class:`LimitExceeded`."""

DEAD = 0


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A minimal complete DFA over bytes.

    ``transitions[s, b]`` is the state after byte ``b`` in state ``s``; state 0 is
    dead (it loops on every byte and is not accepting), and every other state can
    still reach an accepting state.  Arrays are read-only and C-contiguous.
    """

    transitions: np.ndarray
    accepting: np.ndarray
    start: int
    pattern: str | None = None
    _classes: list = field(default_factory=list, repr=False)

    @property
    def n_states(self) -> int:
        return int(self.transitions.shape[0])

    @property
    def dead(self) -> int:
        return DEAD

    def is_empty(self) -> bool:
        """True when the language is empty (the start state is dead)."""
        return self.start == DEAD

    def step(self, state: int, byte: int) -> int:
        return int(self.transitions[state, byte])

    def run(self, data: bytes, state: int | None = None) -> int:
        """The state after ``data`` from ``state`` (default: start); 0 once dead."""
        s = self.start if state is None else state
        trans = self.transitions
        for b in data:
            s = trans[s, b]
            if s == DEAD:
                return DEAD
        return int(s)

    def fullmatch(self, data: bytes) -> bool:
        """True when ``data`` is in the language."""
        return bool(self.accepting[self.run(data)])

    def byte_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """Byte-class compression: ``(classes uint8[256], table int32[n_states, n_classes])``.

        Bytes in one class behave identically in every state, so
        ``transitions[s, b] == table[s, classes[b]]``.
        """
        if not self._classes:
            classes, table = _byte_classes(self.transitions)
            classes.setflags(write=False)
            table.setflags(write=False)
            self._classes.extend((classes, table))
        return self._classes[0], self._classes[1]

    def memory_bytes(self) -> int:
        return int(self.transitions.nbytes + self.accepting.nbytes)

    def __repr__(self) -> str:
        return f"ByteDFA(states={self.n_states}, start={self.start}, pattern={self.pattern!r})"


def _byte_classes(trans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, first, inverse = np.unique(trans.T, axis=0, return_index=True, return_inverse=True)
    # Number the classes in order of their first byte, so class 0 contains byte 0.
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    classes = rank[inverse.reshape(-1)].astype(np.uint8)
    table = np.ascontiguousarray(trans[:, np.sort(first)], dtype=np.int32)
    return classes, table


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


def _parse(pattern: str) -> Pattern:
    try:
        parsed = interegular.parse_pattern(_strip_anchors(pattern))
    except Unsupported as e:
        raise RegexError(f"unsupported regex syntax ({e})", pattern, _fragment_hint(str(e))) from e
    except InvalidSyntax as e:
        raise RegexError(f"invalid regex syntax ({e})", pattern) from e
    except Exception as e:  # interegular raises plain errors on some malformed input
        raise RegexError(f"cannot parse regex ({type(e).__name__}: {e})", pattern) from e
    _reject_lookarounds(parsed, pattern)
    return parsed


def _fragment_hint(message: str) -> str | None:
    if "'$'" in message:
        return "$"
    if "'^'" in message:
        return "^"
    return None


def _reject_lookarounds(node: object, pattern: str) -> None:
    if isinstance(node, _NonCapturing):
        kind = "lookbehind" if node.backwards else "lookahead"
        raise RegexError(f"{kind} assertions are not regular over a full match", pattern, "(?")
    if isinstance(node, Pattern):
        for o in node.options:
            _reject_lookarounds(o, pattern)
    elif isinstance(node, _Concatenation):
        for p in node.parts:
            _reject_lookarounds(p, pattern)
    elif isinstance(node, _Repeated):
        _reject_lookarounds(node.base, pattern)


# ------------------------------------------------------ char FSM -> bytes ----


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


# ------------------------------------------------------------ minimizing ----


def _minimize(trans: np.ndarray, accepting: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Moore partition refinement, then renumber: dead 0, start 1, breadth-first."""
    classes, table = _byte_classes(trans)
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


def _freeze(trans: np.ndarray, accepting: np.ndarray, start: int, pattern: str | None) -> ByteDFA:
    trans = np.ascontiguousarray(trans, dtype=np.int32)
    accepting = np.ascontiguousarray(accepting, dtype=bool)
    trans.setflags(write=False)
    accepting.setflags(write=False)
    return ByteDFA(trans, accepting, int(start), pattern)


@functools.lru_cache(maxsize=4096)
def _compile_cached(pattern: str, max_states: int) -> ByteDFA:
    parsed = _parse(pattern)
    try:
        fsm = parsed.to_fsm()
    except Unsupported as e:
        raise RegexError(f"unsupported regex feature ({e})", pattern) from e
    except Exception as e:  # interegular raises bare Exception, e.g. for a{2,1}
        raise RegexError(f"cannot build the automaton ({e})", pattern) from e
    trans, acc, start = _bytes_from_fsm(fsm, max_states, pattern)
    trans, acc, start = _minimize(trans, acc, start)
    return _freeze(trans, acc, start, pattern)


def compile_regex(pattern: str, *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """Compile ``pattern`` to a minimal :class:`ByteDFA` over its UTF-8 bytes.

    Raises :class:`RegexError` for syntax outside the dialect (see the module doc)
    and :class:`LimitExceeded` when determinization needs more than ``max_states``.
    Results are cached; the returned DFA is immutable.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be str, not {type(pattern).__name__}")
    return _compile_cached(pattern, max_states)


@functools.lru_cache(maxsize=4096)
def compile_literal(data: bytes) -> ByteDFA:
    """The DFA of exactly one byte string (a chain; already minimal)."""
    n = len(data)
    trans = np.zeros((n + 2, 256), dtype=np.int32)
    for i, b in enumerate(data):
        trans[i + 1, b] = i + 2
    acc = np.zeros(n + 2, dtype=bool)
    acc[n + 1] = True
    return _freeze(trans, acc, 1, None)


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


def _render_class(cps: Iterable[int], negated: bool) -> str:
    parts = []
    for lo, hi in ranges_of(set(cps)):
        if lo == hi:
            parts.append(_escape_cp(lo, True))
        elif hi == lo + 1:
            parts.append(_escape_cp(lo, True) + _escape_cp(hi, True))
        else:
            parts.append(_escape_cp(lo, True) + "-" + _escape_cp(hi, True))
    body = "".join(parts)
    if not negated and len(parts) == 1 and "-" not in body and len(ranges_of(set(cps))) == 1:
        lo, hi = ranges_of(set(cps))[0]
        if lo == hi:
            return _escape_cp(lo, False)
    if not body:
        return _NOTHING if not negated else _ANY
    return ("[^" if negated else "[") + body + "]"


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


def canonical_regex(pattern: str) -> str:
    """``pattern`` rewritten with explicit classes and no flags or shorthands.

    The result means the same thing in Python ``re`` and in Rust's ``regex`` crate
    (llguidance), so every engine runs the very same language: ``\\d`` becomes
    ``[0-9]``, ``.`` becomes ``[^\\n]``, case-insensitive letters become classes,
    non-ASCII characters are written as themselves.
    """
    return _render(_parse(pattern), REFlags(0))
