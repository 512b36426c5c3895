"""The registry of input formats (:mod:`toolkit.grammar.inputs`): one function decides what
an engine is given, and a format registered by a module of its own (a toy word-list
format, ``tests/_support/toyformat.py``) runs through the datasets, the harness (worker
processes), ``generate``, the ``transformers`` adapter and the CLI with no edit to any."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from strategies import get_engine
from tests._support.fixtures import small_vocab
from tests._support.toyformat import WordsEngine, WordsText
from toolkit.core import bitmask as bm
from toolkit.core.errors import GrammarError, UnsupportedGrammar
from toolkit.grammar import RegexText
from toolkit.grammar.inputs import (
    engine_input,
    format_for_key,
    format_for_path,
    format_of,
    formats,
    get_format,
    is_native,
    read,
    register_format,
)
from toolkit.grammar.ir import Grammar
from toolkit.grammar.lark_dialect import LarkText
from toolkit.jsonschema.compiler import JsonSchemaText

WORDS = "tests._support.toyformat:WordsEngine"


def _item_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "w1.json").write_text(json.dumps({"words": "yes\nno\nmaybe", "tests": [
        {"text": "yes", "valid": True}, {"text": "maybe", "valid": True}, {"text": "yesno", "valid": False}]}))
    return folder


def test_builtin_formats_and_lookups() -> None:
    names = [f.name for f in formats()]
    assert {"regex", "lark", "json_schema", "gbnf"} <= set(names)
    assert format_for_key("schema").name == "json_schema" and format_for_key("lark").wrapper is LarkText
    assert format_for_path("x/g.lark").name == "lark" and format_for_path("s.json").name == "json_schema"
    assert format_for_path("g.gbnf").name == "gbnf"
    assert format_of({"type": "integer"}).name == "json_schema" and format_of(True).name == "json_schema"
    assert format_of(JsonSchemaText("{}")).name == "json_schema" and format_of(RegexText("a")).name == "regex"
    assert format_of(Grammar.from_regex("a")) is None and format_of(3) is None
    with pytest.raises(ValueError, match="unknown input format 'nope'; registered: .*lark"):
        get_format("nope")
    with pytest.raises(Exception, match="no input format reads files ending in '.txt'"):
        format_for_path("g.txt")


def test_a_clash_with_a_registered_format_is_refused() -> None:
    lark = get_format("lark")
    with pytest.raises(ValueError, match="belongs to 'lark'"):
        register_format(type(lark)("lark2", WordsText, lark.reader, key="lark2", flag="--lark2", suffixes=(".lark",)))


def test_read_and_the_bare_string() -> None:
    g = read(LarkText('start: "a" | "b"'))
    assert g.accepts(b"a") and not g.accepts(b"c")
    assert read(RegexText("[0-9]+")).accepts(b"12")
    assert read({"type": "integer"}, whitespace="compact").accepts(b"-3")
    with pytest.raises(UnsupportedGrammar, match="got a str") as e:
        read("[0-9]+")
    assert all(f"{w}(text)" in str(e.value) for w in ("RegexText", "LarkText", "JsonSchemaText", "GbnfText"))
    with pytest.raises(UnsupportedGrammar, match="not int"):
        read(3)


def test_engine_input_is_the_one_decision() -> None:
    vocab = small_vocab()
    llg, ours = get_engine("peer:llguidance", vocab) if _has("llguidance") else None, get_engine("llguidance", vocab)
    lark, schema = LarkText('start: "a"'), {"type": "integer"}
    assert engine_input(ours, schema, "native") is schema  # our compiler, with the engine's options
    assert isinstance(engine_input(ours, lark, "native"), Grammar)
    assert isinstance(engine_input(ours, schema, "grammar"), Grammar)
    if llg is not None:
        assert engine_input(llg, lark, "native") is lark and is_native(llg, lark)
        assert isinstance(engine_input(llg, lark, "grammar"), Grammar) and not is_native(llg, lark, "grammar")
    with pytest.raises(ValueError, match="source 'own'"):
        engine_input(ours, lark, "own")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_toy_format_through_datasets_and_every_engine(tmp_path: Path) -> None:
    from toolkit.data.datasets import iter_items

    (item,) = iter_items(_item_folder(tmp_path))
    assert item.kind == "words" and isinstance(item.source(), WordsText)
    assert item.grammar().accepts(b"maybe") and not item.grammar().accepts(b"yesno")
    vocab = small_vocab()
    rows = {}
    for name in ("naive", "llguidance", "xgrammar", "outlines", WORDS):
        engine = get_engine(name, vocab)
        m = engine.matcher(engine.compile(engine_input(engine, item.source())))
        row = bm.allocate(vocab.size)
        m.fill_bitmask(row)
        rows[name] = row.copy()
    for name, row in rows.items():
        assert np.array_equal(row, rows["naive"]), name
    WordsEngine.given.clear()
    engine = get_engine(WORDS, vocab)
    engine.compile(engine_input(engine, item.source(), "native"))
    engine.compile(engine_input(engine, item.source(), "grammar"))
    assert WordsEngine.given == ["WordsText", "Grammar"]


def test_toy_format_through_the_harness_in_worker_processes(tmp_path: Path) -> None:
    """The workers are spawned processes: the item names the module registering its format."""
    from toolkit.bench.run import run_bench

    df = run_bench(["naive", WORDS], _item_folder(tmp_path), out=tmp_path / "run", jobs=1, progress=False,
                   vocab="tekken")
    assert sorted(df["status"]) == ["passing", "passing"], df[["engine", "status", "detail"]]
    assert set(df["kind"]) == {"words"}


def test_toy_format_through_generate_and_the_adapter(tmp_path: Path) -> None:
    import torch

    from toolkit.adapters.transformers import MaskLogitsProcessor
    from toolkit.core.vocab import load_vocab
    from toolkit.data.datasets import iter_items
    from toolkit.decode.generate import generate
    from toolkit.decode.model import load_model

    vocab = load_vocab("tekken")
    (item,) = iter_items(_item_folder(tmp_path))
    lm = load_model("random:tiny", vocab, seed=1)
    run = generate(get_engine(WORDS, vocab), lm, vocab, [item], max_tokens=8, baseline=False,
                   compare_kernels=False)
    (seq,) = run.sequences
    assert seq["status"] == "valid" and seq["text"] in ("yes", "no", "maybe"), seq
    assert seq["grammar"] == "own"  # the engine read the word list itself
    proc = MaskLogitsProcessor("naive", vocab, grammar=WordsText("yes\nno"))
    scores = proc(torch.zeros((1, 3), dtype=torch.long), torch.zeros((1, vocab.size)))
    allowed = {vocab.token_bytes[i] for i in torch.nonzero(scores[0] > -1e30).flatten().tolist()}
    assert allowed and all(b"yes".startswith(t) or b"no".startswith(t) for t in allowed)


def test_toy_format_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit.cli import main

    path = tmp_path / "g.words"
    path.write_text("yes\nno\n")
    assert main(["accepts", "--words", str(path), "no"]) == 0
    assert main(["accepts", "--grammar", str(path), "maybe"]) == 1
    assert main(["mask", "--engine", WORDS, "--grammar", str(path), "--prefix", "ye"]) == 0
    assert "allowed 1 of" in capsys.readouterr().out  # "s" alone
    bad = tmp_path / "g.txt"
    bad.write_text("x")
    assert main(["accepts", "--grammar", str(bad), "x"]) != 0
    assert "no input format reads files ending in '.txt'" in capsys.readouterr().err


def test_a_reader_error_keeps_its_place() -> None:
    with pytest.raises(GrammarError) as e:
        read(WordsText("\n"))
    assert (e.value.line, e.value.column) == (1, 1)


def test_the_compiler_reads_a_schema_itself_not_through_the_registry(monkeypatch) -> None:
    """``grammar_of`` compiles a schema with the compiler's own function: the formats'
    registry (the grammar floor) is not a road from the compiler back to itself."""
    import dataclasses

    from toolkit.grammar import inputs
    from toolkit.jsonschema.compiler import grammar_of

    def boom(spec, **options):
        raise AssertionError("went through the registry")

    fmt = inputs.format_of({"type": "integer"})
    monkeypatch.setitem(inputs._FORMATS, fmt.name, dataclasses.replace(fmt, reader=boom))
    grammar, kind = grammar_of({"type": "integer"}, whitespace="flexible", engine="naive")
    assert kind == "json_schema" and grammar.accepts(b"12") and not grammar.accepts(b"1.5")
