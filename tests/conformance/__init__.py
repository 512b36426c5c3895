"""The conformance suite: the checks every strategy takes, parametrized from the registry.

Each suite here asks :func:`engines` for the registered engines whose
:class:`~toolkit.core.protocol.Capabilities` fit its checks (``grammars="context-free"``,
``batch="native"``, ``mask_cost="fast"``...), so a strategy joins every suite by being
registered (:func:`strategies.register`, ``MASKLAB_ENGINES`` or an entry point) with
its capabilities stated, and no test file is edited (``docs/extending.md``).  An engine
whose dependencies are not installed is still listed, skipped with the reason.

The suites:

* ``test_contract.py``: the :class:`~toolkit.core.protocol.Matcher` contract (masks,
  EOS, rollback, fork, sticky errors, work counters) and that each capability tells the
  truth;
* ``test_walks.py``: random walks with forks and rollbacks equal to ``naive``'s;
* ``test_batch.py``: a batch step equals the single calls;
* ``test_forced.py``: forced bytes and tokens equal ``naive``'s, draft masks equal the
  sequential ones;
* ``test_unsatisfiable.py``: empty languages refused at compile;
* ``test_special_tokens.py``: grammars that name special tokens, against ``naive``;
* ``test_bad_input.py``: typed errors for what an engine cannot take.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

import pytest

from strategies import engine_factory, get_engine, registered_engines
from toolkit.core.protocol import Capabilities, MaskEngine
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

__all__ = ["engines", "capabilities", "json_grammar", "make", "missing", "partial_tokens"]


def capabilities(name: str) -> Capabilities:
    """The capabilities engine ``name`` declares (its factory's class attribute)."""
    cap = getattr(engine_factory(name), "capabilities", None)
    return cap if isinstance(cap, Capabilities) else Capabilities()


def missing(name: str) -> list[str]:
    """The modules engine ``name`` requires that are not installed."""
    return [m for m in getattr(engine_factory(name), "requires", ()) if find_spec(m) is None]


def engines(*, where: Callable[[Capabilities], bool] | None = None, exclude: tuple[str, ...] = (),
            **want: Any) -> list[Any]:
    """``pytest.param`` of every registered engine whose capabilities have the values in
    ``want`` (a value, or a tuple of the values allowed) and pass ``where``; an engine
    whose dependencies are missing is skipped, saying which."""
    out = []
    for name in registered_engines():
        if name in exclude:
            continue
        try:
            cap = capabilities(name)
        except ImportError as e:  # a module of its own that does not import: skipped, said why
            out.append(pytest.param(name, marks=pytest.mark.skip(reason=f"{name} does not import: {e}"), id=name))
            continue
        except ValueError:  # a registered factory that is not there: its tests fail, saying so
            out.append(pytest.param(name, id=name))
            continue
        if any(getattr(cap, k) not in (v if isinstance(v, tuple) else (v,)) for k, v in want.items()):
            continue
        if where is not None and not where(cap):
            continue
        gone = missing(name)
        marks = [pytest.mark.skip(reason=f"{name} needs {', '.join(gone)} (the [peers] extra)")] if gone else []
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def make(name: str, vocab: Vocabulary, **options: Any) -> MaskEngine:
    """Engine ``name`` over ``vocab`` (skips the test when its dependencies are missing)."""
    gone = missing(name)
    if gone:
        pytest.skip(f"{name} needs {', '.join(gone)} (the [peers] extra)")
    return get_engine(name, vocab, **options)


def json_grammar(cap: Capabilities) -> Grammar:
    """JSON (``JSON_LARK``), or JSON nested at most twice (``JSON_FLAT_LARK``, regular)
    for an engine that compiles regular grammars only: over ``small_vocab()`` the walks
    of the suites read the same in both."""
    from tests._support.fixtures import JSON_FLAT_LARK, JSON_LARK

    return Grammar.from_lark(JSON_LARK if cap.grammars == "context-free" else JSON_FLAT_LARK)


def partial_tokens(vocab: Vocabulary) -> frozenset[int]:
    """The text tokens of ``vocab`` whose bytes are not UTF-8 on their own (what an
    engine with ``partial_utf8=False`` never allows)."""
    out = set()
    for t in vocab.text_token_ids().tolist():
        try:
            vocab.token_bytes[t].decode("utf-8")
        except UnicodeDecodeError:
            out.add(t)
    return frozenset(out)
