"""Trim each waveform to its true length (frames x hop) and return float audio in [-1, 1].

Native GPU vocoders return the whole padded batch width for every request; the frame
count from the acoustic model says where each item's audio really ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.voice import Voice


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        folder = Path(args["model_repository"]) / args["model_version"]
        self.hop = Voice.load(folder).hop_length

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            waveform = pb_utils.get_input_tensor_by_name(request, "WAVEFORM").as_numpy().reshape(-1)
            frames = int(pb_utils.get_input_tensor_by_name(request, "FRAME_COUNT").as_numpy().reshape(-1)[0])
            rate = pb_utils.get_input_tensor_by_name(request, "SAMPLE_RATE").as_numpy().reshape(1)
            audio = np.clip(waveform[: frames * self.hop], -1.0, 1.0).astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("AUDIO", audio[None, :]),
                        pb_utils.Tensor("SAMPLE_RATE", rate.reshape(1, 1).astype(np.int32)),
                    ]
                )
            )
        return responses
