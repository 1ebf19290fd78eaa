"""The gateway: OpenAI's speech API, a WebSocket of PCM, and a page to listen, in front of
Triton. One ASGI app (Starlette, served by uvicorn); every synthesis is one gRPC stream
of ``tts_stream`` (triton_tts.client.AsyncTTSClient), so audio leaves as chunks are made,
and a caller that goes away cancels its request on the server.

Routes:
  POST /v1/audio/speech        OpenAI's body (model, input, voice, response_format, speed)
  GET  /v1/models[/{id}]       the model ids it answers to
  GET  /v1/audio/voices        served voices, their speakers, and the OpenAI voice aliases
  WS   /v1/audio/speech/ws     text in; a JSON header, 16-bit PCM chunks, a JSON end out
  GET  /                       the listening page (static/)
  GET  /health/live, /health/ready   probes (ready: Triton and tts_stream ready)
  GET  /metrics                the gateway's Prometheus metrics (triton_tts.gateway.metrics)

Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``): bad input
400, a missing or wrong API key 401, a body over the limit 413, a busy Triton 503 with
Retry-After, an unreachable Triton 503, no answer in time 504.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from triton_tts.client import (
    NO_RETRIES,
    AsyncTTSClient,
    AudioChunk,
    RequestRejected,
    ServerBusy,
    ServerUnavailable,
    TimedOut,
    TTSError,
    VoiceInfo,
)
from triton_tts.gateway import audio
from triton_tts.gateway.metrics import CANCELLED, OK, GatewayMetrics, SpeechMetrics, Synthesis

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
# The ids OpenAI's clients send; all name the one served ensemble (its voices differ).
MODEL_IDS = ("triton-tts", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# OpenAI's voice names: each is the default voice unless --voice-alias says otherwise.
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
)  # fmt: skip
MIN_SPEED, MAX_SPEED = 0.25, 4.0  # OpenAI's range, and the server's (triton_tts/validation.py)
MAX_NOISE = 2.0  # the server's (triton_tts/validation.py)
VOICES_TTL_S = 30.0  # how long the voice list read from Triton is reused
WS_FORMATS = ("s16le", "f32le")


@dataclass
class GatewaySettings:
    triton_url: str = "localhost:8001"  # Triton's gRPC endpoint
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    max_input_chars: int = 4096  # OpenAI's own limit
    max_body_bytes: int = 65536
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers (browsers allow same origin only)
    heartbeat_s: float = 15.0  # WebSocket: a ping message after this long with nothing sent
    # One synthesis, first byte to last: streams are paced to playback, so this bounds the
    # audio too (4,096 characters at speed 0.25 run ~20 minutes).
    timeout_s: float = 1800.0
    retry_after_s: int = 1  # what a busy refusal tells callers to wait
    voice_aliases: dict[str, str] = field(default_factory=dict)  # name -> voice[:speaker]
    reconnect_s: float = 60.0  # a new gRPC channel (Triton's address resolved again); 0: never
    metrics: bool = True  # GET /metrics (no key: like the probes, for Prometheus)


class ApiError(Exception):
    """An error answered as OpenAI's error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send this error as the response, its code noted for the request's metrics."""
        self.note(scope)
        await self.response()(scope, receive, send)

    def note(self, scope: Scope) -> None:
        synthesis = scope.get("state", {}).get("synthesis")
        if isinstance(synthesis, Synthesis):
            synthesis.error_code = self.code


def invalid(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)


def from_tts_error(err: TTSError, settings: GatewaySettings) -> ApiError:
    """The client's error types -> status codes."""
    if isinstance(err, ServerBusy):
        # The server's own estimate when it gave one (admission's hint), in whole seconds.
        hint = err.retry_after_s
        retry = {"Retry-After": str(math.ceil(hint) if hint else settings.retry_after_s)}
        return ApiError(503, f"the server is busy, retry later ({err})", "server_busy", headers=retry)
    if isinstance(err, ServerUnavailable):
        return ApiError(503, f"the speech server is unavailable: {err}", "triton_unavailable")
    if isinstance(err, RequestRejected):
        return invalid(str(err), param="input", code="rejected_by_server")
    if isinstance(err, TimedOut):
        return ApiError(504, f"no audio in time: {err}", "timeout")
    return ApiError(500, str(err), "synthesis_failed")


