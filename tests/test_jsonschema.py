"""Grammar.from_json_schema: each keyword, judged by the jsonschema package.

For every hand-written schema, each instance's ``json.dumps`` text must be accepted
exactly when jsonschema (with format checking) says the instance is valid.  The
instances keep properties in schema order, since the compiler documents that order.
"""

from __future__ import annotations

import json
import random
import warnings

import jsonschema
import pytest

from toolkit.core.errors import Unsatisfiable, UnsupportedSchema
from toolkit.grammar.ir import Grammar

CASES: dict[str, tuple[dict | bool, list]] = {
    "type_string": ({"type": "string"}, ["abc", "", "é😀\n\"", 1, None, ["a"]]),
    "type_list_with_null": ({"type": ["integer", "null"]}, [1, -20, None, 1.5, "1", True]),
    "type_boolean": ({"type": "boolean"}, [True, False, 0, "true"]),
    "type_number": ({"type": "number"}, [0, -1.5, 3e20, 1e-7, "1", None]),
    "true_schema": (True, [1, "a", None, {"a": [1, {}]}, []]),
    "empty_schema": ({}, [1, "a", None, {"a": [1, {}]}, []]),
    "false_in_property": (
        {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"b": 1}, {"a": 1}, {"a": 1, "b": 2}],
    ),
    "properties_required": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"],
         "additionalProperties": False},
        [{"a": 1}, {"a": 1, "b": "x"}, {"b": "x"}, {}, {"a": "1"}, {"a": 1, "c": 2}],
    ),
    "additional_default_allowed": (
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        [{"a": 1}, {"a": 1, "z": [1]}, {"z": None}, {"a": "x"}, {}],
    ),
    "additional_schema": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
        [{"a": 1, "b": "x"}, {"a": 1, "b": 2}, {"b": "x", "c": "y"}, {"a": 1, "ab": "x", "": "y"}],
    ),
    "required_outside_properties": (
        {"type": "object", "required": ["id"], "additionalProperties": {"type": "integer"}},
        [{"id": 1}, {"id": "x"}, {}, {"id": 1, "n": 2}],
    ),
    "pattern_properties_closed": (
        {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x-": {}},
         "additionalProperties": False},
        [{"a": 1}, {"a": 1, "b": 2}, {}],
    ),
    "items": ({"type": "array", "items": {"type": "integer"}}, [[], [1, 2, 3], [1, "2"], "x", [[1]]]),
    "min_max_items": (
        {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3},
        [[], [True], [True, False, True], [True, False, True, False]],
    ),
    "prefix_items": (
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        [[], ["a"], ["a", 1], ["a", 1, 2], [1, "a"]],
    ),
    "tuple_items_draft7": (
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
         "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
        [["a"], ["a", 1, 2], ["a", "b"], []],
    ),
    "enum": ({"enum": ["red", "green", 1, None, [1, 2], {"a": "b"}]},
             ["red", "green", "blue", 1, None, [1, 2], [2, 1], {"a": "b"}, {"a": "c"}]),
    "enum_with_type": ({"type": "string", "enum": ["a", 1, "b"]}, ["a", "b", 1]),
    "enum_with_max_length": ({"enum": ["ab", "abc", 5], "maxLength": 2}, ["ab", "abc", 5]),
    "const": ({"const": "fixed"}, ["fixed", "other", 1]),
    "any_of": ({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}, [1, "ab", "abc", None]),
    "one_of_disjoint": ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a", None]),
    "one_of_discriminated": (
        {"oneOf": [
            {"type": "object", "properties": {"k": {"const": "a"}, "x": {"type": "integer"}}, "required": ["k"]},
            {"type": "object", "properties": {"k": {"const": "b"}, "y": {"type": "string"}}, "required": ["k"]},
        ]},
        [{"k": "a", "x": 1}, {"k": "b", "y": "s"}, {"k": "c"}, {"k": "a", "x": "s"}],
    ),
    "any_of_with_siblings": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "additionalProperties": False, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
        [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}],
    ),
    "all_of": (
        {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                   {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
        [{"a": 1, "b": "x"}, {"a": 1}, {"b": "x"}, {"a": "1", "b": "x"}],
    ),
    "ref_defs": (
        {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}},
        [[1, 2], [0], [-1], []],
    ),
    "ref_recursive": (
        {"definitions": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/definitions/node"}, {"type": "null"}]}},
            "required": ["v", "next"], "additionalProperties": False}},
         "$ref": "#/definitions/node"},
        [{"v": 1, "next": None}, {"v": 1, "next": {"v": 2, "next": None}}, {"v": 1, "next": {"v": 2}}, {"v": 1}],
    ),
    "string_lengths": ({"type": "string", "minLength": 2, "maxLength": 3}, ["a", "ab", "abc", "abcd", "é😀", "\n\t"]),
    "pattern": ({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, ["ab-12", "ab-1", "AB-12", "x-99", "ab-123"]),
    "pattern_unanchored": ({"type": "string", "pattern": "[0-9]"}, ["a1b", "abc", "9", ""]),
    "integer_range": ({"type": "integer", "minimum": -5, "maximum": 120}, [-6, -5, 0, 99, 120, 121, 1000]),
    "integer_exclusive": ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [0, 1, 9, 10]),
    "number_range": ({"type": "number", "minimum": 0, "maximum": 1}, [0, 0.5, 1, 1.0, 1.5, -0.1, 0.999]),
    "format_date": ({"type": "string", "format": "date"}, ["2024-01-31", "2024-13-01", "2023-02-30", "x"]),
    "format_uuid": ({"type": "string", "format": "uuid"},
                    ["123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000", "x"]),
    "format_ipv4": ({"type": "string", "format": "ipv4"}, ["192.168.0.1", "256.1.1.1", "1.2.3", "01.2.3.4"]),
    "unknown_format_is_an_annotation": ({"type": "string", "format": "grid"}, ["anything", 1]),
    # Boolean combinations on strings: exact intersections and differences.
    "pattern_with_max_length": ({"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 4},
                                ["ab", "abcd", "abcde", "a_b", "", "a-1"]),
    "pattern_with_min_length": ({"type": "string", "pattern": "x", "minLength": 3}, ["x", "axb", "abc", "xxxx"]),
    "format_with_max_length": ({"type": "string", "format": "date", "maxLength": 10}, ["2024-01-31", "x"]),
    "pattern_with_format": ({"type": "string", "format": "ipv4", "pattern": "^10\\."},
                            ["10.0.0.1", "192.168.0.1", "10.0.0", "10.x"]),
    "all_of_two_patterns": ({"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}, ["ab", "axb", "ba", "a", 3]),
    "all_of_two_conditionals": (
        {"allOf": [{"if": {"type": "integer"}, "then": {"minimum": 5}, "else": {"type": "string"}},
                   {"if": {"minimum": 7}, "then": {"maximum": 9}}]},
        [1, 5, 7, 9, 10, "a", 6.5, None]),
    "not_one_of": ({"not": {"oneOf": [{"type": "integer"}, {"minimum": 2}]}},  # none, or both
                   [1, 2, 3, 1.5, 2.5, "a", None, 0, -1, [2]]),
    # not
    "not_type": ({"properties": {"a": {"not": {"type": "string"}}}}, [{"a": 1}, {"a": "x"}, {"a": None}, {}]),
    "not_type_list": ({"not": {"type": ["array", "object", "null"]}}, [1, "x", True, None, [], {}, 1.5]),
    "not_enum": ({"not": {"enum": ["a", 2, None]}}, ["a", "b", 2, 3, -0, None, True, [1], [2], {"x": 1}]),
    "not_integer": ({"not": {"type": "integer"}}, [1, 1.5, -0.25, "x", None]),
    "not_const_string": ({"type": "string", "not": {"const": "no"}}, ["no", "yes", "n\u006f", ""]),
    "not_required": ({"type": "object", "not": {"required": ["a", "b"]}}, [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 1}]),
    "not_min_length": ({"type": "string", "not": {"minLength": 3}}, ["", "ab", "abc"]),
    "not_max_items": ({"type": "array", "not": {"maxItems": 1}}, [[], [1], [1, 2]]),
    "not_minimum": ({"type": "integer", "not": {"minimum": 5}}, [4, 5, 6, -10]),
    "not_pattern": ({"type": "string", "not": {"pattern": "^x"}}, ["xa", "ax", ""]),
    "not_properties": ({"type": "object", "not": {"properties": {"a": {"type": "integer"}}}},
                       [{}, {"a": 1}, {"a": "s"}, {"b": 1}]),
    "not_any_of": ({"not": {"anyOf": [{"type": "string"}, {"type": "integer", "maximum": 0}]}},
                   ["a", 0, -3, 4, None, 2.5]),
    "not_not": ({"not": {"not": {"type": "integer"}}}, [1, "a"]),
    "not_min_properties": ({"type": "object", "not": {"minProperties": 1}}, [{}, {"a": 1}]),
    # oneOf with overlapping branches: each branch minus the others
    "one_of_required": (
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}],
    ),
    "one_of_overlapping_types": ({"oneOf": [{"type": "integer"}, {"minimum": 3}]}, [1, 3, 5, 2.5, 3.5, "x", None]),
    "one_of_strings": ({"oneOf": [{"type": "string", "maxLength": 2}, {"type": "string", "pattern": "^a"}]},
                       ["", "b", "ab", "abc", "bcd", 1]),
    # if/then/else and dependencies
    "if_then_else": (
        {"type": "object", "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
         "if": {"properties": {"kind": {"const": "num"}}, "required": ["kind"]},
         "then": {"required": ["n"]}, "else": {"not": {"required": ["n"]}}},
        [{"kind": "num", "n": 1}, {"kind": "num"}, {"kind": "x"}, {"kind": "x", "n": 1}, {}],
    ),
    "dependencies_list": (
        {"$schema": "http://json-schema.org/draft-07/schema#",
         "type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "dependencies": {"a": ["b"]}},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {"a": 1, "c": 3}],
    ),
    "dependent_schemas": (
        {"type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
         "dependentSchemas": {"a": {"properties": {"b": {"minimum": 5}}, "required": ["b"]}}},
        [{"a": 1, "b": 5}, {"a": 1, "b": 4}, {"a": 1}, {"b": 1}],
    ),
    # member counts, pattern properties, property names
    "min_max_properties": (
        {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 1, "maxProperties": 2},
        [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"c": 3}, {"c": 3, "d": 4}],
    ),
    "min_properties_only": ({"type": "object", "minProperties": 2}, [{}, {"a": 1}, {"a": 1, "b": 2}]),
    "pattern_properties_open": (
        {"type": "object", "properties": {"x-a": {"type": "string"}},
         "patternProperties": {"^x-": {"type": "integer"}, "^y": {"type": "boolean"}}},
        [{"x-a": "s"}, {"x-a": 1}, {"x-b": 1}, {"x-b": "s"}, {"yes": True}, {"yes": 1}, {"z": "any"}],
    ),
    "pattern_properties_overlap": (
        {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 10}},
         "additionalProperties": False},
        [{"ab": 10}, {"ab": 5}, {"a": 1}, {"b": 1}, {"b": 20}, {"c": 1}],
    ),
    "property_names": (
        {"type": "object", "properties": {"Bad": {}}, "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3}},
        [{}, {"abc": 1}, {"abcd": 1}, {"A": 1}, {"Bad": 1}],
    ),
    "all_of_additional_false_meets_other_names": (
        {"allOf": [{"properties": {"a": {}}, "additionalProperties": False}, {"properties": {"b": {}}}]},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 1}],
    ),
    "all_of_additional_schema_meets_other_names": (
        {"allOf": [{"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
                   {"properties": {"b": {"type": ["integer", "string"]}}, "additionalProperties": {"minimum": 3}}]},
        [{"a": 1, "b": 5}, {"a": "x", "b": 1}, {"a": 1, "b": "s"}, {"a": 1, "c": 4}, {"c": 2}, {"c": "s"}],
    ),
    "contains": ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "maxItems": 3},
                 [[], [5], [1, 2], [1, 7], [7, 1, 1], [1, 1, 1, 9], ["x", 5]]),
    "contains_unbounded": ({"contains": {"const": "x"}}, [[], ["x"], ["a", "x", "b"], ["a"], "x"]),
    "not_items": ({"type": "array", "not": {"items": {"type": "string"}}}, [[], ["a"], ["a", 1], [2]]),
    "one_of_items": ({"oneOf": [{"items": {"type": "integer"}}, {"items": {"minimum": 0}}], "type": "array"},
                     [[], [1], [-1], [0.5], [-0.5], [1, -1], ["x"]]),
    "not_additional_properties": (
        {"type": "object", "properties": {"a": {}}, "not": {"properties": {"a": {}}, "additionalProperties": False}},
        [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}],
    ),
    "not_additional_schema": (
        {"type": "object", "not": {"additionalProperties": {"type": "string"}}},
        [{}, {"a": "s"}, {"a": 1}, {"a": "s", "b": 2}],
    ),
    "one_of_closed_objects": (
        {"oneOf": [{"additionalProperties": False, "properties": {"next": {"type": "string"}}},
                   {"additionalProperties": False, "properties": {"previous": {"type": "string"}}}]},
        [{}, {"next": "a"}, {"previous": "b"}, {"next": "a", "previous": "b"}, {"other": 1}, "s"],
    ),
    "annotations_ignored": (
        {"type": "integer", "title": "t", "description": "d", "default": 3, "examples": [1], "x-custom": {"type": "string"}},
        [1, "a"],
    ),
}


