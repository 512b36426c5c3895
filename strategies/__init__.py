"""The registry of mask strategies: ``get_engine(name, vocab, **options)``.

Names: ``naive`` (checks every token; the baseline and the test oracle), and, as
they land, ``outlines``, ``xgrammar``, ``llguidance`` (our reimplementations) and
``peer:llguidance``, ``peer:xgrammar``, ``peer:outlines-core`` (the real engines,
from the optional ``[peers]`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from toolkit.protocol import MaskEngine
from toolkit.vocab import Vocabulary

__all__ = ["get_engine", "available_engines", "registered_engines", "register"]

# name -> "module:factory"; imported on first use so optional peers cost nothing.
_REGISTRY: dict[str, str] = {
    "naive": "strategies.naive:NaiveEngine",
}


def register(name: str, target: str) -> None:
    """Register an engine factory given as ``"module:callable"``."""
    _REGISTRY[name] = target


def registered_engines() -> list[str]:
    """Every registered name, whether or not its dependencies are installed."""
    return sorted(_REGISTRY)


def _factory(name: str) -> Callable[..., MaskEngine]:
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; registered: {', '.join(registered_engines())}") from None
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def available_engines() -> list[str]:
    """Registered engines whose dependencies import on this machine."""
    out = []
    for name in registered_engines():
        try:
            _factory(name)
        except ImportError:
            continue
        out.append(name)
    return out


def get_engine(name: str, vocab: Vocabulary, **options: Any) -> MaskEngine:
    """Make the engine ``name`` for ``vocab``; ``options`` are the engine's own."""
    return _factory(name)(vocab, **options)
