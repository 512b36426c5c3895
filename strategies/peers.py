"""The production engines behind the :class:`~toolkit.core.protocol.MaskEngine` protocol.

``peer:llguidance``, ``peer:xgrammar`` and ``peer:outlines-core`` adapt the PyPI
packages (the optional ``[peers]`` extra) to the same :class:`~toolkit.core.vocab.Vocabulary`
as every masklab strategy, so their masks compare bit for bit with ours:

* **llguidance**: an ``LLTokenizer`` built from the token bytes (special tokens by
  name, listed as special; padding ids empty);
* **xgrammar**: a ``TokenizerInfo`` with ``VocabType.RAW`` bytes (special and padding
  ids empty, which xgrammar treats as special), the vocabulary's EOS ids as stop tokens;
* **outlines-core**: a ``Vocabulary`` of the text tokens only (ids grouped by bytes).

``compile`` takes either

* a JSON schema (a ``dict`` or ``bool``, or a JSON string wrapped in
  :class:`JsonSchemaText`): compiled **the way the engine ships**, by its own schema
  compiler (llguidance's ``%json``, xgrammar's ``compile_json_schema``,
  outlines-core's ``build_regex_from_schema``); or
* a :class:`~toolkit.grammar.Grammar`: the *same grammar* in every engine, through
  :meth:`Grammar.to_lark` (llguidance, xgrammar's Lark front end; boolean terminals
  are written as one plain regex for xgrammar, which has no ``&``/``~``) or
  :meth:`Grammar.to_regex` (outlines-core; regular grammars only, a grammar built by
  :meth:`Grammar.from_regex` gives back its pattern).

A Grammar with ``ignore`` terminals allows ignored text before its first terminal
too; llguidance and xgrammar refuse that by default, so the adapters switch on their
``allow_initial_skip`` grammar option (Lark ``%llguidance {...}`` and
``%grammar_options {...}``).  What still differs from the Grammar's language is the
engines' own and is documented in ``tests/test_peers.py`` (llguidance lexes greedily
and allows ignored text only where another lexeme may follow; its own JSON Schema
compiler leaves U+007F, DEL, out of a string's unescaped characters, which JSON allows).

EOS, special and padding ids follow the protocol, not the engine: each adapter
clears every non-text bit the engine set and lets :class:`~strategies._base.BaseMatcher`
allow the vocabulary's EOS ids exactly where the engine says the input is complete.
EOS is never passed to the engine, so termination is the protocol's too.

Engines run single-threaded (``max_threads=1`` for xgrammar's compiler; the harness
sets ``RAYON_NUM_THREADS=1`` for llguidance's workers), except in a batch: the batch
of ``peer:llguidance`` accepts with ``LLExecutor.consume_token_par`` and fills with
``LLExecutor.unsafe_compute_mask_ptr``, that of ``peer:xgrammar`` with
``BatchGrammarMatcher.batch_accept_token`` / ``batch_fill_next_token_bitmask``, each on
``threads`` native threads (:func:`toolkit.core.batch.make_batch`); EOS, special ids and
the error state stay the protocol's, row by row.  Peers do not report whether
a mask used slices, so their ``MaskInfo.sliced`` is always False.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from time import perf_counter
from types import MappingProxyType
from typing import Any

import numpy as np

from strategies._base import EOS_RECORD, BaseMatcher, refuse_token_limits
from strategies._unenforced import documented, from_messages, native_warnings
from strategies.declared import BUILT_IN
from toolkit.core import bitmask as bm
from toolkit.core.batch import SKIP, check_step_args, new_step
from toolkit.core.errors import MasklabError, UnsupportedGrammar
from toolkit.core.protocol import (
    FORCED_LIMIT,
    MAX_DRAFT,
    BatchStep,
    CompiledBase,
    EngineBase,
    MaskInfo,
    check_count,
    check_draft,
)
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.inputs import format_of, read
from toolkit.grammar.ir import Grammar
from toolkit.grammar.structural_tag import read_structural_tag
from toolkit.jsonschema.compiler import JsonSchemaText

__all__ = [
    "PeerEngine",
    "PeerMatcher",
    "PeerBatch",
    "JsonSchemaText",
    "LLGuidanceEngine",
    "XGrammarEngine",
    "OutlinesCoreEngine",
    "PeerCompiled",
    "PeerError",
]


class PeerError(MasklabError):
    """A peer engine refused a grammar or failed while matching; the message is its own."""


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # pragma: no cover - imported but not installed
        return "unknown"


def _text_words(vocab: Vocabulary) -> np.ndarray:
    """The bitmask row of every text token (what an engine's mask is clipped to)."""
    return bm.from_bool(vocab.text_token_mask())


@dataclass
class PeerCompiled(CompiledBase):
    """An engine's compiled grammar plus what it was made from (``source``: the text given)."""

    handle: Any
    source: str
    kind: str  # "json_schema" | "lark" | "regex"
    nbytes: int | None = None  # None: the engine does not report its memory
    #: seconds inside the engine's own compile call(s) (the adapter's text assembly is not in it)
    engine_s: float = 0.0
    #: the special tokens the grammar names (token-level terminals, :mod:`toolkit.grammar.special`)
    special_ids: frozenset[int] = frozenset()
    #: the words a mask row keeps of the engine's bits (text tokens, and ``special_ids``)
    allow_words: Any = None
    #: what the compile left unenforced: the engine's compile warnings, and the keywords of
    #: the engine's ``unenforced_keywords`` the schema holds (:mod:`strategies._unenforced`)
    unenforced: list[dict[str, Any]] = field(default_factory=list)

    def memory_bytes(self) -> int:
        """The engine's own figure (xgrammar's ``memory_size_bytes``); llguidance and
        outlines-core report none, which raises ``NotImplementedError`` (the harness
        then records no memory rather than a made-up one)."""
        if self.nbytes is None:
            raise NotImplementedError(f"{self.kind} grammar: the engine does not report its memory")
        return self.nbytes


class DirectRun:
    """A peer compiled and called directly (:meth:`PeerEngine.direct_check`)."""

    def __init__(self, ttfm_s: float, new_matcher: Any, step: Any) -> None:
        self.ttfm_s = ttfm_s
        self._new = new_matcher
        self._step = step

    def walk(self, tokens: Sequence[int]) -> list[float]:
        """Seconds of each step (the native fill, then the native accept of the token),
        from a fresh native matcher, up to and including the first refused token."""
        perf, step = perf_counter, self._step
        g = self._new()
        out: list[float] = []
        for t in tokens:
            s = perf()
            ok = step(g, t)
            e = perf()
            out.append(round(e - s, 9))
            if not ok:
                break
        return out


class PeerEngine(EngineBase):
    """What the three adapters share: vocabulary, text mask, version, input dispatch."""

    name = "peer"
    dist = ""
    #: modules imported when an engine is built (``available_engines`` checks them)
    requires: tuple[str, ...] = ()
    #: inputs the engine compiles with its own front end, besides Grammar
    native_inputs = frozenset({"json_schema"})
    #: whose JSON Schema compiler turns a schema into the language the masks follow
    schema_grammar = "own"
    #: keywords the engine's own JSON Schema compiler accepts and does not enforce, without a
    #: word: keyword -> what it does and where that is shown; each one a schema holds is in
    #: its compile's ``unenforced`` (with its pointer), beside the engine's own warnings
    unenforced_keywords: Mapping[str, str] = MappingProxyType({})

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.version = _version(self.dist)
        self.text_words = _text_words(vocab)
        # the words holding a non-text id (special, padding, past the end): the only ones
        # an engine's bits are clipped in
        odd = np.flatnonzero(self.text_words != -1)
        self.clip_words = (int(odd[0]), int(odd[-1]) + 1) if len(odd) else (0, 0)
        self.options: dict[str, Any] = {}

    def compile(self, grammar: Any) -> PeerCompiled:
        """Compile an input the engine reads itself (its format in :attr:`native_inputs`:
        a JSON schema by its own compiler, Lark, GBNF... by its own front end), or a
        :class:`Grammar` (an input of any other registered format is read to one first:
        :func:`toolkit.grammar.inputs.read`; a bare ``str`` is refused: which format is it?)."""
        fmt = format_of(grammar)
        try:
            if fmt is not None and fmt.name in self.native_inputs:
                text = fmt.text(grammar)
                if fmt.name != "json_schema":
                    return self._compile_native(fmt.name, text)
                compiled = self._compile_schema(text)
                if self.unenforced_keywords:  # (after the engine's call: not in its time)
                    compiled.unenforced += documented(json.loads(text), self.unenforced_keywords)
                return compiled
            grammar = read(grammar, engine=self.name)
            if not self.token_limits:
                refuse_token_limits(self.name, grammar)
            special = grammar.special_ids(self.vocab)
            if special and not self.capabilities.special_tokens:
                raise UnsupportedGrammar(f"{self.name} has no token-level terminals: special tokens in a grammar "
                                         f"({', '.join(grammar.terminals[n].special for n in grammar.special_terminals)})"
                                         " are not supported")
            return self._with_special(self._compile_grammar(grammar), special)
        except MasklabError:
            raise
        except Exception as e:  # noqa: BLE001 - the engines raise RuntimeError/ValueError
            raise PeerError(f"{self.name}: {type(e).__name__}: {e}") from e

    #: whether it honours a rule's ``max_tokens`` (counts a lexeme's tokens)
    token_limits = False

    def _compile_schema(self, text: str) -> PeerCompiled:
        raise NotImplementedError

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        raise NotImplementedError

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        """Compile ``text`` of the input format ``fmt`` (one of :attr:`native_inputs`
        other than ``json_schema``: ``lark``, ``regex``, ``gbnf``) with the engine's own
        front end."""
        raise UnsupportedGrammar(f"{self.name} reads no {fmt} text itself")

    def _with_special(self, compiled: PeerCompiled, ids: frozenset[int]) -> PeerCompiled:
        """``compiled`` keeping the engine's bits of the special tokens ``ids`` too."""
        if ids:
            compiled.special_ids = frozenset(ids)
            words = self.text_words.copy()
            bm.set_bits(words, np.asarray(sorted(ids), dtype=np.int64))
            compiled.allow_words = words
        return compiled

    def describe(self) -> dict[str, Any]:
        """Version and options, as the harness records them."""
        return {"version": self.version, "options": dict(self.options)}

    #: the engine's batch (a :class:`PeerBatch`), None where it has none
    batch_class: type | None = None

    # ------------------------------------------------ the engine called directly --

    def direct_check(self, spec: Any) -> DirectRun:
        """The engine called through its own API as a server calls it, no masklab code in
        the timed regions: what :meth:`compile` would give the engine for ``spec`` (the
        text is made untimed), compiled by the engine, a native matcher and its first mask
        into a preallocated row (the :class:`DirectRun`'s ``ttfm_s``); its
        ``walk(tokens)`` then times each step of a walk from a fresh native matcher.
        :mod:`toolkit.report.direct` compares these times with the harness's own."""
        fmt = format_of(spec)
        if fmt is not None and fmt.name in self.native_inputs:
            text = fmt.text(spec)
            source, kind = (self._schema_source(text), "json_schema") if fmt.name == "json_schema" \
                else (self._native_source(fmt.name, text), fmt.name)
        elif isinstance(spec, Grammar):
            source, kind = self._grammar_source(spec)
        else:
            raise UnsupportedGrammar(f"{self.name}: no direct check for a {type(spec).__name__}")
        t0 = perf_counter()
        handle = self._direct_compile(source, kind)
        new_matcher, step = self._direct_calls(handle)
        step(new_matcher(), None)
        return DirectRun(perf_counter() - t0, new_matcher, step)

    def _schema_source(self, text: str) -> str:
        """The text the engine compiles for a JSON schema."""
        return text

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        """``(text, kind)`` the engine compiles for a :class:`Grammar`."""
        raise NotImplementedError

    def _native_source(self, fmt: str, text: str) -> str:
        """The text the engine compiles for ``text`` of its native format ``fmt``."""
        return text

    def _direct_compile(self, source: str, kind: str) -> Any:
        raise NotImplementedError

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        """``(new_matcher(), step(matcher, token))``: ``step`` fills the preallocated row
        with the engine's call, then (token not None) accepts the token, returns whether
        it was accepted."""
        raise NotImplementedError

    def batch_matcher(self, matchers: Sequence[Any], threads: int) -> PeerBatch | None:
        """The engine's own batch over ``matchers`` (None when it has none, or when
        some matcher is not this engine's: :func:`toolkit.core.batch.make_batch` then falls
        back to threads)."""
        if self.batch_class is None or not all(
                type(m) is self.batch_class.matcher_class and m.engine is self for m in matchers):
            return None
        return self.batch_class(self, list(matchers), threads)


class PeerBatch:
    """A peer's batch: the accepts and fills of the rows whose matchers are live go
    through the engine's batch calls (:meth:`_accept_many`, :meth:`_fill_many`); the
    rest (EOS, special ids, terminated or failed matchers) take the single calls, which
    hold the protocol's rules.  The engine's bits are then clipped to the text tokens
    and the EOS ids set where the grammar accepts, as a single fill does."""

    #: the matchers it steps (another engine's go to the fallback)
    matcher_class: type

    def __init__(self, engine: PeerEngine, matchers: list[Any], threads: int) -> None:
        self.engine = engine
        self.matchers = matchers
        self.threads = threads
        self._out = new_step(len(matchers))
        vocab = engine.vocab
        self._text = vocab.text_token_mask()
        self._eos = np.asarray(vocab.eos_ids, dtype=np.int64)

    def _accept_many(self, rows: list[int], tokens: list[int]) -> list[bool]:
        raise NotImplementedError

    def _fill_many(self, rows: list[int], bitmask: np.ndarray) -> None:
        raise NotImplementedError

    def step(self, tokens: Any, bitmask: np.ndarray) -> BatchStep:
        tok = check_step_args(len(self.matchers), tokens, bitmask)
        t0 = time.perf_counter()
        out = self._out
        out.accepted[:] = -1
        out.allowed[:] = -1
        rows, toks = [], []
        for i in np.flatnonzero(tok >= 0).tolist():
            m, t = self.matchers[i], int(tok[i])
            if m.error is None and not m._terminated and t < len(self._text) and self._text[t]:
                rows.append(i)
                toks.append(t)
            else:  # EOS, a special id, a terminated or failed matcher: the protocol's rules
                out.accepted[i] = m.accept_token(t)
        if rows:
            for i, t, ok in zip(rows, toks, self._accept_many(rows, toks), strict=True):
                out.accepted[i] = ok
                if ok:
                    self.matchers[i]._push_history(True, t)
        live, single = [], []
        for i in np.flatnonzero(tok != SKIP).tolist():
            m = self.matchers[i]
            (live if m.error is None and not m._terminated else single).append(i)
        if live:
            self._fill_many(live, bitmask)
            allows = [self.matchers[i].compiled.allow_words for i in live]
            if any(a is not None for a in allows):  # special tokens the grammar names: their bits kept
                for i, a in zip(live, allows, strict=True):
                    bitmask[i] &= self.engine.text_words if a is None else a
            else:
                bitmask[live] &= self.engine.text_words
            for i in live:
                m = self.matchers[i]
                if m.error is not None:  # the fill failed: EOS only, as the single fill's error path
                    bitmask[i] = 0
                    bm.set_bits(bitmask[i], self._eos)
                elif m._accepting_safe():
                    bm.set_bits(bitmask[i], self._eos)
                out.allowed[i] = bm.popcount(bitmask[i])
        for i in single:
            out.allowed[i] = self.matchers[i].fill_bitmask(bitmask, i).allowed
        out.wall_s = time.perf_counter() - t0
        return out

    def close(self) -> None:
        pass


class PeerMatcher(BaseMatcher):
    """BaseMatcher over an engine handle: text bits from the engine, EOS from the protocol.

    ``engine_s`` adds up the seconds spent inside the engine's own calls (its fill and
    accept, made as a server makes them: the timed regions of :meth:`_fill_native` and
    of ``_advance``); what the adapter adds around them (the protocol's checks, clipping
    the non-text bits, EOS) is not in it, so the harness can time the engine and the glue apart."""

    times_engine = True
    #: the engine's fill writes every word of the row, so the protocol need not clear it
    writes_whole_row = True

    def __init__(self, engine: PeerEngine, compiled: PeerCompiled) -> None:
        super().__init__(engine.vocab)
        self.engine = engine
        self.compiled = compiled
        self.engine_s = 0.0
        self._trusted = False

    def accept_allowed(self, token_id: int) -> bool:
        """:meth:`accept_token` for a token the caller knows its last mask allowed (a
        server's sampled token): the engine's accept is called as servers call it, without
        a check of its own first.  For such a token the result is ``accept_token``'s."""
        self._trusted = True
        try:
            return self.accept_token(token_id)
        finally:
            self._trusted = False

    def _fill_native(self, row: np.ndarray) -> None:
        """The engine's fill into ``row``, its time added to ``engine_s``."""
        raise NotImplementedError

    def _fill_text(self, row: np.ndarray) -> MaskInfo:
        self._fill_native(row)
        self._check_fill()
        lo, hi = self.engine.clip_words
        allow = self.compiled.allow_words
        np.bitwise_and(row[lo:hi], (self.engine.text_words if allow is None else allow)[lo:hi], out=row[lo:hi])
        return MaskInfo(0, False)

    @property
    def special_ids(self) -> frozenset[int]:  # the protocol's rules let these through
        return self.compiled.special_ids

    def _clip_rows(self, rows: np.ndarray) -> None:
        """The protocol's clipping of native rows (draft masks): non-text bits off but
        the grammar's own tokens and EOS, whose bits the engine sets when accepting."""
        allow = self.compiled.allow_words
        keep = (self.engine.text_words if allow is None else allow).copy()
        bm.set_bits(keep, self._eos)
        np.bitwise_and(rows, keep, out=rows)

    def _live_for_draft(self) -> bool:
        return self.error is None and not self._terminated

    def _eos_row(self, row: np.ndarray) -> None:
        row[:] = 0
        bm.set_bits(row, self._eos)

    def _finish_draft(self, draft: Sequence[int], rows: np.ndarray) -> int:
        """After a native draft call wrote ``rows`` (pre-zeroed): the protocol's view.
        Returns the tokens accepted: a token counts when its row allows it; the row after
        an accepted EOS is EOS-only (the engines leave it zero or unwritten), rows after
        the first refused token zero."""
        self._clip_rows(rows)
        n = 0
        for i, t in enumerate(draft):
            t = int(t)
            if not (0 <= t < self.vocab.size and bm.get_bit(rows[i], t)):
                break
            n += 1
            if t in self.vocab.eos_ids:
                self._eos_row(rows[i + 1])
        rows[n + 1:] = 0
        return n

    def _check_fill(self) -> None:
        """Raise the engine's error after a fill (when it reports errors that way)."""


# ------------------------------------------------------------- llguidance --


class LLGuidanceEngine(PeerEngine):
    """``peer:llguidance`` (it reads special tokens in a grammar).

    Options:

    * ``forcing`` (default False): llguidance narrows the mask to the canonical token
      when the grammar forces bytes (after ``Ap`` in ``"April" | "August"`` it allows
      ``ril`` but not ``r`` or ``ri``).  False writes ``%llguidance {"no_forcing": true}``
      so masks are the exact set of tokens that keep the output valid (like
      xgrammar's); True is llguidance as shipped.  Forcing narrows the mask only:
      ``accept_token`` still takes any token the grammar allows (``r`` above).
    * ``slices``: ``"default"`` (llguidance's own choice), ``"general"``, ``"json"``,
      ``"none"``, or a list of slice regexes.
    * ``limits``: a dict of ``LLParserLimits`` fields (``max_items_in_row``,
      ``step_lexer_fuel``, ...).
    * ``json_options``: ``x-guidance`` settings for its JSON compiler
      (``whitespace_flexible``, ``item_separator``, ``key_separator``, ``lenient``, ...),
      added to schemas that do not set them.
    """

    name = "peer:llguidance"
    capabilities = BUILT_IN["peer:llguidance"].capabilities
    token_limits = True
    dist = "llguidance"
    requires = BUILT_IN["peer:llguidance"].requires
    native_inputs = frozenset({"json_schema", "lark"})

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        forcing: bool = False,
        slices: str | Sequence[str] = "default",
        limits: Mapping[str, int] | None = None,
        json_options: Mapping[str, Any] | None = None,
    ) -> None:
        import llguidance

        super().__init__(vocab)
        self._ll = llguidance
        self.forcing = bool(forcing)
        self.options = {"forcing": self.forcing, "slices": slices if isinstance(slices, str) else list(slices)}
        if limits:
            self.options["limits"] = dict(limits)
        if json_options:
            self.options["json_options"] = dict(json_options)
        self.limits = llguidance.LLParserLimits(**dict(limits)) if limits else None
        self.json_options = dict(json_options or {})
        tokens = list(vocab.token_bytes)
        for i, name in vocab.special_tokens.items():
            tokens[i] = name.encode("utf-8")

        class _Wrapped:
            is_tokenizer_wrapper = True

            def __init__(self) -> None:
                self.tokens = tokens
                self.eos_token_id = vocab.eos_ids[0] if vocab.eos_ids else None
                self.bos_token_id = None
                self.special_token_ids = sorted(vocab.special_tokens)

            def __call__(self, s: str | bytes) -> list[int]:
                return vocab.encode(s.decode("utf-8") if isinstance(s, bytes) else s)

        kw: dict[str, Any] = {"n_vocab": vocab.size}
        if slices == "none":
            kw["slices"] = []
        elif slices == "general":
            kw["slices"] = llguidance.LLTokenizer.general_slices()
        elif slices == "json":
            kw["slices"] = llguidance.LLTokenizer.json_slices()
        elif slices != "default":
            kw["slices"] = list(slices)
        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Wrapped()), **kw)
        self._executor: Any = None

    def draft_executor(self) -> Any:
        """The one-thread ``LLExecutor`` the draft masks run on (made when first needed)."""
        if self._executor is None:
            self._executor = self._ll.LLExecutor(1)
        return self._executor

    def _header(self, *, initial_skip: bool = False) -> str:
        flags = {} if self.forcing else {"no_forcing": True}
        if initial_skip:
            flags["allow_initial_skip"] = True
        return f"%llguidance {json.dumps(flags)}\n" if flags else ""

    def _schema_source(self, text: str) -> str:
        if self.json_options:
            schema = json.loads(text)
            if isinstance(schema, dict):
                guidance = dict(self.json_options)
                guidance.update(schema.get("x-guidance") or {})
                schema = {**schema, "x-guidance": guidance}
            text = json.dumps(schema)
        return self._header() + f"start: %json {text}\n"

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        return self._header(initial_skip=bool(grammar.ignore)) + grammar.to_lark(), "lark"

    def _compile_schema(self, text: str) -> PeerCompiled:
        return self._build(self._schema_source(text), "json_schema")

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        return self._build(*self._grammar_source(grammar))

    def _native_source(self, fmt: str, text: str) -> str:
        return self._header(initial_skip=self._lark_view(text)[0]) + text

    def _lark_view(self, text: str) -> tuple[bool, frozenset[int]]:
        """``(ignores, special ids)`` of Lark text as masklab reads it: whether ignored
        text may come first (as in masklab's IR), and the special tokens it names."""
        try:
            ours = Grammar.from_lark(text)
            return bool(ours.ignore), ours.special_ids(self.vocab)
        except MasklabError:  # a text masklab does not read: llguidance's bits alone decide
            return False, frozenset(self.vocab.special_tokens) - frozenset(self.vocab.eos_ids)

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        """Lark text in llguidance's dialect (:class:`toolkit.grammar.lark_dialect.LarkText`),
        read by llguidance itself: the reference for masklab's reader."""
        ignores, special = self._lark_view(text)
        return self._with_special(self._build(self._header(initial_skip=ignores) + text, "lark"), special)

    def _build(self, lark: str, kind: str) -> PeerCompiled:
        kw: dict[str, Any] = {"log_level": 0}
        if self.limits is not None:
            kw["limits"] = self.limits
        t0 = perf_counter()
        m = self._ll.LLMatcher(self.tokenizer, lark, **kw)
        spent = perf_counter() - t0
        if m.is_error():
            raise PeerError(f"{self.name}: {m.get_error()}")
        warned = getattr(m, "get_grammar_warnings", None)  # (what lenient / coerce_one_of let through)
        return PeerCompiled(m, lark, kind, engine_s=spent, unenforced=from_messages(warned() if warned else ()))

    def _direct_compile(self, source: str, kind: str) -> Any:
        kw: dict[str, Any] = {"log_level": 0}
        if self.limits is not None:
            kw["limits"] = self.limits
        return self._ll.LLMatcher(self.tokenizer, source, **kw)

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # as vLLM's and SGLang's llguidance backends: the mask written through the row's
        # pointer, then consume_token
        row = bm.allocate(self.vocab.size)
        ptr, nbytes = row.ctypes.data, row.nbytes
        first = [handle]  # the compiled matcher serves the first mask (TTFM); walks get copies

        def new_matcher() -> Any:
            return first.pop() if first else handle.deep_copy()

        def step(g: Any, t: int | None, _row: np.ndarray = row) -> bool:  # _row: keeps the row alive
            g.unsafe_compute_mask_ptr(ptr, nbytes)
            return t is None or g.consume_token(t)

        return new_matcher, step

    def matcher(self, compiled: PeerCompiled) -> LLGuidanceMatcher:
        t0 = perf_counter()
        handle = compiled.handle.deep_copy()
        out = LLGuidanceMatcher(self, compiled, handle)
        out.engine_s = perf_counter() - t0
        return out


