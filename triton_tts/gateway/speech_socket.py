"""``WS /v1/audio/speech/ws``: ``speak`` messages in, a JSON ``start``, one binary PCM
message per chunk and a JSON ``end`` out; one synthesis at a time per socket. Or a text
stream: an optional ``start``, ``append`` pieces as they are written, ``flush``, ``end``;
each sentence is synthesised as soon as its end is settled (:mod:`.text_stream`), and the
audio comes back in order, between one ``start`` and one ``end``. With ``timestamps``
true (``speak`` or ``start``), each binary message comes after a JSON ``words``
message: the words that chunk completes, with their start and end in seconds from the
start of the request's (or text stream's) audio.

Its limits (each a flag of ``triton-tts gateway``): a message is at most
``--max-body-bytes`` (uvicorn refuses a bigger one from its frame header, close code
1009), at most ``--ws-max-sockets`` are open and ``--ws-max-sockets-per-key`` per API key
(the next gets an ``error`` ``too_many_sockets`` and close code 1013), and a socket with
no message and no synthesis for ``--ws-idle-timeout-s`` is closed (an ``error``
``idle_timeout``, close code 1000). A malformed message gets an ``error`` and the socket
serves on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing, suppress
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from triton_tts.client import AudioChunk, TTSError, WordTime
from triton_tts.gateway import audio
from triton_tts.gateway.access import allowed_origin, authorized, caller_of, key_digest, key_of
from triton_tts.gateway.captioned import word_list
from triton_tts.gateway.errors import ApiError, from_tts_error, invalid
from triton_tts.gateway.metrics import CANCELLED, OK, GatewayMetrics
from triton_tts.gateway.schemas import (
    Append,
    End,
    Flush,
    MessageRefused,
    Speak,
    SpeechRequest,
    StartText,
    parse_message,
)
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.gateway.text_stream import CLAUSE_WAIT_S, TextStream
from triton_tts.gateway.voices import Voices

log = logging.getLogger(__name__)

# A text stream holds at most this much unspoken text (and --max-input-chars, if lower).
MAX_HELD_CHARS = 4000
OpenSpeech = Callable[[SpeechRequest], Awaitable[tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]]]
TRY_AGAIN_LATER = 1013  # WebSocket close code: the server cannot take it now
POLICY = 1008  # close code: refused (origin, key)
CANCEL_RETRY_S = 1.0  # a cancelled synthesis still running after this is cancelled again


class SocketCounts:
    """The sockets open, in all and per API key (keys only: without keys every caller
    behind one proxy would share its address)."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.total = 0
        self.per_key: Counter[str] = Counter()

    def admit(self, key: str | None) -> ApiError | None:
        """Count one more socket, or say why not."""
        if self.total >= self.settings.ws_max_sockets:
            return ApiError(
                503,
                f"this gateway has {self.total} WebSockets open, its most (--ws-max-sockets); try later",
                "too_many_sockets",
            )
        if key is not None and self.per_key[key] >= self.settings.ws_max_sockets_per_key:
            return ApiError(
                429,
                f"this API key has {self.per_key[key]} WebSockets open, its most "
                "(--ws-max-sockets-per-key): close one, or send more requests on one socket",
                "too_many_sockets",
            )
        self.total += 1
        if key is not None:
            self.per_key[key] += 1
        return None

    def release(self, key: str | None) -> None:
        self.total -= 1
        if key is not None:
            self.per_key[key] -= 1
            if self.per_key[key] <= 0:
                del self.per_key[key]


