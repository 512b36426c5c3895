"""The peer engines (:mod:`strategies.peers`) against the ``naive`` oracle and on their own.

* **Agreement**: on a hand-made vocabulary, each peer's full bitmask row equals naive's
  at every step of valid walks (EOS step included), for every grammar whose language
  the peer shares with the Grammar IR.
* **Documented differences**: where a peer's language legitimately differs from the
  Grammar's, one test each, asserting the difference on a concrete example.
* **The real tokenizer** (tekken, padded so it has padding ids): llguidance forcing,
  each engine's own JSON-schema compiler, rollback / fork / reset.
* Options, ``describe()``, plugin names, errors, and the Matcher contract for
  outlines-core (which ``tests/conformance/test_contract.py`` cannot run, see there).
"""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata

import numpy as np
import pytest

from strategies import get_engine, registered_engines
from strategies.peers import JsonSchemaText, PeerError
from tests._support.fixtures import ARITH_LARK, JSON_LARK, SMALL_TOKENS, small_vocab
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError, UnsupportedGrammar
from toolkit.core.protocol import MaskEngine, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.ir import Grammar

LLG, XGR, OC = "peer:llguidance", "peer:xgrammar", "peer:outlines-core"
PEERS = (LLG, XGR, OC)
PACKAGES = {LLG: "llguidance", XGR: "xgrammar", OC: "outlines_core"}  # import and dist names
# the peers of the field issue: each has a test file of its own (tests/test_peer_*.py)
FIELD = {"peer:llama.cpp": "llama_cpp", "peer:lm-format-enforcer": "lmformatenforcer", "peer:glrmask": "glrmask"}
PACKAGES.update(FIELD)


def _require(name: str) -> None:
    if name in PACKAGES:
        pytest.importorskip(PACKAGES[name], reason=f"{name} needs {PACKAGES[name]} (the [peers] extra)")


# ------------------------------------------------------------ vocabularies --

# Id 0 is a special token that is not EOS, id 1 is EOS, then single characters and
# tokens that cross terminal boundaries ('{"', '": ', '", "', ...), a UTF-8 character
# and its two bytes as tokens of their own, and five padding ids.
SPECIAL, EOS = 0, 1
_SINGLE = [c.encode() for c in '{}[]",:()+-*/= \n0123456789abcefilnrstuxyz']
_MULTI = [
    b'{"', b'":', b'", "', b'": ', b'"}', b'", ', b", ", b"12", b"123", b"00", b"ab", b"abc",
    b"true", b"tr", b"ue", b"null", b"false", b"fal", b"se", b"((", b"))", b"()", b")(",
    b"+1", b"1+", b")*", b"[1", b"1]", b'"a', b'"ab', b"  ", b"= ", b" =",
    "é".encode(), b"\xc3", b"\xa9",
]  # fmt: skip
_TOKENS = [b"", b"", *_SINGLE, *_MULTI]
HAND = Vocabulary.from_tokens(
    _TOKENS, eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"}, size=len(_TOKENS) + 5, name="hand"
)
HAND_PAD = tuple(range(HAND.n_defined, HAND.size))
TOK = {b: i for i, b in enumerate(HAND.token_bytes) if b}

TEKKEN_SIZE = 131_072 + 28  # tekken defines 131072 ids: 28 padding ids, in a partial word


def _row(m: Matcher, vocab: Vocabulary = HAND) -> np.ndarray:
    row = bm.allocate(vocab.size)
    m.fill_bitmask(row)
    return row[0].copy()


def _ids(m: Matcher, vocab: Vocabulary = HAND) -> set[int]:
    return {int(i) for i in bm.allowed_ids(_row(m, vocab), vocab.size)}


def _show(ids: set[int], vocab: Vocabulary = HAND) -> list[bytes | str]:
    return sorted((vocab.token_bytes[i] or vocab.special_tokens.get(i, f"#{i}") for i in ids), key=repr)


def _eos(vocab: Vocabulary) -> int:
    return vocab.eos_ids[0]


def _walk(engine: MaskEngine, compiled, text: str, vocab: Vocabulary = HAND) -> list[set[int]]:
    """The masks before each token of ``text`` and before EOS; consumes EOS at the end."""
    m = engine.matcher(compiled)
    masks = []
    for t in [*vocab.encode(text), EOS]:
        masks.append(_ids(m, vocab))
        assert m.accept_token(t), f"{engine.name} rejected {vocab.token_bytes[t] or t!r} in {text!r}"
    return masks


def _engines_on(vocab: Vocabulary):
    """``get(name, **options)``: an engine on ``vocab``, made once per (name, options)."""
    made: dict[tuple[str, str], MaskEngine] = {}

    def get(name: str, **options) -> MaskEngine:
        key = (name, repr(sorted(options.items())))
        if key not in made:
            _require(name)
            made[key] = get_engine(name, vocab, **options)
        return made[key]

    return get


