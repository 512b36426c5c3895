"""The llguidance-style core: a lazy lexer, an Earley parser over lexemes, the trie walk.

A public module: ``strategies.glr`` builds on it (its tables extend :class:`ParserTables`,
its parser :class:`EarleyParser` with rows made by an LR parser).

Moskal et al., "Making Structured Outputs Go Brrr" (2025).  Three pieces, all C data
walked without the GIL:

**Lexer.**  Every terminal of the grammar is a *lexeme* with its own minimal byte
DFA; lexeme ``l``'s states are numbered globally as ``lex_off[l] + s``.  A lexer state
is the set of still-live (lexeme, DFA state) pairs, kept as a sorted list of global
states and *hash-consed* (equal sets get one id).  Its byte transitions are a table
``ls_trans[state * 256 + byte]`` filled lazily: an entry is computed (and the new set
interned) the first time it is needed, so a walk is almost always one table lookup
per trie node.  The lexer state at a lexeme start holds the lexemes the parser allows
there, plus the ``%ignore`` lexeme ("skip") when the parser allows any lexeme.

Lexing is greedy, as in llguidance: a byte that extends some live lexeme always
extends it.  A lexeme ends only when the next byte cannot extend any live lexeme and
the current set accepts: the accepting lexemes go to the parser (a skip lexeme does
not), and the byte starts the next lexeme in the lexer state the parser allows.

**Parser.**  Earley over lexemes, with Aycock & Horspool's nullable fix: a *row*
(Earley set) per lexeme, items ``(dotted rule, origin row)`` in one growing array;
rows are pushed when a lexeme ends and popped by truncation, so the trie walk's
``try_push_byte`` / ``pop_bytes`` are cheap and a fork is a copy of two arrays.
Each row records the lexer state its allowed lexemes start from and whether the
grammar accepts there.

**Trie walk.**  The flat DFS token trie of :mod:`toolkit.core.trie` is scanned once; a
node's byte goes through the lexer table, the parser is consulted only when that
byte ends a lexeme, and a rejected node skips its subtree.

**Slicer.**  When the lexer state is a single (lexeme, state) pair, a token slice
(a set of tokens given by a regex, with its own trie) whose regex language stays
alive in that lexeme state is allowed wholesale: every byte of every slice token
extends the lexeme, so no byte can end it and the parser has nothing to say.  That
containment is decided on the DFAs (a walk of the product automaton) and cached
per (lexeme state, slice).

Limits (lexer states, Earley items per row, steps per mask) are checked in C; a hit
sets an error code of :mod:`toolkit.core.cutil` that the Python wrapper raises as
:class:`~toolkit.core.errors.LimitExceeded` (:func:`toolkit.core.errors.error_of`).

**Work** (:class:`toolkit.core.protocol.MaskStats`, each parser's ``work``): trie nodes
the walks visited; lexer steps, one per byte read (a trie node walked, a byte of an
accepted token) plus one when a byte that ended a lexeme starts the next; Earley items
added to rows; tokens sliced, those of the slices a fill ORed in whole; tokens cached,
the text tokens of a fill that was the mask cache's copy.  No token is checked alone.
The shared tables' lazy work (new lexer states, slicer searches) is not counted.

One :class:`ParserTables` is shared by every :class:`EarleyParser` of a compiled
grammar (the lazy tables are a cache), so matchers of one grammar must not run
concurrently.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset

import numpy as np

cimport numpy as cnp

from toolkit.core.cutil cimport (
    BYTES, ERR_MAX_LEXER_STATES, ERR_MAX_ROW_ITEMS, ERR_MAX_STEPS, ERR_MEMORY, ERR_NONE, ERR_SHAPE, I64Map,
    WorkCounters, arena_at, arena_bytes, arena_free, arena_init, arena_take, grow, hash_ints, i64map_bytes,
    i64map_clear, i64map_free, i64map_get, i64map_init, i64map_intern, i64map_put, or_words, pair_key, resize,
)
from toolkit.core.intsets cimport intsets_add, intsets_find, intsets_free, intsets_init
from toolkit.core.session cimport StrategyOps, add_work, ops_capsule_of, undo_copy, undo_pop, undo_reserve
from toolkit.core.ids cimport DEAD, MISSING, state_t, symbol_t, token_t, word_t
from toolkit.core.trie cimport TokenTrie, TrieNode

from toolkit.core.classform import check_class_form
from toolkit.core.errors import error_of as _error_of

cnp.import_array()

__all__ = ["ParserTables", "EarleyParser", "SliceSet", "full_matches", "ops_capsule"]

# The sentinels, marks, Item and the classes' fields are declared in _parser.pxd.

_WHERE = "llguidance parser"  # the prefix of the errors' messages


# ---------------------------------------------------------------------------
# Token slices
# ---------------------------------------------------------------------------

cdef class SliceSet:
    """Token slices over one vocabulary: per slice its regex DFA, token trie and bitmask,
    plus a trie of the tokens in no slice (``tries[n]``).

    ``SliceSet(dfas, tries, masks)``: ``dfas`` as ``(transitions int32[n, 256], start)``
    per slice, ``tries`` the slices' :class:`~toolkit.core.trie.TokenTrie` and then the
    rest's, ``masks`` each slice's tokens as uint32 words.
    """

    def __init__(self, dfas, tries, masks, inclusion=None):
        cdef int32_t k
        cdef cnp.ndarray a, m
        self.n = len(dfas)
        if len(tries) != self.n + 1 or len(masks) != self.n:
            raise ValueError("need one trie per slice plus the rest's, and one mask per slice")
        if self.n > 31:
            raise ValueError(f"at most 31 slices, got {self.n}")
        inc = np.zeros((self.n, self.n), dtype=np.uint8) if inclusion is None else np.asarray(inclusion, dtype=np.uint8)
        if inc.shape != (self.n, self.n):
            raise ValueError(f"inclusion must be {self.n}x{self.n}, got {inc.shape}")
        # supersets first: order by how many slices each one holds, most first
        held = inc.sum(axis=0)
        order = sorted(range(self.n), key=lambda k: (-int(held[k]), k))
        self.order = <int32_t*>malloc(max(1, self.n) * sizeof(int32_t))
        self.incl = <uint8_t*>malloc(max(1, self.n * self.n))
        if self.order == NULL or self.incl == NULL:
            raise MemoryError()
        for k in range(self.n):
            self.order[k] = order[k]
            for j in range(self.n):
                self.incl[k * self.n + j] = inc[k, j]
        self.tries = list(tries)
        self._keep = []
        self.t_nodes = <const TrieNode**>malloc((self.n + 1) * sizeof(TrieNode*))
        self.t_num = <int32_t*>malloc((self.n + 1) * sizeof(int32_t))
        self.t_ids = <const token_t**>malloc((self.n + 1) * sizeof(token_t*))
        if self.t_nodes == NULL or self.t_num == NULL or self.t_ids == NULL:
            raise MemoryError()
        cdef TokenTrie tt
        self.max_depth = 0
        for k in range(self.n + 1):
            tt = self.tries[k]
            self.t_nodes[k] = tt.nodes
            self.t_num[k] = tt.num_nodes
            self.t_ids[k] = tt.token_ids
            self.max_depth = max(self.max_depth, tt.max_depth)
        self.trans = <const state_t**>malloc(max(1, self.n) * sizeof(state_t*))
        self.n_states = <int32_t*>malloc(max(1, self.n) * sizeof(int32_t))
        self.starts = <state_t*>malloc(max(1, self.n) * sizeof(state_t))
        self.masks = <const word_t**>malloc(max(1, self.n) * sizeof(word_t*))
        self.n_tokens = <int64_t*>malloc(max(1, self.n) * sizeof(int64_t))
        if (self.trans == NULL or self.n_states == NULL or self.starts == NULL or self.masks == NULL
                or self.n_tokens == NULL):
            raise MemoryError()
        self.n_words = 0
        for k in range(self.n):
            trans, start = dfas[k]
            a = np.ascontiguousarray(trans, dtype=np.int32)
            m = np.ascontiguousarray(masks[k], dtype=np.uint32)
            self._keep.extend((a, m))
            self.trans[k] = <const state_t*>cnp.PyArray_DATA(a)
            self.n_states[k] = a.shape[0]
            self.starts[k] = start
            self.masks[k] = <const word_t*>cnp.PyArray_DATA(m)
            self.n_tokens[k] = int(np.unpackbits(m.view(np.uint8)).sum())
            self.n_words = m.shape[0]

    def __dealloc__(self):
        free(<void*>self.t_nodes)
        free(self.t_num)
        free(<void*>self.t_ids)
        free(<void*>self.trans)
        free(self.n_states)
        free(self.starts)
        free(<void*>self.masks)
        free(self.n_tokens)
        free(self.order)
        free(self.incl)



# ---------------------------------------------------------------------------
# Tables shared by the parsers of one compiled grammar
# ---------------------------------------------------------------------------

cdef class ParserTables:
    """The grammar as C arrays, the lexemes' DFAs and the lazy lexer-state cache.

    Built by :mod:`strategies.llguidance.engine` from a :class:`~toolkit.grammar.Grammar`:

    * ``dr_sym[d]``: the symbol after the dot of dotted rule ``d`` (-1 at the end of
      the production), ``dr_lhs[d]`` its production's left-hand side; symbols
      ``0 .. n_nt-1`` are nonterminals, ``n_nt + l`` is lexeme ``l``;
    * ``nt_off`` / ``nt_drs``: CSR list of the dot-0 dotted rules of each nonterminal;
    * ``nullable[sym]``; ``start_sym``: the augmented start nonterminal;
    * ``lexemes``: per lexeme ``(table int32[n, k], classes uint8[256], accepting bool[n],
      start)``, the DFA over byte classes (byte ``b`` moves state ``s`` to
      ``table[s, classes[b]]``, as :meth:`toolkit.automata.regex.ByteDFA.byte_classes` gives it),
      each DFA's dead state 0, none accepting the empty string; ``skip`` is the index
      of the %ignore lexeme (the last one) or -1;
    * limits: ``max_lexer_states``, ``max_row_items``, ``max_steps``.
    """

    def __init__(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable, int32_t n_nt,
                 symbol_t start_sym, lexemes, int32_t skip, *, int64_t max_lexer_states,
                 int64_t max_row_items, int64_t max_steps, int32_t n_slices=0):
        self.n_nt = n_nt
        self.start_sym = start_sym
        self.skip = skip
        self.n_lex = len(lexemes)
        self.n_slices = n_slices
        self.max_lexer_states = max_lexer_states
        self.max_row_items = max_row_items
        self.max_steps = max_steps
        self._init_grammar(dr_sym, dr_lhs, nt_off, nt_drs, nullable)
        self._init_lexemes(lexemes)
        self._init_global_states(lexemes)
        self._init_caches()

    cdef void _init_grammar(self, dr_sym, dr_lhs, nt_off, nt_drs, nullable) except *:
        """The grammar's arrays, copied into C."""
        self.dr_sym = self._copy_i32(dr_sym)
        self.dr_lhs = self._copy_i32(dr_lhs)
        self.nt_off = self._copy_i32(nt_off)
        self.nt_drs = self._copy_i32(nt_drs)
        self.n_dr = len(dr_sym)
        nb = np.ascontiguousarray(nullable, dtype=np.uint8)
        self.nullable = <uint8_t*>malloc(max(1, nb.shape[0]))
        if self.nullable == NULL:
            raise MemoryError()
        if nb.shape[0]:
            memcpy(self.nullable, cnp.PyArray_DATA(nb), nb.shape[0])

    cdef void _init_lexemes(self, lexemes) except *:
        """Each lexeme's DFA (kept as the numpy arrays it came in) and its global states' numbering."""
        cdef int32_t l
        self._keep = []
        self.lex_off = <int32_t*>malloc((self.n_lex + 1) * sizeof(int32_t))
        self.lex_start = <state_t*>malloc(max(1, self.n_lex) * sizeof(state_t))
        self.lex_trans = <const state_t**>malloc(max(1, self.n_lex) * sizeof(state_t*))
        self.lex_cls = <const uint8_t**>malloc(max(1, self.n_lex) * sizeof(uint8_t*))
        self.lex_k = <int32_t*>malloc(max(1, self.n_lex) * sizeof(int32_t))
        if self.lex_off == NULL or self.lex_start == NULL or self.lex_trans == NULL or self.lex_cls == NULL \
                or self.lex_k == NULL:
            raise MemoryError()
        total = 0
        classes_of = []
        for l in range(self.n_lex):
            table, classes, acc, start = lexemes[l]
            a, c = check_class_form(table, classes, what=f"lexeme {l}")
            if not 0 <= start < a.shape[0]:
                raise ValueError(f"lexeme {l}: start {start} outside [0, {a.shape[0]})")
            self._keep.append(a)
            classes_of.append(c)
            self.lex_trans[l] = <const state_t*>cnp.PyArray_DATA(a)
            self.lex_cls[l] = <const uint8_t*>cnp.PyArray_DATA(c)
            self.lex_k[l] = a.shape[1]
            self.lex_off[l] = total
            self.lex_start[l] = start
            total += a.shape[0]
        self._keep.extend(classes_of)  # after the tables: _keep[l] is lexeme l's table
        self.lex_off[self.n_lex] = total
        self.n_global = total

    cdef void _init_global_states(self, lexemes) except *:
        """Per global state: its lexeme, whether it accepts and whether it can extend
        (a lexeme's dead state, DEAD, does neither)."""
        cdef int32_t l, n, k, col, lo
        cdef state_t s, g
        cdef const state_t* tr
        cdef const uint8_t* ac
        cdef cnp.ndarray a
        cdef int64_t total = self.n_global
        self.g_lex = <int32_t*>malloc(max(1, total) * sizeof(int32_t))
        self.g_acc = <uint8_t*>calloc(max(1, total), 1)
        self.g_ext = <uint8_t*>calloc(max(1, total), 1)
        if self.g_lex == NULL or self.g_acc == NULL or self.g_ext == NULL:
            raise MemoryError()
        for l in range(self.n_lex):
            acc = lexemes[l][2]
            if not (cnp.PyArray_Check(acc) and cnp.PyArray_ITEMSIZE(<cnp.ndarray>acc) == 1
                    and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>acc)):
                acc = np.ascontiguousarray(acc, dtype=np.uint8)
            a = <cnp.ndarray>acc
            n = self.lex_off[l + 1] - self.lex_off[l]
            if cnp.PyArray_SIZE(a) != n:
                raise ValueError(f"lexeme {l}: {cnp.PyArray_SIZE(a)} accepting flags for {n} states")
            tr, ac, k, lo = self.lex_trans[l], <const uint8_t*>cnp.PyArray_DATA(a), self.lex_k[l], self.lex_off[l]
            with nogil:
                for s in range(n):
                    g = lo + s
                    self.g_lex[g] = l
                    if s == DEAD:
                        continue
                    self.g_acc[g] = ac[s] != 0
                    for col in range(k):
                        if tr[<int64_t>s * k + col] != DEAD:
                            self.g_ext[g] = 1
                            break
        self.first_any[0] = self.first_any[1] = self.first_any[2] = self.first_any[3] = 0
        for l in range(self.n_lex):
            g = self.lex_off[l] + self.lex_start[l]
            if self.lex_start[l] != DEAD:
                self.live_bytes_of(g, self.first_any)

    cdef void live_bytes_of(self, state_t g, uint64_t* out) noexcept nogil:
        """OR into ``out`` the bytes on which global state ``g`` does not die."""
        cdef int32_t l = self.g_lex[g], b
        cdef const state_t* row = self.lex_trans[l] + <int64_t>(g - self.lex_off[l]) * self.lex_k[l]
        cdef const uint8_t* cls = self.lex_cls[l]
        for b in range(BYTES):
            if row[cls[b]] != DEAD:
                out[b >> 6] |= (<uint64_t>1) << (b & 63)

    cdef void _init_caches(self) except *:
        """The lazy lexer-state tables (empty), the scratch and the slicer's caches."""
        cdef int64_t n_pairs = <int64_t>self.n_lex * max(1, self.n_slices)
        self.acc_pool_cap = 64
        self.acc_pool = <int32_t*>malloc(self.acc_pool_cap * sizeof(int32_t))
        self.buf = <state_t*>malloc((self.n_lex + 1) * sizeof(state_t))
        self.allowed = <int32_t*>malloc((self.n_lex + 1) * sizeof(int32_t))
        self.nt_stamp = <int32_t*>calloc(max(1, self.n_nt), sizeof(int32_t))
        self.allow_stamp = <int32_t*>calloc(max(1, self.n_lex), sizeof(int32_t))
        self.scan_stamp = <int32_t*>calloc(max(1, self.n_lex), sizeof(int32_t))
        self.slice_ok = <int8_t*>calloc(max(1, <int64_t>self.n_global * max(1, self.n_slices)), 1)
        self.memo = <uint8_t**>calloc(max(1, n_pairs), sizeof(uint8_t*))
        self.sp_full = <uint8_t*>calloc(max(1, n_pairs), 1)
        arena_init(&self.wc_masks, sizeof(word_t), 1 << 16)
        self.wc_n = 1  # entry 0 marks a lexer state whose walk is too small to keep
        if (intsets_init(&self.sets) < 0 or i64map_init(&self.row_items, 1024) < 0
                or i64map_init(&self.sparse, SPARSE_CAP) < 0 or i64map_init(&self.wc_map, 16) < 0
                or self.acc_pool == NULL or self.buf == NULL or self.allowed == NULL
                or self.nt_stamp == NULL or self.allow_stamp == NULL or self.scan_stamp == NULL
                or self.slice_ok == NULL or self.memo == NULL or self.sp_full == NULL):
            raise MemoryError()

    cdef int32_t* _copy_i32(self, arr) except NULL:
        a = np.ascontiguousarray(arr, dtype=np.int32)
        cdef int32_t* p = <int32_t*>malloc(max(1, a.shape[0]) * sizeof(int32_t))
        if p == NULL:
            raise MemoryError()
        if a.shape[0]:
            memcpy(p, cnp.PyArray_DATA(a), a.shape[0] * sizeof(int32_t))
        return p

    def __dealloc__(self):
        cdef int64_t i
        free(self.dr_sym); free(self.dr_lhs); free(self.nt_off); free(self.nt_drs)
        free(self.nullable); free(self.lex_off); free(self.lex_start); free(<void*>self.lex_trans)
        free(<void*>self.lex_cls); free(self.lex_k)
        free(self.g_lex); free(self.g_acc); free(self.g_ext)
        free(self.ls_trans)
        free(self.ls_acc_off); free(self.ls_acc_len); free(self.ls_flags); free(self.ls_single)
        free(self.ls_sl)
        intsets_free(&self.sets); free(self.acc_pool); free(self.buf); free(self.allowed)
        free(self.nt_stamp); free(self.allow_stamp); free(self.scan_stamp)
        i64map_free(&self.row_items); free(self.slice_ok)
        if self.memo != NULL:
            for i in range(<int64_t>self.n_lex * max(1, self.n_slices)):
                free(self.memo[i])
        free(self.memo); free(self.dfs_pair); free(self.dfs_seen); free(self.dfs_byte)
        i64map_free(&self.sparse); free(self.sp_full)
        i64map_free(&self.wc_map); arena_free(&self.wc_masks)
        free(self.wc_mask_off); free(self.wc_bnd_off); free(self.wc_bnd_len); free(self.wc_sliced)
        free(self.wc_used); free(self.wc_count); free(self.wc_bnd); free(self.wc_scratch)

    # ------------------------------------------------------ lexer states --

    cdef int _fail(self, int code, int64_t value) noexcept nogil:
        """Note error ``code`` (an ErrCode; the first one pending wins): -1."""
        if self.err == ERR_NONE:
            self.err = code
            self.err_value = value
        return -1

    cdef inline int _spend(self, int64_t n) noexcept nogil:
        self.steps += n
        if self.steps > self.max_steps:
            return self._fail(ERR_MAX_STEPS, self.steps)
        return 0

    cdef state_t intern(self, const state_t* gs, int32_t n) noexcept nogil:
        """The id of the lexer state holding global states gs[0..n) (sorted); LS_ERROR on a limit."""
        cdef uint64_t hv = hash_ints(gs, n)
        cdef state_t id_ = intsets_find(&self.sets, gs, n, hv), g
        cdef int32_t i, l, n_acc = 0
        cdef uint8_t flags = 0
        if id_ >= 0:
            return id_
        if self.n_ls >= self.max_lexer_states:
            self._fail(ERR_MAX_LEXER_STATES, self.n_ls + 1)
            return LS_ERROR
        if self._spend(n + 1) < 0:
            return LS_ERROR
        id_ = self.n_ls
        if self._grow_ls(id_ + 1) < 0:
            self._fail(ERR_MEMORY, id_ + 1)
            return LS_ERROR
        if grow(<void**>&self.acc_pool, &self.acc_pool_cap, self.acc_pool_len + n, sizeof(int32_t)) < 0:
            self._fail(ERR_MEMORY, self.acc_pool_len + n)
            return LS_ERROR
        if intsets_add(&self.sets, gs, n, hv) < 0:
            self._fail(ERR_MEMORY, self.sets.pool_len + n)
            return LS_ERROR
        # its accepting (non-skip) lexemes
        self.ls_acc_off[id_] = <int32_t>self.acc_pool_len
        for i in range(n):
            g = gs[i]
            if self.g_ext[g]:
                flags |= F_EXTEND
            if self.g_acc[g]:
                l = self.g_lex[g]
                if l == self.skip:
                    flags |= F_SKIP_ACC
                else:
                    self.acc_pool[self.acc_pool_len] = l
                    self.acc_pool_len += 1
                    n_acc += 1
        self.ls_acc_len[id_] = n_acc
        self.ls_flags[id_] = flags
        self.ls_single[id_] = gs[0] if n == 1 else -1
        self.ls_sl[id_] = 0
        for i in range(BYTES):
            self.ls_trans[<int64_t>id_ * BYTES + i] = MISSING
        self.n_ls += 1
        return id_

    cdef int _grow_ls(self, int64_t need) noexcept nogil:
        """Room for ``need`` lexer states in the per-state arrays: 0, or ERR_MEMORY.  The
        transition table grows (doubling) first; the others follow it to its capacity."""
        cdef int64_t cap = self.cap_ls
        if need <= cap:
            return 0
        if (grow(<void**>&self.ls_trans, &cap, need, BYTES * sizeof(state_t)) < 0
                or resize(<void**>&self.ls_acc_off, cap, sizeof(int32_t)) < 0
                or resize(<void**>&self.ls_acc_len, cap, sizeof(int32_t)) < 0
                or resize(<void**>&self.ls_single, cap, sizeof(state_t)) < 0
                or resize(<void**>&self.ls_flags, cap, sizeof(uint8_t)) < 0
                or resize(<void**>&self.ls_sl, cap, sizeof(uint32_t)) < 0):
            return ERR_MEMORY  # cap_ls stays: the next call resizes them all again
        self.cap_ls = cap
        return 0

    cdef state_t step(self, state_t x, uint8_t b) noexcept nogil:
        """The lexer state after byte b in state x: an id, LS_END or LS_ERROR."""
        cdef state_t y = self.ls_trans[<int64_t>x * BYTES + b]
        if y != MISSING:
            return y
        cdef int32_t i, l, m = 0, n = self.sets.len[x]
        cdef state_t g, s2
        cdef const state_t* members = self.sets.pool + self.sets.off[x]
        for i in range(n):
            g = members[i]
            l = self.g_lex[g]
            s2 = self.lex_trans[l][<int64_t>(g - self.lex_off[l]) * self.lex_k[l] + self.lex_cls[l][b]]
            if s2 != DEAD:
                self.buf[m] = self.lex_off[l] + s2
                m += 1
        if m == 0:
            y = LS_END
        else:
            y = self.intern(self.buf, m)
            if y == LS_ERROR:
                return y
        self.ls_trans[<int64_t>x * BYTES + b] = y
        return y

    cdef void live_bytes(self, state_t x, uint64_t* out) noexcept nogil:
        """OR into ``out`` the bytes after which lexer state x keeps a live pair (the
        bytes that extend the lexeme)."""
        cdef int32_t i, n = self.sets.len[x]
        cdef const state_t* members = self.sets.pool + self.sets.off[x]
        for i in range(n):
            self.live_bytes_of(members[i], out)

    cdef state_t start_state(self, const int32_t* lexemes, int32_t n) noexcept nogil:
        """The lexer state at the start of one of lexemes[0..n) (sorted), skip added when n > 0."""
        cdef int32_t i, l
        for i in range(n):
            l = lexemes[i]
            self.buf[i] = self.lex_off[l] + self.lex_start[l]
        if n > 0 and self.skip >= 0:
            self.buf[n] = self.lex_off[self.skip] + self.lex_start[self.skip]
            n += 1
        return self.intern(self.buf, n)

    cdef state_t allowed_start(self, int32_t n) noexcept nogil:
        """``start_state`` of the ``n`` lexemes a row put in ``allowed`` (sorted here)."""
        cdef int32_t m, l, tmp
        for m in range(1, n):  # insertion sort (few)
            tmp = self.allowed[m]
            l = m - 1
            while l >= 0 and self.allowed[l] > tmp:
                self.allowed[l + 1] = self.allowed[l]
                l -= 1
            self.allowed[l + 1] = tmp
        return self.start_state(self.allowed, n)

    # ------------------------------------------------------------ slicer --

    cdef int contained(self, state_t g, int32_t k, const state_t* strans, int32_t sn,
                       state_t sstart) noexcept nogil:
        """1 when every string of slice k's language keeps global state g alive, else 0; -1 on error.

        Decided on the product of the slice's DFA and g's lexeme DFA: the slice is
        contained in the prefixes of g's language unless some product pair reachable
        from (slice start, g) takes a byte the slice allows and the lexeme does not.
        The slice DFA is minimal (every live state reaches acceptance), so any such
        byte is on a slice string.  A depth-first search finds such a pair.  It keeps
        its pairs in a small table (an I64Map that never grows): most searches end
        within a few pairs (a lexeme refusing some byte the slice allows, near its
        start; a short bounded string).  One that outgrows it, and every later search of
        that (lexeme, slice), uses a memo of verdicts per (lexeme, slice) over all pairs
        (a pair on the path to a dead end is bad; every pair of a search that found none
        is good), which later searches share, so the checks at successive positions of
        one long lexeme cost little more than the first.
        """
        cdef int64_t idx = <int64_t>g * self.n_slices + k
        cdef int8_t c = self.slice_ok[idx]
        if c:
            return 1 if c == 1 else 0
        cdef int32_t l = self.g_lex[g]
        cdef int64_t ln = self.lex_off[l + 1] - self.lex_off[l]
        cdef int64_t npairs = <int64_t>sn * ln
        cdef int64_t mi = <int64_t>l * self.n_slices + k
        cdef uint8_t* memo = self.memo[mi]
        cdef int64_t root = <int64_t>sstart * ln + (g - self.lex_off[l])
        cdef int result
        if npairs > MAX_MEMO_PAIRS:
            # A product too large to memoize (a lexeme with millions of DFA states):
            # the slice is walked like the rest, which gives the same mask.
            self.slice_ok[idx] = 2
            return 0
        result = -3 if self.sp_full[mi] else self._search(l, root, ln, strans, NULL)
        if result == -3:  # the small table filled up (now or before): the memo
            self.sp_full[mi] = 1
            if memo == NULL:
                memo = <uint8_t*>calloc(npairs, 1)
                if memo == NULL:
                    return self._fail(ERR_MEMORY, npairs)
                self.memo[mi] = memo
                self.memo_bytes += npairs
        if memo != NULL:
            if memo[root] == P_GOOD or memo[root] == P_BAD:
                result = 1 if memo[root] == P_GOOD else 0
            else:
                result = self._search(l, root, ln, strans, memo)
        if result < 0:
            return result
        self.slice_ok[idx] = 1 if result else 2
        return result

    cdef inline uint8_t _mark(self, uint8_t* memo, int64_t pr) noexcept nogil:
        """Pair pr's P_* mark, in the memo or (memo NULL) the small table."""
        cdef int32_t v
        if memo != NULL:
            return memo[pr]
        v = i64map_get(&self.sparse, pr)
        return P_UNKNOWN if v < 0 else <uint8_t>v

    cdef inline int _set_mark(self, uint8_t* memo, int64_t pr, uint8_t v) noexcept nogil:
        """Mark pair pr; -3 when the small table (memo NULL) is half full, so the search
        gives up rather than let it grow."""
        if memo != NULL:
            memo[pr] = v
            return 0
        if 2 * (self.sparse.n + 1) > self.sparse.cap and i64map_get(&self.sparse, pr) < 0:
            return -3
        return i64map_put(&self.sparse, pr, v)  # at most half full after it: no growth

    cdef int _search(self, int32_t l, int64_t root, int64_t ln, const state_t* strans,
                     uint8_t* memo) noexcept nogil:
        """``contained``'s search from pair ``root`` of lexeme l: 1, 0, -1 on error, or
        -3 when ``memo`` is NULL (the small table) and the table filled up."""
        cdef const state_t* ltrans = self.lex_trans[l]
        cdef const uint8_t* lcls = self.lex_cls[l]
        cdef int64_t lk = self.lex_k[l]
        cdef int64_t pr, pr2 = 0, n_stack = 0, n_seen = 0
        cdef state_t q, r, q2, r2
        cdef int32_t b
        cdef int result = 1
        cdef uint8_t st
        if memo == NULL:
            i64map_clear(&self.sparse)
        if self._dfs_reserve(1) < 0:
            return -1
        if self._set_mark(memo, root, P_OPEN) < 0:
            return -3
        self.dfs_pair[0] = root
        self.dfs_byte[0] = 0
        self.dfs_seen[0] = root
        n_stack = 1
        n_seen = 1
        while n_stack > 0:
            pr = self.dfs_pair[n_stack - 1]
            q = <state_t>(pr // ln)
            r = <state_t>(pr % ln)
            b = self.dfs_byte[n_stack - 1]
            while b < BYTES:
                q2 = strans[<int64_t>q * BYTES + b]
                if q2 != DEAD:
                    r2 = ltrans[r * lk + lcls[b]]
                    if r2 == DEAD:
                        result = 0
                        break
                    pr2 = <int64_t>q2 * ln + r2
                    st = self._mark(memo, pr2)
                    if st == P_BAD:
                        result = 0
                        break
                    if st == P_UNKNOWN:
                        break
                b += 1
            if not result:
                break
            if b == BYTES:
                self._set_mark(memo, pr, P_DONE)  # pr is in the table: cannot fail
                n_stack -= 1
                continue
            self.dfs_byte[n_stack - 1] = b + 1
            if self._dfs_reserve(n_seen + 1) < 0:
                return -1
            if self._set_mark(memo, pr2, P_OPEN) < 0:
                return -3
            self.dfs_pair[n_stack] = pr2
            self.dfs_byte[n_stack] = 0
            n_stack += 1
            self.dfs_seen[n_seen] = pr2
            n_seen += 1
        if memo != NULL:
            self._memo_record(memo, result, n_seen, n_stack)
        return result

    cdef void _memo_record(self, uint8_t* memo, int result, int64_t n_seen, int64_t n_stack) noexcept nogil:
        """A search's verdicts into the memo: every pair it saw is good when it found no
        dead end; else the pairs on the path to it (the stack) are bad, and the others
        it saw go back to unknown (the search stopped early: their marks of it, open or
        done, are no verdicts)."""
        cdef int64_t i
        if result:
            for i in range(n_seen):
                memo[self.dfs_seen[i]] = P_GOOD
            return
        for i in range(n_seen):
            if memo[self.dfs_seen[i]] != P_BAD:
                memo[self.dfs_seen[i]] = P_UNKNOWN
        for i in range(n_stack):
            memo[self.dfs_pair[i]] = P_BAD

    cdef int _dfs_reserve(self, int64_t need) noexcept nogil:
        """Room for ``need`` pairs on the search's stack: 0, or -1 (ERR_MEMORY noted).
        The pair stack grows (doubling) first; the other two follow it."""
        cdef int64_t cap = self.dfs_cap
        if need <= cap:
            return 0
        if (grow(<void**>&self.dfs_pair, &cap, need, sizeof(int64_t)) < 0
                or resize(<void**>&self.dfs_seen, cap, sizeof(int64_t)) < 0
                or resize(<void**>&self.dfs_byte, cap, sizeof(int32_t)) < 0):
            return self._fail(ERR_MEMORY, need)
        self.dfs_cap = cap
        return 0

    cdef int64_t slice_bits(self, state_t x, SliceSet sl) noexcept nogil:
        """Bit k set when slice k is contained in some pair of lexer state x; -1 on error.

        Slices are tried supersets first: a slice inside a contained one is contained,
        one holding a refused one is refused, without a search.  Cached per state.
        """
        cdef uint32_t bits = self.ls_sl[x], decided = 0
        cdef int32_t idx, k, j, i, n = self.sets.len[x]
        cdef int64_t off = self.sets.off[x]
        cdef int c
        if bits & SL_KNOWN:
            return bits & ~SL_KNOWN
        bits = 0
        for idx in range(sl.n):
            k = sl.order[idx]
            c = -2
            for j in range(sl.n):
                if (decided >> j) & 1:
                    if ((bits >> j) & 1) and sl.incl[k * sl.n + j]:
                        c = 1
                        break
                    if not ((bits >> j) & 1) and sl.incl[j * sl.n + k]:
                        c = 0
                        break
            if c == -2:
                c = 0
                for i in range(n):
                    c = self.contained(self.sets.pool[off + i], k, sl.trans[k], sl.n_states[k], sl.starts[k])
                    if c != 0:
                        break
                if c < 0:
                    return -1
            decided |= (<uint32_t>1) << k
            if c == 1:
                bits |= (<uint32_t>1) << k
        self.ls_sl[x] = bits | SL_KNOWN
        return bits

    cdef inline void note_steps(self) noexcept nogil:
        if self.steps > self.peak_steps:
            self.peak_steps = self.steps

    # ----------------------------------------------------- python access --

    def raise_error(self):
        """Raise the pending limit error (and clear it)."""
        code, value = self.err, self.err_value
        self.err = ERR_NONE
        e = self.error_of(code, value)
        if e is not None:
            raise e

    def error_of(self, int code, int64_t value):
        """The exception of error ``code`` (an ErrCode of toolkit.core.cutil) with its
        ``value``, None for ERR_NONE: :func:`toolkit.core.errors.error_of` with the
        configured maximum of a limit code."""
        limit = {ERR_MAX_LEXER_STATES: self.max_lexer_states, ERR_MAX_ROW_ITEMS: self.max_row_items,
                 ERR_MAX_STEPS: self.max_steps}.get(code)
        return _error_of(code, value, limit, _WHERE)

    def lexer_state(self, int32_t x):
        """``(global states, accepting lexemes, skip accepts, can extend)`` of lexer state x."""
        if x < 0 or x >= self.n_ls:
            raise IndexError(f"lexer state {x} out of range [0, {self.n_ls})")
        gs = [self.sets.pool[self.sets.off[x] + i] for i in range(self.sets.len[x])]
        acc = [self.acc_pool[self.ls_acc_off[x] + i] for i in range(self.ls_acc_len[x])]
        return gs, acc, bool(self.ls_flags[x] & F_SKIP_ACC), bool(self.ls_flags[x] & F_EXTEND)

    def set_state_cache(self, int64_t max_bytes, int64_t min_nodes=WC_MIN_NODES):
        """Keep, per lexer state, what the first fill there learns that no parser state
        changes, up to ``max_bytes`` of masks (0: off; already kept entries stay).

        A walk from lexer state ``x`` reads each trie node's byte through the lexer:
        the byte extends the lexeme (the parser has nothing to say), is refused (a dead
        lexer and no lexeme accepting), or ends the lexeme, where the parser decides
        the node and its subtree.  The first two depend on ``x`` alone, and so does
        which slices are ORed in whole.  An entry holds them: the mask of the tokens
        whose bytes all extend the lexeme, with the slices', and the *boundaries*, the
        nodes whose byte ends it with the lexer state before that byte.  A later fill in
        ``x``, by any parser of these tables, ORs the mask and walks only the
        boundaries' subtrees, each from its own lexer state and the parser's rows, as
        the whole walk would have reached them (no row is pushed above a boundary): the
        same mask, and inside a JSON string a few hundred nodes walked instead of
        thousands.  A state whose walk keeps fewer than ``min_nodes`` nodes off is not
        kept (its mask costs more memory than the walk it saves).  The entries are of the first walk set (trie and slices) a parser of
        these tables is given; a parser with another one walks as without."""
        if max_bytes < 0:
            raise ValueError(f"state_cache_bytes must be >= 0, got {max_bytes}")
        if min_nodes < 0:
            raise ValueError(f"min_nodes must be >= 0, got {min_nodes}")
        self.wc_budget = max_bytes
        self.wc_min = min_nodes

    @property
    def state_cache(self):
        """``(entries, bytes, hits)`` of the state cache (:meth:`set_state_cache`)."""
        return self.wc_n - 1, self.wc_bytes, self.wc_hits

    cdef int _wc_bound(self, int32_t k, int32_t p, state_t x) noexcept nogil:
        """Append a boundary (trie ``k``, node ``p``, lexer state ``x`` before its byte): 0 or -1."""
        if grow(<void**>&self.wc_bnd, &self.wc_bnd_cap, self.wc_nb + 3, sizeof(int32_t)) < 0:
            return self._fail(ERR_MEMORY, self.wc_nb + 3)
        self.wc_bnd[self.wc_nb] = k
        self.wc_bnd[self.wc_nb + 1] = p
        self.wc_bnd[self.wc_nb + 2] = x
        self.wc_nb += 3
        return 0

    cdef int32_t _wc_keep(self, state_t x, int32_t n_words, int64_t nb0, int64_t sliced, bint used,
                          int64_t count) noexcept nogil:
        """Keep ``wc_scratch`` and the boundaries from ``nb0`` as lexer state x's entry:
        its number, 0 when the budget has no room (x marked as not kept, the boundaries
        dropped), -1 on error."""
        cdef int64_t need = <int64_t>n_words * sizeof(word_t) + (self.wc_nb - nb0) * 4
        cdef int64_t off
        cdef int32_t e = <int32_t>self.wc_n
        if self.wc_bytes + need > self.wc_budget or self.wc_n >= 0x7fffffff:
            self.wc_nb = nb0
            if i64map_put(&self.wc_map, x, 0) < 0:
                return self._fail(ERR_MEMORY, self.wc_map.cap)
            return 0
        if (grow(<void**>&self.wc_mask_off, &self.wc_cap, e + 1, sizeof(int64_t)) < 0):
            return self._fail(ERR_MEMORY, e + 1)
        # the other per-entry arrays follow wc_cap (grown to it, from their old size)
        if (resize(<void**>&self.wc_bnd_off, self.wc_cap, sizeof(int64_t)) < 0
                or resize(<void**>&self.wc_bnd_len, self.wc_cap, sizeof(int32_t)) < 0
                or resize(<void**>&self.wc_sliced, self.wc_cap, sizeof(int64_t)) < 0
                or resize(<void**>&self.wc_used, self.wc_cap, sizeof(uint8_t)) < 0
                or resize(<void**>&self.wc_count, self.wc_cap, sizeof(int64_t)) < 0):
            return self._fail(ERR_MEMORY, self.wc_cap)
        off = arena_take(&self.wc_masks, n_words)
        if off < 0:
            return self._fail(ERR_MEMORY, n_words)
        if i64map_put(&self.wc_map, x, e) < 0:
            return self._fail(ERR_MEMORY, self.wc_map.cap)
        memcpy(arena_at(&self.wc_masks, off), self.wc_scratch, <size_t>n_words * sizeof(word_t))
        self.wc_mask_off[e] = off
        self.wc_bnd_off[e] = nb0
        self.wc_bnd_len[e] = <int32_t>((self.wc_nb - nb0) // 3)
        self.wc_sliced[e] = sliced
        self.wc_used[e] = used
        self.wc_count[e] = count
        self.wc_n += 1
        self.wc_bytes += need
        return e

    def memory_bytes(self):
        """The C tables (grammar arrays, lexer-state cache, scratch); lexeme DFAs included."""
        cdef int64_t total = 0
        total += (2 * self.n_dr + self.n_nt + 1 + self.nt_off[self.n_nt]) * 4 + self.n_nt + self.n_lex
        total += self.n_global * 6 + self.n_lex * 16
        total += self.cap_ls * (BYTES * 4 + 4 * 4 + 1) + self.acc_pool_cap * 4
        total += self.sets.cap_off * 8 + self.sets.cap_len * 4 + self.sets.pool_cap * 4 + self.sets.ht_cap * 4
        total += i64map_bytes(&self.row_items) + <int64_t>self.n_global * max(1, self.n_slices)
        total += self.memo_bytes + self.dfs_cap * 20 + i64map_bytes(&self.sparse)
        total += arena_bytes(&self.wc_masks) + i64map_bytes(&self.wc_map) + self.wc_cap * 37
        total += self.wc_bnd_cap * 4 + (self.wc_words * 4 if self.wc_scratch != NULL else 0)
        for a in self._keep:
            total += a.nbytes
        return total


# ---------------------------------------------------------------------------
# One parse: Earley rows + the current lexer state
# ---------------------------------------------------------------------------

cdef class EarleyParser:
    """The state of one sequence: the Earley rows of its lexemes and its lexer state.

    ``EarleyParser(tables)`` starts at the grammar's start; :meth:`push_bytes` /
    :meth:`truncate` move it, :meth:`fill` writes the token mask.
    """

    def __cinit__(self, ParserTables tables not None, *args, **kwargs):
        self.T = tables  # the C fields start zeroed (NULL pointers, empty rows and stacks)

    def __init__(self, ParserTables tables not None, bint _empty=False, bint use_cache=True):
        self.use_cache = use_cache
        self.cache_ls = -1
        if _empty:
            return
        self.T.steps = 0
        if self._start() < 0:
            self.T.raise_error()
            raise RuntimeError("llguidance parser: could not build the start row")
        memset(&self.work, 0, sizeof(WorkCounters))  # the work counts fills and accepts, not the making

    def __dealloc__(self):
        free(self.items)
        free(self.row_beg)
        free(self.row_ls)
        free(self.row_acc)
        free(self.row_key)
        free(self.row_id)
        free(self.cache_mask)
        free(self.st_ls)
        free(self.st_rows)
        free(self.undo_stack.data)

    cdef int _start(self) noexcept nogil:
        cdef int32_t i
        if self._new_row() < 0:
            return -1
        for i in range(self.T.nt_off[self.T.start_sym], self.T.nt_off[self.T.start_sym + 1]):
            if self._add(self.T.nt_drs[i], 0) < 0:
                return -1
        if self._close_row() < 0:
            return -1
        self.ls = self.row_ls[0]
        self.fresh = True
        return 0

    # -------------------------------------------------------------- rows --

    cdef int _reserve_rows(self, int64_t need) noexcept nogil:
        """Room for ``need`` rows in the row arrays: 0, or -1 (ERR_MEMORY noted).  The
        first grows (doubling); the others follow it to its capacity."""
        cdef int64_t cap = self.cap_rows
        if need <= cap:
            return 0
        if (grow(<void**>&self.row_beg, &cap, need, sizeof(int32_t)) < 0
                or resize(<void**>&self.row_ls, cap, sizeof(state_t)) < 0
                or resize(<void**>&self.row_key, cap, sizeof(state_t)) < 0
                or resize(<void**>&self.row_id, cap, sizeof(int64_t)) < 0
                or resize(<void**>&self.row_acc, cap, sizeof(uint8_t)) < 0):
            return self.T._fail(ERR_MEMORY, need)
        self.cap_rows = cap
        return 0

    cdef int _new_row(self) noexcept nogil:
        """Open row n_rows (empty): an empty item table and a fresh stamp."""
        if self._reserve_rows(self.n_rows + 2) < 0:
            return -1
        self.row_beg[self.n_rows] = <int32_t>self.n_items
        self.row_key[self.n_rows] = -1
        self.row_id[self.n_rows] = self.next_row_id
        self.next_row_id += 1
        self.n_rows += 1
        self.rows_valid = self.n_rows - 1  # the new row is valid once closed
        i64map_clear(&self.T.row_items)
        self.T.stamp += 1
        if self.T.stamp >= 0x7ffffff0:  # _scan takes stamps too: reset well before overflow
            memset(self.T.nt_stamp, 0, max(1, self.T.n_nt) * sizeof(int32_t))
            memset(self.T.allow_stamp, 0, max(1, self.T.n_lex) * sizeof(int32_t))
            memset(self.T.scan_stamp, 0, max(1, self.T.n_lex) * sizeof(int32_t))
            self.T.stamp = 1
        return 0

    cdef int _add(self, int32_t dr, int32_t origin) noexcept nogil:
        """Add item (dr, origin) to the open row unless it is there; -1 on a limit."""
        cdef int32_t at = i64map_intern(&self.T.row_items, pair_key(dr, origin), <int32_t>self.n_items)
        if at != self.n_items:  # in the row already, or the table could not grow
            return 0 if at >= 0 else self.T._fail(ERR_MEMORY, 2 * self.T.row_items.cap)
        return self._append(dr, origin)

    cdef int _append(self, int32_t dr, int32_t origin) noexcept nogil:
        """Append item (dr, origin) to the open row, counted against the row's and the
        step limits: 0, or -1 (a limit, memory)."""
        cdef int64_t row_size
        if self.n_items + 1 > self.cap_items and grow(<void**>&self.items, &self.cap_items, self.n_items + 1,
                                                      sizeof(Item)) < 0:
            return self.T._fail(ERR_MEMORY, self.n_items + 1)
        self.items[self.n_items].dr = dr
        self.items[self.n_items].origin = origin
        self.n_items += 1
        self.work.earley_items += 1
        row_size = self.n_items - self.row_beg[self.n_rows - 1]
        if row_size > self.T.max_row_items:
            return self.T._fail(ERR_MAX_ROW_ITEMS, row_size)
        if row_size > self.T.peak_row_items:
            self.T.peak_row_items = row_size
        return self.T._spend(1)

    cdef int _close_row(self) noexcept nogil:
        """Predict and complete the open row; record its start lexer state and acceptance."""
        cdef int32_t j = self.n_rows - 1
        cdef int64_t i = self.row_beg[j], k, kend
        cdef int32_t d, o, n_allowed = 0, l
        cdef symbol_t x, a
        cdef state_t start
        cdef uint8_t acc = 0
        while i < self.n_items:
            d = self.items[i].dr
            o = self.items[i].origin
            i += 1
            x = self.T.dr_sym[d]
            if x < 0:
                if o == j:
                    continue  # a nullable completion: done at prediction (Aycock-Horspool)
                a = self.T.dr_lhs[d]
                if a == self.T.start_sym and o == 0:
                    acc = 1
                kend = self.row_beg[o + 1]
                for k in range(self.row_beg[o], kend):
                    if self.T.dr_sym[self.items[k].dr] == a:
                        if self._add(self.items[k].dr + 1, self.items[k].origin) < 0:
                            return -1
            elif x < self.T.n_nt:
                if self.T.nt_stamp[x] != self.T.stamp:
                    self.T.nt_stamp[x] = self.T.stamp
                    for k in range(self.T.nt_off[x], self.T.nt_off[x + 1]):
                        if self._add(self.T.nt_drs[k], j) < 0:
                            return -1
                if self.T.nullable[x]:
                    if self._add(d + 1, o) < 0:
                        return -1
            else:
                l = x - self.T.n_nt
                if self.T.allow_stamp[l] != self.T.stamp:
                    self.T.allow_stamp[l] = self.T.stamp
                    self.T.allowed[n_allowed] = l
                    n_allowed += 1
        # A start production completed inside this row with origin 0: only possible
        # in row 0 (nullable start), found by the loop's o == j shortcut otherwise.
        if j == 0 and self.T.nullable[self.T.start_sym]:
            acc = 1
        start = self.T.allowed_start(n_allowed)
        if start == LS_ERROR:
            return -1
        self.row_ls[j] = start
        self.row_acc[j] = acc
        self.row_beg[j + 1] = <int32_t>self.n_items
        self.rows_valid = j + 1
        return 0

    cdef inline void _truncate(self, int32_t n_rows) noexcept nogil:
        self.n_rows = n_rows
        self.n_items = self.row_beg[n_rows]

    cdef bint _kept_row(self, state_t x) noexcept nogil:
        """Whether the row a scan of lexer state x would push is still in memory (built,
        then truncated): then it is pushed back as it is."""
        cdef int32_t j = self.n_rows - 1
        if j + 1 < self.rows_valid and self.row_key[j + 1] == x:
            self.n_rows = j + 2
            self.n_items = self.row_beg[j + 2]
            return True
        return False

    cdef int _scan(self, state_t x) noexcept nogil:
        """Push the row after the lexemes lexer state x accepts; -1 on a limit."""
        cdef int32_t i, j = self.n_rows - 1, off = self.T.ls_acc_off[x], n = self.T.ls_acc_len[x]
        cdef symbol_t sym
        cdef int64_t k, kend
        if self._kept_row(x):
            return 0
        self.T.stamp += 1  # a scan stamp distinct from every row's
        for i in range(n):
            self.T.scan_stamp[self.T.acc_pool[off + i]] = self.T.stamp
        cdef int32_t mark = self.T.stamp
        kend = self.row_beg[j + 1]
        if self._new_row() < 0:
            return -1
        for k in range(self.row_beg[j], kend):
            sym = self.T.dr_sym[self.items[k].dr]
            if sym >= self.T.n_nt and self.T.scan_stamp[sym - self.T.n_nt] == mark:
                if self._add(self.items[k].dr + 1, self.items[k].origin) < 0:
                    return -1
        self.row_key[j + 1] = x
        return self._close_row()

    cdef int _push_byte(self, state_t x, uint8_t b, state_t* out) noexcept nogil:
        """Lexer state x then byte b: 1 (out = new state; a row may have been pushed),
        0 rejected, -1 error.  On 0 a pushed row may remain: callers truncate.  The
        caller counts the byte's lexer step; a byte that starts the next lexeme counts
        its second one here."""
        cdef state_t y = self.T.ls_trans[<int64_t>x * BYTES + b]
        cdef state_t s
        if y == MISSING:
            y = self.T.step(x, b)
        if y >= 0:
            out[0] = y
            return 1
        if y == LS_ERROR:
            return -1
        # b cannot extend any live lexeme: the lexeme ends here, if one accepts.  A
        # skip lexeme wins over real ones accepting with it (llguidance's choice);
        # the parser does not see it and the same lexemes are allowed after it.
        if self.T.ls_flags[x] & F_SKIP_ACC:
            s = self.row_ls[self.n_rows - 1]
        elif self.T.ls_acc_len[x] > 0:
            if self._scan(x) < 0:
                return -1
            s = self.row_ls[self.n_rows - 1]
        else:
            return 0
        self.work.lexer_steps += 1
        y = self.T.ls_trans[<int64_t>s * BYTES + b]
        if y == MISSING:
            y = self.T.step(s, b)
        if y >= 0:
            out[0] = y
            return 1
        return -1 if y == LS_ERROR else 0

    cdef int _accepting(self) noexcept nogil:
        """1 when the grammar accepts what was consumed (the lexeme ends at EOS); -1 error."""
        cdef int32_t saved = self.n_rows
        cdef int r = 0
        if self.fresh:
            return self.row_acc[self.n_rows - 1]
        if self.T.ls_flags[self.ls] & F_SKIP_ACC:
            return self.row_acc[self.n_rows - 1]
        if self.T.ls_acc_len[self.ls] > 0:
            if self._scan(self.ls) < 0:
                self._truncate(saved)
                return -1
            r = self.row_acc[self.n_rows - 1]
            self._truncate(saved)
        return r

    # -------------------------------------------------------------- walk --

    cdef int _ensure_stack(self, int32_t depth) noexcept nogil:
        """Walk stacks for tries ``depth`` deep (one entry per level and the root's)."""
        if depth + 1 <= self.st_cap:
            return 0
        if (resize(<void**>&self.st_ls, depth + 1, sizeof(state_t)) < 0
                or resize(<void**>&self.st_rows, depth + 1, sizeof(int32_t)) < 0):
            return self.T._fail(ERR_MEMORY, depth + 1)
        self.st_cap = depth + 1
        return 0

    cdef int64_t _walk(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                       word_t* mask) noexcept nogil:
        """OR the bits of every token of the trie whose bytes all push: the nodes
        visited (each one lexer step), or -1 on error."""
        return self._walk_at(nodes, num_nodes, token_ids, mask, self.ls)

    cdef int64_t _walk_at(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                          word_t* mask, state_t start) noexcept nogil:
        """:meth:`_walk` from lexer state ``start`` (the rows as they are).  ``nodes + p - 1``
        with ``num_nodes`` = node p's subtree size + 1 walks node p and its subtree."""
        cdef int32_t p = 1, depth = 1, i, end, rows, base_rows = self.n_rows
        cdef state_t y, y_slow
        cdef int r
        cdef int64_t visited = 0, tokens = 0
        cdef token_t t
        cdef const TrieNode* node
        cdef state_t* st_ls = self.st_ls
        cdef int32_t* st_rows = self.st_rows
        cdef const state_t* trans = self.T.ls_trans
        cdef state_t parent = start  # the lexer state after the parent node's bytes
        st_ls[0] = start
        st_rows[0] = base_rows
        while p < num_nodes:
            node = &nodes[p]
            visited += 1
            y = trans[<int64_t>parent * BYTES + node.byte]
            rows = st_rows[depth - 1]
            if y < 0:
                # slow path: the table entry is missing, or the byte ends a lexeme
                if self.n_rows != rows:
                    self._truncate(rows)  # drop rows a sibling subtree pushed
                r = self._push_byte(parent, node.byte, &y_slow)  # (y itself stays in a register)
                y = y_slow
                trans = self.T.ls_trans  # a new lexer state may have moved the table
                if r < 0:
                    self._truncate(base_rows)
                    return -1
                if r == 0:
                    depth -= node.num_parents - 1
                    p += node.subtree_size
                    parent = st_ls[depth - 1 if depth > 0 else 0]  # (a subtree walk ends above its start)
                    continue
                rows = self.n_rows
            # The node's first id without a branch (0 or 1 ids is the rule, and which is
            # unpredictable): a node without ids ORs a 0 into the word of the id at its
            # token_start (TokenTrie keeps a readable id past the end).
            t = token_ids[node.token_start]
            mask[t >> 5] |= (<word_t>(node.token_count != 0)) << (t & 31)
            tokens += node.token_count
            if node.token_count > 1:  # duplicate byte strings: rare
                end = node.token_start + node.token_count
                for i in range(node.token_start + 1, end):
                    t = token_ids[i]
                    mask[t >> 5] |= (<word_t>1) << (t & 31)
            # Branch-free descent: the node's slot is written either way (a leaf's is
            # unused); a leaf then pops num_parents levels, an inner node none.
            st_ls[depth] = y
            st_rows[depth] = rows
            depth += 1 - node.num_parents * (node.subtree_size == 1)
            parent = st_ls[depth - 1 if depth > 0 else 0]
            p += 1
        self._truncate(base_rows)
        self.walk_tokens = tokens
        return visited

    cdef int64_t _walk_lex(self, const TrieNode* nodes, int32_t num_nodes, const token_t* token_ids,
                           int32_t k, word_t* mask) noexcept nogil:
        """The lexer's part of :meth:`_walk` from the current lexer state (what no parser
        state changes): OR the tokens whose bytes all extend the lexeme, skip the
        subtrees of refused bytes, and append each node whose byte ends the lexeme to
        the tables' boundaries (trie ``k``), where the parser decides it and its
        subtree.  The nodes visited, or -1."""
        cdef int32_t p = 1, depth = 1, i, end
        cdef state_t y
        cdef int64_t visited = 0, tokens = 0
        cdef token_t t
        cdef const TrieNode* node
        cdef state_t* st_ls = self.st_ls
        cdef const state_t* trans = self.T.ls_trans
        cdef state_t parent = self.ls
        st_ls[0] = self.ls
        while p < num_nodes:
            node = &nodes[p]
            visited += 1
            y = trans[<int64_t>parent * BYTES + node.byte]
            if y == MISSING:
                y = self.T.step(parent, node.byte)
                trans = self.T.ls_trans  # a new lexer state may have moved the table
                if y == LS_ERROR:
                    return -1
            if y < 0:
                # no live pair: the lexeme ends here if one accepts (the parser's part),
                # else the byte is refused; the subtree is skipped either way
                if (self.T.ls_flags[parent] & F_SKIP_ACC or self.T.ls_acc_len[parent] > 0) and self.T._wc_bound(k, p, parent) < 0:
                    return -1
                depth -= node.num_parents - 1
                p += node.subtree_size
                parent = st_ls[depth - 1 if depth > 0 else 0]
                continue
            t = token_ids[node.token_start]
            mask[t >> 5] |= (<word_t>(node.token_count != 0)) << (t & 31)
            tokens += node.token_count
            if node.token_count > 1:
                end = node.token_start + node.token_count
                for i in range(node.token_start + 1, end):
                    t = token_ids[i]
                    mask[t >> 5] |= (<word_t>1) << (t & 31)
            st_ls[depth] = y
            depth += 1 - node.num_parents * (node.subtree_size == 1)
            parent = st_ls[depth - 1 if depth > 0 else 0]
            p += 1
        self.walk_tokens = tokens
        return visited

    cdef int _fill_cached(self, word_t* mask, int32_t n_words) noexcept nogil:
        """:meth:`_fill_c` through the tables' state cache (:meth:`ParserTables.set_state_cache`):
        the current lexer state's entry ORed in and its boundaries walked, the entry made
        first when there is none.  0, 1 (slices used), -1, or -2: the cache cannot serve
        (a state too small to keep, another mask width), walk as without it."""
        cdef int32_t e = i64map_get(&self.T.wc_map, self.ls)
        cdef int32_t k, w, ns = 0 if self.walk_slices is None else self.walk_slices.n
        cdef int64_t bits = 0, v, nb0, nb1, b, lex_nodes = 0, visited = 0, sliced = 0, count = 0
        cdef const word_t* src
        cdef word_t* scratch
        cdef const TrieNode* nodes
        cdef const token_t* ids
        cdef int32_t p
        cdef int r
        if e == 0 or (self.T.wc_words != 0 and self.T.wc_words != n_words):
            return -2
        if e < 0:
            if self.T.wc_bytes + <int64_t>n_words * sizeof(word_t) > self.T.wc_budget:
                return -2  # the budget is spent: no more entries
            if self.T.wc_words == 0:
                self.T.wc_scratch = <word_t*>malloc(<size_t>n_words * sizeof(word_t))
                if self.T.wc_scratch == NULL:
                    return self.T._fail(ERR_MEMORY, n_words)
                self.T.wc_words = n_words
            scratch = self.T.wc_scratch
            memset(scratch, 0, <size_t>n_words * sizeof(word_t))
            nb0 = self.T.wc_nb
            bits = self._slices_here(n_words)
            if bits < 0:
                return -1
            if bits != 0:
                for k in range(ns + 1):  # the slices, then the rest's trie
                    if k < ns and (bits >> k) & 1:
                        or_words(scratch, self.walk_slices.masks[k], self.walk_slices.n_words)
                        sliced += self.walk_slices.n_tokens[k]
                        continue
                    v = self._walk_lex(self.walk_slices.t_nodes[k], self.walk_slices.t_num[k],
                                       self.walk_slices.t_ids[k], k, scratch)
                    if v < 0:
                        self.T.wc_nb = nb0
                        return -1
                    lex_nodes += v
                    count += self.walk_tokens
            else:
                v = self._walk_lex(self.walk_trie.nodes, self.walk_trie.num_nodes, self.walk_trie.token_ids,
                                   WC_TRIE_FULL, scratch)
                if v < 0:
                    self.T.wc_nb = nb0
                    return -1
                lex_nodes = v
                count = self.walk_tokens
            count += sliced  # the slices' tokens and those that stay in the lexeme: disjoint
            nb1 = self.T.wc_nb
            if lex_nodes - (nb1 - nb0) // 3 >= self.T.wc_min:
                e = self.T._wc_keep(self.ls, n_words, nb0, sliced, bits != 0, count)
                if e < 0:
                    self.T.wc_nb = nb0
                    return -1
            elif i64map_put(&self.T.wc_map, self.ls, 0) < 0:
                self.T.wc_nb = nb0
                return self.T._fail(ERR_MEMORY, self.T.wc_map.cap)
            else:
                e = 0
            src = scratch
            r = 1 if bits != 0 else 0
            visited = lex_nodes
        else:
            src = <const word_t*>arena_at(&self.T.wc_masks, self.T.wc_mask_off[e])
            nb0 = self.T.wc_bnd_off[e]
            nb1 = nb0 + 3 * <int64_t>self.T.wc_bnd_len[e]
            sliced = self.T.wc_sliced[e]
            r = self.T.wc_used[e]
            count = self.T.wc_count[e]
            self.T.wc_hits += 1
        or_words(mask, src, n_words)
        # the boundaries: each node and its subtree, from the lexer state before its byte
        for b in range(nb0, nb1, 3):
            k = self.T.wc_bnd[b]
            p = self.T.wc_bnd[b + 1]
            if k == WC_TRIE_FULL:
                nodes = self.walk_trie.nodes
                ids = self.walk_trie.token_ids
            else:
                nodes = self.walk_slices.t_nodes[k]
                ids = self.walk_slices.t_ids[k]
            v = self._walk_at(nodes + p - 1, nodes[p].subtree_size + 1, ids, mask, self.T.wc_bnd[b + 2])
            if v < 0:
                if e == 0:
                    self.T.wc_nb = nb0
                return -1
            visited += v
            count += self.walk_tokens  # a token's first boundary is at one node: no token twice
        if e == 0:
            self.T.wc_nb = nb0  # not kept: its boundaries go
        self.last_visited = visited
        self.fill_count = count
        self.work.trie_nodes += visited
        self.work.lexer_steps += visited
        self.work.tokens_sliced += sliced
        return r

    # ------------------------------------------------------------ python --

    def set_walk(self, TokenTrie trie not None, SliceSet slices=None):
        """What :meth:`fill` walks: the vocabulary's ``trie``, and its ``slices``."""
        if slices is not None and slices.n > 0 and self.T.n_slices < slices.n:
            raise ValueError(f"tables were built for {self.T.n_slices} slices, {slices.n} given")
        depth = trie.max_depth if slices is None else max(trie.max_depth, slices.max_depth)
        if self._ensure_stack(depth + 1) < 0:
            self.T.raise_error()
        self.walk_trie = trie
        self.walk_slices = slices if slices is not None and slices.n > 0 else None
        self.cache_ls = -1
        if self.T.wc_budget > 0 and self.T.wc_trie is None:  # the state cache's entries are of this walk
            self.T.wc_trie, self.T.wc_slices = trie, self.walk_slices
        self.wc_on = self.T.wc_budget > 0 and self.T.wc_trie is trie and self.T.wc_slices is self.walk_slices

    def fill(self, TokenTrie trie not None, word_t[::1] mask, SliceSet slices=None):
        """OR the allowed text tokens into ``mask``; returns ``(nodes visited, sliced)``.

        With ``slices``: a slice whose language stays alive in some (lexeme, state)
        pair of the current lexer state is ORed in wholesale, and the other slices'
        tries and the rest's trie are walked; when no slice qualifies the whole
        ``trie`` is walked (one walk shares the prefixes the slice tries split).

        With ``use_cache`` (the default), a mask asked for in the lexer state and rows
        of the last one made (same ``trie`` and ``slices``) is the last one's copy:
        ``(0, sliced as then)``, counted in ``cache_hits``.  (:meth:`set_walk` then
        :meth:`c_fill`, the matcher's path.)
        """
        cdef int32_t n_words = <int32_t>mask.shape[0]
        cdef int r
        if n_words * 32 < trie.vocab_size:
            raise ValueError(f"mask has {n_words} words, the vocabulary needs {(trie.vocab_size + 31) // 32}")
        if trie is not self.walk_trie or (slices if slices is not None and slices.n > 0 else None) is not self.walk_slices:
            self.set_walk(trie, slices)
        with nogil:
            r = self.c_fill(&mask[0], n_words)
        if r < 0:
            self.T.raise_error()
            raise RuntimeError("llguidance parser: fill failed")
        return self.last_visited, r == 1

    cdef int c_fill_over(self, word_t* mask, int32_t n_words) noexcept nogil:
        """:meth:`c_fill` into a row whose words are garbage (``StrategyOps.fill_over``):
        zeroed here, then ORed; ``glr``'s parser writes its first row over it instead."""
        memset(mask, 0, n_words * sizeof(word_t))
        return self.c_fill(mask, n_words)

    cdef int c_fill(self, word_t* mask, int32_t n_words) noexcept nogil:
        """The mask into ``mask`` (ORed) from the walk set: 0, 1 (slices used), -1."""
        cdef int32_t w
        cdef int64_t top
        cdef int r
        if self.walk_trie is None:
            return self.T._fail(ERR_SHAPE, 0)
        if not self.use_cache:
            return self._fill_c(mask, n_words)
        top = self.row_id[self.n_rows - 1]
        if self.cache_ls == self.ls and self.cache_row == top and self.cache_words == n_words:
            or_words(mask, self.cache_mask, n_words)
            self.cache_hits += 1
            self.last_visited = 0
            self.fill_count = self.cache_count
            self.work.tokens_cached += self.walk_trie.num_tokens  # every text token's verdict is the copy's
            return self.cache_sliced
        if self._cache_room(n_words) < 0:
            return -1
        self.cache_ls = -1  # no entry unless this mask is made
        memset(self.cache_mask, 0, n_words * sizeof(word_t))
        r = self._fill_c(self.cache_mask, n_words)
        if r < 0:
            return r
        for w in range(n_words):
            mask[w] |= self.cache_mask[w]
        self.cache_ls = self.ls
        self.cache_row = top
        self.cache_sliced = r == 1
        self.cache_count = self.fill_count
        return r

    cdef int _cache_room(self, int32_t n_words) noexcept nogil:
        """The mask cache's buffer for masks of ``n_words`` words (its entry dropped when
        it is made anew): 0, or -1 on memory."""
        if self.cache_words == n_words:
            return 0
        free(self.cache_mask)
        self.cache_ls = -1
        self.cache_mask = <word_t*>malloc(max(1, n_words) * sizeof(word_t))
        if self.cache_mask == NULL:
            self.cache_words = 0
            return self.T._fail(ERR_MEMORY, n_words)
        self.cache_words = n_words
        return 0

    cdef int64_t _slices_here(self, int32_t n_words) noexcept nogil:
        """The slices a fill in the current lexer state ORs in whole (bit k: slice k;
        0 without slices), or -1 (masks of ``n_words`` words too short for them)."""
        if self.walk_slices is None or self.walk_slices.n == 0:
            return 0
        if self.walk_slices.n_words > n_words:
            return self.T._fail(ERR_SHAPE, self.walk_slices.n_words)
        return self.T.slice_bits(self.ls, self.walk_slices)

    cdef int _fill_c(self, word_t* mask, int32_t n_words) noexcept nogil:
        """``c_fill``'s walk into ``mask``, no cache: 0, 1 (slices used) or -1.
        ``last_visited`` counts its nodes; the work counters take them, and the tokens
        of the slices ORed in whole."""
        cdef int32_t k, w
        cdef int64_t bits = 0, v, sliced = 0, count = 0
        cdef const word_t* smask
        cdef int32_t ns = 0 if self.walk_slices is None else self.walk_slices.n
        cdef int r = 0
        self.T.steps = 0
        self.last_visited = 0
        if self.wc_on:
            r = self._fill_cached(mask, n_words)
            if r != -2:
                self.T.note_steps()
                return r
            r = 0
        bits = self._slices_here(n_words)
        if bits < 0:
            return -1
        if bits != 0:
            r = 1
            for k in range(ns + 1):  # the slices, then the rest's trie (always walked)
                if k < ns and (bits >> k) & 1:
                    smask = self.walk_slices.masks[k]
                    for w in range(self.walk_slices.n_words):
                        mask[w] |= smask[w]
                    sliced += self.walk_slices.n_tokens[k]
                    continue
                v = self._walk(self.walk_slices.t_nodes[k], self.walk_slices.t_num[k],
                               self.walk_slices.t_ids[k], mask)
                if v < 0:
                    return -1
                self.last_visited += v
                count += self.walk_tokens
        else:
            v = self._walk(self.walk_trie.nodes, self.walk_trie.num_nodes, self.walk_trie.token_ids, mask)
            if v < 0:
                return -1
            self.last_visited = v
            count = self.walk_tokens
        # the tokens ORed in: the slices' and the walks' are disjoint (a token is in one
        # trie, and its one path there), so the session need not count the row's bits
        self.fill_count = sliced + count
        self.work.trie_nodes += self.last_visited
        self.work.lexer_steps += self.last_visited  # one byte through the lexer per node
        self.work.tokens_sliced += sliced
        self.T.note_steps()
        return r

    cdef int c_push(self, const uint8_t* data, int32_t n) noexcept nogil:
        """Consume all of ``data``: 1 (an undo record pushed), 0 refused (state
        unchanged), -1 a failure (the tables' pending error)."""
        cdef int32_t saved_rows = self.n_rows
        cdef state_t x
        cdef bint fresh
        cdef int r
        if undo_reserve(&self.undo_stack, 3) < 0:
            return self.T._fail(ERR_MEMORY, self.undo_stack.n + 3)
        self.T.steps = 0
        r = self._consume(data, n, &x, &fresh)
        self.T.note_steps()
        if r <= 0:
            return r
        self.undo_stack.data[self.undo_stack.n] = self.ls
        self.undo_stack.data[self.undo_stack.n + 1] = saved_rows
        self.undo_stack.data[self.undo_stack.n + 2] = self.fresh
        self.undo_stack.n += 3
        self.ls = x
        self.fresh = fresh
        return 1

    cdef int c_next_bytes(self, uint64_t* out) noexcept nogil:
        """The ops' ``next_bytes``: the bytes that extend the current lexeme (each is
        taken: the lexer state holds only lexemes the parser allows), exactly those
        while no lexeme may end here; where one may, also the bytes the next may start
        with, a superset: after a skip lexeme the row's own lexemes' (known), after
        another every lexeme's (the parser would have to scan it to know which follow)."""
        cdef state_t x = self.ls
        out[0] = out[1] = out[2] = out[3] = 0
        self.T.live_bytes(x, out)
        if self.T.ls_flags[x] & F_SKIP_ACC:
            self.T.live_bytes(self.row_ls[self.n_rows - 1], out)
        elif self.T.ls_acc_len[x] > 0:
            out[0] |= self.T.first_any[0]
            out[1] |= self.T.first_any[1]
            out[2] |= self.T.first_any[2]
            out[3] |= self.T.first_any[3]
        else:
            return 2
        return 1

    cdef void c_undo(self) noexcept nogil:
        self.fresh = undo_pop(&self.undo_stack)
        self._truncate(undo_pop(&self.undo_stack))
        self.ls = undo_pop(&self.undo_stack)

    cdef int c_accepting(self) noexcept nogil:
        self.T.steps = 0
        return self._accepting()

    cdef void take_error(self, int32_t* code, int64_t* value) noexcept nogil:
        code[0] = self.T.err
        value[0] = self.T.err_value
        self.T.err = ERR_NONE

    def error_text(self, int32_t code, int64_t value):
        """The message of an op's failure (the tables' error ``code`` and ``value``)."""
        e = self.T.error_of(code, value)
        if e is None:
            return "RuntimeError: llguidance parser: internal failure"
        return f"{type(e).__name__}: {e}"

    def push_bytes(self, const uint8_t[::1] data):
        """Consume all of ``data``: ``None`` when some byte is rejected (state unchanged),
        else the undo record ``(lexer state, fresh, rows)`` of the state before."""
        cdef Py_ssize_t n = data.shape[0]
        cdef state_t x
        cdef bint fresh
        cdef int r
        record = (self.ls, self.fresh, self.n_rows)
        if n == 0:
            return record
        self.T.steps = 0
        with nogil:
            r = self._consume(&data[0], n, &x, &fresh)
        if r < 0:
            self.T.raise_error()
            raise RuntimeError("llguidance parser: push failed")
        self.T.note_steps()
        if r == 0:
            return None
        self.ls = x
        self.fresh = fresh
        return record

    cdef int _consume(self, const uint8_t* data, Py_ssize_t n, state_t* x_out, bint* fresh_out) noexcept nogil:
        """Push every byte of ``data`` from the current lexer state: 1 (the lexer state
        and freshness after them in ``x_out``, ``fresh_out``; the state itself is the
        caller's to move), 0 refused or -1 failed (the rows as they were)."""
        cdef int32_t saved_rows = self.n_rows
        cdef state_t x = self.ls, y
        cdef Py_ssize_t i, read = 0
        cdef int r = 1
        cdef bint fresh = False
        for i in range(n):
            read += 1
            r = self._push_byte(x, data[i], &y)
            if r <= 0:
                break
            x = y
        self.work.lexer_steps += read  # the bytes read, a refused one included
        if r == 1 and not (self.T.ls_flags[x] & F_EXTEND):
            # Every live lexeme is complete and cannot grow: it ends now, as in
            # llguidance, so the parser sees it (and its limits) with this token.
            if self.T.ls_flags[x] & F_SKIP_ACC:
                x = self.row_ls[self.n_rows - 1]
                fresh = True
            elif self.T.ls_acc_len[x] > 0:
                if self._scan(x) < 0:
                    r = -1
                else:
                    x = self.row_ls[self.n_rows - 1]
                    fresh = True
        if r <= 0:
            self._truncate(saved_rows)
        x_out[0] = x
        fresh_out[0] = fresh
        return r

    def undo(self, record):
        """Back to the state ``push_bytes`` returned as ``record``."""
        ls, fresh, n_rows = record
        if n_rows > self.n_rows or n_rows < 1:
            raise ValueError(f"cannot restore {n_rows} rows, the parser has {self.n_rows}")
        self._truncate(n_rows)
        self.ls = ls
        self.fresh = fresh

    def is_accepting(self):
        """True when the bytes consumed are a sentence (the last lexeme ends at EOS)."""
        cdef int r
        self.T.steps = 0
        with nogil:
            r = self._accepting()
        if r < 0:
            self.T.raise_error()
            raise RuntimeError("llguidance parser: acceptance check failed")
        return bool(r)

    def copy(self):
        """An independent parser in the same state (rows copied).  Its work counters
        start at zero, as every new parser's C fields do.  A subclass's copy is of its
        class (``glr``'s parser keeps nothing else between calls)."""
        cdef EarleyParser other = type(self)(self.T, True)
        other.items = <Item*>malloc(max(1, self.n_items) * sizeof(Item))
        other.row_beg = <int32_t*>malloc((self.n_rows + 2) * sizeof(int32_t))
        other.row_ls = <state_t*>malloc((self.n_rows + 2) * sizeof(state_t))
        other.row_acc = <uint8_t*>malloc(self.n_rows + 2)
        other.row_key = <state_t*>malloc((self.n_rows + 2) * sizeof(state_t))
        other.row_id = <int64_t*>malloc((self.n_rows + 2) * sizeof(int64_t))
        if (other.items == NULL or other.row_beg == NULL or other.row_ls == NULL
                or other.row_acc == NULL or other.row_key == NULL or other.row_id == NULL):
            raise MemoryError()
        memcpy(other.row_key, self.row_key, self.n_rows * sizeof(state_t))
        memcpy(other.row_id, self.row_id, self.n_rows * sizeof(int64_t))
        other.next_row_id = self.next_row_id
        other.use_cache = self.use_cache
        other.rows_valid = self.n_rows
        memcpy(other.items, self.items, self.n_items * sizeof(Item))
        memcpy(other.row_beg, self.row_beg, (self.n_rows + 1) * sizeof(int32_t))
        memcpy(other.row_ls, self.row_ls, self.n_rows * sizeof(state_t))
        memcpy(other.row_acc, self.row_acc, self.n_rows)
        other.n_items = other.cap_items = self.n_items
        other.n_rows = self.n_rows
        other.cap_rows = self.n_rows + 2
        if other.cap_items == 0:
            other.cap_items = 1
        other.ls = self.ls
        other.fresh = self.fresh
        if self.walk_trie is not None:
            other.set_walk(self.walk_trie, self.walk_slices)
        if undo_copy(&other.undo_stack, &self.undo_stack) < 0:
            raise MemoryError()
        return other

    @property
    def num_rows(self):
        """Rows on the stack (1 + lexemes scanned)."""
        return self.n_rows

    @property
    def num_items(self):
        """Earley items in all rows."""
        return self.n_items

    def row_items(self, int32_t k):
        """The items ``(dotted rule, origin)`` of row k (for tests and debugging)."""
        if k < 0 or k >= self.n_rows:
            raise IndexError(f"row {k} out of range [0, {self.n_rows})")
        return [(self.items[i].dr, self.items[i].origin)
                for i in range(self.row_beg[k], self.row_beg[k + 1])]


def full_matches(TokenTrie trie not None, transitions, accepting, state_t start):
    """Bool array over the vocabulary: the text tokens whose bytes a DFA accepts whole."""
    cdef cnp.ndarray t = np.ascontiguousarray(transitions, dtype=np.int32)
    cdef cnp.ndarray a = np.ascontiguousarray(accepting, dtype=np.uint8)
    out = np.zeros(trie.vocab_size, dtype=bool)
    if t.ndim != 2 or t.shape[1] != BYTES or a.shape[0] != t.shape[0]:
        raise ValueError("transitions must be [n, 256] with one accepting flag per state")
    if start <= 0 or start >= t.shape[0]:
        return out
    cdef const state_t* tr = <const state_t*>cnp.PyArray_DATA(t)
    cdef const uint8_t* acc = <const uint8_t*>cnp.PyArray_DATA(a)
    cdef uint8_t[::1] o = out.view(np.uint8)
    cdef const TrieNode* nodes = trie.nodes
    cdef const token_t* ids = trie.token_ids
    cdef int32_t n = trie.num_nodes, p = 1, depth = 1, i
    cdef state_t s
    cdef state_t* stack = <state_t*>malloc((trie.max_depth + 2) * sizeof(state_t))
    if stack == NULL:
        raise MemoryError()
    stack[0] = start
    with nogil:
        while p < n:
            s = tr[<int64_t>stack[depth - 1] * BYTES + nodes[p].byte]
            if s == DEAD:
                depth -= nodes[p].num_parents - 1
                p += nodes[p].subtree_size
                continue
            if acc[s]:
                for i in range(nodes[p].token_start, nodes[p].token_start + nodes[p].token_count):
                    o[ids[i]] = 1
            if nodes[p].subtree_size == 1:
                depth -= nodes[p].num_parents - 1
            else:
                stack[depth] = s
                depth += 1
            p += 1
    free(stack)
    return out


# ---------------------------------------------------------------------------
# The parser as the core of a toolkit.core.session.Session
# ---------------------------------------------------------------------------

cdef int _ops_advance(void* core, token_t token, const uint8_t* data, int32_t n) noexcept nogil:
    return (<EarleyParser>core).c_push(data, n)


cdef void _ops_undo(void* core) noexcept nogil:
    (<EarleyParser>core).c_undo()


cdef int _ops_fill(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    cdef int r
    (<EarleyParser>core).fill_count = -1
    r = (<EarleyParser>core).c_fill(row, n_words)
    if r >= 0 and (<EarleyParser>core).fill_count >= 0:
        count[0] = (<EarleyParser>core).fill_count  # the row was zero (the session's contract): counted
    return r


cdef int _ops_fill_over(void* core, word_t* row, int32_t n_words, int64_t* count) noexcept nogil:
    cdef int r
    (<EarleyParser>core).fill_count = -1
    r = (<EarleyParser>core).c_fill_over(row, n_words)
    if r >= 0 and (<EarleyParser>core).fill_count >= 0:
        count[0] = (<EarleyParser>core).fill_count
    return r


cdef int _ops_accepting(void* core) noexcept nogil:
    return (<EarleyParser>core).c_accepting()


cdef void _ops_take_error(void* core, int32_t* code, int64_t* value) noexcept nogil:
    (<EarleyParser>core).take_error(code, value)


cdef void _ops_work(void* core, WorkCounters* out) noexcept nogil:
    add_work(out, &(<EarleyParser>core).work)


cdef int _ops_next_bytes(void* core, uint64_t* out) noexcept nogil:
    return (<EarleyParser>core).c_next_bytes(out)


cdef StrategyOps _OPS = StrategyOps(_ops_advance, _ops_undo, _ops_fill, _ops_accepting, _ops_take_error, _ops_work,
                                    _ops_next_bytes, _ops_fill_over)


def ops_capsule():
    """The parser's C entry points for :class:`toolkit.core.session.Session`."""
    return ops_capsule_of(&_OPS)
