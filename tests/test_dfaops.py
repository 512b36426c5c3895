"""toolkit.automata.dfaops: products of byte DFAs against re, and boolean terminals in every writer."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.fixtures import llguidance_byte_tokenizer
from toolkit.automata import _dfabuild
from toolkit.automata.dfaops import (
    WordsForm,
    compile_boolean,
    difference,
    disjoint,
    intersect,
    union,
)
from toolkit.automata.regex import compile_regex
from toolkit.core.errors import LimitExceeded
from toolkit.grammar.ir import Grammar, Terminal

PATTERNS = ["[a-c]*", "a+b?", "(ab|c){1,3}", ".{0,3}", "[^a]*", "é+|a", "x*", "(a|bc)*c", ""]
TEXTS = st.text(alphabet="abcxé", max_size=7)


def _m(p: str, s: str) -> bool:
    return re.fullmatch(p, s, re.ASCII) is not None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATTERNS), st.sampled_from(PATTERNS), TEXTS)
def test_products_agree_with_re(p: str, q: str, s: str) -> None:
    a, b = compile_regex(p), compile_regex(q)
    data = s.encode()
    assert intersect(a, b).fullmatch(data) == (_m(p, s) and _m(q, s))
    assert union(a, b).fullmatch(data) == (_m(p, s) or _m(q, s))
    assert difference(a, b).fullmatch(data) == (_m(p, s) and not _m(q, s))


@pytest.mark.parametrize(
    "op, p, q, same_as",
    [
        (intersect, "[a-z]*", "[a-m0-9]*", "[a-m]*"),
        (intersect, "[a-z]*x", "[a-mx]*", "[a-mx]*x"),
        (difference, "[a-z]+", "[b-z][a-z]*", "a[a-z]*"),
        (union, "a+", "b", "a+|b"),
    ],
)
def test_products_are_canonical(op, p: str, q: str, same_as: str) -> None:
    # Equal languages give equal arrays, however they were built.
    built = op(compile_regex(p), compile_regex(q))
    direct = compile_regex(same_as)
    assert built.start == direct.start
    assert (built.transitions == direct.transitions).all()
    assert (built.accepting == direct.accepting).all()


def test_product_limit_is_an_error() -> None:
    """A product past ``max_states`` reachable pairs raises LimitExceeded, naming the
    limit: the limit bounds the construction, not the minimal result (35 states here)."""
    a, b = compile_regex("(a|b)*a(a|b){6}"), compile_regex("(a|b)*b(a|b){5}")
    with pytest.raises(LimitExceeded) as e:
        intersect(a, b, max_states=50)
    assert e.value.limit == "max_states" and e.value.maximum == 50
    assert intersect(a, b).n_states == 35  # the same product under the default limit


def test_minimize_merges_equivalent_states() -> None:
    """The C minimizer on a hand-made table: states 2 and 3 (both "one more a, then
    accept") merge, the result is numbered canonically and keeps the language."""
    table = np.zeros((5, 2), dtype=np.int32)  # classes: 0 = "a", 1 = "b"
    table[1] = [2, 3]  # start: a -> 2, b -> 3
    table[2] = [4, 0]
    table[3] = [4, 0]
    table[4] = [0, 0]
    acc = np.array([0, 0, 0, 0, 1], dtype=np.uint8)
    small, out_acc = _dfabuild.minimize(table, acc)
    assert small.tolist() == [[0, 0], [2, 2], [3, 0], [0, 0]]
    assert out_acc.tolist() == [False, False, False, True]
    with pytest.raises(ValueError):
        _dfabuild.minimize(table, acc[:3])


def test_dfabuild_refuses_malformed_input() -> None:
    """Out-of-range states or bytes are a ValueError before any C loop indexes by them."""
    table = np.zeros((3, 2), dtype=np.int32)
    table[1] = [2, 7]  # state 7 does not exist
    acc = np.array([0, 0, 1], dtype=np.uint8)
    with pytest.raises(ValueError, match="targets must be states 0..2"):
        _dfabuild.minimize(table, acc)
    good = np.array([[0, 0], [2, 0], [0, 0]], dtype=np.int32)
    with pytest.raises(ValueError, match="targets must be states"):
        _dfabuild.product(good, acc, 1, table, acc, 1, "and", 100)
    with pytest.raises(ValueError, match="start states"):
        _dfabuild.product(good, acc, 5, good, acc, 1, "and", 100)
    cols = np.array([1, 0], dtype=np.int32)
    with pytest.raises(ValueError, match="both DFAs or of neither"):
        _dfabuild.product(good, acc, 1, good, acc, 1, "and", 100, cols)
    with pytest.raises(ValueError, match="same classes"):  # a column the table does not have
        _dfabuild.product(good, acc, 1, good, acc, 1, "and", 100, cols, np.array([0, 2], dtype=np.int32))
    # read through its column maps, a table is the copy of its columns
    assert all(np.array_equal(x, y) for x, y in zip(
        _dfabuild.product(good, acc, 1, good, acc, 1, "or", 100, cols, cols),
        _dfabuild.product(good[:, cols].copy(), acc, 1, good[:, cols].copy(), acc, 1, "or", 100), strict=True))
    with pytest.raises(ValueError, match="the edge"):
        _dfabuild.determinize([[], []], [((0, 300, 1),), ()], 0, 1, 100)
    with pytest.raises(ValueError, match="the edge"):
        _dfabuild.determinize([[], []], [((97, 97, 5),), ()], 0, 1, 100)
    with pytest.raises(ValueError, match="epsilon move"):
        _dfabuild.determinize([[-3], []], [(), ()], 0, 1, 100)
    table, accepting, cuts = _dfabuild.determinize([[], []], [((97, 97, 1),), ()], 0, 1, 100)
    assert cuts == [0, 97, 98, 256] and accepting.tolist() == [False, False, True]  # "a": dead, start, end


def test_disjoint_and_empty() -> None:
    assert disjoint(compile_regex("a+"), compile_regex("b+"))
    assert intersect(compile_regex("a+"), compile_regex("b+")).is_empty()
    assert not disjoint(compile_regex("a+"), compile_regex("[ab]"))


def test_compile_boolean_and_terminal() -> None:
    t = Terminal("T", "[a-z]+", also=(".{0,3}",), excluding=("ab", "b.*"))
    dfa = t.dfa()
    assert dfa is compile_boolean("[a-z]+", (".{0,3}",), ("ab", "b.*"))
    for s, ok in [("a", True), ("ab", False), ("abc", True), ("abcd", False), ("bc", False), ("", False)]:
        assert dfa.fullmatch(s.encode()) == ok, s
    assert not t.is_plain and Terminal("U", "x").is_plain


def _byte_tokenizer():
    return llguidance_byte_tokenizer()


def test_boolean_terminals_mean_the_same_in_llguidance() -> None:
    llguidance, tok = _byte_tokenizer()
    g = Grammar("start", {"start": (("T",),)},
                {"T": Terminal("T", "[a-z]+", also=(".{0,3}",), excluding=("ab",))})
    text = g.to_lark()
    assert "&" in text and "~" in text
    for s in ["a", "ab", "abc", "abcd", "", "zz"]:
        m = llguidance.LLMatcher(tok, llguidance.grammar_from("lark", text))
        ok = m.consume_tokens(list(s.encode())) and not m.is_error() and m.is_accepting()
        assert bool(ok) == g.accepts(s), s


WORD_CHARS = list("ab\"\\ .|-\t{}*") + ["é", "中", "😀", "\x00", "\x7f"]
WORDS = st.lists(st.text(alphabet=WORD_CHARS, max_size=5), min_size=1, max_size=8)
BASES = ['"[^"\\\\\\x00-\\x1f]*"', "[a-c]*", "a(?:b|c)*|x", "(?:ab)+", '"(?:[^"\\\\]|\\\\.)*"', ".*", "", "x*y"]


def _same(a, b) -> bool:
    return (a.start == b.start and np.array_equal(a.table, b.table) and np.array_equal(a.classes, b.classes)
            and np.array_equal(a.accepting, b.accepting))


@settings(max_examples=300, deadline=None)
@given(WORDS, st.text(alphabet="\"ab", max_size=2), st.text(alphabet="\"ab", max_size=2))
def test_a_set_of_literals_is_written_down_as_the_regex_road_builds_it(words, pre, post) -> None:
    """compile_regex's trie road (literal_words -> literal_set) gives the subset
    construction's arrays, and literal_words reads back exactly the words."""
    from toolkit.automata.nfa import compile_nfa
    from toolkit.automata.regex import _direct, literal_words

    pattern = re.escape(pre) + "(?:" + "|".join(re.escape(w) for w in words) + ")" + re.escape(post)
    assert literal_words(pattern) == sorted({(pre + w + post).encode() for w in words})
    assert _same(_direct(pattern, 200_000), compile_nfa(pattern, 200_000, False))


def test_literal_words_reads_only_escaped_literals() -> None:
    from toolkit.automata.regex import literal_words

    assert literal_words("ab") == [b"ab"]
    assert literal_words('"(?:a|b\\|c|)"') == [b'""', b'"a"', b'"b|c"']
    for pattern in ("a.b", "(?i)ab", "a\\d", "a(?:b)c(?:d)", "(?:a|b)*", "a|b", "[ab]", '"(?:\ud800)"'):
        assert literal_words(pattern) is None, pattern


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(BASES), WORDS, st.booleans())
def test_minus_words_is_the_difference_with_the_words(base, words, quoted) -> None:
    """compile_boolean's road for excluded words (WordsForm): the trie in front of the DFA, equal
    to the product with the alternation's DFA, array for array."""
    from toolkit.automata.dfaops import minus_words

    q = '"' if quoted else ""
    ex = [(q + w + q).encode() for w in words]
    got = minus_words(compile_regex(base), sorted(set(ex)))
    want = difference(compile_regex(base), compile_regex("(?:" + "|".join(re.escape(w.decode()) for w in ex) + ")"))
    assert _same(got, want)
    excluded_regex = q + "(?:" + "|".join(re.escape(w) for w in words) + ")" + q
    assert _same(compile_boolean(base, (), (excluded_regex,)), want)
    formed = ((excluded_regex, WordsForm(tuple(sorted(set(ex))))),)  # the road the schema compiler's keys take
    assert _same(compile_boolean(base, (), (excluded_regex,), forms=formed), want)


