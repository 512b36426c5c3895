"""GBNF (llama.cpp's grammar format): :mod:`toolkit.grammar.gbnf`.

* **Every construct read**: one small grammar each, checked with ``Grammar.accepts`` on
  strings in and out of its language; the terminal shapes (one-character terminals,
  literals kept whole only where the terminals stay prefix-free); token references.
* **Errors** with their exact line and column, limits as ``LimitExceeded``.
* **Round trips** ``read_gbnf(write_gbnf(g))``: the same language on strings sampled from
  both grammars and mutated, for grammars read from GBNF, Lark (``%ignore``, ``&``/``~``,
  lazy), regexes and JSON schemas; exactly the same minimal DFA where the grammar is regular.
  The written text is also read by xgrammar's EBNF parser (a GBNF dialect), when installed.
* **Strategies**: ``llguidance``, ``xgrammar`` (and ``outlines`` on regular grammars) give
  ``naive``'s mask at every step of random walks through GBNF grammars; the greedy-lexing
  case that the terminal shapes are there for (``"ye" "s"? "no"`` beside ``"yes"``).
"""

from __future__ import annotations

import random
import re
from collections import deque

import numpy as np
import pytest

import toolkit.jsonschema  # noqa: F401 - registers the schema compiler (Grammar.from_json_schema)
from strategies import get_engine
from tests._support.fixtures import ARITH_LARK, JSON_LARK, REGULAR_REGEXES
from toolkit.automata.dfaops import difference
from toolkit.automata.regex import compile_regex
from toolkit.core import bitmask as bm
from toolkit.core.errors import GrammarError, LimitExceeded, Unsatisfiable, UnsupportedGrammar
from toolkit.core.vocab import Vocabulary
from toolkit.grammar import gbnf
from toolkit.grammar.gbnf import GbnfText, read_gbnf, write_gbnf
from toolkit.grammar.ir import Grammar, Terminal

# ------------------------------------------------------------------ reading --

