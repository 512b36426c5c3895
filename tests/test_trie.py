"""toolkit.core.trie: the flat DFS token trie and its DFA walk.

Layers: a hand-drawn vocabulary with every array written out; a random vocabulary
checked against a trie built from the definition (the set of token prefixes); the
walk checked against running each token through the DFA byte by byte; the Llama 3
vocabulary from ``$MASKLAB_SHARED`` when it is there.
"""

from __future__ import annotations

import time
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from tests._support.shared import require_shared
from toolkit.automata.regex import compile_regex
from toolkit.core import bitmask
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary, load_vocab

LLAMA3_MODEL = "tokenizers/llama-3/tokenizer.model"


def make_vocab(tokens: Sequence[bytes], *, eos_ids: Iterable[int] = (), size: int | None = None):
    """A vocabulary whose EOS ids are special and whose ids past ``tokens`` are padding."""
    return Vocabulary.from_tokens(tokens, eos_ids=tuple(eos_ids), size=size)


class _RawVocab:
    """The three members of ``Vocabulary`` the trie reads, without its checks."""

    def __init__(self, token_bytes: list[bytes], text_ids: Sequence[int] | None = None) -> None:
        self.size = len(token_bytes)
        self.token_bytes = token_bytes
        self._ids = [t for t, b in enumerate(token_bytes) if b] if text_ids is None else text_ids

    def text_token_ids(self) -> np.ndarray:
        return np.asarray(self._ids)


@dataclass
class HandDFA:
    """A hand-drawn ByteDFA: state 0 is DEAD, ``transitions[s, b]`` the next state."""

    transitions: np.ndarray
    accepting: np.ndarray
    start: int = 1


def dfa_from_edges(n_states: int, edges: dict[int, dict[bytes, int]], accepting: Iterable[int]):
    """States 1..n_states-1 with ``edges[s][byte_set] = target``; every other byte is DEAD."""
    trans = np.zeros((n_states, 256), dtype=np.int32)
    for s, out in edges.items():
        for byte_set, target in out.items():
            trans[s, list(byte_set)] = target
    acc = np.zeros(n_states, dtype=bool)
    acc[list(accepting)] = True
    return HandDFA(trans, acc)


DIGITS = b"0123456789"
ALL_BYTES = bytes(range(256))


def digits_dfa() -> HandDFA:
    """[0-9]+"""
    return dfa_from_edges(3, {1: {DIGITS: 2}, 2: {DIGITS: 2}}, [2])


def ab_or_ac_dfa() -> HandDFA:
    """ab|ac"""
    return dfa_from_edges(4, {1: {b"a": 2}, 2: {b"bc": 3}}, [3])


def literal_dfa(text: bytes) -> HandDFA:
    """The literal ``text``."""
    edges = {i + 1: {bytes([c]): i + 2} for i, c in enumerate(text)}
    return dfa_from_edges(len(text) + 2, edges, [len(text) + 1])


def anything_dfa() -> HandDFA:
    """(?s:.)* over bytes: every byte string."""
    return dfa_from_edges(2, {1: {ALL_BYTES: 1}}, [1])


def spaces_dfa(most: int) -> HandDFA:
    """' {0,most}': state k + 1 after k spaces."""
    edges = {k + 1: {b" ": k + 2} for k in range(most)}
    return dfa_from_edges(most + 2, edges, range(1, most + 2))


# -- references ---------------------------------------------------------------------


def reference_allowed(vocab, dfa, state: int) -> set[int]:
    """Ids whose bytes, run from ``state`` one at a time, never reach DEAD."""
    table = dfa.transitions.tolist()
    allowed = set()
    for t in vocab.text_token_ids().tolist():
        s = state
        for byte in vocab.token_bytes[t]:
            if s == 0:
                break
            s = table[s][byte]
        if s != 0:
            allowed.add(t)
    return allowed


def walk_ids(trie: TokenTrie, dfa, state: int) -> set[int]:
    row = trie.allowed_tokens(dfa, state)
    assert row.dtype == np.int32 and row.shape == (bitmask.words(trie.vocab_size),)
    return set(bitmask.allowed_ids(row, trie.vocab_size).tolist())


