"""``masklab bench --backend ray``: the benchmark's tasks on Ray, on this machine or a cluster.

The same items, records, statuses, timeouts, memory limit and resume as the local pool
(:func:`toolkit.bench.run.run_bench`); only where the workers run changes: the pool is
scheduled by the local pool's loop (:func:`toolkit.bench.pool.schedule`).  Each
worker is a Ray actor (one CPU: ``num_cpus=1``) holding what a local worker process
holds (:class:`~toolkit.bench.pool.Worker`: the vocabulary, the engines built so far);
each ``(engine, item)`` task is two calls on one actor, ``prepare`` (build the engine
once, untimed, under the start-up limit) and ``measure`` (the item, under ``timeout``).

* **Data reach the workers once.** The vocabulary's tokenizer file and the items are
  put in Ray's object store by the driver; each actor reads them when it starts (a
  cluster's nodes need no copy of ``../shared``), and a task sends only an engine name
  and an item's index.
* **A crash loses only its item.** A worker that dies (a segfault, the memory limit, a
  node lost) ends its task as ``crash``, one that runs past ``timeout`` is killed and its
  task is a ``timeout``; a fresh actor takes the next task.  The memory limit is read from
  the actor itself (a second thread answers ``rss()`` while the task runs), so it holds
  on any node.
* **One writer.** Records come back to the driver as tasks finish and only the driver
  writes ``OUT/records.jsonl`` (one line per record, flushed), so a resumed run neither
  loses nor repeats a pair (the local backend's resume, unchanged).

Without ``address`` a local Ray instance is started with ``jobs`` CPUs (and stopped at the
end); with one (``"auto"``, ``"ray://HOST:10001"``, ``"HOST:6379"``) the run joins that
cluster and leaves it running.  A cluster is two commands::

    ray start --head --port 6379 --num-cpus 16            # on the head node
    ray start --address HEAD:6379 --num-cpus 16           # on every other node

then ``masklab bench --backend ray --address HEAD:6379 --jobs 32 ...`` on the head node
(masklab installed on every node, the same version).  ``ray start`` turns Ray's token
authentication on and leaves the token in ``~/.ray/auth_token``; the driver then runs in
token mode (``RAY_AUTH_MODE=token``, unless the environment says otherwise).  Needs the
``[cluster]`` extra.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from toolkit.bench.pool import (
    POLL,
    STARTUP_TIMEOUT,
    FailedRecord,
    Slot,
    Task,
    fail_task,
    over_memory,
    schedule,
)
from toolkit.core.errors import HarnessError
from toolkit.core.vocab import load_vocab, vocab_file
from toolkit.data.datasets import Item

__all__ = ["RayPool", "ClusterError", "ray_available"]

_RSS_EVERY = 1.0  # seconds between memory reads of a busy worker


class ClusterError(HarnessError):
    """Ray is missing, or a cluster cannot be reached or used."""


def ray_available() -> bool:
    """Whether the ``[cluster]`` extra (Ray) is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError("--backend ray needs Ray: pip install 'masklab[cluster]'") from None
    return ray


def vocab_payload(spec: str) -> tuple[str, str, bytes | None]:
    """``(kind, file name, its bytes)`` of a vocabulary spec (no bytes for the embedded
    ``tekken``): what a worker on another machine loads it from."""
    kind, path = vocab_file(spec)
    if path is None:
        return kind, "", None
    return kind, f"{path.parent.name}/{path.name}", path.read_bytes()


def load_payload(kind: str, name: str, data: bytes | None) -> Any:
    """The vocabulary of :func:`vocab_payload`'s result, its file written to a private
    temporary folder (under the same folder and file name: the vocabulary's name is the
    driver's)."""
    if data is None:
        return load_vocab(kind)
    folder = Path(tempfile.mkdtemp(prefix="masklab-vocab-")) / Path(name).parent
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(name).name
    path.write_bytes(data)
    return load_vocab(f"{kind}:{path}")


