"""Answering a request with an error, logged once with the request's id.

Every error our models send back goes through :meth:`RequestErrors.response`, which logs
one line to Triton's log (``pb_utils.Logger``) naming the model, the request id and the
code, so that an operator can find what a client was told:

    W1130 16:29:56.513543 2418 errors.py:55] "tts: request 42 refused (INVALID_ARG): SPEED 9 is ..."

The level follows whose fault it is: a warning for what the client can change
(INVALID_ARG: HTTP 400 / gRPC INVALID_ARGUMENT; UNAVAILABLE, a refusal for load: 503;
CANCELLED), an error for the server's own failures (INTERNAL: 500). One line per failed
request at the model that answers it, nothing for requests that succeed. A request
without an id (the client set none) gets a generated one. ``tts`` and ``tts_stream``
send each chunk as request ``<id>/<chunk index>``, so a chunk's failure logged by
``preprocess`` or a stage leads to the request it belongs to (whose own line follows).
preprocess cannot tell those chunks from a client's requests: a chunk it refuses as
over the voice's budget is logged though ``tts`` then says it in halves (rare: chunks
are packed to fit). Only importable inside Triton's Python backend.
"""

from __future__ import annotations

import unicodedata
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

# Codes a client can act on: fix the request, retry later, or it stopped the request
# itself. (Names, not values: pb_utils.TritonError exists only once the stub has started.)
_CLIENT_SIDE = ("INVALID_ARG", "UNAVAILABLE", "CANCELLED", "ALREADY_EXISTS")
_CODES = (
    "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
    "ALREADY_EXISTS", "CANCELLED",
)  # fmt: skip


def _code_name(code: int) -> str:
    return next((name for name in _CODES if getattr(pb_utils.TritonError, name, None) == code), str(code))


def printable(text: str) -> str:
    """``text`` with every control, format, private-use, surrogate and unassigned character
    written as its escape (a NUL as ``\\x00``, U+202E as ``\\u202e``): messages echo callers'
    values (a VOICE, a request id), and one must neither cut a client's string at a NUL nor
    turn a log line or a terminal around."""
    return "".join(
        ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(ch)[0] == "C"
        else ch
        for ch in text
    )


def request_id(request: Any) -> str:
    """The id the client gave the request, or a generated one (``anon-<hex>``) if none."""
    given = request.request_id()
    return given if given else f"anon-{uuid.uuid4().hex[:12]}"


# A decoupled model's error reaches a gRPC stream as its message only: Triton's stream
# responses carry no status code. ``tagged`` models put the code in front, in this form,
# so a client can tell a caller's error from the server's (client/triton_tts/client/errors.py reads it).
CODE_TAG = "[{code}] "
# The output that carries an error to a caller that asks for errors as outputs
# (RequestErrors.as_output).
ERROR_OUTPUT = "ERROR"


class RequestErrors:
    """One model's error responses; made once in ``initialize`` with the model's name;
    ``tagged`` (decoupled models): each message starts with its code (CODE_TAG)."""

    def __init__(self, model: str, tagged: bool = False) -> None:
        self.model = model
        self.tagged = tagged

    def response(self, request_id: str, message: str, code: int | None = None) -> Any:
        """The error response for a request (``code``: a pb_utils.TritonError code,
        INTERNAL if None); logs it (warning for the client's side, error for the server's)."""
        code, name, message = self._logged(request_id, message, code)
        sent = CODE_TAG.format(code=name) + message if self.tagged else message
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(sent, code))

    def as_output(self, request_id: str, message: str, code: int | None = None) -> Any:
        """The same error as a plain response whose ERROR output holds the tagged message,
        for a decoupled model's callers by BLS: Triton 2.51's Python backend sends a BLS
        caller an error response without its stream's id, so the caller's response
        iterator never sees it nor the final flag after it (fixed in python_backend r25.06),
        and the caller's stub hangs when it stops. Logged as :meth:`response` logs."""
        code, name, message = self._logged(request_id, message, code)
        tagged = CODE_TAG.format(code=name) + message
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(ERROR_OUTPUT, np.array([tagged.encode()], dtype=np.object_))]
        )

    def _logged(self, request_id: str, message: str, code: int | None) -> tuple[int, str, str]:
        if code is None:
            code = pb_utils.TritonError.INTERNAL
        # Every model's error leaves through here: the one place callers' values are escaped.
        request_id, message = printable(request_id), printable(message)
        name = _code_name(code)
        if name in _CLIENT_SIDE:
            pb_utils.Logger.log_warn(f"{self.model}: request {request_id} refused ({name}): {message}")
        else:
            pb_utils.Logger.log_error(f"{self.model}: request {request_id} failed ({name}): {message}")
        return code, name, message

    def invalid(self, request_id: str, message: str) -> Any:
        """A refusal of the request as malformed (INVALID_ARG: HTTP 400)."""
        return self.response(request_id, message, pb_utils.TritonError.INVALID_ARG)