def reference_trie(vocab) -> dict[str, list[int]]:
    """The arrays, built from the definition: nodes are the sorted distinct prefixes."""
    ids = vocab.text_token_ids().tolist()
    tb = vocab.token_bytes
    prefixes = sorted({tb[t][:k] for t in ids for k in range(1, len(tb[t]) + 1)})
    nodes = [b""] + prefixes
    by_bytes = sorted((tb[t], t) for t in ids)
    keys = [b for b, _ in by_bytes]
    n = len(nodes)
    subtree = []
    for i, p in enumerate(nodes):
        j = i + 1
        while j < n and nodes[j].startswith(p):
            j += 1
        subtree.append(j - i)
    parents = [0]
    for i in range(1, n):
        nxt = i + subtree[i]
        parents.append(len(nodes[i]) - (len(nodes[nxt]) if nxt < n else 1) + 1)
    starts = [bisect_left(keys, p) if p else 0 for p in nodes]
    counts = [keys.count(p) if p else 0 for p in nodes]
    return {
        "prefixes": nodes,
        "node_bytes": [p[-1] if p else 0 for p in nodes],
        "subtree_size": subtree,
        "num_parents": parents,
        "token_start": starts,
        "token_count": counts,
        "token_ids": [t for _, t in by_bytes],
    }


def trie_arrays(trie: TokenTrie) -> dict[str, list[int]]:
    return {
        "node_bytes": trie.node_bytes.tolist(),
        "subtree_size": trie.subtree_size.tolist(),
        "num_parents": trie.num_parents.tolist(),
        "token_start": trie.token_start.tolist(),
        "token_count": trie.token_count.tolist(),
        "token_ids": trie.token_ids.tolist(),
    }


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def random_vocab(rng: np.random.Generator, n: int = 1500):
    """Short tokens over a small alphabet (many shared prefixes), duplicates, specials, padding."""
    alphabet = [ord(c) for c in "ab 0\n"] + [0x00, 0x80, 0xE2, 0xFF]
    tokens: list[bytes] = [b"<eos>"]
    for _ in range(n):
        if len(tokens) > 10 and rng.random() < 0.03:
            tokens.append(tokens[int(rng.integers(1, len(tokens)))])  # duplicate bytes
        else:
            length = int(min(rng.geometric(0.3), 12))
            tokens.append(bytes(rng.choice(alphabet, size=length).tolist()))
    return make_vocab(tokens, eos_ids=[0], size=len(tokens) + 37)


def random_dfa(rng: np.random.Generator, n_states: int = 7, dead: float = 0.3) -> HandDFA:
    trans = rng.integers(1, n_states, size=(n_states, 256), dtype=np.int32)
    trans[rng.random((n_states, 256)) < dead] = 0
    trans[0] = 0
    return HandDFA(trans, rng.random(n_states) < 0.5)


# -- the hand-drawn vocabulary ----------------------------------------------------------

HAND_TOKENS = [
    b"<eos>",  # 0, EOS: special, never in the trie
    b" ",  # 1
    b"  ",  # 2
    b" a",  # 3
    b"a",  # 4
    b"ab",  # 5
    b"abc",  # 6
    b"abd",  # 7
    b"ac",  # 8
    b"b",  # 9
    b"ba",  # 10
    b"bab",  # 11
    b"1",  # 12
    b"12",  # 13
    b"123",  # 14
    b"2",  # 15
    b"ab",  # 16, same bytes as 5
    b"xyz",  # 17, "x" and "xy" are no tokens
    b"\xe2\x82\xac",  # 18, the euro sign
    b"\xe2\x82",  # 19, its first two bytes
    b"\xff",  # 20
    b"}",  # 21
    b"},",  # 22
    b"c",  # 23
]
HAND_SIZE = 40  # ids 24..39 are padding


@pytest.fixture(scope="module")
def hand_vocab():
    return make_vocab(HAND_TOKENS, eos_ids=[0], size=HAND_SIZE)


@pytest.fixture(scope="module")
def hand_trie(hand_vocab) -> TokenTrie:
    return TokenTrie(hand_vocab)


