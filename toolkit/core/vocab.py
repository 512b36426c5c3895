"""The vocabulary: token id -> exact bytes, special ids, EOS ids, padded size.

Every engine masks over the same id space, so this module is the one place where a
tokenizer is read.  A :class:`Vocabulary` holds, for each id of the model's logits
row, the exact bytes the token stands for (``b""`` for special and padding ids), the
special tokens by name, the ids that end generation, and a canonical tokenizer for
plain text (``encode``) that always round-trips: ``decode(encode(t)) == t.encode()``.

Three kinds of tokenizer files are read (see :func:`load_vocab`):

* mistral-common ``tekken`` JSON files, through mistral-common's ``Tekkenizer``; the
  bundled ``tekken_240911.json`` is the embedded default (``"tekken"``);
* tiktoken BPE rank files (``base64token rank`` per line) with the Llama 3 special
  tokens and pre-tokenizer pattern (``"llama3:PATH"``);
* Hugging Face ``tokenizer.json`` files, byte-level BPE (GPT-2 byte-to-unicode
  alphabet) or sentencepiece style (``▁`` for space, ``<0xNN>`` byte-fallback
  tokens) (``"hf:PATH"``).

Ids are laid out as ``[0, n_defined)`` defined by the tokenizer, then padding ids up
to ``size`` (a model's logits row is often wider than its tokenizer).  Padding ids
are neither special nor text; decoding one is an error.  Vocabularies are treated as
immutable and loaded ones are cached per process.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from toolkit.core.errors import VocabError

__all__ = ["BpeMerges", "Vocabulary", "load_vocab", "vocab_file"]

Encoder = Callable[[str], list[int]]

SPEC_FORMS = (
    '"tekken" (mistral-common\'s bundled tekken_240911.json), '
    '"tekken:PATH" (a tekken JSON file), '
    '"llama3:PATH" (a tiktoken BPE rank file such as Llama 3\'s tokenizer.model), '
    '"hf:PATH" (a Hugging Face tokenizer.json, or the folder holding one)'
)

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: Qwen2's ``Split`` pattern (its ``tokenizer.json``): Llama 3's with single digits
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: GPT-2's pattern: what the ``tokenizers`` crate's ``ByteLevel`` with ``use_regex`` cuts by
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
#: the pre-tokenizer pattern of mistral-common's tekken files (``config.pattern``)
TEKKEN_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_NAMED_SPECIALS = (
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
)
_LLAMA3_NUM_SPECIALS = 256
_LLAMA3_EOS = "<|eot_id|>"

_TEKKEN_DEFAULT = "tekken_240911.json"
_HF_EOS_FALLBACKS = ("</s>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>")
_SP_SPACE = "\u2581"  # sentencepiece's "▁", standing for a space
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class Vocabulary:
    """Token id -> bytes for one model, with its special, EOS and padding ids.

    Build one with :func:`load_vocab` (real tokenizers) or :meth:`from_tokens`
    (hand-made vocabularies for tests).  Attributes:

    * ``name``: where it came from, e.g. ``"tekken"``, ``"llama3"``, ``"hf:mistral-7b-v0.3"``;
    * ``size``: the logits width, padding ids included;
    * ``token_bytes``: ``size`` entries, the exact bytes of each text token, ``b""`` for
      special and padding ids;
    * ``special_tokens``: special id -> its name (EOS ids are always special);
    * ``eos_ids``: the ids that end generation;
    * ``n_defined``: ids the tokenizer defines; ids ``n_defined .. size - 1`` are padding.

    An id inside ``[0, n_defined)`` that is not special but has empty bytes (a hole in
    the tokenizer's id space, or an empty entry given to :meth:`from_tokens`) decodes to
    ``b""`` and is not a text token.
    """

    __slots__ = (
        "name",
        "size",
        "token_bytes",
        "special_tokens",
        "eos_ids",
        "n_defined",
        "_encoder",
        "bpe_pattern",
        "bpe_merges",
        "_text_ids",
        "_text_mask",
        "_byte_table",
    )

    name: str
    size: int
    token_bytes: list[bytes]
    special_tokens: dict[int, str]
    eos_ids: tuple[int, ...]
    n_defined: int
    bpe_pattern: str | None
    bpe_merges: BpeMerges | None

    def __init__(
        self,
        name: str,
        token_bytes: Sequence[bytes],
        *,
        special_tokens: Mapping[int, str] | None = None,
        eos_ids: Sequence[int] = (),
        n_defined: int | None = None,
        encoder: Encoder | None = None,
        bpe_pattern: str | None = None,
        bpe_merges: BpeMerges | None = None,
    ) -> None:
        """Wrap ready-made tables; ``encoder`` defaults to greedy longest match.
        ``bpe_pattern``: the encoder is tiktoken's byte-level BPE with this pre-tokenizer
        pattern and the text tokens' ids in rank order (what lets
        :class:`toolkit.core.bpe.BpeTable` tokenize in C); ``None`` otherwise.
        ``bpe_merges``: the encoder is a Hugging Face BPE model with ranked merges that
        :class:`toolkit.core.bpe.BpeTable` runs too (:class:`BpeMerges`); ``None`` otherwise.

        Prefer :func:`load_vocab` or :meth:`from_tokens`; this checks the invariants
        (special and padding ids have empty bytes, EOS ids are special) and raises
        :class:`VocabError` when one does not hold.
        """
        self.name = name
        self.token_bytes = list(token_bytes)
        self.size = len(self.token_bytes)
        self.n_defined = self.size if n_defined is None else int(n_defined)
        self.special_tokens = {int(i): str(s) for i, s in (special_tokens or {}).items()}
        self.eos_ids = tuple(int(i) for i in eos_ids)
        self.bpe_pattern = bpe_pattern
        self.bpe_merges = bpe_merges
        if not 0 <= self.n_defined <= self.size:
            raise VocabError(f"{name}: n_defined={self.n_defined} outside [0, size={self.size}]")
        for i in self.special_tokens:
            if not 0 <= i < self.n_defined:
                raise VocabError(f"{name}: special id {i} outside [0, n_defined={self.n_defined})")
            if self.token_bytes[i]:
                raise VocabError(f"{name}: special id {i} must have empty token bytes")
        for i in self.eos_ids:
            if i not in self.special_tokens:
                raise VocabError(f"{name}: EOS id {i} is not a special token")
        if any(self.token_bytes[self.n_defined :]):
            raise VocabError(f"{name}: padding ids from {self.n_defined} must have empty bytes")
        self._encoder = (
            encoder
            if encoder is not None
            else _greedy_encoder(self.token_bytes, self.special_tokens)
        )
        self._text_ids: npt.NDArray[np.int32] | None = None
        self._text_mask: npt.NDArray[np.bool_] | None = None
        self._byte_table: tuple[bytes, npt.NDArray[np.int64]] | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, size: int | None = None, eos_ids: Sequence[int] | None = None,
                       name: str | None = None) -> Vocabulary:
        """The vocabulary of a tokenizer object: a ``transformers`` fast tokenizer (its
        ``backend_tokenizer``) or a ``tokenizers.Tokenizer``, read as the ``hf:`` loader
        reads its ``tokenizer.json`` (exact bytes for byte-level and sentencepiece
        byte-fallback tokenizers).  ``size``: the model's logit width when it pads the
        vocabulary (extra ids are padding); ``eos_ids``: the EOS ids (default: a
        transformers tokenizer's ``eos_token``, else the usual EOS names).  Raises
        :class:`VocabError` for anything else (a slow transformers tokenizer: load it
        with ``use_fast=True``)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)  # transformers' fast tokenizers
        eos_names: list[str] | None = None
        if backend is not None:
            eos = getattr(tokenizer, "eos_token", None)
            eos_names = [str(eos)] if eos else None
            label = name or f"hf:{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}"
        elif isinstance(tokenizer, _tokenizer_class()):
            backend, label = tokenizer, name or "hf:tokenizer"
        else:
            raise VocabError(
                f"cannot read a vocabulary from a {type(tokenizer).__name__}: expected a transformers fast "
                "tokenizer (AutoTokenizer.from_pretrained(..., use_fast=True)) or a tokenizers.Tokenizer"
            )
        if eos_ids is not None:
            eos_names = []
            for i in eos_ids:
                piece = backend.id_to_token(int(i))
                if piece is None:
                    raise VocabError(f"{label}: EOS id {i} is not a token")
                eos_names.append(piece)
        vocab = _hf_vocab(json.loads(backend.to_str()), label, label, eos_names)
        return vocab if size is None else vocab.padded(int(size))

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes],
        *,
        eos_ids: Sequence[int] = (),
        special_tokens: Mapping[int, str] | None = None,
        size: int | None = None,
        name: str = "custom",
    ) -> Vocabulary:
        """A hand-made vocabulary: id ``i`` is ``tokens[i]``.

        Entries of special ids are ignored (stored as ``b""``).  An EOS id missing from
        ``special_tokens`` becomes special, named after its entry (``"<eos>"`` when that
        is empty).  ``size`` adds padding ids after the tokens.

        ``encode`` on such a vocabulary is greedy longest match over the text tokens
        (at each position the longest token that matches, lowest id on ties), without
        backtracking; it raises :class:`VocabError` at the first byte no token covers.
        """
        entries: list[bytes] = []
        for i, tok in enumerate(tokens):
            if not isinstance(tok, bytes | bytearray | memoryview):
                raise VocabError(f"{name}: token {i} is {type(tok).__name__}, expected bytes")
            entries.append(bytes(tok))
        n = len(entries)
        specials = {int(i): str(s) for i, s in (special_tokens or {}).items()}
        for i in eos_ids:
            i = int(i)
            if not 0 <= i < n:
                raise VocabError(f"{name}: EOS id {i} outside [0, {n})")
            if i not in specials:
                specials[i] = entries[i].decode("utf-8", "replace") or "<eos>"
        for i in specials:
            if not 0 <= i < n:
                raise VocabError(f"{name}: special id {i} outside [0, {n})")
            entries[i] = b""
        total = n if size is None else int(size)
        if total < n:
            raise VocabError(f"{name}: size={total} is smaller than the {n} tokens given")
        entries.extend([b""] * (total - n))
        return cls(name, entries, special_tokens=specials, eos_ids=eos_ids, n_defined=n)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (
            f"Vocabulary(name={self.name!r}, size={self.size}, n_defined={self.n_defined}, "
            f"specials={len(self.special_tokens)}, eos_ids={self.eos_ids})"
        )

    def encode(self, text: str) -> list[int]:
        """Canonical tokenization of plain text: no BOS/EOS, never a special id.

        Special-token names inside ``text`` are tokenized as ordinary text.  The result
        always satisfies ``decode(encode(text)) == text.encode("utf-8")``; a tokenizer
        that cannot honour that (e.g. one with a lossy normalizer) raises
        :class:`VocabError` instead of returning a lossy tokenization.
        """
        ids = self._encoder(text)
        if b"".join(map(self.token_bytes.__getitem__, ids)) != text.encode("utf-8") or not (
            self.special_tokens.keys().isdisjoint(ids)
        ):
            raise VocabError(
                f"{self.name}: the tokenizer does not reproduce {_clip(text)} exactly "
                "(lossy normalizer or unknown characters)"
            )
        return ids

    def decode(self, ids: Iterable[int]) -> bytes:
        """The concatenated bytes of ``ids``; a special id renders as its name in UTF-8.

        Raises :class:`VocabError` for padding ids and ids outside ``[0, size)``.
        """
        parts: list[bytes] = []
        token_bytes = self.token_bytes
        specials = self.special_tokens
        n_defined = self.n_defined
        for raw in ids:
            i = int(raw)
            if 0 <= i < n_defined:
                name = specials.get(i)
                parts.append(token_bytes[i] if name is None else name.encode("utf-8"))
            elif n_defined <= i < self.size:
                raise VocabError(f"{self.name}: id {i} is a padding id (n_defined={n_defined})")
            else:
                raise VocabError(f"{self.name}: id {i} outside [0, size={self.size})")
        return b"".join(parts)

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special token (EOS ids included)."""
        return int(token_id) in self.special_tokens

    def text_token_ids(self) -> npt.NDArray[np.int32]:
        """Sorted int32 ids that are not special, not padding, and have bytes; read-only."""
        if self._text_ids is None:
            specials = self.special_tokens
            ids = np.fromiter(
                (i for i in range(self.n_defined) if self.token_bytes[i] and i not in specials),
                dtype=np.int32,
            )
            ids.flags.writeable = False
            self._text_ids = ids
        return self._text_ids

    def text_token_mask(self) -> npt.NDArray[np.bool_]:
        """``bool[size]``, True exactly at :meth:`text_token_ids`; read-only."""
        if self._text_mask is None:
            mask = np.zeros(self.size, dtype=np.bool_)
            mask[self.text_token_ids()] = True
            mask.flags.writeable = False
            self._text_mask = mask
        return self._text_mask

    def byte_table(self) -> tuple[bytes, npt.NDArray[np.int64]]:
        """``(blob, offsets)``: every id's bytes in id order, id ``t``'s being
        ``blob[offsets[t]:offsets[t + 1]]`` (``offsets``: ``size + 1`` int64, read-only),
        for C code that reads tokens by id; made once."""
        if self._byte_table is None:
            lengths = np.fromiter(map(len, self.token_bytes), dtype=np.int64, count=self.size)
            offsets = np.zeros(self.size + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            offsets.flags.writeable = False
            self._byte_table = (b"".join(self.token_bytes), offsets)
        return self._byte_table

    def padded(self, size: int) -> Vocabulary:
        """The same vocabulary with padding ids up to ``size`` (may drop padding, never tokens)."""
        size = int(size)
        if size < self.n_defined:
            raise VocabError(
                f"{self.name}: cannot pad to size={size}, the tokenizer defines {self.n_defined} ids"
            )
        if size == self.size:
            return self
        entries = self.token_bytes[: self.n_defined] + [b""] * (size - self.n_defined)
        return Vocabulary(
            self.name,
            entries,
            special_tokens=self.special_tokens,
            eos_ids=self.eos_ids,
            n_defined=self.n_defined,
            encoder=self._encoder,
            bpe_pattern=self.bpe_pattern,
            bpe_merges=self.bpe_merges,
        )

    def memory_bytes(self) -> int:
        """Bytes held by the id tables (token bytes, names, cached arrays); not the encoder."""
        total = sys.getsizeof(self.token_bytes) + sum(map(sys.getsizeof, self.token_bytes))
        total += sys.getsizeof(self.special_tokens)
        total += sum(sys.getsizeof(s) + sys.getsizeof(i) for i, s in self.special_tokens.items())
        for arr in (self._text_ids, self._text_mask):
            if arr is not None:
                total += arr.nbytes
        if self._byte_table is not None:
            total += len(self._byte_table[0]) + self._byte_table[1].nbytes
        return total


def load_vocab(spec: Any, *, size: int | None = None) -> Vocabulary:
    """Load a vocabulary from a spec, padded to ``size`` ids when given.

    ``spec`` may also be a :class:`Vocabulary` (returned as it is, or padded) or a
    tokenizer object (:meth:`Vocabulary.from_tokenizer`).

    Specs: ``"tekken"``, ``"tekken:PATH"``, ``"llama3:PATH"``, ``"hf:PATH"`` (PATH may be
    a ``tokenizer.json`` or the folder holding one; for ``llama3`` a ``tokenizer.model``
    or its folder).  Results are cached per (spec, size) in this process.  Raises
    :class:`VocabError` for an unknown spec, a missing or malformed file, or a ``size``
    smaller than the tokenizer.
    """
    if isinstance(spec, Vocabulary):
        return spec if size is None or size == spec.size else spec.padded(int(size))
    if not isinstance(spec, str):
        return Vocabulary.from_tokenizer(spec, size=size)
    kind, path = _parse_spec(spec)
    return _load_cached(kind, path, None if size is None else int(size))


def vocab_file(spec: str) -> tuple[str, Path | None]:
    """The loader kind and the one file a vocabulary spec reads (None: the embedded
    ``tekken``), so the file can be shipped to another machine and loaded there as
    ``f"{kind}:{copy}"`` (:mod:`toolkit.bench.cluster`)."""
    kind, path = _parse_spec(spec)
    return kind, Path(path) if path else None


# --- spec parsing and caching -------------------------------------------------------


def _parse_spec(spec: str) -> tuple[str, str]:
    if not isinstance(spec, str):
        raise VocabError(
            f"vocabulary spec must be a string, got {type(spec).__name__}; valid forms: {SPEC_FORMS}"
        )
    kind, sep, rest = spec.partition(":")
    if kind == "tekken" and not sep:
        return "tekken", ""
    if kind in ("tekken", "llama3", "hf") and sep and rest:
        path = Path(rest).expanduser()
        if path.is_dir():
            path = path / ("tokenizer.model" if kind == "llama3" else "tokenizer.json")
        if not path.is_file():
            raise VocabError(
                f"vocabulary spec {spec!r}: file {str(path)!r} not found; valid forms: {SPEC_FORMS}"
            )
        return kind, str(path.resolve())
    raise VocabError(f"unknown vocabulary spec {spec!r}; valid forms: {SPEC_FORMS}")


@functools.lru_cache(maxsize=32)
def _load_cached(kind: str, path: str, size: int | None) -> Vocabulary:
    # One cache, a padded entry derived from the unpadded one: with two caches of their
    # own sizes, the base could be evicted while the unpadded entry stayed, and a later
    # ``size=`` (even the tokenizer's own size) then returned a second copy.
    if size is not None:
        return _load_cached(kind, path, None).padded(size)
    if kind == "tekken":
        return _load_tekken(Path(path) if path else None)
    if kind == "llama3":
        return _load_llama3(Path(path))
    return _load_hf(Path(path))


def _clip(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def _lazy(factory: Callable[[], Encoder]) -> Encoder:
    """An encoder built on first use (tokenizer objects take a while to construct)."""
    get = functools.cache(factory)

    def encode(text: str) -> list[int]:
        return get()(text)

    return encode


def _greedy_encoder(token_bytes: Sequence[bytes], specials: Mapping[int, str]) -> Encoder:
    """Greedy longest match over the non-special, non-empty tokens."""
    table: dict[bytes, int] = {}
    for i, tok in enumerate(token_bytes):
        if tok and i not in specials:
            table.setdefault(tok, i)
    longest = max(map(len, table), default=0)

    def encode(text: str) -> list[int]:
        data = text.encode("utf-8")
        ids: list[int] = []
        pos = 0
        while pos < len(data):
            for end in range(min(len(data), pos + longest), pos, -1):
                tid = table.get(data[pos:end])
                if tid is not None:
                    ids.append(tid)
                    pos = end
                    break
            else:
                raise VocabError(
                    f"no token covers byte 0x{data[pos]:02x} at offset {pos} of {_clip(text)}"
                )
        return ids

    return encode


def _tokenizer_class() -> type:
    """``tokenizers.Tokenizer``, loaded when a vocabulary needs it."""
    from tokenizers import Tokenizer

    return Tokenizer


# --- tekken (mistral-common) ---------------------------------------------------------


def _load_tekken(path: Path | None) -> Vocabulary:
    # the tokenizer libraries load with the vocabulary that needs them (the CLI starts without them)
    import mistral_common
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    if path is None:
        path = Path(mistral_common.__file__).parent / "data" / _TEKKEN_DEFAULT
        if not path.is_file():
            raise VocabError(f"mistral-common has no bundled {_TEKKEN_DEFAULT} (looked at {path})")
        name = "tekken"
    else:
        name = f"tekken:{path.stem}"
    try:
        tok = Tekkenizer.from_file(path)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise VocabError(f"cannot read tekken file {str(path)!r}: {exc}") from exc

    n = tok.n_words
    n_special = tok.num_special_tokens
    specials = {
        i: tok.id_to_byte_piece(i, SpecialTokenPolicy.KEEP).decode("utf-8")
        for i in range(n_special)
    }
    entries = [b""] * n_special + [tok.id_to_byte_piece(i) for i in range(n_special, n)]

    def encode(text: str) -> list[int]:
        return tok.encode(text, bos=False, eos=False)

    pattern = getattr(getattr(tok, "_model", None), "_pat_str", None)  # tiktoken's Encoding inside
    return Vocabulary(name, entries, special_tokens=specials, eos_ids=(tok.eos_id,), encoder=encode,
                      bpe_pattern=pattern if isinstance(pattern, str) else None)


# --- Llama 3 (tiktoken BPE ranks) ----------------------------------------------------


def _read_tiktoken_ranks(path: Path) -> list[bytes]:
    """Tokens by rank from a ``base64token rank`` file; ranks must be 0..n-1."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise VocabError(f"cannot read tiktoken BPE file {str(path)!r}: {exc}") from exc
    by_rank: dict[int, bytes] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError("expected 'base64token rank'")
            tok, rank = base64.b64decode(fields[0], validate=True), int(fields[1])
        except (ValueError, binascii.Error) as exc:
            raise VocabError(
                f"{str(path)!r} line {lineno} is not a tiktoken BPE rank line: {exc}"
            ) from exc
        if rank in by_rank:
            raise VocabError(f"{str(path)!r} line {lineno}: rank {rank} appears twice")
        by_rank[rank] = tok
    n = len(by_rank)
    if n == 0 or set(by_rank) != set(range(n)):
        raise VocabError(f"{str(path)!r}: ranks must be exactly 0..n-1 (got {n} ranks)")
    tokens = [by_rank[r] for r in range(n)]
    if len(set(tokens)) != n:
        raise VocabError(f"{str(path)!r}: a token appears under two ranks")
    return tokens


