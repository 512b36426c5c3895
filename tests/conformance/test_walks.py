"""Seeded random walks, every engine against its oracle, bit for bit.

The oracle is ``naive`` (the Grammar's language), or, for an engine with llguidance's
lexing (``lexing="lexer"``), our ``llguidance``, the reference of that lexing (itself
walked against ``naive``, its documented differences from it xfail below).  Each walk
steps a matcher of the engine and one of the oracle side by side
over :func:`~tests._support.fixtures.small_vocab`: tokens drawn from naive's mask, now
and then a token naive refuses (both must refuse it and keep their state), random
``rollback(k)``, ``fork()`` (the fork is walked on and compared too, and the matcher it
came from is compared again when the walk returns to it), ``reset()`` and
``validate_tokens`` of paths naive takes (some with a token after), of tokens rolled back,
and of random ids.
At every step the whole mask row (filled over garbage, so the whole row is written),
``is_accepting()`` and ``is_terminated()`` equal naive's, and so does every return value.

Engines: every registered engine that compiles over any vocabulary
(``any_vocabulary=True``; outlines-core, which refuses vocabularies with dead-end tokens,
is walked in ``tests/test_peers.py`` on one of its own).  Regular grammars for every
engine; recursive ones for ``grammars="context-free"`` engines.  An engine with
``partial_utf8=False`` (it never allows a token that is not UTF-8 alone, here ``\\xc3``,
id 19) skips exactly the grammars where that token can be allowed (``partial=True``
below); on the others the walk asserts that naive never allows it, so the skip is no
wider than it says.

Dead ends: ``small_vocab`` has ``tr`` but no ``u``/``ue``, and ``\\xc3`` but no
``\\xa9``, so some allowed tokens lead into a state no token continues (the mask is
empty, not even EOS).  The walks never draw such a token (naive says which: the choice
is the same for every engine); :func:`test_a_dead_end_allows_nothing_and_rolls_back`
holds each engine to the empty mask there.

Engine differences found on these walks are in :data:`KNOWN`, each an
``xfail(strict=True)`` with its reason (a fix shows as XPASS and fails the run).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from tests._support.fixtures import ARITH_LARK, JSON_FLAT_LARK, JSON_LARK, small_vocab
from tests.conformance import capabilities, engines, make, partial_tokens
from toolkit.core import bitmask as bm
from toolkit.core.protocol import MaskEngine, Matcher
from toolkit.grammar.ir import Grammar

VOCAB = small_vocab()
WORDS = bm.words(VOCAB.size)


#: text tokens whose bytes are not UTF-8 on their own (``\xc3``, the first byte of é)
PARTIAL_TOKENS = partial_tokens(VOCAB)


@dataclass(frozen=True)
class Spec:
    """A grammar of the walks: its source, whether it is recursive (context-free
    engines only) and whether a token that is not UTF-8 alone can be allowed in it."""

    source: str
    kind: str = "lark"  # "lark" | "regex"
    recursive: bool = False
    partial: bool = False
    #: llguidance's lexing gives other masks than naive's here (lexing="lexer" against naive: xfail)
    lexing: bool = False

    def grammar(self) -> Grammar:
        return Grammar.from_regex(self.source) if self.kind == "regex" else Grammar.from_lark(self.source)


GRAMMARS: dict[str, Spec] = {
    # a regex whose accepting states text can leave ("b1" then "0", "12", "123"...)
    "regex": Spec(r"(ab|b)+1[0-9]*", kind="regex"),
    # alternatives, a rule of three terminals, and %ignore between any two terminals
    "ignore": Spec(
        'start: item ("," item)*\n'
        '?item: "true" | "null" | NUM | pair\n'
        'pair: WORD ":" NUM\n'
        "NUM: /[0-9]+/\n"
        "WORD: /[ab]+/\n"
        "%ignore /[ \\n]+/\n"),
    # a flat JSON-ish object over ASCII keys: tokens '{"' and '":' cross terminals (no
    # %ignore: after the closing brace llguidance's lexing allows no ignored text, see KNOWN)
    "object": Spec(
        'start: "{" [pair ("," " "? pair)*] "}"\n'
        'pair: KEY ":" " "? value\n'
        '?value: NUM | "true" | "null" | list\n'
        'list: "[" [NUM ("," NUM)*] "]"\n'
        'KEY: /"[abc]*"/\n'
        "NUM: /0|[1-9][0-9]*/\n"),
    # JSON nested twice at most: strings take any character, so \xc3 (then é) is allowed
    "json-flat": Spec(JSON_FLAT_LARK, partial=True, lexing=True),
    "json": Spec(JSON_LARK, recursive=True, partial=True, lexing=True),
    "arith": Spec(ARITH_LARK, recursive=True),
    "brackets": Spec('start: x*\nx: "[" x* "]" | "{" x* "}" | "ab" | "1"\n%ignore " "\n', recursive=True),
}
REGULAR = [k for k, s in GRAMMARS.items() if not s.recursive]
RECURSIVE = [k for k, s in GRAMMARS.items() if s.recursive]

#: walks and steps per walk (engines with ``mask_cost="slow"`` take fewer walks)
WALKS = {"fast": 8, "slow": 4}
STEPS = 40
#: the most matchers (a walk's first and its forks) one walk keeps
MAX_FORKS = 3


_TRAILING = ("lexes %ignore text as a lexeme that another lexeme must follow: where the value is complete "
             "and nothing can follow (after the top-level value), naive allows whitespace tokens and it allows "
             "only EOS and what extends the last lexeme (strategies/llguidance/engine.py, tests/test_peers.py)")
_DEAD_END = ("llguidance stops with NoExtensionBias when it computes the mask of a state no token continues "
             "('tr' in 'true|null' over small_vocab, which has no 'u'): the adapter's sticky error, an EOS-only "
             "mask instead of the empty one, which rollback(1) does not clear (reset does)")
#: the documented differences from naive of named engines, (engine, grammar) -> reason:
#: each case is xfail(strict=True)
KNOWN: dict[tuple[str, str], str] = {
    ("peer:llguidance", "dead-end"): _DEAD_END,
}


def _cases(keys: list[str], **want: object) -> list[object]:
    """``engines(**want)`` (naive, the oracle, left out) times the grammars ``keys``,
    with the skip marks of :func:`engines` and the xfail marks of :data:`KNOWN`."""
    out = []
    for p in engines(exclude=("naive",), **want):
        (name,) = p.values
        for key in keys:
            marks = list(p.marks)
            if (name, key) in KNOWN:
                marks.append(pytest.mark.xfail(strict=True, reason=f"{name} {KNOWN[name, key]}"))
            elif GRAMMARS.get(key) is not None and GRAMMARS[key].lexing and oracle(name) == "naive" \
                    and capabilities(name).lexing == "lexer":
                marks.append(pytest.mark.xfail(strict=True, reason=f"{name} {_TRAILING}"))
            out.append(pytest.param(name, key, marks=marks, id=f"{name}-{key}"))
    return out


def oracle(name: str) -> str:
    """The engine ``name``'s masks are held to: ``naive``, or our ``llguidance`` for
    another engine with llguidance's lexing."""
    return "llguidance" if capabilities(name).lexing == "lexer" and name != "llguidance" else "naive"


