"""The gateway's WebSocket with a real WebSocket client (the `websockets` library): a JSON
header, then the stream's PCM chunk by chunk, then a JSON end; a heartbeat while idle; a
cancel message or a closed socket stops the synthesis on the server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    gateway_outcomes,
    metric_total,
    model_counts,
    running_gateway,
    stream_paragraph_chunks,
    wait_until,
)
from triton_tts.client import TTSClient
from triton_tts.ops.lifecycle import requests_in_flight
from triton_tts.ops.server import TritonServer

TEXT = "Thanks for calling. Your order has shipped, and it should arrive on Thursday before noon."
LONG_COPIES = 6
LONG_TEXT = " ".join([PARAGRAPH] * LONG_COPIES)
NO_NOISE = {"noise_scale": 0.0, "noise_w": 0.0}


def ws_url(base: str, query: str = "") -> str:
    return base.replace("http://", "ws://") + "/v1/audio/speech/ws" + query


@pytest.fixture()
def socket(gateway: str) -> Iterator[Connection]:
    with connect(ws_url(gateway), open_timeout=30) as ws:
        yield ws


@pytest.fixture(scope="module")
def http(server: TritonServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    yield client
    client.close()


def receive(ws: Connection, timeout: float = 120) -> str | bytes:
    return ws.recv(timeout=timeout)


def next_json(ws: Connection, skip_pings: bool = True) -> dict[str, Any]:
    """The next JSON message (binary frames in between are an error here)."""
    while True:
        message = receive(ws)
        assert isinstance(message, str), f"a binary frame where a JSON message was due ({len(message)} bytes)"
        parsed: dict[str, Any] = json.loads(message)
        if not (skip_pings and parsed["type"] == "ping"):
            return parsed


def speak_and_collect(
    ws: Connection, text: str, **options: Any
) -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    ws.send(json.dumps({"type": "speak", "input": text, **options}))
    return collect_frames(ws)


def collect_frames(ws: Connection) -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    """A synthesis's start, its binary frames, and the JSON message after them."""
    start = next_json(ws)
    assert start["type"] == "start", start
    frames: list[bytes] = []
    while True:
        message = receive(ws)
        if isinstance(message, bytes):
            frames.append(message)
            continue
        parsed = json.loads(message)
        if parsed["type"] == "ping":
            continue
        return start, frames, parsed


@pytest.fixture(scope="module")
def direct(server: TritonServer) -> list[npt.NDArray[np.float32]]:
    """TEXT's chunks as tts_stream makes them for a tritonclient caller, noise off."""
    with TTSClient(server.grpc_url, "grpc") as client:
        return [c.audio for c in client.stream(TEXT, noise_scale=0.0, noise_w=0.0)]


@pytest.mark.parametrize(("fmt", "dtype", "scale"), [("s16le", "<i2", 32768.0), ("f32le", "<f4", 1.0)])
def test_a_header_the_streams_chunks_and_an_end(
    socket: Connection, direct: list[npt.NDArray[np.float32]], fmt: str, dtype: str, scale: float
) -> None:
    start, frames, end = speak_and_collect(socket, TEXT, format=fmt, voice="alloy", **NO_NOISE)
    assert start == {
        "type": "start",
        "id": 1,
        "sample_rate": 22050,
        "channels": 1,
        "format": fmt,
        "voice": "joe",
    }
    assert end["type"] == "end" and end["id"] == 1, end
    # one binary frame per chunk, each the chunk tts_stream made
    assert len(frames) == end["chunks"] == len(direct) >= 2
    for frame, chunk in zip(frames, direct, strict=True):
        heard = np.frombuffer(frame, dtype).astype(np.float32) / scale
        assert heard.shape == chunk.shape
        assert np.abs(heard - np.clip(chunk, -1, 1)).max() <= 1.01 / 32767
    assert end["samples"] == sum(len(c) for c in direct)
    assert end["audio_seconds"] == pytest.approx(end["samples"] / 22050)
    assert end["synthesis_seconds"] > 0


def test_one_socket_carries_requests_one_after_another(socket: Connection) -> None:
    for number in (1, 2, 3):
        start, frames, end = speak_and_collect(socket, "Good morning!")
        assert start["id"] == end["id"] == number and end["type"] == "end" and frames


