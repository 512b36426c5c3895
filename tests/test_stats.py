"""Bootstrap intervals of the report's figures (``toolkit.report.stats``): exact
statistics on each draw, the coverage a 95 % interval promises on a known distribution,
and intervals that widen when the repeats of a run disagree."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolkit.core.errors import LimitExceeded
from toolkit.report.stats import MAX_BOOT, Estimate, _per_repeat, estimates, interval_text

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def test_each_draw_is_numpys_statistic_of_the_resampled_values() -> None:
    rng = np.random.default_rng(1)
    v = rng.exponential(size=500)
    codes = rng.integers(0, 40, size=500)
    counts = rng.multinomial(40, np.full(40, 1 / 40), size=6)
    got = _per_repeat(v, codes, 40, counts, (0, 25, 50, 99, 99.9, 100), True)
    for b in range(len(counts)):
        drawn = np.concatenate([np.repeat(v[codes == i], counts[b, i]) for i in range(40)])
        assert got[b] == pytest.approx([drawn.mean(), *np.percentile(drawn, (0, 25, 50, 99, 99.9, 100))])


def test_the_figure_is_numpys_on_one_repeat_and_the_median_over_several() -> None:
    rng = np.random.default_rng(2)
    v = rng.normal(size=300)
    items = rng.integers(0, 30, size=300)
    e = estimates(v, items, percentiles=(50, 90), mean=True, n_boot=0)
    assert e["p50"].value == pytest.approx(np.percentile(v, 50))
    assert e["p90"].value == pytest.approx(np.percentile(v, 90))
    assert e["avg"].value == pytest.approx(v.mean()) and math.isnan(e["avg"].low)
    reps = np.repeat([1, 2, 3], 100)
    e = estimates(v, items, reps, percentiles=(50,), n_boot=0)["p50"]
    assert e.value == pytest.approx(np.median([np.median(v[reps == r]) for r in (1, 2, 3)]))


def test_a_95_percent_interval_covers_the_true_median_about_95_times_in_100() -> None:
    """N(0, 1), one value per item: the median's interval covers 0 in 90-99 % of 120
    seeded samples, and is as wide as the normal theory says (1.96 sqrt(pi/2n) each side)."""
    n, hits, widths = 400, 0, []
    for s in range(120):
        x = np.random.default_rng(100 + s).normal(size=n)
        e = estimates(x, np.arange(n), percentiles=(50,), n_boot=300, seed=s)["p50"]
        hits += e.low <= 0 <= e.high
        widths.append(e.width)
    assert 0.90 <= hits / 120 <= 0.99
    assert np.mean(widths) == pytest.approx(2 * 1.96 * math.sqrt(math.pi / 2 / n), rel=0.15)


def test_items_are_resampled_whole() -> None:
    """Ten items whose values sit together (each item's 100 values equal): the interval is
    as wide as ten values allow, not as narrow as a thousand independent ones would be."""
    item_means = np.random.default_rng(3).normal(size=10)
    v = np.repeat(item_means, 100)
    items = np.repeat(np.arange(10), 100)
    whole = estimates(v, items, mean=True, percentiles=(), seed=1)["avg"]
    alone = estimates(v, np.arange(1000), mean=True, percentiles=(), seed=1)["avg"]
    assert whole.width > 5 * alone.width


def test_repeats_that_disagree_widen_the_interval() -> None:
    rng = np.random.default_rng(4)
    v = rng.normal(size=3000)
    items = np.tile(np.arange(1000), 3)
    reps = np.repeat([1, 2, 3], 1000)
    alike = estimates(v, items, reps, seed=5)["p50"]
    shifted = estimates(v + (reps - 2) * 0.5, items, reps, seed=5)["p50"]
    assert shifted.width > 3 * alike.width
    assert shifted.low < 0 < shifted.high  # the median repeat is unshifted


def test_empty_nan_and_bad_arguments() -> None:
    e = estimates([math.nan, math.nan], ["a", "b"], mean=True)
    assert all(math.isnan(x.value) for x in e.values()) and set(e) == {"avg", "p50"}
    one = estimates([1.0, math.nan, 3.0], ["a", "b", "c"], percentiles=(50,))["p50"]
    assert one.value == 2.0
    with pytest.raises(ValueError, match="one each"):
        estimates([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="level"):
        estimates([1.0], ["a"], level=1.5)


def test_the_draws_are_bounded_before_they_are_drawn() -> None:
    """A huge ``--boot`` is a typed error naming the limit, not gigabytes of draws."""
    with pytest.raises(LimitExceeded, match="'boot'.*> 20000"):
        estimates([1.0, 2.0], ["a", "b"], n_boot=MAX_BOOT + 1)
    with pytest.raises(LimitExceeded, match="'boot'"):
        estimates([1.0, 2.0], ["a", "b"], n_boot=-1)
    assert estimates([1.0, 2.0], ["a", "b"], n_boot=MAX_BOOT)["p50"].value == 1.5
    r = subprocess.run([sys.executable, "-m", "toolkit", "report", "no-such-run", "--boot", "1000000000"],
                       cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "--boot: must be from 0 to 20,000, got 1,000,000,000" in r.stderr
    assert "Traceback" not in r.stderr


def test_interval_text() -> None:
    assert interval_text(Estimate(3.21, 3.1, 3.44)) == "3.2 [3.1, 3.4]"
    assert interval_text(Estimate(3.21, math.nan, math.nan)) == "3.2"
    assert interval_text(Estimate(math.nan, math.nan, math.nan)) == "–"
    assert interval_text(Estimate(1234.5, 1200, 1300), ",.0f") == "1,234 [1,200, 1,300]"
