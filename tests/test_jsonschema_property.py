"""Grammar.from_json_schema is never looser than the schema: a differential property test.

hypothesis writes small schemas from the keywords the compiler supports (types, enum
and const, number and string bounds, multipleOf, patterns, objects with properties, required,
additional and pattern properties, arrays with items, prefixItems, counts and uniqueItems, the
applicators, ``$ref`` into ``$defs``, ``if``/``then``/``else``, dependentRequired and
dependentSchemas, propertyNames, contains with minContains);
each compiled one is given a pool of JSON values and hypothesis' own.  Whenever the
grammar accepts a value's text, the ``jsonschema`` package (draft 2020-12) must find
the value valid.  The reverse is not required (the compiler is documented to be
tighter in places: properties in schema order, additional keys without escapes).

Half the schemas say ``$schema`` draft-07 (``$ref`` there ignores its siblings), and
half are compiled with ``property_order="any"``.
The run is derandomized (the same examples every time) with a budget that fits
``make test``; ``MASKLAB_HYPOTHESIS_EXAMPLES=5000`` (or more) makes a longer search.
"""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.core.errors import LimitExceeded, Unsatisfiable, UnsupportedSchema
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import PROPERTY_ORDERS

EXAMPLES = int(os.environ.get("MASKLAB_HYPOTHESIS_EXAMPLES", "150"))

NAMES = ["a", "b", "c", "id"]
STRINGS = st.sampled_from(["", "a", "ab", "abc", "b", "x1", "é", "A-Z", "2024-01-01"])
NUMBERS = st.one_of(st.integers(-3, 12), st.sampled_from([0.5, -1.5, 2.0, 10.25, 1e3]))
PATTERNS = st.sampled_from(["^a", "b$", "^[a-c]*$", "[0-9]", "^x", "é"])

SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES + ["z"]), inner, max_size=4)),
    max_leaves=8,
)
POOL = [None, True, False, 0, 1, -2, 3, 7, 12, 0.5, 2.5, -1.5, "", "a", "ab", "abc", "b", "x1", "é", [], [1], [1, 2],
        ["a", 1], [1, "a", None], [[1]], [1, 1, 1, 1], {}, {"a": 1}, {"a": "x"}, {"b": 2}, {"a": 1, "b": 2},
        {"b": 2, "a": 1}, {"c": None}, {"a": 1, "z": 2}, {"id": "a"}, {"a": [1]}, {"a": {"b": 1}}, {"x1": 3},
        {"a": 1, "b": "x", "c": True}]

# enum and const list arrays and objects too: their complement (under not, oneOf) is exact
LISTED = st.one_of(SCALARS, SCALARS, st.lists(SCALARS, max_size=2),
                   st.dictionaries(st.sampled_from(NAMES), SCALARS, max_size=2))

TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


def _keywords(child: st.SearchStrategy) -> st.SearchStrategy:
    """One schema: a type (or none) and a few keywords, with child schemas ``child``."""
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=2, unique=True)),
            "enum": st.lists(LISTED, min_size=1, max_size=3),
            "const": LISTED,
            "minimum": NUMBERS,
            "maximum": NUMBERS,
            "exclusiveMinimum": NUMBERS,
            "exclusiveMaximum": NUMBERS,
            # binary-exact steps: jsonschema divides in floating point (0.07 / 0.01 is
            # not 7 there), where JSON Schema and the compiler use exact decimals
            "multipleOf": st.sampled_from([2, 3, 5, 0.5, 2.5]),
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
            "pattern": PATTERNS,
            "properties": st.dictionaries(st.sampled_from(NAMES), child, max_size=3),
            "required": st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
            "additionalProperties": child,
            "patternProperties": st.dictionaries(PATTERNS, child, max_size=1),
            "minProperties": st.integers(0, 2),
            "maxProperties": st.integers(0, 3),
            "propertyNames": st.one_of(st.fixed_dictionaries({"maxLength": st.integers(0, 2)}),
                                       st.fixed_dictionaries({"pattern": PATTERNS}),
                                       st.fixed_dictionaries({"enum": st.lists(st.sampled_from(NAMES), max_size=2)})),
            "dependentSchemas": st.dictionaries(st.sampled_from(NAMES), child, max_size=1),
            "dependentRequired": st.dictionaries(st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=2,
                                                                                  unique=True), max_size=1),
            "items": child,
            "prefixItems": st.lists(child, min_size=1, max_size=2),
            "minItems": st.integers(0, 2),
            "maxItems": st.integers(0, 3),
            "uniqueItems": st.booleans(),
            "contains": child,
            "minContains": st.integers(0, 2),
            "anyOf": st.lists(child, min_size=1, max_size=2),
            "allOf": st.lists(child, min_size=1, max_size=2),
            "oneOf": st.lists(child, min_size=1, max_size=2),
            "not": child,
            "if": child,
            "then": child,
            "else": child,
            "$ref": st.sampled_from(["#/$defs/d", "#"]),
        },
    )


