"""Our strategies' masks on the Mistral vocabularies equal the real engines'.

Results publish figures for Tekken (Mistral's tiktoken-style BPE, 131,072 ids, bundled
with mistral-common) and the older SentencePiece Mistral 7B v0.3 (32,768 ids with byte
fallback: ``<0x41>`` tokens are single bytes).  Here each of masklab's own fast
strategies is walked beside the real engine that reads a grammar as it does
(:class:`~toolkit.core.protocol.Capabilities` ``lexing``): ``peer:llguidance`` for the
lexer strategies (``llguidance``, ``glr``: greedy lexemes, ``%ignore`` text only before
a lexeme, so no whitespace after the last one), ``peer:xgrammar`` for the scannerless
ones (``xgrammar``, ``outlines``: the grammar's own language, ``naive``'s).  On schemas
of ``datasets/schemas`` compiled by our compiler, the same
:class:`~toolkit.grammar.Grammar` handed to every engine: the instances of the item
(valid ones to their end and EOS, invalid ones until the reference refuses a token)
and seeded random walks through the reference's masks.  At every step each mask must
equal the reference's bit for bit, and each engine must take the token exactly when
the reference does.

Mistral 7B v0.3 comes from ``shared/tokenizers/mistral-7b-v0.3`` (skipped, saying so,
where that folder is absent); Tekken needs nothing from ``shared/``.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from strategies import get_engine
from tests._support.shared import PROJECT_ROOT, require_shared
from tests.conformance import capabilities, engines
from toolkit.core import bitmask as bm
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import Item, load_item
from toolkit.grammar.ir import Grammar

pytest.importorskip("llguidance", reason="the reference is peer:llguidance (install .[peers])")

#: the real engine each kind of lexing is held to
REFERENCES = {"lexer": "peer:llguidance", "scannerless": "peer:xgrammar"}
#: masklab's own strategies with masks fast enough for a 131k vocabulary (naive's are
#: not: the conformance suites check it against these on small vocabularies)
OURS = [p.values[0] for p in engines(mask_cost="fast") if ":" not in p.values[0]]
#: nested objects with patterns, a format and an enum; oneOf; a recursive schema
SCHEMAS = ["s05_nested_order", "s16_oneof_payment", "s18_recursive_tree"]
VOCABS = ["tekken", "mistral-7b-v0.3"]


@functools.cache
def _vocab(name: str) -> Vocabulary:
    if name == "tekken":
        return load_vocab("tekken")
    return load_vocab("hf:" + str(require_shared(f"tokenizers/{name}/tokenizer.json")))


@functools.cache
def _engine(engine: str, vocab: str):
    return get_engine(engine, _vocab(vocab))


def _row(m, vocab: Vocabulary) -> np.ndarray:
    row = bm.allocate(vocab.size)
    m.fill_bitmask(row)
    return row[0]


def _differ(a: np.ndarray, b: np.ndarray, vocab: Vocabulary) -> list[bytes]:
    """A few tokens one mask allows and the other does not (for the message)."""
    ids = np.flatnonzero(bm.to_bool(a, vocab.size) ^ bm.to_bool(b, vocab.size))[:6]
    return [vocab.token_bytes[i] for i in ids.tolist()]


def _walk(ref, matchers: dict, vocab: Vocabulary, tokens, where: str) -> int:
    """Walk every matcher through ``tokens`` (a list, or :func:`_random_tokens` reading
    the reference's masks) until the reference refuses one or takes EOS; every mask and
    verdict equal to the reference's.  The steps taken."""
    steps = 0
    for t in tokens:
        want = _row(ref, vocab)
        for name, m in matchers.items():
            got = _row(m, vocab)
            assert np.array_equal(got, want), (where, name, steps, _differ(got, want, vocab))
        ok = ref.accept_token(t)
        for name, m in matchers.items():
            assert m.accept_token(t) == ok, (where, name, steps, vocab.token_bytes[t])
        steps += 1
        if not ok or ref.is_terminated():
            break
    return steps


def _random_tokens(ref, vocab: Vocabulary, rng: random.Random, n: int):
    """Up to ``n`` tokens, each drawn from the reference's mask at that step (EOS
    only when it is the one token left, or one time in eight)."""
    eos = set(vocab.eos_ids)
    for _ in range(n):
        ids = bm.allowed_ids(_row(ref, vocab), vocab.size).tolist()
        if not ids:
            return
        text = [t for t in ids if t not in eos]
        yield rng.choice(ids if not text or rng.random() < 0.125 else text)


def _item(name: str) -> Item:
    return load_item(PROJECT_ROOT / "datasets" / "schemas" / f"{name}.json")


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("vocab_name", VOCABS)
@pytest.mark.parametrize("lexing", sorted(REFERENCES))
def test_our_masks_equal_the_real_engines_on_mistral_vocabularies(lexing: str, vocab_name: str, schema: str) -> None:
    reference = REFERENCES[lexing]
    pytest.importorskip(reference.split(":")[1], reason=f"{reference} is not installed (install .[peers])")
    vocab = _vocab(vocab_name)
    item = _item(schema)
    g = Grammar.from_json_schema(item.spec)
    ours = [n for n in OURS if capabilities(n).lexing == lexing
            # (a regular-only engine refuses recursion: tests/conformance)
            and not (capabilities(n).grammars == "regular" and schema == "s18_recursive_tree")]
    assert ours, lexing  # (xgrammar and outlines, llguidance and glr: never none)
    compiled = {name: _engine(name, vocab_name).compile(g) for name in [reference, *ours]}

    def fresh() -> tuple:
        ms = {name: _engine(name, vocab_name).matcher(c) for name, c in compiled.items()}
        return ms.pop(reference), ms

    steps = 0
    for case in item.cases:
        tokens = [*vocab.encode(case.text), vocab.eos_ids[0]]
        ref, matchers = fresh()
        n = _walk(ref, matchers, vocab, tokens, f"{vocab_name} {schema} {case.description}")
        # a valid instance goes to its end and EOS; an invalid one is refused on the way
        assert (n == len(tokens) and ref.is_terminated()) == case.valid, (schema, case.description, n)
        steps += n
    rng = random.Random(f"{lexing}/{vocab_name}/{schema}")
    for _ in range(2):
        ref, matchers = fresh()
        steps += _walk(ref, matchers, vocab, _random_tokens(ref, vocab, rng, 40), f"{vocab_name} {schema} random walk")
    assert steps > 100, steps
