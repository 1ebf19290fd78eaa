"""What an ONNX graph takes and gives, as a Triton config names it: the configs of the
models that are one graph each (XTTS's stage models, ``vad``) are rendered from it, so
Triton's native onnxruntime backend finds the graph's own names, types and dims."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ELEMENT_TYPES = {1: "TYPE_FP32", 7: "TYPE_INT64", 6: "TYPE_INT32", 9: "TYPE_BOOL", 10: "TYPE_FP16"}


@dataclass(frozen=True)
class Tensor:
    """A graph input or output as Triton's config names it."""

    name: str
    data_type: str  # a model_config_pb2 DataType name (TYPE_FP32, ...)
    dims: tuple[int, ...]  # -1 where the graph leaves the dim symbolic


def graph_tensors(path: Path) -> tuple[list[Tensor], list[Tensor]]:
    """An ONNX file's inputs (initializers excluded) and outputs, read without its
    external weights, with the dims ONNX's shape inference finds where the export left
    them symbolic (what ONNX Runtime, and so Triton's native backend, reports)."""
    import onnx
    from onnx import shape_inference

    graph = shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False)).graph
    weights = {i.name for i in graph.initializer}

    def tensor(value: onnx.ValueInfoProto) -> Tensor:
        kind = value.type.tensor_type
        dtype = ELEMENT_TYPES.get(kind.elem_type)
        if dtype is None:
            raise ValueError(f"{path.name}: {value.name} has element type {kind.elem_type}, not one served")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
        return Tensor(value.name, dtype, dims)

    inputs = [tensor(i) for i in graph.input if i.name not in weights]
    return inputs, [tensor(o) for o in graph.output]
