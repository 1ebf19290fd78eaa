"""Speech from a triton-tts server with tritonclient: HTTP or gRPC, sync or asyncio, streaming.

Example::

    from triton_tts.client import TTSClient

    with TTSClient("localhost:8001", protocol="grpc") as tts:
        tts.synthesize("Hello there.", speed=1.1).write_wav("hello.wav")
        for chunk in tts.stream(long_text):        # gRPC: audio as it is made
            play(chunk.audio, chunk.sample_rate)

Models: ``tts`` (whole audio, any length), ``tts_stream`` (decoupled, chunk by chunk;
gRPC only: HTTP cannot carry Triton's decoupled responses). The sample rate always comes
from the server. A server at capacity refuses at once (HTTP 503 / gRPC UNAVAILABLE):
:class:`ServerBusy`, retried with exponential backoff and jitter (:class:`RetryPolicy`;
a stream only before its first chunk).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import queue
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import aclosing, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import grpc
import numpy as np
import numpy.typing as npt
import soundfile as sf
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.utils import InferenceServerException

from triton_tts.config_parameters import string_parameters

log = logging.getLogger(__name__)

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "localhost:8000", "grpc": "localhost:8001"}
DEFAULT_MODEL = "tts"
STREAM_MODEL = "tts_stream"
DEFAULT_TIMEOUT_S = 300.0
OUTPUTS = ("AUDIO", "SAMPLE_RATE")
STREAM_OUTPUTS = ("AUDIO", "SAMPLE_RATE", "CHUNK_INDEX", "IS_LAST")

# One key for every way in (docs/api.md, "Keys"): the gateway's, and Triton's inference,
# metadata and model-config APIs when the server was started with one. Triton matches one
# header exactly: ``Authorization: Bearer <key>``; over gRPC it reads metadata named with
# its ``triton-grpc-protocol-`` prefix.
API_KEY_ENV = "TRITON_TTS_API_KEY"
API_KEY_HEADER = "authorization"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


def env_api_key() -> str | None:
    """The environment's API key: TRITON_TTS_API_KEY, or the first of its comma-separated
    keys (the gateway takes them all; Triton's ports take one, the first)."""
    keys = [k.strip() for k in os.environ.get(API_KEY_ENV, "").split(",") if k.strip()]
    return keys[0] if keys else None


def auth_headers(api_key: str | None, protocol: Protocol) -> dict[str, str] | None:
    """The headers (HTTP) or metadata (gRPC) that carry ``api_key`` to Triton; None without a key."""
    if not api_key:
        return None
    name = API_KEY_HEADER if protocol == "http" else GRPC_HEADER_PREFIX + API_KEY_HEADER
    return {name: f"Bearer {api_key}"}


class TTSError(RuntimeError):
    """Anything that kept a synthesis from completing."""


class ServerUnavailable(TTSError):
    """The server could not be reached, or the model is not ready."""


class ServerBusy(ServerUnavailable):
    """The server is at capacity and refused the request at once, before any work (HTTP
    503 / gRPC UNAVAILABLE): retryable. The clients retry it per their RetryPolicy, not
    before ``retry_after_s``, the server's own estimate of when it could take it (None:
    it gave none)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# A refusal for work says when to come back: "...; retry after 2.5 s"
# (triton_tts/admission.py's busy_message, held to this by tests/test_admission.py).
RETRY_AFTER = re.compile(r"retry after (\d+(?:\.\d+)?) s")


def retry_hint(message: str) -> float | None:
    """The seconds a refusal's message asks the client to wait, or None."""
    found = RETRY_AFTER.search(message)
    return float(found.group(1)) if found else None


# What Triton and tts_stream say when they refuse for load: a full queue, a queue wait
# past the model's timeout, too many streams (model_repository/tts_stream/1/model.py).
# A stream's error carries no status code, so the words are what the client has.
BUSY_MESSAGES = ("exceeds maximum queue size", "server busy")
QUEUE_TIMEOUT = "request timeout expired"  # Triton's own message ends with it


class Unauthorized(TTSError):
    """The server needs an API key this client did not send, or sent wrong (HTTP 403 from
    Triton's restricted APIs): not retried."""


# Triton's refusal of a call without the restricted API's header (2.51: HTTP 403 "This
# API is restricted, expecting header 'authorization'"; gRPC UNAVAILABLE "This protocol
# is restricted, ..."): gRPC gives no status of its own for it, so the words are the sign.
RESTRICTED = "is restricted, expecting header"


class RequestRejected(TTSError):
    """The server refused this request (bad input); the message is the server's."""


class TimedOut(TTSError):
    """No answer within the client's timeout."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of :class:`ServerBusy`: exponential backoff with full jitter, so clients
    refused together do not come back together. Never past the client's ``timeout_s``."""

    attempts: int = 5  # tries in all, the first included; 1: no retries
    base_delay_s: float = 0.2  # the first retry waits up to this long, each next up to 2x
    max_delay_s: float = 5.0  # cap of one wait

    def backoff(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0 for the first)."""
        return float(min(self.max_delay_s, self.base_delay_s * 2.0**retry))

    def delay(self, retry: int, draw: float | None = None) -> float:
        """The wait before retry ``retry``: uniform in [0, backoff] (``draw`` in [0, 1) fixes it)."""
        return (random.random() if draw is None else draw) * self.backoff(retry)  # noqa: S311 - spread, not secrecy

    def next_delay(self, retry: int, deadline: float, hint_s: float | None = None) -> float | None:
        """How long to wait before retry ``retry``, or None to give up (no attempts left,
        or the wait would pass ``deadline``, a time.monotonic() value). A server's hint
        (``hint_s``) is waited out first, spread by up to a quarter, so that clients it
        refused together do not come back together."""
        if retry + 1 >= self.attempts:
            return None
        wait = self.delay(retry)
        if hint_s is not None:
            wait = max(wait, hint_s * (1.0 + 0.25 * random.random()))  # noqa: S311 - spread, not secrecy
        return wait if time.monotonic() + wait < deadline else None


NO_RETRIES = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class SynthesisOptions:
    """Optional inputs of the ``tts`` model; None leaves the input out (server default)."""

    speed: float | None = None
    speaker_id: int | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    voice: str | None = None
    # Who asks (a request parameter, not an input): the server's admission holds each
    # named caller to its share (the gateway names one per API key).
    caller: str | None = None

    @property
    def parameters(self) -> dict[str, str] | None:
        return {"caller": self.caller} if self.caller else None


@dataclass(frozen=True)
class SynthesisResult:
    audio: npt.NDArray[np.float32]  # float32 samples in [-1, 1], mono
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    def write_wav(self, path: str | Path, subtype: str = "PCM_16") -> Path:
        """Write a WAV that any player opens: 16-bit PCM by default, 'FLOAT' for float32."""
        sf.write(str(path), self.audio, self.sample_rate, subtype=subtype, format="WAV")
        return Path(path)


@dataclass(frozen=True)
class AudioChunk:
    index: int
    audio: npt.NDArray[np.float32]
    sample_rate: int
    is_last: bool


@dataclass(frozen=True)
class VoiceInfo:
    name: str
    language: str
    sample_rate: int
    speakers: dict[str, int]


def classify(err: InferenceServerException, url: str) -> TTSError:
    """tritonclient's exception -> the client's error types, keeping the server's words."""
    status = str(err.status() or "")
    message = err.message() or str(err)
    lowered = message.lower()
    if status == "403" or RESTRICTED in lowered:
        return Unauthorized(
            f"{url} needs an API key: pass api_key= (or --api-key) or set {API_KEY_ENV} ({message})"
        )
    if _is_busy(message):
        return ServerBusy(f"{url} is busy, retry later: {message}", retry_hint(message))
    if "unknown model" in lowered or "is not ready" in lowered or "is not found" in lowered:
        return ServerUnavailable(f"{url} does not serve a ready model: {message}")
    if status in ("400", "StatusCode.INVALID_ARGUMENT"):
        return RequestRejected(message)
    timed_out = "deadline" in lowered or "timed out" in lowered or QUEUE_TIMEOUT in lowered
    if timed_out or status == "StatusCode.DEADLINE_EXCEEDED":
        return TimedOut(message)
    if status in ("StatusCode.UNAVAILABLE", "503") or "failed to connect" in lowered:
        return ServerUnavailable(f"cannot reach {url}: {message}")
    return TTSError(f"{message} (status {status})" if status else message)


def _is_busy(message: str) -> bool:
    lowered = message.lower().rstrip()
    return any(words in lowered for words in BUSY_MESSAGES) or lowered.endswith(QUEUE_TIMEOUT)


def _gave_up(err: ServerBusy, attempts: int) -> ServerBusy:
    return ServerBusy(f"{err} (refused {attempts} times)", err.retry_after_s) if attempts > 1 else err


@contextmanager
def _server_errors(url: str, network: tuple[type[Exception], ...] = (ConnectionError,)) -> Iterator[None]:
    """tritonclient's exceptions and network failures (``network``) inside the block ->
    the client's error types."""
    try:
        yield
    except InferenceServerException as err:
        raise classify(err, url) from None
    except grpc.RpcError as err:  # a gRPC call that tritonclient lets through (asyncio streams)
        code = getattr(err, "code", lambda: None)()  # grpc.Call and grpc.aio's errors have them
        details = getattr(err, "details", lambda: None)() or str(err)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise TimedOut(f"no answer from {url} in time: {details}") from None
        if code == grpc.StatusCode.UNAVAILABLE:
            raise ServerUnavailable(f"cannot reach {url}: {details}") from None
        raise TTSError(f"{details} (status {code})") from None
    except network as err:
        raise ServerUnavailable(f"cannot reach {url}: {err}") from None


def build_inputs(lib: Any, text: str | bytes, options: SynthesisOptions) -> list[Any]:
    """The request tensors for ``lib`` (tritonclient.http/grpc, or their aio variants)."""

    def tensor(name: str, value: npt.NDArray[Any], dtype: str) -> Any:
        t = lib.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    raw = text.encode("utf-8") if isinstance(text, str) else text
    inputs = [tensor("TEXT", np.array([[raw]], dtype=np.object_), "BYTES")]
    if options.voice:
        inputs.append(tensor("VOICE", np.array([[options.voice.encode("utf-8")]], np.object_), "BYTES"))
    for name, value, dtype, np_type in (
        ("SPEED", options.speed, "FP32", np.float32),
        ("SPEAKER_ID", options.speaker_id, "INT64", np.int64),
        ("NOISE_SCALE", options.noise_scale, "FP32", np.float32),
        ("NOISE_W", options.noise_w, "FP32", np.float32),
    ):
        if value is not None:
            inputs.append(tensor(name, np.array([[value]], dtype=np_type), dtype))
    return inputs


def _result(result: Any) -> SynthesisResult:
    audio = np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1)
    return SynthesisResult(
        audio=audio, sample_rate=int(np.asarray(result.as_numpy("SAMPLE_RATE")).reshape(-1)[0])
    )


