"""toolkit.grammar: the IR, from_lark / from_regex / to_lark, and accepts (the reference)."""

from __future__ import annotations

import json
import random

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.fixtures import ARITH_LARK, JSON_LARK
from toolkit.core.errors import GrammarError, Unsatisfiable
from toolkit.grammar.ir import Grammar, Terminal


@pytest.fixture(scope="module")
def json_grammar() -> Grammar:
    return Grammar.from_lark(JSON_LARK)


def test_from_lark_builds_the_ir(json_grammar: Grammar) -> None:
    g = json_grammar
    assert g.start == "start"
    assert g.ignore == ("WS",)
    assert g.terminals["LBRACE"].literal and g.terminals["LBRACE"].value == "{"
    assert not g.terminals["STRING"].literal
    assert ("value",) in g.rules["start"]
    # EBNF is expanded: the [pair ("," pair)*] optional gives several alternatives.
    assert len(g.rules["object"]) >= 2


@pytest.mark.parametrize(
    "text, ok",
    [
        ("{}", True),
        ('{"a": [1, -2.5e3, "x\\n", true, null], "b": {}}', True),
        ('  {"a" : 1 }\n', True),  # %ignore before, between and after terminals
        ('"\\u00e9t\\u00E9"', True),
        ("[]", True),
        ("", False),
        ("{", False),
        ('{"a":}', False),
        ("[1 2]", False),
        ("[01]", False),
        ('"\x01"', False),
        ("truefalse", False),
        ("nul", False),
    ],
)
def test_json_grammar_accepts(json_grammar: Grammar, text: str, ok: bool) -> None:
    assert json_grammar.accepts(text) is ok


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.randint(-10**6, 10**6)
    if kind == 1:
        return rng.choice([0.5, -1e-7, 3.25e10, 2.0])
    if kind == 2:
        return "".join(rng.choice('ab "\\é日\n\t😀') for _ in range(rng.randrange(6)))
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        return {f"k{i}": _random_json(rng, depth + 1) for i in range(rng.randrange(4))}
    return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_json_grammar_on_json_dumps(json_grammar: Grammar) -> None:
    rng = random.Random("test_json_grammar_on_json_dumps")
    for _ in range(60):
        value = _random_json(rng)
        for text in (json.dumps(value), json.dumps(value, indent=2), json.dumps(value, ensure_ascii=False)):
            assert json_grammar.accepts(text), text
            # Truncations are never sentences unless they are one by themselves.
            cut = text[: rng.randrange(len(text))] if len(text) > 1 else ""
            if cut.strip():
                try:
                    json.loads(cut)
                    valid = True
                except ValueError:
                    valid = False
                assert json_grammar.accepts(cut) == valid, cut


# Differential test against lark's own scannerless Earley (dynamic_complete lexer).
LARK_GRAMMARS = {
    "arith": ARITH_LARK,
    "ambiguous_terms": 'start: A B | C\nA: /a+/\nB: /a*b/\nC: "aab"\n',
    "nullable": 'start: x y x\nx: "a" | \ny: "b"*\n',
    "right_rec": 'start: "a" start | "b"\n',
    "list_words": 'start: WORD ("," WORD)*\nWORD: /[a-z]+/\n%ignore " "\n',
}


@pytest.mark.parametrize("name", sorted(LARK_GRAMMARS))
def test_accepts_agrees_with_lark_earley(name: str) -> None:
    text = LARK_GRAMMARS[name]
    ours = Grammar.from_lark(text)
    theirs = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    alphabet = sorted(set("ab(),+-*/0123 9x") | {" "})
    rng = random.Random(f"test_accepts_agrees_with_lark_earley[{name}]")
    checked = 0
    for _ in range(400):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(7)))
        try:
            theirs.parse(s)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert ours.accepts(s) == expected, (name, s)
        checked += expected
    # Sentences the grammar derives, so the comparison is not only on rejects.
    for s in {"arith": ["1+2*3", "(1 - 2)/3", "--4"], "ambiguous_terms": ["ab", "aab", "aaab"],
              "nullable": ["", "a", "ab", "abba", "bb"], "right_rec": ["b", "aab"],
              "list_words": ["a", "ab , c", " x,y "]}[name]:
        assert ours.accepts(s), (name, s)
        theirs.parse(s)


def test_scannerless_semantics_of_terminals() -> None:
    # No lexer: "listen"+"ed" parses although a greedy lexer would take "listen" only.
    g = Grammar.from_lark('start: STEM "ed"\nSTEM: "list" | "listen"\n')
    assert g.accepts("listed") and g.accepts("listened")
    g2 = Grammar.from_lark("start: NAME NAME\nNAME: /[a-z]+/\n")
    assert g2.accepts("ab") and not g2.accepts("a")


def test_unproductive_rules_do_not_make_prefixes_viable() -> None:
    from toolkit.grammar.earley import ByteRecognizer, compile_cfg

    g = Grammar.from_lark('start: "a" loop | "b"\nloop: "x" loop\n')
    rec = ByteRecognizer(compile_cfg(g))
    assert not rec.push_byte(ord("a"))  # "a" can never be completed
    assert rec.push_byte(ord("b")) and rec.is_accepting()
    assert not g.accepts("b ")


def test_cfg_nullable_and_productive_symbols() -> None:
    from toolkit.grammar.earley import compile_cfg

    # n is nullable only through m, p through the chain p -> q -> r -> (empty); dead
    # needs itself, so it and the alternative using it go
    g = Grammar.from_lark('start: n p "z" | dead\nn: m m\nm: "a" |\np: q\nq: r\nr: "e" |\ndead: "d" dead\n')
    cfg = compile_cfg(g)
    null = {str(cfg.names[i]) for i, v in enumerate(cfg.nullable) if v}
    assert {"n", "m", "p", "q", "r"} <= null and "start" not in null
    assert "dead" not in cfg.names  # unproductive: dropped with the alternative using it
    assert [len(rhs) for lhs, rhs in cfg.prods if cfg.names[lhs] == "start"] == [3]


