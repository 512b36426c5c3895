"""Inputs whose language is empty are errors at compile (:class:`Unsatisfiable`), in
every strategy that reads them through masklab's readers (``schema_grammar="masklab"``;
an engine with a schema compiler of its own refuses, or not, as it does:
``masklab agree --classify`` reports it)."""

from __future__ import annotations

import pytest

from tests._support.fixtures import small_vocab
from tests.conformance import engines, make
from tests.test_unsatisfiable import SCHEMAS
from toolkit.core.errors import Unsatisfiable
from toolkit.grammar.ir import RegexText


@pytest.mark.parametrize("engine", engines(any_vocabulary=True))
def test_every_strategy_refuses_empty_inputs(engine: str) -> None:
    eng = make(engine, small_vocab())
    if eng.schema_grammar != "masklab":
        pytest.skip(f"{engine} reads schemas and regexes with its own compiler (schema_grammar='own')")
    for schema, _, _ in SCHEMAS:
        with pytest.raises(Unsatisfiable):
            eng.compile(schema)
    with pytest.raises(Unsatisfiable) as e:
        eng.compile(RegexText("a\ud800b"))  # a lone surrogate has no UTF-8: the regex matches nothing
    # a context-free engine reads the regex into a Grammar, which names the rule; outlines
    # (regular grammars) compiles the regex itself
    if eng.capabilities.grammars == "context-free" or e.value.rule is not None:
        assert e.value.rule == "PATTERN", (engine, e.value.rule)
