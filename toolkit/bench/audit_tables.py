"""The audit's records summed up (:mod:`toolkit.bench.audit` makes them): per engine
(:func:`audit_table`), per engine and dataset (:func:`dataset_table`), and each loosened
item's shortest counterexample (:func:`counterexamples`).  Reading them needs nothing of
the audit's workers: :mod:`toolkit.report.audit` draws its figure from these tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

__all__ = ["AUDIT_STATUSES", "ITEM_COLUMNS", "audit_items", "audit_table", "dataset_table", "dataset_of",
           "counterexamples"]

AUDIT_STATUSES = ("sound", "loosened", "compile_error", "crash", "timeout", "bad_schema")
"""The statuses of an audit record (:mod:`toolkit.bench.audit`), in table order."""

ITEM_COLUMNS: dict[str, str] = {
    "engine": "the engine's registered name",
    "item": "the MaskBench item (file name without `.json`)",
    "status": "sound, loosened, compile_error, crash, timeout or bad_schema",
    "detail": "what went wrong (empty for sound and loosened items)",
    "finished": "walks that ended (the engine allowed EOS and the walk took it)",
    "budget": "walks still going at the length budget",
    "dead": "walks where the engine allowed no token",
    "error": "walks that stopped with an engine's error",
    "undecided": "finished outputs the judge could not decide (a format or pattern it cannot check)",
    "invalid_accepted": "invalid test instances the engine accepted",
    "wall_s": "seconds the item took (compile, walks and invalid instances)",
    "counterexample": "the item's shortest counterexample: an output the schema rejects, else an accepted invalid instance",
    "message": "the validator's message about the counterexample",
    "pointer": "the JSON pointer the message is about",
}
"""``items.csv`` of an audit, one row per engine and item (:func:`audit_items`): the
tidy form of the records, enough for every table and the figure, and for a resume."""


def audit_items(records: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The audit's records as the tidy per-item table (:data:`ITEM_COLUMNS`); a table
    already in that form is returned as it is."""
    df = pd.DataFrame(records) if not isinstance(records, pd.DataFrame) else records
    if "counterexample" in df or df.empty:
        return df.reindex(columns=list(ITEM_COLUMNS)) if df.empty else df
    rows = []
    for rec in df.to_dict("records"):
        rejected = rec.get("rejected") if isinstance(rec.get("rejected"), list) else []
        accepted = rec.get("invalid_accepted") if isinstance(rec.get("invalid_accepted"), list) else []
        ex = (rejected + accepted)[:1] if rec.get("status") == "loosened" else []
        row = {k: rec.get(k) for k in ("engine", "item", "status", "detail")}
        row["detail"] = row["detail"] or ""
        for k in ("finished", "budget", "dead", "error", "undecided"):
            v = rec.get(k)
            row[k] = int(v) if isinstance(v, (int, float)) and v == v else 0
        row["invalid_accepted"] = len(accepted)
        row["wall_s"] = rec.get("wall_s")
        row["counterexample"] = ex[0]["text"] if ex else ""
        row["message"] = ex[0].get("message", "") if ex else ""
        row["pointer"] = ex[0].get("pointer", "") if ex else ""
        rows.append(row)
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))


def audit_table(records: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per engine (index ``engine``): ``items``, one count per :data:`AUDIT_STATUSES`,
    ``loosened %`` (of the items it compiled), the walks ``finished`` / ``budget`` / ``error`` /
    ``dead``, the finished outputs left ``undecided``, the ``invalid accepted`` instances
    and the ``seconds`` the audit took."""
    df = audit_items(records)
    rows = []
    for engine, g in df.groupby("engine", sort=False):
        counts = g["status"].value_counts()
        compiled = int(counts.get("sound", 0) + counts.get("loosened", 0))
        row: dict[str, Any] = {"engine": engine, "items": len(g)}
        for s in AUDIT_STATUSES:
            row[s] = int(counts.get(s, 0))
        row["loosened %"] = 100.0 * row["loosened"] / compiled if compiled else float("nan")
        for k in ("finished", "budget", "dead", "error", "undecided"):
            row[k] = int(g[k].fillna(0).sum()) if k in g else 0
        row["invalid accepted"] = int(g["invalid_accepted"].fillna(0).sum())
        row["seconds"] = float(g["wall_s"].fillna(0).sum()) if "wall_s" in g else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).set_index("engine") if rows else pd.DataFrame()


def dataset_of(name: str, folder: str = "") -> str:
    """The dataset of the item ``name`` read from ``folder``: MaskBench's
    ``Github_easy---o10008`` is ``Github_easy`` and its ``BFCL_java_13`` is ``BFCL`` (a
    capitalized prefix before ``_``); any other item is its folder's (the embedded
    ``datasets/schemas/s01_flat_person.json``: ``schemas``), or its own name."""
    head, sep, _ = name.partition("---")
    if sep:
        return head
    m = re.match(r"([A-Z][A-Za-z0-9]*)_", name)
    if m:
        return m.group(1)
    return folder or name


def dataset_table(records: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per engine and dataset (:func:`dataset_of`): ``items``, ``compiled`` (sound or
    loosened), ``loosened`` and ``loosened %`` of the compiled, ``refused`` (compile
    errors) and ``failed`` (crash, timeout); index ``(engine, dataset)``."""
    df = pd.DataFrame(records) if not isinstance(records, pd.DataFrame) else records
    if df.empty:
        return pd.DataFrame()
    if "dataset" not in df:
        df = df.assign(dataset=df["item"].map(dataset_of))
    df = df.assign(dataset=[d if isinstance(d, str) and d else dataset_of(i)
                            for d, i in zip(df["dataset"], df["item"], strict=True)])
    rows = []
    for (engine, dataset), g in df.groupby(["engine", "dataset"], sort=False):
        st = g["status"]
        compiled = int(st.isin(("sound", "loosened")).sum())
        loosened = int((st == "loosened").sum())
        rows.append({"engine": engine, "dataset": dataset, "items": len(g), "compiled": compiled,
                     "loosened": loosened, "loosened %": 100.0 * loosened / compiled if compiled else float("nan"),
                     "refused": int((st == "compile_error").sum()), "failed": int(st.isin(("crash", "timeout")).sum())})
    order = {e: k for k, e in enumerate(dict.fromkeys(r["engine"] for r in rows))}
    rows.sort(key=lambda r: (order[r["engine"]], r["dataset"]))
    return pd.DataFrame(rows).set_index(["engine", "dataset"])


def counterexamples(records: pd.DataFrame | Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Per loosened record: engine, item, and its shortest counterexample (an output the
    schema rejects, else an invalid instance the engine accepted) with the message."""
    df = audit_items(records)
    for rec in df[df["status"] == "loosened"].to_dict("records"):
        if isinstance(rec["counterexample"], str) and rec["counterexample"]:
            yield {"engine": rec["engine"], "item": rec["item"], "text": rec["counterexample"],
                   "message": _text(rec["message"]), "pointer": _text(rec["pointer"])}


def _text(v: Any) -> str:
    return v if isinstance(v, str) else ""
