"""Grammar.to_regex and json_schema_to_regex: one regex for a grammar's language.

Judged against :meth:`Grammar.accepts` (the reference recognizer) on sentences drawn
from random derivations, on their mutations and on random strings: the regex must
accept exactly what the grammar accepts, or, where recursion is unrolled to
``max_depth``, a subset that is exact up to the documented depth.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterable

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.fixtures import ARITH_LARK, JSON_LARK
from toolkit.automata.regex import ByteDFA, compile_regex
from toolkit.core.errors import LimitExceeded, Unsatisfiable, UnsupportedGrammar
from toolkit.grammar.ir import Grammar, Terminal
from toolkit.jsonschema.compiler import json_schema_to_regex

# ------------------------------------------------------------- sampling --


def _distance_to_accept(dfa: ByteDFA) -> np.ndarray:
    """Bytes still needed from each state to reach an accepting state."""
    n = dfa.n_states
    dist = np.where(dfa.accepting, 0, n + 1)
    dist[0] = n + 1
    for _ in range(n):
        step = dist[dfa.transitions].min(axis=1) + 1
        new = np.minimum(dist, step)
        new[0] = n + 1
        if (new == dist).all():
            break
        dist = new
    return dist


_DIST: dict[ByteDFA, np.ndarray] = {}  # keyed by the DFA itself, which it keeps alive


def _sample_dfa(dfa: ByteDFA, rng: random.Random, soft_max: int = 6) -> bytes:
    """A random string of the DFA's language (ASCII preferred, stops soon after soft_max)."""
    if dfa not in _DIST:
        _DIST[dfa] = _distance_to_accept(dfa)
    dist = _DIST[dfa]
    s, out = dfa.start, bytearray()
    while True:
        live = np.nonzero(dfa.transitions[s])[0]
        if dfa.accepting[s] and (len(out) >= soft_max or not len(live) or rng.random() < 0.3):
            return bytes(out)
        if len(out) >= soft_max:  # head for the nearest accepting state
            live = [b for b in live if dist[dfa.transitions[s, b]] < dist[s]]
        ascii_ = [int(b) for b in live if 0x20 <= b < 0x7F]
        b = rng.choice(ascii_) if ascii_ and rng.random() < 0.85 else int(rng.choice(list(live)))
        out.append(b)
        s = int(dfa.transitions[s, b])


def _heights(g: Grammar) -> dict[str, int]:
    """Height of the lowest derivation tree of each productive symbol."""
    h = {n: 0 for n, t in g.terminals.items() if not t.dfa().is_empty()}
    changed = True
    while changed:
        changed = False
        for lhs, alts in g.rules.items():
            for alt in alts:
                if all(s in h for s in alt):
                    v = 1 + max((h[s] for s in alt), default=0)
                    if v < h.get(lhs, 1 << 30):
                        h[lhs] = v
                        changed = True
    return h


def _derive(g: Grammar, rng: random.Random, budget: int = 12, ignore_p: float = 0.3) -> bytes:
    """A random sentence: random alternatives, the lowest ones once ``budget`` is spent."""
    h = _heights(g)
    ign = [g.terminals[n].dfa() for n in g.ignore if n in h]
    out = bytearray()

    def ignored() -> None:
        while ign and rng.random() < ignore_p:
            out.extend(_sample_dfa(rng.choice(ign), rng, 2))

    def walk(sym: str, depth: int) -> None:
        if sym in g.terminals:
            ignored()
            out.extend(_sample_dfa(g.terminals[sym].dfa(), rng))
            return
        alts = [a for a in g.rules[sym] if all(s in h for s in a)]
        if depth >= budget:
            low = min(1 + max((h[s] for s in a), default=0) for a in alts)
            alts = [a for a in alts if 1 + max((h[s] for s in a), default=0) == low]
        for s in rng.choice(alts):
            walk(s, depth + 1)

    walk(g.start, 0)
    ignored()
    return bytes(out)