@cache
def _compiled(name: str, key: str) -> tuple[MaskEngine, object]:
    """Engine ``name`` over the vocabulary and grammar ``key`` compiled by it (once per
    module: the compile of a slow peer costs seconds)."""
    engine = make(name, VOCAB)
    return engine, engine.compile(GRAMMARS[key].grammar())


def _look(m: Matcher, garbage: int) -> tuple[bytes, bool, bool]:
    """What a step compares: the mask row (filled over a row of ``garbage``, so the
    whole row is written), ``is_accepting()``, ``is_terminated()``."""
    rows = np.full((1, WORDS), garbage, dtype=np.int32)
    info = m.fill_bitmask(rows, 0)
    assert info.allowed == bm.popcount(rows[0]), "MaskInfo.allowed is not the row's popcount"
    return rows[0].tobytes(), m.is_accepting(), m.is_terminated()


def _ids(row: bytes) -> list[int]:
    return bm.allowed_ids(np.frombuffer(row, dtype=np.int32), VOCAB.size).tolist()


def _show(ids: list[int]) -> list[str]:
    return [repr(VOCAB.token_bytes[t]) if VOCAB.token_bytes[t] else VOCAB.special_tokens.get(t, f"#{t}") for t in ids]


class _Pair:
    """An engine's matcher and naive's, fed the same calls; ``history`` is what both
    consumed (for the bounds of ``rollback``), ``undone`` the tokens last rolled back."""

    def __init__(self, ours: Matcher, oracle: Matcher, history: list[int]) -> None:
        self.ours, self.oracle = ours, oracle
        self.history = list(history)
        self.undone: list[int] = []


