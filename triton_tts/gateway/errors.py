"""Errors as callers get them: OpenAI's error JSON (``{"error": {"message", "type",
"param", "code"}}``) with a status code, and the client's error types mapped onto them:
the caller's mistakes are 4xx, the server's faults 5xx."""

from __future__ import annotations

import math
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from triton_tts.client import (
    RequestRejected,
    ServerBusy,
    ServerUnavailable,
    TimedOut,
    TTSError,
    Unauthorized,
)
from triton_tts.gateway.metrics import Synthesis
from triton_tts.gateway.settings import GatewaySettings


class ApiError(Exception):
    """An error answered as OpenAI's error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        # A lone surrogate (from a caller's text quoted in the message) cannot be UTF-8.
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    async def answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send this error as the response, its code noted for the request's metrics."""
        self.note(scope)
        await self.response()(scope, receive, send)

    def note(self, scope: Scope) -> None:
        synthesis = scope.get("state", {}).get("synthesis")
        if isinstance(synthesis, Synthesis):
            synthesis.error_code = self.code


def invalid(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)


def from_tts_error(err: TTSError, settings: GatewaySettings) -> ApiError:
    """The client's error types -> status codes. Only a refusal of the text itself is the
    caller's (400); whatever the client cannot name is the server's fault (500)."""
    if isinstance(err, ServerBusy):
        # The server's own estimate when it gave one (admission's hint), in whole seconds.
        hint = err.retry_after_s
        retry = {"Retry-After": str(math.ceil(hint) if hint else settings.retry_after_s)}
        return ApiError(503, f"the server is busy, retry later ({err})", "server_busy", headers=retry)
    if isinstance(err, ServerUnavailable):
        return ApiError(503, f"the speech server is unavailable: {err}", "triton_unavailable")
    if isinstance(err, RequestRejected):
        return invalid(str(err), param="input", code="rejected_by_server")
    if isinstance(err, TimedOut):
        return ApiError(504, f"no audio in time: {err}", "timeout")
    if isinstance(err, Unauthorized):
        # Triton wants a key the gateway lacks: the deployment's fault, not the caller's.
        return ApiError(502, f"the speech server refused the gateway's API key: {err}", "triton_unauthorized")
    return ApiError(500, str(err), "synthesis_failed")
