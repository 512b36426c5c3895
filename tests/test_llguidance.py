"""Strategy ``llguidance``: lazy lexer + Earley over lexemes + trie walk + slicer.

* **Against naive** (the Grammar's scannerless language) on random walks over small
  grammars whose lexing is unambiguous, under every slice setting (``none``,
  ``default``, a custom list); with ``%ignore`` the one documented difference (no
  ignored text after the last lexeme) is the only one allowed.
* **Against outlines** on regular languages, and **against peer:llguidance** (the
  real engine, the same lexing semantics) on grammars with ``%ignore`` and ambiguous
  lexing, where masks must be identical.
* **The documented differences** from naive, one example each; rollback / fork /
  reset / validate; the limits as sticky errors; options, stats.
* **Llama-3** (shared data): the slicer (dense sliced masks bit-for-bit equal to
  unsliced ones, the slices partition the text tokens) and agreement with
  peer:llguidance on a few MaskBench schemas.

The hand-made vocabulary LEX: id 0 a special token, id 1 EOS, three padding ids at
the end; text tokens::

    singles   { } [ ] " , : ( ) + - * / = ; .  <space> \\n  0-9  a b c d e f i l n r s t u
    multi     {"  ":  ", "  ": "  "}  ,<space>  12 123 00 ab abc aa ba a; ;b true tr ue null
              fal se (( )) +1 1+ [1 1] "a 1. .5 e+ <2 spaces> <space>\\n
              list liste listen listed ed en é \\xc3 \\xa9 (the two bytes of é)
"""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import get_engine
from strategies.llguidance import DEFAULT_SLICES, LLGuidanceCompiled, LLGuidanceEngine
from tests._support.fixtures import ARITH_LARK, JSON_LARK, REGULAR_REGEXES
from tests._support.shared import require_shared
from toolkit.core import bitmask as bm
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.protocol import MaskEngine, MaskInfo, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import iter_items, load_item
from toolkit.grammar.ir import Grammar, RegexText, Terminal
from toolkit.jsonschema.compiler import JsonSchemaText

SPECIAL, EOS = 0, 1
_SINGLE = [c.encode() for c in '{}[]",:()+-*/=;. \n0123456789abcdefilnrstu']
_MULTI = [
    b'{"', b'":', b'", "', b'": ', b'"}', b", ", b"12", b"123", b"00", b"ab", b"abc", b"aa", b"ba",
    b"a;", b";b", b"true", b"tr", b"ue", b"null", b"fal", b"se", b"((", b"))", b"+1", b"1+", b"[1",
    b"1]", b'"a', b"1.", b".5", b"e+", b"  ", b" \n", b"list", b"liste", b"listen", b"listed", b"ed",
    b"en", "é".encode(), b"\xc3", b"\xa9",
]  # fmt: skip
_TOKENS = [b"", b"", *_SINGLE, *_MULTI]
LEX = Vocabulary.from_tokens(
    _TOKENS, eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"}, size=len(_TOKENS) + 3, name="lex"
)
PAD = tuple(range(LEX.n_defined, LEX.size))
TOK = {b: i for i, b in enumerate(LEX.token_bytes) if b}
WS = frozenset(i for b, i in TOK.items() if not b.strip(b" \n"))  # spaces and newlines only

CUSTOM_SLICES = ["[a-z]{1,2}", "[0-9]+"]
SLICINGS = {"none": "none", "default": "default", "custom": CUSTOM_SLICES}
LLGS = ("llg-none", "llg-default", "llg-custom")  # the engine under each slicing


def _no_ignore(src: str) -> str:
    return "\n".join(line for line in src.splitlines() if not line.startswith(("%ignore", "%import")))


# Lexing is unambiguous (no lexeme can extend into the next one, no skip text): the
# language and every mask are naive's.  "nullable" is built below (Lark refuses
# terminals that match the empty string).
EXACT = {
    "json": _no_ignore(JSON_LARK),
    "arith": _no_ignore(ARITH_LARK),
    "lists": 'start: list\nlist: "[" [item ("," item)*] "]"\n?item: list | NAME | NUMBER\n'
             "NAME: /[a-z]+/\nNUMBER: /[0-9]+/\n",
    "nullable": "",
    "recursion": 'start: left ";" right\nleft: left "a" | left "ba" | "b"\nright: "a" right | "c" right | "e"\n',
    # KEY and NAME both accept "ab": both go to the parser, which picks by what follows
    "key-or-name": 'start: pair ("," pair)*\npair: KEY "=" NUMBER | NAME ":" NAME\n'
                   'KEY: "ab"\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n',
    "utf8": 'start: "\\"" CHARS? "\\""\nCHARS: /[^"]{1,3}/\n',
}

# With %ignore: masks differ from naive's only where no lexeme can follow.
IGNORING = {
    "json-ws": JSON_LARK,
    "arith-space": ARITH_LARK,
    "two-ignores": '%ignore " "\n%ignore "\\n"\nstart: "[" [item ("," item)*] "]"\n'
                   "?item: NUMBER | NAME | start\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n",
}

# llguidance's lexing makes these differ from naive; the real engine agrees with ours.
LLG_ONLY = {
    "stem": 'start: STEM "ed" | STEM ";"\nSTEM: "list" | "listen"\n',
    "nn": "start: N N | N\nN: /[0-9]+/\n",
    "a-ab": "start: A B | A\nA: /a+/\nB: /ab/\n",
    # a keyword that is also a NAME: "ifx" is one NAME, never "if" NAME
    "keywords": 'start: stmt+\nstmt: "if" NAME ";" | "list" "=" NAME ";" | NAME "=" NUMBER ";"\n'
                "NAME: /[a-z]+/\nNUMBER: /[0-9]+/\n",
    # the skip lexeme and SEP both accept " ": it is skipped
    "skip-same-text": '%ignore " "\nstart: NAME (SEP NAME)*\nSEP: " " | ";"\nNAME: /[a-z]+/\n',
    "skip-extends": "%ignore /[ \\n]+/\nstart: (NAME | NL)+\nNAME: /[a-z]+/\nNL: /\\n/\n",
}

