"""``peer:lm-format-enforcer`` (:mod:`strategies.peer_lmfe`) against the oracles, and
every way LM-format-enforcer's language differs, each on a concrete example.

* **Agreement** on ``tests/test_peers.py``'s hand vocabulary: on the regular grammars,
  given as a :class:`Grammar` (through :meth:`Grammar.to_regex`) and as a regex LMFE
  reads itself, every bitmask row equals ``naive``'s at every step of valid walks.
* **Documented differences**: the tokens LMFE cannot express, the adapter's alphabet,
  and LMFE's JSON language (whitespace limit, raw control characters, number formats,
  trailing commas, objects, arrays, escapes, ignored keywords, keywords that fail only
  when the walk reaches them), on a small JSON vocabulary (``JV``).
* **Llama-3** (``shared``): native JSON Schema against our ``llguidance`` on three
  schemas of ``datasets/schemas``, every differing token put in a named class; rollback,
  fork and reset; the bitmask mode; the harness and the direct check.
* Options, errors, logging.
"""

from __future__ import annotations

import json
import logging
import re
from importlib import metadata

import numpy as np
import pytest

from strategies import check_options, get_engine
from strategies.peers import JsonSchemaText, PeerError
from tests._support.shared import require_shared
from tests.test_peers import AGREEMENT, EOS, HAND, OUT, SCHEMAS, TOK, _ids, _row, _show
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError, UnsupportedGrammar
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.ir import Grammar, RegexText

lmformatenforcer = pytest.importorskip("lmformatenforcer", reason="peer:lm-format-enforcer needs lm-format-enforcer "
                                                                  "(the [peers] extra)")

LMFE = "peer:lm-format-enforcer"
WS = b" \t\n\r"

# A small JSON vocabulary: id 0 special, id 1 EOS, single characters (tab, newline and a
# backslash among them), tokens that open a string with a raw newline, hold an escape
# start or close a string mid-token, a run of 13 spaces, é whole and as its two bytes.
_JV_SINGLE = [c.encode() for c in '{}[]",:.-+eE0123456789abcdefghijklmnopqrstuvwxyz \t\n\r\\']
_JV_MULTI = [b'"\n', b'\\u', b'.",', b'",', b'"}', b"true", b"false", b"null", b"  ", b" " * 13,
             "é".encode(), b"\xc3", b"\xa9"]
_JV_TOKENS = [b"", b"", *_JV_SINGLE, *_JV_MULTI]
JV = Vocabulary.from_tokens(_JV_TOKENS, eos_ids=(1,), special_tokens={0: "<s>", 1: "</s>"},
                            size=len(_JV_TOKENS) + 3, name="jv")
JT = {b: i for i, b in enumerate(JV.token_bytes) if b}


@pytest.fixture(scope="module")
def lm():
    """``lm(vocab, **options)``: an engine, made once per (vocabulary, options)."""
    made: dict[tuple[str, str], object] = {}

    def get(vocab: Vocabulary = HAND, **options):
        key = (vocab.name, repr(sorted(options.items())))
        if key not in made:
            made[key] = get_engine(LMFE, vocab, **options)
        return made[key]

    return get


def _accepts(engine, spec, text: str) -> bool:
    """Whether ``text`` (the vocabulary's greedy tokens) then EOS is accepted."""
    vocab = engine.vocab
    ids = [*vocab.encode(text), vocab.eos_ids[0]]
    return engine.matcher(engine.compile(spec)).validate_tokens(ids) == len(ids)


def _after(engine, spec, tokens: list[bytes]) -> set[bytes]:
    """The allowed tokens (bytes; EOS as ``b"</s>"``) after accepting ``tokens``."""
    m = engine.matcher(engine.compile(spec))
    vocab = engine.vocab
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    for t in tokens:
        assert m.accept_token(ids[t]), t
    return {vocab.token_bytes[i] or b"</s>" for i in bm.allowed_ids(_row(m, vocab), vocab.size).tolist()}


def _schema_accepts(schema, text: str) -> bool:
    """The schema's language as masklab's compiler writes it (the Grammar naive follows)."""
    import toolkit.jsonschema  # noqa: F401 - registers the schema compiler

    return Grammar.from_json_schema(schema).accepts(text)


