"""``masklab generate``: decode with a model (or the stand-in device), masks computed
during the forward pass; the grid of engines x batch sizes is
:func:`toolkit.decode.runs.run_generate`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from strategies import get_engine
from toolkit.bench.runlock import run_folder_lock
from toolkit.cli.common import (
    add_option_arg,
    checked_options,
    command_line,
    engine_list,
    non_negative_float,
    positive_int,
)
from toolkit.core.bitmask import APPLY_KERNELS
from toolkit.core.errors import DEFAULT_COMPILE_TIMEOUT
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import embedded_dir, select_items
from toolkit.data.provenance import provenance
from toolkit.decode.chunks import chunk_policy
from toolkit.decode.generate import DEFAULT_PROMPT, LOOPS, SCHEDULES, SPEC_PROMPT
from toolkit.decode.model import CACHES, COMPILE_MODES, ModelError, load_chat_template, load_model
from toolkit.decode.runs import (
    JUMP_COLUMNS,
    JUMP_MODES,
    SUMMARY_COLUMNS,
    check_grid,
    run_generate,
)

__all__ = ["configure"]


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of ``generate`` to its parser."""
    p.add_argument("--engine", required=True, nargs="+",
                   help="the engines computing the masks (several: one run each, OUT/ENGINE/batch-B)")
    _model_args(p)
    _data_args(p)
    _baseline_args(p)
    _loop_args(p)
    add_option_arg(p)
    p.add_argument("--out", default="results/generate",
                   help="output folder: OUT/ENGINE/batch-B/ per run (default: results/generate)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_generate_locked)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="random:tiny",
                   help="checkpoint directory, random:NAME[:replay], or "
                        "sim:FORWARD_MS[:LAUNCHES][:chunk=C][:prefill=P][:replay] (the stand-in device for "
                        "machines without a GPU, e.g. sim:8:300; :chunk=C prices a jump-forward chunk step at "
                        "FORWARD_MS * (1 + C * batch), default 0.005 as an H200 ran them; :prefill=P gives a "
                        "refill's eager prompt pass P launches, default LAUNCHES (an H200's took 28-38 ms, about "
                        "30000); :replay favours each item's valid instance) (default: random:tiny)")
    p.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (bf16 on cuda)")
    p.add_argument("--cache", default=CACHES[0], choices=CACHES,
                   help="the KV cache: transformers' dynamic one (default), or static (fixed shapes)")
    p.add_argument("--compile", nargs="?", const="reduce-overhead", default=None, metavar="MODE",
                   choices=COMPILE_MODES,
                   help="torch.compile the one-token steps (implies --cache static); MODE default: "
                        "reduce-overhead (CUDA graphs on a GPU: a serving engine's step time, which "
                        "leaves less time to hide the masks in); compiled before anything is timed")
    p.add_argument("--compile-timeout", type=non_negative_float, default=DEFAULT_COMPILE_TIMEOUT, metavar="SECONDS",
                   help=f"an engine compiling one item longer than this: that item is a compile_error and the "
                        f"run goes on (default {DEFAULT_COMPILE_TIMEOUT:g}; 0: no limit)")


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=None, help="a MaskBench file or folder (default: the embedded datasets/)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N items (after --shuffle)")
    p.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                   help="shuffle the items with this seed before --limit (a sample across the dataset)")
    p.add_argument("--batch", type=positive_int, nargs="+", default=[1], help="batch sizes, one run each (default: 1)")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="R",
                   help="the whole grid R times, pass after pass (OUT/ENGINE/batch-B/repeat-r); the report gives "
                        "medians over the repeats and warns where their spread exceeds a difference it shows")
    p.add_argument("--max-tokens", type=positive_int, default=256, help="tokens per sequence at most (default 256)")
    p.add_argument("--temperature", type=non_negative_float, default=0.0, help="0: greedy (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", default=None, metavar="TEXT|@FILE|spec|default",
                   help="the prompt template: {spec} is replaced by the item's schema, grammar or regex, {kind} "
                        "by what it is, {name} by its name; @FILE reads it from a file; 'spec' puts the spec "
                        "in a short instruction (what a real checkpoint needs); default: the same short text "
                        "for every item.  The model's BOS token comes first when it has one; prompts of "
                        "different lengths are left-padded")
    p.add_argument("--chat", nargs="?", const="auto", default=None, metavar="FOLDER",
                   help="send each prompt through a chat template (one user message, then the generation "
                        "prompt): the tokenizer's in FOLDER (its tokenizer_config.json); without FOLDER, the "
                        "model's checkpoint folder, or the folder of an hf: vocabulary")


