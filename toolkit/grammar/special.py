"""Special tokens as token-level terminals (llguidance's ``<|eom_id|>``, ``<[128010]>``).

A grammar may ask for a special token by name or id: it is allowed exactly where the
grammar puts it, and never spelled as text.  The IR says this with bytes no text has.
Every special token stands for its *mark*, ``0xFF``, its id in ASCII digits, ``0xFF``
(``<[128010]>`` is ``b"\\xff128010\\xff"``).  ``0xFF`` is never part of UTF-8, and the
IR's other terminals are languages of UTF-8 text, so no text terminal meets a mark.
In the IR's regexes the byte ``0xFF`` is written ``\\udcff`` (U+DCFF, the character
Python's ``surrogateescape`` gives that byte; :mod:`toolkit.automata.regex` reads it as the raw
byte, and no other surrogate has a byte form).

* A :class:`~toolkit.grammar.Terminal` with ``special`` set is such a terminal: before
  a vocabulary is known its language is every mark (:data:`ANY_MARK_REGEX`);
  :meth:`Grammar.bind <toolkit.grammar.Grammar.bind>` resolves the names and ranges
  against a vocabulary (:func:`resolve`) and narrows it to the marks of those ids.
* An engine compiles a grammar with special terminals over :func:`vocab_view`: the
  same ids, where each special token the grammar names is a "text" token whose bytes
  are its mark, and every real token holding the byte ``0xFF`` (never valid text, so
  never allowed by any grammar) has no bytes.  A byte-level token that could start a
  mark is thus gone, and the only way to produce a mark is its special token.  The
  strategies, ``naive`` included, then need nothing of their own: their tries,
  lexers and recognizers see one more kind of byte string.

What is read (llguidance's ``docs/syntax.md``): ``<|name|>``, ``<name>`` and ``</name>`` (a special
token of the tokenizer, by its name), ``<[ID]>``, ``<[A-B]>`` and lists
``<[A-B,C,...]>`` (ids, ranges inclusive), ``<[^...]>`` (every token but those) and
``<[*]>`` (every token).  "Every token" is every id the tokenizer defines: padding ids
and ids without bytes are never allowed (the protocol's rule).

**Tokens with another meaning** (:func:`dual_ids`): an id range may hold text tokens
(``<[*]>`` holds them all) and real tokens holding ``0xFF``.  Such a token is read as
llguidance reads it: where the grammar can take a token-level terminal holding it
(after ending the lexeme in progress), it *is* that terminal, one token; elsewhere it
is its text.  The vocabulary view gives each such id a *shadow*, one more id past the
vocabulary whose bytes are the id's mark; an engine's matcher over the view is wrapped
by :class:`strategies._base.DualMatcher`, which ORs a shadow's bit into its id's and
accepts the shadow first.

**EOS is never a token-level terminal.**  It ends the grammar where the grammar is
complete (the protocol's rule), so a list that names an EOS id is refused (the message
gives the list without it), and ``<[*]>`` and ``<[^...]>`` leave the EOS ids out.
llguidance's own mask sets EOS's bit wherever ``<[*]>`` may start, but its matcher
then stops in a state its grammar does not accept, and its ``validate_tokens`` refuses
EOS there; ``peer:llguidance`` applies the protocol's EOS rule to its masks, so the two
agree.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.core.errors import GrammarError, UnsupportedGrammar
from toolkit.core.vocab import Vocabulary
from toolkit.grammar.earley import ByteRecognizer, compile_cfg

__all__ = ["MARK", "ANY_MARK_REGEX", "SpecialSpec", "parse_spec", "resolve", "dual_ids", "mark_bytes",
           "mark_regex", "vocab_view", "marked_bytes", "spelled", "encode_with_specials"]

MARK = "\udcff"
"""The byte ``0xFF`` in the IR's regexes (see the module doc)."""

ANY_MARK_REGEX = MARK + "[0-9]+" + MARK
"""The language of a special terminal before it is bound to a vocabulary: every mark."""

