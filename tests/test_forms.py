"""Terminals carry what their writer knew as data (issue 45): the schema compiler's
bounded strings, listed keys and string values reach the DFA builder as
:data:`toolkit.automata.dfaops.Form`, never as regex text read back.  Each form's DFA
is the DFA of its text (minimal DFAs are canonical: equal languages, equal arrays)."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.automata import jsontext, regex
from toolkit.automata.dfa import ByteDFA
from toolkit.automata.dfaops import JsonKeysForm, JsonStringForm, WordsForm, compile_boolean
from toolkit.automata.nfa import compile_nfa
from toolkit.grammar import Grammar
from toolkit.jsonschema import from_json_schema


def _same(a: ByteDFA, b: ByteDFA) -> bool:
    return (a.start == b.start and np.array_equal(a.table, b.table) and np.array_equal(a.classes, b.classes)
            and np.array_equal(a.accepting, b.accepting))


def _by_nfa(text: str) -> ByteDFA:
    """The text's DFA by the general road (Thompson NFA, subsets, minimization)."""
    return compile_nfa(text, 400_000, False)


@pytest.mark.parametrize("spelling", jsontext.SPELLINGS)
@pytest.mark.parametrize(("lo", "hi"), [(0, None), (1, None), (3, None), (0, 0), (0, 1), (1, 1), (2, 5), (7, 7),
                                        (0, 40)])
def test_a_string_form_is_the_language_of_its_text(spelling, lo, hi) -> None:
    char = jsontext.JSON_CHAR if spelling == "json" else jsontext.LLGUIDANCE_CHAR
    with jsontext.spelling(spelling):
        text = jsontext.json_string(lo, hi)
    assert _same(JsonStringForm(lo, hi, char).dfa(), _by_nfa(text))


def test_word_and_value_forms_are_the_language_of_their_texts() -> None:
    words = sorted({b'"a"', b'"ab"', b'"b|c"', b'""', b'"\xc3\xa9t\xc3\xa9"'})
    text = '"(?:a|ab|b\\|c||été)"'
    assert _same(WordsForm(tuple(words)).dfa(), _by_nfa(text))
    values = ("a", "é\n", "\U0001f600", "x\\y", "\ud800")  # escapes, an astral character, a lone surrogate
    alternation = "|".join(f"(?:{jsontext.json_string_literal(v)})" for v in values)
    assert _same(JsonKeysForm(values).dfa(), _by_nfa(alternation))


def test_compile_boolean_builds_the_formed_parts_from_their_data(monkeypatch) -> None:
    """A formed part is built from the form even where its text says something else
    (so the text is never read for it), and the result is the language of the texts."""
    key = jsontext.json_string_literal("k")
    bounded = jsontext.json_string(0, 3)
    forms = ((bounded, JsonStringForm(0, 3)), (key, JsonKeysForm(("k",))))
    made = compile_boolean(jsontext.json_string(), (bounded,), (key,), forms=forms)
    plain = compile_boolean(jsontext.json_string(), (bounded,), (key,))
    assert _same(made, plain)
    assert made.fullmatch(b'"ab"') and not made.fullmatch(b'"k"') and not made.fullmatch(b'"abcd"')
    lying = ((bounded, JsonStringForm(0, 1)),)  # the data wins over the text
    assert not compile_boolean(jsontext.json_string(), (bounded,), forms=lying).fullmatch(b'"ab"')


def test_the_compilers_terminals_carry_their_data(monkeypatch) -> None:
    """With the regex compiler's recognition of those texts switched off, the schema's
    terminals still build: a 20,011-character bound (400,000 NFA states by the general
    road, over its limit), the listed keys an additional key must not be, the values a
    string must not be."""
    monkeypatch.setattr(regex, "json_string_bounds", lambda *a, **k: None)
    monkeypatch.setattr(regex, "literal_words", lambda *a, **k: None)
    g = from_json_schema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20011},
                                                         "tag": {"not": {"enum": ["x", "y"]}, "type": "string"}},
                          "additionalProperties": {"type": "integer"}})
    forms = {type(f) for t in g.terminals.values() for _, f in t.forms}
    assert forms == {JsonStringForm, WordsForm, JsonKeysForm}
    assert all(t.dfa() is not None for t in g.terminals.values())
    assert g.accepts(b'{"name": "' + b"a" * 20011 + b'", "tag": "z", "n": 3}')
    assert not g.accepts(b'{"name": "' + b"a" * 20012 + b'"}')
    assert not g.accepts(b'{"tag": "x"}') and not g.accepts(b'{"name": 3}') and not g.accepts(b'{"tag": 1}')


def test_forms_do_not_change_what_a_terminal_is() -> None:
    """Equal texts are equal terminals, forms or not; the Lark text says the same."""
    g = from_json_schema({"type": "string", "maxLength": 8})
    (term,) = [t for t in g.terminals.values() if t.forms]
    bare = type(term)(term.name, term.regex)
    assert term == bare and hash(term) == hash(bare) and _same(term.dfa(), bare.dfa())
    again = Grammar.from_lark(g.to_lark())
    assert again.accepts(b'"abcdefgh"') and not again.accepts(b'"abcdefghi"')


def test_on_maskbench_schemas_every_formed_terminal_is_its_texts_language() -> None:
    """On real schemas (a seeded sample of MaskBench), each terminal with forms has the
    DFA of the same terminal without them: the data and the text mean the same."""
    import json
    import random

    from tests._support.shared import SHARED
    from toolkit.core.errors import MasklabError

    folder = SHARED / "datasets" / "maskbench"
    if not folder.is_dir():
        pytest.skip(f"MaskBench is under MASKLAB_SHARED ({SHARED}), absent here")
    files = sorted(folder.glob("*.json"))
    random.Random(45).shuffle(files)
    checked = 0
    for path in files[:60]:
        try:
            g = from_json_schema(json.loads(path.read_text())["schema"])
        except (MasklabError, ValueError, KeyError):
            continue
        for t in g.terminals.values():
            if t.forms:
                bare = type(t)(t.name, t.regex, also=t.also, excluding=t.excluding)
                assert _same(t.dfa(), bare.dfa()), (path.name, t.name)
                checked += 1
    assert checked > 50