# name: (grammar, in the language, not in it)
CONSTRUCTS: dict[str, tuple[str, list[str], list[str]]] = {
    "rules": ('root ::= "a" b\nb ::= "b" | c\nc ::= "c" c | "d"\n', ["ab", "acd", "accd"], ["a", "ac", "b"]),
    "alternation": ('root ::= "x" | "yy" | z\nz ::= "z"', ["x", "yy", "z"], ["", "y", "xz"]),
    "grouping": ('root ::= ("a" | "b") ("c" "d" | "e")', ["acd", "be"], ["ab", "ac", "ae e"]),
    "star": ('root ::= "a"* "b"', ["b", "ab", "aaab"], ["", "a", "ba"]),
    "plus": ('root ::= "a"+ "b"', ["ab", "aab"], ["b", "abb"]),
    "optional": ('root ::= "a"? "b"', ["b", "ab"], ["aab", ""]),
    "exactly": ('root ::= [0-9]{3}', ["123", "000"], ["12", "1234", ""]),
    "at-least": ('root ::= "ab"{2,}', ["abab", "ababab"], ["ab", "aba", ""]),
    "between": ('root ::= [a-c]{1,3} "."', ["a.", "abc."], [".", "abca."]),
    "at-most": ('root ::= "x"{0,2} "y" | "z"{,2}', ["y", "xxy", "", "zz"], ["xxxy", "zzz"]),
    "zero-times": ('root ::= "a"{0} "b"', ["b"], ["ab"]),
    # a postfix applies to the item before it, which after a postfix is the repetition
    "postfix-of-postfix": ('root ::= "ab"{2}* "c"?+', ["", "abab", "ababcc", "c"], ["ab", "ababab"]),
    "spaces-in-postfix": ('root ::= "a" * "b" { 1 , 2 }', ["b", "aabb"], ["abbb"]),
    "string-escapes": ('root ::= "\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\"\\[\\]\\-"',
                       ["Aé😀\t\n\r\\\"[]-"], ["Aé😀"]),
    "raw-newline-in-string": ('root ::= "a\nb"', ["a\nb"], ["ab"]),
    "class-ranges": ('root ::= [a-cx0-2]+', ["abx012", "c"], ["d", "3", ""]),
    "class-escapes": ('root ::= [\\x00-\\x1f\\]\\\\\\-\\[\\u00e9\\"]+', ["\x00\x1f]\\-[é\""], ["a", " "]),
    "class-dash-at-end": ('root ::= [a-]+ [-b]', ["a--b", "-b", "aa-"], ["ab-", "c"]),
    "class-raw-bracket": ('root ::= [[(]+', ["[(", "(("], ["]"]),
    "negated-class": ('root ::= [^a-c\\n]+', ["xyz", "é😀", "\t"], ["a", "x\n", ""]),
    "any-char": ('root ::= . "."', ["a.", "\n.", "😀.", "é."], ["a", "ab.", "."]),
    "unicode-class": ('root ::= [ぁ-ゟ]+ [一-鿿]', ["ぁゟ一", "ぁ鿿"], ["ぁ", "a一"]),
    "comments": ('# a comment\nroot ::= # after ::=\n  "a" ( # in a group\n  "b" # after an item\n  ) # end\n# last\n',
                 ["ab"], ["a"]),
    "continued-after-bar": ('root ::= "a" |\n  "b" |\n\n  "c"\n', ["a", "b", "c"], ["abc"]),
    "newlines-in-group": ('root ::= (\n  "a"\n  "b"\n  | "c"\n)\n', ["ab", "c"], ["a"]),
    "crlf": ('root ::= a\r\na ::= "x" |\r\n "y"\r\n', ["x", "y"], ["xy"]),
    "names": ('root ::= rule-1 Upper_case 9to5\nrule-1 ::= "a"\nUpper_case ::= "b"\n9to5 ::= "c"', ["abc"], ["ab"]),
    "no-space-between": ('root ::= "a""b"[c]d(e)\nd ::= "d"\ne ::= "e"', ["abcde"], ["ab"]),
    "empty-alternative": ('root ::= "<" ws ">"\nws ::= | " " | "\\n"', ["<>", "< >", "<\n>"], ["<  >"]),
    "empty-string-and-group": ('root ::= "" () "a" ()*', ["a"], ["", "aa"]),
    "left-recursion": ('root ::= root "+" n | n\nn ::= [0-9]', ["1", "1+2+3"], ["+1", "1+"]),
    "overlapping-literals": ('root ::= "a" "ab" | "ab" "a" | "abc"', ["aab", "aba", "abc"], ["ab", "abab"]),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_construct_read(name: str) -> None:
    text, good, bad = CONSTRUCTS[name]
    g = read_gbnf(text)
    assert g.start == "root" and g.source == text and not g.ignore
    for s in good:
        assert g.accepts(s), (name, s)
    for s in bad:
        assert not g.accepts(s), (name, s)


def test_rules_are_rules_and_characters_are_terminals() -> None:
    g = read_gbnf('root ::= item ("," item)*\nitem ::= [a-z]+ | "x" "yz"\n')
    assert {"root", "item"} <= set(g.rules)
    helpers = set(g.rules) - {"root", "item"}
    assert helpers and all("~" in h for h in helpers)  # never a GBNF name
    # every terminal is one character: "yz" starts with a letter [a-z] holds
    assert sorted(g.terminals) == ['","', '"x"', '"y"', '"z"', "[a-z]"]
    assert all(t.literal for n, t in g.terminals.items() if n != "[a-z]")
    # the same character set is one terminal however it is written
    assert len(read_gbnf('root ::= "a" [a] [a-a]').terminals) == 1


def test_literals_kept_whole_only_while_prefix_free() -> None:
    kept = read_gbnf('root ::= ("yes" | "no" | "maybe") [0-9]')
    assert set(kept.terminals) == {'"yes"', '"no"', '"maybe"', "[0-9]"}
    assert kept.terminals['"maybe"'] == Terminal.from_literal('"maybe"', "maybe")
    # a literal that another one extends, or whose first character a class holds, is split
    split = read_gbnf('root ::= "ab" "abc" | "xy" [a-x] | "q" "qr"')
    assert set(split.terminals) == {'"a"', '"b"', '"c"', '"x"', '"y"', "[a-x]", '"q"', '"r"'}
    # splitting adds characters, which split more: "ba" (its "b" from "ab") goes too
    assert '"ba"' not in read_gbnf('root ::= "ab" "a" | "ba"').terminals


def test_token_references() -> None:
    g = read_gbnf('root ::= <think> body </think> <[7]>\nbody ::= !<[9]>*\n')
    specials = {g.terminals[n].special for n in g.special_terminals}
    assert specials == {"<think>", "</think>", "<[7]>", "<[^9]>"}
    assert not g.accepts("<think></think>")  # tokens are not text
    with pytest.raises(UnsupportedGrammar, match="!<\\[id\\]>") as e:
        read_gbnf('root ::= "a" !<think>')
    assert (e.value.line, e.value.column) == (1, 14)


def test_start_and_wrapper() -> None:
    g = read_gbnf('root ::= "a"\nother ::= "b"', start="other")
    assert g.start == "other" and g.accepts("b") and not g.accepts("a")
    assert GbnfText("x").input_format == "gbnf" and GbnfText("x").text == "x"
    with pytest.raises(TypeError):
        read_gbnf(b"root ::= x")  # type: ignore[arg-type]


def test_registered_as_an_input_format() -> None:
    from toolkit.grammar.inputs import format_for_path, format_of, read

    assert format_of(GbnfText("root ::= \"a\"")).name == "gbnf"
    assert format_for_path("x.gbnf").name == "gbnf"
    assert read(GbnfText('root ::= "a"+')).accepts("aaa")


# ------------------------------------------------------------------- errors --

# (grammar, error type, line, column, message fragment)
ERRORS = [
    ('root ::= a b\na ::= "x"\n', GrammarError, 1, 12, "undefined rule 'b'"),
    ('root ::= (x | "y")\n', GrammarError, 1, 11, "undefined rule 'x'"),
    ('root ::= "abc\n', GrammarError, 1, 10, "unterminated string"),
    ('root ::= "a"\nb ::= [abc', GrammarError, 2, 7, "unterminated character class"),
    ('root ::= "a\\q"', GrammarError, 1, 12, "unknown escape '\\q'"),
    ('root ::= "\\x4"', GrammarError, 1, 11, "2 hex digits"),
    ('root ::= [\\u12]', GrammarError, 1, 11, "4 hex digits"),
    ('root ::= "\\U00110000"', GrammarError, 1, 11, "past the last code point"),
    ('root ::= "a"{3,2}', GrammarError, 1, 13, "minimum is larger"),
    ('root ::= "a"{2', GrammarError, 1, 15, "expecting ',' or '}'"),
    ('root ::= "a"{2,x}', GrammarError, 1, 16, "expecting '}'"),
    ('root ::= "a"{x}', GrammarError, 1, 14, "expecting a number"),
    ('root ::= "a"{ , }', GrammarError, 1, 13, "no bound"),
    ('root ::= [z-a]', GrammarError, 1, 11, "range 'z-a' is empty"),
    ('root ::= []', GrammarError, 1, 10, "empty character class"),
    ('root ::= [^]', GrammarError, 1, 10, "empty character class"),
    ('root := "a"', GrammarError, 1, 6, "expecting '::='"),
    ('root\n::= "a"', GrammarError, 1, 5, "expecting '::='"),
    ('a ::= "x"\n', GrammarError, None, None, "no rule 'root'"),
    ("", GrammarError, 1, 1, "empty grammar"),
    ("# just a comment\n\n", GrammarError, 3, 1, "empty grammar"),
    ('root ::= "a"\n  | "b"\n', GrammarError, 2, 3, "a line starts with '|'"),
    ("root ::= *", GrammarError, 1, 10, "nothing to repeat"),
    ('root ::= "a" | +', GrammarError, 1, 16, "nothing to repeat"),
    ('root ::= ""*', GrammarError, 1, 12, "nothing to repeat"),
    ('root ::= "a"{0}?', GrammarError, 1, 16, "nothing to repeat"),
    ('root ::= ("a"\n  "b"', GrammarError, 1, 10, "unclosed '('"),
    ('root ::= "a")', GrammarError, 1, 13, "unbalanced ')'"),
    ('root ::= ("a" @)', GrammarError, 1, 15, "unexpected '@'"),
    ('root ::= "a" @', GrammarError, 1, 14, "unexpected '@'"),
    ('root ::= "a"\nx ::= "b"\nx ::= "c"\n', GrammarError, 3, 1, "defined twice (first at line 2, column 1)"),
    ('root ::= "a" !x', GrammarError, 1, 15, "expecting '<' after '!'"),
    ('root ::= <[12x]>', GrammarError, 1, 14, "expecting ']>'"),
    ('root ::= <think', GrammarError, 1, 10, "unterminated token"),
    ('root ::= "\\uD800"', UnsupportedGrammar, 1, 11, "surrogate"),
    ('root ::= [\\uD800-\\uDFFF]', UnsupportedGrammar, 1, 10, "only surrogate"),
]


@pytest.mark.parametrize(("text", "kind", "line", "column", "fragment"), ERRORS)
def test_errors_say_where(text: str, kind: type, line: int | None, column: int | None, fragment: str) -> None:
    with pytest.raises(kind) as e:
        read_gbnf(text)
    assert type(e.value) is kind
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert fragment in e.value.message, e.value.message


def test_empty_language_is_unsatisfiable() -> None:
    with pytest.raises(Unsatisfiable):
        read_gbnf('root ::= "a" root\n')


def test_limits() -> None:
    read_gbnf(f'root ::= "a"{{0,{gbnf.MAX_REPETITION}}}')
    for text in (f'root ::= "a"{{{gbnf.MAX_REPETITION + 1}}}', 'root ::= "a"{2,99999999999999999999}'):
        with pytest.raises(LimitExceeded) as e:
            read_gbnf(text)
        assert e.value.limit == "max_repetition" and "line 1, column 13" in str(e.value)


def test_symbol_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gbnf, "MAX_SYMBOLS", 500)
    read_gbnf('root ::= ("ab" [0-9]){100}')  # one helper rule, 100 uses of it
    with pytest.raises(LimitExceeded) as e:
        read_gbnf('root ::= x{200} x{200} x{200}\nx ::= "a"')
    assert e.value.limit == "max_symbols" and "line 1" in str(e.value)


