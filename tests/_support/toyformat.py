"""A toy input format, registered the way a new format joins (:mod:`toolkit.grammar.inputs`):
a word list (one word a line) whose language is any one of its words.  Importing the module
registers it; :class:`WordsEngine` is the naive oracle reading it natively, recording what
its ``compile`` was given (tests/test_inputs.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from strategies.naive import NaiveEngine
from toolkit.core.errors import GrammarError
from toolkit.grammar.inputs import InputFormat, register_format
from toolkit.grammar.ir import Grammar, Terminal


@dataclass(frozen=True)
class WordsText:
    """A word list: one word a line."""

    input_format: ClassVar[str] = "words"
    text: str


def read_words(spec: WordsText) -> Grammar:
    words = [w.strip() for w in spec.text.splitlines() if w.strip()]
    if not words:
        raise GrammarError("a word list needs a word", 1, 1)
    terminals = {f"W{i}": Terminal.from_literal(f"W{i}", w) for i, w in enumerate(words)}
    return Grammar("start", {"start": tuple((n,) for n in terminals)}, terminals)


register_format(InputFormat("words", WordsText, read_words, key="words", flag="--words", suffixes=(".words",),
                            help="a word list, one word a line"), replace=True)


class WordsEngine(NaiveEngine):
    """The naive engine, reading word lists itself: what ``compile`` got is in ``given``."""

    name = "tests._support.toyformat:WordsEngine"
    native_inputs = frozenset({"words"})
    given: ClassVar[list[str]] = []

    def compile(self, grammar: Any):
        WordsEngine.given.append(type(grammar).__name__)
        if isinstance(grammar, WordsText):  # its own reading: each word, as a regex alternative
            grammar = Grammar.from_regex("|".join(re.escape(w.strip()) for w in grammar.text.splitlines() if w.strip()))
        return super().compile(grammar)