class _BenchActor:
    """A Ray actor around a worker (``make(vocab)``: :class:`~toolkit.bench.pool.Worker`,
    the audit's; see the module doc)."""

    def __init__(self, make: Callable[[Any], Any], vocab_ref: Any, items_ref: Any) -> None:
        import ray

        # (refs inside a list: an actor argument that is a bare ref arrives resolved)
        payload = ray.get(vocab_ref[0]) if isinstance(vocab_ref, list) else vocab_ref
        items = ray.get(items_ref[0]) if isinstance(items_ref, list) else items_ref
        self.items: list[Item] = items
        self.worker = make(load_payload(*payload))

    def ready(self) -> int:
        return os.getpid()

    def prepare(self, name: str) -> tuple[str, Any]:
        try:
            return "engine", self.worker.prepare(name)
        except HarnessError as e:
            return "fatal", str(e)

    def measure(self, name: str, index: int) -> dict[str, Any]:
        return self.worker.measure(name, self.items[index])

    def rss(self) -> float:
        try:
            return float(psutil.Process().memory_info().rss)
        except Exception:  # noqa: BLE001 - no reading: no limit this time
            return 0.0


@dataclass
class _Actor(Slot):
    """One Ray actor and the calls in flight on it."""

    handle: Any = None
    ready_ref: Any = None  # the ref of ready() until it answered
    index: int = 0  # the task's item in the actors' copy of the items
    call: Any = None  # the ref of the prepare or measure call in flight
    phase: str = ""  # "prepare" or "measure"
    rss_ref: Any = None
    rss_at: float = 0.0

    @property
    def running(self) -> bool:
        return self.handle is not None


class RayPool:
    """The local pool's interface (:class:`~toolkit.bench.pool.Pool`: ``run(tasks)``
    yields records, ``engine_info``, ``close()``) and its scheduling loop
    (:func:`~toolkit.bench.pool.schedule`) on Ray actors; see the module doc.  ``make``:
    what each actor holds, made of its vocabulary (a picklable ``make(vocab)``: a
    :class:`~toolkit.bench.pool.Worker` partial, the audit's worker); ``failed``: the
    record of a task that did not finish (:func:`toolkit.bench.records.failed_record`,
    the audit's); ``env``: the workers' environment (the harness's single-thread
    settings)."""

    worker_name = "Ray worker"

    def __init__(self, make: Callable[[Any], Any], jobs: int, vocab_spec: str, items: Sequence[Item], timeout: float,
                 memory_limit: float | None, *, address: str | None = None, startup_timeout: float = STARTUP_TIMEOUT,
                 failed: FailedRecord, env: Mapping[str, str] | None = None) -> None:
        self.owns = _connect(address, jobs, env)  # Ray started or joined here: shut down at close()
        self.ray = _ray()
        self.index = {id(item): k for k, item in enumerate(items)}
        self.vocab_ref = self.ray.put(vocab_payload(vocab_spec))
        self.items_ref = self.ray.put(list(items))
        self.make = make
        self.failed = failed
        self.remote = self.ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0, max_concurrency=2)(_BenchActor)
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.startup_timeout = startup_timeout
        self.slots = [_Actor() for _ in range(jobs)]
        self.engine_info: dict[str, dict[str, Any]] = {}

    def run(self, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]:
        """Run every task; yield each record as it finishes (in completion order)."""
        return schedule(self, tasks)

    # -------------------------------------------------------------- actors --

    def start(self, a: _Actor) -> None:
        a.handle = self.remote.remote(self.make, [self.vocab_ref], [self.items_ref])
        a.ready_ref, a.ready, a.task, a.call, a.phase, a.started, a.rss_ref = (a.handle.ready.remote(), False, None,
                                                                              None, "", None, None)
        a.sent = time.monotonic()

    def assign(self, a: _Actor, task: Task) -> None:
        name, item = task
        a.task, a.index = task, self.index[id(item)]
        a.call, a.phase, a.sent, a.started = a.handle.prepare.remote(name), "prepare", time.monotonic(), None

    def kill(self, a: _Actor) -> None:
        if a.handle is not None:
            try:
                self.ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        a.handle = a.ready_ref = a.call = a.rss_ref = None
        a.ready = False
        a.task, a.phase, a.started = None, "", None

    def close(self) -> None:
        for a in self.slots:
            self.kill(a)
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()
            self.owns = False

    def _fatal(self, message: str) -> None:
        self.close()
        raise HarnessError(message)

    def read_memory(self, a: _Actor, now: float) -> float | None:
        """None: the reading is asked of the actor (a second thread answers it while the
        task runs) and checked by :meth:`receive` when it comes."""
        if a.rss_ref is None and now - a.rss_at >= _RSS_EVERY:
            a.rss_ref, a.rss_at = a.handle.rss.remote(), now
        return None

    # ----------------------------------------------------------------- run --

    def receive(self) -> Iterator[dict[str, Any]]:
        """The answers of the actors' calls within :data:`~toolkit.bench.pool.POLL`
        seconds: the records of the tasks that finished (an actor that died: its task's
        ``crash``), the memory readings checked."""
        refs = {}
        for a in self.slots:
            for ref in (a.ready_ref, a.call, a.rss_ref):
                if ref is not None:
                    refs[ref] = a
        done: list[Any] = []
        if refs:
            done, _ = self.ray.wait(list(refs), num_returns=1, timeout=POLL)
            if done:  # and whatever else is ready by now
                done, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in done:
            a = refs[ref]
            if ref is not a.ready_ref and ref is not a.call and ref is not a.rss_ref:
                continue  # its worker was replaced while this batch was read
            if ref is a.rss_ref:
                a.rss_ref = None
                rss = self._get(ref)
                rec = over_memory(self, a, rss) if a.phase == "measure" and isinstance(rss, float) else None
                if rec is not None:
                    yield rec
                continue
            yield from self._answer(a, ref, self._get(ref))

    def _answer(self, a: _Actor, ref: Any, value: Any) -> Iterator[dict[str, Any]]:
        """Act on the answer ``value`` of the call ``ref`` of actor ``a``."""
        if isinstance(value, _Died):
            if ref is a.ready_ref:
                self._fatal(f"a Ray worker died while starting: {value.why}")
            yield fail_task(self, a, "crash", f"worker died ({value.why})")
            return
        if ref is a.ready_ref:
            a.ready_ref, a.ready = None, True
        elif a.phase == "prepare":
            kind, info = value
            if kind == "fatal":
                self._fatal(info)
            name = a.task[0]  # type: ignore[index]
            if info is not None:
                self.engine_info[name] = info
            a.call, a.phase, a.started = a.handle.measure.remote(name, a.index), "measure", time.monotonic()
        else:
            a.task, a.call, a.phase, a.started = None, None, "", None
            yield value

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except Exception as e:  # noqa: BLE001 - RayActorError, WorkerCrashedError, ...
            return _Died(_why(e))


