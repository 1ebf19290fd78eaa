"""How a long-text request ends other than with its audio: cancelled (its client went
away or its ``timeout`` passed: triton_tts.runtime.cancellation, asked before each chunk
starts), a chunk that failed in the stages (:class:`ChunkFailed`), or refused; and for each, the
response sent back (:func:`error_response`) and the metrics' outcome (:func:`outcome`).
Only importable inside Triton's Python backend."""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors
from triton_tts.contract.validation import InvalidRequest
from triton_tts.runtime.admission import Refused
from triton_tts.runtime.cancellation import RequestCancelled


class ChunkFailed(Exception):
    """A chunk's synthesis failed; carries Triton's message and code (a
    pb_utils.TritonError code, or None when Triton gave none)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


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
