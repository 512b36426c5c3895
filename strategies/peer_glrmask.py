"""``peer:glrmask``: glrmask 0.5.0 (a GLR parser with masks compiled ahead of time)
behind the :class:`~toolkit.core.protocol.MaskEngine` protocol.

glrmask compiles a grammar for a vocabulary into a ``Constraint`` whose masks are a few
table operations per parser stack; a ``ConstraintState`` per sequence writes its mask
into our int32 row (``fill_mask``, the bit layout masklab uses) and takes tokens with
``commit_token``.  The adapter keeps the protocol's rules around those two calls:

* **Vocabulary**: a ``glrmask.Vocab`` of the text tokens only (special and padding ids
  left out, so glrmask never sets their bits by itself); EOS is the protocol's
  (:class:`~strategies._base.BaseMatcher` allows the vocabulary's EOS ids exactly where
  ``is_accepting()``), never a glrmask end token.
* **Inputs**: a JSON schema through glrmask's own compiler (``Grammar.from_json_schema``),
  Lark text (:class:`~toolkit.grammar.lark_dialect.LarkText`) through its own Lark reader
  (``Grammar.from_lark``), a :class:`~toolkit.grammar.Grammar` as
  :meth:`Grammar.to_lark(boolean="regex") <toolkit.grammar.Grammar.to_lark>` (glrmask's
  Lark has no llguidance ``&``/``~``, ``%llguidance``, priorities or
  ``name[max_tokens=N]``: terminals that intersect or subtract are written as one plain
  regex, as for xgrammar; token limits are refused).  Special tokens the grammar names
  (:mod:`toolkit.grammar.special`) become glrmask token externs bound to their ids
  (``<|masklab_tokens_...|>``, a ``TokenSet``); in Lark text a ``<|name|>`` is bound to
  the vocabulary's token of that name (glrmask's ``<[ID]>`` takes ids of its vocabulary
  only, the text tokens).  A token-level terminal whose ids hold text tokens is refused
  (glrmask would read such a token as text and as the terminal alike; llguidance and
  masklab prefer the terminal).  ``%json`` in Lark text is glrmask's JSON Schema compiler
  (its JSON, below), not llguidance's.
* **Language**: glrmask's Lark lexes greedily (maximal munch, as llguidance does:
  ``start: N N`` with ``N: /[0-9]+/`` never splits ``12``; a ``// comment`` is read to
  the line's end), allows ``%ignore`` text before the first lexeme and after the last
  (llguidance: only where another lexeme may follow); its JSON Schema compiler writes JSON
  with ``", "`` and ``": "`` as the only whitespace, no ``\\u`` escapes in property
  names, ignores ``format`` and refuses what it cannot express exactly (``if``/``then``,
  overlapping ``oneOf``); ``tests/test_peer_glrmask.py`` shows each.
* **Refused tokens**: ``commit_token`` terminates the state when it refuses a token,
  while the protocol needs the state unchanged.  A token a caller vouches for
  (``accept_allowed``: the server's sampled token) is committed directly; any other is
  first checked against a fresh mask (a fill into a scratch row, 1-2 us).  A token the
  mask allowed but ``commit_token`` refuses is glrmask contradicting itself: the
  matcher's sticky error.
* **Rollback and fork**: glrmask has no rollback, and ``ConstraintState.copy`` (about
  70 us on Llama 3 schemas, 30-50 times a commit) costs as much as ``Constraint.start``
  plus ``commit_tokens`` of some 80 tokens (about 25 us + 0.5 us a token), so no copy is
  kept per token: ``rollback`` replays the kept tokens from the start (as
  ``peer:outlines-core`` past its window), ``fork`` copies.
* **Forced tokens**: ``forced_tokens()`` keeps the protocol's definition (the canonical
  tokens of ``forced_bytes()`` minus the tokens the next one could merge with,
  llguidance's rule).  ``forced_bytes()`` starts from glrmask's ``commit_forced_tokens``
  on a copy (bytes every continuation starts with) and goes on byte by byte while the
  mask's tokens all start with one byte (``commit_bytes``); ``allows_bytes`` is
  ``commit_bytes`` on a copy.  glrmask's own forced tokens (the longest token at each
  step, however the tokenizer would merge the last of them with what follows: after
  ``{"name":`` it gives ``name"`` + ``:`` where the model may write ``":"``) are
  :meth:`GlrmaskMatcher.native_forced_tokens`, and the option ``jump_forward="glrmask"``
  makes ``forced_tokens()`` return them.
* **Threads**: glrmask compiles on a thread pool sized once per process, at its first
  compile (``GLRMASK_COMPILE_THREADS``, else ``RAYON_NUM_THREADS``, else the machine's
  cores).  The engine sets ``GLRMASK_COMPILE_THREADS=1`` unless it is set: one worker
  compiles while the caller waits (process CPU time no more than wall time); masks and
  commits run on the caller's thread.  glrmask has no batch call: a batch is the thread
  fallback of :func:`toolkit.core.batch.make_batch`.
* **Caches**: a ``glrmask.Vocab`` keeps per-vocabulary work between compiles (the first
  compile on a fresh Llama 3 vocabulary takes 0.2-1 s more); the engine keeps one for
  its life, as a server does, and the harness's untimed warm-up pays that first compile.
* **Empty languages**: glrmask compiles a schema no instance satisfies (``minLength``
  above ``maxLength``, ``"not": {}``...) to a start state that allows nothing; the
  adapter checks the start state after each compile and raises
  :class:`~toolkit.core.errors.Unsatisfiable` then, as masklab's own engines do.
* **Memory**: a ``Constraint`` reports no size (``Constraint.save()`` is a serialized
  artifact whose length did not track the process's growth), so
  :meth:`PeerCompiled.memory_bytes` raises and the harness records none.

glrmask's third front end, its own grammar format GLRM (``Grammar.from_glrm``), is not
a masklab input format; its EBNF reader is not public in 0.5.0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from strategies._base import EOS_RECORD
from strategies.declared import BUILT_IN
from strategies.peers import PeerCompiled, PeerEngine, PeerError, PeerMatcher
from toolkit.core import bitmask as bm
from toolkit.core.errors import Unsatisfiable, UnsupportedGrammar
from toolkit.core.protocol import FORCED_LIMIT, check_count
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar, Terminal
from toolkit.grammar.special import dual_ids, parse_spec, resolve

__all__ = ["GlrmaskEngine", "GlrmaskMatcher", "MASK_STRATEGIES", "MaskStrategyName"]

MaskStrategyName = Literal["auto", "fast_compile", "fast_masks", "parser_dwa", "token_trie"]
"""``mask_strategy``: glrmask's ``MaskStrategy`` by its lower-case name.  ``auto`` (glrmask's
default) builds a parser DWA, or falls back to a token-trie walk when that would be too
large; ``parser_dwa`` (= ``fast_masks``) always builds it (slowest compile, fastest
masks); ``token_trie`` (= ``fast_compile``) walks the vocabulary for each mask."""

MASK_STRATEGIES: tuple[str, ...] = ("auto", "fast_compile", "fast_masks", "parser_dwa", "token_trie")
_TRIE_STRATEGIES = ("fast_compile", "token_trie")

ParserBackendName = Literal["lr_table", "template_dfa"]

JumpForward = Literal["protocol", "glrmask"]

_EXTERN = "masklab_tokens_"
_RUN = re.compile(r"(\d+)(?:to(\d+))?")


def _is_panic(e: BaseException) -> bool:
    """A Rust panic (pyo3's ``PanicException``, a BaseException but not an Exception)."""
    return not isinstance(e, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))


