"""toolkit.core.bitmask: the int32 word layout shared with xgrammar/llguidance, and applying it."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from toolkit.core import bitmask


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _random_bool(rng: np.random.Generator, shape: int | tuple[int, ...], p: float = 0.3):
    return rng.random(shape) < p


# -- layout -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("vocab_size", "expected"), [(0, 0), (1, 1), (31, 1), (32, 1), (33, 2), (128_256, 4008)]
)
def test_words(vocab_size: int, expected: int) -> None:
    assert bitmask.words(vocab_size) == expected


def test_words_rejects_negative() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        bitmask.words(-1)


def test_allocate_is_all_disallowed() -> None:
    rows = bitmask.allocate(100, batch=3)
    assert rows.shape == (3, 4)
    assert rows.dtype == np.int32
    assert not rows.any()
    assert bitmask.allocate(64).shape == (1, 2)


def test_bit_positions_and_sign_bit() -> None:
    row = bitmask.allocate(70)[0]
    bitmask.set_bits(row, [0])
    assert row.tolist() == [1, 0, 0]
    bitmask.set_bits(row, [31])
    # Token 31 is the sign bit of word 0: as uint32 it is 0x80000000.
    assert row[0] == np.int32(-(2**31) + 1)
    assert row.view(np.uint32)[0] == 0x8000_0001
    bitmask.set_bits(row, [32, 69])
    assert row.view(np.uint32).tolist() == [0x8000_0001, 1, 1 << 5]
    for t in range(70):
        assert bitmask.get_bit(row, t) == (t in (0, 31, 32, 69))


def test_set_bits_accepts_duplicates_and_arrays() -> None:
    row = bitmask.allocate(64)[0]
    bitmask.set_bits(row, np.array([5, 5, 63, 5], dtype=np.int32))
    assert row.view(np.uint32).tolist() == [1 << 5, 1 << 31]
    assert bitmask.set_bits(row, []) is row


def test_set_and_get_bit_reject_bad_input() -> None:
    row = bitmask.allocate(40)[0]  # 2 words: ids 0..63 are addressable
    with pytest.raises(ValueError, match="outside"):
        bitmask.set_bits(row, [64])
    with pytest.raises(ValueError, match="outside"):
        bitmask.set_bits(row, [-1])
    with pytest.raises(ValueError, match="outside"):
        bitmask.get_bit(row, 64)
    with pytest.raises(ValueError, match="integers"):
        bitmask.set_bits(row, [1.5])
    with pytest.raises(ValueError, match="int32"):
        bitmask.set_bits(row.astype(np.int64), [1])
    with pytest.raises(ValueError, match="dimensions"):
        bitmask.set_bits(bitmask.allocate(40, batch=2), [1])


# -- popcount, bool conversions -----------------------------------------------


def test_popcount_matches_bool_count(rng: np.random.Generator) -> None:
    mask = _random_bool(rng, 128_256)
    row = bitmask.from_bool(mask)
    assert bitmask.popcount(row) == int(mask.sum())
    assert bitmask.popcount(np.full(5, -1, dtype=np.int32)) == 160
    assert bitmask.popcount(bitmask.allocate(100)) == 0


def test_popcount_without_bitwise_count(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    mask = _random_bool(rng, (3, 1000))
    rows = bitmask.from_bool(mask)
    expected = bitmask.popcount(rows)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    assert bitmask.popcount(rows) == expected == int(mask.sum())


@pytest.mark.parametrize("vocab_size", [1, 7, 31, 32, 33, 63, 64, 65, 1000, 32_001])
def test_bool_round_trip(rng: np.random.Generator, vocab_size: int) -> None:
    mask = _random_bool(rng, vocab_size, p=0.5)
    row = bitmask.from_bool(mask)
    assert row.dtype == np.int32
    assert row.shape == (bitmask.words(vocab_size),)
    np.testing.assert_array_equal(bitmask.to_bool(row, vocab_size), mask)
    np.testing.assert_array_equal(bitmask.allowed_ids(row, vocab_size), np.flatnonzero(mask))
    # Bits past the vocabulary stay 0.
    assert bitmask.popcount(row) == int(mask.sum())
    ids = np.flatnonzero(mask)
    by_ids = bitmask.allocate(vocab_size)[0]
    bitmask.set_bits(by_ids, ids)
    np.testing.assert_array_equal(by_ids, row)


def test_from_bool_batch_and_out(rng: np.random.Generator) -> None:
    mask = _random_bool(rng, (4, 70))
    rows = bitmask.from_bool(mask)
    assert rows.shape == (4, 3)
    np.testing.assert_array_equal(bitmask.to_bool(rows, 70), mask)
    out = np.full((4, 3), -1, dtype=np.int32)
    assert bitmask.from_bool(mask, out=out) is out
    np.testing.assert_array_equal(out, rows)
    row_out = bitmask.allocate(70, batch=2)
    bitmask.from_bool(mask[2], out=row_out[1])
    np.testing.assert_array_equal(row_out[1], rows[2])
    assert not row_out[0].any()


def test_from_bool_sets_the_documented_bits() -> None:
    mask = np.zeros(40, dtype=bool)
    mask[[0, 31, 39]] = True
    assert bitmask.from_bool(mask).view(np.uint32).tolist() == [0x8000_0001, 1 << 7]


def test_conversion_errors() -> None:
    with pytest.raises(ValueError, match="bool"):
        bitmask.from_bool(np.zeros(10, dtype=np.int32))
    with pytest.raises(ValueError, match="shape"):
        bitmask.from_bool(np.zeros(40, dtype=bool), out=bitmask.allocate(40)[0][:1])
    with pytest.raises(ValueError, match="int32"):
        bitmask.from_bool(np.zeros(40, dtype=bool), out=np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="2 words"):
        bitmask.to_bool(bitmask.allocate(100)[0], 40)
    with pytest.raises(ValueError, match="int32"):
        bitmask.to_bool(np.zeros(2, dtype=np.uint8), 40)


# -- apply_to_logits ------------------------------------------------------------


def _expected(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    return np.where(allowed, logits, -np.inf)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_apply_numpy_1d(rng: np.random.Generator, dtype: type) -> None:
    allowed = _random_bool(rng, 100)
    logits = rng.standard_normal(100).astype(dtype)
    expected = _expected(logits, allowed)
    result = bitmask.apply_to_logits(logits, bitmask.from_bool(allowed))
    assert result is logits
    np.testing.assert_array_equal(logits, expected)


def test_apply_numpy_batch(rng: np.random.Generator) -> None:
    allowed = _random_bool(rng, (3, 77))
    logits = rng.standard_normal((3, 77)).astype(np.float32)
    expected = _expected(logits, allowed)
    bitmask.apply_to_logits(logits, bitmask.from_bool(allowed))
    np.testing.assert_array_equal(logits, expected)


def test_apply_numpy_widths(rng: np.random.Generator) -> None:
    allowed = np.ones(64, dtype=bool)
    row = bitmask.from_bool(allowed)  # 2 words, every bit set
    wide = rng.standard_normal(100)
    bitmask.apply_to_logits(wide, row)
    assert np.isfinite(wide[:64]).all()
    assert np.isneginf(wide[64:]).all()
    narrow = rng.standard_normal(40)
    bitmask.apply_to_logits(narrow, row)
    assert np.isfinite(narrow).all()
    capped = rng.standard_normal(64)
    bitmask.apply_to_logits(capped, row, vocab_size=50)
    assert np.isfinite(capped[:50]).all()
    assert np.isneginf(capped[50:]).all()


def test_apply_numpy_errors() -> None:
    row = bitmask.allocate(64)[0]
    with pytest.raises(ValueError, match="floating"):
        bitmask.apply_to_logits(np.zeros(64, dtype=np.int64), row)
    with pytest.raises(ValueError, match="int32"):
        bitmask.apply_to_logits(np.zeros(64), row.astype(np.int64))
    with pytest.raises(ValueError, match="does not match"):
        bitmask.apply_to_logits(np.zeros((2, 64)), row)
    with pytest.raises(ValueError, match="does not match"):
        bitmask.apply_to_logits(np.zeros((2, 64)), bitmask.allocate(64, batch=3))
    with pytest.raises(ValueError, match="logits must have shape"):
        bitmask.apply_to_logits(np.zeros((1, 2, 64)), np.zeros((1, 2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="numpy array or torch tensor"):
        bitmask.apply_to_logits([0.0] * 64, row)


def test_apply_torch_cpu(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    allowed = _random_bool(rng, (2, 77))
    base = rng.standard_normal((2, 77)).astype(np.float32)
    expected = _expected(base, allowed)
    rows = bitmask.from_bool(allowed)
    for mask in (rows, torch.from_numpy(rows)):
        logits = torch.from_numpy(base.copy())
        assert bitmask.apply_to_logits(logits, mask) is logits
        np.testing.assert_array_equal(logits.numpy(), expected)
    one = torch.from_numpy(base[1].copy()).to(torch.bfloat16)
    bitmask.apply_to_logits(one, rows[1])
    np.testing.assert_array_equal(torch.isneginf(one).numpy(), ~allowed[1])


def test_apply_torch_widths_and_errors() -> None:
    torch = pytest.importorskip("torch")
    row = np.full(2, -1, dtype=np.int32)  # ids 0..63 allowed
    wide = torch.zeros(100)
    bitmask.apply_to_logits(wide, row)
    assert torch.isfinite(wide[:64]).all() and torch.isneginf(wide[64:]).all()
    capped = torch.zeros(64)
    bitmask.apply_to_logits(capped, row, vocab_size=50)
    assert torch.isfinite(capped[:50]).all() and torch.isneginf(capped[50:]).all()
    narrow = torch.zeros(40)
    bitmask.apply_to_logits(narrow, row)
    assert torch.isfinite(narrow).all()
    with pytest.raises(ValueError, match="int32"):
        bitmask.apply_to_logits(torch.zeros(64), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="floating"):
        bitmask.apply_to_logits(torch.zeros(64, dtype=torch.int32), row)
    with pytest.raises(ValueError, match="does not match"):
        bitmask.apply_to_logits(torch.zeros(3, 64), row)


def test_apply_torch_cuda(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    allowed = _random_bool(rng, (4, 128_256))
    base = rng.standard_normal((4, 128_256)).astype(np.float32)
    logits = torch.from_numpy(base).cuda()
    bitmask.apply_to_logits(logits, bitmask.from_bool(allowed))
    assert logits.device.type == "cuda"
    np.testing.assert_array_equal(logits.cpu().numpy(), _expected(base, allowed))


@pytest.mark.parametrize(
    ("n_words", "width", "vocab_size"),
    [(4, 128, None), (5, 131, None), (5, 160, 131), (4, 150, None), (5, 96, None), (4, 128, 77)],
)
def test_apply_kernels_agree_with_the_numpy_op(rng: np.random.Generator, n_words, width, vocab_size) -> None:
    """Every apply kernel installed (torch op, xgrammar's, llguidance's) blocks exactly
    what the numpy op blocks, padding included: ids past the bitmask, at or past
    ``vocab_size``, and logits wider or narrower than the bitmask."""
    torch = pytest.importorskip("torch")
    mask = rng.integers(-(2**31), 2**31 - 1, size=(3, n_words), dtype=np.int32)
    base = rng.standard_normal((3, width)).astype(np.float32)
    expected = bitmask.apply_to_logits(base.copy(), mask, vocab_size)
    rows = bitmask.compare_apply_kernels(torch.from_numpy(base), torch.from_numpy(mask), vocab_size, repeats=2)
    assert [r["kernel"] for r in rows] == list(bitmask.APPLY_KERNELS)
    for r in rows:
        if not r["available"]:
            assert r["kernel"] != "torch" and r["error"]
            continue
        assert r["equal"] is True and r["ms_p50"] > 0, r
        x = torch.from_numpy(base.copy())
        bitmask.apply_kernel(r["kernel"])(x, torch.from_numpy(mask), vocab_size)
        np.testing.assert_array_equal(x.numpy(), expected, err_msg=r["kernel"])


def test_apply_kernel_names() -> None:
    with pytest.raises(ValueError, match="unknown apply kernel 'cuda'"):
        bitmask.apply_kernel("cuda")
    assert callable(bitmask.apply_kernel("torch"))
