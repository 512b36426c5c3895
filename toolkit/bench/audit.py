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
  than the schema.  The validator reads ``pattern``, ``patternProperties`` and
  ``additionalProperties`` as JSON Schema defines them, with ECMA-262 regexes
  (:func:`toolkit.jsonschema.meta.ecma_regex`): Python's ``re``, ``jsonschema``'s
  default, takes ``к`` for a ``\\w`` and leaves U+FEFF out of ``\\s``, which made exact
  engines look loose.  A walk whose matcher stops with an error (an engine's own limit
  met mid-walk) ends as ``error`` and is not judged.
* **Invalid instances.**  It walks each invalid test instance of the item through the
  engine, token by token, then EOS.  An instance accepted through EOS is a
  counterexample too, when ``jsonschema`` also rejects it (else the dataset's label
  is wrong, and the record says so).
* **Respelled keys** (``respell_keys``, off by default).  From each valid test instance,
  instances whose one key is written with a ``\\u`` escape of its first character and
  whose value under it has another type (:func:`respelled_instances`); those
  ``jsonschema`` rejects are walked like the invalid ones.  An engine that takes another
  spelling of a listed key as an additional property (llguidance 1.9.1 on an open
  object) accepts them; random walks almost never write such a key.

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
  :func:`run_audit` refuses such an item when it loads the data (``skip_bad_items``:
  leaves it out), so only a direct call of :func:`audit_item` meets it.

A record of a compiled item keeps what the compile said it left ``unenforced``
(:func:`~toolkit.bench.measure.unenforced_of`).

