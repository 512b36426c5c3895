"""The decode loop (``loop="pipelined"``, the default of :func:`toolkit.decode.generate.generate`).

The claim under test (llguidance, xgrammar): a fast enough mask costs nothing end to
end, because it is computed on the CPU while the device runs the forward pass.  The
loop is a serving engine's.  For each step ``t`` of a batch of ``B`` sequences (one
matcher each):

1. the host waits for the forward pass of step ``t`` (launched in step ``t - 1``) and
   for the masks of step ``t`` (filled by the batch call of step ``t - 1``, below);
2. the masks are copied to the device (from pinned memory on CUDA, no synchronisation)
   and applied to the logits by the ``apply`` kernel (:data:`toolkit.core.bitmask.APPLY_KERNELS`:
   ``torch``, our torch op, or xgrammar's or llguidance's kernel where installed);
3. a token per sequence is sampled on the device (greedy, or Gumbel-max with
   ``temperature``, seeded: :func:`_sample_on_device`), the ids copied to pinned host
   memory behind an event, and the forward pass of ``t + 1`` launched with them;
4. one batch call (:func:`toolkit.core.batch.make_batch`: native and without the GIL for
   masklab's strategies, the peers' own batch APIs, threads for anything else) accepts
   the ids and fills the masks of ``t + 1`` on a job thread while the device runs
   (:class:`Stepper`; its figures: :class:`StepFigures`).
   EOS ends a sequence (the mask allows it only where the grammar accepts).  A step
   whose mask allows a single token is counted as forced.  A live sequence whose mask
   allows no token (an engine bug) ends as ``rejected``; the sampler draws -1 for it,
   never an id past the vocabulary.

The sequences' state (:class:`Seq`) and the mask rows the engines fill
(:class:`MaskRows`) are shared with the serial loop kept to compare
(:mod:`toolkit.decode.serial`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.core import bitmask as bm
from toolkit.core.batch import FORCED_ROW, NO_TOKEN, SKIP, make_batch
from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import Item
from toolkit.decode.chunks import ChunkWidths
from toolkit.decode.model import LoadedModel

__all__ = ["JUMP_SCHEDULES", "Seq", "MaskRows", "StepFigures", "Stepper", "Refill", "jump_schedule", "pipelined_loop"]

JUMP_SCHEDULES = ("lookahead", "overlap", "inline")
"""Where jump-forward's work sits in a step (:func:`jump_schedule`; the first is what
``jump_forward=True`` means).  ``overlap``: on the mask thread beside the forward pass,
as the masks are; a forced run found after the id sampled in step ``t`` is fed in step
``t + 1`` (the sequence's draw of that step is dropped), so a run of ``n`` tokens saves
``n - 1`` forward passes and the host adds nothing to the critical path.
``lookahead``: ``overlap``, and where a mask allows at most
:data:`~toolkit.core.batch.LOOKAHEAD_K` tokens its fill also finds the run that would
follow each of them (masklab's strategies on a vocabulary with a C tokenizer:
:meth:`~toolkit.core.batch.NativeBatchMatcher.lookahead`), so the launch feeds the
sampled id with its run at the cost of one lookup in C (``n`` passes saved).
``inline``: the accepts and the forced tokens before the launch, which feeds each
sampled id with its run (``n`` passes saved; that work on the critical path)."""


def jump_schedule(jump: bool | str | None) -> str:
    """``jump_forward`` as a schedule: ``""`` (off: False, None, ``""``, ``"off"``), or one of
    :data:`JUMP_SCHEDULES` (True and ``"on"``: the first); a ``ValueError`` naming the
    valid values otherwise."""
    if jump is None or jump is False or jump in ("", "off"):
        return ""
    if jump is True or jump == "on":
        return JUMP_SCHEDULES[0]
    if isinstance(jump, str) and jump in JUMP_SCHEDULES:
        return jump
    raise ValueError(f"jump_forward must be a bool, 'off', 'on' or one of {', '.join(JUMP_SCHEDULES)}, got {jump!r}")


@dataclass
class Seq:
    """One sequence of a batch: its item, its matcher (None: its slot idles), the tokens
    it decoded, its TTFM, and how it ended."""

    item: Item | None  # None: a continuous batch's vacant slot
    matcher: Any
    tokens: list[int]
    ttfm_s: float
    done: bool = False
    status: str = "unfinished"
    forced: int = 0
    jumped: int = 0  # forced tokens fed without sampling (jump-forward)
    held: int = 0  # passes that fed a forced run in place of a draw (jump-forward's overlap path)
    error: str = ""
    reused: bool = False  # compiled in an earlier run (``generate(compiled=...)``)


class MaskRows:
    """The mask rows of one batch, one per sequence: the engines fill a numpy view
    (``mask``) of a tensor (``tensor``) over the same memory, which is copied to the
    device (pinned on CUDA, so the copy is a plain DMA).  Each loop's masker is one
    (:class:`Stepper`; the serial loop's :class:`~toolkit.decode.serial.Masker`)."""

    def __init__(self, seqs: list[Seq], vocab: Vocabulary, device: str) -> None:
        import torch

        self.seqs = seqs
        self.vocab = vocab
        shape = (len(seqs), bm.words(vocab.size))
        try:
            self.tensor = torch.zeros(shape, dtype=torch.int32, pin_memory=device.startswith("cuda"))
        except RuntimeError:  # no page-locked memory to be had: the copy is then synchronous, still correct
            self.tensor = torch.zeros(shape, dtype=torch.int32)
        self.mask = self.tensor.numpy()
        self.eos = np.asarray(vocab.eos_ids[:1], dtype=np.int64)
        self.seq_times: list[float] = []  # every sequence's mask seconds in the loop

    def fill(self, i: int) -> float | None:
        """Sequence ``i``'s mask into its row (a finished sequence's: EOS only): the
        seconds it took, None for a finished one."""
        s = self.seqs[i]
        row = self.mask[i]
        t0 = time.perf_counter()
        if s.done:
            row[:] = 0
            bm.set_bits(row, self.eos)  # a finished sequence only repeats EOS (ignored)
            return None
        info = s.matcher.fill_bitmask(self.mask, i)
        if info.allowed == 1:
            s.forced += 1
        return time.perf_counter() - t0


@dataclass
class StepFigures:
    """What one step's batch call took (:meth:`Stepper.wait`): the mask seconds summed
    over the rows masked and the slowest row's, how many rows, the batch call's wall
    seconds, each row's seconds (empty when the call does not time rows: its wall time
    then stands for them), the sequences still live after it, and the forced tokens it
    accepted (jump-forward's ``overlap`` schedule: the next launch feeds them)."""

    mask_s: float
    mask_max_s: float
    masks: int
    mask_wall_s: float
    seq_times: list[float]
    live: int
    jumped: int = 0

    @classmethod
    def none(cls, live: int) -> StepFigures:
        """A step without mask work (step 0, whose masks are in TTFM; no masks at all)."""
        return cls(0.0, 0.0, 0, 0.0, [], live)


def _sample_on_device(logits: Any, temperature: float, generator: Any) -> Any:
    """The pipelined loop's sampler, on the logits' device with no host round trip:
    greedy (``temperature <= 0``, the same ids as the serial loop's sampler) or Gumbel-max, the
    exponential race ``argmax(logits / T - log E)`` with ``E ~ Exp(1)`` from the seeded
    ``generator`` (a draw from softmax(logits / T); a masked token, -inf, never wins).
    A row that allows no token draws -1."""
    import torch

    best = torch.amax(logits, dim=-1)
    ok = best > float("-inf")  # False for NaN too
    if temperature <= 0:
        ids = torch.argmax(logits, dim=-1)
    else:
        e = torch.empty(logits.shape, dtype=torch.float32, device=logits.device).exponential_(generator=generator)
        ids = torch.argmax(logits.float() / temperature - torch.log(e), dim=-1)
    return torch.where(ok, ids, -1)


class _JobThread:
    """One worker thread running ``fn(*args)`` on request: :meth:`submit` starts it,
    :meth:`wait` returns its result (re-raising its exception).  Lighter than a
    ``concurrent.futures`` pool on the critical path: the hand-over is one lock
    released (a ``threading.Event`` is a condition over a lock, several times the
    work), and the job's end is another lock released (waited for only while a job is
    in flight)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._go = threading.Lock()
        self._go.acquire()  # released by submit
        self._fin = threading.Lock()
        self._fin.acquire()  # released when the job ends
        self._busy = False  # a job submitted and not waited for
        self._args: tuple[Any, ...] = ()
        self._result: Any = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="masklab-masks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._go.acquire()
            if self._stop:
                return
            try:
                self._result, self._error = self.fn(*self._args), None
            except BaseException as e:  # noqa: BLE001 - handed to wait()
                self._result, self._error = None, e
            self._fin.release()

    def submit(self, *args: Any) -> None:
        self.wait_done()
        self._args = args
        self._busy = True
        self._go.release()

    def wait_done(self) -> None:
        """Until the job in flight (if any) has ended."""
        if self._busy:
            self._fin.acquire()
            self._busy = False

    def wait(self) -> Any:
        self.wait_done()
        if self._error is not None:
            raise self._error
        return self._result

    def close(self) -> None:
        """Stop the thread (after the job in flight; its error, if any, was the caller's
        to take from :meth:`wait`, and is not raised again here)."""
        self.wait_done()
        self._stop = True
        self._go.release()
        self._thread.join()


class Stepper(MaskRows):
    """The matchers of one batch stepped by a :class:`~toolkit.core.protocol.BatchMatcher`
    (``engine``'s own, or the threaded fallback) on a job thread, while the device runs
    the next forward pass: accept the sampled ids, fill the next masks.  The
    bookkeeping (tokens, statuses, forced steps) is on arrays; only a sequence that
    ends takes a Python step of its own.

    ``continuous``: a slot whose sequence ended takes another (:meth:`retire`,
    :meth:`start`, then :meth:`arrange`: the batch call is made again over the live
    matchers), and a sequence that wrote ``max_tokens`` ends there (``unfinished``).

    ``jump``: jump-forward (:func:`jump_schedule`).  ``inline``: :meth:`jump` before the
    launch, the fill on the job thread.  ``overlap``: the job thread does both
    (:meth:`_overlap_step`); :meth:`take_runs` hands the launch the runs it found."""

    def __init__(self, seqs: list[Seq], vocab: Vocabulary, engine: Any, threads: int | None, device: str,
                 max_tokens: int, jump: bool | str = False, continuous: bool = False) -> None:
        super().__init__(seqs, vocab, device)
        self.engine, self.threads = engine, threads
        self.max_tokens = max_tokens
        self.jump_mode = jump_schedule(jump)
        self.jump_forward = bool(self.jump_mode)
        self.continuous = continuous
        self.is_eos = np.zeros(vocab.size, dtype=bool)
        self.is_eos[list(vocab.eos_ids)] = True
        self.batch: Any = None
        self.retired: list[Seq] = []  # sequences whose slot took another (continuous)
        self._pending: Any = None  # what jump() left to _settle()
        # overlap: slot -> (its sequence, the forced run the next launch feeds it)
        self._runs: dict[int, tuple[Seq, list[int]]] = {}
        # slot -> (its sequence, the rest of a run the launch cut: ChunkWidths), fed next
        self._rest: dict[int, tuple[Seq, list[int]]] = {}
        for s in seqs:
            self._prepare(s)
        self.arrange()
        fn = {"": self._step, "inline": self._fill_step, "overlap": self._overlap_step,
              "lookahead": self._overlap_step}[self.jump_mode]
        self.job = _JobThread(fn)

    def arrange(self) -> None:
        """(Re)make the rows: the slots whose sequence is live, their arrays (tokens so
        far copied in), their compact mask rows and the batch call over their matchers.
        Call :meth:`harvest` first when rows hold tokens."""
        seqs = self.seqs
        old_tables = self.batch._la if self.batch is not None and getattr(self, "_tables", False) else None
        old_seqs: list[Seq] = getattr(self, "_row_seqs", [])
        self.rows = np.asarray([i for i, s in enumerate(seqs) if s.matcher is not None and not s.done], dtype=np.int64)
        self.row_list: list[int] = self.rows.tolist()
        self._row_seqs = [seqs[i] for i in self.row_list]
        if self.batch is not None:
            self.batch.close()
        n = len(self.rows)
        self.batch = make_batch(self.engine, [seqs[i].matcher for i in self.rows], self.threads) if n else None
        # lookahead: the batch's fills make the tables (engines without them: overlap)
        self._tables = (self.jump_mode == "lookahead" and self.batch is not None
                        and hasattr(self.batch, "lookahead") and self.batch.lookahead())
        self._ahead: dict[int, list[int]] = {}  # lookahead: row -> the run fed with its draw this step
        self._table_runs = False  # some table holds a run (the launch then waits for the draw)
        # a compact mask when some slot has no live matcher (copied into its rows each step)
        self.compact = self.mask if n == len(seqs) else np.zeros((n, self.mask.shape[1]), dtype=np.int32)
        if self.compact is not self.mask:
            self.compact[:] = self.mask[self.rows]
        self.live = np.ones(n, dtype=bool)
        self.out = np.zeros((n, self.max_tokens + 1), dtype=np.int32)
        self.n_out = np.zeros(n, dtype=np.int64)
        for j, i in enumerate(self.rows.tolist()):
            toks = seqs[i].tokens
            self.out[j, : len(toks)] = toks
            self.n_out[j] = len(toks)
        self.forced = np.zeros(n, dtype=np.int64)
        self.jumped = np.zeros(n, dtype=np.int64)  # forced tokens fed without sampling
        self.held_steps = np.zeros(n, dtype=np.int64)  # passes that fed a run in place of a draw
        self.tok = np.full(n, SKIP, dtype=np.int32)
        self.accepted = np.full(n, -1, dtype=np.int8)  # jump(): 1, 0 refused, -1 not live, -2 nothing drawn
        self._held = np.zeros(n, dtype=bool)  # overlap: rows fed a forced run this step (their draw is not theirs)
        self._any_held = False
        self._row_of = {slot: k for k, slot in enumerate(self.row_list)}
        if self._tables and old_tables is not None:  # a sequence that keeps its matcher keeps its table
            where = {id(s): j for j, s in enumerate(old_seqs)}  # the old rows' sequences (alive: no id reused)
            for k, s in enumerate(self._row_seqs):
                j = where.get(id(s))
                if j is not None:
                    for new, old in zip(self.batch._la[:5], old_tables[:5], strict=True):
                        new[k] = old[j]
            self._table_runs = self._any_table_run()

    def harvest(self) -> None:
        """Hand the rows' tokens and forced counts to their sequences."""
        self._settle()
        for j, i in enumerate(self.rows.tolist()):
            s = self.seqs[i]
            s.tokens = self.out[j, : self.n_out[j]].tolist()
            s.forced += int(self.forced[j])
            s.jumped += int(self.jumped[j])
            s.held += int(self.held_steps[j])
        self.forced[:] = 0
        self.jumped[:] = 0
        self.held_steps[:] = 0

    def ended(self) -> list[int]:
        """The slots whose sequence ended and still holds the slot (continuous)."""
        return [i for i, s in enumerate(self.seqs) if s.done and s.item is not None]

    def retire(self, slot: int) -> Seq:
        """Take the ended sequence out of ``slot`` (after :meth:`harvest`); the slot is
        vacant until :meth:`start`."""
        s = self.seqs[slot]
        self.retired.append(s)
        self.seqs[slot] = Seq(None, None, [], 0.0, done=True, status="vacant")
        return s

    def _prepare(self, seq: Seq) -> None:
        """Jump-forward: what the forced tokens read once per vocabulary, built before
        the loop (a server has it from its first request)."""
        if self.jump_forward and seq.matcher is not None:
            seq.matcher.prepare_forced()

    def start(self, slot: int, seq: Seq) -> None:
        """``seq`` takes the vacant ``slot``: its first mask is filled (in its TTFM)."""
        self._prepare(seq)
        self.seqs[slot] = seq
        t0 = time.perf_counter()
        self.fill(slot)
        seq.ttfm_s += time.perf_counter() - t0

    def live_count(self) -> int:
        return int(self.live.sum())

    def submit(self, ids: np.ndarray, last: bool = False) -> None:
        """Start the step for the sampled ``ids`` (one per slot, -1: none to draw) on
        the job thread; ``last``: no step will use the masks it fills (they count no
        forced step).  :meth:`wait` gives its figures."""
        # the overlap schedules' step reads each row's id from its slot (jump())
        self.job.submit(ids.copy() if self.jump_mode in ("overlap", "lookahead") else ids[self.rows].copy(), last)

    def submit_fill(self, last: bool = False) -> None:
        """Start the fill of every live sequence's next mask (jump-forward runs: the
        tokens were accepted by :meth:`jump`) on the job thread."""
        self.job.submit(None, last)

    def wait(self) -> StepFigures:
        """The figures of the step submitted last."""
        return self.job.wait()

    def _end(self, j: int, status: str, error: str = "") -> None:
        s = self.seqs[int(self.rows[j])]
        s.done, s.status, s.error = True, status, error
        self.live[j] = False
        row = self.mask[int(self.rows[j])]
        row[:] = 0
        bm.set_bits(row, self.eos)  # a finished sequence only repeats EOS (ignored)

    def _step(self, ids: np.ndarray, last: bool = False) -> StepFigures:
        """Accept ``ids`` and fill the next masks."""
        if self.batch is None:
            return StepFigures.none(0)
        live = self.live
        tok = self.tok
        tok[:] = SKIP
        nothing = live & (ids < 0)  # the sampler found no allowed token: an empty mask
        go = live & ~nothing
        tok[go] = ids[go]
        res = self.batch.step(tok, self.compact)
        acc = go & (res.accepted == 1)
        if acc.any():
            j = np.flatnonzero(acc)
            self.out[j, self.n_out[j]] = tok[j]
            self.n_out[j] += 1
        ended = acc & self.is_eos[np.where(acc, tok, 0)]
        refused = go & (res.accepted == 0)
        full = acc & ~ended & (self.n_out >= self.max_tokens) if self.continuous else np.zeros_like(acc)
        for j in np.flatnonzero(nothing | ended | refused | full).tolist():
            if nothing[j]:
                self._end(j, "rejected", "the mask allowed no token")
            elif ended[j]:
                self._end(j, "finished")
            elif full[j]:
                self._end(j, "unfinished")
            else:
                m = self.seqs[int(self.rows[j])].matcher
                self._end(j, "error" if m.error else "rejected")
        return self._after(res, go, last)

    def _fill_step(self, ids: Any, last: bool = False) -> StepFigures:
        """:meth:`_step` without the accepts: the masks of the live sequences."""
        if self.batch is None:
            return StepFigures.none(0)
        self._settle()
        tok = self.tok
        tok[:] = SKIP
        tok[self.live] = NO_TOKEN
        res = self.batch.step(tok, self.compact)
        return self._after(res, self.live, last)

    def take_runs(self) -> dict[int, list[int]]:
        """``overlap``: the forced runs the step just waited for found, and the rest of
        the runs the last launch cut (:meth:`defer`), slot -> tokens, for the launch to
        feed instead of those slots' draws; the next :meth:`submit` skips their rows
        (they accepted the run already, and their masks are filled)."""
        if self._any_held:
            self._held[:] = False
            self._any_held = False
        if not self._runs and not self._rest:  # most steps (plain Python here: it is on the critical path)
            return {}
        runs = {slot: toks for slot, (seq, toks) in (*self._runs.items(), *self._rest.items())
                if self.seqs[slot] is seq and not seq.done}
        self._runs, self._rest = {}, {}
        for slot in runs:
            self._held[self._row_of[slot]] = True
        self._any_held = bool(runs)
        return runs

    def defer(self, slot: int, rest: list[int]) -> None:
        """The tokens of ``slot``'s run that the launch did not feed (its chunk width cut
        the run): :meth:`take_runs` hands them to the next launch, in place of the
        slot's draw (its matcher accepted the whole run)."""
        self._rest[slot] = (self.seqs[slot], rest)

    def lookahead_ready(self) -> bool:
        """``lookahead``: some live row's table holds a run (the launch then reads the draw
        first, :meth:`lookahead_feed`)."""
        return self._table_runs

    def lookahead_feed(self, ids: np.ndarray) -> dict[int, list[int]]:
        """``lookahead``, on the critical path: slot -> its drawn id and the run its table
        holds after it, for the rows not held whose run leaves room for another token
        (one C call, :meth:`~toolkit.core.batch.NativeBatchMatcher.lookahead_runs`); the
        next :meth:`submit` accepts them."""
        found = self.batch.lookahead_runs(ids, self.rows, self.live, self._held)
        ahead, feed = {}, {}
        for k, run in found.items():
            if len(run) < self.max_tokens - 1 - int(self.n_out[k]):
                slot = self.row_list[k]
                ahead[k] = run
                feed[slot] = [int(ids[slot]), *run]
        self._ahead = ahead
        return feed

    def _overlap_step(self, ids: np.ndarray, last: bool = False) -> StepFigures:
        """``overlap``'s (and ``lookahead``'s) step on the job thread: the rows not held
        accept their ids and find their forced tokens (:meth:`jump`), accept those
        (:meth:`_settle`; a row the launch fed its table's run accepts that run), and
        every row not held gets its next mask (and table); the runs found and not fed
        wait for :meth:`take_runs`."""
        if self.batch is None:
            return StepFigures.none(0)
        held = self._held
        self.held_steps[held] += 1
        kept = held & self.live
        self.live &= ~held
        self.jump(ids)
        self.live |= kept
        feed: dict[int, list[int]] = self._pending or {}
        ahead, self._ahead = self._ahead, {}
        for k, run in ahead.items():  # fed with the draw: accepted whatever jump() found
            if self.accepted[k] == 1:
                feed[k] = run
        self._pending = feed
        before = int(self.jumped.sum())
        self._settle()
        tok = self.tok
        tok[:] = SKIP
        go = self.live & ~held
        tok[go] = NO_TOKEN
        figs = self._after(self.batch.step(tok, self.compact), go, last)
        rows = self.row_list
        self._runs = {rows[k]: (self.seqs[rows[k]], run) for k, run in feed.items()
                      if self.live[k] and k not in ahead}
        figs.jumped = int(self.jumped.sum()) - before
        if self._tables:
            self._table_runs = self._any_table_run()
        return figs

    def _any_table_run(self) -> bool:
        """``lookahead``: some live row's table holds a run."""
        count, _, runs = self.batch._la[:3]
        return bool(((runs > 0) & (np.arange(runs.shape[1]) < count[:, None]))[self.live].any())

    def _after(self, res: Any, masked: np.ndarray, last: bool) -> StepFigures:
        """A batch call's bookkeeping: the forced steps (unless ``last``), the compact
        rows copied to their slots, and the figures of the rows ``masked``."""
        if not last:
            self.forced[self.live & (res.allowed == 1)] += 1
        if self.compact is not self.mask:
            self.mask[self.rows[self.live]] = self.compact[self.live]
        secs = res.seconds[masked]
        secs = secs[~np.isnan(secs)]
        live_now = int(self.live.sum())
        if len(secs):
            return StepFigures(float(secs.sum()), float(secs.max()), len(secs), res.wall_s, secs.tolist(), live_now)
        n = int(masked.sum())  # a batch call that does not time rows: its wall time stands for them
        if n:
            return StepFigures(res.wall_s, res.wall_s, n, res.wall_s, [], live_now)
        return StepFigures(0.0, 0.0, 0, res.wall_s, [], live_now)

    def jump(self, ids: np.ndarray) -> tuple[list[list[int]], int]:
        """Jump-forward's part of a step, on the critical path (the next forward pass
        feeds what it gives): each live sequence accepts its sampled id, then the tokens
        its grammar forces after it (:meth:`~toolkit.core.protocol.Matcher.forced_tokens`,
        as many as ``max_tokens`` leaves room for).  Returns each slot's run to feed (the
        sampled id and the forced tokens; the sampled id alone, or 0, for a slot that is
        done) and the tokens written.

        masklab's strategies accept, find the forced bytes and tokenize them for the whole
        batch in one C call (:meth:`~toolkit.core.batch.NativeBatchMatcher.accept_forced`);
        only a sequence whose forced text the C tokenizer leaves to Python (a vocabulary
        without one, bytes that are not UTF-8, a full row) takes a Python step.  Other
        engines take one per sequence (:meth:`_accept_each`).  What the launch does not
        need (the tokens written down, the statuses of the sequences that ended, the
        forced tokens accepted) is left to the mask thread, before the fill
        (:meth:`_settle`)."""
        runs = [[max(t, 0)] for t in ids.tolist()]
        if self.batch is None:
            return runs, 0
        native = getattr(self.batch, "accept_forced", None)
        n_ftok = ftok = None
        if native is not None:
            written, n_forced, forced_bytes, n_ftok, ftok = native(ids, self.rows, self.live, self.n_out,
                                                                   self.max_tokens, self.tok, self.accepted)
        else:
            written, n_forced, forced_bytes = self._accept_each(ids)
        feed: dict[int, list[int]] = {}
        rows = self.row_list
        for k in np.flatnonzero(n_forced).tolist():
            slot = rows[k]
            if ftok is not None and n_ftok[k] >= 0:  # tokenized in the C call
                forced = ftok[k, : n_ftok[k]].tolist()
            elif native is not None:
                m = self.seqs[slot].matcher
                forced = forced_bytes[k].tobytes()[: n_forced[k]]
                if len(forced) == FORCED_ROW:  # the batch call's row is full: the whole run
                    forced = m.forced_bytes()
                forced = m.tokens_of_forced(forced)
            else:
                forced = forced_bytes[k]
            room = self.max_tokens - 1 - self.n_out[k]
            if forced and room > 0:
                forced = forced[:room]
                feed[k] = forced
                runs[slot] = [runs[slot][0], *forced]
                written += len(forced)
                if len(forced) == room:
                    self.live[k] = False
        self._pending = feed
        return runs, written

    def _accept_each(self, ids: np.ndarray) -> tuple[int, np.ndarray, list[list[int]]]:
        """:meth:`jump`'s batch call made one matcher at a time (engines without a native
        batch), with the same effects on ``tok``, ``accepted`` and ``live``; each row's
        forced tokens stand in for its bytes (``n_forced`` counts them)."""
        n = len(self.rows)
        n_forced = np.zeros(n, dtype=np.int64)
        forced: list[list[int]] = [[] for _ in range(n)]
        self.tok[:] = SKIP
        self.accepted[:] = -1
        written = 0
        for k in np.flatnonzero(self.live).tolist():
            t = int(ids[int(self.rows[k])])
            if t < 0:
                self.accepted[k], self.live[k] = -2, False
                continue
            self.tok[k] = t
            m = self.seqs[int(self.rows[k])].matcher
            self.accepted[k] = ok = m.accept_allowed(t)
            written += ok
            if not ok or self.is_eos[t] or self.n_out[k] + 1 >= self.max_tokens:
                self.live[k] = False
                continue
            forced[k] = m.forced_tokens()
            n_forced[k] = len(forced[k])
        return written, n_forced, forced

    def _settle(self) -> None:
        """The rest of :meth:`jump` (on the mask thread, before the fill): the sampled
        ids and the forced tokens written down and accepted, the statuses of the
        sequences that ended."""
        feed = self._pending
        if feed is None:
            return
        self._pending = None
        acc = self.accepted == 1
        j = np.flatnonzero(acc)
        self.out[j, self.n_out[j]] = self.tok[j]
        self.n_out[j] += 1
        ended = acc & self.is_eos[np.where(acc, self.tok, 0)]
        for k in np.flatnonzero((self.accepted == 0) | (self.accepted == -2) | ended).tolist():
            m = self.seqs[int(self.rows[k])].matcher
            if self.accepted[k] == -2:
                self._end(k, "rejected", "the mask allowed no token")
            elif ended[k]:
                self._end(k, "finished")
            else:
                self._end(k, "error" if m.error else "rejected")
        for k, forced in feed.items():
            m = self.seqs[int(self.rows[k])].matcher
            took = m.accept_tokens(forced)
            self.out[k, self.n_out[k]: self.n_out[k] + took] = forced[:took]
            self.n_out[k] += took
            self.jumped[k] += took
            if took < len(forced):  # the forward pass was fed them: the sequence cannot go on
                self._end(k, "error", m.error or f"a forced token was refused: {forced[took]}")
        for k in np.flatnonzero(~self.live & (self.n_out >= self.max_tokens)).tolist():
            self.seqs[int(self.rows[k])].done = True  # out of room: the loop would stop it the same way

    def finish(self) -> None:
        """Hand the tokens and forced counts back to the sequences; stop the threads."""
        self.harvest()
        if self.batch is not None:
            self.batch.close()
        self.job.close()


@dataclass
class Refill:
    """What a continuous batch's vacant slot takes next: the prompt's ids, the text a
    replaying model replays (None: its own), and the sequence with its matcher (None in
    the unconstrained loop)."""

    prompt: list[int]
    target: bytes | None = None
    seq: Seq | None = None


def pipelined_loop(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                   seed: int, stepper: Stepper | None, kernel: Any = None, steps: int | None = None,
                   targets: list[bytes | None] | None = None, feeder: Callable[[], Refill | None] | None = None,
                   eos: Sequence[int] = (), idle: Sequence[bool] = (),
                   chunks: str | int = "auto", beside: bool = False) -> tuple[list[dict[str, Any]], float]:
    """One batch as a serving engine runs it (see the module doc): the logits of step
    ``t`` are masked and sampled on the device, the ids copied to (pinned) host memory
    behind an event, the forward pass of ``t + 1`` launched, and only then are the ids
    accepted and the masks of ``t + 1`` filled, on the stepper's threads while the
    device runs.  No stepper: the same loop without mask work (the unconstrained
    baseline; a sequence ends at an ``eos`` id, and the slots ``idle`` marks never
    start, as a masked run's refused items do).  ``steps`` stops it earlier with a
    ``max_tokens`` run's shapes.  The forward pass launched in the last step is never
    waited for inside the timing (both modes launch it, as a server would).
    ``targets``: what a replaying model replays per slot.

    ``feeder`` (continuous batching): at the start of a step each slot whose sequence
    ended takes the next :class:`Refill` (None: the queue is empty, the slot stays
    vacant): its prompt's pass into the slot's rows of the cache and logits, its first
    mask, the batch call made again; the step's ``refill_s`` is that work.  The loop
    runs until every slot is vacant, each sequence at most ``max_tokens`` tokens.
    ``beside``: a refill's prompt pass is launched after the step's forward pass (its
    launches while the device runs that pass, its device work queued behind it, no
    wait), the slot idle in that pass, and the new sequence takes its first mask and
    draws its first token in the next step (what a server that schedules a prefill
    beside the decode step does); else the prompt pass runs before the step's draw
    and is waited for.

    ``chunks``: jump-forward's chunk widths (``overlap`` and ``lookahead``:
    :class:`~toolkit.decode.chunks.ChunkWidths`; ``inline`` feeds whole runs).

    Returns the step rows (``width``: the tokens per sequence of the pass the step
    waited for, 0 for the prompts') and the wall time of the steps."""
    pipe = _Pipeline(lm, prompts, max_tokens, temperature, seed, stepper, kernel, steps, targets, feeder, eos,
                     chunks, beside)
    if stepper is None and len(idle):
        pipe.plain_live &= ~np.asarray(idle, dtype=bool)
        pipe.live = int(pipe.plain_live.sum())
    return pipe.run()


class _Pipeline:
    """One batch of :func:`pipelined_loop`: its device buffers (made before the loop,
    outside inference mode) and the state one step hands the next (the logits launched,
    a batch call in flight, the sequences live)."""

    def __init__(self, lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float, seed: int,
                 stepper: Stepper | None, kernel: Any, steps: int | None, targets: list[bytes | None] | None,
                 feeder: Callable[[], Refill | None] | None, eos: Sequence[int], chunks: str | int = "auto",
                 beside: bool = False) -> None:
        import torch

        self.lm, self.stepper, self.kernel, self.temperature, self.max_tokens = lm, stepper, kernel, temperature, max_tokens
        self.cuda = lm.device.startswith("cuda")
        self.sim = bool(getattr(lm, "simulated", False))  # the stand-in's device operations (toolkit.decode.sim)
        self.gen = torch.Generator(device=lm.device).manual_seed(seed)
        self.jump = stepper is not None and stepper.jump_mode == "inline"
        self.overlap = stepper is not None and stepper.jump_mode in ("overlap", "lookahead")
        self.widths = ChunkWidths(chunks) if self.overlap else None
        self.launched: int | None = None  # the width of the pass in flight (None: the prompts' pass, none)
        self.pre_s = 0.0  # its launch and the wait for the ids before it
        self.feeder = feeder
        self.beside = beside and feeder is not None
        self.waiting: list[tuple[int, Refill]] = []  # beside: slots whose next sequence's prompt pass is to launch
        self.joining: list[tuple[int, Refill]] = []  # beside: slots whose prompt pass was launched last step
        self.dec = lm.start(prompts, max_tokens, chunks=self.jump or self.overlap, targets=targets, lazy=self.sim,
                            refills=feeder is not None)
        # continuous: until every slot is vacant (each sequence ends within max_tokens steps)
        self.n = (max_tokens if steps is None else min(steps, max_tokens)) if feeder is None else 1 << 62
        try:
            self.host_ids = torch.empty(len(prompts), dtype=torch.long, pin_memory=self.cuda)
        except RuntimeError:  # no page-locked memory: an ordinary copy, still correct
            self.host_ids = torch.empty(len(prompts), dtype=torch.long)
        self.ids_np = self.host_ids.numpy()
        self.event = torch.cuda.Event() if self.cuda else lm.event() if self.sim else None
        self.mask_dev = None
        if stepper is not None and not self.sim:
            self.mask_dev = (torch.empty(stepper.tensor.shape, dtype=torch.int32, device=lm.device) if self.cuda
                             else stepper.tensor)
        self.pending = False  # a step submitted to the stepper and not waited for
        # the unconstrained loop's sequences: live, tokens written, holding their slot
        self.is_eos = np.zeros(max(lm.vocab_size, 1), dtype=bool)
        self.is_eos[[t for t in eos if 0 <= t < lm.vocab_size]] = True
        self.plain_live = np.ones(len(prompts), dtype=bool)
        self.plain_n = np.zeros(len(prompts), dtype=np.int64)
        self.live = stepper.live_count() if stepper is not None else len(prompts)
        self.logits: Any = None

    def run(self) -> tuple[list[dict[str, Any]], float]:
        """The steps: their rows and wall time (see :func:`pipelined_loop`)."""
        import torch

        perf, lm, stepper = time.perf_counter, self.lm, self.stepper
        rows: list[dict[str, Any]] = []
        with torch.inference_mode():
            t_start = perf()
            self.logits = self.dec.forward()  # the prompts' pass: step 0's forward, launched
            launch = perf() - t_start
            wall = None
            jumped = 0  # forced tokens the overlap schedule accepted, counted in the next step's row
            for step in range(self.n):
                t0 = perf()
                lm.synchronize()
                t1 = perf()
                waited = self.launched  # the width of the pass just waited for
                if self.widths is not None and waited is not None:
                    self.widths.record(waited, self.pre_s + (t1 - t0))
                info: StepFigures | None = None
                if stepper is not None and self.pending:
                    info = stepper.wait()
                    self.pending = False
                    self.live = info.live
                    jumped += info.jumped
                tw = tr = perf()
                if self.feeder is not None:
                    self._refill()
                    tr = perf()
                if not self.live and self.waiting:  # beside: no pass to launch the prompts beside
                    self._launch_waiting()
                    self.lm.synchronize()
                    self._join(arrange=True)
                    tr = perf()
                if not self.live:  # the forward pass just waited for is not needed
                    wall = t0 - t_start
                    break
                if stepper is not None:
                    if self.sim:
                        lm.apply(self.logits, stepper.mask)
                    else:
                        if self.cuda:
                            self.mask_dev.copy_(stepper.tensor, non_blocking=True)
                        self.kernel(self.logits, self.mask_dev, stepper.vocab.size)
                t3 = perf()
                nxt = self._sample()
                t4 = perf()
                active = self.live
                written, accept_s, forward_s, t6, ids_s = self._advance(step, nxt, t4)
                t7 = t6
                if self.waiting:  # beside: after the step's launch, while the device runs it
                    self._launch_waiting()
                    t7 = perf()
                rows.append({"step": step, "active": active, "tokens": written + jumped, "width": waited or 0,
                             "forward_s": launch + (t1 - t0) + forward_s, "launch_s": launch + forward_s,
                             "wait_s": tw - t1, "refill_s": tr - tw + (t7 - t6), "apply_s": t3 - tr,
                             "sample_s": t4 - t3 + ids_s, "accept_s": accept_s, "step_s": launch + t7 - t0})
                if info is None:  # step 0's masks are the first ones (in TTFM), or no masks
                    info = StepFigures.none(self.live)
                else:  # the figures of the masks this step waited for (bookkeeping, after the step)
                    stepper.seq_times.extend(info.seq_times)
                rows[-1].update(mask_s=info.mask_s, mask_max_s=info.mask_max_s, masks=info.masks,
                                mask_wall_s=info.mask_wall_s)
                launch = 0.0
                jumped = 0
            if wall is None:
                wall = perf() - t_start
            if self.pending:
                jumped += stepper.wait().jumped  # the last ids accepted (the masks it fills are not needed)
            if rows:
                rows[-1]["tokens"] += jumped  # written, never fed: the sequences ended
            lm.synchronize()  # the forward pass launched last, outside the timing
        return rows, wall

    def _refill(self) -> None:
        """Continuous batching: each slot whose sequence ended takes the feeder's next one
        (``beside``: the sequences whose prompt pass ran beside the last step join first,
        and the new ones wait for :meth:`_launch_waiting`)."""
        stepper, dec = self.stepper, self.dec
        joined = self._join(arrange=False)
        if stepper is not None:
            ended = stepper.ended()
            if not ended:
                if joined:
                    stepper.harvest()
                    stepper.arrange()
                    self.live = stepper.live_count()
                return
            stepper.harvest()
            for slot in ended:
                stepper.retire(slot)
                nxt = self.feeder()  # type: ignore[misc]
                if nxt is None or nxt.seq is None:
                    dec.release(slot)
                    continue
                if self.beside:
                    dec.release(slot)
                    self.waiting.append((slot, nxt))
                    continue
                stepper.start(slot, nxt.seq)
                dec.refill(slot, nxt.prompt, nxt.target, self.logits)
            stepper.arrange()
            self.live = stepper.live_count()
        else:
            for slot in np.flatnonzero(~self.plain_live & (self.plain_n >= 0)).tolist():
                nxt = self.feeder()  # type: ignore[misc]
                if nxt is None:
                    self.plain_n[slot] = -1  # vacant
                    dec.release(slot)
                    continue
                if self.beside:
                    self.plain_n[slot] = -2  # its prompt pass is launched with this step's pass
                    dec.release(slot)
                    self.waiting.append((slot, nxt))
                    continue
                dec.refill(slot, nxt.prompt, nxt.target, self.logits)
                self.plain_live[slot], self.plain_n[slot] = True, 0
            self.live = int(self.plain_live.sum())
        if not self.beside:
            # the prompts' passes are device work of this step's refills, not of its sampling
            self.lm.synchronize()

    def _launch_waiting(self) -> None:
        """``beside``: the prompt passes of the slots refilled this step, launched after
        its forward pass (the slots' rows of its logits, which they were idle in, become
        their prompts' last logits); the sequences join at the next step (:meth:`_join`)."""
        for slot, nxt in self.waiting:
            self.dec.refill(slot, nxt.prompt, nxt.target, self.logits)
        self.joining, self.waiting = self.waiting, []

    def _join(self, arrange: bool) -> bool:
        """``beside``: the sequences whose prompt pass was launched last step take their
        slots (their first masks filled); ``arrange``: the batch call made again here
        (else by the caller).  Whether any joined."""
        stepper = self.stepper
        if not self.joining:
            return False
        for slot, nxt in self.joining:
            if stepper is not None:
                stepper.start(slot, nxt.seq)  # type: ignore[arg-type]
            else:
                self.plain_live[slot], self.plain_n[slot] = True, 0
        self.joining = []
        if stepper is None:
            self.live = int(self.plain_live.sum())
        elif arrange:
            stepper.harvest()
            stepper.arrange()
            self.live = stepper.live_count()
        return True

    def _sample(self) -> Any:
        """Draw the step's ids on the device and start their copy to the host (behind
        the event); the ids the next forward pass is fed (-1, nothing to draw, as 0:
        its matcher ends that row)."""
        if self.sim and self.temperature <= 0:
            drawn = self.lm.greedy(self.logits)
        elif self.sim:
            drawn = _sample_on_device(self.logits.tensor(), self.temperature, self.gen)
            self.lm.sampled()
        else:
            drawn = _sample_on_device(self.logits, self.temperature, self.gen)
        self.host_ids.copy_(drawn, non_blocking=True)
        if self.event is not None:
            self.event.record()
        return drawn.clamp(min=0)

    def _plain_accept(self) -> int:
        """The unconstrained loop's bookkeeping of the ids drawn: the tokens written; a
        sequence ends at EOS (and, continuous, at ``max_tokens``)."""
        live = self.plain_live
        written = int(live.sum())
        self.plain_n[live] += 1
        end = live & self.is_eos[np.clip(self.ids_np, 0, len(self.is_eos) - 1)]
        if self.feeder is not None:
            end |= live & (self.plain_n >= self.max_tokens)
        live &= ~end
        self.live = int(live.sum())
        return written

    def _advance(self, step: int, nxt: Any, t4: float) -> tuple[int, float, float, float, float]:
        """Launch the next forward pass and submit the next masks: ``(tokens written,
        the accept seconds on the critical path, the launch seconds, when it ended, the
        seconds waited for the sampled ids first)``.  Jump-forward ``inline`` accepts (and
        takes the forced tokens) first: the pass feeds them, so the host waits for the
        sampler (device time, counted with the sample) before its own work (the accept).
        ``overlap`` feeds the runs the last job found (waiting for the sampled ids first
        when there are any: the other slots' draws go in the same chunk step) and then
        steps as without jump-forward; ``lookahead`` also waits for the ids when some
        table holds a run, and feeds each drawn id with the run its table holds after it
        (the lookup is the accept seconds here)."""
        perf, stepper, event, last = time.perf_counter, self.stepper, self.event, step + 1 >= self.n
        more = self.feeder is not None or step + 1 < self.max_tokens
        if self.jump:
            if event is not None:
                event.synchronize()
            te = perf()
            runs, written = stepper.jump(self.ids_np)  # type: ignore[union-attr]
            tj = perf()
            self.launched = None
            if more and (stepper.live_count() or self.feeder is not None):  # type: ignore[union-attr]
                self.logits = self.dec.forward_chunks(runs)
                self.launched = max(len(r) for r in runs)
            t5 = perf()
            stepper.submit_fill(last=last)  # type: ignore[union-attr]
            self.pending = True
            t6 = perf()
            return written, (tj - te) + (t6 - t5), t5 - tj, t6, te - t4
        te = tj = t4
        held = 0
        self.launched = 1 if more else None
        if self.overlap:  # the runs the job thread found last step, fed instead of those slots' draws
            runs = stepper.take_runs()  # type: ignore[union-attr]
            held = len(runs)
            ahead = stepper.lookahead_ready() if more else False  # type: ignore[union-attr]
            if more and (runs or ahead):
                if event is not None:
                    event.synchronize()
                te = perf()
                feed = [[max(t, 0)] for t in self.ids_np.tolist()]
                for slot, run in runs.items():
                    feed[slot] = run
                if ahead:  # each draw that a table holds a run after: fed with it
                    for slot, run in stepper.lookahead_feed(self.ids_np).items():  # type: ignore[union-attr]
                        feed[slot] = run
                width = self._cut(feed)
                tj = perf()
                self.logits = self.dec.forward_chunks(feed)
                self.launched, more = width, False
        if more:
            self.logits = self.dec.forward(nxt)
        t5 = perf()
        self.pre_s = (t5 - tj) + (te - t4)
        if event is not None:
            event.synchronize()
        written = self.live - held
        if stepper is not None:
            stepper.submit(self.ids_np, last=last)
            self.pending = True
        else:
            written = self._plain_accept()
        t6 = perf()
        return written, (tj - te) + (t6 - t5), t5 - tj, t6, te - t4

    def _cut(self, feed: list[list[int]]) -> int:
        """The width of the chunk step feeding ``feed`` (:class:`~toolkit.decode.chunks.ChunkWidths`):
        the runs longer than it cut in place, their rest deferred to the next launch."""
        runs = [len(r) for r in feed if len(r) > 1]
        if not runs:
            return 1
        width = self.widths.choose(runs, self.live)  # type: ignore[union-attr]
        if width < max(runs):
            for slot, run in enumerate(feed):
                if len(run) > width:
                    feed[slot] = run[:width]
                    self.stepper.defer(slot, run[width:])  # type: ignore[union-attr]
        return width