# --------------------------------------------------------------- round trips --


def _walk_dfa(dfa, rng: random.Random, steps: int) -> bytes:
    """A string of the DFA's language: a random walk, then the shortest way to accept."""
    trans, acc = dfa.transitions, dfa.accepting
    s, out = dfa.start, bytearray()
    for _ in range(steps):
        if acc[s] and rng.random() < 0.4:
            return bytes(out)
        live = np.flatnonzero(trans[s])
        if not len(live):
            break
        b = int(rng.choice(live.tolist()))
        out.append(b)
        s = int(trans[s][b])
    prev: dict[int, tuple[int, int] | None] = {s: None}
    todo = deque([s])
    while todo:
        q = todo.popleft()
        if acc[q]:
            tail = bytearray()
            while prev[q] is not None:
                q, b = prev[q]
                tail.append(b)
            return bytes(out + tail[::-1])
        for b in np.flatnonzero(trans[q]).tolist():
            t = int(trans[q][b])
            if t not in prev:
                prev[t] = (q, b)
                todo.append(t)
    raise AssertionError("a live DFA state reaches no accepting state")


def _costs(g: Grammar) -> dict[str, int]:
    cost = {n: 1 for n, t in g.terminals.items() if not t.dfa().is_empty()}
    changed = True
    while changed:
        changed = False
        for lhs, alts in g.rules.items():
            best = min((1 + sum(cost[s] for s in a) for a in alts if all(s in cost for s in a)), default=None)
            if best is not None and best < cost.get(lhs, 1 << 60):
                cost[lhs] = best
                changed = True
    return cost


