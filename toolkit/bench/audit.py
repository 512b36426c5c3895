"""``masklab audit``: is each engine's language inside the schema?

For each engine and schema item, the audit asks what the engine lets a decoder
write, with no model in the way:

* **Walks.**  It makes ``samples`` seeded random walks through the engine's own masks
  (:class:`Sampler`), each to EOS or to a length budget.  Each step draws a token
  uniformly from those the mask allows.  A pull that grows with the walk's length
  favours EOS (when allowed) and tokens that close something, so that walks end.
  Every finished output is decoded and validated with ``jsonschema``, with the
  validator of the schema's own draft and format checks on (:func:`schema_validator`).
  An output the schema rejects is a *counterexample*: the engine's language is looser
  than the schema.
* **Invalid instances.**  It walks each invalid test instance of the item through the
  engine, token by token, then EOS.  An instance accepted through EOS is a
  counterexample too, when ``jsonschema`` also rejects it (else the dataset's label
  is wrong, and the record says so).

A record per (engine, item) (:func:`audit_item`) says ``status``:

* ``sound``: no counterexample;
* ``loosened``: at least one, with the shortest outputs the schema rejects (text,
  the validator's message and JSON pointer) and the invalid instances accepted;
* ``compile_error``: the engine refused the item (a :class:`MasklabError`);
* ``crash``: an engine call raised anything else (the detail names it);
* ``timeout``: the item ran past ``timeout`` seconds (:func:`~toolkit.core.errors.time_limit`:
  a peer's native call that never returns still hangs the in-process audit);
* ``bad_schema``: the schema is not one by its draft's meta-schema (the detail is the
  ``jsonschema`` message and where): no validator can judge the engine on it.

It also counts the walks that finished, ran out of budget, or met a mask that allows
nothing, and the finished outputs it could not judge (``undecided``: a number whose
float is an integer that its text is not, such as ``131233632807725077.61``, which
``jsonschema``, judging floats, would take for an integer).  :func:`run_audit` runs engines over a dataset and appends records to
``OUT/audit.jsonl`` (an existing folder resumes), and :func:`audit_table` sums them up
per engine.  Only JSON-schema items are audited: a grammar or regex has no validator
outside the engines.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from strategies import get_engine
from toolkit.bench.datasets import Item
from toolkit.bench.harness import (
    clear_toolkit_caches,
    encode_case,
    engine_failure_detail,
    load_records,
    select_items,
    spec_for,
)
from toolkit.core import bitmask as bm
from toolkit.core.errors import HarnessError, MasklabError, TimeLimitExceeded, time_limit
from toolkit.core.vocab import load_vocab

__all__ = ["Sampler", "schema_validator", "audit_item", "run_audit", "audit_table", "counterexamples", "AUDIT_STATUSES",
           "DEFAULT_SAMPLES", "DEFAULT_MAX_TOKENS", "DEFAULT_TIMEOUT", "UNDECIDED"]

AUDIT_STATUSES = ("sound", "loosened", "compile_error", "crash", "timeout", "bad_schema")
"""The statuses of an audit record, in table order."""
DEFAULT_SAMPLES = 32
DEFAULT_MAX_TOKENS = 400
DEFAULT_TIMEOUT = 120.0
"""Seconds an (engine, item) audit may take: compile, walks and invalid instances."""
#: counterexamples kept per record, shortest first
KEEP_COUNTEREXAMPLES = 3
#: bytes that close a JSON value or string: the sampler's pull favours tokens holding one
CLOSING = b'}]"'


def schema_validator(schema: Any) -> Any:
    """A ``jsonschema`` validator of ``schema`` for its own draft (``$schema``, else the
    latest), with format checks on; :class:`ValueError` (the meta-schema's message and
    the JSON pointer) for a schema its draft's meta-schema rejects."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        where = "/" + "/".join(str(p) for p in e.absolute_path) if e.absolute_path else "/"
        raise ValueError(f"not a JSON schema at {where}: {e.message}"[:2000]) from None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


