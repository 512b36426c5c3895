"""Benchmark items in the MaskBench file format, and the embedded datasets.

A file holds one item: ``{"schema": ..., "tests": [{"data": ..., "valid": bool}]}``
for JSON Schema work (MaskBench / JSONSchemaBench), or the text of a grammar under its
format's dataset key (``{"lark": "..."}``, ``{"regex": "..."}``, ``{"gbnf": "..."}``: every
format registered in :mod:`toolkit.grammar.inputs`) with tests ``{"text": ...,
"valid": bool}``.  The instance text of a schema test is ``json.dumps(data)``, as
MaskBench tokenizes it.

Every file is checked when it is read (:func:`load_item`): what is not in the format is
a :class:`DatasetError` naming the file, the JSON pointer (``/tests/3/valid``) and what
was expected, and a folder without items is one too.  ``"tests": []`` is in the format
(195 MaskBench items have no test instance), but a command that judges items by their
instances (``masklab bench``, ``schema-coverage``) refuses such an item, as ``bench``,
``audit`` and ``schema-coverage`` refuse a schema its draft's meta-schema rejects
(:func:`usable_items`), unless told to leave them out (``--skip-bad-items``).
:func:`select_items` is the selection every command makes: the items of a dataset
(default: the embedded one, :func:`embedded_dir`), shuffled, cut, checked.

The module sits below the engines (the ``toolkit.data`` floor), so that the benchmark
and the decoding harness read the same items without one importing the other.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import toolkit.jsonschema  # noqa: F401 - registers the JSON Schema format
from toolkit.core.errors import HarnessError, MasklabError
from toolkit.grammar.inputs import InputFormat, format_for_key, formats
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.meta import meta_schema_problem

__all__ = ["Item", "Case", "load_item", "iter_items", "item_problem", "usable_items", "select_items", "embedded_dir", "EMBEDDED_APART",
           "shared_dir", "project_root", "DatasetError"]


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


_SCHEMA_KEYS = frozenset({"$schema", "type", "properties", "items", "$ref", "anyOf", "oneOf", "allOf", "enum", "const",
                          "$defs", "definitions", "required", "additionalProperties", "not", "if"})
"""Keywords that mark a file as a bare JSON schema (what :func:`load_item` then says)."""


def _where(path: Path, pointer: str) -> str:
    """How an error names a place in a dataset file: the file, then the JSON pointer."""
    return f"{path} at {pointer or '/'}"


def _shown(value: Any) -> str:
    """A value as an error shows it (JSON, at most 60 characters)."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_item(path: str | Path) -> Item:
    """The item of a MaskBench-format file (see the module doc).  Anything not in the
    format is a :class:`DatasetError` naming the file, the JSON pointer of the offending
    part and what was expected: no ``"tests"`` list (``"tests": []`` is an item without
    test instances, which a command judging items by them refuses:
    :func:`usable_items`), a test that is not an object, a ``"valid"`` that is not
    ``true`` or ``false`` (``"yes"``, ``1``), a test without its instance (``data``,
    ``text``)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from e
    if not isinstance(doc, dict):
        raise DatasetError(f"{_where(path, '')}: expected a JSON object, got {_shown(doc)}")
    keys = [f.key for f in formats()]
    kinds = [k for k in keys if k in doc]
    if len(kinds) != 1:
        bare = " (this file looks like a bare JSON schema)" if not kinds and _SCHEMA_KEYS & set(doc) else ""
        raise DatasetError(f"{path}: expected exactly one of {', '.join(repr(k) for k in keys)}{bare}: a dataset "
                           "item is an input with its test instances, e.g. {\"schema\": {...}, \"tests\": "
                           "[{\"data\": ..., \"valid\": true}]} (datasets/README.md)")
    kind = kinds[0]
    fmt = format_for_key(kind)
    if "tests" not in doc:
        raise DatasetError(f"{_where(path, '/tests')}: expected a list of test instances "
                           f"([{{\"{'data' if kind == 'schema' else 'text'}\": ..., \"valid\": true}}, ...]; "
                           "[] for an item without any), found no 'tests'")
    tests = doc["tests"]
    if not isinstance(tests, list):
        raise DatasetError(f"{_where(path, '/tests')}: expected a list of test instances, got {_shown(tests)}")
    cases = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            raise DatasetError(f"{_where(path, f'/tests/{i}')}: expected a test instance (an object with "
                               f"'valid'), got {_shown(t)}")
        if "valid" not in t:
            raise DatasetError(f"{_where(path, f'/tests/{i}/valid')}: expected true or false, found no 'valid'")
        if not isinstance(t["valid"], bool):
            raise DatasetError(f"{_where(path, f'/tests/{i}/valid')}: expected true or false, got {_shown(t['valid'])}")
        if kind == "schema" and "data" not in t:
            raise DatasetError(f"{_where(path, f'/tests/{i}/data')}: expected the test instance (any JSON value), "
                               "found no 'data'")
        try:
            text = fmt.case_text(t)
        except MasklabError as e:
            raise DatasetError(f"{_where(path, f'/tests/{i}')}: {e}") from None
        cases.append(Case(text, t["valid"], str(t.get("description", ""))))
    vocab = doc.get("vocab")
    if vocab is not None and not isinstance(vocab, str):
        raise DatasetError(f"{_where(path, '/vocab')}: expected a vocabulary name such as \"llama3\", got {_shown(vocab)}")
    return Item(path.stem, kind, doc[kind], tuple(cases), path, vocab, fmt.wrapper.__module__)


def iter_items(source: str | Path, limit: int | None = None) -> Iterator[Item]:
    """Items from a file, or from the ``*.json`` files under a folder and its subfolders
    (sorted by path); a folder holding none is a :class:`DatasetError`, as is a path
    that does not exist."""
    source = Path(source)
    if source.is_dir():
        paths = sorted(source.rglob("*.json"))
        if not paths:
            raise DatasetError(f"no dataset items in {source}: expected MaskBench-format *.json files in it "
                               "or its subfolders")
    elif source.is_file():
        paths = [source]
    else:
        raise DatasetError(f"no dataset at {source}")
    for n, p in enumerate(paths):
        if limit is not None and n >= limit:
            return
        yield load_item(p)


def item_problem(item: Item, *, tests: bool = False, schemas: bool = False) -> str | None:
    """Why ``item`` cannot be judged, or None: ``tests``: it has no test instance (a
    command judging items by their instances would count it passing on none);
    ``schemas``: a JSON-schema item whose schema its draft's meta-schema rejects
    (:func:`toolkit.jsonschema.meta.meta_schema_problem`: no validator can judge by it).
    The reason names the file and the JSON pointer."""
    path = item.path if item.path is not None else Path(item.name)
    if tests and not item.cases:
        return f"{_where(path, '/tests')}: expected at least one test instance, got []"
    if schemas and item.kind == "schema":
        problem = meta_schema_problem(item.spec)
        if problem is not None:
            by = f" by the {problem.draft} meta-schema" if problem.draft else ""
            return f"{_where(path, '/schema' + problem.pointer)}: not a JSON schema{by}: {problem.message}"
    return None


def usable_items(items: Iterable[Item], limit: int | None = None, *, tests: bool = False, schemas: bool = False,
                 skip: bool = False, command: str = "this command") -> list[Item]:
    """The first ``limit`` items (all: None) of ``items`` that ``command`` can judge
    (:func:`item_problem` with ``tests`` and ``schemas``), checked in order, only as many
    as are needed.  The first item it cannot judge is a :class:`DatasetError` saying why
    and where, unless ``skip``: then such items are left out, and a note on stderr names
    them (the first five) and says how many."""
    out: list[Item] = []
    left_out: list[str] = []
    for item in items:
        if limit is not None and len(out) >= limit:
            break
        why = item_problem(item, tests=tests, schemas=schemas) if tests or schemas else None
        if why is None:
            out.append(item)
        elif skip:
            left_out.append(why)
        else:
            raise DatasetError(f"{why}; {command} cannot judge such an item (--skip-bad-items leaves them out)")
    if left_out:
        print(f"note: {len(left_out)} item(s) left out (--skip-bad-items): " + "; ".join(left_out[:5])
              + (" ..." if len(left_out) > 5 else ""), file=sys.stderr)
    return out


def project_root() -> Path:
    """The folder holding ``setup.py`` (the checkout this package runs from)."""
    return Path(__file__).resolve().parents[2]


EMBEDDED_APART = "tools"
"""The folder of :func:`embedded_dir` that the embedded default leaves out: the
tool-calling setups (1 to 512 tools each), run with ``--data datasets/tools``."""


def embedded_dir() -> Path:
    """The project's own ``datasets/`` folder (as the default data: without
    :data:`EMBEDDED_APART`)."""
    return project_root() / "datasets"


def shared_dir() -> Path:
    """The shared folder (tokenizers, MaskBench data): ``MASKLAB_SHARED``, default
    ``../shared``; a relative value is read against :func:`project_root`, not the
    current directory.  It may not exist: callers say so when they need a file."""
    return (project_root() / Path(os.environ.get("MASKLAB_SHARED", "../shared")).expanduser()).resolve()


def select_items(data: str | Path | None, limit: int | None = None, seed: int | None = None,
                 vocab: str | None = None, *, tests: bool = False, schemas: bool = False, skip_bad: bool = False,
                 command: str = "this command") -> list[Item]:
    """The items of ``data`` (default: the embedded datasets, but their
    :data:`EMBEDDED_APART` folder), shuffled with ``seed``
    when given, then the first ``limit``; item names must be unique.  ``vocab`` (a
    vocabulary's name): items written for another vocabulary (:meth:`Item.fits`) are
    left out, and a note says which.  ``tests`` / ``schemas``: an item without test
    instances / a schema its draft's meta-schema rejects is a
    :class:`DatasetError` naming ``command``, or, with ``skip_bad``, left out (the next
    items fill the ``limit``): :func:`usable_items`."""
    source = Path(data) if data is not None else embedded_dir()
    items = list(iter_items(source))
    if source.resolve() == embedded_dir().resolve():  # the tool-calling setups are a workload of their own
        tools = embedded_dir() / EMBEDDED_APART
        items = [i for i in items if i.path is None or not i.path.resolve().is_relative_to(tools.resolve())]
    if vocab is not None:
        other = [i.name for i in items if not i.fits(vocab)]
        if other:
            print(f"note: {len(other)} item(s) written for another vocabulary left out on {vocab}: "
                  f"{', '.join(other[:5])}", file=sys.stderr)
            items = [i for i in items if i.fits(vocab)]
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise HarnessError(f"item names must be unique in {source}; repeated: {', '.join(dup[:5])}")
    if seed is not None:
        random.Random(seed).shuffle(items)
    if tests or schemas:
        return usable_items(items, None if limit is None else int(limit), tests=tests, schemas=schemas,
                            skip=skip_bad, command=command)
    if limit is not None:
        items = items[: int(limit)]
    return items
