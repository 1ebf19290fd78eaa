"""A stream paced to playback: later chunks start when the listener will need them.

Without pacing, every stream synthesises its whole text as fast as the stages allow, so
under load the queues fill with chunks their listeners will not hear for tens of
seconds, and a new stream's first chunk waits behind them. :class:`Pacer` models the
listener: playback starts when the first chunk is sent, runs at real time, and waits
(a gap) when it runs out of audio. Before a later chunk starts, the stream waits until
the audio already sent leads playback by less than ``lead_s``; the lead left must cover
the next chunk's synthesis under load, or the listener hears a gap (counted in
:attr:`Pacer.gaps`).

Pacing ends for every stream at once when the server stops: ``triton-tts serve`` (and
:class:`triton_tts.ops.server.TritonServer`) create the file named in :data:`RELEASE_FILE_ENV`
before draining, so no stream holds the stop for the length of its playback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

RELEASE_FILE_ENV = "TRITON_TTS_RELEASE_FILE"  # exists: the server is stopping, stop pacing
CHECK_EVERY_S = 0.5  # how often a waiting stream asks whether it was cancelled
# A stream whose listener has at least this much audio left holds its next chunk while
# other streams' first chunks are waiting (``hold``): earliest deadline first, since a
# running chunk cannot be overtaken, and building a lead can wait; below it, it cannot.
HOLD_FLOOR_S = 5.0
HOLD_CHECK_S = 0.1


def released_by_file(path: str | None = None) -> Callable[[], bool]:
    """Whether the server asked streams to stop pacing (the file exists)."""
    target = path if path is not None else os.environ.get(RELEASE_FILE_ENV, "")
    return (lambda: os.path.exists(target)) if target else (lambda: False)


class Pacer:
    """One stream's clock. ``sent(seconds)`` after each chunk is sent; ``wait(stop)``
    before a later chunk starts."""

    def __init__(
        self,
        lead_s: float,
        released: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        hold: Callable[[], bool] = lambda: False,
    ) -> None:
        self.lead_s = lead_s
        self.released = released
        self.hold = hold
        self.clock = clock
        self.sleep = sleep
        self.sent_s = 0.0  # audio sent so far
        self.playback_start: float | None = None  # when playback would have begun, gaps added
        self.gaps = 0  # chunks sent after the listener ran out of audio
        self.gap_s = 0.0  # how long the listener waited in all
        self.waited_s = 0.0  # how long wait() held the stream

    def sent(self, seconds: float) -> None:
        now = self.clock()
        if self.playback_start is None:
            self.playback_start = now
        else:
            waited = now - self.playback_start - self.sent_s  # the listener's silence
            if waited > 0:
                self.gaps += 1
                self.gap_s += waited
                self.playback_start += waited  # playback resumes with this chunk
        self.sent_s += seconds

    def lead(self) -> float:
        """Seconds of audio sent and not yet played (0 before the first chunk)."""
        if self.playback_start is None:
            return 0.0
        return max(0.0, self.sent_s - (self.clock() - self.playback_start))

    def wait(self, stop: Callable[[], bool]) -> None:
        """Return once the lead is under ``lead_s`` and nothing holds the stream (``hold()``
        while the lead is over :data:`HOLD_FLOOR_S`), pacing is released, or ``stop()``
        (asked every :data:`CHECK_EVERY_S`) says the stream ends. ``lead_s`` 0: at once."""
        if self.lead_s <= 0:
            return
        began = self.clock()
        try:
            while True:
                lead = self.lead()
                held = lead > HOLD_FLOOR_S and self.hold()
                if lead <= self.lead_s and not held:
                    return
                if self.released() or stop():
                    return
                self.sleep(HOLD_CHECK_S if held else min(lead - self.lead_s, CHECK_EVERY_S))
        finally:
            self.waited_s += self.clock() - began