@dataclass(frozen=True)
class SpeechRequest:
    text: str
    voice: str  # a served voice
    speaker_id: int | None
    speed: float
    response_format: str = "mp3"
    noise_scale: float | None = None  # extensions (VITS voices): None is the voice's own
    noise_w: float | None = None
    caller: str | None = None  # who asks, for the server's fair shares (caller_of)


class Voices:
    """The voices Triton serves (read from its config, reused for VOICES_TTL_S) and the
    names callers may use for them."""

    def __init__(self, client: Callable[[], AsyncTTSClient], aliases: dict[str, str]) -> None:
        self._client = client
        self._aliases = aliases
        self._served: list[VoiceInfo] = []
        self._read_at = -math.inf
        self._lock = asyncio.Lock()

    async def served(self) -> list[VoiceInfo]:
        async with self._lock:
            if time.monotonic() - self._read_at > VOICES_TTL_S or not self._served:
                try:
                    self._served = await self._client().voices()
                except TTSError as err:
                    raise from_tts_error(err, GatewaySettings()) from None
                self._read_at = time.monotonic()
            return self._served

    async def aliases(self) -> dict[str, str]:
        served = await self.served()
        default = served[0].name
        names = {v.name for v in served}
        out = {name: default for name in OPENAI_VOICES if name not in names}
        out.update(self._aliases)
        return out

    async def resolve(self, name: str | None) -> tuple[str, int | None]:
        """``name`` (a served voice, ``voice:speaker`` by speaker name or id, or an alias) ->
        (voice, speaker id)."""
        served = {v.name: v for v in await self.served()}
        wanted = (name or "").strip() or next(iter(served))
        wanted = (await self.aliases()).get(wanted, wanted)
        voice_name, _, speaker = wanted.partition(":")
        voice = served.get(voice_name)
        if voice is None:
            known = sorted(served) + sorted(await self.aliases())
            raise invalid(f"unknown voice {name!r}; this server has: {', '.join(known)}", "voice")
        if not speaker:
            return voice.name, None
        if speaker in voice.speakers:
            return voice.name, int(voice.speakers[speaker])
        if speaker.isdigit() and int(speaker) in voice.speakers.values():  # by id, as in tritonclient
            return voice.name, int(speaker)
        speakers = ", ".join(sorted(voice.speakers)) or "none"
        raise invalid(f"voice {voice.name!r} has no speaker {speaker!r}; it has: {speakers}", "voice")

    async def listing(self) -> dict[str, Any]:
        served = await self.served()
        return {
            "default": served[0].name,
            "voices": [
                {
                    "id": v.name,
                    "name": v.name,
                    "language": v.language,
                    "sample_rate": v.sample_rate,
                    "speakers": sorted(v.speakers, key=lambda s: v.speakers[s]),
                }
                for v in served
            ],
            "aliases": await self.aliases(),
        }


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(f"'{name}' must be a number, got {json.dumps(value)}", name)
    return float(value)


def _text(body: dict[str, Any], settings: GatewaySettings) -> str:
    text = body.get("input")
    if not isinstance(text, str):
        raise invalid(
            "'input' must be a string of text to speak",
            "input",
            "missing_input" if text is None else "invalid_type",
        )
    if not text.strip():
        raise invalid("'input' is empty: give some text to speak", "input", "empty_input")
    if len(text) > settings.max_input_chars:
        raise invalid(
            f"'input' has {len(text)} characters; this server takes at most {settings.max_input_chars}",
            "input",
            "string_above_max_length",
        )
    return text


