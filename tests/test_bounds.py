"""Every resource a request can ask for has a bound it is refused past, with a 4xx that
names it, before any work (STYLE 21; issue 43): SSML depth, the audio a request makes
(silence included), the vad model's input, and the time the gateway waits for a request's
headers and body. And the server's memory stays flat after maximal requests, served or
refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import _status, tts_inputs, wait_until
from triton_tts.build.model_configs import VAD_MAX_FRAMES, parse
from triton_tts.contract.validation import MAX_LONG_TEXT_CHARS, MIN_SPEED, InvalidRequest
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.runtime.limits import MAX_AUDIO_S, MAX_SILENCE_S, calibrate, check_audio
from triton_tts.text.normalize import normalize_english
from triton_tts.text.ssml import MAX_DEPTH, read

SERVER_FIXTURES = {"timed_gateway"}  # starts a gateway of its own (conftest)
ROOT = Path(__file__).resolve().parent.parent
BREAK = '<break time="10s"/>'
BOMB = "<speak>Wait." + BREAK * 200 + "</speak>"  # issue 43: 2,000 s of silence in 3.8 KB


def nested(depth: int, tag: str = "s") -> str:
    """A document whose innermost text sits ``depth`` elements deep, <speak> counted."""
    return "<speak>" + f"<{tag}>" * (depth - 1) + "Hello." + f"</{tag}>" * (depth - 1) + "</speak>"


def most_silence() -> str:
    """Exactly MAX_SILENCE_S of breaks after one word, padded (a comment) to the characters
    the per-character bound wants for it."""
    breaks = BREAK * round(MAX_SILENCE_S / 10)
    return f"<speak>Hello.<!--{'x' * len(breaks)}-->{breaks}</speak>"


# SSML depth, without a server


def test_ssml_deeper_than_the_limit_is_refused_before_the_reader_recurses() -> None:
    assert read(nested(MAX_DEPTH), normalize_english, True).segments[0].text == "Hello."
    for depth in (MAX_DEPTH + 1, 600, 20_000):  # 600: a RecursionError before the limit
        with pytest.raises(
            InvalidRequest, match=rf"nested {MAX_DEPTH + 1} elements deep, the limit is {MAX_DEPTH}"
        ):
            read(nested(depth, "prosody"), normalize_english, True)


def test_thousands_of_sentences_are_read() -> None:
    # each <s> once asked for its segment's whole text: 6,000 of them took 18 s
    document = read("<speak>" + "<s>Hi</s>" * 6000 + "</speak>", normalize_english, True)
    assert document.segments[0].text.count("Hi.") == 6000


# the audio a request makes, without a server


def test_the_longest_text_at_the_slowest_speed_is_allowed_and_silence_is_bounded() -> None:
    for voice in ("joe", "baker"):  # the slowest voices served, per character
        limits = calibrate(ROOT / "voices" / voice)  # as build-repo does (cached in the folder)
        speech = limits.audio_seconds(MAX_LONG_TEXT_CHARS, MIN_SPEED, 2.0)
        check_audio(speech, MAX_SILENCE_S, MAX_LONG_TEXT_CHARS)
    with pytest.raises(InvalidRequest, match=r"2,000.0 s of silence .*the limit is 600 s per request$"):
        check_audio(1.0, 2000.0, len(BOMB))
    with pytest.raises(InvalidRequest, match=r"0.5 s per character of TEXT, 50 s for its 100"):
        check_audio(1.0, 60.0, 100)
    check_audio(1.0, 10.0, 30)  # one longest break, whatever the text
    with pytest.raises(InvalidRequest, match=r"about 18.0 h of audio at this SPEED; the limit is 16 h"):
        check_audio(MAX_AUDIO_S + 2 * 3600, 0.0, MAX_LONG_TEXT_CHARS)


# through the real server and gateway


def tts(server: TritonServer, text: str) -> float:
    """Seconds of audio ``tts`` makes of ``text``."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = client.infer("tts", tts_inputs(grpcclient, text))
        return float(result.as_numpy("AUDIO").size / result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
    finally:
        client.close()


def refused(server: TritonServer, text: str) -> str:
    with pytest.raises(InferenceServerException) as err:
        tts(server, text)
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT", err.value
    return str(err.value.message())


def test_deep_ssml_and_a_silence_bomb_are_400s_naming_their_limit(server: TritonServer, gateway: str) -> None:
    deep = nested(300)  # 2.1 KB: inside the gateway's 4,096 characters
    assert "nested 33 elements deep, the limit is 32" in refused(server, deep)
    assert "2,000.0 s of silence" in refused(server, BOMB)
    for text, named in ((deep, "the limit is 32"), (BOMB, "the limit is 600 s per request")):
        answer = requests.post(
            f"{gateway}/v1/audio/speech", json={"model": "tts-1", "input": text}, timeout=60
        )
        assert answer.status_code == 400 and named in answer.json()["error"]["message"], answer.text
    assert tts(server, most_silence()) >= MAX_SILENCE_S  # the most silence allowed is served


def vad_inputs(frames: int, lib: Any = grpcclient) -> list[Any]:
    block = lib.InferInput("input", [frames, 576], "FP32")
    block.set_data_from_numpy(np.zeros((frames, 576), np.float32))
    states = [lib.InferInput(name, [1, 1, 128], "FP32") for name in ("h", "c")]
    for state in states:
        state.set_data_from_numpy(np.zeros((1, 1, 128), np.float32))
    return [block, *states]


def test_the_vad_model_refuses_more_frames_than_its_config_states(server: TritonServer) -> None:
    config = parse((Path(server.model_repository) / "vad" / "config.pbtxt").read_text(encoding="utf-8"))
    assert json.loads(config.parameters["max_input_dims"].string_value)["input"] == [VAD_MAX_FRAMES, 576]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.infer("vad", vad_inputs(VAD_MAX_FRAMES)).as_numpy("speech_probs").shape == (
            VAD_MAX_FRAMES,
        )
        with pytest.raises(InferenceServerException) as err:
            client.infer("vad", vad_inputs(VAD_MAX_FRAMES + 1))
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert f"at most [{VAD_MAX_FRAMES}, 576]" in str(err.value.message())
    finally:
        client.close()


def rss_mib(server: TritonServer) -> dict[str, float]:
    """Resident memory of tritonserver and of each Python-backend stub (its children)."""
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    out = {}
    for each in [str(pid), *children]:
        try:
            status = Path(f"/proc/{each}/status").read_text()
            name = Path(f"/proc/{each}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        out[f"{Path(name).name}:{each}"] = rss / 1024
    return out


def test_memory_is_flat_after_maximal_requests_served_and_refused(server: TritonServer) -> None:
    # Over HTTP: Triton's gRPC frontend keeps the messages of its pool for reuse at the
    # largest size each held (--grpc-infer-allocation-pool-size, docs/deployment.md), so
    # over gRPC tritonserver grows in steps of the largest response until the pool is full.
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)

    def round_of_maximal_requests() -> None:
        with pytest.raises(InferenceServerException, match="s of silence"):
            client.infer("tts", tts_inputs(httpclient, BOMB))
        audio = client.infer("tts", tts_inputs(httpclient, most_silence())).as_numpy("AUDIO")
        assert audio.size > MAX_SILENCE_S * 16_000  # 53 MiB of audio in one response
        client.infer("vad", vad_inputs(VAD_MAX_FRAMES, httpclient))
        with pytest.raises(InferenceServerException, match="this model takes at most"):
            client.infer("vad", vad_inputs(VAD_MAX_FRAMES + 1, httpclient))

    try:
        for _ in range(3):  # what is kept for reuse (the stubs' regions, arenas), made once
            round_of_maximal_requests()
        seen = [rss_mib(server)]
        for _ in range(3):  # three windows of three rounds each
            for _ in range(3):
                round_of_maximal_requests()
            seen.append(rss_mib(server))
    finally:
        client.close()
    # A leak grows a process in every window; an allocator that keeps one more block of the
    # largest size it has served (a 53 MiB response, on a server that has served the whole
    # suite) grows it once. So each process counts its smallest growth over the windows.
    windows = list(pairwise(seen))
    grown = {
        name: min(after[name] - before[name] for before, after in windows)
        for name in seen[0]
        if all(name in each for each in seen)
    }
    # Before the bounds each bomb kept ~160 MiB in tritonserver and the stubs (480 MiB a
    # window); the tolerance is for a noisy shared machine's allocators.
    assert sum(grown.values()) < 100, (grown, seen)


# the gateway's time bounds, over real sockets


@pytest.fixture(scope="module")
def timed_gateway(
    server: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, Path]]:
    """A gateway with 1 s bounds on headers and bodies (the defaults are 10 s and 30 s):
    its port and its log."""
    port = free_port()
    log = tmp_path_factory.mktemp("gateway") / "gateway.log"
    command = [sys.executable, "-m", "triton_tts.cli", "gateway", "--port", str(port), "--triton-url",
               server.grpc_url, "--header-timeout-s", "1", "--body-timeout-s", "1"]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        live = f"http://127.0.0.1:{port}/health/live"
        wait_until(lambda: process.poll() is not None or _status(live) == 200, 60, "the gateway")
        assert process.poll() is None, log.read_text()
        yield port, log
    finally:
        process.terminate()
        process.wait(timeout=30)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the gateway closes the connection (a timeout fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


HEAD = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "request_bytes",
    [
        HEAD + "Content-Length: 100\r\n\r\n" + '{"input": ',
        HEAD + 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"inp\r\n',
    ],
    ids=["short-content-length", "chunked-without-its-last-chunk"],
)
def test_a_body_not_complete_in_time_is_a_408_and_the_connection_closes(
    timed_gateway: tuple[int, Path], request_bytes: str
) -> None:
    port, _ = timed_gateway
    with connect(port) as sock:
        sock.sendall(request_bytes.encode())
        answer = read_all(sock)  # ends: the gateway closed the socket
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_timeout" and "not complete within 1 s" in error["message"]


def test_headers_never_finished_are_dropped_and_a_caller_leaving_mid_body_is_one_line(
    timed_gateway: tuple[int, Path],
) -> None:
    port, log = timed_gateway
    for partial in (b"", b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nX-Slow: "):
        with connect(port) as sock:
            sock.sendall(partial)
            assert read_all(sock) == b""  # closed without an answer
    with connect(port) as sock:
        sock.sendall((HEAD + "Content-Length: 100\r\n\r\n" + '{"in').encode())
        time.sleep(0.2)  # the body is being read when the caller leaves
    wait_until(lambda: "went away" in log.read_text(), 10, "the log line")
    text = log.read_text()
    assert "the client went away before its request body was complete" in text
    assert "its request headers were not complete in 1 s" in text
    assert "Traceback" not in text and "ClientDisconnect" not in text
    # and the gateway still answers
    assert requests.get(f"http://127.0.0.1:{port}/health/live", timeout=10).status_code == 200
