"""Regex syntax to interegular's pattern tree, in one linear pass.

:func:`parse` reads the dialect of :mod:`toolkit.automata.regex` and builds the node classes
of ``interegular.patterns`` that :mod:`toolkit.automata.regex` walks: ``Pattern`` (a group:
alternatives plus the flags it adds and removes), ``_Concatenation``,
``_CharGroup(chars, negated)``, ``_Repeated(base, min, max)`` (``max`` None when
unbounded), the dot and the empty node.  The tree has the shape
``interegular.parse_pattern`` gives (after its ``simplify``), so the two are equal
objects wherever they mean the same; the differences are listed below.

The pattern is cut into tokens by a loop over the string: a run of plain characters
is one slice (each character a shared one-character ``_CharGroup``), a character
class is cut out by one ``re`` match and parsed once per distinct text (cached),
and groups use an explicit stack, so time is linear in the pattern and nesting
depth is bounded by memory only.  The garbage collector is paused meanwhile: the
tree holds no cycles, and rescanning it as it grows took most of the time on
megabyte patterns.

What is accepted, and what it means (Python ``re``; see :mod:`toolkit.automata.regex` for the
matching semantics):

* literals; ``\\`` before any character that is not an ASCII letter, a digit or a
  non-ASCII letter; ``\\a \\f \\n \\r \\t \\v``; ``\\xHH``; octal ``\\0``, ``\\0o``,
  ``\\0oo`` and ``\\ooo`` (at most 0o377; in a class ``\\o`` and ``\\oo`` too);
  ``\\d \\D \\w \\W \\s \\S`` (ASCII; with ``unicode=True`` Unicode, as Rust's
  ``regex`` crate reads them: ``\\d`` is ``\\p{Nd}``, ``\\s`` White_Space, ``\\w``
  Alphabetic, marks, ``Nd``, ``Pc`` and the joiners, per the Unicode version of
  Python's ``unicodedata``);
* ``.``; classes ``[...]``/``[^...]`` with ranges, escapes (``\\b`` is a backspace
  there) and shorthands; a ``]`` right after ``[`` or ``[^`` is a literal;
* groups ``( )``, ``(?: )``, ``(?P<name> )``; comments ``(?# )``; flags ``i``, ``s``
  and ``m`` (the last refused when building), global ``(?is)`` anywhere (for the
  whole pattern) or scoped ``(?i-s: )``;
* ``|``; ``* + ?`` and ``{m}``, ``{m,}``, ``{,n}``, ``{m,n}``, ``{,}``, each possibly
  lazy (``*?``: the same language under full match).  A ``{`` that does not start
  a repeat is a literal where there is nothing to repeat, and an error elsewhere.

Refused with :class:`~toolkit.core.errors.RegexError` (the message gives the offset of
the offending fragment): ``^`` and ``$`` (the caller strips those at the ends),
lookarounds, back-references (``\\1``, ``(?P=name)``), conditionals,
``\\A \\Z \\b \\B``, ``\\u \\U \\N \\p \\P``, flags other than ``i m s``, possessive
repeats and atomic groups, a repeat of a repeat or of nothing, ``{m,n}`` with
``m > n``, and malformed syntax.

Where interegular's own parser differs (it accepts more, or means something else),
this follows Python ``re``: ``[]a]`` is the class of ``]`` and ``a`` (interegular:
an empty class, then ``a]``), so ``[]`` and ``[^]`` are unterminated; a class with several negated shorthands is their
union (``[\\D\\S]`` is any character; interegular unites what they exclude); a group
that only holds one group keeps the flags it removes (interegular drops them when
it merges the two, so ``(?i)(?-i:(a))`` matched ``A``); several global flag groups
add up (interegular keeps the last); ``(?#...)`` is a comment and bare ``\\0`` is
NUL (interegular fails on both); a repeat of a repeat (``a**``, ``a*+``), ``{m}``
with nothing to repeat, ``a{}``, octal escapes over 0o377, ``[\\8]`` and group
names that are not identifiers or are used twice are errors (interegular reads
them in ways Python does not).
"""

from __future__ import annotations

import gc
import re
import unicodedata
from functools import reduce

from interegular.patterns import (
    _DOT,
    _EMPTY,
    Pattern,
    REFlags,
    _CharGroup,
    _Concatenation,
    _Repeated,
)

