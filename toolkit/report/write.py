"""``report.md``: every table and figure of one or more benchmark runs, with the
end-to-end decoding runs (:mod:`toolkit.report.e2e`) and the per-mask truth
(:mod:`toolkit.report.direct`) found beside them (``masklab report``)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.bench.harness import load_records, records_file
from toolkit.report.bench import (
    ReportError,
    Runs,
    as_dirs,
    comparability_warnings,
    comparable,
    data_text,
    density_table,
    draft_table,
    engine_table,
    load_runs,
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
from toolkit.report.e2e import e2e_sections, find_generate_runs
from toolkit.report.style import to_markdown

__all__ = ["write_report"]

# ---------------------------------------------------------------------------- report


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
(allowed / vocabulary size): `0-2% !sliced` (< 2%), `2-85% !sliced`, `85%+ !sliced`
(≥ 85%), computed without slices, and `85%+ sliced`, where the engine used its
vocabulary slices (`<85% sliced` collects sliced masks below 85% when there are
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


def write_report(
    dirs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    all_items: bool = False,
    sizes: bool = False,
) -> Path:
    """Load ``dirs`` and write the report into ``out`` (default: the first directory).

    A directory holding ``records.jsonl`` is a bench run: the report gets
    ``engines.csv``, ``density.csv``, ``tbm_cdf.png/.pdf``, ``ttfm_cdf.png/.pdf`` and
    ``density.png/.pdf``.  Any other directory is searched for ``masklab generate``
    runs (:mod:`toolkit.report.e2e`): the report gets the end-to-end section, ``e2e.csv``,
    ``apply_kernels.csv``, ``e2e_overhead.png/.pdf`` (overhead vs batch size) and
    ``e2e_steps.png/.pdf``.  Returns the path of ``report.md``.  Raises
    :class:`ReportError` (a ``ValueError``) for a directory that is neither, or a
    bench run that cannot be read or has no records.

    Timing tables, the density table and the figures are over the items every engine
    passed (:func:`comparable`; ``all_items``: each engine's own), the outcome table over
    every record; the report opens with :func:`comparability_warnings`.  ``sizes`` adds
    ``size.png/.pdf``, TTFM and memory against grammar size (:func:`plot_size`; it reads
    every item's grammar again, so it is asked for).
    """
    paths = as_dirs(dirs)
    if not paths:
        raise ReportError("no run directory given")
    for d in paths:
        if not d.is_dir():
            raise ReportError(f"{d}: not a directory")
    bench = [d for d in paths if records_file(d).is_file()]
    others = [d for d in paths if d not in bench]
    out_dir = Path(out) if out is not None else paths[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    e2e_lines: list[str] = []
    n_gen = 0
    if others:
        for d in others:
            if not find_generate_runs([d]):
                raise ReportError(f"{d}: no records.jsonl (a masklab bench run) and no masklab generate "
                                  "run (run.json with a summary, steps.csv) in it or below it")
        e2e_lines, n_gen = e2e_sections(others, out_dir)
    if not bench:
        lines = ["# masklab end-to-end report", "",
                 f"{n_gen} generate run{'s' if n_gen != 1 else ''} from {', '.join(f'`{d}`' for d in others)}", ""]
        report = out_dir / "report.md"
        report.write_text("\n".join(lines + e2e_lines).rstrip() + "\n", encoding="utf-8")
        return report
    everything = load_runs(bench)
    runs = comparable(everything, all_items)
    warnings = comparability_warnings(everything)

    engines = engine_table(runs)
    outcomes = engine_table(everything)
    density = density_table(runs)
    work = work_table(runs)
    drafts = draft_table(runs)
    walks = walks_table(runs)
    # the CSV: timings over the compared items, outcomes over every record
    timing = [c for c in engines.columns if c.startswith(("TBM", "TTFM"))] + ["masks"]
    pd.concat([engines[timing], outcomes.drop(columns=[c for c in timing if c in outcomes])],
              axis=1).to_csv(out_dir / "engines.csv")
    density.to_csv(out_dir / "density.csv")
    if len(work):
        work.to_csv(out_dir / "work.csv")
    if len(drafts):
        drafts.to_csv(out_dir / "draft.csv")
        plot_draft(runs, out_dir / "draft")
    if len(walks):
        walks.to_csv(out_dir / "walks.csv")
        plot_walks_cdf(runs, out_dir / "walks_cdf")
    plot_tbm_cdf(runs, out_dir / "tbm_cdf")
    plot_ttfm_cdf(runs, out_dir / "ttfm_cdf")
    plot_density(runs, out_dir / "density")
    if sizes:
        plot_size(runs, out_dir / "size")
    direct_lines: list[str] = []
    if bool(everything.records.get("has_direct", pd.Series(dtype=bool)).any()):
        table = direct_table(r for d in bench for r in load_records(d)[0])
        table.to_csv(out_dir / "direct.csv", index=False)
        direct_lines = ["## Per-mask truth: masklab's times against the engines called directly", "",
                        "Each peer through masklab (its own calls timed inside the adapter) and called directly "
                        "through its own API on the same walks (`masklab bench --direct-check`, "
                        "`toolkit.report.direct`); our strategies against the peer they reimplement, called directly. "
                        "TBM in µs, TTFM in ms; full precision in `direct.csv`.", "",
                        direct_markdown(table), ""]

    timing_cols = [c for c in engines.columns if c.startswith(("TBM", "TTFM"))]
    outcome_cols = [c for c in outcomes.columns if not c.startswith(("TBM", "TTFM"))]
    tbm = engines[[c for c in timing_cols if c.startswith("TBM")] + ["masks"]]
    tbm = tbm.rename(columns=lambda c: c.replace("TBM ", "").replace(" (µs)", ""))
    ttfm = engines[[c for c in timing_cols if c.startswith("TTFM")]]
    ttfm = ttfm.rename(columns=lambda c: c.replace("TTFM ", "").replace(" (ms)", ""))
    ttfm.insert(
        len(ttfm.columns),
        "items with TTFM",
        runs.records.groupby("engine_label", observed=False)["ttfm_s"]
        .count()
        .reindex(engines.index)
        .to_numpy(),
    )

    n_runs = len(runs.meta)
    lines = [
        "# masklab benchmark report",
        "",
        f"{n_runs} run{'s' if n_runs != 1 else ''} · vocabulary: {vocab_text(runs)} · "
        f"data: {data_text(runs)} · {len(runs.engines)} engine(s) · "
        f"{len(everything.records):,} records · {len(everything.masks):,} mask steps",
        "",
        f"**Timings over {runs.scope}.**",
        "",
    ]
    if warnings:
        lines += ["## Warnings: not like for like", ""] + [f"* {w}" for w in warnings] + [""]
    lines += ["## Runs", ""]
    for i, meta in enumerate(runs.meta):
        lines += _run_section(i, meta)
    n_walks = max((int(m.get("walks") or 1) for m in runs.meta), default=1)
    lines += [
        "## Time between masks (TBM, µs)",
        "",
        *([f"The first walk of the valid instances on each compile (a grammar's first request); the later "
           f"walks (`--walks {n_walks}`) are below.", ""] if len(walks) else []),
        to_markdown(tbm, ".1f", intfmt=","),
        "",
        "## Time to first mask (TTFM = compile + first mask, ms)",
        "",
        to_markdown(ttfm, ".1f", intfmt=","),
        "",
        "## Outcomes (items per status)",
        "",
        to_markdown(outcomes[[c for c in outcome_cols if c != "masks"]], ".1f", intfmt=","),
        "",
        "## Masks by density",
        "",
        to_markdown(density, ".1f", intfmt=",") if len(density) else "(no masks recorded)",
        "",
    ]
    if len(walks):
        lines += [
            "## Warm grammars: the first walk against the later ones",
            "",
            f"`bench --walks {n_walks}`: each item's valid instances walked {n_walks} times on one compile, each "
            "walk on a fresh matcher; the later walks meet what the earlier ones built on the compiled grammar "
            "(lazy lexer states, rows, mask caches), as a server's later requests for a schema do. Their masks "
            "must be the first walk's (else a validation error). TBM in µs, later walks pooled; full "
            "precision in `walks.csv`.",
            "",
            to_markdown(walks, dict.fromkeys(walks.columns, ".2f"), intfmt=","),
            "",
            "![TBM on first and later walks](walks_cdf.png)",
            "",
            "TBM on the first and the later walks ([PDF](walks_cdf.pdf))",
            "",
        ]
    if len(work):
        lines += [
            "## Work per mask",
            "",
            "What each engine did per mask, counted inside it (`MaskStats`, summed over the valid "
            "instances of the compared items, divided by their masks): token-trie nodes visited, "
            "lexer transitions, Earley items added, tokens checked one by one, decided by a slice "
            "or by a precomputed table. Counts cover accepts too. A peer counts its masks only "
            "(–: not seen from outside).",
            "",
            to_markdown(work, ".1f", intfmt=","),
            "",
        ]
    if len(drafts):
        lines += [
            "## Speculative draft masks",
            "",
            "`bench --draft`: at every 4th step of each valid instance, the masks of a draft of the next k "
            "tokens (`fill_draft_bitmasks`, the engine's own draft call where it has one) against a fill, "
            "k accept + fill steps and a rollback, the same rows (`mismatch` must be 0). `ratio` is the "
            "median of draft / sequential over positions (below 1: the draft call is cheaper).",
            "",
            to_markdown(drafts, {"draft µs": ".1f", "sequential µs": ".1f", "µs per mask": ".2f", "ratio": ".2f"},
                        intfmt=","),
            "",
            "![Draft masks](draft.png)",
            "",
            "Draft masks against the draft length ([PDF](draft.pdf))",
            "",
        ]
    lines += [
        "## Figures",
        "",
        "![TBM CDF](tbm_cdf.png)",
        "",
        "TBM cumulative distribution ([PDF](tbm_cdf.pdf))",
        "",
        "![TTFM CDF](ttfm_cdf.png)",
        "",
        "TTFM cumulative distribution ([PDF](ttfm_cdf.pdf))",
        "",
        "![Masks by density](density.png)",
        "",
        "Share of masks and of mask time by density category ([PDF](density.pdf))",
        "",
        *(["![TTFM and memory against grammar size](size.png)", "",
           "TTFM and compiled-grammar memory against the grammar's size, productions of masklab's Grammar "
           "([PDF](size.pdf))", ""] if sizes else []),
        "## How to read",
        "",
        _HOW_TO_READ,
        "",
        "The full-precision tables are `engines.csv` and `density.csv`.",
        "",
    ]
    lines += direct_lines
    lines += _failures(everything)
    lines += [""] + e2e_lines
    report = out_dir / "report.md"
    report.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return report

