"""What a run records of where it ran: the machine (:func:`machine_info`), each engine
(:func:`engine_info`) and the libraries (:func:`versions`).  ``masklab bench``,
``audit`` and ``generate`` write them into their ``run.json``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import psutil

__all__ = ["machine_info", "engine_info", "versions"]


def machine_info() -> dict[str, Any]:
    """The machine a run measures: CPU model, cores, memory, Python, GPU (if any)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
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
    return {
        "platform": platform.platform(),
        "processor": cpu,
        "cpu_count": os.cpu_count(),
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


def versions(dists: Sequence[str] = ("torch", "transformers", "numpy", "masklab")) -> dict[str, str | None]:
    """Installed versions of ``dists`` (None where absent), for a run's record."""
    out: dict[str, str | None] = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            out[d] = None
    return out
