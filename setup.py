"""Build masklab: pure-Python packages plus the Cython extensions of ``toolkit``.

Cython directives are set once here, project-wide.  ``MASKLAB_DEBUG=1`` at build
time turns bounds checks, wraparound and the profiling hooks back on.
"""

import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("MASKLAB_DEBUG", "") not in ("", "0")
#: ``MASKLAB_ONLY=toolkit.core.trie,...`` builds only those extensions (a quick rebuild
#: of the one being worked on); unset, all of them
ONLY = [m for m in os.environ.get("MASKLAB_ONLY", "").split(",") if m]
#: ``MASKLAB_NO_EXT=1``: no extensions (the Makefile's ``pip install -e`` step, whose
#: ``make build`` then builds them once, in place; unset, pip builds them as usual)
NO_EXT = os.environ.get("MASKLAB_NO_EXT", "") not in ("", "0")
#: processes that translate the .pyx files to C (``build_ext -j N`` compiles the C in
#: parallel); ``MASKLAB_JOBS`` overrides the CPU count
_jobs = os.environ.get("MASKLAB_JOBS", "") or "0"
if not _jobs.isdigit():
    raise SystemExit(f"MASKLAB_JOBS must be a whole number of processes (0: the CPU count), got {_jobs!r}")
JOBS = int(_jobs) or os.cpu_count() or 1

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
    "profile": DEBUG,
    "linetrace": DEBUG,
}


def _extension(name: str) -> Extension:
    return Extension(
        name,
        [name.replace(".", "/") + ".pyx"],
        include_dirs=[numpy.get_include(), "."],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O0", "-g"] if DEBUG else ["-O3"],
    )


extensions = [
    _extension("toolkit.core.trie"),
    _extension("toolkit.automata._dfabuild"),
    _extension("toolkit.grammar.cfg"),
    _extension("toolkit.core.bpe"),
    _extension("toolkit.core.session"),
    _extension("toolkit.decode._simdraw"),
    _extension("strategies.outlines._index"),
    _extension("strategies.llguidance.parser"),
    _extension("strategies.glr._core"),
    _extension("strategies.xgrammar._charts"),
    _extension("strategies.xgrammar._tables"),
    _extension("strategies.xgrammar._pda"),
]

#: test-only extensions: built in place for a checkout's tests (``make`` runs
#: ``build_ext --inplace``), never for a wheel (``packages.find`` leaves ``tests`` out anyway)
TEST_EXTENSIONS = ["tests._support.cutil_probe"]
if "--inplace" in sys.argv or os.environ.get("MASKLAB_TEST_EXTENSIONS", "") not in ("", "0"):
    extensions += [_extension(name) for name in TEST_EXTENSIONS]

if ONLY:
    unknown = set(ONLY) - {e.name for e in extensions}
    if unknown:
        raise SystemExit(f"MASKLAB_ONLY: no extension {sorted(unknown)}; valid: {[e.name for e in extensions]}")
    extensions = [e for e in extensions if e.name in ONLY]

setup(
    ext_modules=[] if NO_EXT else cythonize(extensions, compiler_directives=directives, annotate=DEBUG,
                                            nthreads=JOBS if len(extensions) > 1 else 0),
)
