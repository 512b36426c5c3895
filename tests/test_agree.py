"""Mask agreement between engines of one bench run (toolkit.bench.agree, ``masklab agree``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._support.shared import PROJECT_ROOT
from toolkit.bench.agree import (
    DIFFERENCE_CLASSES,
    AgreementError,
    agreement,
    classify_differences,
    explain,
    summarize,
)
from toolkit.bench.records import read_records
from toolkit.bench.run import run_bench
from toolkit.cli import main

pytest.importorskip("llguidance", reason="the agreement tests compare peer:llguidance runs (install .[peers])")

LLG, SHIPPED, OURS = "peer:llguidance", "tests._support.plugins:llguidance_forcing", "outlines"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded regex items plus one whose text starts with forced bytes (where
    llguidance as shipped allows only the canonical token)."""
    root = tmp_path_factory.mktemp("agree")
    data = root / "data"
    shutil.copytree(PROJECT_ROOT / "datasets" / "regex", data)
    forced = {"regex": r'\{"name": "[a-z]+"\}', "tests": [{"text": '{"name": "bob"}', "valid": True},
                                                           {"text": '{"name": 1}', "valid": False}]}
    (data / "forced.json").write_text(json.dumps(forced))
    run_bench([LLG, SHIPPED, OURS], data, out=root / "run", quick=True, progress=False)
    return root / "run"


def test_every_valid_step_carries_a_mask_digest(run: Path) -> None:
    for r in read_records(run):
        assert r["status"] == "passing", (r["engine"], r["item"], r["detail"])
        valid = [c for c in r["cases"] if c["valid"]]
        assert sum(len(c["digests"]) for c in valid) == len(r["tbm_s"])
        assert all(len(d) == 16 for c in valid for d in c["digests"])
        if r["engine"] == OURS:  # an engine's own compile figures ride along
            assert r["compiled_stats"]["states"] >= 1 and r["compiled_stats"]["memory_bytes"] == r["memory_bytes"]


def test_exact_engines_agree_and_forcing_is_caught(run: Path) -> None:
    same = agreement(run, LLG, OURS)
    totals = summarize(same)
    assert totals["items"] == 8 and totals["steps"] > 50
    assert totals["steps_differ"] == 0 and totals["items_equal"] == 8
    # llguidance as shipped narrows forced bytes to their canonical token: the digests see it
    forced = summarize(agreement(run, LLG, SHIPPED))
    assert forced["steps_differ"] > 0 and forced["items_equal"] < 8
    table = agreement(run, LLG, SHIPPED)
    item = table[table["differ"] > 0]["item"].iloc[0]
    diffs = explain(run, item, LLG, SHIPPED, max_steps=2)
    assert diffs and all(d[f"n_only_{LLG}"] > 0 and d[f"n_only_{SHIPPED}"] == 0 for d in diffs)


def test_differences_are_sorted_into_named_classes(run: Path) -> None:
    """Every token only one engine allows, at every differing step, lands in a class with
    an example; forcing narrows llguidance as shipped, so only the exact one has extras."""
    table = agreement(run, LLG, SHIPPED)
    classes = classify_differences(run, LLG, SHIPPED)
    assert len(classes) and set(classes["side"]) == {f"only {LLG}"}
    assert classes["steps"].sum() >= table["differ"].sum() > 0
    assert all(r.example.split(" ")[0] in set(table["item"]) for r in classes.itertuples())

    def first(data: bytes) -> str:
        return next(name for name, fits in DIFFERENCE_CLASSES if fits(data))

    assert first(b"\xff") == first(b"a\xc0") == "bytes never in UTF-8 (C0, C1, F5-FF)"
    assert first(b"\x00ab") == "starts with NUL" and first(b"a\x00") == "holds NUL"
    assert first(b"\xc3") == "not UTF-8 text alone (a partial character)" and first("é".encode()) == "other"
    assert first(b" \n") == "whitespace only" and first(b"\x01") == "ASCII control characters"
    assert first(b"") == "special token"


def test_cli_agree_writes_the_table_and_exits_1_on_differences(run: Path, tmp_path: Path, capsys) -> None:
    assert main(["agree", str(run), "--engines", f"{LLG},{OURS}", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "8 with every mask equal" in out and "0 differ" in out
    saved = json.loads((tmp_path / "agreement-peer-llguidance-vs-outlines.json").read_text())
    assert saved["steps_differ"] == 0 and saved["items"] == 8
    assert main(["agree", str(run), "--engines", f"{LLG},{SHIPPED}", "--out", str(tmp_path), "--explain", "1",
                 "--classify"]) == 1
    out = capsys.readouterr().out
    assert "only_" in out and "by class" in out
    assert (tmp_path / "differences-peer-llguidance-vs-tests._support.plugins-llguidance_forcing.csv").is_file()


def test_bad_requests_are_clear_errors(run: Path, tmp_path: Path) -> None:
    with pytest.raises(AgreementError, match="no records of engine 'naive'"):
        agreement(run, LLG, "naive")
    with pytest.raises(AgreementError, match="no records.jsonl"):
        agreement(tmp_path, LLG, OURS)
    old = tmp_path / "old"
    old.mkdir()
    recs = read_records(run)
    for r in recs:
        for c in r["cases"]:
            c.pop("digests", None)
    (old / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(AgreementError, match="no mask digests"):
        agreement(old, LLG, OURS)
    assert main(["agree", str(run), "--engines", LLG]) == 2
