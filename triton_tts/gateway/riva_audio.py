"""Audio in and out of the Riva door: Riva's ``AudioEncoding`` values as encoders of the
voice's chunks at the rate a caller asks, and a zero-shot audio prompt decoded to mono.

Out (``SynthesizeSpeechRequest.encoding``; ``sample_rate_hz`` 0 is the voice's own rate):
- ``LINEAR_PCM``: raw 16-bit little-endian mono, no header, at any rate 8-48 kHz (soxr).
- ``MULAW``, ``ALAW``: G.711, one byte a sample (libsndfile), at any rate 8-48 kHz.
- ``OGGOPUS``: Ogg Opus (libsndfile) at an Opus rate (8, 12, 16, 24 or 48 kHz; 0: 24 kHz).
- ``FLAC``: the whole file with the last chunk (as the OpenAI door's flac: libsndfile
  cannot read back a FLAC stream of unknown length).
Riva's ``ENCODING_UNSPECIFIED`` is LINEAR_PCM, as Riva treats it.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile as sf
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from triton_tts.gateway.audio import Encoder, FlacEncoder, PcmEncoder, SndfileEncoder, _Resampler

MIN_RATE, MAX_RATE = 8_000, 48_000
OPUS_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)
OPUS_DEFAULT_RATE = 24_000
ENCODINGS = {  # what each encoding's name is, for messages
    AudioEncoding.ENCODING_UNSPECIFIED: "ENCODING_UNSPECIFIED",
    AudioEncoding.LINEAR_PCM: "LINEAR_PCM",
    AudioEncoding.FLAC: "FLAC",
    AudioEncoding.MULAW: "MULAW",
    AudioEncoding.OGGOPUS: "OGGOPUS",
    AudioEncoding.ALAW: "ALAW",
}
G711 = {AudioEncoding.MULAW: "ULAW", AudioEncoding.ALAW: "ALAW"}  # libsndfile's subtypes


def encoding_name(value: int) -> str:
    return ENCODINGS.get(value, f"encoding {value}")


def output_rate(encoding: int, asked: int, voice_rate: int) -> int:
    """The rate the answer is at (ValueError: one this encoding cannot take)."""
    if encoding == AudioEncoding.OGGOPUS:
        if asked == 0:
            return OPUS_DEFAULT_RATE
        if asked not in OPUS_RATES:
            rates = ", ".join(str(r) for r in OPUS_RATES)
            raise ValueError(f"sample_rate_hz {asked} cannot be Opus; Opus takes {rates} (0: 24000)")
        return asked
    if asked == 0:
        return voice_rate
    if not MIN_RATE <= asked <= MAX_RATE:
        raise ValueError(
            f"sample_rate_hz {asked} is outside [{MIN_RATE}, {MAX_RATE}] (0: the voice's own rate)"
        )
    return asked


class G711Encoder:
    """mu-law or A-law: a byte a sample, no state across chunks but the resampler's."""

    def __init__(self, encoding: int, voice_rate: int, rate: int) -> None:
        self.content_type = "audio/basic" if encoding == AudioEncoding.MULAW else "audio/x-alaw-basic"
        self.sample_rate = rate
        self._subtype = G711[encoding]
        self._resample = _Resampler(voice_rate, rate)

    def _bytes(self, audio: npt.NDArray[np.float32]) -> bytes:
        if not len(audio):
            return b""
        out = io.BytesIO()
        sf.write(out, np.clip(audio, -1.0, 1.0), self.sample_rate, format="RAW", subtype=self._subtype)
        return out.getvalue()

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        return self._bytes(self._resample(audio))

    def finish(self) -> bytes:
        return self._bytes(self._resample(np.zeros(0, np.float32), last=True))


