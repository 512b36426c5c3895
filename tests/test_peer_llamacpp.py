"""``peer:llama.cpp`` (:mod:`strategies.peer_llamacpp`): llama.cpp's grammar sampler as an engine.

* **Agreement**: on a hand-made vocabulary, the full mask row equals ``naive``'s at every
  step of valid walks (EOS included) for GBNF grammars written here (arithmetic, a small
  JSON grammar, repetitions, UTF-8) against the same language in Lark or a regex, and for
  toolkit Grammars through ``write_gbnf``.
* **Documented differences**: llama.cpp matches code points, so invalid UTF-8, partial
  characters, NUL bytes and EOS with a pending partial character differ from the byte
  language; one test each, on a concrete token.
* **JSON Schema (Llama-3)**: llama-cpp-python's own converter against masklab's
  ``llguidance`` strategy on embedded schemas: every difference at every step falls in a
  named class, and each class is shown on a concrete token.
* Rollback (past checkpoints), fork, reset, the threaded batch; grammar errors as
  ``PeerError`` with llama.cpp's message; nothing printed; ``direct_check``.
"""

from __future__ import annotations

import codecs
import copy
import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from strategies import get_engine
from strategies.peers import PeerError
from tests._support.fixtures import JSON_LARK
from tests._support.shared import require_shared
from tests.test_peers import _engines_on
from toolkit.core import bitmask as bm
from toolkit.core.batch import NO_TOKEN, ThreadedBatch, make_batch
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.protocol import MaskEngine, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import embedded_dir, iter_items
from toolkit.grammar import inputs
from toolkit.grammar.ir import Grammar

pytest.importorskip("llama_cpp", reason="peer:llama.cpp needs llama-cpp-python (the [peers] extra)")
pytest.importorskip("gguf", reason="peer:llama.cpp needs gguf (the [peers] extra)")

from strategies.peer_llamacpp import CHECKPOINT_EVERY  # noqa: E402 - after the skips

LL = "peer:llama.cpp"

# ------------------------------------------------------------ vocabularies --

SPECIAL, EOS = 0, 1
_SINGLE = [c.encode() for c in '{}[]",:()+-*/=. \n0123456789abcefilnrstuxyz\\']
_MULTI = [
    b'{"', b'":', b'", "', b'": ', b'"}', b", ", b"12", b"123", b"00", b"2.5", b".5", b"ab", b"abc", b"aa", b"aab",
    b"bc", b"true", b"tr", b"ue", b"null", b"false", b"fal", b"se", b"((", b"))", b"()", b"+1", b"1+", b")*",
    b"[1", b"1]", b'"a', b"  ", "é".encode(), b"\xc3", b"\xa9", "éa".encode(), b"\\n",
]  # fmt: skip
HAND = Vocabulary.from_tokens([b"", b"", *_SINGLE, *_MULTI], eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"},
                              size=2 + len(_SINGLE) + len(_MULTI) + 5, name="llamacpp-hand")
HAND_PAD = tuple(range(HAND.n_defined, HAND.size))
TOK = {b: i for i, b in enumerate(HAND.token_bytes) if b}

# tokens llama.cpp reads as code points: bytes that are never UTF-8, prefixes of
# surrogates and of overlong or too large characters, NUL, a character's lead byte...
_ODD = [b"a", b"b", b"\xff", b"\xf8\x88\x80\x80", b"\xed\xa0", b"\xf0\x80", b"\xf4\x90", b"\xc0", b"\xc3", b"\xa9",
        "é".encode(), "à".encode(), b"\x00", b"a\x00b", b"a\xc3", b'"']  # fmt: skip
ODD = Vocabulary.from_tokens([b"", b"", *_ODD], eos_ids=(EOS,), special_tokens={SPECIAL: "<s>", EOS: "</s>"},
                             size=2 + len(_ODD) + 2, name="llamacpp-odd")
OTOK = {b: i for i, b in enumerate(ODD.token_bytes) if b}


@dataclass(frozen=True)
class _ToyGbnf:
    """GBNF text told apart, until :mod:`toolkit.grammar.gbnf` registers the format."""

    input_format: ClassVar[str] = "gbnf"
    text: str


