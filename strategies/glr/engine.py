"""Strategy ``glr``: the fourth corner's parser, LR tables with a graph-structured stack,
under llguidance's lexer and trie walk.

SynCode (Ugare et al., TMLR 2025) parses lexemes with LALR(1) tables; glrmask (2026)
with a GLR parser whose stacks share a graph (Tomita 1985).  This strategy does the
same over the lexemes of our ``llguidance``: the grammar over lexemes is
:func:`strategies.llguidance.engine.lexeme_grammar`'s (so its lexemes, ``%ignore`` and
optional lexemes are llguidance's), its repetitions made left-recursive where that adds
no conflict (:func:`toolkit.grammar.lr.flat_repetitions`: a flat stack over a list),
:func:`toolkit.grammar.lr.build_lr` makes the LR(0) automaton with LALR(1) lookaheads
(conflicts kept: the parser follows every action),
and :mod:`strategies.glr._core` runs it in the rows of llguidance's parser, so the
lexer, the trie walk, the slicer, the mask cache, forks, rollback and the native batch
are llguidance's and the masks equal ``llguidance``'s bit for bit on the same grammar.
A row costs a few table lookups where the grammar is deterministic (LALR(1): 91 of 98
MaskBench schemas sampled), instead of an Earley set.

A mask is made from the *mask tables* (:mod:`strategies.glr._core`): per lexer state,
the tokens that stay in the lexeme (a row) and the tokens that cross its end grouped by
where it ends, with per boundary group and next start state a child of the same shape;
a mask is the root's row, per group the lexeme's scan (followed on the stack's linear
top without rows where it can) and the child's row.  They are
made at compile (``mask_tables="ahead"``: every lexer state a mask can start in that the
LR automaton predicts; ``compiled.ahead_complete`` says whether ``ahead_nodes`` cut it
short), then those where several stacks start a lexeme together, found by exploring
the parser's configurations a lexeme at a time (``explore_configs``; on 142 MaskBench
schemas its p50 is 0.12 ms and its max 35 ms; no mask of the 1,305 schemas with test
instances stays over 50 us in two of three repeats, the slowest 38 us), and what a mask meets that they lack is
made then; ``"lazy"`` makes them only
then, ``"off"`` walks the token trie as ``llguidance`` does (ablations).  Lexer states
that no token tells apart (a ``maxLength`` string's positions away from its ends) share
one root.  A mask asked for twice in a row in one lexer state and
rows (inside a string, token after token) is kept in the matcher's mask cache the
second time, and the masks after it there are copies (``mask_cache``; 16 % of the masks
of 150 MaskBench schemas, at 0.57 us against 1.19 us made).  Masks can
also be stored as they are made (``mask_store_bytes`` > 0; off by default): keyed by
the lexer state and the LR states of the stack's top down to the deepest one the mask
read, so a later mask at the same lexer state over the same stack top is a row copy.
On the 1,500 MaskBench schemas the store's inserts (a copy of the whole mask into pages
first touched then) cost more than its hits save: TBM p99 23.1 us without it against
38.4 us with 64 MiB, the median 2.6 against 3.1 (``results/glr/ablations.md``).

Options: ``lookahead`` (1: LALR(1) tables; 0: LR(0), more conflicts and the same
masks, for ablations), ``max_states`` (LR(0) states, default 100,000),
``max_table_bytes`` (the LR tables' C arrays and the mask tables, default 256 MiB: the
LR arrays past it are an error at compile, the mask tables stop growing and later masks
are walked), ``mask_tables`` (``"ahead"``, ``"lazy"``, ``"off"``), ``ahead_nodes`` (trie
nodes the making ahead may visit, default 80,000,000), ``explore_configs`` (parser
configurations the exploration after it may meet, default 4,096; 0: none), ``mask_store_bytes`` (the mask
store's bytes, default 0: no store), ``store_min_rows`` (a mask from the tables is stored when it made a
context or took this many rows, default 8; 0 stores every mask), and
llguidance's ``slices``, ``whitespace``, ``spelling``, ``max_lexer_states``,
``max_row_items`` (items of one row: the stack's nodes and edges written by a scan,
default 10,000), ``max_steps`` (items, reductions' paths and lexer states of one mask
or token, default 1,000,000), ``mask_cache``, ``memo``, ``max_rules``,
``max_schema_depth`` and ``compile_timeout``.  Exceeding a limit is a
:class:`~toolkit.core.errors.LimitExceeded` naming the option (at compile for
``max_states``, ``max_table_bytes`` and the schema's limits; the matcher's sticky error
for the others); a compile past ``compile_timeout`` seconds (default 60, 0: none) is a
:class:`~toolkit.core.errors.TimeLimitExceeded` saying where it stopped (an LR state,
the mask tables made ahead).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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
from strategies.glr._core import GLRParser, GLRTables
from strategies.llguidance.engine import (
    LexemeGrammar,
    Slicer,
    check_options,
    lexeme_grammar,
    lexer_options,
)
from strategies.llguidance.parser import ops_capsule
from toolkit.core.errors import LimitExceeded, check_deadline
from toolkit.core.session import Session
from toolkit.core.trie import TokenTrie
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar
from toolkit.grammar.lr import DEFAULT_MAX_STATES, LRTables, flat_repetitions, productions_of
from toolkit.jsonschema.compiler import Spelling, Whitespace

__all__ = ["GLREngine", "GLRCompiled", "GLRMatcher", "lr_arrays"]

EXPLORE_NODES_SHARE = 16
"""The exploration's roots may visit ``ahead_nodes // EXPLORE_NODES_SHARE`` trie nodes."""


