"""Strategy ``naive``: check every token against an incremental byte recognizer.

The seed algorithm of constrained decoding: for each text token, feed its bytes to
the grammar's recognizer (:class:`toolkit.grammar.earley.ByteRecognizer`, the same one that
defines :meth:`Grammar.accepts`) and allow the token when no byte is rejected.  No
precomputation, no lexer, nothing to get wrong: this engine is the oracle the other
strategies are tested against.

One economy, which does not change any answer: tokens are visited in byte order,
so the recognizer state for the prefix a token shares with the previous one is
kept (``share_prefixes=True``); once a prefix is rejected, every token starting
with it is rejected without more work.  ``share_prefixes=False`` feeds every token
from scratch, and the tests check that both agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strategies._base import (
    DEFAULT_COMPILE_TIMEOUT,
    SCHEMA_LIMITS,
    BaseMatcher,
    DualMatcher,
    check_compile_timeout,
    check_limit,
    compiled_by,
    read_input,
    refuse_token_limits,
    special_compile,
    with_duals,
)
from strategies.declared import BUILT_IN
from toolkit.core import bitmask as bm
from toolkit.core.errors import deadline
from toolkit.core.protocol import (
    FORCED_LIMIT,
    CompiledBase,
    EngineBase,
    MaskInfo,
    MaskStats,
)
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.earley import CFG, DEFAULT_MAX_ITEMS, ByteRecognizer, compile_cfg
from toolkit.grammar.ir import Grammar

__all__ = ["NaiveEngine", "NaiveCompiled", "NaiveMatcher"]


class NaiveCompiled(CompiledBase):
    """A grammar flattened for the byte recognizer."""

    def __init__(self, grammar: Grammar, cfg: CFG) -> None:
        self.grammar = grammar
        self.cfg = cfg

    def memory_bytes(self) -> int:
        return sum(int(d.memory_bytes()) for d in self.cfg.dfas if d is not None)


class NaiveEngine(EngineBase):
    """Checks every token; see the module doc.

    Options: ``max_items`` (Earley items per chart before the matcher fails with
    :class:`~toolkit.core.errors.LimitExceeded` naming it), ``share_prefixes`` (see module
    doc), ``max_rules`` and ``max_schema_depth`` (the JSON schema compiler's limits) and
    ``compile_timeout`` (seconds one ``compile`` may take, default 60, 0: none; past it,
    :class:`~toolkit.core.errors.TimeLimitExceeded` naming the option and where).
    """

    name = "naive"
    capabilities = BUILT_IN["naive"].capabilities

    def __init__(self, vocab: Vocabulary, *, max_items: int = DEFAULT_MAX_ITEMS, share_prefixes: bool = True,
                 max_rules: int = SCHEMA_LIMITS["max_rules"], max_schema_depth: int = SCHEMA_LIMITS["max_schema_depth"],
                 compile_timeout: float = DEFAULT_COMPILE_TIMEOUT) -> None:
        self.vocab = vocab
        self.max_items = int(max_items)
        self.share_prefixes = bool(share_prefixes)
        self.max_rules = check_limit("max_rules", max_rules)
        self.max_schema_depth = check_limit("max_schema_depth", max_schema_depth)
        self.compile_timeout = check_compile_timeout(compile_timeout)
        ids = vocab.text_token_ids()
        tb = vocab.token_bytes
        order = sorted((int(i) for i in ids), key=tb.__getitem__)
        self._order = order
        self._tokens = [tb[i] for i in order]
        # lcp[k]: bytes token k shares with token k-1 in byte order.
        lcp = [0] * len(order)
        prev = b""
        for k, cur in enumerate(self._tokens):
            n = min(len(prev), len(cur))
            i = 0
            while i < n and prev[i] == cur[i]:
                i += 1
            lcp[k] = i
            prev = cur
        self._lcp = lcp

    @property
    def options(self) -> dict[str, Any]:
        return {"max_items": self.max_items, "share_prefixes": self.share_prefixes, "max_rules": self.max_rules,
                "max_schema_depth": self.max_schema_depth, "compile_timeout": self.compile_timeout}

    def compile(self, grammar: Any) -> NaiveCompiled:
        """Compile a :class:`Grammar` or any registered input read to one
        (:func:`strategies._base.read_input`; a JSON schema with the compiler's defaults,
        under ``max_rules`` and ``max_schema_depth``), within ``compile_timeout``."""
        with deadline(self.compile_timeout):
            grammar, _ = read_input(self.name, grammar, self.options)
            refuse_token_limits(self.name, grammar)
            special = special_compile(self, grammar)  # special tokens: over their vocabulary view
            if special is not None:
                return special
            return NaiveCompiled(grammar, compile_cfg(grammar))

    def matcher(self, compiled: NaiveCompiled) -> NaiveMatcher | DualMatcher:
        return with_duals(self.vocab, compiled, NaiveMatcher(compiled_by(self, compiled), compiled))


class NaiveMatcher(BaseMatcher):
    """One sequence's recognizer state; history records are byte counts."""

    def __init__(self, engine: NaiveEngine, compiled: NaiveCompiled, rec: ByteRecognizer | None = None) -> None:
        super().__init__(engine.vocab)
        self.engine = engine
        self.compiled = compiled
        self.rec = rec if rec is not None else ByteRecognizer(compiled.cfg, engine.max_items)
        self.stats = {"bytes_pushed": 0, "tokens_checked": 0, "accept_bytes": 0}

    def _fill_text(self, row: np.ndarray) -> MaskInfo:
        allowed = self._allowed_shared() if self.engine.share_prefixes else self._allowed_each()
        bm.set_bits(row, np.asarray(allowed, dtype=np.int64))
        return MaskInfo(len(allowed), False)

    def _allowed_each(self) -> list[int]:
        rec = self.rec
        out = []
        self.stats["tokens_checked"] += len(self.engine._tokens)
        for tid, data in zip(self.engine._order, self.engine._tokens, strict=True):
            self.stats["bytes_pushed"] += len(data)
            if rec.push_bytes(data):
                rec.pop(len(data))
                out.append(tid)
        return out

    def _allowed_shared(self) -> list[int]:
        rec, eng = self.rec, self.engine
        out: list[int] = []
        depth = 0  # bytes pushed beyond the matcher's own position
        dead_at = None  # length of the shortest rejected prefix on the current path
        pushed = checked = 0
        try:
            for tid, data, shared in zip(eng._order, eng._tokens, eng._lcp, strict=True):
                if dead_at is not None and shared >= dead_at:
                    continue  # starts with a rejected prefix
                dead_at = None
                checked += 1
                if depth > shared:
                    rec.pop(depth - shared)
                    depth = shared
                ok = True
                while depth < len(data):
                    pushed += 1
                    if not rec.push_byte(data[depth]):
                        dead_at = depth + 1
                        ok = False
                        break
                    depth += 1
                if ok:
                    out.append(tid)
        finally:
            rec.pop(depth)
            self.stats["bytes_pushed"] += pushed
            self.stats["tokens_checked"] += checked
        return out

    def mask_stats(self) -> MaskStats:
        """Bytes pushed through the recognizer by fills and accepts (``lexer_steps``: the
        recognizer reads bytes) and tokens checked; with shared prefixes each byte a fill
        pushes is a trie node visited."""
        pushed = self.stats["bytes_pushed"]
        return MaskStats(self.n_masks, trie_nodes=pushed if self.engine.share_prefixes else 0,
                         lexer_steps=pushed + self.stats["accept_bytes"], tokens_checked=self.stats["tokens_checked"])

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """The definition itself: while the state is not accepting, the one byte the
        recognizer takes (of all 256), taken; then undone."""
        if self.error is not None or self._terminated:
            return b""
        rec = self.rec
        out = bytearray()
        try:
            while len(out) < limit and not rec.is_accepting():
                viable = []
                for b in range(256):
                    if rec.push_byte(b):
                        rec.pop(1)
                        viable.append(b)
                        if len(viable) > 1:
                            break
                if len(viable) != 1:
                    break
                rec.push_byte(viable[0])
                out.append(viable[0])
        finally:
            rec.pop(len(out))
        return bytes(out)

    def allows_bytes(self, data: bytes) -> bool:
        """Whether the recognizer takes ``data`` next (then undone)."""
        if self.error is not None or self._terminated:
            return False
        if not self.rec.push_bytes(data):
            return False
        self.rec.pop(len(data))
        return True

    def _advance(self, token_id: int, data: bytes) -> Any:
        self.stats["accept_bytes"] += len(data)
        return len(data) if self.rec.push_bytes(data) else None

    def _undo(self, record: Any) -> None:
        self.rec.pop(record)

    def _accepting(self) -> bool:
        return self.rec.is_accepting()

    def _copy(self) -> NaiveMatcher:
        return NaiveMatcher(self.engine, self.compiled, self.rec.copy())

    def _reset_state(self) -> None:
        self.rec = ByteRecognizer(self.compiled.cfg, self.engine.max_items)
