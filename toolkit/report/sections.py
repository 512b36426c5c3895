"""The sections of ``report.md``, in order (:data:`SECTIONS`).

Each section is a function of the report's :class:`Context` that writes its own files
(tables as CSV, figures as PNG and, with ``pdf``, PDF) into ``ctx.out`` and returns its
Markdown lines (none when it has nothing to say).  A new table or figure is one function
here, drawing with a plot function of its own module, and one entry in
:data:`SECTIONS`; :func:`toolkit.report.write.write_report` runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.bench.records import load_records
from toolkit.data.provenance import differences
from toolkit.report.bench import (
    Runs,
    comparability_warnings,
    comparable,
    data_text,
    density_table,
    difference_causes,
    draft_table,
    engine_table,
    option_text,
    plot_density,
    plot_draft,
    plot_size,
    plot_tbm_cdf,
    plot_ttfm_cdf,
    plot_walks_cdf,
    vocab_text,
    walks_table,
    work_table,
)
from toolkit.report.direct import direct_markdown, direct_table
from toolkit.report.stats import DEFAULT_BOOT, with_intervals
from toolkit.report.style import PAPER_LOOKS, pdf_link, to_markdown
from toolkit.report.tidy import write_tidy

__all__ = ["Context", "SECTIONS", "Section", "context", "provenance_differences"]


@dataclass
class Context:
    """What the sections of one report share: the runs (``everything``: every record;
    ``runs``: the compared items), the engine tables, where to write, the options."""

    everything: Runs
    runs: Runs
    out: Path
    bench: list[Path]
    pdf: bool = False
    sizes: bool = False
    tidy: bool = False
    style: str = "screen"  # "paper": every figure also in a paper's column and page widths
    explain_budget: float = 0.0  # seconds to re-run differing pairs and name why they differ
    engines: pd.DataFrame = field(default_factory=pd.DataFrame)  # timings over the compared items
    outcomes: pd.DataFrame = field(default_factory=pd.DataFrame)  # statuses over every record
    walks: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def n_walks(self) -> int:
        return max((int(m.get("walks") or 1) for m in self.runs.meta), default=1)

    def draw(self, plot: Callable[..., Any], stem: str, *args: Any) -> None:
        """``plot(*args)`` saved as ``stem.png`` (and PDF with ``pdf``), and with the paper
        style also as ``stem-column`` and ``stem-page`` (PDF and PNG, paper looks)."""
        plot(*args, self.out / stem, pdf=self.pdf)
        if self.style == "paper":
            for look in PAPER_LOOKS:
                plot(*args, self.out / f"{stem}-{look}", look=look)

    def figure(self, stem: str, caption: str, alt: str | None = None) -> list[str]:
        """The Markdown of a figure written as ``stem.png`` (and its PDF and paper links)."""
        paper = (" Paper: " + ", ".join(f"[{look} PDF]({stem}-{look}.pdf)" for look in PAPER_LOOKS) + "."
                 if self.style == "paper" else "")
        return [f"![{alt or caption}]({stem}.png)", "", caption + pdf_link(stem, self.pdf) + paper, ""]


Section = Callable[[Context], list[str]]


def context(everything: Runs, out: Path, bench: list[Path], *, all_items: bool = False, sizes: bool = False,
            pdf: bool = False, boot: int = DEFAULT_BOOT, tidy: bool = False, style: str = "screen",
            explain_budget: float = 0.0) -> Context:
    """The context of a report over the bench runs ``everything`` (``boot``: bootstrap draws of
    the timing tables' intervals, 0 for none; ``explain_budget``: seconds to name why
    engines' masks differ, :func:`~toolkit.report.bench.difference_causes`)."""
    runs = comparable(everything, all_items)
    return Context(everything, runs, out, bench, pdf=pdf, sizes=sizes, tidy=tidy, style=style,
                   explain_budget=explain_budget,
                   engines=engine_table(runs, boot=boot),
                   outcomes=engine_table(everything, boot=0), walks=walks_table(runs))


def _fmt_meta_value(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _run_section(i: int, meta: dict[str, Any]) -> list[str]:
    lines = [f"### Run {i + 1}: `{meta.get('dir')}`", ""]
    if meta.get("meta_error"):
        lines.append(f"- **{meta['meta_error']}**")
    if meta.get("command"):
        lines.append(f"- command: `{meta['command']}`")
    if meta.get("started") or meta.get("finished"):
        lines.append(
            f"- started {_fmt_meta_value(meta.get('started'))}, "
            f"finished {_fmt_meta_value(meta.get('finished'))}"
        )
    v = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}
    if v:
        size = f"{int(v['size']):,} ids" if v.get("size") else "size unknown"
        text = f", {int(v['text_tokens']):,} text tokens" if v.get("text_tokens") else ""
        lines.append(f"- vocabulary: {v.get('spec', '?')} ({size}{text})")
    if "data" in meta:
        lines.append(f"- data: `{meta.get('data')}`")
    settings = [
        text.format(_fmt_meta_value(meta[k]))
        for k, text in (
            ("masklab_version", "masklab {}"),
            ("timeout_s", "timeout {} s"),
            ("jobs", "jobs {}"),
            ("seed", "seed {}"),
            ("quick", "quick {}"),
            ("walks", "walks {}"),
        )
        if k in meta
    ]
    if settings:
        lines.append("- " + ", ".join(settings))
    m = meta.get("machine") if isinstance(meta.get("machine"), dict) else {}
    if m:
        parts = [str(m[k]) for k in ("platform", "processor") if m.get(k)]
        if m.get("cpu_count"):
            parts.append(f"{m['cpu_count']} CPUs")
        if m.get("memory_gb"):
            parts.append(f"{m['memory_gb']} GB RAM")
        if m.get("python"):
            parts.append(f"Python {m['python']}")
        parts.append(f"GPU {m['gpu']}" if m.get("gpu") else "no GPU")
        lines.append("- machine: " + ", ".join(parts))
    lines += _provenance_lines(meta)
    engines = meta.get("engines") if isinstance(meta.get("engines"), dict) else {}
    labels = meta.get("labels", {})
    if labels:
        lines.append("- engines:")
        for name, label in labels.items():
            info = engines.get(name) if isinstance(engines.get(name), dict) else {}
            opts = info.get("options") or {}
            opt_text = (
                ", ".join(f"{k}={option_text(v)}" for k, v in opts.items())
                if opts
                else "default options"
            )
            version = info.get("version") or "version unknown"
            lines.append(f"  - `{name}` {version} ({opt_text}), shown as **{label}**")
    skipped = meta.get("skipped_lines", 0)
    rec_line = f"- records: {meta.get('records', 0):,}"
    if skipped:
        rec_line += f" ({skipped} line(s) of records.jsonl skipped: not valid JSON records)"
    lines.append(rec_line)
    lines.append("")
    return lines


_HOW_TO_READ = """\
**TBM** (time between masks) is the time of one mask step as a server makes it: the
engine's own call that fills the next token's mask and its own call that accepts the
token, over every valid test instance of every item; the TBM statistics pool all
steps of an engine.  For masklab's strategies that is the C session's fill and accept;
for a peer (`peer:...`) the engine's native calls, timed inside the adapter, while
what the adapter adds (the protocol's checks, clearing non-text ids, EOS) is the
*glue* columns, outside TBM.  **TTFM** (time to first mask) is grammar compilation
plus the first mask, one value per item that got that far; for a peer, its compile
call, its matcher and its first fill.  Timing tables and figures are over the items
every engine passed unless the report says otherwise (`masklab report --all-items`:
each engine over its own), so every engine is timed on the same work; the outcome
table counts every record.  avg is the mean; pNN are percentiles computed
with numpy's default linear interpolation.  Statuses: *passing* (every test instance
handled correctly), *compile_error*, *timeout*, *crash*, *validation_error* (a valid
instance rejected) and *invalidation_error* (an invalid instance accepted: the
engine is looser than the spec).

The density table sorts masks by the share of the vocabulary they allow
(allowed / vocabulary size): *sparse: under 2%*, *medium: 2 to 85%* and *dense: 85% or more*, computed token by token,
and *dense, from slices*, where the engine computed a dense mask from its vocabulary slices
(*under 85%, from slices* collects the masks computed from slices below 85% when there are
any).  *% of masks* and *% of mask time* each sum to 100 per engine; *µs per mask*
is the mean TBM of the category.  Engines with no mask at all (every item failed to
compile) keep their row in the engine table with empty timings and are absent from
the density table and the figures."""


def _short(detail: Any, limit: int = 120) -> str:
    if detail is None or (isinstance(detail, float) and math.isnan(detail)):
        return ""
    text = " ".join(str(detail).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failures(runs: Runs, limit: int = 20) -> list[str]:
    recs = runs.records
    bad = recs[recs["status"] != "passing"]
    if bad.empty:
        return []
    lines = ["## Non-passing items", ""]
    for label in runs.engines:
        g = bad[bad["engine_label"] == label]
        if g.empty:
            continue
        shown = g.head(limit)
        detail = shown["detail"] if "detail" in shown else pd.Series("", index=shown.index)
        df = pd.DataFrame(
            {
                "item": shown["item"].astype(str),
                "status": shown["status"].astype(str),
                "detail": [_short(d) for d in detail.tolist()],
            }
        )
        lines += [f"**{label}**: {len(g)} non-passing", "", to_markdown(df, index=False), ""]
        if len(g) > limit:
            lines += [f"({len(g) - limit} more in records.jsonl)", ""]
    return lines


def _header(ctx: Context) -> list[str]:
    runs, everything = ctx.runs, ctx.everything
    n_runs = len(runs.meta)
    return ["# masklab benchmark report", "",
            f"{n_runs} run{'s' if n_runs != 1 else ''} · vocabulary: {vocab_text(runs)} · "
            f"data: {data_text(runs)} · {len(runs.engines)} engine(s) · "
            f"{len(everything.records):,} records · {len(everything.masks):,} mask steps", "",
            f"**Timings over {runs.scope}.**", ""]


def _warnings(ctx: Context) -> list[str]:
    warnings = comparability_warnings(ctx.everything, causes=difference_causes(ctx.everything, ctx.explain_budget))
    return ["## Warnings: not like for like", ""] + [f"* {w}" for w in warnings] + [""] if warnings else []


def _provenance_lines(meta: dict[str, Any]) -> list[str]:
    """What a run's ``run.json`` says of its software, threads and load (runs written
    before masklab recorded them have none of these lines)."""
    m = meta.get("machine") if isinstance(meta.get("machine"), dict) else {}
    lines = []
    cpu = [f"{m['cpus_usable']} of them usable" if m.get("cpus_usable") not in (None, m.get("cpu_count")) else "",
           f"{m['cpu_mhz']:g} MHz at the start" if m.get("cpu_mhz") else "",
           f"governor {m['governor']}" if m.get("governor") else ""]
    if any(cpu):
        lines.append("- CPU: " + ", ".join(c for c in cpu if c))
    git = meta.get("git")
    soft = []
    if isinstance(git, dict) and git.get("commit"):
        soft.append(f"git {str(git['commit'])[:10]}" + (" (with uncommitted changes)" if git.get("dirty") else ""))
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    soft += [f"{k} {v}" for k, v in versions.items() if v]
    if soft:
        lines.append("- software: " + ", ".join(soft))
    threads = meta.get("threads") if isinstance(meta.get("threads"), dict) else {}
    if threads:
        env = ", ".join(f"{k}={v}" for k, v in (threads.get("environment") or {}).items())
        lines.append(f"- threads: torch {_fmt_meta_value(threads.get('torch'))}, mask threads "
                     f"{_fmt_meta_value(threads.get('masks'))}" + (f", {env}" if env else ""))
    load = meta.get("load_1m") if isinstance(meta.get("load_1m"), dict) else {}
    if load:
        lines.append(f"- machine load (1 min): {_fmt_meta_value(load.get('start'))} at the start, "
                     f"{_fmt_meta_value(load.get('end'))} at the end")
    return lines


def provenance_differences(metas: list[dict[str, Any]]) -> list[str]:
    """Markdown bullets naming each provenance field that differs between the runs, with
    every run's value (nothing for one run, or runs alike)."""
    if len(metas) < 2:
        return []
    diff = differences(metas)
    return [f"- `{key}`: " + " | ".join(_fmt_meta_value(v) for v in values) for key, values in diff.items()]


def _runs(ctx: Context) -> list[str]:
    lines = ["## Runs", ""]
    diff = provenance_differences(ctx.runs.meta)
    if diff:
        lines += ["The runs differ in their provenance (run 1 | run 2 | ...):", "", *diff, ""]
    for i, meta in enumerate(ctx.runs.meta):
        lines += _run_section(i, meta)
    return lines


def _engines_csv(ctx: Context) -> list[str]:
    """``engines.csv``: timings over the compared items, outcomes over every record."""
    timing = [c for c in ctx.engines.columns if c.startswith(("TBM", "TTFM"))] + ["masks"]
    pd.concat([ctx.engines[timing], ctx.outcomes.drop(columns=[c for c in timing if c in ctx.outcomes])],
              axis=1).to_csv(ctx.out / "engines.csv")
    return []


def _tbm(ctx: Context) -> list[str]:
    cols = [c for c in ctx.engines.columns if c.startswith("TBM")] + ["masks"]
    tbm = with_intervals(ctx.engines[cols]).rename(columns=lambda c: c.replace("TBM ", "").replace(" (µs)", ""))
    note = ([f"The first walk of the valid instances on each compile (a grammar's first request); the later "
             f"walks (`--walks {ctx.n_walks}`) are below.", ""] if len(ctx.walks) else [])
    return ["## Time between masks (TBM, µs)", "", *note, to_markdown(tbm, ".1f", intfmt=","), ""]


def _ttfm(ctx: Context) -> list[str]:
    cols = [c for c in ctx.engines.columns if c.startswith("TTFM")]
    ttfm = with_intervals(ctx.engines[cols]).rename(columns=lambda c: c.replace("TTFM ", "").replace(" (ms)", ""))
    timed = ctx.runs.records[ctx.runs.records["ttfm_s"].notna()]
    counts = timed.groupby("engine_label", observed=False)["item"].nunique()  # items, not repeats
    ttfm.insert(len(ttfm.columns), "items with TTFM", counts.reindex(ctx.engines.index).to_numpy())
    return ["## Time to first mask (TTFM = compile + first mask, ms)", "", to_markdown(ttfm, ".1f", intfmt=","), ""]


def _outcomes(ctx: Context) -> list[str]:
    cols = [c for c in ctx.outcomes.columns if not c.startswith(("TBM", "TTFM")) and c != "masks"]
    return ["## Outcomes (items per status)", "", to_markdown(ctx.outcomes[cols], ".1f", intfmt=","), ""]


def _density(ctx: Context) -> list[str]:
    density = density_table(ctx.runs)
    density.to_csv(ctx.out / "density.csv")
    return ["## Masks by density", "",
            to_markdown(density, ".1f", intfmt=",") if len(density) else "(no masks recorded)", ""]


def _walks(ctx: Context) -> list[str]:
    if not len(ctx.walks):
        return []
    ctx.walks.to_csv(ctx.out / "walks.csv")
    ctx.draw(plot_walks_cdf, "walks_cdf", ctx.runs)
    n = ctx.n_walks
    return ["## Warm grammars: the first walk against the later ones", "",
            f"`bench --walks {n}`: each item's valid instances walked {n} times on one compile, each "
            "walk on a fresh matcher; the later walks meet what the earlier ones built on the compiled grammar "
            "(lazy lexer states, rows, mask caches), as a server's later requests for a schema do. Their masks "
            "must be the first walk's (else a validation error). TBM in µs, later walks pooled; full "
            "precision in `walks.csv`.", "",
            to_markdown(ctx.walks, dict.fromkeys(ctx.walks.columns, ".2f"), intfmt=","), "",
            *ctx.figure("walks_cdf", "TBM on the first and the later walks", "TBM on first and later walks")]


def _work(ctx: Context) -> list[str]:
    work = work_table(ctx.runs)
    if not len(work):
        return []
    work.to_csv(ctx.out / "work.csv")
    return ["## Work per mask", "",
            "What each engine did per mask, counted inside it (`MaskStats`, summed over the valid "
            "instances of the compared items, divided by their masks): token-trie nodes visited, "
            "lexer transitions, Earley items added, tokens checked one by one, decided by a slice "
            "or by a precomputed table. Counts cover accepts too. A peer counts its masks only "
            "(–: not seen from outside).", "",
            to_markdown(work, ".1f", intfmt=","), ""]


def _drafts(ctx: Context) -> list[str]:
    drafts = draft_table(ctx.runs)
    if not len(drafts):
        return []
    drafts.to_csv(ctx.out / "draft.csv")
    ctx.draw(plot_draft, "draft", ctx.runs)
    return ["## Speculative draft masks", "",
            "`bench --draft`: at every 4th step of each valid instance, the masks of a draft of the next k "
            "tokens (`fill_draft_bitmasks`, the engine's own draft call where it has one) against a fill, "
            "k accept + fill steps and a rollback, the same rows (`mismatch` must be 0). `ratio` is the "
            "median of draft / sequential over positions (below 1: the draft call is cheaper).", "",
            to_markdown(drafts, {"draft µs": ".1f", "sequential µs": ".1f", "µs per mask": ".2f", "ratio": ".2f"},
                        intfmt=","), "",
            *ctx.figure("draft", "Draft masks against the draft length", "Draft masks")]


def _figures(ctx: Context) -> list[str]:
    ctx.draw(plot_tbm_cdf, "tbm_cdf", ctx.runs)
    ctx.draw(plot_ttfm_cdf, "ttfm_cdf", ctx.runs)
    ctx.draw(plot_density, "density", ctx.runs)
    lines = ["## Figures", "",
             *ctx.figure("tbm_cdf", "TBM cumulative distribution", "TBM CDF"),
             *ctx.figure("ttfm_cdf", "TTFM cumulative distribution", "TTFM CDF"),
             *ctx.figure("density", "Share of masks and of mask time by density category", "Masks by density")]
    if ctx.sizes:
        ctx.draw(plot_size, "size", ctx.runs)
        lines += ctx.figure("size", "TTFM and compiled-grammar memory against the grammar's size, productions of "
                            "masklab's Grammar", "TTFM and memory against grammar size")
    return lines


def _how_to_read(ctx: Context) -> list[str]:
    return ["## How to read", "", _HOW_TO_READ, "", "The full-precision tables are `engines.csv` and `density.csv`.",
            ""]


def _direct(ctx: Context) -> list[str]:
    if not bool(ctx.everything.records.get("has_direct", pd.Series(dtype=bool)).any()):
        return []
    table = direct_table(r for d in ctx.bench for r in load_records(d)[0])
    table.to_csv(ctx.out / "direct.csv", index=False)
    return ["## Per-mask truth: masklab's times against the engines called directly", "",
            "Each peer through masklab (its own calls timed inside the adapter) and called directly "
            "through its own API on the same walks (`masklab bench --direct-check`, "
            "`toolkit.report.direct`); our strategies against the peer they reimplement, called directly. "
            "TBM in µs, TTFM in ms; full precision in `direct.csv`.", "",
            direct_markdown(table), ""]


def _tidy(ctx: Context) -> list[str]:
    """``items.parquet`` and ``masks.parquet`` (and CSV) of every record, when asked."""
    if not ctx.tidy:
        return []
    paths = write_tidy(ctx.everything, ctx.out)
    return ["## Tidy tables", "",
            "Every record, whatever its status, one row per item and one per mask step "
            "(their columns: masklab's `docs/benchmarks.md`, \"Tidy tables\"): "
            + ", ".join(f"`{p.name}`" for p in paths) + ".", ""]


def _non_passing(ctx: Context) -> list[str]:
    return _failures(ctx.everything)


SECTIONS: list[Section] = [_header, _warnings, _runs, _engines_csv, _tbm, _ttfm, _outcomes, _density, _walks, _work,
                           _drafts, _figures, _tidy, _how_to_read, _direct, _non_passing]
"""The sections of a bench report, in order."""
