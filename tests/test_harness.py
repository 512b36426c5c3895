"""The benchmark harness: records, crash and timeout recovery, resume after a kill, CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests._support.shared import PROJECT_ROOT
from toolkit.bench.measure import measure_item
from toolkit.bench.records import read_records
from toolkit.bench.run import run_bench
from toolkit.core.errors import HarnessError
from toolkit.data.datasets import load_item

pytest.importorskip("llguidance", reason="the harness tests drive peer:llguidance (install .[peers])")

FAULTY = "tests._support.faulty:FaultyEngine"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TESTS = [{"data": {"n": 1}, "valid": True}, {"data": {"n": 22}, "valid": True}, {"data": {"n": "x"}, "valid": False}]


def _write_items(folder: Path, kinds: dict[str, str]) -> Path:
    """One schema item per name; ``kinds[name]`` goes to the schema's description."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, how in kinds.items():
        schema = dict(SCHEMA, description=f"masklab-test: {how}") if how else SCHEMA
        (folder / f"{name}.json").write_text(json.dumps({"schema": schema, "tests": TESTS}))
    return folder


def _by_item(records: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["engine"], r["item"]): r for r in records}


def test_measure_item_records_masks_and_statuses(tmp_path: Path) -> None:
    from strategies import get_engine
    from toolkit.core.vocab import load_vocab

    vocab = load_vocab("tekken")
    engine = get_engine(FAULTY, vocab)
    items = _write_items(tmp_path, {"ok": "", "loose": "loose", "tight": "tight"})
    ok = measure_item(engine, vocab, load_item(items / "ok.json"))
    assert ok["status"] == "passing", ok["detail"]
    assert ok["ttfm_s"] >= ok["compile_s"] > 0
    # one mask per token of each valid instance plus its EOS step
    steps = sum(len(vocab.encode(json.dumps(t["data"]))) + 1 for t in TESTS if t["valid"])
    assert len(ok["tbm_s"]) == len(ok["allowed"]) == len(ok["sliced"]) == steps
    assert all(0 < a <= vocab.size for a in ok["allowed"])
    assert [c["ok"] for c in ok["cases"]] == [True, True, True]
    assert measure_item(engine, vocab, load_item(items / "loose.json"))["status"] == "invalidation_error"
    tight = measure_item(engine, vocab, load_item(items / "tight.json"))
    assert tight["status"] == "validation_error" and "rejected at token" in tight["detail"]
    quick = measure_item(engine, vocab, load_item(items / "ok.json"), quick=True)
    assert len(quick["cases"]) == 3


def test_crash_and_timeout_are_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    data = _write_items(tmp_path / "data", {"a_ok": "", "b_crash": "crash", "c_hang": "hang", "d_ok": ""})
    t0 = time.monotonic()
    df = run_bench([FAULTY, "peer:llguidance"], data, out=tmp_path / "run", timeout=4, jobs=2, progress=False)
    assert time.monotonic() - t0 < 120
    got = {(r.engine, r.item): r.status for r in df.itertuples()}
    assert got == {
        (FAULTY, "a_ok"): "passing",
        (FAULTY, "b_crash"): "crash",
        (FAULTY, "c_hang"): "timeout",
        (FAULTY, "d_ok"): "passing",
        **{("peer:llguidance", n): "passing" for n in ("a_ok", "b_crash", "c_hang", "d_ok")},
    }
    recs = _by_item(read_records(tmp_path / "run"))
    assert "signal 11" in recs[(FAULTY, "b_crash")]["detail"]
    assert "4 s" in recs[(FAULTY, "c_hang")]["detail"]
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["engines"]["peer:llguidance"]["version"] and meta["finished"]
    assert meta["machine"]["cpu_count"] >= 1


