"""Strategy ``xgrammar``: a byte-level pushdown parser with an adaptive token mask cache.

Dong et al., "XGrammar: Flexible and Efficient Structured Generation Engine for
Large Language Models" (2024), the approach of the xgrammar engine, reimplemented on
masklab's toolkit.  The grammar is parsed byte by byte, without a lexer (its
language is exactly :meth:`Grammar.accepts`', the ``naive`` oracle's); at compile
time every *position* of the parser (a rule's dotted position before a terminal,
with the terminal's DFA state) gets its tokens split into

* **context-independent accepted** ones: the bytes stay inside the rule;
* **context-independent rejected** ones: they fail inside the rule, or leave it with
  a byte that cannot follow the rule anywhere (its follow set: XGrammar's *context
  expansion*);
* **context-dependent** ones: they leave the rule, so what is below on the stack
  decides.

Each position keeps the smaller of its accepted and rejected lists, or a bitset
(*adaptive storage*).  At decode time a mask is the union of the live positions'
accepted tokens plus the context-dependent ones the real parse accepts, checked in
byte order so each token reuses the prefix it shares with the previous one (see
:mod:`strategies.xgrammar._pda`; the cache is built in :mod:`strategies.xgrammar._tables`,
on the Earley parser of :mod:`strategies.xgrammar._charts`).  All the per-token work
is in the cache, so startup time (TTFM) carries the cost, as in XGrammar.

Like XGrammar, rules are inlined before positions are made: a nonterminal with a
single production that is not self-recursive and is either used once or at most
``inline_max`` symbols long is substituted where it is used, so tokens that cross
its boundary stay context-independent (``%ignore`` whitespace, a wrapper around
every terminal, is inlined by this rule).

What ``compile`` takes: a :class:`Grammar`, a JSON schema (dict, bool or
:class:`~toolkit.jsonschema.JsonSchemaText`, compiled by
:meth:`Grammar.from_json_schema`) or a regex (:class:`~toolkit.grammar.RegexText`, :meth:`Grammar.from_regex`; a bare ``str`` is refused).

Options: ``whitespace`` and ``spelling`` (for schemas, as in the llguidance strategy), ``inline_max`` (default 4; 0 inlines only
rules used once), ``share_walks`` (default True: a terminal's states that reach the
same state on a first byte share that subtree's trie walk while the cache is built,
and states that no token tells apart, or dotted rules with the same rest and follow
set, share their cache entries; False, for ablations, builds each position afresh
and the same cache), and the limits ``max_items`` (Earley items in one chart, default
10,000) and ``max_cache_bytes`` (the mask cache of one grammar, default 1 GiB), and for a JSON
schema the compiler's ``max_rules`` (default 50,000) and ``max_schema_depth`` (schemas
nested in schemas, default 100).
Exceeding one is a :class:`~toolkit.core.errors.LimitExceeded` naming the option: at compile
time it is raised, while decoding it puts the matcher in the protocol's sticky error state.
``compile_timeout`` (seconds, default 60, 0: none) bounds one ``compile``: past it the
compile stops at its next check with :class:`~toolkit.core.errors.TimeLimitExceeded`
naming the option and the phase (the grammar's reading, a rule, the mask cache's
dotted rule).
``memo`` (default True) keeps the DFAs and schema fragments of the engine's earlier
compiles (:mod:`toolkit.core.memo`); False starts every compile cold.
"""

from __future__ import annotations

import time
from typing import Any

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
from strategies.xgrammar._pda import Parser, ops_capsule
from strategies.xgrammar._tables import Tables
from toolkit.core import bitmask as bm
from toolkit.core.errors import check_deadline
from toolkit.core.session import Session
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.earley import CFG, compile_cfg, dotted_rules
from toolkit.grammar.ir import Grammar
from toolkit.jsonschema.compiler import SPELLINGS, WHITESPACES, Spelling, Whitespace

__all__ = ["XGrammarEngine", "XGrammarCompiled", "XGrammarMatcher", "build_tables", "inline_rules"]

Rules = dict[int, list[tuple[int, ...]]]