def test_errors_are_messages_and_the_socket_serves_on(socket: Connection) -> None:
    socket.send("not json")
    assert next_json(socket)["error"]["code"] == "invalid_message"
    socket.send(json.dumps({"type": "speak", "input": ""}))
    error = next_json(socket)
    assert error["type"] == "error" and error["id"] == 1 and error["error"]["param"] == "input", error
    socket.send(json.dumps({"type": "speak", "input": "Hello.", "format": "mp3"}))
    assert next_json(socket)["error"]["param"] == "format"
    socket.send(json.dumps({"type": "speak", "input": "Hello.", "speed": 9}))
    assert next_json(socket)["error"]["param"] == "speed"
    # a second speak while one is in progress is refused; the first goes on
    socket.send(json.dumps({"type": "speak", "input": PARAGRAPH}))
    socket.send(json.dumps({"type": "speak", "input": "Me too."}))
    messages: list[dict[str, Any]] = []
    while not messages or messages[-1].get("type") != "end":
        message = receive(socket)
        if isinstance(message, str):
            messages.append(json.loads(message))
    kinds = [m["type"] for m in messages if m["type"] != "ping"]
    assert kinds in (["start", "error", "end"], ["error", "start", "end"]), messages
    refusal = next(m for m in messages if m["type"] == "error")
    assert refusal["error"]["code"] == "busy_socket"
    _, frames, end = speak_and_collect(socket, "Still here.")
    assert end["type"] == "end" and frames


def test_a_heartbeat_while_idle(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, "--heartbeat-s", "0.3") as base, connect(ws_url(base)) as ws:
        pings = [json.loads(receive(ws, timeout=5)) for _ in range(3)]
        assert [p["type"] for p in pings] == ["ping"] * 3
        assert pings[0]["time"] < pings[1]["time"] < pings[2]["time"]
        ws.send(json.dumps({"type": "ping"}))
        assert next_json(ws)["type"] == "pong"


def in_flight(server: TritonServer) -> int | None:
    return requests_in_flight(f"http://localhost:{server.metrics_port}/metrics")


def cancelled(server: TritonServer) -> float:
    return metric_total(
        server.metrics_port, "triton_tts_requests_total", model="tts_stream", reason="cancelled"
    )


def assert_stops_making_chunks(
    http: httpclient.InferenceServerClient, server: TritonServer, made_before: int
) -> None:
    wait_until(lambda: in_flight(server) == 0, 60, "the stream to end on the server")
    made = model_counts(http, "tts_chunk")[0] - made_before
    time.sleep(3)
    assert model_counts(http, "tts_chunk")[0] - made_before == made  # nothing more is made
    assert made < stream_paragraph_chunks(LONG_COPIES) // 2, made


def test_a_cancel_message_stops_the_synthesis(
    socket: Connection, server: TritonServer, http: httpclient.InferenceServerClient
) -> None:
    made_before, cancelled_before = model_counts(http, "tts_chunk")[0], cancelled(server)
    socket.send(json.dumps({"type": "speak", "input": LONG_TEXT}))
    assert next_json(socket)["type"] == "start"
    assert isinstance(receive(socket), bytes)
    assert in_flight(server) == 1
    socket.send(json.dumps({"type": "cancel"}))
    while True:  # chunks already on their way may come first
        message = receive(socket)
        if isinstance(message, str) and json.loads(message)["type"] == "cancelled":
            break
    assert_stops_making_chunks(http, server, made_before)
    assert cancelled(server) == cancelled_before + 1
    _, frames, end = speak_and_collect(socket, "After the cancel.")
    assert end["type"] == "end" and frames


def test_closing_the_socket_stops_the_synthesis(
    gateway: str, server: TritonServer, http: httpclient.InferenceServerClient
) -> None:
    made_before, cancelled_before = model_counts(http, "tts_chunk")[0], cancelled(server)
    with connect(ws_url(gateway)) as ws:
        ws.send(json.dumps({"type": "speak", "input": LONG_TEXT}))
        assert next_json(ws)["type"] == "start"
        assert isinstance(receive(ws), bytes)
        assert in_flight(server) == 1
    assert_stops_making_chunks(http, server, made_before)
    wait_until(lambda: cancelled(server) == cancelled_before + 1, 30, "the cancelled count")