def _no_reader(spec: _ToyGbnf) -> Grammar:
    raise UnsupportedGrammar("no GBNF reader here: only engines that read GBNF themselves")


@pytest.fixture(scope="module")
def gbnf():
    """``gbnf(text)``: GBNF text as ``compile`` takes it (the registered format's wrapper,
    or a stand-in registered for this module while the format is not there)."""
    try:
        from toolkit.grammar.gbnf import GbnfText  # registers the format

        wrapper, toy = GbnfText, False
    except ImportError:
        inputs.register_format(inputs.InputFormat("gbnf", _ToyGbnf, _no_reader, key="gbnf", flag="--gbnf",
                                                  suffixes=(".gbnf",)))
        wrapper, toy = _ToyGbnf, True
    yield wrapper
    if toy:
        inputs.unregister_format("gbnf")


@pytest.fixture(scope="module")
def hand():
    return _engines_on(HAND)


@pytest.fixture(scope="module")
def odd():
    return _engines_on(ODD)


def _row(m: Matcher, vocab: Vocabulary = HAND) -> np.ndarray:
    row = bm.allocate(vocab.size)
    m.fill_bitmask(row)
    return row[0].copy()


def _ids(m: Matcher, vocab: Vocabulary = HAND) -> set[int]:
    return {int(i) for i in bm.allowed_ids(_row(m, vocab), vocab.size)}


def _show(ids: set[int], vocab: Vocabulary = HAND) -> list:
    return sorted((vocab.token_bytes[i] or vocab.special_tokens.get(i, f"#{i}") for i in ids), key=repr)


# --------------------------------------------------------------- agreement --

ARITH_GBNF = r"""
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")" | "-" factor
num    ::= [0-9]+
"""
ARITH_LARK = r"""
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUM | "(" expr ")" | "-" factor
NUM: /[0-9]+/
"""

JSON_GBNF = r"""
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws pair (ws "," ws pair)* ws "}"
pair   ::= string ws ":" ws value
array  ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" ([^"\\\x00-\x1f] | "\\" ["\\/bfnrt])* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)?
ws     ::= [ \n]*
"""
JSON_WS_LARK = r"""
start: _ws value _ws
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" _ws "}" | "{" _ws pair (_ws "," _ws pair)* _ws "}"
pair: STRING _ws ":" _ws value
array: "[" _ws "]" | "[" _ws value (_ws "," _ws value)* _ws "]"
_ws: WS?
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt])*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?/
WS: /[ \n]+/
"""

AGREEMENT = {
    "arithmetic": (ARITH_GBNF, Grammar.from_lark(ARITH_LARK), ["(1+2)*3", "-(12)/((3))", "123", "1+-2*(0)"]),
    "json": (JSON_GBNF, Grammar.from_lark(JSON_WS_LARK),
             ['{"ab": [1, 2.5, true], "c": null}', " [ ]\n", '"a\\n\\\\é"', '{"é": {"": false}}', "-0.5", "[[],{}]"]),
    "repetitions": ('root ::= "a"{2,4} ("b" | "c")+ [0-9]{0,3} "x"?', Grammar.from_regex(r"a{2,4}[bc]+[0-9]{0,3}x?"),
                    ["aabc12x", "aaaab", "aaabbb123", "aacx"]),
    "utf-8": ('root ::= ("é" | "a" | [b-c])+ ("." [à-ê]*)?', Grammar.from_regex(r"(é|a|[b-c])+(\.[à-ê]*)?"),
              ["aéa", "éé", "ab.é", "éa.ééé"]),
}


def _agree(llama: MaskEngine, naive: MaskEngine, compiled_l, compiled_n, texts: list[str]) -> None:
    for text in texts:
        ml, mn = llama.matcher(compiled_l), naive.matcher(compiled_n)
        for k, t in enumerate([*HAND.encode(text), EOS]):
            a, b = _row(ml), _row(mn)
            assert np.array_equal(a, b), (text, k, _show(_ids(ml) ^ _ids(mn)))
            assert ml.accept_token(t) and mn.accept_token(t), (text, k)
        assert ml.is_terminated()