def inline_rules(rules: Rules, start: int, inline_max: int) -> Rules:
    """Substitute the nonterminals (not ``start``) that have one production, are not
    recursive, and are used once in the grammar or are at most ``inline_max`` symbols
    long once their own body is expanded; drop rules no longer reachable from
    ``start``.  The language is unchanged."""
    single = {a: alts[0] for a, alts in rules.items() if len(alts) == 1 and a != start}
    uses: dict[int, int] = {}
    for alts in rules.values():
        for alt in alts:
            for s in alt:
                uses[s] = uses.get(s, 0) + 1
    body_of: dict[int, tuple[int, ...]] = {}  # a single rule's expanded body
    inlined: dict[int, bool] = {}
    visiting: set[int] = set()

    def expand(alt: tuple[int, ...]) -> tuple[int, ...]:
        out: list[int] = []
        for s in alt:
            if s in single and decide(s):
                out.extend(body_of[s])
            else:
                out.append(s)
        return tuple(out)

    def decide(root: int) -> bool:
        # depth first over single rules, on a stack of its own (a chain of single rules
        # can be thousands long: a schema's nested definitions), in the order a recursive
        # expansion would take; a rule met again while it is being expanded (a cycle)
        # stays a reference
        if root in inlined:
            return inlined[root]
        if root in visiting:
            return False
        visiting.add(root)
        stack: list[tuple[int, int, list[int]]] = [(root, 0, [])]
        while stack:
            a, i, body = stack[-1]
            alt = single[a]
            if i < len(alt):
                stack[-1] = (a, i + 1, body)
                s = alt[i]
                if s in single and s not in inlined and s not in visiting:
                    visiting.add(s)
                    stack.append((s, 0, []))
                elif s in single and inlined.get(s, False):
                    body.extend(body_of[s])
                else:
                    body.append(s)
                continue
            stack.pop()
            visiting.discard(a)
            done = tuple(body)
            body_of[a] = done
            inlined[a] = a not in done and (uses.get(a, 0) == 1 or len(done) <= inline_max)
            if stack:
                parent = stack[-1][2]
                parent.extend(done) if inlined[a] else parent.append(a)
        return inlined[root]

    out: Rules = {}
    for k, (a, alts) in enumerate(rules.items()):
        if not k & 255:
            check_deadline(f"xgrammar: inlining rules, symbol {a} of {len(rules)}")
        if a in single:
            if decide(a):
                continue
            out[a] = [body_of[a]]
        else:
            out[a] = [expand(alt) for alt in alts]
    reach = {start}
    todo = [start]
    while todo:
        for alt in out.get(todo.pop(), ()):
            for s in alt:
                if s in out and s not in reach:
                    reach.add(s)
                    todo.append(s)
    return {a: alts for a, alts in out.items() if a in reach}


def _first_bytes(cfg: CFG) -> dict[int, np.ndarray]:
    """bool[256] per terminal: the bytes its DFA can start with."""
    out = {}
    for t in range(cfg.n_nonterminals, len(cfg.names)):
        table, classes = cfg.trans[t], cfg.classes[t]
        start = cfg.dfas[t].start
        out[t] = table[start][classes] != 0
    return out


def _closure_sets(own: dict[int, int], edges: dict[int, set[int]]) -> dict[int, int]:
    """The least sets with ``out[a] ⊇ own[a]`` and ``out[b] ⊇ out[a]`` for each edge
    ``a -> b`` (sets as int bitmasks), by a worklist."""
    out = dict(own)
    todo = list(out)
    while todo:
        a = todo.pop()
        bits = out[a]
        for b in edges.get(a, ()):
            if bits & ~out[b]:
                out[b] |= bits
                todo.append(b)
    return out