@pytest.fixture(scope="module")
def hand():
    """``hand(name, **options)``: an engine on HAND, made once per module."""
    return _engines_on(HAND)


@pytest.fixture(scope="module")
def tekken() -> Vocabulary:
    return load_vocab("tekken", size=TEKKEN_SIZE)


@pytest.fixture(scope="module")
def tek(tekken: Vocabulary):
    """``tek(name, **options)``: an engine on tekken, made once per module (xgrammar's
    TokenizerInfo over 131k tokens takes over a second)."""
    return _engines_on(tekken)


# --------------------------------------------------------------- agreement --

JSON_NO_WS = JSON_LARK.replace("%import common.WS\n%ignore WS\n", "")
ARITH_NO_WS = ARITH_LARK.replace('%ignore " "\n', "")
assert "%ignore" not in JSON_NO_WS + ARITH_NO_WS
KV_LARK = r"""
start: pair ("," pair)*
pair: KEY "=" VALUE
KEY: /[a-z]+/
VALUE: /[0-9]+/
%ignore " "
"""
LIST_LARK = r"""
start: "[" item ("," item)* "]"
item: NUMBER | WORD | "true"
NUMBER: /[0-9]+/
WORD: /[a-z]+/
"""
LITERALS_RE = r"(true|false|null)(,(true|false|null))*"

# name: (grammar, valid walks, engines whose masks equal naive's on every step).
# A peer missing from a row has a documented difference below (test_*_differs_*);
# ``outlines`` (ours) is in every regular row and compiles no recursive grammar.
OUT = "outlines"
AGREEMENT: dict[str, tuple[Grammar, tuple[str, ...], tuple[str, ...]]] = {
    # regular
    "regex-ident": (Grammar.from_regex(r"[a-c]+[0-9]*"), ("abc12", "a", "cab0"), (*PEERS, OUT)),
    "regex-object": (
        Grammar.from_regex(r'\{"[a-z]+": ?[0-9]+(, "[a-z]+": ?[0-9]+)*\}'),
        ('{"ab": 12}', '{"x":1, "yz": 123}'),
        (*PEERS, OUT),
    ),
    "regex-utf8": (Grammar.from_regex(r'"[a-cé]*"'), ('"aé"', '""', '"éé"'), (*PEERS, OUT)),
    "lark-list": (Grammar.from_lark(LIST_LARK), ("[1,ab,true]", "[true]", "[123]"), (*PEERS, OUT)),
    # regular, but outlines-core drops tokens leaving an accepting state (see below)
    "regex-literals": (Grammar.from_regex(LITERALS_RE), ("true", "null,false,true"), (LLG, XGR, OUT)),
    "lark-kv-ignore": (Grammar.from_lark(KV_LARK), ("a=1", "ab = 12 , c=3", " x=0 ", "a=1 "), (LLG, XGR, OUT)),
    # context-free
    "json-no-ws": (Grammar.from_lark(JSON_NO_WS), ('{"abc":[123,true]}', "[]", '{"a":{"b":null},"c":[1,[2]]}'), (LLG, XGR)),
    "json-ignore-ws": (Grammar.from_lark(JSON_LARK), ('{"abc": [123, true]}', " [ ] ", '\n{"a": {"b": null}}'), (XGR,)),
    "parens": (Grammar.from_lark('start: pair*\npair: "(" start ")"\n'), ("()", "(())()", "((()))", ""), (LLG, XGR)),
    "arith-no-ws": (Grammar.from_lark(ARITH_NO_WS), ("1+2*3", "(12-3)/-4", "((1))"), (LLG, XGR)),
    "arith-ignore-ws": (Grammar.from_lark(ARITH_LARK), ("1 + 2*3", " (12 - 3) / -4 ", "((1))"), (LLG, XGR)),
}


@pytest.mark.parametrize(
    ("case", "peer"), [(c, p) for c, (_, _, peers) in AGREEMENT.items() for p in peers]
)
def test_peer_masks_equal_naive_masks_at_every_step(hand, case: str, peer: str) -> None:
    grammar, walks, _ = AGREEMENT[case]
    eng, oracle = hand(peer), hand("naive")
    if peer == LLG:
        assert eng.forcing is False
    compiled, reference = eng.compile(grammar), oracle.compile(grammar)
    for text in walks:
        ids = [*HAND.encode(text), EOS]
        pm, om = eng.matcher(compiled), oracle.matcher(reference)
        for k, t in enumerate(ids):
            got, want = _row(pm), _row(om)
            if not np.array_equal(got, want):
                a, b = set(bm.allowed_ids(got, HAND.size).tolist()), set(bm.allowed_ids(want, HAND.size).tolist())
                pytest.fail(
                    f"{peer} on {case}, {text!r} after {HAND.decode(ids[:k])!r}: "
                    f"peer only {_show(a - b)}, naive only {_show(b - a)}"
                )
            assert bm.get_bit(want, t)
            assert pm.accept_token(t) and om.accept_token(t)
        assert bm.get_bit(want, EOS)  # the last step is the EOS one
        assert pm.is_terminated() and _ids(pm) == {EOS}