async def parse_speech(
    body: Any, settings: GatewaySettings, voices: Voices, *, openai_body: bool = True
) -> SpeechRequest:
    """Validate a request body (OpenAI's for POST, the WebSocket's ``speak`` message)."""
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object", code="invalid_json")
    if openai_body:
        model = body.get("model")
        if model is None:
            raise invalid(
                f"'model' is required; this server answers to: {', '.join(MODEL_IDS)}",
                "model",
                "missing_model",
            )
        if model not in MODEL_IDS:
            raise invalid(
                f"unknown model {model!r}; this server answers to: {', '.join(MODEL_IDS)}",
                "model",
                "model_not_found",
            )
        fmt = body.get("response_format") or "mp3"
        if fmt in audio.NOT_ENCODABLE:
            raise invalid(
                f"response_format {fmt!r} is not supported here: {audio.NOT_ENCODABLE[fmt]}; "
                f"use one of {', '.join(audio.CONTENT_TYPES)}",
                "response_format",
                "unsupported_format",
            )
        if fmt not in audio.CONTENT_TYPES:
            raise invalid(
                f"unknown response_format {fmt!r}; use one of {', '.join(audio.CONTENT_TYPES)}",
                "response_format",
            )
        stream_format = body.get("stream_format", "audio")
        if stream_format not in (None, "audio"):
            raise invalid(
                f"stream_format {stream_format!r} is not supported here; use 'audio'", "stream_format"
            )
    else:
        fmt = "pcm"
    text = _text(body, settings)
    speed = _number(body, "speed", 1.0)
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise invalid(f"'speed' {speed:g} is outside [{MIN_SPEED:g}, {MAX_SPEED:g}]", "speed")
    voice = body.get("voice")
    if voice is not None and not isinstance(voice, str):
        raise invalid("'voice' must be a voice name (GET /v1/audio/voices lists them)", "voice")
    name, speaker = await voices.resolve(voice)
    noise: dict[str, float] = {}
    for knob in ("noise_scale", "noise_w"):  # beyond OpenAI's body (its SDK: extra_body)
        if body.get(knob) is not None:
            value = _number(body, knob, 0.0)
            if not 0.0 <= value <= MAX_NOISE:
                raise invalid(f"'{knob}' {value:g} is outside [0, {MAX_NOISE:g}]", knob)
            noise[knob] = value
    return SpeechRequest(
        text, name, speaker, speed, fmt, noise_scale=noise.get("noise_scale"), noise_w=noise.get("noise_w")
    )


