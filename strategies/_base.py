"""The part of the :class:`~toolkit.core.protocol.Matcher` contract every strategy shares.

:class:`BaseMatcher` owns what is the same for every engine: EOS and termination,
the sticky error state, the history that ``rollback`` undoes, ``accept_tokens`` and
``validate_tokens``.  A strategy implements six hooks on its own parser state:

* ``_fill_text(row) -> MaskInfo``: set the bits of the allowed *text* tokens in the
  (already zeroed) row;
* ``_advance(token_id, data) -> record | None``: consume a text token's bytes, return
  an undo record, or None (state unchanged) when the token is not allowed;
* ``_undo(record)``: undo one ``_advance``;
* ``_accepting() -> bool`` and ``_copy() -> BaseMatcher`` (a fork of the parser state);
* ``_reset_state()``: back to the grammar's start, as a new matcher.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np

from toolkit.core import bitmask as bm
from toolkit.core.bpe import BpeTable
from toolkit.core.errors import DEFAULT_COMPILE_TIMEOUT, LimitExceeded, UnsupportedGrammar, deadline
from toolkit.core.forced import forced_tokens as tokens_for_forced
from toolkit.core.memo import MemoScope
from toolkit.core.protocol import (
    FORCED_LIMIT,
    CompiledBase,
    EngineBase,
    MaskInfo,
    MaskStats,
    MatcherBase,
    check_bitmask_row,
    check_count,
    check_draft,
    check_token_id,
)
from toolkit.core.session import VocabTable, or_bit_runs
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.inputs import format_of, read
from toolkit.grammar.ir import Grammar
from toolkit.grammar.special import dual_ids, vocab_view
from toolkit.jsonschema.compiler import DEFAULT_MAX_DEPTH, DEFAULT_MAX_RULES

__all__ = ["BaseMatcher", "NativeMatcher", "DualMatcher", "DualTables", "CompiledTables", "GrammarEngine", "StrategyEngine",
           "check_compile_timeout", "check_limit", "DEFAULT_COMPILE_TIMEOUT", "SCHEMA_LIMITS", "read_input",
           "renamed_limits"]

EOS_RECORD = object()  # history record of an accepted EOS


def check_compile_timeout(value: Any) -> float:
    """The engine option ``compile_timeout`` checked: seconds one ``compile`` may take
    (a cooperative :func:`toolkit.core.errors.deadline`: past it the compile raises
    :class:`~toolkit.core.errors.TimeLimitExceeded` naming the option and where it
    stopped), 0 for no limit.  ValueError for anything but a number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
        raise ValueError(f"compile_timeout must be a number of seconds >= 0 (0: no limit), got {value!r}")
    return float(value)


