"""``masklab bench`` (a benchmark run), ``sweep`` (a grid of them), ``agree`` (do two
engines compute the same masks?) and ``diagnose`` (why an engine differs)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from strategies import available_engines
from toolkit.bench.agree import AgreementError, classify_differences, explain, write_agreement
from toolkit.bench.backends import BACKENDS
from toolkit.bench.diagnose import VERDICTS, grammar_verdicts, late_matches
from toolkit.bench.measure import QUICK_CASES
from toolkit.bench.records import read_records, records_file, summary_lines
from toolkit.bench.run import DEFAULT_TIMEOUT, QUICK_TIMEOUT, run_bench
from toolkit.bench.sweep import SPEC_EXAMPLE, load_sweep, run_sweep
from toolkit.cli.common import (
    SKIP_BAD_HELP,
    add_option_arg,
    checked_options,
    command_line,
    draft_lengths,
    engine_list,
    positive_int,
)
from toolkit.cli.report import timing_summary, warn_comparability
from toolkit.grammar.inputs import SOURCES
from toolkit.report.direct import direct_markdown, direct_table
from toolkit.report.sweep import write_sweep_report
from toolkit.report.write import write_report

__all__ = ["BENCH_EPILOG", "configure", "default_bench_engines"]

BENCH_EPILOG = (
    "It ends with a line per engine counting its items per status, the first reasons of its compile errors, crashes "
    "and timeouts (every record, detail included, is in OUT/records.jsonl), and per engine its TTFM and TBM over "
    "the items every engine passed (masklab report OUT: the tables and figures). Exit status: 0 when the run "
    "completed, whatever its items' statuses (an engine refusing an item, crashing or timing out on it is a "
    "measurement, recorded); 2 when the run cannot start or go on (a bad argument, an engine that cannot be built, "
    "a dataset file not in the MaskBench format or an item it cannot judge, an --out folder holding a run with "
    "other settings or another run is writing); 130 when interrupted (the run resumes where it stopped).")


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` to its parser."""
    if name == "bench":
        p.epilog = BENCH_EPILOG
        _bench_args(p)
        p.set_defaults(func=_bench)
    elif name == "sweep":
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        p.epilog = "A spec (TOML), every key shown:\n\n" + SPEC_EXAMPLE
        p.add_argument("spec", help="the sweep spec (TOML; its format below)")
        p.add_argument("--out", required=True, help="the sweep folder (an existing one resumes)")
        p.add_argument("--report", action="store_true", help="write the sweep report into the folder when done")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        p.set_defaults(func=_sweep)
    elif name == "agree":
        _agree_args(p)
        p.set_defaults(func=_agree)
    elif name == "diagnose":
        _diagnose_args(p)