@pytest.mark.parametrize("case", list(AGREEMENT))
def test_gbnf_masks_equal_naive_masks_at_every_step(hand, gbnf, case: str) -> None:
    text, grammar, walks = AGREEMENT[case]
    compiled = hand(LL).compile(gbnf(text))
    assert compiled.kind == "gbnf" and compiled.source == text
    _agree(hand(LL), hand("naive"), compiled, hand("naive").compile(grammar), walks)


def _write_gbnf():
    try:
        from toolkit.grammar.gbnf import write_gbnf
    except ImportError:
        pytest.skip("toolkit.grammar.gbnf.write_gbnf is not there yet: a Grammar cannot reach llama.cpp")
    return write_gbnf


GRAMMARS = {
    "json-lark": (JSON_LARK, ['{"ab": [1, 2.5, true], "c": null}', ' [ 1 ,"x"]', '{"é":{}}']),
    "arithmetic-lark": (ARITH_LARK, ["(1+2)*3", "-(12)/((3))"]),
}


@pytest.mark.parametrize("case", list(GRAMMARS))
def test_toolkit_grammar_through_write_gbnf_equals_naive(hand, case: str) -> None:
    write_gbnf = _write_gbnf()
    lark, walks = GRAMMARS[case]
    grammar = Grammar.from_lark(lark)
    compiled = hand(LL).compile(grammar)
    assert compiled.source == write_gbnf(grammar)
    _agree(hand(LL), hand("naive"), compiled, hand("naive").compile(grammar), walks)


# --------------------------------------------- documented differences (bytes) --

# llama.cpp decodes pieces to code points and judges a token that ends inside a
# character by the range of characters it could become; the Grammar's language is over
# bytes of valid UTF-8.


def _both(odd, gbnf, gbnf_text: str, regex: str, prefix: list[bytes] = ()) -> tuple[set[int], set[int]]:
    ml = odd(LL).matcher(odd(LL).compile(gbnf(gbnf_text)))
    mn = odd("naive").matcher(odd("naive").compile(Grammar.from_regex(regex)))
    for b in prefix:
        assert ml.accept_token(OTOK[b]) and mn.accept_token(OTOK[b])
    return _ids(ml, ODD), _ids(mn, ODD)


def test_differs_bytes_that_are_never_utf8_under_a_negated_class(odd, gbnf) -> None:
    llama, naive = _both(odd, gbnf, r'root ::= [^"]*', r'[^"]*')
    never = {OTOK[b] for b in (b"\xff", b"\xf8\x88\x80\x80", b"\xed\xa0", b"\xf0\x80", b"\xf4\x90")}
    assert never <= llama and not never & naive  # beyond U+10FFFF, surrogates, overlong 4-byte forms
    assert llama - naive == never and naive - llama == {OTOK[b"\x00"]}  # (NUL: see below)
    assert OTOK[b"\xc0"] not in llama  # an overlong 2-byte lead llama.cpp does refuse
    # the same under "." (any character)
    llama_dot, naive_dot = _both(odd, gbnf, "root ::= .*", "(.|\n)*")
    assert never <= llama_dot and not never & naive_dot


def test_differs_a_partial_character_under_a_negated_class_with_a_character_of_its_range(odd, gbnf) -> None:
    # \xc3 could become U+00C0..U+00FF; [^é] excludes é (U+00E9) of that range, so
    # llama.cpp refuses the byte although \xc3\xa0 (à) is allowed
    llama, naive = _both(odd, gbnf, "root ::= [^é]*", "[^é]*")
    assert OTOK[b"\xc3"] in naive and OTOK[b"\xc3"] not in llama
    assert OTOK["à".encode()] in llama and OTOK["é".encode()] not in llama


