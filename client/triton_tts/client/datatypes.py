"""What a caller passes and gets back: the ``tts`` model's options and the audio (the
voices: triton_tts.client.voices)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile as sf


@dataclass(frozen=True, eq=False)  # eq=False: a clip (an array) has no truth value to compare by
class SynthesisOptions:
    """Optional inputs of the ``tts`` model; None leaves the input out (server default)."""

    speed: float | None = None
    speaker_id: int | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    voice: str | None = None
    # Who asks (a request parameter, not an input): the server's admission holds each
    # named caller to its share (the gateway names one per API key).
    caller: str | None = None
    # True: the answer also times each word (SynthesisResult.words, AudioChunk.words);
    # voices without word timestamps refuse it (VoiceInfo.timestamps says which have them).
    timestamps: bool = False
    # "text", "ssml" or "auto" (the server's default: SSML when the text starts with <speak)
    text_format: str | None = None
    # How long the caller waits to be admitted (the max_wait_ms request parameter): the
    # server refuses at once what it predicts would wait longer. None: a text's whole-call
    # timeout (sent as Triton's request timeout), a stream's the server's default wait.
    max_wait_s: float | None = None
    # This request's pronunciations, {"word or words": "phonemes"} in the voice's own
    # symbols (IPA; pinyin for Mandarin voices): the LEXICON input, applied over the
    # voice's lexicon for this request only (docs/api.md, "Lexicons").
    lexicon: Mapping[str, str] | None = None
    # A clip to clone (XTTS voices): float32 mono samples, and their rate in Hz; the
    # REFERENCE_AUDIO and REFERENCE_SAMPLE_RATE inputs. Other voices refuse a clip.
    reference_audio: npt.NDArray[np.float32] | None = None
    reference_sample_rate: int | None = None
    # The language an XTTS voice speaks the text in (its codes: "en", "de", "zh-cn", ...;
    # None: the voice's first); the LANGUAGE input. Other voices speak their own language.
    language: str | None = None
    # Style voices (Kokoro): speakers with weights, "af_bella:0.7+af_sky:0.3", blended per
    # style row; the VOICE_MIX input. Other voices refuse it.
    voice_mix: str | None = None

    @property
    def parameters(self) -> dict[str, str | int] | None:
        given: dict[str, str | int] = {}
        if self.caller:
            given["caller"] = self.caller
        if self.max_wait_s is not None:
            given["max_wait_ms"] = max(1, round(self.max_wait_s * 1000))
        return given or None


@dataclass(frozen=True)
class WordTime:
    """A word as written and when it is said: seconds from the start of the audio (a
    stream's: from the start of the stream)."""

    word: str
    start: float
    end: float


@dataclass(frozen=True)
class SynthesisResult:
    audio: npt.NDArray[np.float32]  # float32 samples in [-1, 1], mono
    sample_rate: int
    words: tuple[WordTime, ...] = ()  # with timestamps=True: every word of the text

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    def write_wav(self, path: str | Path, subtype: str = "PCM_16") -> Path:
        """Write a WAV that any player opens: 16-bit PCM by default, 'FLOAT' for float32."""
        sf.write(str(path), self.audio, self.sample_rate, subtype=subtype, format="WAV")
        return Path(path)


@dataclass(frozen=True)
class AudioChunk:
    index: int
    audio: npt.NDArray[np.float32]
    sample_rate: int
    is_last: bool
    words: tuple[WordTime, ...] = ()  # with timestamps=True: the words this chunk completes
