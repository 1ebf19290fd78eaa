"""Riva's TTS API (triton_tts.gateway.riva) through NVIDIA's own client, nvidia-riva-client:
its ``SpeechSynthesisService`` against a gateway started as users start it, with
``--riva-port``, in front of the session's Triton server.

Covered: GetRivaSynthesisConfig (every voice, its parameters, one by model_name, an
unknown one); Synthesize at 16 and 24 kHz (the same speech resampled, intelligible);
SynthesizeOnline with one text and with a list (chunks as they are made, the texts in
order, ids echoed); word offsets; a custom dictionary that changes a word's sound for
that request only; SSML; every encoding; and bad input answered as INVALID_ARGUMENT by
field, a missing key as UNAUTHENTICATED, NVIDIA's cloud metadata ignored.
"""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import riva.client
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from riva.client.proto import riva_tts_pb2 as rtts
from riva.client.proto.riva_audio_pb2 import AudioEncoding

from tests.helpers import running_gateway
from triton_tts.client import TTSClient
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.quality.intelligibility import transcribe, word_error_rate

pytestmark = pytest.mark.server

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
WER_MARGIN = 0.15  # as the gateway's formats: resampled speech against the voice's own


def pcm(data: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def door(server: TritonServer) -> Iterator[tuple[str, int]]:
    """A gateway with the Riva door: its base URL and Riva port."""
    port = free_port()
    with running_gateway(server.grpc_url, "--riva-port", str(port)) as base:
        yield base, port


@pytest.fixture(scope="module")
def service(door: tuple[str, int]) -> riva.client.SpeechSynthesisService:
    return riva.client.SpeechSynthesisService(riva.client.Auth(uri=f"localhost:{door[1]}"))


def refused(call: object, *args: object, **kwargs: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        result = call(*args, **kwargs)  # type: ignore[operator]
        if not isinstance(result, rtts.SynthesizeSpeechResponse):
            list(result)  # a stream raises as it is read
    return caught.value


def test_the_config_lists_every_served_voice_as_riva_clients_read_it(
    server: TritonServer, service: riva.client.SpeechSynthesisService
) -> None:
    with TTSClient(server.grpc_url, "grpc") as client:
        voices = client.voices()
    config = service.stub.GetRivaSynthesisConfig(rtts.RivaSynthesisConfigRequest())
    assert [c.model_name for c in config.model_config] == [v.name for v in voices]
    for model, voice in zip(config.model_config, voices, strict=True):
        parameters = dict(model.parameters)
        assert parameters["voice_name"] == voice.name
        assert parameters["sample_rate_hz"] == str(voice.sample_rate)
        assert parameters["language_code"].split("-")[0] == voice.language.split("-")[0].split("_")[0]
        if voice.speakers:  # "name:id" pairs, as LiveKit's list_voices splits them
            pairs = dict(item.split(":") for item in parameters["subvoices"].split(","))
            assert {k: int(v) for k, v in pairs.items()} == voice.speakers
    one = service.stub.GetRivaSynthesisConfig(rtts.RivaSynthesisConfigRequest(model_name=voices[0].name))
    assert [c.model_name for c in one.model_config] == [voices[0].name]
    error = refused(service.stub.GetRivaSynthesisConfig, rtts.RivaSynthesisConfigRequest(model_name="nope"))
    assert error.code() == grpc.StatusCode.NOT_FOUND and voices[0].name in error.details()


def test_synthesize_answers_the_asked_rate_and_stays_intelligible(
    server: TritonServer, service: riva.client.SpeechSynthesisService
) -> None:
    with TTSClient(server.grpc_url, "grpc") as client:
        direct = client.synthesize(TEXT)
    direct_wer = word_error_rate([TEXT], [transcribe(direct.audio, direct.sample_rate)])
    for rate in (16_000, 24_000):
        response = service.synthesize(TEXT, sample_rate_hz=rate, language_code="en-US")
        audio = pcm(response.audio)
        assert len(response.audio) % 2 == 0 and not response.audio.startswith(b"RIFF")  # raw, no header
        assert abs(len(audio) / rate - direct.duration_s) < 0.35 * direct.duration_s, rate
        wer = word_error_rate([TEXT], [transcribe(audio, rate)])
        assert wer <= direct_wer + WER_MARGIN, (rate, wer, direct_wer)
    assert response.meta.text == TEXT


def test_synthesize_online_streams_each_text_in_order_and_echoes_ids(
    service: riva.client.SpeechSynthesisService,
) -> None:
    one = list(service.synthesize_online(TEXT, sample_rate_hz=22050))
    assert len(one) > 1, "one text, one answer: not streamed"
    texts = ["First, a short one.", "Then the second text, a little longer than the first."]
    answers = list(service.synthesize_online(texts, sample_rate_hz=22050))
    assert [a.meta.text for a in answers] == sorted((a.meta.text for a in answers), key=texts.index)
    assert {a.meta.text for a in answers} == set(texts)
    second = pcm(b"".join(a.audio for a in answers if a.meta.text == texts[1]))
    first = pcm(b"".join(a.audio for a in answers if a.meta.text == texts[0]))
    assert len(second) > len(first) > 0
    heard = transcribe(np.concatenate([first, second]), 22050)
    assert word_error_rate([" ".join(texts)], [heard]) <= 0.5, heard

    pieces = list(service.synthesize_online(["Wait", "...", "for it."], sample_rate_hz=16000))
    assert next(a.meta.text for a in pieces if a.audio) == "Wait" and pieces[-1].meta.text == "for it."
    assert "..." not in {a.meta.text for a in pieces}  # nothing to say: no answer, and the call goes on
    with pytest.raises(grpc.RpcError, match="pronounce"):  # alone on Synthesize: refused
        service.synthesize("...")

    request = rtts.SynthesizeSpeechRequest(
        text=texts[0], sample_rate_hz=16000, encoding=AudioEncoding.LINEAR_PCM
    )
    request.id.value = "call-7"
    assert {a.id.value for a in service.stub.SynthesizeOnline(iter([request]))} == {"call-7"}
    assert service.stub.Synthesize(request).id.value == "call-7"


def test_word_offsets_cover_the_text_in_milliseconds(service: riva.client.SpeechSynthesisService) -> None:
    response = service.synthesize(TEXT, sample_rate_hz=16000, enable_word_time_offsets=True)
    words = list(response.meta.words)
    assert [w.word for w in words] == TEXT.split()
    duration_ms = len(response.audio) / 2 / 16
    assert all(0 <= w.start_time < w.end_time <= duration_ms + 50 for w in words)
    assert all(a.start_time <= b.start_time for a, b in itertools.pairwise(words))
    streamed = [
        w for r in service.synthesize_online(TEXT, enable_word_time_offsets=True) for w in r.meta.words
    ]
    assert [w.word for w in streamed] == TEXT.split()
    assert not service.synthesize(TEXT, sample_rate_hz=16000).meta.words  # only when asked


def test_a_custom_dictionary_changes_a_word_for_that_request_only(
    service: riva.client.SpeechSynthesisService,
) -> None:
    def seconds(**kwargs: object) -> float:
        return len(service.synthesize("Tomato.", sample_rate_hz=16000, **kwargs).audio) / 2 / 16000

    plain = seconds()
    longer = seconds(custom_dictionary={"tomato": "təmˈeɪɾoʊtəmˈeɪɾoʊtəmˈeɪɾoʊ"})  # said three times
    assert longer > plain * 1.8, (plain, longer)
    assert abs(seconds() - plain) < 0.15 * plain  # the next request has the voice's own word
    error = refused(service.synthesize, "Tomato.", custom_dictionary={"tomato": "☃☃"})
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "tomato" in error.details()
    malformed = rtts.SynthesizeSpeechRequest(text="Tomato.", custom_dictionary="tomato=tomahto")
    error = refused(service.stub.Synthesize, malformed)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "grapheme  phoneme" in error.details()


def test_ssml_is_read_as_ssml(service: riva.client.SpeechSynthesisService) -> None:
    plain = service.synthesize("Wait here.", sample_rate_hz=16000)
    paused = service.synthesize('<speak>Wait <break time="1500ms"/> here.</speak>', sample_rate_hz=16000)
    assert (len(paused.audio) - len(plain.audio)) / 2 / 16000 == pytest.approx(1.5, abs=0.3)


@pytest.mark.parametrize(
    ("encoding", "rate", "subtype"),
    [
        (AudioEncoding.MULAW, 8000, "ULAW"),
        (AudioEncoding.ALAW, 8000, "ALAW"),
        (AudioEncoding.FLAC, 44100, None),
        (AudioEncoding.OGGOPUS, 48000, None),
    ],
)
def test_each_encoding_decodes_to_the_same_speech(
    service: riva.client.SpeechSynthesisService, encoding: int, rate: int, subtype: str | None
) -> None:
    reference = pcm(service.synthesize(TEXT, sample_rate_hz=rate).audio)
    data = service.synthesize(TEXT, sample_rate_hz=rate, encoding=encoding).audio
    if subtype:  # G.711: a byte a sample, no header (a synthesis's length varies a little)
        audio, read_rate = sf.read(
            io.BytesIO(data), dtype="float32", samplerate=rate, channels=1, format="RAW", subtype=subtype
        )
    else:
        audio, read_rate = sf.read(io.BytesIO(data), dtype="float32")
    assert read_rate == rate
    assert abs(len(audio) - len(reference)) < 0.1 * len(reference)  # durations vary between runs
    assert word_error_rate([TEXT], [transcribe(np.asarray(audio, np.float32), rate)]) <= 0.5


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"text": ""}, "text"),
        ({"text": "   "}, "text"),
        ({"text": "x" * 5000}, "text"),
        ({"voice_name": "nope"}, "unknown voice"),
        ({"language_code": "de-DE"}, "language_code"),
        ({"language_code": "not a code"}, "language_code"),
        ({"sample_rate_hz": 4000}, "sample_rate_hz"),
        ({"sample_rate_hz": 22050, "encoding": AudioEncoding.OGGOPUS}, "Opus"),
        ({"encoding": 7}, "encoding 7"),
        ({"custom_configuration": {"exaggeration_factor": "1.5"}}, "exaggeration_factor"),
        ({"custom_configuration": {"speed": "9"}}, "speed"),
    ],
)
def test_bad_requests_are_invalid_argument_naming_the_field(
    service: riva.client.SpeechSynthesisService, fields: dict[str, object], named: str
) -> None:
    request = rtts.SynthesizeSpeechRequest(
        **{"text": "Hello there.", "language_code": "en-US", "sample_rate_hz": 16000, **fields}
    )
    for call in (service.stub.Synthesize, lambda r: service.stub.SynthesizeOnline(iter([r]))):
        error = refused(call, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert named in error.details(), error.details()


def test_a_clip_for_a_voice_that_does_not_clone_is_refused(
    service: riva.client.SpeechSynthesisService,
) -> None:
    clip = io.BytesIO()
    sf.write(clip, np.sin(np.arange(16000 * 3) * 0.05).astype(np.float32) * 0.3, 16000, format="WAV")
    request = rtts.SynthesizeSpeechRequest(text="Hello there.", language_code="en-US", sample_rate_hz=16000)
    request.zero_shot_data.audio_prompt = clip.getvalue()
    error = refused(service.stub.Synthesize, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    request.zero_shot_data.audio_prompt = b"\x01\x02\x03"  # not a file, and no raw format named
    assert "zero_shot_data" in refused(service.stub.Synthesize, request).details()


def test_keys_come_from_the_authorization_metadata_and_the_cloud_metadata_is_ignored(
    server: TritonServer,
) -> None:
    port = free_port()
    env = {"TRITON_TTS_API_KEY": "riva-secret"}
    with running_gateway(server.grpc_url, "--riva-port", str(port), env={**os.environ, **env}):
        anonymous = riva.client.SpeechSynthesisService(riva.client.Auth(uri=f"localhost:{port}"))
        error = refused(anonymous.synthesize, "Hello.")
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in error.details()
        # the voice list without a key, as the NVIDIA plugins ask for it on a plaintext port
        assert anonymous.stub.GetRivaSynthesisConfig(rtts.RivaSynthesisConfigRequest()).model_config
        wrong = riva.client.SpeechSynthesisService(
            riva.client.Auth(uri=f"localhost:{port}", metadata_args=[["authorization", "Bearer nope"]])
        )
        assert refused(wrong.synthesize, "Hello.").code() == grpc.StatusCode.UNAUTHENTICATED
        config, metadata_of_wrong = rtts.RivaSynthesisConfigRequest(), wrong.auth.get_auth_metadata()
        assert refused(wrong.stub.GetRivaSynthesisConfig, config, metadata=metadata_of_wrong).code() == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        metadata = [
            ["authorization", "Bearer riva-secret"],
            ["function-id", "877104f7-e885-42b9-8de8-f6e4c6303969"],
        ]
        keyed = riva.client.SpeechSynthesisService(
            riva.client.Auth(uri=f"localhost:{port}", metadata_args=metadata)
        )
        assert len(keyed.synthesize("Hello.", sample_rate_hz=16000).audio) > 16000


def test_the_gateway_counts_riva_calls_in_its_metrics(
    door: tuple[str, int], service: riva.client.SpeechSynthesisService
) -> None:
    def count(outcome: str) -> float:
        with urllib.request.urlopen(f"{door[0]}/metrics", timeout=10) as response:
            text = response.read().decode()
        line = f'triton_tts_gateway_requests_total{{api="riva",outcome="{outcome}"}}'
        return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))

    ok, invalid = count("ok"), count("invalid_value")
    list(service.synthesize_online(["One.", "Two."], sample_rate_hz=16000))
    refused(service.synthesize, "Hello.", voice_name="nope")
    assert count("ok") == ok + 2 and count("invalid_value") == invalid + 1


