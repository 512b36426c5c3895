"""Every refusal of the JSON Schema compiler, each by a schema that reaches it.

:mod:`toolkit.jsonschema.compiler` promises a grammar never looser than the schema:
where it cannot express a keyword exactly it raises
:class:`~toolkit.core.errors.UnsupportedSchema` naming the keyword and its JSON pointer
(``strict=False``: it drops the keyword with a warning that says the grammar is looser).
Each place it does so has a case here, and each case fails when that refusal is taken
out of the compiler (the mutation check of issue 44: a refusal replaced by ``pass``
made the suite red for every one of them).

* :data:`DROPPED`: the keywords ``strict=False`` drops (``_Compiler.unsupported``).
  Strict, the compile is refused; not strict, it warns, and the looser grammar accepts
  a value the schema rejects (``jsonschema`` says so): what the refusal guards.
* :data:`REFUSED`: the other refusals (limits, references the compiler cannot
  resolve, merges it cannot make exactly, negations it cannot write).
* :data:`MALFORMED`: keyword values the spec does not allow; refused through
  ``from_json_schema``, and by the compile's own guard where it reads them (a check
  up front may meet them first; the guards stay, and are held to their refusal).
* :data:`INTERNAL`: refusals no schema reaches through ``from_json_schema`` today
  (guards behind the rewrites that run first), called on the compiler's own methods.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import jsonschema
import pytest

from toolkit.core.errors import MasklabError, UnsupportedSchema
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema import compiler

_CONTAINS = {"type": "array", "contains": {"type": "integer"}}


def _nested(wrap: Any, depth: int, inner: Any) -> Any:
    for _ in range(depth):
        inner = wrap(inner)
    return inner


#: (schema, keyword, pointer, words of the reason, a value the schema rejects that the
#: grammar without the refusal accepts)
DROPPED = [
    pytest.param({"type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": False},
                 "unevaluatedProperties", "/unevaluatedProperties", "not expressible", {"a": 1, "zzz": 2},
                 id="unevaluatedProperties"),
    pytest.param({"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
                 "unevaluatedItems", "/unevaluatedItems", "not expressible", [1, "x"], id="unevaluatedItems"),
    pytest.param({"type": "object", "propertyNames": {"anyOf": [{"const": "a"}, {"pattern": "^b"}]}},
                 "propertyNames", "/propertyNames", "only string keywords", {"zzz": 1}, id="propertyNames-anyOf"),
    pytest.param({"type": "object", "propertyNames": {"not": {"const": "zzz"}}},
                 "propertyNames", "/propertyNames", "only string keywords", {"zzz": 1}, id="propertyNames-not"),
    pytest.param({**_CONTAINS, "maxContains": 1}, "maxContains", "", "counting the items", [1, 2],
                 id="maxContains"),
    pytest.param({**_CONTAINS, "minContains": 2}, "minContains", "", "counting the items", [1], id="minContains"),
    pytest.param({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "/uniqueItems",
                 "infinitely many", ["a", "a"], id="uniqueItems"),
    pytest.param({"type": "object", "patternProperties": {p: {"type": "integer"} for p in ("^a", "^b", "^c", "^d", "^e")}},
                 "patternProperties", "/patternProperties", "5 patterns", {"a": "x"}, id="patternProperties-count"),
    pytest.param({"oneOf": [{"minimum": i} for i in range(17)]}, "oneOf", "", "17 overlapping branches", 20,
                 id="oneOf-overlaps"),
    pytest.param({"oneOf": [{"type": "object"}, {"patternProperties": {"^a": {"type": "integer"}}}]}, "oneOf", "",
                 "complement of one is not expressible", {}, id="oneOf-complement"),
    # a negation that cannot be written (the refusals of _Compiler.negate, dropped as one)
    pytest.param({"not": {"uniqueItems": True}}, "not", "/not/uniqueItems", "repeated item", [1], id="not"),
]


#: (schema, keyword, pointer, words of the reason); a pointer given as a compiled regex
#: is matched whole, a reason so is searched
REFUSED = [
    # --- the complement of a schema (_Compiler.negate, _violations, _not_values)
    pytest.param({"not": _nested(lambda s: {"properties": {"a": s}}, 18, {"type": "integer"})}, "not",
                 re.compile(r"/not(/properties/a)+"), "nest too deeply", id="not-depth"),
    pytest.param({"not": {"properties": {f"p{i}": {"type": "integer"} for i in range(300)}}}, "not", "/not",
                 "300 alternatives", id="not-branches"),
    pytest.param({"not": {"items": {"type": "string"}, "prefixItems": [{"type": "integer"}]}}, "not", "/not/items",
                 "items after prefixItems", id="not-items-after-prefix"),
    pytest.param({"not": {"contains": {"type": "integer"}, "minContains": 2}}, "not", "/not/contains",
                 "counted contains", id="not-counted-contains"),
    pytest.param({"not": {"propertyNames": {"maxLength": 2}}}, "not", "/not/propertyNames",
                 "'propertyNames' cannot be expressed", id="not-other-keyword"),
    pytest.param({"not": {"enum": [[i, [i, i]] for i in range(100)]}}, "not", "/not/enum", "at most 256",
                 id="not-listed-values"),
    # --- subschemas and keywords of the wrong kind
    pytest.param({"enum": [float("nan")]}, "enum", "", "NaN", id="enum-nan"),
    # --- limits
    pytest.param({"type": "array", "minItems": 2001}, "minItems", "", "2001 items to unroll", id="unroll"),
    pytest.param({"type": "string", "maxLength": 12000, "pattern": "^[^x]*$"}, "maxLength", "/maxLength",
                 "automaton is too large", id="string-automaton"),
    pytest.param({"allOf": [{"anyOf": [{"minLength": i} for i in range(129)]},
                            {"anyOf": [{"maxLength": 200 + i} for i in range(129)]}]},
                 "anyOf", "/allOf/1/anyOf", re.compile(r"has 16641 combinations$"), id="anyOf-pairs"),
    pytest.param({"allOf": [{"anyOf": [{"minLength": i} for i in range(65)]},
                            {"anyOf": [{"maxLength": 200 + i} for i in range(65)]}]},
                 "anyOf", "/allOf/1/anyOf", "4225 combinations", id="anyOf-product"),
    # --- merging (allOf, $ref beside keywords)
    pytest.param({"$defs": {"d": {"$ref": "#/$defs/d", "minimum": 1}}, "allOf": [{"$ref": "#/$defs/d"}, {"minimum": 0}]},
                 "allOf", re.compile(r"/allOf(/0)+"), "nest too deeply", id="allOf-depth"),
    pytest.param({"allOf": [{"properties": {"a": {}}, "additionalProperties": False},
                            {"patternProperties": {"^x": {}}}]},
                 "allOf", "/allOf/0/additionalProperties", "next to patternProperties", id="allOf-additional"),
    pytest.param({"allOf": [{"oneOf": [{"type": "integer"}, {"type": "string"}]},
                            {"oneOf": [{"minimum": 1}, {"maxLength": 1}]}]},
                 "oneOf", "/allOf/1/oneOf", "two oneOf lists", id="allOf-two-oneOf"),
    pytest.param({"allOf": [{"contains": {"type": "integer"}}, {"contains": {"type": "string"}}]},
                 "allOf", "/allOf/1/contains", "two different 'contains'", id="allOf-keyword"),
    pytest.param({"allOf": [{"multipleOf": 0.1000000000000001}, {"multipleOf": 0.3000000000000001}]},
                 "allOf", "/allOf/1/multipleOf", "no exact float", id="allOf-multipleOf"),
    # --- values (enum filtered by its siblings)
    pytest.param({"enum": [{"a": 1}], "properties": {"a": {"$ref": "#/$defs/nope"}}}, "enum", "",
                 "sibling keywords", id="enum-siblings"),
    # --- references
    pytest.param({"$ref": "http://example.com/s.json"}, "$ref", "/$ref", "only local references", id="ref-remote"),
    pytest.param({"items": {"$ref": "#/definitions/missing"}}, "$ref", "/items/$ref", "unresolvable",
                 id="ref-unresolvable"),
    pytest.param({"$defs": {"x": {"$anchor": "x"}}, "$ref": "http://example.com/s.json"}, "$ref", "/$ref",
                 "only local references", id="ref-remote-with-anchors"),
    pytest.param({"$defs": {"x": {"$anchor": "a"}, "y": {"$anchor": "a"}}, "$ref": "#a"}, "$ref", "/$ref",
                 "defined twice", id="anchor-twice"),
    pytest.param({"$ref": "#nope"}, "$ref", "/$ref", "no subschema has the anchor", id="anchor-missing"),
    pytest.param({"$defs": {"x": {"$id": "http://example.com/x.json", "items": {"$ref": "#"}}}}, "$ref",
                 "/$defs/x/items/$ref", "$id of its own", id="ref-in-resource"),
    pytest.param({"$dynamicRef": "#a", "$defs": {"x": {"$id": "http://example.com/x.json"},
                                                 "a": {"$dynamicAnchor": "a"}}},
                 "$dynamicRef", "/$dynamicRef", "several schema resources", id="dynamicRef-resources"),
    pytest.param({"$recursiveRef": "#/$defs/a", "$defs": {"a": {}}}, "$recursiveRef", "/$recursiveRef",
                 "must be '#'", id="recursiveRef"),
    pytest.param({"$dynamicAnchor": "a", "$ref": "#/$defs/x", "$dynamicRef": "#a", "allOf": 5, "$defs": {"x": {}}},
                 "allOf", "/allOf", "must be a list", id="ref-and-dynamicRef-allOf"),
    # --- tighter forms that leave nothing (the schema may still have values)
    pytest.param({"type": "string", "not": {"format": "date"}}, "not", "/not/format", "tighter", id="tighter-empty"),
    # --- the document itself
    pytest.param("{", "schema", "", "not JSON", id="document-json"),
    pytest.param({1, 2}, "schema", "", "object or a boolean, not set", id="document-type"),  # (not JSON either)
]


#: keyword values the spec does not allow, refused by the compiler's own guards (where
#: the compile reads them) as well as by any check up front: (schema, keyword, the
#: pointer of the schema and words of the reason the guard gives there; a guard may
#: name the keyword's own pointer instead)
MALFORMED = [
    pytest.param({"not": 5}, "not", "/not", "object or a boolean", id="not-non-schema"),
    pytest.param({"not": {"minLength": -1}}, "minLength", "/not/minLength", "non-negative", id="not-count"),
    pytest.param({"not": {"pattern": 5}}, "pattern", "/not/pattern", "must be a string", id="not-pattern"),
    pytest.param({"not": {"minimum": "0"}}, "minimum", "/not/minimum", "must be a number", id="not-bound"),
    pytest.param({"not": {"required": "a"}}, "required", "/not/required", "must be a list", id="not-required"),
    pytest.param({"not": {"properties": []}}, "properties", "/not/properties", "must be an object",
                 id="not-properties"),
    pytest.param({"not": {"enum": 5}}, "enum", "/not/enum", "must be a list", id="not-enum"),
    pytest.param({"not": {"anyOf": []}}, "anyOf", "/not/anyOf", "non-empty list", id="not-anyOf"),
    pytest.param({"not": {"oneOf": []}}, "oneOf", "/not/oneOf", "non-empty list", id="not-oneOf"),
    pytest.param({"properties": {"a": 5}}, "schema", "/properties/a", "object or a boolean", id="schema"),
    pytest.param({"allOf": {}}, "allOf", "", "must be a list", id="allOf-list"),
    pytest.param({"allOf": [5]}, "allOf", "/allOf/0", "object or a boolean", id="allOf-part"),
    pytest.param({"allOf": [{"allOf": {}}]}, "allOf", "/allOf/0/allOf", "must be a list", id="allOf-inner-list"),
    pytest.param({"dependencies": []}, "dependencies", "/dependencies", "must be an object", id="dependencies"),
    pytest.param({"dependencies": {"a": 5}}, "dependencies", "/dependencies/a", "names or a schema",
                 id="dependencies-value"),
    pytest.param({"dependentRequired": {"a": {}}}, "dependentRequired", "/dependentRequired/a", "must be a list",
                 id="dependentRequired"),
    pytest.param({"anyOf": []}, "anyOf", "", "non-empty list", id="anyOf"),
    pytest.param({"oneOf": {}}, "oneOf", "", "non-empty list", id="oneOf"),
    pytest.param({"anyOf": [{}, "x"]}, "anyOf", "/anyOf/1", "object or a boolean", id="anyOf-branch"),
    pytest.param({"type": "float"}, "type", "/type", "unknown type", id="type"),
    pytest.param({"enum": 5}, "enum", "/enum", "must be a list", id="enum"),
    pytest.param({"type": "number", "minimum": "0"}, "minimum", "/minimum", "must be a number", id="minimum"),
    pytest.param({"type": "string", "minLength": "1"}, "minLength", "", "must be numbers", id="minLength"),
    pytest.param({"type": "string", "pattern": 5}, "pattern", "/pattern", "must be a string", id="pattern"),
    pytest.param({"type": "object", "properties": []}, "properties", "/properties", "must be an object",
                 id="properties"),
    pytest.param({"type": "object", "required": "a"}, "required", "/required", "must be a list", id="required"),
    pytest.param({"type": "object", "minProperties": "1"}, "minProperties", "", "must be numbers",
                 id="minProperties"),
    pytest.param({"type": "object", "patternProperties": ["^a"]}, "patternProperties", "/patternProperties",
                 "must be an object", id="patternProperties"),
    pytest.param({"type": "object", "propertyNames": 5}, "propertyNames", "/propertyNames", "must be a schema",
                 id="propertyNames-non-schema"),
    pytest.param({"type": "array", "minItems": 1.5}, "minItems", "", "must be integers", id="minItems"),
    pytest.param({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True, "contains": {"const": 1},
                  "minContains": "x"}, "minContains", "", "must be numbers", id="minContains-unique"),
    pytest.param({"allOf": [{"pattern": "a"}, {"pattern": 5}]}, "pattern", "/allOf/1/pattern", "must be a string",
                 id="allOf-pattern"),
]


def _c(schema: Any = None, strict: bool = True) -> Any:
    """A compiler over ``schema``, for the refusals only its methods reach."""
    return compiler._Compiler({} if schema is None else schema, whitespace="compact", strict=strict,
                              max_rules=compiler.DEFAULT_MAX_RULES)


#: (call on a compiler, keyword, pointer, words of the reason, dropped by strict=False)
INTERNAL = [
    # resolve() after the reference pass, which rewrites every anchor it can
    pytest.param(lambda c: c.resolve("#foo", "/$ref"), "$ref", "/$ref", "anchors are not supported", False,
                 id="resolve-anchor"),
    # alternatives() takes not/if/then/else away before _body() sees the node
    pytest.param(lambda c: c._body({"not": {"type": "string"}}, ""), "not", "/not", "cannot be expressed", True,
                 id="body-not"),
    # the internal integer exclusions only ever come with type integer
    pytest.param(lambda c: c._number({compiler.NOT_INTEGERS: ["2"]}, "", integer=False), "not", "",
                 "non-integer numbers", True, id="number-exclusions"),
    # the reference pass rewrites every dynamic reference it can reach
    pytest.param(lambda c: c.compile({"type": "array", "items": {"$recursiveRef": "#"}}, ""), "$recursiveRef",
                 "/items/$recursiveRef", "dynamic reference", False, id="compile-dynamic-ref"),
]


def _check(e: UnsupportedSchema, keyword: str, pointer: str | re.Pattern, reason: str | re.Pattern) -> None:
    assert e.keyword == keyword, (e.keyword, str(e))
    if isinstance(pointer, re.Pattern):
        assert pointer.fullmatch(e.pointer), (e.pointer, str(e))
    else:
        assert e.pointer == pointer, (e.pointer, str(e))
    assert reason.search(e.reason) if isinstance(reason, re.Pattern) else reason in e.reason, str(e)


@pytest.mark.parametrize("schema, keyword, pointer, reason, looser", DROPPED)
def test_a_keyword_that_cannot_be_expressed_is_refused(schema: Any, keyword: str, pointer: str, reason: str,
                                                       looser: Any) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema(schema)
    _check(e.value, keyword, pointer, reason)


@pytest.mark.parametrize("schema, keyword, pointer, reason, looser", DROPPED)
def test_dropped_with_strict_false_it_warns_and_the_grammar_is_looser(schema: Any, keyword: str, pointer: str,
                                                                       reason: str, looser: Any) -> None:
    """What each refusal guards: without the keyword the grammar accepts ``looser``,
    which the schema rejects."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = Grammar.from_json_schema(schema, strict=False)
    said = [str(w.message) for w in caught]
    assert any(f"{keyword!r} at {pointer or '/'} dropped" in s and "looser" in s for s in said), said
    assert not jsonschema.Draft202012Validator(schema).is_valid(looser)
    assert g.accepts(json.dumps(looser)), (schema, looser)


