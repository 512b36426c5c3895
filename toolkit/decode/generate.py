"""The decoding harness: engines inside a real model's decoding loop (:func:`generate`).

A run decodes its items in batches with an engine's masks applied, in the pipelined
loop of a serving engine (``loop="pipelined"``, the default: :mod:`toolkit.decode.loop`,
where the module doc says what a step does) or in masklab's earlier serial loop, kept
to compare (``loop="serial"``: :mod:`toolkit.decode.serial`).  The unconstrained
baseline runs the same loop as the masked runs, without mask work.

Measured per step: forward (in the pipelined loop the launch plus the host's wait
for the device), mask (total over the batch, the slowest sequence, and every
sequence's own time), wait, refill (continuous batching), apply, sample (with
jump-forward also the wait for the sampled ids, which the host needs before it can
feed the forced tokens) and accept (the part of accepting the sampled tokens, and
with jump-forward of finding the forced tokens, on the critical path) times; per run:
constrained tokens/s,
``host_overhead_ms`` (wait + accept + forward, against the same in the unconstrained
loop, the forward pass over the steps that waited for a one-token pass: what the host
adds besides the apply kernel and the sampler; a jump-forward chunk step's longer pass
is the device's),
and with ``baseline=True`` the same loop without masks (unconstrained tokens/s) and
the overhead (constrained step time over unconstrained, minus 1); TTFM per sequence
(compile + first mask).  With ``compare_kernels`` every apply kernel is timed on the
run's device, batch and logits dtype with a real mask of the run, and checked to block
exactly what the torch op blocks (:func:`toolkit.core.bitmask.compare_apply_kernels`).
Every output is checked against its item (:mod:`toolkit.decode.outputs`: ``valid``,
``invalid``, ``unchecked``, ``unfinished`` with ``prefix_ok``).  An item the engine
refuses to compile is a ``compile_error`` sequence (its slot idles); the run goes on;
so is one whose compile runs past ``compile_timeout``.

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
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toolkit.core import bitmask as bm
from toolkit.core.batch import default_threads
from toolkit.core.errors import DEFAULT_COMPILE_TIMEOUT, time_limit
from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import Item
from toolkit.data.provenance import finish_provenance
from toolkit.decode.chunks import chunk_policy
from toolkit.decode.loop import Refill, Seq, Stepper, jump_schedule, pipelined_loop
from toolkit.decode.model import CHUNK_ROOM, ChatTemplate, LoadedModel, ModelError
from toolkit.decode.outputs import sequence_row
from toolkit.decode.serial import Masker, decode_loop
from toolkit.grammar.inputs import engine_input

__all__ = ["GenerateRun", "Baseline", "generate", "unconstrained", "summarize", "render_prompt", "write_run",
           "resolve_schedule", "DEFAULT_PROMPT", "SPEC_PROMPT", "LOOPS", "SCHEDULES"]

DEFAULT_PROMPT = "Answer in the requested format.\n"
"""The prompt of every sequence unless told otherwise: short, the same for every item."""

SPEC_PROMPT = "Reply with only the output, nothing else. It must match this {kind}:\n{spec}\n"
"""A prompt that gives the model the item's spec (what a real checkpoint needs)."""

LOOPS = ("pipelined", "serial")
"""The decode loops :func:`generate` runs (see the module doc)."""

SCHEDULES = ("static", "continuous", "continuous-beside")
"""How :func:`generate` fills its batch's slots: ``static``, a batch of items at a time
until its longest sequence ends (the next batch waits); ``continuous``, a slot takes the
next item as soon as its sequence ends, as a server does (:func:`resolve_schedule`), its
prompt pass run and waited for before the step's draw; ``continuous-beside``, the same
with the prompt pass launched after the step's forward pass, beside it on the device,
and the new sequence drawing from the next step (``beside`` of
:func:`~toolkit.decode.loop.pipelined_loop`)."""


def is_continuous(schedule: str) -> bool:
    """Does ``schedule`` (of :data:`SCHEDULES`) refill a slot as its sequence ends?"""
    return schedule.startswith("continuous")


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
class _Compiled:
    """An item compiled by an engine, kept between runs (``generate(compiled=...)``): the
    compiled grammar and its compile seconds, or why the engine refused it."""

    compiled: Any
    seconds: float
    error: str = ""


class _Refused(Exception):
    """An item the engine refused in an earlier run (its message is the first error)."""


