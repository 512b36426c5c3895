"""The llguidance core's work counters (``Matcher.mask_stats()``, toolkit.core.protocol.MaskStats)
on real grammars, and its errors through the one set of C error codes.

What the parser counts (strategies/llguidance/parser.pyx): ``trie_nodes``, the nodes
its walks visit (the matcher's ``nodes_visited`` of each fill); ``lexer_steps``, one a
byte read (a node walked, a byte of an accepted token) plus one where a byte that ended
a lexeme starts the next; ``earley_items``, items added to rows; ``tokens_sliced``, the
tokens of the slices a fill ORs in whole; ``tokens_cached``, the text tokens of a fill
that is the mask cache's copy; ``tokens_checked`` stays 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from strategies import get_engine
from tests._support.shared import require_shared
from toolkit.core import bitmask as bm
from toolkit.core.errors import ERROR_CODES, LimitExceeded
from toolkit.core.protocol import MaskStats, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.ir import Grammar

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
JSON_GRAMMAR = json.loads((DATASETS / "grammars" / "g01_json.json").read_text())
TEXTS = [t["text"] for t in JSON_GRAMMAR["tests"] if t["valid"]]

# A vocabulary for the JSON grammar's valid texts: each of their characters, and a few
# longer pieces (string content the slices hold, a number, punctuation runs).
_PIECES = [b'{"', b'": ', b'", "', b"name", b"mask", b"lab", b"tags", b"json", b"lark", b"stars", b"42",
           b"true", b"null", b"ratio", b"1.5", b"e-3", b", ", b"ab", b"abcdefghijkl"]
_CHARS = sorted({c for t in TEXTS for c in t.encode()})
TOKENS = [b"", b"", *(bytes([c]) for c in _CHARS), *_PIECES]
EOS = 1
VOCAB = Vocabulary.from_tokens(TOKENS, eos_ids=(EOS,), special_tokens={0: "<s>", EOS: "</s>"},
                               size=len(TOKENS) + 2, name="json-work")


def _walk(m: Matcher, vocab: Vocabulary, text: str) -> list[tuple[MaskStats, MaskStats, bool]]:
    """Fill and accept every token of text: per token (stats after its fill, after its
    accept, the fill was sliced), checking along the way that no counter decreases."""
    row = bm.allocate(vocab.size)
    out = []
    last = m.mask_stats()
    for t in vocab.encode(text):
        info = m.fill_bitmask(row)
        filled = m.mask_stats()
        assert bm.get_bit(row[0], t)
        assert m.accept_token(t)
        accepted = m.mask_stats()
        for a, b, c in zip(last.as_dict().values(), filled.as_dict().values(), accepted.as_dict().values(),
                           strict=True):
            assert a <= b <= c
        out.append((filled, accepted, info.sliced))
        last = accepted
    return out


def _json_matcher(vocab: Vocabulary, **options) -> Matcher:
    eng = get_engine("llguidance", vocab, **options)
    return eng.matcher(eng.compile(Grammar.from_lark(JSON_GRAMMAR["lark"])))


@pytest.mark.parametrize("text", TEXTS)
def test_a_walk_counts_nodes_lexer_steps_and_items(text: str) -> None:
    m = _json_matcher(VOCAB)
    assert m.mask_stats() == MaskStats()  # making the matcher is not counted
    steps = _walk(m, VOCAB, text)
    now = m.mask_stats()
    assert now.masks == len(steps)
    assert now.trie_nodes > 0 and now.lexer_steps > 0 and now.earley_items > 0
    assert now.tokens_checked == 0
    # an accept reads at least each byte of its token, and walks no trie
    before = MaskStats()
    for (filled, accepted, _), t in zip(steps, VOCAB.encode(text), strict=True):
        assert accepted.lexer_steps - filled.lexer_steps >= len(VOCAB.token_bytes[t])
        assert accepted.trie_nodes == filled.trie_nodes
        assert filled.lexer_steps - before.lexer_steps >= filled.trie_nodes - before.trie_nodes
        before = accepted


def test_trie_nodes_are_the_nodes_each_fill_visits() -> None:
    m = _json_matcher(VOCAB, slices="none")
    row = bm.allocate(VOCAB.size)
    for t in VOCAB.encode(TEXTS[0]):
        before = m.mask_stats()
        m.fill_bitmask(row)
        got = m.mask_stats()
        assert got.trie_nodes - before.trie_nodes == m.nodes_visited
        assert got.tokens_sliced == 0  # no slices
        assert m.accept_token(t)


def test_a_token_that_ends_a_lexeme_adds_earley_items() -> None:
    m = _json_matcher(VOCAB)
    before = m.mask_stats()
    assert m.accept_token(VOCAB.encode("{")[0])  # "{" cannot grow: the parser sees it now
    after = m.mask_stats()
    assert after.earley_items > before.earley_items and after.lexer_steps == before.lexer_steps + 1


def test_the_mask_cache_copy_counts_every_text_token_as_cached() -> None:
    """Inside a string the lexer state loops: the next mask is the cache's copy, which
    walks nothing and decides every text token by lookup."""
    n_text = len(VOCAB.text_token_ids())
    m = _json_matcher(VOCAB)
    row = bm.allocate(VOCAB.size)
    for t in VOCAB.encode('["a'):
        m.fill_bitmask(row)
        assert m.accept_token(t)
    a = VOCAB.encode("a")[0]
    m.fill_bitmask(row)
    assert m.accept_token(a)  # the same lexer state and rows as before it
    before = m.mask_stats()
    m.fill_bitmask(row)
    after = m.mask_stats()
    assert m.nodes_visited == 0 and m.parser.cache_hits > 0
    assert after.tokens_cached - before.tokens_cached == n_text
    for f in ("trie_nodes", "lexer_steps", "earley_items", "tokens_sliced", "tokens_checked"):
        assert getattr(after, f) == getattr(before, f), f
    # without the cache nothing is cached, and every fill walks
    nc = _json_matcher(VOCAB, mask_cache=False)
    _walk(nc, VOCAB, '["aa", "ab"]')
    assert nc.mask_stats().tokens_cached == 0


def test_a_sliced_fill_counts_the_slices_tokens() -> None:
    """Inside a string the string slices are ORed in whole: their tokens are counted
    sliced; a fill that used no slice counts none."""
    m = _json_matcher(VOCAB, mask_cache=False)
    steps = _walk(m, VOCAB, TEXTS[0])
    last = MaskStats()
    for filled, accepted, sliced in steps:
        grew = filled.tokens_sliced - last.tokens_sliced
        assert sliced or grew == 0
        last = accepted
    assert any(sliced for _, _, sliced in steps) and m.mask_stats().tokens_sliced > 0


def test_fork_starts_at_zero_and_rollback_keeps_the_counts() -> None:
    m = _json_matcher(VOCAB)
    _walk(m, VOCAB, '{"name": "mask')
    now = m.mask_stats()
    f = m.fork()
    assert f.mask_stats() == MaskStats()
    m.rollback(3)
    assert m.mask_stats() == now
    row = bm.allocate(VOCAB.size)
    f.fill_bitmask(row)
    assert f.mask_stats().masks == 1 and f.mask_stats().trie_nodes + f.mask_stats().tokens_cached > 0
    assert m.mask_stats() == now  # the fork's work is its own
    m.fill_bitmask(row)
    assert m.mask_stats().masks == now.masks + 1


def test_limits_raise_their_option_and_errors_map_through_the_shared_codes() -> None:
    """A tiny max_row_items: the matcher's sticky error names the option, and the parser
    itself raises LimitExceeded with the configured maximum; every C code of the parser
    maps to the exception toolkit.core.errors gives it."""
    g = Grammar.from_lark('start: "a" start | "b"\n')
    eng = get_engine("llguidance", VOCAB, max_row_items=12)
    c = eng.compile(g)
    m = eng.matcher(c)
    for t in VOCAB.encode("a" * 30 + "b"):  # thirty nested rules, completed at once by b
        if not m.accept_token(t):
            break
    assert m.error is not None and "LimitExceeded" in m.error and "max_row_items" in m.error
    fresh = eng.matcher(c)
    with pytest.raises(LimitExceeded) as e:
        fresh.parser.push_bytes(b"a" * 30 + b"b")
    assert e.value.limit == "max_row_items" and e.value.maximum == 12 and e.value.value == 13
    t = c.tables
    for code, option, maximum in ((ERROR_CODES["ERR_MAX_LEXER_STATES"], "max_lexer_states", t.max_lexer_states),
                                  (ERROR_CODES["ERR_MAX_ROW_ITEMS"], "max_row_items", 12),
                                  (ERROR_CODES["ERR_MAX_STEPS"], "max_steps", t.max_steps)):
        err = t.error_of(code, 99)
        assert isinstance(err, LimitExceeded) and err.limit == option and err.maximum == maximum
    assert isinstance(t.error_of(ERROR_CODES["ERR_MEMORY"], 5), MemoryError)
    assert isinstance(t.error_of(ERROR_CODES["ERR_SHAPE"], 5), ValueError)
    assert t.error_of(ERROR_CODES["ERR_NONE"], 0) is None


@pytest.mark.parametrize("schema_file", ["s01_flat_person.json", "s05_nested_order.json"])
def test_llama3_schema_walk(schema_file: str) -> None:
    """A JSON schema on Llama 3: every counter a real walk fills is non-zero, a fork
    starts at zero, and the masks are the same with the counters as the fills say."""
    path = require_shared("tokenizers/llama-3/tokenizer.model")
    vocab = load_vocab(f"llama3:{path}")
    spec = json.loads((DATASETS / "schemas" / schema_file).read_text())
    data = next(t["data"] for t in spec["tests"] if t["valid"])
    eng = get_engine("llguidance", vocab)
    m = eng.matcher(eng.compile(spec["schema"]))
    steps = _walk(m, vocab, json.dumps(data))
    now = m.mask_stats()
    assert now.masks == len(steps) > 0
    for f in ("trie_nodes", "lexer_steps", "earley_items", "tokens_sliced"):
        assert getattr(now, f) > 0, f
    assert now.tokens_checked == 0
    f = m.fork()
    assert f.mask_stats() == MaskStats()
    # tokens decided per fill: at most the text tokens (a cache copy decides all of them)
    n_text = len(np.asarray(vocab.text_token_ids()))
    assert now.tokens_cached % n_text == 0 and now.tokens_sliced < now.masks * n_text
