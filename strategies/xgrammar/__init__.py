"""Strategy ``xgrammar``: byte-level pushdown parsing with an adaptive token mask cache."""

from strategies.xgrammar.engine import XGrammarCompiled, XGrammarEngine, XGrammarMatcher

__all__ = ["XGrammarEngine", "XGrammarCompiled", "XGrammarMatcher"]
