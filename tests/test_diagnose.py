"""``masklab diagnose``: an engine's rejected instances against its item's own grammar,
and outlines-core's late matches (toolkit.bench.diagnose), on real bench runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.bench.diagnose import VERDICTS, DiagnoseError, grammar_verdicts, late_matches
from toolkit.bench.run import run_bench
from toolkit.cli import main

# outlines (ours) rejects both valid instances: a lone surrogate, which the schema
# compiler's grammar leaves out too (exact or tighter), and an array nested past the
# regex's max_depth of 3, which the grammar accepts (the strategy is tighter)
ITEMS = {
    "lone_surrogate": {"schema": {"type": "string"},
                       "tests": [{"data": "a", "valid": True}, {"data": "\ud800", "valid": True}]},
    "deep": {"schema": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#"}}]},
             "tests": [{"data": [1], "valid": True}, {"data": [[[[[1]]]]], "valid": True}]},
}


@pytest.fixture(scope="module")
def rejects_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diagnose")
    for name, item in ITEMS.items():
        (root / "data").mkdir(exist_ok=True)
        (root / "data" / f"{name}.json").write_text(json.dumps(item))
    run_bench(["outlines"], root / "data", out=root / "run", progress=False)
    return root / "run"


def test_rejected_instances_get_their_grammars_verdict(rejects_run: Path, capsys) -> None:
    table = grammar_verdicts(rejects_run, "outlines")
    got = {(r.item, r.case): r.verdict for r in table.itertuples()}
    assert got == {("lone_surrogate", 1): VERDICTS[0], ("deep", 1): VERDICTS[1]}
    assert main(["diagnose", "rejects", str(rejects_run), "--engine", "outlines"]) == 0
    out = capsys.readouterr().out
    assert "2 rejected valid instance(s) in 2 item(s)" in out and "deep case 1: grammar accepts" in out
    with pytest.raises(DiagnoseError, match="no records of engine 'llguidance'.*outlines"):
        grammar_verdicts(rejects_run, "llguidance")
    assert main(["diagnose", "rejects", str(rejects_run.parent), "--engine", "outlines"]) == 2  # not a run


def test_an_item_masklab_cannot_build_gets_no_grammar_verdict(rejects_run: Path, monkeypatch) -> None:
    from toolkit.core.errors import UnsupportedSchema
    from toolkit.data.datasets import Item

    def refuse(self, **options):
        raise UnsupportedSchema("a keyword masklab's compiler refuses", "/x")

    monkeypatch.setattr(Item, "grammar", refuse)
    table = grammar_verdicts(rejects_run, "outlines")
    assert set(table["verdict"]) == {VERDICTS[3]} and len(table) == 2


def test_late_matches_explain_outlines_core_s_missing_tokens(tmp_path: Path, capsys) -> None:
    pytest.importorskip("outlines_core", reason="peer:outlines-core needs outlines-core (the [peers] extra)")
    data = tmp_path / "data"
    data.mkdir()
    literals = {"regex": "(true|false|null)(,(true|false|null))*",
                "tests": [{"text": "true,null", "valid": True}, {"text": "false", "valid": True},
                          {"text": "true,", "valid": False}]}
    (data / "literals.json").write_text(json.dumps(literals))
    run_bench(["outlines", "peer:outlines-core"], data, out=tmp_path / "run", progress=False)
    out = late_matches(tmp_path / "run")
    # after "true", outlines-core's index leaves out "," (EOS only): a late match
    assert out["items"] == 1 and out["differing_steps"] >= 1 and out["late_match"] >= 1
    assert out["unexplained"] == 0 and out["only_peer"] == 0
    assert main(["diagnose", "late-match", str(tmp_path / "run")]) == 0
    assert '"late_match": ' in capsys.readouterr().out
    with pytest.raises(DiagnoseError, match="'peer:outlines-core' is not an outlines engine"):
        late_matches(tmp_path / "run", ours="peer:outlines-core", peer="outlines")
