"""The protocol every mask strategy implements.

Names follow vLLM's structured-output interface (``fill_bitmask``,
``accept_tokens``, ``validate_tokens``, ``rollback``, ``is_terminated``, ``reset``)
so that thin adapters can plug masklab engines into vLLM and transformers.

Contract, shared by every engine and checked by the conformance tests:

* ``fill_bitmask(bitmask, row)`` overwrites the whole row (int32 words, bit
  ``t % 32`` of word ``t // 32``); padding ids are 0, special ids other than EOS are 0
  unless the grammar names them as tokens (:mod:`toolkit.grammar.special`); EOS ids are 1
  exactly when the grammar accepts what was consumed.
* ``accept_token(t)`` returns False for a token the mask does not allow and leaves
  the state unchanged; nothing raises mid-decode.
* Arguments of the wrong kind are refused before the state is touched: a bitmask that
  is not writeable int32 words is a ValueError (:func:`check_bitmask_row`), a token id
  that is not an integer (``3.0``) a TypeError (:func:`check_token_id`).
* After an EOS id is accepted the matcher is terminated: the mask is EOS-only and
  only EOS is accepted.
* A limit hit or an internal failure puts the matcher in a sticky error state
  (``matcher.error`` says why) whose mask allows only EOS, so a mask is never
  widened by a failure.

The batch half (:class:`BatchMatcher`, made by :func:`toolkit.core.batch.make_batch`): one
``step(tokens, bitmask)`` accepts each row's sampled token and fills its next mask, for
B matchers at once and without the GIL where the engine can; results and states equal
the single calls'.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np

from toolkit.core import bitmask as bm
from toolkit.core.forced import TokenExtensions
from toolkit.core.forced import forced_tokens as tokens_for_forced
from toolkit.core.version import masklab_version

__all__ = ["Capabilities", "FORCED_LIMIT", "MAX_DRAFT", "check_bitmask_row", "check_count", "check_draft",
           "check_draft_rows", "check_token_id", "MaskInfo", "MaskStats", "Matcher", "MatcherBase", "MaskEngine", "EngineBase", "CompiledGrammar", "CompiledBase", "BatchMatcher", "BatchStep"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine can do, read without building it (a class attribute,
    ``EngineBase.capabilities``): the conformance suite (``tests/conformance``) picks the
    checks an engine takes from it, and ``masklab engines`` lists it.  The defaults are
    what the base classes give an engine with nothing of its own (:class:`MatcherBase`'s
    forced bytes read from masks, the fork-and-fill drafts, the threaded batch, no work
    counters, no special tokens); a strategy states what it adds, and what it lacks of
    the rest (a regular-only engine, a vocabulary it refuses).

    * ``lexing``: ``"scannerless"`` (the masks of the :class:`~toolkit.grammar.ir.Grammar`'s
      own language, ``naive``'s) or ``"lexer"`` (llguidance's lexing: greedy lexemes,
      ``%ignore`` text only before a lexeme; the masks of our ``llguidance``, which differ
      from ``naive``'s where the lexing does: ``strategies/llguidance/engine.py``);
    * ``grammars``: ``"context-free"`` (every :class:`~toolkit.grammar.ir.Grammar`) or
      ``"regular"`` (a recursive grammar is refused with
      :class:`~toolkit.core.errors.UnsupportedGrammar`);
    * ``batch``: ``"native"`` (its own :meth:`MaskEngine.batch_matcher`, without the GIL)
      or ``"threads"`` (:func:`toolkit.core.batch.make_batch`'s fallback);
    * ``forced``: ``"bytes"`` (``forced_bytes`` is the byte-level definition: the one byte
      the grammar takes next) or ``"masks"`` (read from masks, so a byte no token spells
      alone is not seen);
    * ``drafts``: ``"native"`` (its own draft walk) or ``"fork"`` (the protocol's
      fork, fill and accept);
    * ``special_tokens``: a grammar may name special tokens (token-level terminals);
    * ``work_counters``: :class:`MaskStats` counts work (False: the fields are None, an
      engine that cannot see its own work);
    * ``any_vocabulary``: compiles over every vocabulary (outlines-core refuses one where a
      token leads into a state that no token continues);
    * ``partial_utf8``: allows tokens that are not UTF-8 alone (a byte of a character);
    * ``mask_cost``: ``"fast"`` (microseconds a mask over a 128k vocabulary) or ``"slow"``
      (milliseconds and more: suites over real tokenizers leave it out);
    * ``work_limit``: the integer option that bounds the parser's work for one token
      (Earley items of a row, stacks), whose error names it; None: no such option.
    """

    lexing: Literal["scannerless", "lexer"] = "scannerless"
    grammars: Literal["context-free", "regular"] = "context-free"
    batch: Literal["native", "threads"] = "threads"
    forced: Literal["bytes", "masks"] = "masks"
    drafts: Literal["native", "fork"] = "fork"
    special_tokens: bool = False
    work_counters: bool = False
    any_vocabulary: bool = True
    partial_utf8: bool = True
    mask_cost: Literal["fast", "slow"] = "fast"
    work_limit: str | None = None

    def __post_init__(self) -> None:
        for key, valid in (("lexing", ("scannerless", "lexer")), ("grammars", ("context-free", "regular")), ("batch", ("native", "threads")),
                           ("forced", ("bytes", "masks")), ("drafts", ("native", "fork")),
                           ("mask_cost", ("fast", "slow"))):
            if getattr(self, key) not in valid:
                raise ValueError(f"Capabilities.{key} is one of {', '.join(map(repr, valid))}, "
                                 f"got {getattr(self, key)!r}")

    def as_dict(self) -> dict[str, Any]:
        """The fields by name (run.json and ``masklab engines`` show them)."""
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(frozen=True, slots=True)
class MaskInfo:
    """What one ``fill_bitmask`` produced: the allowed count and whether slices were used."""

    allowed: int
    sliced: bool = False


