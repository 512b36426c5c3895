"""The decoding harness on CPU: ``random:tiny``, the Tekken vocabulary, embedded items.

Random weights decode noise, so outputs are sampled (temperature 1) and bounded
items are used: ISO dates, IPv4 addresses, hex colours, small array schemas (compact
whitespace, so a sequence cannot idle in whitespace).  Every output that finishes
must pass its check; the figures of the summary must be there and consistent.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

pytest.importorskip("transformers", reason="the model harness needs the [model] extra")
import torch  # noqa: E402  (transformers needs it)

from strategies import get_engine  # noqa: E402
from tests._support.shared import require_shared  # noqa: E402
from toolkit.cli import main  # noqa: E402
from toolkit.core.protocol import EngineBase, MatcherBase  # noqa: E402
from toolkit.core.vocab import load_vocab  # noqa: E402
from toolkit.data.checks import check_output, check_prefix  # noqa: E402
from toolkit.data.datasets import Case, Item, embedded_dir, iter_items  # noqa: E402
from toolkit.decode.generate import (  # noqa: E402
    SPEC_PROMPT,
    generate,
    render_prompt,
    summarize,
    unconstrained,
    write_run,
)
from toolkit.decode.model import ModelError, load_model  # noqa: E402
from toolkit.decode.replay import REPLAY_BONUS, Replay  # noqa: E402
from toolkit.decode.serial import _sample, decode_loop  # noqa: E402
from toolkit.report.bench import ReportError  # noqa: E402
from toolkit.report.write import write_report  # noqa: E402

NAMES = ("r01_iso_date", "r03_ipv4", "r05_hex_color", "s08_array_matrix", "s09_array_tuple")


@pytest.fixture(scope="module")
def tekken():
    return load_vocab("tekken")


@pytest.fixture(scope="module")
def tiny(tekken):
    return load_model("random:tiny", tekken)


@pytest.fixture(scope="module")
def items():
    found = {it.name: it for it in iter_items(embedded_dir()) if it.name in NAMES}
    return [found[n] for n in NAMES]


@pytest.mark.parametrize("name", ["llguidance", "outlines"])
def test_every_finished_output_is_valid(name, tekken, tiny, items, tmp_path) -> None:
    engine = get_engine(name, tekken, whitespace="compact")
    run = generate(engine, tiny, tekken, items, batch=2, max_tokens=40, temperature=1.0, seed=3)
    s = run.summary
    assert s["sequences"] == 6  # 5 items in batches of 2: the last batch cycles to the first item
    assert s["invalid"] == s["rejected"] == s["error"] == s["bad_prefix"] == 0
    assert s["valid"] >= 3  # dates, addresses and colours are short
    for seq in run.sequences:
        if seq["status"] == "valid":
            item = next(i for i in items if i.name == seq["item"])
            assert check_output(item, seq["text"])[0]
        assert seq["ttfm_s"] > 0 and 0 < seq["tokens"] <= 40
        assert seq["prefix_ok"] is (True if seq["status"] == "unfinished" else None)
    con = [r for r in run.steps if r["mode"] == "constrained"]
    unc = [r for r in run.steps if r["mode"] == "unconstrained"]
    assert con and unc and s["steps"] == len(con)
    assert all(r["wait_s"] >= 0 and r["forward_s"] > 0 for r in con)
    parts = ("forward_s", "wait_s", "apply_s", "sample_s", "accept_s")
    assert all(r["step_s"] == pytest.approx(sum(r[p] for p in parts), abs=1e-9) for r in con + unc)
    assert s["tokens_per_s"] > 0 and s["unconstrained_tokens_per_s"] > 0
    out = write_run(run, tmp_path / "run", {"engine": name})
    assert json.loads((out / "run.json").read_text())["summary"]["valid"] == s["valid"]
    assert len((out / "sequences.jsonl").read_text().splitlines()) == 6


def test_check_output_catches_wrong_text(items) -> None:
    date, matrix = items[0], items[3]
    assert check_output(date, "2024-02-29")[0] is True
    assert check_output(date, "2024-2-29")[0] is False
    assert check_output(date, b"2024-02-2\xff")[0] is False  # bytes are checked, not a repaired text
    assert check_output(matrix, "{")[0] is False
    assert check_output(matrix, b'[[1, "\xff"]]')[0] is False
    assert check_prefix(date, b"2024-0") is True and check_prefix(date, b"2024-a") is False
    assert check_prefix(matrix, b"[[1, ") is True and check_prefix(matrix, b"[[1, }") is False
    broken = Item("broken", "schema", {"type": "array", "minItems": "two"})
    ok, why = check_output(broken, "[]")
    assert ok is None and "cannot check" in why  # never counted valid
    assert check_prefix(broken, b"[") is None  # no grammar masklab can build


def test_an_item_the_engine_refuses_is_recorded_and_the_run_goes_on(tekken, tiny) -> None:
    found = {it.name: it for it in iter_items(embedded_dir())}
    recursive, date = found["g01_json"], found["r01_iso_date"]  # outlines refuses recursion
    engine = get_engine("outlines", tekken)
    run = generate(engine, tiny, tekken, [recursive, date], batch=2, max_tokens=16, temperature=1.0,
                   baseline=False)
    by = {s["item"]: s for s in run.sequences}
    assert by["g01_json"]["status"] == "compile_error" and "UnsupportedGrammar" in by["g01_json"]["detail"]
    assert by["g01_json"]["tokens"] == 0 and by["g01_json"]["ttfm_s"] is None
    assert by["r01_iso_date"]["status"] in ("valid", "unfinished") and by["r01_iso_date"]["tokens"] > 0
    assert run.summary["compile_error"] == 1 and run.summary["invalid"] == 0


def test_vocabulary_mismatch_is_a_clear_error(tekken) -> None:
    require_shared("tokenizers/mistral-7b-v0.3/config.json")
    with pytest.raises(ModelError, match=r"32768 logits .* 131072 ids"):
        load_model("random:mistral-7b", tekken, device="meta")
    with pytest.raises(ModelError, match="unknown random architecture"):
        load_model("random:gpt-9", tekken)


# The published parameter counts (Meta's and Mistral's model cards / checkpoints'
# safetensors index): a wrong width, depth, head layout or embedding tying changes them.
PUBLISHED = [("random:llama-3.2-1b", "llama3:tokenizers/llama-3/tokenizer.model", 1_235_814_400, 131072),
             ("random:llama-3-8b", "llama3:tokenizers/llama-3/tokenizer.model", 8_030_261_248, 8192),
             ("random:mistral-7b", "hf:tokenizers/mistral-7b-v0.3/tokenizer.json", 7_248_023_552, 32768)]


@pytest.mark.parametrize(("spec", "vocab_spec", "parameters", "positions"), PUBLISHED)
def test_random_architectures_have_the_published_shapes(spec, vocab_spec, parameters, positions) -> None:
    """The GPU runs' models, built on the meta device (no memory, no GPU) in bf16 as the
    GPU run loads them: their logits match their own tokenizer's vocabulary, and their
    parameter counts and positions are the published models'."""
    kind, rel = vocab_spec.split(":", 1)
    vocab = load_vocab(f"{kind}:{require_shared(rel)}")
    lm = load_model(spec, vocab, device="meta", dtype="bfloat16")
    assert lm.random and lm.vocab_size == vocab.size
    assert lm.parameters == parameters
    assert lm.max_positions == positions
    assert {str(p.dtype) for p in lm.model.parameters()} == {"torch.bfloat16"}


