"""Shared fixtures; the helpers behind them live in ``tests/_support``.

Hypothesis runs under a profile (``HYPOTHESIS_PROFILE``, default ``ci``), loaded here
before any test module is imported, so every ``@settings`` of the suite inherits what
it does not set itself:

* ``ci`` (``make test``): derandomized (the same examples on every run and machine, so
  a red run is reproduced by running it again), no deadline (2 shared cores), the blob
  to reproduce a failure printed;
* ``dev``: new random examples on every run (200 where a test does not set its own
  count), for a local search: ``HYPOTHESIS_PROFILE=dev pytest ...``
  (``MASKLAB_HYPOTHESIS_EXAMPLES`` raises the count of the JSON Schema differential test).

Under pytest-xdist each worker (and each notebook kernel it starts) runs torch and
numpy on one thread (``OMP_NUM_THREADS``, unless set): workers side by side on a
2-core host with a thread pool each spun 4x slower (the decoding notebook took 116 s
among the workers, 27 s on one thread).
"""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):  # (before anything imports torch or numpy)
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from tests._support.shared import SHARED  # noqa: E402

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", derandomize=False, deadline=None, print_blob=True, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under a derandomized profile, every hypothesis test is derandomized too: one that
    sets ``derandomize=False`` itself (the one random test of ``make test``) fails,
    saying so."""
    chosen = getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings", None)
    if settings.default.derandomize and chosen is not None and not chosen.derandomize:
        pytest.fail(f"{item.nodeid} is a hypothesis test that is not derandomized under the "
                    f"{os.environ.get('HYPOTHESIS_PROFILE', 'ci')!r} profile (drop its derandomize=False)")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder; skips the test when it does not exist."""
    if not SHARED.is_dir():
        pytest.skip(f"shared folder {SHARED} not found (set MASKLAB_SHARED)")
    return SHARED
