"""``naive``, the oracle, checked against recognizers that share no code with it.

Every other strategy is held to ``naive``'s masks; here ``naive`` itself is held to:

* **Lark's Earley parser** (``lexer="dynamic_complete"``: every way of cutting the text
  into terminals, the scannerless reading of the IR; ``"dynamic"`` tries fewer cuts
  and would reject ``start: A "a"`` with ``A: /a+/`` on ``aa``) for complete strings:
  a string is a sentence exactly when ``naive``, fed it character by character,
  accepts it and allows EOS;
* **a viability decision of its own** (:class:`Viability`): a prefix ``q`` is viable
  when the grammar derives some ``q w``; that is the intersection of the grammar (read
  by Lark into BNF, terminals spelled out character by character) with the automaton
  of ``q`` followed by anything, non-empty (Bar-Hillel's construction and the
  productive symbols of the result, a fixpoint).  That is exact, with no bound on the
  length of ``w``, so the masks of ``naive`` over a tiny vocabulary (the characters
  of the alphabet and a few longer tokens) are compared with it in both directions.

The grammars: :data:`FIXED`, thirty small ones chosen for what trips a recognizer
(left and right recursion, nullable rules and cycles of them, ambiguity, unproductive
rules, regex terminals that must end before their longest match, ``%ignore``), each
walked exhaustively to a depth; hypothesis' small random CFGs over the same
constructs (derandomized by the suite's profile); and the Lark grammars of
``datasets/grammars`` and the test fixtures, whose terminals are regexes beyond
:class:`Viability`'s reading, on complete strings only (every string over their
alphabet to 3 characters, their own instances and edits of those by one character).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import get_engine
from tests._support.fixtures import ARITH_LARK, JSON_LARK
from tests._support.shared import PROJECT_ROOT
from toolkit.core import bitmask as bm
from toolkit.core.errors import Unsatisfiable
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

# ------------------------------------------------------------ the checks --

Pred = Callable[[str], bool]


class Viability:
    """Exact viability of prefixes for a Lark grammar whose terminals are strings or
    regexes of single-character atoms (``[...]``, ``.``, a character, an escape), each
    with an optional ``?``, ``*`` or ``+``.

    The grammar becomes a CFG over characters (a terminal is a rule of its characters;
    an ``%ignore`` terminal may come before every terminal and at the end, as many
    times as it likes).  ``q`` is viable when the start symbol derives a path from
    state 0 to state ``len(q)`` of the automaton that reads ``q`` and then loops on
    every character: ``derives[A][i]`` is the set of states ``A`` leads to from state
    ``i``, grown to its fixpoint.  Nothing here comes from masklab."""

    def __init__(self, text: str) -> None:
        parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
        prods: dict[str, list[tuple]] = {}
        for rule in parser.rules:
            prods.setdefault(rule.origin.name, []).append(
                tuple(("T", s.name) if s.is_term else s.name for s in rule.expansion))
        for t in parser.terminals:
            prods[f"T:{t.name}"] = _spell(t.pattern, prods, t.name)
        ignore = [f"T:{n}" for n in parser.ignore_tokens]
        if ignore:  # I* before every terminal, and at the end
            prods["I*"] = [(), ("I*", "I")]
            prods["I"] = [(n,) for n in ignore]
        for name, alts in list(prods.items()):
            prods[name] = [tuple((*(("I*",) if ignore else ()), f"T:{s[1]}") if isinstance(s, tuple) and
                                 s[0] == "T" else (s,) for s in alt) for alt in alts]
            prods[name] = [tuple(x for part in alt for x in part) for alt in prods[name]]
        prods["S'"] = [("start", "I*")] if ignore else [("start",)]
        # numbered: a rule is its index, a character predicate ~ its index in self.preds
        names = list(prods)
        self.preds: list[Pred] = []
        number = {a: i for i, a in enumerate(names)}

        def sym(x) -> int:
            if callable(x):
                self.preds.append(x)
                return ~(len(self.preds) - 1)
            return number[x]

        self.rules = [[tuple(sym(x) for x in alt) for alt in prods[a]] for a in names]
        self.start = number["S'"]
        self.known: dict[str, bool] = {}
        self.users = [sorted({a for a, alts in enumerate(self.rules) for alt in alts if b in alt})
                      for b in range(len(names))]

    def viable(self, q: str) -> bool:
        """``derives[a][i]``: the states rule ``a`` leads to from state ``i``, a bit set;
        a character goes from state ``p < n`` to ``p + 1`` where it is ``q[p]``, and from
        state ``n`` back to ``n`` (some character fits every predicate here)."""
        if q not in self.known:
            self.known[q] = self._viable(q)
        return self.known[q]

    def _viable(self, q: str) -> bool:
        n, last = len(q), 1 << len(q)
        fits = [sum(1 << p for p, c in enumerate(q) if pred(c)) for pred in self.preds]
        derives = [[0] * (n + 1) for _ in self.rules]
        todo, queued = list(range(len(self.rules))), set(range(len(self.rules)))
        while todo:  # a rule is looked at again when a rule it uses grew
            a = todo.pop()
            queued.discard(a)
            row, grew = derives[a], False
            for i in range(n + 1):
                for alt in self.rules[a]:
                    ends = 1 << i
                    for x in alt:
                        if x < 0:
                            ends = ((ends & fits[~x]) << 1) | (ends & last)
                        else:
                            d, out, p = derives[x], 0, 0
                            while ends:
                                if ends & 1:
                                    out |= d[p]
                                ends >>= 1
                                p += 1
                            ends = out
                        if not ends:
                            break
                    if ends & ~row[i]:
                        row[i] |= ends
                        grew = True
            if grew:
                for u in self.users[a]:
                    if u not in queued:
                        queued.add(u)
                        todo.append(u)
        return bool(derives[self.start][0] & last)


_ATOM = re.compile(r"(\[(?:\\.|[^\]\\])+\]|\\.|\.|[^\\\[\]()|?*+{}])([?*+]?)")


def _spell(pattern, prods: dict, name: str) -> list[tuple]:
    """The alternatives of terminal ``name`` as character predicates (helper rules for
    ``*`` and ``+`` added to ``prods``)."""
    if pattern.type == "str":
        return [tuple(functools.partial(str.__eq__, c) for c in pattern.value)]
    src = pattern.value
    atoms = _ATOM.findall(src)
    assert "".join(a + q for a, q in atoms) == src and not pattern.flags, f"regex {src!r} is beyond this reading"
    seq: list = []
    for k, (atom, quant) in enumerate(atoms):
        rx = re.compile(atom, re.DOTALL)
        pred = functools.partial(lambda rx, c: rx.fullmatch(c) is not None, rx)
        if not quant:
            seq.append(pred)
            continue
        helper = f"{name}#{k}"
        prods[helper] = {"?": [(), (pred,)], "*": [(), (pred, helper)], "+": [(pred,), (pred, helper)]}[quant]
        seq.append(helper)
    return [tuple(seq)]


def _lark_accepts(parser: lark.Lark, s: str) -> bool:
    try:
        parser.parse(s)
    except lark.exceptions.LarkError:
        return False
    return True


def _tiny_vocab(alphabet: str, longer: tuple[str, ...]) -> Vocabulary:
    """One token per character of ``alphabet`` and the ``longer`` ones; id 1 is EOS."""
    tokens = [b"", b"", *(c.encode() for c in alphabet), *(t.encode() for t in longer)]
    return Vocabulary.from_tokens(tokens, eos_ids=(1,), special_tokens={0: "<unk>", 1: "</s>"}, name="tiny")


def _walk_masks(text: str, alphabet: str, longer: tuple[str, ...], depth: int) -> int:
    """Every prefix ``naive`` takes over ``alphabet``, to ``depth`` characters: its mask
    allows a token exactly when the prefix and the token are viable, EOS exactly when
    Lark parses the prefix.  The prefixes checked."""
    vocab = _tiny_vocab(alphabet, longer)
    check = Viability(text)
    parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    engine = get_engine("naive", vocab)
    try:
        m = engine.matcher(engine.compile(Grammar.from_lark(text)))
    except Unsatisfiable:  # an empty language: nothing is viable, not even the empty prefix
        assert not check.viable(""), text
        return 0
    assert check.viable(""), text
    strings = [vocab.token_bytes[t].decode() for t in range(vocab.size)]
    row = bm.allocate(vocab.size)
    seen = 0

    def visit(q: str) -> None:
        nonlocal seen
        seen += 1
        m.fill_bitmask(row)
        allowed = set(bm.allowed_ids(row[0], vocab.size).tolist())
        complete = _lark_accepts(parser, q)
        assert (1 in allowed) == complete, (text, q, "EOS")
        assert not complete or check.viable(q), (text, q)  # (the two oracles agree)
        for t in range(2, vocab.size):
            assert (t in allowed) == check.viable(q + strings[t]), (text, q, strings[t])
        if len(q) < depth:
            for t in range(2, 2 + len(alphabet)):
                if t in allowed:
                    assert m.accept_token(t)
                    visit(q + strings[t])
                    m.rollback(1)

    visit("")
    return seen


# ----------------------------------------------------- fixed grammars --

#: (Lark text, alphabet, longer tokens, depth)
FIXED: dict[str, tuple[str, str, tuple[str, ...], int]] = {
    "left_rec": ('start: start "a" | "b"\n', "ab", ("ba", "aa"), 6),
    "right_rec": ('start: "a" start | "b"\n', "ab", ("ab", "bb"), 6),
    "both_rec": ('start: start "+" start | "x"\n', "x+", ("x+", "+x"), 6),
    "balanced": ('start: "(" start ")" start | \n', "()", ("()", "(("), 8),
    "anbn": ('start: "a" start "b" | \n', "ab", ("ab", "aab"), 8),
    "palindromes": ('start: "a" start "a" | "b" start "b" | "a" | "b" | \n', "ab", ("ab", "ba"), 6),
    "nullable_chain": ('start: x y x\nx: "a" | \ny: z z\nz: "b" | \n', "ab", ("ab",), 6),
    "nullable_cycle": ('start: x "c"\nx: y | "a"\ny: x | \n', "ac", ("ac",), 4),
    "unit_cycle": ('start: a\na: b | "x"\nb: a | "y" a\n', "xy", ("yx",), 5),
    "ambiguous": ('start: a a\na: "x" | "x" "x" | \n', "x", ("xx",), 6),
    "ambiguous_sum": ('start: e\ne: e "+" e | e "*" e | "1"\n', "1+*", ("1+", "+1"), 6),
    "unproductive": ('start: "a" loop | "b"\nloop: "x" loop\n', "abx", ("ax",), 4),
    "unproductive_nested": ('start: "a" (dead | "c")\ndead: "d" dead "e"\n', "acde", ("ad",), 4),
    "dangling_else": ('start: s\ns: "i" s | "i" s "e" s | "x"\n', "iex", ("ie",), 6),
    "lr_list": ('start: l\nl: l "," "a" | "a"\n', "a,", ("a,",), 7),
    "optional_many": ('start: "a"? "b"* "c"+\n', "abc", ("ab", "bc"), 6),
    "regex_plus": ('start: A "a"\nA: /a+/\n', "ab", ("aa",), 6),
    "regex_must_stop": ('start: A B\nA: /[ab]+/\nB: /b[c]*/\n', "abc", ("bc",), 6),
    "regex_class": ('start: "<" W? ">"\nW: /[^<>]+/\n', "<>x", ("<x",), 6),
    "regex_optional": ('start: N "." N\nN: /-?[0-9]+/\n', "-1.", ("1.", "-1"), 6),
    "regex_any": ('start: "q" C "q"\nC: /./\n', "qz", ("qq",), 5),
    "words": ('start: W (" " W)*\nW: /[ab]+/\n', "ab ", ("a ", " b"), 6),
    "ignore": ('start: "a" "b"+\n%ignore " "\n', "ab ", (" a", "b "), 6),
    "ignore_regex": ('start: I ("," I)*\nI: /[0-9]/\nWS: /[ ]+/\n%ignore WS\n', "1, ", (", ", "1,"), 6),
    "keywords": ('start: "if" | "i" "f" "f" | ID\nID: /[fi]+/\n', "if", ("if", "ff"), 5),
    "empty_only": ("start: \n", "a", ("aa",), 2),
    "finite": ('start: "ab" | "abc" | "b"\n', "abc", ("ab", "bc"), 4),
    "nested_brackets": ('start: v\nv: "[" (v ("," v)*)? "]" | "0"\n', "[],0", ("[]", ",0"), 6),
    "mutual": ('start: a\na: "x" b | \nb: "y" a\n', "xy", ("xy", "yx"), 7),
    "sexpr": ('start: e\ne: "(" e* ")" | A\nA: /[a]+/\n%ignore " "\n', "()a ", ("()", "a "), 5),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_naive_masks_equal_exact_viability_and_lark(name: str) -> None:
    text, alphabet, longer, depth = FIXED[name]
    assert _walk_masks(text, alphabet, longer, depth) > (1 if name != "empty_only" else 0), name


def test_the_viability_check_is_exact_where_it_is_easy_to_see() -> None:
    """The checker's own sanity: prefixes of ``a^n b^n`` need ``n`` more characters
    (no completion bound would do), an unproductive branch is no way on, and a
    terminal regex may end early."""
    anbn = Viability(FIXED["anbn"][0])
    assert anbn.viable("a" * 9) and anbn.viable("a" * 9 + "b" * 9) and not anbn.viable("a" * 3 + "b" * 4)
    assert not anbn.viable("ba")
    dead = Viability(FIXED["unproductive"][0])
    assert dead.viable("b") and not dead.viable("a") and not dead.viable("ax")
    stop = Viability(FIXED["regex_must_stop"][0])
    assert stop.viable("abbcc") and not stop.viable("aac") and not stop.viable("c")


# --------------------------------------------- hypothesis-drawn grammars --

_SYMBOLS = st.sampled_from(["a", "b", "c", '"x"', '"y"', '"xy"', "R"])
_ALTS = st.lists(st.lists(_SYMBOLS, max_size=3), min_size=1, max_size=3)


@st.composite
def _cfgs(draw) -> str:
    rules = {name: draw(_ALTS) for name in ("start", "a", "b", "c")}
    lines = [f"{name}: " + " | ".join(" ".join(alt) for alt in alts) for name, alts in rules.items()]
    return "\n".join(lines) + "\nR: /[xy]+/\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cfgs())
def test_naive_on_small_random_cfgs(text: str) -> None:
    """Random CFGs over rules ``start``, ``a``, ``b``, ``c`` and terminals ``x``, ``y``,
    ``xy`` and ``/[xy]+/``: left recursion, cycles of unit and empty rules, ambiguity
    and unproductive rules come of themselves."""
    _walk_masks(text, "xy", ("xy", "yx", "xx"), 5)


# ------------------------------- Lark grammars with regexes: complete strings --


def _dataset_grammars() -> dict[str, tuple[str, list[tuple[str, bool]]]]:
    out = {}
    for path in sorted((PROJECT_ROOT / "datasets" / "grammars").glob("*.json")):
        d = json.loads(Path(path).read_text())
        out[path.stem] = (d["lark"], [(t["text"], t["valid"]) for t in d["tests"]])
    out["fixtures_json"] = (JSON_LARK, [('{"a": [1, 2.5e3, true]}', True), ("[1,]", False)])
    out["fixtures_arith"] = (ARITH_LARK, [("1 + 2*(3 - 4)", True), ("1 +", False)])
    return out


LARK_GRAMMARS = _dataset_grammars()


def _alphabet(text: str, instances: list[tuple[str, bool]]) -> str:
    """The characters the grammar's literals and instances use most, at most 6."""
    counts: dict[str, int] = {}
    for s in [*re.findall(r'"((?:[^"\\]|\\.)*)"', text), *(s for s, _ in instances)]:
        for c in s:
            counts[c] = counts.get(c, 0) + 1
    return "".join(sorted(counts, key=lambda c: (-counts[c], c))[:6])


