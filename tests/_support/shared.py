"""Where the ``shared/`` files live, and skipping when they are absent.

``MASKLAB_SHARED`` (default ``../shared``) names the folder; a relative value is read
against the project root (the folder holding ``setup.py``), not the current directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.data.datasets import project_root, shared_dir

__all__ = ["PROJECT_ROOT", "SHARED", "require_shared"]


PROJECT_ROOT = project_root()
SHARED = shared_dir()


def require_shared(relpath: str) -> Path:
    """``SHARED / relpath``, or skip the calling test when that file is not there."""
    path = SHARED / relpath
    if not path.exists():
        pytest.skip(f"shared file {relpath} not found under {SHARED} (set MASKLAB_SHARED)")
    return path
