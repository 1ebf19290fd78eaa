"""``POST /v1/audio/speech/captioned``: speech with every word's start and end.

The body is the speech body (``model``, ``input``, ``voice``, ``response_format``, ...)
and ``stream``. Whole (``stream`` false), one JSON object::

    {"audio": "<base64 of the file>", "format": "mp3", "sample_rate": 22050,
     "voice": "joe", "words": [{"word": "Hello", "start": 0.07, "end": 0.41}, ...]}

Streamed (``stream`` true), JSON lines (application/x-ndjson) as the audio is made: one
per chunk, ``{"audio": "<base64>", "words": [...]}`` with the words that chunk
completes (times from the start of the whole audio; the audio fields joined are the
file), then ``{"done": true, ...}`` with the totals (chunks, word_count,
audio_seconds). A failure after the first line is a last line ``{"error": {...}}``
(OpenAI's error object) instead of ``done``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from typing import Any

from triton_tts.client import AudioChunk, TTSError, WordTime
from triton_tts.gateway import audio
from triton_tts.gateway.errors import from_tts_error
from triton_tts.gateway.metrics import Synthesis
from triton_tts.gateway.settings import GatewaySettings

NDJSON = "application/x-ndjson"


def word_list(words: Iterable[WordTime]) -> list[dict[str, Any]]:
    """Words as the answers carry them: times in seconds, to the millisecond."""
    return [{"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in words]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


async def _each(
    first: AudioChunk, rest: AsyncGenerator[AudioChunk, None]
) -> AsyncGenerator[AudioChunk, None]:
    """The synthesis's chunks, the first already received; the rest closed however it ends."""
    async with aclosing(rest):
        chunk: AudioChunk | None = first
        while chunk is not None:
            yield chunk
            chunk = await anext(rest, None)


async def whole(
    first: AudioChunk,
    rest: AsyncGenerator[AudioChunk, None],
    encoder: audio.Encoder,
    synthesis: Synthesis,
    settings: GatewaySettings,
) -> dict[str, Any]:
    """All the audio and words of a synthesis, as one JSON object (without voice)."""
    pieces: list[bytes] = []
    words: list[WordTime] = []
    seconds = 0.0
    async with aclosing(_each(first, rest)) as chunks:
        try:
            async for chunk in chunks:
                pieces.append(encoder.encode(chunk.audio))
                words += chunk.words
                seconds += len(chunk.audio) / chunk.sample_rate
        except TTSError as err:
            raise from_tts_error(err, settings) from None
    pieces.append(encoder.finish())
    synthesis.audio_sent(seconds)
    return {
        "audio": _b64(b"".join(pieces)),
        "format": synthesis.format,
        "sample_rate": encoder.sample_rate,
        "audio_seconds": round(seconds, 3),
        "words": word_list(words),
    }


async def lines(
    first: AudioChunk,
    rest: AsyncGenerator[AudioChunk, None],
    encoder: audio.Encoder,
    synthesis: Synthesis,
    settings: GatewaySettings,
) -> AsyncGenerator[bytes, None]:
    """A synthesis as JSON lines: a line per chunk, then ``done`` (or ``error``)."""

    def line(value: dict[str, Any]) -> bytes:
        return json.dumps(value, ensure_ascii=False).encode("utf-8") + b"\n"

    chunks, seconds, words = 0, 0.0, 0
    async with aclosing(_each(first, rest)) as each:
        try:
            async for chunk in each:
                data = encoder.encode(chunk.audio)
                chunk_seconds = len(chunk.audio) / chunk.sample_rate
                chunks, seconds, words = chunks + 1, seconds + chunk_seconds, words + len(chunk.words)
                synthesis.audio_sent(chunk_seconds)
                yield line({"audio": _b64(data), "words": word_list(chunk.words)})
        except TTSError as err:
            error = from_tts_error(err, settings)
            synthesis.error_code = error.code
            yield line(error.body())
            return
    tail = encoder.finish()
    if tail:
        yield line({"audio": _b64(tail), "words": []})
    yield line(
        {
            "done": True,
            "chunks": chunks,
            "word_count": words,
            "audio_seconds": round(seconds, 3),
            "sample_rate": encoder.sample_rate,
            "format": synthesis.format,
        }
    )
