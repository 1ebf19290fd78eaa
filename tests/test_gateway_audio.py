"""The gateway's encoders on their own: chunks in, bytes out as they can leave, and files
that libsndfile reads back at the right length and pitch."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from triton_tts.gateway import audio

RATE = 22050
TONE_HZ = 440.0


def tone(seconds: float, rate: int = RATE) -> npt.NDArray[np.float32]:
    t = np.arange(int(seconds * rate)) / rate
    return np.asarray(0.4 * np.sin(2 * np.pi * TONE_HZ * t), np.float32)


def encode(response_format: str, chunks: list[npt.NDArray[np.float32]]) -> tuple[list[bytes], audio.Encoder]:
    encoder = audio.encoder(response_format, RATE)
    return [encoder.encode(c) for c in chunks] + [encoder.finish()], encoder


def decode(data: bytes, response_format: str, rate: int) -> npt.NDArray[np.float32]:
    if response_format == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    samples, read_rate = sf.read(io.BytesIO(data), dtype="float32")
    assert read_rate == rate
    return np.asarray(samples, np.float32)


def peak_hz(samples: npt.NDArray[np.float32], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


# Uneven chunks, as a stream's are: a short first one, then longer ones.
CHUNKS = [tone(0.6), tone(1.1), tone(2.3)]
SECONDS = sum(len(c) for c in CHUNKS) / RATE


@pytest.mark.parametrize("response_format", list(audio.CONTENT_TYPES))
def test_each_format_reads_back_at_its_length_and_pitch(response_format: str) -> None:
    parts, encoder = encode(response_format, CHUNKS)
    heard = decode(b"".join(parts), response_format, encoder.sample_rate)
    # MP3 and Opus add codec delay and padding (tens of milliseconds); the rest is exact
    slack = 0.1 if response_format in ("mp3", "opus") else 1 / encoder.sample_rate
    assert abs(len(heard) / encoder.sample_rate - SECONDS) <= slack, (len(heard), encoder.sample_rate)
    # the pitch is the tone's at the rate the encoder says: no resampling or rate mix-up
    assert peak_hz(heard, encoder.sample_rate) == pytest.approx(TONE_HZ, abs=2.0)


def test_openais_pcm_is_24_khz_whatever_the_voice() -> None:
    assert audio.encoder("pcm", 22050).sample_rate == audio.encoder("pcm", 16000).sample_rate == 24_000


@pytest.mark.parametrize("response_format", audio.STREAMED)
def test_streamed_formats_send_bytes_after_the_first_chunk(response_format: str) -> None:
    parts, _ = encode(response_format, CHUNKS)
    assert parts[0], "nothing left after the first chunk"
    assert all(parts[1:-1]) or response_format == "opus"  # Ogg pages fill at their own pace


def test_flac_comes_whole_at_the_end() -> None:
    parts, _ = encode("flac", CHUNKS)
    assert not any(parts[:-1]) and parts[-1][:4] == b"fLaC"
    with sf.SoundFile(io.BytesIO(parts[-1])) as read:
        assert read.frames == sum(len(c) for c in CHUNKS)  # its header carries the length


def test_the_streamed_mp3_starts_with_audio_not_a_header_to_be_rewritten() -> None:
    parts, _ = encode("mp3", CHUNKS)
    data = b"".join(parts)
    length = audio.mp3_frame_length(data[:4])
    assert length is not None and not audio.is_tag_frame(data[:length])
    # what libsndfile itself writes to a seekable file starts with the tag frame instead
    whole = io.BytesIO()
    with sf.SoundFile(whole, "w", RATE, 1, format="MP3", subtype="MPEG_LAYER_III") as written:
        written.write(np.concatenate(CHUNKS))
    first = whole.getvalue()
    assert audio.is_tag_frame(first[: audio.mp3_frame_length(first[:4]) or 0])


def test_the_streamed_wav_header_says_read_to_the_end() -> None:
    parts, _ = encode("wav", CHUNKS)
    assert parts[0][:4] == b"RIFF" and parts[0][40:44] == b"\xff\xff\xff\xff"
    assert audio.WavEncoder.header(RATE, 100)[40:44] == (100).to_bytes(4, "little")


@pytest.mark.parametrize(
    ("header", "length"),
    [
        (bytes([0xFF, 0xF3, 0x80, 0xC4]), 208),  # MPEG-2, 64 kbit/s, 22.05 kHz
        (bytes([0xFF, 0xF3, 0x90, 0xC4]), 261),  # MPEG-2, 80 kbit/s, 22.05 kHz
        (bytes([0xFF, 0xFB, 0x90, 0x64]), 417),  # MPEG-1, 128 kbit/s, 44.1 kHz
        (bytes([0xFF, 0xFB, 0x92, 0x64]), 418),  # the same, padded
        (bytes([0xFF, 0xFD, 0x90, 0x64]), None),  # layer II
        (b"ID3\x04", None),
        (bytes([0xFF, 0xFB]), None),
    ],
)
def test_mp3_frame_lengths(header: bytes, length: int | None) -> None:
    assert audio.mp3_frame_length(header) == length


def test_refused_formats_say_why() -> None:
    assert "aac" in audio.NOT_ENCODABLE and "aac" not in audio.CONTENT_TYPES
    with pytest.raises(ValueError, match="aac"):
        audio.encoder("aac", RATE)