# ---------------------------------------------------- documented differences --


def test_llguidance_differs_no_ignored_text_after_the_last_lexeme(hand) -> None:
    """llguidance lexes ``%ignore`` text as a skip lexeme that must be followed by another
    lexeme.  Where the grammar is complete and nothing can follow (after the closing
    ``}`` of a JSON value), it allows only EOS, while the Grammar (naive, xgrammar)
    allows trailing whitespace.  Where another lexeme may follow (an operator after
    ``1`` in arithmetic), trailing whitespace is allowed, so ``arith-ignore-ws`` agrees."""
    llg, naive = hand(LLG), hand("naive")
    g = Grammar.from_lark(JSON_LARK)
    ws = {TOK[b" "], TOK[b"  "], TOK[b"\n"]}
    cl, cn = llg.compile(g), naive.compile(g)
    for text in ('{"abc": [123, true]}', " [ ]", "\n1"):
        got, want = _walk(llg, cl, text), _walk(naive, cn, text)
        assert got[:-1] == want[:-1]  # the same masks up to the last step ...
        assert EOS in got[-1] and want[-1] - got[-1] == ws  # ... where only naive allows whitespace
        assert got[-1] <= want[-1]
    ab = Grammar.from_lark('%ignore " "\nstart: "a" "b"\n')
    m = llg.matcher(llg.compile(ab))
    assert m.accept_token(TOK[b"ab"]) and _ids(m) == {EOS} and not m.accept_token(TOK[b" "])
    assert ab.accepts("ab ")
    # With an optional lexeme still to come, the same position allows the space.
    abc = Grammar.from_lark('%ignore " "\nstart: "a" "b" "c"?\n')
    m = llg.matcher(llg.compile(abc))
    assert m.accept_token(TOK[b"ab"]) and TOK[b" "] in _ids(m)
    a = Grammar.from_lark(ARITH_LARK)
    m = llg.matcher(llg.compile(a))
    assert m.accept_token(TOK[b"1"]) and TOK[b" "] in _ids(m) and m.accept_token(TOK[b" "])
    assert EOS in _ids(m)


def test_llguidance_differs_its_json_strings_refuse_del() -> None:
    """llguidance's own JSON Schema compiler leaves U+007F (DEL) out of a string's
    unescaped characters; JSON (RFC 8259) and masklab's schema compiler take it."""
    _require(LLG)
    v = Vocabulary.from_tokens([b"", b'"', b"a", b"\x7f", b"\x1f"], eos_ids=(0,), special_tokens={0: "</s>"},
                               name="del")
    llg, naive = get_engine(LLG, v), get_engine("naive", v)
    schema = {"type": "string"}
    m, n = llg.matcher(llg.compile(JsonSchemaText(json.dumps(schema)))), naive.matcher(
        naive.compile(Grammar.from_json_schema(schema)))
    assert m.accept_token(1) and n.accept_token(1)
    row = bm.allocate(v.size)
    n.fill_bitmask(row)
    assert set(bm.allowed_ids(row[0], v.size).tolist()) == {1, 2, 3}  # ", a and DEL; not U+001F
    m.fill_bitmask(row)
    assert set(bm.allowed_ids(row[0], v.size).tolist()) == {1, 2}


def test_llguidance_differs_it_lexes_greedily(hand) -> None:
    """llguidance's lexer ends a lexeme only where the next byte cannot extend it, so
    two adjacent terminals never split where the first could go on."""
    llg, xgr, naive = hand(LLG), hand(XGR), hand("naive")
    # start: N N -- "12" is N="1" N="2" for the Grammar; llguidance reads one N "12".
    nn = Grammar.from_lark("start: N N\nN: /[0-9]+/\n")
    masks = {}
    for e in (naive, xgr, llg):
        m = e.matcher(e.compile(nn))
        assert m.accept_token(TOK[b"12"])
        masks[e.name] = _ids(m)
    assert EOS in masks["naive"] and masks[XGR] == masks["naive"]
    assert masks[LLG] == masks["naive"] - {EOS}  # never accepting: no second N without a break
    # start: A B, A: /a+/, B: /ab/ -- after "aa" the Grammar allows "b" (A="a", B="ab");
    # llguidance has A="aa" and can only extend it.
    ab = Grammar.from_lark("start: A B\nA: /a+/\nB: /ab/\n")
    masks = {}
    for e in (naive, xgr, llg):
        m = e.matcher(e.compile(ab))
        assert m.accept_tokens([TOK[b"a"], TOK[b"a"]]) == 2
        masks[e.name] = _ids(m)
    assert masks["naive"] == masks[XGR] == {TOK[b"a"], TOK[b"b"], TOK[b"ab"]}
    assert masks[LLG] == {TOK[b"a"]}
    assert ab.accepts("aab")


