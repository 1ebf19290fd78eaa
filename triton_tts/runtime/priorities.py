"""The Triton priority each chunk is sent with: a stream's first chunk first, later chunks
by how little audio their listener has left, texts last. model_configs gives the stages'
dynamic batchers these levels; long_text.send sends chunks at them."""

from __future__ import annotations

import math

# Priority levels of the stages' dynamic batchers (Triton's level 1 goes first): earliest
# deadline first, in steps. A stream's first chunk is due within the first-chunk budget
# (FIRST_CHUNK_PRIORITY). A later chunk is due when its listener runs out of audio: the
# less audio the listener has left when it is sent, the higher its level (STREAM_LEVELS;
# a stream's second chunk, sent with its first chunk's audio left, comes after other
# streams' first chunks). Texts and direct tts_chunk requests, whose callers wait within
# a budget of seconds, come last (DEFAULT_PRIORITY, the default, which BLS requests get).
# A level is fixed when a chunk is sent (Triton cannot raise it in the queue), so even a
# stream far ahead goes before texts: it would otherwise sit behind them as its lead runs
# out. An ensemble passes its request's priority on to each step, so a tts_chunk
# request's priority holds in all four stages.
FIRST_CHUNK_PRIORITY = 1
STREAM_LEVELS = ((2.5, 2), (5.0, 3), (math.inf, 4))  # (audio left below, s; level)
DEFAULT_PRIORITY = 5


def chunk_priority(index: int, lead_s: float) -> int:
    """A stream chunk's level: its first, or by the audio its listener has left."""
    if index == 0:
        return FIRST_CHUNK_PRIORITY
    return next(level for below, level in STREAM_LEVELS if lead_s < below)
