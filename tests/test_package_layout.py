"""The package's shape: every package folder ships in the wheel, each portion of the
namespace package lies in the checkout as its module path, and serving loads none of the
export's code when it is imported.

The layers, the absence of cycles, the client's independence and the test helpers' place
are import-linter's contracts (pyproject.toml, `make lint`; one test here runs it). What it
cannot tell is an import at import time from one inside a function: for what serving loads,
the imports that run at import time count (read from the sources with ``ast``), followed
through our modules, and the modules that can be imported outside Triton are also imported
for real.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
# Export-only dependencies (the `export` extra) and our packages that need them or exist
# for tests: serving must load none of them.
EXPORT_ONLY = ("torch", "TTS", "triton_tts.export", "testkit")
# Packages of data only (no __init__.py): the repository template and the gateway's page.
DATA_PACKAGES = ("triton_tts.model_repository", "triton_tts.gateway.static")
# Only importable inside Triton's Python backend (its stub provides part of it).
PB_UTILS = "triton_python_backend_utils"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def within(module: str, *packages: str) -> bool:
    """``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def package_dirs(pyproject: Path = PYPROJECT) -> dict[str, Path]:
    """Package name -> source folder, for every package the wheel holds: under the folder
    of its nearest mapped ancestor ([tool.setuptools.package-dir]), else its dotted path."""
    setuptools = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapped: dict[str, str] = setuptools.get("package-dir", {})
    folders = {}
    for package in setuptools["packages"]:
        parts = package.split(".")
        folder = Path(*parts)
        for depth in range(len(parts), 0, -1):
            if (prefix := ".".join(parts[:depth])) in mapped:
                folder = Path(mapped[prefix], *parts[depth:])
                break
        folders[package] = pyproject.parent / folder
    return folders


def wheel_modules(pyproject: Path = PYPROJECT) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of every package the wheel holds."""
    modules = {}
    for package, folder in package_dirs(pyproject).items():
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
    would be missing from the wheel while the checkout still works."""
    packages = package_dirs()
    assert packages["triton_tts.export.coqui"] == ROOT / "export_scripts" / "triton_tts" / "export" / "coqui"
    for package, folder in packages.items():
        # Without __init__.py: the namespace package, the repository template and the
        # folders of package data.
        assert (
            (folder / "__init__.py").is_file() or within(package, *DATA_PACKAGES) or package == "triton_tts"
        )
        for child in folder.iterdir():
            if (child / "__init__.py").is_file():
                assert f"{package}.{child.name}" in packages, f"{child} is not in pyproject's packages"
            # A folder of package data with an importable name is listed too (setuptools
            # warns otherwise); the models' version folders ("1") are not importable names.
            if child.is_dir() and child.name.isidentifier() and child.name != "__pycache__":
                assert f"{package}.{child.name}" in packages, f"{child} is not in pyproject's packages"


def test_the_portions_lie_as_python_finds_them() -> None:
    """Every package of code is its module path under one of the portions' roots, the roots
    mypy, import-linter and Python are given: no tool needs a view or a mapping of its own.
    Only the repository template (package data, never imported) is mapped by name."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    roots = [ROOT, ROOT / "client", ROOT / "export_scripts"]
    mypy_path = config["tool"]["mypy"]["mypy_path"].replace("$MYPY_CONFIG_FILE_DIR", str(ROOT))
    assert sorted(Path(p) for p in mypy_path.split(",")) == sorted(roots)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "PORTIONS := client:export_scripts" in makefile
    assert not (ROOT / "triton_tts" / "__init__.py").exists()  # a namespace package (PEP 420)
    for package, folder in package_dirs().items():
        if within(package, "triton_tts.model_repository"):
            continue
        homes = [root for root in roots if folder == root.joinpath(*package.split("."))]
        assert homes, f"{package} is at {folder.relative_to(ROOT)}, not its module path under a root"
        for root in roots:  # and nowhere else: a package in two portions would shadow itself
            assert root in homes or not (root.joinpath(*package.split(".")) / "__init__.py").exists()


def test_import_linter_keeps_the_contracts() -> None:
    """`lint-imports` as `make lint` runs it: the layers, no cycles, the client alone, no
    export dependency in serving, no test helper in the product."""
    env = {**os.environ, "PYTHONPATH": "client:export_scripts"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-logo", "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert len(contracts) >= 5
    for contract in contracts:
        assert f"{contract['name']} KEPT" in done.stdout
    assert "Analyzed" in done.stdout
    analyzed = int(done.stdout.split("Analyzed ")[1].split(" files")[0])
    assert analyzed >= len(wheel_modules())  # every portion was read, client/ and export_scripts/ too


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