class LLGuidanceBatch(PeerBatch):
    """``peer:llguidance``'s batch: ``LLExecutor`` (``consume_token_par``, then
    ``unsafe_compute_mask_ptr`` into the rows).  ``consume_token_par`` leaves a matcher
    that refuses its token in an error state, where the single call leaves it as it
    was; so a token is first checked (``validate_tokens``) and a refused one takes the
    single call."""

    def __init__(self, engine: LLGuidanceEngine, matchers: list[Any], threads: int) -> None:
        super().__init__(engine, matchers, threads)
        self.executor = engine._ll.LLExecutor(threads)

    def _accept_many(self, rows: list[int], tokens: list[int]) -> list[bool]:
        ok = [self.matchers[i].m.validate_tokens([t]) == 1 for i, t in zip(rows, tokens, strict=True)]
        pairs = [(self.matchers[i].m, t) for i, t, g in zip(rows, tokens, ok, strict=True) if g]
        done = iter(self.executor.consume_token_par(pairs) if pairs else [])
        out = []
        for i, t, g in zip(rows, tokens, ok, strict=True):
            if g:
                a = bool(next(done))
                if not a:  # a limit hit while consuming: the engine's error becomes the matcher's
                    self.matchers[i]._check_safe()
                out.append(a)
            else:
                out.append(self.matchers[i]._accept_text(t))
        return out

    def _fill_many(self, rows: list[int], bitmask: np.ndarray) -> None:
        row_bytes = bitmask.shape[1] * 4
        self.executor.unsafe_compute_mask_ptr([(self.matchers[i].m, i) for i in rows], bitmask.ctypes.data,
                                              row_bytes, bitmask.shape[0])
        for i in rows:
            self.matchers[i]._check_safe()


