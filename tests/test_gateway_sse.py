"""OpenAI's streamed speech events (``"stream_format": "sse"``) through the real gateway
and Triton: OpenAI's own SDK reads them, the audio they carry is the plain answer's and
the speech recogniser hears it; the wire is checked byte by byte; refusals before the
stream keep their status and JSON, a failure after it is an error event and a cut body;
a caller that leaves cancels the synthesis on the server."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPResponse, IncompleteRead
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.helpers import metric_total, wait_until
from tests.test_gateway import (
    CODEC_SLACK_S,
    LONG_TEXT,
    NO_NOISE,
    TEXT,
    WER_MARGIN,
    decode,
    error_of,
    logged_gateway,
    post,
    sdk,
)
from triton_tts.gateway import audio
from triton_tts.ops.lifecycle import requests_in_flight
from triton_tts.ops.server import TritonServer
from triton_tts.quality.intelligibility import transcribe, word_error_rate

pytestmark = pytest.mark.server  # one test starts its own gateway

SSE = "text/event-stream"
# Intelligible: the offline recogniser's word error rate on TEXT. The joe voice scores
# about 0.3 on it; audio at the wrong rate or backwards scores above 0.6
# (tests/test_intelligibility.py), empty audio 1.
MAX_WER = 0.5


@contextmanager
def streamed(
    base: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Iterator[HTTPResponse]:
    """A speech request read as it arrives (Python's http.client: no SDK between)."""
    request = urllib.request.Request(
        f"{base}/v1/audio/speech",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        yield response


def events_of(lines: list[str]) -> list[dict[str, Any]]:
    """The ``data:`` lines' JSON, in order (blank lines end events; nothing else is sent)."""
    return [json.loads(line[len("data: ") :]) for line in lines if line]


def joined_audio(events: list[dict[str, Any]]) -> bytes:
    deltas = [e for e in events[:-1] if e["type"] == "speech.audio.delta"]
    assert len(deltas) == len(events) - 1, [e["type"] for e in events]
    return b"".join(base64.b64decode(e["audio"], validate=True) for e in deltas)


def check_done(event: dict[str, Any], text: str, seconds: float) -> None:
    """OpenAI's speech.audio.done: characters in, milliseconds of audio out."""
    assert set(event) == {"type", "usage"} and event["type"] == "speech.audio.done", event
    usage = event["usage"]
    assert set(usage) == {"input_tokens", "output_tokens", "total_tokens"}
    assert all(isinstance(v, int) for v in usage.values()), usage
    assert usage["input_tokens"] == len(text)
    assert abs(usage["output_tokens"] - seconds * 1000) <= CODEC_SLACK_S * 1000, (usage, seconds)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize("response_format", ["pcm", "mp3"])
def test_openais_sdk_reads_the_events_and_hears_the_plain_answers_audio(
    gateway: str, response_format: str
) -> None:
    client = sdk(gateway)
    request: dict[str, Any] = {
        "model": "gpt-4o-mini-tts",
        "voice": "alloy",
        "input": TEXT,
        "response_format": response_format,
        "extra_body": NO_NOISE,  # the same speech both times, to compare
    }
    with client.audio.speech.with_streaming_response.create(
        **request, stream_format="sse", instructions="Speak in a calm tone."
    ) as response:
        assert response.headers["content-type"].startswith(SSE)
        rate = int(response.headers["x-sample-rate"])
        events = events_of(list(response.iter_lines()))
    streamed, streamed_rate = decode(joined_audio(events), response_format)
    assert streamed_rate == rate and (response_format != "pcm" or rate == audio.PCM_RATE)
    check_done(events[-1], TEXT, len(streamed) / rate)
    assert len(events) > 2  # audio left chunk by chunk, not as one event at the end

    plain_bytes = client.audio.speech.create(**request).read()
    plain, plain_rate = decode(plain_bytes, response_format)
    assert plain_rate == rate
    if response_format == "pcm":  # the same samples' count; mp3: to its frames' padding
        assert len(streamed) == len(plain)
    else:
        assert abs(len(streamed) - len(plain)) / rate <= CODEC_SLACK_S
    wer = word_error_rate([TEXT], [transcribe(streamed, rate)])
    plain_wer = word_error_rate([TEXT], [transcribe(plain, rate)])
    assert wer <= min(MAX_WER, plain_wer + WER_MARGIN), (response_format, wer, plain_wer)


def test_the_wire_is_server_sent_events_ending_with_done(gateway: str) -> None:
    """Read as bytes: text/event-stream, each event one ``data:`` line and a blank line,
    the deltas' audio a WAV stream, done last with its usage; the admission header and
    OpenAI's ``instructions`` are taken; the gateway counts the audio it sent."""
    text = "Your order has shipped. It will arrive on Monday."
    body = {
        "model": "tts-1",
        "input": text,
        "voice": "joe",
        "response_format": "wav",
        "stream_format": "sse",
        "instructions": "Cheerful.",
    }
    counted = f"{gateway}/metrics"
    before = metric_total(counted, "triton_tts_gateway_audio_seconds_total", api="http", format="wav")
    with streamed(gateway, body, {"X-Max-Wait": "30"}) as response:
        assert response.status == 200
        assert response.headers["content-type"].split(";")[0] == SSE
        assert response.headers["x-voice"] == "joe" and response.headers["cache-control"] == "no-store"
        assert response.headers["transfer-encoding"] == "chunked"
        raw = response.read()
    assert raw.endswith(b"\n\n")
    blocks = raw[:-2].split(b"\n\n")
    for block in blocks:  # one line per event, compact JSON after "data: "
        assert block.startswith(b"data: {") and b"\n" not in block, block[:80]
    events = [json.loads(block[len(b"data: ") :]) for block in blocks]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert set(events[0]) == {"type", "audio"}
    data = joined_audio(events)
    assert data[:4] == b"RIFF"
    heard, rate = decode(data, "wav")
    check_done(events[-1], text, len(heard) / rate)
    sent = metric_total(counted, "triton_tts_gateway_audio_seconds_total", api="http", format="wav") - before
    assert sent == pytest.approx(len(heard) / rate, abs=1e-6)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"voice": "nobody"}, "voice", "unknown voice"),
        ({"stream_format": "ndjson"}, "stream_format", "unknown stream_format"),
        ({"stream_format": 1}, "stream_format", "must be"),
        ({"instructions": 42}, "instructions", "must be a string"),
        ({"response_format": "aac"}, "response_format", "not supported"),
        ({"input": "…   ---  ***"}, "input", ""),  # the server's refusal, before any byte
    ],
)
def test_refusals_before_the_stream_keep_their_status_and_json(
    gateway: str, body: dict[str, Any], param: str, words: str
) -> None:
    request = {
        "model": "gpt-4o-mini-tts",
        "voice": "alloy",
        "input": "Hello.",
        "stream_format": "sse",
        **body,
    }
    status, headers, data = post(gateway, json.dumps(request).encode())
    assert status == 400 and headers["content-type"] == "application/json"
    error = error_of(data)
    assert error["param"] == param and words in error["message"], error
    with pytest.raises(openai.BadRequestError):  # and the SDK raises its own error
        sdk(gateway).audio.speech.create(**request)


