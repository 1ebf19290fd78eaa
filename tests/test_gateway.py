"""The OpenAI-compatible gateway (``triton-tts gateway``, its own process) in front of the
real Triton: OpenAI's own Python SDK asks for speech in every format, the audio is decoded
and heard by the speech recogniser; errors come back as OpenAI's error JSON with the
status codes the SDK maps; a caller that hangs up cancels the synthesis on the server."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.client import IncompleteRead
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import openai
import pytest
import soundfile as sf
import tritonclient.http as httpclient

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    gateway_outcomes,
    metric_total,
    model_counts,
    running_gateway,
    stream_paragraph_chunks,
    wait_until,
)
from triton_tts.client import (
    RequestRejected,
    ServerBusy,
    ServerUnavailable,
    TimedOut,
    TTSClient,
    TTSError,
    Unauthorized,
)
from triton_tts.contract.validation import MAX_SPEED, MIN_SPEED
from triton_tts.gateway import audio
from triton_tts.gateway.errors import from_tts_error
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.ops.lifecycle import requests_in_flight
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.quality.intelligibility import transcribe, word_error_rate

pytestmark = pytest.mark.server  # its own servers (module fixtures)

# Several sentences: a stream of several chunks (the first is its first clause).
TEXT = (
    "The weather today is sunny with a light breeze. Thank you for calling, how can I help you today? "
    "Your appointment is on Monday at ten in the morning. We will send the documents by email tomorrow."
)
LONG_COPIES = 6  # of PARAGRAPH: 3,629 characters, minutes of speech
LONG_TEXT = " ".join([PARAGRAPH] * LONG_COPIES)
# A served stream against tts: the speech recogniser's errors may rise by this much (the
# voice's own noise makes each draw differ; broken audio scores near 1).
WER_MARGIN = 0.15
NO_NOISE = {"noise_scale": 0.0, "noise_w": 0.0}
CODEC_SLACK_S = 0.1
KEY = "a-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def sdk(base: str, api_key: str = "not-needed", **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=api_key, max_retries=0, **options)


def decode(data: bytes, response_format: str) -> tuple[npt.NDArray[np.float32], int]:
    if response_format == "pcm":  # OpenAI's pcm: 16-bit little-endian at 24 kHz
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0, audio.PCM_RATE
    samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    return np.asarray(samples, np.float32), int(rate)


def post(
    base: str, body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/audio/speech"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        base + path, data=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def error_of(data: bytes) -> dict[str, Any]:
    body = json.loads(data)
    assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    return dict(body["error"])


@contextmanager
def logged_gateway(
    grpc_url: str, log_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Callable[[], str]]]:
    """``triton-tts gateway`` in its own process, as helpers.running_gateway starts it, with
    its log (uvicorn's and the gateway's own) kept in ``log_path``: yields the base URL and
    a reader of the log so far."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "triton_tts.cli", "gateway", "--port", str(port), "--triton-url", grpc_url]
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [*cmd, *args], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    def read_log() -> str:
        return log_path.read_text(encoding="utf-8", errors="replace")

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/health/ready", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return process.poll() is not None

    try:
        wait_until(ready, 120, "the gateway to be ready")
        assert process.poll() is None, f"the gateway exited with {process.returncode}:\n{read_log()[-4000:]}"
        yield base, read_log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def direct(server: TritonServer) -> tuple[npt.NDArray[np.float32], int]:
    """TEXT as tts_stream makes it for a tritonclient caller, noise off: the audio the
    gateway's must be."""
    with TTSClient(server.grpc_url, "grpc") as client:
        chunks = list(client.stream(TEXT, noise_scale=0.0, noise_w=0.0))
    return np.concatenate([c.audio for c in chunks]), chunks[0].sample_rate


