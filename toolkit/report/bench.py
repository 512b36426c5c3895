"""Tables and figures from benchmark run directories (``masklab report``).

A run directory, as :mod:`toolkit.bench.run` writes it (:mod:`toolkit.bench.records`), holds ``run.json`` (command,
vocabulary, dataset, machine, engine versions and options) and ``records.jsonl``
(one JSON object per engine x item: status, compile time, TTFM, and per mask step
its time ``tbm_s``, popcount ``allowed`` and whether it was ``sliced``).

* :func:`load_runs` reads one or more run directories into a :class:`Runs`;
* :func:`engine_table` is MaskBench's per-engine table: TBM (time per mask step, in
  microseconds) and TTFM (compile + first mask, in milliseconds) statistics, and the
  count of items per status;
* :func:`density_table` splits each engine's masks (and their time) by how many tokens
  they allow and whether the engine computed them with slices;
* :func:`walks_table` and :func:`plot_walks_cdf`: the first walk against the later
  ones of a run with ``bench --walks W`` (the later walks on a warm grammar);
* :func:`plot_tbm_cdf`, :func:`plot_ttfm_cdf`, :func:`plot_density` draw the figures
  (PNG at 200 dpi; with ``pdf=True`` a PDF too, same stem);
* :func:`write_report` does all of it and writes ``report.md`` with the tables.

Conventions:

* Percentiles are :func:`numpy.percentile` with its default ``linear`` method
  (interpolation between the two nearest ranks); "avg" is the arithmetic mean.
* TBM statistics pool every mask step recorded for an engine, over all its items,
  whatever the item's status (an item that failed validation still timed the masks
  it computed).  They are of the first walk (``tbm_s``); a run with ``--walks W``
  has its later walks in ``Runs.later``, reported apart (:func:`walks_table`).  TTFM statistics are over the items that reached a first mask.
* Engine labels are :func:`~toolkit.report.style.engine_label`'s: ``"ours: llguidance"``
  for masklab's strategies, ``"llguidance 1.9.1"`` for ``peer:llguidance`` (the package and
  its version), ``"<engine> <version>"`` for any other.  When one label occurs in several runs, each occurrence gets a
  suffix naming its run: the options that differ (``"(forcing=true)"``) when those
  tell the runs apart, else the run directory's name, else ``"(run2)"`` (the run's
  1-based position in ``dirs``).  Masks from different runs are never pooled.
* Density = allowed / vocab_size (the record's ``vocab_size``, else run.json's).
  Categories, in words and by density: ``sparse: under 2%`` (d < 0.02), ``medium: 2 to 85%``
  (0.02 <= d < 0.85) and ``dense: 85% or more`` (d >= 0.85), computed token by token, and
  ``dense, from slices`` (d >= 0.85, computed from vocabulary slices); a mask computed from
  slices with d < 0.85 goes to ``under 85%, from slices``, a category shown (after the medium
  one) only when such masks exist.

Lines of ``records.jsonl`` that are not JSON objects (a truncated last line from a
killed run) are skipped and counted in ``meta[i]["skipped_lines"]``.  Figures are
drawn with matplotlib's object API on the Agg canvas inside
:func:`matplotlib.rc_context`, so importing or using this module changes no global
matplotlib state and never opens a window.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from toolkit.bench.differences import cached_causes, explain_pairs
from toolkit.bench.records import STATUSES, load_records, records_file, repeat_of
from toolkit.core.errors import MasklabError
from toolkit.data.datasets import embedded_dir, iter_items
from toolkit.report.stats import DEFAULT_BOOT, estimates
from toolkit.report.style import (
    Look,
    engine_label,
    engine_styles,
    figure_legend,
    finish_figure,
    get_look,
    short_vocab,
    start_figure,
    tick_label,
    unique,
)

__all__ = [
    "Runs",
    "ReportError",
    "STATUSES",
    "DENSITY_CATEGORIES",
    "TBM_PERCENTILES",
    "TTFM_PERCENTILES",
    "load_runs",
    "engine_table",
    "density_table",
    "plot_tbm_cdf",
    "plot_ttfm_cdf",
    "walks_table",
    "plot_walks_cdf",
    "plot_density",
    "plot_size",
    "grammar_sizes",
    "common_items",
    "restrict",
    "comparable",
    "comparability_warnings",
    "difference_causes",
    "DEFAULT_EXPLAIN_BUDGET",
    "differing_pairs",
    "as_dirs",
    "option_text",
    "vocab_text",
    "data_text",
]

DENSITY_CATEGORIES: tuple[str, ...] = (
    "sparse: under 2%",
    "medium: 2 to 85%",
    "dense: 85% or more",
    "dense, from slices",
)
"""The density categories always shown, by the share of the vocabulary a mask allows;
:data:`SLICED_LOW` is added, before the dense ones, when it occurs."""

SLICED_LOW = "under 85%, from slices"
LOW_DENSITY = 0.02
HIGH_DENSITY = 0.85

TBM_PERCENTILES: tuple[float, ...] = (25, 50, 75, 90, 95, 99, 99.9)
TTFM_PERCENTILES: tuple[float, ...] = (50, 75, 90, 99)

_LIST_FIELDS = ("tbm_s", "glue_s", "allowed", "sliced", "cases", "direct", "walks")
_NUMERIC_FIELDS = ("compile_s", "ttfm_s", "memory_bytes", "vocab_size", "wall_s")

_MAX_CDF_POINTS = 4000


class ReportError(MasklabError, ValueError):
    """A run directory that cannot be reported on (missing files, no records)."""


@dataclass
class Runs:
    """Records of one or more benchmark runs.

    ``records``: one row per run x engine x item, with ``engine_label`` (ordered
    categorical), ``run`` (0-based position in ``dirs``), ``status``, timings, and
    ``masks`` / ``cases`` / ``cases_ok`` counts (the per-step lists live in ``masks``).
    ``masks``: one row per mask step of the first walk: ``engine_label``, ``item``,
    ``step``, ``tbm_s``, ``allowed``, ``density``, ``sliced``.  ``later``: one row per
    mask step of the later walks of a ``--walks W`` run: ``engine_label``, ``run``,
    ``item``, ``walk`` (2..W), ``step``, ``tbm_s`` (empty otherwise).  ``meta``: each run's ``run.json`` plus
    ``dir``, ``records`` (count), ``skipped_lines`` and ``labels`` (engine -> label).
    ``engines``: every engine label in its stable order (colours follow it).
    """

    records: pd.DataFrame
    masks: pd.DataFrame
    meta: list[dict[str, Any]]
    engines: list[str] = field(default_factory=list)
    #: (engine label, item) -> the mask digests of each valid instance, as recorded
    digests: dict[tuple[str, str], list[list[str]]] = field(default_factory=dict)
    #: what the timing tables are over, when not every record (see :func:`common_items`)
    scope: str = ""
    later: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"engine_label": [], "run": [], "item": [], "repeat": [], "walk": [], "step": [], "tbm_s": []}))

    def __post_init__(self) -> None:
        if not self.engines and "engine_label" in self.records:
            self.engines = list(dict.fromkeys(self.records["engine_label"].astype(str)))


# ---------------------------------------------------------------------------- loading


def as_dirs(dirs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(dirs, str | os.PathLike):
        return [Path(dirs)]
    return [Path(d) for d in dirs]


def _read_meta(d: Path) -> dict[str, Any]:
    path = d / "run.json"
    if not path.is_file():
        return {"meta_error": "run.json missing"}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return {"meta_error": f"run.json unreadable: {e}"}
    if not isinstance(meta, dict):
        return {"meta_error": "run.json is not a JSON object"}
    return meta


def _read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of ``path`` (engine and item present) and the count of skipped lines."""
    return load_records(path)


