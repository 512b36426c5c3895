"""``masklab report``: the tables and figures of bench, sweep and generate run folders,
and the short timing summary ``report`` and ``bench`` print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from toolkit.bench.records import AXES, is_sweep, records_file
from toolkit.cli.common import non_negative_float
from toolkit.core.errors import MasklabError
from toolkit.report.bench import (
    DEFAULT_EXPLAIN_BUDGET,
    comparability_warnings,
    comparable,
    difference_causes,
    engine_table,
    load_runs,
)
from toolkit.report.stats import DEFAULT_BOOT, MAX_BOOT
from toolkit.report.sweep import write_sweep_report
from toolkit.report.write import STYLES, write_report

__all__ = ["SUMMARY_COLUMNS", "configure", "timing_summary", "warn_comparability"]

SUMMARY_COLUMNS = ("items", "passing", "TTFM p50 (ms)", "TBM p50 (µs)", "TBM p99 (µs)", "TBM max (µs)")
"""The columns of :func:`timing_summary` (of :func:`~toolkit.report.bench.engine_table`)."""


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``report`` to its parser."""
    p.add_argument("dirs", nargs="+",
                   help="bench run folders (holding records.jsonl), a sweep folder, or folders with generate runs "
                        "in or below them")
    p.add_argument("--out", default=None, help="where to write (default: the first run folder)")
    p.add_argument("--all-items", action="store_true",
                   help="time each engine over its own passing items (default: the items every engine passed)")
    p.add_argument("--sizes", action="store_true",
                   help="add size.png: TTFM and memory against grammar size (reads every item's grammar again)")
    p.add_argument("--axis", choices=AXES, default=AXES[0],
                   help="a sweep folder: the grid axis the figures run along (default vocab: against the "
                        "vocabulary size)")
    p.add_argument("--pdf", action="store_true", help="also write every figure as PDF (default: PNG only)")
    p.add_argument("--style", choices=STYLES, default=STYLES[0],
                   help="paper: every figure also as STEM-column.pdf (3.3 in, one column) and STEM-page.pdf "
                        "(6.9 in, both columns), 8 pt text, no titles, fonts embedded (default: screen only)")
    p.add_argument("--tidy", action="store_true",
                   help="also write items.parquet and masks.parquet (and CSV) of every record: one row per item "
                        "and per mask step, the columns in docs/benchmarks.md")
    p.add_argument("--boot", type=_boot_count, default=DEFAULT_BOOT, metavar="B",
                   help=f"bootstrap draws of the timing tables' 95%% intervals (default {DEFAULT_BOOT}; "
                        f"0: none; at most {MAX_BOOT:,})")
    p.add_argument("--explain-budget", type=non_negative_float, default=DEFAULT_EXPLAIN_BUDGET, metavar="S",
                   help="seconds to re-run the engines whose masks differ and name why, documented or not "
                        f"(default {DEFAULT_EXPLAIN_BUDGET:g}; 0: only causes cached in the run folder)")
    p.add_argument("--full", action="store_true", help="print the whole report.md (default: a short summary)")
    p.set_defaults(func=_report)


def timing_summary(dirs: Sequence[str]) -> str:
    """Per engine of the bench runs in ``dirs``: its items, how many passed, TTFM p50 and
    TBM p50/p99/max (and, with repeats, the max per mask) over the items every engine
    passed (as the report's timing tables);
    empty when no folder holds a bench run."""
    bench = [d for d in dirs if records_file(d).is_file()]
    if not bench:
        return ""
    runs = load_runs(bench)
    table = engine_table(runs, boot=0)[["items", "passing"]]
    timed = engine_table(comparable(runs), boot=0)
    for col in SUMMARY_COLUMNS[2:]:
        table[col] = timed[col] if col in timed else float("nan")
    if "TBM max per mask (µs)" in timed:  # (runs with repeats)
        table["TBM max per mask (µs)"] = timed["TBM max per mask (µs)"]
    with pd.option_context("display.width", 200):
        return table.to_string(float_format=lambda v: f"{v:.1f}")


def warn_comparability(dirs: Sequence[str]) -> None:
    """Say on stderr what makes the engines of these bench runs not like for like (with
    the causes the report cached, if it named them)."""
    bench = [d for d in dirs if records_file(d).is_file()]
    if not bench:
        return
    runs = load_runs(bench)
    for w in comparability_warnings(runs, limit=3, causes=difference_causes(runs, 0)):
        print(f"warning: {w}", file=sys.stderr)


def _boot_count(text: str) -> int:
    """``--boot``: an integer from 0 to :data:`MAX_BOOT`."""
    value = int(text)
    if not 0 <= value <= MAX_BOOT:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_BOOT:,}, got {value:,}")
    return value


def _report(args: argparse.Namespace) -> int:
    sweeps = [d for d in args.dirs if is_sweep(d)]
    if sweeps:
        if len(args.dirs) > 1:
            raise MasklabError("a sweep folder is reported alone: masklab report SWEEP [--axis AXIS]")
        path = write_sweep_report(sweeps[0], out=args.out, axis=args.axis, pdf=args.pdf, style=args.style)
    else:
        if args.axis != AXES[0]:
            raise MasklabError("--axis is for a sweep folder (masklab sweep)")
        path = write_report(args.dirs, out=args.out, all_items=args.all_items, sizes=args.sizes, pdf=args.pdf,
                            boot=args.boot, tidy=args.tidy, style=args.style,
                            explain_budget=args.explain_budget)
    if args.full:
        print(path.read_text(encoding="utf-8"))
    else:
        summary = timing_summary(args.dirs) if not sweeps else ""
        if summary:
            print("per engine, timed over the items every engine passed (the report's tables):")
            print(summary)
    figures = sorted(p.name for p in path.parent.glob("*.png"))
    print(f"written to {path} ({len(figures)} figures: {', '.join(figures[:8])}{' ...' if len(figures) > 8 else ''})")
    if not sweeps:
        warn_comparability(args.dirs)
    return 0