def _connect(address: str | None, jobs: int, env: Mapping[str, str] | None) -> bool:
    """Initialize Ray unless it is: a local instance of ``jobs`` CPUs (no ``address``) or
    the cluster at ``address``, the workers' environment ``env``; False when this process
    had Ray initialized already (the pool then does not shut it down)."""
    if address is not None and "RAY_AUTH_MODE" not in os.environ and (Path.home() / ".ray" / "auth_token").is_file():
        # `ray start` turns token authentication on and leaves its token here; a driver
        # reads it only in token mode, which Ray reads when it is imported
        os.environ["RAY_AUTH_MODE"] = "token"
    ray = _ray()
    if ray.is_initialized():
        return False
    env_vars = dict(env or {})
    if address is None:  # this machine: the driver's import path for the workers
        env_vars["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    try:
        ray.init(address=address or "local", num_cpus=jobs if address is None else None, include_dashboard=False,
                 log_to_driver=False, logging_level="ERROR", runtime_env={"env_vars": env_vars})
    except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ...
        where = "a local Ray instance" if address is None else f"the Ray cluster at {address!r}"
        raise ClusterError(f"cannot start or join {where}: {type(e).__name__}: {e}") from e
    return True


@dataclass
class _Died:
    why: str


def _why(error: BaseException) -> str:
    """One line on why a Ray worker's call failed (Ray's messages run to pages)."""
    text = f"{type(error).__name__}: {error}"
    for line in text.splitlines():
        low = line.lower()
        if "exit" in low or "signal" in low or "killed" in low or "segmentation" in low:
            return line.strip()[:300]
    return text.splitlines()[0][:300] if text else type(error).__name__
