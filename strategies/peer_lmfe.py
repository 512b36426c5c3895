"""``peer:lm-format-enforcer``: LM-format-enforcer (LMFE, the PyPI package
``lm-format-enforcer``) behind the :class:`~toolkit.core.protocol.MaskEngine` protocol.

LMFE is pure Python and character-level: a ``CharacterLevelParser`` (its own
``JsonSchemaParser`` for JSON Schema, ``RegexParser`` over an ``interegular`` FSM for
regexes) says which characters may come next, and a ``TokenEnforcer`` walks a prefix
tree of the tokens' *decoded strings* against it.  Its state is keyed on the whole
token sequence: ``get_allowed_tokens(tokens)`` finds the state of ``tokens[:-1]`` in a
dict of every prefix it has seen, feeds it the last token's characters and lists the
allowed ids (the EOS ids when the parser ``can_end()``).

How the adapter meets the protocol:

* **Tokenizer data** (``TokenEnforcerTokenizerData``) from masklab's
  :class:`~toolkit.core.vocab.Vocabulary`: each text token as ``(id, its bytes decoded
  as UTF-8, True)``.  Every token is marked a word start, so LMFE takes each token's
  characters from that string as they are (its decoder, which servers use to rebuild
  sentencepiece words, is never consulted); the strings are the exact bytes, so LMFE's
  character view is the vocabulary's.  Special and padding ids are not given to it.
  A text token whose bytes are **not valid UTF-8 on their own** (a byte-fallback piece,
  part of a multi-byte character: 1,352 of Llama-3's) has no string, so LMFE cannot
  express it: it is left out (:attr:`LMFormatEnforcerEngine.inexpressible`) and never
  allowed.  (LMFE's own transformers integration decodes such a token to ``"\\ufffd"``
  and lets it through wherever U+FFFD may stand, e.g. in every JSON string, which is
  neither the token's bytes nor exact.)  The masks are exact on the tokens LMFE can
  express, where its language is the input's.
* **Alphabet**: LMFE reads a negated class or ``.`` as "any character of the
  alphabet"; ``TokenEnforcer`` sets the alphabet to the *first* characters of the
  tokens, so a token whose later character starts no token (114 such characters in
  Llama-3) would be refused where ``[^"]`` allows it.  The adapter gives LMFE every
  character of the vocabulary instead (the parser's ``CharacterLevelParserConfig``).
* **Config**: the options below are LMFE's ``CharacterLevelParserConfig`` fields, passed
  explicitly (its ``LMFE_*`` environment variables are not read).
* **JSON Schema** goes to ``JsonSchemaParser`` (its own compiler, with its own language:
  it ignores many keywords; see ``tests/test_peer_lmfe.py``), a regex
  (:class:`~toolkit.grammar.RegexText`) to ``RegexParser``, a
  :class:`~toolkit.grammar.Grammar` to ``RegexParser`` through
  :meth:`Grammar.to_regex` (regular grammars; ``max_depth`` unrolls recursion).
  ``JsonSchemaParser`` keeps the regex parsers of ``pattern`` keywords in a cache shared
  by every schema of the process (a class attribute) and built with the alphabet of
  whichever vocabulary met the pattern first; the adapter gives each compiled schema a
  cache of its own.
* **Matchers**: one ``TokenEnforcer`` per matcher (as servers make one per request),
  over the compiled parser; the matcher keeps the token list (``rollback`` pops, a fork
  copies the list and shares the enforcer, whose caches are keyed by the sequence and by
  immutable parser states, so sharing is safe).  A mask is ``get_allowed_tokens`` turned
  into a bitmask row (LMFE's list, or its torch bitmask with ``use_bitmask``); a token is
  accepted when that mask allows it.  EOS is the protocol's: allowed where LMFE's parser
  ``can_end()`` (not where LMFE put the EOS id after an internal error, its fallback).
"""

from __future__ import annotations

