"""Why two engines' masks differ, named (toolkit.bench.differences, the report's warnings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._support.shared import PROJECT_ROOT
from toolkit.bench.differences import (
    CACHE,
    DEVIATIONS,
    _json_whitespace,
    _late_match,
    _partial_tail,
    _Probe,
    cached_causes,
    explain_pair,
    explain_pairs,
)
from toolkit.bench.run import run_bench
from toolkit.core.vocab import Vocabulary
from toolkit.grammar import Grammar
from toolkit.report import load_runs
from toolkit.report.bench import comparability_warnings, difference_causes, differing_pairs
from toolkit.report.write import write_report

LEXER, SCANNERLESS = "llguidance", "xgrammar"
FORCING = "tests._support.plugins:llguidance_forcing"


@pytest.fixture(scope="module")
def lexing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our lexer and scannerless strategies on the same grammar: JSON ends with ``}``
    after which only the scannerless one takes whitespace (llguidance's documented lexing)."""
    root = tmp_path_factory.mktemp("differences")
    data = root / "data"
    data.mkdir()
    for name in ("s01_flat_person", "g06_chat_tool_call"):
        src = next((PROJECT_ROOT / "datasets").rglob(f"{name}.json"))
        shutil.copy(src, data / src.name)
    run_bench([LEXER, SCANNERLESS], data, out=root / "run", quick=True, progress=False, source="grammar")
    return root / "run"


def test_a_lexing_difference_is_named_and_documented(lexing_run: Path) -> None:
    runs = load_runs([lexing_run])
    pairs = differing_pairs(runs)
    assert len(pairs) == 1 and pairs[0][2] > 0, pairs
    causes = explain_pairs(lexing_run, [(LEXER, SCANNERLESS, pairs[0][4])], budget_s=60)
    cause = causes[(LEXER, SCANNERLESS)]
    assert cause.tokens > 0 and cause.undocumented_tokens == 0 and cause.is_documented, cause
    assert list(cause.documented) == ["llguidance: lexer: greedy lexemes, whitespace only before a lexeme"]
    assert cause.text().startswith("documented difference (on the first 2 of 2 differing items")
    # the report's warning carries it, and the cache answers a second time without a re-run
    assert (lexing_run / CACHE).is_file()
    assert cached_causes(lexing_run)[(LEXER, SCANNERLESS)] == cause
    labels = difference_causes(runs, 0)
    (line,) = comparability_warnings(runs, causes=labels)
    assert "Why: documented difference" in line and "docs/extending.md (lexing)" in line
    report = write_report([lexing_run], boot=0, explain_budget=0).read_text(encoding="utf-8")
    assert "Why: documented difference" in report


