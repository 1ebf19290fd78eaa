"""The package's shape: each portion of the namespace package lies in the checkout where
Python, mypy and the wheel find it, and serving loads none of the export's code when it
is imported (tests/test_install_sets.py checks what the wheel holds).

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
# Only importable inside Triton's Python backend (its stub provides part of it).
PB_UTILS = "triton_python_backend_utils"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def within(module: str, *packages: str) -> bool:
    """``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


# The roots that hold triton_tts's three portions (a namespace package: pyproject.toml,
# [tool.hatch.build.targets.wheel]).
PORTIONS = (ROOT, ROOT / "client", ROOT / "export_scripts")


def wheel_modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the three portions."""
    modules = {}
    for root in PORTIONS:
        for source in sorted((root / "triton_tts").rglob("*.py")):
            parts = source.relative_to(root).with_suffix("").parts
            if "__pycache__" not in parts:
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = source
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


def test_the_portions_lie_as_python_finds_them() -> None:
    """The same three roots for Python (the editable install's path entries), mypy
    (mypy_path) and the wheel; a package lives in one portion only, and none of them makes
    triton_tts a regular package, which would hide the other two."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    wheel = config["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert sorted(ROOT / d for d in wheel["dev-mode-dirs"]) == sorted(PORTIONS)
    mypy_path = config["tool"]["mypy"]["mypy_path"].replace("$MYPY_CONFIG_FILE_DIR", str(ROOT))
    assert sorted(Path(p) for p in mypy_path.split(",")) == sorted(PORTIONS)
    assert sorted(ROOT / p for p in wheel["only-include"] if p != "model_repository") == sorted(
        root / "triton_tts" for root in PORTIONS
    )
    for root in PORTIONS:
        assert not (root / "triton_tts" / "__init__.py").exists(), root
    packages = [name for name, source in wheel_modules().items() if source.name == "__init__.py"]
    assert len(packages) == len(set(packages))  # in one portion each
    assert {"triton_tts.client", "triton_tts.export", "triton_tts.export.coqui", "triton_tts.text"} <= set(
        packages
    )
    probe = "import json, triton_tts; print(json.dumps(list(triton_tts.__path__)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, check=True)
    assert sorted(Path(p) for p in json.loads(done.stdout)) == sorted(
        root / "triton_tts" for root in PORTIONS
    )


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
    assert {
        "triton_tts.ops.server",
        "triton_tts.runtime.stages",
        "triton_tts.runtime.long_text",
        "triton_tts.cli",
    } <= set(serving)
    for module in serving:
        assert not [n for n in loaded_at_import(graph, module) if within(n, *EXPORT_ONLY)], module


def test_serving_loads_no_export_dependency() -> None:
    """The same, for real: the serving modules that can be imported outside Triton,
    imported in a fresh interpreter, leave no export-only module behind (also none that a
    third-party library would pull in)."""
    graph, serving = _serving()
    importable = [m for m in serving if PB_UTILS not in loaded_at_import(graph, m)]
    assert {"triton_tts.ops.server", "triton_tts.runtime.stages", "triton_tts.cli"} <= set(importable)
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
