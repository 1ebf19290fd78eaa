"""The package's shape: every package folder ships in the wheel, modules import each other
without cycles, serving stays free of the export's dependencies, and test helpers stay
out of the product.

Imports are read from the sources (``ast``). For cycles every import counts, also one
inside a function: a lazy import that closes a cycle is still a cycle, only a hidden one.
For what serving loads, the imports that run at import time count, followed through our
modules, and the modules that can be imported outside Triton are also imported for real.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
# Export-only dependencies (the `export` extra) and our packages that need them or exist
# for tests: serving must load none of them.
EXPORT_ONLY = ("torch", "TTS", "triton_tts.export", "testkit")
TEST_HELPERS = "testkit"
# Packages of data only (no __init__.py): the repository template and the gateway's page.
DATA_PACKAGES = ("triton_tts.model_repository", "triton_tts.gateway.static")
# Only importable inside Triton's Python backend (its stub provides part of it).
PB_UTILS = "triton_python_backend_utils"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def within(module: str, *packages: str) -> bool:
    """``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _package_view() -> ModuleType:
    """scripts/package_view.py: the wheel's package -> folder table, read from pyproject."""
    spec = importlib.util.spec_from_file_location("package_view", ROOT / "scripts" / "package_view.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel_modules(pyproject: Path = PYPROJECT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of every package the wheel holds."""
    modules = {}
    for package, folder in _package_view().package_dirs(pyproject).items():
        for source in folder.glob("*.py"):
            modules[package if source.stem == "__init__" else f"{package}.{source.stem}"] = source
    return modules


def _nodes(tree: ast.AST, at_import: bool) -> Iterator[ast.AST]:
    """Every node, or (``at_import``) those that run when the module is imported: not the
    bodies of functions."""
    for child in ast.iter_child_nodes(tree):
        if not (at_import and isinstance(child, FUNCTIONS)):
            yield child
            yield from _nodes(child, at_import)


def imported_names(module: str, source: Path, known: set[str], at_import: bool = False) -> set[str]:
    """What ``module`` imports: modules of ``known`` by their name (``from pkg import mod``
    is ``pkg.mod``), anything else as written."""
    package = module if source.stem == "__init__" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _nodes(ast.parse(source.read_text(encoding="utf-8")), at_import):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found - {module}


def import_graph(modules: dict[str, Path], at_import: bool = False) -> dict[str, set[str]]:
    return {name: imported_names(name, source, set(modules), at_import) for name, source in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the graph's own modules, as a path that ends where it
    starts, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node] & graph.keys()):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def loaded_at_import(graph: dict[str, set[str]], module: str) -> set[str]:
    """Everything importing ``module`` imports, followed through our modules."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for name in graph.get(todo.pop(), set()) - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_every_package_folder_is_in_the_wheel() -> None:
    """pyproject.toml lists packages one by one: a new subpackage left out of the list
    would be missing from the wheel (and from mypy's view) while the checkout still works."""
    packages = _package_view().package_dirs(PYPROJECT)
    assert packages["triton_tts.export.coqui"] == ROOT / "export_scripts" / "coqui"
    for package, folder in packages.items():
        # Without __init__.py: the repository template and the folders of package data.
        assert (folder / "__init__.py").is_file() or within(package, *DATA_PACKAGES), folder
        for child in folder.iterdir():
            if (child / "__init__.py").is_file():
                assert f"{package}.{child.name}" in packages, f"{child} is not in pyproject's packages"
            # A folder of package data with an importable name is listed too (setuptools
            # warns otherwise); the models' version folders ("1") are not importable names.
            if child.is_dir() and child.name.isidentifier() and child.name != "__pycache__":
                assert f"{package}.{child.name}" in packages, f"{child} is not in pyproject's packages"


def test_the_typecheck_view_has_the_subpackages(tmp_path: Path) -> None:
    view = _package_view().build_view(tmp_path / "view", PYPROJECT)
    for name, source in wheel_modules().items():
        folder = name if source.stem == "__init__" else name.rpartition(".")[0]
        linked = view.joinpath(*folder.split("."), source.name)
        assert linked.is_symlink() and linked.resolve() == source.resolve(), name


def test_no_import_cycles() -> None:
    modules = wheel_modules()
    assert "triton_tts.export.coqui.registry" in modules  # the walk reaches subpackages
    assert find_cycle(import_graph(modules)) is None


def test_a_cycle_is_found(tmp_path: Path) -> None:
    """The check above catches the shape this layout replaced: a module that imports a
    sibling at the top, which imports it back inside a function."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "core.py").write_text("from pkg.helpers import helper\n", encoding="utf-8")
    (package / "helpers.py").write_text(
        "def helper():\n    from pkg import core\n    return core\n", encoding="utf-8"
    )
    (package / "leaf.py").write_text("from . import helpers\n", encoding="utf-8")
    modules = {"pkg": package / "__init__.py"} | {
        f"pkg.{name}": package / f"{name}.py" for name in ("core", "helpers", "leaf")
    }
    graph = import_graph(modules)
    assert graph["pkg.leaf"] == {"pkg.helpers"}  # relative imports resolved
    assert find_cycle(graph) == ["pkg.core", "pkg.helpers", "pkg.core"]
    assert import_graph(modules, at_import=True)["pkg.helpers"] == set()  # lazy: not at import
    assert find_cycle({**graph, "pkg.helpers": set()}) is None


def test_the_client_imports_nothing_of_the_server() -> None:
    """The client installs alone (tests/test_install_sets.py): none of its modules imports
    another of ours, also not lazily. import-linter cannot see client/ behind the
    package-dir mapping, so this check is here."""
    modules = wheel_modules()
    client = [name for name in modules if within(name, "triton_tts.client")]
    assert "triton_tts.client.cli" in client
    for name in client:
        ours = imported_names(name, modules[name], set(modules))
        outside = [t for t in ours if within(t, "triton_tts") and not within(t, "triton_tts.client")]
        assert outside == [], f"{name} imports {outside}"


def test_the_product_never_imports_test_helpers() -> None:
    for name, targets in import_graph(wheel_modules()).items():
        if not within(name, TEST_HELPERS):
            assert not [t for t in targets if within(t, TEST_HELPERS)], name


def _serving() -> tuple[dict[str, set[str]], list[str]]:
    modules = wheel_modules()
    return import_graph(modules, at_import=True), sorted(m for m in modules if not within(m, *EXPORT_ONLY))


def test_serving_imports_no_export_code() -> None:
    """No module outside triton_tts.export and testkit (the server, the Triton
    models' runners, the CLI, the client) imports torch, coqui-tts or the export code when
    it is imported; the export commands import it when they run."""
    graph, serving = _serving()
    assert {"triton_tts.server", "triton_tts.stages", "triton_tts.bls", "triton_tts.cli"} <= set(serving)
    for module in serving:
        assert not [n for n in loaded_at_import(graph, module) if within(n, *EXPORT_ONLY)], module


def test_serving_loads_no_export_dependency() -> None:
    """The same, for real: the serving modules that can be imported outside Triton,
    imported in a fresh interpreter, leave no export-only module behind (also none that a
    third-party library would pull in)."""
    graph, serving = _serving()
    importable = [m for m in serving if PB_UTILS not in loaded_at_import(graph, m)]
    assert {"triton_tts.server", "triton_tts.stages", "triton_tts.cli"} <= set(importable)
    probe = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {importable!r}:
            importlib.import_module(name)
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [m for m in json.loads(done.stdout) if within(m, *EXPORT_ONLY)]


TRITON_MODELS = sorted(p.parent.parent.name for p in ROOT.glob("model_repository/*/1/model.py"))


@pytest.mark.parametrize("model", TRITON_MODELS)
def test_triton_models_import_no_export_code(model: str) -> None:
    """A Triton model imports our runners when Triton loads it; none of that is export code."""
    graph, _ = _serving()
    source = ROOT / "model_repository" / model / "1" / "model.py"
    names = imported_names("model", source, set(graph), at_import=True)
    for name in [*names, *(n for m in names for n in loaded_at_import(graph, m))]:
        assert not within(name, *EXPORT_ONLY), name
