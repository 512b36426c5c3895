"""The batch machinery itself (lanes, argument checks); what every engine's batch must
do, equal the single calls, is the conformance suite's (``tests/conformance/test_batch.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from strategies import get_engine
from tests._support.fixtures import small_vocab
from toolkit.core import bitmask as bm
from toolkit.core.batch import lanes, make_batch
from toolkit.grammar.ir import Grammar


def test_lanes_keep_rows_of_one_compiled_grammar_together() -> None:
    class M:
        def __init__(self, c):
            self.compiled = c

    a, b = object(), object()
    assert lanes([M(a), M(b), M(a), M(None), M(b)]) == [[0, 2], [1, 4], [3]]  # None: a lane of its own


def test_bad_step_arguments_are_clear_errors() -> None:
    vocab = small_vocab()
    engine = get_engine("outlines", vocab)
    c = engine.compile(Grammar.from_regex("ab"))
    batch = make_batch(engine, [engine.matcher(c), engine.matcher(c)], 1)
    good = bm.allocate(vocab.size, 2)
    with pytest.raises(ValueError, match="one id per matcher"):
        batch.step(np.zeros(3, dtype=np.int32), good)
    with pytest.raises(ValueError, match="2-D int32"):
        batch.step(None, good.astype(np.int64))
    with pytest.raises(ValueError, match="at least 2 rows"):
        batch.step(None, good[:1])
    with pytest.raises(ValueError, match="NO_TOKEN"):
        batch.step(np.array([-3, 0], dtype=np.int32), good)
    with pytest.raises(ValueError, match="threads"):
        make_batch(engine, [engine.matcher(c)], 0)
    batch.close()
