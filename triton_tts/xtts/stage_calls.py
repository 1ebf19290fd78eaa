"""The ``xtts`` model's calls to its stage models, by BLS (only importable inside Triton's
Python backend).

The conditioning encoders and the decoder are Triton models of their own
(``xtts_style``, ``xtts_speaker``, ``xtts_decoder``, suffixed ``__<voice>`` after the
first XTTS voice; triton_tts/build/model_configs.py renders them): Python + onnxruntime on CPU
nodes (triton_tts/xtts/stage_model.py), Triton's native onnxruntime backend on GPU in the
``gpu`` and ``tensorrt`` variants. Each call carries the server's internal token
(triton_tts/runtime/internal.py), which the Python stage models ask for.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.runtime import internal
from triton_tts.xtts.graphs import FloatArray, Stage


class StageFailed(RuntimeError):
    """A stage model answered with an error (its message, and the model's name)."""


class TritonGraphs:
    """:class:`triton_tts.xtts.graphs.Graphs` through the stage models: ``models`` maps
    each stage's name (style, speaker, decoder) to its Triton model."""

    def __init__(self, models: Mapping[str, str]) -> None:
        self.models = dict(models)

    def run(self, stage: Stage, inputs: dict[str, FloatArray]) -> FloatArray:
        model = self.models[stage.name]
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(inputs[name], dtype=np.float32))
            for name in stage.inputs
        ]
        response = pb_utils.InferenceRequest(
            model_name=model,
            requested_output_names=list(stage.outputs),
            inputs=tensors,
            parameters=internal.parameters(),
        ).exec()
        if response.has_error():
            raise StageFailed(f"{model}: {response.error().message()}")
        out = pb_utils.get_output_tensor_by_name(response, stage.outputs[0])
        return np.asarray(out.as_numpy(), dtype=np.float32)
