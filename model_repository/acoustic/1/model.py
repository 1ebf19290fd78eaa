"""Acoustic model (phoneme ids -> VITS latent) through onnxruntime, for CPU nodes.

This machine's Triton has no ONNX Runtime backend, so the ONNX file runs inside a
Python-backend model. GPU nodes load the same ``model.onnx`` with the native
``onnxruntime`` backend (configs/gpu.pbtxt) or a TensorRT plan (configs/tensorrt.pbtxt).

Inputs are ragged (``allow_ragged_batch``): requests of any length arrive together;
they are trimmed to their true length, grouped by length under a padded-size cap, and
each group runs as one padded ONNX batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.batching import pad_stack, plan_sub_batches
from triton_tts.onnx_session import cpu_session, resolve_threads


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        threads = resolve_threads(params.get("intra_op_threads"), instances)
        self.max_padded = int(params.get("max_padded_phonemes", "8192"))
        folder = Path(args["model_repository"]) / args["model_version"]
        self.session = cpu_session(folder / "model.onnx", threads)
        pb_utils.Logger.log_info(f"acoustic: onnxruntime CPU, {threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> list[Any]:
        ids, scales = [], []
        for request in requests:
            length = int(
                pb_utils.get_input_tensor_by_name(request, "PHONEME_LENGTH").as_numpy().reshape(-1)[0]
            )
            ids.append(
                pb_utils.get_input_tensor_by_name(request, "PHONEME_IDS").as_numpy().reshape(-1)[:length]
            )
            scales.append(pb_utils.get_input_tensor_by_name(request, "SCALES").as_numpy().reshape(3))
        responses: list[Any] = [None] * len(requests)
        for group in plan_sub_batches([len(x) for x in ids], self.max_padded):
            try:
                latent, frames = self.session.run(
                    ["LATENT", "FRAME_COUNT"],
                    {
                        "PHONEME_IDS": pad_stack([ids[i] for i in group]),
                        "PHONEME_LENGTH": np.array([len(ids[i]) for i in group], dtype=np.int64),
                        "SCALES": np.stack([scales[i] for i in group]).astype(np.float32),
                    },
                )
            except Exception as err:  # one failing group must not take the others down
                for i in group:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"acoustic: {err}"))
                continue
            for row, i in enumerate(group):
                count = int(frames[row])
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("LATENT", np.ascontiguousarray(latent[row : row + 1, :, :count])),
                        pb_utils.Tensor("FRAME_COUNT", np.array([[count]], dtype=np.int64)),
                    ]
                )
        return responses
