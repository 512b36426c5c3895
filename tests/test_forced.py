"""Jump-forward and draft masks (issue #29): ``forced_bytes``, ``forced_tokens``,
``fill_draft_bitmasks`` and ``fill_draft_tree`` in every engine.

* On small vocabularies every engine is checked against ``naive`` (whose
  ``forced_bytes`` is the definition: the one byte the recognizer takes, while not
  accepting) and the definitions themselves against brute force.
* On Llama 3 and MaskBench schemas our strategies are checked against llguidance's
  ``compute_ff_bytes`` / ``compute_ff_tokens`` and xgrammar's
  ``find_jump_forward_string``, every engine reading the same grammar.
* Draft masks equal the sequential fill + accept masks bit for bit, and leave the
  state as it was.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from strategies import available_engines, get_engine
from tests._support.fixtures import JSON_LARK, small_vocab
from tests._support.shared import require_shared
from toolkit.bench.datasets import embedded_dir, iter_items
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError
from toolkit.core.forced import TokenExtensions, canonical_tokens, forced_tokens
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.grammar.ir import Grammar

OURS = ["llguidance", "xgrammar", "outlines"]
PEERS = {"peer:llguidance": "llguidance", "peer:xgrammar": "xgrammar", "peer:glrmask": "glrmask",
         "peer:llama.cpp": "llama_cpp"}

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


def _engine(name: str, vocab: Vocabulary):
    package = PEERS.get(name)
    if package is not None:
        pytest.importorskip(package, reason=f"{name} needs {package} (the [peers] extra)")
    return get_engine(name, vocab)


def _walk(vocab: Vocabulary, text: bytes) -> list[int]:
    return TokenExtensions.of(vocab).greedy(text)


def _viable_strings(g: Grammar, prefix: bytes, length: int) -> set[bytes]:
    """Every ``w`` of ``length`` bytes that can follow ``prefix`` (brute force over all bytes)."""
    level = {b""}
    for _ in range(length):
        level = {w + bytes([b]) for w in level for b in range(256) if _viable(g, prefix + w + bytes([b]))}
    return level


def _viable(g: Grammar, data: bytes) -> bool:
    return g.accepts_prefix(data)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_naive_forced_bytes_are_the_definition(name: str) -> None:
    """Every completion (brute force, up to a few bytes past them) starts with the forced
    bytes, and none exist once the state accepts."""
    g = Grammar.from_lark(GRAMMARS[name])
    naive = get_engine("naive", VOCAB)
    m = naive.matcher(naive.compile(g))
    consumed = b""
    for t in _walk(VOCAB, TEXTS[name]):
        forced = m.forced_bytes()
        if m.is_accepting():
            assert forced == b""
        # every continuation starts with them: the only viable string of their length,
        # and no sentence ends inside them
        assert _viable_strings(g, consumed, len(forced)) == {forced}, (consumed, forced)
        assert not any(g.accepts(consumed + forced[:i]) for i in range(len(forced)))
        # and no longer: after them the grammar accepts, or takes more than one byte
        after = consumed + forced
        nxt = [b for b in range(256) if _viable(g, after + bytes([b]))]
        assert g.accepts(after) or len(nxt) != 1 or len(forced) == 4096
        assert m.accept_token(t)
        consumed += VOCAB.token_bytes[t]


def _ref_rows(m, vocab: Vocabulary) -> np.ndarray:
    row = bm.allocate(vocab.size)
    m.fill_bitmask(row)
    return row[0].copy()


@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar", "outlines", "peer:llguidance", "peer:xgrammar",
                                         "peer:glrmask", "peer:llama.cpp"])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_forced_bytes_and_tokens_equal_naive(engine_name: str, name: str) -> None:
    g = Grammar.from_lark(GRAMMARS[name])
    engine = _engine(engine_name, VOCAB)
    if engine_name == "peer:llama.cpp" and name == "names":
        # the protocol's default reads forced bytes from masks: after "name" only the token
        # "x" is allowed, since VOCAB has no token for "s" (the byte-level answer is b"")
        pytest.skip("forced bytes read from masks: VOCAB has no token for every byte")
    naive = get_engine("naive", VOCAB)
    try:
        c = engine.compile(g)
    except MasklabError:
        if engine_name != "outlines" or name != "json":  # only the regular-grammar engine may refuse (recursion)
            raise
        pytest.skip("outlines compiles regular grammars only; the JSON grammar is recursive")
    m, ref = engine.matcher(c), naive.matcher(naive.compile(g))
    for t in [*_walk(VOCAB, TEXTS[name]), 0]:
        before = _ref_rows(m, VOCAB)
        fb = m.forced_bytes()
        assert fb == ref.forced_bytes()
        ft = m.forced_tokens()
        assert ft == ref.forced_tokens(), (engine_name, fb)
        assert np.array_equal(_ref_rows(m, VOCAB), before)  # nothing changed
        assert b"".join(VOCAB.token_bytes[x] for x in ft) == fb[: sum(len(VOCAB.token_bytes[x]) for x in ft)]
        assert m.accept_tokens(ft) == len(ft)  # each allowed and accepted in turn
        m.rollback(len(ft))
        assert m.accept_token(t)
        ref.accept_token(t)


def test_forced_tokens_never_cut_a_token_the_tokenizer_would_merge() -> None:
    """``"name"`` forced: ``name`` could grow into ``names``/``name"`` only where the
    grammar allows what follows, and the chop looks at exactly that."""
    naive = get_engine("naive", VOCAB)
    g = Grammar.from_lark(GRAMMARS["names"])
    m = naive.matcher(naive.compile(g))
    assert m.forced_bytes() == b"name"
    assert m.forced_tokens() == []  # 'names' extends it with "s", which the grammar allows
    g2 = Grammar.from_lark('start: "name" "0"\n')
    m2 = naive.matcher(naive.compile(g2))
    assert m2.forced_bytes() == b"name0"
    ft = m2.forced_tokens()  # no token extends "name0", "0" or "me0"...: everything is fed
    assert ft == canonical_tokens(VOCAB, b"name0") and ft


def test_forced_tokens_follow_llguidance_rule_with_the_last_token() -> None:
    """The forced bytes are tokenized after the last token when that token stays."""
    v = VOCAB
    last = v.token_bytes.index(b'{"')

    def letters_after(forced: bytes):  # the grammar: the forced bytes, then a letter
        return lambda data: data[: len(forced)] == forced[: len(data)] and data[len(forced):][:1] in (b"", b"a", b"b")

    got = forced_tokens(v, last, b'name":"', letters_after(b'name":"'))
    assert [v.token_bytes[t] for t in got] == [b'name"', b":", b'"']  # '{"' stays: tokenized after it
    got = forced_tokens(v, last, b'name":', letters_after(b'name":'))
    assert [v.token_bytes[t] for t in got] == [b'name"', b":"]  # '":"' would extend '":' with '"': not allowed
    got = forced_tokens(v, last, b'name":', lambda d: b'name":"'.startswith(d))
    assert [v.token_bytes[t] for t in got] == []  # ... now it is: 'name"' + ':' may become 'name' + '":"'
    assert forced_tokens(v, None, b"name", lambda d: b"names".startswith(d)) == []  # 'names' may follow
    assert [v.token_bytes[t] for t in forced_tokens(v, None, b"name", lambda d: b"name".startswith(d))] == [b"name"]


@pytest.mark.parametrize("engine_name", ["naive", "llguidance", "xgrammar", "outlines", "peer:llguidance",
                                         "peer:xgrammar", "peer:glrmask", "peer:llama.cpp"])
def test_draft_masks_equal_the_sequential_masks(engine_name: str) -> None:
    vocab = small_vocab()
    engine = _engine(engine_name, vocab)
    g = Grammar.from_lark(JSON_LARK) if engine_name != "outlines" else Grammar.from_regex(r'\{"a":(true|12)\}')
    m = engine.matcher(engine.compile(g))
    walk = [22, 14, 23, 24, 3, 1] if engine_name != "outlines" else [22, 14, 23, 24, 3, 1]
    if engine_name == "outlines":
        walk = [2, 6, 14, 23, 12, 3, 1]
    drafts = [walk, walk[:3], walk[:2] + [5] + walk[3:], [walk[0], 1, 1], [1], walk[:-1] + [1, 1]]
    for start in range(3):
        for draft in drafts:
            k = len(draft)
            got = np.full((k + 3, bm.words(vocab.size)), 7, dtype=np.int32)
            before = _ref_rows(m, vocab)
            n = m.fill_draft_bitmasks(draft, got, row=1)
            assert np.array_equal(_ref_rows(m, vocab), before)
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
        assert m.accept_token(walk[start])


@pytest.mark.parametrize("engine_name", ["naive", "llguidance", "xgrammar", "peer:llguidance", "peer:xgrammar",
                                         "peer:glrmask", "peer:llama.cpp"])
def test_draft_tree_masks_equal_each_path_walked(engine_name: str) -> None:
    vocab = small_vocab()
    engine = _engine(engine_name, vocab)
    m = engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK)))
    assert m.accept_token(2)  # {
    # node: token, parent
    tree = [(6, -1), (22, -1), (14, 0), (15, 0), (3, -1), (23, 2), (6, 2), (24, 5), (12, 5), (5, 1), (3, 7), (1, 10)]
    tokens, parents = [t for t, _ in tree], [p for _, p in tree]
    got = np.full((len(tree) + 1, bm.words(vocab.size)), 7, dtype=np.int32)
    before = _ref_rows(m, vocab)
    ok = m.fill_draft_tree(tokens, parents, got)
    assert np.array_equal(_ref_rows(m, vocab), before)
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
            assert np.array_equal(got[i + 1], _ref_rows(f, vocab)), (engine_name, i)
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
@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar", "outlines", "peer:xgrammar"])
def test_llama3_forced_tokens_equal_llguidance_on_maskbench_walks(engine_name: str, llama3: Vocabulary,
                                                                  schemas: list) -> None:
    """Each engine reads the same Grammar of a MaskBench schema; at every step of a valid
    instance its forced bytes and tokens are llguidance's."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    if engine_name not in available_engines():
        pytest.skip(f"{engine_name} is not installed")
    peer = get_engine("peer:llguidance", llama3)
    engine = get_engine(engine_name, llama3)
    steps = forced = 0
    for item in schemas:
        g = Grammar.from_json_schema(item.spec)
        try:
            c = engine.compile(g)
        except MasklabError:
            if engine_name in ("llguidance", "xgrammar"):  # our CFG strategies compile every one of these
                raise
            continue  # outlines (recursion, regex size) and xgrammar's Lark reader may refuse some
        m, ref = engine.matcher(c), peer.matcher(peer.compile(g))
        text = next(case.text for case in item.cases if case.valid)
        for t in [*llama3.encode(text), llama3.eos_ids[0]]:
            fb = ref.forced_bytes()
            got = m.forced_bytes()
            assert got == fb, (item.name, steps)
            if engine_name != "peer:xgrammar":
                assert m.forced_tokens() == ref.forced_tokens(), (item.name, steps, fb)
            forced += bool(fb)
            steps += 1
            assert m.accept_token(t) and ref.accept_token(t)
    assert steps > 50 and forced > 5