def _llama3_special_names() -> list[str]:
    names = list(_LLAMA3_NAMED_SPECIALS)
    names += [
        f"<|reserved_special_token_{k}|>" for k in range(2, 2 + _LLAMA3_NUM_SPECIALS - len(names))
    ]
    return names


def _load_llama3(path: Path) -> Vocabulary:
    """The ranks file's tokens as ids 0..n-1, then Llama 3's 256 special tokens."""
    tokens = _read_tiktoken_ranks(path)
    n = len(tokens)
    specials = {n + k: s for k, s in enumerate(_llama3_special_names())}
    eos = next(i for i, s in specials.items() if s == _LLAMA3_EOS)

    def build() -> Encoder:
        import tiktoken

        enc = tiktoken.Encoding(
            name=f"masklab-llama3-{path.stem}",
            pat_str=LLAMA3_PATTERN,
            mergeable_ranks={tok: r for r, tok in enumerate(tokens)},
            special_tokens={},
        )
        return enc.encode_ordinary

    return Vocabulary(
        "llama3",
        tokens + [b""] * len(specials),
        special_tokens=specials,
        eos_ids=(eos,),
        encoder=_lazy(build),
        bpe_pattern=LLAMA3_PATTERN,
    )


# --- Hugging Face tokenizer.json -----------------------------------------------------