def test_one_time_setup_lands_on_the_warm_up_not_on_an_item(tmp_path: Path) -> None:
    # the engine sleeps 3 s in its process's first compile, like a library setting up
    data = _write_items(tmp_path / "data", {"a_ok": ""})
    df = run_bench([FAULTY], data, out=tmp_path / "run", options={FAULTY: {"cold_s": 3.0}}, timeout=60,
                   progress=False)
    rec = df.iloc[0]
    assert rec.status == "passing" and rec.ttfm_s < 1.5  # a cold item compiles in milliseconds


def test_a_killed_run_resumes_without_redoing_or_losing_items(tmp_path: Path) -> None:
    names = [f"i{k}" for k in range(6)]
    data = _write_items(tmp_path / "data", dict.fromkeys(names, "slow"))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "toolkit", "bench", "--engines", FAULTY, "--data", str(data),
           "--out", str(out), "--timeout", "60", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = out / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if records.exists() and len(records.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its worker, mid-item
    proc.wait()
    before = records.read_text().splitlines()
    assert 2 <= len(before) < len(names), "the run was not killed mid-way"
    with records.open("a") as f:  # a record torn by the kill
        f.write('{"engine": "tests._support.faulty:FaultyEngine", "item": "i5", "sta')
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = records.read_text().splitlines()
    assert after[: len(before)] == before  # finished records kept as they were
    items = [json.loads(line)["item"] for line in after]
    assert sorted(items) == names  # each item exactly once, none redone, none lost
    meta = json.loads((out / "run.json").read_text())
    assert meta["resumed"] and meta["finished"]


def test_resume_refuses_different_settings(tmp_path: Path) -> None:
    data = _write_items(tmp_path / "data", {"a": ""})
    run_bench(["peer:llguidance"], data, out=tmp_path / "run", progress=False)
    with pytest.raises(HarnessError, match="quick"):
        run_bench(["peer:llguidance"], data, quick=True, out=tmp_path / "run", progress=False)
    with pytest.raises(HarnessError, match="options"):
        run_bench(["peer:llguidance"], data, options={"peer:llguidance": {"forcing": True}}, out=tmp_path / "run",
                  progress=False)


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="unknown engine"):
        run_bench(["no-such-engine"], tmp_path, out=tmp_path / "run", progress=False)
    with pytest.raises(HarnessError, match="options given for engines not in the run"):
        run_bench(["peer:llguidance"], tmp_path, out=tmp_path / "run", options={"peer:xgrammar": {}}, progress=False)
    with pytest.raises(HarnessError, match="limit"):
        run_bench(["peer:llguidance"], tmp_path, out=tmp_path / "run", limit=0, progress=False)
    with pytest.raises(HarnessError, match="timeout"):
        run_bench(["peer:llguidance"], tmp_path, out=tmp_path / "run", timeout=0, progress=False)
    with pytest.raises(HarnessError, match="jobs"):
        run_bench(["peer:llguidance"], tmp_path, out=tmp_path / "run", jobs=0, progress=False)


def test_cli_bench_and_report_on_embedded_grammars(tmp_path: Path) -> None:
    pytest.importorskip("xgrammar", reason="needs peer:xgrammar")
    out = tmp_path / "quick"
    from toolkit.cli import main

    code = main(["bench", "--quick", "--limit", "3", "--engines", "peer:llguidance,peer:xgrammar",
                 "--data", str(PROJECT_ROOT / "datasets" / "grammars"), "--out", str(out), "--quiet",
                 "-o", "peer:llguidance.forcing=false", "--report"])
    assert code == 0
    recs = read_records(out)
    assert {r["engine"] for r in recs} == {"peer:llguidance", "peer:xgrammar"}
    assert len(recs) == 6 and all(r["kind"] == "lark" for r in recs)
    assert all(r["status"] != "crash" for r in recs)
    for name in ("report.md", "engines.csv", "density.csv", "tbm_cdf.png", "ttfm_cdf.png", "density.png"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob("*.pdf"))  # PDFs only when asked
    meta = json.loads((out / "run.json").read_text())
    assert meta["engines"]["peer:llguidance"]["requested_options"] == {"forcing": False}


