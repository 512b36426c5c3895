"""What a non-editable install gets: every package (``toolkit.cli`` included, or the
``masklab`` command breaks) and every Cython declaration, source and stub, so that code
built against an installed masklab can ``cimport`` it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests._support.shared import PROJECT_ROOT


def _tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_build_py_ships_every_package_and_every_cython_file(tmp_path) -> None:
    if not _tracked("setup.py"):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "-d", str(tmp_path)], cwd=PROJECT_ROOT,
                   check=True, capture_output=True)
    packages = [p.rsplit("/", 1)[0] for p in _tracked("toolkit/**__init__.py", "strategies/**__init__.py")]
    assert "toolkit/cli" in packages and "strategies/glr" in packages
    missing = [p for p in packages if not (tmp_path / p / "__init__.py").is_file()]
    assert not missing, f"packages a wheel would lack: {missing}"
    cython = [p for p in _tracked("*.pxd", "*.pyx", "*.pyi", "*py.typed") if p.startswith(("toolkit/", "strategies/"))]
    assert len(cython) > 20
    missing = [p for p in cython if not (tmp_path / p).is_file()]
    assert not missing, f"package data a wheel would lack: {missing}"
    assert not (tmp_path / "tests").exists(), "the tests (and their probe extension) are no part of the package"
