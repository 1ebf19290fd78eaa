"""Dubbing (issue 27): subtitle cues in, one timed track out, through the real server.

The cue files are written by the ``srt`` and ``webvtt-py`` libraries, and the slots are
set from each text's natural length, measured first through the same server: a roomy
slot, one a little tight (sped up), one far too tight with a gap after it (an overrun),
one far too tight with the next cue at its end (cut there). The track is checked with
this file's own measures: silence before each onset and speech in the first 20 ms frame
after it, nothing past the next cue's start, the length from the original.
"""

from __future__ import annotations

import json
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf
import srt
import webvtt
from hypothesis import given, settings
from hypothesis import strategies as st

from triton_tts.cli import main as cli_main
from triton_tts.client import RequestRejected, SynthesisResult, TTSClient
from triton_tts.client.dubbing import STATUSES, Dubber
from triton_tts.client.subtitles import Cue, SubtitleError, parse_subtitles, read_cues
from triton_tts.ops.server import TritonServer

FRAME = 0.020


def rms_db(audio: npt.NDArray[np.float32]) -> float:
    return float(10 * np.log10(np.mean(np.square(audio.astype(np.float64))) + 1e-20))


# reading subtitle files


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5_000),
            st.integers(1, 9_000),
            st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1, max_size=30),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_cues_the_subtitle_libraries_write_read_back_the_same(parts: list[tuple[int, int, str]]) -> None:
    subs: list[srt.Subtitle] = []
    vtt, at = webvtt.WebVTT(), 0
    for gap, length, text in parts:
        start, at = at + gap, at + gap + length
        subs.append(
            srt.Subtitle(len(subs) + 1, timedelta(milliseconds=start), timedelta(milliseconds=at), text)
        )
        vtt.captions.append(webvtt.Caption(_vtt(start), _vtt(at), text))
    for got in (parse_subtitles(srt.compose(subs), "srt"), parse_subtitles(vtt.content, "vtt")):
        assert [(c.start, c.end, c.text) for c in got] == [
            (s.start.total_seconds(), s.end.total_seconds(), " ".join(s.content.split())) for s in subs
        ]


def _vtt(ms: int) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}.{rest % 1000:03d}"


GOOD_SRT = "1\n00:00:01,000 --> 00:00:02,000\nHello.\n\n2\n00:00:03,000 --> 00:00:04,000\nWorld.\n"