TEXTS = st.one_of(
    st.sampled_from(
        ["Hi.", "<speak>Hi <break time='300ms'/> there.</speak>", "<speak>Hi", "", " ", "12/24."]
    ),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
)
RIVA_REQUESTS = st.builds(
    rtts.SynthesizeSpeechRequest,
    text=TEXTS,
    language_code=st.one_of(st.sampled_from(["en-US", "", "en-GB", "zh-CN", "xx-YY"]), st.text(max_size=12)),
    encoding=st.integers(-1, 25),
    sample_rate_hz=st.one_of(
        st.sampled_from([0, 8000, 16000, 22050, 24000, 48000]), st.integers(-(2**31), 2**31 - 1)
    ),
    voice_name=st.one_of(
        st.sampled_from(
            ["", "joe", "alloy", "Magpie-Multilingual.EN-US.Aria", "joe.x", "joe:1", "English-US.Female-1"]
        ),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
    ),
    custom_dictionary=st.one_of(
        st.just(""), st.sampled_from(["hi  hˈaɪ", "hi hˈaɪ", "hi  ☃"]), st.text(max_size=30)
    ),
    enable_word_time_offsets=st.booleans(),
    custom_configuration=st.dictionaries(st.sampled_from(["speed", "x"]), st.text(max_size=5), max_size=2),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=RIVA_REQUESTS)
