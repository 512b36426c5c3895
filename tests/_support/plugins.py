"""Engine factories outside the registry, named ``"tests._support.plugins:NAME"`` by the tests."""

from __future__ import annotations

from typing import Any

from toolkit.core.vocab import Vocabulary


def llguidance_forcing(vocab: Vocabulary, **options: Any) -> Any:
    """llguidance as shipped (forcing on), made by a plugin factory rather than a registry name."""
    from strategies.peers import LLGuidanceEngine

    return LLGuidanceEngine(vocab, forcing=True, **options)


def needs_missing_package(vocab: Vocabulary, **options: Any) -> Any:
    """A factory whose dependency is not installed (for ``available_engines``)."""
    import masklab_no_such_package  # noqa: F401

    raise AssertionError("unreachable")


needs_missing_package.requires = ("masklab_no_such_package",)  # type: ignore[attr-defined]