@pytest.mark.parametrize(
    ("text", "fmt", "line", "words"),
    [
        (GOOD_SRT.replace("00:00:03,000 -->", "00:00:0x,000 -->"), "srt", 6, "malformed timing"),
        (GOOD_SRT.replace("00:00:03,000 -->", "00:00:01,500 -->"), "srt", 6, "may not overlap"),
        # a cue before the one above it is out of order, not overlapping (issue 43)
        (GOOD_SRT.replace("00:00:03,000 --> 00:00:04,000", "00:00:00,100 --> 00:00:00,500"), "srt", 6,
         "cues out of order: the cue starts at 0.100 s, before the cue above it (line 2) starts at 1.000 s"),
        (GOOD_SRT.replace("00:00:03,000 --> 00:00:04,000", "00:00:00,500 --> 00:00:01,500"), "srt", 6,
         "out of order"),
        # a mistyped timing line is blamed itself (not the cue number above it), with the grammar
        (GOOD_SRT.replace("00:00:03,000 -->", "00:00:03,000 ->"), "srt", 6,
         "malformed timing '00:00:03,000 -> 00:00:04,000': expected a timing line like 00:00:01,000 --> "),
        (GOOD_SRT.replace("00:00:03,000 -->", "00:00:03,000 —>"), "srt", 6, "malformed timing"),
        (GOOD_SRT.replace("00:00:03,000 -->", "00:00:03,000"), "srt", 6, "malformed timing"),
        (GOOD_SRT.replace("00:00:03,000 --> 00:00:04,000\n", ""), "srt", 6, "malformed timing 'World.'"),
        (GOOD_SRT.replace("Hello.\n\n", "Hello.\n"), "srt", 5, "a timing line inside the cue above's text"),
        (GOOD_SRT.replace("World.", "<i> </i>"), "srt", 6, "no text"),
        (GOOD_SRT.replace("--> 00:00:02,000", "--> 00:00:00,500"), "srt", 2, "before it starts"),
        (GOOD_SRT + "\nstray words\n", "srt", 9, "without a timing line"),
        (GOOD_SRT.replace(",", "."), "vtt", 1, "WEBVTT"),
        ("WEBVTT\n\n00:01.000 --> 00:02.000\nHi.\n\n00:03.000 -> 00:04.000\nThere.\n", "vtt", 6,
         "malformed timing '00:03.000 -> 00:04.000': expected a timing line like 00:00:01.000 --> "),
        ("WEBVTT\n\n00:01.000 --> 00:02.000\nHi.\n\nsecond\n00:03.000 = 00:04.000\nThere.\n", "vtt", 7,
         "malformed timing"),
        ("WEBVTT\n\n00:01.000 --> 00:02.000\nHi.\n\nJust words.\n", "vtt", 6, "text without a timing line"),
    ],
)  # fmt: skip
def test_a_bad_subtitle_file_is_refused_with_its_line(text: str, fmt: str, line: int, words: str) -> None:
    with pytest.raises(SubtitleError) as refused:
        parse_subtitles(text, fmt, "film")
    assert refused.value.line == line and words in str(refused.value)
    assert str(refused.value).startswith(f"film:{line}: ")


LINES = st.sampled_from(
    ["", "1", "2", "00:00:01,000 --> 00:00:02,000", "00:00:00,500 --> 00:00:03,000", "00:02.500 -> 00:04.000",
     "00:01.000 --> 00:02.000", "WEBVTT", "NOTE x", "Hello.", "<i></i>", "♪♪", "10:30 sharp", "-->",
     "{\\an8}"]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(LINES, st.text("0123456789:,.-> <>i\n", max_size=40)), max_size=14),
       st.sampled_from(["srt", "vtt"]))  # fmt: skip
def test_any_file_gives_cues_in_order_or_a_refusal_naming_a_line_of_it(lines: list[str], fmt: str) -> None:
    text = "\n".join(lines)
    try:
        cues = parse_subtitles(text, fmt, "odd")
    except SubtitleError as refused:
        assert refused.line is None or 1 <= refused.line <= max(1, len(text.splitlines())), refused
        return
    for before, cue in zip([None, *cues], cues, strict=False):
        assert cue.text and cue.start < cue.end and (before is None or before.end <= cue.start)
        assert "-->" in text.splitlines()[cue.line - 1]  # its line is its timing line


def test_webvtt_markup_and_blocks_that_are_not_cues(tmp_path: Path) -> None:
    path = tmp_path / "a.vtt"
    path.write_text(
        "WEBVTT - a film\nKind: captions\n\nNOTE a note\nover lines\n\nSTYLE\n::cue { color: red }\n\n"
        "intro\n01:02.500 --> 01:04.000 align:start\n<v Ann>Tom &amp; <i>Jerry</i></v>\nagain\n",
        encoding="utf-8",
    )
    (cue,) = read_cues(path)
    assert (cue.line, cue.start, cue.end, cue.text) == (11, 62.5, 64.0, "Tom & Jerry again")
    with pytest.raises(SubtitleError, match="unsupported subtitle format"):
        read_cues(path.with_suffix(".ass"))


# dubbing, with a stand-in for the server: speech of 50 ms a character at speed 1, shrinking
# as 1 / speed; a text without a letter or digit refused as the server refuses it


RATE = 16_000


