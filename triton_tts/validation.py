"""Per-request input checks shared by the Triton models and the client.

Every check raises :class:`InvalidRequest` with a message that names the problem; the
Triton models turn it into an INVALID_ARG error for that request alone.
"""

from __future__ import annotations

import math
import unicodedata

MAX_TEXT_CHARS = 1000  # per chunk through the `tts_chunk` pipeline
MAX_LONG_TEXT_CHARS = 50_000  # per `tts` / `tts_stream` request, chunked internally
MIN_SPEED, MAX_SPEED = 0.25, 4.0
MAX_NOISE = 2.0


NOTHING_TO_SAY = "TEXT has nothing the voice can pronounce"


class InvalidRequest(ValueError):
    """A request the server refuses; the message is sent back to the client."""


def decode_text(raw: bytes | str, limit: int = MAX_TEXT_CHARS) -> str:
    """Decode a TEXT element and make sure there is something to speak."""
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
        if ch in "\n\r\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co")
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


def check_speaker(speaker_id: int, num_speakers: int, voice: str) -> int:
    if not 0 <= speaker_id < num_speakers:
        known = "0" if num_speakers == 1 else f"0..{num_speakers - 1}"
        raise InvalidRequest(f"unknown SPEAKER_ID {speaker_id}: voice '{voice}' has speakers {known}")
    return speaker_id
