"""The decode loop as a server runs it: continuous batching (``schedule="continuous"``)
against the static schedule, the stand-in device's lazy logits and device operations,
and a real model's slot refills (its KV cache rows rewritten, a static cache compacted)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers", reason="the model harness needs the [model] extra")

from strategies import available_engines, get_engine  # noqa: E402
from toolkit.cli import main  # noqa: E402
from toolkit.core import bitmask as bm  # noqa: E402
from toolkit.core.vocab import load_vocab  # noqa: E402
from toolkit.data.datasets import Case, Item, embedded_dir, iter_items  # noqa: E402
from toolkit.decode import model as model_mod  # noqa: E402
from toolkit.decode.generate import generate, resolve_schedule, unconstrained  # noqa: E402
from toolkit.decode.model import load_model  # noqa: E402
from toolkit.decode.sim import SimLogits  # noqa: E402

NAMES = ("r01_iso_date", "r03_ipv4", "r05_hex_color", "s08_array_matrix", "s09_array_tuple")


@pytest.fixture(scope="module")
def tekken():
    return load_vocab("tekken")


@pytest.fixture(scope="module")
def items():
    found = {it.name: it for it in iter_items(embedded_dir()) if it.name in NAMES}
    return [found[n] for n in NAMES]


def _texts(run) -> dict[str, tuple[str, str, int]]:
    return {s["item"]: (s["status"], s["text"], s["tokens"]) for s in run.sequences}


@pytest.mark.parametrize("name", available_engines())
def test_continuous_batching_decodes_each_item_as_the_static_schedule_does(name, tekken, items) -> None:
    """Seeded greedy decoding on the replaying stand-in: each item's tokens, status and
    text are the same whichever slot and schedule it decodes in, without jump-forward
    and with each of its schedules; the continuous run decodes every item once (the
    static one cycles items to fill its last batch).  With the prompt passes beside the
    decode step too (plain, and cut lookahead runs)."""
    engine = get_engine(name, tekken)
    lm = load_model("sim:0.2:2:replay", tekken)
    first = None
    # and with runs cut to chunks of 2 and of 1 token (the rest fed in the next passes)
    for jump, width in ((False, "all"), ("overlap", "all"), ("lookahead", "all"), ("inline", "all"),
                        ("lookahead", 2), ("overlap", 1)):
        # batch 3: a slot other than the last falls vacant while the others decode
        static, cont = (generate(engine, lm, tekken, items, batch=3, max_tokens=24, schedule=s, baseline=False,
                                 jump_forward=jump, chunk_width=width) for s in ("static", "continuous"))
        assert static.summary["schedule"] == "static" and cont.summary["schedule"] == "continuous"
        assert static.summary["jump_schedule"] == (jump or None)
        assert len(cont.sequences) == len(items) and len(static.sequences) == 6
        assert sorted(s["slot"] for s in cont.sequences) == list(range(len(items)))
        assert _texts(cont) == _texts(static), (name, jump)
        first = first or _texts(cont)
        assert _texts(cont) == first, (name, jump)  # jump-forward changes no text
        assert cont.summary["steps"] < static.summary["steps"]  # no slot waits for a batch's longest sequence
        if width in ("all", 2) and jump in (False, "lookahead"):
            beside = generate(engine, lm, tekken, items, batch=3, max_tokens=24, schedule="continuous-beside",
                              baseline=False, jump_forward=jump, chunk_width=width)
            assert beside.summary["schedule"] == "continuous-beside"
            assert _texts(beside) == first, (name, jump)
            # a refilled slot idles in the step its prompt pass runs beside
            assert cont.summary["steps"] < beside.summary["steps"] < static.summary["steps"]


def test_the_unconstrained_baseline_runs_the_same_schedule_and_ends_at_eos(tekken, items) -> None:
    """Replayed texts end at EOS without masks too: with the same schedule, the
    baseline writes the tokens the constrained run writes (the texts are the same)."""
    lm = load_model("sim:0.2:2:replay", tekken)
    engine = get_engine("xgrammar", tekken)
    for schedule in ("static", "continuous"):
        run = generate(engine, lm, tekken, items, batch=2, max_tokens=64, schedule=schedule)
        con = [r for r in run.steps if r["mode"] == "constrained"]
        unc = [r for r in run.steps if r["mode"] == "unconstrained"]
        assert all(s["status"] == "valid" for s in run.sequences)
        assert sum(r["tokens"] for r in con) == sum(r["tokens"] for r in unc) > 0
        assert (sum(r["refill_s"] for r in con) > 0) == (schedule == "continuous")  # the refills' own time
    # more slots than items: the vacant slots write nothing without masks either
    run = generate(engine, lm, tekken, items, batch=8, max_tokens=64, schedule="continuous")
    assert (sum(r["tokens"] for r in run.steps if r["mode"] == "constrained")
            == sum(r["tokens"] for r in run.steps if r["mode"] == "unconstrained"))
    shared = unconstrained(lm, tekken, items, batch=2, max_tokens=64, schedule="continuous")
    assert shared.schedule == "continuous"
    with pytest.raises(ValueError, match="the static schedule, this run the continuous"):
        generate(engine, lm, tekken, items, batch=2, max_tokens=64, schedule="continuous",
                 baseline=unconstrained(lm, tekken, items, batch=2, max_tokens=64, schedule="static"))


def test_resolve_schedule() -> None:
    assert resolve_schedule("auto", 5, 2) == "continuous" and resolve_schedule("auto", 2, 2) == "static"
    assert resolve_schedule("auto", 5, 2, "serial") == "static"
    with pytest.raises(ValueError, match="pipelined loop"):
        resolve_schedule("continuous", 5, 2, "serial")
    with pytest.raises(ValueError, match="pipelined loop"):
        resolve_schedule("continuous-beside", 5, 2, "serial")
    with pytest.raises(ValueError, match="schedule must be one of static, continuous, continuous-beside or auto"):
        resolve_schedule("greedy", 5, 2)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_real_models_refilled_slot_decodes_as_it_would_alone(cache, tekken, items, monkeypatch) -> None:
    """random:tiny: a refilled slot's prompt is written into its rows of the KV cache
    (a static cache of 32-column blocks is compacted as it fills), its positions restart;
    every item's text is the static schedule's, with the prompt pass before the step's
    draw or beside the step (written after the step's pass, over the column the idle
    slot was fed in), replayed or the model's own greedy text."""
    monkeypatch.setattr(model_mod, "CACHE_BLOCK", 32)
    engine = get_engine("llguidance", tekken)
    many = items * 3
    for spec in ("random:tiny:replay", "random:tiny"):
        lm = load_model(spec, tekken, cache=cache)
        static, cont, beside = (generate(engine, lm, tekken, many, batch=2, max_tokens=20, schedule=s, baseline=False)
                                for s in ("static", "continuous", "continuous-beside"))
        assert _texts(cont) == _texts(static) == _texts(beside), spec
        assert cont.summary["steps"] > 32  # past a static cache's length: compacted on the way