def test_captioned_speech_streams_its_own_way(gateway: str) -> None:
    body = {"model": "tts-1", "input": "Hello.", "stream_format": "sse"}
    status, _, data = post(gateway, json.dumps(body).encode(), path="/v1/audio/speech/captioned")
    error = error_of(data)
    assert status == 400 and error["param"] == "stream_format" and "'stream'" in error["message"], error


def test_leaving_mid_stream_cancels_the_synthesis(gateway: str, server: TritonServer) -> None:
    metrics = f"http://localhost:{server.metrics_port}/metrics"

    def cancelled() -> float:
        return metric_total(
            server.metrics_port, "triton_tts_requests_total", model="tts_stream", reason="cancelled"
        )

    cancelled_before = cancelled()
    body = {"model": "gpt-4o-mini-tts", "input": LONG_TEXT, "response_format": "pcm", "stream_format": "sse"}
    with streamed(gateway, body) as response:
        first = response.readline().decode()
        assert json.loads(first[len("data: ") :])["type"] == "speech.audio.delta"
        assert requests_in_flight(metrics) == 1
    wait_until(lambda: requests_in_flight(metrics) == 0, 60, "the stream to end after the hang-up")
    assert cancelled() == cancelled_before + 1  # ended by the hang-up, not by its last chunk


def test_a_failure_mid_stream_is_an_error_event_and_a_cut_body(server: TritonServer, tmp_path: Path) -> None:
    """--timeout-s passes once audio is flowing: the events so far, then an ``error`` event
    with OpenAI's error object, then the body ends without its terminating chunk, so a
    client that skips unknown events fails too. Counted and logged as a cut response."""
    with logged_gateway(server.grpc_url, tmp_path / "gateway.log", "--timeout-s", "3") as (base, log):
        body = {
            "model": "gpt-4o-mini-tts",
            "input": LONG_TEXT,
            "response_format": "pcm",
            "stream_format": "sse",
        }
        with streamed(base, body) as response, pytest.raises(IncompleteRead) as cut:
            assert response.status == 200
            response.read()
        events = events_of(cut.value.partial.decode().split("\n"))
        assert events[0]["type"] == "speech.audio.delta"
        assert [e["type"] for e in events].count("speech.audio.done") == 0
        last = events[-1]
        assert set(last) == {"type", "error"} and last["type"] == "error", last
        assert last["error"]["code"] == "timeout" and last["error"]["type"] == "server_error"
        assert metric_total(f"{base}/metrics", "triton_tts_gateway_responses_cut_total", code="timeout") == 1
        assert "Traceback" not in log()