def _judge(schema) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("name", sorted(CASES))
def test_keyword_against_jsonschema(name: str) -> None:
    schema, instances = CASES[name]
    grammar = Grammar.from_json_schema(schema)
    judge = _judge(schema)
    for inst in instances:
        expected = judge.is_valid(inst)
        for text in (json.dumps(inst), json.dumps(inst, indent=2), json.dumps(inst, ensure_ascii=False)):
            assert grammar.accepts(text) == expected, (name, text, expected)


def test_compact_whitespace() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    compact = Grammar.from_json_schema(schema, whitespace="compact")
    assert compact.accepts('{"a":[1,2]}')
    assert not compact.accepts('{"a": [1, 2]}')
    assert Grammar.from_json_schema(schema).accepts('{ "a" : [ 1 , 2 ] }\n')


@pytest.mark.parametrize(
    "schema, keyword, pointer",
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems", "/uniqueItems"),
        ({"properties": {"a": {"type": "integer", "multipleOf": 77}}}, "multipleOf", "/properties/a/multipleOf"),
        ({"not": {"type": "object", "patternProperties": {"^a": {"type": "integer"}}}}, "not", "/not/patternProperties"),
        ({"type": "number", "multipleOf": 0}, "multipleOf", "/multipleOf"),
        ({"$ref": "http://example.com/s.json"}, "$ref", "/$ref"),
        ({"oneOf": [{"type": "object"}, {"patternProperties": {"^a": {"type": "integer"}}}]}, "oneOf", ""),
        ({"type": "object", "patternProperties": {c: {} for c in "abcde"}}, "patternProperties", "/patternProperties"),
        ({"items": {"$ref": "#/definitions/missing"}}, "$ref", "/items/$ref"),
    ],
)
def test_unsupported_names_keyword_and_pointer(schema, keyword: str, pointer: str) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema(schema)
    assert e.value.keyword == keyword
    assert e.value.pointer == pointer