def _raise_panic(e: BaseException, what: str) -> None:
    """Raise a :class:`PeerError` for a panic inside glrmask; return for any other error
    (the engine's and the matcher's own handlers make those ``compile_error``/the error
    state).  The hot calls use it in a bare ``try``, which costs nothing until it raises."""
    if _is_panic(e):
        raise PeerError(f"peer:glrmask: glrmask panicked in {what}: {type(e).__name__}: {e}") from e


@contextmanager
def _native(what: str) -> Iterator[None]:
    """:func:`_raise_panic` around a block (the calls off the per-token path)."""
    try:
        yield
    except BaseException as e:
        _raise_panic(e, what)
        raise


def _extern_name(ids: tuple[int, ...]) -> str:
    """The extern a Grammar's token-level terminal becomes: its ids, as runs, in the name."""
    runs, start = [], None
    for k, i in enumerate(ids):
        if start is None:
            start = i
        if k + 1 == len(ids) or ids[k + 1] != i + 1:
            runs.append(str(start) if start == i else f"{start}to{i}")
            start = None
    return _EXTERN + "_".join(runs)


def _extern_ids(name: str) -> tuple[int, ...] | None:
    """The ids an extern written by :func:`_extern_name` stands for (None: another name)."""
    if not name.startswith(_EXTERN):
        return None
    out: list[int] = []
    for part in name[len(_EXTERN):].split("_"):
        m = _RUN.fullmatch(part)
        if m is None:
            return None
        lo = int(m.group(1))
        out.extend(range(lo, int(m.group(2) or lo) + 1))
    return tuple(out)


