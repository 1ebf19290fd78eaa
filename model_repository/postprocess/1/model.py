"""Trim each waveform to its true length (frames x hop) and return float audio in [-1, 1];
for voices with word timestamps, each word's [start, end] in seconds (WORD_TIMES), from
the acoustic model's frames per id (DURATIONS) and preprocess's word of each id (WORD_INDEX).

Native GPU vocoders return the whole padded batch width for every request; the frame
count from the acoustic model says where each item's audio really ends. Each request is
checked (one item; FRAME_COUNT within the waveform it trims; the voice's SAMPLE_RATE): a
bad one gets its own INVALID_ARG error, its neighbours their audio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.validation import InvalidRequest, one_item
from triton_tts.contract.voice import Voice
from triton_tts.runtime.internal import Gate
from triton_tts.runtime.request_options import input_array, required_input
from triton_tts.text.words import word_times


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        folder = Path(args["model_repository"]) / args["model_version"]
        voice = Voice.load(folder)
        self.hop, self.sample_rate = voice.hop_length, voice.sample_rate
        self.errors = RequestErrors(args["model_name"])
        self.gate = Gate(args)  # the server's own chunks only (triton_tts/runtime/internal.py)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(self._audio(request))
            except InvalidRequest as err:
                responses.append(self.errors.invalid(request_id(request), str(err)))
        return responses

    def _audio(self, request: Any) -> Any:
        self.gate.check(request)

        def item(name: str) -> Any:
            return one_item(name, required_input(request, name)).reshape(-1)

        waveform, frames, rate = item("WAVEFORM"), item("FRAME_COUNT"), item("SAMPLE_RATE")
        count = int(frames[0])
        if not 0 <= count * self.hop <= waveform.size:
            raise InvalidRequest(
                f"FRAME_COUNT {count} is outside [0, {waveform.size // self.hop}] "
                f"(the WAVEFORM's {waveform.size} samples at hop {self.hop})"
            )
        if int(rate[0]) != self.sample_rate:
            raise InvalidRequest(f"SAMPLE_RATE {int(rate[0])}: this voice's is {self.sample_rate}")
        audio = np.clip(waveform[: count * self.hop], -1.0, 1.0).astype(np.float32)
        tensors = [
            pb_utils.Tensor("AUDIO", audio[None, :]),
            pb_utils.Tensor("SAMPLE_RATE", np.array([[self.sample_rate]], dtype=np.int32)),
        ]
        index = input_array(request, "WORD_INDEX")
        if index is not None:  # a voice with word timestamps
            if input_array(request, "DURATIONS") is None:
                raise InvalidRequest("WORD_INDEX needs DURATIONS (the acoustic model's frames per id)")
            durations = item("DURATIONS")
            owners = one_item("WORD_INDEX", index).reshape(-1)
            if owners.size and not -1 <= int(owners.min()) <= int(owners.max()) < owners.size:
                raise InvalidRequest(
                    f"WORD_INDEX holds {int(owners.max())}: each id's word, -1 to {owners.size - 1}"
                )
            times = word_times(durations, owners, count)
            seconds = times * (self.hop / self.sample_rate)
            tensors.append(pb_utils.Tensor("WORD_TIMES", seconds.astype(np.float32)[None]))
        return pb_utils.InferenceResponse(output_tensors=tensors)