def test_cli_generate_then_report(tmp_path, capsys) -> None:
    """Two engines, two batch sizes, the apply kernels compared; then ``masklab report``
    on the folder: the end-to-end table, the kernel table and the overhead figure."""
    out = tmp_path / "gen"
    rc = main(["generate", "--engine", "llguidance", "outlines", "-o", "llguidance.whitespace=compact",
               "--data", str(embedded_dir() / "regex"), "--limit", "3", "--batch", "1", "2",
               "--max-tokens", "24", "--temperature", "1", "--shared-baseline", "--prompt", "spec",
               "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "random weights" in text and "overhead_pct" in text
    assert "apply kernel torch:" in text and "same logits as torch: True" in text
    for engine in ("llguidance", "outlines"):
        for b in (1, 2):
            meta = json.loads((out / engine / f"batch-{b}" / "run.json").read_text())
            assert meta["model"]["random_weights"] and meta["summary"]["batch"] == b
            assert meta["engine"] == engine and meta["summary"]["apply"] == "torch"
            assert meta["prompt"] == SPEC_PROMPT == meta["summary"]["prompt"]
            seqs = [json.loads(line) for line in (out / engine / f"batch-{b}" / "sequences.jsonl").open()]
            assert len({s["prompt_tokens"] for s in seqs}) == 3  # each regex in its prompt: padded batches
            assert meta["summary"]["baseline"] == "shared" and meta["summary"]["overhead_pct"] == meta["summary"][
                "overhead_pct"]  # not NaN: the shared baseline is there
            kernels = {k["kernel"]: k for k in meta["apply_kernels"]}
            assert kernels["torch"]["available"] and kernels["torch"]["equal"] is True
            assert all(k["equal"] is True for k in kernels.values() if k["available"])
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "# masklab end-to-end report" in report and "Random weights" in report
    assert "![overhead vs batch size](e2e_overhead.png)" in report and "### Apply kernels" in report
    for name in ("e2e_overhead.png", "e2e_steps.png", "e2e.csv", "apply_kernels.csv"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob("*.pdf")) and ".pdf" not in report  # PDFs only when asked
    table = pd.read_csv(out / "e2e.csv")
    assert len(table) == 4 and set(table["batch"]) == {1, 2}
    assert table["engine"].str.startswith(("ours: llguidance", "ours: outlines")).all()
    assert (table["invalid"] == 0).all() and table["overhead %"].notna().all()
    assert (table["unconstrained forward ms"] > 0).all() and "unconstrained forward ms" in report
    assert (table["prompt tokens"] > len(SPEC_PROMPT) // 8).all()  # the spec is in the prompt
    kernels = pd.read_csv(out / "apply_kernels.csv")
    assert set(kernels["kernel"]) >= {"torch"} and kernels[kernels["runs"] > 0]["equal"].all()


def test_cli_jump_forward_all_runs_each_schedule_and_the_report_labels_them(tmp_path, capsys) -> None:
    """``--jump-forward all``: each engine without jump-forward and with each schedule,
    each in its folder with its schedule recorded; the report labels the three apart and
    shows the steps saved.  A schedule that does not exist is refused by name."""
    out = tmp_path / "gen"
    rc = main(["generate", "--engine", "llguidance", "-o", "llguidance.spelling=llguidance", "--data",
               str(embedded_dir() / "schemas"), "--limit", "3", "--batch", "2", "--model", "sim:0.2:2:replay",
               "--max-tokens", "48", "--jump-forward", "all", "--no-compare-kernels", "--out", str(out)])
    assert rc == 0, capsys.readouterr()
    want = {"llguidance": None, "llguidance+jump": "lookahead", "llguidance+jump-overlap": "overlap",
            "llguidance+jump-inline": "inline"}
    texts = {}
    for folder, sched in want.items():
        meta = json.loads((out / folder / "batch-2" / "run.json").read_text())
        assert meta["jump_forward"] is (sched is not None) and meta["jump_schedule"] == sched
        assert meta["summary"]["jump_schedule"] == sched
        texts[folder] = sorted(json.loads(line)["text"] for line in (out / folder / "batch-2" / "sequences.jsonl").open())
        assert (meta["summary"]["jumped_tokens"] > 0) == (sched is not None)
    assert len({tuple(t) for t in texts.values()}) == 1  # the same texts whichever schedule
    assert main(["report", str(out)]) == 0
    table = pd.read_csv(out / "e2e.csv")
    labels = sorted(e.split(" (")[0] for e in table["engine"])
    assert labels == ["ours: llguidance", "ours: llguidance +jump", "ours: llguidance +jump-inline",
                      "ours: llguidance +jump-overlap"], labels
    assert "steps saved %" in table
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["generate", "--engine", "llguidance", "--model", "sim:0.2:2", "--jump-forward", "sideways"])
    assert "invalid choice: 'sideways'" in capsys.readouterr().err
    # chunk widths: refused where no schedule reads them, and a width that is none
    for jump in ("off", "inline"):
        assert main(["generate", "--engine", "llguidance", "--model", "sim:0.2:2", "--jump-forward", jump,
                     "--chunk-width", "2", "--out", str(tmp_path / "cw")]) == 2
        assert "--chunk-width applies to the lookahead and overlap schedules" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--engine", "llguidance", "--model", "sim:0.2:2", "--jump-forward", "--chunk-width", "0"])
    assert "'auto', 'all' or an integer >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="jump_forward must be a bool, 'off', 'on' or one of lookahead, overlap, inline"):
        generate(get_engine("llguidance", load_vocab("tekken")), load_model("sim:0.2:2", load_vocab("tekken")),
                 load_vocab("tekken"), [], jump_forward="sideways")


def test_report_refuses_a_folder_without_runs(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="no masklab generate run"):
        write_report([tmp_path / "empty"])


def test_peer_apply_kernel_in_the_loop(tekken, tiny, items) -> None:
    """The masks applied by xgrammar's kernel in the loop: outputs stay valid."""
    pytest.importorskip("xgrammar")
    engine = get_engine("outlines", tekken, whitespace="compact")
    run = generate(engine, tiny, tekken, items[:3], batch=3, max_tokens=24, temperature=1.0, seed=5,
                   apply="xgrammar", baseline=False)
    s = run.summary
    assert s["apply"] == "xgrammar" and s["invalid"] == s["rejected"] == s["error"] == 0 and s["valid"] >= 1
    assert s["masks"] > 0 and s["mask_seq_ms_p50"] <= s["mask_seq_ms_p99"]
    with pytest.raises(ValueError, match="unknown apply kernel"):
        generate(engine, tiny, tekken, items[:1], apply="nope")
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        generate(engine, tiny, tekken, items[:1], temperature=-1.0)
    with pytest.raises(ValueError, match="batch and max_tokens must be >= 1"):
        generate(engine, tiny, tekken, items[:1], batch=0)


@pytest.mark.parametrize("args", [["--batch", "0"], ["--max-tokens", "-3"], ["--temperature", "-1"],
                                  ["--temperature", "nan"], ["--limit", "0"], ["--threads", "0"]])
def test_cli_generate_refuses_bad_numbers_before_loading(args, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", "--engine", "outlines", *args])
    assert info.value.code == 2 and "must be >=" in capsys.readouterr().err


def test_sampling_never_draws_a_masked_token() -> None:
    import torch

    gen = torch.Generator().manual_seed(0)
    logits = torch.full((2, 50), float("-inf"))
    logits[0, [0, 49]] = 0.0  # the first and the last id: the inverse CDF's edges
    logits[1, 7] = 3.0
    seen = torch.stack([_sample(logits, 1.0, gen) for _ in range(3000)])
    assert set(seen[:, 0].tolist()) == {0, 49} and set(seen[:, 1].tolist()) == {7}
    assert 1300 < int((seen[:, 0] == 0).sum()) < 1700  # each half the time
    three = torch.tensor([[0.0, 1.0, 2.0]])
    draws = torch.stack([_sample(three, 1.0, gen) for _ in range(20000)])[:, 0]
    freq = torch.bincount(draws, minlength=3) / 20000
    assert torch.allclose(freq, torch.softmax(three[0], -1), atol=0.015)
    assert _sample(three, 0.0, gen).tolist() == [2]
    # a row that allows nothing (or went NaN) draws -1, never an id past the vocabulary
    dead = torch.tensor([[float("-inf")] * 4, [0.0, float("nan"), 1.0, 2.0], [0.0, 1.0, 5.0, 2.0]])
    assert _sample(dead, 1.0, gen).tolist()[:2] == [-1, -1] and _sample(dead, 1.0, gen).tolist()[2] in range(4)
    assert _sample(dead[:1], 0.0, gen).tolist() == [-1] and _sample(dead[2:], 0.0, gen).tolist() == [2]


def test_the_device_sampler_draws_softmax_and_never_a_masked_token() -> None:
    """Gumbel-max (the pipelined loop's sampler, no host round trip): the softmax's
    frequencies, never a -inf token, greedy = argmax, -1 for a row with nothing to draw,
    and the same draws from the same seed."""
    import torch

    from toolkit.decode.loop import _sample_on_device

    gen = torch.Generator().manual_seed(0)
    logits = torch.full((2, 50), float("-inf"))
    logits[0, [0, 49]] = 0.0
    logits[1, 7] = 3.0
    seen = torch.stack([_sample_on_device(logits, 1.0, gen) for _ in range(3000)])
    assert set(seen[:, 0].tolist()) == {0, 49} and set(seen[:, 1].tolist()) == {7}
    three = torch.tensor([[0.0, 1.0, 2.0]]).repeat(20000, 1)
    freq = torch.bincount(_sample_on_device(three, 1.0, gen), minlength=3) / 20000
    assert torch.allclose(freq, torch.softmax(three[0], -1), atol=0.015)
    hot = torch.bincount(_sample_on_device(three, 0.5, gen), minlength=3) / 20000  # T sharpens
    assert torch.allclose(hot, torch.softmax(three[0] / 0.5, -1), atol=0.015)
    assert _sample_on_device(three[:1], 0.0, gen).tolist() == [2]
    dead = torch.tensor([[float("-inf")] * 4, [0.0, float("nan"), 1.0, 2.0], [0.0, 1.0, 5.0, 2.0]])
    for t in (0.0, 1.0):
        out = _sample_on_device(dead, t, gen).tolist()
        assert out[:2] == [-1, -1] and out[2] in range(4)
    a, b = (_sample_on_device(three[:64], 1.0, torch.Generator().manual_seed(5)) for _ in range(2))
    assert torch.equal(a, b)


class _EmptyAfter(EngineBase):
    """An engine whose matchers' masks allow no token from their ``n``-th mask on."""

    native_inputs = ()

    def __init__(self, engine, n: int) -> None:
        self.engine, self.n = engine, n

    def compile(self, grammar):
        return self.engine.compile(grammar)

    def matcher(self, compiled):
        m, n = self.engine.matcher(compiled), self.n

        class Broken(MatcherBase):
            error = ""
            fills = 0

            def fill_bitmask(self, mask, row=0):
                info = m.fill_bitmask(mask, row)
                self.fills += 1
                if self.fills >= n:
                    mask[row] = 0
                return info

            def accept_token(self, t):
                return m.accept_token(t)

        return Broken()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_an_empty_mask_ends_its_sequence_as_rejected(tekken, tiny, items, temperature) -> None:
    """An engine bug (a live sequence's mask allows nothing) is reported, and the loop
    goes on: no id past the vocabulary reaches the model (on a GPU, a device assert)."""
    engine = _EmptyAfter(get_engine("outlines", tekken, whitespace="compact"), 3)
    run = generate(engine, tiny, tekken, items[:2], batch=2, max_tokens=12, temperature=temperature,
                   baseline=False, compare_kernels=False)
    rows = [s for s in run.sequences if s["status"] == "rejected"]
    assert rows and all(r["detail"] == "the mask allowed no token" for r in rows)
    assert run.summary["rejected"] == len(rows) and all(r["tokens"] == 2 for r in rows)


def test_shared_baseline(tekken, tiny, items) -> None:
    base = unconstrained(tiny, tekken, 3, batch=2, max_tokens=5, temperature=1.0)
    assert len(base.steps) == 10 and base.tokens == 20 and base.wall_s > 0  # 2 batches x 5 steps x 2 sequences
    few = unconstrained(tiny, tekken, 5, batch=2, max_tokens=4, max_groups=1)
    assert len(few.steps) == 4 and few.tokens == 8 and {r["batch_index"] for r in few.steps} == {0}
    with pytest.raises(ValueError, match="max_groups must be >= 1"):
        unconstrained(tiny, tekken, 3, max_groups=0)
    engine = get_engine("outlines", tekken, whitespace="compact")
    run = generate(engine, tiny, tekken, items[:3], batch=2, max_tokens=5, temperature=1.0, baseline=base)
    s = run.summary
    assert s["baseline"] == "shared" and s["unconstrained_tokens_per_s"] == base.tokens / base.wall_s
    assert s["overhead_pct"] == 100.0 * (s["step_ms"] / s["unconstrained_step_ms"] - 1.0)
    with pytest.raises(ValueError, match="baseline was measured at batch 2"):
        generate(engine, tiny, tekken, items[:3], batch=3, max_tokens=5, baseline=base)


def test_a_bad_prefix_counts_as_a_failure_only_for_masklab_grammars() -> None:
    """A peer compiling a schema itself may leave masklab's (tighter) grammar legitimately."""
    def seq(grammar: str, prefix_ok: bool | None) -> dict:
        return {"status": "unfinished", "grammar": grammar, "prefix_ok": prefix_ok, "forced": 0, "ttfm_s": 0.001}

    rows = [seq("masklab", False), seq("own", False), seq("own", False), seq("masklab", True), seq("own", None)]
    s = summarize([], rows, {"constrained": 0.0, "unconstrained": 0.0}, {"constrained": 0, "unconstrained": 0}, 1)
    assert s["bad_prefix"] == 1 and s["outside_grammar"] == 2 and s["unfinished"] == 5
    assert get_engine("outlines", load_vocab("tekken")).schema_grammar == "masklab"
    assert get_engine("outlines", load_vocab("tekken"), schema_regex="outlines-core").schema_grammar == "own"


def test_a_left_padded_batch_decodes_each_sequence_as_alone(tekken, tiny) -> None:
    """Prompts of different lengths share a batch: left padding, attention mask and
    position ids give each row the logits and greedy tokens it gets by itself."""
    import torch

    short = [1, *tekken.encode("short")]
    long = [1, *tekken.encode("a much longer prompt than the other one, with more tokens in it")]
    dec = tiny.start([short, long], 8)
    assert dec.attn[0].tolist() == [0] * (len(long) - len(short)) + [1] * len(short)
    assert dec.pos[0, -1] == len(short) - 1 and dec.pos[1, -1] == len(long) - 1
    with torch.inference_mode():
        both = dec.forward()
        for row, prompt in enumerate((short, long)):
            alone = tiny.start([prompt], 8).forward()
            assert torch.allclose(both[row], alone[0], atol=1e-5)
        assert not torch.allclose(both[0], _unmasked(tiny, [short, long])[0], atol=1e-3)  # padding seen
    assert tiny.start([short, short], 8).attn is None  # equal lengths: no mask at all
    _, together, _ = decode_loop(tiny, [short, long], 10, 0.0, 0, None)
    assert together == [decode_loop(tiny, [p], 10, 0.0, 0, None)[1][0] for p in (short, long)]


def _unmasked(lm, prompts):
    """The prompts' logits with the padding attended to (no mask): what the mask prevents."""
    dec = lm.start(prompts, 4)
    dec.attn = dec.pos = None
    return dec.forward()


@pytest.mark.parametrize("compile_mode", [None, "default"])
def test_static_cache_and_compiled_steps_decode_the_same_tokens(tekken, tiny, items, compile_mode) -> None:
    """The static KV cache (fixed shapes) and torch.compile'd one-token steps decode
    exactly what the dynamic cache decodes, padded batches included."""
    import torch

    lm = load_model("random:tiny", tekken, cache="static", compile=compile_mode)
    assert lm.cache == "static" and lm.describe()["compile"] == compile_mode
    engine = get_engine("llguidance", tekken, whitespace="compact")
    regexes = [items[0], items[2]]  # an ISO date and a hex colour: a few tokens each
    # room for 240 tokens (a 512-long cache with the prompt); the interleaved baseline runs
    # as many steps as the batch took (a 256-long cache if sized by them: a new graph)
    run = generate(engine, lm, tekken, regexes, batch=2, max_tokens=240, temperature=1.0, prompt=SPEC_PROMPT)
    assert run.summary["steps"] < 100 and run.summary["unconstrained_step_ms"] > 0
    assert run.summary["compiles_in_loop"] == 0  # every shape compiled in the warm-up, none while timed
    assert run.summary["invalid"] == run.summary["bad_prefix"] == 0
    prompts = [[1, *tekken.encode("short")], [1, *tekken.encode("a longer prompt than that one")]]
    for group in (prompts, prompts[:1] * 2):
        _, want, _ = decode_loop(tiny, group, 12, 0.0, 0, None)
        _, got, _ = decode_loop(lm, group, 12, 0.0, 0, None)
        assert got == want
    dec = lm.start(prompts, 12)
    assert dec.cache_len == 256 and dec.shape == (2, 256, True)
    with torch.inference_mode(), pytest.raises(ModelError, match="run the prompts first"):
        dec.forward(torch.tensor([5, 5]))
    with pytest.raises(ModelError, match="unknown cache"):
        load_model("random:tiny", tekken, cache="paged")


def test_prompts_put_each_items_spec_in_front(tekken, tiny, items) -> None:
    date, matrix = items[0], items[3]
    assert render_prompt(SPEC_PROMPT, date).endswith(f"regular expression:\n{date.spec}\n")
    text = render_prompt("{name} as {kind}: {spec} {other}", matrix)
    assert text.startswith("s08_array_matrix as JSON schema: {") and text.endswith("} {other}")
    assert json.loads(text.split(": ", 1)[1][:-8]) == matrix.spec
    engine = get_engine("llguidance", tekken, whitespace="compact")
    run = generate(engine, tiny, tekken, items, batch=3, max_tokens=30, temperature=1.0, prompt=SPEC_PROMPT)
    s = run.summary
    assert s["invalid"] == s["rejected"] == s["error"] == s["bad_prefix"] == 0 and s["prompt"] == SPEC_PROMPT
    lengths = {q["item"]: q["prompt_tokens"] for q in run.sequences}
    assert lengths[matrix.name] > lengths[date.name] > len(tekken.encode(SPEC_PROMPT)) // 2
    assert s["prompt_tokens_max"] == max(lengths.values())
    base = unconstrained(tiny, tekken, items, batch=3, max_tokens=4, prompt=SPEC_PROMPT)
    assert base.tokens == 2 * 3 * 4  # 5 items: 2 batches of 3
    with pytest.raises(ValueError, match="placeholders but no item"):
        unconstrained(tiny, tekken, 3, batch=1, max_tokens=4, prompt=SPEC_PROMPT)
    room = 4096 - lengths[date.name]  # tiny has 4,096 positions: the date's prompt fits, the matrix's not
    run = generate(engine, tiny, tekken, [date, matrix], batch=2, max_tokens=room, prompt=SPEC_PROMPT,
                   temperature=1.0, baseline=False)
    by = {q["item"]: q for q in run.sequences}
    assert by[matrix.name]["status"] == "prompt_too_long" and "exceed the 4096 positions" in by[matrix.name]["detail"]
    assert run.summary["prompt_too_long"] == 1 and by[date.name]["tokens"] > 0
    with pytest.raises(ModelError, match="max_tokens 4096 and a prompt exceed the 4096 positions"):
        generate(engine, tiny, tekken, [date], max_tokens=4096)


def _spin_forever(give_up: float = 10.0) -> None:
    """Busy Python code that swallows every Exception; it gives up after ``give_up``
    seconds, so a broken time limit fails the test instead of hanging it."""
    import time

    end = time.perf_counter() + give_up
    while time.perf_counter() < end:
        try:
            sum(range(1000))
        except Exception:  # noqa: BLE001, S112 - careless code: the time limit must get through it
            continue


class _NeverCompiles(EngineBase):
    """Compiles as ``inner`` does, except the ``n``-th call, which spins (past any sane limit)."""

    def __init__(self, inner, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0

    def compile(self, spec):
        self.calls += 1
        if self.calls == self.n:
            _spin_forever()
        return self.inner.compile(spec)

    def matcher(self, compiled):
        return self.inner.matcher(compiled)


def test_a_compile_past_the_time_limit_is_a_compile_error_and_the_run_goes_on(tekken, tiny, items) -> None:
    from toolkit.core.errors import TimeLimitExceeded, time_limit

    with pytest.raises(TimeLimitExceeded, match="'block' exceeded"), time_limit(0.2, "block"):
        _spin_forever()
    with time_limit(5.0):  # a block that ends in time: nothing raised, the alarm disarmed
        pass
    engine = _NeverCompiles(get_engine("outlines", tekken, whitespace="compact"), 2)
    run = generate(engine, tiny, tekken, items[:3], batch=3, max_tokens=8, temperature=1.0, baseline=False,
                   compile_timeout=0.5)
    by = {q["item"]: q for q in run.sequences}
    assert by[items[1].name]["status"] == "compile_error" and run.summary["compile_error"] == 1
    assert "TimeLimitExceeded" in by[items[1].name]["detail"] and "compile seconds" in by[items[1].name]["detail"]
    assert by[items[0].name]["tokens"] > 0 and by[items[2].name]["tokens"] > 0


def test_figure_subtitles_name_the_tokenizer_not_its_path() -> None:
    from toolkit.report.style import short_vocab

    assert short_vocab("llama3:/work/shared/tokenizers/llama-3/tokenizer.model") == "llama3:llama-3"
    assert short_vocab("hf:/ckpt/mistral-7b-v0.3") == "hf:mistral-7b-v0.3" and short_vocab("tekken") == "tekken"


def test_time_limits_nest() -> None:
    """An inner limit that ends in time leaves the outer one running: the outer still fires."""
    from toolkit.core.errors import TimeLimitExceeded, time_limit

    with pytest.raises(TimeLimitExceeded, match="'outer' exceeded"), time_limit(0.4, "outer"):
        with time_limit(5.0, "inner"):
            pass
        _spin_forever()
    with pytest.raises(TimeLimitExceeded, match="'inner' exceeded"), time_limit(5.0, "outer"), \
            time_limit(0.2, "inner"):
        _spin_forever()


def test_chat_template_prompts_with_the_mistral_tokenizer(items, tmp_path, capsys) -> None:
    """--chat: each prompt is one user message of the tokenizer's chat template, then the
    generation prompt ([INST] ... [/INST] for Mistral), BOS from the template; outputs
    are still checked, and the baseline must have decoded the same prompts."""
    folder = require_shared("tokenizers/mistral-7b-v0.3/tokenizer_config.json").parent
    from toolkit.decode.model import load_chat_template

    vocab = load_vocab(f"hf:{folder / 'tokenizer.json'}")
    chat = load_chat_template(folder, vocab)
    text = render_prompt(SPEC_PROMPT, items[0])
    ids = chat.ids(text)
    assert ids[:2] == [1, 3] and ids[-1] == 4  # <s> [INST] ... [/INST]
    assert vocab.decode(ids[2:-1]) == b" " + text.encode()
    with pytest.raises(ModelError, match="131072"):
        load_chat_template(folder, load_vocab("tekken"))  # another tokenizer's ids
    from toolkit.decode.model import ChatTemplate

    tok = type(chat.tokenizer).from_pretrained(folder)  # a copy whose template always raises
    tok.chat_template = "{{ raise_exception('a system message is required') }}"
    with pytest.raises(ModelError, match="fails on a single user message.*system message is required"):
        ChatTemplate(chat.source, tok, chat.vocab_size).ids("hi")
    lm = load_model("random:tiny", vocab)
    engine = get_engine("llguidance", vocab, whitespace="compact")
    run = generate(engine, lm, vocab, items[:3], batch=3, max_tokens=24, temperature=1.0, prompt=SPEC_PROMPT,
                   chat=chat, baseline=False)
    s = run.summary
    assert s["chat"] == str(folder) and s["invalid"] == s["bad_prefix"] == s["error"] == 0
    assert {q["item"]: q["prompt_tokens"] for q in run.sequences}[items[0].name] == len(ids)
    base = unconstrained(lm, vocab, items[:3], batch=3, max_tokens=4, prompt=SPEC_PROMPT)  # no chat
    with pytest.raises(ValueError, match="other prompts"):
        generate(engine, lm, vocab, items[:3], batch=3, max_tokens=4, prompt=SPEC_PROMPT, chat=chat, baseline=base)
    # the CLI: --chat without a folder takes the hf: vocabulary's; with a vocabulary that
    # has none it says what to give
    out = tmp_path / "gen"
    assert main(["generate", "--engine", "llguidance", "-o", "llguidance.whitespace=compact", "--vocab",
                 f"hf:{folder / 'tokenizer.json'}", "--data", str(embedded_dir() / "regex"), "--limit", "2",
                 "--max-tokens", "8", "--chat", "--out", str(out)]) == 0
    meta = json.loads((out / "llguidance" / "batch-1" / "run.json").read_text())
    assert meta["chat"] == meta["summary"]["chat"] == str(folder)
    assert main(["report", str(out)]) == 0
    assert "apply kernel torch, default prompt, chat template" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["generate", "--engine", "llguidance", "--data", str(embedded_dir() / "regex"), "--limit", "1",
                 "--max-tokens", "4", "--chat", "--out", str(tmp_path / "no")]) != 0
    assert "--chat needs a FOLDER" in capsys.readouterr().err


def test_compiled_items_are_kept_between_runs(tekken, tiny) -> None:
    """``generate(compiled=...)``: each item compiled once per engine across batch sizes
    (a refusal is not retried); every run's sequences still get their own matchers."""
    found = {it.name: it for it in iter_items(embedded_dir())}
    chosen = [found["g01_json"], found["r01_iso_date"], found["r03_ipv4"]]  # outlines refuses the first

    class Counting(EngineBase):
        native_inputs = ()

        def __init__(self) -> None:
            self.engine, self.calls = get_engine("outlines", tekken), 0

        def compile(self, grammar):
            self.calls += 1
            return self.engine.compile(grammar)

        def matcher(self, compiled):
            return self.engine.matcher(compiled)

    engine, kept = Counting(), {}
    first = generate(engine, tiny, tekken, chosen, batch=3, max_tokens=6, temperature=1.0, baseline=False,
                     compare_kernels=False, compiled=kept)
    assert engine.calls == 3 and set(kept) == {s.name for s in chosen}
    second = generate(engine, tiny, tekken, chosen, batch=1, max_tokens=6, temperature=1.0, baseline=False,
                      compare_kernels=False, compiled=kept)
    assert engine.calls == 3  # nothing compiled again, the refusal not retried
    a = {s["item"]: s for s in first.sequences}
    b = {s["item"]: s for s in second.sequences}
    assert not any(s["compile_reused"] for s in a.values()) and all(s["compile_reused"] for s in b.values())
    assert b["g01_json"]["status"] == "compile_error" and b["g01_json"]["detail"] == a["g01_json"]["detail"]
    for name in ("r01_iso_date", "r03_ipv4"):  # the first compile's seconds are in both runs' TTFM
        assert b[name]["ttfm_s"] > 0 and b[name]["tokens"] > 0
    fresh = generate(engine, tiny, tekken, chosen[1:], batch=2, max_tokens=2, baseline=False, compare_kernels=False)
    assert engine.calls == 5 and not any(s["compile_reused"] for s in fresh.sequences)


def test_cli_generate_batch_by_batch_with_one_compile_and_a_table(tmp_path, capsys) -> None:
    """``--compile-once --shared-baseline --baseline-groups``: batch sizes in the order
    given, each engine's items compiled in the first, and ``summary.csv`` rewritten after
    every run."""
    out = tmp_path / "gen"
    argv = ["generate", "--engine", "outlines", "llguidance", "--data", str(embedded_dir() / "regex"),
            "--limit", "3", "--batch", "2", "1", "--max-tokens", "6", "--temperature", "1", "--schedule", "static",
            "--no-compare-kernels", "--out", str(out)]
    assert main([*argv, "--baseline-groups", "1"]) == 2
    assert "--baseline-groups is for --shared-baseline" in capsys.readouterr().err
    rc = main([*argv, "--shared-baseline", "--baseline-groups", "1", "--compile-once"])
    text = capsys.readouterr().out
    assert rc == 0 and text.index("unconstrained batch 2") < text.index("outlines batch 2") \
        < text.index("llguidance batch 2") < text.index("unconstrained batch 1") < text.index("outlines batch 1")
    table = pd.read_csv(out / "summary.csv")
    assert table[["engine", "batch"]].values.tolist() == [["outlines", 2], ["llguidance", 2], ["outlines", 1],
                                                          ["llguidance", 1]]
    assert (table["unconstrained_forward_ms"] > 0).all() and (table["overhead_pct"].notna()).all()
    for engine in ("outlines", "llguidance"):
        for b, reused in ((2, [False, False, False, True]), (1, [True] * 3)):  # batch 2 cycles the first item
            meta = json.loads((out / engine / f"batch-{b}" / "run.json").read_text())
            assert meta["compile_once"] is True and meta["baseline_groups"] == 1
            seqs = [json.loads(line) for line in (out / engine / f"batch-{b}" / "sequences.jsonl").open()]
            assert [s["compile_reused"] for s in seqs] == reused
            steps = pd.read_csv(out / engine / f"batch-{b}" / "steps.csv")
            assert set(steps[steps["mode"] == "unconstrained"]["batch_index"]) == {0}  # one baseline batch


def test_mask_buffer_falls_back_to_unpinned_memory(tekken) -> None:
    """On a device run the mask buffer is page-locked; where none can be had (here: no
    CUDA at all) it is ordinary memory, and the masks still land in the tensor."""
    from concurrent.futures import ThreadPoolExecutor

    from toolkit.core import bitmask as bm
    from toolkit.decode.loop import Seq
    from toolkit.decode.serial import Masker

    with ThreadPoolExecutor(1) as pool:
        masker = Masker([Seq(None, None, [], 0.0, done=True)], tekken, pool, "cuda")
        masker.fill(0)  # a finished sequence: its EOS-only row
    assert not masker.tensor.is_pinned() and masker.tensor.shape == (1, bm.words(tekken.size))
    assert bm.allowed_ids(masker.tensor.numpy()[0], tekken.size).tolist() == list(tekken.eos_ids[:1])


@pytest.mark.parametrize("model", ["random:tiny", "sim:1:5"])
def test_the_pipelined_loop_decodes_what_the_serial_loop_decodes(model, tekken, items) -> None:
    """Greedy decoding is the same token for token in both loops, for our strategies
    (native batch), a peer (its batch API) and the threaded fallback (naive-like
    plug-in: _EmptyAfter never empties within these steps); a batch of 3 over 5 items
    has a last batch that cycles and one where an item shares its compiled grammar."""
    lm = load_model(model, tekken)
    names = ["llguidance", "xgrammar", "outlines", "peer:llguidance"]
    for name in names:
        engine = get_engine(name, tekken, **({} if name.startswith("peer:") else {"whitespace": "compact"}))
        runs = {loop: generate(engine, lm, tekken, items, batch=3, max_tokens=14, loop=loop, baseline=False,
                               compare_kernels=False, threads=2) for loop in ("serial", "pipelined")}
        seqs = {loop: [(s["item"], s["status"], s["tokens"], s["text"], s["forced"]) for s in run.sequences]
                for loop, run in runs.items()}
        assert seqs["serial"] == seqs["pipelined"], name
        assert any(s[1] != "unfinished" for s in seqs["pipelined"]) or all(s[2] == 14 for s in seqs["pipelined"])
        assert runs["pipelined"].summary["loop"] == "pipelined" and runs["pipelined"].summary["threads"] == 2
    wrapped = _EmptyAfter(get_engine("outlines", tekken, whitespace="compact"), 10_000)
    a, b = (generate(wrapped, lm, tekken, items, batch=2, max_tokens=10, loop=loop, baseline=False,
                     compare_kernels=False) for loop in ("serial", "pipelined"))
    assert [s["text"] for s in a.sequences] == [s["text"] for s in b.sequences]


def test_host_overhead_and_the_interleaved_baseline_in_the_pipelined_loop(tekken, items) -> None:
    lm = load_model("sim:2:20", tekken)
    engine = get_engine("xgrammar", tekken, whitespace="compact")
    run = generate(engine, lm, tekken, items[:2], batch=2, max_tokens=8, compare_kernels=False)
    s = run.summary
    steps = pd.DataFrame(run.steps)
    assert set(steps["mode"]) == {"constrained", "unconstrained"} and s["loop"] == "pipelined"
    # wait + accept + forward against the same in the unconstrained loop, the forward pass
    # over the steps that waited for a one-token pass (all but the first, the prompts')
    one = steps[steps["width"] == 1].groupby("mode")["forward_s"].mean() * 1e3
    unc = steps[steps["mode"] == "unconstrained"][["wait_s", "accept_s"]].mean() * 1e3
    assert set(steps["width"]) == {0, 1} and s["forward_one_ms"] == pytest.approx(one["constrained"])
    assert s["host_overhead_ms"] == pytest.approx(s["wait_ms"] + s["accept_ms"] + one["constrained"]
                                                  - (unc["wait_s"] + unc["accept_s"] + one["unconstrained"]))
    assert s["host_overhead_pct"] == pytest.approx(100 * s["host_overhead_ms"] / s["unconstrained_forward_ms"])
    # a step is its parts: the forward pass (its launch and the wait for the device), the
    # wait for the masks, apply, sample, and the accepts' part on the critical path
    assert s["step_ms"] == pytest.approx(s["forward_ms"] + s["wait_ms"] + s["apply_ms"] + s["sample_ms"]
                                         + s["accept_ms"])
    # the device's 2 ms: the host waits for nearly all of it (the upper bound only catches a
    # runaway: on a loaded two-core CI host a 2 ms wait has read 15.7 ms)
    assert 1.9 < s["unconstrained_forward_ms"] < 100
    con = steps[steps["mode"] == "constrained"]
    assert (con["launch_s"] >= 0).all() and (con["masks"] <= 2).all() and s["masks"] == con["masks"].sum()
    with pytest.raises(ValueError, match="loop must be one of"):
        generate(engine, lm, tekken, items[:1], loop="eager")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        generate(engine, lm, tekken, items[:1], threads=0)
    base = unconstrained(lm, tekken, 2, batch=2, max_tokens=4, loop="serial")
    with pytest.raises(ValueError, match="the serial loop"):
        generate(engine, lm, tekken, items[:2], batch=2, max_tokens=4, baseline=base)


def test_the_simulated_device(tekken) -> None:
    import time

    import torch

    from toolkit.decode.model import SIM_NOTE

    lm = load_model("sim:200:50", tekken)  # a forward pass long enough that a loaded host still returns early
    assert lm.describe()["simulated"] and lm.notes == [SIM_NOTE] and lm.vocab_size == tekken.size
    dec = lm.start([[1, 2, 3], [4]], 8)
    t0 = time.perf_counter()
    logits = dec.forward()
    launched = time.perf_counter() - t0
    lm.synchronize()
    done = time.perf_counter() - t0
    assert launched < 0.1 < 0.2 <= done  # returns after its launches, synchronize waits out the rest
    assert logits.shape == (2, tekken.size) and logits.dtype == torch.float32
    again = lm.start([[1, 2, 3], [4]], 8).forward()
    assert torch.equal(logits, again)  # seeded: the same prompts give the same logits
    nxt = dec.forward(torch.tensor([5, 6]))
    assert not torch.equal(nxt, logits)
    for spec, why in (("sim:0", "FORWARD_MS"), ("sim:x:3", "FORWARD_MS"), ("sim:5:-1", "LAUNCHES"),
                      ("sim:5:1:2", "FORWARD_MS")):
        with pytest.raises(ModelError, match=why):
            load_model(spec, tekken)
    with pytest.raises(ModelError, match="runs on the host"):
        load_model("sim:5", tekken, device="cuda")
    with pytest.raises(ModelError, match="no KV cache or graphs"):
        load_model("sim:5", tekken, compile="reduce-overhead")


def test_cli_generate_on_the_simulated_device_says_so(tmp_path, capsys) -> None:
    out = tmp_path / "sim"
    rc = main(["generate", "--engine", "outlines", "--model", "sim:1:5", "--max-tokens", "6", "--limit", "2",
               "--batch", "2", "--threads", "1", "--unconstrained-baseline", "--out", str(out),
               "-o", "outlines.whitespace=compact"])
    text = capsys.readouterr().out
    assert rc == 0 and "simulated device" in text and "host_overhead_ms" in text
    run = json.loads((out / "outlines" / "batch-2" / "run.json").read_text())
    assert run["model"]["simulated"] and run["summary"]["loop"] == "pipelined" and run["summary"]["threads"] == 1


def test_an_engine_that_raises_in_the_batch_call_stops_the_run_with_its_error(tekken, items) -> None:
    """A plug-in whose matcher raises (a bug outside the protocol) reaches the caller
    from the mask thread, and the threads are stopped (no hang)."""
    import threading

    class Raises(EngineBase):
        native_inputs = ()

        def __init__(self, engine) -> None:
            self.engine = engine

        def compile(self, grammar):
            return self.engine.compile(grammar)

        def matcher(self, compiled):
            m = self.engine.matcher(compiled)

            class Bad(MatcherBase):
                error = None

                def fill_bitmask(self, mask, row=0):
                    return m.fill_bitmask(mask, row)

                def accept_token(self, t):
                    raise RuntimeError("plug-in bug")

            return Bad()

    with pytest.raises(RuntimeError, match="plug-in bug"):
        generate(Raises(get_engine("outlines", tekken, whitespace="compact")), load_model("sim:1:5", tekken),
                 tekken, items[:2], batch=2, max_tokens=6, baseline=False, compare_kernels=False)
    assert not any(t.name == "masklab-masks" for t in threading.enumerate())  # the mask thread was stopped


@pytest.mark.parametrize(("name", "cache"), [("llguidance", "dynamic"), ("llguidance", "static"),
                                           ("outlines", "dynamic"), ("peer:llguidance", "dynamic")])
def test_jump_forward_feeds_forced_tokens_without_sampling(name, cache, tekken, items) -> None:
    """Every output stays valid, forced tokens are taken without a step of their own
    (fewer steps than tokens: the inline schedule, where every run saves its passes),
    and the figures of a jump-forward run are recorded."""
    if name.startswith("peer:"):
        pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    lm = load_model("random:tiny", tekken, cache=cache)
    engine = get_engine(name, tekken) if name.startswith("peer:") else get_engine(name, tekken, whitespace="compact")
    forced = [i for i in items if i.name in ("r01_iso_date", "s09_array_tuple")]
    run = generate(engine, lm, tekken, forced, batch=2, max_tokens=30, temperature=1.0, seed=5,
                   jump_forward="inline")
    s = run.summary
    assert s["jump_forward"] and s["invalid"] == s["rejected"] == s["error"] == s["bad_prefix"] == 0
    assert s["jumped_tokens"] > 0 and 0 < s["steps_saved_pct"] < 100
    written = sum(seq["tokens"] for seq in run.sequences)
    con = [r for r in run.steps if r["mode"] == "constrained"]
    assert sum(r["tokens"] for r in con) == written  # every token is counted once, sampled or forced
    assert len(con) < max(seq["tokens"] for seq in run.sequences) + 1
    for seq in run.sequences:
        assert seq["tokens"] <= 30 and seq["jumped"] <= seq["tokens"]
        if seq["status"] == "valid":
            item = next(i for i in items if i.name == seq["item"])
            assert check_output(item, seq["text"])[0]


def test_chunked_forward_equals_feeding_one_token_at_a_time(tekken) -> None:
    """A jump-forward step (runs of different lengths, left-padded) leaves each sequence
    where feeding its tokens one by one would: same next logits."""
    import torch

    for cache in ("dynamic", "static"):
        lm = load_model("random:tiny", tekken, cache=cache)
        prompts, runs = [[1, 5, 6, 7], [1, 9]], [[10, 11, 12], [20]]
        alone = []
        for p, r in zip(prompts, runs, strict=True):
            d = lm.start([p], 16)
            d.forward()
            for t in r:
                d.forward(torch.tensor([t]))
            alone.append(d.forward(torch.tensor([30]))[0])
        both = lm.start(prompts, 16, chunks=True)
        both.forward()
        both.forward_chunks(runs)
        logits = both.forward(torch.tensor([30, 30]))
        for i in range(2):
            assert torch.allclose(logits[i], alone[i], atol=1e-5), cache


def test_compiled_chunk_steps_pad_to_a_few_widths_and_give_the_eager_logits(tekken) -> None:
    """With a compiled model the chunk steps are compiled too, once per batch shape with
    the width open, and padded to a power of two (few CUDA graphs): the logits are the
    eager steps' and runs of 2, 3, 5 and 7 tokens make one graph."""
    import torch
    from torch._dynamo.utils import counters

    from toolkit.decode.model import chunk_width

    assert [chunk_width(w) for w in (1, 2, 3, 4, 5, 9, 16, 17)] == [1, 2, 4, 4, 8, 16, 16, 32]
    eager = load_model("random:tiny", tekken, cache="static")
    compiled = load_model("random:tiny", tekken, compile="default")
    prompts = [[1, 5, 6, 7], [1, 9]]
    decs = [lm.start(prompts, 32, chunks=True) for lm in (eager, compiled)]
    for d in decs:
        d.forward()
    graphs = None
    for w in (2, 3, 5, 7, 3):
        runs = [[10 + k for k in range(w)], [20]]
        got = [d.forward_chunks(runs) for d in decs]
        assert torch.allclose(got[0], got[1], atol=1e-4), w
        if graphs is None:
            graphs = counters["stats"]["unique_graphs"]
        assert counters["stats"]["unique_graphs"] == graphs, w  # no recompile for a new width
    # the padded steps took their power-of-two widths of the cache, the eager ones their own
    assert decs[1].seen == decs[0].prompt_len + 2 + 4 + 8 + 8 + 4 and decs[0].seen == decs[0].prompt_len + 20
    after = [d.forward(torch.tensor([30, 31])) for d in decs]
    assert torch.allclose(after[0], after[1], atol=1e-4)


def test_a_replaying_model_and_its_baseline_write_the_items_instances(tekken) -> None:
    """``random:NAME:replay``: a real forward pass whose logits favour each item's valid
    instance; jump-forward with a compiled model then feeds the keys in compiled chunk
    steps, none compiled while timed, and the shared baseline replays the texts too."""
    schema = Item("person", "schema", {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                                       "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
                  (Case('{"name": "Ada", "age": 36}', True),))
    lm = load_model("random:tiny:replay", tekken, compile="default")
    assert lm.replay and lm.describe()["replay"] and any("replay" in n for n in lm.notes)
    engine = get_engine("llguidance", tekken, spelling="llguidance")
    seen: list[object] = []
    start = lm.start
    lm.start = lambda *a, **k: seen.append(k.get("targets")) or start(*a, **k)  # type: ignore[method-assign]
    base = unconstrained(lm, tekken, [schema, schema], batch=2, max_tokens=40)
    assert seen[-1] == [b'{"name": "Ada", "age": 36}'] * 2  # the timed baseline batch replays
    del lm.start
    for jump in (False, True):
        run = generate(engine, lm, tekken, [schema, schema], batch=2, max_tokens=40, baseline=base, jump_forward=jump)
        assert {s["text"] for s in run.sequences} == {'{"name": "Ada", "age": 36}'}
        assert run.summary["valid"] == 2 and run.summary["compiles_in_loop"] == 0
        assert (run.summary["jumped_tokens"] >= 4) == jump
    assert load_model("random:tiny", tekken).replay is False
    with pytest.raises(ModelError, match="unknown random architecture"):
        load_model("random:tiny:replays", tekken)


def test_replay_adds_its_bonus_to_the_token_each_row_favours(tekken) -> None:
    """:class:`Replay` adds :data:`REPLAY_BONUS` once per row, at the canonical next token
    of its target; a row without a target gets nothing; ``rows`` maps rows of a slice."""
    r = Replay(tekken, [b'{"a": 1}', None], 2)
    first = r.next_token(0)
    assert first is not None and r.next_token(1) is None
    logits = torch.zeros(2, tekken.size)
    r.favour(logits)
    assert logits[0, first] == REPLAY_BONUS and int(logits.count_nonzero()) == 1
    one = torch.zeros(1, tekken.size, dtype=torch.bfloat16)
    r.favour(one, [0])
    assert one[0, first] == REPLAY_BONUS and int(one.count_nonzero()) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a GPU machine)")
def test_replay_does_not_wait_for_the_forward_pass_on_cuda(tekken) -> None:
    """``favour`` is called right after a forward pass is launched, and the step's masks
    are made while the pass runs: on CUDA it must return with the device still busy (a
    copy from pageable memory would wait for the queued work, as it did on the H200)."""
    r = Replay(tekken, [b'{"a": 1}'], 1)
    logits = torch.zeros(1, tekken.size, device="cuda")
    r.favour(logits)  # the device constant made once
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second of device work queued ahead, as a forward pass is
    r.favour(logits)
    assert not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert logits[0, r.next_token(0)].item() == 2 * REPLAY_BONUS


def test_the_replaying_stand_in_writes_each_items_instance_and_jump_forward_saves_steps(tekken) -> None:
    """``sim:...:replay`` favours each sequence's valid instance, so outputs are the
    dataset's texts; with keys spelled as llguidance writes them, jump-forward feeds the
    property names without sampling them."""
    schema = Item("person", "schema", {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                                       "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
                  (Case('{"name": "Ada", "age": 36}', True),))
    lm = load_model("sim:1:0:replay", tekken)
    engine = get_engine("llguidance", tekken, spelling="llguidance")
    plain = generate(engine, lm, tekken, [schema], max_tokens=40, baseline=False)
    jump = generate(engine, lm, tekken, [schema], max_tokens=40, baseline=False, jump_forward=True)
    for run in (plain, jump):
        (seq,) = run.sequences
        assert seq["status"] == "valid" and seq["text"] == '{"name": "Ada", "age": 36}'
    assert plain.summary["jumped_tokens"] == 0 and jump.summary["jumped_tokens"] >= 2  # name", age"
    assert jump.summary["steps"] <= plain.summary["steps"]  # runs of one token: overlap saves no pass
    # the two schedules: a run of n forced tokens saves n passes inline (fed with the
    # sampled token), n - 1 overlapped (fed in the pass after the sampled token's)
    long = Item("long", "schema", {"type": "object", "additionalProperties": False,
                                   "required": ["occupation_description", "year_of_birth"],
                                   "properties": {"occupation_description": {"type": "string"},
                                                  "year_of_birth": {"type": "integer"}}},
                (Case('{"occupation_description": "Ada", "year_of_birth": 36}', True),))
    runs = _forced_runs(engine, tekken, long, long.cases[0].text)
    assert len(runs) == 2 and sum(runs) > 2  # occupation_description", year_of_birth"
    got = {j: generate(engine, lm, tekken, [long], max_tokens=40, baseline=False, jump_forward=j, chunk_width="all")
           for j in (False, "overlap", "lookahead", "inline")}
    for j, run in got.items():
        (seq,) = run.sequences
        assert seq["text"] == long.cases[0].text and run.summary["jumped_tokens"] == (sum(runs) if j else 0)
        con = [r for r in run.steps if r["mode"] == "constrained"]
        assert sum(r["tokens"] for r in con) == seq["tokens"]  # each token counted once, sampled or forced
    steps = {j: run.summary["steps"] for j, run in got.items()}
    assert steps[False] - steps["inline"] == sum(runs) and steps[False] - steps["overlap"] == sum(runs) - len(runs)
    # lookahead: the second run follows a narrow mask (` "` after the comma: its table has
    # the run); the first follows the sequence's first mask, filled before the loop
    # without a table, so it goes the overlap way: one pass more saved than overlap
    assert steps["lookahead"] == steps["overlap"] - 1
    for j, run in got.items():  # steps saved: the passes a run of jumped tokens did not take
        saved = run.summary["steps_saved_pct"] * run.sequences[0]["tokens"] / 100
        assert round(saved) == steps[False] - steps[j], j
    with pytest.raises(ModelError, match="replay"):
        load_model("sim:1:0:replays", tekken)
    # runs cut to chunks of at most w tokens, their rest fed in the next passes in place of
    # the draws: the same text, every forced token still jumped, the passes saved exactly
    # those the chunks fill (w = 1: none, every run fed a token a pass as plain decoding)
    for j in ("overlap", "lookahead"):
        for w in (1, 2, 3):
            run = generate(engine, lm, tekken, [long], max_tokens=40, baseline=False, jump_forward=j, chunk_width=w)
            (seq,) = run.sequences
            assert seq["text"] == long.cases[0].text and run.summary["jumped_tokens"] == sum(runs)
            assert run.summary["chunk_width"] == w
            con = [r for r in run.steps if r["mode"] == "constrained"]
            assert max(r["width"] for r in con) == min(w, max(runs) + 1) and sum(r["tokens"] for r in con) == seq["tokens"]
            # the first run goes the overlap way (its n tokens after the draw's pass), the
            # second, under lookahead, with its draw (n + 1 tokens)
            fed = [runs[0], runs[1] + (j == "lookahead")]
            saved = sum(n - -(-n // w) for n in fed)
            assert steps[False] - run.summary["steps"] == saved, (j, w)
            assert round(run.summary["steps_saved_pct"] * seq["tokens"] / 100) == saved, (j, w)


def _forced_runs(engine, vocab, item: Item, text: str) -> list[int]:
    """The lengths of the forced runs a greedy walk of ``text`` meets: after each token
    sampled, the tokens its grammar forces (taken, then the walk goes on sampling)."""
    from toolkit.grammar.inputs import engine_input

    m = engine.matcher(engine.compile(engine_input(engine, item.source())))
    m.prepare_forced()
    ids, runs, k = vocab.encode(text), [], 0
    while k < len(ids):
        assert m.accept_token(ids[k])
        k += 1
        forced = m.forced_tokens()
        if forced and k < len(ids):
            assert ids[k: k + len(forced)] == forced
            assert m.accept_tokens(forced) == len(forced)
            runs.append(len(forced))
            k += len(forced)
    return runs


def test_overlap_finds_the_forced_runs_on_the_mask_thread(tekken, monkeypatch) -> None:
    """The overlap schedule keeps jump-forward off the critical path: the loop's thread
    never accepts a token or asks for forced ones (every such call is the mask thread's),
    where the inline schedule makes them before the launch."""
    import threading

    from toolkit.core.batch import NativeBatchMatcher

    schema = Item("person", "schema", {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                                       "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
                  (Case('{"name": "Ada", "age": 36}', True),))
    calls: list[str] = []
    real = NativeBatchMatcher.accept_forced

    def spy(self, *a, **k):
        calls.append(threading.current_thread().name)
        return real(self, *a, **k)

    monkeypatch.setattr(NativeBatchMatcher, "accept_forced", spy)
    lm = load_model("sim:1:0:replay", tekken)
    engine = get_engine("llguidance", tekken, spelling="llguidance")
    for sched, where in (("overlap", "masklab-masks"), ("inline", threading.main_thread().name)):
        calls.clear()
        run = generate(engine, lm, tekken, [schema, schema], batch=2, max_tokens=40, baseline=False,
                       jump_forward=sched)
        assert run.summary["jumped_tokens"] >= 4 and calls and set(calls) == {where}, sched


def test_a_replaying_model_reads_the_fed_ids_before_it_launches_the_step(tekken, monkeypatch) -> None:
    """Reading the sampled ids to the host after the launch would wait for the whole
    forward pass on a GPU, and the step's masks would no longer be made while it runs:
    the replay reads them first, and adds its bonus after the launch."""
    import torch

    from toolkit.decode import model as model_mod

    calls: list[str] = []
    real_forward, real_write = model_mod.Decoding._forward, model_mod.Replay.write
    monkeypatch.setattr(model_mod.Decoding, "_forward", lambda self, t: calls.append("launch") or real_forward(self, t))
    monkeypatch.setattr(model_mod.Replay, "write", lambda self, runs: calls.append("read") or real_write(self, runs))
    lm = load_model("random:tiny:replay", tekken)
    dec = lm.start([[1, 5]], 8, targets=[b'{"a": 1}'])
    dec.forward()
    calls.clear()
    logits = dec.forward(torch.tensor([tekken.encode("{")[0]]))
    assert calls == ["read", "launch"]
    assert int(logits.argmax()) == dec.replay.next_tokens()[0]  # the bonus is on the target's next token


def test_repeats_of_a_grid_are_passes_and_the_report_gives_medians_spreads_and_noise(tmp_path, capsys) -> None:
    """``--repeat 2``: the grid twice, pass after pass (``OUT/ENGINE/batch-B/repeat-r``),
    every summary row with its repeat; the report's end-to-end table has one row per engine
    and batch, the median over the repeats with its interval, and the counts of the first."""
    from toolkit.report.e2e import e2e_table, load_generate_runs

    out = tmp_path / "gen"
    rc = main(["generate", "--engine", "outlines", "llguidance", "--model", "sim:1:5", "--max-tokens", "6",
               "--limit", "2", "--batch", "2", "1", "--repeat", "2", "--unconstrained-baseline", "--quiet",
               "--no-compare-kernels", "--out", str(out), "-o", "outlines.whitespace=compact",
               "-o", "llguidance.whitespace=compact"])
    assert rc == 0, capsys.readouterr().err
    table = pd.read_csv(out / "summary.csv")
    assert table[["engine", "batch", "repeat"]].values.tolist() == [
        [e, b, r] for r in (1, 2) for b in (2, 1) for e in ("outlines", "llguidance")]
    for e in ("outlines", "llguidance"):
        for b in (1, 2):
            for r in (1, 2):
                assert json.loads((out / e / f"batch-{b}" / f"repeat-{r}" / "run.json").read_text())["repeat"] == r
    runs, _ = load_generate_runs([out])
    assert len(runs) == 8
    e2e = e2e_table(runs, boot=200)
    assert len(e2e) == 4 and (e2e["repeats"] == 2).all()
    for (label, batch), row in e2e.iterrows():
        mine = runs[(runs["label"] == label) & (runs["batch"] == batch)]
        assert row["tokens/s"] == pytest.approx(mine["tokens_per_s"].median())
        assert mine["tokens_per_s"].min() <= row["tokens/s low"] <= row["tokens/s high"] <= mine["tokens_per_s"].max()
        assert row["valid"] == mine.sort_values("repeat")["valid"].iloc[0]
    report = write_report([out], out=tmp_path / "report", boot=100).read_text(encoding="utf-8")
    assert re.search(r"\| \d[\d,]*\.\d\d \[\d[\d,]*\.\d\d, \d[\d,]*\.\d\d\] \|", report), "intervals in the table"


def test_a_figure_whose_repeats_spread_past_it_is_called_noise() -> None:
    from toolkit.report.e2e import noise_warnings

    base = {"engine": "llguidance", "version": "0.1.0", "setup": "", "tokens_per_s": 100.0, "sequences": 2,
            "valid": 2, "unconstrained_tokens_per_s": 100.0, "step_ms": 10.0, "apply_ms": 1.0}
    rows = [{**base, "label": "ours", "batch": 1, "repeat": 1, "overhead_pct": 0.5, "host_overhead_ms": 0.02},
            {**base, "label": "ours", "batch": 1, "repeat": 2, "overhead_pct": -1.5, "host_overhead_ms": 0.021},
            {**base, "label": "ours", "batch": 4, "repeat": 1, "overhead_pct": 10.0, "host_overhead_ms": 1.0},
            {**base, "label": "ours", "batch": 4, "repeat": 2, "overhead_pct": 11.0, "host_overhead_ms": 1.1}]
    got = noise_warnings(pd.DataFrame(rows))
    assert len(got) == 1 and got[0].startswith("ours batch 1: overhead % is -0.5") and "-1.5 to 0.5" in got[0]
    assert noise_warnings(pd.DataFrame(rows[:1])) == []