def _base_label(engine: str, info: Any) -> str:
    version = info.get("version") if isinstance(info, dict) else None
    return engine_label(engine, version)


def _options(info: Any) -> dict[str, Any]:
    opts = info.get("options") if isinstance(info, dict) else None
    return opts if isinstance(opts, dict) else {}


def option_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _assign_labels(
    dirs: Sequence[Path], metas: Sequence[dict[str, Any]], engines: Sequence[list[str]]
) -> list[dict[str, str]]:
    """Per run, engine -> label; labels are unique across runs (see module docstring)."""
    where: dict[str, list[tuple[int, str]]] = {}
    for i, names in enumerate(engines):
        info = metas[i].get("engines") or {}
        for name in names:
            where.setdefault(_base_label(name, info.get(name)), []).append((i, name))
    labels: list[dict[str, str]] = [{} for _ in dirs]
    for base, uses in where.items():
        if len(uses) == 1:
            i, name = uses[0]
            labels[i][name] = base
            continue
        opts = [_options((metas[i].get("engines") or {}).get(name)) for i, name in uses]
        keys = sorted({k for o in opts for k in o}, key=str)
        differing = [
            k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in opts}) > 1
        ]
        tags = [", ".join(f"{k}={option_text(o.get(k))}" for k in differing) for o in opts]
        if not differing or len(set(tags)) < len(tags):
            tags = [dirs[i].resolve().name for i, _ in uses]
            if len(set(tags)) < len(tags) or not all(tags):
                tags = [f"run{i + 1}" for i, _ in uses]
        for (i, name), tag in zip(uses, tags, strict=True):
            labels[i][name] = f"{base} ({tag})"
    return labels