def _baseline_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--unconstrained-baseline", action="store_true",
                   help="also decode without masks after each batch, its items to their end (per engine, interleaved "
                        "so drift hits both alike), for tokens/s and the overhead")
    p.add_argument("--shared-baseline", action="store_true",
                   help="instead, decode without masks once per batch size (max-tokens steps per batch) and "
                        "share it between the engines: half the device time for a sweep, more exposed to drift")
    p.add_argument("--baseline-groups", type=positive_int, default=None, metavar="N",
                   help="with --shared-baseline: decode only the first N batches of each batch size without "
                        "masks (an unconstrained step does not depend on its tokens; default: all)")
    p.add_argument("--compile-once", action="store_true",
                   help="compile each item once per engine and keep it for the other batch sizes (as a server "
                        "keeps compiled grammars): TTFM is the first compile plus each sequence's first mask; "
                        "default: every run compiles its items")


def _loop_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--apply", default=APPLY_KERNELS[0], choices=APPLY_KERNELS,
                   help="the kernel applying masks to the logits (default: torch)")
    p.add_argument("--loop", default=LOOPS[0], choices=LOOPS,
                   help="pipelined (default): a serving engine's loop, the next forward pass launched before "
                        "the sampled ids are accepted, accept + fill in one batch call on the mask threads; "
                        "serial: masklab's earlier loop (a pool task per sequence, accepts one by one after "
                        "sampling), kept for comparison")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="mask threads of a batch (default: the cores there are, at most the batch size)")
    p.add_argument("--schedule", nargs="+", default=["auto"], choices=(*SCHEDULES, "auto"), metavar="SCHEDULE",
                   help="how the batch's slots are filled: static (a batch of items until its longest sequence "
                        "ends), continuous (a slot takes the next item as soon as its sequence ends, as a server "
                        "does; its prompt pass runs before the step's draw), continuous-beside (the prompt pass "
                        "launched after the step's forward pass, beside it; the new sequence draws from the next "
                        "step), auto (default: continuous when there are more items than slots); several: each "
                        "batch size under each, in OUT/ENGINE/batch-B-SCHEDULE")
    p.add_argument("--jump-forward", nargs="?", const="on", default="off", choices=tuple(JUMP_MODES),
                   help="jump-forward decoding: the tokens a grammar forces after each sampled token are fed "
                        "without sampling, in one multi-token forward pass. 'overlap' finds them on the mask thread "
                        "while the device runs and feeds them the step after; 'lookahead' (what 'on' means) also "
                        "tables, beside the device, the run after each token a narrow mask allows, and feeds a "
                        "drawn token's run with it; 'inline' finds them before the launch and feeds them with the "
                        "sampled token (its work on the critical path); 'both': off and lookahead; 'all': the four "
                        "(default: off; the flag alone: on)")
    p.add_argument("--chunk-width", type=_chunk_width, default="auto", metavar="auto|all|N",
                   help="jump-forward (lookahead, overlap): how many tokens of a forced run one pass feeds. auto "
                        "(default): each step the width that writes the most tokens per second of the steps' "
                        "measured device time (a chunk pass costs more than a one-token pass on a GPU at large "
                        "batches), the rest of a cut run fed in the next passes; all: whole runs; N: at most N")
    p.add_argument("--compare-kernels", action=argparse.BooleanOptionalAction, default=True,
                   help="time every apply kernel on a real mask of each run (default: yes)")


