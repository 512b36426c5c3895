"""The C tokenizer of jump-forward's forced text on Hugging Face BPE models with ranked
merges (:class:`toolkit.core.vocab.BpeMerges`): against the ``tokenizers`` crate itself on
Mistral 7B v0.3's sentencepiece BPE (byte fallback, ``Metaspace``) and on BPE models
trained here (``Metaspace`` that splits at spaces, a ``Replace`` normalizer, ``Split``
on Llama 3's, Tekken's and Qwen2's patterns then ``ByteLevel``, ``NFC``, GPT-2's
``ByteLevel``), their ids shuffled so that a merge's rank is not its token's id."""

from __future__ import annotations

import functools
import json
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.codepoints import mismatched_chunks
from tests._support.shared import require_shared
from toolkit.core.bpe import BpeTable, code_point_classes
from toolkit.core.vocab import (
    GPT2_PATTERN,
    LLAMA3_PATTERN,
    QWEN2_PATTERN,
    TEKKEN_PATTERN,
    Vocabulary,
    load_vocab,
)

ROOT = Path(__file__).resolve().parents[1]
#: what the pieces and merges tell apart: spaces (one, several, leading), newlines, byte
#: fallback (code points no model token has: CJK, an emoji), letters by case, digits, and
#: sentencepiece's "▁" typed in the text (left to the Python encoder)
ALPHABET = list("aAbZzé É09 \n\r\t'/.,{}\":日本👍🏽ǅ\u00a0\u2581") + ["name", "type", "  ", " \"", "\": ", "\"}", "'s"]
TEXTS = ['{"name": "Ada", "tags": ["x", 1]}', '", "', '":"', "}\n}", "  \n\n  x", "Hello world's I'M",
         "naïve café ÄBC aBC AbcDEF", "日本語のテキスト", "x / y //\n", "a\u00a0b\u2003c", "1234567",
         "\r\n\r\n  \n x", "ǅungla Ǆ", " ", "  ", "   a", "'ll 're 'VE 'ſ", "\u0301a\u0301b", "👍🏽 ok",
         "\x00\x01 ok", "\U0010fffd x", "\u0378"]


@functools.cache
def _mistral() -> Vocabulary:
    return load_vocab("hf:" + str(require_shared("tokenizers/mistral-7b-v0.3/tokenizer.json")))


def _corpus() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((ROOT / "datasets/schemas").glob("*.json"))]


