"""xgrammar's structural tags as an input format (issue 48, :mod:`toolkit.grammar.structural_tag`):
each element's language is xgrammar's (its own ``Grammar.from_structural_tag`` judging the
same strings, where xgrammar is installed; the verdicts written here otherwise), and our
strategies' masks over it equal ``naive``'s on a small byte-level vocabulary."""

from __future__ import annotations

import codecs
import json

import numpy as np
import pytest

import toolkit.jsonschema  # noqa: F401 - a %json body needs the schema compiler
from strategies import get_engine
from toolkit.core import bitmask as bm
from toolkit.core.errors import GrammarError, LimitExceeded, UnsupportedGrammar
from toolkit.core.forced import TokenExtensions
from toolkit.core.vocab import Vocabulary
from toolkit.grammar import StructuralTagText, format_of
from toolkit.grammar.inputs import format_for_path
from toolkit.grammar.structural_tag import (
    ELEMENTS,
    NESTED_XML_STYLES,
    XML_STYLES,
    read_structural_tag,
    to_lark,
)

_INT = {"type": "json_schema", "json_schema": {"type": "integer"}}
_OBJ = {"type": "json_schema", "json_schema": {"type": "object", "properties": {"x": {"type": "integer"}},
                                               "required": ["x"], "additionalProperties": False}}