def _sample(g: Grammar, rng: random.Random, budget: int = 60) -> bytes:
    """A string of ``g``'s language: a random derivation (the cheapest alternatives once
    ``budget`` expansions are spent), ignored text sprinkled before terminals and at the end."""
    cost = _costs(g)
    ignore = [g.terminals[n].dfa() for n in g.ignore if n in cost]
    out = bytearray()
    stack = [g.start]
    spent = 0
    while stack:
        s = stack.pop()
        if s in g.terminals:
            if ignore and rng.random() < 0.3:
                out += _walk_dfa(rng.choice(ignore), rng, 3)
            out += _walk_dfa(g.terminals[s].dfa(), rng, 8)
            continue
        alts = [a for a in g.rules[s] if all(x in cost for x in a)]
        spent += 1
        alt = rng.choice(alts) if spent < budget else min(alts, key=lambda a: sum(cost[x] for x in a))
        stack.extend(reversed(alt))
    if ignore and rng.random() < 0.3:
        out += _walk_dfa(rng.choice(ignore), rng, 3)
    return bytes(out)


def _mutants(data: bytes, alphabet: bytes, rng: random.Random) -> list[bytes]:
    out = [data[:-1], data + data[-1:], data[1:]]
    for _ in range(4):
        i = rng.randrange(len(data) + 1)
        out.append(data[:i] + bytes([rng.choice(alphabet)]) + data[i:])
        if data:
            j = rng.randrange(len(data))
            out.append(data[:j] + data[j + 1 :])
            out.append(data[:j] + bytes([rng.choice(alphabet)]) + data[j + 1 :])
    return out


