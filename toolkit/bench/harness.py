"""MaskBench-style benchmark runs: every engine on the same items, in worker processes.

For each (item, engine) pair, a worker process:

1. **compiles** the item (``compile_s``) and computes the first mask on a fresh
   matcher: ``ttfm_s`` = compile + first ``fill_bitmask`` (time to first mask);
2. runs each test instance, tokenized with ``vocab.encode`` of ``json.dumps(data)``
   (schemas) or of ``text`` (grammars, regexes), then EOS: per step
   ``fill_bitmask`` + a check of the token's bit + ``accept_token``, timed together
   (``tbm_s``, valid instances only) with the mask's popcount and sliced flag, and
   per valid instance a digest of every mask (``cases[k]["digests"]``, blake2b of the
   row, outside the timed region), so that two engines' masks can be compared step by
   step after the run (:mod:`toolkit.bench.agree`); an engine whose compiled form has a
   ``stats()`` method (e.g. ``outlines``: DFA states, index memory, build phases)
   gets it recorded as ``compiled_stats``; the matchers' work counters over the valid
   instances (:class:`~toolkit.core.protocol.MaskStats`: trie nodes, lexer steps, Earley
   items, tokens checked, sliced or cached) are recorded as ``work``;
3. judges validity: a valid instance must be accepted through EOS (else a
   *validation error*), an invalid one must be rejected somewhere (else an
   *invalidation error*);
4. with ``walks`` W > 1, walks the valid instances W - 1 more times on the same
   compile (fresh matchers, the grammar as the earlier walks left it: a server's later
   requests for a schema), each later walk's times in ``rec["walks"]``; their masks
   must be the first walk's (else a *validation error*).

The item's ``status`` is MaskBench's (:data:`STATUSES`):

* ``passing``: every instance handled correctly;
* ``compile_error``: the engine refused the item: its compile, its matcher or its first
  mask raised a :class:`~toolkit.core.errors.MasklabError` (the peers' own errors come
  wrapped as ``PeerError``), or the first mask left the matcher in its error state;
  ``detail`` is the error (``"UnsupportedGrammar: ..."``);
* ``timeout``: over the per-item limit (the worker is killed);
* ``crash``: the engine failed while running: its worker died (a signal, the memory
  limit), or one of its calls raised anything but a refusal: a non-masklab exception
  from the compile, the matcher or the first mask, or any exception mid-walk (the
  protocol's calls do not raise mid-decode).  ``detail`` names the call and the
  exception, ``"ENGINE.fill_bitmask raised RuntimeError: ..."``, with the innermost
  frames of its traceback (:func:`engine_failure_detail`).  Only a bug of the harness
  itself (an exception outside the engine's calls) has a detail starting
  ``"harness: "``;
* ``validation_error``: a valid instance rejected;
* ``invalidation_error``: an invalid instance accepted.

How items reach an engine (``source``):

* ``"native"`` (default): an item goes to the engine's own front end when the engine
  lists its format in ``native_inputs`` (the peers: "engine as shipped": a JSON schema
  to its schema compiler, Lark to llguidance, GBNF to llama.cpp); any other item is
  read to the IR (:func:`toolkit.grammar.inputs.engine_input`), e.g. masklab's
  :meth:`Grammar.from_json_schema`, whose time counts in the compile time;
* ``"grammar"``: every engine gets the same :class:`~toolkit.grammar.Grammar`
  ("same grammar, different engine"; peers read it through ``to_lark``, ``to_gbnf`` or
  ``to_regex``).

Items an engine does not read itself go as a :class:`Grammar` (converted in the worker,
counted in the compile time).  Every compile starts with the toolkit's shared caches
empty (:func:`clear_toolkit_caches`), so no engine finds DFAs another one built for the
same item.  masklab's engines keep their own memo of earlier items (a warm engine
meeting a new schema, as in a server; :mod:`toolkit.core.memo`), the peers whatever their
engine keeps; ``-o ENGINE.memo=false`` makes ours start every item cold.  Before its
first item, a worker warms each engine up (:func:`warm_up`, untimed) on a one-symbol
grammar and schema, so one-time library setup (Lark's meta-grammar, an engine's
first-use initialization) lands on no item.

Isolation: each engine runs single-threaded (``RAYON_NUM_THREADS``,
``OMP_NUM_THREADS`` = 1) in a worker process; ``jobs`` workers run side by side.
A worker that exceeds the per-item ``timeout`` or the memory limit is killed, the
item recorded as ``timeout`` or ``crash``, and a fresh worker takes the next item;
a worker that dies is recorded as ``crash`` the same way.

Output: ``OUT/records.jsonl`` (one line per engine x item, appended and flushed as
each finishes) and ``OUT/run.json`` (command, vocabulary, data, engines with versions
and options, machine).  A run resumes where it stopped: pairs already in
``records.jsonl`` are not redone, a truncated last line (a killed run) is dropped.
The run holds ``OUT/.lock`` (:mod:`toolkit.bench.runlock`): a second run on the same
folder refuses at once, naming the first one's pid.  A record of a compiled item holds
``unenforced``: what the compile said it left out (:func:`unenforced_of`; a peer's
warnings and documented omissions, always empty for masklab's strategies).  Dataset
items are checked before anything runs (:func:`select_items`): an item without test
instances, or a schema its draft's meta-schema rejects, refuses the run unless
``skip_bad_items`` leaves them out.
:mod:`toolkit.report` turns run folders into tables and figures.
"""

from __future__ import annotations

import collections
import functools
import gc
import gzip
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import subprocess
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
from tqdm.auto import tqdm

from strategies import engine_factory, get_engine
from toolkit.automata.regex import clear_cache
from toolkit.bench.cluster import RayPool
from toolkit.bench.datasets import Case, Item, embedded_dir, iter_items, usable_items
from toolkit.bench.runlock import locks_run_folder
from toolkit.core import bitmask as bm
from toolkit.core.errors import HarnessError, MasklabError
from toolkit.core.protocol import MaskStats
from toolkit.core.version import masklab_version
from toolkit.core.vocab import load_vocab
from toolkit.grammar.inputs import engine_input, read, wrap
from toolkit.grammar.ir import Grammar
from toolkit.grammar.special import encode_with_specials

__all__ = [
    "HarnessError",
    "STATUSES",
    "run_bench",
    "measure_item",
    "engine_failure_detail",
    "summary_lines",
    "clear_toolkit_caches",
    "select_items",
    "spec_for",
    "encode_case",
    "engine_info",
    "read_records",
    "load_records",
    "records_file",
    "machine_info",
    "unenforced_of",
    "WorkerPool",
    "Worker",
    "serve",
    "failed_record",
    "DEFAULT_TIMEOUT",
    "QUICK_CASES",
]

STATUSES = ("passing", "compile_error", "timeout", "crash", "validation_error", "invalidation_error")
"""Record statuses (see the module doc), in the order tables and summaries give them."""
DEFAULT_TIMEOUT = 60.0
#: ``quick``: at most this many valid and this many invalid instances per item
QUICK_CASES = 3
BACKENDS = ("local", "ray")
"""Where :func:`run_bench` runs its workers (``ray``: :mod:`toolkit.bench.cluster`)."""

