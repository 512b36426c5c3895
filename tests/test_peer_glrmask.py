"""``peer:glrmask`` (:mod:`strategies.peer_glrmask`) against ``naive`` and on its own.

* **Agreement**: on the hand vocabulary of ``tests/test_peers.py``, glrmask's full row
  equals naive's at every step of valid walks (EOS step included) for every grammar of
  its AGREEMENT table, and every ``mask_strategy`` gives the same rows.
* **Documented differences**: glrmask lexes greedily (as llguidance); its JSON Schema
  compiler writes ``", "``/``": "`` only and ignores ``format``; what it refuses.
* **Llama 3** (shared): native JSON schemas from ``datasets/``, masks equal
  ``peer:llguidance``'s with the same separators and inside our ``llguidance``'s;
  forced bytes and tokens equal our ``xgrammar``'s on the same Grammar; rollback.
* The protocol around glrmask's calls: refused tokens (``commit_token`` would end the
  state), rollback by replay, fork, reset, draft masks and trees, the batch fallback,
  forced bytes and tokens against naive's, special tokens as token externs, empty
  languages, errors and panics as :class:`PeerError`, options.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from strategies import check_options, get_engine
from strategies.peers import PeerError
from tests._support.shared import require_shared
from tests.conformance.test_forced import GRAMMARS as FORCED_GRAMMARS
from tests.conformance.test_forced import TEXTS as FORCED_TEXTS
from tests.conformance.test_forced import VOCAB as FF
from tests.test_peers import (
    AGREEMENT,
    EOS,
    HAND,
    HAND_PAD,
    SPECIAL,
    TOK,
    _engines_on,
    _ids,
    _row,
    _show,
)
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError, Unsatisfiable, UnsupportedGrammar
from toolkit.core.forced import TokenExtensions
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import embedded_dir, load_item
from toolkit.grammar.ir import Grammar
from toolkit.grammar.lark_dialect import LarkText
from toolkit.jsonschema.compiler import JsonSchemaText

glrmask = pytest.importorskip("glrmask", reason="peer:glrmask needs glrmask (the [peers] extra)")

GLR = "peer:glrmask"
STRATEGIES = ("auto", "fast_compile", "fast_masks", "parser_dwa", "token_trie")


@pytest.fixture(scope="module")
def hand():
    return _engines_on(HAND)


def _steps(engine, compiled, oracle, reference, text: str, vocab: Vocabulary = HAND) -> None:
    """Every row of ``engine`` equals ``oracle``'s along ``text`` then EOS."""
    ids = [*vocab.encode(text), vocab.eos_ids[0]]
    pm, om = engine.matcher(compiled), oracle.matcher(reference)
    for k, t in enumerate(ids):
        got, want = _row(pm, vocab), _row(om, vocab)
        if not np.array_equal(got, want):
            a, b = set(bm.allowed_ids(got, vocab.size).tolist()), set(bm.allowed_ids(want, vocab.size).tolist())
            pytest.fail(f"{engine.options} on {text!r} after {vocab.decode(ids[:k])!r}: "
                        f"glrmask only {_show(a - b, vocab)}, {oracle.name} only {_show(b - a, vocab)}")
        assert bm.get_bit(want, t)
        assert pm.accept_token(t) and om.accept_token(t)
    assert pm.is_terminated() and _ids(pm, vocab) == {vocab.eos_ids[0]}


# --------------------------------------------------------------- agreement --


@pytest.mark.parametrize("case", list(AGREEMENT))
def test_masks_equal_naive_masks_at_every_step(hand, case: str) -> None:
    grammar, walks, _ = AGREEMENT[case]
    eng, naive = hand(GLR), hand("naive")
    compiled, reference = eng.compile(grammar), naive.compile(grammar)
    assert compiled.kind == "lark" and "&" not in compiled.source  # boolean terminals as one regex
    for text in walks:
        _steps(eng, compiled, naive, reference, text)


