"""The tidy tables of ``masklab report --tidy`` (``toolkit.report.tidy``): one row per
item and per mask step of a real run, readable with pandas alone, and the column lists
that ``docs/benchmarks.md`` prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.shared import PROJECT_ROOT
from toolkit.bench.records import read_records
from toolkit.bench.run import run_bench
from toolkit.report.bench import load_runs
from toolkit.report.tidy import ITEM_COLUMNS, MASK_COLUMNS, tidy_items, tidy_masks

pytest.importorskip("pyarrow", reason="the tidy tables are Parquet (pyarrow)")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two engines (ours and a peer when installed) on three embedded items, two repeats
    and two walks: every kind of row the tables hold."""
    out = tmp_path_factory.mktemp("tidy") / "run"
    engines = ["llguidance", "xgrammar"]
    run_bench(engines, limit=3, seed=1, out=out, repeat=2, walks=2, quick=True, progress=False)
    return out


def test_the_tables_hold_every_record_and_mask(run: Path) -> None:
    runs = load_runs(run)
    items, masks = tidy_items(runs), tidy_masks(runs)
    assert list(items.columns) == list(ITEM_COLUMNS) and list(masks.columns) == list(MASK_COLUMNS)
    recs = read_records(run)
    assert len(items) == len(recs) == 2 * 3 * 2
    assert set(items["repeat"]) == {1, 2} and set(items["engine"]) == {"llguidance", "xgrammar"}
    assert items["ours"].all() and (items["engine_version"] == "0.1.0").all()
    assert (items["vocab"] == "tekken").all() and (items["source"] == "native").all()
    by_key = {(r["engine"], r["item"], r["repeat"]): r for r in recs}
    for row in items.itertuples():
        rec = by_key[(row.engine, row.item, row.repeat)]
        assert row.status == rec["status"] and row.masks == len(rec["tbm_s"])
        assert row.ttfm_ms == pytest.approx(rec["ttfm_s"] * 1e3)
    first = masks[masks["walk"] == 1]
    assert len(first) == sum(len(r["tbm_s"]) for r in recs)
    assert len(masks[masks["walk"] == 2]) == sum(len(r["walks"][0]["tbm_s"]) for r in recs if r.get("walks"))
    assert first["density"].between(0, 1).all() and masks.loc[masks["walk"] == 2, "allowed"].isna().all()
    one = by_key[("xgrammar", items["item"].iloc[0], 2)]
    got = first[(first["engine"] == "xgrammar") & (first["item"] == one["item"]) & (first["repeat"] == 2)]
    assert got.sort_values("step")["tbm_us"].tolist() == pytest.approx([t * 1e6 for t in one["tbm_s"]])


def test_report_tidy_writes_parquet_and_csv_that_pandas_reads_alone(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "toolkit", "report", str(run), "--out", str(out), "--tidy",
                           "--boot", "50"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    code = ("import pandas as pd, sys; d = sys.argv[1]; "
            "i = pd.read_parquet(d + '/items.parquet'); m = pd.read_parquet(d + '/masks.parquet'); "
            "c = pd.read_csv(d + '/items.csv'); g = pd.read_csv(d + '/masks.csv.gz'); "
            "assert len(i) == len(c) and len(m) == len(g) and list(i) == list(c) and list(m) == list(g); "
            "print(len(i), len(m), m.dtypes['sliced'], i.dtypes['repeat'])")
    # a fresh interpreter that imports no masklab module: the files stand alone
    check = subprocess.run([sys.executable, "-I", "-c", code, str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    n_items, n_masks, sliced, repeat = check.stdout.split()
    assert int(n_items) == 12 and int(n_masks) > 0 and sliced == "boolean" and repeat == "int64"
    assert "## Tidy tables" in (out / "report.md").read_text(encoding="utf-8")
    again = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "toolkit", "report", str(run), "--out", str(again), "--tidy", "--boot",
                    "0"], cwd=PROJECT_ROOT, check=True, capture_output=True)
    for name in ("items.parquet", "masks.parquet", "items.csv", "masks.csv.gz"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), f"{name} differs between two reports"


def _doc_table(text: str, name: str) -> dict[str, str]:
    section = text.split("## Tidy tables", 1)[1].split("\n## ", 1)[0]
    block = section.split(f"`{name}`:\n", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    return {m.group(1): m.group(2) for m in (re.match(r"\| `([^`]+)` \| (.*) \|$", r) for r in rows) if m}


def test_docs_print_the_column_lists() -> None:
    text = (PROJECT_ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert _doc_table(text, "items") == ITEM_COLUMNS
    assert _doc_table(text, "masks") == MASK_COLUMNS
