"""Strategy ``llguidance``: lazy lexer + Earley parser + token-trie walk + slicer (see :mod:`.engine`)."""

from strategies.llguidance.engine import (
    DEFAULT_SLICES,
    LLGuidanceCompiled,
    LLGuidanceEngine,
    LLGuidanceMatcher,
)

__all__ = ["LLGuidanceEngine", "LLGuidanceCompiled", "LLGuidanceMatcher", "DEFAULT_SLICES"]
