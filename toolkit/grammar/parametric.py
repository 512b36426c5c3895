"""llguidance's parametric rules (its ``docs/parametric.md``), expanded into plain rules.

A parametric rule ``name::_ : ... %if cond | ...`` takes one 64-bit integer ``p``; its
alternatives refer to ``other::expr`` (``expr`` of ``p``: ``_``, a constant,
``set_bit(k)``, ``clear_bit(k)``, ``bit_and(v)``, ``bit_or(v)``, ``incr([x:y])``,
``decr([x:y])``) and hold only where their condition holds (``bit_clear(k)``,
``is_ones([x:y])``, ``lt(_, v)``, ``bit_count_ge([x:y], k)``, ``and``/``or``/``not``...).
llguidance materialises the instances lazily while it parses; the IR has no
parameters, so :func:`expand` writes every instance reachable from the constants the
rest of the grammar passes (``name__p<hex>``), drops the alternatives whose condition
fails, and drops those that can derive nothing.  The instances are at most
:data:`MAX_INSTANCES` (a :class:`~toolkit.core.errors.LimitExceeded` past it): the
combinatorial grammars of the docs (permutations, bounded counters) need tens to
hundreds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from toolkit.core.errors import GrammarError, LimitExceeded

MAX_INSTANCES = 10_000
"""Most instances of parametric rules a grammar may expand to."""

_MASK64 = (1 << 64) - 1
_NEVER = "/[^\\d\\D]/"  # a terminal that matches nothing: an instance that derives nothing

_CONDS_VALUE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
                "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
_CONDS_COUNT = {f"bit_count_{k}": f for k, f in _CONDS_VALUE.items()}


def _is_param_def(toks: Sequence[Any], i: int) -> bool:
    return (i + 3 < len(toks) and toks[i].kind == "name" and toks[i + 1].text == "::"
            and toks[i + 2].text == "_" and toks[i + 3].text == ":")


class _Reader:
    """A cursor over the tokens of a condition or parameter expression."""

    def __init__(self, toks: Sequence[Any], where: Any) -> None:
        self.toks, self.i, self.where = toks, 0, where

    def fail(self, what: str) -> GrammarError:
        t = self.toks[self.i] if self.i < len(self.toks) else self.where
        return GrammarError(f"parametric rule: {what}", t.line, t.column)

    def peek(self) -> str | None:
        return self.toks[self.i].text if self.i < len(self.toks) else None

    def take(self, text: str | None = None) -> Any:
        if self.i >= len(self.toks) or (text is not None and self.toks[self.i].text != text):
            raise self.fail(f"expected {text!r}" if text else "unexpected end")
        self.i += 1
        return self.toks[self.i - 1]

    def number(self, most: int | None = None) -> int:
        t = self.take()
        if t.kind != "number":
            raise self.fail(f"expected a number, not {t.text!r}")
        v = int(t.text, 16) if t.text.lower().startswith("0x") else int(t.text)
        if most is not None and v > most:
            raise GrammarError(f"parametric rule: number {v} is too large; must be <= {most}", t.line, t.column)
        if v > _MASK64:
            raise GrammarError(f"parametric rule: {t.text} does not fit in 64 bits", t.line, t.column)
        return v

    def bits(self) -> tuple[int, int]:
        """A parameter reference: ``_`` (bits 0 to 64) or ``[x:y]``; ``(start, length)``."""
        if self.peek() == "_":
            self.take()
            return 0, 64
        self.take("[")
        lo = self.number(63)
        self.take(":")
        hi = self.number(64)
        self.take("]")
        if hi <= lo:
            raise self.fail(f"end bit index {hi} must be > start bit index {lo}")
        return lo, hi - lo

    def call(self, inner: Callable[[], Any]) -> Any:
        self.take("(")
        v = inner()
        self.take(")")
        return v

    def expr(self) -> Callable[[int], int]:
        """A parameter expression, as a function of the current parameter."""
        t = self.peek()
        if t == "_":
            self.take()
            return lambda p: p
        if self.toks[self.i].kind == "number":
            v = self.number()
            return lambda p: v
        name = self.take().text
        if name in ("set_bit", "clear_bit"):
            k = self.call(lambda: self.number(63))
            return (lambda p: p | (1 << k)) if name == "set_bit" else (lambda p: p & ~(1 << k) & _MASK64)
        if name in ("bit_and", "bit_or"):
            v = self.call(self.number)
            return (lambda p: p & v) if name == "bit_and" else (lambda p: p | v)
        if name in ("incr", "decr"):
            lo, n = self.call(self.bits)
            mask = ((1 << n) - 1) << lo
            if name == "incr":
                return lambda p: p if p & mask == mask else p + (1 << lo)
            return lambda p: p if p & mask == 0 else p - (1 << lo)
        raise self.fail(f"unexpected expression {name!r} (expected _, a number, set_bit, clear_bit, bit_and, "
                        "bit_or, incr or decr)")

    def cond(self) -> Callable[[int], bool]:
        """A condition, as a predicate of the current parameter."""
        name = self.take().text
        if name == "true":
            if self.peek() == "(":
                self.take("(")
                self.take(")")
            return lambda p: True
        if name in ("and", "or"):
            self.take("(")
            a = self.cond()
            self.take(",")
            b = self.cond()
            self.take(")")
            return (lambda p: a(p) and b(p)) if name == "and" else (lambda p: a(p) or b(p))
        if name == "not":
            c = self.call(self.cond)
            return lambda p: not c(p)
        if name in ("bit_clear", "bit_set"):
            k = self.call(lambda: self.number(63))
            want = 0 if name == "bit_clear" else 1
            return lambda p: (p >> k) & 1 == want
        if name in ("is_ones", "is_zeros"):
            lo, n = self.call(self.bits)
            ones = (1 << n) - 1
            want = ones if name == "is_ones" else 0
            return lambda p: (p >> lo) & ones == want
        if name in _CONDS_VALUE or name in _CONDS_COUNT:
            self.take("(")
            lo, n = self.bits()
            self.take(",")
            v = self.number(64 if name in _CONDS_COUNT else None)
            self.take(")")
            ones = (1 << n) - 1
            if name in _CONDS_COUNT:
                f = _CONDS_COUNT[name]
                return lambda p: f(bin((p >> lo) & ones).count("1"), v)
            g = _CONDS_VALUE[name]
            return lambda p: g((p >> lo) & ones, v)
        raise self.fail(f"unknown condition {name!r}")


def _split_alternatives(body: list[Any]) -> list[list[Any]]:
    alts: list[list[Any]] = [[]]
    depth = 0
    for t in body:
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            depth -= 1
        if depth == 0 and t.text == "|":
            alts.append([])
            continue
        alts[-1].append(t)
    return alts


def expand(toks: list[Any], make: Callable[[str, str, int, int], Any]) -> list[Any]:
    """``toks`` (a Lark grammar's tokens) with its parametric rules expanded into plain
    rules (see the module doc); ``make(kind, text, line, column)`` builds a token."""
    if not any(_is_param_def(toks, i) for i in range(len(toks))):
        return toks
    # the definitions: name -> [(body tokens, condition or None)], and the rest of the grammar
    defs: dict[str, list[tuple[list[Any], Callable[[int], bool] | None]]] = {}
    where: dict[str, Any] = {}
    rest: list[Any] = []
    i = 0
    while i < len(toks):
        at_line_start = i == 0 or toks[i - 1].kind == "nl"
        if not (at_line_start and _is_param_def(toks, i)):
            rest.append(toks[i])
            i += 1
            continue
        name, j = toks[i].text, i + 4
        body: list[Any] = []
        while j < len(toks) and not (toks[j].kind == "nl" and not (j + 1 < len(toks) and toks[j + 1].text == "|")):
            if toks[j].kind != "nl":
                body.append(toks[j])
            j += 1
        if name in defs:
            raise GrammarError(f"parametric rule {name} is defined twice", toks[i].line, toks[i].column)
        where[name] = toks[i]
        alts = []
        for alt in _split_alternatives(body):
            ifs = [n for n, t in enumerate(alt) if t.text == "%if"]
            cond = None
            if ifs:
                r = _Reader(alt[ifs[0] + 1 :], alt[ifs[0]])
                cond = r.cond()
                if r.i != len(r.toks):
                    raise r.fail(f"unexpected {r.toks[r.i].text!r} after the condition")
                alt = alt[: ifs[0]]
            alts.append((alt, cond))
        if all(cond is None for _, cond in alts) and not any(
                t.text == "::" and k + 1 < len(alt) and alt[k + 1].kind != "number"
                for alt, _ in alts for k, t in enumerate(alt)):
            raise GrammarError(f"rule {name!r} is parametric, but its body doesn't need parameters", toks[i].line,
                               toks[i].column)
        defs[name] = alts
        i = j
    # instances reachable from the constants the plain rules pass
    instances: dict[tuple[str, int], list[list[Any]]] = {}
    todo: list[tuple[str, int]] = []

    def refs(seq: list[Any], p: int | None) -> list[Any]:
        """``seq`` with each ``name::expr`` a name token of its instance (queued)."""
        out, k = [], 0
        while k < len(seq):
            t = seq[k]
            if t.kind == "name" and k + 1 < len(seq) and seq[k + 1].text == "::":
                if t.text not in defs:
                    raise GrammarError(f"{t.text}::... refers to {t.text}, which is not a parametric rule",
                                       t.line, t.column)
                r = _Reader(seq[k + 2 :], seq[k + 1])
                f = r.expr()
                if p is None and seq[k + 2].text != "_" and seq[k + 2].kind != "number":
                    raise GrammarError(f"{t.text}::{seq[k + 2].text}(...) outside a parametric rule: only a "
                                       "constant can be passed there", t.line, t.column)
                if p is None and seq[k + 2].text == "_":
                    raise GrammarError(f"{t.text}::_ outside a parametric rule", t.line, t.column)
                key = (t.text, f(p or 0) & _MASK64)
                if key not in instances:
                    if len(instances) >= MAX_INSTANCES:
                        raise LimitExceeded("max_parametric_instances", len(instances) + 1, MAX_INSTANCES,
                                            "instances of parametric rules (llguidance expands them lazily; "
                                            "masklab writes each one)")
                    instances[key] = []
                    todo.append(key)
                out.append(("ref", key, t))
                k += 2 + r.i
                continue
            if t.kind == "name" and t.text in defs:
                raise GrammarError(f"rule {t.text!r} is parametric, but no parameter is given ({t.text}::...)",
                                   t.line, t.column)
            out.append(t)
            k += 1
        return out

    plain = refs(rest, None)
    while todo:
        name, p = todo.pop()
        instances[(name, p)] = [refs(alt, p) for alt, cond in defs[name] if cond is None or cond(p)]
    # drop what derives nothing: an instance lives when one of its alternatives refers only to live ones
    live: set[tuple[str, int]] = set()
    changed = True
    while changed:
        changed = False
        for key, alts in instances.items():
            if key not in live and any(all(x[1] in live for x in alt if isinstance(x, tuple)) for alt in alts):
                live.add(key)
                changed = True
    taken = {t.text for t in toks if t.kind == "name"}
    names: dict[tuple[str, int], str] = {}
    for key in instances:
        base = f"{key[0]}__p{key[1]:x}"
        n = base
        while n in taken:
            n += "_"
        taken.add(n)
        names[key] = n

    def written(seq: list[Any]) -> list[Any]:
        return [make("name", names[x[1]], x[2].line, x[2].column) if isinstance(x, tuple) else x for x in seq]

    out = written(plain)
    last = toks[-1]
    for key, alts in instances.items():
        w = where[key[0]]
        kept = [alt for alt in alts if all(x[1] in live for x in alt if isinstance(x, tuple))]
        out.append(make("nl", "\n", last.line, 1))
        out += [make("name", names[key], w.line, w.column), make("punct", ":", w.line, w.column)]
        if not kept:
            out.append(make("regex", _NEVER, w.line, w.column))
        for n, alt in enumerate(kept):
            if n:
                out.append(make("punct", "|", w.line, w.column))
            out += written(alt) if alt else [make("string", '""', w.line, w.column)]
    out.append(make("nl", "\n", last.line, 1))
    return out
