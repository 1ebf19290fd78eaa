"""Vocoder (VITS latent -> waveform) through onnxruntime, for CPU nodes.

Latents of different lengths arrive in one ragged batch; they are grouped by length
under a padded-frame cap (bounding peak memory: the decoder's activations grow with
frames x hop), zero-padded, decoded together and trimmed back to each item's length.
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
        self.max_padded = int(params.get("max_padded_frames", "4000"))
        folder = Path(args["model_repository"]) / args["model_version"]
        self.session = cpu_session(folder / "model.onnx", threads)
        pb_utils.Logger.log_info(f"vocoder: onnxruntime CPU, {threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> list[Any]:
        # Each request is one item: [1, channels, frames] -> [channels, frames].
        latents = [pb_utils.get_input_tensor_by_name(r, "LATENT").as_numpy()[0] for r in requests]
        responses: list[Any] = [None] * len(requests)
        for group in plan_sub_batches([x.shape[-1] for x in latents], self.max_padded):
            try:
                waveform = self.session.run(["WAVEFORM"], {"LATENT": pad_stack([latents[i] for i in group])})[
                    0
                ]
            except Exception as err:  # one failing group must not take the others down
                for i in group:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"vocoder: {err}"))
                continue
            hop = waveform.shape[-1] // max(x.shape[-1] for x in (latents[i] for i in group))
            for row, i in enumerate(group):
                samples = latents[i].shape[-1] * hop
                responses[i] = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("WAVEFORM", np.ascontiguousarray(waveform[row : row + 1, :samples]))
                    ]
                )
        return responses
