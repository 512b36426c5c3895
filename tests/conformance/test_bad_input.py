"""Bad input gets a typed error, or a refusal that changes nothing, in every engine.

For every registered engine (skipped where its dependencies are not installed):

* a bare ``str`` given to ``compile`` is refused (:class:`UnsupportedGrammar` naming
  ``RegexText``, ``LarkText`` and ``JsonSchemaText``: which format is it?), and the
  wrappers compile to the masks of the Grammar they spell;
* ``fill_bitmask`` into a row of the wrong width is a ValueError that says ``words``,
  and leaves the matcher as it was;
* ``accept_token`` of an id that is no token of the grammar (negative, past the
  vocabulary, a padding id, a special id that is not EOS) returns False and changes
  nothing, at the start, mid-way and after EOS;
* a bitmask that is not writeable int32 words (int64, uint32, float32, read-only, a
  list) is a ValueError or TypeError, and a token id that is not an integer
  (``3.0``, ``"3"``, ``True``) a TypeError, in ``accept_token``, ``accept_allowed``,
  ``accept_tokens``, ``validate_tokens`` and the draft calls (every id checked before
  the first is taken; ``rollback`` takes integer counts only): raised before the engine is called, so the matcher's masks and next tokens
  stay an untouched twin's (:func:`toolkit.core.protocol.check_bitmask_row`,
  :func:`toolkit.core.protocol.check_token_id`);
* ``get_engine`` with an unknown option, or an option of the wrong type, is a
  ValueError naming the option and what it takes (:func:`strategies.check_options`);
* grammar, regex and schema texts that cannot be read are a
  :class:`~toolkit.core.errors.MasklabError` with a message, never another exception:
  a :class:`GrammarError` with its line and column where masklab reads the Lark text, the
  peer's typed error (``PeerError``) where the engine reads it natively.

All over :func:`~tests._support.fixtures.small_vocab`; an engine that does not take
every vocabulary (``any_vocabulary=False``) is skipped where it refuses this one (it
takes it for the grammars here).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import numpy as np
import pytest

from strategies import engine_factory, get_engine
from tests._support.fixtures import small_vocab
from tests.conformance import capabilities, engines, make
from toolkit.core import bitmask as bm
from toolkit.core.errors import GrammarError, MasklabError, UnsupportedGrammar
from toolkit.core.protocol import CompiledGrammar, MaskEngine, Matcher
from toolkit.grammar import RegexText
from toolkit.grammar.ir import Grammar
from toolkit.grammar.lark_dialect import LarkText
from toolkit.jsonschema import JsonSchemaText

VOCAB = small_vocab()
WORDS = bm.words(VOCAB.size)
EOS = VOCAB.eos_ids[0]
#: ids that are never a token of a grammar without special tokens: negative, past the
#: vocabulary, far past it, the padding ids, the special ids that are not EOS
BAD_IDS = sorted({-1, VOCAB.size, 10**6, *range(VOCAB.n_defined, VOCAB.size),
                  *(t for t in VOCAB.special_tokens if t not in VOCAB.eos_ids)})
DIGITS = Grammar.from_regex("[0-9]+(ab)?")


def _compile(engine: MaskEngine, grammar: Any) -> CompiledGrammar:
    """``engine.compile(grammar)``; an engine that does not take every vocabulary skips
    the test where it refuses this one."""
    try:
        return engine.compile(grammar)
    except MasklabError as e:
        if capabilities(engine.name).any_vocabulary:
            raise
        pytest.skip(f"{engine.name} (any_vocabulary=False) refuses small_vocab here: {e}")


def _state(m: Matcher) -> tuple[bytes, bool, bool, str | None]:
    row = bm.allocate(VOCAB.size)
    m.fill_bitmask(row)
    return row.tobytes(), m.is_accepting(), m.is_terminated(), m.error


def _ids(m: Matcher) -> list[int]:
    row = bm.allocate(VOCAB.size)
    m.fill_bitmask(row)
    return bm.allowed_ids(row[0], VOCAB.size).tolist()


# ------------------------------------------------------------- compile --


@pytest.mark.parametrize("name", engines())
def test_a_bare_string_is_refused_and_its_kind_told_compiles(name: str) -> None:
    """``compile("[0-9]+")`` could be a regex, Lark or a schema's text: every engine
    refuses it, naming the three wrappers; ``RegexText`` and ``LarkText`` compile to the
    masks of the Grammar they spell."""
    engine = make(name, VOCAB)
    with pytest.raises(UnsupportedGrammar, match=r"got a str \('\[0-9\]\+'\).*RegexText\(text\).*LarkText.*JsonSchemaText"):
        engine.compile("[0-9]+")
    lark = 'start: "a" ("b" | "c")\n'
    for told, grammar in ((RegexText("[0-9]+"), Grammar.from_regex("[0-9]+")),
                          (LarkText(lark), Grammar.from_lark(lark))):
        want, got = engine.matcher(_compile(engine, grammar)), engine.matcher(_compile(engine, told))
        assert _ids(got) == _ids(want) and _ids(got), told


#: Lark texts that cannot be read; ``start: (`` is where masklab's reader says (line, column)
LARK_ERRORS = ["start: (", "start: foo", "start: /[/", 'start: "a"\nstart: "b"', "", "start: A\nA: B\nB: A",
               "%import common.NOPE\nstart: NOPE", 'start: "a" %ignore']


@pytest.mark.parametrize("name", engines())
def test_a_lark_text_that_cannot_be_read_is_a_typed_error(name: str) -> None:
    engine = make(name, VOCAB)
    for text in LARK_ERRORS:
        try:
            engine.compile(LarkText(text))
        except MasklabError as e:
            assert str(e).strip(), (name, text)
            if "lark" not in engine.native_inputs:  # masklab reads it: a GrammarError, placed where it can be
                assert isinstance(e, GrammarError), (name, text, type(e))
                if text == "start: (":
                    assert (e.line, e.column) == (1, 10), (name, e)
        except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
            pytest.fail(f"{name}: LarkText({text!r}) raised {type(e).__name__}: {e}, not a MasklabError")
        else:
            pytest.fail(f"{name} compiled LarkText({text!r})")


@pytest.mark.parametrize("name", engines())
def test_a_regex_that_cannot_be_read_is_a_typed_error(name: str) -> None:
    engine = make(name, VOCAB)
    for text in ("(", "[a-", "a{3,1}"):
        with pytest.raises(MasklabError) as e:
            engine.compile(RegexText(text))
        assert str(e.value).strip(), (name, text)


@pytest.mark.parametrize("name", engines())
def test_a_schema_text_that_is_not_json_is_a_typed_error(name: str) -> None:
    """Where masklab reads the schema, a :class:`GrammarError` at the line and column of
    the JSON error; a peer's own reader raises its typed error."""
    engine = make(name, VOCAB)
    for text, where in (("{", (1, 2)), ('{"type": "object",}', (1, 19))):
        with pytest.raises(MasklabError) as e:
            engine.compile(JsonSchemaText(text))
        assert str(e.value).strip(), (name, text)
        if engine.schema_grammar == "masklab":
            assert isinstance(e.value, GrammarError) and (e.value.line, e.value.column) == where, (name, text)


