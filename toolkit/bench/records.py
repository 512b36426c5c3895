"""A run folder's files: the records (``records.jsonl``, one JSON object per engine x
item), the run's metadata (``run.json``), and a sweep's cells; what a record's
``status`` may be (:data:`STATUSES`, defined here once), and what ``masklab bench``
prints of them (:func:`summary_lines`).

Reading needs nothing but this module: :mod:`toolkit.report` reads run folders through
it without loading the worker pool.  A record's fields are those of
:func:`toolkit.bench.measure.measure_item` (a finished task) or :func:`failed_record`
(a task its worker did not finish).  The record's ``status`` is MaskBench's:

* ``passing``: every instance handled correctly;
* ``compile_error``: the engine refused the item (its compile, its matcher or its first
  mask);
* ``timeout``: over the per-item limit (the worker is killed);
* ``crash``: the engine failed while running (its worker died, or one of its calls
  raised anything but a refusal);
* ``validation_error``: a valid instance rejected;
* ``invalidation_error``: an invalid instance accepted.

Writing: records are appended one line each and flushed (:func:`append_record`); a run
resumes where it stopped, so a truncated last line (a killed run) is cut first
(:func:`repair_tail`) and a resumed run must have the settings of the folder's
(:func:`check_resume`).  ``run.json`` is replaced whole, never half written
(:func:`write_meta`).
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from toolkit.core.errors import HarnessError
from toolkit.data.datasets import Item

__all__ = [
    "STATUSES",
    "REASON_STATUSES",
    "AXES",
    "failed_record",
    "records_file",
    "load_records",
    "read_records",
    "done_tasks",
    "repeat_of",
    "repair_tail",
    "append_record",
    "write_meta",
    "check_resume",
    "now",
    "summary_lines",
    "cell_file",
    "is_sweep",
    "sweep_cells",
]

STATUSES: tuple[str, ...] = ("passing", "compile_error", "timeout", "crash", "validation_error", "invalidation_error")
"""Record statuses (see the module doc), in the order tables and summaries give them
(a report counts any other status under ``other``)."""

#: the statuses whose reasons :func:`summary_lines` quotes (the engine did not get to
#: measure the item; a validation verdict is a measurement, its detail in the records)
REASON_STATUSES = ("compile_error", "crash", "timeout")

AXES = ("vocab", "options", "data")
"""The axes of a sweep's grid cell, as every record of a sweep names them (``rec["axes"]``,
:mod:`toolkit.bench.sweep`)."""


def failed_record(name: str, item: Item, status: str, detail: str, wall_s: float) -> dict[str, Any]:
    """The benchmark record of a task its worker could not finish (killed past the
    timeout or the memory limit, or dead): what
    :func:`~toolkit.bench.measure.measure_item` records, empty."""
    return {"engine": name, "item": item.name, "kind": item.kind, "status": status, "detail": detail,
            "compile_s": None, "ttfm_s": None, "memory_bytes": None, "tbm_s": [], "allowed": [],
            "sliced": [], "cases": [], "wall_s": wall_s}


# -------------------------------------------------------------- reading --


def records_file(folder: str | Path) -> Path:
    """A run folder's records: ``records.jsonl``, or ``records.jsonl.gz`` when only that
    is there (an archived run, as committed under ``results/``)."""
    folder = Path(folder)
    plain, packed = folder / "records.jsonl", folder / "records.jsonl.gz"
    return packed if packed.exists() and not plain.exists() else plain


def load_records(path: str | Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a records file (or of the run folder holding one) and how many
    lines were skipped: a line that is not a JSON record with an engine and an item
    (the truncated last line of a killed run) is counted, not read."""
    path = Path(path)
    if path.is_dir():
        path = records_file(path)
    if not path.exists():
        return [], 0
    out: list[dict[str, Any]] = []
    skipped = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(rec, dict) and "engine" in rec and "item" in rec:
                out.append(rec)
            else:
                skipped += 1
    return out, skipped


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``records.jsonl`` (or of the run folder holding it); see :func:`load_records`."""
    return load_records(path)[0]


def repeat_of(rec: Mapping[str, Any]) -> int:
    """The repeat a record measured (``bench --repeat``; 1-based; 1 for a record of a run
    without repeats)."""
    return int(rec.get("repeat") or 1)


def done_tasks(path: str | Path, cell: Mapping[str, str] | None = None) -> set[tuple[str, str, int]]:
    """The ``(engine, item, repeat)`` triples recorded in ``path`` (of the sweep cell
    ``cell``, or outside every cell: None): what a resumed run does not do again."""
    return {(r["engine"], r["item"], repeat_of(r)) for r in read_records(path) if r.get("axes") == cell}


# -------------------------------------------------------------- writing --


def repair_tail(path: Path) -> None:
    """Cut a partial last line (no newline) so appended records start on their own line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        # find the last newline
        pos = size
        chunk = 65536
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            data = f.read(pos - start)
            i = data.rfind(b"\n")
            if i >= 0:
                f.truncate(start + i + 1)
                return
            pos = start
        f.truncate(0)


def append_record(f: IO[str], rec: Mapping[str, Any]) -> None:
    """One record as one compact JSON line of the open records file ``f``, flushed (a
    killed run loses at most the line it was writing)."""
    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    f.flush()


