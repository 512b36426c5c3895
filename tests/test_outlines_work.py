"""The outlines cursor's work counters (``Matcher.mask_stats()``, toolkit.core.protocol.MaskStats)
on real schemas.

What the cursor counts (strategies/outlines/_index.pyx): every fill of a live matcher is
the index's lookup of all ``vocab_size`` verdicts (``tokens_cached``); a token accepted
in a state stored as a dense row runs its bytes through the DFA (``lexer_steps``, one a
byte), one accepted in a sparse row is a binary search (nothing), one refused runs
nothing.  The index build's trie walk is a compile figure, so ``trie_nodes`` stays 0 at
decode time, as do ``earley_items``, ``tokens_checked`` and ``tokens_sliced``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strategies import get_engine
from tests._support.shared import require_shared
from toolkit.core import bitmask as bm
from toolkit.core.protocol import MaskStats, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
SCHEMA = json.loads((DATASETS / "schemas" / "s04_nested_address.json").read_text())
TEXTS = [json.dumps(t["data"]) for t in SCHEMA["tests"] if t["valid"]]
ZERO_AT_DECODE = ("trie_nodes", "earley_items", "tokens_checked", "tokens_sliced")

# A vocabulary for the schema's valid instances: each of their characters and a few
# longer pieces (keys, punctuation runs), so that rows are both dense and sparse.
_PIECES = [b'{"', b'": ', b'", "', b'"}', b"}}", b"name", b"address", b"street", b"city", b"country",
           b"postal_code", b"Main", b"St", b"US", b"12345", b", "]
_CHARS = sorted({c for t in TEXTS for c in t.encode()})
TOKENS = [b"", b"", *(bytes([c]) for c in _CHARS), *_PIECES]
EOS = 1
VOCAB = Vocabulary.from_tokens(TOKENS, eos_ids=(EOS,), special_tokens={0: "<s>", EOS: "</s>"},
                               size=len(TOKENS) + 2, name="address-work")


def _matcher(vocab: Vocabulary, **options) -> Matcher:
    eng = get_engine("outlines", vocab, **options)
    return eng.matcher(eng.compile(SCHEMA["schema"]))


def _walk(m: Matcher, vocab: Vocabulary, text: str) -> int:
    """Fill and accept every token of ``text``, checking each step's counts: a fill adds
    one mask and ``vocab_size`` cached verdicts, an accept the token's bytes when its
    state's row is dense.  Returns the lexer steps the accepts should have counted."""
    row = bm.allocate(vocab.size)
    steps = 0
    for t in vocab.encode(text):
        before = m.mask_stats()
        m.fill_bitmask(row)
        filled = m.mask_stats()
        assert filled - before == MaskStats(1, tokens_cached=vocab.size)
        dense = m.index.is_dense(m.state)
        assert bm.get_bit(row[0], t) and m.accept_token(t)
        ran = len(vocab.token_bytes[t]) if dense else 0
        assert m.mask_stats() - filled == MaskStats(0, lexer_steps=ran)
        steps += ran
    return steps


@pytest.mark.parametrize("text", TEXTS)
def test_a_walk_counts_the_index_lookups_and_the_dense_rows_bytes(text: str) -> None:
    m = _matcher(VOCAB)
    assert m.mask_stats() == MaskStats()  # making the matcher is not counted
    steps = _walk(m, VOCAB, text)
    now = m.mask_stats()
    assert now.masks == len(VOCAB.encode(text))
    assert now.tokens_cached == now.masks * VOCAB.size
    assert now.lexer_steps == steps
    assert all(getattr(now, f) == 0 for f in ZERO_AT_DECODE)


@pytest.mark.parametrize(("dense_min_tokens", "dense"), [(1, True), (10**9, False)])
def test_dense_rows_run_bytes_and_sparse_rows_look_up(dense_min_tokens: int, dense: bool) -> None:
    m = _matcher(VOCAB, dense_min_tokens=dense_min_tokens)
    text = TEXTS[0]
    _walk(m, VOCAB, text)
    expected = sum(len(VOCAB.token_bytes[t]) for t in VOCAB.encode(text)) if dense else 0
    assert m.mask_stats().lexer_steps == expected


def test_a_refused_token_and_a_finished_matcher_count_no_work() -> None:
    m = _matcher(VOCAB, dense_min_tokens=1)  # every row dense: an accept would run bytes
    row = bm.allocate(VOCAB.size)
    m.fill_bitmask(row)
    refused = next(t for t in range(2, len(TOKENS)) if not bm.get_bit(row[0], t))
    before = m.mask_stats()
    assert not m.accept_token(refused)
    assert m.mask_stats() == before
    for t in VOCAB.encode(TEXTS[0]):
        assert m.accept_token(t)
    assert m.accept_token(EOS)
    before = m.mask_stats()
    m.fill_bitmask(row)  # terminated: EOS only, nothing asked of the index
    assert m.mask_stats() - before == MaskStats(1)


def test_fork_starts_at_zero_rollback_and_reset_keep_the_counts() -> None:
    m = _matcher(VOCAB)
    _walk(m, VOCAB, '{"name": "Gr')
    now = m.mask_stats()
    f = m.fork()
    assert f.mask_stats() == MaskStats()
    row = bm.allocate(VOCAB.size)
    f.fill_bitmask(row)
    assert f.mask_stats() == MaskStats(1, tokens_cached=VOCAB.size)
    assert m.mask_stats() == now  # the fork's work is its own
    m.rollback(2)
    assert m.mask_stats() == now
    m.reset()
    assert m.mask_stats() == now  # a reset matcher goes on counting
    m.fill_bitmask(row)
    assert m.mask_stats() - now == MaskStats(1, tokens_cached=VOCAB.size)


@pytest.mark.parametrize("schema_file", ["s01_flat_person.json", "s04_nested_address.json", "s05_nested_order.json"])
def test_llama3_schema_walk(schema_file: str) -> None:
    """A JSON schema on Llama 3: masks are the fills, every fill decides all 128,256 ids
    from the index, accepts in dense rows read their bytes, and a fork starts at zero."""
    path = require_shared("tokenizers/llama-3/tokenizer.model")
    vocab = load_vocab(f"llama3:{path}")
    spec = json.loads((DATASETS / "schemas" / schema_file).read_text())
    text = json.dumps(next(t["data"] for t in spec["tests"] if t["valid"]))
    eng = get_engine("outlines", vocab)
    m = eng.matcher(eng.compile(spec["schema"]))
    steps = _walk(m, vocab, text)
    now = m.mask_stats()
    assert now.masks == len(vocab.encode(text)) > 0
    assert now.tokens_cached == now.masks * vocab.size
    assert now.lexer_steps == steps
    assert all(getattr(now, f) == 0 for f in ZERO_AT_DECODE)
    f = m.fork()
    assert f.mask_stats() == MaskStats()
