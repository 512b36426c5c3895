"""The folder tree is the architecture (issue #28): imports run one way, lowest floor first.

``toolkit.core`` < ``toolkit.automata`` < ``toolkit.grammar`` < ``toolkit.jsonschema`` <
``toolkit.data`` < ``strategies`` < ``toolkit.bench`` < ``toolkit.decode`` < ``toolkit.adapters`` <
``toolkit.report`` < ``toolkit.cli``.  ``toolkit.data`` (the dataset items, the checks of an
output against its item, a run's provenance) sits below the engines so that the benchmark
and the decoding loop share it without one importing the other.  A module imports its own
floor or lower, never higher; modules import each other without circles; an import inside
a function is for an optional dependency only (torch, transformers, the peers, Ray,
jsonschema); no module imports another's underscore names, or a private module of another
floor.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ["toolkit.core", "toolkit.automata", "toolkit.grammar", "toolkit.jsonschema", "toolkit.data", "strategies",
          "toolkit.bench", "toolkit.decode", "toolkit.adapters", "toolkit.report", "toolkit.cli"]
OPTIONAL = ("torch", "transformers", "llguidance", "xgrammar", "outlines_core", "llama_cpp", "lmformatenforcer", "glrmask",
            "gguf", "ray", "jsonschema",
            # heavy libraries loaded where they are needed, so that the CLI starts without them: the
            # tokenizer libraries (by the vocabulary reader that needs one), lark (by the Lark reader)
            "mistral_common", "tiktoken", "tokenizers", "lark")
_CY_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+(.+)|c?import\s+([\w.]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    out = {}
    for top in ("toolkit", "strategies"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".pyx", ".pxd") and "build" not in path.parts:
                name = _module_name(path)
                if path.suffix == ".py" or name not in out:
                    out[name] = path
    return out


def _floor(module: str) -> int | None:
    for i, floor in reversed(list(enumerate(FLOORS))):
        if module == floor or module.startswith(floor + "."):
            return i
    return None  # toolkit itself, toolkit.__main__


def _imports(path: Path) -> list[tuple[str, list[str], bool, int]]:
    """``(module, names, inside_function, line)`` of each import in ``path`` (absolute ones)."""
    text = path.read_text()
    if path.suffix != ".py":
        out = []
        for m in _CY_IMPORT.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if m.group(1):
                names = [n.strip().split(" as ")[0] for n in m.group(2).strip("()\\ ").split(",")]
                out.append((m.group(1), [n for n in names if n], False, line))
            else:
                out.append((m.group(3), [], False, line))
        return out
    tree = ast.parse(text)
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module, [a.name for a in child.names], in_function, child.lineno))
            elif isinstance(child, ast.Import):
                for a in child.names:
                    out.append((a.name, [], in_function, child.lineno))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                continue
            visit(child, inside)

    visit(tree, False)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _target(module: str, names: list[str], sources: dict[str, Path]) -> list[str]:
    """The project modules an import loads: ``from toolkit.core import bitmask`` is
    ``toolkit.core.bitmask``."""
    out = [module]
    out += [f"{module}.{n}" for n in names if f"{module}.{n}" in sources]
    return [m for m in out if m in sources]


SOURCES = _sources()
EDGES = [(src, tgt, names, inside, line)
         for src, path in SOURCES.items() for mod, names, inside, line in _imports(path)
         for tgt in _target(mod, names, SOURCES)]


def test_the_floors_exist_and_hold_every_module() -> None:
    for floor in FLOORS:
        assert floor in SOURCES, floor
    loose = [m for m in SOURCES if _floor(m) is None and m not in ("toolkit", "toolkit.__main__")]
    assert not loose, f"modules outside every floor: {loose}"


def test_no_import_runs_upward() -> None:
    up = [f"{src} -> {tgt} (line {line})" for src, tgt, _, _, line in EDGES
          if _floor(src) is not None and _floor(tgt) is not None and _floor(tgt) > _floor(src)]
    assert not up, "imports that run upward:\n" + "\n".join(up)


def test_modules_import_each_other_without_circles() -> None:
    graph: dict[str, set[str]] = {}
    for src, tgt, _, _, _ in EDGES:
        if src != tgt and not tgt.startswith(src + "."):  # a package's __init__ may load its own modules
            graph.setdefault(src, set()).add(tgt)
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            assert cycle is None, "a circle of imports: " + " -> ".join(cycle)


def test_functions_import_optional_dependencies_only() -> None:
    late = []
    for path in SOURCES.values():
        if path.suffix != ".py":
            continue
        for mod, _, inside, line in _imports(path):
            if inside and mod.split(".")[0] not in OPTIONAL:
                late.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
    assert not late, "imports inside functions (hoist them):\n" + "\n".join(late)


def test_no_module_imports_another_modules_private_names() -> None:
    private = []
    for src, path in SOURCES.items():
        for mod, names, _, line in _imports(path):
            targets = [(mod, None)] + [(f"{mod}.{n}", None) if f"{mod}.{n}" in SOURCES else (mod, n) for n in names]
            for tgt, name in targets:
                if tgt not in SOURCES or tgt == src:
                    continue
                if name is not None and name.startswith("_") and not name.startswith("__"):
                    private.append(f"{src}:{line} imports {name} from {tgt}")
                package, _, leaf = tgt.rpartition(".")
                if package and leaf.startswith("_") and not leaf.startswith("__") and not src.startswith(package + "."):
                    private.append(f"{src}:{line} imports the private module {tgt}")
    assert not private, "\n".join(sorted(set(private)))


@pytest.mark.parametrize("floor", FLOORS[:-1])
def test_each_floor_imports_alone(floor: str) -> None:
    """Every module of a floor loads without anything above it (the direction holds at
    run time too)."""
    import subprocess
    import sys

    mods = [m for m, p in SOURCES.items() if _floor(m) == FLOORS.index(floor) and p.suffix in (".py", ".pyx")]
    code = (f"import importlib, sys\nfor m in {mods!r}: importlib.import_module(m)\n"
            f"above = {FLOORS[FLOORS.index(floor) + 1:]!r}\n"
            "print(sorted(m for m in sys.modules for f in above if m == f or m.startswith(f + '.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {floor} loads {out.stdout.strip()}"


def test_a_grammar_finds_the_json_schema_compiler_a_floor_up() -> None:
    """``toolkit.grammar`` embeds schemas through the compiler that registers itself
    (toolkit.grammar.embed): ``toolkit.Grammar`` loads it; the grammar floor alone says so."""
    import subprocess
    import sys

    alone = ("from toolkit.grammar import Grammar\n"
             "from toolkit.core.errors import MasklabError\n"
             "try:\n    Grammar.from_json_schema({'type': 'integer'})\nexcept MasklabError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", alone], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "needs the compiler: import toolkit.jsonschema" in out.stdout
    wired = ("from toolkit import Grammar\n"
             "print(Grammar.from_json_schema({'type': 'integer'}).accepts('12'),\n"
             "      Grammar.from_lark('start: x\\nx: %json {\"type\": \"integer\"}').accepts('-3'))\n")
    out = subprocess.run([sys.executable, "-c", wired], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "True"]


def _extensions() -> list[str]:
    """The extension modules setup.py builds."""
    text = (ROOT / "setup.py").read_text()
    return re.findall(r'_extension\("([\w.]+)"\)', text)


@pytest.mark.parametrize("module", _extensions())
def test_every_extension_has_its_pxd_and_pyi(module: str) -> None:
    """Beside each ``.pyx``: the ``.pxd`` other Cython modules cimport (its C layout,
    commented) and the ``.pyi`` Python tools read; the stub names exactly what the
    built module has."""
    import importlib

    base = ROOT / module.replace(".", "/")
    for suffix in (".pyx", ".pxd", ".pyi"):
        assert base.with_suffix(suffix).is_file(), f"{module}: no {base.with_suffix(suffix).name}"
    stub = ast.parse(base.with_suffix(".pyi").read_text())
    stubbed = {n.name for n in stub.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    stubbed |= {t.id for n in stub.body if isinstance(n, ast.AnnAssign | ast.Assign)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    mod = importlib.import_module(module)
    public = set(getattr(mod, "__all__", ()))
    assert public <= stubbed, f"{module}.pyi lacks {sorted(public - stubbed)}"
    missing = sorted(n for n in stubbed if not n.startswith("_") and not hasattr(mod, n))
    assert not missing, f"{module}.pyi names what the module has not: {missing}"


def test_one_set_of_error_codes_and_one_byte_alphabet() -> None:
    """The C error codes and the 256 of the byte alphabet are defined once, in
    toolkit/core/cutil.pxd (errors.py is the Python half); no module keeps its own."""
    own = []
    for path in sorted([*ROOT.glob("toolkit/**/*.pyx"), *ROOT.glob("toolkit/**/*.pxd"),
                        *ROOT.glob("strategies/**/*.pyx"), *ROOT.glob("strategies/**/*.pxd")]):
        if path.name == "cutil.pxd":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(_?ERR_\w+|_?BYTES)\s*=", line):
                own.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not own, "\n".join(own)


LONG_FUNCTION_LINES = 80
"""The orchestrators stay thin (issue 45): no function of ``toolkit.bench``,
``toolkit.decode``, ``toolkit.report`` or the CLI is longer than this (decorators and
docstring included); a longer one is split by concern."""
THIN = ("toolkit/bench", "toolkit/decode", "toolkit/report", "toolkit/cli")


def test_no_function_in_the_orchestrators_is_over_80_lines() -> None:
    long = []
    for top in THIN:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    lines = node.end_lineno - first + 1
                    if lines > LONG_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {LONG_FUNCTION_LINES} lines (split them):\n" + "\n".join(long)


@pytest.mark.parametrize(("modules", "absent"), [
    # the report reads run folders through the records module, not the worker pool (issue 45)
    (("toolkit.report", "toolkit.report.sweep", "toolkit.report.direct", "toolkit.report.audit"),
     ("toolkit.bench.pool", "toolkit.bench.cluster")),
    # the decoding harness reads the items from below the engines (toolkit.data), not from the benchmark
    (("toolkit.decode.generate", "toolkit.decode.runs"), ("toolkit.bench",)),
])
def test_a_floor_loads_only_what_it_uses(modules: tuple[str, ...], absent: tuple[str, ...]) -> None:
    import subprocess
    import sys

    code = (f"import importlib, sys\nfor m in {list(modules)!r}: importlib.import_module(m)\n"
            f"print(sorted(m for m in sys.modules for a in {list(absent)!r} if m == a or m.startswith(a + '.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {modules} loads {out.stdout.strip()}"
