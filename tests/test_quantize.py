"""The INT8 vocoder export of the joe voice (real weights) through the precision gate.

The shipped recipe is accepted, quantising every layer is refused, and FP32 against
itself is what an ideal export would measure. The gate's FP32 side (30 sentences through
the voice and the recogniser) is measured once for the module and shared.
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

from triton_tts import cli
from triton_tts.export.precision_gate import (
    QUALITY_FILE,
    Reference,
    gate_vocoder,
    read_report,
    voice_reference,
)
from triton_tts.export.quantize import export_int8_voice
from triton_tts.gate_texts import GATE_TEXTS
from triton_tts.intelligibility import MIN_SNR_DB, GateThresholds
from triton_tts.stages import VocoderRunner
from triton_tts.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice


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
    snr = float(re.search(r"SNR ([\d.]+) dB", line).group(1))  # type: ignore[union-attr]
    fp32, int8 = map(float, re.search(r"WER FP32 ([\d.]+) -> int8 ([\d.]+)", line).groups())  # type: ignore[union-attr]
    report = read_report(out)
    assert snr == pytest.approx(report.snr_db, abs=0.05)
    assert fp32 == pytest.approx(report.wer_fp32, abs=5e-4)
    assert int8 == pytest.approx(report.wer_candidate, abs=5e-4)
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