async def open_stream(
    client: AsyncTTSClient, request: SpeechRequest, settings: GatewaySettings
) -> tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]:
    """Start a synthesis and wait for its first chunk (refusals surface here, before any
    response is sent); returns it and the rest."""
    chunks = client.stream(
        request.text,
        speed=request.speed,
        voice=request.voice,
        speaker_id=request.speaker_id,
        noise_scale=request.noise_scale,
        noise_w=request.noise_w,
        caller=request.caller,
    )
    try:
        first = await anext(chunks)
    except TTSError as err:
        await chunks.aclose()
        raise from_tts_error(err, settings) from None
    except StopAsyncIteration:
        raise ApiError(500, "the server sent no audio", "no_audio") from None
    return first, chunks


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes, counted as it arrives
    (a Content-Length over the limit is refused before reading)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = ApiError(413, f"the request body is over {self.limit} bytes", "request_too_large")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await too_big.answer(scope, receive, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise too_big
            return message

        await self.app(scope, counted, send)


def _key_of(headers: Any, query: Any) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    key = query.get("api_key")
    return str(key) if key else None


def caller_of(settings: GatewaySettings, key: str | None, peer: Any) -> str:
    """Who a request comes from, for the server's admission (each caller is held to its
    share): the API key (a digest: the key itself never leaves the gateway) when keys are
    required, else the peer's address."""
    if settings.api_keys and key:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    host = getattr(peer, "host", None)
    return f"peer:{host}" if host else ""


def authorized(settings: GatewaySettings, key: str | None) -> bool:
    if not settings.api_keys:
        return True
    return key is not None and any(hmac.compare_digest(key.encode(), k.encode()) for k in settings.api_keys)


def allowed_origin(origin: str, host: str, settings: GatewaySettings) -> bool:
    """A browser's Origin: this gateway's own (same host and port) or a --cors-origin."""
    if origin in settings.cors_origins or "*" in settings.cors_origins:
        return True
    return origin.split("://", 1)[-1].rstrip("/").lower() == host.lower()


class ApiKeys:
    """ASGI middleware: the bearer key on /v1/ HTTP routes (WebSockets check their own)."""

    def __init__(self, app: ASGIApp, settings: GatewaySettings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and scope["method"] != "OPTIONS":
            request = Request(scope)
            if not authorized(self.settings, _key_of(request.headers, {})):
                error = ApiError(
                    401, "a valid API key is required: send 'Authorization: Bearer KEY'", "invalid_api_key"
                )
                error.headers["WWW-Authenticate"] = "Bearer"
                await error.answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Gateway:
    """The HTTP endpoints, over an AsyncTTSClient made at start-up (in the server's loop)
    and made again every ``reconnect_s``: a new channel resolves Triton's address again, so
    Triton pods added since (a headless Service, dns:///) get their share. Calls in flight
    keep the channel they started on; it is closed once no call can still be using it."""

    def __init__(self, settings: GatewaySettings, metrics: GatewayMetrics) -> None:
        self.settings, self.metrics = settings, metrics
        self._client: AsyncTTSClient | None = None
        self._voices: Voices | None = None
        self._retired: set[asyncio.Task[None]] = set()
        self._users: Counter[AsyncTTSClient] = Counter()  # calls in progress, per client

    def _connect(self) -> AsyncTTSClient:
        # Round robin: with an address that resolves to several Triton pods, calls spread
        # over them instead of all going to the first.
        return AsyncTTSClient(
            self.settings.triton_url,
            protocol="grpc",
            round_robin=True,
            timeout_s=self.settings.timeout_s,
            retry=NO_RETRIES,
        )

    async def _reconnect_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            old, self._client = self._client, self._connect()
            if old is not None:
                retire = asyncio.create_task(self._close_when_idle(old))
                self._retired.add(retire)
                retire.add_done_callback(self._retired.discard)

    async def _close_when_idle(self, client: AsyncTTSClient) -> None:
        """Close a replaced client once no call uses it (a call ends within timeout_s)."""
        deadline = time.monotonic() + self.settings.timeout_s + 5
        while self._users[client] > 0 and time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        await client.close()

    async def open_stream(
        self, request: SpeechRequest
    ) -> tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]:
        """:func:`open_stream` on the current client, which counts as in use until the
        returned chunks are read or closed."""
        client = self.client
        self._users[client] += 1
        try:
            first, rest = await open_stream(client, request, self.settings)
        except BaseException:
            self._users[client] -= 1
            raise

        async def held() -> AsyncGenerator[AudioChunk, None]:
            try:
                async with aclosing(rest):
                    async for chunk in rest:
                        yield chunk
            finally:
                self._users[client] -= 1

        return first, held()

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._client = self._connect()
        self._voices = Voices(lambda: self.client, self.settings.voice_aliases)
        log.info("gateway: Triton at %s (gRPC)", self.settings.triton_url)
        reconnect = (
            asyncio.create_task(self._reconnect_every(self.settings.reconnect_s))
            if self.settings.reconnect_s > 0
            else None
        )
        try:
            yield
        finally:
            if reconnect is not None:
                reconnect.cancel()
            for task in list(self._retired):
                task.cancel()
            await self.client.close()

    @property
    def client(self) -> AsyncTTSClient:
        assert self._client is not None, "used before start-up"
        return self._client

    @property
    def voices(self) -> Voices:
        assert self._voices is not None, "used before start-up"
        return self._voices

    async def speech(self, request: Request) -> Response:
        synthesis: Synthesis = request.scope["state"]["synthesis"]  # SpeechMetrics opened it
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise invalid(f"the body is not JSON: {err}", code="invalid_json") from None
        speech_request = await parse_speech(body, self.settings, self.voices)
        caller = caller_of(self.settings, _key_of(request.headers, {}), request.client)
        speech_request = replace(speech_request, caller=caller)
        synthesis.format = speech_request.response_format
        first, rest = await self.open_stream(speech_request)
        encoder = audio.encoder(speech_request.response_format, first.sample_rate)

        async def body_bytes() -> AsyncIterator[bytes]:
            # Leaving early (the caller hung up) closes ``rest``: the gRPC call is cancelled.
            unsent = 0.0  # seconds of audio encoded but not yet out (an encoder may hold some)
            async with aclosing(rest):
                chunk: AudioChunk | None = first
                while chunk is not None:
                    unsent += len(chunk.audio) / chunk.sample_rate
                    data = encoder.encode(chunk.audio)
                    if data:
                        synthesis.audio_sent(unsent)
                        unsent = 0.0
                        yield data
                    try:
                        chunk = await anext(rest, None)
                    except TTSError as err:
                        # The status line is gone: the connection is cut without the last
                        # chunk of the body, so the caller sees a failed read, never a short file.
                        log.warning(
                            "speech cut short after its first chunk, the connection is closed: %s", err
                        )
                        raise
            data = encoder.finish()
            synthesis.audio_sent(unsent)
            yield data

        headers = {
            "X-Sample-Rate": str(encoder.sample_rate),
            "X-Voice": speech_request.voice,
            "Cache-Control": "no-store",
        }
        return StreamingResponse(body_bytes(), media_type=encoder.content_type, headers=headers)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model(m) for m in MODEL_IDS]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model"]
        if model_id not in MODEL_IDS:
            known = ", ".join(MODEL_IDS)
            raise ApiError(404, f"no model {model_id!r}; this server answers to: {known}", "model_not_found")
        return JSONResponse(_model(model_id))

    async def voice_list(self, request: Request) -> Response:
        return JSONResponse(await self.voices.listing())

    async def live(self, request: Request) -> Response:
        return JSONResponse({"status": "live"})

    async def ready(self, request: Request) -> Response:
        ready = await self.client.is_ready()
        body = {"status": "ready" if ready else "unready", "triton": self.settings.triton_url}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def socket(self, websocket: WebSocket) -> None:
        await SpeechSocket(websocket, self.settings, self.open_stream, self.voices, self.metrics).run()

    async def metrics_page(self, request: Request) -> Response:
        data, content_type = self.metrics.exposition(request.headers.get("accept"))
        return Response(data, headers={"Content-Type": content_type})


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    exc.note(request.scope)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code).response()


