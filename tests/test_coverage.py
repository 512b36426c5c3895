"""The MaskBench loader and the schema-coverage command, on real MaskBench files."""

from __future__ import annotations

import json

import pytest

from tests._support.shared import require_shared
from toolkit.bench.coverage import schema_coverage, summarize
from toolkit.cli import main
from toolkit.data.datasets import DatasetError, iter_items, load_item


def test_load_item_formats(tmp_path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"schema": {"type": "integer"}, "tests": [{"data": 1, "valid": True}, {"data": "x", "valid": False}]}))
    item = load_item(p)
    assert item.kind == "schema" and [c.text for c in item.cases] == ["1", '"x"']
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"lark": 'start: "a"', "tests": [{"text": "a", "valid": True}]}))
    assert load_item(g).grammar().accepts("a")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": {}, "lark": "x"}))
    with pytest.raises(DatasetError):
        load_item(bad)
    with pytest.raises(DatasetError):
        list(iter_items(tmp_path / "missing"))


def test_coverage_on_maskbench_sample(capsys) -> None:
    folder = require_shared("datasets/maskbench")
    results = schema_coverage(folder, limit=25, timeout=20)
    assert len(results) == 25
    assert not [r for r in results if r.status in ("crash", "invalidation_error")], summarize(results)
    assert sum(r.status == "passing" for r in results) >= 20
    pytest.importorskip("llguidance", reason="llguidance ([peers] extra) not installed")
    assert main(["schema-coverage", "--data", str(folder), "--limit", "3", "--quiet", "--check-lark"]) == 0
    out = capsys.readouterr().out
    assert "invalidation errors" in out and "schemas              3" in out
    assert "to_lark() accepted by llguidance" in out


def test_coverage_statuses_and_causes(tmp_path) -> None:
    """Unsatisfiable schemas are their own status (a validation error when the dataset
    has a valid instance), and a rejected valid instance gets its cause."""
    items = {
        "empty": ({"type": "string", "minLength": 3, "maxLength": 1}, [("x", False)]),
        "empty_but_valid": ({"type": "string", "minLength": 3, "maxLength": 1}, [("x", True)]),
        "order": ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
                  [({"b": 1, "a": 2}, True), ({"a": 1}, True)]),
        "escaped": ({"type": "object", "additionalProperties": {"type": "integer"}}, [({'q"': 1}, True)]),
    }
    for name, (schema, cases) in items.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"schema": schema, "tests": [
            {"data": d, "valid": v} for d, v in cases]}))
    results = {r.name: r for r in schema_coverage(tmp_path, timeout=20)}
    assert results["empty"].status == "unsatisfiable" and results["empty"].detail == "minLength"
    assert results["empty_but_valid"].status == "validation_error"
    assert results["empty_but_valid"].causes == ["called unsatisfiable"]
    assert results["order"].causes == ["property order"]
    assert results["escaped"].causes == ["escaped key"]
    text = summarize(list(results.values()))
    assert "unsatisfiable        1" in text and "compiled             3" in text  # (a wrong verdict counts)
    assert "by cause:" in text and "seconds per schema" in text and "slowest 10" in text
    # naming a cause compiles the schema again, in any order: timed apart from the compile
    assert results["order"].cause_seconds > 0 and results["order"].seconds > 0
    assert results["escaped"].cause_seconds > 0 and results["empty"].cause_seconds == 0
    # in any order, the order case passes; from the CLI too
    anyway = {r.name: r for r in schema_coverage(tmp_path, timeout=20, property_order="any")}
    assert anyway["order"].status == "passing" and anyway["escaped"].status == "validation_error"
    assert main(["schema-coverage", "--data", str(tmp_path / "order.json"), "--quiet", "--property-order", "any"]) == 0
    assert main(["schema-coverage", "--data", str(tmp_path / "order.json"), "--quiet"]) == 0
