"""Long latents through the CPU vocoder in windows (triton_tts/runtime/vocoder_window.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from triton_tts.runtime.stages import RunFailed, VocoderRunner
from triton_tts.runtime.vocoder_window import Window, measure_context, plan_windows, run_windowed

CHANNELS = 4


def test_windows_keep_every_frame_once_with_context_inside_the_latent() -> None:
    assert plan_windows(10, 4, 2) == [
        Window(start=0, stop=6, keep_start=0, keep_stop=4),  # frames 0-3, +2 after
        Window(start=2, stop=10, keep_start=2, keep_stop=6),  # frames 4-7, 2 either side
        Window(start=6, stop=10, keep_start=2, keep_stop=4),  # frames 8-9, 2 before
    ]
    assert plan_windows(3, 4, 2) == [Window(0, 3, 0, 3)]


def _graph(path: Path, global_mean: bool) -> Path:
    """A stand-in vocoder, [1, C, F] -> [1, F x C]: each frame's channels become its samples
    (hop = C), plus, when ``global_mean``, the mean of the whole latent (not local)."""
    latent = helper.make_tensor_value_info("LATENT", TensorProto.FLOAT, [1, CHANNELS, "frames"])
    waveform = helper.make_tensor_value_info("WAVEFORM", TensorProto.FLOAT, [1, None])
    nodes = [helper.make_node("Transpose", ["LATENT"], ["framewise"], perm=[0, 2, 1])]
    source = "framewise"
    if global_mean:
        nodes += [
            helper.make_node("ReduceMean", ["LATENT"], ["mean"], keepdims=0),
            helper.make_node("Add", ["framewise", "mean"], ["shifted"]),
        ]
        source = "shifted"
    nodes.append(helper.make_node("Flatten", [source], ["WAVEFORM"], axis=1))
    model = helper.make_model(
        helper.make_graph(nodes, "stand_in_vocoder", [latent], [waveform]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(model, str(path))
    return path


def test_a_local_graph_is_windowed_and_gives_the_same_samples(tmp_path: Path) -> None:
    runner = VocoderRunner(_graph(tmp_path / "local.onnx", False), 1, 1, 4000, window_frames=8)
    assert runner.window_context is not None
    latent = np.random.default_rng(3).standard_normal((CHANNELS, 37)).astype(np.float32)
    (waveform,) = runner.run([latent])
    assert not isinstance(waveform, RunFailed)
    np.testing.assert_array_equal(waveform, latent.T.reshape(-1))


def test_a_graph_that_sees_the_whole_latent_is_never_windowed(tmp_path: Path) -> None:
    runner = VocoderRunner(_graph(tmp_path / "global.onnx", True), 1, 1, 4000, window_frames=8)
    assert runner.window_context is None
    latent = np.random.default_rng(4).standard_normal((CHANNELS, 37)).astype(np.float32)
    (waveform,) = runner.run([latent])
    assert not isinstance(waveform, RunFailed)
    np.testing.assert_allclose(waveform, (latent.T + latent.mean()).reshape(-1), atol=1e-6)


def test_the_real_voice_is_windowed_without_changing_a_sample(voice_dir: Path) -> None:
    """joe's HiFi-GAN decoder: a frame reaches ~11 frames; a 1,300-frame latent through
    512-frame windows matches one whole run."""
    channels = 192
    runner = VocoderRunner(voice_dir / "vocoder.onnx", 1, 1, 4000, latent_channels=channels)
    assert runner.window_context is not None
    assert 4 <= runner.window_context <= 64
    whole = VocoderRunner(voice_dir / "vocoder.onnx", 1, 1, 4000, window_frames=0)
    assert whole.window_context is None
    latent = (0.5 * np.random.default_rng(5).standard_normal((channels, 1300))).astype(np.float32)
    (windowed,) = runner.run([latent])
    (reference,) = whole.run([latent])
    assert not isinstance(windowed, RunFailed) and not isinstance(reference, RunFailed)
    assert windowed.shape == reference.shape
    assert float(np.abs(windowed - reference).max()) <= 1e-5 * float(np.abs(reference).max())


def test_too_little_context_would_be_audible(voice_dir: Path) -> None:
    """The measured context is needed: a window with none differs from the whole run."""
    runner = VocoderRunner(voice_dir / "vocoder.onnx", 1, 1, 4000, window_frames=0)
    latent = (0.5 * np.random.default_rng(6).standard_normal((1, 192, 256))).astype(np.float32)
    whole = runner._run_one(latent, 0).reshape(-1)
    cut = run_windowed(lambda w: runner._run_one(w, 0), latent[0], 64, 0)
    assert float(np.abs(cut - whole).max()) > 1e-3 * float(np.abs(whole).max())
    assert measure_context(lambda w: runner._run_one(w, 0), 192) is not None
