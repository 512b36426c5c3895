"""``masklab sweep SPEC.toml``: a benchmark grid as one run folder.

The grid is engines x vocabularies x option sets x datasets.  Each cell (a vocabulary,
an option set, a dataset) is a :func:`~toolkit.bench.run.run_bench` run of every
engine into the same folder: one ``OUT/records.jsonl`` whose every record names its cell
(``rec["axes"] = {"vocab": ..., "options": ..., "data": ...}``), the cell's metadata in
``OUT/cells/CELL.json`` and the grid in ``OUT/sweep.json``.  A sweep resumes as a bench
run does (the pairs of a cell already recorded are not redone); a rerun must read the
same spec.  ``backend = "ray"`` runs the cells' tasks on Ray (:mod:`toolkit.bench.cluster`).
The sweep holds its folder's run lock (:mod:`toolkit.bench.runlock`) for its whole run.

A spec is TOML: :data:`SPEC_EXAMPLE` shows every key (``masklab sweep --help`` prints it).

``masklab report OUT`` draws the grid (:mod:`toolkit.report.sweep`): TBM and TTFM
percentiles per engine against the vocabulary size (or against any axis).  What reads a
sweep folder (its cells, :data:`~toolkit.bench.records.AXES`) is in
:mod:`toolkit.bench.records`, with the records.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strategies import check_options, engine_factory
from toolkit.bench.backends import BACKENDS
from toolkit.bench.records import cell_file
from toolkit.bench.run import DEFAULT_TIMEOUT, run_bench
from toolkit.bench.runlock import locks_run_folder
from toolkit.core.errors import HarnessError, MasklabError, VocabError
from toolkit.core.vocab import vocab_file
from toolkit.data.datasets import shared_dir

__all__ = ["Sweep", "SweepError", "load_sweep", "run_sweep", "SPEC_EXAMPLE"]

SPEC_EXAMPLE = """\
engines = ["llguidance", "xgrammar", "outlines", "peer:llguidance", "peer:xgrammar"]
limit = 200          # items per dataset (after a shuffle with seed)
seed = 7
quick = true
timeout = 30         # seconds per (engine, item)
jobs = 2
backend = "local"    # or "ray" (address = "HEAD:6379" joins a cluster)
skip_bad_items = true  # leave out items without tests or with an invalid schema (bench --skip-bad-items)
source = "native"    # or "grammar": every engine gets masklab's reading of the schema (bench --source)
memory_limit_gb = 8  # resident memory per worker before it is killed (bench --memory-limit)
repeat = 1           # every cell R times, in passes (bench --repeat): the report's medians and intervals

[vocabs]             # name = load_vocab spec; $MASKLAB_SHARED is expanded
mistral = "hf:$MASKLAB_SHARED/tokenizers/mistral-7b-v0.3/tokenizer.json"
llama3 = "llama3:$MASKLAB_SHARED/tokenizers/llama-3/tokenizer.model"
tekken = "tekken"

[data]               # name = a MaskBench-format file or folder ("embedded": datasets/)
maskbench = "$MASKLAB_SHARED/datasets/maskbench"

