"""Jump-forward's chunk widths (:mod:`toolkit.decode.chunks`): the policy's choice from
measured step costs, its validation, and the stand-in's price for a chunk step."""

from __future__ import annotations

import time

import pytest

from toolkit.decode.chunks import RETRY, ChunkWidths, chunk_policy


def _measured(one: float, chunk: float) -> ChunkWidths:
    """A policy that measured one-token steps at ``one`` seconds and every chunk width at
    ``chunk`` (each width's first step, left out, at 100 s)."""
    widths = ChunkWidths("auto")
    for w in (1, 2, 4, 8, 16):
        widths.record(w, 100.0)
        for _ in range(5):
            widths.record(w, one if w == 1 else chunk)
    return widths


def test_auto_launches_a_chunk_only_where_it_writes_more_tokens_per_second() -> None:
    # the H200 at batch 32: a chunk step 16 % dearer than a one-token step
    widths = _measured(0.0125, 0.0145)
    assert widths.cost(1) == 0.0125 and widths.cost(3) == widths.cost(4) == 0.0145  # 3 pads to 4
    assert widths.choose([2], 32) == 1  # one more token for 16 % more time: not worth it
    assert widths.choose([2, 2, 2, 2, 2], 32) == 1  # 37 / 14.5 < 32 / 12.5
    assert widths.choose([2, 2, 2, 2, 2, 2], 32) == 2  # 38 / 14.5 > 32 / 12.5
    assert widths.choose([9], 32) == 9  # 40 / 14.5: the whole run
    assert widths.choose([9, 2], 32) == 9
    # batch 1: any run pays
    assert widths.choose([2], 1) == 2
    # a width that costs more per token than the tokens it adds: the narrower one
    dear = _measured(0.010, 0.010)
    for _ in range(5):
        dear.record(16, 0.030)
    assert dear.choose([12], 4) == 8  # 11 / 10 ms beats 15 / 30 ms and 7 / 10 ms


def test_auto_tries_what_it_has_not_measured_and_what_it_passed_over_long() -> None:
    widths = ChunkWidths()
    assert widths.choose([5, 2], 8) == 5  # nothing measured: whole runs
    widths.record(1, 0.01)
    widths.record(1, 0.01)
    assert widths.cost(8) is None and widths.choose([5], 8) == 5  # unmeasured: priced as one token
    dear = _measured(0.010, 0.100)
    choices = [dear.choose([2], 8) for _ in range(RETRY)]
    assert choices[:-1] == [1] * (RETRY - 1) and choices[-1] == 2  # the RETRY-th time it is measured again
    assert dear.choose([2], 8) == 1


def test_all_and_a_cap() -> None:
    assert ChunkWidths("all").choose([7, 2], 32) == 7
    assert ChunkWidths(3).choose([7, 2], 32) == 3
    assert ChunkWidths(8).choose([7, 2], 32) == 7
    assert chunk_policy("auto") == "auto" and chunk_policy("4") == 4 and chunk_policy(1) == 1
    for bad in ("0", 0, -2, "wide", True, 2.5, "²", "٣", "+2"):
        with pytest.raises(ValueError, match="'auto', 'all' or an integer >= 1"):
            chunk_policy(bad)


def test_the_stand_in_prices_a_chunk_step_by_its_batch() -> None:
    """A chunk step queues FORWARD_MS * (1 + chunk_cost * B) of device time, a one-token
    step (a chunk step of single tokens too) FORWARD_MS."""
    pytest.importorskip("torch", reason="the stand-in's logits are torch tensors")
    from toolkit.core.vocab import load_vocab
    from toolkit.decode.model import ModelError, load_model

    vocab = load_vocab("tekken")
    lm = load_model("sim:20:0", vocab)
    lm.chunk_cost = 0.25
    dec = lm.start([[1, 2]] * 4, 8, chunks=True, lazy=True)
    dec.forward()
    lm.synchronize()

    def step(chunks: list[list[int]]) -> float:
        t0 = time.perf_counter()
        dec.forward_chunks(chunks)
        lm.synchronize()
        return time.perf_counter() - t0

    one = step([[5]] * 4)
    chunk = step([[5, 6], [5], [5], [5]])
    assert one > 0.019 and chunk > 0.039 and chunk > one + 0.012  # 20 ms, then 20 * (1 + 0.25 * 4)
    assert lm.describe()["chunk_cost"] == 0.25
    assert load_model("sim:20:0:chunk=0:replay", vocab).chunk_cost == 0.0
    assert load_model("sim:20", vocab).chunk_cost == 0.005
    for bad in ("sim:20:chunk=x", "sim:20:0:chunk=2", "sim:20:chunk=0.1:0"):
        with pytest.raises(ModelError, match=r"chunk=C"):
            load_model(bad, vocab)