# name -> (format, [(text, valid)]); token ids refer to VOCAB below (256 is <|call|>, 257 <|end|>)
CASES: dict[str, tuple[dict, list[tuple[str, bool]]]] = {
    "const_string": ({"type": "const_string", "value": "hi!"}, [("hi!", True), ("hi", False), ("hi!!", False)]),
    "regex": ({"type": "regex", "pattern": "[a-c]+x?"}, [("abc", True), ("cx", True), ("x", False), ("", False)]),
    "json_schema": (_OBJ, [('{"x": 1}', True), ('{"x":-2}', True), ('{"x": "a"}', False), ("{}", False)]),
    "json_schema_spaces": ({**_OBJ, "max_whitespace_cnt": 2},
                           [('{"x":  1}', True), ('{ "x":1}', True), ('{"x":\n\t1}', True), ('{"x":   1}', False),
                            (' {"x":1}', False), ('{"x":1} ', False)]),
    "sequence": ({"type": "sequence", "elements": [{"type": "const_string", "value": "A"},
                                                   {"type": "optional", "content": {"type": "regex", "pattern": "[0-9]+"}},
                                                   {"type": "repeat", "min": 1, "max": 2,
                                                    "content": {"type": "const_string", "value": "b"}}]},
                 [("Ab", True), ("A12bb", True), ("A12bbb", False), ("A", False)]),
    "qwen_xml": ({"type": "json_schema", "style": "qwen_xml", "json_schema": {
        "type": "object", "properties": {"a": {"type": "integer"}, "s": {"type": "string"},
                                         "e": {"type": "string", "enum": ["x", "y z"]},
                                         "o": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "required": ["a", "s"]}},
        [("<parameter=a>1</parameter><parameter=s>hi there</parameter>", True),
         ("\n<parameter=a>\n1\n</parameter>\n<parameter=s>\nhi\n</parameter>\n", True),
         ('<parameter=a>1</parameter><parameter=s>x</parameter><parameter=o>{"x": 2}</parameter>', True),
         ("<parameter=a>1</parameter><parameter=s>x</parameter><parameter=e> y z </parameter>", True),
         ("<parameter=s>x</parameter><parameter=a>1</parameter>", False), ("<parameter=a>1</parameter>", False),
         ("<parameter=a>1</parameter><parameter=s>a</parameter>b</parameter>", False),
         ('<parameter=a>1</parameter><parameter=s>x</parameter><parameter=e>"x"</parameter>', False),
         ('<parameter=a>1</parameter><parameter=s>x</parameter><parameter=o>{"x": 2, "q": 1}</parameter>', False)]),
    "grammar": ({"type": "tag", "begin": "<g>", "content": {"type": "grammar", "grammar":
                 'root ::= "{" item ("," item)* "}"\nitem ::= [a-z]+ | "x{" [0-9]{2} "}"\n'}, "end": "</g>"},
                [("<g>{a,bc}</g>", True), ("<g>{x{12}}</g>", True), ("<g>{}</g>", False), ("<g>{a}", False),
                 ("<g>{x{1}}</g>", False)]),
    "kimi_k3_xml": ({"type": "json_schema", "style": "kimi_k3_xml", "excludes": ["<|open|>", "<|close|>"],
                     "json_schema": {"type": "object", "properties": {
                         "a": {"type": "integer"}, "s": {"type": "string"}, "e": {"type": "string", "enum": ["x", "y z"]},
                         "o": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                         "required": ["a", "s"]}},
                    [('<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
                      '<|open|>argument key="s" type="string"<|sep|>hi there<|close|>argument<|sep|>', True),
                     ('\n<|open|>argument key="a" type="number"<|sep|> 1\n<|close|>argument<|sep|>\n'
                      '<|open|>argument key="s" type="string"<|sep|>x<|close|>argument<|sep|>'
                      '<|open|>argument key="e" type="string"<|sep|> y z <|close|>argument<|sep|>', True),
                     ('<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
                      '<|open|>argument key="s" type="string"<|sep|>x<|close|>argument<|sep|>'
                      '<|open|>argument key="o" type="object"<|sep|>{"x": 2}<|close|>argument<|sep|>', True),
                     ('<|open|>argument key="a" type="integer"<|sep|>1<|close|>argument<|sep|>'
                      '<|open|>argument key="s" type="string"<|sep|>x<|close|>argument<|sep|>', False),
                     ('<|open|>argument key="a" type="number"<|sep|>1<|close|>argument<|sep|>'
                      '<|open|>argument key="s" type="string"<|sep|>a<|open|>b<|close|>argument<|sep|>', False),
                     ('<|open|>argument key="s" type="string"<|sep|>x<|close|>argument<|sep|>', False)]),
    "or": ({"type": "or", "elements": [{"type": "const_string", "value": "yes"}, _INT]},
           [("yes", True), ("42", True), ("no", False)]),
    "plus_star": ({"type": "sequence", "elements": [
        {"type": "plus", "content": {"type": "const_string", "value": "a"}},
        {"type": "star", "content": {"type": "const_string", "value": "b"}}]},
        [("a", True), ("aabbb", True), ("b", False), ("aba", False)]),
    "repeat_unbounded": ({"type": "repeat", "min": 2, "max": -1, "content": {"type": "const_string", "value": "ab"}},
                         [("abab", True), ("ababab", True), ("ab", False)]),
    "tag": ({"type": "tag", "begin": "<a>", "content": _INT, "end": ["</a>", "</b>"]},
            [("<a>12</a>", True), ("<a>-1</b>", True), ("<a>1", False), ("<a>x</a>", False)]),
    "tag_text": ({"type": "tag", "begin": "<t>", "content": {"type": "any_text", "excludes": ["zz"]}, "end": "</t>"},
                 [("<t>a b</t>", True), ("<t></t>", True), ("<t>a</t>b</t>", False), ("<t>azzb</t>", False)]),
    "any_text": ({"type": "any_text", "excludes": ["zz"]}, [("", True), ("abc", True), ("azzb", False)]),
    "tag_text_chars": ({"type": "tag", "begin": "<t>", "content": {"type": "any_text", "max_chars": 3, "excludes": ["zz"]},
                        "end": "</t>"},
                       [("<t></t>", True), ("<t>abc</t>", True), ("<t>é€😀</t>", True), ("<t>abcd</t>", False),
                        ("<t>ab</</t>", False), ("<t>zz</t>", False)]),
    "any_text_chars": ({"type": "sequence", "elements": [{"type": "const_string", "value": "A"},
                                                         {"type": "any_text", "max_chars": 2}]},
                       [("A", True), ("Aab", True), ("A\n\n", True), ("Aabc", False)]),
    "tags_with_separator": ({"type": "tags_with_separator", "separator": ",", "tags": [
        {"type": "tag", "begin": "<a>", "content": _INT, "end": "</a>"}]},
        [("", True), ("<a>1</a>", True), ("<a>1</a>,<a>2</a>", True), ("<a>1</a>,", False)]),
    "tags_with_separator_first": ({"type": "tags_with_separator", "separator": ",", "at_least_one": True,
                                   "stop_after_first": True, "tags": [
                                       {"type": "tag", "begin": "<a>", "content": _INT, "end": "</a>"}]},
                                  [("<a>1</a>", True), ("", False), ("<a>1</a>,<a>2</a>", False)]),
    "triggered_tags": ({"type": "triggered_tags", "triggers": ["<f="], "tags": [
        {"type": "tag", "begin": "<f=a>", "content": _OBJ, "end": "</f>"},
        {"type": "tag", "begin": "<f=b>", "content": _INT, "end": "</f>"}]},
        [("hello", True), ("hi <f=a>{\"x\": 1}</f> bye", True), ("<f=b>7</f><f=a>{\"x\":2}</f>", True),
         ("hi <f=a>{\"x\": \"no\"}</f>", False), ("hi <f=c>", False), ("a<f", True)]),
    "triggered_tags_once": ({"type": "triggered_tags", "triggers": ["<f="], "at_least_one": True,
                             "stop_after_first": True, "excludes": ["BAD"], "tags": [
                                 {"type": "tag", "begin": "<f=b>", "content": _INT, "end": "</f>"}]},
                            [("<f=b>1</f>", True), ("go <f=b>1</f>", False), ("go", False),
                             ("<f=b>1</f><f=b>2</f>", False), ("<f=b>1</f> after", False)]),
    "triggered_tags_first": ({"type": "triggered_tags", "triggers": ["<f="], "at_least_one": True, "excludes": ["BAD"],
                              "tags": [{"type": "tag", "begin": "<f=b>", "content": _INT, "end": "</f>"}]},
                             [("<f=b>1</f> after <f=b>2</f>", True), ("<f=b>1</f>", True), ("go <f=b>1</f>", False),
                              ("<f=b>1</f> BAD", False)]),
    "dispatch": ({"type": "dispatch", "rules": [["<x>", {"type": "const_string", "value": "X!"}]],
                  "excludes": ["BAD"]},
                 [("hi", True), ("hi<x>X! there<x>X!", True), ("hi<x>Y", False), ("BAD", False)]),
    "dispatch_once": ({"type": "dispatch", "rules": [["<x>", {"type": "const_string", "value": "X!"}]],
                       "loop": False},
                      [("hi<x>X!", True), ("hi", True), ("hi<x>X!<x>X!", False)]),
}

# token-level elements (xgrammar's own check reads text, not tokens: the verdicts are ours)
TOKEN_CASES: dict[str, tuple[dict, list[tuple[list[int], bool]]]] = {
    "token": ({"type": "sequence", "elements": [{"type": "token", "token": 256}, _INT, {"type": "token",
                                                                                         "token": "<|end|>"}]},
              [([256, ord("4"), 257], True), ([ord("4"), 257], False)]),
    "exclude_token": ({"type": "exclude_token", "exclude_tokens": [ord("a")]}, [([ord("b")], True),
                                                                                ([ord("a")], False)]),
    "any_tokens": ({"type": "any_tokens", "exclude_tokens": [256], "max_tokens": 3},
                   [([], True), ([ord("a"), ord("b"), ord("c")], True), ([ord("a")] * 4, False), ([256], False)]),
    "token_triggered_tags": ({"type": "token_triggered_tags", "trigger_tokens": [256], "tags": [
        {"type": "tag", "begin": {"type": "token", "token": 256}, "content": _INT, "end": {"type": "token",
                                                                                             "token": 257}}]},
        [([ord("h"), ord("i")], True), ([ord("h"), 256, ord("7"), 257, ord("!")], True),
         ([256, ord("x"), 257], False)]),
    "token_dispatch": ({"type": "token_dispatch", "rules": [[256, {"type": "const_string", "value": "ok"}]]},
                       [([ord("a"), 256, ord("o"), ord("k")], True), ([256, ord("n")], False)]),
}

VOCAB = Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b"", b"", b"", b"<f=", b"</f>", b'{"', b"ab"],
                               eos_ids=(258,), special_tokens={256: "<|call|>", 257: "<|end|>", 258: "</s>"},
                               name="bytes+")


