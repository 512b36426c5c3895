"""Figures with their 95 % intervals: a run's items and its repeats resampled.

A timing table's figure (a TBM percentile, the mean TTFM...) is an *estimator* over a
run: the figure is computed on each repeat's values (``bench --repeat R``) and the
median over the repeats is reported (one repeat: its figure).  Its interval is a
percentile bootstrap of that whole estimator, resampling both sources of noise:

* the **items**, drawn with replacement, each with all of its values (the masks of one
  item are not independent of each other, so single masks are never resampled alone);
* the **repeats**, drawn with replacement, so that a figure that moves from run to run
  gets a wide interval even on many items.

For each of ``n_boot`` draws the figure is recomputed on the drawn items of each drawn
repeat and the median over the drawn repeats taken; the interval is the 2.5th and 97.5th
percentiles of those medians (``level=0.95``).  Percentiles are numpy's default linear
interpolation, on the resampled values exactly as :func:`numpy.percentile` would compute
them (a weighted rank search, not a materialized resample), so the point and the draws
are the same statistic.  The draws are seeded: a report is reproducible.

An interval says how much the figure would move on other items like these and on
another run of the same machine; it does not cover a different machine or load (the
run's provenance says what those were).  The maximum gets no interval (a bootstrap
cannot reach past the largest value it has seen).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from toolkit.core.errors import LimitExceeded

__all__ = ["DEFAULT_BOOT", "MAX_BOOT", "Estimate", "estimates", "interval_text", "with_intervals"]

DEFAULT_BOOT = 1000
"""Bootstrap draws per table (the report's ``--boot``)."""
MAX_BOOT = 20_000
"""The most draws :func:`estimates` takes: the draws hold one count per item each
(20,000 draws of 1,500 items: 240 MB), and intervals stop moving long before."""
_CHUNK = 4_000_000  # draws x values held at once


@dataclass(frozen=True)
class Estimate:
    """A figure (the median over repeats of a statistic) and its bootstrap interval."""

    value: float
    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low


def _stat_names(percentiles: Sequence[float], mean: bool) -> list[str]:
    return (["avg"] if mean else []) + [f"p{p:g}" for p in percentiles]


def _weighted_stats(sorted_values: np.ndarray, cum: np.ndarray, item_sum: np.ndarray, item_n: np.ndarray,
                    counts: np.ndarray, percentiles: Sequence[float], mean: bool) -> np.ndarray:
    """The statistics of draws: ``cum`` (draws x values) is the running count of each
    sorted value in each draw; the mean comes from per-item sums.  NaN for an empty draw."""
    draws = cum.shape[0]
    out = np.full((draws, len(_stat_names(percentiles, mean))), np.nan)
    total = cum[:, -1] if cum.shape[1] else np.zeros(draws, dtype=np.int64)
    col = 0
    if mean:
        n = counts @ item_n
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, 0] = np.where(n > 0, (counts @ item_sum) / np.maximum(n, 1), np.nan)
        col = 1
    if not percentiles:
        return out
    q = np.asarray(percentiles, dtype=float) / 100.0
    for b in range(draws):
        t = int(total[b])
        if t == 0:
            continue
        h = (t - 1) * q
        lo = np.floor(h)
        ranks = np.concatenate([lo, np.minimum(lo + 1, t - 1)])
        idx = np.searchsorted(cum[b], ranks, side="right")
        v0, v1 = sorted_values[idx[:len(q)]], sorted_values[idx[len(q):]]
        out[b, col:] = v0 + (h - lo) * (v1 - v0)
    return out


