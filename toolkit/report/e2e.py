"""End-to-end tables and figures from ``masklab generate`` runs (part of ``masklab report``).

A generate run folder (:func:`toolkit.decode.generate.write_run`) holds ``run.json`` (the
command, model, vocabulary, engine, batch size, the run's ``summary`` and, when made,
the ``apply_kernels`` comparison), ``steps.csv`` and ``sequences.jsonl``.
``masklab generate`` writes one per engine and batch size, ``OUT/ENGINE/batch-B/``;
:func:`find_generate_runs` finds them under any folder given.

* :func:`load_generate_runs` reads them: one row per run (engine x batch x setting),
  and one row per run x apply kernel;
* :func:`e2e_table` is the end-to-end table: tokens/s constrained and unconstrained,
  overhead %, the parts of a step (forward, mask, wait, apply, sample), TTFM and the
  outputs' statuses, per engine and batch size;
* :func:`kernel_table` compares the apply kernels (median time, same logits as the
  torch op) per device, dtype and batch size;
* :func:`plot_overhead` draws overhead % and tokens/s against the batch size, one line
  per engine, with the unconstrained tokens/s of each setup
  (:func:`unconstrained_references`); :func:`plot_step_parts` where a step's time goes;
* :func:`e2e_sections` writes all of it and returns the report's markdown.

Labels are :func:`~toolkit.report.style.engine_label`'s (``ours: llguidance``,
``llguidance 1.9.1``); when the runs differ in model, device, dtype,
apply kernel, forward pass or prompt, the differing settings are added
(``"llguidance (cuda, bfloat16)"``) and are the run's ``setup``.
A model with random weights is said so in every table title and figure.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, NullLocator

from toolkit.core.errors import MasklabError
from toolkit.decode.generate import DEFAULT_PROMPT, SPEC_PROMPT
from toolkit.decode.runs import jump_suffix
from toolkit.report.stats import DEFAULT_BOOT, estimates, with_intervals
from toolkit.report.style import (
    HATCHES,
    PALETTE,
    PAPER_LOOKS,
    Look,
    engine_label,
    engine_styles,
    figure_legend,
    finish_figure,
    get_look,
    new_figure,
    pdf_link,
    short_vocab,
    start_figure,
    to_markdown,
)

__all__ = [
    "find_generate_runs",
    "is_generate_run",
    "load_generate_runs",
    "unconstrained_references",
    "e2e_table",
    "noise_warnings",
    "INTERVAL_COLUMNS",
    "NOISY_COLUMNS",
    "kernel_table",
    "plot_overhead",
    "plot_step_parts",
    "e2e_sections",
]

_STATUSES = ("valid", "invalid", "unchecked", "unfinished", "bad_prefix", "outside_grammar", "rejected", "error",
             "compile_error", "prompt_too_long")
_SETTINGS = ("model", "device", "dtype", "apply", "forward", "prompt", "loop", "schedule")
_REF_GREYS = ("0.45", "0.15", "0.65", "0.3")  # one per setup's unconstrained line
_PARTS = (("forward_ms", "forward"), ("wait_ms", "wait for masks"), ("refill_ms", "refill slots"),
          ("apply_ms", "apply mask"), ("sample_ms", "sample"), ("accept_ms", "accept tokens"))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_generate_run(d: str | os.PathLike[str]) -> bool:
    """Whether ``d`` holds a ``masklab generate`` run (``run.json`` with a summary, ``steps.csv``)."""
    d = Path(d)
    meta = _read_json(d / "run.json") if (d / "run.json").is_file() else None
    return bool(meta and isinstance(meta.get("summary"), dict) and (d / "steps.csv").is_file())


def find_generate_runs(dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every generate run folder in ``dirs`` or below them, in path order."""
    found: list[Path] = []
    for d in map(Path, dirs):
        if is_generate_run(d):
            found.append(d)
        elif d.is_dir():
            found += sorted(p.parent for p in d.rglob("run.json") if is_generate_run(p.parent))
    return list(dict.fromkeys(found))


def _machine_text(m: Any) -> str:
    if not isinstance(m, dict):
        return ""
    parts = [str(m.get("processor") or "")]
    if m.get("cpu_count"):
        parts.append(f"{m['cpu_count']} CPUs")
    parts.append(f"GPU {m['gpu']}" if m.get("gpu") else "no GPU")
    return ", ".join(p for p in parts if p)