@pytest.mark.parametrize("case", ["json-ignore-ws", "arith-ignore-ws", "lark-kv-ignore", "regex-utf8"])
def test_every_mask_strategy_gives_the_same_masks(hand, case: str) -> None:
    grammar, walks, _ = AGREEMENT[case]
    base = hand(GLR)
    reference = base.compile(grammar)
    settings = [{"mask_strategy": s} for s in STRATEGIES]
    settings += [{"mask_strategy": "token_trie", "parser_backend": "template_dfa"},
                 {"mask_strategy": "token_trie", "merge_equivalent_tokens": True}]
    for options in settings:
        eng = hand(GLR, **options)
        assert eng.describe()["options"] == {"jump_forward": "protocol", **options} | (
            {"parser_backend": options.get("parser_backend", "lr_table"),
             "merge_equivalent_tokens": options.get("merge_equivalent_tokens", False)}
            if options["mask_strategy"] in ("token_trie", "fast_compile") else {})
        compiled = eng.compile(grammar)
        for text in walks:
            _steps(eng, compiled, base, reference, text)


def test_text_tokens_only_reach_glrmask(hand) -> None:
    """glrmask's vocabulary holds the text tokens, so its own bits never name a special,
    EOS or padding id; the protocol adds EOS where the grammar accepts."""
    eng = hand(GLR)
    text = {int(i) for i in HAND.text_token_ids()}
    assert SPECIAL not in text and EOS not in text and not set(HAND_PAD) & text
    m = eng.matcher(eng.compile(Grammar.from_regex("[a-c]*")))
    row = bm.allocate(HAND.size)[0]
    m.state.fill_mask(row)  # glrmask's own row, before the protocol's clipping
    assert set(bm.allowed_ids(row, HAND.size).tolist()) == {TOK[b] for b in (b"a", b"b", b"c", b"ab", b"abc")}
    assert _ids(m) == {TOK[b] for b in (b"a", b"b", b"c", b"ab", b"abc")} | {EOS}


# ---------------------------------------------------- documented differences --


def test_it_lexes_greedily_as_llguidance_does(hand) -> None:
    """glrmask's Lark lexer takes the longest match: ``start: N N`` never splits ``12``
    (naive accepts after it), and after ``aa`` in ``A: /a+/ B: /ab/`` only ``a`` may
    follow.  Unlike llguidance it allows ignored text after the last lexeme."""
    eng, naive = hand(GLR), hand("naive")
    nn = Grammar.from_lark("start: N N\nN: /[0-9]+/\n")
    m, n = eng.matcher(eng.compile(nn)), naive.matcher(naive.compile(nn))
    assert m.accept_token(TOK[b"12"]) and n.accept_token(TOK[b"12"])
    assert _ids(m) == _ids(n) - {EOS} and EOS in _ids(n)
    ab = Grammar.from_lark("start: A B\nA: /a+/\nB: /ab/\n")
    m = eng.matcher(eng.compile(ab))
    assert m.accept_tokens([TOK[b"a"], TOK[b"a"]]) == 2 and _ids(m) == {TOK[b"a"]}
    assert ab.accepts("aab")
    ws = Grammar.from_lark('%ignore " "\nstart: "a" "b"\n')
    m = eng.matcher(eng.compile(ws))
    assert m.accept_token(TOK[b"ab"]) and _ids(m) == {EOS, TOK[b" "], TOK[b"  "]}


