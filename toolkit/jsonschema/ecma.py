"""ECMAScript regexes (JSON Schema's ``pattern``) to regexes of the JSON text of the
strings they match, in masklab's dialect."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.automata.jsontext import (
    MAX_CP,
    MAX_REPEAT,
    SPELLING_VAR,
    Ranges,
    any_chars,
    atom_if_alt,
    complement_ranges,
    encode_ranges,
    group,
    normalize_ranges,
    quant,
)
from toolkit.core.errors import UnsupportedSchema

# ------------------------------------------------------------ ECMA patterns --


@dataclass(frozen=True)
class _Chars:
    ranges: Ranges


@dataclass(frozen=True)
class _Seq:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Alt:
    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Repeat:
    item: _Node
    lo: int
    hi: int | None


@dataclass(frozen=True)
class _Anchor:
    kind: str  # "^" or "$"


_Node = _Chars | _Seq | _Alt | _Repeat | _Anchor
_EMPTY = _Seq(())

_WS: Ranges = normalize_ranges(
    [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
     (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
)
_DIGITS: Ranges = ((0x30, 0x39),)
_WORD: Ranges = normalize_ranges([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_DOT: Ranges = complement_ranges(normalize_ranges([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))
_CLASS_ESCAPES = {
    "d": _DIGITS, "D": complement_ranges(_DIGITS),
    "w": _WORD, "W": complement_ranges(_WORD),
    "s": _WS, "S": complement_ranges(_WS),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_HEXDIGITS = set("0123456789abcdefABCDEF")


class _EcmaParser:
    """Recursive-descent parser of ECMA-262 patterns (with Annex B leniency for ``{``)."""

    def __init__(self, source: str, pointer: str):
        self.src = source
        self.pointer = pointer
        self.i = 0

    def unsupported(self, what: str, start: int, end: int | None = None) -> UnsupportedSchema:
        frag = self.src[start : end if end is not None else self.i]
        return UnsupportedSchema("pattern", self.pointer, f"{what}: {frag!r} in {self.src!r}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.src[j] if j < len(self.src) else ""

    def parse(self) -> _Node:
        node = self.disjunction()
        if self.i < len(self.src):
            raise self.unsupported("unbalanced ')'", self.i, self.i + 1)
        return node

    def disjunction(self) -> _Node:
        options = [self.alternative()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.alternative())
        return options[0] if len(options) == 1 else _Alt(tuple(options))

    def alternative(self) -> _Node:
        items: list[_Node] = []
        while self.i < len(self.src) and self.peek() not in "|)":
            items.append(self.term())
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def term(self) -> _Node:
        start = self.i
        c = self.peek()
        if c in "^$":
            self.i += 1
            if self.peek() in ("*", "+", "?") or self.quantifier_ahead():
                raise self.unsupported("quantified anchor (invalid in ECMAScript)", start, self.i + 1)
            return _Anchor(c)
        atom = self.atom()
        q = self.quantifier()
        if q is None:
            return atom
        lo, hi = q
        if hi is not None and lo > hi:
            raise self.unsupported("quantifier range out of order", start)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise self.unsupported(f"repeat count above {MAX_REPEAT}", start)
        return _Repeat(atom, lo, hi)

    def quantifier_ahead(self) -> bool:
        save = self.i
        try:
            return self.peek() == "{" and self.braces() is not None
        finally:
            self.i = save

    def braces(self) -> tuple[int, int | None] | None:
        """Parse ``{n}``, ``{n,}`` or ``{n,m}`` at the cursor; None (cursor kept) if not one."""
        j = self.i + 1
        k = j
        while k < len(self.src) and self.src[k].isdigit() and self.src[k].isascii():
            k += 1
        if k == j:
            return None
        lo = int(self.src[j:k])
        hi: int | None = lo
        if k < len(self.src) and self.src[k] == ",":
            m = k + 1
            while m < len(self.src) and self.src[m].isdigit() and self.src[m].isascii():
                m += 1
            hi = int(self.src[k + 1 : m]) if m > k + 1 else None
            k = m
        if k < len(self.src) and self.src[k] == "}":
            self.i = k + 1
            return lo, hi
        return None

    def quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        q: tuple[int, int | None] | None
        if c == "*":
            q, self.i = (0, None), self.i + 1
        elif c == "+":
            q, self.i = (1, None), self.i + 1
        elif c == "?":
            q, self.i = (0, 1), self.i + 1
        elif c == "{":
            q = self.braces()
        else:
            q = None
        if q is not None and self.peek() == "?":
            self.i += 1  # lazy: same language
        return q

    def atom(self) -> _Node:
        start = self.i
        c = self.peek()
        if c == "(":
            return self.group()
        if c == ".":
            self.i += 1
            return _Chars(_DOT)
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.atom_escape()
        if c in "*+?" or (c == "{" and self.quantifier_ahead()):
            raise self.unsupported("nothing to repeat", start, start + 1)
        self.i += 1
        return _Chars(normalize_ranges([(ord(c), ord(c))]))

    def group(self) -> _Node:
        start = self.i
        self.i += 1
        if self.peek() == "?":
            nxt = self.src[self.i + 1 : self.i + 3]
            if nxt.startswith(":"):
                self.i += 2
            elif nxt.startswith("=") or nxt.startswith("!") or nxt in ("<=", "<!"):
                raise self.unsupported("lookaround assertion", start, self.i + 1 + len(nxt))
            elif nxt.startswith("<"):
                end = self.src.find(">", self.i)
                if end < 0:
                    raise self.unsupported("unterminated group name", start)
                self.i = end + 1
            else:
                raise self.unsupported("unsupported group syntax", start, self.i + 2)
        inner = self.disjunction()
        if self.peek() != ")":
            raise self.unsupported("missing ')'", start)
        self.i += 1
        return inner

    def hex_digits(self, n: int) -> int | None:
        text = self.src[self.i : self.i + n]
        if len(text) == n and all(ch in _HEXDIGITS for ch in text):
            self.i += n
            return int(text, 16)
        return None

    def code_escape(self, start: int) -> int | None:
        """After a backslash: the code point of ``\\xHH``/``\\uHHHH``/``\\u{...}``/controls.

        Returns None when the escape is not one of those (the cursor is unchanged).
        """
        c = self.peek()
        if c in _CONTROL_ESCAPES:
            self.i += 1
            return _CONTROL_ESCAPES[c]
        if c == "0" and not self.peek(1).isdigit():
            self.i += 1
            return 0
        if c == "c":
            letter = self.peek(1)
            if letter.isascii() and letter.isalpha():
                self.i += 2
                return ord(letter) % 32
            raise self.unsupported("ambiguous \\c escape", start, self.i + 2)
        if c == "x":
            self.i += 1
            v = self.hex_digits(2)
            if v is None:
                raise self.unsupported("malformed \\x escape", start, self.i + 2)
            return v
        if c == "u":
            self.i += 1
            if self.peek() == "{":
                end = self.src.find("}", self.i)
                body = self.src[self.i + 1 : end] if end > 0 else ""
                if not body or not all(ch in _HEXDIGITS for ch in body) or int(body, 16) > MAX_CP:
                    raise self.unsupported("malformed \\u{...} escape", start, end + 1 if end > 0 else None)
                self.i = end + 1
                return int(body, 16)
            v = self.hex_digits(4)
            if v is None:
                raise self.unsupported("malformed \\u escape", start, self.i + 4)
            if 0xD800 <= v <= 0xDBFF and self.src[self.i : self.i + 2] == "\\u":
                save = self.i
                self.i += 2
                low = self.hex_digits(4)
                if low is not None and 0xDC00 <= low <= 0xDFFF:
                    return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00)
                self.i = save
            return v
        return None

    def atom_escape(self) -> _Node:
        start = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.unsupported("trailing backslash", start)
        if c in _CLASS_ESCAPES:
            self.i += 1
            return _Chars(_CLASS_ESCAPES[c])
        if c in "bB":
            raise self.unsupported("word boundary assertion", start, self.i + 1)
        if c in "pP":
            raise self.unsupported("Unicode property escape", start, self.src.find("}", self.i) + 1 or None)
        if c == "k" or (c.isdigit() and c != "0"):
            raise self.unsupported("backreference", start, self.i + 1)
        cp = self.literal_escape(start, c)
        return _Chars(normalize_ranges([(cp, cp)]))

    def class_atom(self) -> int | Ranges:
        """One class member: a code point, or a set for ``\\d`` and friends."""
        start = self.i
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        self.i += 1
        c = self.peek()
        if not c:
            raise self.unsupported("trailing backslash", start)
        if c in _CLASS_ESCAPES:
            self.i += 1
            return _CLASS_ESCAPES[c]
        if c == "b":
            self.i += 1
            return 0x08
        if c == "-":
            self.i += 1
            return 0x2D
        if c in "pP":
            raise self.unsupported("Unicode property escape", start, self.src.find("}", self.i) + 1 or None)
        if c.isdigit() and c != "0" or c == "k":
            raise self.unsupported("octal or backreference escape in a class", start, self.i + 1)
        return self.literal_escape(start, c)

    def literal_escape(self, start: int, c: str) -> int:
        """The code point of ``\\c`` once the special escapes are ruled out: a code
        escape (``\\x41``, ``\\u0041``, ``\\n``...) or an escaped punctuation mark;
        an unknown letter or digit escape is unsupported."""
        cp = self.code_escape(start)
        if cp is None:
            if c.isascii() and c.isalnum():
                raise self.unsupported("unknown escape", start, self.i + 1)
            self.i += 1
            cp = ord(c)
        return cp

    def char_class(self) -> _Node:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        members: list[tuple[int, int]] = []
        while True:
            if self.i >= len(self.src):
                raise self.unsupported("unterminated character class", start)
            if self.peek() == "]":
                self.i += 1
                break
            a = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                b = self.class_atom()
                if isinstance(a, int) and isinstance(b, int):
                    if a > b:
                        raise self.unsupported("class range out of order", start, self.i)
                    members.append((a, b))
                    continue
                # Annex B: a range with a class escape at either end is the union of
                # both ends and "-"; the cursor stays after b, so [\d-a-c] has no "b".
                members.append((0x2D, 0x2D))
                if isinstance(b, int):
                    members.append((b, b))
                else:
                    members.extend(b)
            if isinstance(a, int):
                members.append((a, a))
            else:
                members.extend(a)
        rs = normalize_ranges(members)
        return _Chars(complement_ranges(rs) if negated else rs)


def _nullable(node: _Node) -> bool:
    if isinstance(node, _Chars):
        return False
    if isinstance(node, _Seq):
        return all(_nullable(n) for n in node.items)
    if isinstance(node, _Alt):
        return any(_nullable(n) for n in node.items)
    if isinstance(node, _Repeat):
        return node.lo == 0 or _nullable(node.item)
    return True


_Forms = dict[tuple[bool, bool], list[_Node]]


def _add(forms: _Forms, key: tuple[bool, bool], node: _Node) -> None:
    bucket = forms.setdefault(key, [])
    if node not in bucket:
        bucket.append(node)


def _merged(nodes: list[_Node]) -> _Node:
    return nodes[0] if len(nodes) == 1 else _Alt(tuple(nodes))


MAX_ANCHORED_REPEAT = 16
"""Largest finite bound of a quantifier over a group that contains an anchor; such a
repeat is unrolled, so its size grows with the bound."""


def _forms(node: _Node, p: _EcmaParser) -> _Forms:
    """Split ``node`` by anchors: ``{(starts at 0, ends at end): [anchor-free nodes]}``.

    A match of ``node`` is a match of one of the anchor-free nodes, placed at the
    start of the string when the first flag is set and at its end when the second is.
    """
    if isinstance(node, _Chars):
        return {(False, False): [node]}
    if isinstance(node, _Anchor):
        return {(node.kind == "^", node.kind == "$"): [_EMPTY]}
    if isinstance(node, _Alt):
        out: _Forms = {}
        for item in node.items:
            for key, nodes in _forms(item, p).items():
                for n in nodes:
                    _add(out, key, n)
        return out
    if isinstance(node, _Seq):
        acc: _Forms = {(False, False): [_EMPTY]}
        for item in node.items:
            acc = _concat_forms(acc, _forms(item, p))
        return acc
    assert isinstance(node, _Repeat)
    inner = _forms(node.item, p)
    if set(inner) == {(False, False)}:
        return {(False, False): [_Repeat(_merged(inner[(False, False)]), node.lo, node.hi)]}
    if node.hi == 0:
        return {(False, False): [_EMPTY]}
    # An anchor inside a repeat: X{lo,hi} = X^lo (X?)^(hi-lo), or X^lo X* when unbounded.
    bound = node.lo if node.hi is None else node.hi
    if bound > MAX_ANCHORED_REPEAT:
        raise UnsupportedSchema(
            "pattern", p.pointer,
            f"anchor inside a group repeated more than {MAX_ANCHORED_REPEAT} times in {p.src!r}",
        )
    optional = {k: list(v) for k, v in inner.items()}
    _add(optional, (False, False), _EMPTY)
    acc = {(False, False): [_EMPTY]}
    for _ in range(node.lo):
        acc = _concat_forms(acc, inner)
    if node.hi is None:
        return _concat_forms(acc, _star_forms(inner))
    for _ in range(node.hi - node.lo):
        acc = _concat_forms(acc, optional)
    return acc


def _concat_forms(left: _Forms, right: _Forms) -> _Forms:
    """Forms of the concatenation of two split nodes (see :func:`_forms`)."""
    out: _Forms = {}
    for (s1, e1), left_nodes in left.items():
        for (s2, e2), right_nodes in right.items():
            a = _merged(left_nodes)
            b = _merged(right_nodes)
            if s2:  # the right part starts at 0: the left part matched "" there
                if not _nullable(a):
                    continue
                a = _EMPTY
            if e1:  # the left part ends at the end: the right part matches ""
                if not _nullable(b):
                    continue
                b = _EMPTY
            _add(out, (s1 or s2, e1 or e2), _seq(a, b))
    return out


def _star_forms(inner: _Forms) -> _Forms:
    """Forms of ``X*`` from those of ``X``.

    Iterations before one tied to the start matched "" at position 0, and iterations
    after one tied to the end match "" there; dropping them changes nothing, so a
    start-tied iteration can only come first and an end-tied one only last:
    ``U*``, ``S U*``, ``U* E``, and ``B | S U* E``.
    """
    u = _Repeat(_merged(inner[(False, False)]), 0, None) if (False, False) in inner else _EMPTY
    out: _Forms = {(False, False): [u]}
    if (True, False) in inner:
        out[(True, False)] = [_seq(_merged(inner[(True, False)]), u)]
    if (False, True) in inner:
        out[(False, True)] = [_seq(u, _merged(inner[(False, True)]))]
    both: list[_Node] = list(inner.get((True, True), []))
    if (True, False) in inner and (False, True) in inner:
        both.append(_seq(_seq(_merged(inner[(True, False)]), u), _merged(inner[(False, True)])))
    if both:
        out[(True, True)] = both
    return out


def _seq(a: _Node, b: _Node) -> _Node:
    items = (a.items if isinstance(a, _Seq) else (a,)) + (b.items if isinstance(b, _Seq) else (b,))
    return items[0] if len(items) == 1 else _Seq(items)


def _render_node(node: _Node) -> str:
    """The JSON-text regex of an anchor-free node (characters become their encodings)."""
    if isinstance(node, _Chars):
        return encode_ranges(node.ranges, SPELLING_VAR.get())
    if isinstance(node, _Seq):
        return "".join(atom_if_alt(_render_node(n)) for n in node.items)
    if isinstance(node, _Alt):
        return group([_render_node(n) for n in node.items])
    if isinstance(node, _Repeat):
        inner = _render_node(node.item)
        return quant(inner, node.lo, node.hi) if inner else ""
    raise AssertionError(f"anchor left in {node!r}")


def ecma_pattern(pattern: str, *, pointer: str = "") -> str:
    """Regex of the JSON string literals (with quotes) whose value ``pattern`` matches.

    ``pattern`` is an ECMA-262 regex applied as JSON Schema does: a *search* in the
    decoded string, anchored only by ``^``/``$``.  Semantics are those of the ``u``
    flag the spec recommends: a character is a code point; ``\\d`` and ``\\w`` are
    ASCII; ``\\s`` is ECMAScript's Unicode white space and line terminators; ``.``
    is any character but ``\\n``, ``\\r``, U+2028, U+2029; ``[^...]`` is any other
    character.  Syntax follows Annex B where it is unambiguous (a ``{`` that starts no
    quantifier is literal; ``[\\w-.]`` has a literal ``-``).

    Anchors may appear anywhere: each alternative is split by whether it is tied to
    the start and/or end of the string, so ``^a|b$``, ``^$|^x+$`` and ``(a/|b$)*``
    are exact.
    Each character class then becomes the alternation of all JSON encodings of its
    characters (raw, short escape, ``\\u`` in either hex case, surrogate pairs).

    Raises :class:`UnsupportedSchema` (keyword ``pattern``, the fragment in the
    reason) for lookarounds, backreferences, ``\\b``/``\\B``, ``\\p{..}``,
    ambiguous escapes (e.g. ``\\a``, ``\\z``), repeat counts above
    :data:`MAX_REPEAT` (:data:`MAX_ANCHORED_REPEAT` for a group holding an anchor),
    and invalid syntax.  Strings with lone
    surrogates are never matched (see the module doc).
    """
    if not isinstance(pattern, str):
        raise UnsupportedSchema("pattern", pointer, f"{pattern!r} is not a string")
    try:
        return _ecma_pattern(pattern, pointer)
    except RecursionError:  # the parser and the walks of its tree recurse once per group
        raise UnsupportedSchema("pattern", pointer, "groups nested too deeply to read "
                                                    f"({len(pattern):,} characters)") from None


def _ecma_pattern(pattern: str, pointer: str) -> str:
    """:func:`ecma_pattern` of a string."""
    parser = _EcmaParser(pattern, pointer)
    tree = parser.parse()
    parts = []
    for (start, end), nodes in _forms(tree, parser).items():
        body = atom_if_alt(_render_node(_merged(nodes)))
        if not start and not end and not body:
            parts.append(any_chars(SPELLING_VAR.get()))
        else:
            anys = any_chars(SPELLING_VAR.get())
            parts.append(("" if start else anys) + body + ("" if end else anys))
    return '"' + group(parts) + '"'
