"""Words with their times wherever speech leaves the product: the client library
(``timestamps=True``), the gateway's ``POST /v1/audio/speech/captioned`` (whole and as
JSON lines), the WebSocket's ``words`` messages (``speak`` and text streams) and
``triton-tts say --captions``; all through the real gateway and tritonserver."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
import soundfile as sf
import srt as srt_parser
import webvtt as webvtt_parser
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from tests.test_gateway_ws import next_json, receive, ws_url
from triton_tts.client import TTSClient, WordTime
from triton_tts.ops.server import TritonServer

TEXT = "On 3/4 the shop opens at 9:30. Call 555-0123 for the price, about $3.50!"
WRITTEN = ["On", "3/4", "the", "shop", "opens", "at", "9:30.", "Call", "555-0123", "for", "the", "price,"]
WRITTEN += ["about", "$3.50!"]
NO_NOISE: dict[str, Any] = {"noise_scale": 0.0, "noise_w": 0.0}
TOLERANCE_S = 0.002  # the same synthesis, timed by two paths (float32 seconds, ms rounding)


def post(url: str, body: bytes) -> tuple[int, str, bytes]:
    """A POST as any HTTP client sends it: the status, content type and body."""
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def check_timed(words: list[tuple[str, float, float]], duration_s: float) -> None:
    """In order, each with a span, none past the audio."""
    assert words, "no words"
    for (_, start, end), (_, next_start, _) in zip(words, [*words[1:], ("", duration_s, 0.0)], strict=True):
        assert 0.0 <= start < end <= next_start + TOLERANCE_S
    assert words[-1][2] <= duration_s + TOLERANCE_S


def as_tuples(words: list[WordTime] | tuple[WordTime, ...]) -> list[tuple[str, float, float]]:
    return [(w.word, w.start, w.end) for w in words]


def from_json(words: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    return [(w["word"], w["start"], w["end"]) for w in words]


def same_words(a: list[tuple[str, float, float]], b: list[tuple[str, float, float]]) -> None:
    assert [w for w, _, _ in a] == [w for w, _, _ in b]
    for (_, start_a, end_a), (_, start_b, end_b) in zip(a, b, strict=True):
        assert abs(start_a - start_b) <= TOLERANCE_S and abs(end_a - end_b) <= TOLERANCE_S


@pytest.fixture(scope="module")
def reference(server: TritonServer) -> tuple[list[tuple[str, float, float]], float]:
    """TEXT's words and duration from the client library over gRPC (``tts``), noise off."""
    with TTSClient(server.grpc_url, "grpc") as client:
        result = client.synthesize(TEXT, timestamps=True, **NO_NOISE)
    return as_tuples(result.words), result.duration_s