def test_a_prompt_pass_beside_the_step_is_not_waited_for(tekken, items) -> None:
    """On a stand-in whose pass takes 50 ms, a refill's prompt pass run before the draw
    is waited for in the step (its ``refill_s``); beside the decode step, it is launched
    after the step's pass and queued behind it, so no step's refill waits for it and the
    next step's wait for the forward pass holds both passes.  Both decode the same texts.
    (The margins are half a pass: a loaded host's stalls stay well inside them.)"""
    lm = load_model("sim:50:0:replay", tekken)
    engine = get_engine("xgrammar", tekken)
    runs = {s: generate(engine, lm, tekken, items[:3], batch=2, max_tokens=24, schedule=s, baseline=False)
            for s in ("continuous", "continuous-beside")}
    assert _texts(runs["continuous"]) == _texts(runs["continuous-beside"])
    refills = {s: max(r["refill_s"] for r in run.steps) for s, run in runs.items()}
    waits = {s: max(r["forward_s"] for r in run.steps[1:]) for s, run in runs.items()}
    assert refills["continuous"] >= 0.045 and refills["continuous-beside"] < 0.025, refills
    assert waits["continuous"] < 0.075 and waits["continuous-beside"] >= 0.09, waits


def test_the_stand_ins_greedy_draw_is_the_tensors_argmax(tekken) -> None:
    """The lazy logits' draw (C, under a mask) equals torch's argmax of the same logits
    made as a tensor, for dense, sparse, single-token and empty masks, with and without
    the replay bonus (allowed or not)."""
    import torch

    lm = load_model("sim:1:0", tekken)
    rng = np.random.default_rng(3)
    n, v = 12, tekken.size
    rows = rng.integers(0, 32, n).astype(np.int64)
    bonus = np.where(rng.random(n) < 0.5, rng.integers(0, v, n), -1).astype(np.int64)
    mask = np.zeros((n, bm.words(v)), dtype=np.int32)
    for i in range(n):
        share = (1.0, 0.5, 0.001, 0.0)[i % 4]
        ids = np.flatnonzero(rng.random(v) < share)
        if i % 4 == 3:
            ids = np.asarray([int(rng.integers(0, v))] if i < 8 else [], dtype=np.int64)
        if i == 5 and bonus[i] >= 0:
            ids = np.setdiff1d(ids, [bonus[i]])  # a bonus the mask refuses
        bm.set_bits(mask[i], ids)
    for m in (None, mask):
        logits = SimLogits(lm, rows, bonus, m)
        t = logits.tensor()
        want = torch.where(torch.amax(t, dim=-1) > float("-inf"), torch.argmax(t, dim=-1), -1).numpy()
        assert logits.greedy().tolist() == want.tolist()
    assert SimLogits(lm, rows, bonus, mask).greedy()[11] == -1  # nothing allowed