class Sampler:
    """Seeded random walks through a matcher's masks.

    ``max_tokens``: the walk's budget (a walk that reaches it is *unfinished*).  At step
    ``i`` the pull is ``p = i / max_tokens``: when EOS is allowed the walk ends with
    probability ``0.05 + 0.95 p``; otherwise, with probability ``p``, the token is
    drawn, by a coin, among the allowed ones holding a closing byte (``}``, ``]``,
    ``"``) or among the allowed one-byte tokens (where a rare byte such as the ``@``
    of an email leaves a lexeme that many-byte tokens keep extending), the other group
    when the first is empty; else
    uniformly among the allowed tokens, those of whitespace alone only
    one time in ten when others are allowed (a vocabulary has hundreds of them, and
    flexible JSON whitespace allows them almost everywhere: uniform walks drown in it).
    """

    def __init__(self, vocab: Any, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        self.vocab = vocab
        self.max_tokens = int(max_tokens)
        self.eos = np.asarray(vocab.eos_ids, dtype=np.int64)
        closing = np.zeros(vocab.size, dtype=bool)
        for t, data in enumerate(vocab.token_bytes):
            if data and any(b in CLOSING for b in data):
                closing[t] = True
        self.closing = closing
        self.single = np.array([len(d) == 1 for d in vocab.token_bytes], dtype=bool)
        self.blank = np.array([bool(d) and not d.strip(b" \t\n\r") for d in vocab.token_bytes], dtype=bool)
        self.row = bm.allocate(vocab.size)

    def walk(self, m: Any, rng: random.Random) -> tuple[list[int], str]:
        """One walk of matcher ``m`` (fresh): its tokens (EOS not included) and how it
        ended: ``"finished"`` (EOS taken), ``"budget"`` or ``"dead"`` (a mask allowing
        nothing)."""
        tokens: list[int] = []
        for i in range(self.max_tokens):
            m.fill_bitmask(self.row)
            allowed = bm.allowed_ids(self.row[0], self.vocab.size)
            if not len(allowed):
                return tokens, "dead"
            pull = i / self.max_tokens
            is_eos = np.isin(allowed, self.eos)
            if is_eos.any() and rng.random() < 0.05 + 0.95 * pull:
                return tokens, "finished"
            text = allowed[~is_eos]
            if not len(text):
                return tokens, "finished"  # EOS is all that is left
            if rng.random() < pull:
                groups = (self.closing, self.single) if rng.random() < 0.5 else (self.single, self.closing)
                for group in groups:
                    pick = text[group[text]]
                    if len(pick):
                        text = pick
                        break
            elif rng.random() < 0.9:
                words = text[~self.blank[text]]
                if len(words):
                    text = words
            t = int(text[rng.randrange(len(text))])
            if not m.accept_token(t):
                raise MasklabError(f"the engine refused token {t} that its mask allowed")
            tokens.append(t)
        return tokens, "budget"


class _Inexact(ValueError):
    """A JSON number that Python's float makes an integer it is not (``1e17 + 0.61``)."""


def _float(text: str) -> float:
    """``float(text)``, refused (:class:`_Inexact`) where the rounding changes what
    ``jsonschema`` sees: an integral float of a text whose value is not an integer."""
    x = float(text)
    if x.is_integer() and not _integral(text):
        raise _Inexact(text)
    return x


def _integral(text: str) -> bool:
    """Whether the JSON number ``text`` is an integer, read from its digits and exponent
    (no arithmetic: ``1e99999999`` costs what ``1e9`` does)."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return True  # not a JSON number: json.loads says so
    frac = m.group(2) or ""
    digits = (m.group(1) + frac).rstrip("0")  # the significant digits, trailing zeros off
    exp = int(m.group(3) or 0) - len(frac) + (len(m.group(1) + frac) - len(digits))
    return exp >= 0 or not digits.strip("0")


_NUMBER = re.compile(r"-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?")


UNDECIDED = "undecided"
"""The judge's verdict on a number ``jsonschema`` cannot see exactly (see :func:`_judge`)."""


def _judge(validator: Any, data: bytes) -> tuple[str, str] | None:
    """None when ``data`` is a JSON text the schema accepts, else ``(message, pointer)``;
    ``(UNDECIDED, text)`` when it holds a number whose float is an integer its text is
    not (``131233632807725077.61``): ``jsonschema`` judges floats, and would take it for
    an integer, so the output is neither counted for nor against the engine."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8: {e}", ""
    try:
        value = json.loads(text, parse_float=_float)
    except _Inexact as e:
        return UNDECIDED, str(e)
    except ValueError as e:
        return f"not JSON: {e}", ""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    pointer = "/" + "/".join(str(p) for p in error.absolute_path) if error.absolute_path else ""
    return error.message[:500], pointer


def audit_item(engine: Any, vocab: Any, item: Item, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
               max_tokens: int = DEFAULT_MAX_TOKENS, sampler: Sampler | None = None,
               name: str | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The audit record of ``item`` (a JSON-schema item) on ``engine`` (module doc),
    within ``timeout`` seconds (None: no limit)."""
    t_start = time.perf_counter()
    try:
        with time_limit(timeout, "audit_seconds"):
            return _audit_item(engine, vocab, item, samples=samples, seed=seed, max_tokens=max_tokens,
                               sampler=sampler, name=name)
    except TimeLimitExceeded:
        return {"engine": engine.name if name is None else name, "item": item.name, "status": "timeout",
                "detail": f"over the {timeout:g} s limit", "samples": samples, "seed": seed, "finished": 0,
                "budget": 0, "dead": 0, "rejected": [], "invalid_accepted": [], "mislabelled": [],
                "wall_s": time.perf_counter() - t_start}


def _audit_item(engine: Any, vocab: Any, item: Item, *, samples: int, seed: int, max_tokens: int,
                sampler: Sampler | None, name: str | None) -> dict[str, Any]:
    if item.kind != "schema":
        raise HarnessError(f"{item.name}: only JSON-schema items can be audited, not {item.kind!r}")
    t_start = time.perf_counter()
    rec: dict[str, Any] = {"engine": engine.name if name is None else name, "item": item.name, "status": "sound",
                           "detail": "", "samples": samples, "seed": seed, "finished": 0, "budget": 0, "dead": 0,
                           "rejected": [], "invalid_accepted": [], "mislabelled": []}
    try:
        validator = schema_validator(item.spec)
    except ValueError as e:
        rec.update(status="bad_schema", detail=str(e), wall_s=time.perf_counter() - t_start)
        return rec
    sampler = sampler if sampler is not None else Sampler(vocab, max_tokens)
    clear_toolkit_caches()
    call = "compile"
    try:
        compiled = engine.compile(spec_for(engine, item, "native"))
        call = "matcher"
        first = engine.matcher(compiled)
        call = "fill_bitmask"
        first.fill_bitmask(sampler.row)
        if first.error is not None:
            raise MasklabError(f"first mask: {first.error}")
    except MasklabError as e:
        rec.update(status="compile_error", detail=f"{type(e).__name__}: {e}"[:2000])
        rec["wall_s"] = time.perf_counter() - t_start
        return rec
    except Exception as e:  # noqa: BLE001 - the engine's bug, recorded
        rec.update(status="crash", detail=engine_failure_detail(rec["engine"], call, e))
        rec["wall_s"] = time.perf_counter() - t_start
        return rec
    outputs: list[bytes] = []
    accepted: list[tuple[int, str]] = []  # the invalid instances the engine took through EOS
    try:
        for k in range(samples):
            call = "matcher"
            m = engine.matcher(compiled)
            call = "walk"
            tokens, how = sampler.walk(m, random.Random(f"{seed}:{item.name}:{k}"))
            rec[how] += 1
            if how == "finished":
                outputs.append(vocab.decode(tokens))
        for k, case in enumerate(item.cases):
            if case.valid:
                continue
            call = "matcher"
            m = engine.matcher(compiled)
            call = "accept_token"
            try:
                tokens = encode_case(vocab, item, case.text) + [vocab.eos_ids[0]]
            except MasklabError:
                continue
            if m.accept_tokens(tokens) == len(tokens):
                accepted.append((k, case.text))
    except MasklabError as e:  # a refusal mid-walk: the engine broke its own mask
        rec.update(status="crash", detail=f"{rec['engine']}.{call}: {type(e).__name__}: {e}"[:2000])
    except Exception as e:  # noqa: BLE001 - the engine's bug, recorded
        rec.update(status="crash", detail=engine_failure_detail(rec["engine"], call, e))
    # the judge, outside the engine's calls: an exception here is the audit's own
    rejected: dict[bytes, tuple[str, str]] = {}
    for data in outputs:
        verdict = _judge(validator, data)
        if verdict is not None and verdict[0] == UNDECIDED:
            rec["undecided"] = rec.get("undecided", 0) + 1
        elif verdict is not None:
            rejected.setdefault(data, verdict)
    for k, text in accepted:
        verdict = _judge(validator, text.encode("utf-8"))
        entry = {"case": k, "text": text[:2000]}
        if verdict is None:
            rec["mislabelled"].append(entry)  # jsonschema accepts it: the dataset's label is wrong
        elif verdict[0] != UNDECIDED:
            entry.update(message=verdict[0], pointer=verdict[1])
            rec["invalid_accepted"].append(entry)
    shortest = sorted(rejected.items(), key=lambda kv: (len(kv[0]), kv[0]))[:KEEP_COUNTEREXAMPLES]
    rec["rejected"] = [{"text": d.decode("utf-8", "replace")[:2000], "message": msg, "pointer": ptr}
                       for d, (msg, ptr) in shortest]
    rec["rejected_outputs"] = len(rejected)
    if rec["status"] == "sound" and (rejected or rec["invalid_accepted"]):
        rec["status"] = "loosened"
    rec["wall_s"] = time.perf_counter() - t_start
    return rec


def run_audit(engines: Sequence[str], data: str | Path | None = None, *, vocab: str = "tekken",
              out: str | Path = "results/audit", samples: int = DEFAULT_SAMPLES, seed: int = 0,
              max_tokens: int = DEFAULT_MAX_TOKENS, limit: int | None = None, item_seed: int | None = None,
              timeout: float | None = DEFAULT_TIMEOUT, progress: bool = True) -> pd.DataFrame:
    """Audit ``engines`` on the JSON-schema items of ``data`` (default: the embedded
    datasets), one process, records appended to ``OUT/audit.jsonl`` as they finish (a
    folder with records resumes: pairs already audited are not redone); returns every
    record of the run as a DataFrame.  ``limit`` / ``item_seed``: the first ``limit``
    items after a shuffle with ``item_seed`` (:func:`~toolkit.bench.harness.select_items`)."""
    if samples < 1:
        raise HarnessError(f"samples must be at least 1, got {samples}")
    if max_tokens < 1:
        raise HarnessError(f"max_tokens must be at least 1, got {max_tokens}")
    if limit is not None and limit < 1:
        raise HarnessError(f"limit must be at least 1, got {limit}")
    if timeout is not None and not timeout > 0:
        raise HarnessError(f"timeout must be positive, got {timeout}")
    engines = list(dict.fromkeys(engines))
    if not engines:
        raise HarnessError("no engines given")
    voc = load_vocab(vocab)
    items = [i for i in select_items(data, None, item_seed, voc.name) if i.kind == "schema"][:limit]
    if not items:
        raise HarnessError(f"no JSON-schema items in {data if data is not None else 'the embedded datasets'}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "audit.jsonl"
    done = {(r["engine"], r["item"]) for r in load_records(path)[0]} if path.is_file() else set()
    built: dict[str, Any] = {}
    for name in engines:
        try:
            built[name] = get_engine(name, voc)
        except (ValueError, ImportError) as e:
            raise HarnessError(str(e)) from e
    sampler = Sampler(voc, max_tokens)
    todo = [(n, it) for it in items for n in engines if (n, it.name) not in done]
    bar = None
    if progress:
        bar = tqdm(total=len(todo), unit="item", desc="audit", dynamic_ncols=True)
    with path.open("a", encoding="utf-8") as f:
        for name, item in todo:
            rec = audit_item(built[name], voc, item, samples=samples, seed=seed, max_tokens=max_tokens,
                             sampler=sampler, name=name, timeout=timeout)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    wanted = {(n, i.name) for i in items for n in engines}
    return pd.DataFrame([r for r in load_records(path)[0] if (r["engine"], r["item"]) in wanted])


def audit_table(records: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per engine (index ``engine``): ``items``, one count per :data:`AUDIT_STATUSES`,
    ``loosened %`` (of the items it compiled), the walks ``finished`` / ``budget`` /
    ``dead``, the finished outputs left ``undecided``, the ``invalid accepted`` instances
    and the ``seconds`` the audit took."""
    df = pd.DataFrame(records) if not isinstance(records, pd.DataFrame) else records
    rows = []
    for engine, g in df.groupby("engine", sort=False):
        counts = g["status"].value_counts()
        compiled = int(counts.get("sound", 0) + counts.get("loosened", 0))
        row: dict[str, Any] = {"engine": engine, "items": len(g)}
        for s in AUDIT_STATUSES:
            row[s] = int(counts.get(s, 0))
        row["loosened %"] = 100.0 * row["loosened"] / compiled if compiled else float("nan")
        for k in ("finished", "budget", "dead", "undecided"):
            row[k] = int(g[k].fillna(0).sum()) if k in g else 0
        row["invalid accepted"] = int(sum(len(v) for v in g.get("invalid_accepted", []) if isinstance(v, list)))
        row["seconds"] = float(g["wall_s"].fillna(0).sum()) if "wall_s" in g else float("nan")
        rows.append(row)
    return pd.DataFrame(rows).set_index("engine") if rows else pd.DataFrame()


def counterexamples(records: pd.DataFrame | Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Per loosened record: engine, item, and its shortest counterexample (an output the
    schema rejects, else an invalid instance the engine accepted) with the message."""
    df = pd.DataFrame(records) if not isinstance(records, pd.DataFrame) else records
    for rec in df[df["status"] == "loosened"].to_dict("records"):
        ex = (rec.get("rejected") or []) + (rec.get("invalid_accepted") or [])
        if ex:
            yield {"engine": rec["engine"], "item": rec["item"], "text": ex[0]["text"],
                   "message": ex[0].get("message", ""), "pointer": ex[0].get("pointer", "")}