class GlrmaskEngine(PeerEngine):
    """``peer:glrmask`` (see the module doc for what differs from the Grammar's language).

    Options:

    * ``mask_strategy`` (default ``"auto"``): glrmask's ``MaskStrategy``
      (:data:`MaskStrategyName`); every strategy gives the same masks, at another
      compile time and mask time.
    * ``parser_backend`` (``"lr_table"``, glrmask's default, or ``"template_dfa"``) and
      ``merge_equivalent_tokens`` (default False): glrmask's ``TokenTrie`` settings, for
      ``mask_strategy="token_trie"``/``"fast_compile"`` only.
    * ``jump_forward`` (default ``"protocol"``): what ``forced_tokens()`` gives, the
      protocol's tokens or glrmask's ``commit_forced_tokens`` (``"glrmask"``).

    glrmask's ``BoundaryMaskStrategy`` is not an option: it concerns the boundaries
    between composed grammars, which masklab never makes (on single grammars its three
    values compiled the same artifact).
    """

    name = "peer:glrmask"
    capabilities = BUILT_IN["peer:glrmask"].capabilities
    #: its JSON Schema compiler does not check ``format`` (module doc;
    #: ``tests/test_peer_glrmask.py``): in each compile's ``unenforced`` where a schema holds one
    unenforced_keywords = MappingProxyType({"format": "glrmask ignores format (any string)"})
    dist = "glrmask"
    requires = BUILT_IN["peer:glrmask"].requires
    native_inputs = frozenset({"json_schema", "lark"})

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        mask_strategy: MaskStrategyName = "auto",
        parser_backend: ParserBackendName = "lr_table",
        merge_equivalent_tokens: bool = False,
        jump_forward: JumpForward = "protocol",
    ) -> None:
        if mask_strategy not in MASK_STRATEGIES:
            raise ValueError(f"mask_strategy must be one of {', '.join(map(repr, MASK_STRATEGIES))}, "
                             f"not {mask_strategy!r}")
        if parser_backend not in ("lr_table", "template_dfa"):
            raise ValueError(f"parser_backend must be 'lr_table' or 'template_dfa', not {parser_backend!r}")
        if jump_forward not in ("protocol", "glrmask"):
            raise ValueError(f"jump_forward must be 'protocol' or 'glrmask', not {jump_forward!r}")
        trie = mask_strategy in _TRIE_STRATEGIES
        if not trie and (parser_backend != "lr_table" or merge_equivalent_tokens):
            raise ValueError("parser_backend and merge_equivalent_tokens are settings of glrmask's token-trie "
                             f"masks: give mask_strategy='token_trie' (not {mask_strategy!r})")
        # glrmask sizes its compile pool once per process, at the first compile
        os.environ.setdefault("GLRMASK_COMPILE_THREADS", "1")
        import glrmask

        super().__init__(vocab)
        self._gm = glrmask
        self.jump_forward = jump_forward
        self.options = {"mask_strategy": mask_strategy, "jump_forward": jump_forward}
        if trie:
            self.options.update(parser_backend=parser_backend, merge_equivalent_tokens=bool(merge_equivalent_tokens))
            backend = getattr(glrmask.ParserBackend, parser_backend.upper())
            strategy: Any = glrmask.TokenTrie(parser_backend=backend, merge_equivalent_tokens=bool(merge_equivalent_tokens))
        else:
            strategy = getattr(glrmask.MaskStrategy, mask_strategy.upper())
        self._compile_kw = {"mask_strategy": strategy}
        tb = vocab.token_bytes
        with _native("Vocab.from_id_to_bytes"):
            self.gvocab = glrmask.Vocab.from_id_to_bytes({int(i): tb[int(i)] for i in vocab.text_token_ids()})
        self.words = bm.words(vocab.size)
        # each text token's first byte (-1: not a text token): forced bytes from a mask
        first = np.full(vocab.size, -1, dtype=np.int16)
        for i in vocab.text_token_ids().tolist():
            first[i] = tb[i][0]
        self.first_byte = first
        # bytes with no one-byte text token: a mask cannot show them (none on Llama 3, tekken)
        self.unseen_bytes = tuple(sorted(set(range(256)) - {int(b) for i, b in enumerate(first.tolist())
                                                            if b >= 0 and len(tb[i]) == 1}))

    # --------------------------------------------------------------- compile --

    def _compile_schema(self, text: str) -> PeerCompiled:
        return self._build(text, "json_schema")

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        return _with_externs(grammar, self.vocab).to_lark(boolean="regex"), "lark"

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        return self._build(*self._grammar_source(grammar))

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        """Lark text read by glrmask's own Lark reader (``fmt`` is ``"lark"``; glrmask has
        no other front end masklab names)."""
        if fmt != "lark":
            return super()._compile_native(fmt, text)
        compiled = self._build(text, "lark")
        return self._with_special(compiled, compiled.special_ids)

    def _build(self, source: str, kind: str) -> PeerCompiled:
        t0 = perf_counter()
        constraint, ids = self._direct_build(source, kind)
        spent = perf_counter() - t0
        if constraint.mask_len() > self.words:  # (ids past the vocabulary: cannot happen)
            raise PeerError(f"{self.name}: masks of {constraint.mask_len()} words, rows have {self.words}")
        with _native("start"):
            state = constraint.start()
            row = bm.allocate(self.vocab.size)[0]
            state.fill_mask(row)
            empty = not row.any() and not state.is_accepting()
        if empty:  # glrmask compiles an empty language; masklab's engines refuse it
            raise Unsatisfiable(f"{self.name}: glrmask compiled the {kind.replace('_', ' ')}, but its start state "
                                "allows no token and does not accept: no text of this vocabulary is valid")
        return PeerCompiled(constraint, source, kind, None, spent, special_ids=ids)

    def _direct_build(self, source: str, kind: str) -> tuple[Any, frozenset[int]]:
        """The ``Constraint`` for ``source`` and the special ids its token externs are bound to."""
        gm = self._gm
        with _native("compile"):
            g = gm.Grammar.from_json_schema(source) if kind == "json_schema" else gm.Grammar.from_lark(source)
            bound: set[int] = set()
            for name, extern in g.externs.items():
                ids = self._extern_binding(name, extern.kind)
                g.bind(name, gm.TokenSet(ids))
                bound.update(ids)
            return g.compile(self.gvocab, **self._compile_kw), frozenset(bound)

    def _extern_binding(self, name: str, kind: str) -> tuple[int, ...]:
        """The ids of a token extern: ours (:func:`_extern_name`) or a ``<|name|>`` of the text."""
        if kind != "token":
            raise UnsupportedGrammar(f"{self.name}: extern grammar {name!r}: masklab binds token externs only")
        ids = _extern_ids(name)
        if ids is None:
            ids = resolve(parse_spec(f"<|{name}|>"), self.vocab)  # a typed error for an unknown name
            dual = dual_ids(self.vocab, ids)
            if dual:
                raise UnsupportedGrammar(f"{self.name}: <|{name}|> holds text tokens ({', '.join(map(str, dual[:5]))}"
                                         f"{'...' if len(dual) > 5 else ''}), which glrmask would also read as text")
        return ids

    def _direct_compile(self, source: str, kind: str) -> Any:
        return self._direct_build(source, kind)[0]

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # as a server calls glrmask (its GUIDE): start() per sequence, fill_mask into a
        # preallocated int32 row, commit_token of the sampled token
        row = bm.allocate(self.vocab.size)[0]

        def step(g: Any, t: int | None, _row: np.ndarray = row) -> bool:
            g.fill_mask(_row)
            return t is None or g.commit_token(t)

        return handle.start, step

    def matcher(self, compiled: PeerCompiled) -> GlrmaskMatcher:
        t0 = perf_counter()
        with _native("start"):
            state = compiled.handle.start()
        out = GlrmaskMatcher(self, compiled, state)
        out.engine_s = perf_counter() - t0
        return out


