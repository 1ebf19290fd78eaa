"""``triton-tts gateway``: its arguments, and running it (uvicorn) or starting it as a child
process of ``triton-tts serve``."""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence

from triton_tts.gateway.settings import GatewaySettings
from triton_tts.ops.server import LOCAL_HOST

API_KEY_ENV = "TRITON_TTS_API_KEY"  # comma-separated keys; never on the command line (ps shows it)
TRITON_URL_ENV = "TRITON_TTS_TRITON_URL"
CORS_ENV = "TRITON_TTS_CORS_ORIGINS"
PORT_ENV = "GATEWAY_PORT"
DEFAULT_PORT = 8080
RIVA_PORT_ENV = "RIVA_PORT"
DEFAULTS = GatewaySettings()  # the settings own the defaults; the flags show them


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--triton-url",
        default=os.environ.get(TRITON_URL_ENV, DEFAULTS.triton_url),
        help=f"Triton's gRPC endpoint (env {TRITON_URL_ENV})",
    )
    # This machine only unless told, as serve: a container or pod says --host 0.0.0.0 (the chart does).
    parser.add_argument("--host", default=LOCAL_HOST, help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get(PORT_ENV, DEFAULT_PORT)), help=f"port (env {PORT_ENV})"
    )
    parser.add_argument(
        "--max-input-chars", type=int, default=DEFAULTS.max_input_chars, help="longest 'input' accepted"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULTS.max_body_bytes,
        help="largest request body accepted, and largest WebSocket message",
    )
    parser.add_argument(
        "--max-upload-bytes",
        type=int,
        default=DEFAULTS.max_upload_bytes,
        help="largest speaker clip upload accepted (POST /v1/audio/voices/VOICE/speakers)",
    )
    parser.add_argument(
        "--max-dub-upload-bytes",
        type=int,
        default=DEFAULTS.max_dub_upload_bytes,
        help="largest dub upload accepted: the subtitle file and the original (POST /v1/audio/dub)",
    )
    parser.add_argument(
        "--max-dub-cues", type=int, default=DEFAULTS.max_dub_cues, help="most cues a dub may have"
    )
    parser.add_argument(
        "--max-dub-seconds", type=float, default=DEFAULTS.max_dub_seconds, help="longest track a dub may make"
    )
    parser.add_argument(
        "--header-timeout-s",
        type=float,
        default=DEFAULTS.header_timeout_s,
        help="close a connection whose request headers are not complete this long after it opened "
        "(or after its last response)",
    )
    parser.add_argument(
        "--body-timeout-s",
        type=float,
        default=DEFAULTS.body_timeout_s,
        help="answer 408 and close when a request body is not complete this long after its headers "
        "(plus a second for each --body-min-rate bytes received); 0: no bound",
    )
    parser.add_argument(
        "--body-min-rate",
        type=float,
        default=DEFAULTS.body_min_rate,
        help="bytes a second a long body earns more time by (uploads on slow links)",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help=f"let pages on this origin call the API (repeatable; env {CORS_ENV}, comma-separated); "
        "default: CORS off",
    )
    parser.add_argument(
        "--voice-alias",
        action="append",
        default=[],
        metavar="NAME=VOICE[:SPEAKER]",
        help="a voice name callers may use (OpenAI's names map to the default voice unless set here); "
        "a stored mix of a style voice's speakers too: NAME=af_bella:0.7+af_sky:0.3",
    )
    parser.add_argument(
        "--heartbeat-s",
        type=float,
        default=DEFAULTS.heartbeat_s,
        help="WebSocket: a ping message after this long with nothing sent",
    )
    parser.add_argument(
        "--ws-max-sockets",
        type=int,
        default=DEFAULTS.ws_max_sockets,
        help="WebSockets open at once, in all (the next gets 1013)",
    )
    parser.add_argument(
        "--ws-max-sockets-per-key",
        type=int,
        default=DEFAULTS.ws_max_sockets_per_key,
        help="WebSockets open at once per API key, when keys are set (the next gets 1013)",
    )
    parser.add_argument(
        "--ws-idle-timeout-s",
        type=float,
        default=DEFAULTS.ws_idle_timeout_s,
        help="close a WebSocket after this long with no message from its client and no synthesis; 0: never",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULTS.timeout_s,
        help="longest one synthesis may take, first byte to last (streams are paced to playback: "
        "this bounds the audio's length too)",
    )
    parser.add_argument(
        "--reconnect-s",
        type=float,
        default=DEFAULTS.reconnect_s,
        help="open a new gRPC channel this often, resolving --triton-url again (dns:/// to a headless "
        "Service: Triton pods added since get calls too); 0: never",
    )
    parser.add_argument(
        "--no-metrics",
        dest="metrics",
        action="store_false",
        help="do not serve GET /metrics (the gateway's Prometheus metrics; served without an API key)",
    )
    parser.add_argument(
        "--riva-port",
        type=int,
        default=int(os.environ.get(RIVA_PORT_ENV, DEFAULTS.riva_port)),
        help=f"serve Riva's TTS API (gRPC: Synthesize, SynthesizeOnline, GetRivaSynthesisConfig; the "
        f"NVIDIA plugins of Pipecat and LiveKit) on this port; 0: off (env {RIVA_PORT_ENV})",
    )
    parser.add_argument(
        "--riva-tls-cert", metavar="PEM", help="TLS on the Riva port: this certificate (chain)"
    )
    parser.add_argument("--riva-tls-key", metavar="PEM", help="TLS on the Riva port: the certificate's key")
    parser.add_argument(
        "--graceful-timeout-s",
        type=float,
        default=60.0,
        help="on SIGTERM/Ctrl-C, how long responses and sockets in flight may take to finish",
    )