def _mask_arrays(rec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tbm_s``, ``allowed``, ``sliced`` of a record, all the length of ``tbm_s``."""

    def arr(key: str, dtype: Any) -> np.ndarray:
        v = rec.get(key)
        if not isinstance(v, list):
            return np.empty(0, dtype=dtype)
        if dtype is bool:
            return np.array([bool(x) for x in v], dtype=bool)
        return np.array([np.nan if x is None else x for x in v], dtype=float)

    tbm = arr("tbm_s", float)
    n = len(tbm)
    allowed = arr("allowed", float)[:n]
    sliced = arr("sliced", bool)[:n]
    if len(allowed) < n:
        allowed = np.concatenate([allowed, np.full(n - len(allowed), np.nan)])
    if len(sliced) < n:
        sliced = np.concatenate([sliced, np.zeros(n - len(sliced), dtype=bool)])
    return tbm, allowed, sliced


def load_runs(dirs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> Runs:
    """Read run directories (each with ``records.jsonl`` and, usually, ``run.json``).

    Raises :class:`ReportError` (a ``ValueError``) when no directory is given, one is
    missing or has no ``records.jsonl``, or a run has no valid record at all.
    """
    paths = as_dirs(dirs)
    if not paths:
        raise ReportError("no run directory given")
    metas, raw = _read_runs(paths)
    labels, engine_order = _engine_labels(paths, metas, raw)
    rows: list[dict[str, Any]] = []
    digests: dict[tuple[str, str], list[list[str]]] = {}
    columns = _MaskColumns()
    for i, (meta, recs) in enumerate(zip(metas, raw, strict=True)):
        vocab = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}
        latest: dict[tuple[str, str, int], dict[str, Any]] = {}  # a resumed run may redo a task: the last wins
        for rec in recs:
            latest[(str(rec["engine"]), str(rec["item"]), repeat_of(rec))] = rec
        for (engine, item, _), rec in sorted(latest.items(), key=lambda kv: kv[0][2]):
            label = labels[i][engine]
            cases = rec.get("cases") if isinstance(rec.get("cases"), list) else []
            if (label, item) not in digests:  # the first repeat's (every repeat walks the same masks)
                digests[(label, item)] = [c.get("digests") for c in cases
                                          if isinstance(c, dict) and isinstance(c.get("digests"), list)]
            row = _record_row(rec, i, paths[i], engine, label, item, cases, vocab.get("size"))
            rows.append(row)
            columns.add(rec, row)
    records = pd.DataFrame(rows)
    for col in _NUMERIC_FIELDS:
        records[col] = pd.to_numeric(records[col], errors="coerce") if col in records else np.nan
    records["engine_label"] = pd.Categorical(records["engine_label"], categories=engine_order)
    masks, later = columns.frames(engine_order)
    return Runs(records=records, masks=masks, meta=metas, engines=engine_order, digests=digests, later=later)


def _read_runs(paths: list[Path]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Each run's metadata (``run.json`` plus where it is and its record counts) and records."""
    metas: list[dict[str, Any]] = []
    raw: list[list[dict[str, Any]]] = []
    for d in paths:
        if not d.is_dir():
            raise ReportError(f"{d}: not a directory")
        rec_path = records_file(d)
        if not rec_path.is_file():
            raise ReportError(f"{d}: no records.jsonl (is this a masklab bench run directory?)")
        recs, skipped = _read_records(rec_path)
        if not recs:
            extra = f" ({skipped} line(s) were not valid records)" if skipped else ""
            raise ReportError(f"{rec_path}: no records{extra}; nothing to report")
        meta = _read_meta(d)
        meta.update(dir=str(d), records=len(recs), skipped_lines=skipped)
        metas.append(meta)
        raw.append(recs)
    return metas, raw


def _engine_labels(paths: list[Path], metas: list[dict[str, Any]], raw: list[list[dict[str, Any]]]
                   ) -> tuple[list[dict[str, str]], list[str]]:
    """Per run, each engine's label (stored in its meta as ``labels``), and every label
    in a stable order: engine name, then run position."""
    engines_per_run = []
    for meta, recs in zip(metas, raw, strict=True):  # run.json order, then any only seen in the records
        names = list((meta.get("engines") or {}).keys()) + [str(r["engine"]) for r in recs]
        engines_per_run.append(list(dict.fromkeys(str(n) for n in names)))
    labels = _assign_labels(paths, metas, engines_per_run)
    for meta, lab in zip(metas, labels, strict=True):
        meta["labels"] = dict(lab)
    order = sorted(((name, i, labels[i][name]) for i, names in enumerate(engines_per_run) for name in names),
                   key=lambda t: (t[0], t[1]))
    return labels, [label for _, _, label in order]


def _record_row(rec: dict[str, Any], run: int, run_dir: Path, engine: str, label: str, item: str,
                cases: list[Any], run_vocab: Any) -> dict[str, Any]:
    """A record's row of :attr:`Runs.records` (its list fields left out)."""
    row = {k: v for k, v in rec.items() if k not in _LIST_FIELDS}
    row.update(run=run, run_dir=str(run_dir), engine=engine, engine_label=label, item=item, repeat=repeat_of(rec),
               status=str(rec.get("status") or "unknown"), masks=len(_mask_arrays(rec)[0]), cases=len(cases),
               cases_ok=sum(1 for c in cases if isinstance(c, dict) and c.get("ok")),
               has_direct=isinstance(rec.get("direct"), dict))
    if row.get("vocab_size") is None:
        row["vocab_size"] = run_vocab
    return row


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


class _MaskColumns:
    """The per-mask columns of :attr:`Runs.masks` and :attr:`Runs.later`, gathered record
    by record."""

    _MASKS = ("engine_label", "run", "item", "repeat", "step", "tbm_s", "glue_s", "allowed", "sliced", "vocab")
    _LATER = ("engine_label", "run", "item", "repeat", "walk", "step", "tbm_s")

    def __init__(self) -> None:
        self.masks: dict[str, list[np.ndarray]] = {k: [] for k in self._MASKS}
        self.later: dict[str, list[np.ndarray]] = {k: [] for k in self._LATER}

    def add(self, rec: dict[str, Any], row: dict[str, Any]) -> None:
        """The masks of ``rec`` (its first walk) and of its later walks."""
        label, item, run, repeat = row["engine_label"], row["item"], row["run"], row["repeat"]
        tbm, allowed, sliced = _mask_arrays(rec)
        n = len(tbm)
        if n:
            glue = rec.get("glue_s")
            vs = row["vocab_size"]
            for key, value in (("engine_label", np.full(n, label, dtype=object)), ("run", np.full(n, run)),
                               ("item", np.full(n, item, dtype=object)), ("repeat", np.full(n, repeat)),
                               ("step", np.arange(n)), ("tbm_s", tbm),
                               ("glue_s", np.array(glue, dtype=float) if isinstance(glue, list) and len(glue) == n
                                else np.full(n, np.nan)),
                               ("allowed", allowed), ("sliced", sliced),
                               ("vocab", np.full(n, float(vs) if vs else np.nan))):
                self.masks[key].append(value)
        walks = rec.get("walks") if isinstance(rec.get("walks"), list) else []
        for w, entry in enumerate(walks, start=2):
            times = entry.get("tbm_s") if isinstance(entry, dict) else None
            if not isinstance(times, list) or not times:
                continue
            k = len(times)
            for key, value in (("engine_label", np.full(k, label, dtype=object)), ("run", np.full(k, run)),
                               ("item", np.full(k, item, dtype=object)), ("repeat", np.full(k, repeat)),
                               ("walk", np.full(k, w)),
                               ("step", np.arange(k)),
                               ("tbm_s", np.array([np.nan if x is None else x for x in times], dtype=float))):
                self.later[key].append(value)

    def frames(self, engine_order: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(masks, later)`` as :class:`Runs` holds them."""
        m = self.masks
        allowed = _cat(m["allowed"], float)
        with np.errstate(divide="ignore", invalid="ignore"):
            density = allowed / _cat(m["vocab"], float)
        masks = pd.DataFrame({
            "engine_label": pd.Categorical(_cat(m["engine_label"], object), categories=engine_order),
            "run": _cat(m["run"], int), "item": _cat(m["item"], object), "repeat": _cat(m["repeat"], int),
            "step": _cat(m["step"], int),
            "tbm_s": _cat(m["tbm_s"], float), "glue_s": _cat(m["glue_s"], float), "allowed": allowed,
            "density": density, "sliced": _cat(m["sliced"], bool),
        })
        later = pd.DataFrame({k: _cat(v, float if k == "tbm_s" else int if k in ("run", "repeat", "walk", "step")
                                      else object)
                              for k, v in self.later.items()})
        later["engine_label"] = pd.Categorical(later["engine_label"], categories=engine_order)
        return masks, later


# ------------------------------------------------------------------ like with like


def common_items(runs: Runs) -> list[str]:
    """The items every engine label of ``runs`` passed, in every repeat (in record order)."""
    recs = runs.records
    if not len(recs) or not runs.engines:
        return []
    ok = recs.assign(ok=recs["status"] == "passing").groupby(["item", "engine_label"], sort=False,
                                                             observed=True)["ok"].all()
    per = ok[ok].reset_index().groupby("item", sort=False)["engine_label"].nunique()
    want = len({str(e) for e in recs["engine_label"].dropna().unique()})
    return [str(i) for i, n in per.items() if n == want]


def restrict(runs: Runs, items: Iterable[str], scope: str = "") -> Runs:
    """``runs`` with only the records and masks of ``items``."""
    keep = set(items)
    recs = runs.records[runs.records["item"].isin(keep)].reset_index(drop=True)
    masks = runs.masks[runs.masks["item"].isin(keep)].reset_index(drop=True)
    digests = {k: v for k, v in runs.digests.items() if k[1] in keep}
    later = runs.later[runs.later["item"].isin(keep)].reset_index(drop=True)
    return Runs(records=recs, masks=masks, meta=runs.meta, engines=list(runs.engines), digests=digests,
                scope=scope, later=later)


def comparable(runs: Runs, all_items: bool = False) -> Runs:
    """What the comparison tables and figures are drawn from: by default the items every
    engine passed (``scope`` says how many of how many); ``all_items``: every record,
    each engine over its own items.  When no item passed for every engine, every record
    too, and ``scope`` says so."""
    n_items = int(runs.records["item"].nunique()) if len(runs.records) else 0
    if all_items or len(runs.engines) < 2:
        what = "each engine's own items (--all-items)" if all_items and len(runs.engines) > 1 else "every item"
        return restrict(runs, runs.records["item"].unique() if n_items else [],
                        f"{what}: {n_items:,} items")
    common = common_items(runs)
    if not common:
        return restrict(runs, runs.records["item"].unique(),
                        f"no item passed for every engine: each engine's own items ({n_items:,} items)")
    noun = "item" if len(common) == 1 else "items"
    return restrict(runs, common, f"the {len(common):,} {noun} (of {n_items:,}) that every engine passed")


def _mask_differences(runs: Runs, a: str, b: str, items: Iterable[str]) -> tuple[int, int, dict[str, int]]:
    """(differing steps, compared steps, each item with a difference -> its differing
    steps) of engines ``a`` and ``b`` over ``items``: each valid instance's digests,
    step by step, as far as both went."""
    diff = total = 0
    differing: dict[str, int] = {}
    for item in items:
        da, db = runs.digests.get((a, item)), runs.digests.get((b, item))
        if not da or not db or len(da) != len(db):
            continue
        item_diff = 0
        for ca, cb in zip(da, db, strict=True):
            n = min(len(ca), len(cb))
            total += n
            item_diff += sum(1 for x, y in zip(ca[:n], cb[:n], strict=True) if x != y)
        diff += item_diff
        if item_diff:
            differing[item] = item_diff
    return diff, total, differing


def differing_pairs(runs: Runs) -> list[tuple[str, str, int, int, dict[str, int], int]]:
    """Every pair of engine labels whose recorded masks differ on the items both passed:
    ``(a, b, differing steps, compared steps, {differing item: its differing steps},
    items both passed)``."""
    recs = runs.records
    passing = recs[recs["status"] == "passing"]
    items_of = {str(k): set(g["item"]) for k, g in passing.groupby("engine_label", observed=True)}
    labels = [e for e in runs.engines if e in items_of]
    out = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            shared = sorted(items_of[a] & items_of[b])
            diff, total, items = _mask_differences(runs, a, b, shared)
            if diff:
                out.append((a, b, diff, total, items, len(shared)))
    return out


DEFAULT_EXPLAIN_BUDGET = 120.0
"""Seconds ``masklab report`` spends naming why engines' masks differ (``--explain-budget``)."""


def difference_causes(runs: Runs, budget_s: float) -> dict[tuple[str, str], str]:
    """Why each pair of :func:`differing_pairs` differs, in a sentence
    (:func:`toolkit.bench.differences.explain_pairs`: the first differing items re-run,
    each token judged against the grammar and the documented deviations), within
    ``budget_s`` seconds in all; cached causes in a run folder cost nothing, and with
    ``budget_s`` 0 only they are given.  A pair whose engines come from different runs
    is not re-run."""
    by_run: dict[int, list[tuple[str, str, Mapping[str, int]]]] = {}
    names: dict[tuple[int, str], str] = {}
    out: dict[tuple[str, str], str] = {}
    for a, b, _, _, items, _ in differing_pairs(runs):
        where = [(i, {v: k for k, v in (m.get("labels") or {}).items()}) for i, m in enumerate(runs.meta)]
        both = [(i, lab[a], lab[b]) for i, lab in where if a in lab and b in lab]
        if not both:
            out[(a, b)] = "cause not examined (the two engines come from different runs)"
            continue
        i, ea, eb = both[0]
        by_run.setdefault(i, []).append((ea, eb, items))
        names[(i, ea + "\t" + eb)] = a + "\t" + b
    for i, pairs in by_run.items():
        run = Path(runs.meta[i]["dir"])
        found = explain_pairs(run, pairs, budget_s=budget_s / len(by_run)) if budget_s > 0 else cached_causes(run)
        for ea, eb, _ in pairs:
            a, b = names[(i, ea + "\t" + eb)].split("\t")
            cause = found.get((ea, eb))
            out[(a, b)] = cause.text() if cause is not None else "cause not examined (report --explain-budget)"
    return out


def comparability_warnings(runs: Runs, limit: int | None = None,
                           causes: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """What makes the engines of one table not like for like: runs on different
    vocabularies or data, and engines that computed different masks on the steps they
    share (from the recorded digests, on the items both passed).  ``limit``: at most
    that many pairs of engines, those with the most differing steps first, and a last
    line counting the rest (the terminal's summary; the report lists every pair).
    ``causes``: (label a, label b) -> why they differ (:func:`difference_causes`),
    added to that pair's line."""
    out: list[str] = []
    vocabs = unique(_vocab_key(m) for m in runs.meta)
    if len(vocabs) > 1:
        out.append(f"the runs used different vocabularies ({' / '.join(vocabs)}): their masks and times "
                   "are not comparable")
    datas = unique(str(m.get("data")) for m in runs.meta if m.get("data"))
    if len(datas) > 1:
        out.append(f"the runs used different data ({' / '.join(datas)}): their items differ")
    if len(vocabs) > 1:
        return out
    pairs: list[tuple[int, str]] = []
    for a, b, diff, total, items, shared in differing_pairs(runs):
        cause = (causes or {}).get((a, b))
        pairs.append((diff, f"{a} and {b} computed different masks on {diff:,} of {total:,} common "
                            f"steps ({len(items):,} of {shared:,} items both passed): their times "
                            "are not of the same work" + (f". Why: {cause}" if cause else "")))
    if limit is not None and len(pairs) > limit:
        pairs.sort(key=lambda p: -p[0])
        rest = len(pairs) - limit
        return out + [t for _, t in pairs[:limit]] + [
            f"... and {rest} more pair{'s' if rest > 1 else ''} of engines with different masks (all in report.md)"]
    return out + [t for _, t in pairs]


def _vocab_key(meta: Mapping[str, Any]) -> str:
    v = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}
    spec, size = v.get("spec"), v.get("size")
    return f"{spec} ({size} ids)" if spec or size else ""


# ---------------------------------------------------------------------------- tables


def _stats(values: np.ndarray, percentiles: Sequence[float]) -> list[float]:
    """[mean, *percentiles] (numpy's default linear method), NaN when empty."""
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return [math.nan] * (1 + len(percentiles))
    return [float(values.mean()), *(float(p) for p in np.percentile(values, percentiles))]


def _pct_name(p: float) -> str:
    return f"p{p:g}"


def _estimate_columns(row: dict[str, Any], prefix: str, unit: str, values: np.ndarray, items: np.ndarray,
                      repeats: np.ndarray, percentiles: Sequence[float], boot: int, seed: int) -> None:
    """``row``'s columns of one timing: ``{prefix} avg/pNN ({unit})`` (the median over
    repeats) with ``{prefix} avg/pNN low/high ({unit})`` (the bootstrap interval,
    :mod:`toolkit.report.stats`; only when ``boot`` > 0)."""
    est = estimates(values, items, repeats, percentiles, mean=True, n_boot=boot, seed=seed)
    for name, e in est.items():
        row[f"{prefix} {name} ({unit})"] = e.value
        if boot:
            row[f"{prefix} {name} low ({unit})"] = e.low
            row[f"{prefix} {name} high ({unit})"] = e.high


def _repeat_max(values: np.ndarray, repeats: np.ndarray) -> float:
    """The median over repeats of each repeat's maximum (NaN without a value)."""
    ok = ~np.isnan(values)
    maxima = [float(values[ok & (repeats == r)].max()) for r in np.unique(repeats[ok])]
    return float(np.median(maxima)) if maxima else math.nan


def _mask_max(masks: pd.DataFrame, tbm: np.ndarray) -> float:
    """The largest of each mask's median over the repeats (a mask: a run's item and
    step; NaN without a value): a mask slow in one repeat only met the host's hiccup, a
    mask slow in most is the engine's slowest."""
    ok = ~np.isnan(tbm)
    if not ok.any():
        return math.nan
    per = masks.loc[ok, ["run", "item", "step"]].assign(t=tbm[ok])
    return float(per.groupby(["run", "item", "step"], observed=True, sort=False)["t"].median().max())


def engine_table(runs: Runs, *, boot: int = DEFAULT_BOOT, seed: int = 0) -> pd.DataFrame:
    """MaskBench-style table, one row per engine label (index ``engine``).

    Columns: ``TBM avg/p25/p50/p75/p90/p95/p99/p99.9/max (µs)`` over every mask step
    (and ``TBM glue avg/p50`` where an adapter timed the engine apart from its own work);
    ``TTFM avg/p50/p75/p90/p99 (ms)`` over the items that reached a first mask.  Each
    is the median over the run's repeats (``bench --repeat``) of the figure of each
    repeat, and, with ``boot`` bootstrap draws (0: none), has ``low`` and ``high``
    columns beside it (``TBM p50 low (µs)``...): its 95 % interval, items and repeats
    resampled (:mod:`toolkit.report.stats`; the max has none).  With repeats, ``TBM max
    per mask (µs)`` is the largest of each mask's median over the repeats: the engine's
    slowest mask, where the max also counts a host's hiccup (on a 2-core VM, some 4 a
    second of 50-260 us, in any call).
    Then ``masks`` (every repeat's), ``items``, ``repeats``, one count per status in
    :data:`STATUSES` (plus ``other`` when a record has another status) and
    ``passing %``, over each item's first repeat, and with repeats ``unstable``: the items
    whose status differs between repeats; ``unenforced`` (runs that record it:
    ``rec["unenforced"]``, issue 44): the items whose compile said it left some keyword
    unenforced (a peer's warnings or documented omissions; always 0 for masklab's
    strategies).  Engines without masks or TTFM have NaN there.
    """
    recs, masks = runs.records, runs.masks
    by_label = {str(k): g for k, g in masks.groupby("engine_label", observed=True)}
    rec_groups = {str(k): g for k, g in recs.groupby("engine_label", observed=True)}
    has_glue = "glue_s" in masks and bool(masks["glue_s"].notna().any())
    known = set(STATUSES)
    has_other = bool((~recs["status"].isin(known)).any()) if len(recs) else False
    has_unenforced = "unenforced" in recs
    has_repeats = "repeat" in recs and bool((recs["repeat"] > 1).any())
    empty = masks.iloc[0:0]
    rows = []
    for label in runs.engines:
        m = by_label.get(label, empty)
        items, reps = m["item"].to_numpy(dtype=object), m["repeat"].to_numpy(dtype=np.int64)
        tbm = m["tbm_s"].to_numpy(dtype=float) * 1e6
        g = rec_groups.get(label, recs.iloc[0:0])
        row: dict[str, Any] = {"engine": label}
        _estimate_columns(row, "TBM", "µs", tbm, items, reps, TBM_PERCENTILES, boot, seed)
        row["TBM max (µs)"] = _repeat_max(tbm, reps)
        if has_repeats:
            row["TBM max per mask (µs)"] = _mask_max(m, tbm)
        if has_glue:
            glue = m["glue_s"].to_numpy(dtype=float) * 1e6
            _estimate_columns(row, "TBM glue", "µs", glue, items, reps, (50,), boot, seed)
        _estimate_columns(row, "TTFM", "ms", g["ttfm_s"].to_numpy(dtype=float) * 1e3,
                          g["item"].to_numpy(dtype=object), g["repeat"].to_numpy(dtype=np.int64),
                          TTFM_PERCENTILES, boot, seed)
        row.update(_outcome_counts(g, has_other, has_unenforced, has_repeats))
        row["masks"] = len(tbm)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("engine")
    first = ["masks", "items", *(["repeats", "unstable"] if has_repeats else [])]
    order = [c for c in table.columns if c.startswith(("TBM", "TTFM"))] + first + [
        c for c in table.columns if not c.startswith(("TBM", "TTFM")) and c not in first]
    table = table[order]
    int_cols = [c for c in ("masks", "items", "repeats", "unstable", *STATUSES, "other", "unenforced")
                if c in table]
    table[int_cols] = table[int_cols].astype("int64")
    return table


def _outcome_counts(g: pd.DataFrame, has_other: bool, has_unenforced: bool, has_repeats: bool) -> dict[str, Any]:
    """An engine's counts of items per status (over each item's first repeat), the
    items whose status differs between repeats, and those with unenforced keywords."""
    first = g[g["repeat"] == g.groupby("item")["repeat"].transform("min")] if len(g) else g
    out: dict[str, Any] = {"items": len(first)}
    if has_repeats:
        out["repeats"] = int(g["repeat"].max()) if len(g) else 0
        out["unstable"] = int((g.groupby("item")["status"].nunique() > 1).sum()) if len(g) else 0
    counts = first["status"].value_counts()
    for s in STATUSES:
        out[s] = int(counts.get(s, 0))
    if has_other:
        out["other"] = int(len(first) - sum(out[s] for s in STATUSES))
    out["passing %"] = 100.0 * out["passing"] / len(first) if len(first) else math.nan
    if has_unenforced:
        out["unenforced"] = int(first["unenforced"].map(lambda v: isinstance(v, list) and len(v) > 0).sum())
    return out


WALK_STATS: tuple[str, ...] = ("avg", "p50", "p99", "max")
"""The TBM figures :func:`walks_table` gives for the first walk and the later ones."""


def walks_table(runs: Runs) -> pd.DataFrame:
    """The first walk against the later ones (``bench --walks W``), one row per engine
    label that has later walks (index ``engine``).

    Columns: ``first avg/p50/p99/max (µs)`` (``tbm_s``, as :func:`engine_table`),
    ``later avg/p50/p99/max (µs)`` (walks 2..W pooled, on the grammar the first walk
    warmed), ``later/first p50`` and ``later/first p99``, and the ``masks`` of each.
    Empty when no run walked twice."""
    cols = [f"{w} {s} (µs)" for w in ("first", "later") for s in WALK_STATS]
    cols += ["later/first p50", "later/first p99", "first masks", "later masks"]
    if not len(runs.later):
        return pd.DataFrame(columns=cols)
    first = {str(k): g.to_numpy(dtype=float) * 1e6
             for k, g in runs.masks.groupby("engine_label", observed=True)["tbm_s"]}
    again = {str(k): g.to_numpy(dtype=float) * 1e6
             for k, g in runs.later.groupby("engine_label", observed=True)["tbm_s"]}
    rows = []
    for label in runs.engines:
        if label not in again:
            continue
        row: dict[str, Any] = {"engine": label}
        for name, values in (("first", first.get(label, np.empty(0))), ("later", again[label])):
            values = values[~np.isnan(values)]
            avg, p50, p99 = _stats(values, (50, 99))
            row.update({f"{name} avg (µs)": avg, f"{name} p50 (µs)": p50, f"{name} p99 (µs)": p99,
                        f"{name} max (µs)": float(values.max()) if len(values) else math.nan,
                        f"{name} masks": len(values)})
        for p in ("p50", "p99"):
            a, b = row[f"first {p} (µs)"], row[f"later {p} (µs)"]
            row[f"later/first {p}"] = b / a if a and not math.isnan(a) else math.nan
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=cols)
    table = pd.DataFrame(rows).set_index("engine")[cols]
    table[["first masks", "later masks"]] = table[["first masks", "later masks"]].astype("int64")
    return table


#: the columns of :func:`work_table`, by MaskStats field
WORK_COLUMNS = {
    "trie_nodes": "trie nodes",
    "lexer_steps": "lexer steps",
    "earley_items": "Earley items",
    "tokens_checked": "tokens checked",
    "tokens_sliced": "tokens sliced",
    "tokens_cached": "tokens cached",
}


def work_table(runs: Runs) -> pd.DataFrame:
    """The work each engine did per mask (index ``engine``), from the records' ``work``
    (:class:`~toolkit.core.protocol.MaskStats` summed over an item's valid instances).

    Columns: ``masks`` (the masks counted) and one column per :data:`WORK_COLUMNS`, the
    mean per mask over every item with counters.  A count the engine cannot see (the
    peers count masks only) is NaN; engines without any ``work`` are left out."""
    rows = []
    recs = runs.records
    if "work" not in recs:
        return pd.DataFrame(columns=["masks", *WORK_COLUMNS.values()])
    for label in runs.engines:
        works = [w for w in recs.loc[recs["engine_label"] == label, "work"] if isinstance(w, dict)]
        masks = sum(int(w.get("masks") or 0) for w in works)
        if not works or masks == 0:
            continue
        row: dict[str, Any] = {"engine": label, "masks": masks}
        for key, col in WORK_COLUMNS.items():
            vals = [w.get(key) for w in works]
            row[col] = math.nan if any(v is None for v in vals) else sum(vals) / masks
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["masks", *WORK_COLUMNS.values()])
    table = pd.DataFrame(rows).set_index("engine")
    table["masks"] = table["masks"].astype("int64")
    return table


