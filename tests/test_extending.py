"""How a new strategy joins masklab (``docs/extending.md``), checked on the toy strategy
(``tests/_support/toystrategy.py``):

* **the conformance suite**: registered through ``MASKLAB_ENGINES`` alone, the toy is
  parametrized into ``tests/conformance`` and passes it, with no test file edited
  (run in a subprocess, as an author runs it);
* **the registry's plugins**: ``MASKLAB_ENGINES`` entries, entry points and
  :func:`strategies.register`, malformed ones refused with a message that names the
  variable or the call; the toy's option checked by type and by range;
* **the toy itself**: its masks equal ``naive``'s on random walks with rollbacks (JSON,
  arithmetic, a regex, a vocabulary with special tokens), and its limit error names
  its option.
"""

from __future__ import annotations

import importlib.metadata
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import strategies
from strategies import available_engines, engine_factory, get_engine, register, registered_engines
from tests._support.fixtures import ARITH_LARK, JSON_LARK, small_vocab
from tests._support.toystrategy import ToyEngine, ToyMatcher
from toolkit.core import bitmask as bm
from toolkit.core.protocol import Matcher
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

ROOT = Path(__file__).resolve().parent.parent
TOY = "tests._support.toystrategy:ToyEngine"

# The toy's tests that pass in tests/conformance (54 with its seven suites: contract,
# walks, batch, forced, unsatisfiable, special_tokens, bad_input); raise it as suites
# grow, so that a suite that stops taking the toy is seen.
MIN_TOY_TESTS = 54


# ------------------------------------------------------------ the suite --