def test_leading_ignored_text_needs_allow_initial_skip(hand) -> None:
    """As shipped, llguidance and xgrammar refuse ``%ignore`` text before the first
    lexeme; the Grammar allows it.  The adapters switch on each engine's
    ``allow_initial_skip`` for grammars with ignore terminals, so they agree with naive."""
    llg, xgr, naive = hand(LLG), hand(XGR), hand("naive")
    import llguidance
    import xgrammar

    from strategies.peers import PeerCompiled

    g = Grammar.from_lark(JSON_LARK)
    start = _ids(naive.matcher(naive.compile(g)))
    ws = {TOK[b" "], TOK[b"  "], TOK[b"\n"]}
    assert ws <= start
    # What the adapters compiled before they set the option (llguidance without forcing).
    lark = '%llguidance {"no_forcing": true}\n' + g.to_lark()
    shipped = {
        LLG: PeerCompiled(llguidance.LLMatcher(llg.tokenizer, lark, log_level=0), lark, "lark"),
        XGR: PeerCompiled(xgr.compiler.compile_grammar(xgrammar.Grammar.from_lark(g.to_lark(boolean="regex"))), "", "lark"),
    }
    for e in (llg, xgr):
        assert _ids(e.matcher(shipped[e.name])) == start - ws
        compiled = e.compile(g)
        assert "allow_initial_skip" in compiled.source
        assert _ids(e.matcher(compiled)) == start
    # No ignore terminals, no option: the Lark text is the grammar's own.
    assert "allow_initial_skip" not in xgr.compile(Grammar.from_lark(JSON_NO_WS)).source


def test_outlines_core_differs_tokens_leaving_an_accepting_state(hand) -> None:
    """outlines-core 0.2.14 drops token ``t`` at a prefix ``p`` when ``p + t[:-1]`` is a
    complete match, whether ``p + t`` is one or not.  Its ``Index`` walks regex-automata's DFA, which
    reports a match one byte late: the state after ``t`` is a *match state* (for
    ``p + t[:-1]``), and the index keeps a token only when its end state is not a
    match state or is one at end of input.  So after ``true`` in
    ``(true|false|null)(,(true|false|null))*`` the one-byte ``,`` is missing (EOS only),
    while a longer token that passes through the accepting point is kept (``, `` after
    ``a=1`` where ``,`` is not)."""
    oc, naive = hand(OC), hand("naive")
    lit = Grammar.from_regex(LITERALS_RE)
    m, n = oc.matcher(oc.compile(lit)), naive.matcher(naive.compile(lit))
    assert m.accept_token(TOK[b"true"]) and n.accept_token(TOK[b"true"])
    assert _ids(n) == {EOS, TOK[b","]}
    assert _ids(m) == {EOS}
    assert not m.accept_token(TOK[b","])  # "true,null" cannot be written with this vocabulary
    kv = Grammar.from_lark(KV_LARK)
    m, n = oc.matcher(oc.compile(kv)), naive.matcher(naive.compile(kv))
    for x in (m, n):
        assert x.accept_tokens(HAND.encode("a=1")) == 3
    assert _ids(n) - _ids(m) == {TOK[b","]}
    assert {TOK[b", "], TOK[b" "], TOK[b"1"]} <= _ids(m)
    # The whole token may end in a match too: ``abc`` in ``ab|abc`` passes the match
    # ``ab`` one byte before its end, and is dropped.
    ab = Grammar.from_regex("ab|abc")
    m, n = oc.matcher(oc.compile(ab)), naive.matcher(naive.compile(ab))
    assert {TOK[b"ab"], TOK[b"abc"]} <= _ids(n)
    assert TOK[b"ab"] in _ids(m) and TOK[b"abc"] not in _ids(m)
    # Walks where no token leaves an accepting state agree (the PEERS rows above).


def test_outlines_core_differs_it_refuses_dead_end_tokens(hand) -> None:
    """outlines-core refuses to build an index when a token leads into a state that no
    token continues: ``small_vocab`` has ``tr`` but neither ``u`` nor ``ue``.  The other
    engines allow ``tr`` (a byte-level viable prefix), as the protocol's masks do."""
    _require(OC)
    vocab = small_vocab()
    g = Grammar.from_regex("true|null")
    with pytest.raises(PeerError, match="incompatible with the regex"):
        get_engine(OC, vocab).compile(g)
    tr = SMALL_TOKENS.index(b"tr")
    for name in ("naive", LLG, XGR):
        _require(name)
        e = get_engine(name, vocab)
        assert bm.get_bit(_row(e.matcher(e.compile(g)), vocab), tr)


