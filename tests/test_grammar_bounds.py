"""Every grammar compile of masklab's own strategies is bounded: no chain of rules meets
Python's recursion limit, every compile runs under a cooperative deadline
(``compile_timeout``), every limit error names an option of the engine it came from,
and a regex repeat whose cost is known from its text is refused before it is built.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from strategies import get_engine
from strategies.glr import GLREngine
from strategies.outlines._index import TokenIndex
from strategies.outlines.engine import repeat_count
from strategies.xgrammar.engine import build_tables
from tests._support.fixtures import JSON_LARK, small_vocab
from toolkit import cli
from toolkit.automata.regex import compile_regex
from toolkit.core import bitmask as bm
from toolkit.core.errors import LIMIT_OPTIONS, LimitExceeded, TimeLimitExceeded, deadline
from toolkit.core.protocol import MaskEngine, Matcher
from toolkit.grammar.gbnf import GbnfText
from toolkit.grammar.ir import Grammar, RegexText, Terminal

OURS = ["naive", "outlines", "xgrammar", "llguidance", "glr"]
VOCAB = small_vocab()
A, EOS = 14, 1  # the token "a" of small_vocab(), and EOS
N = 5000


def _lark_chain(n: int = N) -> str:
    return "start: r0\n" + "".join(f"r{i}: r{i + 1}\n" for i in range(n - 1)) + f'r{n - 1}: "a"\n'


def _gbnf_chain(n: int = N) -> str:
    return "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n - 1)) + f'r{n - 1} ::= "a"\n'


def _ids(m: Matcher) -> set[int]:
    row = bm.allocate(VOCAB.size)
    m.fill_bitmask(row)
    return {int(i) for i in bm.allowed_ids(row[0], VOCAB.size)}


@pytest.fixture(scope="module")
def lark_chain() -> Grammar:
    """The 5,000-rule chain read from Lark once (lark's loader takes a few seconds)."""
    return Grammar.from_lark(_lark_chain())


# ------------------------------------------------------------------ chains --


@pytest.mark.parametrize("name", OURS)
def test_a_chain_of_5000_rules_compiles_in_every_strategy(name: str, lark_chain: Grammar) -> None:
    """``start: r0``, ``r0: r1``, ..., ``r4999: "a"`` (Lark and GBNF): the language is
    ``a``, in every strategy, with no recursion that the chain's length can exhaust."""
    engine = get_engine(name, VOCAB)
    for grammar in (lark_chain, Grammar.from_gbnf(_gbnf_chain())):
        m = engine.matcher(engine.compile(grammar))
        assert _ids(m) == {A} and m.error is None
        assert m.accept_token(A) and _ids(m) == {EOS}


def test_the_cli_masks_a_chain_of_5000_rules(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    path = tmp_path / "chain.gbnf"
    path.write_text(_gbnf_chain().replace('"a"', '"x"'))
    rc = cli.main(["mask", "--engine", "xgrammar", "--gbnf", str(path), "--show", "3"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in out + err and "allowed 1 of" in out and "b'x'" in out


def test_the_cli_refuses_a_costly_repeat_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["mask", "--engine", "outlines", "--regex", "[a-z]{100000}"])
    _, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "max_repeat" in err and "[a-z]{100000}" in err


def test_deep_shapes_have_no_recursion() -> None:
    """The IR's passes that once recursed per level: the regex writer's factoring of
    alternatives (``a | a b | a b c ...``) and a %json schema's leading rules."""
    n = 700  # two levels of factoring per alternative: past Python's recursion limit
    terms = {f"T{i}": Terminal.from_literal(f"T{i}", "ab"[i % 2]) for i in range(n)}
    alts = tuple(tuple(f"T{i}" for i in range(k)) for k in range(1, n + 1))
    g = Grammar(start="start", rules={"start": alts}, terminals=terms)
    # a(?:b(?:a(...)?)?)?: nested as deep as the alternatives are many (no regex engine
    # here compiles that: the regex is checked as text, and its shape on a short one)
    assert g.to_regex() == "a" + "".join("(?:" + "ab"[i % 2] for i in range(1, n)) + ")?" * (n - 1)
    short = Grammar(start="start", rules={"start": alts[:5]}, terminals=terms).to_regex()
    assert compile_regex(short).fullmatch(b"abab") and not compile_regex(short).fullmatch(b"ababab")
    schema = '{"type": "array", "items": ' * 90 + '{"type": "integer"}' + "}" * 90
    g = Grammar.from_lark(f"start: %json {schema}\n")
    assert g.accepts("[" * 90 + "1" + "]" * 90) and not g.accepts("[" * 89 + "1" + "]" * 89)


# ---------------------------------------------------------------- deadline --


@pytest.mark.parametrize("name", OURS)
def test_a_compile_past_compile_timeout_stops_saying_where(name: str) -> None:
    """A grammar whose compile takes many times the limit (reading 5,000 GBNF rules is
    part of it: 45-90 ms on a fast core) under ``compile_timeout=0.005``:
    TimeLimitExceeded naming the option and where it stopped; the same engine with no
    limit compiles it."""
    text = GbnfText(_gbnf_chain())
    engine = get_engine(name, VOCAB, compile_timeout=0.005)
    assert engine.options["compile_timeout"] == 0.005
    t0 = time.perf_counter()
    with pytest.raises(TimeLimitExceeded) as e:
        engine.compile(text)
    assert time.perf_counter() - t0 < 1  # (reading it all takes 0.3 s or more)
    assert e.value.limit == "compile_timeout" and e.value.limit in engine.options
    assert re.search(r"compile_timeout.*> 0\.005 \(seconds; stopped at .+", str(e.value))


@pytest.mark.parametrize(("name", "says"), [("outlines", "regex"), ("xgrammar", "xgrammar|compile_cfg"), ("glr", "LR")])
def test_the_deadline_reaches_the_engines_own_phases(name: str, says: str) -> None:
    """A grammar read beforehand (its reading is not the compile's): the engine's own work
    (the regex written from it; xgrammar's inlining and cache; glr's LR tables) stops,
    in its first phase: the limit is a fraction of that phase alone on a fast core."""
    n = 1500
    g = Grammar.from_gbnf("root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} | "a" r{i + 1}\n' for i in range(n - 1))
                          + f'r{n - 1} ::= "a"\n')
    engine = get_engine(name, VOCAB, compile_timeout=0.005)
    with pytest.raises(TimeLimitExceeded, match=rf"compile_timeout.*stopped at .*({says})"):
        engine.compile(g)


@contextmanager
def _expired() -> Iterator[None]:
    """A deadline that has passed when the block's first check runs."""
    with deadline(1e-6):
        time.sleep(1e-3)
        yield


def test_the_cython_builders_check_the_deadline() -> None:
    """The loops of the compile that run in C ask for the deadline too: outlines' index
    (every 64 DFA states), xgrammar's mask cache (per dotted rule and every 256 terminal
    states), glr's mask tables made ahead; each raises naming where it stopped."""
    dfa = compile_regex("[ab]{200}")
    trie_engine = get_engine("outlines", VOCAB)
    blob, offsets = VOCAB.byte_table()
    with pytest.raises(TimeLimitExceeded, match="outlines index, DFA state 64"), _expired():
        TokenIndex(trie_engine.trie, dfa.table, dfa.classes, dfa.accepting, blob, offsets, 1 << 30)
    xg = get_engine("xgrammar", VOCAB)
    tables, _ = build_tables(Grammar.from_lark(JSON_LARK), inline_max=4, max_items=10_000)
    with pytest.raises(TimeLimitExceeded, match=r"adaptive token mask cache, dotted rule \d+ of"), _expired():
        tables.build_cache(xg.trie, xg._blob, xg._offsets, xg._text_words, max_cache_bytes=1 << 30)
    glr = GLREngine(VOCAB, mask_tables="lazy")
    parser = glr._parser(glr.compile(Grammar.from_lark(JSON_LARK)))
    with pytest.raises(TimeLimitExceeded, match="mask tables made ahead"), _expired():
        parser.ahead(1_000_000)


@pytest.mark.parametrize("name", OURS)
def test_compile_timeout_is_checked(name: str) -> None:
    for bad in (-1, "60", True, float("nan")):
        with pytest.raises(ValueError, match="compile_timeout"):
            get_engine(name, VOCAB, compile_timeout=bad)
    engine = get_engine(name, VOCAB, compile_timeout=0)  # no limit
    assert engine.options["compile_timeout"] == 0
    assert _ids(engine.matcher(engine.compile(Grammar.from_lark('start: "a"')))) == {A}


# ------------------------------------------------------------ limit names --

SCHEMA = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}}}
JSON = Grammar.from_lark(JSON_LARK)
# (engine, its limit option set tiny, what meets it): every limit option of every strategy
LIMITS: list[tuple[str, dict[str, Any], Any]] = [
    ("naive", {"max_items": 2}, JSON),
    ("naive", {"max_rules": 1}, SCHEMA),
    ("naive", {"max_schema_depth": 1}, SCHEMA),
    ("outlines", {"max_states": 20}, RegexText("[0-9]{0,50}x")),
    ("outlines", {"max_states": 20, "max_repeat": 10**6}, RegexText("[a-c]{60000}")),  # the NFA's limit
    ("outlines", {"max_regex_length": 50}, {"type": "object"}),
    ("outlines", {"max_regex_length": 50}, Grammar.from_lark("start: " + " ".join(['"abcdefgh"'] * 10))),
    ("outlines", {"max_memory": 1}, RegexText("a+")),
    ("outlines", {"max_repeat": 10}, RegexText("a{20}")),
    ("outlines", {"max_rules": 1}, SCHEMA),
    ("outlines", {"max_schema_depth": 1}, SCHEMA),
    ("xgrammar", {"max_items": 2}, JSON),
    ("xgrammar", {"max_cache_bytes": 1}, JSON),
    ("xgrammar", {"max_rules": 1}, SCHEMA),
    ("xgrammar", {"max_schema_depth": 1}, SCHEMA),
    ("llguidance", {"max_lexer_states": 1}, JSON),
    ("llguidance", {"max_row_items": 1}, JSON),
    ("llguidance", {"max_steps": 1}, JSON),
    ("llguidance", {"max_rules": 1}, SCHEMA),
    ("llguidance", {"max_schema_depth": 1}, SCHEMA),
    ("glr", {"max_states": 1}, JSON),
    ("glr", {"max_table_bytes": 1}, JSON),
    ("glr", {"max_lexer_states": 1}, JSON),
    ("glr", {"max_row_items": 1}, JSON),
    ("glr", {"max_steps": 1}, JSON),
    ("glr", {"max_rules": 1}, SCHEMA),
    ("glr", {"max_schema_depth": 1}, SCHEMA),
]


