"""A :class:`~toolkit.core.vocab.Vocabulary` as a vocabulary-only GGUF file, for llama.cpp.

llama.cpp reads its vocabulary from a model file; its grammar sampler (``peer:llama.cpp``)
needs no weights, only the tokens, so :func:`write_vocab_gguf` writes a GGUF file of
metadata alone (no tensors) that ``llama_model_load_from_file`` opens with
``vocab_only=True``, and whose every token *piece* (what llama.cpp matches a grammar
against: ``llama_token_to_piece``) is exactly the vocabulary's bytes.

The tokenizer model is ``gpt2`` (byte-level BPE).  Its ``NORMAL`` tokens are stored as
the GPT-2 byte-to-unicode spelling of their bytes and llama.cpp maps each character back
to its byte, so any byte string (a partial UTF-8 character, a control byte) is exact.
llama.cpp indexes tokens by their stored text and aborts on two equal ones, so a token
whose bytes another token has already taken is stored another way that has the same
piece: a single byte as a ``BYTE`` token ``<0xNN>`` (sentencepiece byte fallback, Mistral's
``<0x41>`` beside ``A``), anything else as a ``USER_DEFINED`` token whose text is the raw
bytes (llama.cpp copies those verbatim).  The rest of the layout:

* special tokens are ``CONTROL`` tokens under their names (llama.cpp's grammar sees a
  control token's name as its text; masklab clips those bits, as for every peer);
* the vocabulary's first EOS id is llama.cpp's EOS (so it is end-of-generation: allowed
  exactly where the grammar is complete).  A vocabulary without EOS gets one extra
  ``CONTROL`` token ``<|masklab_eos|>`` at id ``size`` (past every id masklab uses), since
  a ``gpt2`` vocabulary would otherwise take id 11 as its EOS;
* padding ids and empty non-special ids are ``UNUSED`` tokens: their piece is empty,
  which llama.cpp's grammar never allows;
* BPE merges do not matter to masks, but llama.cpp refuses a ``gpt2`` vocabulary without
  them (and the writer leaves an empty list out), so there is one, harmless merge.

:func:`vocab_gguf` caches the file per vocabulary under :func:`gguf_cache_dir`
(``$MASKLAB_CACHE/gguf``, default ``~/.cache/masklab/gguf``), named by a hash of the
token bytes, special names, EOS ids and size, so an engine built again finds it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from toolkit.core.errors import VocabError
from toolkit.core.vocab import Vocabulary, byte_level_alphabet

__all__ = [
    "GGUF_LAYOUT",
    "NORMAL",
    "CONTROL",
    "USER_DEFINED",
    "UNUSED",
    "BYTE",
    "EXTRA_EOS",
    "gguf_tokens",
    "write_vocab_gguf",
    "vocab_gguf",
    "vocab_key",
    "gguf_cache_dir",
]

GGUF_LAYOUT = 1
"""The layout version of the files written here: part of the cache key, bumped when the
layout changes so that no stale file is read."""

# llama.cpp's token types (gguf's ``TokenType``, llama.h's ``llama_token_type``)
NORMAL, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 3, 4, 5, 6

EXTRA_EOS = "<|masklab_eos|>"
"""The name of the EOS token added to a vocabulary that has none."""

_MERGE = "\u0120 \u0120"  # "Ġ Ġ": two spaces, a merge no mask depends on

_TO_CHAR = {b: c for c, b in byte_level_alphabet().items()}


def _byte_level(data: bytes) -> str:
    """``data`` in GPT-2's byte-to-unicode alphabet (what llama.cpp decodes back)."""
    return "".join(_TO_CHAR[b] for b in data)