def _mutate(data: bytes, rng: random.Random, alphabet: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 2)):
        op = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            del b[min(i, len(b) - 1)]
        elif op == 1:
            b.insert(i, rng.choice(alphabet))
        elif op == 2 and b:
            b[min(i, len(b) - 1)] = rng.choice(alphabet)
        else:
            j = rng.randrange(len(b) + 1)
            b = b[:min(i, j)] + b[max(i, j):] + b[min(i, j):max(i, j)]  # move a chunk
    return bytes(b)


def _corpus(g: Grammar, seed: str, n: int = 120, budget: int = 12) -> list[bytes]:
    """Positives from derivations, their mutations, and random strings over their bytes."""
    rng = random.Random(seed)
    pos = [_derive(g, rng, budget) for _ in range(n)]
    alphabet = bytes(sorted(set(b"".join(pos)) | set(b" \t\n")))
    neg = [_mutate(rng.choice(pos), rng, alphabet) for _ in range(n)]
    neg += [bytes(rng.choice(alphabet) for _ in range(rng.randrange(8))) for _ in range(n // 2)]
    neg += [rng.choice(pos) + rng.choice(pos) for _ in range(n // 4)]
    return list(dict.fromkeys(pos + neg))


def _assert_same(g: Grammar, regex: str, texts: Iterable[bytes]) -> tuple[int, int]:
    dfa = compile_regex(regex)
    yes = no = 0
    for t in texts:
        ok = g.accepts(t)
        assert dfa.fullmatch(t) == ok, (t, ok)
        yes, no = yes + ok, no + (not ok)
    return yes, no


# ----------------------------------------------------------- from_regex --


@pytest.mark.parametrize(
    "pattern",
    [r"[0-9]+", r"^(?:a|b)*c$", r"(?i)hello", r"\d{3}-\d{4}", "", "é+|日本"],
)
def test_from_regex_round_trip(pattern: str) -> None:
    g = Grammar.from_regex(pattern)
    assert g.to_regex() == pattern
    assert g.to_regex(max_depth=2) == pattern


# ------------------------------------------------------ non-recursive --

SMALL_LARK = r"""
start: greeting ","? name ("and" name)* "!"~1..3 punct?
greeting: "hi" | "hello" | HEY
HEY: /he+y/i
name: WORD | WORD "-" WORD | NUMBER
punct: "." | "?" |
WORD: /[a-z]+/
NUMBER: /0|[1-9][0-9]*/
"""


def test_small_lark_grammar_is_exact() -> None:
    g = Grammar.from_lark(SMALL_LARK)
    rx = g.to_regex()
    assert rx == g.to_regex(max_depth=0)  # nothing recursive: the depth changes nothing
    yes, no = _assert_same(g, rx, _corpus(g, "small_lark"))
    assert yes >= 80 and no >= 80
    for s in [b"hiann!", b"hi,bob-x and 12!!.", b"HEEEYx!!!", b"hi!", b"hix!!!!", b"hi,,x!"]:
        assert compile_regex(rx).fullmatch(s) == g.accepts(s), s


def test_list_rules_are_repetitions_not_recursion() -> None:
    # Lark's x* / x+ and hand-written left or right lists need no max_depth.
    text = 'start: item ("," item)* ";" tail dots\nitem: /[0-9]+/\ntail: "x" tail | "y"\ndots: dots "." | "."\n'
    g = Grammar.from_lark(text)
    rx = g.to_regex()
    d = compile_regex(rx)
    assert d.fullmatch(b"1,22,333;xxxy...") and d.fullmatch(b"7;y.")
    assert not d.fullmatch(b"1,;y.") and not d.fullmatch(b"1;x.") and not d.fullmatch(b"1;y")
    _assert_same(g, rx, _corpus(g, "lists", 80))


def test_terminals_with_anchors_and_global_flags_embed() -> None:
    g = Grammar(
        start="start",
        rules={"start": (("A", "B", "C"),)},
        terminals={"A": Terminal("A", "^ab$"), "B": Terminal("B", "(?i)cd"), "C": Terminal("C", r"x\$")},
    )
    d = compile_regex(g.to_regex())
    assert d.fullmatch(b"abCdx$") and d.fullmatch(b"abcDx$")
    assert not d.fullmatch(b"ABcdx$") and not d.fullmatch(b"abcdx")


def test_unproductive_parts_are_dropped() -> None:
    g = Grammar(
        start="start",
        rules={
            "start": (("A",), ("loop",), ("dead", "A"), ("B", "opt")),
            "loop": (("A", "loop"),),  # recursive but derives nothing
            "dead": (("NONE",),),
            "opt": ((), ("A",)),
        },
        terminals={"A": Terminal.from_literal("A", "a"), "B": Terminal.from_literal("B", "b"),
                   "NONE": Terminal("NONE", r"[^\d\D]")},
    )
    rx = g.to_regex()  # no UnsupportedGrammar: the only cycle is unproductive
    _assert_same(g, rx, [b"", b"a", b"b", b"ba", b"aa", b"bb", b"ab"])
    with pytest.raises(Unsatisfiable):  # an empty language is no Grammar
        Grammar(start="start", rules={"start": (("NONE", "A"),)},
                terminals={"A": Terminal.from_literal("A", "a"), "NONE": Terminal("NONE", r"[^\d\D]")})
    with pytest.raises(Unsatisfiable):
        Grammar.from_regex(r"[^\d\D]")


@pytest.mark.parametrize(
    "pattern",
    ["abc", "a|b", "(?:ab)*c", r"[^\"\\]*", "é+|日本", ".{0,3}", r"[\x00-\x7f]+x", "[a-z]{2,5}",
     r'"(?:[^"\\]|\\.)*"', "", "(a|b)*abb", "[^a]", "😀+|[α-ω]{2}", r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?"],
)
def test_dfa_to_regex_round_trip(pattern: str) -> None:
    from toolkit.automata.dfaops import dfa_regex

    d = compile_regex(pattern)
    d2 = compile_regex(dfa_regex(d, 100_000))
    # Minimal DFAs are numbered canonically: equal languages, equal arrays.
    assert np.array_equal(d.transitions, d2.transitions) and np.array_equal(d.accepting, d2.accepting)


def test_boolean_terminals_are_written_from_their_dfa() -> None:
    key = Terminal("KEY", r'"[^"\\\x00-\x1f]*"', excluding=('"(?:type|value|ty)"',))
    short = Terminal("SHORT", "[ab]*", also=("[a-z]{0,3}",))
    g = Grammar(start="start", rules={"start": (("KEY", "COLON", "SHORT"),)},
                terminals={"KEY": key, "SHORT": short, "COLON": Terminal.from_literal("COLON", ":")})
    rx = g.to_regex()
    d = compile_regex(rx)
    for s in ['"type":', '"typ":ab', '"types":aba', '"":b', '"ty":a', '"t":abab', '"é":', '"value":a', '"valu":']:
        assert d.fullmatch(s.encode()) == g.accepts(s), s
    _assert_same(g, rx, _corpus(g, "boolean", 80))
    alone = Grammar(start="start", rules={"start": (("SHORT",),)}, terminals={"SHORT": short})
    assert compile_regex(alone.to_regex()).fullmatch(b"aba") and not compile_regex(alone.to_regex()).fullmatch(b"abab")


def test_max_length_is_enforced() -> None:
    g = Grammar.from_lark(SMALL_LARK)
    with pytest.raises(LimitExceeded) as e:
        g.to_regex(max_length=50)
    assert e.value.limit == "max_length"
    with pytest.raises(LimitExceeded):
        Grammar.from_regex("a" * 100).to_regex(max_length=99)


# ------------------------------------------------------------- ignore --

IGNORE_LARK = r"""
start: "x" opt "y" opt2 empty opt
opt: | "z"
opt2: "w"?
empty:
%ignore " "
%ignore /\t+/
"""


@pytest.mark.parametrize(
    "text",
    ["xy", " xy", "xy ", " x y ", "x  z y", "x\t \tzyw", "x y w z", "xz y z ", "x y  ", "  ",
     "", "x", "xzzy", "x y ww", "x\ny", "xy\t\t", " \t x \t y \t w \t z \t "],
)
def test_ignore_before_between_after_and_around_empty_rules(text: str) -> None:
    g = Grammar.from_lark(IGNORE_LARK)
    rx = g.to_regex()
    assert compile_regex(rx).fullmatch(text.encode()) == g.accepts(text)


def test_ignore_exact_on_random_sentences() -> None:
    g = Grammar.from_lark(IGNORE_LARK)
    rx = g.to_regex()
    ws = rx[: rx.index("x")]  # (?:IGN)*, before the first terminal
    assert ws.startswith("(?:") and ws.endswith(")*") and rx.endswith(ws)
    assert rx.count(ws) == 6 and ws + ws not in rx  # once before each terminal, once at the end
    yes, no = _assert_same(g, rx, _corpus(g, "ignore"))
    assert yes >= 60 and no >= 60


def test_ignore_around_an_empty_language_of_terminals() -> None:
    g = Grammar.from_lark('start: | "a"\n%ignore " "\n')  # the empty sentence too
    d = compile_regex(g.to_regex())
    for s in [b"", b"   ", b" a ", b"a", b"aa", b"a a"]:
        assert d.fullmatch(s) == g.accepts(s), s


# ---------------------------------------------------------- recursion --

BRACKETS = 'start: s\ns: "[" s* "]"\n%ignore " "\n'


def _nesting(s: str) -> int:
    depth = best = 0
    for c in s:
        depth += {"[": 1, "]": -1}.get(c, 0)
        best = max(best, depth)
    return best


def test_recursive_grammar_needs_max_depth() -> None:
    g = Grammar.from_lark(BRACKETS)
    with pytest.raises(UnsupportedGrammar, match="recursive") as e:
        g.to_regex()
    assert "'s'" in str(e.value)
    mutual = Grammar.from_lark('start: a\na: "(" b ")" | "x"\nb: a | "[" a "]"\n')
    with pytest.raises(UnsupportedGrammar, match="'a'"):
        mutual.to_regex()


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_brackets_exact_up_to_the_documented_depth(depth: int) -> None:
    # max_depth=d: s nested at most d times inside itself, i.e. d + 1 bracket levels.
    g = Grammar.from_lark(BRACKETS)
    d = compile_regex(g.to_regex(max_depth=depth))
    for n in range(1, depth + 4):
        s = "[" * n + "]" * n
        assert d.fullmatch(s.encode()) == (n <= depth + 1), s
    rng = random.Random(f"brackets{depth}")
    texts = [_derive(g, rng, budget=3 * depth + 4) for _ in range(150)]
    texts += [_mutate(t, rng, b"[] ") for t in texts]
    for t in texts:
        s = t.decode()
        assert d.fullmatch(t) == (g.accepts(t) and _nesting(s) <= depth + 1), s


@functools.cache
def _brackets() -> tuple[Grammar, ByteDFA]:
    g = Grammar.from_lark(BRACKETS)
    return g, compile_regex(g.to_regex(max_depth=3))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="[] ", max_size=14))
def test_brackets_regex_is_a_subset(s: str) -> None:
    g, d = _brackets()
    if d.fullmatch(s.encode()):
        assert g.accepts(s)
    else:
        assert not g.accepts(s) or _nesting(s) > 4


def test_center_recursion_and_mutual_recursion_unroll() -> None:
    g = Grammar.from_lark('start: a\na: "(" b ")" | "x"\nb: a | "[" a "]" | a "," a\n')
    for depth in (0, 2):
        rx = g.to_regex(max_depth=depth)
        d = compile_regex(rx)
        rng = random.Random(f"mutual{depth}")
        for _ in range(200):
            t = _derive(g, rng, budget=2 * depth + 3)
            s = t.decode()
            # Each a below the root is inside one more "(", so its nesting is the parentheses'.
            parens = max(
                (s[:i].count("(") - s[:i].count(")") for i in range(len(s) + 1)), default=0
            )
            assert d.fullmatch(t) == (parens <= depth), s
            m = _mutate(t, rng, b"()[],x")
            assert not d.fullmatch(m) or g.accepts(m), m


def test_arithmetic_left_recursion_is_a_loop_and_parentheses_nest() -> None:
    # expr/term are left-linear lists (loops); factor -> "(" expr ")" is the nesting.
    g = Grammar.from_lark(ARITH_LARK)
    for depth in (0, 2):
        d = compile_regex(g.to_regex(max_depth=depth))
        rng = random.Random(f"arith{depth}")
        texts = [_derive(g, rng, budget=8) for _ in range(120)]
        texts += [_mutate(t, rng, b"()+-*/1 ") for t in texts]
        for t in texts:
            s = t.decode()
            assert d.fullmatch(t) == (g.accepts(t) and _nesting(s.replace("(", "[").replace(")", "]")) <= depth), s


def _random_json(rng: random.Random, height: int):
    if height == 1:
        return rng.choice([0, -12, 3.5, "", "a\"é", True, False, None, [], {}])
    if rng.random() < 0.5:
        return [_random_json(rng, rng.randint(1, height - 1)) for _ in range(rng.randint(1, 3))]
    return {f"k{i}": _random_json(rng, rng.randint(1, height - 1)) for i in range(rng.randint(1, 3))}


def test_lark_json_unrolled_by_value_height() -> None:
    # value nested at most d times in a value: JSON values of height <= d + 1.
    g = Grammar.from_lark(JSON_LARK)
    d = compile_regex(g.to_regex(max_depth=2))
    rng = random.Random("lark_json")
    for _ in range(60):
        v = _random_json(rng, rng.randint(1, 5))
        for text in (json.dumps(v), json.dumps(v, indent=2)):
            assert g.accepts(text)
            assert d.fullmatch(text.encode()) == (_height(v) <= 3), text


def test_limits_stop_exponential_unrolling() -> None:
    with pytest.raises(LimitExceeded) as e:
        json_schema_to_regex({}, max_depth=40)  # ~4 ** 40 characters: stops early
    assert e.value.limit == "max_length"
    g = Grammar.from_lark(BRACKETS)
    with pytest.raises(ValueError):
        g.to_regex(max_depth=-1)
    with pytest.raises(LimitExceeded):
        g.to_regex(max_depth=10_000, max_length=10_000)


# -------------------------------------------------------- JSON schemas --

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def _tree(levels: int, width: int = 2) -> dict:
    if levels == 1:
        return {"v": 1}
    return {"v": levels, "kids": [_tree(levels - 1, width) for _ in range(width)]}


def _height(v) -> int:
    """JSON values nested in one another: 1 for a scalar or an empty container."""
    children = list(v.values()) if isinstance(v, dict) else v if isinstance(v, list) else []
    return 1 + max((_height(x) for x in children), default=0)


def _levels(tree: dict) -> int:
    return 1 + max((_levels(k) for k in tree.get("kids", [])), default=0)


# name: (schema, max_depth, instances valid and invalid (in schema property order),
#        None when the schema is not recursive, else which instances are within the depth)
SCHEMAS: dict[str, tuple[dict, int, list, Callable | None]] = {
    "object_required_optional": (
        {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                                          "score": {"type": "number"}},
         "required": ["id"], "additionalProperties": False},
        5,
        [{"id": 1}, {"id": -7, "name": "ann"}, {"id": 0, "score": 1.5}, {"id": 3, "name": "é\n\"", "score": -2e-3},
         {}, {"name": "x"}, {"id": "1"}, {"id": 1.5}, {"id": 1, "extra": True}, [], None],
        None,
    ),
    "enum": (
        {"enum": ["red", "green", 3, None, True, [1, "a"]]},
        5,
        ["red", "green", 3, None, True, [1, "a"], "blue", 4, False, [1], "Red"],
        None,
    ),
    "array_min_max_items": (
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        5,
        [[1], [1, 2], [1, 2, 3], [], [1, 2, 3, 4], ["1"], [1.5], {}],
        None,
    ),
    "integer_range": (
        {"type": "integer", "minimum": -5, "maximum": 120},
        5,
        [-5, 0, 7, 99, 120, -6, 121, 1000, 1.5, "7"],
        None,
    ),
    "nested_objects": (
        {"type": "object",
         "properties": {
             "user": {"type": "object",
                      "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0}},
                      "required": ["name"], "additionalProperties": False},
             "tags": {"type": "array", "items": {"type": "string"}},
         },
         "required": ["user"], "additionalProperties": False},
        5,
        [{"user": {"name": "bo"}}, {"user": {"name": "alice", "age": 30}, "tags": ["a", "b"]},
         {"user": {"name": "bo"}, "tags": []}, {"user": {"name": "toolong"}}, {"user": {"age": 3}},
         {"user": {"name": "x", "age": -1}}, {"tags": []}, {"user": {"name": "x"}, "tags": [1]}],
        None,
    ),
    "any_of": (
        {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}, {"type": "null"},
                   {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]},
        5,
        [1, -20, "abc", "", None, [True, False], [], "abcd", 1.5, [1], [True, True, True], {}],
        None,
    ),
    "recursive_tree": (
        TREE,
        3,
        [_tree(1), _tree(2), _tree(3), _tree(4, 1), _tree(5, 1), _tree(5, 2), {"v": 1, "kids": []},
         {"kids": []}, {"v": 1, "kids": [{}]}, {"v": "1"}],
        lambda v: _levels(v) <= 4,  # a node nested at most 3 times in a node
    ),
    "const_and_booleans": (
        {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "number"},
                                          "ok": {"type": "boolean"}},
         "required": ["kind", "x"], "additionalProperties": False},
        5,
        [{"kind": "point", "x": 1}, {"kind": "point", "x": -0.5, "ok": False}, {"kind": "line", "x": 1},
         {"kind": "point"}, {"kind": "point", "x": 1, "ok": 1}],
        None,
    ),
    "additional_properties_free_form": (
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        1,
        [{"id": 1}, {"id": 1, "z": None}, {"id": 1, "z": [1, "a"], "y": {"k": {}}}, {"id": 2, "deep": [[1]]},
         {"z": 1}, {"id": "1"}],
        # a free-form value holds values nested at most once in a value
        lambda v: all(_height(x) <= 2 for x in v.values()),
    ),
    "unbounded_array_of_objects": (
        {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+[0-9]{2}$"}},
                                    "required": ["a"], "additionalProperties": False}},
        5,
        [[], [{"a": "ab12"}], [{"a": "x00"}] * 7, [{"a": "12"}], [{"a": "ab123"}], [{}], [{"a": "ab12"}, 1]],
        None,
    ),
}