MAX_DRAFT = 256
"""The longest draft (tokens) the harness checks at once (``masklab bench --draft``):
what a wrapped engine's rollback buffer is sized for (``peer:outlines-core``)."""

FORCED_LIMIT = 4096
"""The most bytes one ``forced_bytes()`` call gives (a grammar can force a long literal)."""


@dataclass(frozen=True, slots=True)
class MaskStats:
    """The work a matcher did since it was made, counted the same way by every engine
    (``Matcher.mask_stats()``), so that a report can compare work and not only time.

    ``masks`` counts ``fill_bitmask`` calls.  The other fields count the units of work
    of the three designs (both fills and accepts); an engine that has no such unit
    counts 0, and one that cannot see inside itself (the peers) gives None:

    * ``trie_nodes``: token-trie nodes visited while filling a mask (llguidance's walk,
      xgrammar's context-dependent checks, naive's shared-prefix walk);
    * ``lexer_steps``: transitions of a lexer or byte DFA (a byte read);
    * ``earley_items``: Earley items added to a chart or row;
    * ``tokens_checked``: tokens whose verdict took a check of their own (xgrammar's
      uncertain tokens, naive's every token);
    * ``tokens_sliced``: tokens decided in bulk by a precomputed slice (llguidance's slicer);
    * ``tokens_cached``: tokens decided by a lookup in a precomputed table (the outlines
      index, xgrammar's adaptive token cache).
    """

    masks: int = 0
    trie_nodes: int | None = 0
    lexer_steps: int | None = 0
    earley_items: int | None = 0
    tokens_checked: int | None = 0
    tokens_sliced: int | None = 0
    tokens_cached: int | None = 0

    #: the work fields, in order (``masks`` not included)
    WORK: ClassVar[tuple[str, ...]] = ("trie_nodes", "lexer_steps", "earley_items", "tokens_checked", "tokens_sliced", "tokens_cached")

    @classmethod
    def unknown(cls, masks: int) -> MaskStats:
        """Only the mask count known (an engine that cannot see inside itself)."""
        return cls(masks, None, None, None, None, None, None)

    def as_dict(self) -> dict[str, int | None]:
        return {"masks": self.masks, **{k: getattr(self, k) for k in self.WORK}}

    def __sub__(self, other: MaskStats) -> MaskStats:
        """The work done between two readings of one matcher."""
        vals = [None if a is None or b is None else a - b
                for a, b in ((getattr(self, k), getattr(other, k)) for k in self.WORK)]
        return MaskStats(self.masks - other.masks, *vals)

    def __add__(self, other: MaskStats) -> MaskStats:
        vals = [None if a is None or b is None else a + b
                for a, b in ((getattr(self, k), getattr(other, k)) for k in self.WORK)]
        return MaskStats(self.masks + other.masks, *vals)


