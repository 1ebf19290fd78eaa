"""The stamp every benchmark result carries: date, commit (dirty or not) and machine."""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path

from triton_tts.onnx_session import available_cores


def stamp() -> dict[str, str]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    models = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    meminfo = Path("/proc/meminfo").read_text(encoding="utf-8").splitlines()
    ram_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    cpu = models[0] if models else platform.processor() or platform.machine()
    cores = len(models) or available_cores()
    usable = available_cores()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""),
        "machine": f"{cpu}, {cores} cores{f' ({usable} usable)' if usable != cores else ''}, "
        f"{ram_kib / 2**20:.1f} GiB RAM",
    }