def _valid(schema, text: str) -> bool:
    """JSON Schema's own verdict (``jsonschema``, draft 2020-12, formats checked)."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator
    return validator(schema, format_checker=validator.FORMAT_CHECKER).is_valid(json.loads(text))


# --------------------------------------------------------------- agreement --

REGULAR = [case for case, (_, _, engines) in AGREEMENT.items() if OUT in engines]
EXACT = [case for case in REGULAR if case != "regex-utf8"]  # (regex-utf8: the inexpressible tokens, below)
assert len(EXACT) == 5


@pytest.mark.parametrize("given", ["grammar", "regex"])
@pytest.mark.parametrize("case", EXACT)
def test_masks_equal_naive_masks_at_every_step(lm, case: str, given: str) -> None:
    grammar, walks, _ = AGREEMENT[case]
    eng, oracle = lm(), get_engine("naive", HAND)
    spec = grammar if given == "grammar" else RegexText(grammar.to_regex())
    compiled, reference = eng.compile(spec), oracle.compile(grammar)
    assert compiled.kind == "regex" and compiled.source == grammar.to_regex()
    for text in walks:
        ids = [*HAND.encode(text), EOS]
        pm, om = eng.matcher(compiled), oracle.matcher(reference)
        for k, t in enumerate(ids):
            got, want = _row(pm), _row(om)
            if not np.array_equal(got, want):
                a, b = set(bm.allowed_ids(got, HAND.size).tolist()), set(bm.allowed_ids(want, HAND.size).tolist())
                pytest.fail(f"{case}, {text!r} after {HAND.decode(ids[:k])!r}: "
                            f"lmfe only {_show(a - b)}, naive only {_show(b - a)}")
            assert pm.accept_token(t) and om.accept_token(t)
        assert pm.is_terminated() and _ids(pm) == {EOS}


def test_recursive_grammars_need_max_depth(lm) -> None:
    parens = AGREEMENT["parens"][0]
    with pytest.raises(UnsupportedGrammar, match="regular grammars only .*max_depth.*recursive"):
        lm().compile(parens)
    unrolled = lm(max_depth=2)
    assert unrolled.compile(parens).kind == "regex"
    assert _accepts(unrolled, parens, "(())") and _accepts(unrolled, parens, "(()())")
    assert parens.accepts("((()))") and not _accepts(unrolled, parens, "((()))")  # a subset of the language


# ---------------------------------------------------- documented differences --


def test_differs_tokens_that_are_not_utf8_alone_are_never_allowed(lm) -> None:
    """LMFE reads tokens as decoded strings: a token whose bytes are not UTF-8 on their
    own (here ``\\xc3`` and ``\\xa9``, the halves of é) has none, so the adapter leaves it
    out and LMFE never allows it.  On ``"[a-cé]*"`` the masks are naive's minus exactly
    ``\\xc3`` wherever naive allows it (naive allows ``\\xa9`` only after ``\\xc3``)."""
    eng, naive = lm(), get_engine("naive", HAND)
    half = {TOK[b"\xc3"], TOK[b"\xa9"]}
    assert set(eng.inexpressible.tolist()) == half
    grammar, walks, _ = AGREEMENT["regex-utf8"]
    compiled, reference = eng.compile(grammar), naive.compile(grammar)
    seen = 0
    for text in walks:
        pm, om = eng.matcher(compiled), naive.matcher(reference)
        for t in [*HAND.encode(text), EOS]:
            got, want = _ids(pm), _ids(om)
            assert got <= want and want - got <= half
            seen += bool(want - got)
            assert pm.accept_token(t) and om.accept_token(t)
    assert seen > 0
    m = eng.matcher(compiled)
    assert m.accept_token(TOK[b'"']) and not m.accept_token(TOK[b"\xc3"]) and m.accept_token(TOK["é".encode()])


def test_the_alphabet_is_every_character_of_the_vocabulary(lm) -> None:
    """LMFE reads a negated class as "any character of the alphabet"; as shipped,
    ``TokenEnforcer`` takes the alphabet to be the tokens' *first* characters, so ``aé``
    is refused by ``[^x]+`` when no token starts with é.  The adapter gives LMFE every
    character of the vocabulary: ``aé`` is allowed, as the regex says."""
    vocab = Vocabulary.from_tokens([b"", b"a", "aé".encode(), b"x"], eos_ids=(0,), name="ae")
    eng = lm(vocab)
    assert eng.alphabet == "axé"
    m = eng.matcher(eng.compile(RegexText("[^x]+")))
    assert set(bm.allowed_ids(_row(m, vocab), vocab.size).tolist()) == {1, 2}
    assert m.accept_token(2) and m.is_accepting()
    # LMFE as shipped, on the same tokens
    data = lmformatenforcer.TokenEnforcerTokenizerData([(1, "a", True), (2, "aé", True), (3, "x", True)],
                                                       lambda ids: "", [0], False, vocab.size)
    shipped = lmformatenforcer.TokenEnforcer(data, lmformatenforcer.RegexParser("[^x]+"))
    assert data.tokenizer_alphabet == "ax" and sorted(shipped.get_allowed_tokens([]).allowed_tokens) == [1]


def test_each_schema_has_its_own_pattern_cache(lm) -> None:
    """``JsonSchemaParser`` caches the regex parser of a ``pattern`` in one dict for the
    process, made with the alphabet of the first vocabulary that met it; the adapter
    gives each compiled schema its own, so a pattern means the same on every vocabulary."""
    shared = lmformatenforcer.JsonSchemaParser._Context.regex_parser_cache
    before = dict(shared)
    schema = {"type": "string", "pattern": "[^x]+"}
    for vocab in (HAND, JV):
        compiled = lm(vocab).compile(schema)
        own = compiled.handle.context.regex_parser_cache
        assert own is not shared and list(own) == ["[^x]+"]
        assert own["[^x]+"].context.anything_else_characters == lm(vocab).alphabet.replace("x", "")
    assert shared == before
    assert _accepts(lm(JV), schema, '"aé"') and _accepts(lm(HAND), schema, '"aé"')


OBJ_A = {"type": "object", "properties": {"a": {"type": "integer"}}}
OBJ_AB = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}}


def test_differs_whitespace_runs_are_limited(lm) -> None:
    """``max_consecutive_whitespaces`` (LMFE's default 12) caps each run of whitespace in
    JSON; the schema allows any run.  0 allows none."""
    eng = lm(JV)
    for n, ok in ((12, True), (13, False)):
        text = '{"a":' + " " * n + "1}"
        assert _accepts(eng, OBJ_A, text) is ok and _schema_accepts(OBJ_A, text)
    # the 13-space token is left out where only 11 more may follow
    assert b" " * 13 not in _after(eng, OBJ_A, [b"{", b" "]) and b" " in _after(eng, OBJ_A, [b"{", b" "])
    none = lm(JV, max_consecutive_whitespaces=0)
    assert _accepts(none, OBJ_A, '{"a":1}') and not _accepts(none, OBJ_A, '{"a": 1}')
    assert lm(JV, max_consecutive_whitespaces=20).describe()["options"]["max_consecutive_whitespaces"] == 20
    assert _accepts(lm(JV, max_consecutive_whitespaces=20), OBJ_A, '{"a":' + " " * 20 + "1}")


def test_differs_raw_control_characters_in_strings(lm) -> None:
    """JSON forbids raw control characters in strings.  LMFE's free-text token list keeps
    every token it does not check (it checks those with a quote, a backslash or a
    newline): a raw tab is allowed.  A raw newline alone is not, but a token that opens
    the string with one (``"\\n``) is, since LMFE walks tokens that start with the quote
    character by character over its whole alphabet."""
    eng, s = lm(JV), {"type": "string"}
    assert _accepts(eng, s, '"a\tb"') and not _schema_accepts(s, '"a\tb"')
    assert not _accepts(eng, s, '"a\nb"')
    assert b'"\n' in _after(eng, s, []) and _accepts(eng, s, '"\nb"') and not _schema_accepts(s, '"\nb"')


def test_differs_number_formats(lm) -> None:
    """LMFE's number parser takes an exponent in an integer and one right after the
    decimal point; JSON and the schema take neither."""
    eng = lm(JV)
    for schema, text in (({"type": "integer"}, "1e3"), ({"type": "number"}, "1.e5"), ({"type": "integer"}, "2E+1")):
        assert _accepts(eng, schema, text) and not _schema_accepts(schema, text), text
    for schema, text in (({"type": "number"}, "-0.5e-3"), ({"type": "integer"}, "-0"), ({"type": "number"}, "0.5")):
        assert _accepts(eng, schema, text) and _schema_accepts(schema, text), text
    assert not _accepts(eng, {"type": "integer"}, "01") and not _accepts(eng, {"type": "number"}, "1.")


def test_differs_a_trailing_comma_closes_an_object(lm) -> None:
    """After a member's comma LMFE allows ``}`` when the required keys are there: ``{"a":1,}``."""
    eng = lm(JV)
    assert b"}" in _after(eng, OBJ_AB, [b"{", b'"', b"a", b'"', b":", b"1", b","])
    assert _accepts(eng, OBJ_AB, '{"a":1,}') and not _schema_accepts(OBJ_AB, '{"a":1,}')
    assert not _accepts(eng, {**OBJ_AB, "required": ["b"]}, '{"a":1,}')  # "b" still missing


def test_differs_objects(lm) -> None:
    """LMFE's objects: with ``properties``, those keys only (``additionalProperties`` is
    not read), each once, in any order (``force_json_field_order``: the ``required`` ones
    first, in that order), written literally (no escapes in keys); without
    ``properties``, any keys, duplicates too."""
    eng = lm(JV)
    assert not _accepts(eng, OBJ_A, '{"a":1,"b":2}') and _schema_accepts(OBJ_A, '{"a": 1, "b": 2}')
    extra = {**OBJ_A, "additionalProperties": {"type": "integer"}}
    assert not _accepts(eng, extra, '{"a":1,"b":2}') and _schema_accepts(extra, '{"a": 1, "b": 2}')
    assert not _accepts(eng, OBJ_AB, '{"a":1,"a":2}')
    req = {**OBJ_AB, "required": ["a", "b"]}
    assert _accepts(eng, req, '{"b":true,"a":1}')
    ordered = lm(JV, force_json_field_order=True)
    assert not _accepts(ordered, req, '{"b":true,"a":1}') and _accepts(ordered, req, '{"a":1,"b":true}')
    assert _after(ordered, req, [b"{", b'"']) == {b"a"}
    assert not _accepts(eng, OBJ_A, '{"\\u0061":1}') and _schema_accepts(OBJ_A, '{"\\u0061": 1}')
    assert _accepts(eng, {"type": "object"}, '{"a":1,"a":"x"}')


def test_differs_arrays(lm) -> None:
    """LMFE counts an item that ends by itself (a boolean, ``null``, an array: its parser
    is popped when it ends, which counts it, and the comma counts it again) twice but the
    first: ``n`` such items count as ``2n - 1``.  So ``maxItems: 3`` takes two booleans
    at most, and ``minItems: 3`` is met by two (looser than the schema); numbers,
    strings and objects are counted right.  An array without ``maxItems`` takes
    ``max_json_array_length`` items (20: eleven booleans; 0: no limit)."""
    eng = lm(JV)

    def arr(item: str, n: int) -> str:
        return "[" + ",".join([item] * n) + "]"

    most = {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}
    assert [_accepts(eng, most, arr("true", n)) for n in (1, 2, 3)] == [True, True, False]
    least = {"type": "array", "items": {"type": "boolean"}, "minItems": 3}
    assert _accepts(eng, least, arr("true", 2)) and not _schema_accepts(least, arr("true", 2))
    exact = {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}
    assert [_accepts(eng, exact, arr("1", n)) for n in (2, 3, 4)] == [False, True, False]
    nested = {"type": "array", "items": {"type": "array"}, "maxItems": 4}
    assert _accepts(eng, nested, arr("[1]", 3)) and not _accepts(eng, nested, arr("[1]", 4))
    assert _schema_accepts(nested, arr("[1]", 4))
    ints = {"type": "array", "items": {"type": "integer"}}
    assert _accepts(eng, ints, arr("1", 20)) and not _accepts(eng, ints, arr("1", 21))
    assert _accepts(eng, {"type": "array", "items": {"type": "boolean"}}, arr("true", 11))
    assert not _accepts(eng, {"type": "array", "items": {"type": "boolean"}}, arr("true", 12))
    unlimited = lm(JV, max_json_array_length=0)
    assert _accepts(unlimited, ints, arr("1", 30)) and _schema_accepts(ints, arr("1", 30))


def test_differs_escapes_and_string_ends_inside_tokens(lm) -> None:
    """In a free string LMFE allows the tokens of its free-text list (those that are a
    JSON string's body on their own, or end with a backslash or a quote) and walks only
    those that start with the quote.  So ``\\u`` (an escape cut by the token's end) and
    ``.",`` (text, the closing quote, then more) are refused, though ``\\`` ``u`` and
    ``.`` ``",`` are allowed; enum strings and keys take no escapes at all."""
    eng, obj = lm(JV), {"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string"}}}
    inside = _after(eng, obj, [b"{", b'"', b"s", b'"', b":", b'"', b"a"])
    assert {b"\\", b".", b'",', b'"}'} <= inside and not {b"\\u", b'.",'} & inside
    assert _accepts(eng, {"type": "string"}, '"\\\\"')  # "\\" ... as two one-byte tokens
    ids = [JT[b'"'], JT[b"\\"], JT[b"u"], *(JT[c.encode()] for c in "0061"), JT[b'"'], 1]
    m = eng.matcher(eng.compile({"type": "string"}))
    assert m.validate_tokens(ids) == len(ids)
    assert not _accepts(eng, {"type": "string"}, '"\\u0061"')  # greedy: "\u" is one token
    assert not _accepts(eng, {"enum": ["a"]}, '"\\u0061"') and _schema_accepts({"enum": ["a"]}, '"\\u0061"')


