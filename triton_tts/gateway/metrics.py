"""The gateway's own Prometheus metrics (``GET /metrics``): what its callers get, which
Triton's counters cannot see. Time to first audio as the caller receives it (the wait
on Triton, the loopback hop and the encoding), how each synthesis ended by OpenAI error
code, the audio delivered per format, and what is open now.

One registry per app (tests run several in one process). A synthesis is counted once,
by :class:`Synthesis`, whichever way it ends; HTTP ones are opened and closed by the
:class:`SpeechMetrics` middleware, so a caller who leaves before the body starts is
still counted."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import choose_encoder
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SPEECH_PATH = "/v1/audio/speech"
CAPTIONED_PATH = "/v1/audio/speech/captioned"
# Seconds: first audio on this project's 2-core machine is 0.16 s alone, ~0.6 s in a burst
# of 8 (docs/performance.md); a GPU node's should be tens of ms.
FIRST_AUDIO_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
OK, CANCELLED = "ok", "cancelled"  # outcomes besides the OpenAI error codes (errors.ApiError.code)


class GatewayMetrics:
    def __init__(self) -> None:
        # No *_created series: Triton's counters have none, and dashboards never read them
        # (prometheus_client's switch is for the whole process, which is the gateway's own).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # (not annotated upstream)
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "triton_tts_gateway_requests",
            "Syntheses ended, by API (http, websocket, riva) and outcome: ok, cancelled (the caller "
            "left or sent cancel), or the OpenAI error code answered (server_busy, "
            "triton_unavailable, invalid_value, ...)",
            ["api", "outcome"],
            registry=self.registry,
        )
        self.first_audio = Histogram(
            "triton_tts_gateway_first_audio_seconds",
            "From a synthesis request's arrival to its first audio bytes sent to the caller",
            ["api", "format"],
            buckets=FIRST_AUDIO_BUCKETS,
            registry=self.registry,
        )
        self.audio = Counter(
            "triton_tts_gateway_audio_seconds",
            "Seconds of audio sent to callers",
            ["api", "format"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "triton_tts_gateway_requests_in_flight",
            "Syntheses in progress (a paced stream lasts about as long as its audio)",
            ["api"],
            registry=self.registry,
        )
        self.cut = Counter(
            "triton_tts_gateway_responses_cut",
            "Streamed HTTP responses cut after their status was sent, by the error code that cut "
            "them: the body ends without its terminating chunk, so the caller's read fails",
            ["code"],
            registry=self.registry,
        )
        self.sockets = Gauge(
            "triton_tts_gateway_websockets_open",
            "WebSocket connections open (idle ones included)",
            registry=self.registry,
        )
        for api in ("http", "websocket"):  # series exist from the start, at 0
            self.in_flight.labels(api)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The page and its content type, in the format the scraper's Accept asks for
        (Prometheus text 0.0.4 unless it asks for OpenMetrics)."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type

    def synthesis(self, api: str) -> Synthesis:
        return Synthesis(self, api)


class Synthesis:
    """One synthesis's accounting, from its arrival to :meth:`end` (which counts once)."""

    def __init__(self, metrics: GatewayMetrics, api: str) -> None:
        self.metrics, self.api = metrics, api
        self.started = time.monotonic()
        self.format = "unknown"  # set once the request is read
        self.error_code: str | None = None  # the ApiError answered, if any
        self.first_sent = False
        self.audio_seconds = 0.0  # sent so far
        self.ended = False
        metrics.in_flight.labels(api).inc()

    def audio_sent(self, seconds: float) -> None:
        if not self.first_sent:
            self.first_sent = True
            self.metrics.first_audio.labels(self.api, self.format).observe(time.monotonic() - self.started)
        self.metrics.audio.labels(self.api, self.format).inc(seconds)
        self.audio_seconds += seconds

    def end(self, outcome: str) -> None:
        if self.ended:
            return
        self.ended = True
        self.metrics.in_flight.labels(self.api).dec()
        self.metrics.requests.labels(self.api, outcome).inc()


class SpeechMetrics:
    """ASGI middleware around ``POST /v1/audio/speech`` and its captioned variant: opens
    its :class:`Synthesis` (the endpoint finds it in ``scope["state"]``) and ends it with
    what the caller got: ``ok`` once the whole body is sent, the error code answered
    before it or that cut it or said in it (the endpoint notes it in ``error_code``), or
    ``cancelled`` when the caller left."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] not in (SPEECH_PATH, CAPTIONED_PATH)
            or scope["method"] != "POST"
        ):
            await self.app(scope, receive, send)
            return
        synthesis = self.metrics.synthesis("http")
        scope.setdefault("state", {})["synthesis"] = synthesis
        status, complete = 0, False

        async def watched(message: Message) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                await send(message)
                complete = True
                return
            await send(message)

        outcome = CANCELLED
        try:
            await self.app(scope, receive, watched)
            if status != 200:
                outcome = synthesis.error_code or f"http_{status}"
            elif synthesis.error_code:  # cut after the status line (or an error line said)
                outcome = synthesis.error_code
            elif complete:
                outcome = OK
        except (asyncio.CancelledError, ClientDisconnect, OSError):
            raise
        except Exception:
            outcome = "internal_error"
            raise
        finally:
            synthesis.end(outcome)
