"""``peer:llama.cpp``: llama.cpp's grammar sampler, through llama-cpp-python, as a mask engine.

llama.cpp constrains sampling with a *grammar sampler* (``llama_sampler_init_grammar``
over GBNF text): ``llama_sampler_apply`` sets the logit of every candidate token the
grammar refuses to ``-inf``, ``llama_sampler_accept`` advances the grammar by a token.
This adapter calls those functions through llama-cpp-python's ctypes bindings
(``llama_cpp.llama_cpp``), with no model weights:

* **Vocabulary.**  The grammar sampler reads token *pieces* from a ``llama_vocab``, which
  llama.cpp loads from a model file; :func:`toolkit.core.gguf.vocab_gguf` writes the
  :class:`~toolkit.core.vocab.Vocabulary` as a vocabulary-only GGUF file (cached per
  vocabulary) that is opened with ``vocab_only=True``.  The first time a version of
  llama-cpp-python loads a file, the adapter checks that every text token's piece is
  exactly its bytes and that llama.cpp takes none of them for an end-of-generation token
  (a ``.checked-<version>`` file beside it says it was done).
* **Masks.**  A candidate array of every id (logit 0, the ``llama_token_data_array``
  llama-cpp-python's ``LlamaTokenDataArray`` makes), ``llama_sampler_apply``, then the
  ids whose logit is still finite are the allowed ones, packed into the row (numpy).  The
  arrays are made once per engine and thread.
* **Inputs.**  GBNF text (``GbnfText``) as it is; a JSON schema through llama-cpp-python's
  own converter, ``LlamaGrammar.from_json_schema`` (which calls
  ``llama_cpp.llama_grammar.json_schema_to_gbnf``, the Python port of llama.cpp's
  ``json-schema-to-grammar``), the way llama-cpp-python users constrain to a schema; a
  toolkit :class:`~toolkit.grammar.Grammar` through :func:`toolkit.grammar.gbnf.write_gbnf`.
* **Accept.**  llama.cpp throws (an uncaught C++ exception: the process aborts) when a
  token leaves no grammar stack, and aborts on an end-of-generation token the grammar
  does not allow, so no token reaches ``llama_sampler_accept`` before llama.cpp's verdict
  on it: the bit of the last mask when that mask was made in the current state (a
  server's sampled token, :meth:`accept_allowed`: a bit test, then the accept as a
  server calls it), else ``llama_sampler_apply`` on a one-candidate array (the same
  verdict as the full mask: candidates are judged one by one).  A wrong caller thus gets
  False, never an abort.  EOS never reaches llama.cpp: the protocol handles it.
* **Rollback and fork.**  llama.cpp's grammar has no undo; ``llama_sampler_clone`` copies
  one.  A matcher keeps a clone every :data:`CHECKPOINT_EVERY` tokens (shared, never
  advanced), so ``rollback`` clones the last checkpoint at or before the target and
  replays the tokens after it; ``fork`` clones the current sampler; ``reset`` clones the
  compiled one.
* **Accepting.**  llama.cpp allows end-of-generation when one of its grammar stacks is
  empty: the logit of the vocabulary's EOS (llama.cpp's EOS in the GGUF file) after
  ``apply`` says whether the input is complete.
* **Logging.**  llama.cpp's log goes to a callback of this module that drops it, except
  while a grammar is being compiled, when it is kept (with what the GBNF parser prints
  to ``stderr`` itself) to become the :class:`PeerError` of a grammar llama.cpp refuses.

Where llama.cpp's masks differ from the Grammar's language (``tests/test_peer_llamacpp.py``
asserts each): it matches code points, not bytes, and judges a token that ends inside a
UTF-8 character by the *range* of characters it could become, so (1) bytes that are
never UTF-8 (``\\xf5``-``\\xff``, code points past U+10FFFF) and prefixes of surrogates or
of overlong 4-byte forms can be allowed where a negated class (``[^"]``) or ``.`` follows
(lone continuation bytes and overlong 2-byte leads are refused, as in the Grammar);
(2) a partial character can be refused where a negated class excludes some character of
its range; (3) a token whose bytes start with NUL is never allowed, and a NUL inside a
token ends the token for the grammar; (4) EOS is allowed while a partial character is
pending when another stack is complete.

A JSON schema's language is the converter's own (``schema_grammar = "own"``): one optional
space after each value and punctuation (and after the root value) and none before it;
raw control characters and non-UTF-8 bytes inside strings; keys, enum and const strings
as literals (no escaped spelling); integer bounds and most formats (email, uri,
hostname) not written; at most 16 digits in an integer part; no leading zero in an
exponent.  It refuses patterns without ``^...$`` anchors and the ``$ref``s inside the
definitions of a root ``$ref`` (a ``PeerError`` with the converter's exception).
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from types import MappingProxyType
from typing import Any

import numpy as np

from strategies._base import EOS_RECORD
from strategies.declared import BUILT_IN
from strategies.peers import PeerCompiled, PeerEngine, PeerError, PeerMatcher
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.gguf import gguf_tokens, vocab_gguf, vocab_key
from toolkit.core.protocol import check_count
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

__all__ = ["LlamaCppEngine", "LlamaCppMatcher", "CHECKPOINT_EVERY"]

CHECKPOINT_EVERY = 32
"""Accepted tokens between two clones a matcher keeps for ``rollback`` (a rollback replays
fewer than this many tokens from the last clone before its target)."""

ROOT = "root"
"""The start symbol of the GBNF texts given to llama.cpp (its own default)."""

# ------------------------------------------------------------------ logging --

_log_lock = threading.Lock()
_log_sink: list[str] | None = None  # where llama.cpp's log goes while a grammar compiles
_log_callback: Any = None  # the ctypes callback, kept alive for as long as llama.cpp may call it


def _on_log(level: int, text: bytes | None, user_data: Any) -> None:
    sink = _log_sink
    if sink is not None and text:
        sink.append(text.decode("utf-8", "replace"))


def _silence(lib: Any) -> None:
    """Send llama.cpp's (and ggml's) log to :func:`_on_log` (importing ``llama_cpp`` sets a
    callback that prints to ``stderr``)."""
    global _log_callback
    if _log_callback is None:
        _log_callback = lib.llama_log_callback(_on_log)
    lib.llama_log_set(_log_callback, ctypes.c_void_p(0))


@contextmanager
def _captured() -> Iterator[list[str]]:
    """Collect llama.cpp's log and what native code writes to file descriptor 2 (the GBNF
    parser's errors are ``fprintf(stderr, ...)``) while the block runs."""
    global _log_sink
    out: list[str] = []
    with _log_lock, tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        _log_sink = out
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            _log_sink = None
            tmp.seek(0)
            printed = tmp.read().decode("utf-8", "replace")
            if printed:
                out.insert(0, printed)