@pytest.mark.parametrize("schema, keyword, pointer, reason", REFUSED)
def test_what_cannot_be_compiled_exactly_is_refused(schema: Any, keyword: str, pointer: str | re.Pattern,
                                                    reason: str | re.Pattern) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        Grammar.from_json_schema(schema)
    _check(e.value, keyword, pointer, reason)


@pytest.mark.parametrize("schema, keyword, pointer, reason", MALFORMED)
def test_a_malformed_keyword_is_refused_by_the_compile_itself(schema: Any, keyword: str, pointer: str,
                                                              reason: str) -> None:
    """Refused through ``from_json_schema`` (by whichever check meets it first), and by
    the compile's own guard where the compile reads the value (the compiler's passes
    called directly, without any check before them)."""
    with pytest.raises(UnsupportedSchema):
        Grammar.from_json_schema(schema)
    with pytest.raises(UnsupportedSchema) as e:
        _c(schema).compile(schema, "")
    # the guard's words where it names the schema, or a value check's at the keyword's own pointer
    assert e.value.keyword == keyword, str(e.value)
    assert (e.value.pointer, reason in e.value.reason) == (pointer, True) or e.value.pointer == f"{pointer}/{keyword}", \
        str(e.value)


@pytest.mark.parametrize("call, keyword, pointer, reason, dropped", INTERNAL)
def test_the_guards_behind_the_rewrites_refuse(call: Any, keyword: str, pointer: str, reason: str,
                                               dropped: bool) -> None:
    with pytest.raises(UnsupportedSchema) as e:
        call(_c())
    _check(e.value, keyword, pointer, reason)
    if dropped:  # not strict: a warning, and the call goes on
        with pytest.warns(UserWarning, match="looser"):
            call(_c(strict=False))


def test_a_schema_case_without_data_is_refused() -> None:
    """A dataset test instance without ``data`` is a typed error naming the field
    (the dataset reader adds the file and pointer), not a TypeError."""
    with pytest.raises(MasklabError, match="needs 'data'"):
        compiler._schema_case({"valid": True})
