"""Strategy ``xgrammar``: byte-level Earley parsing with the adaptive token mask cache.

* **Against naive** on random walks over every small grammar of the llguidance tests
  (the scannerless language is the same, so masks must be identical everywhere:
  ``%ignore`` text at the end, ambiguous lexing, nullable terminals, left recursion),
  with rule inlining off, default and aggressive.
* **The cache itself**: a token inside a rule is accepted context-independently, one
  that leaves the rule is context-dependent, one whose byte after the rule cannot
  follow it anywhere is rejected up front (the follow set); shared terminal states;
  sharing walks across a terminal's states builds the same cache as walking each.
* Rollback / fork / reset / validate; limits (cache bytes, chart items) and options.
* **Llama-3** (shared data): every mask equal to naive's along the valid instances of
  a few MaskBench schemas, and to outlines' on regular ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import get_engine
from strategies.xgrammar import XGrammarCompiled, XGrammarEngine
from strategies.xgrammar.engine import follow_sets, inline_rules
from tests._support.shared import require_shared
from tests.test_llguidance import (
    EOS,
    GRAMMARS,
    LEX,
    REGEXES,
    TOK,
    _as_ids,
    _grammar,
    _ids,
    _row,
    _show,
)
from toolkit.core.errors import LimitExceeded, UnsupportedGrammar
from toolkit.core.protocol import MaskEngine, Matcher
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import load_item
from toolkit.grammar.earley import compile_cfg
from toolkit.grammar.ir import Grammar, RegexText
from toolkit.jsonschema.compiler import grammar_of

NAMES = sorted([*GRAMMARS, "nullable"])
INLINE = {"xg-0": 0, "xg-4": 4, "xg-64": 64}  # inline_max


class _Engines:
    def __init__(self) -> None:
        self.engines: dict[str, MaskEngine] = {"naive": get_engine("naive", LEX)}
        for k, v in INLINE.items():
            self.engines[k] = get_engine("xgrammar", LEX, inline_max=v)
        self.compiled: dict[tuple[str, str, bool], object] = {}

    def matcher(self, key: str, name: str, *, regex: bool = False) -> Matcher:
        e = self.engines[key]
        if (key, name, regex) not in self.compiled:
            spec = (Grammar.from_regex(name) if key == "naive" else RegexText(name)) if regex else _grammar(name)
            self.compiled[(key, name, regex)] = e.compile(spec)
        return e.matcher(self.compiled[(key, name, regex)])


@pytest.fixture(scope="module")
def eng() -> _Engines:
    return _Engines()


def _walk(data, oracle: Matcher, ours: dict[str, Matcher], what: str, steps: int = 14) -> None:
    for n in range(steps):
        want, _ = _row(oracle)
        for k, m in ours.items():
            got, info = _row(m)
            assert np.array_equal(got, want), (what, k, n, _show(_as_ids(got) ^ _as_ids(want)))
            assert not info.sliced
        allowed = _as_ids(want)
        outside = data.draw(st.sampled_from(sorted(set(range(LEX.size)) - allowed)), label="outside")
        assert not any(m.accept_token(outside) for m in ours.values())
        if not allowed:
            return
        t = data.draw(st.sampled_from(sorted(allowed)), label="token")
        assert oracle.accept_token(t) and all(m.accept_token(t) for m in ours.values())
        assert all(m.is_accepting() == oracle.is_accepting() for m in ours.values())
        if t == EOS:
            assert all(m.is_terminated() and _ids(m) == {EOS} for m in ours.values())
            return


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(NAMES))
def test_masks_equal_naive_on_random_walks(eng, data, which: str) -> None:
    _walk(data, eng.matcher("naive", which), {k: eng.matcher(k, which) for k in INLINE}, which)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(REGEXES))
def test_masks_equal_naive_on_regexes(eng, data, which: str) -> None:
    _walk(data, eng.matcher("naive", which, regex=True), {"xg-4": eng.matcher("xg-4", which, regex=True)}, which)


# a choice among 48 literals that share their first two bytes (a tool's name out of
# many), beside a word terminal, nested through the value: the live positions of one
# fill come from many terms of one origin chart, and from terms of several origins
MANY_NAMES = [f"li{a}{b}" for a in "abcdef" for b in "01234567"]
MANY_LITERALS = Grammar.from_lark(
    'start: call (";" call)*\n'
    "call: (" + " | ".join(f'"{n}"' for n in MANY_NAMES) + ') "=" value | WORD ":" value\n'
    "value: /[0-9]+/ | call | \"(\" call \")\"\n"
    "WORD: /l[a-u]+/\n")


@pytest.fixture(scope="module")
def many_literals() -> tuple:
    return tuple((e, e.compile(MANY_LITERALS)) for e in (get_engine("naive", LEX), get_engine("xgrammar", LEX)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_masks_equal_naive_on_a_choice_among_many_literals(many_literals, data) -> None:
    (naive, c_naive), (ours, c_ours) = many_literals
    prefix = [TOK[b"l"], TOK[b"i"]]
    if data.draw(st.booleans(), label="nested"):
        prefix = [TOK[b"l"], TOK[b"i"], TOK[b"a"], TOK[b"0"], TOK[b"="], TOK[b"("], *prefix]
    a, b = naive.matcher(c_naive), ours.matcher(c_ours)
    for t in prefix:
        assert a.accept_token(t) and b.accept_token(t)
    _row(b)
    assert b.last_fill["positions"] >= len(MANY_NAMES)  # every literal is live after "li"
    _walk(data, a, {"xgrammar": b}, "many literals")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(NAMES))
def test_rollback_fork_and_validate_restore_masks_exactly(eng, data, which: str) -> None:
    m = eng.matcher("xg-4", which)
    rows, taken = [_row(m)[0]], []
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        allowed = sorted(_as_ids(rows[-1]) - {EOS})
        if not allowed:
            break
        t = data.draw(st.sampled_from(allowed), label="token")
        assert m.accept_token(t)
        taken.append(t)
        rows.append(_row(m)[0])
    f = m.fork()
    k = data.draw(st.integers(0, len(taken)), label="back")
    m.rollback(k)
    assert np.array_equal(_row(m)[0], rows[len(taken) - k])
    assert np.array_equal(_row(f)[0], rows[-1])  # the fork is independent
    assert m.validate_tokens(taken[len(taken) - k :]) == k
    assert np.array_equal(_row(m)[0], rows[len(taken) - k])
    m.reset()
    assert np.array_equal(_row(m)[0], rows[0])


# ------------------------------------------------------------------ the cache --

# item has two productions and is used twice: its positions pop into either use
LIST = 'start: "[" item ("," item)* "]" | "(" item ")"\nitem: NUMBER | NUMBER "." NUMBER\nNUMBER: /[0-9]+/\n'


def _tok(b: bytes) -> int:
    return LEX.token_bytes.index(b)


def _state_after(c: XGrammarCompiled, name: str, data: bytes) -> int:
    """The DFA state of terminal ``name`` after ``data``."""
    term = c.grammar.terminals[name].dfa()
    s = term.start
    for b in data:
        s = int(term.table[s, term.classes[b]])
    return s


def test_cache_splits_tokens_by_context() -> None:
    e = get_engine("xgrammar", LEX, inline_max=0)
    g = Grammar.from_lark(LIST)
    c = e.compile(g)
    names, dotted = c.symbols["names"], c.symbols["dotted"]
    item, number = names.index("item"), names.index("NUMBER")
    # item -> NUMBER . (the production that ends after NUMBER), NUMBER after "1"
    r = next(i for i, (lhs, sym) in enumerate(dotted) if (lhs, sym) == (item, number) and dotted[i + 1][1] == -1)
    kind, acc, unc = c.tables.position_sets(r, _state_after(c, "NUMBER", b"1"))
    assert kind in ("accepted", "rejected", "bitset") and not set(acc) & set(unc)
    assert {_tok(b"12"), _tok(b"123"), _tok(b"0")} <= set(acc)  # inside the rule
    assert _tok(b"1]") in unc  # leaves item with "]": the context decides
    assert _tok(b"1+") not in unc and _tok(b"1+") not in acc  # "+" never follows item
    assert _tok(b"1.") not in unc and _tok(b"1.") not in acc  # "." is only the other production's
    assert _tok(b"))") not in acc and _tok(b"))") not in unc  # NUMBER must read the first byte
    # the other production reads "1." inside the rule
    r2 = next(i for i, (lhs, sym) in enumerate(dotted) if (lhs, sym) == (item, number) and dotted[i + 1][1] != -1)
    assert _tok(b"1.") in c.tables.position_sets(r2, _state_after(c, "NUMBER", b"1"))[1]
    st_ = c.stats()
    assert st_["positions"] > 0 and st_["inner_states"] > 0 and st_["uncertain_ids"] > 0
    assert st_["cache_bytes"] > 0 and st_["memory_bytes"] >= st_["cache_bytes"]
    with pytest.raises(ValueError):
        c.tables.position_sets(len(dotted) - 1, 1)  # the end of a production: no terminal next
    # the masks built from it are naive's
    n = get_engine("naive", LEX)
    cn = n.compile(g)
    for text in (b"[", b"[12", b"(1", b"[1.5", b"[1,2", b"(1.", b"[1]"):
        a, b = n.matcher(cn), e.matcher(c)
        for ch in text:
            tok = _tok(bytes([ch]))
            assert a.accept_token(tok) and b.accept_token(tok)
        assert _ids(a) == _ids(b), text


def _cache_of(c: XGrammarCompiled) -> dict[tuple[int, int], tuple]:
    """Every position's ``position_sets``."""
    out = {}
    for r, (_, sym) in enumerate(c.symbols["dotted"]):
        s = 1
        while sym >= c.symbols["nonterminals"]:
            try:
                out[(r, s)] = c.tables.position_sets(r, s)
            except ValueError:  # past the terminal's last state
                break
            s += 1
    assert out
    return out


