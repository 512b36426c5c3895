"""Every figure masklab draws, in each look (the screen's, a paper column of 3.3 in, a
page of 6.9 in): the size a paper needs, no title in a paper look, no two texts on top
of each other, drawn on a caller's Axes, and engines named and coloured alike."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib as mpl
import pandas as pd
import pytest

from toolkit.bench.run import run_bench
from toolkit.report.audit import plot_audit
from toolkit.report.bench import (
    load_runs,
    plot_density,
    plot_draft,
    plot_size,
    plot_tbm_cdf,
    plot_ttfm_cdf,
    plot_walks_cdf,
)
from toolkit.report.style import LOOKS, engine_label, engine_styles, new_figure, overlapping_texts
from toolkit.report.sweep import plot_sweep
from toolkit.report.write import write_report

pytest.importorskip("llguidance", reason="the figures' run includes peer:llguidance (install .[peers])")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three engines (two of ours, one peer) on four embedded items, with later walks and
    draft masks: data for every bench figure."""
    out = tmp_path_factory.mktemp("figures") / "run"
    run_bench(["llguidance", "xgrammar", "peer:llguidance"], limit=4, seed=3, out=out, quick=True, walks=2,
              drafts=(1, 4), progress=False)
    return out


def _sweep_table() -> pd.DataFrame:
    rows = []
    for e in ("llguidance", "peer:llguidance", "xgrammar"):
        for k, (v, n) in enumerate((("tekken", 131072), ("llama3", 128256), ("qwen2", 151643))):
            rows.append({"engine": e, "vocab": v, "vocab_size": n, "tbm_p50_us": 3.0 + k, "tbm_p99_us": 40.0 + k,
                         "ttfm_p50_ms": 2.0 + k, "ttfm_p90_ms": 9.0 + k})
    return pd.DataFrame(rows)


def _audit_records() -> list[dict[str, Any]]:
    out = []
    for e in ("llguidance", "peer:xgrammar", "peer:llama.cpp"):
        for k, d in enumerate(("Github_easy", "Github_hard", "JsonSchemaStore", "Kubernetes")):
            for j in range(5):
                out.append({"engine": e, "item": f"{d}---o{k}{j}", "status": ("sound", "loosened", "compile_error",
                                                                                "sound", "timeout")[(j + k) % 5]})
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """Two engines decoding two items at batch 1 and 2 on the simulated device, twice:
    the end-to-end figures' runs."""
    pytest.importorskip("transformers", reason="masklab generate needs the [model] extra")
    from toolkit.cli import main
    from toolkit.report.e2e import load_generate_runs

    out = tmp_path_factory.mktemp("figures") / "gen"
    assert main(["generate", "--engine", "outlines", "llguidance", "--model", "sim:1:5", "--max-tokens", "6",
                 "--limit", "2", "--batch", "1", "2", "--repeat", "2", "--unconstrained-baseline", "--quiet",
                 "--schedule", "static",  # one setup: the looks are tested, not the schedules
                 "--no-compare-kernels", "--out", str(out), "-o", "outlines.whitespace=compact",
                 "-o", "llguidance.whitespace=compact"]) == 0
    return load_generate_runs([out])[0]


def _figures(runs: Any) -> dict[str, Callable[..., Any]]:
    sizes = pd.Series({item: 10 ** (1 + k) for k, item in enumerate(sorted(runs.records["item"].unique()))})
    return {
        "tbm_cdf": lambda **kw: plot_tbm_cdf(runs, **kw),
        "ttfm_cdf": lambda **kw: plot_ttfm_cdf(runs, **kw),
        "density": lambda **kw: plot_density(runs, **kw),
        "walks_cdf": lambda **kw: plot_walks_cdf(runs, **kw),
        "draft": lambda **kw: plot_draft(runs, **kw),
        "size": lambda **kw: plot_size(runs, sizes=sizes, **kw),
        "sweep": lambda **kw: plot_sweep(_sweep_table(), "vocab", **kw),
        "audit": lambda **kw: plot_audit(_audit_records(), **kw),
    }


FIGURES = ["tbm_cdf", "ttfm_cdf", "density", "walks_cdf", "draft", "size", "sweep", "audit", "e2e_overhead",
           "e2e_steps"]
_PANELS = {"tbm_cdf": 1, "ttfm_cdf": 1, "e2e_steps": 1}


