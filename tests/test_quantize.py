"""The INT8 exports of the joe voice (real weights) through the precision gate.

The vocoder: the shipped recipe is accepted, quantising every layer is refused, and FP32
against itself is what an ideal export would measure. The VITS flow (``--stages flow``):
accepted with FP32's frame counts, only the flow's convolutions quantised (also in a
Coqui VITS export), and a recipe that reaches the duration predictor refused. The gate's
FP32 side (30 sentences through the voice and the recogniser) is measured once for the
module and shared.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from testkit.sample_texts import SENTENCES
from triton_tts import cli
from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.export import quantize
from triton_tts.export.int8_stages import FLOW, VOCODER, int8_stages
from triton_tts.export.precision_gate import (
    QUALITY_FILE,
    Reference,
    gate_vocoder,
    gate_voice,
    read_report,
    voice_reference,
)
from triton_tts.export.quantize import (
    CALIBRATION_TEXTS,
    NoFlow,
    acoustic_feeds,
    export_int8_voice,
    flow_convolutions,
    flow_layers,
    quantize_acoustic_convolutions,
    quantize_flow,
)
from triton_tts.export.voice_runs import latents
from triton_tts.quality.gate_texts import GATE_TEXTS
from triton_tts.quality.intelligibility import MIN_SNR_DB, GateThresholds, snr_db
from triton_tts.runtime.stages import AcousticRunner, VocoderRunner

pytestmark = pytest.mark.export  # builds and exports models


@pytest.fixture(scope="module")
def reference(voice_dir: Path) -> Reference:
    return voice_reference(voice_dir)


@pytest.fixture(scope="module")
def int8_export(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``triton-tts export int8`` as a user runs it: the folder it wrote and what it printed."""
    out = tmp_path_factory.mktemp("int8") / "joe-int8"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["export", "int8", "--voice", str(voice_dir), "--out", str(out)]) == 0
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def int8_voice(int8_export: tuple[Path, str]) -> Path:
    return int8_export[0]


def test_the_command_reports_the_gate(int8_export: tuple[Path, str]) -> None:
    out, printed = int8_export
    (line,) = printed.splitlines()
    assert line.startswith(f"wrote {out}: int8 gate on {len(GATE_TEXTS)} sentences (")
    snr = re.search(r"SNR ([\d.]+) dB", line).group(1)  # type: ignore[union-attr]
    fp32, int8 = re.search(r"WER FP32 ([\d.]+) -> int8 ([\d.]+)", line).groups()  # type: ignore[union-attr]
    # the printed figures are the report's, rounded as printed (a tolerance of half the last
    # digit fails on ties: 0.2145 prints as 0.214)
    report = read_report(out)
    assert report.wer_fp32 is not None and report.wer_candidate is not None
    assert (snr, fp32, int8) == (
        f"{report.snr_db:.1f}",
        f"{report.wer_fp32:.3f}",
        f"{report.wer_candidate:.3f}",
    )
    assert line.endswith("accepted")


def test_the_recipe_is_accepted_on_the_full_set(int8_voice: Path, reference: Reference) -> None:
    report = json.loads((int8_voice / QUALITY_FILE).read_text(encoding="utf-8"))
    assert report["accepted"] is True and report["exported_anyway"] is False
    assert report["reason"] == "within the SNR floor and the WER margin"
    assert report["sentences"] == len(GATE_TEXTS) >= 30 and report["words"] >= 300
    # The command measured FP32 on its own; the same voice heard here gives the same WER.
    assert reference.wer is not None and report["wer_fp32"] == pytest.approx(reference.wer, abs=1e-4)
    assert reference.wer < 0.3  # joe is intelligible to the recogniser (measured 0.14)
    # Defaults: the INT8 floor, well under a lossless export (infinite) and FP16's floor.
    assert report["min_snr_db"] == MIN_SNR_DB["int8"] < MIN_SNR_DB["fp16"]
    assert math.isfinite(report["snr_db"]) and report["worst_snr_db"] <= report["snr_db"]


def test_fp32_against_itself_is_lossless(reference: Reference, voice_dir: Path) -> None:
    """What the gate says of a perfect export: infinite SNR, the same WER, accepted."""
    report = gate_vocoder(reference, voice_dir / VOCODER_FILE, "int8", GateThresholds())
    assert report.snr_db == math.inf and report.worst_snr_db == math.inf
    assert report.wer_candidate == report.wer_fp32 and report.accepted