@pytest.fixture(scope="module")
def streamed(server: TritonServer) -> tuple[list[tuple[str, float, float]], float]:
    """The same from ``tts_stream``, as the gateway asks for it: chunked by sentence, its
    pauses between chunks are not the whole text's (the words' times follow them)."""
    with TTSClient(server.grpc_url, "grpc") as client:
        chunks = list(client.stream(TEXT, timestamps=True, **NO_NOISE))
    words = [w for c in chunks for w in as_tuples(c.words)]
    return words, sum(len(c.audio) for c in chunks) / chunks[0].sample_rate


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_client_times_each_word_as_written(
    server: TritonServer, reference: tuple[list[tuple[str, float, float]], float], protocol: str
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    with TTSClient(url, protocol) as client:  # type: ignore[arg-type]
        result = client.synthesize(TEXT, timestamps=True, **NO_NOISE)
        plain = client.synthesize(TEXT, **NO_NOISE)
    assert [w.word for w in result.words] == WRITTEN
    check_timed(as_tuples(result.words), result.duration_s)
    same_words(as_tuples(result.words), reference[0])
    assert plain.words == () and plain.audio.shape == result.audio.shape


def test_a_clients_stream_times_words_from_its_start(
    server: TritonServer, reference: tuple[list[tuple[str, float, float]], float]
) -> None:
    long_text = " ".join([TEXT] * 4)
    with TTSClient(server.grpc_url, "grpc") as client:
        whole = client.synthesize(long_text, timestamps=True, **NO_NOISE)
        chunks = list(client.stream(long_text, timestamps=True, **NO_NOISE))
    assert len(chunks) >= 2 and sum(1 for c in chunks if c.words) >= 2
    streamed = [w for c in chunks for w in as_tuples(c.words)]
    samples = 0
    for chunk in chunks:  # a chunk's words end within the audio sent so far
        samples += len(chunk.audio)
        assert all(end <= samples / chunk.sample_rate + TOLERANCE_S for _, _, end in as_tuples(chunk.words))
    assert [w for w, _, _ in streamed] == WRITTEN * 4
    check_timed(streamed, samples / chunks[0].sample_rate)
    assert [w for w, _, _ in as_tuples(whole.words)] == WRITTEN * 4


def decoded(data: bytes) -> tuple[np.ndarray[Any, Any], int]:
    audio, rate = sf.read(io.BytesIO(data), dtype="float32")
    return audio, rate


def test_captioned_speech_answers_the_audio_and_every_word(
    gateway: str, streamed: tuple[list[tuple[str, float, float]], float]
) -> None:
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)
    body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "wav", **NO_NOISE}
    answer: Any = client.post("/audio/speech/captioned", body=body, cast_to=object)
    assert answer["voice"] == "joe" and answer["format"] == "wav" and answer["sample_rate"] == 22050
    audio, rate = decoded(base64.b64decode(answer["audio"]))
    assert rate == 22050 and abs(len(audio) / rate - streamed[1]) < 0.01
    assert answer["audio_seconds"] == pytest.approx(len(audio) / rate, abs=0.002)
    words = from_json(answer["words"])
    same_words(words, streamed[0])
    check_timed(words, len(audio) / rate)


def test_captioned_speech_streams_json_lines(gateway: str) -> None:
    long_text = " ".join([TEXT] * 3)
    body = {"model": "tts-1", "input": long_text, "response_format": "mp3", "stream": True, **NO_NOISE}
    status, content_type, data = post(f"{gateway}/v1/audio/speech/captioned", json.dumps(body).encode())
    assert status == 200 and content_type == "application/x-ndjson", data[:300]
    lines = [json.loads(line) for line in data.splitlines() if line]
    done = lines[-1]
    assert done["done"] is True and done["format"] == "mp3", done
    pieces = lines[:-1]
    assert len(pieces) >= 2 and all(set(p) == {"audio", "words"} for p in pieces)
    words = [w for p in pieces for w in from_json(p["words"])]
    assert [w for w, _, _ in words] == WRITTEN * 3 and done["word_count"] == len(words)
    audio, rate = decoded(b"".join(base64.b64decode(p["audio"]) for p in pieces))
    assert rate == 22050 and abs(len(audio) / rate - done["audio_seconds"]) < 0.1  # mp3's padding
    check_timed(words, done["audio_seconds"])


def test_captioned_speech_refuses_what_it_cannot_do(gateway: str) -> None:
    cases = [
        ({"model": "tts-1", "input": TEXT, "stream": "yes"}, "stream"),
        ({"model": "tts-1", "input": ""}, "input"),
        ({"model": "tts-1", "input": TEXT, "response_format": "mp4"}, "response_format"),
    ]
    url = f"{gateway}/v1/audio/speech/captioned"
    for body, param in cases:
        status, _, data = post(url, json.dumps(body).encode())
        assert status == 400 and json.loads(data)["error"]["param"] == param, data
    status, _, data = post(url, b"{")
    assert status == 400 and json.loads(data)["error"]["code"] == "invalid_json", data


@pytest.fixture()
def socket(gateway: str) -> Iterator[Connection]:
    with connect(ws_url(gateway), open_timeout=30) as ws:
        yield ws