# start: "[" A "]" rest      rest: ε | "," B rest | opt ";"      opt: C | ε
# A: /a*/   B: /[0-9]*/   C: /(bc)*/   (terminals matching ε are optional lexemes)
NULLABLE = Grammar(
    start="start",
    rules={
        "start": (("LB", "A", "RB", "rest"),),
        "rest": ((), ("COMMA", "B", "rest"), ("opt", "SEMI")),
        "opt": (("C",), ()),
    },
    terminals={
        "A": Terminal("A", "a*"), "B": Terminal("B", "[0-9]*"), "C": Terminal("C", "(bc)*"),
        "LB": Terminal.from_literal("LB", "["), "RB": Terminal.from_literal("RB", "]"),
        "COMMA": Terminal.from_literal("COMMA", ","), "SEMI": Terminal.from_literal("SEMI", ";"),
    },
)

# JSON-schema grammars (whitespace as %ignore): like IGNORING against naive.
SCHEMAS = {
    "schema-object": {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "string", "maxLength": 3}, "b": {"type": "array", "items": {"type": "integer"}}}},
    "schema-enum": {"enum": ["list", "listen", 1, True, None]},
    "schema-array": {"type": "array", "items": {"type": "number"}, "maxItems": 3},
    "schema-map": {"type": "object", "additionalProperties": {"type": "boolean"}},
}

GRAMMARS = {**EXACT, **IGNORING, **LLG_ONLY, **SCHEMAS}

# Regular languages (outlines' test set, plus the greedy-lexing example as one regex).
REGEXES = [*REGULAR_REGEXES, r"list(en)?(ed)?", r"(ab)?"]


# ------------------------------------------------------------------ helpers --


def _grammar(name: str) -> Grammar:
    if name == "nullable":
        return NULLABLE
    if name in SCHEMAS:
        return Grammar.from_json_schema(SCHEMAS[name])
    return Grammar.from_lark(GRAMMARS[name])


def _row(m: Matcher, vocab: Vocabulary = LEX) -> tuple[np.ndarray, MaskInfo]:
    row = bm.allocate(vocab.size)
    info = m.fill_bitmask(row)
    assert info.allowed == bm.popcount(row[0])
    return row[0].copy(), info


def _as_ids(row: np.ndarray, vocab: Vocabulary = LEX) -> set[int]:
    return set(bm.allowed_ids(row, vocab.size).tolist())


def _ids(m: Matcher, vocab: Vocabulary = LEX) -> set[int]:
    return _as_ids(_row(m, vocab)[0], vocab)


def _show(ids: set[int], vocab: Vocabulary = LEX) -> list:
    return sorted((vocab.token_bytes[i] or vocab.special_tokens.get(i, f"#{i}") for i in ids), key=repr)


def _have_llguidance() -> bool:
    return importlib.util.find_spec("llguidance") is not None


class _Lex:
    """Engines on LEX, made once; compiled grammars cached per (engine, grammar)."""

    def __init__(self) -> None:
        self.engines: dict[str, MaskEngine] = {}
        self.compiled: dict[tuple[str, str, bool], object] = {}

    def engine(self, key: str) -> MaskEngine:
        if key not in self.engines:
            if key.startswith("llg-"):
                self.engines[key] = get_engine("llguidance", LEX, slices=SLICINGS[key[4:]])
            else:
                if key == "peer:llguidance":
                    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
                self.engines[key] = get_engine(key, LEX)
        return self.engines[key]

    def matcher(self, key: str, name: str, *, regex: bool = False) -> Matcher:
        """A matcher of grammar ``name`` (of the regex ``name`` with ``regex``) on ``key``."""
        e = self.engine(key)
        if (key, name, regex) not in self.compiled:
            if regex:
                spec = Grammar.from_regex(name) if key in ("naive", "peer:llguidance") else RegexText(name)
            else:
                spec = _grammar(name)
            self.compiled[(key, name, regex)] = e.compile(spec)
        return e.matcher(self.compiled[(key, name, regex)])


@pytest.fixture(scope="module")
def lex() -> _Lex:
    return _Lex()


def _check_refuses_outside(ms: list[Matcher], allowed: set[int], data) -> None:
    """A token outside the mask (padding, specials included) is refused by every matcher."""
    t = data.draw(st.sampled_from(sorted(set(range(LEX.size)) - allowed)), label="outside")
    for m in ms:
        assert not m.accept_token(t), LEX.token_bytes[t]


def _walk_and_compare(data, oracle: Matcher, ours: list[Matcher], what: str, steps: int = 14) -> int:
    """Random walk: at each step every matcher's row equals the oracle's; returns the
    steps taken."""
    for n in range(steps):
        want, _ = _row(oracle)
        for k, m in zip(LLGS, ours, strict=True):
            got, info = _row(m)
            assert np.array_equal(got, want), (what, k, n, _show(_as_ids(got) ^ _as_ids(want)))
            assert not (info.sliced and k == "llg-none")
        allowed = _as_ids(want)
        _check_refuses_outside([oracle, *ours], allowed, data)
        if not allowed:
            return n
        t = data.draw(st.sampled_from(sorted(allowed)), label="token")
        assert oracle.accept_token(t) and all(m.accept_token(t) for m in ours)
        assert [m.is_accepting() for m in ours] == [oracle.is_accepting()] * len(ours)
        if t == EOS:
            assert all(m.is_terminated() and _ids(m) == {EOS} for m in ours)
            return n
    return steps


# ------------------------------------------------------------ against naive --


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(EXACT)))
def test_masks_equal_naive_on_random_walks(lex, data, which: str) -> None:
    oracle = lex.matcher("naive", which)
    _walk_and_compare(data, oracle, [lex.matcher(k, which) for k in LLGS], which)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(IGNORING) + sorted(SCHEMAS)))
