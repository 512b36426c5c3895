"""The registry of input formats: every way a grammar is written, in one place.

An :class:`InputFormat` says everything masklab needs of a format:

* its **wrapper**, the class of a text told apart (:class:`~toolkit.grammar.ir.RegexText`,
  :class:`~toolkit.grammar.lark_dialect.LarkText`, ``JsonSchemaText``, ``GbnfText``): a
  bare ``str`` could be any of them, so engines refuse one;
* its **reader** to the IR (:class:`~toolkit.grammar.ir.Grammar`), the language every
  masklab strategy compiles;
* its **dataset key** (``{"gbnf": "...", "tests": [...]}`` in a MaskBench-format file),
  its **CLI flag** (``masklab mask --gbnf FILE``) and its **file suffixes** (``--grammar
  FILE`` picks the format by suffix).

An engine declares the formats it reads with its own front end in ``native_inputs``
(``peer:llguidance`` reads Lark, ``peer:llama.cpp`` GBNF, every engine JSON Schema).
:func:`engine_input` is the one place that decides what an engine's ``compile`` is given
for an input: under ``source="native"`` the text itself when the engine reads that
format, the IR otherwise; under ``source="grammar"`` always the IR, so every engine runs
the very same language.  The harness, ``generate``, the ``transformers`` adapter, the
datasets and the CLI all go through it, so adding a format is one reader module and one
:func:`register_format` call.

Lark and regex register here, GBNF in :mod:`toolkit.grammar.gbnf` (``toolkit.grammar``
imports it) and JSON Schema in :mod:`toolkit.jsonschema`, a floor up, when it is imported
(the compiler hands itself down, as :mod:`toolkit.grammar.embed` describes;
``toolkit.Grammar``, ``strategies`` and the harness import it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toolkit.core.errors import MasklabError, UnsupportedGrammar
from toolkit.grammar.ir import Grammar, RegexText
from toolkit.grammar.lark_dialect import LarkText

__all__ = [
    "InputFormat",
    "register_format",
    "unregister_format",
    "formats",
    "get_format",
    "format_of",
    "format_for_key",
    "format_for_path",
    "wrap",
    "read",
    "engine_input",
    "is_native",
    "untold_text",
    "SOURCES",
]

SOURCES = ("native", "grammar")
"""What ``--source`` takes: ``native`` (an engine reads the formats it declares itself)
or ``grammar`` (every engine is given the IR)."""


def _text_case(test: Mapping[str, Any]) -> str:
    text = test.get("text")
    if not isinstance(text, str):
        raise MasklabError("needs a 'text' string")
    return text


@dataclass(frozen=True)
class InputFormat:
    """One input format (see the module doc).

    ``reader(spec, **options)`` turns a wrapped spec (``wrapper`` instance, or a value
    ``accepts`` admits) into a :class:`Grammar`; it is given only the options named in
    ``options`` (a JSON schema's ``whitespace``, ``spelling``...), so no option changes
    the meaning of a format that has none.  ``wrap`` turns a dataset value (the text
    under ``key``) into the spec; ``case_text`` reads a dataset test's instance text.
    ``arg`` says what the CLI flag takes: a ``file``, the ``text`` itself, or either
    (``file|json``: a schema file or its JSON).
    """

    name: str
    wrapper: type
    reader: Callable[..., Grammar]
    key: str
    flag: str
    suffixes: tuple[str, ...] = ()
    #: what the format is, in words ("a JSON schema (dict, bool or JsonSchemaText)")
    title: str = ""
    help: str = ""
    options: frozenset[str] = frozenset()
    arg: Literal["file", "text", "file|json"] = "file"
    wrap: Callable[[Any], Any] | None = None
    accepts: Callable[[Any], bool] | None = None
    case_text: Callable[[Mapping[str, Any]], str] = field(default=_text_case)

    def spec(self, value: Any) -> Any:
        """The spec an engine compiles for the dataset value ``value``."""
        return self.wrap(value) if self.wrap is not None else self.wrapper(value)

    def owns(self, spec: Any) -> bool:
        """Whether ``spec`` is of this format."""
        return isinstance(spec, self.wrapper) or (self.accepts is not None and self.accepts(spec))

    def read(self, spec: Any, **options: Any) -> Grammar:
        """The IR of ``spec`` (the options this format takes; others are dropped)."""
        return self.reader(spec, **{k: v for k, v in options.items() if k in self.options})

    def text(self, spec: Any) -> str:
        """The text of ``spec`` as the engine that reads the format is handed it."""
        text = getattr(spec, "text", None)
        return text if isinstance(text, str) else json.dumps(spec)


_FORMATS: dict[str, InputFormat] = {}


def register_format(fmt: InputFormat, *, replace: bool = False) -> None:
    """Add ``fmt`` to the registry.  Its name, key, flag and suffixes must be its own
    (``replace``: a format of the same name is replaced, as a module reloaded does)."""
    old = _FORMATS.get(fmt.name)
    if old is not None and not replace and old != fmt:
        raise ValueError(f"input format {fmt.name!r} is registered already")
    for other in _FORMATS.values():
        if other.name == fmt.name:
            continue
        clash = ({other.key} & {fmt.key} or {other.flag} & {fmt.flag} or set(other.suffixes) & set(fmt.suffixes)
                 or ({other.wrapper} & {fmt.wrapper}))
        if clash:
            raise ValueError(f"input format {fmt.name!r}: {sorted(map(str, clash))} belongs to {other.name!r}")
    _FORMATS[fmt.name] = fmt


def unregister_format(name: str) -> None:
    """Remove a format (a test's toy format)."""
    _FORMATS.pop(name, None)


def formats() -> list[InputFormat]:
    """The registered formats, in registration order."""
    return list(_FORMATS.values())


def _names() -> str:
    return ", ".join(f.name for f in formats())


def get_format(name: str) -> InputFormat:
    """The format named ``name``; ValueError listing the registered ones otherwise."""
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown input format {name!r}; registered: {_names()}") from None


def format_for_key(key: str) -> InputFormat:
    """The format a dataset file's key (``schema``, ``lark``, ``regex``, ``gbnf``) names."""
    for f in formats():
        if f.key == key:
            return f
    raise ValueError(f"no input format has the dataset key {key!r}; keys: {', '.join(f.key for f in formats())}")


def format_for_path(path: str | Path) -> InputFormat:
    """The format of a grammar file, by its suffix (the longest that a format names:
    ``.stag.json`` is a structural tag, ``.json`` a JSON schema)."""
    name = Path(path).name.lower()
    suffix = Path(path).suffix.lower()
    ends = sorted(((s, f) for f in formats() for s in f.suffixes if name.endswith(s)), key=lambda p: -len(p[0]))
    if ends:
        return ends[0][1]
    known = ", ".join(f"{s} ({f.name})" for f in formats() for s in f.suffixes)
    raise MasklabError(f"{path}: no input format reads files ending in {suffix or '(no suffix)'!r}; known: {known}")


def format_of(spec: Any) -> InputFormat | None:
    """The format of ``spec`` (a wrapper instance, or a value a format accepts: a JSON
    schema as a dict or bool); None for a :class:`Grammar` and anything else."""
    if isinstance(spec, Grammar):
        return None
    for f in formats():
        if f.owns(spec):
            return f
    return None


def wrap(key: str, value: Any) -> Any:
    """The spec for ``value`` found under the dataset key ``key``."""
    return format_for_key(key).spec(value)


def untold_text(engine: str, text: str) -> UnsupportedGrammar:
    """The error for a bare ``str`` given to ``engine``'s ``compile``: it names every
    registered wrapper."""
    head = text if len(text) <= 40 else text[:37] + "..."
    kinds = ", ".join(f.title or f.name for f in formats())
    wrappers = ", ".join(f"{f.wrapper.__name__}(text) ({f.wrapper.__module__})" for f in formats())
    return UnsupportedGrammar(
        f"{engine}: compile() got a str ({head!r}), which could be the text of any input format ({kinds}); "
        f"say which: {wrappers}, or a Grammar"
    )


def read(spec: Any, *, engine: str = "masklab", **options: Any) -> Grammar:
    """The IR of ``spec``: a :class:`Grammar` as it is, a spec of a registered format
    through its reader (``options`` that the format takes, such as a schema's
    ``whitespace``).  A bare ``str`` and any other value are an
    :class:`~toolkit.core.errors.UnsupportedGrammar` naming ``engine`` and the formats."""
    if isinstance(spec, Grammar):
        return spec
    if isinstance(spec, str):
        raise untold_text(engine, spec)
    fmt = format_of(spec)
    if fmt is None and isinstance(spec, Mapping | bool) and "json_schema" not in _FORMATS:
        raise UnsupportedGrammar("a JSON schema needs the compiler: import toolkit.jsonschema "
                                 "(toolkit.Grammar, strategies and the harness do)")
    if fmt is None:
        kinds = ", ".join(f.title or f.name for f in formats())
        raise UnsupportedGrammar(f"{engine} compiles a toolkit Grammar or an input of a registered format "
                                 f"({kinds}), not {type(spec).__name__}")
    return fmt.read(spec, **options)


def is_native(engine: Any, spec: Any, source: str = "native") -> bool:
    """Whether ``engine`` compiles ``spec`` with its own front end under ``source``: the
    source is ``native`` and the engine lists the spec's format in ``native_inputs``."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r}: expected one of {', '.join(SOURCES)}")
    fmt = format_of(spec)
    return fmt is not None and source == "native" and fmt.name in getattr(engine, "native_inputs", ())


def engine_input(engine: Any, spec: Any, source: str = "native", **options: Any) -> Any:
    """What ``engine.compile`` is given for ``spec``: under ``source="native"`` the spec
    itself when ``engine.native_inputs`` lists its format (the engine's own front end),
    the IR otherwise; under ``source="grammar"`` the IR always (``options`` go to the
    reader, e.g. the schema compiler's).  Used by the harness, ``generate``, the adapter
    and the CLI, so no two of them decide it differently."""
    if is_native(engine, spec, source):
        return spec
    return read(spec, engine=getattr(engine, "name", "masklab"), **options)


def _read_lark(spec: LarkText) -> Grammar:
    return Grammar.from_lark(spec.text)


def _read_regex(spec: RegexText) -> Grammar:
    return Grammar.from_regex(spec.text)


def _register(items: Iterable[InputFormat]) -> None:
    for f in items:
        register_format(f, replace=True)


_register([
    InputFormat("regex", RegexText, _read_regex, key="regex", flag="--regex", suffixes=(".regex", ".rx"),
                help="a regex (Python re syntax, ASCII classes)", arg="text", title="a regex (RegexText)"),
    InputFormat("lark", LarkText, _read_lark, key="lark", flag="--lark", suffixes=(".lark",),
                help="a Lark grammar file (llguidance's dialect)", title="Lark (LarkText)"),
])