def _with_externs(grammar: Grammar, vocab: Vocabulary) -> Grammar:
    """``grammar`` with each token-level terminal written as a glrmask token extern whose
    name holds its ids in ``vocab`` (:func:`_extern_name`); refused where those ids hold
    text tokens (see the module doc)."""
    if not grammar.special_terminals:
        return grammar
    terminals = dict(grammar.terminals)
    for name in grammar.special_terminals:
        t = grammar.terminals[name]
        ids = resolve(parse_spec(t.special), vocab)
        dual = dual_ids(vocab, ids)
        if dual:
            raise UnsupportedGrammar(f"peer:glrmask: {t.special} holds text tokens ({', '.join(map(str, dual[:5]))}"
                                     f"{'...' if len(dual) > 5 else ''}), which glrmask would also read as text")
        terminals[name] = Terminal(t.name, t.regex, special=f"<|{_extern_name(ids)}|>")
    return Grammar(start=grammar.start, rules=grammar.rules, terminals=terminals, ignore=grammar.ignore,
                   source=grammar.source, attributes=grammar.attributes)


class GlrmaskMatcher(PeerMatcher):
    """One sequence: a ``ConstraintState`` and the tokens it took (see the module doc)."""

    def __init__(self, engine: GlrmaskEngine, compiled: PeerCompiled, state: Any) -> None:
        super().__init__(engine, compiled)
        self.state = state
        self._scratch: np.ndarray | None = None
        self._stale = False  # a rollback undid tokens: the state is replayed after it

    def _row(self) -> np.ndarray:
        if self._scratch is None:
            self._scratch = bm.allocate(self.vocab.size)[0]
        return self._scratch

    def _fill_native(self, row: np.ndarray) -> None:
        target = row if row.flags.c_contiguous else self._row()
        state = self.state
        t0 = perf_counter()
        try:
            state.fill_mask(target)
        except BaseException as e:
            _raise_panic(e, "fill_mask")
            raise
        self.engine_s += perf_counter() - t0
        if target is not row:
            row[:] = target

    def _allows(self, token_id: int) -> bool:
        """Whether the current mask has ``token_id`` (a fill into the scratch row)."""
        row = self._row()
        try:
            self.state.fill_mask(row)
        except BaseException as e:
            _raise_panic(e, "fill_mask")
            raise
        return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)

    def _advance(self, token_id: int, data: bytes) -> Any:
        if not self._trusted and not self._allows(token_id):
            return None  # refused, the state untouched (commit_token would terminate it)
        state = self.state
        t0 = perf_counter()
        try:
            ok = state.commit_token(token_id)
        except BaseException as e:
            _raise_panic(e, "commit_token")
            raise
        self.engine_s += perf_counter() - t0
        if ok:
            return True
        self._replay()  # the refusal terminated the state: back to where it was
        if self._trusted and not self._allows(token_id):
            return None  # the caller's token was not allowed after all
        raise PeerError(f"glrmask refused token {token_id} ({data!r}) that its mask allowed")

    def _undo(self, record: Any) -> None:
        self._stale = True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens: the bookkeeping, then a replay of the kept
        tokens from the start (glrmask has no rollback of its own)."""
        n = check_count(n)
        self._stale = False
        super().rollback(n)
        if self._stale:
            self._stale = False
            try:
                self._replay()
            except Exception as e:  # noqa: BLE001 - nothing raises mid-decode
                self._fail(e)

    def _replay(self) -> None:
        """The state at the start, then every kept text token committed again."""
        tokens = [t for r, t in zip(self._history, self._tokens, strict=True) if r is not EOS_RECORD]
        with _native("start"):
            state = self.compiled.handle.start()
            if tokens and not state.commit_tokens(tokens):
                raise PeerError(f"glrmask refused tokens it had taken before ({len(tokens)} replayed)")
        self.state = state

    def _accepting(self) -> bool:
        try:
            return bool(self.state.is_accepting())
        except BaseException as e:
            _raise_panic(e, "is_accepting")
            raise

    def _copy(self) -> GlrmaskMatcher:
        with _native("copy"):
            return GlrmaskMatcher(self.engine, self.compiled, self.state.copy())

    def _reset_state(self) -> None:
        with _native("start"):
            self.state = self.compiled.handle.start()

    # ---------------------------------------------------------- jump-forward --

    def _probe(self) -> Any:
        """A copy of the state to commit on (the live one stays as it is)."""
        with _native("copy"):
            return self.state.copy()

    def forced_bytes(self, limit: int = FORCED_LIMIT) -> bytes:
        """The bytes every completion starts with (none once accepting), on a copy of the
        state: glrmask's forced tokens' bytes, then byte by byte while the next byte is
        one: the first bytes of the mask's tokens are the bytes that may follow, but for
        a byte no one-byte token spells (``commit_bytes`` on a copy tells those)."""
        if not self._live_for_draft() or self._accepting_safe():
            return b""
        engine = self.engine
        tb, size, first = self.vocab.token_bytes, self.vocab.size, engine.first_byte
        probe = self._probe()
        row = self._row()
        with _native("commit_forced_tokens"):
            out = bytearray(b"".join(tb[t] for t in probe.commit_forced_tokens()))
            while len(out) < limit and not probe.is_accepting():
                probe.fill_mask(row)
                firsts = first[bm.allowed_ids(row, size)]
                if not len(firsts) or firsts.min() < 0 or firsts.min() != firsts.max():
                    break
                b = int(firsts[0])
                if any(c != b and probe.copy().commit_bytes(bytes([c])) for c in engine.unseen_bytes):
                    break
                if not probe.commit_bytes(bytes([b])):
                    break
                out.append(b)
        return bytes(out[:limit])

    def allows_bytes(self, data: bytes) -> bool:
        """glrmask's ``commit_bytes`` on a copy of the state."""
        if not self._live_for_draft():
            return False
        if not data:
            return True
        probe = self._probe()
        with _native("commit_bytes"):
            return bool(probe.commit_bytes(bytes(data)))

    def forced_tokens(self) -> list[int]:
        """The protocol's forced tokens (see the module doc), or with the engine option
        ``jump_forward="glrmask"`` glrmask's own (:meth:`native_forced_tokens`)."""
        if self.engine.jump_forward == "glrmask":
            return self.native_forced_tokens()
        return super().forced_tokens()

    def native_forced_tokens(self) -> list[int]:
        """glrmask's ``commit_forced_tokens`` (on a copy: the state is unchanged): the
        longest token at each step while what comes next cannot vary."""
        if not self._live_for_draft():
            return []
        probe = self._probe()
        with _native("commit_forced_tokens"):
            return [int(t) for t in probe.commit_forced_tokens()]
