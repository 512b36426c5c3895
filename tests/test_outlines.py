"""Strategy ``outlines``: the precomputed token index (strategies/outlines).

Masks are checked against the ``naive`` oracle on small vocabularies (random walks
over random regular languages, with every row stored dense and every row sparse),
and against the real engines on the Tekken vocabulary: outlines-core on its own
schema regex, llguidance on ours.  The contract and the regular rows of the
agreement table run in ``tests/test_peers.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import get_engine
from strategies.outlines import OutlinesCompiled, OutlinesEngine
from tests._support.fixtures import JSON_LARK, REGULAR_REGEXES, small_vocab
from toolkit.core import bitmask as bm
from toolkit.core.errors import LimitExceeded, RegexError, UnsupportedGrammar
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import embedded_dir, iter_items
from toolkit.grammar.ir import Grammar, RegexText
from toolkit.jsonschema.compiler import JsonSchemaText

SMALL = small_vocab()
EOS = 1

REGEXES = REGULAR_REGEXES


def _row(m, vocab: Vocabulary) -> np.ndarray:
    row = bm.allocate(vocab.size)
    info = m.fill_bitmask(row)
    assert info.allowed == bm.popcount(row[0]) and info.sliced is False
    return row[0].copy()


def _ids(row: np.ndarray, vocab: Vocabulary) -> set[int]:
    return set(bm.allowed_ids(row, vocab.size).tolist())


@pytest.fixture(scope="module")
def engines():
    made = {
        "auto": get_engine("outlines", SMALL),
        "dense": get_engine("outlines", SMALL, dense_min_tokens=1),
        "sparse": get_engine("outlines", SMALL, dense_min_tokens=10**9),
        "naive": get_engine("naive", SMALL),
    }
    return made


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(REGEXES), layout=st.sampled_from(["dense", "sparse", "auto"]))
def test_masks_equal_naive_on_random_walks(engines, data, which: str, layout: str) -> None:
    eng, oracle = engines[layout], engines["naive"]
    compiled = eng.compile(RegexText(which))
    m, n = eng.matcher(compiled), oracle.matcher(oracle.compile(Grammar.from_regex(which)))
    for _ in range(12):
        got, want = _row(m, SMALL), _row(n, SMALL)
        assert np.array_equal(got, want), (which, _ids(got, SMALL) ^ _ids(want, SMALL))
        allowed = sorted(_ids(want, SMALL))
        if not allowed:
            break
        t = data.draw(st.sampled_from(allowed))
        assert m.accept_token(t) and n.accept_token(t)
        if t == EOS:
            assert m.is_terminated() and _ids(_row(m, SMALL), SMALL) == {EOS}
            break
    # a token outside the mask (or the vocabulary) is refused and changes nothing
    before = _row(m, SMALL)
    for bad in [*sorted(set(range(SMALL.size)) - _ids(before, SMALL))[:5], -1, SMALL.size, 2**70]:
        assert not m.accept_token(bad)
    assert np.array_equal(_row(m, SMALL), before)


def test_a_regex_grammar_and_its_pattern_compile_to_the_same_index(engines) -> None:
    eng = engines["auto"]
    rx = REGEXES[1]
    a, b = eng.compile(RegexText(rx)), eng.compile(Grammar.from_regex(rx))
    assert a.regex == b.regex == rx and (a.kind, b.kind) == ("regex", "grammar")
    assert all(np.array_equal(a.index.row_tokens(s), b.index.row_tokens(s)) for s in range(a.index.num_states))


def test_a_regular_lark_grammar_is_inlined(engines) -> None:
    g = Grammar.from_lark('start: pair ("," pair)*\npair: KEY ":" /[0-9]+/\nKEY: /[ab]+/\n')
    c = engines["auto"].compile(g)
    assert c.kind == "grammar"
    m = engines["auto"].matcher(c)
    assert m.accept_tokens(SMALL.encode("ab:1,b:123")) == len(SMALL.encode("ab:1,b:123"))
    assert m.is_accepting()


def test_a_recursive_grammar_is_refused_unless_unrolled() -> None:
    g = Grammar.from_lark('start: "[" start? "]"\n')
    with pytest.raises(UnsupportedGrammar, match="recursive.*start"):
        get_engine("outlines", SMALL).compile(g)
    eng = get_engine("outlines", SMALL, grammar_max_depth=2)
    c = eng.compile(g)
    for text, ok in (("[]", True), ("[[]]", True), ("[[[]]]", True), ("[[[[]]]]", False)):
        m = eng.matcher(c)
        ids = SMALL.encode(text)
        assert (m.accept_tokens(ids) == len(ids) and m.is_accepting()) is ok, text


def test_json_schema_inputs_and_depth() -> None:
    vocab = load_vocab("tekken")
    eng = get_engine("outlines", vocab, max_depth=1)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    by_dict, by_text = eng.compile(schema), eng.compile(JsonSchemaText(json.dumps(schema)))
    assert by_dict.kind == by_text.kind == "json_schema" and by_dict.regex == by_text.regex
    deeper = get_engine("outlines", vocab, max_depth=2).compile(schema)
    assert len(deeper.regex) > len(by_dict.regex)  # free-form additional properties, one more level
    for text, ok in (('{"a": 1}', True), ('{"a": 1, "b": {"c": {}}}', True), ('{"a": 1, "b": {"c": {"d": {}}}}', False)):
        m = eng.matcher(by_dict)
        ids = vocab.encode(text)
        assert (m.accept_tokens(ids) == len(ids) and m.is_accepting()) is ok, text


def test_index_layout_memory_and_stats() -> None:
    vocab = load_vocab("tekken")
    c = get_engine("outlines", vocab).compile(RegexText(r'"[a-z]{0,3}"|[0-9]+'))
    assert isinstance(c, OutlinesCompiled)
    st_ = c.stats()
    assert st_["states"] == c.num_states == c.dfa.n_states - 1
    assert 0 < st_["dense_states"] < st_["states"]  # inside the quotes few tokens; after digits many
    assert c.memory_bytes() >= c.dfa.transitions.nbytes + st_["pairs"] * 8
    assert st_["trie_nodes_visited"] > 0 and st_["index_s"] > 0 and st_["regex_chars"] == len(c.regex)
    for s in range(1, c.index.num_states):
        assert c.index.count(s) == len(c.index.row_tokens(s))


def test_limits_are_clear_errors() -> None:
    vocab = load_vocab("tekken")
    with pytest.raises(LimitExceeded, match=r"max_memory.*-state DFA.*MiB"):
        get_engine("outlines", vocab, max_memory=100_000).compile(RegexText(r"[^\n]{0,40}"))
    with pytest.raises(LimitExceeded, match="states"):
        get_engine("outlines", SMALL, max_states=20).compile(RegexText(r"[0-9]{0,50}x"))
    with pytest.raises(LimitExceeded, match="max_regex_length"):
        get_engine("outlines", SMALL, max_regex_length=50).compile({"type": "object"})
    with pytest.raises(RegexError, match=r"\(\?="):
        get_engine("outlines", SMALL).compile(RegexText(r"a(?=b)"))
    with pytest.raises(UnsupportedGrammar, match="not int"):
        get_engine("outlines", SMALL).compile(42)
    for bad in ({"schema_regex": "xgrammar"}, {"max_depth": -1}, {"max_memory": 0}, {"whitespace": "tabs"}):
        with pytest.raises(ValueError):
            OutlinesEngine(SMALL, **bad)


def test_recursive_json_grammar_from_lark_is_refused_with_its_cycle() -> None:
    with pytest.raises(UnsupportedGrammar, match="derives itself"):
        get_engine("outlines", SMALL).compile(Grammar.from_lark(JSON_LARK))


# --------------------------------------------------- the real engines, tekken --


@pytest.fixture(scope="module")
def tekken() -> Vocabulary:
    return load_vocab("tekken")


def _schemas(names: tuple[str, ...]):
    items = {it.name: it for it in iter_items(embedded_dir() / "schemas")}
    return [items[n] for n in names]


# Small closed schemas (so outlines-core builds them in a second or two) covering
# strings with bounds, enums, numbers, arrays, optional properties, nesting.
TEKKEN_SCHEMAS = ("s01_flat_person", "s10_enum_ticket", "s27_numeric_sensor", "s30_string_lengths", "s32_closed_settings")


def _late_match(dfa, state: int, data: bytes) -> bool:
    """outlines-core's documented miss (tests/test_peers.py): the token's bytes but the
    last reach an accepting state, and the whole token ends in a non-accepting one."""
    mid = dfa.run(data[:-1], state)
    end = dfa.run(data, state)
    return bool(mid and dfa.accepting[mid] and end and not dfa.accepting[end])


def test_masks_equal_outlines_core_on_its_own_regex(tekken) -> None:
    pytest.importorskip("outlines_core", reason="peer:outlines-core needs outlines_core (the [peers] extra)")
    ours = get_engine("outlines", tekken, schema_regex="outlines-core")
    peer = get_engine("peer:outlines-core", tekken)
    steps = 0
    for item in _schemas(TEKKEN_SCHEMAS):
        a, b = ours.compile(item.source()), peer.compile(item.source())
        assert a.regex == b.source
        for case in [c for c in item.cases if c.valid]:
            tokens = [*tekken.encode(case.text), tekken.eos_ids[0]]
            ma, mb = ours.matcher(a), peer.matcher(b)
            for t in tokens:
                ra, rb = _row(ma, tekken), _row(mb, tekken)
                only_ours, only_peer = _ids(ra, tekken) - _ids(rb, tekken), _ids(rb, tekken) - _ids(ra, tekken)
                assert not only_peer, (item.name, sorted(only_peer)[:5])
                assert all(_late_match(a.dfa, ma.state, tekken.token_bytes[i]) for i in only_ours), item.name
                assert ma.accept_token(t) and mb.accept_token(t)
                steps += 1
    assert steps > 50


def test_masks_equal_llguidance_on_our_schema_regex(tekken) -> None:
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    ours = get_engine("outlines", tekken, max_depth=1)
    peer = get_engine("peer:llguidance", tekken)
    for item in _schemas(("s01_flat_person", "s35_required_vs_optional")):
        a = ours.compile(item.source())
        b = peer.compile(Grammar.from_regex(a.regex))
        assert a.index.num_dense > 0
        for case in [c for c in item.cases if c.valid][:2]:
            tokens = [*tekken.encode(case.text), tekken.eos_ids[0]]
            ma, mb = ours.matcher(a), peer.matcher(b)
            for t in tokens:
                assert np.array_equal(_row(ma, tekken), _row(mb, tekken)), (item.name, case.text)
                assert ma.accept_token(t) and mb.accept_token(t)


def test_recursive_grammar_hint_names_grammar_max_depth() -> None:
    """A recursive grammar's refusal names the option that unrolls it, ``grammar_max_depth``
    (``max_depth`` unrolls JSON schemas only: the hint named it, and it did nothing here)."""
    lark = Grammar.from_lark(JSON_LARK)
    from_schema = Grammar.from_json_schema({"$ref": "#/$defs/t", "$defs": {"t": {
        "type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}}})
    for g in (lark, from_schema):
        with pytest.raises(UnsupportedGrammar, match="derives itself") as err:
            get_engine("outlines", SMALL, max_depth=5).compile(g)
        msg = str(err.value)
        assert "grammar_max_depth" in msg and "pass max_depth" not in msg, msg
        assert "max_depth unrolls recursion in JSON schemas only" in msg, msg
        assert get_engine("outlines", SMALL, grammar_max_depth=1).compile(g).kind == "grammar"
