"""TensorRT engine profiles: checked here by construction; built only where TensorRT is."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from triton_tts.build.model_configs import BuildOptions
from triton_tts.export import piper, tensorrt
from triton_tts.runtime.batching import PHONEME_BUCKETS


def test_profiles_cover_what_the_repository_sends(voice_dir: Path) -> None:
    batch = BuildOptions().max_batch_size
    acoustic = tensorrt.acoustic_profile(batch)
    vocoder = tensorrt.vocoder_profile(batch, tensorrt.latent_channels(voice_dir / "vocoder.onnx"))
    for profile in (acoustic, vocoder):
        for low, opt, high in profile.shapes.values():
            assert all(a <= b <= c for a, b, c in zip(low, opt, high, strict=True))
            assert high[0] == batch and low[0] == 1
    assert acoustic.shapes["PHONEME_IDS"][2][1] in PHONEME_BUCKETS  # preprocess pads to buckets
    assert PHONEME_BUCKETS[0] >= tensorrt.MIN_PHONEMES
    # latents arrive padded to the acoustic model's frame multiple
    for frames in (tensorrt.MIN_FRAMES, tensorrt.OPT_FRAMES, vocoder.shapes["LATENT"][2][2]):
        assert frames % piper.FRAME_MULTIPLE == 0
    assert vocoder.shapes["LATENT"][2][1] == 192


def test_trtexec_command_names_every_input(voice_dir: Path) -> None:
    cmd = tensorrt.trtexec_command(Path("a.onnx"), Path("a.plan"), tensorrt.acoustic_profile(32), fp16=False)
    assert "--maxShapes=PHONEME_IDS:32x2048,PHONEME_LENGTH:32,SCALES:32x3" in cmd
    assert "--fp16" not in cmd


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is None, reason="needs TensorRT and an NVIDIA GPU (GPU nodes only)"
)
def test_engines_build(tmp_path: Path, voice_dir: Path) -> None:  # pragma: no cover - GPU
    channels = tensorrt.latent_channels(voice_dir / "vocoder.onnx")
    plan = tensorrt.build_engine(
        voice_dir / "vocoder.onnx",
        tmp_path / "vocoder.plan",
        tensorrt.vocoder_profile(8, channels),
        fp16=True,
    )
    assert plan.stat().st_size > 0


def test_every_voice_gets_engines_with_its_speaker_input(tmp_path: Path) -> None:
    """Several voices: each native stage gets an engine; SPEAKER_ID is profiled where the
    graph takes it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    def graph_file(path: Path, inputs: list[tuple[str, int, list[str | int | None]]]) -> None:
        values = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
        out = helper.make_tensor_value_info("OUT", TensorProto.FLOAT, None)
        weight = helper.make_tensor("W", TensorProto.FLOAT, [1], np.ones(1, np.float32))
        node = helper.make_node("Identity", [inputs[0][0]], ["OUT"])
        path.parent.mkdir(parents=True)
        onnx.save(helper.make_model(helper.make_graph([node], "g", values, [out], [weight])), str(path))

    ids: list[tuple[str, int, list[str | int | None]]] = [
        ("PHONEME_IDS", TensorProto.INT64, ["b", "t"]),
        ("PHONEME_LENGTH", TensorProto.INT64, ["b"]),
    ]
    graph_file(tmp_path / "acoustic/1/model.onnx", ids)
    graph_file(tmp_path / "acoustic__vctk/1/model.onnx", [*ids, ("SPEAKER_ID", TensorProto.INT64, ["b"])])
    graph_file(tmp_path / "vocoder/1/model.onnx", [("LATENT", TensorProto.FLOAT, ["b", 192, "f"])])
    graph_file(
        tmp_path / "vocoder__vctk/1/model.onnx",
        [("LATENT", TensorProto.FLOAT, ["b", 80, "f"]), ("SPEAKER_ID", TensorProto.INT64, ["b"])],
    )
    (tmp_path / "acoustic__taco/1").mkdir(parents=True)  # Tacotron2: no model.onnx
    found = {path.parent.parent.name: profile for path, _, profile in tensorrt.engines(tmp_path, 16)}
    assert sorted(found) == ["acoustic", "acoustic__vctk", "vocoder", "vocoder__vctk"]
    assert "SPEAKER_ID" not in found["acoustic"].shapes and "SPEAKER_ID" in found["acoustic__vctk"].shapes
    assert found["vocoder__vctk"].shapes["LATENT"][2] == (16, 80, tensorrt.DEFAULT_LIMITS.max_frames)
    assert found["vocoder__vctk"].shapes["SPEAKER_ID"][0] == (1,)