def lr_arrays(lr: LRTables) -> dict[str, Any]:
    """The C layout of :class:`GLRTables` for ``lr`` (terminal ``l`` is lexeme ``l``):
    per state, its shifts, gotos, reductions and candidate lexemes as sorted lists (CSR)."""
    n, t = lr.n_states, lr.n_term
    lists: dict[str, list[int]] = {k: [] for k in ("sh_lex", "sh_to", "goto_nt", "goto_to", "rd_la", "rd_prod",
                                                   "cand_lex")}
    offs = {k: np.zeros(n + 1, dtype=np.int32) for k in ("sh_off", "goto_off", "rd_off", "cand_off")}
    for s in range(n):
        if not s & 255:
            check_deadline(f"glr: the LR arrays, state {s} of {n}")
        for a in sorted(lr.shift[s]):
            lists["sh_lex"].append(a)
            lists["sh_to"].append(lr.shift[s][a])
        for a in sorted(lr.goto[s]):
            lists["goto_nt"].append(a)
            lists["goto_to"].append(lr.goto[s][a])
        for la in sorted(lr.reduce[s]):
            for p in lr.reduce[s][la]:
                lists["rd_la"].append(la)
                lists["rd_prod"].append(p)
        lists["cand_lex"].extend(sorted(set(lr.shift[s]) | {a for a in lr.reduce[s] if a < t}))
        for off, key in (("sh_off", "sh_lex"), ("goto_off", "goto_nt"), ("rd_off", "rd_la"), ("cand_off", "cand_lex")):
            offs[off][s + 1] = len(lists[key])
    return {
        "n_states": n, "n_term": t, **offs, **{k: np.asarray(v, dtype=np.int32) for k, v in lists.items()},
        "prod_lhs": np.asarray([lhs for lhs, _ in lr.prods], dtype=np.int32),
        "prod_len": np.asarray([len(rhs) for _, rhs in lr.prods], dtype=np.int32),
        "conflicts": lr.conflicts,
    }