_NAME = re.compile(r"<\|[^|\n]*\|>|</?[A-Za-z_][^>\s]*>")
_IDS = re.compile(r"<\[([^\]\n]*)\]>")
_ITEM = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


@dataclass(frozen=True)
class SpecialSpec:
    """A special-token terminal as written: ``name`` (``<|eom_id|>``) or ``ranges`` of ids
    (``negated``: every token but those; ``<[*]>`` is negated with no ranges)."""

    text: str
    name: str | None = None
    ranges: tuple[tuple[int, int], ...] = ()
    negated: bool = False


def parse_spec(text: str, line: int | None = None, column: int | None = None) -> SpecialSpec:
    """Read ``<|name|>``, ``<name>`` or ``<[ids]>`` (see the module doc); ``line`` and
    ``column`` locate the errors."""
    if _NAME.fullmatch(text):
        return SpecialSpec(text, name=text)
    m = _IDS.fullmatch(text)
    if m is None:
        raise GrammarError(f"{text!r} is not a special token (<|name|>, <name>, <[id]>, <[a-b,c]>)", line, column)
    body = m.group(1).strip()
    if body == "*":
        return SpecialSpec(text, negated=True)
    negated = body.startswith("^")
    if negated:
        body = body[1:]
    ranges = []
    for item in body.split(","):
        im = _ITEM.fullmatch(item)
        if im is None:
            raise GrammarError(f"{text}: {item.strip()!r} is not a token id or a range a-b", line, column)
        lo = int(im.group(1))
        hi = int(im.group(2)) if im.group(2) is not None else lo
        if hi < lo:
            raise GrammarError(f"{text}: the range {lo}-{hi} is empty", line, column)
        ranges.append((lo, hi))
    return SpecialSpec(text, ranges=tuple(ranges), negated=negated)


def resolve(spec: SpecialSpec, vocab: Vocabulary) -> tuple[int, ...]:
    """The ids ``spec`` stands for in ``vocab`` (sorted).  :class:`GrammarError` for a
    name or id the vocabulary does not have (past its end, padding, an id without
    bytes), or a negated list that leaves no token; :class:`UnsupportedGrammar` for a
    list naming an EOS id (``<[*]>`` and ``<[^...]>`` leave EOS out: see the module doc)."""
    if spec.name is not None:
        ids = _names(vocab).get(spec.name)
        if ids is None:
            known = sorted(vocab.special_tokens.values())
            shown = ", ".join(known[:8]) + (f", ... ({len(known)} in all)" if len(known) > 8 else "")
            raise GrammarError(f"special token {spec.name} is not in vocabulary {vocab.name!r}"
                               + (f" (its special tokens: {shown})" if known else " (it has no special tokens)"))
        return _without_eos(spec, vocab, sorted(ids))
    tokens = _tokens(vocab)
    listed = np.zeros(vocab.size, dtype=bool)
    for lo, hi in spec.ranges:
        if hi >= vocab.size:
            raise GrammarError(f"{spec.text}: id {max(lo, vocab.size)} is past vocabulary {vocab.name!r} "
                               f"({vocab.size} ids)")
        listed[lo : hi + 1] = True
    if spec.negated:
        keep = tokens & ~listed
        keep[list(vocab.eos_ids)] = False  # EOS ends the grammar, never a token-level terminal
        out = np.flatnonzero(keep)
        if not len(out):
            raise GrammarError(f"{spec.text} leaves no token of vocabulary {vocab.name!r} but EOS")
        return tuple(out.tolist())
    bad = np.flatnonzero(listed & ~tokens)
    if len(bad):
        t = int(bad[0])
        what = "a padding id" if t >= vocab.n_defined else "an id without bytes"
        raise GrammarError(f"{spec.text}: id {t} is {what} in vocabulary {vocab.name!r}, not a token")
    return _without_eos(spec, vocab, np.flatnonzero(listed).tolist())


