"""Canonical tokenization in C for BPE tokenizers: jump-forward's forced text.

A vocabulary whose tokenizer is tiktoken's BPE with merge ranks in id order (Llama 3,
Tekken: :attr:`toolkit.core.vocab.Vocabulary.bpe_pattern` names its pre-tokenizer
pattern) is read into a :class:`BpeTable`, and :meth:`BpeTable.encode` gives, without
the GIL, the ids tiktoken's ``encode_ordinary`` gives:

1. **Pre-tokenization.**  The text is cut where the pattern's matches end (tiktoken's
   ``find_iter``; every position starts a match of these patterns, so the pieces tile
   the text).  Each known pattern has its scanner written out here, its alternatives in
   order and each quantifier's backtracking worked out (the comments say how); a pattern
   not known here gets no table.  Code points are classed from Python's ``unicodedata``
   (letters by case, marks, numbers; ``\\s`` is Unicode's White_Space, as the regex
   crate reads it).
2. **Byte-pair merging** of each piece that is not a token itself: tiktoken's
   ``_byte_pair_merge``, the adjacent pair whose bytes form the lowest-ranked token
   merged first (the leftmost of equal ranks).

A Hugging Face ``tokenizer.json`` BPE with ranked merges (Mistral 7B v0.3's
sentencepiece BPE with byte fallback; a ``Split`` then ``ByteLevel`` on one of the
patterns here, Qwen2's with its ``NFC``; GPT-2's ``ByteLevel``:
:attr:`~toolkit.core.vocab.Vocabulary.bpe_merges`, read by
:func:`toolkit.core.vocab.hf_merges`) is read too, and :meth:`BpeTable.encode` then gives
the ids of the ``tokenizers`` crate's ``encode``: the text cut into pieces (one piece,
one per space, or the pattern's matches), each piece's first symbols (each code point's
token, else its UTF-8 bytes' ``<0xXX>`` tokens; each byte's token for ByteLevel), then
the adjacent pair of the lowest merge rank merged, the leftmost of equal ranks (the
order of the crate's queue in ``Word::merge_all``), a merge of those two tokens only.

Where it cannot answer exactly it returns -1 and the caller takes the Python rule
(:func:`toolkit.core.forced.marked_tokens`): bytes that are not UTF-8 (a special-token
mark is one), a code point Python's Unicode tables do not assign where a pattern classes it
(tiktoken's regex may know it), sentencepiece's ``▁`` typed in the text (the model
reads it as a space's piece), a code point from U+0300 on under NFC (which may compose
it), a piece no token sequence spells, or more ids than ``cap``.  The scanners' classes
are also those of the Oniguruma regexes a ``tokenizer.json`` ``Split`` runs, on every code
point Python assigns (checked once against the ``tokenizers`` crate, 2026-12-01).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp

from toolkit.core.cutil cimport hash_bytes, i64map_free, i64map_get, i64map_init, i64map_put, pair_key

import unicodedata

import numpy as np

from toolkit.core.vocab import GPT2_PATTERN, LLAMA3_PATTERN, QWEN2_PATTERN, TEKKEN_PATTERN

__all__ = ["BpeTable", "PATTERNS", "code_point_classes", "describe"]

cdef enum:
    PAT_LLAMA3 = 1
    PAT_TEKKEN = 2
    PAT_QWEN2 = 3
    PAT_GPT2 = 4

cdef enum:
    SPLIT_NONE = 0
    SPLIT_SPACE = 1
    SPLIT_PATTERN = 2

cdef enum:
    C_OTHER = 0
    C_LU = 1
    C_LL = 2
    C_LT = 3
    C_LM = 4
    C_LO = 5
    C_M = 6
    C_N = 7
    C_UNKNOWN = 8
    C_WS = 0x10     # bit: White_Space
    C_CLASS = 0x0f  # the class without the bit

PATTERNS = {LLAMA3_PATTERN: PAT_LLAMA3, TEKKEN_PATTERN: PAT_TEKKEN, QWEN2_PATTERN: PAT_QWEN2, GPT2_PATTERN: PAT_GPT2}
"""The pre-tokenizer patterns with a scanner here (tiktoken ``pat_str`` -> scanner)."""

_PATTERN_NAMES = {LLAMA3_PATTERN: "Llama 3's", TEKKEN_PATTERN: "Tekken's", QWEN2_PATTERN: "Qwen2's",
                  GPT2_PATTERN: "GPT-2's"}


def describe(vocab) -> str:
    """Where ``vocab``'s forced text is tokenized (``masklab vocab`` prints it): in C by
    its :class:`BpeTable` (tiktoken's ranks or a ``tokenizer.json``'s merges, with the
    pre-tokenizer), or in Python (no table: jump-forward's ``lookahead`` then runs as
    ``overlap``)."""
    if BpeTable.of(vocab) is None:
        return "Python (its tokenizer; jump-forward's lookahead runs as overlap)"
    spec = getattr(vocab, "bpe_merges", None)
    if spec is None:
        return f"C (tiktoken BPE ranks, {_PATTERN_NAMES[vocab.bpe_pattern]} pattern)"
    cut = {"none": "one piece", "space": "a piece per space"}.get(spec.split)
    cut = cut or f"{_PATTERN_NAMES[spec.pattern]} pattern"
    extras = [x for x, on in (("byte fallback", (spec.fallback >= 0).any()), ("NFC below U+0300", spec.nfc),
                              ("ignore_merges", spec.ignore_merges)) if on]
    return f"C (tokenizer.json BPE merges, {spec.unit}s, {cut}{''.join(', ' + x for x in extras)})"


#: Unicode's White_Space property (what ``\\s`` means in the regex crate); Python's
#: ``str.isspace`` adds U+001C..U+001F, which are not White_Space
_WHITE_SPACE = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F,
                0x205F, 0x3000]
_CATEGORY = {"Lu": C_LU, "Ll": C_LL, "Lt": C_LT, "Lm": C_LM, "Lo": C_LO, "Mn": C_M, "Mc": C_M, "Me": C_M,
             "Nd": C_N, "Nl": C_N, "No": C_N, "Cn": C_UNKNOWN}
_classes_table = None


def code_point_classes() -> np.ndarray:
    """Every code point's class for the scanners (made once per process, about 0.5 s):
    its letter case, mark, number or other, unknown where Python's Unicode tables do not
    assign it, and bit ``0x10`` for White_Space."""
    global _classes_table
    if _classes_table is None:
        cat = unicodedata.category
        get = _CATEGORY.get
        t = np.frombuffer(bytes([get(cat(chr(c)), C_OTHER) for c in range(0x110000)]), dtype=np.uint8).copy()
        t[0xD800:0xE000] = C_OTHER  # surrogates: never in valid UTF-8
        t[np.asarray(_WHITE_SPACE)] |= C_WS
        t.flags.writeable = False
        _classes_table = t
    return _classes_table


cdef inline int64_t _lowest(const int32_t* ranks, int64_t n) noexcept nogil:
    """The index of the lowest of ``ranks[:n]`` that is not -1 (the leftmost of equal
    ones), -1 when all are: the next pair to merge."""
    cdef int64_t i, at = -1
    for i in range(n):
        if ranks[i] >= 0 and (at < 0 or ranks[i] < ranks[at]):
            at = i
    return at


cdef class BpeTable:
    """A vocabulary's tokens by their bytes, and the scanner of its pattern:
    ``BpeTable(vocab)`` (:meth:`of` keeps one per vocabulary; ``None`` there when the
    vocabulary has no known pattern).  Ranks are ids: the text tokens' ids must be in
    rank order, as in Llama 3's and Tekken's files."""

    _cache = {}

    def __init__(self, vocab):
        spec = getattr(vocab, "bpe_merges", None)
        pattern = spec.pattern if spec is not None else getattr(vocab, "bpe_pattern", None)
        if (spec is None or spec.split == "pattern") and pattern not in PATTERNS:
            raise ValueError(f"{vocab.name}: no BPE pre-tokenizer for pattern {pattern!r}")
        if spec is None:
            raw, offsets = vocab.byte_table()
            ids = vocab.text_token_ids()
            index = None
        else:  # the model's own tokens by their bytes: the index into them is not the id
            raw, offsets, ids = spec.blob, spec.offsets, np.arange(len(spec.ids), dtype=np.int32)
            index = np.ascontiguousarray(spec.ids, dtype=np.int32)
        blob = np.frombuffer(raw + b"\0", dtype=np.uint8)
        size = 1 << max(4, (2 * len(ids)).bit_length())
        slots = np.full(size, -1, dtype=np.int32)
        classes = code_point_classes()
        self._keep = (blob, offsets, slots, classes, index)
        cdef const uint8_t[::1] b = blob
        cdef const int64_t[::1] o = offsets
        cdef int32_t[::1] s = slots
        cdef const uint8_t[::1] c = classes
        cdef const int32_t[::1] tid = ids
        cdef const int32_t[::1] kid
        self.blob = &b[0]
        self.offsets = &o[0]
        self.slots = &s[0]
        self.mask = <uint64_t>(size - 1)
        self.classes = &c[0]
        self.pattern = PATTERNS.get(pattern, 0)
        if index is not None and len(index):
            kid = index
            self.key_ids = &kid[0]
        cdef Py_ssize_t i
        cdef int32_t t
        cdef uint64_t h
        for i in range(tid.shape[0]):
            t = tid[i]
            h = hash_bytes(self.blob + self.offsets[t], self.offsets[t + 1] - self.offsets[t]) & self.mask
            while self.slots[h] >= 0:
                if self._same(self.slots[h], self.blob + self.offsets[t], self.offsets[t + 1] - self.offsets[t]):
                    raise ValueError(f"{vocab.name}: tokens {self.slots[h]} and {t} have the same bytes: "
                                     "ranks are not ids")
                h = (h + 1) & self.mask
            self.slots[h] = t
        if spec is not None:
            self._merges_from(spec)

    def _merges_from(self, spec):
        """Take a :class:`~toolkit.core.vocab.BpeMerges`' merges, first symbols and split."""
        arr = np.ascontiguousarray(np.asarray(spec.merges, dtype=np.int32).reshape(-1, 3))
        cdef const int32_t[:, ::1] rows = arr
        cdef Py_ssize_t r
        self._keep += (arr,)
        self.merges = True
        self.split = {"none": SPLIT_NONE, "space": SPLIT_SPACE, "pattern": SPLIT_PATTERN}[spec.split]
        self.unit_byte = spec.unit == "byte"
        self.ignore_merges = bool(spec.ignore_merges)
        self.nfc = bool(getattr(spec, "nfc", False))
        for r in range(256):
            self.fallback[r] = int(spec.fallback[r])
        if i64map_init(&self.pairs, 2 * rows.shape[0]) != 0:
            raise MemoryError()
        if rows.shape[0]:
            self.merged = &rows[0, 0]
        for r in range(rows.shape[0]):
            if i64map_put(&self.pairs, pair_key(rows[r, 0], rows[r, 1]), <int32_t>r) != 0:
                raise MemoryError()

    def __dealloc__(self):
        i64map_free(&self.pairs)

    @classmethod
    def of(cls, vocab):
        """The table of ``vocab`` (made once per vocabulary object), or ``None`` when its
        tokenizer is not a BPE known here (tiktoken's with a known pattern, or a Hugging
        Face model read as :class:`~toolkit.core.vocab.BpeMerges`)."""
        key = id(vocab)
        hit = cls._cache.get(key)
        if hit is None or hit[0] is not vocab:
            table = None
            if getattr(vocab, "bpe_pattern", None) in PATTERNS or getattr(vocab, "bpe_merges", None) is not None:
                try:
                    table = cls(vocab)
                except ValueError:
                    table = None
            hit = cls._cache[key] = (vocab, table)
        return hit[1]

    cdef bint _same(self, int32_t t, const uint8_t* p, int64_t n) noexcept nogil:
        return self.offsets[t + 1] - self.offsets[t] == n and memcmp(self.blob + self.offsets[t], p, <size_t>n) == 0

    cdef int32_t lookup(self, const uint8_t* p, int64_t n) noexcept nogil:
        """The id of the text token whose bytes are ``p[:n]``, -1 for none."""
        cdef uint64_t h = hash_bytes(p, n) & self.mask
        cdef int32_t t
        while True:
            t = self.slots[h]
            if t < 0:
                return -1
            if self._same(t, p, n):
                return t if self.key_ids == NULL else self.key_ids[t]
            h = (h + 1) & self.mask

    def tokens(self, data: bytes):
        """:meth:`encode` of ``data``: its ids, or ``None`` where the C path cannot answer."""
        cdef const uint8_t[::1] d = data
        cdef int64_t n = len(data), k
        out = np.zeros(max(n, 1), dtype=np.int32)
        cdef int32_t[::1] o = out
        if n == 0:
            return []
        with nogil:
            k = self.encode(&d[0], n, &o[0], n)
        return None if k < 0 else out[:k].tolist()

    cdef int64_t encode(self, const uint8_t* data, int64_t n, int32_t* out, int64_t cap) noexcept nogil:
        """tiktoken's ``encode_ordinary`` of the UTF-8 text ``data[:n]`` into ``out``
        (at most ``cap`` ids), or the Hugging Face model's ``encode`` (:attr:`merges`):
        how many, or -1 (see the module doc)."""
        cdef int64_t m = 0, i = 0, j, k, got = 0, r
        cdef uint32_t c
        cdef uint8_t b0
        if n <= 0:
            return 0
        # one block: code points, their classes, their byte offsets (n + 1), the merge's parts
        cdef char* mem = <char*>malloc(<size_t>(n + 1) * (8 + 8 + 4 + 4 + 1))
        if mem == NULL:
            return -1
        cdef int64_t* boff = <int64_t*>mem
        cdef int64_t* starts = boff + n + 1
        cdef uint32_t* cps = <uint32_t*>(starts + n + 1)
        cdef int32_t* ranks = <int32_t*>(cps + n + 1)
        cdef uint8_t* cl = <uint8_t*>(ranks + n + 1)
        # strict UTF-8 (what Python's decoder takes), to code points
        while i < n:
            b0 = data[i]
            boff[m] = i
            if b0 < 0x80:
                c = b0
                k = 1
            elif 0xC2 <= b0 <= 0xDF:
                c = b0 & 0x1F
                k = 2
            elif 0xE0 <= b0 <= 0xEF:
                c = b0 & 0x0F
                k = 3
            elif 0xF0 <= b0 <= 0xF4:
                c = b0 & 0x07
                k = 4
            else:
                free(mem)
                return -1
            if i + k > n:
                free(mem)
                return -1
            for j in range(1, k):
                if data[i + j] & 0xC0 != 0x80:
                    free(mem)
                    return -1
                c = (c << 6) | (data[i + j] & 0x3F)
            if (k == 3 and (c < 0x800 or 0xD800 <= c <= 0xDFFF)) or (k == 4 and not 0x10000 <= c <= 0x10FFFF):
                free(mem)
                return -1
            if (self.pattern != 0 and self.classes[c] & C_CLASS == C_UNKNOWN) or (
                    self.merges and ((not self.unit_byte and c == 0x2581) or (self.nfc and c >= 0x300))):
                # (a scanner's class not known; a sentencepiece "▁" in the text, which
                # the model reads as a space's: a space's bytes stand for it here; NFC,
                # which changes no text below U+0300)
                free(mem)
                return -1
            cps[m] = c
            cl[m] = self.classes[c]
            m += 1
            i += k
        boff[m] = n
        i = 0
        while i < m:
            if self.merges and self.split == SPLIT_NONE:
                j = m
            elif self.merges and self.split == SPLIT_SPACE:  # each space starts a piece
                j = i + 1
                while j < m and cps[j] != 32:
                    j += 1
            elif self.pattern == PAT_LLAMA3:
                j = _llama3(cps, cl, i, m, 3)
            elif self.pattern == PAT_QWEN2:
                j = _llama3(cps, cl, i, m, 1)
            elif self.pattern == PAT_GPT2:
                j = _gpt2(cps, cl, i, m)
            else:
                j = _tekken(cps, cl, i, m)
            if j <= i:  # (a scanner that matched nothing: never, but never a loop either)
                free(mem)
                return -1
            if self.merges:  # (starts and ranks: room for n int32 symbols and ranks)
                r = self._merge_piece(data, boff, i, j, out + got, cap - got, <int32_t*>starts, ranks)
            else:
                r = self._piece(data + boff[i], boff[j] - boff[i], out + got, cap - got, starts, ranks)
            if r < 0:
                free(mem)
                return -1
            got += r
            i = j
        free(mem)
        return got

    cdef int32_t _rank(self, int32_t left, int32_t right) noexcept nogil:
        """The rank of the merge of ``left`` then ``right``, -1 for none."""
        return i64map_get(&self.pairs, pair_key(left, right))

    cdef int64_t _merge_piece(self, const uint8_t* p, const int64_t* boff, int64_t a, int64_t b, int32_t* out,
                              int64_t cap, int32_t* syms, int32_t* ranks) noexcept nogil:
        """The ids of the piece of code points ``a:b`` (bytes ``p[boff[a]:boff[b]]``) as
        the ``tokenizers`` crate's BPE makes them (``Word::merge_all``): the first symbols
        (each code point's token, else its bytes' fallback tokens; each byte's token for
        ByteLevel), then the adjacent pair of the lowest merge rank merged, the leftmost
        of equal ranks, until no pair has a merge (its queue pops that order)."""
        cdef int64_t m = 0, k, q, lo = boff[a], hi = boff[b]
        cdef int32_t t, best
        cdef int64_t at
        if self.ignore_merges:
            t = self.lookup(p + lo, hi - lo)
            if t >= 0:
                if cap < 1:
                    return -1
                out[0] = t
                return 1
        if self.unit_byte:
            for q in range(lo, hi):
                t = self.lookup(p + q, 1)
                if t < 0:
                    t = self.fallback[p[q]]
                    if t < 0:
                        return -1
                syms[m] = t
                m += 1
        else:
            for k in range(a, b):
                t = self.lookup(p + boff[k], boff[k + 1] - boff[k])
                if t >= 0:
                    syms[m] = t
                    m += 1
                    continue
                for q in range(boff[k], boff[k + 1]):  # byte fallback (else the unknown token: not here)
                    t = self.fallback[p[q]]
                    if t < 0:
                        return -1
                    syms[m] = t
                    m += 1
        for k in range(m - 1):
            ranks[k] = self._rank(syms[k], syms[k + 1])
        while True:
            at = _lowest(ranks, m - 1)
            if at < 0:
                break
            best = ranks[at]
            syms[at] = self.merged[3 * best + 2]
            for k in range(at + 1, m - 1):
                syms[k] = syms[k + 1]
            for k in range(at + 1, m - 2):
                ranks[k] = ranks[k + 1]
            m -= 1
            ranks[at] = self._rank(syms[at], syms[at + 1]) if at + 1 < m else -1
            if at > 0:
                ranks[at - 1] = self._rank(syms[at - 1], syms[at])
        if m > cap:
            return -1
        for k in range(m):
            out[k] = syms[k]
        return m

    cdef int64_t _piece(self, const uint8_t* p, int64_t n, int32_t* out, int64_t cap, int64_t* starts,
                        int32_t* ranks) noexcept nogil:
        """One piece's ids (tiktoken's ``byte_pair_encode``): the piece's own token when
        it is one, else its bytes merged pair by pair, lowest rank first."""
        cdef int32_t t = self.lookup(p, n)
        cdef int64_t m, i, at
        if t >= 0:
            if cap < 1:
                return -1
            out[0] = t
            return 1
        # parts: boundaries starts[0..m]; ranks[i]: the token of p[starts[i] : starts[i + 2]]
        m = n
        for i in range(n + 1):
            starts[i] = i
        for i in range(n - 1):
            ranks[i] = self.lookup(p + i, 2)
        while True:
            at = _lowest(ranks, m - 1)
            if at < 0:
                break
            # merge parts at and at + 1: drop boundary at + 1
            for i in range(at + 1, m):
                starts[i] = starts[i + 1]
            for i in range(at + 1, m - 2):
                ranks[i] = ranks[i + 1]
            m -= 1
            ranks[at] = self.lookup(p + starts[at], starts[at + 2] - starts[at]) if at + 2 <= m else -1
            if at > 0:
                ranks[at - 1] = self.lookup(p + starts[at - 1], starts[at + 1] - starts[at - 1])
        if m > cap:
            return -1
        for i in range(m):
            t = self.lookup(p + starts[i], starts[i + 1] - starts[i])
            if t < 0:
                return -1
            out[i] = t
        return m


