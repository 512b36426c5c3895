"""The registry of mask strategies: ``get_engine(name, vocab, **options)``.

Names: ``naive`` (checks every token; the baseline and the test oracle), and, as
they land, ``outlines``, ``xgrammar``, ``llguidance`` (our reimplementations) and
``peer:llguidance``, ``peer:xgrammar``, ``peer:outlines-core`` (the real engines,
from the optional ``[peers]`` extra; see :mod:`strategies.peers`).

An engine outside the registry can be named by its factory, ``"package.module:Factory"``
(called as ``Factory(vocab, **options)``), wherever an engine name is taken.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import import_module
from typing import Any

from toolkit.protocol import MaskEngine
from toolkit.vocab import Vocabulary

__all__ = ["get_engine", "available_engines", "registered_engines", "register"]

_PLUGIN = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

# name -> "module:factory"; imported on first use so optional peers cost nothing.
_REGISTRY: dict[str, str] = {
    "naive": "strategies.naive:NaiveEngine",
    "peer:llguidance": "strategies.peers:LLGuidanceEngine",
    "peer:xgrammar": "strategies.peers:XGrammarEngine",
    "peer:outlines-core": "strategies.peers:OutlinesCoreEngine",
}


def register(name: str, target: str) -> None:
    """Register an engine factory given as ``"module:callable"``."""
    _REGISTRY[name] = target


def registered_engines() -> list[str]:
    """Every registered name, whether or not its dependencies are installed."""
    return sorted(_REGISTRY)


def _factory(name: str) -> Callable[..., MaskEngine]:
    target = _REGISTRY.get(name)
    if target is None and _PLUGIN.fullmatch(name):
        target = name  # "package.module:Factory", an engine outside the registry
    if target is None:
        raise ValueError(
            f"unknown engine {name!r}; registered: {', '.join(registered_engines())} "
            "(or give 'package.module:Factory')"
        )
    module, attr = target.split(":")
    try:
        return getattr(import_module(module), attr)
    except AttributeError:
        raise ValueError(f"engine {name!r}: module {module!r} has no {attr!r}") from None


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