_STARTUP_TIMEOUT = 600.0  # a worker loading a vocabulary and building an engine
_POLL = 0.25
_SINGLE_THREAD_ENV = {
    "RAYON_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


# ------------------------------------------------------- one item, in-process --


#: the floors whose modules' caches a cold compile must not find filled (regex parses,
#: DFAs, schema fragments), every module of them but those kept per vocabulary
_CACHED_FLOORS = ("toolkit.automata.", "toolkit.grammar.", "toolkit.jsonschema.")
_KEPT = frozenset({"toolkit.grammar.special"})  # a vocabulary's special-token views, built once as it is


def clear_toolkit_caches() -> None:
    """Empty the toolkit's memo caches (regex parses, DFAs, schema fragments) in the
    default scope (:mod:`toolkit.core.memo`), and the ``cache_clear`` caches of every
    loaded module of the regex, grammar and JSON Schema floors.

    The harness calls it before every compile, so no engine finds the DFAs another one
    built for the same item (with ``--source grammar`` both build the same
    :class:`Grammar`).  masklab's engines memoize in scopes of their own, which this
    leaves alone: an engine keeps what its earlier items built, as a server's engine
    instance does (option ``memo=False`` for cold starts).
    """
    clear_cache()
    for name, mod in list(sys.modules.items()):
        if not name.startswith(_CACHED_FLOORS) or name in _KEPT or mod is None:
            continue
        for value in list(vars(mod).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()


def spec_for(engine: Any, item: Item, source: str) -> Any:
    """What ``engine.compile`` receives for ``item`` (see the module doc)."""
    return engine_input(engine, item.source(), source)


def encode_case(vocab: Any, item: Item, text: str) -> list[int]:
    """A test text's ids: plain text by ``vocab.encode``, except that in a grammar item
    whose grammar names special tokens, those tokens written as the grammar writes
    them (``<|eom_id|>``), or as ``<[ID]>``, are the tokens themselves
    (:func:`toolkit.grammar.special.encode_with_specials`)."""
    if item.kind != "schema" and "<" in text:
        specials = _special_marks(item.kind, item.spec)
        if specials:
            return encode_with_specials(vocab, text, specials)
    return vocab.encode(text)


@functools.lru_cache(maxsize=64)
def _special_marks(key: str, spec: str) -> list[str]:
    """The special tokens a grammar item's grammar names, as written (read once per item)."""
    g = read(wrap(key, spec))
    return [g.terminals[n].special for n in g.special_terminals]


def _select_cases(cases: Sequence[Case], quick: bool) -> list[Case]:
    if not quick:
        return list(cases)
    valid = [c for c in cases if c.valid][:QUICK_CASES]
    invalid = [c for c in cases if not c.valid][:QUICK_CASES]
    return valid + invalid


def measure_item(engine: Any, vocab: Any, item: Item, *, source: str = "native", quick: bool = False,
                 direct: bool = False, drafts: Sequence[int] = (), walks: int = 1,
                 name: str | None = None) -> dict[str, Any]:
    """Compile ``item`` with ``engine`` and run its instances; the record (see module doc).

    ``direct``: for an engine with a ``direct_check`` (the peers), also run the engine
    directly through its own API on the same walks (``rec["direct"]``, see
    :mod:`toolkit.report.direct`).  ``drafts`` (draft lengths k): at every
    :data:`DRAFT_STRIDE`-th step of each valid instance, the masks of a draft of the
    next k tokens of the instance (``fill_draft_bitmasks``) are timed against k
    sequential fill + accept steps and a rollback, outside the TBM (``rec["draft"]``,
    :func:`measure_draft`).  ``walks``: the valid instances are walked this many times
    on the one compile, the later walks on the grammar the earlier ones warmed (a
    server's second request): the first walk is ``tbm_s`` as always, each later one a
    ``rec["walks"]`` entry (:func:`_walk_again`), whose masks must be the first walk's
    (else a ``validation_error``).  ``name``: the engine's name in the record (default
    ``engine.name``; the harness gives the name the run was asked for).  In-process and
    untimed-out: the harness calls it in a worker; a notebook may call it directly to
    look at one item.

    A :class:`~toolkit.core.errors.MasklabError` out of the compile, the matcher or the
    first mask is the engine's refusal (``compile_error``); any other exception out of
    one of the engine's calls (compile, matcher, fill, accept, rollback, draft masks,
    work counters) is the engine's bug: the record is a ``crash`` whose detail names the
    call (:func:`engine_failure_detail`), with what was measured before it.  An
    exception out of the harness's own code propagates.
    """

    rec: dict[str, Any] = {
        "engine": engine.name if name is None else name,
        "item": item.name,
        "kind": item.kind,
        "status": "passing",
        "detail": "",
        "compile_s": None,
        "ttfm_s": None,
        "ttfm_wall_s": None,
        "memory_bytes": None,
        "vocab_size": vocab.size,
        "tbm_s": [],
        "allowed": [],
        "sliced": [],
        "cases": [],
        "wall_s": 0.0,
    }
    t_start = time.perf_counter()
    perf = time.perf_counter
    row = bm.allocate(vocab.size)
    glue: list[float] = []  # per mask step, the adapter's time besides the engine's (timed engines)
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        # the direct check's compile goes first on half the items (by name), after on the rest
        can_direct = direct and engine.direct_check is not None
        direct_first = can_direct and zlib.crc32(item.name.encode()) % 2 == 0
        runner = None
        if direct_first:
            try:
                direct_spec = spec_for(engine, item, source)
            except MasklabError:  # the item cannot be read: the compile below says so
                direct_first = can_direct = False
            else:
                runner = _direct_run(engine, direct_spec, rec)
        clear_toolkit_caches()
        call: str | None = None  # the engine call under way (None: the harness's own code)
        t0 = perf()
        try:
            spec = spec_for(engine, item, source)  # a grammar item's Grammar counts in the compile
            call = "compile"
            compiled = engine.compile(spec)
            t1 = perf()
            call = "matcher"
            m = engine.matcher(compiled)
            call = "fill_bitmask"
            m.fill_bitmask(row)
            t2 = perf()
        except MasklabError as e:  # a refusal (the peers' own errors come as PeerError): a compile error
            rec["status"] = "compile_error"
            rec["detail"] = f"{type(e).__name__}: {e}"[:2000]
            return rec
        except Exception as e:
            if call is None:
                raise  # the toolkit's reading of the item: the harness's fault, not the engine's
            raise _EngineRaised(call, e) from e
        rec["unenforced"] = unenforced_of(compiled)
        try:
            timed = m.times_engine
            if timed:  # the engine's own calls only: its compile, its matcher, its first fill
                native_compile = compiled.engine_s if compiled.engine_s is not None else t1 - t0
                rec["compile_s"] = native_compile
                rec["ttfm_s"] = native_compile + m.engine_s
            else:
                rec["compile_s"] = t1 - t0
                rec["ttfm_s"] = t2 - t0
            m_error = m.error
        except Exception as e:
            raise _EngineRaised("matcher", e) from e
        rec["ttfm_wall_s"] = t2 - t0
        if m_error is not None:
            rec["status"] = "compile_error"
            rec["detail"] = f"first mask: {m_error}"[:2000]
            return rec
        try:
            rec["memory_bytes"] = int(compiled.memory_bytes())
        except Exception:  # noqa: BLE001 - memory is informative only
            rec["memory_bytes"] = None
        try:  # an engine's own figures (states, build phases), informative only
            stats = dict(compiled.stats())
        except Exception:  # noqa: BLE001
            stats = {}
        if stats:
            rec["compiled_stats"] = stats
        if can_direct and not direct_first:
            runner = _direct_run(engine, spec, rec)
        eos = vocab.eos_ids[0]
        tbm, allowed, sliced = rec["tbm_s"], rec["allowed"], rec["sliced"]
        failures: list[str] = []
        work: MaskStats | None = MaskStats()
        walked: list[tuple[int, list[int], list[str], int]] = []  # (case, tokens, digests, consumed): valid walks
        for k, case in enumerate(_select_cases(item.cases, quick)):
            try:
                tokens = encode_case(vocab, item, case.text) + [eos]
            except MasklabError as e:
                # not the engine's fault either way: the case is left out of the verdict
                rec["cases"].append({"valid": case.valid, "ok": None, "tokens": 0, "consumed": 0, "error": str(e)})
                failures.append(f"case {k} skipped, cannot tokenize: {e}")
                continue
            if runner is not None and case.valid and k % 2 == 0:  # the direct walk first on even cases
                direct_walk = _direct_walk(runner, tokens, rec)
                runner = runner if direct_walk is not None else None
            try:
                m = engine.matcher(compiled)
                # ours: the C session's own calls (MaskInfo is not built); a BaseMatcher: the
                # protocol's calls, of which ``engine_s`` is the engine's part when it is timed
                session = m.session
                sfill = session.fill_bitmask if session is not None else None
                saccept = session.accept_token if session is not None else None
                maccept = m.accept_allowed  # the bit is checked first
            except Exception as e:
                raise _EngineRaised("matcher", e) from e
            consumed = 0
            digests: list[str] = []
            draft_work: MaskStats | None = MaskStats()  # the draft masks' work, kept out of ``work``
            for i, t in enumerate(tokens):
                # each engine call in its own ``try`` (free in Python 3.11 until one raises),
                # so that an exception is the engine's, named by its call (_EngineRaised)
                e_start = _engine_s(m) if timed else 0.0
                n_allowed, is_sliced, spent = _timed_fill(m, sfill, row)
                if drafts and case.valid and i % DRAFT_STRIDE == 0:  # outside the TBM and the work
                    e_before, w_before = _engine_s(m), _stats_of(m)
                    measure_draft(m, tokens[i:], drafts, rec.setdefault("draft", {}))
                    e_start += _engine_s(m) - e_before
                    draft_work = _minus_work(draft_work, _stats_of(m), w_before)
                if (int(row[0, t >> 5]) >> (t & 31)) & 1:
                    ok, took = _timed_accept(saccept, maccept, t)
                    spent += took
                else:
                    ok = False
                if case.valid:
                    if timed:
                        try:
                            engine_spent = m.engine_s - e_start
                        except Exception as e:
                            raise _EngineRaised("engine_s", e) from e
                        tbm.append(round(engine_spent, 9))
                        glue.append(round(spent - engine_spent, 9))
                    else:
                        tbm.append(round(spent, 9))
                    allowed.append(n_allowed)
                    sliced.append(bool(is_sliced))
                    digests.append(blake2b(row, digest_size=8).hexdigest())
                if not ok:
                    break
                consumed += 1
            accepted = consumed == len(tokens)
            entry: dict[str, Any] = {"valid": case.valid, "ok": accepted == case.valid, "tokens": len(tokens), "consumed": consumed}
            if case.valid:
                entry["digests"] = digests
                walked.append((k, tokens, digests, consumed))
                work = _add_work(work, m, draft_work)
                if runner is not None and k % 2 == 1:  # ... and after masklab's on odd ones
                    direct_walk = _direct_walk(runner, tokens, rec)
                    runner = runner if direct_walk is not None else None
                if runner is not None:
                    rec["direct"]["tbm_s"] += direct_walk
                    rec["direct"]["steps"].append(len(direct_walk))
            m_error = _matcher_error(m)
            if m_error is not None:
                entry["error"] = m_error
            rec["cases"].append(entry)
            if accepted != case.valid:
                if case.valid:
                    at = vocab.decode(tokens[:consumed]).decode("utf-8", "replace")[-40:]
                    failures.append(f"case {k} (valid) rejected at token {consumed}/{len(tokens)} after {at!r}"
                                    + (f": {m_error}" if m_error else ""))
                else:
                    failures.append(f"case {k} (invalid) accepted")
        if timed:
            rec["glue_s"] = glue
        if work is not None:
            rec["work"] = work.as_dict()
        walk_failed = False
        for w in range(2, walks + 1):
            later, differ = _walk_again(engine, compiled, walked, row, timed, vocab)
            rec.setdefault("walks", []).append(later)
            failures += [f"walk {w}: {d}" for d in differ]
            walk_failed |= bool(differ)
        if walk_failed or any(c["valid"] and c["ok"] is False for c in rec["cases"]):
            rec["status"] = "validation_error"
        elif any(not c["valid"] and c["ok"] is False for c in rec["cases"]):
            rec["status"] = "invalidation_error"
        rec["detail"] = "; ".join(failures)[:2000]
        return rec
    except _EngineRaised as raised:  # the engine's bug: the record keeps what was measured before it
        if glue:
            rec["glue_s"] = glue
        rec["status"] = "crash"
        rec["detail"] = engine_failure_detail(rec["engine"], raised.call, raised.error)
        return rec
    finally:
        if gc_was:
            gc.enable()
        rec["wall_s"] = time.perf_counter() - t_start


def unenforced_of(compiled: Any) -> list[dict[str, Any]]:
    """What a compile says it left unenforced (``compiled.unenforced``: a list of
    ``{"keyword", "message", "pointer"?, "count"?}``, :mod:`strategies.peers`), as a
    record holds it: masklab's own strategies refuse what they cannot enforce, so theirs
    is empty, as is that of an engine without the attribute."""
    entries = getattr(compiled, "unenforced", None) or ()
    return [dict(e) for e in entries if isinstance(e, Mapping)]


def _timed_fill(m: Any, sfill: Any, row: np.ndarray) -> tuple[int, bool, float]:
    """One mask into ``row``: ``(allowed, sliced, seconds)``, the clock read right around
    the engine's call (``sfill``, our C session's, or else the protocol's ``fill_bitmask``);
    an exception out of it is the engine's (:class:`_EngineRaised`)."""
    perf = time.perf_counter
    try:
        if sfill is not None:
            s = perf()
            n_allowed, is_sliced = sfill(row, 0)
            e = perf()
        else:
            s = perf()
            info = m.fill_bitmask(row)
            e = perf()
            n_allowed, is_sliced = info.allowed, info.sliced
    except Exception as error:
        raise _EngineRaised("fill_bitmask", error) from error
    return n_allowed, is_sliced, e - s


def _timed_accept(saccept: Any, maccept: Any, t: int) -> tuple[bool, float]:
    """Accept token ``t`` (allowed by the last mask): ``(taken, seconds)``, timed as
    :func:`_timed_fill` times a fill (``saccept``, the C session's, or else ``maccept``)."""
    perf = time.perf_counter
    try:
        if saccept is not None:
            s = perf()
            ok = saccept(t)
            e = perf()
        else:
            s = perf()
            ok = maccept(t)
            e = perf()
    except Exception as error:
        raise _EngineRaised("accept_token" if saccept is not None else "accept_allowed", error) from error
    return bool(ok), e - s


def _walk_again(engine: Any, compiled: Any, walked: Sequence[tuple[int, list[int], list[str], int]],
                row: np.ndarray, timed: bool, vocab: Any) -> tuple[dict[str, Any], list[str]]:
    """One more walk of the valid instances ``walked`` (case index, tokens, the first
    walk's mask digests, the tokens it took) on ``compiled``, timed as the first walk is (fill + accept;
    the engine's own calls where the matcher times them): ``({"tbm_s": [...]} (and
    ``glue_s``), the differences)``, a difference being a mask unlike the first walk's
    or a token taken or refused where the first walk did otherwise.  A server serving a schema again
    meets what these walks meet: the lexer states, rows and caches the earlier walks
    made on the compiled grammar."""
    tbm: list[float] = []
    glue: list[float] = []
    differ: list[str] = []
    for k, tokens, first, consumed in walked:
        try:
            m = engine.matcher(compiled)
            session = m.session
        except Exception as e:
            raise _EngineRaised("matcher", e) from e
        sfill = session.fill_bitmask if session is not None else None
        saccept = session.accept_token if session is not None else None
        for i, t in enumerate(tokens[:len(first)]):
            e_start = _engine_s(m) if timed else 0.0
            _, _, spent = _timed_fill(m, sfill, row)
            ok = bool((int(row[0, t >> 5]) >> (t & 31)) & 1)
            if ok:
                ok, took = _timed_accept(saccept, m.accept_allowed, t)
                spent += took
            if timed:
                engine_spent = _engine_s(m) - e_start
                tbm.append(round(engine_spent, 9))
                glue.append(round(spent - engine_spent, 9))
            else:
                tbm.append(round(spent, 9))
            if blake2b(row, digest_size=8).hexdigest() != first[i]:
                differ.append(f"case {k}: the mask at token {i} is not the first walk's")
                break
            if ok != (i < consumed):
                at = vocab.decode(tokens[:i]).decode("utf-8", "replace")[-40:]
                differ.append(f"case {k}: token {i} {'taken' if ok else 'refused'} after {at!r}, "
                              f"{'refused' if ok else 'taken'} on the first walk")
                break
            if not ok:
                break
    out: dict[str, Any] = {"tbm_s": tbm}
    if timed:
        out["glue_s"] = glue
    return out, differ


DRAFT_STRIDE = 4
"""``bench --draft``: the draft masks are timed at every this many steps of a valid instance."""


def measure_draft(m: Any, ahead: Sequence[int], drafts: Sequence[int], out: dict[str, Any]) -> None:
    """Time, for each k in ``drafts``, the draft masks of the next k tokens ``ahead``
    (``m.fill_draft_bitmasks``) and the same masks made one by one: a fill, then k
    times accept + fill, then ``rollback(k)`` (what a decoder without draft masks
    does), in turns (which goes first alternates).  Appends to ``out[str(k)]``'s
    ``draft_s`` and ``seq_s``; the two must give the same rows (``mismatch`` counts
    where they do not).  Drafts longer than what is left of the instance are not timed."""
    perf = time.perf_counter
    for k in drafts:
        draft = [int(t) for t in ahead[:k]]
        if len(draft) < k:
            continue
        entry = out.setdefault(str(k), {"draft_s": [], "seq_s": [], "accepted": [], "mismatch": 0})
        a = bm.allocate(m.vocab.size, k + 1)
        b = bm.allocate(m.vocab.size, k + 1)
        # which goes first alternates: an engine's last-mask cache favours the second
        first_draft = len(entry["draft_s"]) % 2 == 0
        if first_draft:
            d = _time_draft(m, draft, a, perf)
        q, n = _time_sequential(m, draft, b, perf)
        if not first_draft:
            d = _time_draft(m, draft, a, perf)
        entry["draft_s"].append(round(d, 9))
        entry["seq_s"].append(round(q, 9))
        entry["accepted"].append(n)
        if not np.array_equal(a[: n + 1], b[: n + 1]):
            entry["mismatch"] += 1


def _time_draft(m: Any, draft: list[int], rows: np.ndarray, perf: Any) -> float:
    s = perf()
    try:
        m.fill_draft_bitmasks(draft, rows)
    except Exception as e:
        raise _EngineRaised("fill_draft_bitmasks", e) from e
    return perf() - s


def _time_sequential(m: Any, draft: list[int], rows: np.ndarray, perf: Any) -> tuple[float, int]:
    """A fill, then accept + fill per draft token while accepted, then the rollback."""
    call = "fill_bitmask"  # set outside the timed calls' own ``try`` (free until one raises)
    s = perf()
    try:
        m.fill_bitmask(rows, 0)
        n = 0
        for j, t in enumerate(draft):
            try:
                if not m.accept_token(t):
                    break
            except Exception:
                call = "accept_token"
                raise
            n += 1
            m.fill_bitmask(rows, j + 1)
        try:
            m.rollback(n)
        except Exception:
            call = "rollback"
            raise
    except Exception as e:
        raise _EngineRaised(call, e) from e
    return perf() - s, n


def _stats_of(m: Any) -> MaskStats | None:
    """``m.mask_stats()``, or None for an engine without them (a plug-in engine written
    without the bases)."""
    stats = getattr(m, "mask_stats", None)
    if stats is None:
        return None
    try:
        return stats()
    except NotImplementedError:
        return None
    except Exception as e:
        raise _EngineRaised("mask_stats", e) from e


def _engine_s(m: Any) -> float:
    """``m.engine_s``, the engine's own time so far (an exception in it is the engine's)."""
    try:
        return m.engine_s
    except Exception as e:
        raise _EngineRaised("engine_s", e) from e


def _matcher_error(m: Any) -> str | None:
    """``m.error`` (an exception in it is the engine's)."""
    try:
        return m.error
    except Exception as e:
        raise _EngineRaised("error", e) from e


class _EngineRaised(Exception):
    """An exception raised by one of the engine's calls in :func:`measure_item`: ``call``
    names the call, ``error`` is the exception.  It never leaves :func:`measure_item`,
    which records it as the engine's ``crash``."""

    def __init__(self, call: str, error: BaseException) -> None:
        super().__init__(call, error)
        self.call = call
        self.error = error


#: the innermost frames of an engine's exception kept in its record's detail
ENGINE_TRACEBACK_FRAMES = 8


def engine_failure_detail(engine: str, call: str, error: BaseException) -> str:
    """A ``crash`` record's detail for an exception raised by an engine's own call:
    ``"ENGINE.CALL raised TYPE: message"``, then the innermost
    :data:`ENGINE_TRACEBACK_FRAMES` frames of its traceback (from the harness's call
    into the engine's code), at most 4000 characters."""
    head = f"{engine}.{call} raised {type(error).__name__}"
    text = str(error)
    if text:
        head += f": {text}"
    head = head[:1500]
    frames = traceback.extract_tb(error.__traceback__)[-ENGINE_TRACEBACK_FRAMES:]
    tb = "".join(traceback.format_list(frames))
    return f"{head}\nTraceback (most recent call last):\n{tb}".rstrip()[:4000]


def _minus_work(acc: MaskStats | None, after: MaskStats | None, before: MaskStats | None) -> MaskStats | None:
    """``acc`` plus the work between two readings (None when any is unknown)."""
    if acc is None or after is None or before is None:
        return None
    return acc + (after - before)


def _add_work(total: MaskStats | None, m: Any, aside: MaskStats | None = None) -> MaskStats | None:
    """``total`` plus the work counters of matcher ``m`` (read outside the timed region),
    less ``aside`` (work the harness did on it besides the walk); None once unknown."""
    now = _stats_of(m)
    if total is None or now is None or aside is None:
        return None
    return total + (now - aside)


def _direct_run(engine: Any, spec: Any, rec: dict[str, Any]) -> Any:
    """``engine.direct_check(spec)`` with its TTFM put in the record; None (and the reason
    in the record) when the engine raised."""
    try:
        runner = engine.direct_check(spec)
    except Exception as e:  # noqa: BLE001 - informative: the record keeps its verdict
        rec["direct"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        return None
    rec["direct"] = {"ttfm_s": runner.ttfm_s, "tbm_s": [], "steps": []}
    return runner


def _direct_walk(runner: Any, tokens: list[int], rec: dict[str, Any]) -> list[float] | None:
    """The engine's direct walk of ``tokens``; None (and the reason in the record) when
    the engine raised."""
    try:
        return list(runner.walk(tokens))
    except Exception as e:  # noqa: BLE001 - informative: the record keeps its verdict
        rec["direct"] = {"error": f"{type(e).__name__}: {e}"[:500]}
        return None


# ------------------------------------------------------------------ worker --


class Worker:
    """What a worker process holds and does, whatever runs it (the local pool's
    processes, :mod:`toolkit.bench.cluster`'s Ray actors): the vocabulary, the engines
    built so far, and the measurement of one ``(engine, item)`` task."""

    def __init__(self, vocab: Any, options: Mapping[str, Mapping[str, Any]], source: str, quick: bool,
                 direct: bool = False, drafts: tuple[int, ...] = (), walks: int = 1) -> None:
        os.environ.update(_SINGLE_THREAD_ENV)
        self.vocab = vocab
        self.options = options
        self.source, self.quick, self.direct, self.drafts = source, quick, direct, tuple(drafts)
        self.walks = int(walks)
        self.engines: dict[str, Any] = {}

    def prepare(self, name: str) -> dict[str, Any] | None:
        """Build engine ``name`` unless built: its :func:`engine_info` the first time,
        else None.  A failure to build raises :class:`HarnessError` (the run stops)."""
        if name in self.engines:
            return None
        try:
            engine = get_engine(name, self.vocab, **dict(self.options.get(name, {})))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which stops the run
            raise HarnessError(f"cannot build engine {name!r}: {type(e).__name__}: {e}") from e
        _single_thread_torch()
        warm_up(engine, self.vocab)
        self.engines[name] = engine
        # the vocabulary and the engines are for good: out of the collector's sight, so
        # the collection before each item (measure_item) does not sweep them through
        # the CPU caches (for every engine alike; a server process does the same)
        gc.collect()
        gc.freeze()
        return engine_info(engine, self.options.get(name, {}))

    def measure(self, name: str, item: Item) -> dict[str, Any]:
        """The record of ``item`` on engine ``name`` (built by :meth:`prepare`)."""
        try:
            rec = measure_item(self.engines[name], self.vocab, item, source=self.source, quick=self.quick,
                               direct=self.direct, drafts=self.drafts, walks=self.walks, name=name)
        except Exception as e:  # noqa: BLE001 - an engine's exceptions are recorded by measure_item: a harness bug
            rec = {"engine": name, "item": item.name, "kind": item.kind, "status": "crash",
                   "detail": f"harness: {type(e).__name__}: {e}\n{traceback.format_exc()}"[:4000]}
        rec["engine"] = name
        return rec


def _worker_main(conn: Connection, vocab_spec: str, options: Mapping[str, Mapping[str, Any]], source: str, quick: bool,
                 direct: bool = False, drafts: tuple[int, ...] = (), walks: int = 1) -> None:
    """A benchmark worker: load the vocabulary, then serve ``(engine, item)`` tasks
    (:class:`Worker`) until told to stop."""
    serve(conn, vocab_spec, functools.partial(Worker, options=options, source=source, quick=quick, direct=direct,
                                              drafts=drafts, walks=walks))


def serve(conn: Connection, vocab_spec: str, make: Callable[[Any], Any]) -> None:
    """A worker process's loop: load the vocabulary, make the worker (``make(vocab)``:
    anything with :class:`Worker`'s ``prepare(name)`` and ``measure(name, item)``, such
    as the audit's), then serve ``(engine, item)`` tasks until told to stop."""
    os.environ.update(_SINGLE_THREAD_ENV)
    worker = make(load_vocab(vocab_spec))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed run): nothing left to do
            return
        if msg is None:
            return
        name, item = msg
        try:
            info = worker.prepare(name)
        except HarnessError as e:
            conn.send(("fatal", str(e)))
            return
        if info is not None:
            conn.send(("engine", name, info))
        conn.send(("start", name, item.name))
        conn.send(("done", worker.measure(name, item)))


def warm_up(engine: Any, vocab: Any) -> None:
    """Compile a one-symbol grammar, and a one-keyword schema for an engine with its
    own schema compiler, and fill a first mask: untimed, so that one-time library
    setup (Lark's meta-grammar, ~0.15 s; an engine's first-use initialization) is no
    item's TTFM.  A failure is ignored: the engine's items report their own.  It runs
    while the engine is built, so a crash there is the item's ``crash`` and a hang
    meets the engine-build limit (a :class:`HarnessError`)."""

    specs: list[Any] = [Grammar.from_lark('start: "a"\n')]
    if "json_schema" in engine.native_inputs:
        specs.append({"type": "integer"})
    for spec in specs:
        try:
            engine.matcher(engine.compile(spec)).fill_bitmask(bm.allocate(vocab.size))
        except Exception:  # noqa: BLE001, S112 - see the docstring
            continue
    clear_toolkit_caches()
    engine.clear_memo()  # the engine's own memo starts empty too (toolkit.core.memo)


def _single_thread_torch() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def engine_info(engine: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a run records of an engine: its ``describe()`` (version, options); the
    options it was built with where it gives none; its capabilities."""
    info = dict(engine.describe())
    info.setdefault("options", dict(options))
    cap = getattr(engine, "capabilities", None)
    if cap is not None and hasattr(cap, "as_dict"):
        info.setdefault("capabilities", cap.as_dict())
    return info


@dataclass
class _Slot:
    """One worker process and what it is doing."""

    proc: Any = None
    conn: Connection | None = None
    ready: bool = False
    task: tuple[str, Item] | None = None
    started: float | None = None  # when the engine began the current item
    sent: float = 0.0  # when the task (or the worker start) was sent
    info: dict[str, Any] = field(default_factory=dict)


def failed_record(name: str, item: Item, status: str, detail: str, wall_s: float) -> dict[str, Any]:
    """The benchmark record of a task its worker could not finish (killed past the
    timeout or the memory limit, or dead): what :func:`measure_item` records, empty."""
    return {"engine": name, "item": item.name, "kind": item.kind, "status": status, "detail": detail,
            "compile_s": None, "ttfm_s": None, "memory_bytes": None, "tbm_s": [], "allowed": [],
            "sliced": [], "cases": [], "wall_s": wall_s}


class WorkerPool:
    """Worker processes on this machine, each serving ``(engine, item)`` tasks, with the
    per-task timeout and memory limit enforced from outside (a killed worker loses only
    its task).  By default the workers are the benchmark's (:class:`Worker`); ``worker``
    (a picklable ``make(vocab)``, see :func:`serve`) and ``failed`` (the record of a task
    that did not finish, :func:`failed_record`'s signature) make them another job's, such
    as the audit's."""

    def __init__(self, jobs: int, vocab_spec: str, options: Mapping[str, Mapping[str, Any]], source: str,
                 quick: bool, timeout: float, memory_limit: float | None, *,
                 startup_timeout: float = _STARTUP_TIMEOUT, target: Any = None, direct: bool = False,
                 drafts: Sequence[int] = (), walks: int = 1, worker: Callable[[Any], Any] | None = None,
                 failed: Callable[[str, Item, str, str, float], dict[str, Any]] = failed_record) -> None:
        self.ctx = mp.get_context("spawn")
        self.target = _worker_main if target is None else target
        self.startup_timeout = startup_timeout
        self.args = (vocab_spec, {k: dict(v) for k, v in options.items()}, source, quick)
        if direct or drafts or walks > 1:
            self.args += (direct, tuple(drafts), int(walks))
        if worker is not None:
            self.target, self.args = serve, (vocab_spec, worker)
        self.failed = failed
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.slots = [_Slot() for _ in range(jobs)]
        self.engine_info: dict[str, dict[str, Any]] = {}

    def _start(self, slot: _Slot) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=self.target, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        slot.proc, slot.conn, slot.ready, slot.task, slot.started = proc, parent, False, None, None
        slot.sent = time.monotonic()

    def _kill(self, slot: _Slot) -> None:
        if slot.proc is not None:
            if slot.proc.is_alive():
                slot.proc.kill()
            slot.proc.join(5)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc = slot.conn = None
        slot.ready = False
        slot.task = None
        slot.started = None

    def close(self) -> None:
        for slot in self.slots:
            if slot.conn is not None and slot.proc is not None and slot.proc.is_alive() and slot.task is None:
                try:
                    slot.conn.send(None)
                except OSError:
                    pass
            if slot.proc is not None:
                slot.proc.join(2)
            self._kill(slot)

    def _failed(self, slot: _Slot, status: str, detail: str) -> dict[str, Any]:
        name, item = slot.task  # type: ignore[misc]
        rec = self.failed(name, item, status, detail, time.monotonic() - (slot.started or slot.sent))
        self._kill(slot)
        return rec

    def run(self, tasks: Iterable[tuple[str, Item]]) -> Iterable[dict[str, Any]]:
        """Run every task; yield each record as it finishes (in completion order)."""
        pending = list(tasks)
        pending.reverse()
        while pending or any(s.task is not None for s in self.slots):
            for slot in self.slots:
                if slot.proc is None and (pending or slot.task is not None):
                    self._start(slot)
                if slot.ready and slot.task is None and pending:
                    slot.task = pending.pop()
                    slot.started = None
                    slot.sent = time.monotonic()
                    slot.conn.send(slot.task)  # type: ignore[union-attr]
            conns = [s.conn for s in self.slots if s.conn is not None]
            for conn in wait(conns, timeout=_POLL):
                slot = next(s for s in self.slots if s.conn is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    slot.proc.join(5)  # type: ignore[union-attr]
                    code = slot.proc.exitcode  # type: ignore[union-attr]
                    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                    if slot.task is None:
                        raise HarnessError(f"a worker died while starting ({how}); see the messages above") from None
                    yield self._failed(slot, "crash", f"worker died ({how})")
                    continue
                kind = msg[0]
                if kind == "ready":
                    slot.ready = True
                elif kind == "engine":
                    self.engine_info[msg[1]] = msg[2]
                elif kind == "start":
                    slot.started = time.monotonic()
                elif kind == "fatal":
                    self.close()
                    raise HarnessError(msg[1])
                elif kind == "done":
                    slot.task = None
                    slot.started = None
                    yield msg[1]
            now = time.monotonic()
            for slot in self.slots:
                if slot.proc is None:
                    continue
                starting = not slot.ready or (slot.task is not None and slot.started is None)
                if starting and now - slot.sent > self.startup_timeout:
                    # loading the vocabulary or building an engine: not an item's fault
                    what = "start" if slot.task is None else f"build engine {slot.task[0]!r}"
                    self.close()
                    raise HarnessError(f"a worker took over {self.startup_timeout:g} s to {what}")
                if slot.task is None:
                    continue
                if slot.started is not None and now - slot.started > self.timeout:
                    yield self._failed(slot, "timeout", f"over the {self.timeout:g} s limit")
                    continue
                if self.memory_limit is not None and slot.started is not None:
                    rss = _rss(slot.proc.pid)
                    if rss > self.memory_limit:
                        yield self._failed(slot, "crash", f"memory limit: {rss / 2**30:.1f} GiB resident > {self.memory_limit / 2**30:.1f} GiB")


def _rss(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001 - a process that just ended has no memory
        return 0.0


# ---------------------------------------------------------------- summary --


#: the statuses whose reasons :func:`summary_lines` quotes (the engine did not get to
#: measure the item; a validation verdict is a measurement, its detail in the records)
REASON_STATUSES = ("compile_error", "crash", "timeout")


def _detail(rec: Mapping[str, Any]) -> str:
    detail = rec.get("detail")
    return detail.strip() if isinstance(detail, str) else ""  # a DataFrame's missing detail is NaN


def _one_line(text: str, width: int) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 3] + "..."


def summary_lines(records: Iterable[Mapping[str, Any]], engines: Sequence[str] | None = None, *,
                  reasons: int = 3, width: int = 160) -> list[str]:
    """What ``masklab bench`` prints at the end: per engine (in the order of
    ``engines``, then any other engine of ``records`` by name), a line with its count
    of items per status (every one of :data:`STATUSES`, then any other status), e.g.
    ``"llguidance: 71 items: 69 passing, 2 compile_error, 0 timeout, 0 crash, ..."``;
    then how many items its compiles left keywords unenforced in, by keyword (when
    any: ``rec["unenforced"]``); then, for each of :data:`REASON_STATUSES`, the first
    ``reasons`` distinct reasons
    (the first line of the detail, one line of at most ``width`` characters with the
    item's name) and how many more there are."""
    by_engine: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_engine.setdefault(str(r["engine"]), []).append(r)
    order = [e for e in dict.fromkeys(engines or ()) if e in by_engine]
    order += sorted(set(by_engine) - set(order))
    lines: list[str] = []
    for name in order:
        recs = by_engine[name]
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for r in recs:
            status = str(r.get("status") or "unknown")
            counts[status] = counts.get(status, 0) + 1
        lines.append(f"{name}: {len(recs)} items: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        loose = [r["unenforced"] for r in recs if isinstance(r.get("unenforced"), list) and r["unenforced"]]
        if loose:  # what the engine's compiles said they left out (issue 44)
            kw = collections.Counter(str(e.get("keyword") or "(none named)") for u in loose for e in u)
            lines.append(f"  {len(loose)} item(s) compiled with keywords left unenforced: "
                         + ", ".join(f"{k} {n}" for k, n in kw.most_common(6)) + " (rec['unenforced'])")
        for status in REASON_STATUSES:
            seen: dict[str, str] = {}  # reason -> first item
            for r in recs:
                if r.get("status") == status:
                    detail = _detail(r)
                    reason = detail.splitlines()[0] if detail else "(no detail)"
                    seen.setdefault(reason, str(r["item"]))
            for reason, item in list(seen.items())[:reasons]:
                lines.append("  " + _one_line(f"{status} {item}: {reason}", width - 2))
            if len(seen) > reasons:
                lines.append(f"  {status}: {len(seen) - reasons} more distinct reason(s) in records.jsonl")
        harness = sum(_detail(r).startswith("harness: ") for r in recs if r.get("status") == "crash")
        if harness:
            lines.append(f"  {harness} crash(es) are the harness's own bug, not {name}'s (detail 'harness: ...')")
    return lines


# -------------------------------------------------------------- run files --


def records_file(folder: str | Path) -> Path:
    """A run folder's records: ``records.jsonl``, or ``records.jsonl.gz`` when only that
    is there (an archived run, as committed under ``results/``)."""
    folder = Path(folder)
    plain, packed = folder / "records.jsonl", folder / "records.jsonl.gz"
    return packed if packed.exists() and not plain.exists() else plain


def load_records(path: str | Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a records file (or of the run folder holding one) and how many
    lines were skipped: a line that is not a JSON record with an engine and an item
    (the truncated last line of a killed run) is counted, not read."""
    path = Path(path)
    if path.is_dir():
        path = records_file(path)
    if not path.exists():
        return [], 0
    out: list[dict[str, Any]] = []
    skipped = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(rec, dict) and "engine" in rec and "item" in rec:
                out.append(rec)
            else:
                skipped += 1
    return out, skipped


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``records.jsonl`` (or of the run folder holding it); see :func:`load_records`."""
    return load_records(path)[0]


def _repair_tail(path: Path) -> None:
    """Cut a partial last line (no newline) so appended records start on their own line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        # find the last newline
        pos = size
        chunk = 65536
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            data = f.read(pos - start)
            i = data.rfind(b"\n")
            if i >= 0:
                f.truncate(start + i + 1)
                return
            pos = start
        f.truncate(0)


def machine_info() -> dict[str, Any]:
    """The machine a run measures: CPU model, cores, memory, Python, GPU (if any)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = psutil.virtual_memory().total / 2**30
    except Exception:  # noqa: BLE001
        mem = None
    gpu = None
    if shutil.which("nvidia-smi"):
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            gpu = None
    return {
        "platform": platform.platform(),
        "processor": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gb": None if mem is None else round(mem, 1),
        "python": platform.python_version(),
        "gpu": gpu,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _check_resume(meta: dict[str, Any], old: dict[str, Any], options: Mapping[str, Mapping[str, Any]]) -> None:
    for key in ("vocab", "data", "source", "quick", "direct_check", "drafts", "walks"):
        a, b = old.get(key), meta.get(key)
        if key == "vocab":
            a, b = (a or {}).get("spec"), (b or {}).get("spec")
        elif key == "direct_check":  # runs from before the option had none
            a, b = bool(a), bool(b)
        elif key == "drafts":
            a, b = list(a or []), list(b or [])
        elif key == "walks":  # runs from before the option walked once
            a, b = int(a or 1), int(b or 1)
        if a != b:
            raise HarnessError(
                f"the output folder holds a run with {key}={a!r}, this one has {key}={b!r}; "
                "resume with the same settings or choose another --out"
            )
    for name, info in (old.get("engines") or {}).items():
        if name in options and info.get("requested_options", {}) != dict(options[name]):
            raise HarnessError(
                f"engine {name!r} ran with options {info.get('requested_options')} in this folder, "
                f"now {dict(options[name])}; choose another --out"
            )


# ----------------------------------------------------------------- the run --


def select_items(data: str | Path | None, limit: int | None = None, seed: int | None = None,
                 vocab: str | None = None, *, tests: bool = False, schemas: bool = False, skip_bad: bool = False,
                 command: str = "this command") -> list[Item]:
    """The items of ``data`` (default: the embedded datasets), shuffled with ``seed``
    when given, then the first ``limit``; item names must be unique.  ``vocab`` (a
    vocabulary's name): items written for another vocabulary (:meth:`Item.fits`) are
    left out, and a note says which.  ``tests`` / ``schemas``: an item without test
    instances / a schema its draft's meta-schema rejects is a
    :class:`~toolkit.bench.datasets.DatasetError` naming ``command``, or, with
    ``skip_bad``, left out (the next items fill the ``limit``):
    :func:`~toolkit.bench.datasets.usable_items`."""
    source = Path(data) if data is not None else embedded_dir()
    items = list(iter_items(source))
    if vocab is not None:
        other = [i.name for i in items if not i.fits(vocab)]
        if other:
            print(f"note: {len(other)} item(s) written for another vocabulary left out on {vocab}: "
                  f"{', '.join(other[:5])}", file=sys.stderr)
            items = [i for i in items if i.fits(vocab)]
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise HarnessError(f"item names must be unique in {source}; repeated: {', '.join(dup[:5])}")
    if seed is not None:
        random.Random(seed).shuffle(items)
    if tests or schemas:
        return usable_items(items, None if limit is None else int(limit), tests=tests, schemas=schemas,
                            skip=skip_bad, command=command)
    if limit is not None:
        items = items[: int(limit)]
    return items


@locks_run_folder("out")
def run_bench(
    engines: Sequence[str],
    data: str | Path | None = None,
    *,
    vocab: str = "tekken",
    out: str | Path = "results/bench",
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 1,
    seed: int | None = None,
    quick: bool = False,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    source: str = "native",
    memory_limit_gb: float | None = None,
    progress: bool = True,
    command: str | None = None,
    direct_check: bool = False,
    drafts: Sequence[int] = (),
    walks: int = 1,
    backend: str = "local",
    address: str | None = None,
    axes: Mapping[str, str] | None = None,
    meta_file: str = "run.json",
    skip_bad_items: bool = False,
) -> Any:
    """Run ``engines`` on the items of ``data``; returns a DataFrame of the records.

    ``data``: a MaskBench-format file or folder (searched recursively; default the
    embedded ``datasets/``).  ``vocab``: a :func:`~toolkit.core.vocab.load_vocab` spec.
    ``out``: the run folder (records appended; an existing run resumes).  ``limit``:
    the first N items (after a shuffle with ``seed``, when given).  ``timeout``: seconds
    per (engine, item), compile and instances together.  ``jobs``: workers side by
    side.  ``quick``: at most :data:`QUICK_CASES` valid and invalid instances per item.
    ``options``: per engine name, keyword options for its factory.  ``source``:
    ``"native"`` or ``"grammar"`` (see the module doc).  ``memory_limit_gb``: resident
    memory per worker before it is killed (default 80% of RAM / jobs).  ``direct_check``:
    each peer is also called directly through its own API on the same walks
    (:mod:`toolkit.report.direct`).  ``drafts``: draft lengths whose masks are timed
    against sequential steps (:func:`measure_draft`).  ``walks``: the valid instances
    walked this many times on each compile, the later walks on a warm grammar (a server's
    later requests), recorded apart (:func:`measure_item`).  ``backend``: ``"local"`` (worker
    processes on this machine) or ``"ray"`` (Ray actors, :mod:`toolkit.bench.cluster`;
    ``address`` joins a running cluster, None starts a local instance of ``jobs`` CPUs):
    the same records either way.  ``axes`` (a sweep's grid cell, :mod:`toolkit.bench.sweep`):
    written into every record (``rec["axes"]``) and part of what a resume matches, so the
    cells of a grid share one ``records.jsonl``; ``meta_file``: where in ``out`` the
    run's metadata goes (a sweep keeps one per cell).

    The run holds ``out``'s lock (:mod:`toolkit.bench.runlock`): a second run on the
    same folder is a :class:`HarnessError` at once.  An item without test instances, or
    whose schema its draft's meta-schema rejects, is a
    :class:`~toolkit.bench.datasets.DatasetError` before anything runs, unless
    ``skip_bad_items`` leaves such items out (:func:`select_items`).
    """


    if source not in ("native", "grammar"):
        raise HarnessError(f"source must be 'native' or 'grammar', not {source!r}")
    if backend not in BACKENDS:
        raise HarnessError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if address is not None and backend != "ray":
        raise HarnessError("an address is for the ray backend (--backend ray)")
    if jobs < 1:
        raise HarnessError(f"jobs must be at least 1, got {jobs}")
    if timeout <= 0:
        raise HarnessError(f"timeout must be positive, got {timeout}")
    if limit is not None and limit < 1:
        raise HarnessError(f"limit must be at least 1, got {limit}")
    if int(walks) < 1:
        raise HarnessError(f"walks must be at least 1, got {walks}")
    engines = list(dict.fromkeys(engines))
    if not engines:
        raise HarnessError("no engines given")
    for name in engines:
        try:
            engine_factory(name)
        except (ValueError, ImportError) as e:
            raise HarnessError(str(e)) from e
    options = {k: dict(v) for k, v in (options or {}).items()}
    unknown = sorted(set(options) - set(engines))
    if unknown:
        raise HarnessError(f"options given for engines not in the run: {', '.join(unknown)}")
    voc = load_vocab(vocab)
    items = select_items(data, limit, seed, voc.name, tests=True, schemas=True, skip_bad=skip_bad_items,
                         command="masklab bench")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    run_path = out / meta_file
    run_path.parent.mkdir(parents=True, exist_ok=True)
    cell = dict(axes) if axes else None
    if memory_limit_gb is None:
        try:
            memory_limit_gb = 0.8 * psutil.virtual_memory().total / 2**30 / jobs
        except ImportError:
            memory_limit_gb = None
    meta: dict[str, Any] = {
        "masklab_version": masklab_version(),
        "command": command or f"run_bench({engines!r}, {str(data)!r})",
        "started": _now(),
        "finished": None,
        "vocab": {"spec": vocab, "name": voc.name, "size": voc.size, "text_tokens": int(len(voc.text_token_ids()))},
        "data": str(data) if data is not None else "datasets (embedded)",
        "items": len(items),
        "limit": limit,
        "seed": seed,
        "timeout_s": float(timeout),
        "jobs": int(jobs),
        "quick": bool(quick),
        "source": source,
        "direct_check": bool(direct_check),
        "drafts": sorted(set(int(k) for k in drafts)),
        "walks": int(walks),
        "backend": backend,
        "address": address,
        "axes": cell,
        "skip_bad_items": bool(skip_bad_items),
        "memory_limit_gb": None if memory_limit_gb is None else round(memory_limit_gb, 2),
        "engines": {},
        "machine": machine_info(),
    }
    if run_path.exists():
        old = json.loads(run_path.read_text(encoding="utf-8"))
        _check_resume(meta, old, options)
        meta["engines"] = dict(old.get("engines") or {})
        meta["started"] = old.get("started", meta["started"])
        meta["resumed"] = [*old.get("resumed", []), _now()]
    _repair_tail(records_path)
    done = {(r["engine"], r["item"]) for r in read_records(records_path) if r.get("axes") == cell}
    tasks = [(name, item) for item in items for name in engines if (name, item.name) not in done]

    def save_meta() -> None:
        tmp = run_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        tmp.replace(run_path)

    save_meta()
    limit_bytes = None if memory_limit_gb is None else memory_limit_gb * 2**30
    if backend == "ray":
        pool: Any = RayPool(Worker, jobs, vocab, items, options, source, quick, float(timeout), limit_bytes,
                            address=address, direct=direct_check, drafts=meta["drafts"], walks=meta["walks"],
                            failed=failed_record, env=_SINGLE_THREAD_ENV)
    else:
        pool = WorkerPool(jobs, vocab, options, source, quick, float(timeout), limit_bytes, direct=direct_check,
                     drafts=meta["drafts"], walks=meta["walks"])
    bar = _progress(len(tasks), progress)
    errors = 0
    try:
        with records_path.open("a", encoding="utf-8") as f:
            for rec in pool.run(tasks):
                if cell is not None:
                    rec["axes"] = cell
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
                f.flush()
                if rec["status"] != "passing":
                    errors += 1
                for name, info in pool.engine_info.items():
                    if name not in meta["engines"]:
                        meta["engines"][name] = {**info, "requested_options": options.get(name, {})}
                        save_meta()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"not passing {errors}", refresh=False)
    finally:
        pool.close()
        if bar is not None:
            bar.close()
    meta["finished"] = _now()
    save_meta()
    wanted = {(n, i.name) for i in items for n in engines}
    recs = [r for r in read_records(records_path) if (r["engine"], r["item"]) in wanted and r.get("axes") == cell]
    return pd.DataFrame(recs)


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None

    return tqdm(total=total, unit="run", desc="bench", dynamic_ncols=True, smoothing=0.05)
