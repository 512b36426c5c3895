from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t


cdef class BpeTable:
    cdef const uint8_t* blob       # every token's bytes, concatenated (the vocabulary's byte table)
    cdef const int64_t* offsets    # token t's bytes: blob[offsets[t] : offsets[t + 1]]
    cdef int32_t* slots            # open addressing: text token ids by the hash of their bytes, -1 empty
    cdef uint64_t mask             # slots - 1 (a power of two)
    cdef const uint8_t* classes    # per code point: its class (C_*) and the White_Space bit
    cdef readonly int pattern      # which pre-tokenizer (PAT_LLAMA3, PAT_TEKKEN)
    cdef object _keep

    cdef int32_t lookup(self, const uint8_t* p, int64_t n) noexcept nogil
    cdef bint _same(self, int32_t t, const uint8_t* p, int64_t n) noexcept nogil
    cdef int64_t _piece(self, const uint8_t* p, int64_t n, int32_t* out, int64_t cap, int64_t* starts,
                        int32_t* ranks) noexcept nogil
    cdef int64_t encode(self, const uint8_t* data, int64_t n, int32_t* out, int64_t cap) noexcept nogil
