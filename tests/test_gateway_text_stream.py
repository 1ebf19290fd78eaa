"""Text in as it is written, on the gateway's WebSocket: ``append`` pieces (an LLM's
tokens), ``flush``, ``end`` and ``cancel``, through the real gateway and tritonserver. Each
sentence is spoken once its end is settled, while the rest is still being written; the
audio comes in order between one ``start`` and one ``end``; a cancel drops the text."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

from tests.helpers import running_gateway
from tests.test_gateway_ws import (
    LONG_TEXT,
    closed_with,
    collect_frames,
    next_json,
    receive,
    ws_url,
)
from triton_tts.ops.server import TritonServer
from triton_tts.quality.intelligibility import transcribe, word_error_rate

TEXT = (
    "Dr. Patel reviewed the results on Monday. The error rate fell to 3.5 percent, which was "
    "better than expected. She asked the team to repeat the test next week."
)
SENTENCES = 3


@pytest.fixture()
def socket(gateway: str) -> Iterator[Connection]:
    with connect(ws_url(gateway), open_timeout=30) as ws:
        yield ws


def send(ws: Connection, **message: Any) -> None:
    ws.send(json.dumps(message))


def pieces(text: str, seed: int = 0) -> list[str]:
    """The text in pieces of 1 to 6 characters, as an LLM's tokens come."""
    rng, out, at = random.Random(seed), [], 0
    while at < len(text):
        size = rng.randint(1, 6)
        out.append(text[at : at + size])
        at += size
    return out


def collect(ws: Connection) -> tuple[dict[str, Any], npt.NDArray[np.float32], dict[str, Any]]:
    """start, the PCM (s16le) of every frame, end."""
    start, frames, end = collect_frames(ws)
    assert end["type"] == "end", end
    return start, np.frombuffer(b"".join(frames), dtype="<i2").astype(np.float32) / 32768, end


def test_pieces_as_written_are_spoken_sentence_by_sentence(socket: Connection) -> None:
    send(socket, type="start", noise_scale=0.0, noise_w=0.0)
    for piece in pieces(TEXT):
        send(socket, type="append", text=piece)
    send(socket, type="end")
    start, streamed, end = collect(socket)
    assert start["voice"] == "joe" and start["format"] == "s16le"
    assert end["texts"] == SENTENCES  # each sentence its own synthesis, none cut inside
    assert end["samples"] == len(streamed) and end["audio_seconds"] == pytest.approx(len(streamed) / 22050)
    # As intelligible as the same text sent at once.
    send(socket, type="speak", input=TEXT, noise_scale=0.0, noise_w=0.0)
    _, whole, _ = collect(socket)
    rate = start["sample_rate"]
    streamed_wer = word_error_rate([TEXT], [transcribe(streamed, rate)])
    whole_wer = word_error_rate([TEXT], [transcribe(whole, rate)])
    assert streamed_wer <= whole_wer + 0.1, (streamed_wer, whole_wer)


def test_the_first_sentence_is_heard_while_the_rest_is_being_written(socket: Connection) -> None:
    first, rest = "The first sentence is complete. ", "The second one is still being written"
    for piece in pieces(first + "The"):
        send(socket, type="append", text=piece)
    assert next_json(socket)["type"] == "start"  # before anything more was sent
    assert isinstance(receive(socket), bytes)
    send(socket, type="append", text=rest[3:])
    send(socket, type="end")
    while not isinstance(message := receive(socket), str) or json.loads(message)["type"] == "ping":
        pass
    end = json.loads(message)
    assert end["type"] == "end" and end["texts"] == 2, end


def test_a_long_clause_goes_when_the_writer_pauses(socket: Connection) -> None:
    send(socket, type="append", text="When the weather turns cold in the northern valleys, the")
    assert next_json(socket)["type"] == "start"  # no sentence end: the pause sent the clause
    send(socket, type="flush")
    send(socket, type="end")
    while not isinstance(message := receive(socket), str) or json.loads(message)["type"] == "ping":
        pass
    assert json.loads(message)["texts"] == 2


def test_a_clause_ending_on_its_comma_goes_when_the_writer_stalls(socket: Connection) -> None:
    # An LLM's tokens carry their space in front: the stall comes after "," and before " the".
    tokens = ["When", " the", " weather", " turns", " cold", " in", " the", " northern", " valleys", ","]
    for token in tokens:
        send(socket, type="append", text=token)
    assert next_json(socket)["type"] == "start"  # the stall sent the clause
    send(socket, type="append", text=" the")
    send(socket, type="flush")
    send(socket, type="end")
    while not isinstance(message := receive(socket), str) or json.loads(message)["type"] == "ping":
        pass
    assert json.loads(message)["texts"] == 2