def _walk(name: str, key: str, walk: int) -> Counter[str]:
    """One seeded walk; returns how many calls of each kind it made (``accept``,
    ``refused``, ``rollback``, ``validate``, ``fork``, ``reset``, ``switch``)."""
    spec = GRAMMARS[key]
    engine, compiled = _compiled(name, key)
    naive, ncompiled = _compiled(oracle(name), key)
    rng = random.Random(f"{key}/{walk}")  # the same choices for every engine that agrees
    pairs = [_Pair(engine.matcher(compiled), naive.matcher(ncompiled), [])]
    cur = 0
    log: list[str] = []

    def where(step: int) -> str:
        p = pairs[cur]
        text = b"".join(VOCAB.token_bytes[t] for t in p.history)
        return (f"{name} on {key!r}, walk {walk}, step {step}, matcher {cur}: history {p.history} ({text!r}); "
                f"last calls: {'; '.join(log[-10:])}")

    def compare(step: int) -> list[int]:
        p = pairs[cur]
        garbage = rng.choice((0, -1, 0x5A5A5A5A))
        got, want = _look(p.ours, garbage), _look(p.oracle, 0)
        if got != want:
            g, w = set(_ids(got[0])), set(_ids(want[0]))
            raise AssertionError(f"{where(step)}\n  extra {_show(sorted(g - w))}, missing {_show(sorted(w - g))}, "
                                 f"accepting {got[1]} vs naive {want[1]}, terminated {got[2]} vs naive {want[2]}")
        allowed = _ids(want[0])
        if not spec.partial:  # the premise of the partial_utf8 skip
            assert not PARTIAL_TOKENS & set(allowed), f"{key!r} allows a partial UTF-8 token: set partial=True"
        return allowed

    for step in range(STEPS):
        p = pairs[cur]
        allowed = compare(step)
        r = rng.random()
        live = _live(p.oracle, allowed) if r < 0.55 else []
        if live:
            t = rng.choice(live)
            log.append(f"accept {t}")
            a, b = p.ours.accept_token(t), p.oracle.accept_token(t)
            assert a is True and b is True, f"{where(step)}: accept_token({t}) gave {a}, naive {b} (allowed)"
            p.history.append(t)
        elif r < 0.63:
            refused = [t for t in range(VOCAB.size) if t not in allowed] + [-1, VOCAB.size, 10**6]
            t = rng.choice(refused)
            log.append(f"refused {t}")
            a, b = p.ours.accept_token(t), p.oracle.accept_token(t)
            assert a is False and b is False, f"{where(step)}: accept_token({t}) gave {a}, naive {b} (refused)"
        elif r < 0.75:
            k = rng.randint(0, len(p.history))
            log.append(f"rollback {k}")
            p.ours.rollback(k)
            p.oracle.rollback(k)
            p.undone = p.history[len(p.history) - k:] if k else []
            del p.history[len(p.history) - k:]
        elif r < 0.83:
            r = rng.random()
            if r < 0.5:  # a path naive takes, and now and then a token after it
                seq = _path(p.oracle, rng, rng.randint(1, 6))
                seq += [rng.randrange(-1, VOCAB.size + 1)] if rng.random() < 0.5 else []
            elif r < 0.75 and p.undone:  # back over what was undone, then a token
                seq = p.undone[: rng.randint(1, len(p.undone))] + [rng.randrange(-1, VOCAB.size + 1)]
            else:
                seq = [rng.choice(allowed)] if allowed else []
                seq += [rng.randrange(VOCAB.size) for _ in range(rng.randint(0, 4))]
            log.append(f"validate {seq}")
            a, b = p.ours.validate_tokens(seq), p.oracle.validate_tokens(seq)
            assert a == b, f"{where(step)}: validate_tokens({seq}) gave {a}, naive {b}"
        elif r < 0.9 and len(pairs) < MAX_FORKS:
            log.append(f"fork of {cur} -> {len(pairs)}")
            pairs.append(_Pair(p.ours.fork(), p.oracle.fork(), p.history))
            cur = len(pairs) - 1 if rng.random() < 0.5 else cur
        elif r < 0.94:
            log.append("reset")
            p.ours.reset()
            p.oracle.reset()
            p.history.clear()
            p.undone = []
        else:
            cur = rng.randrange(len(pairs))
            log.append(f"switch to {cur}")
    for cur in range(len(pairs)):  # noqa: B007 - where() reads it: every matcher of the walk, at the end
        compare(STEPS)
    return Counter(entry.split()[0] for entry in log)


