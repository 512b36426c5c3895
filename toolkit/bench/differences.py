"""Why two engines' masks differ, named, and whether the difference is documented.

A bench run records a digest of every mask (:mod:`toolkit.bench.agree`), so the report
knows *that* two engines computed different masks, not *why*.  :func:`explain_pair`
re-runs the first differing items of a pair in-process and judges every token only one
of the two allows against the grammar's own language:

* ``naive`` (the :class:`~toolkit.grammar.Grammar`'s language, byte by byte) walks
  beside the two engines; for a token only engine W allows, naive's verdict says which
  engine departs from the grammar: W, when naive refuses the token (W *allows* more),
  the other, when naive takes it (the other *refuses* a token of the language);
* the departure is then checked against :data:`DEVIATIONS`, the ways each engine's
  language is documented to depart from the grammar's (lexing, code points, partial
  UTF-8 characters, outlines-core's late match), each with a test that decides it for
  one token and where it is documented.

A difference every examined token of which fits a documented deviation is *documented*;
any other is a real difference of language that no page names (a reader should look:
``masklab agree RUN --engines A,B --explain N``).  The work is bounded by a time budget
and a number of items and steps; what was not examined is said.  Results are cached
per pair in the run folder (``differences.json``, keyed by the records file's size and
time and by the list of deviations), so a second report costs nothing.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from strategies import engine_capabilities, get_engine
from toolkit.bench.agree import agreement
from toolkit.bench.measure import encode_case, spec_for
from toolkit.bench.records import records_file
from toolkit.core import bitmask as bm
from toolkit.core.errors import MasklabError, TimeLimitExceeded, time_limit
from toolkit.core.forced import TokenExtensions
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import embedded_dir, iter_items

__all__ = ["DEVIATIONS", "Deviation", "PairCause", "cached_causes", "explain_pair", "explain_pairs"]

CACHE = "differences.json"
MAX_ROWS = 4096  # a slow engine's mask rows kept across pairs (16 KB each on a 131k vocabulary)
MIN_SHARE = 10.0  # seconds of the budget each pair gets at least, while it lasts
REFERENCE = "naive"
LEXER_REFERENCE = "llguidance"


@dataclass
class _Probe:
    """One token at one differing step: what the deviation tests may ask."""

    vocab: Any
    token: int
    data: bytes  # the token's bytes (b"" for a special token)
    before: bytes  # the text the walk consumed before this step
    verdicts: dict[str, bool]  # engine name -> whether it allows the token here
    naive: Any  # naive's matcher at this step
    lexer: Any  # the reference lexer's matcher at this step (None when it left the walk)
    matcher: Any = None  # the departing engine's matcher at this step
    native_schema: bool = False  # a JSON schema the engine compiled itself (bench --source native)
    formats: bool = False  # the schema names a "format"


def _not_utf8_alone(p: _Probe) -> bool:
    try:
        p.data.decode("utf-8")
    except UnicodeDecodeError:
        return bool(p.data)
    return False


def _leaves_utf8(p: _Probe) -> bool:
    """The text read so far, then the token's bytes, can begin no UTF-8 text."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(p.before + p.data, final=False)
    except UnicodeDecodeError:
        return True
    return False


def _never_utf8(p: _Probe) -> bool:
    """Bytes never in UTF-8, or the start of a surrogate, an overlong 4-byte form or a
    code point past U+10FFFF: what llama.cpp's code points let through a negated class."""
    d = p.data
    return any(x in (0xC0, 0xC1) or x >= 0xF5 for x in d) or any(
        (a == 0xED and b >= 0xA0) or (a == 0xF0 and b < 0x90) or (a == 0xF4 and b >= 0x90)
        for a, b in zip(d, d[1:], strict=False) if 0x80 <= b <= 0xBF)


def _feeds(matcher: Any, vocab: Any, data: bytes) -> tuple[bool, bool]:
    """(whether ``matcher`` takes ``data`` byte by byte, whether it is accepting then);
    its state is unchanged."""
    single, n = TokenExtensions.of(vocab).single, 0
    try:
        for b in data:
            t = single.get(bytes([b]))
            if t is None or not matcher.accept_token(t):
                return False, False
            n += 1
        return True, bool(matcher.is_accepting())
    finally:
        matcher.rollback(n)


