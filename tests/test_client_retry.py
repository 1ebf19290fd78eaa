"""The client library's busy handling without a server: what counts as busy, the backoff
schedule, and that synthesize/stream (sync and asyncio) retry only what they may.
tests/test_overload.py checks the same against a real server's refusals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Generator
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from triton_tts.client import tts_client
from triton_tts.client.tts_client import (
    AsyncTTSClient,
    AudioChunk,
    RequestRejected,
    RetryPolicy,
    ServerBusy,
    ServerUnavailable,
    SynthesisOptions,
    SynthesisResult,
    TimedOut,
    TTSClient,
    TTSError,
    classify,
)

URL = "localhost:1"  # never contacted: the calls below are replaced
# What Triton 2.51 and tts_stream answered when they refused (seen in tests/test_overload.py).
QUEUE_FULL = "[request id: <id_unknown>] Exceeds maximum queue size"
STAGE_FULL = "in ensemble 'tts_chunk', [request id: <id_unknown>] Exceeds maximum queue size"
STREAMS_FULL = "server busy: 1 streams in progress, the most tts_stream takes at once; retry shortly"


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    policy = RetryPolicy(attempts=7, base_delay_s=0.2, max_delay_s=1.0)
    assert [policy.backoff(k) for k in range(6)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    assert policy.delay(2, draw=0.5) == pytest.approx(0.4)
    assert policy.delay(2, draw=0.0) == 0.0


def test_jitter_spreads_the_waits_over_the_whole_backoff() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=1.0)
    waits = np.array([policy.delay(0) for _ in range(2000)])
    assert waits.min() >= 0 and waits.max() <= 1.0
    assert 0.45 < waits.mean() < 0.55 and waits.std() > 0.25  # uniform on [0, 1]: 0.5, 0.29


def test_retries_stop_at_the_attempts_and_before_the_deadline() -> None:
    policy = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.01)
    far = float("inf")
    assert policy.next_delay(0, far) is not None and policy.next_delay(1, far) is not None
    assert policy.next_delay(2, far) is None  # the third try was the last
    assert policy.next_delay(0, 0.0) is None  # the wait would pass the deadline
    assert RetryPolicy(attempts=1).next_delay(0, far) is None


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        ("503", QUEUE_FULL, ServerBusy),
        ("StatusCode.UNAVAILABLE", QUEUE_FULL, ServerBusy),
        ("503", STAGE_FULL, ServerBusy),
        ("503", "Request timeout expired", ServerBusy),  # a queue wait past the model's timeout
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", ServerUnavailable),
        ("503", "request timeout expired: stopped after 1 of 3 chunks", TimedOut),  # its own timeout
        ("400", "TEXT is empty", RequestRejected),
    ],
)
def test_busy_statuses_are_told_apart(status: str, message: str, kind: type[Exception]) -> None:
    err = classify(InferenceServerException(message, status=status), URL)
    assert type(err) is kind
    assert message in str(err)
    assert isinstance(err, ServerUnavailable) == (kind in (ServerBusy, ServerUnavailable))  # compatible


def test_a_streams_errors_are_told_apart_by_their_code_tag() -> None:
    """In a gRPC stream an error response carries no status code, only the message."""
    busy = tts_client._stream_error(InferenceServerException(STREAMS_FULL), URL)
    assert isinstance(busy, ServerBusy) and "retry" in str(busy)
    # tts_stream's own errors name their code (triton_tts/contract/errors.py, CODE_TAG) ...
    rejected = tts_client._stream_error(InferenceServerException("[INVALID_ARG] TEXT is empty"), URL)
    assert type(rejected) is RequestRejected and str(rejected) == "TEXT is empty"
    failed = tts_client._stream_error(InferenceServerException("[INTERNAL] synthesis failed: x"), URL)
    assert type(failed) is TTSError and "INTERNAL" in str(failed)
    # ... and an error without one is the server's failure, not the caller's fault
    dead = tts_client._stream_error(
        InferenceServerException("Stub process 'tts_stream_0_0' is not healthy."), URL
    )
    assert type(dead) is TTSError


RESULT = SynthesisResult(np.zeros(10, np.float32), 22050)


class Flaky:
    """Refuses the first ``refusals`` calls as a busy server does, then answers."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    def call(self) -> None:
        self.calls += 1
        if self.calls <= self.refusals:
            raise ServerBusy(f"{URL} is busy, retry later: {QUEUE_FULL}")

    def synthesize_once(self, text: Any, options: Any, deadline: Any = None) -> SynthesisResult:
        self.call()
        return RESULT


@pytest.fixture()
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(time, "sleep", waited.append)
    monkeypatch.setattr(asyncio, "sleep", asleep)
    return waited


def chunks(count: int) -> list[AudioChunk]:
    return [AudioChunk(i, np.zeros(4, np.float32), 22050, i == count - 1) for i in range(count)]