def test_minus_words_limit_and_empty() -> None:
    from toolkit.automata.dfaops import minus_words

    assert minus_words(compile_regex("a|b"), [b"a", b"b"]).is_empty()
    assert minus_words(compile_regex("[a-z]*"), [b"abc"]).fullmatch(b"abd")
    with pytest.raises(LimitExceeded):
        minus_words(compile_regex("[a-z]*"), [bytes([97 + i % 26]) * 30 + str(i).encode() for i in range(20)],
                    max_states=50)


@pytest.mark.parametrize("rx", ["[ab]+", "a*", "(ab|a)(b)?", "a[ab]*b", "[ab]*", "b|ab|aab", "[^\\d\\D]", "(a|b)*a(a|b)"])
def test_shortest_matches_keeps_the_strings_no_proper_prefix_of_which_matches(rx: str) -> None:
    import itertools

    from toolkit.automata.dfaops import shortest_matches

    base = compile_regex(rx)
    lazy = shortest_matches(base)
    for n in range(6):
        for w in map(bytes, itertools.product(b"ab", repeat=n)):
            want = base.fullmatch(w) and not any(base.fullmatch(w[:k]) for k in range(len(w)))
            assert lazy.fullmatch(w) == want, (rx, w)


def _horizon_brute(table: np.ndarray, acc: np.ndarray, rounds: int) -> np.ndarray:
    """r-equivalence by its definition, Moore's rounds in full: the verdict (dead,
    live, accepting) after each prefix of every word of at most ``rounds`` classes."""
    n = table.shape[0]
    lab = [0 if s == 0 else 1 + int(acc[s]) for s in range(n)]
    for _ in range(rounds):
        sig = [(lab[s], *(lab[t] for t in table[s])) for s in range(n)]
        ids: dict[tuple, int] = {}
        lab = [ids.setdefault(x, len(ids)) for x in sig]
    first: dict[int, int] = {}
    return np.array([first.setdefault(lab[s], s) for s in range(n)], dtype=np.int32)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 40), st.integers(1, 4), st.integers(0, 12), st.randoms(use_true_random=False))
