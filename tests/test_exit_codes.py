"""The CLI's exit codes that say "the command ran, and found something" (1) or "it could
not run" (2), each triggered once (the others are in test_cli_errors.py):

* ``mask`` 1: the ``--prefix`` is rejected (the grammar does not allow it);
* ``generate`` 1: a run produced an invalid output (or a rejected one, an engine error,
  a prefix outside the grammar);
* ``diagnose late-match`` 1: a token only outlines allows that outlines-core's
  documented late match does not explain;
* ``report`` 2: nothing to report (a folder without records), or ``--axis`` outside a
  sweep folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.cli import main

OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def test_mask_exits_1_when_the_prefix_is_rejected(capsys) -> None:
    assert main(["mask", "--engine", "llguidance", "--regex", "a+", "--prefix", "ab"]) == 1
    assert "prefix rejected at token" in capsys.readouterr().err
    assert main(["mask", "--engine", "llguidance", "--regex", "a+", "--prefix", "aa"]) == 0


def test_generate_exits_1_when_an_output_is_invalid(tmp_path: Path, capsys) -> None:
    """A plug-in that compiles ``{"const": 0}`` for a string schema ("masklab-test:
    tight"): every output is ``0``, which the item's schema rejects."""
    pytest.importorskip("torch", reason="generate needs torch (the [model] extra)")
    pytest.importorskip("llguidance", reason="FaultyEngine is peer:llguidance (install .[peers])")
    data = tmp_path / "data"
    data.mkdir()
    schema = {"type": "string", "description": "masklab-test: tight"}
    (data / "tight.json").write_text(json.dumps({"schema": schema, "tests": [{"data": "x", "valid": True}]}))
    rc = main(["generate", "--engine", "tests._support.faulty:FaultyEngine", "--model", "sim:0.1:0", "--data",
               str(data), "--max-tokens", "4", "--no-compare-kernels", "--out", str(tmp_path / "gen")])
    out = capsys.readouterr().out
    assert rc == 1 and "invalid" in out
    seqs = [json.loads(s) for s in (tmp_path / "gen" / "tests._support.faulty-FaultyEngine" / "batch-1" /
                                    "sequences.jsonl").read_text().splitlines()]
    assert [s["status"] for s in seqs] == ["invalid"]


def test_diagnose_late_match_exits_1_on_an_unexplained_token(tmp_path: Path, capsys) -> None:
    """outlines' flexible JSON whitespace against outlines-core's ``[ ]?``: after ``{``
    only outlines allows a newline, which is no late match.  The run folder is made by
    hand (two records whose digests differ), so no benchmark runs."""
    pytest.importorskip("outlines_core", reason="peer:outlines-core needs outlines-core (the [peers] extra)")
    data = tmp_path / "data"
    data.mkdir()
    (data / "obj.json").write_text(json.dumps({"schema": OBJECT, "tests": [{"data": {"a": 1}, "valid": True}]}))
    run = tmp_path / "run"
    run.mkdir()
    meta = {"vocab": {"spec": "tekken"}, "data": str(data), "source": "native",
            "engines": {"outlines": {"requested_options": {}}, "peer:outlines-core": {"requested_options": {}}}}
    (run / "run.json").write_text(json.dumps(meta))
    (run / "records.jsonl").write_text("".join(
        json.dumps({"engine": e, "item": "obj", "status": "passing",
                    "cases": [{"valid": True, "ok": True, "digests": [d, "same"]}]}) + "\n"
        for e, d in (("outlines", "x"), ("peer:outlines-core", "y"))))
    assert main(["diagnose", "late-match", str(run)]) == 1
    out = capsys.readouterr().out
    assert "unexplained: obj" in out and '"unexplained": 0' not in out


def test_report_exits_2_when_it_cannot_report(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "no records.jsonl" in err and len(err.strip().splitlines()) == 1
    assert main(["report", str(empty), "--axis", "data"]) == 2
    assert "--axis is for a sweep folder" in capsys.readouterr().err