def test_synthesize_retries_busy_refusals_with_backoff(sleeps: list[float]) -> None:
    flaky = Flaky(refusals=3)
    policy = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=10)
    with TTSClient(URL, "grpc", retry=policy) as client:
        client._synthesize_once = flaky.synthesize_once  # type: ignore[method-assign]
        assert client.synthesize("Hello.") is RESULT
    assert flaky.calls == 4 and len(sleeps) == 3
    assert all(0 <= wait <= policy.backoff(k) for k, wait in enumerate(sleeps))


def test_synthesize_gives_up_after_its_attempts(sleeps: list[float]) -> None:
    flaky = Flaky(refusals=10)
    with TTSClient(URL, "grpc", retry=RetryPolicy(attempts=3, base_delay_s=0.01)) as client:
        client._synthesize_once = flaky.synthesize_once  # type: ignore[method-assign]
        with pytest.raises(ServerBusy, match="refused 3 times"):
            client.synthesize("Hello.")
    assert flaky.calls == 3 and len(sleeps) == 2


def test_other_errors_are_not_retried(sleeps: list[float]) -> None:
    def rejected(text: Any, options: Any, deadline: Any = None) -> SynthesisResult:
        raise RequestRejected("TEXT is empty")

    with TTSClient(URL, "grpc") as client:
        client._synthesize_once = rejected  # type: ignore[method-assign]
        with pytest.raises(RequestRejected):
            client.synthesize("")
    assert sleeps == []


def fake_stream(flaky: Flaky, count: int, busy_after: int | None = None) -> Any:
    def stream_once(text: Any, options: SynthesisOptions) -> Generator[AudioChunk, None, None]:
        flaky.call()
        for chunk in chunks(count):
            if chunk.index == busy_after:
                raise ServerBusy("busy in the middle")
            yield chunk

    return stream_once


def test_a_stream_is_retried_before_its_first_chunk(sleeps: list[float]) -> None:
    flaky = Flaky(refusals=2)
    with TTSClient(URL, "grpc") as client:
        client._stream_once = fake_stream(flaky, 3)  # type: ignore[method-assign]
        assert [c.index for c in client.stream("Hello.")] == [0, 1, 2]
    assert flaky.calls == 3 and len(sleeps) == 2


def test_a_stream_is_never_retried_after_its_first_chunk(sleeps: list[float]) -> None:
    flaky = Flaky(refusals=0)
    received = []
    with TTSClient(URL, "grpc") as client:
        client._stream_once = fake_stream(flaky, 3, busy_after=1)  # type: ignore[method-assign]
        with pytest.raises(ServerBusy):
            for chunk in client.stream("Hello."):
                received.append(chunk.index)
    assert received == [0] and flaky.calls == 1 and sleeps == []


def test_the_asyncio_client_retries_the_same_way(sleeps: list[float]) -> None:
    async def run() -> tuple[SynthesisResult, list[int]]:
        whole, streamed = Flaky(refusals=2), Flaky(refusals=1)

        async def synthesize_once(text: Any, options: Any, deadline: Any = None) -> SynthesisResult:
            whole.call()
            return RESULT

        async def stream_once(text: Any, options: Any) -> AsyncGenerator[AudioChunk, None]:
            streamed.call()
            for chunk in chunks(2):
                yield chunk

        async with AsyncTTSClient(URL, "grpc") as client:
            client._synthesize_once = synthesize_once  # type: ignore[method-assign]
            client._stream_once = stream_once  # type: ignore[method-assign]
            result = await client.synthesize("Hello.")
            indexes = [c.index async for c in client.stream("Hello.")]
        return result, indexes

    result, indexes = asyncio.run(run())
    assert result is RESULT and indexes == [0, 1] and len(sleeps) == 3


def test_a_cancel_as_a_stream_ends_is_never_lost() -> None:
    """The asyncio client reads a stream's end before it returns; a cancel that arrives
    while it does, at any step, must reach the caller (Python 3.11's wait_for lost one that
    came as the read ended, and a gateway text stream then spoke the cancelled text)."""
    from triton_tts.client.async_client import _stream_ends

    async def run() -> tuple[list[tuple[int, int]], int]:
        lost, tried = [], 0
        for steps in range(6):  # the responses end after this many loop turns
            for delay in range(steps + 4):  # the cancel comes after this many, if still running

                async def responses(steps: int = steps) -> AsyncGenerator[None, None]:
                    for _ in range(steps):
                        await asyncio.sleep(0)
                    return
                    yield

                async def caller(steps: int = steps) -> None:
                    await _stream_ends(responses())

                task = asyncio.ensure_future(caller())
                for _ in range(delay):
                    await asyncio.sleep(0)
                if task.done():
                    continue
                task.cancel()
                tried += 1
                try:
                    await task
                    lost.append((steps, delay))
                except asyncio.CancelledError:
                    pass
        return lost, tried

    lost, tried = asyncio.run(run())
    assert lost == [] and tried >= 20