def draft_table(runs: Runs) -> pd.DataFrame:
    """Speculative draft masks against sequential steps (``bench --draft``), one row per
    engine and draft length k (index ``engine``, ``k``).

    Columns: ``positions`` timed; ``draft µs`` and ``sequential µs`` (medians: the k+1
    masks of a draft by ``fill_draft_bitmasks``, and a fill, k accept + fill steps and
    a rollback); ``µs per mask`` (the draft's median over its k+1 rows); ``ratio`` (the
    median over positions of draft / sequential: below 1 the draft call is cheaper);
    ``mismatch`` (positions where the two gave different rows: must be 0)."""
    rows = []
    recs = runs.records
    if "draft" not in recs:
        return pd.DataFrame(columns=["positions", "draft µs", "sequential µs", "µs per mask", "ratio", "mismatch"])
    for label in runs.engines:
        merged: dict[int, dict[str, list[float]]] = {}
        mismatch: dict[int, int] = {}
        for d in recs.loc[recs["engine_label"] == label, "draft"]:
            if not isinstance(d, dict):
                continue
            for k, v in d.items():
                m = merged.setdefault(int(k), {"draft_s": [], "seq_s": []})
                m["draft_s"] += list(v.get("draft_s", []))
                m["seq_s"] += list(v.get("seq_s", []))
                mismatch[int(k)] = mismatch.get(int(k), 0) + int(v.get("mismatch", 0))
        for k in sorted(merged):
            a = np.asarray(merged[k]["draft_s"], dtype=float)
            b = np.asarray(merged[k]["seq_s"], dtype=float)
            if not len(a):
                continue
            ok = b > 0
            rows.append({"engine": label, "k": k, "positions": len(a), "draft µs": 1e6 * float(np.median(a)),
                         "sequential µs": 1e6 * float(np.median(b)),
                         "µs per mask": 1e6 * float(np.median(a)) / (k + 1),
                         "ratio": float(np.median(a[ok] / b[ok])) if ok.any() else math.nan,
                         "mismatch": mismatch[k]})
    if not rows:
        return pd.DataFrame(columns=["positions", "draft µs", "sequential µs", "µs per mask", "ratio", "mismatch"])
    return pd.DataFrame(rows).set_index(["engine", "k"])