# two objects, each with its own key-excluding string for additional properties:
# their "inside the string" states are alike across the two terminals, their states
# after '"ba' are not ("bad" is excluded in one, "bat" in the other)
NESTED = {"type": "object", "properties": {"bad": {"type": "object", "properties": {"bat": {"type": "integer"}}}}}


# free text until a trigger, a tagged call, and free text to the end (a tool-calling
# format): the last text's positions end the grammar, nothing may follow them
TOOL_TEXT = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<t>"], "excludes": ["</x>"], "at_least_one": False,
    "stop_after_first": False,
    "tags": [{"type": "tag", "begin": "<t>", "content": {"type": "json_schema", "json_schema": NESTED},
              "end": "</t>"}]}}


def _shared_walks_grammar(name: str) -> Grammar:
    from toolkit.grammar.structural_tag import read_structural_tag

    if name == "nested-objects":
        return Grammar.from_json_schema(NESTED, whitespace="flexible")
    return read_structural_tag(TOOL_TEXT) if name == "tool-text" else _grammar(name)


def test_shared_walks_build_the_same_cache() -> None:
    shared = twins = inners = ended = 0
    for name in [*NAMES, "nested-objects", "tool-text"]:
        g = _shared_walks_grammar(name)
        on = get_engine("xgrammar", LEX).compile(g)
        off = get_engine("xgrammar", LEX, share_walks=False).compile(g)
        a, b = on.stats(), off.stats()
        assert b["shared_walks"] == 0 and a["frontier_nodes"] <= b["frontier_nodes"], name  # shared, not stored twice
        assert b["twin_positions"] == 0 and b["shared_inners"] == 0 and b["ended_positions"] == 0, name
        assert _cache_of(on) == _cache_of(off), name
        shared += a["shared_walks"]
        twins += a["twin_positions"]
        inners += a["shared_inners"]
        ended += a["ended_positions"]
    # each kind of sharing happens: the comparison means something
    assert shared > 0 and twins > 0 and inners > 0 and ended > 0


