"""Constrain ``transformers``' ``model.generate`` with any masklab engine.

::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from toolkit.adapters.transformers import MaskLogitsProcessor

    tok = AutoTokenizer.from_pretrained(PATH)
    model = AutoModelForCausalLM.from_pretrained(PATH)
    proc = MaskLogitsProcessor("llguidance", tok, schema={"type": "object", ...})
    out = model.generate(**tok("...", return_tensors="pt"), logits_processor=[proc],
                         max_new_tokens=64, eos_token_id=proc.vocab.eos_ids)

:class:`MaskLogitsProcessor` compiles the grammar once (a Lark grammar, a JSON schema,
a regex or a :class:`~toolkit.grammar.ir.Grammar`, named by its keyword so a string is
never guessed) and keeps one matcher per sequence.  At each step it accepts the token
each sequence sampled last and fills the next masks in one batch call
(:func:`toolkit.core.batch.make_batch`: native and without the GIL for masklab's
strategies, the peers' own batch APIs), then sets the logits of disallowed tokens to
-inf.  EOS is allowed exactly where the grammar accepts, as in ``masklab generate``; a
finished sequence's mask allows only EOS.  Greedy decoding and sampling work for any
batch; beam search is refused (beams reorder the sequences between steps, which a
matcher per row cannot follow): the processor raises :class:`AdapterError` as soon as
a row's history changes under it.  The model's logits may be wider than the
vocabulary (padded): ids past it are never allowed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strategies import get_engine
from toolkit.core import bitmask as bm
from toolkit.core.batch import NO_TOKEN, make_batch
from toolkit.core.errors import MasklabError
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.inputs import engine_input, format_of, formats, wrap
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import JsonSchemaText

__all__ = ["AdapterError", "MaskLogitsProcessor", "logits_processor"]


class AdapterError(MasklabError):
    """The adapter cannot do what ``generate`` asked (beam search, a batch that changed)."""


def _spec(grammar: Any, schema: Any, regex: str | None, lark: str | None) -> Any:
    """The input the processor compiles: ``grammar=`` a :class:`Grammar` or any input
    of a registered format (``GbnfText(...)``, ``LarkText(...)``...,
    :mod:`toolkit.grammar.inputs`); ``schema=``, ``regex=`` and ``lark=`` wrap their text."""
    given = [(k, v) for k, v in (("grammar", grammar), ("schema", schema), ("regex", regex), ("lark", lark))
             if v is not None]
    if len(given) != 1:
        raise AdapterError("give exactly one of grammar=, schema=, regex= or lark= "
                           f"(got {', '.join(k for k, _ in given) or 'none'})")
    kind, value = given[0]
    if kind == "grammar":
        if not isinstance(value, Grammar) and format_of(value) is None:
            raise AdapterError(f"grammar= takes a toolkit Grammar or a wrapped input ({', '.join(f.wrapper.__name__ for f in formats())}), "
                               f"got {type(value).__name__}: use schema=, regex= or lark= for text")
        return value
    if kind == "schema":
        return JsonSchemaText(value) if isinstance(value, str) else value
    return wrap(kind, value)


class MaskLogitsProcessor:
    """A ``transformers`` logits processor (callable as ``(input_ids, scores) ->
    scores``) that keeps ``model.generate`` inside a grammar; see the module doc.

    ``engine``: a registered engine name (then ``tokenizer`` is the vocabulary: a
    tokenizer object, a :class:`Vocabulary` or a spec, and ``options`` its options) or
    an engine made already.  ``threads``: the batch call's threads (default: the cores,
    at most the batch)."""

    def __init__(self, engine: Any, tokenizer: Any = None, *, grammar: Any = None, schema: Any = None,
                 regex: str | None = None, lark: str | None = None, threads: int | None = None,
                 **options: Any) -> None:
        if isinstance(engine, str):
            if tokenizer is None:
                raise AdapterError(f"engine {engine!r} needs the tokenizer (or vocabulary) it masks for")
            vocab = tokenizer if isinstance(tokenizer, Vocabulary) else load_vocab(tokenizer)
            engine = get_engine(engine, vocab, **options)
        elif options:
            raise AdapterError(f"options {sorted(options)} are for an engine made here, not for {engine.name}")
        self.engine = engine
        self.vocab: Vocabulary = engine.vocab
        self.compiled = engine.compile(engine_input(engine, _spec(grammar, schema, regex, lark)))
        self.threads = threads
        self.matchers: list[Any] = []
        self._batch: Any = None
        self._mask: np.ndarray | None = None
        self._seen: Any = None  # input_ids of the last call (to notice beams reordering rows)

    def reset(self) -> None:
        """Forget the sequences (the next call starts a new ``generate``)."""
        if self._batch is not None:
            self._batch.close()
        self.matchers, self._batch, self._mask, self._seen = [], None, None, None

    def _start(self, input_ids: Any) -> None:
        self.reset()
        n = int(input_ids.shape[0])
        self.matchers = [self.engine.matcher(self.compiled) for _ in range(n)]
        self._batch = make_batch(self.engine, self.matchers, self.threads)
        self._mask = bm.allocate(self.vocab.size, n)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        rows, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        seen = self._seen
        fresh = seen is None or seen.shape[0] != rows or seen.shape[1] != length - 1
        if not fresh and not torch.equal(input_ids[:, :-1], seen):
            raise AdapterError("the sequences changed between steps: beam search reorders them (masklab's "
                               "logits processor supports greedy decoding and sampling, num_beams=1), or a new "
                               "generate call began (call reset() between calls)")
        if fresh:
            self._start(input_ids)
            tokens = np.full(rows, NO_TOKEN, dtype=np.int32)  # the prompt: the first masks only
        else:
            tokens = input_ids[:, -1].to("cpu", torch.int32).numpy()
        self._batch.step(tokens, self._mask)
        self._seen = input_ids.detach().clone()
        mask = torch.from_numpy(self._mask).to(scores.device)
        return bm.apply_to_logits(scores, mask, self.vocab.size)


def logits_processor(engine: Any, tokenizer: Any = None, **kwargs: Any) -> Any:
    """A ``transformers.LogitsProcessorList`` holding one :class:`MaskLogitsProcessor`
    (``kwargs`` as its)."""
    from transformers import LogitsProcessorList

    return LogitsProcessorList([MaskLogitsProcessor(engine, tokenizer, **kwargs)])
