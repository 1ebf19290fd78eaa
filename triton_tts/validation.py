"""Per-request input checks: each decision about what a request may hold, made here once.

Every check raises :class:`InvalidRequest` with a message that names the problem; the
Triton models turn it into an INVALID_ARG error for that request alone. Free of Triton
imports (:mod:`triton_tts.request_options` reads the tensors and calls these).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

MAX_TEXT_CHARS = 1000  # per chunk through the `tts_chunk` pipeline
MAX_LONG_TEXT_CHARS = 50_000  # per `tts` / `tts_stream` request, chunked internally
MIN_SPEED, MAX_SPEED = 0.25, 4.0
MAX_NOISE = 2.0


class InvalidRequest(ValueError):
    """A request the server refuses; the message is sent back to the client."""


class NothingToSay(InvalidRequest):
    """TEXT holds nothing the voice can pronounce (punctuation, symbols, or only what the
    voice has no symbols for). A refusal like any other for the client; the long-text
    models tell it apart by type, never by its words."""

    MESSAGE = "TEXT has nothing the voice can pronounce"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)


def pronounceable(text: str) -> bool:
    """False for text without a letter or digit: it has nothing to say for any voice (the
    phonemizer skips espeak for it). True is not a promise: preprocess, which sees the
    voice's symbols, has the last word (:class:`NothingToSay`)."""
    return any(ch.isalnum() for ch in text)


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


def check_voice(name: str, served: Sequence[str]) -> str:
    """The voice a request's VOICE names ("" for the default, ``served[0]``)."""
    if not name:
        return served[0]
    if name not in served:
        listed = ", ".join(f"'{v}'" for v in served)
        raise InvalidRequest(f"unknown VOICE '{name}': this model serves {listed}")
    return name


def check_speaker(speaker_id: int, num_speakers: int, voice: str) -> int:
    if not 0 <= speaker_id < num_speakers:
        known = "0" if num_speakers == 1 else f"0..{num_speakers - 1}"
        raise InvalidRequest(f"unknown SPEAKER_ID {speaker_id}: voice '{voice}' has speakers {known}")
    return speaker_id