def create_app(settings: GatewaySettings) -> Starlette:
    metrics = GatewayMetrics()
    gateway = Gateway(settings, metrics)
    middleware = [
        # outermost but CORS: it counts what the two below refuse too
        Middleware(SpeechMetrics, metrics=metrics, code_of=lambda err: from_tts_error(err, settings).code),
        Middleware(BodyLimit, limit=settings.max_body_bytes),
        Middleware(ApiKeys, settings=settings),
    ]
    if settings.cors_origins:
        cors = Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
            expose_headers=["X-Sample-Rate", "X-Voice", "Retry-After"],
        )
        middleware.insert(0, cors)
    routes = [
        Route("/v1/audio/speech", gateway.speech, methods=["POST"]),
        Route("/v1/models", gateway.models),
        Route("/v1/models/{model:path}", gateway.model),
        Route("/v1/audio/voices", gateway.voice_list),
        WebSocketRoute("/v1/audio/speech/ws", gateway.socket),
        Route("/health/live", gateway.live),
        Route("/health/ready", gateway.ready),
        Route("/", gateway.page),
    ]
    if settings.metrics:
        routes.append(Route("/metrics", gateway.metrics_page))
    if STATIC.is_dir():
        routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ApiError: _api_error,
        HTTPException: _http_error,
    }
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=gateway.lifespan
    )


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "triton-tts"}


