"""`triton-tts serve` as users run it: ready only after warm-up, requests in flight at
SIGTERM/SIGINT finish before it exits 0, a crash at shutdown is caught; metrics."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
import riva.client as riva_client
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    DETERMINISTIC,
    assert_says_as_long,
    model_counts,
    paragraph_chunks,
    shutdown_problems,
    stream_paragraph_chunks,
    synthesize,
    tts_inputs,
    wait_until,
)
from triton_tts.build.model_configs import parse
from triton_tts.ops.keys import ADMIN_HEADER
from triton_tts.ops.server import READY_TIMEOUT_S, TritonServer, free_port

pytestmark = pytest.mark.server  # its own servers (module fixtures)

STOP_TIMEOUT_S = 300  # a deadline for a hang; serve's own bound is its drain plus Triton's exit timeout
WARMUP_LINE = re.compile(rb"model '([^']+)' instance (\S+) is running warmup sample")


@dataclass
class Serve:
    """`triton-tts serve` in a child process, Triton's log in its own file."""

    process: subprocess.Popen[str]
    out: IO[str]
    repo: Path
    log: Path
    http_port: int
    grpc_port: int
    health_port: int
    admin_key: str  # serve closes Triton's admin APIs (statistics among them) with it

    @property
    def admin(self) -> dict[str, str]:
        """The header that opens Triton's admin APIs on this serve."""
        return {ADMIN_HEADER: self.admin_key}

    @classmethod
    def start(cls, voice_dir: Path, tmp_path: Path, *extra: str) -> Serve:
        ports = [free_port() for _ in range(4)]
        repo, log = tmp_path / "repo", tmp_path / "tritonserver.log"
        out = (tmp_path / "serve.out").open("w", encoding="utf-8")
        env = dict(os.environ)
        env.setdefault("TRITON_TTS_ADMIN_KEY", f"test-admin-{uuid.uuid4().hex}")
        process = subprocess.Popen(
            [
                sys.executable, "-m", "triton_tts.cli", "serve", "--voice", str(voice_dir),
                "--model-repository", str(repo), "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
                "--metrics-port", str(ports[2]), "--health-port", str(ports[3]),
                f"--triton-arg=--log-file={log}", *extra,
            ],
            stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        return cls(process, out, repo, log, ports[0], ports[1], ports[3], env["TRITON_TTS_ADMIN_KEY"])

    def status(self, url: str) -> int | None:
        """The HTTP status of GET ``url``; None while nothing answers. Fails the test at once
        if serve has exited."""
        assert self.process.poll() is None, f"serve exited early:\n{self.output()}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return err.code
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def wait_ready(self) -> None:
        ready = f"http://localhost:{self.http_port}/v2/health/ready"
        wait_until(lambda: self.status(ready) == 200, READY_TIMEOUT_S, "serve to be ready")

    def stop(self, stop_signal: signal.Signals = signal.SIGINT) -> int:
        self.process.send_signal(stop_signal)
        return self.process.wait(STOP_TIMEOUT_S)

    def output(self) -> str:
        return Path(self.out.name).read_text(encoding="utf-8")

    def triton_log(self) -> str:
        """Triton's log (--log-file); its stderr (signals, stack traces) is in output()."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.out.close()


def test_ready_only_after_every_model_has_warmed_up(voice_dir: Path, tmp_path: Path) -> None:
    """Readiness is polled while serve starts; the moment it first says 200, the log's length
    is noted. Every instance of every model configured with warm-up samples logged its
    warm-up (Triton's --log-verbose 1 line) before that point in the log. The gateway that
    serve runs (``--gateway-port``, as ``make serve`` does) speaks once serve says ready,
    and stops with it, as does its Riva door (``--riva-port``)."""
    gateway_port, riva_port = free_port(), free_port()
    serve = Serve.start(
        voice_dir,
        tmp_path,
        "--log-verbose",
        "1",
        "--gateway-port",
        str(gateway_port),
        "--riva-port",
        str(riva_port),
    )
    gateway = f"http://localhost:{gateway_port}"
    try:
        triton = f"http://localhost:{serve.http_port}/v2/health/ready"
        health = f"http://localhost:{serve.health_port}/ready"
        # the log's length when readiness first said 200 (never 0: Triton logs at start)
        at_ready = wait_until(
            lambda: serve.status(triton) == 200 and serve.log.stat().st_size,
            READY_TIMEOUT_S, "Triton's readiness", poll_s=0.02,
        )  # fmt: skip
        at_health = wait_until(
            lambda: serve.status(health) == 200 and serve.log.stat().st_size,
            READY_TIMEOUT_S, "the watchdog's readiness", poll_s=0.02,
        )  # fmt: skip
        wait_until(
            lambda: "triton-tts is ready (warm-up done)" in serve.output(), 60, "serve's ready message"
        )
        assert serve.status(f"{gateway}/health/ready") == 200
        speech = urllib.request.Request(
            f"{gateway}/v1/audio/speech",
            data=json.dumps({"model": "tts-1", "input": "Ready.", "response_format": "wav"}).encode(),
        )
        with urllib.request.urlopen(speech, timeout=120) as response:
            assert response.read()[:4] == b"RIFF"
        riva = riva_client.SpeechSynthesisService(riva_client.Auth(uri=f"localhost:{riva_port}"))
        assert len(riva.synthesize("Ready.", sample_rate_hz=16000).audio) > 8000  # serve's Riva door
        returncode = serve.stop()
        log = serve.log.read_bytes()
        output = serve.output()
    finally:
        serve.close()
    with pytest.raises(urllib.error.URLError):  # the gateway stopped with serve
        urllib.request.urlopen(f"{gateway}/health/live", timeout=5)
    configured = {}
    for config_file in serve.repo.glob("*/config.pbtxt"):
        config = parse(config_file.read_text(encoding="utf-8"))
        if config.model_warmup:
            configured[config.name] = sum(group.count or 1 for group in config.instance_group) or 1
    assert {"preprocess", "acoustic", "vocoder"} <= set(configured), configured
    warmed: dict[str, set[bytes]] = {}
    last_warmup_end = 0
    for line in WARMUP_LINE.finditer(log):
        warmed.setdefault(line[1].decode(), set()).add(line[2])
        last_warmup_end = max(last_warmup_end, line.end())
    assert {model: len(instances) for model, instances in warmed.items()} == configured
    assert last_warmup_end <= at_ready <= at_health, (last_warmup_end, at_ready, at_health)
    assert returncode == 0 and not shutdown_problems(returncode, output + log.decode("utf-8", "replace"))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_requests_in_flight_at_a_stop_signal_complete(
    voice_dir: Path, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    """A tts request and a tts_stream stream of the same long text are both in flight when
    the signal arrives: tts has finished some of its chunks and not answered, the stream
    has delivered its first chunk and not its last. Both complete: every chunk, the stream
    as long as the tts audio; serve exits 0, without a crash in Triton's log."""
    text = " ".join([PARAGRAPH] * 3)
    planned = stream_paragraph_chunks(3)  # 8 for the stream, worked out by hand (tests/helpers.py)
    tts_planned = paragraph_chunks(3)  # 6 for tts
    # Drained work is bounded by --exit-timeout-secs; give it room on a busy machine.
    # the drain's bound (30 s by default) is a deployment's choice: this machine may be slow
    serve = Serve.start(
        voice_dir,
        tmp_path,
        f"--triton-arg=--exit-timeout-secs={STOP_TIMEOUT_S}",
        f"--drain-timeout={STOP_TIMEOUT_S}",
    )
    client = grpcclient.InferenceServerClient(f"localhost:{serve.grpc_port}")
    whole: list[tuple[Any, Any]] = []
    answered, stream_ended = threading.Event(), threading.Event()
    streamed: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def on_answer(result: Any, error: Any) -> None:
        whole.append((result, error))
        answered.set()

    def on_stream(result: Any, error: Any) -> None:
        streamed.put((result, error))
        if error is None and result.get_response().parameters["triton_final_response"].bool_param:
            stream_ended.set()

    try:
        serve.wait_ready()
        stats = httpclient.InferenceServerClient(f"localhost:{serve.http_port}")
        made_before = model_counts(stats, "tts_chunk", serve.admin)[0]
        client.async_infer(
            "tts",
            tts_inputs(grpcclient, text, **DETERMINISTIC),
            callback=on_answer,
        )
        # tts is under way: Triton counts a chunk done (nothing else runs on this server)
        wait_until(
            lambda: model_counts(stats, "tts_chunk", serve.admin)[0] > made_before, 300, "a chunk of tts"
        )
        client.start_stream(callback=on_stream)
        client.async_stream_infer(
            "tts_stream", tts_inputs(grpcclient, text, **DETERMINISTIC), enable_empty_final_response=True
        )
        responses = [streamed.get(timeout=300)]  # the stream's first chunk
        made_at_signal = model_counts(stats, "tts_chunk", serve.admin)[0] - made_before
        stats.close()  # an open keep-alive connection would hold Triton's exit
        tts_in_flight, stream_in_flight = not answered.is_set(), not stream_ended.is_set()
        serve.process.send_signal(stop_signal)
        assert stream_ended.wait(300) and answered.wait(300)
        while not streamed.empty():
            responses.append(streamed.get())
        client.stop_stream()
        client.close()
        returncode = serve.process.wait(STOP_TIMEOUT_S)
    finally:
        client.close()
        serve.close()
    # both were in flight: tts had chunks left (two per chunk of the stream at most)
    assert tts_in_flight and stream_in_flight and made_at_signal < tts_planned + planned, made_at_signal
    # both ended (no hang), and serve stopped Triton (SIGINT, either way) cleanly
    output = serve.output() + serve.triton_log()  # signals and stack traces go to stderr
    assert "stopping tritonserver" in output and "Signal (2) received" in output
    problems = shutdown_problems(returncode, output)
    assert returncode == 0 and not problems, problems
    # serve drains first (triton_tts.ops.server.drain): Triton's own stop would refuse the
    # later chunks ("Server is stopping")
    errors = [error.message() for _, error in responses + whole if error is not None]
    assert not errors, (errors, output[-2500:])
    assert "draining" in output
    assert_stream_is_the_whole_audio(responses, whole[0][0], planned)


def assert_stream_is_the_whole_audio(responses: list[tuple[Any, Any]], whole: Any, planned: int) -> None:
    """Every chunk of the stream, in order, the last flagged, and together as long as the tts audio."""
    chunks = [result for result, _ in responses if result.get_response().outputs]
    assert [int(c.as_numpy("CHUNK_INDEX").reshape(-1)[0]) for c in chunks] == list(range(planned))
    assert [bool(c.as_numpy("IS_LAST").reshape(-1)[0]) for c in chunks] == [False] * (planned - 1) + [True]
    stream_audio = np.concatenate([c.as_numpy("AUDIO").reshape(-1) for c in chunks])
    tts_audio = whole.as_numpy("AUDIO").reshape(-1)
    assert_says_as_long(stream_audio, tts_audio)


# A Python model whose finalize does what its config's "on_finalize" parameter says.
FINALIZE_MODEL = """
import json
import os
import signal
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.on_finalize = parameters["on_finalize"]["string_value"]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")]) for r in requests]

    def finalize(self):
        if self.on_finalize == "crash_the_server":  # the stub's parent is tritonserver
            os.kill(os.getppid(), signal.SIGSEGV)
        elif self.on_finalize == "hang":  # longer than --exit-timeout-secs
            time.sleep(30)
"""


def finalize_repository(root: Path, on_finalize: str) -> Path:
    model = root / "finalizer"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(FINALIZE_MODEL, encoding="utf-8")
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]\n'
        'output [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]\n'
        "instance_group [{ kind: KIND_CPU, count: 1 }]\n"
        f'parameters {{ key: "on_finalize" value: {{ string_value: "{on_finalize}" }} }}\n',
        encoding="utf-8",
    )
    return root


