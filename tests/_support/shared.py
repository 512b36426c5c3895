"""Where the ``shared/`` files live, and skipping when they are absent.

``MASKLAB_SHARED`` (default ``../shared``) names the folder; a relative value is read
against the project root (the folder holding ``setup.py``), not the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["PROJECT_ROOT", "SHARED", "require_shared"]


def _project_root() -> Path:
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / "setup.py").is_file():
            return folder
    return here.parent


PROJECT_ROOT = _project_root()
SHARED = (PROJECT_ROOT / Path(os.environ.get("MASKLAB_SHARED", "../shared")).expanduser()).resolve()


def require_shared(relpath: str) -> Path:
    """``SHARED / relpath``, or skip the calling test when that file is not there."""
    path = SHARED / relpath
    if not path.exists():
        pytest.skip(f"shared file {relpath} not found under {SHARED} (set MASKLAB_SHARED)")
    return path
