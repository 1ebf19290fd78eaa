"""Static INT8 for the vocoder, calibrated on real latents, gated against FP32.

Precision is chosen per stage: the vocoder is most of the CPU cost; the acoustic model
stays FP32 (its durations are rounded up per phoneme, so small errors change frame
counts). Measured on the joe voice (2 cores): quantising every operator made the vocoder
faster but its speech recognisably worse (lower SNR, higher held-out WER, whichever
layers were left in FP32). The recipe here quantises the convolutions only, the
upsampling layers included once rewritten as ordinary convolutions, and keeps the input
layer, the first upsampling layer and the output layer in FP32; quantising those too is
the recipe the precision gate refuses (tests/test_quantize.py). The quantised graph then
runs channels-last (``vocoder_graph``). Its quality and speed against FP32 on joe:
docs/performance.md, "INT8 vocoder" and "Precision gate". Calibration latents come from
a text corpus run through the same normaliser, espeak-ng and acoustic model the server
uses. Every quantised voice passes the precision gate (:mod:`.precision_gate`: waveform
SNR and the word error rate of an offline recogniser on held-out sentences, against the
FP32 voice) before it is written; a refused one is not written unless
``--accept-failed-gate`` says so. The INT8 graph uses onnxruntime's CPU integer kernels:
it is for CPU nodes (GPU nodes serve the FP32/FP16 export through TensorRT).
The result is an ordinary voice folder, with the gate's report in ``quality.json``.

    python -m triton_tts.export.quantize --voice voices/joe --out voices/joe-int8
    triton-tts serve --voice voices/joe-int8
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from triton_tts.export.vocoder_graph import channels_last, polyphase_upsampling, write_unpadded
from triton_tts.export.voice_runs import latents, vocoder_feeds
from triton_tts.intelligibility import GateReport, GateThresholds, add_gate_arguments, gate_thresholds
from triton_tts.onnx_session import graph_inputs
from triton_tts.voice import VOCODER_FILE, VOCODER_UNPADDED_FILE, Voice

if TYPE_CHECKING:
    from triton_tts.export.precision_gate import Reference

log = logging.getLogger(__name__)

CALIBRATION_TEXTS = [
    "Thank you for calling the city library.",
    "Our opening hours have changed this month: we now open at nine in the morning.",
    "On Saturdays we open at ten and close at four, and we are closed on Sundays.",
    "You can renew your loans online, by phone, or at any branch.",
    "If you have a question about your account, please stay on the line.",
    "The quarterly report shows steady growth in every region except the north.",
    "Turn left in two hundred meters, then keep right at the fork.",
    "Is this the right number for the pharmacy? I would like to check my prescription!",
    "Twelve thousand, four hundred and fifty people visited the museum in March.",
    "Please remember to bring your badge; the front desk will not let you in without it.",
]


class _Latents(CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, items: list[npt.NDArray[np.float32]], speaker: bool) -> None:
        self._items = iter(items)
        self._speaker = speaker

    def get_next(self) -> dict[str, Any] | None:
        item = next(self._items, None)
        return None if item is None else vocoder_feeds(item, self._speaker)


def quantize_vocoder(
    fp32_path: Path,
    int8_path: Path,
    calibration: list[npt.NDArray[np.float32]],
    keep_fp32_layers: bool = True,
) -> Path:
    """Static INT8 of the vocoder's convolutions, laid out for onnxruntime's CPU kernels.

    The upsampling layers are first rewritten as ordinary convolutions (exact), so they
    quantise too; the input layer, the first upsampling layer and the output layer stay
    FP32 (the recipe that passes the precision gate; ``keep_fp32_layers=False`` quantises
    them too, the recipe it refuses). The quantised graph then runs channels-last, with no
    transposes between its integer convolutions (``vocoder_graph``): on the joe voice,
    2 cores, that made the INT8 vocoder faster than the previous QDQ graph with the same
    quality (docs/performance.md).
    """
    quantised = quantize_convolutions(fp32_path, calibration, keep_fp32_layers)
    onnx.save(channels_last(quantised), str(int8_path))
    return int8_path


def quantize_convolutions(
    fp32_path: Path, calibration: list[npt.NDArray[np.float32]], keep_fp32_layers: bool = True
) -> onnx.ModelProto:
    """The quantisation itself (QOperator format, channels-first)."""
    with tempfile.TemporaryDirectory() as tmp:
        polyphase = Path(tmp) / "polyphase.onnx"
        onnx.save(polyphase_upsampling(onnx.load(str(fp32_path))), str(polyphase))
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(polyphase), str(prepared), skip_symbolic_shape=True)
        graph = onnx.load(str(prepared)).graph
        convolutions = [n.name for n in graph.node if n.op_type == "Conv"]
        upsamplers = [n.name for n in graph.node if n.op_type == "Conv" and "_polyphase" in n.name]
        keep_fp32 = [convolutions[0], *upsamplers[:1], convolutions[-1]] if keep_fp32_layers else []
        speaker = "SPEAKER_ID" in graph_inputs(prepared)
        quantised = Path(tmp) / "int8.onnx"
        quantize_static(
            str(prepared),
            str(quantised),
            _Latents(calibration, speaker),
            quant_format=QuantFormat.QOperator,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            op_types_to_quantize=["Conv"],
            nodes_to_exclude=keep_fp32,
        )
        return onnx.load(str(quantised))


def _link_or_copy(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def export_int8_voice(
    voice_dir: Path,
    out: Path,
    thresholds: GateThresholds | None = None,
    *,
    reference: Reference | None = None,
    keep_fp32_layers: bool = True,
) -> GateReport:
    """Write a voice folder like ``voice_dir`` with an INT8 vocoder into ``out``, if the
    precision gate accepts it (or ``thresholds.accept_failed``); returns the gate's report.

    A refused export raises :class:`~triton_tts.export.precision_gate.GateRefused` and
    leaves ``out`` untouched. ``reference``: the gate's FP32 measurements of ``voice_dir``
    when the caller already has them (they are the slow half of the gate)."""
    from triton_tts.export import precision_gate

    thresholds = thresholds or GateThresholds()
    voice = Voice.load(voice_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as tmp:
        candidate = Path(tmp)
        for source in voice_dir.glob("*.onnx"):  # the acoustic stage's files stay FP32
            if source.name not in (VOCODER_FILE, VOCODER_UNPADDED_FILE):
                _link_or_copy(source, candidate / source.name)
        calibration = latents(voice_dir, CALIBRATION_TEXTS)
        quantize_vocoder(voice_dir / VOCODER_FILE, candidate / VOCODER_FILE, calibration, keep_fp32_layers)
        write_unpadded(candidate / VOCODER_FILE, candidate / VOCODER_UNPADDED_FILE)
        int8 = replace(voice, name=f"{voice.name}-int8", precision={"acoustic": "fp32", "vocoder": "int8"})
        int8.save(candidate)
        reference = reference or precision_gate.voice_reference(voice_dir, thresholds.measure_wer)
        report = precision_gate.gate_voice(reference, voice_dir, candidate, "int8", thresholds)
        report = precision_gate.settle(report, thresholds)
        precision_gate.write_report(candidate, report)
        out.mkdir(exist_ok=True)
        for written in sorted(candidate.iterdir()):
            os.replace(written, out / written.name)
    return report


def run(voice_dir: Path, out: Path, thresholds: GateThresholds) -> GateReport:
    """``export_int8_voice`` for a command line: a refusal becomes its one-line error."""
    from triton_tts.export.precision_gate import GateRefused

    try:
        report = export_int8_voice(voice_dir, out, thresholds)
    except GateRefused as refused:
        raise SystemExit(str(refused)) from refused
    print(f"wrote {out}: {report.summary()}")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--voice", type=Path, default=Path("voices/joe"), help="FP32 voice folder")
    parser.add_argument("--out", type=Path, required=True, help="voice folder to write")
    add_gate_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args.voice, args.out, gate_thresholds(args))


if __name__ == "__main__":
    main()
