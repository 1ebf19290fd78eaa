"""The gateway's edge, fuzzed: generated JSON bodies, raw bytes and WebSocket messages go
through the real gateway (its own process) to the real Triton. Whatever arrives, the
caller gets an answer in OpenAI's error shape or audio: never a 5xx, never a closed
socket, and the gateway's log shows no traceback.

Kept small (the suite runs on 2 cores): about 170 examples in all, each a real request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from tests.helpers import metric_total
from tests.test_gateway import error_of, logged_gateway, post
from triton_tts.gateway.schemas import MODEL_IDS
from triton_tts.ops.server import TritonServer

FUZZ = settings(
    deadline=None,
    database=None,  # the same draws each run: what failed once fails again
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any JSON value, small.
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**600)  # past float, past int()'s digits
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
# Text worth speaking and text that is not.
texts = st.sampled_from(["Hi.", "Good morning!", "…   ---  ***", " ", "\u0000\u0007", "a" * 5000]) | st.text(
    max_size=24
)
voices = st.sampled_from(["joe", "alloy", "joe:0", "joe:³", "joe:99999999999", ":", "joe:", "nobody", " "])
speeds = (
    st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.sampled_from([0.25, 1.0, 4.0, 4.01])
)
synthesis_fields = {
    "input": texts | json_values,
    "voice": voices | json_values,
    "speed": speeds | json_values,
    "noise_scale": st.floats(-1, 3) | json_values,
    "noise_w": st.floats(-1, 3) | json_values,
}
speech_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from([*MODEL_IDS, "whisper-1", ""]) | json_values,
        "response_format": st.sampled_from(["mp3", "opus", "wav", "pcm", "flac", "aac", "ogg", ""])
        | json_values,
        "stream_format": st.sampled_from(["audio", "sse"]) | json_values,
        "instructions": json_values,
        **synthesis_fields,
    },
)
# Bodies one field away from valid, so that many reach Triton and come back as audio.
near_valid_fields = {
    "voice": voices,
    "speed": st.sampled_from([0.25, 0.5, 1, 2.5, 4, 4.01, 0.24]),
    "noise_scale": st.sampled_from([0, 0.667, 2, 2.01]),
    "noise_w": st.sampled_from([0, 0.8, 2, -0.01]),
}
near_valid_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(MODEL_IDS), "input": st.sampled_from(["Hi.", "Good morning!", "Call 911."])},
    optional={
        "response_format": st.sampled_from(["mp3", "opus", "wav", "pcm", "flac", "aac"]),
        **near_valid_fields,
    },
)
# JSON that Python's json module would take or choke on, and bytes that are no JSON.
raw_bodies = (
    st.binary(max_size=64)
    | st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n)
    | st.integers(1, 5000).map(lambda n: b'{"model": "tts-1", "input": "Hi.", "speed": 1' + b"0" * n + b"}")
    | st.sampled_from([b"\\ud800", b"\\udfff", b"\xed\xa0\x80", b"\xff", b"\\u0000"]).map(
        lambda s: b'{"model": "tts-1", "input": "Hi ' + s + b'"}'
    )
    | st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0", b"1_0"]).map(
        lambda n: b'{"model": "tts-1", "input": "Hi.", "speed": ' + n + b"}"
    )
)
socket_messages = (
    st.fixed_dictionaries(
        {"type": st.just("speak"), "input": st.sampled_from(["Hi.", "Good morning!"])},
        optional={"format": st.sampled_from(["s16le", "f32le", "mp3"]), **near_valid_fields},
    ).map(json.dumps)
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["speak", "cancel", "ping"]) | json_values},
        optional={"format": st.sampled_from(["s16le", "f32le", "mp3"]) | json_values, **synthesis_fields},
    ).map(lambda message: json.dumps(message, allow_nan=True))
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | raw_bodies.map(lambda raw: raw.decode("utf-8", "replace"))
)


@pytest.fixture(scope="module")
def gateway_logged(
    server: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Callable[[], str]]]:
    log_path = tmp_path_factory.mktemp("fuzz") / "gateway.log"
    with logged_gateway(server.grpc_url, log_path) as running:
        yield running
        assert "Traceback" not in running[1](), running[1]()[-6000:]


def answered_well(status: int, data: bytes) -> None:
    assert status < 500, (status, data[:300])
    if status != 200:
        error = error_of(data)
        assert error["type"] == "invalid_request_error" and error["code"], error


def json_body(body: dict[str, Any]) -> bytes:
    return json.dumps(body, allow_nan=True).encode()


@settings(FUZZ, max_examples=70)
@given(body=speech_bodies | near_valid_bodies)
@example(body={"model": "tts-1", "input": "Hi.", "response_format": ["mp3"]})
@example(body={"model": "tts-1", "input": "Hi.", "voice": "joe:³"})
@example(body={"model": "tts-1", "input": "Hi.", "speed": int("9" * 500)})
@example(body={"model": "tts-1", "input": "Hi.", "speed": math.nan})
def test_generated_bodies_never_get_a_5xx(
    gateway_logged: tuple[str, Callable[[], str]], body: dict[str, Any]
) -> None:
    base, _ = gateway_logged
    answered_well(*_post(base, json_body(body)))


@settings(FUZZ, max_examples=50)
@given(raw=raw_bodies)
@example(raw=b"[" * 4000 + b"]" * 4000)
@example(raw=b'{"model": "tts-1", "input": "Hi \\ud800"}')
def test_raw_bytes_never_get_a_5xx(gateway_logged: tuple[str, Callable[[], str]], raw: bytes) -> None:
    base, _ = gateway_logged
    answered_well(*_post(base, raw))


def _post(base: str, body: bytes) -> tuple[int, bytes]:
    status, _, data = post(base, body)
    return status, data


@pytest.fixture(scope="module")
def fuzzed_socket(gateway_logged: tuple[str, Callable[[], str]]) -> Iterator[Connection]:
    base, _ = gateway_logged
    with connect(base.replace("http://", "ws://") + "/v1/audio/speech/ws", open_timeout=30) as ws:
        yield ws


def _next_json(ws: Connection) -> dict[str, Any]:
    while True:
        message = ws.recv(timeout=60)
        if isinstance(message, str):
            parsed: dict[str, Any] = json.loads(message)
            if parsed.get("type") != "ping":
                return parsed


@settings(FUZZ, max_examples=50)
@given(message=socket_messages)
@example(message="[" * 4000 + "]" * 4000)
@example(message='{"type": "speak", "input": "Hi.", "voice": "joe:³"}')
@example(message='{"type": "speak", "input": "Hi.", "speed": ' + "9" * 500 + "}")
def test_generated_messages_get_answers_and_the_socket_stays_open(
    gateway_logged: tuple[str, Callable[[], str]], fuzzed_socket: Connection, message: str | bytes
) -> None:
    """After each message, a ping: its pong comes back on the same socket. A synthesis the
    message started is read to its end (the gateway counts it in flight from the start)."""
    base, _ = gateway_logged
    fuzzed_socket.send(message)
    fuzzed_socket.send(json.dumps({"type": "ping"}))
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["type"] != "pong":
        seen.append(_next_json(fuzzed_socket))

    def ended(reply: dict[str, Any]) -> bool:
        return reply["type"] in ("end", "cancelled") or (reply["type"] == "error" and reply["id"] is not None)

    running = metric_total(f"{base}/metrics", "triton_tts_gateway_requests_in_flight", api="websocket")
    if (running or any(m["type"] == "start" for m in seen)) and not any(ended(m) for m in seen):
        while not ended(seen[-1]):
            seen.append(_next_json(fuzzed_socket))
    for reply in seen:
        if reply["type"] == "error":
            assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["code"], reply


text_streams = st.tuples(
    st.text(max_size=60),  # the first append opens the stream, whatever its text
    st.lists(
        st.fixed_dictionaries({"type": st.just("append"), "text": st.text(max_size=60) | json_values})
        | st.just({"type": "flush"})
        | st.just({"type": "append"}),
        max_size=8,
    ),
)


@settings(FUZZ, max_examples=25)
@given(stream=text_streams)
@example(stream=("Dr", [{"type": "append", "text": ". Smith paid 3"}, {"type": "append", "text": ".5x. ok"}]))
@example(stream=("\x00\u200b", [{"type": "flush"}, {"type": "append", "text": "* * *"}]))
def test_generated_text_streams_end_and_the_socket_stays_open(
    gateway_logged: tuple[str, Callable[[], str]], fuzzed_socket: Connection, stream: tuple[str, list[Any]]
) -> None:
    """Any pieces, flushes and malformed appends, then end: the stream ends (its end, or an
    error with its id), every error is a caller's with a code, and a ping still gets its pong."""
    first, rest = stream
    fuzzed_socket.send(json.dumps({"type": "append", "text": first}))
    for message in rest:
        fuzzed_socket.send(json.dumps(message, allow_nan=True))
    fuzzed_socket.send(json.dumps({"type": "end"}))
    seen = [_next_json(fuzzed_socket)]
    while not (seen[-1]["type"] == "end" or (seen[-1]["type"] == "error" and seen[-1]["id"] is not None)):
        seen.append(_next_json(fuzzed_socket))
    fuzzed_socket.send(json.dumps({"type": "ping"}))
    while seen[-1]["type"] != "pong":  # what the stream's end left unanswered, then the pong
        seen.append(_next_json(fuzzed_socket))
    for reply in seen:
        if reply["type"] == "error":
            assert reply["error"]["type"] == "invalid_request_error" and reply["error"]["code"], reply
