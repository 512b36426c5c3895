"""Strategy ``llguidance``: lazy lexer + Earley parser over lexemes + token-trie walk + slicer.

Moskal et al., "Making Structured Outputs Go Brrr" (2025), the approach of the
llguidance engine, reimplemented on masklab's toolkit.  Nothing is precomputed per
token: each mask is one walk of the vocabulary's flat DFS trie
(:class:`toolkit.core.trie.TokenTrie`) in which every byte is a lookup in the lazy lexer
table and the Earley parser is consulted only where a byte ends a lexeme; a dense
mask inside a long lexeme (a JSON string) is mostly added slice by slice without a
walk.  The C core is :mod:`strategies.llguidance.parser`; this module turns a
:class:`~toolkit.grammar.Grammar` into its tables.

Lexing semantics (llguidance's, not the scannerless :class:`Grammar` language):

* lexing is greedy: a byte that extends a live lexeme extends it, so with
  ``STEM: "list" | "listen"`` followed by ``"ed"`` the text ``listed`` is refused
  (``listen`` is the only way to read ``liste``);
* ``%ignore`` text (the skip lexeme) may stand before any lexeme the parser allows,
  at the start too, but not after the last lexeme: once the grammar cannot continue,
  nothing more is allowed (``{"a": 1}`` then a space is refused; ``naive`` allows it);
* when the skip lexeme and a real one accept the same text, it is skipped.

On JSON-schema grammars these never change a mask of a valid instance except the
trailing-whitespace rule.  Terminals that match the empty string are optional
lexemes (``T`` becomes ``T | ε``, as llguidance rewrites them).

What ``compile`` takes: a :class:`Grammar`, a JSON schema (dict, bool or
:class:`~toolkit.jsonschema.JsonSchemaText`, compiled by
:meth:`Grammar.from_json_schema`) or a regex (:class:`~toolkit.grammar.RegexText`, :meth:`Grammar.from_regex`; a bare ``str`` is refused).

Options: ``slices`` (``"default"``: llguidance's three JSON-string slices;
``"none"``; or a list of regexes), ``whitespace`` and ``spelling`` (for schemas:
``"llguidance"`` writes keys as llguidance does, which lets a grammar force them), and the limits
``max_lexer_states`` (lexer states built per grammar, default 250,000, as
llguidance's), ``max_row_items`` (Earley items in one row, default 10,000) and
``max_steps`` (parser items plus lexer states built during one mask or one token,
default 1,000,000).  Exceeding one is a :class:`~toolkit.core.errors.LimitExceeded`, which
puts a matcher in the sticky error state of the protocol.  ``mask_cache`` (default
True) keeps each matcher's last mask with its key, the lexer state and the Earley rows,
as llguidance's bias cache does: inside a long lexeme the lexer state often loops, and
the next mask is then a copy (``False`` walks every time, for ablations).
``state_cache_bytes`` (default 64 MiB, 0: off) bounds the grammar's state cache
(:meth:`~strategies.llguidance.parser.ParserTables.set_state_cache`), shared by its
matchers: per lexer state, the tokens a walk from it allows before any lexeme ends and
the trie nodes where one ends, so that a later mask there, in any matcher, walks only
those nodes' subtrees (inside a JSON string, hundreds of nodes instead of thousands);
past the budget, masks walk as without it.
``memo`` (default True) keeps the DFAs and schema fragments of the engine's earlier
compiles (:mod:`toolkit.core.memo`); False starts every compile cold.  A JSON schema is
compiled under ``max_rules`` (default 50,000) and ``max_schema_depth`` (schemas nested
in schemas, default 100), the schema compiler's limits; ``compile_timeout`` (seconds,
default 60, 0: none) bounds one ``compile`` (:class:`~toolkit.core.errors.TimeLimitExceeded`
naming the option and where the compile stopped).

``mask_stats()`` (:class:`~toolkit.core.protocol.MaskStats`) counts the parser's work
over fills and accepts: trie nodes walked (each fill's ``nodes_visited``), lexer steps
(a byte read, in a walk or an accepted token), Earley items added to rows, the tokens
of the slices a fill ORed in whole (``tokens_sliced``) and the text tokens of a fill
that was the mask cache's copy (``tokens_cached``); no token is checked one by one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from strategies._base import (
    DEFAULT_COMPILE_TIMEOUT,
    SCHEMA_LIMITS,
    CompiledTables,
    GrammarEngine,
    NativeMatcher,
    check_compile_timeout,
)
from strategies.declared import BUILT_IN
from strategies.llguidance.parser import (
    EarleyParser,
    ParserTables,
    SliceSet,
    full_matches,
    ops_capsule,
)
from toolkit.automata.dfaops import difference, union
from toolkit.automata.regex import ByteDFA, compile_regex
from toolkit.core.errors import check_deadline
from toolkit.core.session import Session
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.cfg import trim
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import SPELLINGS, WHITESPACES, Spelling, Whitespace

__all__ = ["LLGuidanceEngine", "LLGuidanceCompiled", "LLGuidanceMatcher", "DEFAULT_SLICES", "LexemeGrammar", "lexeme_grammar", "lexer_options",
           "check_options"]

_STRING_CHAR = r'[^"\\\x00-\x1F\x7F]'
DEFAULT_SLICES: tuple[str, ...] = (
    r"[\x20\x0A\x0D\x09]+", _STRING_CHAR + "{1,10}", _STRING_CHAR + "{1,30}", _STRING_CHAR + "+",
)
"""llguidance's default slices (``LLTokenizer.general_slices()``, 1.9): runs of JSON
whitespace, then JSON string content of up to 10, up to 30 and any number of
characters.  A token belongs to the first slice that matches all its bytes, so the
string slices hold tokens of 1-10, 11-30 and 31+ characters; the rest (partial UTF-8,
quotes, punctuation runs...) are walked every time."""

DEFAULT_STATE_CACHE_BYTES = 64 << 20
"""``state_cache_bytes``: what the per-lexer-state cache of one compiled grammar may
hold (:meth:`ParserTables.set_state_cache`; a Llama-3 entry is 16 KB)."""

_START = "%start"


class _Subset:
    """The vocabulary protocol :class:`TokenTrie` reads, restricted to some token ids."""

    def __init__(self, vocab: Vocabulary, ids: np.ndarray) -> None:
        self.size = vocab.size
        self.token_bytes = vocab.token_bytes
        self._ids = np.asarray(ids, dtype=np.int64)

    def text_token_ids(self) -> np.ndarray:
        return self._ids


class Slicer:
    """A vocabulary's token slices: regex DFAs, one trie per slice and one for the rest."""

    def __init__(self, vocab: Vocabulary, trie: TokenTrie, regexes: Sequence[str]) -> None:
        self.regexes = tuple(regexes)
        text = np.asarray(vocab.text_token_ids(), dtype=np.int64)
        free = np.zeros(vocab.size, dtype=bool)
        free[text] = True
        dfas, tries, masks, self.sizes = [], [], [], []
        for rx in self.regexes:
            dfa = compile_regex(rx)
            hit = full_matches(trie, dfa.transitions, dfa.accepting, dfa.start) & free
            free &= ~hit
            ids = np.flatnonzero(hit)
            dfas.append((dfa.transitions, dfa.start))
            tries.append(TokenTrie(_Subset(vocab, ids)))
            words = np.zeros((vocab.size + 31) // 32, dtype=np.uint32)
            np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
            masks.append(words)
            self.sizes.append(int(ids.size))
        tries.append(TokenTrie(_Subset(vocab, np.flatnonzero(free))))
        self.rest = int(free.sum())
        # inclusion[i, j]: slice i's language inside slice j's (the slicer tries the
        # larger first: containment of a superset settles its subsets)
        langs = [compile_regex(rx) for rx in self.regexes]
        n = len(langs)
        self.inclusion = np.eye(n, dtype=np.uint8)
        for i in range(n):
            for j in range(n):
                if i != j:
                    self.inclusion[i, j] = difference(langs[i], langs[j]).is_empty()
        self.set = SliceSet(dfas, tries, masks, self.inclusion)

    def memory_bytes(self) -> int:
        return sum(int(t.memory_bytes()) for t in self.set.tries) + len(self.regexes) * ((self.set.n_words or 0) * 4)


class LLGuidanceCompiled(CompiledTables):
    """A grammar as parser tables: dotted rules, lexeme DFAs, the lazy lexer cache."""

    def stats(self) -> dict[str, float]:
        """Grammar size (nonterminals, dotted rules, lexemes, lexeme DFA states), lexer
        states built so far, the largest Earley row and step count seen, the state
        cache's entries and the fills it served, build seconds."""
        t = self.tables
        return {
            "nonterminals": t.n_nt,
            "dotted_rules": t.n_dr,
            "lexemes": t.n_lex,
            "lexeme_dfa_states": t.n_global,
            "lexer_states": t.n_ls,
            "peak_row_items": t.peak_row_items,
            "peak_steps": t.peak_steps,
            "state_cache_entries": t.state_cache[0],
            "state_cache_hits": t.state_cache[2],
            "memory_bytes": self.memory_bytes(),
            **{f"{k}_s": round(v, 6) for k, v in self.timings.items()},
        }

    def __repr__(self) -> str:
        t = self.tables
        return f"LLGuidanceCompiled(kind={self.kind!r}, lexemes={t.n_lex}, dotted_rules={t.n_dr}, lexer_states={t.n_ls})"


def _lexeme_dfa(dfa: ByteDFA) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """The DFA of ``L \\ {ε}`` as ``(table, classes, accepting, start)`` over the DFA's
    byte classes, or None when that is empty.

    When the start state accepts, a copy of it that does not accept becomes the start
    (the original stays the target of the transitions into it).
    """
    classes, table = dfa.byte_classes()
    acc, start = dfa.accepting, dfa.start
    if start == 0:
        return None
    if not acc[start]:
        return table, classes, acc, start
    if not table[start].any():
        return None  # only the empty string
    table = np.vstack([table, table[start : start + 1]])
    acc = np.append(np.asarray(acc, dtype=bool), False)
    return np.ascontiguousarray(table, dtype=np.int32), classes, acc, table.shape[0] - 1


def _lexemes(grammar: Grammar) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """The lexemes (the DFA of each terminal's nonempty strings, and the skip lexeme of
    the ``%ignore`` terminals), the nullable terminals (each stands for the rule
    ``"%opt T": T | ε``), and the skip lexeme's name (None without one)."""
    lex: dict[str, Any] = {}
    optional: dict[str, str] = {}
    for name, t in grammar.terminals.items():
        check_deadline(f"the lexeme of terminal {name}")
        d = t.dfa()
        if d.start == 0:
            continue  # empty language: unproductive
        nonempty = _lexeme_dfa(d)
        if nonempty is not None:
            lex[name] = nonempty
        if d.accepting[d.start]:
            optional[name] = f"%opt {name}"
    skip = None
    if grammar.ignore:
        d = grammar.terminals[grammar.ignore[0]].dfa()
        for name in grammar.ignore[1:]:
            d = union(d, grammar.terminals[name].dfa())
        nonempty = _lexeme_dfa(d)
        if nonempty is not None:
            skip = "%ignore"
            lex[skip] = nonempty
    return lex, optional, skip


@dataclass(frozen=True, eq=False)
class LexemeGrammar:
    """A grammar over lexemes, as llguidance's lexing reads it: what the Earley parser
    here and the LR parser of ``glr`` both run on, so their lexemes and rules are one.

    Symbols: nonterminals ``0 .. n_nt - 1`` (0 is ``%start``), then the lexemes
    ``n_nt + l`` (the skip lexeme last, never in a rule).  ``dr_sym``, ``dr_lhs``,
    ``nt_off``, ``nt_drs`` and ``nullable`` are :func:`toolkit.grammar.cfg.trim`'s
    layout; ``dfas[l]`` is lexeme ``l``'s ``(table, classes, accepting, start)``;
    ``skip`` the skip lexeme's number or -1; ``names`` the symbols' names."""

    n_nt: int
    dr_sym: np.ndarray
    dr_lhs: np.ndarray
    nt_off: np.ndarray
    nt_drs: np.ndarray
    nullable: np.ndarray
    dfas: list[Any]
    skip: int
    nonterminals: list[str]
    lexemes: list[str]

    @property
    def n_lex(self) -> int:
        return len(self.lexemes)

    def symbols(self) -> dict[str, Any]:
        """The numbering, by name (for debugging and tests)."""
        index = {n: i for i, n in enumerate(self.nonterminals)}
        for i, name in enumerate(self.lexemes):
            index[name] = self.n_nt + i
        return {"nonterminals": self.nonterminals, "lexemes": self.lexemes, "index": index}


def lexeme_grammar(grammar: Grammar) -> LexemeGrammar:
    """The grammar over lexemes.

    Rules over lexemes: a nullable terminal ``T`` becomes the rule ``"%opt T": T | ε``
    (just ε when ``T`` matches only the empty string); unproductive and unreachable
    rules are dropped and the rest numbered (the start ``%start: start`` first, then
    in the grammar's order; the lexemes in use by name, the skip lexeme last), all in
    :func:`toolkit.grammar.cfg.trim`.
    """
    lex, optional, skip = _lexemes(grammar)
    names = [n for n in lex if n != skip]
    names.sort()
    nts = [_START, *optional.values(), *grammar.rules]
    n_nt = len(nts)
    index = {n: i for i, n in enumerate(nts)}
    for i, name in enumerate(names):
        index[name] = n_nt + i
    ref = dict(index)  # how a rule refers to a symbol: a nullable terminal through its rule
    for t, opt in optional.items():
        ref[t] = index[opt]
    lhs: list[int] = [0]
    syms: list[int] = [ref.get(grammar.start, -1)]
    off = [0, 1]
    for a, t in enumerate(optional, start=1):
        if t in lex:  # "%opt T": T | ε
            syms.append(index[t])
            lhs.append(a)
            off.append(len(syms))
        lhs.append(a)
        off.append(len(syms))
    get = ref.get
    check_deadline("the grammar over lexemes")
    for a, alts in enumerate(grammar.rules.values(), start=1 + len(optional)):
        for alt in alts:
            syms.extend([get(s, -1) for s in alt])
            lhs.append(a)
            off.append(len(syms))
    nt_map, term_map, dr_sym, dr_lhs, nt_off, nt_drs, nullable = trim(
        n_nt, len(names), np.asarray(lhs, dtype=np.int32), np.asarray(off, dtype=np.int32),
        np.asarray(syms, dtype=np.int32))
    kept = [nts[i] for i in nt_map.tolist()]
    lexemes = [names[i] for i in term_map.tolist()] + ([skip] if skip is not None else [])
    if skip is not None:
        nullable = np.append(nullable, np.uint8(0))
    return LexemeGrammar(len(kept), dr_sym, dr_lhs, nt_off, nt_drs, nullable, [lex[n] for n in lexemes],
                         len(lexemes) - 1 if skip is not None else -1, kept, lexemes)


def build_tables(grammar: Grammar, *, max_lexer_states: int, max_row_items: int, max_steps: int,
                 n_slices: int) -> tuple[ParserTables, dict[str, Any]]:
    """The C tables of a grammar (:func:`lexeme_grammar`), and the symbol numbering
    (for debugging and tests)."""
    lg = lexeme_grammar(grammar)
    check_deadline("llguidance: the parser tables")
    tables = ParserTables(
        lg.dr_sym, lg.dr_lhs, lg.nt_off, lg.nt_drs, lg.nullable,
        lg.n_nt, 0, lg.dfas, lg.skip,
        max_lexer_states=max_lexer_states, max_row_items=max_row_items, max_steps=max_steps,
        n_slices=n_slices,
    )
    return tables, lg.symbols()


def lexer_options(slices: str | Sequence[str], whitespace: str, spelling: str) -> tuple[str, ...]:
    """The slices' regexes for the option ``slices`` (``"default"``, ``"none"`` or a list);
    ValueError for a value of ``slices``, ``whitespace`` or ``spelling`` outside theirs."""
    if whitespace not in WHITESPACES:
        raise ValueError(f"whitespace must be 'flexible' or 'compact', got {whitespace!r}")
    if spelling not in SPELLINGS:
        raise ValueError(f"spelling must be one of {', '.join(SPELLINGS)}, got {spelling!r}")
    if not isinstance(slices, str):
        return tuple(slices)
    if slices not in ("default", "none"):
        raise ValueError(f"slices must be 'default', 'none' or a list of regexes, got {slices!r}")
    return DEFAULT_SLICES if slices == "default" else ()


def check_options(positive: dict[str, Any] | None = None, at_least_zero: dict[str, Any] | None = None,
                  flags: dict[str, Any] | None = None) -> None:
    """ValueError naming the option for a value that is not a positive integer
    (``positive``), an integer >= 0 (``at_least_zero``) or a bool (``flags``): the checks of
    llguidance's limits, shared by the engines built on its parser (``glr``)."""
    for bound, opts in ((1, positive or {}), (0, at_least_zero or {})):
        for opt, value in opts.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < bound:
                what = "a positive integer" if bound else "an integer >= 0"
                raise ValueError(f"{opt} must be {what}, got {value!r}")
    for opt, flag in (flags or {}).items():
        if not isinstance(flag, bool):
            raise ValueError(f"{opt} must be a bool, got {flag!r}")


class LLGuidanceEngine(GrammarEngine):
    """The lexer + Earley + trie-walk strategy; see the module doc for the options."""

    name = "llguidance"
    capabilities = BUILT_IN["llguidance"].capabilities
    native_inputs = frozenset({"json_schema"})
    schema_grammar = "masklab"  # schemas go through Grammar.from_json_schema

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        slices: Literal["default", "none"] | Sequence[str] = "default",
        whitespace: Whitespace = "flexible",
        spelling: Spelling = "json",
        max_lexer_states: int = 250_000,
        max_row_items: int = 10_000,
        max_steps: int = 1_000_000,
        mask_cache: bool = True,
        state_cache_bytes: int = DEFAULT_STATE_CACHE_BYTES,
        max_rules: int = SCHEMA_LIMITS["max_rules"],
        max_schema_depth: int = SCHEMA_LIMITS["max_schema_depth"],
        compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
        memo: bool = True,
    ) -> None:
        regexes = lexer_options(slices, whitespace, spelling)
        check_options(positive={"max_lexer_states": max_lexer_states, "max_row_items": max_row_items,
                                "max_steps": max_steps, "max_rules": max_rules, "max_schema_depth": max_schema_depth},
                      at_least_zero={"state_cache_bytes": state_cache_bytes},
                      flags={"mask_cache": mask_cache, "memo": memo})
        self.vocab = vocab
        self.whitespace = whitespace
        self.spelling = spelling
        self.max_lexer_states = int(max_lexer_states)
        self.max_row_items = int(max_row_items)
        self.max_steps = int(max_steps)
        self.mask_cache = mask_cache
        self.state_cache_bytes = int(state_cache_bytes)
        self.options = {
            "slices": slices if isinstance(slices, str) else list(slices), "whitespace": whitespace, "spelling": spelling,
            "max_lexer_states": self.max_lexer_states, "max_row_items": self.max_row_items,
            "max_steps": self.max_steps, "mask_cache": self.mask_cache,
            "state_cache_bytes": self.state_cache_bytes, "max_rules": int(max_rules),
            "max_schema_depth": int(max_schema_depth), "compile_timeout": check_compile_timeout(compile_timeout),
            "memo": memo,
        }
        self.trie = TokenTrie(vocab)
        self.slicer = Slicer(vocab, self.trie, regexes) if regexes else None
        self.eos_ids = np.asarray(vocab.eos_ids, dtype=np.int64)

    def _compile(self, spec: Any) -> LLGuidanceCompiled:
        t0 = time.perf_counter()
        grammar, kind = self.grammar_for(spec)
        t1 = time.perf_counter()
        tables, symbols = build_tables(
            grammar, max_lexer_states=self.max_lexer_states, max_row_items=self.max_row_items,
            max_steps=self.max_steps, n_slices=len(self.slicer.regexes) if self.slicer else 0,
        )
        tables.set_state_cache(self.state_cache_bytes)
        t2 = time.perf_counter()
        return LLGuidanceCompiled(grammar, tables, kind, symbols, {"grammar": t1 - t0, "tables": t2 - t1})

    def _matcher(self, compiled: LLGuidanceCompiled) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self, compiled, EarleyParser(compiled.tables, use_cache=self.mask_cache))


class LLGuidanceMatcher(NativeMatcher):
    """One sequence: an :class:`EarleyParser` (walking the engine's trie and slices; its
    undo records the lexer state and rows before each token) in a
    :class:`toolkit.core.session.Session`."""

    def __init__(self, engine: LLGuidanceEngine, compiled: LLGuidanceCompiled, parser: EarleyParser) -> None:
        self.vocab = engine.vocab
        self.engine = engine
        self.compiled = compiled
        slicer = engine.slicer
        parser.set_walk(engine.trie, slicer.set if slicer is not None else None)
        self.session = Session(parser, ops_capsule(), engine.vocab_table)

    def _new_core(self) -> EarleyParser:
        parser = EarleyParser(self.compiled.tables, use_cache=self.engine.mask_cache)
        slicer = self.engine.slicer
        parser.set_walk(self.engine.trie, slicer.set if slicer is not None else None)
        return parser

    @property
    def parser(self) -> EarleyParser:
        return self.session.core

    @property
    def nodes_visited(self) -> int:
        """Trie nodes the last mask walked (0 when it was the mask cache's copy)."""
        return self.parser.last_visited
