"""Faults through the real server: corrupt graphs at start, clients that vanish mid-stream.

(SIGTERM during a stream is in tests/test_lifecycle.py; CLI errors in tests/test_cli.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    DETERMINISTIC,
    metric_total,
    model_counts,
    stream_paragraph_chunks,
    stream_raw,
    wait_until,
)
from triton_tts.contract.voice import ACOUSTIC_FILE
from triton_tts.ops.repository import build_repository
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.runtime.metrics import REQUESTS

pytestmark = pytest.mark.server  # its own servers (module fixtures)

CLI = [sys.executable, "-m", "triton_tts.cli"]
GARBAGE = b"\x08\x07not an onnx graph\xff\xfe" * 64
FAILED_START_S = 120  # a failed load ends serve long before READY_TIMEOUT_S (300 s)
JOIN_ATOL = 2e-4  # the same text batched with other neighbours: rounding only


def corrupt(path: Path) -> None:
    """Replace ``path`` with garbage; unlink first, since builds hard-link voice files."""
    path.unlink()
    path.write_bytes(GARBAGE)


@pytest.fixture()
def corrupt_repository(voice_dir: Path, tmp_path: Path) -> Path:
    repo = build_repository(voice_dir, tmp_path / "repo")
    corrupt(repo / "acoustic" / "1" / "model.onnx")
    return repo


@pytest.fixture()
def corrupt_voice(voice_dir: Path, tmp_path: Path) -> Path:
    """The voice with a garbage acoustic graph (small files copied, the vocoder linked)."""
    folder = tmp_path / "broken_voice"
    folder.mkdir()
    for source in voice_dir.iterdir():
        if source.suffix == ".onnx":
            os.link(source, folder / source.name)
        elif source.is_file():
            shutil.copy(source, folder / source.name)
    corrupt(folder / ACOUSTIC_FILE)
    return folder


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """serve to its end; past FAILED_START_S (a deadline, far below READY_TIMEOUT_S) it hangs."""
    ports = ["--http-port", str(free_port()), "--grpc-port", str(free_port())]
    ports += ["--metrics-port", str(free_port()), "--health-port", "0"]
    return subprocess.run(
        [*CLI, "serve", *ports, *args], capture_output=True, text=True, timeout=FAILED_START_S, check=False
    )


def test_serve_names_a_corrupt_model_and_exits(corrupt_repository: Path) -> None:
    """Triton gives up on a model it cannot load (--exit-on-error, its default, in both model
    control modes): serve must say which model and why, and exit, not wait out its timeout."""
    done = serve("--no-build", "--model-repository", str(corrupt_repository))
    assert done.returncode != 0  # and it said why (not "not ready after 300 s"):
    last = done.stderr.strip().splitlines()[-1]
    # serve's start-up gate keeps Triton up (--exit-on-error=false); serve stops it
    assert last.startswith("triton-tts: tritonserver could not load its models"), done.stderr[-3000:]
    assert "model 'acoustic' failed to load" in last and "not a loadable ONNX model" in last
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", ["serve", "build-repo"])
def test_a_corrupt_voice_is_named_before_anything_starts(
    corrupt_voice: Path, tmp_path: Path, command: str
) -> None:
    repo = ("--model-repository" if command == "serve" else "--out", str(tmp_path / "repo"))
    if command == "serve":
        done = serve("--voice", str(corrupt_voice), *repo)
    else:
        done = subprocess.run(
            [*CLI, command, "--voice", str(corrupt_voice), *repo],
            capture_output=True, text=True, timeout=FAILED_START_S, check=False,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"triton-tts: {corrupt_voice / ACOUSTIC_FILE} is not a loadable ONNX model "
        "(INVALID_PROTOBUF: Protobuf parsing failed.): export the voice again (triton-tts export)"
    ]


@pytest.mark.parametrize("exit_on_error", [True, False], ids=["triton-exits", "triton-stays-up"])
def test_wait_ready_reports_a_failed_load_at_once(
    corrupt_repository: Path, tmp_path: Path, exit_on_error: bool
) -> None:
    """From Triton's own log (it exits), or from its repository index (it stays up, unready)."""
    server = TritonServer(
        corrupt_repository,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        extra_args=[] if exit_on_error else ["--exit-on-error=false"],
        log_file=tmp_path / "tritonserver.log",
    )
    try:  # waiting out the timeout would be a TimeoutError, not this RuntimeError
        with pytest.raises(RuntimeError) as info:
            server.start().wait_ready(timeout=FAILED_START_S)
    finally:
        server.stop()
    message = str(info.value)
    assert "model 'acoustic' failed to load" in message and "Protobuf parsing failed" in message
    assert ("exited" in message) == exit_on_error
    assert "\n" not in message


