"""Strategy ``glr``: LR rows with a graph-structured stack under llguidance's lexer.

Its masks are held to our ``llguidance``'s bit for bit (the same lexing, another
parser): on grammars whose LR tables have conflicts (ambiguity, lexemes that two
terminals accept at once, ε-rules with hidden left recursion), under LALR(1) and LR(0)
tables, and on MaskBench schemas with Llama 3.  The conformance suite holds it to the
rest of the contract.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from strategies import get_engine
from tests._support.shared import require_shared
from toolkit.core import bitmask as bm
from toolkit.core.errors import LimitExceeded
from toolkit.core.vocab import Vocabulary, load_vocab
from toolkit.data.datasets import iter_items
from toolkit.grammar.ir import Grammar

TOKENS = [b"</s>", *(bytes([b]) for b in b"abcxyz+*()01 ,[]"), b"ab", b"if", b"ifx", b"x+", b"(a", b"1+1", b"a b",
          b" if", b"+(", b"))", b"xyz", b"00"]
VOCAB = Vocabulary.from_tokens(TOKENS, eos_ids=[0], special_tokens={0: "</s>"}, name="glr")

GRAMMARS = {
    # ambiguous: every cell of + and * conflicts
    "ambiguous": 'start: e\ne: e "+" e | e "*" e | "(" e ")" | NUM\nNUM: /[01]+/\n',
    # the keyword "if" and an identifier both accept "if": two lexemes at once
    "keyword": 'start: (stmt " "?)+\nstmt: "if" ID | ID\nID: /[a-z]+/\n',
    # ε-rules and hidden left recursion: s -> x s "b" | "c" with x nullable
    "nullable": 'start: s\ns: x s "b" | "c" | y "a"\nx: "x"?\ny: x*\n',
    # a list with optional items and separators (LR conflicts on ","), %ignore
    "list": 'start: "[" [item ("," item?)*] "]"\nitem: /[abc]+/ | "1" | start\n%ignore " "\n',
    # not LALR(1): the merged state of E -> e . and F -> e . reduces both on c and d
    "lr1": 'start: "a" e "c" | "a" f "x" | "b" f "c" | "b" e "x"\ne: "z"\nf: "z"\n',
}


def _row(m, vocab: Vocabulary = VOCAB) -> np.ndarray:
    """``m``'s mask, filled over a row of ones: a word the fill does not write (``glr``
    copies its first row over the old words instead of zeroing them) shows as a
    difference from ``llguidance``'s."""
    row = bm.allocate(vocab.size)
    row.fill(-1)
    m.fill_bitmask(row)
    return row[0].copy()


def _llama3_schema(name: str):
    """Llama 3, MaskBench schema ``name``, its grammar compiled by ``glr`` (the store off:
    every mask from the tables) and the ``llguidance`` engine to hold it to."""
    vocab = load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))
    item = next(iter_items(require_shared(f"datasets/maskbench/{name}.json")))
    g = Grammar.from_json_schema(item.spec)
    ours, ref = get_engine("glr", vocab, mask_store_bytes=0), get_engine("llguidance", vocab)
    return vocab, item, g, ours, ours.compile(g), ref


def _random_walks(ours, c, ref, rc, vocab: Vocabulary, walks: int, steps: int, choose, after=None) -> None:
    """``walks`` walks of up to ``steps`` tokens, each chosen by ``choose(allowed ids)``
    from our ``llguidance``'s mask, ``ours``' mask equal to it at every step (``after``:
    called with our matcher after each token)."""
    for walk in range(walks):
        m, r = ours.matcher(c), ref.matcher(rc)
        for step in range(steps):
            want = _row(r, vocab)
            assert np.array_equal(_row(m, vocab), want), (walk, step)
            ids = bm.allowed_ids(want, vocab.size).tolist()
            if not ids:
                break
            t = choose(ids)
            assert m.accept_token(t) and r.accept_token(t), (walk, step)
            if after is not None:
                after(m)
            if m.is_terminated():
                break


