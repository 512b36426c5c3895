"""README.md and docs/*.md say what works: their code runs, their links lead somewhere,
their ``masklab`` commands parse.

* Every ```python block of README.md and of each docs/*.md runs as it is written, each
  in a fresh interpreter with the repository root as its working folder (where a reader
  stands after ``make``), so it may use only files that are in the repository.  A
  snippet that reads the shared folder (it names ``MASKLAB_SHARED``, ``shared_dir`` or
  ``../shared``, or carries the comment ``# needs: shared``) is skipped, saying why,
  when that folder is absent.  A block whose fence says ``python excerpt`` (a method
  lifted out of its class, in docs/extending.md) is not run; it must still parse.
* Every ```json block is JSON, and one holding ``"tests"`` is a dataset item that
  :func:`toolkit.data.datasets.load_item` reads.
* Every relative Markdown link (and image) points to a file or folder that exists, and
  its ``#anchor``, into a Markdown file, to one of that file's headings.
* Every ``masklab COMMAND ...`` (or ``python -m toolkit COMMAND ...``) of a shell block
  (```sh, ```bash, ```shell) is parsed by the CLI's own argparse parser: the command
  exists and takes those options.  Shell variables stay as text; a command in a pipe
  or with a here-document is skipped, saying so.
* README.md's own commands also run, in order, as a reader would take them: its dataset
  item saved where the prose says, then each ``masklab`` command (``/tmp/`` under the test's
  folder, ``../shared`` as ``MASKLAB_SHARED``); each exits as documented with no traceback.
  Only the ``make`` lines of :data:`NOT_RUN` are not run, each for the reason given there.
* README.md has at most :data:`README_MAX_LINES` lines: it is the front door, the rest
  lives in docs/.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests._support.shared import PROJECT_ROOT, SHARED

README = PROJECT_ROOT / "README.md"
DOCS = [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
TIMEOUT_S = 120
_FENCE = re.compile(r"^```(.*)$")
_NEEDS_SHARED = re.compile(r"MASKLAB_SHARED|shared_dir\b|\.\./shared|#\s*needs:\s*shared")
_SHELLS = ("sh", "bash", "shell")


def _rel(path: Path) -> str:
    return path.relative_to(PROJECT_ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """A fenced code block: where it opens, its info string and its text."""

    path: Path
    line: int  # of the opening fence, 1-based
    info: str  # "python", "python excerpt", "sh", ""...
    code: str

    @property
    def lang(self) -> str:
        return self.info.split()[0].lower() if self.info else ""

    @property
    def excerpt(self) -> bool:
        return "excerpt" in self.info.split()[1:]

    @property
    def where(self) -> str:
        return f"{_rel(self.path)} line {self.line}"

    @property
    def first_line(self) -> str:
        return next((s.strip() for s in self.code.splitlines() if s.strip()), "")

    @property
    def needs_shared(self) -> bool:
        return bool(_NEEDS_SHARED.search(self.code))


def code_blocks(text: str, path: Path = README) -> list[Block]:
    """The fenced (```) blocks of a Markdown text, in order (an unclosed block is an error)."""
    blocks, info, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if info is None:
            if m:
                info, start, body = m.group(1).strip(), n, []
        elif m and not m.group(1).strip():
            blocks.append(Block(path, start, info, "\n".join(body) + "\n"))
            info = None
        else:
            body.append(line)
    if info is not None:
        raise ValueError(f"{_rel(path)}: the ``` block opened at line {start} is never closed")
    return blocks


def python_snippets(text: str, path: Path = README) -> list[Block]:
    """The ```python blocks of a Markdown text, in order, excerpts included."""
    return [b for b in code_blocks(text, path) if b.lang in ("python", "py")]


BLOCKS = [b for p in DOCS for b in code_blocks(p.read_text(encoding="utf-8"), p)]
SNIPPETS = [b for b in BLOCKS if b.lang in ("python", "py") and not b.excerpt]
EXCERPTS = [b for b in BLOCKS if b.lang in ("python", "py") and b.excerpt]
JSON_BLOCKS = [b for b in BLOCKS if b.lang == "json"]


def _block_id(b: Block) -> str:
    return f"{_rel(b.path)}:line{b.line}"


def test_extraction_finds_the_snippets() -> None:
    text = ("a\n```python\nx = 1\n```\n```sh\nls\n```\n```\nplain\n```\n```python\n\ny = 2\n```\n"
            "```python excerpt\n    def f(self): ...\n```\n")
    got = python_snippets(text)
    assert [(s.line, s.code, s.first_line, s.excerpt) for s in got] == [
        (2, "x = 1\n", "x = 1", False), (11, "\ny = 2\n", "y = 2", False), (15, "    def f(self): ...\n", "def f(self): ...", True)]
    assert [b.lang for b in code_blocks(text)] == ["python", "sh", "", "python", "python"]
    with pytest.raises(ValueError, match="line 1"):
        python_snippets("```python\nx = 1\n")
    assert [p for p in DOCS if p != README], "no docs/*.md found"
    assert any(s.path == README for s in SNIPPETS), "README.md has no ```python block"


def test_readme_is_a_front_door() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (f"README.md has {n} lines, more than {README_MAX_LINES}: move the details "
                                   "into docs/*.md and link them")


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_block_id)
def test_readme_snippet_runs(snippet: Block) -> None:
    if snippet.needs_shared and not SHARED.is_dir():
        pytest.skip(f"{snippet.where}: the snippet {snippet.first_line!r} reads the shared "
                    f"folder {SHARED}, which is absent (set MASKLAB_SHARED)")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.setdefault("MASKLAB_SHARED", str(SHARED))
    try:
        proc = subprocess.run([sys.executable, "-c", snippet.code], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{snippet.where}: the snippet starting {snippet.first_line!r} ran past {TIMEOUT_S} s")
    if proc.returncode != 0:
        pytest.fail(f"{snippet.where}: the snippet starting {snippet.first_line!r} "
                    f"failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", pytrace=False)


@pytest.mark.parametrize("excerpt", EXCERPTS, ids=_block_id)
def test_excerpt_parses(excerpt: Block) -> None:
    try:
        ast.parse(textwrap.dedent(excerpt.code))
    except SyntaxError as e:
        pytest.fail(f"{excerpt.where}: the excerpt starting {excerpt.first_line!r} is not Python: {e}",
                    pytrace=False)


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=_block_id)
def test_json_block_is_json(block: Block, tmp_path: Path) -> None:
    from toolkit.data.datasets import load_item

    try:
        doc = json.loads(block.code)
    except ValueError as e:
        pytest.fail(f"{block.where}: not JSON: {e}", pytrace=False)
    if isinstance(doc, dict) and "tests" in doc:  # a dataset item, as a reader would save it
        path = tmp_path / "item.json"
        path.write_text(block.code, encoding="utf-8")
        item = load_item(path)
        assert item.cases, f"{block.where}: a dataset item without test instances"