def _utf8_prefix(raw: bytes) -> bool:
    """Whether ``raw`` can begin UTF-8 text (an unfinished character at its end allowed)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _xgrammar_verdicts(fmt: dict, texts: list[str]) -> list[bool] | None:
    try:
        import xgrammar as xgr
        from xgrammar.testing import _is_grammar_accept_string
    except ImportError:
        return None
    g = xgr.Grammar.from_structural_tag({"type": "structural_tag", "format": fmt})
    return [_is_grammar_accept_string(g, t) for t in texts]


def test_every_element_of_xgrammar_is_named() -> None:
    assert len(ELEMENTS) == 20
    covered = {k for fmt, _ in [*CASES.values(), *TOKEN_CASES.values()] for k in _types(fmt)}
    assert covered >= set(ELEMENTS)


def _types(fmt: object) -> set[str]:
    if isinstance(fmt, dict):
        return ({fmt["type"]} if isinstance(fmt.get("type"), str) else set()) | {
            t for v in fmt.values() for t in _types(v)}
    if isinstance(fmt, list):
        return {t for v in fmt for t in _types(v)}
    return set()


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_elements_language_is_xgrammars(name: str) -> None:
    fmt, cases = CASES[name]
    g = read_structural_tag({"type": "structural_tag", "format": fmt})
    got = [g.accepts(t.encode()) for t, _ in cases]
    assert got == [v for _, v in cases], (name, to_lark(fmt))
    theirs = _xgrammar_verdicts(fmt, [t for t, _ in cases])
    if theirs is not None:
        assert got == theirs, (name, to_lark(fmt))


def _walk_equal_naive(fmt: dict, tokens: list[int], valid: bool) -> int:
    """Every strategy's masks along ``tokens`` equal naive's; returns the engines compared."""
    spec = StructuralTagText({"type": "structural_tag", "format": fmt})
    naive = get_engine("naive", VOCAB)
    ref = naive.matcher(naive.compile(spec))
    others = []
    for name in ("llguidance", "xgrammar", "outlines"):
        engine = get_engine(name, VOCAB)
        try:
            others.append((name, engine.matcher(engine.compile(spec))))
        except (UnsupportedGrammar, LimitExceeded):  # outlines: regular languages only, its regex under a limit
            continue
    want, got = bm.allocate(VOCAB.size), bm.allocate(VOCAB.size)
    accepted = True
    for t in [*tokens, None]:
        ref.fill_bitmask(want)
        for name, m in others:
            m.fill_bitmask(got)
            assert np.array_equal(want, got), (name, tokens, t)
        if t is None:
            break
        ok = ref.accept_token(t)
        for name, m in others:
            assert m.accept_token(t) == ok, (name, t)
        if not ok:
            accepted = False
            break
    assert (accepted and ref.is_accepting()) == valid or not valid
    return len(others)


@pytest.mark.parametrize("name", sorted(CASES))
def test_our_strategies_masks_equal_naives(name: str) -> None:
    fmt, cases = CASES[name]
    greedy = TokenExtensions.of(VOCAB).greedy
    for text, valid in cases:
        assert _walk_equal_naive(fmt, greedy(text.encode()), valid) >= 2


@pytest.mark.parametrize("name", sorted(TOKEN_CASES))
def test_token_elements(name: str) -> None:
    fmt, cases = TOKEN_CASES[name]
    for tokens, valid in cases:
        _walk_equal_naive(fmt, tokens, valid)
        naive = get_engine("naive", VOCAB)
        m = naive.matcher(naive.compile(StructuralTagText({"type": "structural_tag", "format": fmt})))
        took = m.accept_tokens(tokens)
        assert (took == len(tokens) and m.is_accepting()) == valid, (name, tokens)


def test_the_format_is_registered_and_refuses_what_it_does_not_read() -> None:
    spec = StructuralTagText({"type": "structural_tag", "format": CASES["tag"][0]})
    assert format_of(spec).name == "structural_tag"
    assert format_for_path("tools.stag.json").name == "structural_tag"
    assert format_for_path("schema.json").name == "json_schema"
    assert json.loads(spec.text)["format"]["type"] == "tag"
    with pytest.raises(UnsupportedGrammar, match="/format/style.*'yaml_xml'"):
        to_lark({"type": "structural_tag", "format": {**_OBJ, "style": "yaml_xml"}})
    with pytest.raises(UnsupportedGrammar, match="cohere_xml takes no excludes"):
        to_lark({**_OBJ, "style": "cohere_xml", "excludes": ["x"]})
    with pytest.raises(UnsupportedGrammar, match="excludes over a JSON string value"):
        to_lark({"type": "json_schema", "excludes": ["x"], "json_schema": {
            "type": "object", "properties": {"s": {"type": "string"}}}})
    deep: dict = _INT
    for _ in range(3000):
        deep = {"type": "optional", "content": deep}
    with pytest.raises(GrammarError, match="nested too deeply"):
        to_lark(deep)
    with pytest.raises(GrammarError, match="max_whitespace_cnt: a count >= 1"):
        to_lark({**_OBJ, "max_whitespace_cnt": 0})
    with pytest.raises(UnsupportedGrammar, match="max_whitespace_cnt: read for the json style only"):
        to_lark({**_OBJ, "style": "qwen_xml", "max_whitespace_cnt": 2})
    with pytest.raises(UnsupportedGrammar, match="any_order"):
        to_lark({**_OBJ, "any_order": True})
    with pytest.raises(UnsupportedGrammar, match="minimax_m3_xml value of this schema"):
        to_lark({"type": "json_schema", "style": "minimax_m3_xml", "json_schema": {
            "type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}})
    with pytest.raises(UnsupportedGrammar, match="qwen_xml value of this schema.*pattern"):
        to_lark({"type": "json_schema", "style": "qwen_xml", "json_schema": {
            "type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}}})
    with pytest.raises(GrammarError, match="/grammar: .*line 1"):
        to_lark({"type": "grammar", "grammar": "root ::= \"a"})
    with pytest.raises(UnsupportedGrammar, match="any_text is read as a tag's content"):
        to_lark({"type": "sequence", "elements": [{"type": "any_text"}, {"type": "const_string", "value": "x"}]})
    with pytest.raises(GrammarError, match="/max_chars: a count >= 0"):
        to_lark({"type": "any_text", "max_chars": -1})
    with pytest.raises(UnsupportedGrammar, match="max_chars: 5000 is over 4,096"):
        to_lark({"type": "any_text", "max_chars": 5000})
    # a count of tokens is llguidance's max_tokens attribute: peer:llguidance honours it, ours refuse it
    counted = read_structural_tag({"type": "tag", "begin": "<t>", "content": {"type": "any_text", "max_tokens": 3},
                                   "end": "</t>"})
    assert [a.get("max_tokens") for a in counted.attributes.values()] == [3]
    with pytest.raises(UnsupportedGrammar, match="does not count a lexeme's tokens"):
        get_engine("llguidance", VOCAB).compile(counted)
    with pytest.raises(UnsupportedGrammar, match="not one of xgrammar's"):
        to_lark({"type": "bogus"})
    with pytest.raises(GrammarError, match="/format/elements/1: an element is an object"):
        to_lark({"type": "structural_tag", "format": {"type": "sequence", "elements": [_INT, 3]}})
    with pytest.raises(GrammarError, match="repeat needs"):
        to_lark({"type": "repeat", "min": 3, "max": 1, "content": _INT})
    with pytest.raises(GrammarError, match="no tag begins with"):
        to_lark({"type": "triggered_tags", "triggers": ["<q"], "tags": [CASES["tag"][0]]})


def test_on_llama3_our_reading_is_inside_xgrammars() -> None:
    """``peer:xgrammar`` given the structural tag itself (``--source native``) and our
    ``llguidance`` given its IR, along a tool-calling transcript on Llama 3: every mask of
    ours is inside xgrammar's, and where they differ it is for the two known reasons
    (the module doc): xgrammar's free text also takes tokens that are no UTF-8 (a lone
    continuation byte), and its JSON strings spell more escapes (``\\/``, ``\\u``) and DEL."""
    from tests._support.shared import SHARED
    from tests.conformance import missing
    from toolkit.core.forced import canonical_tokens
    from toolkit.core.vocab import load_vocab
    from toolkit.grammar.inputs import engine_input

    path = SHARED / "tokenizers/llama-3/tokenizer.model"
    if not path.is_file() or missing("peer:xgrammar"):
        pytest.skip("needs the shared Llama-3 tokenizer and xgrammar (the [peers] extra)")
    vocab = load_vocab(f"llama3:{path}")
    call = {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}}, "required": ["name", "arguments"], "additionalProperties": False}
    spec = StructuralTagText({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"],
                              "tags": [{"type": "tag", "begin": "<tool_call>", "content": {
                                  "type": "json_schema", "json_schema": call}, "end": "</tool_call>"}]}})
    theirs, ours = get_engine("peer:xgrammar", vocab), get_engine("llguidance", vocab)
    a = theirs.matcher(theirs.compile(engine_input(theirs, spec, "native")))
    b = ours.matcher(ours.compile(spec))
    text = 'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call> Done.'
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    for t in canonical_tokens(vocab, text.encode()):
        a.fill_bitmask(ra)
        b.fill_bitmask(rb)
        mine, more = set(bm.allowed_ids(rb[0], vocab.size).tolist()), set(bm.allowed_ids(ra[0], vocab.size).tolist())
        assert mine <= more, [vocab.token_bytes[u] for u in sorted(mine - more)[:5]]
        for u in more - mine:
            raw = vocab.token_bytes[u]
            assert not _utf8_prefix(raw) or b"\\" in raw or b"\x7f" in raw, raw
        assert a.accept_token(t) and b.accept_token(t)


READ_BUILTINS = ("cohere", "deepseek_r1", "deepseek_v3_1", "deepseek_v3_2", "deepseek_v4", "deepseek_v4_1", "exaone",
                 "glm_4_7", "harmony", "kimi", "kimi_k3", "llama", "mimo", "minimax", "minimax_m3", "qwen_3", "qwen_3_5",
                 "qwen_3_coder")


def test_xgrammars_builtin_model_formats_read_or_are_refused_by_their_style() -> None:
    """xgrammar's per-model structural tags (``get_model_structural_tag``) for one tool:
    all eighteen read (their arguments JSON or an XML style of :data:`XML_STYLES` and
    :data:`NESTED_XML_STYLES`), and each reading judges calls of its own format as
    xgrammar does."""
    try:
        import xgrammar as xgr
        from xgrammar.builtin_structural_tag import (
            _structural_tag_registry,
            get_model_structural_tag,
        )
        from xgrammar.testing import _is_grammar_accept_string
    except ImportError:
        pytest.skip("needs xgrammar (the [peers] extra)")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}]
    read = set()
    for model in sorted(_structural_tag_registry):
        tag = json.loads(get_model_structural_tag(model, tools=tools).model_dump_json())
        try:
            g = read_structural_tag(tag)
        except UnsupportedGrammar as e:
            assert "style" in str(e) and "_xml" in str(e), (model, str(e))
            continue
        read.add(model)
        xg = xgr.Grammar.from_structural_tag(tag)
        for text in ("", "plain words", '{"a": 1}', "<tool_call>", *CALLS.get(model, ())):
            assert g.accepts(text.encode()) == _is_grammar_accept_string(xg, text), (model, text)
    assert read == set(READ_BUILTINS)
    assert all(xgr.Grammar.from_structural_tag(json.loads(get_model_structural_tag(m, tools=tools).model_dump_json()))
               and read_structural_tag(json.loads(get_model_structural_tag(m, tools=tools).model_dump_json()))
               .accepts(CALLS[m][0].encode()) for m in CALLS)


# a call of each format, and one broken (for "add" with {"a": integer})
CALLS = {
    "llama": ('{"name": "add", "parameters": {"a": 1}}', 'text then {"name": "add", "parameters": {"a": 1}}',
              '{"name": "add", "parameters": {"a": "x"}}'),
    "exaone": ('</think>\n\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>',
               '</think>\n\n<tool_call>{"name": "sub", "arguments": {"a": 1}}</tool_call>'),
    "qwen_3_coder": ('</think>\n\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>',
                     '</think>\n\n<tool_call>\n<function=add>\n<parameter=a>\nx\n</parameter>\n</function>\n</tool_call>'),
    "kimi_k3": ('<|close|>think<|sep|><|open|>response<|sep|>hi<|close|>response<|sep|><|open|>tools<|sep|>'
                '<|open|>call tool="add" index="0"<|sep|><|open|>argument key="a" type="number"<|sep|>1'
                '<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>',
                '<|close|>think<|sep|><|open|>response<|sep|>hi<|close|>response<|sep|><|close|>message<|sep|>',
                '<|close|>think<|sep|><|open|>response<|sep|>hi<|close|>response<|sep|><|open|>tools<|sep|>'
                '<|open|>call tool="add" index="0"<|sep|><|open|>argument key="a" type="number"<|sep|>x'
                '<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>'),
    "cohere": ('<|END_THINKING|>hi <cofl:tool_calls><cofl:tool_call id="0" name="add"><cofl:value name="a" '
               'type="json">1</cofl:value></cofl:tool_call></cofl:tool_calls>',
               '<|END_THINKING|>hi <cofl:tool_calls><cofl:tool_call id="0" name="add"><cofl:value name="a" '
               'type="raw">1</cofl:value></cofl:tool_call></cofl:tool_calls>'),
    "minimax_m3": ('ok</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="add">]<]minimax[>[<a>1'
                   ']<]minimax[>[</a>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>',
                   'ok</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="add">]<]minimax[>[<a>x'
                   ']<]minimax[>[</a>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>'),
    "harmony": ('<|channel|>commentary to=functions.add<|constrain|>json<|message|>{"a": 1}<|call|>',
                '<|channel|>commentary to=functions.add<|constrain|>json<|message|>{"b": 1}<|call|>'),
}


@pytest.mark.parametrize("s", ["new\nline", "tab\t", "\x01ctl", "/s/", 'a"b', "back\\slash", "ünï€", "<|x|>",
                               "{}[]()*+?.^$|", " sp ace"])
def test_strings_with_regex_and_lark_characters_are_written_exactly(s: str) -> None:
    """A trigger, a tag's begin and end, an excluded string and a constant holding
    characters that regexes, Lark strings or a Lark line treat specially: the reading
    judges as xgrammar does."""
    fmts = [{"type": "triggered_tags", "triggers": [s], "tags": [
        {"type": "tag", "begin": s + "1", "content": {"type": "const_string", "value": s}, "end": s}]},
        {"type": "any_text", "excludes": [s]},
        {"type": "tag", "begin": s, "content": {"type": "any_text"}, "end": s + "E"}]
    texts = [f"hi {s}1{s}{s}", f"hi {s}2", "plain", s, f"{s}abc{s}E", f"{s}{s}E"]
    for fmt in fmts:
        g = read_structural_tag(fmt)
        got = [g.accepts(t.encode()) for t in texts]
        theirs = _xgrammar_verdicts(fmt, texts)
        if theirs is None:
            pytest.skip("needs xgrammar (the [peers] extra) to judge")
        assert got == theirs, (fmt["type"], to_lark(fmt))


@pytest.mark.parametrize("schema, texts", [
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, ['{"a": 1}', '{"a": 1, "b": 2}']),
    ({"type": "object"}, ["{}", '{"a": 1}']),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}},
     ['{"a": {"b": 1}}', '{"a": {"b": 1, "c": 2}}']),
    ({"anyOf": [{"type": "object", "properties": {"b": {"type": "integer"}}}]}, ['{"b": 1}', '{"b": 1, "c": 2}']),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, ["[1]", "[1, 2]"]),
    ({"$defs": {"p": {"properties": {"b": {"type": "integer"}}}}, "$ref": "#/$defs/p"}, ['{"b": 1}', '{"c": 1}']),
])
def test_a_json_schema_is_closed_as_xgrammar_closes_it(schema: dict, texts: list[str]) -> None:
    """xgrammar reads a structural tag's schema in its strict mode: an object with
    ``properties`` and no ``additionalProperties`` takes no other member (a tool's
    arguments), a ``prefixItems`` no other item; so does the reading here."""
    fmt = {"type": "json_schema", "json_schema": schema}
    g = read_structural_tag(fmt)
    got = [g.accepts(t.encode()) for t in texts]
    theirs = _xgrammar_verdicts(fmt, texts)
    if theirs is None:
        pytest.skip("needs xgrammar (the [peers] extra) to judge")
    assert got == theirs


_M3 = "]<]minimax[>["


def _m3(key: str, value: str) -> str:
    return f"{_M3}<{key}>{value}{_M3}</{key}>"


def _co(key: str | None, kind: str, value: str) -> str:
    name = f' name="{key}"' if key is not None else ""
    return f'<cofl:value{name} type="{kind}">{value}</cofl:value>'


_NESTED_SCHEMA = {"type": "object", "properties": {
    "a": {"type": "integer"}, "s": {"type": "string"}, "e": {"type": "string", "enum": ["x", "y z"]},
    "o": {"type": "object", "properties": {"x": {"type": "integer"}, "t": {"type": "string"}}, "required": ["x"]},
    "l": {"type": "array", "items": {"type": "integer"}}, "b": {"type": "boolean"}}, "required": ["a", "s"]}
_AS = {"minimax_m3_xml": _m3("a", "1") + _m3("s", "x"), "cohere_xml": _co("a", "json", "1") + _co("s", "raw", "x")}
NESTED_TEXTS = {
    "minimax_m3_xml": [
        _m3("a", "1") + _m3("s", "hi there"), "\n" + _m3("a", "1") + "\n" + _m3("s", "x") + "\n", _m3("a", " 1") + _m3("s", "x"),
        _AS["minimax_m3_xml"] + _m3("e", "y z"), _AS["minimax_m3_xml"] + _m3("e", " y z"),
        _AS["minimax_m3_xml"] + _m3("o", _m3("x", "2")),
        _AS["minimax_m3_xml"] + _m3("o", "\n" + _m3("x", "2") + " " + _m3("t", "q r") + "\n"),
        _AS["minimax_m3_xml"] + _m3("o", _m3("t", "q")), _AS["minimax_m3_xml"] + _m3("l", ""),
        _AS["minimax_m3_xml"] + _m3("l", _m3("item", "1") + "\n" + _m3("item", "2")),
        _AS["minimax_m3_xml"] + _m3("l", " " + _m3("item", "1") + " "), _AS["minimax_m3_xml"] + _m3("b", "true"),
        _m3("s", "x") + _m3("a", "1"), _m3("a", "1") + _m3("s", 'a"b<c>'), _m3("a", "1") + _m3("s", "x" + _M3 + "y"),
        _AS["minimax_m3_xml"] + _m3("l", "[1]")],
    "cohere_xml": [
        _co("a", "json", "1") + _co("s", "raw", "hi there"), "\n" + _co("a", "json", " 1 ") + "\n" + _co("s", "raw", "x") + "\n",
        _co("a", "json", "1") + _co("s", "raw", " x "), _AS["cohere_xml"] + _co("e", "raw", " y z "),
        _AS["cohere_xml"] + _co("o", "dict", _co("x", "json", "2")),
        _AS["cohere_xml"] + _co("o", "dict", "\n" + _co("x", "json", "2") + _co("t", "raw", "q") + "\n"),
        _AS["cohere_xml"] + _co("o", "dict", _co("t", "raw", "q")), _AS["cohere_xml"] + _co("l", "list", ""),
        _AS["cohere_xml"] + _co("l", "list", _co(None, "json", "1") + _co(None, "json", " 2 ")),
        _AS["cohere_xml"] + _co("l", "list", " " + _co(None, "json", "1") + " " + _co(None, "json", "2")),
        _AS["cohere_xml"] + _co("l", "list", _co(None, "raw", "1")), _co("a", "raw", "1") + _co("s", "raw", "x"),
        _co("s", "raw", "x") + _co("a", "json", "1"), _AS["cohere_xml"] + _co("b", "json", "true"),
        _co("a", "json", "1") + _co("s", "json", '"x"')],
}


@pytest.mark.parametrize("style", NESTED_XML_STYLES)
def test_each_nested_xml_style_reads_as_xgrammar_writes_it(style: str) -> None:
    """Objects and lists nested as elements (cohere's with a type in each tag); the verdicts
    equal xgrammar 0.2.8's on each text, and naive's masks are the grammar's on a small vocabulary."""
    fmt = {"type": "json_schema", "json_schema": _NESTED_SCHEMA, "style": style}
    g = read_structural_tag(fmt)
    texts = NESTED_TEXTS[style]
    got = [g.accepts(t.encode()) for t in texts]
    assert got[0] and got[5] and not got[12]
    greedy = TokenExtensions.of(VOCAB).greedy
    for text, valid in list(zip(texts, got, strict=True))[::3]:
        assert _walk_equal_naive(fmt, greedy(text.encode()), valid) >= 2
    theirs = _xgrammar_verdicts(fmt, texts)
    if theirs is None:
        pytest.skip("needs xgrammar (the [peers] extra) to judge")
    assert got == theirs, [t for t, x, y in zip(texts, got, theirs, strict=True) if x != y]


@pytest.mark.parametrize("model", READ_BUILTINS)
def test_each_builtin_model_format_masks_like_naive(model: str) -> None:
    """xgrammar's per-model structural tag for one tool: our strategies' masks equal
    naive's on a small vocabulary along a call of the format (where :data:`CALLS` has one)
    and along plain words."""
    try:
        from xgrammar.builtin_structural_tag import get_model_structural_tag
    except ImportError:
        pytest.skip("needs xgrammar (the [peers] extra) for its built-in formats")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}]
    fmt = json.loads(get_model_structural_tag(model, tools=tools).model_dump_json())["format"]
    greedy = TokenExtensions.of(VOCAB).greedy
    g = read_structural_tag({"type": "structural_tag", "format": fmt})
    for text in (*CALLS.get(model, ())[:2], "plain words"):
        assert _walk_equal_naive(fmt, greedy(text.encode()), g.accepts(text.encode())) >= 2