def check_limit(option: str, value: Any, low: int = 1) -> int:
    """An integer limit option checked (ValueError naming it unless an int >= ``low``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{option} must be an integer >= {low}, got {value!r}")
    return int(value)


SCHEMA_LIMITS: dict[str, int] = {"max_rules": DEFAULT_MAX_RULES, "max_schema_depth": DEFAULT_MAX_DEPTH}
"""The options of an engine that compiles JSON schemas with masklab's compiler
(:func:`toolkit.jsonschema.from_json_schema`), with their defaults: ``max_rules`` (the
grammar's rules) and ``max_schema_depth`` (schemas nested in schemas; the compiler's
``max_depth``)."""


@contextmanager
def renamed_limits(names: Mapping[str, str], where: str = "") -> Iterator[None]:
    """Re-raise a :class:`~toolkit.core.errors.LimitExceeded` of a shared layer whose
    ``limit`` is a key of ``names`` under the engine's option, ``names[limit]`` (the same
    class, value and maximum; ``where`` added to the detail), so the error names an
    option the caller can set."""
    try:
        yield
    except LimitExceeded as e:
        option = names.get(e.limit)
        if option is None:
            raise
        detail = "; ".join(x for x in (e.detail, where) if x)
        renamed = type(e)(option, e.value, e.maximum, detail)
        for key, value in vars(e).items():  # what the layer attached (a schema's JSON ``pointer``)
            if key not in ("limit", "value", "maximum", "detail"):
                setattr(renamed, key, value)
        raise renamed from e


def read_input(engine: str, spec: Any, options: Mapping[str, Any], **reader: Any) -> tuple[Grammar, str]:
    """``(Grammar, kind)`` for what a Grammar-based strategy compiles: a :class:`Grammar`
    as it is, or an input of any registered format read to the IR
    (:func:`toolkit.grammar.inputs.read`, with ``reader``'s options such as a schema's
    ``whitespace``), a JSON schema under the engine's :data:`SCHEMA_LIMITS` and
    ``compile_timeout`` from ``options`` (a limit it meets names that option; the
    format drops what its reader does not take).  ``kind`` is the format's name
    for a regex or a JSON schema, else ``"grammar"``; a bare ``str`` is an
    :class:`~toolkit.core.errors.UnsupportedGrammar` naming ``engine``."""
    fmt = format_of(spec)
    if fmt is not None and fmt.name == "json_schema":
        reader = {**reader, "max_rules": options.get("max_rules", DEFAULT_MAX_RULES),
                  "max_depth": options.get("max_schema_depth", DEFAULT_MAX_DEPTH),
                  "compile_timeout": options.get("compile_timeout", DEFAULT_COMPILE_TIMEOUT)}
    with renamed_limits({"max_depth": "max_schema_depth"} if "max_depth" in reader else {}):
        grammar = read(spec, engine=engine, **reader)
    kind = "grammar" if fmt is None or fmt.name not in ("regex", "json_schema") else fmt.name
    return grammar, kind


def early_ir(engine: str, spec: Any, options: Mapping[str, Any]) -> Any:
    """``spec`` read to the IR now when its format can name special tokens or limit a
    rule's tokens (any registered format but a JSON schema and a regex: Lark, GBNF,
    structural tags), so those reach :func:`special_compile` and
    :func:`refuse_token_limits` as a :class:`Grammar` does; any other spec as it is.
    (Compiled in its text form, such a grammar's token ranges over text tokens were
    read as text: wrong masks.)"""
    fmt = format_of(spec)
    if isinstance(spec, Grammar) or fmt is None or fmt.name in ("json_schema", "regex"):
        return spec
    return read_input(engine, spec, options)[0]


class BaseMatcher(MatcherBase):
    """Shared matcher logic; see the module doc for the hooks a strategy provides."""

    #: ``_fill_text`` writes every word of the row (the row need not be cleared first)
    writes_whole_row = False
    #: special ids the grammar names as tokens (:mod:`toolkit.grammar.special`): accepted as
    #: text tokens are (a matcher over a vocabulary view has none: they are text there)
    special_ids: frozenset[int] = frozenset()

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.error: str | None = None
        self._terminated = False
        self._history: list[Any] = []
        self._tokens: list[int] = []  # the tokens consumed, beside their history records
        self._eos = np.asarray(vocab.eos_ids, dtype=np.int64)
        self.n_masks = 0

    # ------------------------------------------------------------ hooks --

    def _fill_text(self, row: np.ndarray) -> MaskInfo:
        raise NotImplementedError

    def _advance(self, token_id: int, data: bytes) -> Any:
        raise NotImplementedError

    def _undo(self, record: Any) -> None:
        raise NotImplementedError

    def _accepting(self) -> bool:
        raise NotImplementedError

    def _copy(self) -> BaseMatcher:
        raise NotImplementedError

    def _reset_state(self) -> None:
        raise NotImplementedError

    # --------------------------------------------------------- protocol --

    def _fail(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> MaskInfo:
        """Overwrite ``bitmask[row]`` with the allowed tokens; see the protocol."""
        r = check_bitmask_row(bitmask, row, self.vocab.size)  # before the engine is called
        self.n_masks += 1
        live = self.error is None and not self._terminated
        if not (live and self.writes_whole_row):
            r[:] = 0
        sliced = False
        if live:
            try:
                sliced = self._fill_text(r).sliced
            except Exception as e:  # noqa: BLE001 - nothing raises mid-decode
                self._fail(e)
                r[:] = 0
        if self._terminated or self.error is not None or self._accepting_safe():
            bm.set_bits(r, self._eos)
        return MaskInfo(bm.popcount(r), sliced)

    def mask_stats(self) -> MaskStats:
        """The masks made; the work inside the engine is not seen here (a strategy that
        counts it overrides this)."""
        return MaskStats.unknown(self.n_masks)

    def _accepting_safe(self) -> bool:
        try:
            return self._accepting()
        except Exception as e:  # noqa: BLE001
            self._fail(e)
            return False

    def accept_token(self, token_id: int) -> bool:
        """Consume one token; False (state unchanged) when the mask would not allow it."""
        t = check_token_id(token_id)  # a TypeError for 3.0, before the engine is called
        if t < 0 or t >= self.vocab.size:
            return False
        if t in self.vocab.eos_ids:
            if self._terminated or self.error is not None or self._accepting_safe():
                self._terminated = True
                self._history.append(EOS_RECORD)
                self._tokens.append(t)
                return True
            return False
        if self._terminated or self.error is not None:
            return False
        if (not self.vocab.token_bytes[t] or self.vocab.is_special(t)) and t not in self.special_ids:
            return False
        return self._accept_text(t)

    def _accept_text(self, t: int) -> bool:
        """``accept_token``'s text path: ``t`` is a text token, the matcher live."""
        try:
            record = self._advance(t, self.vocab.token_bytes[t])
        except Exception as e:  # noqa: BLE001
            self._fail(e)
            return False
        if record is None:
            return False
        self._push_history(record, t)
        return True

    def _push_history(self, record: Any, token: int) -> None:
        """Note a consumed token and its undo record (a batch that accepted it itself calls this)."""
        self._history.append(record)
        self._tokens.append(token)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (EOS included)."""
        n = check_count(n)
        if n < 0 or n > len(self._history):
            raise ValueError(f"cannot roll back {n} tokens, {len(self._history)} accepted")
        for _ in range(n):
            record = self._history.pop()
            self._tokens.pop()
            if record is not EOS_RECORD:
                self._undo(record)
        self._terminated = any(r is EOS_RECORD for r in self._history)

    def reset(self) -> None:
        """Back to the start state; clears the error state."""
        self._reset_state()
        self._history.clear()
        self._tokens.clear()
        self._terminated = False
        self.error = None

    def fork(self) -> BaseMatcher:
        """An independent matcher in the same state."""
        other = self._copy()
        other.error = self.error
        other._terminated = self._terminated
        other._history = list(self._history)
        other._tokens = list(self._tokens)
        return other

    def last_token(self) -> int | None:
        """The last token consumed (None: none yet)."""
        return self._tokens[-1] if self._tokens else None

    def is_accepting(self) -> bool:
        """True when what was consumed is a sentence of the grammar (or EOS was accepted)."""
        return self._terminated or self._accepting_safe()

    def is_terminated(self) -> bool:
        """True once an EOS token has been accepted."""
        return self._terminated

    @property
    def num_tokens(self) -> int:
        """Tokens accepted so far (what ``rollback`` can undo)."""
        return len(self._history)


class NativeMatcher(MatcherBase):
    """A matcher of masklab's own strategies: the whole protocol runs in C, in a
    :class:`toolkit.core.session.Session` over the strategy's core (its parse state and undo
    stack), so the single calls here and a batch's step (:func:`toolkit.core.batch.make_batch`,
    without the GIL) are one code path.  The rules are :class:`BaseMatcher`'s.

    A subclass sets ``engine``, ``compiled`` and ``session`` and gives
    ``_new_core()`` (the core at the grammar's start, for ``reset``)."""

    vocab: Vocabulary
    session: Any
    compiled: Any

    def _new_core(self) -> Any:
        raise NotImplementedError

    @property
    def error(self) -> str | None:
        """Why the matcher is in the sticky error state (None: it is not)."""
        return self.session.error

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> MaskInfo:
        """Overwrite ``bitmask[row]`` with the allowed tokens; see the protocol."""
        allowed, sliced = self.session.fill_bitmask(bitmask, row)
        return MaskInfo(allowed, sliced)

    def accept_token(self, token_id: int) -> bool:
        """Consume one token; False (state unchanged) when the mask would not allow it."""
        return self.session.accept_token(check_token_id(token_id))  # (the session would read 3.0 as 3)

    def accept_allowed(self, token_id: int) -> bool:
        """:meth:`accept_token` for a token the caller knows its last mask allowed."""
        return self.session.accept_token(check_token_id(token_id))

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (EOS included)."""
        self.session.rollback(check_count(n))  # (the session would read True as 1)

    def reset(self) -> None:
        """Back to the start state; clears the error state."""
        self.session.restart(self._new_core())

    def fork(self) -> NativeMatcher:
        """An independent matcher in the same state."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.session = self.session.fork(self.session.core.copy())
        return other

    def is_accepting(self) -> bool:
        """True when what was consumed is a sentence of the grammar (or EOS was accepted)."""
        return self.session.is_accepting()

    def is_terminated(self) -> bool:
        """True once an EOS token has been accepted."""
        return self.session.is_terminated()

    @property
    def num_tokens(self) -> int:
        """Tokens accepted so far (what ``rollback`` can undo)."""
        return self.session.num_tokens

    def last_token(self) -> int | None:
        """The last token consumed (None: none yet)."""
        return self.session.last_token()

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """The bytes every completion starts with, found in C: while the state does not
        accept, the one byte of the 256 the core takes (see the protocol)."""
        return self.session.forced_bytes(limit)

    def allows_bytes(self, data: bytes) -> bool:
        """Whether the core takes ``data`` next (raw bytes, in C; the state unchanged)."""
        return self.session.allows_bytes(data)

    def prepare_forced(self) -> None:
        """The protocol's, the session's tokens sorted for the chop in C, and the
        vocabulary's C tokenizer (:class:`~toolkit.core.bpe.BpeTable`) where it has one."""
        super().prepare_forced()
        self.session.V.prepare_chop()
        BpeTable.of(self.vocab)

    def forced_tokens(self) -> list[int]:
        """The protocol's forced tokens, the chop's trie walks in C (the session tries
        each extension byte once, without the GIL): the same tokens as the Python rule."""
        forced = self.forced_bytes()
        if not forced:
            return []
        return self.tokens_of_forced(forced)

    def tokens_of_forced(self, forced: bytes) -> list[int]:
        """The protocol's rule in one C call where the vocabulary's tokenizer is a BPE
        that :class:`~toolkit.core.bpe.BpeTable` reads (:meth:`Session.forced_tokens_c`:
        the canonical tokens and the chop without the GIL); else the Python rule with the
        chop in C (:meth:`Session.chop_tokens`)."""
        bpe = BpeTable.of(self.vocab)
        if bpe is not None:
            got = self.session.forced_tokens_c(bpe, forced)
            if got is not None:
                return got
        return tokens_for_forced(self.vocab, self.last_token(), forced, self.allows_bytes, self.session.chop_tokens)

    def fill_draft_bitmasks(self, draft: Sequence[int], bitmask: np.ndarray, row: int = 0) -> int:
        """The draft's masks in one C call: fill, accept, fill... then undo (see the protocol)."""
        draft, _, row = check_draft(draft, bitmask, row, len(draft) + 1, self.vocab.size)
        return self.session.fill_draft_bitmasks(draft, bitmask, row)

    def fill_draft_tree(self, tokens: Sequence[int], parents: Sequence[int], bitmask: np.ndarray,
                        row: int = 0) -> np.ndarray:
        """The draft tree's masks in one C call (see the protocol)."""
        if len(parents) != len(tokens):
            raise ValueError(f"{len(tokens)} tokens but {len(parents)} parents")
        tokens, parents, row = check_draft(tokens, bitmask, row, len(tokens) + 1, self.vocab.size, parents)
        return self.session.fill_draft_tree(tokens, parents, bitmask, row)


class CompiledTables(CompiledBase):
    """A grammar compiled into a strategy's C tables: what ``compile`` returns for the
    table-driven strategies (``llguidance``, ``xgrammar``).  ``kind`` is how the input
    was given (``grammar``, ``regex``, ``json_schema``), ``symbols`` the numbering of
    the tables, ``timings`` the build seconds by phase."""

    def __init__(self, grammar: Any, tables: Any, kind: str, symbols: dict[str, Any],
                 timings: dict[str, float]) -> None:
        self.grammar = grammar
        self.tables = tables
        self.kind = kind
        self.symbols = symbols
        self.timings = timings

    def memory_bytes(self) -> int:
        return int(self.tables.memory_bytes())


class StrategyEngine(EngineBase):
    """What masklab's own engines share: :meth:`describe` records the package version
    and the engine's ``options`` dict, as the harness stores them; ``vocab_table`` is
    the vocabulary in C for the native matchers (made once per engine); :meth:`compile`
    runs the engine's ``_compile`` in the engine's own memo scope (:mod:`toolkit.core.memo`:
    the DFAs and schema fragments of its earlier compiles are kept, as a server's engine
    instance keeps them), or, with the option ``memo=False``, in the default scope that
    the harness empties before every compile (a cold start each time)."""

    options: dict[str, Any]
    vocab: Vocabulary

    def _compile(self, spec: Any) -> Any:
        raise NotImplementedError

    def _matcher(self, compiled: Any) -> Any:
        raise NotImplementedError

    def compile(self, spec: Any) -> Any:
        """Compile ``spec`` (what the engine accepts: see its ``_compile``).  A grammar
        with special tokens is compiled by this engine's sibling over the vocabulary
        view of those tokens (:func:`special_compile`), whatever form it came in
        (:func:`early_ir`).  The whole compile runs under the
        engine's ``compile_timeout`` (:func:`toolkit.core.errors.deadline`)."""
        memo = self.options.get("memo", True)
        with deadline(self.options.get("compile_timeout", DEFAULT_COMPILE_TIMEOUT)):
            with self.memo.active() if memo else nullcontext():
                spec = early_ir(self.name, spec, self.options)
            refuse_token_limits(self.name, spec)
            special = special_compile(self, spec)
            if special is not None:
                return special
            if not memo:
                return self._compile(spec)
            with self.memo.active():
                return self._compile(spec)

    def matcher(self, compiled: Any) -> Any:
        """A matcher at the start of ``compiled`` (made by the engine that compiled it)."""
        return with_duals(self.vocab, compiled, compiled_by(self, compiled)._matcher(compiled))

    @property
    def memo(self) -> MemoScope:
        """The engine's memo scope (made on first use)."""
        scope = self.__dict__.get("_memo")
        if scope is None:
            scope = self.__dict__["_memo"] = MemoScope(self.name)
        return scope

    def clear_memo(self) -> None:
        """Forget what the engine memoized (the harness does after its warm-up)."""
        self.memo.clear()

    @property
    def vocab_table(self) -> Any:
        table = self.__dict__.get("_vocab_table")
        if table is None:
            table = self.__dict__["_vocab_table"] = VocabTable(self.vocab)
        return table


def refuse_token_limits(engine: str, spec: Any) -> None:
    """:class:`~toolkit.core.errors.UnsupportedGrammar` for a grammar whose rules limit their
    tokens (llguidance's ``name[max_tokens=N]``): the mask would depend on how many
    tokens the lexeme took, which an engine that only follows bytes cannot honour."""

    if isinstance(spec, Grammar):
        for rule, attrs in spec.attributes.items():
            if "max_tokens" in attrs:
                raise UnsupportedGrammar(f"rule {rule}[max_tokens={attrs['max_tokens']}]: {engine} follows bytes and "
                                         "does not count a lexeme's tokens (peer:llguidance does)")


def compiled_by(engine: Any, compiled: Any) -> Any:
    """The engine that made ``compiled``: ``engine``, or the sibling over a vocabulary
    view that compiled a grammar with special tokens for it (:func:`special_compile`)."""
    return engine if compiled.owner is None else compiled.owner


def special_compile(engine: Any, spec: Any) -> Any:
    """For a :class:`~toolkit.grammar.Grammar` with special-token terminals: the grammar
    bound to ``engine``'s vocabulary, compiled by a sibling engine (same class, same
    options) over :func:`toolkit.grammar.special.vocab_view` of its tokens (made once per set of
    tokens), the result's ``owner`` set to it and ``duals`` to the ids with shadows; None
    for any other ``spec``."""
    if not isinstance(spec, Grammar) or not spec.special_terminals or spec.bound_to is not None:
        return None
    ids = spec.special_ids(engine.vocab)
    siblings = engine.__dict__.setdefault("_special_siblings", {})
    made = siblings.get(ids)
    if made is None:
        made = siblings[ids] = (type(engine)(vocab_view(engine.vocab, ids), **engine.options),
                                dual_ids(engine.vocab, ids))
    sub, duals = made
    compiled = sub.compile(spec.bind(engine.vocab))
    compiled.owner = sub
    compiled.duals = duals
    return compiled


def with_duals(vocab: Vocabulary, compiled: Any, matcher: Any) -> Any:
    """``matcher``, wrapped in a :class:`DualMatcher` over ``vocab`` when ``compiled`` was
    made over a view of it with shadows (:func:`special_compile`)."""
    return DualMatcher(matcher, vocab, DualTables.of(compiled, vocab.size)) if compiled.duals else matcher


class DualTables:
    """What every matcher of one compiled grammar with shadows shares (made once, kept
    on the compiled grammar): ``shadow[t]``, the shadow id of token ``t`` (-1: none), and
    ``runs``, ``(shadow bit, token bit, length)`` per run of consecutive ids in ``duals``
    (their shadows, from ``size`` on, are consecutive too)."""

    def __init__(self, size: int, duals: tuple[int, ...]) -> None:
        ids = np.asarray(duals, dtype=np.int64)
        self.ids = ids  # the real id of shadow ``size + i``
        self.shadow = np.full(size, -1, dtype=np.int64)
        self.shadow[ids] = size + np.arange(len(ids), dtype=np.int64)
        starts = np.flatnonzero(np.diff(ids, prepend=-2) != 1)  # where a run of consecutive ids begins
        lengths = np.diff(np.append(starts, len(ids)))
        self.runs = np.ascontiguousarray(np.stack([size + starts, ids[starts], lengths], axis=1), dtype=np.int64)

    @classmethod
    def of(cls, compiled: Any, size: int) -> DualTables:
        """The tables of ``compiled`` (made on first use)."""
        tables = compiled.__dict__.get("_dual_tables")
        if tables is None:
            tables = compiled.__dict__["_dual_tables"] = cls(size, compiled.duals)
        return tables


class DualMatcher(MatcherBase):
    """A matcher over a vocabulary view with shadows (:mod:`toolkit.grammar.special`'s tokens with
    another meaning), seen over the real vocabulary: a mask ORs each shadow's bit into
    its id's; a token whose shadow the grammar can take is taken as the shadow (one
    token-level terminal), else as its text.  Everything else is the inner matcher's."""

    def __init__(self, inner: Any, vocab: Vocabulary, tables: DualTables) -> None:
        self.inner = inner
        self.vocab = vocab
        self.size = vocab.size
        self.tables = tables
        self._scratch = bm.allocate(inner.vocab.size, 1)

    @property
    def error(self) -> str | None:
        return self.inner.error

    @property
    def compiled(self) -> Any:
        """The inner matcher's compiled grammar.  (Its ``session`` stays hidden: a batch
        would step the inner matcher over the view, past this one.)"""
        return self.inner.compiled

    def mask_stats(self) -> MaskStats:
        """The inner matcher's work (the fold of the shadows is not counted)."""
        return self.inner.mask_stats()

    def last_token(self) -> int | None:
        """The last token consumed, a shadow read as its real id."""
        t = self.inner.last_token()
        return int(self.tables.ids[t - self.size]) if t is not None and t >= self.size else t

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """The inner matcher's, up to a shadow's mark (a token-level terminal is not
        forced through the view: its real token may also be read as text)."""
        forced = self.inner.forced_bytes(limit)
        cut = forced.find(b"\xff")
        return forced if cut < 0 else forced[:cut]

    def allows_bytes(self, data: bytes) -> bool:
        """The inner matcher's (the text is the same over the view)."""
        return self.inner.allows_bytes(data)

    def __getattr__(self, name: str) -> Any:
        # stats, engine, state: the inner matcher's; not its private state
        if name == "inner" or name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> MaskInfo:
        """Overwrite ``bitmask[row]`` with the allowed tokens; see the protocol."""
        r = check_bitmask_row(bitmask, row, self.size)
        n = bm.words(self.size)
        info = self.inner.fill_bitmask(self._scratch, 0)
        inner = self._scratch[0]
        r[:] = inner[:n]
        if self.size % 32:
            r[n - 1] &= np.int32((1 << (self.size % 32)) - 1)
        or_bit_runs(inner, r, self.tables.runs)
        return MaskInfo(bm.popcount(r), info.sliced)

    def accept_token(self, token_id: int) -> bool:
        """Consume one token; False (state unchanged) when the mask would not allow it."""
        t = check_token_id(token_id)
        if not 0 <= t < self.size:
            return False
        shadow = int(self.tables.shadow[t])
        if shadow < 0:
            return self.inner.accept_token(t)
        return self.inner.accept_token(shadow) or self.inner.accept_token(t)

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (EOS included)."""
        self.inner.rollback(n)

    def reset(self) -> None:
        """Back to the start state; clears the error state."""
        self.inner.reset()

    def fork(self) -> DualMatcher:
        """An independent matcher in the same state."""
        return DualMatcher(self.inner.fork(), self.vocab, self.tables)

    def is_accepting(self) -> bool:
        return self.inner.is_accepting()

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()


class GrammarEngine(StrategyEngine):
    """A :class:`StrategyEngine` that compiles a :class:`~toolkit.grammar.Grammar`, a
    JSON schema (with its ``whitespace``) or a regex: :meth:`grammar_for`."""

    name: str
    whitespace: str
    #: how schema strings may be written (:data:`toolkit.jsonschema.compiler.SPELLINGS`)
    spelling: str = "json"

    def grammar_for(self, spec: Any) -> tuple[Any, str]:
        """``(Grammar, kind)`` for what ``compile`` accepts (:func:`read_input`: a schema
        under the engine's ``max_rules`` and ``max_schema_depth``)."""
        return read_input(self.name, spec, self.options, whitespace=self.whitespace, spelling=self.spelling)
