"""Client library for triton-tts (tritonclient HTTP and gRPC, sync and asyncio, streaming)."""

from triton_tts.client.tts_client import (
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
    VoiceInfo,
)

__all__ = [
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
    "VoiceInfo",
]