import array
import json
import logging
import threading
import weakref
from collections.abc import Sequence
from time import perf_counter
from types import MappingProxyType
from typing import Any

import numpy as np

from strategies.declared import BUILT_IN
from strategies.peers import PeerCompiled, PeerEngine, PeerError, PeerMatcher
from toolkit.core import bitmask as bm
from toolkit.core.errors import UnsupportedGrammar
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.ir import Grammar

__all__ = ["LMFormatEnforcerEngine", "LMFormatEnforcerMatcher"]


class _FailureCatcher(logging.Filter):
    """LMFE reports an exception inside ``get_allowed_tokens`` (a schema keyword it
    reads only when the walk reaches it: a ``const`` that is not a string, a ``$ref`` it
    cannot resolve...) with ``logging.exception`` on the root logger, a traceback on
    stderr, and then allows the EOS ids alone ("Terminating the parser").  This filter,
    on the root logger, takes that record off (nothing is printed) and keeps its
    exception for the matcher, which raises it as a :class:`PeerError`: the protocol's
    error state (EOS only), with LMFE's message.  Other records pass."""

    PREFIX = "Unknown LMFormatEnforcer Problem"

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(self.PREFIX):
            exc = record.exc_info[1] if record.exc_info else None
            self.local.error = f"{type(exc).__name__}: {exc}" if exc is not None else record.getMessage()
            return False
        return True

    def install(self) -> None:
        root = logging.getLogger()
        if self not in root.filters:
            root.addFilter(self)


_CATCHER = _FailureCatcher()