def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, char -> byte.

    Bytes that are printable Latin-1 characters other than space (``!``..``~``,
    ``¡``..``¬``, ``®``..``ÿ``) stand for themselves; the remaining 68 bytes take the
    code points from U+0100 upward, in byte order (so space is ``Ġ`` = U+0120).
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    keep = set(printable)
    alphabet = {chr(b): b for b in printable}
    for k, b in enumerate(b for b in range(256) if b not in keep):
        alphabet[chr(0x100 + k)] = b
    return alphabet


def _components(node: Any) -> Iterable[dict[str, Any]]:
    """Every component of a (possibly nested ``Sequence``) normalizer/pre-tokenizer/decoder."""
    if isinstance(node, dict):
        yield node
        for key in ("pretokenizers", "normalizers", "decoders"):
            for child in node.get(key) or ():
                yield from _components(child)


def _has_type(node: Any, kind: str) -> bool:
    return any(c.get("type") == kind for c in _components(node))


def _hf_encoding_json(data: dict[str, Any]) -> str:
    """The tokenizer JSON without anything that adds text or tokens the input lacks.

    Drops the post-processor (BOS/EOS templates), truncation and padding; turns off
    the prefix space of Metaspace/ByteLevel pre-tokenizers; removes ``Prepend``
    normalizers (the ``▁`` sentencepiece puts before the first word).
    """
    data = dict(data)
    data["post_processor"] = None
    data["truncation"] = None
    data["padding"] = None
    pre = json.loads(json.dumps(data.get("pre_tokenizer")))
    for comp in _components(pre):
        if comp.get("type") == "Metaspace":
            comp["prepend_scheme"] = "never"
            if "add_prefix_space" in comp:
                comp["add_prefix_space"] = False
        elif comp.get("type") == "ByteLevel":
            comp["add_prefix_space"] = False
    data["pre_tokenizer"] = pre
    norm = json.loads(json.dumps(data.get("normalizer")))
    if isinstance(norm, dict):
        if norm.get("type") == "Prepend":
            norm = None
        else:
            for comp in _components(norm):
                if "normalizers" in comp:
                    comp["normalizers"] = [
                        c for c in comp["normalizers"] if c.get("type") != "Prepend"
                    ]
    data["normalizer"] = norm
    return json.dumps(data)


