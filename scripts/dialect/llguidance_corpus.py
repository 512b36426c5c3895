"""llguidance's own Lark tests, read by masklab and by llguidance: which grammars each compiles, and the verdicts.

llguidance's ``parser/tests/test_lark.rs`` (in its source distribution, e.g. the
``llguidance-1.9.1.tar.gz`` sdist on PyPI) calls ``lark_str_test_many(grammar, accepted,
rejected)``, ``lark_ok(grammar)`` and ``lark_err_test(grammar, error)`` with literal Rust
strings.  This script reads those calls (a call whose arguments are built at run time,
with ``format!`` or a loop, is counted as not read), compiles each grammar with
llguidance (``llguidance.LLMatcher.validate_grammar``) and with masklab
(``Grammar.from_lark``), and compares the verdicts on the strings: a string llguidance's
test accepts must be accepted by masklab's grammar, one it rejects must be rejected
(``FINAL_REJECT:`` strings are prefixes of the language, rejected as whole strings).

Nothing of llguidance's is committed: the test file is read where the user unpacked it.

    python scripts/dialect/llguidance_corpus.py PATH/test_lark.rs --out results/dialect

writes ``corpus.csv`` (one row per grammar: where, llguidance's verdict, masklab's, the
refusal, verdict disagreements) and prints the summary.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

CALLS = ("lark_str_test_many_quiet", "lark_str_test_many", "lark_ok", "lark_err_test", "json_test_many",
         "json_err_test")


class NotLiteral(Exception):
    """An argument built at run time."""


@dataclass
class Case:
    line: int
    call: str
    grammar: str
    accepted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


_ESC = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


class _Reader:
    def __init__(self, text: str, pos: int) -> None:
        self.s, self.i = text, pos

    def ws(self) -> None:
        while True:
            m = re.compile(r"\s+|//[^\n]*").match(self.s, self.i)
            if not m or m.end() == self.i:
                return
            self.i = m.end()

    def peek(self, lit: str) -> bool:
        self.ws()
        return self.s.startswith(lit, self.i)

    def eat(self, lit: str) -> None:
        if not self.peek(lit):
            raise NotLiteral(f"expected {lit!r} at {self.i}")
        self.i += len(lit)

    def string(self) -> str:
        self.ws()
        s, i = self.s, self.i
        m = re.compile(r'r(#*)"').match(s, i)
        if m:
            end = s.index('"' + m.group(1), m.end())
            self.i = end + 1 + len(m.group(1))
            return s[m.end():end]
        if not s.startswith('"', i):
            raise NotLiteral(f"not a string literal at {i}: {s[i:i + 30]!r}")
        out, i = [], i + 1
        while s[i] != '"':
            c = s[i]
            if c == "\\":
                n = s[i + 1]
                if n == "\n":  # a line continuation: the newline and the next line's indentation vanish
                    i += 2
                    while s[i] in " \t\n":
                        i += 1
                    continue
                if n == "u":
                    m = re.compile(r"u\{([0-9a-fA-F]+)\}").match(s, i + 1)
                    out.append(chr(int(m.group(1), 16)))
                    i = m.end()
                    continue
                if n == "x":
                    out.append(chr(int(s[i + 2:i + 4], 16)))
                    i += 4
                    continue
                out.append(_ESC[n])
                i += 2
                continue
            out.append(c)
            i += 1
        self.i = i + 1
        return "".join(out)

    def strings(self, item=None) -> list[str]:
        """``&[...]`` of string literals (or of ``item``), or the name of a ``let`` bound to one earlier."""
        self.ws()
        m = re.compile(r"[a-z_][a-z0-9_]*\b").match(self.s, self.i)
        if m and not self.s.startswith("json!", self.i):  # a variable: its last `let` before the call
            lets = list(re.finditer(r"let\s+" + m.group() + r"\s*=\s*", self.s[: self.i]))
            if not lets:
                raise NotLiteral(m.group())
            self.i = m.end()
            return _Reader(self.s, lets[-1].end()).strings(item)
        if self.peek("&"):
            self.eat("&")
        self.eat("[")
        items: list = []
        while not self.peek("]"):
            items.append((item or self.string)())
            if self.peek(","):
                self.eat(",")
        self.eat("]")
        return items

    def json_value(self):
        """``json!(...)`` (or ``&json!(...)``) as a value: JSON but for trailing commas."""
        if self.peek("&"):
            self.eat("&")
        self.eat("json!(")
        depth, j, s = 1, self.i, self.s
        while depth:
            c = s[j]
            if c == '"':
                j = s.index('"', j + 1)
                while s[j - 1] == "\\" and (j - len(s[:j].rstrip("\\"))) % 2:
                    j = s.index('"', j + 1)
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            j += 1
        text = re.sub(r",(\s*[}\]])", r"\1", s[self.i : j - 1])
        self.i = j
        try:
            return json.loads(text)
        except ValueError as e:
            raise NotLiteral(str(e)) from None


def read_cases(text: str) -> tuple[list[Case], list[int]]:
    """The literal calls of ``test_lark.rs`` and the lines of the calls that are not literal."""
    cases: list[Case] = []
    skipped: list[int] = []
    for m in re.finditer(r"\b(" + "|".join(CALLS) + r")\(", text):
        if text[:m.start()].rstrip().endswith("fn"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        r = _Reader(text, m.end())
        try:
            if m.group(1).startswith("json_"):
                schema = r.json_value()
                case = Case(line, m.group(1), "start: %json " + json.dumps(schema, ensure_ascii=False))
                r.eat(",")
                if case.call == "json_test_many":
                    case.accepted = [json.dumps(v, ensure_ascii=False, separators=(",", ":"))
                                     for v in r.strings(r.json_value)]
                    r.eat(",")
                    case.rejected = [json.dumps(v, ensure_ascii=False, separators=(",", ":"))
                                     for v in r.strings(r.json_value)]
                else:
                    r.string()
                cases.append(case)
                continue
            grammar = r.string()
            case = Case(line, m.group(1), grammar)
            if case.call.startswith("lark_str_test_many"):
                r.eat(",")
                case.accepted = r.strings()
                r.eat(",")
                case.rejected = r.strings()
            elif case.call == "lark_err_test":
                r.eat(",")
                r.string()
        except (NotLiteral, ValueError, KeyError, AttributeError, IndexError):
            skipped.append(line)
            continue
        cases.append(case)
    return cases, skipped


def llguidance_compiles(grammar: str) -> tuple[bool, str]:
    import llguidance

    try:
        ok, _, err = _validate(llguidance, grammar)
    except Exception as e:  # noqa: BLE001 - llguidance raises plain exceptions on bad grammars
        return False, str(e).splitlines()[0][:160]
    return ok, err


def _validate(llguidance, grammar: str) -> tuple[bool, list[str], str]:
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(llguidance.grammar_from("lark", grammar))
    return not is_error, messages, messages[0].splitlines()[0] if is_error and messages else ""


def masklab_verdicts(case: Case) -> tuple[str, str, list[str]]:
    """(``compiled`` | ``refused`` | ``error``, the refusal, the strings whose verdict differs)."""
    import toolkit.jsonschema  # noqa: F401 - %json needs the schema compiler registered
    from toolkit.core.errors import MasklabError, UnsupportedGrammar, UnsupportedSchema
    from toolkit.grammar.ir import Grammar

    try:
        g = Grammar.from_lark(case.grammar)
    except (UnsupportedGrammar, UnsupportedSchema) as e:
        return "refused", str(e).splitlines()[0][:200], []
    except MasklabError as e:
        return "error", str(e).splitlines()[0][:200], []
    wrong = []
    for s in case.accepted:
        if not g.accepts(s):
            wrong.append(f"refused accepted {s!r}")
    for s in case.rejected:
        whole = s.removeprefix("FINAL_REJECT:")
        if g.accepts(whole):
            wrong.append(f"accepted rejected {s!r}")
    return "compiled", "", wrong


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("test_lark", type=Path, help="llguidance's parser/tests/test_lark.rs")
    ap.add_argument("--out", type=Path, help="folder for corpus.csv")
    a = ap.parse_args(argv)
    cases, skipped = read_cases(a.test_lark.read_text())
    rows = []
    for c in cases:
        llg_ok, llg_err = llguidance_compiles(c.grammar)
        ours, why, wrong = masklab_verdicts(c)
        rows.append({"line": c.line, "call": c.call, "llguidance": "compiled" if llg_ok else "refused",
                     "masklab": ours, "strings": len(c.accepted) + len(c.rejected) if ours == "compiled" else 0,
                     "why": why, "wrong": " | ".join(wrong), "llguidance_error": llg_err})
    both = [r for r in rows if r["llguidance"] == "compiled"]
    here = [r for r in both if r["masklab"] == "compiled"]
    wrong = [r for r in here if r["wrong"]]
    loose = [r for r in rows if r["llguidance"] == "refused" and r["masklab"] == "compiled"
             and r["call"].endswith("_err_test")]
    print(f"{len(cases)} grammars read ({len(skipped)} calls built at run time, not read: lines "
          f"{', '.join(map(str, skipped))})")
    print(f"llguidance compiles {len(both)}; masklab compiles {len(here)} of them "
          f"({sum(r['strings'] for r in here)} strings' verdicts compared, {len(wrong)} grammars with one that differs)")
    print(f"grammars llguidance refuses that masklab compiles: {len(loose)}")
    for r in both:
        if r["masklab"] != "compiled" or r["wrong"]:
            print(f"  line {r['line']}: {r['masklab']}: {r['why'] or r['wrong']}")
    for r in loose:
        print(f"  line {r['line']}: llguidance refuses ({r['llguidance_error'][:100]}), masklab compiles")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        with open(a.out / "corpus.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        (a.out / "run.json").write_text(json.dumps(_provenance(a.test_lark, argv), indent=2) + "\n")
    return 0


def _provenance(test_lark: Path, argv: list[str] | None) -> dict:
    """What the run read and ran with: the test file's digest, the versions, the commit."""
    import datetime
    import hashlib
    import importlib.metadata
    import platform
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"command": "python scripts/dialect/llguidance_corpus.py " + " ".join(argv or sys.argv[1:]),
            "test_lark_sha256": hashlib.sha256(test_lark.read_bytes()).hexdigest(),
            "llguidance": importlib.metadata.version("llguidance"), "masklab_commit": commit,
            "python": platform.python_version(), "date": datetime.date.today().isoformat()}


if __name__ == "__main__":
    sys.exit(main())
