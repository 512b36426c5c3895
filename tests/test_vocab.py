"""toolkit.core.vocab: exact token bytes, special/EOS/padding ids, canonical encode, loaders.

Real tokenizers are checked id by id against an independent reader of the same file
(tiktoken for Llama 3, the raw JSON and mistral-common for tekken, the ``tokenizers``
library for Hugging Face files).  Hand-made vocabularies cover the rest.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from tests._support.shared import require_shared
from toolkit.core.errors import VocabError
from toolkit.core.vocab import Vocabulary, load_vocab

LLAMA3 = "tokenizers/llama-3/tokenizer.model"
MISTRAL_HF = "tokenizers/mistral-7b-v0.3/tokenizer.json"

ROUND_TRIP_TEXTS = [
    "",
    "hello",
    " leading space",
    "   three leading, two trailing  ",
    '{"name": "Zoë", "tags": ["a", "b"], "n": -1.5e10, "ok": true, "none": null}',
    "line one\nline two\r\n\n\tindented\n",
    "café naïve é",
    "日本語のテキスト",
    "emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\x00\x01\x7f control bytes",
    "    def f(x):\n        return x  # 1024" + " " * 40,
    "12345678901234567890",
]


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab(f"llama3:{require_shared(LLAMA3)}")


@pytest.fixture(scope="module")
def tekken() -> Vocabulary:
    return load_vocab("tekken")


@pytest.fixture(scope="module")
def mistral_hf() -> Vocabulary:
    return load_vocab(f"hf:{require_shared(MISTRAL_HF)}")


def _llama3_special_names() -> list[str]:
    named = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|finetune_right_pad_id|>",
        "<|step_id|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
    ]
    return named + [f"<|reserved_special_token_{k}|>" for k in range(2, 247)]


# -- Llama 3 --------------------------------------------------------------------------


def test_llama3_json_is_twelve_tokens(llama3: Vocabulary) -> None:
    text = '{"question":"THE ULTIMATE","answer":42}'
    ids = llama3.encode(text)
    assert len(ids) == 12
    assert llama3.decode(ids) == text.encode()


def test_llama3_layout(llama3: Vocabulary) -> None:
    assert (llama3.size, llama3.n_defined, len(llama3)) == (128_256, 128_256, 128_256)
    assert llama3.name == "llama3"
    assert llama3.special_tokens[128009] == "<|eot_id|>"
    assert llama3.eos_ids == (128009,)
    assert llama3.special_tokens[128000] == "<|begin_of_text|>"
    assert llama3.is_special(128000) and llama3.token_bytes[128000] == b""
    assert llama3.special_tokens[128011] == "<|reserved_special_token_2|>"
    assert llama3.special_tokens[128255] == "<|reserved_special_token_246|>"
    assert sorted(llama3.special_tokens) == list(range(128_000, 128_256))
    assert not llama3.is_special(127_999)


def test_llama3_every_id_matches_tiktoken(
    llama3: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the file, write no cache copy
    ranks = load_tiktoken_bpe(str(require_shared(LLAMA3)))
    assert len(ranks) == 128_000
    names = _llama3_special_names()
    assert len(names) == 256
    enc = tiktoken.Encoding(
        name="llama3-test",
        pat_str=r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        mergeable_ranks=ranks,
        special_tokens={name: 128_000 + k for k, name in enumerate(names)},
    )
    bad = [i for i in range(128_256) if llama3.decode([i]) != enc.decode_single_token_bytes(i)]
    assert bad == []
    assert llama3.text_token_ids().tolist() == list(range(128_000))
    text = ROUND_TRIP_TEXTS[4] + ROUND_TRIP_TEXTS[5]
    assert llama3.encode(text) == enc.encode_ordinary(text)


# -- tekken ---------------------------------------------------------------------------


def test_tekken_every_id_matches_mistral_common(tekken: Vocabulary) -> None:
    import mistral_common
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    tk = Tekkenizer.from_file(path)
    n_special = tk.num_special_tokens
    assert (tekken.size, tekken.n_defined, n_special) == (131_072, 131_072, 1000)
    assert tekken.eos_ids == (tk.eos_id,) == (2,)
    assert tekken.special_tokens[2] == "</s>"
    assert sorted(tekken.special_tokens) == list(range(n_special))
    assert all(tekken.token_bytes[i] == b"" for i in range(n_special))
    assert all(
        tekken.decode([i]) == tk.id_to_byte_piece(i, SpecialTokenPolicy.KEEP)
        for i in range(n_special)
    )
    bad = [i for i in range(n_special, tekken.size) if tekken.decode([i]) != tk.id_to_byte_piece(i)]
    assert bad == []
    # and against the raw JSON, read without mistral-common
    raw = json.loads(path.read_text(encoding="utf-8"))["vocab"]
    assert all(
        tekken.token_bytes[n_special + k] == base64.b64decode(raw[k]["token_bytes"])
        for k in range(tekken.size - n_special)
    )
    text = ROUND_TRIP_TEXTS[4]
    assert tekken.encode(text) == tk.encode(text, bos=False, eos=False)


# -- Hugging Face ---------------------------------------------------------------------


def test_mistral_hf_pieces(mistral_hf: Vocabulary) -> None:
    pieces = json.loads(require_shared(MISTRAL_HF).read_text(encoding="utf-8"))["model"]["vocab"]
    assert mistral_hf.name == "hf:mistral-7b-v0.3"
    assert (mistral_hf.size, mistral_hf.n_defined) == (32_768, 32_768)
    assert mistral_hf.token_bytes[pieces["<0x0A>"]] == b"\n"
    assert mistral_hf.token_bytes[pieces["▁the"]] == b" the"
    assert mistral_hf.token_bytes[pieces["▁▁▁▁"]] == b"    "
    assert all(mistral_hf.token_bytes[pieces[f"<0x{b:02X}>"]] == bytes([b]) for b in range(256))
    assert mistral_hf.eos_ids == (pieces["</s>"],) == (2,)
    assert mistral_hf.decode([2]) == b"</s>" and mistral_hf.token_bytes[2] == b""
    assert len(mistral_hf.special_tokens) == 771
    assert mistral_hf.special_tokens[3] == "[INST]"


def test_mistral_hf_agrees_with_tokenizers(mistral_hf: Vocabulary) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    orig = tokenizers.Tokenizer.from_file(str(require_shared(MISTRAL_HF)))
    # the file's decoder strips one leading space; a lone byte-fallback piece is not UTF-8
    bad = []
    for i in mistral_hf.text_token_ids().tolist():
        tok = mistral_hf.token_bytes[i]
        try:
            text = tok.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if orig.decode([i]) != text.removeprefix(" "):
            bad.append(i)
    assert bad == []
    # canonical encoding of " " + t is the file's own encoding of t (which prepends "▁")
    for text in ["hello", '{"a": [1, 2]}', "é日本🙂 x", "a\n b"]:
        assert mistral_hf.encode(" " + text) == orig.encode(text, add_special_tokens=False).ids


def _byte_level_tokenizer(folder: Path, *, add_prefix_space: bool) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["hello world", "héllo wörld\n", "the cat and the hat"] * 20, trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_byte_level_hf(tmp_path: Path, add_prefix_space: bool) -> None:
    path = _byte_level_tokenizer(tmp_path, add_prefix_space=add_prefix_space)
    vocab = load_vocab(f"hf:{path}")
    pieces = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    assert vocab.token_bytes[pieces["Ġ"]] == b" "
    assert vocab.token_bytes[pieces["Ċ"]] == b"\n"  # byte 0x0A
    assert vocab.token_bytes[pieces["Ã"]] == b"\xc3"  # first byte of "é"
    assert vocab.token_bytes[pieces["Ń"]] == b"\xad"  # soft hyphen, remapped above U+00FF
    assert vocab.token_bytes[pieces["Ġthe"]] == b" the"
    assert vocab.eos_ids == (pieces["<|endoftext|>"],)  # fallback: no tokenizer_config.json
    assert vocab.is_special(vocab.eos_ids[0])
    assert len(vocab.text_token_ids()) == vocab.size - 1
    for text in ["hello", "héllo wörld\n", " the cat", "<|endoftext|>日本"]:
        ids = vocab.encode(text)
        assert vocab.decode(ids) == text.encode()
        assert vocab.eos_ids[0] not in ids


def test_hf_eos_from_tokenizer_config(tmp_path: Path) -> None:
    path = _byte_level_tokenizer(tmp_path, add_prefix_space=False)
    config = tmp_path / "tokenizer_config.json"
    hello = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]["hello"]
    config.write_text(json.dumps({"eos_token": {"content": "hello", "special": True}}))
    vocab = load_vocab(f"hf:{tmp_path}")
    assert vocab.eos_ids == (hello,)
    assert vocab.is_special(hello) and vocab.token_bytes[hello] == b""
    assert vocab.decode([hello]) == b"hello"

    other = tmp_path / "other"
    other.mkdir()
    _byte_level_tokenizer(other, add_prefix_space=False)
    (other / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    with pytest.raises(VocabError, match="im_end"):
        load_vocab(f"hf:{other}")


def test_sentencepiece_prepend_normalizer_is_neutralised(tmp_path: Path) -> None:
    """A Llama-2-style file: ``Prepend("▁")`` normalizer, byte fallback, no pre-tokenizer."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, normalizers

    pieces = {"<unk>": 0, "<s>": 1, "</s>": 2}
    pieces.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ["▁", "h", "i", "▁h", "▁hi", "t", "e", "r", "▁t", "▁th", "▁the"]:
        pieces[piece] = len(pieces)
    merges = [("▁", "h"), ("▁h", "i"), ("▁", "t"), ("▁t", "h"), ("▁th", "e")]
    tok = tokenizers.Tokenizer(
        models.BPE(vocab=pieces, merges=merges, unk_token="<unk>", byte_fallback=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))

    vocab = load_vocab(f"hf:{path}")
    assert vocab.token_bytes[pieces["▁the"]] == b" the"
    assert vocab.token_bytes[pieces["<0x0A>"]] == b"\n"
    assert vocab.eos_ids == (2,) and sorted(vocab.special_tokens) == [0, 1, 2]
    assert vocab.encode("hi") == [pieces["h"], pieces["i"]]  # no "▁" prepended
    assert vocab.encode(" hi the") == [pieces["▁hi"], pieces["▁the"]]
    for text in ["hi", "hi there\n", "日本 </s>"]:
        assert vocab.decode(vocab.encode(text)) == text.encode()


