"""The report of a sweep folder (:mod:`toolkit.bench.sweep`): one row per engine and grid
cell, and the figure of TBM and TTFM against one axis.

Per cell, the figures are over the items **every engine of the sweep passed in that
cell** (like for like, as :func:`toolkit.report.bench.comparable` does for one run):
TBM percentiles over the masks of their valid instances, TTFM over the items.  Against
the ``vocab`` axis the vocabularies stand in the order of their sizes, each tick naming
its size (ids), so the figure shows how each strategy scales with the vocabulary;
against another axis, the cells in the spec's order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from toolkit.bench.records import AXES, read_records, repeat_of, sweep_cells
from toolkit.report.bench import ReportError
from toolkit.report.style import (
    PAPER_LOOKS,
    Look,
    engine_label,
    engine_styles,
    figure_legend,
    finish_figure,
    get_look,
    start_figure,
    tick_label,
    to_markdown,
)

__all__ = ["sweep_table", "plot_sweep", "write_sweep_report"]


def _tbm(rec: dict[str, Any]) -> list[float]:
    return [float(x) for x in rec.get("tbm_s") or [] if x is not None]


def _passed(recs: list[dict[str, Any]], engine: str) -> set[str]:
    """The items ``engine`` passed in every repeat."""
    statuses: dict[str, set[str]] = {}
    for r in recs:
        if r["engine"] == engine:
            statuses.setdefault(r["item"], set()).add(r["status"])
    return {item for item, seen in statuses.items() if seen == {"passing"}}


def _over_repeats(recs: list[dict[str, Any]], values: Any, p: float) -> float:
    """The median over the repeats of the ``p``-th percentile of ``values(records)`` in each
    repeat (``bench --repeat``; one repeat: its percentile); NaN without values."""
    per = []
    for r in sorted({repeat_of(x) for x in recs}):
        v = np.array(values([x for x in recs if repeat_of(x) == r]), dtype=float)
        if len(v):
            per.append(float(np.percentile(v, p)))
    return float(np.median(per)) if per else np.nan


def sweep_table(folder: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (cell, engine): the axes, ``vocab_size``, items passed by every
    engine in every repeat (``items``), this engine's passing items, TBM p50/p90/p99 (µs)
    and TTFM p50/p90 (ms) over the common items (with repeats: the median over them)."""
    cells = sweep_cells(folder)
    if not cells:
        raise ReportError(f"{str(folder)!r}: no cell of the sweep has run yet")
    spec = json.loads((Path(folder) / "sweep.json").read_text(encoding="utf-8"))["spec"]
    engines = spec["engines"]
    by_cell: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for rec in read_records(Path(folder) / "records.jsonl"):
        axes = rec.get("axes") or {}
        by_cell.setdefault(tuple(axes.get(a, "") for a in AXES), []).append(rec)
    rows = []
    for axes, meta in cells:
        recs = by_cell.get(tuple(axes[a] for a in AXES), [])
        passing = {e: _passed(recs, e) for e in engines}
        common = set.intersection(*passing.values()) if passing else set()
        for e in engines:
            mine = [r for r in recs if r["engine"] == e and r["item"] in common]
            row = {**axes, "engine": e, "vocab_size": meta["vocab"]["size"], "items": len(common),
                   "passing": len(passing[e]), "records": sum(r["engine"] == e for r in recs)}
            for p in (50, 90, 99):
                row[f"tbm_p{p}_us"] = _over_repeats(mine, lambda rs, p=p: [t * 1e6 for r in rs for t in _tbm(r)], p)
            for p in (50, 90):
                row[f"ttfm_p{p}_ms"] = _over_repeats(
                    mine, lambda rs: [r["ttfm_s"] * 1e3 for r in rs if r.get("ttfm_s") is not None], p)
            rows.append(row)
    return pd.DataFrame(rows)


