"""Retries of a busy server's refusals: exponential backoff with full jitter, within the
client's timeout. The sync and asyncio clients share all of it and only sleep differently."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from triton_tts.client.errors import ServerBusy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of :class:`ServerBusy`: exponential backoff with full jitter, so clients
    refused together do not come back together. Never past the client's ``timeout_s``."""

    attempts: int = 5  # tries in all, the first included; 1: no retries
    base_delay_s: float = 0.2  # the first retry waits up to this long, each next up to 2x
    max_delay_s: float = 5.0  # cap of one wait

    def backoff(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (0 for the first)."""
        return float(min(self.max_delay_s, self.base_delay_s * 2.0**retry))

    def delay(self, retry: int, draw: float | None = None) -> float:
        """The wait before retry ``retry``: uniform in [0, backoff] (``draw`` in [0, 1) fixes it)."""
        return (random.random() if draw is None else draw) * self.backoff(retry)  # noqa: S311 - spread, not secrecy

    def next_delay(self, retry: int, deadline: float, hint_s: float | None = None) -> float | None:
        """How long to wait before retry ``retry``, or None to give up (no attempts left,
        or the wait would pass ``deadline``, a time.monotonic() value). A server's hint
        (``hint_s``) is waited out first, spread by up to a quarter, so that clients it
        refused together do not come back together."""
        if retry + 1 >= self.attempts:
            return None
        wait = self.delay(retry)
        if hint_s is not None:
            wait = max(wait, hint_s * (1.0 + 0.25 * random.random()))  # noqa: S311 - spread, not secrecy
        return wait if time.monotonic() + wait < deadline else None


DEFAULT_RETRY = RetryPolicy()
NO_RETRIES = RetryPolicy(attempts=1)


def _gave_up(err: ServerBusy, attempts: int) -> ServerBusy:
    return ServerBusy(f"{err} (refused {attempts} times)", err.retry_after_s) if attempts > 1 else err


class Retries:
    """One call's retries: made when the call starts, asked after each refusal how long
    to wait before the next try. The deadline is the call's start plus ``timeout_s``."""

    def __init__(self, policy: RetryPolicy, timeout_s: float, url: str) -> None:
        self.policy = policy
        self.deadline = time.monotonic() + timeout_s
        self.url = url
        self.done = 0  # retries so far

    def wait(self, err: ServerBusy) -> float:
        """The wait before the next try after ``err``; raises the refusal (with its count)
        when out of tries or time."""
        wait = self.policy.next_delay(self.done, self.deadline, err.retry_after_s)
        if wait is None:
            raise _gave_up(err, self.done + 1) from None
        self.done += 1
        log.debug("%s busy, retry %d in %.2f s", self.url, self.done, wait)
        return wait