# ------------------------------------------------------------- tekken: forcing --


def test_llguidance_forcing_narrows_to_the_canonical_token(tekken, tek) -> None:
    """``"April" | "August"`` after ``Ap`` (one tekken token): the rest, ``ril``, is forced.
    forcing=False allows every token that keeps the output valid (``r``, ``ri``, ``ril``,
    like naive and xgrammar); forcing=True (llguidance as shipped) allows only the
    canonical tokenization of the forced bytes, ``ril``."""
    g = Grammar.from_lark('start: "April" | "August"\n')
    ap = tekken.encode("Ap")
    assert len(ap) == 1
    r, ri, ril = (tekken.encode(s) for s in ("r", "ri", "ril"))
    assert len(r) == len(ri) == len(ril) == 1  # all three are tokens of tekken
    r, ri, ril = r[0], ri[0], ril[0]
    assert len(tekken.encode("April")) == 1  # canonical "April" is one token: not reachable after "Ap"

    def after(engine: MaskEngine, prefix: list[int]) -> tuple[Matcher, set[int]]:
        m = engine.matcher(engine.compile(g))
        assert m.accept_tokens(prefix) == len(prefix)
        return m, _ids(m, tekken)

    free, free_mask = after(tek(LLG), ap)
    forced, forced_mask = after(tek(LLG, forcing=True), ap)
    assert free_mask == {r, ri, ril}
    assert after(tek("naive"), ap)[1] == after(tek(XGR), ap)[1] == free_mask
    assert forced_mask == {ril}
    # Only the mask is narrowed: accept_token is llguidance's try_consume_tokens, which
    # takes any token the grammar allows, so with forcing=True it accepts "r" although the
    # mask left it out (the protocol's "accept_token is False where the mask is 0" holds
    # for forcing=False only; the harness checks the mask bit itself).
    assert forced.accept_token(r) and free.accept_token(r)
    forced.rollback(1)
    assert forced.accept_token(ril) and _ids(forced, tekken) == {_eos(tekken)}
    # Nothing is forced while both words are open: after "A" the masks are the same.
    a = tekken.encode("A")
    assert after(tek(LLG), a)[1] == after(tek(LLG, forcing=True), a)[1]
    assert tek(LLG, forcing=True).describe()["options"]["forcing"] is True


# ------------------------------------------------- tekken: native JSON schemas --

SCHEMAS = {
    "object": (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "role": {"enum": ["admin", "user"]},
            },
            "required": ["name", "age", "role"],
        },
        {"name": "Ada Lovelace", "age": 36, "role": "admin"},
        {"name": "Ada", "age": 36, "role": "root"},
    ),
    "array": ({"type": "array", "items": {"type": "integer"}, "minItems": 1}, [1, 22, 333], [1, "2"]),
    "nested": (
        {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "owner": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}},
                    "required": ["name", "ok"],
                },
            },
            "required": ["id", "tags", "owner"],
        },
        {"id": 7, "tags": ["x", "yz"], "owner": {"name": "Bo", "ok": True}},
        {"id": 7, "tags": ["x"], "owner": {"name": "Bo", "ok": 1}},
    ),
}


@pytest.mark.parametrize("schema_name", list(SCHEMAS))
@pytest.mark.parametrize("peer", PEERS)
def test_native_json_schema_on_tekken(tekken, tek, peer: str, schema_name: str) -> None:
    schema, valid, invalid = SCHEMAS[schema_name]
    eng = tek(peer)
    compiled = eng.compile(schema)
    assert compiled.kind == "json_schema"
    eos = _eos(tekken)
    not_text = ~tekken.text_token_mask()
    assert not_text[tekken.n_defined :].all() and tekken.n_defined < tekken.size  # padding ids exist
    ids = tekken.encode(json.dumps(valid))
    m = eng.matcher(compiled)
    for k, t in enumerate([*ids, eos]):
        row = _row(m, tekken)
        outside = set(np.flatnonzero(bm.to_bool(row, tekken.size) & not_text).tolist())
        # never a special or padding id; EOS exactly at the end
        assert outside == ({eos} if k == len(ids) else set()), (k, len(ids), sorted(outside)[:5])
        assert bm.get_bit(row, t) and m.accept_token(t), (k, tekken.token_bytes[t])
    assert m.is_terminated()
    bad = [*tekken.encode(json.dumps(invalid)), eos]
    assert eng.matcher(compiled).validate_tokens(bad) < len(bad)


# ---------------------------------------------- tekken: rollback, fork, reset --


