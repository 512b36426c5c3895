"""Benchmark items in the MaskBench file format, and the embedded datasets.

A file holds one item: ``{"schema": ..., "tests": [{"data": ..., "valid": bool}]}``
for JSON Schema work (MaskBench / JSONSchemaBench), or the text of a grammar under its
format's dataset key (``{"lark": "..."}``, ``{"regex": "..."}``, ``{"gbnf": "..."}``: every
format registered in :mod:`toolkit.grammar.inputs`) with tests ``{"text": ...,
"valid": bool}``.  The instance text of a schema test is ``json.dumps(data)``, as
MaskBench tokenizes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import toolkit.jsonschema  # noqa: F401 - registers the JSON Schema format
from toolkit.core.errors import MasklabError
from toolkit.grammar.inputs import InputFormat, format_for_key, formats
from toolkit.grammar.ir import Grammar

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
    kind: str  # the format's dataset key: "schema" | "lark" | "regex" | "gbnf" | ...
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

    #: the module that registers the item's format, imported where the item is read and
    #: the format is not registered yet (a worker process, a Ray actor: a plug-in's format)
    module: str | None = None

    @property
    def format(self) -> InputFormat:
        """The item's input format (:mod:`toolkit.grammar.inputs`), by its dataset key."""
        try:
            return format_for_key(self.kind)
        except ValueError:
            if self.module is None:
                raise
            import_module(self.module)
            return format_for_key(self.kind)

    def grammar(self, **options: Any) -> Grammar:
        """The item's :class:`~toolkit.grammar.Grammar` (options go to the reader: a
        schema's ``whitespace``, ``spelling``...)."""
        return self.format.read(self.source(), **options)

    def source(self) -> Any:
        """The item as written, told apart for an engine's ``compile``: the schema (a
        dict or bool), or the text in its format's wrapper
        (:class:`~toolkit.grammar.lark_dialect.LarkText`, :class:`~toolkit.grammar.RegexText`,
        ``GbnfText``...: a bare ``str`` would not say which)."""
        return self.format.spec(self.spec)


def load_item(path: str | Path) -> Item:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"{path}: expected a JSON object")
    keys = [f.key for f in formats()]
    kinds = [k for k in keys if k in doc]
    if len(kinds) != 1:
        raise DatasetError(f"{path}: expected exactly one of {', '.join(repr(k) for k in keys)}")
    kind = kinds[0]
    fmt = format_for_key(kind)
    cases = []
    for i, t in enumerate(doc.get("tests", [])):
        if not isinstance(t, dict) or "valid" not in t:
            raise DatasetError(f"{path}: tests[{i}] needs 'valid'")
        try:
            text = fmt.case_text(t)
        except MasklabError as e:
            raise DatasetError(f"{path}: tests[{i}] {e}") from None
        cases.append(Case(text, bool(t["valid"]), str(t.get("description", ""))))
    vocab = doc.get("vocab")
    if vocab is not None and not isinstance(vocab, str):
        raise DatasetError(f"{path}: 'vocab' must be a vocabulary name such as \"llama3\"")
    return Item(path.stem, kind, doc[kind], tuple(cases), path, vocab, fmt.wrapper.__module__)


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
