"""Language models for the decoding harness (:mod:`toolkit.decode.generate`).

``load_model(spec, vocab, device=..., dtype=...)`` takes

* a local Hugging Face checkpoint directory (``AutoModelForCausalLM``), or
* ``sim:FORWARD_MS[:LAUNCHES]``: the stand-in device for machines without a GPU
  (:class:`SimModel`); no model runs, see below;
* ``random:NAME``: a known architecture built from its configuration with random
  weights, because nothing can be downloaded here.  Its speed is a real model's
  (same shapes, same kernels); its text is noise, so every output of a run on
  random weights says so (:data:`RANDOM_NOTE`).  ``random:NAME:replay`` writes each
  item's valid instance instead of noise (:class:`Replay`), for jump-forward runs.  Names: ``tiny`` (two small layers
  sized to the vocabulary, for tests on CPU), ``llama-3.2-1b``, ``llama-3-8b`` (the
  published shapes, 128,256 logits) and ``mistral-7b`` (the configuration shipped in
  ``$MASKLAB_SHARED/tokenizers/mistral-7b-v0.3/config.json``, 32,768 logits).

The model's logits must cover exactly the vocabulary's ids (``vocab.size``, padding
included): a mismatch is a :class:`ModelError` naming both sizes, never a silent
truncation.  Needs the ``[model]`` extra (torch, transformers).

``load_chat_template(folder, vocab)`` reads a checkpoint's or tokenizer folder's chat
template (transformers' tokenizer and its ``chat_template``): :meth:`ChatTemplate.ids`
turns a prompt into the ids of one user message followed by the generation prompt,
special tokens included, as a chat model expects them.

``sim:FORWARD_MS[:LAUNCHES]`` (e.g. ``sim:8:300``) reproduces what a GPU's forward pass
leaves to the host: ``forward()`` makes LAUNCHES short Python-level calls (a framework
launching kernels: each needs the GIL, so a thread that holds it delays the step as it
would on a GPU) and returns at once; :meth:`SimModel.synchronize` then waits, holding
neither the GIL nor a core, until FORWARD_MS have passed since the forward pass
started.  Its logits are seeded pseudo-random rows over the vocabulary (a row picked
per sequence from the token fed and the position), on the CPU.  Every output of a
simulated run says so (:data:`SIM_NOTE`).

``lm.synchronize()`` waits for the device's queued work (CUDA, the simulated forward
pass); the decoding harness calls it where a GPU loop synchronizes.

``lm.start(prompts, max_tokens)`` begins a batch (:class:`Decoding`): the prompts'
pass, then one token per sequence per call, with transformers' dynamic KV cache or,
``load_model(..., cache="static")``, a fixed-shape one, optionally with the one-token
steps ``torch.compile``'d (``compile="reduce-overhead"``: CUDA graphs on a GPU).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import shared_dir
from toolkit.decode.replay import REPLAY_NOTE, ModelError, Replay
from toolkit.decode.sim import SIM_NOTE, SimModel, sim_model

__all__ = ["ModelError", "LoadedModel", "Decoding", "load_model", "RANDOM_ARCHS", "RANDOM_NOTE", "CACHES", "COMPILE_MODES",
           "CACHE_BLOCK", "CHUNK_ROOM", "ChatTemplate", "load_chat_template", "SimModel", "SIM_NOTE", "Replay",
           "REPLAY_NOTE", "chunk_width"]

CACHE_BLOCK = 256
"""A static KV cache's length is the batch's prompt plus ``max_tokens``, rounded up to this."""

RECOMPILE_LIMIT = 64
"""Graphs dynamo may make of a compiled forward pass (its default of 8 is one sweep's
batch shapes with jump-forward's chunk steps)."""

CHUNK_ROOM = 16
"""With chunked steps (jump-forward) a static cache has this many columns beyond the
prompt and ``max_tokens`` (then rounded up to :data:`CACHE_BLOCK`, as a plain run's):
a chunk step takes its longest run's columns in every row, and when the cache is full
the columns no row attends to (the shorter runs' pads) are squeezed out
(:meth:`Decoding._make_room`), so a jump run's one-token steps attend over the same
length as a plain run's."""

CACHES = ("dynamic", "static")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

RANDOM_NOTE = "random weights (no checkpoint can be downloaded here): times are a real model's, text is noise"

_LLAMA3 = {"model_type": "llama", "vocab_size": 128256, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "num_attention_heads": 32, "num_key_value_heads": 8, "bos_token_id": 128000, "eos_token_id": 128001}

RANDOM_ARCHS: dict[str, dict[str, Any] | str] = {
    # vocab_size None: sized to the vocabulary (a test model fits any vocabulary)
    "tiny": {"model_type": "llama", "vocab_size": None, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 4096},
    "llama-3.2-1b": {**_LLAMA3, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                     "head_dim": 64, "max_position_embeddings": 131072, "tie_word_embeddings": True},
    "llama-3-8b": {**_LLAMA3, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                   "max_position_embeddings": 8192},
    "mistral-7b": "tokenizers/mistral-7b-v0.3/config.json",  # read from MASKLAB_SHARED
}
"""Architectures ``random:NAME`` builds: a config dict, or a config file under the shared folder."""



@dataclass
class LoadedModel:
    """A causal LM ready to decode: the torch module and what a report needs to say about it."""

    model: Any
    spec: str
    random: bool
    vocab_size: int
    device: str
    dtype: str
    parameters: int
    notes: list[str] = field(default_factory=list)
    cache: str = "dynamic"
    compile: str | None = None
    _takes_keep: bool | None = field(default=None, repr=False)
    _caches: dict[tuple[int, int], Any] = field(default_factory=dict, repr=False)
    _compiled: Any = field(default=None, repr=False)
    _compiled_chunks: Any = field(default=None, repr=False)
    _chunks_compiled: bool = field(default=False, repr=False)  # a compiled chunk step has run
    #: ``random:NAME:replay``: the logits favour each sequence's target text (:class:`Replay`)
    replay: bool = False
    vocab: Any = field(default=None, repr=False)

    def start(self, prompts: list[list[int]], max_tokens: int, chunks: bool = False,
              targets: list[bytes | None] | None = None, lazy: bool = False, refills: bool = False) -> Decoding:
        """A batch's decoding: one prompt (token ids) per sequence, ``max_tokens`` steps
        at most (see :class:`Decoding`); ``chunks``: steps may feed several tokens per
        sequence (:meth:`Decoding.forward_chunks`, jump-forward decoding).  ``targets``
        (``replay`` only): each sequence's text to replay, None for the model's own.
        ``refills``: slots take new sequences (:meth:`Decoding.refill`, continuous
        batching).  ``lazy`` is the stand-in's (:class:`~toolkit.decode.sim.SimModel`);
        a model's logits are tensors."""
        del lazy
        return Decoding(self, prompts, max_tokens, chunks, targets if self.replay else None, refills)

    @property
    def _keep(self) -> bool:
        if self._takes_keep is None:
            self._takes_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        return self._takes_keep

    def _static_cache(self, batch: int, length: int) -> Any:
        """The static KV cache of this shape, emptied (one per shape, reused: a captured
        CUDA graph writes into the same memory every batch)."""
        key = (batch, length)
        cache = self._caches.get(key)
        if cache is None:
            from transformers import StaticCache

            cache = self._caches[key] = StaticCache(config=self.model.config, max_cache_len=length)
        else:
            import torch

            with torch.inference_mode():  # its tensors were made in the loop's inference mode
                cache.reset()
        return cache

    def _decode_fn(self) -> Any:
        """The forward pass of the one-token steps: the model's, or torch.compile'd."""
        if self.compile is None:
            return self.model
        if self._compiled is None:
            import torch

            _raise_recompile_limit()
            self._compiled = torch.compile(self.model.forward, mode=self.compile, dynamic=False, fullgraph=True)
        return self._compiled

    def _chunk_fn(self) -> Any:
        """The forward pass of the chunk steps (jump-forward): the model's, or
        torch.compile'd once per batch shape with the run's width dynamic (with
        ``reduce-overhead`` a CUDA graph is recorded per width, which
        :meth:`Decoding.forward_chunks` rounds up to a power of two), as a serving
        engine runs its few-token steps in graphs too."""
        if self.compile is None:
            return self.model
        if self._compiled_chunks is None:
            import torch

            _raise_recompile_limit()
            self._compiled_chunks = torch.compile(self.model.forward, mode=self.compile, dynamic=None,
                                                  fullgraph=True)
        return self._compiled_chunks

    @property
    def bos_id(self) -> int | None:
        """The id the model's configuration starts a text with (None: none)."""
        bos = getattr(self.model.config, "bos_token_id", None)
        if isinstance(bos, (list, tuple)):
            bos = bos[0] if bos else None
        return int(bos) if bos is not None and 0 <= int(bos) < self.vocab_size else None

    @property
    def max_positions(self) -> int | None:
        """The longest sequence (prompt and output) the model's positions cover."""
        n = getattr(self.model.config, "max_position_embeddings", None)
        return int(n) if n else None

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on the CPU)."""
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "random_weights": self.random, "vocab_size": self.vocab_size,
                "device": self.device, "dtype": self.dtype, "parameters": self.parameters,
                "cache": self.cache, "compile": self.compile, "replay": self.replay, "notes": list(self.notes)}


def _raise_recompile_limit() -> None:
    """A compiled step has a graph per batch shape (and the chunk steps theirs): room
    for a sweep's shapes before dynamo would fall back to eager."""
    import torch._dynamo as dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo.config, name):
            setattr(dynamo.config, name, max(getattr(dynamo.config, name), RECOMPILE_LIMIT))
            return