def write_meta(path: Path, meta: Mapping[str, Any]) -> None:
    """Write a run's metadata (``run.json``) through a temporary file, so that a killed
    run leaves the old file or the new one, never half of one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def now() -> str:
    """The local time as a run's metadata writes it (``started``, ``finished``, ``resumed``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def check_resume(meta: dict[str, Any], old: dict[str, Any], options: Mapping[str, Mapping[str, Any]]) -> None:
    """A :class:`HarnessError` when the run of ``meta`` (its engines' ``options``) cannot
    resume the run of the folder's metadata ``old``: another vocabulary, data, source,
    quick, direct check, drafts or walks, or an engine with other options."""
    for key in ("vocab", "data", "source", "quick", "direct_check", "drafts", "walks"):
        a, b = old.get(key), meta.get(key)
        if key == "vocab":
            a, b = (a or {}).get("spec"), (b or {}).get("spec")
        elif key == "direct_check":  # runs from before the option had none
            a, b = bool(a), bool(b)
        elif key == "drafts":
            a, b = list(a or []), list(b or [])
        elif key == "walks":  # runs from before the option walked once
            a, b = int(a or 1), int(b or 1)
        if a != b:
            raise HarnessError(
                f"the output folder holds a run with {key}={a!r}, this one has {key}={b!r}; "
                "resume with the same settings or choose another --out"
            )
    for name, info in (old.get("engines") or {}).items():
        if name in options and info.get("requested_options", {}) != dict(options[name]):
            raise HarnessError(
                f"engine {name!r} ran with options {info.get('requested_options')} in this folder, "
                f"now {dict(options[name])}; choose another --out"
            )


# -------------------------------------------------------------- summary --


def _detail(rec: Mapping[str, Any]) -> str:
    detail = rec.get("detail")
    return detail.strip() if isinstance(detail, str) else ""  # a DataFrame's missing detail is NaN


def _one_line(text: str, width: int) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 3] + "..."


def summary_lines(records: Iterable[Mapping[str, Any]], engines: Sequence[str] | None = None, *,
                  reasons: int = 3, width: int = 160) -> list[str]:
    """What ``masklab bench`` prints at the end: per engine (in the order of
    ``engines``, then any other engine of ``records`` by name), a line with its count
    of items per status (every one of :data:`STATUSES`, then any other status), e.g.
    ``"llguidance: 71 items: 69 passing, 2 compile_error, 0 timeout, 0 crash, ..."``;
    then how many items its compiles left keywords unenforced in, by keyword (when
    any: ``rec["unenforced"]``); then, for each of :data:`REASON_STATUSES`, the first
    ``reasons`` distinct reasons
    (the first line of the detail, one line of at most ``width`` characters with the
    item's name) and how many more there are.  Only a run's first repeat counts."""
    by_engine: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if repeat_of(r) == 1:  # each item once (bench --repeat measures it again, the report compares them)
            by_engine.setdefault(str(r["engine"]), []).append(r)
    order = [e for e in dict.fromkeys(engines or ()) if e in by_engine]
    order += sorted(set(by_engine) - set(order))
    lines: list[str] = []
    for name in order:
        lines += _engine_summary(name, by_engine[name], reasons, width)
    return lines


def _engine_summary(name: str, recs: list[Mapping[str, Any]], reasons: int, width: int) -> list[str]:
    """:func:`summary_lines` of one engine."""
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for r in recs:
        status = str(r.get("status") or "unknown")
        counts[status] = counts.get(status, 0) + 1
    lines = [f"{name}: {len(recs)} items: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    loose = [r["unenforced"] for r in recs if isinstance(r.get("unenforced"), list) and r["unenforced"]]
    if loose:  # what the engine's compiles said they left out (issue 44)
        kw = collections.Counter(str(e.get("keyword") or "(none named)") for u in loose for e in u)
        lines.append(f"  {len(loose)} item(s) compiled with keywords left unenforced: "
                     + ", ".join(f"{k} {n}" for k, n in kw.most_common(6)) + " (rec['unenforced'])")
    for status in REASON_STATUSES:
        seen: dict[str, str] = {}  # reason -> first item
        for r in recs:
            if r.get("status") == status:
                detail = _detail(r)
                reason = detail.splitlines()[0] if detail else "(no detail)"
                seen.setdefault(reason, str(r["item"]))
        for reason, item in list(seen.items())[:reasons]:
            lines.append("  " + _one_line(f"{status} {item}: {reason}", width - 2))
        if len(seen) > reasons:
            lines.append(f"  {status}: {len(seen) - reasons} more distinct reason(s) in records.jsonl")
    harness = sum(_detail(r).startswith("harness: ") for r in recs if r.get("status") == "crash")
    if harness:
        lines.append(f"  {harness} crash(es) are the harness's own bug, not {name}'s (detail 'harness: ...')")
    return lines


# ---------------------------------------------------------- sweep folders --


def cell_file(cell: Mapping[str, str]) -> str:
    """Where in a sweep folder a cell's metadata goes."""
    return f"cells/{cell['vocab']}~{cell['options']}~{cell['data']}.json"


def is_sweep(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds a sweep (its ``sweep.json``)."""
    return (Path(folder) / "sweep.json").is_file()


def sweep_cells(folder: str | os.PathLike[str]) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """A sweep folder's cells that have run: ``(axes, the cell's run metadata)``."""
    out = []
    spec = json.loads((Path(folder) / "sweep.json").read_text(encoding="utf-8"))
    for cell in spec["cells"]:
        path = Path(folder) / cell_file(cell)
        if path.is_file():
            out.append((cell, json.loads(path.read_text(encoding="utf-8"))))
    return out