@pytest.fixture(scope="module")
def http(server: TritonServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    yield client
    client.close()


@pytest.mark.parametrize("response_format", ["mp3", "opus", "flac", "wav", "pcm"])
def test_the_openai_sdk_gets_intelligible_speech(
    gateway: str, direct: tuple[npt.NDArray[np.float32], int], response_format: str
) -> None:
    client = sdk(gateway)
    pieces: list[bytes] = []
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input=TEXT,
        response_format=response_format,  # type: ignore[arg-type]
        extra_body=NO_NOISE,  # an extension: the same speech as the reference, to compare
    ) as response:
        assert response.headers["content-type"] == audio.CONTENT_TYPES[response_format]
        header_rate = int(response.headers["x-sample-rate"])
        pieces.extend(response.iter_bytes())
    heard, rate = decode(b"".join(pieces), response_format)
    assert rate == header_rate
    reference, reference_rate = direct
    # the stream's audio, at the rate the header says: to the sample in 16-bit formats, to
    # the codec's delay and padding in MP3 and Opus (tens of milliseconds)
    if response_format in ("wav", "flac"):
        assert rate == reference_rate and len(heard) == len(reference)
        assert np.abs(heard - np.clip(reference, -1, 1)).max() <= 1.01 / 32767
    else:
        assert abs(len(heard) / rate - len(reference) / reference_rate) <= CODEC_SLACK_S
    served_wer = word_error_rate([TEXT], [transcribe(heard, rate)])
    direct_wer = word_error_rate([TEXT], [transcribe(reference, reference_rate)])
    assert served_wer <= direct_wer + WER_MARGIN, (response_format, served_wer, direct_wer)


def test_the_first_bytes_leave_while_the_rest_is_made_and_hanging_up_cancels(
    gateway: str, server: TritonServer, http: httpclient.InferenceServerClient
) -> None:
    """A text of minutes: its first bytes arrive while tts_stream still has it in flight
    (read from Triton's own metrics, not a clock); the caller then hangs up and the server
    stops making its chunks."""
    metrics = f"http://localhost:{server.metrics_port}/metrics"
    made_before = model_counts(http, "tts_chunk")[0]
    client = sdk(gateway)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=LONG_TEXT, response_format="pcm"
    ) as response:
        first = next(response.iter_bytes(4096))
        in_flight_at_first_bytes = requests_in_flight(metrics)
    assert first and in_flight_at_first_bytes == 1
    # hung up: the stream ends on the server (its gRPC call cancelled), long before its end
    wait_until(lambda: requests_in_flight(metrics) == 0, 60, "the stream to end after the hang-up")
    made = model_counts(http, "tts_chunk")[0] - made_before
    time.sleep(3)
    assert model_counts(http, "tts_chunk")[0] - made_before == made  # nothing more is made
    assert made < stream_paragraph_chunks(LONG_COPIES) // 2, made
    assert (
        metric_total(server.metrics_port, "triton_tts_requests_total", model="tts_stream", reason="cancelled")
        >= 1
    )


def test_models_and_voices(gateway: str) -> None:
    client = sdk(gateway)
    ids = {m.id for m in client.models.list()}
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "triton-tts"} <= ids
    assert client.models.retrieve("tts-1").id == "tts-1"
    with urllib.request.urlopen(f"{gateway}/v1/audio/voices", timeout=30) as response:
        listing = json.load(response)
    assert listing["default"] == listing["voices"][0]["id"] == "joe"
    assert listing["voices"][0]["sample_rate"] == 22050 and listing["voices"][0]["language"] == "en-us"
    assert listing["aliases"]["alloy"] == "joe"
    assert listing["speed"] == {"min": MIN_SPEED, "max": MAX_SPEED}
    # a served voice by its own name, and an alias, give the same voice
    for voice in ("joe", "nova"):
        status, headers, _ = post(
            gateway, json.dumps({"model": "tts-1", "input": "Hi.", "voice": voice}).encode()
        )
        assert status == 200 and headers["x-voice"] == "joe"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "tts-1", "input": ""}, "input", "empty"),
        ({"model": "tts-1", "input": "   "}, "input", "empty"),
        ({"model": "tts-1"}, "input", "must be a string"),
        ({"model": "tts-1", "input": 42}, "input", "must be a string"),
        ({"model": "tts-1", "input": "x" * 4097}, "input", "at most 4096"),
        ({"input": "Hello."}, "model", "required"),
        ({"model": "whisper-1", "input": "Hello."}, "model", "unknown model"),
        ({"model": "tts-1", "input": "Hello.", "voice": "nobody"}, "voice", "unknown voice"),
        ({"model": "tts-1", "input": "Hello.", "voice": "joe:nobody"}, "voice", "no speaker"),
        ({"model": "tts-1", "input": "Hello.", "response_format": "aac"}, "response_format", "not supported"),
        ({"model": "tts-1", "input": "Hello.", "response_format": "ogg"}, "response_format", "unknown"),
        ({"model": "tts-1", "input": "Hello.", "speed": 4.5}, "speed", "outside"),
        ({"model": "tts-1", "input": "Hello.", "speed": "fast"}, "speed", "must be a number"),
        ({"model": "tts-1", "input": "Hello.", "stream_format": "ndjson"}, "stream_format", "unknown"),
        # bodies that were 500s with a traceback (issue 23)
        ({"model": "tts-1", "input": "Hello.", "response_format": ["mp3"]}, "response_format", "must be"),
        ({"model": "tts-1", "input": "Hello.", "voice": "joe:³"}, "voice", "no speaker"),
        ({"model": "tts-1", "input": "Hello.", "voice": "joe:" + "9" * 5000}, "voice", "too long"),
        ({"model": "tts-1", "input": "Hello.", "speed": 10**500}, "speed", "must be a number"),
        ({"model": "tts-1", "input": "Hello.", "noise_w": 1e308 * 10}, "noise_w", "must be a number"),
    ],
)
def test_bad_input_gets_400_in_openais_error_json(
    gateway: str, body: dict[str, Any], param: str, words: str
) -> None:
    status, _, data = post(gateway, json.dumps(body).encode())
    error = error_of(data)
    assert status == 400 and error["type"] == "invalid_request_error", (status, error)
    assert error["param"] == param and words in error["message"], error