def _without_eos(spec: SpecialSpec, vocab: Vocabulary, out: list[int]) -> tuple[int, ...]:
    """``out``; :class:`UnsupportedGrammar` when it names an EOS id."""
    eos = sorted(set(out) & set(vocab.eos_ids))
    if eos:
        rest = sorted(set(out) - set(eos))
        hint = f"; without it: <[{','.join(f'{a}-{b}' if b > a else str(a) for a, b in _runs(rest))}]>" if rest else ""
        raise UnsupportedGrammar(f"{spec.text}: {vocab.special_tokens[eos[0]]} (id {eos[0]}) ends generation in "
                                 f"vocabulary {vocab.name!r}; a grammar ends where EOS is allowed, so it cannot "
                                 f"name it{hint}")
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _tokens(vocab: Vocabulary) -> np.ndarray:
    """Per id: is it a token a range may hold (a special token, or one with bytes)?"""
    out = np.zeros(vocab.size, dtype=bool)
    out[: vocab.n_defined] = [bool(b) for b in vocab.token_bytes[: vocab.n_defined]]
    out[list(vocab.special_tokens)] = True
    return out


def dual_ids(vocab: Vocabulary, ids: frozenset[int] | tuple[int, ...]) -> tuple[int, ...]:
    """Of ``ids`` (a grammar's token-level terminals), those with another meaning in
    ``vocab``: text tokens and real tokens holding ``0xFF`` (see the module doc), sorted.
    The others are special tokens, which only a grammar gives a meaning."""
    specials = vocab.special_tokens
    return tuple(sorted(t for t in ids if t not in specials))


def _runs(ids: list[int] | tuple[int, ...]) -> list[tuple[int, int]]:
    """Sorted ids as inclusive runs ``(a, b)``."""
    runs: list[list[int]] = []
    for t in ids:
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return [(a, b) for a, b in runs]


@functools.lru_cache(maxsize=8)
def _names(vocab: Vocabulary) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for i, n in vocab.special_tokens.items():
        out.setdefault(n, []).append(i)
    return {n: tuple(v) for n, v in out.items()}


def mark_bytes(token_id: int) -> bytes:
    """The bytes special token ``token_id`` stands for in the IR."""
    return b"\xff" + str(int(token_id)).encode("ascii") + b"\xff"


def marked_bytes(vocab: Vocabulary, ids: list[int], grammar: Any = None) -> bytes:
    """The bytes of ``ids`` as a grammar reads them: text tokens' bytes, special tokens'
    marks (what :meth:`Grammar.accepts <toolkit.grammar.Grammar.accepts>` of a grammar
    bound to ``vocab`` checks).  With ``grammar`` (bound to ``vocab``), a token with
    another meaning (:func:`dual_ids`) is its mark where the grammar can take it so,
    as the engines read it (see the module doc)."""
    specials = vocab.special_tokens
    duals = frozenset(dual_ids(vocab, grammar.special_ids(vocab))) if grammar is not None and \
        grammar.special_terminals else frozenset()
    if not duals:
        return b"".join(mark_bytes(t) if t in specials else vocab.token_bytes[t] for t in ids)

    rec: ByteRecognizer | None = ByteRecognizer(compile_cfg(grammar))
    out = []
    for t in ids:
        data = mark_bytes(t) if t in specials else vocab.token_bytes[t]
        if rec is not None:
            if t in duals and rec.push_bytes(mark_bytes(t)):
                data = mark_bytes(t)
            elif not rec.push_bytes(data):
                rec = None  # not in the language: the rest as written
        out.append(data)
    return b"".join(out)


def spelled(vocab: Vocabulary, ids: list[int]) -> bytes:
    """The bytes of ``ids`` for people to read: special tokens by their names (padding
    ids, which no mask allows, as nothing)."""
    specials = vocab.special_tokens
    return b"".join(specials[t].encode() if t in specials else vocab.token_bytes[t] for t in ids)


