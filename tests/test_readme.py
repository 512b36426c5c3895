"""Every ```python block of README.md runs as it is written.

Each snippet runs in a fresh interpreter with the repository root as its working
folder (where a reader of the README stands after ``make``), so it may use only files
that are in the repository.  A snippet that reads the shared folder (it names
``MASKLAB_SHARED``, ``shared_dir`` or ``../shared``, or carries the comment
``# needs: shared``) is skipped, saying why, when that folder is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests._support.shared import PROJECT_ROOT, SHARED

README = PROJECT_ROOT / "README.md"
TIMEOUT_S = 120
_FENCE = re.compile(r"^```(\S*)\s*$")
_NEEDS_SHARED = re.compile(r"MASKLAB_SHARED|shared_dir\b|\.\./shared|#\s*needs:\s*shared")


@dataclass(frozen=True)
class Snippet:
    line: int  # of the opening fence, 1-based
    code: str

    @property
    def first_line(self) -> str:
        return next((s.strip() for s in self.code.splitlines() if s.strip()), "")

    @property
    def needs_shared(self) -> bool:
        return bool(_NEEDS_SHARED.search(self.code))


def python_snippets(text: str) -> list[Snippet]:
    """The ```python blocks of a Markdown text, in order (an unclosed block is an error)."""
    snippets, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if lang is None:
            if m:
                lang, start, body = m.group(1).lower(), n, []
        elif m and not m.group(1):
            if lang in ("python", "py"):
                snippets.append(Snippet(start, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        raise ValueError(f"README.md: the ``` block opened at line {start} is never closed")
    return snippets


SNIPPETS = python_snippets(README.read_text(encoding="utf-8"))


def test_extraction_finds_the_snippets() -> None:
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```\nplain\n```\n```python\n\ny = 2\n```\n"
    got = python_snippets(text)
    assert [(s.line, s.code, s.first_line) for s in got] == [(2, "x = 1\n", "x = 1"), (11, "\ny = 2\n", "y = 2")]
    with pytest.raises(ValueError, match="line 1"):
        python_snippets("```python\nx = 1\n")
    assert SNIPPETS, "README.md has no ```python block"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: f"line{s.line}")
def test_readme_snippet_runs(snippet: Snippet) -> None:
    if snippet.needs_shared and not SHARED.is_dir():
        pytest.skip(f"README snippet at line {snippet.line} ({snippet.first_line!r}) reads the shared "
                    f"folder {SHARED}, which is absent (set MASKLAB_SHARED)")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.setdefault("MASKLAB_SHARED", str(SHARED))
    try:
        proc = subprocess.run([sys.executable, "-c", snippet.code], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"README.md line {snippet.line}: the snippet starting {snippet.first_line!r} "
                    f"ran past {TIMEOUT_S} s")
    if proc.returncode != 0:
        pytest.fail(f"README.md line {snippet.line}: the snippet starting {snippet.first_line!r} "
                    f"failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", pytrace=False)