def test_its_json_schema_compiler_writes_fixed_separators_and_ignores_format(hand) -> None:
    """glrmask's own JSON: ``", "`` and ``": "`` and no other whitespace; a property name
    as written (no ``\\u`` escapes); ``format`` not checked."""
    eng = hand(GLR)
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a"], "additionalProperties": False}
    c = eng.compile(schema)
    assert c.kind == "json_schema" and json.loads(c.source) == schema
    m = eng.matcher(c)
    assert _ids(m) == {TOK[b"{"], TOK[b'{"']}  # no leading whitespace
    assert m.accept_tokens([TOK[b'{"'], TOK[b"a"], TOK[b'"'], TOK[b":"]]) == 4
    assert _ids(m) == {TOK[b" "]}  # ": " exactly
    assert m.accept_tokens([TOK[b" "], TOK[b"[1"], TOK[b","]]) == 3 and _ids(m) == {TOK[b" "]}  # ", " exactly
    assert m.accept_tokens([TOK[b" "], TOK[b"2"], TOK[b"]"], TOK[b"}"]]) == 4
    assert m.is_accepting() and _ids(m) == {EOS}
    assert m.validate_tokens(HAND.encode(' {"a":[1]}')) == 0
    fmt = {"type": "string", "format": "date-time"}
    ids = [*HAND.encode('"ab"'), EOS]  # not a date-time
    assert eng.matcher(eng.compile(fmt)).validate_tokens(ids) == len(ids)
    naive = hand("naive")  # masklab's compiler checks the format
    assert naive.matcher(naive.compile(fmt)).validate_tokens(ids) < len(ids) - 1


def test_what_it_refuses_is_a_peer_error_with_its_message(hand) -> None:
    eng = hand(GLR)
    with pytest.raises(PeerError, match="peer:glrmask: ValueError: .*conditional assertions"):
        eng.compile({"if": {"type": "integer"}, "then": {"minimum": 1}, "else": {"type": "string"}})
    with pytest.raises(PeerError, match="oneOf"):
        eng.compile({"oneOf": [{"type": "integer"}, {"type": "number"}]})
    with pytest.raises(PeerError, match="unterminated string"):
        eng.compile(LarkText('start: "a\n'))
    with pytest.raises(PeerError, match="%llguidance"):  # llguidance's Lark extensions are not glrmask's
        eng.compile(LarkText('%llguidance {}\nstart: "a"\n'))
    with pytest.raises(PeerError, match="invalid JSON"):
        eng.compile(JsonSchemaText("{"))
    with pytest.raises(UnsupportedGrammar, match="max_tokens"):
        eng.compile(Grammar.from_lark('start: a\na[max_tokens=3]: /[a-z]+/\n'))


def test_empty_languages_are_unsatisfiable(hand) -> None:
    """glrmask compiles these to a start state that allows nothing; the adapter refuses
    them as masklab's engines do (tests/test_unsatisfiable.py)."""
    from tests.test_unsatisfiable import SCHEMAS

    eng = hand(GLR)
    for schema, _, _ in SCHEMAS:
        with pytest.raises((Unsatisfiable, PeerError)):  # (glrmask itself refuses some)
            eng.compile(schema)
    with pytest.raises(Unsatisfiable, match="allows no token"):
        eng.compile({"type": "string", "minLength": 5, "maxLength": 2})
    with pytest.raises(Unsatisfiable, match="allows no token"):
        eng.compile(LarkText('start: /[^\\d\\D]/\n'))
    assert eng.compile({"type": "string", "maxLength": 0}).kind == "json_schema"  # '""' only: not empty


# ------------------------------------------------------------------ Llama 3 --

