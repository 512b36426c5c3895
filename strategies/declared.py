"""What each built-in engine declares, readable without importing it.

``masklab engines`` and :func:`strategies.available_engines` list every engine's
capabilities and whether its dependencies are installed.  Importing an engine's module
to read two class attributes would load its grammar compilers and Cython parsers (most
of the command's startup), so the built-ins declare them here, and each engine class
takes its own ``capabilities`` and ``requires`` from this table: one source of truth,
read by both.  An engine registered from outside (``register``, ``MASKLAB_ENGINES``,
entry points) declares them on its class alone and is imported to be listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.core.protocol import Capabilities

__all__ = ["BUILT_IN", "Declared"]


@dataclass(frozen=True)
class Declared:
    """A built-in engine's class attributes: what it can do, and the modules it imports
    when made (all must be findable for it to be listed as installed)."""

    capabilities: Capabilities
    requires: tuple[str, ...] = ()


_OURS = dict(batch="native", forced="bytes", drafts="native", special_tokens=True, work_counters=True)

#: registered name -> what its class declares
BUILT_IN: dict[str, Declared] = {
    "naive": Declared(Capabilities(forced="bytes", special_tokens=True, work_counters=True, mask_cost="slow",
                                   work_limit="max_items")),
    "outlines": Declared(Capabilities(grammars="regular", **_OURS)),
    "xgrammar": Declared(Capabilities(**_OURS, work_limit="max_items")),
    "llguidance": Declared(Capabilities(lexing="lexer", **_OURS, work_limit="max_row_items")),
    "glr": Declared(Capabilities(lexing="lexer", **_OURS, work_limit="max_row_items")),
    "peer:llguidance": Declared(Capabilities(lexing="lexer", batch="native", forced="bytes", drafts="native",
                                             special_tokens=True), ("llguidance",)),
    "peer:xgrammar": Declared(Capabilities(batch="native", forced="bytes", drafts="native"), ("xgrammar",)),
    "peer:outlines-core": Declared(Capabilities(grammars="regular", any_vocabulary=False), ("outlines_core",)),
    "peer:llama.cpp": Declared(Capabilities(mask_cost="slow"), ("llama_cpp", "gguf")),
    "peer:lm-format-enforcer": Declared(Capabilities(grammars="regular", partial_utf8=False, mask_cost="slow"),
                                        ("lmformatenforcer",)),
    "peer:glrmask": Declared(Capabilities(forced="bytes", special_tokens=True), ("glrmask",)),
}
