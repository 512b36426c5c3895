"""Strategy ``toy``, "the prefix strategy": the example a new strategy author copies.

The algorithm is the definition of a mask and nothing more.  The matcher's whole parse
state is the bytes it has consumed; a text token is allowed when those bytes followed
by the token's bytes are a viable prefix of the grammar's language, asked of a fresh
:class:`toolkit.grammar.earley.ByteRecognizer` (the check of
:meth:`toolkit.grammar.ir.Grammar.accepts_prefix`) for every token of every mask.  No
state is carried from one check to the next, so nothing can go stale, and it is slow
(a mask costs tokens x bytes consumed): ``strategies/naive.py`` gives the same masks
by sharing the recognizer between tokens.

It is written on the Python road of ``docs/extending.md``:

* :class:`ToyEngine` subclasses :class:`toolkit.core.protocol.EngineBase` and states its
  :class:`~toolkit.core.protocol.Capabilities`; its option is a typed keyword parameter
  (``strategies.check_options`` reads the annotation);
* ``compile`` reads any registered input to the IR (:func:`toolkit.grammar.inputs.read`)
  and gets special tokens from the kit (:func:`strategies._base.special_compile`,
  :func:`strategies._base.with_duals`), as ``naive`` does;
* :class:`ToyMatcher` subclasses :class:`strategies._base.BaseMatcher`, which owns EOS,
  termination, the sticky error state, rollback's history and the protocol's other calls;
  the toy gives the six hooks.

Run the conformance suite on it::

    MASKLAB_ENGINES=toy=tests._support.toystrategy:ToyEngine \\
        .venv/bin/python -m pytest tests/conformance -k toy
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strategies._base import (
    BaseMatcher,
    DualMatcher,
    compiled_by,
    refuse_token_limits,
    special_compile,
    with_duals,
)
from toolkit.core import bitmask as bm
from toolkit.core.protocol import Capabilities, CompiledBase, EngineBase, MaskInfo, MaskStats
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.earley import CFG, DEFAULT_MAX_ITEMS, ByteRecognizer, compile_cfg
from toolkit.grammar.inputs import read
from toolkit.grammar.ir import Grammar

__all__ = ["ToyEngine", "ToyCompiled", "ToyMatcher"]


class ToyCompiled(CompiledBase):
    """A grammar flattened for the byte recognizer (:func:`toolkit.grammar.earley.compile_cfg`)."""

    def __init__(self, grammar: Grammar, cfg: CFG) -> None:
        self.grammar = grammar
        self.cfg = cfg

    def memory_bytes(self) -> int:
        """The terminals' DFAs: all the toy keeps of a grammar besides the rules."""
        return sum(int(d.memory_bytes()) for d in self.cfg.dfas if d is not None)


class ToyEngine(EngineBase):
    """The prefix strategy (see the module doc).

    Option ``max_items``: Earley items in one chart before a check fails with
    :class:`~toolkit.core.errors.LimitExceeded` (the recognizer's limit, whose message
    names ``max_items``); the matcher then holds that error and its masks allow EOS only.
    """

    name = "toy"
    # What the toy adds to the defaults: special tokens (the kit's vocabulary view), work
    # counters (tokens checked, bytes read), its limit option; a mask is slow (milliseconds
    # over a small vocabulary, far more over 128k tokens).  Everything else is the default:
    # every Grammar, threaded batch, forced bytes read from masks, drafts by fork.
    capabilities = Capabilities(special_tokens=True, work_counters=True, mask_cost="slow", work_limit="max_items")

    def __init__(self, vocab: Vocabulary, *, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        if max_items < 1:  # the type was checked by strategies.check_options; the range is ours
            raise ValueError(f"engine 'toy': option 'max_items' must be at least 1, got {max_items}")
        self.vocab = vocab
        self.max_items = max_items
        self.options = {"max_items": max_items}
        tb = vocab.token_bytes
        self.text_tokens = [(int(t), tb[t]) for t in vocab.text_token_ids()]

    def compile(self, grammar: Any) -> ToyCompiled:
        """Compile a :class:`Grammar` or any registered input read to one."""
        grammar = read(grammar, engine=self.name)
        refuse_token_limits(self.name, grammar)
        special = special_compile(self, grammar)  # special tokens: compiled over the vocabulary view
        if special is not None:
            return special
        return ToyCompiled(grammar, compile_cfg(grammar))

    def matcher(self, compiled: ToyCompiled) -> ToyMatcher | DualMatcher:
        """A matcher at the start of ``compiled`` (wrapped when it names special tokens)."""
        return with_duals(self.vocab, compiled, ToyMatcher(compiled_by(self, compiled), compiled))


class ToyMatcher(BaseMatcher):
    """One sequence: the bytes consumed; history records are byte counts."""

    def __init__(self, engine: ToyEngine, compiled: ToyCompiled, text: bytes = b"") -> None:
        super().__init__(engine.vocab)
        self.engine = engine
        self.compiled = compiled
        self.text = bytearray(text)
        self.tokens_checked = 0
        self.bytes_read = 0

    def _recognizer(self, data: bytes) -> ByteRecognizer | None:
        """A fresh recognizer fed the consumed bytes then ``data``; None where the grammar
        rejects a byte (no sentence starts so).  LimitExceeded propagates: BaseMatcher
        turns it into the sticky error."""
        rec = ByteRecognizer(self.compiled.cfg, self.engine.max_items)
        for b in self.text + data:
            self.bytes_read += 1
            if not rec.push_byte(b):
                return None
        return rec

    # ------------------------------------------------------------ the hooks --

    def _fill_text(self, row: np.ndarray) -> MaskInfo:
        allowed = [t for t, data in self.engine.text_tokens if self._recognizer(data) is not None]
        self.tokens_checked += len(self.engine.text_tokens)
        bm.set_bits(row, np.asarray(allowed, dtype=np.int64))
        return MaskInfo(len(allowed))

    def _advance(self, token_id: int, data: bytes) -> int | None:
        if self._recognizer(data) is None:
            return None
        self.text += data
        return len(data)

    def _undo(self, record: int) -> None:
        del self.text[len(self.text) - record:]

    def _accepting(self) -> bool:
        rec = self._recognizer(b"")
        return rec is not None and rec.is_accepting()

    def _copy(self) -> ToyMatcher:
        return ToyMatcher(self.engine, self.compiled, bytes(self.text))

    def _reset_state(self) -> None:
        self.text.clear()

    # ------------------------------------------------------------ work --

    def mask_stats(self) -> MaskStats:
        """Masks made, tokens checked (each one, every mask) and bytes read by the
        recognizers (``lexer_steps``: the terminals' DFAs step once a byte)."""
        return MaskStats(self.n_masks, lexer_steps=self.bytes_read, tokens_checked=self.tokens_checked)
