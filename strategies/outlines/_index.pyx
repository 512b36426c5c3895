"""The Outlines token index: for every DFA state, the allowed tokens and where each leads.

Built once per compiled regex (Willard & Louf 2023).  For each live state ``s`` of
the byte DFA, the flat token trie (:mod:`toolkit.core.trie`) is walked from ``s``: a
shared prefix is read once and a prefix that kills the DFA skips its whole subtree,
so the walk costs the number of *viable* trie nodes, not the vocabulary's bytes.
Every token whose bytes keep the DFA alive is allowed in ``s``; the state its last
byte reaches is its next state.

Each row is stored in whichever form is smaller:

* **sparse** rows (at most ``n_words / 2`` tokens): the (token, next state) pairs
  sorted by token id, in one CSR table (``offsets`` per state).  A mask zeroes the
  row and sets the bits; accepting a token is a binary search for it.
* **dense** rows: the row's bitmask itself (``n_words`` int32 words), so a mask is a
  ``memcpy``.  Next states are not stored (a dense row would need ~8 bytes per
  allowed token, some 1 MB per state on a 128k vocabulary, where the bitmask takes
  16 kB): accepting a token checks its bit, then runs its bytes through the DFA
  table, a few lookups that give the very state the walk found.

Special and padding ids are not in the trie, so no row ever allows them; EOS is the
matcher's business (allowed in accepting states).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport BYTES, ERR_MEMORY, WorkCounters, grow, resize
from toolkit.core.ids cimport DEAD, state_t, token_t, word_t
from toolkit.core.session cimport StrategyOps, add_work, ops_capsule_of, undo_copy, undo_pop, undo_reserve
from toolkit.core.trie cimport TokenTrie, trie_walk_dfa

from toolkit.core.classform import check_class_form
from toolkit.core.errors import LimitExceeded, check_deadline, error_of

cnp.import_array()

__all__ = ["TokenIndex", "Cursor", "ops_capsule"]


cdef int _cmp_pairs(const void* a, const void* b) noexcept nogil:
    cdef token_t x = (<const Pair*>a).token, y = (<const Pair*>b).token
    return (x > y) - (x < y)


cdef class TokenIndex:
    """The per-state token table of one DFA over one vocabulary's trie (see module doc;
    fields in _index.pxd).

    ``TokenIndex(trie, table, classes, accepting, token_blob, token_offsets,
    max_memory, dense_min_tokens=-1)``: ``table`` is the DFA's C-contiguous int32
    ``[n_states, n_classes]`` table over byte classes and ``classes`` the uint8 class of
    each byte (:meth:`toolkit.automata.regex.ByteDFA.byte_classes`; state 0 dead), ``accepting``
    its uint8 flags; ``token_blob`` /
    ``token_offsets`` hold every id's bytes (``token_offsets`` has ``vocab_size + 1``
    int64 entries).  A state with at least ``dense_min_tokens`` allowed tokens is
    stored as a bitmask row (-1: the smaller form, more than ``n_words / 2`` tokens).
    Raises :class:`~toolkit.core.errors.LimitExceeded` as soon as the index outgrows
    ``max_memory`` bytes, naming the states and the estimate.
    """

    def __dealloc__(self):
        free(self.offsets)
        free(self.counts)
        free(self.dense_of)
        free(self.pairs)
        free(self.dense)

    def __init__(self, TokenTrie trie, transitions, classes, accepting, token_blob, token_offsets,
                 int64_t max_memory, int64_t dense_min_tokens=-1):
        transitions, classes = check_class_form(transitions, classes, what="TokenIndex")
        accepting = np.ascontiguousarray(accepting, dtype=np.uint8)
        token_offsets = np.ascontiguousarray(token_offsets, dtype=np.int64)
        if accepting.shape != (transitions.shape[0],):
            raise ValueError("accepting must have one flag per state")
        if token_offsets.shape != (trie.vocab_size + 1,):
            raise ValueError(f"token_offsets must have vocab_size + 1 = {trie.vocab_size + 1} entries")
        self._transitions = transitions
        self._accepting = accepting
        self._blob = bytes(token_blob)
        self._token_offsets = token_offsets
        self.trans = <const state_t*>cnp.PyArray_DATA(transitions)
        self._classes = classes
        self.cls = <const uint8_t*>cnp.PyArray_DATA(classes)
        self.n_classes = <int32_t>transitions.shape[1]
        self.accept = <const uint8_t*>cnp.PyArray_DATA(accepting)
        self.blob = <const uint8_t*>(<bytes>self._blob)
        self.tok_off = <const int64_t*>cnp.PyArray_DATA(token_offsets)
        self.num_states = <int32_t>transitions.shape[0]
        self.vocab_size = trie.vocab_size
        self.n_words = (trie.vocab_size + 31) // 32
        self._build(trie, max_memory,
                    self.n_words // 2 + 1 if dense_min_tokens < 0 else dense_min_tokens)

    cdef _build(self, TokenTrie trie, int64_t max_memory, int64_t dense_min_tokens):
        """One trie walk per live state; each row stored dense or sparse (see the module doc)."""
        cdef state_t n = self.num_states, s
        cdef int64_t k, visited, used, estimate
        cdef int64_t row_bytes = <int64_t>self.n_words * sizeof(word_t)
        cdef int64_t fixed = (<int64_t>n + 1) * sizeof(int64_t) + 2 * <int64_t>n * sizeof(int32_t)
        cdef int rc
        cdef Pair* scratch = <Pair*>malloc((<int64_t>trie.num_tokens + 1) * sizeof(Pair))
        cdef state_t* stack = <state_t*>malloc((<int64_t>trie.max_depth + 1) * sizeof(state_t))
        self.offsets = <int64_t*>malloc((<int64_t>n + 1) * sizeof(int64_t))
        self.counts = <int32_t*>malloc(<int64_t>n * sizeof(int32_t))
        self.dense_of = <int32_t*>malloc(<int64_t>n * sizeof(int32_t))
        try:
            if scratch == NULL or stack == NULL or self.offsets == NULL or self.counts == NULL or self.dense_of == NULL:
                raise MemoryError(f"outlines index: no memory for a {n}-state DFA")
            self.offsets[0] = 0
            self.counts[DEAD] = 0
            self.dense_of[DEAD] = -1
            self.offsets[1] = 0
            for s in range(1, n):
                if (s & 63) == 0:  # a compile's deadline (toolkit.core.errors.deadline), every 64 walks
                    check_deadline(f"outlines index, DFA state {s} of {n - 1}")
                k = 0
                with nogil:
                    visited = trie_walk_dfa(trie.nodes, trie.num_nodes, trie.token_ids, self.trans,
                                            self.cls, self.n_classes, n, s, stack, NULL,
                                            scratch, &k)
                if visited < 0:
                    raise ValueError("transitions holds a state outside [0, n_states)")
                self.nodes_visited += visited
                self.counts[s] = <int32_t>k
                if k >= dense_min_tokens and k > 0:
                    rc = self._store_dense(s, scratch, k)
                else:
                    rc = self._store_sparse(s, scratch, k)
                if rc < 0:
                    raise error_of(rc, self.num_pairs + k, None, "outlines index")
                self.offsets[s + 1] = self.num_pairs
                used = fixed + self.num_pairs * sizeof(Pair) + self.num_dense * row_bytes
                if used > max_memory:
                    estimate = used * (n - 1) // s
                    raise LimitExceeded(
                        "max_memory", estimate, max_memory,
                        f"the token index of a {n - 1}-state DFA would need about "
                        f"{estimate / 2**20:.1f} MiB (estimated after {s} states, "
                        f"{self.num_dense} of them dense); raise max_memory or simplify the regex",
                    )
            # give back the growth slack (a failed shrink keeps it)
            if self.num_pairs < self.pairs_cap and resize(<void**>&self.pairs, self.num_pairs, sizeof(Pair)) == 0:
                self.pairs_cap = max(self.num_pairs, 1)
            if self.num_dense < self.dense_cap and resize(<void**>&self.dense, self.num_dense, row_bytes) == 0:
                self.dense_cap = max(self.num_dense, 1)
        finally:
            free(scratch)
            free(stack)

    cdef int _store_dense(self, state_t s, const Pair* row, int64_t k) noexcept nogil:
        """State s's k allowed tokens (row) as a bitmask row; 0, or ERR_MEMORY."""
        cdef word_t* bits
        cdef int64_t i
        if grow(<void**>&self.dense, &self.dense_cap, self.num_dense + 1, self.n_words * sizeof(word_t)) < 0:
            return ERR_MEMORY
        bits = self.dense + <int64_t>self.num_dense * self.n_words
        memset(bits, 0, self.n_words * sizeof(word_t))
        for i in range(k):
            bits[row[i].token >> 5] |= (<word_t>1) << (row[i].token & 31)
        self.dense_of[s] = self.num_dense
        self.num_dense += 1
        return 0

    cdef int _store_sparse(self, state_t s, Pair* row, int64_t k) noexcept nogil:
        """State s's k (token, next state) pairs (row, sorted here) appended to pairs; 0, or ERR_MEMORY."""
        self.dense_of[s] = -1
        if grow(<void**>&self.pairs, &self.pairs_cap, self.num_pairs + k, sizeof(Pair)) < 0:
            return ERR_MEMORY
        if k:
            qsort(row, k, sizeof(Pair), _cmp_pairs)
            memcpy(self.pairs + self.num_pairs, row, k * sizeof(Pair))
        self.num_pairs += k
        return 0

    # -- queries -----------------------------------------------------------

    def memory_bytes(self):
        """Bytes of the index itself plus the DFA table it walks (not the shared vocabulary)."""
        cdef int64_t n = self.num_states
        return int(
            (n + 1) * sizeof(int64_t) + 2 * n * sizeof(int32_t)
            + self.num_pairs * sizeof(Pair)
            + <int64_t>self.num_dense * self.n_words * sizeof(word_t)
            + self._transitions.nbytes + self._classes.nbytes + self._accepting.nbytes
        )

    def count(self, state_t state):
        """Allowed text tokens in ``state``."""
        _check_state(state, self.num_states)
        return self.counts[state]

    def is_dense(self, state_t state):
        _check_state(state, self.num_states)
        return self.dense_of[state] >= 0

    def is_accepting(self, state_t state):
        _check_state(state, self.num_states)
        return self.accept[state] != 0

    def fill(self, state_t state, row):
        """Overwrite ``row`` (int32, ``n_words``, C-contiguous, writeable) with ``state``'s
        text tokens; returns their count."""
        _check_state(state, self.num_states)
        if not cnp.PyArray_Check(row):
            raise ValueError(f"row must be a numpy int32 array, got {type(row).__name__}")
        cdef cnp.ndarray arr = <cnp.ndarray>row
        if (cnp.PyArray_TYPE(arr) != cnp.NPY_INT32 or cnp.PyArray_NDIM(arr) != 1
                or cnp.PyArray_DIM(arr, 0) != self.n_words
                or not cnp.PyArray_ISCARRAY(arr)):
            raise ValueError(
                f"row must be a writeable C-contiguous int32 array of {self.n_words} words"
            )
        cdef word_t* out = <word_t*>cnp.PyArray_DATA(arr)
        with nogil:
            self._fill(state, out)
        return self.counts[state]

    cdef void _fill(self, state_t state, word_t* out) noexcept nogil:
        cdef int32_t d = self.dense_of[state]
        cdef int64_t i
        cdef token_t t
        if d >= 0:
            memcpy(out, self.dense + <int64_t>d * self.n_words, <int64_t>self.n_words * sizeof(word_t))
            return
        memset(out, 0, <int64_t>self.n_words * sizeof(word_t))
        for i in range(self.offsets[state], self.offsets[state + 1]):
            t = self.pairs[i].token
            out[t >> 5] |= (<word_t>1) << (t & 31)

    def next_state(self, state_t state, int64_t token):
        """The state after ``token`` in ``state``, or 0 (dead) when it is not allowed."""
        _check_state(state, self.num_states)
        if token < 0 or token >= self.vocab_size:
            return 0
        return self._next(state, <token_t>token)

    cdef state_t _next(self, state_t state, token_t token) noexcept nogil:
        cdef int32_t d = self.dense_of[state]
        cdef int64_t lo, hi, mid, i
        cdef state_t s
        if d >= 0:
            if not (self.dense[<int64_t>d * self.n_words + (token >> 5)] >> (token & 31)) & 1:
                return DEAD
            s = state
            for i in range(self.tok_off[token], self.tok_off[token + 1]):
                s = self.trans[<int64_t>s * self.n_classes + self.cls[self.blob[i]]]
            return s
        lo = self.offsets[state]
        hi = self.offsets[state + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.pairs[mid].token < token:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.offsets[state + 1] and self.pairs[lo].token == token:
            return self.pairs[lo].state
        return DEAD

    def row_tokens(self, state_t state):
        """The allowed text token ids of ``state``, sorted (for tests and inspection)."""
        _check_state(state, self.num_states)
        out = np.zeros(self.n_words, dtype=np.int32)
        self.fill(state, out)
        bits = np.unpackbits(out.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self.vocab_size]).astype(np.int32)