def test_a_stale_cache_is_not_read(lexing_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(lexing_run, copy)
    (copy / CACHE).write_text(json.dumps({"records": [0, 0], "pairs": []}))
    assert cached_causes(copy) == {}
    runs = load_runs([copy])
    assert list(difference_causes(runs, 0).values()) == ["cause not examined (report --explain-budget)"]


def test_an_undocumented_difference_is_called_so(tmp_path: Path) -> None:
    """llguidance as shipped narrows forced bytes to their canonical token: no page
    documents it as a deviation, so the warning says so and shows a token."""
    pytest.importorskip("llguidance", reason="compares peer:llguidance with its forcing twin (install .[peers])")
    data = tmp_path / "data"
    data.mkdir()
    forced = {"regex": r'\{"name": "[a-z]+"\}', "tests": [{"text": '{"name": "bob"}', "valid": True}]}
    (data / "forced.json").write_text(json.dumps(forced))
    run_bench(["peer:llguidance", FORCING], data, out=tmp_path / "run", quick=True, progress=False)
    runs = load_runs([tmp_path / "run"])
    (text,) = difference_causes(runs, 60).values()
    assert text.startswith("NOT a documented difference"), text
    assert f"{FORCING} refuses" in text and "that the grammar allows" in text


def test_the_budget_bounds_the_work(lexing_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(lexing_run, copy)
    (copy / CACHE).unlink(missing_ok=True)  # (other tests of the module cache their causes there)
    # spent before the first pair: nothing examined, nothing cached
    assert explain_pairs(copy, [(LEXER, SCANNERLESS, ["s01_flat_person"])], budget_s=1e-9) == {}
    assert not cached_causes(copy)
    # a pair whose share runs out stops early, says so, and is not cached either
    cause = explain_pair(copy, LEXER, SCANNERLESS, items=["s01_flat_person"], budget_s=1e-9)
    assert cause.stopped == "the time budget ran out" and cause.tokens == 0
    assert not cached_causes(copy)


def _probe(vocab: Vocabulary, matcher, data: bytes) -> _Probe:
    return _Probe(vocab, vocab.token_bytes.index(data), data, b"", {}, matcher, None)


def test_the_late_match_test_is_outlines_core_s_rule() -> None:
    """A token whose bytes but the last complete a match fits, wherever it ends
    (``abc`` in ``ab|abc``, ``,`` after ``true``); one that passes no match does not."""
    from strategies import get_engine

    vocab = Vocabulary.from_tokens([b"", *(c.encode() for c in "abc,tru"), b"abc", b"ab", b",t", b"true"],
                                   eos_ids=(0,), special_tokens={0: "</s>"})
    naive = get_engine("naive", vocab)
    m = naive.matcher(naive.compile(Grammar.from_regex("ab|abc")))
    assert _late_match(_probe(vocab, m, b"abc")) and not _late_match(_probe(vocab, m, b"ab"))
    m = naive.matcher(naive.compile(Grammar.from_regex("true(,true)*")))
    assert m.accept_token(vocab.token_bytes.index(b"true"))
    assert _late_match(_probe(vocab, m, b",")) and not _late_match(_probe(vocab, m, b",t"))
    assert {d.side for d in DEVIATIONS} == {"allows", "refuses"} and all(d.where for d in DEVIATIONS)


def test_whitespace_a_peer_requires_is_its_whitespace_rule() -> None:
    """A peer that writes ``": "`` refuses ``":{\n``, ``":{"`` and ``{`` after ``":``: whitespace differences
    (the token respaced as the peer spaces JSON is taken); a token that differs in more
    than whitespace is not one."""
    from strategies import get_engine

    vocab = Vocabulary.from_tokens([b"", *(c.encode() for c in '{}[]":, \naxb1'), b'":{\n', b'":{"', b'":[\n', b'"x:\n'],
                                   eos_ids=(0,), special_tokens={0: "</s>"})
    naive = get_engine("naive", vocab)
    m = naive.matcher(naive.compile(Grammar.from_regex(r'\{"a": \{("b": 1)?\}\}')))
    for c in '{"a':
        assert m.accept_token(vocab.token_bytes.index(c.encode()))
    fits = _json_whitespace("refuses")

    def probe(data: bytes) -> _Probe:
        return _Probe(vocab, vocab.token_bytes.index(data), data, b'{"a', {}, None, None, m, native_schema=True)

    assert fits(probe(b'":{\n')) and fits(probe(b'":{"')) and not fits(probe(b'":[\n')) and not fits(probe(b'"x:\n'))
    assert not _json_whitespace("allows")(probe(b'":{\n'))  # (naive is None here: no judge)
    assert m.num_tokens == 3  # (the probes left the matcher as it was)
    for c in '":':
        assert m.accept_token(vocab.token_bytes.index(c.encode()))
    after = _Probe(vocab, vocab.token_bytes.index(b"{"), b"{", b'{"a":', {}, None, None, m, native_schema=True)
    assert fits(after) and not fits(_Probe(vocab, vocab.token_bytes.index(b"["), b"[", b'{"a":', {}, None, None, m,
                                           native_schema=True))


def test_partial_characters_are_read_from_the_end() -> None:
    assert _partial_tail(b" \xc3") == (b"\xc3", 1) and _partial_tail(b"a\xe2\x80") == (b"\xe2\x80", 1)
    assert _partial_tail(b"\xf0\x9f") == (b"\xf0\x9f", 2) and _partial_tail("é".encode()) == (b"", 0)
    assert _partial_tail(b"abc") == (b"", 0) and _partial_tail(b"\x80") == (b"", 0)


def test_a_peer_s_own_schema_compiler_differs_in_documented_ways(tmp_path: Path) -> None:
    """With each engine's native input, xgrammar 0.2.8 compiles the schemas itself: its
    whitespace and its one spelling of keys are the documented differences."""
    pytest.importorskip("xgrammar", reason="compares peer:xgrammar's own schema compiler (install .[peers])")
    data = tmp_path / "data"
    data.mkdir()
    for name in ("s01_flat_person", "s02_flat_product"):
        shutil.copy(next((PROJECT_ROOT / "datasets").rglob(f"{name}.json")), data)
    run_bench([SCANNERLESS, "peer:xgrammar"], data, out=tmp_path / "run", quick=True, progress=False)
    runs = load_runs([tmp_path / "run"])
    (text,) = difference_causes(runs, 60).values()
    assert text.startswith("documented difference"), text
    assert "peer:xgrammar: its own JSON Schema compiler: JSON whitespace elsewhere" in text
