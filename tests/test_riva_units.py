"""The Riva door's pure parts (triton_tts.gateway.riva, riva_audio): errors as gRPC
statuses, Riva's custom dictionary, language tags, and the encoders' rates and bytes."""

from __future__ import annotations

import io

import grpc
import numpy as np
import pytest
import soundfile as sf
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from triton_tts.gateway import riva_audio
from triton_tts.gateway.errors import ApiError, invalid
from triton_tts.gateway.riva import language_tag, parse_dictionary, status_of


def test_a_busy_refusal_is_resource_exhausted_with_its_retry_advice() -> None:
    busy = ApiError(
        503, "the server is busy, retry later (full)", "server_busy", headers={"Retry-After": "3"}
    )
    code, message, trailers = status_of(busy)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert message.endswith("retry after 3 s") and ("retry-after", "3") in trailers
    assert status_of(ApiError(503, "down", "triton_unavailable"))[0] == grpc.StatusCode.UNAVAILABLE
    assert status_of(ApiError(504, "late", "timeout"))[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert status_of(ApiError(401, "key", "invalid_api_key"))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert status_of(ApiError(500, "broke", "synthesis_failed"))[0] == grpc.StatusCode.INTERNAL
    code, message, _ = status_of(invalid("bad speed", "speed"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "speed" in message


def test_rivas_dictionary_reads_as_a_lexicon_and_a_malformed_entry_is_named() -> None:
    assert parse_dictionary("") == {}
    assert parse_dictionary("Riva  ɹˈiːvə,NVIDIA  ɛnvˈɪdiə, ") == {"Riva": "ɹˈiːvə", "NVIDIA": "ɛnvˈɪdiə"}
    assert parse_dictionary("New York\tnuː jˈɔːɹk") == {"New York": "nuː jˈɔːɹk"}
    with pytest.raises(ValueError, match=r"entry 2 \('tomato tomahto'\)"):
        parse_dictionary("Riva  ɹˈiːvə,tomato tomahto")


def test_voice_languages_are_written_as_bcp47() -> None:
    assert [language_tag(x) for x in ("en-us", "en_GB", "cmn", "zh", "de")] == [
        "en-US",
        "en-GB",
        "zh-CN",
        "zh-CN",
        "de",
    ]


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 24000, 44100, 48000])
def test_linear_pcm_and_g711_are_raw_at_the_asked_rate(rate: int) -> None:
    second = np.sin(np.arange(22050) * 2 * np.pi * 220 / 22050).astype(np.float32) * 0.5
    for encoding in (AudioEncoding.LINEAR_PCM, AudioEncoding.MULAW, AudioEncoding.ALAW):
        encoder = riva_audio.encoder(encoding, 22050, riva_audio.output_rate(encoding, rate, 22050))
        data = b"".join(encoder.encode(part) for part in np.array_split(second, 7)) + encoder.finish()
        width = 2 if encoding == AudioEncoding.LINEAR_PCM else 1
        assert abs(len(data) / width - rate) <= rate * 0.002, (encoding, len(data))


def test_opus_takes_opus_rates_and_other_encodings_are_refused_by_name() -> None:
    assert riva_audio.output_rate(AudioEncoding.OGGOPUS, 0, 22050) == 24000
    with pytest.raises(ValueError, match="Opus takes 8000, 12000, 16000, 24000, 48000"):
        riva_audio.output_rate(AudioEncoding.OGGOPUS, 22050, 22050)
    with pytest.raises(ValueError, match="outside"):
        riva_audio.output_rate(AudioEncoding.LINEAR_PCM, 96000, 22050)
    assert riva_audio.output_rate(AudioEncoding.LINEAR_PCM, 0, 22050) == 22050
    with pytest.raises(ValueError, match="encoding 9 is not an audio encoding this server writes"):
        riva_audio.encoder(9, 22050, 22050)
    encoder = riva_audio.encoder(AudioEncoding.OGGOPUS, 22050, 16000)
    data = encoder.encode(np.zeros(22050, np.float32)) + encoder.finish()
    assert sf.info(io.BytesIO(data)).samplerate == 16000


def test_a_prompt_is_a_file_or_raw_samples_with_their_rate() -> None:
    clip = (np.sin(np.arange(16000) * 0.05) * 0.3).astype(np.float32)
    wav = io.BytesIO()
    sf.write(wav, np.stack([clip, clip], axis=1), 16000, format="WAV")
    audio, rate = riva_audio.decode_prompt(wav.getvalue(), AudioEncoding.ENCODING_UNSPECIFIED, 0)
    assert rate == 16000 and audio.shape == clip.shape
    raw = (clip * 32767).astype("<i2").tobytes()
    audio, rate = riva_audio.decode_prompt(raw, AudioEncoding.LINEAR_PCM, 16000)
    assert rate == 16000 and np.allclose(audio, clip, atol=1e-3)
    with pytest.raises(ValueError, match="need their rate"):
        riva_audio.decode_prompt(raw, AudioEncoding.LINEAR_PCM, 0)
    with pytest.raises(ValueError, match="names no raw sample format"):
        riva_audio.decode_prompt(raw, AudioEncoding.OGGOPUS, 16000)
    with pytest.raises(ValueError, match="empty"):
        riva_audio.decode_prompt(b"", AudioEncoding.LINEAR_PCM, 16000)