def test_the_sdk_raises_its_own_error_types(gateway: str) -> None:
    client = sdk(gateway)
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model="tts-1", voice="alloy", input="")
    assert caught.value.status_code == 400 and "empty" in caught.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_what_the_server_refuses_is_a_400_too(gateway: str) -> None:
    """Text the gateway lets through but the server refuses (nothing to say in it): the
    server's own words, as a 400."""
    status, _, data = post(gateway, json.dumps({"model": "tts-1", "input": "…   ---  ***"}).encode())
    error = error_of(data)
    assert status == 400 and error["code"] == "rejected_by_server", error


def test_malformed_and_oversized_bodies(gateway: str) -> None:
    status, _, data = post(gateway, b"{not json")
    assert status == 400 and error_of(data)["code"] == "invalid_json"
    status, _, data = post(gateway, b"[1, 2]")
    assert status == 400 and error_of(data)["code"] == "invalid_json"
    # JSON that Python's own parser would have choked on, or read into something unspeakable
    for body in (
        b"[" * 4000 + b"]" * 4000,  # past any sane depth (Python: RecursionError)
        b'{"model": "tts-1", "input": "Hi \\ud800 there"}',  # a lone surrogate (not UTF-8)
        b'{"model": "tts-1", "input": "\xed\xa0\x80"}',  # the same as raw bytes
        b'{"model": "tts-1", "input": "Hi.", "speed": 1' + b"0" * 5000 + b"}",  # past int()'s digits
        b"\xff\xfe{}",
    ):
        status, _, data = post(gateway, body)
        assert status == 400 and error_of(data)["code"] == "invalid_json", (body[:60], data)
    status, _, data = post(gateway, b'{"model": "tts-1", "input": "Hi.", "speed": NaN}')
    assert status == 400 and error_of(data)["param"] == "speed", data
    status, _, data = post(gateway, json.dumps({"model": "tts-1", "input": "x" * 70_000}).encode())
    assert status == 413 and error_of(data)["code"] == "request_too_large"
    status, _, data = post(gateway, b"", path="/v1/no/such/route")
    assert status == 404 and error_of(data)["code"] == "not_found"


def test_api_keys(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, env={"TRITON_TTS_API_KEY": "first-key,second-key"}) as base:
        body = json.dumps({"model": "tts-1", "input": "Hello.", "response_format": "wav"}).encode()
        status, headers, data = post(base, body)
        assert status == 401 and error_of(data)["code"] == "invalid_api_key" and headers["www-authenticate"]
        status, _, _ = post(base, body, {"Authorization": "Bearer wrong-key"})
        assert status == 401
        for key in ("first-key", "second-key"):
            status, _, data = post(base, body, {"Authorization": f"Bearer {key}"})
            assert status == 200 and data[:4] == b"RIFF"
        status, _, data = post(base, body, {"x-api-key": "second-key"})
        assert status == 200 and data[:4] == b"RIFF"
        with pytest.raises(openai.AuthenticationError):
            sdk(base, api_key="wrong-key").models.list()
        assert {m.id for m in sdk(base, api_key="second-key").models.list()} >= {"tts-1"}
        # the probes and the page stay open (kubelets and browsers send no key)
        for path in ("/health/live", "/health/ready", "/"):
            with urllib.request.urlopen(base + path, timeout=30) as response:
                assert response.status == 200