LLAMA_SCHEMAS = ("s04_nested_address", "s10_enum_ticket", "s18_recursive_tree", "s28_integer_ranges")
SEPARATORS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.mark.shared
def test_llama3_native_json_schemas_against_llguidance(llama3: Vocabulary) -> None:
    """Embedded schemas, each compiled by glrmask's own JSON Schema compiler, walked
    along their valid instances: every row equals ``peer:llguidance``'s with glrmask's
    separators (llguidance's own compiler) and lies inside our ``llguidance``'s (masklab's
    compiler, any whitespace), EOS exactly at the end."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    eng, ours = get_engine(GLR, llama3), get_engine("llguidance", llama3)
    ref = get_engine("peer:llguidance", llama3, json_options=SEPARATORS)
    eos = llama3.eos_ids[0]
    steps = 0
    for name in LLAMA_SCHEMAS:
        item = load_item(embedded_dir() / "schemas" / f"{name}.json")
        c, r, o = eng.compile(item.spec), ref.compile(item.spec), ours.compile(item.spec)
        for case in item.cases:
            if not case.valid:
                continue
            m, rm, om = eng.matcher(c), ref.matcher(r), ours.matcher(o)
            ids = [*llama3.encode(case.text), eos]
            for k, t in enumerate(ids):
                got, want, wide = _row(m, llama3), _row(rm, llama3), _row(om, llama3)
                assert np.array_equal(got, want), (name, llama3.decode(ids[:k]))
                assert not (got & ~wide).any(), (name, llama3.decode(ids[:k]))
                assert bm.get_bit(got, eos) == (k == len(ids) - 1)
                assert m.accept_allowed(t) and rm.accept_token(t) and om.accept_token(t)
                steps += 1
            assert m.is_terminated()
    assert steps > 150


@pytest.mark.shared
def test_llama3_forced_bytes_and_tokens_equal_xgrammar(llama3: Vocabulary) -> None:
    """The same Grammar in both (masklab's reading of the schema): at every step of a
    valid instance the forced bytes and the protocol's forced tokens are our
    ``xgrammar``'s (itself held to llguidance's in ``tests/test_forced.py``; llguidance
    forces ``"`` after ``"auto`` where the Grammar allows trailing whitespace: ``" ``
    could follow)."""
    eng, ref = get_engine(GLR, llama3), get_engine("xgrammar", llama3)
    steps = forced = 0
    for name in ("s04_nested_address", "s12_enum_mixed"):
        item = load_item(embedded_dir() / "schemas" / f"{name}.json")
        g = Grammar.from_json_schema(item.spec)
        c, r = eng.compile(g), ref.compile(g)
        for case in item.cases:
            if not case.valid:
                continue
            m, rm = eng.matcher(c), ref.matcher(r)
            for t in [*llama3.encode(case.text), llama3.eos_ids[0]]:
                fb = rm.forced_bytes()
                assert m.forced_bytes() == fb, (name, steps)
                assert m.forced_tokens() == rm.forced_tokens(), (name, steps, fb)
                forced += bool(fb)
                steps += 1
                assert m.accept_token(t) and rm.accept_token(t)
    assert steps > 40 and forced > 5


@pytest.mark.shared
def test_llama3_rollback_replays_and_fork_copies(llama3: Vocabulary) -> None:
    eng = get_engine(GLR, llama3)
    item = load_item(embedded_dir() / "schemas" / "s18_recursive_tree.json")
    text = next(case.text for case in item.cases if case.valid)
    ids = llama3.encode(text)
    m = eng.matcher(eng.compile(item.spec))
    rows = []
    for t in ids:
        rows.append(_row(m, llama3))
        assert m.accept_allowed(t)
    for keep in (len(ids) - 1, len(ids) // 2, 3, 0):
        m.rollback(m.num_tokens - keep)
        assert np.array_equal(_row(m, llama3), rows[keep]), keep
        f = m.fork()
        assert f.accept_tokens(ids[keep:]) == len(ids) - keep and f.is_accepting()
        assert np.array_equal(_row(m, llama3), rows[keep])


# ------------------------------------------------ the protocol around glrmask --

JSON = AGREEMENT["json-ignore-ws"][0]


def test_a_refused_token_leaves_the_state_as_it_was(hand) -> None:
    """glrmask's ``commit_token`` ends the state on a refused token; the matcher checks
    first (``accept_token``) or replays (``accept_allowed`` given a token its mask did
    not allow), so the state goes on."""
    eng = hand(GLR)
    m = eng.matcher(eng.compile(JSON))
    assert m.accept_tokens(HAND.encode('{"a":')) == 3
    before = _row(m)
    for bad in (TOK[b"}"], TOK[b":"], SPECIAL, EOS, *HAND_PAD):
        assert not m.accept_token(bad)
        assert np.array_equal(_row(m), before)
    assert not m.accept_allowed(TOK[b"}"])  # the caller was wrong: the state stays
    assert np.array_equal(_row(m), before) and m.error is None and m.num_tokens == 3
    assert m.accept_tokens(HAND.encode(" 12}")) == 3 and m.is_accepting()
    assert m.validate_tokens([TOK[b","], EOS]) == 0 and m.accept_token(EOS)


def test_rollback_fork_reset(hand) -> None:
    eng = hand(GLR)
    m = eng.matcher(eng.compile(JSON))
    seq = HAND.encode('{"abc": [123, true]}')
    rows = []
    for t in seq:
        rows.append(_row(m))
        assert m.accept_token(t)
    assert m.accept_token(EOS) and m.is_terminated()
    m.rollback(1)  # EOS only: nothing to replay
    assert not m.is_terminated() and m.state.is_accepting()
    for k in (len(seq) - 1, 5, 0):
        m.rollback(m.num_tokens - k)
        assert np.array_equal(_row(m), rows[k])
        assert m.validate_tokens(seq[k:]) == len(seq) - k and np.array_equal(_row(m), rows[k])
    assert m.accept_tokens(seq[:4]) == 4
    f = m.fork()
    assert f.state is not m.state and np.array_equal(_row(f), rows[4])
    assert f.accept_tokens(seq[4:]) == len(seq) - 4 and f.is_accepting()
    assert not m.is_accepting() and np.array_equal(_row(m), rows[4])
    f.reset()
    assert f.num_tokens == 0 and np.array_equal(_row(f), rows[0])
    with pytest.raises(ValueError):
        m.rollback(5)


def test_draft_masks_equal_the_sequential_masks(hand) -> None:
    eng = hand(GLR)
    m = eng.matcher(eng.compile(JSON))
    draft = HAND.encode('{"a": [1, true]}')
    got = np.zeros((len(draft) + 1, bm.words(HAND.size)), dtype=np.int32)
    assert m.fill_draft_bitmasks(draft, got) == len(draft)
    f = m.fork()
    for i, t in enumerate(draft):
        assert np.array_equal(got[i], _row(f)) and f.accept_token(t)
    assert np.array_equal(got[-1], _row(f)) and m.num_tokens == 0


def test_draft_tree_masks_equal_each_path_walked(hand) -> None:
    """The protocol's draft tree (rollbacks and accepts in turn: replays here)."""
    eng = hand(GLR)
    m = eng.matcher(eng.compile(JSON))
    assert m.accept_token(TOK[b"{"])
    tree = [(b'"', -1), (b'"a', -1), (b"b", 0), (b'":', 2), (b":", -1), (b" ", 3), (b"1", 5), (b"}", 6), (b",", 6),
            (b"\n", 1), (b'":', 1)]
    tokens, parents = [TOK[t] for t, _ in tree], [p for _, p in tree]
    got = np.zeros((len(tree) + 1, bm.words(HAND.size)), dtype=np.int32)
    before = _row(m)
    ok = m.fill_draft_tree(tokens, parents, got)
    assert np.array_equal(_row(m), before) and np.array_equal(got[0], before) and m.num_tokens == 1
    assert ok.tolist() == [True, True, True, True, False, True, True, True, True, False, True]
    for i in range(len(tree)):
        path, j = [], i
        while j >= 0:
            path.append(tokens[j])
            j = parents[j]
        f = m.fork()
        assert (f.accept_tokens(path[::-1]) == len(path)) == ok[i]
        assert np.array_equal(got[i + 1], _row(f) if ok[i] else np.zeros_like(got[i + 1])), i


