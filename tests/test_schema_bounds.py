"""The JSON Schema compiler is bounded on any schema, and refuses bad ones up front.

* Nesting: a schema nested 5,000 deep (in any keyword, in an enum value, in its JSON
  text) is a :class:`LimitExceeded` for ``max_depth`` with the JSON pointer, found by
  an iterative pass before any recursive one meets it; never a ``RecursionError``.
* Recursion through references while proving branches disjoint (the shape of a CWL
  schema: an anyOf of types whose array type's items are the conjunction of two such
  anyOfs) compiles, exactly: a question met again is answered "maybe", never "no
  value".
* A cooperative deadline (``compile_timeout``, or an enclosing
  :func:`~toolkit.core.errors.deadline`) stops a long compile with the pointer it had
  reached.
* Keyword values the spec does not allow are :class:`InvalidSchema` (keyword, value,
  pointer), never rounded or ignored; a misspelled keyword is warned about.
* An enum too large to be worth compiling is refused before any work
  (``max_enum``, ``max_enum_bytes``).
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import pytest

from toolkit.core.errors import (
    InvalidSchema,
    LimitExceeded,
    MasklabError,
    TimeLimitExceeded,
    UnsupportedSchema,
    deadline,
)
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import DEFAULT_MAX_DEPTH, from_json_schema

DEEP = 5000


def _nest(kind: str, depth: int) -> dict:
    """A schema ``depth`` levels deep through keyword ``kind``, built without recursion."""
    leaf: dict = {"type": "string"}
    node = leaf
    for _ in range(depth):
        if kind == "properties":
            node = {"type": "object", "properties": {"a": node}}
        elif kind == "items":
            node = {"type": "array", "items": node}
        elif kind in ("anyOf", "allOf", "oneOf"):
            node = {kind: [node]}
        elif kind == "not":
            node = {"not": node}
        elif kind == "additionalProperties":
            node = {"type": "object", "additionalProperties": node}
        elif kind == "definitions":
            node = {"definitions": {"d": node}, "type": "null"}
        else:
            raise AssertionError(kind)
    return node


def _deep_value(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("kind", ["properties", "items", "anyOf", "allOf", "oneOf", "not", "additionalProperties",
                                  "definitions"])
def test_a_schema_nested_5000_deep_is_max_depth_with_its_pointer(kind: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as e:
        from_json_schema(_nest(kind, DEEP))
    assert e.value.limit == "max_depth"
    assert e.value.pointer.startswith(f"/{kind}")
    assert e.value.pointer in str(e.value)
    assert time.perf_counter() - t0 < 5  # (a millisecond in fact: one look at each level)


def test_deep_values_and_deep_text_are_max_depth_too() -> None:
    with pytest.raises(LimitExceeded) as e:
        from_json_schema({"enum": [1, _deep_value(DEEP)]})
    assert e.value.limit == "max_depth" and e.value.pointer.startswith("/enum/1/0/0")
    text = '{"properties": {"a": ' * DEEP + "{}" + "}}" * DEEP  # too deep for json.loads
    with pytest.raises(LimitExceeded) as e:
        from_json_schema(text)
    assert e.value.limit == "max_depth" and e.value.pointer.startswith("/properties/a/properties/a")
    with pytest.raises(LimitExceeded):
        Grammar.from_json_schema({"const": {"a": _deep_value(DEEP)}})


def test_a_chain_of_5000_references_is_a_typed_error() -> None:
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(DEEP)}
    defs[f"d{DEEP}"] = {"type": "integer"}
    with pytest.raises(LimitExceeded) as e:
        from_json_schema({"$defs": defs, "$ref": "#/$defs/d0"})
    assert e.value.limit == "max_depth" and e.value.pointer.startswith("/$defs/d")
    # with siblings beside each $ref (2019-09 and later read them): merged, refused typed
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}", "minimum": -i} for i in range(DEEP)}
    defs[f"d{DEEP}"] = {"type": "integer"}
    with pytest.raises(MasklabError):
        from_json_schema({"$defs": defs, "$ref": "#/$defs/d0"})


def _with_stack(frames: int, fn):
    """``fn()`` called ``frames`` Python frames deeper (a caller deep in its own stack)."""
    if frames == 0:
        return fn()
    return _with_stack(frames - 1, fn)


@pytest.mark.parametrize("kind", ["properties", "items", "anyOf", "oneOf", "not", "additionalProperties"])
def test_the_deepest_allowed_schema_compiles_without_recursion_error(kind: str) -> None:
    """At the default limits a schema just inside ``max_depth`` compiles (or is refused
    with a typed error), even from a caller 150 frames deep."""
    schema = _nest(kind, DEFAULT_MAX_DEPTH - 2)
    assert sys.getrecursionlimit() >= 1000
    try:
        g = _with_stack(150, lambda: from_json_schema(schema))
    except MasklabError:
        return
    assert isinstance(g, Grammar)


# -- recursion through references while proving disjointness (a CWL-like schema) --


def _cwl_like(one_of: str = "") -> dict:
    """The shape of o69206 (Common Workflow Language): ``T`` is a primitive name, an
    array type whose items are a ``T``, or a list of ``T``; ``U`` adds input arrays whose
    items are both a ``T`` and a ``U``.  Merging that conjunction asks whether branches
    are disjoint, which asks about the same conjunction again: before the fix a
    RecursionError in ``_disjoint_pair``."""
    d = {
        "Prim": {"type": "string", "enum": ["int", "string"]},
        "OutArr": {"type": "object", "required": ["type", "items"],
                   "properties": {"type": {"enum": ["array"]}, "items": {"description": "x", "$ref": "#/definitions/T"}}},
        "T": {"anyOf": [{"$ref": "#/definitions/Prim"}, {"$ref": "#/definitions/OutArr"},
                        {"type": "array", "items": {"$ref": "#/definitions/T"}}]},
        "InArr": {"allOf": [{"$ref": "#/definitions/OutArr"},
                            {"type": "object", "properties": {"items": {"$ref": "#/definitions/U"}}}]},
        "U": {"anyOf": [{"$ref": "#/definitions/T"}, {"$ref": "#/definitions/InArr"},
                        {"type": "array", "items": {"$ref": "#/definitions/U"}}]},
    }
    inputs: dict = {"type": "array", "items": {"$ref": "#/definitions/U"}}
    if one_of == "apart":  # provably apart (by type): a union
        inputs = {"oneOf": [{"$ref": "#/definitions/Prim"}, {"$ref": "#/definitions/InArr"}]}
    elif one_of == "overlapping":  # not provably apart (the proof meets the recursion): each minus the other
        inputs = {"oneOf": [{"$ref": "#/definitions/T"}, {"$ref": "#/definitions/InArr"}]}
    return {"definitions": d, "type": "object", "properties": {"inputs": inputs}}


CWL_INSTANCES = [
    {"inputs": ["int", {"type": "array", "items": "string"}, [["int"]]]},
    {"inputs": [{"type": "array", "items": {"type": "array", "items": "int"}}]},
    {"inputs": [{"type": "array"}]},
    {"inputs": ["float"]},
    {"inputs": "int"},
    {"inputs": {"type": "array", "items": "int"}},
    {"inputs": {"type": "array", "items": ["int"]}},
    {"inputs": {"type": "array", "items": "float"}},
    {"inputs": [{"type": "array", "items": "int", "extra": 1}]},
]


@pytest.mark.parametrize("one_of", ["", "apart", "overlapping"])
def test_references_recursing_through_disjointness_compile_exactly(one_of: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = _cwl_like(one_of)
    try:
        g = from_json_schema(schema)
    except UnsupportedSchema as e:  # (a refusal is allowed, never a RecursionError nor a looser grammar)
        assert one_of == "overlapping" and e.keyword == "oneOf"
        return
    validator = jsonschema.Draft7Validator(schema)
    for value in CWL_INSTANCES:
        assert g.accepts(json.dumps(value)) == validator.is_valid(value), value


# -- the deadline --


def _slow_schema(n: int = 400) -> dict:
    """Objects with many patterned properties in many places: seconds of honest work."""
    props = {f"p{i}": {"type": "string", "pattern": f"^[a-z]{{{i % 7 + 1}}}x{i}$", "maxLength": 40 + i % 13}
             for i in range(n)}
    return {"type": "object", "properties": {f"o{j}": {"type": "object", "properties": props,
                                                        "minProperties": j % 3} for j in range(n)}}


def test_a_deadline_stops_the_compile_with_its_pointer() -> None:
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded) as e, deadline(0.05):
        from_json_schema(_slow_schema(), compile_timeout=None)
    assert time.perf_counter() - t0 < 3  # (generous: the checks are per subschema and loop turn)
    assert e.value.limit == "compile_timeout"
    assert e.value.pointer.startswith("/properties/o")
    assert "/properties/o" in str(e.value)


def test_compile_timeout_is_an_option() -> None:
    with pytest.raises(TimeLimitExceeded) as e:
        from_json_schema(_slow_schema(), compile_timeout=0.05)
    assert e.value.limit == "compile_timeout" and e.value.maximum == 0.05
    assert from_json_schema({"type": "integer"}, compile_timeout=0).accepts("12")
    with pytest.raises(ValueError, match="compile_timeout"):
        from_json_schema({"type": "integer"}, compile_timeout=-1)


# -- bad values --


BAD = [  # (schema, keyword, pointer of the bad value, the value)
    ({"type": "string", "maxLength": 2.5}, "maxLength", "/maxLength", 2.5),
    ({"properties": {"a": {"type": "string", "minLength": -1}}}, "minLength", "/properties/a/minLength", -1),
    ({"type": "array", "maxItems": "3"}, "maxItems", "/maxItems", "3"),
    ({"type": "object", "minProperties": True}, "minProperties", "/minProperties", True),
    ({"type": "number", "minimum": "0"}, "minimum", "/minimum", "0"),
    ({"type": "integer", "maximum": None}, "maximum", "/maximum", None),
    ({"type": "string", "pattern": 5}, "pattern", "/pattern", 5),
    ({"type": "object", "required": "a"}, "required", "/required", "a"),
    ({"type": "object", "required": ["a", 3]}, "required", "/required/1", 3),
    ({"type": "object", "required": ["a", "a"]}, "required", "/required", ["a", "a"]),
    ({"enum": "a"}, "enum", "/enum", "a"),
    ({"type": "str"}, "type", "/type", "str"),
    ({"type": ["string", 1]}, "type", "/type/1", 1),
    ({"properties": []}, "properties", "/properties", []),
    ({"properties": {"a": 3}}, "properties", "/properties/a", 3),
    ({"patternProperties": {"^a": "x"}}, "patternProperties", "/patternProperties/^a", "x"),
    ({"items": 3}, "items", "/items", 3),
    ({"items": [{}, 4]}, "items", "/items/1", 4),
    ({"anyOf": []}, "anyOf", "/anyOf", []),
    ({"allOf": {"type": "string"}}, "allOf", "/allOf", {"type": "string"}),
    ({"not": "x"}, "not", "/not", "x"),
    ({"type": "array", "uniqueItems": "yes"}, "uniqueItems", "/uniqueItems", "yes"),
    ({"type": "number", "multipleOf": 0}, "multipleOf", "/multipleOf", 0),
    ({"type": "string", "format": 7}, "format", "/format", 7),
    ({"$defs": {"s": {"type": "string", "maxLength": 1.5}}, "$ref": "#/$defs/s"}, "maxLength",
     "/$defs/s/maxLength", 1.5),
]


@pytest.mark.parametrize("schema, keyword, pointer, value", BAD, ids=[f"{k}{p}" for _, k, p, _ in BAD])
def test_a_bad_keyword_value_is_refused_with_keyword_value_and_pointer(schema, keyword: str, pointer: str,
                                                                       value) -> None:
    for strict in (True, False):  # (a bad schema is refused even where strict=False drops what is unsupported)
        with pytest.raises(InvalidSchema) as e:
            from_json_schema(schema, strict=strict)
        assert (e.value.keyword, e.value.pointer, e.value.value) == (keyword, pointer, value)
        assert isinstance(e.value, UnsupportedSchema)
        assert pointer in str(e.value) and keyword in str(e.value)


def test_integral_floats_are_integers_and_unread_places_are_not_checked() -> None:
    g = from_json_schema({"type": "string", "maxLength": 2.0, "minLength": 1.0})
    assert g.accepts('"ab"') and not g.accepts('"abc"') and not g.accepts('""')
    assert from_json_schema({"type": "array", "maxItems": 1.0}).accepts("[1]")
    # an unreferenced definition is not read; draft 7 ignores the siblings of $ref
    assert from_json_schema({"definitions": {"x": {"maxLength": 2.5}}, "type": "null"}).accepts("null")
    assert from_json_schema({"$schema": "http://json-schema.org/draft-07/schema#",
                             "definitions": {"s": {"type": "string"}},
                             "properties": {"a": {"$ref": "#/definitions/s", "maxLength": 2.5}}}).accepts('{"a": "xyz"}')


# -- misspelled keywords --


def test_a_misspelled_keyword_is_warned_about_with_its_likely_keyword_and_pointer() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLenght": 3}, "b": {"propertes": {}}},
              "requried": ["a"]}
    with pytest.warns(UserWarning) as caught:
        from_json_schema(schema)
    messages = [str(w.message) for w in caught]
    for wrong, right, where in (("requried", "required", "/"), ("maxLenght", "maxLength", "/properties/a"),
                                ("propertes", "properties", "/properties/b")):
        assert any(repr(wrong) in m and repr(right) in m and f"at {where}" in m for m in messages), (wrong, messages)


def test_annotations_get_no_warning() -> None:
    schema = {"type": "object", "title": "t", "$comment": "c", "x-requried": 1, "examples": [{}], "example": {},
              "markdownDescription": "m", "deprecated": False, "properties": {"requried": {"type": "string"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_json_schema(schema).accepts('{"requried": "x"}')


# -- sizes known up front --


def test_an_enum_of_100000_strings_is_refused_at_once() -> None:
    schema = {"type": "object", "properties": {"k": {"enum": [f"value-{i}" for i in range(100_000)]}}}
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as e:
        from_json_schema(schema)
    assert time.perf_counter() - t0 < 1
    assert (e.value.limit, e.value.value, e.value.pointer) == ("max_enum", 100_000, "/properties/k/enum")
    assert "/properties/k/enum" in str(e.value)
    assert from_json_schema({"enum": ["a", "b"]}, max_enum=2).accepts('"b"')
    with pytest.raises(LimitExceeded):
        from_json_schema({"enum": ["a", "b", "c"]}, max_enum=2)


def test_huge_enum_and_const_values_are_refused_by_size() -> None:
    t0 = time.perf_counter()
    with pytest.raises(LimitExceeded) as e:
        from_json_schema({"properties": {"c": {"const": "x" * 5_000_000}}})
    assert time.perf_counter() - t0 < 1
    assert (e.value.limit, e.value.pointer) == ("max_enum_bytes", "/properties/c/const")
    # the size of all of them together: many enums that are each small
    schema = {"properties": {f"p{i}": {"enum": ["y" * 1000] * 3} for i in range(400)}}
    with pytest.raises(LimitExceeded) as e:
        from_json_schema(schema)
    assert e.value.limit == "max_enum_bytes"
    assert from_json_schema({"const": "x" * 100}, max_enum_bytes=200).accepts(json.dumps("x" * 100))


def test_limits_of_the_compiler_carry_the_pointer() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(50)}}
    with pytest.raises(LimitExceeded) as e:
        from_json_schema({"type": "object", "properties": {"outer": schema}}, max_rules=20)
    assert e.value.limit == "max_rules"
    assert e.value.pointer.startswith("/properties/outer")
    assert e.value.pointer in str(e.value)