# ------------------------------------------------------------------ scanners --
# Each returns where the pattern's match at code point i ends (> i).  Classes: L is
# Lu|Ll|Lt|Lm|Lo, N numbers, "P" is [^\r\n\p{L}\p{N}], "other" is [^\s\p{L}\p{N}].


cdef inline bint _is_l(uint8_t c) noexcept nogil:
    c &= C_CLASS
    return C_LU <= c <= C_LO


cdef inline bint _is_n(uint8_t c) noexcept nogil:
    return c & C_CLASS == C_N


cdef inline bint _is_p(uint32_t cp, uint8_t c) noexcept nogil:
    return cp != 13 and cp != 10 and not _is_l(c) and not _is_n(c)


cdef inline bint _is_other(uint8_t c) noexcept nogil:
    return not (c & C_WS) and not _is_l(c) and not _is_n(c)


cdef inline bint _is_nl(uint32_t cp) noexcept nogil:
    return cp == 13 or cp == 10


cdef inline int64_t _run_l(const uint8_t* cl, int64_t i, int64_t n) noexcept nogil:
    while i < n and _is_l(cl[i]):
        i += 1
    return i


cdef int64_t _spaces(const uint32_t* cps, const uint8_t* cl, int64_t i, int64_t n) noexcept nogil:
    """The three whitespace alternatives both patterns end with, at a White_Space code
    point: ``\\s*[\\r\\n]+`` (greedy ``\\s*`` gives back up to the run's last newline,
    then ``[\\r\\n]+`` takes it: the match ends after it), ``\\s+(?!\\S)`` (the run, up
    to the text's end, or all of it but its last code point), ``\\s+``."""
    cdef int64_t j = i, last_nl = -1
    while j < n and cl[j] & C_WS:
        if _is_nl(cps[j]):
            last_nl = j
        j += 1
    if last_nl >= 0:
        return last_nl + 1
    if j == n or j - i < 2:
        return j
    return j - 1