def test_bench_draft_records_draft_masks_and_the_report_draws_them(tmp_path) -> None:
    """``bench --draft``: every engine's records hold draft and sequential times with no
    mismatch, the draft work stays out of ``work``, and the report has the table and figure."""
    from toolkit.bench.harness import HarnessError, read_records, run_bench
    from toolkit.report.write import write_report

    data = tmp_path / "data"
    data.mkdir()
    for item in [i for i in iter_items(embedded_dir()) if i.name in ("s01_flat_person", "r01_iso_date")]:
        (data / f"{item.name}.json").write_text(item.path.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "run"
    engines = ["llguidance", "xgrammar", "outlines"]
    run_bench(engines, data, out=out, quick=True, drafts=[1, 4], progress=False)
    recs = read_records(out)
    assert {r["engine"] for r in recs} == set(engines) and all(r["status"] == "passing" for r in recs)
    for r in recs:
        assert set(r["draft"]) == {"1", "4"}
        for v in r["draft"].values():
            assert v["mismatch"] == 0 and len(v["draft_s"]) == len(v["seq_s"]) > 0
        assert r["work"]["masks"] == len(r["tbm_s"])  # the draft masks are not in the walk's work
    report = write_report([out]).read_text(encoding="utf-8")
    assert "## Speculative draft masks" in report and (out / "draft.png").is_file()
    with pytest.raises(HarnessError, match="drafts"):
        run_bench(engines, data, out=out, quick=True, progress=False)


@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar", "outlines"])
def test_spelling_is_an_option_with_its_values(engine_name: str) -> None:
    """``spelling="llguidance"`` writes keys the one way llguidance does, so a grammar
    forces them; another value is refused with the valid ones."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
              "additionalProperties": False}
    forced = {}
    for spelling in ("json", "llguidance"):
        e = get_engine(engine_name, VOCAB, spelling=spelling, whitespace="compact")
        m = e.matcher(e.compile(schema))
        assert m.accept_tokens(_walk(VOCAB, b'{"')) == 1
        forced[spelling] = m.forced_bytes()
        assert e.describe()["options"]["spelling"] == spelling
    assert forced == {"json": b"", "llguidance": b'name":"'}
    with pytest.raises(ValueError, match="'json', 'llguidance'|json, llguidance"):
        get_engine(engine_name, VOCAB, spelling="yaml")


def test_draft_and_forced_calls_refuse_bad_arguments() -> None:
    """A tree whose parent is not an earlier node, rows the bitmask lacks, an absurd
    forced-bytes limit: clear errors, the state unchanged."""
    vocab = small_vocab()
    for name in ("llguidance", "naive"):
        engine = get_engine(name, vocab)
        m = engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK)))
        with pytest.raises(ValueError, match="not an earlier node"):
            m.fill_draft_tree([2, 6], [0, -1], bm.allocate(vocab.size, 3))
        with pytest.raises(ValueError, match="rows"):
            m.fill_draft_bitmasks([2, 6, 3], bm.allocate(vocab.size, 2))
        assert m.accept_token(2)
    engine = get_engine("llguidance", vocab)
    with pytest.raises(ValueError, match="limit"):
        engine.matcher(engine.compile(Grammar.from_lark(JSON_LARK))).forced_bytes(1 << 40)
