"""The optional inputs every text model accepts, read and checked in one place.

Used by ``preprocess`` (which fills the voice's defaults) and by the long-text models
``tts`` / ``tts_stream`` (which check before any chunk is synthesised). Only importable
inside Triton's Python backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.validation import InvalidRequest, check_noise, check_speaker, check_speed


@dataclass(frozen=True)
class RequestOptions:
    """None means the input was left out (the voice's default applies)."""

    speed: float | None
    speaker_id: int | None
    noise_scale: float | None
    noise_w: float | None


def scalar(request: Any, name: str) -> float | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    if values.size != 1:
        raise InvalidRequest(f"{name} must hold one value, got {values.size}")
    return float(values[0])


def requested_voice(request: Any) -> str:
    """The request's VOICE, or "" (the default voice) when it is left out."""
    names = pb_utils.get_input_tensor_by_name(request, "VOICE")
    if names is None:
        return ""
    values = names.as_numpy().reshape(-1)
    if values.size != 1:
        raise InvalidRequest(f"VOICE must hold one string, got {values.size}")
    name = values[0]
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def read_options(request: Any, voice_name: str, num_speakers: int) -> RequestOptions:
    """Check VOICE, SPEED, SPEAKER_ID, NOISE_SCALE and NOISE_W of one request."""
    name = requested_voice(request)
    if name not in ("", voice_name):
        raise InvalidRequest(f"unknown VOICE '{name}': this model serves '{voice_name}'")
    speed = scalar(request, "SPEED")
    speaker = scalar(request, "SPEAKER_ID")
    noise_scale = scalar(request, "NOISE_SCALE")
    noise_w = scalar(request, "NOISE_W")
    return RequestOptions(
        speed=None if speed is None else check_speed(speed),
        speaker_id=None if speaker is None else check_speaker(int(speaker), num_speakers, voice_name),
        noise_scale=None if noise_scale is None else check_noise("NOISE_SCALE", noise_scale),
        noise_w=None if noise_w is None else check_noise("NOISE_W", noise_w),
    )