def test_masks_equal_naive_but_for_trailing_ignored_text(lex, data, which: str) -> None:
    """With %ignore, masks differ only where no lexeme can follow: there naive also allows
    whitespace tokens, llguidance only what extends the last lexeme, and EOS."""
    oracle = lex.matcher("naive", which)
    ours = [lex.matcher(k, which) for k in LLGS]
    for _ in range(14):
        rows = [_row(m)[0] for m in ours]
        assert all(np.array_equal(r, rows[0]) for r in rows[1:]), which
        got, want = _as_ids(rows[0]), _ids(oracle)
        if got != want:
            assert got < want and want - got <= WS and EOS in got, (which, _show(want - got))
        if not got:
            break
        t = data.draw(st.sampled_from(sorted(got)), label="token")
        assert oracle.accept_token(t) and all(m.accept_token(t) for m in ours)
        if t == EOS:
            break


def test_custom_slices_are_used_and_change_nothing(lex) -> None:
    """The slice path runs on LEX (so the random walks above exercise it): in a NAME
    the [a-z]{1,2} slice is added wholesale, in a bounded lexeme it is not."""
    m = lex.matcher("llg-custom", "key-or-name")
    n = lex.matcher("llg-none", "key-or-name")
    for t in [TOK[b"abc"], TOK[b"ab"]]:
        assert m.accept_token(t) and n.accept_token(t)
    (got, info), (want, plain) = _row(m), _row(n)
    assert info.sliced and not plain.sliced and np.array_equal(got, want)
    assert {TOK[b"a"], TOK[b"ed"], TOK[b"listen"], TOK[b":"]} <= _as_ids(got)
    # CHARS /[^"]{1,3}/ after two characters: [a-z]{1,2} could overrun it
    m, n = lex.matcher("llg-custom", "utf8"), lex.matcher("llg-none", "utf8")
    for t in [TOK[b'"a'], TOK[b"b"]]:
        assert m.accept_token(t) and n.accept_token(t)
    (got, info), (want, _) = _row(m), _row(n)
    assert np.array_equal(got, want) and TOK[b"a"] in _as_ids(got) and TOK[b"ab"] not in _as_ids(got)


# --------------------------------------------------------- against outlines --


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(REGEXES))
def test_masks_equal_outlines_on_regexes(lex, data, which: str) -> None:
    oracle = lex.matcher("outlines", which, regex=True)
    ours = [lex.matcher(k, which, regex=True) for k in LLGS]
    assert ours[0].compiled.kind == "regex"
    _walk_and_compare(data, oracle, ours, which)


# -------------------------------------------------- against peer:llguidance --


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(GRAMMARS)))
def test_masks_equal_peer_llguidance_on_random_walks(lex, data, which: str) -> None:
    """Same lexing semantics, so identical masks, %ignore and ambiguous lexing included."""
    peer = lex.matcher("peer:llguidance", which)
    ours = [lex.matcher(k, which) for k in LLGS]
    for n in range(14):
        want, _ = _row(peer)
        if peer.error is not None:
            # llguidance stops with an error where no token can follow; ours allows nothing
            assert "NoExtensionBias" in peer.error, peer.error
            assert all(_ids(m) == set() for m in ours), which
            return
        for k, m in zip(LLGS, ours, strict=True):
            got, _ = _row(m)
            assert np.array_equal(got, want), (which, k, n, _show(_as_ids(got) ^ _as_ids(want)))
        allowed = _as_ids(want)
        if not allowed:
            return
        _check_refuses_outside([peer, *ours], allowed, data)
        t = data.draw(st.sampled_from(sorted(allowed)), label="token")
        assert peer.accept_token(t) and all(m.accept_token(t) for m in ours)
        assert [m.is_accepting() for m in ours] == [peer.is_accepting()] * len(ours)
        if t == EOS:
            return


# ------------------------------------------------- the documented differences --


def _accepts(m: Matcher, tokens: list[bytes]) -> bool:
    return m.accept_tokens([TOK[t] for t in tokens]) == len(tokens)


def test_greedy_lexing_refuses_listed(lex) -> None:
    """``STEM: "list" | "listen"`` then ``"ed"``: ``liste`` can only be read as the start
    of ``listen``, so ``listed`` is refused; naive reads STEM="list" then "ed"."""
    src = 'start: STEM "ed"\nSTEM: "list" | "listen"\n'
    g = Grammar.from_lark(src)
    assert g.accepts("listed") and g.accepts("listened")
    naive, ours = get_engine("naive", LEX), lex.engine("llg-default")
    cn, co = naive.compile(g), ours.compile(g)
    for tokens in ([b"listed"], [b"list", b"ed"], [b"liste", b"d"], [b"list", b"e", b"d"]):
        m, n = ours.matcher(co), naive.matcher(cn)
        assert _accepts(n, tokens) and n.is_accepting(), tokens
        assert not _accepts(m, tokens), tokens
    m, n = ours.matcher(co), naive.matcher(cn)
    assert TOK[b"listed"] in _ids(n) and TOK[b"listed"] not in _ids(m)
    assert _accepts(m, [b"list"]) and _accepts(n, [b"list"])
    assert _ids(n) - _ids(m) == {TOK[b"ed"]} and TOK[b"en"] in _ids(m)
    assert _accepts(m, [b"e"]) and _ids(m) == {TOK[b"n"]}  # "liste": only "listen" goes on
    m = ours.matcher(co)
    assert _accepts(m, [b"listen", b"ed"]) and m.is_accepting() and _ids(m) == {EOS}
    if _have_llguidance():  # the real engine reads it the same way
        peer = lex.engine("peer:llguidance")
        p, m = peer.matcher(peer.compile(g)), ours.matcher(co)
        for tok in (b"list", b"e"):
            assert _ids(p) == _ids(m)
            assert _accepts(p, [tok]) and _accepts(m, [tok])
        assert _ids(p) == _ids(m) == {TOK[b"n"]}


