"""A scannerless Earley recognizer over bytes: the reference for a grammar's language.

Earley (1970) with the nullable fix of Aycock & Horspool (2002), run one *byte* at
a time.  Terminals are not lexed: a terminal predicted at position ``j`` becomes a
*terminal item* ``(t, j) -> DFA state`` that advances with every byte while its DFA
stays alive, and completes (advancing the rule items waiting on ``t`` in chart ``j``)
whenever its state is accepting.  ``%ignore`` is desugared: ``WS`` is one terminal
for ``(ign_1|...|ign_k)*``, every terminal occurrence ``t`` becomes ``WS t`` and the
start becomes ``S' -> S WS``.

Before recognizing, unproductive rules (that derive no string) are removed, so a
chart with a live terminal item is a viable prefix (Earley's correct-prefix
property): ``push_byte`` fails exactly when no sentence starts with the bytes.

This is deliberately plain Python, written to be obviously right rather than fast:
it is the oracle other strategies are tested against.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from toolkit.automata.regex import ByteDFA, compile_regex
from toolkit.core.errors import LimitExceeded, check_deadline

__all__ = ["CFG", "compile_cfg", "ByteRecognizer", "DEFAULT_MAX_ITEMS"]

DEFAULT_MAX_ITEMS = 200_000
"""Default limit on items in one Earley chart."""

_WS = "%ignore"
_START = "%start"


@dataclass(frozen=True, eq=False)
class CFG:
    """A grammar flattened for recognition.

    Symbols ``0 .. n_nonterminals-1`` are nonterminals, the rest terminals.
    ``prods[p] = (lhs, rhs)``; ``by_lhs[A]`` lists A's productions; ``start_prods``
    are those of the augmented start symbol.
    """

    names: tuple[str, ...]
    n_nonterminals: int
    prods: tuple[tuple[int, tuple[int, ...]], ...]
    by_lhs: tuple[tuple[int, ...], ...]
    nullable: tuple[bool, ...]
    start_prods: tuple[int, ...]
    start_symbol: int
    dfas: tuple[ByteDFA | None, ...]  # per symbol; None for nonterminals
    trans: tuple[np.ndarray | None, ...]  # per symbol: the DFA's table over its byte classes
    classes: tuple[np.ndarray | None, ...]  # per symbol: the class of each byte
    accepting: tuple[np.ndarray | None, ...]


def derives(prods: Iterable[tuple[Hashable, Sequence[Hashable]]], base: set) -> set:
    """The least set holding ``base`` and every lhs with a production whose symbols
    are all in the set (productive symbols from the live terminals, nullable ones
    from the nullable terminals).  Linear: each production counts its symbols not
    yet in the set, and a symbol that joins it decrements the productions using it."""
    out = set(base)
    missing: list[int] = []
    lhs_of: list[Hashable] = []
    uses: dict[Hashable, list[int]] = {}
    todo: list[Hashable] = []
    for lhs, rhs in prods:
        k = len(lhs_of)
        lhs_of.append(lhs)
        n = 0
        for sym in rhs:
            if sym not in out:
                uses.setdefault(sym, []).append(k)
                n += 1
        missing.append(n)
        if n == 0 and lhs not in out:
            out.add(lhs)
            todo.append(lhs)
    while todo:
        for k in uses.get(todo.pop(), ()):
            missing[k] -= 1
            if missing[k] == 0 and lhs_of[k] not in out:
                out.add(lhs_of[k])
                todo.append(lhs_of[k])
    return out


def dotted_rules(nts: Sequence[Hashable], rules: Mapping[Hashable, Sequence[Sequence[Hashable]]],
                 index: Mapping[Hashable, int]) -> tuple[np.ndarray, ...]:
    """The flat layout the Cython Earley parsers read: ``(dr_sym, dr_lhs, nt_off,
    nt_drs)`` as int32 arrays.  Nonterminal ``a`` is ``nts[a]``; each of its
    productions is its symbols' ``index`` numbers followed by ``-1`` in ``dr_sym``
    (``dr_lhs`` gives each entry's ``a``), and ``nt_drs[nt_off[a]:nt_off[a + 1]]``
    are the offsets where they start."""
    dr_sym: list[int] = []
    dr_lhs: list[int] = []
    nt_off = [0]
    nt_drs: list[int] = []
    for a, name in enumerate(nts):
        for alt in rules[name]:
            nt_drs.append(len(dr_sym))
            for sym in alt:
                dr_sym.append(index[sym])
                dr_lhs.append(a)
            dr_sym.append(-1)
            dr_lhs.append(a)
        nt_off.append(len(nt_drs))
    return tuple(np.asarray(x, dtype=np.int32) for x in (dr_sym, dr_lhs, nt_off, nt_drs))


def _productive(grammar_rules: dict[str, list[tuple[str, ...]]], live_terms: set[str]) -> set[str]:
    return derives(((lhs, alt) for lhs, alts in grammar_rules.items() for alt in alts), live_terms)


def compile_cfg(grammar) -> CFG:
    """Flatten a :class:`toolkit.grammar.Grammar` (cached on the grammar object)."""
    cached = grammar.__dict__.get("_cfg")
    if cached is not None:
        return cached
    cfg = _compile(grammar)
    object.__setattr__(grammar, "_cfg", cfg)
    return cfg


def _compile(grammar) -> CFG:
    check_deadline("flattening the grammar (compile_cfg)")
    term_dfas = {name: t.dfa() for name, t in grammar.terminals.items()}
    rules: dict[str, list[tuple[str, ...]]] = {k: list(v) for k, v in grammar.rules.items()}
    ws = None
    if grammar.ignore:
        union = "|".join(f"(?:{grammar.terminals[n].regex})" for n in grammar.ignore)
        ws = compile_regex(f"(?:{union})*")
        term_dfas[_WS] = ws
        wrapped = {}
        for lhs, alts in rules.items():
            new_alts = []
            for alt in alts:
                new_alt: list[str] = []
                for s in alt:
                    if s in grammar.terminals:
                        w = wrapped.setdefault(s, f"%ws {s}")
                        new_alt.append(w)
                    else:
                        new_alt.append(s)
                new_alts.append(tuple(new_alt))
            rules[lhs] = new_alts
        for s, w in wrapped.items():
            rules[w] = [(_WS, s)]
        rules[_START] = [(grammar.start, _WS)]
    else:
        rules[_START] = [(grammar.start,)]

    live_terms = {n for n, d in term_dfas.items() if not d.is_empty()}
    check_deadline("flattening the grammar (compile_cfg): productive rules")
    productive = _productive(rules, live_terms)
    rules = {
        lhs: [alt for alt in alts if all(s in productive for s in alt)]
        for lhs, alts in rules.items()
        if lhs in productive
    }
    if _START not in rules:
        rules[_START] = []  # empty language: nothing is ever accepted

    nonterminals = list(rules)
    terminals = sorted({s for alts in rules.values() for alt in alts for s in alt if s in term_dfas})
    names = tuple(nonterminals + terminals)
    index = {n: i for i, n in enumerate(names)}
    prods: list[tuple[int, tuple[int, ...]]] = []
    by_lhs: list[list[int]] = [[] for _ in nonterminals]
    for lhs in nonterminals:
        for alt in rules[lhs]:
            by_lhs[index[lhs]].append(len(prods))
            prods.append((index[lhs], tuple(index[s] for s in alt)))

    null_terms = {index[t] for t in terminals if term_dfas[t].accepting[term_dfas[t].start]}
    null_set = derives(prods, null_terms)
    nullable = [i in null_set for i in range(len(names))]

    dfas: list[ByteDFA | None] = [None] * len(nonterminals) + [term_dfas[t] for t in terminals]
    return CFG(
        names=names,
        n_nonterminals=len(nonterminals),
        prods=tuple(prods),
        by_lhs=tuple(tuple(p) for p in by_lhs),
        nullable=tuple(nullable),
        start_prods=tuple(by_lhs[index[_START]]),
        start_symbol=index[_START],
        dfas=tuple(dfas),
        trans=tuple(d.table if d is not None else None for d in dfas),
        classes=tuple(d.classes if d is not None else None for d in dfas),
        accepting=tuple(d.accepting if d is not None else None for d in dfas),
    )


class _Chart:
    """The Earley set at one byte position.  Never mutated once its closure is done."""

    __slots__ = ("items", "waiting", "terms")

    def __init__(self) -> None:
        self.items: set[tuple[int, int, int]] = set()  # (production, dot, origin)
        self.waiting: dict[int, list[tuple[int, int, int]]] = {}  # next symbol -> items
        self.terms: dict[tuple[int, int], int] = {}  # (terminal, origin) -> live DFA state


class ByteRecognizer:
    """Incremental recognizer: ``push_byte`` / ``pop`` keep a stack of charts.

    The state after a byte string is the list of charts; charts are immutable once
    built, so :meth:`copy` is a shallow list copy.
    """

    __slots__ = ("cfg", "charts", "max_items")

    def __init__(self, cfg: CFG, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self.cfg = cfg
        self.max_items = max_items
        chart = _Chart()
        self.charts: list[_Chart] = [chart]
        self._closure(chart, 0, [(p, 0, 0) for p in cfg.start_prods])

    def copy(self) -> ByteRecognizer:
        other = ByteRecognizer.__new__(ByteRecognizer)
        other.cfg = self.cfg
        other.max_items = self.max_items
        other.charts = list(self.charts)
        return other

    @property
    def position(self) -> int:
        """Bytes consumed so far."""
        return len(self.charts) - 1

    def _closure(self, chart: _Chart, j: int, agenda: list[tuple[int, int, int]]) -> None:
        cfg = self.cfg
        prods, n_nt, nullable = cfg.prods, cfg.n_nonterminals, cfg.nullable
        items, waiting, terms = chart.items, chart.waiting, chart.terms
        charts = self.charts
        predicted: set[int] = set()
        pending = []
        for it in agenda:
            if it not in items:
                items.add(it)
                pending.append(it)
        while pending:
            if len(items) > self.max_items:
                raise LimitExceeded("max_items", len(items), self.max_items,
                                    f"Earley items in the chart at byte {j}")
            p, d, o = pending.pop()
            lhs, rhs = prods[p]
            advanced: list[tuple[int, int, int]] = []
            if d == len(rhs):
                # Completion.  When o == j the waiting list may still grow; items
                # added later are advanced by the nullable rule at prediction.
                src = waiting if o == j else charts[o].waiting
                for wp, wd, wo in src.get(lhs, ()):
                    advanced.append((wp, wd + 1, wo))
            else:
                x = rhs[d]
                waiting.setdefault(x, []).append((p, d, o))
                if x < n_nt:
                    if x not in predicted:
                        predicted.add(x)
                        for q in cfg.by_lhs[x]:
                            advanced.append((q, 0, j))
                elif (x, j) not in terms:
                    terms[(x, j)] = cfg.dfas[x].start
                if nullable[x]:
                    advanced.append((p, d + 1, o))
            for it in advanced:
                if it not in items:
                    items.add(it)
                    pending.append(it)

    def push_byte(self, byte: int) -> bool:
        """Consume one byte; False (and no change) when no sentence continues so."""
        cfg = self.cfg
        cur = self.charts[-1]
        nxt = _Chart()
        agenda: list[tuple[int, int, int]] = []
        charts = self.charts
        for (t, o), s in cur.terms.items():
            s2 = int(cfg.trans[t][s, cfg.classes[t][byte]])
            if s2:
                nxt.terms[(t, o)] = s2
                if cfg.accepting[t][s2]:
                    for wp, wd, wo in charts[o].waiting.get(t, ()):
                        agenda.append((wp, wd + 1, wo))
        if not nxt.terms:
            return False
        charts.append(nxt)
        try:
            self._closure(nxt, len(charts) - 1, agenda)
        except BaseException:
            charts.pop()
            raise
        return True

    def push_bytes(self, data: bytes) -> bool:
        """Consume all of ``data`` or nothing."""
        n = 0
        for b in data:
            if not self.push_byte(b):
                self.pop(n)
                return False
            n += 1
        return True

    def pop(self, n: int) -> None:
        """Undo the last ``n`` bytes."""
        if n:
            if n > len(self.charts) - 1:
                raise ValueError(f"cannot pop {n} bytes, only {len(self.charts) - 1} consumed")
            del self.charts[-n:]

    def is_accepting(self) -> bool:
        """True when the bytes consumed are a sentence of the grammar."""
        start = self.cfg.start_prods
        prods = self.cfg.prods
        for p, d, o in self.charts[-1].items:
            if o == 0 and p in start and d == len(prods[p][1]):
                return True
        return False

    def can_extend(self) -> bool:
        """True when some byte can follow (a live terminal has a live transition)."""
        cfg = self.cfg
        return any(cfg.trans[t][s].any() for (t, _o), s in self.charts[-1].terms.items())
