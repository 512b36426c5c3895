"""LR automata over a grammar's terminals: LR(0) states, LALR(1) lookaheads, and a
generalized (GLR) recognizer on a graph-structured stack.

The parser half of the ahead-of-time strategy (issue 42; SynCode, Ugare et al. 2025,
uses LALR(1) tables over lexemes, glrmask a GLR parser): a strategy numbers its
grammar's symbols (nonterminals ``0 .. n_nt - 1`` with the start 0, then terminals
``n_nt .. n_nt + n_term - 1``) and gives the productions; :func:`build_lr` returns
:class:`LRTables`, and :class:`GLRRecognizer` runs them one terminal at a time, the
way a mask engine consumes lexemes.

**Automaton.**  The canonical LR(0) collection of the grammar augmented with
``S' -> 0 $`` (``$``, the end marker, is terminal number ``n_term``): states are
closures of kernels (sets of dotted productions), made by ``goto`` on every symbol;
``max_states`` bounds them (:class:`~toolkit.core.errors.LimitExceeded`).

**Lookaheads.**  LALR(1) by DeRemer and Pennello (1982): for each nonterminal
transition ``(p, A)``, ``DR`` (the terminals shifted right after it), ``Read`` (``DR``
through nullable transitions), ``Follow`` (``Read`` through the ``includes`` relation)
and, for each reduction, ``LA`` (``Follow`` of the transitions it looks back to); the
two unions over relations are computed with the digraph algorithm (strongly
connected components share their sets).  ``lookahead=0`` gives LR(0) tables instead
(every reduction on every terminal: more conflicts, the same language under GLR).

**Conflicts.**  An action cell with more than one action (shift and reduce, or two
reduces) is kept, not resolved: :attr:`LRTables.conflicts` counts them and the GLR
recognizer follows every action.  A grammar with none is LALR(1) and its parse is
deterministic (one stack).

**GLR.**  :class:`GLRRecognizer` keeps the graph-structured stack of Tomita's
algorithm, one level per terminal read: a node is an LR state at a level, its edges
point to the nodes below it.  Reading a terminal ``a`` first performs every reduction
the top level's nodes have on ``a`` along every path of the production's length (new
nodes and edges at the same level, to a fixpoint: the brute-force answer to
ε-productions and hidden left recursion, after Farshi), then shifts ``a`` from every
node that can.  The recognizer is exact for every context-free grammar whose
nonterminals are all productive and reachable (what :func:`toolkit.grammar.cfg.trim`
leaves): a terminal is accepted exactly when some sentence of the grammar starts with
the terminals read so far followed by it.  It is plain Python, the reference the C
core of the strategy is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from toolkit.core.errors import LimitExceeded, check_deadline
from toolkit.grammar.earley import derives

__all__ = ["LRTables", "build_lr", "productions_of", "left_recursive", "flat_repetitions", "GLRRecognizer",
           "DEFAULT_MAX_STATES"]

DEFAULT_MAX_STATES = 100_000
"""Default limit on LR(0) states."""

Production = tuple[int, tuple[int, ...]]


def productions_of(dr_sym: np.ndarray, dr_lhs: np.ndarray, nt_off: np.ndarray, nt_drs: np.ndarray) -> list[Production]:
    """The productions ``(lhs, rhs)`` of the dotted-rule layout the Earley parsers read
    (:func:`toolkit.grammar.earley.dotted_rules`, :func:`toolkit.grammar.cfg.trim`), in
    their order (grouped by left-hand side)."""
    out: list[Production] = []
    for a in range(len(nt_off) - 1):
        for k in range(int(nt_off[a]), int(nt_off[a + 1])):
            d = int(nt_drs[k])
            rhs = []
            while int(dr_sym[d]) != -1:
                rhs.append(int(dr_sym[d]))
                d += 1
            out.append((a, tuple(rhs)))
    return out


def left_recursive(prods: Sequence[Production], n_nt: int,
                   keep: Iterable[int] = ()) -> tuple[list[Production], int, dict[int, int]]:
    """The productions with each right-recursive repetition made left-recursive: a
    nonterminal ``R`` whose alternatives either end with ``R`` (``α R``, no other ``R``,
    ``α`` not nullable) or hold no ``R`` (``β``) derives ``α* β``, written ``R -> P β``,
    ``P -> ε | P α`` (or ``R -> ε | R α`` when ``ε`` is the only ``β``).  The language is
    the same; an LR parser's stack stays flat over the repetition, where the right
    recursion (the JSON Schema compiler's ``items_more -> ε | "," item items_more``) pushes
    an entry per element and reduces them all at its end.  The nonterminals in ``keep``
    stay as they are.  Returns the productions (the terminals renumbered past the added
    nonterminals), the new nonterminal count and, per nonterminal rewritten, the one
    added for it (itself when none was)."""
    null = _nullable(n_nt, prods)
    keep = set(keep)
    by_lhs: dict[int, list[tuple[int, ...]]] = {}
    for lhs, rhs in prods:
        by_lhs.setdefault(lhs, []).append(rhs)
    plan: dict[int, tuple[list[tuple[int, ...]], list[tuple[int, ...]]]] = {}
    for r, alts in by_lhs.items():
        rec = [a[:-1] for a in alts if a and a[-1] == r and r not in a[:-1]]
        base = [a for a in alts if r not in a]
        if (r not in keep and rec and len(rec) + len(base) == len(alts)
                and all(a and not all(s < n_nt and null[s] for s in a) for a in rec)):
            plan[r] = (rec, base)
    extra = sum(1 for rec, base in plan.values() if base != [()])

    def enc(rhs: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s + extra if s >= n_nt else s for s in rhs)

    out: list[Production] = [(lhs, enc(rhs)) for lhs, rhs in prods if lhs not in plan]
    done: dict[int, int] = {}
    nxt = n_nt
    for r, (rec, base) in plan.items():
        if base == [()]:
            out.append((r, ()))
            out.extend((r, (r, *enc(a))) for a in rec)
            done[r] = r
        else:
            p = done[r] = nxt
            nxt += 1
            out.extend((r, (p, *enc(b))) for b in base)
            out.append((p, ()))
            out.extend((p, (p, *enc(a))) for a in rec)
    return out, n_nt + extra, done


def flat_repetitions(prods: Sequence[Production], n_nt: int, n_term: int, *, lookahead: int = 1,
                     max_states: int = DEFAULT_MAX_STATES, rounds: int = 3) -> LRTables:
    """The LR tables of ``prods`` with their repetitions left-recursive
    (:func:`left_recursive`) where that adds no conflict: a rewritten repetition whose
    productions are reduced in a conflicting cell stays right-recursive and the tables
    are made again, ``rounds`` times at most; then, if conflicts remain, the tables of
    ``prods`` as they are when those have fewer."""
    keep: set[int] = set()
    lr = None
    for k in range(rounds):
        check_deadline(f"the LR tables, round {k + 1} of the flat repetitions")
        new, m, done = left_recursive(prods, n_nt, keep)
        lr = build_lr(m, n_term, new, lookahead=lookahead, max_states=max_states)
        if not lr.conflicts or not done:
            return lr
        involved: set[int] = set()
        for s in range(lr.n_states):
            for la, ps in lr.reduce[s].items():
                if len(ps) + (la in lr.shift[s]) > 1:
                    involved.update(lr.prods[p][0] for p in ps)
        back = {r for r, p in done.items() if r in involved or p in involved}
        if not back:
            break
        keep |= back
    assert lr is not None
    plain = build_lr(n_nt, n_term, prods, lookahead=lookahead, max_states=max_states)
    return plain if plain.conflicts < lr.conflicts else lr


@dataclass(eq=False)
class LRTables:
    """An LR automaton with its actions.

    * ``prods``: the productions, then the augmented ``S' -> 0`` (number ``len(prods) - 1``,
      left-hand side -1);
    * ``shift[s]``: terminal -> next state; ``goto[s]``: nonterminal -> next state;
    * ``reduce[s]``: lookahead terminal (``n_term``: the end marker) -> productions to
      reduce by (the augmented one's reduction is acceptance);
    * ``kernels[s]``: the state's kernel items ``(production, dot)``;
    * ``conflicts``: action cells with more than one action.
    """

    n_nt: int
    n_term: int
    prods: list[Production]
    nullable: list[bool]
    kernels: list[tuple[tuple[int, int], ...]]
    shift: list[dict[int, int]]
    goto: list[dict[int, int]]
    reduce: list[dict[int, list[int]]]
    lookahead: int
    conflicts: int = 0
    conflict_cells: list[tuple[int, int]] = field(default_factory=list)

    @property
    def n_states(self) -> int:
        return len(self.kernels)

    @property
    def end(self) -> int:
        """The end marker's terminal number."""
        return self.n_term

    @property
    def accept_prod(self) -> int:
        return len(self.prods) - 1

    def is_deterministic(self) -> bool:
        """True when no cell has two actions (the grammar is LALR(1), or LR(0))."""
        return self.conflicts == 0

    def stats(self) -> dict[str, int]:
        """Sizes: states, productions, shift, goto and reduce entries, conflicts."""
        return {
            "lr_states": self.n_states,
            "productions": len(self.prods) - 1,
            "shifts": sum(len(s) for s in self.shift),
            "gotos": sum(len(g) for g in self.goto),
            "reduces": sum(len(ps) for r in self.reduce for ps in r.values()),
            "conflicts": self.conflicts,
        }


def _nullable(n_nt: int, prods: Sequence[Production]) -> list[bool]:
    """Per nonterminal, whether it derives the empty string (linear: :func:`derives`
    from no symbol; a terminal never joins, having no production)."""
    null = derives(prods, set())
    return [a in null for a in range(n_nt)]


def build_lr(n_nt: int, n_term: int, prods: Iterable[Production], *, lookahead: int = 1,
             max_states: int = DEFAULT_MAX_STATES) -> LRTables:
    """The LR(0) automaton of the grammar and its actions, LALR(1) (``lookahead=1``) or
    LR(0) (``lookahead=0``); see the module doc.  Symbols: nonterminals below ``n_nt``
    (0 the start), terminals ``n_nt + i``."""
    if lookahead not in (0, 1):
        raise ValueError(f"lookahead must be 0 (LR(0)) or 1 (LALR(1)), got {lookahead!r}")
    prods = list(prods)
    for lhs, rhs in prods:
        if not 0 <= lhs < n_nt or any(not 0 <= s < n_nt + n_term for s in rhs):
            raise ValueError(f"production {lhs} -> {rhs}: a symbol outside [0, {n_nt + n_term})")
    aug = len(prods)
    prods.append((-1, (0,)))
    null = _nullable(n_nt, prods[:-1])
    by_lhs: list[list[int]] = [[] for _ in range(n_nt)]
    for p, (lhs, _) in enumerate(prods[:-1]):
        by_lhs[lhs].append(p)

    def closure(kernel: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
        items = list(kernel)
        seen_nt: set[int] = set()
        i = 0
        while i < len(items):
            p, d = items[i]
            rhs = prods[p][1]
            if d < len(rhs) and rhs[d] < n_nt and rhs[d] not in seen_nt:
                seen_nt.add(rhs[d])
                items.extend((q, 0) for q in by_lhs[rhs[d]])
            i += 1
        return items

    kernels: list[tuple[tuple[int, int], ...]] = [((aug, 0),)]
    index = {kernels[0]: 0}
    shift: list[dict[int, int]] = []
    goto: list[dict[int, int]] = []
    completed: list[list[int]] = []  # per state: the productions whose item is complete
    s = 0
    while s < len(kernels):
        if not s & 63:
            check_deadline(f"the LR(0) automaton, state {s}")
        moves: dict[int, list[tuple[int, int]]] = {}
        done = []
        for p, d in closure(kernels[s]):
            rhs = prods[p][1]
            if d < len(rhs):
                moves.setdefault(rhs[d], []).append((p, d + 1))
            else:
                done.append(p)
        sh: dict[int, int] = {}
        gt: dict[int, int] = {}
        for sym, items in moves.items():
            k = tuple(sorted(set(items)))
            t = index.get(k)
            if t is None:
                if len(kernels) >= max_states:
                    raise LimitExceeded("max_states", len(kernels) + 1, max_states, "LR(0) states")
                t = index[k] = len(kernels)
                kernels.append(k)
            (gt if sym < n_nt else sh)[sym if sym < n_nt else sym - n_nt] = t
        shift.append(sh)
        goto.append(gt)
        completed.append(done)
        s += 1

    end = n_term
    reduce: list[dict[int, list[int]]] = [{} for _ in kernels]
    if lookahead == 0:
        for s, done in enumerate(completed):
            for p in done:
                for a in (range(n_term + 1) if p != aug else (end,)):
                    reduce[s].setdefault(a, []).append(p)
    else:
        la = _lalr_lookaheads(n_nt, n_term, prods, null, kernels, shift, goto, completed)
        for s, done in enumerate(completed):
            for p in done:
                for a in sorted(la[s, p]):
                    reduce[s].setdefault(a, []).append(p)
    tables = LRTables(n_nt, n_term, prods, null, kernels, shift, goto, reduce, lookahead)
    for s in range(len(kernels)):
        for a, ps in reduce[s].items():
            if len(ps) + (a in shift[s]) > 1:
                tables.conflicts += 1
                tables.conflict_cells.append((s, a))
    return tables


def _digraph(nodes: Sequence[int], edges: Sequence[Sequence[int]], base: list[set[int]],
             what: str = "the LALR(1) lookaheads") -> list[set[int]]:
    """DeRemer and Pennello's digraph: ``F(x) = base(x) ∪ ⋃ F(y)`` over ``x -> y``, each
    strongly connected component sharing one set (iterative Tarjan); ``what`` names it
    for the compile's deadline, checked every 4096 steps."""
    steps = 0
    n = len(base)
    out: list[set[int]] = [set(b) for b in base]
    depth = [0] * n
    pushed_at = [0] * n  # a node's depth when pushed (its place on the stack, plus one)
    stack: list[int] = []
    for root in nodes:
        if depth[root]:
            continue
        work = [(root, 0)]
        stack.append(root)
        depth[root] = pushed_at[root] = len(stack)
        while work:
            steps += 1
            if not steps & 4095:
                check_deadline(f"{what}, transition {root} of {n}")
            x, i = work[-1]
            if i < len(edges[x]):
                work[-1] = (x, i + 1)
                y = edges[x][i]
                if depth[y] == 0:
                    stack.append(y)
                    depth[y] = pushed_at[y] = len(stack)
                    work.append((y, 0))
                else:
                    depth[x] = min(depth[x], depth[y])
                    out[x] |= out[y]
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                depth[parent] = min(depth[parent], depth[x])
                out[parent] |= out[x]
            if depth[x] == pushed_at[x]:
                while True:
                    y = stack.pop()
                    depth[y] = n + 1  # finished: never lowers a depth again
                    out[y] = out[x]
                    if y == x:
                        break
    return out


def _lalr_lookaheads(n_nt: int, n_term: int, prods: list[Production], null: list[bool],
                     kernels: list[tuple[tuple[int, int], ...]], shift: list[dict[int, int]],
                     goto: list[dict[int, int]], completed: list[list[int]]) -> dict[tuple[int, int], set[int]]:
    """``LA(q, p)`` for every state ``q`` and production ``p`` complete in it."""
    end = n_term
    aug = len(prods) - 1
    trans = [(p, a) for p in range(len(kernels)) for a in goto[p]]
    tid = {t: i for i, t in enumerate(trans)}
    base: list[set[int]] = []
    reads: list[list[int]] = []
    for p, a in trans:
        r = goto[p][a]
        dr = set(shift[r])
        if a == 0 and p == 0:
            dr.add(end)  # S' -> 0 . $
        base.append(dr)
        reads.append([tid[r, c] for c in goto[r] if null[c]])
    read = _digraph(range(len(trans)), reads, base, "the LALR(1) lookaheads (Read)")

    # includes and lookback: walk each production's right-hand side from every state
    # that has a transition on its left-hand side
    includes: list[list[int]] = [[] for _ in trans]
    lookback: dict[tuple[int, int], list[int]] = {}
    by_lhs: list[list[int]] = [[] for _ in range(n_nt)]
    for q, (lhs, _) in enumerate(prods[:-1]):
        by_lhs[lhs].append(q)
    for i, (p, a) in enumerate(trans):
        if not i & 255:
            check_deadline(f"the LALR(1) lookaheads, transition {i} of {len(trans)}")
        for q in by_lhs[a]:
            rhs = prods[q][1]
            state = p
            for j, sym in enumerate(rhs):
                if sym < n_nt and all(s < n_nt and null[s] for s in rhs[j + 1:]):
                    includes[tid[state, sym]].append(i)
                state = goto[state][sym] if sym < n_nt else shift[state][sym - n_nt]
            lookback.setdefault((state, q), []).append(i)
    follow = _digraph(range(len(trans)), includes, read, "the LALR(1) lookaheads (Follow)")
    la: dict[tuple[int, int], set[int]] = {}
    for q, done in enumerate(completed):
        for p in done:
            if p == aug:
                la[q, p] = {end}
                continue
            out: set[int] = set()
            for i in lookback.get((q, p), ()):
                out |= follow[i]
            la[q, p] = out
    return la


class _Node:
    """A node of the graph-structured stack: an LR state and the nodes below it."""

    __slots__ = ("state", "below")

    def __init__(self, state: int, below: list[_Node]) -> None:
        self.state = state
        self.below = below


class GLRRecognizer:
    """Tomita's recognizer over :class:`LRTables`; see the module doc.

    ``feed(a)`` reads terminal ``a`` (``0 <= a < n_term``) and returns whether the
    terminals read so far, then ``a``, start a sentence (False leaves the state as it
    was); ``allowed()`` is the set of terminals ``feed`` would take; ``accepting()``
    whether what was read is a sentence.  ``copy()`` is an independent recognizer in the
    same state (the levels below the top are shared: they never change).
    """

    def __init__(self, tables: LRTables) -> None:
        self.tables = tables
        self.top: list[_Node] = [_Node(0, [])]
        self.stacks_walked = 0

    def copy(self) -> GLRRecognizer:
        other = GLRRecognizer.__new__(GLRRecognizer)
        other.tables = self.tables
        other.top = self.top  # levels are replaced, never changed, once made
        other.stacks_walked = 0
        return other

    def _reduced(self, a: int) -> list[_Node]:
        """The top level after every reduction on lookahead ``a`` (new nodes; the
        recognizer's own level is left as it is)."""
        t = self.tables
        level = {n.state: _Node(n.state, list(n.below)) for n in self.top}
        changed = True
        while changed:
            changed = False
            for node in list(level.values()):
                for p in t.reduce[node.state].get(a, ()):
                    lhs, rhs = t.prods[p]
                    if lhs < 0:
                        continue  # acceptance, read by accepting()
                    for w in self._ancestors(node, len(rhs)):
                        target = t.goto[w.state][lhs]
                        u = level.get(target)
                        if u is None:
                            level[target] = _Node(target, [w])
                            changed = True
                        elif not any(x is w for x in u.below):
                            u.below.append(w)
                            changed = True
        return list(level.values())

    def _ancestors(self, node: _Node, m: int) -> list[_Node]:
        """The nodes ``m`` edges below ``node``, each once (the edges of the level being
        reduced point to its copies: the originals' edges go one level down only)."""
        frontier = [node]
        for _ in range(m):
            nxt: list[_Node] = []
            seen: set[int] = set()
            for v in frontier:
                for w in v.below:
                    if id(w) not in seen:
                        seen.add(id(w))
                        nxt.append(w)
            frontier = nxt
            self.stacks_walked += len(frontier)
        return frontier

    def feed(self, a: int) -> bool:
        t = self.tables
        if not 0 <= a < t.n_term:
            return False
        level = self._reduced(a)
        shifted: dict[int, _Node] = {}
        for node in level:
            nxt = t.shift[node.state].get(a)
            if nxt is None:
                continue
            u = shifted.get(nxt)
            if u is None:
                shifted[nxt] = _Node(nxt, [node])
            else:
                u.below.append(node)
        if not shifted:
            return False
        self.top = list(shifted.values())
        return True

    def accepting(self) -> bool:
        t = self.tables
        return any(t.accept_prod in t.reduce[n.state].get(t.end, ()) for n in self._reduced(t.end))

    def allowed(self) -> set[int]:
        """The terminals :meth:`feed` would take next."""
        t = self.tables
        candidates: set[int] = set()
        for n in self.top:
            candidates.update(a for a in t.shift[n.state])
            candidates.update(a for a in t.reduce[n.state] if a != t.end)
        return {a for a in sorted(candidates) if self.copy().feed(a)}

    def stacks(self) -> int:
        """Nodes at the top level (the parallel stacks' tops)."""
        return len(self.top)