@pytest.mark.parametrize("peer", PEERS)
def test_rollback_fork_reset_on_tekken(tekken, tek, peer: str) -> None:
    schema, valid, _ = SCHEMAS["nested"]
    eng = tek(peer)
    compiled = eng.compile(schema)
    ids = tekken.encode(json.dumps(valid))
    m = eng.matcher(compiled)
    start = _row(m, tekken)
    rows = []
    for t in ids:
        rows.append(_row(m, tekken))
        assert m.accept_token(t)
    rows.append(_row(m, tekken))
    # fork mid-way: the fork goes on alone, the original is unchanged
    m.rollback(len(ids) - 5)
    assert np.array_equal(_row(m, tekken), rows[5])
    f = m.fork()
    assert np.array_equal(_row(f, tekken), rows[5])
    assert f.accept_tokens([*ids[5:], _eos(tekken)]) == len(ids) - 5 + 1 and f.is_terminated()
    assert np.array_equal(_row(m, tekken), rows[5]) and not m.is_terminated() and m.num_tokens == 5
    # ... and the original can take another way than the fork
    assert m.accept_tokens(ids[5:8]) == 3 and np.array_equal(_row(m, tekken), rows[8])
    # rollback(n) restores each mask on the way back
    for k in (7, 6, 2, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m, tekken), rows[k]), k
    assert f.is_terminated()  # untouched by the original's rollbacks
    # reset: back to the start mask, also from a terminated fork
    f.reset()
    assert not f.is_terminated() and f.num_tokens == 0 and np.array_equal(_row(f, tekken), start)
    assert f.accept_tokens(ids) == len(ids) and f.is_accepting()


# -------------------------------------------------------------------- options --

OBJ_A = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _accepts(engine: MaskEngine, spec, text: str) -> bool:
    ids = [*engine.vocab.encode(text), _eos(engine.vocab)]
    return engine.matcher(engine.compile(spec)).validate_tokens(ids) == len(ids)


def test_xgrammar_strict_mode_closes_objects(hand) -> None:
    strict, loose = hand(XGR), hand(XGR, strict_mode=False)
    assert strict.describe()["options"]["strict_mode"] is True
    assert loose.describe()["options"]["strict_mode"] is False
    for e in (strict, loose):
        assert _accepts(e, OBJ_A, '{"a": 1}')
    assert not _accepts(strict, OBJ_A, '{"a": 1, "b": 2}')
    assert _accepts(loose, OBJ_A, '{"a": 1, "b": 2}')
    # Shipped defaults differ: llguidance follows JSON Schema (extra properties allowed
    # unless additionalProperties says no), outlines-core closes objects like strict xgrammar.
    assert _accepts(hand(LLG), OBJ_A, '{"a": 1, "b": 2}')
    assert not _accepts(hand(OC), OBJ_A, '{"a": 1, "b": 2}')


def test_xgrammar_any_whitespace(hand) -> None:
    flexible, fixed = hand(XGR), hand(XGR, any_whitespace=False)
    assert _accepts(flexible, OBJ_A, '{"a":  1}') and _accepts(flexible, OBJ_A, '{"a":1}')
    assert _accepts(fixed, OBJ_A, '{"a": 1}')  # its one layout: ", " and ": "
    assert not _accepts(fixed, OBJ_A, '{"a":  1}') and not _accepts(fixed, OBJ_A, '{"a":1}')
    assert fixed.describe()["options"]["any_whitespace"] is False


def test_outlines_core_whitespace_pattern(hand) -> None:
    default, spaces = hand(OC), hand(OC, whitespace_pattern=r"[ ]*")
    assert _accepts(default, OBJ_A, '{"a": 1}') and _accepts(default, OBJ_A, '{"a":1}')
    assert not _accepts(default, OBJ_A, '{"a":  1}')  # outlines-core's own "[ ]?"
    assert _accepts(spaces, OBJ_A, '{"a":  1}')
    assert spaces.describe()["options"]["whitespace_pattern"] == r"[ ]*"


def test_llguidance_json_options(hand) -> None:
    compact = hand(LLG, json_options={"whitespace_flexible": False})
    assert _accepts(hand(LLG), OBJ_A, '{"a":  1}')
    assert _accepts(compact, OBJ_A, '{"a":1}') and not _accepts(compact, OBJ_A, '{"a": 1}')
    assert compact.describe()["options"]["json_options"] == {"whitespace_flexible": False}


def test_llguidance_without_slices_gives_the_same_masks(tekken, tek) -> None:
    schema, valid, _ = SCHEMAS["object"]
    default, plain = tek(LLG), tek(LLG, slices="none")
    assert plain.describe()["options"]["slices"] == "none"
    ids = [*tekken.encode(json.dumps(valid)), _eos(tekken)]
    a, b = default.matcher(default.compile(schema)), plain.matcher(plain.compile(schema))
    for t in ids:
        assert np.array_equal(_row(a, tekken), _row(b, tekken))
        assert a.accept_token(t) and b.accept_token(t)