def test_no_ignored_text_after_the_last_lexeme(lex) -> None:
    """JSON with %ignore WS: after a complete value nothing can follow, so llguidance
    allows EOS only; naive also allows trailing whitespace.  Whitespace before the
    value and between lexemes is the same in both."""
    naive, ours = lex.engine("naive"), lex.engine("llg-default")
    g = Grammar.from_lark(JSON_LARK)
    cn, co = naive.compile(g), ours.compile(g)
    for text in ['{"a": 1}', ' [ 12 , true ]', "\nnull", '{ "ab" : [1] }']:
        tokens = LEX.encode(text)
        m, n = ours.matcher(co), naive.matcher(cn)
        for t in tokens:
            assert _ids(m) == _ids(n), text
            assert m.accept_token(t) and n.accept_token(t)
        assert _ids(m) == {EOS} and _ids(n) == {EOS} | WS, text
        assert not m.accept_token(TOK[b" "]) and _ids(m) == {EOS}  # refused, nothing changed
        assert n.accept_token(TOK[b" "]) and n.is_accepting()
        assert m.accept_token(EOS) and m.is_terminated()
    # a complete number can still grow: digits and EOS, but no whitespace
    m, n = ours.matcher(co), naive.matcher(cn)
    assert m.accept_token(TOK[b"12"]) and n.accept_token(TOK[b"12"])
    assert EOS in _ids(m) and TOK[b"3"] in _ids(m) and not _ids(m) & WS
    assert _ids(n) - _ids(m) == WS
    # where another lexeme may follow, trailing whitespace is allowed (and then EOS)
    a = Grammar.from_lark(ARITH_LARK)
    m = ours.matcher(ours.compile(a))
    assert m.accept_token(TOK[b"1"]) and TOK[b" "] in _ids(m) and m.accept_token(TOK[b" "])
    assert EOS in _ids(m) and TOK[b"+"] in _ids(m)


def test_skip_wins_when_it_accepts_the_same_text_as_a_lexeme(lex) -> None:
    """``SEP: " " | ";"`` with ``%ignore " "``: the space is always skipped, so
    ``a b`` has no SEP and is refused; naive reads the space as SEP."""
    naive, ours = lex.engine("naive"), lex.engine("llg-none")
    g = _grammar("skip-same-text")
    assert g.accepts("a b") and g.accepts("a ;b")
    m, n = ours.matcher(ours.compile(g)), naive.matcher(naive.compile(g))
    assert _accepts(m, [b"a", b" "]) and _accepts(n, [b"a", b" "])
    assert TOK[b"b"] in _ids(n) and TOK[b"b"] not in _ids(m)
    assert {TOK[b";"], TOK[b";b"], TOK[b" "]} <= _ids(m)
    assert not m.accept_token(TOK[b"b"]) and _accepts(m, [b";b"]) and m.is_accepting()


# ------------------------------------------------------------------ mask cache --


def test_mask_cache_key_is_the_lexer_state_and_the_rows() -> None:
    """Inside the two strings of ``S ":" S`` the lexer state is the same after ``"ab``,
    but the rows differ: ``":`` may follow the first string only.  The cached mask of
    the first must not serve the second (nothing is filled in between)."""
    eng = get_engine("llguidance", LEX, slices="none")
    plain = get_engine("llguidance", LEX, slices="none", mask_cache=False)
    g = Grammar.from_lark('start: S ":" S\nS: /"[a-z]*"/\n')
    m, ref = eng.matcher(eng.compile(g)), plain.matcher(plain.compile(g))
    for t in (TOK[b'"a'], TOK[b"b"]):
        assert m.accept_token(t) and ref.accept_token(t)
    first, ls = _ids(m), m.parser.ls
    assert first == _ids(ref) and TOK[b'":'] in first
    assert _ids(m) == first and m.parser.cache_hits == 1  # the same state again: a copy
    for t in (TOK[b'":'], TOK[b'"a'], TOK[b"b"]):
        assert m.accept_token(t) and ref.accept_token(t)
    assert m.parser.ls == ls  # the key's lexer state alone would match
    second = _ids(m)
    assert second == _ids(ref) and TOK[b'":'] not in second and m.parser.cache_hits == 1
    assert ref.parser.cache_hits == 0 and not ref.parser.use_cache


_CACHE_ENGINES: dict[tuple[str, bool], MaskEngine] = {}


def _cache_engine(slicing: str, cache: bool) -> MaskEngine:
    """The llguidance engine on LEX with this slicing and ``mask_cache``, made once."""
    if (slicing, cache) not in _CACHE_ENGINES:
        _CACHE_ENGINES[slicing, cache] = get_engine("llguidance", LEX, slices=SLICINGS[slicing], mask_cache=cache)
    return _CACHE_ENGINES[slicing, cache]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(GRAMMARS)), slicing=st.sampled_from(sorted(SLICINGS)))
def test_mask_cache_changes_no_mask(data, which: str, slicing: str) -> None:
    """Cached and uncached matchers agree along walks with rollbacks and forks (the
    cache is per matcher; a fork starts without one)."""
    on, off = _cache_engine(slicing, True), _cache_engine(slicing, False)
    g = _grammar(which)
    a, b = on.matcher(on.compile(g)), off.matcher(off.compile(g))
    for _ in range(30):
        rb = _row(b)[0]  # the uncached matcher picks the moves; the cached one is
        if data.draw(st.booleans(), label="fill"):  # asked only now and then, so its
            ra = _row(a)[0]  # entry is often a few tokens old
            assert np.array_equal(ra, rb), (which, a.num_tokens, _show(_as_ids(ra) ^ _as_ids(rb)))
        moved = _move(data, a, b, sorted(_as_ids(rb) - {EOS}))
        if moved is None:
            break
        a, b = moved
    assert b.parser.cache_hits == 0


def _move(data, a: Matcher, b: Matcher, allowed: list[int]) -> tuple[Matcher, Matcher] | None:
    """One drawn move of two matchers in step: a token of ``allowed``, a rollback or a
    fork; None when no token is allowed."""
    move = data.draw(st.sampled_from(["token", "token", "token", "rollback", "fork"]), label="move")
    if move == "rollback" and a.num_tokens:
        j = data.draw(st.integers(1, a.num_tokens), label="rollback")
        a.rollback(j)
        b.rollback(j)
    elif move == "fork":
        a, b = a.fork(), b.fork()
    elif allowed:
        t = data.draw(st.sampled_from(allowed), label="token")
        assert a.accept_token(t) and b.accept_token(t)
    else:
        return None
    return a, b


