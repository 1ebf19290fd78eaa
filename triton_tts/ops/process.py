"""The ``tritonserver`` process, as serve starts it: which binary (the nvidia-pytriton
wheel's, or the machine's own on PATH), the Python backend's directory of links, the
environment, and the set-up between fork and exec (a process group of its own, death with
its parent, umask 077, a private /dev/shm).

Two wrinkles of the wheel are handled here:
- its Python-backend stub finds its libraries relative to its own place in the wheel, so
  the backend directory we hand to Triton links to the wheel's files instead of copying;
- the stub ignores PYTHONPATH and takes its packages from the first ``python3`` on PATH,
  so this environment's ``bin/`` goes first on PATH.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_tts.contract import paths
from triton_tts.ops.reaper import SHM_DIR

if TYPE_CHECKING:
    pass


PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4  # <linux/prctl.h>
# <sched.h>, <sys/mount.h>: a mount namespace (in a user namespace of its own when this
# user may not make one alone) with a private tmpfs on /dev/shm (see _private_shm).
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18


def pytriton_dir() -> Path:
    import pytriton

    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def installed_tritonserver() -> str | None:
    """A tritonserver of the machine's own (the Triton image's, on PATH), used when the
    nvidia-pytriton wheel is not installed; it brings its own backends."""
    try:
        import pytriton  # noqa: F401
    except ImportError:
        return shutil.which("tritonserver")
    return None


def tritonserver_binary() -> Path:
    installed = installed_tritonserver()
    return Path(installed) if installed else pytriton_dir() / "bin" / "tritonserver"


def backend_directory() -> Path:
    """A backend dir whose python/ entry links to the wheel's backend and matching stub."""
    wheel = pytriton_dir()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = wheel / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    python_dir = paths.cache_dir() / "backends" / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    links = {
        "libtriton_python.so": wheel / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": wheel / "backends" / "python" / "triton_python_backend_utils.py",
        "triton_python_backend_stub": stub,
    }
    for name, target in links.items():
        link = python_dir / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return python_dir.parent


def server_environment() -> dict[str, str]:
    env = dict(os.environ)
    scripts = sysconfig.get_path("scripts")  # this interpreter's bin/ (the venv's)
    env["PATH"] = os.pathsep.join([scripts, env.get("PATH", "")])
    # The stub embeds this interpreter's libpython; a Python built with a shared libpython
    # outside the loader's paths (pyenv's, say) needs its folder on LD_LIBRARY_PATH.
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and sysconfig.get_config_var("Py_ENABLE_SHARED"):
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [env.get("LD_LIBRARY_PATH"), libdir]))
    # Models size their own onnxruntime thread pools; keep OpenMP/BLAS from adding more.
    env.setdefault("OMP_NUM_THREADS", "1")
    # glibc raises its mmap threshold after large frees, so the next large buffers (latents,
    # waveforms, onnxruntime's arena chunks) come from the heap, which it never gives back:
    # one very long request left every vocoder larger for good (docs/performance.md,
    # "Memory"). A fixed threshold keeps buffers of 1 MiB and more in their own mappings,
    # returned to the system on free.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(16 << 20))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# The Python backend's shared memory, one region per stub: it starts at 1 MiB and grows by
# 1 MiB, mapping the region afresh each time and keeping every older mapping for good
# (python_backend src/shm_manager.cc), so a region that grew to 6 MiB had six mappings and
# its resident pages counted up to six times in the RSS of tritonserver and the stub, RSS
# that rose for minutes under traffic. Regions are sparse files (ftruncate), so a larger
# start costs nothing until written: most never grow, and large responses grow in few steps.
# /dev/shm must hold what is written (the chart mounts 1 GiB; Docker's default is 64 MiB).
PYTHON_SHM = {"shm-default-byte-size": 16 << 20, "shm-growth-byte-size": 16 << 20}


def dies_with_parent(parent: int, with_parent: bool, private_shm: bool = True) -> Callable[[], None]:
    """tritonserver's set-up between fork and exec: a process group of its own (the reaper
    ends it with every stub; a Ctrl-C at the terminal reaches the supervisor only, which
    drains first), and, forked from the main thread, SIGKILL when its parent dies (Linux
    sends it when the forking *thread* ends, so not from any other thread: then the
    reaper alone ends it). Then what it and its stubs create is private to this user:
    umask 077 (Triton's log, the admission ledger's files), and a /dev/shm of its own
    (private_shm)."""
    libc = ctypes.CDLL(None, use_errno=True)  # looked up before the fork
    shm_size = _shm_size() if private_shm else 0

    def setup() -> None:
        os.setpgid(0, 0)
        if with_parent:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl
                os._exit(1)
        os.umask(0o077)
        if private_shm:
            _private_shm(libc, shm_size)

    return setup


def _shm_size() -> int:
    """The size of the machine's /dev/shm, which a private one keeps (Docker's 64 MiB, the
    chart's emptyDir: the limit the operator chose)."""
    try:
        found = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return found.f_blocks * found.f_frsize


def _private_shm(libc: Any, size: int) -> bool:
    """In the forked child: a mount namespace whose /dev/shm is a fresh tmpfs, mode 0700.
    The Python backend names its regions in /dev/shm (shm_open takes no folder) and makes
    them 0644 whatever the umask; in a tmpfs only this process tree sees, no other user
    (nor another server) can open them, and they vanish with the last process of the run.
    Root makes the namespace alone; any other user inside a user namespace of its own that
    maps its ids to themselves (no privilege gained: capabilities end at exec). Where
    neither is allowed (a container's seccomp profile, say), nothing changes, and
    TritonServer.start warns: a pod's /dev/shm is already the pod's own."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNS) != 0:
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
            return False
        # A process whose ids were just changed (a start as another user) is not dumpable,
        # and its /proc/self files stay root's until exec; exec makes it dumpable anyway.
        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        try:
            # bytes and os calls only: nothing here may import (a codec, say) after the fork
            maps = (
                (b"setgroups", b"deny"),
                (b"uid_map", b"%d %d 1" % (uid, uid)),
                (b"gid_map", b"%d %d 1" % (gid, gid)),
            )
            for name, line in maps:
                fd = os.open(b"/proc/self/" + name, os.O_WRONLY)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
        except OSError:
            return False
    # Private first: a shared / would carry the new /dev/shm back to the machine's.
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    options = b"mode=0700" + (b",size=%d" % size if size else b"")
    return bool(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0)
