"""Do two engines compute the same masks?  Step-by-step agreement from a bench run.

``masklab bench`` records, for every step of every valid instance, a digest of the
mask (see :mod:`toolkit.bench.measure`).  Two engines in the same run walked the same
tokens, so their masks can be compared step by step after the fact, on every item
both compiled, at no cost to the timing:

* :func:`agreement` -> one row per item: steps compared, steps whose masks differ,
  the first difference (instance and step);
* :func:`summarize` -> the totals a note or a paper quotes;
* :func:`explain` re-runs one item in-process and lists, at each differing step, the
  tokens only one engine allows (what a digest cannot say);
* :func:`classify_differences` re-runs every differing item and sorts each token only
  one engine allows into a byte-level class (:data:`DIFFERENCE_CLASSES`), with an
  example of each: every class of difference between two engines, named.

``masklab agree RUN --engines A,B [--explain N] [--classify] [--out DIR]`` is the command line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from strategies import get_engine
from toolkit.bench.measure import encode_case, spec_for
from toolkit.bench.records import read_records, records_file
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import embedded_dir, iter_items

__all__ = ["AgreementError", "DIFFERENCE_CLASSES", "agreement", "classify_differences", "summarize", "explain",
           "write_agreement"]


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


def _differing_steps(run: str | Path, item: str, a: str, b: str) -> Iterator[tuple[Any, int, int, bytes, Any, Any]]:
    """Re-run ``item`` of ``run`` in-process with ``a`` and ``b`` (their options from
    ``run.json``, the run's ``--source``): at each step of each valid instance where the
    masks differ, ``(vocab, instance, step, bytes consumed, ids only a allows, ids only
    b allows)``."""
    meta = json.loads((Path(run) / "run.json").read_text(encoding="utf-8"))
    vocab = load_vocab(meta["vocab"]["spec"])
    data = meta["data"]
    if data.startswith("datasets (embedded)"):
        data = str(embedded_dir())
    found = [it for it in iter_items(data) if it.name == item]
    if not found:
        raise AgreementError(f"item {item!r} not found in {data}")
    it = found[0]
    engines, compiled = {}, {}
    for name in (a, b):
        info = (meta.get("engines") or {}).get(name, {})
        eng = get_engine(name, vocab, **dict(info.get("requested_options", {})))
        engines[name] = eng
        compiled[name] = eng.compile(spec_for(eng, it, meta.get("source", "native")))
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    for k, case in enumerate(c for c in it.cases if c.valid):
        tokens = encode_case(vocab, it, case.text) + [vocab.eos_ids[0]]
        ma, mb = engines[a].matcher(compiled[a]), engines[b].matcher(compiled[b])
        for step, t in enumerate(tokens):
            ma.fill_bitmask(ra)
            mb.fill_bitmask(rb)
            if (ra != rb).any():
                yield (vocab, k, step, vocab.decode(tokens[:step]), bm.allowed_ids(ra[0] & ~rb[0], vocab.size),
                       bm.allowed_ids(rb[0] & ~ra[0], vocab.size))
            if not (ma.accept_token(t) and mb.accept_token(t)):
                break


def explain(run: str | Path, item: str, a: str, b: str, *, max_steps: int = 5) -> list[dict[str, Any]]:
    """Re-run ``item`` of ``run`` in-process with ``a`` and ``b`` (their options from
    ``run.json``) and return up to ``max_steps`` differing steps: instance, step, the
    text consumed so far, and the tokens only ``a`` / only ``b`` allows."""

    out: list[dict[str, Any]] = []
    for vocab, k, step, before, only_a, only_b in _differing_steps(run, item, a, b):
        out.append({
            "instance": k, "step": step, "before": before.decode("utf-8", "replace")[-60:],
            "only_" + a: [_show(vocab, int(i)) for i in only_a[:20]], "n_only_" + a: len(only_a),
            "only_" + b: [_show(vocab, int(i)) for i in only_b[:20]], "n_only_" + b: len(only_b),
        })
        if len(out) >= max_steps:
            break
    return out


DIFFERENCE_CLASSES = (
    ("special token", lambda b: not b),
    ("bytes never in UTF-8 (C0, C1, F5-FF)", lambda b: any(x in (0xC0, 0xC1) or x >= 0xF5 for x in b)),
    ("starts with NUL", lambda b: b[:1] == b"\x00"),
    ("holds NUL", lambda b: b"\x00" in b),
    ("not UTF-8 text alone (a partial character)", lambda b: not _utf8(b)),
    ("ASCII control characters", lambda b: any(x < 0x20 and x not in (9, 10, 13) for x in b)),
    ("whitespace only", lambda b: not b.strip(b" \t\n\r")),
    ("other", lambda b: True),
)
"""The byte-level classes :func:`classify_differences` sorts a differing token into, the
first that fits: what the engines' languages differ in shows as one of them (a
code-point engine letting bytes that are never UTF-8 through, an engine refusing tokens
it cannot express, whitespace rules...); ``other`` is for a reader to look at."""


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _token_class(vocab: Any, i: int) -> str:
    data = vocab.token_bytes[i] if i not in vocab.special_tokens else b""
    return next(name for name, fits in DIFFERENCE_CLASSES if fits(data))


def classify_differences(run: str | Path, a: str, b: str, items: Sequence[str] | None = None) -> Any:
    """Every differing step of ``run`` between ``a`` and ``b`` (re-run in-process, as
    :func:`explain`; ``items``: these only, default every item :func:`agreement` finds
    differing), each token only one engine allows sorted into a class of
    :data:`DIFFERENCE_CLASSES`.  One row per (side, class): ``side`` (``only A``),
    ``class``, ``steps`` (differing steps where it occurs), ``tokens`` (token-steps),
    ``items``, and its first ``example``: item, instance, step, the end of the text
    before it and the token."""
    if items is None:
        table = agreement(run, a, b)
        items = table.loc[table["differ"] > 0, "item"].tolist()
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for item in items:
        for vocab, k, step, before, only_a, only_b in _differing_steps(run, item, a, b):
            for side, ids in ((f"only {a}", only_a), (f"only {b}", only_b)):
                seen: set[str] = set()
                for i in ids.tolist():
                    cls = _token_class(vocab, int(i))
                    row = acc.setdefault((side, cls), {"side": side, "class": cls, "steps": 0, "tokens": 0,
                                                       "items": set(), "example": None})
                    row["tokens"] += 1
                    row["items"].add(item)
                    if cls not in seen:
                        seen.add(cls)
                        row["steps"] += 1
                    if row["example"] is None:
                        text = before.decode("utf-8", "replace")[-40:]
                        row["example"] = f"{item} instance {k} step {step}: after {text!r}, {_show(vocab, int(i))}"
    rows = [{**r, "items": len(r["items"])} for r in acc.values()]
    return pd.DataFrame(rows, columns=["side", "class", "steps", "tokens", "items", "example"]).sort_values(
        ["side", "tokens"], ascending=[True, False], ignore_index=True)


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