class ResampledFlac(FlacEncoder):
    """FLAC at the asked rate: the whole file at the end."""

    def __init__(self, voice_rate: int, rate: int) -> None:
        super().__init__(rate)
        self._resample = _Resampler(voice_rate, rate)

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        return super().encode(self._resample(audio))

    def finish(self) -> bytes:
        super().encode(self._resample(np.zeros(0, np.float32), last=True))
        return super().finish()


class OggOpus(SndfileEncoder):
    """Ogg Opus at an Opus rate other than the OpenAI door's 24 kHz."""

    def __init__(self, voice_rate: int, rate: int) -> None:
        super().__init__("opus", voice_rate)
        if rate != self.sample_rate:  # made again at the asked rate (nothing written yet)
            self._file.close()
            self._sink.take()
            self.sample_rate = rate
            self._resample = _Resampler(voice_rate, rate)
            self._file = sf.SoundFile(
                self._sink, "w", samplerate=rate, channels=1, format="OGG", subtype="OPUS"
            )


def encoder(encoding: int, voice_rate: int, rate: int) -> Encoder:
    """An encoder of ``encoding`` at ``rate`` (from :func:`output_rate`); ValueError for an
    encoding this door does not write."""
    if encoding in (AudioEncoding.LINEAR_PCM, AudioEncoding.ENCODING_UNSPECIFIED):
        return PcmEncoder(voice_rate, rate)
    if encoding in G711:
        return G711Encoder(encoding, voice_rate, rate)
    if encoding == AudioEncoding.FLAC:
        return ResampledFlac(voice_rate, rate)
    if encoding == AudioEncoding.OGGOPUS:
        return OggOpus(voice_rate, rate)
    known = ", ".join(
        name for value, name in ENCODINGS.items() if value != AudioEncoding.ENCODING_UNSPECIFIED
    )
    raise ValueError(
        f"{encoding_name(encoding)} is not an audio encoding this server writes; it writes {known}"
    )


def decode_prompt(data: bytes, encoding: int, rate: int) -> tuple[npt.NDArray[np.float32], int]:
    """A zero-shot audio prompt -> mono float32 and its rate (ValueError naming the fault).

    A file (WAV, FLAC, Ogg, MP3: anything libsndfile reads, whatever ``encoding`` says, as
    Riva's clients send a file's bytes) carries its own rate; raw LINEAR_PCM (16-bit
    little-endian), MULAW or ALAW samples need ``rate``."""
    if not data:
        raise ValueError("zero_shot_data.audio_prompt is empty")
    try:
        audio, file_rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        return _mono(audio), int(file_rate)
    except (sf.LibsndfileError, RuntimeError, TypeError):
        pass  # not a file: raw samples, below
    raw: dict[int, dict[str, Any]] = {
        AudioEncoding.LINEAR_PCM: {"subtype": "PCM_16", "endian": "LITTLE"},
        AudioEncoding.MULAW: {"subtype": "ULAW"},
        AudioEncoding.ALAW: {"subtype": "ALAW"},
    }
    if encoding not in raw:
        raise ValueError(
            f"zero_shot_data.audio_prompt is not an audio file libsndfile reads (WAV, FLAC, Ogg, MP3), "
            f"and {encoding_name(encoding)} names no raw sample format: send a file, or raw "
            "LINEAR_PCM, MULAW or ALAW with its sample_rate_hz"
        )
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(
            f"zero_shot_data.sample_rate_hz {rate} is outside [{MIN_RATE}, {MAX_RATE}]: "
            "raw samples need their rate"
        )
    if encoding == AudioEncoding.LINEAR_PCM and len(data) % 2:
        raise ValueError("zero_shot_data.audio_prompt has an odd number of bytes: not 16-bit samples")
    audio, _ = sf.read(
        io.BytesIO(data),
        dtype="float32",
        always_2d=True,
        samplerate=rate,
        channels=1,
        format="RAW",
        **raw[encoding],
    )
    return _mono(audio), rate


def _mono(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    if audio.shape[0] == 0:
        raise ValueError("zero_shot_data.audio_prompt holds no samples")
    return np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32)
