"""SSML through the real server and gateway: ``<speak>`` text (or TEXT_FORMAT "ssml") on
``tts`` and ``tts_stream`` is read, not spoken tags and all; breaks are exact silence that
word timestamps count; prosody's rate and volume change the audio; bad SSML is a 400 that
names the element and where it is, and the requests beside it are served."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import openai
import pytest
import soundfile as sf
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import stream_raw, timed_words, tts_inputs
from triton_tts.ops.server import TritonServer
from triton_tts.quality.intelligibility import transcribe, word_error_rate

WAIT = '<speak>Please wait a moment.<break time="1500ms"/>Thank you for waiting.</speak>'
HEARD = "please wait a moment thank you for waiting"
DETERMINISTIC: dict[str, Any] = {"NOISE_SCALE": 0.0, "NOISE_W": 0.0}


def synthesize(server: TritonServer, text: str, **scalars: Any) -> tuple[npt.NDArray[np.float32], int, Any]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("tts", tts_inputs(grpcclient, text, **DETERMINISTIC, **scalars))
    return result.as_numpy("AUDIO").reshape(-1), int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]), result


def heard(audio: npt.NDArray[np.float32], rate: int) -> str:
    """What the recogniser hears. pocketsphinx loses its way after long digital silence
    (exact zeros, which breaks are), so a dither at -80 dBFS goes under the audio first."""
    dither = np.random.default_rng(0).normal(0.0, 1e-4, audio.size).astype(np.float32)
    return transcribe(audio + dither, rate)


def longest_silence_s(audio: npt.NDArray[np.float32], rate: int) -> float:
    """The longest run of exact zeros, in seconds."""
    zero = np.concatenate([[False], audio == 0.0, [False]])
    edges = np.flatnonzero(np.diff(zero.astype(np.int8)))
    runs = edges[1::2] - edges[0::2]
    return float(runs.max()) / rate if runs.size else 0.0


def test_the_break_is_silence_and_the_tags_are_not_read(server: TritonServer) -> None:
    audio, rate, _ = synthesize(server, WAIT)
    assert 1.5 <= longest_silence_s(audio, rate) < 1.6
    said = heard(audio, rate)
    assert word_error_rate([HEARD], [said]) <= 0.15, said
    assert "break" not in said and "time" not in said
    as_text, _, _ = synthesize(server, WAIT, TEXT_FORMAT="text")  # the tags read aloud
    assert longest_silence_s(as_text, rate) < 1.0


def test_text_format_ssml_reads_text_without_the_speak_prefix_check(server: TritonServer) -> None:
    audio, rate, _ = synthesize(
        server, ' <speak>Hello <break time="800ms"/>again.</speak>', TEXT_FORMAT="ssml"
    )
    assert 0.8 <= longest_silence_s(audio, rate) < 0.9
    with pytest.raises(InferenceServerException, match="TEXT_FORMAT must be one of auto, text, ssml"):
        synthesize(server, "Hi", TEXT_FORMAT="markdown")


def test_word_timestamps_count_the_breaks(server: TritonServer) -> None:
    audio, rate, result = synthesize(server, WAIT, TIMESTAMPS=True)
    words = timed_words(result)
    assert [w for w, _, _ in words] == ["Please", "wait", "a", "moment.", "Thank", "you", "for", "waiting."]
    moment, thank = words[3], words[4]
    assert thank[1] - moment[2] >= 1.5  # the break lies between them
    assert words[-1][2] <= audio.size / rate + 1e-3


def test_say_as_and_sub_say_what_they_mean_and_time_what_is_written(server: TritonServer) -> None:
    text = (
        '<speak>Call <say-as interpret-as="telephone">555-0123</say-as> about the '
        '<sub alias="World Wide Web Consortium">W3C</sub>.</speak>'
    )
    audio, rate, result = synthesize(server, text, TIMESTAMPS=True)
    said = heard(audio, rate)
    assert (
        word_error_rate(
            ["call five five five zero one two three about the world wide web consortium"], [said]
        )
        <= 0.25
    ), said
    words = {w: (start, end) for w, start, end in timed_words(result)}
    assert list(words) == ["Call", "555-0123", "about", "the", "W3C."]
    assert words["W3C."][1] - words["W3C."][0] > 4 * (words["the"][1] - words["the"][0])


def test_prosody_rate_and_volume_change_the_audio(server: TritonServer) -> None:
    sentence = "The quick brown fox jumps over the lazy dog."
    normal, _, _ = synthesize(server, f"<speak>{sentence}</speak>")
    slow, _, _ = synthesize(server, f'<speak><prosody rate="50%">{sentence}</prosody></speak>')
    soft, _, _ = synthesize(server, f'<speak><prosody volume="-12dB">{sentence}</prosody></speak>')
    assert 1.6 < slow.size / normal.size < 2.4
    assert soft.size == normal.size
    ratio = np.sqrt(np.mean(soft**2) / np.mean(normal**2))
    assert ratio == pytest.approx(10 ** (-12 / 20), rel=0.05)


def test_a_stream_says_ssml_with_its_breaks(server: TritonServer) -> None:
    text = (
        "<speak>" + '<break time="700ms"/>'.join(["First part.", "Second part.", "Third part."]) + "</speak>"
    )
    chunks, errors = stream_raw(server.grpc_url, text, **DETERMINISTIC)
    assert errors == []
    audio = np.concatenate([c["audio"] for c in chunks])
    assert len(chunks) >= 3 and 0.7 <= longest_silence_s(audio, 22050) < 0.8
    said = heard(audio, 22050)
    assert word_error_rate(["first part second part third part"], [said]) <= 0.2, said


BAD = [
    ("<speak>Hi <b>there</speak>", "mismatched tag at line 1"),
    ('<speak>Wait<break time="forever"/></speak>', "<break> at line 1, column 12: time 'forever'"),
    ('<!DOCTYPE speak [<!ENTITY a "x">]><speak>&a;</speak>', "may not use a DOCTYPE"),
    ('<speak><say-as interpret-as="bogus">1</say-as></speak>', "interpret-as 'bogus'"),
]


@pytest.mark.parametrize(("text", "named"), BAD)
def test_bad_ssml_is_a_clear_400_on_both_models(server: TritonServer, text: str, named: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="SSML") as refused:
        client.infer("tts", tts_inputs(httpclient, text))
    assert named in refused.value.message() and refused.value.status() == "400"
    _, errors = stream_raw(server.grpc_url, text)
    assert len(errors) == 1 and named in errors[0]


def test_bad_ssml_leaves_the_requests_beside_it_served(server: TritonServer) -> None:
    texts = [WAIT, BAD[1][0], "<speak>Fine.</speak>", BAD[2][0], "Plain text too."]

    def one(text: str) -> str:
        try:
            synthesize(server, text)
            return "ok"
        except InferenceServerException as err:
            return "refused" if "SSML" in err.message() else f"failed: {err.message()}"

    with ThreadPoolExecutor(len(texts)) as pool:
        outcomes = list(pool.map(one, texts))
    assert outcomes == ["ok", "refused", "ok", "refused", "ok"]


def test_the_gateway_takes_ssml_as_input(gateway: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)
    response = client.audio.speech.create(model="tts-1", voice="alloy", input=WAIT, response_format="wav")
    audio, rate = sf.read(io.BytesIO(response.read()), dtype="float32")
    assert rate == 22050 and longest_silence_s(audio, rate) >= 1.45  # 16-bit WAV: zeros stay zeros
    with pytest.raises(openai.BadRequestError, match="<break> at line 1"):
        client.audio.speech.create(model="tts-1", voice="alloy", input=BAD[1][0])
