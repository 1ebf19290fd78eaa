"""Long text -> chunks the voice can say one at a time, and joining their audio back.

Both the non-streaming ``tts`` model and the streaming ``tts_stream`` model use this, so
the two give the same audio for the same text (apart from how it is delivered).

Chunking: normalised text is split at sentence ends, then packed into chunks of up to
``max_chars``. The first chunk is kept short (the first clause, up to ``first_chars``) so
the first audio arrives fast; over-long sentences are split at clause punctuation, then at
spaces. Joining: each chunk gets a short raised-cosine fade in and out, so no click is
heard where two waveforms meet; the natural pause VITS puts at a sentence end remains.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FIRST_CHUNK_CHARS = 160  # the first sentence, or its first clauses if longer
CHUNK_CHARS = 400
FADE_MS = 8.0

_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:—–])\s+")


MIN_CHUNK_CHARS = 16  # scaled plans never pack below this


@dataclass(frozen=True)
class ChunkPlan:
    first_chars: int = FIRST_CHUNK_CHARS
    max_chars: int = CHUNK_CHARS

    def scaled(self, factor: float) -> ChunkPlan:
        """The same plan for chunks ``factor`` times as long (slow speech: shorter chunks)."""
        if factor >= 1.0:
            return self
        return ChunkPlan(
            max(MIN_CHUNK_CHARS, int(self.first_chars * factor)),
            max(MIN_CHUNK_CHARS, int(self.max_chars * factor)),
        )


def halves(text: str) -> list[str]:
    """Two (or a few) pieces of about half the text, cut where split_text would cut; a
    single word is cut in the middle. [] when there is nothing left to cut."""
    if len(text) < 2:
        return []
    half = (len(text) + 1) // 2
    pieces = split_text(text, ChunkPlan(half, half))
    if len(pieces) > 1:
        return pieces
    return [text[:half], text[half:]]


def _split_long(piece: str, limit: int) -> Iterator[str]:
    """A sentence over ``limit``: clauses first, then words; never mid-word."""
    if len(piece) <= limit:
        yield piece
        return
    current = ""
    for clause in _CLAUSE_END.split(piece):
        for word in clause.split(" ") if len(clause) > limit else [clause]:
            candidate = f"{current} {word}" if current else word
            if len(candidate) <= limit or not current:
                current = candidate
            else:
                yield current
                current = word
    if current:
        yield current


def split_text(text: str, plan: ChunkPlan = ChunkPlan()) -> list[str]:
    """Chunks in reading order; joined with spaces they give back the text's words."""
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    pieces = [p for sentence in sentences for p in _split_long(sentence, plan.max_chars)]
    if not pieces:
        return []
    # The first chunk alone: the first sentence, or its first clause(s) if that is long.
    head = list(_split_long(pieces[0], plan.first_chars))
    chunks = [head[0]]
    rest = " ".join(head[1:])
    queue = ([rest] if rest else []) + pieces[1:]
    current = ""
    for piece in queue:
        candidate = f"{current} {piece}" if current else piece
        if current and len(candidate) > plan.max_chars:
            chunks.append(current)
            current = piece
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def fade(
    audio: npt.NDArray[np.float32],
    sample_rate: int,
    fade_in: bool = True,
    fade_out: bool = True,
    fade_ms: float = FADE_MS,
) -> npt.NDArray[np.float32]:
    """Raised-cosine fades: a faded edge starts or ends at exactly zero."""
    n = min(int(sample_rate * fade_ms / 1000), len(audio) // 2)
    out = audio.astype(np.float32, copy=True)
    if n == 0:
        return out
    ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, dtype=np.float32))).astype(np.float32)
    if fade_in:
        out[:n] *= ramp
    if fade_out:
        out[-n:] *= ramp[::-1]
    return out


def join_edges(
    audio: npt.NDArray[np.float32], sample_rate: int, index: int, count: int
) -> npt.NDArray[np.float32]:
    """Fade only where two chunks meet: a one-chunk text keeps the pipeline's audio as is."""
    return fade(audio, sample_rate, fade_in=index > 0, fade_out=index < count - 1)