def _xml(style: str, key: str, value: str, string: bool) -> str:
    """One argument written in ``style``."""
    if style == "qwen_xml":
        return f"<parameter={key}>{value}</parameter>"
    if style == "minimax_xml":
        return f'<parameter name="{key}">{value}</parameter>'
    if style == "glm_xml":
        return f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>"
    if style == "kimi_k3_xml":  # the value's type in the tag: the test's "o" is an object, "a" an integer
        kind = "string" if string else {"o": "object"}.get(key, "number")
        return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{value}<|close|>argument<|sep|>'
    sp = " " if style == "deepseek_v4_1_xml" else ""
    return f'<\uff5cDSML\uff5c{sp}parameter name="{key}" string="{str(string).lower()}">{value}</\uff5cDSML\uff5c{sp}parameter>'


@pytest.mark.parametrize("style", sorted(XML_STYLES))
def test_each_xml_argument_style_reads_as_xgrammar_writes_it(style: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "s": {"type": "string"},
                                               "e": {"type": "string", "enum": ["x", "y z"]},
                                               "o": {"type": "object", "properties": {"x": {"type": "integer"}}}},
              "required": ["a", "s"]}
    a, s = _xml(style, "a", "1", False), _xml(style, "s", "x", True)
    texts = [a + _xml(style, "s", "hi there", True), "\n" + _xml(style, "a", "\n1\n", False) + "\n" + s + "\n",
             a + s + _xml(style, "o", '{"x": 2}', False), a + s + _xml(style, "e", " y z ", True),
             a + s + _xml(style, "e", "y z", True), s + a, a, a + s + _xml(style, "e", '"x"', True),
             a + s + _xml(style, "o", '{"x": 2, "q": 1}', False), _xml(style, "a", "1", True) + s,
             a + _xml(style, "s", "x", False), a + _xml(style, "s", "a</x>b", True)]
    fmt = {"type": "json_schema", "json_schema": schema, "style": style}
    g = read_structural_tag(fmt)
    got = [g.accepts(t.encode()) for t in texts]
    assert got[0] and got[2] and not got[5] and not got[6]
    theirs = _xgrammar_verdicts(fmt, texts)
    if theirs is None:
        pytest.skip("needs xgrammar (the [peers] extra) to judge")
    assert got == theirs, [t for t, x, y in zip(texts, got, theirs, strict=True) if x != y]


