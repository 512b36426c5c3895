"""toolkit.automata._rxparse: our regex parser against interegular's.

The oracle is the DFA: a pattern read by :func:`toolkit.automata._rxparse.parse` and by
``interegular.parse_pattern`` must compile (with the same :func:`toolkit.automata.nfa._build`,
determinization and minimization) to the same arrays, which the canonical numbering
makes equal exactly when the languages are.  Where the two parsers read the same
syntax the trees are equal objects too.  The corpora: the regexes the other test
files use, the embedded datasets (``regex`` items, and the terminals of the schema
and Lark items), Outlines' regexes for some MaskBench schemas (shared data), and
random patterns.  The documented differences (see :mod:`toolkit.automata._rxparse`) get
their own tests.
"""

from __future__ import annotations

import ast
import json
import re
import time
import warnings
from pathlib import Path

import interegular
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from interegular.patterns import Pattern, _CharGroup, _Concatenation, _Repeated

from tests._support.shared import PROJECT_ROOT, require_shared
from toolkit.automata._rxparse import parse
from toolkit.automata.dfa import DEFAULT_MAX_STATES, freeze, minimize
from toolkit.automata.nfa import (
    _NFA,
    _build,
    _column_of_cuts,
    _determinize,
    _nfa_limit,
    strip_anchors,
)
from toolkit.automata.regex import compile_regex
from toolkit.core.errors import LimitExceeded, RegexError

# ---------------------------------------------------------------- helpers --


def ours(pattern: str) -> tuple:
    """``("dfa", (transitions, accepting, start))``, ``("limit",)`` or ``("error", message)``."""
    try:
        d = compile_regex(pattern)
    except LimitExceeded:
        return ("limit",)
    except RegexError as e:
        return ("error", str(e))
    return ("dfa", (d.transitions, d.accepting, d.start))


def theirs(pattern: str) -> tuple:
    """As :func:`ours`, with interegular's parser in front of the same construction."""
    try:
        tree = interegular.parse_pattern(strip_anchors(pattern))
    except Exception as e:  # interegular raises assorted exceptions on bad syntax
        return ("error", f"{type(e).__name__}: {e}")
    nfa = _NFA(_nfa_limit(DEFAULT_MAX_STATES), pattern)
    try:
        frag = _build(nfa, tree, 0)
        table, acc, cuts = _determinize(nfa, frag, DEFAULT_MAX_STATES)
        table, acc, start = minimize(table, acc)
        trans = freeze(table, acc, start, None, _column_of_cuts(cuts)).transitions
    except LimitExceeded:
        return ("limit",)
    except RegexError as e:  # e.g. interegular's lookaround node, (?m) on a character
        return ("error", str(e))
    return ("dfa", (trans, acc, start))


def _same(a: tuple, b: tuple) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] != "dfa":
        return True
    (t1, a1, s1), (t2, a2, s2) = a[1], b[1]
    return s1 == s2 and np.array_equal(t1, t2) and np.array_equal(a1, a2)


def assert_same_language(pattern: str) -> None:
    """Both parsers accept ``pattern`` with the same DFA, or both refuse it."""
    a, b = ours(pattern), theirs(pattern)
    assert _same(a, b), (pattern, a[0], b[0], a[1:] if a[0] == "error" else "", b[1:] if b[0] == "error" else "")