def test_differs_nul_bytes(odd, gbnf) -> None:
    # a piece starting with NUL is never allowed; inside a piece NUL ends it for the grammar
    llama, naive = _both(odd, gbnf, r'root ::= [^"]*', r'[^"]*')
    assert OTOK[b"\x00"] in naive and OTOK[b"\x00"] not in llama
    llama, naive = _both(odd, gbnf, "root ::= [a-b]*", "[a-b]*")
    assert OTOK[b"a\x00b"] in llama and OTOK[b"a\x00b"] not in naive  # read as "a"
    m = odd(LL).matcher(odd(LL).compile(gbnf('root ::= "a" "b"')))
    assert m.accept_token(OTOK[b"a\x00b"]) and not m.is_accepting()  # "a" taken, "b" still due
    assert m.accept_token(OTOK[b"b"]) and m.is_accepting()


def test_differs_eos_while_a_character_is_pending(odd, gbnf) -> None:
    # "a\xc3" could go on to "aé"; llama.cpp's stack that ended after "a" already allows EOS
    ml = odd(LL).matcher(odd(LL).compile(gbnf('root ::= "a" | "aé"')))
    mn = odd("naive").matcher(odd("naive").compile(Grammar.from_regex("a|aé")))
    assert ml.accept_token(OTOK[b"a\xc3"]) and mn.accept_token(OTOK[b"a\xc3"])
    assert ml.is_accepting() and not mn.is_accepting()
    assert EOS in _ids(ml, ODD) and EOS not in _ids(mn, ODD)
    assert OTOK[b"\xa9"] in _ids(ml, ODD) & _ids(mn, ODD)


def test_partial_characters_agree_with_naive_elsewhere(odd, gbnf) -> None:
    llama, naive = _both(odd, gbnf, 'root ::= "é" | "à" "a"', "é|àa")
    assert llama == naive and OTOK[b"\xc3"] in llama
    llama, naive = _both(odd, gbnf, 'root ::= "é" | "à" "a"', "é|àa", [b"\xc3"])
    assert llama == naive == {OTOK[b"\xa9"]}  # the continuation of é; à's byte is not a token


# ------------------------------------------------------------ the protocol --


def test_special_eos_and_padding_follow_the_protocol(hand, gbnf) -> None:
    m = hand(LL).matcher(hand(LL).compile(gbnf(JSON_GBNF)))
    rows = np.full((3, bm.words(HAND.size)), -1, dtype=np.int32)
    info = m.fill_bitmask(rows, 1)
    assert info.allowed == bm.popcount(rows[1]) and (rows[0] == -1).all() and (rows[2] == -1).all()
    allowed = set(bm.allowed_ids(rows[1], bm.words(HAND.size) * 32).tolist())
    assert not allowed & {SPECIAL, EOS, *HAND_PAD} and not any(i >= HAND.size for i in allowed)
    before = _ids(m)
    for bad in (TOK[b"}"], TOK[b":"], SPECIAL, EOS, *HAND_PAD, HAND.size, -1, 10_000):
        assert not m.accept_token(bad)  # refused before llama.cpp sees it: no abort, no change
    assert _ids(m) == before and m.num_tokens == 0
    assert m.accept_tokens([TOK[b"1"], TOK[b"2"]]) == 2 and m.is_accepting() and EOS in _ids(m)
    assert m.accept_token(EOS) and m.is_terminated() and _ids(m) == {EOS}
    assert not m.accept_token(TOK[b"1"]) and m.accept_token(EOS)


def test_a_refused_token_never_reaches_llama_cpp(hand, gbnf) -> None:
    """llama.cpp aborts the process on accepting a token its grammar refuses: every path
    answers False instead, ``accept_allowed`` (a caller's promise) too."""
    m = hand(LL).matcher(hand(LL).compile(gbnf(JSON_GBNF)))
    assert not m.accept_allowed(TOK[b"}"])  # no mask made yet: a one-candidate apply
    _row(m)
    assert not m.accept_allowed(TOK[b"}"]) and not m.accept_token(TOK[b":"])  # the last mask's bit
    assert m.accept_allowed(TOK[b"["]) and not m.accept_allowed(TOK[b":"])  # a new state: apply again
    f = m.fork()
    assert not f.accept_allowed(TOK[b":"]) and f.accept_allowed(TOK[b"1"])
    m.rollback(1)
    assert not m.accept_allowed(TOK[b"]"]) and m.num_tokens == 0 and f.num_tokens == 2


