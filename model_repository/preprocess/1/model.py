"""Text -> phoneme ids for the voice, one espeak pass per batch.

Per request: decode and check TEXT, normalise (numbers, dates, units...), phonemise with
espeak-ng, map to the voice's ids, pad to a length bucket (so native GPU backends can
batch different lengths), and turn SPEED / NOISE_* into the acoustic model's SCALES row.
A chunk over the voice's budget (triton_tts/limits.py: phoneme ids, predicted frames) is
refused, so no accepted request can pass a TensorRT profile. A bad request gets its own
INVALID_ARG error; its batch neighbours are unaffected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.batching import bucket_length
from triton_tts.config_parameters import string_parameters
from triton_tts.limits import ChunkLimits
from triton_tts.request_options import read_options
from triton_tts.text.normalize import normalize_english
from triton_tts.text.phonemize import EspeakPhonemizer, has_speech
from triton_tts.validation import (
    NOTHING_TO_SAY,
    InvalidRequest,
    decode_text,
)
from triton_tts.voice import Voice


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.logger = pb_utils.Logger
        config = json.loads(args["model_config"])
        params = string_parameters(config)
        folder = Path(args["model_repository"]) / args["model_version"]
        self.voice = Voice.load(folder)
        self.bucketed = params.get("pad_to_buckets", "true").lower() == "true"
        self.phonemizer = EspeakPhonemizer(self.voice.phonemizer_language)
        self.pad_id = self.voice.padding_id
        self.framing_only = len(self.voice.phonemes_to_ids(""))  # BOS/EOS/blanks, no symbol
        self.limits = ChunkLimits.from_json(params["chunk_limits"])
        self.logger.log_info(
            f"preprocess: voice '{self.voice.name}', espeak '{self.voice.phonemizer_language}', "
            f"buckets {'on' if self.bucketed else 'off'}"
        )

    def _read(self, request: Any) -> tuple[str, npt.NDArray[np.float32], int, float]:
        raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
        if raw.size != 1:
            raise InvalidRequest(f"TEXT must hold one string per request, got {raw.size}")
        text = normalize_english(decode_text(raw[0]))
        options = read_options(request, self.voice.name, self.voice.num_speakers)
        v = self.voice
        noise = v.noise_scale if options.noise_scale is None else options.noise_scale
        noise_w = v.noise_w if options.noise_w is None else options.noise_w
        length_scale = v.length_scale / (options.speed or 1.0)
        speaker = options.speaker_id or 0
        scales = np.array([noise, length_scale, noise_w], dtype=np.float32)
        return text, scales, speaker, options.speed or 1.0

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        texts: list[str] = []
        accepted: list[tuple[int, npt.NDArray[np.float32], int, float]] = []
        for i, request in enumerate(requests):
            try:
                text, scales, speaker, speed = self._read(request)
            except InvalidRequest as err:
                responses[i] = _error(str(err))
                continue
            texts.append(text)
            accepted.append((i, scales, speaker, speed))
        for (i, scales, speaker, speed), phonemes in zip(
            accepted, self.phonemizer.symbols(texts, self.voice.tokens), strict=True
        ):
            ids = self.voice.phonemes_to_ids(phonemes)
            if len(ids) <= self.framing_only or not has_speech(phonemes):
                responses[i] = _error(NOTHING_TO_SAY)
                continue
            refusal = self.limits.refusal(len(ids), speed, float(scales[2]))
            if refusal:
                responses[i] = _error(refusal)
                continue
            padded = np.full(bucket_length(len(ids)) if self.bucketed else len(ids), self.pad_id, np.int64)
            padded[: len(ids)] = ids
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[
                    # Every tensor carries the batch axis of its one-item request.
                    pb_utils.Tensor("PHONEME_IDS", padded[None, :]),
                    pb_utils.Tensor("PHONEME_LENGTH", np.array([[len(ids)]], dtype=np.int64)),
                    pb_utils.Tensor("SCALES", scales[None, :]),
                    pb_utils.Tensor("SAMPLE_RATE", np.array([[self.voice.sample_rate]], np.int32)),
                    pb_utils.Tensor("SPEAKER_ID", np.array([[speaker]], np.int64)),
                ]
            )
        return responses


def _error(message: str) -> Any:
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))