from toolkit.core.errors import RegexError

__all__ = ["parse"]

_NO_FLAGS = REFlags(0)
_FLAGS = {"i": REFlags.CASE_INSENSITIVE, "m": REFlags.MULTILINE, "s": REFlags.SINGLE_LINE}
_MAX_REPEAT = 4_294_967_294  # Python's re refuses larger counts

_LITERALS = re.compile(r"[^\\\[(){|.*+?^$]+")
_CLASS = re.compile(r"\[\^?+\]?+(?:[^\\\]]|\\.)*+\]", re.DOTALL)  # "]" first is literal
_REPEAT = re.compile(r"\{([0-9]*)(?:(,)([0-9]*))?\}")
_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_GROUP_NAME = re.compile(r"\(\?P<([A-Za-z_][A-Za-z0-9_]*)>")


class _Chars(dict):
    """One shared ``_CharGroup`` per character, made on first use."""

    def __missing__(self, c: str) -> _CharGroup:
        g = self[c] = _CharGroup(frozenset(c), False)
        return g


_CHARS = _Chars()

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DIGIT = frozenset("0123456789")
_SPACE = frozenset(" \t\n\r\f\v")
_SHORTHANDS = {
    "d": _CharGroup(_DIGIT, False),
    "D": _CharGroup(_DIGIT, True),
    "w": _CharGroup(_WORD, False),
    "W": _CharGroup(_WORD, True),
    "s": _CharGroup(_SPACE, False),
    "S": _CharGroup(_SPACE, True),
}
_CONTROLS = {"a": "\a", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}

# Rust's regex crate (outlines-core, llguidance) reads \d \w \s as Unicode classes:
# \d = \p{Nd}; \s = \p{White_Space}; \w = \p{Alphabetic} + \p{M} + \p{Nd} + \p{Pc} +
# \p{Join_Control}.  Python's unicodedata gives the general categories (of its Unicode
# version); Alphabetic is the letters, Nl and Other_Alphabetic, whose members outside
# the marks are the circled and squared Latin letters listed here.
_WHITE_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_OTHER_ALPHABETIC_SYMBOLS = ((0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189))


_UNICODE_SHORTHANDS: list[dict[str, _CharGroup]] = []  # built once per process (see below)


def _unicode_shorthands() -> dict[str, _CharGroup]:
    """``\\d \\w \\s`` and their negations in Unicode mode, from Python's unicodedata.

    A process constant (a scan of every code point, a quarter of a second), so it is
    kept in a module global rather than a cache: the harness empties the toolkit's
    caches before each compile, and this table is no part of any compile's work.
    """
    if not _UNICODE_SHORTHANDS:
        _UNICODE_SHORTHANDS.append(_build_unicode_shorthands())
    return _UNICODE_SHORTHANDS[0]


def _build_unicode_shorthands() -> dict[str, _CharGroup]:
    digit, word = [], []
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Nd":
            digit.append(chr(cp))
        if cat[0] in "LM" or cat in ("Nd", "Nl", "Pc"):
            word.append(chr(cp))
    word += ["\u200c", "\u200d"]
    word += [chr(c) for lo, hi in _OTHER_ALPHABETIC_SYMBOLS for c in range(lo, hi + 1)]
    d, w, sp = frozenset(digit), frozenset(word), frozenset(_WHITE_SPACE)
    return {
        "d": _CharGroup(d, False), "D": _CharGroup(d, True),
        "w": _CharGroup(w, False), "W": _CharGroup(w, True),
        "s": _CharGroup(sp, False), "S": _CharGroup(sp, True),
    }


def _simple_escapes() -> dict[str, _CharGroup]:
    """The two-character escapes ``\\X`` whose meaning needs no look further."""
    out = {chr(c): _CHARS[chr(c)] for c in range(128) if not chr(c).isalnum()}
    out.update(_SHORTHANDS)
    out.update((k, _CHARS[v]) for k, v in _CONTROLS.items())
    return out


_SIMPLE_ESCAPES = _simple_escapes()

_CLASS_CACHE: dict[str, _CharGroup] = {}
"""Parsed classes by their text: generated regexes repeat a few classes many times."""
_CLASS_CACHE_CHARS = 1 << 20  # the cache is emptied when its classes hold more characters
_class_cache_chars = 0


