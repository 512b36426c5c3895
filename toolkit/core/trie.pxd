# The flat DFS token trie (see trie.pyx for the layout and the walk).
#
# Other Cython modules cimport this file to walk the same trie with their own
# recognizers: read ``TokenTrie.nodes`` / ``TokenTrie.token_ids`` and follow the
# loop in ``trie_walk_dfa`` (next node and depth bookkeeping are the same for every
# recognizer; only the "push a byte" step differs).

from libc.stdint cimport int32_t, int64_t, uint8_t

from toolkit.core.ids cimport state_t, token_t, word_t


cdef packed struct TrieNode:
    # One node per distinct non-empty prefix of a token's bytes, plus the root at
    # index 0; nodes are stored in DFS order with children in increasing byte order.
    int32_t token_start   # index into token_ids of the first id whose bytes end here;
                          # for a node with no token, where such ids would go (so
                          # token_start never decreases along the array)
    int32_t token_count   # ids whose bytes are exactly this node's prefix (0 for an
                          # inner prefix that is no token; >1 for duplicate tokens)
    int32_t subtree_size  # nodes in this subtree, itself included: p + subtree_size
                          # is the next node once the subtree of p is done or skipped
    int32_t num_parents   # depth(p) - depth(p + subtree_size) + 1, where the end of
                          # the array counts as depth 1: the levels to pop after
                          # pushing p when p is a leaf (subtree_size == 1); after
                          # skipping p without pushing it, pop num_parents - 1. 0 at
                          # the root.
    uint8_t byte          # the byte on the edge from the parent (0 at the root)


cdef struct TokenEnd:
    # A token a DFA walk allowed, and the state its last byte reached.
    token_t token
    state_t state


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
) noexcept nogil


cdef class TokenTrie:
    cdef readonly int32_t num_nodes      # nodes including the root
    cdef readonly int32_t num_tokens     # ids stored (the vocabulary's text tokens)
    cdef readonly int32_t max_depth      # bytes in the longest token: a walk stack needs max_depth + 1
    cdef readonly int32_t vocab_size     # bitmask width in tokens (Vocabulary.size)
    cdef readonly int64_t nodes_visited  # nodes the last allowed_tokens call looked at
    cdef object _nodes_array             # numpy structured array owning the TrieNode records
    cdef object _token_ids_array         # numpy int32 array of the ids (a view of the padded array)
    cdef const TrieNode* nodes           # _nodes_array's data
    cdef const token_t* token_ids        # ids grouped by node, DFS order, then one readable 0
    # The child index (built by ``child_index()`` the first time a walk asks for it, NULL
    # before): node p's children are kid_node[kid_off[p] .. kid_off[p + 1]), in byte order,
    # their bytes kid_byte[...] beside them, so a walk that tests a child's byte against its
    # recognizer skips a dead child without reading the child's record (a cache miss each,
    # where the children of one node lie a subtree apart)
    cdef object _kids                    # the three numpy arrays owning them
    cdef const int32_t* kid_off
    cdef const int32_t* kid_node
    cdef const uint8_t* kid_byte
