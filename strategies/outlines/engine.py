"""Strategy ``outlines``: a regex's byte DFA, with every state's tokens precomputed.

Willard & Louf, "Efficient Guided Generation for Large Language Models" (2023), the
approach of Outlines and outlines-core: the constraint must be regular.  ``compile``
turns it into a minimal byte DFA (:func:`toolkit.automata.regex.compile_regex`) and builds the
token index (:class:`strategies.outlines._index.TokenIndex`): for every DFA state, the
allowed tokens and the state each leads to, found by one walk of the token trie per
state.  At decode time a mask is a row copy and accepting a token a lookup; all the
cost is startup time and memory.

What ``compile`` takes:

* a regex (:class:`~toolkit.grammar.RegexText`; a bare ``str`` is refused: which kind is it?): the pattern itself (full-match semantics, see :mod:`toolkit.automata.regex`);
* a JSON schema (dict, bool or :class:`~toolkit.jsonschema.JsonSchemaText`): made into
  a regex by ``schema_regex="masklab"`` (default), our
  :func:`toolkit.jsonschema.json_schema_to_regex`, or by ``schema_regex="outlines-core"``,
  outlines-core's own ``build_regex_from_schema`` (its ``[ ]?`` whitespace unless
  ``whitespace_pattern`` says otherwise), so the index can be compared with
  ``peer:outlines-core`` on the very same regex.  That regex is read in outlines-core's
  dialect, Rust's ``regex`` crate, where ``\\d \\w \\s`` in a schema's ``pattern`` are
  Unicode classes (``compile_regex(unicode=True)``); everywhere else they are ASCII, as
  JSON Schema's ECMAScript patterns mean them;
* a :class:`~toolkit.grammar.Grammar` that is regular: :meth:`Grammar.to_regex` (a
  grammar from :meth:`Grammar.from_regex` gives back its pattern).  A recursive
  grammar raises :class:`~toolkit.core.errors.UnsupportedGrammar` naming the cycle, unless
  ``grammar_max_depth`` unrolls it (the regex then accepts a subset: text nested
  deeper is refused, never the other way round).

Recursion in JSON schemas (``$ref`` cycles, containers inside free-form values) is
unrolled the same way to ``max_depth`` levels (default 3), as Outlines does: an
instance nested deeper is refused.  A regex that outgrows ``max_regex_length`` characters, a DFA that outgrows
``max_states`` states or an index that outgrows ``max_memory`` bytes is a
:class:`~toolkit.core.errors.LimitExceeded` that says which and by how much.  So is a regex
with a bounded repeat above ``max_repeat`` (default 10,000): each count is a copy of the
piece, at least a DFA state and a walk of the vocabulary, so ``[a-z]{100000}`` (1.6 GB of
index with a 131k vocabulary) is refused from the regex's text, before anything is built,
naming the repeat (nested repeats are bounded by the NFA, ``max_states``).  A JSON schema is compiled
under ``max_rules`` and ``max_schema_depth`` (the schema compiler's limits), and the whole
compile under ``compile_timeout`` seconds (default 60, 0: none;
:class:`~toolkit.core.errors.TimeLimitExceeded` says where it stopped: the regex, the
DFA, the index's DFA state).
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal, get_args

import numpy as np

from strategies._base import (
    DEFAULT_COMPILE_TIMEOUT,
    SCHEMA_LIMITS,
    NativeMatcher,
    StrategyEngine,
    check_compile_timeout,
    check_limit,
    read_input,
    renamed_limits,
)
from strategies.declared import BUILT_IN
from strategies.outlines._index import Cursor, TokenIndex, ops_capsule
from toolkit.automata.regex import DEFAULT_MAX_STATES, ByteDFA, compile_regex
from toolkit.core.errors import (
    LimitExceeded,
    MasklabError,
    Unsatisfiable,
    UnsupportedGrammar,
    check_deadline,
)
from toolkit.core.protocol import CompiledBase
from toolkit.core.session import Session
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.inputs import read
from toolkit.grammar.ir import Grammar, RegexText
from toolkit.jsonschema.compiler import (
    SPELLINGS,
    WHITESPACES,
    Spelling,
    Whitespace,
    schema_text,
)

__all__ = ["OutlinesEngine", "OutlinesCompiled", "OutlinesMatcher", "DEFAULT_MAX_MEMORY", "DEFAULT_MAX_REPEAT",
           "repeat_count"]

DEFAULT_MAX_MEMORY = 4 << 30
"""Default cap on one token index, in bytes (4 GiB)."""

DEFAULT_MAX_REPEAT = 10_000
"""Default cap on the bound of one bounded repeat of a regex (``max_repeat``; GBNF's
reader has the same, :data:`toolkit.grammar.gbnf.MAX_REPETITION`): each count is a copy
of the piece, at least a DFA state walked over the whole vocabulary by the index
(``[a-z]{100000}``: 1.6 GB and ten seconds with a 131k vocabulary), so a larger bound is
refused from the regex's text before anything is built."""