def cors_headers(base: str, origin: str) -> dict[str, str]:
    request = urllib.request.Request(
        f"{base}/v1/audio/speech",
        method="OPTIONS",
        headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as err:
        return {k.lower(): v for k, v in err.headers.items()}


def test_cors_is_off_unless_origins_are_named(gateway: str, server: TritonServer) -> None:
    assert "access-control-allow-origin" not in cors_headers(gateway, "https://app.example")
    with running_gateway(server.grpc_url, "--cors-origin", "https://app.example") as base:
        assert (
            cors_headers(base, "https://app.example")["access-control-allow-origin"] == "https://app.example"
        )
        assert "access-control-allow-origin" not in cors_headers(base, "https://other.example")


def test_an_unreachable_triton_is_a_503() -> None:
    nowhere = f"localhost:{free_port()}"
    with running_gateway(nowhere, ready=False) as base:
        with urllib.request.urlopen(base + "/health/live", timeout=30) as response:
            assert response.status == 200  # alive: not restarted for Triton's absence
        try:
            urllib.request.urlopen(base + "/health/ready", timeout=30)
            raise AssertionError("ready without a Triton")
        except urllib.error.HTTPError as err:
            assert err.code == 503
        body = json.dumps({"model": "tts-1", "input": "Hello."}).encode()
        status, _, data = post(base, body)
        assert status == 503 and error_of(data)["type"] == "server_error", data
        with pytest.raises(openai.InternalServerError):
            sdk(base).audio.speech.create(model="tts-1", voice="alloy", input="Hello.")


def test_no_audio_in_time_is_a_504(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, "--timeout-s", "0.05") as base:
        status, _, data = post(base, json.dumps({"model": "tts-1", "input": LONG_TEXT}).encode())
        error = error_of(data)
        assert status == 504 and error["code"] == "timeout" and error["type"] == "server_error", error


def test_a_failure_after_the_status_line_cuts_the_body_detectably(
    server: TritonServer, tmp_path: Path
) -> None:
    """A synthesis that fails once its audio is flowing (here: --timeout-s passes mid-text)
    cannot change the 200 already sent: the chunked body ends without its terminating
    chunk, so the caller's HTTP client raises instead of keeping a short file; the gateway
    logs it (no traceback) and counts it. A format sent whole (flac) fails before its
    status line instead, and gets its own error status."""
    with logged_gateway(server.grpc_url, tmp_path / "gateway.log", "--timeout-s", "3") as (base, log):
        body = {"model": "tts-1", "input": LONG_TEXT, "response_format": "pcm"}
        request = urllib.request.Request(
            f"{base}/v1/audio/speech",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            assert response.status == 200
            with pytest.raises(IncompleteRead) as cut:
                response.read()
        assert len(cut.value.partial) > 0  # audio came first
        # OpenAI's SDK raises too (httpx: RemoteProtocolError)
        with (
            sdk(base).audio.speech.with_streaming_response.create(
                model="tts-1", voice="alloy", input=LONG_TEXT, response_format="mp3"
            ) as streamed,
            pytest.raises(Exception, match="incomplete chunked read"),
        ):
            for _ in streamed.iter_bytes():
                pass

        status, _, data = post(base, json.dumps({**body, "response_format": "flac"}).encode())
        assert status == 504 and error_of(data)["code"] == "timeout", (status, data[:200])

        metrics = f"{base}/metrics"
        assert metric_total(metrics, "triton_tts_gateway_responses_cut_total", code="timeout") == 2
        assert gateway_outcomes(base, "http") == {"timeout": 3}
        text = log()
        assert text.count("speech response cut after") == 2, text[-3000:]
        assert "Traceback" not in text, text[-3000:]


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (RequestRejected("TEXT has nothing the voice can pronounce"), 400, "rejected_by_server"),
        (ServerBusy("server busy: ...; retry after 2.5 s", 2.5), 503, "server_busy"),
        (ServerUnavailable("cannot reach localhost:8001"), 503, "triton_unavailable"),
        (TimedOut("deadline exceeded"), 504, "timeout"),
        (Unauthorized("localhost:8001 needs an API key"), 502, "triton_unauthorized"),
        (TTSError("Stub process is not healthy."), 500, "synthesis_failed"),  # a server fault
    ],
)
def test_the_clients_errors_map_to_the_callers_or_the_servers_side(
    error: TTSError, status: int, code: str
) -> None:
    """Only a refusal of the text itself is the caller's (4xx); the rest is the server's."""
    mapped = from_tts_error(error, GatewaySettings())
    assert (mapped.status, mapped.code) == (status, code)
    assert mapped.type == ("invalid_request_error" if status < 500 else "server_error")
    if isinstance(error, ServerBusy):
        assert mapped.headers == {"Retry-After": "3"}