def _chunk(result: Any) -> AudioChunk:
    return AudioChunk(
        index=int(result.as_numpy("CHUNK_INDEX").reshape(-1)[0]),
        audio=np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1),
        sample_rate=int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]),
        is_last=bool(result.as_numpy("IS_LAST").reshape(-1)[0]),
    )


def _voices(config: dict[str, Any]) -> list[VoiceInfo]:
    """Every voice the ``tts`` model's config names, the default first."""
    return [
        VoiceInfo(
            name=v["name"], language=v["language"], sample_rate=int(v["sample_rate"]), speakers=v["speakers"]
        )
        for v in json.loads(string_parameters(config)["voices"])
    ]


# After a stream's request is refused, how long its final flag may take to follow. A stream
# is closed only after that flag: Triton 2.51's gRPC frontend can leave a request's state
# behind when a cancellation races the request's final response, and the model it names
# then never unloads (the server's exit times out). A stream the caller leaves early is
# still cancelled: that is the caller's intent, and the race is the server's to lose.
STREAM_END_WAIT_S = 5.0


async def _stream_ends(responses: Any) -> bool:
    """Read the rest of an asyncio stream call whose request has ended; True if the server
    ended the call within STREAM_END_WAIT_S."""

    async def rest() -> None:
        async for _ in responses:
            pass

    try:
        await asyncio.wait_for(rest(), STREAM_END_WAIT_S)
    except (asyncio.TimeoutError, grpc.RpcError):
        return False
    return True