class LMFormatEnforcerEngine(PeerEngine):
    """``peer:lm-format-enforcer``.

    Options (LMFE's ``CharacterLevelParserConfig``, its defaults):

    * ``max_consecutive_whitespaces`` (12): whitespace characters in a row that
      ``JsonSchemaParser`` allows (0: none at all);
    * ``force_json_field_order`` (False): object keys only in the order of the schema's
      ``required`` list while required keys are missing;
    * ``max_json_array_length`` (20): items of an array whose schema sets no
      ``maxItems`` (0: no limit);

    and the adapter's:

    * ``use_bitmask`` (False): LMFE's ``TokenList`` as a torch bitmask in masklab's
      layout (how vLLM's V1 backend builds it) instead of a list of ids (LMFE's default,
      its transformers integration): the same masks, other costs;
    * ``max_depth`` (None): for a :class:`Grammar` (:meth:`Grammar.to_regex`): None
      refuses a recursive grammar, an integer unrolls it (a subset of the language).
    """

    name = "peer:lm-format-enforcer"
    capabilities = BUILT_IN["peer:lm-format-enforcer"].capabilities
    #: keywords ``JsonSchemaParser`` compiles and does not read (shown one by one in
    #: ``tests/test_peer_lmfe.py::test_differs_ignored_keywords``): in each compile's
    #: ``unenforced`` where a schema holds them
    unenforced_keywords = MappingProxyType({
        **dict.fromkeys(("minimum", "maximum", "multipleOf"), "LMFE ignores numeric bounds and steps"),
        "format": "LMFE ignores format (any string)",
        "uniqueItems": "LMFE ignores uniqueItems",
        "minProperties": "LMFE ignores minProperties",
        "propertyNames": "LMFE ignores propertyNames",
        "prefixItems": "LMFE ignores prefixItems (items of any type)",
    })
    dist = "lm-format-enforcer"
    requires = BUILT_IN["peer:lm-format-enforcer"].requires
    native_inputs = frozenset({"json_schema", "regex"})

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        max_consecutive_whitespaces: int = 12,
        force_json_field_order: bool = False,
        max_json_array_length: int = 20,
        use_bitmask: bool = False,
        max_depth: int | None = None,
    ) -> None:
        import lmformatenforcer
        from lmformatenforcer.characterlevelparser import CharacterLevelParserConfig

        for key, value in (("max_consecutive_whitespaces", max_consecutive_whitespaces),
                           ("max_json_array_length", max_json_array_length)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{self.name}: option {key!r} takes an integer >= 0, got {value!r}")
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int)
                                      or max_depth < 0):
            raise ValueError(f"{self.name}: option 'max_depth' takes None or an integer >= 0, got {max_depth!r}")
        if use_bitmask:
            from lmformatenforcer.tokenlist import _HAS_TORCH

            if not _HAS_TORCH:
                raise ValueError(f"{self.name}: option 'use_bitmask' needs torch (LMFE's bitmasks are torch tensors)")
        super().__init__(vocab)
        self._lmfe = lmformatenforcer
        _CATCHER.install()
        self.use_bitmask = bool(use_bitmask)
        self.max_depth = max_depth
        self.options = {
            "max_consecutive_whitespaces": int(max_consecutive_whitespaces),
            "force_json_field_order": bool(force_json_field_order),
            "max_json_array_length": int(max_json_array_length),
            "use_bitmask": self.use_bitmask,
            "max_depth": max_depth,
        }
        tb = vocab.token_bytes
        regular: list[tuple[int, str, bool]] = []
        inexpressible: list[int] = []
        chars: set[str] = set()
        for i in vocab.text_token_ids().tolist():
            try:
                s = tb[i].decode("utf-8")
            except UnicodeDecodeError:
                inexpressible.append(i)
                continue
            regular.append((i, s, True))
            chars.update(s)
        #: text tokens LMFE cannot express (not valid UTF-8 alone): never allowed
        self.inexpressible = np.asarray(inexpressible, dtype=np.int64)
        #: every character of the expressible tokens: what LMFE's "any character" means here
        self.alphabet = "".join(sorted(chars))
        data = lmformatenforcer.TokenEnforcerTokenizerData(
            regular, self._decode, list(vocab.eos_ids), self.use_bitmask, vocab.size)
        # TokenEnforcer gives its parser a config with this alphabet (the tokens' first
        # characters, as shipped): the full one, so no parser ever sees another.
        data.tokenizer_alphabet = self.alphabet
        self.tokenizer_data = data
        self.config = CharacterLevelParserConfig(
            alphabet=self.alphabet,
            max_consecutive_whitespaces=int(max_consecutive_whitespaces),
            force_json_field_order=bool(force_json_field_order),
            max_json_array_length=int(max_json_array_length),
        )
        # LMFE's allowed lists -> bitmask rows (read-only), while LMFE keeps the list
        self._rows: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()

    def _decode(self, ids: Sequence[int]) -> str:
        """LMFE's decoder (it only calls it to name a prefix in its error log: every
        token is a word start)."""
        tb, n = self.vocab.token_bytes, self.vocab.size
        return b"".join(tb[i] for i in ids if 0 <= i < n).decode("utf-8", "replace")

    # ------------------------------------------------------------ compile --

    def _json_parser(self, schema: Any) -> Any:
        """``JsonSchemaParser(schema, config)`` with a ``pattern`` cache of its own (LMFE's
        is one dict for the whole process, see the module doc)."""
        if isinstance(schema, bool) or not isinstance(schema, dict):
            # JsonSchemaParser(True) fails inside pydantic; JsonSchemaParser(False) reads
            # ``false or any-JSON`` as any JSON, which would loosen the schema
            raise UnsupportedGrammar(
                f"{self.name}: LMFE's JsonSchemaParser reads a schema object, not {json.dumps(schema)[:40]}")
        context = self._lmfe.JsonSchemaParser._Context
        had = "regex_parser_cache" in context.__dict__
        shared = context.__dict__.get("regex_parser_cache")
        own: dict[str, Any] = {}
        context.regex_parser_cache = own
        try:
            parser = self._lmfe.JsonSchemaParser(schema, self.config)
        finally:
            if had:
                context.regex_parser_cache = shared
            else:
                del context.regex_parser_cache
        parser.context.regex_parser_cache = own  # the instance's from now on
        return parser

    def _regex_parser(self, pattern: str) -> Any:
        return self._lmfe.RegexParser(pattern, self.config)

    def _compile_schema(self, text: str) -> PeerCompiled:
        schema = json.loads(text)
        t0 = perf_counter()
        parser = self._json_parser(schema)
        return PeerCompiled(parser, text, "json_schema", engine_s=perf_counter() - t0)

    def _compile_native(self, fmt: str, text: str) -> PeerCompiled:
        """A regex, read by LMFE's ``RegexParser`` (interegular's parser and FSM)."""
        if fmt != "regex":
            raise UnsupportedGrammar(f"{self.name} reads no {fmt} text itself")
        t0 = perf_counter()
        parser = self._regex_parser(text)
        return PeerCompiled(parser, text, "regex", engine_s=perf_counter() - t0)

    def _grammar_source(self, grammar: Grammar) -> tuple[str, str]:
        return grammar.to_regex(max_depth=self.max_depth), "regex"

    def _compile_grammar(self, grammar: Grammar) -> PeerCompiled:
        try:
            regex, kind = self._grammar_source(grammar)
        except UnsupportedGrammar as e:
            raise UnsupportedGrammar(f"{self.name} compiles regular grammars only (or set the option "
                                     f"max_depth to unroll recursion): {e}") from e
        t0 = perf_counter()
        parser = self._regex_parser(regex)
        return PeerCompiled(parser, regex, kind, engine_s=perf_counter() - t0)

    # ------------------------------------------------------------ matchers --

    def _enforcer(self, parser: Any) -> Any:
        """A ``TokenEnforcer`` over ``parser`` (which it gives a config of its own: set
        back to the adapter's, the same alphabet and the options)."""
        enforcer = self._lmfe.TokenEnforcer(self.tokenizer_data, parser)
        parser.config = self.config
        return enforcer

    def matcher(self, compiled: PeerCompiled) -> LMFormatEnforcerMatcher:
        t0 = perf_counter()
        enforcer = self._enforcer(compiled.handle)
        out = LMFormatEnforcerMatcher(self, compiled, enforcer)
        out.engine_s = perf_counter() - t0
        return out

    def row_of(self, allowed: Any) -> np.ndarray:
        """The bitmask row (read-only; EOS bits as LMFE set them) of an LMFE ``TokenList``,
        made once per list object (LMFE hands the same list again for a state it cached)."""
        row = self._rows.get(allowed)
        if row is not None:
            return row
        words = bm.words(self.vocab.size)
        if self.use_bitmask:
            row = allowed.allowed_tokens.numpy()[:words].astype(np.int32, copy=True)
        else:
            ids = allowed.allowed_tokens
            flags = np.zeros(words * 32, dtype=np.bool_)  # (its own: the batch fallback runs threads)
            if ids:  # array.array unboxes a list of ints twice as fast as numpy does
                flags[np.frombuffer(array.array("i", ids), dtype=np.int32)] = True
            row = np.packbits(flags, bitorder="little").view("<i4").astype(np.int32, copy=True)
        row.flags.writeable = False
        self._rows[allowed] = row
        return row

    # --------------------------------------------------- the engine called directly --

    def _direct_compile(self, source: str, kind: str) -> Any:
        if kind == "json_schema":
            return self._json_parser(json.loads(source))
        return self._regex_parser(source)

    def _direct_calls(self, handle: Any) -> tuple[Any, Any]:
        # As servers call LMFE: a TokenEnforcer per request over the compiled parser, the
        # growing token list, get_allowed_tokens on it for each mask and TokenList's
        # is_token_allowed for the sampled token (vLLM's V1 backend; with use_bitmask it
        # also copies LMFE's bitmask into its preallocated row, as vLLM does).
        row = bm.allocate(self.vocab.size)[0]
        words = row.shape[0]

        def new_matcher() -> tuple[Any, list[int]]:
            return self._enforcer(handle), []

        bitmask = self.use_bitmask

        def step(g: tuple[Any, list[int]], t: int | None, _row: np.ndarray = row) -> bool:
            enforcer, seq = g
            allowed = enforcer.get_allowed_tokens(seq)
            if bitmask:  # as vLLM V1 calls it: LMFE's own bitmask, copied into the row
                _row[:] = allowed.allowed_tokens.numpy()[:words]
            if t is None:
                return True
            if not allowed.is_token_allowed(t):
                return False
            seq.append(t)
            return True

        return new_matcher, step