@pytest.mark.parametrize("tables", ["ahead", "lazy", "off"])
@pytest.mark.parametrize("lookahead", [1, 0])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_equal_llguidance_on_grammars_with_conflicts(name: str, lookahead: int, tables: str) -> None:
    """Walks of matchers of one compiled grammar, so later ones take masks from the store
    earlier ones filled (keyed by what each fill read of the stack), with rollbacks; the
    masks made from the mask tables (made ahead, made when first met) or walked."""
    g = Grammar.from_lark(GRAMMARS[name])
    ours = get_engine("glr", VOCAB, lookahead=lookahead, mask_tables=tables, mask_store_bytes=64 << 20,
                      store_min_rows=0)  # (store every mask)
    ref = get_engine("llguidance", VOCAB)
    c, rc = ours.compile(g), ref.compile(g)
    rng = random.Random(f"{name}/{lookahead}")
    widest = 0
    for walk in range(40):
        m, r = ours.matcher(c), ref.matcher(rc)
        for step in range(14):
            want = _row(r)
            assert np.array_equal(_row(m), want), (name, walk, step)
            assert m.is_accepting() == r.is_accepting(), (name, walk, step)
            ids = bm.allowed_ids(want, VOCAB.size).tolist()
            if not ids:
                break
            t = rng.choice(ids)
            assert m.accept_token(t) and r.accept_token(t)
            for k in range(m.parser.num_rows):  # parallel stacks: two tops, or a top over two nodes
                tops = [n for n in m.parser.row_nodes(k) if not n[2]]
                widest = max(widest, len(tops), *(len(below) for _, below, _ in tops))
            if m.is_terminated():
                break
            if rng.random() < 0.15 and m.num_tokens:
                k = rng.randint(1, m.num_tokens)
                m.rollback(k)
                r.rollback(k)
    assert c.tables.store_hits > 0, "no mask came from the store: it was not exercised"
    st = c.stats()
    if tables == "off":
        assert st["contexts"] == 0 and st["table_fills"] == 0
    else:
        assert st["table_fills"] > 0 and st["table_walks"] == 0, st
        assert (st["ahead_nodes"] > 0) == (tables == "ahead"), st
    if name in ("ambiguous", "keyword"):  # (lr1's conflict lives inside one scan: both reduce, one shifts)
        assert widest >= 2, "the walks never had two stacks: the graph-structured stack was not exercised"


@pytest.mark.parametrize("tables", ["ahead", "lazy"])
def test_lexer_states_no_token_tells_apart_share_one_root(tables: str) -> None:
    """Counted repeats (a string of 2 to 40 letters, a number of up to 30 digits) give
    a lexer state per position; the positions farther than the longest token (4 bytes
    here) from either end of the count share one root context (``roots_shared``), and
    every mask of random walks into and out of them equals our ``llguidance``'s."""
    vocab = Vocabulary.from_tokens([*TOKENS, b'"', b'"a', b'c"', b'abca', b'bc",', b"0101"], eos_ids=[0],
                                   special_tokens={0: "</s>"}, name="glr-counts")
    g = Grammar.from_lark('start: "[" item ("," item)* "]"\nitem: /"[abc]{2,40}"/ | /[01]{1,30}/\n')
    ours, ref = get_engine("glr", vocab, mask_tables=tables), get_engine("llguidance", vocab)
    c, rc = ours.compile(g), ref.compile(g)
    rng = random.Random(tables)
    shared_roots = set()

    def deeper(ids: list[int]) -> int:  # (mostly deeper into the count)
        letters = [t for t in ids if vocab.token_bytes[t].strip(b"abc01") == b""]
        return rng.choice(letters if letters and rng.random() < 0.9 else ids)

    _random_walks(ours, c, ref, rc, vocab, 30, 120, deeper,
                  lambda m: shared_roots.add((m.parser.ls, c.tables.root(m.parser.ls))))
    assert c.tables.horizon == 6  # (the longest token's bytes and two)
    assert c.stats()["roots_shared"] > 0
    by_root: dict[int | None, set[int]] = {}
    for ls, root in shared_roots:
        by_root.setdefault(root, set()).add(ls)
    assert max(len(v) for k, v in by_root.items() if k is not None) >= 10  # (ten positions or more, one root)


@pytest.mark.parametrize("tables", ["ahead", "lazy"])
def test_groups_of_one_node_list_share_their_children(tables: str) -> None:
    """A child context is the walk of its group's nodes from the state after the
    boundary, so groups with one node list (the tokens after a closing quote, whichever
    string it closes) share the first one's nodes and children (``groups_shared``):
    every mask of random walks through strings of two lexemes, keys and numbers
    equals our ``llguidance``'s."""
    vocab = Vocabulary.from_tokens([*TOKENS, b'"', b'"a', b'c"', b'z"', b'",', b'"]', b'",[', b'0,', b'1]'],
                                   eos_ids=[0], special_tokens={0: "</s>"}, name="glr-groups")
    g = Grammar.from_lark('start: "[" item ("," item)* "]"\nitem: /"[abc]+"/ | /"[xyz]+"/ | /[01]+/ | start\n')
    ours, ref = get_engine("glr", vocab, mask_tables=tables), get_engine("llguidance", vocab)
    c, rc = ours.compile(g), ref.compile(g)
    _random_walks(ours, c, ref, rc, vocab, 40, 60, random.Random(tables).choice)
    st = c.stats()
    assert st["groups_shared"] > 0, st


