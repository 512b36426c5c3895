"""Stepping B matchers at once: the batch half of the engine contract.

A decoding step of a batch is, for every sequence, "accept the token just sampled,
then fill the next mask".  Serving engines make that one call over the batch, run on
native threads without the GIL while the device computes the next forward pass
(llguidance's ``LLExecutor``, xgrammar's ``BatchGrammarMatcher``).  masklab's form of it:

``make_batch(engine, matchers, threads)`` returns a :class:`~toolkit.core.protocol.BatchMatcher`
whose ``step(tokens, bitmask)`` does, for each row ``i``:

* ``tokens[i] >= 0``: ``matchers[i].accept_token(tokens[i])``, then
  ``matchers[i].fill_bitmask(bitmask, i)``;
* ``tokens[i] == NO_TOKEN`` (-1): the fill only;
* ``tokens[i] == SKIP`` (-2): nothing (row ``i`` is left as it is).

Its results and the matchers' states afterwards are exactly those of the one-at-a-time
calls in that order (tested on real walks).  An engine provides its own batch by a
``batch_matcher(matchers, threads)`` method (masklab's strategies, the peers through
their batch APIs); any other engine (``naive``, a plug-in) gets :class:`ThreadedBatch`,
the same calls made from ``threads`` Python threads.  Jump-forward's step (accept the
sampled ids, find the forced bytes) is one more call of the native batch,
:meth:`NativeBatchMatcher.accept_forced`.  Matchers that share mutable
state (the lazily built lexer of one compiled grammar in ``llguidance``) are stepped by
one thread, in row order: :func:`lanes`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from toolkit.core.bpe import BpeTable
from toolkit.core.protocol import BatchMatcher, BatchStep, Matcher
from toolkit.core.session import NativeBatch, Session

__all__ = ["NO_TOKEN", "SKIP", "FORCED_ROW", "LOOKAHEAD_K", "LOOKAHEAD_POOL", "make_batch", "ThreadedBatch", "NativeBatchMatcher", "default_threads", "lanes", "new_step",
           "check_step_args"]

NO_TOKEN = -1
"""``tokens[i]``: no token to accept in this row, fill its mask only."""

SKIP = -2
"""``tokens[i]``: leave this row alone (a finished sequence)."""

FORCED_ROW = 256
"""Forced bytes :meth:`NativeBatchMatcher.accept_forced` finds per row in its call."""

LOOKAHEAD_K = 512
"""The widest mask :meth:`NativeBatchMatcher.lookahead` makes a table for: the forced
runs after each of its tokens.  Runs mostly follow narrow masks (the tokens that open
an object's key: ``{"`` and the key's first letters, about 440 in Llama 3); a token
drawn from a wide one (``",`` that ends a string) leaves its run to the ``overlap``
path.  A table costs an accept, the forced bytes and tokens and a rollback per token:
about 2-6 us each in C on the mask thread."""

LOOKAHEAD_POOL = 8192
"""Tokens of forced runs a row's lookahead table holds (32 KB): runs past it are left to
the ``overlap`` path (unknown in the table)."""


def default_threads(batch: int) -> int:
    """The cores this process may run on, at most ``batch`` (and at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, batch))


def lanes(matchers: Sequence[Any]) -> list[list[int]]:
    """The rows grouped so that matchers sharing a compiled grammar (``.compiled``, the
    same object) fall in one group, in row order; every other matcher is a group of
    its own.  A group is stepped by one thread."""
    groups: dict[int, list[int]] = {}
    out: list[list[int]] = []
    for i, m in enumerate(matchers):
        c = m.compiled
        if c is None:
            out.append([i])
            continue
        g = groups.get(id(c))
        if g is None:
            g = groups[id(c)] = []
            out.append(g)
        g.append(i)
    return out


def new_step(n: int) -> BatchStep:
    """A result with every row marked untouched (reused by each ``step`` of a batch)."""
    return BatchStep(np.full(n, -1, dtype=np.int8), np.full(n, -1, dtype=np.int32), np.full(n, np.nan), 0.0)


def check_step_args(n: int, tokens: Any, bitmask: np.ndarray) -> np.ndarray:
    """``tokens`` as a C-contiguous int32 array of ``n`` ids (None: every row NO_TOKEN),
    after checking ``bitmask`` has a C-contiguous int32 row per matcher."""
    if not isinstance(bitmask, np.ndarray) or bitmask.ndim != 2 or bitmask.dtype != np.int32:
        raise ValueError(f"bitmask must be a 2-D int32 numpy array, got {getattr(bitmask, 'shape', bitmask)!r}")
    if bitmask.shape[0] < n or not bitmask.flags.c_contiguous:
        raise ValueError(f"bitmask must be C-contiguous with at least {n} rows, got shape {bitmask.shape}")
    if tokens is None:
        return np.full(n, NO_TOKEN, dtype=np.int32)
    arr = np.ascontiguousarray(tokens, dtype=np.int32)
    if arr.shape != (n,):
        raise ValueError(f"tokens must hold one id per matcher ({n}), got shape {arr.shape}")
    if (arr < SKIP).any():
        raise ValueError(f"tokens must be ids, NO_TOKEN ({NO_TOKEN}) or SKIP ({SKIP}), got {int(arr.min())}")
    return arr