def _long_json(n: int) -> str:
    return "[" + ", ".join(str(i % 10) for i in range(n)) + "]"


def test_rollback_past_checkpoints_fork_and_reset(hand, gbnf) -> None:
    eng = hand(LL)
    compiled = eng.compile(gbnf(JSON_GBNF))
    ids = HAND.encode(_long_json(60))
    assert len(ids) > 3 * CHECKPOINT_EVERY
    m = eng.matcher(compiled)
    rows = []
    for t in ids:
        rows.append(_row(m))
        assert m.accept_token(t)
    rows.append(_row(m))
    assert m.is_accepting()
    # rollback(n) lands on each earlier mask, across checkpoints, one step or many
    for k in (len(ids) - 1, 2 * CHECKPOINT_EVERY + 1, 2 * CHECKPOINT_EVERY, CHECKPOINT_EVERY - 1, 5, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m), rows[k]), k
        assert m.accept_tokens(ids[k:k + 40]) == len(ids[k:k + 40])  # and can go on again
        assert np.array_equal(_row(m), rows[min(k + 40, len(ids))]), k
    assert m.accept_tokens(ids[m.num_tokens:]) == len(ids) - 40
    m.rollback(m.num_tokens - 70)
    # a fork goes on alone; both roll back past the checkpoints they share
    f = m.fork()
    assert np.array_equal(_row(f), rows[70])
    assert f.accept_tokens([*ids[70:], EOS]) == len(ids) - 70 + 1 and f.is_terminated()
    f.rollback(f.num_tokens - 40)
    assert np.array_equal(_row(f), rows[40]) and not f.is_terminated()
    assert np.array_equal(_row(m), rows[70]) and m.num_tokens == 70
    m.rollback(35)
    assert np.array_equal(_row(m), rows[35]) and np.array_equal(_row(f), rows[40])
    # validate_tokens leaves no trace; reset goes back to the start
    assert m.validate_tokens([*ids[35:], TOK[b"]"]]) == len(ids) - 35 and np.array_equal(_row(m), rows[35])
    f.reset()
    assert f.num_tokens == 0 and not f.is_terminated() and np.array_equal(_row(f), rows[0])
    with pytest.raises(ValueError):
        f.rollback(1)


def test_threaded_batch_equals_single_calls(hand, gbnf) -> None:
    eng = hand(LL)
    compiled = eng.compile(gbnf(JSON_GBNF))
    walks = [[*HAND.encode(t), EOS] for t in ('{"ab": [1, 2.5]}', "[true, null]", '"é"')]
    singles = [eng.matcher(compiled) for _ in walks]
    batch = make_batch(eng, [eng.matcher(compiled) for _ in walks], 3)
    assert isinstance(batch, ThreadedBatch)  # llama.cpp has no batch call of its own
    n, words = len(walks), bm.words(HAND.size)
    got, ref = np.zeros((n, words), dtype=np.int32), np.zeros((n, words), dtype=np.int32)
    for s in range(max(map(len, walks)) + 1):
        tokens = np.array([NO_TOKEN if s == 0 else (w[s - 1] if s <= len(w) else EOS) for w in walks], dtype=np.int32)
        want = [m.accept_token(int(t)) if t != NO_TOKEN else -1 for m, t in zip(singles, tokens, strict=True)]
        for i, m in enumerate(singles):
            m.fill_bitmask(ref, i)
        res = batch.step(tokens, got)
        assert [int(a) for a in res.accepted] == [int(w) for w in want] and np.array_equal(got, ref), s
    batch.close()


def test_grammar_errors_are_peer_errors_with_llama_cpps_message(hand, gbnf) -> None:
    eng = hand(LL)
    cases = {
        'root ::= "a" foo': "Undefined rule identifier 'foo'",
        'root ::= "a" (\nx ::= "b"': "expecting ')'",
        'root ::= root "a" | "b"': "left recursion",
        'start ::= "a"': "grammar does not contain a 'root' symbol",
        "root ::= [a-": "unexpected end of input",
        "   \n": "empty grammar",
    }
    for text, words in cases.items():
        with pytest.raises(PeerError, match=r"^peer:llama\.cpp: ") as e:
            eng.compile(gbnf(text))
        assert words in str(e.value), (text, str(e.value))
    with pytest.raises(PeerError, match=r"\(line 2, column 3\)"):  # where the parser stopped
        eng.compile(gbnf('root ::= "a" (\nx ::= "b"'))
    assert eng.compile(gbnf('root ::= "a"')).kind == "gbnf"  # and the engine works on