class LMFormatEnforcerMatcher(PeerMatcher):
    """A matcher over one ``TokenEnforcer``: the text tokens accepted so far (EOS is the
    protocol's and never reaches LMFE) and the mask of that sequence, kept until it
    changes."""

    engine: LMFormatEnforcerEngine

    def __init__(self, engine: LMFormatEnforcerEngine, compiled: PeerCompiled, enforcer: Any,
                 seq: list[int] | None = None) -> None:
        super().__init__(engine, compiled)
        self.enforcer = enforcer
        self.seq: list[int] = [] if seq is None else seq
        self._allowed: Any = None  # LMFE's TokenList for ``seq`` (None: not asked yet)
        self._end: bool | None = None  # whether LMFE's parser can end after ``seq`` (None: not known)

    def _ask(self) -> Any:
        """LMFE's allowed tokens after ``seq`` (its own call, timed into ``engine_s``)."""
        allowed = self._allowed
        if allowed is None:
            caught = _CATCHER.local
            caught.error = None
            t0 = perf_counter()
            try:
                allowed = self.enforcer.get_allowed_tokens(self.seq)
            except Exception as e:  # LMFE re-raises its own exceptions (LMFormatEnforcerException)
                raise PeerError(f"{self.engine.name}: {type(e).__name__}: {e}") from e
            finally:
                self.engine_s += perf_counter() - t0
            if caught.error is not None:
                # LMFE keeps its EOS-only fallback for this sequence: dropped, so that a
                # fork or a later walk through it fails (and says so) again
                self.enforcer.prefix_states.pop(tuple(self.seq), None)
                prefix = self.engine._decode(self.seq)[-40:]
                raise PeerError(f"{self.engine.name}: LMFE failed after {prefix!r}: {caught.error}")
            self._allowed = allowed
        return allowed

    def _fill_native(self, row: np.ndarray) -> None:
        row[:] = self.engine.row_of(self._ask())

    def _advance(self, token_id: int, data: bytes) -> Any:
        # Every prefix of ``seq`` must have been asked before a longer one is (LMFE reads a
        # sequence whose prefix it has not seen as a new prompt), so even a trusted token
        # (the harness's, after a fill) is appended only once its state was asked.
        allowed = self._ask()
        if not self._trusted:
            row = self.engine.row_of(allowed)
            if not (int(row[token_id >> 5]) >> (token_id & 31)) & 1:
                return None
        self.seq.append(token_id)
        self._allowed = self._end = None
        return True

    def _undo(self, record: Any) -> None:
        self.seq.pop()
        self._allowed = self._end = None

    def _accepting(self) -> bool:
        end = self._end
        if end is None:
            self._ask()
            state = self.enforcer.prefix_states.get(tuple(self.seq))
            if state is None:  # pragma: no cover - _ask has just stored it
                raise PeerError(f"{self.engine.name}: LMFE has no state for the sequence it was asked about")
            end = self._end = bool(state.parser.can_end())
        return end

    def _copy(self) -> LMFormatEnforcerMatcher:
        other = LMFormatEnforcerMatcher(self.engine, self.compiled, self.enforcer, list(self.seq))
        other._allowed, other._end = self._allowed, self._end
        return other

    def _reset_state(self) -> None:
        # a new enforcer, as for a new request: LMFE's caches of every prefix seen go
        self.enforcer = self.engine._enforcer(self.compiled.handle)
        self.seq = []
        self._allowed = self._end = None
