"""``masklab engines``: every registered engine, whether it is installed, and what it can do.

Its own module, apart from :mod:`toolkit.cli.inspect`, because it needs neither the
grammar readers nor the JSON Schema compiler: the built-ins' capabilities are read from
:data:`strategies.declared.BUILT_IN` without importing the engines.
"""

from __future__ import annotations

import argparse

from strategies import available_engines, engine_capabilities, registered_engines

__all__ = ["configure"]


def configure(name: str, p: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` (``engines``) to its parser."""
    del name
    p.set_defaults(func=_engines)


def _engines(args: argparse.Namespace) -> int:
    installed = set(available_engines())
    print(f"{'engine':24s} {'installed':13s} {'lexing':12s} {'grammars':13s} {'batch':8s} {'forced':7s} "
          f"{'drafts':7s} {'special':8s} {'work':5s} {'cost':5s} work limit")
    yes = {True: "yes", False: "no"}
    for name in registered_engines():
        try:
            cap = engine_capabilities(name)
        except (ImportError, ValueError, AttributeError) as e:  # a plugin that does not import
            print(f"{name:24s} not loadable: {type(e).__name__}: {e}")
            continue
        print(f"{name:24s} {'installed' if name in installed else 'not installed':13s} {cap.lexing:12s} "
              f"{cap.grammars:13s} {cap.batch:8s} {cap.forced:7s} {cap.drafts:7s} {yes[cap.special_tokens]:8s} "
              f"{yes[cap.work_counters]:5s} {cap.mask_cost:5s} {cap.work_limit or '-'}")
    return 0
