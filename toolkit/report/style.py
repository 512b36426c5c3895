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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.font_manager
import matplotlib.text
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

__all__ = ["PALETTE", "LINESTYLES", "HATCHES", "RC", "PAPER_RC", "DPI", "LOOKS", "PAPER_LOOKS", "Look", "get_look",
           "to_markdown", "engine_styles", "short_vocab", "unique", "save_figure", "pdf_link", "new_figure",
           "figure_legend", "start_figure", "finish_figure", "overlapping_texts", "engine_label", "OURS", "tick_label"]


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
# different runs (or papers) compare at a glance; a strategy and the production engine
# it reimplements share a hue, ours drawn solid, the peer dashed (and hatched).
_ENGINE_COLOURS = {
    "llguidance": 0,  # blue
    "peer:llguidance": 0,
    "outlines": 1,  # vermillion
    "peer:outlines-core": 1,
    "xgrammar": 2,  # bluish green
    "peer:xgrammar": 2,
    "glr": 3,  # reddish purple
    "peer:glrmask": 3,
    "peer:llama.cpp": 4,  # orange
    "peer:lm-format-enforcer": 5,  # sky blue
    "naive": 6,  # black
}
#: masklab's own strategies: their labels say ``ours:``
OURS = ("naive", "outlines", "xgrammar", "llguidance", "glr")


def engine_label(engine: str, version: str | None = None) -> str:
    """How tables and figures name an engine: ``ours: llguidance`` for masklab's own
    strategies (their version is masklab's, read easily as the engine's), the package and
    its version for a production engine (``peer:llguidance`` -> ``llguidance 1.9.1``), the
    name and version for any other."""
    if engine in OURS:
        return f"ours: {engine}"
    name = engine.removeprefix("peer:")
    return f"{name} {version}" if version else name
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


def tick_label(v: float, _pos: Any = None) -> str:
    """A log axis's tick as a reader writes it: ``1``, ``10``, ``0.5``; ``10^6`` past a million."""
    if v <= 0:
        return ""
    if 1e-3 <= v < 1e6:
        return f"{v:g}"
    exp = int(round(math.log10(v)))
    return f"$10^{{{exp}}}$"


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


