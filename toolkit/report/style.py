"""What every masklab table and figure shares: the colour-blind-safe palette, line
styles and hatches, one colour and marker per engine in every figure of every report,
matplotlib settings fit for a paper (applied inside :func:`matplotlib.rc_context`),
figures on the Agg canvas saved as PNG (and PDF when asked: ``pdf=True``), and Markdown
tables."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

__all__ = ["PALETTE", "LINESTYLES", "HATCHES", "RC", "DPI", "to_markdown", "engine_styles", "short_vocab",
           "unique", "save_figure", "pdf_link", "new_figure", "figure_legend"]


# Okabe & Ito (2008) colour-blind-safe palette; yellow last (weak on white).
PALETTE = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow
)
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
HATCHES = ("", "//", "\\\\", "xx", "..", "++", "--", "oo")

RC: dict[str, Any] = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 12,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.8,
    "legend.frameon": False,
    "pdf.fonttype": 42,  # TrueType in the PDF: editable text, accepted by publishers
    "ps.fonttype": 42,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.05,
}
DPI = 200


def _cell(value: Any, fmt: str, intfmt: str, na: str) -> str:
    if value is None or (isinstance(value, float | np.floating) and math.isnan(value)):
        return na
    if value is pd.NA or value is pd.NaT:
        return na
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return format(int(value), intfmt)
    if isinstance(value, float | np.floating):
        return format(float(value), fmt)
    return str(value).replace("\r", " ").replace("\n", " ").replace("|", "\\|")


def to_markdown(
    df: pd.DataFrame,
    floatfmt: str | Mapping[str, str] = ".2f",
    *,
    intfmt: str = "",
    index: bool | None = None,
    na: str = "–",
) -> str:
    """``df`` as a GitHub-flavoured markdown table (no trailing newline).

    ``floatfmt`` is a :func:`format` spec for float cells, or a mapping column ->
    spec (other float columns use ``"g"``); ``intfmt`` the spec for integers (``","``
    for thousands separators).  The index is written as leading column(s) when
    ``index`` is true, or, by default, when it is named or not a RangeIndex.  Missing
    values print as ``na``; ``|`` in text is escaped and newlines become spaces.
    Numeric columns are right-aligned, others left-aligned.
    """
    if index is None:
        index = not isinstance(df.index, pd.RangeIndex) or any(
            n is not None for n in df.index.names
        )
    frame = df.reset_index() if index else df.reset_index(drop=True)
    if index:
        names = [n if n is not None else "" for n in df.index.names]
        frame.columns = names + list(frame.columns[len(names) :])
    headers = [
        " ".join(str(p) for p in c if str(p)) if isinstance(c, tuple) else str(c)
        for c in frame.columns
    ]
    cols: list[list[str]] = []
    numeric: list[bool] = []
    for j in range(len(frame.columns)):
        fmt = floatfmt if isinstance(floatfmt, str) else floatfmt.get(headers[j], "g")
        values = frame.iloc[:, j].tolist()
        cols.append([_cell(v, fmt, intfmt, na) for v in values])
        present = [v for v in values if not (v is None or (isinstance(v, float) and math.isnan(v)))]
        numeric.append(
            bool(present)
            and all(
                isinstance(v, int | float | np.integer | np.floating)
                and not isinstance(v, bool | np.bool_)
                for v in present
            )
        )
    headers = [h.replace("|", "\\|") for h in headers]
    widths = [
        max([3, len(h), *(len(c) for c in col)]) for h, col in zip(headers, cols, strict=True)
    ]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "| "
        + " | ".join(
            "-" * (w - 1) + ":" if num else ":" + "-" * (w - 1)
            for w, num in zip(widths, numeric, strict=True)
        )
        + " |"
    )
    out = [line(headers), rule]
    out += [line([col[i] for col in cols]) for i in range(len(frame))]
    return "\n".join(out)


# ---------------------------------------------------------------------------- figures


# Each known engine keeps its colour in every figure of every report, so figures of
# different runs (or papers) compare at a glance; a strategy and its production
# engine share a hue family (blue, red-orange), ours drawn solid, the peers dashed.
_ENGINE_COLOURS = {
    "llguidance": 0,  # blue
    "peer:llguidance": 5,  # sky blue
    "outlines": 1,  # vermillion
    "peer:outlines-core": 4,  # orange
    "peer:xgrammar": 3,  # reddish purple
    "xgrammar": 2,  # bluish green
    "naive": 6,  # black
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def engine_styles(engines: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Colour, line style, hatch and marker per engine label, ``engines`` mapping each
    label to its engine name.  A known engine has the same colour in every figure
    (:data:`_ENGINE_COLOURS`); other engines take the colours left, in order.  Peers
    are dashed and hatched; a second label of the same engine (another version, other
    options) takes the next line style and hatch."""
    taken = {_ENGINE_COLOURS[e] for e in engines.values() if e in _ENGINE_COLOURS}
    free = [i for i in range(len(PALETTE)) if i not in taken] or list(range(len(PALETTE)))
    unknown = list(dict.fromkeys(e for e in engines.values() if e not in _ENGINE_COLOURS))
    seen: dict[str, int] = {}
    out = {}
    for label, engine in engines.items():
        if engine in _ENGINE_COLOURS:
            slot, cycle = _ENGINE_COLOURS[engine], 0
        else:  # past the free colours, the line style tells them apart
            n = unknown.index(engine)
            slot, cycle = free[n % len(free)], n // len(free)
        seen[engine] = seen.get(engine, -1) + 1  # earlier labels of this engine
        style = seen[engine] + cycle + (1 if engine.startswith("peer:") else 0)
        out[label] = {
            "color": PALETTE[slot],
            "linestyle": LINESTYLES[style % len(LINESTYLES)],
            "hatch": HATCHES[style % len(HATCHES)],
            "marker": _MARKERS[slot],
        }
    return out


def unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v not in (None, "")))


def short_vocab(spec: str) -> str:
    """A vocabulary spec as a figure's subtitle gives it, without the folders:
    ``llama3:/a/b/llama-3/tokenizer.model`` -> ``llama3:llama-3``."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        return spec
    path = Path(rest)
    return f"{kind}:{path.parent.name if path.name.startswith('tokenizer') else path.name}"


PNG_COLORS = 256
"""A figure's PNG is a palette image of at most this many colours: a plot's flat colours
and their anti-aliased edges fit, at 2-3x less than the RGBA image (the figures of
``results/`` are committed)."""


def write_png(image: Any, path: str | os.PathLike[str]) -> Path:
    """Write a PIL ``image`` as :func:`save_figure` writes figures: a palette PNG of
    :data:`PNG_COLORS` colours, no dithering (flat colours stay flat), compressed."""
    rgb = image.convert("RGB")
    rgb.quantize(colors=PNG_COLORS, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE).save(
        path, format="PNG", optimize=True)
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike[str], *, pdf: bool = False) -> tuple[Path, Path | None]:
    """Save ``fig`` as ``<stem>.png`` (:data:`DPI` dpi, :func:`write_png`) and, when ``pdf`` is true, as
    ``<stem>.pdf`` too (vector, for a paper); returns ``(png, pdf)``, ``pdf`` None when
    not written.  A ``.png``/``.pdf`` suffix of ``path`` is dropped."""
    base = Path(path)
    if base.suffix.lower() in (".png", ".pdf"):
        base = base.with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    png = base.with_suffix(".png")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    buf.seek(0)
    write_png(Image.open(buf), png)
    if not pdf:
        return png, None
    pdf_path = base.with_suffix(".pdf")
    fig.savefig(pdf_path, metadata={"CreationDate": None})
    return png, pdf_path


def pdf_link(stem: str, pdf: bool) -> str:
    """The `` ([PDF](stem.pdf))`` a report puts after a figure's caption when the PDF
    was written (``pdf``), else ""."""
    return f" ([PDF]({stem}.pdf))" if pdf else ""


def new_figure(width: float, height: float) -> Any:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_legend(fig: Any, handles: list[Any], labels: list[str]) -> None:
    if not handles:
        return
    ncols = 1 if max(len(s) for s in labels) > 40 else min(len(labels), 2)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols)
