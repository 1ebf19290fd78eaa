"""Start a real ``tritonserver`` (from the nvidia-pytriton wheel) on a model repository.

Two wrinkles of the wheel are handled here:
- its Python-backend stub finds its libraries relative to its own place in the wheel, so
  the backend directory we hand to Triton links to the wheel's files instead of copying;
- the stub ignores PYTHONPATH and takes its packages from the first ``python3`` on PATH,
  so this environment's ``bin/`` goes first on PATH.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from triton_tts.contract import paths
from triton_tts.ops.reaper import SHM_DIR

if TYPE_CHECKING:
    from triton_tts.build.model_configs import BuildOptions
    from triton_tts.ops.watchdog import Watchdog

log = logging.getLogger(__name__)

# Triton's log line for a model it could not load; newlines inside the message are escaped.
LOAD_FAILED = re.compile(r"failed to load '([^']+)' version \d+: (.+?)(?:\\n|\"?$)", re.MULTILINE)
# "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from X failed:Protobuf parsing failed."
ONNXRUNTIME_ERROR = re.compile(r"\[ONNXRuntimeError\] : \d+ : (\w+) : (?:Load model from .* failed:)?(.*)")
READY_TIMEOUT_S = 300.0  # warm-up of every model happens before Triton reports ready
STOP_TIMEOUT_S = 30.0
REAPER_EXIT_S = 10.0  # the reaper's own end, once told (it kills a group and removes files)
MEASURE_ATTEMPTS = 3  # of a voice's capacity measurement, a heal apart (a stub killed meanwhile)
MEASURE_HEAL_WAIT_S = 120.0  # for the watchdog to heal before a measurement is tried again

# The start-up gate: a model in a repository of the run's own (the served repository is
# not touched: it may be read-only or remote) that fails to load until the supervisor's
# start-up is done, so that Triton's /v2/health/ready (--strict-readiness: every model
# known to the repository manager READY) stays false while it measures itself. Its load
# failing at start must not end Triton, so a gated start runs --exit-on-error=false;
# wait_ready() still ends the start at once on any other model's failure. Released, it is
# loaded again and READY. Without a supervisor (tritonserver alone, the chart's plain
# image) there is no gate: nothing waits for what is not there. docs/deployment.md,
# "Readiness and supervision".
GATE_MODEL = "triton_tts_startup"
GATE_WAITING = "waiting for triton-tts serve's start-up (its capacity measurement)"
GATE_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_BOOL, dims: [1] }]
output [{ name: "OUT", data_type: TYPE_BOOL, dims: [1] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
parameters { key: "release_file" value: { string_value: "%s" } }
"""
GATE_CODE = f"""import json
import os


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        if not os.path.exists(parameters["release_file"]["string_value"]):
            raise RuntimeError("{GATE_WAITING}")

    def execute(self, requests):
        raise RuntimeError("the start-up gate takes no requests")
"""
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4  # <linux/prctl.h>
# <sched.h>, <sys/mount.h>: a mount namespace (in a user namespace of its own when this
# user may not make one alone) with a private tmpfs on /dev/shm (see _private_shm).
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18
# Where serve's ports listen unless told (--host): this machine only. A pod or container
# listens on 0.0.0.0 (the chart and the image say so), bounded by its NetworkPolicy.
LOCAL_HOST = "127.0.0.1"

# Triton's API groups (--http-restricted-api, --grpc-restricted-protocol), split between
# the two keys (docs/api.md, "Keys"). Callers' APIs take the API key: inference, and what
# clients and perf_analyzer read around it: metadata, the model config (the voices list is
# in tts's config) and the statistics (counts and times, no secret: the metrics port shows
# the same; perf_analyzer aborts without them). Everything that changes state takes the
# admin key. Health stays open for probes and load balancers.
CALLER_APIS = ("inference", "metadata", "model-config", "statistics")
ADMIN_APIS = ("model-repository", "shared-memory", "trace", "logging")
# A flag's value after one of these is a key: the command line is logged without it.
SECRET_FLAGS = ("--http-restricted-api=", "--grpc-restricted-protocol=")


