"""``tts``: text of any length (up to 50,000 characters) -> the whole audio.

Long text is split into chunks (first sentence, then ~400-character groups of sentences)
that go through the ``tts_chunk`` ensemble concurrently, a few at a time, so they batch
with other traffic and memory stays bounded by the chunks in flight plus the audio
itself. Chunks are joined with short fades where they meet; a one-chunk text comes back
exactly as the ensemble made it. ``tts_stream`` delivers the same audio chunk by chunk.

Each request is read and admitted (triton_tts.runtime.admission: refused at once when the work
admitted ahead of it would make it wait past the budget) in ``execute``, which then
returns: the answer goes through the request's response sender from a thread, so one
instance takes any number of texts and a long one holds no short one back. A request
its client cancels (gRPC) or its own ``timeout`` outlives starts no more chunks (see
triton_tts.runtime.cancellation.Cancellation). An XTTS voice's text is admitted in the same ledger by its
predicted work, then goes whole to its own model (triton_tts/xtts/forward.py). Outcomes
and throughput go to Triton's metrics port (triton_tts.runtime.metrics); every error sent back is
logged with the request's id (triton_tts.contract.errors).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.runtime.admission import AdmissionSettings, Ledger, Work
from triton_tts.runtime.long_text.deliver import FINAL, Deliveries
from triton_tts.runtime.long_text.ending import error_response, outcome
from triton_tts.runtime.long_text.request import LongTextRequest, LongTextSettings, read_request
from triton_tts.runtime.metrics import TTSMetrics
from triton_tts.xtts.forward import admit, forward, xtts_voice


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
        params = string_parameters(config)
        self.ledger = Ledger.from_environment(
            AdmissionSettings.from_parameters(params), args.get("model_repository", "")
        )
        self.deliveries = Deliveries(
            self.ledger, self.metrics, self.errors, self.chunks, self.settings.chunks_in_flight
        )

    def execute(self, requests: list[Any]) -> None:
        # Read and admit here, answer from threads: refusals go out before any work, and
        # the admitted requests' chunks reach the ensemble together, so they batch there.
        started = time.monotonic()
        for request in requests:
            sender = request.get_response_sender()
            rid = request_id(request)
            try:
                xtts = xtts_voice(request, self.settings)
                if xtts is not None:  # admitted here, then the whole request to its XTTS model
                    demand, work = admit(self.ledger, self.metrics, request, xtts, rid)
                    chunks = partial(forward, request, xtts, rid)
                    answer = partial(
                        self.deliveries.from_model,
                        request,
                        rid,
                        xtts.name,
                        demand.characters,
                        work,
                        started,
                        chunks,
                    )
                else:
                    long_text = read_request(request, self.settings, rid)
                    work = self._admit(long_text)
                    answer = partial(self.deliveries.text, request, long_text, work, started)
            except Exception as err:  # the request's own error; others are unaffected
                self.metrics.record_error(outcome(err))
                sender.send(error_response(self.errors, rid, err), flags=FINAL)
                continue
            try:
                self.requests.submit(answer)
            except RuntimeError as err:  # unloading: the pool takes no more
                self.ledger.release(work)
                sender.send(error_response(self.errors, rid, err), flags=FINAL)
        self.metrics.record_load(self.ledger)

    def _admit(self, long_text: LongTextRequest) -> Work:
        """Admitted while its predicted wait fits its deadline (its max_wait_ms parameter or
        Triton's request timeout) or, when it states none, the default budget; refused at
        once otherwise."""
        with self.metrics.demand(long_text.voice, long_text.audio_s):
            return self.ledger.admit_text(
                long_text.request_id,
                long_text.voice,
                long_text.caller,
                long_text.audio_s,
                self.ledger.settings.text_budget(long_text.deadline_us),
            )

    def finalize(self) -> None:
        self.requests.shutdown(wait=True, cancel_futures=True)
        self.chunks.shutdown(wait=True, cancel_futures=True)
