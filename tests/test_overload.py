"""Overload is refused at once: a server built with tiny count bounds, flooded.

``tts`` and ``tts_stream`` (admission=requests: the models count their texts and
streams) and ``tts_chunk`` (an ensemble: its stages' queue policies) each refuse what is
beyond their bound within milliseconds, with HTTP 503 / gRPC UNAVAILABLE and words that
say so, while what they accepted completes; the client library's retries then get
everyone through. Admission by work, the default, has its tests in tests/test_admission.py.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from testkit.sample_texts import PARAGRAPH, SENTENCES
from tests.helpers import gateway_outcomes, metric_total, running_gateway, tts_inputs
from triton_tts.build import model_configs
from triton_tts.build.model_configs import BuildOptions, parse
from triton_tts.client.tts_client import AsyncTTSClient, RetryPolicy, ServerBusy, TTSClient
from triton_tts.ops.repository import build_repository
from triton_tts.ops.server import TritonServer, free_port

# Server tests are those that ask for a server (tests/conftest.py); the rest run in `make test-unit`.
SERVER_FIXTURES = {"tiny"}  # this module's own server

# One text and one stream in progress; the stages hold what those can have in flight plus
# one direct tts_chunk request (BuildOptions.stage_queue_size).
TINY = BuildOptions(
    admission="requests", long_text_instances=1, max_texts=1, max_streams=1, chunk_queue_size=1
)
FLOOD = 6
PATIENT = RetryPolicy(attempts=40, base_delay_s=0.1, max_delay_s=1.0)
SHORT = " ".join(SENTENCES[:3])


def test_the_bounds_are_rendered_where_triton_applies_them() -> None:
    configs = {path: parse(text) for path, text in model_configs.render(TINY).items()}
    for model in ("tts", "tts_stream"):
        params = configs[f"{model}/config.pbtxt"].parameters
        assert {k: params[k].string_value for k in ("admission", "max_texts", "max_streams")} == {
            "admission": "requests",
            "max_texts": "1",
            "max_streams": "1",
        }
        # the models answer through response senders: Triton's queue never holds a text
        assert not configs[f"{model}/config.pbtxt"].dynamic_batching.HasField("default_queue_policy")
    # every chunk admitted texts and streams can have in flight (1 x 2 + 1 x 1), plus one direct
    assert TINY.stage_queue_size == 4
    for path in ("preprocess/config.pbtxt", "acoustic/config.pbtxt", "vocoder/configs/gpu.pbtxt"):
        assert configs[path].dynamic_batching.default_queue_policy.max_queue_size == 4, path
        assert (
            configs[path].dynamic_batching.default_queue_policy.timeout_action == mc.ModelQueuePolicy.REJECT
        )
    assert not configs["tts_chunk/config.pbtxt"].HasField("dynamic_batching")  # an ensemble cannot


@pytest.fixture(scope="module")
def tiny(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    folder = tmp_path_factory.mktemp("overload")
    repo = build_repository(voice_dir, folder / "model_repository", TINY)
    with TritonServer(
        repo,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=folder / "tritonserver.log",
    ) as running:
        yield running


def flood(count: int, call: Callable[[], Any]) -> list[tuple[str, str, float]]:
    """``count`` calls released together: (status or "ok", message, seconds) for each."""
    gate = threading.Barrier(count)
    outcomes: list[tuple[str, str, float]] = []

    def one() -> None:
        gate.wait()
        start = time.perf_counter()
        try:
            call()
            outcomes.append(("ok", "", time.perf_counter() - start))
        except InferenceServerException as err:
            outcomes.append((str(err.status()), str(err.message()), time.perf_counter() - start))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def refusals(
    outcomes: list[tuple[str, str, float]], status: str, accepted_at_most: int, words: str
) -> list[float]:
    """Seconds each refusal took, once the outcomes are as a bounded queue makes them."""
    kinds = Counter(s for s, _, _ in outcomes)
    assert 1 <= kinds["ok"] <= accepted_at_most, outcomes
    assert kinds["ok"] + kinds[status] == len(outcomes), outcomes
    refused = [(message, seconds) for s, message, seconds in outcomes if s == status]
    assert all(words in message for message, _ in refused), refused
    return [seconds for _, seconds in refused]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tts_refuses_beyond_its_count_at_once(tiny: TritonServer, protocol: str) -> None:
    lib: Any = httpclient if protocol == "http" else grpcclient
    url = tiny.http_url if protocol == "http" else tiny.grpc_url

    def call() -> None:
        client = lib.InferenceServerClient(url, **({"network_timeout": 300} if protocol == "http" else {}))
        try:
            result = client.infer("tts", tts_inputs(lib, PARAGRAPH))
            assert result.as_numpy("AUDIO").size > 22050 * 20  # the accepted ones are whole
        finally:
            client.close()

    outcomes = flood(FLOOD, call)
    status = "503" if protocol == "http" else "StatusCode.UNAVAILABLE"
    refused = refusals(outcomes, status, TINY.max_texts, "server busy: 1 texts in progress")
    # refused at once: before any admitted request, which synthesises, has its answer
    assert max(refused) < min(seconds for status, _, seconds in outcomes if status == "ok"), outcomes


def test_tts_chunk_is_bounded_by_its_stages(tiny: TritonServer) -> None:
    """An ensemble cannot carry a queue policy; its stages' bounds refuse a direct flood."""

    def call() -> None:
        client = grpcclient.InferenceServerClient(tiny.grpc_url)
        try:
            inside = tiny.internal_parameters()  # tts_chunk answers the server's own chunks only
            assert (
                client.infer("tts_chunk", tts_inputs(grpcclient, SENTENCES[3]), parameters=inside)
                .as_numpy("AUDIO")
                .size
            )
        finally:
            client.close()

    outcomes = flood(40, call)
    refused = refusals(outcomes, "StatusCode.UNAVAILABLE", 39, "Exceeds maximum queue size")
    assert all("tts_chunk" in message for _, message, _ in outcomes if message)
    # Most at preprocess, at once; one that passed it and found acoustic's queue full came
    # back after the phonemes (seen: 0.7 s once of ~30, on a loaded machine).
    answered = min(seconds for status, _, seconds in outcomes if status == "ok")
    assert sorted(refused)[len(refused) // 2] < answered, outcomes


def stream_outcome(
    url: str, text: str, first_chunk: threading.Event | None = None
) -> tuple[int, list[str], float]:
    """tts_stream with plain tritonclient: (chunks, error messages, seconds to the end);
    ``first_chunk`` is set when the first chunk arrives."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks, errors, start = 0, [], time.perf_counter()
    try:
        client.async_stream_infer(
            "tts_stream", tts_inputs(grpcclient, text), enable_empty_final_response=True
        )
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                errors.append(str(error.message()))
                continue
            response = result.get_response()
            chunks += bool(response.outputs)
            if chunks and first_chunk is not None:
                first_chunk.set()
            if response.parameters["triton_final_response"].bool_param:
                return chunks, errors, time.perf_counter() - start
    finally:
        client.stop_stream()
        client.close()


def test_tts_stream_refuses_beyond_its_streams_at_once(tiny: TritonServer) -> None:
    in_progress = threading.Event()
    first = threading.Thread(target=stream_outcome, args=(tiny.grpc_url, PARAGRAPH, in_progress))
    first.start()
    assert in_progress.wait(300)  # its first chunk is out, more follow
    chunks, errors, _ = stream_outcome(tiny.grpc_url, PARAGRAPH)
    # refused at once: while the stream it would have waited for is still going
    first_still_going = first.is_alive()
    first.join()
    assert chunks == 0 and first_still_going, errors
    # a stream's error names its code (triton_tts/contract/errors.py, CODE_TAG)
    assert len(errors) == 1 and errors[0].startswith("[UNAVAILABLE] server busy") and "retry" in errors[0]
    with TTSClient(tiny.grpc_url, "grpc", retry=PATIENT) as client:  # free again (the count drops
        assert len(list(client.stream(SENTENCES[0]))) == 1  # just after the final flag)


def test_the_client_library_retries_until_everyone_is_served(tiny: TritonServer) -> None:
    served: list[float] = []

    def whole(protocol: str) -> None:
        url = tiny.http_url if protocol == "http" else tiny.grpc_url
        with TTSClient(url, protocol, retry=PATIENT) as client:  # type: ignore[arg-type]
            served.append(client.synthesize(SHORT).duration_s)

    def streamed() -> None:
        with TTSClient(tiny.grpc_url, "grpc", retry=PATIENT) as client:
            served.append(sum(len(c.audio) for c in client.stream(SHORT)) / 22050)

    jobs = [lambda: whole("http"), lambda: whole("grpc")] * 2 + [streamed] * 3
    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(served) == len(jobs) and min(served) > 3, served
    with TTSClient(tiny.grpc_url, "grpc", retry=RetryPolicy(attempts=1)) as impatient:
        in_progress = threading.Event()
        streams = [threading.Thread(target=stream_outcome, args=(tiny.grpc_url, PARAGRAPH, in_progress))]
        streams[0].start()
        assert in_progress.wait(300)
        with pytest.raises(ServerBusy, match="server busy"):
            list(impatient.stream(SHORT))
        streams[0].join()


def test_the_asyncio_client_retries_too(tiny: TritonServer) -> None:
    async def run() -> list[float]:
        async with (
            AsyncTTSClient(tiny.http_url, "http", retry=PATIENT) as http,
            AsyncTTSClient(tiny.grpc_url, "grpc", retry=PATIENT) as grpc,
        ):

            async def streamed() -> float:
                return sum([len(c.audio) async for c in grpc.stream(SHORT)]) / 22050

            async def whole(client: AsyncTTSClient) -> float:
                return (await client.synthesize(SHORT)).duration_s

            return list(
                await asyncio.gather(
                    whole(http), whole(http), whole(grpc), whole(grpc), streamed(), streamed()
                )
            )

    assert min(asyncio.run(run())) > 3


def test_the_gateway_answers_busy_with_503_and_retry_after(tiny: TritonServer) -> None:
    """Through the OpenAI-compatible gateway: a refusal for load is a 503 with Retry-After
    in OpenAI's error JSON, and OpenAI's SDK, which honours Retry-After, gets through once
    the stream ahead of it ends."""
    import openai

    from tests.test_gateway import error_of, post

    body = json.dumps({"model": "tts-1", "input": SENTENCES[0], "response_format": "wav"}).encode()
    with running_gateway(tiny.grpc_url) as base:
        in_progress = threading.Event()
        first = threading.Thread(target=stream_outcome, args=(tiny.grpc_url, PARAGRAPH, in_progress))
        first.start()
        assert in_progress.wait(300)
        status, headers, data = post(base, body)
        first_still_going = first.is_alive()
        assert first_still_going and status == 503, (status, data)
        assert headers["retry-after"] == "1" and error_of(data)["code"] == "server_busy"
        # the SDK waits as told and tries again until the stream ahead has ended (a paced
        # stream of PARAGRAPH lasts about its audio less the lead: tens of seconds)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=100)
        refused_before = busy_refusals(tiny)
        speech = client.audio.speech.create(
            model="tts-1", voice="alloy", input=SENTENCES[0], response_format="wav"
        )
        assert speech.content[:4] == b"RIFF"
        first.join()
        retried = busy_refusals(tiny) - refused_before
        assert retried > 0  # it was refused, and retried
        # the gateway's own metrics: every 503 it answered, then the one that got through
        assert gateway_outcomes(base, "http") == {"server_busy": 1 + retried, "ok": 1}


def busy_refusals(server: TritonServer) -> float:
    return metric_total(server.metrics_port, "triton_tts_requests_total", model="tts_stream", reason="busy")


def test_the_gateway_spreads_calls_over_every_triton_it_resolves(
    tiny: TritonServer, server: TritonServer
) -> None:
    """An address of two Tritons (as a headless Service's DNS name resolves to every pod):
    the gateway's round robin sends calls to both, across its periodic new channels."""
    from tests.test_gateway import post

    both = f"ipv4:127.0.0.1:{server.grpc_port},127.0.0.1:{tiny.grpc_port}"
    served_before = [streams_ok(s) for s in (server, tiny)]
    body = json.dumps({"model": "tts-1", "input": "Hello.", "response_format": "wav"}).encode()
    with running_gateway(both, "--reconnect-s", "1") as base:
        calls, started = 0, time.monotonic()
        while calls < 16 or time.monotonic() - started < 2.5:  # on at least two channels
            status, _, data = post(base, body)
            assert status == 200 and data[:4] == b"RIFF", data[:200]
            calls += 1
    served = [streams_ok(s) - before for s, before in zip((server, tiny), served_before, strict=True)]
    assert sum(served) == calls and min(served) >= calls // 4, served


def streams_ok(server: TritonServer) -> float:
    return metric_total(server.metrics_port, "triton_tts_requests_total", model="tts_stream", reason="ok")
