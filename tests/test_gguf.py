"""Vocabulary-only GGUF files (:mod:`toolkit.core.gguf`): what llama.cpp reads back.

* the file as stored (the ``gguf`` package's reader): token types, EOS, no tensors;
* the file as llama.cpp loads it with ``vocab_only=True`` (llama-cpp-python): every text
  token's piece is exactly its bytes, special tokens are control tokens, padding ids have
  no piece, EOS is the vocabulary's, on a hand vocabulary with every awkward case
  (duplicate bytes, partial UTF-8, control bytes, no EOS) and on the Llama-3 and
  Mistral tokenizers;
* the cache: one file per vocabulary, named by a hash of what it holds.
"""

from __future__ import annotations

import ctypes

import pytest

from tests._support.shared import require_shared
from toolkit.core.errors import VocabError
from toolkit.core.gguf import (
    BYTE,
    CONTROL,
    EXTRA_EOS,
    NORMAL,
    UNUSED,
    USER_DEFINED,
    gguf_cache_dir,
    gguf_tokens,
    vocab_gguf,
    vocab_key,
    write_vocab_gguf,
)
from toolkit.core.vocab import Vocabulary, load_vocab

gguf = pytest.importorskip("gguf", reason="gguf (the [peers] extra) not installed")

# ids: 0 a special token whose name a text token has ("ok", id 14), 1 EOS, then text tokens
# with every case the layout handles: bytes the byte-level alphabet changes (space,
# newline, NUL), 0xFF, a partial UTF-8 character, one-byte duplicates ("A", "\xc3": byte
# fallback tokens), a multi-byte duplicate (" a": its raw bytes), a hole (empty, not
# special), a text token named like the padding's own names, and two padding ids.
HAND_TOKENS = [b"", b"", b"A", b" a", b"\n", b"\x00", b"\xff", "é".encode(), b"\xc3", b"A", b" a", b"\xc3", b"",
               b"[masklab_unused_15]", b"ok"]  # fmt: skip


def hand_vocab() -> Vocabulary:
    return Vocabulary.from_tokens(HAND_TOKENS, eos_ids=(1,), special_tokens={0: "ok", 1: "</s>"}, size=17,
                                  name="gguf-hand")


