"""``masklab vocab``, ``mask`` and ``accepts``: look at a vocabulary,
one mask, one verdict."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from strategies import get_engine
from toolkit.cli.common import add_option_arg, checked_options
from toolkit.core import bitmask as bm
from toolkit.core.bpe import describe as describe_bpe
from toolkit.core.errors import MasklabError
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import load_vocab
from toolkit.grammar.inputs import (
    SOURCES,
    InputFormat,
    engine_input,
    format_for_path,
    formats,
    read,
)
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema import (
    JsonSchemaText,  # importing the compiler registers --schema (the json_schema format)
)

__all__ = ["DEFAULT_MASK_ENGINE", "JsonSchemaText", "configure"]

DEFAULT_MASK_ENGINE = "llguidance"
"""``masklab mask``'s engine: masklab's fast one that reads every input format (``naive``,
the oracle, checks every token and is for the tests)."""


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` to its parser."""
    if name == "vocab":
        p.add_argument("spec", nargs="?", default="tekken", help="tekken | llama3:PATH | hf:PATH (default: tekken)")
        p.set_defaults(func=_vocab)
    elif name == "mask":
        p.add_argument("--vocab", default="tekken", help="vocabulary spec (default: tekken)")
        p.add_argument("--engine", default=DEFAULT_MASK_ENGINE, help=f"engine name (default: {DEFAULT_MASK_ENGINE})")
        p.add_argument("--prefix", default="", help="text already generated (tokenized canonically)")
        p.add_argument("--show", type=int, default=20, help="how many allowed tokens to list")
        p.add_argument("--source", choices=SOURCES, default="native",
                       help="native: the engine reads a format it declares itself; grammar: masklab's reading "
                            "(default: native)")
        add_option_arg(p, "outlines.grammar_max_depth=3")
        _grammar_args(p)
        p.set_defaults(func=_mask)
    elif name == "accepts":
        _grammar_args(p)
        p.add_argument("text")
        p.set_defaults(func=_accepts)


def _dest(fmt: InputFormat) -> str:
    return fmt.flag.lstrip("-").replace("-", "_")


def _grammar_args(p: argparse.ArgumentParser) -> None:
    """One flag per registered input format (:mod:`toolkit.grammar.inputs`), and ``--grammar``."""
    g = p.add_mutually_exclusive_group(required=True)
    for fmt in formats():
        g.add_argument(fmt.flag, dest=_dest(fmt), metavar={"file": "FILE", "text": "TEXT"}.get(fmt.arg, "FILE|JSON"),
                       help=fmt.help)
    suffixes = ", ".join(f"{x} ({f.name})" for f in formats() for x in f.suffixes)
    g.add_argument("--grammar", metavar="FILE", help=f"a grammar file of the format its suffix names: {suffixes}")


def _read_text(path: str, what: str) -> str:
    """A file's text; a file that is not UTF-8 is a :class:`MasklabError` saying where."""
    raw = Path(path).read_bytes()  # OSError (missing, unreadable): main says which file
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MasklabError(f"{what} {path!r} is not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None


def _schema(text: str) -> Any:
    """``--schema FILE|JSON``: a file holding a JSON schema, or the schema itself."""
    source = text if text.lstrip().startswith(("{", "[")) or text.strip() in ("true", "false") else None
    if source is None:
        source = _read_text(text, "schema file")
    try:
        return json.loads(source)
    except ValueError as e:
        raise MasklabError(f"--schema {text[:60]!r}: not JSON: {e}") from None


def _format_value(fmt: InputFormat, value: str) -> Any:
    """The spec of ``fmt`` a CLI argument gives: a file's text, the text itself, or
    (``file|json``) a schema file or the schema's JSON."""
    if fmt.arg == "text":
        return fmt.spec(value)
    if fmt.arg == "file|json":
        return fmt.spec(_schema(value))
    return fmt.spec(_read_text(value, f"{fmt.name} file"))


def _input(args: argparse.Namespace) -> Any:
    """The input the grammar flags name (``--lark FILE``, ``--gbnf FILE``, ``--regex RX``,
    ``--schema FILE|JSON``, or ``--grammar FILE`` by its suffix: every registered format)."""
    if getattr(args, "grammar", None):
        return _format_value(format_for_path(args.grammar), args.grammar)
    for fmt in formats():
        value = getattr(args, _dest(fmt), None)
        if value is not None:
            return _format_value(fmt, value)
    raise MasklabError("no grammar given")  # (argparse requires one)


def _grammar(args: argparse.Namespace) -> Grammar:
    """The IR of the input the grammar flags name."""
    return read(_input(args))


def _vocab(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    vocab = load_vocab(args.spec)
    t1 = time.perf_counter()
    trie = TokenTrie(vocab)
    t2 = time.perf_counter()
    print(f"vocabulary    {vocab.name}")
    print(f"size          {vocab.size} ids ({vocab.n_defined} defined, {vocab.size - vocab.n_defined} padding)")
    print(f"text tokens   {len(vocab.text_token_ids())}")
    print(f"special ids   {len(vocab.special_tokens)}")
    eos = ", ".join(f"{i} {vocab.special_tokens.get(i, '')!r}" for i in vocab.eos_ids)
    print(f"EOS           {eos}")
    print(f"trie          {trie.num_nodes} nodes, longest token {trie.max_depth} bytes, "
          f"{trie.memory_bytes() / 1e6:.1f} MB")
    print(f"forced text   tokenized in {describe_bpe(vocab)}")
    print(f"load / trie   {(t1 - t0) * 1e3:.0f} ms / {(t2 - t1) * 1e3:.0f} ms")
    return 0


def _mask(args: argparse.Namespace) -> int:
    vocab = load_vocab(args.vocab)
    spec = _input(args)
    options = checked_options(args.option, [args.engine])
    engine = get_engine(args.engine, vocab, **options.get(args.engine, {}))
    t0 = time.perf_counter()
    compiled = engine.compile(engine_input(engine, spec, args.source))
    matcher = engine.matcher(compiled)
    t1 = time.perf_counter()
    prefix_ids = vocab.encode(args.prefix) if args.prefix else []
    n = matcher.accept_tokens(prefix_ids)
    if n != len(prefix_ids):
        print(f"prefix rejected at token {n}: {vocab.decode(prefix_ids[: n + 1])!r}", file=sys.stderr)
        return 1
    row = bm.allocate(vocab.size)
    t2 = time.perf_counter()
    info = matcher.fill_bitmask(row)
    t3 = time.perf_counter()
    ids = bm.allowed_ids(row[0], vocab.size)
    print(f"engine {args.engine}: compile {(t1 - t0) * 1e3:.1f} ms, mask {(t3 - t2) * 1e3:.1f} ms")
    print(f"allowed {info.allowed} of {vocab.size} tokens ({100 * info.allowed / vocab.size:.2f}%)"
          f"{', sliced' if info.sliced else ''}; accepting: {matcher.is_accepting()}")
    if matcher.error:
        print(f"matcher error: {matcher.error}")
    for t in ids[: args.show]:
        label = vocab.special_tokens.get(int(t)) or repr(vocab.token_bytes[int(t)])
        print(f"  {int(t):>7d}  {label}")
    if len(ids) > args.show:
        print(f"  ... {len(ids) - args.show} more")
    return 0


def _accepts(args: argparse.Namespace) -> int:
    text = args.text.encode("utf-8", "surrogateescape")  # an argument's bytes as given, UTF-8 or not
    ok = _grammar(args).accepts(text)
    print("accepted" if ok else "rejected")
    return 0 if ok else 1