def _partial_tail(data: bytes) -> tuple[bytes, int]:
    """(the incomplete UTF-8 character ``data`` ends with, the bytes it lacks), or
    (b"", 0) when it ends on a whole character."""
    for k in range(1, min(3, len(data)) + 1):
        lead = data[-k]
        need = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
        if need:
            return (data[-k:], need - k) if need > k else (b"", 0)
        if not 0x80 <= lead <= 0xBF:
            return b"", 0
    return b"", 0


def _excluded_completion(p: _Probe) -> bool:
    """llama.cpp's partial character under a negated class: the token ends in a partial
    character some of whose completions the grammar refuses (at most 4,096 tried)."""
    tail, missing = _partial_tail(p.data)
    if not tail or missing > 2:
        return False
    ok, _ = _feeds(p.naive, p.vocab, p.data)
    if not ok:
        return False
    conts = [bytes([a]) for a in range(0x80, 0xC0)]
    if missing == 2:
        conts = [a + bytes([b]) for a in conts for b in range(0x80, 0xC0)]
    return any(not _feeds(p.naive, p.vocab, p.data + c)[0] for c in conts)


_JSON_WS = frozenset(b" \t\n\r")


def _json_whitespace(side: str) -> Callable[[_Probe], bool]:
    """A peer's own JSON Schema compiler writes its own whitespace rules: the token
    differs only in whitespace when, its whitespace bytes removed, what is left is empty
    or taken by the side that refused the whole token; a refusing side is also tried
    with a space after each ``:`` and ``,`` (the text's last one too), whitespace the
    token may lack (glrmask writes ``": "`` and ``", "``: it refuses ``":{\n``, ``":{"``
    and, after ``":``, ``{``)."""
    def fits(p: _Probe) -> bool:
        if not p.native_schema or not p.data:
            return False
        bare = bytes(x for x in p.data if x not in _JSON_WS)
        if not bare:
            return True
        judge = p.matcher if side == "refuses" else p.naive
        if judge is None:
            return False
        if bare != p.data and _feeds(judge, p.vocab, bare)[0]:
            return True
        spaced = (b" " if p.before[-1:] in (b":", b",") else b"") + bare.replace(b":", b": ").replace(b",", b", ")
        return side == "refuses" and spaced != bare and _feeds(judge, p.vocab, spaced)[0]
    return fits


_IN_KEY = re.compile(rb'[{,]\s*"(?:[^"\\]|\\.)*$')


def _in_key(text: bytes) -> bool:
    """``text`` ends inside what can be an object key (after ``{"`` or ``, "``; a
    string in an array looks the same, so this is a heuristic)."""
    return bool(_IN_KEY.search(text[-400:]))


def _escape_in_key(p: _Probe) -> bool:
    """The token writes an escape inside an object key."""
    cut = p.data.find(b"\\")
    return cut >= 0 and _in_key(p.before + p.data[:cut])


def _closed_object(p: _Probe) -> bool:
    """A refusal of strict mode's closed objects: the token goes into a key, or the
    engine takes it up to a comma that would start another member."""
    if _in_key(p.before) or _in_key(p.before + p.data):
        return True
    cut = p.data.find(b",")
    return cut >= 0 and p.matcher is not None and _feeds(p.matcher, p.vocab, p.data[:cut])[0]


def _late_match(p: _Probe) -> bool:
    """outlines-core's documented miss: the token's bytes but the last complete a match
    of the language (the whole token's end a match or not)."""
    if not p.data:
        return False
    mid_ok, mid_accepting = _feeds(p.naive, p.vocab, p.data[:-1])
    return mid_ok and mid_accepting


def _as_lexer(name: str) -> Callable[[_Probe], bool]:
    def fits(p: _Probe) -> bool:
        return p.lexer is not None and _allows(p.lexer, p.token) == p.verdicts[name]
    return fits


def _lexing(name: str) -> bool:
    try:
        return engine_capabilities(name).lexing == "lexer"
    except (ImportError, ValueError, AttributeError):
        return False


def _slow(name: str) -> bool:
    try:
        return engine_capabilities(name).mask_cost == "slow"
    except (ImportError, ValueError, AttributeError):
        return False