@functools.cache
def _trained_json(kind: str, ignore_merges: bool = False) -> str:
    """A BPE of 700 tokens trained on the embedded schemas' files, of ``kind`` ("split":
    Metaspace that splits at spaces, with byte fallback; "replace": sentencepiece's
    normalizer form, ``Prepend`` and ``Replace``; "bytelevel": ``Split`` on Llama 3's
    pattern then ``ByteLevel``; "tekken": the same on Tekken's pattern; "qwen2": ``NFC``, then
    the same on Qwen2's pattern; "gpt2": ``ByteLevel`` with its own regex), every model id
    shuffled: its ``tokenizer.json``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    level = kind in ("bytelevel", "tekken", "qwen2", "gpt2")
    fallback = [] if level else [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=not level, ignore_merges=ignore_merges))
    if kind == "split":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    elif kind == "replace":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    elif kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
    else:
        # (qwen2 is trained on Llama 3's pattern, so it has merges of digits that Qwen2's cut never applies)
        pattern = {"tekken": TEKKEN_PATTERN}.get(kind, LLAMA3_PATTERN)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if level else []
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "</s>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    data = json.loads(tok.to_str())
    if kind == "qwen2":
        data["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": QWEN2_PATTERN}
    pieces = data["model"]["vocab"]
    pieces.update({p: len(pieces) + i for i, p in enumerate(fallback)})  # model tokens, as sentencepiece's
    ids = list(range(len(data["model"]["vocab"])))
    random.Random(7).shuffle(ids)
    data["model"]["vocab"] = {p: ids[i] for p, i in data["model"]["vocab"].items()}
    for t in data["added_tokens"]:
        t["id"] = ids[t["id"]]
    return json.dumps(data)


def _load(data: str) -> Vocabulary:
    """A ``tokenizer.json`` of that content, loaded as ``hf:``."""
    path = Path(tempfile.mkdtemp(prefix="masklab-bpe-")) / "tokenizer.json"
    path.write_text(data, encoding="utf-8")
    return load_vocab(f"hf:{path}")


@functools.cache
def _trained(kind: str, ignore_merges: bool = False) -> Vocabulary:
    return _load(_trained_json(kind, ignore_merges))


def _vocab(name: str) -> Vocabulary:
    kind, _, ignore = name.partition("+")
    return _mistral() if name == "mistral" else _trained(kind, bool(ignore))


VOCABS = ["mistral", "split", "replace", "bytelevel", "bytelevel+1", "tekken", "qwen2", "gpt2"]


def _probe(vocab: Vocabulary, text: str) -> bool:
    """The C tokenizer gives the model's ids, or refuses (False) where it may not."""
    got = BpeTable.of(vocab).tokens(text.encode("utf-8"))
    if got is None:
        spec = vocab.bpe_merges
        assert ("\u2581" in text or spec.unit == "byte" and "\u0378" in text
                or spec.nfc and max(map(ord, text)) >= 0x300), (vocab.name, text)
        return False
    assert got == vocab.encode(text), (vocab.name, text)
    return True


@pytest.mark.parametrize("name", VOCABS)
def test_texts_a_grammar_forces_tokenize_as_the_model_does(name: str) -> None:
    vocab = _vocab(name)
    spec = vocab.bpe_merges
    assert spec is not None and len(spec.merges) > 100
    assert spec.split == {"mistral": "none", "split": "space", "replace": "none"}.get(name, "pattern")
    assert BpeTable.of(vocab).merges
    answered = sum(_probe(vocab, t) for t in TEXTS)
    assert answered >= (len(TEXTS) - 1 if not vocab.bpe_merges.nfc else 12)
    for text in _corpus()[:8]:  # whole files: long pieces, every merge rank in play
        assert _probe(vocab, text)


@pytest.mark.parametrize("name", VOCABS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_texts_tokenize_as_the_model_does(name: str, data: st.DataObject) -> None:
    vocab = _vocab(name)
    _probe(vocab, "".join(data.draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=14))))
    text = data.draw(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12))
    got = BpeTable.of(vocab).tokens(text.encode("utf-8"))
    if got is None:  # only a sentencepiece "▁", NFC's code points, or (a scanner's) one Python does not assign
        assert ("\u2581" in text or vocab.bpe_merges.nfc and max(map(ord, text)) >= 0x300
                or any(code_point_classes()[ord(c)] & 0x0F == 8 for c in text))
    else:
        assert got == vocab.encode(text), text


@pytest.mark.parametrize("name", ["gpt2", "qwen2"])
def test_every_assigned_code_point_is_cut_as_the_model_cuts_it(name: str) -> None:
    """GPT-2's and Qwen2's patterns (the scanners written for them here) around each
    code point Python's Unicode tables assign, beside letters, a space, digits, an
    apostrophe and a newline (Qwen2's NFC: the code points below U+0300, and none above
    answered)."""
    vocab = _vocab(name)
    bpe = BpeTable.of(vocab)
    assert vocab.bpe_merges.pattern == (GPT2_PATTERN if name == "gpt2" else QWEN2_PATTERN)
    classes = code_point_classes()
    top = 0x110000 if name == "gpt2" else 0x300
    cps = [c for c in range(top) if classes[c] & 0x0F != 8 and not 0xD800 <= c < 0xE000]
    bad = mismatched_chunks(bpe, vocab, cps, lambda c: f"a{c}A{c[0]} {c[1:]}12345'{c[-1]}\n {c[0]}  {c[0]}'s")
    assert not bad, [hex(ord(c)) for c in bad[0]]
    if name == "qwen2":
        assert bpe.tokens("e\u0301".encode()) is None  # NFC composes it: left to the model