def redacted(command: Sequence[str]) -> str:
    """A command line fit for a log: the restricted APIs' header values (the keys) hidden."""
    shown = []
    for arg in command:
        apis, colon, header = arg.partition(":")
        if arg.startswith(SECRET_FLAGS) and colon and "=" in header:
            arg = f"{apis}:{header.partition('=')[0]}=<redacted>"  # noqa: PLW2901 - the shown form
        shown.append(arg)
    return " ".join(shown)


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


def key_headers(api_key: str | None, admin_key: str | None, protocol: str = "http") -> dict[str, str]:
    """The headers (gRPC: Triton's prefixed metadata) that carry the API key and the admin
    key to a server started with them; either may be None."""
    from triton_tts.client.tts_client import GRPC_HEADER_PREFIX, auth_headers
    from triton_tts.ops.watchdog import ADMIN_HEADER

    found = dict(auth_headers(api_key, "grpc" if protocol == "grpc" else "http") or {})
    if admin_key:
        found[(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER] = admin_key
    return found


@dataclass
class TritonServer:
    """A tritonserver child process; use as a context manager or call start()/stop()."""

    model_repository: Path | str
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_config_name: str | None = None
    log_verbose: int = 0
    extra_args: list[str] = field(default_factory=list)
    log_file: Path | None = None
    # Model control (load/unload) for the watchdog only: explicit mode; it and every other
    # admin API (ADMIN_APIS) behind this key.
    admin_key: str | None = None
    # Callers' APIs (CALLER_APIS) behind this key, as ``Authorization: Bearer <key>``.
    api_key: str | None = None
    # Per start: what opens tts_chunk and its stages to the server's own requests only.
    internal_token: str | None = None
    process: subprocess.Popen[bytes] | None = None
    # The gRPC endpoint models send their priority requests to (triton_tts/runtime/loopback.py):
    # None, this server's own; "" names none (first chunks then go without priority).
    loopback_url: str | None = None
    # Per start: holds the file whose existence tells streams to stop pacing (pacing.py)
    # and the admission ledger (admission.py).
    run_dir: Path | None = None
    # Once ready, measure each voice's capacity for admission (a burst of sentences).
    measure_capacity: bool = True
    capacity: dict[str, tuple[float, dict[str, float]]] = field(default_factory=dict)
    # Keep Triton's own readiness false until the measurement is done (the start-up gate,
    # GATE_MODEL). None: when it can be (model control: an admin_key) and there is one.
    hold_readiness: bool | None = None
    # Per start: the prefix of the Python backend's shared-memory regions (the reaper
    # removes this run's), and the reaper (triton_tts/ops/reaper.py).
    shm_prefix: str | None = None
    reaper: subprocess.Popen[bytes] | None = None
    # The watchdog healing this server (set by supervised()): the measurement waits for it.
    watchdog: Watchdog | None = None
    # The address Triton's HTTP, gRPC and metrics endpoints listen on (serve --host).
    host: str = LOCAL_HOST
    # Give tritonserver (and so its stubs) a /dev/shm of its own (_private_shm): the Python
    # backend's regions, which hold callers' text and the internal token, are created
    # world-readable (0644, boost's default, set with fchmod: no umask narrows it).
    private_shm: bool = True

    @property
    def gated(self) -> bool:
        hold = self.hold_readiness
        return bool(self.admin_key and self.measure_capacity) if hold is None else hold

    @property
    def gate_repository(self) -> Path | None:
        return self.run_dir / "startup_repository" if self.run_dir is not None else None

    @property
    def gate_release_file(self) -> Path | None:
        return self.run_dir / "started" if self.run_dir is not None else None

    @property
    def admission_dir(self) -> Path | None:
        return self.run_dir / "admission" if self.run_dir is not None else None

    @property
    def release_file(self) -> Path | None:
        return self.run_dir / "release-streams" if self.run_dir is not None else None

    def release_streams(self) -> None:
        """Tell tts_stream's paced streams to send the rest of their audio at once (a
        stop is coming: none should hold it for the length of its playback)."""
        if self.release_file is not None:
            self.release_file.touch()

    def internal_parameters(self) -> dict[str, str]:
        """The request parameters that open tts_chunk and its stages (triton_tts/runtime/internal.py)
        on this start of the server; empty before a start."""
        from triton_tts.runtime import internal

        return internal.parameters(self.internal_token or "")

    def headers(self, protocol: str = "http") -> dict[str, str]:
        """What the product's own calls to this server carry (see key_headers)."""
        return key_headers(self.api_key, self.admin_key, protocol)

    @property
    def local_host(self) -> str:
        """Where this machine reaches the ports: the host itself, unless it names every
        interface."""
        return "localhost" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104 - compared, not bound

    @property
    def http_url(self) -> str:
        return f"{self.local_host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.local_host}:{self.grpc_port}"

    def command(self) -> list[str]:
        repository = str(self.model_repository)  # s3://, gs://, as:// go to Triton as they are
        if "://" not in repository:
            repository = str(Path(repository).resolve())
        cmd = [str(tritonserver_binary()), f"--model-repository={repository}"]
        if not installed_tritonserver():
            cmd.append(f"--backend-directory={backend_directory()}")
        cmd += [
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            f"--log-verbose={self.log_verbose}",
            "--strict-readiness=true",
        ]
        if not any(a.startswith("--exit-timeout-secs") for a in self.extra_args):
            cmd.append("--exit-timeout-secs=20")
        python_config = {
            **PYTHON_SHM,
            **({"shm-region-prefix-name": self.shm_prefix} if self.shm_prefix else {}),
        }
        cmd += [
            f"--backend-config=python,{name}={value}"
            for name, value in python_config.items()
            if not any(a.startswith(f"--backend-config=python,{name}=") for a in self.extra_args)
        ]
        if self.gated and self.gate_repository is not None:
            cmd.append(f"--model-repository={self.gate_repository}")
            if not any(a.startswith("--exit-on-error") for a in self.extra_args):
                cmd.append("--exit-on-error=false")
        if self.model_config_name:
            cmd.append(f"--model-config-name={self.model_config_name}")
        if self.admin_key:
            from triton_tts.ops.watchdog import ADMIN_HEADER

            restricted = f"{','.join(ADMIN_APIS)}:{ADMIN_HEADER}={self.admin_key}"
            cmd += [
                "--model-control-mode=explicit",
                "--load-model=*",
                f"--http-restricted-api={restricted}",
                f"--grpc-restricted-protocol={restricted}",
            ]
        if self.api_key:
            from triton_tts.client.tts_client import API_KEY_HEADER

            # Triton compares the header's whole value: "Bearer <key>".
            restricted = f"{','.join(CALLER_APIS)}:{API_KEY_HEADER}=Bearer {self.api_key}"
            cmd += [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]
        return cmd + list(self.extra_args)

    def start(self) -> TritonServer:
        import tempfile

        from triton_tts.client.tts_client import API_KEY_ENV
        from triton_tts.runtime import internal
        from triton_tts.runtime.admission import ADMISSION_DIR_ENV
        from triton_tts.runtime.loopback import GRPC_URL_ENV
        from triton_tts.runtime.pacing import RELEASE_FILE_ENV

        self.run_dir = Path(tempfile.mkdtemp(prefix="triton-tts-run-"))
        # The run's own regions, told apart from other servers' on the machine.
        self.shm_prefix = f"triton_tts_{os.getpid()}_{secrets.token_hex(4)}_"
        if self.gated:
            self._write_gate()
        log.info("starting %s", redacted(self.command()))
        env = server_environment()
        # The models' view of this server: its own gRPC endpoint (triton_tts/runtime/loopback.py)
        # and the file that ends pacing when it stops (triton_tts/runtime/pacing.py).
        env[GRPC_URL_ENV] = self.grpc_url if self.loopback_url is None else self.loopback_url
        env[RELEASE_FILE_ENV] = str(self.release_file)
        env[ADMISSION_DIR_ENV] = str(self.admission_dir)
        self.internal_token = secrets.token_urlsafe(24)
        env[internal.TOKEN_ENV] = self.internal_token
        # The loopback's own calls (triton_tts/runtime/loopback.py) carry the API key.
        if self.api_key:
            env[API_KEY_ENV] = self.api_key
        else:
            env.pop(API_KEY_ENV, None)
        out = open(self.log_file, "ab") if self.log_file else None  # noqa: SIM115 - owned by the process
        main_thread = threading.current_thread() is threading.main_thread()
        self.process = subprocess.Popen(
            self.command(),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            preexec_fn=_dies_with_parent(os.getpid(), main_thread, self.private_shm),  # noqa: PLW1509 - no locks taken
        )
        self.reaper = self._start_reaper()
        if self.private_shm and self.shm_dir == SHM_DIR:
            log.warning(
                "tritonserver shares this machine's /dev/shm (no mount namespace could be made: "
                "fine in a pod, whose /dev/shm is its own); elsewhere other local users can read "
                "its Python-backend regions (docs/deployment.md, 'Private to the serving user')"
            )
        return self

    @property
    def shm_dir(self) -> Path:
        """Where this run's Python-backend regions are: tritonserver's own /dev/shm, seen
        through /proc (its mount namespace's), or the machine's where it has none."""
        if self.process is None or self.process.poll() is not None:
            return SHM_DIR
        own = Path(f"/proc/{self.process.pid}/root") / SHM_DIR.relative_to("/")
        try:
            return own if own.stat().st_dev != SHM_DIR.stat().st_dev else SHM_DIR
        except OSError:
            return SHM_DIR

    def _write_gate(self) -> None:
        assert self.gate_repository is not None and self.gate_release_file is not None
        model = self.gate_repository / GATE_MODEL
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(GATE_CONFIG % self.gate_release_file, encoding="utf-8")
        (model / "1" / "model.py").write_text(GATE_CODE, encoding="utf-8")

    def _start_reaper(self) -> subprocess.Popen[bytes]:
        """triton_tts/ops/reaper.py, watching this process through a pipe only it writes: when
        this process ends, however, it kills tritonserver's group (stubs included) and
        removes the run's shared memory and run folder."""
        assert self.process is not None and self.shm_prefix is not None
        command = [sys.executable, "-m", "triton_tts.ops.reaper", "--group", str(self.process.pid)]
        command += ["--shm-prefix", self.shm_prefix, "--run-dir", str(self.run_dir)]
        # its own session: a Ctrl-C at the terminal is for this process, not for it
        return subprocess.Popen(command, stdin=subprocess.PIPE, start_new_session=True)

    def _end_reaper(self) -> None:
        """Tell the reaper tritonserver has stopped (it removes what is left) and wait for it."""
        reaper, self.reaper = self.reaper, None
        if reaper is None:
            return
        if reaper.stdin is not None:
            reaper.stdin.close()
        try:
            reaper.wait(REAPER_EXIT_S)
        except subprocess.TimeoutExpired:
            log.warning("the reaper (pid %s) did not end in %.0f s", reaper.pid, REAPER_EXIT_S)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Return once Triton is ready (every model loaded and warmed up), its capacity
        measured and, on a gated start, the gate released. A model that fails to load ends
        the wait at once with a RuntimeError naming the model and the cause: Triton exits
        then (--exit-on-error, its default), or, told not to, stays up unready; one whose
        stub died while it loaded is loaded again by the watchdog, when there is one."""
        import tritonclient.http as httpclient

        deadline = time.monotonic() + timeout
        client = httpclient.InferenceServerClient(self.http_url)
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    exited = f"tritonserver exited (code {self.process.returncode}) before it was ready"
                    if self.process.returncode < 0:  # a signal: 2.51 crashes when a stub dies in warm-up
                        raise TritonCrashed(exited)
                    failure = self._load_failure()
                    raise RuntimeError(f"{exited}: {failure}" if failure else exited)
                try:
                    ready = self._models_ready(client) if self.gated else client.is_server_ready()
                    failure = None if ready else self._unavailable_model(client)
                except Exception:  # not listening yet
                    ready, failure = False, None
                if ready and self._metrics_listening():
                    if self.measure_capacity:
                        self._measure_capacity()
                    if self.gated:
                        self._release_gate(client, deadline)
                    return
                if failure and self.gated:  # Triton stays up (the gate's doing): say why, as if it exited
                    raise RuntimeError(
                        f"tritonserver could not load its models: {self._load_failure() or failure}"
                    )
                if failure:
                    raise RuntimeError(failure)
                time.sleep(0.5)
        finally:
            client.close()
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f} s")

    def _models_ready(self, client: Any) -> bool:
        """Every model but the gate READY (a gated start: Triton's own readiness waits for
        the gate); an ensemble whose step failed shows no state at all."""
        index = client.get_model_repository_index(headers=self.headers())
        return all(m.get("state") == "READY" for m in index if m.get("name") != GATE_MODEL)

    def _release_gate(self, client: Any, deadline: float) -> None:
        """Load the gate, now that its file says start-up is done: Triton turns ready."""
        assert self.gate_release_file is not None
        self.gate_release_file.touch()
        for attempt in itertools.count(1):
            try:
                client.load_model(GATE_MODEL, headers=self.headers())
            except Exception as err:  # its stub killed while it loads, say: load it again
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"the start-up gate did not load: {err}") from err
                log.warning("start-up gate: load %d failed (%s); again", attempt, err)
                time.sleep(1.0)
                continue
            if client.is_server_ready():
                return
            time.sleep(0.5)  # another model went down meanwhile: the watchdog heals it

    def _measure_capacity(self) -> None:
        """Each voice's capacity, measured now that the server is warm, into the ledger the
        models admit by (triton_tts/runtime/admission.py); a server with no tts model has none. A
        voice whose measurement fails (a stub killed meanwhile) is measured again once the
        watchdog has healed; one that still fails keeps the ledger's default capacity,
        which admission corrects online, with a warning: start-up goes on either way."""
        from triton_tts.runtime.admission import DEFAULT_CAPACITY, Ledger, measure_capacity

        try:
            voices = self._chunk_voices()
        except Exception as err:  # the supervisor's start-up survives anything here
            log.warning("capacity not measured (voices unreadable: %s); admission learns it online", err)
            return
        assert self.admission_dir is not None
        ledger = Ledger(self.admission_dir)
        for voice, spec in voices.items():
            for attempt in range(1, MEASURE_ATTEMPTS + 1):
                try:
                    measured = measure_capacity(
                        self.grpc_url,
                        {voice: spec},
                        headers=self.headers("grpc"),
                        parameters=self.internal_parameters(),
                    )[voice]
                    break
                except Exception as err:
                    log.warning(
                        "capacity of voice %s: measurement %d of %d failed (%s)",
                        voice,
                        attempt,
                        MEASURE_ATTEMPTS,
                        str(err).splitlines()[0] if str(err) else type(err).__name__,
                    )
                    self._wait_healed()
            else:
                log.warning(
                    "capacity of voice %s not measured: admission starts from %.1f s of audio "
                    "per second and corrects it online",
                    voice,
                    DEFAULT_CAPACITY,
                )
                continue
            audio_per_s, stages = measured
            self.capacity[voice] = measured
            ledger.set_capacity(voice, audio_per_s, stages)
            log.info(
                "capacity of voice %s: %.1f s of audio per second (%s)",
                voice,
                audio_per_s,
                ", ".join(f"{stage} {value:.1f} per instance" for stage, value in stages.items()),
            )

    def _chunk_voices(self) -> dict[str, tuple[str, bool, list[str]]]:
        """What measure_capacity takes: each chunk voice's tts_chunk model, whether it is
        Chinese, and its stage models; none without a tts model."""
        import tritonclient.http as httpclient

        from triton_tts.client.voices import CHUNKS_KIND, VoiceInfo
        from triton_tts.text.frontend import is_chinese

        client = httpclient.InferenceServerClient(self.http_url)
        try:
            if not client.is_model_ready("tts", headers=self.headers()):
                return {}
            params = client.get_model_config("tts", headers=self.headers()).get("parameters", {})
        finally:
            client.close()
        return {
            v.name: (
                v.model,
                is_chinese(v.language),
                [v.stage_model(s) for s in ("preprocess", "acoustic", "vocoder")],
            )
            for v in VoiceInfo.list_from_json(params["voices"]["string_value"])
            if v.kind == CHUNKS_KIND  # an XTTS voice's model bounds its own work
        }

    def _wait_healed(self) -> None:
        """Until the watchdog has healed what died (without one: a moment)."""
        watchdog = self.watchdog
        time.sleep(1.0)  # a dead stub is seen within the watchdog's poll
        if watchdog is None:
            return
        deadline = time.monotonic() + MEASURE_HEAL_WAIT_S
        while not watchdog.settled() and time.monotonic() < deadline:
            time.sleep(0.2)

    def _metrics_listening(self) -> bool:
        """Triton starts its metrics endpoint last, after HTTP answers ready: a caller that
        scrapes right after wait_ready() would find nothing listening yet."""
        if any(a in ("--allow-metrics=false", "--allow-metrics=0") for a in self.extra_args):
            return True
        import urllib.request

        url = f"http://{self.local_host}:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def _load_failure(self) -> str | None:
        """Why Triton gave up at start: the model its log says failed to load, or else (its
        log went to the terminal) the first graph in a local repository that does not load."""
        if self.log_file is not None and Path(self.log_file).exists():
            text = Path(self.log_file).read_text(encoding="utf-8", errors="replace")
            found = [f for f in LOAD_FAILED.findall(text) if f[0] != GATE_MODEL]
            if found:  # the log is appended to: the last start's failure is the last one
                model, cause = found[-1]
                return f"model '{model}' failed to load: {cause}"
        repository = str(self.model_repository)
        if "://" in repository:
            return None
        if not Path(repository).is_dir():
            return f"no model repository at {repository} (triton-tts build-repo makes one)"
        for graph in sorted(Path(repository).glob("*/*/*.onnx")):
            error = onnx_load_error(graph)
            if error:
                model = graph.parent.parent.name
                return (
                    f"model '{model}' failed to load: {graph} is not a loadable ONNX model ({error}); "
                    "build the repository again from a sound voice folder (triton-tts build-repo)"
                )
        return None

    def _unavailable_model(self, client: Any) -> str | None:
        """A live, unready Triton (started with --exit-on-error=false): the model that failed.
        Not failures: the start-up gate, and a model whose stub died while it loaded (or one
        that depends on it) when a watchdog is there to load it again."""
        from triton_tts.ops.watchdog import STUB_DIED

        failed = [
            m
            for m in client.get_model_repository_index(headers=self.headers())
            if m.get("state") == "UNAVAILABLE"
            and m.get("reason") not in (None, "", "unloaded")
            and m.get("name") != GATE_MODEL
        ]
        if self.watchdog is not None:
            healable = [m for m in failed if STUB_DIED in m["reason"]]
            for model in healable:
                self.watchdog.request_heal(model["name"])
            if healable:
                failed = [m for m in failed if m not in healable and "depends on" not in m["reason"]]
        if not failed:
            return None
        # an ensemble fails because a model it depends on did: name that model
        first = min(failed, key=lambda m: "depends on" in m["reason"])
        return f"model '{first['name']}' failed to load: {first['reason'].splitlines()[0]}"

    def stop(self) -> int | None:
        try:
            if self.process is None or self.process.poll() is not None:
                return None if self.process is None else self.process.returncode
            self.release_streams()
            self.process.send_signal(signal.SIGINT)  # Triton drains in-flight requests on SIGINT
            try:
                return self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()
        finally:
            if self.run_dir is not None and (self.process is None or self.process.poll() is not None):
                shutil.rmtree(self.run_dir, ignore_errors=True)
                self.run_dir = None
            if self.process is None or self.process.poll() is not None:
                self._end_reaper()

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


class TritonCrashed(RuntimeError):
    """tritonserver ended by a signal before it was ready (Triton 2.51 dies of SIGSEGV when
    a stub is killed in the middle of its warm-up): worth a fresh start."""


def onnx_load_error(path: Path) -> str | None:
    """Why onnxruntime cannot load the graph at ``path`` (a corrupt or truncated file), or None."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime's own exception types are not importable by name
        lines = str(err).strip().splitlines() or [type(err).__name__]
        match = ONNXRUNTIME_ERROR.match(lines[0])
        return f"{match[1]}: {match[2]}" if match else lines[0]
    return None


@contextmanager
def default_voice_server(
    repo: Path | None = None,
    log_file: Path | None = None,
    voice_dir: Path | Sequence[Path] | None = None,
    options: BuildOptions | None = None,
) -> Iterator[TritonServer]:
    """A voice (default: the bundled one, exported if needed) served on free ports until exit,
    from ``repo`` or a temporary repository built for it with ``options`` (default: the
    defaults)."""
    import tempfile

    from triton_tts.ops.repository import build_repository, ensure_default_voice

    with tempfile.TemporaryDirectory(prefix="triton-tts-") as scratch:
        target = repo or Path(scratch) / "model_repository"
        built = build_repository(voice_dir or ensure_default_voice(), target, options)
        with TritonServer(
            built, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), log_file=log_file
        ) as server:
            yield server