def test_from_regex() -> None:
    g = Grammar.from_regex(r"\d+(\.\d+)?")
    assert g.accepts("12.5") and g.accepts("7") and not g.accepts("12.") and not g.accepts("")
    assert g.to_lark() == "start: PATTERN\nPATTERN: /[0-9]+(?:\\.[0-9]+)?/\n"


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(GrammarError) as e:
        Grammar.from_lark('start: "a" b\n\nb: ("x"\n')
    assert e.value.line == 3
    assert "line 3" in str(e.value)


def test_unknown_rule_is_an_error_with_its_place() -> None:
    with pytest.raises(GrammarError) as e:
        Grammar.from_lark('start: "a" item\nitem: "b" | other\n')
    assert e.value.line == 2 and e.value.column == 13
    assert "other" in str(e.value)


def test_unknown_terminal_and_missing_start() -> None:
    with pytest.raises(GrammarError) as e:
        Grammar.from_lark('start: "a" B\n')
    assert e.value.line == 1 and "B" in str(e.value)
    with pytest.raises(GrammarError):
        Grammar.from_lark('begin: "a"\n')


def test_unsupported_terminal_regex_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError) as e:
        Grammar.from_lark('start: "x" /a(?=b)/\n')
    assert e.value.line == 1 and "lookahead" in str(e.value)


def test_ir_validation() -> None:
    with pytest.raises(GrammarError):
        Grammar(start="s", rules={"s": (("T",),)}, terminals={})
    with pytest.raises(GrammarError):
        Grammar(start="s", rules={"s": (("T",),)}, terminals={"T": Terminal("T", "(a")})
    g = Grammar(start="s", rules={"s": (("T", "s"), ())}, terminals={"T": Terminal.from_literal("T", "a.")})
    assert g.accepts("") and g.accepts("a.a.") and not g.accepts("ab")


@pytest.mark.parametrize("value", ["", "a.", "ключ", "x\\\"y", "😀/\n"])
def test_literal_and_json_string_terminals_get_their_regex_dfa(value: str) -> None:
    """The DFAs written down from ``value`` are the regex's, array for array; a
    terminal whose regex says something else is compiled from the regex."""
    import numpy as np

    from toolkit.automata.regex import compile_regex

    def same(a, b) -> bool:
        return a.start == b.start and np.array_equal(a.transitions, b.transitions) and np.array_equal(
            a.accepting, b.accepting)

    for t in (Terminal.from_literal("T", value), Terminal.from_json_string("T", value)):
        assert t._direct() and same(t.dfa(), compile_regex(t.regex)), (t, value)
    for t in (Terminal("T", "b+", literal=True, value=value), Terminal("T", "b+", value=value, json_string=True),
              Terminal.from_literal("T", value + "\udc00")):
        assert not t._direct() and same(t.dfa(), compile_regex(t.regex)), t


def test_oversized_literal_and_key_terminals_are_limit_errors() -> None:
    """A literal or key whose DFA would pass the state limit is a LimitExceeded, as on
    the regex road, not a table of hundreds of megabytes."""
    from toolkit.core.errors import LimitExceeded

    for t in (Terminal.from_literal("T", "x" * 300_000), Terminal.from_json_string("T", "é" * 40_000)):
        with pytest.raises(LimitExceeded):
            t.dfa()


def test_to_lark_roundtrips_through_from_lark(json_grammar: Grammar) -> None:
    again = Grammar.from_lark(json_grammar.to_lark())
    rng = random.Random("test_to_lark_roundtrips_through_from_lark")
    for _ in range(30):
        text = json.dumps(_random_json(rng))
        assert again.accepts(text)
        bad = text[:-1] + "}" if len(text) > 1 else "x"
        assert again.accepts(bad) == json_grammar.accepts(bad)


def test_to_lark_is_accepted_by_llguidance(json_grammar: Grammar) -> None:
    llguidance = pytest.importorskip("llguidance", reason="llguidance ([peers] extra) not installed")
    for g in (json_grammar, Grammar.from_lark(ARITH_LARK), Grammar.from_regex(r"[a-z]+@\w+\.(com|org)")):
        grammar = llguidance.grammar_from("lark", g.to_lark())
        assert llguidance.LLMatcher.validate_grammar(grammar) == ""
        is_error, warnings = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
        assert not is_error and not warnings, warnings
    # And a grammar llguidance must reject, so the check above can fail.
    assert llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", "start: undefined_rule\n")) != ""


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([r"[0-9]+", r"(ab|a)*b?", r"[^ ]+ [a-z]*", r"(é|日)+x?", r"\d{1,3}(,\d{3})*"]),
    st.lists(st.sampled_from(["1", "a", "b", " ", "é", "日", "x", ","]), max_size=8).map("".join),
)
def test_earley_on_a_regex_grammar_agrees_with_its_dfa(pattern: str, s: str) -> None:
    from toolkit.automata.regex import compile_regex

    assert Grammar.from_regex(pattern).accepts(s) == compile_regex(pattern).fullmatch(s.encode())


def test_an_empty_language_is_refused_at_construction() -> None:
    with pytest.raises(Unsatisfiable):
        Grammar.from_json_schema({"type": "string", "not": {"type": "string"}})
    assert not Grammar.from_regex("a").is_empty()