class LLGuidanceMatcher(PeerMatcher):
    def __init__(self, engine: LLGuidanceEngine, compiled: PeerCompiled, m: Any) -> None:
        super().__init__(engine, compiled)
        self.m = m

    def _check(self) -> None:
        if self.m.is_error():
            raise PeerError(self.m.get_error())

    def _check_safe(self) -> None:
        """The engine's error state made the matcher's (a batch call does not raise)."""
        if self.error is None and self.m.is_error():
            self._fail(PeerError(self.m.get_error()))

    def _fill_native(self, row: np.ndarray) -> None:
        ptr, nbytes, m = row.ctypes.data, row.nbytes, self.m
        t0 = perf_counter()
        m.unsafe_compute_mask_ptr(ptr, nbytes)
        self.engine_s += perf_counter() - t0

    def _check_fill(self) -> None:
        self._check()

    def _advance(self, token_id: int, data: bytes) -> Any:
        m = self.m
        if self._trusted:  # allowed by the last mask: consume_token, as servers call it
            t0 = perf_counter()
            ok = m.consume_token(token_id)
            self.engine_s += perf_counter() - t0
        else:  # try_consume_tokens leaves the matcher as it was when the token is refused
            t0 = perf_counter()
            ok = m.try_consume_tokens([token_id]) == 1
            self.engine_s += perf_counter() - t0
        if ok:
            return True
        self._check()  # a limit hit: the engine's error state becomes the matcher's, now
        return None

    def _undo(self, record: Any) -> None:
        self.m.rollback(1)

    def _accepting(self) -> bool:
        return bool(self.m.is_accepting())

    def _copy(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self.engine, self.compiled, self.m.deep_copy())

    def _reset_state(self) -> None:
        # LLMatcher.reset() keeps an error state; a fresh copy of the compiled one does not.
        self.m = self.compiled.handle.deep_copy()

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """llguidance's ``compute_ff_bytes``."""
        if not self._live_for_draft():
            return b""
        return bytes(self.m.compute_ff_bytes())[:limit]

    def forced_tokens(self) -> list[int]:
        """llguidance's ``compute_ff_tokens``, after ``compute_ff_bytes`` (which it reads:
        without forcing it does not compute the bytes itself)."""
        if not self._live_for_draft():
            return []
        self.m.compute_ff_bytes()
        return [int(t) for t in self.m.compute_ff_tokens()]

    def fill_draft_bitmasks(self, draft: Sequence[int], bitmask: np.ndarray, row: int = 0) -> int:
        """llguidance's ``fill_next_token_bitmask_par_with_draft_tokens`` (its rows after
        a refused token are left unwritten: zero here)."""
        k = len(draft)
        draft, _, row = check_draft(draft, bitmask, row, k + 1, self.vocab.size)
        if not self._live_for_draft() or not k:
            return super().fill_draft_bitmasks(draft, bitmask, row)
        rows = bitmask[row: row + k + 1]
        if rows.shape[0] != k + 1 or not rows.flags["C_CONTIGUOUS"]:
            return super().fill_draft_bitmasks(draft, bitmask, row)
        rows[:] = 0
        executor = self.engine.draft_executor()
        t0 = perf_counter()
        executor.unsafe_compute_mask_ptr_with_draft_token([(self.m, 0, [int(t) for t in draft])], rows.ctypes.data,
                                                         rows.shape[1] * 4, k + 1)
        self.engine_s += perf_counter() - t0
        self.n_masks += k + 1
        return self._finish_draft(draft, rows)


