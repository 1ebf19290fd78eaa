"""The three graphs around the GPT (the conditioning encoders and the decoder), wherever
they run.

:class:`XttsRunner` (triton_tts/xtts/runner.py) runs the GPT's loop itself and reaches
these three through a :class:`Graphs`: in-process ONNX Runtime sessions
(:class:`LocalGraphs`, what the export's parity gate, the benchmarks and the tests use),
or, inside Triton, the voice's stage models (triton_tts/xtts/stage_calls.py), so that on
GPU nodes they run on Triton's native onnxruntime backend (``configs/gpu.pbtxt``) while
the GPT's loop stays in the ``xtts`` model.

:data:`STAGES` names each stage model's graph and tensors; :func:`graph_tensors` reads a
graph's declared inputs and outputs (symbolic dims as -1), which the stage configs are
rendered from, so a native backend finds the graph's own names, types and fixed dims
(inferred ones too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from triton_tts.onnx_session import cpu_session
from triton_tts.xtts.card import DECODER_FILE, SPEAKER_FILE, STYLE_FILE

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Stage:
    """One graph beside the GPT, served as its own Triton model."""

    name: str  # the model's stem: xtts_<name> (xtts_style, xtts_speaker, xtts_decoder)
    graph: str  # its file in the voice folder
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


STYLE = Stage("style", STYLE_FILE, ("AUDIO",), ("STYLE",))
SPEAKER = Stage("speaker", SPEAKER_FILE, ("AUDIO",), ("SPEAKER",))
DECODER = Stage("decoder", DECODER_FILE, ("LATENTS", "SPEAKER"), ("WAVEFORM",))
STAGES = (STYLE, SPEAKER, DECODER)


class Graphs(Protocol):
    """What the runner asks of the three graphs; every array is one item, batch first."""

    def run(self, stage: Stage, inputs: dict[str, FloatArray]) -> FloatArray:
        """``stage``'s graph on ``inputs`` (its input names): its one output."""
        ...


class LocalGraphs:
    """The three graphs as ONNX Runtime sessions in this process."""

    def __init__(self, folder: Path, threads: int) -> None:
        self.sessions = {stage.name: cpu_session(Path(folder) / stage.graph, threads) for stage in STAGES}

    def run(self, stage: Stage, inputs: dict[str, FloatArray]) -> FloatArray:
        return np.asarray(self.sessions[stage.name].run(list(stage.outputs), inputs)[0], dtype=np.float32)


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