def test_lossy_hf_normalizer_raises_on_encode(tmp_path: Path) -> None:
    path = _byte_level_tokenizer(tmp_path, add_prefix_space=False)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["normalizer"] = {"type": "Lowercase"}
    path.write_text(json.dumps(data), encoding="utf-8")
    vocab = load_vocab(f"hf:{path}")
    assert vocab.decode(vocab.encode("hello")) == b"hello"
    with pytest.raises(VocabError, match="HELLO"):
        vocab.encode("HELLO")


def test_unsupported_hf_model(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))
    with pytest.raises(VocabError, match="WordPiece"):
        load_vocab(f"hf:{path}")


# -- all real vocabularies ------------------------------------------------------------


@pytest.fixture(params=["tekken", "llama3", "mistral_hf"])
def real_vocab(request: pytest.FixtureRequest) -> Vocabulary:
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_round_trip(real_vocab: Vocabulary, text: str) -> None:
    ids = real_vocab.encode(text)
    assert real_vocab.decode(ids) == text.encode("utf-8")
    assert not any(real_vocab.is_special(i) for i in ids)


def test_special_names_are_plain_text(real_vocab: Vocabulary) -> None:
    names = sorted(real_vocab.special_tokens.items())[:20]
    text = "x".join(name for _, name in names) + "<s></s><|eot_id|>[INST]"
    ids = real_vocab.encode(text)
    assert real_vocab.decode(ids) == text.encode()
    assert not any(real_vocab.is_special(i) for i in ids)