# --------------------------------------------------------------- xgrammar --


class XGrammarEngine(PeerEngine):
    """``peer:xgrammar``.

    Options (passed to xgrammar): ``strict_mode`` (default True, xgrammar's: objects
    without ``additionalProperties`` are closed), ``any_whitespace`` (default True),
    ``cache`` (the compiler's cache, default **off**, as TTFM measurements need),
    ``max_threads`` (compiler threads, default 1: single-threaded like every engine here).
    """

    name = "peer:xgrammar"
    capabilities = BUILT_IN["peer:xgrammar"].capabilities
    dist = "xgrammar"
    requires = BUILT_IN["peer:xgrammar"].requires
    #: what xgrammar 0.2.8 compiles without a warning and does not enforce (measured:
    #: ``tests/test_bad_input_harness.py``); its warnings (``oneOf`` read as ``anyOf``,
    #: ``minLength``/``maxLength`` beside ``pattern``, ``multipleOf`` on numbers...) are
    #: captured per compile besides
    unenforced_keywords = MappingProxyType({
        "not": "xgrammar ignores not (the value is not checked against it)",
        "if": "xgrammar ignores if/then/else",
        "then": "xgrammar ignores if/then/else",
        "else": "xgrammar ignores if/then/else",
    })

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        strict_mode: bool = True,
        any_whitespace: bool = True,
        cache: bool = False,
        max_threads: int = 1,
    ) -> None:
        import xgrammar

        super().__init__(vocab)
        self._xg = xgrammar
        self.strict_mode = bool(strict_mode)
        self.any_whitespace = bool(any_whitespace)
        self.options = {
            "strict_mode": self.strict_mode,
            "any_whitespace": self.any_whitespace,
            "cache": bool(cache),
            "max_threads": int(max_threads),
        }
        self.info = xgrammar.TokenizerInfo(
            list(vocab.token_bytes),
            xgrammar.VocabType.RAW,
            vocab_size=vocab.size,
            stop_token_ids=list(vocab.eos_ids),
        )
        self.compiler = xgrammar.GrammarCompiler(
            self.info, max_threads=int(max_threads), cache_enabled=bool(cache)
        )

    def _compile_schema(self, text: str) -> PeerCompiled:
        def timed() -> tuple[Any, float]:
            t0 = perf_counter()
            c = self.compiler.compile_json_schema(
                text, any_whitespace=self.any_whitespace, strict_mode=self.strict_mode
            )
            return c, perf_counter() - t0

        (c, spent), warned = native_warnings(timed)  # its C++ warnings, from file descriptor 2
        return PeerCompiled(c, text, "json_schema", int(c.memory_size_bytes), spent,
                            unenforced=from_messages(warned, json.loads(text) if warned else None))

    #: JSON schemas and structural tags go to xgrammar's own compilers
    native_inputs = frozenset({"json_schema", "structural_tag"})

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        """A structural tag (:class:`toolkit.grammar.StructuralTagText`), compiled by
        xgrammar's ``compile_structural_tag``; its masks keep the special tokens masklab's
        reading of it names."""
        if fmt != "structural_tag":
            return super()._compile_native(fmt, text)
        source = self._native_source(fmt, text)
        try:
            special = read_structural_tag(text).special_ids(self.vocab)
        except MasklabError:  # a tag masklab does not read: xgrammar's bits alone decide
            special = frozenset(self.vocab.special_tokens) - frozenset(self.vocab.eos_ids)

        def timed() -> tuple[Any, float]:
            t0 = perf_counter()
            c = self.compiler.compile_structural_tag(source)
            return c, perf_counter() - t0

        (c, spent), warned = native_warnings(timed)
        return self._with_special(PeerCompiled(c, source, "structural_tag", int(c.memory_size_bytes), spent,
                                               unenforced=from_messages(warned)), special)

    def _native_source(self, fmt: str, text: str) -> str:
        if fmt != "structural_tag":
            return text
        value = json.loads(text)  # a format alone: in the structural tag object xgrammar takes
        return text if isinstance(value, dict) and value.get("type") == "structural_tag" else \
            json.dumps({"type": "structural_tag", "format": value})

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        lark = grammar.to_lark(boolean="regex")
        if grammar.ignore:
            lark = '%grammar_options {"allow_initial_skip": true}\n' + lark
        return lark, "lark"

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        lark, _ = self._grammar_source(grammar)

        def timed() -> tuple[Any, float]:
            t0 = perf_counter()
            c = self.compiler.compile_grammar(self._xg.Grammar.from_lark(lark))
            return c, perf_counter() - t0

        (c, spent), warned = native_warnings(timed)
        return PeerCompiled(c, lark, "lark", int(c.memory_size_bytes), spent, unenforced=from_messages(warned))

    def _direct_compile(self, source: str, kind: str) -> Any:
        if kind == "json_schema":
            return self.compiler.compile_json_schema(source, any_whitespace=self.any_whitespace,
                                                     strict_mode=self.strict_mode)
        if kind == "structural_tag":
            return self.compiler.compile_structural_tag(source)
        return self.compiler.compile_grammar(self._xg.Grammar.from_lark(source))

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # as vLLM's and SGLang's xgrammar backends: a torch bitmask from
        # allocate_token_bitmask, fill_next_token_bitmask(bitmask, index), accept_token
        bitmask = self._xg.allocate_token_bitmask(1, self.vocab.size)

        def step(g: Any, t: int | None) -> bool:
            g.fill_next_token_bitmask(bitmask, 0)
            return t is None or g.accept_token(t)

        return (lambda: self._xg.GrammarMatcher(handle)), step

    def matcher(self, compiled: PeerCompiled) -> XGrammarMatcher:
        t0 = perf_counter()
        handle = self._xg.GrammarMatcher(compiled.handle)
        out = XGrammarMatcher(self, compiled, handle)
        out.engine_s = perf_counter() - t0
        return out