# a regex cut into what matters for its repeats: a comment, an escape, a class, a group's
# opening (with its flags or name) or closing, a bounded repeat, a run of plain
# characters, or any other single character
_RX_TOKEN = re.compile(
    r"\(\?#[^)]*\)|\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|\((?:\?(?:P<\w+>|[a-zA-Z-]*:?))?|\)"
    r"|\{(\d*)(,?)(\d*)\}|[^\\\[\](){*+?|]+|.",
    re.DOTALL,
)


_BOUNDS = re.compile(r"\{(\d*),?(\d*)\}")


def repeat_count(pattern: str, above: int = 1) -> tuple[int, str]:
    """The largest bound of one bounded repeat in ``pattern`` (``x{m}``, ``x{m,n}``,
    ``x{,n}``: the upper bound; ``x{m,}``: ``m``), and that repeat's text; 1 and "" when
    no bound is above ``above``.  Read from the text, as :mod:`toolkit.automata._rxparse`
    reads repeats, without building the parse tree (a malformed pattern is the parser's
    to refuse: what is read here of it only decides whether ``max_repeat`` is met), and
    only when some ``{...}`` holds a number above ``above`` (one C scan otherwise).
    Nested repeats are not multiplied: their product is bounded by the NFA's size
    (``max_states``), refused before it is copied."""
    digits = len(str(above))
    if not any(len(n) >= digits and int(n) > above
               for m in _BOUNDS.finditer(pattern) for n in m.groups() if len(n) >= digits):
        return 1, ""
    best, span = 1, (0, 0)
    opened: list[int] = []  # where each open group starts
    last: int | None = None  # where the item a repeat would apply to starts
    for m in _RX_TOKEN.finditer(pattern):
        tok = m.group()
        c = tok[0]
        if tok.startswith("(?#"):
            continue  # a comment
        if c == "(":
            opened.append(m.start())
            last = None
        elif c == ")" and opened:
            last = opened.pop()
        elif c == "{" and m.group(1) is not None and (m.group(1) or m.group(3)):
            if last is not None:
                n = int(m.group(3) or m.group(1))  # {m}, {m,n}, {,n}; {m,}: m copies and a loop
                if n > best:
                    best, span = n, (last, m.end())
            last = None
        elif c in "*+?|":
            last = None  # (a lazy mark, or a repeat of a repeat: the parser's to refuse)
        elif c in "\\[" or len(tok) == 1:
            last = m.start()  # an escape, a class, one character
        else:
            last = m.end() - 1  # a run of plain characters: a repeat takes its last
    return best, pattern[span[0]:span[1]]

SchemaRegex = Literal["masklab", "outlines-core"]
_SCHEMA_REGEX: tuple[str, ...] = get_args(SchemaRegex)