# An error inside a stream carries only the server's message. tts_stream puts its code
# in front ("[INVALID_ARG] ...": triton_tts/errors.py, CODE_TAG); what has no code is the
# server's own failure (a dead instance, say), never the caller's.
STREAM_CODE = re.compile(r"^\[([A-Z_]+)\] ")


def _stream_error(error: InferenceServerException, url: str) -> TTSError:
    message = error.message() or str(error)
    if error.status() or _is_busy(message):
        return classify(error, url)
    tagged = STREAM_CODE.match(message)
    code = tagged.group(1) if tagged else None
    message = message[tagged.end() :] if tagged else message
    if code == "INVALID_ARG":
        return RequestRejected(message)
    if code == "UNAVAILABLE":
        return ServerUnavailable(f"{url} could not take the stream: {message}")
    return TTSError(f"{message} (status {code})" if code else message)


def _needs_grpc(protocol: str) -> None:
    if protocol != "grpc":
        raise ValueError("streaming needs gRPC: HTTP cannot carry Triton's decoupled responses")


class _Settings:
    """Where and how a client talks to the server (shared by the sync and asyncio clients)."""

    def __init__(
        self,
        url: str | None,
        protocol: Protocol,
        model: str = DEFAULT_MODEL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stream_model: str = STREAM_MODEL,
        retry: RetryPolicy = RetryPolicy(),
        api_key: str | None = None,
    ) -> None:
        """``api_key``: sent with every call (default: the environment's TRITON_TTS_API_KEY)."""
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
        self.protocol = protocol
        self.url = url or DEFAULT_URLS[protocol]
        self.model = model
        self.stream_model = stream_model
        self.timeout_s = timeout_s
        self.retry = retry
        self.headers = auth_headers(api_key or env_api_key(), protocol)

    def _retry_wait(self, err: ServerBusy, retry: int, started: float) -> float:
        """The wait before retry ``retry`` of a refused request; raises when out of retries."""
        wait = self.retry.next_delay(retry, started + self.timeout_s, err.retry_after_s)
        if wait is None:
            raise _gave_up(err, retry + 1) from None
        log.debug("%s busy, retry %d in %.2f s", self.url, retry + 1, wait)
        return wait