def _same_language(a: Grammar, b: Grammar, seed: int, n: int = 25) -> None:
    rng = random.Random(seed)
    samples = [_sample(g, rng) for g in (a, b) for _ in range(n)]
    alphabet = bytes(sorted(set(b"".join(samples)) | set(b" a0\"{")))
    checked = 0
    for s in samples:
        assert a.accepts(s) and b.accepts(s), s
        for m in _mutants(s, alphabet, rng):
            assert a.accepts(m) == b.accepts(m), (m, a.accepts(m))
            checked += 1
    assert checked > 100


def _regular_equal(a: Grammar, b: Grammar) -> None:
    da, db = compile_regex(a.to_regex()), compile_regex(b.to_regex())
    assert difference(da, db).is_empty() and difference(db, da).is_empty()


GBNF_JSON = r"""
# JSON, as GBNF (written for this test)
root     ::= ws value ws
value    ::= object | array | string | number | "true" | "false" | "null"
object   ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member   ::= string ws ":" ws value
array    ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string   ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number   ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws       ::= [ \t\n]{0,3}
"""

GBNF_ARITH = r"""
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ ("." [0-9]+)? | "(" expr ")" | "-" factor
"""

GBNF_REGULAR = r"""
root ::= "[" [0-9]{1,3} ("," [a-c]{2} | ";" "ab"{0,2})* "]" (tail | "")
tail ::= [^\n\[\]]{2,4} | "yes" | "ye" "s"? "no"
"""

GBNF_GRAMMARS = {
    "json": GBNF_JSON, "arith": GBNF_ARITH, "regular": GBNF_REGULAR,
    **{f"construct-{k}": CONSTRUCTS[k][0] for k in ("postfix-of-postfix", "negated-class", "any-char",
                                                     "class-escapes", "left-recursion", "empty-alternative")},
}


@pytest.mark.parametrize("name", sorted(GBNF_GRAMMARS))
def test_round_trip_gbnf(name: str) -> None:
    g = read_gbnf(GBNF_GRAMMARS[name])
    back = read_gbnf(write_gbnf(g))
    _same_language(g, back, seed=len(name))


LARK = {
    "json-ignore": JSON_LARK,
    "arith-ignore": ARITH_LARK,
    "two-ignores": '%ignore " "\n%ignore /#[^\\n]*\\n/\nstart: "[" [item ("," item)*] "]"\n'
                   "?item: NUMBER | NAME | start\nNAME: /[a-z_]+/\nNUMBER: /[0-9]+/\n",
    "and-not": 'start: (WORD " ")+\nWORD: /[a-z]{1,5}/ & ~/(if|in)/\n',
    "case-dot": 'start: A B C\nA: /(?i:ab)c/\nB: /.{1,3}/\nC: /(?s:.)\\./\n',
    "lazy": 'start: w "!"\nw[lazy]: /[0-9]+5/\n',
    "rule-named-root": 'start: root "x"\nroot: "r" | "s" root\n',
}


@pytest.mark.parametrize("name", sorted(LARK))
def test_round_trip_lark(name: str) -> None:
    g = Grammar.from_lark(LARK[name])
    text = write_gbnf(g)
    back = read_gbnf(text)
    _same_language(g, back, seed=len(name))


REGEXES = [*REGULAR_REGEXES, r"(?i)true|n[^a-z\n]?", r"[\x00-\x1f\]\\^-]+", r".\.(?s:.)", r"\d{2,1500}x",
           r"(ab|a){0,2500}b", r"[^\d\D]|a", "é+[^é]", r"(a?b?)*c", r"(x*|y){2,}z", r"(a?b*)+"]