def test_free_text_ending_a_tool_format_walks_nothing_below_its_frontier_on_llama3() -> None:
    """The positions of the text that ends a tool-calling format (the frontier: every
    token longer than a byte) take no walks, and the masks along every transcript of a
    real setup are those of the cache built with the walks and our llguidance's, on
    Llama 3.  Rows are filled over garbage: the free text's S, stored as its rejected
    ids, is the first row written over it."""
    from toolkit.core import bitmask as bm
    from toolkit.core.forced import canonical_tokens

    llama3 = load_vocab(f"llama3:{require_shared('tokenizers/llama-3/tokenizer.model')}")
    item = load_item("datasets/tools/tools-qwen_3-1.json")
    engines = (get_engine("xgrammar", llama3), get_engine("xgrammar", llama3, share_walks=False),
               get_engine("llguidance", llama3))
    compiled = [e.compile(item.source()) for e in engines]
    assert compiled[0].stats()["ended_positions"] > 0 and compiled[1].stats()["ended_positions"] == 0
    assert compiled[0].stats()["inner_rejected"] > 0
    rows = bm.allocate(llama3.size, 3)
    steps = 0
    for case in item.cases:
        ms = [e.matcher(c) for e, c in zip(engines, compiled, strict=True)]
        for t in [*canonical_tokens(llama3, case.text.encode()), llama3.eos_ids[0]]:
            rows[:] = 0x5A5A5A5A
            for i, m in enumerate(ms):
                assert m.fill_bitmask(rows, i).allowed == bm.popcount(rows[i]), (case.description, steps, i)
            assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0], rows[2]), (case.description, steps)
            steps += 1
            accepted = [m.accept_token(t) for m in ms]
            assert len(set(accepted)) == 1, (case.description, steps, accepted)
            if not accepted[0]:
                break
    assert steps > 250  # the 8 transcripts, the valid ones to EOS


