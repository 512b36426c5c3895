"""What a run records of where it ran, so that two runs can be told apart afterwards.

* :func:`machine_info`: CPU model, frequency and governor, cores (and those the run may
  use), memory, Python, GPU;
* :func:`versions`: Python and the libraries that shape a measurement (numpy, Cython,
  pandas, torch, transformers, Ray, pyarrow, the peers, masklab);
* :func:`git_state`: the commit masklab runs from and whether its tracked files differ
  from it (None outside a checkout);
* :func:`thread_counts`: torch's threads (when torch is loaded), the thread variables of
  the environment, the mask threads a run was given;
* :func:`provenance` gathers them with the 1-minute load at the start, and
  :func:`finish_provenance` adds the load at the end;
* :func:`differences`: what differs between the provenance of several runs (what
  ``masklab report`` prints when it merges runs);
* :func:`engine_info`: what a run records of an engine.

``masklab bench``, ``audit`` and ``generate`` write them into their ``run.json``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

__all__ = ["LIBRARIES", "PROVENANCE_KEYS", "differences", "engine_info", "finish_provenance", "git_state",
           "load_1m", "machine_info", "provenance", "thread_counts", "versions"]

#: the distributions whose versions a run records (a peer's as its package is named on PyPI)
LIBRARIES: tuple[str, ...] = (
    "masklab", "numpy", "Cython", "pandas", "torch", "transformers", "ray", "pyarrow",
    "llguidance", "xgrammar", "outlines_core", "llama_cpp_python", "lm-format-enforcer", "glrmask",
)
#: the environment variables that set the threads of numpy's BLAS, torch and the peers' pools
THREAD_VARIABLES: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                     "RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")
#: the keys of run.json that :func:`provenance` writes
PROVENANCE_KEYS: tuple[str, ...] = ("machine", "versions", "git", "threads", "load_1m")
_ROOT = Path(__file__).resolve().parents[2]  # the folder holding toolkit/


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _cpu_model_and_mhz() -> tuple[str, float | None]:
    """The first CPU's model name and current MHz as /proc/cpuinfo gives them."""
    model, mhz = None, None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "cpu MHz" and mhz is None:
            try:
                mhz = round(float(value), 1)
            except ValueError:
                pass
    return model or platform.processor() or platform.machine(), mhz


def machine_info() -> dict[str, Any]:
    """The machine a run measures: CPU model, its current MHz and frequency governor
    (where Linux shows them), cores and the cores this process may use, memory, Python,
    GPU (if any)."""
    cpu, mhz = _cpu_model_and_mhz()
    governor = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    try:
        mem = psutil.virtual_memory().total / 2**30
    except Exception:  # noqa: BLE001
        mem = None
    gpu = None
    if shutil.which("nvidia-smi"):
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            gpu = None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "processor": cpu,
        "cpu_mhz": mhz,
        "governor": governor.strip() if governor else None,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_gb": None if mem is None else round(mem, 1),
        "python": platform.python_version(),
        "gpu": gpu,
    }


def engine_info(engine: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a run records of an engine: its ``describe()`` (version, options); the
    options it was built with where it gives none; its capabilities."""
    info = dict(engine.describe())
    info.setdefault("options", dict(options))
    cap = getattr(engine, "capabilities", None)
    if cap is not None and hasattr(cap, "as_dict"):
        info.setdefault("capabilities", cap.as_dict())
    return info


def versions(dists: Sequence[str] = LIBRARIES) -> dict[str, str | None]:
    """Python's version and the installed versions of ``dists`` (None where absent)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = None
    return out


def git_state(root: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the checkout at ``root`` (default: the one
    masklab is imported from); ``dirty`` when a tracked file differs from the commit.
    None when it is not a checkout or git is not there."""
    where = Path(root) if root is not None else _ROOT
    if not (where / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=20)
        status = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or status.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def thread_counts(threads: int | None = None) -> dict[str, Any]:
    """torch's intra-op threads (None when torch is not loaded: measuring it would load
    it), the thread variables set in the environment, and ``threads``, the mask threads
    the run was given (None: the engines' defaults)."""
    torch = sys.modules.get("torch")
    return {
        "torch": int(torch.get_num_threads()) if torch is not None else None,
        "environment": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "masks": threads,
    }


def load_1m() -> float | None:
    """The machine's 1-minute load average (None where the system does not say)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def provenance(threads: int | None = None) -> dict[str, Any]:
    """The provenance a run's ``run.json`` starts with (the keys of :data:`PROVENANCE_KEYS`);
    :func:`finish_provenance` adds the load at the end."""
    return {
        "machine": machine_info(),
        "versions": versions(),
        "git": git_state(),
        "threads": thread_counts(threads),
        "load_1m": {"start": load_1m(), "end": None},
    }


def finish_provenance(meta: dict[str, Any]) -> None:
    """Record the 1-minute load at the end of the run whose metadata is ``meta``."""
    load = meta.get("load_1m")
    meta["load_1m"] = {**(load if isinstance(load, dict) else {}), "end": load_1m()}


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


#: provenance fields that differ from run to run by nature, not a difference in setup
_EVERY_RUN = ("load_1m", "machine.cpu_mhz")


def differences(metas: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The provenance fields (dotted: ``versions.numpy``, ``git.commit``...) whose values
    differ between the runs of ``metas``, each with every run's value (None where a run
    does not record it).  The load and the CPU's current MHz, which differ every run, are
    left out; a run that records no provenance at all is compared on what it has."""
    flats = [_flat({k: m.get(k) for k in PROVENANCE_KEYS if k in m}, "") for m in metas]
    keys = sorted({k for f in flats for k in f if not k.startswith(_EVERY_RUN)})
    out: dict[str, list[Any]] = {}
    for k in keys:
        values = [f.get(k) for f in flats]
        if len({repr(v) for v in values}) > 1:
            out[k] = values
    return out
