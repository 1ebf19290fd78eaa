"""Static INT8 for the vocoder and the VITS flow, calibrated on real inputs, gated against FP32.

Precision is chosen per stage (``--stages``, :mod:`.int8_stages`): the vocoder by
default, the VITS flow on request, both together. The rest of the acoustic model stays
FP32: its durations are rounded up per phoneme, so small errors there change frame counts.

**Vocoder.** The vocoder is most of the CPU cost. Measured on the joe voice (2 cores):
quantising every operator made the vocoder faster but its speech recognisably worse
(lower SNR, higher held-out WER, whichever layers were left in FP32). The recipe here
quantises the convolutions only, the upsampling layers included once rewritten as
ordinary convolutions, and keeps the input layer, the first upsampling layer and the
output layer in FP32; quantising those too is the recipe the precision gate refuses
(tests/test_quantize.py). The quantised graph then runs channels-last (``vocoder_graph``).
Calibration latents come from a text corpus run through the same normaliser, espeak-ng
and acoustic model the server uses.

**Flow.** The flow (the reverse coupling layers of a VITS acoustic graph) runs after the
duration predictor, so quantising it cannot move a frame; the precision gate checks that
FRAME_COUNT is FP32's on every sentence all the same. Its nodes are found by their scope
in the graph (``/flow/...``, Piper and Coqui VITS alike), not by a list. The recipe:
static INT8 of the flow's convolutions, calibrated on the acoustic graph's own inputs for
the same texts (same text path, noise off), keeping each coupling layer's output
projection in FP32 (its error shifts the latent directly: about 4 dB of latent SNR on
joe, at no measurable cost in speed). Static, not dynamic: onnxruntime's dynamic integer
convolution (``ConvInteger``) made joe's acoustic stage 2.5-3x slower than FP32, the
static graph 1.3-1.4x faster. Only the flow's nodes change: the other nodes of the graph,
its noise included, are FP32's as they were. The gate judges the flow on its latents
(SNR, frame counts) and on the WER end to end, not on the waveform SNR: through FP32's
vocoder joe's 25 dB on the latents is 4.9 dB on the waveform, a phase difference mostly
(18 dB on magnitude spectrograms, where the INT8 vocoder measures 22 dB).

Quality and speed against FP32 on joe: docs/performance.md, "INT8 vocoder", "INT8 flow"
and "Precision gate". Every quantised voice passes the precision gate
(:mod:`.precision_gate`: waveform SNR and the word error rate of an offline recogniser
on held-out sentences, against the FP32 voice; the latents' SNR and their frame counts
when the flow is quantised) before it is written; a refused one is not written unless
``--accept-failed-gate`` says so. The INT8 graphs use onnxruntime's CPU integer kernels:
they are for CPU nodes (GPU nodes serve the FP32/FP16 export through TensorRT).
The result is an ordinary voice folder, with the gate's report in ``quality.json``.

    python -m triton_tts.export.quantize --voice voices/joe --out voices/joe-int8
    python -m triton_tts.export.quantize --voice voices/joe --out voices/joe-int8-flow --stages flow
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

from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, VOCODER_UNPADDED_FILE, Voice
from triton_tts.export.int8_stages import DEFAULT_STAGES, FLOW, VOCODER, add_stages_argument, int8_stages
from triton_tts.export.vocoder_graph import channels_last, polyphase_upsampling, write_unpadded
from triton_tts.export.voice_runs import latents, text_ids, vocoder_feeds
from triton_tts.quality.intelligibility import GateReport, GateThresholds, add_gate_arguments, gate_thresholds
from triton_tts.runtime.onnx_session import graph_inputs

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


# The VITS flow's module scope in exported node names, "/flow/flows.6/enc/in_layers.0/Conv"
# (Piper's SynthesizerTrn.flow and Coqui's Vits.flow alike). The stochastic duration
# predictor's own flows are scopes named "flows.N" under "/dp/" (Piper) or
# "/duration_predictor/" (Coqui), never "flow", so they are not selected.
FLOW_SCOPE = "flow"


class NoFlow(ValueError):
    """An acoustic graph with no VITS flow to quantise."""


class _Feeds(CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self._items = iter(items)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._items, None)


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
        _int8_convolutions(
            prepared,
            quantised,
            [vocoder_feeds(latent, speaker) for latent in calibration],
            nodes_to_exclude=keep_fp32,
        )
        return onnx.load(str(quantised))


def flow_layers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """The nodes in the flow's scope, by coupling layer (the scope under the flow,
    "flows.6"), in graph order."""
    layers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        scopes = node.name.split("/")[:-1]
        if FLOW_SCOPE in scopes:
            below = scopes[scopes.index(FLOW_SCOPE) + 1 :]
            layers.setdefault(below[0] if below else "", []).append(node)
    return layers


def flow_convolutions(graph: onnx.GraphProto, keep_fp32_layers: bool = True) -> list[str]:
    """Names of the flow convolutions the recipe quantises: every one but each coupling
    layer's last, its output projection (``keep_fp32_layers=False``: that one too).
    Raises :class:`NoFlow` when the graph has none."""
    layers = [[n.name for n in nodes if n.op_type == "Conv"] for nodes in flow_layers(graph).values()]
    if not any(layers):
        raise NoFlow(f"no VITS flow (no convolution in a '{FLOW_SCOPE}' scope)")
    kept = 1 if keep_fp32_layers else 0
    return [name for convolutions in layers for name in convolutions[: len(convolutions) - kept]]


def acoustic_feeds(voice_dir: Path, texts: list[str]) -> list[dict[str, Any]]:
    """The acoustic graph's inputs for ``texts``, one text each, through the server's
    text path (normaliser, espeak-ng), noise off, speaker 0: what the precision gate runs.
    With the serving noise on (0.667), joe's flow calibrated this way measured the same
    latent SNR as one calibrated with it (same noise in both graphs), and an export from
    noise-free inputs is reproducible."""
    voice = Voice.load(voice_dir)
    speaker = "SPEAKER_ID" in graph_inputs(voice_dir / ACOUSTIC_FILE)
    items = []
    for ids in text_ids(voice, texts):
        feeds: dict[str, Any] = {
            "PHONEME_IDS": ids[None],
            "PHONEME_LENGTH": np.array([len(ids)], dtype=np.int64),
            "SCALES": np.array([[0.0, voice.length_scale, 0.0]], dtype=np.float32),
        }
        if speaker:
            feeds["SPEAKER_ID"] = np.zeros(1, dtype=np.int64)
        items.append(feeds)
    return items


def flow_convolutions_in(acoustic: Path, keep_fp32_layers: bool = True) -> list[str]:
    """:func:`flow_convolutions` of the acoustic graph in a file; :class:`NoFlow` names it."""
    for_vits = f"--stages {FLOW} is for VITS voices (Piper, Coqui VITS)"
    if not acoustic.exists():  # Tacotron2 voices run three graphs and have no acoustic.onnx
        raise NoFlow(f"there is no {acoustic}: {for_vits}")
    try:
        return flow_convolutions(onnx.load(str(acoustic), load_external_data=False).graph, keep_fp32_layers)
    except NoFlow as missing:
        raise NoFlow(f"{acoustic} has {missing}: {for_vits}") from None


def quantize_flow(
    fp32_path: Path, int8_path: Path, calibration: list[dict[str, Any]], keep_fp32_layers: bool = True
) -> Path:
    """Static INT8 of a VITS acoustic graph's flow convolutions (:func:`flow_convolutions`);
    every other node stays as it was. ``calibration``: acoustic inputs (:func:`acoustic_feeds`)."""
    convolutions = flow_convolutions_in(fp32_path, keep_fp32_layers)
    return quantize_acoustic_convolutions(fp32_path, int8_path, calibration, convolutions)


def quantize_acoustic_convolutions(
    fp32_path: Path, int8_path: Path, calibration: list[dict[str, Any]], convolutions: list[str]
) -> Path:
    """Static INT8 (QOperator, per-channel weights, MinMax) of the named ``Conv`` nodes of
    an acoustic graph. Pre-processing is shape inference only: onnxruntime's optimisation
    pass would rewrite the whole graph, the duration predictor included, and float
    rounding there can move a frame."""
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(fp32_path), str(prepared), skip_optimization=True, skip_symbolic_shape=True)
        _int8_convolutions(prepared, int8_path, calibration, nodes_to_quantize=convolutions)
    return int8_path


def _int8_convolutions(
    prepared: Path, out: Path, calibration: list[dict[str, Any]], **nodes: list[str]
) -> None:
    """The one INT8 recipe of both stages: static QOperator, per-channel INT8 weights,
    UINT8 activations calibrated with MinMax, convolutions only. ``nodes``: onnxruntime's
    ``nodes_to_quantize`` or ``nodes_to_exclude``."""
    quantize_static(
        str(prepared),
        str(out),
        _Feeds(calibration),
        quant_format=QuantFormat.QOperator,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        op_types_to_quantize=["Conv"],
        **nodes,
    )


def _link_or_copy(source: Path, target: Path) -> None:
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def int8_name(name: str, stages: tuple[str, ...]) -> str:
    """joe -> joe-int8 (the vocoder, the default), joe-int8-flow, joe-int8-flow-vocoder."""
    return f"{name}-int8" if stages == DEFAULT_STAGES else f"{name}-int8-{'-'.join(stages)}"


def export_int8_voice(
    voice_dir: Path,
    out: Path,
    thresholds: GateThresholds | None = None,
    *,
    reference: Reference | None = None,
    keep_fp32_layers: bool = True,
    stages: tuple[str, ...] = DEFAULT_STAGES,
) -> GateReport:
    """Write a voice folder like ``voice_dir`` with ``stages`` in INT8 (:mod:`.int8_stages`)
    into ``out``, if the precision gate accepts it (or ``thresholds.accept_failed``);
    returns the gate's report.

    A refused export raises :class:`~triton_tts.export.precision_gate.GateRefused` and
    leaves ``out`` untouched; a voice with no flow asked for one raises :class:`NoFlow`.
    ``reference``: the gate's FP32 measurements of ``voice_dir`` when the caller already
    has them (they are the slow half of the gate). ``keep_fp32_layers``: the vocoder's."""
    from triton_tts.export import precision_gate

    stages = int8_stages(stages)
    if FLOW in stages:
        flow_convolutions_in(voice_dir / ACOUSTIC_FILE)  # a voice without a flow fails before any work
    thresholds = thresholds or GateThresholds()
    voice = Voice.load(voice_dir)
    quantised = ({ACOUSTIC_FILE} if FLOW in stages else set()) | (
        {VOCODER_FILE, VOCODER_UNPADDED_FILE} if VOCODER in stages else set()
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as tmp:
        candidate = Path(tmp)
        for source in voice_dir.glob("*.onnx"):  # the stages not quantised stay FP32
            if source.name not in quantised:
                _link_or_copy(source, candidate / source.name)
        if FLOW in stages:
            calibration = acoustic_feeds(voice_dir, CALIBRATION_TEXTS)
            quantize_flow(voice_dir / ACOUSTIC_FILE, candidate / ACOUSTIC_FILE, calibration)
        if VOCODER in stages:  # calibrated on FP32's latents: the same vocoder, whatever the flow
            calibration_latents = latents(voice_dir, CALIBRATION_TEXTS)
            quantize_vocoder(
                voice_dir / VOCODER_FILE, candidate / VOCODER_FILE, calibration_latents, keep_fp32_layers
            )
            write_unpadded(candidate / VOCODER_FILE, candidate / VOCODER_UNPADDED_FILE)
        precision = {
            "acoustic": "int8-flow" if FLOW in stages else "fp32",  # the text encoder and durations: FP32
            "vocoder": "int8" if VOCODER in stages else "fp32",
        }
        int8 = replace(voice, name=int8_name(voice.name, stages), precision=precision)
        int8.save(candidate)
        reference = reference or precision_gate.voice_reference(voice_dir, thresholds.measure_wer)
        report = precision_gate.gate_voice(reference, voice_dir, candidate, "int8", thresholds)
        report = precision_gate.settle(report, thresholds)
        precision_gate.write_report(candidate, report)
        out.mkdir(exist_ok=True)
        for written in sorted(candidate.iterdir()):
            os.replace(written, out / written.name)
    return report


def run(
    voice_dir: Path, out: Path, thresholds: GateThresholds, stages: tuple[str, ...] = DEFAULT_STAGES
) -> GateReport:
    """``export_int8_voice`` for a command line: a refusal becomes its one-line error."""
    from triton_tts.export.precision_gate import GateRefused

    try:
        report = export_int8_voice(voice_dir, out, thresholds, stages=stages)
    except (GateRefused, NoFlow) as refused:
        raise SystemExit(str(refused)) from refused
    print(f"wrote {out}: {report.summary()}")
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--voice", type=Path, default=Path("voices/joe"), help="FP32 voice folder")
    parser.add_argument("--out", type=Path, required=True, help="voice folder to write")
    add_stages_argument(parser)
    add_gate_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args.voice, args.out, gate_thresholds(args), tuple(args.stages))


if __name__ == "__main__":
    main()
