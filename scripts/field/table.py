"""The field table: masklab's report of the MaskBench runs (engines.csv), beside MaskBench's
published figures for the versions it used.

    python scripts/field/table.py results/field/engines.csv > results/field/table.md

MaskBench's figures are quoted from guidance-ai/jsonschemabench, maskbench/README.md
(commit 00c3d018176a2270424e72ac8a20329e8844f562): 10,163 schemas, an AMD EPYC 7V13,
single-threaded engines, 15 minutes per schema; llguidance 0.6.7, xgrammar 0.1.10,
llama-cpp-python 0.3.6 (its JSON-schema converter with whitespace `[ \\t\\n\\r]*`),
outlines 0.1.13.  Times in µs.
"""

from __future__ import annotations

import sys

import pandas as pd

MASKBENCH = {  # engine -> (TBM avg, p50, p99, p99.9, TTFM p50, TTFM p99, passing %, version)
    "llguidance": (47, 36, 460, 1_453, 987, 14_180, 7_765 / 10_163, "llguidance 0.6.7"),
    "xgrammar": (292, 8, 4_936, 44_687, 535_498, 62_151_076, 5_216 / 10_163, "xgrammar 0.1.10"),
    "llama.cpp": (14_523, 14_483, 57_317, 268_292, 307, 31_263, 5_476 / 10_163, "llama-cpp-python 0.3.6"),
    "outlines": (59_420, 118, 358_041, 598_956, 6_987_012, 621_693_634, 4_259 / 10_163, "outlines 0.1.13"),
}
def _n(x: float) -> str:
    return "" if pd.isna(x) else f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


def main(path: str) -> None:
    """Print the table of the report's ``engines.csv`` at ``path``, then MaskBench's."""
    df = pd.read_csv(path)
    print("| engine | TBM avg | p50 | p99 | p99.9 | TTFM p50 | TTFM p99 | items | passing | compile err. | timeout "
          "| crash | valid. err. | invalid. err. |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in df.to_dict("records"):
        cols = [row["TBM avg (µs)"], row["TBM p50 (µs)"], row["TBM p99 (µs)"], row["TBM p99.9 (µs)"],
                1000 * row["TTFM p50 (ms)"], 1000 * row["TTFM p99 (ms)"]]
        print(f"| {row['engine']} | " + " | ".join(_n(c) for c in cols)
              + f" | {row['items']} | {row['passing']} ({row['passing %']:.1f} %) | {row['compile_error']} | "
                f"{row['timeout']} | {row['crash']} | {row['validation_error']} | {row['invalidation_error']} |")
    print()
    print("MaskBench's published figures (10,163 schemas, its machine; µs):")
    print()
    print("| engine | TBM avg | p50 | p99 | p99.9 | TTFM p50 | TTFM p99 | passing |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for avg, p50, p99, p999, t50, t99, ok, version in MASKBENCH.values():
        print(f"| {version} | {avg:,} | {p50:,} | {p99:,} | {p999:,} | {t50:,} | {t99:,} | {100 * ok:.1f} % |")


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
    elif len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} ENGINES_CSV > TABLE_MD")
    else:
        main(sys.argv[1])
