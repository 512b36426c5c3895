"""Token bitmasks in the layout xgrammar and llguidance share.

A row holds ``ceil(V / 32)`` int32 words; token ``t`` is bit ``t % 32`` of word
``t // 32`` (read as an unsigned 32-bit word, so token 31 is the sign bit), and a set
bit means *allowed*.  Ids past the row's last bit are never allowed.  Because the
layout matches the peers', masks compare bit for bit and can be handed to their
GPU apply kernels unchanged.
"""

from __future__ import annotations

import importlib
import operator
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

__all__ = [
    "words",
    "allocate",
    "popcount",
    "to_bool",
    "from_bool",
    "set_bits",
    "get_bit",
    "allowed_ids",
    "apply_to_logits",
    "APPLY_KERNELS",
    "apply_kernel",
    "compare_apply_kernels",
]

Logits = TypeVar("Logits", "np.ndarray", "torch.Tensor")

_BITS = 32


def words(vocab_size: int) -> int:
    """Words in one bitmask row for a vocabulary of ``vocab_size`` ids."""
    size = operator.index(vocab_size)
    if size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {size}")
    return (size + _BITS - 1) // _BITS


def allocate(vocab_size: int, batch: int = 1) -> np.ndarray:
    """An all-disallowed int32 bitmask of shape ``(batch, words(vocab_size))``."""
    rows = operator.index(batch)
    if rows < 0:
        raise ValueError(f"batch must be >= 0, got {rows}")
    return np.zeros((rows, words(vocab_size)), dtype=np.int32)


def _check_bitmask(bitmask: Any, name: str = "bitmask", ndims: tuple[int, ...] = (1, 2)) -> None:
    if not isinstance(bitmask, np.ndarray):
        raise ValueError(f"{name} must be a numpy int32 array, got {type(bitmask).__name__}")
    if bitmask.dtype != np.int32:
        raise ValueError(f"{name} must have dtype int32, got {bitmask.dtype}")
    if bitmask.ndim not in ndims:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndims))} dimensions, got shape {bitmask.shape}"
        )


def _as_bytes(bitmask: np.ndarray) -> np.ndarray:
    # Little-endian words viewed as bytes: byte k of word w holds tokens 32w + 8k ... + 7,
    # lowest bit first, which is np.unpackbits' bitorder="little".
    words_le = np.ascontiguousarray(bitmask, dtype="<i4")
    return words_le.view(np.uint8)


def popcount(row: npt.ArrayLike) -> int:
    """Number of allowed tokens (set bits) in a row, or in a whole batch."""
    arr = np.asarray(row)
    _check_bitmask(arr, "row")
    if hasattr(np, "bitwise_count"):
        return int(np.bitwise_count(arr.view(np.uint32)).sum(dtype=np.int64))
    return int(np.unpackbits(_as_bytes(arr)).sum(dtype=np.int64))  # numpy < 2.0


def _unpack(bitmask: np.ndarray, width: int) -> np.ndarray:
    # Booleans for ids [0, width), False past the bitmask's last bit.
    bits = np.unpackbits(_as_bytes(bitmask), axis=-1, bitorder="little").view(np.bool_)
    have = bits.shape[-1]
    if have >= width:
        return bits[..., :width]
    out = np.zeros(bits.shape[:-1] + (width,), dtype=np.bool_)
    out[..., :have] = bits
    return out


