"""FP16 and INT8 variants of an exported (FP32) voice folder, each through the precision
gate (:mod:`triton_tts.export.precision_gate`) before it replaces the FP32 files."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import onnx

from triton_tts.contract.voice import Voice
from triton_tts.quality.intelligibility import GateThresholds


def half_precision(fp32_path: Path, fp16_path: Path) -> Path:
    """An ONNX graph in FP16 with its inputs and outputs kept FP32."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True), str(fp16_path))
    return fp16_path


def convert_precision(
    folder: Path, voice: Voice, precision: str, thresholds: GateThresholds | None = None
) -> Voice:
    """fp16: every stage in half precision with FP32 inputs/outputs (for GPUs).
    int8: the vocoder in static INT8; acoustic stays FP32, as static INT8 changed frame
    counts of acoustic models (see triton_tts.export.quantize).

    Either is measured against the FP32 export in ``folder`` and replaces it only if the
    gate accepts it (or ``thresholds.accept_failed``); a refusal raises
    :class:`~triton_tts.export.precision_gate.GateRefused` and leaves the FP32 export."""
    from triton_tts.export import precision_gate

    thresholds = thresholds or GateThresholds()
    if precision not in ("fp16", "int8"):
        raise ValueError(f"no conversion to {precision!r}: fp16 or int8")
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-{precision}-") as tmp:
        candidate = Path(tmp) / folder.name
        if precision == "int8":
            from triton_tts.export.quantize import export_int8_voice

            export_int8_voice(folder, candidate, thresholds)
        else:
            shutil.copytree(folder, candidate)
            for onnx_file in sorted(candidate.glob("*.onnx")):
                half_precision(onnx_file, onnx_file)
            replace(voice, precision={stage: "fp16" for stage in ("acoustic", "vocoder")}).save(candidate)
            reference = precision_gate.voice_reference(folder, thresholds.measure_wer)
            report = precision_gate.gate_voice(reference, folder, candidate, "fp16", thresholds)
            precision_gate.write_report(candidate, precision_gate.settle(report, thresholds))
        converted = replace(Voice.load(candidate), name=voice.name)  # the name the user chose
        converted.save(candidate)
        for written in sorted(candidate.iterdir()):
            os.replace(written, folder / written.name)
    return converted