def test_text_token_ids_of_real_vocab(real_vocab: Vocabulary) -> None:
    ids = real_vocab.text_token_ids()
    assert ids.dtype == np.int32 and np.all(np.diff(ids) > 0)
    assert len(ids) + len(real_vocab.special_tokens) == real_vocab.n_defined
    assert all(real_vocab.token_bytes[i] for i in ids.tolist())
    mask = real_vocab.text_token_mask()
    assert mask.shape == (real_vocab.size,) and np.array_equal(np.flatnonzero(mask), ids)


def test_padded_load(llama3: Vocabulary) -> None:
    spec = f"llama3:{require_shared(LLAMA3)}"
    wide = load_vocab(spec, size=128_512)
    assert wide is load_vocab(spec, size=128_512)  # cached
    assert wide.size == 128_512 and wide.n_defined == 128_256
    assert wide.token_bytes[:128_256] == llama3.token_bytes
    assert wide.token_bytes[128_256:] == [b""] * 256
    assert not wide.is_special(128_300)
    assert np.array_equal(wide.text_token_ids(), llama3.text_token_ids())
    assert wide.text_token_mask().shape == (128_512,)
    assert wide.encode("hi there") == llama3.encode("hi there")
    with pytest.raises(VocabError, match="padding"):
        wide.decode([128_256])
    with pytest.raises(VocabError, match="128256"):
        load_vocab(spec, size=128_000)