class OutlinesCompiled(CompiledBase):
    """A compiled constraint: its regex, byte DFA and token index."""

    def __init__(self, regex: str, kind: str, dfa: ByteDFA, index: TokenIndex,
                 timings: dict[str, float] | None = None) -> None:
        self.regex = regex
        self.kind = kind  # "regex", "json_schema" or "grammar": what compile was given
        self.dfa = dfa
        self.index = index
        self.timings = dict(timings or {})  # seconds: regex, dfa, index (the build phases)

    @property
    def num_states(self) -> int:
        """Live DFA states (the dead state not counted)."""
        return self.dfa.n_states - 1

    def memory_bytes(self) -> int:
        """The index plus the DFA table it walks (the vocabulary's trie is shared)."""
        return int(self.index.memory_bytes())

    def stats(self) -> dict[str, float]:
        """Index shape and build: states, dense rows, stored (token, next) pairs, memory,
        trie nodes walked, regex length, and the seconds of each phase (``regex_s``,
        ``dfa_s``, ``index_s``)."""
        ix = self.index
        return {
            "states": self.num_states,
            "dense_states": ix.num_dense,
            "pairs": ix.num_pairs,
            "memory_bytes": self.memory_bytes(),
            "trie_nodes_visited": ix.nodes_visited,
            "regex_chars": len(self.regex),
            **{f"{k}_s": round(v, 6) for k, v in self.timings.items()},
        }

    def __repr__(self) -> str:
        return (f"OutlinesCompiled(kind={self.kind!r}, states={self.num_states}, "
                f"dense={self.index.num_dense}, memory={self.memory_bytes()})")