class BpeMerges:
    """A Hugging Face BPE model (``tokenizer.json``) as :class:`toolkit.core.bpe.BpeTable`
    runs it in C, read by :func:`hf_merges`:

    * ``split``: how the text is cut into pieces before merging: ``"none"`` (one piece:
      sentencepiece's ``Metaspace`` with ``split: false``, or a ``Replace`` normalizer),
      ``"space"`` (a piece starts at each space: ``Metaspace`` with ``split: true``) or
      ``"pattern"`` (the matches of ``pattern``: a ``Split`` then ``ByteLevel``);
    * ``unit``: a piece's first symbols, ``"char"`` (each code point's token, else its
      bytes' ``<0xXX>`` tokens: ``byte_fallback``) or ``"byte"`` (ByteLevel);
    * ``ids``, ``blob``, ``offsets``: the model's tokens by their bytes (a space for
      ``▁``), byte-fallback tokens left out (they are in ``fallback``, by byte, -1 none);
    * ``merges``: int32 rows (left id, right id, merged id) in rank order;
    * ``ignore_merges``: a piece that is a token is that token, unmerged;
    * ``nfc``: the text is NFC-normalized first (Qwen2's): the C tokenizer answers only
      for text below U+0300, where NFC changes nothing."""

    __slots__ = ("split", "pattern", "unit", "ids", "blob", "offsets", "merges", "fallback", "ignore_merges", "nfc")

    def __init__(self, split: str, pattern: str | None, unit: str, pieces: Mapping[bytes, int],
                 merges: npt.NDArray[np.int32], fallback: npt.NDArray[np.int32], ignore_merges: bool,
                 nfc: bool = False) -> None:
        self.split, self.pattern, self.unit, self.ignore_merges, self.nfc = split, pattern, unit, ignore_merges, nfc
        self.ids = np.fromiter(pieces.values(), dtype=np.int32, count=len(pieces))
        self.blob = b"".join(pieces)
        self.offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in pieces], out=self.offsets[1:])
        self.merges = merges
        self.fallback = fallback