def _reader_tokens(path) -> tuple[list[bytes], list[int], dict[str, object]]:
    r = gguf.GGUFReader(path)
    toks = r.fields["tokenizer.ggml.tokens"]
    types = r.fields["tokenizer.ggml.token_type"]
    texts = [bytes(toks.parts[i]) for i in toks.data]
    kinds = [int(types.parts[i][0]) for i in types.data]
    scalars = {k: f.contents() for k, f in r.fields.items() if k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.model")}
    assert len(r.tensors) == 0
    return texts, kinds, scalars


def test_layout_of_a_hand_vocabulary(tmp_path) -> None:
    v = hand_vocab()
    texts, kinds, eos = gguf_tokens(v)
    assert eos == 1 and len(texts) == v.size == len(kinds) == 17
    spelt = ["A", "Ġa", "Ċ", "Ā", "ÿ", "Ã©", "Ã"]  # GPT-2's byte-level alphabet
    assert texts[2:9] == [t.encode() for t in spelt] and kinds[2:9] == [NORMAL] * 7
    assert (texts[9], kinds[9]) == (b"<0x41>", BYTE)  # "A" again
    assert (texts[10], kinds[10]) == (b" a", USER_DEFINED)  # " a" again: raw bytes
    assert (texts[11], kinds[11]) == (b"<0xC3>", BYTE)
    assert (texts[12], kinds[12]) == (b"[masklab_unused_12]", UNUSED)  # a hole
    assert (texts[13], kinds[13]) == (b"[masklab_unused_15]", NORMAL)
    assert kinds[15:] == [UNUSED, UNUSED] and texts[15] not in (texts[13], b"") and texts[16] == b"[masklab_unused_16]"
    assert (texts[0], kinds[0]) == (b"<|masklab_special_0|>", CONTROL)  # "ok" is a text token's
    assert (texts[1], kinds[1]) == (b"</s>", CONTROL)
    assert len(set(texts)) == len(texts)
    path = write_vocab_gguf(v, tmp_path / "hand.gguf")
    got, got_kinds, scalars = _reader_tokens(path)
    assert got == texts and got_kinds == kinds
    assert scalars == {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.eos_token_id": 1}


def test_a_vocabulary_without_eos_gets_one_past_its_ids() -> None:
    v = Vocabulary.from_tokens([b"a", b"b"], name="no-eos")
    texts, kinds, eos = gguf_tokens(v)
    assert eos == v.size == 2 and texts[2] == EXTRA_EOS.encode() and kinds[2] == CONTROL


def test_tokens_that_cannot_be_told_apart_are_a_vocab_error() -> None:
    # "ab" twice: its byte-level spelling and its raw bytes are the same text
    with pytest.raises(VocabError, match=r"token 1 \(b'ab'\)"):
        gguf_tokens(Vocabulary.from_tokens([b"ab", b"ab"], name="dupes"))
    # "B" twice where a text token is spelt "<0x42>": no byte fallback left either
    with pytest.raises(VocabError, match=r"token 2 \(b'B'\)"):
        gguf_tokens(Vocabulary.from_tokens([b"B", b"<0x42>", b"B"], name="dupes"))


def test_cache_is_keyed_by_the_vocabulary(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASKLAB_CACHE", str(tmp_path / "c"))
    assert gguf_cache_dir() == tmp_path / "c" / "gguf"
    v = hand_vocab()
    p = vocab_gguf(v)
    assert p.parent == tmp_path / "c" / "gguf" and p.name == f"{vocab_key(v)}.gguf"
    stamp = p.stat().st_mtime_ns
    assert vocab_gguf(hand_vocab()) == p and p.stat().st_mtime_ns == stamp  # found, not written again
    assert vocab_key(v.padded(v.size + 1)) != vocab_key(v)
    renamed = Vocabulary.from_tokens(HAND_TOKENS, eos_ids=(1,), special_tokens={0: "<bos>", 1: "</s>"}, size=17)
    assert vocab_key(renamed) != vocab_key(v)
    assert list((tmp_path / "c" / "gguf").iterdir()) == [p]  # no temporary file left


# ---------------------------------------------------------- read by llama.cpp --


def _llama(path):
    """``(lib, model, vocab)``: the file loaded by llama.cpp with ``vocab_only``, its log silenced."""
    lib = pytest.importorskip("llama_cpp.llama_cpp", reason="llama-cpp-python (the [peers] extra) not installed")
    from strategies.peer_llamacpp import _Model, _silence

    _silence(lib)
    model = _Model(lib, str(path))
    return lib, model, model.vocab


def _pieces(lib, lv, n: int, special: bool) -> list[bytes]:
    buf = ctypes.create_string_buffer(4096)
    out = []
    for i in range(n):
        k = lib.llama_token_to_piece(lv, i, buf, 4096, 0, special)
        assert k >= 0
        out.append(buf.raw[:k])
    return out


def _check_read_back(v: Vocabulary, path) -> None:
    lib, model, lv = _llama(path)
    texts, _, eos = gguf_tokens(v)
    assert model.n_tokens == len(texts) and model.eos == eos
    plain = _pieces(lib, lv, v.size, special=False)
    text = v.text_token_mask()
    wrong = [(i, v.token_bytes[i], plain[i]) for i in range(v.size) if text[i] and plain[i] != v.token_bytes[i]]
    assert not wrong, wrong[:5]
    # what the grammar sampler reads (its cache holds the pieces with special=True)
    rendered = _pieces(lib, lv, v.size, special=True)
    assert all(rendered[i] == v.token_bytes[i] for i in range(v.size) if text[i])
    control = 1 << 3  # LLAMA_TOKEN_ATTR_CONTROL
    for i, name in v.special_tokens.items():
        assert lib.llama_vocab_get_attr(lv, i) & control, (i, name)
        assert plain[i] == b""  # a control token renders as nothing without special=True
    assert not any(lib.llama_vocab_is_eog(lv, i) for i in range(v.size) if text[i])
    for i in range(v.size):  # padding and holes: no piece at all
        if not text[i] and i not in v.special_tokens:
            assert plain[i] == rendered[i] == b"", i


def test_llama_cpp_reads_the_hand_vocabulary_exactly(tmp_path) -> None:
    v = hand_vocab()
    _check_read_back(v, write_vocab_gguf(v, tmp_path / "hand.gguf"))


def test_llama_cpp_reads_a_vocabulary_without_eos(tmp_path) -> None:
    v = Vocabulary.from_tokens([b"a", b"b", b" "], size=4, name="no-eos")
    lib, model, lv = _llama(write_vocab_gguf(v, tmp_path / "x.gguf"))
    assert model.eos == 4 and model.n_tokens == 5 and lib.llama_vocab_is_eog(lv, 4)
    _check_read_back(v, tmp_path / "x.gguf")


@pytest.mark.shared
@pytest.mark.parametrize("spec", ["llama3:tokenizers/llama-3/tokenizer.model", "hf:tokenizers/mistral-7b-v0.3"])
def test_llama_cpp_reads_real_tokenizers_exactly(spec: str) -> None:
    kind, rel = spec.split(":", 1)
    v = load_vocab(f"{kind}:{require_shared(rel)}")
    path = vocab_gguf(v)  # the shared cache: later engines on this vocabulary find it
    _check_read_back(v, path)
    if kind == "hf":  # sentencepiece byte fallback: <0xNN> beside the same byte as a token
        _, kinds, _ = gguf_tokens(v)
        assert kinds.count(BYTE) > 0