def test_batch_is_the_thread_fallback_and_equals_single_calls(hand) -> None:
    """glrmask has no batch call: ``make_batch`` gives the thread fallback, whose steps
    (refused tokens now and then among them) equal the single calls."""
    from tests.conformance.test_batch import _compare
    from toolkit.core.batch import ThreadedBatch, make_batch

    eng = hand(GLR)
    c, k = eng.compile(JSON), eng.compile(AGREEMENT["arith-ignore-ws"][0])
    batch = make_batch(eng, [eng.matcher(c), eng.matcher(k)], 2)
    assert isinstance(batch, ThreadedBatch)
    batch.close()
    walks = [[*HAND.encode(t), EOS] for t in ('{"abc": [123, true]}', "1 + 2*3", '{"a": {"b": null}}', "(12)")]
    _compare(HAND, eng, [c, k, c, k], walks, threads=2)


@pytest.mark.parametrize("name", sorted(FORCED_GRAMMARS))
def test_forced_bytes_and_tokens_equal_naive(name: str) -> None:
    """As ``tests/test_forced.py`` holds every engine to: the protocol's forced bytes
    and tokens at every step; ``allows_bytes`` is naive's on every prefix of the rest."""
    g = Grammar.from_lark(FORCED_GRAMMARS[name])
    eng, naive = get_engine(GLR, FF), get_engine("naive", FF)
    m, ref = eng.matcher(eng.compile(g)), naive.matcher(naive.compile(g))
    walk = TokenExtensions.of(FF).greedy(FORCED_TEXTS[name])
    for k, t in enumerate([*walk, 0]):
        before = _row(m, FF)
        assert m.forced_bytes() == ref.forced_bytes()
        ft = m.forced_tokens()
        assert ft == ref.forced_tokens()
        rest = b"".join(FF.token_bytes[x] for x in walk[k:])
        for data in (rest[:1], rest[:3], rest, rest + b"}", b"x"):
            assert m.allows_bytes(data) == ref.allows_bytes(data), (name, data)
        assert np.array_equal(_row(m, FF), before)  # nothing changed
        assert m.accept_tokens(ft) == len(ft)
        m.rollback(len(ft))
        assert m.accept_token(t) and ref.accept_token(t)