# -- hand-made vocabularies -----------------------------------------------------------


def _small() -> Vocabulary:
    #  id: 0     1     2      3      4     5        6      7
    tokens = [b"a", b"b", b"ab", b"abc", b"c", b"<eos>", b"zz", b""]
    return Vocabulary.from_tokens(
        tokens, eos_ids=[5], special_tokens={6: "<pad>"}, size=10, name="small"
    )


def test_from_tokens_layout() -> None:
    v = _small()
    assert (v.name, v.size, v.n_defined, len(v)) == ("small", 10, 8, 10)
    assert v.special_tokens == {6: "<pad>", 5: "<eos>"}
    assert v.eos_ids == (5,)
    assert v.token_bytes == [b"a", b"b", b"ab", b"abc", b"c", b"", b"", b"", b"", b""]
    assert v.text_token_ids().tolist() == [0, 1, 2, 3, 4]
    assert v.text_token_mask().tolist() == [True] * 5 + [False] * 5
    assert v.decode([3, 5, 6, 7, 0]) == b"abc<eos><pad>a"
    assert v.memory_bytes() > sum(map(len, v.token_bytes))


def test_from_tokens_greedy_longest_match() -> None:
    v = _small()
    assert v.encode("abcab") == [3, 2]
    assert v.encode("aabc") == [0, 3]
    assert v.encode("") == []
    with pytest.raises(VocabError, match="0x7a"):
        v.encode("abz")  # "zz" is special, so no text token covers "z"
    with pytest.raises(VocabError, match="0x3c"):
        v.encode("<eos>")


def test_from_tokens_rejects_bad_input() -> None:
    with pytest.raises(VocabError, match="expected bytes"):
        Vocabulary.from_tokens(["a"])  # type: ignore[list-item]
    with pytest.raises(VocabError, match="smaller"):
        Vocabulary.from_tokens([b"a", b"b"], size=1)
    with pytest.raises(VocabError, match="EOS id 3"):
        Vocabulary.from_tokens([b"a", b"b"], eos_ids=[3])
    with pytest.raises(VocabError, match="special id 2"):
        Vocabulary.from_tokens([b"a", b"b"], special_tokens={2: "<x>"})


def test_decode_rejects_padding_and_out_of_range() -> None:
    v = _small()
    for bad, message in [(8, "padding"), (9, "padding"), (10, "outside"), (-1, "outside")]:
        with pytest.raises(VocabError, match=message):
            v.decode([0, bad])


def test_padded() -> None:
    v = _small()
    wide = v.padded(40)
    assert wide.size == 40 and wide.n_defined == 8 and wide.token_bytes[8:] == [b""] * 32
    assert wide.text_token_ids().tolist() == [0, 1, 2, 3, 4]
    assert wide.encode("abc") == [3]
    narrow = v.padded(8)
    assert narrow.size == 8 and narrow.text_token_mask().shape == (8,)
    assert v.padded(10) is v
    with pytest.raises(VocabError, match="defines 8"):
        v.padded(7)


# -- specs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["", "gpt2", "llama3", "hf", "hf:", "tekken:", "llama3:/nonexistent/tokenizer.model"]
)
def test_bad_specs(spec: str) -> None:
    with pytest.raises(VocabError, match="valid forms") as err:
        load_vocab(spec)
    assert repr(spec) in str(err.value)
    assert '"hf:PATH"' in str(err.value) and '"llama3:PATH"' in str(err.value)


