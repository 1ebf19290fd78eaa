"""Long input never fails for a token: a word or run longer than a chunk (digit lists,
URLs, base64, identifiers, unpunctuated letters or Chinese) is cut at its safest point
(chunking.cut_word), and numbers past what cn2an or num2words say are read digit by digit.

Generated inputs (hypothesis) hold split_text to its promise for every plan the server
uses: no chunk over its limit, nothing dropped, no exception; the served tests send the
tester's 119-number list, a long word and a 20-digit Chinese number through a real
tritonserver and get audio as long as the text.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import assert_says_as_long, shutdown_problems, stream_raw, tts_inputs
from triton_tts.build.model_configs import BuildOptions
from triton_tts.contract import paths
from triton_tts.contract.validation import MAX_TEXT_CHARS
from triton_tts.ops.server import TritonServer, default_voice_server
from triton_tts.runtime.chunking import FIRST_CHUNK_CHARS, ChunkPlan, cut_word, halves, split_text
from triton_tts.text.chinese import normalize_chinese, pinyin
from triton_tts.text.english_numbers import MAX_SPOKEN_DIGITS
from triton_tts.text.han import han_characters
from triton_tts.text.normalize import normalize_english

# The tester's input: 119 comma-joined numbers, once one 1,024-character word.
NUMBER_LIST = ",".join(str(i) for i in range(1, 120))
SPACED_LIST = ", ".join(str(i) for i in range(1, 120))
CHINESE_NUMBER = "12345678901234567890.5"  # 20 integer digits: cn2an raised on it (a 500)
DEFAULTS = BuildOptions()
PLANS = [
    ChunkPlan(FIRST_CHUNK_CHARS, DEFAULTS.chunk_chars),  # tts
    ChunkPlan(DEFAULTS.first_chunk_chars, DEFAULTS.stream_chunk_chars, DEFAULTS.chunk_growth),  # tts_stream
    ChunkPlan(16, 16),  # the shortest a scaled plan packs (chunking.MIN_CHUNK_CHARS)
    ChunkPlan(40, 100),
]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# The fixture that starts this module's own server (tests/conftest.py marks its tests).
SERVER_FIXTURES = {"zh_server"}


def assert_chunks_fit(text: str, plan: ChunkPlan) -> list[str]:
    """split_text's promise: every chunk within its plan's limit (the first within
    ``first_chars``) and the request's, trimmed, nothing dropped, added or moved."""
    chunks = split_text(text, plan)
    assert re.sub(r"\s", "", "".join(chunks)) == re.sub(r"\s", "", text)
    for chunk in chunks:
        assert chunk and chunk == chunk.strip() and "  " not in chunk
        assert len(chunk) <= min(plan.max_chars, MAX_TEXT_CHARS), (len(chunk), plan)
    if chunks:
        assert len(chunks[0]) <= plan.first_chars, (len(chunks[0]), plan)
    return chunks


# --- generated long tokens ---------------------------------------------------------------

_BASE64 = string.ascii_letters + string.digits + "+/"
_segment = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12)
digit_lists = st.lists(st.integers(0, 10**7), min_size=40, max_size=400).map(
    lambda xs: ",".join(map(str, xs))
)
urls = st.tuples(
    st.lists(_segment, min_size=1, max_size=4).map(".".join),
    st.lists(_segment, min_size=30, max_size=200).map("/".join),
    st.lists(st.tuples(_segment, _segment).map("=".join), max_size=20).map("&".join),
).map(lambda p: f"https://{p[0]}.com/{p[1]}?{p[2]}")
base64_like = st.text(_BASE64, min_size=401, max_size=3000).map(lambda s: s + "==")
identifiers = st.lists(_segment, min_size=40, max_size=300).flatmap(
    lambda parts: st.sampled_from("-_.").map(lambda sep: sep.join(parts))
)
camel_case = st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=8), min_size=60, max_size=300).map(
    lambda parts: "".join(p.capitalize() for p in parts)
)
letter_runs = st.text(string.ascii_letters, min_size=401, max_size=4000)
punctuation_runs = st.text("!?.,;:-_/()'\"", min_size=401, max_size=2000)
huge_numbers = st.text(string.digits, min_size=MAX_SPOKEN_DIGITS + 1, max_size=600)
han_runs = st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=161, max_size=2500)
long_tokens = st.one_of(
    digit_lists, urls, base64_like, identifiers, camel_case, letter_runs, punctuation_runs, huge_numbers
)


