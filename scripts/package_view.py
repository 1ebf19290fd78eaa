"""Lay out the package as the wheel has it, with links to the sources, for mypy.

The wheel maps client/ to triton_tts.client, export_scripts/ to triton_tts.export (its
subpackages with it) and model_repository/ to package data (pyproject.toml,
[tool.setuptools.package-dir]).
Python finds them through setuptools' editable finder, but mypy does not run import hooks,
so it would see a triton_tts without client/ or export/. This view (an ignored folder,
rebuilt on every run from the same table) is what `make typecheck` points mypy at::

    python scripts/package_view.py build/typecheck
    MYPYPATH=build/typecheck mypy build/typecheck/triton_tts tests benchmarks scripts
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def package_dirs(pyproject: Path) -> dict[str, Path]:
    """Package name -> source folder, for every package the wheel holds."""
    setuptools = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})
    return {name: pyproject.parent / source_folder(name, mapped) for name in setuptools["packages"]}


def source_folder(package: str, mapped: dict[str, str]) -> Path:
    """Where setuptools finds ``package``: under the folder of its nearest mapped
    ancestor (``triton_tts.export.coqui`` -> ``export_scripts/coqui``), else its dotted path."""
    parts = package.split(".")
    for depth in range(len(parts), 0, -1):
        prefix = ".".join(parts[:depth])
        if prefix in mapped:
            return Path(mapped[prefix], *parts[depth:])
    return Path(*parts)


def build_view(target: Path, pyproject: Path = ROOT / "pyproject.toml") -> Path:
    if target.exists():
        shutil.rmtree(target)
    for name, source in package_dirs(pyproject).items():
        folder = target / name.replace(".", "/")
        folder.mkdir(parents=True, exist_ok=True)
        for module in source.glob("*.py"):
            (folder / module.name).symlink_to(os.path.relpath(module.resolve(), folder))
        for marker in source.glob("py.typed"):
            (folder / marker.name).symlink_to(os.path.relpath(marker.resolve(), folder))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    build_view(parser.parse_args().target)


if __name__ == "__main__":
    main()
