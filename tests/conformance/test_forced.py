"""Jump-forward and draft masks in every engine: ``forced_bytes``, ``forced_tokens``,
``fill_draft_bitmasks`` and ``fill_draft_tree``.

* On small vocabularies every engine is checked against ``naive`` (whose
  ``forced_bytes`` is the definition: the one byte the recognizer takes, while not
  accepting; ``tests/test_forced.py`` checks the definition against brute force).
* On Llama 3 and MaskBench schemas the fast engines with byte-level forced bytes are
  checked against llguidance's ``compute_ff_bytes`` / ``compute_ff_tokens``, every
  engine reading the same grammar.
* Draft masks equal the sequential fill + accept masks bit for bit, and leave the
  state as it was.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from strategies import get_engine
from tests._support.fixtures import JSON_LARK, small_vocab
from tests._support.shared import require_shared
from tests.conformance import capabilities, engines, json_grammar, make
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.forced import TokenExtensions
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import iter_items
from toolkit.grammar.ir import Grammar

# A vocabulary where forced runs meet the token boundary: '{"', '":', 'name', ...
TOKENS = [b"</s>", *(bytes([b]) for b in b'{}":, abcdemnx0123456789'), b'{"', b'":', b'":"', b"na", b"name",
          b"names", b'name"', b"ab", b"abc", b'", "', b" {", b"12", b"\xc3", b"\xa9", "é".encode()]
VOCAB = Vocabulary.from_tokens(TOKENS, eos_ids=[0], special_tokens={0: "</s>"}, name="ff")

GRAMMARS = {
    "object": 'start: "{" "\\"name\\":" " "? "\\"" /[a-z]+/ "\\"" "}"\n',
    "names": 'start: "name" ("s" | "x" /[0-9]+/)\n',
    "alts": 'start: "abc" ("de" | "dx") | "abd"\n',
    "json": JSON_LARK,
    "utf8": 'start: "é" ("a" | "b") | "ée"\n',
    "regex-lexeme": "start: NUM \"x\"\nNUM: /12[0-9]3/\n",
}
TEXTS = {"object": b'{"name": "ab"}', "names": b"namex12", "alts": b"abcde", "json": b'{"a": 12, "b": "x"}',
         "utf8": "éa".encode(), "regex-lexeme": b"1253x"}
RECURSIVE = {"json"}


def walk(vocab: Vocabulary, text: bytes) -> list[int]:
    """The greedy tokenization of ``text``."""
    return TokenExtensions.of(vocab).greedy(text)


def row_of(m, vocab: Vocabulary) -> np.ndarray:
    """``m``'s mask, one row."""
    row = bm.allocate(vocab.size)
    m.fill_bitmask(row)
    return row[0].copy()


@pytest.mark.parametrize("engine_name", engines(any_vocabulary=True, exclude=("naive",)))
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_forced_bytes_and_tokens_equal_naive(engine_name: str, name: str) -> None:
    cap = capabilities(engine_name)
    if cap.grammars == "regular" and name in RECURSIVE:
        pytest.skip(f"{engine_name} compiles regular grammars only; {name} is recursive")
    if not cap.partial_utf8 and name == "utf8":
        pytest.skip(f"{engine_name} never allows a token that is not UTF-8 alone (partial_utf8=False)")
    if cap.forced == "masks" and name == "names":
        # forced bytes read from masks: after "name" only the token "x" is allowed, since
        # VOCAB has no token for "s" (the byte-level answer is b"")
        pytest.skip("forced bytes read from masks (forced='masks'): VOCAB has no token for every byte")
    g = Grammar.from_lark(GRAMMARS[name])
    engine = make(engine_name, VOCAB)
    naive = get_engine("naive", VOCAB)
    m, ref = engine.matcher(engine.compile(g)), naive.matcher(naive.compile(g))
    for t in [*walk(VOCAB, TEXTS[name]), 0]:
        before = row_of(m, VOCAB)
        fb = m.forced_bytes()
        assert fb == ref.forced_bytes()
        ft = m.forced_tokens()
        assert ft == ref.forced_tokens(), (engine_name, fb)
        assert np.array_equal(row_of(m, VOCAB), before)  # nothing changed
        assert b"".join(VOCAB.token_bytes[x] for x in ft) == fb[: sum(len(VOCAB.token_bytes[x]) for x in ft)]
        assert m.accept_tokens(ft) == len(ft)  # each allowed and accepted in turn
        m.rollback(len(ft))
        assert m.accept_token(t)
        ref.accept_token(t)