def _as_bits(mask: np.ndarray) -> int:
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def follow_sets(rules: Rules, cfg: CFG, nullable: dict[int, bool]) -> dict[int, np.ndarray]:
    """``FOLLOW(A)`` as bool[256] per nonterminal: the first bytes of what can come
    after ``A`` in some sentential form (nothing after the start)."""
    # FIRST(A) includes FIRST(X) for each X that starts A's productions after
    # nullable symbols; FOLLOW(A) includes FIRST of what follows A in a production
    # (up to the first non-nullable symbol) and, when all of that is nullable, the
    # FOLLOW of the production's lhs
    first_own = {t: _as_bits(m) for t, m in _first_bytes(cfg).items()}
    first_own.update((a, 0) for a in rules)
    first_edges: dict[int, set[int]] = {}
    for a, alts in rules.items():
        for alt in alts:
            for s in alt:
                first_edges.setdefault(s, set()).add(a)
                if not nullable[s]:
                    break
    first = _closure_sets(first_own, first_edges)
    follow_own = dict.fromkeys(rules, 0)
    follow_edges: dict[int, set[int]] = {}
    for b, alts in rules.items():
        for alt in alts:
            for i, a in enumerate(alt):
                if a not in rules:
                    continue
                for s in alt[i + 1 :]:
                    follow_own[a] |= first[s]
                    if not nullable[s]:
                        break
                else:
                    follow_edges.setdefault(b, set()).add(a)
    follow = _closure_sets(follow_own, follow_edges)
    return {a: np.unpackbits(np.frombuffer(v.to_bytes(32, "little"), dtype=np.uint8), bitorder="little").astype(bool)
            for a, v in follow.items()}


def build_tables(grammar: Grammar, *, inline_max: int, max_items: int) -> tuple[Tables, dict[str, Any]]:
    """The C tables of a grammar (no cache yet), and the symbol numbering: ``names``
    (nonterminals first, the start at 0, then terminals), ``dotted`` (per dotted rule,
    its lhs and next symbol, -1 at a production's end)."""
    cfg = compile_cfg(grammar)
    n_nt = cfg.n_nonterminals
    rules: Rules = {a: [] for a in range(n_nt)}
    for lhs, rhs in cfg.prods:
        rules[lhs].append(rhs)
    rules = inline_rules(rules, cfg.start_symbol, inline_max)
    check_deadline("xgrammar: follow sets")
    nullable = {i: bool(v) for i, v in enumerate(cfg.nullable)}
    nts = [cfg.start_symbol] + sorted(a for a in rules if a != cfg.start_symbol)
    terms = sorted({s for alts in rules.values() for alt in alts for s in alt if s >= n_nt})
    index = {s: i for i, s in enumerate(nts)}
    for i, t in enumerate(terms):
        index[t] = len(nts) + i
    dr_sym, dr_lhs, nt_off, nt_drs = dotted_rules(nts, rules, index)
    follow = follow_sets(rules, cfg, nullable)
    check_deadline("xgrammar: parser tables")
    fol = np.zeros((len(nts), 256), dtype=np.uint8)
    for a, old in enumerate(nts):
        fol[a] = follow[old]
    null = np.asarray([nullable[s] for s in nts + terms], dtype=np.uint8)
    terminals = [(cfg.trans[t], cfg.classes[t], cfg.accepting[t], cfg.dfas[t].start) for t in terms]
    tables = Tables(dr_sym, dr_lhs, nt_off, nt_drs, null, len(nts), 0, terminals, fol, max_items=max_items)
    names = [cfg.names[s] for s in nts + terms]
    dotted = list(zip(dr_lhs.tolist(), dr_sym.tolist(), strict=True))
    return tables, {"names": names, "nonterminals": len(nts), "terminals": len(terms), "dotted": dotted}


class XGrammarCompiled(CompiledTables):
    """A grammar's parser tables with its adaptive token mask cache."""

    def stats(self) -> dict[str, float]:
        """Grammar size, the cache (positions, shared terminal states by storage kind,
        frontier nodes, context-dependent ids, bytes) and the build seconds."""
        t = self.tables
        return {
            "nonterminals": self.symbols["nonterminals"],
            "terminals": self.symbols["terminals"],
            "dotted_rules": t.n_dr,
            **t.cache_stats(),
            "memory_bytes": self.memory_bytes(),
            **{f"{k}_s": round(v, 6) for k, v in self.timings.items()},
        }

    def __repr__(self) -> str:
        t = self.tables
        return f"XGrammarCompiled(kind={self.kind!r}, dotted_rules={t.n_dr}, positions={t.n_pos})"