def _refuses_partial(name: str) -> bool:
    try:
        return not engine_capabilities(name).partial_utf8
    except (ImportError, ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class Deviation:
    """A documented way an engine's language departs from the grammar's.

    ``engines``: which engines it is of (by name); ``side``: ``"allows"`` (the engine
    takes a token the grammar refuses) or ``"refuses"`` (it refuses one the grammar
    takes); ``fits(name)``: the test of one token (:class:`_Probe`) for engine ``name``;
    ``where``: the page or test that documents it."""

    name: str
    engines: Callable[[str], bool]
    side: str
    fits: Callable[[str], Callable[[_Probe], bool]]
    where: str


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation("lexer: greedy lexemes, whitespace only before a lexeme", _lexing, "allows", _as_lexer,
              "docs/extending.md (lexing), tests/test_walks.py"),
    Deviation("lexer: greedy lexemes, whitespace only before a lexeme", _lexing, "refuses", _as_lexer,
              "docs/extending.md (lexing), tests/test_walks.py"),
    Deviation("glrmask lexes greedily, as llguidance does",
              lambda n: n == "peer:glrmask", "allows", lambda n: _as_lexer(n), "strategies/peer_glrmask.py"),
    Deviation("glrmask lexes greedily, as llguidance does",
              lambda n: n == "peer:glrmask", "refuses", lambda n: _as_lexer(n), "strategies/peer_glrmask.py"),
    Deviation("code points: bytes that are never UTF-8 (or start a surrogate) pass a negated class", lambda n: n == "peer:llama.cpp",
              "allows", lambda n: _never_utf8, "docs/strategies.md (peer:llama.cpp)"),
    Deviation("code points: a token starting with NUL is never allowed", lambda n: n == "peer:llama.cpp",
              "refuses", lambda n: lambda p: p.data[:1] == b"\x00", "docs/strategies.md (peer:llama.cpp)"),
    Deviation("code points: a partial character is refused where a negated class excludes one of its range",
              lambda n: n == "peer:llama.cpp", "refuses", lambda n: _excluded_completion,
              "strategies/peer_llamacpp.py (2), tests/test_peer_llamacpp.py"),
    Deviation("code points: EOS is allowed while a partial character is pending", lambda n: n == "peer:llama.cpp",
              "allows", lambda n: lambda p: p.token in p.vocab.eos_ids and bool(_partial_tail(p.before)[0]),
              "strategies/peer_llamacpp.py (4), tests/test_peer_llamacpp.py"),
    Deviation("tokens that are not UTF-8 alone are never allowed", _refuses_partial, "refuses",
              lambda n: _not_utf8_alone, "docs/extending.md (partial_utf8)"),
    Deviation("its own JSON Schema compiler: JSON whitespace elsewhere", lambda n: n.startswith("peer:"), "allows",
              lambda n: _json_whitespace("allows"), "README.md (--source native), docs/benchmarks.md"),
    Deviation("its own JSON Schema compiler: JSON whitespace elsewhere", lambda n: n.startswith("peer:"), "refuses",
              lambda n: _json_whitespace("refuses"), "README.md (--source native), docs/benchmarks.md"),
    Deviation("its own JSON Schema compiler: keys and constants in one spelling, no escapes",
              lambda n: n.startswith("peer:"), "refuses", lambda n: lambda p: p.native_schema and b"\\" in p.data,
              "docs/concepts.md (spelling), docs/decoding.md"),
    Deviation("strict mode (its default): an object without additionalProperties is closed",
              lambda n: n == "peer:xgrammar", "refuses", lambda n: lambda p: p.native_schema and _closed_object(p),
              "strategies/peers.py (strict_mode)"),
    Deviation("masklab's schema compiler writes additional keys without escapes (tighter than the schema)",
              lambda n: n.startswith("peer:"), "allows",
              lambda n: lambda p: p.native_schema and _escape_in_key(p),
              "toolkit/jsonschema/compiler.py"),
    Deviation("masklab's schema compiler: formats tighter than their RFCs where named (no leap second...)",
              lambda n: n.startswith("peer:"), "allows",
              lambda n: lambda p: p.native_schema and p.formats and not _in_key(p.before), "toolkit/jsonschema/formats.py"),
    Deviation("its own JSON Schema compiler: DEL (U+007F) is no string character", lambda n: n == "peer:llguidance",
              "refuses", lambda n: lambda p: p.native_schema and b"\x7f" in p.data,
              "strategies/peers.py, tests/test_peers.py"),
    Deviation("its own JSON Schema compiler: raw control characters in strings (a loosening: JSON forbids them)",
              lambda n: n in ("peer:xgrammar", "peer:llama.cpp", "peer:lm-format-enforcer"), "allows",
              lambda n: lambda p: p.native_schema and any(x < 0x20 for x in p.data), "results/audit/README.md"),
    Deviation("its own JSON Schema compiler: UTF-16 surrogates written as UTF-8 (a loosening: ill-formed UTF-8)",
              lambda n: n == "peer:xgrammar", "allows",
              lambda n: lambda p: p.native_schema and any(a == 0xED and b >= 0xA0 for a, b in zip(
                  p.data, p.data[1:], strict=False)), "results/audit/README.md"),
    Deviation("structural tags: its text takes byte strings that are not UTF-8", lambda n: n == "peer:xgrammar",
              "allows", lambda n: _leaves_utf8, "toolkit/grammar/structural_tag.py, tests/test_structural_tag.py"),
    Deviation("a regular engine: JSON nested deeper than max_depth (default 3) is refused", lambda n: n == "outlines",
              "refuses", lambda n: lambda p: p.native_schema and any(x in b"[{" for x in p.data),
              "docs/strategies.md (max_depth)"),
    Deviation("late match: a token passing a complete match one byte before its end is dropped",
              lambda n: n == "peer:outlines-core", "refuses", lambda n: _late_match, "toolkit/bench/diagnose.py, tests/test_peers.py"),
)
"""Each documented departure from the grammar's language, per engine.  The lexer
engines are held to masklab's ``llguidance`` (itself held to ``naive`` with its lexing
differences marked in the tests): a token on which a lexer engine departs from the
grammar is a lexing difference when ``llguidance`` decides it the same way."""


