"""toolkit.report: tables, figures and report.md from synthetic benchmark run directories."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from toolkit.core.errors import MasklabError
from toolkit.report.bench import (
    DENSITY_CATEGORIES,
    ReportError,
    _styles,
    common_items,
    comparability_warnings,
    density_table,
    engine_table,
    load_runs,
    plot_density,
    plot_tbm_cdf,
    plot_ttfm_cdf,
)
from toolkit.report.style import engine_styles, to_markdown
from toolkit.report.write import write_report

V = 131072
LLG = "peer:llguidance"
XGR = "peer:xgrammar"
BROKEN = "masklab:broken"


def _meta(engines: dict[str, Any], processor: str = "cpu-a") -> dict[str, Any]:
    return {
        "masklab_version": "0.1.0",
        "command": "masklab bench --quick",
        "started": "2026-11-21T10:00:00",
        "finished": "2026-11-21T10:05:00",
        "vocab": {"spec": "tekken", "size": V, "text_tokens": 130072},
        "data": "datasets",
        "timeout_s": 30.0,
        "jobs": 2,
        "seed": None,
        "quick": True,
        "engines": engines,
        "machine": {
            "platform": "Linux",
            "processor": processor,
            "cpu_count": 2,
            "memory_gb": 24.0,
            "python": "3.11.9",
            "gpu": None,
        },
    }


def _rec(
    engine: str, item: str, status: str, tbm_us=(), allowed=(), sliced=None, ttfm=None, detail=""
):
    n = len(tbm_us)
    return {
        "engine": engine,
        "item": item,
        "kind": "schema",
        "status": status,
        "detail": detail,
        "compile_s": None if ttfm is None else ttfm * 0.9,
        "ttfm_s": ttfm,
        "memory_bytes": 1000,
        "vocab_size": V,
        "tbm_s": [t * 1e-6 for t in tbm_us],
        "allowed": list(allowed),
        "sliced": list(sliced) if sliced is not None else [False] * n,
        "cases": [{"valid": True, "ok": status == "passing", "tokens": n, "consumed": n}],
        "wall_s": 0.5,
    }


def _write_run(
    d: Path, meta: dict[str, Any], records: list[dict[str, Any]], tail: str = ""
) -> Path:
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    lines = [json.dumps(r) for r in records]
    (d / "records.jsonl").write_text("\n".join(lines) + "\n" + tail, encoding="utf-8")
    return d


# llguidance: TBM (µs) 1, 2, 3, 4, 10; TTFM (ms) 10, 20; statuses passing, validation_error, timeout
LLG_RECORDS = [
    _rec(
        LLG,
        "s01",
        "passing",
        tbm_us=[1, 2, 3, 4],
        allowed=[1310, V // 2, V, 130000],  # 0.99%, 50%, 100%, 99.2% sliced
        sliced=[False, False, False, True],
        ttfm=0.010,
    ),
    _rec(
        LLG,
        "s02",
        "validation_error",
        tbm_us=[10],
        allowed=[1],
        ttfm=0.020,
        detail="rejected | valid\nline",
    ),
    _rec(LLG, "s03", "timeout", detail="timed out after 30 s"),
]
XGR_RECORDS = [
    _rec(
        XGR,
        "s01",
        "passing",
        tbm_us=[5, 5, 20],
        allowed=[100, 50000, V],
        sliced=[True, False, True],
        ttfm=0.5,
    ),
    _rec(XGR, "s02", "crash", detail="Traceback ..."),
    _rec(XGR, "s03", "passing", tbm_us=[6], allowed=[V], ttfm=1.5),
]
BROKEN_RECORDS = [_rec(BROKEN, f"s0{i}", "compile_error", detail="no") for i in (1, 2, 3)]

ENGINES_A = {
    LLG: {"version": "1.9.1", "options": {"forcing": False}},
    XGR: {"version": "0.2.8", "options": {}},
    BROKEN: {"version": "0.1.0", "options": {}},
}


@pytest.fixture
def run_a(tmp_path: Path) -> Path:
    records = LLG_RECORDS + XGR_RECORDS + BROKEN_RECORDS
    return _write_run(tmp_path / "runA", _meta(ENGINES_A), records, tail='{"engine": "peer:xgr')


@pytest.fixture
def run_b(tmp_path: Path) -> Path:
    """llguidance again, same version, other options."""
    meta = _meta({LLG: {"version": "1.9.1", "options": {"forcing": True}}})
    return _write_run(tmp_path / "runB", meta, [_rec(LLG, "s01", "passing", [7], [V], ttfm=0.03)])


def test_load_runs_skips_truncated_line(run_a: Path) -> None:
    runs = load_runs(run_a)
    assert runs.meta[0]["skipped_lines"] == 1
    assert runs.meta[0]["records"] == 9
    assert len(runs.records) == 9
    assert runs.engines == [f"{BROKEN} 0.1.0", "llguidance 1.9.1", "xgrammar 0.2.8"]
    assert set(runs.records["engine_label"].astype(str)) == set(runs.engines)
    assert len(runs.masks) == 5 + 4
    m = runs.masks[(runs.masks["engine_label"] == "llguidance 1.9.1") & (runs.masks["item"] == "s01")]
    assert m["density"].to_numpy() == pytest.approx([1310 / V, 0.5, 1.0, 130000 / V])
    assert list(m["sliced"]) == [False, False, False, True]
    assert list(m["step"]) == [0, 1, 2, 3]


def test_with_repeats_the_slowest_mask_is_its_median_over_the_repeats(tmp_path: Path) -> None:
    """``TBM max`` is the median of the repeats' maxima, so a hiccup in one repeat's mask
    stays out only when it is one repeat of three; ``TBM max per mask`` is the largest of
    each mask's (item and step) median over the repeats: a 300 us hiccup at a different
    mask in each repeat leaves it at the slowest mask most repeats see (9 us)."""
    recs = []
    for k, tbm in enumerate(([1, 300, 9, 2], [1, 2, 8, 300], [300, 2, 9, 2]), start=1):
        r = _rec(LLG, "s01", "passing", tbm_us=tbm, allowed=[5] * 4, ttfm=0.01)
        recs.append({**r, "repeat": k})
    meta = _meta({LLG: {"version": "1.9.1", "options": {}}})
    runs = load_runs(_write_run(tmp_path / "rep", meta, recs))
    row = engine_table(runs, boot=0).loc["llguidance 1.9.1"]
    assert row["TBM max (µs)"] == pytest.approx(300)
    assert row["TBM max per mask (µs)"] == pytest.approx(9) and row["repeats"] == 3
    single = engine_table(load_runs(_write_run(tmp_path / "one", meta, recs[:1])), boot=0)
    assert "TBM max per mask (µs)" not in single
    # the bench's summary prints it beside the max, only for runs with repeats
    from toolkit.cli.report import timing_summary

    summary = timing_summary([str(tmp_path / "rep")])
    assert "TBM max per mask (µs)" in summary and "300.0" in summary and "9.0" in summary
    assert "per mask" not in timing_summary([str(tmp_path / "one")])


def test_engine_table_numbers(run_a: Path) -> None:
    t = engine_table(load_runs(run_a))
    llg = t.loc["llguidance 1.9.1"]
    tbm = np.array([1, 2, 3, 4, 10.0])
    assert llg["TBM avg (µs)"] == pytest.approx(4.0)
    assert llg["TBM p50 (µs)"] == pytest.approx(3.0)
    assert llg["TBM p25 (µs)"] == pytest.approx(2.0)
    assert llg["TBM p99.9 (µs)"] == pytest.approx(np.percentile(tbm, 99.9))
    assert llg["TBM max (µs)"] == pytest.approx(10.0)
    assert llg["TTFM avg (ms)"] == pytest.approx(15.0)
    assert llg["TTFM p50 (ms)"] == pytest.approx(15.0)
    assert llg["TTFM p90 (ms)"] == pytest.approx(19.0)  # linear: 10 + 0.9 * 10
    assert (llg["masks"], llg["items"]) == (5, 3)
    assert (llg["passing"], llg["validation_error"], llg["timeout"], llg["crash"]) == (1, 1, 1, 0)
    assert llg["passing %"] == pytest.approx(100 / 3)

    xgr = t.loc["xgrammar 0.2.8"]
    assert xgr["TBM avg (µs)"] == pytest.approx(9.0)
    assert (xgr["passing"], xgr["crash"], xgr["items"]) == (2, 1, 3)

    # every item failed to compile: still a row, timings NaN
    broken = t.loc[f"{BROKEN} 0.1.0"]
    assert broken["compile_error"] == 3 and broken["masks"] == 0 and broken["passing %"] == 0
    assert math.isnan(broken["TBM avg (µs)"]) and math.isnan(broken["TTFM p99 (ms)"])

    plain = engine_table(load_runs(run_a), boot=0)
    assert list(plain.columns[:9]) == [
        f"TBM {s} (µs)" for s in ("avg", "p25", "p50", "p75", "p90", "p95", "p99", "p99.9", "max")
    ]
    assert t[plain.columns].equals(plain)  # the intervals add columns and change no figure
    assert t.columns[1:3].tolist() == ["TBM avg low (µs)", "TBM avg high (µs)"] and "TBM max low (µs)" not in t
    assert llg["TBM p50 low (µs)"] <= llg["TBM p50 (µs)"] <= llg["TBM p50 high (µs)"]
    assert 1.0 <= llg["TBM p50 low (µs)"] and llg["TBM p50 high (µs)"] <= 10.0  # within what was seen
    assert "other" not in t.columns and "repeats" not in t.columns
    assert t["masks"].dtype == np.int64


def test_density_table(run_a: Path) -> None:
    d = density_table(load_runs(run_a))
    cats = [*DENSITY_CATEGORIES[:2], "under 85%, from slices", *DENSITY_CATEGORIES[2:]]  # xgrammar has a sliced 100/V mask
    llg, xgr = "llguidance 1.9.1", "xgrammar 0.2.8"
    assert list(d.loc[llg].index) == cats
    assert f"{BROKEN} 0.1.0" not in d.index.get_level_values(0)
    for engine in (llg, xgr):
        assert d.loc[engine, "% of masks"].sum() == pytest.approx(100.0)
        assert d.loc[engine, "% of mask time"].sum() == pytest.approx(100.0)
    # llguidance: sparse holds the 1 µs and the 10 µs masks (2 of 5 masks, 11 of 20 µs)
    row = d.loc[(llg, "sparse: under 2%")]
    assert row["masks"] == 2
    assert row["% of masks"] == pytest.approx(40.0)
    assert row["% of mask time"] == pytest.approx(55.0)
    assert row["µs per mask"] == pytest.approx(5.5)
    assert d.loc[(llg, "medium: 2 to 85%"), "masks"] == 1
    assert d.loc[(llg, "dense: 85% or more"), "masks"] == 1
    assert d.loc[(llg, "dense, from slices"), "µs per mask"] == pytest.approx(4.0)
    assert d.loc[(llg, "under 85%, from slices"), "masks"] == 0
    assert math.isnan(d.loc[(llg, "under 85%, from slices"), "µs per mask"])
    assert d.loc[(xgr, "under 85%, from slices"), "masks"] == 1
    assert d.loc[(xgr, "dense, from slices"), "masks"] == 1
    assert d.loc[(xgr, "dense: 85% or more"), "masks"] == 1  # s03's unsliced full mask


def test_density_table_without_sliced_low(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "r", _meta(ENGINES_A), LLG_RECORDS)
    d = density_table(load_runs(run))
    assert list(d.index.get_level_values(1)) == list(DENSITY_CATEGORIES)


def test_labels_apart_by_options(run_a: Path, run_b: Path) -> None:
    runs = load_runs([run_a, run_b])
    labels = set(runs.engines)
    assert "llguidance 1.9.1 (forcing=false)" in labels
    assert "llguidance 1.9.1 (forcing=true)" in labels
    assert "xgrammar 0.2.8" in labels  # only in one run: no suffix
    t = engine_table(runs)
    assert t.loc["llguidance 1.9.1 (forcing=true)", "masks"] == 1
    assert t.loc["llguidance 1.9.1 (forcing=false)", "masks"] == 5
    assert (
        list(runs.records.groupby("engine_label", observed=True)["run"].unique().map(len))
        == [1] * 4
    )


def test_labels_apart_by_run_dir(tmp_path: Path, run_a: Path) -> None:
    # same engine, version and options on another machine: told apart by directory name
    other = _write_run(tmp_path / "h200", _meta(ENGINES_A, processor="cpu-b"), LLG_RECORDS[:1])
    runs = load_runs([run_a, other])
    assert "llguidance 1.9.1 (runA)" in runs.engines and "llguidance 1.9.1 (h200)" in runs.engines
    # same directory names in two places: by position
    twin = _write_run(tmp_path / "x" / "runA", _meta(ENGINES_A), LLG_RECORDS[:1])
    runs = load_runs([run_a, twin])
    assert "llguidance 1.9.1 (run1)" in runs.engines and "llguidance 1.9.1 (run2)" in runs.engines
    t = engine_table(runs)
    assert t.loc["llguidance 1.9.1 (run2)", "masks"] == 4


def test_engine_colours_are_the_same_in_every_figure(run_a: Path, run_b: Path) -> None:
    """A known engine keeps its colour whatever else a report draws; peers are dashed;
    labels of one engine differ by line style, unknown engines by colour."""
    alone = engine_styles({"outlines 0.1.0": "outlines"})
    many = engine_styles({"x": "naive", "peer:llguidance 1.9.1": LLG, "outlines 0.1.0 (run1)": "outlines",
                          "outlines 0.1.0 (run2)": "outlines", "mine": "masklab:mine", "yours": "masklab:yours"})
    assert many["outlines 0.1.0 (run1)"]["color"] == alone["outlines 0.1.0"]["color"]
    assert many["outlines 0.1.0 (run1)"]["linestyle"] != many["outlines 0.1.0 (run2)"]["linestyle"]
    assert alone["outlines 0.1.0"]["linestyle"] == "-" and many["peer:llguidance 1.9.1"]["linestyle"] == "--"
    colours = [many[k]["color"] for k in ("x", "peer:llguidance 1.9.1", "outlines 0.1.0 (run1)", "mine", "yours")]
    assert len(set(colours)) == 5
    one, two = _styles(load_runs(run_a)), _styles(load_runs([run_a, run_b]))
    assert one["xgrammar 0.2.8"]["color"] == two["xgrammar 0.2.8"]["color"]
    assert {st["color"] for k, st in two.items() if k.startswith("llguidance 1.9.1")} == {one["llguidance 1.9.1"]["color"]}


def test_engine_missing_from_run_json(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "r", _meta({}), [_rec("naive", "s01", "passing", [3], [V])])
    runs = load_runs(run)
    assert runs.engines == ["ours: naive"]  # masklab's own, without a version to show
    assert engine_table(runs).loc["ours: naive", "TBM avg (µs)"] == pytest.approx(3.0)


def test_zero_records_is_a_clear_error(tmp_path: Path) -> None:
    empty = _write_run(tmp_path / "empty", _meta(ENGINES_A), [], tail='{"engine": "x", "it')
    with pytest.raises(ReportError, match="no records") as info:
        load_runs(empty)
    assert isinstance(info.value, ValueError) and isinstance(info.value, MasklabError)
    with pytest.raises(ValueError, match="no records"):
        write_report([empty], out=tmp_path / "out")
    with pytest.raises(ReportError, match="no records.jsonl"):
        load_runs(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        load_runs(tmp_path / "missing")
    with pytest.raises(ReportError, match="no run directory"):
        load_runs([])


def test_to_markdown() -> None:
    df = pd.DataFrame(
        {"x": [1.234, float("nan")], "n": [3, 1200], "name": ["a|b", "c\nd"]},
        index=pd.Index(["e1", "e2"], name="engine"),
    )
    assert to_markdown(df, ".1f", intfmt=",").splitlines() == [
        "| engine |   x |     n | name |",
        "| :----- | --: | ----: | :--- |",
        "| e1     | 1.2 |     3 | a\\|b |",
        "| e2     |   – | 1,200 | c d  |",
    ]
    plain = to_markdown(pd.DataFrame({"a": [0.5]}), {"a": ".3f"})
    assert plain.splitlines() == ["|     a |", "| ----: |", "| 0.500 |"]


def test_to_markdown_multiindex(run_a: Path) -> None:
    lines = to_markdown(density_table(load_runs(run_a)), ".1f").splitlines()
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells == ["engine", "category", "% of masks", "% of mask time", "µs per mask", "masks"]
    assert len(lines) == 2 + 2 * 5  # two engines with masks, five categories
    assert all(line.count("|") == 7 for line in lines)
    assert [c.strip() for c in lines[2].strip("|").split("|")][:3] == [
        "llguidance 1.9.1",
        "sparse: under 2%",
        "40.0",
    ]


def test_figures(run_a: Path, tmp_path: Path) -> None:
    runs = load_runs(run_a)
    before = dict(mpl.rcParams)
    out = tmp_path / "figs"
    figures = [plot_tbm_cdf(runs, out / "tbm"), plot_ttfm_cdf(runs, out / "ttfm.png", pdf=True),
               plot_density(runs, out / "density")]
    assert all(isinstance(f, Figure) for f in figures)
    for p in out.iterdir():
        assert p.is_file() and p.stat().st_size > 1000
    assert sorted(p.name for p in out.iterdir()) == ["density.png", "tbm.png", "ttfm.pdf", "ttfm.png"]
    img = mpimg.imread(out / "tbm.png")
    assert img.ndim == 3 and img.shape[0] > 500 and img.shape[1] > 800  # 200 dpi
    assert (out / "ttfm.pdf").read_bytes().startswith(b"%PDF")
    assert dict(mpl.rcParams) == before  # no global state changed


def test_figures_are_png_only_unless_pdf_is_asked(run_a: Path, tmp_path: Path) -> None:
    """By default every figure is a PNG and report.md links no PDF; ``pdf=True`` writes
    a PDF beside each PNG and links it under the figure."""
    from toolkit.report.style import new_figure, save_figure

    fig = new_figure(2.0, 2.0)
    fig.add_subplot().plot([0, 1], [0, 1])
    assert save_figure(fig, tmp_path / "f.pdf") == (tmp_path / "f.png", None)
    assert not (tmp_path / "f.pdf").exists()
    from PIL import Image

    with Image.open(tmp_path / "f.png") as png:  # a palette image (style.write_png): committed figures stay small
        assert png.mode == "P" and len(png.getcolors(256) or ()) >= 2
    assert save_figure(fig, tmp_path / "f", pdf=True) == (tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.pdf").read_bytes().startswith(b"%PDF")

    plain = write_report([run_a], out=tmp_path / "plain").read_text(encoding="utf-8")
    assert not list((tmp_path / "plain").glob("*.pdf")) and ".pdf" not in plain
    assert "TBM cumulative distribution\n" in plain
    md = write_report([run_a], out=tmp_path / "pdf", pdf=True).read_text(encoding="utf-8")
    stems = ("tbm_cdf", "ttfm_cdf", "density")
    assert {p.name for p in (tmp_path / "pdf").glob("*.pdf")} == {f"{s}.pdf" for s in stems}
    for s in stems:
        assert (tmp_path / "pdf" / f"{s}.pdf").read_bytes().startswith(b"%PDF")
        assert f"([PDF]({s}.pdf))" in md

    from toolkit.report.sweep import plot_sweep

    table = pd.DataFrame({"engine": ["a", "a"], "vocab": ["v1", "v2"], "vocab_size": [10, 20],
                          "tbm_p50_us": [1.0, 2.0], "tbm_p99_us": [5.0, 9.0], "ttfm_p50_ms": [3.0, 4.0],
                          "ttfm_p90_ms": [6.0, 8.0]})
    plot_sweep(table, "vocab", tmp_path / "sweep")
    assert (tmp_path / "sweep.png").is_file() and not (tmp_path / "sweep.pdf").exists()
    plot_sweep(table, "vocab", tmp_path / "sweep", pdf=True)
    assert (tmp_path / "sweep.pdf").is_file()


def test_write_report(run_a: Path, run_b: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    path = write_report([run_a, run_b], out=out)
    assert path == out / "report.md"
    names = {"report.md", "engines.csv", "density.csv"} | {
        f"{s}.png" for s in ("tbm_cdf", "ttfm_cdf", "density")
    }
    assert names <= {p.name for p in out.iterdir()}
    for name in names:
        assert (out / name).stat().st_size > 0
    md = path.read_text(encoding="utf-8")
    for text in (
        "# masklab benchmark report",
        "vocabulary: tekken (131,072 ids)",
        "masklab bench --quick",
        "![TBM CDF](tbm_cdf.png)",
        "TTFM cumulative distribution",
        "## How to read",
        "1 line(s) of records.jsonl skipped",
        "llguidance 1.9.1 (forcing=true)",
        "rejected \\| valid line",
    ):
        assert text in md, text
    engines = pd.read_csv(out / "engines.csv", index_col=0)
    assert engines.loc["llguidance 1.9.1 (forcing=false)", "TBM max (µs)"] == pytest.approx(10.0)
    density = pd.read_csv(out / "density.csv")
    assert list(density.columns[:2]) == ["engine", "category"]


def test_write_report_default_out_is_first_run(run_a: Path) -> None:
    assert write_report([run_a]) == run_a / "report.md"
    assert (run_a / "density.png").is_file()


def test_unconstrained_references_never_mix_models(tmp_path: Path) -> None:
    """Generate runs of two models in one report: each model's unconstrained tokens/s is
    its own reference line (a median across models is neither's speed); one model
    alone gets the one unlabelled line."""
    from toolkit.decode.generate import GenerateRun, write_run
    from toolkit.report.e2e import load_generate_runs, plot_overhead, unconstrained_references

    speeds = {"random:tiny": 500.0, "random:llama-3.2-1b": 5.0}
    for model, unc in speeds.items():
        for engine, factor in (("llguidance", 0.9), ("outlines", 0.8)):
            for batch in (1, 8):
                summary = {"batch": batch, "tokens_per_s": factor * unc * batch,
                           "unconstrained_tokens_per_s": unc * batch, "overhead_pct": 100 * (1 / factor - 1)}
                meta = {"engine": engine, "model": {"spec": model, "random_weights": True, "device": "cpu",
                                                    "dtype": "float32"}}
                write_run(GenerateRun([{"step": 0}], [], summary),
                          tmp_path / model.replace(":", "-") / engine / f"batch-{batch}", meta)
    runs, _ = load_generate_runs([tmp_path])
    assert set(runs["setup"]) == {"random:tiny (random weights)", "random:llama-3.2-1b (random weights)"}
    refs = unconstrained_references(runs)
    assert {k: v.to_dict() for k, v in refs.items()} == {
        "random:llama-3.2-1b (random weights)": {1: 5.0, 8: 40.0},
        "random:tiny (random weights)": {1: 500.0, 8: 4000.0},
    }
    one, _ = load_generate_runs([tmp_path / "random-tiny"])
    assert set(one["setup"]) == {""} and unconstrained_references(one)[""].to_dict() == {1: 500.0, 8: 4000.0}
    plot_overhead(runs, tmp_path / "e2e_overhead")
    assert (tmp_path / "e2e_overhead.png").stat().st_size > 0 and not (tmp_path / "e2e_overhead.pdf").exists()
    plot_overhead(runs, tmp_path / "e2e_overhead", pdf=True)
    assert (tmp_path / "e2e_overhead.pdf").stat().st_size > 0


# ------------------------------------------------------------------ like with like


def _walk(engine: str, item: str, digests: list[str], tbm_us: float = 1.0) -> dict[str, Any]:
    n = len(digests)
    rec = _rec(engine, item, "passing", tbm_us=[tbm_us] * n, allowed=[V] * n, ttfm=0.01)
    rec["cases"] = [{"valid": True, "ok": True, "tokens": n, "consumed": n, "digests": digests}]
    return rec


def _like_run(tmp_path: Path) -> Path:
    """Two engines: a and b passed by both (one step of a differs), c and d by one each."""
    records = [
        _walk(LLG, "a", ["x", "y", "z"]), _walk(XGR, "a", ["x", "q", "z"], tbm_us=5),
        _walk(LLG, "b", ["x"]), _walk(XGR, "b", ["x"], tbm_us=5),
        _walk(LLG, "c", ["x"], tbm_us=100), _rec(XGR, "c", "compile_error", detail="no"),
        _walk(XGR, "d", ["x"], tbm_us=500), _rec(LLG, "d", "timeout", detail="slow"),
    ]
    engines = {LLG: {"version": "1", "options": {}}, XGR: {"version": "2", "options": {}}}
    return _write_run(tmp_path / "like", _meta(engines), records)


def test_common_items_and_the_mask_warning(tmp_path: Path) -> None:
    run = _like_run(tmp_path)
    runs = load_runs(run)
    assert common_items(runs) == ["a", "b"]
    warnings = comparability_warnings(runs)
    assert len(warnings) == 1
    assert "llguidance 1 and xgrammar 2 computed different masks on 1 of 4 common steps (1 of 2 items" in warnings[0]


def test_report_times_the_common_items_and_says_so(tmp_path: Path) -> None:
    run = _like_run(tmp_path)
    md = write_report(run).read_text(encoding="utf-8")
    assert "the 2 items (of 4) that every engine passed" in md
    assert "## Warnings: not like for like" in md and "1 of 4 common steps" in md
    eng = pd.read_csv(run / "engines.csv", index_col=0)
    # timings over a and b only: 4 steps each, the slow lone items left out
    assert eng.loc["llguidance 1", "masks"] == 4 and eng.loc["llguidance 1", "TBM max (µs)"] == pytest.approx(1)
    assert eng.loc["xgrammar 2", "TBM max (µs)"] == pytest.approx(5)
    # ... while the outcome counts are over every record
    assert eng.loc["llguidance 1", "timeout"] == 1 and eng.loc["xgrammar 2", "compile_error"] == 1
    out = tmp_path / "all"
    md_all = write_report(run, out=out, all_items=True).read_text(encoding="utf-8")
    assert "each engine's own items (--all-items): 4 items" in md_all
    eng_all = pd.read_csv(out / "engines.csv", index_col=0)
    assert eng_all.loc["llguidance 1", "masks"] == 5 and eng_all.loc["xgrammar 2", "TBM max (µs)"] == pytest.approx(500)


def test_runs_on_different_vocabularies_or_data_warn(tmp_path: Path, run_a: Path) -> None:
    meta = _meta({LLG: {"version": "1.9.1", "options": {"forcing": False}}})
    meta["vocab"] = {"spec": "llama3:x", "size": 128256}
    meta["data"] = "maskbench"
    other = _write_run(tmp_path / "other", meta, [_rec(LLG, "s01", "passing", [7], [V], ttfm=0.03)])
    warnings = comparability_warnings(load_runs([run_a, other]))
    assert any("different vocabularies" in w for w in warnings)
    assert any("different data" in w for w in warnings)


def test_report_cli_warns_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.cli import main

    run = _like_run(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "computed different masks on 1 of 4 common steps" in err


def test_the_terminal_summary_keeps_the_pairs_that_differ_most(tmp_path: Path) -> None:
    third = "masklab:third"
    records = [_walk(LLG, "a", ["x", "y", "z"]), _walk(XGR, "a", ["x", "q", "z"]), _walk(third, "a", ["u", "v", "w"])]
    engines = {LLG: {"version": "1"}, XGR: {"version": "2"}, third: {"version": "3"}}
    runs = load_runs(_write_run(tmp_path / "three", _meta(engines), records))
    assert len(comparability_warnings(runs)) == 3
    short = comparability_warnings(runs, limit=1)
    assert len(short) == 2 and "on 3 of 3 common steps" in short[0]
    assert short[1] == "... and 2 more pairs of engines with different masks (all in report.md)"


def test_the_size_figure_reads_each_items_grammar(tmp_path: Path) -> None:
    """``write_report(sizes=True)``: ``size.png`` (TTFM and memory against the
    productions of each item's Grammar) and its line in report.md; not asked, not drawn."""
    from toolkit.bench.run import run_bench
    from toolkit.data.datasets import embedded_dir, iter_items
    from toolkit.report.bench import grammar_sizes, load_runs

    data = tmp_path / "data"
    data.mkdir()
    picked = [i for i in iter_items(embedded_dir()) if i.name in ("s01_flat_person", "r01_iso_date")]
    for item in picked:
        (data / f"{item.name}.json").write_text(item.path.read_text(encoding="utf-8"), encoding="utf-8")
    run = tmp_path / "run"
    run_bench(["glr", "outlines"], data, out=run, quick=True, progress=False)
    sizes = grammar_sizes(load_runs([run]))
    assert set(sizes.index) == {i.name for i in picked}
    assert all(sizes[i.name] == sum(len(a) for a in i.grammar().rules.values()) for i in picked)
    md = write_report([run], out=tmp_path / "plain").read_text(encoding="utf-8")
    assert "size.png" not in md and not (tmp_path / "plain" / "size.png").exists()
    md = write_report([run], out=tmp_path / "sized", sizes=True).read_text(encoding="utf-8")
    assert "![TTFM and memory against grammar size](size.png)" in md
    assert (tmp_path / "sized" / "size.png").is_file() and not (tmp_path / "sized" / "size.pdf").exists()
