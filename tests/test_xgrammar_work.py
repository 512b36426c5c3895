"""Strategy ``xgrammar``'s work counters (``Matcher.mask_stats()``) on real walks.

What the parser counts (see :mod:`strategies.xgrammar._pda`): Earley items and DFA
transitions of every byte read, the bytes a fill's checks push (trie nodes), the
uncertain tokens checked one by one, and the text tokens the cache decides alone, so
that per fill ``tokens_cached + tokens_checked`` is the vocabulary's text tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from strategies import get_engine
from tests._support.shared import PROJECT_ROOT, require_shared
from tests.test_llguidance import EOS, LEX
from toolkit.core import bitmask as bm
from toolkit.core.errors import LimitExceeded
from toolkit.core.protocol import MaskStats, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import load_item
from toolkit.grammar.ir import Grammar

JSON_LARK = PROJECT_ROOT / "datasets" / "grammars" / "g01_json.json"


def _walk(m: Matcher, vocab: Vocabulary, tokens: list[int]) -> int:
    """Fill a mask before each token, then accept it (the token must be allowed);
    returns the fills."""
    row = bm.allocate(vocab.size)
    for n, t in enumerate(tokens):
        m.fill_bitmask(row)
        assert bm.allowed_ids(row[0], vocab.size).tolist().count(t) == 1, (n, vocab.token_bytes[t])
        assert m.accept_token(t)
    return len(tokens)


def _random_walk(m: Matcher, steps: int, seed: int) -> tuple[int, int]:
    """A seeded walk over LEX of up to ``steps`` text tokens, each one the mask allows;
    returns the tokens taken and the fills made."""
    rng = np.random.default_rng(seed)
    row = bm.allocate(LEX.size)
    taken = fills = 0
    while taken < steps:
        m.fill_bitmask(row)
        fills += 1
        allowed = [t for t in bm.allowed_ids(row[0], LEX.size).tolist() if t != EOS]
        if not allowed:
            break
        assert m.accept_token(int(rng.choice(allowed)))
        taken += 1
    return taken, fills


def _check_counts(stats: MaskStats, fills: int, text_tokens: int) -> None:
    assert stats.masks == fills
    assert stats.earley_items > 0 and stats.lexer_steps > 0
    assert stats.tokens_sliced == 0
    # every text token of every fill is decided by the cache or checked on its own
    assert stats.tokens_cached + stats.tokens_checked == fills * text_tokens
    assert stats.tokens_cached > 0
    assert (stats.trie_nodes > 0) == (stats.tokens_checked > 0)


def test_counters_on_a_lark_json_walk() -> None:
    g = load_item(JSON_LARK).grammar()
    e = get_engine("xgrammar", LEX)
    c = e.compile(g)
    m = e.matcher(c)
    assert m.mask_stats() == MaskStats()  # chart 0 is the parser's making, no work
    taken, fills = _random_walk(m, 40, seed=3)
    assert taken >= 10
    stats = m.mask_stats()
    _check_counts(stats, fills, c.tables.n_tokens)
    assert stats.tokens_checked > 0  # JSON numbers and strings leave their rules mid-token
    # a fork starts at zero and counts its own work only
    f = m.fork()
    assert f.mask_stats() == MaskStats()
    f.fill_bitmask(bm.allocate(LEX.size))
    assert f.mask_stats().masks == 1 and f.mask_stats().tokens_cached > 0
    assert m.mask_stats() == stats
    # accepts count too (items and DFA steps), fills do not happen there
    before = m.mask_stats()
    row = bm.allocate(LEX.size)
    m.fill_bitmask(row)
    t = next(t for t in bm.allowed_ids(row[0], LEX.size).tolist() if t != EOS)
    after_fill = m.mask_stats()
    assert m.accept_token(t)
    grown = m.mask_stats() - after_fill
    assert grown.masks == 0 and grown.earley_items > 0 and grown.lexer_steps > 0
    assert grown.tokens_cached == grown.tokens_checked == grown.trie_nodes == 0
    assert (after_fill - before).masks == 1


def test_reset_keeps_counting() -> None:
    e = get_engine("xgrammar", LEX)
    m = e.matcher(e.compile(load_item(JSON_LARK).grammar()))
    _random_walk(m, 8, seed=5)
    before = m.mask_stats()
    m.reset()
    assert m.mask_stats() == before
    m.fill_bitmask(bm.allocate(LEX.size))
    grown = m.mask_stats() - before
    assert grown.masks == 1 and grown.tokens_cached > 0


def test_a_small_chart_limit_is_still_the_error() -> None:
    amb = Grammar.from_lark('start: x\nx: x x | "a"\n')
    e = get_engine("xgrammar", LEX, max_items=40)
    m = e.matcher(e.compile(amb))
    a = LEX.token_bytes.index(b"a")
    n = 0
    while m.error is None and n < 60:
        m.accept_token(a)
        n += 1
    assert m.error is not None and "max_items" in m.error
    assert m.mask_stats().earley_items > 0
    tiny = get_engine("xgrammar", LEX, max_items=2)  # chart 0 has 3 items
    with pytest.raises(LimitExceeded, match="max_items") as info:
        tiny.matcher(tiny.compile(amb))
    assert info.value.limit == "max_items" and info.value.maximum == 2
    # while the cache is built (a base parse's chart), the error says so
    with pytest.raises(LimitExceeded, match="max_items") as info:
        get_engine("xgrammar", LEX, max_items=20).compile(load_item(JSON_LARK).grammar())
    assert info.value.__notes__ == ["while precomputing the token mask cache"]


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.mark.parametrize("name", ["Github_easy---o1114", "BFCL_java_13"])
def test_counters_on_a_llama3_schema_walk(llama3: Vocabulary, name: str) -> None:
    item = load_item(require_shared(f"datasets/maskbench/{name}.json"))
    e = get_engine("xgrammar", llama3)
    c = e.compile(item.source())
    m = e.matcher(c)
    case = next(k for k in item.cases if k.valid)
    tokens = llama3.encode(case.text)
    fills = _walk(m, llama3, tokens)
    m.fill_bitmask(bm.allocate(llama3.size))
    assert m.accept_token(llama3.eos_ids[0])
    _check_counts(m.mask_stats(), fills + 1, c.tables.n_tokens)
    assert m.mask_stats().tokens_checked > 0
    m.fill_bitmask(bm.allocate(llama3.size))  # terminated: the core fills nothing
    s = m.mask_stats()
    assert s.masks == fills + 2 and s.tokens_cached + s.tokens_checked == (fills + 1) * c.tables.n_tokens
