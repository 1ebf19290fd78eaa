"""Pronunciations under the caller's control (triton_tts/text/pronounce.py): lexicon files
read and refused by line, entries matched as documented, the reader saying the phonemes
given; then through the real server: a lexicon served with ``--lexicon`` and SSML's
``phoneme`` make the voice say what they say (a recogniser hears it), words keep their
written form in the timestamps, a request's own entry (LEXICON) wins over a served one for
that request only, and bad phonemes are a clear 400."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.helpers import timed_words, tts_inputs
from triton_tts.build.build_options import BuildOptions
from triton_tts.contract import paths
from triton_tts.contract.validation import InvalidRequest
from triton_tts.contract.voice import Voice
from triton_tts.ops.server import TritonServer, default_voice_server
from triton_tts.quality.intelligibility import transcribe
from triton_tts.text.phonemize import espeak
from triton_tts.text.pronounce import Lexicon, load_lexicon, mark, parse_lexicon
from triton_tts.text.reader import TextReader

POTATO = espeak("en-us").symbols(["potato"], "piper-phonemes")[0]  # what espeak says for it


def test_a_lexicon_file_is_read_and_its_mistakes_named_by_line(tmp_path: Path) -> None:
    good = "# names\nNguyen\tŋwˈɪn\n\nNew  York\tnˈuː jˈɔːk\n"
    lexicon = parse_lexicon(good, "en", "names.tsv")
    assert lexicon.entries == {"nguyen": "ŋwˈɪn", "new york": "nˈuː jˈɔːk"}
    for text, why in [
        ("Nguyen ŋwˈɪn\n", "names.tsv line 1: expected 'word<TAB>phonemes'"),
        ("ok\tˈoʊkeɪ\nNguyen\t\n", "names.tsv line 2: the word and its phonemes must both be given"),
        ("a\tˈeɪ\nA\tɐ\n", "line 2: 'A' is given twice, with different phonemes"),
        ("...\tdɑːts\n", "line 1: '...' has no letters or digits"),
        ("x\t\ue000\n", "line 1: private-use characters"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_lexicon(text, "en", "names.tsv")
    path = tmp_path / "lexicon.tsv"
    path.write_bytes(b"caf\xe9\tkafe\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_lexicon(str(path))
    with pytest.raises(ValueError, match="No such file"):
        load_lexicon(str(tmp_path / "absent.tsv"))
    with pytest.raises(ValueError, match="not a language tag"):
        load_lexicon(f"english!={path}")
    path.write_text("Nguyen\tŋwˈɪn\n", encoding="utf-8")
    assert load_lexicon(f"en-GB={path}").language == "en-gb" and load_lexicon(str(path)).language == "en"


def test_entries_match_whole_words_in_any_case_the_longest_first() -> None:
    lexicon = Lexicon("en", {"york": "jˈɔːk", "new york": "nˈuː jˈɔːk", "nguyen": "ŋwˈɪn"})
    text, applied = lexicon.apply("NGUYEN left New\nYork for york, not Yorkshire or Nguyens.")
    assert applied == [("NGUYEN", "ŋwˈɪn"), ("New\nYork", "nˈuː jˈɔːk"), ("york", "jˈɔːk")]
    assert text.count(mark("ŋwˈɪn")) == 1 and "Yorkshire" in text and "Nguyens" in text
    assert lexicon.serves("en-us") and lexicon.serves("en") and not lexicon.serves("eng")


def test_a_reader_says_the_phonemes_given_with_the_words_around_in_context() -> None:
    reader = TextReader(Voice.load(paths.default_voice_dir()))
    said = reader.phonemes(f"I ate a {mark(POTATO)}, then left.")
    assert said == f"aɪ ˈeɪt ɐ {POTATO}, ðˈɛn lˈɛft."  # "a" mid-clause: the article
    assert reader.read([f"I ate a {mark(POTATO)}."])[0].ids == reader.read(["I ate a potato."])[0].ids
    with pytest.raises(InvalidRequest, match=r"'☃'.*not among voice 'joe's phonemes"):
        reader.check(mark("☃a"))


@pytest.fixture(scope="module")
def lexicon_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    folder = tmp_path_factory.mktemp("lexicon")
    lexicon = parse_lexicon(f"tomato\t{POTATO}\n", "en", "test.tsv")
    with default_voice_server(
        folder / "model_repository", folder / "tritonserver.log", None, BuildOptions(lexicons=(lexicon,))
    ) as server:
        yield server


def _say(server: TritonServer, text: str, **options: object) -> tuple[npt.NDArray[np.float32], object]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    lexicon = options.pop("LEXICON", None)  # this request's entries (tests/test_request_lexicon.py)
    inputs = tts_inputs(grpcclient, text, NOISE_SCALE=0.0, NOISE_W=0.0, **options)  # type: ignore[arg-type]
    if lexicon is not None:
        inputs.append(grpcclient.InferInput("LEXICON", [1, 1], "BYTES"))
        inputs[-1].set_data_from_numpy(np.array([[str(lexicon).encode()]], dtype=np.object_))
    result = client.infer("tts", inputs)
    return result.as_numpy("AUDIO").reshape(-1), result


@pytest.mark.server
def test_a_served_lexicon_says_its_entry_and_times_the_written_word(lexicon_server: TritonServer) -> None:
    audio, result = _say(lexicon_server, "I like Tomato soup.", TIMESTAMPS=True)
    assert "potato" in transcribe(audio, 22050)
    assert [w for w, _, _ in timed_words(result)] == ["I", "like", "Tomato", "soup."]
    same, _ = _say(lexicon_server, "I like potato soup.")
    assert np.array_equal(audio, same)  # the entry's phonemes, exactly


@pytest.mark.server
def test_a_requests_entry_wins_over_the_served_one_for_that_request_only(
    lexicon_server: TritonServer,
) -> None:
    carrot = espeak("en-us").symbols(["carrot"], "piper-phonemes")[0]
    given, _ = _say(lexicon_server, "I like tomato soup.", LEXICON=json.dumps({"tomato": carrot}))
    assert np.array_equal(given, _say(lexicon_server, "I like carrot soup.")[0])
    served, _ = _say(lexicon_server, "I like tomato soup.")  # the served entry, as before
    assert np.array_equal(served, _say(lexicon_server, "I like potato soup.")[0])


def test_ssml_phoneme_says_its_phonemes(server: TritonServer) -> None:
    text = f'<speak>I like <phoneme alphabet="ipa" ph="{POTATO}">tomato</phoneme> soup.</speak>'
    audio, result = _say(server, text, TIMESTAMPS=True)
    same, _ = _say(server, "I like potato soup.")
    assert np.array_equal(audio, same)
    assert [w for w, _, _ in timed_words(result)] == ["I", "like", "tomato", "soup."]


def test_phonemes_the_voice_lacks_are_a_clear_400(server: TritonServer) -> None:
    with pytest.raises(InferenceServerException, match=r"'☃'.*not among voice 'joe's phonemes") as refused:
        _say(server, '<speak><phoneme ph="☃a">snow</phoneme></speak>')
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="alphabet 'x-sampa'"):
        _say(server, '<speak><phoneme alphabet="x-sampa" ph="t@">tomato</phoneme></speak>')


def test_a_callers_text_cannot_mark_phonemes(server: TritonServer) -> None:
    audio, _ = _say(server, f"I like {mark(POTATO)} soup.")  # the marks are taken out
    plain, _ = _say(server, f"I like {POTATO} soup.")
    assert np.array_equal(audio, plain)


def test_a_bad_lexicon_stops_the_build_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("fine\tfˈaɪn\nbroken line\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_tts.cli",
            "build-repo",
            "--out",
            str(tmp_path / "repo"),
            "--lexicon",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"triton-tts: {bad} line 2: expected 'word<TAB>phonemes', got 'broken line'"
    )


def test_frontend_shows_the_entries_that_applied(tmp_path: Path) -> None:
    lexicon = tmp_path / "names.tsv"
    lexicon.write_text("Nguyen\tŋwˈɪn\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", "frontend", "Mr. Nguyen called.", "--lexicon", str(lexicon)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert f"lexicon:       Nguyen -> ŋwˈɪn ({lexicon})" in done.stdout
    assert "pronunciation: mˈɪstɚ ŋwˈɪn kˈɔːld." in done.stdout
