"""Grammar.from_json_schema is never looser than the schema: a differential property test.

hypothesis writes small schemas from the keywords the compiler reads (types, enum and
const, number and string bounds, multipleOf, patterns, formats, objects with properties,
required, additional and pattern properties, property counts, propertyNames,
dependencies, dependentRequired and dependentSchemas, arrays with items (both forms),
prefixItems, additionalItems, counts, uniqueItems, contains with minContains and
maxContains, the applicators, ``not``, ``if``/``then``/``else``, ``$ref`` into ``$defs``,
to the root and to an ``$anchor``, the unevaluated keywords it refuses, and an
annotation), compiles each with every option of :func:`toolkit.jsonschema.from_json_schema`
drawn (``whitespace``, ``spelling``, ``property_order``, ``strict``, and its limits
small now and then) under a drawn draft (2020-12, 2019-09, 7, 4), and gives
it a pool of JSON values and hypothesis' own, written as the options say (compact or
indented, escaped or not).  Whenever the grammar accepts a value's text, the
``jsonschema`` package (the schema's draft, formats checked) must find the value valid;
a schema called unsatisfiable must have no valid value among them.  The reverse is not
required (the compiler is documented to be tighter in places: properties in schema
order, additional keys without escapes).  With ``strict=False`` a compile that warns
it dropped a keyword is looser by its own word and is not judged.

A crash of the compiler is a failure.  The judge is excused where it has no verdict
(:func:`_valid`: its ``RecursionError`` on a ``"$ref": "#"`` that loops, a reference it
cannot resolve), a schema its draft's meta-schema rejects is not judged, and neither are
the unsatisfiable claims of drafts 4 and 7 (see
:func:`test_an_older_draft_without_const_is_not_unsatisfiable`).  Derandomized (the
suite's ``ci`` profile, ``tests/conftest.py``); 1,000 examples, which fit ``make test``
because the schemas are drawn a few keyword groups at a time and the grammar is asked
only about the values jsonschema rejects; ``MASKLAB_HYPOTHESIS_EXAMPLES=5000`` (or
more) makes a longer search.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import warnings

import jsonschema
import pytest
import referencing.exceptions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.core.errors import InvalidSchema, LimitExceeded, Unsatisfiable, UnsupportedSchema
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import PROPERTY_ORDERS, SPELLINGS, WHITESPACES, from_json_schema

EXAMPLES = int(os.environ.get("MASKLAB_HYPOTHESIS_EXAMPLES", "1000"))

NAMES = ["a", "b", "c", "id"]
STRINGS = st.sampled_from(["", "a", "ab", "abc", "b", "x1", "é", "A-Z", "2024-01-01"])
NUMBERS = st.one_of(st.integers(-3, 12), st.sampled_from([0.5, -1.5, 2.0, 10.25, 1e3]))
PATTERNS = st.sampled_from(["^a", "b$", "^[a-c]*$", "[0-9]", "^x", "é"])
FORMATS = st.sampled_from(["date", "email", "ipv4", "uuid", "date-time", "hostname", "no-such-format"])

SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES + ["z"]), inner, max_size=4)),
    max_leaves=8,
)
POOL = [None, True, False, 0, 1, -2, 3, 7, 12, 0.5, 2.5, -1.5, "", "a", "ab", "abc", "b", "x1", "é", "2024-01-01",
        "a@b.example", "10.0.0.1", [], [1], [1, 2],
        ["a", 1], [1, "a", None], [[1]], [1, 1, 1, 1], {}, {"a": 1}, {"a": "x"}, {"b": 2}, {"a": 1, "b": 2},
        {"b": 2, "a": 1}, {"c": None}, {"a": 1, "z": 2}, {"id": "a"}, {"a": [1]}, {"a": {"b": 1}}, {"x1": 3},
        {"a": 1, "b": "x", "c": True}]

# enum and const list arrays and objects too: their complement (under not, oneOf) is exact
LISTED = st.one_of(SCALARS, SCALARS, st.lists(SCALARS, max_size=2),
                   st.dictionaries(st.sampled_from(NAMES), SCALARS, max_size=2))

TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"])


def _groups(child: st.SearchStrategy) -> dict[str, st.SearchStrategy]:
    """The keywords by what they speak of, each group a dictionary of some of them (the
    keywords that work together come together: ``if`` with ``then``/``else``,
    ``contains`` with its counts), with child schemas ``child``."""
    names = st.sampled_from(NAMES)
    some = functools.partial(st.fixed_dictionaries, {})
    return {
        "type": st.fixed_dictionaries({"type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=2, unique=True))}),
        "enum": st.fixed_dictionaries({"enum": st.lists(LISTED, min_size=1, max_size=3)}),
        "const": st.fixed_dictionaries({"const": LISTED}),
        "number": some(optional={
            "minimum": NUMBERS, "maximum": NUMBERS, "exclusiveMinimum": NUMBERS, "exclusiveMaximum": NUMBERS,
            # binary-exact steps: jsonschema divides in floating point (0.07 / 0.01 is
            # not 7 there), where JSON Schema and the compiler use exact decimals
            "multipleOf": st.sampled_from([2, 3, 5, 0.5, 2.5])}),
        "string": some(optional={"minLength": st.integers(0, 3), "maxLength": st.integers(0, 3), "pattern": PATTERNS,
                                 "format": FORMATS}),
        "object": some(optional={
            "properties": st.dictionaries(names, child, max_size=3),
            "required": st.lists(names, max_size=2, unique=True),
            "additionalProperties": child,
            "patternProperties": st.dictionaries(PATTERNS, child, max_size=1)}),
        "members": some(optional={"minProperties": st.integers(0, 2), "maxProperties": st.integers(0, 3)}),
        # (refused: a group of their own, so that they come without what would make them moot)
        "unevaluated": st.one_of(st.fixed_dictionaries({"unevaluatedProperties": st.booleans()}),
                                 st.fixed_dictionaries({"unevaluatedItems": st.booleans()})),
        "propertyNames": st.fixed_dictionaries({"propertyNames": st.one_of(
            # keywords a key's terminal cannot hold (refused), first: one_of favours its first
            st.fixed_dictionaries({"not": st.fixed_dictionaries({"const": names})}),
            st.fixed_dictionaries({"anyOf": st.lists(st.fixed_dictionaries({"const": names}), min_size=1,
                                                     max_size=2)}),
            st.fixed_dictionaries({"maxLength": st.integers(0, 2)}),
            st.fixed_dictionaries({"pattern": PATTERNS}),
            st.fixed_dictionaries({"enum": st.lists(names, max_size=2)}),
            st.fixed_dictionaries({"const": names}),
            st.fixed_dictionaries({"type": st.just("string")}))}),
        "dependencies": some(optional={
            "dependentSchemas": st.dictionaries(names, child, max_size=1),
            "dependentRequired": st.dictionaries(names, st.lists(names, max_size=2, unique=True), max_size=1),
            "dependencies": st.dictionaries(names, st.one_of(st.lists(names, max_size=2, unique=True), child),
                                            max_size=1)}),
        "array": some(optional={
            "items": st.one_of(child, st.lists(child, min_size=1, max_size=2)),
            "additionalItems": child,
            "prefixItems": st.lists(child, min_size=1, max_size=2)}),
        "items": some(optional={"minItems": st.integers(0, 2), "maxItems": st.integers(0, 3),
                                "uniqueItems": st.booleans()}),
        "contains": st.fixed_dictionaries({"contains": st.one_of(st.fixed_dictionaries({"type": TYPES}), child)},
                                          optional={"minContains": st.integers(0, 2), "maxContains": st.integers(0, 2)}),
        "anyOf": st.fixed_dictionaries({"anyOf": st.lists(child, min_size=1, max_size=2)}),
        "allOf": st.fixed_dictionaries({"allOf": st.lists(child, min_size=1, max_size=2)}),
        "oneOf": st.fixed_dictionaries({"oneOf": st.lists(child, min_size=1, max_size=2)}),
        "not": st.fixed_dictionaries({"not": child}),
        "if": st.fixed_dictionaries({"if": child}, optional={"then": child, "else": child}),
        "$ref": st.fixed_dictionaries({"$ref": st.sampled_from(["#/$defs/d", "#", "#dee"])}),
        "annotation": st.fixed_dictionaries({"description": st.just("an annotation")}),
    }


def _keywords(child: st.SearchStrategy) -> st.SearchStrategy:
    """One schema: the keywords of up to three groups (:func:`_groups`), with child
    schemas ``child`` (few keywords a schema: drawn fast, and compiled, not refused)."""
    groups = _groups(child)

    def merged(parts: list[dict]) -> dict:
        return {k: v for part in parts for k, v in part.items()}

    return st.lists(st.sampled_from(sorted(groups)), max_size=3, unique=True).flatmap(
        lambda chosen: st.tuples(*(groups[g] for g in chosen)).map(merged))


LEAF = st.one_of(st.booleans(), _keywords(st.just(True)))
SCHEMAS = st.recursive(LEAF, lambda inner: _keywords(inner), max_leaves=6).map(
    lambda s: s if isinstance(s, bool) else {**s, "$defs": {"d": {"$anchor": "dee", "type": "integer", "minimum": 0}}}
)


DRAFT_7 = "http://json-schema.org/draft-07/schema#"
DRAFT_4 = "http://json-schema.org/draft-04/schema#"
DRAFTS = [None, "https://json-schema.org/draft/2019-09/schema", DRAFT_7, DRAFT_4]
#: small values of the limits from_json_schema takes (a LimitExceeded is a refusal like
#: UnsupportedSchema); compile_timeout is left out: what it stops depends on the machine
SMALL_LIMITS = {"max_rules": 40, "max_depth": 3, "max_enum": 2, "max_enum_bytes": 16}
#: every option of from_json_schema (its signature says which limits there are), the
#: limits small now and then
OPTIONS = st.fixed_dictionaries({
    "whitespace": st.sampled_from(WHITESPACES),
    "spelling": st.sampled_from(SPELLINGS),
    "property_order": st.sampled_from(PROPERTY_ORDERS),
    "strict": st.booleans(),
}, optional={k: st.just(v) for k, v in SMALL_LIMITS.items() if k in inspect.signature(from_json_schema).parameters})
#: how a value is written: json.dumps' ensure_ascii, and indent where whitespace is flexible
LAYOUTS = st.tuples(st.booleans(), st.sampled_from([None, None, 2]))


def _compile(schema, options: dict):
    """The grammar; None where the compiler refuses (or, not strict, says it dropped a
    keyword: looser by its own word); "empty" where it says no value fits.  Anything
    else it raises is a failure."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            grammar = Grammar.from_json_schema(schema, **options)
    except Unsatisfiable:
        return "empty"
    except (UnsupportedSchema, LimitExceeded):
        return None
    if any("looser" in str(w.message) for w in caught):
        assert not options["strict"], [str(w.message) for w in caught]
        return None
    return grammar


