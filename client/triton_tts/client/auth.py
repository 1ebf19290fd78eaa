"""The API key: where the client finds it and how it travels to Triton.

One key for every way in (docs/api.md, "Keys"): the gateway's, and Triton's inference,
metadata and model-config APIs when the server was started with one. Triton matches one
header exactly: ``Authorization: Bearer <key>``; over gRPC it reads metadata named with
its ``triton-grpc-protocol-`` prefix.
"""

from __future__ import annotations

import os
from typing import Literal

Protocol = Literal["http", "grpc"]
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