def test_hand_drawn_trie(hand_trie: TokenTrie) -> None:
    r"""The trie of HAND_TOKENS, node index: edge byte [token ids], depth by indentation.

    ::

        0 root                      subtree  parents  start count
          1 " "   [1]                   3       1       0     1
            2 " "   [2]                 1       1       1     1
            3 "a"   [3]                 1       2       2     1
          4 "1"   [12]                  3       1       3     1
            5 "2"   [13]                2       2       4     1
              6 "3"   [14]              1       3       5     1
          7 "2"   [15]                  1       1       6     1
          8 "a"   [4]                   5       1       7     1
            9 "b"   [5, 16]             3       1       8     2
              10 "c"  [6]               1       1      10     1
              11 "d"  [7]               1       2      11     1
            12 "c"  [8]                 1       2      12     1
          13 "b"  [9]                   3       1      13     1
            14 "a"  [10]                2       2      14     1
              15 "b"  [11]              1       3      15     1
          16 "c"  [23]                  1       1      16     1
          17 "x"  []                    3       1      17     0
            18 "y"  []                  2       2      17     0
              19 "z"  [17]              1       3      17     1
          20 "}"  [21]                  2       1      18     1
            21 ","  [22]                1       2      19     1
          22 0xE2 []                    3       1      20     0
            23 0x82 [19]                2       2      20     1
              24 0xAC [18]              1       3      21     1
          25 0xFF [20]                  1       1      22     1

    num_parents[p] = depth(p) - depth(p + subtree[p]) + 1, the end counting as depth 1:
    after leaf 6 ("123", depth 3) the next node 7 ("2") is at depth 1, so pop 3.
    """
    t = hand_trie
    assert (t.num_nodes, t.num_tokens, t.max_depth, t.vocab_size) == (26, 23, 3, HAND_SIZE)
    assert t.node_bytes.tolist() == [0, *b"  a123", *b"2abcdcbabcxyz},", 0xE2, 0x82, 0xAC, 0xFF]
    assert t.subtree_size.tolist() == [
        26, 3, 1, 1, 3, 2, 1, 1, 5, 3, 1, 1, 1, 3, 2, 1, 1, 3, 2, 1, 2, 1, 3, 2, 1, 1,
    ]  # fmt: skip
    assert t.num_parents.tolist() == [
        0, 1, 1, 2, 1, 2, 3, 1, 1, 1, 1, 2, 2, 1, 2, 3, 1, 1, 2, 3, 1, 2, 1, 2, 3, 1,
    ]  # fmt: skip
    assert t.token_start.tolist() == [
        0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 17, 17, 18, 19, 20, 20, 21, 22,
    ]  # fmt: skip
    assert t.token_count.tolist() == [
        0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1,
    ]  # fmt: skip
    assert t.token_ids.tolist() == [
        1, 2, 3, 12, 13, 14, 15, 4, 5, 16, 6, 7, 8, 9, 10, 11, 23, 17, 21, 22, 19, 18, 20,
    ]  # fmt: skip


def test_hand_drawn_prefix_bytes(hand_trie: TokenTrie) -> None:
    expected = [b"", b" ", b"  ", b" a", b"1", b"12", b"123", b"2", b"a", b"ab", b"abc", b"abd"]
    expected += [b"ac", b"b", b"ba", b"bab", b"c", b"x", b"xy", b"xyz", b"}", b"},", b"\xe2"]
    expected += [b"\xe2\x82", b"\xe2\x82\xac", b"\xff"]
    assert [hand_trie.token_prefix_bytes(p) for p in range(hand_trie.num_nodes)] == expected
    with pytest.raises(IndexError):
        hand_trie.token_prefix_bytes(26)


def test_views_are_read_only(hand_trie: TokenTrie) -> None:
    for name in ("node_bytes", "subtree_size", "num_parents", "token_start", "token_count"):
        view = getattr(hand_trie, name)
        assert view.shape == (hand_trie.num_nodes,)
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        hand_trie.token_ids[0] = 0