@pytest.mark.shared
def test_groups_sharing_keeps_a_schema_to_few_contexts_and_exact() -> None:
    """On a MaskBench schema of string properties with Llama 3 the making ahead shares
    the groups after a string's end: it makes about a thousand contexts (36,000 when
    each group had children of its own) and completes, and every mask of the schema's
    valid instance equals our ``llguidance``'s."""
    vocab, item, g, ours, c, ref = _llama3_schema("Kubernetes---kb_836_Normalized")
    st = c.stats()
    assert c.ahead_complete and st["contexts"] < 5000 and st["groups_shared"] > st["context_groups"] // 2, st
    m, r = ours.matcher(c), ref.matcher(ref.compile(g))
    text = next(x.text for x in item.cases if x.valid)
    for i, t in enumerate([*vocab.encode(text), vocab.eos_ids[0]]):
        assert np.array_equal(_row(m, vocab), _row(r, vocab)), i
        assert m.accept_token(t) and r.accept_token(t), i
    assert c.stats()["contexts"] == st["contexts"]  # (every mask from the tables made ahead)


def test_the_mask_store_is_an_option_and_changes_no_mask() -> None:
    """``mask_store_bytes=0`` stores no mask; a store too small for a mask stores none;
    ``store_min_rows`` 0 stores every mask, the default only those that took many rows
    (none on this small grammar); the masks are the same."""
    g = Grammar.from_lark(GRAMMARS["list"])
    walk = [TOKENS.index(t) for t in (b"[", b"a", b",", b" ", b"[", b"1", b"]", b",", b"ab", b"]")]
    rows = {}
    for size in (0, 10, 64 << 20, -1):
        eng = get_engine("glr", VOCAB, mask_store_bytes=abs(size) if size >= 0 else 64 << 20,
                         store_min_rows=0 if size >= 0 else 8)
        c = eng.compile(g)
        out = []
        for _ in range(2):
            m = eng.matcher(c)
            for t in walk:
                out.append(_row(m).tobytes())
                assert m.accept_token(t)
        rows[size] = out
        st = c.stats()
        assert (st["store_entries"] > 0 and st["store_hits"] > 0) == (size > 10), (size, st)
    assert rows[0] == rows[10] == rows[64 << 20] == rows[-1]
    with pytest.raises(ValueError):
        get_engine("glr", VOCAB, mask_store_bytes=-1)


def test_mask_tables_made_ahead_hold_the_walks_masks() -> None:
    """Made ahead, the tables hold a context per lexer state a mask can start in and per
    boundary after it: a walk with the store off takes every mask from them and makes no
    root (a boundary two lexemes deep gets its child when first met), its groups followed
    on the stack's linear top without rows; the counts are the rows' bits."""
    g = Grammar.from_lark(GRAMMARS["list"])
    eng = get_engine("glr", VOCAB, mask_store_bytes=0)
    ref = get_engine("llguidance", VOCAB)
    c, rc = eng.compile(g), ref.compile(g)
    assert c.ahead_complete and c.timings["ahead"] > 0
    made, roots = c.stats()["contexts"], c.tables.roots
    assert made > 3
    m, r = eng.matcher(c), ref.matcher(rc)
    walk = [TOKENS.index(t) for t in (b"[", b"a", b",", b" ", b"[", b"1", b"]", b",", b"ab", b"]")]
    for t in [*walk, 0]:
        row = bm.allocate(VOCAB.size)
        info = m.fill_bitmask(row)
        assert np.array_equal(row[0], _row(r)) and info.allowed == bm.popcount(row[0])
        assert m.accept_token(t) and r.accept_token(t)
    st = c.stats()
    assert c.tables.roots == roots, "a mask made a root context: the making ahead missed it"
    assert st["contexts"] >= made and c.tables.cx_fast > 0  # (a group two lexemes deep: made when first met)
    assert st["table_fills"] == len(walk) + 1 and st["table_rows"] >= len(walk)  # (the last: no lexeme, no row)


