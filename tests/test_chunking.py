"""split_text's rules (triton_tts/runtime/chunking.py), each with expectations written by hand.

Most cases use ``SENTENCES``, a plan whose first chunk and other chunks hold at most 40
characters, with texts whose sentences are 21 to 40 characters long: no sentence is cut
and no two are packed together, so the chunks are exactly the sentences the rules find.
"""

from __future__ import annotations

import re

import pytest

from testkit.sample_texts import PARAGRAPH
from tests.helpers import (
    FIRST_CHARS,
    GROWTH,
    MAX_CHARS,
    PARAGRAPH_CHUNKS,
    PARAGRAPH_CLAUSE_LENGTHS,
    PARAGRAPH_SENTENCE_LENGTHS,
    STREAM_PARAGRAPH_CHUNKS,
    paragraph_chunks,
    stream_paragraph_chunks,
)
from triton_tts.build.model_configs import BuildOptions
from triton_tts.runtime.chunking import FIRST_CHUNK_CHARS, ChunkPlan, split_text
from triton_tts.text.normalize import normalize_english

SENTENCES = ChunkPlan(first_chars=40, max_chars=40)


def sentence_cases(cases: list[list[str]]) -> list[tuple[str, list[str]]]:
    """(text, its sentences) with the sentences joined by a space."""
    for sentences in cases:
        assert all(21 <= len(s) <= 40 for s in sentences), sentences  # the plan's premise
    return [(" ".join(s), s) for s in cases]


ABBREVIATIONS = [
    ["Dr. Smith will see you at noon.", "Mr. Jones is away until Friday."],
    ["Prof. Adams met Gen. Brown there.", "They talked about the old war."],
    ["J. R. R. Tolkien wrote the book.", "We read it in a single week."],
    ["Bring fruit, e.g. apples or pears.", "The market opens at nine."],
    ["Fruit, i.e. apples, was on sale.", "It sold out before lunch."],
    ["He joined the U.S. Army in spring.", "He served for seven years."],
    ["Spain vs. Italy ended in a draw.", "Both teams played very well."],
    # an abbreviation that can close a sentence does, before a capital letter
    ["We sell pens, paper, ink, etc.", "Ask us for the full list."],
    ["The meeting starts at 9 a.m.", "Please do not be late today."],
]
DECIMALS = [
    ["Pi is about 3.14 and e is 2.72.", "Both numbers go on forever."],
    ["Version 2.0.1 fixed the bug.", "Visit example.com for details."],
    ["The ticket cost $4.50 at the door.", "The result was exactly 0.5."],
    ["The answer to it all is 42.", "Nobody knows what it means."],  # a number ends one
]
QUOTES = [
    ['He shouted "Stop right there!"', "Then he walked away slowly."],
    ["Did he really just say “done”?", "Nobody could believe that."],
    ["(This part is only an aside.)", "The story goes on from here."],
    ["She wrote, 'We are leaving now.'", "The house was empty by noon."],
    # lower case after the mark: the quote was inside the sentence
    ['"Wait for me!" she called out loud.', "Nobody turned around at all."],
    ["“Run!” he said, and we all ran.", "The storm came an hour later."],
    ["Well... maybe we could try that.", "Or we could just go home now."],
]


@pytest.mark.parametrize(
    ("text", "expected"),
    sentence_cases(ABBREVIATIONS) + sentence_cases(DECIMALS) + sentence_cases(QUOTES),
)
def test_sentence_ends(text: str, expected: list[str]) -> None:
    assert split_text(text, SENTENCES) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a single line break is a space; every run of whitespace becomes one space
        ("First line\nsecond line.\nThird line.", ["First line second line.", "Third line."]),
        ("A  b\tc\n d.", ["A b c d."]),
        # a blank line ends a sentence (a heading, a paragraph), also with \r\n
        ("Title\n\nThe body starts here.", ["Title", "The body starts here."]),
        ("One line\r\n\r\nNext paragraph", ["One line", "Next paragraph"]),
        ("   \n\t  ", []),
        ("", []),
    ],
)
def test_newlines_and_whitespace(text: str, expected: list[str]) -> None:
    assert split_text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a line break before a list item ends a sentence; the first chunk is the first
        # sentence, the rest is packed into one chunk (all of it fits in 400 characters)
        ("Shopping list:\n- eggs\n- milk\n- bread", ["Shopping list:", "- eggs - milk - bread"]),
        ("Packing:\n• socks\n• a coat", ["Packing:", "• socks • a coat"]),
        (
            "1. Open the box.\n2. Take out the radio.\n3. Plug it in.",
            ["1. Open the box.", "2. Take out the radio. 3. Plug it in."],
        ),
        ("Steps:\n1) Open it.\n2) Use it.", ["Steps:", "1) Open it. 2) Use it."]),
        # a list number is not a sentence; after a word, a number ending a sentence is
        ("Steps: 1. Open it. 2. Use it.", ["Steps: 1. Open it.", "2. Use it."]),
        ("I am 30. You are 40.", ["I am 30.", "You are 40."]),
        # a list inside a sentence is one sentence
        ("Bring eggs, milk, bread, and butter.", ["Bring eggs, milk, bread, and butter."]),
    ],
)
def test_lists(text: str, expected: list[str]) -> None:
    assert split_text(text) == expected