def test_differs_ignored_keywords(lm) -> None:
    """Keywords LMFE compiles and does not read (the masks allow what they forbid)."""
    eng = lm(JV)
    for schema, text in (
        ({"type": "integer", "maximum": 5}, "100"),
        ({"type": "integer", "minimum": 5, "exclusiveMaximum": 9}, "1"),
        ({"type": "number", "multipleOf": 2}, "3"),
        ({"type": "string", "format": "date"}, '"abc"'),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1,1]"),
        ({**OBJ_A, "required": ["a"], "minProperties": 2}, '{"a":1}'),
        ({"type": "object", "propertyNames": {"pattern": "^x"}}, '{"a":1}'),
        ({"type": "array", "prefixItems": [{"type": "string"}]}, "[1]"),
    ):
        assert _accepts(eng, schema, text) and not _valid(schema, text), schema


def test_differs_one_of_reads_objects_only(lm) -> None:
    """LMFE compiles ``oneOf`` as a union of *objects* (each option merged into the
    parent), so a ``oneOf`` of scalar types refuses their values; ``anyOf`` is a union."""
    eng = lm(JV)
    one = {"oneOf": [{"type": "integer"}, {"type": "string"}]}
    assert not _accepts(eng, one, "1") and not _accepts(eng, one, '"a"') and _schema_accepts(one, "1")
    assert _accepts(eng, {"anyOf": one["oneOf"]}, "1") and _accepts(eng, {"anyOf": one["oneOf"]}, '"a"')