cdef int64_t _llama3(const uint32_t* cps, const uint8_t* cl, int64_t i, int64_t n, int64_t digits) noexcept nogil:
    """``(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|
    ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`` (``digits`` 3);
    Qwen2's, the same with ``\\p{N}`` (``digits`` 1)"""
    cdef uint32_t c = cps[i], d, e
    cdef int64_t j
    if c == 39 and i + 1 < n:  # contractions, any case (simple case folding: 'ſ' is an 's')
        d = cps[i + 1] | 0x20 if cps[i + 1] < 128 else (115 if cps[i + 1] == 0x17F else 0)
        if d == 115 or d == 116 or d == 109 or d == 100:  # s t m d
            return i + 2
        if i + 2 < n and (d == 114 or d == 118 or d == 108):  # r v l
            e = cps[i + 2] | 0x20 if cps[i + 2] < 128 else 0
            if (d == 114 and e == 101) or (d == 118 and e == 101) or (d == 108 and e == 108):
                return i + 3
    if _is_p(c, cl[i]) and i + 1 < n and _is_l(cl[i + 1]):
        return _run_l(cl, i + 1, n)
    if _is_l(cl[i]):
        return _run_l(cl, i, n)
    if _is_n(cl[i]):
        j = i + 1
        while j < n and j < i + digits and _is_n(cl[j]):
            j += 1
        return j
    j = i + 1 if c == 32 and i + 1 < n and _is_other(cl[i + 1]) else i
    if _is_other(cl[j]):
        while j < n and _is_other(cl[j]):
            j += 1
        while j < n and _is_nl(cps[j]):
            j += 1
        return j
    return _spaces(cps, cl, i, n)