def plot_sweep(table: pd.DataFrame, axis: str, path: str | os.PathLike[str] | None = None,
               hold: Sequence[str] = (), *, ax: Any = None, look: str | Look = "screen", pdf: bool = False) -> Any:
    """Per engine against ``axis`` (categories, side by side; vocabularies in the order of
    their sizes): (a) TBM and (b) TTFM, each a filled marker at p50 and a hollow one at
    p99 (TTFM: p90) joined by a bar, log y.  ``table`` must vary in ``axis`` only (the
    caller selects the rows; ``hold`` names what it held fixed, for the title).  Draws
    and saves like :func:`toolkit.report.bench.plot_tbm_cdf` (``ax``: two Axes)."""
    if axis not in AXES:
        raise ReportError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    engines = list(dict.fromkeys(table["engine"]))
    styles = engine_styles({e: e for e in engines})
    order = (table.drop_duplicates("vocab").sort_values("vocab_size", kind="stable")["vocab"].tolist()
             if axis == "vocab" else list(dict.fromkeys(table[axis])))
    ticks = ([f"{v}\n{n / 1e3:.1f}k ids" for v, n in
              table.drop_duplicates("vocab").set_index("vocab").loc[order, "vocab_size"].items()]
             if axis == "vocab" else [str(v) for v in order])
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, axs = start_figure(ax, lk, (9.0, 3.8), panels=2)
        handles, labels = [], []
        step = 0.7 / max(1, len(engines))
        for a, (low, high), unit in ((axs[0], ("tbm_p50_us", "tbm_p99_us"), "µs"),
                                     (axs[1], ("ttfm_p50_ms", "ttfm_p90_ms"), "ms")):
            for k, e in enumerate(engines):
                rows = table[table["engine"] == e].set_index(axis).reindex(order)
                x = np.arange(len(order)) - 0.35 + step * (k + 0.5)
                st = styles[e]
                p50, top = rows[low].to_numpy(dtype=float), rows[high].to_numpy(dtype=float)
                a.vlines(x, p50, top, color=st["color"], linestyle=st["linestyle"], linewidth=1.0)
                a.scatter(x, p50, color=st["color"], marker=st["marker"], zorder=3)
                a.scatter(x, top, facecolors="white", edgecolors=st["color"], marker=st["marker"], zorder=3)
                if a is axs[0]:  # the legend shows the line style too: a strategy and its peer share a hue
                    handles.append(Line2D([], [], color=st["color"], linestyle=st["linestyle"], marker=st["marker"]))
                    labels.append(engine_label(e))
            a.set_xticks(np.arange(len(order)), ticks)
            a.set_xlim(-0.6, len(order) - 0.4)
            a.set_yscale("log")
            a.yaxis.set_major_formatter(FuncFormatter(tick_label))
            a.yaxis.set_minor_formatter(NullFormatter())
            a.set_ylabel(unit + " (log scale)")
            if lk.titles:
                a.set_xlabel("vocabulary, by size" if axis == "vocab" else axis)
            a.grid(False, axis="x")
        _sweep_titles(axs, lk)
        if lk.titles:
            suffix = f" ({', '.join(hold)})" if hold else ""
            fig.suptitle(f"Each engine against {axis}{suffix}: filled p50, hollow p99 (TTFM: p90)")
        figure_legend(fig, handles, labels)
        return finish_figure(fig, path, lk, pdf=pdf)


def _sweep_titles(axs: Sequence[Any], look: Look) -> None:
    for a, letter, title in ((axs[0], "(a)", "time between masks"), (axs[1], "(b)", "time to first mask")):
        a.set_title(f"{letter} {title}" if look.titles else letter, loc="center" if look.titles else "left")


def write_sweep_report(folder: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                       axis: str = "vocab", *, pdf: bool = False, style: str = "screen") -> Path:
    """``sweep.csv``, one figure per value of the axes held fixed (``sweep_AXIS*.png``;
    with ``pdf`` a ``.pdf`` of each too; ``style="paper"``: ``...-column`` and ``...-page``
    PDFs too) and ``report.md`` into ``out`` (default: the sweep folder); returns the
    report's path."""
    table = sweep_table(folder)
    out_dir = Path(out) if out is not None else Path(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / "sweep.csv", index=False)
    others = [a for a in AXES if a != axis]
    spec = json.loads((Path(folder) / "sweep.json").read_text(encoding="utf-8"))
    lines = ["# masklab sweep report", "", f"Sweep folder `{folder}`, {len(table)} rows (engine x cell).", ""]
    if spec.get("command"):
        lines += [f"- command: `{spec['command']}`", ""]
    for key, group in table.groupby(others, sort=False):
        held = [f"{a}={v}" for a, v in zip(others, key if isinstance(key, tuple) else (key,), strict=True)]
        stem = "sweep_" + axis + "".join(f"_{v}" for v in (key if isinstance(key, tuple) else (key,)))
        plot_sweep(group, axis, out_dir / stem, held, pdf=pdf)
        for look in PAPER_LOOKS if style == "paper" else ():
            plot_sweep(group, axis, out_dir / f"{stem}-{look}", held, look=look)
        png, pdf_path = out_dir / f"{stem}.png", (out_dir / f"{stem}.pdf" if pdf else None)
        cols = [axis, "vocab_size", "engine", "items", "passing", "tbm_p50_us", "tbm_p99_us", "ttfm_p50_ms",
                "ttfm_p90_ms"]
        cols = list(dict.fromkeys(cols))
        lines += [f"## {', '.join(held)}", "", f"![{stem}]({png.name})", "",
                  *([f"[PDF]({pdf_path.name})", ""] if pdf_path else []),
                  to_markdown(group[cols].round(3)), "",
                  "*items*: passed by every engine in the cell (the figures are over them); *passing*: this "
                  "engine's passing items.", ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