It also counts the walks that finished, ran out of budget, or met a mask that allows
nothing, and the finished outputs it could not judge (``undecided``: a number whose
float is an integer that its text is not, such as ``131233632807725077.61``, which
``jsonschema``, judging floats, would take for an integer).  :func:`run_audit` runs engines over a dataset and appends records to
``OUT/audit.jsonl`` (an existing folder resumes), and
:func:`toolkit.bench.audit_tables.audit_table` sums them up per engine.  Only JSON-schema items are audited: a grammar or regex has no validator
outside the engines.
"""

from __future__ import annotations

import functools
import json
import random
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from strategies import get_engine
from toolkit.bench.audit_tables import ITEM_COLUMNS, audit_items, dataset_of
from toolkit.bench.backends import check_backend, default_memory_limit_gb, open_pool
from toolkit.bench.measure import (
    clear_toolkit_caches,
    encode_case,
    engine_failure_detail,
    spec_for,
    unenforced_of,
)
from toolkit.bench.pool import InlinePool, Pool, Task
from toolkit.bench.records import append_record, load_records, write_meta
from toolkit.bench.run import requested_engines
from toolkit.bench.runlock import locks_run_folder
from toolkit.core import bitmask as bm
from toolkit.core.errors import HarnessError, MasklabError, TimeLimitExceeded, time_limit
from toolkit.core.version import masklab_version
from toolkit.core.vocab import load_vocab
from toolkit.data.checks import schema_verdict
from toolkit.data.datasets import Item, select_items, usable_items
from toolkit.data.provenance import engine_info, finish_provenance, provenance
from toolkit.jsonschema.meta import schema_validator as _draft_validator

__all__ = ["Sampler", "AuditWorker", "schema_validator", "audit_item", "run_audit", "ITEMS_FILE", "saved_items",
           "merged_items", "SAMPLERS", "DEFAULT_SAMPLES",
           "DEFAULT_MAX_TOKENS", "DEFAULT_TIMEOUT", "UNDECIDED"]

DEFAULT_SAMPLES = 32
DEFAULT_MAX_TOKENS = 400
DEFAULT_TIMEOUT = 120.0
"""Seconds an (engine, item) audit may take: compile, walks and invalid instances."""
#: counterexamples kept per record, shortest first
KEEP_COUNTEREXAMPLES = 3
#: bytes that close a JSON value or string: the sampler's pull favours tokens holding one
CLOSING = b'}]"'
SAMPLERS = ("uniform", "branch", "mixed")
"""How :class:`Sampler` draws a token among the allowed ones (see its doc)."""


def schema_validator(schema: Any) -> Any:
    """A ``jsonschema`` validator of ``schema`` for its own draft (``$schema``, else the
    latest), with format checks on; :class:`ValueError` (the meta-schema's message and
    the JSON pointer) for a schema its draft's meta-schema rejects: the check
    :func:`run_audit` makes on every item it loads
    (:func:`toolkit.jsonschema.meta.schema_validator`, one function for both)."""
    return _draft_validator(schema)


class Sampler:
    """Seeded random walks through a matcher's masks.

    ``max_tokens``: the walk's budget (a walk that reaches it is *unfinished*).  At step
    ``i`` the pull is ``p = i / max_tokens``: when EOS is allowed the walk ends with
    probability ``0.05 + 0.95 p``; otherwise, with probability ``p``, the token is
    drawn, by a coin, among the allowed ones holding a closing byte (``}``, ``]``,
    ``"``) or among the allowed one-byte tokens (where a rare byte such as the ``@``
    of an email leaves a lexeme that many-byte tokens keep extending), the other group
    when the first is empty; else
    among the allowed tokens, those of whitespace alone only one time in ten when others
    are allowed (a vocabulary has hundreds of them, and flexible JSON whitespace allows
    them almost everywhere: uniform walks drown in it).

    ``kind`` says how that last draw is made (:data:`SAMPLERS`): ``"uniform"``, each
    allowed token alike; ``"branch"``, each distinct *first byte* among the allowed
    tokens alike, then a token among those starting with it.  A branch few tokens take
    (the ``-`` of a negative number, the ``n`` of ``null``, the quote that ends a string
    and leaves its lexeme, a rare enum value) is then drawn as often as one thousands of
    tokens continue, which is where a grammar looser than its schema tends to hide.  ``"mixed"``:
    an item's even walks uniform, its odd ones by branch (on 300 MaskBench schemas each
    found loosened items the other missed).
    """

    def __init__(self, vocab: Any, max_tokens: int = DEFAULT_MAX_TOKENS, kind: str = "uniform") -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if kind not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, not {kind!r}")
        self.vocab = vocab
        self.kind = kind
        self.max_tokens = int(max_tokens)
        data = vocab.token_bytes
        n = vocab.size

        def row(flags: Any) -> np.ndarray:  # a bitmask row (uint32 words) of the tokens flagged
            return bm.from_bool(np.asarray(flags, dtype=bool).reshape(1, n))[0].view(np.uint32).copy()

        eos = np.zeros(n, dtype=bool)
        eos[np.asarray(vocab.eos_ids, dtype=np.int64)] = True
        # the masks are read word by word: the sets the pull and the draws need, as rows
        self.eos = row(eos)
        self.closing = row([bool(d) and any(b in CLOSING for b in d) for d in data])
        self.single = row([len(d) == 1 for d in data])
        self.not_blank = ~row([bool(d) and not d.strip(b" \t\n\r") for d in data])
        self.first = np.array([d[0] if d else 256 for d in data], dtype=np.int16)
        self.first_rows = np.stack([row(self.first == b) for b in range(257)]) if kind != "uniform" else None
        self.row = bm.allocate(n)

    def walk(self, m: Any, rng: random.Random, branch: bool | None = None) -> tuple[list[int], str]:
        """One walk of matcher ``m`` (fresh): its tokens (EOS not included) and how it
        ended: ``"finished"`` (EOS taken), ``"budget"``, ``"error"`` (the matcher
        stopped with an error, such as an engine's limit met mid-walk: its output is
        the engine's refusal, not its language) or ``"dead"`` (a mask allowing
        nothing).  ``branch``: draw by first byte (default: as the sampler's kind says;
        a ``"mixed"`` sampler's walks say it per walk, :meth:`branch_walk`)."""
        if branch is None:
            branch = self.kind == "branch"
        if branch and self.first_rows is None:
            raise ValueError("a uniform sampler cannot walk by branch")
        tokens: list[int] = []
        words = self.row[0].view(np.uint32)
        for i in range(self.max_tokens):
            m.fill_bitmask(self.row)
            if getattr(m, "error", None) is not None:
                return tokens, "error"
            pull = i / self.max_tokens
            eos_ok = bool((words & self.eos).any())
            text = words & ~self.eos
            if not text.any():
                return tokens, ("finished" if eos_ok else "dead")
            if eos_ok and rng.random() < 0.05 + 0.95 * pull:
                return tokens, "finished"
            if rng.random() < pull:
                groups = (self.closing, self.single) if rng.random() < 0.5 else (self.single, self.closing)
                for group in groups:
                    pick = text & group
                    if pick.any():
                        text = pick
                        break
            else:
                if rng.random() < 0.9:
                    worded = text & self.not_blank
                    if worded.any():
                        text = worded
                if branch:
                    text = self._branch(text, rng)
            t = _nth_bit(text, rng)
            if not m.accept_token(t):
                raise MasklabError(f"the engine refused token {t} that its mask allowed")
            tokens.append(t)
        return tokens, "budget"

    def branch_walk(self, k: int) -> bool:
        """Whether walk ``k`` of an item draws by branch: always, never, or (``"mixed"``)
        the odd walks."""
        return self.kind == "branch" or (self.kind == "mixed" and k % 2 == 1)

    def _branch(self, text: np.ndarray, rng: random.Random) -> np.ndarray:
        """``text`` cut to the tokens of one first byte, drawn uniformly among the first
        bytes present: from the tokens themselves when they are few, else by rejection
        (a dense row holds most bytes, so a draw or two finds one)."""
        assert self.first_rows is not None
        nonzero = np.flatnonzero(text)
        if len(nonzero) <= 64:
            ids = _ids_of(text, nonzero)
            present = np.unique(self.first[ids])
            return text & self.first_rows[int(present[rng.randrange(len(present))])]
        while True:
            pick = text & self.first_rows[rng.randrange(257)]
            if pick.any():
                return pick


def _ids_of(words: np.ndarray, nonzero: np.ndarray) -> np.ndarray:
    """The token ids set in ``words`` (uint32 bitmask words), given its nonzero words."""
    bits = np.unpackbits(words[nonzero].astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    w, b = np.nonzero(bits)
    return nonzero[w].astype(np.int64) * 32 + b


def _nth_bit(words: np.ndarray, rng: random.Random) -> int:
    """A token drawn uniformly among those set in ``words`` (uint32 bitmask words, at
    least one set): the bit of a uniform rank, found through the words' running counts."""
    counts = np.cumsum(np.bitwise_count(words), dtype=np.int64)
    r = rng.randrange(int(counts[-1]))
    w = int(np.searchsorted(counts, r, side="right"))
    r -= int(counts[w - 1]) if w else 0
    word = int(words[w])
    while r:
        word &= word - 1  # drop the lowest set bit, r times
        r -= 1
    return w * 32 + (word & -word).bit_length() - 1


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
    an integer, so the output is neither counted for nor against the engine.  The value
    is judged as :func:`toolkit.data.checks.check_output` judges a decoded output
    (:func:`~toolkit.data.checks.schema_verdict`)."""
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
    verdict = schema_verdict(validator, value)  # the one judge of a value against a schema (toolkit.data.checks)
    return None if verdict is None else (verdict[0][:500], verdict[1])


def audit_item(engine: Any, vocab: Any, item: Item, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
               max_tokens: int = DEFAULT_MAX_TOKENS, sampler: Sampler | None = None,
               name: str | None = None, timeout: float | None = DEFAULT_TIMEOUT,
               respell_keys: bool = False) -> dict[str, Any]:
    """The audit record of ``item`` (a JSON-schema item) on ``engine`` (module doc),
    within ``timeout`` seconds (None: no limit); ``respell_keys``: also the respelled
    instances (:func:`respelled_instances`)."""
    t_start = time.perf_counter()
    try:
        with time_limit(timeout, "audit_seconds"):
            return _audit_item(engine, vocab, item, samples=samples, seed=seed, max_tokens=max_tokens,
                               sampler=sampler, name=name, respell_keys=respell_keys)
    except TimeLimitExceeded:
        return {"engine": engine.name if name is None else name, "item": item.name, "status": "timeout",
                "detail": f"over the {timeout:g} s limit", "samples": samples, "seed": seed, "finished": 0,
                "budget": 0, "dead": 0, "rejected": [], "invalid_accepted": [], "mislabelled": [],
                "wall_s": time.perf_counter() - t_start}


def _audit_item(engine: Any, vocab: Any, item: Item, *, samples: int, seed: int, max_tokens: int,
                sampler: Sampler | None, name: str | None, respell_keys: bool = False) -> dict[str, Any]:
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
    compiled, ok = _audit_compile(engine, item, sampler, rec)
    if not ok:
        rec["wall_s"] = time.perf_counter() - t_start
        return rec
    rec["unenforced"] = unenforced_of(compiled)  # the keywords the compile says it left out
    outputs, accepted = _audit_walks(engine, compiled, vocab, item, samples, seed, sampler, rec, respell_keys)
    _judge_outputs(validator, outputs, accepted, rec)
    rec["wall_s"] = time.perf_counter() - t_start
    return rec


def _audit_compile(engine: Any, item: Item, sampler: Sampler, rec: dict[str, Any]) -> tuple[Any, bool]:
    """``(compiled, True)``: the item compiled and a first mask filled; ``(None, False)``
    when the engine refused (``compile_error``) or failed (``crash``), the record says."""
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
        return None, False
    except Exception as e:  # noqa: BLE001 - the engine's bug, recorded
        rec.update(status="crash", detail=engine_failure_detail(rec["engine"], call, e))
        return None, False
    return compiled, True


RESPELLED_PER_INSTANCE = 8
"""Most respelled instances made from one valid instance (:func:`respelled_instances`)."""


def respelled_instances(text: str, most: int = RESPELLED_PER_INSTANCE) -> list[str]:
    """JSON texts made from the JSON text ``text``: in each, one object key (the first
    keys met, depth first) is written with its first character as a ``\\u`` escape (a
    surrogate pair beyond the BMP), the same key to a JSON reader, and the value under
    it is replaced by one of another type (a string becomes ``0``, anything else
    ``"x"``).  None for text that is not JSON."""
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    marker = "\x00masklab-key\x00"
    out: list[str] = []

    def spelled(key: str) -> str:
        cp = ord(key[0])
        if cp > 0xFFFF:
            cp -= 0x10000
            first = f"\\u{0xD800 + (cp >> 10):04x}\\u{0xDC00 + (cp & 0x3FF):04x}"
        else:
            first = f"\\u{cp:04x}"
        return '"' + first + json.dumps(key[1:], ensure_ascii=False)[1:-1] + '"'

    def visit(node: Any, path: list[Any]) -> None:
        if len(out) >= most:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                if key and len(out) < most:
                    variant = _replaced(doc, [*path, key], marker, 0 if isinstance(value, str) else "x")
                    out.append(json.dumps(variant, ensure_ascii=False).replace(json.dumps(marker), spelled(key), 1))
            for key, value in node.items():
                visit(value, [*path, key])
        elif isinstance(node, list):
            for i, value in enumerate(node):
                visit(value, [*path, i])

    visit(doc, [])
    return out


def _replaced(doc: Any, path: list[Any], marker: str, value: Any) -> Any:
    """A copy of ``doc`` where the key at ``path`` (its last step) is ``marker`` and holds ``value``."""
    if len(path) == 1:
        return {(marker if k == path[0] else k): (value if k == path[0] else v) for k, v in doc.items()}
    head = path[0]
    if isinstance(doc, dict):
        return {k: (_replaced(v, path[1:], marker, value) if k == head else v) for k, v in doc.items()}
    return [(_replaced(v, path[1:], marker, value) if i == head else v) for i, v in enumerate(doc)]


def _audit_walks(engine: Any, compiled: Any, vocab: Any, item: Item, samples: int, seed: int, sampler: Sampler,
                 rec: dict[str, Any], respell: bool = False) -> tuple[list[bytes], list[tuple[int, str]]]:
    """The ``samples`` seeded walks (how each ended counted in the record) and the
    invalid instances walked through EOS: ``(the finished outputs, the invalid
    instances the engine took through EOS)``; an engine call that raises ends them (a
    ``crash``)."""
    outputs: list[bytes] = []
    accepted: list[tuple[int, str]] = []  # the invalid instances the engine took through EOS
    call = "matcher"
    try:
        for k in range(samples):
            call = "matcher"
            m = engine.matcher(compiled)
            call = "walk"
            tokens, how = sampler.walk(m, random.Random(f"{seed}:{item.name}:{k}"), sampler.branch_walk(k))
            rec[how] = rec.get(how, 0) + 1
            if how == "error" and not rec["detail"]:
                rec["detail"] = f"walk {k}: the matcher stopped with an error: {m.error}"[:2000]
            if how == "finished":
                outputs.append(vocab.decode(tokens))
        instances = [(k, case.text) for k, case in enumerate(item.cases) if not case.valid]
        if respell:
            instances += [(-1 - k, text) for k, case in enumerate(item.cases) if case.valid
                          for text in respelled_instances(case.text)]
        for k, text in instances:
            call = "matcher"
            m = engine.matcher(compiled)
            call = "accept_token"
            try:
                tokens = encode_case(vocab, item, text) + [vocab.eos_ids[0]]
            except MasklabError:
                continue
            if m.accept_tokens(tokens) == len(tokens):
                accepted.append((k, text))
    except MasklabError as e:  # a refusal mid-walk: the engine broke its own mask
        rec.update(status="crash", detail=f"{rec['engine']}.{call}: {type(e).__name__}: {e}"[:2000])
    except Exception as e:  # noqa: BLE001 - the engine's bug, recorded
        rec.update(status="crash", detail=engine_failure_detail(rec["engine"], call, e))
    return outputs, accepted


def _judge_outputs(validator: Any, outputs: list[bytes], accepted: list[tuple[int, str]], rec: dict[str, Any]) -> None:
    """The judge, outside the engine's calls (an exception here is the audit's own): the
    outputs the schema rejects (the shortest kept), the invalid instances accepted (or
    mislabelled), and ``loosened`` when there is any."""
    rejected: dict[bytes, tuple[str, str]] = {}
    for data in outputs:
        verdict = _judge(validator, data)
        if verdict is not None and verdict[0] == UNDECIDED:
            rec["undecided"] = rec.get("undecided", 0) + 1
        elif verdict is not None:
            rejected.setdefault(data, verdict)
    for k, text in accepted:
        verdict = _judge(validator, text.encode("utf-8"))
        entry = {"case": k if k >= 0 else f"respelled from {-1 - k}", "text": text[:2000]}
        if verdict is None:
            if k >= 0:  # a respelled instance the schema takes is no counterexample
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


class AuditWorker:
    """What an audit worker holds and does, whatever runs it (this process, the local
    pool's processes, Ray actors: :func:`run_audit`): the vocabulary, its sampler, the
    engines built so far, and the audit of one ``(engine, item)`` task.  It has the
    benchmark worker's two calls (:class:`~toolkit.bench.pool.Worker`)."""

    def __init__(self, vocab: Any, *, samples: int = DEFAULT_SAMPLES, seed: int = 0,
                 max_tokens: int = DEFAULT_MAX_TOKENS, sampler: str = "uniform",
                 timeout: float | None = DEFAULT_TIMEOUT,
                 options: Mapping[str, Mapping[str, Any]] | None = None, respell_keys: bool = False) -> None:
        self.vocab = vocab
        self.respell_keys = bool(respell_keys)
        self.samples, self.seed, self.timeout = int(samples), int(seed), timeout
        self.sampler = Sampler(vocab, max_tokens, sampler)
        self.options = {k: dict(v) for k, v in (options or {}).items()}
        self.engines: dict[str, Any] = {}

    def prepare(self, name: str) -> dict[str, Any] | None:
        """Build engine ``name`` unless built: its description the first time, else
        None.  A failure to build raises :class:`HarnessError` (the run stops)."""
        if name in self.engines:
            return None
        try:
            engine = get_engine(name, self.vocab, **self.options.get(name, {}))
        except Exception as e:  # noqa: BLE001 - reported to the driver, which stops the run
            raise HarnessError(f"cannot build engine {name!r}: {type(e).__name__}: {e}") from e
        self.engines[name] = engine
        return engine_info(engine, self.options.get(name, {}))

    def measure(self, name: str, item: Item) -> dict[str, Any]:
        """The audit record of ``item`` on engine ``name`` (built by :meth:`prepare`)."""
        rec = audit_item(self.engines[name], self.vocab, item, samples=self.samples, seed=self.seed,
                         sampler=self.sampler, name=name, timeout=self.timeout, respell_keys=self.respell_keys)
        rec["sampler"] = self.sampler.kind
        rec["dataset"] = dataset_of(item.name, item.path.parent.name if item.path is not None else "")
        return rec


def _failed(name: str, item: Item, status: str, detail: str, wall_s: float) -> dict[str, Any]:
    """The audit record of a task its worker did not finish (killed past the time or
    memory limit, or dead)."""
    return {"engine": name, "item": item.name, "status": status, "detail": detail, "samples": 0, "seed": None,
            "dataset": dataset_of(item.name, item.path.parent.name if item.path is not None else ""),
            "finished": 0, "budget": 0, "dead": 0, "rejected": [], "invalid_accepted": [], "mislabelled": [],
            "wall_s": wall_s}


#: what a resumed audit must share with the folder's earlier runs
_RESUME_KEYS = ("vocab", "samples", "seed", "max_tokens", "sampler", "respell_keys")


@locks_run_folder("out")  # one audit per folder at a time (toolkit.bench.runlock)
def run_audit(engines: Sequence[str], data: str | Path | None = None, *, vocab: str = "tekken",
              out: str | Path = "results/audit", samples: int = DEFAULT_SAMPLES, seed: int = 0,
              max_tokens: int = DEFAULT_MAX_TOKENS, sampler: str = "uniform", limit: int | None = None,
              item_seed: int | None = None, timeout: float | None = DEFAULT_TIMEOUT, jobs: int = 1,
              backend: str = "local", address: str | None = None, memory_limit_gb: float | None = None,
              options: Mapping[str, Mapping[str, Any]] | None = None, progress: bool = True,
              command: str | None = None, skip_bad_items: bool = False, respell_keys: bool = False) -> pd.DataFrame:
    """Audit ``engines`` on the JSON-schema items of ``data`` (default: the embedded
    datasets); records are appended to ``OUT/audit.jsonl`` as they finish, and the run's
    provenance (command, options, engines' versions, machine, start and end, seconds)
    to ``OUT/run.json``.  A folder with records resumes: pairs already audited are not
    redone, and a resume with other ``samples``, ``seed``, ``max_tokens``, ``sampler``
    or vocabulary is refused.  Returns every record of the run as a DataFrame.

    ``limit`` / ``item_seed``: the first ``limit`` items after a shuffle with
    ``item_seed`` (:func:`~toolkit.data.datasets.select_items`).  ``jobs`` / ``backend``
    / ``address``: where the work runs, as in :func:`~toolkit.bench.run.run_bench`:
    one job on the local backend runs in this process (the time limit is then
    :func:`~toolkit.core.errors.time_limit`'s, which a native call that never returns
    escapes); more jobs, or Ray, run worker processes that are killed at ``timeout`` (and
    past ``memory_limit_gb`` resident), losing only their task.  ``options``: per engine
    name, keyword options for its factory."""
    _check_audit(samples, max_tokens, sampler, limit, timeout, jobs, backend, address)
    engines, options = requested_engines(engines, options)
    voc = load_vocab(vocab)
    # a schema its draft's meta-schema rejects: refused here (skip_bad_items: left out), not audited
    items = usable_items((i for i in select_items(data, None, item_seed, voc.name) if i.kind == "schema"), limit,
                         schemas=True, skip=skip_bad_items, command="masklab audit")
    if not items:
        raise HarnessError(f"no JSON-schema items in {data if data is not None else 'the embedded datasets'}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path, meta_path = out / "audit.jsonl", out / "run.json"
    meta: dict[str, Any] = {
        "masklab_version": masklab_version(),
        "command": command or f"run_audit({engines!r}, {str(data)!r})",
        "started": _stamp(), "finished": None, "vocab": voc.name, "vocab_spec": vocab,
        "data": str(data) if data is not None else "datasets (embedded)",
        "items": len(items),
        "samples": int(samples), "seed": int(seed), "max_tokens": int(max_tokens), "sampler": sampler,
        "respell_keys": bool(respell_keys),
        "limit": limit, "item_seed": item_seed, "timeout_s": timeout, "jobs": int(jobs), "backend": backend,
        "engines": {}, **provenance(), "seconds": 0.0,
    }
    if meta_path.is_file():
        _resume_audit(meta, json.loads(meta_path.read_text(encoding="utf-8")), out)
    done = {(r["engine"], r["item"]) for r in load_records(path)[0]} if path.is_file() else set()
    saved = saved_items(out)  # a committed items.csv: a run whose records stayed on another machine
    done |= set(zip(saved["engine"], saved["item"], strict=True))
    todo = [(n, it) for it in items for n in engines if (n, it.name) not in done]
    make = functools.partial(AuditWorker, samples=samples, seed=seed, max_tokens=max_tokens, sampler=sampler,
                             respell_keys=respell_keys,
                             timeout=timeout, options=options)
    t0 = time.perf_counter()
    write_meta(meta_path, meta)
    bar = tqdm(total=len(todo), unit="item", desc="audit", dynamic_ncols=True) if progress else None
    try:
        pool = _audit_pool(make, voc, vocab, items, jobs, backend, address, timeout, memory_limit_gb,
                           inline_ok=not any(n.startswith("peer:") for n, _ in todo))
        _write_audit(pool, todo, path, meta_path, meta, bar)
    finally:
        if bar is not None:
            bar.close()
        meta["seconds"] = round(meta["seconds"] + time.perf_counter() - t0, 3)
        write_meta(meta_path, meta)
    meta["finished"] = _stamp()
    finish_provenance(meta)
    write_meta(meta_path, meta)
    wanted = {(n, i.name) for i in items for n in engines}
    return pd.DataFrame([r for r in load_records(path)[0] if (r["engine"], r["item"]) in wanted])


ITEMS_FILE = "items.csv"
"""The audit's tidy per-item table in its folder (:data:`~toolkit.bench.audit_tables.ITEM_COLUMNS`)."""


def saved_items(out: str | Path) -> pd.DataFrame:
    """``OUT/items.csv`` (empty when there is none): what an earlier run of this folder
    audited, kept in the tidy form that is committed where the raw records are not."""
    path = Path(out) / ITEMS_FILE
    if not path.is_file():
        return audit_items([])
    df = pd.read_csv(path, keep_default_na=False, na_values={"wall_s": [""]})
    missing = set(ITEM_COLUMNS) - set(df.columns)
    if missing:
        raise HarnessError(f"{path}: not an audit's items table (no {', '.join(sorted(missing))})")
    return df[list(ITEM_COLUMNS)]


def merged_items(out: str | Path, records: pd.DataFrame | Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The tidy table of ``records`` with the rows of ``OUT/items.csv`` they do not
    cover: every item of a run resumed across machines, once."""
    new = audit_items(records)
    saved = saved_items(out)
    keys = set(zip(new["engine"], new["item"], strict=True))
    keep = [(e, i) not in keys for e, i in zip(saved["engine"], saved["item"], strict=True)]
    return pd.concat([saved[keep], new], ignore_index=True) if len(saved) else new


def _stamp() -> str:
    """The local time and its offset, as an audit's ``run.json`` writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _check_audit(samples: int, max_tokens: int, sampler: str, limit: int | None, timeout: float | None, jobs: int,
                 backend: str, address: str | None) -> None:
    """A :class:`HarnessError` naming the first setting of :func:`run_audit` it cannot run with."""
    if samples < 1:
        raise HarnessError(f"samples must be at least 1, got {samples}")
    if max_tokens < 1:
        raise HarnessError(f"max_tokens must be at least 1, got {max_tokens}")
    if sampler not in SAMPLERS:
        raise HarnessError(f"sampler must be one of {', '.join(SAMPLERS)}, not {sampler!r}")
    if limit is not None and limit < 1:
        raise HarnessError(f"limit must be at least 1, got {limit}")
    if timeout is not None and not timeout > 0:
        raise HarnessError(f"timeout must be positive, got {timeout}")
    if jobs < 1:
        raise HarnessError(f"jobs must be at least 1, got {jobs}")
    check_backend(backend, address)


def _resume_audit(meta: dict[str, Any], old: dict[str, Any], out: Path) -> None:
    """``meta`` continuing the folder's audit ``old``, which must have the same
    :data:`_RESUME_KEYS`: its engines, its start, its seconds, the resumes."""
    for key in _RESUME_KEYS:
        if (key in old or key == "respell_keys") and old.get(key, False) != meta[key]:
            raise HarnessError(f"{out} holds an audit with {key}={old[key]!r}, not {meta[key]!r}: "
                               f"give another --out, or the same {key}")
    meta["engines"] = dict(old.get("engines") or {})
    meta["started"] = old.get("started", meta["started"])
    meta["seconds"] = float(old.get("seconds") or 0.0)
    meta["resumed"] = [*old.get("resumed", []), _stamp()]


def _audit_pool(make: Any, voc: Any, vocab_spec: str, items: list[Item], jobs: int, backend: str,
                address: str | None, timeout: float | None, memory_limit_gb: float | None, *,
                inline_ok: bool = True) -> Pool:
    """Where the audit's tasks run: this process (one job on the local backend, masklab's
    own strategies only: they keep their limits themselves), else worker processes or Ray
    actors (:func:`~toolkit.bench.backends.open_pool`).  A peer engine always runs in a
    worker, under ``memory_limit_gb`` and the timeout: its memory is its own library's
    (one took 23 GB on a MaskBench schema when run in this process)."""
    if jobs == 1 and backend == "local" and inline_ok:
        return InlinePool(make(voc))
    if memory_limit_gb is None:
        memory_limit_gb = default_memory_limit_gb(jobs)
    # the worker's own limit fires first; the pool's, a little later, catches a native hang
    outer = 2.0 * timeout + 30.0 if timeout else 1e9
    return open_pool(backend, jobs, vocab_spec, items, make, outer, memory_limit_gb * 2**30, failed=_failed,
                     address=address)


def _write_audit(pool: Pool, todo: list[Task], path: Path, meta_path: Path, meta: dict[str, Any], bar: Any) -> None:
    """Run ``todo`` in ``pool``, each record appended to ``path`` as it finishes, the
    engines' descriptions into the run's metadata once known; the pool is closed at the
    end, whatever happens."""
    try:
        with path.open("a", encoding="utf-8") as f:
            for rec in pool.run(todo):
                append_record(f, rec)
                new = {k: v for k, v in pool.engine_info.items() if k not in meta["engines"]}
                if new:
                    meta["engines"].update(new)
                    write_meta(meta_path, meta)
                if bar is not None:
                    bar.update(1)
    finally:
        pool.close()
