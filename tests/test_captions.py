"""Captions from timed words (triton_tts.client.captions): how words are set as cues, and
WebVTT and SubRip files that their own parsers (webvtt-py, srt) read back as written."""

from __future__ import annotations

import html
import itertools

import pytest
import srt as srt_parser
import webvtt as webvtt_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from triton_tts.client.captions import MAX_CHARS, Cue, captions, cues, srt, webvtt
from triton_tts.client.datatypes import WordTime


def timed(*items: tuple[str, float, float]) -> list[WordTime]:
    return [WordTime(*item) for item in items]


def test_a_sentence_end_and_a_pause_start_a_new_cue() -> None:
    words = timed(
        ("Hello", 0.10, 0.40),
        ("there.", 0.45, 0.80),  # a sentence ends
        ("How", 0.90, 1.00),
        ("are", 1.02, 1.10),
        ("you", 1.12, 1.30),
        ("today", 2.50, 2.90),  # after a 1.2 s pause
    )
    assert cues(words) == [
        Cue(0.10, 0.80, "Hello there."),
        Cue(0.90, 1.30, "How are you"),
        Cue(2.50, 2.90, "today"),
    ]


def test_a_quoted_sentence_end_counts() -> None:
    words = timed(('"Stop."', 0.0, 0.5), ("She", 0.55, 0.7), ("left.)", 0.7, 1.0), ("Then", 1.0, 1.2))
    assert [c.text for c in cues(words)] == ['"Stop."', "She left.)", "Then"]


def test_cues_keep_to_the_line_length_and_the_duration() -> None:
    words = [WordTime(f"word{n:02d}", n * 0.3, n * 0.3 + 0.25) for n in range(40)]
    set_ = cues(words)
    assert all(len(c.text) <= MAX_CHARS for c in set_)
    assert " ".join(c.text for c in set_) == " ".join(w.word for w in words)
    slow = [WordTime(f"w{n}", n * 2.0, n * 2.0 + 0.5) for n in range(10)]  # no pauses counted
    assert all(c.end - c.start <= 7.0 for c in cues(slow, pause_s=5.0))


def test_a_word_longer_than_a_line_is_a_cue_alone() -> None:
    long = "x" * (MAX_CHARS + 10)
    assert [c.text for c in cues(timed(("a", 0, 0.1), (long, 0.1, 0.9), ("b", 0.9, 1.0)))] == ["a", long, "b"]


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        cues([], max_chars=0)
    with pytest.raises(ValueError, match="unknown caption format 'ass'"):
        captions([], "ass")


def test_webvtt_escapes_markup_and_the_arrow() -> None:
    text = webvtt(timed(("<b>", 0.0, 0.2), ("A&B", 0.2, 0.4), ("-->", 0.4, 0.6)))
    assert text.startswith("WEBVTT\n\n1\n00:00:00.000 --> 00:00:00.600\n")
    assert "&lt;b&gt; A&amp;B --&gt;" in text
    parsed = webvtt_parser.from_string(text).captions
    assert [html.unescape(c.text) for c in parsed] == ["<b> A&B -->"]


def test_hours_and_milliseconds_are_written_out() -> None:
    words = timed(("late", 3725.0426, 3726.5))  # 1 h 2 min 5.0426 s
    assert "01:02:05,043 --> 01:02:06,500" in srt(words)
    assert "01:02:05.043 --> 01:02:06.500" in webvtt(words)


def _seconds(clock: str) -> float:
    hours, minutes, seconds = clock.replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


word_text = st.text(
    alphabet=st.characters(categories=["L", "N", "P", "S"], exclude_characters="\r\n"),
    min_size=1,
    max_size=12,
)


@st.composite
def timed_words(draw: st.DrawFn) -> list[WordTime]:
    texts = draw(st.lists(word_text, min_size=1, max_size=40))
    gaps = draw(st.lists(st.floats(0, 1.5), min_size=len(texts), max_size=len(texts)))
    lengths = draw(st.lists(st.floats(0.01, 1.0), min_size=len(texts), max_size=len(texts)))
    words, clock = [], 0.0
    for text, gap, length in zip(texts, gaps, lengths, strict=True):
        start = clock + gap
        words.append(WordTime(text, start, start + length))
        clock = start + length
    return words


@settings(max_examples=150, deadline=None)
@given(timed_words())
def test_both_formats_read_back_as_their_cues(words: list[WordTime]) -> None:
    set_ = cues(words)
    assert " ".join(c.text for c in set_) == " ".join(w.word for w in words)  # all words, in order
    for cue, after in itertools.pairwise(set_):
        assert cue.start <= cue.end <= after.start  # no overlaps
    assert all(len(c.text) <= MAX_CHARS or " " not in c.text for c in set_)

    subtitles = list(srt_parser.parse(srt(words)))
    assert [s.index for s in subtitles] == list(range(1, len(set_) + 1))
    for subtitle, cue in zip(subtitles, set_, strict=True):
        assert subtitle.content == cue.text.strip()  # srt strips a cue's outer whitespace
        assert abs(subtitle.start.total_seconds() - cue.start) <= 0.0005
        assert abs(subtitle.end.total_seconds() - cue.end) <= 0.0005

    captions_read = webvtt_parser.from_string(webvtt(words)).captions
    assert len(captions_read) == len(set_)
    for caption, cue in zip(captions_read, set_, strict=True):
        assert html.unescape(caption.text) == cue.text.strip()
        assert abs(_seconds(caption.start) - cue.start) <= 0.0005
        assert abs(_seconds(caption.end) - cue.end) <= 0.0005
