"""One cancellation for every model: a request whose client went away or whose own
``timeout`` passed (:class:`Cancellation`, asked before each chunk or every few decode
steps) stops with :class:`RequestCancelled`. Pure Python: the long-text models
(triton_tts/runtime/long_text/) and XTTS's model (triton_tts/xtts/) share it."""

from __future__ import annotations

import time
from collections.abc import Callable


class RequestCancelled(Exception):
    """A request stopped before its end (see :class:`Cancellation`): after ``done`` of
    ``total`` chunks when it knows them (the long-text models), else at a generation's
    next step (an XTTS voice's model)."""

    def __init__(self, reason: str, done: int | None = None, total: int | None = None) -> None:
        counted = (
            f": stopped after {done} of {total} chunks" if done is not None and total is not None else ""
        )
        super().__init__(f"{reason}{counted}")
        self.reason = reason
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