def _grammar_message(printed: list[str], source: str) -> str:
    """llama.cpp's words for a refused grammar, without the copy of the whole grammar the
    parser prints after them, with the line and column where the parser stopped."""
    text = "".join(printed).strip()
    head = re.search(r"error parsing grammar: (.*)", text, re.S)
    if head is None:  # not the parser's error: the log lines (left recursion, missing root...)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "failed to parse grammar" not in ln]
        return "; ".join(lines) or "llama.cpp refused the grammar"
    body = head.group(1)
    cut = body.rfind("\n\n" + source) if source else -1
    if cut >= 0:
        body = body[:cut]
    where = ""
    at = body.find(" at ")
    if at >= 0:
        rest = body[at + 4:]
        if rest and source.endswith(rest):
            offset = len(source) - len(rest)
            line = source.count("\n", 0, offset) + 1
            column = offset - (source.rfind("\n", 0, offset) + 1) + 1
            where = f" (line {line}, column {column})"
            body = body[:at] + f" at {rest[:40]!r}"
    return body.strip() + where


# ------------------------------------------------------------ native handles --


class _Model:
    """A vocabulary-only ``llama_model`` (freed with the last object that needs it)."""

    def __init__(self, lib: Any, path: str) -> None:
        self._free = lib.llama_model_free  # (the function itself: alive at interpreter exit)
        params = lib.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        with _captured() as log:
            ptr = lib.llama_model_load_from_file(path.encode(), params)
        if not ptr:
            raise PeerError(f"peer:llama.cpp: cannot load the vocabulary {path}: {' '.join(''.join(log).split())}")
        self.ptr = ptr
        self.vocab = lib.llama_model_get_vocab(ptr)
        self.n_tokens = int(lib.llama_vocab_n_tokens(self.vocab))
        self.eos = int(lib.llama_vocab_eos(self.vocab))

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            self._free(ptr)