def _chunk_width(text: str) -> str | int:
    """``--chunk-width``: auto, all or N >= 1 (argparse reports a bad value with its valid ones)."""
    try:
        return chunk_policy(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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


def _prompt(text: str | None) -> str:
    """``--prompt``: the template it names."""
    if text is None or text == "default":
        return DEFAULT_PROMPT
    if text == "spec":
        return SPEC_PROMPT
    if text.startswith("@"):
        return Path(text[1:]).read_text(encoding="utf-8")  # OSError: main says which file
    return text


def _generate_locked(args: argparse.Namespace) -> int:
    with run_folder_lock(args.out):  # one generate run per output folder (toolkit.bench.runlock)
        return _generate(args)


def _generate(args: argparse.Namespace) -> int:
    names = [e for part in args.engine for e in engine_list(part)]
    if args.baseline_groups is not None and not args.shared_baseline:
        print("masklab: --baseline-groups is for --shared-baseline (the interleaved baseline decodes each batch)",
              file=sys.stderr)
        return 2
    if args.chunk_width != "auto" and args.jump_forward in ("off", "inline"):
        print(f"masklab: --chunk-width applies to the lookahead and overlap schedules (--jump-forward on, both, "
              f"lookahead, overlap or all), not to --jump-forward {args.jump_forward}", file=sys.stderr)
        return 2
    baseline = "shared" if args.shared_baseline else "interleaved" if args.unconstrained_baseline else "none"
    check_grid(baseline, args.jump_forward, args.loop)
    vocab = load_vocab(args.vocab)
    items = select_items(args.data, args.limit, args.shuffle, vocab.name)
    options = checked_options(args.option, names)
    prompt = _prompt(args.prompt)
    chat = load_chat_template(_chat_folder(args.chat, args.model, args.vocab), vocab) if args.chat else None
    engines = {name: get_engine(name, vocab, **options.get(name, {})) for name in names}
    if any(i.kind == "schema" for i in items):
        import jsonschema  # noqa: F401 - outputs are checked with it: missing, say so before the model loads
    lm = load_model(args.model, vocab, device=args.device, dtype=args.dtype, seed=args.seed, cache=args.cache,
                    compile=args.compile)
    meta = {"command": command_line(args), "model": lm.describe(), "vocab": {"spec": args.vocab, "size": vocab.size},
            "data": str(args.data or embedded_dir()), "items": [i.name for i in items], "shuffle": args.shuffle,
            "max_tokens": args.max_tokens, "prompt": prompt, "chat": None if chat is None else chat.source,
            "temperature": args.temperature, "seed": args.seed, **provenance(args.threads)}
    for note in lm.notes:
        print(f"note: {note}")
    table = run_generate(engines, lm, vocab, items, args.out, batches=args.batch, jump_forward=args.jump_forward,
                         baseline=baseline, baseline_groups=args.baseline_groups, compile_once=args.compile_once,
                         options=options, meta=meta, progress=not args.quiet, max_tokens=args.max_tokens,
                         temperature=args.temperature, seed=args.seed, prompt=prompt, chat=chat, apply=args.apply,
                         compare_kernels=args.compare_kernels, compile_timeout=args.compile_timeout or None,
                         loop=args.loop, threads=args.threads, repeat=args.repeat, chunk_width=args.chunk_width,
                         schedules=list(dict.fromkeys(args.schedule)))
    cols = [*SUMMARY_COLUMNS, *(JUMP_COLUMNS if args.jump_forward != "off" else ())]
    print(table.reindex(columns=cols).round(3).to_string(index=False))
    print(f"written to {args.out} (summary.csv; a folder per engine and batch size)")
    bad = any(r["invalid"] or r["rejected"] or r["error"] or r["bad_prefix"] for r in table.to_dict("records"))
    return 1 if bad else 0