@FUZZ
@given(token=long_tokens, before=st.sampled_from(["", "Read this: ", "Go. "]), plan=st.sampled_from(PLANS))
def test_every_chunk_of_a_long_english_token_fits(token: str, before: str, plan: ChunkPlan) -> None:
    assert_chunks_fit(normalize_english(before + token + "."), plan)
    assert_chunks_fit(before + token, plan)  # NORMALIZE false: the text as written


@FUZZ
@given(
    run=han_runs,
    number=huge_numbers,
    context=st.sampled_from(
        ["{}", "价格是{}元", "¥{}", "{}%", "-{}", "{}.5", "{}个", "{}/4", "第{}", "3~{}"]
    ),
    plan=st.sampled_from(PLANS),
)
def test_every_chunk_of_unpunctuated_chinese_fits(
    run: str, number: str, context: str, plan: ChunkPlan
) -> None:
    spoken = normalize_chinese(run + context.format(number) + run)
    chunks = assert_chunks_fit(spoken, plan)
    assert all(pinyin(chunk) for chunk in chunks)


@FUZZ
@given(token=long_tokens, limit=st.integers(1, 400))
def test_cut_word_pieces_fit_and_join_to_the_word(token: str, limit: int) -> None:
    pieces = cut_word(token, limit)
    assert "".join(pieces) == token
    assert all(0 < len(p) <= limit for p in pieces)
    assert all(len(p) >= limit // 2 for p in pieces[:-1])  # cuts in the last half of a piece


# --- the cutting rule, by hand ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "limit", "pieces"),
    [
        # after punctuation, before a letter or digit
        ("one,two,three,four", 9, ["one,two,", "three,", "four"]),
        ("https://example.com/path/to/file", 16, ["https://example.", "com/path/to/file"]),
        ("snake_case_identifier_name", 12, ["snake_case_", "identifier_", "name"]),
        # where the case or script changes
        ("camelCaseIdentifierName", 10, ["camelCase", "Identifier", "Name"]),
        ("abcdef123456", 8, ["abcdef", "123456"]),
        ("北京Beijing北京", 9, ["北京Beijing", "北京"]),
        # between Han characters (a syllable each), between Latin syllables
        ("今天天气很好我们去公园", 4, ["今天天气", "很好我们", "去公园"]),
        ("bananabanana", 8, ["bananaba", "nana"]),  # ba|na|na|ba|na|na
        # anywhere, but never before a combining mark
        ("xxxxxxxxxx", 4, ["xxxx", "xxxx", "xx"]),
        ("e\u0301" * 4, 3, ["e\u0301"] * 4),
        ("\u0915\u093f" * 3, 3, ["\u0915\u093f"] * 3),  # कि: a Devanagari vowel sign
    ],
)
def test_a_long_word_is_cut_at_its_safest_point(word: str, limit: int, pieces: list[str]) -> None:
    assert cut_word(word, limit) == pieces


def test_a_long_word_in_a_sentence_is_cut_and_its_neighbours_kept() -> None:
    url = "https://example.com/" + "/".join(f"part{i}" for i in range(60))
    chunks = assert_chunks_fit(f"See {url} for details.", ChunkPlan(100, 100))
    assert chunks[0].startswith("See https://example.com/part0/")
    assert all(c.endswith("/") for c in chunks[:-1]) and chunks[-1].endswith("for details.")


