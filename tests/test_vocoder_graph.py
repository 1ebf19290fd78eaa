"""The INT8 vocoder's graph rewrites: exact polyphase upsampling, a channels-last layout
with the same output, on hand-built layers and on the real voice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from triton_tts.contract.voice import VOCODER_FILE
from triton_tts.export.quantize import CALIBRATION_TEXTS, quantize_convolutions
from triton_tts.export.vocoder_graph import (
    channels_last,
    drop_padding_masks,
    layout_summary,
    polyphase_upsampling,
    write_unpadded,
)
from triton_tts.export.voice_runs import latents


def run(model: onnx.ModelProto | Path, feeds: dict[str, npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    output: npt.NDArray[np.float32] = session.run(None, feeds)[0]
    return output


def upsampler(
    c_in: int, c_out: int, kernel: int, stride: int, pads: list[int], bias: bool
) -> onnx.ModelProto:
    """One ConvTranspose1d with random weights, then a LeakyRelu (a consumer of its output)."""
    rng = np.random.default_rng(kernel * 100 + stride)
    weights = [numpy_helper.from_array(rng.normal(size=(c_in, c_out, kernel)).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        weights.append(numpy_helper.from_array(rng.normal(size=c_out).astype(np.float32), "b"))
        inputs.append("b")
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConvTranspose", inputs, ["up"], kernel_shape=[kernel], strides=[stride], pads=pads
            ),
            helper.make_node("LeakyRelu", ["up"], ["y"], alpha=0.1),
        ],
        "upsampler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c_in, "t"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("kernel", "stride", "pads", "bias"),
    [
        (16, 8, [4, 4], True),  # HiFi-GAN's x8 layer
        (4, 2, [1, 1], True),  # x2
        (8, 4, [2, 2], False),
        (7, 3, [2, 1], True),  # kernel not a multiple of the stride, uneven padding
        (3, 3, [0, 0], True),  # kernel = stride, no overlap
    ],
)
def test_polyphase_upsampling_equals_the_transposed_convolution(
    kernel: int, stride: int, pads: list[int], bias: bool
) -> None:
    model = upsampler(6, 5, kernel, stride, pads, bias)
    rewritten = polyphase_upsampling(model)
    assert [n.op_type for n in rewritten.graph.node].count("ConvTranspose") == 0
    x = np.random.default_rng(1).normal(size=(2, 6, 11)).astype(np.float32)
    expected, ours = run(model, {"x": x}), run(rewritten, {"x": x})
    assert ours.shape == expected.shape == (2, 5, (11 - 1) * stride + kernel - sum(pads))
    np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_dilated_or_grouped_transposed_convolutions_are_left_alone() -> None:
    model = upsampler(4, 4, 4, 2, [1, 1], True)
    model.graph.node[0].attribute.append(helper.make_attribute("dilations", [2]))
    assert polyphase_upsampling(model).graph.node[0].op_type == "ConvTranspose"


@pytest.fixture(scope="module")
def latent(voice_dir: Path) -> npt.NDArray[np.float32]:
    return latents(voice_dir, ["The weather today is sunny with a light breeze."])[0]


def test_polyphase_upsampling_on_the_real_vocoder(voice_dir: Path, latent: npt.NDArray[np.float32]) -> None:
    model = onnx.load(str(voice_dir / VOCODER_FILE))
    rewritten = polyphase_upsampling(model)
    assert "ConvTranspose" not in layout_summary(rewritten)
    expected, ours = run(model, {"LATENT": latent}), run(rewritten, {"LATENT": latent})
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_channels_last_changes_layout_not_results(voice_dir: Path, latent: npt.NDArray[np.float32]) -> None:
    """The shipped INT8 graph against the same quantisation left channels-first."""
    channels_first = quantize_convolutions(
        voice_dir / VOCODER_FILE, latents(voice_dir, CALIBRATION_TEXTS[:3])
    )
    laid_out = channels_last(channels_first)
    summary = layout_summary(laid_out)
    assert (
        summary.get("QLinearConv (channels-last)", 0) >= 18 and "QLinearConv (channels-first)" not in summary
    )
    assert "ConvTranspose" not in summary
    # a transpose only where the FP32 convolutions meet the channels-last part
    assert summary.get("Transpose", 0) <= 2 * summary["Conv"]
    expected, ours = run(channels_first, {"LATENT": latent}), run(laid_out, {"LATENT": latent})
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=1e-6)


def test_a_vocoder_without_padding_masks_gets_no_mask_free_copy(voice_dir: Path, tmp_path: Path) -> None:
    stale = tmp_path / "vocoder_unpadded.onnx"
    stale.write_bytes(b"an earlier export's")
    assert drop_padding_masks(onnx.load(str(voice_dir / VOCODER_FILE)))[1] == 0  # Piper's: none
    assert not write_unpadded(voice_dir / VOCODER_FILE, stale) and not stale.exists()