def _limit_met(engine: MaskEngine, spec: Any) -> tuple[str, float | int]:
    """``(limit, maximum)`` of the limit error ``spec`` meets: raised by the compile or the
    matcher, or the matcher's sticky error while it walks a JSON text."""
    try:
        m = engine.matcher(engine.compile(spec))
        for t in (2, 22, 6, 14, 23, 20, 9, 3):  # {"a": 0}
            _ids(m)
            if m.error is not None:
                break
            m.accept_token(t)
    except LimitExceeded as e:
        return e.limit, e.maximum
    assert m.error is not None, "no limit was met"
    found = re.search(r"limit '(\w+)' exceeded: \S+ > (\S+)", m.error)
    assert found, m.error
    return found.group(1), float(found.group(2))


@pytest.mark.parametrize(("name", "options", "spec"), LIMITS, ids=lambda x: str(x) if isinstance(x, (str, dict)) else "")
def test_a_limit_error_names_the_option_that_was_met(name: str, options: dict[str, Any], spec: Any) -> None:
    engine = get_engine(name, VOCAB, **options)
    limit, maximum = _limit_met(engine, spec)
    assert limit in engine.options, f"{name} has no option {limit!r}"
    assert limit in options
    if limit != "max_states" or "max_repeat" not in options:  # (the NFA's limit is derived from max_states)
        assert maximum == options[limit]