@dataclass
class GenerateRun:
    """What :func:`generate` measured: per-step rows, per-sequence rows, the run's
    figures, and the apply kernels compared (empty unless ``compare_kernels``)."""

    steps: list[dict[str, Any]]
    sequences: list[dict[str, Any]]
    summary: dict[str, Any]
    kernels: list[dict[str, Any]] = field(default_factory=list)


def _replay_target(item: Item) -> bytes | None:
    """What the stand-in device replays for ``item`` (``sim:...:replay``): its first valid
    instance's text, as the benchmark tokenizes it; None without one."""
    case = next((c for c in item.cases if c.valid), None)
    return None if case is None else case.text.encode("utf-8")



def _warm_up(lm: LoadedModel, groups: list[list[list[int]]], max_tokens: int, kernel: Any,
             vocab: Vocabulary, chunks: bool = False, refills: bool = False) -> tuple[float, Any]:
    """Untimed: for every batch shape of the run (``groups``: the prompts of each batch),
    the prompts' pass and three one-token steps (``chunks``, jump-forward runs: then a
    chunk step of each width up to :data:`WARM_CHUNK_WIDTH`; ``refills``, continuous runs:
    a slot's refill too), so no measured batch pays for the
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
            dec = lm.start(prompts, max_tokens, chunks=chunks, refills=refills)
            key = (dec.shape, dec.prompt_len)
            if key in shapes:
                continue
            shapes.add(key)
            logits = dec.forward()
            steps = min(3, dec.cache_len - dec.prompt_len) if dec.cache_len else min(3, max_tokens)
            for _ in range(steps):
                logits = dec.forward(torch.argmax(logits, dim=-1))
            width = 2
            room = (dec.cache_len or dec.prompt_len + max_tokens + CHUNK_ROOM) - dec.prompt_len - steps
            while chunks and width <= WARM_CHUNK_WIDTH and width <= room:
                logits = dec.forward_chunks([[int(t)] * width for t in torch.argmax(logits, dim=-1).tolist()])
                room -= width
                width *= 2
            if refills:
                dec.refill(0, prompts[0], None, logits)
                logits = dec.forward(torch.argmax(logits, dim=-1))
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
    schedule: str = "static"

def _unconstrained_rows(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                        seed: int, loop: str, steps: int | None = None, items: Sequence[Item | None] = (),
                        eos: Sequence[int] = (), idle: Sequence[bool] = ()) -> tuple[list[dict[str, Any]], float]:
    """The unconstrained baseline of one batch, in the same loop as the masked runs:
    its step rows and wall time.  ``items``: the batch's items, whose texts a replaying
    model replays here too (the same host work per step as the masked runs); in the
    pipelined loop a sequence ends at an ``eos`` id, as a masked one does, and the
    ``idle`` slots (the items the engine refused) write nothing."""
    if loop == "serial":
        rows, _, wall = decode_loop(lm, prompts, max_tokens, temperature, seed, None, steps=steps)
        return rows, wall
    targets = [_replay_target(i) if i is not None else None for i in items] if lm.replay and items else None
    return pipelined_loop(lm, prompts, max_tokens, temperature, seed, None, steps=steps, targets=targets, eos=eos,
                          idle=idle)


def _continuous_unconstrained(lm: LoadedModel, prompts: _Prompts, items: Sequence[Item | None], batch: int,
                              max_tokens: int, temperature: float, seed: int, vocab: Vocabulary, beside: bool = False
                              ) -> tuple[list[dict[str, Any]], float]:
    """The unconstrained baseline of a continuous run: every item once in ``batch``
    slots, a slot refilled as its sequence ends (EOS or ``max_tokens``; ``beside``: its
    prompt pass beside the next step's, as the masked run's); a masked run's baseline
    gets the items its engine decoded (not those it refused)."""
    fits = [i for i in items if not prompts.too_long(i, max_tokens)]
    queue = deque(Refill(prompts(i), _replay_target(i) if lm.replay and i is not None else None) for i in fits)
    firsts = [queue.popleft() if queue else None for _ in range(batch)]
    dummy = next((f.prompt for f in firsts if f is not None), prompts(None) if not items else [0])
    targets = [f.target if f is not None else None for f in firsts] if lm.replay else None
    return pipelined_loop(lm, [f.prompt if f is not None else dummy for f in firsts], max_tokens, temperature, seed,
                          None, targets=targets, feeder=lambda: queue.popleft() if queue else None,
                          eos=vocab.eos_ids, idle=[f is None for f in firsts],  # fewer items than slots: vacant
                          beside=beside)


def unconstrained(lm: LoadedModel, vocab: Vocabulary, items: Sequence[Item] | int, *, batch: int = 1,
                  max_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
                  prompt: str = DEFAULT_PROMPT, chat: ChatTemplate | None = None,
                  max_groups: int | None = None, loop: str = "pipelined", schedule: str = "static") -> Baseline:
    """Decode ``items`` (or that many copies of a prompt without placeholders) in
    batches of ``batch``, ``max_tokens`` steps each, without masks: the baseline of
    every engine decoding those items with the same prompt and ``chat`` template (``generate(baseline=...)``),
    so a sweep over engines pays for it once per batch size.  ``max_groups``: decode
    only the first that many batches (the steps of an unconstrained batch do not depend
    on what it samples, so a few batches measure the step time of all of them).
    ``loop`` and ``schedule``: those the engines' runs will use (:func:`generate`; a
    continuous baseline decodes the first ``max_groups * batch`` items, or all)."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    seqs: Sequence[Item | None] = [None] * items if isinstance(items, int) else list(items)
    if not seqs or batch < 1 or max_tokens < 1:
        raise ValueError(f"need items, batch >= 1 and max_tokens >= 1, got {len(seqs)}, {batch}, {max_tokens}")
    if max_groups is not None and max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    schedule = resolve_schedule(schedule, len(seqs), batch, loop)
    prompts = _Prompts(prompt, vocab, lm, max_tokens, chat)
    item_groups = _groups(seqs, batch)[:max_groups]
    groups = [[prompts.slot(i, max_tokens) for i in g] for g in item_groups]
    _warm_up(lm, groups, max_tokens, bm.apply_kernel("torch"), vocab, refills=is_continuous(schedule))
    steps: list[dict[str, Any]] = []
    wall = 0.0
    if is_continuous(schedule):
        chosen = seqs[: max_groups * batch] if max_groups else seqs
        steps, wall = _continuous_unconstrained(lm, prompts, chosen, batch, max_tokens, temperature, seed, vocab,
                                                beside=schedule == "continuous-beside")
        for r in steps:
            r.update(batch_index=0, mode="unconstrained")
    for b, group in enumerate(groups if schedule == "static" else []):
        rows, w = _unconstrained_rows(lm, group, max_tokens, temperature, seed + b, loop, items=item_groups[b],
                                      eos=vocab.eos_ids)
        for r in rows:
            r.update(batch_index=b, mode="unconstrained")
        steps.extend(rows)
        wall += w
    return Baseline(steps, wall, sum(r["active"] for r in steps), batch, prompt,
                    None if chat is None else chat.source, loop, schedule)