def _model_text(model: dict[str, Any]) -> str:
    spec = str(model.get("spec", "?"))
    return f"{spec} (random weights)" if model.get("random_weights") else spec


def load_generate_runs(dirs: Iterable[str | os.PathLike[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, kernels)`` of the generate runs found in ``dirs`` (see the module doc).

    ``runs``: one row per run with ``label``, ``setup`` (the settings that tell it
    apart from other runs, "" when all runs share them), ``engine``, ``version``, ``model``,
    ``random_weights``, ``device``, ``dtype``, ``apply``, ``forward`` (KV cache and
    compile mode), ``prompt`` (default, spec or custom), ``vocab``, ``data``,
    ``batch``, ``dir`` and every field of the run's summary.  ``kernels``: one row per
    run x kernel (``label``, ``device``, ``dtype``, ``batch``, ``kernel``,
    ``available``, ``ms_p50``, ``equal``, ``error``).  Raises :class:`MasklabError`
    when there is none.
    """
    paths = find_generate_runs(dirs)
    if not paths:
        raise MasklabError("no masklab generate run (run.json with a summary, steps.csv) found")
    rows, krows = [], []
    for p in paths:
        meta = _read_json(p / "run.json") or {}
        model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
        summary = meta["summary"]
        info = meta.get("engine_info") if isinstance(meta.get("engine_info"), dict) else {}
        vocab = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}
        row = {
            "engine": str(meta.get("engine", "?")),
            "version": info.get("version"),
            "model": _model_text(model),
            "random_weights": bool(model.get("random_weights")),
            "device": model.get("device", "?"),
            "dtype": model.get("dtype", "?"),
            "apply": summary.get("apply", "torch"),
            "forward": (f"compiled {model['compile']}" if model.get("compile")
                        else f"{model.get('cache') or 'dynamic'} cache"),
            "vocab": vocab.get("spec", "?"),
            "data": meta.get("data"),
            "command": meta.get("command"),
            "machine": _machine_text(meta.get("machine")),
            "versions": ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items() if v),
            "dir": str(p),
            **summary,
        }
        row["sim_apply_ms"] = model.get("apply_ms")  # the stand-in queues apply and sample as device time
        row["batch"] = int(summary.get("batch", meta.get("batch", 0)))
        row["repeat"] = int(meta.get("repeat") or 1)
        row["loop"] = f"{summary.get('loop') or 'serial'} loop"  # runs from before the pipelined loop: serial
        row["schedule"] = f"{summary.get('schedule') or 'static'} schedule"  # runs from before continuous batching
        row["prompt"] = _prompt_text(summary.get("prompt"))  # the template itself is in run.json
        if summary.get("chat"):
            row["prompt"] += ", chat template"
        rows.append(row)
        for k in meta.get("apply_kernels") or []:
            krows.append({"dir": str(p), "device": row["device"], "dtype": row["dtype"], "batch": row["batch"],
                          **{key: k.get(key) for key in ("kernel", "available", "ms_p50", "equal", "error")}})
    runs = pd.DataFrame(rows)
    differing = [s for s in _SETTINGS if runs[s].nunique() > 1]
    base = [engine_label(e, v if isinstance(v, str) and v else None)
            for e, v in zip(runs["engine"], runs["version"], strict=True)]
    base = [b + jump_suffix(j) for b, j in zip(base, _jump_schedules(runs), strict=True)]  # the modes side by side
    runs["setup"] = [", ".join(str(r[s]) for s in differing) for _, r in runs.iterrows()]
    runs["label"] = [b + (f" ({s})" if s else "") for b, s in zip(base, runs["setup"], strict=True)]
    runs = runs.sort_values(["label", "batch", "repeat"], kind="stable").reset_index(drop=True)
    kernels = pd.DataFrame(krows, columns=["dir", "device", "dtype", "batch", "kernel", "available", "ms_p50",
                                           "equal", "error"])
    return runs, kernels


def _jump_schedules(runs: pd.DataFrame) -> list[str]:
    """Each run's jump-forward schedule ("" off); runs from before the ``overlap``
    schedule that jumped were ``inline``."""
    jump = runs["jump_forward"].fillna(False).astype(bool) if "jump_forward" in runs else [False] * len(runs)
    sched = runs["jump_schedule"] if "jump_schedule" in runs else [None] * len(runs)
    return [("" if not j else s if isinstance(s, str) and s else "inline") for j, s in zip(jump, sched, strict=True)]


def unconstrained_references(runs: pd.DataFrame) -> dict[str, pd.Series]:
    """The unconstrained tokens/s to draw beside the engines: per setup (see
    :func:`load_generate_runs`), the median over its runs at each batch size (a Series
    indexed by batch; setups with no baseline are left out).  Runs of different models,
    devices or forward passes never share a median: each decodes at its own speed."""
    setups = runs["setup"] if "setup" in runs else pd.Series("", index=runs.index)
    refs: dict[str, pd.Series] = {}
    for setup in dict.fromkeys(setups):
        unc = runs[setups == setup].groupby("batch")["unconstrained_tokens_per_s"].median().dropna()
        if len(unc):
            refs[setup] = unc
    return refs


#: the figures of the end-to-end table that get an interval across repeats
INTERVAL_COLUMNS = ("tokens/s", "unconstrained tokens/s", "overhead %", "step ms", "host overhead ms",
                    "host overhead %")
#: the figures whose spread across repeats the report holds against their size (:func:`noise_warnings`)
NOISY_COLUMNS = ("overhead %", "host overhead ms", "apply ms")


def _over_repeats(table: pd.DataFrame, ints: list[str], boot: int, seed: int) -> pd.DataFrame:
    """One row per engine x batch of a table with a row per repeat: the median over the
    repeats of each figure, the first repeat's counts, ``repeats``, and for
    :data:`INTERVAL_COLUMNS` the bootstrap 95 % interval of the median over repeats
    (``... low`` / ``... high``; :mod:`toolkit.report.stats`)."""
    rows = []
    for key, g in table.groupby(level=["engine", "batch"], sort=False):
        row: dict[str, Any] = {"engine": key[0], "batch": key[1], "repeats": len(g)}
        for col in table.columns:
            if col in ints:
                row[col] = g[col].iloc[0]
                continue
            values = pd.to_numeric(g[col], errors="coerce").to_numpy(dtype=float)
            est = estimates(values, np.arange(len(values)), percentiles=(50,), n_boot=boot if len(g) > 1 else 0,
                            seed=seed)["p50"]
            row[col] = est.value
            if col in INTERVAL_COLUMNS and boot and len(g) > 1:
                row[f"{col} low"], row[f"{col} high"] = est.low, est.high
        rows.append(row)
    out = pd.DataFrame(rows).set_index(["engine", "batch"])
    return out[[c for c in out.columns if c != "repeats"] + ["repeats"]]


def noise_warnings(runs: pd.DataFrame) -> list[str]:
    """Where the repeats of a run disagree more than the figure says: for each engine x
    batch with repeats and each of :data:`NOISY_COLUMNS` (overhead against the
    unconstrained baseline, host overhead, the apply step), a line when the spread of
    its repeats (max - min) exceeds its distance from zero, the difference the table
    shows; such a figure cannot be told from noise."""
    if "repeat" not in runs or not (runs["repeat"] > 1).any():
        return []
    table = e2e_table(runs, boot=0, per_repeat=True)
    out = []
    for (label, batch), g in table.groupby(level=["engine", "batch"], sort=False):
        if len(g) < 2:
            continue
        for col in NOISY_COLUMNS:
            if col not in g:
                continue
            v = pd.to_numeric(g[col], errors="coerce").dropna()
            if len(v) > 1 and v.max() - v.min() > abs(v.median()):
                out.append(f"{label} batch {batch}: {col} is {v.median():.3g} (median of {len(v)} repeats) but "
                           f"its repeats spread from {v.min():.3g} to {v.max():.3g}: not told apart from noise")
    return out


def e2e_table(runs: pd.DataFrame, *, boot: int = DEFAULT_BOOT, seed: int = 0,
              per_repeat: bool = False) -> pd.DataFrame:
    """One row per engine label x batch size (the index): throughput, overhead, the
    mean parts of a step (ms), mask times per sequence, TTFM, the mean prompt length
    (tokens; longer prompts make every forward pass slower) and the outputs' statuses.

    Runs with repeats (``generate --repeat R``): each figure is the median over the
    repeats, :data:`INTERVAL_COLUMNS` with their bootstrap interval across repeats (``boot``
    draws; ``... low`` and ``... high`` columns), the counts those of the first repeat, and
    ``repeats`` says how many; ``per_repeat`` keeps a row per repeat instead."""
    cols = {
        "tokens_per_s": "tokens/s",
        "unconstrained_tokens_per_s": "unconstrained tokens/s",
        "overhead_pct": "overhead %",
        "step_ms": "step ms",
        "unconstrained_step_ms": "unconstrained step ms",
        "forward_ms": "forward ms",
        "unconstrained_forward_ms": "unconstrained forward ms",
        "host_overhead_ms": "host overhead ms",
        "host_overhead_pct": "host overhead %",
        "mask_max_ms": "mask ms (slowest seq)",
        "mask_seq_ms_p50": "mask p50 ms",
        "mask_seq_ms_p99": "mask p99 ms",
        "wait_ms": "wait ms",
        "apply_ms": "apply ms",
        "sample_ms": "sample ms",
        "accept_ms": "accept ms",
        "ttfm_ms_p50": "TTFM p50 ms",
        "prompt_tokens_mean": "prompt tokens",
        "sequences": "sequences",
        **{s: s for s in _STATUSES},
        "forced_tokens": "forced tokens",
        "jumped_per_sequence": "jumped/seq",
        "steps_saved_pct": "steps saved %",
        "speedup_pct": "vs unconstrained %",
    }
    table = runs.reindex(columns=["label", "batch", *cols]).rename(columns=cols)
    table = table.rename(columns={"label": "engine"}).set_index(["engine", "batch"])
    ints = ["sequences", *_STATUSES, "forced tokens"]
    table[ints] = table[ints].fillna(0).astype("int64")
    if "jump_forward" not in runs or not runs["jump_forward"].fillna(False).astype(bool).any():
        table = table.drop(columns=["jumped/seq", "steps saved %"])
    for col in ("prompt tokens", "unconstrained forward ms", "host overhead ms", "host overhead %",
                "vs unconstrained %"):
        if table[col].isna().all():  # runs from before it was recorded
            table = table.drop(columns=col)
    if per_repeat or not table.index.duplicated().any():
        return table
    return _over_repeats(table, ints, boot, seed)


def kernel_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Apply kernels per device x dtype x batch x kernel: median of the runs' median
    times (ms), how many runs measured it, and whether every run found its logits equal
    to the torch op's (``equal``; False if any differed)."""
    if kernels.empty:
        return pd.DataFrame(columns=["ms p50", "runs", "equal", "error"])
    rows = []
    for key, g in kernels.groupby(["device", "dtype", "batch", "kernel"], sort=True):
        ok = g[g["available"].astype(bool)]
        rows.append({"device": key[0], "dtype": key[1], "batch": key[2], "kernel": key[3],
                     "ms p50": float(ok["ms_p50"].median()) if len(ok) else math.nan, "runs": len(ok),
                     "equal": bool(ok["equal"].astype(bool).all()) if len(ok) else None,
                     "error": "" if len(ok) else str(g["error"].iloc[0])[:120]})
    return pd.DataFrame(rows).set_index(["device", "dtype", "batch", "kernel"])


def _prompt_text(prompt: Any) -> str:
    if prompt is None or prompt == DEFAULT_PROMPT:
        return "default prompt"
    return "spec prompt" if prompt == SPEC_PROMPT else "custom prompt"


def _subtitle(runs: pd.DataFrame) -> str:
    parts = []
    for col, name in (("model", "model"), ("device", "device"), ("dtype", "dtype"), ("forward", "forward"),
                      ("vocab", "vocabulary")):
        values = list(dict.fromkeys(short_vocab(str(v)) if col == "vocab" else str(v) for v in runs[col]))
        parts.append(f"{name}: {' / '.join(values)}")
    return " · ".join(parts)


def plot_overhead(runs: pd.DataFrame, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                  look: str | Look = "screen", pdf: bool = False) -> Any:
    """Overhead % (constrained step time over unconstrained, minus 1) and tokens/s
    against the batch size (log 2 axis), one line per engine, and a dotted line of the
    unconstrained tokens/s per setup (:func:`unconstrained_references`); with repeats each
    point is their median and a bar spans them; the tokens/s
    axis is logarithmic when its values span more than 20x (runs of two models).  Returns
    the figure; ``ax``, ``look``, ``path`` and ``pdf`` as for
    :func:`toolkit.report.bench.plot_tbm_cdf` (``ax``: two Axes)."""


    labels = list(dict.fromkeys(runs["label"]))
    styles = engine_styles({lab: str(runs.loc[runs["label"] == lab, "engine"].iloc[0]) for lab in labels})
    batches = sorted(runs["batch"].unique())
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, (ax_o, ax_t) = start_figure(ax, lk, (10.0, 4.4), panels=2)
        handles = []
        for lab in labels:
            by_batch = runs[runs["label"] == lab].groupby("batch")
            st = styles[lab]
            for a, col in ((ax_o, "overhead_pct"), (ax_t, "tokens_per_s")):
                med = by_batch[col].median()  # over repeats; the bars span them
                spread = ([med - by_batch[col].min(), by_batch[col].max() - med]
                          if (by_batch.size() > 1).any() else None)
                h = a.errorbar(med.index, med.to_numpy(), yerr=spread, color=st["color"],
                               linestyle=st["linestyle"], marker=st["marker"], capsize=3)
                if a is ax_o:
                    handles.append(h)
        names = list(labels)
        refs = unconstrained_references(runs)
        for k, (setup, unc) in enumerate(refs.items()):
            (h_unc,) = ax_t.plot(unc.index, unc.to_numpy(), color=_REF_GREYS[k % len(_REF_GREYS)],
                                 linestyle=":", marker="_", markersize=12)
            handles.append(h_unc)
            names.append(f"unconstrained ({setup})" if setup else "unconstrained (median over runs)")
        shown = pd.concat([runs["tokens_per_s"], *refs.values()]).to_numpy(dtype=float)
        shown = shown[np.isfinite(shown) & (shown > 0)]
        if len(shown) and shown.max() > 20 * shown.min():  # e.g. two models: a linear axis flattens one
            ax_t.set_yscale("log")
        ax_o.axhline(0.0, color="0.3", linewidth=0.8)
        for a in (ax_o, ax_t):
            a.set_xscale("log", base=2)
            a.xaxis.set_major_locator(FixedLocator(batches))
            a.xaxis.set_minor_locator(NullLocator())
            a.set_xticklabels([str(b) for b in batches])
            a.set_xlabel("batch size (sequences decoded together)" if lk.titles else "batch size")
        ax_o.set_ylabel("overhead vs unconstrained (%)")
        ax_t.set_ylabel("tokens/s (live sequences)")
        for a, letter, title in ((ax_o, "(a)", "Cost of the masks per step"), (ax_t, "(b)", "Throughput")):
            a.set_title(title if lk.titles else letter, loc="center" if lk.titles else "left")
        if lk.titles:
            fig.suptitle(f"End-to-end decoding\n{_subtitle(runs)}")
        figure_legend(fig, handles, names)
        return finish_figure(fig, path, lk, pdf=pdf)


def plot_step_parts(runs: pd.DataFrame, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                    look: str | Look = "screen", pdf: bool = False) -> Any:
    """Stacked bars of a mean constrained step (forward, wait for masks, apply, sample,
    accept: they add up to the step) per engine and batch size, next to the
    unconstrained step, each annotated with its host overhead (ms and % of the
    unconstrained forward pass), each the median over a run's repeats.  Returns the figure;
    ``ax`` (one Axes), ``look``, ``path`` and ``pdf`` as for
    :func:`toolkit.report.bench.plot_tbm_cdf`."""


    rows = runs.groupby(["label", "batch"], as_index=False, sort=False).median(numeric_only=True)  # over repeats
    rows = rows.sort_values(["batch", "label"])
    names = [f"{lab} · B={b}" for lab, b in zip(rows["label"], rows["batch"], strict=True)]
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        if ax is None:
            fig = new_figure(lk.width or 9.0, (1.2 + 0.42 * len(rows)) * (1.0 if lk.titles else 0.75))
            ax = fig.add_subplot()
        fig = ax.figure
        y = np.arange(len(rows))
        left = np.zeros(len(rows))
        handles, labels = [], []
        for i, (col, name) in enumerate(_PARTS):
            if col not in rows or not rows[col].fillna(0.0).any():  # no refills: static batches, older runs
                continue
            vals = rows[col].fillna(0.0).to_numpy(dtype=float)
            h = ax.barh(y, vals, left=left, color=PALETTE[i], hatch=HATCHES[i], edgecolor="white", height=0.7)
            left += vals
            handles.append(h)
            labels.append(name)
        unc = rows["unconstrained_step_ms"].to_numpy(dtype=float)
        if np.isfinite(unc).any():
            handles.append(ax.scatter(unc, y, marker="|", s=300, color="black", zorder=3))
            labels.append("unconstrained step")
        host = (rows["host_overhead_ms"].to_numpy(dtype=float) if "host_overhead_ms" in rows
                else np.full(len(rows), np.nan))
        for k in np.flatnonzero(np.isfinite(host)):  # what the host adds besides the apply kernel
            pct = rows["host_overhead_pct"].iloc[k] if "host_overhead_pct" in rows else math.nan
            ax.annotate(f"host {host[k]:+.2f} ms" + (f" ({pct:+.1f}%)" if np.isfinite(pct) else ""),
                        (left[k], y[k]), xytext=(4, 0), textcoords="offset points", va="center",
                        fontsize="small")
        if np.isfinite(host).any():
            ax.set_xlim(right=max(np.nanmax(left), np.nanmax(unc) if np.isfinite(unc).any() else 0) * 1.3)
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_xlabel("mean time per step (ms)")
        ax.grid(True, axis="x")
        ax.grid(False, axis="y")
        if lk.titles:
            fig.suptitle(f"Where a decoding step's time goes\n{_subtitle(runs)}")
        figure_legend(fig, handles, labels)
        return finish_figure(fig, path, lk, pdf=pdf)


_HOW_TO_READ = """\
Each row is one `masklab generate` run: B sequences decoded together, one matcher
each.  In every step the masks are computed by worker threads while the device runs
the forward pass (the *pipelined loop*: the sampled ids are accepted and the next masks
filled in one batch call while the next forward pass runs; the *serial loop*, masklab's
earlier one, accepted the ids one by one after sampling); *wait ms* is the mask time the
forward pass did not hide, *apply ms* copies the masks to the device and applies them
to the logits, *accept ms* is the part of accepting the sampled tokens left on the
critical path (all part of the step time).  *host overhead ms* is wait + accept + forward
against the same in the unconstrained loop (the forward pass over the steps that waited
for a one-token pass): what the host adds to a step besides the apply kernel and the
sampler (*host overhead %*: of the unconstrained forward pass).  *overhead %* is the
mean constrained step time over the mean unconstrained one (the same loop without
masks, same batch and number of steps), minus 1.  A *forward ms* above the
*unconstrained forward ms* is mask work slowing the forward pass down rather than
being waited for (the threads share the CPU, and Python, with the forward pass's
kernel launches).  *tokens/s* counts the tokens of
live sequences (finished ones stop counting), so it falls as sequences end; the
overhead does not.  *mask ms (slowest seq)* is the mean per step of the slowest
sequence's mask; *mask p50/p99 ms* are over every sequence's masks in the loop (the
first mask of each is in *TTFM*: compile + first mask).  Every finished output was
checked: *valid* (parses and satisfies its schema, or is in its grammar's language),
*invalid* (a wrong mask), *unchecked* (jsonschema cannot check the schema); *unfinished*
outputs hit `--max-tokens` and are checked as prefixes of masklab's grammar of the
item: *bad_prefix* counts those it cannot complete when the engine's masks follow that
grammar (a wrong mask); *outside_grammar* counts them for an engine with its own
schema compiler (the peers), whose outputs may leave masklab's grammar legitimately
(it is tighter than the schema by design: property order, unescaped extra keys);
*forced tokens* are steps whose mask allowed one token."""


def e2e_sections(dirs: Iterable[str | os.PathLike[str]], out_dir: Path, *,
                 pdf: bool = False, boot: int = DEFAULT_BOOT, style: str = "screen") -> tuple[list[str], int]:
    """Write ``e2e.csv``, ``apply_kernels.csv``, ``e2e_overhead`` and ``e2e_steps``
    (PNG; with ``pdf`` a PDF of each too) into ``out_dir`` for the generate runs under
    ``dirs``; return the report's markdown lines and the number of runs."""

    runs, kernels = load_generate_runs(dirs)
    table = e2e_table(runs, boot=boot)
    ktable = kernel_table(kernels)
    table.to_csv(out_dir / "e2e.csv")
    ktable.to_csv(out_dir / "apply_kernels.csv")
    for plot, stem in ((plot_overhead, "e2e_overhead"), (plot_step_parts, "e2e_steps")):
        plot(runs, out_dir / stem, pdf=pdf)
        for look in PAPER_LOOKS if style == "paper" else ():
            plot(runs, out_dir / f"{stem}-{look}", look=look)
    lines = ["## End to end: decoding with a model", "", _subtitle(runs), ""]
    if runs["random_weights"].any():
        lines += ["**Random weights**: no checkpoint could be downloaded; step times are the real "
                  "architecture's, the text is noise (sequences wander until `--max-tokens` more often "
                  "than a trained model's would).", ""]
    sim = runs["model"].astype(str).str.startswith("sim:")
    if sim.any():
        queued = "sim_apply_ms" in runs and runs.loc[sim, "sim_apply_ms"].notna().all()
        lines += ["**Simulated device** (`sim:FORWARD_MS:LAUNCHES`): no model runs; a forward pass is LAUNCHES "
                  "short Python calls (they need the GIL, as a framework's kernel launches do) and then a wait "
                  "that holds neither the GIL nor a core. "
                  + ("The apply kernel and the sampler are device time too (queued waits; the logits are lazy), "
                     "so the host pays for launches as on a GPU and *overhead %* reads as a GPU's."
                     if queued else
                     "Apply and sample run on this machine's CPU, where a GPU would take microseconds: read "
                     "*host overhead*, not *overhead %*."), ""]
    noise = noise_warnings(runs)
    if noise:
        lines += ["**Warning: within noise.** " + "; ".join(noise) + ".", ""]
    if "compiles_in_loop" in runs and (runs["compiles_in_loop"].fillna(0) > 0).any():
        bad = runs[runs["compiles_in_loop"].fillna(0) > 0]
        lines += ["**Warning**: torch.compile compiled inside the timed loop of "
                  + ", ".join(f"{r['label']} batch {r['batch']}" for _, r in bad.iterrows())
                  + "; those step times include compilation.", ""]
    for col, name in (("command", "command"), ("machine", "machine"), ("versions", "versions")):
        for value in dict.fromkeys(v for v in runs[col] if isinstance(v, str) and v):
            lines.append(f"- {name}: `{value}`" if col == "command" else f"- {name}: {value}")
    lines += ["", "Runs:", ""]
    for _, r in runs.iterrows():
        lines.append(f"- `{r['dir']}`: {r['label']}, batch {r['batch']}, apply kernel {r['apply']}, {r['prompt']}")
    speed = ["tokens/s", "unconstrained tokens/s", "overhead %", "step ms", "unconstrained step ms",
             "forward ms", "unconstrained forward ms", "host overhead ms", "host overhead %",
             "mask ms (slowest seq)", "mask p50 ms", "mask p99 ms",
             "wait ms", "apply ms", "sample ms", "accept ms", "TTFM p50 ms", "prompt tokens"]
    speed = [c for c in speed if c in table.columns]
    lines += ["", "### Speed (means per step, ms; prompt tokens: mean per sequence)", "",
              to_markdown(with_intervals(table[[c for c in table.columns if c.startswith(tuple(speed))]], ".2f"),
                          ".2f", intfmt=","), "",
              "### Outputs", "", to_markdown(table[[c for c in table.columns if not c.startswith(tuple(speed))]],
                                                  ".2f", intfmt=","), ""]
    lines += ["### Apply kernels", ""]
    if len(ktable):
        lines += ["The same real masks applied to the same logits by each kernel: median time of one call "
                  "(device synchronized), and whether its logits equal the torch op's bit for bit.", "",
                  to_markdown(ktable, ".3f", intfmt=","), ""]
    else:
        lines += ["(not compared in these runs: `masklab generate --compare-kernels`)", ""]
    lines += ["### Figures", "", "![overhead vs batch size](e2e_overhead.png)", "",
              "Overhead and throughput against the batch size" + pdf_link("e2e_overhead", pdf), "",
              "![step parts](e2e_steps.png)", "", "Where a step's time goes" + pdf_link("e2e_steps", pdf), "",
              "### How to read", "", _HOW_TO_READ, "",
              "The full-precision tables are `e2e.csv` and `apply_kernels.csv`.", ""]
    return lines, len(runs)