def plot_draft(runs: Runs, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
               look: str | Look = "screen", pdf: bool = False) -> Any:
    """The cost of draft masks against the draft length k, one line per engine: (a) the
    ratio to k sequential steps, (b) µs per mask, log-2 k axis.  Draws and saves like
    :func:`plot_tbm_cdf` (``ax``: two Axes)."""
    table = draft_table(runs)
    styles = _styles(runs)
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, (left, right) = start_figure(ax, lk, (10.0, 4.6), panels=2)
        handles, labels = [], []
        for label in runs.engines:
            if label not in table.index.get_level_values(0):
                continue
            t = table.loc[label]
            st = styles[label]
            (h,) = left.plot(t.index, t["ratio"], marker="o", color=st["color"], linestyle=st["linestyle"])
            right.plot(t.index, t["µs per mask"], marker="o", color=st["color"], linestyle=st["linestyle"])
            handles.append(h)
            labels.append(label)
        for a in (left, right):
            a.set_xscale("log", base=2)
            a.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
            a.set_xlabel("draft length k (tokens)")
            a.grid(True, which="major")
        left.axhline(1.0, color="0.5", linewidth=0.8)
        left.set_ylabel("draft call / sequential steps")
        right.set_yscale("log")
        right.set_ylabel("µs per mask (log scale)")
        if not handles:
            left.text(0.5, 0.5, "no draft masks timed", ha="center", va="center", transform=left.transAxes)
        _panel_titles((left, right), lk, ["cost against k sequential steps (median)", "per mask of the draft (median)"])
        if lk.titles:
            fig.suptitle(f"Speculative draft masks · {_subtitle(runs)}")
        figure_legend(fig, handles, labels)
        return finish_figure(fig, path, lk, pdf=pdf)


