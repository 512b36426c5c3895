"""Type stub of the Cython module toolkit.automata._dfabuild (see its docstring)."""

import numpy as np

__all__ = [
    "byte_classes",
    "determinize",
    "horizon_classes",
    "json_literal",
    "literal_set",
    "minimize",
    "minus_words",
    "product",
    "renumber",
    "string_copies",
]

def determinize(
    eps: list[list[int] | tuple[int, ...]],
    edges: list[tuple[tuple[int, int, int], ...]],
    start: int,
    final: int,
    max_states: int,
) -> tuple[np.ndarray, np.ndarray, list[int]]: ...
def _check_targets(what: str, table: np.ndarray, n: int) -> None: ...
def minimize(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
def horizon_classes(table: np.ndarray, accepting: np.ndarray, rounds: int) -> np.ndarray: ...
def product(
    ta: np.ndarray,
    acc_a: np.ndarray,
    start_a: int,
    tb: np.ndarray,
    acc_b: np.ndarray,
    start_b: int,
    op: str,
    max_states: int,
    cols_a: np.ndarray | None = None,
    cols_b: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None: ...
def json_literal(value: str, max_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...
def json_literals(values: list[str], max_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...
def literal_set(words: list[bytes], max_states: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...
def minus_words(
    table: np.ndarray,
    classes: np.ndarray,
    accepting: np.ndarray,
    start: int,
    words: list[bytes],
    max_states: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None: ...
def byte_classes(table: np.ndarray, column: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
def renumber(table: np.ndarray, accepting: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]: ...
def string_copies(
    code: np.ndarray, s0: int, quote: int, cols: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]: ...