def default_bench_engines() -> list[str]:
    """Every installed engine except ``naive`` (the oracle checks every token per mask:
    too slow for a real vocabulary, it belongs in the tests)."""
    return [e for e in available_engines() if e != "naive"]


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", default=None,
                   help="comma-separated engine names (default: every installed engine but naive)")
    p.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets/)")
    p.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    p.add_argument("--out", default="results/bench", help="run folder; an existing run resumes (default: results/bench)")
    p.add_argument("--limit", type=int, default=None, help="only the first N items (after --seed's shuffle)")
    p.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per engine and item, compile and instances (default {DEFAULT_TIMEOUT:g}, "
                        f"{QUICK_TIMEOUT:g} with --quick)")
    p.add_argument("--jobs", type=int, default=1,
                   help="workers side by side (default 1): processes, or Ray actors of one CPU each")
    p.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0],
                   help="where the workers run: worker processes on this machine (default), or Ray actors "
                        "(the [cluster] extra): a local Ray instance, or the cluster at --address")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --backend ray: join this Ray cluster (HEAD:6379, ray://HEAD:10001, auto) instead "
                        "of starting a local instance")
    p.add_argument("--seed", type=int, default=None, help="shuffle the items with this seed before --limit")
    p.add_argument("--quick", action="store_true",
                   help=f"at most {QUICK_CASES} valid and {QUICK_CASES} invalid instances per item")
    p.add_argument("--source", choices=SOURCES, default=SOURCES[0],
                   help="native: schemas go to each engine's own compiler; grammar: every engine gets "
                        "Grammar.from_json_schema (default: native)")
    add_option_arg(p, "peer:xgrammar.strict_mode=false")
    p.add_argument("--memory-limit", type=float, default=None, metavar="GB",
                   help="resident memory per worker before it is killed (default: 80%% of RAM / jobs)")
    p.add_argument("--direct-check", action="store_true",
                   help="also call each peer directly through its own API on the same walks, and print "
                        "masklab's times against those (toolkit.report.direct)")
    p.add_argument("--draft", type=draft_lengths, default=[], metavar="K[,K...]",
                   help="also time speculative draft masks: at every 4th step of each valid instance, the "
                        "masks of a draft of the next K tokens (fill_draft_bitmasks) against K sequential fill "
                        "+ accept steps and a rollback, e.g. --draft 1,2,4,8,16 (report: cost against K)")
    p.add_argument("--walks", type=positive_int, default=1, metavar="W",
                   help="walk each item's valid instances W times on one compile (default 1): the later walks "
                        "meet a warm grammar, as a server's later requests do; the report shows first and "
                        "later walks apart")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="R",
                   help="measure every engine on every item R times (default 1), in R passes over all of "
                        "them, so a task's repeats are a pass apart; the report gives medians over the repeats "
                        "with bootstrap 95%% intervals")
    p.add_argument("--skip-bad-items", action="store_true", help=SKIP_BAD_HELP)
    p.add_argument("--report", action="store_true", help="write the report into the run folder when done")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _bench(args: argparse.Namespace) -> int:
    engines = engine_list(args.engines) if args.engines else default_bench_engines()
    timeout = args.timeout if args.timeout is not None else (QUICK_TIMEOUT if args.quick else DEFAULT_TIMEOUT)
    df = run_bench(engines, args.data, vocab=args.vocab, out=args.out, limit=args.limit, timeout=timeout,
                   jobs=args.jobs, seed=args.seed, quick=args.quick, options=checked_options(args.option, engines),
                   source=args.source, memory_limit_gb=args.memory_limit, progress=not args.quiet,
                   command=command_line(args), direct_check=args.direct_check, drafts=args.draft, walks=args.walks,
                   backend=args.backend, address=args.address, skip_bad_items=args.skip_bad_items,
                   repeat=args.repeat)
    print(f"records in {Path(args.out) / 'records.jsonl'}")
    if args.direct_check and len(df):
        wanted = set(zip(df["engine"], df["item"], strict=True))
        recs = [r for r in read_records(args.out) if (r["engine"], r["item"]) in wanted]
        print("\nmasklab's times against the engines called directly (µs; TTFM ms):")
        print(direct_markdown(direct_table(recs)))
    if args.report:
        print(f"report in {write_report([args.out])}")
    if len(engines) > 1 and len(df):
        warn_comparability([args.out])
    # last: per engine its statuses and the first reasons of what it did not measure, then its times
    records = df.to_dict("records") if len(df) else []
    print("\n".join(["", "summary:", *summary_lines(records, engines)] if records else ["no items were run"]))
    timing = timing_summary([args.out]) if records else ""
    if timing:
        print(f"\ntimes (masklab report {args.out}: the tables and figures):\n{timing}")
    return 0  # a completed run, whatever its items' statuses (see the command's epilog)


def _sweep(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.spec)
    out = run_sweep(sweep, args.out, progress=not args.quiet, command=command_line(args),
                    spec_text=Path(args.spec).read_text(encoding="utf-8"))
    recs = read_records(records_file(out))
    for cell in sweep.cells():
        mine = [r for r in recs if r.get("axes") == cell]
        head = f"cell vocab={cell['vocab']} options={cell['options']} data={cell['data']}"
        print(head + ": " + ", ".join(f"{e} {sum(r['status'] == 'passing' for r in mine if r['engine'] == e)}/"
                                      f"{sum(r['engine'] == e for r in mine)} passing" for e in sweep.engines))
    print(f"records in {records_file(out)}")
    if args.report:
        print(f"report: {write_sweep_report(out)}")
    return 0