def test_halves_cut_a_long_word_inside_a_text_at_a_safe_point() -> None:
    """A chunk preprocess refuses (too many phoneme ids) is said in halves
    (long_text.send.synthesize_chunk)."""
    assert halves("see alpha-beta-gamma-delta-epsilon now") == [
        "see",
        "alpha-beta-gamma-",
        "delta-epsilon now",
    ]
    assert halves("今天天气很好") == ["今天天", "气很好"]  # one word: its middle


# --- numbers -------------------------------------------------------------------------------------


def test_a_comma_joined_number_list_is_read_as_a_list() -> None:
    assert normalize_english("1,2,3") == "one, two, three"
    assert normalize_english(NUMBER_LIST) == normalize_english(SPACED_LIST)
    # a well-formed thousands group is still one number
    assert normalize_english("1,250") == "one thousand two hundred and fifty"
    assert (
        normalize_english("1,234,567")
        == "one million two hundred and thirty-four thousand five hundred and sixty-seven"
    )
    assert normalize_english("1,2345") == "one, two thousand three hundred and forty-five"
    for plan in PLANS:
        chunks = assert_chunks_fit(normalize_english(NUMBER_LIST), plan)
        if plan.first_chars >= len("one hundred and seventeen,"):
            assert all(c.endswith((",", "nineteen")) for c in chunks)  # cut at the list's commas


def test_a_huge_english_number_is_read_digit_by_digit() -> None:
    digits = "9" * 500
    assert normalize_english(digits) == " ".join(["nine"] * 500)
    assert normalize_english(f"${digits}.99") == " ".join(["nine"] * 500) + " dollars and ninety-nine cents"
    assert normalize_english("9" * MAX_SPOKEN_DIGITS).startswith("nine hundred and ninety-nine trillion")


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        (CHINESE_NUMBER, "一二三四五六七八九零一二三四五六七八九零点五"),
        ("价格是12345678901234567.5元", "价格是一二三四五六七八九零一二三四五六七点五元"),
        ("-11111111111111111111.5", "负" + "一" * 20 + "点五"),
        ("33333333333333333333.5%", "百分之" + "三" * 20 + "点五"),
        (
            "1111111111111111.25",
            "一千一百一十一万一千一百一十一亿一千一百一十一万一千一百一十一点二五",
        ),  # 16: cn2an's
        ("0.1234567890123456789", "零点一二三四五六七八九零一二三四五六七八九"),  # not cut at 16
    ],
)
def test_a_chinese_number_past_cn2an_is_read_digit_by_digit(text: str, spoken: str) -> None:
    assert normalize_chinese(text) == spoken


def test_a_yuan_amount_of_thousands_of_digits() -> None:
    """Python refuses int() of over 4,300 digits: the reading never converts one."""
    assert normalize_chinese("¥" + "1" * 5000 + ".5") == "一" * 5000 + "元五角"


def test_anything_cn2an_raises_on_is_read_digit_by_digit(monkeypatch: pytest.MonkeyPatch) -> None:
    import cn2an

    def refuse(number: str, mode: str) -> str:
        raise ValueError(f"cannot read {number}")

    monkeypatch.setattr(cn2an, "an2cn", refuse)
    assert normalize_chinese("我有123个苹果，3.5元") == "我有一二三个苹果，三点五元"


# --- through a real tritonserver ------------------------------------------------------------------


def speak(
    client: httpclient.InferenceServerClient, text: str, **options: object
) -> tuple[npt.NDArray[np.float32], int]:
    result = client.infer("tts", tts_inputs(httpclient, text, **options))  # type: ignore[arg-type]
    audio: npt.NDArray[np.float32] = result.as_numpy("AUDIO").reshape(-1)
    return audio, int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])


def seconds_per_character(audio: npt.NDArray[np.float32], rate: int, characters: int) -> float:
    assert np.isfinite(audio).all() and audio.size > 0
    return audio.size / rate / characters


NO_NOISE = {"NOISE_SCALE": 0.0, "NOISE_W": 0.0}


