# Type stubs of toolkit/core/bpe.pyx (see its module doc).
from typing import Any, ClassVar

import numpy as np

PATTERNS: dict[str, int]

def code_point_classes() -> np.ndarray: ...
def describe(vocab: Any) -> str: ...

class BpeTable:
    pattern: int
    _cache: ClassVar[dict[int, tuple[Any, BpeTable | None]]]
    def __init__(self, vocab: Any) -> None: ...
    @classmethod
    def of(cls, vocab: Any) -> BpeTable | None: ...
    def tokens(self, data: bytes) -> list[int] | None: ...
