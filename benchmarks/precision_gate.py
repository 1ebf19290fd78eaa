"""The precision gate's figures on real weights: the joe voice's vocoder and HiFi-GAN V1
(copy synthesis of joe's FP32 speech), at FP16, at INT8 with the shipped recipe, and at
INT8 with every layer quantised (the recipe known to be worse).

Each row is the gate's own report (triton_tts.export.precision_gate) with the default
thresholds; FP16 runs through onnxruntime's CPU provider here (GPU nodes run it through
TensorRT, not measured by this script).

    python -m benchmarks.precision_gate    # results/precision_gate.json and .md
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.stamp import stamp, write_report
from triton_tts.contract.voice import VOCODER_FILE
from triton_tts.export.coqui.precision import half_precision
from triton_tts.export.precision_gate import Reference, gate_vocoder, reference_from_latents, voice_reference
from triton_tts.export.quantize import CALIBRATION_TEXTS, quantize_vocoder
from triton_tts.export.voice_runs import Latents, latents, run_vocoder
from triton_tts.quality.gate_texts import GATE_TEXTS, spoken
from triton_tts.quality.intelligibility import GateThresholds

log = logging.getLogger(__name__)

CANDIDATES = ("fp16", "int8", "int8, every layer")


def gate_rows(
    name: str, reference: Reference, fp32: Path, calibration: Latents, work: Path
) -> list[dict[str, Any]]:
    rows = []
    for candidate in CANDIDATES:
        path = work / f"{name}-{candidate.replace(', ', '-').replace(' ', '-')}.onnx"
        if candidate == "fp16":
            half_precision(fp32, path)
        else:
            quantize_vocoder(fp32, path, calibration, keep_fp32_layers=candidate == "int8")
        report = gate_vocoder(reference, path, candidate.split(",")[0], GateThresholds())
        log.info("%s %s: %s", name, candidate, report.summary())
        rows.append({"model": name, "candidate": candidate, **asdict(report)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", type=Path, default=Path("voices/joe"), help="the FP32 voice folder")
    parser.add_argument("--out", type=Path, default=Path("results/precision_gate.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from testkit import hifigan_v1

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        joe_vocoder = args.voice / VOCODER_FILE
        joe = voice_reference(args.voice)
        rows += gate_rows(
            "joe (Piper VITS decoder)", joe, joe_vocoder, latents(args.voice, CALIBRATION_TEXTS), work
        )
        hifigan = hifigan_v1.export_vocoder(
            hifigan_v1.coqui_checkpoint(work / "hifigan"), work / "hifigan.onnx"
        )
        mels = [hifigan_v1.mel(audio) for audio in joe.waveforms]
        copy = reference_from_latents(hifigan, mels, spoken(), hifigan_v1.SAMPLE_RATE)
        calibration_speech = run_vocoder(joe_vocoder, latents(args.voice, CALIBRATION_TEXTS), speaker=False)
        calibration = [hifigan_v1.mel(audio) for audio in calibration_speech]
        rows += gate_rows("HiFi-GAN V1 LJSpeech (copy synthesis)", copy, hifigan, calibration, work)
    lines = [
        f"Precision gate, {len(GATE_TEXTS)} held-out sentences, default thresholds:",
        "",
        "| vocoder | candidate | SNR dB (worst sentence) | WER FP32 -> candidate | verdict |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        verdict = "accepted" if r["accepted"] else f"refused: {r['reason']}"
        lines.append(
            f"| {r['model']} | {r['candidate']} | {r['snr_db']:.1f} ({r['worst_snr_db']:.1f}) | "
            f"{r['wer_fp32']:.3f} -> {r['wer_candidate']:.3f} | {verdict} |"
        )
    write_report(args.out, {**stamp(), "sentences": len(GATE_TEXTS), "rows": rows}, ["\n".join(lines)])


if __name__ == "__main__":
    main()
