"""The stand-in device, ``sim:FORWARD_MS[:LAUNCHES][:chunk=C][:prefill=P][:replay]``, for machines without a GPU.

It reproduces what a GPU step leaves to the host.  The device is a queue of work
with a clock (:class:`SimModel`): a forward pass makes LAUNCHES short Python-level calls
(a framework launching kernels: each needs the GIL, so a thread that holds it delays
the step as it would on a GPU) and queues FORWARD_MS of device time (a jump-forward
chunk step more, :data:`SIM_CHUNK_COST`); the apply kernel
queues :data:`SIM_APPLY_MS` and the sampler :data:`SIM_SAMPLE_MS`, as a GPU runs them
after the forward pass.  :meth:`SimModel.synchronize` waits without the GIL until the
queue is done (asleep, then spinning its last :data:`SIM_SPIN_MS`, as CUDA's
synchronize spins, so it returns on time instead of a timer slack late); a
:class:`SimEvent` recorded after the sampler waits for the ids only.  So the host pays for launching, as on a GPU, and never for the
arithmetic a GPU does: the logits are lazy (:class:`SimLogits`, a seeded pseudo-random
row per sequence picked from its prompt, the token fed and its position), the mask is
kept by reference, and a greedy draw reads the few logits it needs, so the stand-in's
``overhead %`` predicts a GPU's.  Sampling with a temperature, and callers that want a
tensor (the serial loop, the warm-up), materialize the rows.

Each sequence's position is its own (prompt plus tokens fed), so a sequence decodes as
it would alone, in a static batch or in a continuous batch's slot
(:meth:`SimDecoding.refill`).  A refill's prompt pass makes LAUNCHES calls too, unless
``:prefill=P`` sets its own: a server's decode step is one CUDA graph and its prefill
an eager pass, and on the H200 a refill's eager prompt pass of random Llama-3-8B took
28-38 ms of host time (``results/gpu/serving/``), about 30,000 of the stand-in's
launches, where LAUNCHES 300 stands for a graphed step's host work.  Every output of a
simulated run says so (:data:`SIM_NOTE`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.core import bitmask as bm
from toolkit.core.vocab import Vocabulary
from toolkit.decode._simdraw import masked_greedy, spin_until
from toolkit.decode.replay import REPLAY_BONUS, ModelError, Replay

__all__ = ["SimModel", "SimDecoding", "SimLogits", "SimEvent", "sim_model", "wait_until", "SIM_NOTE", "SIM_APPLY_MS",
           "SIM_CHUNK_COST", "SIM_SAMPLE_MS", "SIM_SPIN_MS"]

SIM_NOTE = ("simulated device (sim:FORWARD_MS:LAUNCHES): no model runs; a forward pass is LAUNCHES Python calls "
            "and a wait, the apply kernel and the sampler waits of their own, the logits seeded noise: step times "
            "are the stand-in's, text is noise")

SIM_APPLY_MS = 0.07
"""Device milliseconds of the stand-in's apply kernel: the torch op's p50 on an H100 was
0.057-0.076 ms at batch 1 to 64 with Llama-3's 128,256 logits in bf16
(``results/gpu/*/apply_kernels.csv``, launch included), flat in the batch."""

SIM_CHUNK_COST = 0.005
"""What a chunk step (jump-forward: several tokens per sequence in one pass) adds to
FORWARD_MS, per slot of the batch: a chunk step costs ``FORWARD_MS * (1 + SIM_CHUNK_COST
* B)`` whatever its width.  On an H200 (``results/gpu/lookahead/``, random Llama-3-8B,
bf16, CUDA graphs) chunk steps of 2 to 16 tokens took 9.0-9.3 ms at batch 8 against
8.7-8.9 ms for one-token steps (+3-6 %; this prices +4 %) and 13.4-14.7 ms at batch 32
against 12.3-12.7 ms (+9-17 %; this prices +16 %), flat in the width: every row runs
the padded width, so the cost grows with the batch.  ``sim:...:chunk=C`` sets another
(``chunk=0``: a chunk step costs a one-token step's, as a server's ragged batch of a
few more tokens nearly does)."""

SIM_SAMPLE_MS = 0.05
"""Device milliseconds of the stand-in's sampler: a greedy draw is a max reduction over the
same logits the apply kernel writes once (a read instead of a read and a write), so a
little less than :data:`SIM_APPLY_MS`."""

_SIM_POOL = 32
"""Distinct logits rows a simulated model draws from (a row is 4 bytes per vocabulary id)."""


SIM_SPIN_MS = 0.3
"""The last milliseconds of a device wait that the host spins (:func:`wait_until`)."""


def wait_until(deadline: float) -> None:
    """Wait without the GIL until ``time.perf_counter()`` reaches ``deadline``: asleep,
    holding no core, then spinning for the last :data:`SIM_SPIN_MS`.  A sleep ends late
    by the kernel's timer slack (tens of microseconds, more in a virtual machine); a
    CUDA host thread's synchronize spins (PyTorch's default schedule with fewer
    contexts than cores) and returns when the device is done."""
    left = deadline - time.perf_counter() - SIM_SPIN_MS / 1e3
    if left > 0:
        time.sleep(left)
    spin_until(deadline)


def _launch(k: int) -> int:
    """One simulated kernel launch: a short Python-level call (about 1 us on this
    project's machines), which like a framework's dispatch needs the GIL."""
    x = k
    for i in range(24):
        x = (x * 31 + i) & 0xFFFF
    return x


@dataclass
class SimModel:
    """``sim:FORWARD_MS[:LAUNCHES]``: the stand-in device (see the module doc).  It has
    the surface of :class:`~toolkit.decode.model.LoadedModel` that the decoding harness
    uses, and the device operations a GPU runs after the forward pass
    (:meth:`apply`, :meth:`greedy`, :meth:`sampled`, :meth:`event`)."""

    spec: str
    forward_ms: float
    launches: int
    vocab_size: int
    seed: int = 0
    bos_id: int | None = None
    max_positions: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    random: bool = False
    simulated: bool = True
    parameters: int = 0
    cache: str = "dynamic"
    compile: str | None = None
    notes: list[str] = field(default_factory=lambda: [SIM_NOTE])
    #: ``sim:...:replay``: the logits favour each sequence's target text (see :class:`SimDecoding`)
    replay: bool = False
    vocab: Any = field(default=None, repr=False)
    apply_ms: float = SIM_APPLY_MS
    sample_ms: float = SIM_SAMPLE_MS
    chunk_cost: float = SIM_CHUNK_COST
    #: launches of a refill's prompt pass (``:prefill=P``; None: ``launches``; see the module doc)
    prefill_launches: int | None = None
    _pool: Any = field(default=None, repr=False)
    _pool_np: Any = field(default=None, repr=False)
    _order: Any = field(default=None, repr=False)
    _free: float = field(default=0.0, repr=False)  # when the device's queue is done

    def __post_init__(self) -> None:
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        self._pool = torch.randn((_SIM_POOL, self.vocab_size), generator=gen) * 4.0
        self._pool_np = self._pool.numpy()
        # each row's ids best first (ties: the lower id first, as argmax picks)
        self._order = np.argsort(-self._pool_np, axis=1, kind="stable").astype(np.int32)

    def start(self, prompts: list[list[int]], max_tokens: int, chunks: bool = False,
              targets: list[bytes | None] | None = None, lazy: bool = False, refills: bool = False) -> SimDecoding:
        """A batch's decoding (:class:`SimDecoding`; it always takes chunks and refills).
        ``targets`` (``replay`` only): each sequence's text to replay, None for noise;
        ``lazy``: its steps return :class:`SimLogits` (the pipelined loop's device
        operations) rather than tensors."""
        del refills
        return SimDecoding(self, prompts, max_tokens, targets if self.replay else None, lazy)

    def queue(self, ms: float, start: float | None = None) -> None:
        """Queue ``ms`` of device work, launched at ``start`` (default: now)."""
        now = time.perf_counter() if start is None else start
        self._free = max(now, self._free) + ms / 1e3

    def synchronize(self) -> None:
        """Wait, without the GIL, until the device's queued work is done (:func:`wait_until`)."""
        wait_until(self._free)

    def apply(self, logits: SimLogits, mask: np.ndarray) -> None:
        """The apply kernel: ``mask`` (``(B, words)``, kept by reference: the sampler must
        run before it is refilled, as on a GPU's stream) masks ``logits``."""
        logits.mask = mask
        self.queue(self.apply_ms)

    def greedy(self, logits: SimLogits) -> Any:
        """The greedy sampler: each row's best allowed id (-1: none allowed), a
        ``(B,)`` int64 tensor."""
        import torch

        ids = torch.from_numpy(logits.greedy())
        self.sampled()
        return ids

    def sampled(self) -> None:
        """Queue the sampler's device time (a draw made on the materialized logits)."""
        self.queue(self.sample_ms)

    def event(self) -> SimEvent:
        return SimEvent(self)

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "random_weights": False, "simulated": True, "vocab_size": self.vocab_size,
                "device": "sim", "dtype": self.dtype, "parameters": 0, "forward_ms": self.forward_ms,
                "launches": self.launches, "apply_ms": self.apply_ms, "sample_ms": self.sample_ms,
                "chunk_cost": self.chunk_cost,
                "prefill_launches": self.launches if self.prefill_launches is None else self.prefill_launches,
                "cache": self.cache, "compile": None, "notes": list(self.notes)}


class SimEvent:
    """A CUDA event's stand-in: :meth:`record` marks the device's queue now,
    :meth:`synchronize` waits until the device got that far (not for work queued later)."""

    def __init__(self, lm: SimModel) -> None:
        self.lm = lm
        self.at = 0.0

    def record(self) -> None:
        self.at = self.lm._free

    def synchronize(self) -> None:
        wait_until(self.at)


@dataclass
class SimLogits:
    """A batch's logits on the stand-in, lazy: row ``i`` is the pool's row
    ``pool_rows[i]`` plus :data:`~toolkit.decode.replay.REPLAY_BONUS` on ``bonus[i]``
    (-1: none), then ``mask`` (``(B, words)``, None: unmasked) sets disallowed ids to
    -inf.  :meth:`tensor` makes the rows; :meth:`greedy` draws from them without."""

    lm: SimModel
    pool_rows: np.ndarray
    bonus: np.ndarray
    mask: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.pool_rows), self.lm.vocab_size)

    def tensor(self) -> Any:
        """The logits as a ``(B, V)`` float32 tensor."""
        import torch

        t = self.lm._pool.index_select(0, torch.from_numpy(self.pool_rows))
        rows = np.flatnonzero(self.bonus >= 0)
        if len(rows):
            r = torch.from_numpy(rows)
            t.index_put_((r, torch.from_numpy(self.bonus[rows])), torch.tensor(REPLAY_BONUS), accumulate=True)
        if self.mask is not None:
            bm.apply_kernel("torch")(t, torch.from_numpy(np.ascontiguousarray(self.mask)), self.lm.vocab_size)
        return t

    def greedy(self) -> np.ndarray:
        """Each row's argmax (the lowest id among equals; -1 where the mask allows
        nothing): the best allowed id of its pool row, read best first, against its
        bonus id."""
        lm, rows, mask = self.lm, self.pool_rows, self.mask
        order, pool = lm._order, lm._pool_np
        n = len(rows)
        if mask is not None:
            best = np.empty(n, dtype=np.int64)
            masked_greedy(pool, order, rows, self.bonus, np.ascontiguousarray(mask, dtype=np.int32),
                          REPLAY_BONUS, best)
            return best
        best = order[rows, 0].astype(np.int64)
        b = self.bonus
        has = b >= 0
        if has.any():
            i = np.flatnonzero(has)
            vb = pool[rows[i], b[i]] + np.float32(REPLAY_BONUS)
            vc = pool[rows[i], best[i]]
            take = (vb > vc) | ((vb == vc) & (b[i] < best[i]))
            best[i[take]] = b[i[take]]
        return best


class SimDecoding:
    """One batch on the simulated device: :meth:`forward` as
    :meth:`~toolkit.decode.model.Decoding.forward`, returning before the forward pass
    is over (``lm.synchronize()`` waits for it); :meth:`refill` starts a new sequence
    in a slot (continuous batching)."""

    def __init__(self, lm: SimModel, prompts: list[list[int]], max_tokens: int,
                 targets: list[bytes | None] | None = None, lazy: bool = False) -> None:
        if not prompts or not all(prompts):
            raise ModelError("every sequence needs a prompt of at least one token")
        self.lm = lm
        self.lazy = lazy
        self.replay = Replay(lm.vocab, targets, len(prompts)) if lm.replay and targets is not None else None
        self.batch = len(prompts)
        self.prompt_len = max(len(p) for p in prompts)
        self.cache_len = 0
        self.shape = (self.batch, 0, any(len(p) != self.prompt_len for p in prompts))
        self.seen = 0
        # a salt per sequence from its prompt: equal prompts decode alike, as on a model
        self._salt = np.asarray([_salt(p) for p in prompts], dtype=np.int64)
        self._pos = np.asarray([len(p) for p in prompts], dtype=np.int64)  # each sequence's own positions
        self._refilled_at = -1  # the step (``seen``) of the last refill

    def forward(self, tokens: Any = None) -> Any:
        """Launch a forward pass: the prompts' (``tokens`` None, first call only) or one
        step feeding ``tokens`` (``(B,)`` ids); its logits ``(B, V)`` are ready when
        ``lm.synchronize()`` returns."""
        t0 = time.perf_counter()
        if tokens is None:
            if self.seen:
                raise ModelError("the prompts were already run: feed the sampled tokens")
            return self._launch(t0, np.zeros(self.batch, dtype=np.int64), self.prompt_len, None)
        if not self.seen:
            raise ModelError("run the prompts first: forward() without tokens")
        fed = np.asarray(tokens.reshape(self.batch).tolist(), dtype=np.int64)
        if self.replay is not None:
            self.replay.write([[int(t)] for t in fed])
        return self._launch(t0, fed, 1, np.ones(self.batch, dtype=np.int64))

    def forward_chunks(self, chunks: list[list[int]]) -> Any:
        """One step feeding a run of tokens per sequence
        (:meth:`~toolkit.decode.model.Decoding.forward_chunks`).  A step of single tokens
        costs FORWARD_MS; a longer one ``FORWARD_MS * (1 + chunk_cost * B)`` whatever the
        runs' lengths (:data:`SIM_CHUNK_COST`: a decode step is bound by reading the
        weights, which a few more tokens per sequence read once, but every row runs the
        padded width)."""
        if len(chunks) != self.batch or not all(chunks):
            raise ModelError(f"need a run of at least one token for each of the {self.batch} sequences")
        if not self.seen:
            raise ModelError("run the prompts first: forward() without tokens")
        t0 = time.perf_counter()
        if self.replay is not None:
            self.replay.write(chunks)
        fed = np.asarray([c[-1] for c in chunks], dtype=np.int64)
        width = max(len(c) for c in chunks)
        ms = self.lm.forward_ms * (1.0 + self.lm.chunk_cost * self.batch) if width > 1 else None
        return self._launch(t0, fed, width, np.asarray([len(c) for c in chunks]), ms)

    def refill(self, row: int, prompt: list[int], target: bytes | None, logits: Any) -> None:
        """Slot ``row`` starts a new sequence: its prompt's pass and its first logits
        written into row ``row`` of the step's ``logits``; ``target``: what it replays.
        The prompts of one step's refills are one pass (launches and FORWARD_MS of device
        time, queued once), as a server batches the prefills it schedules together."""
        if not prompt:
            raise ModelError("every sequence needs a prompt of at least one token")
        lm = self.lm
        t0 = time.perf_counter()
        first = self._refilled_at != self.seen  # the step's first refill launches the pass
        self._refilled_at = self.seen
        for k in range((lm.launches if lm.prefill_launches is None else lm.prefill_launches) if first else 0):
            _launch(k)
        self._salt[row], self._pos[row] = _salt(prompt), len(prompt)
        if self.replay is not None:
            self.replay.reset(row, target if lm.replay else None)
        pool_row = int((self._salt[row] + self._pos[row] * 104729 + lm.seed) % _SIM_POOL)
        nxt = self.replay.next_token(row) if self.replay is not None else None
        bonus = -1 if nxt is None else nxt
        if first:
            lm.queue(lm.forward_ms, t0)
        if isinstance(logits, SimLogits):
            logits.pool_rows[row], logits.bonus[row] = pool_row, bonus
        else:
            logits[row] = lm._pool[pool_row]
            if bonus >= 0:
                logits[row, bonus] += REPLAY_BONUS

    def release(self, row: int) -> None:
        """Slot ``row`` has no sequence any more (nothing to do on the stand-in)."""

    def _bonus(self) -> np.ndarray:
        if self.replay is None:
            return np.full(self.batch, -1, dtype=np.int64)
        return np.asarray([-1 if t is None else t for t in self.replay.next_tokens()], dtype=np.int64)

    def _launch(self, t0: float, fed: np.ndarray, n: int, advance: np.ndarray | None, ms: float | None = None) -> Any:
        lm = self.lm
        for k in range(lm.launches):
            _launch(k)
        self.seen += n
        if advance is not None:
            self._pos += advance
        rows = (self._salt + fed * 7919 + self._pos * 104729 + lm.seed) % _SIM_POOL
        logits = SimLogits(lm, rows, self._bonus())
        lm.queue(lm.forward_ms if ms is None else ms, t0)
        return logits if self.lazy else logits.tensor()


def _salt(prompt: list[int]) -> int:
    return hash(tuple(prompt)) % 1_000_003


def sim_model(spec: str, vocab: Vocabulary, device: str, dtype: str, seed: int, cache: str,
              compile: str | None) -> SimModel:
    """The stand-in device of ``spec`` (``sim:FORWARD_MS[:LAUNCHES][:chunk=C][:prefill=P][:replay]``,
    the named options in any order); a :class:`~toolkit.decode.replay.ModelError` for a
    spec or option it does not take."""
    parts = spec.split(":")[1:]
    replay = bool(parts) and parts[-1] == "replay"
    if replay:
        parts = parts[:-1]
    named: dict[str, str] = {}
    while parts and "=" in parts[-1]:
        key, _, value = parts.pop().partition("=")
        named[key] = value
    unknown = sorted(set(named) - {"chunk", "prefill"})
    if unknown:
        raise ModelError(f"model {spec!r}: the stand-in device has no option {unknown[0]!r}; its options are "
                         "chunk=C and prefill=P (sim:FORWARD_MS[:LAUNCHES][:chunk=C][:prefill=P][:replay])")
    try:
        if not 1 <= len(parts) <= 2:
            raise ValueError
        chunk_cost = float(named.get("chunk", SIM_CHUNK_COST))
        prefill = int(named["prefill"]) if "prefill" in named else None
        forward_ms = float(parts[0])
        launches = int(parts[1]) if len(parts) == 2 else 0
        if not forward_ms > 0 or forward_ms > 10_000 or launches < 0 or launches > 1_000_000:
            raise ValueError
        if not 0 <= chunk_cost <= 1 or (prefill is not None and not 0 <= prefill <= 1_000_000):
            raise ValueError
    except ValueError:
        raise ModelError(f"model {spec!r}: the stand-in device is sim:FORWARD_MS[:LAUNCHES][:chunk=C][:prefill=P]"
                         "[:replay] with 0 < FORWARD_MS <= 10000, 0 <= LAUNCHES, P <= 1000000 and 0 <= C <= 1 "
                         "(e.g. sim:8:300, sim:10:300:chunk=0:replay, sim:10:300:prefill=30000:replay)") from None
    if dtype not in ("auto", "float32"):
        raise ModelError(f"the simulated device {spec} makes float32 logits: --dtype {dtype} does not apply")
    if device != "cpu":
        raise ModelError(f"the simulated device {spec} runs on the host: --device {device} does not apply (use cpu)")
    if compile is not None or cache != "dynamic":
        raise ModelError(f"the simulated device {spec} has no KV cache or graphs: --cache and --compile do not apply")
    return SimModel(spec, forward_ms, launches, vocab.size, seed, bos_id=None, max_positions=None, replay=replay,
                    vocab=vocab, chunk_cost=chunk_cost, prefill_launches=prefill)