def test_non_strict_drops_with_a_warning_that_says_looser() -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = Grammar.from_json_schema(schema, strict=False)
    assert any("looser" in str(w.message) and "uniqueItems" in str(w.message) for w in caught)
    assert g.accepts("[1, 1]")  # looser, as the warning said
    assert not g.accepts('["a"]')


def test_all_of_with_patterns_and_additional_properties_is_unsupported() -> None:
    # a name part 0 lists matches part 1's pattern: it escapes part 0's additionalProperties, other ^x keys do not
    schema = {"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                        {"patternProperties": {"^x": {}}}]}
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema(schema)
    assert e.value.keyword == "allOf"


_OBJECTS = [{}, {"foo": 0}, {"foo": 3}, {"fox": 9}, {"foo": 3, "fox": 6}, {"foo": 3, "fox": 5}, {"foo": -3},
            {"foo": "x"}, {"bar": "x"}, {"bar": 1}, {"foo": 1, "bar": "x"}, {"qux": True}, {"qux": 1}, {"f": 0.5}]


@pytest.mark.parametrize("schema", [
    # the patterns of the parts together: a key takes the schema of every pattern it matches
    {"allOf": [{"patternProperties": {"^f": {"type": "integer", "minimum": 0}}},
               {"patternProperties": {"^f": {"type": "integer", "multipleOf": 3}}}]},
    {"allOf": [{"patternProperties": {"^f": {"type": "integer"}}}, {"patternProperties": {"^b": {"type": "string"}}}]},
    {"allOf": [{"patternProperties": {"^fo": {"type": "integer"}}}, {"patternProperties": {"^f": {"minimum": 1}}}]},
    # a part that lists no key: every key is additional to it
    {"allOf": [{"additionalProperties": False}, {"patternProperties": {"^f": {"type": "integer"}}}]},
    {"allOf": [{"additionalProperties": {"type": "integer"}}, {"patternProperties": {"^f": {"minimum": 3}}},
               {"properties": {"bar": {}}}]},
])
def test_all_of_patterns_are_merged_exactly(schema) -> None:
    g = Grammar.from_json_schema(schema)
    judge = _judge(schema)
    for v in _OBJECTS:
        assert g.accepts(json.dumps(v)) == judge.is_valid(v), (schema, v)


def test_to_lark_of_a_compiled_schema_is_accepted_by_llguidance() -> None:
    llguidance = pytest.importorskip("llguidance", reason="llguidance ([peers] extra) not installed")
    for name in ("properties_required", "ref_recursive", "enum", "pattern", "number_range", "format_date"):
        g = Grammar.from_json_schema(CASES[name][0])
        assert llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", g.to_lark())) == "", name


def test_enum_respects_a_negated_sibling() -> None:
    # not const inside allOf with an enum: the merged node carries the exclusion
    # internally, where jsonschema cannot see it.
    g = Grammar.from_json_schema({"allOf": [{"enum": ["a", "b", 1, 2]}, {"not": {"enum": ["a", 1]}}]})
    assert [g.accepts(json.dumps(v)) for v in ("a", "b", 1, 2)] == [False, True, False, True]


def test_a_property_named_start_is_not_the_start_symbol() -> None:
    schema = {"type": "object", "properties": {"start": {"type": "number"}, "end": {"type": "number"}},
              "required": ["start"], "additionalProperties": False}
    g = Grammar.from_json_schema(schema)
    assert g.accepts('{"start": 1, "end": 2}')
    assert not g.accepts("1")


def test_a_string_automaton_over_the_state_limit_is_unsupported_at_its_keyword() -> None:
    # a length alone is written down directly (to 2^16, tests/test_long_strings.py); with a
    # pattern it is a product, ~20 states a character: 5000 fits the 200k default, 30000 not
    Grammar.from_json_schema({"properties": {"q": {"type": "string", "maxLength": 5000, "pattern": "^[^x]*$"}}})
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema({"properties": {"q": {"type": "string", "maxLength": 30000, "pattern": "^[^x]*$"}}})
    assert (e.value.keyword, e.value.pointer) == ("maxLength", "/properties/q/maxLength")
    assert "max_states" in e.value.reason


@pytest.mark.parametrize(
    "schema, keyword, pointer",
    [
        ({"oneOf": [5, {}]}, "oneOf", "/oneOf/0"),
        ({"anyOf": [{}, "x"]}, "anyOf", "/anyOf/1"),
        ({"if": 5, "then": {}}, "if", "/if"),
        ({"type": "array", "contains": []}, "contains", "/contains"),
        ({"dependencies": {"a": 5}}, "dependencies", "/dependencies/a"),
    ],
)
def test_malformed_subschemas_are_reported_where_they_are(schema, keyword: str, pointer: str) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema(schema)
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer)