# ------------------------------------------------------------ matchers --


@pytest.mark.parametrize("name", engines())
def test_a_wrongly_shaped_bitmask_is_a_value_error_naming_words(name: str) -> None:
    engine = make(name, VOCAB)
    m = engine.matcher(_compile(engine, DIGITS))
    assert m.accept_token(VOCAB.token_bytes.index(b"12"))
    before = _state(m)
    for shape in ((1, WORDS + 4), (1, WORDS + 1), (2, WORDS + 1), (WORDS + 1,), (1, 0)):
        with pytest.raises(ValueError, match="words"):
            m.fill_bitmask(np.zeros(shape, dtype=np.int32))
        assert _state(m) == before, (name, shape)


@pytest.mark.parametrize("name", engines())
def test_ids_that_are_no_token_are_refused_and_change_nothing(name: str) -> None:
    """At the start, after ``12`` (accepting, more may follow) and after EOS."""
    engine = make(name, VOCAB)
    m = engine.matcher(_compile(engine, DIGITS))
    twelve = VOCAB.token_bytes.index(b"12")
    for step in ("start", "12", "EOS"):
        if step == "12":
            assert m.accept_token(twelve)
        elif step == "EOS":
            assert m.accept_token(EOS) and m.is_terminated()
        before = _state(m)
        for t in BAD_IDS:
            assert m.accept_token(t) is False, (name, step, t)
            assert _state(m) == before, (name, step, t)
        assert m.accept_tokens([BAD_IDS[0], twelve]) == 0 and m.validate_tokens(BAD_IDS) == 0, (name, step)
        assert _state(m) == before, (name, step)
    m.rollback(2)
    assert _state(m)[1:] == (False, False, None), name  # the walk was 12, EOS: back at the start


def _bad_bitmasks() -> list[tuple[str, Any]]:
    """Bitmasks of the right width that are not the protocol's writeable int32 words."""
    frozen = bm.allocate(VOCAB.size)
    frozen.flags.writeable = False
    return [(str(np.dtype(t)), np.zeros((1, WORDS), dtype=t)) for t in (np.int64, np.uint32, np.float32, np.int16)] + [
        ("int64 row", np.zeros(WORDS, dtype=np.int64)),
        ("read-only", frozen),
        ("list", [[0] * WORDS]),
    ]


#: what is no token id (ids are integers: int, numpy integers): a refusal by type,
#: not the False of an id outside the vocabulary
NOT_IDS = [3.0, np.float64(3.0), 2.5, "3", None, True, np.array([3])]


