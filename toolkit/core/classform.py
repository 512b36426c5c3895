"""The class form of a DFA's arrays, as the Cython walkers read them (a table over byte
classes and the byte -> class column), checked once: :func:`check_class_form`.  Arrays
that :func:`toolkit.automata.dfa.freeze` made are known good and skip the scan."""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["check_class_form", "remember"]


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


#: the (table, classes) pairs :func:`_freeze` made: read-only, int32/uint8, every class
#: a column and every entry a state by construction (weak references: ids are reused)
_BUILT: dict[tuple[int, int], tuple[weakref.ref[np.ndarray], weakref.ref[np.ndarray]]] = {}
_BUILT_MAX = 1 << 17


def remember(table: np.ndarray, classes: np.ndarray) -> None:
    """Note ``(table, classes)`` as arrays in class form by construction (read-only;
    :func:`check_class_form` then skips its scan)."""
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.clear()
    _BUILT[(id(table), id(classes))] = (weakref.ref(table), weakref.ref(classes))