_STATE_ENGINES: dict[tuple[str, bool], MaskEngine] = {}


def _state_engine(slicing: str, cache: bool) -> MaskEngine:
    """The llguidance engine on LEX with this slicing, the mask cache off (every fill made
    afresh), the state cache on (kept by the test: see below) or off, made once."""
    if (slicing, cache) not in _STATE_ENGINES:
        _STATE_ENGINES[slicing, cache] = get_engine("llguidance", LEX, slices=SLICINGS[slicing], mask_cache=False,
                                                    state_cache_bytes=64 << 20 if cache else 0)
    return _STATE_ENGINES[slicing, cache]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(GRAMMARS)), slicing=st.sampled_from(sorted(SLICINGS)),
       budget=st.sampled_from([64 << 20, 2 * 4]))
def test_state_cache_changes_no_mask(data, which: str, slicing: str, budget: int) -> None:
    """Masks made through the grammar's state cache (every lexer state kept, however
    small its walk, in a budget of all entries or of one LEX mask) equal masks walked
    whole, along walks with rollbacks and forks by several matchers of one compile (the
    later ones served by the entries the earlier ones made)."""
    on, off = _state_engine(slicing, True), _state_engine(slicing, False)
    g = _grammar(which)
    c = on.compile(g)
    c.tables.set_state_cache(budget, 0)
    rc = off.compile(g)
    for _walk in range(2):
        a, b = on.matcher(c), off.matcher(rc)
        for _ in range(20):
            (ra, ia), (rb, ib) = _row(a), _row(b)
            assert np.array_equal(ra, rb), (which, a.num_tokens, _show(_as_ids(ra) ^ _as_ids(rb)))
            assert ia.sliced == ib.sliced and ia.allowed == ib.allowed == bm.popcount(ra)
            moved = _move(data, a, b, sorted(_as_ids(rb) - {EOS}))
            if moved is None:
                break
            a, b = moved
    entries, used, hits = c.tables.state_cache
    assert used <= budget and (budget < 64 << 20 or (entries >= 1 and hits >= 1))
    assert rc.tables.state_cache == (0, 0, 0)


def test_state_cache_on_llama3_is_exact_and_serves_the_second_walk() -> None:
    """Llama 3, a MaskBench schema with long strings: two walks of its valid instance
    on one compile through the state cache give the masks of a compile without it, the
    first walk makes the entries (the JSON strings' lexer states), the second is served
    by them and walks a fraction of the trie nodes."""
    vocab = load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))
    item = next(iter_items(require_shared("datasets/maskbench/Github_easy---o21456.json")))
    on, off = (get_engine("llguidance", vocab, mask_cache=False, state_cache_bytes=n) for n in (64 << 20, 0))
    c, rc = on.compile(item.spec), off.compile(item.spec)
    text = next(case.text for case in item.cases if case.valid)
    tokens = vocab.encode(text) + [vocab.eos_ids[0]]
    nodes = []
    for _walk in range(2):
        a, b = on.matcher(c), off.matcher(rc)
        before = a.mask_stats().trie_nodes
        for i, t in enumerate(tokens):
            (ra, ia), (rb, ib) = _row(a, vocab), _row(b, vocab)
            assert np.array_equal(ra, rb) and ia.allowed == ib.allowed == bm.popcount(ra), (_walk, i)
            assert a.accept_token(t) and b.accept_token(t)
        nodes.append(a.mask_stats().trie_nodes - before)
        if _walk == 0:
            entries, _, hits = c.tables.state_cache
            assert entries >= 1
    # the second walk meets every lexer state kept by the first, and makes none
    assert c.tables.state_cache[0] == entries and c.tables.state_cache[2] - hits >= entries
    assert nodes[1] < 0.5 * b.mask_stats().trie_nodes  # the whole walks' nodes, the second walk alone


# ------------------------------------------------ rollback / fork / reset / validate --


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    which=st.sampled_from(["json-ws", "arith-space", "stem", "nullable", "key-or-name", "schema-object"]),
    slicing=st.sampled_from(LLGS),
)
def test_rollback_fork_and_validate_restore_masks_exactly(lex, data, which: str, slicing: str) -> None:
    m = lex.matcher(slicing, which)
    rows, tokens = [_row(m)[0]], []
    for _ in range(12):
        allowed = sorted(_as_ids(rows[-1]))
        if not allowed:
            break
        t = data.draw(st.sampled_from(allowed), label="token")
        assert m.accept_token(t)
        tokens.append(t)
        rows.append(_row(m)[0])
        if t == EOS:
            break
    assert m.num_tokens == len(tokens)
    # a fork at a random point evolves on its own; the original does not move
    k = data.draw(st.integers(0, len(tokens)), label="fork at")
    f = m.fork()
    f.rollback(len(tokens) - k)
    assert np.array_equal(_row(f)[0], rows[k]) and np.array_equal(_row(m)[0], rows[-1])
    alt = sorted(_as_ids(rows[k]))
    if alt:
        t = data.draw(st.sampled_from(alt), label="fork token")
        assert f.accept_token(t)
        fresh = lex.matcher(slicing, which)
        assert fresh.accept_tokens([*tokens[:k], t]) == k + 1
        assert np.array_equal(_row(f)[0], _row(fresh)[0])
    assert np.array_equal(_row(m)[0], rows[-1])
    # validate_tokens does not move the state
    if not m.is_terminated():
        probe = [data.draw(st.integers(0, LEX.size - 1), label="probe") for _ in range(3)]
        n = m.validate_tokens(probe)
        assert m.num_tokens == len(tokens) and np.array_equal(_row(m)[0], rows[-1])
        assert m.accept_tokens(probe) == n
        m.rollback(n)
    # rollback, a random number of tokens at a time, restores every earlier mask
    while tokens:
        j = data.draw(st.integers(1, len(tokens)), label="rollback")
        m.rollback(j)
        del tokens[-j:]
        assert m.num_tokens == len(tokens) and not m.is_terminated()
        assert np.array_equal(_row(m)[0], rows[len(tokens)]), (which, tokens)
    with pytest.raises(ValueError):
        m.rollback(1)


