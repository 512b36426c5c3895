"""The Matcher contract, one suite run against every engine (see toolkit.core.protocol).

outlines-core is not in it: it compiles regular grammars only, and it refuses a
vocabulary where a token leads into a state no token continues (``tr`` without ``u``
here), so its contract checks run in ``tests/test_peers.py`` on a vocabulary of its own.
"""

from __future__ import annotations

import numpy as np
import pytest

from strategies import get_engine
from tests._support.fixtures import JSON_LARK, small_vocab
from toolkit.core import bitmask as bm
from toolkit.core.protocol import MaskEngine, MaskInfo, MaskStats, Matcher
from toolkit.grammar.ir import Grammar

# Engines that compile any Grammar on a hand-made vocabulary.  Strategies join as they land.
ENGINES = ["naive", "llguidance", "xgrammar", "peer:llguidance", "peer:xgrammar", "peer:llama.cpp", "peer:glrmask"]

# The package an engine needs (the ``[peers]`` extra); its tests skip without it.
REQUIRES = {"peer:llguidance": "llguidance", "peer:xgrammar": "xgrammar", "peer:llama.cpp": "llama_cpp",
            "peer:glrmask": "glrmask"}

# How to make each engine hit a limit on ``start: "a" start | "b"`` after thirty a's
# (options, words of the error), where it has limits at all.
LIMITS = {
    "naive": ({"max_items": 12}, "earley_items_per_chart"),
    "llguidance": ({"max_row_items": 12}, "max_row_items"),
    "xgrammar": ({"max_items": 12}, "earley_items_per_chart"),
    "peer:llguidance": ({"limits": {"max_items_in_row": 12}}, "max is 12"),
}

EOS = 1
PAD = (28, 29)
SPECIAL = 0


def _ids(m: Matcher) -> set[int]:
    row = bm.allocate(30)
    m.fill_bitmask(row)
    return {int(i) for i in bm.allowed_ids(row[0], 30)}


@pytest.fixture(params=ENGINES)
def engine(request) -> MaskEngine:
    package = REQUIRES.get(request.param)
    if package is not None:
        pytest.importorskip(package, reason=f"{request.param} needs {package} (the [peers] extra)")
    return get_engine(request.param, small_vocab())


@pytest.fixture
def json_matcher(engine: MaskEngine) -> Matcher:
    return engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK)))


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
    None where the engine cannot see them, the peers); a fork starts from zero."""
    m = json_matcher
    assert m.mask_stats() == MaskStats(0, *([None] * 6 if engine.name.startswith("peer:") else [0] * 6))
    row = bm.allocate(30)
    before = m.mask_stats()
    for k, t in enumerate([2, 6, 14, 6, 8, 24, 3], 1):  # {"a":true}
        m.fill_bitmask(row)
        assert m.accept_token(t)
        now = m.mask_stats()
        assert now.masks == k
        for field in MaskStats.WORK:
            a, b = getattr(before, field), getattr(now, field)
            assert (a is None) == (b is None) == engine.name.startswith("peer:")
            assert a is None or 0 <= a <= b, field
        before = now
    if not engine.name.startswith("peer:"):  # our engines count work of their own
        assert sum(getattr(now, f) for f in MaskStats.WORK) > 0
    m.rollback(3)
    assert m.mask_stats() == now  # work done stays counted
    f = m.fork()
    assert f.mask_stats().masks == 0
    f.fill_bitmask(row)
    assert f.mask_stats().masks == 1 and m.mask_stats() == now


def test_limit_hit_is_a_sticky_error_with_an_eos_only_mask(engine: MaskEngine) -> None:
    if engine.name not in LIMITS:
        pytest.skip(f"{engine.name} has no parser limit to hit")
    options, words = LIMITS[engine.name]
    eng = get_engine(engine.name, small_vocab(), **options)
    m = eng.matcher(eng.compile(Grammar.from_lark('start: "a" start | "b"\n')))
    for _ in range(30):
        assert m.accept_token(14)
    # Completing thirty nested rules at once needs more than twelve items.
    assert not m.accept_token(17)
    assert m.error is not None and words in m.error
    assert _ids(m) == {EOS}
    assert not m.accept_token(17) and not m.accept_token(14)
    m.reset()
    assert m.error is None and _ids(m) == {14, 15, 17}  # a, ab, b


def test_wrong_bitmask_width_is_a_clear_error(json_matcher: Matcher) -> None:
    with pytest.raises(ValueError, match="words"):
        json_matcher.fill_bitmask(np.zeros((1, 5), dtype=np.int32))


def test_every_registered_engine_holds_the_written_contract() -> None:
    """What the harness, the loop and the registry read of an engine is in
    :class:`MaskEngine` (no probing for it): every installed engine has all of it."""
    from strategies import available_engines, engine_factory
    from toolkit.grammar.inputs import formats

    vocab = small_vocab()
    for name in available_engines():
        engine = get_engine(name, vocab)
        assert isinstance(engine, MaskEngine), name
        assert engine.name == name and engine.vocab is vocab and isinstance(engine.options, dict)
        assert set(engine.native_inputs) <= {f.name for f in formats()} and engine.schema_grammar in ("masklab", "own")
        assert engine_factory(name).requires == engine.requires
        assert {"version", "options"} <= set(engine.describe())
        engine.clear_memo()
        matchers = [engine.matcher(engine.compile(Grammar.from_regex("ab?")))]
        batch = engine.batch_matcher(matchers, 1)
        assert batch is None or batch.matchers == matchers


@pytest.mark.parametrize("name", [*ENGINES, "outlines", "peer:outlines-core"])
def test_a_bare_string_is_refused_and_its_kind_told_compiles(name: str) -> None:
    """``compile("[0-9]+")`` could be a regex, Lark or a schema's text: every engine
    refuses it, naming the three wrappers; ``RegexText`` and ``LarkText`` compile to the
    masks of the Grammar they spell."""
    package = REQUIRES.get(name) or ("outlines_core" if name == "peer:outlines-core" else None)
    if package:
        pytest.importorskip(package, reason=f"{name} needs {package} (the [peers] extra)")
    from toolkit.core.errors import UnsupportedGrammar
    from toolkit.grammar import RegexText
    from toolkit.grammar.lark_dialect import LarkText

    engine = get_engine(name, small_vocab())
    with pytest.raises(UnsupportedGrammar, match=r"got a str \('\[0-9\]\+'\).*RegexText\(text\).*LarkText.*JsonSchemaText"):
        engine.compile("[0-9]+")
    lark = 'start: "a" ("b" | "c")\n'
    for told, grammar in ((RegexText("[0-9]+"), Grammar.from_regex("[0-9]+")),
                          (LarkText(lark), Grammar.from_lark(lark))):
        want, got = engine.matcher(engine.compile(grammar)), engine.matcher(engine.compile(told))
        assert _ids(got) == _ids(want) and _ids(got), told
