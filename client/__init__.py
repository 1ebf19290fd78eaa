"""Client library for triton-tts (tritonclient HTTP and gRPC, sync and asyncio, streaming)."""

from triton_tts.client.tts_client import (
    API_KEY_ENV,
    NO_RETRIES,
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
    VoiceInfo,
    auth_headers,
)

__all__ = [
    "API_KEY_ENV",
    "NO_RETRIES",
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
    "auth_headers",
]