def _text(value, options: dict, layout: tuple[bool, int | None]) -> str:
    ascii_only, indent = layout
    if options["whitespace"] == "compact":
        return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent)


def _valid(judge, value) -> bool | None:
    """jsonschema's verdict; None where it has none: its own recursion limit (a
    ``"$ref": "#"`` that loops), a reference it cannot resolve (``$anchor`` is no
    keyword before 2019-09), or its crash on a boolean ``items`` beside
    ``additionalItems`` (2019-09).  Only the judge is excused: a crash of the compiler
    fails the test."""
    try:
        return judge.is_valid(value)
    except (RecursionError, referencing.exceptions.Unresolvable, TypeError):
        return None


def _judge(schema):
    """jsonschema's validator of the schema's draft (formats checked), or None for a
    schema its draft's meta-schema rejects (boolean subschemas in draft 4, ``items``
    as a list in 2020-12): no verdict."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(SCHEMAS, st.lists(VALUES, max_size=6), st.sampled_from([None, *DRAFTS]), OPTIONS, LAYOUTS)
def test_the_grammar_accepts_only_what_jsonschema_accepts(schema, drawn, draft, options, layout) -> None:
    if draft is not None and isinstance(schema, dict):  # where $ref's siblings are ignored, and keywords of
        schema = {**schema, "$schema": draft}  # other drafts only read tighter, never in a complement
    grammar = _compile(schema, options)
    if grammar is None:
        return
    judge = _judge(schema)
    if judge is None:
        return
    for value in POOL + drawn:
        if grammar == "empty":  # Unsatisfiable is a claim too: no value may be valid
            assert _valid(judge, value) is not True, f"{json.dumps(schema)} is called unsatisfiable, but {value!r} fits"
            continue
        if _valid(judge, value) is False:  # (the judge first: it is faster than the grammar)
            text = _text(value, options, layout)
            assert not grammar.accepts(text), (f"the grammar of {json.dumps(schema)} ({options}) accepts {text}, "
                                               "which the schema rejects")


@pytest.mark.parametrize("draft, negated", [
    (DRAFT_4, {"const": None}), (DRAFT_4, {"contains": {"type": "string"}}), (DRAFT_4, {"propertyNames": {"maxLength": 1}}),
    (DRAFT_4, {"if": {"type": "string"}, "then": False}),
    ("http://json-schema.org/draft-06/schema#", {"if": {"type": "string"}, "then": False}),
    (DRAFT_7, {"dependentRequired": {"a": ["b"]}}),
    ("https://json-schema.org/draft/2020-12/schema", {"dependencies": {"a": ["b"]}}),
])
def test_a_keyword_the_draft_lacks_is_not_negated(draft, negated) -> None:
    """Found by the differential test with drafts drawn: a keyword the root's draft
    does not have (``const`` in draft 4) constrains nothing there, so ``{"not":
    negated}`` is ``not {}``: no value fits.  Read tighter (as the compiler reads it
    where it constrains) its complement would take every value but the excluded."""
    schema = {"$schema": draft, "not": negated}
    judge = jsonschema.validators.validator_for(schema)(schema)
    try:
        g = Grammar.from_json_schema(schema)
    except (UnsupportedSchema, Unsatisfiable):
        return  # refused, or called empty (true here): fine
    for value in (True, "x", 3, {"a": 1}, ["y"]):
        assert not judge.is_valid(value)
        assert not g.accepts(json.dumps(value)), value


def test_a_keyword_the_draft_lacks_is_read_tighter_where_it_constrains() -> None:
    """Where it constrains, ``const`` in draft 4 is read (as the engines read it):
    tighter, which the masks of every peer share."""
    g = Grammar.from_json_schema({"$schema": DRAFT_4, "const": 4})
    assert g.accepts("4") and not g.accepts("5") and not g.accepts("null")


@pytest.mark.parametrize("schema", [
    {"$schema": DRAFT_4, "oneOf": [{"const": 1}, {"const": 2}]},  # draft 4: both branches are {}: no value fits one
    {"$schema": DRAFT_4, "oneOf": [{"type": "integer", "const": 1}, {"type": "integer", "const": 2}]},
    {"$schema": DRAFT_7, "oneOf": [{"type": "object", "dependentRequired": {"a": ["b"]}},
                                   {"type": "object", "required": ["a"], "properties": {"b": False}}]},
])
def test_a_keyword_the_draft_lacks_proves_no_branches_disjoint(schema) -> None:
    """oneOf is read as a union only where its branches are disjoint; a proof by a
    keyword the draft lacks (``const`` in draft 4) would be false there: 1 matches
    both branches of the first two schemas, ``{"a": 1}`` both of the third."""
    judge = jsonschema.validators.validator_for(schema)(schema)
    try:
        g = Grammar.from_json_schema(schema)
    except (UnsupportedSchema, Unsatisfiable):
        return
    for value in (1, 2, {"a": 1}, {"a": 1, "b": 2}, "z"):
        if not judge.is_valid(value):
            assert not g.accepts(json.dumps(value)), value


@pytest.mark.parametrize("schema", [
    {"$schema": DRAFT_4, "const": 4, "minimum": 9},
    {"$schema": DRAFT_4, "type": "integer", "const": 4, "minimum": 9},
    {"$schema": DRAFT_4, "not": {"const": None}},
])
def test_an_older_draft_without_const_is_not_unsatisfiable(schema) -> None:
    """In draft 4 ``const`` is no keyword, so ``{"const": 4, "minimum": 9}`` takes
    every non-number (and 9 and up).  Tighter is allowed; "no value fits" is a claim
    the draft's own reading must bear: the compiler refuses instead, naming ``const``."""
    valid = [v for v in (None, 9, 10, "x") if jsonschema.Draft4Validator(schema).is_valid(v)]
    try:
        Grammar.from_json_schema(schema)
    except Unsatisfiable:
        assert not valid, f"called unsatisfiable, but {valid} fit"
    except UnsupportedSchema as e:
        assert e.keyword == "const" and e.pointer.endswith("/const"), e