def test_glrmask_forced_tokens_take_the_longest_token_at_each_step() -> None:
    """``commit_forced_tokens`` cuts ``{"name":`` as ``{"`` ``name"`` ``:``, although the
    model may go on with ``":"`` (a token that would merge the last ``"`` and ``:``
    with what follows): the protocol gives ``{"`` only (llguidance's rule).  With
    ``jump_forward="glrmask"`` ``forced_tokens()`` is glrmask's."""
    g = Grammar.from_lark(FORCED_GRAMMARS["object"])
    tok = {b: i for i, b in enumerate(FF.token_bytes)}
    for jump, want in (("protocol", [b'{"']), ("glrmask", [b'{"', b'name"', b":"])):
        eng = get_engine(GLR, FF, jump_forward=jump)
        m = eng.matcher(eng.compile(g))
        assert [FF.token_bytes[t] for t in m.forced_tokens()] == want
        assert m.native_forced_tokens() == [tok[b'{"'], tok[b'name"'], tok[b":"]]
        assert m.forced_bytes() == b'{"name":' and m.num_tokens == 0 and _ids(m, FF) == {tok[b"{"], tok[b'{"']}


# ------------------------------------------------------------ special tokens --


def test_special_tokens_become_token_externs(hand) -> None:
    """A special token the grammar names is a glrmask token extern bound to its id: the
    masks equal naive's (which reads it over a vocabulary view)."""
    g = Grammar.from_lark('start: "a" <s> /[0-9]+/\n')
    eng, naive = hand(GLR), hand("naive")
    c = eng.compile(g)
    assert "<|masklab_tokens_0|>" in c.source and c.special_ids == frozenset({SPECIAL})
    m, n = eng.matcher(c), naive.matcher(naive.compile(g))
    for t in (TOK[b"a"], SPECIAL, TOK[b"1"], TOK[b"2"], EOS):
        assert _ids(m) == _ids(n)
        assert m.accept_token(t) and n.accept_token(t)
    # a range holding text tokens is refused: glrmask would read them as text as well
    with pytest.raises(UnsupportedGrammar, match="text tokens"):
        eng.compile(Grammar.from_lark('start: "a" <[2-4]>\n'))


