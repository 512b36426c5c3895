"""``masklab audit`` (is each engine's language inside the schema?) and ``masklab
schema-coverage`` (what the JSON Schema compiler makes of a dataset)."""

from __future__ import annotations

import argparse
import csv
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.bench.audit import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_SAMPLES,
    DEFAULT_TIMEOUT,
    ITEMS_FILE,
    SAMPLERS,
    merged_items,
    run_audit,
)
from toolkit.bench.audit_tables import audit_table, counterexamples, dataset_table
from toolkit.bench.backends import BACKENDS
from toolkit.bench.coverage import schema_coverage, summarize
from toolkit.bench.records import read_records
from toolkit.cli.common import (
    SKIP_BAD_HELP,
    add_option_arg,
    checked_options,
    command_line,
    engine_list,
    positive_int,
)
from toolkit.jsonschema.compiler import PROPERTY_ORDERS
from toolkit.report.audit import plot_audit
from toolkit.report.style import short_vocab

__all__ = ["configure"]


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` to its parser."""
    if name == "audit":
        _audit_args(p)
        p.set_defaults(func=_audit)
    elif name == "schema-coverage":
        p.add_argument("--data", required=True, help="a MaskBench file or folder")
        p.add_argument("--limit", type=int, default=None, help="check only the first N schemas")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds per schema")
        p.add_argument("--out", default=None, help="write per-schema results as CSV")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.add_argument("--check-lark", action="store_true", help="also validate to_lark() with llguidance")
        p.add_argument("--skip-bad-items", action="store_true", help=SKIP_BAD_HELP)
        p.add_argument("--property-order", choices=PROPERTY_ORDERS, default=PROPERTY_ORDERS[0],
                       help="object members in the schema's order (default, as llguidance and xgrammar) or in any")
        p.set_defaults(func=_schema_coverage)


def _audit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", required=True, help="comma-separated engine names")
    p.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets)")
    p.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    p.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES,
                   help=f"random walks per engine and schema (default {DEFAULT_SAMPLES})")
    p.add_argument("--max-tokens", type=positive_int, default=DEFAULT_MAX_TOKENS,
                   help=f"a walk's length budget (default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--seed", type=int, default=0, help="the walks' seed (default 0)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N schemas (after --item-seed)")
    p.add_argument("--item-seed", type=int, default=None, help="shuffle the schemas with this seed before --limit")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds per engine and schema: compile, walks and invalid instances "
                        f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--sampler", choices=SAMPLERS, default=SAMPLERS[0],
                   help="how a walk draws among the allowed tokens: uniform (each token alike, default), branch "
                        "(each first byte alike: rare branches as often as common ones) or mixed (odd walks by branch)")
    p.add_argument("--respell-keys", action="store_true",
                   help="also walk, from each valid instance, instances with one key written with a \\u escape "
                        "and a value of another type under it (an engine that takes another spelling of a listed "
                        "key as an additional property accepts them)")
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="workers side by side (default 1: this process); more run worker processes, killed at "
                        "the time or memory limit")
    p.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0],
                   help="where the workers run: processes on this machine (default) or Ray actors ([cluster])")
    p.add_argument("--address", default=None, metavar="ADDR", help="with --backend ray: join this Ray cluster")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GB",
                   help="resident memory per worker before it is killed (default: 80%% of RAM / jobs)")
    add_option_arg(p)
    p.add_argument("--skip-bad-items", action="store_true", help=SKIP_BAD_HELP)
    p.add_argument("--out", default="results/audit", help="run folder; an existing one resumes (default: results/audit)")
    p.add_argument("--pdf", action="store_true", help="also write the figure as PDF (default: PNG only)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _stop(signum: int, frame: object) -> None:  # noqa: ARG001
    raise KeyboardInterrupt


def _audit(args: argparse.Namespace) -> int:
    engines = engine_list(args.engines)
    # SIGTERM as Ctrl-C: a run in the background (where a shell ignores SIGINT for it) stops the same way
    old = signal.signal(signal.SIGTERM, _stop)
    try:
        df = _run(args, engines)
    except KeyboardInterrupt:  # the tables of what is done, then the same command resumes
        print("\ninterrupted: the tables below are over the items audited so far; the same command resumes",
              file=sys.stderr)
        path = Path(args.out) / "audit.jsonl"
        _write_tables(args, list(read_records(path)) if path.is_file() else [])
        return 130
    finally:
        signal.signal(signal.SIGTERM, old)
    _write_tables(args, df)
    return 0


def _run(args: argparse.Namespace, engines: list[str]) -> pd.DataFrame:
    return run_audit(engines, args.data, vocab=args.vocab, out=args.out, samples=args.samples, seed=args.seed,
                   max_tokens=args.max_tokens, sampler=args.sampler, limit=args.limit, item_seed=args.item_seed,
                   timeout=args.timeout, jobs=args.jobs, backend=args.backend, address=args.address,
                   memory_limit_gb=args.memory_limit, options=checked_options(args.option, engines),
                   progress=not args.quiet, command=command_line(args), skip_bad_items=args.skip_bad_items,
                   respell_keys=args.respell_keys)


def _write_tables(args: argparse.Namespace, records: pd.DataFrame | list[dict[str, Any]]) -> None:
    """items.csv, audit.csv, datasets.csv, counterexamples.csv and the figure of the
    folder's audit (with what an earlier run left in items.csv), and the table printed."""
    out = Path(args.out)
    df = records
    df = merged_items(out, df)  # with the items an earlier run left in items.csv only
    df.to_csv(out / ITEMS_FILE, index=False)
    table = audit_table(df)
    table.to_csv(out / "audit.csv")
    dataset_table(df).to_csv(out / "datasets.csv")
    plot_audit(df, out / "audit", title=f"Soundness audit: {args.samples} walk{'' if args.samples == 1 else 's'} per schema, "
                                                 f"{args.sampler} sampler, {short_vocab(args.vocab)}", pdf=args.pdf)
    found = list(counterexamples(df))
    with (out / "counterexamples.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["engine", "item", "text", "message", "pointer"])
        w.writeheader()
        w.writerows(found)
    print(f"records in {out / 'audit.jsonl'}, one row per engine and item in {ITEMS_FILE}; per engine in audit.csv, "
          f"per dataset in datasets.csv, "
          f"counterexamples in counterexamples.csv, figure {out / 'audit.png'}\n")
    print(table.to_string(float_format=lambda v: f"{v:.1f}"))
    if found:
        print("\nshortest counterexample per loosened item (first 20):")
        for c in found[:20]:
            text = c["text"] if len(c["text"]) <= 80 else c["text"][:77] + "..."
            print(f"  {c['engine']} {c['item']}: {text!r}: {c['message'][:120]}"
                  + (f" (at {c['pointer']})" if c["pointer"] else ""))


def _schema_coverage(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    results = schema_coverage(args.data, limit=args.limit, timeout=args.timeout, progress=not args.quiet,
                              check_lark=args.check_lark, property_order=args.property_order,
                              skip_bad_items=args.skip_bad_items)
    print(summarize(results))
    print(f"time                 {time.perf_counter() - t0:.1f} s")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["name", "status", "detail", "seconds", "lark_ok", "causes", "cause_seconds"])
            for r in results:
                w.writerow([r.name, r.status, r.detail, f"{r.seconds:.4f}", "" if r.lark_ok is None else r.lark_ok,
                            ";".join(r.causes), f"{r.cause_seconds:.4f}"])
    return 0