class OutlinesEngine(StrategyEngine):
    """The precomputed-index strategy; see the module doc.

    Options: ``schema_regex`` (``"masklab"`` or ``"outlines-core"``), ``whitespace``, ``spelling``
    (our schema compiler's: ``"flexible"`` or ``"compact"``), ``whitespace_pattern``
    (outlines-core's), ``max_depth`` (recursion unrolled in schemas),
    ``grammar_max_depth`` (in grammars; None refuses recursive grammars),
    ``max_states`` (DFA), ``max_regex_length``, ``max_repeat`` (the bound of one of the
    regex's repeats), ``max_rules`` and ``max_schema_depth`` (the schema compiler's),
    ``compile_timeout`` (seconds, 0: none),
    ``max_memory`` (bytes per index), ``dense_min_tokens`` (a state with this many
    allowed tokens keeps a bitmask row; None: whichever form is smaller), ``memo``
    (default True: the DFAs of earlier compiles are kept, :mod:`toolkit.core.memo`).
    """

    name = "outlines"
    capabilities = BUILT_IN["outlines"].capabilities
    native_inputs = frozenset({"json_schema"})

    @property
    def schema_grammar(self) -> str:
        """``"masklab"`` when schemas compile with masklab's schema compiler (the default),
        ``"own"`` with ``schema_regex="outlines-core"``."""
        return "own" if self.schema_regex == "outlines-core" else "masklab"

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        schema_regex: SchemaRegex = "masklab",
        whitespace: Whitespace = "flexible",
        spelling: Spelling = "json",
        whitespace_pattern: str | None = None,
        max_depth: int = 3,
        grammar_max_depth: int | None = None,
        max_states: int = DEFAULT_MAX_STATES,
        max_regex_length: int = 1_000_000,
        max_memory: int = DEFAULT_MAX_MEMORY,
        max_repeat: int = DEFAULT_MAX_REPEAT,
        dense_min_tokens: int | None = None,
        max_rules: int = SCHEMA_LIMITS["max_rules"],
        max_schema_depth: int = SCHEMA_LIMITS["max_schema_depth"],
        compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
        memo: bool = True,
    ) -> None:
        if schema_regex not in _SCHEMA_REGEX:
            raise ValueError(f"schema_regex must be one of {_SCHEMA_REGEX}, got {schema_regex!r}")
        if whitespace not in WHITESPACES:
            raise ValueError(f"whitespace must be 'flexible' or 'compact', got {whitespace!r}")
        if spelling not in SPELLINGS:
            raise ValueError(f"spelling must be one of {', '.join(SPELLINGS)}, got {spelling!r}")
        if max_depth < 0 or (grammar_max_depth is not None and grammar_max_depth < 0):
            raise ValueError(f"max_depth and grammar_max_depth must be >= 0, got {max_depth}, {grammar_max_depth}")
        for opt, value in (("max_states", max_states), ("max_regex_length", max_regex_length),
                           ("max_memory", max_memory), ("max_repeat", max_repeat), ("max_rules", max_rules),
                           ("max_schema_depth", max_schema_depth)):
            if int(value) < 1:
                raise ValueError(f"{opt} must be positive, got {value}")
            check_limit(opt, value)  # (an int: 1.5 is not read as 1)
        if not isinstance(memo, bool):
            raise ValueError(f"memo must be a bool, got {memo!r}")
        self.vocab = vocab
        self.schema_regex = schema_regex
        self.whitespace = whitespace
        self.spelling = spelling
        self.whitespace_pattern = whitespace_pattern
        self.max_depth = int(max_depth)
        self.grammar_max_depth = grammar_max_depth
        self.max_states = int(max_states)
        self.max_regex_length = int(max_regex_length)
        self.max_memory = int(max_memory)
        self.max_repeat = int(max_repeat)
        self.dense_min_tokens = -1 if dense_min_tokens is None else int(dense_min_tokens)
        self.options = {
            "schema_regex": schema_regex, "whitespace": whitespace, "spelling": spelling,
            "whitespace_pattern": whitespace_pattern, "max_depth": self.max_depth,
            "grammar_max_depth": grammar_max_depth,
            "max_states": self.max_states, "max_regex_length": self.max_regex_length,
            "max_memory": self.max_memory, "max_repeat": self.max_repeat, "dense_min_tokens": dense_min_tokens,
            "max_rules": int(max_rules), "max_schema_depth": int(max_schema_depth),
            "compile_timeout": check_compile_timeout(compile_timeout), "memo": memo,
        }
        self.trie = TokenTrie(vocab)
        self._token_blob, self._token_offsets = vocab.byte_table()
        self.eos_ids = np.asarray(vocab.eos_ids, dtype=np.int64)

    # ------------------------------------------------------------ compile --

    def regex_for(self, spec: Any) -> tuple[str, str]:
        """``(regex, kind)`` for what :meth:`compile` accepts (see the module doc).  A
        limit the regex's writing meets names this engine's option: ``max_regex_length``
        for the text, ``grammar_max_depth`` (a grammar) or ``max_depth`` (a schema) for
        the unrolling of recursion, ``max_rules``/``max_schema_depth`` for the schema."""
        if isinstance(spec, RegexText):
            return spec.text, "regex"
        text = schema_text(spec)
        if text is not None:
            with renamed_limits({"max_length": "max_regex_length", "max_steps": "max_depth"},
                                "the regex of the JSON schema"):
                return self._schema_regex(spec, text), "json_schema"
        grammar = read(spec, engine=self.name)  # a Grammar, or a grammar text of any format
        check_deadline("outlines: the grammar's regex")
        try:
            with renamed_limits({"max_length": "max_regex_length", "max_steps": "grammar_max_depth",
                                 "max_depth": "grammar_max_depth"}, "the regex of the grammar"):
                return grammar.to_regex(max_depth=self.grammar_max_depth, max_length=self.max_regex_length), "grammar"
        except UnsupportedGrammar as e:
            raise _recursion_hint(e) from None

    def _schema_regex(self, spec: Any, text: str) -> str:
        if self.schema_regex == "outlines-core":
            from outlines_core.json_schema import build_regex_from_schema

            try:
                return build_regex_from_schema(text, self.whitespace_pattern)
            except Exception as e:  # noqa: BLE001 - outlines-core raises ValueError/RuntimeError
                raise UnsupportedGrammar(f"outlines-core's schema compiler: {e}") from e
        # toolkit.jsonschema.json_schema_to_regex, under this engine's schema limits
        grammar, _ = read_input(self.name, spec, self.options, whitespace=self.whitespace, spelling=self.spelling)
        check_deadline("outlines: the JSON schema's regex")
        return grammar.to_regex(max_depth=self.max_depth, max_length=self.max_regex_length)

    def _compile(self, spec: Any) -> OutlinesCompiled:
        """Regex → minimal byte DFA → token index; the startup cost the harness measures."""
        t0 = time.perf_counter()
        regex, kind = self.regex_for(spec)
        t1 = time.perf_counter()
        bound, fragment = repeat_count(regex, self.max_repeat)
        if bound > self.max_repeat:  # a state per count, each a walk of the vocabulary: refused before
            where = "the regex" if kind == "regex" else f"the {kind}'s regex"
            raise LimitExceeded("max_repeat", bound, self.max_repeat,
                                f"the repeat {_shown(fragment)} in {where}: a copy of its piece per count, each "
                                "at least a DFA state and a walk of the vocabulary")
        check_deadline(f"outlines: the DFA of the {kind}'s regex")
        unicode = kind == "json_schema" and self.schema_regex == "outlines-core"
        with renamed_limits({"nfa_states": "max_states"}, "NFA states, at most max(4 * max_states, 100000)"):
            dfa = compile_regex(regex, max_states=self.max_states, unicode=unicode)
        if dfa.is_empty():
            raise _unsatisfiable(spec, kind, regex)
        t2 = time.perf_counter()
        index = TokenIndex(self.trie, dfa.table, dfa.classes, dfa.accepting, self._token_blob,
                           self._token_offsets, self.max_memory, self.dense_min_tokens)
        t3 = time.perf_counter()
        return OutlinesCompiled(regex, kind, dfa, index, {"regex": t1 - t0, "dfa": t2 - t1, "index": t3 - t2})

    def _matcher(self, compiled: OutlinesCompiled) -> OutlinesMatcher:
        return OutlinesMatcher(self, compiled)


