"""``masklab audit`` (issue 44): random walks through an engine's masks, every finished
output validated with ``jsonschema``; a loosened language is found, a sound one is not."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from strategies import get_engine
from tests._support.faulty import FaultyEngine
from toolkit import cli
from toolkit.bench.audit import (
    UNDECIDED,
    Sampler,
    _judge,
    audit_item,
    audit_table,
    counterexamples,
    run_audit,
    schema_validator,
)
from toolkit.bench.datasets import embedded_dir, iter_items, load_item
from toolkit.core.errors import HarnessError
from toolkit.core.vocab import load_vocab

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
        ours = audit_item(get_engine(name, tekken), tekken, item, samples=16, seed=0)
        assert ours["status"] in ("sound", "compile_error"), (name, ours)


@pytest.mark.parametrize("name", ["llguidance", "xgrammar", "outlines", "glr"])
def test_our_strategies_are_sound_on_the_embedded_schemas(name: str, tekken) -> None:
    items = [i for i in iter_items(embedded_dir()) if i.kind == "schema" and i.fits("tekken")]
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
    (tmp_path / "nothing").mkdir()
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