def test_inlining_substitutes_single_productions_and_stops_at_cycles() -> None:
    # 0 -> 1 ; 1 -> 2 3 ; 2 -> 4 ; 4 -> 2 10 | 11 ; 3 -> 1 | 11   (10, 11 terminals)
    rules = {0: [(1,)], 1: [(2, 3)], 2: [(4,)], 4: [(2, 10), (11,)], 3: [(1,), (11,)]}
    # 2 -> 4 is inlined (4 keeps its two productions); 1 -> 4 3 is short, inlined too;
    # 3 and 4 have two productions each and stay
    assert inline_rules(rules, 0, 4) == {0: [(4, 3)], 4: [(4, 10), (11,)], 3: [(4, 3), (11,)]}
    # with inline_max=0 only rules used once go: none here
    assert inline_rules(rules, 0, 0) == rules
    # a cycle of single productions (1 -> 2 "x", 2 -> 1 "y" | via 0) keeps a rule
    cyc = {0: [(1,), (11,)], 1: [(2, 10)], 2: [(0, 11)]}
    out = inline_rules(cyc, 0, 4)
    assert out == {0: [(0, 11, 10), (11,)]}


def test_follow_sets_by_hand() -> None:
    g = Grammar.from_lark('start: a "x" | b "y"\na: "p" b |\nb: c*\nc: "q"\n')
    cfg = compile_cfg(g)
    rules: dict[int, list] = {a: [] for a in range(cfg.n_nonterminals)}
    for lhs, rhs in cfg.prods:
        rules[lhs].append(rhs)
    fol = follow_sets(rules, cfg, {i: bool(v) for i, v in enumerate(cfg.nullable)})
    got = {str(cfg.names[a]): bytes(np.flatnonzero(v).tolist()) for a, v in fol.items()}
    # b ends a's first production and a is nullable, so b is followed by what follows
    # a ("x") and by "y"; c* is followed by another c ("q") or by what follows b
    assert got == {"start": b"", "a": b"x", "b": b"xy", "c": b"qxy", "__b_star_0": b"qxy", "%start": b""}


def test_compile_inputs_stats_and_describe() -> None:
    e = get_engine("xgrammar", LEX)
    assert isinstance(e, XGrammarEngine) and e.describe()["options"]["inline_max"] == 4
    for spec, kind in ((Grammar.from_lark(LIST), "grammar"), (RegexText("[a-c]+"), "regex"),
                       ({"type": "array", "items": {"type": "integer"}}, "json_schema")):
        c = e.compile(spec)
        assert c.kind == kind and c.memory_bytes() > 0 and "cache_s" in c.stats()
        assert "positions=" in repr(c)
    with pytest.raises(UnsupportedGrammar):
        e.compile(3.5)


@pytest.mark.parametrize("options", [{"whitespace": "loose"}, {"inline_max": -1}, {"max_items": 0},
                                     {"max_cache_bytes": 0}, {"max_items": True}, {"share_walks": 1}])
def test_invalid_options_raise_value_error(options) -> None:
    with pytest.raises(ValueError):
        get_engine("xgrammar", LEX, **options)


