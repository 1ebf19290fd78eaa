"""The README and docs/ point at things that exist: files, headings, and the files the
architecture page names as the one home of each decision. No server needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path in backticks that names a file of this repository, e.g. `triton_tts/limits.py`.
FOLDERS = "triton_tts|client|export_scripts|model_repository|benchmarks|helm|tests|scripts"
REPO_PATH = re.compile(rf"`((?:{FOLDERS})/[^`\s]*)`")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_files_exist(page: Path) -> None:
    missing = []
    for name in REPO_PATH.findall(page.read_text(encoding="utf-8")):
        if any(ch in name for ch in "*<>[") or name.endswith("..."):
            continue  # a pattern or a placeholder, not one file
        if not (ROOT / name.rstrip("/")).exists():
            missing.append(name)
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_readme_stays_a_front_door() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200