# A client process that starts a stream and waits, to be killed after its first chunk.
VANISHING_CLIENT = """
import queue, sys
import tritonclient.grpc as grpcclient
from tests.helpers import DETERMINISTIC, tts_inputs

client = grpcclient.InferenceServerClient(sys.argv[1])
answers = queue.Queue()
client.start_stream(callback=lambda result, error: answers.put((result, error)))
print("sending", flush=True)
client.async_stream_infer("tts_stream", tts_inputs(grpcclient, sys.argv[2], **DETERMINISTIC))
result, error = answers.get(timeout=300)
print("first chunk" if error is None else f"error: {error}", flush=True)
answers.get(timeout=300)
"""


def stream(url: str, text: str) -> tuple[list[Any], list[str]]:
    """One tts_stream over its own gRPC channel: audio chunks and errors, in arrival order."""
    chunks, errors = stream_raw(url, text, **DETERMINISTIC)
    return [c["audio"] for c in chunks], errors


def test_a_client_that_vanishes_mid_stream_does_not_disturb_the_others(
    server: TritonServer, http: httpclient.InferenceServerClient
) -> None:
    texts = [f"Listener number {i} stays to the end. " + PARAGRAPH[: 160 + 40 * i] for i in range(3)]
    solo = []
    for text in texts:
        chunks, errors = stream(server.grpc_url, text)
        assert not errors
        solo.append(np.concatenate(chunks))
    vanishing = " ".join([PARAGRAPH] * 6)
    before, _ = model_counts(http, "tts_chunk")
    cancelled = {"model": "tts_stream", "reason": "cancelled"}
    cancelled_before = metric_total(server.metrics_port, REQUESTS.name, **cancelled)
    results: dict[int, tuple[list[Any], list[str]]] = {}

    def run(i: int) -> None:
        results[i] = stream(server.grpc_url, texts[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    client = subprocess.Popen(
        [sys.executable, "-c", VANISHING_CLIENT, server.grpc_url, vanishing],
        cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "sending"
        for thread in threads:
            thread.start()
        assert client.stdout.readline().strip() == "first chunk"
    finally:
        # No stop_stream, no cancel: the process dies and its connection with it, as when a
        # client crashes or its network drops.
        client.kill()
        client.wait()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads)
    for i, expected in enumerate(solo):
        chunks, errors = results[i]
        assert not errors
        audio = np.concatenate(chunks)
        assert audio.shape == expected.shape
        np.testing.assert_allclose(audio, expected, atol=JOIN_ATOL)
    # The server noticed the vanished client and stopped its work early: the stream's request
    # ends (counted cancelled) before it would start its next chunk, and a stream has one
    # chunk in flight at a time, so by then it has made all it will.
    wait_until(
        lambda: metric_total(server.metrics_port, REQUESTS.name, **cancelled) > cancelled_before,
        300, "tts_stream to notice the vanished client",
    )  # fmt: skip
    settled, _ = model_counts(http, "tts_chunk")
    # By hand (tests/helpers.py's rules): each listener's text is its own first sentence
    # (37-38 characters), then PARAGRAPH's first 160-240 characters: its first sentence
    # (39), then what is left in one chunk (120 characters, under the ramp's limit of 2 x
    # 77) or two (134 + 25 or 64: over 2 x 76 together); the vanishing one is six PARAGRAPHs.
    others = 3 + 4 + 4
    planned = stream_paragraph_chunks(6)  # 37
    assert settled - before - others < planned // 2, (settled - before - others, planned)