def test_fork_reset_and_two_matchers_of_one_grammar(lex) -> None:
    """Matchers of one compiled grammar share its lazy lexer table: interleaving them
    (and forks) gives each the masks of a matcher compiled on its own."""
    eng = lex.engine("llg-default")
    g = Grammar.from_lark(JSON_LARK)
    c = eng.compile(g)
    a_text, b_text = '{"ab": [12, true], "é": null}', '[{"a": 0.5e+1}, "abc", -1]'
    a, b = eng.matcher(c), eng.matcher(c)
    ref_a, ref_b = eng.matcher(eng.compile(g)), eng.matcher(eng.compile(g))
    ta, tb = LEX.encode(a_text), LEX.encode(b_text)
    forks = []
    for i in range(max(len(ta), len(tb))):
        for m, ref, toks in ((a, ref_a, ta), (b, ref_b, tb)):
            if i < len(toks):
                assert np.array_equal(_row(m)[0], _row(ref)[0]), i
                assert m.accept_token(toks[i]) and ref.accept_token(toks[i])
        if i == 4:
            forks = [a.fork(), b.fork()]
    assert a.is_accepting() and b.is_accepting()
    # the forks were left at token 5 of each text; they continue on their own
    for f, toks in zip(forks, (ta, tb), strict=True):
        assert f.num_tokens == 5 and not f.is_accepting()
        assert f.accept_tokens(toks[5:]) == len(toks) - 5 and f.is_accepting()
        assert f.accept_token(EOS) and f.is_terminated() and _ids(f) == {EOS}
    assert not a.is_terminated()  # the fork's EOS is its own
    start = _ids(eng.matcher(c))
    a.accept_token(EOS)
    f = a.fork()
    assert f.is_terminated() and not f.accept_token(TOK[b" "])
    a.reset()
    assert a.num_tokens == 0 and not a.is_terminated() and _ids(a) == start
    assert a.accept_tokens(tb) == len(tb) and a.is_accepting()


@pytest.mark.parametrize(("spec", "want"), [("", {EOS}), ("a{0}", {EOS})])
def test_grammars_without_lexemes(spec: str, want: set[int]) -> None:
    """Regex ``""`` (only the empty string) allows EOS only, as naive and outlines do
    (an unproductive grammar, whose language is empty, is no Grammar: Unsatisfiable)."""
    eng = get_engine("llguidance", LEX)
    g = Grammar.from_regex(spec)
    naive = get_engine("naive", LEX)
    assert _ids(naive.matcher(naive.compile(g))) == want
    m = eng.matcher(eng.compile(g))
    assert _ids(m) == want and m.is_accepting() is bool(want)


@pytest.mark.parametrize("engine", ["llguidance", "outlines"])
def test_duplicate_token_bytes_are_all_allowed(engine: str) -> None:
    """Tokens with the same bytes share a trie node; the walks handle a node's first id
    without a branch and the others in a loop: every copy is in the mask, as naive has it."""
    toks = [b"", b"", b"a", b"ab", b"a", b"b", b"ab", b"ab", b"ba", b"c", b"b"]
    vocab = Vocabulary.from_tokens(toks, eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"},
                                   size=len(toks) + 2, name="dups")
    naive, ours = get_engine("naive", vocab), get_engine(engine, vocab)
    g = Grammar.from_regex("(ab|b)*a?")
    n, m = naive.matcher(naive.compile(g)), ours.matcher(ours.compile(RegexText("(ab|b)*a?")))
    for step in (None, 3, 5):  # then "ab", then "b"
        if step is not None:
            assert n.accept_token(step) and m.accept_token(step)
        want = _ids(n, vocab)
        assert _ids(m, vocab) == want, step
        assert {2, 4} | {3, 6, 7} | {5, 10} <= want  # every copy of a, ab and b


# ------------------------------------------------------------------- limits --

REC = 'start: "a" start | "b"\n'


@pytest.mark.parametrize(
    ("option", "value", "src", "fill_between"),
    [
        ("max_row_items", 12, REC, True),
        ("max_row_items", 12, REC, False),  # hit inside accept_token
        ("max_steps", 20, REC, True),
        ("max_steps", 20, REC, False),
        ("max_lexer_states", 2, JSON_LARK, True),
        ("max_lexer_states", 2, JSON_LARK, False),
    ],
)
def test_limits_are_sticky_errors_with_an_eos_only_mask(option: str, value: int, src: str, fill_between: bool) -> None:
    """Feed ``a`` (REC: thirty nested rules, completed at once by ``b``) or a JSON text;
    the limit is hit mid-decode, nothing raises, and the matcher stays in error."""
    g = Grammar.from_lark(src)
    eng = get_engine("llguidance", LEX, **{option: value})
    free = get_engine("llguidance", LEX)
    c, cf = eng.compile(g), free.compile(g)
    m, ref = eng.matcher(c), free.matcher(cf)
    tokens = [TOK[b"a"]] * 30 + [TOK[b"b"]] if src == REC else LEX.encode('{"ab": [1, "c"], "d": {}}')
    consumed = 0
    for t in tokens:
        if fill_between:
            got = _ids(m)
            if m.error is not None:
                break
            assert got == _ids(ref)
        ok = m.accept_token(t)
        if m.error is not None:
            assert not ok
            break
        assert ok and ref.accept_token(t)
        consumed += 1
    assert m.error is not None, f"{option}={value} was never hit"
    assert "LimitExceeded" in m.error and option in m.error and str(value) in m.error
    if option != "max_lexer_states":
        assert consumed > 0  # normal masks before the limit
    assert _ids(m) == {EOS}
    assert all(not m.accept_token(t) for t in (TOK[b"a"], TOK[b"b"], TOK[b"{"]))
    assert _ids(m) == {EOS} and "LimitExceeded" in m.error
    f = m.fork()
    assert f.error == m.error and _ids(f) == {EOS}
    if option == "max_lexer_states":
        return  # a per-grammar budget: every matcher of the grammar is now out of it
    # per mask / per row: a fresh matcher of the same compiled grammar is unaffected,
    # and reset clears the error
    fresh = eng.matcher(c)
    assert fresh.error is None and _ids(fresh) == _ids(free.matcher(cf))
    m.reset()
    assert m.error is None and _ids(m) == _ids(free.matcher(cf))
    assert m.accept_token(TOK[b"b"]) and m.is_accepting()


