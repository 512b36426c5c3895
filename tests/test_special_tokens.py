"""Special tokens as token-level terminals (issue #27): ``<|eom_id|>``, ``<[id]>``, ranges.

* **The reading**: names, ids, ranges and lists; refusals and errors say what and where;
  the vocabulary view (a special token's mark, real tokens holding the byte ``0xFF``,
  which could start the IR's mark of a special token, never text).
* **Every strategy against llguidance's own reading** of the same text on Llama 3
  (``peer:llguidance`` given the text): bit-identical masks, special-token steps included.
* **The harness**: items written for a vocabulary, test texts naming special tokens,
  outputs checked with their special tokens, ``masklab generate`` on the examples.

The checks every engine with token-level terminals takes over the small vocabulary here
(``SMALL``, ``GRAMMARS``: binding errors, where a special token is allowed, walks against
naive, token ranges over text tokens, the batch) and the refusal of every engine without
them are in ``tests/conformance/test_special_tokens.py``, which imports this module's
vocabulary and grammars.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from strategies import get_engine
from tests._support.shared import require_shared
from tests.test_llguidance import _as_ids, _row, _show
from toolkit.bench.measure import encode_case
from toolkit.core.errors import GrammarError
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.checks import check_output, check_prefix
from toolkit.data.datasets import embedded_dir, iter_items, select_items
from toolkit.grammar.ir import Grammar
from toolkit.grammar.lark_dialect import LarkText
from toolkit.grammar.special import (
    SpecialSpec,
    dual_ids,
    encode_with_specials,
    marked_bytes,
    parse_spec,
    vocab_view,
)

EXAMPLES = embedded_dir() / "special-tokens"

# ids: 0 EOS, 1 <|tag|>, 2 <|end|>, 3 <|other|>; text tokens that spell the names, and
# real tokens holding 0xFF (a byte-level vocabulary has them)
TOKENS = [b"</s>", b"<|tag|>", b"<|end|>", b"<|other|>", b"a", b"b", b"ab", b"1", b"12", b"2", b" ", b"<", b"|",
          b"tag", b"|>", b"<|", b"\xff", b"x\xff", b"\xff1", b"\xff12\xff", b"\xc3", b"\xa9", b"{", b"}"]
SMALL = Vocabulary.from_tokens(TOKENS, eos_ids=[0], special_tokens={0: "</s>", 1: "<|tag|>", 2: "<|end|>",
                                                                      3: "<|other|>"})

GRAMMARS = {
    "call": 'start: TEXT | call\nTEXT: /[a-z<|>]+/\ncall: <|tag|> NUM <|end|> | <[2]> "ab"\nNUM: /[0-9]+/\n',
    "range": "start: (<[1-2]> | WORD)+\nWORD: /[ab]+/\n",
    "list": 'start: <[1,3]> "a" | "b" <[2-3]>*\n',
    "nested": 'start: x+\nx: <|tag|> y <|end|> | "a"\ny: x* "1"\n',
}


# ---------------------------------------------------------------- reading --


def test_the_forms_read() -> None:
    assert parse_spec("<|eom_id|>").name == "<|eom_id|>"
    assert parse_spec("<think>").name == "<think>"
    assert parse_spec("<[128010]>").ranges == ((128010, 128010),)
    assert parse_spec("<[128000-128100, 128130-128170,5]>").ranges == ((128000, 128100), (128130, 128170), (5, 5))
    g = Grammar.from_lark(GRAMMARS["call"])
    assert sorted(g.terminals[n].special for n in g.special_terminals) == ["<[2]>", "<|end|>", "<|tag|>"]
    assert g.special_ids(SMALL) == {1, 2}
    # the same token written twice is one terminal
    assert len(Grammar.from_lark("start: <|tag|> <|tag|>").special_terminals) == 1
    # every token; every token but these: text tokens too, EOS never
    assert parse_spec("<[*]>").negated and not parse_spec("<[*]>").ranges
    assert parse_spec("<[^1, 4-6]>") == SpecialSpec("<[^1, 4-6]>", ranges=((1, 1), (4, 6)), negated=True)
    assert Grammar.from_lark("start: <[*]>").special_ids(SMALL) == set(range(1, len(TOKENS)))
    assert Grammar.from_lark("start: <[^1,4-20]>").special_ids(SMALL) == {2, 3, 21, 22, 23}
    assert Grammar.from_lark("start: <[5]>").special_ids(SMALL) == {5}  # a text token, as one token


@pytest.mark.parametrize("text, error, what", [
    ('start: <[3-1]>', GrammarError, "the range 3-1 is empty"),
    ('start: <[a]>', GrammarError, "not a token id"),
    ('start: <[^1,x]>', GrammarError, "'x' is not a token id"),
])
def test_malformed_and_refused_forms_say_where(text: str, error: type, what: str) -> None:
    with pytest.raises(error, match=what) as e:
        Grammar.from_lark(text)
    assert (e.value.line, e.value.column) == (1, 8)


def test_to_lark_writes_the_tokens_back() -> None:
    g = Grammar.from_lark(GRAMMARS["call"])
    text = g.to_lark()
    assert "<|tag|>" in text and "<|end|>" in text and "<[2]>" in text and "\udcff" not in text
    back = Grammar.from_lark(text)
    assert sorted(back.terminals[n].special for n in back.special_terminals) == ["<[2]>", "<|end|>", "<|tag|>"]


# --------------------------------------------------------------- language --


def test_the_vocabulary_view_marks_the_named_tokens_only() -> None:
    view = vocab_view(SMALL, frozenset({1, 2}))
    assert view.token_bytes[1] == b"\xff1\xff" and view.token_bytes[2] == b"\xff2\xff"
    assert view.token_bytes[3] == b"" and view.is_special(3) and view.eos_ids == (0,)
    assert [view.token_bytes[t] for t in (16, 17, 18, 19)] == [b""] * 4  # 0xFF bytes: no token
    assert view.token_bytes[4] == b"a" and view.size == SMALL.size
    # text tokens and 0xFF-holding tokens named as tokens get shadows past the vocabulary
    view = vocab_view(SMALL, frozenset({1, 4, 16}))
    assert dual_ids(SMALL, {1, 4, 16}) == (4, 16) and view.size == SMALL.size + 2
    assert view.token_bytes[SMALL.size :] == [b"\xff4\xff", b"\xff16\xff"] and view.token_bytes[4] == b"a"
    assert marked_bytes(SMALL, [1, 4, 2]) == b"\xff1\xffa\xff2\xff"


def test_or_bit_runs_folds_any_run_into_any_offset() -> None:
    from toolkit.core import bitmask as bm
    from toolkit.core.session import or_bit_runs

    rng = np.random.default_rng(0)
    for _ in range(200):
        src_bits, dst_bits = int(rng.integers(1, 300)), int(rng.integers(1, 300))
        src = rng.integers(-2**31, 2**31, bm.words(src_bits), dtype=np.int64).astype(np.int32)
        dst = rng.integers(-2**31, 2**31, bm.words(dst_bits), dtype=np.int64).astype(np.int32)
        n = int(rng.integers(0, min(src_bits, dst_bits) + 1))
        s, d = int(rng.integers(0, src_bits - n + 1)), int(rng.integers(0, dst_bits - n + 1))
        want = bm.to_bool(dst, 32 * len(dst)).copy()
        want[d : d + n] |= bm.to_bool(src, 32 * len(src))[s : s + n]
        or_bit_runs(src, dst, np.asarray([[s, d, n]], dtype=np.int64))
        assert np.array_equal(bm.to_bool(dst, 32 * len(dst)), want), (s, d, n)
    with pytest.raises(ValueError, match="outside a row"):
        or_bit_runs(src, dst, np.asarray([[0, 0, 32 * len(dst) + 1]], dtype=np.int64))


# ------------------------------------------------- llguidance's own reading --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


LLAMA = {
    "brave": r"""start: normal_text | brave | wolfram
