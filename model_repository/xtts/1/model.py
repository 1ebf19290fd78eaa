"""The ``xtts`` model: XTTS v2 in one decoupled Python-backend model, streamed, with its
GPT decoding batched across requests (copied as ``model.py`` into the model's version
folder by ``triton-tts build-repo``; a build serves an XTTS voice folder as ``xtts``, or
``xtts__<voice>`` after the first).

A request with STORE_SPEAKER true stores its clip's conditioning as the named SPEAKER in
the model's ``speakers`` folder (the gateway's upload sends it; an existing name is
refused ALREADY_EXISTS) and answers one empty last chunk.

Each request is read and checked in ``execute`` (a refusal, INVALID_ARG, goes out at once,
then the final flag), its reference clip conditioned (cached by the clip's content hash,
in a bounded LRU), and handed to the scheduler's loop (triton_tts.xtts.scheduler), which
batches every live request's decode step into one GPT run and sends audio every
``chunk_codes`` codes. Every response carries AUDIO, SAMPLE_RATE, CHUNK_INDEX and
IS_LAST; the final flag always ends a request, after an error too. A request with the
``tts_errors_as_output`` parameter true (tts and tts_stream send it) gets its error as a
response whose ERROR output holds the tagged message instead: a BLS caller's stream cannot
carry an error response on Triton 2.51 (contract/errors.py, ``RequestErrors.as_output``).
A request Triton marks cancelled, or one that outlives its own ``timeout``, stops at its
next step; so does one whose job id (the ``tts_job`` parameter tts and tts_stream send) an
internal cancel request names (``tts_cancel_job``, with the server's internal token:
:class:`Jobs`).

The conditioning encoders and the decoder are the voice's stage models (``xtts_style``,
``xtts_speaker``, ``xtts_decoder``; triton_tts/xtts/stage_calls.py), called by BLS: on
GPU nodes they run on Triton's native onnxruntime backend while the GPT's loop stays here.

Admission is tts's and tts_stream's: each XTTS text is admitted there by its predicted
work, in the ledger the chunk voices share (triton_tts/xtts/forward.py,
triton_tts/runtime/admission.py), against the capacity this model reports there, measured on
itself while busy (triton_tts/xtts/capacity.py). ``max_waiting`` (generations waiting for
a slot) is only a safety bound, as ``max_texts`` is for tts: past it a request is refused
at once (UNAVAILABLE, "server busy" with a retry hint), which direct callers of this model
meet first.

The model's statistics go to Triton's metrics port: decode steps by batch size, so that
cross-request batching is visible (``tts_xtts_decode_steps_total{batch="2"}``), and the
live and waiting generations (triton_tts.runtime.metrics.XttsMetrics: the one registry of
the product's metric families).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.validation import BUSY_JOB, InvalidRequest
from triton_tts.runtime import internal
from triton_tts.runtime.admission import AdmissionSettings, Ledger, busy_message
from triton_tts.runtime.cancellation import Cancellation, RequestCancelled
from triton_tts.runtime.metrics import XttsMetrics
from triton_tts.xtts import defaults
from triton_tts.xtts.capacity import ThroughputWindow
from triton_tts.xtts.clips import ClipCache, ClipSettings
from triton_tts.xtts.requests import errors_as_output, read_cancel, read_controls, read_job, read_store
from triton_tts.xtts.runner import FloatArray, XttsRunner
from triton_tts.xtts.scheduler import Job, Scheduler
from triton_tts.xtts.speakers import SpeakerExists, SpeakerStore
from triton_tts.xtts.stage_calls import TritonGraphs
from triton_tts.xtts.text import XttsText

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
METRICS_PERIOD_S = 0.2
EARLY_CANCELS = 1024  # cancelled job ids not (yet) seen, remembered in case theirs comes after


class Jobs:
    """Live generations by job id, for the internal cancel requests of tts and tts_stream
    (triton_tts/xtts/forward.py): Triton does not tell this model that a BLS caller's own
    client went away. A cancel that comes before its job is remembered (a bounded few)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.early: OrderedDict[str, None] = OrderedDict()

    def start(self, job: str) -> threading.Event:
        with self.lock:
            if job in self.events:
                raise InvalidRequest(f"job {job!r} is already generating", BUSY_JOB)
            event = self.events[job] = threading.Event()
            if job in self.early:
                del self.early[job]
                event.set()
            return event

    def end(self, job: str) -> None:
        with self.lock:
            self.events.pop(job, None)

    def cancel(self, job: str) -> bool:
        """Stop job ``job``'s generation at its next step; False: none live by that id."""
        with self.lock:
            event = self.events.get(job)
            if event is None:
                self.early[job] = None
                while len(self.early) > EARLY_CANCELS:
                    self.early.popitem(last=False)
                return False
            event.set()
            return True


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("xtts needs model_transaction_policy { decoupled: true }")
        params = string_parameters(config)
        folder = Path(args["model_repository"]) / args["model_version"]
        threads = int(params.get("threads", defaults.THREADS))
        # The conditioning encoders and the decoder: the voice's stage models, by BLS (a
        # config without stage_models runs them in this process, from this folder).
        stages = json.loads(params.get("stage_models") or "{}")
        graphs = TritonGraphs(stages) if stages else None
        self.runner = XttsRunner(folder, threads=threads, graphs=graphs)
        self.text = XttsText(folder, self.runner.card)
        self.clips = ClipCache(self.runner, ClipSettings.from_parameters(params))
        card = self.runner.card
        self.speakers = SpeakerStore(folder, card)
        self.scheduler = Scheduler(
            self.runner,
            slots=int(params.get("slots", defaults.SLOTS)),
            chunk_codes=int(params.get("chunk_codes", defaults.CHUNK_CODES)),
            overlap=int(params.get("overlap_samples", defaults.OVERLAP_SAMPLES)),
        )
        # A safety bound, not the admission rule (tts and tts_stream admit by work): a
        # request that would find this many waiting for a slot is refused at once.
        waiting = defaults.WAITING_PER_SLOT * self.scheduler.pool.slots
        self.max_waiting = int(params.get("max_waiting", waiting))
        # The voice's capacity in the admission ledger: the default until this model has
        # measured what it makes (kept when a healed stub starts again).
        self.ledger = Ledger.from_environment(
            AdmissionSettings.from_parameters(params), args["model_repository"]
        )
        self.throughput = ThroughputWindow()
        self.ledger.observe_capacity(card.name, None, defaults.CAPACITY)
        self.name = args["model_name"]
        self.errors = RequestErrors(self.name, tagged=True)
        self.rate = np.array([self.runner.card.output_rate], dtype=np.int32)
        self.jobs = Jobs()
        self.token = os.environ.get(internal.TOKEN_ENV) or None
        self._metrics(args["model_instance_name"])
        pool, card = self.scheduler.pool, self.runner.card
        pb_utils.Logger.log_info(
            f"{self.name}: XTTS voice '{card.name}', {pool.slots} cache slots of {pool.capacity} positions; "
            f"licence: {card.licence or 'see the voice card'}"
        )

    def _metrics(self, instance: str) -> None:
        self.metrics = XttsMetrics(self.name, instance)
        self.metrics_lock = threading.Lock()  # the refresh thread's and execute's recordings
        self.stopped = threading.Event()
        # Between requests' events too: the gauges and counters follow the loop every 0.2 s.
        threading.Thread(target=self._refresh_metrics, name="xtts-metrics", daemon=True).start()

    def _refresh_metrics(self) -> None:
        while not self.stopped.wait(METRICS_PERIOD_S):
            self._record_metrics()

    def _record_metrics(self) -> None:
        with self.metrics_lock:
            with self.scheduler.lock:
                sizes = dict(self.scheduler.batch_sizes)
            stats = self.scheduler.statistics()
            self.metrics.record(sizes, stats["live"], stats["waiting"])
            self._observe_capacity(stats)

    def _observe_capacity(self, stats: dict[str, int]) -> None:
        """At each window's end, what the model made, to the ledger (busy: every slot
        live or a generation waiting for one, throughout the window)."""
        busy = stats["waiting"] > 0 or stats["live"] >= self.scheduler.pool.slots
        ended = self.throughput.sample(busy)
        if ended is None or ended[0] <= 0:
            return
        try:
            self.ledger.observe_capacity(self.runner.card.name, ended[0], defaults.CAPACITY, ended[1])
        except OSError as err:  # admission goes on with the figure it has
            pb_utils.Logger.log_warn(f"{self.name}: capacity not written to the ledger: {err}")

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            rid = request_id(request)
            sender = request.get_response_sender()
            as_output = errors_as_output(request)
            try:
                if self._cancel(request, sender) or self._store(request, rid, sender, as_output):
                    continue
            except Exception as err:  # reading the request: its own error (INVALID_ARG)
                sender.send(self._error(as_output, rid, str(err), pb_utils.TritonError.INVALID_ARG))
                sender.send(flags=FINAL)
                continue
            waiting = self.scheduler.statistics()["waiting"]
            if waiting >= self.max_waiting:  # the safety bound (admission is by work, in tts)
                message = busy_message(f"XTTS is at capacity: {waiting} generations wait for a slot", 1.0)
                sender.send(self._error(as_output, rid, message, pb_utils.TritonError.UNAVAILABLE))
                sender.send(flags=FINAL)
                continue
            try:
                job = self._job(request, rid, sender, as_output)
            except InvalidRequest as err:
                sender.send(self._error(as_output, rid, str(err), pb_utils.TritonError.INVALID_ARG))
                sender.send(flags=FINAL)
                continue
            except Exception as err:
                sender.send(self._error(as_output, rid, f"{type(err).__name__}: {err}"))
                sender.send(flags=FINAL)
                continue
            self.scheduler.submit(job)
        self._record_metrics()

    def _error(self, as_output: bool, rid: str, message: str, code: int | None = None) -> Any:
        """A request's error response (INTERNAL if ``code`` is None), or the same error in
        its ERROR output for a caller that asks (:func:`errors_as_output`: tts and
        tts_stream, whose BLS streams cannot carry an error response on Triton 2.51)."""
        form = self.errors.as_output if as_output else self.errors.response
        return form(rid, message, code)

    def _chunk(self, audio: FloatArray, index: int, last: bool) -> Any:
        """One response: every response carries AUDIO, SAMPLE_RATE, CHUNK_INDEX, IS_LAST."""
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("AUDIO", audio.astype(np.float32)),
                pb_utils.Tensor("SAMPLE_RATE", self.rate),
                pb_utils.Tensor("CHUNK_INDEX", np.array([index], dtype=np.int32)),
                pb_utils.Tensor("IS_LAST", np.array([last], dtype=bool)),
            ]
        )

    def _cancel(self, request: Any, sender: Any) -> bool:
        """An internal cancel request: its job's generation stops at its next step (the
        job's own request then ends with its final flag); answered with the final flag
        alone. False: not one."""
        job = read_cancel(request, self.token)
        if job is None:
            return False
        if self.jobs.cancel(job):
            pb_utils.Logger.log_info(f"{self.name}: job {job} cancelled by its caller")
        sender.send(flags=FINAL)
        return True

    def _store(self, request: Any, rid: str, sender: Any, as_output: bool) -> bool:
        """A STORE_SPEAKER request: the clip's conditioning saved as a named speaker, then
        one empty last chunk (or the refusal) and the final flag. False: not one."""
        store = read_store(request)
        if store is None:
            return False
        try:
            self.speakers.check_new(store.name)  # before any work (add checks again, locked)
            conditioning = self.clips.conditioning(store.reference, store.reference_rate)
            path = self.speakers.add(store.name, conditioning)
        except SpeakerExists as err:
            sender.send(self._error(as_output, rid, str(err), pb_utils.TritonError.ALREADY_EXISTS))
        except ValueError as err:  # InvalidRequest, too
            sender.send(self._error(as_output, rid, str(err), pb_utils.TritonError.INVALID_ARG))
        except Exception as err:
            sender.send(self._error(as_output, rid, f"{type(err).__name__}: {err}"))
        else:
            pb_utils.Logger.log_info(f"{self.name}: speaker {store.name!r} stored ({path.name})")
            sender.send(self._chunk(np.zeros(0, dtype=np.float32), 0, last=True))
        sender.send(flags=FINAL)
        return True

    def _job(self, request: Any, rid: str, sender: Any, as_output: bool) -> Job:
        controls = read_controls(request, self.runner.card)
        segments = self.text.read(controls.text, controls.language)
        if controls.speaker is not None:
            conditioning = self.speakers.get(controls.speaker)
        else:
            conditioning = self.clips.conditioning(controls.reference, controls.reference_rate)
        cancellation = Cancellation(sender.is_cancelled, request.timeout())
        job_id = read_job(request)
        by_caller = self.jobs.start(job_id) if job_id is not None else threading.Event()

        def cancelled() -> bool:
            if by_caller.is_set() and cancellation.reason is None:
                cancellation.reason = "cancelled by its caller"
            return cancellation()

        index = [0]
        done = threading.Event()

        def send(audio: FloatArray, last: bool) -> None:
            self.throughput.made(audio.size / self.runner.card.output_rate)
            response = self._chunk(audio, index[0], last)
            index[0] += 1
            sender.send(response)

        def finish(err: Exception | None) -> None:
            if done.is_set():
                return
            done.set()
            if job_id is not None:
                self.jobs.end(job_id)
            try:
                if isinstance(err, RequestCancelled):
                    pb_utils.Logger.log_warn(
                        f"{self.name}: request {rid} stopped: {cancellation.reason or err}"
                    )
                elif err is not None:
                    sender.send(self._error(as_output, rid, f"{type(err).__name__}: {err}"))
            finally:
                sender.send(flags=FINAL)  # the sender is never touched after this
                self._record_metrics()

        return Job(
            segments=segments, conditioning=conditioning, sampling=controls.sampling, seed=controls.seed,
            send=send, finish=finish, cancelled=cancelled,
        )  # fmt: skip

    def finalize(self) -> None:
        self.stopped.set()
        self.scheduler.stop()
