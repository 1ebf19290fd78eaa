"""Who may call and how much they may send: API keys (HTTP middleware, and the checks the
WebSocket makes itself), the body limit, browsers' origins, and who a request is from
(for the server's fair shares and the sockets per key)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

import h11
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from triton_tts.gateway.errors import ApiError
from triton_tts.gateway.settings import GatewaySettings


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes (or the limit of the
    first ``uploads`` pattern its path matches), counted as it arrives (a Content-Length
    over the limit is refused before reading)."""

    def __init__(
        self, app: ASGIApp, limit: int, uploads: tuple[tuple[re.Pattern[str], int], ...] = ()
    ) -> None:
        self.app, self.default, self.uploads = app, limit, uploads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = next((n for pattern, n in self.uploads if pattern.fullmatch(scope["path"])), self.default)
        too_big = ApiError(413, f"the request body is over {limit} bytes", "request_too_large")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await too_big.answer(scope, receive, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise too_big
            return message

        await self.app(scope, counted, send)


class MalformedAsJson(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, answering a request it cannot parse (a Content-Length
    of -5 or "x", a header line without a colon) with OpenAI's error JSON like every other
    refusal: uvicorn answers those itself, before any middleware, in plain text."""

    def send_400_response(self, msg: str) -> None:
        error = ApiError(
            400,
            f"a malformed HTTP request ({msg.rstrip('.')}): check its request line and headers, "
            "Content-Length among them",
            "malformed_request",
        )
        payload = json.dumps(error.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close"),
        ]
        response = h11.Response(status_code=400, headers=headers, reason=b"Bad Request")
        for event in (response, h11.Data(data=payload), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


def key_of(headers: Any, query: Any) -> str | None:
    """The key a request carries: ``Authorization: Bearer``, ``x-api-key``, or (WebSockets
    from browsers, which cannot set headers) ``?api_key=``."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    key = headers.get("x-api-key") or query.get("api_key")
    return str(key).strip() if key else None


def key_digest(key: str) -> str:
    """A key as logs, metrics and the server may see it."""
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def caller_of(settings: GatewaySettings, key: str | None, peer: Any) -> str:
    """Who a request comes from, for the server's admission (each caller is held to its
    share): the API key (a digest: the key itself never leaves the gateway) when keys are
    required, else the peer's address."""
    if settings.api_keys and key:
        return "key:" + key_digest(key)
    host = getattr(peer, "host", None)
    return f"peer:{host}" if host else ""


def authorized(settings: GatewaySettings, key: str | None) -> bool:
    if not settings.api_keys:
        return True
    given = key.encode("utf-8", "surrogateescape") if key is not None else None
    return given is not None and any(hmac.compare_digest(given, k.encode()) for k in settings.api_keys)


def allowed_origin(origin: str, host: str, settings: GatewaySettings) -> bool:
    """A browser's Origin: this gateway's own (same host and port) or a --cors-origin."""
    if origin in settings.cors_origins or "*" in settings.cors_origins:
        return True
    return origin.split("://", 1)[-1].rstrip("/").lower() == host.lower()


class ApiKeys:
    """ASGI middleware: the key on /v1/ HTTP routes (WebSockets check their own)."""

    def __init__(self, app: ASGIApp, settings: GatewaySettings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/") and scope["method"] != "OPTIONS":
            request = Request(scope)
            if not authorized(self.settings, key_of(request.headers, {})):
                error = ApiError(
                    401, "a valid API key is required: send 'Authorization: Bearer KEY'", "invalid_api_key"
                )
                error.headers["WWW-Authenticate"] = "Bearer"
                await error.answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
