"""Plug-in engines with a bug, named ``"tests._support.raising:NAME"`` by the bench tests.

Each is masklab's ``llguidance`` behind a plain Python matcher (no C session, so the
harness goes through the matcher's own calls), except for one call:

* ``RaisingFill``: a matcher's second ``fill_bitmask`` raises ``RuntimeError``
  (mid-walk: the warm-up's and the first mask go through);
* ``RaisingAccept``: ``accept_token`` raises ``ZeroDivisionError``;
* ``RaisingCompile``: ``compile`` raises ``KeyError`` (an engine bug, not a refusal);
* ``Refusing``: ``compile`` refuses every item with masklab's ``UnsupportedGrammar``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.protocol import EngineBase, MaskInfo, MaskStats, MatcherBase

FILL_MESSAGE = "raising plug-in: the second fill_bitmask fails"


class _Raising(EngineBase):
    name = "raising"
    fail = ""  # which call raises

    def __init__(self, vocab: Any) -> None:
        from strategies import get_engine

        self.vocab = vocab
        self.inner = get_engine("llguidance", vocab)
        self.native_inputs = self.inner.native_inputs

    def compile(self, grammar: Any) -> Any:
        if self.fail == "compile":
            raise KeyError("rule_the_plugin_forgot")
        if self.fail == "refuse":
            raise UnsupportedGrammar("the refusing plug-in compiles nothing")
        return self.inner.compile(grammar)

    def matcher(self, compiled: Any) -> _Matcher:
        return _Matcher(self, self.inner.matcher(compiled))

    def clear_memo(self) -> None:
        self.inner.clear_memo()


class _Matcher(MatcherBase):
    def __init__(self, engine: _Raising, inner: Any) -> None:
        self.engine = engine
        self.inner = inner
        self.vocab = inner.vocab
        self.compiled = inner.compiled
        self.fills = 0

    @property
    def error(self) -> str | None:
        return self.inner.error

    def fill_bitmask(self, bitmask: np.ndarray, row: int = 0) -> MaskInfo:
        self.fills += 1
        if self.engine.fail == "fill_bitmask" and self.fills >= 2:
            raise RuntimeError(FILL_MESSAGE)
        return self.inner.fill_bitmask(bitmask, row)

    def accept_token(self, token_id: int) -> bool:
        if self.engine.fail == "accept_token":
            return bool(token_id // 0)
        return self.inner.accept_token(token_id)

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)

    def mask_stats(self) -> MaskStats:
        return self.inner.mask_stats()


class RaisingFill(_Raising):
    fail = "fill_bitmask"


class RaisingAccept(_Raising):
    fail = "accept_token"


class RaisingCompile(_Raising):
    fail = "compile"


class Refusing(_Raising):
    fail = "refuse"
