"""How a long-text request ends other than with its audio: cancelled (its client went
away or its ``timeout`` passed: :class:`Cancellation`, asked before each chunk starts), a
chunk that failed in the stages (:class:`ChunkFailed`), or refused; and for each, the
response sent back (:func:`error_response`) and the metrics' outcome (:func:`outcome`).
Only importable inside Triton's Python backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors
from triton_tts.contract.validation import InvalidRequest
from triton_tts.runtime.admission import Refused


class ChunkFailed(Exception):
    """A chunk's synthesis failed; carries Triton's message and code (a
    pb_utils.TritonError code, or None when Triton gave none)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class RequestCancelled(Exception):
    """A request stopped before its last chunk (see :class:`Cancellation`)."""

    def __init__(self, reason: str, done: int, total: int) -> None:
        super().__init__(f"{reason}: stopped after {done} of {total} chunks")
        self.timed_out = reason == Cancellation.TIMED_OUT


class Cancellation:
    """Asked before each chunk starts: should the request's remaining chunks be skipped?

    Yes once Triton marks the request cancelled (``is_cancelled``: the request's, or a
    decoupled model's response sender's): a gRPC client cancelled it, its ``client_timeout``
    (the gRPC deadline) passed, or it went away. Triton 2.51 does not mark a request whose
    HTTP client disconnects (tests/test_cancellation.py shows it): that one runs to its
    end, ``chunks_in_flight`` chunks at a time. Any request can bound itself, over either
    protocol, with its own ``timeout`` (tritonclient's ``timeout=``, in microseconds, read
    here with ``request.timeout()``): yes, too, once that long has passed since the model
    took it (its wait for admission included; the wait in Triton's queue before that is
    Triton's to bound). The same timeout is the request's deadline for admission
    (triton_tts.runtime.admission.AdmissionSettings.text_budget). Each
    question is one round trip to Triton, once per chunk.
    """

    CANCELLED = "request cancelled"
    TIMED_OUT = "request timeout expired"

    def __init__(
        self, is_cancelled: Callable[[], bool], timeout_us: int = 0, since: float | None = None
    ) -> None:
        """``since``: when the model took the request (time.monotonic()), if before now: a
        wait for admission counts against its timeout."""
        self._is_cancelled = is_cancelled
        start = time.monotonic() if since is None else since
        self._deadline = start + timeout_us / 1e6 if timeout_us > 0 else None
        self.reason: str | None = None

    def __call__(self) -> bool:
        if self.reason is None:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self.reason = self.TIMED_OUT
            elif self._is_cancelled():
                self.reason = self.CANCELLED
        return self.reason is not None


def error_response(errors: RequestErrors, request_id: str, err: Exception) -> Any:
    """The response (logged, triton_tts.contract.errors) for a request that ended in ``err``."""
    if isinstance(err, RequestCancelled):  # a timeout is UNAVAILABLE, as Triton's own queue says
        code = pb_utils.TritonError.UNAVAILABLE if err.timed_out else pb_utils.TritonError.CANCELLED
        return errors.response(request_id, str(err), code)
    if isinstance(err, ChunkFailed):  # keep the chunk's error code (e.g. INVALID_ARG)
        return errors.response(request_id, err.message, err.code)
    if isinstance(err, InvalidRequest):
        return errors.invalid(request_id, str(err))
    if isinstance(err, Refused):
        return errors.response(request_id, str(err), pb_utils.TritonError.UNAVAILABLE)
    return errors.response(request_id, f"synthesis failed: {err}")


def outcome(err: Exception) -> str:
    """The metrics' outcome (triton_tts.runtime.metrics.OUTCOMES) of a request that ended in ``err``."""
    if isinstance(err, Refused):
        return "busy"
    if isinstance(err, RequestCancelled):
        return "cancelled"
    if isinstance(err, InvalidRequest):
        return "invalid"
    if isinstance(err, ChunkFailed) and err.code is not None:
        return {
            pb_utils.TritonError.INVALID_ARG: "invalid",
            pb_utils.TritonError.UNAVAILABLE: "busy",
            pb_utils.TritonError.CANCELLED: "cancelled",
        }.get(err.code, "failed")
    return "failed"
