"""The JSON Schema compiler a grammar embeds (Lark's ``%json { ... }``,
:meth:`Grammar.from_json_schema <toolkit.grammar.ir.Grammar.from_json_schema>`).

The grammar floor sits below the compiler (:mod:`toolkit.jsonschema`), which builds
grammars; the compiler hands itself down when it is imported
(:func:`register_schema_compiler`).  ``toolkit.Grammar``, ``strategies`` and the
harness import it, so it is there wherever a grammar is used; a program that imports
only ``toolkit.grammar`` gets :class:`~toolkit.core.errors.MasklabError` saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolkit.core.errors import MasklabError

__all__ = ["register_schema_compiler", "schema_compiler", "map_subschemas", "SCHEMA_MAPS", "SCHEMA_VALUES"]

SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names to subschemas."""
SCHEMA_VALUES = ("additionalProperties", "items", "additionalItems", "contains", "not", "if", "then", "else",
                 "propertyNames", "unevaluatedProperties", "unevaluatedItems", "anyOf", "oneOf", "allOf", "prefixItems")
"""Keywords whose value is a subschema or a list of them."""


def map_subschemas(schema: Any, node: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """``schema`` with ``node`` applied to every schema object in it, innermost first
    (the subschemas under :data:`SCHEMA_MAPS` and :data:`SCHEMA_VALUES`); other values,
    ``const`` and ``enum`` included, are left as they are."""
    if isinstance(schema, list):
        return [map_subschemas(v, node) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in SCHEMA_MAPS and isinstance(v, Mapping):
            out[k] = {n: map_subschemas(sub, node) for n, sub in v.items()}
        elif k in SCHEMA_VALUES:
            out[k] = map_subschemas(v, node)
        else:
            out[k] = v
    return node(out)

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