def test_limits_are_errors() -> None:
    g = Grammar.from_lark(GRAMMARS["json"])
    with pytest.raises(LimitExceeded, match="max_cache_bytes"):
        get_engine("xgrammar", LEX, max_cache_bytes=1000).compile(g)
    # a grammar whose charts grow with the input: "a"* read as left-nested pairs
    amb = Grammar.from_lark('start: x\nx: x x | "a"\n')
    e = get_engine("xgrammar", LEX, max_items=40)
    m = e.matcher(e.compile(amb))
    a = _tok(b"a")
    n = 0
    while m.error is None and n < 60:
        m.accept_token(a)
        n += 1
    assert m.error is not None and "max_items" in m.error
    assert _ids(m) == {EOS}  # the sticky error state: EOS only, then termination
    assert m.accept_token(EOS) and m.is_terminated()


# ------------------------------------------------------------------- Llama-3 --


@pytest.fixture(scope="module")
def llama3() -> Vocabulary:
    return load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))


MASKBENCH = ("BFCL_java_13", "Github_easy---o1114", "Kubernetes---kb_100_Normalized", "MCPspec---InitializeResult")


@pytest.mark.parametrize("name", MASKBENCH)
def test_llama3_maskbench_masks_equal_naive(llama3: Vocabulary, name: str) -> None:
    item = load_item(require_shared(f"datasets/maskbench/{name}.json"))
    g = item.grammar()
    ours, naive = get_engine("xgrammar", llama3), get_engine("naive", llama3)
    a, b = ours.compile(g), naive.compile(g)
    steps = 0
    case = next(c for c in item.cases if c.valid)
    ma, mb = ours.matcher(a), naive.matcher(b)
    for t in [*llama3.encode(case.text), llama3.eos_ids[0]]:
        (ra, _), (rb, _) = _row(ma, llama3), _row(mb, llama3)
        assert np.array_equal(ra, rb), (name, steps, _show(_as_ids(ra, llama3) ^ _as_ids(rb, llama3), llama3)[:8])
        assert ma.accept_token(t) and mb.accept_token(t), (name, llama3.token_bytes[t])
        steps += 1
    assert steps >= 10 and ma.is_terminated()


# bounded repetitions longer than LEX's longest token (6 bytes): their counter states
# far from the bound read every token alike and share their cache entries
BOUNDED = {
    "regex": RegexText(r"[a-e ]{3,20}\."),
    "lark": 'start: "[" ITEM ("," ITEM)* "]"\nITEM: /[0-9]{1,10}/\n',
    "schema": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 12}, "maxItems": 3},
}


def _bounded(which: str):
    spec = BOUNDED[which]
    return Grammar.from_lark(spec) if which == "lark" else spec


@pytest.fixture(scope="module")
def bounded() -> dict:
    out = {}
    naive = get_engine("naive", LEX)
    for which in BOUNDED:
        on = get_engine("xgrammar", LEX).compile(_bounded(which))
        off = get_engine("xgrammar", LEX, share_walks=False).compile(_bounded(which))
        out[which] = (on, off, naive.compile(grammar_of(_bounded(which), whitespace="flexible", engine="naive")[0]))
    return out


@pytest.mark.parametrize("which", sorted(BOUNDED))
def test_states_no_token_tells_apart_share_the_cache(bounded, which: str) -> None:
    on, off, _ = bounded[which]
    assert on.stats()["merged_positions"] > 0 and off.stats()["merged_positions"] == 0
    assert on.stats()["inner_states"] < off.stats()["inner_states"]
    assert _cache_of(on) == _cache_of(off)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(sorted(BOUNDED)))
def test_bounded_repetitions_mask_like_naive(bounded, data, which: str) -> None:
    on, off, nv = bounded[which]
    ours = {"on": get_engine("xgrammar", LEX).matcher(on), "off": get_engine("xgrammar", LEX).matcher(off)}
    _walk(data, get_engine("naive", LEX).matcher(nv), ours, which, steps=20)


def test_states_alike_in_two_terminals_share_only_when_they_read_every_token_alike() -> None:
    # tokens that run from a key's letters into its closing quote tell the state after
    # '"' of the string excluding "bad" from the one excluding "bat"; the states
    # inside an extra key (after '"x') read every token alike and share one Inner
    words = [b"{", b"}", b":", b",", b" ", b'"', b"1", b"b", b"a", b"d", b"t", b"x", b'"b', b"ad", b'ad"', b'at"',
             b'bad"', b'bat"', b'x"', b'"x', b'":', b'x":']
    vocab = Vocabulary.from_tokens([b"", *words], eos_ids=(0,), special_tokens={0: "</s>"})
    on = get_engine("xgrammar", vocab).compile(NESTED)
    off = get_engine("xgrammar", vocab, share_walks=False).compile(NESTED)
    assert on.stats()["shared_inners"] > 0
    assert _cache_of(on) == _cache_of(off)


