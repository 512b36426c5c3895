"""strategies.naive: the oracle.  Checked against the DFA trie walk and brute force."""

from __future__ import annotations

import random

import numpy as np
import pytest

from strategies import available_engines, get_engine, registered_engines
from tests._support.fixtures import JSON_LARK, SMALL_TOKENS, small_vocab
from tests._support.shared import require_shared
from toolkit.automata.regex import compile_regex
from toolkit.core import bitmask as bm
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.ir import Grammar


def _mask_ids(matcher, vocab: Vocabulary) -> set[int]:
    row = bm.allocate(vocab.size)
    matcher.fill_bitmask(row)
    return {int(i) for i in bm.allowed_ids(row[0], vocab.size)}


def _brute_force_viable(grammar: Grammar, prefix: bytes, vocab: Vocabulary) -> set[int]:
    """Tokens t with prefix+t viable, decided from scratch per token (no sharing at all)."""
    from toolkit.grammar.earley import ByteRecognizer, compile_cfg

    out = set()
    for t in vocab.text_token_ids():
        rec = ByteRecognizer(compile_cfg(grammar))
        if rec.push_bytes(prefix + vocab.token_bytes[int(t)]):
            out.add(int(t))
    return out


def test_registry() -> None:
    assert "naive" in registered_engines() and "naive" in available_engines()
    with pytest.raises(ValueError, match="unknown engine"):
        get_engine("nope", small_vocab())


@pytest.mark.parametrize("pattern", ["[0-9]+", "(ab|a)*c?", "[^ ]+", "é|[a-z]{2}", r"\{\"[a-z]*\":"])
def test_naive_equals_dfa_trie_walk_on_regex_grammars(pattern: str) -> None:
    vocab = small_vocab()
    engine = get_engine("naive", vocab)
    m = engine.matcher(engine.compile(Grammar.from_regex(pattern)))
    dfa = compile_regex(pattern)
    trie = TokenTrie(vocab)
    rng = random.Random(f"test_naive_equals_dfa_trie_walk[{pattern}]")
    consumed = b""
    for _step in range(6):
        state = dfa.run(consumed)
        expected = {int(i) for i in bm.allowed_ids(trie.allowed_tokens(dfa, state), vocab.size)}
        got = _mask_ids(m, vocab)
        assert got - set(vocab.eos_ids) == expected
        assert (1 in got) == bool(dfa.accepting[state])
        choices = sorted(expected)
        if not choices:
            break
        tok = rng.choice(choices)
        assert m.accept_token(tok)
        consumed += vocab.token_bytes[tok]


def test_share_prefixes_changes_nothing() -> None:
    vocab = small_vocab()
    g = Grammar.from_lark(JSON_LARK)
    a = get_engine("naive", vocab)
    b = get_engine("naive", vocab, share_prefixes=False)
    ma, mb = a.matcher(a.compile(g)), b.matcher(b.compile(g))
    for tok in [22, 16, 23, 20, 13, 7, 6, 18, 6, 8, 24, 3]:  # {"abc": 123,"é":true}
        assert _mask_ids(ma, vocab) == _mask_ids(mb, vocab)
        assert ma.accept_token(tok) == mb.accept_token(tok)
    assert _mask_ids(ma, vocab) == _mask_ids(mb, vocab)


def test_naive_equals_brute_force_on_json() -> None:
    vocab = small_vocab()
    g = Grammar.from_lark(JSON_LARK)
    engine = get_engine("naive", vocab)
    m = engine.matcher(engine.compile(g))
    prefix = b""
    for tok in [2, 20, 6, 14, 6, 8, 4, 11, 7, 9, 5]:  # { "a":[1,0]
        assert _mask_ids(m, vocab) - {1} == _brute_force_viable(g, prefix, vocab)
        assert m.accept_token(tok), (prefix, tok)
        prefix += SMALL_TOKENS[tok]


def test_json_masks_on_the_small_vocab() -> None:
    vocab = small_vocab()
    engine = get_engine("naive", vocab)
    m = engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK)))
    start = _mask_ids(m, vocab)
    # Value openings, numbers, literals and whitespace; never "}" or padding or specials.
    assert {2, 4, 6, 9, 11, 12, 13, 24, 25, 26, 20, 21, 27, 22} <= start
    assert not start & {3, 5, 7, 8, 10, 14, 0, 1, 28, 29}
    assert m.accept_token(22)  # '{"'
    inside = _mask_ids(m, vocab)
    assert {14, 15, 16, 17, 18, 19, 6, 23, 20, 13} <= inside  # any string content, '"', '":'
    assert 27 not in inside  # a raw newline cannot be in a JSON string


def test_utf8_partial_token_is_allowed_inside_a_string() -> None:
    vocab = small_vocab()
    engine = get_engine("naive", vocab)
    m = engine.matcher(engine.compile(Grammar.from_regex('"[^"]*"')))
    assert m.accept_token(6)
    assert m.accept_token(19)  # b"\xc3": the first byte of é
    allowed = _mask_ids(m, vocab)
    assert allowed == set()  # only a continuation byte may follow; the vocab has none alone
    m.rollback(1)
    assert 18 in _mask_ids(m, vocab)


# ------------------------------------------------------- real vocabularies --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


def test_llama3_digits_regex_allows_exactly_the_digit_tokens(llama3: Vocabulary) -> None:
    engine = get_engine("naive", llama3)
    m = engine.matcher(engine.compile(Grammar.from_regex("[0-9]+")))
    got = _mask_ids(m, llama3)
    expected = {
        i for i, b in enumerate(llama3.token_bytes)
        if b and not llama3.is_special(i) and all(48 <= c <= 57 for c in b)
    }
    assert len(expected) == 1110  # Llama-3 has every 1-, 2- and 3-digit string
    assert got == expected
    assert 128009 not in got  # nothing consumed yet: EOS is not allowed


def test_llama3_json_grammar_at_the_start(llama3: Vocabulary) -> None:
    engine = get_engine("naive", llama3)
    m = engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK)))
    got = _mask_ids(m, llama3)
    opening_brace, opening_bracket = llama3.encode("{"), llama3.encode("[")
    assert len(opening_brace) == 1 and len(opening_bracket) == 1
    assert opening_brace[0] in got and opening_bracket[0] in got
    assert llama3.encode('{"')[0] in got
    for closing in ("}", "]", ",", ":"):
        assert llama3.encode(closing)[0] not in got
    assert 128009 not in got and 128000 not in got
    # Every allowed token starts a JSON text (after optional whitespace).
    for t in got:
        head = llama3.token_bytes[t].lstrip(b" \t\r\n\x0c")  # common.WS has \f
        assert head == b"" or head[:1] in b'{["-0123456789tfn', llama3.token_bytes[t]
    # And the brute-force check agrees on a sample of 3,000 tokens.
    g = Grammar.from_lark(JSON_LARK)
    rng = np.random.default_rng(12345)
    sample = rng.choice(llama3.text_token_ids(), size=3000, replace=False)
    from toolkit.grammar.earley import ByteRecognizer, compile_cfg

    for t in sample:
        rec = ByteRecognizer(compile_cfg(g))
        assert (int(t) in got) == rec.push_bytes(llama3.token_bytes[int(t)]), llama3.token_bytes[int(t)]
