"""Tidy tables of bench runs: one row per measured item, one row per mask step.

``masklab report --tidy`` writes them beside ``report.md`` as Parquet (pyarrow) and
CSV, so that a figure of one's own needs pandas (or R, or seaborn) and not masklab:

* ``items.parquet`` / ``items.csv``: one row per run x engine x item x repeat
  (:data:`ITEM_COLUMNS`);
* ``masks.parquet`` / ``masks.csv.gz``: one row per mask step of every walk
  (:data:`MASK_COLUMNS`; gzip-compressed, it is the large one).

Every record of the runs is there, whatever its status (the report's timing tables
keep the items every engine passed: filter on ``status`` to do the same).  The column
lists below are the documentation (``docs/benchmarks.md`` prints them, and a test
holds the files, the lists and the page to each other).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit.report.bench import Runs
from toolkit.report.style import OURS

__all__ = ["ITEM_COLUMNS", "MASK_COLUMNS", "tidy_items", "tidy_masks", "write_tidy"]

ITEM_COLUMNS: dict[str, str] = {
    "run": "the run's position among the report's folders (0-based)",
    "run_dir": "the run folder",
    "engine": "the engine's registered name (`llguidance`, `peer:llguidance`...)",
    "engine_label": "the report's label of the engine (its name and version, and what tells apart two runs of it)",
    "engine_version": "the version the engine reported (masklab's for masklab's strategies, the package's for a peer)",
    "ours": "whether the engine is one of masklab's own strategies (false for a `peer:` engine or a plug-in)",
    "item": "the dataset item (file name without `.json`)",
    "kind": "what the item is: `schema`, `lark`, `gbnf`, `regex` or `structural_tag`",
    "repeat": "which repeat of `bench --repeat R` measured it (1-based)",
    "status": "passing, compile_error, timeout, crash, validation_error or invalidation_error",
    "detail": "the first line of what went wrong (empty when passing)",
    "compile_ms": "the compile alone, in milliseconds",
    "ttfm_ms": "time to first mask (compile and first mask), in milliseconds",
    "memory_bytes": "the compiled grammar's memory as the engine reports it (empty where it does not)",
    "masks": "mask steps timed on the first walk of the valid instances",
    "cases": "test instances walked",
    "cases_ok": "instances whose verdict was right (valid accepted to the end, invalid refused)",
    "wall_s": "the task's wall time in its worker, in seconds",
    "vocab": "the vocabulary spec of the run",
    "vocab_size": "the vocabulary's size in ids",
    "source": "`native` (each engine its own input) or `grammar` (masklab's grammar for all)",
}
"""``items.parquet``: column -> meaning."""

MASK_COLUMNS: dict[str, str] = {
    "run": "as in items",
    "engine": "as in items",
    "engine_label": "as in items",
    "item": "as in items",
    "repeat": "as in items",
    "walk": "1 for the first walk of the valid instances on a fresh compile, 2.. for `bench --walks W`'s later ones",
    "step": "the mask's position in its walk (0-based, over the item's valid instances in order)",
    "tbm_us": "time between masks: the engine's fill of this mask and its accept of the token, in microseconds",
    "glue_us": "the adapter's time around a peer's own calls, in microseconds (empty for masklab's strategies)",
    "allowed": "tokens the mask allows (empty for later walks)",
    "density": "allowed / vocab_size (empty for later walks)",
    "sliced": "whether the engine computed the mask with slices (llguidance's slicer; empty for later walks)",
}
"""``masks.parquet``: column -> meaning."""


def _run_value(runs: Runs, run: pd.Series, key: str) -> list[Any]:
    return [runs.meta[int(i)].get(key) for i in run]


def tidy_items(runs: Runs) -> pd.DataFrame:
    """One row per run x engine x item x repeat, the columns of :data:`ITEM_COLUMNS`."""
    r = runs.records
    versions = [((runs.meta[int(i)].get("engines") or {}).get(e) or {}).get("version")
                for i, e in zip(r["run"], r["engine"], strict=True)]
    details = r["detail"] if "detail" in r else pd.Series([""] * len(r))
    vocab = [(v or {}).get("spec") if isinstance(v, dict) else v for v in _run_value(runs, r["run"], "vocab")]

    def num(col: str, scale: float = 1.0) -> pd.Series:
        return pd.to_numeric(r[col], errors="coerce") * scale if col in r else pd.Series(np.nan, index=r.index)

    out = pd.DataFrame({
        "run": r["run"].astype("int64"),
        "run_dir": r["run_dir"].astype(str),
        "engine": r["engine"].astype(str),
        "engine_label": r["engine_label"].astype(str),
        "engine_version": pd.Series(versions, dtype=object, index=r.index),
        "ours": r["engine"].astype(str).isin(OURS),
        "item": r["item"].astype(str),
        "kind": r["kind"].astype(str) if "kind" in r else "",
        "repeat": r["repeat"].astype("int64"),
        "status": r["status"].astype(str),
        "detail": [str(d).strip().splitlines()[0] if isinstance(d, str) and d.strip() else "" for d in details],
        "compile_ms": num("compile_s", 1e3),
        "ttfm_ms": num("ttfm_s", 1e3),
        "memory_bytes": num("memory_bytes"),
        "masks": r["masks"].astype("int64"),
        "cases": r["cases"].astype("int64"),
        "cases_ok": r["cases_ok"].astype("int64"),
        "wall_s": num("wall_s"),
        "vocab": pd.Series(vocab, dtype=object, index=r.index),
        "vocab_size": num("vocab_size"),
        "source": pd.Series(_run_value(runs, r["run"], "source"), dtype=object, index=r.index),
    })
    return out[list(ITEM_COLUMNS)].reset_index(drop=True)


def tidy_masks(runs: Runs) -> pd.DataFrame:
    """One row per mask step of every walk, the columns of :data:`MASK_COLUMNS`."""
    names = runs.records.drop_duplicates("engine_label").set_index("engine_label")["engine"].astype(str)
    m, later = runs.masks, runs.later
    first = pd.DataFrame({
        "run": m["run"], "engine_label": m["engine_label"].astype(str), "item": m["item"].astype(str),
        "repeat": m["repeat"], "walk": 1, "step": m["step"], "tbm_us": m["tbm_s"] * 1e6,
        "glue_us": m["glue_s"] * 1e6, "allowed": m["allowed"], "density": m["density"],
        "sliced": m["sliced"].astype("boolean"),
    })
    rest = pd.DataFrame({
        "run": later["run"], "engine_label": later["engine_label"].astype(str), "item": later["item"].astype(str),
        "repeat": later["repeat"], "walk": later["walk"], "step": later["step"], "tbm_us": later["tbm_s"] * 1e6,
        "glue_us": np.nan, "allowed": np.nan, "density": np.nan, "sliced": pd.array([pd.NA] * len(later),
                                                                                     dtype="boolean"),
    })
    out = pd.concat([first, rest], ignore_index=True) if len(rest) else first.reset_index(drop=True)
    out["engine"] = out["engine_label"].map(names).astype(str)
    out = out.astype({"run": "int64", "repeat": "int64", "walk": "int64", "step": "int64"})
    return out[list(MASK_COLUMNS)]


def write_tidy(runs: Runs, out: str | os.PathLike[str]) -> list[Path]:
    """Write ``items.parquet``, ``items.csv``, ``masks.parquet`` and ``masks.csv.gz`` into
    ``out``; the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, frame, csv in (("items", tidy_items(runs), "items.csv"), ("masks", tidy_masks(runs), "masks.csv.gz")):
        frame.to_parquet(out / f"{name}.parquet", index=False, engine="pyarrow")
        frame.to_csv(out / csv, index=False, compression={"method": "gzip", "mtime": 0} if csv.endswith(".gz")
                     else None)  # mtime 0: the same runs give the same bytes
        paths += [out / f"{name}.parquet", out / csv]
    return paths