def test_nothing_is_printed(capfd, gbnf, tmp_path) -> None:
    v = Vocabulary.from_tokens([b"", b"x", b"y", b" "], eos_ids=(0,), name="quiet")
    eng = get_engine(LL, v, cache_dir=str(tmp_path))  # a new file: written, loaded, checked
    for text in ('root ::= "x"+', 'root ::= "x" bad', 'root ::= ("x"'):
        try:
            m = eng.matcher(eng.compile(gbnf(text)))
            m.fill_bitmask(bm.allocate(v.size))
            m.accept_token(1)
            m.accept_token(2)
        except PeerError:
            pass
    eng.compile({"type": "string"})
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_text_token_llama_cpp_ends_generation_on_is_refused(tmp_path) -> None:
    # llama.cpp makes any token spelt "<|eot_id|>" end-of-generation, special or not
    v = Vocabulary.from_tokens([b"", b"a", b"<|eot_id|>"], eos_ids=(0,), special_tokens={0: "</s>"}, name="eog")
    with pytest.raises(PeerError, match=r"token 2 .*ends generation"):
        get_engine(LL, v, cache_dir=str(tmp_path))


def test_describe_and_direct_check(hand, gbnf) -> None:
    eng = hand(LL)
    assert eng.describe() == {"version": "0.3.36", "options": {}}
    run = eng.direct_check(gbnf(ARITH_GBNF))
    ids = HAND.encode("(1+2)*3")
    steps = run.walk(ids)
    assert len(steps) == len(ids) and all(s >= 0 for s in steps) and run.ttfm_s > 0
    assert len(run.walk([TOK[b"("], TOK[b")"], TOK[b"1"]])) == 2  # up to the refused token
    ids = HAND.encode("[1, 2]")
    assert len(eng.direct_check({"type": "array", "items": {"type": "integer"}}).walk(ids)) == len(ids)


# ------------------------------------------------ JSON Schema, Llama-3 (shared) --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.fixture(scope="module")
def l3(llama3: Vocabulary):
    return _engines_on(llama3)


class _Scan:
    """Where each byte of a JSON text falls (outside strings, in a key, in a value
    string) and the property it belongs to: what names a difference's class."""

    def __init__(self, schema: dict) -> None:
        self.props: dict[str, dict] = {}
        self._collect(schema)
        self.stack: list[str] = []
        self.keys: list[str | None] = []
        self.ctx = "outside"
        self.esc = False
        self.expect_key = False
        self.buf = b""
        self.digits = 0

    def _collect(self, node) -> None:
        if isinstance(node, dict):
            for k, sub in (node.get("properties") or {}).items():
                self.props.setdefault(k, sub)
            for sub in node.values():
                self._collect(sub)
        elif isinstance(node, list):
            for sub in node:
                self._collect(sub)

    def clone(self) -> _Scan:
        other = copy.copy(self)
        other.stack, other.keys = list(self.stack), list(self.keys)
        return other

    def prop(self) -> dict:
        key = self.keys[-1] if self.keys else None
        return self.props.get(key, {}) if key is not None else {}

    def feed(self, b: int) -> set[str]:
        c = bytes([b])
        if self.ctx != "outside":
            p = self.prop() if self.ctx == "value" else {}
            out = {"string format"} if "format" in p else set()
            fixed = self.ctx == "key" or "enum" in p or "const" in p
            if self.esc or c == b"\\":
                self.esc = not self.esc
                return out | ({"escaped fixed string"} if fixed else set())
            if c == b'"':
                if self.ctx == "key":
                    self.keys[-1] = self.buf.decode("utf-8", "replace")
                self.ctx = "outside"
                return out
            self.buf += c
            if b < 0x20:
                out.add("control character in a string")
            try:
                codecs.getincrementaldecoder("utf-8")().decode(self.buf, final=False)
            except UnicodeDecodeError:
                out.add("not UTF-8")
            return out
        if c in b" \t\n\r":
            self.digits = 0
            return {"whitespace"}
        if c == b'"':
            self.ctx = "key" if self.stack[-1:] == ["{"] and self.expect_key else "value"
            self.buf = b""
            return {"string format"} if self.ctx == "value" and "format" in self.prop() else set()
        if c in b"0123456789-+.eE":
            self.digits = self.digits + 1 if c.isdigit() else 0
            p = self.prop()
            return {"number bounds"} if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(p) else set()
        self.digits = 0
        if c in b"{[":
            self.stack.append(c.decode())
            if c == b"{":
                self.keys.append(None)
                self.expect_key = True
        elif c in b"}]" and self.stack:
            if self.stack.pop() == "{":
                self.keys.pop()
        elif c == b",":
            self.expect_key = self.stack[-1:] == ["{"]
        elif c == b":":
            self.expect_key = False
        return set()


