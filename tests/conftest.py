"""Shared fixtures; the helpers behind them live in ``tests/_support``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.shared import SHARED


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder; skips the test when it does not exist."""
    if not SHARED.is_dir():
        pytest.skip(f"shared folder {SHARED} not found (set MASKLAB_SHARED)")
    return SHARED