class _Source:
    """Where errors point: the pattern as the caller knows it, and the offset of ours in
    it; and the meaning of ``\\d \\w \\s`` (ASCII, or Unicode for ``unicode=True``)."""

    __slots__ = ("text", "offset", "shorthands", "escapes", "class_key")

    def __init__(self, text: str, offset: int, unicode: bool = False) -> None:
        self.text = text
        self.offset = offset
        if unicode:
            self.shorthands = _unicode_shorthands()
            self.escapes = {**_SIMPLE_ESCAPES, **self.shorthands}
            self.class_key = "u"  # classes are cached per dialect
        else:
            self.shorthands = _SHORTHANDS
            self.escapes = _SIMPLE_ESCAPES
            self.class_key = ""

    def error(self, what: str, pos: int, fragment: str | None) -> RegexError:
        return RegexError(f"{what} (offset {pos + self.offset})", self.text, fragment)


def parse(pattern: str, *, source: str | None = None, offset: int = 0, unicode: bool = False) -> Pattern:
    """The interegular ``Pattern`` tree of ``pattern`` (see the module doc).

    Raises :class:`~toolkit.core.errors.RegexError` naming ``source`` (default:
    ``pattern``), with offsets counted from ``offset``: pass the full text and the
    position of ``pattern`` in it when ``pattern`` is a slice of a larger text.
    ``unicode=True``: ``\\d \\w \\s`` are Rust's Unicode classes (see above), not ASCII.
    """
    src = _Source(pattern if source is None else source, offset, unicode)
    # The tree is acyclic: collections while it grows would only rescan it (a
    # megabyte pattern makes millions of nodes, and the scans take most of the time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(pattern, src)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(pattern: str, src: _Source) -> Pattern:
    s = pattern
    n = len(s)
    i = 0
    parts: list = []  # the concatenation being read
    alts: list[_Concatenation] = []  # the finished alternatives of the innermost group
    stack: list[tuple] = []  # enclosing groups: (alts, parts, "(" offset, added, removed)
    rep = 0  # the last part: 0 nothing to repeat, 1 repeatable, 2 already a repeat
    global_flags = _NO_FLAGS
    names: set[str] = set()
    chars = _CHARS
    simple_escapes = src.escapes
    literals = _LITERALS.match
    while i < n:
        c = s[i]
        if c not in "\\[(){|.*+?^$":
            j = literals(s, i).end()
            parts.extend(map(chars.__getitem__, s[i:j]))
            i = j
            rep = 1
        elif c == "\\":
            g = simple_escapes.get(s[i + 1 : i + 2])
            if g is None:
                g, j = _escape(s, i, False, src)
            else:
                j = i + 2
            parts.append(g)
            i = j
            rep = 1
        elif c == "[":
            m = _CLASS.match(s, i)
            if m is None:
                raise src.error("unterminated character set", i, s[i : i + 10])
            j = m.end()
            text = src.class_key + s[i:j]
            g = _CLASS_CACHE.get(text)
            if g is None:
                g = _char_class(s, i, j, src)
                _remember_class(text, g)
            parts.append(g)
            i = j
            rep = 1
        elif c in "*+?{":
            if c == "{":
                m = _REPEAT.match(s, i)
                if m is None or m.end() == i + 2:  # not a repeat ("{}" neither)
                    if rep == 0:
                        parts.append(chars["{"])
                        i += 1
                        rep = 1
                        continue
                    raise src.error(
                        "'{' that does not start a repeat {m,n} must be escaped", i, s[i : i + 10]
                    )
                lo_s, comma, hi_s = m.groups()
                j = m.end()
                lo = _count(lo_s, i, src) if lo_s else 0
                hi = lo if not comma else _count(hi_s, i, src) if hi_s else None
                if hi is not None and lo > hi:
                    raise src.error("min repeat greater than max repeat", i, m.group())
            else:
                j = i + 1
                lo, hi = (0, None) if c == "*" else (1, None) if c == "+" else (0, 1)
            if rep != 1:
                what = "multiple repeat" if rep == 2 else "nothing to repeat"
                raise src.error(what, i, s[i:j])
            if j < n:
                nc = s[j]
                if nc == "?":
                    j += 1  # lazy: the same language under full match
                elif nc == "+":
                    raise src.error("possessive repeats are not supported", i, s[i : j + 1])
            parts[-1] = _Repeated(parts[-1], lo, hi)
            i = j
            rep = 2
        elif c == "(":
            if not s.startswith("?", i + 1):
                stack.append((alts, parts, i, _NO_FLAGS, _NO_FLAGS))
                alts, parts = [], []
                i += 1
                rep = 0
                continue
            m = _FLAG_GROUP.match(s, i)
            if m is not None:
                on, off, end = m.groups()
                if end == ")":  # (?i): for the whole pattern
                    if off is not None or not on:
                        raise src.error("bad inline flags", i, m.group())
                    global_flags |= _flag_set(on, i, m.group(), src)
                    parts.append(_EMPTY)
                    rep = 0
                else:
                    if off == "":
                        raise src.error("missing flag after '-'", i, m.group())
                    added = _flag_set(on, i, m.group(), src)
                    removed = _flag_set(off, i, m.group(), src) if off else _NO_FLAGS
                    stack.append((alts, parts, i, added, removed))
                    alts, parts = [], []
                    rep = 0
                i = m.end()
                continue
            ext = s[i + 2 : i + 4]
            if ext[:1] == "P":
                m = _GROUP_NAME.match(s, i)
                if m is not None:
                    name = m.group(1)
                    if name in names:
                        raise src.error(f"redefinition of group name {name!r}", i, m.group())
                    names.add(name)
                    stack.append((alts, parts, i, _NO_FLAGS, _NO_FLAGS))
                    alts, parts = [], []
                    i = m.end()
                    rep = 0
                    continue
                if ext == "P=":
                    raise src.error("back-references are not supported", i, "(?P=")
                if ext == "P<":
                    raise src.error("bad group name", i, s[i : i + 10])
                raise src.error("unknown extension", i, s[i : i + 4])
            if ext[:1] == "#":
                j = s.find(")", i)
                if j < 0:
                    raise src.error("missing ), unterminated comment", i, "(?#")
                i = j + 1  # a comment: the part before it stays the repeat target
                continue
            if ext[:1] in ("=", "!") or ext in ("<=", "<!"):
                kind, text = (
                    ("lookbehind", s[i : i + 4]) if ext[0] == "<" else ("lookahead", s[i : i + 3])
                )
                raise src.error(
                    f"{kind} assertion {text!r} is not regular over a full match", i, "(?"
                )
            if ext[:1] == "(":
                raise src.error("conditional groups are not supported", i, "(?(")
            raise src.error("unknown extension", i, s[i : i + 3])
        elif c == ")":
            if not stack:
                raise src.error("unbalanced parenthesis", i, ")")
            alts.append(_Concatenation(tuple(parts)))
            group = alts
            alts, parts, _, added, removed = stack.pop()
            parts.append(_group(group, added, removed))
            i += 1
            rep = 1
        elif c == "|":
            alts.append(_Concatenation(tuple(parts)))
            parts = []
            i += 1
            rep = 0
        elif c == ".":
            parts.append(_DOT)
            i += 1
            rep = 1
        else:  # ^ or $ inside the pattern
            raise src.error(f"the anchor {c!r} is only allowed at the very start or end", i, c)
    if stack:
        raise src.error("missing ), unterminated subpattern", stack[-1][2], "(")
    alts.append(_Concatenation(tuple(parts)))
    return _group(alts, global_flags, _NO_FLAGS)