@pytest.mark.parametrize("name", ["Glaiveai2K---calculate_area_b345a52d", "Github_easy---o1114", "maxLength", "nested"])
def test_llama3_shared_walks_build_the_same_cache(llama3: Vocabulary, name: str) -> None:
    # schemas with key-excluding strings (additional properties): ~100 states that
    # mostly go to one "inside the string" state, the case the walk sharing is for;
    # and a string longer than the longest token, whose counter states merge
    if name == "maxLength":
        spec = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 150}}, "required": ["s"]}
    elif name == "nested":  # Llama-3 has tokens that tell '"ba' of one object from the other's
        spec = NESTED
    else:
        spec = load_item(require_shared(f"datasets/maskbench/{name}.json")).spec
    on = get_engine("xgrammar", llama3).compile(spec)
    off = get_engine("xgrammar", llama3, share_walks=False).compile(spec)
    assert on.stats()["shared_walks"] > 1000
    assert (on.stats()["merged_positions"] > 10) == (name == "maxLength")
    assert on.stats()["twin_positions"] > 0 or name in ("maxLength", "nested")
    # states alike across terminals: every object's key-excluding string's inside
    assert (on.stats()["shared_inners"] > 0) == (name != "maxLength")
    assert _cache_of(on) == _cache_of(off)


def _tables_args() -> dict:
    """A valid ``Tables`` input: start -> "a" (dotted rules 0: before "a", 1: the end)."""
    dfa = Grammar.from_regex("a").terminals
    d = next(iter(dfa.values())).dfa()
    return {"dr_sym": [1, -1], "dr_lhs": [0, 0], "nt_off": [0, 1], "nt_drs": [0], "nullable": [0, 0], "n_nt": 1,
            "start_nt": 0, "terminals": [(d.table, d.classes, d.accepting, d.start)],
            "follow": np.zeros((1, 256), dtype=bool)}


@pytest.mark.parametrize(("change", "words"), [
    ({"dr_sym": [1, 0]}, "not closed"),
    ({"dr_sym": [5, -1]}, "unknown symbol"),
    ({"dr_lhs": [0, 3]}, "lhs"),
    ({"start_nt": 2}, "start"),
    ({"nt_off": [0, 2]}, "nt_off"),
    ({"nt_drs": [7]}, "nt_drs"),
    ({"nullable": [0]}, "inconsistent"),
])
def test_tables_refuse_inconsistent_input(change: dict, words: str) -> None:
    from strategies.xgrammar._pda import Parser
    from strategies.xgrammar._tables import Tables

    args = _tables_args()
    max_items = 10
    Tables(*args.values(), max_items=max_items)  # the valid one builds
    args.update(change)
    with pytest.raises(ValueError, match=words):
        Tables(*args.values(), max_items=max_items)
    # a Tables whose cache build failed is refused by fill, and cannot be rebuilt
    e = get_engine("xgrammar", LEX)
    t = Tables(*_tables_args().values(), max_items=max_items)
    with pytest.raises(LimitExceeded):
        t.build_cache(e.trie, e._blob, e._offsets, e._text_words, max_cache_bytes=1)
    with pytest.raises(RuntimeError, match="no cache"):
        Parser(t).fill(np.zeros(len(e._text_words), dtype=np.uint32))
    with pytest.raises(RuntimeError, match="runs once"):
        t.build_cache(e.trie, e._blob, e._offsets, e._text_words, max_cache_bytes=1 << 30)


def test_inlining_a_long_chain_of_single_rules_needs_no_recursion() -> None:
    """MaskBench's Kubernetes---kb_1161_Normalized nests single-production rules past
    Python's recursion limit; the inliner walks them on a stack of its own."""
    from strategies.xgrammar.engine import inline_rules

    t, u = 10**6, 10**6 + 1  # two terminals
    chain = {i: [(i + 1, t)] for i in range(20_000)}
    chain[20_000] = [(t,), (u,)]
    out = inline_rules(chain, 0, 4)
    assert set(out) == {0, 20_000} and out[0] == [(20_000, *[t] * 20_000)]
