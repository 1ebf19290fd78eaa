"""The gateway's settings and their defaults: the one place each is decided.
:mod:`triton_tts.gateway.command` fills them from the command line and the environment,
its flags defaulting to these."""

from __future__ import annotations

from dataclasses import dataclass, field

from triton_tts.client.dubbing import MAX_TRACK_S


@dataclass
class GatewaySettings:
    triton_url: str = "localhost:8001"  # Triton's gRPC endpoint
    api_keys: tuple[str, ...] = ()  # empty: no authentication
    max_input_chars: int = 4096  # OpenAI's own limit
    # An HTTP body, and a WebSocket message too (uvicorn's ws_max_size): a message past it
    # is refused from its frame header, before it is read.
    max_body_bytes: int = 65536
    # POST /v1/audio/voices/{voice}/speakers: a reference clip (60 s of 16-bit 48 kHz
    # stereo WAV is 11 MB; XTTS reads its first 30 s)
    max_upload_bytes: int = 12 * 1024 * 1024
    # POST /v1/audio/dub: the subtitle file and the original together (an hour of 16-bit
    # 22 kHz mono is 159 MB), its cues, and its track's length
    max_dub_upload_bytes: int = 256 * 1024 * 1024
    max_dub_cues: int = 5000
    max_dub_seconds: float = MAX_TRACK_S  # the command's bound too
    # How long a caller may take to send a request (triton_tts.gateway.connections): its
    # headers (at most 16 KiB, h11's bound) from the connection or its previous response,
    # then dropped; its body from the headers, plus a second for each body_min_rate bytes
    # that came (the largest dub upload, 256 MiB, at 16 KiB/s), then 408.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    body_min_rate: float = 16 * 1024.0  # bytes a second
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers (browsers allow same origin only)
    heartbeat_s: float = 15.0  # WebSocket: a ping message after this long with nothing sent
    # WebSockets open at once: in all, and per API key (when keys are set). Each holds at
    # most one synthesis; the server's admission bounds the listeners, these the sockets.
    ws_max_sockets: int = 512
    ws_max_sockets_per_key: int = 64
    ws_idle_timeout_s: float = 300.0  # closed after this long with no message and no synthesis; 0: never
    # One synthesis, first byte to last: streams are paced to playback, so this bounds the
    # audio too (4,096 characters at speed 0.25 run ~20 minutes).
    timeout_s: float = 1800.0
    retry_after_s: int = 1  # what a busy refusal tells callers to wait
    voice_aliases: dict[str, str] = field(default_factory=dict)  # name -> voice[:speaker]
    reconnect_s: float = 60.0  # a new gRPC channel (Triton's address resolved again); 0: never
    metrics: bool = True  # GET /metrics (no key: like the probes, for Prometheus)
    # Riva's TTS API (triton_tts.gateway.riva) on its own gRPC port, Riva's own by default;
    # 0: not served. TLS when a certificate and its key are given (PEM files).
    riva_port: int = 50051
    riva_host: str = "127.0.0.1"
    riva_tls_cert: str | None = None
    riva_tls_key: str | None = None