def _allows(matcher: Any, token: int) -> bool:
    if matcher.accept_token(token):
        matcher.rollback(1)
        return True
    return False


@dataclass
class PairCause:
    """What :func:`explain_pair` found for one pair of engines."""

    a: str
    b: str
    items_differing: int = 0
    items_examined: int = 0
    steps: int = 0
    tokens: int = 0
    documented: dict[str, int] = field(default_factory=dict)  # "engine: deviation" -> tokens
    where: dict[str, str] = field(default_factory=dict)  # "engine: deviation" -> its page
    undocumented: list[dict[str, Any]] = field(default_factory=list)  # up to 5 examples
    undocumented_tokens: int = 0
    stopped: str = ""  # why the examination stopped early ("" when it covered what it was asked)

    @property
    def is_documented(self) -> bool:
        return self.tokens > 0 and self.undocumented_tokens == 0

    def text(self) -> str:
        """One sentence for a warning."""
        if not self.tokens:
            why = f" ({self.stopped})" if self.stopped else ""
            return f"cause not examined{why}"
        scope = (f"on the first {self.items_examined} of {self.items_differing} differing items, "
                 f"{self.steps:,} steps")
        names = "; ".join(f"{k} [{self.where[k]}]" for k in sorted(self.documented, key=lambda k: -self.documented[k]))
        if self.is_documented:
            out = f"documented difference ({scope}): {names}"
        else:
            ex = self.undocumented[0]
            out = (f"NOT a documented difference ({scope}; {self.undocumented_tokens:,} tokens): on {ex['item']} "
                   f"step {ex['step']} after {ex['before']!r}, {ex['engine']} {ex['side']} {ex['token']} that "
                   f"the grammar {'refuses' if ex['side'] == 'allows' else 'allows'}")
            if names:
                out += f"; the rest documented: {names}"
        return out + (f" (stopped early: {self.stopped})" if self.stopped else "")


def _deviation(engine: str, side: str, probe: _Probe) -> Deviation | None:
    for d in DEVIATIONS:
        if d.side == side and d.engines(engine) and d.fits(engine)(probe):
            return d
    return None