@pytest.mark.parametrize("pattern", REGEXES)
def test_round_trip_regex_exact(pattern: str) -> None:
    g = Grammar.from_regex(pattern)
    text = write_gbnf(g)
    bounds = [int(b) for m in re.finditer(r"\{(\d+)(?:,(\d*))?\}", text) for b in m.groups() if b]
    assert all(b <= gbnf.WRITE_CHUNK for b in bounds)  # larger bounds are chunked
    back = read_gbnf(text)
    if max(bounds, default=0) < 100:
        _regular_equal(g, back)
    else:  # to_regex nests a long chain of optionals deeper than the regex compiler goes
        _same_language(g, back, seed=len(pattern), n=5)


SCHEMAS = {
    "object": {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3},
                                                 "b": {"type": "array", "items": {"type": "integer"}}},
               "required": ["a"]},
    "enum": {"enum": ["list", "listen", 1, True, None]},
    "pattern": {"type": "string", "pattern": "^[a-z]{2}-[0-9]+$"},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_round_trip_json_schema(name: str) -> None:
    g = Grammar.from_json_schema(SCHEMAS[name])
    back = read_gbnf(write_gbnf(g))
    _same_language(g, back, seed=len(name))
    if name in ("enum", "pattern"):
        _regular_equal(g, back)


def test_round_trip_regular_gbnf_exact() -> None:
    g = read_gbnf(GBNF_REGULAR)
    _regular_equal(g, read_gbnf(write_gbnf(g)))


# ------------------------------------------------------------------ writing --


def test_written_names_and_shapes() -> None:
    g = Grammar.from_lark('start: root_rule x__y root\nroot: "r"\nroot_rule: A\nx__y: "b"*\nA: /a+/\n%ignore / +/\n')
    text = write_gbnf(g)
    heads = [line.split(" ::= ")[0] for line in text.splitlines()]
    assert heads[0] == "root" and len(set(heads)) == len(heads)
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*", h) for h in heads)  # no "_": llama.cpp's names
    assert text.splitlines()[0] == "root ::= start ignored"
    assert 'ignored ::= " "*' in text
    for line in text.splitlines():  # direct left recursion is written as a repetition
        head, body = line.split(" ::= ")
        assert not re.match(rf"\(?{re.escape(head)}(?![A-Za-z0-9-])", body), line


def test_written_special_tokens() -> None:
    g = read_gbnf('root ::= <[5]> !<[6]> <think> "a"\n')
    text = write_gbnf(g)
    assert "<[5]> !<[6]> <think>" in text
    assert {t.special for t in read_gbnf(text).terminals.values()} == {"<[5]>", "<[^6]>", "<think>", None}
    listed = Grammar.from_lark("start: <[3-5]>\n")
    assert "(<[3]> | <[4]> | <[5]>)" in write_gbnf(listed)
    for lark in ("start: <[*]>\n", "start: <[^3-5]>\n"):
        with pytest.raises(UnsupportedGrammar, match="has no GBNF form"):
            write_gbnf(Grammar.from_lark(lark))


def test_written_text_is_read_by_xgrammar() -> None:
    xgr = pytest.importorskip("xgrammar", reason="xgrammar ([peers] extra) not installed")
    grammars = [read_gbnf(t) for t in GBNF_GRAMMARS.values()] + [Grammar.from_lark(t) for t in LARK.values()]
    grammars += [Grammar.from_regex(p) for p in REGEXES] + [Grammar.from_json_schema(s) for s in SCHEMAS.values()]
    for g in grammars:
        xgr.Grammar.from_ebnf(write_gbnf(g))


