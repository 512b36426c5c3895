"""Do two engines compute the same masks?  Step-by-step agreement from a bench run.

``masklab bench`` records, for every step of every valid instance, a digest of the
mask (see :mod:`toolkit.bench.harness`).  Two engines in the same run walked the same
tokens, so their masks can be compared step by step after the fact, on every item
both compiled, at no cost to the timing:

* :func:`agreement` -> one row per item: steps compared, steps whose masks differ,
  the first difference (instance and step);
* :func:`summarize` -> the totals a note or a paper quotes;
* :func:`explain` re-runs one item in-process and lists, at each differing step, the
  tokens only one engine allows (what a digest cannot say).

``masklab agree RUN --engines A,B [--explain N] [--out DIR]`` is the command line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from strategies import get_engine
from toolkit.bench.datasets import embedded_dir, iter_items
from toolkit.bench.harness import read_records, records_file, spec_for
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.vocab import load_vocab

__all__ = ["AgreementError", "agreement", "summarize", "explain", "write_agreement"]


class AgreementError(MasklabError, ValueError):
    """Agreement cannot be computed: no such run, engine, or no digests recorded."""


def _records(run: str | Path, engines: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    path = records_file(run)
    if not path.is_file():
        raise AgreementError(f"{run}: no records.jsonl (is this a masklab bench run directory?)")
    by_engine: dict[str, dict[str, dict[str, Any]]] = {e: {} for e in engines}
    seen: set[str] = set()
    for r in read_records(path):
        seen.add(r["engine"])
        if r["engine"] in by_engine:
            by_engine[r["engine"]][r["item"]] = r
    for e in engines:
        if not by_engine[e]:
            raise AgreementError(f"{run}: no records of engine {e!r}; the run has {', '.join(sorted(seen))}")
    return by_engine


def _digests(rec: dict[str, Any]) -> list[list[str]] | None:
    """Per valid instance, the mask digests; None when the engine ran no instance."""
    cases = [c for c in rec.get("cases") or [] if c.get("valid")]
    if not cases:
        return None
    if any("digests" not in c for c in cases if c.get("ok") is not None):
        raise AgreementError(f"records of {rec['engine']!r} carry no mask digests (a run older than them)")
    return [c.get("digests", []) for c in cases]


def agreement(run: str | Path, a: str, b: str) -> Any:
    """Per item of ``run`` that both ``a`` and ``b`` compiled: steps compared and differing.

    Columns: ``item``, ``status_a``, ``status_b``, ``instances``, ``steps`` (compared:
    on each valid instance, the steps both engines took), ``differ`` (steps whose masks
    differ), ``first_instance`` / ``first_step`` (the first difference, -1 if none),
    ``length_mismatch`` (instances where one engine stopped earlier than the other).
    """

    recs = _records(run, [a, b])
    rows = []
    for item in sorted(set(recs[a]) & set(recs[b])):
        ra, rb = recs[a][item], recs[b][item]
        da, db = _digests(ra), _digests(rb)
        if da is None or db is None:
            continue
        steps = differ = mismatch = 0
        first = (-1, -1)
        for k, (xa, xb) in enumerate(zip(da, db, strict=False)):
            n = min(len(xa), len(xb))
            mismatch += len(xa) != len(xb)
            for step in range(n):
                if xa[step] != xb[step]:
                    differ += 1
                    if first == (-1, -1):
                        first = (k, step)
            steps += n
        rows.append({
            "item": item, "status_a": ra["status"], "status_b": rb["status"], "instances": min(len(da), len(db)),
            "steps": steps, "differ": differ, "first_instance": first[0], "first_step": first[1],
            "length_mismatch": mismatch,
        })
    return pd.DataFrame(rows, columns=["item", "status_a", "status_b", "instances", "steps", "differ",
                                       "first_instance", "first_step", "length_mismatch"])


def summarize(table: Any) -> dict[str, int]:
    """Totals of an :func:`agreement` table."""
    return {
        "items": int(len(table)),
        "items_equal": int(((table["differ"] == 0) & (table["length_mismatch"] == 0)).sum()) if len(table) else 0,
        "steps": int(table["steps"].sum()) if len(table) else 0,
        "steps_differ": int(table["differ"].sum()) if len(table) else 0,
        "length_mismatch": int(table["length_mismatch"].sum()) if len(table) else 0,
    }


def explain(run: str | Path, item: str, a: str, b: str, *, max_steps: int = 5) -> list[dict[str, Any]]:
    """Re-run ``item`` of ``run`` in-process with ``a`` and ``b`` (their options from
    ``run.json``) and return up to ``max_steps`` differing steps: instance, step, the
    text consumed so far, and the tokens only ``a`` / only ``b`` allows."""

    meta = json.loads((Path(run) / "run.json").read_text(encoding="utf-8"))
    vocab = load_vocab(meta["vocab"]["spec"])
    data = meta["data"]
    if data.startswith("datasets (embedded)"):
        data = str(embedded_dir())
    found = [it for it in iter_items(data) if it.name == item]
    if not found:
        raise AgreementError(f"item {item!r} not found in {data}")
    it = found[0]
    engines, matchers_of = {}, {}
    for name in (a, b):
        info = (meta.get("engines") or {}).get(name, {})
        eng = get_engine(name, vocab, **dict(info.get("requested_options", {})))
        engines[name] = eng
        matchers_of[name] = eng.compile(spec_for(eng, it, meta.get("source", "native")))
    out: list[dict[str, Any]] = []
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    for k, case in enumerate(c for c in it.cases if c.valid):
        tokens = vocab.encode(case.text) + [vocab.eos_ids[0]]
        ma, mb = engines[a].matcher(matchers_of[a]), engines[b].matcher(matchers_of[b])
        for step, t in enumerate(tokens):
            ma.fill_bitmask(ra)
            mb.fill_bitmask(rb)
            if (ra != rb).any():
                only_a = bm.allowed_ids(ra[0] & ~rb[0], vocab.size).tolist()
                only_b = bm.allowed_ids(rb[0] & ~ra[0], vocab.size).tolist()
                out.append({
                    "instance": k, "step": step,
                    "before": vocab.decode(tokens[:step]).decode("utf-8", "replace")[-60:],
                    "only_" + a: [_show(vocab, i) for i in only_a[:20]], "n_only_" + a: len(only_a),
                    "only_" + b: [_show(vocab, i) for i in only_b[:20]], "n_only_" + b: len(only_b),
                })
                if len(out) >= max_steps:
                    return out
            if not (ma.accept_token(t) and mb.accept_token(t)):
                break
    return out


def _show(vocab: Any, i: int) -> str:
    data = vocab.token_bytes[i]
    return repr(data.decode("utf-8", "backslashreplace")) if data else f"<{i}>"


def write_agreement(run: str | Path, a: str, b: str, out: str | Path | None = None) -> tuple[Any, dict[str, int], Path]:
    """:func:`agreement` and :func:`summarize`, written as ``agreement-A-vs-B.csv`` and
    ``.json`` into ``out`` (default: the run folder)."""
    table = agreement(run, a, b)
    totals = summarize(table)
    folder = Path(out) if out is not None else Path(run)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"agreement-{_slug(a)}-vs-{_slug(b)}"
    table.to_csv(folder / f"{stem}.csv", index=False)
    (folder / f"{stem}.json").write_text(json.dumps({"run": str(run), "a": a, "b": b, **totals}, indent=2) + "\n",
                                         encoding="utf-8")
    return table, totals, folder / f"{stem}.csv"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