def to_bool(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Boolean mask of shape ``(..., vocab_size)`` from a row (or batch) of ``words(vocab_size)`` words."""
    _check_bitmask(row, "row")
    n_words = words(vocab_size)
    if row.shape[-1] != n_words:
        raise ValueError(
            f"a bitmask for vocab_size={vocab_size} has {n_words} words per row, got shape {row.shape}"
        )
    return _unpack(row, operator.index(vocab_size))


def from_bool(mask_bool: npt.ArrayLike, out: np.ndarray | None = None) -> np.ndarray:
    """Pack a boolean mask of shape ``(V,)`` or ``(B, V)`` into int32 words.

    Bits past ``V`` in the last word are 0.  With ``out`` the words are written into
    that array (int32, shape ``(..., words(V))``), which is returned.
    """
    mask = np.asarray(mask_bool)
    if mask.dtype != np.bool_:
        raise ValueError(f"mask_bool must have dtype bool, got {mask.dtype}")
    if mask.ndim not in (1, 2):
        raise ValueError(f"mask_bool must have 1 or 2 dimensions, got shape {mask.shape}")
    n_words = words(mask.shape[-1])
    packed = np.packbits(mask, axis=-1, bitorder="little")
    padded = np.zeros(mask.shape[:-1] + (4 * n_words,), dtype=np.uint8)
    padded[..., : packed.shape[-1]] = packed
    result = padded.view("<i4")
    if out is None:
        return result.astype(np.int32, copy=False)
    _check_bitmask(out, "out")
    if out.shape != result.shape:
        raise ValueError(f"out must have shape {result.shape}, got {out.shape}")
    out[...] = result
    return out


def _check_ids(row: np.ndarray, ids: np.ndarray) -> None:
    limit = _BITS * row.shape[-1]
    if ids.size and (ids.min() < 0 or ids.max() >= limit):
        bad = ids.min() if ids.min() < 0 else ids.max()
        raise ValueError(
            f"token id {bad} is outside [0, {limit}) for a row of {row.shape[-1]} words"
        )


def set_bits(row: np.ndarray, ids: npt.ArrayLike) -> np.ndarray:
    """Set (allow) the bits of ``ids`` in a 1-D row, in place; returns the row."""
    _check_bitmask(row, "row", (1,))
    ids_arr = np.asarray(ids)
    if ids_arr.size and ids_arr.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got dtype {ids_arr.dtype}")
    ids_arr = ids_arr.astype(np.int64, copy=False).ravel()
    _check_ids(row, ids_arr)
    bits = np.left_shift(np.uint32(1), (ids_arr & (_BITS - 1)).astype(np.uint32))
    np.bitwise_or.at(row.view(np.uint32), ids_arr >> 5, bits)
    return row


def get_bit(row: np.ndarray, t: int) -> bool:
    """Whether token ``t`` is allowed in a 1-D row."""
    _check_bitmask(row, "row", (1,))
    token = operator.index(t)
    _check_ids(row, np.array([token]))
    return bool((int(row[token >> 5]) >> (token & (_BITS - 1))) & 1)


def allowed_ids(row: np.ndarray, vocab_size: int) -> np.ndarray:
    """The allowed token ids of a 1-D row, ascending, as int32."""
    _check_bitmask(row, "row", (1,))
    return np.flatnonzero(to_bool(row, vocab_size)).astype(np.int32)


def _is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _check_pair(logits_shape: tuple[int, ...], mask_shape: tuple[int, ...]) -> None:
    if len(logits_shape) not in (1, 2):
        raise ValueError(f"logits must have shape (V,) or (B, V), got {tuple(logits_shape)}")
    if len(mask_shape) != len(logits_shape) or mask_shape[:-1] != logits_shape[:-1]:
        raise ValueError(
            f"bitmask of shape {tuple(mask_shape)} does not match logits of shape "
            f"{tuple(logits_shape)}: expected (words,) for (V,) and (B, words) for (B, V)"
        )


def _limit(width: int, n_words: int, vocab_size: int | None) -> int:
    # Ids at or past this limit are disallowed whatever the bits say.
    limit = min(width, _BITS * n_words)
    if vocab_size is not None:
        size = operator.index(vocab_size)
        if size < 0:
            raise ValueError(f"vocab_size must be >= 0, got {size}")
        limit = min(limit, size)
    return limit


def apply_to_logits(logits: Logits, bitmask: Any, vocab_size: int | None = None) -> Logits:
    """Set the logits of disallowed tokens to -inf, in place; returns ``logits``.

    ``logits`` is a float numpy array or torch tensor of shape ``(V,)`` or ``(B, V)``;
    ``bitmask`` is int32 of shape ``(words,)`` or ``(B, words)`` (a numpy array, or for
    torch logits also a tensor).  Ids past ``32 * words`` and, when given, at or past
    ``vocab_size`` are disallowed (padding ids never survive).  On torch the work is
    done with torch ops on the logits' device.
    """
    if _is_torch_tensor(logits):
        return _apply_torch(logits, bitmask, vocab_size)
    if not isinstance(logits, np.ndarray):
        raise ValueError(
            f"logits must be a numpy array or torch tensor, got {type(logits).__name__}"
        )
    if logits.dtype.kind != "f":
        raise ValueError(f"logits must have a floating dtype, got {logits.dtype}")
    if not logits.flags.writeable:
        raise ValueError("logits must be writeable (the mask is applied in place)")
    if logits.ndim not in (1, 2):
        raise ValueError(f"logits must have shape (V,) or (B, V), got {logits.shape}")
    _check_bitmask(bitmask)
    _check_pair(logits.shape, bitmask.shape)
    width = logits.shape[-1]
    limit = _limit(width, bitmask.shape[-1], vocab_size)
    allowed = np.zeros(logits.shape, dtype=np.bool_)
    allowed[..., :limit] = _unpack(bitmask, limit)
    np.copyto(logits, -np.inf, where=~allowed)
    return logits


def _apply_torch(logits: torch.Tensor, bitmask: Any, vocab_size: int | None) -> torch.Tensor:
    import torch

    if not logits.is_floating_point():
        raise ValueError(f"logits must have a floating dtype, got {logits.dtype}")
    if isinstance(bitmask, np.ndarray):
        _check_bitmask(bitmask)
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    elif not isinstance(bitmask, torch.Tensor):
        raise ValueError(
            f"bitmask must be an int32 numpy array or tensor, got {type(bitmask).__name__}"
        )
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must have dtype int32, got {bitmask.dtype}")
    _check_pair(tuple(logits.shape), tuple(bitmask.shape))
    width = logits.shape[-1]
    limit = _limit(width, bitmask.shape[-1], vocab_size)
    # Little-endian words as bytes (x86 and CUDA): bit j of byte k of word w is token
    # 32w + 8k + j.  Unpacking bytes keeps the intermediate 4x smaller than int32 lanes.
    octets = bitmask.to(logits.device).contiguous().view(torch.uint8)
    shifts = torch.arange(8, dtype=torch.uint8, device=logits.device)
    blocked = ((octets.unsqueeze(-1) >> shifts) & 1).flatten(-2)[..., :limit] == 0
    logits[..., :limit].masked_fill_(blocked, float("-inf"))
    if limit < width:
        logits[..., limit:] = float("-inf")
    return logits


# ---------------------------------------------------------------------------- apply kernels

APPLY_KERNELS: tuple[str, ...] = ("torch", "xgrammar", "llguidance")
"""Kernels that apply a bitmask to torch logits on their device: ``torch`` is
:func:`apply_to_logits` (plain torch ops), ``xgrammar`` is
``xgrammar.apply_token_bitmask_inplace`` (its C++ kernel on CPU, Triton on CUDA),
``llguidance`` is ``llguidance.torch.apply_token_bitmask_inplace`` (a
``torch.compile``'d kernel: the first call compiles, seconds on CPU)."""


def _padded_for(bitmask: torch.Tensor, width: int, vocab_size: int | None) -> torch.Tensor:
    """``bitmask`` with ``words(width)`` words per row and every bit at or past
    ``min(width, vocab_size, 32 * words)`` cleared: the peers' kernels then block
    padding ids the way :func:`apply_to_logits` does (xgrammar leaves logits past the
    bitmask unmasked; both trust the bits below their vocabulary size)."""
    import torch

    limit = _limit(width, bitmask.shape[-1], vocab_size)
    need = words(width)
    if bitmask.shape[-1] == need and limit == width:
        return bitmask
    out = torch.zeros(bitmask.shape[:-1] + (need,), dtype=torch.int32, device=bitmask.device)
    full, rest = divmod(limit, _BITS)
    out[..., :full] = bitmask[..., :full]
    if rest:
        out[..., full] = bitmask[..., full] & ((1 << rest) - 1)  # rest < 32: fits in int32
    return out


def _torch_kernel(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: int | None) -> None:
    _apply_torch(logits, bitmask, vocab_size)


def _xgrammar_kernel(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: int | None) -> None:
    import xgrammar

    width = logits.shape[-1]
    xgrammar.apply_token_bitmask_inplace(logits, _padded_for(bitmask, width, vocab_size),
                                         vocab_size=width)


def _llguidance_kernel(logits: torch.Tensor, bitmask: torch.Tensor, vocab_size: int | None) -> None:
    import llguidance.torch

    llguidance.torch.apply_token_bitmask_inplace(
        logits, _padded_for(bitmask, logits.shape[-1], vocab_size))


def apply_kernel(name: str) -> Any:
    """The apply kernel ``name`` (one of :data:`APPLY_KERNELS`) as
    ``kernel(logits, bitmask, vocab_size)``: torch logits ``(B, V)``, an int32 bitmask
    tensor ``(B, words)`` on the logits' device, ids at or past ``vocab_size`` (when
    given) or past the bitmask blocked, in place.  Every kernel computes the same
    result (tests check it); they differ in speed.  Raises ``ValueError`` for an
    unknown name and ``ImportError`` naming the package when it is not installed."""
    kernels = {"torch": _torch_kernel, "xgrammar": _xgrammar_kernel, "llguidance": _llguidance_kernel}
    if name not in kernels:
        raise ValueError(f"unknown apply kernel {name!r}; known: {', '.join(APPLY_KERNELS)}")
    if name != "torch":
        try:
            importlib.import_module("llguidance.torch" if name == "llguidance" else name)
        except ImportError as e:
            raise ImportError(f"apply kernel {name!r} needs the {name} package (pip install "
                              f"'masklab[peers]'): {e}") from e
    return kernels[name]


def compare_apply_kernels(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    vocab_size: int | None = None,
    kernels: Sequence[str] = APPLY_KERNELS,
    repeats: int = 20,
) -> list[dict[str, Any]]:
    """Time each kernel on copies of ``logits`` with ``bitmask`` (same device) and check
    it blocks exactly what :func:`apply_to_logits` blocks.

    One row per kernel: ``kernel``, ``available`` (False with ``error`` when it is not
    installed or fails on these inputs), ``warmup_ms`` (the first call: compilation
    for ``torch.compile``'d kernels), ``ms_p50`` / ``ms_mean`` over ``repeats`` timed
    calls (device synchronized around each), and ``equal`` (the masked logits are
    bit-identical to the torch op's).
    """

    import torch

    def sync() -> None:
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)

    ref = logits.clone()
    _apply_torch(ref, bitmask, vocab_size)
    rows: list[dict[str, Any]] = []
    for name in kernels:
        row: dict[str, Any] = {"kernel": name, "available": False, "error": "", "warmup_ms": None,
                               "ms_p50": None, "ms_mean": None, "equal": None}
        rows.append(row)
        try:
            fn = apply_kernel(name)
            x = logits.clone()
            sync()
            t0 = time.perf_counter()
            fn(x, bitmask, vocab_size)
            sync()
            row["warmup_ms"] = 1e3 * (time.perf_counter() - t0)
            row["equal"] = bool(torch.equal(x, ref))
            times = []
            for _ in range(repeats):
                x = logits.clone()
                sync()
                t0 = time.perf_counter()
                fn(x, bitmask, vocab_size)
                sync()
                times.append(time.perf_counter() - t0)
                row["equal"] = row["equal"] and bool(torch.equal(x, ref))
        except Exception as e:  # noqa: BLE001 - a kernel that fails here is reported, not fatal
            row["error"] = f"{type(e).__name__}: {e}"[:500]
            continue
        row.update(available=True, ms_p50=1e3 * float(np.median(times)),
                   ms_mean=1e3 * float(np.mean(times)))
    return rows
