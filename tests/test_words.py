"""Word timestamps' bookkeeping (triton_tts/text/words.py): written words through
normalisation, phonemes and ids, without a server (tests/test_timestamps.py has the server)."""

from __future__ import annotations

import numpy as np
import pytest

from triton_tts.text.normalize import normalize_english
from triton_tts.text.words import (
    NO_WORD,
    Word,
    WordClock,
    letter_owners,
    phoneme_owners,
    tokens,
    units,
    word_groups,
    word_times,
    written_groups,
)


def test_a_rewritten_word_is_one_group_spanning_what_it_became() -> None:
    written = tokens("I paid $3.50 on 3/4 today.")
    spoken = normalize_english("I paid $3.50 on 3/4 today.").split()
    groups = written_groups(written, spoken)
    assert [text for text, _ in groups] == written
    money = dict(groups)["$3.50"]
    assert " ".join(spoken[money.start : money.stop]) == "three dollars and fifty cents"
    # the spans cover the spoken words in order, without overlap
    assert [i for _, span in groups for i in span] == list(range(len(spoken)))


def _said(written: str) -> list[tuple[str, str]]:
    """Each written word's entry and what it is said as (triton_tts.text.words.word_groups)."""
    spoken = normalize_english(written).split()
    return [(text, " ".join(spoken[s.start : s.stop])) for text, s in word_groups(written, spoken, False)]


@pytest.mark.parametrize(
    ("written", "said"),
    [
        # times: "6:05 a.m." said "six oh five a m." is two written words, two entries
        ("We left at 6:05 a.m.", [("6:05", "six oh five"), ("a.m.", "a m.")]),
        ("at 10:00 am, we ate", [("10:00", "ten"), ("am,", "a m,")]),
        ("In 1066 A.D. it fell", [("1066", "ten sixty-six"), ("A.D.", "A D")]),
        # dates with abbreviations
        ("Jan. 3rd!", [("Jan.", "January"), ("3rd!", "third!")]),
        ("on Jan. 5, 2024 we met", [("Jan.", "January"), ("5,", "fifth,"), ("2024", "twenty twenty-four")]),
        ("in Sept. 2021", [("Sept.", "September"), ("2021", "twenty twenty-one")]),
        # units and Latin abbreviations
        ("3.2 km, i.e. far", [("3.2", "three point two"), ("km,", "kilometers,"), ("i.e.", "that is")]),
        (
            "at 25 km/h, e.g. slow",
            [("25", "twenty-five"), ("km/h,", "kilometers per hour,"), ("e.g.", "for example")],
        ),
        ("costs < 5 dollars", [("<", "less than"), ("5", "five")]),
        ("call ext. 204 now", [("ext.", "extension"), ("204", "two zero four")]),
    ],
)
def test_each_written_word_of_a_rewritten_run_has_its_own_entry(
    written: str, said: list[tuple[str, str]]
) -> None:
    entries = _said(written)
    assert [text for text, _ in entries] == written.split()
    for word, words in said:
        assert dict(entries)[word] == words


def test_a_rewrite_that_reorders_its_words_stays_one_entry() -> None:
    # "25 Dec. 2020" is said "December twenty-fifth, ...": its words' times are not in order
    assert _said("on 25 Dec. 2020 we met")[1] == ("25 Dec. 2020", "December twenty-fifth, twenty twenty")
    # "March" is said as written, but "15" moved past it: not lost, one entry with them
    assert _said("on 15 March 2024 we met")[1] == ("15 March 2024", "March fifteenth, twenty twenty-four")


def test_without_a_normaliser_a_run_is_split_at_spelled_letters_or_evenly() -> None:
    groups = written_groups(["6:05", "a.m."], ["six", "oh", "five", "a", "m."])
    assert [(text, list(span)) for text, span in groups] == [("6:05", [0, 1, 2]), ("a.m.", [3, 4])]
    groups = written_groups(["1/2", "3/4"], ["one", "half", "three", "quarters"])
    assert [(text, list(span)) for text, span in groups] == [("1/2", [0, 1]), ("3/4", [2, 3])]


def test_a_long_rewritten_run_gives_every_word_its_entry() -> None:
    written = " ".join(f"{n} km" for n in range(1, 400))
    groups = word_groups(written, normalize_english(written).split(), False)
    assert [text for text, _ in groups] == written.split()
    assert [i for _, span in groups for i in span] == list(range(len(normalize_english(written).split())))


def test_written_words_that_say_nothing_are_left_out() -> None:
    groups = written_groups(["Stop", "*", "now."], ["Stop", "now."])
    assert [(text, list(span)) for text, span in groups] == [("Stop", [0]), ("now.", [1])]


def test_phoneme_words_joined_by_espeak_are_shared_by_their_words() -> None:
    # "of the" read as one phoneme word, "world.how" as one across a sentence end
    phonemes = "ʌvðə hˈoʊl wˈɜːld.hˌaʊ"
    alone = ["ʌv", "ðə", "hˈoʊl", "wˈɜːld.", "hˈaʊ"]
    owners = phoneme_owners(phonemes, alone)
    said = {w: "".join(c for c, o in zip(phonemes, owners, strict=True) if o == w) for w in range(5)}
    # (a space between words is said with the word after it)
    assert said == {0: "ʌv", 1: "ðə", 2: " hˈoʊl", 3: " wˈɜːld", 4: "hˌaʊ"}
    # the full stop and the space before a word after a pause belong to no word
    assert owners[phonemes.index(".")] == NO_WORD