def chunk_width(width: int) -> int:
    """The width a compiled chunk step pads a run of ``width`` tokens to: the next power
    of two (few shapes, so few CUDA graphs)."""
    return 1 << max(width - 1, 0).bit_length()


class Decoding:
    """One batch being decoded: ``forward()`` runs the prompts (the first pass), then
    ``forward(tokens)`` one token per sequence; each returns the last position's logits,
    ``(B, V)``, contiguous, owned by the caller until the next call.

    Prompts of different lengths are left-padded (id 0) under an attention mask, with
    position ids counted from each sequence's first real token, so every row decodes
    as it would alone.  With the model's ``cache="static"`` the KV cache has a fixed
    length (prompt + ``max_tokens``, rounded up to :data:`CACHE_BLOCK` so batches share
    shapes) and the attention mask is allocated at that length once: every one-token
    step has the same shapes, which is what ``compile`` (``torch.compile``; CUDA graphs
    with ``reduce-overhead``) needs.  Only the last position's logits are computed when
    the model takes ``logits_to_keep`` (transformers' Llama, Mistral and most others).
    """

    def __init__(self, lm: LoadedModel, prompts: list[list[int]], max_tokens: int, chunks: bool = False,
                 targets: list[bytes | None] | None = None, refills: bool = False) -> None:
        import torch

        if not prompts or not all(prompts):
            raise ModelError("every sequence needs a prompt of at least one token")
        self.replay = Replay(lm.vocab, targets, len(prompts)) if targets is not None else None
        with torch.inference_mode():  # whatever the caller's mode: a compiled step guards on it
            self._setup(lm, prompts, max_tokens, chunks, refills)

    def _setup(self, lm: LoadedModel, prompts: list[list[int]], max_tokens: int, chunks: bool,
               refills: bool) -> None:
        import torch

        self.lm = lm
        self.batch = len(prompts)
        n = self.prompt_len = max(len(p) for p in prompts)
        dev = lm.device
        self.ids = torch.tensor([[0] * (n - len(p)) + p for p in prompts], dtype=torch.long, device=dev)
        # chunks of different lengths are left-padded inside the step: the mask has holes
        # (and a continuous batch's refilled rows start at other columns than the rest)
        padded = chunks or refills or any(len(p) != n for p in prompts)
        # a chunk step takes as many positions as its longest chunk, for every row: a little
        # room beyond, and the pads squeezed out when it fills (_make_room)
        room = max_tokens + (CHUNK_ROOM if chunks else 0)
        self.cache_len = -(-(n + room) // CACHE_BLOCK) * CACHE_BLOCK if lm.cache == "static" else 0
        width = self.cache_len or n  # a dynamic cache's mask grows by a column per step
        self.attn = self.pos = None
        if padded:
            self.attn = torch.ones((self.batch, width), dtype=torch.long, device=dev)
            for row, p in enumerate(prompts):
                self.attn[row, : n - len(p)] = 0
            self.pos = (self.attn[:, :n].cumsum(-1) - 1).clamp(min=0)
        self.past = lm._static_cache(self.batch, self.cache_len) if self.cache_len else None
        self.seen = 0  # positions in the cache
        self.shape = (self.batch, self.cache_len, padded)  # what a compiled step specializes on
        self.refills = refills

    def refill(self, row: int, prompt: list[int], target: bytes | None, logits: Any) -> None:
        """Slot ``row`` starts a new sequence (continuous batching; needs
        ``start(..., refills=True)``): its prompt's pass, alone and eager, its keys and
        values written into row ``row`` of the batch's cache so that they end at the
        batch's current column, the row's attention mask opened on them only and its
        positions restarted; its first logits go into row ``row`` of the step's
        ``logits``.  Columns no live row attends to any more are dropped first (a
        dynamic cache) or when a static cache runs out of room."""
        import torch

        if not self.refills or self.attn is None:
            raise ModelError("this decoding was started without refills (start(..., refills=True))")
        if not prompt:
            raise ModelError("every sequence needs a prompt of at least one token")
        lm, n = self.lm, len(prompt)
        with torch.inference_mode():
            self.release(row)
            if not self.cache_len:
                self._compact()
            if n > self.seen:  # room on the left for a prompt longer than the batch's columns
                if self.cache_len and self.seen + (n - self.seen) > self.cache_len:
                    self._compact()
                self._shift(n - self.seen)
            extra: dict[str, Any] = {"logits_to_keep": 1} if lm._keep else {}
            from transformers import DynamicCache

            out = lm.model(input_ids=torch.tensor([prompt], dtype=torch.long, device=lm.device),
                           past_key_values=DynamicCache(config=lm.model.config), use_cache=True, **extra)
            w = self.seen
            for mine, new in zip(self.past.layers, out.past_key_values.layers, strict=True):
                mine.keys[row, :, w - n: w] = new.keys[0]
                mine.values[row, :, w - n: w] = new.values[0]
            self.attn[row, w - n: w] = 1
            self.pos = self.pos[:, -1:].clone()
            self.pos[row, 0] = n - 1
            if self.replay is not None:
                self.replay.reset(row, target)
            logits[row] = out.logits[0, -1, :]
            if self.replay is not None:
                self.replay.favour(logits[row: row + 1], [row])

    def release(self, row: int) -> None:
        """Slot ``row`` has no sequence any more: nothing attends to its columns (it is
        still fed, an ignored token per step, until it takes a new sequence)."""
        if self.attn is not None:
            self.attn[row, : self.seen] = 0

    def _make_room(self, want: int, need: int) -> None:
        """A static cache about to take ``want`` columns (at least ``need``) that it has
        no room for: the leading columns no row attends to dropped, then, if that is not
        enough, every row's unattended columns squeezed out (:meth:`_defrag`)."""
        if self.seen + want <= self.cache_len or self.attn is None:
            return
        self._compact()
        if self.seen + need > self.cache_len or (self.seen + want > self.cache_len and want > need):
            self._defrag()

    def _defrag(self) -> None:
        """Every row's attended columns moved together, in order and right-aligned, the
        rest of the row masked: the width becomes the longest row's attended columns.
        The keys carry their positions (rotary), so moving them changes nothing."""
        import torch

        w = self.seen
        live = self.attn[:, :w] != 0
        width = int(live.sum(dim=1).max())
        if width >= w:
            return
        # per row: its unattended columns first, then its attended ones in order; keep the last `width`
        idx = torch.argsort(live.to(torch.int8), dim=1, stable=True)[:, w - width:]
        for layer in self.past.layers:
            for t in (layer.keys, layer.values):
                moved = torch.gather(t[:, :, :w], 2, idx[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3]))
                t[:, :, :width] = moved
                t[:, :, width:w] = 0
            layer.cumulative_length.add_(width - w)
        self.attn[:, :width] = torch.gather(self.attn[:, :w], 1, idx)
        self.attn[:, width:w] = 1  # free columns, as a new cache has them
        self.seen = width

    def _compact(self) -> None:
        """Drop the leading columns that no row attends to."""
        import torch

        used = self.attn[:, : self.seen].any(dim=0)
        if not bool(used.any()):
            return
        cut = int(torch.argmax(used.to(torch.int8)))
        if cut:
            self._shift(-cut)

    def _shift(self, delta: int) -> None:
        """Move every row's cached columns ``delta`` to the right (left when negative),
        the attention mask with them: a static cache in place (its tensors keep their
        addresses for captured graphs), a dynamic one by padding or slicing."""
        import torch

        w, layers = self.seen, self.past.layers
        if self.cache_len:
            if w + delta > self.cache_len:
                raise ModelError(f"the static cache holds {self.cache_len} positions; its live rows and a new "
                                 f"prompt need {w + delta}")
            for layer in layers:
                for t in (layer.keys, layer.values):
                    if delta > 0:
                        t[:, :, delta: w + delta] = t[:, :, :w].clone()
                        t[:, :, :delta] = 0
                    else:
                        t[:, :, : w + delta] = t[:, :, -delta: w].clone()
                        t[:, :, w + delta: w] = 0
                layer.cumulative_length.add_(delta)
            if delta > 0:
                self.attn[:, delta: w + delta] = self.attn[:, :w].clone()
                self.attn[:, :delta] = 0
            else:
                self.attn[:, : w + delta] = self.attn[:, -delta: w].clone()
                self.attn[:, w + delta: w] = 1  # free columns, as a new cache has them
        else:
            for layer in layers:
                if delta > 0:
                    pad = layer.keys.new_zeros((*layer.keys.shape[:2], delta, layer.keys.shape[3]))
                    layer.keys = torch.cat([pad, layer.keys], dim=-2)
                    pad = layer.values.new_zeros((*layer.values.shape[:2], delta, layer.values.shape[3]))
                    layer.values = torch.cat([pad, layer.values], dim=-2)
                else:
                    layer.keys, layer.values = layer.keys[:, :, -delta:], layer.values[:, :, -delta:]
            self.attn = (torch.cat([self.attn.new_zeros((self.batch, delta)), self.attn], dim=1) if delta > 0
                         else self.attn[:, -delta:])
        self.seen += delta

    def forward(self, tokens: Any = None) -> Any:
        """The prompts' pass (``tokens`` None, first call only), or one step feeding
        ``tokens`` (``(B,)`` ids); the logits of the last position (inference tensors)."""
        import torch

        with torch.inference_mode():
            if self.replay is not None and tokens is not None:
                # the ids on the host before the launch: this waits for the sampling kernel
                # only (after the launch it would wait for the whole forward pass, and the
                # masks of the step would no longer be made while the device runs it)
                self.replay.write([[t] for t in tokens.reshape(-1).tolist()])
            logits = self._forward(tokens)
            if self.replay is not None:
                self.replay.favour(logits)  # queued after the forward pass, no wait
            return logits

    def forward_chunks(self, chunks: list[list[int]]) -> Any:
        """One step feeding each sequence its own run of tokens (``chunks[i]``, at least
        one: the sampled token and the forced ones after it) in one forward pass, the
        runs left-padded to the longest under the attention mask; the logits of each
        sequence's last token, ``(B, V)``.  Needs ``start(..., chunks=True)``; a step of
        single tokens is :meth:`forward`'s (the compiled step where there is one)."""
        import torch

        if len(chunks) != self.batch or not all(chunks):
            raise ModelError(f"need a run of at least one token for each of the {self.batch} sequences")
        width = max(len(c) for c in chunks)
        if width == 1:
            return self.forward(torch.tensor([c[0] for c in chunks], dtype=torch.long, device=self.lm.device))
        if self.attn is None:
            raise ModelError("this decoding was started without chunks (start(..., chunks=True))")
        with torch.inference_mode():
            logits = self._forward_chunks(chunks, width)
            if self.replay is not None:
                self.replay.write(chunks)
                self.replay.favour(logits)
            return logits

    def _forward_chunks(self, chunks: list[list[int]], width: int) -> Any:
        import torch

        lm, dev = self.lm, self.lm.device
        if not self.seen:
            raise ModelError("run the prompts first: forward() without tokens")
        fn = lm._chunk_fn()
        if self.cache_len:
            self._make_room(chunk_width(width) if fn is not lm.model else width, width)
        if fn is not lm.model and (not self.cache_len or self.seen + chunk_width(width) <= self.cache_len):
            width = chunk_width(width)  # more left pads, masked: one of a few compiled widths
        ids = torch.tensor([[0] * (width - len(c)) + list(c) for c in chunks], dtype=torch.long, device=dev)
        real = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunks], dtype=torch.long, device=dev)
        pos = self.pos[:, -1:] + real.cumsum(-1)  # pads repeat the last position (masked anyway)
        self.pos = pos
        if self.cache_len:
            if self.seen + width > self.cache_len:
                raise ModelError(f"the static cache holds {self.cache_len} positions; this chunk step needs "
                                 f"{self.seen + width} (jump-forward runs pad the shorter runs of a batch)")
            self.attn[:, self.seen: self.seen + width] = real
            cache_pos = torch.arange(self.seen, self.seen + width, device=dev)
            extra: dict[str, Any] = {"cache_position": cache_pos}
        else:
            self.attn = torch.cat([self.attn, real], dim=1)
            extra = {}
        if lm._keep:
            extra["logits_to_keep"] = 1
        if fn is not lm.model:  # the width is the one dimension a compiled chunk step leaves open
            import torch._dynamo as dynamo

            for t in (ids, real, pos):
                dynamo.mark_dynamic(t, 1)
            if "cache_position" in extra:
                dynamo.mark_dynamic(extra["cache_position"], 0)
        kwargs = dict(input_ids=ids, past_key_values=self.past, use_cache=True, attention_mask=self.attn,
                      position_ids=pos, **extra)
        try:
            out = fn(**kwargs)
        except Exception as e:  # noqa: BLE001 - torch.compile fails in assorted types, before running
            if fn is lm.model or lm._chunks_compiled:
                raise
            lm._compiled_chunks = lm.model  # what this torch cannot compile runs eager, and says so
            lm.notes.append(f"chunk steps run eager: torch.compile of a chunk step failed ({type(e).__name__}: "
                            f"{str(e)[:200]})")
            fn = lm.model
            out = fn(**kwargs)
        lm._chunks_compiled = fn is not lm.model
        self.past = out.past_key_values
        self.seen += width
        logits = out.logits[:, -1, :]
        # a CUDA graph's output is overwritten by its next replay: the caller gets a copy
        return logits.clone() if fn is not lm.model else logits.contiguous()

    def _forward(self, tokens: Any) -> Any:
        import torch

        lm = self.lm
        extra: dict[str, Any] = {"logits_to_keep": 1} if lm._keep else {}
        if tokens is None:
            if self.seen:
                raise ModelError("the prompts were already run: feed the sampled tokens")
            ids, fn, n = self.ids, lm.model, self.prompt_len
            pos = self.pos
        else:
            if not self.seen:
                raise ModelError("run the prompts first: forward() without tokens")
            ids, fn, n = tokens.reshape(self.batch, 1), lm._decode_fn(), 1
            if self.pos is not None:
                self.pos = self.pos[:, -1:] + 1
                pos = self.pos
                if not self.cache_len:
                    self.attn = torch.cat([self.attn, self.attn.new_ones((self.batch, 1))], dim=1)
            else:
                pos = None
        if self.attn is not None:
            extra.update(attention_mask=self.attn, position_ids=pos)
        if self.cache_len:
            self._make_room(n, n)
            if self.seen + n > self.cache_len:
                raise ModelError(f"the static cache holds {self.cache_len} positions; step {self.seen + n} "
                                 "is past it")
            extra["cache_position"] = torch.arange(self.seen, self.seen + n, device=lm.device)
        out = fn(input_ids=ids, past_key_values=self.past, use_cache=True, **extra)
        self.past = out.past_key_values
        self.seen += n
        logits = out.logits[:, -1, :]
        # a CUDA graph's output is overwritten by its next replay: the caller gets a copy
        return logits.clone() if fn is not lm.model else logits.contiguous()


