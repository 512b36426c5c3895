"""What a peer's compile leaves unenforced (issue 44): the ``compiled.unenforced`` list.

Every compile can say which keywords of its input the masks do not hold.  masklab's own
strategies never leave one out (they refuse: ``UnsupportedSchema``), so theirs is empty
(:class:`~toolkit.core.protocol.CompiledBase`).  A peer's list comes from two places:

* **its engine's warnings at compile time**, each turned into one entry per keyword it
  names (:func:`from_messages`, :func:`toolkit.jsonschema.meta.keywords_named`):
  llguidance returns them (``LLMatcher.get_grammar_warnings()``: with its JSON
  options ``lenient`` or ``coerce_one_of``, what it would otherwise refuse); xgrammar's
  C++ writes them to the process's standard error (file descriptor 2, not Python's
  ``sys.stderr``), so the adapter captures that descriptor around its compile call
  (:func:`native_warnings`);
* **keywords its JSON Schema compiler accepts and does not enforce, silently**: the
  engine class's ``unenforced_keywords`` (keyword -> what it does and where that is
  shown), reported for each one a schema holds, with the JSON pointer of its first
  place and how many there are (:func:`documented`).

An entry is a dict: ``keyword`` (None when a warning names none), ``message`` (the
engine's words, or the class's), and, for the documented ones, ``pointer`` and
``count``.  The harness records them per item (``rec["unenforced"]``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from toolkit.jsonschema.meta import keyword_pointers, keywords_named

__all__ = ["from_messages", "documented", "native_warnings"]

_T = TypeVar("_T")
_FD2 = threading.Lock()  # file descriptor 2 is the process's: one capture at a time
#: a warning line of xgrammar's C++ logging: "[08:38:58] /project/cpp/file.cc:832: Warning: ..."
_NATIVE_WARNING = re.compile(r"^\[[0-9:. ]+\] [^ ]+:\d+: Warning: (.*)$")


#: warnings that leave the meaning whole: xgrammar's regex reader on an identity escape
#: (``\,`` is ``,`` in its regexes as in ECMA-262 and Python), which is no loss
_SAME_MEANING = re.compile(r"Escape sequence '\\.' is not recognized\. The character itself will be matched")


def from_messages(messages: Iterable[str], schema: Any = None) -> list[dict[str, Any]]:
    """One entry per keyword each message names (the keywords ``schema`` holds, when it
    holds some of them: ``"ignoring minLength/maxLength"`` beside a ``maxLength`` alone
    is ``maxLength``); a message naming none is one entry with ``keyword`` None.  A
    warning that says the meaning is kept (:data:`_SAME_MEANING`) is no entry."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str | None, str]] = set()
    for message in messages:
        message = str(message).strip()
        if not message or _SAME_MEANING.search(message):
            continue
        named = keywords_named(message)
        if named and isinstance(schema, dict):
            present = {k for k, _ in keyword_pointers(schema, frozenset(named))}
            named = [k for k in named if k in present] or named
        for keyword in named or [None]:
            if (keyword, message) not in seen:
                seen.add((keyword, message))
                out.append({"keyword": keyword, "message": message})
    return out


def documented(schema: Any, keywords: Mapping[str, str]) -> list[dict[str, Any]]:
    """An entry per keyword of ``keywords`` (keyword -> what the engine does with it)
    that ``schema`` holds: the message, the JSON pointer of the first (sub)schema holding
    it and how many hold it."""
    if not keywords or not isinstance(schema, dict):
        return []
    found: dict[str, list[str]] = {}
    for keyword, pointer in keyword_pointers(schema, keywords):
        found.setdefault(keyword, []).append(pointer)
    return [{"keyword": k, "message": keywords[k], "pointer": ps[0], "count": len(ps)} for k, ps in found.items()]


def native_warnings(call: Callable[[], _T]) -> tuple[_T, list[str]]:
    """``call()``'s result and the warnings native code wrote to file descriptor 2 while
    it ran (xgrammar's ``"... Warning: MESSAGE"`` lines, MESSAGE kept).  Descriptor 2 goes
    to a temporary file for the call and comes back after it, however the call ends;
    whatever else was written there meanwhile is written back to it.  Where descriptor 2
    cannot be duplicated, the call runs as it is and no warning is seen."""
    with _FD2:
        try:
            if sys.stderr is not None:
                sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError):
            return call(), []
        sink = tempfile.TemporaryFile()
        try:
            os.dup2(sink.fileno(), 2)
            try:
                result = call()
            except BaseException:
                os.dup2(saved, 2)
                sink.seek(0)
                _write_back(sink.read())  # (what the engine said before it failed)
                raise
            os.dup2(saved, 2)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
        finally:
            os.close(saved)
            sink.close()
    warnings: list[str] = []
    other: list[str] = []
    for line in text.splitlines(keepends=True):
        m = _NATIVE_WARNING.match(line.rstrip("\r\n"))
        if m:
            warnings.append(m.group(1).strip())
        else:
            other.append(line)
    _write_back("".join(other).encode("utf-8", "replace"))
    return result, warnings


def _write_back(data: bytes) -> None:
    """``data`` onto file descriptor 2 again (what a capture took that was no warning)."""
    while data:
        try:
            data = data[os.write(2, data):]
        except OSError:
            return
