"""The precision gate: an FP16 or INT8 export measured against its FP32 voice.

The held-out sentences (:mod:`triton_tts.quality.gate_texts`) go once through the FP32 voice's
own stages, as the server runs them: normaliser, espeak-ng, acoustic model, vocoder,
noise off (NOISE_SCALE and NOISE_W 0), speaker 0. That is the reference: latents,
waveforms and what the recogniser heard. The candidate is then measured on the same
sentences:

- SNR: the candidate's vocoder on FP32's latents, against FP32's waveforms;
- acoustic SNR, when the candidate's acoustic graphs differ (FP16, an INT8 flow): its
  latents against FP32's, over the sentences whose frame count stayed the same (FP16's
  rounded durations may move one by a frame, which the report counts; INT8 leaves the
  durations FP32, so there a changed frame count refuses the export);
- WER: the candidate end to end (its acoustic stage, then its vocoder), transcribed.

The verdict and its limits are :func:`triton_tts.quality.intelligibility.judge`'s. Every export
that writes FP16 or INT8 passes through :func:`settle`: a refused export raises
:class:`GateRefused` unless the thresholds say to write it anyway. To measure two voice
folders that already exist:

    python -m triton_tts.export.precision_gate voices/joe voices/joe-int8
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from triton_tts.contract.voice import VOCODER_FILE, VOCODER_UNPADDED_FILE, Voice
from triton_tts.export.voice_runs import Latents, Waveforms, latents, run_vocoder
from triton_tts.quality.gate_texts import GATE_TEXTS, spoken
from triton_tts.quality.intelligibility import (
    MAX_FP32_WER,
    GateReport,
    GateThresholds,
    add_gate_arguments,
    gate_thresholds,
    judge,
    snr_db,
    transcribe,
    word_error_rate,
    words,
)
from triton_tts.runtime.onnx_session import graph_inputs

log = logging.getLogger(__name__)

QUALITY_FILE = "quality.json"  # the gate's report, next to the export it judged
# Precisions whose exports never touch the durations (INT8 quantises the vocoder and the
# VITS flow, which runs after them): a frame count that differs from FP32's is a fault.
SAME_FRAMES = frozenset({"int8"})


@dataclass(frozen=True)
class Reference:
    """The FP32 side of the gate, measured once and compared with any number of candidates.

    ``latents``: the vocoder's inputs ([1, channels, frames] each); ``waveforms``: the FP32
    vocoder's outputs; ``texts``: the words said; ``heard``: the transcripts, fewer than
    the texts when the recogniser stopped early (the voice was past ``MAX_FP32_WER``
    whatever followed); ``wer``: the FP32 WER (then a lower bound), None when the gate
    does not measure WER."""

    texts: list[str]
    latents: Latents
    waveforms: Waveforms
    heard: list[str]
    sample_rate: int
    speaker: bool
    wer: float | None


class GateRefused(RuntimeError):
    """An export the gate refused; its message is one line with the numbers and the way out."""

    def __init__(self, report: GateReport) -> None:
        self.report = report
        super().__init__(
            f"the {report.precision} export was refused by the precision gate: {report.reason} "
            f"(SNR {report.snr_db:.1f} dB, {report.wer_text()}, {report.sentences} sentences, "
            f"{report.words} words); the {report.precision} files were not written "
            "(--accept-failed-gate writes them anyway)"
        )


def _hear_fp32(waveforms: Waveforms, texts: list[str], sample_rate: int) -> tuple[list[str], float]:
    """Transcripts and WER of the FP32 voice. The WER of the set is its errors over its
    words, so once the errors pass ``MAX_FP32_WER`` of all words the verdict is settled:
    the recogniser stops there (on a voice it cannot follow it is also at its slowest)."""
    total = sum(len(words(text).split()) for text in texts)
    heard: list[str] = []
    errors = 0.0
    for waveform, text in zip(waveforms, texts, strict=True):
        heard.append(transcribe(waveform, sample_rate))
        errors += word_error_rate([text], heard[-1:]) * len(words(text).split())
        if errors > MAX_FP32_WER * total:
            return heard, errors / total
    return heard, word_error_rate(texts, heard)


def reference_from_latents(
    vocoder: Path, items: Latents, texts: list[str], sample_rate: int, measure_wer: bool = True
) -> Reference:
    """The reference of an FP32 vocoder given its inputs and the words they say (copy
    synthesis: mels of recorded speech; or an acoustic model's latents)."""
    speaker = "SPEAKER_ID" in graph_inputs(vocoder)
    waveforms = run_vocoder(vocoder, items, speaker)
    heard, wer = _hear_fp32(waveforms, texts, sample_rate) if measure_wer else ([], None)
    return Reference(texts, items, waveforms, heard, sample_rate, speaker, wer)


def voice_reference(voice_dir: Path, measure_wer: bool = True) -> Reference:
    """The gate sentences through the FP32 voice folder ``voice_dir``."""
    voice = Voice.load(voice_dir)
    items = latents(voice_dir, list(GATE_TEXTS))
    return reference_from_latents(voice_dir / VOCODER_FILE, items, spoken(), voice.sample_rate, measure_wer)


def _heard(reference: Reference, waveforms: Waveforms) -> list[str]:
    """Transcripts of ``waveforms``; one equal to FP32's output bit for bit is not heard again."""
    return [
        heard if np.array_equal(waveform, same) else transcribe(waveform, reference.sample_rate)
        for waveform, same, heard in zip(waveforms, reference.waveforms, reference.heard, strict=True)
    ]


def gate_vocoder(
    reference: Reference,
    vocoder: Path,
    precision: str,
    thresholds: GateThresholds,
    candidate_latents: Latents | None = None,
    acoustic: tuple[float | None, int] = (None, 0),
) -> GateReport:
    """The verdict on the candidate ``vocoder``: SNR on the reference's latents; WER on
    ``candidate_latents`` (the candidate's own acoustic output) when given, else on the
    reference's. ``acoustic``: the acoustic stage's SNR and changed frame counts."""
    waveforms = run_vocoder(vocoder, reference.latents, reference.speaker)
    snr = snr_db(reference.waveforms, waveforms)
    worst = min(snr_db([a], [b]) for a, b in zip(reference.waveforms, waveforms, strict=True))
    wer = None
    followed = reference.wer is not None and len(reference.heard) == len(reference.texts)
    if followed and thresholds.measure_wer:
        if candidate_latents is not None:
            waveforms = run_vocoder(vocoder, candidate_latents, reference.speaker)
        wer = word_error_rate(reference.texts, _heard(reference, waveforms))
    return judge(
        precision,
        reference.texts,
        snr,
        worst,
        reference.wer if thresholds.measure_wer else None,
        wer,
        thresholds,
        fp32_sentences_heard=len(reference.heard),
        acoustic_snr=acoustic[0],
        acoustic_frames_changed=acoustic[1],
    )


def _acoustic_files(folder: Path) -> dict[str, bytes]:
    skip = (VOCODER_FILE, VOCODER_UNPADDED_FILE)
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.onnx")) if p.name not in skip}


def gate_voice(
    reference: Reference, fp32_dir: Path, candidate_dir: Path, precision: str, thresholds: GateThresholds
) -> GateReport:
    """The verdict on the voice folder ``candidate_dir`` against ``reference``, the gate
    sentences through the FP32 voice ``fp32_dir``."""
    if _acoustic_files(candidate_dir) == _acoustic_files(fp32_dir):
        return gate_vocoder(reference, candidate_dir / VOCODER_FILE, precision, thresholds)
    own = latents(candidate_dir, list(GATE_TEXTS))  # each latent is FRAME_COUNT frames long
    same = [(a, b) for a, b in zip(reference.latents, own, strict=True) if a.shape == b.shape]
    acoustic_snr = snr_db([a for a, _ in same], [b for _, b in same]) if same else -math.inf
    report = gate_vocoder(
        reference,
        candidate_dir / VOCODER_FILE,
        precision,
        thresholds,
        candidate_latents=own,
        acoustic=(acoustic_snr, len(own) - len(same)),
    )
    return _frames_kept(report) if precision in SAME_FRAMES else report


def _frames_kept(report: GateReport) -> GateReport:
    """``report``, refused if any sentence's frame count differs from FP32's."""
    if not report.acoustic_frames_changed:
        return report
    failed = (
        f"{report.acoustic_frames_changed} of {report.sentences} sentences changed frame count "
        f"(an {report.precision.upper()} export must keep FP32's durations)"
    )
    return replace(report, accepted=False, reason=failed if report.accepted else f"{report.reason}; {failed}")


def settle(report: GateReport, thresholds: GateThresholds) -> GateReport:
    """Raise :class:`GateRefused` for a refused export unless the thresholds accept
    failures, in which case the report says it was exported anyway."""
    if report.accepted:
        return report
    if not thresholds.accept_failed:
        raise GateRefused(report)
    log.warning("writing the %s export although the gate refused it (--accept-failed-gate)", report.precision)
    return replace(report, exported_anyway=True)


def write_report(folder: Path, report: GateReport) -> None:
    (folder / QUALITY_FILE).write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")


def read_report(folder: Path) -> GateReport:
    return GateReport(**json.loads((folder / QUALITY_FILE).read_text(encoding="utf-8")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Measure an FP16/INT8 voice folder against its FP32 voice with the precision gate",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("fp32", type=Path, help="the FP32 voice folder")
    parser.add_argument("candidate", type=Path, help="the FP16 or INT8 voice folder")
    add_gate_arguments(parser)
    args = parser.parse_args(argv)
    voice = Voice.load(args.candidate)
    precision = "int8" if any(p.startswith("int8") for p in voice.precision.values()) else "fp16"
    report = gate_voice(
        voice_reference(args.fp32), args.fp32, args.candidate, precision, gate_thresholds(args)
    )
    print(report.summary())
    return 0 if report.accepted else 1


if __name__ == "__main__":
    raise SystemExit(main())