def test_a_space_belongs_to_the_word_after_it_a_pause_to_none() -> None:
    phonemes = "ɐ bˈi, sˈiː"
    owners = phoneme_owners(phonemes, ["ɐ", "bˈi,", "sˈiː"])
    assert owners[1] == 1  # the space between "a" and "bee": the next word's start
    assert owners[phonemes.index(",") + 1] == NO_WORD  # the space after the comma: a pause


def test_character_voices_own_their_letters() -> None:
    owners = letter_owners("hi, you")
    assert owners == [0, 0, NO_WORD, NO_WORD, 1, 1, 1]


def test_word_times_run_from_each_words_first_id_to_its_last() -> None:
    durations = np.array([2, 3, 1, 4, 2, 5, 0, 0], dtype=np.float32)  # the last two: padding
    index = np.array([-1, 0, 0, -1, 1, 1, -1, -1, -1, -1], dtype=np.int32)  # longer: padded
    times = word_times(durations, index, frames=17)
    np.testing.assert_array_equal(times, [[2, 6], [10, 17]])
    assert word_times(durations, np.full(8, -1, np.int32), 17).shape == (0, 2)
    np.testing.assert_array_equal(word_times(durations, index, frames=12), [[2, 6], [10, 12]])


def test_the_clock_times_words_across_chunks_from_the_start_of_the_audio() -> None:
    text = "I paid $3.50 today."
    chunks = ["I paid three dollars", "and fifty cents today."]
    clock = WordClock(text, chunks)
    first = clock.add(
        ["I", "paid", "three", "dollars"], np.array([[0, 0.1], [0.1, 0.3], [0.3, 0.5], [0.5, 0.9]]), 1.0
    )
    assert [(w.text, w.start, w.end) for w in first] == [("I", 0.0, 0.1), ("paid", 0.1, 0.3)]
    # "$3.50" runs into the second chunk: it waits for it, and spans both
    second = clock.add(
        ["and", "fifty", "cents", "today."], np.array([[0, 0.1], [0.1, 0.3], [0.3, 0.5], [0.5, 0.9]]), 1.2
    )
    assert [w.text for w in second] == ["$3.50", "today."]
    assert [(w.start, w.end) for w in second] == [pytest.approx((0.3, 1.5)), pytest.approx((1.5, 1.9))]


def test_the_clock_gives_each_word_of_a_rewritten_run_its_own_time() -> None:
    text = "Jan. 3rd! At 6:05 a.m."
    spoken = normalize_english(text)  # "January third! At six oh five a m."
    clock = WordClock(text, [spoken])
    timed = spoken.split()
    times = np.array([[i * 0.25, (i + 1) * 0.25] for i in range(len(timed))])
    words = clock.add(timed, times, 2.5)
    assert [(w.text, w.start, w.end) for w in words] == [
        ("Jan.", 0.0, 0.25),
        ("3rd!", 0.25, 0.5),
        ("At", 0.5, 0.75),
        ("6:05", 0.75, 1.5),
        ("a.m.", 1.5, 2.0),
    ]


def test_the_clock_follows_a_chunk_said_in_halves() -> None:
    # a word cut in two (a chunk over the voice's budget, said in halves) is one word again
    clock = WordClock("Supercalifragilistic.", ["Supercalifragilistic."])
    words = clock.add(["Supercali", "fragilistic."], np.array([[0.0, 0.4], [0.45, 0.9]]), 1.0)
    assert [(w.text, w.start, w.end) for w in words] == [("Supercalifragilistic.", 0.0, 0.9)]


def test_chinese_words_are_jiebas_each_spanning_what_it_became() -> None:
    from triton_tts.text.chinese import normalize_chinese

    written = "我在2024年花了¥12.50买书。"
    spoken = units(normalize_chinese(written), chinese=True)
    groups = word_groups(written, spoken, chinese=True)
    assert [text for text, _ in groups] == ["我", "在", "2024", "年", "花", "了", "¥12.50", "买", "书", "。"]
    money = dict(groups)["¥12.50"]
    assert "".join(spoken[money.start : money.stop]) == "十二元五角"
    assert [i for _, span in groups for i in span] == list(range(len(spoken)))


def test_the_clock_joins_chinese_words_that_were_timed_as_one() -> None:
    """The chunk was cut 二零二 | 四年 from its normalised text: the written "2024" and "年"
    share the timed word 四年, so they come back as one word, with only measured times."""
    clock = WordClock("我在2024年。", ["我在二零二四年。"], chinese=True)
    words = ["我", "在", "二零二", "四年"]
    times = np.array([[0.0, 0.1], [0.1, 0.2], [0.2, 0.6], [0.6, 0.9]])
    assert clock.add(words, times, 1.0) == [
        Word("我", 0.0, 0.1),
        Word("在", 0.1, 0.2),
        Word("2024年", 0.2, 0.9),
    ]
    # Cut the same way as written, each word stays its own.
    clock = WordClock("我在2024年。", ["我在二零二四年。"], chinese=True)
    timed = clock.add(["我", "在", "二零二四", "年"], times, 1.0)
    assert [w.text for w in timed] == ["我", "在", "2024", "年"]