@pytest.mark.parametrize(
    ("on_finalize", "expected"),
    [
        ("return", []),
        ("crash_the_server", ["tritonserver exit code -11", "Signal (11) received"]),
        ("hang", ["tritonserver exit code 1", "failed to stop server"]),
    ],
)
def test_a_crash_at_shutdown_is_caught(tmp_path: Path, on_finalize: str, expected: list[str]) -> None:
    """The session fixture's shutdown check (tests/conftest.py) on a throwaway server that
    stops cleanly, crashes (SIGSEGV) or hangs past its exit timeout while stopping."""
    repo = finalize_repository(tmp_path / "repo", on_finalize)
    log = tmp_path / "tritonserver.log"
    server = TritonServer(
        repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), log_file=log,
        extra_args=["--exit-timeout-secs=3"],
    )  # fmt: skip
    with server:
        pass  # stopped on leaving, as the fixture's server is
    assert server.process is not None
    problems = shutdown_problems(server.process.returncode, log.read_text(encoding="utf-8"))
    assert problems[: len(expected)] == expected, problems


def test_refused_streams_leave_nothing_to_hold_the_exit(voice_dir: Path, tmp_path: Path) -> None:
    """Our clients close a refused stream after its final flag. They used to cancel it at
    once; that raced the final response, Triton 2.51's gRPC frontend then kept the
    request's state, and tts_stream never unloaded: the exit timed out (three rounds of
    these streams did it every time here). Sync and asyncio clients, concurrently."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from triton_tts.client import AsyncTTSClient, TTSClient, TTSError
    from triton_tts.ops.server import default_voice_server

    texts = ["Said in full.", "... ,,, !!!", "." * 50, "?! -- ;;"] * 4
    log = tmp_path / "tritonserver.log"

    def outcome(text: str, url: str) -> str:
        with TTSClient(url, "grpc") as client:
            try:
                return "audio" if list(client.stream(text)) else "nothing"
            except TTSError as err:
                return str(err)

    async def async_outcome(text: str, url: str) -> str:
        async with AsyncTTSClient(url, "grpc") as client:
            try:
                return "audio" if [c async for c in client.stream(text)] else "nothing"
            except TTSError as err:
                return str(err)

    async def async_round(url: str) -> list[str]:
        return list(await asyncio.gather(*(async_outcome(t, url) for t in texts)))

    with default_voice_server(tmp_path / "repo", log, voice_dir) as server:
        for _ in range(3):
            with ThreadPoolExecutor(4) as pool:
                said = list(pool.map(lambda t: outcome(t, server.grpc_url), texts))
            said += asyncio.run(async_round(server.grpc_url))
            assert said.count("audio") == 2 * texts.count("Said in full.")
            assert all(s == "audio" or "nothing the voice can pronounce" in s for s in said), said
    assert server.process is not None
    assert not shutdown_problems(server.process.returncode, log.read_text(encoding="utf-8"))


def test_metrics_count_ensemble_requests(server: TritonServer, http) -> None:
    synthesize(http, "Counted by Prometheus.")
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode("utf-8")
    success = [
        line for line in metrics.splitlines() if line.startswith('nv_inference_request_success{model="tts"')
    ]
    assert success and float(success[0].rsplit(" ", 1)[1]) >= 1
    assert 'nv_inference_queue_duration_us{model="vocoder"' in metrics