CJK = "今天天气很好。我们去公园吧！你想去吗？"


@pytest.mark.parametrize(
    ("text", "plan", "expected"),
    [
        # full-width sentence ends need no space, and nothing is put between the sentences
        (
            "今天天气很好。我们去公园吧！你想去吗？",
            ChunkPlan(8, 8),
            ["今天天气很好。", "我们去公园吧！", "你想去吗？"],
        ),
        (
            "今天天气很好。我们去公园吧！你想去吗？",
            ChunkPlan(8, 20),
            ["今天天气很好。", "我们去公园吧！你想去吗？"],
        ),
        # a long sentence is cut after its clause marks ，、；：, packed greedily
        (
            "我们买了苹果、香蕉和梨，然后回家；晚上做饭：很好吃。",
            ChunkPlan(10, 10),
            ["我们买了苹果、", "香蕉和梨，然后回家；", "晚上做饭：很好吃。"],
        ),
        # English with full-width punctuation typed by an input method
        (
            "Hello there。How are you today？Fine！",
            ChunkPlan(20, 20),
            ["Hello there。", "How are you today？", "Fine！"],
        ),
    ],
)
def test_cjk_punctuation(text: str, plan: ChunkPlan, expected: list[str]) -> None:
    assert split_text(text, plan) == expected


def test_cjk_punctuation_after_the_normalizer() -> None:
    """The server normalises first, and NFKC turns ！？，；： into ASCII marks with no space
    after them: they still end sentences and clauses there."""
    spoken = normalize_english("今天天气很好！我们去公园吧？")
    assert spoken == "今天天气很好!我们去公园吧?"
    assert split_text(spoken, ChunkPlan(8, 8)) == ["今天天气很好!", "我们去公园吧?"]
    spoken = normalize_english("香蕉和梨，然后回家；晚上做饭：很好吃。")
    assert split_text(spoken, ChunkPlan(6, 6)) == ["香蕉和梨,", "然后回家;", "晚上做饭:", "很好吃。"]


def test_a_long_sentence_without_punctuation_is_cut_between_words() -> None:
    words = [f"w{i:02d}" for i in range(30)]  # 3 characters each, 119 with the spaces
    # first chunk: 5 words (19 characters; a sixth makes 23 > 20); then 10 words (39 <= 40)
    assert split_text(" ".join(words), ChunkPlan(20, 40)) == [
        " ".join(words[:5]),
        " ".join(words[5:15]),
        " ".join(words[15:25]),
        " ".join(words[25:]),
    ]


def test_a_long_sentence_is_cut_at_clauses_before_words() -> None:
    text = "one two three, four five six, seven eight nine"
    # every clause fits in 16, two together do not: one chunk per clause, never mid-clause
    assert split_text(text, ChunkPlan(16, 16)) == ["one two three,", "four five six,", "seven eight nine"]
    # a clause too long for the limit is cut between its words; a clause that fits stays
    # whole, even when part of it would fit into the chunk before
    assert split_text("a b c d e f g h, then more", ChunkPlan(6, 9)) == [
        "a b c",
        "d e f g",
        "h,",
        "then more",
    ]


def test_a_word_longer_than_the_limit_is_cut_to_fit() -> None:
    """No chunk is ever over its limit; the cut rules: tests/test_long_tokens.py."""
    long_word = "x" * 50
    assert split_text(f"a {long_word} b", ChunkPlan(20, 20)) == ["a", "x" * 20, "x" * 20, "x" * 10 + " b"]
    assert split_text("see one-two-three-four-five now", ChunkPlan(12, 12)) == [
        "see one-two-",
        "three-four-",
        "five now",
    ]


def test_the_first_chunk_is_the_first_sentence() -> None:
    text = (
        "Thank you for calling. "  # 22 characters
        + "This second sentence is here to fill the chunk up to its limit. " * 8
    ).strip()
    chunks = split_text(text)
    assert chunks[0] == "Thank you for calling."
    # 64 characters a sentence, 6 fit in 400 (6 * 64 - 1 = 383; 7 make 447): 6 then 2
    assert [c.count("second sentence") for c in chunks[1:]] == [6, 2]