cdef inline bint _is_upper(uint8_t c) noexcept nogil:
    """``[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]``"""
    c &= C_CLASS
    return c == C_LU or c == C_LT or c == C_LM or c == C_LO or c == C_M


cdef inline bint _is_lower(uint8_t c) noexcept nogil:
    """``[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]``"""
    c &= C_CLASS
    return c == C_LL or c == C_LM or c == C_LO or c == C_M


cdef int64_t _upper_lower(const uint8_t* cl, int64_t i, int64_t n) noexcept nogil:
    """``[upper]*[lower]+`` at ``i``, -1 for no match: the greedy upper run gives back
    code points until a lower one can start (the last such start wins), then the lower
    run is greedy."""
    cdef int64_t a = i, k
    while a < n and _is_upper(cl[a]):
        a += 1
    k = a
    while k >= i:
        if k < n and _is_lower(cl[k]):
            while k < n and _is_lower(cl[k]):
                k += 1
            return k
        k -= 1
    return -1


cdef int64_t _tekken(const uint32_t* cps, const uint8_t* cl, int64_t i, int64_t n) noexcept nogil:
    """``[^\\r\\n\\p{L}\\p{N}]?[upper]*[lower]+|[^\\r\\n\\p{L}\\p{N}]?[upper]+[lower]*|\\p{N}|
    ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`` (upper: Lu Lt Lm Lo M;
    lower: Ll Lm Lo M)"""
    cdef uint32_t c = cps[i]
    cdef int64_t j
    cdef bint p = _is_p(c, cl[i])
    if p and i + 1 < n:
        j = _upper_lower(cl, i + 1, n)
        if j >= 0:
            return j
    j = _upper_lower(cl, i, n)
    if j >= 0:
        return j
    if p and i + 1 < n and _is_upper(cl[i + 1]):
        j = i + 1
    elif _is_upper(cl[i]):
        j = i
    else:
        j = -1
    if j >= 0:
        while j < n and _is_upper(cl[j]):
            j += 1
        while j < n and _is_lower(cl[j]):
            j += 1
        return j
    if _is_n(cl[i]):
        return i + 1
    j = i + 1 if c == 32 and i + 1 < n and _is_other(cl[i + 1]) else i
    if _is_other(cl[j]):
        while j < n and _is_other(cl[j]):
            j += 1
        while j < n and (_is_nl(cps[j]) or cps[j] == 47):
            j += 1
        return j
    return _spaces(cps, cl, i, n)