@pytest.mark.parametrize("draft, value, message", [
    (DRAFT_4, 5, "must be a boolean"), (DRAFT_7, True, "must be a number"),
])
def test_an_exclusive_bound_of_the_other_drafts_form_is_invalid(draft, value, message) -> None:
    """Draft 4's exclusiveMinimum is a flag on minimum, draft 6's a number: the other
    form is refused by the meta-schema of the draft, and so by the compiler."""
    schema = {"$schema": draft, "minimum": 1, "exclusiveMinimum": value}
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.validators.validator_for(schema).check_schema(schema)
    with pytest.raises(InvalidSchema, match=message) as e:
        Grammar.from_json_schema(schema)
    assert e.value.pointer == "/exclusiveMinimum"


@pytest.mark.parametrize("schema", [{"anyOf": [{"if": True, "$ref": "#"}]}, {"if": {"$ref": "#", "minimum": 1}}])
def test_an_if_that_refers_to_the_root_is_compiled_or_refused(schema) -> None:
    """Crashes of the compiler (a RecursionError merging an ``if`` that refers to the
    root) that the differential test once hid by catching RecursionError around the
    compile: an answer (a grammar, Unsatisfiable or a refusal) is required."""
    try:
        Grammar.from_json_schema(schema)
    except (UnsupportedSchema, Unsatisfiable, LimitExceeded):
        pass


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