def stand_in(said: list[str]) -> Any:
    def synthesize(text: str, speed: float) -> SynthesisResult:
        said.append(text)
        if not any(ch.isalnum() for ch in text):
            raise RequestRejected("TEXT has nothing the voice can pronounce")
        return SynthesisResult(np.full(round(0.05 * len(text) * RATE / speed), 0.5, np.float32), RATE)

    return synthesize


LONG = "A line far too long for its slot."  # 1.65 s at speed 1
CUES = [
    Cue(1, 2, 0.0, 2.0, "Hello there."),  # fits
    Cue(2, 6, 3.0, 4.0, "♪♪"),  # nothing to say: left silent
    Cue(3, 10, 5.0, 5.46, "Tight fit."),  # 0.5 s in 0.46 s: sped up
    Cue(4, 14, 6.0, 6.3, LONG),  # cut where cue 5 starts
    Cue(5, 18, 6.3, 6.6, LONG),  # the last: runs on (overrun)
]


def test_a_cue_the_voice_cannot_say_is_left_silent_and_listed_and_the_summary_counts_each_cue_once() -> None:
    dub = Dubber(stand_in([]), concurrency=3).dub(CUES, source="film.srt")
    assert [c.status for c in dub.cues] == ["fits", "silent", "sped_up", "cut", "overrun"]
    silent = dub.cues[1]
    assert (silent.line, silent.reason) == (6, "TEXT has nothing the voice can pronounce")
    assert silent.start == silent.end == 3.0 and not np.any(dub.track[3 * RATE : 4 * RATE])
    assert np.all(dub.track[round(5.0 * RATE) : round(5.4 * RATE)])  # the rest dubbed
    listed = json.loads(dub.report_json())["cues"][1]
    assert (listed["status"], listed["line"], listed["reason"]) == ("silent", 6, silent.reason)
    assert "♪" not in dub.report_vtt()
    assert_counted_once(dub.summary(), dict.fromkeys(STATUSES, 1))


def assert_counted_once(summary: dict[str, Any], counts: dict[str, int]) -> None:
    """Every cue counted once, by its status, and each share its count's (issue 43: a
    summary said 0 sped up beside a share of 0.4 sped up)."""
    assert {s: summary[s] for s in STATUSES} == counts and summary["cues"] == sum(counts.values()), summary
    assert all(summary[f"{s}_share"] == round(counts[s] / summary["cues"], 4) for s in STATUSES), summary


def test_strict_stops_at_a_cue_the_voice_cannot_say_and_so_does_a_file_with_none_it_can() -> None:
    said: list[str] = []
    with pytest.raises(SubtitleError) as stopped:
        Dubber(stand_in(said), concurrency=1, strict=True).dub(CUES, source="film.srt")
    assert (
        str(stopped.value) == "film.srt:6: cue 2 cannot be spoken (TEXT has nothing the voice can pronounce)"
    )
    assert said == ["Hello there.", "♪♪"]  # nothing begun after it
    with pytest.raises(SubtitleError) as nothing:
        Dubber(stand_in([])).dub([CUES[1], Cue(2, 10, 5.0, 6.0, "...")], source="film.srt")
    assert str(nothing.value).startswith("film.srt:6: cue 2 cannot be spoken, nor any of the other 1 (TEXT")


# dubbing through the server


def natural_seconds(server: TritonServer, texts: list[str], draws: int = 3) -> list[float]:
    """Each text's speech at speed 1, leading and trailing silence left out, measured here
    (20 ms frames within 40 dB of the loudest): the median of ``draws`` syntheses, as the
    voice's noise makes each a little longer or shorter."""
    out = []
    with TTSClient(server.http_url) as client:
        for text in texts:
            lengths = []
            for _ in range(draws):
                result = client.synthesize(text)
                frame = round(FRAME * result.sample_rate)
                n = len(result.audio) // frame
                levels = np.array([rms_db(result.audio[i * frame : (i + 1) * frame]) for i in range(n)])
                loud = np.flatnonzero(levels > levels.max() - 40)
                lengths.append((loud[-1] + 1 - loud[0]) * FRAME)
            out.append(float(np.median(lengths)))
    return out