@pytest.mark.parametrize(
    "options",
    [
        {"slices": "bogus"}, {"slices": "json"}, {"whitespace": "tabs"},
        {"max_lexer_states": 0}, {"max_row_items": 0}, {"max_steps": -1}, {"mask_cache": 1},
        {"max_steps": 2.5}, {"max_row_items": True}, {"memo": "no"}, {"state_cache_bytes": -1},
    ],
)
def test_invalid_options_raise_value_error(options) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):  # the message names the option
        get_engine("llguidance", LEX, **options)


# --------------------------------------------------- compile inputs and stats --


def test_compile_inputs_stats_memory_and_describe() -> None:
    eng = get_engine("llguidance", LEX, slices=CUSTOM_SLICES, whitespace="compact")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    by_dict, by_text = eng.compile(schema), eng.compile(JsonSchemaText(json.dumps(schema)))
    by_rx, by_g = eng.compile(RegexText("[0-9]+")), eng.compile(Grammar.from_lark(JSON_LARK))
    assert isinstance(by_dict, LLGuidanceCompiled)
    assert (by_dict.kind, by_text.kind, by_rx.kind, by_g.kind) == ("json_schema", "json_schema", "regex", "grammar")
    for c in (by_dict, by_text):
        m = eng.matcher(c)
        ids = LEX.encode('{"a":12}')
        assert m.accept_tokens(ids) == len(ids) and m.is_accepting()
        m = eng.matcher(c)  # compact: no space after ':'
        assert m.accept_tokens([TOK[b'{"'], TOK[b"a"], TOK[b'":'], TOK[b" "]]) == 3
    with pytest.raises(UnsupportedGrammar):
        eng.compile(42)
    c = by_g
    st0 = c.stats()
    assert set(st0) == {
        "nonterminals", "dotted_rules", "lexemes", "lexeme_dfa_states", "lexer_states", "peak_row_items",
        "peak_steps", "state_cache_entries", "state_cache_hits", "memory_bytes", "grammar_s", "tables_s",
    }
    # value, object, pair, array, STRING NUMBER + five literals + the skip lexeme
    assert st0["lexemes"] >= 10 and st0["nonterminals"] >= 4 and st0["dotted_rules"] > st0["nonterminals"]
    assert st0["memory_bytes"] == c.memory_bytes() > 0
    m = eng.matcher(c)
    ids = LEX.encode('{"ab": [1, true]}')
    for t in ids:
        _row(m)
        assert m.accept_token(t)
    st1 = c.stats()
    assert st1["lexer_states"] > st0["lexer_states"] and st1["peak_row_items"] > 0 and st1["peak_steps"] > 0
    assert c.memory_bytes() >= st0["memory_bytes"]
    assert repr(c).startswith("LLGuidanceCompiled(kind='grammar'")
    d = eng.describe()
    assert d["options"] == {"slices": CUSTOM_SLICES, "whitespace": "compact", "spelling": "json", "max_lexer_states": 250_000,
                            "max_row_items": 10_000, "max_steps": 1_000_000,
                            "mask_cache": True, "state_cache_bytes": 64 << 20, "max_rules": 50_000,
                            "max_schema_depth": 100, "compile_timeout": 60.0, "memo": True}
    assert isinstance(d["version"], str) and d["version"]
    assert get_engine("llguidance", LEX).describe()["options"]["slices"] == "default"


# ----------------------------------------------------------------- Llama-3 --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.fixture(scope="module")
def llama_engines(llama3: Vocabulary) -> dict[str, LLGuidanceEngine]:
    return {s: get_engine("llguidance", llama3, slices=s) for s in ("default", "none")}


def test_llama3_slices_partition_the_text_tokens(llama3: Vocabulary, llama_engines) -> None:
    slicer = llama_engines["default"].slicer
    assert llama_engines["none"].slicer is None
    assert slicer.regexes == DEFAULT_SLICES and all(n > 0 for n in slicer.sizes) and slicer.rest > 0
    parts = [set(np.asarray(t.token_ids).tolist()) for t in slicer.set.tries]
    assert [len(p) for p in parts] == [*slicer.sizes, slicer.rest]
    text = set(llama3.text_token_ids().tolist())
    assert sum(len(p) for p in parts) == len(text) and set().union(*parts) == text  # disjoint, covering
    # each slice holds the tokens whose text its regex matches and no earlier one does
    rxs = [re.compile(rx) for rx in DEFAULT_SLICES]
    for t in sorted(text)[::7]:
        try:
            s = llama3.token_bytes[t].decode("utf-8")
        except UnicodeDecodeError:
            want = len(rxs)
        else:
            want = next((i for i, rx in enumerate(rxs) if rx.fullmatch(s)), len(rxs))
        assert t in parts[want], (llama3.token_bytes[t], want)


def _llama_walk(llama3: Vocabulary, engines, schema, text: str) -> list[MaskInfo]:
    """Both engines along ``text`` (then EOS): equal rows at each step; the infos."""
    a, b = (engines[s].matcher(engines[s].compile(schema)) for s in ("default", "none"))
    infos = []
    for t in [*llama3.encode(text), llama3.eos_ids[0]]:
        (ra, ia), (rb, ib) = _row(a, llama3), _row(b, llama3)
        assert not ib.sliced
        assert np.array_equal(ra, rb), (text, len(infos), _show(_as_ids(ra, llama3) ^ _as_ids(rb, llama3), llama3)[:8])
        infos.append(ia)
        assert a.accept_token(t) and b.accept_token(t), (text, llama3.token_bytes[t])
    return infos


