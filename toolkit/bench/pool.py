"""Where the (engine, item) tasks of a run go: the workers, and the one scheduling loop
every pool runs.

* A **worker** (:class:`Worker`) holds a vocabulary and the engines built so far, and
  measures one task at a time (:func:`toolkit.bench.measure.measure_item`); the audit's
  worker (:class:`toolkit.bench.audit.AuditWorker`) has the same two calls, ``prepare``
  and ``measure``.  :func:`serve` is a worker process's loop.
* A **pool** (:class:`Pool`) runs a list of tasks and yields each record as it finishes:
  :class:`WorkerPool` (worker processes on this machine),
  :class:`toolkit.bench.cluster.RayPool` (Ray actors) and :class:`InlinePool` (this
  process, one task after another).
* The pools of workers that can be killed (:class:`SlotPool`: the local one and Ray's)
  share one scheduling loop, :func:`schedule`: it hands tasks to idle workers, reads
  what they say (each pool its own way) and enforces the limits: a worker over the
  per-task ``timeout`` or the memory limit is killed, its task recorded as ``timeout``
  or ``crash`` (:func:`fail_task`), and a fresh worker takes the next task; a worker
  that dies is recorded as ``crash`` the same way; one that takes over
  ``startup_timeout`` to load its vocabulary or build an engine stops the run
  (:class:`~toolkit.core.errors.HarnessError`).

Isolation: each engine runs single-threaded (``RAYON_NUM_THREADS``,
``OMP_NUM_THREADS`` = 1: :data:`SINGLE_THREAD_ENV`) in a worker process; ``jobs``
workers run side by side.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing as mp
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

import psutil

from strategies import get_engine
from toolkit.bench.measure import measure_item, warm_up
from toolkit.bench.records import failed_record
from toolkit.core.errors import HarnessError
from toolkit.core.vocab import load_vocab
from toolkit.data.datasets import Item
from toolkit.data.provenance import engine_info

__all__ = ["Task", "FailedRecord", "Pool", "SlotPool", "Slot", "schedule", "fail_task", "over_memory", "Worker",
           "serve", "WorkerPool", "InlinePool", "SINGLE_THREAD_ENV", "STARTUP_TIMEOUT", "POLL"]

Task = tuple[str, Item]
"""One task: an engine's name and an item."""
FailedRecord = Callable[[str, Item, str, str, float], dict[str, Any]]
"""The record of a task its worker did not finish: ``failed(name, item, status, detail,
wall_s)`` (:func:`toolkit.bench.records.failed_record`, the audit's own)."""

