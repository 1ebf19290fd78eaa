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

This module is the library's one import for callers; the code lives by concern beside
it: ``auth`` (the API key), ``errors`` (error types, Triton's errors mapped to them),
``retry``, ``datatypes`` (options and results), ``voices`` (what a server serves),
``core`` (what the two clients share: requests, answers, retries) and ``sync_client`` /
``async_client`` (their I/O).
"""

from __future__ import annotations

from triton_tts.client.async_client import AsyncTTSClient, _channel_args, _stream_ends
from triton_tts.client.auth import (
    API_KEY_ENV,
    API_KEY_HEADER,
    GRPC_HEADER_PREFIX,
    Protocol,
    auth_headers,
    env_api_key,
)
from triton_tts.client.core import (
    DEFAULT_MODEL,
    DEFAULT_TIMEOUT_S,
    DEFAULT_URLS,
    OUTPUTS,
    STREAM_END_WAIT_S,
    STREAM_MODEL,
    STREAM_OUTPUTS,
    ClientCore,
    _chunk,
    _needs_grpc,
    _result,
    _voices,
    build_inputs,
)
from triton_tts.client.datatypes import AudioChunk, SynthesisOptions, SynthesisResult, WordTime
from triton_tts.client.errors import (
    BUSY_MESSAGES,
    QUEUE_TIMEOUT,
    RESTRICTED,
    RETRY_AFTER,
    STREAM_CODE,
    AlreadyExists,
    RequestRejected,
    ServerBusy,
    ServerUnavailable,
    TimedOut,
    TTSError,
    Unauthorized,
    _is_busy,
    _server_errors,
    _stream_error,
    classify,
    retry_hint,
)
from triton_tts.client.retry import NO_RETRIES, RetryPolicy, _gave_up
from triton_tts.client.sync_client import TTSClient
from triton_tts.client.voices import VoiceInfo

_Settings = ClientCore  # the core's name when it held only the settings

__all__ = [
    "API_KEY_ENV",
    "API_KEY_HEADER",
    "BUSY_MESSAGES",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_URLS",
    "GRPC_HEADER_PREFIX",
    "NO_RETRIES",
    "OUTPUTS",
    "QUEUE_TIMEOUT",
    "RESTRICTED",
    "RETRY_AFTER",
    "STREAM_CODE",
    "STREAM_END_WAIT_S",
    "STREAM_MODEL",
    "STREAM_OUTPUTS",
    "AlreadyExists",
    "AsyncTTSClient",
    "AudioChunk",
    "ClientCore",
    "Protocol",
    "RequestRejected",
    "RetryPolicy",
    "ServerBusy",
    "ServerUnavailable",
    "SynthesisOptions",
    "SynthesisResult",
    "TTSClient",
    "TTSError",
    "TimedOut",
    "Unauthorized",
    "VoiceInfo",
    "WordTime",
    "_Settings",
    "_channel_args",
    "_chunk",
    "_gave_up",
    "_is_busy",
    "_needs_grpc",
    "_result",
    "_server_errors",
    "_stream_ends",
    "_stream_error",
    "_voices",
    "auth_headers",
    "build_inputs",
    "classify",
    "env_api_key",
    "retry_hint",
]