def test_keywords_lmfe_reads_only_when_the_walk_reaches_them(lm, caplog: pytest.LogCaptureFixture) -> None:
    """LMFE compiles a schema lazily: a ``const`` that is not a string, a ``$ref`` to the
    root, an ``enum`` mixing types below the root compile, and raise inside
    ``get_allowed_tokens`` once a mask needs them.  LMFE logs that with a traceback on the
    root logger and allows EOS alone; the adapter takes the log record off and puts the
    matcher in the protocol's error state with LMFE's message (EOS only, as LMFE)."""
    eng = lm(JV)
    with caplog.at_level(logging.DEBUG):
        m = eng.matcher(eng.compile({"const": 5}))
        assert _ids(m, JV) == {1}
        assert m.error is not None and "AttributeError" in m.error and m.error.startswith(f"PeerError: {LMFE}")
        mixed = {"type": "object", "properties": {"r": {"enum": ["x", None]}}}
        m = eng.matcher(eng.compile(mixed))
        key = [JT[b"{"], JT[b'"'], JT[b"r"], JT[b'"']]
        assert m.accept_tokens(key) == 4
        assert _ids(m, JV) == {1} and "Unsupported enum type" in m.error  # (the mask explores ":")
        assert not m.accept_token(JT[b":"])
        # a matcher over the same enforcer, and a fresh one, fail there again (LMFE keeps
        # its EOS-only fallback for the prefix: the adapter drops it)
        again = eng.matcher(m.compiled)
        again.enforcer = m.enforcer
        assert again.accept_tokens(key) == 4 and again.error is None
        assert _ids(again, JV) == {1} and "Unsupported enum type" in again.error
        fresh = eng.matcher(m.compiled)
        assert fresh.accept_tokens(key) == 4 and _ids(fresh, JV) == {1} and fresh.error is not None
        root = eng.matcher(eng.compile({"type": "object", "properties": {"n": {"$ref": "#"}}}))
        assert root.accept_tokens([JT[b"{"], JT[b'"'], JT[b"n"], JT[b'"']]) == 4
        assert _ids(root, JV) == {1} and "No definitions found" in root.error
        m.reset()
        assert m.error is None and m.num_tokens == 0
        # an exception LMFE raises itself (not logged) is the matcher's error too
        both = {"type": "array", "items": {"type": "string", "pattern": "a+", "maxLength": 3}}
        m = eng.matcher(eng.compile(both))
        assert _ids(m, JV) == {1}
        assert m.error.startswith(f"PeerError: {LMFE}: LMFormatEnforcerException: String schema contains both")
        with pytest.raises(PeerError, match="LMFormatEnforcerException"):  # at the root: when compiled
            eng.compile(both["items"])
    assert not [r for r in caplog.records if "LMFormatEnforcer" in r.getMessage()]  # nothing was logged


