"""What a run records of where it ran (``toolkit.data.provenance``), and the report
naming what differs between the runs it merges."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_report import ENGINES_A, LLG_RECORDS, _meta, _write_run
from toolkit.data.provenance import (
    LIBRARIES,
    PROVENANCE_KEYS,
    differences,
    finish_provenance,
    git_state,
    machine_info,
    provenance,
    thread_counts,
    versions,
)
from toolkit.report.write import write_report

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def test_provenance_has_every_key_and_the_versions_that_shape_a_measurement() -> None:
    p = provenance(threads=3)
    assert set(p) == set(PROVENANCE_KEYS)
    v = p["versions"]
    assert v["python"] == sys.version.split()[0]
    assert {"numpy", "Cython", "torch", "transformers", "ray", "llguidance", "xgrammar"} <= set(v) <= {"python",
                                                                                                    *LIBRARIES}
    assert v["numpy"] == __import__("numpy").__version__
    assert p["threads"]["masks"] == 3 and p["load_1m"]["end"] is None
    m = machine_info()
    assert m["cpu_count"] >= m["cpus_usable"] >= 1 and m["processor"]
    json.dumps(p)  # run.json holds it as it is
    finish_provenance(p)
    assert p["load_1m"]["start"] is not None and p["load_1m"]["end"] is not None
    assert versions(("no-such-distribution",)) == {"python": v["python"], "no-such-distribution": None}


def test_thread_counts_name_the_environment_and_torch_only_when_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    t = thread_counts()
    assert t == {"torch": None, "environment": {"OMP_NUM_THREADS": "1"} | {
        k: v for k, v in t["environment"].items() if k != "OMP_NUM_THREADS"}, "masks": None}
    assert "RAYON_NUM_THREADS" not in t["environment"]


@needs_git
def test_git_state_says_the_commit_and_whether_tracked_files_changed(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    assert git_state(tmp_path) is None  # not a checkout
    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "untracked.txt").write_text("x")  # untracked files do not make it dirty
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "a.txt").write_text("2")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}


def test_differences_name_the_fields_apart_and_not_the_load() -> None:
    a = provenance()
    a["git"] = {"commit": "0" * 40, "dirty": False}
    b = json.loads(json.dumps(a))
    b["versions"]["numpy"] = "1.26.4"
    b["git"] = {"commit": "f" * 40, "dirty": True}
    b["load_1m"] = {"start": 99.0, "end": 99.0}
    b["machine"]["cpu_mhz"] = 1.0
    d = differences([a, b])
    assert d["versions.numpy"] == [a["versions"]["numpy"], "1.26.4"]
    assert "git.dirty" in d and "git.commit" in d
    assert not any(k.startswith(("load_1m", "machine.cpu_mhz")) for k in d)
    assert differences([a, json.loads(json.dumps(a))]) == {}
    old = {"machine": a["machine"]}  # a run written before masklab recorded versions
    assert differences([old, a])["versions.numpy"] == [None, a["versions"]["numpy"]]


def test_the_report_shows_each_runs_provenance_and_what_differs(tmp_path: Path) -> None:
    one = {**_meta(ENGINES_A), **provenance()}
    one["threads"]["environment"] = {}  # whatever earlier tests in this process set
    two = json.loads(json.dumps(one))
    two["versions"]["numpy"] = "1.26.4"
    two["threads"]["environment"] = {"OMP_NUM_THREADS": "4"}
    a = _write_run(tmp_path / "a", one, LLG_RECORDS)
    b = _write_run(tmp_path / "b", two, LLG_RECORDS)
    md = write_report([a, b], out=tmp_path / "report").read_text(encoding="utf-8")
    assert "The runs differ in their provenance" in md
    assert f"- `versions.numpy`: {one['versions']['numpy']} | 1.26.4" in md
    assert "- `threads.environment.OMP_NUM_THREADS`: – | 4" in md
    assert f"numpy {one['versions']['numpy']}" in md and "machine load (1 min)" in md
    alone = write_report([a], out=tmp_path / "alone").read_text(encoding="utf-8")
    assert "differ in their provenance" not in alone