def test_max_properties_of_a_closed_object_needs_no_counting() -> None:
    # A bound no closed object can reach is no constraint: it must not unroll 10**5 counts.
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False,
              "maxProperties": 100_000}
    g = Grammar.from_json_schema(schema)
    assert g.accepts('{"a": 1, "b": 2}') and g.accepts("{}")
    with pytest.raises(Unsatisfiable) as e:  # more members than the closed object has
        Grammar.from_json_schema({**schema, "minProperties": 3})
    assert (e.value.keyword, e.value.pointer) == ("minProperties", "")


def test_deep_nesting_is_a_named_limit() -> None:
    from toolkit.core.errors import LimitExceeded

    for depth in (200, 1000):
        schema: dict | bool = {"type": "string"}
        for _ in range(depth):
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        with pytest.raises(LimitExceeded) as e:
            Grammar.from_json_schema(schema)
        assert e.value.limit == "max_depth"
    shallow = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}}
    assert Grammar.from_json_schema(shallow, max_depth=3).accepts('{"a": {"b": 1}}')
    with pytest.raises(LimitExceeded, match="/properties/a"):
        Grammar.from_json_schema(shallow, max_depth=2)


# ------------------------------------------------------------------ multipleOf --


@pytest.mark.parametrize("step", [0.01, 1.0, 1, 5, 7, 0.05, 3, 2.5, 12, 1e-5, 1000])
@pytest.mark.parametrize("integer", [False, True])
def test_multiple_of_is_exact_decimal_arithmetic(step, integer: bool) -> None:
    """Every exponent-free numeral is accepted exactly when its decimal value is a
    multiple (or, negated, is not), as JSON Schema specifies; exponents never."""
    from decimal import Decimal
    from fractions import Fraction

    rng = random.Random(7)
    exact = Fraction(Decimal(repr(step))) if isinstance(step, float) else Fraction(step)
    kind = "integer" if integer else "number"
    yes = Grammar.from_json_schema({"type": kind, "multipleOf": step})
    negated = {"type": kind, "not": {"multipleOf": step}}
    if integer and (1 / exact).denominator == 1:  # every integer is a multiple: nothing left
        with pytest.raises((UnsupportedSchema, Unsatisfiable)):
            Grammar.from_json_schema(negated)
        negated = {"type": kind, "not": {"const": 0.5}}  # the integers, to check `yes` against
    no = Grammar.from_json_schema(negated)
    everything = integer and (1 / exact).denominator == 1  # (then `no` is every integer)
    for _ in range(400):
        text = ("-" if rng.random() < 0.3 else "") + str(rng.choice([0, rng.randrange(1, 300), 1000 * rng.randrange(1, 50),
                                                                     rng.randrange(1, 10**9)]))
        if not integer and rng.random() < 0.6:
            text += "." + "".join(rng.choice("0123456789" if rng.random() < 0.5 else "0")
                                  for _ in range(rng.randrange(1, 7)))
        multiple = (Fraction(Decimal(text)) / exact).denominator == 1
        assert yes.accepts(text) == multiple, (step, text)
        assert no.accepts(text) == (not multiple or everything and "." not in text), (step, text)
    for text in ("1e2", "0e0", "-", "01", "1.", ".5"):
        assert not yes.accepts(text) and not no.accepts(text)