class _Sampler:
    """A grammar sampler (``llama_sampler *``), freed when dropped; it holds the model
    whose vocabulary it reads."""

    __slots__ = ("ptr", "_lib", "_free", "_model")

    def __init__(self, ptr: Any, lib: Any, model: _Model) -> None:
        self.ptr = ptr
        self._lib = lib
        self._free = lib.llama_sampler_free  # (the function itself: alive at interpreter exit)
        self._model = model

    def clone(self) -> _Sampler:
        ptr = self._lib.llama_sampler_clone(self.ptr)
        if not ptr:  # pragma: no cover - llama.cpp asserts instead
            raise PeerError("peer:llama.cpp: llama_sampler_clone failed")
        return _Sampler(ptr, self._lib, self._model)

    def __del__(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr:
            self._free(ptr)


_CANDIDATE = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class _Buffers:
    """One thread's candidate arrays: every id (the mask) and one id (a token's check)."""

    def __init__(self, lib: Any, n: int, size: int, words: int) -> None:
        self.data = np.zeros(n, dtype=_CANDIDATE)
        self.data["id"] = np.arange(n, dtype=np.intc)
        self.logit = self.data["logit"]
        self.array = lib.llama_token_data_array(
            data=self.data.ctypes.data_as(lib.llama_token_data_p), size=n, selected=-1, sorted=False)
        self.ptr = ctypes.pointer(self.array)
        self.n = n
        self.one = np.zeros(1, dtype=_CANDIDATE)
        self.one_array = lib.llama_token_data_array(
            data=self.one.ctypes.data_as(lib.llama_token_data_p), size=1, selected=-1, sorted=False)
        self.one_ptr = ctypes.pointer(self.one_array)
        self.allowed = np.zeros(words * 32, dtype=np.bool_)  # bits past ``size`` stay False
        self.size = size

    def reset(self) -> None:
        """Every candidate back at logit 0 (as ``copy_logits`` of zero logits)."""
        self.logit[:] = 0.0
        self.array.size = self.n
        self.array.sorted = False
        self.array.selected = -1


# ------------------------------------------------------------------- engine --

_MODELS: dict[str, _Model] = {}  # GGUF path -> the model loaded (and checked) in this process
_MODELS_LOCK = threading.Lock()


class LlamaCppEngine(PeerEngine):
    """``peer:llama.cpp`` (see the module doc).

    Options: ``cache_dir``: where the vocabulary's GGUF file is kept (default
    :func:`toolkit.core.gguf.gguf_cache_dir`, ``~/.cache/masklab/gguf``)."""

    name = "peer:llama.cpp"
    capabilities = BUILT_IN["peer:llama.cpp"].capabilities
    dist = "llama_cpp_python"
    requires = BUILT_IN["peer:llama.cpp"].requires
    native_inputs = frozenset({"json_schema", "gbnf"})
    #: what llama-cpp-python 0.3.36's converter (``SchemaConverter.visit`` in
    #: ``llama_cpp/llama_grammar.py``) reads past without a word: the keyword branches it
    #: has (``$ref``, anyOf/oneOf, const, enum, properties, allOf of objects, items,
    #: pattern, a few formats, min/maxLength, minItems/maxItems) and nothing else
    unenforced_keywords = MappingProxyType({
        **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
                        "llama.cpp's converter ignores numeric bounds and steps (any number of the type)"),
        "oneOf": "llama.cpp's converter reads oneOf as anyOf (a value matching several branches is allowed)",
        "not": "llama.cpp's converter ignores not",
        **dict.fromkeys(("if", "then", "else"), "llama.cpp's converter ignores if/then/else"),
        "uniqueItems": "llama.cpp's converter ignores uniqueItems (repeated items allowed)",
        **dict.fromkeys(("contains", "minContains", "maxContains"), "llama.cpp's converter ignores contains"),
        "propertyNames": "llama.cpp's converter ignores propertyNames",
        "patternProperties": "llama.cpp's converter ignores patternProperties (their values unchecked)",
        **dict.fromkeys(("minProperties", "maxProperties"), "llama.cpp's converter ignores member counts"),
        **dict.fromkeys(("dependencies", "dependentRequired", "dependentSchemas"),
                        "llama.cpp's converter ignores dependencies"),
        "additionalItems": "llama.cpp's converter closes a tuple after its items (additionalItems ignored)",
        "allOf": "llama.cpp's converter merges only the properties of allOf's object branches (their other "
                 "keywords, and allOf outside objects, ignored)",
    })

    def __init__(self, vocab: Vocabulary, *, cache_dir: str | None = None) -> None:
        import llama_cpp.llama_cpp as lib

        super().__init__(vocab)
        self._lib = lib
        _silence(lib)
        if cache_dir is not None:
            self.options = {"cache_dir": str(cache_dir)}
        path = str(vocab_gguf(vocab, cache_dir))
        self.gguf_path = path
        self.model = self._load(path)
        self.eos = self.model.eos  # llama.cpp's EOS: the vocabulary's first EOS id (or the one added)
        self.words = self.text_words.shape[0]
        self._local = threading.local()

    def _load(self, path: str) -> _Model:
        with _MODELS_LOCK:
            model = _MODELS.get(path)
            if model is None:
                model = _Model(self._lib, path)
                checked = Path(f"{path}.checked-{self.version}")  # checked by this llama.cpp before
                if not checked.is_file():
                    self._check_vocab(model)
                    try:
                        checked.touch()
                    except OSError:  # a read-only cache: checked again next time
                        pass
                _MODELS[path] = model
        return model

    def _check_vocab(self, model: _Model) -> None:
        """llama.cpp read the vocabulary as written: the token count, the EOS id, each text
        token's piece its bytes, no text token end-of-generation, no piece for padding."""
        lib, vocab = self._lib, self.vocab
        texts, _, eos = gguf_tokens(vocab)
        where = f"peer:llama.cpp: vocabulary {vocab.name} (GGUF {vocab_key(vocab)})"
        if model.n_tokens != len(texts) or model.eos != eos:
            raise PeerError(f"{where}: llama.cpp reads {model.n_tokens} tokens and EOS {model.eos}, "
                            f"written {len(texts)} and {eos}")
        v, tb, text = model.vocab, vocab.token_bytes, vocab.text_token_mask()
        room = max(map(len, tb), default=0) + max(map(len, vocab.special_tokens.values()), default=0) + 64
        buf = ctypes.create_string_buffer(room)
        piece, is_eog = lib.llama_token_to_piece, lib.llama_vocab_is_eog
        for i in range(vocab.size):
            n = piece(v, i, buf, room, 0, True)
            got = buf.raw[:n] if n >= 0 else None
            if text[i]:
                if got != tb[i] or is_eog(v, i):
                    raise PeerError(f"{where}: llama.cpp reads token {i} ({tb[i]!r}) as {got!r}"
                                    + (" and ends generation on it" if got == tb[i] else ""))
            elif i >= vocab.n_defined and got:
                raise PeerError(f"{where}: padding id {i} has the piece {got!r} in llama.cpp")

    def _buffers(self) -> _Buffers:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = _Buffers(self._lib, self.model.n_tokens, self.vocab.size, self.words)
        return buf

    # ---------------------------------------------------------------- compile --

    def _init(self, gbnf: str, root: str = ROOT) -> _Sampler:
        """``llama_sampler_init_grammar``; a grammar llama.cpp refuses is a PeerError with
        its message."""
        if not gbnf.strip():
            raise PeerError(f"{self.name}: empty grammar (llama.cpp would constrain nothing)")
        lib = self._lib
        with _captured() as printed:
            ptr = lib.llama_sampler_init_grammar(self.model.vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not ptr:
            raise PeerError(f"{self.name}: {_grammar_message(printed, gbnf)}")
        return _Sampler(ptr, lib, self.model)

    def _schema_gbnf(self, text: str) -> tuple[str, str]:
        """llama-cpp-python's own conversion of a JSON schema: ``(gbnf, root)``."""
        from llama_cpp.llama_grammar import LlamaGrammar

        g = LlamaGrammar.from_json_schema(text, verbose=False)
        return g._grammar, g._root

    def _compile_schema(self, text: str) -> PeerCompiled:
        t0 = perf_counter()
        gbnf, root = self._schema_gbnf(text)
        handle = self._init(gbnf, root)
        return PeerCompiled(handle, gbnf, "json_schema", engine_s=perf_counter() - t0)

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        if fmt != "gbnf":
            raise UnsupportedGrammar(f"{self.name} reads no {fmt} text itself")
        t0 = perf_counter()
        handle = self._init(text)
        return PeerCompiled(handle, text, "gbnf", engine_s=perf_counter() - t0)

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        return grammar.to_gbnf(), "gbnf"

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        gbnf, kind = self._grammar_source(grammar)
        t0 = perf_counter()
        handle = self._init(gbnf)
        return PeerCompiled(handle, gbnf, kind, engine_s=perf_counter() - t0)

    def matcher(self, compiled: PeerCompiled) -> LlamaCppMatcher:
        t0 = perf_counter()
        sampler = compiled.handle.clone()
        out = LlamaCppMatcher(self, compiled, sampler, [(0, compiled.handle)], 0)
        out.engine_s = perf_counter() - t0
        return out

    # ------------------------------------------------- the engine called directly --

    def _schema_source(self, text: str) -> str:
        # the schema itself: llama-cpp-python's conversion to GBNF is part of its compile
        # (timed in _direct_compile, as in _compile_schema)
        return text

    def _direct_compile(self, source: str, kind: str) -> Any:
        if kind == "json_schema":
            from llama_cpp.llama_grammar import LlamaGrammar

            g = LlamaGrammar.from_json_schema(source, verbose=False)
            source, root = g._grammar, g._root
        else:
            root = ROOT
        ptr = self._lib.llama_sampler_init_grammar(self.model.vocab, source.encode("utf-8"), root.encode("utf-8"))
        if not ptr:
            raise PeerError(f"{self.name}: llama.cpp refused the grammar")
        return _Sampler(ptr, self._lib, self.model)

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # as llama-cpp-python's low-level sampling: a LlamaTokenDataArray over the whole
        # vocabulary, copy_logits, llama_sampler_apply, then llama_sampler_accept
        from llama_cpp._internals import LlamaTokenDataArray

        lib = self._lib
        cands = LlamaTokenDataArray(n_vocab=self.model.n_tokens)
        logits = np.zeros(self.model.n_tokens, dtype=np.single)
        ref = ctypes.byref(cands.candidates)
        apply, accept = lib.llama_sampler_apply, lib.llama_sampler_accept
        first = [handle]  # the compiled sampler serves the first mask (TTFM); walks get clones
        kept: list[_Sampler] = []

        def new_matcher() -> Any:
            s = first.pop() if first else handle.clone()
            kept[:] = [s]  # alive while it is walked
            return s.ptr

        def step(g: Any, t: int | None) -> bool:
            cands.copy_logits(logits)
            apply(g, ref)
            if t is None:
                return True
            if not np.isfinite(cands.candidates_data.logit[t]):
                return False  # llama.cpp would throw (abort) on a refused token
            accept(g, t)
            return True

        return new_matcher, step


# ------------------------------------------------------------------ matcher --


class LlamaCppMatcher(PeerMatcher):
    """A grammar sampler of its own (see the module doc: masks, accept, rollback)."""

    def __init__(self, engine: LlamaCppEngine, compiled: PeerCompiled, sampler: _Sampler,
                 checkpoints: list[tuple[int, _Sampler]], count: int) -> None:
        super().__init__(engine, compiled)
        self.engine: LlamaCppEngine = engine
        self.s = sampler
        self._checkpoints = checkpoints  # (tokens accepted, a clone never advanced), first (0, compiled)
        self._count = count  # text tokens llama.cpp has accepted
        self._acc: bool | None = None  # whether llama.cpp allows EOS now (None: not asked yet)
        self._version = 0  # bumped at every change of the sampler's state
        self._mask: np.ndarray | None = None  # the packed bits of the last fill...
        self._mask_version = -1  # ... made at this version

    def _fill_native(self, row: np.ndarray) -> None:
        eng = self.engine
        buf = eng._buffers()
        buf.reset()
        apply, s, ptr = eng._lib.llama_sampler_apply, self.s.ptr, buf.ptr
        t0 = perf_counter()
        apply(s, ptr)
        self.engine_s += perf_counter() - t0
        logit, allowed, size = buf.logit, buf.allowed, buf.size
        np.isfinite(logit[:size], out=allowed[:size])
        packed = np.packbits(allowed, bitorder="little")
        row[:] = packed.view("<i4")
        self._mask, self._mask_version = packed, self._version
        self._acc = bool(np.isfinite(logit[eng.eos]))

    def _allows(self, token_id: int) -> bool:
        """llama.cpp's verdict on one token (apply on a one-candidate array)."""
        eng = self.engine
        buf = eng._buffers()
        buf.one[0] = (token_id, 0.0, 0.0)
        buf.one_array.size = 1
        apply, s, ptr = eng._lib.llama_sampler_apply, self.s.ptr, buf.one_ptr
        t0 = perf_counter()
        apply(s, ptr)
        self.engine_s += perf_counter() - t0
        return bool(np.isfinite(buf.one[0]["logit"]))

    def _advance(self, token_id: int, data: bytes) -> Any:
        # llama.cpp aborts on a token it refuses, so its verdict comes first: the last
        # mask's bit when it was made in this state (a server's sampled token: free),
        # else a one-candidate apply
        if self._mask_version == self._version:
            ok = bool((int(self._mask[token_id >> 3]) >> (token_id & 7)) & 1)
        else:
            ok = self._allows(token_id)
        if not ok:
            return None
        accept, s = self.engine._lib.llama_sampler_accept, self.s.ptr
        t0 = perf_counter()
        accept(s, token_id)
        self.engine_s += perf_counter() - t0
        self._count += 1
        self._version += 1
        self._acc = None
        if self._count % CHECKPOINT_EVERY == 0:
            self._checkpoints.append((self._count, self.s.clone()))
        return True

    def _undo(self, record: Any) -> None:
        pass  # rollback() restores the sampler once, after the bookkeeping

    def rollback(self, n: int) -> None:
        super().rollback(check_count(n))
        count = sum(1 for r in self._history if r is not EOS_RECORD)
        if count == self._count:
            return
        cps = self._checkpoints
        while cps[-1][0] > count:
            cps.pop()
        at, base = cps[-1]
        s = base.clone()
        accept = self.engine._lib.llama_sampler_accept
        for t in self._tokens[at:count]:  # accepted before: llama.cpp takes them again
            accept(s.ptr, t)
        self.s, self._count, self._acc = s, count, None
        self._version += 1

    def _accepting(self) -> bool:
        if self._acc is None:
            self._acc = self._allows(self.engine.eos)
        return self._acc

    def _copy(self) -> LlamaCppMatcher:
        other = LlamaCppMatcher(self.engine, self.compiled, self.s.clone(), list(self._checkpoints), self._count)
        other._acc = self._acc
        return other

    def _reset_state(self) -> None:
        self.s = self.compiled.handle.clone()
        self._checkpoints = [(0, self.compiled.handle)]
        self._count = 0
        self._acc = None
        self._version += 1
