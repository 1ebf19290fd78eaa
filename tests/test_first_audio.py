"""First audio under load, against real servers: a stream's first chunk overtakes the
chunks queued in the stages (Triton priority, sent over the server's own gRPC endpoint),
streams are paced to playback, and a stop ends pacing so that it is never held up."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from testkit.sample_texts import PARAGRAPH
from tests.helpers import metric_total, shutdown_problems, tts_inputs
from triton_tts.build.model_configs import BuildOptions
from triton_tts.client import TTSClient
from triton_tts.ops.server import TritonServer, default_voice_server, free_port
from triton_tts.runtime import internal
from triton_tts.runtime.loopback import Loopback, LoopbackFailed, Unreachable

pytestmark = pytest.mark.server  # its own servers (module fixtures)

LONG_CHUNK = (
    "Our opening hours have changed this month: we now open at nine in the morning and close at "
    "eight in the evening from Monday to Friday, and on Saturdays we open at ten and close at four."
)
FLOOD = 8  # direct tts_chunk requests queued ahead (each a second or more of work here)


def test_a_streams_first_chunk_overtakes_chunks_queued_before_it(server: TritonServer) -> None:
    """Eight long chunks are queued, then a stream starts and, at the same moment, the same
    short text goes as a plain tts_chunk request. With first-chunk priority, the stream's
    first chunk jumps the stage queues; the plain request waits its turn behind the flood."""
    done: list[str] = []
    lock = threading.Lock()
    answered = threading.Semaphore(0)

    def record(name: str) -> Any:
        def callback(result: Any, error: Any) -> None:
            with lock:
                done.append(name if error is None else f"{name}: {error}")
            answered.release()

        return callback

    client = grpcclient.InferenceServerClient(server.grpc_url)
    inside = server.internal_parameters()  # tts_chunk answers the server's own chunks only
    try:
        for i in range(FLOOD):
            client.async_infer(
                "tts_chunk", tts_inputs(grpcclient, LONG_CHUNK), record(f"flood {i}"), parameters=inside
            )
        time.sleep(0.3)  # the flood is in the queues
        first = "Thank you for calling."
        client.async_infer("tts_chunk", tts_inputs(grpcclient, first), record("plain"), parameters=inside)
        with TTSClient(server.grpc_url, "grpc") as tts:
            chunks = tts.stream(first + " " + LONG_CHUNK)
            next(chunks)
            with lock:
                done.append("stream's first chunk")
            rest = list(chunks)
        assert all(answered.acquire(timeout=120) for _ in range(FLOOD + 1)), done
    finally:
        client.close()
    assert rest and all(": " not in name for name in done), "\n".join(done)
    overtaken = FLOOD - sum(name.startswith("flood") for name in done[: done.index("stream's first chunk")])
    behind = FLOOD - sum(name.startswith("flood") for name in done[: done.index("plain")])
    # Only flood chunks already running (two instances per stage) can finish before it.
    assert overtaken >= FLOOD // 2, done
    assert behind < overtaken, done


def test_the_loopback_sends_to_this_server_and_reports_its_errors(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the loopback carries the models' token, as inside the server (triton_tts/runtime/internal.py)
    monkeypatch.setenv(internal.TOKEN_ENV, server.internal_parameters()[internal.PARAMETER])
    loopback = Loopback(server.grpc_url, priority=1)
    audio, rate, words, times = loopback.synthesize("tts_chunk", "Hello there.", [], "loopback-test/0")
    assert rate == 22050 and audio.dtype == np.float32 and audio.size > rate // 4
    assert words is None and times is None  # not asked for
    timestamps = [("TIMESTAMPS", np.array([[True]]))]
    _, _, words, times = loopback.synthesize("tts_chunk", "Hello there.", timestamps, "loopback-test/1")
    assert words is not None and times is not None
    assert [w.decode() for w in words.reshape(-1)] == ["Hello", "there."] and times.shape == (1, 2, 2)
    with pytest.raises(LoopbackFailed) as refused:
        loopback.synthesize("tts_chunk", "Hello.", [("SPEED", np.array([[9.0]], dtype=np.float32))], "bad/0")
    assert refused.value.error.code_name == "INVALID_ARG" and "SPEED" in refused.value.error.message()
    with pytest.raises(Unreachable):  # nothing listens there: the caller falls back to BLS
        Loopback(f"localhost:{free_port()}", priority=1).synthesize("tts_chunk", "Hello.", [], "x/0")


def test_first_chunks_go_by_bls_when_the_endpoint_does_not_answer(voice_dir: Path, tmp_path: Path) -> None:
    """Models told an endpoint where nothing listens still stream: first chunks go by BLS,
    without the priority, and the log says why (once a minute, not once a stream)."""
    from triton_tts.ops.repository import build_repository

    repo = build_repository(voice_dir, tmp_path / "repo")
    log = tmp_path / "tritonserver.log"
    server = TritonServer(
        repo,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=log,
        loopback_url=f"localhost:{free_port()}",
    )
    with server, TTSClient(server.grpc_url, "grpc") as client:
        for _ in range(2):
            chunks = list(client.stream(PARAGRAPH))
            assert len(chunks) >= 3 and chunks[-1].is_last
    assert server.process is not None and server.process.returncode == 0
    assert log.read_text(encoding="utf-8").count("chunks go without priority") == 1


PACED_LEAD_MS = 3000


@pytest.fixture(scope="module")
def paced(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("paced") / "tritonserver.log"
    with default_voice_server(
        log_file=log, voice_dir=voice_dir, options=replace(BuildOptions(), stream_lead_ms=PACED_LEAD_MS)
    ) as running:
        yield running, log


def test_a_paced_stream_sends_later_chunks_as_playback_needs_them(paced: Any) -> None:
    server, _ = paced
    arrivals, durations = [], []
    with TTSClient(server.grpc_url, "grpc") as client:
        start = time.monotonic()
        for chunk in client.stream(PARAGRAPH):
            arrivals.append(time.monotonic() - start)
            durations.append(chunk.audio.size / chunk.sample_rate)
    assert len(arrivals) >= 3
    # The last chunk may start only once what was sent before it leads playback (from the
    # first chunk) by less than the lead: a lower bound, whatever the machine's speed.
    before_last = sum(durations[:-1])
    assert arrivals[-1] - arrivals[0] >= before_last - PACED_LEAD_MS / 1000 - 0.5
    # Waiting for playback is not work: the processing time the metrics report stays far
    # below the stream's length.
    processing = metric_total(server.metrics_port, "triton_tts_processing_seconds_total", model="tts_stream")
    assert 0 < processing < 0.5 * arrivals[-1]
    assert metric_total(server.metrics_port, "triton_tts_stream_gaps_total", model="tts_stream") == 0


def test_a_stop_ends_pacing_so_paced_streams_finish_and_the_server_exits_cleanly(paced: Any) -> None:
    server, log = paced
    received: list[Any] = []
    ended = threading.Event()

    def listen() -> None:
        try:
            with TTSClient(server.grpc_url, "grpc") as client:
                for chunk in client.stream(PARAGRAPH + " " + PARAGRAPH):
                    received.append(chunk)
        except Exception as err:  # a stop may refuse a later chunk: an error, then the end
            received.append(err)
        finally:
            ended.set()

    listener = threading.Thread(target=listen)
    listener.start()
    deadline = time.monotonic() + 60
    while len(received) < 2 and time.monotonic() < deadline:  # paced after its first chunks
        time.sleep(0.1)
    assert len(received) >= 2, received
    stopping = time.monotonic()
    code = server.stop()
    listener.join(60)
    assert ended.is_set()
    # Far sooner than the stream's remaining playback (over a minute of audio).
    assert time.monotonic() - stopping < 25
    problems = shutdown_problems(code, log.read_text(encoding="utf-8", errors="replace"))
    assert not problems, problems