def test_multiple_of_merges_bounds_and_branches() -> None:
    g = Grammar.from_json_schema({"type": "number", "multipleOf": 0.01, "minimum": -99999999999.99,
                                  "maximum": 99999999999.99})
    for text, ok in (("1000.45", True), ("200.10", True), ("1000.456", False), ("99999999999.995", False),
                     ("-99999999999.99", True), ("100000000000", False)):
        assert g.accepts(text) == ok, text
    both = Grammar.from_json_schema({"allOf": [{"multipleOf": 4}, {"multipleOf": 6}], "type": "integer"})
    assert [n for n in range(0, 50) if both.accepts(str(n))] == [0, 12, 24, 36, 48]
    one = Grammar.from_json_schema({"oneOf": [{"multipleOf": 2}, {"multipleOf": 3}], "type": "integer"})
    assert [n for n in range(0, 13) if one.accepts(str(n))] == [2, 3, 4, 8, 9, 10]
    # non-numbers satisfy multipleOf, so its negation is numbers only
    neg = Grammar.from_json_schema({"not": {"multipleOf": 2}})
    assert neg.accepts("3") and neg.accepts("4.5") and not neg.accepts("4") and not neg.accepts('"x"')


def test_multiple_of_refusals_name_keyword_and_pointer() -> None:
    for step, reason in ((77, "too long"), (0, "positive"), ("2", "not a number"), (10**500, "digits")):
        with pytest.raises(UnsupportedSchema) as e:
            Grammar.from_json_schema({"properties": {"n": {"type": "integer", "multipleOf": step}}})
        assert (e.value.keyword, e.value.pointer) == ("multipleOf", "/properties/n/multipleOf"), step
        assert reason in e.value.reason, (step, e.value.reason)


# -------------------------------------------------- $ref siblings, oneOf, memo --


def test_ref_siblings_are_ignored_up_to_draft_7_and_conjoined_after() -> None:
    base = {"definitions": {"x": {"type": "integer"}}, "$ref": "#/definitions/x", "minimum": 5}
    for draft, three in (("http://json-schema.org/draft-07/schema#", True), ("http://json-schema.org/draft-04/schema#", True),
                         ("https://json-schema.org/draft/2020-12/schema", False), (None, False)):
        schema = {**base, **({"$schema": draft} if draft else {})}
        assert Grammar.from_json_schema(schema).accepts("3") == three, draft
        negated = {"definitions": base["definitions"], "not": {"$ref": "#/definitions/x", "minimum": 5},
                   **({"$schema": draft} if draft else {})}
        # not (an integer) in draft 7; not (an integer >= 5) after
        assert Grammar.from_json_schema(negated).accepts("3") == (not three), draft
        assert Grammar.from_json_schema(negated).accepts('"a"')


