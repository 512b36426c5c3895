"""The token trie, flattened: every distinct token prefix as one record, in DFS order.

A mask is computed by walking every token's bytes through a recognizer.  Tokens
share prefixes, so the walk goes over a trie; stored as an array of nodes in DFS
order (children in increasing byte order), the walk is a single forward scan: visit
node ``p``; if the recognizer rejects its byte, none of its descendants can be
allowed either and the scan jumps to ``p + subtree_size``.  This is the layout of
llguidance's ``toktrie`` (Moskal et al. 2025).

Depth bookkeeping without parent pointers: after node ``p`` is pushed and is a leaf,
or after its subtree is skipped, the next node is ``q = p + subtree_size[p]`` and sits
at depth ``depth(p) - num_parents[p] + 1``.  A walker that keeps one recognizer state
per depth (``stack[k]`` = state after the first ``k`` bytes) therefore only needs
``num_parents`` to know where ``q``'s parent state is; a walker with a push/pop
recognizer pops ``num_parents[p]`` levels after pushing a leaf ``p`` and
``num_parents[p] - 1`` after rejecting ``p``.

The tokens' ids live in one CSR-style array, ``token_ids``, in DFS order; node ``p``
owns ``token_ids[token_start[p] : token_start[p] + token_count[p]]`` and its whole
subtree owns ``token_ids[token_start[p] : token_start[p + subtree_size[p]]]`` (the
end of the array past the last node), which lets a caller allow a whole subtree at
once.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t, uint32_t

import operator

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport BYTES
from toolkit.core.ids cimport DEAD, state_t, token_t, word_t

from toolkit.core.errors import LimitExceeded
from toolkit.core.classform import check_class_form

cnp.import_array()

__all__ = ["TokenTrie"]

# Mirrors TrieNode field by field (packed, native byte order).
_NODE_DTYPE = np.dtype(
    [
        ("token_start", np.int32),
        ("token_count", np.int32),
        ("subtree_size", np.int32),
        ("num_parents", np.int32),
        ("byte", np.uint8),
    ]
)
if _NODE_DTYPE.itemsize != sizeof(TrieNode):
    raise ImportError(
        f"toolkit.core.trie: TrieNode is {sizeof(TrieNode)} bytes but its numpy dtype "
        f"is {_NODE_DTYPE.itemsize}"
    )

# ---------------------------------------------------------------------------
# Construction: sorted byte strings -> DFS nodes
# ---------------------------------------------------------------------------

cdef int64_t _count_nodes(
    const uint8_t* blob,
    const int64_t* offsets,
    Py_ssize_t n,
    int32_t* lcp,
    int32_t* max_depth,
) noexcept nogil:
    """Fill lcp[i] (common prefix of strings i - 1 and i); return the node count.

    The strings are sorted, so the prefixes of string i longer than lcp[i] were
    never seen before: each is one new node.
    """
    cdef Py_ssize_t i
    cdef int64_t total = 1, length, prev_length = 0, k, limit
    cdef const uint8_t* a
    cdef const uint8_t* b
    max_depth[0] = 0
    for i in range(n):
        length = offsets[i + 1] - offsets[i]
        k = 0
        if i > 0:
            a = blob + offsets[i - 1]
            b = blob + offsets[i]
            limit = prev_length if prev_length < length else length
            while k < limit and a[k] == b[k]:
                k += 1
        lcp[i] = <int32_t>k
        total += length - k
        if length > max_depth[0]:
            max_depth[0] = <int32_t>length
        prev_length = length
    return total


cdef inline void _close(TrieNode* nodes, int32_t x, int32_t depth, int32_t next_node,
                        int32_t next_depth) noexcept nogil:
    # Node x (at depth) is complete once node next_node (at next_depth) is emitted.
    nodes[x].subtree_size = next_node - x
    nodes[x].num_parents = depth - next_depth + 1


cdef void _emit_nodes(
    const uint8_t* blob,
    const int64_t* offsets,
    const int32_t* lcp,
    Py_ssize_t n,
    TrieNode* nodes,
    int32_t num_nodes,
    int32_t* path,
) noexcept nogil:
    """Write the nodes of the n sorted strings; path holds max_depth + 1 node indices."""
    cdef Py_ssize_t i
    cdef int32_t p = 1, depth = 0, d, length, common
    cdef int64_t start
    cdef TrieNode* node
    nodes[0].byte = 0
    nodes[0].token_start = 0
    nodes[0].token_count = 0
    nodes[0].subtree_size = num_nodes
    nodes[0].num_parents = 0
    path[0] = 0
    for i in range(n):
        start = offsets[i]
        length = <int32_t>(offsets[i + 1] - start)
        common = lcp[i]
        if common == length:
            # Equal to the previous string (sorted, so not a proper prefix of it).
            nodes[path[length]].token_count += 1
            continue
        # The first new node sits at depth common + 1: everything deeper is done.
        d = depth
        while d > common:
            _close(nodes, path[d], d, p, common + 1)
            d -= 1
        for d in range(common + 1, length + 1):
            node = &nodes[p]
            node.byte = blob[start + d - 1]
            node.token_start = <int32_t>i
            node.token_count = 0
            path[d] = p
            p += 1
        nodes[p - 1].token_count = 1
        depth = length
    # The end of the array counts as a node at depth 1 (a next child of the root).
    d = depth
    while d > 0:
        _close(nodes, path[d], d, num_nodes, 1)
        d -= 1


# ---------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------

cdef int64_t trie_walk_dfa(
    const TrieNode* nodes,
    int32_t num_nodes,
    const token_t* token_ids,
    const state_t* transitions,
    const uint8_t* classes,
    int32_t n_classes,
    state_t num_states,
    state_t state,
    state_t* stack,
    word_t* mask,
    TokenEnd* ends,
    int64_t* num_ends,
) noexcept nogil:
    """Every token whose bytes, run from state, never reach DEAD: its bit is ORed into
    mask, or, when ends is not NULL, it is written to ends[num_ends[0]++] with the
    state its last byte reached (ends has room for every token of the trie plus one:
    the entry past the last is scratch).

    transitions is a C-contiguous [num_states, n_classes] table over byte classes,
    byte b in class classes[b] (a byte table: n_classes 256 and the identity); stack
    has room for max_depth + 1 states.  Returns the number of nodes visited, or -1 when the table
    leads to a state outside [0, num_states) (the output is then incomplete).

    A node's first id is handled without a branch (a node holds 0 or 1 ids about
    equally often, which no predictor guesses): a node without ids ORs a 0 bit, or
    writes an entry it does not count, using the readable id past its own (see
    TokenTrie).  The descent is branch-free too.  Both halve the time per node.
    """
    cdef int32_t p = 1, depth = 1, i, end
    cdef int64_t visited = 0, k = 0
    cdef state_t s
    cdef token_t t
    cdef const TrieNode* node
    if state == DEAD:
        return 0
    if ends != NULL:
        k = num_ends[0]
    stack[0] = state
    while p < num_nodes:
        node = &nodes[p]
        visited += 1
        s = transitions[<int64_t>stack[depth - 1] * n_classes + classes[node.byte]]
        if s == DEAD:
            depth -= node.num_parents - 1
            p += node.subtree_size
            continue
        if <uint32_t>s >= <uint32_t>num_states:
            if ends != NULL:
                num_ends[0] = k
            return -1
        t = token_ids[node.token_start]
        if ends != NULL:
            ends[k].token = t
            ends[k].state = s
            k += node.token_count != 0
        else:
            mask[t >> 5] |= (<word_t>(node.token_count != 0)) << (t & 31)
        if node.token_count > 1:  # duplicate byte strings: rare
            end = node.token_start + node.token_count
            for i in range(node.token_start + 1, end):
                t = token_ids[i]
                if ends != NULL:
                    ends[k].token = t
                    ends[k].state = s
                    k += 1
                else:
                    mask[t >> 5] |= (<word_t>1) << (t & 31)
        stack[depth] = s  # a leaf's slot is unused
        depth += 1 - node.num_parents * (node.subtree_size == 1)
        p += 1
    if ends != NULL:
        num_ends[0] = k
    return visited


cdef void _child_index(const TrieNode* nodes, int32_t n, int32_t* off, int32_t* kid,
                       uint8_t* kb) noexcept nogil:
    """Fill the child index (see ``TokenTrie.kid_off``): each node's children in byte
    order, the next one a subtree after the last; every node but the root is one child."""
    cdef int32_t p, c, end, m = 0
    for p in range(n):
        off[p] = m
        c = p + 1
        end = p + nodes[p].subtree_size
        while c < end:
            kid[m] = c
            kb[m] = nodes[c].byte
            m += 1
            c += nodes[c].subtree_size
    off[n] = m


# ---------------------------------------------------------------------------
# The Python-facing owner
# ---------------------------------------------------------------------------

cdef class TokenTrie:
    """The text tokens of a vocabulary as a flat DFS trie.

    Built from ``vocab.token_bytes`` restricted to ``vocab.text_token_ids()``:
    special and padding ids are never in the trie, so no walk can allow them.
    """

    def __init__(self, vocab):
        size = operator.index(vocab.size)
        token_bytes = vocab.token_bytes
        ids = _text_ids(vocab, size)
        # Stable sort on the bytes: ids with equal bytes stay in increasing order.
        order = sorted(ids.tolist(), key=token_bytes.__getitem__)
        strings = [token_bytes[t] for t in order]
        cdef Py_ssize_t n = len(strings)
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=n)
        if n and lengths.min() == 0:
            empty = order[int(np.argmin(lengths))]
            raise ValueError(f"text token {empty} has empty bytes (it belongs with the specials)")
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[n] >= INT32_MAX:
            raise LimitExceeded("trie bytes", int(offsets[n]), INT32_MAX - 1)
        blob = b"".join(strings)

        lcp = np.empty(n, dtype=np.int32)
        cdef const uint8_t* blob_p = blob
        cdef const int64_t* offsets_p = <const int64_t*>cnp.PyArray_DATA(offsets)
        cdef int32_t* lcp_p = <int32_t*>cnp.PyArray_DATA(lcp)
        cdef int32_t max_depth = 0
        cdef int64_t total
        with nogil:
            total = _count_nodes(blob_p, offsets_p, n, lcp_p, &max_depth)

        nodes = np.empty(total, dtype=_NODE_DTYPE)
        path = np.empty(max_depth + 1, dtype=np.int32)
        cdef TrieNode* nodes_p = <TrieNode*>cnp.PyArray_DATA(nodes)
        cdef int32_t* path_p = <int32_t*>cnp.PyArray_DATA(path)
        with nogil:
            _emit_nodes(blob_p, offsets_p, lcp_p, n, nodes_p, <int32_t>total, path_p)

        # one readable 0 past the end: the walks load token_ids[token_start] of every
        # node, ids or not, instead of branching (an inner node's index is its first
        # descendant's, in range; the pad keeps any token_start <= num_tokens safe)
        padded = np.zeros(n + 1, dtype=np.int32)
        padded[:n] = order
        padded.flags.writeable = False
        nodes.flags.writeable = False
        self._nodes_array = nodes
        self._token_ids_array = padded[:n]
        self.nodes = nodes_p
        self.token_ids = <const token_t*>cnp.PyArray_DATA(padded)
        self.num_nodes = <int32_t>total
        self.num_tokens = <int32_t>n
        self.max_depth = max_depth
        self.vocab_size = <int32_t>size
        self.nodes_visited = 0

    # -- read-only views ---------------------------------------------------

    @property
    def node_bytes(self):
        """uint8[num_nodes]: the byte on the edge into each node (0 at the root)."""
        return self._nodes_array["byte"]

    @property
    def subtree_size(self):
        """int32[num_nodes]: nodes in each subtree, the node itself included."""
        return self._nodes_array["subtree_size"]

    @property
    def num_parents(self):
        """int32[num_nodes]: ``depth(p) - depth(p + subtree_size[p]) + 1`` (end = depth 1)."""
        return self._nodes_array["num_parents"]

    @property
    def token_start(self):
        """int32[num_nodes]: first index into ``token_ids`` of the ids ending at each node."""
        return self._nodes_array["token_start"]

    @property
    def token_count(self):
        """int32[num_nodes]: how many ids end at each node."""
        return self._nodes_array["token_count"]

    @property
    def token_ids(self):
        """int32[num_tokens]: the text token ids in DFS order, grouped by node."""
        return self._token_ids_array

    def memory_bytes(self):
        """Bytes held by the node records and the token id array (and the child index,
        once built)."""
        kids = 0 if self._kids is None else sum(int(a.nbytes) for a in self._kids)
        return int(self._nodes_array.nbytes + self._token_ids_array.nbytes) + kids

    def child_index(self):
        """``(offsets, nodes, bytes)``: node ``p``'s children are
        ``nodes[offsets[p]:offsets[p + 1]]`` in byte order, their edge bytes ``bytes[...]``
        beside them (int32[num_nodes + 1], int32[num_nodes - 1], uint8[num_nodes - 1]).
        Built the first time it is asked for (one pass, 9 bytes a node), then kept: a walk
        that prunes by byte (``glr``'s making of its mask tables) reads a node's children's
        bytes in a row instead of each child's record."""
        if self._kids is None:
            n = self.num_nodes
            off = np.empty(n + 1, dtype=np.int32)
            kid = np.empty(max(n - 1, 0), dtype=np.int32)
            kb = np.empty(max(n - 1, 0), dtype=np.uint8)
            _child_index(self.nodes, n, <int32_t*>cnp.PyArray_DATA(off), <int32_t*>cnp.PyArray_DATA(kid),
                         <uint8_t*>cnp.PyArray_DATA(kb))
            for a in (off, kid, kb):
                a.flags.writeable = False
            self.kid_off = <const int32_t*>cnp.PyArray_DATA(off)
            self.kid_node = <const int32_t*>cnp.PyArray_DATA(kid)
            self.kid_byte = <const uint8_t*>cnp.PyArray_DATA(kb)
            self._kids = (off, kid, kb)
        return self._kids

    def token_prefix_bytes(self, node):
        """The bytes spelled by the path from the root to ``node`` (b"" for the root)."""
        cdef int32_t target = _check_node(node, self.num_nodes)
        cdef int32_t q = 0, c
        out = bytearray()
        while q != target:
            c = q + 1
            while c + self.nodes[c].subtree_size <= target:
                c += self.nodes[c].subtree_size
            out.append(self.nodes[c].byte)
            q = c
        return bytes(out)

    def token_blob(self):
        """``(blob, offsets)``: the bytes of every stored token in ``token_ids`` order,
        token ``i``'s being ``blob[offsets[i]:offsets[i + 1]]`` (uint8 and int64 arrays),
        rebuilt from the nodes (one scan, the path kept per depth)."""
        cdef int64_t total = 0, k = 0
        cdef int32_t p, depth, i, j
        cdef const TrieNode* node
        offsets = np.zeros(self.num_tokens + 1, dtype=np.int64)
        cdef int64_t[::1] off = offsets
        path = np.zeros(self.max_depth + 1, dtype=np.uint8)
        cdef uint8_t[::1] pv = path
        cdef uint8_t[::1] bv
        cdef int phase
        blob = np.zeros(0, dtype=np.uint8)
        for phase in range(2):
            if phase == 1:
                blob = np.empty(total, dtype=np.uint8)
                bv = blob
            depth = 1
            k = 0
            p = 1
            while p < self.num_nodes:
                node = &self.nodes[p]
                pv[depth - 1] = node.byte
                for i in range(node.token_count):
                    if phase == 0:
                        total += depth
                        off[k + 1] = total
                    else:
                        for j in range(depth):
                            bv[off[k] + j] = pv[j]
                    k += 1
                depth += 1 - node.num_parents * (node.subtree_size == 1)
                p += 1
        return blob, offsets

    def __repr__(self):
        return (
            f"TokenTrie(num_nodes={self.num_nodes}, num_tokens={self.num_tokens}, "
            f"max_depth={self.max_depth}, vocab_size={self.vocab_size})"
        )

    # -- walks -------------------------------------------------------------

    def allowed_tokens(self, dfa, state, out=None):
        """The bitmask row of tokens that keep ``dfa`` alive when read from ``state``.

        A token is allowed when running its bytes from ``state`` never enters the
        DEAD state 0 (prefix viability: the text may go on to an accepting state).
        ``out``, when given, is a C-contiguous int32 row of ``ceil(vocab_size / 32)``
        words; it is overwritten.  ``nodes_visited`` records the work done.
        """
        transitions, classes = _check_transitions(dfa)
        cdef state_t num_states = <state_t>transitions.shape[0]
        cdef int32_t n_classes = <int32_t>transitions.shape[1]
        start = operator.index(state)
        if not 0 <= start < num_states:
            raise ValueError(f"state {start} is outside [0, {num_states}) for this DFA")
        cdef Py_ssize_t n_words = (<Py_ssize_t>self.vocab_size + 31) // 32
        if out is None:
            out = np.zeros(n_words, dtype=np.int32)
        else:
            _check_row(out, n_words)
            out.fill(0)

        cdef const state_t* table = <const state_t*>cnp.PyArray_DATA(transitions)
        cdef const uint8_t* cls = <const uint8_t*>cnp.PyArray_DATA(classes)
        cdef word_t* mask = <word_t*>cnp.PyArray_DATA(out)
        cdef state_t s0 = <state_t>start
        cdef int64_t visited
        cdef state_t* stack = <state_t*>PyMem_Malloc((self.max_depth + 1) * sizeof(state_t))
        if stack == NULL:
            raise MemoryError()
        try:
            with nogil:
                visited = trie_walk_dfa(
                    self.nodes, self.num_nodes, self.token_ids, table, cls, n_classes, num_states, s0,
                    stack, mask, NULL, NULL,
                )
        finally:
            PyMem_Free(stack)
        if visited < 0:
            raise ValueError(
                f"dfa.transitions holds a state outside [0, {num_states}) reachable from "
                f"state {start}"
            )
        self.nodes_visited = visited
        return out


cdef _text_ids(vocab, size):
    """The vocabulary's text token ids, sorted (int64), once they are checked: every id
    inside ``[0, size)`` and listed once, ``token_bytes`` one entry per id."""
    token_bytes = vocab.token_bytes
    if size < 0 or size > INT32_MAX:
        raise ValueError(f"vocab.size must be in [0, 2**31), got {size}")
    if len(token_bytes) != size:
        raise ValueError(
            f"vocab.token_bytes has {len(token_bytes)} entries but vocab.size is {size}"
        )
    ids = np.asarray(vocab.text_token_ids())
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError(
            f"vocab.text_token_ids() must be a 1-D integer array, got {ids.dtype} "
            f"with shape {ids.shape}"
        )
    ids = np.sort(ids.astype(np.int64, copy=False))
    if ids.size:
        lowest, highest = int(ids[0]), int(ids[ids.size - 1])
        if lowest < 0 or highest >= size:
            bad = lowest if lowest < 0 else highest
            raise ValueError(f"text token id {bad} is outside [0, vocab.size={size})")
    if ids.size > 1 and not np.all(ids[1:] != ids[:ids.size - 1]):
        raise ValueError("vocab.text_token_ids() lists an id twice")
    return ids


cdef int32_t _check_node(node, int32_t num_nodes) except -1:
    index = operator.index(node)
    if not 0 <= index < num_nodes:
        raise IndexError(f"node {index} is outside [0, {num_nodes})")
    return <int32_t>index


IDENTITY_CLASSES = np.arange(BYTES, dtype=np.uint8)
IDENTITY_CLASSES.setflags(write=False)


cdef tuple _check_transitions(dfa):
    """``(table, classes)`` of a DFA: a :class:`~toolkit.automata.regex.ByteDFA`'s class form, or
    any object's ``transitions`` byte table with the identity classes."""
    table = getattr(dfa, "table", None)
    classes = getattr(dfa, "classes", None)
    if isinstance(table, np.ndarray) and isinstance(classes, np.ndarray):
        # states out of range are found by the walk, where they are reached
        table, classes = check_class_form(table, classes, what="dfa", targets=False)
        if table.shape[0] > INT32_MAX:
            raise ValueError(f"dfa has {table.shape[0]} states, more than int32 can index")
        return table, classes
    transitions = getattr(dfa, "transitions", None)
    if not isinstance(transitions, np.ndarray):
        raise ValueError(
            f"dfa.transitions must be a numpy array, got {type(transitions).__name__}"
        )
    if transitions.dtype != np.int32:
        raise ValueError(f"dfa.transitions must have dtype int32, got {transitions.dtype}")
    if transitions.ndim != 2 or transitions.shape[1] != BYTES or transitions.shape[0] < 1:
        raise ValueError(
            f"dfa.transitions must have shape (n_states >= 1, 256), got {transitions.shape}"
        )
    if transitions.shape[0] > INT32_MAX:
        raise ValueError(f"dfa has {transitions.shape[0]} states, more than int32 can index")
    if not transitions.flags.c_contiguous:
        raise ValueError("dfa.transitions must be C-contiguous (np.ascontiguousarray)")
    return transitions, IDENTITY_CLASSES


cdef int _check_row(out, Py_ssize_t n_words) except -1:
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy int32 array, got {type(out).__name__}")
    if out.dtype != np.int32:
        raise ValueError(f"out must have dtype int32, got {out.dtype}")
    if out.shape != (n_words,):
        raise ValueError(f"out must have shape ({n_words},), got {out.shape}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable C-contiguous row")
    return 0