@pytest.fixture(scope="module")
def llama3():
    from tests._support.shared import require_shared
    from toolkit.core.vocab import load_vocab

    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.mark.parametrize("model", READ_BUILTINS)
def test_llama3_llguidance_reading_our_lark_equals_our_reading(llama3, model: str) -> None:
    """Each built-in format with one tool: ``peer:llguidance`` given the Lark text
    :func:`to_lark` writes (``--source native``) and our ``llguidance`` given its IR give
    bit-identical masks on Llama 3 along a call of the format (or plain words), and the
    same verdicts."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    try:
        from xgrammar.builtin_structural_tag import get_model_structural_tag
    except ImportError:
        pytest.skip("needs xgrammar (the [peers] extra) for its built-in formats")
    from toolkit.core.forced import canonical_tokens
    from toolkit.grammar.lark_dialect import LarkText

    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}]
    tag = json.loads(get_model_structural_tag(model, tools=tools).model_dump_json())
    peer, ours = get_engine("peer:llguidance", llama3), get_engine("llguidance", llama3)
    a, b = peer.compile(LarkText(to_lark(tag))), ours.compile(StructuralTagText(tag))
    ra, rb = bm.allocate(llama3.size), bm.allocate(llama3.size)
    for text in (*CALLS.get(model, ())[:1], "plain words"):
        ma, mb = peer.matcher(a), ours.matcher(b)
        for t in [*canonical_tokens(llama3, text.encode()), llama3.eos_ids[0]]:
            ma.fill_bitmask(ra)
            mb.fill_bitmask(rb)
            assert np.array_equal(ra, rb), (model, text, t)
            ok = ma.accept_token(t)
            assert ok == mb.accept_token(t), (model, text, t)
            if not ok:
                break
