"""Captions from timed words: WebVTT and SubRip (SRT) files, cue by cue.

Words are grouped into cues the way subtitlers set them: a cue holds at most
``max_chars`` characters (42, the common guideline for one subtitle line) and
``max_seconds`` of speech, and a new one starts after a sentence's end or a pause of
``pause_s``. A cue runs from its first word's start to its last word's end::

    result = client.synthesize(text, timestamps=True)
    Path("speech.vtt").write_text(webvtt(result.words))
    Path("speech.srt").write_text(srt(cues(result.words, max_chars=32)))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from triton_tts.client.datatypes import WordTime

MAX_CHARS = 42
MAX_SECONDS = 7.0
PAUSE_S = 0.6
SENTENCE_ENDS = (".", "!", "?", "…", "。", "！", "？")
CLOSERS = "\"')]}»”’"  # after a sentence's end: 'He said "no."' ends the sentence too
FORMATS = ("vtt", "srt")


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str


def _ends_sentence(word: str) -> bool:
    return word.rstrip(CLOSERS).endswith(SENTENCE_ENDS)


def cues(
    words: Iterable[WordTime],
    max_chars: int = MAX_CHARS,
    max_seconds: float = MAX_SECONDS,
    pause_s: float = PAUSE_S,
) -> list[Cue]:
    """The words (in order of their start) set as cues. A word longer than ``max_chars``
    is a cue of its own; cues never overlap."""
    if max_chars < 1 or max_seconds <= 0 or pause_s < 0:
        raise ValueError("max_chars must be at least 1, max_seconds above 0 and pause_s at least 0")
    out: list[Cue] = []
    held: list[WordTime] = []

    def close() -> None:
        if held:
            start = max(held[0].start, out[-1].end if out else 0.0)
            out.append(Cue(start, max(start, held[-1].end), " ".join(w.word for w in held)))
            held.clear()

    for word in sorted(words, key=lambda w: w.start):
        if held:
            last = held[-1]
            too_long = len(" ".join(w.word for w in held)) + 1 + len(word.word) > max_chars
            if (
                too_long
                or word.end - held[0].start > max_seconds
                or word.start - last.end >= pause_s
                or _ends_sentence(last.word)
            ):
                close()
        held.append(word)
    close()
    return out


def _clock(seconds: float, separator: str) -> str:
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def _vtt_text(text: str) -> str:
    # WebVTT cue text: & and < start markup, and "-->" may not appear (> escaped too).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webvtt(words: Iterable[WordTime] | Sequence[Cue]) -> str:
    """A WebVTT file (text/vtt) of the words' cues (or of cues already set)."""
    lines = ["WEBVTT", ""]
    for n, cue in enumerate(_as_cues(words), 1):
        lines += [str(n), f"{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}", _vtt_text(cue.text), ""]
    return "\n".join(lines)


def srt(words: Iterable[WordTime] | Sequence[Cue]) -> str:
    """A SubRip (.srt) file of the words' cues (or of cues already set)."""
    lines: list[str] = []
    for n, cue in enumerate(_as_cues(words), 1):
        lines += [str(n), f"{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}", cue.text, ""]
    return "\n".join(lines)


def captions(words: Iterable[WordTime] | Sequence[Cue], fmt: str) -> str:
    """``fmt`` "vtt" or "srt" (other grouping: pass ``cues(words, ...)``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown caption format {fmt!r}: use one of {', '.join(FORMATS)}")
    return webvtt(words) if fmt == "vtt" else srt(words)


def _as_cues(words: Iterable[WordTime] | Sequence[Cue]) -> list[Cue]:
    items = list(words)
    if items and all(isinstance(item, Cue) for item in items):
        return [item for item in items if isinstance(item, Cue)]
    timed = [item for item in items if isinstance(item, WordTime)]
    if len(timed) != len(items):
        raise TypeError("expected WordTime words or Cue cues, not a mix")
    return cues(timed)