TEXTS = [
    "Good morning.",
    "The train to the coast leaves from the second platform.",
    "Nobody expected the storm to reach the harbour before the boats were safely tied up.",
    "She packed the maps, the lantern and enough bread for three long days on the road.",
    "Then we were home.",
]


def test_a_subtitle_file_is_dubbed_on_time_sped_up_where_tight_and_never_overlapping(
    server: TritonServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    natural = natural_seconds(server, TEXTS)
    slots = [
        (0.5, natural[0] + 1.0),  # roomy
        (None, natural[1] / 1.08),  # a little tight: sped up
        (None, natural[2] / 2.0),  # far too tight, with a gap after it: overrun
        (None, natural[3] / 2.0),  # far too tight, the next cue at its end: cut
        (None, natural[4] + 0.5),
    ]
    gaps = [0.6, 0.4, natural[2] / 2.0, 0.0]  # after cue 1, 2, 3, 4
    subs, at = [], 0.0
    for i, ((start, slot), text) in enumerate(zip(slots, TEXTS, strict=True)):
        begin = start if start is not None else at + gaps[i - 1]
        begin, end = round(begin, 3), round(begin + slot, 3)
        subs.append(srt.Subtitle(i + 1, timedelta(seconds=begin), timedelta(seconds=end), text))
        at = end
    cues_file = tmp_path / "film.srt"
    cues_file.write_text(srt.compose(subs), encoding="utf-8")
    original = tmp_path / "original.wav"
    original_s = at + 2.0
    sf.write(original, np.zeros(round(original_s * 16000), np.float32), 16000)
    track_file = tmp_path / "dub.wav"
    code = cli_main(["dub", str(cues_file), "-o", str(track_file), "--original", str(original),
                     "--url", server.http_url, "--no-progress"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    track, rate = sf.read(track_file, dtype="float32")
    report = json.loads(track_file.with_suffix(".json").read_text(encoding="utf-8"))
    cues = report["cues"]
    assert len(track) == round(original_s * rate)  # the original's length
    frame, ms = round(FRAME * rate), round(0.001 * rate)
    previous_end = -ms
    for sub, cue in zip(subs, cues, strict=True):
        onset = round(sub.start.total_seconds() * rate)
        assert cue["start"] == pytest.approx(sub.start.total_seconds(), abs=1 / rate)
        # silence from the previous speech's end (the report's times are to the ms)
        assert not np.any(track[previous_end + ms : onset]), f"sound before cue {cue['index']}'s start"
        previous_end = round(cue["end"] * rate)
        speech = track[onset:previous_end]
        loudest = max(rms_db(speech[i : i + frame]) for i in range(0, len(speech) - frame + 1, frame))
        # speech (within 40 dB of the cue's loudest frame, as natural_seconds measures it)
        # in the first 20 ms frame from the cue's start; 1 dB for the resampling to the
        # original's rate (the dub trims by that rule at the voice's rate)
        assert rms_db(track[onset : onset + frame]) > loudest - 41, f"cue {cue['index']} starts late"
        assert np.any(track[previous_end - frame : previous_end])
    for this, following in pairwise(cues):
        assert this["end"] <= following["cue_start"] + 1e-9  # never into the next cue
    fits, tight, overrun, cut, last = cues
    assert (fits["status"], fits["speed"], fits["overrun_s"]) == ("fits", 1.0, 0.0)
    assert tight["status"] == "sped_up" and 1.0 < tight["speed"] <= 1.25
    assert tight["end"] <= tight["cue_end"] + FRAME and tight["end"] - tight["start"] < natural[1] - 0.1
    assert overrun["status"] == "overrun" and overrun["speed"] == 1.25 and overrun["overrun_s"] > 0
    assert overrun["cut_s"] == 0 and overrun["end"] > overrun["cue_end"]
    assert cut["status"] == "cut" and cut["cut_s"] > 0 and cut["end"] == pytest.approx(last["cue_start"])
    assert last["status"] == "fits"
    assert (
        f"film.srt:{overrun['line']}: cue 3 runs" in out.err
        and f"film.srt:{cut['line']}: cue 4 runs" in out.err
    )
    assert_counted_once(report["summary"], {"fits": 2, "sped_up": 1, "overrun": 1, "cut": 1, "silent": 0})
    # the report's WebVTT: the speech as placed, with each word's actual time
    placed = webvtt.read(str(track_file.with_suffix(".vtt"))).captions
    times = [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in placed]
    assert times == [(round(c["start"] * 1000), round(c["end"] * 1000)) for c in cues]
    for caption, cue in zip(placed, cues, strict=True):
        words = cue["words"]
        assert caption.text.split() == [w["word"] for w in words][: len(caption.text.split())]
        assert all(cue["start"] <= w["start"] < cue["end"] for w in words)
        assert [w["start"] for w in words] == sorted(w["start"] for w in words)


def test_a_dub_without_an_original_ends_with_its_last_cue_at_the_asked_rate(
    server: TritonServer, tmp_path: Path
) -> None:
    cues_file = tmp_path / "two.vtt"
    cues_file.write_text(
        "WEBVTT\n\n00:00.250 --> 00:02.000\nOne line.\n\n00:02.500 --> 00:05.000\nAnd another.\n",
        encoding="utf-8",
    )
    track_file = tmp_path / "two.flac"
    code = cli_main(["dub", str(cues_file), "-o", str(track_file), "--sample-rate", "16000",
                     "--protocol", "grpc", "--url", server.grpc_url, "--no-progress"])  # fmt: skip
    assert code == 0
    info = sf.info(track_file)
    assert (info.samplerate, info.format) == (16000, "FLAC")
    assert info.frames == 5 * 16000


SUNG = (
    "1\n00:00:00,200 --> 00:00:02,000\nGood morning.\n\n2\n00:00:02,500 --> 00:00:03,500\n♪♪\n\n"
    "3\n00:00:04,000 --> 00:00:06,000\nGood night.\n"
)


def test_a_cue_the_voice_cannot_say_is_left_silent_and_listed_unless_strict(
    server: TritonServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cues_file = tmp_path / "film.srt"
    cues_file.write_text(SUNG, encoding="utf-8")
    track_file = tmp_path / "dub.wav"
    argv = ["dub", str(cues_file), "-o", str(track_file), "--url", server.http_url, "--no-progress"]
    assert cli_main(argv) == 0
    out = capsys.readouterr()
    assert "film.srt:6: cue 2 left silent: TEXT has nothing the voice can pronounce" in out.err
    assert "0 cut, 1 silent)" in out.out
    report = json.loads(track_file.with_suffix(".json").read_text(encoding="utf-8"))
    assert [c["status"] for c in report["cues"]] == ["fits", "silent", "fits"]
    assert report["summary"]["silent"] == 1 and report["summary"]["silent_share"] == round(1 / 3, 4)
    track, rate = sf.read(track_file, dtype="float32")
    first, last = report["cues"][0], report["cues"][2]
    assert not np.any(track[round(first["end"] * rate) + 1 : round(4.0 * rate)])  # cue 2's slot silent
    assert np.any(track[round(4.0 * rate) : round(last["end"] * rate)])  # cue 3 said after it
    # --strict: the dub stops at the cue, naming its line, and writes nothing
    strict = tmp_path / "strict.wav"
    assert cli_main([*argv[:2], "-o", str(strict), *argv[4:], "--strict"]) == 1
    assert (
        "film.srt:6: cue 2 cannot be spoken (TEXT has nothing the voice can pronounce)"
        in capsys.readouterr().err
    )
    assert not strict.exists()


def test_dub_refuses_a_bad_file_naming_the_line_before_calling_anyone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.srt"
    bad.write_text(GOOD_SRT.replace("World.", ""), encoding="utf-8")
    assert cli_main(["dub", str(bad), "-o", str(tmp_path / "t.wav"), "--url", "localhost:1"]) == 1
    assert "bad.srt:6: the cue has no text" in capsys.readouterr().err
    assert not (tmp_path / "t.wav").exists()


# placing lines by the original's speech: the vad model


@pytest.fixture(scope="module")
def original(
    server: TritonServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[tuple[float, float]]]:
    """A recording of sentences said by the server with pauses of drawn lengths between
    them (and before the first), and each sentence's true speech span, measured here."""
    rng = np.random.default_rng(27)
    sentences = [
        "The first sentence is here.",
        "Then a second one follows it.",
        "And the last one ends it all.",
    ]
    with TTSClient(server.http_url) as client:
        takes = [client.synthesize(text) for text in sentences]
    rate = takes[0].sample_rate
    pieces, spans, at = [], [], 0
    for take in takes:
        pause = np.zeros(round(rng.uniform(0.6, 2.0) * rate), np.float32)
        frame = round(FRAME * rate)
        levels = np.array(
            [rms_db(take.audio[i : i + frame]) for i in range(0, len(take.audio) - frame, frame)]
        )
        loud = np.flatnonzero(levels > levels.max() - 40)
        speech = take.audio[loud[0] * frame : (loud[-1] + 1) * frame]
        at += len(pause)
        spans.append((at / rate, (at + len(speech)) / rate))
        pieces += [pause, speech]
        at += len(speech)
    pieces.append(np.zeros(rate, np.float32))
    path = tmp_path_factory.mktemp("original") / "original.wav"
    sf.write(path, np.concatenate(pieces), rate, subtype="FLOAT")
    return path, spans


def test_the_vad_model_is_silero_s_own_graph_with_a_config_per_variant(server: TritonServer) -> None:
    import zipfile

    from triton_tts.build.model_configs import parse
    from triton_tts.build.vad_graph import MEMBER
    from triton_tts.contract.paths import data_home

    repo = Path(server.model_repository)
    (wheel,) = (data_home() / ".wheelhouse" / "vad").glob("silero_vad-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert (repo / "vad" / "1" / "model.onnx").read_bytes() == archive.read(MEMBER)
    for file, backend in (("config.pbtxt", "python"), ("configs/gpu.pbtxt", "onnxruntime")):
        config = parse((repo / "vad" / file).read_text(encoding="utf-8"))
        assert config.backend == backend and [t.name for t in config.input] == ["input", "h", "c"]
        assert [list(t.dims) for t in config.input] == [[-1, 576], [1, 1, 128], [1, 1, 128]]


def test_the_vad_model_finds_the_pauses_of_an_original(
    server: TritonServer, original: tuple[Path, list[tuple[float, float]]]
) -> None:
    path, spans = original
    audio, rate = sf.read(path, dtype="float32")
    for url, protocol in ((server.http_url, "http"), (server.grpc_url, "grpc")):
        with TTSClient(url, protocol) as client:  # type: ignore[arg-type]
            regions = client.speech_regions(audio, rate)
        assert len(regions) == len(spans)
        for region, (start, end) in zip(regions, spans, strict=True):
            assert abs(region.start - start) <= 0.05 and abs(region.end - end) <= 0.2, (region, start, end)


def test_a_script_is_placed_at_the_speech_onsets_and_cues_snap_to_them(
    server: TritonServer, original: tuple[Path, list[tuple[float, float]]], tmp_path: Path
) -> None:
    path, spans = original
    script = tmp_path / "script.txt"
    script.write_text("Good morning to you.\n\nA line of the dub.\nThe end.\n", encoding="utf-8")
    track = tmp_path / "placed.wav"
    assert cli_main(["dub", str(script), "--original", str(path), "-o", str(track), "--url", server.http_url,
                     "--no-progress"]) == 0  # fmt: skip
    report = json.loads(track.with_suffix(".json").read_text(encoding="utf-8"))
    assert [c["line"] for c in report["cues"]] == [1, 3, 4]
    for cue, (start, _) in zip(report["cues"], spans, strict=True):
        assert abs(cue["start"] - start) <= 0.05
    assert sf.info(track).duration == pytest.approx(sf.info(path).duration, abs=1e-3)
    # timed cues near the onsets are moved onto them; one beyond the bound stays
    off = [spans[0][0] + 0.3, spans[1][0] - 0.2, spans[2][0] + 0.9]
    subs = [srt.Subtitle(i + 1, timedelta(seconds=round(s, 3)), timedelta(seconds=round(s + 0.8, 3)), text)
            for i, (s, text) in enumerate(zip(off, ["One.", "Two.", "Three."], strict=True))]  # fmt: skip
    timed = tmp_path / "timed.srt"
    timed.write_text(srt.compose(subs), encoding="utf-8")
    assert cli_main(["dub", str(timed), "--original", str(path), "--snap", "0.5", "-o", str(track),
                     "--url", server.http_url, "--no-progress"]) == 0  # fmt: skip
    cues = json.loads(track.with_suffix(".json").read_text(encoding="utf-8"))["cues"]
    assert abs(cues[0]["start"] - spans[0][0]) <= 0.05 and abs(cues[1]["start"] - spans[1][0]) <= 0.05
    assert cues[0]["moved_s"] == pytest.approx(cues[0]["start"] - round(off[0], 3), abs=1e-3)
    assert cues[2]["start"] == pytest.approx(round(off[2], 3)) and cues[2]["moved_s"] == 0


def test_more_script_lines_than_speech_and_bad_vad_requests_are_refused(
    server: TritonServer, original: tuple[Path, list[tuple[float, float]]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    path, spans = original
    script = tmp_path / "long.txt"
    script.write_text("\n".join(f"Line {n}." for n in range(1, len(spans) + 3)), encoding="utf-8")
    assert cli_main(["dub", str(script), "--original", str(path), "-o", str(tmp_path / "x.wav"),
                     "--url", server.http_url, "--no-progress"]) == 1  # fmt: skip
    assert (
        f"long.txt:{len(spans) + 1}: {len(spans) + 2} lines but {len(spans)} speech regions"
        in capsys.readouterr().err
    )
    assert cli_main(["dub", str(script), "-o", str(tmp_path / "x.wav"), "--url", server.http_url]) == 1
    assert "a script needs --original" in capsys.readouterr().err
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        frames = grpcclient.InferInput("input", [2, 100], "FP32")
        frames.set_data_from_numpy(np.zeros((2, 100), np.float32))
        states = []
        for name in ("h", "c"):
            states.append(grpcclient.InferInput(name, [1, 1, 128], "FP32"))
            states[-1].set_data_from_numpy(np.zeros((1, 1, 128), np.float32))
        with pytest.raises(InferenceServerException) as refused:
            client.infer("vad", [frames, *states])
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        frames = grpcclient.InferInput("input", [2, 576], "FP32")
        frames.set_data_from_numpy(np.zeros((2, 576), np.float32))
        assert client.infer("vad", [frames, *states]).as_numpy("speech_probs").shape == (2,)
    finally:
        client.close()


# the gateway: POST /v1/audio/dub


def test_the_gateway_dubs_an_upload_and_refuses_bad_ones_by_field(
    gateway: str, original: tuple[Path, list[tuple[float, float]]]
) -> None:
    import io
    import zipfile

    import requests

    path, spans = original
    url = f"{gateway}/v1/audio/dub"
    timed = [(0.5, 2.5, "Good evening."), (3.0, 3.4, "This line is far too long for its slot."),
             (4.5, 6.0, "Goodbye.")]  # fmt: skip
    cues = srt.compose(
        [
            srt.Subtitle(i, timedelta(seconds=a), timedelta(seconds=b), t)
            for i, (a, b, t) in enumerate(timed, 1)
        ]
    )
    done = requests.post(
        url, files={"file": ("film.srt", cues)}, data={"response_format": "flac"}, timeout=120
    )
    assert done.status_code == 200, done.text
    assert done.headers["content-type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(done.content))
    assert sorted(archive.namelist()) == ["dub.flac", "dub.json", "dub.vtt"]
    report = json.loads(archive.read("dub.json"))
    track, rate = sf.read(io.BytesIO(archive.read("dub.flac")), dtype="float32")
    assert len(track) / rate == pytest.approx(6.0, abs=1 / rate)
    assert [c["start"] for c in report["cues"]] == [0.5, 3.0, 4.5]
    second = report["cues"][1]
    assert second["speed"] == 1.25 and second["status"] == "cut" and second["end"] == 4.5
    assert json.loads(done.headers["x-dub-summary"])["cut"] == 1
    # a cue the voice cannot say: left silent and listed, or with strict a 400 naming its line
    sung = cues.replace("Goodbye.", "♪♪")
    silent = requests.post(url, files={"file": ("film.srt", sung)}, timeout=120)
    assert silent.status_code == 200, silent.text
    listed = json.loads(zipfile.ZipFile(io.BytesIO(silent.content)).read("dub.json"))["cues"][2]
    assert (listed["status"], listed["line"]) == ("silent", 10)
    assert json.loads(silent.headers["x-dub-summary"])["silent"] == 1
    stopped = requests.post(url, files={"file": ("film.srt", sung)}, data={"strict": "true"}, timeout=120)
    error = stopped.json()["error"]
    assert stopped.status_code == 400 and error["param"] == "file", error
    assert error["message"].startswith("film.srt:10: cue 3 cannot be spoken (TEXT has nothing"), error
    # a script placed by the original's speech
    script = "\n".join(f"Line number {n}." for n in range(1, len(spans) + 1))
    uploads: dict[str, Any] = {
        "file": ("script.txt", script),
        "original": ("original.wav", path.read_bytes()),
    }
    placed = requests.post(url, files=uploads, timeout=120)
    assert placed.status_code == 200, placed.text
    starts = [
        c["start"] for c in json.loads(zipfile.ZipFile(io.BytesIO(placed.content)).read("dub.json"))["cues"]
    ]
    assert all(abs(s - span[0]) <= 0.05 for s, span in zip(starts, spans, strict=True))
    # refusals, each naming its field (and a bad file its line)
    bad = cues.replace("00:00:03,000 -->", "00:00:02,000 -->")
    cases: list[tuple[dict[str, Any], dict[str, str], str, str]] = [
        ({"file": ("film.srt", bad)}, {}, "file", "film.srt:6: the cue starts at 2.000 s"),
        ({"file": ("film.ass", cues)}, {}, "file", "unsupported format"),
        ({"file": ("script.txt", script)}, {}, "original", "needs the 'original'"),
        ({"file": ("film.srt", cues)}, {"max_speed": "9"}, "max_speed", "max_speed"),
        (
            {"file": ("film.srt", cues), "original": ("o.wav", b"not audio")},
            {},
            "original",
            "not an audio file",
        ),
        ({"other": ("film.srt", cues)}, {}, "file", "one file field named 'file'"),
    ]
    for files, data, field, words in cases:
        refused = requests.post(url, files=files, data=data, timeout=60)
        error = refused.json()["error"]
        assert refused.status_code == 400 and error["param"] == field and words in error["message"], error
    assert (
        requests.post(url, data=b"{}", headers={"Content-Type": "application/json"}, timeout=60).status_code
        == 400
    )
