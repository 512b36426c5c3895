"""Per-mask truth: masklab's reported times against the engines called directly.

``masklab bench --direct-check`` runs every peer twice on each item, in the same worker
process: through masklab (the record's ``tbm_s`` and ``ttfm_s``, the engine's own calls
timed inside the adapter, the adapter's work in ``glue_s``) and **directly** through the
engine's own API as a server calls it (``rec["direct"]``: the grammar compiled again,
then each valid instance walked from a fresh native matcher, each step the native fill
into a preallocated row and the native accept, timed together with nothing of masklab's
in between; the direct walk goes first on even instances and second on odd ones).

:func:`direct_table` turns the records into the table that says whether a ratio can be
trusted:

* one row per peer (``against`` = ``direct``): masklab's TBM p50 / mean / p99 and TTFM
  p50 against the direct ones on the same steps, the ratios, and ``within_10pct``
  (p50 and mean both within 10 %: the acceptance of the timing);
* one row per masklab strategy whose counterpart peer was checked (``llguidance`` ->
  ``peer:llguidance``, ``xgrammar`` -> ``peer:xgrammar``, ``outlines`` ->
  ``peer:outlines-core``): our times against the peer called directly, on the items both
  passed with the same number of steps (so the same walks).

Only items whose direct walks have exactly the steps masklab timed are used (an engine
that stops elsewhere directly than through masklab is counted in ``misaligned``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from toolkit.report.style import to_markdown

__all__ = ["COUNTERPARTS", "direct_table", "direct_markdown"]

#: our strategy -> the production engine it reimplements
COUNTERPARTS: dict[str, str] = {
    "llguidance": "peer:llguidance",
    "xgrammar": "peer:xgrammar",
    "outlines": "peer:outlines-core",
}


def _aligned(rec: Mapping[str, Any]) -> bool:
    d = rec.get("direct")
    return (isinstance(d, dict) and isinstance(d.get("tbm_s"), list) and isinstance(d.get("steps"), list)
            and sum(d["steps"]) == len(_list(rec, "tbm_s")) == len(d["tbm_s"]))


def _list(rec: Mapping[str, Any], key: str) -> list[Any]:
    v = rec.get(key)
    return v if isinstance(v, list) else []


def _q(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def direct_table(records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The comparison table (see the module doc); times in µs (TBM) and ms (TTFM)."""
    by_engine: dict[str, dict[str, Mapping[str, Any]]] = {}
    for rec in records:
        by_engine.setdefault(str(rec["engine"]), {})[str(rec["item"])] = rec
    rows: list[dict[str, Any]] = []

    def row(engine: str, against: str, recs: list[Mapping[str, Any]], others: list[Mapping[str, Any]],
            misaligned: int) -> dict[str, Any]:
        ours = [t * 1e6 for r in recs for t in r["tbm_s"]]
        theirs = [t * 1e6 for r in others for t in r["direct"]["tbm_s"]]
        glue = [t * 1e6 for r in recs for t in _list(r, "glue_s")]
        ttfm = [r["ttfm_s"] * 1e3 for r in recs if r.get("ttfm_s") is not None]
        ttfm_d = [r["direct"]["ttfm_s"] * 1e3 for r in others]
        out = {
            "engine": engine, "against": against, "items": len(recs), "misaligned": misaligned,
            "steps": len(ours),
            "p50_us": _q(ours, 50), "mean_us": float(np.mean(ours)) if ours else math.nan, "p99_us": _q(ours, 99),
            "direct_p50_us": _q(theirs, 50), "direct_mean_us": float(np.mean(theirs)) if theirs else math.nan,
            "direct_p99_us": _q(theirs, 99),
            "ttfm_p50_ms": _q(ttfm, 50), "direct_ttfm_p50_ms": _q(ttfm_d, 50),
            "glue_p50_us": _q(glue, 50), "glue_mean_us": float(np.mean(glue)) if glue else math.nan,
        }
        out["p50_ratio"] = _ratio(out["p50_us"], out["direct_p50_us"])
        out["mean_ratio"] = _ratio(out["mean_us"], out["direct_mean_us"])
        out["p99_ratio"] = _ratio(out["p99_us"], out["direct_p99_us"])
        out["ttfm_p50_ratio"] = _ratio(out["ttfm_p50_ms"], out["direct_ttfm_p50_ms"])
        return out

    checked: dict[str, list[Mapping[str, Any]]] = {}
    for engine, recs in by_engine.items():
        with_direct = [r for r in recs.values() if r.get("status") == "passing" and isinstance(r.get("direct"), dict)]
        if not with_direct:
            continue
        good = [r for r in with_direct if _aligned(r)]
        checked[engine] = good
        out = row(engine, "direct", good, good, len(with_direct) - len(good))
        out["within_10pct"] = bool(abs(out["p50_ratio"] - 1) <= 0.1 and abs(out["mean_ratio"] - 1) <= 0.1)
        rows.append(out)
    for ours, peer in COUNTERPARTS.items():
        if ours not in by_engine or peer not in checked:
            continue
        mine = by_engine[ours]
        pairs = [(mine[r["item"]], r) for r in checked[peer]
                 if r["item"] in mine and mine[r["item"]].get("status") == "passing"
                 and len(_list(mine[r["item"]], "tbm_s")) == len(r["tbm_s"])]
        passed = sum(1 for r in checked[peer] if r["item"] in mine and mine[r["item"]].get("status") == "passing")
        rows.append(row(ours, f"{peer} direct", [a for a, _ in pairs], [b for _, b in pairs], passed - len(pairs)))
    return pd.DataFrame(rows)


def direct_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown, the columns a reader needs."""

    if table.empty:
        return "(no record has a direct check: run `masklab bench --direct-check` with a peer engine)"
    cols = ["engine", "against", "items", "steps", "p50_us", "direct_p50_us", "p50_ratio", "mean_us",
            "direct_mean_us", "mean_ratio", "p99_us", "direct_p99_us", "ttfm_p50_ms", "direct_ttfm_p50_ms",
            "ttfm_p50_ratio", "glue_p50_us", "misaligned"]
    if "within_10pct" in table:
        cols.append("within_10pct")
    shown = table[cols].copy()
    if "within_10pct" in shown:
        shown["within_10pct"] = shown["within_10pct"].map(lambda v: "" if v is None or v != v else ("yes" if v else "NO"))
    return to_markdown(shown, ".2f", intfmt=",", index=False)
