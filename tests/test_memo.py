"""toolkit.core.memo: an engine keeps its own memo across compiles, apart from other engines
and from the default scope the harness empties; masks are the same warm or cold."""

from __future__ import annotations

import pytest

from strategies import get_engine
from tests._support.fixtures import small_vocab
from toolkit.automata.regex import compile_regex
from toolkit.bench.measure import clear_toolkit_caches
from toolkit.core import bitmask as bm
from toolkit.core import memo

SCHEMA = {"type": "object", "properties": {"ab": {"type": "string", "pattern": "^[a-c]+$"},
                                           "b": {"type": "integer", "minimum": 3}},
          "required": ["ab"], "additionalProperties": False}
TABLE = "toolkit.automata.regex.compile_regex"


def test_scopes_are_apart_and_the_default_is_what_the_harness_clears() -> None:
    scope = memo.MemoScope("mine")
    clear_toolkit_caches()
    with scope.active():
        assert memo.current() is scope
        dfa = compile_regex("[a-c]+x")
        assert compile_regex("[a-c]+x") is dfa  # memoized in the scope
    assert memo.current() is memo.DEFAULT
    assert len(scope.table(TABLE)) == 1 and len(memo.DEFAULT.table(TABLE)) == 0
    assert compile_regex("[a-c]+x") is not dfa  # the default scope built its own
    clear_toolkit_caches()
    assert len(memo.DEFAULT.table(TABLE)) == 0 and len(scope.table(TABLE)) == 1
    scope.clear()
    assert len(scope.table(TABLE)) == 0


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines"])
def test_engine_memo_is_kept_across_compiles_and_masks_do_not_change(name: str) -> None:
    vocab = small_vocab()
    warm, other = get_engine(name, vocab), get_engine(name, vocab)
    cold = get_engine(name, vocab, memo=False)
    assert cold.describe()["options"]["memo"] is False
    clear_toolkit_caches()
    warm.compile(SCHEMA)
    kept = len(warm.memo.table(TABLE))
    assert kept > 0 and len(other.memo.table(TABLE)) == 0
    clear_toolkit_caches()  # the harness's clear leaves the engine's own memo alone
    assert len(warm.memo.table(TABLE)) == kept
    again = warm.compile(SCHEMA)  # from the memo
    clear_toolkit_caches()
    fresh = cold.compile(SCHEMA)
    a, b = warm.matcher(again), cold.matcher(fresh)
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    for t in vocab.encode('{"ab": "abc", "b": 12}') + [vocab.eos_ids[0]]:
        a.fill_bitmask(ra)
        b.fill_bitmask(rb)
        assert (ra == rb).all()
        assert a.accept_token(t) and b.accept_token(t)
    warm.clear_memo()
    assert len(warm.memo.table(TABLE)) == 0
    with pytest.raises(ValueError, match="memo must be a bool|option .memo. takes bool"):
        get_engine(name, vocab, memo="yes")


def test_the_harness_clears_every_cache_of_the_regex_grammar_and_schema_floors() -> None:
    """Moving a cached function to another module must not leave it warm across cold
    compiles: every ``cache_clear`` cache of those floors is empty after the clear."""
    import importlib
    import pkgutil

    import toolkit
    from toolkit.grammar.ir import Grammar

    Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"},
                                                              "b": {"type": "number", "multipleOf": 0.5}}}).to_regex(
        max_depth=2)
    caches = []
    for info in pkgutil.walk_packages(toolkit.__path__, "toolkit."):
        if info.name.startswith(("toolkit.automata.", "toolkit.grammar.", "toolkit.jsonschema.")) \
                and info.name != "toolkit.grammar.special":
            mod = importlib.import_module(info.name)
            caches += [v for v in vars(mod).values()
                       if callable(getattr(v, "cache_clear", None)) and getattr(v, "__module__", None) == info.name]
    filled = [c for c in caches if hasattr(c, "cache_info") and c.cache_info().currsize]
    assert len(caches) >= 10 and filled  # the compile above filled some
    clear_toolkit_caches()
    assert [c.__qualname__ for c in caches if hasattr(c, "cache_info") and c.cache_info().currsize] == []