@pytest.mark.parametrize("peer", PEERS)
def test_describe_reports_version_and_options(hand, peer: str) -> None:
    d = hand(peer).describe()
    assert d["version"] == metadata.version(PACKAGES[peer])
    expected = {
        LLG: {"forcing": False, "slices": "default"},
        XGR: {"strict_mode": True, "any_whitespace": True, "cache": False, "max_threads": 1},
        OC: {"whitespace_pattern": None, "max_depth": None},
    }[peer]
    assert d["options"] == expected
    json.dumps(d)  # the harness records it as JSON


def test_plugin_names_and_unknown_names() -> None:
    _require(LLG)
    _require(XGR)
    e = get_engine("tests._support.plugins:llguidance_forcing", HAND, slices="none")
    assert e.name == LLG and e.describe()["options"] == {"forcing": True, "slices": "none"}
    # forcing is on: the forced "ab" narrows the mask to its canonical token
    assert _ids(e.matcher(e.compile(Grammar.from_regex("ab")))) == {TOK[b"ab"]}
    free = get_engine(LLG, HAND)
    assert _ids(free.matcher(free.compile(Grammar.from_regex("ab")))) == {TOK[b"a"], TOK[b"ab"]}
    x = get_engine("strategies.peers:XGrammarEngine", HAND, strict_mode=False)  # a class is a factory too
    assert x.name == XGR and x.describe()["options"]["strict_mode"] is False
    with pytest.raises(ValueError, match="has no 'nope'"):
        get_engine("tests._support.plugins:nope", HAND)
    # "peer:outlines_core" has the shape of a plugin name (module "peer"): still a
    # misspelt engine name, not an ImportError
    for typo in ("peer:outlines_core", "no-such-engine"):
        with pytest.raises(ValueError, match="unknown engine") as info:
            get_engine(typo, HAND)
        assert repr(typo) in str(info.value)
        for name in registered_engines():
            assert name in str(info.value)
    assert set(PEERS) <= set(registered_engines())


# --------------------------------------------------------------------- errors --


