"""``tts_stream``: decoupled streaming synthesis, audio chunk by chunk, in order (gRPC).

The text is chunked by the same rules as in ``tts``, with a stream's plan (a short first
chunk, then a ramp, for fast first audio); each chunk goes through the ``tts_chunk``
ensemble while earlier ones are being
delivered. Every response carries AUDIO, SAMPLE_RATE, CHUNK_INDEX and IS_LAST; the final
flag is always sent (from a ``finally``), also after an error, and a cancelled request
(the client went away) or one its own ``timeout`` outlives stops before its next chunk
(triton_tts.runtime.cancellation.Cancellation). A stream is admitted in ``execute`` while the listeners'
real-time demand fits the server's capacity (triton_tts.runtime.admission), then runs in a
thread; one that does not fit yet waits in the ledger's queue for room, in a thread, as
long as its predicted wait fits its deadline (its ``max_wait_ms`` or ``timeout``, or the
default wait), and is refused at once when it would not. Each stream is paced to playback
(``lead_ms``, triton_tts.runtime.pacing): a later chunk starts when the audio sent leads the
listener by less; its chunks go with priorities by deadline (triton_tts.runtime.long_text.send.Senders,
through triton_tts.runtime.loopback).
``finalize`` ends pacing and waits for streams in flight. The response
sender is never touched after the final flag. Outcomes, throughput and first-chunk latency
go to Triton's metrics port (triton_tts.runtime.metrics); every error sent back is logged with the
request's id (triton_tts.contract.errors).
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import triton_python_backend_utils as pb_utils

from triton_tts.client.voices import VoiceInfo
from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.runtime.admission import AdmissionSettings, Ledger, Refused, Work
from triton_tts.runtime.cancellation import Cancellation, RequestCancelled
from triton_tts.runtime.long_text.deliver import FINAL, Deliveries
from triton_tts.runtime.long_text.ending import error_response, outcome
from triton_tts.runtime.long_text.request import LongTextRequest, LongTextSettings, read_request
from triton_tts.runtime.long_text.send import PrioritySender, Senders
from triton_tts.runtime.loopback import Loopback
from triton_tts.runtime.metrics import TTSMetrics
from triton_tts.runtime.pacing import released_by_file
from triton_tts.xtts.forward import Demand, admit, forward, xtts_voice

FINALIZE_WAIT_S = 10.0  # under serve's --exit-timeout-secs (20 s)
QUEUE_POLL_S = 0.25  # a queued stream asks for room this often (each ask: one ledger read)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "tts_stream needs model_transaction_policy { decoupled: true }"
            )
        self.settings = LongTextSettings.from_model_config(config)
        params = string_parameters(config)
        # Admission by the listeners' demand (triton_tts/runtime/admission.py); every admitted
        # stream has a thread, up to the safety bound max_streams.
        self.ledger = Ledger.from_environment(
            AdmissionSettings.from_parameters(params), args.get("model_repository", "")
        )
        threads = max(self.settings.threads, int(params.get("max_streams", "0")) or 1024)
        self.chunks = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stream-bls")
        # A thread per admitted stream and one per stream waiting for room (as many may
        # wait as run: Ledger.enqueue_stream), so every waiting one asks for room itself.
        self.streams = ThreadPoolExecutor(max_workers=2 * threads, thread_name_prefix="stream")
        self.active = 0
        self.lock = threading.Condition()
        self.lead_s = int(params.get("lead_ms", "0")) / 1000
        self.unloading = False  # finalize: pacing ends
        released = released_by_file()
        self.released = lambda: self.unloading or released()
        loopback = Loopback.from_environment(int(params.get("first_chunk_priority", "0")))
        self.senders = Senders()  # by BLS, without priority
        if loopback is not None:
            sender = PrioritySender(loopback, args["model_name"])
            self.senders = Senders(at=sender.at)
        pb_utils.Logger.log_info(
            f"tts_stream: pacing lead {self.lead_s:g} s (0: none); chunks "
            + (f"by deadline (priorities) via {loopback.url}" if loopback else "without priority")
        )
        voices = [v.name for v in self.settings.voices]
        self.metrics = TTSMetrics("tts_stream", args["model_instance_name"], voices, streaming=True)
        self.errors = RequestErrors(args["model_name"], tagged=True)  # a stream's errors carry no code
        self.deliveries = Deliveries(
            self.ledger,
            self.metrics,
            self.errors,
            self.chunks,
            self.settings.chunks_in_flight,
            streaming=True,
            senders=self.senders,
            lead_s=self.lead_s,
            released=self.released,
        )

    def execute(self, requests: list[Any]) -> None:
        # Read and admit here (a refusal goes out before any work), stream from threads.
        for request in requests:
            started = time.monotonic()
            rid = request_id(request)
            ticket: str | None = None
            try:
                xtts = xtts_voice(request, self.settings)
                if xtts is not None:  # admitted as a text, then the whole request to its XTTS model
                    demand, xtts_work = admit(self.ledger, self.metrics, request, xtts, rid)
                    self._start_xtts(request, xtts, demand, xtts_work, rid, started)
                    continue
                # In a burst, each first chunk is shorter the more are waiting ahead of it.
                scale = self.ledger.load().first_chunk_scale if self.lead_s > 0 else 1.0
                long_text = read_request(request, self.settings, rid, scale)
                budget_s = self.ledger.settings.stream_budget(long_text.deadline_us)
                try:
                    work: Work | None = self._admit(long_text, queueing=True)
                except Refused as refusal:
                    if self.ledger.settings.counted:  # count bounds alone refuse at once
                        self._count_refused(long_text)
                        raise
                    work, ticket = None, self._queue(long_text, refusal, budget_s)
                else:
                    self.metrics.record_demand(long_text.voice, long_text.audio_s, admitted=True)
            except Exception as err:
                # The error, then the final flag, as _send_chunks does (a gRPC client sees both).
                self.metrics.record_error(outcome(err))
                sender = request.get_response_sender()
                sender.send(error_response(self.errors, rid, err))
                sender.send(flags=FINAL)
                continue
            with self.lock:
                self.active += 1
            self.streams.submit(self._stream, request, long_text, work, started, ticket, budget_s)
        self.metrics.record_load(self.ledger)

    def _queue(self, long_text: LongTextRequest, refusal: Refused, budget_s: float) -> str:
        """A place in the queue for room, or :class:`Refused` at once when the predicted
        wait passes the stream's budget."""
        try:
            ticket, wait_s = self.ledger.enqueue_stream(long_text.voice, long_text.audio_s, self.lead_s)
        except Refused:
            self._count_refused(long_text)
            raise
        if wait_s > budget_s:
            self.ledger.leave_queue(ticket)
            self._count_refused(long_text)
            raise Refused(
                f"a stream would wait ~{wait_s:.1f} s for room "
                f"({refusal.reason}; its budget: {budget_s:g} s)",
                wait_s - budget_s,
            )
        return ticket

    def _admitted(self, request: Any, long_text: LongTextRequest, ticket: str, budget_s: float) -> Work:
        """Waits in the queue until the stream is admitted; :class:`Refused` once its
        budget runs out, RequestCancelled if its client goes away meanwhile."""
        deadline = time.monotonic() + budget_s
        sender = request.get_response_sender()
        try:
            while True:
                try:
                    work = self._admit(long_text, ticket, queueing=True)
                    self.metrics.record_demand(long_text.voice, long_text.audio_s, admitted=True)
                    return work
                except Refused as refusal:
                    if time.monotonic() + QUEUE_POLL_S > deadline or self.unloading:
                        self._count_refused(long_text)
                        raise Refused(
                            f"no room for the stream within its budget of {budget_s:g} s ({refusal.reason})",
                            refusal.retry_after_s,
                        ) from None
                if sender.is_cancelled():
                    raise RequestCancelled(Cancellation.CANCELLED, 0, len(long_text.chunks))
                time.sleep(QUEUE_POLL_S)
        finally:
            self.ledger.leave_queue(ticket)

    def _count_refused(self, long_text: LongTextRequest) -> None:
        self.ledger.refused(long_text.audio_s)
        self.metrics.record_demand(long_text.voice, long_text.audio_s, admitted=False)

    def _admit(self, long_text: LongTextRequest, ticket: str | None = None, queueing: bool = False) -> Work:
        return self.ledger.admit_stream(
            long_text.request_id,
            long_text.voice,
            long_text.caller,
            long_text.audio_s,
            long_text.first_audio_s,
            self.lead_s,
            ticket,
            queueing,
        )

    def _stream(
        self,
        request: Any,
        long_text: LongTextRequest,
        work: Work | None,
        started: float,
        ticket: str | None,
        budget_s: float,
    ) -> None:
        try:
            if work is None:  # queued: wait for room first
                assert ticket is not None
                try:
                    work = self._admitted(request, long_text, ticket, budget_s)
                except Exception as err:
                    self._end_unadmitted(request, long_text.request_id, err)
                    return
            self._send_chunks(request, long_text, work, started)
        except BaseException:  # a pool thread's exception is kept in its Future, unread: log it
            failure = traceback.format_exc()
            pb_utils.Logger.log_error(f"tts_stream: stream {request_id(request)} failed:\n{failure}")
            raise

    def _end_unadmitted(self, request: Any, rid: str, err: Exception) -> None:
        """A queued stream that never got in: its error (unless its client went away),
        the final flag, and it counts no more as active."""
        sender = request.get_response_sender()
        try:
            self.metrics.record_error(outcome(err))
            if not isinstance(err, RequestCancelled):
                sender.send(error_response(self.errors, rid, err))
            sender.send(flags=FINAL)
        finally:
            self._ended()

    def _start_xtts(
        self, request: Any, voice: VoiceInfo, demand: Demand, work: Work, rid: str, started: float
    ) -> None:
        """The admitted XTTS request's thread (unloading: its work released, and the error
        goes out as the request's own)."""
        with self.lock:
            self.active += 1
        try:
            self.streams.submit(self._xtts, request, voice, demand, work, rid, started)
        except RuntimeError:
            self.ledger.release(work)
            self._ended()
            raise

    def _xtts(
        self, request: Any, voice: VoiceInfo, demand: Demand, work: Work, rid: str, started: float
    ) -> None:
        """An XTTS voice's chunks as its model sends them."""
        try:
            chunks = partial(forward, request, voice, rid)
            self.deliveries.from_model(request, rid, voice.name, demand.characters, work, started, chunks)
        finally:
            self._ended()

    def _send_chunks(self, request: Any, long_text: LongTextRequest, work: Work, started: float) -> None:
        try:
            self.deliveries.text(request, long_text, work, started)
        finally:
            self._ended()

    def _ended(self) -> None:
        """A stream is no longer running (finalize waits for none to be)."""
        with self.lock:
            self.active -= 1
            self.lock.notify_all()

    def finalize(self) -> None:
        # serve drains streams before it stops Triton (triton_tts.ops.server.drain); what is left
        # gets a bounded wait, shorter than Triton's exit timeout, so that one stuck stream
        # cannot hold the unload (and the server's exit) past it. Paced streams send the
        # rest of their audio now.
        self.unloading = True
        with self.lock:
            drained = self.lock.wait_for(lambda: self.active == 0, timeout=FINALIZE_WAIT_S)
            left = self.active
        if not drained:
            pb_utils.Logger.log_warn(f"tts_stream: unloading with {left} stream(s) still running")
        self.streams.shutdown(wait=drained, cancel_futures=True)
        self.chunks.shutdown(wait=drained, cancel_futures=True)
