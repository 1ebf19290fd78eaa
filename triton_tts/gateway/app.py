"""The gateway: OpenAI's speech API, a WebSocket of PCM, and a page to listen, in front of
Triton. One ASGI app (Starlette, served by uvicorn); every synthesis is one gRPC stream
of ``tts_stream`` (triton_tts.client.AsyncTTSClient), so audio leaves as chunks are made,
and a caller that goes away cancels its request on the server.

Routes:
  POST /v1/audio/speech        OpenAI's body (model, input, voice, response_format, speed):
                               the audio, or with stream_format "sse" OpenAI's events
                               (triton_tts.gateway.sse)
  POST /v1/audio/speech/captioned   the same and ``stream``: base64 audio with each word's
                               times, whole or as JSON lines (triton_tts.gateway.captioned)
  GET  /v1/models[/{id}]       the model ids it answers to
  GET  /v1/audio/voices        served voices, their speakers, and the OpenAI voice aliases
  POST /v1/audio/voices/{voice}/speakers   a clip stored as a named speaker of an XTTS
                               voice (multipart; keyed gateways only: triton_tts.gateway.speakers)
  POST /v1/audio/dub           a subtitle file (and the original) in, a zip of the timed track
                               and its report out (multipart: triton_tts.gateway.dubbing)
  WS   /v1/audio/speech/ws     text in; a JSON header, 16-bit PCM chunks, a JSON end out
                               (triton_tts.gateway.speech_socket)
  GET  /                       the listening page (static/)
  GET  /health/live, /health/ready   probes (ready: Triton and tts_stream ready)
  GET  /metrics                the gateway's Prometheus metrics (triton_tts.gateway.metrics)

Bodies and messages are parsed at the edge (triton_tts.gateway.schemas). Errors are
OpenAI's JSON (triton_tts.gateway.errors): bad input 400, a missing or wrong API key 401,
a body not complete in time 408 (triton_tts.gateway.connections), a body over the limit
413, a busy Triton 503 with Retry-After, an unreachable Triton 503, no answer in time 504,
the server's own failure 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Send
from starlette.websockets import WebSocket

from triton_tts.client import NO_RETRIES, AsyncTTSClient, AudioChunk, TTSError
from triton_tts.gateway import audio, captioned, dubbing, riva, speakers, sse
from triton_tts.gateway.access import ApiKeys, BodyLimit, caller_of, key_of
from triton_tts.gateway.connections import BodyDeadline, client_gone
from triton_tts.gateway.errors import ApiError, from_tts_error
from triton_tts.gateway.metrics import GatewayMetrics, SpeechMetrics, Synthesis
from triton_tts.gateway.schemas import (
    MAX_WAIT_HEADER,
    MODEL_IDS,
    SpeechBody,
    SpeechRequest,
    parse_captioned_body,
    parse_max_wait,
    parse_speech_body,
)
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.gateway.speech_socket import SocketCounts, SpeechSocket
from triton_tts.gateway.voices import Voices

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"

__all__ = ["MODEL_IDS", "Gateway", "GatewaySettings", "create_app"]


async def open_stream(
    client: AsyncTTSClient, request: SpeechRequest, settings: GatewaySettings, **options: Any
) -> tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]:
    """Start a synthesis and wait for its first chunk (refusals surface here, before any
    response is sent); returns it and the rest. ``options``: the client's other synthesis
    options (the Riva door's lexicon and reference clip)."""
    chunks = client.stream(
        request.text,
        speed=request.speed,
        voice=request.voice,
        speaker_id=request.speaker_id,
        noise_scale=request.noise_scale,
        noise_w=request.noise_w,
        caller=request.caller,
        timestamps=request.timestamps,
        text_format=request.text_format,
        max_wait_s=request.max_wait_s,
        voice_mix=request.voice_mix,
        **options,
    )
    try:
        first = await anext(chunks)
    except TTSError as err:
        await chunks.aclose()
        raise from_tts_error(err, settings) from None
    except StopAsyncIteration:
        raise ApiError(500, "the server sent no audio", "no_audio") from None
    return first, chunks


class BodyCut(Exception):
    """A streamed body that cannot be finished (logged and counted where raised)."""


class AudioStream(StreamingResponse):
    """A streamed body that a failure cuts detectably: after a :class:`BodyCut` the
    chunked body ends without its terminating chunk (uvicorn closes the connection), so
    the caller's HTTP client raises (Python's http.client IncompleteRead, httpx
    RemoteProtocolError, curl error 18) instead of reading a short file as whole."""

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for data in self.body_iterator:
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except BodyCut:
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class Gateway:
    """The HTTP endpoints, over an AsyncTTSClient made at start-up (in the server's loop)
    and made again every ``reconnect_s``: a new channel resolves Triton's address again, so
    Triton pods added since (a headless Service, dns:///) get their share. Calls in flight
    keep the channel they started on; it is closed once no call can still be using it."""

    def __init__(self, settings: GatewaySettings, metrics: GatewayMetrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.sockets = SocketCounts(settings)
        self._client: AsyncTTSClient | None = None
        self._voices: Voices | None = None
        self._retired: set[asyncio.Task[None]] = set()
        self._users: Counter[AsyncTTSClient] = Counter()  # calls in progress, per client

    def _connect(self) -> AsyncTTSClient:
        # Round robin: with an address that resolves to several Triton pods, calls spread
        # over them instead of all going to the first. Triton's ports take one key, the
        # first of the gateway's (docs/api.md, "Keys").
        return AsyncTTSClient(
            self.settings.triton_url,
            protocol="grpc",
            round_robin=True,
            timeout_s=self.settings.timeout_s,
            retry=NO_RETRIES,
            api_key=self.settings.api_keys[0] if self.settings.api_keys else None,
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
        self, request: SpeechRequest, **options: Any
    ) -> tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]:
        """:func:`open_stream` on the current client, which counts as in use until the
        returned chunks are read or closed."""
        client = self.client
        self._users[client] += 1
        try:
            first, rest = await open_stream(client, request, self.settings, **options)
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
        door = await riva.start(self)  # Riva's TTS API on its own port, in this loop
        try:
            yield
        finally:
            if door is not None:  # calls in flight get as long as HTTP responses do
                await door.stop(self.settings.timeout_s)
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

    async def speech_request(
        self, body: SpeechBody, request: Request, timestamps: bool = False
    ) -> SpeechRequest:
        voice, speaker, mix = await self.voices.resolve(body.voice)
        return SpeechRequest(
            body.input,
            voice,
            speaker,
            body.speed,
            body.response_format,
            noise_scale=body.noise_scale,
            noise_w=body.noise_w,
            caller=caller_of(self.settings, key_of(request.headers, {}), request.client),
            timestamps=timestamps,
            max_wait_s=parse_max_wait(request.headers.get(MAX_WAIT_HEADER)),
            voice_mix=mix,
        )

    async def speech(self, request: Request) -> Response:
        synthesis: Synthesis = request.scope["state"]["synthesis"]  # SpeechMetrics opened it
        body = parse_speech_body(await request.body(), self.settings.max_input_chars)
        synthesis.format = body.response_format
        speech_request = await self.speech_request(body, request)
        first, rest = await self.open_stream(speech_request)
        encoder = audio.encoder(speech_request.response_format, first.sample_rate)
        unsent = 0.0  # seconds of audio encoded but not yet out (an encoder may hold some)

        async def encoded() -> AsyncGenerator[bytes, None]:
            nonlocal unsent
            chunk: AudioChunk | None = first
            while chunk is not None:
                unsent += len(chunk.audio) / chunk.sample_rate
                yield encoder.encode(chunk.audio)
                chunk = await anext(rest, None)
            yield encoder.finish()

        # The status line leaves with the first bytes: until an encoder has some (flac:
        # the whole file), a failure is still answered with its own status and error.
        pieces = encoded()
        head = b""
        try:
            async for head in pieces:
                if head:
                    break
        except TTSError as err:
            await rest.aclose()
            raise from_tts_error(err, self.settings) from None

        events = body.stream_format == "sse"  # each piece an event, then done (or error)

        async def body_bytes() -> AsyncIterator[bytes]:
            # Leaving early (the caller hung up) closes ``rest``: the gRPC call is cancelled.
            nonlocal unsent
            async with aclosing(rest), aclosing(pieces):
                piece = head
                try:
                    while True:
                        if piece:
                            synthesis.audio_sent(unsent)
                            unsent = 0.0
                            yield sse.delta(piece) if events else piece
                        piece = await anext(pieces)
                except StopAsyncIteration:
                    if unsent:
                        synthesis.audio_sent(unsent)
                except TTSError as err:
                    error = from_tts_error(err, self.settings)
                    self.cut(synthesis, error, err)
                    if events:
                        yield sse.error(error)
                    raise BodyCut from None
            if events:
                yield sse.done(body.input, synthesis.audio_seconds)

        headers = {
            "X-Sample-Rate": str(encoder.sample_rate),
            "X-Voice": speech_request.voice,
            "Cache-Control": "no-store",
        }
        media_type = sse.MEDIA_TYPE if events else encoder.content_type
        return AudioStream(body_bytes(), media_type=media_type, headers=headers)

    async def captioned(self, request: Request) -> Response:
        """Speech and its words' times (triton_tts.gateway.captioned)."""
        synthesis: Synthesis = request.scope["state"]["synthesis"]
        body = parse_captioned_body(await request.body(), self.settings.max_input_chars)
        synthesis.format = body.response_format
        speech_request = await self.speech_request(body, request, timestamps=True)
        first, rest = await self.open_stream(speech_request)  # refusals: their own status
        encoder = audio.encoder(speech_request.response_format, first.sample_rate)
        headers = {"X-Voice": speech_request.voice, "Cache-Control": "no-store"}
        if body.stream:
            answer = captioned.lines(first, rest, encoder, synthesis, self.settings)
            return StreamingResponse(answer, media_type=captioned.NDJSON, headers=headers)
        whole = await captioned.whole(first, rest, encoder, synthesis, self.settings)
        return JSONResponse({**whole, "voice": speech_request.voice}, headers=headers)

    def cut(self, synthesis: Synthesis, error: ApiError, cause: TTSError) -> None:
        """A response whose status is sent fails: logged, counted, and (AudioStream) cut."""
        synthesis.error_code = error.code
        self.metrics.cut.labels(error.code or "error").inc()
        log.warning(
            "speech response cut after %.1f s of audio sent, the connection closed without the body's "
            "end (%s): %s",
            synthesis.audio_seconds,
            error.code,
            cause,
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model(m) for m in MODEL_IDS]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model"]
        if model_id not in MODEL_IDS:
            known = ", ".join(MODEL_IDS)
            raise ApiError(404, f"no model {model_id!r}; this server answers to: {known}", "model_not_found")
        return JSONResponse(_model(model_id))

    async def add_speaker(self, request: Request) -> Response:
        return await speakers.add_speaker(request, self.settings, self.voices, self.client)

    async def dub(self, request: Request) -> Response:
        caller = caller_of(self.settings, key_of(request.headers, {}), request.client)
        return await dubbing.dub(request, self.settings, self.voices, caller)

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
        await SpeechSocket(
            websocket, self.settings, self.open_stream, self.voices, self.metrics, self.sockets
        ).run()

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
        Middleware(SpeechMetrics, metrics=metrics),
        Middleware(
            BodyLimit,
            limit=settings.max_body_bytes,
            uploads=(
                (speakers.UPLOAD_PATH, settings.max_upload_bytes),
                (dubbing.DUB_PATH, settings.max_dub_upload_bytes),
            ),
        ),
        Middleware(ApiKeys, settings=settings),
        Middleware(BodyDeadline, timeout_s=settings.body_timeout_s, min_rate=settings.body_min_rate),
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
        Route("/v1/audio/speech/captioned", gateway.captioned, methods=["POST"]),
        Route("/v1/models", gateway.models),
        Route("/v1/models/{model:path}", gateway.model),
        Route("/v1/audio/voices", gateway.voice_list),
        Route("/v1/audio/voices/{voice}/speakers", gateway.add_speaker, methods=["POST"]),
        Route("/v1/audio/dub", gateway.dub, methods=["POST"]),
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
        ClientDisconnect: client_gone,
    }
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=gateway.lifespan
    )


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "triton-tts"}
