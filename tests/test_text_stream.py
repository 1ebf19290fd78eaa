"""A text that arrives as it is written: where its sentences settle, and what goes to
synthesis when (triton_tts/runtime/chunking.py's settled_sentences, triton_tts/gateway/text_stream.py).
The property: however a text is cut into pieces, the texts sent join to the text, and each
settled cut is one that the whole text's chunking (split_text) also makes."""

from __future__ import annotations

import random
import re

import pytest

from testkit.sample_texts import PARAGRAPH
from triton_tts.gateway.text_stream import MIN_CLAUSE_CHARS, TextStream
from triton_tts.runtime.chunking import CHUNK_CHARS, clause_cut, settled_sentences, split_text


@pytest.mark.parametrize(
    ("text", "settled"),
    [
        ("Hello there. H", "Hello there."),
        ("Hello there. ", ""),  # the next word decides ("e.g. apples")
        ("Hello there.", ""),
        ("Dr. Smith is here. Then", "Dr. Smith is here."),
        ("It costs 3.", ""),  # "3.5" or "3. Then"
        ("It costs 3.5 dollars. Then", "It costs 3.5 dollars."),
        ("Use e.g. apples. More", "Use e.g. apples."),
        ('"Stop!" she said. No', '"Stop!" she said.'),
        ("Visit example.com today", ""),
        ("你好。", "你好。"),  # a CJK end mark needs nothing after it
        ("First line\n\nSecond", "First line"),
        ("Wait... what? Yes", "Wait... what?"),
    ],
)
def test_a_sentence_settles_once_the_next_word_begins(text: str, settled: str) -> None:
    assert text[: settled_sentences(text)] == settled


def test_clause_cut() -> None:
    text = "When the rain came, we ran; and then"
    assert text[: clause_cut(text)] == "When the rain came, we ran; "
    assert clause_cut("no break here") == 0
    assert clause_cut("a trailing comma,") == 0  # the next character is not there yet
    # once the writer has paused, a mark that ends the text ends its clause
    assert clause_cut("then to sixty,", paused=True) == len("then to sixty,")
    assert clause_cut("then to sixty, ", paused=True) == len("then to sixty, ")
    assert clause_cut("we ran; and then", paused=True) == len("we ran; ")
    assert clause_cut("it cost 1,", paused=True) == 0  # "1," may yet be "1,000"


def _pieces(text: str, rng: random.Random) -> list[str]:
    """The text in pieces of 1 to 7 characters, as an LLM's tokens come."""
    pieces, at = [], 0
    while at < len(text):
        size = rng.randint(1, 7)
        pieces.append(text[at : at + size])
        at += size
    return pieces


@pytest.mark.parametrize("seed", range(5))
def test_any_cut_into_pieces_sends_the_whole_text_at_sentence_ends(seed: int) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.sample(PARAGRAPH.split(". "), 4)) + " Dr. Smith paid $3.50 at 5 p.m. on Monday."
    stream = TextStream(max_held_chars=4000)
    sent = [ready for piece in _pieces(text, rng) for ready in stream.append(piece)]
    rest = stream.flush()
    assert "".join([*sent, *rest]).replace(" ", "") == text.replace(" ", "")
    whole = split_text(text)
    boundaries = {"".join(whole[: i + 1]).replace(" ", "") for i in range(len(whole))}
    for i in range(len(sent)):  # each cut made on the way is one the whole text's chunking has
        so_far = "".join(sent[: i + 1]).replace(" ", "")
        assert any(b.startswith(so_far) for b in boundaries), sent[: i + 1]
    assert all(t.strip() == t and t for t in sent)


def test_a_long_clause_goes_when_the_writer_pauses_and_a_short_one_waits() -> None:
    stream = TextStream(max_held_chars=4000)
    short = "Well, "
    assert stream.append(short) == [] and stream.paused() == []
    stream.flush()
    clause = "When the weather turns cold in the northern valleys, the "
    assert len(clause.split(",", maxsplit=1)[0]) >= MIN_CLAUSE_CHARS
    assert stream.append(clause) == []
    assert stream.paused() == ["When the weather turns cold in the northern valleys,"]
    assert stream.held == "the "


