"""The batch half of the protocol: ``make_batch(engine, matchers).step`` equals the
single calls (accept results, masks, allowed counts, and the states afterwards,
rollback included), for every engine: on a small vocabulary, and on real MaskBench walks
with Llama-3 for the engines whose masks take microseconds there (``mask_cost="fast"``;
the slow ones are held to it on the small vocabulary)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests._support.fixtures import small_vocab
from tests._support.shared import require_shared
from tests.conformance import capabilities, engines, make
from toolkit.core import bitmask as bm
from toolkit.core.batch import NO_TOKEN, SKIP, NativeBatchMatcher, ThreadedBatch, make_batch
from toolkit.core.errors import MasklabError
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import iter_items
from toolkit.grammar.ir import Grammar

N_ITEMS = 6


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.fixture(scope="module")
def items() -> list:
    """MaskBench schemas with a valid instance (the first ones by name, every 50th)."""
    folder = require_shared("datasets/maskbench")
    out = []
    for item in list(iter_items(folder))[::50]:
        if any(c.valid for c in item.cases):
            out.append(item)
        if len(out) == N_ITEMS:
            break
    return out


def _walks(vocab: Vocabulary, items: list) -> list[list[int]]:
    return [[*vocab.encode(next(c.text for c in it.cases if c.valid)), vocab.eos_ids[0]] for it in items]


def _compare(vocab: Vocabulary, engine, compiled: list, walks: list[list[int]], threads: int) -> None:
    """Row i decodes walks[i] with compiled[i]: one-at-a-time calls against a batch."""
    n = len(compiled)
    singles = [engine.matcher(c) for c in compiled]
    batched = [engine.matcher(c) for c in compiled]
    batch = make_batch(engine, batched, threads)
    words = bm.words(vocab.size)
    ref = np.zeros((n, words), dtype=np.int32)
    got = np.full((n, words), 7, dtype=np.int32)
    rng = np.random.default_rng(0)
    native = isinstance(batch, NativeBatchMatcher | ThreadedBatch)  # they time each row
    s = -1
    while s <= max(len(w) for w in walks):
        s += 1
        tokens = np.full(n, SKIP, dtype=np.int32)
        for i, w in enumerate(walks):
            if s == 0:
                tokens[i] = NO_TOKEN
            elif s <= len(w):
                tokens[i] = w[s - 1]
                if rng.random() < 0.15:  # now and then a token the mask refuses (then the right one next)
                    refused = np.flatnonzero(~bm.to_bool(ref[i], vocab.size))
                    if len(refused):
                        tokens[i] = int(refused[rng.integers(len(refused))])
                        walks[i].insert(s - 1, walks[i][s - 1])
        want_acc = np.full(n, -1, dtype=np.int8)
        want_allowed = np.full(n, -1, dtype=np.int32)
        for i, m in enumerate(singles):
            t = int(tokens[i])
            if t == SKIP:
                continue
            if t != NO_TOKEN:
                want_acc[i] = m.accept_token(t)
            want_allowed[i] = m.fill_bitmask(ref, i).allowed
        before = got.copy()
        res = batch.step(tokens, got)
        assert res.accepted.tolist() == want_acc.tolist(), (engine.name, s)
        assert res.allowed.tolist() == want_allowed.tolist(), (engine.name, s)
        for i in range(n):
            if tokens[i] == SKIP:
                assert np.array_equal(got[i], before[i])  # a skipped row is left alone
            else:
                assert np.array_equal(got[i], ref[i]), (engine.name, s, i)
                assert np.isnan(res.seconds[i]) != native
        assert res.wall_s >= 0
    batch.close()
    for a, b in zip(singles, batched, strict=True):
        assert a.num_tokens == b.num_tokens and a.is_terminated() == b.is_terminated()
        # the same error (llguidance's message carries its own timings: numbers aside)
        assert (a.error is None) == (b.error is None)
        assert a.error is None or re.sub(r"\d+", "#", a.error) == re.sub(r"\d+", "#", b.error)
        k = min(3, a.num_tokens)
        a.rollback(k)
        b.rollback(k)
        ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
        assert a.fill_bitmask(ra).allowed == b.fill_bitmask(rb).allowed and np.array_equal(ra, rb)
        assert a.is_accepting() == b.is_accepting() and a.is_terminated() == b.is_terminated()


@pytest.mark.shared
@pytest.mark.parametrize("name", engines(mask_cost="fast"))
def test_batch_equals_single_calls_on_maskbench_walks(name: str, llama3: Vocabulary, items: list) -> None:
    engine = make(name, llama3)
    compiled, walks = [], []
    for item, walk in zip(items, _walks(llama3, items), strict=True):
        try:
            c = engine.compile(item.source())
        except MasklabError:
            continue  # outside what this engine compiles (its documented limits)
        compiled.append(c)
        walks.append(walk)
    assert len(compiled) >= 3, f"{name} compiled too few of the test schemas"
    # the first grammar twice more: rows sharing compiled tables go in one lane
    compiled += [compiled[0], compiled[0]]
    walks += [list(walks[0]), list(walks[0][: len(walks[0]) // 2])]
    _compare(llama3, engine, compiled, walks, threads=2)


@pytest.mark.parametrize("name", engines(any_vocabulary=True))
def test_batch_equals_single_calls_on_a_small_vocabulary(name: str) -> None:
    """The threaded fallback and the native batches, with a grammar whose matchers
    share their compiled tables in every row (one lane), and walks of several lengths."""
    vocab = small_vocab()
    engine = make(name, vocab)
    g = Grammar.from_regex("(ab|b)+1")
    c = engine.compile(g)
    ids = {vocab.token_bytes[t]: t for t in vocab.text_token_ids().tolist()}
    walk = [ids[b"a"], ids[b"b"], ids[b"b"], ids[b"1"], vocab.eos_ids[0]]
    _compare(vocab, engine, [c, c, c, engine.compile(g)], [list(walk), walk[:2], walk[:4], list(walk)], threads=2)


@pytest.mark.parametrize("name", engines(where=lambda c: c.work_limit is not None))
def test_a_limit_hit_in_a_batch_is_the_single_calls_sticky_error(name: str) -> None:
    """Rows that hit a parser limit mid-batch (the ``work_limit`` option at 12) end in the
    same sticky error state, with the same EOS-only mask, as the single calls; the other
    rows go on."""
    vocab = small_vocab()
    words = capabilities(name).work_limit
    engine = make(name, vocab, **{words: 12})
    # (nested, not a repetition: a parser cannot flatten it; the optional "a" keeps each level open)
    c = engine.compile(Grammar.from_lark('start: "a" start "a"? | "b"\n'))
    deep = [14] * 30 + [17, 17, 14, vocab.eos_ids[0]]  # completing thirty rules at once: past the limit
    shallow = [14, 14, 17, vocab.eos_ids[0]]
    _compare(vocab, engine, [c, c, c], [list(deep), list(shallow), list(deep)], threads=2)
    batched = [engine.matcher(c) for _ in range(2)]
    batch = make_batch(engine, batched, 2)
    mask = bm.allocate(vocab.size, 2)
    for k, t in enumerate(deep[:31]):  # row 1 reads "aa", then is skipped
        batch.step(np.array([t, 14 if k < 2 else SKIP], dtype=np.int32), mask)
    assert batched[0].error is not None and words in batched[0].error and batched[1].error is None
    assert bm.allowed_ids(mask[0], vocab.size).tolist() == list(vocab.eos_ids)
    batch.close()