@runtime_checkable
class CompiledGrammar(Protocol):
    """An engine's compiled form of a grammar; engine-specific, shared by its matchers.

    The harness reads ``memory_bytes()``, ``stats()`` (the engine's own figures: states,
    build phases; informative) and ``engine_s`` (the seconds of the engine's own compile
    calls where they are timed apart from masklab's adapter, else None); the special-token
    machinery reads ``owner`` and ``duals`` (:func:`strategies._base.special_compile`).
    :class:`CompiledBase` gives the defaults."""

    engine_s: float | None
    owner: Any
    duals: tuple[int, ...]

    def memory_bytes(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...


class CompiledBase:
    """The defaults of :class:`CompiledGrammar`'s attributes: no timing of its own, made
    by the engine it was asked of, no figures of its own."""

    engine_s: float | None = None
    #: the sibling engine over a vocabulary view that compiled it (None: the engine asked)
    owner: Any = None
    #: the ids that have a shadow in that view (:mod:`toolkit.grammar.special`)
    duals: tuple[int, ...] = ()
    #: what the compile left unenforced, as ``{"keyword", "message"}`` dicts (``"pointer"``
    #: and ``"count"`` where known): empty for masklab's strategies, which refuse what
    #: they cannot enforce; a peer's keeps its engine's warnings (:mod:`strategies.peers`)
    unenforced: tuple[dict[str, Any], ...] = ()

    def stats(self) -> dict[str, Any]:
        """The engine's own figures (none)."""
        return {}


@runtime_checkable
class Matcher(Protocol):
    """Per-sequence state; independent of every other matcher.

    Besides the calls, the harness and the batch read ``compiled`` (the compiled grammar
    it runs: matchers of one share its tables), ``session`` (the C session of masklab's
    own strategies, :class:`toolkit.core.session.Session`, or None), ``times_engine`` and
    ``engine_s`` (the seconds of the engine's own calls, where the matcher times them
    apart from masklab's adapter) and ``accept_allowed`` (accept a token the last mask
    allowed).  :class:`MatcherBase` gives the defaults."""

    error: str | None
    compiled: Any
    session: Any
    times_engine: bool
    engine_s: float

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> MaskInfo: ...
    def accept_token(self, token_id: int) -> bool: ...
    def accept_tokens(self, token_ids: Sequence[int]) -> int: ...
    def validate_tokens(self, token_ids: Sequence[int]) -> int: ...
    def rollback(self, n: int) -> None: ...
    def reset(self) -> None: ...
    def fork(self) -> Matcher: ...
    def is_accepting(self) -> bool: ...
    def is_terminated(self) -> bool: ...
    def accept_allowed(self, token_id: int) -> bool: ...
    def mask_stats(self) -> MaskStats: ...
    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes: ...
    def forced_tokens(self) -> list[int]: ...
    def prepare_forced(self) -> None: ...
    def tokens_of_forced(self, forced: bytes) -> list[int]: ...
    def allows_bytes(self, data: bytes) -> bool: ...
    def fill_draft_bitmasks(self, draft: Sequence[int], bitmask: np.ndarray, row: int = 0) -> int: ...
    def fill_draft_tree(self, tokens: Sequence[int], parents: Sequence[int], bitmask: np.ndarray,
                        row: int = 0) -> np.ndarray: ...


class MatcherBase:
    """The defaults of :class:`Matcher`'s attributes, and ``accept_tokens``,
    ``validate_tokens`` and ``accept_allowed`` from ``accept_token`` and ``rollback``;
    the jump-forward and draft calls from the same calls (exact, but a mask per forced
    byte: engines with a byte-level core give their own).  They read ``vocab`` (the
    matcher's vocabulary) and ``last_token()``."""

    compiled: Any = None
    session: Any = None
    times_engine: bool = False
    engine_s: float = 0.0

    def accept_token(self, token_id: int) -> bool:
        raise NotImplementedError

    def rollback(self, n: int) -> None:
        raise NotImplementedError

    def mask_stats(self) -> MaskStats:
        """The work counters of the C session (masklab's own strategies); an engine
        without one overrides this."""
        if self.session is None:
            raise NotImplementedError(f"{type(self).__name__} has no session: it must give mask_stats()")
        return MaskStats(**self.session.work())

    def accept_allowed(self, token_id: int) -> bool:
        """:meth:`accept_token` for a token the caller knows its last mask allowed (a
        sampled token); an engine may skip its own check then.  Same result."""
        return self.accept_token(token_id)

    def accept_tokens(self, token_ids: Sequence[int]) -> int:
        """Consume tokens until one is rejected; returns how many were consumed.  Every
        id is checked first (:func:`check_token_id`): one that is not an integer is a
        TypeError before any token is taken."""
        n = 0
        for t in [check_token_id(t) for t in token_ids]:
            if not self.accept_token(t):
                break
            n += 1
        return n

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """Length of the longest accepted prefix of ``token_ids``; the state is unchanged."""
        n = self.accept_tokens(token_ids)
        self.rollback(n)
        return n

    def last_token(self) -> int | None:
        """The last token consumed (None: none yet)."""
        raise NotImplementedError

    # ------------------------------------------------------------ jump-forward --

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """The bytes every completion of the current state starts with: none once the
        state is accepting (EOS may come next), terminated or failed; at most ``limit``.
        The state is unchanged.

        This default reads them from masks: a byte is forced when every allowed token
        starts with it; the matcher then takes that byte's single-byte token (it stops
        where the vocabulary has none).  It is exact where every byte the grammar allows
        has a token of its own (byte-level and byte-fallback vocabularies: Llama 3,
        Mistral, Tekken); in a vocabulary without one, a byte no token can write is not
        seen (``"name"`` then ``"s" | "x"`` with no token ``s``: ``x`` is forced)."""
        single = TokenExtensions.of(self.vocab).single
        row = bm.allocate(self.vocab.size)
        out = bytearray()
        try:
            while len(out) < limit and self.error is None and not self.is_accepting():
                self.fill_bitmask(row)
                firsts = {self.vocab.token_bytes[t][:1] for t in bm.allowed_ids(row[0], self.vocab.size).tolist()}
                if len(firsts) != 1:
                    break
                (b,) = firsts
                if not b or single.get(b) is None or not self.accept_token(single[b]):
                    break
                out += b
        finally:
            self.rollback(len(out))
        return bytes(out)

    def prepare_forced(self) -> None:
        """Build what :meth:`forced_tokens` reads once per vocabulary (the tokens sorted by
        their bytes) now: a decoding loop calls it before its first step, so no step pays
        for it."""
        TokenExtensions.of(self.vocab)

    def allows_bytes(self, data: bytes) -> bool:
        """Whether ``data`` can follow what was consumed (the grammar's prefix check,
        byte by byte); the state is unchanged.  This default consumes single-byte tokens
        (False where the vocabulary has none for a byte)."""
        single = TokenExtensions.of(self.vocab).single
        n = 0
        try:
            for b in data:
                t = single.get(bytes([b]))
                if t is None or not self.accept_token(t):
                    return False
                n += 1
            return True
        finally:
            self.rollback(n)

    def forced_tokens(self) -> list[int]:
        """The tokens of :meth:`forced_bytes` to feed without sampling: their canonical
        tokenization, minus trailing tokens the next token could merge with
        (:mod:`toolkit.core.forced`, llguidance's rule).  The state is unchanged."""
        forced = self.forced_bytes()
        if not forced:
            return []
        return self.tokens_of_forced(forced)

    def tokens_of_forced(self, forced: bytes) -> list[int]:
        """The tokens to feed for ``forced``, the bytes :meth:`forced_bytes` gives in the
        current state (:func:`toolkit.core.forced.forced_tokens`)."""
        return tokens_for_forced(self.vocab, self.last_token(), forced, self.allows_bytes)

    # ------------------------------------------------------------ draft masks --

    def fill_draft_bitmasks(self, draft: Sequence[int], bitmask: np.ndarray, row: int = 0) -> int:
        """The masks of a speculative draft of k tokens, in rows ``row .. row + k``:
        row ``row + i`` is the mask after ``draft[:i]``.  At the first draft token its row
        does not allow (or the matcher refuses) the rows after it are zero.  Returns how
        many draft tokens were accepted; the state is unchanged."""
        k = len(draft)
        draft, _, row = check_draft(draft, bitmask, row, k + 1, self.vocab.size)
        self.fill_bitmask(bitmask, row)
        n = 0
        try:
            for i, t in enumerate(draft):
                t = int(t)
                if not (0 <= t < self.vocab.size and bm.get_bit(bitmask[row + i], t) and self.accept_allowed(t)):
                    break
                n += 1
                self.fill_bitmask(bitmask, row + i + 1)
            bitmask[row + n + 1: row + k + 1] = 0
        finally:
            self.rollback(n)
        return n

    def fill_draft_tree(self, tokens: Sequence[int], parents: Sequence[int], bitmask: np.ndarray,
                        row: int = 0) -> np.ndarray:
        """The masks of a draft *tree* (tree speculation): node ``i`` is ``tokens[i]``
        after node ``parents[i]`` (-1: the current state; a parent comes before its
        children).  Row ``row`` is the current mask, row ``row + 1 + i`` the mask after
        the path to node ``i``, zero when that path is refused.  Returns which nodes were
        accepted (bools); the state is unchanged."""
        n = len(tokens)
        if len(parents) != n:
            raise ValueError(f"{n} tokens but {len(parents)} parents")
        tokens, parents, row = check_draft(tokens, bitmask, row, n + 1, self.vocab.size, parents)
        ok = np.zeros(n, dtype=bool)
        self.fill_bitmask(bitmask, row)
        path: list[int] = []  # the nodes consumed now, root first
        try:
            for i in range(n):
                p = int(parents[i])
                if not -1 <= p < i:
                    raise ValueError(f"node {i}: parent {p} is not an earlier node or -1")
                t = int(tokens[i])
                prow = row if p < 0 else row + 1 + p
                if (p >= 0 and not ok[p]) or not (0 <= t < self.vocab.size and bm.get_bit(bitmask[prow], t)):
                    bitmask[row + 1 + i] = 0
                    continue
                chain = _chain(parents, p)
                keep = 0
                while keep < min(len(path), len(chain)) and path[keep] == chain[keep]:
                    keep += 1
                self.rollback(len(path) - keep)
                del path[keep:]
                for j in chain[keep:]:  # back down the parent's path (taken before, so taken again)
                    self.accept_allowed(int(tokens[j]))
                    path.append(j)
                if self.accept_allowed(t):
                    ok[i] = True
                    path.append(i)
                    self.fill_bitmask(bitmask, row + 1 + i)
                else:
                    bitmask[row + 1 + i] = 0
        finally:
            self.rollback(len(path))
        return ok


def check_token_id(token_id: Any) -> int:
    """``token_id`` as an ``int``: an integer of any integer type (``int``, a numpy
    integer, anything with ``__index__``), or a :class:`TypeError` saying what was given
    instead (a float such as ``3.0``, a string, a bool, an array).  Every matcher reads
    the ids it is given through this before its state is touched (an id that is an
    integer but no token of the grammar is not an error: the token is refused)."""
    if type(token_id) is int:  # (the common case, without a second call: this runs per accepted token)
        return token_id
    return _integer(token_id, "a token id")


def check_count(n: Any, what: str = "rollback") -> int:
    """``n`` as an ``int`` (a count of tokens, a row): an integer of any integer type,
    or a :class:`TypeError` naming ``what`` and what was given (``2.5``, ``True``, a
    string).  ``rollback`` and the draft calls read their counts through this before
    the state is touched."""
    return _integer(n, f"{what}: a count")


def _integer(value: Any, label: str) -> int:
    """``value`` as an ``int`` if it is an integer of some integer type (not a bool),
    else a TypeError: "``label`` is an integer, not ..."."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{label} is an integer, not a bool ({value!r})")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{label} is an integer, not {type(value).__name__} ({value!r})") from None


def check_draft(tokens: Sequence[Any], bitmask: Any, row: Any, n_rows: int, vocab_size: int,
                parents: Sequence[Any] | None = None) -> tuple[list[int], list[int] | None, int]:
    """The draft calls' arguments checked before the state is touched: every token id
    (:func:`check_token_id`) and parent an integer, ``row`` too, and ``bitmask`` writeable
    int32 words with rows ``row .. row + n_rows - 1`` (:func:`check_draft_rows`).
    Returns ``(tokens, parents, row)`` as ints."""
    ids = [check_token_id(t) for t in tokens]
    up = None if parents is None else [check_token_id(p) for p in parents]
    row = check_count(row, "row")
    check_bitmask_row(bitmask, 0, vocab_size)
    check_draft_rows(bitmask, row, n_rows, vocab_size)
    return ids, up, row


def check_bitmask_row(bitmask: Any, row: Any, vocab_size: int) -> np.ndarray:
    """Row ``row`` of ``bitmask`` (a 2-D array, or a 1-D row), after checking that it is
    what ``fill_bitmask`` writes: a writeable numpy int32 array whose last axis holds the
    vocabulary's ``words`` contiguously.  A ValueError otherwise (an IndexError for a row
    outside it), raised before anything is written or a matcher touched: a matcher that
    checks its bitmask with this before calling its engine stays as it was."""
    if not isinstance(bitmask, np.ndarray) or bitmask.dtype != np.int32:
        got = f"dtype {bitmask.dtype}" if isinstance(bitmask, np.ndarray) else type(bitmask).__name__
        raise ValueError(f"the bitmask must be a numpy int32 array, got {got}")
    if bitmask.ndim not in (1, 2) or not bitmask.flags.writeable:
        raise ValueError(f"the bitmask must be a writeable 1-D row or 2-D array, got shape {bitmask.shape}"
                         + ("" if bitmask.flags.writeable else " (read-only)"))
    n = bm.words(vocab_size)
    if bitmask.shape[-1] != n or (n > 1 and bitmask.strides[-1] != bitmask.itemsize):
        raise ValueError(f"bitmask row has {bitmask.shape[-1]} words (contiguous: "
                         f"{bitmask.strides[-1] == bitmask.itemsize}), vocabulary needs {n}")
    return bitmask[row] if bitmask.ndim == 2 else bitmask


def check_draft_rows(bitmask: np.ndarray, row: int, n: int, vocab_size: int) -> None:
    """Raise ValueError unless ``bitmask`` is 2-D with rows ``row .. row + n - 1`` of
    the vocabulary's width (the draft calls' rows)."""
    if bitmask.ndim != 2 or row < 0 or row + n > bitmask.shape[0]:
        raise ValueError(f"the draft needs rows {row}..{row + n - 1} of a 2-D bitmask; it has shape {bitmask.shape}")
    if bitmask.shape[1] != bm.words(vocab_size):
        raise ValueError(f"bitmask rows have {bitmask.shape[1]} words, the vocabulary needs {bm.words(vocab_size)}")


def _chain(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root down to ``node`` (empty for -1)."""
    out = []
    while node >= 0:
        out.append(node)
        node = int(parents[node])
    return out[::-1]


