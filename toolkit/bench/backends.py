"""Where a run's workers run (``--backend``): worker processes on this machine
(``local``: :class:`~toolkit.bench.pool.WorkerPool`) or Ray actors on this machine or a
cluster (``ray``: :class:`~toolkit.bench.cluster.RayPool`), the same records either
way; :func:`open_pool` opens the one a run asks for (``masklab bench``, ``audit``,
``sweep``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil

from toolkit.bench.cluster import RayPool
from toolkit.bench.pool import FailedRecord, Pool, WorkerPool
from toolkit.core.errors import HarnessError
from toolkit.data.datasets import Item

__all__ = ["BACKENDS", "check_backend", "default_memory_limit_gb", "open_pool"]

BACKENDS = ("local", "ray")
"""Where :func:`~toolkit.bench.run.run_bench` runs its workers (``ray``: :mod:`toolkit.bench.cluster`)."""


def check_backend(backend: str, address: str | None) -> None:
    """A :class:`HarnessError` for a backend that is not one of :data:`BACKENDS`, or an
    address given to another backend than Ray."""
    if backend not in BACKENDS:
        raise HarnessError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if address is not None and backend != "ray":
        raise HarnessError("an address is for the ray backend (--backend ray)")


def default_memory_limit_gb(jobs: int) -> float:
    """A worker's resident memory limit when none is given: 80% of the RAM, shared by
    ``jobs`` workers."""
    return 0.8 * psutil.virtual_memory().total / 2**30 / jobs


def open_pool(backend: str, jobs: int, vocab_spec: str, items: Sequence[Item], make: Callable[[Any], Any],
              timeout: float, memory_limit: float | None, *, failed: FailedRecord, address: str | None = None,
              env: Mapping[str, str] | None = None) -> Pool:
    """``jobs`` workers made by ``make(vocab)`` (a picklable callable: a
    :class:`~toolkit.bench.pool.Worker` partial, the audit's worker) on the vocabulary
    ``vocab_spec``, each task under ``timeout`` seconds and ``memory_limit`` resident
    bytes (None: no limit); ``failed`` makes the record of a task they do not finish.
    ``items``: the run's items (Ray sends them to each actor once); ``address`` and
    ``env`` (the workers' environment): Ray's."""
    if backend == "ray":
        return RayPool(make, jobs, vocab_spec, items, timeout, memory_limit, address=address, failed=failed, env=env)
    return WorkerPool(jobs, vocab_spec, {}, "native", False, timeout, memory_limit, worker=make, failed=failed)
