"""The tool-calling dataset (issue 48, ``datasets/tools/``, written by
``scripts/tools/make_dataset.py``): every transcript's verdict is masklab's reading of
its structural tag and xgrammar's own; the setups hold what the script says; the
embedded default leaves them out (a workload of their own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toolkit.jsonschema  # noqa: F401 - a structural tag's JSON schemas need the compiler
from toolkit.data.datasets import EMBEDDED_APART, embedded_dir, select_items
from toolkit.grammar.structural_tag import read_structural_tag

TOOLS = embedded_dir() / EMBEDDED_APART
FILES = sorted(TOOLS.glob("*.json"))


def test_the_setups_are_there() -> None:
    names = {p.stem for p in FILES}
    assert names == {f"tools-{m}-{n}" for m in ("llama", "qwen_3", "deepseek_v3_1") for n in (1, 8, 64, 512)}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_transcripts_verdict_is_the_readings_and_xgrammars(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    n = int(path.stem.rsplit("-", 1)[1])
    tags = json.dumps(doc["structural_tag"])
    assert tags.count('"json_schema"') >= n  # one argument schema per tool
    tests = doc["tests"]
    assert sum(t["valid"] for t in tests) >= 4 and sum(not t["valid"] for t in tests) >= 3
    g = read_structural_tag(doc["structural_tag"])
    assert [g.accepts(t["text"].encode()) for t in tests] == [t["valid"] for t in tests]
    try:
        import xgrammar as xgr
        from xgrammar.testing import _is_grammar_accept_string
    except ImportError:
        return
    xg = xgr.Grammar.from_structural_tag(doc["structural_tag"])
    assert [_is_grammar_accept_string(xg, t["text"]) for t in tests] == [t["valid"] for t in tests]


def test_the_embedded_default_leaves_the_tool_setups_out() -> None:
    default = {i.name for i in select_items(None)}
    assert default == {i.name for i in select_items(str(embedded_dir()))}
    tools = {i.name for i in select_items(str(TOOLS))}
    assert len(tools) == 12 and not tools & default
