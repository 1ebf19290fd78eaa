"""Acoustic model (phoneme ids -> VITS latent) through onnxruntime, for CPU nodes.

This machine's Triton has no ONNX Runtime backend, so the ONNX file runs inside a
Python-backend model. GPU nodes load the same ``model.onnx`` with the native
``onnxruntime`` backend (configs/gpu.pbtxt) or a TensorRT plan (configs/tensorrt.pbtxt).
Inputs are ragged (``allow_ragged_batch``): requests of any length arrive in one
execution; :class:`triton_tts.stages.AcousticRunner` plans and pads the ONNX runs, and
each request is answered as soon as its item is done (a failed run: an INTERNAL error
for its requests alone, logged with their ids by triton_tts.errors).

A Tacotron2 voice's acoustic stage (a decoder loop in Python) is this model on every node;
its GPU named configs add ``pad_latent_frames`` for the native vocoder after it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.errors import RequestErrors, request_id
from triton_tts.stages import AcousticRunner, StageSettings, send_as_done
from triton_tts.tacotron import Tacotron2Runner
from triton_tts.voice import Voice


def _input(request: Any, name: str) -> Any:
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        settings = StageSettings.from_triton_args(args)
        voice = Voice.load(settings.onnx_path.parent)
        self.runner: AcousticRunner | Tacotron2Runner
        if voice.acoustic_kind == "tacotron2":  # autoregressive: the decoder loop runs here
            self.runner = Tacotron2Runner.from_settings(settings, voice)
        else:
            self.runner = AcousticRunner.from_settings(settings)
        self.errors = RequestErrors(args["model_name"])
        pb_utils.Logger.log_info(
            f"acoustic: '{voice.name}' ({voice.family}), onnxruntime CPU, "
            f"{settings.threads} intra-op thread(s)"
        )

    def execute(self, requests: list[Any]) -> None:
        ids, scales, speakers = [], [], []
        for request in requests:  # each request holds one item (batch axis of 1)
            length = int(_input(request, "PHONEME_LENGTH").reshape(-1)[0])
            ids.append(_input(request, "PHONEME_IDS").reshape(-1)[:length])
            scales.append(_input(request, "SCALES").reshape(3))
            speaker = pb_utils.get_input_tensor_by_name(request, "SPEAKER_ID")
            speakers.append(0 if speaker is None else int(speaker.as_numpy().reshape(-1)[0]))
        send_as_done(
            [r.get_response_sender() for r in requests],
            self.runner.iter_run(ids, scales, speakers),
            _latent_response,
            lambda index, message: self.errors.response(request_id(requests[index]), message),
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )


def _latent_response(result: tuple[Any, int]) -> Any:
    latent, frames = result
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("LATENT", latent[None]),
            pb_utils.Tensor("FRAME_COUNT", np.array([[frames]], dtype=np.int64)),
        ]
    )