def _remember_class(text: str, g: _CharGroup) -> None:
    global _class_cache_chars
    size = len(text) + len(g.chars)
    if _class_cache_chars + size > _CLASS_CACHE_CHARS:
        _CLASS_CACHE.clear()
        _class_cache_chars = 0
    _CLASS_CACHE[text] = g
    _class_cache_chars += size


def _group(alts: list[_Concatenation], added: REFlags, removed: REFlags) -> Pattern:
    """A group's ``Pattern``; a group that holds just one group is merged into it,
    as interegular's ``simplify`` does, but keeping the flags either removes."""
    if len(alts) == 1:
        only = alts[0].parts
        if len(only) == 1 and type(only[0]) is Pattern:
            inner: Pattern = only[0]
            a, r = inner.added_flags, inner.removed_flags
            return Pattern(inner.options, (a | (added & ~removed)) & ~r, r | (removed & ~a))
    return Pattern(tuple(alts), added, removed)


def _flag_set(letters: str, pos: int, text: str, src: _Source) -> REFlags:
    out = _NO_FLAGS
    for ch in letters:
        f = _FLAGS.get(ch)
        if f is None:
            raise src.error(f"unsupported flag {ch!r} (only i, m, s)", pos, text)
        out |= f
    return out


def _count(digits: str, pos: int, src: _Source) -> int:
    if len(digits) > 10 or int(digits) > _MAX_REPEAT:
        raise src.error("the repetition number is too large", pos, digits)
    return int(digits)


