"""A grid of decoding runs: every engine at every batch size (with and without
jump-forward), each written to ``OUT/ENGINE/batch-B``, and ``OUT/summary.csv`` with a row
per run.  ``masklab generate`` is this function and its arguments; a notebook calls it as
it is::

    from toolkit.decode.runs import run_generate
    table = run_generate({"llguidance": engine}, lm, vocab, items, "/tmp/gen", batches=[1, 4])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import Item
from toolkit.data.provenance import engine_info
from toolkit.decode.generate import (
    GenerateRun,
    generate,
    resolve_schedule,
    unconstrained,
    write_run,
)
from toolkit.decode.loop import JUMP_SCHEDULES
from toolkit.decode.model import LoadedModel

__all__ = ["BASELINES", "JUMP_COLUMNS", "JUMP_MODES", "SUMMARY_COLUMNS", "check_grid", "jump_suffix", "run_generate"]

BASELINES = ("none", "interleaved", "shared")
"""How a grid measures the unconstrained decode: not at all; after each batch of each
engine, on its items (``generate(baseline=True)``, drift hits both alike); or once per
batch size, shared by the engines (:func:`~toolkit.decode.generate.unconstrained`)."""

JUMP_MODES: dict[str, tuple[str, ...]] = {"off": ("",), "on": (JUMP_SCHEDULES[0],), "both": ("", JUMP_SCHEDULES[0]),
                                          **{s: (s,) for s in JUMP_SCHEDULES}, "all": ("", *JUMP_SCHEDULES)}
"""``jump_forward``: the runs of each engine without and/or with jump-forward decoding,
each a schedule of :data:`~toolkit.decode.loop.JUMP_SCHEDULES` ("": off; "on" and "both"
take the first, ``lookahead``)."""


def jump_suffix(schedule: str | None) -> str:
    """What a jump-forward run adds to its engine's name: `` +jump`` (the default
    schedule), `` +jump-overlap``, `` +jump-inline``, nothing when off."""
    return "" if not schedule else " +jump" if schedule == JUMP_SCHEDULES[0] else f" +jump-{schedule}"

SUMMARY_COLUMNS = ("engine", "batch", "schedule", "sequences", "tokens_per_s", "unconstrained_tokens_per_s", "overhead_pct",
                   "forward_ms", "unconstrained_forward_ms", "host_overhead_ms", "mask_max_ms", "wait_ms", "apply_ms",
                   "ttfm_ms_p50", "valid", "invalid", "unchecked", "unfinished", "bad_prefix", "outside_grammar",
                   "compile_error", "prompt_too_long", "forced_tokens")
"""The columns a grid prints per run (``summary.csv`` holds every figure of the summary)."""
JUMP_COLUMNS: tuple[str, ...] = ("jumped_per_sequence", "steps_saved_pct", "speedup_pct")


def check_grid(baseline: str, jump_forward: str, loop: str) -> None:
    """A ``ValueError`` naming the setting when :func:`run_generate` cannot run this grid
    (called before a model loads)."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if jump_forward not in JUMP_MODES:
        raise ValueError(f"jump_forward must be one of {', '.join(JUMP_MODES)}, got {jump_forward!r}")
    if any(JUMP_MODES[jump_forward]) and loop != "pipelined":
        raise ValueError("--jump-forward runs in the pipelined loop (--loop pipelined)")


