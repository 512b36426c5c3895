"""masklab's toolkit: vocabulary, token trie, byte DFAs, grammar IR, bitmask, protocol.

The names below are imported lazily so that ``import toolkit`` stays cheap (the CLI
starts fast, and a notebook pays only for what it uses).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "Vocabulary",
    "load_vocab",
    "ByteDFA",
    "compile_regex",
    "Grammar",
    "TokenTrie",
    "MaskInfo",
    "make_batch",
    "MasklabError",
    "GrammarError",
    "RegexError",
    "UnsupportedGrammar",
    "UnsupportedSchema",
    "LimitExceeded",
    "VocabError",
]

_LAZY = {
    "Vocabulary": "toolkit.vocab",
    "load_vocab": "toolkit.vocab",
    "ByteDFA": "toolkit.regex",
    "compile_regex": "toolkit.regex",
    "Grammar": "toolkit.grammar",
    "TokenTrie": "toolkit.trie",
    "MaskInfo": "toolkit.protocol",
    "make_batch": "toolkit.batch",
    "MasklabError": "toolkit.errors",
    "GrammarError": "toolkit.errors",
    "RegexError": "toolkit.errors",
    "UnsupportedGrammar": "toolkit.errors",
    "UnsupportedSchema": "toolkit.errors",
    "LimitExceeded": "toolkit.errors",
    "VocabError": "toolkit.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
