"""What the command families share: argument types, ``-o ENGINE.KEY=VALUE`` options,
the command line a run records."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Sequence

from strategies import check_options
from toolkit.core.errors import MasklabError
from toolkit.core.protocol import MAX_DRAFT

__all__ = [
    "SKIP_BAD_HELP",
    "add_option_arg",
    "checked_options",
    "command_line",
    "draft_lengths",
    "engine_list",
    "engine_options",
    "non_negative_float",
    "positive_int",
]

SKIP_BAD_HELP = ("leave out the items the command cannot judge (no test instances, where it judges items by them; "
                 "a schema its draft's meta-schema rejects), named in a note, instead of refusing the run "
                 "(MaskBench has 195 items without tests and one invalid schema)")


def positive_int(text: str) -> int:
    """An argument that must be an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """An argument that must be a number >= 0 (not NaN)."""
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def draft_lengths(text: str) -> list[int]:
    """``--draft 1,2,4,8,16``: draft lengths, each between 1 and ``MAX_DRAFT``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"draft lengths are integers separated by commas, got {text!r}") from None
    if not values or any(v < 1 or v > MAX_DRAFT for v in values):
        raise argparse.ArgumentTypeError(f"draft lengths must be between 1 and {MAX_DRAFT}, got {text!r}")
    return sorted(set(values))


def engine_list(text: str) -> list[str]:
    """``a,b,c``: engine names."""
    return [e.strip() for e in text.split(",") if e.strip()]


def command_line(args: argparse.Namespace) -> str:
    """The command as typed, for a run's record."""
    return "masklab " + " ".join(shlex.quote(a) for a in (args.argv or []))


def add_option_arg(parser: argparse.ArgumentParser, example: str = "llguidance.spelling=llguidance") -> None:
    """``-o/--option ENGINE.KEY=VALUE`` (repeatable), read by :func:`checked_options`."""
    parser.add_argument("-o", "--option", action="append", default=[], metavar="ENGINE.KEY=VALUE",
                        help=f"an engine option, e.g. {example} (repeatable; `masklab engines` lists the engines)")


def _option_value(text: str) -> object:
    """A value as JSON reads it (``true``, ``3``, ``[...]``); ``True``/``False``/``None``
    in any case as the bool or None they spell; else the text."""
    spelled = {"true": True, "false": False, "none": None, "null": None}.get(text.strip().lower(), text)
    if spelled is not text:
        return spelled
    try:
        return json.loads(text)
    except ValueError:
        return text


def engine_options(pairs: Sequence[str]) -> dict[str, dict[str, object]]:
    """``NAME.KEY=VALUE`` pairs (VALUE read as JSON when it parses) per engine name."""
    out: dict[str, dict[str, object]] = {}
    for pair in pairs:
        left, eq, value = pair.partition("=")
        name, dot, key = left.rpartition(".")
        if not eq or not dot or not name or not key:
            raise MasklabError(f"--option {pair!r}: expected ENGINE.KEY=VALUE, e.g. peer:xgrammar.strict_mode=false")
        out.setdefault(name, {})[key] = _option_value(value)
    return out


def checked_options(pairs: Sequence[str], engines: Sequence[str]) -> dict[str, dict[str, object]]:
    """:func:`engine_options`, every engine's options checked before anything runs: an
    option for an engine not in the run, an unknown key or a value of the wrong type is
    an error here."""
    options = engine_options(pairs)
    for name, opts in options.items():
        if name not in engines:
            raise MasklabError(f"--option for {name!r}, which is not among the engines ({', '.join(engines)})")
        check_options(name, opts)
    return options
