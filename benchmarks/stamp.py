"""The stamp every benchmark result carries (date, commit, dirty or not, and machine),
and the one writer of a benchmark's results: its JSON and, next to it, its Markdown
tables under a first line naming that stamp (results/rtf.json -> results/rtf.md).
docs/performance.md copies its figures from those .md files."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

STAMP_KEYS = ("date", "commit", "machine")


def _usable_cores() -> int:
    try:
        from triton_tts.runtime.onnx_session import available_cores
    except ImportError:  # gpu_vocoder_check runs on bare GPU machines without onnxruntime
        return len(os.sched_getaffinity(0))
    return available_cores()


def stamp() -> dict[str, str]:
    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)  # noqa: S607 - the tool on PATH, by design
        except OSError:  # no git on the machine
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").splitlines()
    ram_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    cpu = models[0] if models else platform.processor() or platform.machine()
    usable = _usable_cores()
    cores = len(models) or usable
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""),
        "machine": f"{cpu}, {cores} cores{f' ({usable} usable)' if usable != cores else ''}, "
        f"{ram_kib / 2**20:.1f} GiB RAM",
    }


def stamp_line(results: dict[str, Any]) -> str:
    """The first line of every results/<name>.md: when, from which code, on what."""
    return f"Recorded {results['date']}, commit {results['commit']}, on {results['machine']}."


def write_report(json_path: Path, results: dict[str, Any], tables: list[str], *, indent: int = 2) -> Path:
    """Write `results` (which carry `stamp()`'s keys) to `json_path`, and `tables` (Markdown,
    each with its own caption) under the stamp line to the .md beside it; print the Markdown.
    Returns the .md's path."""
    missing = [key for key in STAMP_KEYS if key not in results]
    if missing:
        raise ValueError(f"results lack the stamp's {missing}: build them with **stamp()")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=indent), encoding="utf-8")
    markdown = "\n\n".join([stamp_line(results), *(table.strip("\n") for table in tables)]) + "\n"
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown, encoding="utf-8")
    print(f"\n{markdown}\n{json_path}, {md_path}")
    return md_path