class SpeechSocket:
    """One WebSocket: ``speak`` messages in, one synthesis at a time; a heartbeat while
    idle; a ``cancel`` message or a closed socket cancels the synthesis on the server."""

    def __init__(
        self,
        websocket: WebSocket,
        settings: GatewaySettings,
        open_speech: Callable[
            [SpeechRequest], Awaitable[tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]]
        ],
        voices: Voices,
        metrics: GatewayMetrics,
    ) -> None:
        self.ws, self.settings, self.open_speech, self.voices = websocket, settings, open_speech, voices
        self.metrics = metrics
        self.last_sent = time.monotonic()
        self.send_lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None
        self.request_id = 0

    async def send_json(self, message: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(message))
            self.last_sent = time.monotonic()

    async def send_bytes(self, data: bytes) -> None:
        async with self.send_lock:
            await self.ws.send_bytes(data)
            self.last_sent = time.monotonic()

    async def error(self, request_id: int | None, err: ApiError) -> None:
        await self.send_json({"type": "error", "id": request_id, **err.body()})

    async def run(self) -> None:
        await self.ws.accept()
        origin = self.ws.headers.get("origin")
        if origin is not None and not allowed_origin(origin, self.ws.headers.get("host", ""), self.settings):
            # Browsers let any page open a WebSocket anywhere (CORS does not apply): only
            # pages from this gateway or the --cors-origin list may. Other clients send none.
            await self.error(
                None, ApiError(403, f"origin {origin} may not open this socket (see --cors-origin)", "origin")
            )
            await self.ws.close(code=1008)
            return
        if not authorized(self.settings, _key_of(self.ws.headers, self.ws.query_params)):
            await self.error(
                None, ApiError(401, "a valid API key is required (header or ?api_key=)", "invalid_api_key")
            )
            await self.ws.close(code=1008)
            return
        heartbeat = asyncio.create_task(self.heartbeat())
        self.metrics.sockets.inc()
        try:
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                await self.handle(message.get("text"))
        except WebSocketDisconnect:
            return
        finally:
            self.metrics.sockets.dec()
            heartbeat.cancel()
            await self.cancel()
            with suppress(asyncio.CancelledError):
                await heartbeat

    async def handle(self, text: str | None) -> None:
        try:
            message = json.loads(text) if text is not None else None
        except json.JSONDecodeError:
            message = None
        if not isinstance(message, dict):
            message = {}
        kind = message.get("type")
        if kind == "speak":
            if self.task is not None and not self.task.done():
                await self.error(
                    None,
                    invalid(
                        "a synthesis is in progress: wait for its end or send cancel", code="busy_socket"
                    ),
                )
                return
            self.request_id += 1
            self.task = asyncio.create_task(self.speak(self.request_id, message))
        elif kind == "cancel":
            if await self.cancel():
                await self.send_json({"type": "cancelled", "id": self.request_id})
        elif kind == "ping":
            await self.send_json({"type": "pong", "time": time.time()})
        else:
            await self.error(
                None,
                invalid(
                    'send JSON text messages: {"type": "speak", "input": ...} or {"type": "cancel"}',
                    code="invalid_message",
                ),
            )

    async def cancel(self) -> bool:
        """Cancel the synthesis in progress (its gRPC call with it); True if there was one."""
        task, self.task = self.task, None
        if task is None or task.done():
            return False
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task
        return True

    async def speak(self, request_id: int, message: dict[str, Any]) -> None:
        synthesis = self.metrics.synthesis("websocket")
        outcome = CANCELLED  # unless it ends otherwise: a cancel message or a closed socket
        try:
            fmt = message.get("format", "s16le")
            if fmt not in WS_FORMATS:
                raise invalid(f"unknown format {fmt!r}; use one of {', '.join(WS_FORMATS)}", "format")
            synthesis.format = fmt
            request = await parse_speech(message, self.settings, self.voices, openai_body=False)
            caller = caller_of(self.settings, _key_of(self.ws.headers, self.ws.query_params), self.ws.client)
            request = replace(request, caller=caller)
            started = time.monotonic()
            first, rest = await self.open_speech(request)
            await self.send_json(
                {
                    "type": "start",
                    "id": request_id,
                    "sample_rate": first.sample_rate,
                    "channels": 1,
                    "format": fmt,
                    "voice": request.voice,
                }
            )
            chunks, samples = 0, 0
            async with aclosing(rest):
                chunk: AudioChunk | None = first
                while chunk is not None:
                    data = (
                        audio.to_pcm16(chunk.audio) if fmt == "s16le" else chunk.audio.astype("<f4").tobytes()
                    )
                    await self.send_bytes(data)
                    synthesis.audio_sent(len(chunk.audio) / chunk.sample_rate)
                    chunks, samples = chunks + 1, samples + len(chunk.audio)
                    chunk = await anext(rest, None)
            await self.send_json(
                {
                    "type": "end",
                    "id": request_id,
                    "chunks": chunks,
                    "samples": samples,
                    "audio_seconds": samples / first.sample_rate,
                    "synthesis_seconds": time.monotonic() - started,
                }
            )
            outcome = OK
        except ApiError as err:
            outcome = err.code or "error"
            await self.error(request_id, err)
        except TTSError as err:  # after the first chunk
            api_error = from_tts_error(err, self.settings)
            outcome = api_error.code or "error"
            await self.error(request_id, api_error)
        except WebSocketDisconnect:
            pass
        except Exception as err:  # a bug: said on the socket, logged with its traceback
            outcome = "internal_error"
            log.exception("speak %d failed", request_id)
            with suppress(Exception):
                await self.error(request_id, ApiError(500, f"internal error: {err}", "internal_error"))
        finally:
            synthesis.end(outcome)
            if self.ws.application_state != WebSocketState.CONNECTED:
                log.debug("socket closed during request %d", request_id)

    async def heartbeat(self) -> None:
        """A ping message whenever nothing was sent for ``heartbeat_s`` (idle or not)."""
        while True:
            wait = self.last_sent + self.settings.heartbeat_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                await self.send_json({"type": "ping", "time": time.time()})
            except Exception:  # closed: the receive loop ends the session
                return
