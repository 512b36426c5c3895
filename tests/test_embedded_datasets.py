"""The embedded datasets (``datasets/``): every item is well-formed and every test agrees.

* schemas: each instance's verdict is the ``jsonschema`` package's (with format
  checking), and the project's compiler accepts ``json.dumps(data)`` exactly then;
* Lark grammars: ``Grammar.from_lark`` accepts each text exactly when the item says,
  and so does llguidance running ``Grammar.to_lark()`` over a byte tokenizer;
* regexes: ``Grammar.from_regex`` and Python's ``re.fullmatch`` agree with the item.

Tests are parametrized over the files, so a failure names the item.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from tests._support.fixtures import llguidance_byte_tokenizer
from toolkit.data.datasets import embedded_dir, iter_items, load_item
from toolkit.grammar.ir import Grammar

ROOT = embedded_dir()
FOLDERS = {"schemas": "schema", "grammars": "lark", "regex": "regex"}
MIN_COUNTS = {"schemas": 40, "grammars": 6, "regex": 5}


def _files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.json"))


def _params(folder: str) -> list:
    return [pytest.param(p, id=p.stem) for p in _files(folder)]


def _doc(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _cases(path: Path) -> list[tuple[str, object, bool]]:
    """(label, test payload, valid) for each test of the file; the label names it."""
    doc = _doc(path)
    key = "data" if "schema" in doc else "text"
    return [
        (f"{path.stem}[{i}] {t.get('description', '')!r}", t[key], t["valid"])
        for i, t in enumerate(doc["tests"])
    ]


# ------------------------------------------------------------ the collection --


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_counts(folder: str) -> None:
    items = list(iter_items(ROOT / folder))
    assert len(items) >= MIN_COUNTS[folder], f"{folder}: only {len(items)} items"
    assert {it.kind for it in items} == {FOLDERS[folder]}


def test_names_are_unique_across_folders() -> None:
    stems = [p.stem for folder in FOLDERS for p in _files(folder)]
    assert len(stems) == len(set(stems)), sorted(s for s in stems if stems.count(s) > 1)


# (fewest, most) valid and invalid tests per item, by folder.
TEST_COUNTS = {"schemas": (2, 4), "grammars": (3, 5), "regex": (2, 6)}


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_items_are_well_formed(folder: str) -> None:
    lo, hi = TEST_COUNTS[folder]
    for path in _files(folder):
        doc = _doc(path)
        item = load_item(path)
        assert item.name == path.stem
        assert isinstance(doc.get("description"), str) and doc["description"], path.name
        assert all(isinstance(t["valid"], bool) for t in doc["tests"]), path.name
        assert all(t.get("description") for t in doc["tests"]), f"{path.name}: a test has no description"
        valid = sum(c.valid for c in item.cases)
        invalid = len(item.cases) - valid
        assert lo <= valid <= hi and lo <= invalid <= hi, f"{path.name}: {valid} valid, {invalid} invalid"
        if folder == "schemas":
            # Kept short: the benchmark tokenizes every instance.
            for c in item.cases:
                assert len(c.text) <= 650, f"{path.name}: {c.description!r} is {len(c.text)} chars"


# ------------------------------------------------------------------ schemas --


@pytest.mark.parametrize("path", _params("schemas"))
def test_schema_tests_agree_with_jsonschema(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema ([test] extra) not installed")
    schema = _doc(path)["schema"]
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=jsonschema.FormatChecker())
    for label, data, valid in _cases(path):
        assert validator.is_valid(data) == valid, label


@pytest.mark.parametrize("path", _params("schemas"))
def test_schema_compiles_and_agrees(path: Path) -> None:
    item = load_item(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict: nothing dropped with a warning
        g = Grammar.from_json_schema(item.spec)
    assert not g.is_empty()
    for label, data, valid in _cases(path):
        assert g.accepts(json.dumps(data)) == valid, label


# ----------------------------------------------------------------- grammars --


@pytest.mark.parametrize("path", _params("grammars"))
def test_lark_grammar_agrees(path: Path) -> None:
    item = load_item(path)
    g = Grammar.from_lark(item.spec)
    for label, text, valid in _cases(path):
        assert g.accepts(text) == valid, label


@pytest.fixture(scope="module")
def llg():
    """llguidance and a tokenizer whose tokens are the 256 bytes (plus EOS)."""
    return llguidance_byte_tokenizer()


@pytest.mark.parametrize("path", _params("grammars"))
def test_lark_grammar_agrees_with_llguidance(path: Path, llg) -> None:
    llguidance, tok = llg
    lark_text = Grammar.from_lark(load_item(path).spec).to_lark()
    grammar = llguidance.grammar_from("lark", lark_text)
    err = llguidance.LLMatcher.validate_grammar(grammar, tok)
    assert not err, f"{path.stem}: llguidance rejects the grammar: {err}"
    for label, text, valid in _cases(path):
        m = llguidance.LLMatcher(tok, grammar)
        consumed = m.consume_tokens(list(text.encode()))
        accepted = bool(consumed) and not m.is_error() and m.is_accepting()
        assert accepted == valid, f"{label}: llguidance says {accepted} ({m.get_error()})"


# ------------------------------------------------------------------- regexes --


@pytest.mark.parametrize("path", _params("regex"))
def test_regex_agrees(path: Path) -> None:
    item = load_item(path)
    g = Grammar.from_regex(item.spec)
    rx = re.compile(item.spec)
    for label, text, valid in _cases(path):
        assert (rx.fullmatch(text) is not None) == valid, f"{label} (re)"
        assert g.accepts(text) == valid, f"{label} (Grammar.from_regex)"