def _agree_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a bench run folder holding both engines' records")
    p.add_argument("--engines", required=True, metavar="A,B", help="the two engines to compare")
    p.add_argument("--out", default=None, help="where to write the CSV/JSON (default: the run folder)")
    p.add_argument("--show", type=int, default=20, help="how many differing items to list")
    p.add_argument("--explain", type=int, default=0, metavar="N",
                   help="re-run the first N differing items and list the tokens only one engine allows")
    p.add_argument("--classify", action="store_true",
                   help="re-run every differing item and sort the tokens only one engine allows into byte-level "
                        "classes, an example each (differences-A-vs-B.csv)")


def _agree(args: argparse.Namespace) -> int:
    names = engine_list(args.engines)
    if len(names) != 2:
        raise AgreementError(f"--engines takes two engine names, got {args.engines!r}")
    a, b = names
    table, totals, path = write_agreement(args.run, a, b, args.out)
    print(f"{a} vs {b} in {args.run}: {totals['items']} items compiled by both, "
          f"{totals['items_equal']} with every mask equal; {totals['steps']} steps compared, "
          f"{totals['steps_differ']} differ, {totals['length_mismatch']} instances stopped at different steps")
    bad = table[(table["differ"] > 0) | (table["length_mismatch"] > 0)]
    if len(bad):
        print(bad.head(args.show).to_string(index=False))
    for item in bad["item"].head(args.explain):
        print(f"\n{item}:")
        for d in explain(args.run, item, a, b):
            print("  " + json.dumps(d, ensure_ascii=False))
    if args.classify and len(bad):
        classes = classify_differences(args.run, a, b, bad["item"].tolist())
        classes.to_csv(path.with_name(path.stem.replace("agreement-", "differences-") + ".csv"), index=False)
        print("\nthe tokens only one engine allows, by class (every differing step, re-run):")
        with pd.option_context("display.max_colwidth", 120, "display.width", 250):
            print(classes.to_string(index=False))
    print(f"written to {path} (and .json{', differences-*.csv' if args.classify and len(bad) else ''})")
    return 0 if totals["steps_differ"] == 0 and totals["length_mismatch"] == 0 else 1


def _diagnose_args(p: argparse.ArgumentParser) -> None:
    dsub = p.add_subparsers(dest="diagnostic", required=True)
    rj = dsub.add_parser("rejects", help="the valid instances ENGINE rejected: does the item's own grammar reject them too?")
    rj.add_argument("run", help="a bench run folder")
    rj.add_argument("--engine", required=True, help="the engine whose validation errors to check")
    rj.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                    help="seconds for the grammar's check of one instance (0: none; default 30)")
    rj.set_defaults(func=_diagnose_rejects)
    lm = dsub.add_parser("late-match", help="tokens only outlines allows, against outlines-core's documented miss "
                         "(exit 1 if one is unexplained)")
    lm.add_argument("run", help="a bench run folder holding both engines' records")
    lm.add_argument("--ours", default="outlines", help="default: outlines")
    lm.add_argument("--peer", default="peer:outlines-core", help="default: peer:outlines-core")
    lm.set_defaults(func=_diagnose_late_match)


def _diagnose_rejects(args: argparse.Namespace) -> int:
    table = grammar_verdicts(args.run, args.engine, args.time_limit or None)
    counts = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    items = table["item"].nunique() if len(table) else 0
    print(f"{args.engine} in {args.run}: {len(table)} rejected valid instance(s) in {items} item(s); "
          + ", ".join(f"{v}: {n}" for v, n in counts.items()))
    for row in table[table["verdict"] != VERDICTS[0]].itertuples():
        print(f"  {row.item} case {row.case}: {row.verdict}")
    return 0


def _diagnose_late_match(args: argparse.Namespace) -> int:
    out = late_matches(args.run, args.ours, args.peer)
    for item, data in out.pop("unexplained_tokens"):
        print(f"unexplained: {item} {data!r}")
    print(json.dumps(out))
    return 0 if out["unexplained"] == 0 else 1
