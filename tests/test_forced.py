"""Jump-forward and draft masks (issue #29): the definitions and the options; what every
engine must do (equal ``naive``, equal the sequential masks, equal llguidance on Llama 3)
is the conformance suite's (``tests/conformance/test_forced.py``).

``naive``'s ``forced_bytes`` is the definition (the one byte the recognizer takes, while
not accepting), checked here against brute force; forced tokens follow llguidance's rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from strategies import get_engine
from tests._support.fixtures import JSON_LARK, small_vocab
from tests.conformance.test_forced import GRAMMARS, TEXTS, VOCAB
from toolkit.core import bitmask as bm
from toolkit.core.batch import NativeBatchMatcher
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.forced import MAX_LOOKBACK, TokenExtensions, canonical_tokens, forced_tokens
from toolkit.core.vocab import Vocabulary
from toolkit.data.datasets import embedded_dir, iter_items
from toolkit.grammar.ir import Grammar


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


def test_bench_draft_records_draft_masks_and_the_report_draws_them(tmp_path) -> None:
    """``bench --draft``: every engine's records hold draft and sequential times with no
    mismatch, the draft work stays out of ``work``, and the report has the table and figure."""
    from toolkit.bench.records import read_records
    from toolkit.bench.run import run_bench
    from toolkit.core.errors import HarnessError
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


def _forced_walks() -> list[tuple[Vocabulary, object, bytes]]:
    """The conformance walks on the small vocabulary (no C tokenizer: the Python rule with
    the chop in C), and on Tekken (C tokenizer), Llama 3 and Mistral 7B v0.3 (when the
    shared tokenizers are here) a JSON schema's walk and the conformance grammars' (the texts made longer,
    so forced runs start after multi-byte tokens)."""
    from tests._support.shared import SHARED
    from toolkit.core.vocab import load_vocab

    walks: list[tuple[Vocabulary, object, bytes]] = [(VOCAB, Grammar.from_lark(GRAMMARS[g]), TEXTS[g])
                                                     for g in sorted(GRAMMARS)]
    bpe_vocabs = [load_vocab("tekken")]
    shared = SHARED / "tokenizers/llama-3/tokenizer.model"
    if shared.is_file():
        bpe_vocabs.append(load_vocab(f"llama3:{shared}"))
    mistral = SHARED / "tokenizers/mistral-7b-v0.3/tokenizer.json"  # ranked merges (BpeMerges)
    if mistral.is_file():
        bpe_vocabs.append(load_vocab(f"hf:{mistral}"))
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"},
                                               "kind": {"enum": ["Übersicht", "naïve café", "x\ny"]}},
              "required": ["name", "tags", "kind"], "additionalProperties": False}
    for vocab in bpe_vocabs:
        walks.append((vocab, schema, b'{"name": "Ada", "tags": ["x", 1], "kind": "na\xc3\xafve caf\xc3\xa9"}'))
        walks.append((vocab, schema, b'{"name":"\xc3\x9c","tags":[{"a b":null}],"kind":"x\\ny"}'))
        walks += [(vocab, Grammar.from_lark(GRAMMARS[g]), TEXTS[g]) for g in sorted(GRAMMARS)]
    return walks


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines", "glr"])
def test_forced_tokens_from_c_are_the_python_rules(name: str) -> None:
    """Our strategies' forced tokens come from C: on a vocabulary with a C tokenizer
    (:class:`~toolkit.core.bpe.BpeTable`: Tekken, Llama 3, Mistral's merges) the whole rule
    (``Session.forced_tokens_c``), elsewhere the chop (``Session.chop_tokens``).  On every
    step of the walks they are the tokens of the Python rule (``forced_tokens`` with the
    matcher's ``allows_bytes``), and the C tokenizer answered on the BPE walks."""
    from toolkit.core.bpe import BpeTable

    assert MAX_LOOKBACK == 4  # what Session.chop_tokens reads
    checked = in_c = 0
    for vocab, spec, text in _forced_walks():
        engine = get_engine(name, vocab, **({"spelling": "llguidance"} if isinstance(spec, dict) else {}))
        try:
            m = engine.matcher(engine.compile(spec))
        except UnsupportedGrammar:  # outlines: regular grammars only
            continue
        bpe = BpeTable.of(vocab)
        assert (bpe is None) == (vocab is VOCAB)
        for t in canonical_tokens(vocab, text):
            forced = m.forced_bytes()
            want = forced_tokens(vocab, m.last_token(), forced, m.allows_bytes) if forced else []
            assert m.forced_tokens() == want, (name, vocab.name, text, forced)
            if forced and bpe is not None:
                assert m.session.forced_tokens_c(bpe, forced) == want, (name, vocab.name, text, forced)
                in_c += 1
            checked += bool(forced)
            if not m.accept_token(t):
                break
    assert checked >= 5 and in_c >= 10


@pytest.mark.parametrize("vocab_name", ["small", "tekken"])
@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines"])
def test_the_batch_accepts_and_finds_the_forced_bytes_as_single_calls_do(name: str, vocab_name: str) -> None:
    """``NativeBatchMatcher.accept_forced`` (jump-forward's step, one C call) does what
    ``accept_allowed`` then ``forced_bytes`` do per row: along a walk, row 0 takes the
    walk's tokens, row 1 a refused token (it ends, its state unchanged), row 2 is not
    live, row 3 draws nothing (an empty mask), row 4 has room for one token only (it
    ends, with no forced bytes).  On Tekken the call also gives row 0's forced tokens,
    those of the Python rule; on the small vocabulary (no C tokenizer) it leaves them to
    the caller."""
    from toolkit.core.vocab import load_vocab

    vocab = VOCAB if vocab_name == "small" else load_vocab("tekken")
    g = Grammar.from_lark(GRAMMARS["object"])
    engine = get_engine(name, vocab)
    try:
        compiled = engine.compile(g)
    except UnsupportedGrammar:
        pytest.skip(f"{name} does not compile this grammar")
    rows = [engine.matcher(compiled) for _ in range(5)]
    twins = [engine.matcher(compiled) for _ in range(5)]
    batch = NativeBatchMatcher(rows, 1)
    n = len(rows)
    live = np.ones(n, dtype=bool)
    live[2] = False
    n_out = np.zeros(n, dtype=np.int64)
    n_out[4] = 9
    tok, accepted = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int8)
    forced_seen = tokens_seen = 0
    for step, t in enumerate(canonical_tokens(vocab, TEXTS["object"])):
        bad = next(u for u in range(1, vocab.size) if not twins[1].fork().accept_token(u))
        ids = np.asarray([t, bad, t, -1, t], dtype=np.int64)
        was_live = live.copy()
        written, n_forced, forced, n_ftok, ftok = batch.accept_forced(ids, np.arange(n), live, n_out, 10, tok,
                                                                      accepted)
        assert (ftok is None) == (vocab is VOCAB)
        want_acc = [twins[k].accept_allowed(int(ids[k])) if was_live[k] and ids[k] >= 0 else None for k in range(n)]
        assert written == sum(1 for a in want_acc if a)
        for k in range(n):
            if not was_live[k]:
                assert accepted[k] == -1 and n_forced[k] == 0
                continue
            if ids[k] < 0:
                assert accepted[k] == -2 and not live[k]
                continue
            assert accepted[k] == int(want_acc[k]), (name, step, k)
            assert rows[k].num_tokens == twins[k].num_tokens
            if k == 0:
                want = twins[0].forced_bytes(256)
                assert forced[0, : n_forced[0]].tobytes() == want and live[0]
                forced_seen += bool(want)
                if want and ftok is not None:
                    rule = forced_tokens(vocab, twins[0].last_token(), want, twins[0].allows_bytes)
                    assert n_ftok[0] >= 0 and ftok[0, : n_ftok[0]].tolist() == rule, (name, step)
                    tokens_seen += 1
                elif not want:
                    assert n_ftok[0] == -1
            else:  # refused, or out of room: ends, no forced bytes
                assert not live[k] and n_forced[k] == 0 and n_ftok[k] == -1
        n_out[0] += 1
    assert forced_seen >= 1 and (tokens_seen >= 1 or vocab is VOCAB)
    batch.close()


@pytest.mark.parametrize("vocab_name", ["tekken", "mistral"])
@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines"])
def test_the_lookahead_tables_hold_the_forced_runs_of_the_python_rule(name: str, vocab_name: str) -> None:
    """``NativeBatchMatcher.lookahead`` (jump-forward's ``lookahead`` schedule): after
    each fill of a walk over a JSON schema (Tekken; Mistral 7B v0.3, whose C tokenizer
    runs its ranked merges), a row whose mask allows at most ``k``
    tokens has a table of exactly those tokens, each with the forced run the Python rule
    gives after it on a fork (-1 only where the C tokenizer cannot answer); a wider mask
    has none; the rows' states are untouched (the masks after the walk equal a twin's);
    ``lookahead_runs`` finds a drawn id's run, and nothing for an id without one."""
    from tests._support.shared import require_shared
    from toolkit.core.vocab import load_vocab

    if vocab_name == "tekken":
        vocab = load_vocab("tekken")
    else:
        vocab = load_vocab("hf:" + str(require_shared("tokenizers/mistral-7b-v0.3/tokenizer.json")))
    schema = {"type": "object", "additionalProperties": False, "required": ["occupation_description", "tags", "é"],
              "properties": {"occupation_description": {"type": "string"}, "é": {"enum": ["naïve\nline", "x"]},
                             "tags": {"type": "array", "items": {"enum": ["first_value", "second_value"]}}}}
    text = '{"occupation_description": "Ada", "é": "naïve\\nline", "tags": ["first_value", "second_value"]}'
    engine = get_engine(name, vocab, spelling="llguidance")
    compiled = engine.compile(schema)
    rows = [engine.matcher(compiled) for _ in range(2)]
    twin = engine.matcher(compiled)
    batch = NativeBatchMatcher(rows, 1)
    k = 64
    assert batch.lookahead(k)
    mask = np.zeros((2, bm.words(vocab.size)), dtype=np.int32)
    want = np.zeros((1, bm.words(vocab.size)), dtype=np.int32)
    tok = np.full(2, -1, dtype=np.int32)
    tables = runs_seen = hits = 0
    for t in vocab.encode(text) + [vocab.eos_ids[0]]:
        batch.step(tok, mask)
        twin.fill_bitmask(want, 0)
        assert (mask[0] == want[0]).all() and (mask[1] == want[0]).all()
        count, ttok, tn, toff, trun = batch._la[:5]
        allowed = bm.allowed_ids(want[0], vocab.size)
        if len(allowed) > k:
            assert count[0] == -1
        else:
            tables += 1
            assert batch.lookahead_seconds()[0] > 0  # the table's own time, beside the fill's
            assert count[0] == len(allowed) and ttok[0, : count[0]].tolist() == allowed.tolist()
            for j, u in enumerate(allowed.tolist()):
                f = twin.fork()
                if u in vocab.eos_ids:
                    assert tn[0, j] == 0
                    continue
                assert f.accept_token(u)
                rule = f.forced_tokens()
                if tn[0, j] == -1:
                    assert rule, (name, u)  # refused to the caller: only where a run may be
                else:
                    assert trun[0, toff[0, j]: toff[0, j] + tn[0, j]].tolist() == rule, (name, vocab.decode([u]))
                    runs_seen += bool(rule)
        # the draw: row 0 the walk's token, row 1 an id without a run (or none)
        ids = np.asarray([t, t], dtype=np.int64)
        live = np.asarray([True, False])
        got = batch.lookahead_runs(ids, np.arange(2), live)
        f = twin.fork()
        rule = f.forced_tokens() if f.accept_token(t) and t not in vocab.eos_ids else []
        if count[0] >= 0 and rule:
            assert got == {0: rule}
            hits += 1
        elif count[0] >= 0:
            assert got == {}
        assert twin.accept_token(t)
        tok[:] = t
    assert tables >= 5 and runs_seen >= 3 and hits >= 2, (tables, runs_seen, hits)
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        batch.lookahead(0)
    batch.close()
    small = NativeBatchMatcher([get_engine(name, VOCAB).matcher(get_engine(name, VOCAB).compile(
        Grammar.from_lark(GRAMMARS["object"])))], 1)
    assert small.lookahead() is False and small.lookahead_runs(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                                               np.ones(1, dtype=bool)) == {}  # no C tokenizer
    small.close()


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines", "glr"])
def test_next_bytes_hold_every_byte_the_core_takes(name: str) -> None:
    """The core's ``next_bytes`` (what the forced bytes and the chop's walk try) holds
    every byte the state takes, after every byte of the conformance walks and of a JSON
    schema's walk on Llama 3 (fed as single-byte tokens, so inside lexemes and forced
    runs too), and exactly those where it says so: always for outlines' DFA and
    xgrammar's terms, inside a lexeme that cannot end for llguidance's lexer."""
    from tests._support.shared import SHARED
    from toolkit.core.vocab import load_vocab

    walks = [(VOCAB, Grammar.from_lark(GRAMMARS[g]), TEXTS[g]) for g in sorted(GRAMMARS)]
    shared = SHARED / "tokenizers/llama-3/tokenizer.model"
    if shared.is_file():
        llama = load_vocab(f"llama3:{shared}")
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
                  "required": ["name", "tags"], "additionalProperties": False}
        walks.append((llama, schema, b'{"name": "Ada", "tags": ["x", 1]}'))
    exact = name in ("outlines", "xgrammar")
    checked = exact_seen = 0
    for vocab, spec, text in walks:
        engine = get_engine(name, vocab, **({"spelling": "llguidance"} if isinstance(spec, dict) else {}))
        try:
            m = engine.matcher(engine.compile(spec))
        except UnsupportedGrammar:
            continue
        single = TokenExtensions.of(vocab).single
        for byte in text:  # a byte at a time: every state inside each lexeme and forced run
            given, told = m.session.next_bytes()
            takes = [b for b in range(256) if m.allows_bytes(bytes([b]))]
            assert told in (1, 2) and byte in takes, (name, text)
            assert all(given[b] for b in takes), (name, text, byte, [b for b in takes if not given[b]])
            if told == 2:  # exactly those
                assert given.nonzero()[0].tolist() == takes, (name, text, byte)
            assert told == 2 or not exact, (name, text, byte)
            checked += 1
            exact_seen += told == 2
            assert m.accept_token(single[bytes([byte])])
    assert checked >= 50 and exact_seen >= 10