STARTUP_TIMEOUT = 600.0
"""Seconds a worker may take to load a vocabulary or to build an engine."""
POLL = 0.25
"""Seconds between the scheduling loop's checks of the running tasks."""
SINGLE_THREAD_ENV = {
    "RAYON_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""The workers' environment: every engine single-threaded."""


# ------------------------------------------------------------- the protocol --


class Pool(Protocol):
    """What a run needs of a pool: ``run(tasks)`` yields each task's record as it
    finishes (in completion order), ``engine_info`` holds what the workers said of each
    engine they built (:func:`~toolkit.data.provenance.engine_info`), ``close()`` ends
    the workers."""

    engine_info: dict[str, dict[str, Any]]

    def run(self, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclass
class Slot:
    """One worker, whatever runs it, and what it is doing: what :func:`schedule` reads."""

    ready: bool = False  # the worker has started (its vocabulary loaded)
    task: Task | None = None
    sent: float = 0.0  # when the task (or the worker start) was sent
    started: float | None = None  # when the engine began the current item

    @property
    def running(self) -> bool:
        """Whether a worker is there (started, not killed)."""
        raise NotImplementedError


class SlotPool(Pool, Protocol):
    """A pool of workers that can be killed (its tasks under a timeout and a memory
    limit), as :func:`schedule` drives it: start a worker in a slot, hand it a task,
    read what the workers say (``receive``: waits up to :data:`POLL` seconds, yields the
    records finished), read a worker's memory, kill one."""

    slots: Sequence[Slot]
    timeout: float
    startup_timeout: float
    memory_limit: float | None
    failed: FailedRecord
    worker_name: str  # how an error names a worker ("worker", "Ray worker")

    def start(self, slot: Any) -> None: ...

    def assign(self, slot: Any, task: Task) -> None: ...

    def receive(self) -> Iterator[dict[str, Any]]: ...

    def read_memory(self, slot: Any, now: float) -> float | None: ...

    def kill(self, slot: Any) -> None: ...


def schedule(pool: SlotPool, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]:
    """The scheduling loop of every :class:`SlotPool`: run every task, yield each record
    as it finishes (in completion order); see the module doc."""
    pending = list(tasks)
    pending.reverse()
    while pending or any(s.task is not None for s in pool.slots):
        for slot in pool.slots:
            if not slot.running and (pending or slot.task is not None):
                pool.start(slot)
            if slot.ready and slot.task is None and pending:
                pool.assign(slot, pending.pop())
        yield from pool.receive()
        yield from _check_limits(pool)


def _check_limits(pool: SlotPool) -> Iterator[dict[str, Any]]:
    """The records of the tasks past their limits (their workers killed); a worker too
    slow to start or to build an engine stops the run."""
    now = time.monotonic()
    for slot in pool.slots:
        if not slot.running:
            continue
        starting = not slot.ready or (slot.task is not None and slot.started is None)
        if starting and now - slot.sent > pool.startup_timeout:
            # loading the vocabulary or building an engine: not an item's fault
            what = "start" if slot.task is None else f"build engine {slot.task[0]!r}"
            pool.close()
            raise HarnessError(f"a {pool.worker_name} took over {pool.startup_timeout:g} s to {what}")
        if slot.started is None:
            continue
        if now - slot.started > pool.timeout:
            yield fail_task(pool, slot, "timeout", f"over the {pool.timeout:g} s limit")
            continue
        if pool.memory_limit is not None:
            rss = pool.read_memory(slot, now)
            rec = None if rss is None else over_memory(pool, slot, rss)
            if rec is not None:
                yield rec


def fail_task(pool: SlotPool, slot: Slot, status: str, detail: str) -> dict[str, Any]:
    """The record of ``slot``'s task, which its worker did not finish (``pool.failed``);
    the worker is killed."""
    name, item = slot.task  # type: ignore[misc]
    rec = pool.failed(name, item, status, detail, time.monotonic() - (slot.started or slot.sent))
    pool.kill(slot)
    return rec


def over_memory(pool: SlotPool, slot: Slot, rss: float) -> dict[str, Any] | None:
    """The ``crash`` record of ``slot``'s task when its worker's resident memory ``rss``
    is over the pool's limit (the worker killed), else None."""
    if pool.memory_limit is None or not rss > pool.memory_limit:
        return None
    return fail_task(pool, slot, "crash", f"memory limit: {rss / 2**30:.1f} GiB resident > "
                                          f"{pool.memory_limit / 2**30:.1f} GiB")


# ------------------------------------------------------------------ worker --


class Worker:
    """What a worker process holds and does, whatever runs it (the local pool's
    processes, :mod:`toolkit.bench.cluster`'s Ray actors): the vocabulary, the engines
    built so far, and the measurement of one ``(engine, item)`` task."""

    def __init__(self, vocab: Any, options: Mapping[str, Mapping[str, Any]], source: str, quick: bool,
                 direct: bool = False, drafts: tuple[int, ...] = (), walks: int = 1) -> None:
        os.environ.update(SINGLE_THREAD_ENV)
        self.vocab = vocab
        self.options = options
        self.source, self.quick, self.direct, self.drafts = source, quick, direct, tuple(drafts)
        self.walks = int(walks)
        self.engines: dict[str, Any] = {}

    def prepare(self, name: str) -> dict[str, Any] | None:
        """Build engine ``name`` unless built: its :func:`engine_info` the first time,
        else None.  A failure to build raises :class:`HarnessError` (the run stops)."""
        if name in self.engines:
            return None
        try:
            engine = get_engine(name, self.vocab, **dict(self.options.get(name, {})))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which stops the run
            raise HarnessError(f"cannot build engine {name!r}: {type(e).__name__}: {e}") from e
        _single_thread_torch()
        warm_up(engine, self.vocab)
        self.engines[name] = engine
        # the vocabulary and the engines are for good: out of the collector's sight, so
        # the collection before each item (measure_item) does not sweep them through
        # the CPU caches (for every engine alike; a server process does the same)
        gc.collect()
        gc.freeze()
        return engine_info(engine, self.options.get(name, {}))

    def measure(self, name: str, item: Item) -> dict[str, Any]:
        """The record of ``item`` on engine ``name`` (built by :meth:`prepare`)."""
        try:
            rec = measure_item(self.engines[name], self.vocab, item, source=self.source, quick=self.quick,
                               direct=self.direct, drafts=self.drafts, walks=self.walks, name=name)
        except Exception as e:  # noqa: BLE001 - an engine's exceptions are recorded by measure_item: a harness bug
            rec = {"engine": name, "item": item.name, "kind": item.kind, "status": "crash",
                   "detail": f"harness: {type(e).__name__}: {e}\n{traceback.format_exc()}"[:4000]}
        rec["engine"] = name
        return rec


def _single_thread_torch() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _worker_main(conn: Connection, vocab_spec: str, options: Mapping[str, Mapping[str, Any]], source: str, quick: bool,
                 direct: bool = False, drafts: tuple[int, ...] = (), walks: int = 1) -> None:
    """A benchmark worker: load the vocabulary, then serve ``(engine, item)`` tasks
    (:class:`Worker`) until told to stop."""
    serve(conn, vocab_spec, functools.partial(Worker, options=options, source=source, quick=quick, direct=direct,
                                              drafts=drafts, walks=walks))


def serve(conn: Connection, vocab_spec: str, make: Callable[[Any], Any]) -> None:
    """A worker process's loop: load the vocabulary, make the worker (``make(vocab)``:
    anything with :class:`Worker`'s ``prepare(name)`` and ``measure(name, item)``, such
    as the audit's), then serve ``(engine, item)`` tasks until told to stop."""
    os.environ.update(SINGLE_THREAD_ENV)
    worker = make(load_vocab(vocab_spec))
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed run): nothing left to do
            return
        if msg is None:
            return
        name, item = msg
        try:
            info = worker.prepare(name)
        except HarnessError as e:
            conn.send(("fatal", str(e)))
            return
        if info is not None:
            conn.send(("engine", name, info))
        conn.send(("start", name, item.name))
        conn.send(("done", worker.measure(name, item)))


# ------------------------------------------------------------------- pools --


@dataclass
class _Slot(Slot):
    """One worker process and its end of the pipe."""

    proc: Any = None
    conn: Connection | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None


class WorkerPool:
    """Worker processes on this machine, each serving ``(engine, item)`` tasks, with the
    per-task timeout and memory limit enforced from outside (a killed worker loses only
    its task; :func:`schedule`).  By default the workers are the benchmark's
    (:class:`Worker`); ``worker`` (a picklable ``make(vocab)``, see :func:`serve`) and
    ``failed`` (the record of a task that did not finish, :func:`failed_record`'s
    signature) make them another job's, such as the audit's."""

    worker_name = "worker"

    def __init__(self, jobs: int, vocab_spec: str, options: Mapping[str, Mapping[str, Any]], source: str,
                 quick: bool, timeout: float, memory_limit: float | None, *,
                 startup_timeout: float = STARTUP_TIMEOUT, target: Any = None, direct: bool = False,
                 drafts: Sequence[int] = (), walks: int = 1, worker: Callable[[Any], Any] | None = None,
                 failed: FailedRecord = failed_record) -> None:
        self.ctx = mp.get_context("spawn")
        self.target = _worker_main if target is None else target
        self.startup_timeout = startup_timeout
        self.args: tuple[Any, ...] = (vocab_spec, {k: dict(v) for k, v in options.items()}, source, quick)
        if direct or drafts or walks > 1:
            self.args += (direct, tuple(drafts), int(walks))
        if worker is not None:
            self.target, self.args = serve, (vocab_spec, worker)
        self.failed = failed
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.slots = [_Slot() for _ in range(jobs)]
        self.engine_info: dict[str, dict[str, Any]] = {}

    def run(self, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]:
        """Run every task; yield each record as it finishes (in completion order)."""
        return schedule(self, tasks)

    def start(self, slot: _Slot) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=self.target, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        slot.proc, slot.conn, slot.ready, slot.task, slot.started = proc, parent, False, None, None
        slot.sent = time.monotonic()

    def assign(self, slot: _Slot, task: Task) -> None:
        slot.task = task
        slot.started = None
        slot.sent = time.monotonic()
        slot.conn.send(slot.task)  # type: ignore[union-attr]

    def kill(self, slot: _Slot) -> None:
        if slot.proc is not None:
            if slot.proc.is_alive():
                slot.proc.kill()
            slot.proc.join(5)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc = slot.conn = None
        slot.ready = False
        slot.task = None
        slot.started = None

    def close(self) -> None:
        for slot in self.slots:
            if slot.conn is not None and slot.proc is not None and slot.proc.is_alive() and slot.task is None:
                try:
                    slot.conn.send(None)
                except OSError:
                    pass
            if slot.proc is not None:
                slot.proc.join(2)
            self.kill(slot)

    def read_memory(self, slot: _Slot, now: float) -> float | None:
        return _rss(slot.proc.pid)

    def receive(self) -> Iterator[dict[str, Any]]:
        """What the workers said within :data:`POLL` seconds: the records of the tasks
        that finished (a worker that died: its task's ``crash``)."""
        conns = [s.conn for s in self.slots if s.conn is not None]
        for conn in wait(conns, timeout=POLL):
            slot = next(s for s in self.slots if s.conn is conn)
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                slot.proc.join(5)  # type: ignore[union-attr]
                code = slot.proc.exitcode  # type: ignore[union-attr]
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                if slot.task is None:
                    raise HarnessError(f"a worker died while starting ({how}); see the messages above") from None
                yield fail_task(self, slot, "crash", f"worker died ({how})")
                continue
            kind = msg[0]
            if kind == "ready":
                slot.ready = True
            elif kind == "engine":
                self.engine_info[msg[1]] = msg[2]
            elif kind == "start":
                slot.started = time.monotonic()
            elif kind == "fatal":
                self.close()
                raise HarnessError(msg[1])
            elif kind == "done":
                slot.task = None
                slot.started = None
                yield msg[1]


def _rss(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001 - a process that just ended has no memory
        return 0.0


class InlinePool:
    """The tasks in this process, one after another, on one worker (``worker``: a
    :class:`Worker` or anything with its two calls): no limit is enforced from outside
    (the worker keeps its own, if any), and an engine that cannot be built stops the run
    at once."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.engine_info: dict[str, dict[str, Any]] = {}

    def run(self, tasks: Iterable[Task]) -> Iterator[dict[str, Any]]:
        for name, item in tasks:
            info = self.worker.prepare(name)
            if info is not None:
                self.engine_info[name] = info
            yield self.worker.measure(name, item)

    def close(self) -> None:
        """Nothing to end: the worker is this process."""
