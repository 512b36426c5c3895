"""Byte-level DFAs (:class:`ByteDFA`): minimal, over byte classes, numbered canonically
(the dead state 0, the start 1, breadth-first), frozen; Hopcroft minimization and the
canonical byte classes in C (:mod:`toolkit.automata._dfabuild`).  How regexes become
them: :mod:`toolkit.automata.regex`."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from toolkit.automata import _dfabuild
from toolkit.core.classform import check_class_form, remember

__all__ = ["ByteDFA", "DEFAULT_MAX_STATES", "DEAD", "IDENTITY_COLUMNS", "check_class_form", "from_transitions", "minimize",
           "freeze"]

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





IDENTITY_COLUMNS = np.arange(256, dtype=np.int32)
"""The byte -> column map of a 256-column byte table."""


def from_transitions(trans: np.ndarray, accepting: np.ndarray, start: int, pattern: str | None = None) -> ByteDFA:
    """A :class:`ByteDFA` from a byte table ``int32[n, 256]`` (already minimal and
    numbered as the module doc says; nothing is checked but the shapes)."""
    return freeze(trans, accepting, start, pattern, IDENTITY_COLUMNS)


def minimize(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
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


def freeze(table: np.ndarray, accepting: np.ndarray, start: int, pattern: str | None,
            column: np.ndarray, *, canonical: bool = False) -> ByteDFA:
    """A :class:`ByteDFA` from a table over columns (byte ``b`` moves by column
    ``column[b]``), its columns merged into the canonical byte classes.  ``canonical``:
    the columns are those classes already (uint8 ``column``, int32 ``table``, as
    :func:`~toolkit.automata._dfabuild.string_copies` writes them), taken as they are."""
    if canonical:
        classes = column
    else:
        classes, table = _dfabuild.byte_classes(np.ascontiguousarray(table, dtype=np.int32),
                                                np.ascontiguousarray(column, dtype=np.int32))
    accepting = np.ascontiguousarray(accepting, dtype=bool)
    table.setflags(write=False)
    classes.setflags(write=False)
    accepting.setflags(write=False)
    remember(table, classes)
    return ByteDFA(table, classes, accepting, int(start), pattern)
