"""The ``masklab`` command line (also ``python -m toolkit``).

Subcommands:

* ``masklab engines``: registered engines and whether they are installed;
* ``masklab vocab SPEC``: a vocabulary's size, special and EOS ids, trie size;
* ``masklab mask --vocab SPEC (--lark FILE | --gbnf FILE | --regex RX | --schema FILE|JSON |
  --grammar FILE) [--prefix TEXT]``: the mask an engine computes after a prefix, with
  timing and sample tokens (one flag per registered input format, :mod:`toolkit.grammar.inputs`);
* ``masklab accepts (--lark FILE | ...) TEXT``: the reference recognizer's verdict;
* ``masklab schema-coverage --data DIR``: the JSON Schema compiler's MaskBench counts;
* ``masklab bench --engines a,b --data DIR --vocab SPEC --out DIR``: a benchmark run
  (:mod:`toolkit.bench.harness`); ``masklab report DIR...``: its tables and figures
  (:mod:`toolkit.report`).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import shlex
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from strategies import (
    available_engines,
    check_options,
    engine_factory,
    get_engine,
    registered_engines,
)
from toolkit.bench.agree import AgreementError, classify_differences, explain, write_agreement
from toolkit.bench.audit import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_SAMPLES,
    SAMPLERS,
    audit_table,
    counterexamples,
    dataset_table,
    run_audit,
)
from toolkit.bench.coverage import schema_coverage, summarize
from toolkit.bench.datasets import embedded_dir
from toolkit.bench.diagnose import VERDICTS, grammar_verdicts, late_matches
from toolkit.bench.harness import (
    engine_info,
    machine_info,
    read_records,
    records_file,
    run_bench,
    select_items,
    summary_lines,
)
from toolkit.bench.runlock import run_folder_lock
from toolkit.bench.sweep import AXES, is_sweep, load_sweep, run_sweep
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.protocol import MAX_DRAFT
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import load_vocab
from toolkit.decode.generate import DEFAULT_PROMPT, SPEC_PROMPT, generate, unconstrained, write_run
from toolkit.decode.model import ModelError, load_chat_template, load_model
from toolkit.grammar.inputs import (
    SOURCES,
    InputFormat,
    engine_input,
    format_for_path,
    formats,
    read,
)
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import PROPERTY_ORDERS
from toolkit.report.audit import plot_audit
from toolkit.report.bench import comparability_warnings, load_runs
from toolkit.report.direct import direct_markdown, direct_table
from toolkit.report.style import short_vocab
from toolkit.report.sweep import write_sweep_report
from toolkit.report.write import write_report

__all__ = ["main"]


def _read_text(path: str, what: str) -> str:
    """A file's text; a file that is not UTF-8 is a :class:`MasklabError` saying where."""
    raw = Path(path).read_bytes()  # OSError (missing, unreadable): main says which file
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MasklabError(f"{what} {path!r} is not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None


def _schema(text: str) -> Any:
    """``--schema FILE|JSON``: a file holding a JSON schema, or the schema itself."""
    source = text if text.lstrip().startswith(("{", "[")) or text.strip() in ("true", "false") else None
    if source is None:
        source = _read_text(text, "schema file")
    try:
        return json.loads(source)
    except ValueError as e:
        raise MasklabError(f"--schema {text[:60]!r}: not JSON: {e}") from None


def _dest(fmt: InputFormat) -> str:
    return fmt.flag.lstrip("-").replace("-", "_")


def _format_value(fmt: InputFormat, value: str) -> Any:
    """The spec of ``fmt`` a CLI argument gives: a file's text, the text itself, or
    (``file|json``) a schema file or the schema's JSON."""
    if fmt.arg == "text":
        return fmt.spec(value)
    if fmt.arg == "file|json":
        return fmt.spec(_schema(value))
    return fmt.spec(_read_text(value, f"{fmt.name} file"))


def _input(args: argparse.Namespace) -> Any:
    """The input the grammar flags name (``--lark FILE``, ``--gbnf FILE``, ``--regex RX``,
    ``--schema FILE|JSON``, or ``--grammar FILE`` by its suffix: every registered format)."""
    if getattr(args, "grammar", None):
        return _format_value(format_for_path(args.grammar), args.grammar)
    for fmt in formats():
        value = getattr(args, _dest(fmt), None)
        if value is not None:
            return _format_value(fmt, value)
    raise MasklabError("no grammar given")  # (argparse requires one)


def _grammar(args: argparse.Namespace) -> Grammar:
    """The IR of the input the grammar flags name."""
    return read(_input(args))


def _cmd_engines(args: argparse.Namespace) -> int:
    installed = set(available_engines())
    print(f"{'engine':24s} {'installed':13s} {'lexing':12s} {'grammars':13s} {'batch':8s} {'forced':7s} "
          f"{'drafts':7s} {'special':8s} {'work':5s} {'cost':5s} work limit")
    for name in registered_engines():
        try:
            cap = engine_factory(name).capabilities
        except (ImportError, ValueError, AttributeError) as e:  # a plugin that does not import
            print(f"{name:24s} not loadable: {type(e).__name__}: {e}")
            continue
        yes = {True: "yes", False: "no"}
        print(f"{name:24s} {'installed' if name in installed else 'not installed':13s} {cap.lexing:12s} "
              f"{cap.grammars:13s} "
              f"{cap.batch:8s} {cap.forced:7s} {cap.drafts:7s} {yes[cap.special_tokens]:8s} "
              f"{yes[cap.work_counters]:5s} {cap.mask_cost:5s} {cap.work_limit or '-'}")
    return 0


def _cmd_vocab(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    vocab = load_vocab(args.spec)
    t1 = time.perf_counter()
    trie = TokenTrie(vocab)
    t2 = time.perf_counter()
    text_ids = vocab.text_token_ids()
    print(f"vocabulary    {vocab.name}")
    print(f"size          {vocab.size} ids ({vocab.n_defined} defined, {vocab.size - vocab.n_defined} padding)")
    print(f"text tokens   {len(text_ids)}")
    print(f"special ids   {len(vocab.special_tokens)}")
    eos = ", ".join(f"{i} {vocab.special_tokens.get(i, '')!r}" for i in vocab.eos_ids)
    print(f"EOS           {eos}")
    print(f"trie          {trie.num_nodes} nodes, longest token {trie.max_depth} bytes, {trie.memory_bytes() / 1e6:.1f} MB")
    print(f"load / trie   {(t1 - t0) * 1e3:.0f} ms / {(t2 - t1) * 1e3:.0f} ms")
    return 0


def _cmd_mask(args: argparse.Namespace) -> int:
    vocab = load_vocab(args.vocab)
    spec = _input(args)
    engine = get_engine(args.engine, vocab)
    t0 = time.perf_counter()
    compiled = engine.compile(engine_input(engine, spec, args.source))
    matcher = engine.matcher(compiled)
    t1 = time.perf_counter()
    prefix_ids = vocab.encode(args.prefix) if args.prefix else []
    n = matcher.accept_tokens(prefix_ids)
    if n != len(prefix_ids):
        print(f"prefix rejected at token {n}: {vocab.decode(prefix_ids[: n + 1])!r}", file=sys.stderr)
        return 1
    row = bm.allocate(vocab.size)
    t2 = time.perf_counter()
    info = matcher.fill_bitmask(row)
    t3 = time.perf_counter()
    ids = bm.allowed_ids(row[0], vocab.size)
    print(f"engine {args.engine}: compile {(t1 - t0) * 1e3:.1f} ms, mask {(t3 - t2) * 1e3:.1f} ms")
    print(f"allowed {info.allowed} of {vocab.size} tokens ({100 * info.allowed / vocab.size:.2f}%)"
          f"{', sliced' if info.sliced else ''}; accepting: {matcher.is_accepting()}")
    if matcher.error:
        print(f"matcher error: {matcher.error}")
    for t in ids[: args.show]:
        label = vocab.special_tokens.get(int(t)) or repr(vocab.token_bytes[int(t)])
        print(f"  {int(t):>7d}  {label}")
    if len(ids) > args.show:
        print(f"  ... {len(ids) - args.show} more")
    return 0


def _cmd_accepts(args: argparse.Namespace) -> int:
    text = args.text.encode("utf-8", "surrogateescape")  # an argument's bytes as given, UTF-8 or not
    ok = _grammar(args).accepts(text)
    print("accepted" if ok else "rejected")
    return 0 if ok else 1


def _cmd_audit(args: argparse.Namespace) -> int:
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    command = "masklab " + " ".join(shlex.quote(a) for a in (args.argv or []))
    df = run_audit(engines, args.data, vocab=args.vocab, out=args.out, samples=args.samples, seed=args.seed,
                   max_tokens=args.max_tokens, sampler=args.sampler, limit=args.limit, item_seed=args.item_seed,
                   timeout=args.timeout, jobs=args.jobs, backend=args.backend, address=args.address,
                   memory_limit_gb=args.memory_limit, options=_checked_options(args.option, engines),
                   progress=not args.quiet, command=command, skip_bad_items=args.skip_bad_items)
    table = audit_table(df)
    out = Path(args.out)
    table.to_csv(out / "audit.csv")
    dataset_table(df).to_csv(out / "datasets.csv")
    png, _ = plot_audit(df, out / "audit", title=f"Soundness audit: {args.samples} walks per schema, "
                                                 f"{args.sampler} sampler, {short_vocab(args.vocab)}")
    found = list(counterexamples(df))
    with (out / "counterexamples.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["engine", "item", "text", "message", "pointer"])
        w.writeheader()
        w.writerows(found)
    print(f"records in {out / 'audit.jsonl'}; per engine in audit.csv, per dataset in datasets.csv, "
          f"counterexamples in counterexamples.csv, figure {png}\n")
    print(table.to_string(float_format=lambda v: f"{v:.1f}"))
    if found:
        print("\nshortest counterexample per loosened item (first 20):")
        for c in found[:20]:
            text = c["text"] if len(c["text"]) <= 80 else c["text"][:77] + "..."
            print(f"  {c['engine']} {c['item']}: {text!r}: {c['message'][:120]}"
                  + (f" (at {c['pointer']})" if c["pointer"] else ""))
    return 0


def _cmd_schema_coverage(args: argparse.Namespace) -> int:
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


def _option_value(text: str) -> object:
    """A value as JSON reads it (``true``, ``3``, ``[...]``); ``True``/``False``/``None``
    in any case as the bool or None they spell; else the text."""
    spelled = {"true": True, "false": False, "none": None, "null": None}.get(text.strip().lower(), text)
    if spelled is not text:
        return spelled
    try:
        return json.loads(text)
    except ValueError:
        return text


def _checked_options(pairs: Sequence[str], engines: Sequence[str]) -> dict[str, dict[str, object]]:
    """:func:`_engine_options`, every engine's options checked before anything runs: an
    option for an engine not in the run, an unknown key or a value of the wrong type is
    an error here."""
    options = _engine_options(pairs)
    for name, opts in options.items():
        if name not in engines:
            raise MasklabError(f"--option for {name!r}, which is not among the engines ({', '.join(engines)})")
        check_options(name, opts)
    return options


def _engine_options(pairs: Sequence[str]) -> dict[str, dict[str, object]]:
    """``NAME.KEY=VALUE`` pairs (VALUE read as JSON when it parses) per engine name."""
    out: dict[str, dict[str, object]] = {}
    for pair in pairs:
        left, eq, value = pair.partition("=")
        name, dot, key = left.rpartition(".")
        if not eq or not dot or not name or not key:
            raise MasklabError(f"--option {pair!r}: expected ENGINE.KEY=VALUE, e.g. peer:xgrammar.strict_mode=false")
        out.setdefault(name, {})[key] = _option_value(value)
    return out


def default_bench_engines() -> list[str]:
    """Every installed engine except ``naive`` (the oracle checks every token per mask:
    too slow for a real vocabulary, it belongs in the tests)."""

    return [e for e in available_engines() if e != "naive"]


def _cmd_bench(args: argparse.Namespace) -> int:
    engines = [e.strip() for e in args.engines.split(",") if e.strip()] if args.engines else default_bench_engines()
    command = "masklab " + " ".join(shlex.quote(a) for a in (args.argv or []))
    timeout = args.timeout if args.timeout is not None else (30.0 if args.quick else 60.0)
    df = run_bench(engines, args.data, vocab=args.vocab, out=args.out, limit=args.limit, timeout=timeout,
                   jobs=args.jobs, seed=args.seed, quick=args.quick, options=_checked_options(args.option, engines),
                   source=args.source, memory_limit_gb=args.memory_limit, progress=not args.quiet,
                   command=command, direct_check=args.direct_check, drafts=args.draft, walks=args.walks,
                   backend=args.backend, address=args.address, skip_bad_items=args.skip_bad_items)
    print(f"records in {Path(args.out) / 'records.jsonl'}")
    if args.direct_check and len(df):
        wanted = set(zip(df["engine"], df["item"], strict=True))
        recs = [r for r in read_records(args.out) if (r["engine"], r["item"]) in wanted]
        print("\nmasklab's times against the engines called directly (µs; TTFM ms):")
        print(direct_markdown(direct_table(recs)))
    if args.report:
        print(f"report in {write_report([args.out])}")
    if len(engines) > 1 and len(df):
        _warn_comparability([args.out])
    # last: per engine its statuses and the first reasons of what it did not measure
    records = df.to_dict("records") if len(df) else []
    print("\n".join(["", "summary:", *summary_lines(records, engines)] if records else ["no items were run"]))
    return 0  # a completed run, whatever its items' statuses (see the command's epilog)


_SKIP_BAD_HELP = ("leave out the items the command cannot judge (no test instances, where it judges items by them; "
                  "a schema its draft's meta-schema rejects), named in a note, instead of refusing the run "
                  "(MaskBench has 195 items without tests and one invalid schema)")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _draft_lengths(text: str) -> list[int]:
    """``--draft 1,2,4,8,16``: draft lengths, each >= 1."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"draft lengths are integers separated by commas, got {text!r}") from None
    if not values or any(v < 1 or v > MAX_DRAFT for v in values):
        raise argparse.ArgumentTypeError(f"draft lengths must be between 1 and {MAX_DRAFT}, got {text!r}")
    return sorted(set(values))


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _versions(dists: Sequence[str]) -> dict[str, str | None]:
    """Installed versions of ``dists`` (None where absent), for a run's record."""

    out: dict[str, str | None] = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = None
    return out


def _chat_folder(chat: str, model: str, vocab: str) -> str:
    """The folder whose chat template ``--chat`` means: its value, else the model's
    checkpoint folder, else the folder of an ``hf:`` vocabulary."""

    if chat != "auto":
        return chat
    if not model.startswith("random:") and Path(model).is_dir():
        return model
    if vocab.startswith("hf:"):
        return vocab[3:]
    raise ModelError(f"--chat needs a FOLDER: the model {model} is no checkpoint folder and the vocabulary "
                     f"{vocab} is no hf: tokenizer")


def _cmd_generate(args: argparse.Namespace) -> int:
    with run_folder_lock(args.out):  # one generate run per output folder (toolkit.bench.runlock)
        return _generate(args)


def _generate(args: argparse.Namespace) -> int:
    names = [e.strip() for part in args.engine for e in part.split(",") if e.strip()]
    if args.baseline_groups is not None and not args.shared_baseline:
        print("masklab: --baseline-groups is for --shared-baseline (the interleaved baseline decodes each batch)",
              file=sys.stderr)
        return 2
    vocab = load_vocab(args.vocab)
    items = select_items(args.data, args.limit, args.shuffle, vocab.name)
    options = _checked_options(args.option, names)
    if args.prompt is None or args.prompt == "default":
        prompt = DEFAULT_PROMPT
    elif args.prompt == "spec":
        prompt = SPEC_PROMPT
    elif args.prompt.startswith("@"):
        prompt = Path(args.prompt[1:]).read_text(encoding="utf-8")  # OSError: main says which file
    else:
        prompt = args.prompt
    chat = load_chat_template(_chat_folder(args.chat, args.model, args.vocab), vocab) if args.chat else None
    engines = {name: get_engine(name, vocab, **options.get(name, {})) for name in names}
    if any(i.kind == "schema" for i in items):
        import jsonschema  # noqa: F401 - outputs are checked with it: missing, say so before the model loads
    lm = load_model(args.model, vocab, device=args.device, dtype=args.dtype, seed=args.seed, cache=args.cache,
                    compile=args.compile)
    meta = {"command": "masklab " + " ".join(shlex.quote(a) for a in (args.argv or [])),
            "model": lm.describe(), "vocab": {"spec": args.vocab, "size": vocab.size},
            "data": str(args.data or embedded_dir()), "items": [i.name for i in items], "shuffle": args.shuffle, "max_tokens": args.max_tokens,
            "prompt": prompt, "chat": None if chat is None else chat.source, "temperature": args.temperature, "seed": args.seed, "machine": machine_info(),
            "versions": _versions(("torch", "transformers", "numpy", "masklab"))}
    for note in lm.notes:
        print(f"note: {note}")

    modes = {"off": [False], "on": [True], "both": [False, True]}[args.jump_forward]
    if any(modes) and args.loop != "pipelined":
        print("masklab: --jump-forward runs in the pipelined loop (--loop pipelined)", file=sys.stderr)
        return 2
    cols = ["engine", "batch", "sequences", "tokens_per_s", "unconstrained_tokens_per_s", "overhead_pct",
            "forward_ms", "unconstrained_forward_ms", "host_overhead_ms", "mask_max_ms", "wait_ms", "apply_ms", "ttfm_ms_p50", "valid",
            "invalid", "unchecked", "unfinished", "bad_prefix", "outside_grammar", "compile_error",
            "prompt_too_long", "forced_tokens"] + (["jumped_per_sequence", "steps_saved_pct", "speedup_pct"]
                                                   if any(modes) else [])
    summaries: list[dict] = []
    compiled: dict[str, dict] = {name: {} for name in engines}  # --compile-once: kept between batch sizes
    out_root = Path(args.out)
    # batch by batch (in the order given), each batch size's baseline just before its runs,
    # and the table of every finished run rewritten after each: a sweep cut short keeps
    # whole batch sizes and its table
    for batch in args.batch:
        baseline = args.unconstrained_baseline
        if args.shared_baseline:  # once per batch size, shared by the engines
            baseline = unconstrained(lm, vocab, items, batch=batch, max_tokens=args.max_tokens,
                                     temperature=args.temperature, seed=args.seed, prompt=prompt, chat=chat,
                                     max_groups=args.baseline_groups, loop=args.loop)
            print(f"unconstrained batch {batch}: {baseline.tokens / baseline.wall_s:.1f} tokens/s")
        for (name, engine), jump in itertools.product(engines.items(), modes):
            label = name + (" +jump" if jump else "")
            run = generate(engine, lm, vocab, items, batch=batch, max_tokens=args.max_tokens,
                           temperature=args.temperature, seed=args.seed, baseline=baseline,
                           prompt=prompt, apply=args.apply, compare_kernels=args.compare_kernels,
                           compile_timeout=args.compile_timeout or None, chat=chat,
                           compiled=compiled[name] if args.compile_once else None,
                           loop=args.loop, threads=args.threads, jump_forward=jump)
            folder = name.replace(":", "-") + ("+jump" if jump else "")
            out = write_run(run, out_root / folder / f"batch-{batch}",
                            {**meta, "engine": name, "engine_info": engine_info(engine, options.get(name, {})),
                             "batch": batch, "compile_once": args.compile_once, "jump_forward": jump,
                             "baseline_groups": args.baseline_groups if args.shared_baseline else None})
            summaries.append({"engine": label, **run.summary})
            pd.DataFrame(summaries).to_csv(out_root / "summary.csv", index=False)
            print(f"{label} batch {batch}: {out}")
            print("  " + pd.DataFrame(summaries[-1:])[cols].round(3).to_string(index=False).replace("\n", "\n  "))
            for k in run.kernels:
                state = (f"{k['ms_p50']:.3f} ms, same logits as torch: {k['equal']}" if k["available"]
                         else f"unavailable ({k['error']})")
                print(f"  apply kernel {k['kernel']}: {state}")
    print(pd.DataFrame(summaries)[cols].round(3).to_string(index=False))
    print(f"written to {out_root} (summary.csv; a folder per engine and batch size)")
    return 1 if any(s["invalid"] or s["rejected"] or s["error"] or s["bad_prefix"] for s in summaries) else 0


def _cmd_report(args: argparse.Namespace) -> int:
    sweeps = [d for d in args.dirs if is_sweep(d)]
    if sweeps:
        if len(args.dirs) > 1:
            raise MasklabError("a sweep folder is reported alone: masklab report SWEEP [--axis AXIS]")
        path = write_sweep_report(sweeps[0], out=args.out, axis=args.axis)
        print(path.read_text(encoding="utf-8"))
        print(f"written to {path.parent}")
        return 0
    if args.axis != "vocab":
        raise MasklabError("--axis is for a sweep folder (masklab sweep)")
    path = write_report(args.dirs, out=args.out, all_items=args.all_items, sizes=args.sizes)
    print(path.read_text(encoding="utf-8"))
    print(f"written to {path.parent}")
    _warn_comparability(args.dirs)
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    sweep = load_sweep(args.spec)
    command = "masklab " + " ".join(shlex.quote(a) for a in (args.argv or []))
    out = run_sweep(sweep, args.out, progress=not args.quiet, command=command,
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


def _warn_comparability(dirs: Sequence[str]) -> None:
    """Say on stderr what makes the engines of these bench runs not like for like."""

    bench = [d for d in dirs if records_file(d).is_file()]
    if not bench:
        return
    for w in comparability_warnings(load_runs(bench), limit=3):
        print(f"warning: {w}", file=sys.stderr)


def _cmd_agree(args: argparse.Namespace) -> int:
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
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


def _cmd_diagnose_rejects(args: argparse.Namespace) -> int:
    table = grammar_verdicts(args.run, args.engine, args.time_limit or None)
    counts = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    items = table["item"].nunique() if len(table) else 0
    print(f"{args.engine} in {args.run}: {len(table)} rejected valid instance(s) in {items} item(s); "
          + ", ".join(f"{v}: {n}" for v, n in counts.items()))
    for row in table[table["verdict"] != VERDICTS[0]].itertuples():
        print(f"  {row.item} case {row.case}: {row.verdict}")
    return 0


def _cmd_diagnose_late_match(args: argparse.Namespace) -> int:
    out = late_matches(args.run, args.ours, args.peer)
    for item, data in out.pop("unexplained_tokens"):
        print(f"unexplained: {item} {data!r}")
    print(json.dumps(out))
    return 0 if out["unexplained"] == 0 else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="masklab", description="Compare token-mask strategies for constrained decoding.")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error (default: one line)")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("engines", help="list the registered engines").set_defaults(func=_cmd_engines)

    v = sub.add_parser("vocab", help="summarize a vocabulary")
    v.add_argument("spec", nargs="?", default="tekken", help="tekken | llama3:PATH | hf:PATH (default: tekken)")
    v.set_defaults(func=_cmd_vocab)

    def grammar_args(sp: argparse.ArgumentParser) -> None:
        g = sp.add_mutually_exclusive_group(required=True)
        for fmt in formats():  # every registered input format (toolkit.grammar.inputs)
            g.add_argument(fmt.flag, dest=_dest(fmt), metavar={"file": "FILE", "text": "TEXT"}.get(fmt.arg, "FILE|JSON"),
                           help=fmt.help)
        suffixes = ", ".join(f"{x} ({f.name})" for f in formats() for x in f.suffixes)
        g.add_argument("--grammar", metavar="FILE", help=f"a grammar file of the format its suffix names: {suffixes}")

    m = sub.add_parser("mask", help="compute one mask after a prefix")
    m.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    m.add_argument("--engine", default="naive", help="engine name (default: naive)")
    m.add_argument("--prefix", default="", help="text already generated (tokenized canonically)")
    m.add_argument("--show", type=int, default=20, help="how many allowed tokens to list")
    m.add_argument("--source", choices=SOURCES, default="native",
                   help="native: the engine reads a format it declares itself; grammar: masklab's reading (default: native)")
    grammar_args(m)
    m.set_defaults(func=_cmd_mask)

    a = sub.add_parser("audit", help="is each engine's language inside the schema? random walks through its masks, "
                                    "every output validated with jsonschema")
    a.add_argument("--engines", required=True, help="comma-separated engine names")
    a.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets)")
    a.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    a.add_argument("--samples", type=_positive_int, default=DEFAULT_SAMPLES,
                   help=f"random walks per engine and schema (default {DEFAULT_SAMPLES})")
    a.add_argument("--max-tokens", type=_positive_int, default=DEFAULT_MAX_TOKENS,
                   help=f"a walk's length budget (default {DEFAULT_MAX_TOKENS})")
    a.add_argument("--seed", type=int, default=0, help="the walks' seed (default 0)")
    a.add_argument("--limit", type=_positive_int, default=None, help="only the first N schemas (after --item-seed)")
    a.add_argument("--item-seed", type=int, default=None, help="shuffle the schemas with this seed before --limit")
    a.add_argument("--timeout", type=float, default=120.0,
                   help="seconds per engine and schema: compile, walks and invalid instances (default 120)")
    a.add_argument("--sampler", choices=SAMPLERS, default="uniform",
                   help="how a walk draws among the allowed tokens: uniform (each token alike, default), branch "
                        "(each first byte alike: rare branches as often as common ones) or mixed (odd walks by branch)")
    a.add_argument("--jobs", type=_positive_int, default=1,
                   help="workers side by side (default 1: this process); more run worker processes, killed at "
                        "the time or memory limit")
    a.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="where the workers run: processes on this machine (default) or Ray actors ([cluster])")
    a.add_argument("--address", default=None, metavar="ADDR", help="with --backend ray: join this Ray cluster")
    a.add_argument("--memory-limit", type=float, default=None, metavar="GB",
                   help="resident memory per worker before it is killed (default: 80%% of RAM / jobs)")
    a.add_argument("-o", "--option", action="append", default=[], metavar="ENGINE.KEY=VALUE",
                   help="an engine option, e.g. llguidance.spelling=llguidance (repeatable)")
    a.add_argument("--skip-bad-items", action="store_true", help=_SKIP_BAD_HELP)
    a.add_argument("--out", default="results/audit", help="run folder; an existing one resumes (default: results/audit)")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=_cmd_audit)

    c = sub.add_parser("schema-coverage", help="JSON Schema compiler coverage on a MaskBench-format dataset")
    c.add_argument("--data", required=True, help="a MaskBench file or folder")
    c.add_argument("--limit", type=int, default=None, help="check only the first N schemas")
    c.add_argument("--timeout", type=float, default=30.0, help="seconds per schema")
    c.add_argument("--out", default=None, help="write per-schema results as CSV")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.add_argument("--check-lark", action="store_true", help="also validate to_lark() with llguidance")
    c.add_argument("--skip-bad-items", action="store_true", help=_SKIP_BAD_HELP)
    c.add_argument("--property-order", choices=PROPERTY_ORDERS, default="schema",
                   help="object members in the schema's order (default, as llguidance and xgrammar) or in any")
    c.set_defaults(func=_cmd_schema_coverage)

    b = sub.add_parser(
        "bench", help="run engines on a MaskBench-format dataset (TTFM, TBM, validity)",
        epilog="It ends with a line per engine counting its items per status, and the first reasons of its "
               "compile errors, crashes and timeouts (every record, detail included, is in OUT/records.jsonl). "
               "Exit status: 0 when the run completed, whatever its items' statuses (an engine refusing an "
               "item, crashing or timing out on it is a measurement, recorded); 2 when the run cannot start "
               "or go on (a bad argument, an engine that cannot be built, a dataset file not in the MaskBench "
               "format or an item it cannot judge, an --out folder holding a run with other settings or "
               "another run is writing); 130 when interrupted (the run resumes where it stopped).")
    b.add_argument("--engines", default=None,
                   help="comma-separated engine names (default: every installed engine but naive)")
    b.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets/)")
    b.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    b.add_argument("--out", default="results/bench", help="run folder; an existing run resumes (default: results/bench)")
    b.add_argument("--limit", type=int, default=None, help="only the first N items (after --seed's shuffle)")
    b.add_argument("--timeout", type=float, default=None,
                   help="seconds per engine and item, compile and instances (default 60, 30 with --quick)")
    b.add_argument("--jobs", type=int, default=1,
                   help="workers side by side (default 1): processes, or Ray actors of one CPU each")
    b.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="where the workers run: worker processes on this machine (default), or Ray actors "
                        "(the [cluster] extra): a local Ray instance, or the cluster at --address")
    b.add_argument("--address", default=None, metavar="ADDR",
                   help="with --backend ray: join this Ray cluster (HEAD:6379, ray://HEAD:10001, auto) instead "
                        "of starting a local instance")
    b.add_argument("--seed", type=int, default=None, help="shuffle the items with this seed before --limit")
    b.add_argument("--quick", action="store_true", help="at most 3 valid and 3 invalid instances per item (harness.QUICK_CASES)")
    b.add_argument("--source", choices=SOURCES, default="native",
                   help="native: schemas go to each engine's own compiler; grammar: every engine gets "
                        "Grammar.from_json_schema (default: native)")
    b.add_argument("-o", "--option", action="append", default=[], metavar="ENGINE.KEY=VALUE",
                   help="an engine option, e.g. peer:xgrammar.strict_mode=false (repeatable)")
    b.add_argument("--memory-limit", type=float, default=None, metavar="GB",
                   help="resident memory per worker before it is killed (default: 80%% of RAM / jobs)")
    b.add_argument("--direct-check", action="store_true",
                   help="also call each peer directly through its own API on the same walks, and print "
                        "masklab's times against those (toolkit.report.direct)")
    b.add_argument("--draft", type=_draft_lengths, default=[], metavar="K[,K...]",
                   help="also time speculative draft masks: at every 4th step of each valid instance, the "
                        "masks of a draft of the next K tokens (fill_draft_bitmasks) against K sequential fill "
                        "+ accept steps and a rollback, e.g. --draft 1,2,4,8,16 (report: cost against K)")
    b.add_argument("--walks", type=_positive_int, default=1, metavar="W",
                   help="walk each item's valid instances W times on one compile (default 1): the later walks "
                        "meet a warm grammar, as a server's later requests do; the report shows first and "
                        "later walks apart")
    b.add_argument("--skip-bad-items", action="store_true", help=_SKIP_BAD_HELP)
    b.add_argument("--report", action="store_true", help="write the report into the run folder when done")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_cmd_bench)

    g = sub.add_parser("generate", help="decode with a model, masks computed during the forward pass")
    g.add_argument("--engine", required=True, nargs="+",
                   help="the engines computing the masks (several: one run each, OUT/ENGINE/batch-B)")
    g.add_argument("--model", default="random:tiny",
                   help="checkpoint directory, random:NAME[:replay], or sim:FORWARD_MS[:LAUNCHES][:replay] (the "
                        "stand-in device for machines without a GPU, e.g. sim:8:300; :replay favours each item's "
                        "valid instance) (default: random:tiny)")
    g.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    g.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    g.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on cuda)")
    g.add_argument("--cache", default="dynamic", choices=("dynamic", "static"),
                   help="the KV cache: transformers' dynamic one (default), or static (fixed shapes)")
    g.add_argument("--compile", nargs="?", const="reduce-overhead", default=None, metavar="MODE",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                   help="torch.compile the one-token steps (implies --cache static); MODE default: "
                        "reduce-overhead (CUDA graphs on a GPU: a serving engine's step time, which "
                        "leaves less time to hide the masks in); compiled before anything is timed")
    g.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets/)")
    g.add_argument("--limit", type=_positive_int, default=None, help="only the first N items (after --shuffle)")
    g.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                   help="shuffle the items with this seed before --limit (a sample across the dataset)")
    g.add_argument("--batch", type=_positive_int, nargs="+", default=[1], help="batch sizes, one run each (default: 1)")
    g.add_argument("--max-tokens", type=_positive_int, default=256, help="tokens per sequence at most (default 256)")
    g.add_argument("--temperature", type=_non_negative_float, default=0.0, help="0: greedy (default)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--prompt", default=None, metavar="TEXT|@FILE|spec|default",
                   help="the prompt template: {spec} is replaced by the item's schema, grammar or regex, {kind} "
                        "by what it is, {name} by its name; @FILE reads it from a file; 'spec' puts the spec "
                        "in a short instruction (what a real checkpoint needs); default: the same short text "
                        "for every item.  The model's BOS token comes first when it has one; prompts of "
                        "different lengths are left-padded")
    g.add_argument("--chat", nargs="?", const="auto", default=None, metavar="FOLDER",
                   help="send each prompt through a chat template (one user message, then the generation "
                        "prompt): the tokenizer's in FOLDER (its tokenizer_config.json); without FOLDER, the "
                        "model's checkpoint folder, or the folder of an hf: vocabulary")
    g.add_argument("--unconstrained-baseline", action="store_true",
                   help="also decode without masks after each batch, as many steps (per engine, interleaved "
                        "so drift hits both alike), for tokens/s and the overhead")
    g.add_argument("--shared-baseline", action="store_true",
                   help="instead, decode without masks once per batch size (max-tokens steps per batch) and "
                        "share it between the engines: half the device time for a sweep, more exposed to drift")
    g.add_argument("--baseline-groups", type=_positive_int, default=None, metavar="N",
                   help="with --shared-baseline: decode only the first N batches of each batch size without "
                        "masks (an unconstrained step does not depend on its tokens; default: all)")
    g.add_argument("--compile-once", action="store_true",
                   help="compile each item once per engine and keep it for the other batch sizes (as a server "
                        "keeps compiled grammars): TTFM is the first compile plus each sequence's first mask; "
                        "default: every run compiles its items")
    g.add_argument("--apply", default="torch", choices=("torch", "xgrammar", "llguidance"),
                   help="the kernel applying masks to the logits (default: torch)")
    g.add_argument("--loop", default="pipelined", choices=("pipelined", "serial"),
                   help="pipelined (default): a serving engine's loop, the next forward pass launched before "
                        "the sampled ids are accepted, accept + fill in one batch call on the mask threads; "
                        "serial: masklab's earlier loop (a pool task per sequence, accepts one by one after "
                        "sampling), kept for comparison")
    g.add_argument("--threads", type=_positive_int, default=None, metavar="N",
                   help="mask threads of a batch (default: the cores there are, at most the batch size)")
    g.add_argument("--jump-forward", nargs="?", const="on", default="off", choices=("off", "on", "both"),
                   help="jump-forward decoding: the tokens a grammar forces after each sampled token are fed "
                        "without sampling, with it, in one multi-token forward pass; 'both' runs each engine "
                        "without and with it (default: off; the flag alone: on)")
    g.add_argument("--compare-kernels", action=argparse.BooleanOptionalAction, default=True,
                   help="time every apply kernel on a real mask of each run (default: yes)")
    g.add_argument("-o", "--option", action="append", default=[], metavar="ENGINE.KEY=VALUE",
                   help="an engine option (repeatable)")
    g.add_argument("--compile-timeout", type=_non_negative_float, default=60.0, metavar="SECONDS",
                   help="an engine compiling one item longer than this: that item is a compile_error and the "
                        "run goes on (default 60; 0: no limit)")
    g.add_argument("--out", default="results/generate",
                   help="output folder: OUT/ENGINE/batch-B/ per run (default: results/generate)")
    g.set_defaults(func=_cmd_generate)

    r = sub.add_parser("report", help="tables and figures from bench and generate run folders")
    r.add_argument("dirs", nargs="+",
                   help="bench run folders (holding records.jsonl) and folders with generate runs in or below them")
    r.add_argument("--out", default=None, help="where to write (default: the first run folder)")
    r.add_argument("--all-items", action="store_true",
                   help="time each engine over its own passing items (default: the items every engine passed)")
    r.add_argument("--sizes", action="store_true",
                   help="add size.png: TTFM and memory against grammar size (reads every item's grammar again)")
    r.add_argument("--axis", choices=AXES, default="vocab",
                   help="a sweep folder: the grid axis the figures run along (default vocab: against the "
                        "vocabulary size)")
    r.set_defaults(func=_cmd_report)

    sw = sub.add_parser("sweep", help="a benchmark grid (engines x vocabularies x option sets x datasets) "
                                      "from a TOML spec, as one resumable run folder")
    sw.add_argument("spec", help="the sweep spec (TOML; see toolkit.bench.sweep)")
    sw.add_argument("--out", required=True, help="the sweep folder (an existing one resumes)")
    sw.add_argument("--report", action="store_true", help="write the sweep report into the folder when done")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.set_defaults(func=_cmd_sweep)

    ag = sub.add_parser("agree", help="do two engines of a bench run compute the same masks? (exit 1 if not)")
    ag.add_argument("run", help="a bench run folder holding both engines' records")
    ag.add_argument("--engines", required=True, metavar="A,B", help="the two engines to compare")
    ag.add_argument("--out", default=None, help="where to write the CSV/JSON (default: the run folder)")
    ag.add_argument("--show", type=int, default=20, help="how many differing items to list")
    ag.add_argument("--explain", type=int, default=0, metavar="N",
                    help="re-run the first N differing items and list the tokens only one engine allows")
    ag.add_argument("--classify", action="store_true",
                    help="re-run every differing item and sort the tokens only one engine allows into byte-level "
                         "classes, an example each (differences-A-vs-B.csv)")
    ag.set_defaults(func=_cmd_agree)

    dg = sub.add_parser("diagnose", help="why an engine differs: its rejected instances, outlines-core's late matches")
    dsub = dg.add_subparsers(dest="diagnostic", required=True)
    rj = dsub.add_parser("rejects", help="the valid instances ENGINE rejected: does the item's own grammar reject them too?")
    rj.add_argument("run", help="a bench run folder")
    rj.add_argument("--engine", required=True, help="the engine whose validation errors to check")
    rj.add_argument("--time-limit", type=float, default=30.0, metavar="S",
                    help="seconds for the grammar's check of one instance (0: none; default 30)")
    rj.set_defaults(func=_cmd_diagnose_rejects)
    lm = dsub.add_parser("late-match", help="tokens only outlines allows, against outlines-core's documented miss "
                         "(exit 1 if one is unexplained)")
    lm.add_argument("run", help="a bench run folder holding both engines' records")
    lm.add_argument("--ours", default="outlines", help="default: outlines")
    lm.add_argument("--peer", default="peer:outlines-core", help="default: peer:outlines-core")
    lm.set_defaults(func=_cmd_diagnose_late_match)

    a = sub.add_parser("accepts", help="does the grammar accept TEXT? (exit 0 yes, 1 no)")
    grammar_args(a)
    a.add_argument("text")
    a.set_defaults(func=_cmd_accepts)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("masklab: interrupted (a bench run resumes where it stopped)", file=sys.stderr)
        return 130
    except (MasklabError, OSError, ValueError, KeyError, TypeError) as e:
        # masklab's errors, a missing file, a bad option: one line (--debug: the traceback)
        if args.debug:
            raise
        what = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"masklab: {type(e).__name__}: {what}", file=sys.stderr)
        return 2
