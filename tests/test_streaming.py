"""Long text and streaming: chunks in order, equal to the whole audio, cancellable."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from tritonclient.utils import InferenceServerException

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    DETERMINISTIC,
    STREAM_PARAGRAPH_CHUNKS,
    assert_says_as_long,
    metric_total,
    model_counts,
    paragraph_chunks,
    stream_paragraph_chunks,
    stream_raw,
    synthesize,
    wait_until,
)
from triton_tts.client import AsyncTTSClient, RequestRejected, TTSClient
from triton_tts.ops.server import TritonServer
from triton_tts.quality.intelligibility import transcribe, word_error_rate
from triton_tts.runtime.admission import Ledger
from triton_tts.runtime.chunking import split_text
from triton_tts.runtime.metrics import REQUESTS
from triton_tts.text.normalize import normalize_english


def test_chunks_arrive_in_order_and_join_into_the_whole_audio(server: TritonServer, http) -> None:
    chunks, errors = stream_raw(server.grpc_url, PARAGRAPH, **DETERMINISTIC)
    assert not errors
    assert [c["index"] for c in chunks] == list(range(STREAM_PARAGRAPH_CHUNKS))  # by hand: tests/helpers.py
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
    assert_says_as_long(np.concatenate([c["audio"] for c in chunks]), whole)


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
    planned = stream_paragraph_chunks(8)  # 49
    before, _ = model_counts(http, "tts_chunk")
    cancelled = {"model": "tts_stream", "reason": "cancelled"}
    cancelled_before = metric_total(server.metrics_port, REQUESTS.name, **cancelled)
    with TTSClient(server.grpc_url, "grpc") as client:
        stream = client.stream(long_text)
        first = next(stream)
        assert first.index == 0 and len(first.audio) > 0
        stream.close()  # leaves the generator: stop_stream(cancel_requests=True)
    audio, _ = synthesize(http, "Served right after a cancelled stream.")
    assert len(audio) > 0
    # The stream's request ends when the model notices, before it would start its next
    # chunk; a stream has one chunk in flight at a time, so by then it has made all it will.
    wait_until(
        lambda: metric_total(server.metrics_port, REQUESTS.name, **cancelled) > cancelled_before,
        300, "tts_stream to notice the cancellation",
    )  # fmt: skip
    after, _ = model_counts(http, "tts_chunk")
    # far fewer chunk syntheses than it planned (and one for the short request)
    assert after - before - 1 < planned // 2, (after - before, planned)


# The chapter's last sentence, unlike PARAGRAPH's (38 characters, recognised well: see
# tests/test_intelligibility.py). It joins the last chunk: 117 + 100 + 38 + 2 spaces <= 400.
LAST_SENTENCE = "Please call me back when you get home."
DURATION_TOLERANCE = 0.15
TAIL_WER_MARGIN = 0.25  # the tail's WER over the sentence said alone (context, cut edges)


def test_long_text_is_said_whole(http) -> None:
    """~6,000 characters (ten PARAGRAPHs and a different last sentence), noise off: the
    chunks worked out by hand are made, the audio lasts as long as its sentences said one
    by one (within 15%), and its end is the last sentence, recognised."""
    sentences = [s if s.endswith(".") else f"{s}." for s in PARAGRAPH.split(". ")]
    chapter = " ".join([PARAGRAPH] * 10 + [LAST_SENTENCE])
    solo = {s: synthesize(http, s, **DETERMINISTIC) for s in [*sentences, LAST_SENTENCE]}
    before, _ = model_counts(http, "tts_chunk")
    audio, rate = synthesize(http, chapter, **DETERMINISTIC)
    after, _ = model_counts(http, "tts_chunk")
    assert after - before == paragraph_chunks(10)  # 18 (tts)
    assert np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
    seconds = {s: len(a) / r for s, (a, r) in solo.items()}
    expected_s = 10 * sum(seconds[s] for s in sentences) + seconds[LAST_SENTENCE]
    assert abs(len(audio) / rate / expected_s - 1) <= DURATION_TOLERANCE, (len(audio) / rate, expected_s)
    # the end of the audio is the last sentence: as well recognised as when said alone ...
    last_alone, _ = solo[LAST_SENTENCE]
    alone_wer = word_error_rate([LAST_SENTENCE], [transcribe(last_alone, rate)])
    tail = transcribe(audio[-len(last_alone) :], rate)
    assert word_error_rate([LAST_SENTENCE], [tail]) <= alone_wer + TAIL_WER_MARGIN, tail
    # ... and the same measure tells another sentence's end from it
    other, _ = solo[sentences[-1]]
    assert word_error_rate([LAST_SENTENCE], [transcribe(other[-len(last_alone) :], rate)]) > 0.6


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
    assert chunk_count == (STREAM_PARAGRAPH_CHUNKS if protocol == "grpc" else 0)


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
        # A cancelled text's work is admitted work until its chunks in flight are done (it
        # stops before the next): the stream would be refused for it, not time out.
        assert server.admission_dir is not None
        ledger = Ledger(server.admission_dir)
        deadline = time.monotonic() + 60
        while ledger.load().texts and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(TimedOut):
            list(client.stream(chapter, speed=0.5))
    # the server shrugs it off
    with TTSClient(server.grpc_url, "grpc") as client:
        assert client.synthesize("Still here.").duration_s > 0.3
