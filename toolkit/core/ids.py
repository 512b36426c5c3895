"""Named id types and sentinels (mirrors ``toolkit/core/ids.pxd``)."""

from typing import NewType

__all__ = ["TokenId", "StateId", "SymbolId", "DEAD", "MISSING"]

TokenId = NewType("TokenId", int)
StateId = NewType("StateId", int)
SymbolId = NewType("SymbolId", int)

DEAD: StateId = StateId(0)
"""Every :class:`toolkit.automata.regex.ByteDFA` keeps its dead state at index 0."""
MISSING = -1
"""A lazily filled table entry not computed yet."""
