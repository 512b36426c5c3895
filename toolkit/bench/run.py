"""``masklab bench``: every engine on the same items, in worker processes (:func:`run_bench`).

Each (engine, item) pair is a task: a worker compiles the item and walks its instances
(:func:`toolkit.bench.measure.measure_item`, whose doc says what a record measures and
what its ``status`` means).  The workers run in a pool (:mod:`toolkit.bench.pool`:
processes on this machine; ``backend="ray"``: Ray actors, :mod:`toolkit.bench.cluster`)
that keeps the per-item ``timeout`` and the memory limit from outside.

Isolation: each engine runs single-threaded (``RAYON_NUM_THREADS``,
``OMP_NUM_THREADS`` = 1) in a worker process; ``jobs`` workers run side by side.
A worker that exceeds the per-item ``timeout`` or the memory limit is killed, the
item recorded as ``timeout`` or ``crash``, and a fresh worker takes the next item;
a worker that dies is recorded as ``crash`` the same way.

Output: ``OUT/records.jsonl`` (one line per engine x item, appended and flushed as
each finishes) and ``OUT/run.json`` (command, vocabulary, data, engines with versions
and options, machine): :mod:`toolkit.bench.records`.  A run resumes where it stopped:
pairs already in ``records.jsonl`` are not redone, a truncated last line (a killed run)
is dropped.  The run holds ``OUT/.lock`` (:mod:`toolkit.bench.runlock`): a second run on
the same folder refuses at once, naming the first one's pid.  Dataset items are checked
before anything runs (:func:`~toolkit.data.datasets.select_items`): an item without test
instances, or a schema its draft's meta-schema rejects, refuses the run unless
``skip_bad_items`` leaves them out.  :mod:`toolkit.report` turns run folders into tables
and figures.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from strategies import engine_factory
from toolkit.bench.backends import check_backend, default_memory_limit_gb, open_pool
from toolkit.bench.pool import SINGLE_THREAD_ENV, Pool, Task, Worker
from toolkit.bench.records import (
    append_record,
    check_resume,
    done_tasks,
    failed_record,
    now,
    read_records,
    repair_tail,
    write_meta,
)
from toolkit.bench.runlock import locks_run_folder
from toolkit.core.errors import HarnessError
from toolkit.core.version import masklab_version
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import Item, select_items
from toolkit.data.provenance import finish_provenance, provenance

__all__ = ["run_bench", "requested_engines", "DEFAULT_TIMEOUT", "QUICK_TIMEOUT"]

DEFAULT_TIMEOUT = 60.0
#: seconds per engine and item of ``masklab bench --quick`` when no ``--timeout`` is given
QUICK_TIMEOUT = 30.0


@locks_run_folder("out")
def run_bench(engines: Sequence[str], data: str | Path | None = None, *, vocab: str = "tekken",
              out: str | Path = "results/bench", limit: int | None = None, timeout: float = DEFAULT_TIMEOUT,
              jobs: int = 1, seed: int | None = None, quick: bool = False,
              options: Mapping[str, Mapping[str, Any]] | None = None, source: str = "native",
              memory_limit_gb: float | None = None, progress: bool = True, command: str | None = None,
              direct_check: bool = False, drafts: Sequence[int] = (), walks: int = 1, backend: str = "local",
              address: str | None = None, axes: Mapping[str, str] | None = None, meta_file: str = "run.json",
              skip_bad_items: bool = False, repeat: int = 1) -> Any:
    """Run ``engines`` on the items of ``data``; returns a DataFrame of the records.

    ``data``: a MaskBench-format file or folder (searched recursively; default the
    embedded ``datasets/``).  ``vocab``: a :func:`~toolkit.core.vocab.load_vocab` spec.
    ``out``: the run folder (records appended; an existing run resumes).  ``limit``:
    the first N items (after a shuffle with ``seed``, when given).  ``timeout``: seconds
    per (engine, item), compile and instances together.  ``jobs``: workers side by
    side.  ``quick``: at most :data:`~toolkit.bench.measure.QUICK_CASES` valid and invalid instances per item.
    ``options``: per engine name, keyword options for its factory.  ``source``:
    ``"native"`` or ``"grammar"`` (:mod:`toolkit.bench.measure`).  ``memory_limit_gb``: resident
    memory per worker before it is killed (default 80% of RAM / jobs).  ``direct_check``:
    each peer is also called directly through its own API on the same walks
    (:mod:`toolkit.report.direct`).  ``drafts``: draft lengths whose masks are timed
    against sequential steps (:func:`~toolkit.bench.measure.measure_draft`).  ``walks``: the valid instances
    walked this many times on each compile, the later walks on a warm grammar (a server's
    later requests), recorded apart (:func:`~toolkit.bench.measure.measure_item`).  ``repeat``: every
    (engine, item) measured this many times, in as many passes over all engines and items (a
    task's repeats a whole pass apart, never back to back), each record with its ``repeat``
    (1-based); the report gives the median over repeats with bootstrap intervals
    (:mod:`toolkit.report.stats`), and a resume finishes the repeats missing.  ``backend``: ``"local"`` (worker
    processes on this machine) or ``"ray"`` (Ray actors, :mod:`toolkit.bench.cluster`;
    ``address`` joins a running cluster, None starts a local instance of ``jobs`` CPUs):
    the same records either way.  ``axes`` (a sweep's grid cell, :mod:`toolkit.bench.sweep`):
    written into every record (``rec["axes"]``) and part of what a resume matches, so the
    cells of a grid share one ``records.jsonl``; ``meta_file``: where in ``out`` the
    run's metadata goes (a sweep keeps one per cell).

    The run holds ``out``'s lock (:mod:`toolkit.bench.runlock`): a second run on the
    same folder is a :class:`HarnessError` at once.  An item without test instances, or
    whose schema its draft's meta-schema rejects, is a
    :class:`~toolkit.data.datasets.DatasetError` before anything runs, unless
    ``skip_bad_items`` leaves such items out (:func:`~toolkit.data.datasets.select_items`).
    """
    _check_settings(source, backend, address, jobs, timeout, limit, walks, repeat)
    engines, options = requested_engines(engines, options, known=True)
    voc = load_vocab(vocab)
    items = select_items(data, limit, seed, voc.name, tests=True, schemas=True, skip_bad=skip_bad_items,
                         command="masklab bench")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records_path, run_path = out / "records.jsonl", out / meta_file
    run_path.parent.mkdir(parents=True, exist_ok=True)
    cell = dict(axes) if axes else None
    if memory_limit_gb is None:
        memory_limit_gb = default_memory_limit_gb(jobs)
    meta = _run_meta(engines, data, voc, vocab, items, command=command, limit=limit, seed=seed, timeout=timeout,
                     jobs=jobs, quick=quick, source=source, direct_check=direct_check, drafts=drafts, walks=walks,
                     backend=backend, address=address, cell=cell, skip_bad_items=skip_bad_items,
                     memory_limit_gb=memory_limit_gb, repeat=repeat)
    if run_path.exists():
        _resume(meta, json.loads(run_path.read_text(encoding="utf-8")), options)
    repair_tail(records_path)
    done = done_tasks(records_path, cell)
    passes = [(r, [(name, item) for item in items for name in engines if (name, item.name, r) not in done])
              for r in range(1, meta["repeat"] + 1)]
    write_meta(run_path, meta)
    make = functools.partial(Worker, options=options, source=source, quick=quick, direct=direct_check,
                             drafts=tuple(meta["drafts"]), walks=meta["walks"])
    pool = open_pool(backend, jobs, vocab, items, make, float(timeout), memory_limit_gb * 2**30, failed=failed_record,
                     address=address, env=SINGLE_THREAD_ENV)
    _write_records(pool, passes, records_path, run_path, meta, options, cell, progress)
    meta["finished"] = now()
    finish_provenance(meta)
    write_meta(run_path, meta)
    wanted = {(n, i.name) for i in items for n in engines}
    recs = [r for r in read_records(records_path) if (r["engine"], r["item"]) in wanted and r.get("axes") == cell]
    return pd.DataFrame(recs)


def _check_settings(source: str, backend: str, address: str | None, jobs: int, timeout: float, limit: int | None,
                    walks: int, repeat: int = 1) -> None:
    """A :class:`HarnessError` naming the first setting of :func:`run_bench` it cannot run with."""
    if source not in ("native", "grammar"):
        raise HarnessError(f"source must be 'native' or 'grammar', not {source!r}")
    check_backend(backend, address)
    if jobs < 1:
        raise HarnessError(f"jobs must be at least 1, got {jobs}")
    if timeout <= 0:
        raise HarnessError(f"timeout must be positive, got {timeout}")
    if limit is not None and limit < 1:
        raise HarnessError(f"limit must be at least 1, got {limit}")
    if int(walks) < 1:
        raise HarnessError(f"walks must be at least 1, got {walks}")
    if int(repeat) < 1:
        raise HarnessError(f"repeat must be at least 1, got {repeat}")


def requested_engines(engines: Sequence[str], options: Mapping[str, Mapping[str, Any]] | None, *,
                      known: bool = False) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The engines of a run (each once, in order) and their options (as dicts); a
    :class:`HarnessError` for no engine, options of an engine not in the run, or
    (``known``) an engine name no factory has."""
    engines = list(dict.fromkeys(engines))
    if not engines:
        raise HarnessError("no engines given")
    for name in engines if known else ():
        try:
            engine_factory(name)
        except (ValueError, ImportError) as e:
            raise HarnessError(str(e)) from e
    options = {k: dict(v) for k, v in (options or {}).items()}
    unknown = sorted(set(options) - set(engines))
    if unknown:
        raise HarnessError(f"options given for engines not in the run: {', '.join(unknown)}")
    return engines, options


def _run_meta(engines: list[str], data: str | Path | None, voc: Any, vocab: str, items: list[Item], *,
              command: str | None, limit: int | None, seed: int | None, timeout: float, jobs: int, quick: bool,
              source: str, direct_check: bool, drafts: Sequence[int], walks: int, backend: str, address: str | None,
              cell: dict[str, str] | None, skip_bad_items: bool, memory_limit_gb: float | None,
              repeat: int = 1) -> dict[str, Any]:
    """A run's ``run.json`` as it starts (no engine built yet)."""
    return {
        "masklab_version": masklab_version(),
        "command": command or f"run_bench({engines!r}, {str(data)!r})",
        "started": now(),
        "finished": None,
        "vocab": {"spec": vocab, "name": voc.name, "size": voc.size, "text_tokens": int(len(voc.text_token_ids()))},
        "data": str(data) if data is not None else "datasets (embedded)",
        "items": len(items),
        "limit": limit,
        "seed": seed,
        "timeout_s": float(timeout),
        "jobs": int(jobs),
        "quick": bool(quick),
        "source": source,
        "direct_check": bool(direct_check),
        "drafts": sorted(set(int(k) for k in drafts)),
        "walks": int(walks),
        "repeat": int(repeat),
        "backend": backend,
        "address": address,
        "axes": cell,
        "skip_bad_items": bool(skip_bad_items),
        "memory_limit_gb": None if memory_limit_gb is None else round(memory_limit_gb, 2),
        "engines": {},
        **provenance(),
    }


def _resume(meta: dict[str, Any], old: dict[str, Any], options: Mapping[str, Mapping[str, Any]]) -> None:
    """``meta`` continuing the folder's run ``old`` (:func:`~toolkit.bench.records.check_resume`
    says whether it may): its engines, its start, the resumes."""
    check_resume(meta, old, options)
    meta["engines"] = dict(old.get("engines") or {})
    meta["started"] = old.get("started", meta["started"])
    meta["resumed"] = [*old.get("resumed", []), now()]
    meta["repeat"] = max(int(meta.get("repeat") or 1), int(old.get("repeat") or 1))  # a resume may add repeats


def _write_records(pool: Pool, passes: list[tuple[int, list[Task]]], records_path: Path, run_path: Path,
                   meta: dict[str, Any], options: Mapping[str, Mapping[str, Any]], cell: dict[str, str] | None,
                   progress: bool) -> None:
    """Run each pass's tasks in ``pool``, one pass (one repeat) after another, each record
    appended to ``records_path`` as it comes (with its ``repeat`` and the sweep cell's
    ``axes``), each engine's description into ``run.json`` once known; the pool is
    closed at the end, whatever happens."""
    total = sum(len(tasks) for _, tasks in passes)
    bar = tqdm(total=total, unit="run", desc="bench", dynamic_ncols=True, smoothing=0.05) if progress else None
    errors = 0
    try:
        with records_path.open("a", encoding="utf-8") as f:
            for repeat, rec in ((r, rec) for r, tasks in passes for rec in pool.run(tasks)):
                rec["repeat"] = repeat
                if cell is not None:
                    rec["axes"] = cell
                append_record(f, rec)
                if rec["status"] != "passing":
                    errors += 1
                for name, info in pool.engine_info.items():
                    if name not in meta["engines"]:
                        meta["engines"][name] = {**info, "requested_options": options.get(name, {})}
                        write_meta(run_path, meta)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"not passing {errors}", refresh=False)
    finally:
        pool.close()
        if bar is not None:
            bar.close()