class NativeBatchMatcher:
    """The batch of masklab's own strategies (:class:`strategies._base.NativeMatcher`):
    one call into C per worker and step, no Python per sequence
    (:class:`toolkit.core.session.NativeBatch`)."""

    def __init__(self, matchers: Sequence[Any], threads: int) -> None:
        self.matchers = list(matchers)
        self._words = self.matchers[0].session.V.n_words if self.matchers else 0
        self._native = NativeBatch([m.session for m in self.matchers], lanes(self.matchers), threads)
        self.threads = self._native.threads
        self._out = new_step(len(self.matchers))
        n = len(self.matchers)
        self._n_forced = np.zeros(n, dtype=np.int32)
        self._forced = np.zeros((n, FORCED_ROW), dtype=np.uint8)
        self._bpe: BpeTable | None = None  # the vocabulary's C tokenizer, looked up by the first accept_forced
        self._bpe_found = False
        self._n_ftok = np.zeros(n, dtype=np.int32)
        self._ftok: np.ndarray | None = None
        self._la: tuple[np.ndarray, ...] | None = None  # the lookahead tables (lookahead())

    def step(self, tokens: Any, bitmask: np.ndarray) -> BatchStep:
        tok = check_step_args(len(self.matchers), tokens, bitmask)
        if self.matchers and bitmask.shape[1] != self._words:
            raise ValueError(f"bitmask rows have {bitmask.shape[1]} words, the vocabulary needs {self._words}")
        out = self._out
        t0 = time.perf_counter()
        self._native.step(tok, bitmask, out.accepted, out.allowed, out.seconds)
        out.wall_s = time.perf_counter() - t0
        return out

    def accept_forced(self, ids: np.ndarray, rows: np.ndarray, live: np.ndarray, n_out: np.ndarray,
                      max_tokens: int, tokens: np.ndarray, accepted: np.ndarray
                      ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Jump-forward's part of a step in one C call without the GIL
        (:meth:`toolkit.core.session.NativeBatch.accept_forced`): row ``i`` accepts the id
        its slot drew, ``ids[rows[i]]``, finds the bytes its grammar forces next and, where
        the vocabulary's tokenizer is a BPE read in C (:class:`~toolkit.core.bpe.BpeTable`),
        the tokens to feed for them; ``live`` (bool), ``tokens`` (int32) and ``accepted``
        (int8) are updated in place.  Returns the tokens accepted, ``n_forced`` and
        ``forced`` (row ``i``'s bytes are ``forced[i, :n_forced[i]]``; a row that fills all
        :data:`FORCED_ROW` columns may have more: ask its matcher's ``forced_bytes()``),
        ``n_ftok`` and ``ftok`` (row ``i``'s forced tokens are ``ftok[i, :n_ftok[i]]``;
        -1: ask its matcher's ``tokens_of_forced``; ``ftok`` is None without a C
        tokenizer, every ``n_ftok`` then -1), all reused by the next call."""
        if self._find_bpe() is None:
            self._n_ftok[:] = -1
        written = self._native.accept_forced(ids, rows, live.view(np.uint8), n_out, max_tokens, tokens, accepted,
                                             self._n_forced, self._forced, self._bpe, self._n_ftok, self._ftok)
        return written, self._n_forced, self._forced, self._n_ftok, self._ftok

    def _find_bpe(self) -> BpeTable | None:
        """The vocabulary's C tokenizer (None: it has none), looked up once."""
        if not self._bpe_found:
            self._bpe_found = True
            self._bpe = BpeTable.of(self.matchers[0].vocab) if self.matchers else None
            if self._bpe is not None:
                width = FORCED_ROW + self.matchers[0].session.V.chop_width()
                self._ftok = np.zeros((len(self.matchers), width), dtype=np.int32)
        return self._bpe

    def lookahead(self, k: int | None = None) -> bool:
        """Turn on the lookahead tables (jump-forward's ``lookahead`` schedule,
        :meth:`toolkit.core.session.NativeBatch.set_lookahead`): from the next step on,
        each fill whose mask allows at most ``k`` tokens also finds, for each of them, the
        forced run that would follow it (accept, forced bytes and tokens in C, roll back),
        without the GIL and beside the forward pass.  False (no tables) where the
        vocabulary has no C tokenizer.  ``k`` defaults to :data:`LOOKAHEAD_K` (read now)."""
        k = LOOKAHEAD_K if k is None else k
        if k < 1:
            raise ValueError(f"lookahead: k (the widest mask tabled) must be >= 1, got {k}")
        bpe = self._find_bpe()
        if bpe is None:
            self._la = None
            return False
        n, width = len(self.matchers), self._ftok.shape[1]  # type: ignore[union-attr]
        self._la = (np.full(n, -1, dtype=np.int32), np.zeros((n, k), dtype=np.int32),
                    np.zeros((n, k), dtype=np.int32), np.zeros((n, k), dtype=np.int32),
                    np.zeros((n, max(LOOKAHEAD_POOL, width)), dtype=np.int32), np.zeros(n, dtype=np.float64))
        count, tok, runs, off, run, secs = self._la
        self._native.set_lookahead(bpe, count, tok, runs, off, run, secs, FORCED_ROW)
        return True

    def lookahead_runs(self, ids: np.ndarray, rows: np.ndarray, live: np.ndarray,
                       held: np.ndarray | None = None) -> dict[int, list[int]]:
        """After the draw ``ids`` (one per slot; row ``i`` drew ``ids[rows[i]]``): row ->
        the forced run its lookahead table holds after that id, for the live rows (bool;
        not ``held``, bool: rows whose draw is not theirs) whose table has one (one C
        call, :meth:`toolkit.core.session.NativeBatch.lookahead_runs`, over the tables
        the last step's fills made)."""
        if self._la is None:
            return {}
        lv = live.view(np.uint8)
        return self._native.lookahead_runs(ids, rows, lv, np.zeros_like(lv) if held is None else held.view(np.uint8))

    def lookahead_seconds(self) -> np.ndarray | None:
        """Each row's seconds of its last lookahead (None: no tables)."""
        return None if self._la is None else self._la[5]

    def close(self) -> None:
        self._native.close()


def _native(matchers: Sequence[Any]) -> bool:
    if not matchers:
        return False

    first = matchers[0].session
    vocab = first.V if isinstance(first, Session) else None
    return vocab is not None and all(isinstance(m.session, Session) and m.session.V is vocab for m in matchers)


class ThreadedBatch:
    """The fallback :class:`~toolkit.core.protocol.BatchMatcher`: each row's single calls,
    made by ``threads`` Python threads over :func:`lanes` (as much in parallel as the
    engine releases the GIL)."""

    def __init__(self, matchers: Sequence[Matcher], threads: int | None = None) -> None:
        self.matchers = list(matchers)
        self.threads = default_threads(len(self.matchers)) if threads is None else max(1, int(threads))
        self._lanes = lanes(self.matchers)
        self._pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 and len(self._lanes) > 1 else None
        self._out = new_step(len(self.matchers))

    def _lane(self, rows: list[int], tokens: np.ndarray, bitmask: np.ndarray) -> None:
        out = self._out
        for i in rows:
            t = int(tokens[i])
            if t == SKIP:
                out.accepted[i], out.allowed[i], out.seconds[i] = -1, -1, np.nan
                continue
            m = self.matchers[i]
            t0 = time.perf_counter()
            out.accepted[i] = -1 if t == NO_TOKEN else int(m.accept_token(t))
            out.allowed[i] = m.fill_bitmask(bitmask, i).allowed
            out.seconds[i] = time.perf_counter() - t0

    def _run(self, work: list[list[int]], tokens: np.ndarray, bitmask: np.ndarray) -> None:
        while True:
            try:
                rows = work.pop()
            except IndexError:
                return
            self._lane(rows, tokens, bitmask)

    def step(self, tokens: Any, bitmask: np.ndarray) -> BatchStep:
        tok = check_step_args(len(self.matchers), tokens, bitmask)
        t0 = time.perf_counter()
        work = list(reversed(self._lanes))  # list.pop is atomic: the threads share it
        helpers = ([self._pool.submit(self._run, work, tok, bitmask) for _ in range(self.threads - 1)]
                   if self._pool is not None else [])
        self._run(work, tok, bitmask)
        for f in helpers:
            f.result()
        self._out.wall_s = time.perf_counter() - t0
        return self._out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def make_batch(engine: Any, matchers: Sequence[Matcher], threads: int | None = None) -> BatchMatcher:
    """The engine's own batch (``engine.batch_matcher(matchers, threads)``, which may
    return None for matchers it cannot batch); for masklab's own strategies' matchers
    (one vocabulary) :class:`NativeBatchMatcher`; else :class:`ThreadedBatch`.
    ``threads`` defaults to :func:`default_threads`."""
    matchers = list(matchers)
    threads = default_threads(len(matchers)) if threads is None else int(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    batch = engine.batch_matcher(matchers, threads)
    if batch is not None:
        return batch
    if _native(matchers):
        return NativeBatchMatcher(matchers, threads)
    return ThreadedBatch(matchers, threads)