# The gateway's own metrics (GET /metrics), read after real requests: each synthesis is
# counted once by how it ended (the OpenAI error code its caller got, ok, or cancelled).


def test_http_syntheses_are_counted_by_how_they_ended(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, env={"TRITON_TTS_API_KEY": KEY}) as base:
        metrics = f"{base}/metrics"
        # Prometheus scrapes without a key, like the probes
        with urllib.request.urlopen(metrics, timeout=30) as page:
            assert page.status == 200 and page.headers["content-type"].startswith("text/plain")
        assert gateway_outcomes(base, "http") == {}
        assert metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="http") == 0

        asked = time.monotonic()
        status, _, data = post(
            base, json.dumps({"model": "tts-1", "input": TEXT, "response_format": "wav"}).encode(), AUTH
        )
        answered = time.monotonic() - asked
        assert status == 200
        samples, rate = sf.read(io.BytesIO(data), dtype="float32")
        # the audio counted is the audio sent, to the sample
        assert metric_total(
            metrics, "triton_tts_gateway_audio_seconds_total", api="http", format="wav"
        ) == pytest.approx(len(samples) / rate, abs=1e-6)
        assert (
            metric_total(metrics, "triton_tts_gateway_first_audio_seconds_count", api="http", format="wav")
            == 1
        )
        first_audio = metric_total(
            metrics, "triton_tts_gateway_first_audio_seconds_sum", api="http", format="wav"
        )
        assert 0 < first_audio <= answered  # the first bytes left before the caller had them all

        refusals = {
            "invalid_api_key": (json.dumps({"model": "tts-1", "input": "Hi."}).encode(), {}),
            "invalid_value": (json.dumps({"model": "tts-1", "input": "Hi.", "speed": 9}).encode(), AUTH),
            "model_not_found": (json.dumps({"model": "whisper-1", "input": "Hi."}).encode(), AUTH),
            "invalid_json": (b"{not json", AUTH),
            "request_too_large": (json.dumps({"model": "tts-1", "input": "x" * 70_000}).encode(), AUTH),
            "rejected_by_server": (json.dumps({"model": "tts-1", "input": "…   ---  ***"}).encode(), AUTH),
        }
        for code, (body, headers) in refusals.items():
            status, _, data = post(base, body, headers)
            assert error_of(data)["code"] == code and status >= 400, (code, status)

        # a caller who hangs up: counted once the server side has let go
        client = sdk(base, api_key=KEY)
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=LONG_TEXT, response_format="mp3"
        ) as response:
            received = response.iter_bytes(1024)  # kept: a dropped iterator closes the response
            assert next(received)
            assert metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="http") == 1
        wait_until(
            lambda: metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="http") == 0,
            60,
            "the hang-up counted",
        )
        assert gateway_outcomes(base, "http") == {"ok": 1, "cancelled": 1, **{code: 1 for code in refusals}}
        assert (
            metric_total(metrics, "triton_tts_gateway_first_audio_seconds_count", api="http", format="mp3")
            == 1
        )
        assert metric_total(metrics, "triton_tts_gateway_audio_seconds_total", api="http", format="mp3") > 0


def test_an_unreachable_triton_is_counted_and_metrics_can_be_turned_off(server: TritonServer) -> None:
    with running_gateway(f"localhost:{free_port()}", ready=False) as base:
        with pytest.raises(openai.InternalServerError):
            sdk(base).audio.speech.create(model="tts-1", voice="alloy", input="Hello.")
        assert gateway_outcomes(base, "http") == {"triton_unavailable": 1}
    with running_gateway(server.grpc_url, "--no-metrics") as base:
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/metrics", timeout=30)
        assert missing.value.code == 404