class XGrammarBatch(PeerBatch):
    """``peer:xgrammar``'s batch: ``BatchGrammarMatcher`` (``batch_accept_token``, then
    ``batch_fill_next_token_bitmask`` into the rows)."""

    def __init__(self, engine: XGrammarEngine, matchers: list[Any], threads: int) -> None:
        super().__init__(engine, matchers, threads)
        self.batch = engine._xg.BatchGrammarMatcher(threads)

    def _accept_many(self, rows: list[int], tokens: list[int]) -> list[bool]:
        return [bool(a) for a in self.batch.batch_accept_token([self.matchers[i].m for i in rows], tokens)]

    def _fill_many(self, rows: list[int], bitmask: np.ndarray) -> None:
        import torch

        self.batch.batch_fill_next_token_bitmask([self.matchers[i].m for i in rows], torch.from_numpy(bitmask),
                                                 rows)


class XGrammarMatcher(PeerMatcher):
    def __init__(self, engine: XGrammarEngine, compiled: PeerCompiled, m: Any) -> None:
        super().__init__(engine, compiled)
        self.m = m

    def _fill_native(self, row: np.ndarray) -> None:
        m, rows = self.m, row[None, :]  # a (1, words) view: xgrammar's fastest form of the call
        t0 = perf_counter()
        m.fill_next_token_bitmask(rows, 0)
        self.engine_s += perf_counter() - t0

    def _advance(self, token_id: int, data: bytes) -> Any:
        m = self.m
        t0 = perf_counter()
        ok = m.accept_token(token_id)
        self.engine_s += perf_counter() - t0
        return True if ok else None

    def _undo(self, record: Any) -> None:
        self.m.rollback(1)

    def _accepting(self) -> bool:
        return bool(self.m.is_completed())

    def _copy(self) -> XGrammarMatcher:
        return XGrammarMatcher(self.engine, self.compiled, self.m.fork())

    def _reset_state(self) -> None:
        self.m.reset()

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """xgrammar's ``find_jump_forward_string`` (which cannot return a forced run that
        ends inside a UTF-8 character: the masks' reading is used then)."""
        if not self._live_for_draft():
            return b""
        try:
            return self.m.find_jump_forward_string().encode("utf-8")[:limit]
        except UnicodeDecodeError:
            return super().forced_bytes(limit)

    def allows_bytes(self, data: bytes) -> bool:
        """xgrammar's ``accept_string`` (one rollback step), taken back."""
        if not self._live_for_draft():
            return False
        if not data:
            return True
        if not self.m.accept_string(data):
            return False
        self.m.rollback(1)
        return True

    def fill_draft_bitmasks(self, draft: Sequence[int], bitmask: np.ndarray, row: int = 0) -> int:
        """The draft as a one-branch tree (:meth:`fill_draft_tree`)."""
        draft, _, row = check_draft(draft, bitmask, row, len(draft) + 1, self.vocab.size)
        ok = self.fill_draft_tree(draft, list(range(-1, len(draft) - 1)), bitmask, row)
        n = int(np.argmin(ok)) if not ok.all() else len(draft)
        bitmask[row + n + 1: row + len(draft) + 1] = 0
        return n

    def fill_draft_tree(self, tokens: Sequence[int], parents: Sequence[int], bitmask: np.ndarray,
                        row: int = 0) -> np.ndarray:
        """xgrammar's ``traverse_draft_tree`` (first-child / next-sibling arrays, node 0
        the current state); a refused node's row is zero, an accepted EOS's EOS-only."""
        import torch

        n = len(tokens)
        if len(parents) != n:
            raise ValueError(f"{n} tokens but {len(parents)} parents")
        tokens, parents, row = check_draft(tokens, bitmask, row, n + 1, self.vocab.size, parents)
        rows = bitmask[row: row + n + 1]
        if not self._live_for_draft() or not rows.flags["C_CONTIGUOUS"]:
            return super().fill_draft_tree(tokens, parents, bitmask, row)
        first, sibling, last = [-1] * (n + 1), [-1] * (n + 1), [-1] * (n + 1)
        for i in range(n):
            p = int(parents[i])
            if not -1 <= p < i:
                raise ValueError(f"node {i}: parent {p} is not an earlier node or -1")
            if first[p + 1] < 0:
                first[p + 1] = i + 1
            else:
                sibling[last[p + 1]] = i + 1
            last[p + 1] = i + 1
        args = [torch.tensor(a, dtype=torch.int64) for a in (first, sibling, [0, *map(int, tokens)])]
        rows[:] = 0
        t0 = perf_counter()
        self.m.traverse_draft_tree(*args, torch.from_numpy(rows))
        self.engine_s += perf_counter() - t0
        self.n_masks += n + 1
        self._clip_rows(rows)
        ok = np.zeros(n, dtype=bool)
        for i in range(n):
            p, t = int(parents[i]), int(tokens[i])
            ok[i] = (p < 0 or ok[p]) and 0 <= t < self.vocab.size and bm.get_bit(rows[p + 1], t)
            if not ok[i]:
                rows[i + 1] = 0
            elif t in self.vocab.eos_ids:
                self._eos_row(rows[i + 1])
        return ok