DRAIN_TIMEOUT_S = 30.0  # the chart's grace period covers it, its preStop and Triton's exit
IN_FLIGHT_METRIC = "triton_tts_requests_in_flight"  # triton_tts.runtime.metrics.IN_FLIGHT


def requests_in_flight(metrics_url: str) -> int | None:
    """tts and tts_stream requests started and not finished, summed over instances, from
    Triton's metrics port; None if it cannot be read."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:  # noqa: S310 - an http:// URL this code builds
            text = response.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(IN_FLIGHT_METRIC + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return round(total)


def drain(server: TritonServer, timeout_s: float, poll_s: float = 0.2) -> int | None:
    """Wait until no tts or tts_stream request is in flight (at most ``timeout_s``): Triton's
    own stop refuses every new inference at once, BLS chunk requests included, so a
    multi-chunk request in flight would lose its later chunks. Returns what is left in
    flight (0: drained; None: the count could not be read)."""
    server.release_streams()  # paced streams send the rest now
    url = f"http://{server.local_host}:{server.metrics_port}/metrics"
    deadline = time.monotonic() + timeout_s
    while True:
        left = requests_in_flight(url)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)


@contextmanager
def supervised(server: TritonServer, health_port: int | None) -> Iterator[Watchdog]:
    """Watch a started server's Python-backend instances and heal dead ones (its
    ``admin_key`` must be set), from start-up on: enter it before wait_ready(), whose
    capacity measurement then waits for heals; with ``health_port``, serve /ready and
    /live there."""
    from triton_tts.ops.watchdog import HealthServer, Watchdog

    if server.process is None or not server.admin_key:
        raise RuntimeError("supervised() needs a started server with an admin_key")
    process = server.process
    watchdog = Watchdog(process.pid, server.http_url, server.headers(), shm_dir=server.shm_dir).start()
    server.watchdog = watchdog
    health = (
        HealthServer(health_port, watchdog, lambda: process.poll() is None, server.host).start()
        if health_port is not None
        else None
    )
    try:
        yield watchdog
    finally:
        if health is not None:
            health.stop()
        watchdog.stop()
        server.watchdog = None


def _dies_with_parent(parent: int, with_parent: bool, private_shm: bool = True) -> Callable[[], None]:
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
