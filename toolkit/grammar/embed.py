"""The JSON Schema compiler a grammar embeds (Lark's ``%json { ... }``,
:meth:`Grammar.from_json_schema <toolkit.grammar.ir.Grammar.from_json_schema>`).

The grammar floor sits below the compiler (:mod:`toolkit.jsonschema`), which builds
grammars; the compiler hands itself down when it is imported
(:func:`register_schema_compiler`).  ``toolkit.Grammar``, ``strategies`` and the
harness import it, so it is there wherever a grammar is used; a program that imports
only ``toolkit.grammar`` gets :class:`~toolkit.core.errors.MasklabError` saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.core.errors import MasklabError

__all__ = ["register_schema_compiler", "schema_compiler"]

_COMPILER: list[Callable[..., Any]] = []


def register_schema_compiler(compile_schema: Callable[..., Any]) -> None:
    """Make ``compile_schema(schema, *, whitespace, strict, **options) -> Grammar`` the
    compiler grammars embed (:mod:`toolkit.jsonschema` registers its own)."""
    _COMPILER[:] = [compile_schema]


def schema_compiler() -> Callable[..., Any]:
    """The registered JSON Schema compiler."""
    if not _COMPILER:
        raise MasklabError("a grammar that embeds a JSON Schema needs the compiler: import toolkit.jsonschema "
                           "(toolkit.Grammar, strategies and the harness do)")
    return _COMPILER[0]