def _live(oracle: Matcher, allowed: list[int]) -> list[int]:
    """The tokens of ``allowed`` that do not lead ``oracle`` (naive) into a dead end, a
    state whose mask is empty; the state is unchanged."""
    out = []
    for t in allowed:
        assert oracle.accept_token(t)
        ids, accepting, terminated = _look(oracle, 0)
        oracle.rollback(1)
        if _ids(ids) or accepting or terminated:
            out.append(t)
    return out


def _path(oracle: Matcher, rng: random.Random, n: int) -> list[int]:
    """Up to ``n`` tokens naive accepts one after another from its state (none into a
    dead end); the state is unchanged."""
    out: list[int] = []
    for _ in range(n):
        live = _live(oracle, _ids(_look(oracle, 0)[0]))
        if not live:
            break
        out.append(rng.choice(live))
        assert oracle.accept_token(out[-1])
    oracle.rollback(len(out))
    return out


def _run(name: str, key: str) -> None:
    calls: Counter[str] = Counter()
    for w in range(WALKS[capabilities(name).mask_cost]):
        calls += _walk(name, key, w)
    # every kind of call was compared (the seeds are fixed: this holds the walks to it)
    assert set(calls) == {"accept", "refused", "rollback", "validate", "fork", "reset", "switch"}, calls


@pytest.mark.parametrize("name, key", _cases(REGULAR, any_vocabulary=True))
def test_walks_on_regular_grammars_equal_naive(name: str, key: str) -> None:
    if GRAMMARS[key].partial and not capabilities(name).partial_utf8:
        pytest.skip(f"{name} never allows {_show(sorted(PARTIAL_TOKENS))} (partial_utf8=False), which {key!r} allows")
    _run(name, key)


@pytest.mark.parametrize("name, key", _cases(RECURSIVE, any_vocabulary=True, grammars="context-free"))
def test_walks_on_context_free_grammars_equal_naive(name: str, key: str) -> None:
    if GRAMMARS[key].partial and not capabilities(name).partial_utf8:
        pytest.skip(f"{name} never allows {_show(sorted(PARTIAL_TOKENS))} (partial_utf8=False), which {key!r} allows")
    _run(name, key)


@pytest.mark.parametrize("name, key", _cases(["dead-end"], any_vocabulary=True))
def test_a_dead_end_allows_nothing_and_rolls_back(name: str, key: str) -> None:
    """After ``tr`` in ``true|null`` no token of ``small_vocab`` continues: the mask is
    empty (not even EOS: the text is not a sentence), the matcher is not failed, every
    token is refused, and ``rollback(1)`` gives back the start's mask; as naive."""
    del key
    engine = make(name, VOCAB)
    naive = make("naive", VOCAB)
    g = Grammar.from_regex("true|null")
    tr = VOCAB.token_bytes.index(b"tr")
    for e in (naive, engine):
        m = e.matcher(e.compile(g))
        start = _look(m, 0)
        assert _ids(start[0]) == [VOCAB.token_bytes.index(x) for x in (b"true", b"tr", b"null")], e.name
        assert m.accept_token(tr), e.name
        assert _look(m, -1) == (bytes(4 * WORDS), False, False) and m.error is None, (e.name, m.error)
        assert not any(m.accept_token(t) for t in range(-1, VOCAB.size + 1)), e.name
        m.rollback(1)
        assert _look(m, -1) == start and m.error is None, (e.name, m.error)


def test_the_grammars_are_what_they_say() -> None:
    """``recursive`` is what decides which engines walk a grammar: it must be true (a
    regular grammar is a regex, a recursive one is refused as one)."""
    from toolkit.core.errors import UnsupportedGrammar

    for key, spec in GRAMMARS.items():
        g = spec.grammar()
        if spec.recursive:
            with pytest.raises(UnsupportedGrammar, match="recursive"):
                g.to_regex()
        else:
            assert g.to_regex(), key
