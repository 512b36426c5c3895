"""Why an engine differs, beyond :mod:`toolkit.bench.agree`: two diagnostics of a
benchmark run (``masklab diagnose``).

* :func:`grammar_verdicts` (``masklab diagnose rejects RUN --engine E``): every valid
  instance an engine rejected (its items with ``validation_error``), given to the
  scannerless recognizer of the item's own grammar (:meth:`Grammar.accepts
  <toolkit.grammar.ir.Grammar.accepts>`, the language ``naive`` implements).  An
  instance the grammar rejects too is lost by the schema compiler, not by the
  strategy; one the grammar accepts is a strategy difference.
* :func:`late_matches` (``masklab diagnose late-match RUN``): every token that only
  ``outlines`` allows where ``peer:outlines-core`` does not, at the steps where their
  masks differ, checked against outlines-core's documented miss (its index drops a
  token whose bytes but the last reach an accepting state of the regex's DFA, wherever
  the whole token ends; ``tests/test_peers.py``).
"""

from __future__ import annotations

import json
import re
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from strategies import get_engine
from strategies.outlines.engine import OutlinesEngine
from toolkit.bench.agree import agreement
from toolkit.bench.measure import spec_for
from toolkit.bench.records import read_records
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError, TimeLimitExceeded, time_limit
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import iter_items

__all__ = ["DiagnoseError", "grammar_verdicts", "late_matches", "VERDICTS"]

VERDICTS = ("grammar rejects too", "grammar accepts", "undecided (time limit)", "no grammar (masklab cannot build it)")
_REJECTED = re.compile(r"case (\d+) \(valid\) rejected")


class DiagnoseError(MasklabError, ValueError):
    """A run a diagnostic cannot read (no records, an engine it does not hold)."""


def _meta(run: Path) -> dict[str, Any]:
    path = run / "run.json"
    if not path.is_file():
        raise DiagnoseError(f"{run}: no run.json (is this a masklab bench run directory?)")
    return json.loads(path.read_text())


def grammar_verdicts(run: str | PathLike[str], engine: str, time_limit_s: float | None = 30.0) -> pd.DataFrame:
    """One row per valid instance ``engine`` rejected in ``run``: ``item``, ``case`` (its
    index), ``verdict`` (one of :data:`VERDICTS`; the grammar's check stops after
    ``time_limit_s`` seconds, None for no limit; an engine with its own schema compiler
    may reject instances of a schema masklab's compiler refuses: no grammar to ask)."""
    run = Path(run)
    meta = _meta(run)
    records = [r for r in read_records(run) if r["engine"] == engine]
    if not records:
        held = sorted({r["engine"] for r in read_records(run)})
        raise DiagnoseError(f"{run}: no records of engine {engine!r} (the run holds {', '.join(held) or 'none'})")
    failed = {r["item"]: r for r in records if r["status"] == "validation_error"}
    rows = []
    for item in iter_items(meta["data"]):
        rec = failed.get(item.name)
        if rec is None:
            continue
        try:
            grammar = item.grammar()
        except MasklabError:  # an engine with its own schema compiler may take what ours refuses
            grammar = None
        for k in sorted({int(x) for x in _REJECTED.findall(rec.get("detail") or "")}):
            if grammar is None:
                rows.append({"item": item.name, "case": k, "verdict": VERDICTS[3]})
                continue
            try:
                with time_limit(time_limit_s, "grammar check"):
                    verdict = VERDICTS[1] if grammar.accepts(item.cases[k].text) else VERDICTS[0]
            except TimeLimitExceeded:
                verdict = VERDICTS[2]
            rows.append({"item": item.name, "case": k, "verdict": verdict})
    return pd.DataFrame(rows, columns=["item", "case", "verdict"])


def late_matches(run: str | PathLike[str], ours: str = "outlines", peer: str = "peer:outlines-core") -> dict[str, Any]:
    """Counts over the items whose masks differ in ``run`` (:func:`~toolkit.bench.agree.agreement`):
    ``differing_steps``; tokens only ``ours`` allows, split into ``late_match`` (the
    documented miss: see the module doc) and ``unexplained`` (each listed in
    ``unexplained_tokens`` as ``(item, token bytes)``); ``only_peer`` tokens.  Both
    engines are re-run on each item's valid instances with ``ours``' options."""
    run = Path(run)
    meta = _meta(run)
    table = agreement(run, ours, peer)
    bad = set(table[table["differ"] > 0]["item"])
    out: dict[str, Any] = {"items": len(bad), "differing_steps": 0, "late_match": 0, "unexplained": 0,
                           "only_peer": 0, "unexplained_tokens": []}
    if not bad:
        return out
    vocab = load_vocab(meta["vocab"]["spec"])
    a_engine = get_engine(ours, vocab, **meta["engines"][ours].get("requested_options", {}))
    if not isinstance(a_engine, OutlinesEngine):
        raise DiagnoseError(f"{ours!r} is not an outlines engine: the late match is outlines-core's miss "
                            "against the DFA walk of outlines' index (--ours takes outlines)")
    b_engine = get_engine(peer, vocab)
    for item in iter_items(meta["data"]):
        if item.name not in bad:
            continue
        source = meta.get("source", "native")
        a, b = a_engine.compile(spec_for(a_engine, item, source)), b_engine.compile(spec_for(b_engine, item, source))
        dfa = a.dfa
        ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
        for case in (c for c in item.cases if c.valid):
            ma, mb = a_engine.matcher(a), b_engine.matcher(b)
            for t in vocab.encode(case.text) + [vocab.eos_ids[0]]:
                ma.fill_bitmask(ra)
                mb.fill_bitmask(rb)
                if (ra != rb).any():
                    out["differing_steps"] += 1
                    out["only_peer"] += len(bm.allowed_ids(rb[0] & ~ra[0], vocab.size))
                    for i in bm.allowed_ids(ra[0] & ~rb[0], vocab.size).tolist():
                        data = vocab.token_bytes[i]
                        mid, end = dfa.run(data[:-1], ma.state), dfa.run(data, ma.state)
                        if mid and dfa.accepting[mid] and end:
                            out["late_match"] += 1
                        else:
                            out["unexplained"] += 1
                            out["unexplained_tokens"].append((item.name, data))
                if not (ma.accept_token(t) and mb.accept_token(t)):
                    break
    return out