def _pdf_width_pt(path: Path) -> float:
    box = re.search(rb"/MediaBox\s*\[\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*\]", path.read_bytes())
    assert box, f"{path}: no MediaBox"
    return float(box.group(3)) - float(box.group(1))


def _draw(name: str, request: pytest.FixtureRequest, **kw: Any) -> Any:
    if name.startswith("e2e_"):
        from toolkit.report.e2e import plot_overhead, plot_step_parts

        runs = request.getfixturevalue("generated")
        return (plot_overhead if name == "e2e_overhead" else plot_step_parts)(runs, **kw)
    return _figures(load_runs(request.getfixturevalue("run")))[name](**kw)


@pytest.mark.parametrize("look", list(LOOKS))
@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_in_every_look(request: pytest.FixtureRequest, tmp_path: Path, name: str, look: str) -> None:
    lk = LOOKS[look]
    fig = _draw(name, request, look=look, path=tmp_path / name)
    overlaps = overlapping_texts(fig)
    assert not overlaps, f"{name} ({look}): texts on top of each other: {overlaps[:5]}"
    titles = [a.get_title(loc) for a in fig.axes for loc in ("center", "left", "right") if a.get_title(loc)]
    if lk.paper:
        assert fig.get_figwidth() == pytest.approx(lk.width)
        assert fig.get_suptitle() == "" and all(re.fullmatch(r"\([a-z]\)", t) for t in titles), titles
        assert _pdf_width_pt(tmp_path / f"{name}.pdf") == pytest.approx(lk.width * 72, abs=0.5)
        pdf = (tmp_path / f"{name}.pdf").read_bytes()
        assert b"/FontFile2" in pdf, "fonts embedded (TrueType, pdf.fonttype 42)"
        sizes = {t.get_fontsize() for t in fig.findobj(mpl.text.Text) if t.get_text().strip()}
        assert sizes and max(sizes) <= 9 and min(sizes) >= 6, sizes
    assert (tmp_path / f"{name}.png").stat().st_size > 0


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_draws_on_the_callers_axes(request: pytest.FixtureRequest, name: str) -> None:
    panels = _PANELS.get(name, 2)
    fig = new_figure(8, 3)
    axes = fig.subplots(1, panels)
    got = _draw(name, request, ax=axes)
    assert got is fig and all(a.has_data() or a.images or a.patches for a in fig.axes[:panels])


def test_report_style_paper_writes_both_widths(run: Path, tmp_path: Path) -> None:
    md = write_report([run], out=tmp_path / "r", style="paper", boot=0).read_text(encoding="utf-8")
    for stem in ("tbm_cdf", "ttfm_cdf", "density", "walks_cdf", "draft"):
        for look in ("column", "page"):
            assert _pdf_width_pt(tmp_path / "r" / f"{stem}-{look}.pdf") == pytest.approx(LOOKS[look].width * 72,
                                                                                       abs=0.5)
        assert f"[column PDF]({stem}-column.pdf)" in md
    with pytest.raises(ValueError, match="style must be one of screen, paper"):
        write_report([run], out=tmp_path / "bad", style="poster")


def test_engines_are_named_and_coloured_as_a_reader_expects() -> None:
    assert engine_label("llguidance", "0.1.0") == "ours: llguidance"
    assert engine_label("peer:llguidance", "1.9.1") == "llguidance 1.9.1"
    assert engine_label("peer:outlines-core", None) == "outlines-core"
    assert engine_label("pkg.mod:Factory", "2.0") == "pkg.mod:Factory 2.0"
    for ours, peer in (("llguidance", "peer:llguidance"), ("xgrammar", "peer:xgrammar"),
                       ("outlines", "peer:outlines-core"), ("glr", "peer:glrmask")):
        st = engine_styles({"a": ours, "b": peer, "c": "naive"})
        assert st["a"]["color"] == st["b"]["color"] != st["c"]["color"], (ours, peer)
        assert (st["a"]["linestyle"], st["b"]["linestyle"]) == ("-", "--")
    everything = engine_styles({e: e for e in ("llguidance", "outlines", "xgrammar", "glr", "peer:llama.cpp",
                                               "peer:lm-format-enforcer", "naive")})
    assert len({s["color"] for s in everything.values()}) == 7  # the pairs' hues, and one each for the rest
