"""What is left of a tritonserver run once its supervisor is gone, removed.

``triton-tts serve`` (triton_tts/ops/server.py) starts tritonserver in a process group of its
own and, next to it, this small process::

    python -m triton_tts.ops.reaper --group PGID --shm-prefix PREFIX --run-dir DIR

It blocks reading its stdin, a pipe whose only writer is the supervisor: the kernel closes
it when the supervisor exits for any reason, ``kill -9`` included (no pid to poll, none
that can be reused). Then it kills the process group (tritonserver and its Python-backend
stubs), removes the run's Python-backend shared-memory regions (each run has its own
region prefix) and the run folder. A supervisor that stopped tritonserver itself closes
the pipe too: then the group is gone already and only leftovers are removed.

It imports nothing of the project (it must start fast and cannot break with it) and runs
in a session of its own, so a Ctrl-C at the terminal, meant for the supervisor, does not
reach it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")  # noqa: S108 - where POSIX shared memory (shm_open) lives on Linux


def kill_group(group: int) -> None:
    """SIGKILL every process of ``group``; none left is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def remove_regions(prefix: str, shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove the shared-memory regions whose names start with ``prefix``; their names."""
    if not prefix:  # an empty prefix would name every region on the machine
        raise ValueError("an empty shared-memory prefix")
    return [region.name for region in shm_dir.glob(f"{prefix}*") if remove_region(region.name, shm_dir)]


def remove_region(name: str, shm_dir: Path = SHM_DIR) -> bool:
    """Unlink one region by name (a process that maps it keeps its pages until it unmaps)."""
    if not name or "/" in name:
        return False
    try:
        (shm_dir / name).unlink()
    except OSError:
        return False
    return True


def reap(group: int, shm_prefix: str, run_dir: Path | None) -> None:
    kill_group(group)
    removed = remove_regions(shm_prefix)
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
    if removed:
        log.info("reaper: removed %d shared-memory region(s) of %s*", len(removed), shm_prefix)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, required=True, help="tritonserver's process group")
    parser.add_argument("--shm-prefix", required=True, help="the run's Python-backend region prefix")
    parser.add_argument("--run-dir", type=Path, help="the run folder to remove")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # A stop meant for the supervisor (Ctrl-C, SIGTERM to its group) is not ours: the
    # supervisor's own end closes the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass  # nothing is sent: only the end matters
    reap(args.group, args.shm_prefix, args.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
