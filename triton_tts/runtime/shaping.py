"""What SSML does to a long text's chunks (triton_tts/text/ssml.py reads the document):
each segment cut into chunks on its own, so that no chunk spans a change of rate, volume
or a break; each chunk said at its segment's speed, with its gain and the silence after
it (:class:`ChunkShape`), applied to its audio by ``tts`` and ``tts_stream``
(triton_tts/runtime/long_text/)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from triton_tts.runtime.chunking import ChunkPlan, split_text
from triton_tts.text import ssml


@dataclass(frozen=True)
class ChunkShape:
    """What SSML sets per chunk: the SPEED it is said at, a gain in dB (None: silent), the
    seconds of silence after it, and before the first chunk."""

    speeds: list[float]
    gains_db: list[float | None]
    pauses_s: list[float]
    lead_s: float = 0.0

    def apply(self, index: int, samples: npt.NDArray[np.float32], rate: int) -> npt.NDArray[np.float32]:
        gain = self.gains_db[index]
        if gain is None:
            samples = np.zeros_like(samples)
        elif gain:
            samples = np.clip(samples * np.float32(10 ** (gain / 20)), -1.0, 1.0).astype(np.float32)
        before = round((self.lead_s if index == 0 else 0.0) * rate)
        after = round(self.pauses_s[index] * rate)
        if not before and not after:
            return samples
        return np.concatenate([np.zeros(before, np.float32), samples, np.zeros(after, np.float32)])


def ssml_chunks(
    document: ssml.Document,
    plan_at: Callable[[float], ChunkPlan],
    speed: float,
    says_something: Callable[[str], bool],
    first_scale: float,
) -> tuple[list[str], ChunkShape]:
    """An SSML document's chunks and their shape. ``plan_at(rate)``: the chunk plan for a
    segment said at that rate (times the request's ``speed``); ``first_scale``: the first
    chunk that much shorter (streams)."""
    chunks: list[str] = []
    speeds: list[float] = []
    gains: list[float | None] = []
    pauses: list[float] = []
    lead = document.lead_s
    for segment in document.segments:
        pieces: list[str] = []
        if says_something(segment.text):
            plan = plan_at(segment.rate)
            if not chunks:
                plan = plan.first_shorter(first_scale)
            pieces = [chunk for chunk in split_text(segment.text, plan) if says_something(chunk)]
        if not pieces:  # silence only: after what came before (or before the first chunk)
            if pauses:
                pauses[-1] += segment.pause_s
            else:
                lead += segment.pause_s
            continue
        chunks += pieces
        speeds += [speed * segment.rate] * len(pieces)
        gains += [segment.gain_db] * len(pieces)
        pauses += [0.0] * (len(pieces) - 1) + [segment.pause_s]
    return chunks, ChunkShape(speeds, gains, pauses, lead)