def test_api_keys_on_the_socket(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, env={"TRITON_TTS_API_KEY": "socket-key"}) as base:
        with connect(ws_url(base)) as ws:
            error = next_json(ws)
            assert error["type"] == "error" and error["error"]["code"] == "invalid_api_key"
            with pytest.raises(ConnectionClosed) as closed:
                receive(ws, timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        for url, headers in (
            (ws_url(base, "?api_key=socket-key"), {}),
            (ws_url(base), {"Authorization": "Bearer socket-key"}),
        ):
            with connect(url, additional_headers=headers) as ws:
                _, frames, end = speak_and_collect(ws, "Hello.")
                assert end["type"] == "end" and frames


def test_pages_from_other_origins_may_not_open_the_socket(gateway: str, server: TritonServer) -> None:
    """Browsers let any page open a WebSocket anywhere; the gateway takes only its own page's
    origin and the --cors-origin list (clients that are not browsers send no Origin)."""
    with connect(ws_url(gateway), origin="https://elsewhere.example") as ws:  # type: ignore[arg-type]
        error = next_json(ws)
        assert error["type"] == "error" and error["error"]["code"] == "origin", error
        with pytest.raises(ConnectionClosed) as closed:
            receive(ws, timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    with connect(ws_url(gateway), origin=gateway) as ws:  # type: ignore[arg-type]
        _, frames, end = speak_and_collect(ws, "Same origin.")
        assert end["type"] == "end" and frames
    with (
        running_gateway(server.grpc_url, "--cors-origin", "https://app.example") as base,
        connect(ws_url(base), origin="https://app.example") as ws,  # type: ignore[arg-type]
    ):
        _, frames, end = speak_and_collect(ws, "Allowed origin.")
        assert end["type"] == "end" and frames


def test_a_synthesis_past_the_timeout_ends_with_an_error(server: TritonServer) -> None:
    with running_gateway(server.grpc_url, "--timeout-s", "0.05") as base, connect(ws_url(base)) as ws:
        ws.send(json.dumps({"type": "speak", "input": LONG_TEXT}))
        while True:
            message = receive(ws)
            if isinstance(message, str) and json.loads(message)["type"] in ("error", "end"):
                break
        error = json.loads(message)
        assert error["type"] == "error" and error["error"]["code"] == "timeout", error


def test_websocket_syntheses_and_open_sockets(server: TritonServer) -> None:
    with running_gateway(server.grpc_url) as base:
        metrics = f"{base}/metrics"
        assert metric_total(metrics, "triton_tts_gateway_websockets_open") == 0
        with connect(ws_url(base), open_timeout=30) as ws:
            wait_until(
                lambda: metric_total(metrics, "triton_tts_gateway_websockets_open") == 1,
                30,
                "the socket counted",
            )
            start, frames, end = speak_and_collect(ws, TEXT, format="f32le")
            assert end["type"] == "end" and sum(len(f) for f in frames) // 4 == end["samples"]
            # the audio counted is the audio sent, to the sample
            assert metric_total(
                metrics, "triton_tts_gateway_audio_seconds_total", api="websocket", format="f32le"
            ) == pytest.approx(end["samples"] / start["sample_rate"], abs=1e-6)
            assert (
                metric_total(
                    metrics, "triton_tts_gateway_first_audio_seconds_count", api="websocket", format="f32le"
                )
                == 1
            )

            ws.send(json.dumps({"type": "speak", "input": "Hi.", "speed": 9}))
            assert next_json(ws)["error"]["code"] == "invalid_value"

            ws.send(json.dumps({"type": "speak", "input": LONG_TEXT}))
            assert next_json(ws)["type"] == "start"
            assert isinstance(receive(ws), bytes)
            assert metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="websocket") == 1
            ws.send(json.dumps({"type": "cancel"}))
            while not (
                isinstance(message := receive(ws), str) and json.loads(message)["type"] == "cancelled"
            ):
                pass
            assert metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="websocket") == 0

            # a socket closed mid-synthesis: cancelled too
            ws.send(json.dumps({"type": "speak", "input": LONG_TEXT}))
            assert next_json(ws)["type"] == "start"
        wait_until(
            lambda: metric_total(metrics, "triton_tts_gateway_websockets_open") == 0, 30, "the socket closed"
        )
        wait_until(
            lambda: metric_total(metrics, "triton_tts_gateway_requests_in_flight", api="websocket") == 0,
            30,
            "the stream ended",
        )
        assert gateway_outcomes(base, "websocket") == {"ok": 1, "invalid_value": 1, "cancelled": 2}
        assert gateway_outcomes(base, "http") == {}


def closed_with(ws: Connection) -> tuple[list[dict[str, Any]], int | None]:
    """The JSON messages until the gateway closes ``ws``, and its close code."""
    messages: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            message = receive(ws, timeout=30)
            if isinstance(message, str):
                messages.append(json.loads(message))
    return messages, closed.value.rcvd.code if closed.value.rcvd is not None else None