def gguf_tokens(vocab: Vocabulary) -> tuple[list[bytes], list[int], int]:
    """``(texts, types, eos_id)``: the token list the GGUF file stores for ``vocab``.

    ``texts[i]`` is the stored text of id ``i`` (UTF-8 bytes, or raw bytes for a
    ``USER_DEFINED`` token), ``types[i]`` its llama.cpp token type; there are ``vocab.size``
    entries, plus one (the added EOS) when the vocabulary has no EOS id.  Raises
    :class:`VocabError` when two tokens cannot be told apart in llama.cpp's token table
    (equal bytes more than twice over, in forms that coincide)."""
    size = vocab.size
    texts: list[bytes | None] = [None] * size
    types = [UNUSED] * size
    used: set[bytes] = set()
    specials = vocab.special_tokens
    tb = vocab.token_bytes
    dupes: list[int] = []
    # 1. the first token of each byte string: NORMAL, byte-level text (a bijection: unique)
    first: set[bytes] = set()
    for i in range(vocab.n_defined):
        data = tb[i]
        if not data or i in specials:
            continue
        if data in first:
            dupes.append(i)
            continue
        first.add(data)
        texts[i] = _byte_level(data).encode("utf-8")
        types[i] = NORMAL
        used.add(texts[i])

    def claim(i: int, kind: int, candidates: Iterable[bytes]) -> bool:
        for text in candidates:
            if text and text not in used:
                texts[i], types[i] = text, kind
                used.add(text)
                return True
        return False

    # 2. tokens whose bytes an earlier token has: a byte-fallback token, or raw bytes
    for i in dupes:
        data = tb[i]
        if len(data) == 1 and claim(i, BYTE, [f"<0x{data[0]:02X}>".encode()]):
            continue
        if not claim(i, USER_DEFINED, [data]):
            raise VocabError(f"{vocab.name}: token {i} ({data!r}) cannot be stored for llama.cpp: another "
                             "token already holds each text that gives these bytes")
    # 3. special tokens under their names (another name where a text token holds it)
    for i in sorted(specials):
        name = specials[i].encode("utf-8")
        claim(i, CONTROL, [name, f"<|masklab_special_{i}|>".encode(), f"<|masklab_special_{i}_{len(used)}|>".encode()])
    # 4. padding and holes: unused, with a name of their own (llama.cpp needs one)
    for i in range(size):
        if texts[i] is None:
            claim(i, UNUSED, [f"[masklab_unused_{i}]".encode(), f"[masklab_unused_{i}_{len(used)}]".encode()])
    out = [t for t in texts if t is not None]
    if len(out) != size:  # pragma: no cover - every name above is unique by construction
        raise VocabError(f"{vocab.name}: could not name every token for llama.cpp")
    if vocab.eos_ids:
        eos = vocab.eos_ids[0]
    else:
        eos = size
        name = EXTRA_EOS.encode()
        while name in used:
            name = b"<|masklab_eos_" + name + b"|>"
        out.append(name)
        types.append(CONTROL)
    return out, types, eos


def write_vocab_gguf(vocab: Vocabulary, path: str | os.PathLike[str]) -> Path:
    """Write ``vocab`` as a vocabulary-only GGUF file at ``path`` (see the module doc);
    returns the path.  The file is written to a temporary name beside ``path`` and moved
    into place, so a reader never sees half a file."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    texts, types, eos = gguf_tokens(vocab)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, arch="llama")
        w.add_name(f"masklab vocabulary {vocab.name}")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(texts)
        w.add_token_types(types)
        w.add_token_merges([_MERGE])
        w.add_eos_token_id(eos)
        w.add_bos_token_id(eos)
        w.add_add_bos_token(False)
        w.add_add_eos_token(False)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def vocab_key(vocab: Vocabulary) -> str:
    """A hash of everything the GGUF file holds of ``vocab`` (bytes, special names, EOS ids,
    size) and of :data:`GGUF_LAYOUT`: the file's name in the cache."""
    h = hashlib.sha256(f"masklab-gguf-{GGUF_LAYOUT}:{vocab.size}:{vocab.n_defined}:".encode())
    for data in vocab.token_bytes:
        h.update(len(data).to_bytes(4, "little"))
        h.update(data)
    for i in sorted(vocab.special_tokens):
        name = vocab.special_tokens[i].encode("utf-8")
        h.update(b"S" + i.to_bytes(4, "little") + len(name).to_bytes(4, "little") + name)
    h.update(b"E" + b"".join(int(i).to_bytes(4, "little") for i in vocab.eos_ids))
    return h.hexdigest()[:32]


def gguf_cache_dir() -> Path:
    """Where :func:`vocab_gguf` keeps its files: ``$MASKLAB_CACHE/gguf``, by default
    ``$XDG_CACHE_HOME/masklab/gguf`` (``~/.cache/masklab/gguf``)."""
    root = os.environ.get("MASKLAB_CACHE")
    if root:
        return Path(root).expanduser() / "gguf"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "masklab" / "gguf"


def vocab_gguf(vocab: Vocabulary, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The GGUF file of ``vocab``, written on first use and cached under ``cache_dir``
    (default :func:`gguf_cache_dir`) as ``<vocab_key>.gguf``."""
    folder = Path(cache_dir) if cache_dir is not None else gguf_cache_dir()
    path = folder / f"{vocab_key(vocab)}.gguf"
    if not path.is_file():
        write_vocab_gguf(vocab, path)
    return path
