"""Audio as OpenAI's ``response_format`` names it, encoded chunk by chunk as it arrives.

Every encoder takes float32 mono chunks and returns the bytes that can leave at once, so
the first bytes of a response follow the first chunk. libsndfile (soundfile) encodes MP3,
Ogg/Opus and FLAC; WAV and PCM are plain 16-bit samples.

- ``mp3``: MPEG Layer III at the voice's rate, constant bitrate (80 kbit/s at 22.05 and
  24 kHz). libsndfile starts the file with a placeholder for LAME's Xing/Info frame and
  writes the frame when it closes; a streamed response cannot take that rewrite, so the
  placeholder is left out. Without it, readers take the length from the bitrate, which
  is exact at a constant bitrate (libsndfile's own reader included).
- ``opus``: Ogg Opus at 24 kHz (Opus takes 8, 12, 16, 24 or 48 kHz; voices are resampled).
- ``flac``: the whole file at the end. FLAC's header carries the length, and libsndfile
  cannot read a FLAC stream of unknown length back, so this one format is not streamed.
- ``wav``: 16-bit PCM with a header of unknown length (0xFFFFFFFF: read to the end).
- ``pcm``: raw 16-bit little-endian mono at 24 kHz, as OpenAI documents it (resampled;
  a client that plays it at 24 kHz hears the right pitch whatever the voice's rate).
"""

from __future__ import annotations

import io
import struct
from typing import Protocol

import numpy as np
import numpy.typing as npt
import soundfile as sf
import soxr

# OpenAI's formats; the value is the Content-Type.
CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
NOT_ENCODABLE: dict[str, str] = {
    "aac": "no well-kept encoder library here writes AAC (libsndfile does not)",
}
PCM_RATE = 24_000  # OpenAI's pcm: 24 kHz, 16-bit signed little-endian, mono
OPUS_RATE = 24_000
STREAMED = ("mp3", "opus", "wav", "pcm")  # flac comes whole, at the end


class Encoder(Protocol):
    content_type: str
    sample_rate: int  # of the encoded audio

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        """One chunk in; the bytes ready to send (possibly none)."""
        ...

    def finish(self) -> bytes:
        """The rest, after the last chunk."""
        ...


def to_pcm16(audio: npt.NDArray[np.float32]) -> bytes:
    """float samples in [-1, 1] -> 16-bit little-endian (clipped, rounded)."""
    return bytes(np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes())


