"""Language models for the decoding harness (:mod:`toolkit.generate`).

``load_model(spec, vocab, device=..., dtype=...)`` takes

* a local Hugging Face checkpoint directory (``AutoModelForCausalLM``), or
* ``random:NAME``: a known architecture built from its configuration with random
  weights, because nothing can be downloaded here.  Its speed is a real model's
  (same shapes, same kernels); its text is noise, so every output of a run on
  random weights says so (:data:`RANDOM_NOTE`).  Names: ``tiny`` (two small layers
  sized to the vocabulary, for tests on CPU), ``llama-3.2-1b``, ``llama-3-8b`` (the
  published shapes, 128,256 logits) and ``mistral-7b`` (the configuration shipped in
  ``$MASKLAB_SHARED/tokenizers/mistral-7b-v0.3/config.json``, 32,768 logits).

The model's logits must cover exactly the vocabulary's ids (``vocab.size``, padding
included): a mismatch is a :class:`ModelError` naming both sizes, never a silent
truncation.  Needs the ``[model]`` extra (torch, transformers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.datasets import shared_dir
from toolkit.errors import MasklabError
from toolkit.vocab import Vocabulary

__all__ = ["ModelError", "LoadedModel", "load_model", "RANDOM_ARCHS", "RANDOM_NOTE"]

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


class ModelError(MasklabError):
    """A model that cannot be loaded, or whose logits do not match the vocabulary."""


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
    _takes_keep: bool | None = field(default=None, repr=False)

    def step(self, ids: Any, past: Any = None, attention_mask: Any = None,
             position_ids: Any = None) -> tuple[Any, Any]:
        """One forward pass: the logits of the last position, ``(B, V)`` and contiguous,
        and the new KV cache.  Only the last position's logits are computed when the
        model takes ``logits_to_keep`` (transformers' Llama, Mistral and most others).
        A left-padded batch passes its ``attention_mask`` (past and new positions, 0 on
        padding) and ``position_ids`` (counted from each sequence's first real token)."""
        extra = {"logits_to_keep": 1} if self._keep else {}
        if attention_mask is not None:
            extra.update(attention_mask=attention_mask, position_ids=position_ids)
        out = self.model(input_ids=ids, past_key_values=past, use_cache=True, **extra)
        return out.logits[:, -1, :].contiguous(), out.past_key_values

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

    @property
    def _keep(self) -> bool:
        if self._takes_keep is None:
            import inspect

            self._takes_keep = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        return self._takes_keep

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "random_weights": self.random, "vocab_size": self.vocab_size,
                "device": self.device, "dtype": self.dtype, "parameters": self.parameters,
                "notes": list(self.notes)}


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


def load_model(spec: str, vocab: Vocabulary, *, device: str = "cpu", dtype: str = "auto", seed: int = 0) -> LoadedModel:
    """Load ``spec`` (see the module doc) on ``device`` for decoding with ``vocab``."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:  # pragma: no cover - the [model] extra is installed by make
        raise ModelError(f"models need the [model] extra (torch, transformers): {e}") from e
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"device {device!r} asked for, but torch sees no CUDA device")
    torch_dtype, dtype_name = _dtype(dtype, device)
    notes: list[str] = []
    if spec.startswith("random:"):
        config = _random_config(spec.split(":", 1)[1], vocab)
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
    return LoadedModel(model, spec, random, logits, device, dtype_name, int(n_params), notes)
