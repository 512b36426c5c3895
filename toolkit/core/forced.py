"""Forced continuations as tokens: jump-forward decoding's tokenization step.

Where a grammar allows one continuation only (a property name, ``": "``, a closing
brace), a matcher's ``forced_bytes()`` gives the bytes every completion must start
with.  Turning them into tokens the model can be fed without sampling has one trap, the
*token boundary*: the canonical tokenizer may merge the last forced bytes with what the
model writes next, so a token that ends the forced bytes can be the wrong one (forced
``{"name":"`` ends with ``":"``, but the model may go on with ``":"x`` that the
tokenizer writes as ``":`` + ``"x``).  :func:`forced_tokens` follows llguidance's rule
for this (``TokenParser::ff_tokens`` and ``TokTrie::chop_tokens``), so masklab's
strategies give the tokens llguidance gives:

1. the forced bytes, after the bytes of the last token consumed, are tokenized with
   the canonical tokenizer (valid UTF-8 through :meth:`Vocabulary.encode`, invalid
   bytes by greedy longest match); if that tokenization does not start with that last
   token, the forced bytes are tokenized alone;
2. among the last four tokens (at most the longest token's length in bytes), the
   longest byte suffix that some vocabulary token *strictly extends with bytes the
   grammar allows after the forced bytes* is found, and the fewest trailing tokens that
   cover it are dropped: the model's next token may merge with those bytes;
3. the last consumed token is not returned.

Every forced token is then allowed and accepted in turn, and the forced tokens are what
the canonical tokenizer gives for any allowed text that starts with the forced bytes,
up to where a token could still grow.

This module is the rule's definition, and what every engine's ``forced_tokens`` runs.
masklab's strategies run the same rule in C, without the GIL, where the vocabulary's
tokenizer is a BPE that :class:`toolkit.core.bpe.BpeTable` reads (Llama 3, Tekken, Hugging
Face BPE models with ranked merges such as Mistral 7B v0.3's):
:meth:`toolkit.core.session.Session.forced_tokens_c`, and in the batch's jump-forward
call; they fall back to this module for text the C tokenizer does not answer for.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from toolkit.core.errors import VocabError
from toolkit.core.vocab import Vocabulary

__all__ = ["TokenExtensions", "canonical_tokens", "marked_tokens", "chop_count", "forced_tokens", "MAX_LOOKBACK",
           "TOKENIZED_CACHE"]

MAX_LOOKBACK = 4
"""Tokens at the end of a forced run that the chop looks at (llguidance's ``max_token_lookback``)."""

TOKENIZED_CACHE = 1 << 14
"""Forced texts whose canonical tokens :func:`marked_tokens` remembers per vocabulary."""


class TokenExtensions:
    """The text tokens of a vocabulary sorted by their bytes: the tokens that extend a
    byte string, and greedy longest-match tokenization.  One per vocabulary
    (:meth:`of`)."""

    _cache: dict[int, TokenExtensions] = {}

    def __init__(self, vocab: Vocabulary) -> None:
        pairs: dict[bytes, int] = {}
        for i in vocab.text_token_ids().tolist():
            pairs.setdefault(vocab.token_bytes[i], i)  # equal bytes: the smallest id
        self.keys = sorted(pairs)
        self.ids = pairs
        self.max_len = max((len(k) for k in self.keys), default=0)
        #: each byte's single-byte token, where the vocabulary has one
        self.single = {k: t for k, t in pairs.items() if len(k) == 1}
        self.vocab = vocab
        #: :func:`marked_tokens`' memory: text -> (tokens, fixed)
        self.tokenized: dict[bytes, tuple[tuple[int, ...], int]] = {}

    @classmethod
    def of(cls, vocab: Vocabulary) -> TokenExtensions:
        """The index of ``vocab`` (made once per vocabulary object)."""
        hit = cls._cache.get(id(vocab))
        if hit is None or hit.vocab is not vocab:  # (the index holds its vocabulary: an id is never reused)
            hit = cls._cache[id(vocab)] = cls(vocab)
        return hit

    def extensions(self, prefix: bytes) -> Iterator[bytes]:
        """What each token that strictly extends ``prefix`` adds to it, in byte order."""
        j = bisect_left(self.keys, prefix)
        n = len(prefix)
        while j < len(self.keys) and self.keys[j].startswith(prefix):
            if len(self.keys[j]) > n:
                yield self.keys[j][n:]
            j += 1

    def extended_by(self, prefix: bytes, viable: Callable[[bytes], bool]) -> bool:
        """Does a token strictly extend ``prefix`` with bytes ``viable`` allows?  A walk of
        the token trie (ranges of the sorted tokens) that asks ``viable`` once per node and
        skips every token under a refused one, as llguidance's ``has_valid_extensions``."""
        keys = self.keys
        n0 = len(prefix)
        stack = [prefix]
        while stack:
            p = stack.pop()
            j = bisect_left(keys, p)
            if j < len(keys) and keys[j] == p:
                if len(p) > n0:
                    return True  # a token ends here, all of its extension allowed
                j += 1
            end = bisect_left(keys, _after(p), j) if p else len(keys)
            children = []
            while j < end:
                child = keys[j][: len(p) + 1]
                if viable(child[n0:]):
                    children.append(child)
                j = bisect_left(keys, _after(child), j, end)
            stack.extend(reversed(children))  # byte order, depth first
        return False

    def greedy(self, data: bytes) -> list[int]:
        """Longest-match tokenization; a byte no token starts with is skipped (as
        llguidance's ``greedy_tokenize`` does)."""
        out: list[int] = []
        i = 0
        while i < len(data):
            for n in range(min(self.max_len, len(data) - i), 0, -1):
                t = self.ids.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                i += 1
        return out


def _after(prefix: bytes) -> bytes:
    """The smallest byte string above every string that starts with ``prefix``."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else b"\xff" * (len(prefix) + 1)


def canonical_tokens(vocab: Vocabulary, data: bytes) -> list[int]:
    """The canonical tokenization of ``data``: valid UTF-8 runs through the vocabulary's
    tokenizer, invalid bytes by greedy longest match (llguidance's
    ``tokenize_with_greedy_fallback``)."""
    return marked_tokens(vocab, data)[0]


def marked_tokens(vocab: Vocabulary, data: bytes) -> tuple[list[int], int]:
    """:func:`canonical_tokens` of text with special-token marks (``b"\\xff128008\\xff"``,
    :func:`toolkit.grammar.special.mark_bytes`: a grammar can force a special token):
    each mark is its token; returns the tokens and how many of them are fixed (up to the
    last mark: never re-tokenized or cut, as llguidance's ``tokenize_bytes_marker``).

    Remembered per vocabulary (:data:`TOKENIZED_CACHE` texts, then forgotten all at
    once): a grammar forces the same keys and punctuation again and again."""
    memo = TokenExtensions.of(vocab).tokenized
    hit = memo.get(data)
    if hit is None:
        if len(memo) >= TOKENIZED_CACHE:
            memo.clear()
        hit = memo[data] = _marked_tokens(vocab, data)
    return list(hit[0]), hit[1]


def _marked_tokens(vocab: Vocabulary, data: bytes) -> tuple[tuple[int, ...], int]:
    if b"\xff" not in data:  # no marks (the common case)
        return tuple(_text_tokens(vocab, data)), 0
    out: list[int] = []
    fixed = 0
    while b"\xff" in data:
        i = data.index(b"\xff")
        j = data.find(b"\xff", i + 1)
        out += _text_tokens(vocab, data[:i])
        body = data[i + 1: j] if j > 0 else b""
        if j < 0 or not body.isdigit() or int(body) >= vocab.size:
            return tuple(out), fixed  # a mark not complete yet: the tokens before it
        out.append(int(body))
        fixed = len(out)
        data = data[j + 1:]
    return tuple(out + _text_tokens(vocab, data)), fixed


def _text_tokens(vocab: Vocabulary, data: bytes) -> list[int]:
    out: list[int] = []
    while data:
        try:
            text = data.decode("utf-8")
            valid, bad, data = text, b"", b""
        except UnicodeDecodeError as e:
            valid = data[: e.start].decode("utf-8")
            bad, data = data[e.start : e.end], data[e.end :]
        if valid:
            try:
                out += vocab.encode(valid)
            except VocabError:  # a tokenizer that cannot reproduce the text: longest match
                out += TokenExtensions.of(vocab).greedy(valid.encode("utf-8"))
        if bad:
            out += TokenExtensions.of(vocab).greedy(bad)
    return out


def chop_count(vocab: Vocabulary, tokens: list[int], extends: Callable[[bytes], bool]) -> int:
    """How many trailing ``tokens`` to drop: the fewest that cover the longest byte suffix
    (of the last :data:`MAX_LOOKBACK` tokens) that a vocabulary token strictly extends
    with bytes ``extends`` allows (the grammar, after every forced byte; it is asked
    about each prefix of an extension before the extension).  masklab's strategies do
    the same in one C call (:meth:`toolkit.core.session.Session.chop_tokens`)."""
    ext = TokenExtensions.of(vocab)
    tail = b"".join(vocab.token_bytes[t] for t in tokens[-MAX_LOOKBACK:])
    tail = tail[max(0, len(tail) - ext.max_len):]
    for start in range(len(tail)):
        if not ext.extended_by(tail[start:], extends):
            continue
        covered = 0
        for k in range(1, len(tokens) + 1):
            covered += len(vocab.token_bytes[tokens[-k]])
            if covered >= len(tail) - start:
                return k
    return 0


def forced_tokens(vocab: Vocabulary, last: int | None, forced: bytes, allows: Callable[[bytes], bool],
                  chop: Callable[[bytes, list[int]], int] | None = None) -> list[int]:
    """The tokens to feed for ``forced`` bytes (see the module doc).

    ``last``: the last text token consumed (None: none, or not a text token);
    ``allows(data)``: whether ``forced + data`` can follow the matcher's state (the
    grammar's check; memoized here per prefix, so a trie of candidates costs one check
    per node); ``chop(forced, tokens)``: :func:`chop_count` of the text tokens after the
    last mark in one call (masklab's strategies: in C, without the GIL)."""
    if not forced:
        return []
    existing: list[int] = []
    prefix = b""
    if last is not None and 0 <= last < vocab.size and vocab.token_bytes[last] and not vocab.is_special(last):
        existing, prefix = [last], vocab.token_bytes[last]
    tokens, fixed = marked_tokens(vocab, prefix + forced)
    if tokens[: len(existing)] != existing:  # the last token would be rewritten: the forced bytes alone
        (tokens, fixed), existing = marked_tokens(vocab, forced), []
    fixed = max(fixed, len(existing))
    if chop is not None:
        return tokens[len(existing): len(tokens) - chop(forced, tokens[fixed:])]
    seen: dict[bytes, bool] = {}

    def extends(extra: bytes) -> bool:  # the trie walk asks for each prefix in turn: cache them
        ok = seen.get(extra)
        if ok is None:
            ok = seen[extra] = allows(forced + extra)
        return ok

    return tokens[len(existing): len(tokens) - chop_count(vocab, tokens[fixed:], extends)]