def resolve_schedule(schedule: str, items: int, batch: int, loop: str = "pipelined") -> str:
    """``schedule`` for a run of ``items`` in ``batch`` slots: ``auto`` is continuous
    when there are more items than slots (in the pipelined loop), else static; a
    ``ValueError`` for a schedule not in :data:`SCHEDULES` or continuous in the serial loop."""
    if schedule not in (*SCHEDULES, "auto"):
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)} or auto, got {schedule!r}")
    if schedule == "auto":
        return "continuous" if items > batch and loop == "pipelined" else "static"
    if is_continuous(schedule) and loop != "pipelined":
        raise ValueError(f"the {schedule} schedule runs in the pipelined loop (loop='pipelined')")
    return schedule




def generate(engine: Any, lm: LoadedModel, vocab: Vocabulary, items: Sequence[Item], *, batch: int = 1,
             max_tokens: int = 256, temperature: float = 0.0, seed: int = 0, baseline: bool | Baseline = True,
             threads: int | None = None, prompt: str = DEFAULT_PROMPT, apply: str = "torch",
             compare_kernels: bool = False, compile_timeout: float | None = DEFAULT_COMPILE_TIMEOUT,
             chat: ChatTemplate | None = None, compiled: dict[str, Any] | None = None,
             loop: str = "pipelined", jump_forward: bool | str = False, schedule: str = "static",
             chunk_width: str | int = "auto", on_batch: Callable[[int], None] | None = None) -> GenerateRun:
    """Decode every item (``batch`` sequences at a time, items cycled to fill the last
    batch) with ``engine``'s masks applied by the ``apply`` kernel; see the module doc
    for what is measured.  ``baseline``: True runs the unconstrained loop after each
    batch on its items (interleaved, so drift hits both alike): to the batch's end in the
    pipelined loop, as many steps as the batch took in the serial one; a
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

    ``loop``: ``pipelined`` (the default; see the module doc) or ``serial``, masklab's
    loop before it (masks per sequence on a thread pool before the forward pass, accepts
    one by one after sampling), kept to compare.  ``threads``: the batch's mask threads
    (default: the cores there are, at most ``batch``).

    ``jump_forward`` (True: ``lookahead``, or a :data:`~toolkit.decode.loop.JUMP_SCHEDULES`
    name): the tokens a grammar forces after a sampled one (``forced_tokens``) are fed
    without sampling in multi-token passes (pipelined loop only); a sequence records them
    (``jumped``) and the passes that fed a run in place of a draw (``held``).
    ``chunk_width`` (``overlap``, ``lookahead``): the tokens of a run a pass feeds
    (:mod:`toolkit.decode.chunks`: ``auto``, the most tokens per device second; ``all``; N).

    ``schedule`` (:data:`SCHEDULES`, :func:`resolve_schedule`): ``static`` decodes the
    items a batch at a time (cycled to fill the last batch); ``continuous`` decodes each
    item once, a slot taking the next item as soon as its sequence ends (EOS, a refusal,
    or ``max_tokens`` tokens), the items compiled before the loop and each new sequence's
    matcher, first mask and prompt pass inside it (``refill_ms``; ``continuous-beside``:
    the prompt pass beside the step's); ``auto``: continuous for more items than ``batch``
    (``masklab generate``'s default; here static).  Its baseline runs the same schedule.

    ``on_batch``: called with each decoded batch's sequence count (a progress bar's)."""
    _check_generate(items, batch=batch, max_tokens=max_tokens, temperature=temperature, threads=threads,
                    baseline=baseline, prompt=prompt, chat=chat, loop=loop, jump_forward=jump_forward)
    jump_forward, chunk_width = jump_schedule(jump_forward), chunk_policy(chunk_width)
    schedule = resolve_schedule(schedule, len(items), batch, loop)
    if isinstance(baseline, Baseline) and baseline.schedule != schedule:
        raise ValueError(f"the baseline ran the {baseline.schedule} schedule, this run the {schedule} schedule")
    kernel = bm.apply_kernel(apply)
    items = list(items)
    prompts = _Prompts(prompt, vocab, lm, max_tokens, chat)
    groups = _groups(items, batch)
    warmup_s, logits_dtype = _warm_up(lm, [[prompts.slot(i, max_tokens) for i in g] for g in groups], max_tokens,
                                      kernel, vocab, chunks=bool(jump_forward), refills=is_continuous(schedule))
    graphs_before = _compiled_graphs()
    run = _Generation(engine, lm, vocab, prompts, kernel, loop=loop, threads=threads, batch=batch,
                      max_tokens=max_tokens, temperature=temperature, seed=seed, jump_forward=jump_forward,
                      compile_timeout=compile_timeout, compiled=compiled, interleaved=baseline is True,
                      schedule=schedule, chunk_width=chunk_width)
    try:
        run.decode_all(items, groups, on_batch)
    finally:
        run.close()
    if isinstance(baseline, Baseline):
        run.steps.extend(baseline.steps)
        run.walls["unconstrained"], run.tokens["unconstrained"] = baseline.wall_s, baseline.tokens
    summary = summarize(run.steps, run.sequences, run.walls, run.tokens, batch, run.seq_times)
    summary["compiles_in_loop"] = _compiled_graphs() - graphs_before  # >0: a timing paid for compilation
    summary.update(run.settings(), threads=threads or default_threads(batch), apply=apply,
                   apply_warmup_ms=1e3 * warmup_s, prompt=prompt, chat=None if chat is None else chat.source,
                   baseline="shared" if isinstance(baseline, Baseline) else "interleaved" if baseline else "none")
    kernels = (_kernel_rows(lm, vocab, run.sample_mask, logits_dtype, seed)
               if compare_kernels and run.sample_mask is not None else [])
    return GenerateRun(run.steps, run.sequences, summary, kernels)


