"""A plug-in engine that misbehaves on the JSON schemas of a run, named
``"tests._support.misbehaving:Misbehaving"`` by the backend tests: masklab's
``llguidance`` for everything else.

``what`` (an option): ``"segfault"`` (the worker dies of SIGSEGV in ``compile``),
``"sleep"`` (``compile`` sleeps ``seconds``: a timeout), ``"slow"`` (``compile`` sleeps
``seconds`` on every item, schema or not: a run long enough to be killed half way).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping
from typing import Any, Literal

from toolkit.core.protocol import EngineBase


class Misbehaving(EngineBase):
    name = "misbehaving"

    def __init__(self, vocab: Any, *, what: Literal["segfault", "sleep", "slow"] = "segfault",
                 seconds: float = 60.0) -> None:
        from strategies import get_engine

        self.vocab = vocab
        self.inner = get_engine("llguidance", vocab)
        self.native_inputs = self.inner.native_inputs
        self.what, self.seconds = what, seconds
        self.options = {"what": what, "seconds": seconds}

    def compile(self, spec: Any) -> Any:
        schema = isinstance(spec, Mapping) and spec != {"type": "integer"}  # (the warm-up's schema)
        if self.what == "slow":
            time.sleep(self.seconds)
        elif schema and self.what == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        elif schema and self.what == "sleep":
            time.sleep(self.seconds)
        return self.inner.compile(spec)

    def matcher(self, compiled: Any) -> Any:
        return self.inner.matcher(compiled)

    def clear_memo(self) -> None:
        self.inner.clear_memo()
