"""Typed errors with diagnostics: every error says what went wrong and where.

One module, so callers can catch the whole family with :class:`MasklabError`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = [
    "MasklabError",
    "GrammarError",
    "Unsatisfiable",
    "RegexError",
    "UnsupportedGrammar",
    "UnsupportedSchema",
    "InvalidSchema",
    "LimitExceeded",
    "TimeLimitExceeded",
    "time_limit",
    "deadline",
    "check_deadline",
    "deadline_left",
    "DEFAULT_COMPILE_TIMEOUT",
    "VocabError",
    "HarnessError",
    "ERROR_CODES",
    "LIMIT_OPTIONS",
    "error_of",
    "raise_code",
]


class MasklabError(Exception):
    """Base class of every error masklab raises on purpose."""


class GrammarError(MasklabError):
    """A grammar that cannot be read: syntax error, unknown symbol, bad terminal.

    ``line`` and ``column`` are 1-based positions in the grammar text (None when
    the error has no single place, e.g. a missing start rule).
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = ""
        if line is not None:
            where = f" (line {line}" + (f", column {column})" if column is not None else ")")
        super().__init__(message + where)


class Unsatisfiable(GrammarError):
    """An input whose language is empty: no string (not even the empty one) is valid,
    so a matcher's first mask would allow nothing, not even EOS.

    ``rule`` names the grammar's symbol where no string is left (a rule without
    alternatives, one that only derives itself, or a terminal that matches nothing),
    ``path`` the symbols from the start rule to it; for a JSON Schema, ``keyword`` and
    ``pointer`` locate the part of the schema that made it empty, as
    :class:`UnsupportedSchema` does.
    """

    def __init__(self, message: str, *, rule: str | None = None, path: tuple[str, ...] = (),
                 keyword: str | None = None, pointer: str | None = None):
        self.rule = rule
        self.path = path
        self.keyword = keyword
        self.pointer = pointer
        super().__init__(message)


class RegexError(MasklabError):
    """A regex that cannot be compiled to a byte DFA; ``fragment`` is the offending part."""

    def __init__(self, message: str, pattern: str, fragment: str | None = None):
        self.pattern = pattern
        self.fragment = fragment
        detail = f" at {fragment!r}" if fragment else ""
        super().__init__(f"{message}{detail} in regex {_window(pattern, fragment)}")


_WINDOW = 160  # characters of a long pattern an error message shows


