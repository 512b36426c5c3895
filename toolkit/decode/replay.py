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
    force, which noise rarely is."""

    def __init__(self, vocab: Vocabulary, targets: list[bytes | None], batch: int) -> None:
        if len(targets) != batch:
            raise ModelError(f"{len(targets)} replay targets for {batch} sequences")
        self.vocab = vocab
        self.targets = list(targets)
        self.written = [b""] * batch  # the bytes each sequence wrote so far

    def reset(self, row: int, target: bytes | None) -> None:
        """Row ``row`` starts a new sequence replaying ``target`` (a continuous batch's
        slot taking its next item)."""
        self.targets[row] = target
        self.written[row] = b""

    def write(self, runs: list[list[int]]) -> None:
        """Record the tokens each sequence was fed this step."""
        tb = self.vocab.token_bytes
        self.written = [w + b"".join(tb[t] for t in r) for w, r in zip(self.written, runs, strict=True)]

    def next_tokens(self) -> list[int | None]:
        """Per sequence, the token favoured next; None once it left its target."""
        return [self.next_token(i) for i in range(len(self.targets))]

    def next_token(self, row: int) -> int | None:
        """The token row ``row`` favours next; None once it left its target."""
        target, written = self.targets[row], self.written[row]
        if target is None or not target.startswith(written):
            return None
        if len(written) == len(target):
            return self.vocab.eos_ids[0] if self.vocab.eos_ids else None
        toks = canonical_tokens(self.vocab, target[len(written): len(written) + 64])
        return toks[0] if toks else None

    def favour(self, logits: Any, rows: list[int] | None = None) -> None:
        """Add the bonus to ``logits`` (``(B, V)``, any device) in place; ``rows``: only
        to these rows (``logits`` then has one row per entry, in that order)."""
        import torch

        wanted = range(len(self.targets)) if rows is None else rows
        pairs = [(k, t) for k, r in enumerate(wanted) if (t := self.next_token(r)) is not None]
        if pairs:
            idx = torch.tensor(pairs, dtype=torch.long).to(logits.device, non_blocking=True)
            logits.index_put_((idx[:, 0], idx[:, 1]), torch.tensor(REPLAY_BONUS, dtype=logits.dtype,
                                                                     device=logits.device), accumulate=True)
