"""The decoding harness: engines inside a real model's decoding loop.

The claim under test (llguidance, xgrammar): a fast enough mask costs nothing end to
end, because it is computed on the CPU while the device runs the forward pass.  The
loop is a serving engine's (``loop="pipelined"``, the default).  For each step ``t``
of a batch of ``B`` sequences (one matcher each):

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
   the ids and fills the masks of ``t + 1`` on a job thread while the device runs.
   EOS ends a sequence (the mask allows it only where the grammar accepts).  A step
   whose mask allows a single token is counted as forced.  A live sequence whose mask
   allows no token (an engine bug) ends as ``rejected``; the sampler draws -1 for it,
   never an id past the vocabulary.

``loop="serial"`` is masklab's earlier loop, kept to compare: the masks of step ``t``
are submitted to a thread pool (a task per sequence) before the forward pass, then
waited for, applied, sampled, and every sequence's token accepted one after another.
The unconstrained baseline runs the same loop as the masked runs, without mask work.

Measured per step: forward (in the pipelined loop the launch plus the host's wait
for the device), mask (total over the batch, the slowest sequence, and every
sequence's own time), wait, apply, sample and accept (the part of accepting the
sampled tokens on the critical path) times; per run: constrained tokens/s,
``host_overhead_ms`` (wait + accept + the forward pass's slowdown against the
unconstrained one: what the host adds besides the apply kernel),
and with ``baseline=True`` the same loop without masks (unconstrained tokens/s) and
the overhead (constrained step time over unconstrained, minus 1); TTFM per sequence
(compile + first mask).  With ``compare_kernels`` every apply kernel is timed on the
run's device, batch and logits dtype with a real mask of the run, and checked to block
exactly what the torch op blocks (:func:`toolkit.core.bitmask.compare_apply_kernels`).
Every finished output is checked: a schema item's output must parse as JSON and
validate (``jsonschema``), a grammar or regex item's must be in the grammar's
language (:meth:`Grammar.accepts`).  Outputs cut by ``max_tokens`` are
``unfinished`` and are checked as prefixes: ``prefix_ok`` says whether the item's
masklab grammar can still complete them (:meth:`Grammar.accepts_prefix`; None when
the item has no grammar masklab can build).  When the engine's masks follow that
grammar (``grammar: "masklab"``: every non-schema item, and schemas for engines whose
``schema_grammar`` is ``"masklab"``) a False is a wrong mask, counted in
``bad_prefix``; when they follow the engine's own schema compiler (the peers) a False
only says the output left masklab's grammar, which is tighter than the schema by
design (:mod:`toolkit.jsonschema`), and is counted in ``outside_grammar``.  An
output that finished but fails its check is ``invalid`` (a wrong mask: the worst bug
this project can have); one whose schema ``jsonschema`` cannot check is
``unchecked``, never counted valid.  An item the engine refuses to compile
is a ``compile_error`` sequence (its slot idles); the run goes on; so is one whose
compile runs past ``compile_timeout``.

Prompts: ``prompt`` is a template rendered per item (:func:`render_prompt`: ``{spec}``
is the item's schema, grammar or regex text, ``{kind}`` what it is, ``{name}`` its
name), tokenized with the vocabulary after the model's BOS token when its
configuration has one.  The default, :data:`DEFAULT_PROMPT`, is the same short text
for every item; :data:`SPEC_PROMPT` puts the item's spec in the prompt, as a real
checkpoint needs.  ``chat`` (:func:`toolkit.decode.model.load_chat_template`) sends the
rendered prompt through a tokenizer's chat template instead: one user message, then the
generation prompt, with the template's own BOS and special tokens (what a chat
checkpoint expects).  Prompts of different lengths are left-padded, with an attention
mask and position ids counted from each sequence's first real token, so a sequence
decodes exactly as it would alone.  A prompt and ``max_tokens`` that do not fit the
model's positions make that item a ``prompt_too_long`` sequence (not compiled, its slot
idles) and the run goes on.  The unconstrained baseline
decodes the same prompts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit.bench.datasets import Item
from toolkit.core import bitmask as bm
from toolkit.core.batch import NO_TOKEN, SKIP, default_threads, make_batch
from toolkit.core.errors import DEFAULT_COMPILE_TIMEOUT, MasklabError, time_limit
from toolkit.core.vocab import Vocabulary
from toolkit.decode.model import CHUNK_ROOM, ChatTemplate, LoadedModel, ModelError
from toolkit.grammar.inputs import engine_input, is_native
from toolkit.grammar.ir import Grammar
from toolkit.grammar.special import marked_bytes, spelled
from toolkit.jsonschema.compiler import schema_value

__all__ = ["GenerateRun", "Baseline", "generate", "unconstrained", "check_output", "check_prefix", "item_grammar",
           "summarize", "render_prompt", "DEFAULT_PROMPT", "SPEC_PROMPT"]

DEFAULT_PROMPT = "Answer in the requested format.\n"
"""The prompt of every sequence unless told otherwise: short, the same for every item."""

SPEC_PROMPT = "Reply with only the output, nothing else. It must match this {kind}:\n{spec}\n"
"""A prompt that gives the model the item's spec (what a real checkpoint needs)."""

LOOPS = ("pipelined", "serial")
"""The decode loops :func:`generate` runs (see the module doc)."""

WARM_CHUNK_WIDTH = 16
"""Jump-forward runs warm up chunk steps of 2, 4, ... up to this many tokens (a compiled
model's chunk graph and its CUDA graphs per width, :func:`toolkit.decode.model.chunk_width`)."""

_KINDS = {"schema": "JSON schema", "lark": "Lark grammar", "regex": "regular expression"}
_PLACEHOLDERS = ("{spec}", "{kind}", "{name}")


def render_prompt(template: str, item: Item | None) -> str:
    """``template`` with ``{spec}`` (the schema as JSON, the grammar or the regex),
    ``{kind}`` (``JSON schema``, ``Lark grammar``, ``regular expression``) and
    ``{name}`` replaced for ``item``; other braces are left as they are.  A template
    with placeholders needs an item (ValueError)."""
    if item is None:
        if any(p in template for p in _PLACEHOLDERS):
            raise ValueError(f"the prompt {template[:60]!r} has item placeholders but no item is given")
        return template
    spec = item.spec if isinstance(item.spec, str) else json.dumps(item.spec, ensure_ascii=False)
    return (template.replace("{spec}", spec).replace("{kind}", _KINDS.get(item.kind, item.kind))
            .replace("{name}", item.name))


