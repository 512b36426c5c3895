"""The ``masklab`` command line (also ``python -m toolkit``).

One module per command family, each loaded only for its own commands, so that
``masklab --help`` and the light commands start without pandas, matplotlib or torch:

* :mod:`toolkit.cli.engines`: ``engines``;
* :mod:`toolkit.cli.inspect`: ``vocab``, ``mask``, ``accepts``;
* :mod:`toolkit.cli.bench`: ``bench``, ``sweep``, ``agree``, ``diagnose``;
* :mod:`toolkit.cli.audit`: ``audit``, ``schema-coverage``;
* :mod:`toolkit.cli.generate`: ``generate`` (decoding with a model);
* :mod:`toolkit.cli.report`: ``report`` (tables and figures of run folders).

Each of those modules has ``configure(name, parser)``, which adds a command's arguments
and sets ``func``, the function running it.  :data:`COMMANDS` names every command, its
module and its one-line help (what ``masklab --help`` lists without loading anything).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from importlib import import_module

from toolkit.core.errors import MasklabError
from toolkit.core.version import masklab_version

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "engines": ("engines", "list the registered engines"),
    "vocab": ("inspect", "summarize a vocabulary"),
    "mask": ("inspect", "compute one mask after a prefix"),
    "accepts": ("inspect", "does the grammar accept TEXT? (exit 0 yes, 1 no)"),
    "bench": ("bench", "run engines on a MaskBench-format dataset (TTFM, TBM, validity)"),
    "sweep": ("bench", "a benchmark grid (engines x vocabularies x option sets x datasets) from a TOML spec, "
                       "as one resumable run folder"),
    "agree": ("bench", "do two engines of a bench run compute the same masks? (exit 1 if not)"),
    "diagnose": ("bench", "why an engine differs: its rejected instances, outlines-core's late matches"),
    "audit": ("audit", "is each engine's language inside the schema? random walks through its masks, "
                       "every output validated with jsonschema"),
    "schema-coverage": ("audit", "JSON Schema compiler coverage on a MaskBench-format dataset"),
    "generate": ("generate", "decode with a model, masks computed during the forward pass"),
    "report": ("report", "tables and figures from bench, sweep and generate run folders"),
}
"""Command name -> (its module under ``toolkit.cli``, its one-line help)."""


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``masklab`` parser, with the arguments of ``commands`` (default: every command).

    Every command is listed; only those named get their arguments, which loads their
    module (``main`` names the one command it runs)."""

    p = argparse.ArgumentParser(prog="masklab", description="Compare token-mask strategies for constrained decoding.")
    p.add_argument("--version", action="version", version=f"masklab {masklab_version()}")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error (default: one line)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = set(COMMANDS) if commands is None else set(commands)
    for name, (module, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if name in wanted:
            import_module(f"toolkit.cli.{module}").configure(name, sp)
    return p


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``masklab`` command; the exit status.

    masklab's own errors (:class:`~toolkit.core.errors.MasklabError`: bad input, a limit,
    a refused item), a file that cannot be read (``OSError``) and a value that does not
    parse (``ValueError``) print one line and exit 2 (``--debug``: the traceback).  Any
    other exception is a bug and propagates with its traceback."""

    argv = list(sys.argv[1:] if argv is None else argv)
    name = _command(argv)
    args = build_parser([name] if name in COMMANDS else []).parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("masklab: interrupted (a bench run resumes where it stopped)", file=sys.stderr)
        return 130
    except (MasklabError, OSError, ValueError) as e:
        if args.debug:
            raise
        print(f"masklab: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