LONG_TEXTS = [
    " ".join(["Dr. Smith said: 'It is 3.5 km away.' Then he left."] * 40),
    "\n".join(f"{i}. Item number {i}, with a comma" for i in range(1, 80)),
    " ".join(["word"] * 2000),
    "今天天气很好，我们去公园吧。" * 100,
    "a" * 1200 + " tail.",
]


@pytest.mark.parametrize("text", LONG_TEXTS, ids=["prose", "list", "words", "cjk", "one-word"])
@pytest.mark.parametrize("plan", [ChunkPlan(), ChunkPlan(16, 16), ChunkPlan(40, 100)], ids=str)
def test_nothing_is_dropped_added_or_moved(text: str, plan: ChunkPlan) -> None:
    chunks = split_text(text, plan)
    assert re.sub(r"\s", "", "".join(chunks)) == re.sub(r"\s", "", text)
    for chunk in chunks:
        assert chunk == chunk.strip() and "  " not in chunk and "\n" not in chunk
        assert len(chunk) <= plan.max_chars
    assert len(chunks[0]) <= plan.first_chars


def test_paragraph_chunk_counts_worked_out_by_hand() -> None:
    """The served tests compare chunk counts with tests/helpers.py's rules; here split_text
    is held to them, with the premises they rest on (the served plans, the lengths)."""
    defaults = BuildOptions()
    assert (defaults.first_chunk_chars, defaults.stream_chunk_chars, defaults.chunk_growth) == (
        FIRST_CHARS,
        MAX_CHARS,
        GROWTH,
    )
    whole = ChunkPlan(FIRST_CHUNK_CHARS, defaults.chunk_chars)  # tts
    stream = ChunkPlan(FIRST_CHARS, MAX_CHARS, GROWTH)  # tts_stream
    sentences = [s if s.endswith(".") else f"{s}." for s in PARAGRAPH.split(". ")]
    assert " ".join(sentences) == PARAGRAPH
    assert tuple(len(s) for s in sentences) == PARAGRAPH_SENTENCE_LENGTHS
    for sentence, clauses in zip(sentences, PARAGRAPH_CLAUSE_LENGTHS, strict=True):
        assert tuple(len(c) for c in re.split(r"(?<=[,;:]) ", sentence)) == clauses
    assert split_text(PARAGRAPH, whole) == [sentences[0], " ".join(sentences[1:4]), " ".join(sentences[4:])]
    second, third = sentences[1].split(": ")
    assert (
        split_text(PARAGRAPH, stream)
        == [
            sentences[0],
            second + ":",  # the ramp: at most 2 x 39 characters, so the sentence goes by clauses
            third,
            *sentences[2:],  # at most 120 characters: no two sentences fit together
        ]
    )
    assert len(split_text(PARAGRAPH, whole)) == PARAGRAPH_CHUNKS
    assert len(split_text(PARAGRAPH, stream)) == STREAM_PARAGRAPH_CHUNKS
    # tts: 1 paragraph: 3; 3: 1 + five chunks of the round + none = 6; 10: 1 + 3 rounds + 2 = 18
    assert [paragraph_chunks(n) for n in (1, 3, 10)] == [3, 6, 18]
    assert [stream_paragraph_chunks(n) for n in (1, 3, 10)] == [7, 19, 61]
    for copies in range(1, 13):
        text = " ".join([PARAGRAPH] * copies)
        assert len(split_text(text, whole)) == paragraph_chunks(copies), copies
        assert len(split_text(text, stream)) == stream_paragraph_chunks(copies), copies


def test_a_ramp_grows_chunks_from_short_to_the_limit_and_cuts_only_at_clauses() -> None:
    text = " ".join([PARAGRAPH] * 4)
    plan = ChunkPlan(40, 400, 2)
    chunks = split_text(text, plan)
    said = len(chunks[0])
    for chunk in chunks[1:]:
        limit = plan.limit_after(said)
        # over its limit only when one clause is longer (a clause is never cut for the ramp)
        assert len(chunk) <= limit or not re.search(r"[,;:] ", chunk), (chunk, limit)
        said += len(chunk)
    assert max(len(c) for c in chunks) <= 400 and len(chunks[-2]) > 300  # ramped up to the limit
    assert re.sub(r"\s", "", "".join(chunks)) == re.sub(r"\s", "", text)
    # no ramp: today's packing; a ramp never changes the first chunk
    assert split_text(text, ChunkPlan(40, 400)) == split_text(text, ChunkPlan(40, 400, 0))
    assert split_text(text, ChunkPlan(40, 400))[0] == chunks[0]
    assert plan.scaled(0.5) == ChunkPlan(20, 200, 2)