def encode_with_specials(vocab: Vocabulary, text: str, specs: list[str]) -> list[int]:
    """``text``'s ids where the special tokens of ``specs`` that name one token
    (``<|eom_id|>``), and ``<[ID]>`` of any special id, are those tokens; the text
    between them is encoded as plain text (``vocab.encode``)."""
    names = sorted({s for s in specs if _NAME.fullmatch(s)}, key=len, reverse=True)
    pattern = re.compile("|".join([*map(re.escape, names), r"<\[\d+\]>"]))
    out: list[int] = []
    pos = 0
    for m in pattern.finditer(text):
        out += vocab.encode(text[pos : m.start()]) if m.start() > pos else []
        ids = resolve(parse_spec(m.group()), vocab)
        if len(ids) != 1:
            raise GrammarError(f"{m.group()} names {len(ids)} tokens in vocabulary {vocab.name!r}, not one")
        out.append(ids[0])
        pos = m.end()
    return out + (vocab.encode(text[pos:]) if pos < len(text) else [])


def mark_regex(ids: tuple[int, ...]) -> str:
    """The IR regex of the marks of ``ids`` (sorted; runs of ids as digit ranges, so a
    range of the whole vocabulary is a short regex)."""
    if not ids:
        raise ValueError("a special terminal stands for at least one id")
    alts = [alt for lo, hi in _runs(ids) for alt in _decimal_range(lo, hi)]
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    return MARK + body + MARK


def _decimal_range(lo: int, hi: int) -> list[str]:
    """Regexes whose union is the decimal numbers ``lo..hi`` as ``str`` writes them."""
    out = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        a = max(lo, 10 ** (width - 1) if width > 1 else 0)
        b = min(hi, 10**width - 1)
        if a <= b:
            out += _same_width(str(a), str(b))
    return out


def _same_width(a: str, b: str) -> list[str]:
    """Regexes for the digit strings from ``a`` to ``b`` (same width, ``a <= b``)."""
    n = len(a)
    if n == 1:
        return [a if a == b else f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [a[0] + x for x in _same_width(a[1:], b[1:])]
    out = []
    first, last = int(a[0]), int(b[0])
    if a[1:] != "0" * (n - 1):
        out += [a[0] + x for x in _same_width(a[1:], "9" * (n - 1))]
        first += 1
    full_last = b[1:] == "9" * (n - 1)
    if not full_last:
        last -= 1
    if first <= last:
        digit = str(first) if first == last else f"[{first}-{last}]"
        out.append(digit + ("[0-9]" if n == 2 else f"[0-9]{{{n - 1}}}"))
    if not full_last:
        out += [b[0] + x for x in _same_width("0" * (n - 1), b[1:])]
    return out


@functools.lru_cache(maxsize=16)
def vocab_view(vocab: Vocabulary, ids: frozenset[int]) -> Vocabulary:
    """``vocab`` as an engine compiling a grammar with the token-level terminals ``ids``
    sees it (see the module doc): the same ids, names and EOS ids; the special tokens of
    ``ids`` are text tokens whose bytes are their marks; real tokens holding ``0xFF``
    have no bytes; then, past ``vocab.size``, a shadow per :func:`dual_ids` id (in that
    order) whose bytes are the id's mark."""
    if not ids:
        return vocab
    entries = [b"" if b"\xff" in b else b for b in vocab.token_bytes]
    duals = dual_ids(vocab, ids)
    for t in set(ids) - set(duals):
        entries[t] = mark_bytes(t)
    specials = {i: n for i, n in vocab.special_tokens.items() if i not in ids}
    tag = hashlib.sha1(",".join(map(str, sorted(ids))).encode()).hexdigest()[:10]
    if not duals:
        return Vocabulary(f"{vocab.name}+special:{tag}", entries, special_tokens=specials,
                          eos_ids=vocab.eos_ids, n_defined=vocab.n_defined, encoder=vocab._encoder,
                          bpe_pattern=vocab.bpe_pattern,
                          bpe_merges=vocab.bpe_merges)
    entries += [b"\xff%d\xff" % t for t in duals]  # mark_bytes, written out: 128k of them for <[*]>
    return Vocabulary(f"{vocab.name}+special:{tag}", entries, special_tokens=specials,
                      eos_ids=vocab.eos_ids, encoder=vocab._encoder, bpe_pattern=vocab.bpe_pattern,
                      bpe_merges=vocab.bpe_merges)
