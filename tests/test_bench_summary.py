"""``masklab bench``: an engine's exceptions are recorded as the engine's, and the run
ends with a summary per engine (statuses, the first reasons of what was not measured)."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests._support.raising import FILL_MESSAGE
from tests._support.shared import PROJECT_ROOT
from toolkit.bench.measure import measure_item
from toolkit.bench.records import STATUSES, read_records, summary_lines
from toolkit.bench.run import run_bench
from toolkit.cli import main
from toolkit.data.datasets import load_item

RAISING_FILL = "tests._support.raising:RaisingFill"
RAISING_ACCEPT = "tests._support.raising:RaisingAccept"
RAISING_COMPILE = "tests._support.raising:RaisingCompile"
REFUSING = "tests._support.raising:Refusing"
GRAMMAR = PROJECT_ROOT / "datasets" / "grammars" / "g01_json.json"  # recursive: outlines refuses it
REGEX = PROJECT_ROOT / "datasets" / "regex" / "r01_iso_date.json"


def _data(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in (GRAMMAR, REGEX):
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def vocab() -> Any:
    from toolkit.core.vocab import load_vocab

    return load_vocab("tekken")


def _engine(name: str, vocab: Any) -> Any:
    from strategies import get_engine

    return get_engine(name, vocab)


# ----------------------------------------------------- the engine's exceptions --


def test_measure_item_records_an_engine_exception_as_the_engines_crash(vocab: Any) -> None:
    item = load_item(REGEX)
    rec = measure_item(_engine(RAISING_FILL, vocab), vocab, item)
    assert rec["status"] == "crash"
    first = rec["detail"].splitlines()[0]
    assert first == f"raising.fill_bitmask raised RuntimeError: {FILL_MESSAGE}"
    assert "harness:" not in rec["detail"]
    assert "raising.py" in rec["detail"] and "in fill_bitmask" in rec["detail"]  # the engine's frames
    assert rec["compile_s"] is not None  # what was measured before it stays

    rec = measure_item(_engine(RAISING_ACCEPT, vocab), vocab, item, name="my-engine")
    assert rec["status"] == "crash" and rec["engine"] == "my-engine"
    assert rec["detail"].startswith("my-engine.accept_allowed raised ZeroDivisionError")
    assert "in accept_token" in rec["detail"]

    rec = measure_item(_engine(RAISING_COMPILE, vocab), vocab, item)
    assert rec["status"] == "crash"
    assert rec["detail"].startswith("raising.compile raised KeyError: 'rule_the_plugin_forgot'")


def test_a_masklab_error_from_compile_stays_a_compile_error(vocab: Any) -> None:
    rec = measure_item(_engine(REFUSING, vocab), vocab, load_item(REGEX))
    assert rec["status"] == "compile_error"
    assert rec["detail"] == "UnsupportedGrammar: the refusing plug-in compiles nothing"


def test_a_harness_bug_is_not_blamed_on_the_engine(vocab: Any) -> None:
    class BrokenVocab:  # the harness's own code (tokenizing a test instance) fails
        def __getattr__(self, key: str) -> Any:
            return getattr(vocab, key)

        def encode(self, text: str) -> list[int]:
            raise ZeroDivisionError("the harness's bug")

    with pytest.raises(ZeroDivisionError, match="the harness's bug"):
        measure_item(_engine("llguidance", vocab), BrokenVocab(), load_item(REGEX))


def test_an_engine_exception_in_a_worker_is_the_engines_not_the_harness(tmp_path: Path) -> None:
    data = _data(tmp_path / "data")
    df = run_bench([RAISING_FILL, RAISING_COMPILE], data, out=tmp_path / "run", quick=True, timeout=60,
                   progress=False)
    assert len(df) == 4
    recs = {(r["engine"], r["item"]): r for r in read_records(tmp_path / "run")}
    for item in ("g01_json", "r01_iso_date"):
        fill = recs[(RAISING_FILL, item)]
        assert fill["status"] == "crash", fill
        assert fill["detail"].startswith(f"{RAISING_FILL}.fill_bitmask raised RuntimeError: {FILL_MESSAGE}\n")
        assert not fill["detail"].startswith("harness") and "Traceback" in fill["detail"]
        comp = recs[(RAISING_COMPILE, item)]
        assert comp["status"] == "crash", comp
        assert comp["detail"].startswith(f"{RAISING_COMPILE}.compile raised KeyError: 'rule_the_plugin_forgot'")


# --------------------------------------------------------------- the summary --


def _summary(out: str) -> list[str]:
    """The status lines after ``summary:``, up to the blank line before the times."""
    lines = out.rstrip("\n").splitlines()
    rest = lines[lines.index("summary:") + 1:]
    return rest[:rest.index("")] if "" in rest else rest


def _times(out: str) -> list[str]:
    """The timing table ``bench`` prints last (after ``times (``)."""
    lines = out.rstrip("\n").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("times ("))
    return lines[start + 1:]


def test_bench_ends_with_a_summary_per_engine_and_the_compile_errors_reasons(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data(tmp_path / "data")
    engines = ["outlines", REFUSING, RAISING_FILL]
    code = main(["bench", "--quick", "--engines", ",".join(engines), "--data", str(data),
                 "--out", str(tmp_path / "run"), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0  # a completed run: refusals and crashes are measurements (see the epilog)
    summary = _summary(out)
    assert all(len(line) <= 160 for line in summary), summary
    heads = [line for line in summary if not line.startswith(" ")]
    assert heads == [
        "outlines: 2 items: 1 passing, 1 compile_error, 0 timeout, 0 crash, 0 validation_error, 0 invalidation_error",
        f"{REFUSING}: 2 items: 0 passing, 2 compile_error, 0 timeout, 0 crash, 0 validation_error, "
        "0 invalidation_error",
        f"{RAISING_FILL}: 2 items: 0 passing, 0 compile_error, 0 timeout, 2 crash, 0 validation_error, "
        "0 invalidation_error",
    ]
    blocks: dict[str, list[str]] = {}
    head = ""
    for line in summary:
        if line.startswith(" "):
            blocks[head].append(line)
        else:
            head = line.split(": ")[0]
            blocks[head] = []
    (reason,) = blocks["outlines"]
    assert reason.startswith("  compile_error g01_json: UnsupportedGrammar: ") and "recursive" in reason
    # the same reason on both items is quoted once, with the first item's name
    assert blocks[REFUSING] == ["  compile_error g01_json: UnsupportedGrammar: the refusing plug-in compiles nothing"]
    (crash,) = blocks[RAISING_FILL]
    assert crash.startswith(f"  crash g01_json: {RAISING_FILL}.fill_bitmask raised RuntimeError: ")
    # last, the times: per engine its items and passes, TTFM and TBM over the items all passed
    times = _times(out)
    assert "TTFM p50 (ms)" in times[0] and "TBM p99 (µs)" in times[0]
    # label (a plug-in's with its version), then the columns
    rows = {re.sub(r" [\d.]+$", "", line.rsplit(None, 6)[0]): line.rsplit(None, 6)[1:3] for line in times[2:]}
    assert rows == {"ours: outlines": ["2", "1"], REFUSING: ["2", "0"], RAISING_FILL: ["2", "0"]}
    # the reasons are the records' own
    recs = read_records(tmp_path / "run")
    refused = next(r for r in recs if r["engine"] == "outlines" and r["status"] == "compile_error")
    assert refused["detail"].startswith(reason.split("g01_json: ", 1)[1].rstrip("."))


def test_bench_help_documents_the_summary_and_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 when the run completed" in text and "first reasons" in text


def _rec(engine: str, item: str, status: str, detail: Any = "") -> dict[str, Any]:
    return {"engine": engine, "item": item, "status": status, "detail": detail}


def test_summary_lines_count_every_status_and_quote_the_first_distinct_reasons() -> None:
    long = "UnsupportedSchema: " + "x" * 400
    recs = [
        _rec("b", "i0", "passing"),
        *(_rec("b", f"c{k}", "compile_error", f"UnsupportedGrammar: reason {k}\nsecond line") for k in range(5)),
        _rec("b", "c9", "compile_error", "UnsupportedGrammar: reason 0\nsame first line"),
        _rec("b", "t0", "timeout", "over the 60 s limit"),
        _rec("b", "t1", "timeout", "over the 60 s limit"),
        _rec("b", "v0", "validation_error", "case 0 (valid) rejected"),
        _rec("a", "l0", "compile_error", long),
        _rec("a", "h0", "crash", "harness: KeyError: 'x'\nTraceback ..."),
        _rec("a", "n0", "crash", math.nan),  # a DataFrame's missing detail
        _rec("a", "o0", "weird"),
    ]
    lines = summary_lines(recs, ["b", "a"])
    assert lines == [
        "b: 10 items: 1 passing, 6 compile_error, 2 timeout, 0 crash, 1 validation_error, 0 invalidation_error",
        "  compile_error c0: UnsupportedGrammar: reason 0",
        "  compile_error c1: UnsupportedGrammar: reason 1",
        "  compile_error c2: UnsupportedGrammar: reason 2",
        "  compile_error: 2 more distinct reason(s) in records.jsonl",
        "  timeout t0: over the 60 s limit",
        "a: 4 items: 0 passing, 1 compile_error, 0 timeout, 2 crash, 0 validation_error, 0 invalidation_error, "
        "1 weird",
        "  compile_error l0: " + long[: 160 - 2 - len("compile_error l0: ") - 3] + "...",
        "  crash h0: harness: KeyError: 'x'",
        "  crash n0: (no detail)",
        "  1 crash(es) are the harness's own bug, not a's (detail 'harness: ...')",
    ]
    assert all(len(line) <= 160 for line in lines)
    assert [s for s in STATUSES if s in lines[0]] == list(STATUSES)
    assert summary_lines([]) == []