def test_every_limit_option_is_covered() -> None:
    """The table above holds every limit option (``max_*``) of each strategy but the
    ones that bound the unrolling of recursion in outlines (``max_depth``,
    ``grammar_max_depth``: the text's length stops them first)."""
    for name in OURS:
        options = {k for k in get_engine(name, VOCAB).options if k.startswith("max_")}
        covered = {k for e, opts, _ in LIMITS if e == name for k in opts}
        assert options - covered == (set() if name != "outlines" else {"max_depth"}), name


def test_the_xgrammar_chart_limit_code_names_its_option() -> None:
    assert LIMIT_OPTIONS[-14][0] == "max_items" and "max_items" in get_engine("xgrammar", VOCAB).options


# ----------------------------------------------------------- costly repeats --


def test_a_huge_repeat_is_refused_from_the_text() -> None:
    """``[a-z]{100000}`` in outlines (a 100,001-state DFA walked over the vocabulary: 1.6 GB
    with a 131k vocabulary) is refused before anything is built, naming the repeat."""
    engine = get_engine("outlines", VOCAB)
    for spec in (RegexText("[a-z]{100000}"), RegexText("x(?:[a-z]{100000})?y")):
        t0 = time.perf_counter()
        with pytest.raises(LimitExceeded) as e:
            engine.compile(spec)
        assert time.perf_counter() - t0 < 0.1
        assert e.value.limit == "max_repeat" and e.value.value == 100_000 and e.value.maximum == 10_000
        assert "[a-z]{100000}" in str(e.value)
    assert get_engine("outlines", VOCAB, max_repeat=10).compile(RegexText("a{10}b")).num_states == 12
    assert repeat_count(r"[{99999}]\{99999\}(?#{99999})", 10) == (1, "")


def test_the_lexing_strategies_compile_a_huge_repeat_fast() -> None:
    """xgrammar, llguidance and glr share the positions, lexer states and mask-table roots
    that no token tells apart: ``[a-z]{100000}`` in a Lark terminal compiles in well under
    a second each (the terminal's DFA is the grammar's), masks exact."""
    g = Grammar.from_lark("start: W\nW: /[a-z]{100000}/\n")
    for name in ("xgrammar", "llguidance", "glr"):
        engine = get_engine(name, VOCAB)
        t0 = time.perf_counter()
        m = engine.matcher(engine.compile(g))
        assert time.perf_counter() - t0 < 3
        assert _ids(m) == {14, 15, 16, 17, 24, 25, 26}  # a ab abc b true tr null
    with pytest.raises(LimitExceeded, match=r"max_repeat.*\[a-z\]\{100000\}"):
        get_engine("outlines", VOCAB).compile(g)