def _categories(masks: pd.DataFrame) -> pd.Series:
    d = masks["density"].to_numpy(dtype=float)
    sliced = masks["sliced"].to_numpy(dtype=bool)
    out = np.full(len(masks), None, dtype=object)
    out[~sliced & (d < LOW_DENSITY)] = DENSITY_CATEGORIES[0]
    out[~sliced & (d >= LOW_DENSITY) & (d < HIGH_DENSITY)] = DENSITY_CATEGORIES[1]
    out[~sliced & (d >= HIGH_DENSITY)] = DENSITY_CATEGORIES[2]
    out[sliced & (d >= HIGH_DENSITY)] = DENSITY_CATEGORIES[3]
    out[sliced & (d < HIGH_DENSITY)] = SLICED_LOW
    return pd.Series(out, index=masks.index, name="category")


def density_table(runs: Runs) -> pd.DataFrame:
    """Masks per engine x density category (MultiIndex ``engine``, ``category``).

    Columns: ``% of masks``, ``% of mask time`` (both sum to 100 per engine),
    ``µs per mask`` (mean TBM of the category, NaN when empty) and ``masks``.  Every
    engine with masks gets all of :data:`DENSITY_CATEGORIES`, plus :data:`SLICED_LOW`
    when any engine has such masks.  Engines without masks are left out; masks with
    no known density (no ``allowed`` or vocabulary size) are left out too.
    """
    masks = runs.masks.assign(category=_categories(runs.masks))
    masks = masks[masks["category"].notna()]
    cats = list(DENSITY_CATEGORIES)
    if (masks["category"] == SLICED_LOW).any():
        cats.insert(2, SLICED_LOW)  # by density: after the medium masks, before the dense ones
    rows = []
    groups = {str(k): g for k, g in masks.groupby("engine_label", observed=True)}
    for label in runs.engines:
        g = groups.get(label)
        if g is None or len(g) == 0:
            continue
        total_n = len(g)
        total_t = float(g["tbm_s"].sum())
        by_cat = g.groupby("category")["tbm_s"]
        n = by_cat.size()
        t = by_cat.sum()
        for c in cats:
            cn = int(n.get(c, 0))
            ct = float(t.get(c, 0.0))
            rows.append(
                {
                    "engine": label,
                    "category": c,
                    "% of masks": 100.0 * cn / total_n,
                    "% of mask time": 100.0 * ct / total_t if total_t > 0 else math.nan,
                    "µs per mask": 1e6 * ct / cn if cn else math.nan,
                    "masks": cn,
                }
            )
    cols = ["engine", "category", "% of masks", "% of mask time", "µs per mask", "masks"]
    table = pd.DataFrame(rows, columns=cols).set_index(["engine", "category"])
    table["masks"] = table["masks"].astype("int64")
    return table



