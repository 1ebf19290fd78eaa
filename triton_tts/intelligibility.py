"""Offline intelligibility check: transcribe speech with PocketSphinx, score word error rate.

Used by the tests and the quantisation checks: a voice that still speaks transcribes at
a low WER, a broken one (random weights, wrong sample rate, garbage ids) does not.
Needs the ``dev`` extra (pocketsphinx, jiwer, soxr).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

ASR_SAMPLE_RATE = 16_000  # the bundled en-US acoustic model's rate


@lru_cache(maxsize=1)
def _decoder() -> Any:
    from pocketsphinx import Decoder

    return Decoder(samprate=ASR_SAMPLE_RATE, loglevel="FATAL")


def transcribe(audio: npt.NDArray[np.float32], sample_rate: int) -> str:
    import soxr

    speech = soxr.resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_SAMPLE_RATE)
    pcm = (np.clip(speech, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    decoder = _decoder()
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


def words(text: str) -> str:
    """Lower-case words only, so punctuation and case never count as errors."""
    return " ".join(re.findall(r"[a-z']+", text.lower()))


def word_error_rate(references: list[str], hypotheses: list[str]) -> float:
    import jiwer

    return float(jiwer.wer([words(r) for r in references], [words(h) or "<empty>" for h in hypotheses]))
