"""Per-mask truth: the harness times the engines' own calls, the direct check calls the
peers through their own APIs on the same walks, and ``toolkit.report.direct`` lines them up.

Real data: the embedded schemas with the Tekken vocabulary, the peers as installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from strategies import get_engine
from toolkit.bench.measure import measure_item
from toolkit.core import bitmask as bm
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import select_items
from toolkit.report.direct import direct_markdown, direct_table

pytest.importorskip("llguidance", reason="the direct check drives peer:llguidance (install .[peers])")
pytest.importorskip("xgrammar", reason="the direct check drives peer:xgrammar (install .[peers])")

PEERS = ("peer:llguidance", "peer:xgrammar")


@pytest.fixture(scope="module")
def vocab():
    return load_vocab("tekken")


@pytest.fixture(scope="module")
def schemas():
    return [i for i in select_items(None) if i.kind == "schema" and sum(c.valid for c in i.cases) >= 2][:3]


def test_direct_check_lines_up_with_the_harness(vocab, schemas) -> None:
    records = []
    for name in (*PEERS, "llguidance"):
        engine = get_engine(name, vocab)
        for item in schemas:
            rec = measure_item(engine, vocab, item, quick=True, direct=True)
            assert rec["status"] == "passing", (name, item.name, rec["detail"])
            records.append(rec)
            if name in PEERS:
                d = rec["direct"]
                # the same walks, step for step, and the engine part of each step inside its wall time
                assert sum(d["steps"]) == len(d["tbm_s"]) == len(rec["tbm_s"]) > 0
                assert len(rec["glue_s"]) == len(rec["tbm_s"])
                assert min(rec["glue_s"]) > -1e-6 and sum(rec["glue_s"]) > 0
                assert 0 < rec["ttfm_s"] <= rec["ttfm_wall_s"] and d["ttfm_s"] > 0
            else:  # ours: the C session's calls are the engine's; no adapter, no direct check
                assert "direct" not in rec and "glue_s" not in rec
    table = direct_table(records).set_index("engine")
    assert set(table.index) == {*PEERS, "llguidance"}
    for name in PEERS:
        row = table.loc[name]
        assert row["against"] == "direct" and row["items"] == len(schemas) and row["misaligned"] == 0
        assert row["steps"] == sum(len(r["tbm_s"]) for r in records if r["engine"] == name)
        assert row["p50_ratio"] > 0 and row["mean_ratio"] > 0
    ours = table.loc["llguidance"]
    assert ours["against"] == "peer:llguidance direct" and ours["items"] == len(schemas)
    assert np.isnan(ours["glue_p50_us"])
    text = direct_markdown(direct_table(records))
    assert "peer:xgrammar" in text and "within_10pct" in text


def test_misaligned_walks_are_left_out() -> None:
    rec = {"engine": "peer:x", "item": "a", "status": "passing", "tbm_s": [1e-6, 2e-6], "ttfm_s": 1e-3,
           "direct": {"ttfm_s": 1e-3, "tbm_s": [1e-6], "steps": [1]}}
    good = {**rec, "item": "b", "direct": {"ttfm_s": 2e-3, "tbm_s": [2e-6, 2e-6], "steps": [2]}}
    row = direct_table([rec, good]).iloc[0]
    assert row["items"] == 1 and row["misaligned"] == 1 and row["steps"] == 2
    assert row["p50_us"] == pytest.approx(1.5) and row["direct_p50_us"] == pytest.approx(2.0)
    assert not row["within_10pct"]


@pytest.mark.parametrize("name", PEERS)
def test_peer_fill_overwrites_a_dirty_row_and_accept_allowed_is_accept_token(vocab, schemas, name) -> None:
    """The peers' fill no longer clears the row first (their engines write every word) and
    clips only the words with non-text ids; a server's accept of an allowed token
    (``accept_allowed``) leaves the same state as ``accept_token``."""
    engine = get_engine(name, vocab)
    item = schemas[0]
    tokens = vocab.encode(next(c.text for c in item.cases if c.valid)) + [vocab.eos_ids[0]]
    compiled = engine.compile(item.source())
    a, b = engine.matcher(compiled), engine.matcher(compiled)
    clean, dirty = bm.allocate(vocab.size), bm.allocate(vocab.size)
    others = sorted(set(vocab.special_tokens) - set(vocab.eos_ids))
    for t in tokens:
        clean[:] = 0
        dirty[:] = -1
        info_a, info_b = a.fill_bitmask(clean), b.fill_bitmask(dirty)
        assert np.array_equal(clean, dirty) and info_a == info_b
        assert not bm.to_bool(clean[0], vocab.size)[others].any()
        assert a.accept_token(t) and b.accept_allowed(t)
    assert a.is_terminated() and b.is_terminated()
    assert a.engine_s > 0 and b.engine_s > 0


def test_run_bench_direct_check_records_and_refuses_a_mixed_resume(tmp_path) -> None:
    """Through the worker pool: the run says it was a direct check, every peer record has
    its direct walks lined up with its own, and resuming the folder without the check
    is refused (its times would mix two kinds of record)."""
    from toolkit.bench.records import read_records
    from toolkit.bench.run import run_bench
    from toolkit.core.errors import HarnessError

    out = tmp_path / "run"
    schemas = [i for i in select_items(None) if i.kind == "schema"][:2]
    data = tmp_path / "data"
    data.mkdir()
    for item in schemas:
        (data / f"{item.name}.json").write_text(item.path.read_text(encoding="utf-8"), encoding="utf-8")
    run_bench(["peer:llguidance", "llguidance"], data, out=out, quick=True, direct_check=True, progress=False)


    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["direct_check"] is True
    recs = read_records(out)
    peer = [r for r in recs if r["engine"] == "peer:llguidance"]
    assert len(peer) == 2 and all(sum(r["direct"]["steps"]) == len(r["tbm_s"]) > 0 for r in peer)
    assert all("direct" not in r for r in recs if r["engine"] == "llguidance")
    with pytest.raises(HarnessError, match="direct_check"):
        run_bench(["peer:llguidance"], data, out=out, quick=True, progress=False)


@pytest.mark.parametrize("name,package", [("peer:glrmask", "glrmask"), ("peer:llama.cpp", "llama_cpp"),
                                          ("peer:lm-format-enforcer", "lmformatenforcer")])
def test_direct_check_of_the_field_peers(vocab, name: str, package: str) -> None:
    """The peers of the field issue are called through their own APIs on the walks the
    harness times, step for step (an item each passes: a regex, read by each in its own way)."""
    pytest.importorskip(package, reason=f"{name} needs {package} (the [peers] extra)")
    item = next(i for i in select_items(None) if i.name == "r01_iso_date")
    rec = measure_item(get_engine(name, vocab), vocab, item, quick=True, direct=True)
    assert rec["status"] == "passing", rec["detail"]
    d = rec["direct"]
    assert sum(d["steps"]) == len(d["tbm_s"]) == len(rec["tbm_s"]) > 0
    assert len(rec["glue_s"]) == len(rec["tbm_s"]) and d["ttfm_s"] > 0
    row = direct_table([rec]).iloc[0]
    assert row["engine"] == name and row["against"] == "direct" and row["misaligned"] == 0
