"""Per-request input checks: each decision about what a request may hold, made here once.

Every check raises :class:`InvalidRequest` with a message that names the problem; the
Triton models turn it into an INVALID_ARG error for that request alone. Free of Triton
imports (:mod:`triton_tts.runtime.request_options` reads the tensors and calls these).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

MAX_TEXT_CHARS = 1000  # per chunk through the `tts_chunk` pipeline
MAX_LONG_TEXT_CHARS = 50_000  # per `tts` / `tts_stream` request, chunked internally
MIN_SPEED, MAX_SPEED = 0.25, 4.0
MAX_NOISE = 2.0
# The longest SSML <break> (triton_tts/text/ssml.py refuses longer ones); one of them is
# always allowed, whatever the text's length (limits.check_audio).
MAX_BREAK_S = 10.0


class InvalidRequest(ValueError):
    """A request the server refuses (INVALID_ARG: HTTP 400), the one type for every door
    and model: the message, naming the input, is sent back to the client; ``code`` says
    what kind of refusal it is, for code that must tell them apart (never the words)."""

    def __init__(self, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.code = code


# Refusals' codes besides "invalid" (a malformed or out-of-range input).
NOTHING_TO_SAY = "nothing_to_say"  # TEXT holds nothing the voice can pronounce
UNREADABLE = "unreadable"  # text or a language the voice cannot read (XTTS)
UNUSABLE_CLIP = "unusable_clip"  # a reference clip that cannot condition the voice
UNKNOWN_SPEAKER = "unknown_speaker"  # a SPEAKER name the voice does not have
BUSY_JOB = "busy_job"  # a job id already generating (XTTS)
NOTHING_TO_SAY_MESSAGE = "TEXT has nothing the voice can pronounce"


def nothing_to_say() -> InvalidRequest:
    """TEXT holds nothing the voice can pronounce (punctuation, symbols, or only what the
    voice has no symbols for): a refusal like any other for the client."""
    return InvalidRequest(NOTHING_TO_SAY_MESSAGE, NOTHING_TO_SAY)


def decode_text(raw: bytes | str, limit: int = MAX_TEXT_CHARS, keep: str = "") -> str:
    """Decode a TEXT element and make sure there is something to speak; ``keep``: private-use
    characters to keep (the long-text models' marked pronunciations, in their chunks)."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidRequest(f"TEXT is not valid UTF-8 (byte {err.start})") from None
    else:
        text = raw
    if len(text) > limit:
        raise InvalidRequest(f"TEXT has {len(text)} characters; the limit is {limit} per request")
    # Control and format characters (Cc, Cf) carry nothing to say; line breaks become spaces.
    cleaned = "".join(
        " " if ch in "\n\r\t" else ch
        for ch in text
        if ch in "\n\r\t" or ch in keep or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co")
    )
    if not cleaned.strip():
        what = "empty" if not text.strip() else "only control characters"
        raise InvalidRequest(f"TEXT is {what}: nothing to synthesise")
    return cleaned.strip()


def check_speed(speed: float) -> float:
    if not math.isfinite(speed) or speed <= 0:
        raise InvalidRequest(f"SPEED must be a positive number, got {speed}")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequest(f"SPEED {speed:g} is outside [{MIN_SPEED:g}, {MAX_SPEED:g}]")
    return speed


def check_noise(name: str, value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= MAX_NOISE:
        raise InvalidRequest(f"{name} must be within [0, {MAX_NOISE:g}], got {value}")
    return value


def check_voice(name: str, served: Sequence[str]) -> str:
    """The voice a request's VOICE names ("" for the default, ``served[0]``)."""
    if not name:
        return served[0]
    if name not in served:
        listed = ", ".join(f"'{v}'" for v in served)
        raise InvalidRequest(f"unknown VOICE '{name}': this model serves {listed}")
    return name


TEXT_FORMATS = ("auto", "text", "ssml")


def check_text_format(value: str) -> str:
    """TEXT_FORMAT: "text", "ssml", or "auto" (SSML when the text starts with ``<speak``)."""
    if value not in TEXT_FORMATS:
        raise InvalidRequest(f"TEXT_FORMAT must be one of {', '.join(TEXT_FORMATS)}, got {value[:40]!r}")
    return value


def check_timestamps(voice: str, available: bool) -> None:
    """TIMESTAMPS asked of a voice: only voices whose acoustic model says its durations."""
    if not available:
        raise InvalidRequest(
            f"TIMESTAMPS: voice '{voice}' has no word timestamps (its acoustic model does not "
            "give its durations: Piper VITS voices exported by this version do; Tacotron2, "
            "pinyin and older exports do not)"
        )


def check_speaker(speaker_id: int, num_speakers: int, voice: str) -> int:
    if not 0 <= speaker_id < num_speakers:
        known = "0" if num_speakers == 1 else f"0..{num_speakers - 1}"
        raise InvalidRequest(f"unknown SPEAKER_ID {speaker_id}: voice '{voice}' has speakers {known}")
    return speaker_id


# The stage models' checks: the tensors tts_chunk's steps pass on, which a caller can also
# send to a stage directly. Each stage checks what it gets against the front door's bounds.
SCALE_TOLERANCE = 1e-5  # SCALES travel as float32: a SPEED of 0.25 may arrive as 0.2499999


def one_item(name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A stage input's one item: stage models take one item per request (batch axis 1),
    as tts_chunk sends them."""
    if array.ndim == 0 or array.shape[0] != 1:
        got = "no batch axis" if array.ndim == 0 else f"a batch of {array.shape[0]}"
        raise InvalidRequest(
            f"{name}: this model takes one item per request (batch dimension 1), got {got}; "
            "send each item as its own request"
        )
    item: npt.NDArray[Any] = array[0]
    return item


def check_phoneme_ids(row: npt.NDArray[Any], length: int, vocabulary: int, max_ids: int) -> npt.NDArray[Any]:
    """PHONEME_IDS' first ``length`` ids, each a symbol of the voice (0..vocabulary-1),
    at most ``max_ids`` of them (the voice's chunk budget)."""
    row = row.reshape(-1)
    if not 1 <= length <= row.size:
        raise InvalidRequest(f"PHONEME_LENGTH {length} is outside [1, {row.size}] (the ids sent)")
    if length > max_ids:
        raise InvalidRequest(f"PHONEME_LENGTH {length}: a chunk has at most {max_ids} phoneme ids")
    ids = row[:length]
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocabulary:
        bad = low if low < 0 else high
        raise InvalidRequest(f"PHONEME_IDS holds {bad}: the voice's ids are 0..{vocabulary - 1}")
    return ids


def check_scales(scales: npt.NDArray[Any], voice_length_scale: float) -> tuple[float, float]:
    """SCALES (noise_scale, length_scale, noise_w) within what SPEED and NOISE_* allow at
    the front door: length_scale is the voice's over SPEED. Returns (SPEED, NOISE_W)."""
    values = scales.reshape(-1)
    if values.size != 3 or not np.isfinite(values).all():
        raise InvalidRequest(
            f"SCALES must be 3 finite numbers (noise_scale, length_scale, noise_w), got {values}"
        )
    noise_scale, length_scale, noise_w = (float(v) for v in values)
    for name, value in (("noise_scale", noise_scale), ("noise_w", noise_w)):
        if not -SCALE_TOLERANCE <= value <= MAX_NOISE * (1 + SCALE_TOLERANCE):
            raise InvalidRequest(f"SCALES {name} {value:g} is outside [0, {MAX_NOISE:g}]")
    speed = voice_length_scale / length_scale if length_scale > 0 else 0.0
    if not MIN_SPEED * (1 - SCALE_TOLERANCE) <= speed <= MAX_SPEED * (1 + SCALE_TOLERANCE):
        low, high = voice_length_scale / MAX_SPEED, voice_length_scale / MIN_SPEED
        raise InvalidRequest(
            f"SCALES length_scale {length_scale:g} is outside [{low:g}, {high:g}] "
            f"(the voice's {voice_length_scale:g} over SPEED in [{MIN_SPEED:g}, {MAX_SPEED:g}])"
        )
    if math.isclose(speed, 1.0, rel_tol=SCALE_TOLERANCE):
        speed = 1.0  # what preprocess predicted frames at (limits.ChunkLimits.predicted_frames)
    return speed, min(max(noise_w, 0.0), MAX_NOISE)


def check_latent(latent: npt.NDArray[Any], channels: int | None, max_frames: int) -> npt.NDArray[Any]:
    """LATENT [channels, frames]: the vocoder's channels, 1..max_frames frames."""
    if latent.ndim != 2:
        raise InvalidRequest(f"LATENT must be [channels, frames] per item, got shape {list(latent.shape)}")
    if channels is not None and latent.shape[0] != channels:
        raise InvalidRequest(f"LATENT has {latent.shape[0]} channels; this vocoder takes {channels}")
    if not 1 <= latent.shape[1] <= max_frames:
        raise InvalidRequest(f"LATENT has {latent.shape[1]} frames; a chunk has 1 to {max_frames}")
    return latent


GraphDims = Sequence[int | str | None]  # a graph input's shape: a size, or a name / None where free


def check_graph_input(
    name: str, array: npt.NDArray[Any], dims: GraphDims, dtype: npt.DTypeLike, sizes: dict[str, int]
) -> None:
    """Input ``name`` of a model that is one graph, as its graph declares it: its type, its
    rank, each fixed size, and each named free size the same in every input that shares it
    (``sizes``: those seen so far in the request). Triton checks a client's request against
    the config, rendered from the same graph; this holds every caller to it before the run."""
    declared = "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"
    if array.dtype != np.dtype(dtype):
        raise InvalidRequest(f"{name} must be {np.dtype(dtype).name}, got {array.dtype.name}")
    if array.ndim != len(dims):
        raise InvalidRequest(f"{name} must have shape {declared}, got {list(array.shape)}")
    for axis, (want, got) in enumerate(zip(dims, array.shape, strict=True)):
        if isinstance(want, int) and want >= 0 and got != want:
            raise InvalidRequest(f"{name} must have shape {declared}, got {list(array.shape)} (axis {axis})")
        if isinstance(want, str) and sizes.setdefault(want, got) != got:
            raise InvalidRequest(
                f"{name} has {got} along {want} (axis {axis}), another input {sizes[want]}: they must agree"
            )


def check_max_dims(name: str, array: npt.NDArray[Any], bound: Sequence[int]) -> None:
    """Input ``name`` within ``bound``, dim by dim (a model's config states it where the
    graph leaves a dim free), before any work is done on it."""
    over = [axis for axis, (got, most) in enumerate(zip(array.shape, bound, strict=False)) if got > most]
    if over or array.ndim > len(bound):
        raise InvalidRequest(
            f"{name} has shape {list(array.shape)}; this model takes at most {list(bound)}"
            + (f" (axis {over[0]})" if over else "")
        )