def _legend_columns(labels: Sequence[str], width_in: float, fontsize: float) -> int:
    """As many legend columns as the figure's width holds (a label's width estimated
    from its characters, a handle and padding beside it)."""
    widest = max(len(s) for s in labels) * 0.55 * fontsize / 72 + 0.55
    return max(1, min(len(labels), int(width_in // widest)))


LEGEND_ROWS = 3
"""Legend rows a figure holds at its own height; each row past them makes it taller by
the row's height, so a legend of many series does not squeeze the axes."""


def figure_legend(fig: Any, handles: list[Any], labels: list[str]) -> None:
    """The figure's legend below its axes, in as many columns as its width holds (the
    figure taller for rows past :data:`LEGEND_ROWS`)."""
    if not handles:
        return
    size = mpl.rcParams["legend.fontsize"]
    points = mpl.font_manager.FontProperties(size=size).get_size_in_points()
    ncols = _legend_columns(labels, fig.get_figwidth(), points)
    rows = -(-len(labels) // ncols)
    if rows > LEGEND_ROWS:
        fig.set_figheight(fig.get_figheight() + (rows - LEGEND_ROWS) * 1.45 * points / 72)
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols)


# --------------------------------------------------------------- looks: screen and paper

PAPER_RC: dict[str, Any] = {
    **RC,
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 8,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "legend.handlelength": 1.6,
    "legend.columnspacing": 1.0,
    "savefig.bbox": "standard",  # the page is the figure's size exactly: a column is 3.3 in
    "savefig.pad_inches": 0.0,
}
"""matplotlib settings of the paper looks: 8 pt text, thinner lines, exact figure sizes."""


@dataclass(frozen=True)
class Look:
    """How a figure is drawn: its matplotlib settings, its width in inches (None: the
    figure's own) and whether it carries titles (a paper's caption says it instead)."""

    name: str
    rc: Mapping[str, Any]
    width: float | None
    titles: bool
    aspect: float = 0.62  # height / width of one panel in a paper look

    @property
    def paper(self) -> bool:
        return self.width is not None


LOOKS: dict[str, Look] = {
    "screen": Look("screen", RC, None, True),
    "column": Look("column", PAPER_RC, 3.3, False, aspect=0.72),
    "page": Look("page", PAPER_RC, 6.9, False, aspect=0.42),
}
"""``screen`` (the report's figures), ``column`` (a single paper column, 3.3 in) and
``page`` (both columns, 6.9 in)."""
PAPER_LOOKS: tuple[str, ...] = ("column", "page")
"""The looks ``masklab report --style paper`` writes, each as ``STEM-LOOK.pdf`` and ``.png``."""


def get_look(look: str | Look) -> Look:
    """The :class:`Look` named ``look`` (a ValueError naming the valid ones otherwise)."""
    if isinstance(look, Look):
        return look
    if look not in LOOKS:
        raise ValueError(f"look must be one of {', '.join(LOOKS)}, not {look!r}")
    return LOOKS[look]


def start_figure(ax: Any, look: Look, screen: tuple[float, float], panels: int = 1) -> tuple[Any, list[Any]]:
    """The figure and axes a plot function draws on: ``ax`` (one Axes, or a sequence of
    ``panels``) and its figure when the caller gives them, else a new figure of the
    look's width (``screen``, width x height in inches, on screen) with ``panels`` axes
    side by side (stacked in a single column)."""
    if ax is not None:
        axes = list(ax) if isinstance(ax, Sequence | np.ndarray) else [ax]
        if len(axes) != panels:
            raise ValueError(f"this figure draws {panels} panel(s): give ax= {panels} Axes")
        return axes[0].figure, axes
    stacked = look.name == "column" and panels > 1
    if look.width is None:
        fig = new_figure(*screen)
    else:
        rows = panels if stacked else 1
        fig = new_figure(look.width, look.width * look.aspect * rows + 0.5)  # 0.5 in: the legend below
    grid = fig.subplots(panels if stacked else 1, 1 if stacked else panels, squeeze=False)
    return fig, list(grid.ravel())


def finish_figure(fig: Any, path: str | os.PathLike[str] | None, look: Look, *, pdf: bool = False) -> Any:
    """Save ``fig`` when ``path`` is given (a paper look: PDF and PNG always; the screen:
    PNG, and PDF with ``pdf``) and return it."""
    if path is not None:
        save_figure(fig, path, pdf=pdf or look.paper)
    return fig


def _drawn_texts(fig: Any) -> list[Any]:
    """The texts of ``fig`` a reader sees: visible and not empty, and of the tick labels
    only those whose tick lies inside its axis's view (matplotlib keeps the others, not drawn)."""
    ticks: dict[int, bool] = {}
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) * 1e-9
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                inside = lo - span <= tick.get_loc() <= hi + span if tick.get_loc() is not None else False
                for label in (tick.label1, tick.label2):
                    ticks[id(label)] = inside
    out = []
    for t in fig.findobj(mpl.text.Text):
        if not t.get_visible() or not t.get_text().strip() or t.get_alpha() == 0 or not ticks.get(id(t), True):
            continue
        out.append(t)
    return out


def overlapping_texts(fig: Any, *, tolerance: float = 1.0) -> list[tuple[str, str]]:
    """The pairs of drawn texts of ``fig`` whose boxes overlap by more than ``tolerance``
    pixels each way (at the figure's size): what a reader could not read.  Empty for a
    figure whose labels, ticks, legend and notes all stand apart."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for t in _drawn_texts(fig):
        box = t.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            boxes.append((t.get_text(), box))
    out = []
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > tolerance and h > tolerance:
                out.append((ta, tb))
    return out