cdef inline int _check_state(state_t state, int32_t num_states) except -1:
    if state < 0 or state >= num_states:
        raise ValueError(f"state {state} is outside [0, {num_states})")
    return 0


# ---------------------------------------------------------------------------
# One sequence: a cursor over the index (the core of a toolkit.core.session.Session)
# ---------------------------------------------------------------------------

cdef class Cursor:
    """One sequence's DFA state over a :class:`TokenIndex`, with the states before each
    token consumed (its undo stack).  ``Cursor(index, start)``; the protocol's calls are
    its :data:`ops_capsule` entry points, run by a :class:`toolkit.core.session.Session`.

    Its work (:class:`toolkit.core.protocol.MaskStats`): every fill is the index's verdict
    on all ``vocab_size`` ids (``tokens_cached``); an accepted token of a dense row runs
    its bytes through the DFA (``lexer_steps``), one of a sparse row is a lookup.  The
    index build's trie walk is a compile figure (``TokenIndex.nodes_visited``)."""

    def __cinit__(self, TokenIndex index not None, state_t start):
        _check_state(start, index.num_states)
        self.index = index
        self.start = start
        self.state = start

    def __dealloc__(self):
        free(self.undo_stack.data)

    cdef int c_advance(self, token_t token) noexcept nogil:
        cdef state_t nxt = self.index._next(self.state, token)
        if nxt == DEAD:
            return 0
        if self.index.dense_of[self.state] >= 0:  # a dense row ran the token's bytes; a refused one none
            self.work.lexer_steps += self.index.tok_off[token + 1] - self.index.tok_off[token]
        if undo_reserve(&self.undo_stack, 1) < 0:
            return ERR_MEMORY
        self.undo_stack.data[self.undo_stack.n] = self.state
        self.undo_stack.n += 1
        self.state = nxt
        return 1

    cdef int c_advance_bytes(self, const uint8_t* data, int32_t n) noexcept nogil:
        """Raw bytes through the DFA (a probe of the session's forced bytes): 1, or 0 when
        the DFA dies on them (state unchanged); one undo record."""
        cdef const state_t* trans = self.index.trans
        cdef const uint8_t* cls = self.index.cls
        cdef int64_t k = self.index.n_classes
        cdef state_t s = self.state
        cdef int32_t i
        for i in range(n):
            s = trans[s * k + cls[data[i]]]
            if s == DEAD:
                return 0
        self.work.lexer_steps += n
        if undo_reserve(&self.undo_stack, 1) < 0:
            return ERR_MEMORY
        self.undo_stack.data[self.undo_stack.n] = self.state
        self.undo_stack.n += 1
        self.state = s
        return 1

    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil:
        """The ops' ``next_bytes``, exact: the bytes the DFA does not die on."""
        cdef const state_t* row = self.index.trans + <int64_t>self.state * self.index.n_classes
        cdef const uint8_t* cls = self.index.cls
        cdef int32_t b
        out[0] = out[1] = out[2] = out[3] = 0
        for b in range(BYTES):
            if row[cls[b]] != DEAD:
                out[b >> 6] |= (<uint64_t>1) << (b & 63)
        return 2

    cdef void c_undo(self) noexcept nogil:
        self.state = undo_pop(&self.undo_stack)

    cdef int c_fill(self, word_t* row, int64_t* count) noexcept nogil:
        self.index._fill(self.state, row)
        count[0] = self.index.counts[self.state]
        self.work.tokens_cached += self.index.vocab_size  # every verdict is the index's
        return 0

    def copy(self):
        """An independent cursor in the same state (undo stack included)."""
        cdef Cursor other = Cursor(self.index, self.start)
        other.state = self.state
        if undo_copy(&other.undo_stack, &self.undo_stack) < 0:
            raise MemoryError()
        return other

    def error_text(self, int32_t code, int64_t value):
        """The message of the one failure a cursor has (code ERR_MEMORY)."""
        return "MemoryError: outlines cursor: out of memory growing its undo stack"