class _Resampler:
    """A resampling stream (soxr keeps its state across chunks: no seams); none if equal."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self._stream = None if rate_in == rate_out else soxr.ResampleStream(rate_in, rate_out, 1, "float32")

    def __call__(self, audio: npt.NDArray[np.float32], last: bool = False) -> npt.NDArray[np.float32]:
        if self._stream is None:
            return audio
        return np.asarray(self._stream.resample_chunk(audio.astype(np.float32), last=last), np.float32)


class PcmEncoder:
    content_type = CONTENT_TYPES["pcm"]

    def __init__(self, voice_rate: int, rate: int = PCM_RATE) -> None:
        self.sample_rate = rate
        self._resample = _Resampler(voice_rate, rate)

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        return to_pcm16(self._resample(audio))

    def finish(self) -> bytes:
        return to_pcm16(self._resample(np.zeros(0, np.float32), last=True))


class WavEncoder:
    content_type = CONTENT_TYPES["wav"]
    UNKNOWN = 0xFFFFFFFF  # RIFF and data sizes of a stream: readers read to the end

    def __init__(self, voice_rate: int) -> None:
        self.sample_rate = voice_rate
        self._header: bytes | None = self.header(voice_rate)

    @classmethod
    def header(cls, rate: int, data_bytes: int | None = None) -> bytes:
        """A 44-byte RIFF/WAVE header of 16-bit mono PCM (``data_bytes`` None: unknown)."""
        data = cls.UNKNOWN if data_bytes is None else data_bytes
        riff = cls.UNKNOWN if data_bytes is None else 36 + data_bytes
        fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, 16 bits
        return (
            b"RIFF"
            + struct.pack("<I", riff)
            + b"WAVE"
            + b"fmt "
            + struct.pack("<I", 16)
            + fmt
            + (b"data" + struct.pack("<I", data))
        )

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        head, self._header = self._header or b"", None
        return head + to_pcm16(audio)

    def finish(self) -> bytes:
        head, self._header = self._header or b"", None
        return head


class _Sink(io.RawIOBase):
    """A write-only file for libsndfile that hands out what it appends. Bytes once handed
    out are gone: a later write over them (a header rewritten at close) is dropped."""

    def __init__(self) -> None:
        self._data = bytearray()  # from self._sent on: not handed out yet
        self._sent = 0  # bytes handed out
        self._pos = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = bytes(b)
        start, end = self._pos, self._pos + len(chunk)
        if end > self._sent:
            keep_from = max(start, self._sent)
            offset = keep_from - self._sent
            tail = len(self._data) - offset
            if tail < 0:
                self._data.extend(b"\0" * -tail)
            self._data[offset : offset + end - keep_from] = chunk[keep_from - start :]
        self._pos = end
        return len(chunk)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        size = self._sent + len(self._data)
        self._pos = (
            offset
            if whence == io.SEEK_SET
            else (self._pos + offset if whence == io.SEEK_CUR else size + offset)
        )
        return self._pos

    def tell(self) -> int:
        return self._pos

    def take(self) -> bytes:
        out = bytes(self._data)
        self._sent += len(out)
        self._data.clear()
        return out


class SndfileEncoder:
    """MP3 or Ogg Opus through libsndfile, written to a :class:`_Sink` chunk by chunk."""

    def __init__(self, response_format: str, voice_rate: int) -> None:
        self.content_type = CONTENT_TYPES[response_format]
        self.sample_rate = OPUS_RATE if response_format == "opus" else voice_rate
        self._resample = _Resampler(voice_rate, self.sample_rate)
        self._sink = _Sink()
        container, subtype = ("MP3", "MPEG_LAYER_III") if response_format == "mp3" else ("OGG", "OPUS")
        # MP3 at a constant bitrate: compression 0.5 is 80 kbit/s at 22.05/24 kHz (MPEG-2)
        mp3 = {"bitrate_mode": "CONSTANT", "compression_level": 0.5} if response_format == "mp3" else {}
        self._file = sf.SoundFile(
            self._sink, "w", samplerate=self.sample_rate, channels=1, format=container, subtype=subtype, **mp3
        )
        # MP3 only: bytes held until the first frame is whole, to drop it if it is a tag
        self._head: bytearray | None = bytearray() if response_format == "mp3" else None

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        self._file.write(self._resample(audio))
        return self._out(self._sink.take())

    def finish(self) -> bytes:
        rest = self._resample(np.zeros(0, np.float32), last=True)
        if len(rest):
            self._file.write(rest)
        self._file.close()
        out = self._out(self._sink.take())
        if self._head is not None:  # shorter than one frame: nothing to drop
            out, self._head = bytes(self._head) + out, None
        return out

    def _out(self, data: bytes) -> bytes:
        if self._head is None:
            return data
        self._head.extend(data)
        length = mp3_frame_length(bytes(self._head[:4]))
        if length is None or len(self._head) < length:
            return b"" if length is not None or len(self._head) < 4 else self._release(0)
        return self._release(length if is_tag_frame(bytes(self._head[:length])) else 0)

    def _release(self, skip: int) -> bytes:
        assert self._head is not None
        out, self._head = bytes(self._head[skip:]), None
        return out


class FlacEncoder:
    """The whole file at the end (see the module's note)."""

    content_type = CONTENT_TYPES["flac"]

    def __init__(self, voice_rate: int) -> None:
        self.sample_rate = voice_rate
        self._chunks: list[npt.NDArray[np.float32]] = []

    def encode(self, audio: npt.NDArray[np.float32]) -> bytes:
        self._chunks.append(audio)
        return b""

    def finish(self) -> bytes:
        out = io.BytesIO()
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        sf.write(out, audio, self.sample_rate, format="FLAC", subtype="PCM_16")
        return out.getvalue()


def encoder(response_format: str, voice_rate: int) -> Encoder:
    if response_format == "pcm":
        return PcmEncoder(voice_rate)
    if response_format == "wav":
        return WavEncoder(voice_rate)
    if response_format == "flac":
        return FlacEncoder(voice_rate)
    if response_format in ("mp3", "opus"):
        return SndfileEncoder(response_format, voice_rate)
    raise ValueError(f"no encoder for {response_format!r}")


# MPEG audio Layer III: kbit/s by bitrate index, for MPEG-1 and for MPEG-2/2.5.
_L3_KBPS = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}  # by version bits


def mp3_frame_length(header: bytes) -> int | None:
    """Bytes in the Layer III frame that starts with ``header`` (4 bytes); None if it is not one."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 3, (header[1] >> 1) & 3
    bitrate_index, rate_index, padding = header[2] >> 4, (header[2] >> 2) & 3, (header[2] >> 1) & 1
    if version == 1 or layer != 1 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    kbps = _L3_KBPS[1 if version == 3 else 2][bitrate_index]
    rate = _RATES[version][rate_index]
    per_frame = 144 if version == 3 else 72  # samples per frame / 8
    return per_frame * kbps * 1000 // rate + padding


def is_tag_frame(frame: bytes) -> bool:
    """LAME's Xing/Info frame (silence plus counts), or libsndfile's all-zero placeholder."""
    return not any(frame[4:]) or b"Xing" in frame[:64] or b"Info" in frame[:64]
