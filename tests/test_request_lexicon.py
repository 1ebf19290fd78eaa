"""A request's own pronunciations (the LEXICON input of tts and tts_stream;
triton_tts/text/pronounce.py, parse_request_lexicon): bounded, each entry checked against
the voice and refused by name; through the real server an entry makes the voice say its
phonemes for that request only (the next request without it sounds as before), the words
keep their written form in the timestamps, and a bad entry is a 400 / INVALID_ARGUMENT
over HTTP and gRPC and a tagged refusal in a stream, which still ends with its final flag.
Then the client library: ``lexicon=`` reaches tts_stream, and ``reference_audio=`` sent to
a voice that does not clone is refused by the server (the XTTS voice that takes it:
tests/test_xtts_serving.py); the CLI's ``--say WORD=PHONEMES``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import stream_model, timed_words, tts_inputs
from triton_tts.client import AsyncTTSClient, RequestRejected, TTSClient
from triton_tts.contract.validation import InvalidRequest
from triton_tts.ops.server import TritonServer
from triton_tts.text.phonemize import espeak
from triton_tts.text.pronounce import (
    MAX_REQUEST_BYTES,
    MAX_REQUEST_ENTRIES,
    MAX_REQUEST_PHONEME_CHARS,
    MAX_REQUEST_WORD_CHARS,
    Lexicon,
    apply_lexicons,
    mark,
    parse_request_lexicon,
)

POTATO = espeak("en-us").symbols(["potato"], "piper-phonemes")[0]
SYMBOLS = "".join(sorted(set(POTATO + "abcdefghijklmnopqrstuvwxyz"))) + "ˈˌəɪʊ"
QUIET = {"NOISE_SCALE": 0.0, "NOISE_W": 0.0}  # deterministic: audio compared exactly
SENTENCE = "I like tomato soup."


def test_a_request_lexicon_is_bounded_and_each_entry_named() -> None:
    def parse(raw: str | bytes, language: str = "en-us") -> Lexicon:
        return parse_request_lexicon(raw, language, "joe", SYMBOLS, None)

    assert parse(json.dumps({"To mato": POTATO, "TOMATO": POTATO})).entries == {
        "to mato": POTATO,
        "tomato": POTATO,
    }
    assert parse("{}").entries == {}
    at_bounds = {f"w{i:02d}" + "a" * (MAX_REQUEST_WORD_CHARS - 3): "ə" * MAX_REQUEST_PHONEME_CHARS
                 for i in range(MAX_REQUEST_ENTRIES)}  # fmt: skip
    assert len(json.dumps(at_bounds, ensure_ascii=False).encode()) <= MAX_REQUEST_BYTES
    assert len(parse(json.dumps(at_bounds, ensure_ascii=False)).entries) == MAX_REQUEST_ENTRIES
    refusals: list[tuple[str | bytes, str]] = [
        ("tomato", "must be a JSON object"),
        (b"\xff{}", "must be a JSON object"),
        ('["tomato"]', r"JSON object .*got list"),
        ('{"tomato": 3}', "entry 'tomato': its phonemes must be a string, got int"),
        ('{"tomato": ""}', "entry 'tomato': the word and its phonemes must both be given"),
        ('{"...": "a"}', "entry '...': '...' has no letters or digits"),
        ('{"tomato": "a", "Tomato": "b"}', "entry 'Tomato': 'Tomato' is given twice"),
        (
            json.dumps({"x" * (MAX_REQUEST_WORD_CHARS + 1): "a"}),
            f"at most {MAX_REQUEST_WORD_CHARS} characters",
        ),
        (
            json.dumps({"tomato": "a" * (MAX_REQUEST_PHONEME_CHARS + 1)}),
            "entry 'tomato': an entry is at most",
        ),
        (json.dumps({f"w{i}": "a" for i in range(MAX_REQUEST_ENTRIES + 1)}), "at most 100 entries, got 101"),
        (json.dumps({"tomato": "a" * (MAX_REQUEST_BYTES + 1)}), f"at most {MAX_REQUEST_BYTES:,} bytes"),
        ('{"snow": "☃a"}', r"entry 'snow': the pronunciation '☃a' has '☃': not among voice 'joe's phonemes"),
        ('{"tomato": "a\ue000"}', "entry 'tomato': private-use characters"),
    ]
    for raw, why in refusals:
        with pytest.raises(InvalidRequest, match=why):
            parse(raw)
    with pytest.raises(InvalidRequest, match="entry '银行': 'yin9 hang2' is not pinyin"):
        parse('{"银行": "yin9 hang2"}', "zh")
    with pytest.raises(InvalidRequest, match="voice 'joe' takes no pronunciations"):
        parse_request_lexicon("{}", "en-us", "joe", "", None)


def test_a_requests_entries_win_over_the_voices_and_leave_them_as_they_were() -> None:
    voice = Lexicon("en", {"new york": "VOICE-NY", "soup": "VOICE-SOUP"})
    request = Lexicon("en", {"new": "REQUEST-NEW"})
    said = apply_lexicons("New York soup", [request, voice])
    assert said == f"{mark('REQUEST-NEW')} York {mark('VOICE-SOUP')}"  # even over a longer entry
    assert apply_lexicons("New York soup", [None, voice]) == f"{mark('VOICE-NY')} {mark('VOICE-SOUP')}"
    assert voice.entries == {"new york": "VOICE-NY", "soup": "VOICE-SOUP"}


def lexicon_input(lib: Any, value: str | bytes) -> Any:
    raw = value.encode("utf-8") if isinstance(value, str) else value
    tensor = lib.InferInput("LEXICON", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[raw]], dtype=np.object_))
    return tensor


def say(
    client: Any, text: str, lexicon: dict[str, str] | str | None = None, **options: Any
) -> tuple[npt.NDArray[np.float32], Any]:
    lib = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    inputs = tts_inputs(lib, text, **QUIET, **options)
    if lexicon is not None:
        inputs.append(lexicon_input(lib, lexicon if isinstance(lexicon, str) else json.dumps(lexicon)))
    result = client.infer("tts", inputs)
    return result.as_numpy("AUDIO").reshape(-1), result


def test_an_entry_says_its_phonemes_for_its_request_only(grpc: grpcclient.InferenceServerClient) -> None:
    plain, _ = say(grpc, SENTENCE)
    given, result = say(grpc, SENTENCE, {"Tomato": POTATO}, TIMESTAMPS=True)
    potato, _ = say(grpc, "I like potato soup.")
    assert np.array_equal(given, potato) and not np.array_equal(plain, potato)
    assert [w for w, _, _ in timed_words(result)] == ["I", "like", "tomato", "soup."]
    after, _ = say(grpc, SENTENCE)  # the entry was the request's alone
    assert np.array_equal(after, plain)


BAD = [  # (LEXICON, what the refusal says)
    ("tomato", "LEXICON must be a JSON object"),
    ('{"tomato": ["pə"]}', "LEXICON entry 'tomato': its phonemes must be a string"),
    ('{"snow": "☃a"}', "LEXICON entry 'snow': the pronunciation '☃a' has '☃'"),
    (json.dumps({f"w{i}": "a" for i in range(MAX_REQUEST_ENTRIES + 1)}), "LEXICON holds at most 100 entries"),
    (
        json.dumps({"tomato": "ə" * (MAX_REQUEST_PHONEME_CHARS + 1)}),
        "LEXICON entry 'tomato': an entry is at most",
    ),
]


def test_bad_lexicons_are_refused_by_entry_over_http_grpc_and_streams(
    server: TritonServer, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    for client, status in ((http, "400"), (grpc, "StatusCode.INVALID_ARGUMENT")):
        for lexicon, why in BAD:
            with pytest.raises(InferenceServerException) as refused:
                say(client, SENTENCE, lexicon)
            assert refused.value.status() == status and why in (refused.value.message() or ""), lexicon
    for lexicon, why in BAD[:3]:
        inputs = [*tts_inputs(grpcclient, SENTENCE), lexicon_input(grpcclient, lexicon)]
        chunks, errors = stream_model(server.grpc_url, "tts_stream", inputs)  # returns on the final flag
        assert chunks == [] and len(errors) == 1 and errors[0].startswith("[INVALID_ARG]"), errors
        assert why in errors[0]


def test_the_client_sends_a_lexicon_and_a_clip_that_only_cloning_voices_take(server: TritonServer) -> None:
    async def streamed(text: str, **options: Any) -> npt.NDArray[np.float32]:
        async with AsyncTTSClient(server.grpc_url, "grpc") as tts:
            chunks = [chunk async for chunk in tts.stream(text, noise_scale=0.0, noise_w=0.0, **options)]
        assert chunks[-1].is_last
        return np.concatenate([c.audio for c in chunks])

    given = asyncio.run(streamed(SENTENCE, lexicon={"tomato": POTATO}))
    assert np.array_equal(given, asyncio.run(streamed("I like potato soup.")))
    clip = np.zeros(22050, dtype=np.float32)
    with TTSClient(server.http_url) as tts:
        with pytest.raises(RequestRejected, match="REFERENCE_AUDIO: voice 'joe' does not clone"):
            tts.synthesize(SENTENCE, reference_audio=clip, reference_sample_rate=22050)
        with pytest.raises(RequestRejected, match=r"LEXICON entry 'snow'"):
            tts.synthesize(SENTENCE, lexicon={"snow": "☃"})
    with TTSClient(server.grpc_url, "grpc") as tts, pytest.raises(RequestRejected, match="REFERENCE_AUDIO"):
        list(tts.stream(SENTENCE, reference_audio=clip, reference_sample_rate=22050))


def test_the_cli_says_words_as_told_and_names_an_entry_the_voice_cannot_say(
    server: TritonServer, tmp_path: Path
) -> None:
    def say_cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "triton_tts.cli", "say", SENTENCE, "--url", server.http_url, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    out = tmp_path / "tomato.wav"
    assert say_cli("--say", f"tomato={POTATO}", "--say", "soup=sˈuːp", "-o", str(out)).returncode == 0
    assert sf.info(str(out)).frames > 0
    refused = say_cli("--say", "snow=☃", "-o", str(tmp_path / "snow.wav"))
    assert refused.returncode == 1 and "LEXICON entry 'snow'" in refused.stderr.strip().splitlines()[-1]
    assert say_cli("--say", "tomato").returncode == 2  # argparse: expected WORD=PHONEMES
