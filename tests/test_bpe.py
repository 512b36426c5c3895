"""The C tokenizer of jump-forward's forced text (:mod:`toolkit.core.bpe`) against the
real tokenizers: tiktoken as Llama 3 and Tekken (mistral-common) use it.  Exact ids on
every text it answers for, and no answer (the caller's Python rule) where it cannot be
sure."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.codepoints import mismatched_chunks
from tests._support.fixtures import small_vocab
from tests._support.shared import require_shared
from toolkit.core.bpe import PATTERNS, BpeTable, code_point_classes
from toolkit.core.vocab import (
    GPT2_PATTERN,
    LLAMA3_PATTERN,
    QWEN2_PATTERN,
    TEKKEN_PATTERN,
    Vocabulary,
    load_vocab,
)


@functools.cache
def _vocab(name: str) -> Vocabulary:
    if name == "tekken":
        return load_vocab("tekken")
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


VOCABS = ["tekken", "llama3"]
#: what the scanners tell apart: letters by case (title case ǅ, modifier ʰ), marks, digits
#: of other scripts, White_Space that is not ASCII, the contractions (ſ folds to s),
#: newlines, '/', CJK, an emoji with its modifier
ALPHABET = list("aAbZzé É09٣ \n\r\t'/.,{}\"日本ſǅʰ\u0301\u00a0\u2003\u3000\x1c👍🏽") + ["'s", "'RE", "'ll", "  ", "\r\n"]


def _probe(vocab: Vocabulary, text: str) -> None:
    got = BpeTable.of(vocab).tokens(text.encode("utf-8"))
    assert got == vocab.encode(text), (vocab.name, text)


@pytest.mark.parametrize("name", VOCABS)
def test_texts_a_grammar_forces_tokenize_as_the_tokenizer_does(name: str) -> None:
    vocab = _vocab(name)
    assert vocab.bpe_pattern == (TEKKEN_PATTERN if name == "tekken" else LLAMA3_PATTERN)
    for text in ['{"name": "Ada", "tags": ["x", 1]}', '", "', '":"', "}\n}", "  \n\n  x", "Hello world's I'M",
                 "naïve café ÄBC aBC AbcDEF", "日本語のテキスト", "x / y //\n", "a\u00a0b\u2003c", "1234567",
                 "\r\n\r\n  \n x", "ǅungla Ǆ", " ", "  ", "'ll 're 'VE 'ſ", "\u0301a\u0301b", "👍🏽 ok"]:
        _probe(vocab, text)


@pytest.mark.parametrize("name", VOCABS)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_texts_tokenize_as_the_tokenizer_does(name: str, data: st.DataObject) -> None:
    vocab = _vocab(name)
    parts = data.draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=14))
    _probe(vocab, "".join(parts))
    text = data.draw(st.text(min_size=1, max_size=12))  # any code points
    got = BpeTable.of(vocab).tokens(text.encode("utf-8", "surrogatepass"))
    if got is None:  # only where it cannot be sure: a surrogate (not UTF-8), a code point Python does not assign
        assert any(0xD800 <= ord(c) < 0xE000 or code_point_classes()[ord(c)] & 0x0F == 8 for c in text)
    else:
        assert got == vocab.encode(text), text


@pytest.mark.parametrize("name", VOCABS)
def test_every_assigned_code_point_is_classed_as_the_tokenizer_classes_it(name: str) -> None:
    """Each code point Python's Unicode tables assign, beside letters, capitals, a space,
    digits, an apostrophe and a newline: a class read differently would cut the text
    elsewhere."""
    vocab = _vocab(name)
    bpe = BpeTable.of(vocab)
    classes = code_point_classes()
    cps = [c for c in range(0x110000) if classes[c] & 0x0F != 8 and not 0xD800 <= c < 0xE000]
    assert len(cps) > 280_000
    bad = mismatched_chunks(bpe, vocab, cps, lambda c: f"a{c}A{c[0]} {c[1:]}1'{c[-1]}\n{c[0]}{c[0]}")
    assert not bad, [hex(ord(c)) for c in bad[0]]


def test_what_it_cannot_answer_for_is_left_to_the_caller() -> None:
    vocab = _vocab("tekken")
    bpe = BpeTable.of(vocab)
    for data in [b"\xff128008\xff", b'"a\xc3', b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf",
                 "\u0378".encode()]:  # a mark, cut UTF-8, a surrogate, past U+10FFFF, overlong, unassigned
        assert bpe.tokens(data) is None, data
    assert bpe.tokens(b"") == []


def test_which_vocabularies_have_a_table() -> None:
    tekken = _vocab("tekken")
    assert BpeTable.of(tekken) is BpeTable.of(tekken)  # one per vocabulary
    assert BpeTable.of(small_vocab()) is None  # greedy longest match: no pattern
    assert tekken.padded(tekken.size + 64).bpe_pattern == TEKKEN_PATTERN
    assert set(PATTERNS) == {LLAMA3_PATTERN, TEKKEN_PATTERN, QWEN2_PATTERN, GPT2_PATTERN}
    other = Vocabulary("v", [b"a", b"b", b"ab"], bpe_pattern=r"\w+")  # a pattern with no scanner here
    assert BpeTable.of(other) is None
    twice = Vocabulary("v", [b"a", b"b", b"a"], bpe_pattern=LLAMA3_PATTERN)  # ranks cannot be ids
    with pytest.raises(ValueError, match="same bytes"):
        BpeTable(twice)
    assert BpeTable.of(twice) is None


def test_merges_follow_the_ranks() -> None:
    """A made-up vocabulary: the lowest-ranked (lowest id) pair merges first, the
    leftmost of equal pairs; a piece that is a token is taken whole."""
    toks = [bytes([b]) for b in range(256)] + [b"bc", b"ab", b"abc", b"cd", b"aa"]
    v = Vocabulary("ranks", toks, bpe_pattern=LLAMA3_PATTERN)
    bpe = BpeTable.of(v)
    ids = {t: i for i, t in enumerate(toks)}
    assert bpe.tokens(b"abcd") == [ids[b"abc"], ids[b"d"]]  # bc first, then a+bc = abc; cd never forms
    assert bpe.tokens(b"abc") == [ids[b"abc"]]
    assert bpe.tokens(b"aaa") == [ids[b"aa"], ids[b"a"]]
    assert np.array_equal(bpe.tokens(b"cd"), [ids[b"cd"]])


def test_a_session_refuses_no_table() -> None:
    """``forced_tokens_c`` without a table is a TypeError, not a crash in C."""
    from strategies import get_engine

    vocab = _vocab("tekken")
    engine = get_engine("llguidance", vocab)
    m = engine.matcher(engine.compile({"type": "object", "properties": {"a": {"type": "integer"}},
                                       "required": ["a"], "additionalProperties": False}))
    with pytest.raises(TypeError):
        m.session.forced_tokens_c(None, b'{"a":')
    assert m.session.forced_tokens_c(BpeTable.of(vocab), b"{") is not None
