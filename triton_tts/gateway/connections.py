"""How long a caller may take to send a request: its headers (uvicorn's HTTP protocol,
timed from the connection or the previous response) and its body (ASGI middleware, timed
from the headers). A connection that holds a request open without finishing it costs a
socket and, for a body, a task; the settings say how long each may last
(:class:`triton_tts.gateway.settings.GatewaySettings`): a request whose headers are late is
dropped without an answer (there is no request to answer), one whose body is late gets 408
in OpenAI's error JSON and the connection is closed. A caller that gives up mid-body is one
line in the log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from triton_tts.gateway.errors import ApiError

log = logging.getLogger(__name__)


def with_header_timeout(base: type[H11Protocol], seconds: float) -> type[H11Protocol]:
    """``base`` (uvicorn's h11 protocol or a subclass) closing a connection whose request
    headers are not complete ``seconds`` after it opened or after its last response. uvicorn
    times only the idle wait between requests (timeout_keep_alive), and stops at the first
    byte: a header sent a byte a minute held its socket for good."""

    class HeaderTimeout(base):  # type: ignore[valid-type,misc]
        _headers_due: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            # IDLE: waiting for a request line and headers (again, after a response)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._headers_due is None:
                self._headers_due = self.loop.call_later(seconds, self._headers_late)

        def _disarm(self) -> None:
            if self._headers_due is not None:
                self._headers_due.cancel()
                self._headers_due = None

        def _headers_late(self) -> None:
            self._headers_due = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self.client and self.conn.trailing_data[0]:  # bytes of a request came, and stopped
                    log.info(
                        "closed %s:%d: its request headers were not complete in %g s", *self.client, seconds
                    )
                self.transport.close()

    HeaderTimeout.__name__ = HeaderTimeout.__qualname__ = f"HeaderTimeout{base.__name__}"
    return HeaderTimeout


class BodyDeadline:
    """ASGI middleware: an HTTP request body must be complete within ``timeout_s`` of its
    headers, plus a second for each ``min_rate`` bytes that came (a large upload on a slow
    link keeps going; a body sent a byte at a time, or never finished, does not). Past it:
    408, ``Connection: close``. A caller that leaves mid-body is logged in one line
    (:func:`client_gone`, the app's handler of ClientDisconnect)."""

    def __init__(self, app: ASGIApp, timeout_s: float, min_rate: float) -> None:
        self.app, self.timeout_s, self.min_rate = app, timeout_s, min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.timeout_s <= 0:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        start, received, complete = loop.time(), 0, False

        async def timed() -> Message:
            nonlocal received, complete
            if complete:  # after the body: the app waits for a disconnect, as long as it likes
                return await receive()
            due = start + self.timeout_s + received / self.min_rate
            try:
                message = await asyncio.wait_for(receive(), max(due - loop.time(), 0.0))
            except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11
                raise ApiError(
                    408,
                    f"the request body was not complete within {self.timeout_s:g} s (and 1 s per "
                    f"{self.min_rate:g} bytes received: {received} came)",
                    "request_timeout",
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, timed, send)


async def client_gone(request: Request, exc: Exception) -> Response:
    """A caller that went away before its body was complete: one line, no traceback (no
    one is left to answer; uvicorn drops the response)."""
    assert isinstance(exc, ClientDisconnect)
    log.info(
        "%s %s: the client went away before its request body was complete", request.method, request.url.path
    )
    return Response(status_code=400)