def _styles(runs: Runs) -> dict[str, dict[str, Any]]:
    """:func:`engine_styles` for the engine labels of ``runs``."""
    names: dict[str, str] = {}
    if "engine_label" in runs.records and "engine" in runs.records:
        pairs = runs.records[["engine_label", "engine"]].astype(str).drop_duplicates("engine_label")
        names = dict(zip(pairs["engine_label"], pairs["engine"], strict=True))
    return engine_styles({label: names.get(label, label.split(" ")[0]) for label in runs.engines})


def vocab_text(runs: Runs, short: bool = False) -> str:
    parts = []
    for meta in runs.meta:
        v = meta.get("vocab") if isinstance(meta.get("vocab"), dict) else {}
        spec, size = v.get("spec"), v.get("size")
        if spec and short:
            spec = short_vocab(str(spec))
        if spec and size:
            parts.append(f"{spec} ({int(size):,} ids)")
        elif spec or size:
            parts.append(str(spec or f"{int(size):,} ids"))
    if not parts:
        sizes = runs.records["vocab_size"].dropna().unique()
        parts = [f"{int(s):,} ids" for s in sizes]
    return " / ".join(unique(parts)) or "unknown"


def data_text(runs: Runs) -> str:
    names = []
    for meta in runs.meta:
        data = meta.get("data")
        if data:
            s = str(data)
            names.append(Path(s).name if len(s) > 30 and Path(s).name else s)
    return " / ".join(unique(names)) or "unknown"


