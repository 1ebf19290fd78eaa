"""A request's inputs, read and checked in one place (the checks are triton_tts.contract.validation's).

Every text model reads a request through here: ``tts`` / ``tts_stream`` for the whole
text (before any chunk is synthesised) and ``preprocess`` for what reaches ``tts_chunk``,
each against the voices it serves. The long-text models send each chunk on with
NORMALIZE false (they normalised the whole text) and without VOICE (the chunk's ensemble
is the voice), so a text is normalised once and its VOICE checked once. ``tts_chunk`` is
public, so preprocess checks TEXT and the numbers of every request it gets, the
long-text models' chunks included: it cannot tell them from a client's. Only importable
inside Triton's Python backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.contract.styles import parse_mix
from triton_tts.contract.validation import (
    InvalidRequest,
    check_noise,
    check_speaker,
    check_speed,
    check_text_format,
    check_voice,
    decode_text,
)


@dataclass(frozen=True)
class RequestOptions:
    """The optional inputs; None means left out (the voice's default applies)."""

    voice: str  # the voice chosen: VOICE, or the model's default voice
    speed: float | None
    speaker_id: int | None
    noise_scale: float | None
    noise_w: float | None
    normalize: bool  # NORMALIZE: false reads TEXT as written
    timestamps: bool = False  # TIMESTAMPS: WORDS and WORD_TIMES too
    text_format: str = "auto"  # TEXT_FORMAT: text, ssml, or auto (SSML if it starts with <speak)
    voice_mix: str | None = (
        None  # VOICE_MIX: speakers with weights (style voices; triton_tts.contract.styles)
    )


def missing_input(name: str) -> InvalidRequest:
    """The refusal of a request without the required input ``name``."""
    return InvalidRequest(f"{name} is required: the request has no input {name}")


def single(name: str, array: npt.NDArray[Any]) -> Any:
    """The one value of input ``name`` (any shape that holds exactly one), or InvalidRequest."""
    values = array.reshape(-1)
    if values.size != 1:
        raise InvalidRequest(
            f"{name} must hold one value per request, got {values.size} (shape {list(array.shape)}); "
            "send each item as its own request"
        )
    return values[0]


def input_array(request: Any, name: str) -> npt.NDArray[Any] | None:
    """An optional input's array, None when left out."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array: npt.NDArray[Any] = tensor.as_numpy()
    return array


def required_input(request: Any, name: str) -> npt.NDArray[Any]:
    """A required input's array, or InvalidRequest naming it. Triton checks the type and
    shape of every input a request names, but of the required ones only how many there
    are: a request that leaves TEXT out and sends another input in its place reaches the
    model without it."""
    array = input_array(request, name)
    if array is None:
        raise missing_input(name)
    return array


def read_text(request: Any, limit: int, keep: str = "") -> str:
    """TEXT, decoded and checked (triton_tts.contract.validation.decode_text), up to ``limit``
    characters; ``keep``: private-use characters kept (preprocess: pronunciation marks)."""
    raw = one_value(request, "TEXT", required=True)
    if not isinstance(raw, bytes | str):  # Triton checks a client's types, not a model's own (BLS)
        raise InvalidRequest(f"TEXT must be a string (BYTES), got {type(raw).__name__}")
    return decode_text(raw, limit=limit, keep=keep)


def one_value(request: Any, name: str, required: bool = False) -> Any | None:
    """An input's one value (None when an optional one is left out), or InvalidRequest."""
    array = required_input(request, name) if required else input_array(request, name)
    return None if array is None else single(name, array)


def read_lexicon(request: Any) -> bytes | str | None:
    """LEXICON's one value as sent (None when left out); its reading is
    triton_tts.text.pronounce.parse_request_lexicon's, against the request's voice."""
    value = one_value(request, "LEXICON")
    if value is not None and not isinstance(value, bytes | str):
        raise InvalidRequest(f"LEXICON must be a string (BYTES) of JSON, got {type(value).__name__}")
    return value


# What only a cloning (XTTS) voice takes: a clip and its rate. A chunk voice refuses them
# rather than speak in its own voice to a caller who asked for another.
CLIP_INPUTS = ("REFERENCE_AUDIO", "REFERENCE_SAMPLE_RATE")


def refuse_clip(request: Any, voice: str) -> None:
    """InvalidRequest if the request to voice ``voice`` (not an XTTS voice) sends a clip."""
    for name in CLIP_INPUTS:
        if input_array(request, name) is not None:
            raise InvalidRequest(
                f"{name}: voice '{voice}' does not clone voices from a clip (only XTTS voices do: "
                "`triton-tts voices` says which)"
            )


def _number(request: Any, name: str) -> float | None:
    value = one_value(request, name)
    return None if value is None else float(value)


def read_options(request: Any, voices: Mapping[str, int]) -> RequestOptions:
    """Check VOICE against ``voices`` (name -> speakers, the default first), then SPEED,
    SPEAKER_ID, NOISE_SCALE, NOISE_W, NORMALIZE, TIMESTAMPS, TEXT_FORMAT and VOICE_MIX (read
    here, checked against the voice's speakers by :func:`voice_mix`)."""
    name = one_value(request, "VOICE")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    voice = check_voice("" if name is None else str(name), list(voices))
    speed = _number(request, "SPEED")
    speaker = _number(request, "SPEAKER_ID")
    noise_scale = _number(request, "NOISE_SCALE")
    noise_w = _number(request, "NOISE_W")
    normalize = one_value(request, "NORMALIZE")
    timestamps = one_value(request, "TIMESTAMPS")
    text_format = one_value(request, "TEXT_FORMAT")
    if isinstance(text_format, bytes):
        text_format = text_format.decode("utf-8", "replace")
    mix = one_value(request, "VOICE_MIX")
    if mix is not None and not isinstance(mix, bytes | str):
        raise InvalidRequest(f"VOICE_MIX must be a string (BYTES), got {type(mix).__name__}")
    if isinstance(mix, bytes):
        mix = mix.decode("utf-8", "replace")
    return RequestOptions(
        voice=voice,
        speed=None if speed is None else check_speed(speed),
        speaker_id=None if speaker is None else check_speaker(int(speaker), voices[voice], voice),
        noise_scale=None if noise_scale is None else check_noise("NOISE_SCALE", noise_scale),
        noise_w=None if noise_w is None else check_noise("NOISE_W", noise_w),
        normalize=True if normalize is None else bool(normalize),
        timestamps=False if timestamps is None else bool(timestamps),
        text_format=check_text_format("auto" if text_format is None else str(text_format)),
        voice_mix=mix,
    )


def voice_mix(
    options: RequestOptions, speakers: Mapping[str, int], mixes: bool, voice: str
) -> dict[int, float] | None:
    """VOICE_MIX as speaker id -> weight (None when left out), checked against a voice's
    speakers; a voice that does not mix refuses it by name."""
    if options.voice_mix is None:
        return None
    if not mixes:
        raise InvalidRequest(
            f"VOICE_MIX: voice '{voice}' does not mix speakers (style voices such as Kokoro do: "
            "`triton-tts voices` says which)"
        )
    if options.speaker_id is not None:
        raise InvalidRequest("send SPEAKER_ID or VOICE_MIX, not both: a mix names its speakers")
    return parse_mix(options.voice_mix, dict(speakers))