# --- links ------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of a Markdown text outside fenced blocks, inline code blanked."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m and (not fenced or not m.group(1).strip()):  # an opening fence, or a closing one
            fenced = not fenced
        elif not fenced:
            out.append((n, _INLINE_CODE.sub(lambda c: " " * len(c.group(0)), line)))
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors GitHub gives the headings of a Markdown file (a repeated one gets -1, -2...)."""
    counts: dict[str, int] = {}
    out = set()
    for _, line in _prose(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            k = counts.get(slug, 0)
            out.add(f"{slug}-{k}" if k else slug)
            counts[slug] = k + 1
    return frozenset(out)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link and image of a Markdown file."""
    out = []
    for n, line in _prose(path.read_text(encoding="utf-8")):
        for m in _LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):  # https:, mailto:...
                continue
            out.append((n, target))
    return out


def test_link_extraction() -> None:
    assert _slug("`model.generate` through the transformers adapter") == "modelgenerate-through-the-transformers-adapter"
    assert _slug("Compare the strategies on your schema") == "compare-the-strategies-on-your-schema"
    assert anchors(README) >= {"two-commands", "compare-the-strategies-on-your-schema"}
    assert any(t == "docs/concepts.md" for _, t in links(README))


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_relative_links_resolve(path: Path) -> None:
    found = links(path)
    bad = []
    for line, target in found:
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"line {line}: {target} ({dest} does not exist)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"line {line}: {target} (no heading of {_rel(dest)} has the anchor #{anchor})")
    assert not bad, f"{_rel(path)} links to what is not there:\n" + "\n".join(bad)


# --- masklab commands of the shell blocks -------------------------------------------------

@dataclass(frozen=True)
class Command:
    path: Path
    line: int
    text: str  # the command line as written (continuations joined)
    argv: tuple[str, ...] | None  # the arguments after ``masklab``; None: not checked
    why_not: str = ""

    @property
    def where(self) -> str:
        return f"{_rel(self.path)} line {self.line}"


def _strip_comment(line: str) -> str:
    """``line`` without its shell comment (a ``#`` starting a word, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                continue
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _masklab_args(words: list[str]) -> list[str] | None:
    """The arguments of a simple command if it runs masklab (``masklab``, ``.venv/bin/masklab``,
    ``python -m toolkit``), after any ``NAME=value`` assignments; else None."""
    i = 0
    while i < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[i]):
        i += 1
    if i == len(words):
        return None
    prog = words[i].rsplit("/", 1)[-1]
    if prog == "masklab":
        return words[i + 1:]
    if re.fullmatch(r"python[0-9.]*", prog) and words[i + 1:i + 3] == ["-m", "toolkit"]:
        return words[i + 3:]
    return None


def shell_commands(block: Block) -> list[Command]:
    """The masklab commands of a shell block: one per simple command that runs masklab."""
    out: list[Command] = []
    lines = block.code.splitlines()
    n, heredoc_end = 0, None
    while n < len(lines):
        start = n
        line = lines[n]
        if heredoc_end is not None:  # a here-document's body is not commands
            if line.strip() == heredoc_end:
                heredoc_end = None
            n += 1
            continue
        while line.rstrip().endswith("\\") and n + 1 < len(lines):  # continuation lines
            n += 1
            line = line.rstrip()[:-1] + " " + lines[n]
        n += 1
        text = _strip_comment(line).strip()
        if not text:
            continue
        lex = shlex.shlex(text, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = ""
        tokens = list(lex)
        if "<<" in tokens:
            heredoc_end = tokens[tokens.index("<<") + 1] if tokens.index("<<") + 1 < len(tokens) else None
        simple: list[list[str]] = [[]]
        for t in tokens:
            if t in (";", "&&", "||", "&"):
                simple.append([])
            else:
                simple[-1].append(t)
        for words in simple:
            skip = ""
            if "|" in words:
                skip = "a pipe"
                words = words[:words.index("|")]
            if "<<" in words:
                skip = "a here-document"
            # redirections: the operator and its target are not arguments
            kept: list[str] = []
            it = iter(words)
            for w in it:
                if w in (">", ">>", "<", ">&", "&>"):
                    next(it, None)
                else:
                    kept.append(w)
            args = _masklab_args(kept)
            if args is None:
                continue
            where = block.line + 1 + start
            out.append(Command(block.path, where, text, None if skip else tuple(args),
                               f"{skip}: the shell, not the parser, would read it" if skip else ""))
    return out


COMMANDS = [c for b in BLOCKS if b.lang in _SHELLS for c in shell_commands(b)]


@cache
def masklab_parser() -> argparse.ArgumentParser:
    """The CLI's own parser with every command's arguments: ``toolkit.cli.build_parser()``
    where the CLI has it, else the older ``toolkit.cli._parser()``."""
    cli = import_module("toolkit.cli")
    build = getattr(cli, "build_parser", None) or cli._parser
    return build()


#: the commands that write a run folder (by default under results/, inside the clone)
WRITERS = ("bench", "sweep", "audit", "generate")


def parse_error(argv: tuple[str, ...]) -> str | None:
    """What the parser says against ``masklab ARGV`` (None: it parses), or, for a command
    that writes a run folder, that its ``--out`` is missing or inside the clone (a reader
    trying the docs would write into the repository)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = masklab_parser().parse_args(list(argv))
    except SystemExit as e:
        if e.code not in (0, None):  # 0: --help or --version
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {e.code}"
        return None
    if argv and argv[0] in WRITERS:
        out = Path(str(args.out))  # the default is a folder under results/
        if not out.is_absolute() or out.resolve().is_relative_to(PROJECT_ROOT):
            return (f"{argv[0]} writes its run folder inside the clone ({args.out}): give --out a folder "
                    "outside it, e.g. /tmp/masklab/...")
    return None


def test_shell_command_extraction() -> None:
    block = Block(README, 10, "sh", "\n".join([
        "V=llama3:$MASKLAB_SHARED/x D=d   # settings",
        "masklab bench --engines a,b \\",
        "    --data $D --out /tmp/x   # a comment",
        "make test",
        "masklab report /tmp/x > /tmp/r.md && masklab agree /tmp/x --engines a,b",
        "masklab engines | head -3",
        "cat > /tmp/f.json <<'EOF'",
        "masklab not-a-command",
        "EOF",
        "MASKLAB_ENGINES=toy=m:F .venv/bin/python -m toolkit mask --regex '[0-9]{1,3}' --prefix 12",
        "masklab mask --schema '{\"a#b\": 1}' x#y",
    ]) + "\n")
    got = [(c.line, c.argv) for c in shell_commands(block)]
    assert got == [
        (12, ("bench", "--engines", "a,b", "--data", "$D", "--out", "/tmp/x")),
        (15, ("report", "/tmp/x")),
        (15, ("agree", "/tmp/x", "--engines", "a,b")),
        (16, None),
        (20, ("mask", "--regex", "[0-9]{1,3}", "--prefix", "12")),
        (21, ("mask", "--schema", '{"a#b": 1}', "x#y")),
    ]
    assert parse_error(("bench", "--data", "/tmp/x", "--out", "/tmp/y")) is None
    assert "inside the clone" in (parse_error(("bench", "--data", "/tmp/x")) or "")
    assert "inside the clone" in (parse_error(("bench", "--out", "results/mine")) or "")
    assert "unrecognized arguments: --outt" in (parse_error(("bench", "--outt", "/tmp/y")) or "")
    assert "invalid choice" in (parse_error(("benchmark",)) or "")
    assert COMMANDS, "no masklab command in a shell block of README.md or docs/"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{_rel(c.path)}:line{c.line}")
def test_shell_command_parses(command: Command) -> None:
    if command.argv is None:
        pytest.skip(f"{command.where}: {command.text!r} is not checked ({command.why_not})")
    error = parse_error(command.argv)
    if error is not None:
        pytest.fail(f"{command.where}: `{command.text}` is not a command masklab takes: {error}", pytrace=False)


# --- the README's commands, run as a reader would -------------------------------------------

#: the shell lines of README.md that the walkthrough does not run, and why
NOT_RUN = {
    "make bench": "it writes results/quick/ inside the clone; CI's own run and the A/B of each layout change run it",
    "make test": "it is this suite",
}
#: ``masklab agree`` exits 1 when the engines' masks differ, which is what the README shows it finding
DOCUMENTED_EXIT = {"agree": (0, 1)}
_SAVE_AS = re.compile(r"`(/tmp/[^`\s]+\.json)`")


def readme_walkthrough(text: str, path: Path = README) -> list[tuple[str, object]]:
    """The steps a reader of ``text`` takes, in order: ``("save", (file, json_text))`` for a
    dataset item the prose says to save (the last ``/tmp/....json`` in inline code before the
    block), ``("run", Command)`` for each masklab command of a shell block, ``("skip", line)``
    for any other shell line."""
    steps: list[tuple[str, object]] = []
    lines = text.splitlines()
    for block in code_blocks(text, path):
        if block.lang == "json" and '"tests"' in block.code:
            named = _SAVE_AS.findall("\n".join(lines[:block.line - 1]))
            if named:
                steps.append(("save", (named[-1], block.code)))
        elif block.lang in _SHELLS:
            commands = {c.line: c for c in shell_commands(block)}
            for k, line in enumerate(block.code.splitlines()):
                where = block.line + 1 + k
                if where in commands:
                    steps.append(("run", commands[where]))
                elif _strip_comment(line).strip() and not line.startswith(" "):
                    steps.append(("skip", _strip_comment(line).strip()))
    return steps


def _localise(word: str, tmp: Path) -> str:
    """A README path as the test runs it: /tmp/... under the test's own folder, ../shared as
    MASKLAB_SHARED."""
    word = re.sub(r"(?<![\w.])/tmp/", f"{tmp}/", word)
    return re.sub(r"(?<![\w.])\.\./shared(?=/|$)", str(SHARED), word)


def test_walkthrough_extraction() -> None:
    steps = readme_walkthrough(README.read_text(encoding="utf-8"))
    kinds = [k for k, _ in steps]
    assert "save" in kinds and kinds.index("save") < kinds.index("run"), "the item is saved before bench reads it"
    skipped = [s for k, s in steps if k == "skip"]
    assert sorted(skipped) == sorted(NOT_RUN), f"shell lines neither run nor excused: {skipped}"
    assert _localise("../shared/tokenizers/x", Path("/t")) == f"{SHARED}/tokenizers/x"
    assert _localise("--data=/tmp/a", Path("/t")) == "--data=/t/a"
    assert _localise("llama3:../shared/t.model", Path("/t")) == f"llama3:{SHARED}/t.model"


def test_readme_commands_run(tmp_path: Path) -> None:
    """Every masklab command of README.md, run in order as a reader would (its files under
    a temporary folder instead of /tmp), exits as documented, with no traceback."""
    env = dict(os.environ, PYTHONHASHSEED="0", MASKLAB_SHARED=str(SHARED))
    unexcused = []
    for kind, step in readme_walkthrough(README.read_text(encoding="utf-8")):
        if kind == "save":
            name, body = step
            dest = Path(_localise(name, tmp_path))
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(body, encoding="utf-8")
            continue
        if kind == "skip":
            if step not in NOT_RUN:
                unexcused.append(step)
            continue
        assert isinstance(step, Command) and step.argv is not None, f"{step.where}: not runnable: {step.why_not}"
        argv = [_localise(w, tmp_path) for w in step.argv]
        if any(str(SHARED) in w for w in argv) and not SHARED.is_dir():
            continue  # the shared folder is absent: test_shell_command_parses still checks the command
        proc = subprocess.run([sys.executable, "-m", "toolkit", *argv], cwd=PROJECT_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        allowed = DOCUMENTED_EXIT.get(argv[0], (0,))
        assert proc.returncode in allowed and "Traceback" not in proc.stderr, (
            f"{step.where}: `{step.text}` exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    assert not unexcused, f"README shell lines the walkthrough neither runs nor excuses: {unexcused}"