def test_the_number_list_is_said_through_tts_and_tts_stream(
    http: httpclient.InferenceServerClient, server: TritonServer
) -> None:
    """The tester's list: refused once (a 1,024-character chunk) and a stream cut short;
    now said as the same list written with spaces, whole and streamed."""
    listed, rate = speak(http, NUMBER_LIST, **NO_NOISE)
    spaced, _ = speak(http, SPACED_LIST, **NO_NOISE)
    assert listed.size == spaced.size  # the same words, the same chunks
    # English runs about 15 characters a second (limits.DEFAULT_SECONDS_PER_CHAR: 0.067)
    assert 0.03 < seconds_per_character(listed, rate, len(normalize_english(NUMBER_LIST))) < 0.12
    chunks, errors = stream_raw(server.grpc_url, NUMBER_LIST, **NO_NOISE)
    assert not errors and chunks and chunks[-1]["last"]
    assert_says_as_long(np.concatenate([c["audio"] for c in chunks]), listed)


def test_the_number_list_streams_whole_through_the_gateway(
    gateway: str, http: httpclient.InferenceServerClient
) -> None:
    """Through the gateway the refused chunk broke the streamed response mid-way."""
    import openai

    from triton_tts.gateway.audio import PCM_RATE

    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="not-needed", max_retries=0)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input=NUMBER_LIST,
        response_format="pcm",
        extra_body={"noise_scale": 0.0, "noise_w": 0.0},
    ) as response:
        assert response.status_code == 200
        streamed = np.frombuffer(response.read(), "<i2").astype(np.float32) / 32768.0
    whole, rate = speak(http, NUMBER_LIST, **NO_NOISE)
    # the same speech, resampled to OpenAI's 24 kHz pcm (and a stream's joins: 6%)
    assert abs(streamed.size / PCM_RATE - whole.size / rate) <= 0.06 * whole.size / rate


def test_a_word_longer_than_a_request_chunk_is_said(http: httpclient.InferenceServerClient) -> None:
    """A 1,200-character word: over tts_chunk's 1,000 characters, so it was refused whole."""
    word = "-".join(["banana"] * 172)[:1200]
    audio, rate = speak(http, word, **NO_NOISE)
    assert 0.03 < seconds_per_character(audio, rate, len(word)) < 0.2


BAKER = "baker"


@pytest.fixture(scope="module")
def zh_server(voice_dir, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    baker_dir = paths.voices_dir() / BAKER
    if not (baker_dir / "voice.json").exists():
        pytest.fail(f"no Mandarin voice at {baker_dir}: run `make voice-zh` (make test does)")
    repo = tmp_path_factory.mktemp("zh-long-repo") / "model_repository"
    log = tmp_path_factory.mktemp("zh-long-logs") / "tritonserver.log"
    with default_voice_server(repo, log, [voice_dir, baker_dir]) as server:
        yield server
    assert server.process is not None
    assert not shutdown_problems(server.process.returncode, log.read_text(encoding="utf-8"))


def test_a_20_digit_chinese_number_and_a_long_han_run_are_said(zh_server: TritonServer) -> None:
    """cn2an raised on the number (a 500); the run has no punctuation to cut it at."""
    text = f"价格是{CHINESE_NUMBER}元。"
    with httpclient.InferenceServerClient(zh_server.http_url, network_timeout=300) as client:
        audio, rate = speak(client, text, VOICE=BAKER, NOISE_SCALE=0.0)
        characters = len(han_characters(normalize_chinese(text)))
        # Mandarin reads 4-6 characters a second (tests/test_mandarin_serving.py)
        assert 0.12 < seconds_per_character(audio, rate, characters) < 0.4
        run = "今天天气很好我们一起去公园散步顺便买一些水果回家" * 12  # 288 characters, no pause
        audio, rate = speak(client, run, VOICE=BAKER, NOISE_SCALE=0.0)
        assert 0.12 < seconds_per_character(audio, rate, len(run)) < 0.4
    chunks, errors = stream_raw(zh_server.grpc_url, run, VOICE=BAKER, NOISE_SCALE=0.0)
    assert not errors and len(chunks) > 1 and chunks[-1]["last"]
    assert_says_as_long(np.concatenate([c["audio"] for c in chunks]), audio)