def test_native_lark_binds_special_token_names() -> None:
    vocab = Vocabulary.from_tokens([b"", b"", b"a", b"b", b""], eos_ids=(1,),
                                   special_tokens={0: "<|tool|>", 1: "<|end|>", 4: "<|x|>"}, name="sp")
    eng = get_engine(GLR, vocab)
    c = eng.compile(LarkText('start: "a" <|tool|> "b"\n'))
    assert c.special_ids == frozenset({0})
    m = eng.matcher(c)
    assert _ids(m, vocab) == {2}
    assert m.accept_token(2) and _ids(m, vocab) == {0} and not m.accept_token(4)
    assert m.accept_token(0) and m.accept_token(3) and _ids(m, vocab) == {1}
    with pytest.raises(MasklabError, match="nope"):
        eng.compile(LarkText('start: "a" <|nope|>\n'))


# --------------------------------------------------------- errors and panics --


class _Panic(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException, not an Exception."""


def test_panics_become_peer_errors(hand, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = get_engine(GLR, HAND)

    class Panicking:
        def __getattr__(self, name):
            raise _Panic(f"{name}: index out of bounds")

    monkeypatch.setattr(eng._gm, "Grammar", Panicking())
    with pytest.raises(PeerError, match="glrmask panicked in compile: _Panic: from_lark: index out of bounds"):
        eng.compile(Grammar.from_regex("ab"))
    monkeypatch.undo()
    m = eng.matcher(eng.compile(Grammar.from_regex("ab")))

    class PanickingState:
        def fill_mask(self, row):
            raise _Panic("fill")

    m.state = PanickingState()
    assert _ids(m) == {EOS} and "panicked in fill_mask" in m.error  # the sticky error state
    assert not m.accept_token(TOK[b"a"])


# ----------------------------------------------------------------- options --


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="mask_strategy.*one of 'auto'"):
        get_engine(GLR, HAND, mask_strategy="bogus")
    with pytest.raises(ValueError, match="mask_strategy"):
        check_options(GLR, {"mask_strategy": 1})
    with pytest.raises(ValueError, match="no option 'boundary_mask_strategy'"):
        check_options(GLR, {"boundary_mask_strategy": "auto"})
    with pytest.raises(ValueError, match="token-trie"):
        get_engine(GLR, HAND, parser_backend="template_dfa")
    with pytest.raises(ValueError, match="jump_forward"):
        get_engine(GLR, HAND, jump_forward="llguidance")
    eng = get_engine(GLR, HAND, mask_strategy="parser_dwa")
    assert eng.describe() == {"version": glrmask.__version__, "options": {"mask_strategy": "parser_dwa",
                                                                        "jump_forward": "protocol"}}


def test_engine_facts(hand, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory: none reported.  Threads: one compile thread unless told.  The direct
    check times glrmask's own calls."""
    eng = hand(GLR)
    c = eng.compile(JSON)
    with pytest.raises(NotImplementedError):
        c.memory_bytes()
    assert c.engine_s > 0
    monkeypatch.setenv("GLRMASK_COMPILE_THREADS", "3")
    get_engine(GLR, HAND)
    assert os.environ["GLRMASK_COMPILE_THREADS"] == "3"
    monkeypatch.delenv("GLRMASK_COMPILE_THREADS")
    get_engine(GLR, HAND)
    assert os.environ["GLRMASK_COMPILE_THREADS"] == "1"
    run = eng.direct_check({"type": "array", "items": {"type": "integer"}})
    ids = HAND.encode("[1, 23]")
    assert run.ttfm_s > 0 and len(run.walk(ids)) == len(ids)
    assert len(run.walk([TOK[b"["], TOK[b"}"], TOK[b"1"]])) == 2  # up to the refused token
    run = eng.direct_check(JSON)
    assert len(run.walk(HAND.encode('{"a": 1}'))) == len(HAND.encode('{"a": 1}'))
    run = eng.direct_check(LarkText('start: "a" /[0-9]+/\n'))  # Lark text, compiled by glrmask's reader
    assert len(run.walk([TOK[b"a"], TOK[b"1"], TOK[b"a"]])) == 3
