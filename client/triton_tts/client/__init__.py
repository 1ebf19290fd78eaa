"""Client library for triton-tts (tritonclient HTTP and gRPC, sync and asyncio, streaming).

The names below load their module on first use: the models inside Triton read the
voices JSON with :mod:`triton_tts.client.voices` (the standard library only), and
importing this package must not bring tritonclient's transports into them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triton_tts.client.voices import VoiceInfo

if TYPE_CHECKING:
    from triton_tts.client.tts_client import (
        API_KEY_ENV,
        NO_RETRIES,
        AlreadyExists,
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
        Unauthorized,
        WordTime,
        auth_headers,
    )

__all__ = [
    "API_KEY_ENV",
    "NO_RETRIES",
    "AlreadyExists",
    "AsyncTTSClient",
    "AudioChunk",
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
    "auth_headers",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from triton_tts.client import tts_client

        return getattr(tts_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