class SpeechSocket:
    """One WebSocket: ``speak`` messages in, one synthesis at a time; a heartbeat while
    idle; a ``cancel`` message or a closed socket cancels the synthesis on the server."""

    def __init__(
        self,
        websocket: WebSocket,
        settings: GatewaySettings,
        open_speech: OpenSpeech,
        voices: Voices,
        metrics: GatewayMetrics,
        counts: SocketCounts,
    ) -> None:
        self.ws, self.settings, self.open_speech, self.voices = websocket, settings, open_speech, voices
        self.metrics, self.counts = metrics, counts
        self.last_sent = time.monotonic()
        self.last_active = time.monotonic()  # a message received, or a synthesis running
        self.send_lock = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None
        self.request_id = 0
        self.key = key_of(self.ws.headers, self.ws.query_params)
        # The text stream open on this socket (its worker is self.task), if any.
        self.stream: TextStream | None = None
        self.stream_queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.stream_ending = False
        self.awaiting_text = False  # the stream's worker waits for text: the socket may idle
        self.pause_timer: asyncio.TimerHandle | None = None

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

    async def refuse(self, err: ApiError, close_code: int) -> None:
        await self.error(None, err)
        await self.ws.close(code=close_code)

    async def run(self) -> None:
        await self.ws.accept()
        origin = self.ws.headers.get("origin")
        if origin is not None and not allowed_origin(origin, self.ws.headers.get("host", ""), self.settings):
            # Browsers let any page open a WebSocket anywhere (CORS does not apply): only
            # pages from this gateway or the --cors-origin list may. Other clients send none.
            err = ApiError(403, f"origin {origin} may not open this socket (see --cors-origin)", "origin")
            await self.refuse(err, POLICY)
            return
        if not authorized(self.settings, self.key):
            err = ApiError(401, "a valid API key is required (header or ?api_key=)", "invalid_api_key")
            await self.refuse(err, POLICY)
            return
        counted_as = key_digest(self.key) if self.settings.api_keys and self.key else None
        refused = self.counts.admit(counted_as)
        if refused is not None:
            log.warning("WebSocket refused: %s", refused.message)
            await self.refuse(refused, TRY_AGAIN_LATER)
            return
        heartbeat = asyncio.create_task(self.heartbeat())
        self.metrics.sockets.inc()
        try:
            await self.receive_until_closed()
        except WebSocketDisconnect:
            return
        finally:
            self.counts.release(counted_as)
            self.metrics.sockets.dec()
            heartbeat.cancel()
            await self.cancel()
            with suppress(asyncio.CancelledError):
                await heartbeat

    async def receive_until_closed(self) -> None:
        idle_s = self.settings.ws_idle_timeout_s  # 0: never closed for idling
        while True:
            if self.task is not None and not self.task.done() and not self.awaiting_text:
                self.last_active = time.monotonic()  # a synthesis running is not idle
            wait = self.last_active + idle_s - time.monotonic() if idle_s > 0 else None
            if wait is not None and wait <= 0:
                await self.refuse(
                    ApiError(408, f"closed after {idle_s:g} s idle (--ws-idle-timeout-s)", "idle_timeout"),
                    1000,
                )
                return
            try:
                message = await asyncio.wait_for(self.ws.receive(), timeout=wait)
            except asyncio.TimeoutError:
                continue
            if message["type"] == "websocket.disconnect":
                return
            self.last_active = time.monotonic()
            await self.handle(message.get("text", message.get("bytes")))

    async def handle(self, text: str | bytes | None) -> None:
        try:
            message = parse_message(text, self.settings.max_input_chars)
        except MessageRefused as err:
            if err.speak and self.busy():
                await self.refuse_busy()
                return
            request_id = None
            if err.speak:  # a speak is numbered and counted, whether it is taken or not
                self.request_id += 1
                request_id = self.request_id
                self.metrics.synthesis("websocket").end(err.code or "error")
            await self.error(request_id, err)
            return
        if isinstance(message, Speak):
            if self.busy():
                await self.refuse_busy()
                return
            self.request_id += 1
            self.task = asyncio.create_task(self.speak(self.request_id, message))
        elif isinstance(message, (StartText, Append, Flush, End)):
            await self.text_message(message)
        elif message.type == "cancel":
            if await self.cancel():
                await self.send_json({"type": "cancelled", "id": self.request_id})
        else:
            await self.send_json({"type": "pong", "time": time.time()})

    def busy(self) -> bool:
        return self.task is not None and not self.task.done()

    async def refuse_busy(self) -> None:
        await self.error(
            None, invalid("a synthesis is in progress: wait for its end or send cancel", code="busy_socket")
        )

    async def text_message(self, message: StartText | Append | Flush | End) -> None:
        """A text stream's message: open one (``start``, or the first ``append``), add to
        it, speak what it holds (``flush``), or close it (``end``)."""
        if isinstance(message, StartText) or self.stream is None:
            if self.busy():  # a speak, or (for start) a text stream already open
                await self.refuse_busy()
                return
            if isinstance(message, (Flush, End)):
                refused = invalid("no text stream is open: send append first", code="no_text_stream")
                await self.error(None, refused)
                return
            self.open_stream(message if isinstance(message, StartText) else StartText(type="start"))
            if isinstance(message, StartText):
                return
        assert self.stream is not None
        # A refused message leaves the stream going: its error has no id (as a refused speak),
        # which only an error that ends the stream carries.
        if self.stream_ending:
            ending = "the text stream is ending: wait for its end, or send cancel"
            await self.error(None, invalid(ending, code="busy_socket"))
            return
        if isinstance(message, Append):
            try:
                ready = self.stream.append(message.text)
            except ValueError as err:
                await self.error(None, invalid(str(err), "text", "text_stream_full"))
                return
            self.queue_texts(ready)
            if self.pause_timer is not None:
                self.pause_timer.cancel()
            self.pause_timer = asyncio.get_running_loop().call_later(CLAUSE_WAIT_S, self.writer_paused)
            return
        self.queue_texts(self.stream.flush())
        if isinstance(message, End):
            self.stream_ending = True
            self.stream_queue.put_nowait(None)

    def open_stream(self, voicing: StartText) -> None:
        self.request_id += 1
        self.stream = TextStream(min(self.settings.max_input_chars, MAX_HELD_CHARS))
        self.stream_queue = asyncio.Queue()
        self.stream_ending = False
        self.task = asyncio.create_task(self.speak_stream(self.request_id, voicing, self.stream_queue))

    def queue_texts(self, texts: list[str]) -> None:
        for text in texts:
            self.stream_queue.put_nowait(text)

    def writer_paused(self) -> None:
        self.pause_timer = None
        if self.stream is not None and not self.stream_ending:
            self.queue_texts(self.stream.paused())

    def close_stream(self) -> None:
        """The stream's text is dropped (its end, a cancel, an error)."""
        if self.pause_timer is not None:
            self.pause_timer.cancel()
            self.pause_timer = None
        self.stream, self.stream_ending, self.awaiting_text = None, False, False

    async def cancel(self) -> bool:
        """Cancel the synthesis in progress (its gRPC call with it) and drop a text stream's
        unspoken text; True if there was one."""
        self.close_stream()
        task, self.task = self.task, None
        if task is None or task.done():
            return False
        # Cancelled again until it ends: a cancel can be lost inside a library (asyncio's
        # wait_for before Python 3.12 drops one that arrives as its wait ends), and a text
        # stream that went on would speak the dropped text and then wait for more forever.
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_RETRY_S)
        with suppress(asyncio.CancelledError, Exception):
            task.result()
        return True

    async def speak(self, request_id: int, message: Speak) -> None:
        synthesis = self.metrics.synthesis("websocket")
        synthesis.format = message.format

        async def work() -> None:
            name, speaker, mix = await self.voices.resolve(message.voice)
            started = time.monotonic()
            first, rest = await self.open_speech(self.request_for(message.input, name, speaker, message, mix))
            await self.send_start(request_id, first.sample_rate, message.format, name)
            chunks, samples = await self.send_audio(request_id, first, rest, message.format, synthesis)
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

        outcome = CANCELLED  # unless it ends otherwise: a cancel message or a closed socket
        try:
            outcome = await self.answered(request_id, "speak", work)
        finally:
            synthesis.end(outcome)
            self.last_active = time.monotonic()
            if self.ws.application_state != WebSocketState.CONNECTED:
                log.debug("socket closed during request %d", request_id)

    def request_for(
        self, text: str, voice: str, speaker: int | None, voicing: Speak | StartText, mix: str | None = None
    ) -> SpeechRequest:
        """A synthesis of ``text`` as ``speak`` or a text stream's ``start`` asks for it."""
        return SpeechRequest(
            text,
            voice,
            speaker,
            voicing.speed,
            "pcm",
            noise_scale=voicing.noise_scale,
            noise_w=voicing.noise_w,
            caller=caller_of(self.settings, self.key, self.ws.client),
            timestamps=voicing.timestamps,
            # a text stream's sentences are text: SSML is a whole document (speak it whole)
            text_format="text" if isinstance(voicing, StartText) else None,
            voice_mix=mix,
        )

    async def send_start(self, request_id: int, sample_rate: int, fmt: str, voice: str) -> None:
        await self.send_json(
            {
                "type": "start",
                "id": request_id,
                "sample_rate": sample_rate,
                "channels": 1,
                "format": fmt,
                "voice": voice,
            }
        )

    async def answered(self, request_id: int, what: str, work: Callable[[], Awaitable[None]]) -> str:
        """Run a request's ``work`` (``what``: speak or text stream, for the log); its
        outcome. Its error, if any, is said on the socket with its id; a bug's is logged
        with its traceback. A cancel (or a closed socket) leaves it CANCELLED."""
        try:
            await work()
            return OK
        except ApiError as err:
            await self.error(request_id, err)
            return err.code or "error"
        except TTSError as err:  # after the first chunk
            api_error = from_tts_error(err, self.settings)
            log.warning("%s %d ended early: %s", what, request_id, err)
            await self.error(request_id, api_error)
            return api_error.code or "error"
        except WebSocketDisconnect:
            return CANCELLED
        except Exception as err:  # a bug: said on the socket, logged with its traceback
            log.exception("%s %d failed", what, request_id)
            with suppress(Exception):
                await self.error(request_id, ApiError(500, f"internal error: {err}", "internal_error"))
            return "internal_error"

    async def send_audio(
        self,
        request_id: int,
        first: AudioChunk,
        rest: AsyncGenerator[AudioChunk, None],
        fmt: str,
        synthesis: Any,
        offset_s: float = 0.0,
    ) -> tuple[int, int]:
        """One binary message per chunk, as it comes, and before it a ``words`` message with
        the words it completes (timestamps asked), their times ``offset_s`` later (a text
        stream's texts: the audio already sent); the chunks and samples sent."""
        chunks, samples = 0, 0
        async with aclosing(rest):
            chunk: AudioChunk | None = first
            while chunk is not None:
                data = audio.to_pcm16(chunk.audio) if fmt == "s16le" else chunk.audio.astype("<f4").tobytes()
                if chunk.words:
                    words = [WordTime(w.word, w.start + offset_s, w.end + offset_s) for w in chunk.words]
                    await self.send_json({"type": "words", "id": request_id, "words": word_list(words)})
                await self.send_bytes(data)
                synthesis.audio_sent(len(chunk.audio) / chunk.sample_rate)
                chunks, samples = chunks + 1, samples + len(chunk.audio)
                chunk = await anext(rest, None)
        return chunks, samples

    async def speak_stream(
        self, request_id: int, voicing: StartText, queue: asyncio.Queue[str | None]
    ) -> None:
        """A text stream's synthesis: its texts in order, each a streamed request, their
        audio between one ``start`` and one ``end``; an error ends the stream."""
        synthesis = self.metrics.synthesis("websocket")
        synthesis.format = voicing.format

        async def work() -> None:
            chunks, samples, texts, rate = 0, 0, 0, 0
            started = time.monotonic()
            name, speaker, mix = await self.voices.resolve(voicing.voice)
            while True:
                self.awaiting_text = queue.empty()
                text = await queue.get()
                self.awaiting_text = False
                if text is None:
                    break
                if self.stream is not None and self.stream_queue is queue:
                    self.stream.started(text)
                first, rest = await self.open_speech(self.request_for(text, name, speaker, voicing, mix))
                if not rate:
                    rate = first.sample_rate
                    await self.send_start(request_id, rate, voicing.format, name)
                offset_s = samples / rate
                sent = await self.send_audio(request_id, first, rest, voicing.format, synthesis, offset_s)
                chunks, samples, texts = chunks + sent[0], samples + sent[1], texts + 1
            await self.send_json(
                {
                    "type": "end",
                    "id": request_id,
                    "chunks": chunks,
                    "samples": samples,
                    "texts": texts,
                    "audio_seconds": samples / rate if rate else 0.0,
                    "synthesis_seconds": time.monotonic() - started,
                }
            )

        outcome = CANCELLED
        try:
            outcome = await self.answered(request_id, "text stream", work)
        finally:
            synthesis.end(outcome)
            if self.stream_queue is queue:  # still this socket's stream (not a newer one)
                self.close_stream()
            self.last_active = time.monotonic()

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