def test_horizon_classes_are_moore_rounds_stopped(n: int, k: int, rounds: int, rnd) -> None:
    """Equal to Moore's refinement run round by round for ``rounds`` rounds, on random
    DFAs (any shape: unreachable, dead-ending and cyclic states)."""
    table = np.array([[0] * k] + [[rnd.randrange(n) for _ in range(k)] for _ in range(n - 1)], dtype=np.int32)
    acc = np.array([0] + [rnd.random() < 0.3 for _ in range(n - 1)], dtype=np.uint8)
    got = _dfabuild.horizon_classes(table, acc, rounds)
    assert got.tolist() == _horizon_brute(table, acc, rounds).tolist()


def test_horizon_classes_share_a_long_counter_away_from_its_ends() -> None:
    """A string of at most 300 letters: the positions a 16-byte word cannot carry to
    either end are one class (what lets the mask tables share their rows), those near
    the ends stay apart; with rounds past the length every position is its own."""
    d = compile_regex("[a-z]{3,300}")
    reps = _dfabuild.horizon_classes(d.table, d.accepting.view(np.uint8), 16)
    assert reps.tolist() == _horizon_brute(d.table, d.accepting.view(np.uint8), 16).tolist()
    classes = set(reps.tolist())
    assert len(classes) < 40 < d.n_states
    full = _dfabuild.horizon_classes(d.table, d.accepting.view(np.uint8), 400)
    assert len(set(full.tolist())) == d.n_states


def test_horizon_classes_refuses_malformed_input() -> None:
    with pytest.raises(ValueError, match="one flag per state"):
        _dfabuild.horizon_classes(np.zeros((3, 2), dtype=np.int32), np.zeros(2, dtype=np.uint8), 3)
    with pytest.raises(ValueError, match="rounds must be >= 0"):
        _dfabuild.horizon_classes(np.zeros((3, 2), dtype=np.int32), np.zeros(3, dtype=np.uint8), -1)
    with pytest.raises(ValueError, match="transition targets"):
        _dfabuild.horizon_classes(np.full((3, 2), 7, dtype=np.int32), np.zeros(3, dtype=np.uint8), 3)