class XGrammarEngine(GrammarEngine):
    """The pushdown-parser + adaptive-cache strategy; see the module doc for options."""

    name = "xgrammar"
    capabilities = BUILT_IN["xgrammar"].capabilities
    native_inputs = frozenset({"json_schema"})
    schema_grammar = "masklab"  # schemas go through Grammar.from_json_schema

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        whitespace: Whitespace = "flexible",
        spelling: Spelling = "json",
        inline_max: int = 4,
        max_items: int = 10_000,
        max_cache_bytes: int = 1 << 30,
        max_rules: int = SCHEMA_LIMITS["max_rules"],
        max_schema_depth: int = SCHEMA_LIMITS["max_schema_depth"],
        compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
        share_walks: bool = True,
        memo: bool = True,
    ) -> None:
        if whitespace not in WHITESPACES:
            raise ValueError(f"whitespace must be 'flexible' or 'compact', got {whitespace!r}")
        if spelling not in SPELLINGS:
            raise ValueError(f"spelling must be one of {', '.join(SPELLINGS)}, got {spelling!r}")
        for opt, value, low in (("inline_max", inline_max, 0), ("max_items", max_items, 1),
                                ("max_cache_bytes", max_cache_bytes, 1), ("max_rules", max_rules, 1),
                                ("max_schema_depth", max_schema_depth, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{opt} must be an integer >= {low}, got {value!r}")
        if not isinstance(memo, bool):
            raise ValueError(f"memo must be a bool, got {memo!r}")
        self.vocab = vocab
        self.whitespace = whitespace
        self.spelling = spelling
        self.inline_max = int(inline_max)
        self.max_items = int(max_items)
        if not isinstance(share_walks, bool):
            raise ValueError(f"share_walks must be a bool, got {share_walks!r}")
        self.max_cache_bytes = int(max_cache_bytes)
        self.share_walks = share_walks
        self.options = {"whitespace": whitespace, "spelling": spelling, "inline_max": self.inline_max, "max_items": self.max_items,
                        "max_cache_bytes": self.max_cache_bytes, "max_rules": int(max_rules),
                        "max_schema_depth": int(max_schema_depth),
                        "compile_timeout": check_compile_timeout(compile_timeout), "share_walks": share_walks,
                        "memo": memo}
        self.trie = TokenTrie(vocab)
        self._blob, self._offsets = self.trie.token_blob()
        self._text_words = bm.set_bits(bm.allocate(vocab.size)[0], self.trie.token_ids).view(np.uint32)

    def _compile(self, spec: Any) -> XGrammarCompiled:
        t0 = time.perf_counter()
        grammar, kind = self.grammar_for(spec)
        t1 = time.perf_counter()
        tables, symbols = build_tables(grammar, inline_max=self.inline_max, max_items=self.max_items)
        check_deadline("xgrammar: the adaptive token mask cache")
        t2 = time.perf_counter()
        tables.build_cache(self.trie, self._blob, self._offsets, self._text_words,
                           max_cache_bytes=self.max_cache_bytes, share_walks=self.share_walks)
        t3 = time.perf_counter()
        return XGrammarCompiled(grammar, tables, kind, symbols,
                                {"grammar": t1 - t0, "tables": t2 - t1, "cache": t3 - t2})

    def _matcher(self, compiled: XGrammarCompiled) -> XGrammarMatcher:
        return XGrammarMatcher(self, compiled, Parser(compiled.tables))


class XGrammarMatcher(NativeMatcher):
    """One sequence: a :class:`Parser` (its undo records are byte counts) in a
    :class:`toolkit.core.session.Session`."""

    def __init__(self, engine: XGrammarEngine, compiled: XGrammarCompiled, parser: Parser) -> None:
        self.vocab = engine.vocab
        self.engine = engine
        self.compiled = compiled
        self.session = Session(parser, ops_capsule(), engine.vocab_table)

    def _new_core(self) -> Parser:
        return Parser(self.compiled.tables)

    @property
    def parser(self) -> Parser:
        return self.session.core

    @property
    def last_fill(self) -> dict[str, int]:
        """Live positions and context-dependent tokens checked by the last mask."""
        return {"positions": self.parser.positions, "checked": self.parser.checked}
