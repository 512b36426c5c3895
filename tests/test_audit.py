"""``masklab audit`` (issue 44): random walks through an engine's masks, every finished
output validated with ``jsonschema``; a loosened language is found, a sound one is not."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from strategies import get_engine
from tests._support.faulty import FaultyEngine
from toolkit import cli
from toolkit.bench.audit import (
    ITEMS_FILE,
    UNDECIDED,
    Sampler,
    _judge,
    _nth_bit,
    audit_item,
    run_audit,
    schema_validator,
)
from toolkit.bench.audit_tables import ITEM_COLUMNS, audit_table, counterexamples, dataset_table
from toolkit.core import bitmask as bm
from toolkit.core.errors import HarnessError
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import embedded_dir, iter_items, load_item
from toolkit.report.audit import plot_audit

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
          "additionalProperties": False}
TESTS = [{"data": {"n": 1}, "valid": True}, {"data": {"n": "x"}, "valid": False}]


def _item(folder: Path, name: str, schema: dict, tests: list[dict] = TESTS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"schema": schema, "tests": tests}))
    return path


@pytest.fixture(scope="module")
def tekken():
    return load_vocab("tekken")


def test_a_deliberately_loose_engine_is_caught(tmp_path: Path, tekken) -> None:
    """An engine that compiles ``{}`` (any JSON) for the schema: its walks write values
    the schema rejects, and it accepts the invalid test instance; the record keeps the
    shortest counterexamples with the validator's message."""
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    item = load_item(_item(tmp_path, "loose", dict(SCHEMA, description="masklab-test: loose")))
    rec = audit_item(FaultyEngine(tekken), tekken, item, samples=16, seed=1)
    assert rec["status"] == "loosened" and rec["finished"] >= 8
    assert rec["rejected"] and all(r["message"] for r in rec["rejected"])
    assert len(rec["rejected"][0]["text"]) <= len(rec["rejected"][-1]["text"])
    assert [e["case"] for e in rec["invalid_accepted"]] == [1] and "is not of type" in rec["invalid_accepted"][0][
        "message"]
    validator = schema_validator(SCHEMA)
    for r in rec["rejected"]:  # each counterexample is one: jsonschema (or JSON itself) rejects it
        try:
            assert not validator.is_valid(json.loads(r["text"]))
        except ValueError:
            pass
    sound = audit_item(FaultyEngine(tekken), tekken, load_item(_item(tmp_path, "exact", SCHEMA)), samples=16, seed=1)
    assert sound["status"] == "sound" and sound["finished"] >= 8 and not sound["rejected"]


def test_xgrammar_reading_an_overlapping_oneof_as_anyof_is_caught(tmp_path: Path, tekken) -> None:
    """xgrammar 0.2.8 reads ``oneOf`` as ``anyOf``: an integer matches both branches, so
    the schema rejects it, and walks through xgrammar's masks write one.  Our
    strategies refuse the schema or enforce it: never loosened."""
    pytest.importorskip("xgrammar", reason="the peer engines are not installed (install .[peers])")
    schema = {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]}
    item = load_item(_item(tmp_path, "one_of", schema, [{"data": 5, "valid": False}, {"data": -2, "valid": True}]))
    rec = audit_item(get_engine("peer:xgrammar", tekken), tekken, item, samples=32, seed=0)
    assert rec["status"] == "loosened" and rec["invalid_accepted"], rec
    assert any("valid under each of" in r["message"] for r in rec["rejected"] + rec["invalid_accepted"])
    for name in ("llguidance", "xgrammar", "outlines", "glr"):
        ours = audit_item(get_engine(name, tekken), tekken, item, samples=8, seed=0)
        assert ours["status"] in ("sound", "compile_error"), (name, ours)


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines", "glr"])
def test_our_strategies_are_sound_on_the_embedded_schemas(name: str, tekken) -> None:
    """Every embedded schema (every 2nd for ``glr`` and ``xgrammar``, every 4th for ``outlines``, whose
    compiles over Tekken dominate: the test suite's time budget; ``results/audit``
    covers 1,500 schemas)."""
    items = [i for i in iter_items(embedded_dir()) if i.kind == "schema" and i.fits("tekken")]
    items = items[::{"outlines": 4, "glr": 2, "xgrammar": 2}.get(name, 1)]
    engine = get_engine(name, tekken)
    sampler = Sampler(tekken, 150)
    recs = [audit_item(engine, tekken, i, samples=2, seed=0, sampler=sampler) for i in items]
    assert all(r["status"] in ("sound", "compile_error") for r in recs), [
        (r["item"], r["rejected"][:1], r["invalid_accepted"][:1], r["detail"]) for r in recs if r["status"] != "sound"]
    assert sum(r["finished"] for r in recs) >= len(items)  # the walks end


