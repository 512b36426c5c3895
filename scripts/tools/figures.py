"""The tool-calling figures (issue 48) from a ``masklab bench`` run over ``datasets/tools``:

    python scripts/tools/figures.py RUN_DIR OUT_DIR

* ``ttfm.csv`` and ``ttfm.png``: time to first mask (the structural tag compiled, a
  matcher, its first mask) against the number of tools, per engine and model format
  (the median over the run's repeats; passing items only);
* ``tbm_by_region.csv``: the per-token mask time in free text and in constrained regions,
  per engine and format.  A step's region is read from its mask: *free text* where the
  mask allows more than half of the vocabulary (a text region allows nearly every
  token), *constrained* otherwise (inside a call: a tool name, JSON, a close tag).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def records(run: Path) -> pd.DataFrame:
    """One row per passing (engine, item, repeat): its format, tools, TTFM and steps."""
    rows = []
    for line in (run / "records.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("status") != "passing" or not str(r.get("item", "")).startswith("tools-"):
            continue
        _, model, n = r["item"].rsplit("-", 2) if r["item"].count("-") >= 2 else (None, None, None)
        rows.append({"engine": r["engine"], "model": model, "tools": int(n), "repeat": r.get("repeat", 1),
                     "ttfm_ms": 1e3 * r["ttfm_s"], "tbm_s": r.get("tbm_s") or [], "allowed": r.get("allowed") or [],
                     "vocab": r.get("vocab_size")})
    return pd.DataFrame(rows)


def ttfm_table(df: pd.DataFrame) -> pd.DataFrame:
    return (df.groupby(["engine", "model", "tools"], as_index=False)["ttfm_ms"].median()
            .sort_values(["model", "engine", "tools"]))


def tbm_by_region(df: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (engine, model), g in df.groupby(["engine", "model"]):
        times = {"free text": [], "constrained": []}
        for _, r in g.iterrows():
            for t, a in zip(r["tbm_s"], r["allowed"], strict=False):
                times["free text" if a > r["vocab"] / 2 else "constrained"].append(1e6 * t)
        for region, ts in times.items():
            if ts:
                a = np.asarray(ts)
                out.append({"engine": engine, "model": model, "region": region, "steps": len(a),
                            "tbm_us_p50": float(np.median(a)), "tbm_us_p99": float(np.percentile(a, 99)),
                            "tbm_us_mean": float(a.mean())})
    return pd.DataFrame(out)


def labels(run: Path) -> dict[str, str]:
    """Each engine's label as the reports write it: ``ours: NAME``, or the peer's package
    and version (``xgrammar 0.2.8``)."""
    engines = json.loads((run / "run.json").read_text(encoding="utf-8")).get("engines", {})
    return {name: f"{name.removeprefix('peer:')} {info.get('version', '')}".strip() if name.startswith("peer:")
            else f"ours: {name}" for name, info in engines.items()}


def figure(table: pd.DataFrame, path: Path, label: dict[str, str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(table["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), sharey=True, squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        for engine, g in table[table["model"] == model].groupby("engine"):
            ax.plot(g["tools"], g["ttfm_ms"], marker="o", label=label.get(engine, engine),
                    linestyle="-" if not engine.startswith("peer:") else "--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model}'s format")
        ax.set_xlabel("tools in the request")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("time to first mask (ms)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 7), fontsize=8, frameon=False)
    fig.suptitle("Tool calling: TTFM against the number of tools (structural tags)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=160)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    run, out = Path(argv[0]), Path(argv[1])
    df = records(run)
    if df.empty:
        print(f"figures: no passing tool-calling records in {run}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    table = ttfm_table(df)
    table.to_csv(out / "ttfm.csv", index=False, float_format="%.3f")
    tbm_by_region(df).to_csv(out / "tbm_by_region.csv", index=False, float_format="%.3f")
    figure(table, out / "ttfm.png", labels(run))
    print(table.pivot_table(index=["model", "tools"], columns="engine", values="ttfm_ms").round(1).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
