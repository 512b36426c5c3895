"""How much of a JSON Schema dataset the grammar compiler covers, judged by its tests.

For every schema: compile with :meth:`Grammar.from_json_schema`; then each test
instance (``json.dumps(data)``) must be accepted exactly when it is valid.  The
categories are MaskBench's: *passing* (compiled, every test right), *unsupported*
(an :class:`UnsupportedSchema`, counted by keyword), *unsatisfiable* (the compiler
proved that no value fits, :class:`Unsatisfiable`, and the dataset has no valid
instance either), *grammar error*, *validation error* (a valid instance rejected,
each by its cause), *invalidation error* (an invalid instance accepted: the grammar
is looser than the schema, the worst outcome), *timeout* and *crash* (any other
exception: always a bug).
"""

from __future__ import annotations

import collections
import json
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from toolkit.core.errors import (
    GrammarError,
    LimitExceeded,
    RegexError,
    TimeLimitExceeded,
    Unsatisfiable,
    UnsupportedSchema,
    time_limit,
)
from toolkit.data.datasets import iter_items, usable_items

__all__ = ["SchemaResult", "schema_coverage", "summarize"]


@dataclass
class SchemaResult:
    name: str
    status: str  # passing | unsupported | unsatisfiable | grammar_error | validation_error | invalidation_error
    #              | timeout | crash
    detail: str = ""
    seconds: float = 0.0  # compiling the schema and checking its instances
    failures: list[str] = field(default_factory=list)
    lark_ok: bool | None = None  # llguidance accepts to_lark() (None: not checked or not compiled)
    causes: list[str] = field(default_factory=list)  # per rejected valid instance (validation errors)
    cause_seconds: float = 0.0  # naming the causes (a second compile, in any order): not in ``seconds``


def _lark_ok(grammar) -> bool:
    import llguidance

    try:
        text = grammar.to_lark()
    except Exception:  # noqa: BLE001 - an unwritable grammar counts as not accepted
        return False
    return llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", text)) == ""


def check_item(item, timeout: float, check_lark: bool = False, **options: Any) -> SchemaResult:
    t0 = time.perf_counter()
    try:
        with time_limit(timeout, "seconds per schema"):  # compiling and checking, not llguidance
            try:
                grammar = item.grammar(**options)
            except UnsupportedSchema as e:
                return SchemaResult(item.name, "unsupported", e.keyword, time.perf_counter() - t0)
            except Unsatisfiable as e:
                valid = [c.text[:120] for c in item.cases if c.valid]
                if valid:  # a valid instance says it is not: the compiler is too tight there
                    return SchemaResult(item.name, "validation_error", f"{e.keyword}", time.perf_counter() - t0,
                                        valid, causes=["called unsatisfiable"] * len(valid))
                return SchemaResult(item.name, "unsatisfiable", f"{e.keyword}", time.perf_counter() - t0)
            except TimeLimitExceeded:
                raise
            except (GrammarError, RegexError, LimitExceeded) as e:
                return SchemaResult(item.name, "grammar_error", f"{type(e).__name__}: {e}"[:200],
                                    time.perf_counter() - t0)
            rejected_valid, accepted_invalid, causes = [], [], []
            unordered: list[Any] = []
            diagnosis = 0.0  # seconds naming causes (a diagnosis, not the compile measured)

            def any_order() -> Any:  # compiled once, when a valid instance is rejected
                if not unordered:
                    try:
                        unordered.append(grammar if options.get("property_order") == "any"
                                         else item.grammar(**{**options, "property_order": "any"}))
                    except (GrammarError, RegexError, LimitExceeded):
                        unordered.append(None)
                return unordered[0]

            for case in item.cases:
                ok = grammar.accepts(case.text)
                if case.valid and not ok:
                    rejected_valid.append(case.text[:120])
                    t1 = time.perf_counter()
                    causes.append(_cause(any_order, case.text))
                    diagnosis += time.perf_counter() - t1
                elif ok and not case.valid:
                    accepted_invalid.append(case.text[:120])
            dt = time.perf_counter() - t0 - diagnosis
        lark = _lark_ok(grammar) if check_lark else None
        if accepted_invalid:
            return SchemaResult(item.name, "invalidation_error", "", dt, accepted_invalid, lark)
        if rejected_valid:
            return SchemaResult(item.name, "validation_error", "", dt, rejected_valid, lark, causes, diagnosis)
        return SchemaResult(item.name, "passing", "", dt, lark_ok=lark)
    except TimeLimitExceeded:
        return SchemaResult(item.name, "timeout", f"> {timeout:g} s", time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - counted, and printed: always a bug
        return SchemaResult(item.name, "crash", "".join(traceback.format_exception_only(e)).strip()[:300],
                            time.perf_counter() - t0)


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v)


