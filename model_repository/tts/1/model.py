"""``tts``: text of any length (up to 50,000 characters) -> the whole audio.

Long text is split into chunks (first sentence, then ~400-character groups of sentences)
that go through the ``tts_chunk`` ensemble concurrently, a few at a time, so they batch
with other traffic and memory stays bounded by the chunks in flight plus the audio
itself. Chunks are joined with short fades where they meet; a one-chunk text comes back
exactly as the ensemble made it. ``tts_stream`` delivers the same audio chunk by chunk.
A request its client cancels (gRPC) or its own ``timeout`` outlives starts no more chunks
(see triton_tts.bls.Cancellation). Outcomes and throughput go to Triton's metrics port
(triton_tts.metrics); every error sent back is logged with the request's id
(triton_tts.errors).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.bls import Cancellation, LongTextSettings, error_response, in_order, outcome, read_request
from triton_tts.errors import RequestErrors, request_id
from triton_tts.metrics import TTSMetrics


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.settings = LongTextSettings.from_model_config(config)
        threads = self.settings.threads
        # Two pools: request threads wait on chunk threads, so they must never share one.
        self.requests = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tts")
        self.chunks = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tts-bls")
        voices = [v.name for v in self.settings.voices]
        self.metrics = TTSMetrics("tts", args["model_instance_name"], voices, streaming=False)
        self.errors = RequestErrors(args["model_name"])

    def execute(self, requests: list[Any]) -> list[Any]:
        # All requests' chunks reach the ensemble together, so they batch there.
        started = time.monotonic()
        futures = [self.requests.submit(self._synthesize, request, started) for request in requests]
        return [f.result() for f in futures]

    def _synthesize(self, request: Any, started: float) -> Any:
        with self.metrics.in_flight():
            return self._answer(request, started)

    def _answer(self, request: Any, started: float) -> Any:
        rid = request_id(request)
        try:
            cancellation = Cancellation(request.is_cancelled, request.timeout())
            long_text = read_request(request, self.settings, rid)
            window = self.settings.chunks_in_flight
            chunks = list(in_order(self.chunks, long_text, window, cancellation))
            audio = np.concatenate([chunk_audio for _, chunk_audio, _ in chunks])[None, :]
            rate = chunks[0][2]
        except Exception as err:  # the request's own error; others are unaffected
            self.metrics.record_error(outcome(err))
            return error_response(self.errors, rid, err)
        self.metrics.record_ok(
            long_text.voice,
            long_text.characters,
            audio.size / rate,
            time.monotonic() - started,
            len(long_text.chunks),
        )
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("AUDIO", audio),
                pb_utils.Tensor("SAMPLE_RATE", np.array([[rate]], dtype=np.int32)),
            ]
        )

    def finalize(self) -> None:
        self.requests.shutdown(wait=True, cancel_futures=True)
        self.chunks.shutdown(wait=True, cancel_futures=True)
