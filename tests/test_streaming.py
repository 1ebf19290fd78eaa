"""Long text and streaming: chunks in order, equal to the whole audio, cancellable."""

from __future__ import annotations

import itertools
import queue
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.helpers import DETERMINISTIC, model_counts, synthesize, tts_inputs
from triton_tts.chunking import split_text
from triton_tts.client import AsyncTTSClient, RequestRejected, TTSClient
from triton_tts.sample_texts import PARAGRAPH
from triton_tts.server import TritonServer
from triton_tts.text.normalize import normalize_english

JOIN_ATOL = 2e-4  # chunks batch with different neighbours in the two runs: rounding only


def stream_raw(url: str, text: str, **scalars: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """tts_stream as a user calls it with plain tritonclient: every response, in arrival order."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks, errors = [], []
    try:
        client.async_stream_infer(
            "tts_stream", tts_inputs(grpcclient, text, **scalars), enable_empty_final_response=True
        )
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                errors.append(error.message())
                continue
            response = result.get_response()
            if response.outputs:
                chunks.append(
                    {
                        "audio": result.as_numpy("AUDIO").reshape(-1),
                        "rate": int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]),
                        "index": int(result.as_numpy("CHUNK_INDEX").reshape(-1)[0]),
                        "last": bool(result.as_numpy("IS_LAST").reshape(-1)[0]),
                    }
                )
            if response.parameters["triton_final_response"].bool_param:
                return chunks, errors
    finally:
        client.stop_stream()
        client.close()


def test_chunks_arrive_in_order_and_join_into_the_whole_audio(server: TritonServer, http) -> None:
    chunks, errors = stream_raw(server.grpc_url, PARAGRAPH, **DETERMINISTIC)
    assert not errors
    expected_chunks = split_text(normalize_english(PARAGRAPH))
    assert [c["index"] for c in chunks] == list(range(len(expected_chunks)))
    assert [c["last"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert {c["rate"] for c in chunks} == {22050}
    # the first chunk is short, for fast first audio
    assert (
        len(chunks) >= 3 and len(chunks[0]["audio"]) < len(np.concatenate([c["audio"] for c in chunks])) / 3
    )
    # no clicks: where two chunks meet, both edges are faded to exactly zero
    for before, after in itertools.pairwise(chunks):
        assert before["audio"][-1] == 0.0 and after["audio"][0] == 0.0
    whole, _ = synthesize(http, PARAGRAPH, **DETERMINISTIC)
    streamed = np.concatenate([c["audio"] for c in chunks])
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=JOIN_ATOL)


def test_streams_one_after_another_and_concurrently(server: TritonServer) -> None:
    """The decoupled model survives many streams (a sender used after its final flag crashes Triton)."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Stream number {i}. It has two sentences." for i in range(6)]
    for text in texts[:2]:
        chunks, errors = stream_raw(server.grpc_url, text)
        assert not errors and chunks[-1]["last"]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda t: stream_raw(server.grpc_url, t), texts))
    assert all(not errors and chunks and chunks[-1]["last"] for chunks, errors in results)


def test_stream_errors_are_sent_then_the_stream_ends(server: TritonServer) -> None:
    chunks, errors = stream_raw(server.grpc_url, "Too fast.", SPEED=100.0)
    assert not chunks and len(errors) == 1 and "SPEED" in errors[0]
    chunks, errors = stream_raw(server.grpc_url, "")
    assert not chunks and "empty" in errors[0]


def test_cancelling_a_stream_frees_the_server(server: TritonServer, http) -> None:
    long_text = " ".join([PARAGRAPH] * 8)
    planned = len(split_text(normalize_english(long_text)))
    before, _ = model_counts(http, "tts_chunk")
    with TTSClient(server.grpc_url, "grpc") as client:
        stream = client.stream(long_text)
        first = next(stream)
        assert first.index == 0 and len(first.audio) > 0
        stream.close()  # leaves the generator: stop_stream(cancel_requests=True)
    audio, _ = synthesize(http, "Served right after a cancelled stream.")
    assert len(audio) > 0
    after, _ = model_counts(http, "tts_chunk")
    # The cancelled request stopped early: far fewer chunk syntheses than it planned.
    assert after - before - 1 < planned // 2, (after - before, planned)
    # A chunk it had already started may still finish (a short request is answered
    # before it): let it, so later tests count only their own chunks. Settled = no
    # change for 3 s, longer than one chunk takes here.
    settled, quiet = after, 0.0
    for _ in range(120):
        time.sleep(0.5)
        now, _ = model_counts(http, "tts_chunk")
        quiet = quiet + 0.5 if now == settled else 0.0
        settled = now
        if quiet >= 3.0:
            break
    assert settled - before - 1 < planned // 2, (settled - before, planned)


def test_long_text_completes_in_bounded_chunks(http) -> None:
    chapter = " ".join([PARAGRAPH] * 10)  # ~5,000 characters
    before, _ = model_counts(http, "tts_chunk")
    audio, rate = synthesize(http, chapter)
    after, _ = model_counts(http, "tts_chunk")
    assert after - before == len(split_text(normalize_english(chapter)))
    assert 180 < len(audio) / rate < 600  # minutes of speech, all of it
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0