def _window(pattern: str, fragment: str | None) -> str:
    """The pattern as the message shows it: whole when short, else a window around the
    fragment (or its start) with the length, never a megabyte of generated regex."""
    if len(pattern) <= _WINDOW:
        return repr(pattern)
    at = pattern.find(fragment) if fragment else 0
    at = max(0, at)
    lo = max(0, at - _WINDOW // 2)
    hi = min(len(pattern), lo + _WINDOW)
    shown = ("..." if lo else "") + pattern[lo:hi] + ("..." if hi < len(pattern) else "")
    return f"{shown!r} ({len(pattern):,} characters, {lo}-{hi} shown)"


class UnsupportedGrammar(MasklabError):
    """A grammar outside what a strategy can handle (e.g. recursion for a regular-only one),
    or a construct of a grammar dialect masklab does not read; ``line`` and ``column``
    (1-based) say where, when the construct has a place in the text."""

    def __init__(self, message: str = "", line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(message + where)


class UnsupportedSchema(MasklabError):
    """A JSON Schema keyword that cannot be compiled exactly; ``pointer`` locates it."""

    def __init__(self, keyword: str, pointer: str, reason: str = ""):
        self.keyword = keyword
        self.pointer = pointer
        self.reason = reason
        super().__init__(
            f"unsupported keyword {keyword!r} at {pointer or '/'}" + (f": {reason}" if reason else "")
        )


class InvalidSchema(UnsupportedSchema):
    """A JSON Schema keyword whose value the spec does not allow (``maxLength: 2.5``,
    ``required: "a"``): refused rather than read as something else.  ``keyword`` and
    ``pointer`` (the keyword's own) locate it, ``value`` is the value found."""

    def __init__(self, keyword: str, pointer: str, reason: str = "", value: object = None):
        super().__init__(keyword, pointer, reason)
        self.value = value
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        Exception.__init__(self, f"invalid value {shown} of keyword {keyword!r} at {pointer or '/'}"
                                 + (f": {reason}" if reason else ""))


class LimitExceeded(MasklabError):
    """A configured limit (states, items, time, memory) was exceeded."""

    def __init__(self, limit: str, value: int | float, maximum: int | float, detail: str = ""):
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.detail = detail
        super().__init__(f"limit {limit!r} exceeded: {value} > {maximum}" + (f" ({detail})" if detail else ""))


class TimeLimitExceeded(LimitExceeded):
    """A block ran past its wall-clock limit (:func:`time_limit`)."""


#: The C error codes of toolkit/core/cutil.pxd (``ErrCode``), by name.
ERROR_CODES: dict[str, int] = {
    "ERR_NONE": 0,
    "ERR_MEMORY": -1,
    "ERR_NO_CACHE": -2,
    "ERR_SHAPE": -3,
    "ERR_MAX_STATES": -10,
    "ERR_MAX_LEXER_STATES": -11,
    "ERR_MAX_ROW_ITEMS": -12,
    "ERR_MAX_STEPS": -13,
    "ERR_MAX_CHART_ITEMS": -14,
}

#: The limit codes: the limit each one is (its option's name, or the option named in
#: what it counts), and what it counts.
LIMIT_OPTIONS: dict[int, tuple[str, str]] = {
    -10: ("max_states", "DFA states built"),
    -11: ("max_lexer_states", "lexer states (sets of live lexeme states) built for this grammar"),
    -12: ("max_row_items", "Earley items in one row (parser set)"),
    -13: ("max_steps", "parser items plus lexer states built for one mask or token"),
    -14: ("max_items", "Earley items in one chart"),
}


def error_of(code: int, value: int = 0, limit: int | None = None, where: str = "") -> Exception | None:
    """The exception a C function's error ``code`` stands for (None for ERR_NONE).

    ``value`` is what the code reports (the size reached); ``limit`` the configured
    maximum of a limit code; ``where`` names the module or engine for the message."""
    if code == 0:
        return None
    prefix = f"{where}: " if where else ""
    if code in LIMIT_OPTIONS:
        option, what = LIMIT_OPTIONS[code]
        return LimitExceeded(option, value, limit if limit is not None else value - 1, what)
    if code == ERROR_CODES["ERR_MEMORY"]:
        return MemoryError(f"{prefix}out of memory growing a table to {value} entries")
    if code == ERROR_CODES["ERR_NO_CACHE"]:
        return RuntimeError(f"{prefix}the tables have no cache (build_cache) for this vocabulary")
    if code == ERROR_CODES["ERR_SHAPE"]:
        return ValueError(f"{prefix}an array of the wrong size ({value})")
    return RuntimeError(f"{prefix}unknown error code {code} ({value})")


def raise_code(code: int, value: int = 0, limit: int | None = None, where: str = "") -> None:
    """Raise :func:`error_of`'s exception; nothing for ERR_NONE."""
    e = error_of(code, value, limit, where)
    if e is not None:
        raise e


class _Alarm(BaseException):
    """Raised by the alarm; a BaseException so no ``except Exception`` in the limited
    code swallows it.  :func:`time_limit` turns it into :class:`TimeLimitExceeded`."""


@contextmanager
def time_limit(seconds: float | None, what: str = "time") -> Iterator[None]:
    """Raise :class:`TimeLimitExceeded` (limit ``what``) when the block runs longer than
    ``seconds`` (None or 0: no limit).  It uses SIGALRM, so it applies on POSIX in the
    main thread (elsewhere the block runs unlimited), and native code is interrupted
    only when it next returns to Python: a peer's compile that never returns still
    hangs, one that returns late is still refused.  Limits nest: an enclosing one keeps
    running (its time counts on) and fires after the inner block ends if it is due."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    armed = [True]

    def alarm(signum: int, frame: object) -> None:  # noqa: ARG001
        if armed[0]:  # an alarm that lands while disarming is ignored
            raise _Alarm()

    old = signal.signal(signal.SIGALRM, alarm)
    t0 = time.perf_counter()
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # an enclosing limit's time left (0: none)
    try:
        yield
    except _Alarm:
        raise TimeLimitExceeded(what, round(time.perf_counter() - t0, 3), seconds, "seconds") from None
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if outer > 0:  # re-arm the enclosing limit with what is left of it (at least a tick)
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.perf_counter() - t0), 1e-3))


#: Seconds a compile may take before it is refused (the engines' ``compile_timeout``).
DEFAULT_COMPILE_TIMEOUT = 60.0

#: The active cooperative deadline: (start, end, seconds, option), or None.
_DEADLINE: ContextVar[tuple[float, float, float, str] | None] = ContextVar("masklab_deadline", default=None)


@contextmanager
def deadline(seconds: float | None, option: str = "compile_timeout") -> Iterator[None]:
    """A cooperative deadline for the block: code inside calls :func:`check_deadline`
    at its loop heads, which raises :class:`TimeLimitExceeded` naming ``option`` once
    ``seconds`` have passed.  Unlike :func:`time_limit` it works in any thread and says
    where the work stopped.  None or 0: no limit.  Deadlines nest; the earlier end wins."""
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0):
        raise ValueError(f"{option} must be a non-negative number of seconds (0: no limit), got {seconds!r}")
    outer = _DEADLINE.get()
    if not seconds:
        yield
        return
    start = time.perf_counter()
    end = start + seconds
    if outer is not None and outer[1] <= end:
        mine = outer
    else:
        mine = (start, end, float(seconds), option)
    token = _DEADLINE.set(mine)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check_deadline(where: str = "") -> None:
    """Raise :class:`TimeLimitExceeded` when the active :func:`deadline` has passed;
    ``where`` (a JSON pointer, a grammar rule, a phase) goes into the message.  Cheap
    enough for every loop head of a compiler (a context-variable read and a clock)."""
    d = _DEADLINE.get()
    if d is None:
        return
    now = time.perf_counter()
    if now > d[1]:
        raise TimeLimitExceeded(d[3], round(now - d[0], 3), d[2], f"seconds; stopped at {where}" if where else "seconds")


def deadline_left() -> tuple[float, str] | None:
    """``(seconds left, option)`` of the active :func:`deadline` (at least 0), None when
    there is none: for a call that cannot check the deadline itself (a library's loop),
    to be bounded some other way (:func:`time_limit`)."""
    d = _DEADLINE.get()
    if d is None:
        return None
    return max(0.0, d[1] - time.perf_counter()), d[3]


class HarnessError(MasklabError):
    """A benchmark run that cannot start or go on (bad output folder, engine missing, a
    worker that cannot start), whatever runs its workers (:mod:`toolkit.bench.pool`,
    :mod:`toolkit.bench.cluster`)."""


class VocabError(MasklabError):
    """A vocabulary spec or tokenizer file that cannot be loaded."""
