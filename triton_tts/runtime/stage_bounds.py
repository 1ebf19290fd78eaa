"""What a Python stage model holds each request to: the front door's bounds for its voice.

Kept apart from triton_tts.runtime.stages (the runners), which the chunk-limit calibration in
triton_tts.runtime.limits uses: the bounds need the limits, the limits need a runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_tts.contract.styles import STYLE_WIDTH
from triton_tts.contract.validation import (
    InvalidRequest,
    check_latent,
    check_phoneme_ids,
    check_scales,
    check_speaker,
    one_item,
)
from triton_tts.contract.voice import Voice
from triton_tts.runtime.limits import ChunkLimits
from triton_tts.runtime.stages import FloatArray, IntArray, StageSettings


@dataclass(frozen=True)
class StageBounds:
    """What a stage model holds each request to: the front door's bounds for this voice
    (triton_tts.contract.validation's checks, its chunk budget from triton_tts.runtime.limits). tts_chunk's
    steps and direct callers get the same checks: a stage cannot tell them apart."""

    voice: str
    limits: ChunkLimits
    vocabulary: int  # ids 0..vocabulary-1 are the voice's symbols
    length_scale: float  # the voice's, at SPEED 1
    speakers: int

    @classmethod
    def of(cls, voice: Voice, settings: StageSettings) -> StageBounds:
        framing = [voice.padding_id, *(voice.bos or []), *(voice.eos or []), *(voice.intersperse or [])]
        vocabulary = 1 + max([*framing, *(i for ids in voice.symbols.values() for i in ids)])
        limits = ChunkLimits.from_json(settings.parameters["chunk_limits"])
        return cls(voice.name, limits, vocabulary, voice.length_scale, voice.num_speakers)

    def speaker(self, tensor: npt.NDArray[Any] | None) -> int:
        if tensor is None:
            return 0
        return check_speaker(int(one_item("SPEAKER_ID", tensor).reshape(-1)[0]), self.speakers, self.voice)

    def acoustic_item(
        self,
        ids: npt.NDArray[Any],
        length: npt.NDArray[Any],
        scales: npt.NDArray[Any],
        speaker: npt.NDArray[Any] | None,
        style: npt.NDArray[Any] | None = None,
    ) -> tuple[IntArray, FloatArray, int, FloatArray | None]:
        """One acoustic request's (ids, SCALES row, speaker, STYLE row or None), or
        InvalidRequest."""
        count = int(one_item("PHONEME_LENGTH", length).reshape(-1)[0])
        row = check_phoneme_ids(one_item("PHONEME_IDS", ids), count, self.vocabulary, self.limits.max_ids)
        scales_row = one_item("SCALES", scales).reshape(-1)
        speed, noise_w = check_scales(scales_row, self.length_scale)
        refusal = self.limits.refusal(count, speed, noise_w)  # the frame budget, as preprocess
        if refusal:
            raise InvalidRequest(refusal)
        return row, scales_row.astype(np.float32), self.speaker(speaker), check_style(style)

    def latent(self, latent: npt.NDArray[Any], channels: int | None) -> FloatArray:
        """One vocoder request's LATENT [C, frames], or InvalidRequest."""
        return check_latent(one_item("LATENT", latent), channels, self.limits.max_frames)


# Style rows are mixes of the voice packs' rows (|value| < 4 in Kokoro's); far past that a
# STYLE is no voice's, and the graph's output is noise.
MAX_STYLE_VALUE = 64.0


def check_style(style: npt.NDArray[Any] | None) -> FloatArray | None:
    """A STYLE input [1, 256] (style voices), or InvalidRequest; None when left out."""
    if style is None:
        return None
    row = one_item("STYLE", style).reshape(-1)
    if row.size != STYLE_WIDTH:
        raise InvalidRequest(f"STYLE must hold {STYLE_WIDTH} values, got {row.size}")
    values = row.astype(np.float32)
    if not np.isfinite(values).all() or float(np.max(np.abs(values))) > MAX_STYLE_VALUE:
        raise InvalidRequest(f"STYLE values must be finite and within +-{MAX_STYLE_VALUE:g}")
    return values
