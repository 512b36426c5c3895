"""scripts/ and the results/ index (issue 45).

Every shell script of ``scripts/`` parses (``bash -n``) and every Python script compiles;
every repository file, sourced script and ``toolkit`` module or name a script refers to
exists; the scripts that can run cheaply do (``--help``; the field table from its
committed CSV).  ``results/`` holds no script, log or raw record, and its README indexes
every folder in it.
"""

from __future__ import annotations

import ast
import py_compile
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
RESULTS = ROOT / "results"
SHELL = sorted(SCRIPTS.rglob("*.sh"))
PYTHON = sorted(SCRIPTS.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(SCRIPTS).as_posix()


# a path into the repository (not $OUT/..., not .gpu/..., not a glob)
_PATH = re.compile(r"(?<![\w./$*-])((?:tests|toolkit|strategies|datasets|scripts|results)/[\w./-]*\w|setup\.py)\b")
_SOURCE = re.compile(r'source "\$\(dirname "\$0"\)/([\w.-]+)"')
_RUN_MODULE = re.compile(r"-m (toolkit(?:\.\w+)*)\b")
_FROM_IMPORT = re.compile(r"^\s*from (toolkit(?:\.\w+)*) import ([\w, ]+)$", re.M)


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base.with_suffix(".pyx")):
        if candidate.is_file():
            return candidate
    return None


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` binds ``name`` at its top level (a def, a class, an
    assignment or an import), or has a submodule ``name``; an extension module
    (``.pyx``) is taken on trust."""
    if path.suffix == ".pyx" or (path.name == "__init__.py" and _module_file_in(path.parent, name)):
        return True
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return name in names


def _module_file_in(folder: Path, name: str) -> bool:
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def _toolkit_imports(path: Path) -> list[tuple[str, list[str]]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":  # anywhere in the file: scripts import inside main() to keep --help cheap
        return [(n.module, [a.name for a in n.names]) for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.ImportFrom) and n.module and n.module.split(".")[0] == "toolkit"]
    return [(m, [x.strip() for x in names.split(",") if x.strip()]) for m, names in _FROM_IMPORT.findall(text)]


def test_the_scripts_moved_out_of_results_are_here() -> None:
    assert {_name(p) for p in SHELL + PYTHON} >= {
        "gpu/common.sh", "gpu/run.sh", "gpu/run2.sh", "gpu/run3.sh", "gpu/run4.sh",
        "adapter-cpu/run.py", "field/table.py",
    }


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", SHELL, ids=_name)
def test_a_shell_script_parses(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", PYTHON, ids=_name)
def test_a_python_script_compiles(script: Path, tmp_path: Path) -> None:
    py_compile.compile(str(script), cfile=str(tmp_path / "script.pyc"), doraise=True)


@pytest.mark.parametrize("script", SHELL + PYTHON, ids=_name)
def test_what_a_script_names_exists(script: Path) -> None:
    """Repository paths (``tests/test_bitmask.py``, ``setup.py``, ``results/...``), the
    scripts it sources, the modules it runs (``python -m toolkit``) and the toolkit
    names it imports."""
    text = script.read_text(encoding="utf-8")
    missing = [p for p in _PATH.findall(text) if not (ROOT / p).exists()]
    missing += [f"source {s}" for s in _SOURCE.findall(text) if not (script.parent / s).is_file()]
    for module in _RUN_MODULE.findall(text):
        file = _module_file(module)
        if file is None or (file.name == "__init__.py" and not (file.parent / "__main__.py").is_file()):
            missing.append(f"-m {module}")
    for module, names in _toolkit_imports(script):
        file = _module_file(module)
        if file is None:
            missing.append(module)
            continue
        missing += [f"{module}.{n}" for n in names if not _defines(file, n)]
    assert not missing, f"{_name(script)} refers to what is not there: {missing}"


def test_the_gpu_runs_source_the_common_settings() -> None:
    for name in ("run.sh", "run2.sh", "run3.sh", "run4.sh"):
        assert _SOURCE.findall((SCRIPTS / "gpu" / name).read_text(encoding="utf-8")) == ["common.sh"], name


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_adapter_script_answers_help_without_loading_a_model() -> None:
    done = _run(str(SCRIPTS / "adapter-cpu" / "run.py"), "--help")
    assert done.returncode == 0, done.stderr
    assert "--steps" in done.stdout and "--out" in done.stdout


def test_the_field_table_script_writes_the_committed_table() -> None:
    """``scripts/field/table.py results/field/engines.csv`` prints ``results/field/table.md``."""
    done = _run(str(SCRIPTS / "field" / "table.py"), "--help")
    assert done.returncode == 0 and "table.md" in done.stdout
    done = _run(str(SCRIPTS / "field" / "table.py"), str(RESULTS / "field" / "engines.csv"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (RESULTS / "field" / "table.md").read_text(encoding="utf-8")


def _committable(folder: Path) -> list[str]:
    """The files under ``folder`` a commit of the working tree would hold: tracked and
    present, or new and not ignored."""
    try:
        done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--",
                               str(folder)], capture_output=True, cwd=ROOT, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("needs git")
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [p for p in done.stdout.decode("utf-8").split("\0") if p]
    return sorted(p for p in dict.fromkeys(paths) if (ROOT / p).is_file())


def test_results_holds_no_script_log_or_raw_record() -> None:
    files = _committable(RESULTS)
    assert files, "results/ is empty"
    assert [f for f in files if f.endswith((".sh", ".py", ".log", ".jsonl"))] == []


def test_the_results_readme_indexes_every_folder() -> None:
    folders = {Path(f).parts[1] for f in _committable(RESULTS) if len(Path(f).parts) > 2}
    index = (RESULTS / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| \[`([\w.-]+)/`\]\(([\w.-]+)/\) \|", index, re.M))
    assert set(rows) == folders
    assert all(link == name for name, link in rows.items())
