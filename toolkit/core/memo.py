"""Memo tables with scopes: what one engine instance keeps across the schemas it compiles.

The toolkit memoizes pure work that grammars repeat: regex and literal DFAs, boolean
terminals, JSON-text fragments.  Every table lives in a :class:`MemoScope`.  Code runs
in the default scope unless a scope is made active (:meth:`MemoScope.active`):
masklab's engines activate their own while they compile, so an engine keeps the DFAs
of its earlier schemas (as a server's engine instance would, and as llguidance keeps
its lexer's), while no engine ever sees the tables another one built.
:func:`toolkit.bench.measure.clear_toolkit_caches` empties the default scope only.

:func:`memo` is :func:`functools.lru_cache` per scope (each scope gets its own cache
of the function, made on first use); :meth:`MemoScope.table` gives a scope's plain
dict for a module's own memo (``toolkit.automata.regex``'s DFA table).
"""

from __future__ import annotations

import contextvars
import functools
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["MemoScope", "DEFAULT", "current", "memo"]

F = TypeVar("F", bound=Callable[..., Any])


class MemoScope:
    """The memo tables of one owner (an engine instance, or the default scope)."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._functions: dict[Any, Any] = {}
        self._tables: dict[str, OrderedDict[Any, Any]] = {}

    def table(self, key: str) -> OrderedDict[Any, Any]:
        """This scope's table ``key`` (an empty ``OrderedDict`` the first time)."""
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = OrderedDict()
        return t

    def clear(self) -> None:
        """Forget everything this scope memoized."""
        for f in self._functions.values():
            f.cache_clear()
        for t in self._tables.values():
            t.clear()

    @contextmanager
    def active(self) -> Iterator[MemoScope]:
        """Memoize into this scope inside the ``with`` block (this thread or task)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def __repr__(self) -> str:
        return f"MemoScope({self.name!r})"


DEFAULT = MemoScope("default")
_CURRENT: contextvars.ContextVar[MemoScope] = contextvars.ContextVar("masklab_memo_scope", default=DEFAULT)


def current() -> MemoScope:
    """The active scope."""
    return _CURRENT.get()


def memo(maxsize: int | None = 128) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)``, one cache per scope.  The wrapper's
    ``cache_clear()`` empties the active scope's cache of the function."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            functions = _CURRENT.get()._functions
            f = functions.get(wrapper)
            if f is None:
                f = functions[wrapper] = functools.lru_cache(maxsize=maxsize)(fn)
            return f(*args, **kwargs)

        def cache_clear() -> None:
            f = _CURRENT.get()._functions.get(wrapper)
            if f is not None:
                f.cache_clear()

        wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return deco