def test_flush_speaks_what_is_held(socket: Connection) -> None:
    send(socket, type="append", text="Yes")
    send(socket, type="flush")
    assert next_json(socket)["type"] == "start"
    send(socket, type="end")
    while not isinstance(message := receive(socket), str) or json.loads(message)["type"] == "ping":
        pass
    end = json.loads(message)
    assert end["type"] == "end" and end["texts"] == 1 and end["samples"] > 0


def test_cancel_stops_the_audio_and_drops_the_text(socket: Connection) -> None:
    for piece in pieces(LONG_TEXT, seed=1)[:400]:
        send(socket, type="append", text=piece)
    assert next_json(socket)["type"] == "start"
    assert isinstance(receive(socket), bytes)
    send(socket, type="cancel")
    while True:  # chunks already on their way may come first
        message = receive(socket)
        if isinstance(message, str) and json.loads(message)["type"] == "cancelled":
            break
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # nothing more: no audio, no end
        try:
            message = receive(socket, timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        assert isinstance(message, str) and json.loads(message)["type"] == "ping", message
    # The dropped text is gone: a new stream speaks only its own.
    send(socket, type="append", text="After the cancel.")
    send(socket, type="end")
    _, pcm, end = collect(socket)
    assert end["texts"] == 1 and 0.3 < len(pcm) / 22050 < 3.0


def error_of(ws: Connection, ends_the_stream: bool = False) -> dict[str, Any]:
    """The next message, an error: only one that ends a text stream carries its id."""
    message = next_json(ws)
    assert message["type"] == "error", message
    assert (message["id"] is not None) == ends_the_stream, message
    return dict(message["error"])


def test_bad_text_stream_messages_get_errors_and_the_socket_serves_on(socket: Connection) -> None:
    send(socket, type="flush")
    assert error_of(socket)["code"] == "no_text_stream"
    send(socket, type="end")
    assert error_of(socket)["code"] == "no_text_stream"
    send(socket, type="append", text=3)
    refused = error_of(socket)
    assert refused["code"] == "invalid_type" and refused["param"] == "text", refused
    send(socket, type="append")
    assert error_of(socket)["code"] == "missing_value"
    send(socket, type="start", speed=99)
    assert error_of(socket)["param"] == "speed"
    send(socket, type="start", voice="nobody")
    unknown = error_of(socket, ends_the_stream=True)
    assert unknown["param"] == "voice" and unknown["code"] == "invalid_value", unknown
    send(socket, type="start")
    send(socket, type="start")
    assert error_of(socket)["code"] == "busy_socket"
    send(socket, type="speak", input="Not now.")
    assert error_of(socket)["code"] == "busy_socket"
    send(socket, type="append", text="Now it speaks.")
    send(socket, type="end")
    _, pcm, end = collect(socket)
    assert end["texts"] == 1 and len(pcm) > 0


def test_the_held_text_is_bounded_by_the_input_limit(server: TritonServer) -> None:
    with (
        running_gateway(server.grpc_url, "--max-input-chars", "100") as gateway,
        connect(ws_url(gateway), open_timeout=30) as ws,
    ):
        send(ws, type="append", text="a rather long clause with no end in sight " * 2)
        send(ws, type="append", text="and still more words that would pass the limit")
        refused = error_of(ws)
        assert refused["code"] == "text_stream_full" and "at most 100" in refused["message"], refused
        send(ws, type="end")  # what was held is still spoken
        _, pcm, end = collect(ws)
        assert end["texts"] == 1 and len(pcm) > 0


def test_a_stream_waiting_for_text_idles_out(server: TritonServer) -> None:
    """A writer that stops for good does not hold the socket: while the stream waits for
    text, --ws-idle-timeout-s counts (a synthesis running does not)."""
    args = ("--ws-idle-timeout-s", "1", "--heartbeat-s", "0.3")
    with running_gateway(server.grpc_url, *args) as base, connect(ws_url(base)) as ws:
        send(ws, type="append", text="A sentence that is never finished")
        idle_from = time.monotonic()
        messages, code = closed_with(ws)
        assert code == 1000, messages
        assert [m["error"]["code"] for m in messages if m["type"] == "error"] == ["idle_timeout"]
        assert 0.8 < time.monotonic() - idle_from < 10