def test_memory_bytes(hand_trie: TokenTrie) -> None:
    # 17-byte packed node records (4 int32 fields and the byte) plus one int32 per id.
    assert hand_trie.memory_bytes() == 26 * 17 + 23 * 4


def test_child_index_lists_each_nodes_children_by_prefix(rng: np.random.Generator) -> None:
    # node p's children are the nodes whose prefix is p's and one byte more, in byte order
    for trie in (TokenTrie(random_vocab(rng, n=3000)), TokenTrie(make_vocab([b"<eos>"], eos_ids=[0], size=33))):
        before = trie.memory_bytes()
        off, kids, kb = trie.child_index()
        n = trie.num_nodes
        assert off.shape == (n + 1,) and kids.shape == kb.shape == (n - 1,) and off[0] == 0 and off[n] == n - 1
        prefix = [trie.token_prefix_bytes(p) for p in range(n)]
        by_parent: dict[bytes, list[int]] = {}
        for c in range(1, n):
            by_parent.setdefault(prefix[c][:-1], []).append(c)
        for p in range(n):
            got = kids[off[p] : off[p + 1]].tolist()
            assert got == sorted(by_parent.get(prefix[p], []), key=lambda c: prefix[c])
            assert kb[off[p] : off[p + 1]].tolist() == [prefix[c][-1] for c in got]
        assert trie.child_index()[0] is off  # built once, then kept
        assert trie.memory_bytes() == before + off.nbytes + kids.nbytes + kb.nbytes
        with pytest.raises(ValueError, match="read-only"):
            kids[0:1] = 0


# -- the hand-drawn walks -------------------------------------------------------------


@pytest.mark.parametrize(
    ("dfa", "state", "expected", "visited"),
    [
        # From the start of [0-9]+: the ten children of the root, then "12", "123".
        (digits_dfa(), 1, {12, 13, 14, 15}, 12),
        (digits_dfa(), 0, set(), 0),
        # ab|ac from the start: "a", "ab" (x2), "ac"; "abc"/"abd" overshoot.
        (ab_or_ac_dfa(), 1, {4, 5, 16, 8}, 14),
        # After the "a": one more byte, b or c; "ba" is visited and skipped.
        (ab_or_ac_dfa(), 2, {9, 23}, 11),
        # In the accepting state nothing may follow.
        (ab_or_ac_dfa(), 3, set(), 10),
        (literal_dfa(b"xyz!"), 1, {17}, 12),
        (literal_dfa(b"\xe2\x82\xac"), 1, {18, 19}, 12),
        (anything_dfa(), 1, set(range(1, 24)), 25),
    ],
)
def test_hand_drawn_walk(hand_vocab, hand_trie, dfa, state, expected, visited) -> None:
    assert walk_ids(hand_trie, dfa, state) == expected == reference_allowed(hand_vocab, dfa, state)
    assert hand_trie.nodes_visited == visited


def test_specials_and_padding_are_never_allowed(hand_trie: TokenTrie) -> None:
    row = hand_trie.allowed_tokens(anything_dfa(), 1)
    assert bitmask.popcount(row) == 23
    assert not bitmask.get_bit(row, 0)
    assert not any(bitmask.get_bit(row, t) for t in range(24, 64))


