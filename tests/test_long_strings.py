"""Long strings: ``maxLength``/``minLength`` up to 2^16 (issue #26).

A bounded JSON string is one terminal whose DFA is written down directly
(:func:`toolkit.automata.jsontext.json_string_dfa`), 20 states per character: 65,536
characters are 1.31M states, allowed past ``max_states`` (which bounds subset
constructions) up to ``MAX_STRING_STATES``.  The language is exact at the bounds with
characters of every written width, whitespace never enters the string, and larger
bounds are refused by keyword and pointer.
"""

from __future__ import annotations

import json

import pytest

from toolkit.automata.jsontext import (
    MAX_STRING_LENGTH,
    MAX_STRING_STATES,
    json_string,
    json_string_dfa,
)
from toolkit.automata.regex import compile_regex
from toolkit.core.errors import UnsupportedSchema
from toolkit.grammar.ir import Grammar

# 65,535 characters written in every width: 1-4 UTF-8 bytes, short and \u escapes, a pair
BODY = "a" * 64000 + ("é€😀\\n\\u0041\\ud83d\\ude00" * 255) + "a" * 5
assert len(json.loads('"' + BODY + '"')) == 65535


def test_maxlength_65535_is_exact_at_the_bound() -> None:
    g = Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 65535}},
                                  "required": ["s"]})
    assert g.accepts('{"s": "' + BODY + '"}')
    assert not g.accepts('{"s": "' + BODY + 'a"}')
    assert not g.accepts('{"s": "' + BODY + '\\ud83d\\ude00"}')
    # whitespace between tokens, never inside the string
    assert g.accepts('{ "s" : "' + BODY[:100] + '" }')
    assert not g.accepts('{"s": "' + BODY[:100] + '\n"}')


def test_minlength_and_both_bounds() -> None:
    g = Grammar.from_json_schema({"type": "string", "minLength": 40000, "maxLength": 40002})
    for n, ok in ((39999, False), (40000, True), (40002, True), (40003, False)):
        assert g.accepts('"' + "a" * (n - 3) + "😀é\\u20ac" + '"') == ok, n
    g = Grammar.from_json_schema({"type": "string", "minLength": MAX_STRING_LENGTH})
    assert g.accepts('"' + "b" * MAX_STRING_LENGTH + "bb" + '"')
    assert not g.accepts('"' + "b" * (MAX_STRING_LENGTH - 1) + '"')


def test_direct_dfa_is_the_regex_road_and_has_its_own_state_allowance() -> None:
    # written down directly, the same minimal DFA as the subset construction builds
    small = compile_regex(json_string(3, 40))
    assert small.table.shape == json_string_dfa(3, 40).table.shape
    big = compile_regex(json_string(0, MAX_STRING_LENGTH))
    assert DEFAULT_LIMIT < big.table.shape[0] <= MAX_STRING_STATES
    # the allowance is for strings alone: a pattern with the length is a product
    with pytest.raises(UnsupportedSchema, match="maxLength"):
        Grammar.from_json_schema({"type": "string", "maxLength": 30000, "pattern": "^[a-zé]*$"})


DEFAULT_LIMIT = 200_000


@pytest.mark.parametrize("keyword", ["maxLength", "minLength"])
def test_bounds_past_two_to_the_sixteen_name_the_keyword_and_pointer(keyword: str) -> None:
    with pytest.raises(UnsupportedSchema, match=keyword) as e:
        Grammar.from_json_schema({"properties": {"s": {"type": "string", keyword: MAX_STRING_LENGTH + 1}}})
    assert e.value.keyword == keyword and e.value.pointer.startswith("/properties/s")