def test_quantising_every_layer_is_refused(
    voice_dir: Path, reference: Reference, int8_voice: Path, tmp_path: Path
) -> None:
    """The input, first upsampling and output layers quantised too: the recipe measured
    worse when it was chosen. The gate must say no, on SNR; written only when told to."""
    out = tmp_path / "joe-int8-every-layer"
    report = export_int8_voice(
        voice_dir, out, GateThresholds(accept_failed=True), reference=reference, keep_fp32_layers=False
    )
    assert not report.accepted and report.exported_anyway
    floor = MIN_SNR_DB["int8"]
    assert report.reason.startswith(f"SNR {report.snr_db:.1f} dB is under the {floor:g} dB floor")
    assert read_report(out) == report and Voice.load(out).precision["vocoder"] == "int8"
    assert report.snr_db < read_report(int8_voice).snr_db  # more layers quantised, more noise


def test_a_refused_export_writes_nothing_and_says_why(
    voice_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "joe-int8"
    command = ["export", "int8", "--voice", str(voice_dir), "--out", str(out), "--min-snr-db", "60"]
    assert cli.main(command) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("triton-tts: the int8 export was refused by the precision gate: SNR ")
    assert "under the 60 dB floor" in line and "WER FP32 " in line and "--accept-failed-gate" in line
    assert not out.exists() and not list(tmp_path.iterdir())  # no half-written folder either


def test_voice_folder_keeps_the_contract(int8_voice: Path, voice_dir: Path) -> None:
    voice = Voice.load(int8_voice)
    assert voice.name == "joe-int8" and voice.precision == {"acoustic": "fp32", "vocoder": "int8"}
    assert (int8_voice / ACOUSTIC_FILE).samefile(voice_dir / ACOUSTIC_FILE) or (
        (int8_voice / ACOUSTIC_FILE).read_bytes() == (voice_dir / ACOUSTIC_FILE).read_bytes()
    )
    graph = onnx.load(str(int8_voice / VOCODER_FILE)).graph
    assert [i.name for i in graph.input] == ["LATENT"] and [o.name for o in graph.output] == ["WAVEFORM"]
    ops = [n.op_type for n in graph.node]
    assert ops.count("QLinearConv") >= 18 and "ConvTranspose" not in ops  # upsamplers quantised too
    layers = [n for n in graph.node if n.op_type in ("Conv", "QLinearConv")]
    # the input and output layers, and the first upsampler (polyphase), stay FP32
    fp32 = [n.name for n in layers if n.op_type == "Conv"]
    assert len(fp32) == 3 and {fp32[0], fp32[-1]} == {layers[0].name, layers[-1].name}
    assert "_polyphase" in fp32[1]


def test_int8_vocoder_runs_in_the_cpu_stage(int8_voice: Path) -> None:
    runner = VocoderRunner(int8_voice / VOCODER_FILE, 1, max_items_per_run=2, max_padded=4000)
    rng = np.random.default_rng(0)
    out = runner.run(
        [rng.normal(size=(192, 30)).astype(np.float32), rng.normal(size=(192, 50)).astype(np.float32)]
    )
    assert [len(w) for w in out] == [30 * 256, 50 * 256]  # type: ignore[arg-type]


def test_gpu_engine_builder_refuses_the_cpu_int8_vocoder(int8_voice: Path, tmp_path: Path) -> None:
    from triton_tts.export import tensorrt

    model_dir = tmp_path / "vocoder" / "1"
    model_dir.mkdir(parents=True)
    (model_dir / "model.onnx").write_bytes((int8_voice / VOCODER_FILE).read_bytes())
    with pytest.raises(ValueError, match="fp32 or fp16 export"):
        tensorrt.engines(tmp_path, 16)


# --- the VITS flow (--stages flow) -------------------------------------------------------


@pytest.fixture(scope="module")
def flow_voice(voice_dir: Path, reference: Reference, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """joe with its flow in INT8, through the whole gate (WER included)."""
    out = tmp_path_factory.mktemp("int8-flow") / "joe-int8-flow"
    export_int8_voice(voice_dir, out, reference=reference, stages=(FLOW,))
    return out


def _same_file(a: Path, b: Path) -> bool:
    return a.samefile(b) or a.read_bytes() == b.read_bytes()


def test_the_flow_is_accepted_with_fp32s_frame_counts(flow_voice: Path, voice_dir: Path) -> None:
    report = read_report(flow_voice)
    assert report.accepted and not report.exported_anyway and report.sentences == len(GATE_TEXTS)
    assert report.acoustic_frames_changed == 0  # FRAME_COUNT is FP32's on every gate sentence
    assert report.acoustic_snr_db is not None and report.acoustic_snr_db >= MIN_SNR_DB["int8"]  # 25.1 dB
    assert report.snr_db == math.inf  # the vocoder is FP32's own file
    assert report.wer_fp32 is not None and report.wer_candidate is not None
    assert report.wer_candidate <= report.wer_fp32 + report.max_wer_increase
    voice = Voice.load(flow_voice)
    assert voice.name == "joe-int8-flow"
    assert voice.precision == {"acoustic": "int8-flow", "vocoder": "fp32"}
    assert _same_file(flow_voice / VOCODER_FILE, voice_dir / VOCODER_FILE)


def test_only_the_flow_is_quantised(flow_voice: Path, voice_dir: Path) -> None:
    fp32 = onnx.load(str(voice_dir / ACOUSTIC_FILE)).graph
    int8 = onnx.load(str(flow_voice / ACOUSTIC_FILE)).graph
    quantised = flow_convolutions(fp32)
    # joe: 4 coupling layers of 10 convolutions; each layer's output projection stays FP32
    assert len(quantised) == 36 and all(name.startswith("/flow/flows.") for name in quantised)
    layers = [[n.name for n in nodes if n.op_type == "Conv"] for nodes in flow_layers(int8).values()]
    assert [len(convs) for convs in layers if convs] == [1, 1, 1, 1]
    assert all(convs[0].endswith("/post/Conv") for convs in layers if convs)
    # every other node and its weights are FP32's, untouched (the noise, the durations...)
    kept = {node.SerializeToString() for node in int8.node}
    others = [node for node in fp32.node if node.name not in quantised]
    assert all(node.SerializeToString() in kept for node in others)
    weights = {tensor.name: tensor for tensor in int8.initializer}
    used = {name for node in others for name in node.input}
    assert all(weights[t.name] == t for t in fp32.initializer if t.name in used)
    # integer arithmetic exists only in and around those convolutions
    assert sorted(n.name for n in int8.node if n.op_type == "QLinearConv") == sorted(
        f"{q}_quant" for q in quantised
    )
    producers = {out: node for node in int8.node for out in node.output}
    for node in int8.node:
        if node.op_type == "QuantizeLinear":
            assert {n.op_type for n in int8.node if node.output[0] in n.input} == {"QLinearConv"}
        if node.op_type == "DequantizeLinear":
            assert producers[node.input[0]].op_type == "QLinearConv"
    assert {n.op_type for n in int8.node} - {n.op_type for n in fp32.node} == {
        "QuantizeLinear",
        "QLinearConv",
        "DequantizeLinear",
    }


def test_flow_frame_counts_in_a_padded_batch_with_noise_on(flow_voice: Path, voice_dir: Path) -> None:
    """As the acoustic model serves it: a padded batch, the voice's noise scale (noise_w off,
    so that durations are not random in either graph)."""
    voice = Voice.load(voice_dir)
    ids = [feeds["PHONEME_IDS"][0] for feeds in acoustic_feeds(voice_dir, SENTENCES)]
    scales = [np.array([voice.noise_scale, voice.length_scale, 0.0], dtype=np.float32)] * len(ids)
    fp32, int8 = (
        AcousticRunner(folder / ACOUSTIC_FILE, 1, len(ids), 1 << 20).run(ids, scales)
        for folder in (voice_dir, flow_voice)
    )
    assert [item[1] for item in int8] == [item[1] for item in fp32]  # type: ignore[index]


def test_a_recipe_that_reaches_the_durations_is_refused(
    voice_dir: Path, reference: Reference, tmp_path: Path
) -> None:
    """Every convolution of the acoustic graph quantised, the duration predictor's too:
    frame counts move (26 of 30 sentences when measured) and the gate says no."""
    candidate = tmp_path / "joe-every-convolution"
    candidate.mkdir()
    for name in ("voice.json", VOCODER_FILE):
        (candidate / name).write_bytes((voice_dir / name).read_bytes())
    graph = onnx.load(str(voice_dir / ACOUSTIC_FILE), load_external_data=False).graph
    every = [node.name for node in graph.node if node.op_type == "Conv"]
    calibration = acoustic_feeds(voice_dir, CALIBRATION_TEXTS)
    quantize_acoustic_convolutions(voice_dir / ACOUSTIC_FILE, candidate / ACOUSTIC_FILE, calibration, every)
    report = gate_voice(reference, voice_dir, candidate, "int8", GateThresholds(measure_wer=False))
    moved = report.acoustic_frames_changed
    assert not report.accepted and moved > 0
    assert f"{moved} of {len(GATE_TEXTS)} sentences changed frame count" in report.reason


def test_the_command_takes_stages(voice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(quantize, "run", lambda voice, out, thresholds, stages: asked.append(stages))
    command = ["export", "int8", "--voice", str(voice_dir), "--out", str(tmp_path / "out")]
    assert cli.main(command) == 0
    assert cli.main([*command, "--stages", VOCODER, FLOW]) == 0
    assert cli.main([*command, "--stages", FLOW]) == 0
    assert [int8_stages(stages) for stages in asked] == [(VOCODER,), (FLOW, VOCODER), (FLOW,)]


def test_an_unknown_stage_is_refused(
    voice_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["export", "int8", "--voice", str(voice_dir), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as stopped:
        cli.main([*command, "--stages", FLOW, "durations"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("triton-tts export int8: error: argument --stages: invalid choice: 'durations'")
    assert FLOW in error and VOCODER in error
    with pytest.raises(ValueError, match="unknown INT8 stage durations: choose from flow, vocoder"):
        export_int8_voice(voice_dir, tmp_path / "out", stages=("durations",))
    assert not (tmp_path / "out").exists()


def test_a_voice_without_a_flow_is_refused(
    voice_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A graph with no 'flow' scope (here joe's vocoder standing in as the acoustic graph,
    as a FastPitch's would): one line, exit 1, nothing written."""
    flowless = tmp_path / "flowless"
    flowless.mkdir()
    (flowless / "voice.json").write_bytes((voice_dir / "voice.json").read_bytes())
    (flowless / ACOUSTIC_FILE).write_bytes((voice_dir / VOCODER_FILE).read_bytes())
    out = tmp_path / "out"
    assert cli.main(["export", "int8", "--voice", str(flowless), "--out", str(out), "--stages", FLOW]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"triton-tts: {flowless / ACOUSTIC_FILE} has no VITS flow (no convolution in a 'flow' scope): "
        "--stages flow is for VITS voices (Piper, Coqui VITS)"
    )
    assert not out.exists()
    with pytest.raises(NoFlow, match="there is no"):
        quantize_flow(tmp_path / "absent.onnx", tmp_path / "int8.onnx", [])


def test_the_flow_of_a_coqui_vits_export(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The same selection on a Coqui VITS export (random weights, 2 coupling layers): only
    its flow's convolutions quantised, its frame counts kept."""
    pytest.importorskip("TTS", reason="the Coqui export extra is not installed")
    from testkit.coqui_checkpoints import build_tts
    from triton_tts.export.coqui.export import export_coqui
    from triton_tts.export.coqui.loading import load

    saved = build_tts("vits", tmp_path_factory.mktemp("vits-checkpoint"))
    fp32 = tmp_path_factory.mktemp("voices") / "coqui-vits"
    export_coqui(load(checkpoint=saved.checkpoint, config=saved.config), fp32)
    int8 = fp32.with_name("coqui-vits-int8-flow")
    int8.mkdir()
    (int8 / "voice.json").write_bytes((fp32 / "voice.json").read_bytes())
    quantize_flow(fp32 / ACOUSTIC_FILE, int8 / ACOUSTIC_FILE, acoustic_feeds(fp32, CALIBRATION_TEXTS))
    graph = onnx.load(str(fp32 / ACOUSTIC_FILE), load_external_data=False).graph
    quantised = flow_convolutions(graph)
    flow = [n.name for nodes in flow_layers(graph).values() for n in nodes if n.op_type == "Conv"]
    every = [n.name for n in graph.node if n.op_type == "Conv"]
    assert 0 < len(quantised) < len(flow) < len(every)  # the duration predictor has "flows" too
    assert not any("duration_predictor" in name for name in flow)
    int8_graph = onnx.load(str(int8 / ACOUSTIC_FILE), load_external_data=False).graph
    assert sorted(n.name for n in int8_graph.node if n.op_type == "QLinearConv") == sorted(
        f"{name}_quant" for name in quantised
    )
    texts = list(SENTENCES)
    reference, candidate = latents(fp32, texts), latents(int8, texts)
    assert [a.shape for a in candidate] == [a.shape for a in reference]
    assert snr_db(reference, candidate) > 10.0  # random weights: a sanity bound, not a quality figure