def _cause(any_order: Callable[[], Any], text: str) -> str:
    """Why the grammar rejects a valid instance, as far as a cheap test tells: the
    grammar of the same schema in any property order (``any_order()``, None when it
    does not compile) accepts it, so only the order of its keys is off (the compiler
    keeps the schema's); an object key that needs escapes (additional keys are
    written without); or one of the compiler's other tighter forms."""
    try:
        value = json.loads(text)
    except ValueError:
        return "not JSON"
    unordered = any_order()
    if unordered is not None and unordered.accepts(text):
        return "property order"
    if any(any(c in '"\\' or ord(c) < 0x20 for c in k) for k in _keys(value)):
        return "escaped key"
    return "tighter form"


def schema_coverage(source: str | Path, *, limit: int | None = None, timeout: float = 30.0,
                    progress: bool = False, check_lark: bool = False, skip_bad_items: bool = False,
                    **options: Any) -> list[SchemaResult]:
    """Check every schema item under ``source`` (the first ``limit``); see the module
    doc.  ``options`` go to :meth:`Grammar.from_json_schema` (``property_order="any"``).
    An item without test instances (nothing to judge it by) or whose schema its draft's
    meta-schema rejects is a :class:`~toolkit.data.datasets.DatasetError`, unless
    ``skip_bad_items`` leaves such items out (:func:`~toolkit.data.datasets.usable_items`)."""
    items = usable_items((it for it in iter_items(source) if it.kind == "schema"), limit, tests=True, schemas=True,
                         skip=skip_bad_items, command="masklab schema-coverage")
    bar = None
    if progress:
        bar = tqdm(total=len(items), unit="schema")
    out = []
    for item in items:
        out.append(check_item(item, timeout, check_lark, **options))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def summarize(results: list[SchemaResult]) -> str:
    n = len(results)
    by = collections.Counter(r.status for r in results)
    compiled = n - by["unsupported"] - by["unsatisfiable"] - by["grammar_error"] - by["timeout"] - by["crash"]
    lines = [
        f"schemas              {n}",
        f"compiled             {compiled} ({100 * compiled / max(n, 1):.1f}%)",
        f"passing              {by['passing']} ({100 * by['passing'] / max(n, 1):.1f}%)",
        f"validation errors    {by['validation_error']}  (a valid instance rejected)",
        f"invalidation errors  {by['invalidation_error']}  (an invalid instance accepted)",
        f"unsupported          {by['unsupported']}",
        f"unsatisfiable        {by['unsatisfiable']}  (no value fits, and the dataset has no valid instance)",
        f"grammar errors       {by['grammar_error']}",
        f"timeouts             {by['timeout']}",
        f"crashes              {by['crash']}",
    ]
    checked = [r for r in results if r.lark_ok is not None]
    if checked:
        ok = sum(r.lark_ok for r in checked)
        lines.append(f"to_lark() accepted by llguidance: {ok} of {len(checked)} compiled ({100 * ok / len(checked):.1f}%)")
    kw = collections.Counter(r.detail for r in results if r.status == "unsupported")
    if kw:
        lines.append("unsupported by keyword: " + ", ".join(f"{k} {v}" for k, v in kw.most_common()))
    causes = collections.Counter(c for r in results for c in r.causes)
    if causes:
        lines.append("valid instances rejected, by cause: " + ", ".join(f"{k} {v}" for k, v in causes.most_common()))
    secs = sorted(r.seconds for r in results)
    if secs:
        q = lambda f: secs[min(len(secs) - 1, int(f * len(secs)))]  # noqa: E731
        slow = max(results, key=lambda r: r.seconds)
        lines.append(f"seconds per schema   p50 {q(0.5):.3f}, p90 {q(0.9):.3f}, p99 {q(0.99):.3f}, "
                     f"max {slow.seconds:.2f} ({slow.name})")
        lines.append("slowest 10 (compile and check; naming causes not counted): " + ", ".join(
            f"{r.name} {r.seconds:.2f} s" for r in sorted(results, key=lambda r: -r.seconds)[:10]))
    for r in results:
        if r.status in ("invalidation_error", "crash", "grammar_error"):
            lines.append(f"  {r.status}: {r.name}: {r.detail} {r.failures[:2] if r.failures else ''}")
    return "\n".join(lines)