def test_equal_schemas_in_another_property_order_keep_their_own_order() -> None:
    xy = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}
    yx = {"type": "object", "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}}}
    g = Grammar.from_json_schema({"type": "object", "properties": {"a": xy, "b": yx}})
    assert g.accepts('{"a": {"x": 1, "y": 2}, "b": {"y": 1, "x": 2}}')
    assert not g.accepts('{"b": {"x": 1, "y": 2}}')


@pytest.mark.parametrize("schema, yes, no", [
    # a discriminator only one branch requires still tells them apart
    ({"oneOf": [{"properties": {"kind": {"enum": ["a"]}}, "required": ["kind"]},
                {"properties": {"kind": {"enum": ["b"]}, "n": {"type": "integer"}}}]},
     ['{"kind": "a"}', '{"kind": "b"}', '{"n": 1}'], ['{"kind": "c"}']),
    # both allow null: null matches two branches, so no branch may take it
    ({"type": ["object", "null"], "oneOf": [
        {"type": ["object", "null"], "properties": {"t": {"const": "x"}}, "required": ["t"]},
        {"type": ["object", "null"], "properties": {"t": {"const": "y"}}, "required": ["t"]}]},
     ['{"t": "x"}', '{"t": "y"}'], ["null"]),
    # every branch of a nested oneOf is apart from the other side
    ({"oneOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "array"}]},
     ['"s"', "1", "[]"], ["null", "1.5"]),
    # overlapping branches that differ in one keyword: a and not b is a without b's keyword
    ({"oneOf": [{"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}, "required": ["a"]},
                {"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}, "required": ["b"]}]},
     ['{"a": 1}', '{"b": 1}'], ['{"a": 1, "b": 2}', "{}"]),
    # an empty branch takes every value (the enum beside it was checked against {}: a crash)
    ({"oneOf": [{}, {"enum": [None]}]}, ["1", '"s"'], ["null"]),
])
def test_one_of_branches(schema, yes: list[str], no: list[str]) -> None:
    g = Grammar.from_json_schema(schema)
    judge = jsonschema.Draft202012Validator(schema)
    for text in yes:
        assert judge.is_valid(json.loads(text)) and g.accepts(text), text
    for text in no:
        assert not judge.is_valid(json.loads(text)) and not g.accepts(text), text


def test_the_complement_of_a_format_is_left_empty_never_guessed() -> None:
    # not {format: date} is the strings that are not dates (other types satisfy a format)
    g = Grammar.from_json_schema({"anyOf": [{"type": "integer"}, {"not": {"format": "date"}}]})
    assert not g.accepts('"2024-01-01"') and not g.accepts('"x"') and g.accepts("1")  # tighter: no string
    with pytest.raises(UnsupportedSchema, match="tighter"):  # nothing left, but the schema has values
        Grammar.from_json_schema({"type": "string", "not": {"format": "date"}})


# ------------------------------------------------------------- property order --


def test_any_property_order_is_exact_up_to_order() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
              "required": ["a", "c"], "patternProperties": {"^x": {"type": "string"}},
              "additionalProperties": {"type": "null"}}
    g = Grammar.from_json_schema(schema, property_order="any")
    ordered = Grammar.from_json_schema(schema)
    judge = jsonschema.Draft202012Validator(schema)
    texts = ['{"a": 1, "c": true}', '{"c": true, "a": 1}', '{"x1": "s", "c": true, "z": null, "b": "t", "a": 2}',
             '{"c": true}', "{}", '{"a": "1", "c": true}', '{"a": 1, "c": true, "x": 3}', '{"a": 1, "c": true, "z": 0}']
    for text in texts:
        assert g.accepts(text) == judge.is_valid(json.loads(text)), text
    assert not ordered.accepts('{"c": true, "a": 1}')  # the default keeps the schema's order
    with pytest.raises(ValueError, match="property_order must be one of 'schema', 'any'"):
        Grammar.from_json_schema(schema, property_order="sorted")


def test_any_order_keeps_the_schema_order_where_a_repeated_key_could_count() -> None:
    # minProperties above the required names: a repeated key would be counted twice
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2, "additionalProperties": False}
    g = Grammar.from_json_schema(schema, property_order="any")
    assert g.accepts('{"a": 1, "b": 2}') and not g.accepts('{"b": 2, "a": 1}') and not g.accepts('{"a": 1, "a": 2}')


def test_regex_and_duration_formats() -> None:
    fc = jsonschema.FormatChecker()
    rx = Grammar.from_json_schema({"type": "string", "format": "regex"})
    for text in ["^a.b*$", r"\d+\.\w?", "[abc]+|x", "", r"\(\)"]:
        assert rx.accepts(json.dumps(text)) and fc.conforms(text, "regex"), text
    for text in ["(", "[", "a**", "[z-a]", "a{", "\\"]:
        assert not rx.accepts(json.dumps(text)), text  # invalid regexes (and groups: tighter)
    dur = Grammar.from_json_schema({"type": "string", "format": "duration"})
    for text, ok in [("P1Y2M3DT4H5M6S", True), ("PT5M", True), ("P3W", True), ("P", False), ("PT", False),
                     ("P1D2M", False), ("P1W2D", False)]:
        assert dur.accepts(json.dumps(text)) == ok, text


def test_keywords_a_draft_does_not_know_are_ignored_where_reading_them_would_loosen() -> None:
    # draft 7 has no minContains: `contains: false` needs an item no value matches
    d7 = "http://json-schema.org/draft-07/schema#"
    g7 = Grammar.from_json_schema({"$schema": d7, "contains": False, "minContains": 0})
    assert not g7.accepts("[]") and g7.accepts("1")
    assert Grammar.from_json_schema({"type": "array", "contains": False, "minContains": 0}).accepts("[]")
    # 2019-09 has no prefixItems: `items` is every item's schema
    tuple_ = {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}
    g19 = Grammar.from_json_schema({**tuple_, "$schema": "https://json-schema.org/draft/2019-09/schema"})
    assert not g19.accepts('["a"]') and g19.accepts("[1, 2]")
    assert Grammar.from_json_schema(tuple_).accepts('["a", 1]')


def test_then_and_else_speak_only_to_the_if_beside_them() -> None:
    # found by the property test: merging allOf once put a part's `if` beside the
    # parent's `then`, calling a schema with values unsatisfiable
    g = Grammar.from_json_schema({"then": False, "allOf": [{"if": True}]})
    assert g.accepts("null") and g.accepts('"x"')
    g = Grammar.from_json_schema({"if": {"type": "integer"}, "then": {"minimum": 5},
                                  "allOf": [{"if": True, "then": {"type": "integer"}}, {"else": False}]})
    assert g.accepts("7") and not g.accepts("3") and not g.accepts('"x"')
# ------------------------------------------- never looser: the enum filter --

D4, D7 = "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#"


def _accepts_only_valid(schema, values) -> Grammar | None:
    """The grammar (None where the compiler refuses or finds no value) takes no value
    that jsonschema rejects; the valid ones it takes are the caller's to check."""
    try:
        g = Grammar.from_json_schema(schema)
    except (UnsupportedSchema, Unsatisfiable):
        return None
    judge = _judge(schema)
    for v in values:
        if g.accepts(json.dumps(v)):
            assert judge.is_valid(v), (schema, v)
    return g


@pytest.mark.parametrize("schema, value", [
    # the exclusion is nested: jsonschema alone ignores the internal keywords in there
    ({"enum": [{"a": 1}], "not": {"properties": {"a": {"enum": [1]}}}}, {"a": 1}),
    ({"enum": [{"a": "x"}], "not": {"properties": {"a": {"pattern": "x"}}}}, {"a": "x"}),
    ({"enum": [[1]], "not": {"items": {"enum": [1]}}}, [1]),
    ({"enum": [[1]], "not": {"items": {"multipleOf": 1}}}, [1]),
    # "#" is the root, not the enum's siblings
    ({"anyOf": [{"enum": [{"a": {"a": 1}}], "properties": {"a": {"$ref": "#"}}}, {"type": "integer"}]},
     {"a": {"a": 1}}),
    # the negation writes a numeric exclusiveMaximum, which draft 4 reads as a flag
    ({"$schema": D4, "enum": [7], "not": {"minimum": 5}}, 7),
    # prefixItems is no keyword before 2020-12: items speaks of every item
    ({"$schema": D7, "prefixItems": [{}], "items": {"type": "integer"}}, ["x"]),
    ({"$schema": D7, "type": "array", "contains": {"type": "integer"}, "minContains": 0}, ["x"]),
])
def test_an_enum_value_is_judged_as_the_compiler_reads_its_siblings(schema, value) -> None:
    g = _accepts_only_valid(schema, [value])
    assert g is None or not g.accepts(json.dumps(value))


def test_an_enum_value_with_some_additional_member_is_decided_exactly() -> None:
    # not additionalProperties: some additional member is not boolean; {"foo": 1} has one
    schema = {"allOf": [{"enum": [{"foo": 1}, {"foo": True}]}, {"not": {"additionalProperties": {"type": "boolean"}}}]}
    g = _accepts_only_valid(schema, [{"foo": 1}, {"foo": True}])
    assert g is not None and g.accepts('{"foo": 1}') and not g.accepts('{"foo": true}')


# --------------------------- the complement of listed arrays and objects --


def _yes_and_no(schema, yes: list, no: list) -> None:
    """The grammar accepts each of ``yes`` and none of ``no``, as jsonschema judges them."""
    g = _accepts_only_valid(schema, yes + no)
    assert g is not None
    judge = _judge(schema)
    for v in yes:
        assert judge.is_valid(v) and g.accepts(json.dumps(v)), v
    for v in no:
        assert not judge.is_valid(v) and not g.accepts(json.dumps(v)), v


@pytest.mark.parametrize("schema, yes, no", [
    # MaskBench's: the enum's array is not the excluded one
    ({"allOf": [{"enum": [[0]]}, {"not": {"enum": [[False]]}}]}, [[0]], [[False]]),
    ({"allOf": [{"enum": [[2]]}, {"not": {"enum": [[{"foo": "bar"}]]}}]}, [[2]], [[{"foo": "bar"}]]),
    ({"allOf": [{"enum": [{"type": "string"}]}, {"not": {"enum": [{"$ref": "#/$defs/a"}]}}]},
     [{"type": "string"}], [{"$ref": "#/$defs/a"}]),
    # arrays: another length, or an item none of the listed ones has there
    ({"type": "array", "not": {"enum": [[1, 2], [1, 3], [], [[4]]]}},
     [[1], [2], [1, 4], [1, 2, 3], [2, 2], [[5]], [[4, 4]], [[4], 1], ["a", "b"], [None]],
     [[1, 2], [1, 3], [], [[4]]]),
    ({"items": {"type": "integer"}, "not": {"const": [1, 2]}}, [[2, 1], [1], [1, 2, 2], []], [[1, 2], [1.5]]),
    # equal values are one: 1.0 is 1, but true is not 1
    ({"type": "array", "not": {"enum": [[1.0], [True]]}}, [[2], [False], [1, 1]], [[1], [True]]),
    # objects: a name none of them has, a listed name absent or present against all, or another value
    ({"type": "object", "not": {"enum": [{"a": 1, "b": 2}, {"a": 1}, {"b": {"c": None}}]}},
     [{}, {"a": 2}, {"b": 2}, {"a": 1, "b": 3}, {"a": 1, "c": 1}, {"b": {"c": 1}}, {"b": {}}, {"a": 2, "b": 2},
      {"b": {"c": None, "d": 1}}],
     [{"a": 1, "b": 2}, {"a": 1}, {"b": {"c": None}}]),
    ({"type": "object", "not": {"const": {}}}, [{"a": 1}], [{}]),
    ({"type": "array", "not": {"const": []}}, [[1], [[]]], [[]]),
    # nested in other keywords: merged with items, properties and oneOf
    ({"properties": {"p": {"not": {"enum": [[1], {"a": [2]}]}}}},
     [{"p": [2]}, {"p": {"a": [3]}}, {"p": {"a": [2], "b": 1}}, {"p": 1}], [{"p": [1]}, {"p": {"a": [2]}}]),
    ({"oneOf": [{"enum": [[1], [2]]}, {"type": "array", "maxItems": 1}]}, [[], [3]], [[1], [2], [1, 2]]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False,
      "not": {"enum": [{"a": 1}, {}]}}, [{"a": 2}], [{}, {"a": 1}, {"a": 2, "b": 1}]),
])
def test_listed_arrays_and_objects_are_excluded_exactly(schema, yes, no) -> None:
    _yes_and_no(schema, yes, no)


def test_the_complement_of_many_listed_values_is_refused() -> None:
    values = [[i, [i, i]] for i in range(100)]
    with pytest.raises(UnsupportedSchema, match="at most 256") as e:
        Grammar.from_json_schema({"not": {"enum": values}})
    assert e.value.keyword == "not" and e.value.pointer == "/not/enum"


# ------------------------------------------------ uniqueItems, where finite --


@pytest.mark.parametrize("schema, yes, no", [
    ({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
     [[], ["a"], ["c", "a"], ["b", "c", "a"]], [["a", "a"], ["a", "b", "a"], ["a", "b", "c", "a"], ["d"]]),
    # 1 and 1.0 are one value; true is not 1
    ({"type": "array", "items": {"enum": [1, 1.0, True, [1], [True]]}, "uniqueItems": True},
     [[1, True], [True, 1], [[1], [True]]], [[1, 1], [True, True], [[1], [1]], [1, True, 1]]),
    # a prefix, counts and contains: the set of used values says all of them
    ({"type": "array", "prefixItems": [{"const": "x"}], "items": {"type": ["boolean", "null"]}, "uniqueItems": True,
      "minItems": 2, "contains": {"type": "boolean"}, "maxContains": 1},
     [["x", True], ["x", None, False]], [["x"], ["x", True, False], ["x", None], ["x", True, True], [True, "x"]]),
    ({"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 3}, "uniqueItems": True, "minItems": 3},
     [[1, 2, 3], [3, 1, 2]], [[1, 2], [1, 2, 2], [1, 2, 3, 1], [0, 1, 2]]),
    ({"type": "array", "items": {"anyOf": [{"const": "a"}, {"type": "boolean"}]}, "uniqueItems": True},
     [["a", True, False]], [[True, True], ["a", "a"], ["b"]]),
    # an enum filtered by its siblings (not "b")
    ({"type": "array", "items": {"enum": ["a", "b"], "not": {"const": "b"}}, "uniqueItems": True},
     [[], ["a"]], [["b"], ["a", "a"], ["a", "b"]]),
    ({"type": "array", "items": {"type": "string"}, "maxItems": 1, "uniqueItems": True}, [[], ["s"]], [["s", "t"]]),
])
def test_unique_items_over_finitely_many_values(schema, yes, no) -> None:
    _yes_and_no(schema, yes, no)


def test_unique_items_over_too_many_values_or_infinitely_many_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="sets of values") as e:
        Grammar.from_json_schema({"type": "array", "items": {"enum": list(range(20))}, "uniqueItems": True})
    assert e.value.keyword == "uniqueItems" and e.value.pointer == "/uniqueItems"
    # bounded by maxItems, the same values fit
    g = Grammar.from_json_schema({"type": "array", "items": {"enum": list(range(20))}, "uniqueItems": True,
                                  "maxItems": 2})
    assert g.accepts("[3, 19]") and not g.accepts("[3, 3]") and not g.accepts("[1, 2, 3]")
    with pytest.raises(UnsupportedSchema, match="infinitely many") as e:
        Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})


# ------------------------------------- anyOf products: only what may match --


def test_an_any_of_product_drops_the_pairs_that_take_no_value() -> None:
    # 400 pairs, of which the 10 equal constants may match: that many branches, not 400
    schema = {"allOf": [{"anyOf": [{"const": i} for i in range(20)]}, {"anyOf": [{"const": i} for i in range(10, 30)]}]}
    g = _accepts_only_valid(schema, list(range(-1, 31)))
    assert g is not None
    assert [i for i in range(-1, 31) if g.accepts(str(i))] == list(range(10, 20))


@pytest.mark.parametrize("schema, yes, no", [
    # appveyor's: closed objects of one name each; "some other member" there is that name
    ({"oneOf": [{"type": "string"}] + [{"type": "object", "additionalProperties": False, "properties": {n: {"type": "string"}}}
                                       for n in ("ps", "pwsh", "cmd", "sh")]},
     [{"ps": "a"}, {"sh": "b"}, "s"], [{}, {"ps": "a", "sh": "b"}, {"ps": 1}, {"x": "a"}, 1]),
    # a discriminator none of the branches requires: {} and {"n": 1} match all of them
    ({"oneOf": [{"type": "object", "properties": {"kind": {"enum": [k]}, f"v{k}": {"type": "integer"},
                                                   "n": {"type": "integer"}}} for k in ("a", "b", "c", "d", "e")]},
     [{"kind": "a"}, {"kind": "c", "vc": 1}, {"va": "x", "vb": "y", "vc": "z", "vd": "w"}],
     [{}, {"n": 1}, {"va": "x"}, {"kind": "z"}, {"kind": "a", "va": "x"},
      {"va": "x", "vb": "y", "vc": "z", "vd": "w", "ve": "v"}]),
])
def test_one_of_overlapping_objects_compiles_exactly(schema, yes, no) -> None:
    _yes_and_no(schema, yes, no)
