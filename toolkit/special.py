"""Special tokens as token-level terminals (llguidance's ``<|eom_id|>``, ``<[128010]>``).

A grammar may ask for a special token by name or id: it is allowed exactly where the
grammar puts it, and never spelled as text.  The IR says this with bytes no text has.
Every special token stands for its *mark*, ``0xFF``, its id in ASCII digits, ``0xFF``
(``<[128010]>`` is ``b"\\xff128010\\xff"``).  ``0xFF`` is never part of UTF-8, and the
IR's other terminals are languages of UTF-8 text, so no text terminal meets a mark.
In the IR's regexes the byte ``0xFF`` is written ``\\udcff`` (U+DCFF, the character
Python's ``surrogateescape`` gives that byte; :mod:`toolkit.regex` reads it as the raw
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
``<[A-B,C,...]>`` (ids, ranges inclusive).  Refused with
:class:`~toolkit.errors.UnsupportedGrammar`: ``<[*]>`` and negated lists ``<[^...]>``
(they match text tokens as single tokens, which the IR's byte-level text cannot say),
ids that are text tokens, and the vocabulary's EOS tokens (a grammar ends where EOS
is allowed).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass

from toolkit.errors import GrammarError, UnsupportedGrammar
from toolkit.vocab import Vocabulary

__all__ = ["MARK", "ANY_MARK_REGEX", "SpecialSpec", "parse_spec", "resolve", "mark_bytes", "mark_regex",
           "vocab_view", "marked_bytes", "spelled", "encode_with_specials", "MAX_SPECIAL_IDS"]

MARK = "\udcff"
"""The byte ``0xFF`` in the IR's regexes (see the module doc)."""

ANY_MARK_REGEX = MARK + "[0-9]+" + MARK
"""The language of a special terminal before it is bound to a vocabulary: every mark."""

MAX_SPECIAL_IDS = 65_536
"""Most ids one special terminal may stand for (a range is a union of that many marks)."""

_NAME = re.compile(r"<\|[^|\n]*\|>|</?[A-Za-z_][^>\s]*>")
_IDS = re.compile(r"<\[([^\]\n]*)\]>")
_ITEM = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


@dataclass(frozen=True)
class SpecialSpec:
    """A special-token terminal as written: ``name`` (``<|eom_id|>``) or ``ranges`` of ids."""

    text: str
    name: str | None = None
    ranges: tuple[tuple[int, int], ...] = ()


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
        raise UnsupportedGrammar(f"{text} (any token) matches text tokens as single tokens, which masklab's "
                                 "byte-level grammars cannot say; name the special tokens instead", line, column)
    if body.startswith("^"):
        raise UnsupportedGrammar(f"{text} (every token but these) matches text tokens as single tokens, which "
                                 "masklab's byte-level grammars cannot say; name the special tokens instead",
                                 line, column)
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
    if sum(hi - lo + 1 for lo, hi in ranges) > MAX_SPECIAL_IDS:
        raise GrammarError(f"{text}: more than {MAX_SPECIAL_IDS} token ids", line, column)
    return SpecialSpec(text, ranges=tuple(ranges))


def resolve(spec: SpecialSpec, vocab: Vocabulary) -> tuple[int, ...]:
    """The ids ``spec`` stands for in ``vocab`` (sorted).  :class:`GrammarError` for a
    name or id the vocabulary does not have; :class:`UnsupportedGrammar` for a text
    token or an EOS token."""
    if spec.name is not None:
        ids = _names(vocab).get(spec.name)
        if ids is None:
            known = sorted(vocab.special_tokens.values())
            shown = ", ".join(known[:8]) + (f", ... ({len(known)} in all)" if len(known) > 8 else "")
            raise GrammarError(f"special token {spec.name} is not in vocabulary {vocab.name!r}"
                               + (f" (its special tokens: {shown})" if known else " (it has no special tokens)"))
        out = list(ids)
    else:
        out = []
        for lo, hi in spec.ranges:
            if hi >= vocab.size:
                raise GrammarError(f"{spec.text}: id {max(lo, vocab.size)} is past vocabulary {vocab.name!r} "
                                   f"({vocab.size} ids)")
            for t in range(lo, hi + 1):
                if t not in vocab.special_tokens:
                    what = "padding" if t >= vocab.n_defined else (
                        f"the text token {vocab.token_bytes[t]!r}" if vocab.token_bytes[t] else "no token")
                    raise UnsupportedGrammar(f"{spec.text}: id {t} is {what} in vocabulary {vocab.name!r}; "
                                             "token-level terminals can be special tokens only")
                out.append(t)
    eos = sorted(set(out) & set(vocab.eos_ids))
    if eos:
        rest = sorted(set(out) - set(eos))
        hint = f"; without it: <[{_ranges_text(rest)}]>" if rest else ""
        raise UnsupportedGrammar(f"{spec.text}: {vocab.special_tokens[eos[0]]} (id {eos[0]}) ends generation in "
                                 f"vocabulary {vocab.name!r}; a grammar ends where EOS is allowed, so it cannot "
                                 f"name it{hint}")
    return tuple(sorted(set(out)))


def _ranges_text(ids: list[int]) -> str:
    """Sorted ids as ``<[...]>`` writes them: ``a-b`` runs joined by commas."""
    runs: list[list[int]] = []
    for t in ids:
        if runs and t == runs[-1][1] + 1:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


@functools.lru_cache(maxsize=8)
def _names(vocab: Vocabulary) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for i, n in vocab.special_tokens.items():
        out.setdefault(n, []).append(i)
    return {n: tuple(v) for n, v in out.items()}


def mark_bytes(token_id: int) -> bytes:
    """The bytes special token ``token_id`` stands for in the IR."""
    return b"\xff" + str(int(token_id)).encode("ascii") + b"\xff"


def marked_bytes(vocab: Vocabulary, ids: list[int]) -> bytes:
    """The bytes of ``ids`` as a grammar reads them: text tokens' bytes, special tokens'
    marks (what :meth:`Grammar.accepts <toolkit.grammar.Grammar.accepts>` of a grammar
    bound to ``vocab`` checks)."""
    specials = vocab.special_tokens
    return b"".join(mark_bytes(t) if t in specials else vocab.token_bytes[t] for t in ids)


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
    """The IR regex of the marks of ``ids``."""
    if not ids:
        raise ValueError("a special terminal stands for at least one id")
    body = str(ids[0]) if len(ids) == 1 else "(?:" + "|".join(map(str, ids)) + ")"
    return MARK + body + MARK


@functools.lru_cache(maxsize=16)
def vocab_view(vocab: Vocabulary, ids: frozenset[int]) -> Vocabulary:
    """``vocab`` as an engine compiling a grammar with the special tokens ``ids`` sees
    it (see the module doc): the same ids, names and EOS ids; ``ids`` are text tokens
    whose bytes are their marks; real tokens holding ``0xFF`` have no bytes."""
    if not ids:
        return vocab
    entries = [b"" if b"\xff" in b else b for b in vocab.token_bytes]
    for t in ids:
        if t not in vocab.special_tokens or t in vocab.eos_ids:
            raise ValueError(f"id {t} is not a special non-EOS token of {vocab.name!r}")
        entries[t] = mark_bytes(t)
    specials = {i: n for i, n in vocab.special_tokens.items() if i not in ids}
    tag = hashlib.sha1(",".join(map(str, sorted(ids))).encode()).hexdigest()[:10]
    return Vocabulary(f"{vocab.name}+special:{tag}", entries, special_tokens=specials,
                      eos_ids=vocab.eos_ids, n_defined=vocab.n_defined, encoder=vocab._encoder)