def _per_repeat(values: np.ndarray, codes: np.ndarray, n_items: int, counts: np.ndarray,
                percentiles: Sequence[float], mean: bool) -> np.ndarray:
    """Each draw's statistics on one repeat's values (``counts``: draws x items)."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], codes[order]
    item_sum = np.bincount(codes, weights=values, minlength=n_items)
    item_n = np.bincount(codes, minlength=n_items).astype(float)
    rows = max(1, _CHUNK // max(1, len(v)))
    parts = []
    for start in range(0, counts.shape[0], rows):
        block = counts[start:start + rows]
        cum = np.cumsum(block[:, c], axis=1) if len(v) else np.zeros((len(block), 0), dtype=np.int64)
        parts.append(_weighted_stats(v, cum, item_sum, item_n, block.astype(float), percentiles, mean))
    return np.concatenate(parts) if parts else np.empty((0, len(_stat_names(percentiles, mean))))


def estimates(values: Sequence[float] | np.ndarray, items: Sequence[object] | np.ndarray,
              repeats: Sequence[int] | np.ndarray | None = None, percentiles: Sequence[float] = (50,), *,
              mean: bool = False, n_boot: int = DEFAULT_BOOT, level: float = 0.95, seed: int = 0
              ) -> dict[str, Estimate]:
    """``{"avg": ..., "p50": ...}``: each statistic's figure and interval (module doc).

    ``values`` with the item each came from (``items``) and its repeat (``repeats``;
    None: one repeat).  NaN values are left out.  With no value at all every figure is
    NaN; ``n_boot=0`` gives the figures with NaN intervals."""
    v = np.asarray(values, dtype=float)
    it = np.asarray(items, dtype=object) if not isinstance(items, np.ndarray) else items
    rep = np.ones(len(v), dtype=np.int64) if repeats is None else np.asarray(repeats, dtype=np.int64)
    if not (len(v) == len(it) == len(rep)):
        raise ValueError(f"estimates: {len(v)} values, {len(it)} items and {len(rep)} repeats: one each")
    if not 0 < level < 1:
        raise ValueError(f"estimates: level={level} is not between 0 and 1")
    if not 0 <= n_boot <= MAX_BOOT:
        raise LimitExceeded("boot", n_boot, MAX_BOOT, "bootstrap draws must be between 0 and MAX_BOOT")
    names = _stat_names(percentiles, mean)
    keep = ~np.isnan(v)
    v, it, rep = v[keep], it[keep], rep[keep]
    if len(v) == 0:
        return {n: Estimate(math.nan, math.nan, math.nan) for n in names}
    codes, uniques = pd.factorize(pd.Series(it, dtype=object), sort=False)
    n_items = len(uniques)
    rep_ids = np.unique(rep)
    per_rep = [(v[rep == r], codes[rep == r]) for r in rep_ids]
    ones = np.ones((1, n_items), dtype=np.int64)
    point = np.median(np.stack([_per_repeat(rv, rc, n_items, ones, percentiles, mean)[0] for rv, rc in per_rep]),
                      axis=0)
    low = high = np.full(len(names), math.nan)
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n_items, np.full(n_items, 1.0 / n_items), size=n_boot)
        stats = np.stack([_per_repeat(rv, rc, n_items, counts, percentiles, mean) for rv, rc in per_rep])
        pick = rng.integers(0, len(rep_ids), size=(n_boot, len(rep_ids)))  # repeats drawn per draw
        drawn = np.take_along_axis(stats, pick.T[:, :, None], axis=0) if len(rep_ids) > 1 else stats
        medians = np.nanmedian(drawn, axis=0) if len(rep_ids) > 1 else stats[0]
        tail = (1 - level) / 2 * 100
        with np.errstate(invalid="ignore"):
            low, high = np.nanpercentile(medians, [tail, 100 - tail], axis=0)
    return {n: Estimate(float(point[k]), float(low[k]), float(high[k])) for k, n in enumerate(names)}


def interval_text(e: Estimate, fmt: str = ".1f") -> str:
    """``"3.2 [3.1, 3.4]"``; just the figure when the interval is unknown; ``–`` for NaN."""
    if math.isnan(e.value):
        return "–"
    if math.isnan(e.low) or math.isnan(e.high):
        return format(e.value, fmt)
    return f"{e.value:{fmt}} [{e.low:{fmt}}, {e.high:{fmt}}]"


_LOW = re.compile(r"^(?P<base>.*) low(?P<unit> \(.*\))?$")


def with_intervals(table: pd.DataFrame, fmt: str = ".1f") -> pd.DataFrame:
    """``table`` for reading: each figure that has ``low`` and ``high`` columns beside it
    (``TBM p50 (µs)``, ``TBM p50 low (µs)``, ``TBM p50 high (µs)``) becomes one text
    column, ``"3.2 [3.1, 3.4]"`` (:func:`interval_text`); other columns are left as they are."""
    out = table.copy()
    for col in list(table.columns):
        m = _LOW.match(str(col))
        if not m:
            continue
        unit = m.group("unit") or ""
        base, high = f"{m.group('base')}{unit}", f"{m.group('base')} high{unit}"
        if base not in table or high not in table:
            continue
        out[base] = [interval_text(Estimate(float(v), float(lo), float(hi)), fmt)
                     for v, lo, hi in zip(table[base], table[col], table[high], strict=True)]
        out = out.drop(columns=[col, high])
    return out