def _subtitle(runs: Runs) -> str:
    text = f"vocabulary: {vocab_text(runs, short=True)} · data: {data_text(runs)}"
    return f"{text}\n{runs.scope}" if runs.scope else text


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their empirical CDF, thinned to a few thousand points.

    The kept ranks are evenly spaced, plus log-spaced ones near the top so that the
    upper tail (p99, p99.9, max) keeps its shape.
    """
    x = np.sort(values)
    n = len(x)
    y = np.arange(1, n + 1) / n
    if n > _MAX_CDF_POINTS:
        half = _MAX_CDF_POINTS // 2
        even = np.linspace(0, n - 1, half)
        tail = n - np.geomspace(1, n, half)
        idx = np.unique(np.clip(np.concatenate([even, tail, [0, n - 1]]).astype(int), 0, n - 1))
        x, y = x[idx], y[idx]
    return np.concatenate([[x[0]], x]), np.concatenate([[0.0], y])



def _plot_cdf(runs: Runs, path: str | os.PathLike[str] | None, series: dict[str, np.ndarray], title: str,
              xlabel: str, ylabel: str, *, ax: Any = None, look: str | Look = "screen", pdf: bool = False) -> Any:
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, (axis,) = start_figure(ax, lk, (6.4, 4.6))
        handles, labels = _draw_cdf(axis, runs, series)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        if lk.titles:
            axis.set_title(f"{title}\n{_subtitle(runs)}")
        if ax is None:
            figure_legend(fig, handles, labels)
        elif handles:
            axis.legend(handles, labels)
        return finish_figure(fig, path, lk, pdf=pdf)


def _draw_cdf(ax: Any, runs: Runs, series: dict[str, np.ndarray]) -> tuple[list[Any], list[str]]:
    """One empirical CDF per engine label of ``series`` on ``ax`` (log x): the lines'
    handles and legend labels."""
    styles = _styles(runs)
    handles, labels = [], []
    for label in runs.engines:
        values = series.get(label)
        if values is None:
            continue
        values = values[np.isfinite(values) & (values > 0)]
        if len(values) == 0:
            continue
        x, y = _ecdf(values)
        st = styles[label]
        (h,) = ax.plot(x, y, drawstyle="steps-post", color=st["color"], linestyle=st["linestyle"])
        handles.append(h)
        labels.append(f"{label} (n={len(values):,})")
    if handles:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(FuncFormatter(tick_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(-0.02, 1.02)  # lines at 0 and 1 are not clipped by the frame
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.grid(True, which="major")
    return handles, labels


def plot_walks_cdf(runs: Runs, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                   look: str | Look = "screen", pdf: bool = False) -> Any:
    """Two TBM CDFs (log x, µs): (a) the first walk of each engine that walked again, (b)
    its later walks (``bench --walks W``, on a warm grammar), on one x range.  Draws and
    saves like :func:`plot_tbm_cdf` (``ax``: two Axes)."""
    again = {str(k): g.to_numpy(dtype=float) * 1e6
             for k, g in runs.later.groupby("engine_label", observed=True)["tbm_s"]}
    first = {str(k): g.to_numpy(dtype=float) * 1e6
             for k, g in runs.masks.groupby("engine_label", observed=True)["tbm_s"] if str(k) in again}
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, axes = start_figure(ax, lk, (10.0, 4.4), panels=2)
        handles, labels = _draw_cdf(axes[0], runs, first)
        _draw_cdf(axes[1], runs, again)
        axes[1].sharex(axes[0])
        _panel_titles(axes, lk, ["first walk (cold grammar)", "later walks (warm grammar)"])
        for a in axes:
            a.set_xlabel("time per mask step (µs, log scale)")
            a.set_ylabel("fraction of masks")
        if lk.titles:
            fig.suptitle(f"Time between masks, first and later walks on one compile\n{_subtitle(runs)}")
        figure_legend(fig, handles, [lab.split(" (n=")[0] for lab in labels])
        return finish_figure(fig, path, lk, pdf=pdf)


def _panel_titles(axes: Sequence[Any], look: Look, titles: Sequence[str]) -> None:
    """``(a) title``, ``(b) title``... on the screen; a paper look keeps only the letters
    (its caption says what each panel is)."""
    for k, (a, title) in enumerate(zip(axes, titles, strict=True)):
        letter = f"({chr(ord('a') + k)})"
        a.set_title(f"{letter} {title}" if look.titles else letter, loc="center" if look.titles else "left")


def plot_tbm_cdf(runs: Runs, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                 look: str | Look = "screen", pdf: bool = False) -> Any:
    """Empirical CDF of the time per mask step, one line per engine (log x, µs); engines
    without masks are left out.  Returns the figure.

    ``ax``: draw on this Axes (of the caller's figure; its legend on the Axes) instead of a
    new figure.  ``look``: ``"screen"`` (the report's), or a paper look, ``"column"``
    (3.3 in wide) or ``"page"`` (6.9 in), without titles (:data:`~toolkit.report.style.LOOKS`).
    ``path``: the stem to save to (a ``.png``/``.pdf`` suffix is dropped): the PNG, and the
    PDF when ``pdf`` is true or the look is a paper one; None saves nothing.
    """
    series = {
        str(k): g.to_numpy(dtype=float) * 1e6
        for k, g in runs.masks.groupby("engine_label", observed=True)["tbm_s"]
    }
    return _plot_cdf(runs, path, series, "Time between masks (TBM)", "time per mask step (µs, log scale)",
                     "fraction of masks", ax=ax, look=look, pdf=pdf)


def plot_ttfm_cdf(runs: Runs, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                  look: str | Look = "screen", pdf: bool = False) -> Any:
    """Empirical CDF of the time to first mask (compile + first mask) per engine (log x,
    ms), over the items that reached a first mask; draws and saves like :func:`plot_tbm_cdf`."""
    series = {
        str(k): g.dropna().to_numpy(dtype=float) * 1e3
        for k, g in runs.records.groupby("engine_label", observed=True)["ttfm_s"]
    }
    return _plot_cdf(runs, path, series, "Time to first mask (TTFM = compile + first mask)",
                     "time to first mask (ms, log scale)", "fraction of items", ax=ax, look=look, pdf=pdf)


def plot_density(runs: Runs, path: str | os.PathLike[str] | None = None, *, ax: Any = None,
                 look: str | Look = "screen", pdf: bool = False) -> Any:
    """Grouped bars per density category: (a) % of masks, (b) % of mask time; engines
    without masks are left out.  Draws and saves like :func:`plot_tbm_cdf` (``ax``: two Axes)."""

    table = density_table(runs)
    styles = _styles(runs)
    engines = [e for e in runs.engines if e in table.index.get_level_values(0)]
    cats = list(dict.fromkeys(table.index.get_level_values(1))) or list(DENSITY_CATEGORIES)
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, axes = start_figure(ax, lk, (11.0, 4.6), panels=2)
        x = np.arange(len(cats))
        width = 0.8 / max(1, len(engines))
        handles = []
        for a, column in zip(axes, ["% of masks", "% of mask time"], strict=True):
            for j, label in enumerate(engines):
                values = [table.loc[(label, c), column] if (label, c) in table.index else 0 for c in cats]
                st = styles[label]
                bars = a.bar(x - 0.4 + width * (j + 0.5), np.nan_to_num(np.asarray(values, dtype=float)), width,
                             color=st["color"], hatch=st["hatch"], edgecolor="white", linewidth=0.6, label=label)
                if a is axes[0]:
                    handles.append(bars)
            a.set_xticks(x, [_wrap_category(c) if lk.titles else _SHORT_CATEGORIES.get(c, c) for c in cats])
            if lk.titles:
                a.set_xlabel("mask density (allowed / vocabulary) and slicing")
            a.set_ylim(0, 100)
            a.grid(True, axis="y")
            a.grid(False, axis="x")
            if not engines:
                a.text(0.5, 0.5, "no masks", ha="center", va="center", transform=a.transAxes)
        _panel_titles(axes, lk, ["share of masks", "share of mask time"])
        axes[0].set_ylabel("% of the engine's masks" if lk.titles else "% of masks")
        axes[1].set_ylabel("% of the engine's mask time" if lk.titles else "% of mask time")
        if lk.titles:
            fig.suptitle(f"Masks by density\n{_subtitle(runs)}")
        figure_legend(fig, handles, engines)
        return finish_figure(fig, path, lk, pdf=pdf)


_SHORT_CATEGORIES = {DENSITY_CATEGORIES[0]: "sparse\nunder 2%", DENSITY_CATEGORIES[1]: "medium\n2-85%",
                     SLICED_LOW: "sliced,\n<85%", DENSITY_CATEGORIES[2]: "dense\n85%+",
                     DENSITY_CATEGORIES[3]: "dense,\nsliced"}
"""The categories in a paper's narrow panels (its caption names them in full)."""


def _wrap_category(category: str) -> str:
    """A density category on two lines (``sparse:`` over ``under 2%``)."""
    head, sep, tail = category.partition(": ")
    if sep:
        return f"{head}:\n{tail}"
    head, sep, tail = category.partition(", ")
    return f"{head},\n{tail}" if sep else category


# ------------------------------------------------------------------------ size figure


def grammar_sizes(runs: Runs) -> pd.Series:
    """Per item of the runs: the productions of masklab's :class:`~toolkit.grammar.Grammar`
    of it (the size axis of :func:`plot_size`), read from each run's data folder (run.json's
    ``data``); an item masklab cannot read, or whose folder is gone, is left out."""
    wanted = set(runs.records["item"].astype(str))
    out: dict[str, int] = {}
    for meta in runs.meta:
        data = meta.get("data")
        folder = embedded_dir() if data in (None, "datasets (embedded)") else Path(str(data))
        if not folder.is_dir():
            continue
        for item in iter_items(folder):
            if item.name not in wanted or item.name in out:
                continue
            try:
                g = item.grammar()
            except (MasklabError, RecursionError):
                continue
            out[item.name] = sum(len(alts) for alts in g.rules.values())
    return pd.Series(out, name="productions", dtype=float)


def plot_size(runs: Runs, path: str | os.PathLike[str] | None = None, sizes: pd.Series | None = None, *,
              ax: Any = None, look: str | Look = "screen", pdf: bool = False) -> Any:
    """(a) TTFM and (b) the compiled grammar's memory against the grammar's size
    (:func:`grammar_sizes`: productions of masklab's Grammar), one point per item and
    engine, log-log, with each engine's median per size decade drawn through (an engine
    that reports no memory, a peer, is absent from (b)).  Draws and saves like
    :func:`plot_tbm_cdf` (``ax``: two Axes)."""
    sizes = grammar_sizes(runs) if sizes is None else sizes
    rec = runs.records.copy()
    rec["productions"] = rec["item"].astype(str).map(sizes)
    styles = _styles(runs)
    lk = get_look(look)
    with mpl.rc_context(lk.rc):
        fig, axes = start_figure(ax, lk, (11.0, 4.6), panels=2)
        handles = []
        for a, column, scale, ylabel in (
            (axes[0], "ttfm_s", 1e3, "time to first mask (ms, log scale)"),
            (axes[1], "memory_bytes", 1e-6, "compiled grammar (MB, log scale)"),
        ):
            for label in runs.engines:
                part = rec[(rec["engine_label"].astype(str) == label)].dropna(subset=["productions", column])
                part = part[part[column] > 0]
                if not len(part):
                    continue
                st = styles[label]
                x = part["productions"].to_numpy(dtype=float)
                y = part[column].to_numpy(dtype=float) * scale
                a.scatter(x, y, s=6, alpha=0.35, color=st["color"], linewidths=0)
                decade = np.floor(np.log10(np.maximum(x, 1)))
                xs, ys = [], []
                for d in np.unique(decade):
                    sel = decade == d
                    xs.append(float(np.median(x[sel])))
                    ys.append(float(np.median(y[sel])))
                (line,) = a.plot(xs, ys, color=st["color"], linestyle=st.get("linestyle", "-"),
                                 marker="o", markersize=3.5, label=label)
                if a is axes[0]:
                    handles.append(line)
            a.set_xscale("log")
            a.set_yscale("log")
            a.set_xlabel("grammar size (productions, log scale)")
            a.set_ylabel(ylabel)
            if not a.has_data():
                a.text(0.5, 0.5, "no data", ha="center", va="center", transform=a.transAxes)
        _panel_titles(axes, lk, ["TTFM", "memory"])
        if lk.titles:
            fig.suptitle(f"Startup and memory against grammar size\n{_subtitle(runs)}")
        figure_legend(fig, handles, [h.get_label() for h in handles])
        return finish_figure(fig, path, lk, pdf=pdf)
