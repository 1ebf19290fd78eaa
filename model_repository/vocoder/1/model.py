"""Vocoder (VITS latent -> waveform) through onnxruntime, for CPU nodes.

Latents of different lengths arrive in one ragged execution;
:class:`triton_tts.stages.VocoderRunner` plans the ONNX runs (one item per run by
default on CPU, measured faster) and trims each waveform to its item's length; each
request is answered as soon as its item is done (a failed run: an INTERNAL error for its
requests alone, logged with their ids by triton_tts.errors).
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.errors import RequestErrors, request_id
from triton_tts.stages import StageSettings, VocoderRunner, send_as_done


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.runner = VocoderRunner.from_settings(StageSettings.from_triton_args(args))
        self.errors = RequestErrors(args["model_name"])
        pb_utils.Logger.log_info(f"vocoder: onnxruntime CPU, {self.runner.threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> None:
        # Each request holds one item: [1, channels, frames] -> [channels, frames].
        latents = [pb_utils.get_input_tensor_by_name(r, "LATENT").as_numpy()[0] for r in requests]
        speakers = [_speaker(r) for r in requests]
        send_as_done(
            [r.get_response_sender() for r in requests],
            self.runner.iter_run(latents, speakers),
            lambda waveform: pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("WAVEFORM", waveform[None])]
            ),
            lambda index, message: self.errors.response(request_id(requests[index]), message),
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )


def _speaker(request: Any) -> int:
    """SPEAKER_ID (speaker-conditioned vocoders only; others have no such input)."""
    tensor = pb_utils.get_input_tensor_by_name(request, "SPEAKER_ID")
    return 0 if tensor is None else int(tensor.as_numpy().reshape(-1)[0])
