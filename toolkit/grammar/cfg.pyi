"""Type stub of the Cython module toolkit.grammar.cfg (see its docstring)."""

import numpy as np

def trim(
    n_nt: int, n_term: int, lhs: np.ndarray, off: np.ndarray, syms: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...
