"""The served voice is understood by an offline speech recogniser (PocketSphinx en-US)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.conftest import phoneme_ids
from tests.helpers import synthesize
from triton_tts.contract.voice import Voice
from triton_tts.quality.intelligibility import transcribe, word_error_rate
from triton_tts.text.phonemize import EspeakPhonemizer

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
# The bar is the voice itself: the same sentences through Piper's own unsplit graph with
# onnxruntime, the same phoneme ids and noise scales. Noise off, both sides give the same
# audio to 1e-4 (tests/test_roundtrip.py), so the margin is rounding: 3 of the 65 words.
# With Piper's own noise every draw differs (the voice alone, six draws here: WER 0.05 to
# 0.18), so each side pools three draws of every sentence and the margin covers the
# spread. A broken pipeline (wrong ids, wrong sample rate, noise) scores near 1.
NOISE = {"off": (0.0, 0.0), "piper": None}  # (NOISE_SCALE, NOISE_W); None: the voice's own
MARGIN = {"off": 0.05, "piper": 0.15}
ROUNDS = {"off": 1, "piper": 3}


@pytest.mark.parametrize("noise", list(NOISE))
def test_served_speech_is_as_intelligible_as_the_voice_itself(
    noise: str, http, voice: Voice, phonemizer: EspeakPhonemizer, unsplit_piper: ort.InferenceSession
) -> None:
    from triton_tts.export.piper import PIPER_IDS, PIPER_LENGTHS, PIPER_SCALES

    noise_scale, noise_w = NOISE[noise] or (voice.noise_scale, voice.noise_w)
    texts = SENTENCES * ROUNDS[noise]
    served = [transcribe(*synthesize(http, text, NOISE_SCALE=noise_scale, NOISE_W=noise_w)) for text in texts]
    reference = []
    for text in texts:
        ids = phoneme_ids(text, voice, phonemizer)
        (audio,) = unsplit_piper.run(
            None,
            {
                PIPER_IDS: np.array([ids], dtype=np.int64),
                PIPER_LENGTHS: np.array([len(ids)], dtype=np.int64),
                PIPER_SCALES: np.array([noise_scale, voice.length_scale, noise_w], dtype=np.float32),
            },
        )
        reference.append(transcribe(np.clip(audio.reshape(-1), -1.0, 1.0), voice.sample_rate))
    served_wer, reference_wer = word_error_rate(texts, served), word_error_rate(texts, reference)
    assert served_wer <= reference_wer + MARGIN[noise], (served_wer, reference_wer, served, reference)


def test_the_check_catches_broken_audio(http) -> None:
    """The same measure fails speech played at the wrong rate or backwards."""
    audio, rate = synthesize(http, SENTENCES[0])
    wrong_rate = word_error_rate([SENTENCES[0]], [transcribe(audio, rate * 2)])
    backwards = word_error_rate([SENTENCES[0]], [transcribe(np.ascontiguousarray(audio[::-1]), rate)])
    assert wrong_rate > 0.6 and backwards > 0.6