def test_the_toy_joins_the_conformance_suite_with_no_test_file_edited() -> None:
    """What ``docs/extending.md`` tells an author to run: every conformance test
    parametrized with the toy passes, and there are at least MIN_TOY_TESTS of them."""
    env = {**os.environ, strategies.ENV: f"toy={TOY}"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/conformance", "-k", "toy"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    out = proc.stdout + proc.stderr
    tail = out[-4000:]
    assert proc.returncode == 0, tail
    summary = out.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None and not re.search(r"\d+ (failed|errors?)\b", summary), summary
    assert int(passed.group(1)) >= MIN_TOY_TESTS, summary
    ran = re.findall(r"^PASSED (.+)$", out, re.MULTILINE)
    assert len(ran) == int(passed.group(1)), tail
    # every test that ran took the toy (one of its parameters), and nothing failed on the way
    params = [f"-{t.split('::', 1)[1].partition('[')[2][:-1]}-" for t in ran]
    assert all("-toy-" in p for p in params), [t for t, p in zip(ran, params, strict=True) if "-toy-" not in p]
    assert not re.search(r"^(FAILED|ERROR) ", out, re.MULTILINE), tail


# ------------------------------------------------------------ the registry --


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The registry as a copy that the test may change, read afresh from the environment
    (``MASKLAB_ENGINES`` unset); the real one, and whether it was read, come back after."""
    monkeypatch.setattr(strategies, "_REGISTRY", dict(strategies._REGISTRY))
    monkeypatch.setattr(strategies, "_plugins_read", False)
    monkeypatch.delenv(strategies.ENV, raising=False)
    return monkeypatch


@pytest.mark.parametrize("entry", [
    "toy-env",                                   # no '='
    "toy-env=tests._support.toystrategy",        # no ':Factory'
    "toy-env=tests/_support/toystrategy.py:ToyEngine",
    f"={TOY}",                                   # no name
    f"toy env={TOY}",                            # a name with a space
])
def test_a_malformed_entry_is_refused_naming_the_variable(registry: pytest.MonkeyPatch, entry: str) -> None:
    registry.setenv(strategies.ENV, f"toy-ok={TOY},{entry}")
    with pytest.raises(ValueError, match=rf"^{strategies.ENV}: {re.escape(repr(entry))} is not name="):
        registered_engines()
    # told again on the next use, until it is fixed
    with pytest.raises(ValueError, match=strategies.ENV):
        available_engines()
    registry.setenv(strategies.ENV, f"toy-ok={TOY}")
    assert "toy-ok" in registered_engines()


def test_masklab_engines_lists_each_engines_capabilities(registry: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``masklab engines``: a line per registered engine (a registered plug-in too) with
    its capabilities, under a header naming them."""
    from toolkit.cli import main

    registry.setattr(strategies, "_plugins_read", False)
    registry.setenv(strategies.ENV, f"toy-cli={TOY}")
    assert main(["engines"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["engine", "installed", "lexing", "grammars", "batch"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == set(registered_engines())
    assert rows["glr"][1:8] == ["installed", "lexer", "context-free", "native", "bytes", "native", "yes"]
    assert rows["outlines"][3] == "regular" and rows["naive"][2] == "scannerless"
    assert rows["toy-cli"][-3:] == ["yes", "slow", "max_items"]


def test_the_built_ins_declare_what_their_classes_say(registry: pytest.MonkeyPatch) -> None:
    """``masklab engines`` reads a built-in's capabilities and requirements from
    ``strategies.declared.BUILT_IN`` without importing it: every built-in's class takes
    the same objects, and a built-in name registered to another factory is read from it."""
    from strategies.declared import BUILT_IN

    assert set(BUILT_IN) <= set(registered_engines())
    for name, declared in BUILT_IN.items():
        factory = engine_factory(name)
        assert factory.capabilities is declared.capabilities, name
        assert tuple(factory.requires) == declared.requires, name
        assert strategies.engine_capabilities(name) is declared.capabilities
    register("naive", TOY)
    assert strategies.engine_capabilities("naive") is ToyEngine.capabilities
    assert strategies.engine_capabilities("naive") is not BUILT_IN["naive"].capabilities


def test_masklab_engines_loads_no_engine(tmp_path: Path) -> None:
    """Listing the engines imports none of the built-ins' modules, nor the grammar readers
    (its startup is what the CLI issue measured)."""
    code = ("import sys; from toolkit.cli import main; main(['engines']); "
            "print(sorted(m for m in sys.modules if m.startswith(('strategies.', 'toolkit.grammar', "
            "'toolkit.jsonschema'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "MASKLAB_ENGINES": ""}).stdout.splitlines()[-1]
    assert out == "['strategies.declared']", out


def test_a_good_entry_registers_the_engine(registry: pytest.MonkeyPatch) -> None:
    vocab = small_vocab()
    assert "toy-env" not in registered_engines()
    registry.setattr(strategies, "_plugins_read", False)
    registry.setenv(strategies.ENV, f" toy-env = {TOY} , toy-two={TOY},")  # spaces and a trailing comma
    assert {"toy-env", "toy-two"} <= set(available_engines())
    engine = get_engine("toy-env", vocab, max_items=500)
    assert isinstance(engine, ToyEngine) and engine.vocab is vocab and engine.options == {"max_items": 500}
    assert engine_factory("toy-two") is ToyEngine


def test_an_entry_point_registers_the_engine(registry: pytest.MonkeyPatch) -> None:
    """A package's ``[project.entry-points."masklab.strategies"]`` table, as
    :func:`importlib.metadata.entry_points` gives it."""
    ep = importlib.metadata.EntryPoint(name="toy-ep", value=TOY, group=strategies.ENTRY_POINTS)

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep] if group == strategies.ENTRY_POINTS else []

    registry.setattr(strategies, "entry_points", entry_points)
    assert "toy-ep" in available_engines()
    assert isinstance(get_engine("toy-ep", small_vocab()), ToyEngine)


@pytest.mark.parametrize("name, target", [
    ("toy-reg", "tests._support.toystrategy"),
    ("toy-reg", "tests._support.toystrategy:"),
    ("toy-reg", ":ToyEngine"),
    ("toy-reg", "tests/_support/toystrategy.py:ToyEngine"),
    ("toy-reg", "tests._support.toystrategy:ToyEngine()"),
    ("toy reg", TOY),
    ("", TOY),
])
def test_register_refuses_a_malformed_name_or_target(registry: pytest.MonkeyPatch, name: str, target: str) -> None:
    with pytest.raises(ValueError, match=r"register\(.*'package\.module:Factory'"):
        register(name, target)
    assert name not in registered_engines()


def test_register_then_what_the_registry_tells(registry: pytest.MonkeyPatch) -> None:
    """A registered name is made like a built-in one; a factory given by its path needs
    no name; a name whose module has no such factory, or does not import, is told."""
    vocab = small_vocab()
    register("toy-reg", TOY)
    assert "toy-reg" in available_engines()
    assert isinstance(get_engine("toy-reg", vocab), ToyEngine)
    assert isinstance(get_engine(TOY, vocab), ToyEngine)
    register("toy-gone", "tests._support.no_such_module:ToyEngine")
    assert "toy-gone" in registered_engines() and "toy-gone" not in available_engines()
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        get_engine("toy-gone", vocab)
    register("toy-typo", "tests._support.toystrategy:ToyEngin")
    with pytest.raises(ValueError, match="has no 'ToyEngin'"):
        get_engine("toy-typo", vocab)


def test_the_toys_option_is_checked_by_type_then_by_range(registry: pytest.MonkeyPatch) -> None:
    vocab = small_vocab()
    register("toy-reg", TOY)
    with pytest.raises(ValueError, match=r"option 'max_items' takes int, got '12'"):
        get_engine("toy-reg", vocab, max_items="12")
    with pytest.raises(ValueError, match=r"has no option 'max_item'; its options: max_items"):
        get_engine("toy-reg", vocab, max_item=12)
    with pytest.raises(ValueError, match=r"'max_items' must be at least 1, got 0"):
        get_engine("toy-reg", vocab, max_items=0)


# ------------------------------------------------------------ the toy --

# ids: 0 EOS, 1 <|tag|>, 2 <|end|> (special); text tokens spelling the names, real
# tokens holding 0xFF, and half of "é" (0xC3 0xA9)
SPECIAL_TOKENS = [b"</s>", b"<|tag|>", b"<|end|>", b"a", b"b", b"ab", b"1", b"12", b"<", b"|", b"tag", b"|>",
                  b"\xff", b"x\xff", b"\xc3", b"\xa9", b"{", b"}"]
SPECIAL_VOCAB = Vocabulary.from_tokens(SPECIAL_TOKENS, eos_ids=[0],
                                       special_tokens={0: "</s>", 1: "<|tag|>", 2: "<|end|>"})

CASES = {
    "json": (small_vocab, Grammar.from_lark(JSON_LARK)),
    "arith": (small_vocab, Grammar.from_lark(ARITH_LARK)),
    "regex": (small_vocab, Grammar.from_regex(r'(ab|a|"é")+[0-9]{1,3}')),
    "special": (lambda: SPECIAL_VOCAB,
                Grammar.from_lark('start: (TEXT | call)+\nTEXT: /[a-z<|>é]+/\ncall: <|tag|> NUM <|end|>\nNUM: /[0-9]+/\n')),
    "dual": (lambda: SPECIAL_VOCAB, Grammar.from_lark('start: ("a" <[3-5]> | "b")+\n')),
}


def _mask(m: Matcher, size: int) -> list[int]:
    row = bm.allocate(size)
    m.fill_bitmask(row)
    return bm.allowed_ids(row[0], size).tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_toys_masks_are_naives(case: str) -> None:
    """Random walks (seeded by the case) with rollbacks and refused tokens: the toy's
    mask, accept verdicts and acceptance equal naive's at every step."""
    make_vocab, grammar = CASES[case]
    vocab = make_vocab()
    toy, naive = ToyEngine(vocab), get_engine("naive", vocab)
    rng = random.Random(f"extending-{case}")
    for _walk in range(3):
        a, b = toy.matcher(toy.compile(grammar)), naive.matcher(naive.compile(grammar))
        consumed = 0
        for _step in range(30):
            want = _mask(b, vocab.size)
            assert _mask(a, vocab.size) == want, (case, consumed)
            assert a.is_accepting() == b.is_accepting()
            refused = sorted(set(range(vocab.size)) - set(want))
            if consumed and rng.random() < 0.2:
                k = rng.randint(1, consumed)
                a.rollback(k)
                b.rollback(k)
                consumed -= k
                continue
            if refused and rng.random() < 0.2:
                t = rng.choice(refused)
                assert not a.accept_token(t) and not b.accept_token(t)
            text = [t for t in want if t not in vocab.eos_ids]
            if not text:
                break
            t = rng.choice(text)
            assert a.accept_token(t) and b.accept_token(t)
            consumed += 1
        assert a.error is None and b.error is None


def test_the_toys_limit_error_names_its_option_when_a_fill_hits_it() -> None:
    """A fill (not an accept: the conformance suite checks that) that passes
    ``max_items`` leaves the sticky error, naming the option, and an EOS-only mask."""
    vocab = small_vocab()
    toy = ToyEngine(vocab, max_items=12)
    m = toy.matcher(toy.compile(Grammar.from_lark('start: "a" start | "b"\n')))
    assert isinstance(m, ToyMatcher)
    for _ in range(30):
        assert m.accept_token(14)  # a
    assert m.error is None
    assert _mask(m, vocab.size) == list(vocab.eos_ids)  # checking "b" completes thirty rules
    assert m.error is not None and "LimitExceeded" in m.error and "max_items" in m.error and "12" in m.error
    assert not m.accept_token(14)
    m.rollback(30)
    assert m.error is not None  # sticky until reset
    m.reset()
    assert _mask(m, vocab.size) == [14, 15, 17]  # a, ab, b