_TO_REGEX_HINT = "; pass max_depth to unroll the recursion"


def _shown(fragment: str, width: int = 60) -> str:
    """A regex fragment for a message: whole when short, else its two ends."""
    return repr(fragment) if len(fragment) <= width else repr(fragment[: width // 2]) + "..." + repr(
        fragment[-width // 2 :])


def _recursion_hint(e: UnsupportedGrammar) -> UnsupportedGrammar:
    """:meth:`Grammar.to_regex`'s refusal of a recursive grammar names its own argument,
    ``max_depth``; this engine's option for a grammar's recursion is ``grammar_max_depth``
    (its ``max_depth`` unrolls JSON schemas only).  Other errors pass unchanged."""
    head, sep, _ = e.message.partition(_TO_REGEX_HINT)
    if not sep:
        return e
    return UnsupportedGrammar(
        f"{head}; set the outlines option grammar_max_depth to unroll the recursion "
        "(get_engine('outlines', vocab, grammar_max_depth=3), or -o outlines.grammar_max_depth=3: "
        "the regex then accepts a subset of the language, text nested deeper is refused); "
        "the option max_depth unrolls recursion in JSON schemas only",
        e.line, e.column,
    )


def _unsatisfiable(spec: Any, kind: str, regex: str) -> Unsatisfiable:
    """The error for an input whose regex matches nothing: for a schema, the one the
    toolkit's schema compiler raises (keyword and JSON pointer) when it finds it too."""
    if kind == "json_schema":
        try:
            Grammar.from_json_schema(spec)
        except Unsatisfiable as e:
            return e
        except MasklabError:
            pass
        return Unsatisfiable("unsatisfiable schema: its regex matches no JSON text", keyword="schema", pointer="")
    shown = regex if len(regex) <= 200 else regex[:200] + "..."
    return Unsatisfiable(f"the {kind}'s regex matches no string: {shown!r}")


class OutlinesMatcher(NativeMatcher):
    """One sequence: a :class:`~strategies.outlines._index.Cursor` (the DFA state and
    the states before each token) in a :class:`toolkit.core.session.Session`.

    Its :meth:`mask_stats` are the cursor's: every fill of a live matcher is a lookup of
    all ``vocab_size`` verdicts (``tokens_cached``), a token accepted in a dense row runs
    its bytes through the DFA (``lexer_steps``); the index's trie walk is a compile
    figure (``stats()["trie_nodes_visited"]``), not decode work."""

    def __init__(self, engine: OutlinesEngine, compiled: OutlinesCompiled, cursor: Cursor | None = None) -> None:
        self.vocab = engine.vocab
        self.engine = engine
        self.compiled = compiled
        self.index = compiled.index
        self.session = Session(self._new_core() if cursor is None else cursor, ops_capsule(), engine.vocab_table)

    def _new_core(self) -> Cursor:
        return Cursor(self.index, self.compiled.dfa.start)

    @property
    def state(self) -> int:
        """The DFA state after the text tokens consumed."""
        return self.session.core.state
