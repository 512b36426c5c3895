"""Benchmark items in the MaskBench file format, and the embedded datasets.

A file holds one item: ``{"schema": ..., "tests": [{"data": ..., "valid": bool}]}``
for JSON Schema work (MaskBench / JSONSchemaBench), or ``{"lark": "..."}`` /
``{"regex": "..."}`` with tests ``{"text": ..., "valid": bool}``.  The instance text
of a schema test is ``json.dumps(data)``, as MaskBench tokenizes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.core.errors import MasklabError
from toolkit.grammar.ir import Grammar, RegexText
from toolkit.grammar.lark_dialect import LarkText
from toolkit.jsonschema.compiler import from_json_schema

__all__ = ["Item", "Case", "load_item", "iter_items", "embedded_dir", "DatasetError"]


class DatasetError(MasklabError):
    """A dataset file that is not in the MaskBench format."""


@dataclass(frozen=True)
class Case:
    """One test instance: its text, whether it is valid, and its description."""

    text: str
    valid: bool
    description: str = ""


@dataclass(frozen=True)
class Item:
    """One schema, grammar or regex with its test instances."""

    name: str
    kind: str  # "schema" | "lark" | "regex"
    spec: Any
    cases: tuple[Case, ...] = field(default=())
    path: Path | None = None
    #: the vocabulary the item is written for (``"llama3"``: a grammar naming Llama 3's
    #: special tokens), or None for any; runs on another vocabulary leave it out
    vocab: str | None = None

    def fits(self, vocab_name: str) -> bool:
        """Whether the item can run on the vocabulary named ``vocab_name`` (``llama3``,
        ``tekken``, ``hf:PATH``...): any, or its own family (the part before ``:``)."""
        return self.vocab is None or vocab_name.split(":")[0] == self.vocab or vocab_name == self.vocab

    def grammar(self, **options: Any):
        """The item's :class:`~toolkit.grammar.Grammar` (options go to the builder)."""
        if self.kind == "schema":
            return from_json_schema(self.spec, **options)
        if self.kind == "lark":
            return Grammar.from_lark(self.spec)
        return Grammar.from_regex(self.spec)

    def source(self) -> Any:
        """The item as written, told apart for an engine's ``compile``: the schema (a
        dict or bool), :class:`~toolkit.grammar.lark_dialect.LarkText` or
        :class:`~toolkit.grammar.RegexText` (a bare ``str`` would not say which)."""
        if self.kind == "lark":
            return LarkText(self.spec)
        if self.kind == "regex":
            return RegexText(self.spec)
        return self.spec


def load_item(path: str | Path) -> Item:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: expected a JSON object")
    kinds = [k for k in ("schema", "lark", "regex") if k in doc]
    if len(kinds) != 1:
        raise DatasetError(f"{path}: expected exactly one of 'schema', 'lark', 'regex'")
    kind = kinds[0]
    cases = []
    for i, t in enumerate(doc.get("tests", [])):
        if not isinstance(t, dict) or "valid" not in t:
            raise DatasetError(f"{path}: tests[{i}] needs 'valid'")
        if kind == "schema":
            if "data" not in t:
                raise DatasetError(f"{path}: tests[{i}] needs 'data'")
            text = json.dumps(t["data"])
        else:
            if not isinstance(t.get("text"), str):
                raise DatasetError(f"{path}: tests[{i}] needs a 'text' string")
            text = t["text"]
        cases.append(Case(text, bool(t["valid"]), str(t.get("description", ""))))
    vocab = doc.get("vocab")
    if vocab is not None and not isinstance(vocab, str):
        raise DatasetError(f"{path}: 'vocab' must be a vocabulary name such as \"llama3\"")
    return Item(path.stem, kind, doc[kind], tuple(cases), path, vocab)


def iter_items(source: str | Path, limit: int | None = None) -> Iterator[Item]:
    """Items from a file, or from the ``*.json`` files under a folder and its subfolders
    (sorted by path)."""
    source = Path(source)
    if source.is_dir():
        paths = sorted(source.rglob("*.json"))
    elif source.is_file():
        paths = [source]
    else:
        raise DatasetError(f"no dataset at {source}")
    for n, p in enumerate(paths):
        if limit is not None and n >= limit:
            return
        yield load_item(p)


def project_root() -> Path:
    """The folder holding ``setup.py`` (the checkout this package runs from)."""
    return Path(__file__).resolve().parents[2]


def embedded_dir() -> Path:
    """The project's own ``datasets/`` folder."""
    return project_root() / "datasets"


def shared_dir() -> Path:
    """The shared folder (tokenizers, MaskBench data): ``MASKLAB_SHARED``, default
    ``../shared``; a relative value is read against :func:`project_root`, not the
    current directory.  It may not exist: callers say so when they need a file."""
    return (project_root() / Path(os.environ.get("MASKLAB_SHARED", "../shared")).expanduser()).resolve()