def test_the_exploration_makes_the_roots_where_several_stacks_start_a_lexeme() -> None:
    """A key both lexemes accept (``"ab"``) leaves two stacks whose next lexemes differ (a
    number, a string): their row starts in the union of the two, which no LR state's
    candidates give, so the making ahead lacks its root and the first mask there makes
    it.  The exploration of the parser's configurations finds that row at compile and
    makes the root; the masks are the same with and without it, and llguidance's."""
    vocab = Vocabulary.from_tokens([b"</s>", b'"', b"a", b"b", b"c", b"d", b'"ab"', b":", b"1", b"12", b'"c', b'd"',
                                    b'ab"', b'"a'], eos_ids=[0], special_tokens={0: "</s>"}, name="glr-explore")
    g = Grammar.from_lark('start: p | q\np: KEY ":" NUM\nq: PAIR ":" STR\nKEY: /"[a-d]+"/\n'
                          'PAIR: /"(ab|cd)"/\nNUM: /[0-9]+/\nSTR: /"[a-d]*"/\n')
    ref = get_engine("llguidance", vocab)
    rc = ref.compile(g)
    walk = [vocab.token_bytes.index(t) for t in (b'"ab"', b":", b'"c', b'd"')]
    roots = {}
    for configs in (0, 4096):
        eng = get_engine("glr", vocab, mask_store_bytes=0, explore_configs=configs)
        c = eng.compile(g)
        assert (c.explored[1] > 0) == (configs > 0) and (c.timings.get("explore", 0) > 0) == (configs > 0)
        before = c.tables.roots
        m, r = eng.matcher(c), ref.matcher(rc)
        for t in [*walk, 0]:
            assert np.array_equal(_row(m, vocab), _row(r, vocab))
            assert m.accept_token(t) and r.accept_token(t)
        roots[configs] = c.tables.roots - before
    assert roots[0] > 0 and roots[4096] == 0, roots
    with pytest.raises(ValueError, match="explore_configs"):
        get_engine("glr", vocab, explore_configs=-1)


def test_a_fill_repeating_the_last_ones_state_copies_its_mask() -> None:
    """Inside a string every token leaves the lexer state and the rows as they were: the
    second fill there keeps its mask and the later ones copy it (``cache_hits``), the
    same masks as without the cache and as llguidance's, and no copy outlives its rows:
    after a rollback, a fork, or a new row with the same lexer state the masks still
    agree."""
    vocab = Vocabulary.from_tokens([b"</s>", b"{", b"}", b":", b'"', b"a", b"b", b" ", b'a"', b'",', b'"}'],
                                   eos_ids=[0], special_tokens={0: "</s>"}, name="glr-cache")
    # a key and a value are one lexeme (one lexer state inside them), their masks differ
    g = Grammar.from_lark('start: "{" pair ("," pair)* "}"\npair: STR ":" STR\nSTR: /"[ab ]*"/\n')
    ref = get_engine("llguidance", vocab)
    rc = ref.compile(g)
    tok = {t: vocab.token_bytes.index(t) for t in vocab.token_bytes}
    walk = [b"{", b'"', b"a", b"b", b"a", b'"', b":", b'"', b"a", b"b", b'",', b'"', b"b", b'a"', b":", b'"', b"a",
            b'"}']
    hits = {}
    for cache in (True, False):
        eng = get_engine("glr", vocab, mask_store_bytes=0, mask_cache=cache)
        c = eng.compile(g)
        m, r = eng.matcher(c), ref.matcher(rc)
        for i, t in enumerate(walk):
            assert np.array_equal(_row(m, vocab), _row(r, vocab)), (cache, i)
            if i == 9:  # back out of the second string and into it again, on a fork too
                m.rollback(2)
                r.rollback(2)
                f, fr = m.fork(), r.fork()
                for u in (b'"', b"b", b"b", b'a"'):
                    assert np.array_equal(_row(f, vocab), _row(fr, vocab)), (cache, u)
                    assert f.accept_token(tok[u]) and fr.accept_token(tok[u])
                for u in (b'"', b"a"):
                    assert np.array_equal(_row(m, vocab), _row(r, vocab)), (cache, u)
                    assert m.accept_token(tok[u]) and r.accept_token(tok[u])
                assert np.array_equal(_row(m, vocab), _row(r, vocab)), (cache, i)
            assert m.accept_token(tok[t]) and r.accept_token(tok[t]), (cache, i)
        hits[cache] = m.parser.cache_hits
    assert hits[True] >= 4 and hits[False] == 0, hits


