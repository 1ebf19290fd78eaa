"""Acoustic model (phoneme ids -> VITS latent) through onnxruntime, for CPU nodes.

This machine's Triton has no ONNX Runtime backend, so the ONNX file runs inside a
Python-backend model. GPU nodes load the same ``model.onnx`` with the native
``onnxruntime`` backend (configs/gpu.pbtxt) or a TensorRT plan (configs/tensorrt.pbtxt).
Inputs are ragged (``allow_ragged_batch``): requests of any length arrive in one
execution. Each request is checked first (:class:`triton_tts.runtime.stage_bounds.StageBounds`: one
item, ids of the voice within its chunk budget, SCALES within what SPEED and NOISE_*
allow, a known speaker): a bad one gets its own INVALID_ARG error, the others run.
:class:`triton_tts.runtime.stages.AcousticRunner` plans and pads the ONNX runs, and each request
is answered as soon as its item is done (a failed run: an INTERNAL error for its
requests alone, logged with their ids by triton_tts.contract.errors).

A Tacotron2 voice's acoustic stage (a decoder loop in Python) is this model on every node;
its GPU named configs add ``pad_latent_frames`` for the native vocoder after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.voice import Voice
from triton_tts.runtime.internal import Gate
from triton_tts.runtime.request_options import input_array, required_input
from triton_tts.runtime.stage_bounds import StageBounds
from triton_tts.runtime.stages import AcousticRunner, StageSettings, checked, refusal, send_as_done
from triton_tts.runtime.tacotron import Tacotron2Runner


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        settings = StageSettings.from_triton_args(args)
        voice = Voice.load(settings.onnx_path.parent)
        self.runner: AcousticRunner | Tacotron2Runner
        if voice.acoustic_kind == "tacotron2":  # autoregressive: the decoder loop runs here
            self.runner = Tacotron2Runner.from_settings(settings, voice)
        else:
            self.runner = AcousticRunner.from_settings(settings)
        self.bounds = StageBounds.of(voice, settings)
        self.errors = RequestErrors(args["model_name"])
        self.gate = Gate(args)  # the server's own chunks only (triton_tts/runtime/internal.py)
        self._refuse = refusal(self.errors, request_id, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        pb_utils.Logger.log_info(
            f"acoustic: '{voice.name}' ({voice.family}), onnxruntime CPU, "
            f"{settings.threads} intra-op thread(s)"
        )

    def execute(self, requests: list[Any]) -> None:
        requests, items = checked(requests, self._item, self._refuse)
        send_as_done(
            [r.get_response_sender() for r in requests],
            self.runner.iter_timed(
                [i[0] for i in items], [i[1] for i in items], [i[2] for i in items], [i[3] for i in items]
            ),
            _latent_response,
            lambda index, message: self.errors.response(request_id(requests[index]), message),
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def _item(self, request: Any) -> tuple[Any, Any, int, Any]:
        self.gate.check(request)
        return self.bounds.acoustic_item(
            required_input(request, "PHONEME_IDS"),
            required_input(request, "PHONEME_LENGTH"),
            required_input(request, "SCALES"),
            input_array(request, "SPEAKER_ID"),
            input_array(request, "STYLE"),
        )


def _latent_response(result: tuple[Any, int, Any]) -> Any:
    latent, frames, durations = result
    tensors = [
        pb_utils.Tensor("LATENT", latent[None]),
        pb_utils.Tensor("FRAME_COUNT", np.array([[frames]], dtype=np.int64)),
    ]
    if durations is not None:  # frames per id: word timestamps (postprocess)
        tensors.append(pb_utils.Tensor("DURATIONS", durations[None, :]))
    return pb_utils.InferenceResponse(output_tensors=tensors)