[options.default]    # option sets: name = {engine = {key = value}}
[options.no-slices]
llguidance = { slices = "none" }
"""
"""A sweep spec with every key, commented (``masklab sweep --help`` prints it; a test loads it)."""

_KEYS = {"engines", "vocabs", "data", "options", "limit", "seed", "quick", "timeout", "jobs", "backend", "address",
         "source", "memory_limit_gb", "skip_bad_items", "repeat"}
_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


class SweepError(MasklabError):
    """A sweep spec that cannot run: what is wrong and where (the key)."""


@dataclass
class Sweep:
    """A grid (see the module doc)."""

    engines: list[str]
    vocabs: dict[str, str]
    data: dict[str, str | None]
    options: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: {"default": {}})
    limit: int | None = None
    seed: int | None = None
    quick: bool = False
    timeout: float = DEFAULT_TIMEOUT
    jobs: int = 1
    backend: str = "local"
    address: str | None = None
    source: str = "native"
    memory_limit_gb: float | None = None
    skip_bad_items: bool = False
    repeat: int = 1

    def cells(self) -> list[dict[str, str]]:
        """The grid's cells, vocabulary outermost (a cell's workers load one vocabulary)."""
        return [{"vocab": v, "options": o, "data": d} for v in self.vocabs for o in self.options for d in self.data]


def _expand(text: str) -> str:
    return text.replace("$MASKLAB_SHARED", str(shared_dir())).replace("${MASKLAB_SHARED}", str(shared_dir()))


def _table(doc: Mapping[str, Any], key: str, required: bool = True) -> dict[str, Any]:
    value = doc.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping) or not value:
        raise SweepError(f"sweep spec: [{key}] must be a table of name = value with at least one entry")
    for name in value:
        if not _NAME.fullmatch(name):
            raise SweepError(f"sweep spec: [{key}] name {name!r} must be letters, digits, '_', '.', '+' or '-'")
    return dict(value)


def _typed(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    if key not in doc:
        return default
    value = doc[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise SweepError(f"sweep spec: {key} takes {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    return value


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read and check a sweep spec (TOML): unknown keys, missing tables, engines or
    options that do not exist and values of the wrong type are a :class:`SweepError`
    naming the key, before anything runs."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"no sweep spec at {str(p)!r}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SweepError(f"sweep spec {str(p)!r} is not TOML: {e}") from None
    return sweep_from_dict(doc)


def sweep_from_dict(doc: Mapping[str, Any]) -> Sweep:
    """:func:`load_sweep` of an already parsed spec."""
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise SweepError(f"sweep spec: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_KEYS))}")
    engines = doc.get("engines")
    if not isinstance(engines, list) or not engines or not all(isinstance(e, str) for e in engines):
        raise SweepError("sweep spec: engines must be a list of engine names")
    for name in engines:
        try:
            engine_factory(name)
        except (ValueError, ImportError) as e:
            raise SweepError(f"sweep spec: engines: {e}") from None
    vocabs = {k: _expand(v) if isinstance(v, str) else v for k, v in _table(doc, "vocabs").items()}
    for k, v in vocabs.items():
        if not isinstance(v, str):
            raise SweepError(f"sweep spec: [vocabs] {k} must be a vocabulary spec (a string)")
        try:
            vocab_file(v)  # the spec's form and its file, before any cell runs
        except VocabError as e:
            raise SweepError(f"sweep spec: [vocabs] {k}: {e}") from None
    data: dict[str, str | None] = {}
    for k, v in _table(doc, "data").items():
        if not isinstance(v, str):
            raise SweepError(f"sweep spec: [data] {k} must be a path (a string)")
        data[k] = None if v == "embedded" else _expand(v)
        if data[k] is not None and not Path(data[k]).exists():
            raise SweepError(f"sweep spec: [data] {k}: no file or folder at {data[k]!r}")
    options = _table(doc, "options", required=False) or {"default": {}}
    for set_name, per_engine in options.items():
        if not isinstance(per_engine, Mapping):
            raise SweepError(f"sweep spec: [options.{set_name}] must be a table of engine = {{key = value}}")
        for engine, opts in per_engine.items():
            if engine not in engines:
                raise SweepError(f"sweep spec: [options.{set_name}] names {engine!r}, which is not among the engines")
            if not isinstance(opts, Mapping):
                raise SweepError(f"sweep spec: [options.{set_name}] {engine} must be a table of key = value")
            try:
                check_options(engine, opts)
            except (ValueError, ImportError) as e:
                raise SweepError(f"sweep spec: [options.{set_name}]: {e}") from None
    backend = _typed(doc, "backend", str, "local")
    if backend not in BACKENDS:
        raise SweepError(f"sweep spec: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    limit = _typed(doc, "limit", int, None)
    jobs = _typed(doc, "jobs", int, 1)
    repeat = _typed(doc, "repeat", int, 1)
    timeout = float(_typed(doc, "timeout", (int, float), DEFAULT_TIMEOUT))
    if (limit is not None and limit < 1) or jobs < 1 or repeat < 1 or timeout <= 0:
        raise SweepError(f"sweep spec: limit, jobs and repeat must be >= 1 and timeout > 0, got {limit}, {jobs}, "
                         f"{repeat}, {timeout}")
    mem = _typed(doc, "memory_limit_gb", (int, float), None)
    if mem is not None and mem <= 0:
        raise SweepError(f"sweep spec: memory_limit_gb must be > 0, got {mem}")
    source = _typed(doc, "source", str, "native")
    if source not in ("native", "grammar"):
        raise SweepError(f"sweep spec: source must be 'native' or 'grammar', got {source!r}")
    return Sweep(engines=list(dict.fromkeys(engines)), vocabs=vocabs, data=data,
                 options={k: {e: dict(o) for e, o in v.items()} for k, v in options.items()},
                 limit=limit, seed=_typed(doc, "seed", int, None), quick=_typed(doc, "quick", bool, False),
                 timeout=timeout, jobs=jobs, backend=backend, address=_typed(doc, "address", str, None),
                 source=source, memory_limit_gb=None if mem is None else float(mem),
                 skip_bad_items=_typed(doc, "skip_bad_items", bool, False), repeat=repeat)


@locks_run_folder("out")
def run_sweep(sweep: Sweep, out: str | os.PathLike[str], *, progress: bool = True, command: str | None = None,
              spec_text: str | None = None) -> Path:
    """Run every cell of ``sweep`` into ``out`` (resuming what is there); returns
    ``out``.  A folder that holds another sweep's grid is refused."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = {"spec": asdict(sweep), "cells": sweep.cells()}
    path = out / "sweep.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        old_spec = {"skip_bad_items": False, "repeat": 1, **(old.get("spec") or {})}  # (sweeps from before the keys)
        if old_spec != json.loads(json.dumps(grid["spec"])):
            raise SweepError(f"{str(out)!r} holds a sweep of another spec; rerun the same spec to resume, or "
                             "choose another folder")
    path.write_text(json.dumps({**grid, "command": command, "spec_text": spec_text}, indent=2) + "\n",
                    encoding="utf-8")
    for cell in sweep.cells():
        opts = sweep.options[cell["options"]]
        if progress:
            print(f"cell vocab={cell['vocab']} options={cell['options']} data={cell['data']}", flush=True)
        try:
            run_bench(sweep.engines, sweep.data[cell["data"]], vocab=sweep.vocabs[cell["vocab"]], out=out,
                      limit=sweep.limit, timeout=sweep.timeout, jobs=sweep.jobs, seed=sweep.seed, quick=sweep.quick,
                      options=opts, source=sweep.source, memory_limit_gb=sweep.memory_limit_gb, progress=progress,
                      command=command, backend=sweep.backend, address=sweep.address, axes=cell,
                      meta_file=cell_file(cell), skip_bad_items=sweep.skip_bad_items, repeat=sweep.repeat)
        except HarnessError as e:
            raise SweepError(f"cell {cell}: {e}") from e
    return out