@pytest.mark.parametrize("peer", PEERS)
def test_engine_refusals_are_peer_errors_with_the_engine_message(hand, peer: str) -> None:
    eng = hand(peer)
    with pytest.raises(PeerError) as info:
        eng.compile({"type": "frobnicate"})
    assert isinstance(info.value, MasklabError)
    assert str(info.value).startswith(peer) and "frobnicate" in str(info.value)
    parse = {LLG: "failed to parse", XGR: "Failed to parse JSON", OC: "Expected a valid JSON string"}[peer]
    with pytest.raises(PeerError, match=parse):
        eng.compile(JsonSchemaText("{not json"))
    with pytest.raises(PeerError):
        eng.compile({"type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}})


@pytest.mark.parametrize("peer", PEERS)
def test_other_arguments_are_unsupported_grammars(hand, peer: str) -> None:
    eng = hand(peer)
    for spec in ("start: x", b"{}", 42, None, ["a"]):
        with pytest.raises(UnsupportedGrammar, match="JSON schema"):
            eng.compile(spec)


def test_outlines_core_recursion_needs_max_depth(hand) -> None:
    parens = AGREEMENT["parens"][0]
    with pytest.raises(UnsupportedGrammar, match="recursive"):
        hand(OC).compile(parens)
    unrolled = hand(OC, max_depth=2)
    compiled = unrolled.compile(parens)
    assert compiled.kind == "regex"

    def accepts(text: str) -> bool:
        ids = [*HAND.encode(text), EOS]
        return unrolled.matcher(compiled).validate_tokens(ids) == len(ids)

    # A subset of the language: nesting up to the depth, not deeper.
    assert accepts("()") and accepts("(())") and accepts("(()())")
    assert parens.accepts("((()))") and not accepts("((()))")


# ------------------------------------------ the Matcher contract, outlines-core --

IDENT = Grammar.from_regex(r"[a-c]+[0-9]*")
OBJECT = AGREEMENT["regex-object"][0]


@pytest.mark.parametrize("name", ["naive", *PEERS, *FIELD, "outlines"])
def test_contract_on_regular_grammars(hand, name: str) -> None:
    """tests/conformance/test_contract.py's checks on regular grammars, so outlines-core (and our
    ``outlines``, which compiles no recursive grammar) are held to them."""
    eng = hand(name)
    m = eng.matcher(eng.compile(OBJECT))
    # fill overwrites the whole row and nothing else; no special, EOS or padding bit
    rows = np.full((3, bm.words(HAND.size)), -1, dtype=np.int32)
    info = m.fill_bitmask(rows, 1)
    assert info.allowed == bm.popcount(rows[1]) == 2  # "{" and '{"'
    assert (rows[0] == -1).all() and (rows[2] == -1).all()
    allowed = set(bm.allowed_ids(rows[1], bm.words(HAND.size) * 32).tolist())
    assert allowed == {TOK[b"{"], TOK[b'{"']}
    # rejected tokens leave the state unchanged
    before = _ids(m)
    for bad in (TOK[b"}"], SPECIAL, EOS, *HAND_PAD, HAND.size, -1, 10_000):
        assert not m.accept_token(bad)
    assert _ids(m) == before
    # rollback restores masks; validate has no side effect
    seq = HAND.encode('{"x":1, "yz": 123}')
    masks = []
    for t in seq:
        masks.append(_ids(m))
        assert t in masks[-1] and EOS not in masks[-1]
        assert m.accept_token(t)
    assert m.is_accepting() and EOS in _ids(m)
    for k in range(len(seq), 0, -1):
        m.rollback(1)
        assert _ids(m) == masks[k - 1]
    assert m.validate_tokens([*seq, TOK[b"}"]]) == len(seq) and _ids(m) == masks[0]
    with pytest.raises(ValueError):
        m.rollback(1)
    # fork is independent; reset goes back to the start
    assert m.accept_tokens(seq[:3]) == 3
    f = m.fork()
    assert _ids(f) == _ids(m) == masks[3]
    assert f.accept_tokens(seq[3:]) == len(seq) - 3 and f.is_accepting()
    assert not m.is_accepting() and _ids(m) == masks[3]
    f.reset()
    assert f.error is None and f.num_tokens == 0 and _ids(f) == masks[0]
    # EOS exactly when accepting, then terminated
    m = eng.matcher(eng.compile(IDENT))
    assert not m.accept_token(EOS) and EOS not in _ids(m)
    assert m.accept_token(TOK[b"a"]) and m.is_accepting() and EOS in _ids(m)
    assert m.accept_token(TOK[b"b"]) and EOS in _ids(m) and not m.is_terminated()
    assert m.accept_token(EOS) and m.is_terminated() and _ids(m) == {EOS}
    assert not m.accept_token(TOK[b"c"]) and m.accept_token(EOS)
    m.rollback(2)
    assert not m.is_terminated() and TOK[b"c"] in _ids(m)


def test_available_engines_checks_what_a_factory_requires(monkeypatch: pytest.MonkeyPatch) -> None:
    import strategies

    monkeypatch.setitem(strategies._REGISTRY, "needs-missing", "tests._support.plugins:needs_missing_package")
    assert "needs-missing" in strategies.registered_engines()
    assert "needs-missing" not in strategies.available_engines()
    for name in ("peer:llguidance", "peer:xgrammar", "peer:outlines-core"):
        dist = {"peer:outlines-core": "outlines_core"}.get(name, name.split(":")[1])
        assert (name in strategies.available_engines()) == (importlib.util.find_spec(dist) is not None)


def test_memory_is_the_engines_own_figure_or_none() -> None:
    from strategies.peers import PeerCompiled

    assert PeerCompiled(None, "", "lark", 1234).memory_bytes() == 1234
    with pytest.raises(NotImplementedError, match="does not report"):
        PeerCompiled(None, "", "lark").memory_bytes()


def test_outlines_core_rolls_back_past_its_window_and_reserves_little() -> None:
    """``peer:outlines-core``'s Guide keeps ROLLBACK_WINDOW states (it reserved 1 << 30,
    4 GiB of address space per matcher); ``rollback(n)`` past the window replays the kept
    tokens, so any accepted prefix can still be taken back.  Under an 8 GB address-space
    cap a hundred matchers fit (the second one aborted the process before)."""
    import subprocess
    import sys

    _require(OC)
    from strategies.peers import ROLLBACK_WINDOW

    engine = get_engine(OC, HAND)
    compiled = engine.compile(Grammar.from_regex("[a-z]{0,700}"))
    n = ROLLBACK_WINDOW + 40
    text = ("abc" * n)[:n]
    m = engine.matcher(compiled)
    rows = []
    for ch in text:
        rows.append(_ids(m))
        assert m.accept_token(TOK[ch.encode()])
    for keep in (n - 3, n - 3 - ROLLBACK_WINDOW + 1, 5, 0):  # in the window, past it, past it again, all
        m.rollback(len(m._tokens) - keep)
        assert _ids(m) == rows[keep], keep
        fresh = engine.matcher(compiled)
        for ch in text[:keep]:
            assert fresh.accept_token(TOK[ch.encode()])
        assert np.array_equal(_row(fresh), _row(m))
    assert m.accept_token(TOK[b"z"]) and m.rollback(1) is None and _ids(m) == rows[0]
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n"
            "from strategies import get_engine\nfrom toolkit.grammar.ir import Grammar\n"
            "from tests.test_peers import HAND\n"
            "e = get_engine('peer:outlines-core', HAND); c = e.compile(Grammar.from_regex('[a-z]+'))\n"
            "ms = [e.matcher(c) for _ in range(100)]\nprint(len(ms))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "100", done.stderr[-2000:]
