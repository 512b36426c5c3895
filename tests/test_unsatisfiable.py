"""Inputs whose language is empty are errors at compile, in every strategy.

A schema, grammar or regex that no string satisfies used to compile to a matcher
whose first mask allowed nothing, not even EOS.  The Grammar proves emptiness (its
start symbol derives no string) and raises :class:`Unsatisfiable`; for a JSON Schema
with the keyword and JSON pointer that emptied it, for a grammar with the rule.  That
every strategy refuses them is the conformance suite's
(``tests/conformance/test_unsatisfiable.py``).
"""

from __future__ import annotations

import pytest

from toolkit.core.errors import GrammarError, Unsatisfiable
from toolkit.grammar.ir import Grammar

SCHEMAS = [  # (schema, keyword, pointer)
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength", ""),
    ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum", ""),
    ({"type": "number", "exclusiveMinimum": 2, "exclusiveMaximum": 2}, "exclusiveMinimum", ""),
    ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems", ""),
    ({"type": "object", "properties": {"a": {}}, "required": ["a", "b"], "additionalProperties": False},
     "required", ""),
    ({"not": {}}, "not", ""),
    ({"$ref": "#"}, "$ref", ""),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref", "/$defs/a"),
    ({"type": "object", "properties": {"x": {"type": "string", "minLength": 5, "maxLength": 2}}, "required": ["x"]},
     "minLength", "/properties/x"),
]


@pytest.mark.parametrize("schema, keyword, pointer", SCHEMAS)
def test_an_empty_schema_is_unsatisfiable_with_its_keyword_and_pointer(schema, keyword: str, pointer: str) -> None:
    with pytest.raises(Unsatisfiable) as e:
        Grammar.from_json_schema(schema)
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer)
    assert isinstance(e.value, GrammarError)


def test_an_empty_lark_grammar_names_the_rule() -> None:
    with pytest.raises(Unsatisfiable) as e:
        Grammar.from_lark('start: x\nx: "a" x\n')
    assert e.value.rule == "x" and e.value.path == ("start", "x", "x")
    assert "only derives itself" in str(e.value)


def test_a_satisfiable_grammar_with_dead_rules_still_compiles() -> None:
    g = Grammar.from_lark('start: "b" | x\nx: "a" x\n')
    assert g.accepts("b") and not g.accepts("a")