class _Session:
    """Engines and compiled grammars of one run, made once and shared by its pairs."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
        self.vocab = load_vocab(self.meta["vocab"]["spec"])
        data = str(self.meta["data"])
        self.data = str(embedded_dir()) if data.startswith("datasets (embedded)") else data
        self.items = {it.name: it for it in iter_items(self.data)}
        self.engines: dict[str, Any] = {}
        self.compiled: dict[tuple[str, str], Any] = {}
        self.rows: dict[tuple[str, str, int], list[np.ndarray]] = {}
        self.n_rows = 0

    def fill(self, name: str, item: str, k: int, step: int, m: Any, buf: np.ndarray) -> np.ndarray:
        """``m``'s mask at ``step`` of valid instance ``k``: a slow engine's rows
        (``mask_cost="slow"``: llama.cpp, lm-format-enforcer, a 10-100 ms mask on a large
        vocabulary) are kept for the next pair that needs them, up to :data:`MAX_ROWS`."""
        rows = self.rows.get((name, item, k))
        if rows is not None and step < len(rows):
            return rows[step]
        m.fill_bitmask(buf)
        if self.n_rows < MAX_ROWS and _slow(name) and step == len(rows := self.rows.setdefault((name, item, k), [])):
            rows.append(buf[0].copy())
            self.n_rows += 1
        return buf[0]

    def engine(self, name: str) -> Any:
        if name not in self.engines:
            info = (self.meta.get("engines") or {}).get(name, {})
            opts = dict(info.get("requested_options", {})) if name not in (REFERENCE,) else {}
            self.engines[name] = get_engine(name, self.vocab, **opts)
        return self.engines[name]

    def matcher(self, name: str, item: str, source: str) -> Any:
        key = (name, item)
        if key not in self.compiled:
            eng = self.engine(name)
            self.compiled[key] = eng.compile(spec_for(eng, self.items[item], source))
        return self.engine(name).matcher(self.compiled[key])


def _walk_item(s: _Session, item: str, a: str, b: str, cause: PairCause, max_steps: int, end: float) -> None:
    """Examine the differing steps of ``item`` (at most ``max_steps``) into ``cause``."""
    it = s.items[item]
    source = s.meta.get("source", "native")
    vocab = s.vocab
    ref_source = "grammar"
    ra, rb = bm.allocate(vocab.size), bm.allocate(vocab.size)
    native_schema = it.kind == "schema" and source == "native"
    formats = native_schema and '"format"' in json.dumps(it.spec)
    seen = 0
    for k, case in enumerate(c for c in it.cases if c.valid):
        tokens = encode_case(vocab, it, case.text) + [vocab.eos_ids[0]]
        ma, mb = s.matcher(a, item, source), s.matcher(b, item, source)
        naive = s.matcher(REFERENCE, item, ref_source)
        lexer: Any = s.matcher(LEXER_REFERENCE, item, ref_source)
        for step, t in enumerate(tokens):
            if time.monotonic() > end:
                cause.stopped = "the time budget ran out"
                return
            xa, xb = s.fill(a, item, k, step, ma, ra), s.fill(b, item, k, step, mb, rb)
            if (xa != xb).any():
                cause.steps += 1
                seen += 1
                before = vocab.decode(tokens[:step])
                for wide, narrow, ids in ((a, b, bm.allowed_ids(xa & ~xb, vocab.size)),
                                          (b, a, bm.allowed_ids(xb & ~xa, vocab.size))):
                    for i in ids.tolist():
                        _judge(cause, vocab, int(i), wide, narrow, naive, lexer, item, step, before,
                               {a: ma, b: mb}, native_schema, formats)
                if seen >= max_steps:
                    return
            ok = ma.accept_token(t) and mb.accept_token(t)
            if not naive.accept_token(t):
                return  # the grammar itself leaves the instance: nothing more to judge against
            if lexer is not None and not lexer.accept_token(t):
                lexer = None
            if not ok:
                break


def _judge(cause: PairCause, vocab: Any, i: int, wide: str, narrow: str, naive: Any, lexer: Any, item: str,
           step: int, before: bytes, matchers: dict[str, Any], native_schema: bool, formats: bool) -> None:
    data = b"" if i in vocab.special_tokens else vocab.token_bytes[i]
    in_grammar = _allows(naive, i)
    engine, side = (narrow, "refuses") if in_grammar else (wide, "allows")
    probe = _Probe(vocab, i, data, before, {wide: True, narrow: False}, naive, lexer, matchers[engine], native_schema,
                   formats)
    cause.tokens += 1
    d = _deviation(engine, side, probe)
    if d is not None:
        key = f"{engine}: {d.name}"
        cause.documented[key] = cause.documented.get(key, 0) + 1
        cause.where[key] = d.where
        return
    cause.undocumented_tokens += 1
    if len(cause.undocumented) < 5:
        shown = repr(data.decode("utf-8", "backslashreplace")) if data else f"<{i}>"
        text = before.decode("utf-8", "replace")[-30:]
        cause.undocumented.append({"item": item, "step": step, "before": text, "engine": engine,
                                   "side": side, "token": shown})


def explain_pair(run: str | Path, a: str, b: str, *, items: Sequence[str] | Mapping[str, int] | None = None,
                 budget_s: float = 30.0, max_items: int = 2, max_steps: int = 10, session: Any = None) -> PairCause:
    """Examine why ``a`` and ``b`` (engine names of bench run ``run``) computed different
    masks: the first ``max_items`` differing items (default: those :func:`agreement`
    finds; a mapping gives each item's count of differing steps, where the walk may
    stop), at most ``max_steps`` differing steps each, within ``budget_s`` seconds."""
    run = Path(run)
    if items is None:
        table = agreement(run, a, b)
        items = dict(zip(table["item"], table["differ"], strict=True))
        items = {k: int(v) for k, v in items.items() if v > 0}
    counts = dict(items) if isinstance(items, Mapping) else {}
    cause = PairCause(a, b, items_differing=len(items))
    s = session if session is not None else _Session(run)
    end = time.monotonic() + budget_s
    for item in list(items)[:max_items]:
        if item not in s.items:
            continue
        try:
            with time_limit(max(end - time.monotonic(), 1e-3), "difference budget"):
                _walk_item(s, item, a, b, cause, min(max_steps, counts.get(item, max_steps)), end)
        except TimeLimitExceeded:
            cause.stopped = "the time budget ran out"
        except MasklabError as e:  # a peer interrupted by the budget's alarm says so in its own words
            cause.stopped = ("the time budget ran out" if time.monotonic() >= end
                             else f"{item}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        cause.items_examined += 1
        if cause.stopped:
            break
    return cause


def _fingerprint(run: Path) -> list[int]:
    st = records_file(run).stat()
    return [st.st_size, st.st_mtime_ns]


def _deviation_names() -> list[str]:
    """What the cached causes were judged against: a list that changes, a cache that is stale."""
    return [f"{d.side} {d.name}" for d in DEVIATIONS]


def cached_causes(run: str | Path) -> dict[tuple[str, str], PairCause]:
    """The causes :func:`explain_pairs` saved for ``run`` while its records are unchanged."""
    path = Path(run) / CACHE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("records") != _fingerprint(Path(run)) or saved.get("deviations") != _deviation_names():
            return {}
        return {(p["a"], p["b"]): PairCause(**p) for p in saved.get("pairs", [])}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def explain_pairs(run: str | Path, pairs: Iterable[tuple[str, str, Sequence[str] | Mapping[str, int]]], *,
                  budget_s: float = 60.0) -> dict[tuple[str, str], PairCause]:
    """:func:`explain_pair` for each ``(a, b, differing items)`` of ``run`` within one
    budget of ``budget_s`` seconds, cached in the run folder.  The budget is shared out
    as the pairs go, each pair getting at least :data:`MIN_SHARE` seconds while they
    last (the first pair of a slow engine fills the mask rows the later ones reuse)."""
    run = Path(run)
    done = cached_causes(run)
    todo = [(a, b, items) for a, b, items in pairs if (a, b) not in done]
    if todo and budget_s > 0:
        end = time.monotonic() + budget_s
        try:
            session = _Session(run)
        except (OSError, ValueError, KeyError, MasklabError) as e:
            return {**done, **{(a, b): PairCause(a, b, len(items), stopped=f"cannot re-run: {e}")
                               for a, b, items in todo}}
        for k, (a, b, items) in enumerate(todo):
            left = end - time.monotonic()
            if left <= 0:
                break
            share = max(left / (len(todo) - k), min(left, MIN_SHARE))
            done[(a, b)] = explain_pair(run, a, b, items=items, budget_s=share, session=session)
        complete = [c for c in done.values() if not c.stopped.startswith("the time budget")]
        try:
            (run / CACHE).write_text(json.dumps({"records": _fingerprint(run), "deviations": _deviation_names(),
                                                 "pairs": [asdict(c) for c in complete]}, indent=1) + "\n",
                                     encoding="utf-8")
        except OSError:
            pass
    return done