def test_mask_tables_past_max_table_bytes_walk_the_same_masks() -> None:
    """Tables that reach ``max_table_bytes`` stop growing and the masks past them are
    walked (counted), the same masks; ``mask_tables`` is checked."""
    g = Grammar.from_lark(GRAMMARS["keyword"])
    full, tight = get_engine("glr", VOCAB, mask_store_bytes=0), None
    need = full.compile(g).tables.lr_bytes
    tight = get_engine("glr", VOCAB, mask_store_bytes=0, max_table_bytes=need + 64, mask_tables="lazy")
    a, b = full.matcher(full.compile(g)), tight.matcher(ct := tight.compile(g))
    for t in (b"if", b" ", b"x", b"y", b" ", b"ifx", b" ", b"if", b"x"):
        assert np.array_equal(_row(a), _row(b))
        assert a.accept_token(TOKENS.index(t)) and b.accept_token(TOKENS.index(t))
    assert ct.stats()["table_walks"] > 0
    with pytest.raises(ValueError, match="mask_tables"):
        get_engine("glr", VOCAB, mask_tables="eager")


def test_conflicts_are_kept_and_counted() -> None:
    ours = get_engine("glr", VOCAB)
    assert ours.compile(Grammar.from_lark(GRAMMARS["ambiguous"])).stats()["conflicts"] >= 4
    assert ours.compile(Grammar.from_lark('start: "a" "b"\n')).stats()["conflicts"] == 0
    lr1 = ours.compile(Grammar.from_lark(GRAMMARS["lr1"])).stats()
    assert lr1["conflicts"] == 2 and lr1["lr_states"] > 0
    lr0 = get_engine("glr", VOCAB, lookahead=0).compile(Grammar.from_lark(GRAMMARS["list"])).stats()
    assert lr0["conflicts"] > ours.compile(Grammar.from_lark(GRAMMARS["list"])).stats()["conflicts"]


def test_limits_are_errors_naming_their_option() -> None:
    g = Grammar.from_lark(GRAMMARS["ambiguous"])
    with pytest.raises(LimitExceeded, match="max_states"):
        get_engine("glr", VOCAB, max_states=5).compile(g)
    with pytest.raises(LimitExceeded, match="max_table_bytes"):
        get_engine("glr", VOCAB, max_table_bytes=100).compile(g)
    for bad in ({"lookahead": 2}, {"max_row_items": 0}, {"max_states": -1}, {"mask_cache": "yes"},
                {"store_min_rows": -1}, {"ahead_nodes": 0}):
        with pytest.raises(ValueError):
            get_engine("glr", VOCAB, **bad)
    # an ambiguous sum keeps every parse: the level a scan reduces in grows past the limit
    eng = get_engine("glr", VOCAB, max_row_items=20)
    m = eng.matcher(eng.compile(g))
    one, plus = TOKENS.index(b"1"), TOKENS.index(b"+")
    ok = True
    for _ in range(60):
        ok = m.accept_token(one) and m.accept_token(plus)
        if not ok:
            break
    assert not ok and m.error is not None and "max_row_items" in m.error
    assert bm.allowed_ids(_row(m), VOCAB.size).tolist() == [0]


@pytest.mark.shared
def test_masks_equal_llguidance_on_maskbench_walks_with_llama3() -> None:
    vocab = load_vocab("llama3:" + str(require_shared("tokenizers/llama-3/tokenizer.model")))
    items = [it for it in list(iter_items(require_shared("datasets/maskbench")))[7::61] if any(c.valid for c in it.cases)][:5]
    # the store off: every mask from the tables made ahead (or walked past them)
    ours, ref = get_engine("glr", vocab, mask_store_bytes=0), get_engine("llguidance", vocab)
    steps = 0
    for item in items:
        g = Grammar.from_json_schema(item.spec)
        c = ours.compile(g)
        m, r = ours.matcher(c), ref.matcher(ref.compile(g))
        text = next(c.text for c in item.cases if c.valid)
        for t in [*vocab.encode(text), vocab.eos_ids[0]]:
            assert np.array_equal(_row(m, vocab), _row(r, vocab)), (item.name, steps)
            assert m.accept_token(t) and r.accept_token(t), (item.name, steps)
            steps += 1
        assert c.stats()["table_fills"] > 0, item.name
    assert steps > 100


