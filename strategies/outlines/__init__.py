"""Strategy ``outlines``: the precomputed FSM token index (see :mod:`.engine`)."""

from strategies.outlines.engine import (
    DEFAULT_MAX_MEMORY,
    OutlinesCompiled,
    OutlinesEngine,
    OutlinesMatcher,
)

__all__ = ["OutlinesEngine", "OutlinesCompiled", "OutlinesMatcher", "DEFAULT_MAX_MEMORY"]
