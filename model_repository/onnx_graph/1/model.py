"""An ONNX graph as a Python-backend model on CPU nodes, one item a request: XTTS's stage
models (``xtts_style``, ``xtts_speaker``, ``xtts_decoder``, which the ``xtts`` model calls
by BLS: triton_tts/xtts/stage_calls.py) and the ``vad`` model (Silero VAD). Copied as
``model.py`` beside the graph (``model.onnx``) by ``triton-tts build-repo``; GPU nodes
run the same ``model.onnx`` on Triton's native onnxruntime backend (``configs/gpu.pbtxt``).

Its inputs and outputs are the graph's own (the config is rendered from the graph:
triton_tts/runtime/onnx_graph.py). With the config parameter ``internal`` "true", a request
without the server's internal token is refused before any work (triton_tts/runtime/internal.py).
A request the graph cannot run (a shape or a value it does not take) gets its own
INVALID_ARG, and a failed run its own INTERNAL error: the others in the same execution
still run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.validation import InvalidRequest, check_graph_input, check_max_dims
from triton_tts.runtime.internal import Gate
from triton_tts.runtime.onnx_session import cpu_session, resolve_threads
from triton_tts.runtime.request_options import required_input

# onnxruntime's element types, as numpy's (those onnx_graph.ELEMENT_TYPES serves)
GRAPH_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = string_parameters(config)
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        threads = resolve_threads(params.get("intra_op_threads"), instances)
        folder = Path(args["model_repository"]) / args["model_version"]
        self.session = cpu_session(folder / "model.onnx", threads)
        self.inputs = [t["name"] for t in config["input"]]
        # What the graph takes, input by input: each request is held to it before the run.
        self.declared = {i.name: (i.shape, GRAPH_TYPES.get(i.type)) for i in self.session.get_inputs()}
        self.outputs = [t["name"] for t in config["output"]]
        # The largest size of each input, dim by dim (the vad model's frames): model_configs
        self.max_dims: dict[str, list[int]] = json.loads(params.get("max_input_dims", "{}"))
        self.name = args["model_name"]
        self.errors = RequestErrors(self.name)
        self.gate = Gate(args) if params.get("internal", "false") == "true" else None
        pb_utils.Logger.log_info(f"{self.name}: onnxruntime CPU, {threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._answer(request) for request in requests]

    def _answer(self, request: Any) -> Any:
        rid = request_id(request)
        try:
            if self.gate is not None:
                self.gate.check(request)
            feeds = self._feeds(request)
            for name, bound in self.max_dims.items():
                check_max_dims(name, feeds[name], bound)
            outputs = self.session.run(self.outputs, feeds)
        except InvalidRequest as err:
            return self.errors.invalid(rid, str(err))
        except InvalidArgument as err:  # a value the graph refuses (an empty input, say)
            shapes = ", ".join(f"{name} {list(value.shape)}" for name, value in feeds.items())
            return self.errors.invalid(rid, f"{self.name} cannot run on {shapes}: {err}")
        except Exception as err:  # this request's failure alone
            return self.errors.response(rid, f"{type(err).__name__}: {err}")
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor(name, np.ascontiguousarray(value))
                for name, value in zip(self.outputs, outputs, strict=True)
            ]
        )

    def _feeds(self, request: Any) -> dict[str, Any]:
        """Every input the graph takes, each as the graph declares it, or InvalidRequest."""
        feeds: dict[str, Any] = {}
        sizes: dict[str, int] = {}
        for name in self.inputs:
            feeds[name] = array = required_input(request, name)
            dims, dtype = self.declared.get(name, (None, None))
            if dims is not None and dtype is not None:
                check_graph_input(name, array, dims, dtype, sizes)
        return feeds