def _texts(value) -> list[str]:
    return [json.dumps(value), json.dumps(value, indent=2), json.dumps(value, separators=(",", ":")),
            json.dumps(value, ensure_ascii=False)]


@pytest.mark.parametrize("whitespace", ["flexible", "compact"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_to_regex_agrees_with_the_grammar(name: str, whitespace: str) -> None:
    schema, depth, instances, within = SCHEMAS[name]
    g = Grammar.from_json_schema(schema, whitespace=whitespace)
    rx = json_schema_to_regex(schema, max_depth=depth, whitespace=whitespace)
    d = compile_regex(rx)
    validator = jsonschema.validators.validator_for(schema)(schema)
    n_valid = n_deep = 0
    for value in instances:
        valid = validator.is_valid(value)
        n_valid += valid
        for text in _texts(value):
            ok = g.accepts(text)
            assert not ok or valid, text  # the grammar is never looser than the schema
            if valid and (whitespace == "flexible" or text == json.dumps(value, separators=(",", ":"))):
                assert ok, text  # instances are in schema order, so the grammar takes them
            if within is None or not ok or within(value):
                assert d.fullmatch(text.encode()) == ok, text
            else:  # nested deeper than max_depth: rejected, the regex is a subset
                n_deep += 1
                assert not d.fullmatch(text.encode()), text
    assert 0 < n_valid < len(instances)
    assert (n_deep > 0) == (within is not None)
    # Random sentences of the grammar, their mutations and random strings.
    corpus = _corpus(g, f"corpus:{name}:{whitespace}", 40, budget=10)
    if within is None:
        _assert_same(g, rx, corpus)
    else:
        assert all(g.accepts(t) for t in corpus if d.fullmatch(t))
    # Mutations of the valid instances' texts.
    rng = random.Random(f"schema:{name}:{whitespace}")
    alphabet = b'{}[],:" 0123456789abcnulltrue-.\n'
    for value in instances:
        if not validator.is_valid(value):
            continue
        for text in _texts(value)[:3]:
            for _ in range(4):
                m = _mutate(text.encode(), rng, alphabet)
                if within is None:
                    assert d.fullmatch(m) == g.accepts(m), m
                else:
                    assert not d.fullmatch(m) or g.accepts(m), m


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_recursive_schema_depth_is_tree_levels(depth: int) -> None:
    # max_depth=d on a $ref tree: a node nested at most d times inside a node.
    for ws in ("flexible", "compact"):
        d = compile_regex(json_schema_to_regex(TREE, max_depth=depth, whitespace=ws))
        for levels in range(1, depth + 4):
            for width in (1, 2):
                text = json.dumps(_tree(levels, width), indent=2 if ws == "flexible" else None,
                                  separators=None if ws == "flexible" else (",", ":"))
                assert d.fullmatch(text.encode()) == (levels <= depth + 1), (levels, text)


def test_free_form_values_are_unrolled_by_container_nesting() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    g = Grammar.from_json_schema(schema, whitespace="compact")
    d = compile_regex(json_schema_to_regex(schema, max_depth=1, whitespace="compact"))
    # The additional value may hold values nested once in a value (scalars and empty
    # containers are one level).
    for value, ok in [({"id": 1, "x": 1}, True), ({"id": 1, "x": [1]}, True), ({"id": 1, "x": [[]]}, True),
                      ({"id": 1, "x": [[1]]}, False), ({"id": 1, "x": {"a": {}}}, True),
                      ({"id": 1, "x": {"a": {"b": []}}}, False), ({"id": 1, "x": [1, {}, "s"]}, True)]:
        text = json.dumps(value, separators=(",", ":"))
        assert g.accepts(text)
        assert d.fullmatch(text.encode()) == ok, text


def test_json_schema_to_regex_is_the_grammar_regex() -> None:
    schema = SCHEMAS["nested_objects"][0]
    for ws in ("flexible", "compact"):
        assert json_schema_to_regex(schema, whitespace=ws) == Grammar.from_json_schema(
            schema, whitespace=ws).to_regex(max_depth=5)
    # No recursion in it: max_depth changes nothing and None is fine.
    assert json_schema_to_regex(schema, max_depth=0) == Grammar.from_json_schema(schema).to_regex()
    with pytest.raises(UnsupportedGrammar):
        Grammar.from_json_schema(TREE).to_regex()