def test_refusals_are_peer_errors_with_lmfes_message(lm) -> None:
    eng = lm(JV)
    for schema, words in (
        ({"type": "frobnicate"}, "Unsupported type frobnicate"),
        ({"enum": [1, "a"]}, "Unsupported enum type"),
        ({"not": {"type": "integer"}}, "Unsupported type None"),
        ({"if": {"type": "integer"}, "then": {"minimum": 3}}, "Unsupported type None"),
    ):
        with pytest.raises(PeerError, match=re.escape(words)) as info:
            eng.compile(schema)
        assert str(info.value).startswith(LMFE) and isinstance(info.value, MasklabError)
    with pytest.raises(PeerError, match="JSONDecodeError"):
        eng.compile(JsonSchemaText("{not json"))
    with pytest.raises(PeerError, match="Unsupported"):  # interegular's parser
        eng.compile(RegexText(r"\p{L}+"))
    # a missing $ref compiles (LMFE resolves it when a mask needs it) and fails there
    m = eng.matcher(eng.compile({"type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}}))
    assert m.accept_tokens([JT[b"{"], JT[b'"'], JT[b"a"], JT[b'"']]) == 4 and _ids(m, JV) == {1}
    assert "No definitions found" in m.error
    # boolean schemas: JsonSchemaParser(True) fails in pydantic, and it reads False as
    # "any JSON", which would loosen the schema: the adapter refuses both
    for schema in (True, False):
        with pytest.raises(UnsupportedGrammar, match="schema object"):
            eng.compile(schema)
    for spec in ("start: x", b"{}", 42, None):
        with pytest.raises(UnsupportedGrammar):
            eng.compile(spec)
    with pytest.raises(UnsupportedGrammar, match="special tokens"):
        eng.compile(Grammar.from_lark('start: "a" <s>\n'))


# ------------------------------------------------------ matcher mechanics --


def test_rollback_fork_reset_and_independent_matchers(lm) -> None:
    eng = lm(JV)
    schema = SCHEMAS["nested"][0]
    compiled = eng.compile(schema)
    ids = JV.encode('{"id":7,"tags":["x","yz"],"owner":{"name":"bo","ok":true}}')
    m = eng.matcher(compiled)
    rows = []
    for t in ids:
        rows.append(_row(m, JV))
        assert m.accept_token(t)
    rows.append(_row(m, JV))
    assert m.is_accepting() and bm.get_bit(rows[-1], 1)
    m.rollback(len(ids) - 5)
    assert np.array_equal(_row(m, JV), rows[5])
    f = m.fork()
    assert f.enforcer is m.enforcer and f.seq == m.seq and f.seq is not m.seq  # shared LMFE state, own list
    assert f.accept_tokens([*ids[5:], 1]) == len(ids) - 5 + 1 and f.is_terminated()
    assert np.array_equal(_row(m, JV), rows[5]) and m.num_tokens == 5 and not m.is_terminated()
    # the original takes another way than the fork, then goes back over it
    assert JV.decode(ids[:5]) == b'{"id"'
    other = JV.encode(':8,"owner":{"name":"q","ok":false}')
    assert m.accept_tokens(other) == len(other)
    m.rollback(len(other))
    for k in (5, 3, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m, JV), rows[k]), k
    f.reset()
    assert not f.is_terminated() and f.num_tokens == 0 and np.array_equal(_row(f, JV), rows[0])
    assert f.enforcer is not m.enforcer  # a reset starts a new request
    # two matchers of one compiled grammar: separate enforcers, same masks
    a, b = eng.matcher(compiled), eng.matcher(compiled)
    assert a.enforcer is not b.enforcer
    assert a.accept_tokens(ids[:4]) == 4 and np.array_equal(_row(b, JV), rows[0]) and np.array_equal(_row(a, JV), rows[4])
    # a refused token leaves the state as it was; a trusted one is taken as servers take it
    before = _row(a, JV)
    assert not a.accept_token(JT[b"}"]) and np.array_equal(_row(a, JV), before)
    assert a.accept_allowed(ids[4]) and np.array_equal(_row(a, JV), rows[5])


def test_bitmask_mode_gives_the_same_masks(lm) -> None:
    plain, packed = lm(JV), lm(JV, use_bitmask=True)
    for spec, text in ((SCHEMAS["nested"][0], '{"id":7,"tags":["x","yz"],"owner":{"name":"bo","ok":true}}'),
                       (RegexText(r'\{"[a-z]+": ?[0-9]+\}'), '{"ab": 12}')):
        a, b = plain.matcher(plain.compile(spec)), packed.matcher(packed.compile(spec))
        for t in [*JV.encode(text), 1]:
            assert np.array_equal(_row(a, JV), _row(b, JV))
            assert a.accept_token(t) and b.accept_token(t)


def test_direct_check_walks_lmfe_as_a_server_does(lm) -> None:
    for options in ({}, {"use_bitmask": True}):
        eng = lm(JV, **options)
        for spec, text in ((OBJ_AB, '{"a":1,"b":true}'), (Grammar.from_regex("[a-c]+[0-9]*"), "abc12"),
                           (RegexText("[a-c]+[0-9]*"), "cab0")):
            run = eng.direct_check(spec)
            assert run.ttfm_s > 0
            ids = [*JV.encode(text), 1]
            times = run.walk(ids)
            assert len(times) == len(ids) and min(times) >= 0
            assert len(run.walk([JT[b"}"], *ids])) == 1  # stops at the refused token
    with pytest.raises(UnsupportedGrammar):
        lm(JV).direct_check(42)


def test_engine_time_is_lmfes_own_call(lm) -> None:
    eng = lm(JV)
    m = eng.matcher(eng.compile(OBJ_AB))
    start = m.engine_s
    m.fill_bitmask(bm.allocate(JV.size))
    first = m.engine_s
    assert first > start
    m.fill_bitmask(bm.allocate(JV.size))  # the same state: no new call to LMFE
    assert m.engine_s == first


def test_the_batch_fallback_equals_single_calls(lm) -> None:
    """No batch of LMFE's own: ``make_batch`` gives the threaded fallback (matchers of one
    compiled grammar in one thread: LMFE's JSON parsers share a context per schema)."""
    from tests.conformance.test_batch import _compare
    from toolkit.core.batch import ThreadedBatch, make_batch

    eng = lm(JV)
    specs = [(SCHEMAS["nested"][0], '{"id":7,"tags":["x","yz"],"owner":{"name":"bo","ok":true}}'),
             (OBJ_AB, '{"b":false,"a":12}'), (RegexText(r'\{"[a-z]+": ?[0-9]+\}'), '{"ab": 12}')]
    compiled = [eng.compile(spec) for spec, _ in specs]
    assert isinstance(make_batch(eng, [eng.matcher(c) for c in compiled], 2), ThreadedBatch)
    walks = [[*JV.encode(text), 1] for _, text in specs]
    _compare(JV, eng, [*compiled, compiled[0]], [*walks, list(walks[0][:6])], threads=2)


# -------------------------------------------------------------------- options --


def test_options_describe_and_checks(lm) -> None:
    d = lm(JV).describe()
    assert d["version"] == metadata.version("lm-format-enforcer") == "0.11.3"
    assert d["options"] == {"max_consecutive_whitespaces": 12, "force_json_field_order": False,
                            "max_json_array_length": 20, "use_bitmask": False, "max_depth": None}
    json.dumps(d)
    check_options(LMFE, {"max_consecutive_whitespaces": 4, "force_json_field_order": True, "max_depth": 3})
    for options, words in (({"max_consecutive_whitespaces": "4"}, "takes int"),
                           ({"force_json_field_order": "True"}, "takes bool"),
                           ({"max_depth": 1.5}, "takes int or None"),
                           ({"alphabet": "abc"}, "has no option 'alphabet'")):
        with pytest.raises(ValueError, match=words):
            check_options(LMFE, options)
    for options in ({"max_consecutive_whitespaces": -1}, {"max_json_array_length": -2}, {"max_depth": -1}):
        with pytest.raises(ValueError, match=">= 0"):
            get_engine(LMFE, JV, **options)
    engine = lm(JV)
    assert engine.config.alphabet == engine.alphabet and engine.tokenizer_data.tokenizer_alphabet == engine.alphabet


def test_environment_variables_do_not_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """LMFE's config defaults read ``LMFE_*`` variables; the adapter passes its options."""
    monkeypatch.setenv("LMFE_MAX_CONSECUTIVE_WHITESPACES", "0")
    monkeypatch.setenv("LMFE_MAX_JSON_ARRAY_LENGTH", "1")
    eng = get_engine(LMFE, JV)
    assert _accepts(eng, OBJ_A, '{"a": 1}')
    assert _accepts(eng, {"type": "array", "items": {"type": "integer"}}, "[1,2,3]")


# ---------------------------------------------------------------- Llama-3 --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.fixture(scope="module")
def l3(llama3):
    """LMFE (fields in ``required`` order, like masklab's schema order on these
    schemas) and our llguidance, on Llama-3."""
    return get_engine(LMFE, llama3, force_json_field_order=True), get_engine("llguidance", llama3)


def _ws_run(text: bytes) -> int:
    return len(text) - len(text.rstrip(WS))


def _lmfe_only_class(tok: bytes, prefix: bytes, schema) -> str | None:
    """Why LMFE allows ``tok`` after ``prefix`` where our llguidance does not."""
    if tok != tok.rstrip(WS) and _schema_accepts(schema, (prefix + tok).rstrip(WS).decode()):
        return "trailing-whitespace"  # llguidance allows nothing after the last lexeme (tests/test_peers.py)
    if tok.strip(WS).startswith(b"}") and prefix.rstrip(WS).endswith(b","):
        return "trailing-comma"
    if re.fullmatch(rb"\.?[eE]", tok):
        return "exponent"
    if any(c < 0x20 for c in tok):
        return "control-character"
    return None


def _llguidance_only_class(tid: int, tok: bytes, prefix: bytes, inexpressible: set[int]) -> str | None:
    """Why our llguidance allows ``tok`` after ``prefix`` where LMFE does not."""
    if tid in inexpressible:
        return "not-utf8-alone"
    if tok and tok.strip(WS) == b"" and _ws_run(prefix) + len(tok) > 12:
        return "whitespace-run"
    if b"\\" in tok:
        return "escape"
    if b'"' in tok[1:] and not tok.startswith(b'"'):
        return "string-ends-inside-token"
    if tok.lstrip(WS).startswith(b"],"):
        return "array-count"
    return None


L3_CASES = {  # schema file -> the classes of difference its valid walks show
    "s39_booleans_and_null": {"whitespace-run", "escape", "trailing-whitespace", "trailing-comma"},
    "s08_array_matrix": {"whitespace-run", "array-count", "exponent", "trailing-whitespace"},
    "s43_tool_get_weather": {"whitespace-run", "escape", "not-utf8-alone", "string-ends-inside-token",
                             "control-character", "trailing-whitespace"},
}


@pytest.mark.shared
def test_llama3_native_schemas_against_llguidance(llama3, l3) -> None:
    """Each step of the valid instances: LMFE's mask against our llguidance's; every token
    in one and not the other is in a named class (the documented differences above, and
    llguidance's own: no whitespace after the last lexeme), and each class shows."""
    from toolkit.data.datasets import embedded_dir, load_item

    eng, ref = l3
    inexpressible = set(eng.inexpressible.tolist())
    assert len(inexpressible) == 1352  # Llama-3's byte pieces that are not UTF-8 alone
    eos = llama3.eos_ids[0]
    tb = llama3.token_bytes
    for name, expected in L3_CASES.items():
        item = load_item(embedded_dir() / "schemas" / f"{name}.json")
        cases = [c for c in item.cases if c.valid]
        if name == "s43_tool_get_weather":
            cases = cases[:1]  # ("days" in the second: LMFE ignores minimum and maximum)
        compiled, reference = eng.compile(item.source()), ref.compile(item.source())
        assert compiled.kind == "json_schema"
        seen: set[str] = set()
        for case in cases:
            ids = [*llama3.encode(case.text), eos]
            a, b = eng.matcher(compiled), ref.matcher(reference)
            for k, t in enumerate(ids):
                ra, rb = _row(a, llama3), _row(b, llama3)
                prefix = llama3.decode(ids[:k])
                if not np.array_equal(ra, rb):
                    got = set(bm.allowed_ids(ra, llama3.size).tolist())
                    want = set(bm.allowed_ids(rb, llama3.size).tolist())
                    odd = []
                    for i in got - want:
                        c = _lmfe_only_class(tb[i], prefix, item.spec)
                        odd += [(b"+", tb[i])] if c is None else []
                        seen.add(c or "")
                    for i in want - got:
                        c = _llguidance_only_class(i, tb[i], prefix, inexpressible)
                        odd += [(b"-", tb[i])] if c is None else []
                        seen.add(c or "")
                    assert not odd, f"{name} after {prefix!r}: unexplained {odd[:8]}"
                assert bm.get_bit(ra, t) and a.accept_token(t) and b.accept_token(t), (name, prefix, tb[t])
            assert a.is_terminated()
        assert seen == expected, name


@pytest.mark.shared
def test_llama3_rollback_fork_reset_and_bitmask_mode(llama3, l3) -> None:
    eng = l3[0]
    schema, valid, invalid = SCHEMAS["nested"]
    compiled = eng.compile(schema)
    ids = llama3.encode(json.dumps(valid))
    m = eng.matcher(compiled)
    rows = []
    for t in ids:
        rows.append(_row(m, llama3))
        assert m.accept_token(t)
    rows.append(_row(m, llama3))
    m.rollback(len(ids) - 5)
    f = m.fork()
    assert np.array_equal(_row(f, llama3), rows[5])
    assert f.accept_tokens([*ids[5:], llama3.eos_ids[0]]) == len(ids) - 5 + 1 and f.is_terminated()
    for k in (4, 1, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m, llama3), rows[k])
    f.reset()
    assert np.array_equal(_row(f, llama3), rows[0])
    bad = [*llama3.encode(json.dumps(invalid)), llama3.eos_ids[0]]
    assert eng.matcher(compiled).validate_tokens(bad) < len(bad)
    # no special or padding id, EOS only at the end
    not_text = ~llama3.text_token_mask()
    for k, row in enumerate(rows):
        outside = set(np.flatnonzero(bm.to_bool(row, llama3.size) & not_text).tolist())
        assert outside == (set(llama3.eos_ids) if k == len(ids) else set()), k
    packed = get_engine(LMFE, llama3, use_bitmask=True, force_json_field_order=True)
    p = packed.matcher(packed.compile(schema))
    for k, t in enumerate(ids):
        assert np.array_equal(_row(p, llama3), rows[k]) and p.accept_token(t)


@pytest.mark.shared
def test_llama3_harness_and_direct_check(llama3, l3) -> None:
    from toolkit.bench.measure import measure_item
    from toolkit.data.datasets import embedded_dir, load_item

    item = load_item(embedded_dir() / "schemas" / "s39_booleans_and_null.json")
    rec = measure_item(l3[0], llama3, item, quick=True, direct=True)
    assert rec["status"] == "passing", rec.get("detail")
    d = rec["direct"]
    assert sum(d["steps"]) == len(d["tbm_s"]) == len(rec["tbm_s"]) > 0 and d["ttfm_s"] > 0
    assert len(rec["glue_s"]) == len(rec["tbm_s"]) and min(rec["glue_s"]) > -1e-6
