"""Start a real ``tritonserver`` (from the nvidia-pytriton wheel) on a model repository.

Two wrinkles of the wheel are handled here:
- its Python-backend stub finds its libraries relative to its own place in the wheel, so
  the backend directory we hand to Triton links to the wheel's files instead of copying;
- the stub ignores PYTHONPATH and takes its packages from the first ``python3`` on PATH,
  so this environment's ``bin/`` goes first on PATH.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from triton_tts import paths

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 300.0  # warm-up of every model happens before Triton reports ready
STOP_TIMEOUT_S = 30.0


def pytriton_dir() -> Path:
    import pytriton

    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def tritonserver_binary() -> Path:
    return pytriton_dir() / "bin" / "tritonserver"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class TritonServer:
    """A tritonserver child process; use as a context manager or call start()/stop()."""

    model_repository: Path
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_config_name: str | None = None
    log_verbose: int = 0
    extra_args: list[str] = field(default_factory=list)
    log_file: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"localhost:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"localhost:{self.grpc_port}"

    def command(self) -> list[str]:
        cmd = [
            str(tritonserver_binary()),
            f"--model-repository={Path(self.model_repository).resolve()}",
            f"--backend-directory={backend_directory()}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--log-verbose={self.log_verbose}",
            "--exit-timeout-secs=20",
            "--strict-readiness=true",
        ]
        if self.model_config_name:
            cmd.append(f"--model-config-name={self.model_config_name}")
        return cmd + list(self.extra_args)

    def start(self) -> TritonServer:
        log.info("starting %s", " ".join(self.command()))
        out = open(self.log_file, "ab") if self.log_file else None  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            self.command(), env=server_environment(), stdout=out, stderr=subprocess.STDOUT if out else None
        )
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        import tritonclient.http as httpclient

        deadline = time.monotonic() + timeout
        client = httpclient.InferenceServerClient(self.http_url)
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"tritonserver exited with code {self.process.returncode}")
                try:
                    if client.is_server_ready():
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.5)
        finally:
            client.close()
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f} s")

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGINT)  # Triton drains in-flight requests on SIGINT
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def default_voice_server(
    repo: Path | None = None, log_file: Path | None = None, voice_dir: Path | Sequence[Path] | None = None
) -> Iterator[TritonServer]:
    """A voice (default: the bundled one, exported if needed) served on free ports until exit,
    from ``repo`` or a temporary repository built for it."""
    import tempfile

    from triton_tts.repository import build_repository, ensure_default_voice

    with tempfile.TemporaryDirectory(prefix="triton-tts-") as scratch:
        target = repo or Path(scratch) / "model_repository"
        built = build_repository(voice_dir or ensure_default_voice(), target)
        with TritonServer(
            built, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), log_file=log_file
        ) as server:
            yield server
