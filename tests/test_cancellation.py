"""Cancelled work stops: a long ``tts`` request whose client gives up makes no more chunks.

Chunks made are counted from Triton's own statistics (tts_chunk's inference_count, which
counts a chunk when it is done); a request stops starting chunks at once, and the chunks
it had in flight (at most chunks_in_flight) may still finish.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from testkit.sample_texts import PARAGRAPH
from tests.helpers import model_counts, paragraph_chunks, synthesize, tts_inputs
from tests.test_tts_metrics import delta, scrape, settle
from triton_tts.ops.server import TritonServer
from triton_tts.runtime.metrics import REQUESTS

LONG_TEXT = " ".join([PARAGRAPH] * 12)  # ~7,000 characters: minutes of speech
LONG_TEXT_CHUNKS = paragraph_chunks(12)  # 21, worked out by hand (tests/helpers.py)
# Two 400-character chunks in flight on two cores take a few seconds: quiet for longer.
QUIET_S = 6.0


def chunks_in_flight(http: httpclient.InferenceServerClient) -> int:
    return int(http.get_model_config("tts")["parameters"]["chunks_in_flight"]["string_value"])


def chunks_made(http: httpclient.InferenceServerClient) -> int:
    return model_counts(http, "tts_chunk")[0]


def wait_for_chunks(http: httpclient.InferenceServerClient, count: int, limit_s: float = 120.0) -> int:
    deadline = time.monotonic() + limit_s
    while (made := chunks_made(http)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return made


def assert_stopped(
    http: httpclient.InferenceServerClient, start: int, at_stop: int, before: Any, server: TritonServer
) -> None:
    """After the stop: the outcome is counted once (when the model notices, after the chunk
    it waits for); at most the chunks in flight (+1 for the race with our count) were
    finished after the stop, far fewer than planned; the server serves on."""
    deadline = time.monotonic() + 120
    after, _ = scrape(server)
    while delta(before, after, REQUESTS.name, model="tts", reason="cancelled") < 1:
        assert time.monotonic() < deadline, "the model never noticed"
        time.sleep(0.2)
        after, _ = scrape(server)
    settled = settle(http, QUIET_S)
    window = chunks_in_flight(http)
    planned = LONG_TEXT_CHUNKS
    assert settled - at_stop <= window + 1, (start, at_stop, settled, window)
    assert settled - start < planned // 2, (settled - start, planned)
    after, _ = scrape(server)
    assert delta(before, after, REQUESTS.name, model="tts", reason="cancelled") == 1
    assert delta(before, after, REQUESTS.name, model="tts", reason="ok") == 0
    audio, _ = synthesize(http, "Still serving after that.")
    assert len(audio) > 0


def test_cancelling_an_async_grpc_request_stops_its_chunks(server: TritonServer, http) -> None:
    start = settle(http, QUIET_S)
    before, _ = scrape(server)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        future = client.async_infer(
            "tts",
            tts_inputs(grpcclient, LONG_TEXT),
            callback=lambda result, error: answers.put((result, error)),
        )
        assert wait_for_chunks(http, start + 2) >= start + 2  # mid-way through the text
        future.cancel()
        at_cancel = chunks_made(http)
        result, error = answers.get(timeout=60)
        assert result is None and "cancel" in str(error).lower()
    finally:
        client.close()
    assert_stopped(http, start, at_cancel, before, server)


def test_a_grpc_client_timeout_stops_its_chunks(server: TritonServer, http) -> None:
    start = settle(http, QUIET_S)
    before, _ = scrape(server)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="Deadline"):
            client.infer("tts", tts_inputs(grpcclient, LONG_TEXT), client_timeout=2.0)
        at_timeout = chunks_made(http)
    finally:
        client.close()
    assert_stopped(http, start, at_timeout, before, server)


def test_the_requests_own_timeout_stops_its_chunks_over_http(server: TritonServer, http) -> None:
    """HTTP clients bound the work with the request's ``timeout`` (microseconds)."""
    start = settle(http, QUIET_S)
    before, _ = scrape(server)
    with pytest.raises(InferenceServerException) as info:
        http.infer("tts", tts_inputs(httpclient, LONG_TEXT), timeout=2_000_000)
    at_timeout = chunks_made(http)
    assert info.value.status() == "503" and "request timeout expired" in str(info.value.message())
    assert_stopped(http, start, at_timeout, before, server)


def test_triton_does_not_notice_an_http_client_that_goes_away(server: TritonServer, http) -> None:
    """Triton 2.51 marks no request cancelled when its HTTP client disconnects: the work
    runs to its end (so bound it with ``timeout``, or use gRPC). If this starts failing,
    Triton learnt it: update triton_tts.runtime.cancellation.Cancellation's docstring."""
    text = " ".join([PARAGRAPH] * 2)
    start = settle(http, QUIET_S)
    impatient = httpclient.InferenceServerClient(server.http_url, network_timeout=1.0)
    try:
        with pytest.raises(Exception, match="timed out"):
            impatient.infer("tts", tts_inputs(httpclient, text))
    finally:
        impatient.close()
    assert settle(http, QUIET_S) - start == paragraph_chunks(2)  # 5 (tts)


def test_a_streams_own_timeout_ends_it_with_an_error(server: TritonServer, http) -> None:
    start = settle(http, QUIET_S)
    before, _ = scrape(server)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks, errors = 0, []
    try:
        client.async_stream_infer(
            "tts_stream",
            tts_inputs(grpcclient, LONG_TEXT),
            timeout=2_000_000,
            enable_empty_final_response=True,
        )
        while True:
            result, error = answers.get(timeout=120)
            if error is not None:
                errors.append(error.message())
                continue
            response = result.get_response()
            chunks += bool(response.outputs)
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    assert len(errors) == 1 and "request timeout expired" in errors[0], errors
    settled = settle(http, QUIET_S)
    assert chunks <= settled - start < LONG_TEXT_CHUNKS // 2
    after, _ = scrape(server)
    assert delta(before, after, REQUESTS.name, model="tts_stream", reason="cancelled") == 1
