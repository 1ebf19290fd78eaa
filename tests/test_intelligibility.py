"""The served voice is understood by an offline speech recogniser (PocketSphinx en-US)."""

from __future__ import annotations

import numpy as np

from tests.helpers import synthesize
from triton_tts.intelligibility import transcribe, word_error_rate

SENTENCES = [
    "Please call me back when you get home.",
    "I would like to order a large pizza.",
    "She read the book in one afternoon.",
    "My favorite color is green.",
    "The weather today is sunny with a light breeze.",
    "Thank you for calling, how can I help you today?",
    "Your appointment is on Monday at ten in the morning.",
    "We will send the documents by email tomorrow.",
]
# Measured here: ~0.1 for the joe voice with Piper's own noise settings; a broken
# pipeline (wrong ids, wrong sample rate, noise) scores near 1.
MAX_WER = 0.3


def test_served_speech_is_intelligible(http) -> None:
    hypotheses = []
    for text in SENTENCES:
        audio, rate = synthesize(http, text)
        hypotheses.append(transcribe(audio, rate))
    wer = word_error_rate(SENTENCES, hypotheses)
    assert wer <= MAX_WER, list(zip(SENTENCES, hypotheses, strict=True))


def test_the_check_catches_broken_audio(http) -> None:
    """The same measure fails speech played at the wrong rate or backwards."""
    audio, rate = synthesize(http, SENTENCES[0])
    wrong_rate = word_error_rate([SENTENCES[0]], [transcribe(audio, rate * 2)])
    backwards = word_error_rate([SENTENCES[0]], [transcribe(np.ascontiguousarray(audio[::-1]), rate)])
    assert wrong_rate > 0.6 and backwards > 0.6
