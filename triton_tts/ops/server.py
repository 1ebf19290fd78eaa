"""Start a real ``tritonserver`` on a model repository (:class:`TritonServer`): its
command line and keys, the start-up gate, readiness and the capacity measurement, stop.
The process itself (binary, backend links, environment, fork set-up) is
:mod:`triton_tts.ops.process`; supervision and draining, :mod:`triton_tts.ops.lifecycle`.
"""

from __future__ import annotations

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
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from triton_tts.ops.keys import ADMIN_APIS, ADMIN_HEADER, CALLER_APIS, key_headers, redacted
from triton_tts.ops.process import (
    PYTHON_SHM,
    backend_directory,
    dies_with_parent,
    installed_tritonserver,
    server_environment,
    tritonserver_binary,
)
from triton_tts.ops.reaper import SHM_DIR
from triton_tts.ops.startup_gate import GATE_MODEL, write_gate

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


# Where serve's ports listen unless told (--host): this machine only. A pod or container
# listens on 0.0.0.0 (the chart and the image say so), bounded by its NetworkPolicy.
LOCAL_HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    # Give tritonserver (and so its stubs) a /dev/shm of its own (ops/process.py, _private_shm): the Python
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
            preexec_fn=dies_with_parent(os.getpid(), main_thread, self.private_shm),  # noqa: PLW1509 - no locks taken
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
        write_gate(self.gate_repository, self.gate_release_file)

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
        from triton_tts.runtime.admission import DEFAULT_CAPACITY, Ledger
        from triton_tts.runtime.capacity import measure_capacity

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
