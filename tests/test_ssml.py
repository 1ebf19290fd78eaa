"""SSML read into segments (triton_tts/text/ssml.py), without a server: each element of
the subset, hardened parsing (no DOCTYPE, entities or external references), and refusals
that name the element and where it is. tests/test_ssml_serving.py says it through Triton."""

from __future__ import annotations

from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triton_tts.contract.validation import InvalidRequest
from triton_tts.text.normalize import normalize_english
from triton_tts.text.ssml import Document, is_ssml, read


def english(text: str, speed: float = 1.0) -> Document:
    return read(text, normalize_english, english=True, speed=speed)


def said(text: str) -> str:
    return " ".join(s.text for s in english(text).segments)


def test_what_is_ssml() -> None:
    assert is_ssml("  <speak>Hi</speak>") and is_ssml("<speak version='1.1'>Hi</speak>")
    assert not is_ssml("Use <speak> tags") and not is_ssml("<speak>Hi</speak>", "text")
    assert is_ssml("Hi", "ssml")


def test_breaks_are_silence_after_what_comes_before() -> None:
    document = english(
        '<speak><break time="250ms"/>Please wait a moment.<break time="1500ms"/>'
        'Thank you for waiting.<break strength="weak"/><break/>Bye.<break time="2s"/></speak>'
    )
    assert document.lead_s == 0.25
    assert [(s.text, s.pause_s) for s in document.segments] == [
        ("Please wait a moment.", 1.5),
        ("Thank you for waiting.", 0.25 + 0.4),
        ("Bye.", 2.0),
    ]


def test_sentences_and_paragraphs_end_where_their_elements_do() -> None:
    document = english("<speak><p><s>One line</s><s>Another</s></p><p>Next</p></speak>")
    assert [s.text for s in document.segments] == ["One line. Another.", "Next."]
    assert [s.pause_s for s in document.segments] == [0.65, 0.65]


def test_prosody_sets_rate_and_volume_for_its_text() -> None:
    document = english(
        '<speak>Normal. <prosody rate="slow" volume="-6dB">Slow and soft.'
        '<prosody rate="200%">Nested.</prosody></prosody><prosody volume="silent">Hush.</prosody></speak>'
    )
    assert [(s.text, s.rate, s.gain_db) for s in document.segments] == [
        ("Normal.", 1.0, 0.0),
        ("Slow and soft.", 0.75, -6.0),
        ("Nested.", 1.5, -6.0),
        ("Hush.", 1.0, None),
    ]


@pytest.mark.parametrize(
    ("kind", "content", "reading"),
    [
        ("characters", "AB1", "ay bee one"),
        ("spell-out", "ssml", "ess ess em el"),
        ("verbatim", "a-b", "ay dash bee"),
        ("cardinal", "1,234", "one thousand two hundred and thirty-four"),
        ("cardinal", "-7", "minus seven"),
        ("ordinal", "21", "twenty-first"),
        ("digits", "2024", "two zero two four"),
        ("telephone", "555-0123", "five five five, zero one two three"),
        (
            "telephone",
            "+44 20 7946 0958",
            "plus four four, two zero, seven nine four six, zero nine five eight",
        ),
        ("fraction", "3/4", "three quarters"),
        ("fraction", "5/7", "five over seven"),
        ("time", "9:30", "nine thirty"),
        ("currency", "$3.50", "three dollars and fifty cents"),
        ("date", "3/4/2025", "March fourth, twenty twenty-five"),
    ],
)
def test_say_as_reads_each_kind(kind: str, content: str, reading: str) -> None:
    assert said(f'<speak><say-as interpret-as="{kind}">{escape(content)}</say-as></speak>') == reading


@pytest.mark.parametrize(
    ("form", "content", "reading"),
    [
        ("dmy", "4/3/2025", "fourth of March, twenty twenty-five"),
        ("ymd", "2025-03-04", "March fourth, twenty twenty-five"),
        ("md", "12/25", "December twenty-fifth"),
        ("my", "7/1969", "July nineteen sixty-nine"),
        ("y", "1999", "nineteen ninety-nine"),
    ],
)
def test_say_as_dates_follow_their_format(form: str, content: str, reading: str) -> None:
    text = f'<speak><say-as interpret-as="date" format="{form}">{content}</say-as></speak>'
    assert said(text) == reading


