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
triton_tts.runtime.long_text.ending.Cancellation). An XTTS voice's text is admitted in the same ledger by its
predicted work, then goes whole to its own model (triton_tts/xtts/forward.py). Outcomes
and throughput go to Triton's metrics port (triton_tts.runtime.metrics); every error sent back is
logged with the request's id (triton_tts.contract.errors).
"""

from __future__ import annotations

import json
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.client.voices import VoiceInfo
from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.runtime.admission import AdmissionSettings, Ledger, Work
from triton_tts.runtime.long_text.deliver import chunk_times, in_order, word_tensors
from triton_tts.runtime.long_text.ending import Cancellation, error_response, outcome
from triton_tts.runtime.long_text.request import LongTextRequest, LongTextSettings, read_request
from triton_tts.runtime.metrics import TTSMetrics
from triton_tts.xtts.forward import Demand, admit, forward, xtts_voice

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


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
                    answer = partial(self._xtts, request, sender, xtts, demand, work, rid, started)
                else:
                    long_text = read_request(request, self.settings, rid)
                    work = self._admit(long_text)
                    answer = partial(self._synthesize, request, sender, long_text, work, started)
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

    def _synthesize(
        self, request: Any, sender: Any, long_text: LongTextRequest, work: Work, started: float
    ) -> None:
        try:
            with self.metrics.in_flight():
                response = self._answer(request, long_text, work, started)
            sender.send(response, flags=FINAL)
        except BaseException:  # a pool thread's exception is kept in its Future, unread: log it
            pb_utils.Logger.log_error(
                f"tts: request {long_text.request_id} failed:\n{traceback.format_exc()}"
            )
            raise
        finally:
            self.ledger.release(work)
            self.metrics.record_load(self.ledger)

    def _xtts(
        self,
        request: Any,
        sender: Any,
        voice: VoiceInfo,
        demand: Demand,
        work: Work,
        rid: str,
        started: float,
    ) -> None:
        """An XTTS voice's text: its model's chunks, joined (its own crossfades); each
        chunk's audio is work done, and the work is released when the request ends."""
        try:
            try:
                with self.metrics.in_flight():
                    cancellation = Cancellation(request.is_cancelled, request.timeout())
                    chunks = []
                    for audio, rate, _ in forward(request, voice, rid, cancellation):
                        chunks.append((audio, rate))
                        self.ledger.completed(work, audio.size / rate)
                    joined = np.concatenate([a for a, _ in chunks])[None, :]
                    rate = chunks[0][1]
                self.metrics.record_ok(
                    voice.name, demand.characters, joined.size / rate, time.monotonic() - started, len(chunks)
                )
                response = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("AUDIO", joined),
                        pb_utils.Tensor("SAMPLE_RATE", np.array([[rate]], dtype=np.int32)),
                    ]
                )
            except Exception as err:  # the request's own error; others are unaffected
                self.metrics.record_error(outcome(err))
                response = error_response(self.errors, rid, err)
            sender.send(response, flags=FINAL)
        finally:
            self.ledger.release(work)
            self.metrics.record_load(self.ledger)

    def _answer(self, request: Any, long_text: LongTextRequest, work: Work, started: float) -> Any:
        rid = long_text.request_id
        try:
            cancellation = Cancellation(request.is_cancelled, request.timeout(), started)
            window = self.settings.chunks_in_flight
            chunks = []
            clock = long_text.word_clock()
            words = []
            for _, said in in_order(self.chunks, long_text, window, cancellation):
                chunks.append(said)
                if said.rate:
                    self.ledger.completed(work, said.samples.size / said.rate)
                if clock is not None:
                    seconds = said.samples.size / said.rate if said.rate else 0.0
                    words += clock.add(said.words or [], chunk_times(said.times), seconds)
            audio = np.concatenate([said.samples for said in chunks])[None, :]
            rate = chunks[0].rate
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
                *(word_tensors(words) if clock is not None else []),
            ]
        )

    def finalize(self) -> None:
        self.requests.shutdown(wait=True, cancel_futures=True)
        self.chunks.shutdown(wait=True, cancel_futures=True)
