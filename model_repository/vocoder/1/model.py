"""Vocoder (VITS latent -> waveform) through onnxruntime, for CPU nodes.

Latents of different lengths arrive in one ragged execution. Each request is checked
first (:class:`triton_tts.runtime.stage_bounds.StageBounds`: one item, the vocoder's channels, frames
within the voice's chunk budget, a known speaker): a bad one gets its own INVALID_ARG
error, the others run. :class:`triton_tts.runtime.stages.VocoderRunner` plans the ONNX runs (one
item per run by default on CPU, measured faster) and trims each waveform to its item's
length; each request is answered as soon as its item is done (a failed run: an INTERNAL
error for its requests alone, logged with their ids by triton_tts.contract.errors).
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.voice import Voice
from triton_tts.runtime.internal import Gate
from triton_tts.runtime.request_options import input_array, required_input
from triton_tts.runtime.stage_bounds import StageBounds
from triton_tts.runtime.stages import StageSettings, VocoderRunner, checked, refusal, send_as_done


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        settings = StageSettings.from_triton_args(args)
        self.runner = VocoderRunner.from_settings(settings)
        self.bounds = StageBounds.of(Voice.load(settings.onnx_path.parent), settings)
        self.errors = RequestErrors(args["model_name"])
        self.gate = Gate(args)  # the server's own chunks only (triton_tts/runtime/internal.py)
        self._refuse = refusal(self.errors, request_id, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        pb_utils.Logger.log_info(f"vocoder: onnxruntime CPU, {self.runner.threads} intra-op thread(s)")

    def execute(self, requests: list[Any]) -> None:
        requests, items = checked(requests, self._item, self._refuse)
        send_as_done(
            [r.get_response_sender() for r in requests],
            self.runner.iter_run([latent for latent, _ in items], [speaker for _, speaker in items]),
            lambda waveform: pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("WAVEFORM", waveform[None])]
            ),
            lambda index, message: self.errors.response(request_id(requests[index]), message),
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def _item(self, request: Any) -> tuple[Any, int]:
        """[1, channels, frames] -> ([channels, frames], speaker). SPEAKER_ID: speaker-
        conditioned vocoders only (others have no such input)."""
        self.gate.check(request)
        return (
            self.bounds.latent(required_input(request, "LATENT"), self.runner.channels),
            self.bounds.speaker(input_array(request, "SPEAKER_ID")),
        )