def test_out_is_overwritten(hand_trie: TokenTrie) -> None:
    batch = np.full((3, 2), -1, dtype=np.int32)
    out = hand_trie.allowed_tokens(digits_dfa(), 1, out=batch[1])
    assert np.shares_memory(out, batch[1])
    assert set(bitmask.allowed_ids(batch[1], HAND_SIZE).tolist()) == {12, 13, 14, 15}
    assert (batch[0] == -1).all() and (batch[2] == -1).all()


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.zeros(2, dtype=np.int64), "int32"),
        (np.zeros(3, dtype=np.int32), r"shape \(2,\)"),
        (np.zeros((1, 2), dtype=np.int32), r"shape \(2,\)"),
        (np.zeros(4, dtype=np.int32)[::2], "C-contiguous"),
        ([0, 0], "numpy"),
    ],
)
def test_bad_out(hand_trie: TokenTrie, out, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hand_trie.allowed_tokens(digits_dfa(), 1, out=out)


def test_bad_dfa(hand_trie: TokenTrie) -> None:
    good = digits_dfa().transitions
    cases = [
        (HandDFA(good.astype(np.int64), np.zeros(3, bool)), "dtype int32"),
        (HandDFA(good[:, :128].copy(), np.zeros(3, bool)), "shape"),
        (HandDFA(np.zeros((0, 256), np.int32), np.zeros(0, bool)), "shape"),
        (HandDFA(np.asfortranarray(good), np.zeros(3, bool)), "C-contiguous"),
        (HandDFA(good.tolist(), np.zeros(3, bool)), "numpy array"),
        (object(), "numpy array"),
    ]
    for dfa, message in cases:
        with pytest.raises(ValueError, match=message):
            hand_trie.allowed_tokens(dfa, 1)
    for state in (-1, 3):
        with pytest.raises(ValueError, match="outside"):
            hand_trie.allowed_tokens(digits_dfa(), state)
    broken = digits_dfa()
    broken.transitions[2, ord("3")] = 7  # a state the table does not have
    with pytest.raises(ValueError, match="outside"):
        hand_trie.allowed_tokens(broken, 1)


def test_bad_vocab() -> None:
    with pytest.raises(ValueError, match="text token 1 has empty bytes"):
        TokenTrie(_RawVocab([b"a", b""], text_ids=[0, 1]))
    short = _RawVocab([b"a", b"b"])
    short.size = 3
    with pytest.raises(ValueError, match="token_bytes has 2 entries"):
        TokenTrie(short)
    with pytest.raises(ValueError, match="twice"):
        TokenTrie(_RawVocab([b"a", b"b"], text_ids=[0, 1, 1]))
    with pytest.raises(ValueError, match="outside"):
        TokenTrie(_RawVocab([b"a", b"b"], text_ids=[0, 2]))
    with pytest.raises(ValueError, match="integer"):
        TokenTrie(_RawVocab([b"a", b"b"], text_ids=[0.0, 1.0]))


def test_vocabulary_without_text_tokens() -> None:
    trie = TokenTrie(make_vocab([b"<eos>"], eos_ids=[0], size=33))
    assert (trie.num_nodes, trie.num_tokens, trie.max_depth) == (1, 0, 0)
    row = trie.allowed_tokens(anything_dfa(), 1)
    assert row.shape == (2,) and not row.any()


def test_token_blob_spells_every_token_in_trie_order(rng: np.random.Generator) -> None:
    for vocab in (random_vocab(rng), make_vocab([b"<eos>"], eos_ids=[0], size=33)):
        trie = TokenTrie(vocab)
        blob, offsets = trie.token_blob()
        assert blob.dtype == np.uint8 and offsets.dtype == np.int64 and offsets.shape == (trie.num_tokens + 1,)
        got = [bytes(blob[offsets[i] : offsets[i + 1]]) for i in range(trie.num_tokens)]
        assert got == [vocab.token_bytes[t] for t in trie.token_ids.tolist()]
        assert offsets[-1] == blob.size


# -- random vocabularies --------------------------------------------------------------


def test_random_trie_matches_definition(rng: np.random.Generator) -> None:
    vocab = random_vocab(rng)
    trie = TokenTrie(vocab)
    ref = reference_trie(vocab)
    prefixes = ref.pop("prefixes")
    assert trie.num_nodes == len(prefixes)
    assert trie_arrays(trie) == ref
    assert trie.max_depth == max(len(p) for p in prefixes)
    # The tokens of a whole subtree are one slice of token_ids.
    starts = np.append(trie.token_start, trie.num_tokens)
    for p in rng.integers(0, trie.num_nodes, size=50).tolist():
        owned = trie.token_ids[starts[p] : starts[p + trie.subtree_size[p]]]
        expected = [t for t in ref["token_ids"] if vocab.token_bytes[t].startswith(prefixes[p])]
        assert sorted(owned.tolist()) == sorted(expected)


def test_random_trie_invariants(rng: np.random.Generator) -> None:
    trie = TokenTrie(random_vocab(rng, n=4000))
    size, parents = trie.subtree_size, trie.num_parents
    n = trie.num_nodes
    assert size[0] == n and parents[0] == 0
    # Replay a full walk using only num_parents for depth, as a walker does.
    depth, depths = 1, [0]
    for p in range(1, n):
        depths.append(depth)
        depth = depth + 1 if size[p] > 1 else depth - parents[p] + 1
    assert depths == [len(trie.token_prefix_bytes(p)) for p in range(n)]
    for p in range(1, n):
        q = p + size[p]
        assert q <= n
        assert parents[p] == depths[p] - (depths[q] if q < n else 1) + 1
        # A subtree is its node's children's subtrees laid end to end.
        child, total = p + 1, 1
        while child < q:
            assert depths[child] == depths[p] + 1
            total += size[child]
            child += size[child]
        assert total == size[p]
    assert np.all(np.diff(trie.token_start) >= 0)
    leaves = size == 1
    assert np.all(trie.token_count[leaves] >= 1)
    assert int(trie.token_count.sum()) == trie.num_tokens


def test_random_walks_match_reference(rng: np.random.Generator) -> None:
    vocab = random_vocab(rng)
    trie = TokenTrie(vocab)
    for dead in (0.1, 0.3, 0.6):
        dfa = random_dfa(rng, dead=dead)
        for state in range(dfa.transitions.shape[0]):
            assert walk_ids(trie, dfa, state) == reference_allowed(vocab, dfa, state)


def test_long_tokens() -> None:
    tokens = [b" " * n for n in (1, 2, 999, 1000, 1001, 1100)] + [b" " * 1100 + b"x", b"x"]
    vocab = make_vocab(tokens)
    trie = TokenTrie(vocab)
    assert trie.max_depth == 1101
    assert trie.num_nodes == 1 + 1101 + 1
    dfa = spaces_dfa(1000)
    assert walk_ids(trie, dfa, 1) == {0, 1, 2, 3} == reference_allowed(vocab, dfa, 1)
    # 900 spaces already read: 100 more fit.
    assert walk_ids(trie, dfa, 901) == {0, 1} == reference_allowed(vocab, dfa, 901)
    assert walk_ids(trie, anything_dfa(), 1) == set(range(8))


# -- compiled regexes -----------------------------------------------------------------

REGEXES = [r"[0-9]+", r"ab|ac", r"a(b|\x00)*", r"[ab ]{2,5}", r"\n|0+ a", r"[^a]*", r"€\d"]


@pytest.mark.parametrize("pattern", REGEXES)
def test_compiled_regex_walks(rng: np.random.Generator, hand_vocab, hand_trie, pattern) -> None:
    dfa = compile_regex(pattern)
    vocab = random_vocab(rng)
    trie = TokenTrie(vocab)
    for state in range(dfa.transitions.shape[0]):
        assert walk_ids(trie, dfa, state) == reference_allowed(vocab, dfa, state)
        assert walk_ids(hand_trie, dfa, state) == reference_allowed(hand_vocab, dfa, state)


# -- Llama 3 ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama3():
    vocab = load_vocab("llama3:" + str(require_shared(LLAMA3_MODEL)))
    start = time.perf_counter()
    trie = TokenTrie(vocab)
    return vocab, trie, time.perf_counter() - start


@pytest.mark.shared
def test_llama3_trie(llama3) -> None:
    vocab, trie, build_seconds = llama3
    assert vocab.size == 128_256
    assert trie.num_tokens == 128_000
    assert trie.num_nodes == 274_521
    assert build_seconds < 5.0  # a sanity bound; the build takes well under a second


@pytest.mark.shared
def test_llama3_digits(llama3) -> None:
    vocab, trie, _ = llama3
    digits = {t for t, b in enumerate(vocab.token_bytes) if b and all(48 <= c <= 57 for c in b)}
    assert len(digits) == 1110  # Llama 3 merges digits in runs of at most three
    assert walk_ids(trie, digits_dfa(), 1) == digits
    compiled = compile_regex("[0-9]+")
    assert walk_ids(trie, compiled, compiled.start) == digits