def test_a_line_with_nothing_to_say_inside_long_text_is_skipped(http) -> None:
    text = "... Then the story begins, slowly."
    assert split_text(normalize_english(text))[0] == "..."  # a chunk with nothing to say
    audio, _ = synthesize(http, text)
    assert len(audio) > 0
    with pytest.raises(InferenceServerException) as info:
        synthesize(http, "?! ... --")
    assert info.value.status() == "400"


def test_client_library_streams_and_rejects(server: TritonServer) -> None:
    with TTSClient(server.grpc_url, "grpc") as client:
        chunks = list(client.stream(PARAGRAPH, noise_scale=0.0, noise_w=0.0))
        assert [c.index for c in chunks] == list(range(len(chunks))) and chunks[-1].is_last
        with pytest.raises(RequestRejected, match="SPEED"):
            list(client.stream("Hi.", speed=0.0))
    with TTSClient(server.http_url, "http") as client, pytest.raises(ValueError, match="gRPC"):
        list(client.stream("Hi."))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_async_client(server: TritonServer, protocol: str) -> None:
    import asyncio

    url = server.grpc_url if protocol == "grpc" else server.http_url

    async def run() -> tuple[int, int]:
        async with AsyncTTSClient(url, protocol) as client:  # type: ignore[arg-type]
            results = await asyncio.gather(*(client.synthesize(f"Async request {i}.") for i in range(4)))
            chunks = [c async for c in client.stream(PARAGRAPH)] if protocol == "grpc" else []
            return sum(len(r.audio) for r in results), len(chunks)

    samples, chunk_count = asyncio.run(run())
    assert samples > 22050 * 2
    assert chunk_count == (len(split_text(normalize_english(PARAGRAPH))) if protocol == "grpc" else 0)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", *args],
        input=stdin.encode() if stdin else None,
        capture_output=True,
        timeout=300,
        check=False,
    )


def test_cli_say_stream_to_wav_and_to_a_pipe(server: TritonServer, tmp_path: Path) -> None:
    out = tmp_path / "streamed.wav"
    done = run_cli("say", PARAGRAPH, "--stream", "--url", server.grpc_url, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert b"first audio after" in done.stdout
    info = sf.info(str(out))
    assert info.samplerate == 22050 and info.duration > 20
    piped = run_cli("say", "Raw samples to a pipe.", "--stream", "--url", server.grpc_url, "-o", "-")
    assert piped.returncode == 0 and len(piped.stdout) % 2 == 0 and len(piped.stdout) > 22050
    assert b"wrote -" in piped.stderr  # the report never mixes into the audio
    floats = run_cli(
        "say", "Raw floats.", "--url", server.http_url, "-o", str(tmp_path / "a.raw"), "--format", "float"
    )
    assert floats.returncode == 0
    samples = np.fromfile(tmp_path / "a.raw", dtype="<f4")
    assert samples.size > 0 and np.abs(samples).max() <= 1.0


def test_cli_synth_a_file_of_lines(server: TritonServer, tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("First line.\n\nSecond line, with a comma.\nThird!\n", encoding="utf-8")
    done = run_cli(
        "synth", "--input", str(lines), "--out-dir", str(tmp_path / "out"), "--url", server.grpc_url,
        "--protocol", "grpc", "--concurrency", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0001.wav", "0003.wav", "0004.wav"]
    assert b"wrote 3 of 3 files" in done.stdout
    bad = tmp_path / "bad.txt"
    bad.write_text("Fine.\n" + "x" * 60_000 + "\n", encoding="utf-8")
    failed = run_cli(
        "synth", "--input", str(bad), "--out-dir", str(tmp_path / "bad"), "--url", server.http_url
    )
    assert failed.returncode == 1 and b"line 2:" in failed.stderr and b"limit" in failed.stderr
    assert (tmp_path / "bad" / "0001.wav").exists()


def test_cli_voices(server: TritonServer) -> None:
    for url, protocol in ((server.http_url, "http"), (server.grpc_url, "grpc")):
        done = run_cli("voices", "--url", url, "--protocol", protocol)
        assert done.returncode == 0, done.stderr
        assert b"joe" in done.stdout and b"en-us" in done.stdout and b"22050" in done.stdout


def test_timeouts_are_reported_as_such(server: TritonServer) -> None:
    from triton_tts.client import TimedOut

    chapter = " ".join([PARAGRAPH] * 6)
    with TTSClient(server.grpc_url, "grpc", timeout_s=0.05) as client:
        with pytest.raises(TimedOut):
            client.synthesize(chapter)
        with pytest.raises(TimedOut):
            list(client.stream(chapter, speed=0.5))
    # the server shrugs it off
    with TTSClient(server.grpc_url, "grpc") as client:
        assert client.synthesize("Still here.").duration_s > 0.3
