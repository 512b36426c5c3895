"""toolkit.automata.regex: byte DFAs agree with Python's re.fullmatch (re.ASCII), minimal, canonical."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests._support.regex_reference import compile_reference as _compile_reference
from toolkit.automata import _dfabuild
from toolkit.automata.regex import (
    ByteDFA,
    canonical_regex,
    check_class_form,
    compile_literal,
    compile_regex,
    from_transitions,
)
from toolkit.core.errors import LimitExceeded, RegexError

# Characters the generated regexes and strings are built from: ASCII, 2-, 3- and
# 4-byte UTF-8 characters, regex metacharacters and a newline.
ALPHABET = ["a", "b", "0", "7", " ", "\n", "-", ".", "é", "ß", "日", "😀", '"', "\\"]


def _lit(c: str) -> str:
    return re.escape(c)


@st.composite
def regexes(draw, depth: int = 3) -> str:
    """Random regexes over ALPHABET: literals, classes, dot, alternation, repeats."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(["lit", "class", "nclass", "dot", "short"]))
        if kind == "lit":
            return _lit(draw(st.sampled_from(ALPHABET)))
        if kind in ("class", "nclass"):
            chars = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=4))
            body = "".join("\\" + c if c in "\\]^-" else ("\\n" if c == "\n" else c) for c in chars)
            return ("[^" if kind == "nclass" else "[") + body + "]"
        if kind == "short":
            return draw(st.sampled_from([r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", "[a-z]", "[à-ÿ]"]))
        return "."
    op = draw(st.sampled_from(["cat", "alt", "star", "plus", "opt", "range"]))
    a = draw(regexes(depth=depth - 1))
    if op in ("cat", "alt"):
        b = draw(regexes(depth=depth - 1))
        return f"(?:{a}{b})" if op == "cat" else f"(?:{a}|{b})"
    if op == "range":
        lo = draw(st.integers(0, 2))
        hi = lo + draw(st.integers(0, 2))
        return f"(?:{a}){{{lo},{hi}}}"
    return f"(?:{a})" + {"star": "*", "plus": "+", "opt": "?"}[op]


texts = st.lists(st.sampled_from(ALPHABET + ["x", "١", "Ω"]), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(regexes(), st.lists(texts, min_size=1, max_size=8))
def test_dfa_agrees_with_python_re(pattern: str, samples: list[str]) -> None:
    dfa = compile_regex(pattern)
    rx = re.compile(pattern, re.ASCII)
    for s in samples:
        assert dfa.fullmatch(s.encode()) == (rx.fullmatch(s) is not None), (pattern, s)


@settings(max_examples=150, deadline=None)
@given(regexes())
def test_canonical_regex_is_the_same_language(pattern: str) -> None:
    """Minimal DFAs numbered breadth-first are equal arrays iff the languages are equal."""
    a = compile_regex(pattern)
    b = compile_regex(canonical_regex(pattern))
    assert a.start == b.start
    assert np.array_equal(a.transitions, b.transitions)
    assert np.array_equal(a.accepting, b.accepting)


@settings(max_examples=100, deadline=None)
@given(regexes(), texts)
def test_canonical_regex_means_the_same_in_python_re(pattern: str, s: str) -> None:
    canon = canonical_regex(pattern)
    assert (re.fullmatch(canon, s) is not None) == (re.fullmatch(pattern, s, re.ASCII) is not None)


def test_layout_dead_zero_start_one() -> None:
    d = compile_regex("[0-9]+")
    assert isinstance(d, ByteDFA)
    assert d.transitions.dtype == np.int32 and d.transitions.shape == (3, 256)
    assert d.transitions.flags.c_contiguous and not d.transitions.flags.writeable
    assert (d.transitions[0] == 0).all() and not d.accepting[0]
    assert d.start == 1 and not d.accepting[1]
    assert d.step(1, ord("5")) == 2 and d.accepting[2]
    assert d.step(1, ord("a")) == 0


def test_minimal() -> None:
    # (a|b)*abb has a 4-state minimal DFA, plus the dead state.
    assert compile_regex("(a|b)*abb").n_states == 5
    assert compile_regex("a*|a+").n_states == 2  # dead, and an accepting start looping on a
    assert compile_regex("ab|ab").n_states == compile_regex("ab").n_states == 4


def test_non_ascii_is_utf8_expanded() -> None:
    d = compile_regex("[é日😀]")
    assert d.fullmatch("é".encode()) and d.fullmatch("日".encode()) and d.fullmatch("😀".encode())
    assert not d.fullmatch(b"\xc3")  # a lone lead byte is a prefix, not a match
    assert d.run(b"\xc3") != d.dead
    assert d.run(b"\xc3\x28") == d.dead  # invalid continuation byte


def test_negated_class_and_dot_accept_any_valid_utf8_but_not_invalid_bytes() -> None:
    d = compile_regex('[^"]*')
    assert d.fullmatch("naïve 日本 😀".encode())
    assert not d.fullmatch(b'a"')
    assert d.run(b"\xff") == d.dead  # never valid UTF-8
    assert d.run(b"\xed\xa0\x80") == d.dead  # an encoded surrogate
    dot = compile_regex(".")
    assert not dot.fullmatch(b"\n") and dot.fullmatch("😀".encode())


def test_shorthands_are_ascii() -> None:
    assert not compile_regex(r"\d").fullmatch("١".encode())
    assert compile_regex(r"\D").fullmatch("١".encode())
    assert canonical_regex(r"\d+") == "[0-9]+"


def test_anchors_at_the_ends_are_dropped() -> None:
    assert compile_regex(r"^ab$").fullmatch(b"ab")
    assert compile_regex(r"a\$").fullmatch(b"a$")


@pytest.mark.parametrize(
    "pattern, fragment",
    [("a(?=b)", "(?"), ("a$b", "$"), ("a^b", "^")],
)
def test_unsupported_syntax_names_the_fragment(pattern: str, fragment: str) -> None:
    with pytest.raises(RegexError) as e:
        compile_regex(pattern)
    assert e.value.fragment == fragment
    assert repr(pattern) in str(e.value)


@pytest.mark.parametrize("pattern", ["(a", "a{2,1}", r"(a)\1", "[b-a]"])
def test_bad_regex_raises_regex_error(pattern: str) -> None:
    with pytest.raises(RegexError):
        compile_regex(pattern)


def test_state_limit_is_an_error() -> None:
    # The k-th-from-last letter automaton needs 2**k states.
    with pytest.raises(LimitExceeded) as e:
        compile_regex("(a|b)*a(a|b){11}", max_states=500)
    assert e.value.limit == "max_states" and e.value.maximum == 500
    assert compile_regex("(a|b)*a(a|b){5}").n_states == 2**6 + 1


def test_literal_and_byte_classes() -> None:
    lit = compile_literal(b'{"a"')
    assert lit.fullmatch(b'{"a"') and not lit.fullmatch(b'{"a')
    assert np.array_equal(lit.transitions, compile_regex(re.escape('{"a"')).transitions)
    d = compile_regex("[a-c]x")
    classes, table = d.byte_classes()
    assert classes[ord("a")] == classes[ord("c")] != classes[ord("x")]
    for b in range(256):
        assert (d.transitions[:, b] == table[:, classes[b]]).all()


def _check_canonical_classes(d: ByteDFA) -> None:
    classes, table = d.byte_classes()
    assert classes.dtype == np.uint8 and classes.shape == (256,) and not classes.flags.writeable
    assert table.dtype == np.int32 and table.flags.c_contiguous and not table.flags.writeable
    assert table.shape == (d.n_states, d.n_classes)
    first = [int(np.flatnonzero(classes == c)[0]) for c in range(d.n_classes)]
    assert first == sorted(first) and first[0] == 0  # numbered by smallest byte
    assert len({table[:, c].tobytes() for c in range(d.n_classes)}) == d.n_classes  # no two alike
    assert np.array_equal(d.transitions, table[:, classes])


@pytest.mark.parametrize("pattern", ["[a-c]x", "", "[^\\d\\D]", "(?:é|日)+z?", "[\\x00-\\xff]{3}", "\\d{2,5}"])
def test_class_form_is_canonical(pattern: str) -> None:
    """The class form is the DFA's: classes in order of their smallest byte, no two
    alike, and the same whether built from classes or from the byte table."""
    d = compile_regex(pattern)
    _check_canonical_classes(d)
    again = from_transitions(d.transitions, d.accepting, d.start)
    assert np.array_equal(again.table, d.table) and np.array_equal(again.classes, d.classes)
    assert d.n_classes < 256 and d.memory_bytes() < d.transitions.nbytes + d.accepting.nbytes


def test_byte_classes_merges_equal_columns() -> None:
    rng = np.random.default_rng(3)
    base = rng.integers(0, 9, size=(9, 5)).astype(np.int32)
    base[:, 3] = base[:, 1]  # two equal columns
    column = rng.integers(0, 5, size=256).astype(np.int32)
    classes, table = _dfabuild.byte_classes(base, column)
    assert np.array_equal(table[:, classes], base[:, column])
    used = {int(column[b]) for b in range(256)}
    assert table.shape[1] == len({base[:, c].tobytes() for c in used})
    with pytest.raises(ValueError, match="256 entries"):
        _dfabuild.byte_classes(base, column[:10])
    with pytest.raises(ValueError, match="outside"):
        _dfabuild.byte_classes(base, np.full(256, 5, dtype=np.int32))


def test_check_class_form_names_what_is_wrong() -> None:
    d = compile_regex("[a-c]x")
    t, c = check_class_form(d.table, d.classes)
    assert t is d.table and c is d.classes  # already in form: no copy
    bad_target = d.table.copy()
    bad_target[1, 0] = d.n_states
    for table, classes, message in (
        (d.table[:, :0], d.classes, "n_classes <= 256"),
        (d.table, d.classes[:255], "256 entries"),
        (d.table, np.full(256, d.n_classes, dtype=np.uint8), "below"),
        (bad_target, d.classes, "outside"),
        (d.table.astype(np.float64), d.classes, "integers"),
        (d.table, d.classes.astype(np.int64) + 300, "0..255"),
        (d.table.astype(np.int64) + 2**33, d.classes, "int32"),
    ):
        with pytest.raises(ValueError, match=message) as e:
            check_class_form(table, classes, what="lexeme 7")
        assert str(e.value).startswith("lexeme 7: ")
    check_class_form(bad_target, d.classes, targets=False)  # the walk checks what it reaches


def test_renumber_restores_the_canonical_numbering() -> None:
    """Shuffle a minimal DFA's states (and add an unreachable one): renumber gives the
    compiled arrays back."""
    d = compile_regex("(?:ab|c[0-9]{2,4})+(?:é|x)?")
    n = d.n_states
    rng = np.random.default_rng(5)
    perm = np.concatenate([[0], 1 + rng.permutation(n)])  # new id of each old state; slot n+... spare
    old_of = np.empty(n + 1, dtype=np.int64)
    old_of[perm] = np.arange(n + 1)
    table = np.zeros((n + 1, d.n_classes), dtype=np.int32)
    acc = np.zeros(n + 1, dtype=np.uint8)
    for new in range(1, n + 1):
        old = old_of[new]
        if old < n:
            table[new] = perm[d.table[old]]
            acc[new] = d.accepting[old]
        else:
            table[new] = perm[d.table[d.start]]  # unreachable: nothing leads here
    t2, a2 = _dfabuild.renumber(table, acc, int(perm[d.start]))
    assert np.array_equal(t2, d.table) and np.array_equal(a2, d.accepting)
    with pytest.raises(ValueError):
        _dfabuild.renumber(table, acc, 0)


def test_empty_language_and_empty_string() -> None:
    empty = compile_regex("[^\\d\\D]")
    assert empty.is_empty() and empty.start == 0
    eps = compile_regex("")
    assert eps.fullmatch(b"") and not eps.fullmatch(b"a")


# ------------------------------------------- the construction vs the reference ----
# compile_regex builds its own byte NFA, determinizes and minimizes it (Hopcroft);
# _compile_reference is the former interegular-based construction.  Minimal DFAs
# numbered canonically are equal arrays iff the languages are equal, so the two must
# agree byte for byte.

REFERENCE_CORPUS = [
    "",
    "a",
    "ab|ab",
    "(a|b)*abb",
    "a*|a+",
    "(?i)abc",
    "(?i)[a-f]x",
    "(?i)[^a-z]",
    "(?i)é",
    "(?i)[^é日]",
    "(?i:a)A",
    "(?i)(?-i:a)A",
    "[^é日]",
    "[^\\x00-\\x1f\"\\\\]+",
    "[é-ÿ]{2}",
    "😀+",
    "[\u0800-\u0810\u0820-\u0830]",
    "[\ud7ff-\ue000]",
    "[\ud800]",
    "[^\ud800]",
    ".",
    "(?s).",
    "(?s:.)a.",
    "a.b",
    "(?s)(?:.|\\n)*",
    "\\x00\\x7f",
    "(?:ab|c){3,7}",
    "(?:a{2,3}){2,4}",
    "(?:(?:ab)*c){1,3}",
    "(?:(?:a|b)?){0,4}",
    "(?:a?){3}",
    "(?:a?){2,5}b",
    "(?:(?:ab)?){2,3}",
    "(?:a*){2,5}",
    "(?:a{0,2}){1,3}",
    "(?:(?:a|b){0,2}){3}c",
    "(?:(?:a?){0,2}){0,}",
    "(?i:a?){2}",
    "(?:(?i)b?){2}",
    "(?:a?b?){0,3}",
    "(?:a+){2,3}",
    "(?:a|)b",
    "a|",
    "|",
    "(?:)",
    "(?:){3}",
    "a{0}",
    "a{0}b",
    "a{0,0}",
    "(?:a{0}){2,}",
    "a{3,}",
    "(?:ab){2,}",
    "(?:a*)*",
    "(?:a?){0,}",
    "(?:a*b*)+c",
    "x{0,5}y",
    "[^\\d\\D]",
    "a[^\\d\\D]",
    "a[^\\d\\D]|b",
    "(?:[^\\d\\D])*c",
    "(?:[^\\d\\D]){0,3}x",
    "x(?:[^\\d\\D]){2}|y",
    "(?:[^\\d\\D]|a)+",
    "(a|b)*a(a|b){5}",
    "\\d{2,4}-\\w+",
    "\\s*\\S",
    "(?:ab|abc|abcd)*",
    "(?:[a-c]|[b-d])+[^x]",
    "(?:é|e\u0301)?",
    '"(?:[^"\\\\\\x00-\\x1F]|\\\\["\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}){0,12}"',
    '"(?:p|\\\\u0070)(?:e|\\\\u0065)(?:r|\\\\u0072)"',
]


def _same_dfa(a: ByteDFA, b: ByteDFA) -> bool:
    return (
        a.start == b.start
        and np.array_equal(a.table, b.table)
        and np.array_equal(a.classes, b.classes)
        and np.array_equal(a.transitions, b.transitions)
        and np.array_equal(a.accepting, b.accepting)
    )


@pytest.mark.parametrize("pattern", REFERENCE_CORPUS)
def test_construction_matches_the_reference(pattern: str) -> None:
    new = compile_regex(pattern)
    assert _same_dfa(new, _compile_reference(pattern)), pattern
    assert new.transitions.dtype == np.int32 and new.transitions.shape == (new.n_states, 256)
    assert new.transitions.flags.c_contiguous and not new.transitions.flags.writeable
    assert new.accepting.dtype == bool and not new.accepting.flags.writeable


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["", "(?i)", "(?s)", "(?is)"]), regexes())
def test_random_regexes_match_the_reference(flags: str, pattern: str) -> None:
    # The reference crashes on case-folding to two characters ("ß".upper() == "SS").
    assume(not ("i" in flags and "ß" in pattern))
    assert _same_dfa(compile_regex(flags + pattern), _compile_reference(flags + pattern)), flags + pattern


def test_every_state_is_live_and_reachable() -> None:
    for pattern in REFERENCE_CORPUS:
        d = compile_regex(pattern)
        if d.is_empty():
            assert d.n_states == 1
            continue
        trans = d.transitions
        reach = {d.start}
        todo = [d.start]
        while todo:
            for t in set(trans[todo.pop()].tolist()) - reach:
                reach.add(t)
                todo.append(t)
        assert reach == set(range(d.n_states)), pattern
        live = set(np.flatnonzero(d.accepting).tolist())
        grew = True
        while grew:
            grew = False
            for s in range(1, d.n_states):
                if s not in live and live & set(trans[s].tolist()):
                    live.add(s)
                    grew = True
        assert live == set(range(1, d.n_states)), pattern


@pytest.mark.parametrize(
    "pattern, alphabet, max_len",
    [
        ("(?:ab|c){3,7}", "abc", 9),
        ("(?:a|bc){0,3}d", "abcd", 8),
        ("(?:x{2}){1,3}", "x", 8),
        ("(?:(?:ab){1,2}c?){2}", "abc", 9),
        ("(?:a|b|){2,4}", "ab", 6),
        ("a{2,}b{0,2}", "ab", 7),
        ("(?:a?){2,4}b", "ab", 7),
        ("(?:(?:ab)?){1,3}", "ab", 8),
        ("(?:a{0,2}b?){2}", "ab", 7),
        ("(?:é|日a){1,3}", "é日a", 7),
        ("[^a]{2,3}", "ab日", 5),
    ],
)
def test_bounded_repeats_agree_with_python_re(pattern: str, alphabet: str, max_len: int) -> None:
    import itertools

    dfa = compile_regex(pattern)
    rx = re.compile(pattern, re.ASCII)
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            s = "".join(chars)
            assert dfa.fullmatch(s.encode()) == (rx.fullmatch(s) is not None), (pattern, s)


def test_large_repeats_raise_limit_exceeded() -> None:
    # [ab]{0,5000} needs 5002 states (dead included): over a limit of 1000.
    with pytest.raises(LimitExceeded) as e:
        compile_regex("[ab]{0,5000}", max_states=1000)
    assert e.value.limit == "max_states" and e.value.maximum == 1000
    # A million copies of a character: the NFA limit stops the copying early.
    with pytest.raises(LimitExceeded) as e:
        compile_regex("(?:(?:a|b){1000}){1000}", max_states=1000)
    assert e.value.limit == "nfa_states"
    assert compile_regex("[ab]{0,500}", max_states=1000).n_states == 502


def test_flag_edge_cases() -> None:
    with pytest.raises(RegexError):
        compile_regex("(?m)a")  # interegular refuses MULTILINE on characters
    d = compile_regex("(?i)ß")  # "ß".upper() is two characters: only ß itself
    assert d.fullmatch("ß".encode()) and not d.fullmatch(b"SS")
    assert compile_regex("(?i)k").fullmatch(b"K")


def test_a_regex_error_shows_a_window_of_a_long_pattern() -> None:
    from toolkit.core.errors import RegexError

    pattern = "a" * 50_000 + "(?<=x)" + "b" * 50_000
    with pytest.raises(RegexError) as e:
        compile_regex(pattern)
    message = str(e.value)
    assert len(message) < 600 and "(?<=x)" in message and "100,006 characters" in message
    assert e.value.pattern == pattern  # the whole pattern stays on the error