def test_generated_requests_are_served_or_invalid_argument(
    service: riva.client.SpeechSynthesisService, request: rtts.SynthesizeSpeechRequest
) -> None:
    """Whatever the fields hold, the answer is audio or INVALID_ARGUMENT with a message:
    never INTERNAL, UNKNOWN, or a hang."""
    try:
        response = service.stub.Synthesize(request, timeout=120)
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details(), request)
        assert err.details()
        return
    assert response.audio or request.encoding == AudioEncoding.FLAC


def test_tls_with_a_certificate_and_its_key(server: TritonServer, tmp_path: Path) -> None:
    """``--riva-tls-cert``/``--riva-tls-key``: a client that trusts the certificate is
    served; one that speaks plaintext to the TLS port gets no answer."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    tls = ("--riva-port", str(port), "--riva-tls-cert", str(cert), "--riva-tls-key", str(key))
    with running_gateway(server.grpc_url, *tls):
        secure = riva.client.Auth(ssl_root_cert=str(cert), use_ssl=True, uri=f"localhost:{port}")
        response = riva.client.SpeechSynthesisService(secure).synthesize("Hello.", sample_rate_hz=16000)
        assert len(response.audio) > 16000
        plain = riva.client.SpeechSynthesisService(riva.client.Auth(uri=f"localhost:{port}"))
        with pytest.raises(grpc.RpcError) as caught:
            plain.stub.GetRivaSynthesisConfig(rtts.RivaSynthesisConfigRequest(), timeout=10)
        assert caught.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