cdef int _cur_advance(void* core, token_t token, const uint8_t* data, int32_t n) noexcept nogil:
    if token < 0:  # raw bytes (StrategyOps: the session's byte probes)
        return (<Cursor>core).c_advance_bytes(data, n)
    return (<Cursor>core).c_advance(token)


cdef void _cur_undo(void* core) noexcept nogil:
    (<Cursor>core).c_undo()


cdef int _cur_fill(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    return (<Cursor>core).c_fill(row, count)


cdef int _cur_accepting(void* core) noexcept nogil:
    return (<Cursor>core).index.accept[(<Cursor>core).state] != 0


cdef void _cur_take_error(void* core, int32_t* code, int64_t* value) noexcept nogil:
    code[0] = ERR_MEMORY  # its undo stack could not grow: the only way a cursor fails
    value[0] = 0


cdef void _cur_work(void* core, WorkCounters* out) noexcept nogil:
    add_work(out, &(<Cursor>core).work)


cdef int _cur_next_bytes(void* core, uint64_t* out) noexcept nogil:
    return (<Cursor>core).c_next_bytes(out)


cdef StrategyOps _OPS = StrategyOps(_cur_advance, _cur_undo, _cur_fill, _cur_accepting, _cur_take_error, _cur_work,
                                    _cur_next_bytes)


def ops_capsule():
    """The cursor's C entry points for :class:`toolkit.core.session.Session`."""
    return ops_capsule_of(&_OPS)