normal_text: /(.|\n)*/
brave: <|python_tag|> "brave_search.call(query=" JSON_STRING ")" <|eom_id|>
wolfram: <|python_tag|> "wolfram_alpha.call(query=" JSON_STRING ")" <|eom_id|>
JSON_CHAR: /(\\(["\\\/bfnrt]|u[a-fA-F0-9]{4})|[^"\\\x00-\x1F\x7F])/
JSON_STRING: "\"" JSON_CHAR* "\""
""",
    "ranges": "start: (<[128002-128008,128010-128255]> | WORD)+ <|eom_id|>?\nWORD: / ?[a-z]+/\n",
    "think": 'start: <|reserved_special_token_0|> "\\n" THOUGHT <|reserved_special_token_1|> answer\n'
             'THOUGHT: /[a-z .\\n]*/\nanswer: "A: " /[0-9]+/\n',
    "any": 'start: <[*]> " answer: " /[0-9]+/\n',
    "text-or-call": json.loads((EXAMPLES / "t03_text_or_search_call.json").read_text())["lark"],
    "not": 'start: "x" <[^128000-128255]>{2} (WORD | <[1000-1500]>)+ <|eom_id|>\nWORD: / [a-z]+/\n',
}


@pytest.mark.parametrize("name", sorted(LLAMA))
def test_llama3_masks_equal_llguidance_reading_the_same_text(llama3: Vocabulary, name: str) -> None:
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    text = LLAMA[name]
    peer = get_engine("peer:llguidance", llama3)
    ref = peer.compile(LarkText(text))
    g = Grammar.from_lark(text)
    ours = {e: get_engine(e, llama3) for e in ("llguidance", "xgrammar", "outlines")}
    compiled = {e: eng.compile(g) for e, eng in ours.items()}
    compiled["peer:llguidance via to_lark"] = peer.compile(g)
    engine_of = {**ours, "peer:llguidance via to_lark": peer}
    rng = random.Random(name)
    special_steps = steps = 0
    for walk in range(6):
        mr = peer.matcher(ref)
        ms = {k: engine_of[k].matcher(c) for k, c in compiled.items()}
        for step in range(24):
            want, _ = _row(mr, llama3)
            for k, m in ms.items():
                got, _ = _row(m, llama3)
                assert np.array_equal(got, want), (name, k, walk, step, _show(_as_ids(got, llama3) ^ _as_ids(want, llama3), llama3)[:6])
            allowed = sorted(_as_ids(want, llama3))
            steps += 1
            if not allowed:
                break
            specials = [t for t in allowed if llama3.is_special(t) and t not in llama3.eos_ids]
            t = rng.choice(specials if specials and walk % 3 else allowed)
            special_steps += llama3.is_special(t) and t not in llama3.eos_ids
            assert mr.accept_token(t) and all(m.accept_token(t) for m in ms.values())
            if t in llama3.eos_ids:
                break
    assert special_steps >= 4 and steps >= 60


# ---------------------------------------------------------------- harness --


def test_the_examples_hold_their_tests_on_llama3(llama3: Vocabulary) -> None:
    items = list(iter_items(EXAMPLES))
    assert {i.name for i in items} == {"t01_llama31_tool_call", "t02_reasoning_address", "t03_text_or_search_call"}
    for item in items:
        assert item.vocab == "llama3" and item.fits("llama3") and not item.fits("tekken")
        g = item.grammar()
        for case in item.cases:
            ids = encode_case(llama3, item, case.text)
            data = marked_bytes(llama3, ids, g.bind(llama3))  # t03's text tokens: its <[^...]> terminals
            assert check_output(item, data, llama3)[0] == case.valid, (item.name, case)
        for engine in ("llguidance", "xgrammar", "outlines"):
            e = get_engine(engine, llama3)
            c = e.compile(g)
            for case in item.cases:
                ids = encode_case(llama3, item, case.text) + [llama3.eos_ids[0]]
                m = e.matcher(c)
                assert (m.accept_tokens(ids) == len(ids)) == case.valid, (engine, item.name, case.description)


def test_special_tokens_in_test_texts_and_outputs(llama3: Vocabulary) -> None:
    ids = encode_with_specials(llama3, "<|python_tag|>x<[128008]>", ["<|python_tag|>"])
    assert ids[0] == 128010 and ids[-1] == 128008 and llama3.decode(ids[1:-1]) == b"x"
    item = next(i for i in iter_items(EXAMPLES) if i.name == "t01_llama31_tool_call")
    call = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eom_id|>'
    data = marked_bytes(llama3, encode_case(llama3, item, call))
    assert check_output(item, data, llama3) == (True, "")
    # the names written as text are text, which the grammar's TEXT takes
    assert check_output(item, call.encode(), llama3) == (True, "")
    assert check_prefix(item, data[:-5], None, llama3) and not check_prefix(item, b"{", None, llama3)


def test_items_for_another_vocabulary_are_left_out(capsys) -> None:
    items = select_items(None, vocab="tekken")
    assert not any(i.vocab for i in items) and len(items) >= 20
    assert "3 item(s) written for another vocabulary left out on tekken" in capsys.readouterr().err
    assert {i.name for i in select_items(EXAMPLES, vocab="llama3")} == {
        "t01_llama31_tool_call", "t02_reasoning_address", "t03_text_or_search_call"}


def test_generate_runs_the_examples_on_llama3(llama3: Vocabulary, tmp_path) -> None:
    pytest.importorskip("torch", reason="generate needs the [model] extra")
    from toolkit.cli import main

    out = tmp_path / "gen"
    vocab = "llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model"))
    rc = main(["generate", "--engine", "llguidance", "xgrammar", "--model", "random:tiny", "--vocab", vocab,
               "--data", str(EXAMPLES), "--max-tokens", "12", "--temperature", "1", "--no-compare-kernels",
               "--out", str(out)])
    assert rc == 0
    seqs = {}
    for engine in ("llguidance", "xgrammar"):
        rows = [json.loads(x) for x in (out / engine / "batch-1" / "sequences.jsonl").read_text().splitlines()]
        assert {r["status"] for r in rows} <= {"valid", "unfinished"} and all(r["prefix_ok"] is not False for r in rows)
        seqs[engine] = {r["item"]: r["text"] for r in rows}
    # the reasoning grammar forces its opening special token, written by name in the text
    assert seqs["llguidance"]["t02_reasoning_address"].startswith("<|reserved_special_token_0|>\n")
    assert seqs["llguidance"] == seqs["xgrammar"]  # the same masks, the same seeded samples


def test_dual_tables_map_each_token_to_its_shadow_and_runs_cover_them() -> None:
    from strategies._base import DualTables

    rng = np.random.default_rng(3)
    for size in (1, 7, 100, 1000):
        duals = tuple(sorted(set(rng.integers(0, size, rng.integers(1, size + 1)).tolist())))
        tables = DualTables(size, duals)
        assert [int(tables.shadow[t]) for t in duals] == [size + i for i in range(len(duals))]
        assert int((tables.shadow >= 0).sum()) == len(duals)
        covered = [(int(s) + k, int(d) + k) for s, d, n in tables.runs for k in range(int(n))]
        assert covered == [(size + i, t) for i, t in enumerate(duals)]  # every shadow bit to its token, once
        assert all(tables.runs[i + 1, 1] > tables.runs[i, 1] + tables.runs[i, 2] for i in range(len(tables.runs) - 1))