def _check_generate(items: Sequence[Item], *, batch: int, max_tokens: int, temperature: float, threads: int | None,
                    baseline: bool | Baseline, prompt: str, chat: ChatTemplate | None, loop: str,
                    jump_forward: bool | str) -> None:
    """A ``ValueError`` naming the first setting :func:`generate` cannot run with."""
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {loop!r}")
    if jump_schedule(jump_forward) and loop != "pipelined":
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


class _Generation:
    """One :func:`generate` run as it goes: its settings, the serial loop's thread pool,
    and what the batches measured so far (step and sequence rows, walls and tokens per
    mode, every sequence's mask seconds, the first step's masks for the kernel
    comparison)."""

    def __init__(self, engine: Any, lm: LoadedModel, vocab: Vocabulary, prompts: _Prompts, kernel: Any, *,
                 loop: str, threads: int | None, batch: int, max_tokens: int, temperature: float, seed: int,
                 jump_forward: str, compile_timeout: float | None, compiled: dict[str, Any] | None,
                 interleaved: bool, schedule: str = "static", chunk_width: str | int = "auto") -> None:
        self.engine, self.lm, self.vocab, self.prompts, self.kernel = engine, lm, vocab, prompts, kernel
        self.loop, self.threads, self.max_tokens, self.temperature, self.seed = loop, threads, max_tokens, temperature, seed
        self.jump_forward, self.compile_timeout, self.compiled = jump_forward, compile_timeout, compiled
        self.interleaved = interleaved
        self.chunk_width = chunk_width
        self.pool = ThreadPoolExecutor(max_workers=threads or min(batch, 8)) if loop == "serial" else None
        self.steps: list[dict[str, Any]] = []
        self.sequences: list[dict[str, Any]] = []
        self.walls = {"constrained": 0.0, "unconstrained": 0.0}
        self.tokens = {"constrained": 0, "unconstrained": 0}
        self.seq_times: list[float] = []
        self.grammars: dict[str, Any] = {}  # for the prefix checks
        self.schedule, self.batch = schedule, batch
        self.ahead: dict[str, _Compiled] = {}  # items compiled by this run ahead of their sequence
        self.sample_mask: np.ndarray | None = None  # the first step's masks, for the kernel comparison

    def settings(self) -> dict[str, Any]:
        """The run's loop settings, for its summary."""
        jump = self.jump_forward
        return {"loop": self.loop, "schedule": self.schedule, "jump_forward": bool(jump),
                "jump_schedule": jump or None, "chunk_width": self.chunk_width if jump in ("overlap", "lookahead")
                else None}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def decode(self, b: int, group: list[Item]) -> None:
        """Batch ``b``: compile its items, decode them with masks, check the outputs,
        then (interleaved) the same batch without masks."""
        vocab, max_tokens = self.vocab, self.max_tokens
        seqs = [self._sequence(item) for item in group]
        masker = self._first_masks(seqs)
        group_prompts = [self.prompts.slot(i, max_tokens) for i in group]
        rows, wall = self._run_loop(b, seqs, masker, group_prompts)
        self.seq_times.extend(masker.seq_times)
        self._add_steps(b, rows, wall, "constrained")
        for k, s in enumerate(seqs):
            self.sequences.append(sequence_row(self.engine, vocab, s, b, k, len(group_prompts[k]), self.grammars))
        if self.interleaved:
            # the pipelined baseline decodes the batch to its end (its sequences end at EOS, as
            # the masked ones do); the serial loop's, which never ends a sequence, as many steps
            steps = None if self.loop == "pipelined" else max(1, len(rows))
            rows, wall = _unconstrained_rows(self.lm, group_prompts, max_tokens, self.temperature, self.seed + b,
                                             self.loop, steps, items=group, eos=vocab.eos_ids,
                                             idle=[s.matcher is None for s in seqs])
            self._add_steps(b, rows, wall, "unconstrained")

    def _compile(self, item: Item) -> None:
        """Compile ``item`` ahead of its sequence (continuous batching) into this run's
        compiled items; :meth:`_sequence` then takes it (``compile_reused`` only when an
        earlier run compiled it)."""
        if self.prompts.too_long(item, self.max_tokens) or item.name in self.ahead:
            return
        if self.compiled is not None and item.name in self.compiled:
            return
        t0 = time.perf_counter()
        try:
            with time_limit(self.compile_timeout, "compile seconds"):
                c = self.engine.compile(engine_input(self.engine, item.source()))
            kept = _Compiled(c, time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - the engine refuses this item: recorded, run goes on
            kept = _Compiled(None, 0.0, f"{type(e).__name__}: {e}"[:2000])
        self.ahead[item.name] = kept
        if self.compiled is not None:
            self.compiled[item.name] = kept

    def _sequence(self, item: Item) -> Seq:
        """The item's sequence: compiled (or taken from ``compiled``) and its matcher, or
        a slot that idles (a prompt too long, an item the engine refused)."""
        engine, compiled = self.engine, self.compiled
        too_long = self.prompts.too_long(item, self.max_tokens)
        if too_long:  # not compiled: its slot idles
            return Seq(item, None, [], 0.0, done=True, status="prompt_too_long", error=too_long)
        ahead = self.ahead.get(item.name)
        kept = ahead if ahead is not None else compiled.get(item.name) if compiled is not None else None
        reused = kept is not None and ahead is None
        t0 = time.perf_counter()
        try:
            if kept is None:
                with time_limit(self.compile_timeout, "compile seconds"):
                    c = engine.compile(engine_input(engine, item.source()))
                kept = _Compiled(c, time.perf_counter() - t0)
                if compiled is not None:
                    compiled[item.name] = kept
            elif kept.error:
                raise _Refused(kept.error)
            t1 = time.perf_counter()
            m = engine.matcher(kept.compiled)
        except Exception as e:  # noqa: BLE001 - the engine refuses this item: recorded, run goes on
            seq = Seq(item, None, [], 0.0, done=True, status="compile_error")
            seq.error = str(e) if isinstance(e, _Refused) else f"{type(e).__name__}: {e}"[:2000]
            seq.reused = reused
            if compiled is not None and not reused:
                compiled[item.name] = _Compiled(None, 0.0, seq.error)
            return seq
        return Seq(item, m, [], kept.seconds + time.perf_counter() - t1, reused=reused)

    def decode_all(self, items: list[Item], groups: list[list[Item]], on_batch: Callable[[int], None] | None) -> None:
        """Every item in the run's schedule; ``on_batch`` after each batch (continuous: once)."""
        if is_continuous(self.schedule):
            self.decode_continuous(items)
            if on_batch is not None:
                on_batch(len(items))
            return
        for b, group in enumerate(groups):
            self.decode(b, group)
            if on_batch is not None:
                on_batch(len(group))

    def decode_continuous(self, items: list[Item]) -> None:
        """Every item once, continuous batching: the batch's slots start with the first
        items, and a slot whose sequence ended takes the next item at once (its matcher
        made, its first mask filled, its prompt's pass run: in the loop's time); the
        items are compiled before the loop (a server's grammar cache), as the static
        schedule compiles a batch before decoding it.  Then (interleaved) the same items
        without masks, in the same schedule."""
        vocab, max_tokens, lm = self.vocab, self.max_tokens, self.lm
        for item in items:  # compiled ahead: refused ones are rows at once, never slots
            self._compile(item)
        queue = deque(items)
        order: dict[int, int] = {}

        def take() -> Refill | None:
            while queue:
                item = queue.popleft()
                seq = self._sequence(item)
                order[id(seq)] = len(order)
                if seq.matcher is not None:
                    return Refill(self.prompts(item), _replay_target(item) if lm.replay else None, seq)
                self.sequences.append(sequence_row(self.engine, vocab, seq, 0, order[id(seq)],
                                                   len(self.prompts.slot(item, max_tokens)), self.grammars))
            return None

        firsts = [take() for _ in range(self.batch)]
        dummy = next((f.prompt for f in firsts if f is not None), [0])
        seqs = [f.seq if f is not None and f.seq is not None else Seq(None, None, [], 0.0, done=True, status="vacant")
                for f in firsts]
        masker = self._first_masks(seqs)
        assert isinstance(masker, Stepper)
        targets = [f.target if f is not None else None for f in firsts] if lm.replay else None
        try:
            rows, wall = pipelined_loop(lm, [f.prompt if f is not None else dummy for f in firsts], max_tokens,
                                        self.temperature, self.seed, masker, self.kernel, targets=targets,
                                        feeder=take, eos=vocab.eos_ids, chunks=self.chunk_width,
                                        beside=self.schedule == "continuous-beside")
        finally:
            masker.finish()
        self.seq_times.extend(masker.seq_times)
        self._add_steps(0, rows, wall, "constrained")
        for s in masker.retired + [s for s in masker.seqs if s.item is not None]:
            self.sequences.append(sequence_row(self.engine, vocab, s, 0, order[id(s)],
                                               len(self.prompts(s.item)), self.grammars))
        self.sequences.sort(key=lambda r: r["slot"])
        if self.interleaved:
            started = {s.item.name for s in masker.retired + masker.seqs if s.item is not None and s.matcher}
            rows, wall = _continuous_unconstrained(lm, self.prompts, [i for i in items if i.name in started],
                                                   self.batch, max_tokens, self.temperature, self.seed, vocab,
                                                   beside=self.schedule == "continuous-beside")
            self._add_steps(0, rows, wall, "unconstrained")

    def _add_steps(self, b: int, rows: list[dict[str, Any]], wall: float, mode: str) -> None:
        for r in rows:
            r.update(batch_index=b, mode=mode)
        self.steps.extend(rows)
        self.walls[mode] += wall
        self.tokens[mode] += sum(r["active"] if r.get("tokens") is None else r["tokens"] for r in rows)

    def _first_masks(self, seqs: list[Seq]) -> Masker | Stepper:
        """The batch's masker, its first masks filled: TTFM = compile + first mask."""
        masker = (Masker(seqs, self.vocab, self.pool, self.lm.device) if self.loop == "serial"
                  else Stepper(seqs, self.vocab, self.engine, self.threads, self.lm.device, self.max_tokens,
                               jump=self.jump_forward, continuous=is_continuous(self.schedule)))
        for k, s in enumerate(seqs):
            t0 = time.perf_counter()
            masker.fill(k)  # a refused item's slot gets its EOS-only row here too
            s.ttfm_s += time.perf_counter() - t0
        if isinstance(masker, Stepper) and masker.compact is not masker.mask:
            masker.compact[:] = masker.mask[masker.rows]
        if self.sample_mask is None:
            self.sample_mask = masker.mask.copy()  # the first step's masks (all sequences live)
        return masker

    def _run_loop(self, b: int, seqs: list[Seq], masker: Masker | Stepper,
                  group_prompts: list[list[int]]) -> tuple[list[dict[str, Any]], float]:
        """Batch ``b`` decoded with masks in the run's loop: its step rows and wall time."""
        lm = self.lm
        if isinstance(masker, Stepper):
            try:
                targets = [_replay_target(s.item) for s in seqs] if lm.replay else None
                return pipelined_loop(lm, group_prompts, self.max_tokens, self.temperature, self.seed + b, masker,
                                      self.kernel, targets=targets, chunks=self.chunk_width)
            finally:
                masker.finish()
        rows, _, wall = decode_loop(lm, group_prompts, self.max_tokens, self.temperature, self.seed + b, masker,
                                    self.kernel)
        return rows, wall


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
    out["refill_ms"] = 1e3 * mean(con, "refill_s") if con and "refill_s" in con[0] else 0.0
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
    # what the host adds to a step besides the apply kernel and the sampler: the wait for
    # the masks, the accepts, and the forward pass (its launch and the wait for it), against
    # the same in the unconstrained loop.  The host's work after a launch runs beside the
    # pass (the wait for the pass is that much shorter), so it counts on both sides.  The
    # forward pass is compared over the steps that waited for a one-token pass (a chunk
    # step's pass is longer by the device's own work: jump-forward).
    ones, unc_ones = ([r for r in rows if r.get("width", 1) == 1] for rows in (con, unc))
    out["forward_one_ms"] = 1e3 * mean(ones, "forward_s") if ones else out["forward_ms"]
    unc_one = 1e3 * mean(unc_ones, "forward_s") if unc_ones else out["unconstrained_forward_ms"]
    unc_host = (1e3 * (mean(unc, "wait_s") + mean(unc, "accept_s")) if unc else 0.0) + unc_one
    out["host_overhead_ms"] = out["wait_ms"] + out["accept_ms"] + out["forward_one_ms"] - unc_host
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
    # a pass that fed a run in place of a draw (the overlap path) saved none: the run's
    # tokens less those passes are the passes saved
    held = sum(s.get("held", 0) for s in sequences)
    out["steps_saved_pct"] = 100.0 * (jumped - held) / written if written else float("nan")
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
    finish_provenance(record)
    if run.kernels:
        record["apply_kernels"] = run.kernels
    (out / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    pd.DataFrame(run.steps).to_csv(out / "steps.csv", index=False)
    with open(out / "sequences.jsonl", "w", encoding="utf-8") as f:
        for s in run.sequences:
            f.write(json.dumps(s) + "\n")
    return out