def _edit(s: str, alphabet: str, rng: random.Random) -> str:
    """``s`` with one character deleted, inserted or replaced."""
    i = rng.randrange(len(s) + 1)
    c = rng.choice(alphabet)
    return rng.choice([s[:i] + s[i + 1:], s[:i] + c + s[i:], s[:i] + c + s[i + 1:]])


@pytest.mark.parametrize("name", sorted(LARK_GRAMMARS))
def test_naive_accepts_what_lark_parses(name: str) -> None:
    """Every string over the grammar's alphabet to 3 characters, its instances and
    edits of them by one character: a sentence for ``naive`` exactly when Lark parses it."""
    text, instances = LARK_GRAMMARS[name]
    parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    alphabet = _alphabet(text, instances)
    rng = random.Random(name)
    edits = [_edit(s, alphabet, rng) for s, _ in instances for _ in range(3)]  # near misses
    strings = [s for s, _ in instances] + edits + ["".join(p) for n in range(4) for p in itertools.product(alphabet, repeat=n)]
    vocab = _tiny_vocab("".join(sorted({c for s in strings for c in s})), ())
    engine = get_engine("naive", vocab)
    m = engine.matcher(engine.compile(Grammar.from_lark(text)))
    index = {vocab.token_bytes[t]: t for t in range(2, vocab.size)}
    row = bm.allocate(vocab.size)
    accepted = 0
    for s in strings:
        m.reset()
        ok = all(m.accept_token(index[c.encode()]) for c in s)
        m.fill_bitmask(row)
        ours = ok and bm.get_bit(row[0], 1)
        assert ours == _lark_accepts(parser, s), (name, s)
        accepted += ours
    for s, valid in instances:
        assert _lark_accepts(parser, s) == valid, (name, s)  # (the dataset's own verdicts)
    assert accepted >= sum(v for _, v in instances), name
