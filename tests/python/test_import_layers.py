"""The Python packages' modules import each other in layers, never in a circle.

The import graph of ``accord`` (bindings/python/accord) and ``accord.torch``
(frameworks/torch/python) is read from the source with ``ast``: every
``import`` and ``from ... import`` statement, those inside functions
included, so an import moved into a function to dodge a circle still counts.
The graph must be acyclic. Each ``accord.torch`` module must also import on
its own, in a fresh interpreter, without its package's ``__init__`` having
run first.

Runs at one rank; it needs no accord.init().
"""

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = {
    "accord": _ROOT / "bindings" / "python" / "accord",
    "accord.torch": _ROOT / "frameworks" / "torch" / "python",
}

# Compiled modules of the packages; they import nothing of the above.
_EXTENSIONS = {"accord._core"}


def _modules() -> Dict[str, Path]:
    """Module name -> source file, for every module of the packages."""
    modules = {}
    for package, folder in _PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _parents(module: str, is_package: bool) -> Set[str]:
    """The packages whose ``__init__`` has started before ``module`` runs."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))} | ({module} if is_package else set())


def _resolve(module: str, is_package: bool, level: int, target: Optional[str]) -> str:
    """The absolute name of a (possibly relative) ``from`` target."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph(modules: Dict[str, Path]) -> Dict[str, Set[str]]:
    """Module -> the modules among ``modules`` whose code runs when it is imported.

    ``from P import n`` counts as an import of ``P.n`` when that is a
    module, and of ``P`` otherwise. Importing ``P.n`` also runs ``P``'s
    ``__init__``, which counts unless ``P`` is a parent of the importer (a
    parent has already started before its submodules).
    """
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.stem == "__init__"
        parents = _parents(name, is_package)
        targets: Set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node.level, node.module)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    is_module = submodule in modules or submodule in _EXTENSIONS
                    targets.add(submodule if is_module else source)
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in modules and prefix != name and (prefix == target or prefix not in parents):
                    graph[name].add(prefix)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A circle of imports ``[a, b, ..., a]``, or None when the graph is acyclic."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == 1:
                return path[path.index(succ) :] + [succ]
            if succ not in state:
                found = visit(succ)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_import_graph_reads_every_form(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .low import f\nfrom .high import g\n")
    (pkg / "low.py").write_text("import os\n\ndef f():\n    from . import high\n")
    (pkg / "high.py").write_text("from pkg.low import f\nfrom . import helper\n")
    (pkg / "helper.py").write_text("from pkg import f\n")
    monkeypatch.setitem(_PACKAGES, "pkg", pkg)
    modules = {name: path for name, path in _modules().items() if name.split(".")[0] == "pkg"}
    graph = import_graph(modules)
    assert graph == {
        "pkg": {"pkg.low", "pkg.high"},
        "pkg.low": {"pkg.high"},  # a function-level import counts
        "pkg.high": {"pkg.low", "pkg.helper"},
        "pkg.helper": {"pkg"},  # a name from the parent's __init__
    }
    assert find_cycle(graph) == ["pkg", "pkg.high", "pkg.helper", "pkg"]


def test_packages_import_in_layers():
    modules = _modules()
    assert "accord.torch.autograd" in modules and "accord.basics" in modules
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, "modules import each other in a circle: " + " -> ".join(cycle)


def test_autograd_sits_below_the_blocking_collectives():
    graph = import_graph(_modules())
    below: Set[str] = set()
    todo = ["accord.torch.autograd"]
    while todo:
        for succ in graph[todo.pop()]:
            if succ not in below:
                below.add(succ)
                todo.append(succ)
    assert "accord.torch.handles" in below
    assert not below & {"accord.torch", "accord.torch.mpi_ops", "accord.torch.differentiable_ops"}


_ISOLATED_IMPORT = """
import importlib, sys, types
folder, names = sys.argv[1], sys.argv[2:]
import accord
failed = []
for name in names:
    for loaded in [m for m in sys.modules if m == "accord.torch" or m.startswith("accord.torch.")]:
        del sys.modules[loaded]
    # The package without its __init__: the module must bring in what it needs.
    package = types.ModuleType("accord.torch")
    package.__path__ = [folder]
    sys.modules["accord.torch"] = package
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_torch_module_imports_on_its_own():
    pytest.importorskip("torch")
    names = [name for name in _modules() if name.startswith("accord.torch.")]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run(
        [sys.executable, "-c", _ISOLATED_IMPORT, str(_PACKAGES["accord.torch"])] + names,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
