"""Vocoder (VITS latent -> waveform) through onnxruntime, for CPU nodes.

Latents of different lengths arrive in one ragged execution;
:class:`triton_tts.stages.VocoderRunner` plans the ONNX runs (one item per run by
default on CPU, measured faster) and trims each waveform to its item's length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.onnx_session import resolve_threads
from triton_tts.stages import RunFailed, VocoderRunner


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        threads = resolve_threads(params.get("intra_op_threads"), instances)
        folder = Path(args["model_repository"]) / args["model_version"]
        self.runner = VocoderRunner(
            folder / "model.onnx",
            threads,
            max_items_per_run=int(params.get("max_items_per_run", "1")),
            max_padded=int(params.get("max_padded_frames", "4000")),
        )
        pb_utils.Logger.log_info(f"vocoder: onnxruntime CPU, {threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> list[Any]:
        # Each request holds one item: [1, channels, frames] -> [channels, frames].
        latents = [pb_utils.get_input_tensor_by_name(r, "LATENT").as_numpy()[0] for r in requests]
        responses = []
        for result in self.runner.run(latents):
            if isinstance(result, RunFailed):
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(result.message)))
            else:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("WAVEFORM", result[None])])
                )
        return responses