CLAUSE = "When the weather turns cold in the northern valleys,"


def _llm_tokens(text: str, space_in_front: bool) -> list[str]:
    """The text as an LLM's tokens: words with their space in front (" the"), punctuation
    alone (","), or words with their space behind ("the ")."""
    if space_in_front:
        return re.findall(r" ?[^\s,.;]+|[,.;]", text)
    return re.findall(r"\S+\s*", text)


@pytest.mark.parametrize("space_in_front", [True, False])
def test_a_clause_ending_on_its_mark_goes_when_the_writer_stalls(space_in_front: bool) -> None:
    stream = TextStream(max_held_chars=4000)
    tokens = _llm_tokens(CLAUSE + " the wind comes down from the hills.", space_in_front)
    comma = next(i for i, token in enumerate(tokens) if "," in token) + 1
    assert [t for token in tokens[:comma] for t in stream.append(token)] == []
    assert stream.held.rstrip().endswith(",")  # the stall comes before the next token
    assert stream.paused() == [CLAUSE]
    assert [t for token in tokens[comma:] for t in stream.append(token)] == []
    assert stream.flush() == ["the wind comes down from the hills."]


def test_a_short_clause_or_a_number_waits_through_a_stall() -> None:
    stream = TextStream(max_held_chars=4000)
    for token in ["Well", ","]:
        stream.append(token)
    assert stream.paused() == []  # "Well," alone would lose its sentence's intonation
    stream.flush()
    for token in [*_llm_tokens("The crowd in the square had grown to more than 1", True), ","]:
        stream.append(token)
    assert stream.paused() == []  # "1," may yet become "1,000"


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("space_in_front", [True, False])
def test_llm_tokens_with_stalls_send_the_whole_text_at_clause_and_sentence_ends(
    seed: int, space_in_front: bool
) -> None:
    rng = random.Random(seed)
    text = " ".join(rng.sample(PARAGRAPH.split(". "), 4))
    stream = TextStream(max_held_chars=4000)
    sent: list[str] = []
    for token in _llm_tokens(text, space_in_front):
        sent += stream.append(token)
        if token.strip() == "," or rng.random() < 0.2:  # the writer stalls
            stalled = stream.paused()
            assert all(t[-1] in ",;:" and len(t) >= MIN_CLAUSE_CHARS for t in stalled), stalled
            sent += stalled
    sent += stream.flush()
    assert "".join(sent).replace(" ", "") == text.replace(" ", "")
    assert all(t.strip() == t and t for t in sent)
    clauses = [t for t in sent if t[-1] in ",;:"]
    assert clauses, sent  # the paragraph's long clauses went at their stalls


def test_a_run_with_no_end_goes_at_its_clauses_or_words_past_the_chunk_limit() -> None:
    stream = TextStream(max_held_chars=4000)
    words = "many words without any end " * 40
    sent = stream.append(words)
    assert sent and all(len(t) <= CHUNK_CHARS for t in sent)
    assert len(stream.held) <= CHUNK_CHARS


def test_the_unspoken_text_is_bounded_held_or_queued() -> None:
    stream = TextStream(max_held_chars=50)
    stream.append("a" * 30)
    with pytest.raises(ValueError, match="at most 50"):
        stream.append("b" * 30)
    assert stream.held == "a" * 30  # the refused piece is not kept
    stream = TextStream(max_held_chars=50)
    (sent,) = stream.append("Thirty characters, a sentence. N")  # settled: queued, not held
    with pytest.raises(ValueError, match="32 unspoken"):
        stream.append("x" * 20)
    stream.started(sent)  # its synthesis began: room again
    assert stream.append("x" * 20) == []


def test_nothing_to_say_is_not_sent() -> None:
    stream = TextStream(max_held_chars=4000)
    assert stream.append("* * *\n\nHello") == []
    assert stream.flush() == ["Hello"]