class GLRCompiled(CompiledTables):
    """A grammar as llguidance's lexer tables and an LR automaton (``lr``)."""

    lr: LRTables
    #: the making ahead made every mask-table context it found (no limit cut it short)
    ahead_complete: bool = False
    #: the exploration's (configurations met, start states of several tops found, trie
    #: nodes its roots visited); zeros when it did not run
    explored: tuple[int, int, int] = (0, 0, 0)

    def stats(self) -> dict[str, float]:
        """Grammar size (nonterminals, productions, lexemes), the LR automaton (states,
        conflicts), lexer states built so far, the largest row and step count seen, the
        mask store, the mask tables (contexts, roots shared between lexer states no token
        tells apart, groups, bytes, trie nodes made ahead; masks
        made from them, walked past them, the rows and scans they combined), memory and
        build seconds."""
        t = self.tables
        return {
            "nonterminals": t.n_nt,
            "lexemes": t.n_lex,
            **self.lr.stats(),
            "lexer_states": t.n_ls,
            "peak_row_items": t.peak_row_items,
            "peak_steps": t.peak_steps,
            "store_entries": t.store_entries,
            "store_hits": t.store_hits,
            "store_bytes": t.store_bytes,
            "contexts": t.contexts,
            "roots_shared": t.roots_shared,
            "context_groups": t.groups,
            "groups_shared": t.groups_shared,
            "rows_shared": t.rows_shared,
            "table_bytes": t.cx_bytes,
            "ahead_nodes": t.ahead_nodes,
            "explored_configs": self.explored[0],
            "explored_seeds": self.explored[1],
            "table_fills": t.cx_fills,
            "table_walks": t.cx_walks,
            "table_rows": t.cx_rows,
            "table_scans": t.cx_scans,
            "table_fast": t.cx_fast,
            "memory_bytes": self.memory_bytes(),
            **{f"{k}_s": round(v, 6) for k, v in self.timings.items()},
        }

    def __repr__(self) -> str:
        return (f"GLRCompiled(kind={self.kind!r}, lexemes={self.tables.n_lex}, lr_states={self.lr.n_states}, "
                f"conflicts={self.lr.conflicts})")


