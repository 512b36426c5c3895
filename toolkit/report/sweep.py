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

from toolkit.bench.records import AXES, read_records, sweep_cells
from toolkit.report.bench import ReportError
from toolkit.report.style import (
    RC,
    engine_styles,
    figure_legend,
    new_figure,
    save_figure,
    to_markdown,
)

__all__ = ["sweep_table", "plot_sweep", "write_sweep_report"]


def _tbm(rec: dict[str, Any]) -> list[float]:
    return [float(x) for x in rec.get("tbm_s") or [] if x is not None]


def sweep_table(folder: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per (cell, engine): the axes, ``vocab_size``, items passed by every
    engine (``items``), this engine's passing items, TBM p50/p90/p99 (µs) and TTFM
    p50/p90 (ms) over the common items."""
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
        passing = {e: {r["item"] for r in recs if r["engine"] == e and r["status"] == "passing"} for e in engines}
        common = set.intersection(*passing.values()) if passing else set()
        for e in engines:
            mine = [r for r in recs if r["engine"] == e and r["item"] in common]
            tbm = np.array([t for r in mine for t in _tbm(r)], dtype=float) * 1e6
            ttfm = np.array([r["ttfm_s"] for r in mine if r.get("ttfm_s") is not None], dtype=float) * 1e3
            row = {**axes, "engine": e, "vocab_size": meta["vocab"]["size"], "items": len(common),
                   "passing": len(passing[e]), "records": sum(r["engine"] == e for r in recs)}
            for p in (50, 90, 99):
                row[f"tbm_p{p}_us"] = float(np.percentile(tbm, p)) if len(tbm) else np.nan
            for p in (50, 90):
                row[f"ttfm_p{p}_ms"] = float(np.percentile(ttfm, p)) if len(ttfm) else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def plot_sweep(table: pd.DataFrame, axis: str, path: str | os.PathLike[str],
               hold: Sequence[str] = (), *, pdf: bool = False) -> tuple[Path, Path | None]:
    """TBM p50 and TTFM p50 per engine against ``axis`` (two panels, log y); a
    figure per value of the other axes is not drawn: ``table`` must vary in ``axis``
    only (the caller selects the rows, ``hold`` names what it held fixed, for the title).
    Writes the PNG, and the PDF when ``pdf`` is true; returns ``(png, pdf)``."""
    if axis not in AXES:
        raise ReportError(f"axis must be one of {', '.join(AXES)}, got {axis!r}")
    engines = list(dict.fromkeys(table["engine"]))
    styles = engine_styles({e: e for e in engines})
    with mpl.rc_context(RC):
        fig = new_figure(9.0, 3.8)
        axs = fig.subplots(1, 2)
        handles, labels = [], []
        for ax, col, title, unit in ((axs[0], "tbm_p50_us", "Time between masks, p50", "µs"),
                                     (axs[1], "ttfm_p50_ms", "Time to first mask, p50", "ms")):
            for e in engines:
                rows = table[table["engine"] == e]
                if axis == "vocab":  # in the order of their sizes, which the ticks give
                    rows = rows.sort_values("vocab_size", kind="stable")
                x = np.arange(len(rows))
                st = styles[e]
                (line,) = ax.plot(x, rows[col].to_numpy(dtype=float), color=st["color"], linestyle=st["linestyle"],
                                  marker=st["marker"])
                if ax is axs[0]:
                    handles.append(line)
                    labels.append(e)
                ticks = ([f"{v}\n{n / 1e3:.1f}k ids" for v, n in zip(rows["vocab"], rows["vocab_size"], strict=True)]
                         if axis == "vocab" else rows[axis].tolist())
                ax.set_xticks(x, ticks)
            ax.set_yscale("log")
            ax.set_title(title)
            ax.set_ylabel(unit + " (log scale)")
            ax.set_xlabel("vocabulary, by size" if axis == "vocab" else axis)
            ax.margins(x=0.08)
        suffix = f" ({', '.join(hold)})" if hold else ""
        fig.suptitle(f"Each engine against {axis}{suffix}")
        figure_legend(fig, handles, labels)
        return save_figure(fig, path, pdf=pdf)


def write_sweep_report(folder: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                       axis: str = "vocab", *, pdf: bool = False) -> Path:
    """``sweep.csv``, one figure per value of the axes held fixed (``sweep_AXIS*.png``;
    with ``pdf`` a ``.pdf`` of each too) and ``report.md`` into ``out`` (default: the
    sweep folder); returns the report's path."""
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
        png, pdf_path = plot_sweep(group, axis, out_dir / stem, held, pdf=pdf)
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