def test_malformed_llama3_file(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.model"
    path.write_text("YQ== 0\nYg== 1\nnot-base64!! 2\n")
    with pytest.raises(VocabError, match="line 3"):
        load_vocab(f"llama3:{path}")
    path.write_text("YQ== 0\nYg== 2\n")
    with pytest.raises(VocabError, match="0..n-1"):
        load_vocab(f"llama3:{tmp_path}")


def test_load_is_cached(tekken: Vocabulary) -> None:
    assert load_vocab("tekken") is tekken
    assert load_vocab("tekken", size=131_072) is tekken


def test_a_padded_load_stays_the_cached_vocabulary_after_other_loads(tmp_path: Path) -> None:
    # CI caught this: the other vocabularies a test run loads evicted the base cache but
    # not the per-size one, and size= (the tokenizer's own) then built a second copy.
    def write(i: int) -> str:
        path = tmp_path / f"v{i}.model"
        path.write_text("".join(f"{base64.b64encode(bytes([97 + j])).decode()} {j}\n" for j in range(i + 2)))
        return f"llama3:{path}"

    base = load_vocab(write(0))
    for i in range(1, 18):
        assert load_vocab(write(i)).n_defined == i + 2 + 256  # and the 256 specials
    assert load_vocab(write(0)) is base
    assert load_vocab(write(0), size=base.size) is base


def test_byte_table_holds_every_ids_bytes_in_id_order() -> None:
    from tests._support.fixtures import small_vocab

    v = small_vocab()
    blob, offsets = v.byte_table()
    assert offsets.shape == (v.size + 1,) and not offsets.flags.writeable
    assert [blob[offsets[t]:offsets[t + 1]] for t in range(v.size)] == v.token_bytes
    assert v.byte_table() is v.byte_table()  # made once


def test_from_tokenizer_reads_a_transformers_tokenizer_as_the_hf_loader(tmp_path) -> None:
    """A transformers fast tokenizer and a tokenizers.Tokenizer give the vocabulary the
    ``hf:`` loader reads from the same tokenizer.json (sentencepiece byte fallback:
    Mistral), padded to the model's logit width when asked; get_engine takes them."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from strategies import get_engine

    folder = require_shared("tokenizers/mistral-7b-v0.3/tokenizer.json").parent
    ref = load_vocab(f"hf:{folder}")
    fast = AutoTokenizer.from_pretrained(str(folder))
    for tok, size in ((fast, None), (fast, ref.size + 32), (Tokenizer.from_file(str(folder / "tokenizer.json")), None)):
        v = Vocabulary.from_tokenizer(tok, size=size)
        assert v.size == (size or ref.size) and v.n_defined == ref.n_defined
        assert v.token_bytes[: ref.size] == ref.token_bytes and v.special_tokens == ref.special_tokens
        assert v.eos_ids == ref.eos_ids
        assert v.encode('{"name": "Grüße", "n": 12}') == ref.encode('{"name": "Grüße", "n": 12}')
    assert get_engine("outlines", fast).vocab.token_bytes == ref.token_bytes
    assert load_vocab(fast, size=ref.size + 8).size == ref.size + 8
    assert Vocabulary.from_tokenizer(fast, eos_ids=[1]).eos_ids == (1,)


def test_from_tokenizer_reads_a_byte_level_tokenizer_exactly(tmp_path) -> None:
    """A byte-level BPE (GPT-2 style) tokenizer: every token's exact bytes, as the hf:
    loader reads the same file, and encode reproduces the text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(['{"name": "Ada", "age": 36}', "Grüße aus Köln", "naïve café"] * 20, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    ref = load_vocab(f"hf:{path}")
    v = Vocabulary.from_tokenizer(tok, eos_ids=[tok.token_to_id("<|endoftext|>")])
    assert v.token_bytes == ref.token_bytes and v.eos_ids == (tok.token_to_id("<|endoftext|>"),)
    assert sorted(b for b in v.token_bytes if len(b) == 1) == [bytes([i]) for i in range(256)]
    for text in ("Grüße aus Köln", '{"age": 36}'):
        assert b"".join(v.token_bytes[i] for i in v.encode(text)) == text.encode()


def test_from_tokenizer_refuses_other_objects() -> None:
    with pytest.raises(VocabError, match="transformers fast tokenizer"):
        Vocabulary.from_tokenizer(object())