# ----------------------------------------------------------- outlines-core --


class OutlinesCoreEngine(PeerEngine):
    """``peer:outlines-core``: a regex compiled to a token index, up front.

    Options: ``whitespace_pattern`` (its JSON compiler's; default None, outlines-core's
    own ``[ ]?``), ``max_depth`` (for :meth:`Grammar.to_regex`: None refuses recursive
    grammars, an integer unrolls them, a subset of the language).
    """

    name = "peer:outlines-core"
    capabilities = BUILT_IN["peer:outlines-core"].capabilities
    #: what outlines-core 0.2.14's ``build_regex_from_schema`` accepts and leaves out of its
    #: regex, without a word (measured: ``tests/test_bad_input_harness.py``)
    unenforced_keywords = MappingProxyType({
        **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
                        "outlines-core ignores numeric bounds and steps (any number of the type)"),
        "uniqueItems": "outlines-core ignores uniqueItems (repeated items allowed)",
        "contains": "outlines-core ignores contains", "minContains": "outlines-core ignores contains",
        "propertyNames": "outlines-core ignores propertyNames",
        "dependentRequired": "outlines-core ignores dependentRequired",
        "dependentSchemas": "outlines-core ignores dependentSchemas",
        "oneOf": "outlines-core reads oneOf as anyOf (a value matching several branches is allowed)",
    })
    dist = "outlines_core"
    requires = BUILT_IN["peer:outlines-core"].requires

    def __init__(
        self, vocab: Vocabulary, *, whitespace_pattern: str | None = None, max_depth: int | None = None
    ) -> None:
        import outlines_core

        super().__init__(vocab)
        self._oc = outlines_core
        self.whitespace_pattern = whitespace_pattern
        self.max_depth = max_depth
        self.options = {"whitespace_pattern": whitespace_pattern, "max_depth": max_depth}
        groups: dict[bytes, list[int]] = {}
        tb = vocab.token_bytes
        for i in vocab.text_token_ids():
            groups.setdefault(tb[int(i)], []).append(int(i))
        # outlines-core needs one EOS id of its own; any special id will do, its bit is
        # cleared and the vocabulary's EOS ids are set by the protocol.
        specials = sorted(vocab.special_tokens)
        eos = vocab.eos_ids[0] if vocab.eos_ids else (specials[0] if specials else vocab.size)
        self.eos = eos
        self.oc_vocab = outlines_core.Vocabulary(eos, groups)

    def _compile_schema(self, text: str) -> PeerCompiled:
        from outlines_core.json_schema import build_regex_from_schema

        t0 = perf_counter()
        regex = build_regex_from_schema(text, self.whitespace_pattern)
        return self._index(regex, "json_schema", perf_counter() - t0)

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        return grammar.to_regex(max_depth=self.max_depth), "regex"

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        return self._index(*self._grammar_source(grammar))

    def _index(self, regex: str, kind: str, spent: float = 0.0) -> PeerCompiled:
        t0 = perf_counter()
        index = self._oc.Index(regex, self.oc_vocab)
        return PeerCompiled(index, regex, kind, engine_s=spent + perf_counter() - t0)

    def _direct_compile(self, source: str, kind: str) -> Any:
        if kind == "json_schema":
            from outlines_core.json_schema import build_regex_from_schema

            source = build_regex_from_schema(source, self.whitespace_pattern)
        return self._oc.Index(source, self.oc_vocab)

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # as outlines' logits processor: write_mask_into the row, then advance
        row = bm.allocate(self.vocab.size)
        ptr, words = row.ctypes.data, row.shape[1]

        def step(g: Any, t: int | None, _row: np.ndarray = row) -> bool:  # _row: keeps the row alive
            g.write_mask_into(ptr, words, 4)
            if t is None:
                return True
            try:
                g.advance(t, return_tokens=False)
            except ValueError:
                return False
            return True

        return (lambda: self._oc.Guide(handle)), step

    def matcher(self, compiled: PeerCompiled) -> OutlinesCoreMatcher:
        t0 = perf_counter()
        guide = self._oc.Guide(compiled.handle, max_rollback=ROLLBACK_WINDOW)
        out = OutlinesCoreMatcher(self, compiled, guide)
        out.engine_s = perf_counter() - t0
        return out