def test_archived_records_are_read_from_gzip(tmp_path: Path) -> None:
    import gzip

    from toolkit.bench.records import load_records, records_file

    lines = [json.dumps({"engine": "e", "item": f"i{k}", "status": "passing"}) for k in range(2)] + ['{"engine": "e", "it']
    with gzip.open(tmp_path / "records.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    assert records_file(tmp_path).name == "records.jsonl.gz"
    recs, skipped = load_records(tmp_path)
    assert [r["item"] for r in recs] == ["i0", "i1"] and skipped == 1
    (tmp_path / "records.jsonl").write_text(lines[0] + "\n")  # a live run wins over its archive
    assert records_file(tmp_path).name == "records.jsonl" and len(read_records(tmp_path)) == 1


def test_a_case_the_vocabulary_cannot_tokenize_is_skipped_not_failed() -> None:
    from strategies import get_engine
    from tests._support.fixtures import small_vocab
    from toolkit.data.datasets import Case, Item

    vocab = small_vocab()
    item = Item("digits", "regex", "[0-9]+", (Case("12", True), Case("zz", False), Case("x1", True), Case("1", True)))
    rec = measure_item(get_engine("naive", vocab), vocab, item)
    assert rec["status"] == "passing", rec["detail"]
    assert [c["ok"] for c in rec["cases"]] == [True, None, None, True]
    assert "cannot tokenize" in rec["detail"]


def test_a_worker_that_never_starts_is_a_clear_error_not_a_hang() -> None:
    from tests._support.faulty import hanging_worker
    from toolkit.bench.pool import WorkerPool
    from toolkit.data.datasets import Case, Item

    pool = WorkerPool(1, "tekken", {}, "native", False, 5.0, None, startup_timeout=2.0, target=hanging_worker)
    item = Item("x", "regex", "a", (Case("a", True),))
    t0 = time.monotonic()
    with pytest.raises(HarnessError, match="took over 2 s to start"):
        list(pool.run([("peer:llguidance", item)]))
    assert time.monotonic() - t0 < 30
    assert all(s.proc is None for s in pool.slots)  # the hung worker was killed


def test_walks_time_the_warm_grammar_apart_and_the_report_shows_both(tmp_path: Path) -> None:
    """``walks=2``: every engine walks each valid instance again on its one compile; the
    record keeps the first walk in ``tbm_s`` and the second in ``walks`` (one time per
    mask of the first), the report has the first-against-later table, its CSV and
    figure, and a run in the folder with another ``walks`` is not resumed."""
    from toolkit.report.bench import load_runs, walks_table
    from toolkit.report.write import write_report

    data = _write_items(tmp_path / "data", {"a": "", "b": ""})
    out = tmp_path / "run"
    engines = ["llguidance", "glr", "peer:llguidance"]
    run_bench(engines, data, out=out, walks=2, progress=False)
    recs = read_records(out)
    assert len(recs) == 6 and all(r["status"] == "passing" for r in recs), [r["detail"] for r in recs]
    for r in recs:
        assert len(r["walks"]) == 1 and len(r["walks"][0]["tbm_s"]) == len(r["tbm_s"]) > 0
        assert all(t > 0 for t in r["walks"][0]["tbm_s"])
        assert ("glue_s" in r["walks"][0]) == (r["engine"] == "peer:llguidance")  # a peer's own calls timed
    assert json.loads((out / "run.json").read_text())["walks"] == 2
    runs = load_runs(out)
    assert len(runs.later) == len(runs.masks) and set(runs.later["walk"]) == {2}
    table = walks_table(runs)
    assert list(table.index) == runs.engines and (table["later masks"] == table["first masks"]).all()
    report = write_report([out]).read_text(encoding="utf-8")
    assert "## Warm grammars" in report and "walks 2" in report
    assert (out / "walks.csv").is_file() and (out / "walks_cdf.png").is_file()
    with pytest.raises(HarnessError, match="walks"):
        run_bench(engines, data, out=out, progress=False)


def test_a_later_walk_whose_masks_differ_from_the_first_is_a_validation_error(tmp_path: Path) -> None:
    """The later walks must give the first walk's masks: an engine whose matchers forget
    the schema after the first walk (its fifth matcher on: the TTFM's, three instances,
    then the second walk) is a ``validation_error`` naming the walk, the case and the step."""
    from strategies.peers import LLGuidanceEngine
    from toolkit.core.vocab import load_vocab

    class Forgetful(LLGuidanceEngine):
        made = 0

        def matcher(self, compiled):  # noqa: ANN001, ANN202
            self.made += 1
            if self.made > 4:
                compiled = self.compile({})
            return super().matcher(compiled)

    vocab = load_vocab("tekken")
    item = load_item(_write_items(tmp_path, {"a": ""}) / "a.json")
    engine = Forgetful(vocab)
    assert measure_item(engine, vocab, item)["status"] == "passing"
    engine.made = 0
    rec = measure_item(engine, vocab, item, walks=2)
    assert rec["status"] == "validation_error"
    assert "walk 2: case 0: the mask at token 0 is not the first walk's" in rec["detail"]
    with pytest.raises(HarnessError, match="walks"):
        run_bench(["peer:llguidance"], tmp_path, out=tmp_path / "run", walks=0, progress=False)


def test_repeats_run_in_passes_resume_and_the_report_gives_medians_with_intervals(tmp_path: Path) -> None:
    """``repeat=2``: every (engine, item) measured twice, the second pass after every
    engine's first (a task's repeats never back to back), each record with its repeat; a
    resume with ``repeat=3`` runs only the third pass; the report's timing table is the
    median over the repeats with an interval, and its statuses count each item once."""
    from toolkit.report.bench import engine_table, load_runs
    from toolkit.report.write import write_report

    data = _write_items(tmp_path / "data", {"a": "", "b": ""})
    out = tmp_path / "run"
    engines = ["llguidance", "xgrammar"]
    run_bench(engines, data, out=out, repeat=2, progress=False)
    recs = read_records(out)
    assert [(r["repeat"], r["item"], r["engine"]) for r in recs] == [
        (rep, item, e) for rep in (1, 2) for item in ("a", "b") for e in engines]
    assert all(r["status"] == "passing" for r in recs), [r["detail"] for r in recs]
    assert json.loads((out / "run.json").read_text())["repeat"] == 2
    run_bench(engines, data, out=out, repeat=3, progress=False)
    recs = read_records(out)
    assert [r["repeat"] for r in recs] == [1] * 4 + [2] * 4 + [3] * 4  # only the missing pass ran
    run_bench(engines, data, out=out, progress=False)  # a resume without --repeat keeps the run's three
    assert len(read_records(out)) == 12 and json.loads((out / "run.json").read_text())["repeat"] == 3

    runs = load_runs(out)
    assert sorted(runs.masks["repeat"].unique()) == [1, 2, 3] and len(runs.records) == 12
    t = engine_table(runs, boot=200)
    row = t.loc["ours: llguidance"]
    assert (row["items"], row["passing"], row["repeats"], row["unstable"]) == (2, 2, 3, 0)
    m = runs.masks[runs.masks["engine_label"] == row.name]
    per_repeat = [np.percentile(g["tbm_s"] * 1e6, 50) for _, g in m.groupby("repeat")]
    assert row["TBM p50 (µs)"] == pytest.approx(np.median(per_repeat))
    assert row["TBM p50 low (µs)"] <= row["TBM p50 (µs)"] <= row["TBM p50 high (µs)"]
    report = write_report([out], boot=100).read_text(encoding="utf-8")
    assert re.search(r"\| \d+\.\d \[\d+\.\d, \d+\.\d\] \|", report), "the TBM table shows intervals"
    with pytest.raises(HarnessError, match="repeat must be at least 1"):
        run_bench(engines, data, out=tmp_path / "other", repeat=0, progress=False)