def settings_from(args: argparse.Namespace) -> GatewaySettings:
    aliases: dict[str, str] = {}
    for item in args.voice_alias:
        name, sep, target = item.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise SystemExit(f"--voice-alias wants NAME=VOICE[:SPEAKER], got {item!r}")
        aliases[name.strip()] = target.strip()
    if bool(args.riva_tls_cert) != bool(args.riva_tls_key):
        raise SystemExit("--riva-tls-cert and --riva-tls-key go together")
    for path in (args.riva_tls_cert, args.riva_tls_key):
        if path and not os.path.isfile(path):
            raise SystemExit(f"no file {path!r} (--riva-tls-cert/--riva-tls-key)")
    if not 0 <= args.riva_port <= 65535:
        raise SystemExit(f"--riva-port {args.riva_port} is not a port (0: off)")
    return GatewaySettings(
        triton_url=args.triton_url,
        api_keys=tuple(_split(os.environ.get(API_KEY_ENV))),
        max_input_chars=args.max_input_chars,
        max_body_bytes=args.max_body_bytes,
        max_upload_bytes=args.max_upload_bytes,
        max_dub_upload_bytes=args.max_dub_upload_bytes,
        max_dub_cues=args.max_dub_cues,
        max_dub_seconds=args.max_dub_seconds,
        header_timeout_s=args.header_timeout_s,
        body_timeout_s=args.body_timeout_s,
        body_min_rate=args.body_min_rate,
        # the flags, or else the environment's list (flags replace it, never add to it)
        cors_origins=tuple(args.cors_origin or _split(os.environ.get(CORS_ENV))),
        heartbeat_s=args.heartbeat_s,
        ws_max_sockets=args.ws_max_sockets,
        ws_max_sockets_per_key=args.ws_max_sockets_per_key,
        ws_idle_timeout_s=args.ws_idle_timeout_s,
        timeout_s=args.timeout_s,
        voice_aliases=aliases,
        reconnect_s=args.reconnect_s,
        metrics=args.metrics,
        riva_port=args.riva_port,
        riva_host=args.host,
        riva_tls_cert=args.riva_tls_cert,
        riva_tls_key=args.riva_tls_key,
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from triton_tts.gateway.app import create_app

    settings = settings_from(args)
    auth = f"{len(settings.api_keys)} API key(s)" if settings.api_keys else f"no API key (set {API_KEY_ENV})"
    riva = f"{'grpcs' if settings.riva_tls_cert else 'grpc'}://{args.host}:{settings.riva_port}"
    print(
        f"triton-tts gateway on http://{args.host}:{args.port} -> Triton gRPC {settings.triton_url}; {auth}; "
        f"CORS {'for ' + ', '.join(settings.cors_origins) if settings.cors_origins else 'off'}; "
        f"Riva API {riva if settings.riva_port else 'off'}",
        flush=True,
    )
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(redact_keys)
    from triton_tts.gateway.access import MalformedAsJson
    from triton_tts.gateway.connections import with_header_timeout

    uvicorn.run(
        create_app(settings),
        # unparsable requests get the error JSON too; late headers close the connection
        http=with_header_timeout(MalformedAsJson, settings.header_timeout_s),
        host=args.host,
        port=args.port,
        log_level="info",
        timeout_graceful_shutdown=int(args.graceful_timeout_s),
        proxy_headers=False,
        # A WebSocket message past the body limit is refused from its frame header (close
        # code 1009), before it is read: uvicorn's default is 16 MiB.
        ws_max_size=settings.max_body_bytes,
    )
    return 0


def redact_keys(record: logging.LogRecord) -> bool:
    """Keys given as ?api_key= (WebSockets from browsers) stay out of the logs."""
    message = record.getMessage()
    if "api_key=" in message:
        record.msg, record.args = re.sub(r"api_key=[^&\s\"']*", "api_key=REDACTED", message), None
    return True


def start_child(port: int, triton_grpc_url: str, extra: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """The gateway as a child process (``triton-tts serve --gateway-port``)."""
    cmd = [
        sys.executable,
        "-m",
        "triton_tts.cli",
        "gateway",
        "--port",
        str(port),
        "--triton-url",
        triton_grpc_url,
    ]
    return subprocess.Popen([*cmd, *extra])


def wait_live(
    port: int, process: subprocess.Popen[bytes], timeout_s: float = 30.0, host: str = "localhost"
) -> None:
    """Return once the gateway at ``port`` answers /health/live; RuntimeError if it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gateway exited (code {process.returncode}) before it listened on {port}")
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health/live", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the gateway did not listen on {port} within {timeout_s:g} s")