def _classes(scan: _Scan, token: bytes, at_end: bool) -> set[str]:
    s = scan.clone()
    out: set[str] = set()
    for b in token:
        out |= s.feed(b)
    if at_end and token.strip() == b"":
        out.add("whitespace")  # after the root value
    return out


# what each embedded schema's walks show: (which engine allows more, class)
SCHEMA_CLASSES = {
    "s08_array_matrix": {("llg", "whitespace"), ("llama", "whitespace")},
    "s10_enum_ticket": {("llg", "whitespace"), ("llama", "whitespace"), ("llg", "escaped fixed string")},
    "s39_booleans_and_null": {("llg", "whitespace"), ("llama", "whitespace"), ("llg", "escaped fixed string")},
}


@pytest.mark.shared
@pytest.mark.parametrize("name", list(SCHEMA_CLASSES))
def test_json_schema_differs_from_llguidance_only_in_named_classes(llama3: Vocabulary, l3, name: str) -> None:
    """llama-cpp-python's converter writes one optional space after each value and
    punctuation (and after the root value), none before it, where JSON (masklab's
    ``llguidance`` strategy) allows any whitespace between tokens; and keys, enum and const
    strings as literals, where JSON allows escaped spellings ("\\u006b")."""
    item = next(i for i in iter_items(embedded_dir() / "schemas") if i.name == name)
    llama, ours = l3(LL), l3("llguidance")
    cl, co = llama.compile(item.spec), ours.compile(item.spec)
    assert cl.kind == "json_schema" and "space ::=" in cl.source
    eos = llama3.eos_ids[0]
    seen: set[tuple[str, str]] = set()
    for case in (c for c in item.cases if c.valid):
        ml, mo = llama.matcher(cl), ours.matcher(co)
        ids = llama3.encode(case.text)
        scan = _Scan(item.spec)
        for k, t in enumerate([*ids, eos]):
            a, b = _ids(ml, llama3), _ids(mo, llama3)
            assert (eos in a) == (eos in b), (case.text, k)  # complete at the same points
            for side, diff in (("llama", a - b), ("llg", b - a)):
                for d in diff:
                    classes = _classes(scan, llama3.token_bytes[d], k == len(ids))
                    assert classes, (name, case.text, k, side, llama3.token_bytes[d])  # each difference named
                    seen |= {(side, c) for c in classes}
            assert ml.accept_token(t) and mo.accept_token(t), (case.text, k)
            if t != eos:
                for byte in llama3.token_bytes[t]:
                    scan.feed(byte)
    assert seen == SCHEMA_CLASSES[name]