def test_sub_says_its_alias_and_words_keep_what_is_written() -> None:
    document = english('<speak>The <sub alias="World Wide Web Consortium">W3C</sub> met.</speak>')
    assert document.segments[0].text == "The World Wide Web Consortium met."
    assert document.written.split() == ["The", "W3C", "met."]


def test_emphasis_lang_and_mark_are_spoken_as_they_are() -> None:
    text = '<speak>A <emphasis level="strong">big</emphasis> <lang xml:lang="fr-FR">merci</lang>'
    text += '<mark name="m"/>.</speak>'
    assert said(text) == "A big merci."


def test_the_ssml_namespace_is_accepted() -> None:
    assert said(
        '<speak xmlns="http://www.w3.org/2001/10/synthesis" version="1.1">Hi <break/>there</speak>'
    ) == ("Hi there")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("<speak>Hi <b>there</speak>", "not well-formed XML: mismatched tag at line 1, column 21"),
        ("<speak>Hi", "not well-formed XML: no element found at line 1, column 10"),
        ("<p>Hi</p>", "<p> at line 1, column 1: the root element must be <speak>"),
        ('<speak>\n  Hi <break time="fast"/></speak>', "<break> at line 2, column 6: time 'fast'"),
        ('<speak><break time="11s"/>Hi</speak>', "time '11s' is over 10 s"),
        ('<speak><break strength="huge"/>Hi</speak>', "strength 'huge'"),
        ('<speak><prosody rate="warp">Hi</prosody></speak>', "rate 'warp'"),
        (
            '<speak><prosody rate="300%"><prosody rate="2">Hi</prosody></prosody></speak>',
            "outside [0.25, 4]",
        ),
        ('<speak><prosody volume="+20dB">Hi</prosody></speak>', "over +12 dB"),
        ('<speak><say-as interpret-as="bogus">1</say-as></speak>', "interpret-as 'bogus'"),
        ('<speak><say-as interpret-as="cardinal">ten</say-as></speak>', "'ten' is not a whole number"),
        ('<speak><say-as interpret-as="date" format="mdy">13/45/2020</say-as></speak>', "not a date"),
        ('<speak><say-as interpret-as="date" format="qq">1/2</say-as></speak>', "format 'qq'"),
        ('<speak><say-as interpret-as="telephone">call me</say-as></speak>', "not a telephone number"),
        ('<speak><say-as interpret-as="digits"></say-as></speak>', "<say-as> at line 1, column 8: is empty"),
        ("<speak><sub>W3C</sub></speak>", "<sub> at line 1, column 8: needs an alias"),
        ('<speak><phoneme alphabet="x-sampa" ph="t@">tomato</phoneme></speak>', "alphabet 'x-sampa'"),
        ('<speak><phoneme ph=" ">tomato</phoneme></speak>', "<phoneme> at line 1, column 8: needs ph"),
        (
            '<speak><audio src="http://example.com/a.wav"/>Hi</speak>',
            "<audio> at line 1, column 8: is not supported",
        ),
        ("<speak><break/></speak>", "nothing to say"),
    ],
)
def test_bad_ssml_is_refused_naming_the_element_and_where(text: str, named: str) -> None:
    with pytest.raises(InvalidRequest, match="SSML") as refused:
        english(text)
    assert named in str(refused.value)


@pytest.mark.parametrize(
    "text",
    [
        '<!DOCTYPE speak [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]><speak>&b;</speak>',
        '<!DOCTYPE speak [<!ENTITY x SYSTEM "file:///etc/passwd">]><speak>&x;</speak>',
        '<!DOCTYPE speak SYSTEM "http://example.com/speak.dtd"><speak>Hi</speak>',
    ],
)
def test_doctype_entities_and_external_references_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="may not use a DOCTYPE, entities or external references"):
        english(text)


def test_a_base_speed_counts_toward_the_range() -> None:
    assert english('<speak><prosody rate="x-fast">Hi</prosody></speak>', speed=2.0).segments[0].rate == 1.75
    with pytest.raises(InvalidRequest, match="outside"):
        english('<speak><prosody rate="x-fast">Hi</prosody></speak>', speed=3.0)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=80)
)
def test_any_text_inside_speak_is_read_or_refused_clearly(text: str) -> None:
    """Escaped text of any kind: read (its words as written kept) or refused as nothing to say."""
    try:
        document = english(f"<speak>{escape(text)}</speak>")
    except InvalidRequest as err:
        assert "nothing to say" in str(err) or "not well-formed" in str(err)
        return
    assert document.written.split() == text.split()
