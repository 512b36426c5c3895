"""Grammars that name special tokens (token-level terminals, :mod:`toolkit.grammar.special`)
in every engine that takes them (``special_tokens=True``), against ``naive`` and against
the reading's own definition; every other engine refuses them.

Over the small vocabulary of ``tests/test_special_tokens.py`` (``SMALL``: EOS, three
special tokens, text tokens that spell their names, real tokens holding ``0xFF``):

* a grammar the vocabulary cannot bind (an unknown name, an id past it, a range that
  leaves nothing, EOS named) is the same typed error in every engine;
* a special token is allowed exactly where the grammar puts it, never spelled as text;
* seeded walks over the grammars of ``tests/test_special_tokens.py``: masks equal naive's
  (a regular-only engine refuses the recursive one, checked, and skips it);
* token ranges over *text* tokens (``<[*]>``, ``<[^1,4]>``, ``<[4-6]>``: a token read as
  the terminal where the grammar can take it): masks equal the definition
  (:func:`_by_definition`), through forks and rollbacks; an engine that cannot read a
  text token as a terminal refuses such a grammar with :class:`UnsupportedGrammar` naming
  the text tokens it holds (``peer:glrmask``: it would read them as text too), checked,
  and skips;
* a batch of such matchers steps them as the single calls do;
* an engine without token-level terminals (``special_tokens=False``) refuses every one
  of these grammars with :class:`UnsupportedGrammar` naming what it names.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.conformance import capabilities, engines, make, partial_tokens
from tests.test_special_tokens import GRAMMARS, SMALL, TOKENS
from toolkit.core import bitmask as bm
from toolkit.core.errors import GrammarError, MasklabError, UnsupportedGrammar
from toolkit.core.protocol import CompiledGrammar, MaskEngine, Matcher
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar
from toolkit.grammar.special import dual_ids, mark_bytes, marked_bytes

# <[*]> and <[^...]> hold text tokens (4-15, 20-23) and real tokens holding 0xFF (16-19)
DUALS = {
    "any": "start: <[*]> /[a-z]*/\n",
    "not": 'start: "a" <[^1,4]> "b"\n',
    "after-lexeme": 'start: /a+/ <[4-6]> "b"\n',  # after "a", the token "a" is <[4-6]>, not more /a+/
    "mixed": "start: (<[*]> | /[ab]+/ | <|tag|>)+\n",
    "nested": 'start: x+\nx: /a+/ <[^0-3]> | "b" <[16-19]>\n',
}

#: SMALL's ids: 0 EOS, 1 <|tag|>, 2 <|end|>, 3 <|other|>
EOS, TAG, END, OTHER = 0, 1, 2, 3


#: SMALL's text tokens that are not UTF-8 on their own (0xFF-holding ones, \xc3, \xa9)
PARTIAL = partial_tokens(SMALL)


def _mask(m: Matcher, vocab: Vocabulary = SMALL) -> list[int]:
    row = bm.allocate(vocab.size)
    info = m.fill_bitmask(row)
    assert info.allowed == bm.popcount(row[0])
    return bm.allowed_ids(row[0], vocab.size).tolist()


def _regular(g: Grammar) -> bool:
    try:
        g.to_regex()
    except UnsupportedGrammar:
        return False
    return True


def _compile(engine: MaskEngine, g: Grammar, what: str) -> CompiledGrammar:
    """``engine.compile(g)`` for an engine with token-level terminals, or a skip where it
    may refuse ``g`` and does so with the typed error that says why (checked here):
    a regular-only engine and a recursive grammar; an engine that cannot read text
    tokens as a terminal and a grammar whose special ids hold some; an engine that
    allows no token that is not UTF-8 alone and a grammar naming such a token; an
    engine that does not take every vocabulary and refuses this one."""
    name, cap = engine.name, capabilities(engine.name)
    ids = g.special_ids(SMALL)
    if cap.grammars == "regular" and not _regular(g):
        with pytest.raises(UnsupportedGrammar):
            engine.compile(g)
        pytest.skip(f"{name} compiles regular grammars only: {what} is recursive (refused, as checked)")
    if not cap.partial_utf8 and ids & PARTIAL:
        pytest.skip(f"{name} (partial_utf8=False) cannot allow {sorted(ids & PARTIAL)}, which {what} names")
    try:
        return engine.compile(g)
    except UnsupportedGrammar as e:
        held = dual_ids(SMALL, ids)
        if held and "holds text tokens" in str(e):
            pytest.skip(f"{name} refuses token terminals over the text tokens {list(held)[:5]}...: {e}")
        raise
    except MasklabError as e:
        if cap.any_vocabulary:
            raise
        pytest.skip(f"{name} (any_vocabulary=False) refuses this vocabulary for {what}: {e}")


SPECIAL_ENGINES = engines(special_tokens=True)


# ----------------------------------------------------------------- binding --


@pytest.mark.parametrize("text, error, what", [
    ("start: <|nope|>", GrammarError, r"special token <\|nope\|> is not in vocabulary 'custom'.*<\|tag\|>"),
    ("start: <[99]>", GrammarError, "past vocabulary"),
    ("start: <[^1-23]>", GrammarError, "leaves no token of vocabulary 'custom' but EOS"),
    ("start: <[0]>", UnsupportedGrammar, "ends generation"),
    ("start: <[0-3]>", UnsupportedGrammar, r"ends generation .* without it: <\[1-3\]>"),
    ("start: <|tag|> </s>", UnsupportedGrammar, "ends generation"),
])
@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_a_grammar_the_vocabulary_cannot_bind_is_a_typed_error(name: str, text: str, error: type, what: str) -> None:
    g = Grammar.from_lark(text)
    with pytest.raises(error, match=what):
        make(name, SMALL).compile(g)


# ---------------------------------------------------------------- language --


@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_a_special_token_is_allowed_exactly_where_the_grammar_puts_it(name: str) -> None:
    g = Grammar.from_lark(GRAMMARS["call"])
    e = make(name, SMALL)
    c = _compile(e, g, "'call'")
    m = e.matcher(c)
    first = _mask(m)
    assert TAG in first and END in first and OTHER not in first  # <|tag|>, <[2]>; not <|other|>
    assert not {16, 17, 18, 19} & set(first)  # tokens holding 0xFF: never
    # the name spelled as text is text: "<", "|", "tag", "|>" is in TEXT, not the special token
    assert m.accept_tokens([11, 12, 13, 14]) == 4 and END not in _mask(m)
    m = e.matcher(c)
    assert m.accept_tokens([TAG, 8]) == 2
    after = _mask(m)
    assert END in after and TAG not in after and EOS not in after  # <|end|> closes the call
    assert m.accept_token(END) and _mask(m) == [EOS]  # then only EOS
    m = e.matcher(c)
    assert not m.accept_token(OTHER) and m.accept_tokens([END, 6, EOS]) == 3 and m.is_terminated()


@pytest.mark.parametrize("key", sorted(GRAMMARS))
@pytest.mark.parametrize("name", engines(special_tokens=True, exclude=("naive",)))
def test_every_strategy_masks_special_tokens_like_naive(name: str, key: str) -> None:
    g = Grammar.from_lark(GRAMMARS[key])
    ours, naive = make(name, SMALL), make("naive", SMALL)
    a, b = _compile(ours, g, repr(key)), naive.compile(g)
    rng = random.Random(key)
    special_steps = 0
    for walk in range(20):
        m, o = ours.matcher(a), naive.matcher(b)
        for step in range(10):
            got, want = _mask(m), _mask(o)
            assert got == want, (name, key, walk, step)
            assert m.is_accepting() == o.is_accepting(), (name, key, walk, step)
            if not want:
                break
            specials = [t for t in want if t in (TAG, END, OTHER)]
            t = rng.choice(specials if specials and walk % 2 else want)
            special_steps += t in (TAG, END, OTHER)
            assert m.accept_token(t) and o.accept_token(t)
            if o.is_terminated():
                assert m.is_terminated()
                break
    assert special_steps >= 5


# ------------------------------------------ tokens with another meaning --


def _by_definition(g: Grammar, history: list[int]) -> list[int]:
    """The mask as the reading defines it, without a matcher or a vocabulary view: the
    tokens whose reading of ``history + [t]`` (:func:`marked_bytes` with the grammar) can
    still be completed (a token holding ``0xFF``, never text, only read as its mark), and
    EOS where the reading of ``history`` is a sentence."""
    out = []
    for t in range(1, len(TOKENS)):
        data = marked_bytes(SMALL, history + [t], g)
        if g.accepts_prefix(data) and (b"\xff" not in TOKENS[t] or data.endswith(mark_bytes(t))):
            out.append(t)
    return ([EOS] if g.accepts(marked_bytes(SMALL, history, g)) else []) + out


def test_the_dual_grammars_hold_text_tokens() -> None:
    """What the tests below are about: every DUALS grammar names text tokens as tokens."""
    for key, text in DUALS.items():
        g = Grammar.from_lark(text)
        assert dual_ids(SMALL, g.special_ids(SMALL)), key


@pytest.mark.parametrize("key", sorted(DUALS))
@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_token_ranges_over_text_tokens_mask_by_their_definition_in_every_strategy(name: str, key: str) -> None:
    g = Grammar.from_lark(DUALS[key])
    bound = g.bind(SMALL)
    engine = make(name, SMALL)
    compiled = _compile(engine, g, repr(key))
    rng = random.Random(key)
    dual_steps = 0
    for walk in range(12):
        m = engine.matcher(compiled)
        history: list[int] = []
        t = -1
        for step in range(8):
            want = _by_definition(bound, history)
            assert _mask(m) == want, (name, key, walk, step, history)
            if not want or want == [EOS]:
                break
            t = rng.choice(want)
            dual_steps += t >= 4
            assert m.accept_token(t), (name, key, walk, step, t)
            if t == EOS:
                break
            history.append(t)
        ended = t == EOS
        fork = m.fork()  # a fork and a rollback keep the reading
        m.rollback(len(history) + ended)
        assert _mask(m) == _by_definition(bound, []), (name, key, walk)
        assert _mask(fork) == ([EOS] if ended else _by_definition(bound, history)), (name, key, walk)
    assert dual_steps >= 10


@pytest.mark.parametrize("key", sorted(DUALS))
@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_a_grammar_given_as_lark_text_masks_as_its_ir_does(name: str, key: str) -> None:
    """The same grammar handed over as Lark text (``LarkText``, as ``--lark`` and the
    datasets give it) reaches the engine's special-token path as its IR does: the first
    mask, and the masks along a seeded walk, by the definition.  (Its token ranges over
    text tokens were once compiled as text, wrong masks.)"""
    from toolkit.grammar.lark_dialect import LarkText

    g = Grammar.from_lark(DUALS[key])
    bound = g.bind(SMALL)
    engine = make(name, SMALL)
    _compile(engine, g, repr(key))  # (skips where the engine refuses this grammar, as its IR)
    m = engine.matcher(engine.compile(LarkText(DUALS[key])))
    rng = random.Random(key)
    history: list[int] = []
    for step in range(6):
        want = _by_definition(bound, history)
        assert _mask(m) == want, (name, key, step, history)
        if not want or want == [EOS]:
            break
        t = rng.choice([u for u in want if u != EOS] or want)
        assert m.accept_token(t)
        if t == EOS:
            break
        history.append(t)


@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_a_text_token_is_the_range_where_the_grammar_can_take_it(name: str) -> None:
    g = Grammar.from_lark(DUALS["after-lexeme"])
    bound = g.bind(SMALL)
    # "a" "a" "b": the first "a" is /a+/, the second the token <[4-6]> (not more /a+/)
    assert marked_bytes(SMALL, [4, 4, 5], bound) == b"a\xff4\xffb" and bound.accepts(b"a\xff4\xffb")
    assert marked_bytes(SMALL, [4, 4, 5]) == b"aab"  # without the grammar: text
    e = make(name, SMALL)
    c = _compile(e, g, "'after-lexeme'")
    m = e.matcher(c)
    assert m.accept_tokens([4, 4, 5, EOS]) == 4 and m.is_terminated()
    m = e.matcher(c)
    assert m.accept_tokens([4, 4, 4]) == 2  # "a" <[4-6]>, then only "b"
    assert m.validate_tokens([6]) == 0 and _mask(m) == [5]


@pytest.mark.parametrize("source", ["dual:after-lexeme", "special:call"])
@pytest.mark.parametrize("name", SPECIAL_ENGINES)
def test_a_batch_of_dual_matchers_steps_them_over_the_real_vocabulary(name: str, source: str) -> None:
    """A batch step (the engine's own batch, or the threaded one) accepts each row's
    token and fills its mask over the real vocabulary's ids as the single calls do:
    seeded steps of no token, an allowed token or a refused one per row."""
    from toolkit.core.batch import NO_TOKEN, make_batch

    kind, key = source.split(":")
    g = Grammar.from_lark(DUALS[key] if kind == "dual" else GRAMMARS[key])
    e = make(name, SMALL)
    c = _compile(e, g, repr(key))
    fixed = [[NO_TOKEN, NO_TOKEN], [4, 4], [4, NO_TOKEN], [5, 4]] if key == "after-lexeme" else []
    rng = random.Random(source)
    batch = make_batch(e, [e.matcher(c), e.matcher(c)], threads=1)
    single = [e.matcher(c), e.matcher(c)]
    rows = bm.allocate(SMALL.size, 2)
    accepted = 0
    try:
        for n in range(12):
            if n < len(fixed):
                tokens = fixed[n]
            else:
                tokens = []
                for m in single:
                    allowed = _mask(m)
                    r = rng.random()
                    tokens.append(NO_TOKEN if r < 0.15 or (r < 0.8 and not allowed) else
                                  rng.choice(allowed) if r < 0.8 else rng.randrange(SMALL.size))
            step = batch.step(np.asarray(tokens, dtype=np.int64), rows)
            for i, t in enumerate(tokens):
                want = -1 if t == NO_TOKEN else int(single[i].accept_token(t))
                accepted += want == 1
                assert step.accepted[i] == want, (name, source, n, tokens)
                assert bm.allowed_ids(rows[i], SMALL.size).tolist() == _mask(single[i]), (name, source, n, tokens, i)
    finally:
        batch.close()
    assert accepted >= 6


# --------------------------------------------------- engines without them --


@pytest.mark.parametrize("key", [f"special:{k}" for k in sorted(GRAMMARS)] + [f"dual:{k}" for k in sorted(DUALS)])
@pytest.mark.parametrize("name", engines(special_tokens=False))
def test_an_engine_without_token_terminals_refuses_grammars_naming_them(name: str, key: str) -> None:
    kind, k = key.split(":")
    g = Grammar.from_lark(GRAMMARS[k] if kind == "special" else DUALS[k])
    named = [g.terminals[n].special for n in g.special_terminals]
    with pytest.raises(UnsupportedGrammar) as e:
        make(name, SMALL).compile(g)
    assert any(s in str(e.value) for s in named), (name, key, str(e.value))