cdef int64_t _gpt2(const uint32_t* cps, const uint8_t* cl, int64_t i, int64_t n) noexcept nogil:
    """``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``:
    the contractions in lower case only; the optional space is U+0020 alone; whitespace
    as the other patterns' last two alternatives (a run, up to the text's end, or all of
    it but its last code point)."""
    cdef uint32_t c = cps[i], d
    cdef int64_t j = i
    if c == 39 and i + 1 < n:
        d = cps[i + 1]
        if d == 115 or d == 116 or d == 109 or d == 100:  # s t m d
            return i + 2
        if i + 2 < n and ((d == 114 and cps[i + 2] == 101) or (d == 118 and cps[i + 2] == 101)
                          or (d == 108 and cps[i + 2] == 108)):  # re ve ll
            return i + 3
    if c == 32 and i + 1 < n and not (cl[i + 1] & C_WS):
        j = i + 1  # " ?" then a letter, a number or an other: the run after the space
    if _is_l(cl[j]):
        return _run_l(cl, j, n)
    if _is_n(cl[j]):
        while j < n and _is_n(cl[j]):
            j += 1
        return j
    if _is_other(cl[j]):
        while j < n and _is_other(cl[j]):
            j += 1
        return j
    j = i
    while j < n and cl[j] & C_WS:
        j += 1
    if j == n or j - i < 2:
        return j
    return j - 1