class _Prompts:
    """The token ids of each item's prompt, encoded once: BOS (when the model has one)
    and the text, or the chat template's ids of the text (``chat``)."""

    def __init__(self, template: str, vocab: Vocabulary, lm: LoadedModel, max_tokens: int,
                 chat: ChatTemplate | None = None) -> None:
        limit = lm.max_positions
        if limit is not None and max_tokens + 1 > limit:
            raise ModelError(f"max_tokens {max_tokens} and a prompt exceed the {limit} positions of {lm.spec}")
        self.template, self.vocab, self.lm, self.chat = template, vocab, lm, chat
        self._ids: dict[str, list[int]] = {}

    def __call__(self, item: Item | None) -> list[int]:
        text = render_prompt(self.template, item)
        if text not in self._ids:
            if self.chat is not None:
                self._ids[text] = self.chat.ids(text)
            else:
                bos = [] if self.lm.bos_id is None else [self.lm.bos_id]
                self._ids[text] = bos + self.vocab.encode(text)
            if not self._ids[text]:
                raise ModelError(f"the prompt is empty and {self.lm.spec} has no BOS token: a sequence needs a "
                                 "first token (give --prompt some text)")
        return self._ids[text]

    def too_long(self, item: Item | None, max_tokens: int) -> str:
        """Why the item's prompt plus ``max_tokens`` does not fit the model's positions
        ("" when it does)."""
        n, limit = len(self(item)), self.lm.max_positions
        if limit is None or n + max_tokens <= limit:
            return ""
        return f"a prompt of {n} tokens and max_tokens {max_tokens} exceed the {limit} positions of {self.lm.spec}"

    def slot(self, item: Item | None, max_tokens: int) -> list[int]:
        """The ids the item's batch slot decodes from: its prompt, or only the prompt's
        first token when it does not fit (the slot then idles, like a refused item's)."""
        ids = self(item)
        return ids[:1] if self.too_long(item, max_tokens) else ids