def _escape(s: str, i: int, in_class: bool, src: _Source) -> tuple[_CharGroup, int]:
    """The escape at ``s[i] == "\\\\"``: its ``_CharGroup`` and the offset after it."""
    e = s[i + 1 : i + 2]
    if not e:
        raise src.error("bad escape (end of pattern)", i, "\\")
    if e in src.shorthands:
        return src.shorthands[e], i + 2
    if e in _CONTROLS:
        return _CHARS[_CONTROLS[e]], i + 2
    if e == "b" and in_class:
        return _CHARS["\b"], i + 2
    if e == "x":
        h = s[i + 2 : i + 4]
        if len(h) < 2 or not all(ch in "0123456789abcdefABCDEF" for ch in h):
            raise src.error("incomplete escape \\x", i, s[i : i + 4])
        return _CHARS[chr(int(h, 16))], i + 4
    if "0" <= e <= "9":
        if e <= "7" and (in_class or e == "0" or _is_octal(s[i + 2 : i + 4])):
            # octal: \0 and up to two more digits, \ooo, in a class \o to \ooo
            j = i + 2
            while j < i + 4 and j < len(s) and "0" <= s[j] <= "7":
                j += 1
            v = int(s[i + 1 : j], 8)
            if v > 0o377:
                raise src.error("octal escape value outside of range 0-0o377", i, s[i:j])
            return _CHARS[chr(v)], j
        if in_class:
            raise src.error("bad escape", i, s[i : i + 2])
        j = i + 3 if "0" <= s[i + 2 : i + 3] <= "9" else i + 2
        raise src.error("back-references are not supported", i, s[i:j])
    if e in "uUNpP":
        raise src.error(f"the escape \\{e} is not supported", i, s[i : i + 2])
    if e in "AZbB":
        raise src.error(f"the anchor \\{e} is not supported", i, s[i : i + 2])
    if e.isalpha() or (e.isascii() and e.isalnum()):  # non-ASCII letters too, as interegular
        raise src.error("bad escape", i, s[i : i + 2])
    return _CHARS[e], i + 2


def _is_octal(text: str) -> bool:
    return len(text) == 2 and "0" <= text[0] <= "7" and "0" <= text[1] <= "7"


def _char_class(s: str, i: int, j: int, src: _Source) -> _CharGroup:
    """The class ``s[i:j]`` (``[`` to its ``]``, found by ``_CLASS``).

    Its items are characters, ranges and shorthands; the class is their union, or
    the complement of it after ``[^``.  A negated shorthand is a complement, so the
    union is the complement of (the intersection of what the negated items exclude,
    less the positive items).
    """
    k = i + 1
    negate = s[k] == "^"
    if negate:
        k += 1
    end = j - 1  # the closing "]"
    pos: set[str] = set()
    negs: list[frozenset[str]] = []
    while k < end:
        start = k
        if s[k] == "\\":
            g, k = _escape(s, k, True, src)
        else:
            g = _CHARS[s[k]]
            k += 1
        if k + 1 < end and s[k] == "-":
            if g.negated or len(g.chars) != 1:
                raise src.error("bad character range", start, s[start : k + 2])
            if s[k + 1] == "\\":
                h, k2 = _escape(s, k + 1, True, src)
            else:
                h, k2 = _CHARS[s[k + 1]], k + 2
            if h.negated or len(h.chars) != 1:
                raise src.error("bad character range", start, s[start:k2])
            lo, hi = ord(next(iter(g.chars))), ord(next(iter(h.chars)))
            if lo > hi:
                raise src.error("bad character range", start, s[start:k2])
            pos.update(map(chr, range(lo, hi + 1)))
            k = k2
        elif g.negated:
            negs.append(g.chars)
        else:
            pos |= g.chars
    if not negs:
        return _CharGroup(frozenset(pos), negate)
    return _CharGroup(reduce(frozenset.intersection, negs) - pos, not negate)
