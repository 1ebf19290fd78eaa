"""`triton-tts serve` as users run it: ready after warm-up, metrics, clean stop on signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.helpers import tts_inputs
from triton_tts.server import TritonServer, free_port


def wait_for_ready_message(process: subprocess.Popen[str]) -> str:
    """Read serve's output until it says it is ready (it says so only after warm-up)."""
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "triton-tts is ready (warm-up done)" in line:
            return "".join(seen)
    raise AssertionError("serve exited before it was ready:\n" + "".join(seen))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_finishes_in_flight_requests_then_exits(
    voice_dir: Path, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    http_port, grpc_port, metrics_port, health_port = free_port(), free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "triton_tts.cli", "serve",
            "--voice", str(voice_dir), "--model-repository", str(tmp_path / "repo"),
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
            "--health-port", str(health_port),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    client = httpclient.InferenceServerClient(f"localhost:{http_port}", concurrency=4, network_timeout=120)
    try:
        startup = wait_for_ready_message(process)
        assert client.is_server_ready() and client.is_model_ready("tts")
        with urllib.request.urlopen(f"http://localhost:{health_port}/ready", timeout=10) as ready:
            assert ready.status == 200  # the watchdog's readiness: every instance alive
        pending = [
            client.async_infer("tts", tts_inputs(httpclient, f"Request number {i} is still in flight."))
            for i in range(4)
        ]
        time.sleep(0.2)  # let them reach the server
        process.send_signal(stop_signal)
        for handle in pending:
            audio = handle.get_result().as_numpy("AUDIO")
            assert audio.size > 0 and np.isfinite(audio).all()
        # Triton also waits (up to --exit-timeout-secs) for open keep-alive connections.
        client.close()
        output, _ = process.communicate(timeout=60)
        output = startup + output
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "triton-tts is ready (warm-up done)" in output


def test_metrics_count_ensemble_requests(server: TritonServer, http) -> None:
    from tests.helpers import synthesize

    synthesize(http, "Counted by Prometheus.")
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode("utf-8")
    success = [
        line for line in metrics.splitlines() if line.startswith('nv_inference_request_success{model="tts"')
    ]
    assert success and float(success[0].rsplit(" ", 1)[1]) >= 1
    assert 'nv_inference_queue_duration_us{model="vocoder"' in metrics


def test_sigterm_during_a_stream_ends_it_cleanly(voice_dir: Path, tmp_path: Path) -> None:
    """A stream in flight at SIGTERM gets all its chunks ending with IS_LAST, or a clear error;
    either way the final flag, and never a hang. (Triton 2.51 refuses the chunk requests a
    stream makes after the signal, "Server is stopping": the error is what users see.)"""
    import queue
    from typing import Any

    import tritonclient.grpc as grpcclient

    from tests.helpers import DETERMINISTIC
    from triton_tts.chunking import split_text
    from triton_tts.sample_texts import PARAGRAPH
    from triton_tts.text.normalize import normalize_english

    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "triton_tts.cli", "serve",
            "--voice", str(voice_dir), "--model-repository", str(tmp_path / "repo"),
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
            "--health-port", "0",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    text = " ".join([PARAGRAPH] * 3)
    planned = len(split_text(normalize_english(text)))
    client = grpcclient.InferenceServerClient(f"localhost:{grpc_port}")
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    chunks: list[tuple[int, bool]] = []
    errors: list[str] = []
    try:
        wait_for_ready_message(process)
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(
            "tts_stream", tts_inputs(grpcclient, text, **DETERMINISTIC), enable_empty_final_response=True
        )
        while True:
            result, error = answers.get(timeout=120)  # queue.Empty here: a hang
            if error is not None:
                errors.append(error.message())
                continue
            response = result.get_response()
            if response.outputs:
                index = int(result.as_numpy("CHUNK_INDEX").reshape(-1)[0])
                chunks.append((index, bool(result.as_numpy("IS_LAST").reshape(-1)[0])))
                if len(chunks) == 1:
                    process.send_signal(signal.SIGTERM)  # the request is surely in flight now
            if response.parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
        client.close()
        output, _ = process.communicate(timeout=60)
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
    assert planned > 2 and chunks[0] == (0, False)
    assert [i for i, _ in chunks] == list(range(len(chunks)))
    if errors:  # the stream was cut: a clear error, and no chunk claimed to be the last
        assert len(errors) == 1 and "stopping" in errors[0], errors
        assert not any(last for _, last in chunks)
    else:
        assert len(chunks) == planned and chunks[-1] == (planned - 1, True)
    assert process.returncode == 0, output[-3000:]
