"""Strategy ``glr``: llguidance's lexer and trie walk over an LR automaton with a
graph-structured stack (see :mod:`strategies.glr.engine`)."""

from strategies.glr.engine import GLRCompiled, GLREngine, GLRMatcher

__all__ = ["GLREngine", "GLRCompiled", "GLRMatcher"]