@pytest.mark.shared
def test_the_exploration_follows_a_top_row_again_over_another_stack_below() -> None:
    """``Github_medium---o62761``: the rows where several stacks start a lexeme are met
    through configurations whose top row another path met first over a different stack
    below; keyed by the top row alone the exploration stopped there and the walk's masks
    made 11 roots (50-60 us each), keyed by the two top levels it makes them at compile:
    the walk makes none, its masks llguidance's."""
    vocab, item, g, ours, c, ref = _llama3_schema("Github_medium---o62761")
    rc = ref.compile(g)
    assert c.explored[1] > 0
    before = c.tables.roots
    for case in item.cases:
        if not case.valid:
            continue
        m, r = ours.matcher(c), ref.matcher(rc)
        for i, t in enumerate([*vocab.encode(case.text), vocab.eos_ids[0]]):
            assert np.array_equal(_row(m, vocab), _row(r, vocab)), i
            assert m.accept_token(t) and r.accept_token(t), i
    assert c.tables.roots == before


@pytest.mark.shared
def test_a_right_recursive_list_closes_in_reductions_linear_in_the_stack() -> None:
    """The JSON Schema compiler's right-recursive property list that conflicts keep right
    recursive (``Github_medium---o30911``: 40 properties, an empty production at the
    end) reduces all its entries when the object closes: once per entry and path, about
    one reduction per row of the stack (143 for 138 rows), where making every node's
    reductions again after each added edge took three per row and 55 us; masks equal
    llguidance's on the way."""
    vocab, item, g, ours, c, ref = _llama3_schema("Github_medium---o30911")
    m, r = ours.matcher(c), ref.matcher(ref.compile(g))
    text = next(k.text for k in item.cases if k.valid)
    toks = vocab.encode(text)
    for i, t in enumerate(toks):
        assert np.array_equal(_row(m, vocab), _row(r, vocab)), i
        before = m.parser.reductions
        assert m.accept_token(t) and r.accept_token(t), i
    assert vocab.decode([toks[-1]]) == b"}"
    rows = m.parser.num_rows
    assert rows > 100 and m.parser.reductions - before <= 1.5 * rows, (m.parser.reductions - before, rows)


@pytest.mark.shared
def test_tables_past_a_mib_grow_without_moving_rows_and_stay_exact() -> None:
    """A schema whose mask tables hold thousands of contexts and roots, past 2 MiB (the
    dense rows in blocks that never move, the other arrays page arrays: test_cutil),
    groups of one node list sharing their nodes and children, contexts of one dense row
    sharing it, the making ahead stopped
    short so that contexts are made at masks too: every mask of its walk equals our
    ``llguidance``'s; the tables are inspectable (``root``/``context``/``child``)."""
    vocab, item, g, ours, c, ref = _llama3_schema("Github_hard---o39444")
    before = c.stats()
    assert before["table_bytes"] > 2 << 20 and before["groups_shared"] > 1000 and not c.ahead_complete, before
    assert before["rows_shared"] > 100, before
    m, r = ours.matcher(c), ref.matcher(ref.compile(g))
    text = next(x.text for x in item.cases if x.valid)
    T = c.tables
    for i, t in enumerate([*vocab.encode(text)[:400], vocab.eos_ids[0]]):
        row = bm.allocate(vocab.size)
        info = m.fill_bitmask(row)
        assert np.array_equal(row[0], _row(r, vocab)), i
        assert info.allowed == bm.popcount(row[0]), i
        root = T.root(m.parser.ls)
        assert root is not None, i  # (a mask from the tables starts at the lexer state's root)
        cx = T.context(root)
        # the root's row is part of the mask, the whole of it when no lexeme ends inside a token
        assert cx["tokens"] == info.allowed if not cx["groups"] else cx["tokens"] <= info.allowed, i
        assert cx["dense"] or cx["pairs"] > 0 or cx["tokens"] == 0
        for q, skip, nodes in cx["groups"]:
            assert q >= 0 and nodes > 0 and isinstance(skip, bool)
        with pytest.raises(IndexError):
            T.child(root, len(cx["groups"]), m.parser.ls)
        if t == vocab.eos_ids[0]:
            break
        assert m.accept_token(t) and r.accept_token(t), i
    assert c.stats()["contexts"] > before["contexts"]  # (made at masks, past the budget)
    with pytest.raises(IndexError):
        T.context(T.contexts)