@dataclass(slots=True)
class BatchStep:
    """What one :meth:`BatchMatcher.step` did, row by row (arrays reused by the next step):
    ``accepted`` 1/0 (-1: no token given), ``allowed`` the tokens the new mask allows (-1:
    row skipped), ``seconds`` the row's accept + fill time (NaN where the engine's batch
    call does not time rows), ``wall_s`` the whole step's."""

    accepted: np.ndarray
    allowed: np.ndarray
    seconds: np.ndarray
    wall_s: float


@runtime_checkable
class BatchMatcher(Protocol):
    """B matchers stepped together; see :mod:`toolkit.core.batch` for the token codes."""

    matchers: list[Matcher]

    def step(self, tokens: Any, bitmask: np.ndarray) -> BatchStep: ...
    def close(self) -> None: ...


@runtime_checkable
class MaskEngine(Protocol):
    """A strategy: compiles grammars (startup cost) and makes matchers.

    What the harness, the decoding loop and the registry read of an engine, all of it
    here (:class:`EngineBase` gives the defaults):

    * ``name``; ``vocab``; ``options`` (what it was made with, recorded in run.json);
    * ``native_inputs``: the inputs ``compile`` takes through the engine's own front end
      besides a :class:`~toolkit.grammar.ir.Grammar` (``"json_schema"``, ``"lark"``);
    * ``schema_grammar``: whose JSON Schema compiler gives the language its masks follow
      for a schema (``"masklab"``: :func:`toolkit.jsonschema.from_json_schema`; ``"own"``);
    * ``requires``: the modules it imports when made (a class attribute: the registry
      lists an engine as available when they are installed);
    * ``describe()``: version and options, as run.json records them;
    * ``batch_matcher(matchers, threads)``: the engine's own batch of its matchers
      (None: :func:`toolkit.core.batch.make_batch` chooses);
    * ``clear_memo()``: forget what its compiles memoized (the harness's cold starts);
    * ``direct_check``: None, or a callable that gives the engine's own calls for a spec
      (the peers: the per-mask truth against the engines called directly);
    * ``capabilities``: what it can do (:class:`Capabilities`; a class attribute).
    """

    name: str
    vocab: Any
    options: dict[str, Any]
    native_inputs: frozenset[str]
    schema_grammar: str
    requires: tuple[str, ...]
    direct_check: Any
    capabilities: Capabilities

    def compile(self, grammar: Any) -> CompiledGrammar: ...
    def matcher(self, compiled: CompiledGrammar) -> Matcher: ...
    def describe(self) -> dict[str, Any]: ...
    def batch_matcher(self, matchers: Sequence[Matcher], threads: int) -> BatchMatcher | None: ...
    def clear_memo(self) -> None: ...


class EngineBase:
    """The defaults of :class:`MaskEngine`'s attributes: a :class:`~toolkit.grammar.ir.Grammar`
    only, masklab's schema language, nothing required, no batch or memo of its own.
    ``describe`` records masklab's version (an engine that wraps a package gives that
    package's)."""

    name: str = "engine"
    #: read-only here (one object for every engine without options of its own);
    #: an engine with options sets its own dict
    options: Mapping[str, Any] = MappingProxyType({})
    native_inputs: frozenset[str] = frozenset()
    schema_grammar: str = "masklab"
    requires: tuple[str, ...] = ()
    direct_check: Any = None
    capabilities: Capabilities = Capabilities()

    def describe(self) -> dict[str, Any]:
        """Version and options, as the harness records them."""
        return {"version": masklab_version(), "options": dict(self.options)}

    def batch_matcher(self, matchers: Sequence[Matcher], threads: int) -> BatchMatcher | None:
        """None: the engine has no batch of its own."""
        del matchers, threads
        return None

    def clear_memo(self) -> None:
        """Nothing to forget."""
