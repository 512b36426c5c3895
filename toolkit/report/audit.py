"""The figure of a soundness audit (``masklab audit``, :mod:`toolkit.bench.audit`).

:func:`plot_audit` draws, from the audit's records: (a) per engine, what became of its
items (sound, loosened, refused by its compiler, failed: a crash or a timeout; a
schema its own meta-schema rejects is no engine's and is left out), as shares of the
items; (b) per engine and dataset, the loosened items out of those the engine
compiled, as a table of cells coloured by the share (``k/n``; a blank cell: nothing
compiled)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd

from toolkit.bench.audit_tables import dataset_table
from toolkit.report.style import (
    Look,
    engine_label,
    figure_legend,
    finish_figure,
    get_look,
    new_figure,
)

__all__ = ["plot_audit", "OUTCOMES"]

#: (label, statuses, colour) of panel (a), left to right
OUTCOMES = (
    ("sound", ("sound",), "#009E73"),
    ("loosened", ("loosened",), "#D55E00"),
    ("refused", ("compile_error",), "#BBBBBB"),
    ("failed", ("crash", "timeout"), "#000000"),
)


def plot_audit(records: pd.DataFrame | Sequence[dict[str, Any]], path: str | os.PathLike[str] | None = None,
               title: str = "", *, ax: Any = None, look: str | Look = "screen", pdf: bool = False) -> Any:
    """The audit figure (module doc), returned, and saved at ``path`` when given (PNG; a
    PDF too when ``pdf`` is true or ``look`` is a paper one: ``"column"``, ``"page"``,
    without titles).  ``ax``: two Axes of the caller's figure to draw (a) and (b) on."""
    df = pd.DataFrame(records) if not isinstance(records, pd.DataFrame) else records
    df = df[df["status"] != "bad_schema"]
    engines = list(dict.fromkeys(df["engine"]))
    by = dataset_table(df)
    datasets = sorted({d for _, d in by.index}) if len(by) else []
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        rows = (len(engines) + len(datasets)) * (1.0 if lk.titles else 0.8)
        if ax is not None:
            ax_a, ax_b = ax
            fig = ax_a.figure
        else:
            width = lk.width or max(7.0, 3.2 + 0.9 * len(engines))
            fig = new_figure(width, 2.2 + 0.42 * rows if lk.titles else 1.6 + 0.3 * rows)
            ax_a, ax_b = fig.subplots(2, 1, height_ratios=[max(len(engines), 1) + 1.5, max(len(datasets), 1) + 1])
        y = np.arange(len(engines))
        left = np.zeros(len(engines))
        handles = []
        for label, statuses, colour in OUTCOMES:
            share = np.array([100.0 * df[(df["engine"] == e)]["status"].isin(statuses).mean() if len(df) else 0.0
                              for e in engines])
            h = ax_a.barh(y, share, left=left, color=colour, edgecolor="white", linewidth=0.5, label=label)
            handles.append(h)
            for k, (x0, w) in enumerate(zip(left, share, strict=True)):
                n = int(df[(df["engine"] == engines[k])]["status"].isin(statuses).sum())
                if w >= 6.0:
                    ax_a.text(x0 + w / 2, k, str(n), ha="center", va="center", fontsize="small",
                              color="white" if colour in ("#000000", "#D55E00", "#009E73") else "black")
            left += share
        ax_a.set_yticks(y, [f"{engine_label(e)} (n={int((df['engine'] == e).sum())})" for e in engines])
        ax_a.invert_yaxis()
        ax_a.set_xlim(0, 100)
        ax_a.set_xlabel("items (%)")
        ax_a.set_title("(a) each engine's items" if lk.titles else "(a)", loc="center" if lk.titles else "left")
        ax_a.grid(False, axis="y")

        grid = np.full((len(datasets), len(engines)), np.nan)
        for i, d in enumerate(datasets):
            for j, e in enumerate(engines):
                if (e, d) in by.index and by.loc[(e, d)]["compiled"]:
                    grid[i, j] = by.loc[(e, d)]["loosened %"]
        top = max(10.0, np.nanmax(grid, initial=0))
        for i, d in enumerate(datasets):
            for j, e in enumerate(engines):
                if (e, d) in by.index:
                    row = by.loc[(e, d)]
                    label = f"{int(row['loosened'])}/{int(row['compiled'])}" if row["compiled"] else ""
                    dark = row["compiled"] and row["loosened %"] > 0.55 * top  # the colour map's dark half
                    ax_b.text(j, i, label, ha="center", va="center", fontsize="small",
                              color="white" if dark else "black")
        cmap = mpl.colormaps["Reds"].with_extremes(bad="#FFFFFF")
        image = ax_b.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=top, aspect="auto")
        ax_b.set_xticks(np.arange(len(engines)), [engine_label(e) for e in engines], rotation=20 if lk.titles else 90,
                        ha="right" if lk.titles else "center")
        ax_b.set_yticks(np.arange(len(datasets)), datasets)
        ax_b.grid(False)
        ax_b.set_title("(b) loosened / compiled items, by dataset" if lk.titles else "(b)",
                       loc="center" if lk.titles else "left")
        fig.colorbar(image, ax=ax_b, label="loosened (%)", shrink=0.9)
        if title and lk.titles:
            fig.suptitle(title)
        figure_legend(fig, handles, [h.get_label() for h in handles])
        return finish_figure(fig, path, lk, pdf=pdf)
