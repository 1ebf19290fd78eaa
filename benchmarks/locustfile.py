"""Locust users for triton-tts: HTTP and gRPC, whole-audio and streaming.

Besides Locust's own latency statistics, every request also reports its real-time
factor (as the entry "RTF x1000", so Locust's percentile columns read in thousandths)
and, for streams, the time to the first audio chunk ("first chunk").

    locust -f benchmarks/locustfile.py --headless -u 8 -r 8 -t 60s \\
        --host localhost:8000 --grpc-url localhost:8001 --csv results/locust

A server with an API key: ``--api-key KEY`` or env TRITON_TTS_API_KEY.
"""

from __future__ import annotations

import random
import time
from typing import Any

import grpc.experimental.gevent as grpc_gevent
from locust import User, between, events, task

grpc_gevent.init_gevent()  # gRPC's C core cooperates with Locust's gevent loop

# The sample texts are the checkout's package testkit (never in the wheel): the editable
# install puts the checkout's root on sys.path, where Locust, loading this file by its path,
# finds it as any other package.
from testkit.sample_texts import PARAGRAPH  # noqa: E402
from triton_tts.client import TTSClient, TTSError  # noqa: E402 - after init_gevent

TEXTS = [
    "Turn left.",
    "Your order has shipped and should arrive on Thursday.",
    "Please hold while I transfer you to the billing department.",
    PARAGRAPH[:300],
]


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _arguments(parser: Any) -> None:
    parser.add_argument("--grpc-url", default="localhost:8001", help="gRPC address of the server")
    parser.add_argument(
        "--api-key", default=None, help="the server's API key (default: env TRITON_TTS_API_KEY)"
    )


def _fire(
    request_type: str, name: str, seconds: float, length: int = 0, error: Exception | None = None
) -> None:
    events.request.fire(  # type: ignore[no-untyped-call]
        request_type=request_type,
        name=name,
        response_time=seconds * 1000,
        response_length=length,
        exception=error,
        context={},
    )


class _TTSUser(User):
    abstract = True
    wait_time = between(0.0, 0.2)  # type: ignore[no-untyped-call]
    protocol = "http"

    def on_start(self) -> None:
        url = self.host if self.protocol == "http" else self.environment.parsed_options.grpc_url
        api_key = self.environment.parsed_options.api_key
        self.client = TTSClient(url, self.protocol, api_key=api_key)  # type: ignore[arg-type]

    def on_stop(self) -> None:
        self.client.close()

    @task(3)
    def whole(self) -> None:
        text = random.choice(TEXTS)  # noqa: S311 - spread, not secrecy
        start = time.perf_counter()
        try:
            result = self.client.synthesize(text)
        except TTSError as err:
            _fire(self.protocol, "tts", time.perf_counter() - start, error=err)
            return
        elapsed = time.perf_counter() - start
        _fire(self.protocol, "tts", elapsed, len(result.audio))
        _fire(self.protocol, "RTF x1000", elapsed / result.duration_s)


class HttpTTSUser(_TTSUser):
    protocol = "http"


class GrpcTTSUser(_TTSUser):
    protocol = "grpc"

    @task(1)
    def streamed(self) -> None:
        start = time.perf_counter()
        samples, rate = 0, 1
        try:
            for chunk in self.client.stream(PARAGRAPH):
                if chunk.index == 0:
                    _fire("grpc-stream", "first chunk", time.perf_counter() - start)
                samples, rate = samples + len(chunk.audio), chunk.sample_rate
        except TTSError as err:
            _fire("grpc-stream", "tts_stream", time.perf_counter() - start, error=err)
            return
        elapsed = time.perf_counter() - start
        _fire("grpc-stream", "tts_stream", elapsed, samples)
        _fire("grpc-stream", "RTF x1000", elapsed / (samples / rate))
