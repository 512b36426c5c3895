"""Type stubs for the Cython module :mod:`toolkit.core.trie` (see trie.pyx for the layout)."""

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["TokenTrie"]

IDENTITY_CLASSES: npt.NDArray[np.uint8]
"""The byte classes of a plain byte table: byte ``b`` in class ``b`` (read-only)."""

class _Vocab(Protocol):
    @property
    def size(self) -> int: ...
    @property
    def token_bytes(self) -> Sequence[bytes]: ...
    def text_token_ids(self) -> npt.NDArray[np.integer]: ...

class _DFA(Protocol):
    @property
    def transitions(self) -> npt.NDArray[np.int32]: ...

class TokenTrie:
    """The text tokens of a vocabulary as a flat DFS trie (root at node 0)."""

    @property
    def num_nodes(self) -> int:
        """Nodes including the root: 1 + the number of distinct non-empty token prefixes."""
    @property
    def num_tokens(self) -> int:
        """Token ids stored (the vocabulary's text tokens)."""
    @property
    def max_depth(self) -> int:
        """Bytes in the longest token; a walk stack needs ``max_depth + 1`` entries."""
    @property
    def vocab_size(self) -> int:
        """Bitmask width in tokens (``vocab.size``)."""
    @property
    def nodes_visited(self) -> int:
        """Nodes the most recent :meth:`allowed_tokens` call looked at."""
    @property
    def node_bytes(self) -> npt.NDArray[np.uint8]:
        """The byte on the edge into each node (0 at the root); read-only."""
    @property
    def subtree_size(self) -> npt.NDArray[np.int32]:
        """Nodes in each subtree, the node itself included; read-only."""
    @property
    def num_parents(self) -> npt.NDArray[np.int32]:
        """``depth(p) - depth(p + subtree_size[p]) + 1`` with the end at depth 1; read-only."""
    @property
    def token_start(self) -> npt.NDArray[np.int32]:
        """First index into :attr:`token_ids` of the ids ending at each node; read-only."""
    @property
    def token_count(self) -> npt.NDArray[np.int32]:
        """How many ids end at each node; read-only."""
    @property
    def token_ids(self) -> npt.NDArray[np.int32]:
        """The text token ids in DFS order, grouped by node; read-only."""
    def __init__(self, vocab: _Vocab) -> None: ...
    def memory_bytes(self) -> int:
        """Bytes held by the node records and the token id array."""
    def token_blob(self) -> tuple[np.ndarray, np.ndarray]: ...
    def token_prefix_bytes(self, node: int) -> bytes:
        """The bytes spelled by the path from the root to ``node``."""
    def allowed_tokens(
        self, dfa: _DFA, state: int, out: npt.NDArray[np.int32] | None = None
    ) -> npt.NDArray[np.int32]:
        """The bitmask row of tokens whose bytes, read from ``state``, never reach DEAD."""