def _next_tokens(m: Matcher) -> list[bool]:
    """Which ids ``m`` accepts next, each taken back."""
    out = []
    for t in range(VOCAB.size):
        ok = m.accept_token(t)
        if ok:
            m.rollback(1)
        out.append(ok)
    return out


@pytest.mark.parametrize("name", engines())
def test_a_bitmask_of_another_dtype_or_a_float_id_is_refused_before_the_state_is_touched(name: str) -> None:
    """A typed error (ValueError or TypeError) for a bitmask that is not writeable int32
    words and for a token id that is not an integer, raised before the engine is called:
    after it the matcher's mask, error state and next tokens are an untouched twin's."""
    engine = make(name, VOCAB)
    c = _compile(engine, DIGITS)
    m, twin = engine.matcher(c), engine.matcher(c)
    twelve = VOCAB.token_bytes.index(b"12")
    for step in ("start", "12", "EOS"):
        if step != "start":
            t = twelve if step == "12" else EOS
            assert m.accept_token(t) and twin.accept_token(t), (name, step)
        for what, bitmask in _bad_bitmasks():
            with pytest.raises((ValueError, TypeError)):
                m.fill_bitmask(bitmask)
            assert _state(m) == _state(twin), (name, step, what)
        for x in NOT_IDS:
            for call in (m.accept_token, m.accept_allowed):
                with pytest.raises(TypeError):
                    call(x)
            with pytest.raises(TypeError):  # every id is checked before the first is taken
                m.accept_tokens([twelve, x])
            with pytest.raises(TypeError):
                m.validate_tokens([twelve, x])
            rows = bm.allocate(VOCAB.size, 3)
            with pytest.raises(TypeError):  # the drafts' ids too, before the first is taken
                m.fill_draft_bitmasks([twelve, x], rows)
            with pytest.raises(TypeError):
                m.fill_draft_tree([twelve, x], [-1, 0], rows)
            with pytest.raises(TypeError):  # (3.0, True: no count of tokens either)
                m.rollback(x)
            assert _state(m) == _state(twin) and m.num_tokens == twin.num_tokens, (name, step, repr(x))
        for what, bitmask in _bad_bitmasks():  # the draft calls' bitmask: checked before the state is touched
            rows = np.repeat(np.asarray(bitmask).reshape(1, -1), 3, axis=0)
            if what == "read-only":
                rows.flags.writeable = False
            with pytest.raises((ValueError, TypeError)):
                m.fill_draft_bitmasks([twelve], rows if what != "list" else rows.tolist())
            assert _state(m) == _state(twin), (name, step, what)
        assert _next_tokens(m) == _next_tokens(twin), (name, step)
        assert _state(m) == _state(twin) and m.error is None, (name, step)
    # integers of any integer type are ids
    m.rollback(2)
    assert m.accept_token(np.int64(twelve)) and m.accept_token(np.int32(EOS)) and m.is_terminated(), name


# ------------------------------------------------------------- options --


def _options(name: str) -> dict[str, inspect.Parameter]:
    """Engine ``name``'s options (its factory's keyword-only parameters), their
    annotations resolved."""
    sig = inspect.signature(engine_factory(name), eval_str=True)
    return {k: p for k, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _literals(tp: Any) -> list[Any]:
    """The values a ``Literal`` (or a union holding one) lists."""
    if typing.get_origin(tp) is typing.Literal:
        return list(typing.get_args(tp))
    return [v for a in typing.get_args(tp) for v in _literals(a)]


class _Nothing:
    """A value of no type an option declares."""

    def __repr__(self) -> str:
        return "<no option value>"


@pytest.mark.parametrize("name", engines())
def test_an_unknown_or_mistyped_option_is_a_value_error_naming_it(name: str) -> None:
    options = _options(name)
    forwards = any(p.kind is inspect.Parameter.VAR_KEYWORD
                   for p in inspect.signature(engine_factory(name)).parameters.values())
    with pytest.raises(ValueError, match="no_such_option") as e:
        get_engine(name, VOCAB, no_such_option=1)
    if not forwards:  # the valid ones are listed
        assert all(k in str(e.value) for k in options), (name, str(e.value))
    checked = 0
    for key, p in options.items():
        if p.annotation in (inspect.Parameter.empty, Any):
            continue
        with pytest.raises(ValueError, match=rf"{key}.*takes") as e:
            get_engine(name, VOCAB, **{key: _Nothing()})
        checked += 1
        values = _literals(p.annotation)
        if values:  # an enum: a wrong word lists the right ones
            with pytest.raises(ValueError, match=rf"{key}.*takes") as e:
                get_engine(name, VOCAB, **{key: "no-such-value"})
            assert all(repr(v) in str(e.value) for v in values), (name, key, str(e.value))
    assert checked or not options, f"{name}: no option declares its type"