@pytest.mark.parametrize("engine_name", engines(any_vocabulary=True))
def test_draft_masks_equal_the_sequential_masks(engine_name: str) -> None:
    vocab = small_vocab()
    engine = make(engine_name, vocab)
    m = engine.matcher(engine.compile(json_grammar(engine.capabilities)))
    path = [22, 14, 23, 24, 3, 1]  # {"a":true} EOS
    drafts = [path, path[:3], path[:2] + [5] + path[3:], [path[0], 1, 1], [1], path[:-1] + [1, 1]]
    for start in range(3):
        for draft in drafts:
            k = len(draft)
            got = np.full((k + 3, bm.words(vocab.size)), 7, dtype=np.int32)
            before = row_of(m, vocab)
            n = m.fill_draft_bitmasks(draft, got, row=1)
            assert np.array_equal(row_of(m, vocab), before)
            ref = np.zeros((k + 1, bm.words(vocab.size)), dtype=np.int32)
            f = m.fork()
            f.fill_bitmask(ref, 0)
            n_ref = 0
            for i, t in enumerate(draft):
                if not bm.get_bit(ref[i], t) or not f.accept_token(t):
                    break
                n_ref += 1
                f.fill_bitmask(ref, i + 1)
            assert n == n_ref, (engine_name, draft)
            assert np.array_equal(got[1: k + 2], ref), (engine_name, draft, n)
            assert (got[0] == 7).all() and (got[k + 2] == 7).all()  # nothing outside the rows
        assert m.accept_token(path[start])


@pytest.mark.parametrize("engine_name", engines(any_vocabulary=True))
def test_draft_tree_masks_equal_each_path_walked(engine_name: str) -> None:
    vocab = small_vocab()
    engine = make(engine_name, vocab)
    m = engine.matcher(engine.compile(json_grammar(engine.capabilities)))
    assert m.accept_token(2)  # {
    # node: token, parent
    tree = [(6, -1), (22, -1), (14, 0), (15, 0), (3, -1), (23, 2), (6, 2), (24, 5), (12, 5), (5, 1), (3, 7), (1, 10)]
    tokens, parents = [t for t, _ in tree], [p for _, p in tree]
    got = np.full((len(tree) + 1, bm.words(vocab.size)), 7, dtype=np.int32)
    before = row_of(m, vocab)
    ok = m.fill_draft_tree(tokens, parents, got)
    assert np.array_equal(row_of(m, vocab), before)
    assert np.array_equal(got[0], before)
    for i in range(len(tree)):
        path, j = [], i
        while j >= 0:
            path.append(tokens[j])
            j = parents[j]
        f = m.fork()
        walked = f.accept_tokens(path[::-1]) == len(path)
        assert ok[i] == walked, (engine_name, i)
        if walked:
            assert np.array_equal(got[i + 1], row_of(f, vocab)), (engine_name, i)
        else:
            assert not got[i + 1].any()


# ------------------------------------------------------------------ Llama 3 --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


@pytest.fixture(scope="module")
def schemas() -> list:
    folder = require_shared("datasets/maskbench")
    out = []
    for item in itertools.islice(iter_items(folder), 0, None, 97):
        if any(c.valid for c in item.cases):
            out.append(item)
        if len(out) == 6:
            break
    return out


@pytest.mark.shared
@pytest.mark.parametrize("engine_name", engines(mask_cost="fast", forced="bytes", exclude=("peer:llguidance",)))
def test_llama3_forced_tokens_equal_llguidance_on_maskbench_walks(engine_name: str, llama3: Vocabulary,
                                                                  schemas: list) -> None:
    """Each engine reads the same Grammar of a MaskBench schema; at every step of a valid
    instance its forced bytes are llguidance's, and its forced tokens too where the
    engine computes them itself (not xgrammar: it has no forced tokens, only bytes)."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    peer = get_engine("peer:llguidance", llama3)
    engine = make(engine_name, llama3)
    own_tokens = engine_name != "peer:xgrammar"
    steps = forced = 0
    for item in schemas:
        g = Grammar.from_json_schema(item.spec)
        try:
            c = engine.compile(g)
        except MasklabError:
            if engine.capabilities.grammars == "context-free" and not engine_name.startswith("peer:"):
                raise  # our context-free strategies compile every one of these
            continue  # a regular engine (recursion, regex size) and a peer's own reader may refuse some
        m, ref = engine.matcher(c), peer.matcher(peer.compile(g))
        text = next(case.text for case in item.cases if case.valid)
        for t in [*llama3.encode(text), llama3.eos_ids[0]]:
            fb = ref.forced_bytes()
            got = m.forced_bytes()
            assert got == fb, (item.name, steps)
            if own_tokens:
                assert m.forced_tokens() == ref.forced_tokens(), (item.name, steps, fb)
            forced += bool(fb)
            steps += 1
            assert m.accept_token(t) and ref.accept_token(t)
    assert steps > 50 and forced > 5