@pytest.mark.shared
def test_json_schema_difference_classes_on_concrete_tokens(llama3: Vocabulary, l3) -> None:
    """Each class of difference between llama-cpp-python's converter and JSON Schema, on a
    token: (text so far, token, llama.cpp allows it, masklab's llguidance allows it)."""
    person = next(i for i in iter_items(embedded_dir() / "schemas") if i.name == "s01_flat_person").spec
    tok = {b: i for i, b in enumerate(llama3.token_bytes) if b}
    eos = llama3.eos_ids[0]
    cases = [
        # whitespace: one optional space after values and punctuation, and after the root value
        (person, "", b" ", False, True),
        (person, '{"name": "Bob",', b" ", True, True),
        (person, '{"name": "Bob",', b"  ", False, True),
        (person, '{"name": "Bob",', b"\n", False, True),
        (person, '{"name": "Bob", "age": 0}', b" ", True, False),
        (person, '{"name": "Bob", "age": 0}', eos, True, True),
        # strings: char ::= [^"\\] takes raw control characters and bytes that are never UTF-8
        (person, '{"name": "', b"\n", True, False),
        (person, '{"name": "', b"\t", True, False),
        (person, '{"name": "', b"\xff", True, False),
        # keys are literals: no escaped spelling
        (person, '{"', b"\\", False, True),
        (person, '{"', b"name", True, True),
        # integer bounds are not written (age: 0..150), nor formats (email)
        (person, '{"name": "Bob", "age": ', b"201", True, False),
        (person, '{"name": "Bob", "age": 36, "email": "', b'"', True, False),
        (person, '{"name": "Bob", "age": 36, "email": "', b"@", True, False),
        # digits: at most 16 in an integer part, no leading zero in an exponent
        ({"type": "integer"}, "123456789012345", b"6", True, True),
        ({"type": "integer"}, "123456789012345", b"67", False, True),
        ({"type": "number"}, "1e", b"05", False, True),
        ({"type": "number"}, "1e", b"5", True, True),
    ]
    for schema, text, token, want_llama, want_ours in cases:
        t = token if isinstance(token, int) else tok[token]
        got = []
        for name in (LL, "llguidance"):
            eng = l3(name)
            m = eng.matcher(eng.compile(schema))
            ids = llama3.encode(text) if text else []
            assert m.accept_tokens(ids) == len(ids), (name, text)
            got.append(bm.get_bit(_row(m, llama3), t))
        assert got == [want_llama, want_ours], (text, token)


@pytest.mark.shared
def test_json_schema_refusals_of_the_converter(l3) -> None:
    # llama-cpp-python's converter does not resolve the $refs inside the definitions of
    # a root $ref (s19): a KeyError, as a PeerError
    item = next(i for i in iter_items(embedded_dir() / "schemas") if i.name == "s19_recursive_linked_list")
    with pytest.raises(PeerError, match=r"KeyError: '#/\$defs/node'"):
        l3(LL).compile(item.spec)
    # nor a pattern without ^...$ anchors (s50's)
    item = next(i for i in iter_items(embedded_dir() / "schemas") if i.name == "s50_app_config")
    with pytest.raises(PeerError, match=r'AssertionError: Pattern must start with "\^" and end with "\$"'):
        l3(LL).compile(item.spec)


@pytest.mark.shared
def test_rollback_fork_reset_on_llama3(llama3: Vocabulary, l3) -> None:
    item = next(i for i in iter_items(embedded_dir() / "schemas") if i.name == "s08_array_matrix")
    eng = l3(LL)
    compiled = eng.compile(item.spec)
    ids = llama3.encode(json.dumps([[1.5, 2, 3], [4, 5.25], [6, 7, 8], [9, 10]]))
    m = eng.matcher(compiled)
    rows = []
    for t in ids:
        rows.append(_row(m, llama3))
        assert m.accept_token(t)
    rows.append(_row(m, llama3))
    m.rollback(len(ids) - 5)
    assert np.array_equal(_row(m, llama3), rows[5])
    f = m.fork()
    assert f.accept_tokens([*ids[5:], llama3.eos_ids[0]]) == len(ids) - 5 + 1 and f.is_terminated()
    assert np.array_equal(_row(m, llama3), rows[5]) and not m.is_terminated()
    for k in (4, 1, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m, llama3), rows[k]), k
    f.reset()
    assert np.array_equal(_row(f, llama3), rows[0]) and f.accept_tokens(ids) == len(ids) and f.is_accepting()