def _pure(node: Any, allowed: Mapping[str, Any]) -> bool:
    """Whether the component ``node`` has only the keys of ``allowed`` besides ``type``, each
    at one of its values (a tuple of values, or ``...`` for any)."""
    return isinstance(node, dict) and all(
        k == "type" or (k in allowed and (allowed[k] is ... or v in allowed[k])) for k, v in node.items()
    )


def hf_merges(data: Any, piece_bytes: Callable[[str], bytes], pieces: Mapping[str, int]) -> BpeMerges | None:
    """The C tokenizer's form of a ``tokenizer.json``'s BPE model (:class:`BpeMerges`), or
    ``None`` where its tokenizer does something that form does not (the Python encoder is
    then the only one): a normalizer other than sentencepiece's space ``Replace``, a
    pre-tokenizer other than ``Metaspace`` or a ``Split`` then ``ByteLevel``, added tokens
    that are not special, dropout, word prefixes or suffixes, a merge of unknown pieces,
    two tokens with the same bytes.  Read: no normalizer, or ``NFC``;
    ``Metaspace``; a ``Replace`` of spaces by ``▁`` (sentencepiece's, with its ``Prepend``);
    a ``Split`` on a pattern then ``ByteLevel``; ``ByteLevel`` with its own regex (GPT-2's)."""
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or model.get("dropout") not in (None, 0, 0.0):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if any(not t.get("special") for t in data.get("added_tokens") or []):
        return None  # the added vocabulary would cut them out of the text first
    norm, pre = data.get("normalizer"), data.get("pre_tokenizer")
    norms = [c for c in _components(norm) if c.get("type") != "Sequence"] if norm else []
    norms = [c for c in norms if c.get("type") != "Prepend"]  # dropped for encoding (_hf_encoding_json)
    pattern: str | None = None
    space = {"type": "Replace", "pattern": {"String": " "}, "content": _SP_SPACE}
    nfc = norms == [{"type": "NFC"}]
    if nfc:
        norms = []
    if norms == [space] and pre is None:
        split, unit = "none", "char"
    elif not norms and _pure(pre, {"replacement": (_SP_SPACE,), "prepend_scheme": ...,
                                   "add_prefix_space": ..., "split": (True, False), "str_rep": ...}) \
            and pre.get("type") == "Metaspace":
        split, unit = ("space" if pre.get("split", True) else "none"), "char"
    elif not norms and isinstance(pre, dict) and pre.get("type") == "Sequence" and len(pre.get("pretokenizers") or ()) == 2:
        cut, level = pre["pretokenizers"]
        if not (cut.get("type") == "Split" and _pure(cut, {"pattern": ..., "behavior": ("Isolated",), "invert": (False,)})
                and level.get("type") == "ByteLevel" and level.get("use_regex") is False):
            return None
        pattern = (cut.get("pattern") or {}).get("Regex")
        if not isinstance(pattern, str):
            return None
        split, unit = "pattern", "byte"
    elif not norms and isinstance(pre, dict) and pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        split, unit, pattern = "pattern", "byte", GPT2_PATTERN
    else:
        return None
    fallback = np.full(256, -1, dtype=np.int32)
    table: dict[bytes, int] = {}
    for piece, i in pieces.items():
        if model.get("byte_fallback") and (m := _BYTE_FALLBACK.fullmatch(piece)):
            fallback[int(m.group(1), 16)] = i
            continue
        b = piece_bytes(piece)
        if table.setdefault(b, i) != i:
            return None
    ranked: dict[tuple[int, int], tuple[int, int]] = {}  # (left, right) -> (rank, merged): the last rank wins
    for rank, merge in enumerate(model.get("merges") or []):
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        left, right, both = pieces.get(a), pieces.get(b), pieces.get(a + b)
        if left is None or right is None or both is None:
            return None
        ranked[left, right] = (rank, both)
    rows = sorted(ranked.items(), key=lambda kv: kv[1][0])
    merges = np.array([(lr[0], lr[1], rb[1]) for lr, rb in rows], dtype=np.int32).reshape(-1, 3)
    return BpeMerges(split, pattern, unit, table, merges, fallback, bool(model.get("ignore_merges")), nfc)


