"""An XTTS voice's capacity for admission, from what its model really makes.

tts and tts_stream admit an XTTS voice's text by its predicted audio over this capacity, in
the ledger the chunk voices share (triton_tts/runtime/admission.py). Nothing measures it at start
(``triton-tts serve`` times the chunk voices only), and the chunk voices' windows cannot
tell it: the xtts model's loop batches its own slots at a rate of its own. So the model
judges itself: over each window, the audio it sent over the wall time. A window in which
all its slots were live or a generation waited for one, throughout, shows what it can
make, and the ledger's figure moves toward it; a window that made more than the figure
raises it whatever the load (:meth:`triton_tts.runtime.admission.Ledger.observe_capacity`).
Imports nothing of Triton.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from triton_tts.xtts import defaults


class ThroughputWindow:
    """Audio sent (:meth:`made`, from the decode loop) and whether the model stayed busy
    (:meth:`sample`, every few tenths of a second), window by window."""

    def __init__(
        self, window_s: float = defaults.CAPACITY_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.clock = clock
        self.lock = threading.Lock()
        self.start = clock()
        self.audio_s = 0.0
        self.busy = True  # until a sample says otherwise

    def made(self, audio_s: float) -> None:
        with self.lock:
            self.audio_s += audio_s

    def sample(self, busy: bool) -> tuple[float, bool] | None:
        """Whether the model is busy now; at a window's end, its audio seconds per second
        and whether it was busy throughout (a new window starts), else None."""
        with self.lock:
            self.busy = self.busy and busy
            now = self.clock()
            elapsed = now - self.start
            if elapsed < self.window_s:
                return None
            ended = (self.audio_s / elapsed, self.busy)
            self.start, self.audio_s, self.busy = now, 0.0, busy
            return ended