def test_a_number_jsonschema_cannot_see_exactly_is_undecided_not_a_counterexample() -> None:
    """``131233632807725077.61`` is no integer, but its float is: ``jsonschema`` would
    find it valid under both branches of this ``oneOf``.  The judge leaves it undecided,
    reads huge exponents from their digits (no arithmetic), and still rejects ``5``."""
    v = schema_validator({"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]})
    assert _judge(v, b"131233632807725077.61") == (UNDECIDED, "131233632807725077.61")
    assert _judge(v, b"0.5") is None and _judge(v, b"1.61e-99999")[0] == UNDECIDED
    assert _judge(v, b"0e99999999")[0].startswith("0.0 is valid under each of")
    assert "valid under each of" in _judge(v, b"5")[0] and _judge(v, b"[")[0].startswith("not JSON")
    assert _judge(v, b'"\xff"')[0].startswith("not UTF-8")


def test_the_sampler_is_seeded_and_walks_end(tekken) -> None:
    engine = get_engine("llguidance", tekken)
    c = engine.compile(SCHEMA)
    sampler = Sampler(tekken, 100)
    walks = [sampler.walk(engine.matcher(c), random.Random(7)) for _ in range(2)]
    assert walks[0] == walks[1] and walks[0][1] == "finished"
    with pytest.raises(ValueError, match="max_tokens"):
        Sampler(tekken, 0)


def test_audit_runs_resume_and_the_cli_prints_the_table(tmp_path: Path, capsys) -> None:
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    data = tmp_path / "data"
    _item(data, "exact", SCHEMA)
    _item(data, "loose", dict(SCHEMA, description="masklab-test: loose"))
    out = tmp_path / "run"
    engines = ["llguidance", "tests._support.faulty:FaultyEngine"]
    df = run_audit(engines, data, out=out, samples=8, progress=False)
    assert len(df) == 4
    table = audit_table(df)
    assert table.loc["llguidance", "sound"] == 2 and table.loc["llguidance", "loosened"] == 0
    assert table.loc["tests._support.faulty:FaultyEngine", "loosened"] == 1
    assert [c["item"] for c in counterexamples(df)] == ["loose"]
    lines = (out / "audit.jsonl").read_text().splitlines()
    run_audit(engines, data, out=out, samples=8, progress=False)  # resumed: nothing redone
    assert (out / "audit.jsonl").read_text().splitlines() == lines
    rc = cli.main(["audit", "--engines", ",".join(engines), "--data", str(data), "--samples", "8", "--out",
                   str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0 and "loosened" in printed and "loose" in printed
    assert (out / "audit.csv").is_file() and "loose" in (out / "counterexamples.csv").read_text()
    assert (out / "audit.png").is_file() and (out / "datasets.csv").is_file()
    # the tidy items.csv is enough to resume where the records are gone (a fresh clone
    # of a committed run folder): nothing redone, the same tables
    items = pd.read_csv(out / ITEMS_FILE, keep_default_na=False)
    assert list(items.columns) == list(ITEM_COLUMNS) and len(items) == 4
    assert items.set_index(["engine", "item"]).loc[("tests._support.faulty:FaultyEngine", "loose"), "counterexample"]
    tables = {f: (out / f).read_text() for f in ("audit.csv", "datasets.csv", "counterexamples.csv")}
    (out / "audit.jsonl").unlink()
    assert cli.main(["audit", "--engines", ",".join(engines), "--data", str(data), "--samples", "8", "--out",
                     str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert (out / "audit.jsonl").read_text() == ""  # nothing audited again
    assert {f: (out / f).read_text() for f in tables} == tables, "the tables from items.csv alone differ"


def test_an_interrupted_audit_writes_the_tables_of_what_it_did(tmp_path: Path, monkeypatch, capsys) -> None:
    """Ctrl-C (SIGINT) mid-run: exit 130 with items.csv and the tables over the records so
    far, so a run stopped at the end of a session leaves what it found."""
    data = tmp_path / "data"
    _item(data, "exact", SCHEMA)
    out = tmp_path / "run"
    args = ["audit", "--engines", "llguidance", "--data", str(data), "--samples", "4", "--out", str(out), "--quiet"]
    assert cli.main(args) == 0
    for f in ("items.csv", "audit.csv", "counterexamples.csv"):
        (out / f).unlink()

    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("toolkit.cli.audit.run_audit", interrupted)
    assert cli.main(args) == 130
    assert "interrupted" in capsys.readouterr().err
    assert len(pd.read_csv(out / ITEMS_FILE)) == 1 and (out / "audit.csv").is_file()
    # SIGTERM too (a background run, whose shell ignores SIGINT for it), and the handler is put back
    (out / ITEMS_FILE).unlink()

    def terminated(*a: object, **k: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr("toolkit.cli.audit.run_audit", terminated)
    assert cli.main(args) == 130 and (out / ITEMS_FILE).is_file()
    assert signal.getsignal(signal.SIGTERM) is before
    (tmp_path / "nothing").mkdir()  # a regex only (an empty folder is a DatasetError: test_bad_input_harness)
    (tmp_path / "nothing" / "r.json").write_text(json.dumps({"regex": "a", "tests": [{"text": "a", "valid": True}]}))
    with pytest.raises(HarnessError, match="no JSON-schema items"):
        run_audit(["llguidance"], tmp_path / "nothing", out=tmp_path / "r2", progress=False)


def test_a_schema_its_meta_schema_rejects_is_bad_not_blamed_on_the_engine(tmp_path: Path, tekken) -> None:
    """A schema no validator can judge by (``"type": 5``) is ``bad_schema`` with the
    meta-schema's message and where, before any engine call."""
    item = load_item(_item(tmp_path, "bad", {"type": "object", "properties": {"n": {"type": 5}}}))
    rec = audit_item(get_engine("llguidance", tekken), tekken, item, samples=2)
    assert rec["status"] == "bad_schema" and "/properties/n/type" in rec["detail"] and "not a JSON schema" in rec[
        "detail"]
    assert audit_table([rec]).loc["llguidance", "bad_schema"] == 1


def test_an_item_past_its_time_limit_is_a_timeout_and_the_run_goes_on(tmp_path: Path, tekken) -> None:
    """An engine whose compile takes 1.5 s, audited with a 0.5 s limit: ``timeout``,
    recorded with the limit; bad limits and counts are refused before anything runs."""
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    item = load_item(_item(tmp_path, "slow", dict(SCHEMA, description="masklab-test: slow")))
    rec = audit_item(FaultyEngine(tekken), tekken, item, samples=2, timeout=0.5)
    assert rec["status"] == "timeout" and "0.5 s" in rec["detail"] and rec["wall_s"] < 1.4
    for bad in ({"limit": 0}, {"timeout": 0}, {"samples": 0}, {"max_tokens": 0}):
        with pytest.raises(HarnessError, match=next(iter(bad))):
            run_audit(["llguidance"], tmp_path, out=tmp_path / "r", progress=False, **bad)


def test_the_worker_pool_gives_the_in_process_records_and_loses_only_a_crashed_item(tmp_path: Path) -> None:
    """``jobs=2``: the same walks (seeded per item and walk) as one process, so the same
    statuses, counts and counterexamples; a worker that dies of SIGSEGV loses its item
    only (``crash``, an audit-shaped record); ``run.json`` keeps the provenance, and a
    resume with another sampler is refused."""
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    data = tmp_path / "data"
    _item(data, "exact", SCHEMA)
    _item(data, "loose", dict(SCHEMA, description="masklab-test: loose"))
    engines = ["tests._support.faulty:FaultyEngine"]
    one = run_audit(engines, data, out=tmp_path / "one", samples=6, progress=False)
    _item(data, "crash", dict(SCHEMA, description="masklab-test: crash"))
    two = run_audit(engines, data, out=tmp_path / "two", samples=6, progress=False, jobs=2)
    keep = ["item", "status", "finished", "budget", "dead", "rejected", "invalid_accepted", "sampler", "dataset"]
    by_item = {r["item"]: r for r in two[keep].to_dict("records")}
    for r in one[keep].to_dict("records"):
        assert by_item[r["item"]] == r
    crashed = by_item["crash"]
    assert crashed["status"] == "crash" and crashed["dataset"] == "data"
    assert "signal 11" in two.set_index("item").loc["crash", "detail"]
    meta = json.loads((tmp_path / "two" / "run.json").read_text())
    assert meta["jobs"] == 2 and meta["samples"] == 6 and meta["finished"] and meta["seconds"] > 0
    assert "tests._support.faulty:FaultyEngine" in meta["engines"]
    with pytest.raises(HarnessError, match="sampler='uniform', not 'branch'"):
        run_audit(engines, data, out=tmp_path / "two", samples=6, sampler="branch", progress=False)


def test_the_branch_sampler_draws_each_first_byte_alike_and_finds_the_loose_engine(tmp_path: Path, tekken) -> None:
    """``sampler="branch"``: seeded, its walks end, and on a loose engine it finds the
    counterexamples; a token it draws is always one the mask allows."""
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    sampler = Sampler(tekken, 100, "branch")
    engine = get_engine("llguidance", tekken)
    c = engine.compile(SCHEMA)
    walks = [sampler.walk(engine.matcher(c), random.Random(3)) for _ in range(2)]
    assert walks[0] == walks[1] and walks[0][1] == "finished"
    item = load_item(_item(tmp_path, "loose", dict(SCHEMA, description="masklab-test: loose")))
    rec = audit_item(FaultyEngine(tekken), tekken, item, samples=8, seed=1, sampler=sampler)
    assert rec["status"] == "loosened"
    with pytest.raises(ValueError, match="sampler must be one of uniform, branch"):
        Sampler(tekken, 10, "rare")


def test_a_token_is_drawn_uniformly_among_the_set_bits() -> None:
    """The sampler's draw (:func:`_nth_bit`): always a set bit, each about equally often."""
    rng = random.Random(5)
    flags = np.zeros(96, dtype=bool)
    flags[[0, 5, 33, 63, 95]] = True
    words = bm.from_bool(flags.reshape(1, -1))[0].view(np.uint32)
    counts = collections.Counter(_nth_bit(words, rng) for _ in range(5000))
    assert set(counts) == {0, 5, 33, 63, 95} and min(counts.values()) > 850


def test_the_audit_figure_and_the_dataset_table(tmp_path: Path) -> None:
    """Per engine and dataset (MaskBench's name prefix, else the item's folder): loosened
    of compiled; the figure is written as PNG, and as PDF too when asked."""
    recs = [{"engine": "a", "item": "Github_easy---o1", "status": "loosened"},
            {"engine": "a", "item": "Github_easy---o2", "status": "sound"},
            {"engine": "a", "item": "BFCL_java_13", "status": "compile_error"},
            {"engine": "b", "item": "s01_x", "status": "sound", "dataset": "schemas"}]
    table = dataset_table(recs)
    assert table.loc[("a", "Github_easy"), "loosened %"] == 50.0
    assert table.loc[("a", "BFCL"), "refused"] == 1 and ("b", "schemas") in table.index
    fig = plot_audit(recs, tmp_path / "audit")
    assert len(fig.axes) >= 2 and (tmp_path / "audit.png").stat().st_size > 10_000
    assert not (tmp_path / "audit.pdf").exists()
    plot_audit(recs, tmp_path / "audit", pdf=True)
    assert (tmp_path / "audit.pdf").read_bytes().startswith(b"%PDF")


def test_a_walk_whose_matcher_stops_with_an_error_is_not_judged(tekken) -> None:
    """An engine that meets its own limit mid-walk (llguidance's ``LexerTooComplex``)
    leaves a matcher in an error state whose mask lets EOS through: the walk ends as
    ``error``, and its output is not taken for the engine's language."""

    class Stopped:
        error = "lexer error: too many expressions constructed"

        def fill_bitmask(self, row: np.ndarray) -> None:
            row[:] = 0
            row[0, tekken.eos_ids[0] // 32] = np.int32(1 << (tekken.eos_ids[0] % 32))

    assert Sampler(tekken, 10).walk(Stopped(), random.Random(0)) == ([], "error")


def test_the_judge_reads_patterns_as_ecma_262_does() -> None:
    """JSON Schema's ``pattern`` is ECMA-262: ``\\w`` and ``\\d`` are ASCII, ``\\s`` is
    Unicode.  Python's ``re`` (``jsonschema``'s default) takes ``к`` for a word
    character, so an output an exact engine wrote would look like a counterexample."""
    v = schema_validator({"type": "object", "patternProperties": {r"\w": {"type": "object"}}})
    assert _judge(v, '{"][ кос": 1}'.encode()) is None
    assert "is not of type 'object'" in _judge(v, b'{"a": 1}')[0]
    v = schema_validator({"type": "string", "pattern": r"^\d\s\S$", "minLength": 1})
    assert _judge(v, '"1\u00a0x"'.encode()) is None and "does not match" in _judge(v, '"١ x"'.encode())[0]
    v = schema_validator({"properties": {"a": {}}, "patternProperties": {"^x": {}}, "additionalProperties": False})
    assert _judge(v, b'{"a": 1, "xy": 2}') is None and "'z' was unexpected" in _judge(v, b'{"z": 3}')[0]


def test_the_judge_reads_multiple_of_in_exact_decimal_arithmetic() -> None:
    """``multipleOf`` divides the written decimals, as the spec says; jsonschema divides
    floats, and called 40167204677.34 (which all three of our strategies wrote on
    Github_easy---o46416) no multiple of 0.01."""
    v = schema_validator({"type": "number", "multipleOf": 0.01})
    assert _judge(v, b"40167204677.34") is None and _judge(v, b"0.07") is None
    assert "not a multiple of 0.01" in _judge(v, b"0.075")[0]
    v = schema_validator({"type": "integer", "multipleOf": 3})
    assert _judge(v, b"9") is None and "not a multiple" in _judge(v, b"10")[0]


def test_one_job_runs_peers_in_a_worker_under_the_memory_limit(monkeypatch) -> None:
    """``--jobs 1`` audits masklab's strategies in this process, but a peer engine in a
    worker process that the memory limit can stop (one grew to 23 GB here in-process)."""
    import toolkit.bench.audit as audit_mod
    from toolkit.bench.pool import InlinePool

    opened = []
    monkeypatch.setattr(audit_mod, "open_pool", lambda *a, **k: opened.append((a, k)) or "pool")
    make = lambda voc: object()  # noqa: E731 - a stand-in worker
    assert isinstance(audit_mod._audit_pool(make, None, "tekken", [], 1, "local", None, 30.0, 2.0), InlinePool)
    assert audit_mod._audit_pool(make, None, "tekken", [], 1, "local", None, 30.0, 2.0, inline_ok=False) == "pool"
    assert opened[0][0][6] == 2.0 * 2**30  # the worker's resident limit, in bytes


def test_respelled_instances_write_a_key_another_way_over_a_value_of_another_type() -> None:
    from toolkit.bench.audit import respelled_instances

    out = respelled_instances('{"a": 1, "b\u00e9": {"c": "x"}, "\U0001f600k": [1]}')
    assert out[0] == '{"\\u0061": "x", "b\u00e9": {"c": "x"}, "\U0001f600k": [1]}'
    assert json.loads(out[1]) == {"a": 1, "b\u00e9": "x", "\U0001f600k": [1]} and '"\\u0062\u00e9"' in out[1]
    assert '"\\ud83d\\ude00k": "x"' in out[2]
    assert json.loads(out[3]) == {"a": 1, "b\u00e9": {"c": 0}, "\U0001f600k": [1]}
    assert respelled_instances("not json") == [] and respelled_instances('{"a": 1}', most=0) == []


def test_respelled_keys_catch_an_engine_that_takes_a_listed_key_spelled_another_way(tmp_path: Path, tekken) -> None:
    """llguidance 1.9.1 takes ``{"a": 1, "\\u0062": 0}`` for properties ``a`` (an integer) and ``b``
    (a string) of an open object: another spelling of ``b`` passes as an additional
    property; our ``llguidance`` does not.  Only the respelled instances find it."""
    pytest.importorskip("llguidance", reason="peer:llguidance needs llguidance (the [peers] extra)")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    item = load_item(_item(tmp_path, "open", schema, [{"data": {"a": 1, "b": "x"}, "valid": True}]))
    peer = get_engine("peer:llguidance", tekken)
    plain = audit_item(peer, tekken, item, samples=2, seed=1)
    respelled = audit_item(peer, tekken, item, samples=2, seed=1, respell_keys=True)
    assert plain["status"] == "sound"
    assert respelled["status"] == "loosened", respelled
    # llguidance writes the additional properties after the listed ones: the respelled "b" is taken
    assert any(e["case"] == "respelled from 0" and e["text"] == '{"a": 1, "\\u0062": 0}'
               for e in respelled["invalid_accepted"]), respelled["invalid_accepted"]
    ours = audit_item(get_engine("llguidance", tekken), tekken, item, samples=2, seed=1, respell_keys=True)
    assert ours["status"] == "sound" and not ours["invalid_accepted"], ours