def _python_accepts(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


# ------------------------------------------------------------ the corpora --

_REGEX_CALLS = {"compile_regex", "canonical_regex", "_compile_reference", "compile_reference", "from_regex"}
_REGEX_PARAMS = {"pattern", "regex", "p", "q", "same_as"}
_REGEX_NAMES = ("CORPUS", "REGEXES", "_RE")
# test_jsonregex's patterns are ECMAScript, not this dialect.
_NOT_THIS_DIALECT = {"test_jsonregex.py", "test_rxparse.py"}


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _test_file_regexes() -> list[str]:
    """String literals the test files hand to the regex compiler: first arguments of
    ``compile_regex`` and friends, ``parametrize`` values of regex arguments, and
    module-level ``*CORPUS``/``*REGEXES``/``*_RE`` constants."""
    found: set[str] = set()
    for path in sorted((PROJECT_ROOT / "tests").glob("test_*.py")):
        if path.name in _NOT_THIS_DIALECT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in _REGEX_CALLS and node.args:
                    a = node.args[0]
                    if isinstance(a, ast.Constant) and isinstance(a.value, str):
                        found.add(a.value)
                elif name == "parametrize" and len(node.args) >= 2:
                    names = node.args[0]
                    if isinstance(names, ast.Constant) and isinstance(names.value, str):
                        if {n.strip() for n in names.value.split(",")} & _REGEX_PARAMS:
                            found |= _strings(node.args[1])
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if isinstance(t, ast.Name) and t.id.endswith(_REGEX_NAMES):
                    found |= _strings(node.value)
    return sorted(found)


def _dataset_regexes() -> list[str]:
    out = []
    for path in sorted((PROJECT_ROOT / "datasets").rglob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and isinstance(doc.get("regex"), str):
            out.append(doc["regex"])
    return out


TEST_REGEXES = _test_file_regexes()
DATASET_REGEXES = _dataset_regexes()

# The dialect, construct by construct (all read alike by both parsers).
DIALECT = [
    "abc", "a|b|", "|", "(a)(b)", "(?:a|bc)d", "(?P<name>a)(?P<n2>b)", "((a|b))", "((a))*",
    "(((a)))b", "(a(b(c)))", ".", "a.b", "(?s).", "(?s:.)a.", "(?i)ab", "(?i:a)b", "(?i)(?-i:a)A",
    "(?is)a.", "x(?i-s:a.)", "(?m)", "a*", "a+", "a?", "a*?", "a+?", "a??",
    "a{3}", "a{2,}", "a{,2}", "a{1,3}", "a{1,3}?", "a{,}", "(?:ab){2}?", "a{0}", "a{0,0}",
    r"\d\D\w\W\s\S", r"\n\t\r\f\v\a", r"\x41\x7f\xFf", r"\101\012", r"\01\0123", r"\.\*\+\?\(\)",
    r"\[\]\{\}\|\\\^\$", r"\-\/\"\'\ \#\~", r"\😀", "é日😀", "]", "}", "a}", "{", "({)", "a|{b",
    "[abc]", "[^abc]", "[a-z]", "[a-zA-Z0-9_]", "[^\\x00-\\x1F\"\\\\]", r"[\d]", r"[\D]", r"[^\D]",
    r"[\w-]", r"[-\w]", r"[\D-]", r"[a-]", "[-a]", "[--a]", "[+--]", r"[\]]", r"[\\]", r"[\^]",
    "[a^]", "[[]", "[$]", "[.*+?(){}|]", r"[\b]", r"[\1\12\123]", r"[\x41-\x5a]", r"[\d\s]",
    r"[\Wa]", r"[^\S\n]", r"[\d\D]", r"[^\d\D]", r"[\w\D]", "[é-ÿ]", "[😀-😂]", "(?i)[^a-z]",
    "^ab$", r"ab\$", "^", "$", "^$", "",
]

# Refused by both, each for its own reason.
REFUSED = [
    "(a", "a)", "*a", "a|*", "+", "?", "(*)", "a{2,1}", r"(a)\1", r"\12", "[b-a]", "[a", "[",
    r"[\d-z]", r"[a-\d]", r"\x4", r"\x", "\\", r"\u0041", r"\U00000041",
    r"\N{DIGIT ONE}", r"\p{L}", r"\b", r"\B", r"\A", r"\Z", r"\q", r"[\q]", r"[\A]", r"\é",
    "a$b", "a^b", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(?P=n)", "(?P<n>a)(?P=n)",
    "(?(1)a|b)", "(?x)a", "(?a)a", "(?u:a)", "(?-i)a", "(?-:a)", "(?)", "(?", "(?<n>a)",
    "(?>a)", "(?i)*", "a{2", "a{x}", "a*{2", "(a)**", "a*{x",
]


@pytest.mark.parametrize("pattern", TEST_REGEXES, ids=range(len(TEST_REGEXES)))
def test_regexes_of_the_other_tests(pattern: str) -> None:
    assert_same_language(pattern)


@pytest.mark.parametrize("pattern", DATASET_REGEXES, ids=range(len(DATASET_REGEXES)))
def test_dataset_regexes(pattern: str) -> None:
    assert_same_language(pattern)
    assert parse(strip_anchors(pattern)) == interegular.parse_pattern(strip_anchors(pattern))


@pytest.mark.parametrize("pattern", DIALECT)
def test_dialect_reads_as_interegular_does(pattern: str) -> None:
    body = strip_anchors(pattern)
    assert parse(body) == interegular.parse_pattern(body)
    assert_same_language(pattern)


@pytest.mark.parametrize("pattern", REFUSED)
def test_refused_by_both(pattern: str) -> None:
    assert theirs(pattern)[0] == "error"
    with pytest.raises(RegexError):
        compile_regex(pattern)


def test_terminals_of_the_embedded_datasets() -> None:
    """Every terminal regex of the schema and Lark items (``regex``, ``also``,
    ``excluding``): what masklab's own compilers write."""
    from toolkit.data.datasets import load_item

    patterns: set[str] = set()
    folder = PROJECT_ROOT / "datasets"
    for path in sorted(folder.glob("schemas/*.json")) + sorted(folder.glob("grammars/*.json")):
        for t in load_item(path).grammar().terminals.values():
            patterns.update((t.regex, *t.also, *t.excluding))
    assert len(patterns) > 100
    bad = [p for p in sorted(patterns) if not _same(ours(p), theirs(p))]
    assert not bad, bad[:5]
    same_tree = [p for p in patterns if parse(strip_anchors(p)) == interegular.parse_pattern(strip_anchors(p))]
    assert len(same_tree) == len(patterns)


@pytest.fixture(scope="module")
def outlines_regexes() -> list[tuple[str, str]]:
    """Outlines' regexes for every 100th MaskBench schema (those it compiles, up to 20 kB)."""
    folder = require_shared("datasets/maskbench")
    oc = pytest.importorskip("outlines_core.json_schema", reason="outlines_core is not installed")
    out = []
    for path in sorted(Path(folder).glob("*.json"))[5::100]:
        schema = json.loads(path.read_text(encoding="utf-8"))["schema"]
        try:
            rx = oc.build_regex_from_schema(json.dumps(schema))
        except Exception:  # outlines refuses some schemas
            continue
        if len(rx) <= 20_000:
            out.append((path.name, rx))
    if not out:
        pytest.skip("outlines_core compiled none of the sampled schemas")
    return out


def test_outlines_regexes(outlines_regexes: list[tuple[str, str]]) -> None:
    for name, rx in outlines_regexes:
        body = strip_anchors(rx)
        assert parse(body) == interegular.parse_pattern(body), name
        a, b = ours(rx), theirs(rx)
        assert a[0] == "dfa" and _same(a, b), name


# ----------------------------------------------------------- random patterns --


@st.composite
def dialect_regexes(draw, depth: int = 3) -> str:
    """Random well-formed patterns that both parsers read alike: no construct from the
    list of differences in :mod:`toolkit.automata._rxparse`."""
    names: list[str] = []  # group names used so far: each only once

    def atom() -> str:
        kind = draw(st.sampled_from(["lit", "esc", "class", "dot"]))
        if kind == "lit":
            return re.escape(draw(st.sampled_from("ab0 -é日😀\"{}],")))
        if kind == "esc":
            return draw(st.sampled_from([r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", r"\n", r"\t", r"\x41", r"\101", r"\.", r"\\", r"\-", r"\{"]))
        if kind == "dot":
            return "."
        items = draw(
            st.lists(
                st.sampled_from(["a", "b", "é", "0-9", "a-f", "\\-", "\\]", "\\\\", "\\n", "\\x20", "\\d", "\\s", "\\w", "[", ".", "^", "😀"]),
                min_size=1,
                max_size=4,
            )
        )
        negated = draw(st.sampled_from(["\\D", "\\W", "\\S", ""]))  # at most one: see the module doc
        body = "".join(items) + negated
        if body.startswith("^"):
            body = "\\" + body
        return ("[^" if draw(st.booleans()) else "[") + body + "]"

    def quant() -> str:
        q = draw(st.sampled_from(["", "", "*", "+", "?", "{2}", "{1,}", "{,2}", "{0,2}", "{1,3}"]))
        return q + ("?" if q and draw(st.booleans()) else "")

    def node(d: int) -> str:
        if d == 0 or draw(st.integers(0, 3)) == 0:
            return atom() + quant()
        kind = draw(st.sampled_from(["cat", "alt", "group", "nc", "named", "flags", "unflag"]))
        if kind == "cat":
            return "".join(node(d - 1) for _ in range(draw(st.integers(2, 3))))
        if kind == "alt":
            return "(?:" + "|".join(node(d - 1) for _ in range(draw(st.integers(2, 3)))) + ")" + quant()
        inner = node(d - 1)
        if kind == "group":
            return "(" + inner + ")" + quant()
        if kind == "nc":
            return "(?:" + inner + ")" + quant()
        if kind == "named":
            names.append(f"g{len(names)}")
            return f"(?P<{names[-1]}>" + inner + ")" + quant()
        if kind == "flags":
            return "(?" + draw(st.sampled_from(["i", "s", "is"])) + ":" + inner + ")" + quant()
        # A removed flag on a group holding one group is a documented difference.
        return "x(?-i:x" + inner + ")" + quant()

    prefix = draw(st.sampled_from(["", "", "(?i)", "(?s)", "(?is)"]))
    return prefix + node(depth)


@settings(max_examples=300, deadline=None)
@given(dialect_regexes())
def test_random_patterns_read_alike(pattern: str) -> None:
    assert parse(pattern) == interegular.parse_pattern(pattern), pattern
    assert_same_language(pattern)


_SOUP = [
    "a", "b", "é", "(", ")", "(?:", "(?s:", "(?i:", "(?-i:", "|", "*", "+", "?", "{2}", "{1,3}",
    "{,2}", "{2,}", "{,}", "{}", "{", "}", "[", "]", "[^", "-", r"\d", r"\D", r"\W", r"\s", ".",
    r"\.", r"\x41", r"\0", r"\01", r"\1", "\\\\", r"\-", r"\]", "^", "$", "??", "*?", "(?=",
    "(?#c)", r"\n", r"\b", "0", ",",
]
# What we refuse although interegular reads it (see the module doc); all but the
# possessive repeats and a stray "{" are errors in Python as well.
_STRICTER = ("'{' that does not start a repeat", "possessive repeats")


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["", "(?i)", "(?s)"]), st.lists(st.sampled_from(_SOUP), min_size=1, max_size=8))
def test_random_token_soup(flags: str, tokens: list[str]) -> None:
    """Any string: RegexError or a tree; where both parsers take it, one language;
    where only one does, a documented difference, with Python ``re`` on our side."""
    pattern = flags + "".join(tokens)
    try:
        parse(strip_anchors(pattern))
        ok = True
    except RegexError as e:
        ok, message = False, str(e)
    theirs_ok = theirs(pattern)[0] != "error"
    if ok and theirs_ok:
        # A removed flag on a group holding one group: interegular forgets the removal.
        assume("(?-i:" not in pattern)
        # "[]]" and "[^]]": a class of "]" for Python (and us); interegular reads an
        # empty class, then "]" (the module doc's difference; both parse it).
        assume("[]" not in pattern and "[^]" not in pattern)
        assert_same_language(pattern)
    elif ok:  # [] first in a class, \0, a comment: Python syntax interegular lacks
        assert _python_accepts(pattern), pattern
    elif theirs_ok:
        assert not _python_accepts(pattern) or message.startswith(_STRICTER), (pattern, message)


# ------------------------------------------------ the documented differences --


@pytest.mark.parametrize(
    "pattern, same_as",
    [
        ("[]a]", "[a\\]]"),  # interegular: an empty class, then "a]"
        ("[^]a]", "[^a\\]]"),
        ("[]-a]", "[\\]-a]"),
        (r"[\D\S]", r"[\d\D]"),  # the union of the complements: any character
        (r"[^\D\S]", r"[^\d\D]"),
        (r"[\D\Wa]", r"[^0-9]"),
        (r"\0", r"\x00"),  # interegular refuses a bare \0
        (r"[\0]", r"\x00"),
        ("a(?#comment)b", "ab"),  # interegular crashes on comments
        ("a(?#x)*", "a*"),  # as in Python: the comment is not there
        ("(?i)(?s)a.", "(?is)a."),  # global flags add up; interegular keeps the last
        ("(?i)(?-i:(a))", "a"),  # interegular drops the removal when it merges the groups
        ("(?i:(?-i:(a)))", "a"),
        ("(?s)(?-s:(.))", "[^\\n]"),
    ],
)
def test_differences_follow_python(pattern: str, same_as: str) -> None:
    a, b = compile_regex(pattern), compile_regex(same_as)
    assert a.start == b.start and np.array_equal(a.transitions, b.transitions), pattern
    assert np.array_equal(a.accepting, b.accepting)
    assert _python_accepts(pattern)


@pytest.mark.parametrize(
    "pattern",
    ["a**", "a*+", "a+?+", "a{2}{3}", "a?*", "a{}", "{2}", "{,}", "[]", "[^]", r"\777",
     r"[\777]", r"[\8]", "(?P<1>a)", "(?P<a>x)(?P<a>y)"],
)
def test_differences_that_are_errors(pattern: str) -> None:
    """Refused here, read by interegular in a way Python does not (or not at all)."""
    assert theirs(pattern)[0] != "error"
    with pytest.raises(RegexError):
        compile_regex(pattern)


# ---------------------------------------------------------------- errors --


@pytest.mark.parametrize(
    "pattern, fragment, offset",
    [
        ("a(?=b)", "(?", 1),
        ("ab(?!b)", "(?", 2),
        ("(?<=a)b", "(?", 0),
        ("a$b", "$", 1),
        ("a^b", "^", 1),
        ("^a$b", "$", 2),  # offsets count in the pattern as given, anchors included
        ("^ab(c", "(", 3),
        (r"(a)\1", r"\1", 3),
        (r"(a)\12", r"\12", 3),
        ("(?P<n>a)(?P=n)", "(?P=", 8),
        ("(a", "(", 0),
        ("((a)", "(", 0),
        ("a)", ")", 1),
        ("a{2,1}", "{2,1}", 1),
        ("[b-a]", "b-a", 1),
        (r"x[\d-z]", r"\d-z", 2),
        ("a**", "*", 2),
        ("*a", "*", 0),
        ("a|?", "?", 2),
        ("a{2}+", "{2}+", 1),
        ("a{x}", "{x}", 1),
        (r"a\b", r"\b", 1),
        (r"\u0041", r"\u", 0),
        (r"ab\q", r"\q", 2),
        (r"\x4g", r"\x4g", 0),
        ("(?x)a", "(?x)", 0),
        ("(?(1)a|b)", "(?(", 0),
        ("(?<n>a)", "(?<", 0),
        ("[a", "[a", 0),
        ("a\\", "\\", 1),
        (r"[\777]", r"\777", 1),
        ("(?P<a>x)(?P<a>y)", "(?P<a>", 8),
        ("a{99999999999}", "99999999999", 1),
    ],
)
def test_errors_name_the_fragment_and_its_offset(pattern: str, fragment: str, offset: int) -> None:
    with pytest.raises(RegexError) as e:
        compile_regex(pattern)
    assert e.value.fragment == fragment
    assert f"(offset {offset})" in str(e.value)
    assert repr(pattern) in str(e.value)


def test_only_regex_errors_escape() -> None:
    for pattern in REFUSED + ["(" * 3000, ")" * 3000, "[" * 3000, "\\" * 3001]:
        with pytest.raises(RegexError):
            parse(strip_anchors(pattern))


# --------------------------------------------------------- depth and size --

DEPTH = 5000


def _depth(tree: Pattern) -> int:
    """How many groups are nested in ``tree`` along its last parts (iteratively)."""
    n = 0
    node = tree
    while True:
        last = node.options[-1].parts[-1] if node.options[-1].parts else None
        while isinstance(last, _Repeated):
            last = last.base
        if not isinstance(last, Pattern):
            return n
        node = last
        n += 1


def test_deep_nesting_is_no_recursion() -> None:
    assert _depth(parse("(a" * DEPTH + ")" * DEPTH)) == DEPTH - 1  # the outermost is the root
    assert _depth(parse("(?:a|(?i:b" * DEPTH + "))*" * DEPTH)) == 2 * DEPTH
    # Groups that hold one group merge (as in interegular): no depth at all.
    assert parse("(" * DEPTH + "a" + ")" * DEPTH) == parse("a")
    assert compile_regex("(" * DEPTH + "a" + ")" * DEPTH).n_states == compile_regex("a").n_states
    with pytest.raises(RegexError, match="offset 4999"):
        parse("(" * DEPTH)


def test_deep_nesting_past_the_builder_is_a_regex_error() -> None:
    # The tree walks recurse per level: past the recursion limit, a RegexError.
    with pytest.raises(RegexError, match="nested too deeply"):
        compile_regex("(a" * DEPTH + ")" * DEPTH)


def _big_regex(n: int) -> str:
    member = r'[ ]?"k{i}"[ ]?:[ ]?(?:"(?:[^"\\\x00-\x1F]|\\["\\/bfnrt])*"|-?(?:0|[1-9]\d*)(?:\.\d+)?|true|null)'
    return r"\{(?:" + "|".join(member.format(i=i) for i in range(n)) + r")*[ ]?\}"


def test_a_megabyte_regex_in_linear_time() -> None:
    big = _big_regex(11_000)
    assert len(big) > 1_000_000
    small = _big_regex(1_375)  # an eighth
    best_small = min(_timed(small)[0] for _ in range(3))
    t, tree = _timed(big)
    members = tree.options[0].parts[1].base.options
    assert len(members) == 11_000
    assert isinstance(members[-1], _Concatenation) and isinstance(members[-1].parts[0], _Repeated)
    assert isinstance(members[-1].parts[0].base, _CharGroup)
    # Linear: eight times the text, about eight times the time (quadratic would be 64).
    assert t < 32 * best_small + 0.5, (t, best_small)
    assert t / len(big) < 5e-6, t  # well under a microsecond a character when unloaded


def _timed(pattern: str) -> tuple[float, Pattern]:
    t = time.perf_counter()
    tree = parse(pattern)
    return time.perf_counter() - t, tree
