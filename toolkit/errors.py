"""Typed errors with diagnostics: every error says what went wrong and where.

One module, so callers can catch the whole family with :class:`MasklabError`.
"""

from __future__ import annotations

__all__ = [
    "MasklabError",
    "GrammarError",
    "RegexError",
    "UnsupportedGrammar",
    "UnsupportedSchema",
    "LimitExceeded",
    "VocabError",
]


class MasklabError(Exception):
    """Base class of every error masklab raises on purpose."""


class GrammarError(MasklabError):
    """A grammar that cannot be read: syntax error, unknown symbol, bad terminal.

    ``line`` and ``column`` are 1-based positions in the grammar text (None when
    the error has no single place, e.g. a missing start rule).
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = f" (line {line}" + (f", column {column})" if column is not None else ")")
        super().__init__(message + where)


class RegexError(MasklabError):
    """A regex that cannot be compiled to a byte DFA; ``fragment`` is the offending part."""

    def __init__(self, message: str, pattern: str, fragment: str | None = None):
        self.pattern = pattern
        self.fragment = fragment
        detail = f" at {fragment!r}" if fragment else ""
        super().__init__(f"{message}{detail} in regex {pattern!r}")


class UnsupportedGrammar(MasklabError):
    """A grammar outside what a strategy can handle (e.g. recursion for a regular-only one)."""


class UnsupportedSchema(MasklabError):
    """A JSON Schema keyword that cannot be compiled exactly; ``pointer`` locates it."""

    def __init__(self, keyword: str, pointer: str, reason: str = ""):
        self.keyword = keyword
        self.pointer = pointer
        self.reason = reason
        super().__init__(
            f"unsupported keyword {keyword!r} at {pointer or '/'}" + (f": {reason}" if reason else "")
        )


class LimitExceeded(MasklabError):
    """A configured limit (states, items, time, memory) was exceeded."""

    def __init__(self, limit: str, value: int | float, maximum: int | float, detail: str = ""):
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.detail = detail
        super().__init__(f"limit {limit!r} exceeded: {value} > {maximum}" + (f" ({detail})" if detail else ""))


class VocabError(MasklabError):
    """A vocabulary spec or tokenizer file that cannot be loaded."""
