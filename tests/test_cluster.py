"""``masklab bench --backend ray`` on a local Ray instance with 2 CPUs: the same records
as the local pool, a crash or a timeout loses only its item, a killed driver's run
resumes without losing or repeating a pair.

Each test runs on a Ray instance of its own and stops only that one: ``run_bench``
starts a private local instance (``ray.init(address="local")``) and shuts it down; the
``ray start`` test takes a free port (``--port 0``) and a temporary folder of its own,
and ends the processes of that folder alone (never ``ray stop``, which stops every Ray
instance of the user)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray", reason="the Ray backend needs ray (the [cluster] extra)")

from toolkit.bench.records import read_records  # noqa: E402
from toolkit.bench.run import run_bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests._support.misbehaving:Misbehaving"
ENV = {"RAY_DISABLE_USAGE_STATS": "1", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(autouse=True)
def _quiet_ray(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def _key(rec: dict) -> tuple:
    """What must not depend on the backend: the verdicts and every mask's digest."""
    cases = tuple((c.get("valid"), c.get("ok"), c.get("consumed"), tuple(c.get("digests") or ()))
                  for c in rec.get("cases", []))
    return rec["engine"], rec["item"], rec["status"], rec.get("allowed"), cases


def test_ray_gives_the_local_pools_records(tmp_path) -> None:
    kw = dict(limit=8, seed=3, quick=True, jobs=2, progress=False, timeout=60)
    local = run_bench(["llguidance", "outlines"], out=tmp_path / "local", **kw)
    ray_ = run_bench(["llguidance", "outlines"], out=tmp_path / "ray", backend="ray", **kw)
    a = sorted(_key(r) for r in read_records(tmp_path / "local" / "records.jsonl"))
    b = sorted(_key(r) for r in read_records(tmp_path / "ray" / "records.jsonl"))
    assert len(a) == len(local) == len(ray_) == 16 and a == b
    meta = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert meta["backend"] == "ray" and set(meta["engines"]) == {"llguidance", "outlines"}


def test_a_segfault_and_a_timeout_lose_only_their_items(tmp_path) -> None:
    """The plug-in segfaults (then sleeps) on the schemas: those items are a crash (a
    timeout), every grammar and regex still passes, on fresh workers."""
    for what, status, words in (("segfault", "crash", "worker died"), ("sleep", "timeout", "over the 3 s limit")):
        out = tmp_path / what
        # (2 schemas among 5 items: each crash costs a fresh actor, seconds apiece)
        run_bench([PLUGIN], out=out, limit=5, seed=23, quick=True, jobs=2, progress=False, timeout=3,
                  backend="ray", options={PLUGIN: {"what": what, "seconds": 30.0}})
        recs = read_records(out / "records.jsonl")
        assert len(recs) == 5
        for r in recs:
            if r["kind"] == "schema":
                assert r["status"] == status and words in r["detail"], r
            else:
                assert r["status"] == "passing", r
        assert any(r["kind"] == "schema" for r in recs) and any(r["kind"] != "schema" for r in recs)


def test_a_killed_driver_resumes_losing_and_repeating_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "toolkit", "bench", "--engines", PLUGIN, "--limit", "12", "--quick", "--jobs", "2",
           "--backend", "ray", "--out", str(out), "--quiet", "-o", f"{PLUGIN}.what=slow", "-o", f"{PLUGIN}.seconds=0.5"]
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    records = out / "records.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not records.exists() or len(records.read_text().splitlines()) < 3):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started, mid-run
    proc.wait()
    before = read_records(records)
    assert 3 <= len(before) < 12
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = read_records(records)
    names = [r["item"] for r in after]
    assert len(names) == len(set(names)) == 12  # nothing lost, nothing twice
    assert {r["item"]: r for r in before}.items() <= {r["item"]: r for r in after}.items()


def _stop_instance(folder: str) -> None:
    """Kill the processes of the Ray instance whose temporary folder is ``folder``, and
    only those (as ``ray stop --force`` does for every instance): its head processes name
    the folder on their command line, and the rest (agents, workers, renamed
    ``ray::...``) are their descendants, gathered before any of them dies."""
    mine: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and any(folder in part for part in p.info["cmdline"] or ()):
                for q in (p, *p.children(recursive=True)):
                    mine[q.pid] = q
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in mine.values():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(mine.values()), timeout=10)


def test_a_run_joins_a_cluster_started_with_ray_start(tmp_path) -> None:
    """The two documented commands: ``ray start --head`` (here on this machine), then
    ``masklab bench --backend ray --address HEAD:PORT``; the cluster is left running.
    The instance is this test's own: a free port, its own temporary folder (short: Ray's
    socket paths must fit 107 bytes), stopped by its processes alone."""
    ray_bin = Path(sys.executable).with_name("ray")
    env = {**os.environ, **ENV}
    env.pop("RAY_AUTH_MODE", None)
    temp = tempfile.mkdtemp(prefix="mlray", dir="/tmp")
    try:
        started = subprocess.run([str(ray_bin), "start", "--head", "--port", "0", "--num-cpus", "2",
                                  "--include-dashboard", "false", "--temp-dir", temp, "--disable-usage-stats"],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr[-2000:]
        address = (Path(temp) / "ray_current_cluster").read_text().strip()  # HOST:PORT, the port Ray chose
        out = tmp_path / "joined"
        done = subprocess.run([sys.executable, "-m", "toolkit", "bench", "--engines", "llguidance", "--limit", "3",
                               "--quick", "--jobs", "2", "--backend", "ray", "--address", address,
                               "--out", str(out), "--quiet"], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        recs = read_records(out / "records.jsonl")
        assert len(recs) == 3 and all(r["status"] == "passing" for r in recs)
        meta = json.loads((out / "run.json").read_text())
        assert meta["address"] == address
        status = subprocess.run([str(ray_bin), "status", "--address", address],
                                env={**env, "RAY_AUTH_MODE": "token"},
                                capture_output=True, text=True, timeout=60)
        assert "CPU" in status.stdout  # still running after the run
    finally:
        _stop_instance(temp)
        shutil.rmtree(temp, ignore_errors=True)
