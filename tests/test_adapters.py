"""toolkit.adapters.transformers: masklab's engines inside ``model.generate``."""

from __future__ import annotations

import json

import pytest
import torch

from strategies import get_engine
from tests._support.shared import require_shared
from toolkit.adapters.transformers import AdapterError, MaskLogitsProcessor, logits_processor
from toolkit.core.vocab import load_vocab
from toolkit.data.checks import check_output
from toolkit.data.datasets import embedded_dir, iter_items
from toolkit.decode.generate import DEFAULT_PROMPT, generate
from toolkit.decode.model import load_model

ENGINES = ["llguidance", "xgrammar", "outlines", "peer:llguidance", "peer:xgrammar"]
PEERS = {"peer:llguidance": "llguidance", "peer:xgrammar": "xgrammar"}


@pytest.fixture(scope="module")
def tekken():
    return load_vocab("tekken")


@pytest.fixture(scope="module")
def schemas():
    return [i for i in iter_items(embedded_dir()) if i.kind == "schema"][:8]


def _hf_generate(lm, vocab, proc, prompts, max_new, **kw):
    ids = torch.tensor(prompts, dtype=torch.long)
    out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), logits_processor=[proc],
                            max_new_tokens=max_new, eos_token_id=list(vocab.eos_ids), pad_token_id=0, **kw)
    return out[:, ids.shape[1]:].tolist()


@pytest.mark.parametrize("vocab_spec", ["tekken", "mistral"])
@pytest.mark.parametrize("name", ENGINES)
def test_greedy_generate_gives_masklab_generates_tokens(name, vocab_spec, tekken, schemas) -> None:
    """Seeded greedy decoding of random:tiny: model.generate with the processor writes
    the tokens masklab generate writes."""
    if name in PEERS:
        pytest.importorskip(PEERS[name], reason=f"{name} needs {PEERS[name]} (the [peers] extra)")
    vocab = tekken if vocab_spec == "tekken" else load_vocab(
        "hf:" + str(require_shared("tokenizers/mistral-7b-v0.3/tokenizer.json")))
    lm = load_model("random:tiny", vocab, seed=3)
    item = next(i for i in schemas if i.name == "s01_flat_person")
    run = generate(get_engine(name, vocab), lm, vocab, [item], max_tokens=24, baseline=False, compare_kernels=False)
    (seq,) = run.sequences
    proc = MaskLogitsProcessor(name, vocab, schema=item.spec)
    prompt = ([lm.bos_id] if lm.bos_id is not None else []) + vocab.encode(DEFAULT_PROMPT)
    (got,) = _hf_generate(lm, vocab, proc, [prompt], 24, do_sample=False)
    got_text = vocab.decode([t for t in got if t not in vocab.eos_ids]).decode("utf-8", "replace")
    assert got_text == seq["text"], (name, got_text, seq["text"])
    assert len(got) == seq["tokens"]  # the same number of tokens, EOS included


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines"])
def test_sampled_batches_stay_valid(name, tekken, schemas) -> None:
    """Sampling at batch 4 over 8 embedded schemas: every finished output validates."""
    lm = load_model("random:tiny", tekken, seed=1)
    prompt = ([lm.bos_id] if lm.bos_id is not None else []) + tekken.encode(DEFAULT_PROMPT)
    torch.manual_seed(0)
    finished = 0
    for item in schemas:
        proc = MaskLogitsProcessor(name, tekken, schema=item.spec, whitespace="compact")
        for out in _hf_generate(lm, tekken, proc, [prompt] * 4, 48, do_sample=True, temperature=1.0):
            if any(t in tekken.eos_ids for t in out):
                text = tekken.decode(out[: next(i for i, t in enumerate(out) if t in tekken.eos_ids)])
                ok, why = check_output(item, text, tekken)
                assert ok, (item.name, text, why)
                finished += 1
    assert finished >= 4


def test_beam_search_and_ambiguous_specs_are_refused(tekken) -> None:
    lm = load_model("random:tiny", tekken, seed=1)
    proc = MaskLogitsProcessor("llguidance", tekken, regex="[a-z]{1,6}")
    prompt = tekken.encode(DEFAULT_PROMPT)
    with pytest.raises(AdapterError, match="beam search"):
        _hf_generate(lm, tekken, proc, [prompt], 6, num_beams=3, do_sample=False)
    with pytest.raises(AdapterError, match="exactly one"):
        MaskLogitsProcessor("llguidance", tekken, regex="a", lark="start: \"a\"")
    with pytest.raises(AdapterError, match="toolkit Grammar"):
        MaskLogitsProcessor("llguidance", tekken, grammar="[0-9]+")
    procs = logits_processor("outlines", tekken, schema=json.dumps({"type": "integer"}))
    assert type(procs).__name__ == "LogitsProcessorList" and len(procs) == 1