def test_written_text_runs_in_llama_cpp() -> None:
    """llama.cpp itself (``peer:llama.cpp``, given the grammar as :func:`write_gbnf` writes
    it) reads every written grammar (no left recursion, no repetition of an item that may
    be empty, bounds within its limits) and allows naive's tokens on walks through it.
    The vocabulary holds whole UTF-8 characters only: llama.cpp judges a token ending
    inside a character by what it could become, a documented difference of that peer."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python ([peers] extra) not installed")
    whole = [t for t in VOCAB.token_bytes[2 : VOCAB.n_defined] if t and t.decode("utf-8", "ignore").encode() == t]
    vocab = Vocabulary.from_tokens([b"", b"", *whole], eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"},
                                   size=len(whole) + 4, name="gbnf-whole-utf8")
    ll, naive = get_engine("peer:llama.cpp", vocab), get_engine("naive", vocab)
    grammars = [read_gbnf(GBNF_JSON), read_gbnf(CONSTRUCTS["left-recursion"][0]),
                read_gbnf(CONSTRUCTS["postfix-of-postfix"][0]), Grammar.from_lark(LARK["two-ignores"]),
                Grammar.from_lark(LARK["and-not"]), Grammar.from_regex(r"(a?b?)*c"), Grammar.from_regex(r"\d{2,1500}x"),
                Grammar.from_json_schema(SCHEMAS["object"])]
    rng = random.Random(7)
    for g in grammars:
        a, b = ll.compile(g), naive.compile(g)
        for _walk in range(3):
            ma, mb = ll.matcher(a), naive.matcher(b)
            for _ in range(15):
                want = bm.allocate(vocab.size)
                got = bm.allocate(vocab.size)
                mb.fill_bitmask(want)
                ma.fill_bitmask(got)
                assert np.array_equal(got, want), write_gbnf(g)
                allowed = bm.allowed_ids(want[0], vocab.size).tolist()
                t = rng.choice([i for i in allowed if i != EOS] or allowed)
                assert ma.accept_token(t) and mb.accept_token(t)
                if t == EOS:
                    break


# --------------------------------------------------------------- strategies --

SPECIAL, EOS = 0, 1
_SINGLE = [c.encode() for c in '{}[]",:()+-*/=.;! \n\t0123456789abcdefilnorstuxyzAE\\^#']
_MULTI = [
    b'{"', b'":', b'", "', b'": ', b'"}', b", ", b"12", b"123", b"00", b"ab", b"abc", b"aa", b"ba", b"true",
    b"tr", b"ue", b"null", b"fal", b"se", b"((", b"))", b"+1", b"1+", b"1.", b".5", b"e+", b"  ", b" \n",
    b"\n ", b"yes", b"ye", b"sn", b"no", b"[1", b"1]", b',a', b'\\u', b'\\"', b"01", b"a1",
    "é".encode(), b"\xc3", b"\xa9", "😀".encode(), "😀".encode()[:2],
]  # fmt: skip
VOCAB = Vocabulary.from_tokens([b"", b"", *_SINGLE, *_MULTI], eos_ids=(EOS,),
                               special_tokens={SPECIAL: "<s>", EOS: "</s>"}, size=len(_SINGLE) + len(_MULTI) + 5,
                               name="gbnf-test")

MASK_GRAMMARS = {
    "json": GBNF_JSON,
    "arith": GBNF_ARITH,
    "regular": GBNF_REGULAR,
    "overlapping-literals": 'root ::= item ("," item)*\nitem ::= "a" "ab" | "ab" "a" | "abc" | "ba"+ | "yes" | '
                            '"ye" "s"? "no"\n',
    "repetitions": 'root ::= [0-9]{2,3} ("." [a-e]{0,2}){1,3} x{2,}\nx ::= "e" | "é"\n',
    "negated": 'root ::= "\\"" [^"\\\\\\n]* "\\"" (" " [^a-z0-9 \\t\\n] .)? "\\n"\n',
    "tokens": 'root ::= "a" <s> ("b" | <[5]>)+ | "(" !<[4]>* ")"\n',
}
REGULAR = {"regular", "overlapping-literals", "repetitions", "negated"}


def _row(m) -> np.ndarray:
    row = bm.allocate(VOCAB.size)
    m.fill_bitmask(row)
    return row[0].copy()


@pytest.fixture(scope="module")
def engines():
    return {n: get_engine(n, VOCAB) for n in ("naive", "llguidance", "xgrammar", "outlines")}


@pytest.mark.parametrize("name", sorted(MASK_GRAMMARS))
def test_strategy_masks_equal_naive(engines, name: str) -> None:
    g = read_gbnf(MASK_GRAMMARS[name])
    names = ["naive", "llguidance", "xgrammar"] + (["outlines"] if name in REGULAR else [])
    compiled = {n: engines[n].compile(g) for n in names}
    rng = random.Random(name)
    steps = 0
    for _walk in range(12):
        ms = {n: engines[n].matcher(compiled[n]) for n in names}
        for _ in range(25):
            want = _row(ms["naive"])
            for n in names[1:]:
                got = _row(ms[n])
                if not np.array_equal(got, want):
                    diff = set(bm.allowed_ids(got, VOCAB.size).tolist()) ^ set(bm.allowed_ids(want, VOCAB.size).tolist())
                    raise AssertionError((name, n, [VOCAB.token_bytes[i] or i for i in sorted(diff)]))
            allowed = bm.allowed_ids(want, VOCAB.size).tolist()
            assert allowed
            t = rng.choice([i for i in allowed if i != EOS] or allowed)
            assert all(m.accept_token(t) for m in ms.values())
            steps += 1
            if t == EOS:
                assert all(m.is_terminated() for m in ms.values())
                break
    assert steps > 60


def test_why_literals_are_split(engines) -> None:
    """Kept whole, ``"yes"`` and ``"ye"`` would be lexemes one of which extends the other:
    greedy lexing would read ``yes`` as the lexeme "yes" and refuse "no" after it, where
    ``"ye" "s"? "no"`` allows it.  Split, the llguidance strategy allows it as naive does."""
    g = read_gbnf('root ::= "yes" | "ye" "s"? "no"\n')
    assert {'"y"', '"e"', '"s"', '"no"'} == set(g.terminals)  # "no" extends nothing: kept
    m = {n: engines[n].matcher(engines[n].compile(g)) for n in ("naive", "llguidance")}
    yes = VOCAB.token_bytes.index(b"yes")
    no = VOCAB.token_bytes.index(b"no")
    for x in m.values():
        assert x.accept_token(yes)
        assert no in bm.allowed_ids(_row(x), VOCAB.size)
        assert x.accept_token(no) and x.is_accepting()


def _random_expr(rng: random.Random, depth: int, rules: list[str]) -> str:
    k = rng.random()
    if depth <= 0 or k < 0.35:
        return rng.choice(['"a"', '"ab"', '"b"', "[a-c]", "[^ab]", ".", '"\\n"', '""', "[0-9]", '"é"', *rules])
    if k < 0.55:
        return " ".join(_random_expr(rng, depth - 1, rules) for _ in range(rng.randrange(2, 4)))
    if k < 0.75:
        return "(" + " | ".join(_random_expr(rng, depth - 1, rules) for _ in range(rng.randrange(2, 4))) + ")"
    base = _random_expr(rng, depth - 1, rules)
    if base == '""' or not re.fullmatch(r'"[^"]*"|\[[^\]]*\]|\.|[a-z]+', base):
        base = "(" + base + ")"
    return base + rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}", "{,1}"])


def test_random_grammars(engines) -> None:
    """Generated GBNF grammars (three rules calling each other, every construct): masks
    of llguidance and xgrammar equal naive's along random walks, and the written text
    reads back to the same language."""
    rng = random.Random(41)
    tested = steps = 0
    while tested < 25:
        names = ["root", "x", "y"]
        text = "\n".join(f"{n} ::= {_random_expr(rng, 3, names)}" for n in names)
        try:
            g = read_gbnf(text)
        except Unsatisfiable:
            continue
        tested += 1
        back = read_gbnf(write_gbnf(g))
        samples = [_sample(h, rng) for h in (g, back) for _ in range(4)]
        for s in samples:
            assert g.accepts(s) and back.accepts(s), (text, s)
            for m in _mutants(s, b"ab\n0c", rng):
                assert g.accepts(m) == back.accepts(m), (text, m)
        compiled = {n: engines[n].compile(g) for n in ("naive", "llguidance", "xgrammar")}
        for _walk in range(3):
            ms = {n: engines[n].matcher(c) for n, c in compiled.items()}
            for _ in range(10):
                want = _row(ms["naive"])
                assert all(np.array_equal(_row(ms[n]), want) for n in ("llguidance", "xgrammar")), text
                allowed = bm.allowed_ids(want, VOCAB.size).tolist()
                if not allowed:
                    break
                t = rng.choice([i for i in allowed if i != EOS] or allowed)
                assert all(m.accept_token(t) for m in ms.values())
                steps += 1
                if t == EOS:
                    break
    assert steps > 300