def collect(ws: Connection) -> tuple[dict[str, Any], list[bytes], list[dict[str, Any]], dict[str, Any]]:
    """start, the binary frames, the words messages (each just before its frame), and the end."""
    start = next_json(ws)
    assert start["type"] == "start", start
    frames: list[bytes] = []
    words: list[dict[str, Any]] = []
    waiting: dict[str, Any] | None = None  # a words message, until its chunk comes
    while True:
        message = receive(ws)
        if isinstance(message, bytes):
            frames.append(message)
            if waiting is not None:
                words.append({**waiting, "with_samples": sum(len(f) for f in frames) // 2})
                waiting = None
            continue
        parsed = json.loads(message)
        if parsed["type"] == "words":
            assert waiting is None, "two words messages with no chunk between"
            waiting = parsed
        elif parsed["type"] != "ping":
            assert waiting is None, f"a words message with no chunk after it: {waiting}"
            return start, frames, words, parsed


def test_a_speak_with_timestamps_sends_words_before_their_audio(
    socket: Connection, streamed: tuple[list[tuple[str, float, float]], float]
) -> None:
    socket.send(json.dumps({"type": "speak", "input": TEXT, "timestamps": True, **NO_NOISE}))
    start, frames, messages, end = collect(socket)
    assert end["type"] == "end" and frames and messages
    words = []
    for message in messages:
        assert message["id"] == start["id"]
        timed = from_json(message["words"])
        assert all(e <= message["with_samples"] / 22050 + TOLERANCE_S for _, _, e in timed)
        words += timed
    same_words(words, streamed[0])
    socket.send(json.dumps({"type": "speak", "input": "No words, please."}))
    _, frames, messages, end = collect(socket)
    assert frames and messages == [] and end["type"] == "end"


def test_a_text_streams_words_are_timed_from_the_streams_start(socket: Connection) -> None:
    socket.send(json.dumps({"type": "start", "timestamps": True, **NO_NOISE}))
    for piece in ["The first ", "sentence is short. ", "The second ", "one follows it."]:
        socket.send(json.dumps({"type": "append", "text": piece}))
    socket.send(json.dumps({"type": "end"}))
    _, _, messages, end = collect(socket)
    assert end["type"] == "end" and end["texts"] == 2, end
    words = [w for m in messages for w in from_json(m["words"])]
    assert " ".join(w for w, _, _ in words) == "The first sentence is short. The second one follows it."
    check_timed(words, end["audio_seconds"])
    assert words[5][1] > words[4][2]  # the second text's words come after the first's


def test_timestamps_in_a_message_must_be_a_boolean(socket: Connection) -> None:
    socket.send(json.dumps({"type": "speak", "input": TEXT, "timestamps": "yes"}))
    error = next_json(socket)
    assert error["type"] == "error" and error["error"]["param"] == "timestamps", error


CLI = [sys.executable, "-m", "triton_tts.cli"]


def clock(value: str) -> float:
    hours, minutes, seconds = value.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@pytest.mark.parametrize(("suffix", "stream"), [("vtt", False), ("srt", True)])
def test_say_writes_captions_beside_the_audio(
    server: TritonServer, tmp_path: Path, suffix: str, stream: bool
) -> None:
    out, captions = tmp_path / "speech.wav", tmp_path / f"speech.{suffix}"
    args = ["say", TEXT, "-o", str(out), "--captions", str(captions), "--url", server.grpc_url]
    args += ["--protocol", "grpc", *(["--stream"] if stream else [])]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"wrote {captions}: {len(WRITTEN)} words" in done.stdout
    duration = sf.info(str(out)).duration
    text = captions.read_text(encoding="utf-8")
    if suffix == "srt":
        cues = [(c.content, c.start.total_seconds(), c.end.total_seconds()) for c in srt_parser.parse(text)]
    else:
        cues = [(c.text, clock(c.start), clock(c.end)) for c in webvtt_parser.from_string(text).captions]
    assert " ".join(c for c, _, _ in cues).split() == WRITTEN
    assert len(cues) >= 2  # two sentences and more: never one cue
    assert all(start <= end <= duration + 0.01 for _, start, end in cues)


def test_say_refuses_a_caption_file_it_cannot_write(server: TritonServer, tmp_path: Path) -> None:
    args = ["say", TEXT, "-o", str(tmp_path / "a.wav"), "--url", server.http_url]
    done = subprocess.run(
        [*CLI, *args, "--captions", str(tmp_path / "a.txt")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and ".vtt (WebVTT) or .srt (SubRip)" in done.stderr
    assert not (tmp_path / "a.wav").exists()
    missing = tmp_path / "no" / "a.vtt"
    done = subprocess.run(
        [*CLI, *args, "--captions", str(missing)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "there is no folder" in done.stderr