def test_llama3_string_masks_are_sliced_dense_and_exact(llama3: Vocabulary, llama_engines) -> None:
    schema = {"type": "string"}
    quote = llama3.encode('"')
    assert len(quote) == 1
    m = llama_engines["default"].matcher(llama_engines["default"].compile(schema))
    plain = llama_engines["none"].matcher(llama_engines["none"].compile(schema))
    start, start_info = _row(m, llama3)
    # before the string only the whitespace slice fits (the skip lexeme): a sparse mask
    assert start_info.sliced and start_info.allowed < 0.02 * len(llama3.text_token_ids())
    assert np.array_equal(start, _row(plain, llama3)[0])
    assert m.accept_token(quote[0])
    row, info = _row(m, llama3)
    n_text = len(llama3.text_token_ids())
    assert info.sliced and info.allowed > 0.85 * n_text
    assert m.nodes_visited < n_text // 4  # most of the mask came without a walk
    assert plain.accept_token(quote[0])
    want, plain_info = _row(plain, llama3)
    assert not plain_info.sliced and np.array_equal(row, want)
    infos = _llama_walk(llama3, llama_engines, schema, '"hello, world: {\\"x\\": 1} \\u00e9 done"')
    assert sum(i.sliced for i in infos) >= len(infos) // 2  # not inside escapes


@pytest.mark.parametrize("max_length", [5, 12])
def test_llama3_bounded_strings_equal_unsliced(llama3: Vocabulary, llama_engines, max_length: int) -> None:
    """Slices of up to 10 characters fit a string only while 10 more may come."""
    schema = {"type": "string", "maxLength": max_length}
    infos = _llama_walk(llama3, llama_engines, schema, '"abcde"')  # '"' 'abc' 'de' '"'
    assert [i.sliced for i in infos[1:3]] == [max_length >= 10, False]  # 12 then 9 characters left
    for text in ('"a b"', '"' + "hello world"[:max_length] + '"', '""'):
        _llama_walk(llama3, llama_engines, schema, text)


@pytest.mark.parametrize(("schema", "text", "memo"), [
    ({"enum": ["Africa/Abidjan", "America/New_York", "Asia/Tokyo", "Europe/Paris"]}, '"Asia/Tokyo"', False),
    ({"type": "string", "maxLength": 3000}, '"' + "lorem ipsum dolor " * 6 + '"', True),
])
def test_llama3_slice_checks_small_and_memoized(llama3: Vocabulary, llama_engines, schema, text: str,
                                                memo: bool) -> None:
    """A slice check that ends within a few product pairs (an enum refuses most bytes)
    allocates no memo; one that outgrows its small table (the ``+`` slice against a
    3000-character bound) starts over with the memo.  Masks equal unsliced ones."""
    eng = llama_engines["default"]
    compiled = eng.compile(schema)
    m = eng.matcher(compiled)
    plain = llama_engines["none"].matcher(llama_engines["none"].compile(schema))
    for t in [*llama3.encode(text), llama3.eos_ids[0]]:
        assert np.array_equal(_row(m, llama3)[0], _row(plain, llama3)[0]), llama3.token_bytes[t]
        assert m.accept_token(t) and plain.accept_token(t)
    assert (compiled.tables.memo_bytes > 0) == memo


def test_llama3_mask_cache_serves_string_interiors_exactly(llama3: Vocabulary, llama_engines) -> None:
    """Inside a pattern-restricted string and a free one, most masks are cache copies,
    equal to the walked ones."""
    schema = {"type": "object", "required": ["k", "n"], "properties": {
        "k": {"type": "string", "pattern": "^[a-z_-]*$"}, "n": {"type": "string"}}}
    text = '{"k": "abc_def-ghi_jklmno_pqr_stu", "n": "Hello world, this is a test of the mask cache"}'
    on = llama_engines["default"]
    off = get_engine("llguidance", llama3, mask_cache=False)
    a, b = on.matcher(on.compile(schema)), off.matcher(off.compile(schema))
    tokens = [*llama3.encode(text), llama3.eos_ids[0]]
    for i, t in enumerate(tokens):
        ra, rb = _row(a, llama3)[0], _row(b, llama3)[0]
        assert np.array_equal(ra, rb), (i, _show(_as_ids(ra, llama3) ^ _as_ids(rb, llama3), llama3)[:8])
        assert a.accept_token(t) and b.accept_token(t)
    assert a.parser.cache_hits >= len(tokens) // 2 and b.parser.cache_hits == 0


# Five MaskBench schemas from different sources (cheap to compile in both engines).
MASKBENCH = ("BFCL_java_13", "Github_easy---o1114", "Kubernetes---kb_100_Normalized",
             "WashingtonPost---wp_28_Normalized", "MCPspec---InitializeResult")


@pytest.mark.parametrize("name", MASKBENCH)
def test_llama3_maskbench_masks_equal_peer_llguidance(llama3: Vocabulary, llama_engines, name: str) -> None:
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    item = load_item(require_shared(f"datasets/maskbench/{name}.json"))
    peer = get_engine("peer:llguidance", llama3)
    ours = llama_engines["default"]
    g = item.grammar()  # the same Grammar for both (the peer compiles g.to_lark())
    a, b = ours.compile(g), peer.compile(g)
    steps = 0
    for case in sorted(item.cases, key=lambda c: not c.valid):  # invalid ones until rejected
        ma, mb = ours.matcher(a), peer.matcher(b)
        for t in [*llama3.encode(case.text), llama3.eos_ids[0]]:
            (ra, _), (rb, _) = _row(ma, llama3), _row(mb, llama3)
            assert np.array_equal(ra, rb), (name, steps, _show(_as_ids(ra, llama3) ^ _as_ids(rb, llama3), llama3)[:8])
            oa, ob = ma.accept_token(t), mb.accept_token(t)
            assert oa == ob, (name, llama3.token_bytes[t])
            if not oa:
                assert not case.valid, (name, case.text)
                break
            steps += 1
    assert steps >= 10
