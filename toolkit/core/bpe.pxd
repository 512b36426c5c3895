from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from toolkit.core.cutil cimport I64Map


cdef class BpeTable:
    cdef const uint8_t* blob       # every token's bytes, concatenated (the vocabulary's byte table)
    cdef const int64_t* offsets    # token t's bytes: blob[offsets[t] : offsets[t + 1]]
    cdef int32_t* slots            # open addressing: text token ids (or key_ids' indices) by their bytes' hash, -1 empty
    cdef const int32_t* key_ids    # merges: the id of the token at each index of blob/offsets (NULL: the index is the id)
    cdef uint64_t mask             # slots - 1 (a power of two)
    cdef const uint8_t* classes    # per code point: its class (C_*) and the White_Space bit
    cdef readonly int pattern      # which pre-tokenizer (PAT_LLAMA3, PAT_TEKKEN, PAT_QWEN2, PAT_GPT2; 0: none)
    cdef readonly bint merges      # a Hugging Face BPE with ranked merges (BpeMerges), not ranks by id
    cdef int split                 # merges: how pieces are cut (SPLIT_NONE, SPLIT_SPACE, SPLIT_PATTERN)
    cdef bint unit_byte            # merges: a piece starts as its bytes' tokens (ByteLevel), not its code points'
    cdef bint ignore_merges        # merges: a piece that is a token is that token
    cdef bint nfc                  # merges: NFC first (text from U+0300 on is left to the caller)
    cdef I64Map pairs              # merges: (left id, right id) -> the merge's rank
    cdef const int32_t* merged     # merges: rank -> (left, right, merged id)
    cdef int32_t fallback[256]     # merges: each byte's <0xXX> token, -1 none
    cdef object _keep

    cdef int32_t lookup(self, const uint8_t* p, int64_t n) noexcept nogil
    cdef bint _same(self, int32_t t, const uint8_t* p, int64_t n) noexcept nogil
    cdef int64_t _piece(self, const uint8_t* p, int64_t n, int32_t* out, int64_t cap, int64_t* starts,
                        int32_t* ranks) noexcept nogil
    cdef int64_t _merge_piece(self, const uint8_t* p, const int64_t* boff, int64_t a, int64_t b, int32_t* out,
                              int64_t cap, int32_t* syms, int32_t* ranks) noexcept nogil
    cdef int32_t _rank(self, int32_t left, int32_t right) noexcept nogil
    cdef int64_t encode(self, const uint8_t* data, int64_t n, int32_t* out, int64_t cap) noexcept nogil