class TTSClient(_Settings):
    """Blocking client; one per thread (tritonclient clients are not shared across threads)."""

    def __init__(self, url: str | None = None, protocol: Protocol = "http", **settings: Any) -> None:
        super().__init__(url, protocol, **settings)
        timeout_s = self.timeout_s
        self._lib: Any = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                self.url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self._client = grpcclient.InferenceServerClient(self.url)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TTSClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def is_ready(self) -> bool:
        try:
            return bool(self._client.is_model_ready(self.model, headers=self.headers))
        except Exception:  # refused connections and friends
            return False

    def voices(self) -> list[VoiceInfo]:
        """The voices the server serves (from the ``tts`` model's config)."""
        with _server_errors(self.url):
            if self.protocol == "http":
                config = self._client.get_model_config(self.model, headers=self.headers)
            else:
                config = self._client.get_model_config(self.model, headers=self.headers, as_json=True)[
                    "config"
                ]
        return _voices(config)

    def synthesize(
        self,
        text: str | bytes,
        speed: float | None = None,
        speaker_id: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        voice: str | None = None,
        caller: str | None = None,
    ) -> SynthesisResult:
        """One text (any length) -> the whole audio; unset options take the server's defaults.
        A busy server's refusal is retried per ``retry``."""
        options = SynthesisOptions(speed, speaker_id, noise_scale, noise_w, voice, caller)
        started, retry = time.monotonic(), 0
        while True:
            try:
                return self._synthesize_once(text, options)
            except ServerBusy as err:
                time.sleep(self._retry_wait(err, retry, started))
                retry += 1

    def _synthesize_once(self, text: str | bytes, options: SynthesisOptions) -> SynthesisResult:
        inputs = build_inputs(self._lib, text, options)
        outputs = [self._lib.InferRequestedOutput(n) for n in OUTPUTS]
        try:
            with _server_errors(self.url):
                if self.protocol == "http":
                    result = self._client.infer(
                        self.model,
                        inputs,
                        outputs=outputs,
                        parameters=options.parameters,
                        headers=self.headers,
                    )
                else:
                    result = self._client.infer(
                        self.model,
                        inputs,
                        outputs=outputs,
                        client_timeout=self.timeout_s,
                        parameters=options.parameters,
                        headers=self.headers,
                    )
        except TimeoutError as err:  # not a ConnectionError: passes through the block above
            raise TimedOut(f"no answer from {self.url} within {self.timeout_s:g} s") from err
        return _result(result)

    def stream(
        self,
        text: str | bytes,
        speed: float | None = None,
        speaker_id: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        voice: str | None = None,
        caller: str | None = None,
    ) -> Generator[AudioChunk, None, None]:
        """Audio chunks in order as the server makes them (gRPC). Leaving the loop early
        (or closing the generator) cancels the request on the server. A busy server's
        refusal is retried per ``retry``, only before the first chunk."""
        _needs_grpc(self.protocol)
        options = SynthesisOptions(speed, speaker_id, noise_scale, noise_w, voice, caller)
        started = time.monotonic()
        for retry in itertools.count():
            chunks = self._stream_once(text, options)
            try:
                first = next(chunks, None)
            except ServerBusy as err:
                time.sleep(self._retry_wait(err, retry, started))
                continue
            with closing(chunks):
                if first is not None:
                    yield first
                    yield from chunks
            return

    def _stream_once(self, text: str | bytes, options: SynthesisOptions) -> Generator[AudioChunk, None, None]:
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self._client.start_stream(
            callback=lambda result, error: answers.put((result, error)), headers=self.headers
        )
        finished = False
        refusal: TTSError | None = None
        try:
            self._client.async_stream_infer(
                self.stream_model,
                build_inputs(grpcclient, text, options),
                outputs=[grpcclient.InferRequestedOutput(n) for n in STREAM_OUTPUTS],
                enable_empty_final_response=True,
                parameters=options.parameters,
            )
            while True:
                wait = self.timeout_s if refusal is None else min(self.timeout_s, STREAM_END_WAIT_S)
                try:
                    result, error = answers.get(timeout=wait)
                except queue.Empty:
                    if refusal is not None:
                        raise refusal from None
                    raise TimedOut(f"no audio from {self.url} within {self.timeout_s:g} s") from None
                if error is not None:
                    if error.status():  # the call itself failed: nothing more will come
                        raise _stream_error(error, self.url)
                    # The server refused the request, and the final flag that ends it follows:
                    # read it before closing (see STREAM_END_WAIT_S).
                    refusal = refusal or _stream_error(error, self.url)
                    continue
                response = result.get_response()
                final = response.parameters["triton_final_response"].bool_param
                if response.outputs and refusal is None:
                    yield _chunk(result)
                if final:
                    finished = True
                    if refusal is not None:
                        raise refusal
                    return
        finally:
            self._client.stop_stream(cancel_requests=not finished)


