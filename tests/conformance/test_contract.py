"""The Matcher contract (see toolkit.core.protocol), one suite run against every
registered engine that compiles over a hand-made vocabulary, and the check that each
engine's :class:`~toolkit.core.protocol.Capabilities` tell the truth.

A regular-only engine reads the JSON grammar nested at most twice (``JSON_FLAT_LARK``),
whose sentences walk like the recursive one's here.  outlines-core
(``any_vocabulary=False``) refuses a vocabulary where a token leads into a state no
token continues (``tr`` without ``u`` here): its contract checks run in
``tests/test_peers.py`` on a vocabulary of its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._support.fixtures import JSON_LARK, small_vocab
from tests.conformance import capabilities, engines, json_grammar, make
from toolkit.core import bitmask as bm
from toolkit.core.batch import ThreadedBatch, make_batch
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.protocol import (
    Capabilities,
    MaskEngine,
    MaskInfo,
    MaskStats,
    Matcher,
    MatcherBase,
)
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

ENGINES = engines(any_vocabulary=True)

EOS = 1
PAD = (28, 29)
SPECIAL = 0


def _ids(m: Matcher) -> set[int]:
    row = bm.allocate(30)
    m.fill_bitmask(row)
    return {int(i) for i in bm.allowed_ids(row[0], 30)}


_MADE: dict[str, MaskEngine] = {}


@pytest.fixture(params=ENGINES)
def engine(request) -> MaskEngine:
    """The engine over ``small_vocab()``, made once a module (LM-format-enforcer's
    tokenizer data takes seconds); each test compiles and matches afresh."""
    if request.param not in _MADE:
        _MADE[request.param] = make(request.param, small_vocab())
    return _MADE[request.param]


@pytest.fixture
def json_matcher(engine: MaskEngine) -> Matcher:
    return engine.matcher(engine.compile(json_grammar(engine.capabilities)))


def test_protocol_types(engine: MaskEngine, json_matcher: Matcher) -> None:
    assert isinstance(engine, MaskEngine)
    assert isinstance(json_matcher, Matcher)
    assert json_matcher.error is None


def test_fill_overwrites_the_whole_row(json_matcher: Matcher) -> None:
    rows = np.full((3, bm.words(30)), -1, dtype=np.int32)
    info = json_matcher.fill_bitmask(rows, 1)
    assert isinstance(info, MaskInfo) and info.allowed == bm.popcount(rows[1])
    assert (rows[0] == -1).all() and (rows[2] == -1).all()
    allowed = set(bm.allowed_ids(rows[1], 32).tolist())
    assert not allowed & {SPECIAL, EOS, *PAD, 30, 31}


LONG = [b"</s>", b"abcdefgh", b"abcdefghi", b"abcdefghijklmnop", b"ijklmnop", b"jklmnop", b"abcdefghX", b"abcdefgX",
        b"abcdefghijklmnoX"]


@pytest.mark.parametrize("name", ENGINES)
def test_a_token_is_its_bytes_short_or_long(name: str) -> None:
    # tokens of up to 8 bytes and longer ones are read alike (the session keeps the
    # short ones' bytes beside their kind), the last byte included
    vocab = Vocabulary.from_tokens(LONG, eos_ids=[0], special_tokens={0: "</s>"}, name="long")
    engine = make(name, vocab)
    compiled = engine.compile(Grammar.from_lark('start: "abcdefghijklmnop"\n'))
    for path in ([3], [1, 4], [2, 5]):
        m = engine.matcher(compiled)
        assert all(m.accept_token(t) for t in path), (name, path)
        assert m.is_accepting(), (name, path)
    for bad in (6, 7, 8):
        assert not engine.matcher(compiled).accept_token(bad), (name, bad)


def test_rejected_token_leaves_the_state_unchanged(json_matcher: Matcher) -> None:
    before = _ids(json_matcher)
    for bad in (3, SPECIAL, *PAD, 30, -1, 10_000):
        assert not json_matcher.accept_token(bad)
    assert _ids(json_matcher) == before
    assert json_matcher.validate_tokens([2, 3]) == 2 and _ids(json_matcher) == before


def test_eos_exactly_when_accepting_then_terminated(json_matcher: Matcher) -> None:
    m = json_matcher
    assert not m.accept_token(EOS) and not m.is_accepting()
    assert m.accept_token(2)  # {
    assert EOS not in _ids(m) and not m.accept_token(EOS)
    assert m.accept_token(3)  # }
    assert m.is_accepting() and EOS in _ids(m)
    m.rollback(2)
    # A number can grow and stays accepting.  (Not trailing whitespace after "}":
    # llguidance allows ignored text only where another lexeme may follow.)
    assert m.accept_token(11)  # 1
    assert m.is_accepting() and EOS in _ids(m)
    assert m.accept_token(9)  # 10
    assert EOS in _ids(m) and not m.is_terminated()
    assert m.accept_token(EOS)
    assert m.is_terminated()
    assert _ids(m) == {EOS}
    assert not m.accept_token(9)
    assert m.accept_token(EOS)  # EOS stays allowed, as the mask says
    m.rollback(2)
    assert not m.is_terminated() and 9 in _ids(m)


def test_rollback_restores_masks_and_validate_is_side_effect_free(json_matcher: Matcher) -> None:
    m = json_matcher
    seq = [22, 16, 23, 20, 4, 13, 7, 24, 5, 3]  # {"abc": [123,true]}
    masks = []
    for t in seq:
        masks.append(_ids(m))
        assert t in masks[-1]
        assert m.accept_token(t)
    assert m.is_accepting()
    for k in range(len(seq), 0, -1):
        m.rollback(1)
        assert _ids(m) == masks[k - 1]
    assert m.validate_tokens(seq + [3]) == len(seq)
    assert _ids(m) == masks[0]
    assert m.accept_tokens(seq[:4]) == 4
    with pytest.raises(ValueError):
        m.rollback(5)


def test_fork_is_independent(json_matcher: Matcher) -> None:
    m = json_matcher
    assert m.accept_tokens([2, 6]) == 2  # {"
    f = m.fork()
    assert _ids(f) == _ids(m)
    assert f.accept_tokens([14, 6, 8, 24, 3]) == 5  # a":true}
    assert f.is_accepting() and not m.is_accepting()
    assert m.accept_token(6) and not m.accept_token(3)  # {"" then "}" is invalid (needs ":")
    f.reset()
    assert f.error is None and not f.is_accepting() and 2 in _ids(f)


def test_mask_stats_count_masks_and_work(engine: MaskEngine, json_matcher: Matcher) -> None:
    """Every engine gives MaskStats: its masks exactly, work counts that only grow (or
    None where the engine cannot see them: ``work_counters=False``); a fork starts from zero."""
    m = json_matcher
    counts = engine.capabilities.work_counters
    assert m.mask_stats() == MaskStats(0, *([0] * 6 if counts else [None] * 6))
    row = bm.allocate(30)
    before = m.mask_stats()
    for k, t in enumerate([2, 6, 14, 6, 8, 24, 3], 1):  # {"a":true}
        m.fill_bitmask(row)
        assert m.accept_token(t)
        now = m.mask_stats()
        assert now.masks == k
        for field in MaskStats.WORK:
            a, b = getattr(before, field), getattr(now, field)
            assert (a is None) == (b is None) == (not counts)
            assert a is None or 0 <= a <= b, field
        before = now
    if counts:  # an engine with counters counts work of its own
        assert sum(getattr(now, f) for f in MaskStats.WORK) > 0
    m.rollback(3)
    assert m.mask_stats() == now  # work done stays counted
    f = m.fork()
    assert f.mask_stats().masks == 0
    f.fill_bitmask(row)
    assert f.mask_stats().masks == 1 and m.mask_stats() == now


@pytest.mark.parametrize("name", engines(any_vocabulary=True, where=lambda c: c.work_limit is not None))
def test_limit_hit_is_a_sticky_error_with_an_eos_only_mask(name: str) -> None:
    """The engine's ``work_limit`` option set to 12: completing thirty nested rules at
    once needs more, and the matcher ends in the sticky error, which names the option."""
    option = capabilities(name).work_limit
    eng = make(name, small_vocab(), **{option: 12})
    # (nested, not a repetition: a parser cannot flatten it; the optional "a" keeps each level open)
    m = eng.matcher(eng.compile(Grammar.from_lark('start: "a" start "a"? | "b"\n')))
    for _ in range(30):
        assert m.accept_token(14)
    assert not m.accept_token(17)
    assert m.error is not None and option in m.error and "12" in m.error
    assert _ids(m) == {EOS}
    assert not m.accept_token(17) and not m.accept_token(14)
    m.reset()
    assert m.error is None and _ids(m) == {14, 15, 17}  # a, ab, b


def test_wrong_bitmask_width_is_a_clear_error(json_matcher: Matcher) -> None:
    with pytest.raises(ValueError, match="words"):
        json_matcher.fill_bitmask(np.zeros((1, 5), dtype=np.int32))


@pytest.mark.parametrize("name", engines())
def test_every_registered_engine_holds_the_written_contract(name: str) -> None:
    """What the harness, the loop and the registry read of an engine is in
    :class:`MaskEngine` (no probing for it): every installed engine has all of it."""
    from strategies import engine_factory
    from toolkit.grammar.inputs import formats

    vocab = small_vocab()
    engine = make(name, vocab) if capabilities(name).any_vocabulary else None
    if engine is None:
        pytest.skip(f"{name} refuses hand-made vocabularies (any_vocabulary=False)")
    assert isinstance(engine, MaskEngine), name
    assert engine.name == name and engine.vocab is vocab and isinstance(engine.options, dict)
    assert set(engine.native_inputs) <= {f.name for f in formats()} and engine.schema_grammar in ("masklab", "own")
    assert engine_factory(name).requires == engine.requires
    assert isinstance(engine.capabilities, Capabilities) and engine.capabilities == engine_factory(name).capabilities
    assert {"version", "options"} <= set(engine.describe())
    engine.clear_memo()
    matchers = [engine.matcher(engine.compile(Grammar.from_regex("ab?")))]
    batch = engine.batch_matcher(matchers, 1)
    assert batch is None or batch.matchers == matchers


@pytest.mark.parametrize("name", ENGINES)
def test_capabilities_tell_the_truth(name: str) -> None:
    """Each declared capability is what the engine does: a regular-only engine refuses a
    recursive grammar and a context-free one compiles it; a native batch is not the
    threaded fallback; work counters are numbers or None; native drafts and byte-level
    forced bytes are the matcher's own; special tokens compile or are refused."""
    vocab = small_vocab()
    engine = make(name, vocab)
    cap = engine.capabilities
    if cap.grammars == "context-free":
        engine.compile(Grammar.from_lark(JSON_LARK))
    else:
        with pytest.raises(UnsupportedGrammar):
            engine.compile(Grammar.from_lark(JSON_LARK))
    c = engine.compile(Grammar.from_regex("(ab|b)+1"))
    matchers = [engine.matcher(c) for _ in range(2)]
    batch = make_batch(engine, matchers, 2)
    assert isinstance(batch, ThreadedBatch) == (cap.batch == "threads"), (name, type(batch).__name__)
    batch.close()
    m = matchers[0]
    m.fill_bitmask(bm.allocate(vocab.size))
    stats = m.mask_stats()
    assert all((getattr(stats, f) is not None) == cap.work_counters for f in MaskStats.WORK), stats
    kind = type(getattr(m, "inner", m))  # a wrapper over another matcher: judge the inner one
    own = {attr: getattr(kind, attr) is not getattr(MatcherBase, attr)
           for attr in ("fill_draft_bitmasks", "forced_bytes")}
    assert own["fill_draft_bitmasks"] == (cap.drafts == "native"), (name, kind.__name__)
    assert own["forced_bytes"] == (cap.forced == "bytes"), (name, kind.__name__)