def run_generate(engines: Mapping[str, Any], lm: LoadedModel, vocab: Vocabulary, items: Sequence[Item],
                 out: str | Path, *, batches: Sequence[int] = (1,), jump_forward: str = "off",
                 baseline: str = "interleaved", baseline_groups: int | None = None, compile_once: bool = False,
                 options: Mapping[str, Mapping[str, Any]] | None = None, meta: Mapping[str, Any] | None = None,
                 log: Callable[[str], None] | None = print, progress: bool = False, repeat: int = 1,
                 schedules: Sequence[str] = ("auto",), **decode: Any) -> pd.DataFrame:
    """Decode ``items`` with each of ``engines`` (name -> engine) at each batch size of
    ``batches``, in that order; returns the summary table (a row per run).

    Each batch size's runs follow its shared baseline (``baseline="shared"``; only its
    first ``baseline_groups`` batches when given); ``compile_once`` keeps each engine's
    compiled items between batch sizes, as a server keeps compiled grammars.  Each run is
    written as soon as it ends (``OUT/ENGINE[+jump]/batch-B``, its metadata ``meta`` plus
    the engine, its ``options`` and the settings), and ``OUT/summary.csv`` is rewritten
    after each, so a grid cut short keeps its finished runs.  ``decode``: the keywords of
    :func:`~toolkit.decode.generate.generate` (``max_tokens``, ``temperature``, ``seed``,
    ``prompt``, ``chat``, ``apply``, ``loop``, ``threads``, ``compare_kernels``,
    ``compile_timeout``).  ``log``: where each run's line goes (None: nowhere);
    ``progress``: a bar of the sequences decoded, over the whole grid.  ``repeat``: the
    whole grid R times, one pass after another (an engine's repeats are a pass apart, never
    back to back), each run in ``.../batch-B/repeat-r`` with ``repeat`` in its metadata and
    its summary row; the report gives medians over the repeats and their spread.
    ``schedules``: each batch size's runs under each schedule
    (:func:`~toolkit.decode.generate.resolve_schedule`; several: ``batch-B-SCHEDULE``
    folders), the baseline in the same schedule."""
    check_grid(baseline, jump_forward, decode.get("loop", "pipelined"))
    if int(repeat) < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    say = log or (lambda _line: None)
    out_root, options = Path(out), options or {}
    summaries: list[dict[str, Any]] = []
    compiled: dict[str, dict[str, Any]] = {name: {} for name in engines}
    runs = len(engines) * len(JUMP_MODES[jump_forward])
    bar = tqdm(total=repeat * len(schedules) * sum(runs * batch * -(-len(items) // batch) for batch in batches),
               unit="seq",
               desc="generate", dynamic_ncols=True, disable=not progress)
    settings = {"compile_once": compile_once, "baseline_groups": baseline_groups if baseline == "shared" else None}
    loop = decode.get("loop", "pipelined")
    for rep, batch, sched in itertools.product(range(1, repeat + 1), batches, schedules):
        schedule = resolve_schedule(sched, len(items), batch, loop)
        shared = None
        if baseline == "shared":
            shared = unconstrained(lm, vocab, items, batch=batch, max_groups=baseline_groups, schedule=schedule,
                                   **{k: v for k, v in decode.items() if k in _BASELINE_KEYS})
            say(f"unconstrained batch {batch} ({schedule}): {shared.tokens / shared.wall_s:.1f} tokens/s")
        for (name, engine), jump in itertools.product(engines.items(), JUMP_MODES[jump_forward]):
            run = generate(engine, lm, vocab, items, batch=batch, jump_forward=jump, schedule=schedule,
                           baseline=shared if shared is not None else baseline == "interleaved",
                           compiled=compiled[name] if compile_once else None, on_batch=bar.update, **decode)
            # several schedules: each its own folder (one schedule keeps the plain batch-B)
            folder = (out_root / (name.replace(":", "-") + jump_suffix(jump).strip())
                      / (f"batch-{batch}" + (f"-{schedule}" if len(schedules) > 1 else "")))
            path = write_run(run, folder / f"repeat-{rep}" if repeat > 1 else folder,
                             {**(meta or {}), "engine": name, "engine_info": engine_info(engine, options.get(name, {})),
                              "batch": batch, "jump_forward": bool(jump), "jump_schedule": jump or None,
                              "repeat": rep, **settings})
            summaries.append({"engine": name + jump_suffix(jump), **run.summary, "schedule": schedule,
                              **({"repeat": rep} if repeat > 1 else {})})
            pd.DataFrame(summaries).to_csv(out_root / "summary.csv", index=False)
            bar.clear()
            _log_run(say, summaries[-1], run, path, jump_forward != "off")
            bar.refresh()
    bar.close()
    return pd.DataFrame(summaries)


_BASELINE_KEYS = ("max_tokens", "temperature", "seed", "prompt", "chat", "loop")


def _log_run(say: Callable[[str], None], summary: dict[str, Any], run: GenerateRun, path: Path, jumps: bool) -> None:
    """A run's lines: where it went, its figures, its apply kernels."""
    cols = list(SUMMARY_COLUMNS) + (list(JUMP_COLUMNS) if jumps else [])
    say(f"{summary['engine']} batch {summary['batch']}: {path}")
    say("  " + pd.DataFrame([summary]).reindex(columns=cols).round(3).to_string(index=False).replace("\n", "\n  "))
    for k in run.kernels:
        state = (f"{k['ms_p50']:.3f} ms, same logits as torch: {k['equal']}" if k["available"]
                 else f"unavailable ({k['error']})")
        say(f"  apply kernel {k['kernel']}: {state}")