LEAF = st.one_of(st.booleans(), _keywords(st.just(True)))
SCHEMAS = st.recursive(LEAF, lambda inner: _keywords(inner), max_leaves=6).map(
    lambda s: s if isinstance(s, bool) else {**s, "$defs": {"d": {"type": "integer", "minimum": 0}}}
)


DRAFT_7 = "http://json-schema.org/draft-07/schema#"


def _compile(schema, order: str = "schema"):
    """The grammar; None where the compiler refuses; "empty" where it says no value fits."""
    try:
        return Grammar.from_json_schema(schema, property_order=order)
    except Unsatisfiable:
        return "empty"
    except (UnsupportedSchema, LimitExceeded, RecursionError):
        return None


def _valid(judge, value) -> bool | None:
    try:
        return judge.is_valid(value)
    except RecursionError:  # jsonschema's own limit ("$ref": "#" that loops): no verdict
        return None


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(SCHEMAS, st.lists(VALUES, max_size=6), st.sampled_from([None, DRAFT_7]), st.sampled_from(PROPERTY_ORDERS))
def test_the_grammar_accepts_only_what_jsonschema_accepts(schema, drawn, draft, order) -> None:
    if draft is not None and isinstance(schema, dict):  # where $ref's siblings are ignored
        schema = {**schema, "$schema": draft}
    grammar = _compile(schema, order)
    if grammar is None:
        return
    judge = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    for value in POOL + drawn:
        if grammar == "empty":  # Unsatisfiable is a claim too: no value may be valid
            assert _valid(judge, value) is not True, f"{json.dumps(schema)} is called unsatisfiable, but {value!r} fits"
            continue
        text = json.dumps(value)
        if grammar.accepts(text):
            valid = _valid(judge, value)
            assert valid is not False, f"the grammar of {json.dumps(schema)} accepts {text}, which the schema rejects"


def test_the_loosenings_of_issue_26_are_gone() -> None:
    """The four instances the official test suite found accepted against their schema."""
    cases = [
        ({"type": "array", "items": {"$dynamicRef": "#items"},
          "$defs": {"foo": {"$dynamicAnchor": "items", "type": "string"}}}, ["foo", 42]),
        ({"type": "array", "items": {"$dynamicRef": "#items"},
          "$defs": {"foo": {"$anchor": "items", "type": "string"}}}, ["foo", 42]),
        ({"allOf": [{"prefixItems": [{"minimum": 3}]}], "items": {"minimum": 5}}, [3, 5]),
    ]
    for schema, value in cases:
        assert not jsonschema.Draft202012Validator(schema).is_valid(value)
        assert not Grammar.from_json_schema(schema).accepts(json.dumps(value)), schema
    with pytest.raises(Unsatisfiable):  # a $dynamicRef to a false schema: nothing fits
        Grammar.from_json_schema({"$defs": {"false": False}, "$dynamicRef": "#/$defs/false"})
    # and what they allow still passes
    assert Grammar.from_json_schema(cases[0][0]).accepts('["foo", "bar"]')
    assert Grammar.from_json_schema(cases[2][0]).accepts("[5]")
    assert Grammar.from_json_schema(cases[2][0]).accepts("[5, 6]")


def test_merged_values_compare_as_json_not_as_python() -> None:
    """Python's == takes True for 1 and [1] for [True]; merging allOf parts (and const
    with enum) once kept a value only one part allows."""
    for schema, value in [
        ({"allOf": [{"enum": [True, 2]}, {"enum": [1, 2]}]}, True),
        ({"anyOf": [{"enum": [[1], 3], "const": [True]}, {"const": 5}]}, [1]),
    ]:
        assert not jsonschema.Draft202012Validator(schema).is_valid(value)
        assert not Grammar.from_json_schema(schema).accepts(json.dumps(value)), schema
    for schema in ({"allOf": [{"const": True}, {"const": 1}]}, {"allOf": [{"const": [1]}, {"const": [True]}]}):
        with pytest.raises(Unsatisfiable):
            Grammar.from_json_schema(schema)
    assert Grammar.from_json_schema({"allOf": [{"const": 1}, {"const": 1.0}]}).accepts("1")


def test_a_dynamic_reference_the_reference_pass_cannot_reach_is_refused() -> None:
    # where the reference pass reaches it, it resolves (a string, not any value)
    schema = {"type": "object", "properties": {"a": {"$dynamicRef": "#x"}},
              "$defs": {"x": {"$dynamicAnchor": "x", "type": "string"}}}
    assert not Grammar.from_json_schema(schema).accepts('{"a": 1}')
    assert Grammar.from_json_schema(schema).accepts('{"a": "s"}')
    from toolkit.jsonschema.compiler import _Compiler

    c = _Compiler({"type": "array", "items": {"$recursiveRef": "#"}}, whitespace="compact", strict=True, max_rules=100)
    with pytest.raises(UnsupportedSchema) as e:  # the compiler alone, without the pass
        c.compile(c.root, "")
    assert e.value.keyword == "$recursiveRef" and e.value.pointer == "/items/$recursiveRef"


def test_limits_must_be_positive() -> None:
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_depth"):
            Grammar.from_json_schema({"type": "integer"}, max_depth=bad)
