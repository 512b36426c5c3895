"""The former regex construction, kept as a reference the tests compare
:func:`toolkit.automata.regex.compile_regex` against byte for byte.

interegular's character FSM (``to_fsm``, quadratic in repeat bounds), expanded to bytes
and minimized by Moore's partition refinement; no cache.  It lived in
``toolkit/automata/regex.py`` until the direct construction replaced it; it is test
code, so it ships no more.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from interegular.fsm import anything_else
from interegular.patterns import Unsupported

from toolkit.automata import _dfabuild
from toolkit.automata.dfa import (
    DEAD,
    DEFAULT_MAX_STATES,
    IDENTITY_COLUMNS,
    ByteDFA,
    from_transitions,
)
from toolkit.automata.nfa import parse_pattern
from toolkit.automata.utf8 import complement, ranges_of, utf8_sequences
from toolkit.core.errors import LimitExceeded, RegexError

__all__ = ["compile_reference"]


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
    classes, table = _dfabuild.byte_classes(np.ascontiguousarray(trans, dtype=np.int32), IDENTITY_COLUMNS)
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


def compile_reference(pattern: str, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """``pattern``'s minimal DFA by the former construction.

    interegular's character FSM (``to_fsm``, quadratic in repeat bounds), expanded to
    bytes and minimized by Moore refinement; no cache.
    """
    parsed = parse_pattern(pattern)
    try:
        fsm = parsed.to_fsm()
    except Unsupported as e:
        raise RegexError(f"unsupported regex feature ({e})", pattern) from e
    except Exception as e:  # interegular raises bare Exception, e.g. for a{2,1}
        raise RegexError(f"cannot build the automaton ({e})", pattern) from e
    trans, acc, start = _bytes_from_fsm(fsm, max_states, pattern)
    trans, acc, start = _minimize_moore(trans, acc, start)
    return from_transitions(trans, acc, start, pattern)