def _hf_eos_names(path: Path) -> list[str] | None:
    """The ``eos_token`` of ``tokenizer_config.json`` beside ``path``, if it names one."""
    config = path.with_name("tokenizer_config.json")
    if not config.is_file():
        return None
    try:
        eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
    except (OSError, ValueError) as exc:
        raise VocabError(f"cannot read {str(config)!r}: {exc}") from exc
    if isinstance(eos, dict):
        eos = eos.get("content")
    return [eos] if isinstance(eos, str) and eos else None


def _load_hf(path: Path) -> Vocabulary:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VocabError(f"cannot read Hugging Face tokenizer {str(path)!r}: {exc}") from exc
    name = f"hf:{path.parent.name}" if path.name == "tokenizer.json" else f"hf:{path.stem}"
    return _hf_vocab(data, repr(str(path)), name, _hf_eos_names(path))


def _hf_vocab(data: Any, where: str, name: str, eos_names: list[str] | None) -> Vocabulary:
    """A vocabulary from a ``tokenizer.json``'s content (``where`` names it in errors;
    ``eos_names``: the EOS tokens' text, None for the usual names)."""
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") not in ("BPE", "Unigram"):
        kind = model.get("type") if isinstance(model, dict) else None
        raise VocabError(
            f"{where}: unsupported tokenizer model {kind!r} (expected a BPE or Unigram tokenizer.json)"
        )

    if model["type"] == "BPE":
        pieces: dict[str, int] = dict(model.get("vocab") or {})
    else:
        pieces = {entry[0]: i for i, entry in enumerate(model.get("vocab") or [])}
    added = data.get("added_tokens") or []
    ids = [*pieces.values(), *(int(t["id"]) for t in added)]
    if not ids or min(ids) < 0:
        raise VocabError(f"{where}: no token ids, or a negative one")
    n = max(ids) + 1

    byte_level = _has_type(data.get("pre_tokenizer"), "ByteLevel") or _has_type(
        data.get("decoder"), "ByteLevel"
    )
    sp_space = not byte_level and _SP_SPACE in json.dumps(
        [data.get("normalizer"), data.get("pre_tokenizer"), data.get("decoder")], ensure_ascii=False
    )
    byte_fallback = bool(model.get("byte_fallback"))
    alphabet = byte_level_alphabet() if byte_level else {}

    def piece_bytes(piece: str) -> bytes:
        if byte_fallback and (m := _BYTE_FALLBACK.fullmatch(piece)):
            return bytes([int(m.group(1), 16)])
        if byte_level:
            try:
                return bytes(alphabet[c] for c in piece)
            except KeyError:  # outside the alphabet: the ByteLevel decoder keeps it as UTF-8
                return piece.encode("utf-8")
        return (piece.replace(_SP_SPACE, " ") if sp_space else piece).encode("utf-8")

    entries = [b""] * n
    for piece, i in pieces.items():
        entries[i] = piece_bytes(piece)
    specials: dict[int, str] = {}
    by_content: dict[str, int] = {}
    for tok in added:
        i, content = int(tok["id"]), str(tok["content"])
        by_content.setdefault(content, i)
        if tok.get("special"):
            specials[i] = content
            entries[i] = b""
        else:
            entries[i] = content.encode("utf-8")

    lookup = {**pieces, **by_content}
    if eos_names is None:
        eos_names = [s for s in _HF_EOS_FALLBACKS if s in lookup][:1]
    for s in eos_names:
        if s not in lookup:
            raise VocabError(
                f"{where}: eos_token {s!r} is not a token"
            )
    eos_ids = tuple(lookup[s] for s in eos_names)
    for i, s in zip(eos_ids, eos_names, strict=True):
        specials.setdefault(i, s)
        entries[i] = b""

    def build() -> Encoder:
        tok = _tokenizer_class().from_str(_hf_encoding_json(data))
        tok.encode_special_tokens = True  # special names in text are plain text

        def encode(text: str) -> list[int]:
            return tok.encode(text, add_special_tokens=False).ids

        return encode

    merges = hf_merges(data, piece_bytes, pieces) if model["type"] == "BPE" else None
    return Vocabulary(name, entries, special_tokens=specials, eos_ids=eos_ids, encoder=_lazy(build),
                      bpe_merges=merges)
