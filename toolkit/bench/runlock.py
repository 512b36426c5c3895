"""One writer per run folder: ``OUT/.lock``, held for the run's life.

Two ``masklab bench`` runs on one ``--out`` would each append every pair to
``records.jsonl`` (each resumes from what it read at its start), so every record would be
there twice.  A command that writes a run folder (``bench``, ``audit``, ``sweep``,
``generate``) holds an exclusive ``fcntl.flock`` on ``OUT/.lock`` while it runs
(:func:`run_folder_lock`, or :func:`locks_run_folder` around a function); a second one
on the same folder refuses at once with a :class:`~toolkit.core.errors.HarnessError`
naming the folder and the other run's pid, host and command (written into the lock
file by its holder).

The lock is the kernel's, not a pid file: it goes with the process that holds it,
however that process ends (a killed run leaves no stale lock; ``.lock`` stays, empty).
It is taken by the driver only: the workers (processes, Ray actors) hand their records to
the driver, which alone writes.  Within one process the lock is re-entrant (a sweep
holds its folder, and each of its cells' :func:`~toolkit.bench.run.run_bench` takes
it again).  A folder the lock had to create is removed again when the run leaves
nothing else in it (a run refused before it wrote anything leaves no folder behind).
"""

from __future__ import annotations

import fcntl
import functools
import inspect
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from toolkit.core.errors import HarnessError

__all__ = ["LOCK_NAME", "run_folder_lock", "locks_run_folder", "lock_holder"]

LOCK_NAME = ".lock"
"""The lock file of a run folder."""

_F = TypeVar("_F", bound=Callable[..., Any])
_HELD: dict[Path, list[Any]] = {}  # folder -> [fd, depth, folder created here (or None)]
_GUARD = threading.Lock()


def lock_holder(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What the run holding ``folder`` wrote into its lock file (``pid``, ``host``,
    ``started``, ``command``); empty when there is none or it cannot be read."""
    try:
        text = (Path(folder) / LOCK_NAME).read_text(encoding="utf-8")
        info = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _refusal(folder: Path) -> HarnessError:
    info: dict[str, Any] = {}
    for _ in range(20):  # its holder writes the file right after locking it
        info = lock_holder(folder)
        if info:
            break
        time.sleep(0.01)
    who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, since {info.get('started', '?')}: "
           f"{info.get('command', '?')}") if info else "pid unknown"
    return HarnessError(f"{folder} is in use by another run ({who}); two runs writing one folder would record "
                        "every pair twice: wait for it to end, or give another --out")


def _acquire(folder: Path) -> None:
    key = folder.resolve()
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return
        created = None
        if not key.exists():
            created = key
            while not created.parent.exists():
                created = created.parent
        key.mkdir(parents=True, exist_ok=True)
        fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refusal(folder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": " ".join(sys.argv)[:500]}
        os.write(fd, (json.dumps(info) + "\n").encode("utf-8"))
        _HELD[key] = [fd, 1, created]


def _release(folder: Path) -> None:
    key = folder.resolve()
    with _GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
        fd, _, created = held
        try:
            os.ftruncate(fd, 0)
            if created is not None and [p.name for p in key.iterdir()] == [LOCK_NAME]:
                (key / LOCK_NAME).unlink()  # still locked: no other run can be inside it now
                for d in (key, *key.parents):
                    d.rmdir()
                    if d == created:
                        break
        except OSError:
            pass
        finally:
            os.close(fd)  # (the kernel releases the lock with the last descriptor)


@contextmanager
def run_folder_lock(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold ``folder``'s run lock (creating the folder) for the ``with`` block; a folder
    another process holds is a :class:`HarnessError` at once (see the module doc)."""
    path = Path(folder)
    _acquire(path)
    try:
        yield path
    finally:
        _release(path)


def locks_run_folder(argument: str = "out") -> Callable[[_F], _F]:
    """A decorator: each call of the function holds the run lock of the folder its
    parameter ``argument`` names (its default when not given) for the call's life."""

    def wrap(func: _F) -> _F:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def locked(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            with run_folder_lock(bound.arguments[argument]):
                return func(*args, **kwargs)

        return locked  # type: ignore[return-value]

    return wrap
