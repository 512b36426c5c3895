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
    "Vocabulary": "toolkit.core.vocab",
    "load_vocab": "toolkit.core.vocab",
    "ByteDFA": "toolkit.automata.regex",
    "compile_regex": "toolkit.automata.regex",
    "Grammar": "toolkit.grammar.ir",
    "TokenTrie": "toolkit.core.trie",
    "MaskInfo": "toolkit.core.protocol",
    "make_batch": "toolkit.core.batch",
    "MasklabError": "toolkit.core.errors",
    "GrammarError": "toolkit.core.errors",
    "RegexError": "toolkit.core.errors",
    "UnsupportedGrammar": "toolkit.core.errors",
    "UnsupportedSchema": "toolkit.core.errors",
    "LimitExceeded": "toolkit.core.errors",
    "VocabError": "toolkit.core.errors",
}


#: what a name needs loaded with it: a Grammar embeds JSON Schemas (``%json``,
#: ``Grammar.from_json_schema``) through the compiler a floor up (toolkit.grammar.embed)
_WITH = {"Grammar": "toolkit.jsonschema"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    if name in _WITH:
        import_module(_WITH[name])
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