def test_the_stand_in_queues_apply_and_sample_as_device_time(tekken) -> None:
    """The apply kernel and the sampler add device time after the forward pass: an
    event recorded after them waits for all three, the host only for their launches."""
    import time

    lm = load_model("sim:30:0", tekken)
    lm.apply_ms, lm.sample_ms = 20.0, 20.0
    dec = lm.start([[1, 2]], 8, lazy=True)
    t0 = time.perf_counter()
    logits = dec.forward()
    lm.apply(logits, np.full((1, bm.words(tekken.size)), -1, dtype=np.int32))
    ids = lm.greedy(logits)
    event = lm.event()
    event.record()
    launched = time.perf_counter() - t0
    event.synchronize()
    done = time.perf_counter() - t0
    assert launched < 0.03 and done >= 0.07 and ids.shape == (1,)
    assert lm.describe()["apply_ms"] == 20.0


def test_cli_generate_runs_both_schedules(tmp_path, capsys) -> None:
    out = tmp_path / "gen"
    rc = main(["generate", "--engine", "outlines", "--model", "sim:0.2:2:replay", "--max-tokens", "16",
               "--limit", "3", "--batch", "2", "--schedule", "static", "continuous", "--quiet",
               "--no-compare-kernels", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "continuous" in text
    assert (out / "outlines" / "batch-2-static" / "run.json").is_file()
    assert (out / "outlines" / "batch-2-continuous" / "run.json").is_file()
    rc = main(["generate", "--engine", "outlines", "--model", "sim:0.2:2", "--limit", "3", "--batch", "2",
               "--schedule", "continuous", "--loop", "serial", "--quiet", "--out", str(tmp_path / "x")])
    assert rc == 2 and "pipelined loop" in capsys.readouterr().err


def test_the_stand_in_prices_a_refills_eager_prompt_pass(tekken, items) -> None:
    """``sim:...:prefill=P``: a refill's prompt pass makes P launches (the host's time in
    the step's ``refill_s``), where a decode step makes LAUNCHES; bad values are refused."""
    lm = load_model("sim:1:0:prefill=20000:replay", tekken)
    assert lm.describe()["prefill_launches"] == 20000 and lm.launches == 0
    assert load_model("sim:1:7", tekken).describe()["prefill_launches"] == 7
    assert load_model("sim:1:7:prefill=3:chunk=0", tekken).chunk_cost == 0.0
    engine = get_engine("xgrammar", tekken)
    refill = {}
    for spec in ("sim:1:0:replay", "sim:1:0:prefill=20000:replay"):
        run = generate(engine, load_model(spec, tekken), tekken, items[:3], batch=2, max_tokens=24,
                       schedule="continuous", baseline=False)
        refill[spec] = max(r["refill_s"] for r in run.steps)
    assert refill["sim:1:0:prefill=20000:replay"] > refill["sim:1:0:replay"] + 0.005, refill
    for bad in ("sim:1:0:prefill=-1", "sim:1:0:prefill=x", "sim:1:0:launch=3"):
        with pytest.raises(model_mod.ModelError, match="prefill=P"):
            load_model(bad, tekken)
    with pytest.raises(model_mod.ModelError, match="no option 'launch'"):
        load_model("sim:1:0:launch=3:replay", tekken)


def test_a_schema_decodes_once_per_item_when_it_ends_early(tekken) -> None:
    """A sequence that ends (EOS) frees its slot at once: with one slot, the continuous
    run's steps are the sum of its items' tokens (plus nothing for waiting)."""
    schema = Item("tiny", "schema", {"type": "integer", "minimum": 0, "maximum": 9}, (Case("7", True),))
    lm = load_model("sim:0.2:2:replay", tekken)
    run = generate(get_engine("llguidance", tekken), lm, tekken, [schema] * 3, batch=1, max_tokens=8,
                   schedule="continuous", baseline=False)
    assert [s["text"] for s in run.sequences] == ["7"] * 3
    assert run.summary["steps"] == sum(s["tokens"] for s in run.sequences)
    # beside: no pass to run the prompt beside when the one slot is vacant, so none waits
    run = generate(get_engine("llguidance", tekken), lm, tekken, [schema] * 3, batch=1, max_tokens=8,
                   schedule="continuous-beside", baseline=False)
    assert [s["text"] for s in run.sequences] == ["7"] * 3
    assert run.summary["steps"] == sum(s["tokens"] for s in run.sequences)


def test_a_jump_runs_one_token_steps_attend_over_a_plain_runs_cache(tekken, monkeypatch) -> None:
    """Chunk room without a slower step: a jump run's static cache is as long as a plain
    run's (the stand-in's step is FORWARD_MS either way); when chunk pads fill it they
    are squeezed out (every row's attended columns moved together), and the next step's
    logits are those without the squeeze."""
    import torch

    lm = load_model("random:tiny", tekken, cache="static")
    for n in (10, 100, 200):  # (within CHUNK_ROOM of a block the jump run takes one more block)
        assert lm.start([[1, 2, 3]], n, chunks=True).cache_len == lm.start([[1, 2, 3]], n).cache_len

    def run(squeeze: bool):
        dec = lm.start([[1, 2, 3], [4, 5]], 40, chunks=True)
        with torch.inference_mode():
            dec.forward()
            dec.forward_chunks([[6, 7, 8, 9], [10]])
            dec.forward_chunks([[11], [12, 13, 14, 15, 16]])
            if squeeze:
                dec._defrag()
            return dec.seen, dec.forward(torch.tensor([17, 18])).clone()

    (seen_a, a), (seen_b, b) = run(False), run(True)
    assert seen_b < seen_a and torch.allclose(a, b, atol=1e-5)
    monkeypatch.setattr(model_mod, "CACHE_BLOCK", 1)  # no rounding: the squeeze is needed at once
    monkeypatch.setattr(model_mod, "CHUNK_ROOM", 0)
    dec = lm.start([[1, 2, 3], [4, 5]], 10, chunks=True)
    with torch.inference_mode():
        dec.forward()
        dec.forward_chunks([[6, 7, 8, 9], [10]])  # 4 columns, 3 of them pads in row 1
        dec.forward_chunks([[11], [12, 13, 14, 15]])
        dec.forward_chunks([[16, 17], [18]])  # 13 + 2 > 3 + 10: squeezed first
    assert dec.seen <= dec.cache_len == 13


def test_an_unfinished_outputs_prefix_is_checked_against_the_grammar_the_engine_read(tekken) -> None:
    """A run's engine with options (``spelling=llguidance`` lets an additional key hold an
    escape, the default spelling does not) is judged by its own reading of the schema, so
    ``bad_prefix`` counts wrong masks, not spelling options (found on an H200 run)."""
    from toolkit.decode.loop import Seq
    from toolkit.decode.outputs import sequence_row

    schema = Item("keys", "schema", {"type": "object", "additionalProperties": {"type": "object"}}, ())
    tokens = tekken.encode('{"a\\')
    rows = {}
    for spelling in ("json", "llguidance"):
        engine = get_engine("llguidance", tekken, spelling=spelling)
        seq = Seq(schema, engine.matcher(engine.compile(schema.source())), tokens, 0.0)
        rows[spelling] = sequence_row(engine, tekken, seq, 0, 0, 1, {})
    assert rows["llguidance"]["prefix_ok"] is True and rows["llguidance"]["status"] == "unfinished"
    assert rows["json"]["prefix_ok"] is False  # the default spelling has no escapes in additional keys
