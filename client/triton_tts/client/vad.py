"""Speech regions of a recording, from the server's ``vad`` model (Silero VAD).

The model is Silero's sequence graph: a block of 32 ms frames in (512 samples at 16 kHz,
each after the 64 samples before it), a speech probability a frame out, and its LSTM
state (``h``, ``c``) in and out, which the caller carries from block to block. So a
recording of any length is a few calls (512 frames, 16.4 s, a call), made here in order.

The probabilities become regions as Silero's own post-processing does it (its defaults,
which are facts of the model's calibration): speech starts where a frame reaches
``threshold`` (0.5) and ends after ``min_silence_s`` (0.1 s) under ``threshold - 0.15``;
regions shorter than ``min_speech_s`` (0.25 s) are dropped, and each is padded by
``pad_s`` (30 ms) on both sides, within its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

VAD_MODEL = "vad"
RATE = 16_000
FRAME = 512
CONTEXT = 64
BLOCK = 512  # frames a call
STATE_SHAPE = (1, 1, 128)
FRAME_S = FRAME / RATE


@dataclass(frozen=True)
class Region:
    start: float  # seconds
    end: float


# (block [n, CONTEXT + FRAME], h, c) -> (probabilities [n], h, c)
VadCall = Callable[[FloatArray, FloatArray, FloatArray], tuple[FloatArray, FloatArray, FloatArray]]


def to_vad_rate(audio: FloatArray, rate: int) -> FloatArray:
    """Mono float32 at 16 kHz (soxr, high quality)."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1, dtype=np.float32)
    if rate == RATE:
        return audio
    import soxr

    return np.asarray(soxr.resample(audio, rate, RATE, quality="HQ"), dtype=np.float32)


def blocks(audio: FloatArray) -> Iterator[FloatArray]:
    """16 kHz audio as blocks of frames, each frame after its 64-sample context (zeros
    before the first); the last frame zero-padded."""
    count = -(-len(audio) // FRAME)
    padded = np.zeros(CONTEXT + count * FRAME, dtype=np.float32)
    padded[CONTEXT : CONTEXT + len(audio)] = audio
    for first in range(0, count, BLOCK):
        n = min(BLOCK, count - first)
        starts = (first + np.arange(n)) * FRAME  # each frame's context starts here in padded
        yield padded[starts[:, None] + np.arange(CONTEXT + FRAME)[None, :]]


def probabilities(call: VadCall, audio: FloatArray, rate: int) -> FloatArray:
    """A speech probability per 32 ms frame of ``audio``."""
    h = np.zeros(STATE_SHAPE, np.float32)
    c = np.zeros(STATE_SHAPE, np.float32)
    out = []
    for block in blocks(to_vad_rate(audio, rate)):
        probs, h, c = call(block, h, c)
        out.append(np.asarray(probs, dtype=np.float32).reshape(-1))
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def speech_regions(
    probs: FloatArray,
    threshold: float = 0.5,
    min_speech_s: float = 0.25,
    min_silence_s: float = 0.1,
    pad_s: float = 0.03,
) -> list[Region]:
    """The regions of speech in per-frame probabilities (the module's docstring)."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be between 0 and 1, not {threshold:g}")
    low = max(threshold - 0.15, 0.01)
    raw: list[tuple[int, int]] = []
    start: int | None = None
    quiet_since: int | None = None
    min_silence = max(1, round(min_silence_s / FRAME_S))
    for i, p in enumerate(probs):
        if start is None:
            if p >= threshold:
                start, quiet_since = i, None
            continue
        if p >= threshold:
            quiet_since = None
        elif p < low:
            quiet_since = i if quiet_since is None else quiet_since
            if i + 1 - quiet_since >= min_silence:
                raw.append((start, quiet_since))
                start, quiet_since = None, None
    if start is not None:
        raw.append((start, quiet_since if quiet_since is not None else len(probs)))
    kept = [(a * FRAME_S, b * FRAME_S) for a, b in raw if (b - a) * FRAME_S >= min_speech_s]
    total = len(probs) * FRAME_S
    regions = []
    for i, (a, b) in enumerate(kept):
        before = kept[i - 1][1] if i else 0.0
        after = kept[i + 1][0] if i + 1 < len(kept) else total
        # padded, but never past the middle of the silence to a neighbour
        regions.append(
            Region(max(before + (a - before) / 2, a - pad_s, 0.0), min(b + pad_s, b + (after - b) / 2))
        )
    return regions
