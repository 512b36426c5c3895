"""The serial decode loop (``loop="serial"``), masklab's loop before the pipelined one
(:mod:`toolkit.decode.loop`), kept to compare the two: the masks of step ``t`` are
submitted to a thread pool (a task per sequence) before the forward pass, then waited
for, applied, sampled on the host, and every sequence's token accepted one after
another.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolkit.core.vocab import Vocabulary
from toolkit.decode.loop import MaskRows, Seq
from toolkit.decode.model import LoadedModel

__all__ = ["Masker", "decode_loop"]


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


def decode_loop(lm: LoadedModel, prompts: list[list[int]], max_tokens: int, temperature: float,
                seed: int, masker: Masker | None, kernel: Any = None, steps: int | None = None
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


class Masker(MaskRows):
    """The matchers of one batch and the pool that fills their masks during the forward pass."""

    def __init__(self, seqs: list[Seq], vocab: Vocabulary, pool: ThreadPoolExecutor, device: str) -> None:
        super().__init__(seqs, vocab, device)
        self.pool = pool
        self.first = True

    def submit(self, step: int) -> _Pending:
        """Start this step's masks, one pool task per sequence (none nested: no deadlock)."""
        if self.first:  # computed (and timed) as part of TTFM already
            self.first = False
            return _Pending(self.tensor, [])
        return _Pending(self.tensor, [self.pool.submit(self.fill, i) for i in range(len(self.seqs))])

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
