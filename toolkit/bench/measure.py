"""One (item, engine) pair measured in-process: the record :func:`measure_item` makes.

For each (item, engine) pair, a worker process (:mod:`toolkit.bench.pool`):

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

The item's ``status`` is MaskBench's (:data:`toolkit.bench.records.STATUSES`):

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
first-use initialization) lands on no item.  A record of a compiled item holds
``unenforced``: what the compile said it left out (:func:`unenforced_of`; a peer's
warnings and documented omissions, always empty for masklab's strategies).
"""

from __future__ import annotations

import functools
import gc
import json
import sys
import time
import traceback
import zlib
from collections.abc import Mapping, Sequence
from hashlib import blake2b
from typing import Any

import numpy as np

from toolkit.automata.regex import clear_cache
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.protocol import MaskStats
from toolkit.data.datasets import Case, Item
from toolkit.grammar.inputs import engine_input, read, wrap
from toolkit.grammar.ir import Grammar
from toolkit.grammar.special import encode_with_specials

__all__ = [
    "measure_item",
    "measure_draft",
    "engine_failure_detail",
    "clear_toolkit_caches",
    "spec_for",
    "encode_case",
    "unenforced_of",
    "warm_up",
    "DRAFT_STRIDE",
    "ENGINE_TRACEBACK_FRAMES",
    "QUICK_CASES",
]

#: ``quick``: at most this many valid and this many invalid instances per item
QUICK_CASES = 3


# ------------------------------------------------------------ what an item is --


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
    if item.kind != "schema" and "<" in text:  # (a structural tag is a JSON object: its text is the key)
        spec = item.spec if isinstance(item.spec, str) else json.dumps(item.spec, sort_keys=True)
        specials = _special_marks(item.kind, spec)
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


def unenforced_of(compiled: Any) -> list[dict[str, Any]]:
    """What a compile says it left unenforced (``compiled.unenforced``: a list of
    ``{"keyword", "message", "pointer"?, "count"?}``, :mod:`strategies.peers`), as a
    record holds it: masklab's own strategies refuse what they cannot enforce, so theirs
    is empty, as is that of an engine without the attribute."""
    entries = getattr(compiled, "unenforced", None) or ()
    return [dict(e) for e in entries if isinstance(e, Mapping)]


def warm_up(engine: Any, vocab: Any) -> None:
    """Compile a one-symbol grammar, and a one-keyword schema for an engine with its
    own schema compiler, and fill a first mask: untimed, so that one-time library
    setup (Lark's meta-grammar, ~0.15 s; an engine's first-use initialization) is no
    item's TTFM.  A failure is ignored: the engine's items report their own.  It runs
    while the engine is built, so a crash there is the item's ``crash`` and a hang
    meets the engine-build limit (a :class:`~toolkit.core.errors.HarnessError`)."""

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


# ------------------------------------------------------------- one item --


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
    rec = _new_record(engine.name if name is None else name, item, vocab.size)
    t_start = time.perf_counter()
    run = _Measure(engine, vocab, item, rec, source, quick, drafts)
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        if run.start(direct):  # False: the engine refused the item (the record says why)
            run.walk_cases()
            run.judge(walks)
        return rec
    except _EngineRaised as raised:  # the engine's bug: the record keeps what was measured before it
        if run.glue:
            rec["glue_s"] = run.glue
        rec["status"] = "crash"
        rec["detail"] = engine_failure_detail(rec["engine"], raised.call, raised.error)
        return rec
    finally:
        if gc_was:
            gc.enable()
        rec["wall_s"] = time.perf_counter() - t_start


def _new_record(name: str, item: Item, vocab_size: int) -> dict[str, Any]:
    """A record before anything is measured."""
    return {
        "engine": name,
        "item": item.name,
        "kind": item.kind,
        "status": "passing",
        "detail": "",
        "compile_s": None,
        "ttfm_s": None,
        "ttfm_wall_s": None,
        "memory_bytes": None,
        "vocab_size": vocab_size,
        "tbm_s": [],
        "allowed": [],
        "sliced": [],
        "cases": [],
        "wall_s": 0.0,
    }