def test_a_piece_is_merged_by_rank_not_by_id() -> None:
    """Ranks are the merges' order, the leftmost of equal ranks first, a merge of two
    given tokens only (not any split of the same bytes), and with ``ignore_merges`` a
    piece that is a token is taken whole."""
    spec = {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False},
            "model": {"type": "BPE", "byte_fallback": False, "ignore_merges": False, "dropout": None,
                      "unk_token": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "vocab": {"abc": 0, "ab": 1, "bc": 2, "a": 3, "b": 4, "c": 5, "d": 6, "cd": 7, "aa": 8},
                      "merges": ["b c", "a a", "a bc", "c d", "a b"]}}

    def vocab(ignore: bool) -> Vocabulary:
        spec["model"]["ignore_merges"] = ignore
        return _load(json.dumps(spec))

    plain = BpeTable.of(vocab(False))
    assert plain.tokens(b"abcd") == [0, 6]  # b+c (rank 0), then a+bc; c+d never forms
    assert plain.tokens(b"aaa") == [8, 3]
    assert plain.tokens(b"ab") == [1]
    assert plain.tokens(b"abab") == [1, 1]
    spec["model"]["vocab"]["bcd"] = 9  # a token no merge makes: only ignore_merges reads it whole
    assert BpeTable.of(vocab(False)).tokens(b"bcd") == [2, 6]
    assert BpeTable.of(vocab(True)).tokens(b"bcd") == [9]


def test_tokenizers_it_cannot_run_have_no_table() -> None:
    """A normalizer other than NFC, a pre-tokenizer it has no form for, a pattern without
    a scanner, added tokens that are not special, dropout: no table (the Python encoder is
    the rule there)."""
    trained = json.loads(_trained_json("split"))
    level = json.loads(_trained_json("bytelevel"))

    def load(data: dict, change) -> Vocabulary:
        data = json.loads(json.dumps(data))
        change(data)
        return _load(json.dumps(data))

    cases = [
        (trained, lambda d: d.update(normalizer={"type": "NFKC"})),
        (trained, lambda d: d["model"].update(dropout=0.1)),
        (trained, lambda d: d["added_tokens"].append({"id": 700, "content": "[INST]", "special": False,
                                                      "single_word": False, "lstrip": False, "rstrip": False,
                                                      "normalized": False})),
        (level, lambda d: d.update(pre_tokenizer={"type": "Whitespace"})),
        (level, lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed")),
    ]
    for data, change in cases:
        v = load(data, change)
        assert v.bpe_merges is None and BpeTable.of(v) is None
    other = load(level, lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern={"Regex": r"\w+"}))
    assert other.bpe_merges is not None and BpeTable.of(other) is None  # no scanner for \w+
    assert BpeTable.of(load(trained, lambda d: None)) is not None


def test_masklab_vocab_says_where_forced_text_is_tokenized(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    """``masklab vocab`` names the C tokenizer's form, or Python where there is none."""
    from toolkit.cli import main

    nfkc = json.loads(_trained_json("split"))
    nfkc["normalizer"] = {"type": "NFKC"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(nfkc), encoding="utf-8")
    want = {"tekken": "C (tiktoken BPE ranks, Tekken's pattern)",
            f"hf:{path}": "Python (its tokenizer; jump-forward's lookahead runs as overlap)",
            "hf:" + str(require_shared("tokenizers/mistral-7b-v0.3/tokenizer.json")):
                "C (tokenizer.json BPE merges, chars, one piece, byte fallback)"}
    for spec, where in want.items():
        assert main(["vocab", spec]) == 0
        assert f"forced text   tokenized in {where}\n" in capsys.readouterr().out
