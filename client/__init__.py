"""Client library for the triton-tts ensemble (tritonclient HTTP and gRPC)."""

from triton_tts.client.tts_client import (
    RequestRejected,
    ServerUnavailable,
    SynthesisResult,
    TTSClient,
    TTSError,
)

__all__ = ["RequestRejected", "ServerUnavailable", "SynthesisResult", "TTSClient", "TTSError"]
