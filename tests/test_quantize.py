"""The INT8 vocoder export: same contract, FP32 where it matters, checked against FP32."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from triton_tts.export.quantize import MAX_WER_INCREASE, QUALITY_FILE, export_int8_voice
from triton_tts.stages import VocoderRunner
from triton_tts.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice


@pytest.fixture(scope="module")
def int8_voice(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("int8") / "joe-int8"
    export_int8_voice(voice_dir, out)
    return out


def test_quality_report_passes_the_stated_margin(int8_voice: Path) -> None:
    report = json.loads((int8_voice / QUALITY_FILE).read_text(encoding="utf-8"))
    assert report["passed"] is True
    assert report["wer_int8"] <= report["wer_fp32"] + MAX_WER_INCREASE
    assert min(report["snr_db"]) > 12.0  # measured ~18-20 dB; FP32 vs itself would be infinite


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
