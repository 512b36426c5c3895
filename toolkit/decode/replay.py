"""What the decoding harness's models share: :class:`ModelError`, and :class:`Replay`,
the logits bonus that makes a model write each item's valid instance
(``random:NAME:replay``, ``sim:...:replay``)."""

from __future__ import annotations

from typing import Any

from toolkit.core.errors import MasklabError
from toolkit.core.forced import canonical_tokens
from toolkit.core.vocab import Vocabulary

__all__ = ["ModelError", "Replay", "REPLAY_BONUS", "REPLAY_NOTE"]

REPLAY_BONUS = 40.0
"""``sim:...:replay``: added to the logit of the token that continues a sequence's target
(the pool's noise has a standard deviation of 4): greedy and sampled decoding write the
target wherever the mask allows it."""

REPLAY_NOTE = ("replay: each sequence's logits favour its item's valid instance (+REPLAY_BONUS on the "
               "canonical next token), so outputs are dataset texts; step times are the model's")


class ModelError(MasklabError):
    """A model that cannot be loaded, or whose logits do not match the vocabulary."""


class Replay:
    """A model that replays texts: each sequence's logits favour the canonical first
    token of what is left of its target (:data:`REPLAY_BONUS` added; EOS at its end),
    so its outputs are a dataset's valid instances rather than noise, while the step
    times stay the model's.  A sequence that leaves its target (a mask refused the
    favoured token) goes on from the model's own logits.  ``sim:...:replay`` and
    ``random:NAME:replay`` use it; jump-forward decoding needs text a grammar can
    force, which noise rarely is.

    Its host work per step is small, as a model's is: each target is tokenized once;
    while a sequence stands at one of that tokenization's boundaries its next token is
    the next one of it, and only elsewhere (after forced tokens that split the text
    differently) is the rest of the target tokenized again."""

    def __init__(self, vocab: Vocabulary, targets: list[bytes | None], batch: int) -> None:
        if len(targets) != batch:
            raise ModelError(f"{len(targets)} replay targets for {batch} sequences")
        self.vocab = vocab
        self.targets: list[bytes | None] = [None] * batch
        self.at = [0] * batch  # bytes written so far, while on the target (-1: it left it)
        self._canon: list[list[int]] = [[] for _ in range(batch)]  # the target's tokens
        self._ends: list[list[int]] = [[] for _ in range(batch)]  # where each of them ends
        self._k = [0] * batch  # the first of them not yet written
        self._bonus: dict[tuple[Any, Any], Any] = {}  # REPLAY_BONUS per (device, dtype), on the device
        for row, target in enumerate(targets):
            self.reset(row, target)

    def reset(self, row: int, target: bytes | None) -> None:
        """Row ``row`` starts a new sequence replaying ``target`` (a continuous batch's
        slot taking its next item)."""
        self.targets[row], self.at[row], self._k[row] = target, 0, 0
        toks = canonical_tokens(self.vocab, target) if target else []
        tb, ends, n = self.vocab.token_bytes, [], 0
        for t in toks:
            n += len(tb[t])
            ends.append(n)
        self._canon[row], self._ends[row] = toks, ends

    def write(self, runs: list[list[int]]) -> None:
        """Record the tokens each sequence was fed this step."""
        tb = self.vocab.token_bytes
        for row, run in enumerate(runs):
            target, at = self.targets[row], self.at[row]
            if target is None or at < 0:
                continue
            for t in run:
                b = tb[t]
                if target[at: at + len(b)] != b:
                    at = -1
                    break
                at += len(b)
            self.at[row] = at

    @property
    def written(self) -> list[bytes]:
        """The bytes each sequence wrote so far while on its target (b"" once it left it
        or has none)."""
        return [t[:a] if t is not None and a >= 0 else b"" for t, a in zip(self.targets, self.at, strict=True)]

    def next_tokens(self) -> list[int | None]:
        """Per sequence, the token favoured next; None once it left its target."""
        return [self.next_token(i) for i in range(len(self.targets))]

    def next_token(self, row: int) -> int | None:
        """The token row ``row`` favours next; None once it left its target."""
        target, at = self.targets[row], self.at[row]
        if target is None or at < 0:
            return None
        if at == len(target):
            return self.vocab.eos_ids[0] if self.vocab.eos_ids else None
        ends, k = self._ends[row], self._k[row]
        while k < len(ends) and ends[k] <= at:
            k += 1
        self._k[row] = k
        if (ends[k - 1] if k else 0) == at:  # on a boundary of the target's tokens
            return self._canon[row][k]
        toks = canonical_tokens(self.vocab, target[at: at + 64])
        return toks[0] if toks else None

    def favour(self, logits: Any, rows: list[int] | None = None) -> None:
        """Add the bonus to ``logits`` (``(B, V)``, any device) in place; ``rows``: only
        to these rows (``logits`` then has one row per entry, in that order).

        Nothing here waits for the device: it is called right after a forward pass is
        launched, and the masks of the step are made while that pass runs.  A copy from
        pageable host memory to a GPU waits for the work queued before it (the whole
        forward pass), so on CUDA the positions go through pinned memory and the bonus
        is a device constant made by a fill kernel, once."""
        import torch

        wanted = range(len(self.targets)) if rows is None else rows
        pairs = [(k, t) for k, r in enumerate(wanted) if (t := self.next_token(r)) is not None]
        if not pairs:
            return
        idx = torch.tensor(pairs, dtype=torch.long)
        if logits.device.type == "cuda":
            idx = idx.pin_memory()
        idx = idx.to(logits.device, non_blocking=True)
        key = (logits.device, logits.dtype)
        bonus = self._bonus.get(key)
        if bonus is None:
            bonus = self._bonus[key] = torch.full((), REPLAY_BONUS, dtype=logits.dtype, device=logits.device)
        logits.index_put_((idx[:, 0], idx[:, 1]), bonus, accumulate=True)