def _random_config(name: str, vocab: Vocabulary) -> Any:
    from transformers import AutoConfig

    arch = RANDOM_ARCHS.get(name)
    if arch is None:
        raise ModelError(f"unknown random architecture {name!r}; known: {', '.join(sorted(RANDOM_ARCHS))}")
    if isinstance(arch, str):
        path = shared_dir() / arch
        if not path.is_file():
            raise ModelError(f"random:{name} needs {arch} under MASKLAB_SHARED ({shared_dir()}), not found")
        arch = json.loads(path.read_text())
    values = dict(arch)
    if values.get("vocab_size") is None:
        values["vocab_size"] = vocab.size
    model_type = values.pop("model_type")
    values.pop("architectures", None)
    values.pop("transformers_version", None)
    values.pop("torch_dtype", None)
    return AutoConfig.for_model(model_type, **values)


def _dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    try:
        return getattr(torch, dtype), dtype
    except AttributeError:
        raise ModelError(f"unknown dtype {dtype!r} (float32, bfloat16, float16, auto)") from None


def load_model(spec: str, vocab: Vocabulary, *, device: str = "cpu", dtype: str = "auto", seed: int = 0,
               cache: str = "dynamic", compile: str | None = None) -> LoadedModel | SimModel:
    """Load ``spec`` (see the module doc) on ``device`` for decoding with ``vocab``.

    ``cache``: ``dynamic`` (transformers' default, grows per step) or ``static`` (fixed
    shapes, see :class:`Decoding`).  ``compile``: a ``torch.compile`` mode for the
    one-token steps (``default``, ``reduce-overhead``: CUDA graphs, ``max-autotune``);
    it implies the static cache.  Compiling happens on the first steps of each shape,
    which :func:`toolkit.decode.generate.generate` runs before it times anything."""
    if cache not in CACHES:
        raise ModelError(f"unknown cache {cache!r} (dynamic or static)")
    if spec.startswith("sim:"):
        return sim_model(spec, vocab, device, dtype, seed, cache, compile)
    if compile is not None:
        if compile not in COMPILE_MODES:
            raise ModelError(f"unknown compile mode {compile!r} ({', '.join(COMPILE_MODES)})")
        cache = "static"
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:  # pragma: no cover - the [model] extra is installed by make
        raise ModelError(f"models need the [model] extra (torch, transformers): {e}") from e
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but torch sees no CUDA device")
    torch_dtype, dtype_name = _dtype(dtype, device)
    notes: list[str] = []
    replay = False
    if spec.startswith("random:"):
        name = spec.split(":", 1)[1]
        if name.endswith(":replay"):
            name, replay = name[: -len(":replay")], True
        config = _random_config(name, vocab)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        random = True
        notes.append(RANDOM_NOTE)
    else:
        path = Path(spec)
        if not path.is_dir():
            raise ModelError(f"model {spec!r}: not a checkpoint directory and not random:NAME")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device)
        random = False
    model.eval()
    logits = int(model.get_output_embeddings().weight.shape[0])
    if logits != vocab.size:
        raise ModelError(
            f"model {spec} has {logits} logits but vocabulary {vocab.name!r} has {vocab.size} ids; "
            "a model decodes with its own tokenizer"
        )
    n_params = sum(p.numel() for p in model.parameters())
    if replay:
        notes.append(REPLAY_NOTE)
    return LoadedModel(model, spec, random, logits, device, dtype_name, int(n_params), notes, cache, compile,
                       replay=replay, vocab=vocab if replay else None)