def test_malformed_messages_get_errors_and_the_socket_serves_on(socket: Connection) -> None:
    """What once closed the socket with 1011 (Python's json choked) or slipped through."""
    for message in (
        "[" * 4000 + "]" * 4000,  # past the parser's depth
        '{"type": "speak", "input": "Hi.", "speed": 1' + "0" * 5000 + "}",  # past int()'s digits
        '{"type": "speak", "input": "Hi \\ud800"}',  # a lone surrogate
        b"\x00\x01 binary",
        '{"type": ["speak"]}',
        "null",
    ):
        socket.send(message)
        error = next_json(socket)
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
        assert error["error"]["code"] in ("invalid_message", "invalid_value", "invalid_type"), error
    for fields, param in (
        ({"format": ["s16le"]}, "format"),
        ({"voice": "joe:³"}, "voice"),  # not a speaker id: int() cannot read it
        ({"voice": {"name": "joe"}}, "voice"),
        ({"speed": "fast"}, "speed"),
    ):
        socket.send(json.dumps({"type": "speak", "input": "Hi.", **fields}))
        error = next_json(socket)
        assert error["type"] == "error" and error["id"] is not None and error["error"]["param"] == param, (
            error
        )
    _, frames, end = speak_and_collect(socket, "Still here.")
    assert end["type"] == "end" and frames


def test_a_message_over_the_body_limit_is_refused_unread(gateway: str) -> None:
    """uvicorn reads a message's length from its frame header and closes with 1009 (message
    too big) at --max-body-bytes (65,536), as the HTTP body limit, before reading it."""
    with connect(ws_url(gateway), max_size=None) as ws:
        ws.send(json.dumps({"type": "speak", "input": "x" * 60_000}))  # under: an error message
        assert next_json(ws)["error"]["code"] == "string_above_max_length"
        ws.send(json.dumps({"type": "speak", "input": "x" * 70_000}))
        _, code = closed_with(ws)
        assert code == 1009


def admitted(url: str, **options: Any) -> Connection:
    """A socket past the gateway's admission (its pong came back)."""
    ws = connect(url, **options)
    ws.send(json.dumps({"type": "ping"}))
    assert next_json(ws)["type"] == "pong"
    return ws


def test_open_sockets_are_limited_per_key_and_in_all(server: TritonServer) -> None:
    args = ("--ws-max-sockets", "3", "--ws-max-sockets-per-key", "2")
    with running_gateway(server.grpc_url, *args, env={"TRITON_TTS_API_KEY": "key-a,key-b"}) as base:
        first_a, second_a = (admitted(ws_url(base, "?api_key=key-a")) for _ in range(2))
        with connect(ws_url(base, "?api_key=key-a")) as third_a:
            messages, code = closed_with(third_a)
        assert code == 1013 and [m["error"]["code"] for m in messages] == ["too_many_sockets"]
        assert "--ws-max-sockets-per-key" in messages[0]["error"]["message"]
        only_b = admitted(ws_url(base), additional_headers={"Authorization": "Bearer key-b"})
        with connect(ws_url(base, "?api_key=key-b")) as fourth:  # key-b has room, the gateway not
            messages, code = closed_with(fourth)
        assert code == 1013 and "--ws-max-sockets)" in messages[0]["error"]["message"], messages
        # a socket closed frees its place
        first_a.close()
        wait_until(
            lambda: metric_total(f"{base}/metrics", "triton_tts_gateway_websockets_open") == 2,
            30,
            "the closed socket to be let go",
        )
        with admitted(ws_url(base, "?api_key=key-a")) as again:
            _, frames, end = speak_and_collect(again, "Room again.")
            assert end["type"] == "end" and frames
        for ws in (second_a, only_b):
            ws.close()


def test_an_idle_socket_is_closed(server: TritonServer) -> None:
    """Closed after --ws-idle-timeout-s with no message from its client and no synthesis;
    messages and a synthesis running longer than that keep it open (the server's own
    heartbeat pings do not)."""
    args = ("--ws-idle-timeout-s", "1", "--heartbeat-s", "0.3")
    with running_gateway(server.grpc_url, *args) as base, connect(ws_url(base)) as ws:
        for _ in range(4):  # 2 s of pings, every 0.5 s
            time.sleep(0.5)
            ws.send(json.dumps({"type": "ping"}))
            assert next_json(ws)["type"] == "pong"
        asked = time.monotonic()
        _, frames, end = speak_and_collect(ws, PARAGRAPH)
        assert end["type"] == "end" and frames
        assert end["synthesis_seconds"] > 1 or time.monotonic() - asked > 1, end
        idle_from = time.monotonic()
        messages, code = closed_with(ws)
        assert code == 1000 and [m["error"]["code"] for m in messages if m["type"] == "error"] == [
            "idle_timeout"
        ]
        assert 0.8 < time.monotonic() - idle_from < 10