def _groups(items: Sequence[Any], batch: int) -> list[list[Any]]:
    """``items`` in batches of ``batch``, cycling to fill the last one."""
    return [[items[(b * batch + k) % len(items)] for k in range(batch)] for b in range(-(-len(items) // batch))]


@dataclass
class _Seq:
    item: Item
    matcher: Any
    tokens: list[int]
    ttfm_s: float
    done: bool = False
    status: str = "unfinished"
    forced: int = 0
    jumped: int = 0  # forced tokens fed without sampling (jump-forward)
    error: str = ""
    reused: bool = False  # compiled in an earlier run (``generate(compiled=...)``)


@dataclass
class _Compiled:
    """An item compiled by an engine, kept between runs (``generate(compiled=...)``): the
    compiled grammar and its compile seconds, or why the engine refused it."""

    compiled: Any
    seconds: float
    error: str = ""


class _Refused(Exception):
    """An item the engine refused in an earlier run (its message is the first error)."""


def check_output(item: Item, data: bytes | str, vocab: Vocabulary | None = None) -> tuple[bool | None, str]:
    """``(ok, why)``: does a finished output (its bytes, special tokens as their marks:
    :func:`toolkit.grammar.special.marked_bytes`) satisfy its item (see the module doc)?  ``ok``
    is None when it cannot be checked (a schema ``jsonschema`` refuses).  ``vocab``
    resolves the special tokens a grammar names (unbound, any special token would do)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if item.kind == "schema":
        try:
            value = json.loads(raw)
        except ValueError as e:  # UnicodeDecodeError included
            return False, f"not JSON: {e}"
        import jsonschema

        schema = schema_value(item.spec)
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as e:
            return False, f"schema: {e.message}"
        except jsonschema.SchemaError as e:
            return None, f"jsonschema cannot check this schema: {e.message}"
        return True, ""
    grammar = item.grammar()
    ok = (grammar if vocab is None else grammar.bind(vocab)).accepts(raw)
    return ok, "" if ok else "not in the grammar's language"


def item_grammar(item: Item, cache: dict[str, Any], vocab: Vocabulary | None = None) -> Grammar | None:
    """The item's grammar (bound to ``vocab`` when given), kept in ``cache`` by item name;
    None when masklab cannot build it (e.g. a schema keyword it does not support)."""
    if item.name not in cache:
        try:
            grammar = item.grammar()
            cache[item.name] = grammar if vocab is None else grammar.bind(vocab)
        except MasklabError:
            cache[item.name] = None
    return cache[item.name]


def check_prefix(item: Item, data: bytes, cache: dict[str, Any] | None = None,
                 vocab: Vocabulary | None = None) -> bool | None:
    """Can the item's grammar still complete ``data`` (an unfinished output; special
    tokens as in :func:`check_output`)?  None when masklab cannot build the item's grammar
    (e.g. a schema keyword it does not support).  ``cache`` keeps the grammars by item
    name across calls."""
    grammar = item_grammar(item, {} if cache is None else cache, vocab)
    return None if grammar is None else grammar.accepts_prefix(data)


@dataclass
class GenerateRun:
    """What :func:`generate` measured: per-step rows, per-sequence rows, the run's
    figures, and the apply kernels compared (empty unless ``compare_kernels``)."""

    steps: list[dict[str, Any]]
    sequences: list[dict[str, Any]]
    summary: dict[str, Any]
    kernels: list[dict[str, Any]] = field(default_factory=list)


def _sample(logits: Any, temperature: float, generator: Any) -> Any:
    """Greedy (``temperature <= 0``) or one draw per row from softmax(logits / T), by the
    inverse CDF (one uniform per row; ``torch.multinomial`` is ~6x slower on CPU).
    A token with probability 0 (a masked one) is never drawn: the draw is the first id
    whose float64 CDF exceeds ``u * total`` with ``u * total`` strictly below the total.
    A row that allows no token (every logit ``-inf``, or NaN) draws -1, never an id past
    the vocabulary: fed to the model, such an id would index past its embedding (on a
    GPU, a device-side assert that ends the process)."""
    import torch

    if temperature <= 0:
        best, ids = torch.max(logits, dim=-1)
        return torch.where(best > float("-inf"), ids, -1)  # NaN or -inf: nothing to draw
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    cdf = torch.cumsum(probs, dim=-1, dtype=torch.float64)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=logits.device)
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    ids = torch.searchsorted(cdf, x, right=True).squeeze(-1)
    return torch.where(total.squeeze(-1) > 0, ids, -1)  # NaN or 0: nothing to draw


def _decode_loop(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                 seed: int, masker: Any | None, kernel: Any = None, steps: int | None = None
                 ) -> tuple[list[dict[str, Any]], list[list[int]], float]:
    """Run one batch (one prompt per sequence); ``masker.submit(step)`` starts the
    step's masks, applied with ``kernel`` (see :func:`toolkit.core.bitmask.apply_kernel`);
    no masker: unconstrained.  ``steps`` (default ``max_tokens``) stops it earlier with
    the shapes of a ``max_tokens`` run (a compiled model's graphs are per shape).

    Returns the step rows, the tokens per sequence and the wall time of the steps.
    ``masker.finished(i)`` says when sequence i is done; ``masker.accept(i, t)`` feeds it.
    """
    import torch

    device = lm.device
    gen = torch.Generator(device=device).manual_seed(seed)
    dec = lm.start(prompts, max_tokens)
    nxt = None
    rows: list[dict[str, Any]] = []
    outs: list[list[int]] = [[] for _ in prompts]
    with torch.inference_mode():
        t_start = time.perf_counter()
        for step in range(max_tokens if steps is None else min(steps, max_tokens)):
            if masker is not None and masker.all_done():
                break
            t0 = time.perf_counter()
            fut = masker.submit(step) if masker is not None else None
            logits = dec.forward(nxt)
            lm.synchronize()
            t1 = time.perf_counter()
            times: list[float] = []
            if fut is not None:
                mask_t, times = fut.result()
                t2 = time.perf_counter()
                kernel(logits, mask_t.to(device, non_blocking=True), masker.vocab.size)
                lm.synchronize()
            else:
                t2 = t1
            t3 = time.perf_counter()
            drawn = _sample(logits, temperature, gen)
            tokens = drawn.tolist()
            nxt = drawn.clamp(min=0)  # a row with nothing to draw (-1) is ended by its matcher
            t4 = time.perf_counter()
            active = 0
            for i, t in enumerate(tokens):
                if masker is not None:
                    if masker.finished(i):
                        continue
                    masker.accept(i, t)
                outs[i].append(t)
                active += 1
            t5 = time.perf_counter()
            rows.append({"step": step, "active": active, "forward_s": t1 - t0, "mask_s": sum(times),
                         "mask_max_s": max(times, default=0.0), "masks": len(times), "wait_s": t2 - t1,
                         "apply_s": t3 - t2, "sample_s": t4 - t3, "accept_s": t5 - t4, "step_s": t5 - t0})
            if masker is not None:
                masker.seq_times.extend(times)
        wall = time.perf_counter() - t_start
    return rows, outs, wall


class _Pending:
    """The masks of one step being filled: ``result()`` waits for them all and gives the
    mask tensor and the mask time of each sequence masked (finished ones are not)."""

    def __init__(self, mask: Any, futures: list[Any]) -> None:
        self.mask = mask
        self.futures = futures

    def result(self) -> tuple[Any, list[float]]:
        return self.mask, [t for t in (f.result() for f in self.futures) if t is not None]


class _Masker:
    """The matchers of one batch and the pool that fills their masks during the forward pass."""

    def __init__(self, seqs: list[_Seq], vocab: Vocabulary, pool: ThreadPoolExecutor, device: str) -> None:
        import torch

        self.seqs = seqs
        self.vocab = vocab
        self.pool = pool
        # engines fill a numpy view; the tensor over the same memory is copied to the
        # device (pinned on CUDA, so the copy is a plain DMA)
        shape = (len(seqs), bm.words(vocab.size))
        try:
            self.tensor = torch.zeros(shape, dtype=torch.int32, pin_memory=device.startswith("cuda"))
        except RuntimeError:  # no page-locked memory to be had: the copy is then synchronous, still correct
            self.tensor = torch.zeros(shape, dtype=torch.int32)
        self.mask = self.tensor.numpy()
        self.eos = np.asarray(vocab.eos_ids[:1], dtype=np.int64)
        self.first = True
        self.seq_times: list[float] = []

    def _fill(self, i: int) -> float | None:
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

    def submit(self, step: int) -> _Pending:
        """Start this step's masks, one pool task per sequence (none nested: no deadlock)."""
        if self.first:  # computed (and timed) as part of TTFM already
            self.first = False
            return _Pending(self.tensor, [])
        return _Pending(self.tensor, [self.pool.submit(self._fill, i) for i in range(len(self.seqs))])

    def finished(self, i: int) -> bool:
        return self.seqs[i].done

    def all_done(self) -> bool:
        return all(s.done for s in self.seqs)

    def accept(self, i: int, t: int) -> None:
        s = self.seqs[i]
        if t < 0:  # the sampler found no allowed token: an empty mask for a live sequence
            s.done = True
            s.status = "rejected"
            s.error = "the mask allowed no token"
            return
        if not s.matcher.accept_token(t):
            s.done = True
            s.status = "error" if s.matcher.error else "rejected"
            return
        s.tokens.append(t)
        if t in self.vocab.eos_ids:
            s.done = True
            s.status = "finished"


def _sample_on_device(logits: Any, temperature: float, generator: Any) -> Any:
    """The pipelined loop's sampler, on the logits' device with no host round trip:
    greedy (``temperature <= 0``, the same ids as :func:`_sample`) or Gumbel-max, the
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
    ``concurrent.futures`` pool on the critical path: a finished job is one flag read."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self._go = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._args: tuple[Any, ...] = ()
        self._result: Any = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="masklab-masks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                return
            try:
                self._result, self._error = self.fn(*self._args), None
            except BaseException as e:  # noqa: BLE001 - handed to wait()
                self._result, self._error = None, e
            self._done.set()

    def submit(self, *args: Any) -> None:
        self._done.clear()
        self._args = args
        self._go.set()

    def wait(self) -> Any:
        if not self._done.is_set():
            self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def close(self) -> None:
        """Stop the thread (after the job in flight; its error, if any, was the caller's
        to take from :meth:`wait`, and is not raised again here)."""
        self._done.wait()
        self._stop = True
        self._go.set()
        self._thread.join()


class _Stepper(_Masker):
    """The matchers of one batch stepped by a :class:`~toolkit.core.protocol.BatchMatcher`
    (``engine``'s own, or the threaded fallback) on a job thread, while the device runs
    the next forward pass: accept the sampled ids, fill the next masks.  The
    bookkeeping (tokens, statuses, forced steps) is on arrays; only a sequence that
    ends takes a Python step of its own."""

    def __init__(self, seqs: list[_Seq], vocab: Vocabulary, engine: Any, threads: int | None, device: str,
                 max_tokens: int, jump: bool = False) -> None:
        super().__init__(seqs, vocab, None, device)
        self.max_tokens = max_tokens
        self.jump_forward = jump
        self.rows = np.asarray([i for i, s in enumerate(seqs) if s.matcher is not None], dtype=np.int64)
        self.batch = make_batch(engine, [seqs[i].matcher for i in self.rows], threads)
        # a compact mask when some slot has no matcher (copied into its rows each step)
        self.compact = (self.mask if len(self.rows) == len(seqs)
                        else np.zeros((len(self.rows), self.mask.shape[1]), dtype=np.int32))
        self.live = np.asarray([not seqs[i].done for i in self.rows], dtype=bool)
        self.is_eos = np.zeros(vocab.size, dtype=bool)
        self.is_eos[list(vocab.eos_ids)] = True
        self.out = np.zeros((len(self.rows), max_tokens + 1), dtype=np.int32)
        self.n_out = np.zeros(len(self.rows), dtype=np.int64)
        self.forced = np.zeros(len(self.rows), dtype=np.int64)
        self.jumped = np.zeros(len(self.rows), dtype=np.int64)  # forced tokens fed without sampling
        self.tok = np.full(len(self.rows), SKIP, dtype=np.int32)
        self.job = _JobThread(self._fill_step if jump else self._step)

    def live_count(self) -> int:
        return int(self.live.sum())

    def submit(self, ids: np.ndarray, last: bool = False) -> None:
        """Start the step for the sampled ``ids`` (one per slot, -1: none to draw) on
        the job thread; ``last``: no step will use the masks it fills (they count no
        forced step).  :meth:`wait` gives its figures."""
        self.job.submit(ids[self.rows].copy(), last)

    def wait(self) -> tuple[float, float, int, float, list[float], int]:
        """The figures of the step submitted last (see :meth:`_step`)."""
        return self.job.wait()

    def _end(self, j: int, status: str, error: str = "") -> None:
        s = self.seqs[int(self.rows[j])]
        s.done, s.status, s.error = True, status, error
        self.live[j] = False
        row = self.mask[int(self.rows[j])]
        row[:] = 0
        bm.set_bits(row, self.eos)  # a finished sequence only repeats EOS (ignored)

    def _step(self, ids: np.ndarray, last: bool = False) -> tuple[float, float, int, float, list[float], int]:
        """Accept ``ids`` and fill the next masks; ``(mask seconds summed, slowest row,
        rows masked, the batch call's wall seconds, each row's seconds, sequences
        still live)``."""
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
        for j in np.flatnonzero(nothing | ended | refused).tolist():
            if nothing[j]:
                self._end(j, "rejected", "the mask allowed no token")
            elif ended[j]:
                self._end(j, "finished")
            else:
                m = self.seqs[int(self.rows[j])].matcher
                self._end(j, "error" if m.error else "rejected")
        if not last:
            self.forced[self.live & (res.allowed == 1)] += 1
        if self.compact is not self.mask:
            self.mask[self.rows[self.live]] = self.compact[self.live]
        secs = res.seconds[go]
        secs = secs[~np.isnan(secs)]
        live_now = int(self.live.sum())
        if len(secs):
            return float(secs.sum()), float(secs.max()), len(secs), res.wall_s, secs.tolist(), live_now
        n = int(go.sum())  # a batch call that does not time rows: its wall time stands for them
        if n:
            return res.wall_s, res.wall_s, n, res.wall_s, [], live_now
        return 0.0, 0.0, 0, res.wall_s, [], live_now

    def jump(self, ids: np.ndarray) -> tuple[list[list[int]], int]:
        """Jump-forward's part of a step, on the critical path (the next forward pass
        feeds what it gives): each live sequence accepts its sampled id, then the tokens
        its grammar forces after it (:meth:`~toolkit.core.protocol.Matcher.forced_tokens`,
        as many as ``max_tokens`` leaves room for), all accepted.  Returns each slot's run
        to feed (the sampled id and the forced tokens; the sampled id alone, or 0, for a
        slot that is done) and the tokens written."""
        runs = [[max(int(t), 0)] for t in ids.tolist()]
        written = 0
        for j in np.flatnonzero(self.live).tolist():
            slot = int(self.rows[j])
            m = self.seqs[slot].matcher
            t = int(ids[slot])
            if t < 0:
                self._end(j, "rejected", "the mask allowed no token")
                continue
            if not m.accept_allowed(t):
                self._end(j, "error" if m.error else "rejected")
                continue
            self.out[j, self.n_out[j]] = t
            self.n_out[j] += 1
            written += 1
            if self.is_eos[t]:
                self._end(j, "finished")
                continue
            room = self.max_tokens - int(self.n_out[j])
            forced = m.forced_tokens()[:room] if room > 0 else []
            if forced:
                took = m.accept_tokens(forced)
                forced = forced[:took]
                self.out[j, self.n_out[j]: self.n_out[j] + took] = forced
                self.n_out[j] += took
                self.jumped[j] += took
                written += took
                runs[slot] = [t, *forced]
            if self.n_out[j] >= self.max_tokens:  # out of room: the loop would stop it the same way
                s = self.seqs[slot]
                self.live[j] = False
                s.done = True
        return runs, written

    def submit_fill(self, last: bool = False) -> None:
        """Start the fill of every live sequence's next mask (jump-forward runs: the
        tokens were accepted by :meth:`jump`) on the job thread."""
        self.job.submit(None, last)

    def _fill_step(self, ids: Any, last: bool = False) -> tuple[float, float, int, float, list[float], int]:
        """:meth:`_step` without the accepts: the masks of the live sequences."""
        tok = self.tok
        tok[:] = SKIP
        tok[self.live] = NO_TOKEN
        res = self.batch.step(tok, self.compact)
        if not last:
            self.forced[self.live & (res.allowed == 1)] += 1
        if self.compact is not self.mask:
            self.mask[self.rows[self.live]] = self.compact[self.live]
        secs = res.seconds[self.live]
        secs = secs[~np.isnan(secs)]
        live_now = int(self.live.sum())
        if len(secs):
            return float(secs.sum()), float(secs.max()), len(secs), res.wall_s, secs.tolist(), live_now
        n = live_now
        return (res.wall_s, res.wall_s, n, res.wall_s, [], live_now) if n else (0.0, 0.0, 0, res.wall_s, [],
                                                                              live_now)

    def finish(self) -> None:
        """Hand the tokens and forced counts back to the sequences; stop the threads."""
        for j, i in enumerate(self.rows.tolist()):
            s = self.seqs[i]
            s.tokens = self.out[j, : self.n_out[j]].tolist()
            s.forced += int(self.forced[j])
            s.jumped += int(self.jumped[j])
        self.batch.close()
        self.job.close()


def _pipelined_loop(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                    seed: int, stepper: _Stepper | None, kernel: Any = None, steps: int | None = None,
                    targets: list[bytes | None] | None = None) -> tuple[list[dict[str, Any]], float]:
    """One batch as a serving engine runs it (see the module doc): the logits of step
    ``t`` are masked and sampled on the device, the ids copied to (pinned) host memory
    behind an event, the forward pass of ``t + 1`` launched, and only then are the ids
    accepted and the masks of ``t + 1`` filled, on the stepper's threads while the
    device runs.  No stepper: the same loop without mask work (the unconstrained
    baseline).  ``steps`` stops it earlier with a ``max_tokens`` run's shapes.  The
    forward pass launched in the last step is never waited for inside the timing
    (both modes launch it, as a server would).

    Returns the step rows and the wall time of the steps."""
    import torch

    device = lm.device
    cuda = device.startswith("cuda")
    gen = torch.Generator(device=device).manual_seed(seed)
    jump = stepper is not None and stepper.jump_forward
    dec = lm.start(prompts, max_tokens, chunks=jump, targets=targets)
    n = max_tokens if steps is None else min(steps, max_tokens)
    try:
        host_ids = torch.empty(len(prompts), dtype=torch.long, pin_memory=cuda)
    except RuntimeError:  # no page-locked memory: an ordinary copy, still correct
        host_ids = torch.empty(len(prompts), dtype=torch.long)
    ids_np = host_ids.numpy()
    event = torch.cuda.Event() if cuda else None
    mask_dev = None
    if stepper is not None:
        mask_dev = torch.empty(stepper.tensor.shape, dtype=torch.int32, device=device) if cuda else stepper.tensor
    rows: list[dict[str, Any]] = []
    pending = False  # a step submitted to the stepper and not waited for
    live = stepper.live_count() if stepper is not None else len(prompts)
    with torch.inference_mode():
        t_start = time.perf_counter()
        logits = dec.forward()  # the prompts' pass: step 0's forward, launched
        launch = time.perf_counter() - t_start
        wall = None
        for step in range(n):
            t0 = time.perf_counter()
            lm.synchronize()
            t1 = time.perf_counter()
            info: tuple[float, float, int, float, list[float], int] | None = None
            if stepper is not None:
                if pending:
                    info = stepper.wait()
                    pending = False
                    live = info[5]
                if not live:  # the forward pass just waited for is not needed
                    wall = t0 - t_start
                    break
                t2 = time.perf_counter()
                if cuda:
                    mask_dev.copy_(stepper.tensor, non_blocking=True)
                kernel(logits, mask_dev, stepper.vocab.size)
            else:
                t2 = t1
            t3 = time.perf_counter()
            drawn = _sample_on_device(logits, temperature, gen)
            host_ids.copy_(drawn, non_blocking=True)
            if event is not None:
                event.record()
            nxt = drawn.clamp(min=0)  # a row with nothing to draw (-1) is ended by its matcher
            t4 = time.perf_counter()
            written = live
            if jump:  # accept and take the forced tokens first: the forward pass feeds them
                if event is not None:
                    event.synchronize()
                runs, written = stepper.jump(ids_np)
                tj = time.perf_counter()
                if step + 1 < max_tokens and stepper.live_count():
                    logits = dec.forward_chunks(runs)
                t5 = time.perf_counter()
                stepper.submit_fill(last=step + 1 >= n)
                pending = True
                t6 = time.perf_counter()
                accept_s, forward_s = (tj - t4) + (t6 - t5), t5 - tj
            else:
                if step + 1 < max_tokens:
                    logits = dec.forward(nxt)
                t5 = time.perf_counter()
                if event is not None:
                    event.synchronize()
                if stepper is not None:
                    stepper.submit(ids_np, last=step + 1 >= n)
                    pending = True
                t6 = time.perf_counter()
                accept_s, forward_s = t6 - t5, t5 - t4
            rows.append({"step": step, "active": live, "tokens": written, "forward_s": launch + (t1 - t0) + forward_s,
                         "launch_s": launch + forward_s, "wait_s": t2 - t1, "apply_s": t3 - t2, "sample_s": t4 - t3,
                         "accept_s": accept_s, "step_s": launch + t6 - t0})
            if info is None:  # step 0's masks are the first ones (in TTFM), or no masks
                info = (0.0, 0.0, 0, 0.0, [], live)
            else:  # the figures of the masks this step waited for (bookkeeping, after the step)
                stepper.seq_times.extend(info[4])
            rows[-1].update(mask_s=info[0], mask_max_s=info[1], masks=info[2], mask_wall_s=info[3])
            launch = 0.0
        if wall is None:
            wall = time.perf_counter() - t_start
        if pending:
            stepper.wait()  # the last ids accepted (the masks it fills are not needed)
        lm.synchronize()  # the forward pass launched last, outside the timing
    return rows, wall


def _replay_target(item: Item) -> bytes | None:
    """What the stand-in device replays for ``item`` (``sim:...:replay``): its first valid
    instance's text, as the benchmark tokenizes it; None without one."""
    case = next((c for c in item.cases if c.valid), None)
    return None if case is None else case.text.encode("utf-8")


def _native(engine: Any, item: Item) -> bool:
    """Does ``engine`` compile this item with its own front end (a format it reads itself)?"""
    return is_native(engine, item.source())


def _warm_up(lm: LoadedModel, groups: list[list[list[int]]], max_tokens: int, kernel: Any,
             vocab: Vocabulary, chunks: bool = False) -> tuple[float, Any]:
    """Untimed: for every batch shape of the run (``groups``: the prompts of each batch),
    the prompts' pass and three one-token steps (``chunks``, jump-forward runs: then a
    chunk step of each width up to :data:`WARM_CHUNK_WIDTH`), so no measured batch pays for the
    device's first calls, a compiled model's compilation or CUDA-graph capture, or the
    allocator growing to a new shape (this runs in every mode, the shared baseline's
    too); then the kernel's first call on its logits (compilation, for the
    ``torch.compile``'d kernels).  Returns the kernel's first-call seconds and the
    logits' dtype."""
    import torch

    # the mask is made as the loop makes it (outside inference mode, then moved): a
    # torch.compile'd kernel guards on such properties and would recompile in step 0
    mask = torch.full((len(groups[0]), bm.words(vocab.size)), -1, dtype=torch.int32)
    shapes: set[tuple[Any, ...]] = set()
    kernel_s, dtype = 0.0, None
    with torch.inference_mode():
        for prompts in groups:
            dec = lm.start(prompts, max_tokens, chunks=chunks)
            key = (dec.shape, dec.prompt_len)
            if key in shapes:
                continue
            shapes.add(key)
            logits = dec.forward()
            steps = min(3, dec.cache_len - dec.prompt_len) if dec.cache_len else min(3, max_tokens)
            for _ in range(steps):
                logits = dec.forward(torch.argmax(logits, dim=-1))
            width = 2
            room = (dec.cache_len or dec.prompt_len + max_tokens * CHUNK_ROOM) - dec.prompt_len - steps
            while chunks and width <= WARM_CHUNK_WIDTH and width <= room:
                logits = dec.forward_chunks([[int(t)] * width for t in torch.argmax(logits, dim=-1).tolist()])
                room -= width
                width *= 2
            lm.synchronize()
            if dtype is None:
                t0 = time.perf_counter()
                kernel(logits, mask.to(lm.device, non_blocking=True), vocab.size)
                lm.synchronize()
                kernel_s, dtype = time.perf_counter() - t0, logits.dtype
    return kernel_s, dtype


def _compiled_graphs() -> int:
    """Graphs ``torch.compile`` has made in this process so far."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - torch without dynamo
        return 0
    return int(counters["stats"]["unique_graphs"])


def _kernel_rows(lm: LoadedModel, vocab: Vocabulary, mask: np.ndarray, dtype: Any, seed: int
                 ) -> list[dict[str, Any]]:
    """:func:`toolkit.core.bitmask.compare_apply_kernels` on the run's device, logits dtype
    and width, with ``mask`` (a real step's masks, one row per sequence)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    logits = torch.randn((mask.shape[0], lm.vocab_size), generator=gen).to(lm.device, dtype)
    with torch.inference_mode():
        return bm.compare_apply_kernels(logits, torch.from_numpy(mask).to(lm.device), vocab.size)


@dataclass
class Baseline:
    """The unconstrained loop measured once, to be shared by several engines' runs
    (:func:`unconstrained`): its step rows, wall time and tokens, and the prompt
    template and chat template (its folder) it decoded with."""

    steps: list[dict[str, Any]]
    wall_s: float
    tokens: int
    batch: int
    prompt: str = DEFAULT_PROMPT
    chat: str | None = None
    loop: str = "pipelined"


def _unconstrained_rows(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                        seed: int, loop: str, steps: int | None = None,
                        items: Sequence[Item | None] = ()) -> tuple[list[dict[str, Any]], float]:
    """The unconstrained baseline of one batch, in the same loop as the masked runs:
    its step rows and wall time.  ``items``: the batch's items, whose texts a replaying
    model replays here too (the same host work per step as the masked runs)."""
    if loop == "serial":
        rows, _, wall = _decode_loop(lm, prompts, max_tokens, temperature, seed, None, steps=steps)
        return rows, wall
    targets = [_replay_target(i) if i is not None else None for i in items] if lm.replay and items else None
    return _pipelined_loop(lm, prompts, max_tokens, temperature, seed, None, steps=steps, targets=targets)


def unconstrained(lm: LoadedModel, vocab: Vocabulary, items: Sequence[Item] | int, *, batch: int = 1,
                  max_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
                  prompt: str = DEFAULT_PROMPT, chat: ChatTemplate | None = None,
                  max_groups: int | None = None, loop: str = "pipelined") -> Baseline:
    """Decode ``items`` (or that many copies of a prompt without placeholders) in
    batches of ``batch``, ``max_tokens`` steps each, without masks: the baseline of
    every engine decoding those items with the same prompt and ``chat`` template (``generate(baseline=...)``),
    so a sweep over engines pays for it once per batch size.  ``max_groups``: decode
    only the first that many batches (the steps of an unconstrained batch do not depend
    on what it samples, so a few batches measure the step time of all of them).
    ``loop``: the loop the engines' runs will use (:func:`generate`)."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    seqs: Sequence[Item | None] = [None] * items if isinstance(items, int) else list(items)
    if not seqs or batch < 1 or max_tokens < 1:
        raise ValueError(f"need items, batch >= 1 and max_tokens >= 1, got {len(seqs)}, {batch}, {max_tokens}")
    if max_groups is not None and max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    prompts = _Prompts(prompt, vocab, lm, max_tokens, chat)
    item_groups = _groups(seqs, batch)[:max_groups]
    groups = [[prompts.slot(i, max_tokens) for i in g] for g in item_groups]
    _warm_up(lm, groups, max_tokens, bm.apply_kernel("torch"), vocab)
    steps: list[dict[str, Any]] = []
    wall = 0.0
    for b, group in enumerate(groups):
        rows, w = _unconstrained_rows(lm, group, max_tokens, temperature, seed + b, loop, items=item_groups[b])
        for r in rows:
            r.update(batch_index=b, mode="unconstrained")
        steps.extend(rows)
        wall += w
    return Baseline(steps, wall, sum(r["active"] for r in steps), batch, prompt,
                    None if chat is None else chat.source, loop)


def generate(engine: Any, lm: LoadedModel, vocab: Vocabulary, items: Sequence[Item], *, batch: int = 1,
             max_tokens: int = 256, temperature: float = 0.0, seed: int = 0, baseline: bool | Baseline = True,
             threads: int | None = None, prompt: str = DEFAULT_PROMPT, apply: str = "torch",
             compare_kernels: bool = False, compile_timeout: float | None = DEFAULT_COMPILE_TIMEOUT,
             chat: ChatTemplate | None = None, compiled: dict[str, Any] | None = None,
             loop: str = "pipelined", jump_forward: bool = False) -> GenerateRun:
    """Decode every item (``batch`` sequences at a time, items cycled to fill the last
    batch) with ``engine``'s masks applied by the ``apply`` kernel; see the module doc
    for what is measured.  ``baseline``: True runs the unconstrained loop after each
    batch, as many steps as the batch took (interleaved, so drift hits both alike); a
    :class:`Baseline` from :func:`unconstrained` is used as it is; False: none.
    ``compare_kernels`` also times every apply kernel on a real mask of the run
    (``GenerateRun.kernels``).  ``compile_timeout``: seconds an engine may take to
    compile one item (:func:`toolkit.core.errors.time_limit`; None: no limit); past it the
    item is a ``compile_error`` (``TimeLimitExceeded``) and the run goes on.  ``chat``: the
    prompts go through this chat template (see the module doc).

    ``compiled``: a dict (item name -> what the engine made of it) kept by the caller
    between runs of this engine, e.g. one per batch size: an item in it is not compiled
    again (nor retried, when the engine refused it), as a server keeps compiled
    grammars.  Each sequence still gets a new matcher; its TTFM is the first compile's
    seconds plus its own matcher and first mask (``compile_reused`` in its row).  What
    an engine fills in lazily and keeps with the compiled grammar (lexer tables) is then
    warm in the later runs.

    ``loop``: ``pipelined`` (the default; see the module doc) or ``serial``, the loop
    of masklab before it (masks submitted per sequence to a thread pool before the
    forward pass, accepted one by one after sampling), kept to compare the two.
    ``threads``: the batch's mask threads (default: the cores there are, at most
    ``batch``).

    ``jump_forward``: where a sequence's grammar forces tokens after its sampled one
    (:meth:`~toolkit.core.protocol.Matcher.forced_tokens`), they are appended without
    sampling and fed with it in one multi-token forward pass (the pipelined loop only);
    the run records the forced tokens per sequence (``jumped``) and the steps saved."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    if jump_forward and loop != "pipelined":
        raise ValueError("jump_forward runs in the pipelined loop (loop='pipelined')")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if batch < 1 or max_tokens < 1:
        raise ValueError(f"batch and max_tokens must be >= 1, got {batch}, {max_tokens}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if isinstance(baseline, Baseline):
        if baseline.batch != batch:
            raise ValueError(f"the baseline was measured at batch {baseline.batch}, this run has batch {batch}")
        if (baseline.prompt, baseline.chat) != (prompt, None if chat is None else chat.source):
            raise ValueError("the baseline decoded other prompts (prompt template or chat template differ)")
        if baseline.loop != loop:
            raise ValueError(f"the baseline ran the {baseline.loop} loop, this run the {loop} loop")
    if not items:
        raise ValueError("no items to decode")
    kernel = bm.apply_kernel(apply)
    items = list(items)
    prompts = _Prompts(prompt, vocab, lm, max_tokens, chat)
    groups = _groups(items, batch)
    warmup_s, logits_dtype = _warm_up(lm, [[prompts.slot(i, max_tokens) for i in g] for g in groups], max_tokens,
                                      kernel, vocab, chunks=jump_forward)
    graphs_before = _compiled_graphs()
    pool = ThreadPoolExecutor(max_workers=threads or min(batch, 8)) if loop == "serial" else None
    steps: list[dict[str, Any]] = []
    sequences: list[dict[str, Any]] = []
    walls = {"constrained": 0.0, "unconstrained": 0.0}
    tokens = {"constrained": 0, "unconstrained": 0}
    seq_times: list[float] = []
    grammars: dict[str, Any] = {}  # for the prefix checks
    sample_mask: np.ndarray | None = None  # the first step's masks, for the kernel comparison
    try:
        for b, group in enumerate(groups):
            seqs = []
            for item in group:
                too_long = prompts.too_long(item, max_tokens)
                if too_long:  # not compiled: its slot idles
                    seqs.append(_Seq(item, None, [], 0.0, done=True, status="prompt_too_long", error=too_long))
                    continue
                kept = compiled.get(item.name) if compiled is not None else None
                reused = kept is not None
                t0 = time.perf_counter()
                try:
                    if kept is None:
                        with time_limit(compile_timeout, "compile seconds"):
                            c = engine.compile(engine_input(engine, item.source()))
                        kept = _Compiled(c, time.perf_counter() - t0)
                        if compiled is not None:
                            compiled[item.name] = kept
                    elif kept.error:
                        raise _Refused(kept.error)
                    t1 = time.perf_counter()
                    m = engine.matcher(kept.compiled)
                except Exception as e:  # noqa: BLE001 - the engine refuses this item: recorded, run goes on
                    seq = _Seq(item, None, [], 0.0, done=True, status="compile_error")
                    seq.error = str(e) if isinstance(e, _Refused) else f"{type(e).__name__}: {e}"[:2000]
                    seq.reused = reused
                    if compiled is not None and not reused:
                        compiled[item.name] = _Compiled(None, 0.0, seq.error)
                    seqs.append(seq)
                    continue
                seqs.append(_Seq(item, m, [], kept.seconds + time.perf_counter() - t1, reused=reused))
            masker = (_Masker(seqs, vocab, pool, lm.device) if loop == "serial"
                      else _Stepper(seqs, vocab, engine, threads, lm.device, max_tokens, jump=jump_forward))
            for k, s in enumerate(seqs):  # the first masks: TTFM = compile + first mask
                t0 = time.perf_counter()
                masker._fill(k)  # a refused item's slot gets its EOS-only row here too
                s.ttfm_s += time.perf_counter() - t0
            if isinstance(masker, _Stepper) and masker.compact is not masker.mask:
                masker.compact[:] = masker.mask[masker.rows]
            if sample_mask is None:
                sample_mask = masker.mask.copy()  # the first step's masks (all sequences live)
            group_prompts = [prompts.slot(i, max_tokens) for i in group]
            if isinstance(masker, _Stepper):
                try:
                    targets = [_replay_target(s.item) for s in seqs] if lm.replay else None
                    rows, wall = _pipelined_loop(lm, group_prompts, max_tokens, temperature, seed + b, masker, kernel,
                                                 targets=targets)
                finally:
                    masker.finish()
            else:
                rows, _, wall = _decode_loop(lm, group_prompts, max_tokens, temperature, seed + b, masker, kernel)
            seq_times.extend(masker.seq_times)
            for r in rows:
                r.update(batch_index=b, mode="constrained")
            steps.extend(rows)
            walls["constrained"] += wall
            tokens["constrained"] += sum(r.get("tokens", r["active"]) for r in rows)
            for k, s in enumerate(seqs):
                ids = [t for t in s.tokens if t not in vocab.eos_ids]
                data = marked_bytes(vocab, ids, item_grammar(s.item, grammars, vocab) if s.item.kind != "schema"
                                    else None)
                status, why = s.status, s.error
                if status == "finished":
                    ok, why = check_output(s.item, data, vocab)
                    status = "unchecked" if ok is None else "valid" if ok else "invalid"
                elif s.matcher is not None and s.matcher.error:
                    why = s.matcher.error
                prefix_ok = check_prefix(s.item, data, grammars, vocab) if status == "unfinished" else None
                own = _native(engine, s.item) and (s.item.kind != "schema" or engine.schema_grammar != "masklab")
                sequences.append({"batch_index": b, "slot": k, "item": s.item.name, "kind": s.item.kind,
                                  "status": status, "detail": why, "grammar": "own" if own else "masklab",
                                  "prefix_ok": prefix_ok, "prompt_tokens": len(group_prompts[k]),
                                  "tokens": len(s.tokens), "forced": s.forced, "jumped": s.jumped,
                                  "ttfm_s": s.ttfm_s if s.matcher is not None else None,
                                  "compile_reused": s.reused,
                                  "text": spelled(vocab, ids).decode("utf-8", errors="replace")[:2000]})
            if baseline is True:
                rows, wall = _unconstrained_rows(lm, group_prompts, max_tokens, temperature, seed + b, loop,
                                                 max(1, len(rows)), items=group)
                for r in rows:
                    r.update(batch_index=b, mode="unconstrained")
                steps.extend(rows)
                walls["unconstrained"] += wall
                tokens["unconstrained"] += sum(r["active"] for r in rows)
    finally:
        if pool is not None:
            pool.shutdown()
    if isinstance(baseline, Baseline):
        steps.extend(baseline.steps)
        walls["unconstrained"], tokens["unconstrained"] = baseline.wall_s, baseline.tokens
    summary = summarize(steps, sequences, walls, tokens, batch, seq_times)
    summary["compiles_in_loop"] = _compiled_graphs() - graphs_before  # >0: a timing paid for compilation
    summary.update(loop=loop, jump_forward=jump_forward, threads=threads or default_threads(batch),
                   apply=apply, apply_warmup_ms=1e3 * warmup_s, prompt=prompt,
                   chat=None if chat is None else chat.source,
                   baseline="shared" if isinstance(baseline, Baseline) else "interleaved" if baseline else "none")
    kernels = (_kernel_rows(lm, vocab, sample_mask, logits_dtype, seed)
               if compare_kernels and sample_mask is not None else [])
    return GenerateRun(steps, sequences, summary, kernels)


def summarize(steps: list[dict[str, Any]], sequences: list[dict[str, Any]], walls: dict[str, float],
              tokens: dict[str, int], batch: int, seq_times: Sequence[float] = ()) -> dict[str, Any]:
    """The run's figures: tokens/s, mean step parts, overhead %, statuses, TTFM.

    ``mask_ms`` is the mean per step of the batch's summed mask time (CPU work),
    ``mask_max_ms`` the mean per step of the slowest sequence's (what a thread per
    sequence would wait for), ``mask_seq_ms_p50`` / ``_p99`` / ``mask_seq_ms_mean``
    are over every sequence's mask in the loop (``seq_times``; the first masks are in TTFM).
    """
    con = [r for r in steps if r["mode"] == "constrained"]
    unc = [r for r in steps if r["mode"] == "unconstrained"]

    def mean(rows: list[dict[str, Any]], key: str) -> float:
        return float(np.mean([r[key] for r in rows])) if rows else float("nan")

    out: dict[str, Any] = {"batch": batch, "sequences": len(sequences), "steps": len(con)}
    out["tokens_per_s"] = tokens["constrained"] / walls["constrained"] if walls["constrained"] else float("nan")
    out["unconstrained_tokens_per_s"] = (tokens["unconstrained"] / walls["unconstrained"]
                                         if walls["unconstrained"] else float("nan"))
    for key in ("forward_s", "mask_s", "mask_max_s", "wait_s", "apply_s", "sample_s", "accept_s", "step_s"):
        out[f"{key[:-2]}_ms"] = 1e3 * mean(con, key)
    times = np.asarray(seq_times, dtype=float)
    out["masks"] = len(times)
    for name, value in (("mean", np.mean), ("p50", np.median), ("p99", lambda a: np.percentile(a, 99))):
        out[f"mask_seq_ms_{name}"] = 1e3 * float(value(times)) if len(times) else float("nan")
    out["unconstrained_step_ms"] = 1e3 * mean(unc, "step_s")
    # the forward pass alone without masks: a constrained forward_ms above it is mask
    # work (threads, the GIL) slowing the forward pass down rather than waited for
    out["unconstrained_forward_ms"] = 1e3 * mean(unc, "forward_s")
    out["overhead_pct"] = (100.0 * (out["step_ms"] / out["unconstrained_step_ms"] - 1.0)
                           if unc else float("nan"))
    # what the host adds to a step besides the apply kernel: the wait for the masks,
    # the accepts on the critical path, and the forward pass's slowdown by mask work
    out["host_overhead_ms"] = (out["wait_ms"] + out["accept_ms"]
                               + out["forward_ms"] - out["unconstrained_forward_ms"])
    out["host_overhead_pct"] = (100.0 * out["host_overhead_ms"] / out["unconstrained_forward_ms"]
                                if unc else float("nan"))
    ttfm = [s["ttfm_s"] for s in sequences if s["ttfm_s"] is not None]
    out["ttfm_ms_p50"] = 1e3 * float(np.median(ttfm)) if ttfm else float("nan")
    for status in ("valid", "invalid", "unchecked", "unfinished", "rejected", "error", "compile_error",
                   "prompt_too_long"):
        out[status] = sum(1 for s in sequences if s["status"] == status)
    out["bad_prefix"] = sum(1 for s in sequences if s.get("prefix_ok") is False and s.get("grammar") != "own")
    out["outside_grammar"] = sum(1 for s in sequences if s.get("prefix_ok") is False and s.get("grammar") == "own")
    out["forced_tokens"] = sum(s["forced"] for s in sequences)
    # jump-forward: tokens fed without sampling, and the steps (forward passes) they saved
    jumped = sum(s.get("jumped", 0) for s in sequences)
    written = sum(s.get("tokens", 0) for s in sequences)
    out["jumped_tokens"] = jumped
    out["jumped_per_sequence"] = jumped / len(sequences) if sequences else float("nan")
    out["steps_saved_pct"] = 100.0 * jumped / written if written else float("nan")
    out["speedup_pct"] = (100.0 * (out["tokens_per_s"] / out["unconstrained_tokens_per_s"] - 1.0)
                          if unc else float("nan"))
    prompt_tokens = [s["prompt_tokens"] for s in sequences if s.get("prompt_tokens") is not None]
    out["prompt_tokens_mean"] = float(np.mean(prompt_tokens)) if prompt_tokens else float("nan")
    out["prompt_tokens_max"] = max(prompt_tokens, default=0)
    return out


def write_run(run: GenerateRun, out: str | Path, meta: dict[str, Any]) -> Path:
    """Write ``run.json`` (meta, summary and the apply-kernel comparison when made),
    ``steps.csv`` and ``sequences.jsonl`` into ``out``; ``masklab report`` reads them."""

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    record = {**meta, "summary": run.summary}
    if run.kernels:
        record["apply_kernels"] = run.kernels
    (out / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    pd.DataFrame(run.steps).to_csv(out / "steps.csv", index=False)
    with open(out / "sequences.jsonl", "w", encoding="utf-8") as f:
        for s in run.sequences:
            f.write(json.dumps(s) + "\n")
    return out