def _channel_args(round_robin: bool) -> list[tuple[str, Any]] | None:
    """tritonclient's own gRPC channel options (they apply only when none are given), with
    the round-robin balancing policy added; None: tritonclient's defaults."""
    if not round_robin:
        return None
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.lb_policy_name", "round_robin"),
    ]


class AsyncTTSClient(_Settings):
    """asyncio client (tritonclient's aio modules), HTTP or gRPC."""

    def __init__(
        self, url: str | None = None, protocol: Protocol = "grpc", round_robin: bool = False, **settings: Any
    ) -> None:
        """``round_robin`` (gRPC): spread calls over every address ``url`` resolves to, one
        call to the next (e.g. ``dns:///triton-headless.ns.svc:8001``, or
        ``ipv4:10.0.0.1:8001,10.0.0.2:8001``) instead of pinning them all to the first."""
        super().__init__(url, protocol, **settings)
        self._lib: Any = httpaio if protocol == "http" else grpcaio
        self._client: Any = (
            httpaio.InferenceServerClient(self.url, conn_timeout=self.timeout_s)
            if protocol == "http"
            else grpcaio.InferenceServerClient(self.url, channel_args=_channel_args(round_robin))
        )

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncTTSClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def is_ready(self) -> bool:
        """True when the server answers and both ``tts`` and ``tts_stream`` are ready."""
        try:
            ready = [
                await self._client.is_model_ready(m, headers=self.headers)
                for m in (self.model, self.stream_model)
            ]
        except Exception:  # refused connections and friends
            return False
        return all(ready)

    async def voices(self) -> list[VoiceInfo]:
        """As :meth:`TTSClient.voices`."""
        with _server_errors(self.url, network=(ConnectionError, OSError)):
            if self.protocol == "http":
                config = await self._client.get_model_config(self.model, headers=self.headers)
            else:
                config = (
                    await self._client.get_model_config(self.model, headers=self.headers, as_json=True)
                )["config"]
        return _voices(config)

    async def synthesize(self, text: str | bytes, **options: Any) -> SynthesisResult:
        """As :meth:`TTSClient.synthesize` (busy refusals retried per ``retry``)."""
        settings = SynthesisOptions(**options)
        started, retry = time.monotonic(), 0
        while True:
            try:
                return await self._synthesize_once(text, settings)
            except ServerBusy as err:
                await asyncio.sleep(self._retry_wait(err, retry, started))
                retry += 1

    async def _synthesize_once(self, text: str | bytes, options: SynthesisOptions) -> SynthesisResult:
        inputs = build_inputs(self._lib, text, options)
        outputs = [self._lib.InferRequestedOutput(n) for n in OUTPUTS]
        with _server_errors(self.url, network=(ConnectionError, OSError)):
            if self.protocol == "http":
                # The session's timeout bounds the call (conn_timeout); infer's own
                # ``timeout`` would be Triton's request timeout, in microseconds.
                result = await self._client.infer(
                    self.model, inputs, outputs=outputs, parameters=options.parameters, headers=self.headers
                )
            else:
                result = await self._client.infer(
                    self.model,
                    inputs,
                    outputs=outputs,
                    client_timeout=self.timeout_s,
                    parameters=options.parameters,
                    headers=self.headers,
                )
        return _result(result)

    async def stream(self, text: str | bytes, **options: Any) -> AsyncGenerator[AudioChunk, None]:
        """As :meth:`TTSClient.stream` (busy refusals retried before the first chunk)."""
        _needs_grpc(self.protocol)
        settings = SynthesisOptions(**options)
        started = time.monotonic()
        for retry in itertools.count():
            chunks = self._stream_once(text, settings)
            try:
                first = await anext(chunks, None)
            except ServerBusy as err:
                await asyncio.sleep(self._retry_wait(err, retry, started))
                continue
            async with aclosing(chunks):
                if first is not None:
                    yield first
                    async for chunk in chunks:
                        yield chunk
            return

    async def _stream_once(
        self, text: str | bytes, options: SynthesisOptions
    ) -> AsyncGenerator[AudioChunk, None]:
        inputs = build_inputs(grpcaio, text, options)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {
                "model_name": self.stream_model,
                "inputs": inputs,
                "outputs": [grpcaio.InferRequestedOutput(n) for n in STREAM_OUTPUTS],
                **({"parameters": options.parameters} if options.parameters else {}),
            }

        # The request stream ends after this one request (a half-close), so the server ends
        # the call once the request's final flag is sent; the call is cancelled only when
        # the caller leaves early or the server does not end it (see STREAM_END_WAIT_S).
        responses = self._client.stream_infer(requests(), stream_timeout=self.timeout_s, headers=self.headers)
        ended = False
        try:
            # A call that fails as a whole (no server there, a deadline) raises from the
            # iteration instead of yielding an error: the block maps that too.
            with _server_errors(self.url, network=(ConnectionError, OSError)):
                async for result, error in responses:
                    if error is not None:
                        ended = await _stream_ends(responses)
                        raise _stream_error(error, self.url)
                    chunk = _chunk(result)
                    yield chunk
                    if chunk.is_last:
                        ended = await _stream_ends(responses)
                        return
            ended = True
        finally:
            if not ended:
                responses.cancel()