class _Measure:
    """What :func:`measure_item` keeps while it measures one item: the compiled item,
    whether the engine times its own calls (``timed``), the mask row, the engine's
    direct check (``runner``), and what the walks gave so far."""

    def __init__(self, engine: Any, vocab: Any, item: Item, rec: dict[str, Any], source: str, quick: bool,
                 drafts: Sequence[int]) -> None:
        self.engine, self.vocab, self.item, self.rec = engine, vocab, item, rec
        self.source, self.quick, self.drafts = source, quick, drafts
        self.row = bm.allocate(vocab.size)
        self.glue: list[float] = []  # per mask step, the adapter's time besides the engine's (timed engines)
        self.runner: Any = None
        self.compiled: Any = None
        self.timed = False
        self.failures: list[str] = []
        self.work: MaskStats | None = MaskStats()
        self.walked: list[tuple[int, list[int], list[str], int]] = []  # (case, tokens, digests, consumed): valid walks

    # -- the compile and the first mask --

    def start(self, direct: bool) -> bool:
        """The compile, the first matcher and its first mask (``compile_s``, ``ttfm_s``),
        and the engine's direct check when asked for; False when the record is done
        (the engine refused the item)."""
        engine, item = self.engine, self.item
        # the direct check's compile goes first on half the items (by name), after on the rest
        can_direct = direct and engine.direct_check is not None
        direct_first = can_direct and zlib.crc32(item.name.encode()) % 2 == 0
        if direct_first:
            try:
                direct_spec = spec_for(engine, item, self.source)
            except MasklabError:  # the item cannot be read: the compile below says so
                direct_first = can_direct = False
            else:
                self.runner = _direct_run(engine, direct_spec, self.rec)
        clear_toolkit_caches()
        first = self._first_mask()
        if first is None or not self._record_ttfm(*first[1:]):
            return False
        self._record_compiled()
        if can_direct and not direct_first:
            self.runner = _direct_run(engine, first[0], self.rec)
        return True

    def _first_mask(self) -> tuple[Any, Any, float, float, float] | None:
        """``(spec, matcher, t0, t1, t2)``: compiled (t0 to t1) and the first mask filled
        (to t2); None when the engine refused (the record's ``compile_error``)."""
        engine, perf = self.engine, time.perf_counter
        call: str | None = None  # the engine call under way (None: the harness's own code)
        t0 = perf()
        try:
            spec = spec_for(engine, self.item, self.source)  # a grammar item's Grammar counts in the compile
            call = "compile"
            compiled = engine.compile(spec)
            t1 = perf()
            call = "matcher"
            m = engine.matcher(compiled)
            call = "fill_bitmask"
            m.fill_bitmask(self.row)
            t2 = perf()
        except MasklabError as e:  # a refusal (the peers' own errors come as PeerError): a compile error
            self.rec["status"] = "compile_error"
            self.rec["detail"] = f"{type(e).__name__}: {e}"[:2000]
            return None
        except Exception as e:
            if call is None:
                raise  # the toolkit's reading of the item: the harness's fault, not the engine's
            raise _EngineRaised(call, e) from e
        self.compiled = compiled
        return spec, m, t0, t1, t2

    def _record_ttfm(self, m: Any, t0: float, t1: float, t2: float) -> bool:
        """The compile and TTFM figures (the engine's own where it times its calls);
        False when the first mask left the matcher in its error state (a compile error)."""
        rec, compiled = self.rec, self.compiled
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
        self.timed = timed
        rec["ttfm_wall_s"] = t2 - t0
        if m_error is not None:
            rec["status"] = "compile_error"
            rec["detail"] = f"first mask: {m_error}"[:2000]
            return False
        return True

    def _record_compiled(self) -> None:
        """The compiled form's memory and its own figures (informative only)."""
        try:
            self.rec["memory_bytes"] = int(self.compiled.memory_bytes())
        except Exception:  # noqa: BLE001 - memory is informative only
            self.rec["memory_bytes"] = None
        try:  # an engine's own figures (states, build phases), informative only
            stats = dict(self.compiled.stats())
        except Exception:  # noqa: BLE001
            stats = {}
        if stats:
            self.rec["compiled_stats"] = stats

    # -- the walks --

    def walk_cases(self) -> None:
        """Walk every instance (``quick``: a few) on a fresh matcher each: the TBM, the
        masks' popcounts and digests, each case's verdict, the work counters."""
        rec, vocab, item = self.rec, self.vocab, self.item
        eos = vocab.eos_ids[0]
        for k, case in enumerate(_select_cases(item.cases, self.quick)):
            try:
                tokens = encode_case(vocab, item, case.text) + [eos]
            except MasklabError as e:
                # not the engine's fault either way: the case is left out of the verdict
                rec["cases"].append({"valid": case.valid, "ok": None, "tokens": 0, "consumed": 0, "error": str(e)})
                self.failures.append(f"case {k} skipped, cannot tokenize: {e}")
                continue
            self._walk_case(k, case, tokens)
        if self.timed:
            rec["glue_s"] = self.glue
        if self.work is not None:
            rec["work"] = self.work.as_dict()

    def _walk_case(self, k: int, case: Case, tokens: list[int]) -> None:
        """Case ``k``'s walk, its entry in ``rec["cases"]`` and its failure, if any; the
        direct check's walk of the same tokens before it (even cases) or after (odd)."""
        rec = self.rec
        direct_walk: list[float] | None = None
        if self.runner is not None and case.valid and k % 2 == 0:  # the direct walk first on even cases
            direct_walk = _direct_walk(self.runner, tokens, rec)
            self.runner = self.runner if direct_walk is not None else None
        m, consumed, digests, draft_work = self._walk_steps(case, tokens)
        accepted = consumed == len(tokens)
        entry: dict[str, Any] = {"valid": case.valid, "ok": accepted == case.valid, "tokens": len(tokens), "consumed": consumed}
        if case.valid:
            entry["digests"] = digests
            self.walked.append((k, tokens, digests, consumed))
            self.work = _add_work(self.work, m, draft_work)
            if self.runner is not None and k % 2 == 1:  # ... and after masklab's on odd ones
                direct_walk = _direct_walk(self.runner, tokens, rec)
                self.runner = self.runner if direct_walk is not None else None
            if self.runner is not None and direct_walk is not None:
                rec["direct"]["tbm_s"] += direct_walk
                rec["direct"]["steps"].append(len(direct_walk))
        m_error = _matcher_error(m)
        if m_error is not None:
            entry["error"] = m_error
        rec["cases"].append(entry)
        if accepted != case.valid:
            if case.valid:
                at = self.vocab.decode(tokens[:consumed]).decode("utf-8", "replace")[-40:]
                self.failures.append(f"case {k} (valid) rejected at token {consumed}/{len(tokens)} after {at!r}"
                                     + (f": {m_error}" if m_error else ""))
            else:
                self.failures.append(f"case {k} (invalid) accepted")

    def _walk_steps(self, case: Case, tokens: list[int]) -> tuple[Any, int, list[str], MaskStats | None]:
        """One walk of ``tokens`` on a fresh matcher, fill + accept per step, until a
        token is refused: ``(matcher, tokens taken, mask digests, the draft masks' work)``;
        a valid case's steps are timed into the record."""
        try:
            m = self.engine.matcher(self.compiled)
            # ours: the C session's own calls (MaskInfo is not built); a BaseMatcher: the
            # protocol's calls, of which ``engine_s`` is the engine's part when it is timed
            session = m.session
            sfill = session.fill_bitmask if session is not None else None
            saccept = session.accept_token if session is not None else None
            maccept = m.accept_allowed  # the bit is checked first
        except Exception as e:
            raise _EngineRaised("matcher", e) from e
        rec, row, timed, drafts, glue = self.rec, self.row, self.timed, self.drafts, self.glue
        tbm, allowed, sliced = rec["tbm_s"], rec["allowed"], rec["sliced"]
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
                _add_time(tbm, glue, spent, _engine_s(m) - e_start if timed else None)
                allowed.append(n_allowed)
                sliced.append(bool(is_sliced))
                digests.append(blake2b(row, digest_size=8).hexdigest())
            if not ok:
                break
            consumed += 1
        return m, consumed, digests, draft_work

    def judge(self, walks: int) -> None:
        """The later walks (``walks`` > 1), then the record's status and detail."""
        rec = self.rec
        walk_failed = False
        for w in range(2, walks + 1):
            later, differ = _walk_again(self.engine, self.compiled, self.walked, self.row, self.timed, self.vocab)
            rec.setdefault("walks", []).append(later)
            self.failures += [f"walk {w}: {d}" for d in differ]
            walk_failed |= bool(differ)
        if walk_failed or any(c["valid"] and c["ok"] is False for c in rec["cases"]):
            rec["status"] = "validation_error"
        elif any(not c["valid"] and c["ok"] is False for c in rec["cases"]):
            rec["status"] = "invalidation_error"
        rec["detail"] = "; ".join(self.failures)[:2000]

# ------------------------------------------------------ the engine's calls --


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
            _add_time(tbm, glue, spent, _engine_s(m) - e_start if timed else None)
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


def _add_time(tbm: list[float], glue: list[float], spent: float, engine_spent: float | None) -> None:
    """One step's TBM: the engine's own seconds where it times them (the rest of
    ``spent`` is glue), else all of ``spent``."""
    if engine_spent is None:
        tbm.append(round(spent, 9))
    else:
        tbm.append(round(engine_spent, 9))
        glue.append(round(spent - engine_spent, 9))


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