@dataclass
class ChatTemplate:
    """A tokenizer's chat template (:func:`load_chat_template`); ``source`` is its folder."""

    source: str
    tokenizer: Any
    vocab_size: int

    def ids(self, text: str) -> list[int]:
        """The ids of ``text`` as one user message, then the generation prompt (the
        template's special tokens and BOS included)."""
        try:
            out = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                     add_generation_prompt=True, tokenize=True, return_dict=False)
        except Exception as e:  # noqa: BLE001 - jinja2 and transformers raise assorted types
            raise ModelError(f"the chat template of {self.source} fails on a single user message: "
                             f"{type(e).__name__}: {e}") from e
        ids = [int(t) for t in out]
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ModelError(f"the chat template of {self.source} gave ids {bad[:5]} outside the vocabulary's "
                             f"{self.vocab_size}")
        return ids


def load_chat_template(folder: str | Path, vocab: Vocabulary) -> ChatTemplate:
    """The chat template of the tokenizer in ``folder`` (a checkpoint or tokenizer folder
    with ``tokenizer_config.json``; a file names its folder), for prompts in ``vocab``'s
    ids.  :class:`ModelError` when the folder has no tokenizer or no ``chat_template``,
    or when its tokenizer's size is not the vocabulary's (another tokenizer's ids)."""
    path = Path(folder)
    if path.is_file():
        path = path.parent
    if not (path / "tokenizer_config.json").is_file():
        raise ModelError(f"no chat template: {path} has no tokenizer_config.json")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:  # pragma: no cover - the [model] extra is missing
        raise ModelError(f"chat templates need the [model] extra (transformers): {e}") from e
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelError(f"no chat template: cannot load the tokenizer in {path}: {e}") from e
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError(f"no chat template: the tokenizer in {path} has no chat_template")
    if len(tokenizer) != vocab.size:
        raise ModelError(f"the tokenizer in {path} has {len(tokenizer)} ids but vocabulary {vocab.name!r} has "
                         f"{vocab.size}; the chat template must come with the vocabulary's tokenizer")
    return ChatTemplate(str(path), tokenizer, vocab.size)
