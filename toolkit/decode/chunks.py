"""Jump-forward's chunk widths: how many tokens of its forced run each sequence is fed in
one pass (:class:`ChunkWidths`, the pipelined loop's ``overlap`` and ``lookahead``
schedules).

A chunk step feeds every sequence of the batch the same number of positions, its run
left-padded to the longest (a compiled step pads further, to a power of two:
:func:`toolkit.decode.model.chunk_width`).  On a GPU that is not free: on an H200 at
batch 32 a chunk step of 2 to 16 tokens took 13.4-14.7 ms against 12.3-12.7 ms for a
one-token step (``results/gpu/lookahead/``), so a step where one sequence of 32 feeds a
two-token run costs 15 % more to write one more token.  Feeding the whole of every run
at once (``all``, what jump-forward did first) then loses to plain decoding.

``auto`` (the default) picks each step's width ``w`` to write the most tokens per second
of device time: with ``L`` live sequences and runs of ``n_i`` tokens (the drawn id with
its forced tokens, or the rest of a run), ``(L + sum(min(n_i, w) - 1)) / cost(w)``, over
``w`` = 1, the powers of two below the longest run, and the longest run.  ``cost(w)`` is
measured in the run itself: the median of the last :data:`COST_SAMPLES` steps launched
at ``w``'s padded width (the launch, the wait for the ids before it, and the wait for the
pass), the first step of each width left out (a graph's capture, an allocator growing);
a width not measured yet is priced as a one-token step, so it is tried and then known,
and a width passed over :data:`RETRY` times in a row is tried once more (a cost measured
on a stall of the host is not kept for the run).
What a step does not feed of a run is fed in the next passes in place of the sequence's
draws (the sequence is *held*: its matcher accepted the whole run already), so a cut
run still saves every pass its fed tokens fill, and a run fed one token a pass costs
what plain decoding does.  An integer ``N`` caps every step at ``N`` tokens.
"""

from __future__ import annotations

from toolkit.decode.model import chunk_width

__all__ = ["CHUNK_POLICIES", "COST_SAMPLES", "RETRY", "ChunkWidths", "chunk_policy"]

CHUNK_POLICIES = ("auto", "all")
"""The named chunk-width policies (:func:`chunk_policy`; an integer is the third kind)."""

COST_SAMPLES = 15
"""Steps per padded width whose median is that width's cost (:class:`ChunkWidths`)."""

RETRY = 64
"""``auto``: a width passed over this many times in a row for a narrower one is launched
once more, so its cost is measured again (:class:`ChunkWidths`)."""


def chunk_policy(value: str | int) -> str | int:
    """``value`` as a chunk-width policy: ``"auto"``, ``"all"`` or a cap ``N >= 1`` (an int,
    or its digits); a ``ValueError`` naming the valid values otherwise."""
    if isinstance(value, str) and value in CHUNK_POLICIES:
        return value
    n = int(value) if isinstance(value, str) and value.isascii() and value.isdecimal() else value
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n
    raise ValueError(f"chunk width must be 'auto', 'all' or an integer >= 1, got {value!r}")


class ChunkWidths:
    """Each chunk step's width under ``policy`` (see the module doc): :meth:`record` the
    device seconds of every step launched, :meth:`choose` the next step's width."""

    def __init__(self, policy: str | int = "auto") -> None:
        self.policy = chunk_policy(policy)
        self._times: dict[int, list[float]] = {}  # padded width -> the last COST_SAMPLES step seconds
        self._first: set[int] = set()  # padded widths whose first step was left out
        self._passed: dict[int, int] = {}  # padded width -> the choices in a row it lost
        self._cost: dict[int, float] = {}  # padded width -> the median of its times (made when asked)

    def record(self, width: int, seconds: float) -> None:
        """A step launched at ``width`` tokens took ``seconds`` of device time."""
        key = chunk_width(width)
        if key not in self._first:
            self._first.add(key)
            return
        times = self._times.setdefault(key, [])
        times.append(seconds)
        if len(times) > COST_SAMPLES:
            del times[0]
        self._cost.pop(key, None)

    def cost(self, width: int) -> float | None:
        """The measured seconds of a step of ``width`` tokens (None: not measured yet):
        the median of its last :data:`COST_SAMPLES` (the upper one of an even count)."""
        key = chunk_width(width)
        c = self._cost.get(key)
        if c is None:
            times = self._times.get(key)
            if not times:
                return None
            c = self._cost[key] = sorted(times)[len(times) // 2]
        return c

    def choose(self, runs: list[int], live: int) -> int:
        """The width of a step where ``live`` sequences write and ``runs`` are the lengths
        of the runs longer than one token (at least one)."""
        longest = max(runs)
        if self.policy == "all":
            return longest
        if isinstance(self.policy, int):
            return min(self.policy, longest)
        one = self.cost(1)
        if one is None:  # nothing measured yet: the whole runs
            return longest
        best, best_rate = 1, live / one
        widths = [1 << k for k in range(1, max(longest - 1, 1).bit_length()) if 1 << k < longest] + [longest]
        for w in widths:
            extra = 0
            for n in runs:
                extra += (n if n < w else w) - 1
            rate = (live + extra) / (self.cost(w) or one)
            if rate > best_rate:
                best, best_rate = w, rate
        lost = self._passed
        for w in widths:
            if w > best:
                key = chunk_width(w)
                lost[key] = lost.get(key, 0) + 1
                if lost[key] >= RETRY:  # measured again: what it cost may have been a stall
                    best = w
        lost[chunk_width(best)] = 0
        return best