class GLREngine(GrammarEngine):
    """LR tables and a graph-structured stack under llguidance's lexer; see the module doc."""

    name = "glr"
    capabilities = BUILT_IN["glr"].capabilities
    native_inputs = frozenset({"json_schema"})
    schema_grammar = "masklab"

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        lookahead: Literal[0, 1] = 1,
        max_states: int = DEFAULT_MAX_STATES,
        max_table_bytes: int = 256 << 20,
        mask_store_bytes: int = 0,
        store_min_rows: int = 8,
        mask_tables: Literal["ahead", "lazy", "off"] = "ahead",
        ahead_nodes: int = 80_000_000,
        explore_configs: int = 4096,
        slices: Literal["default", "none"] | Sequence[str] = "default",
        whitespace: Whitespace = "flexible",
        spelling: Spelling = "json",
        max_lexer_states: int = 250_000,
        max_row_items: int = 10_000,
        max_steps: int = 1_000_000,
        mask_cache: bool = True,
        max_rules: int = SCHEMA_LIMITS["max_rules"],
        max_schema_depth: int = SCHEMA_LIMITS["max_schema_depth"],
        compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
        memo: bool = True,
    ) -> None:
        if lookahead not in (0, 1) or isinstance(lookahead, bool):
            raise ValueError(f"lookahead must be 0 (LR(0)) or 1 (LALR(1)), got {lookahead!r}")
        regexes = lexer_options(slices, whitespace, spelling)
        check_options(
            positive={"max_states": max_states, "max_table_bytes": max_table_bytes, "ahead_nodes": ahead_nodes,
                      "max_lexer_states": max_lexer_states, "max_row_items": max_row_items, "max_steps": max_steps,
                      "max_rules": max_rules, "max_schema_depth": max_schema_depth},
            at_least_zero={"mask_store_bytes": mask_store_bytes, "store_min_rows": store_min_rows,
                           "explore_configs": explore_configs},
            flags={"mask_cache": mask_cache, "memo": memo})
        if mask_tables not in ("ahead", "lazy", "off"):
            raise ValueError(f"mask_tables must be 'ahead', 'lazy' or 'off', got {mask_tables!r}")
        self.vocab = vocab
        self.lookahead = lookahead
        self.max_states = max_states
        self.max_table_bytes = max_table_bytes
        self.mask_store_bytes = mask_store_bytes
        self.mask_tables = mask_tables
        self.ahead_nodes = ahead_nodes
        self.explore_configs = explore_configs
        self.store_min_rows = store_min_rows
        self.whitespace = whitespace
        self.spelling = spelling
        self.max_lexer_states = max_lexer_states
        self.max_row_items = max_row_items
        self.max_steps = max_steps
        self.mask_cache = mask_cache
        self.options = {
            "lookahead": lookahead, "max_states": max_states, "max_table_bytes": max_table_bytes,
            "mask_store_bytes": mask_store_bytes, "mask_tables": mask_tables, "ahead_nodes": ahead_nodes,
            "explore_configs": explore_configs, "store_min_rows": store_min_rows,
            "slices": slices if isinstance(slices, str) else list(slices), "whitespace": whitespace,
            "spelling": spelling, "max_lexer_states": max_lexer_states, "max_row_items": max_row_items,
            "max_steps": max_steps, "mask_cache": mask_cache, "max_rules": max_rules,
            "max_schema_depth": max_schema_depth, "compile_timeout": check_compile_timeout(compile_timeout),
            "memo": memo,
        }
        self.trie = TokenTrie(vocab)
        self.slicer = Slicer(vocab, self.trie, regexes) if regexes else None

    def tables_for(self, grammar: Grammar) -> tuple[GLRTables, LRTables, LexemeGrammar, dict[str, float]]:
        """The C tables of ``grammar``, its LR automaton, its grammar over lexemes and
        the seconds of each step."""
        t0 = time.perf_counter()
        lg = lexeme_grammar(grammar)
        t1 = time.perf_counter()
        n_term = lg.n_lex - (lg.skip >= 0)
        # the repetitions left-recursive (a flat stack over a list) where that adds no conflict
        lr = flat_repetitions(productions_of(lg.dr_sym, lg.dr_lhs, lg.nt_off, lg.nt_drs), lg.n_nt, n_term,
                              lookahead=self.lookahead, max_states=self.max_states)
        t2 = time.perf_counter()
        check_deadline("glr: the LR arrays")
        arrays = lr_arrays(lr)
        need = sum(a.nbytes for a in arrays.values() if isinstance(a, np.ndarray))
        if need > self.max_table_bytes:
            raise LimitExceeded("max_table_bytes", need, self.max_table_bytes,
                                f"the LR tables of {lr.n_states} states over {n_term} lexemes")
        tables = GLRTables(
            lg.dr_sym, lg.dr_lhs, lg.nt_off, lg.nt_drs, lg.nullable, lg.n_nt, lg.dfas, lg.skip,
            **arrays, max_lexer_states=self.max_lexer_states, max_row_items=self.max_row_items,
            max_steps=self.max_steps, n_slices=len(self.slicer.regexes) if self.slicer else 0,
            max_store_bytes=self.mask_store_bytes,
            max_cx_bytes=max(1, self.max_table_bytes - need) if self.mask_tables != "off" else 0,
            store_min_rows=self.store_min_rows)
        t3 = time.perf_counter()
        return tables, lr, lg, {"lexemes": t1 - t0, "lr": t2 - t1, "tables": t3 - t2}

    def _compile(self, spec: Any) -> GLRCompiled:
        t0 = time.perf_counter()
        grammar, kind = self.grammar_for(spec)
        t1 = time.perf_counter()
        tables, lr, lg, timings = self.tables_for(grammar)
        compiled = GLRCompiled(grammar, tables, kind, lg.symbols(), {"grammar": t1 - t0, **timings})
        compiled.lr = lr
        if self.mask_tables == "ahead":
            check_deadline("glr: the mask tables made ahead")
            t4 = time.perf_counter()
            parser = self._parser(compiled)
            compiled.ahead_complete = parser.ahead(self.ahead_nodes)
            t5 = time.perf_counter()
            compiled.timings["ahead"] = t5 - t4
            if self.explore_configs > 0:
                compiled.explored = parser.explore(self.explore_configs, self.ahead_nodes // EXPLORE_NODES_SHARE)
                compiled.timings["explore"] = time.perf_counter() - t5
        return compiled

    def _matcher(self, compiled: GLRCompiled) -> GLRMatcher:
        return GLRMatcher(self, compiled, self._parser(compiled))

    def _parser(self, compiled: GLRCompiled) -> GLRParser:
        parser = GLRParser(compiled.tables, use_cache=self.mask_cache)
        parser.set_walk(self.trie, self.slicer.set if self.slicer is not None else None)
        return parser


class GLRMatcher(NativeMatcher):
    """One sequence: a :class:`GLRParser` in a :class:`toolkit.core.session.Session`
    (llguidance's ops: the parser is an ``EarleyParser`` with LR rows)."""

    def __init__(self, engine: GLREngine, compiled: GLRCompiled, parser: GLRParser) -> None:
        self.vocab = engine.vocab
        self.engine = engine
        self.compiled = compiled
        self.session = Session(parser, ops_capsule(), engine.vocab_table)

    def _new_core(self) -> GLRParser:
        return self.engine._parser(self.compiled)

    @property
    def parser(self) -> GLRParser:
        return self.session.core