ROLLBACK_WINDOW = MAX_DRAFT
"""States an outlines-core ``Guide`` keeps for ``rollback_state`` (it reserves room for
that many up front: ``1 << 30`` was 4 GiB of address space per matcher).  256 covers the
harness's longest rollback (a draft of up to :data:`toolkit.core.protocol.MAX_DRAFT`
tokens); a longer one replays the kept tokens from the start, so ``rollback(n)`` still
takes back any ``n`` accepted tokens."""


class OutlinesCoreMatcher(PeerMatcher):
    def __init__(self, engine: OutlinesCoreEngine, compiled: PeerCompiled, guide: Any, depth: int = 0) -> None:
        super().__init__(engine, compiled)
        self.guide = guide
        self.index = compiled.handle
        self._depth = depth  # states the guide can roll back (at most ROLLBACK_WINDOW)

    def rollback(self, n: int) -> None:
        n = check_count(n)
        if n <= self._depth:
            super().rollback(n)  # each token: _undo, one rollback_state
            return
        self._depth = -1  # past the guide's window: bookkeeping only, then a replay
        try:
            super().rollback(n)
        finally:
            self._replay()

    def _replay(self) -> None:
        """The guide back at the start, then every token still accepted (EOS aside)."""
        guide = self.guide
        guide.reset()
        self._depth = 0
        for record, token in zip(self._history, self._tokens, strict=True):
            if record is not EOS_RECORD:
                guide.advance(token, return_tokens=False)
                self._depth = min(self._depth + 1, ROLLBACK_WINDOW)

    def _fill_native(self, row: np.ndarray) -> None:
        ptr, words, guide = row.ctypes.data, row.shape[0], self.guide
        t0 = perf_counter()
        guide.write_mask_into(ptr, words, 4)
        self.engine_s += perf_counter() - t0

    def _advance(self, token_id: int, data: bytes) -> Any:
        guide = self.guide
        t0 = perf_counter()
        if not self._trusted and self.index.get_next_state(guide.get_state(), token_id) is None:
            self.engine_s += perf_counter() - t0
            return None
        guide.advance(token_id, return_tokens=False)
        self.engine_s += perf_counter() - t0
        self._depth = min(self._depth + 1, ROLLBACK_WINDOW)
        return True

    def _undo(self, record: Any) -> None:
        if self._depth >= 0:  # (-1: a rollback past the window, replayed after)
            self.guide.rollback_state(1)
            self._depth -= 1

    def _accepting(self) -> bool:
        return bool(self.index.is_final_state(self.guide.get_state()))

    def _copy(self) -> OutlinesCoreMatcher:
        return OutlinesCoreMatcher(self.engine, self.compiled, copy.copy(self.guide), self._depth)

    def _reset_state(self) -> None:
        self.guide.reset()
        self._depth = 0


LLGuidanceEngine.batch_class, LLGuidanceBatch.matcher_class = LLGuidanceBatch, LLGuidanceMatcher
XGrammarEngine.batch_class, XGrammarBatch.matcher_class = XGrammarBatch, XGrammarMatcher
