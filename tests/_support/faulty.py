"""An engine that misbehaves on request, for the harness's crash, timeout and resume tests.

``FaultyEngine`` is llguidance (``peer:llguidance``) except when a schema's
``description`` says otherwise:

* ``"masklab-test: crash"``: the worker dies of SIGSEGV while compiling;
* ``"masklab-test: hang"``: compiling never finishes (sleeps an hour);
* ``"masklab-test: slow"``: compiling takes 1.5 s, then works;
* ``"masklab-test: loose"``: the schema is replaced by ``{}`` (any JSON: invalid
  instances get accepted);
* ``"masklab-test: tight"``: the schema is replaced by ``{"const": 0}`` (valid
  instances get rejected).

``FaultyEngine(vocab, cold_s=S)`` also sleeps S seconds in the first compile of its
process, like a library's one-time setup.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from strategies.peers import LLGuidanceEngine


class FaultyEngine(LLGuidanceEngine):
    name = "faulty"
    _set_up = False  # per process

    def __init__(self, vocab: Any, *, cold_s: float = 0.0, **options: Any) -> None:
        super().__init__(vocab, **options)
        self.cold_s = cold_s

    def compile(self, grammar: Any) -> Any:
        if not FaultyEngine._set_up:
            FaultyEngine._set_up = True
            time.sleep(self.cold_s)
        how = grammar.get("description", "") if isinstance(grammar, dict) else ""
        if how == "masklab-test: crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if how == "masklab-test: hang":
            time.sleep(3600)
        if how == "masklab-test: slow":
            time.sleep(1.5)
        if how == "masklab-test: loose":
            grammar = {}
        if how == "masklab-test: tight":
            grammar = {"const": 0}
        return super().compile(grammar)


def hanging_worker(conn, *args) -> None:  # noqa: ANN001 - a stand-in for harness._worker_main
    """A worker that never finishes starting (as if loading a vocabulary hung)."""
    time.sleep(3600)
