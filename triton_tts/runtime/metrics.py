"""TTS metrics on Triton's metrics port (``/metrics``), next to Triton's own ``nv_*`` series.

``tts`` and ``tts_stream`` record them through the Python backend's custom-metrics API
(``pb_utils.MetricFamily``; Triton 2.51, python_backend r24.10, has COUNTER, GAUGE and
HISTOGRAM). Direct ``tts_chunk`` calls are not counted here: that entry is an ensemble
with no Python of ours in front of it; Triton's ``nv_inference_*{model="tts_chunk"}``
cover it.

Every series carries ``model`` (``tts`` or ``tts_stream``) and ``model_instance`` (the
Triton instance and its stub's pid, e.g. ``tts_0_1:4242``): Triton 2.51 keeps one
reference count per model instance for a series that several instances create with the
same labels, so the first instance to unload would delete the series under the others
(a reload starts new instances before the old ones go). Sum over ``model_instance``.

Outcomes (``triton_tts_requests_total{reason}``), counted once per request:

- ``ok``: all audio delivered;
- ``invalid``: refused as malformed (INVALID_ARG: TEXT, options, voice, a chunk preprocess
  refused);
- ``busy``: refused for load: by admission (triton_tts/runtime/admission.py: the work ahead past
  the budget, the listeners' demand past capacity, a caller past its share, a safety
  bound), or a chunk the stages refused (UNAVAILABLE, their queue full);
- ``cancelled``: the client cancelled or went away (gRPC), or the request's own timeout
  passed (see :class:`triton_tts.runtime.cancellation.Cancellation`);
- ``failed``: anything else (a chunk's internal error, a dead stage instance).

Only ``ok`` requests add characters, audio and processing seconds, chunks and real-time
factor. Processing time runs from when the model starts the request to its last audio
(Triton's queue time before that is ``nv_inference_queue_duration_us``).

An XTTS voice's model records its decode loop here too (:class:`XttsMetrics`:
``tts_xtts_decode_steps_total{batch}``, ``tts_xtts_generations{state}``). This module is
the one registry of the product's metric families (:data:`FAMILIES`, :data:`XTTS_FAMILIES`);
it imports ``triton_python_backend_utils`` only when a model's metrics are made (inside
Triton), so that the chart's dashboard test can check its queries against the names.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

OUTCOMES = ("ok", "invalid", "busy", "cancelled", "failed")


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "COUNTER", "GAUGE" or "HISTOGRAM" (pb_utils.MetricFamily's kinds)
    description: str
    buckets: tuple[float, ...] = ()  # histograms' upper bounds (le); +Inf is implicit


REQUESTS = Family(
    "triton_tts_requests_total",
    "COUNTER",
    "Requests finished by tts and tts_stream, by outcome (reason): ok, invalid, busy, cancelled, failed",
)
CHARACTERS = Family(
    "triton_tts_characters_total",
    "COUNTER",
    "Characters of TEXT (Unicode code points, as decoded: control characters dropped, ends trimmed) "
    "of requests answered ok, per voice",
)
AUDIO_SECONDS = Family(
    "triton_tts_audio_seconds_total",
    "COUNTER",
    "Seconds of audio returned by requests answered ok, per voice",
)
PROCESSING_SECONDS = Family(
    "triton_tts_processing_seconds_total",
    "COUNTER",
    "Seconds from start of work to last audio of requests answered ok, per voice "
    "(rate over triton_tts_audio_seconds_total: the real-time factor of all of them)",
)
CHUNKS = Family(
    "triton_tts_request_chunks",
    "HISTOGRAM",
    "Text chunks per request answered ok (each one tts_chunk request)",
    (1, 2, 4, 8, 16, 32, 64, 128, 256),
)
REAL_TIME_FACTOR = Family(
    "triton_tts_real_time_factor",
    "HISTOGRAM",
    "Processing seconds per second of audio, per request answered ok (below 1: faster than real time)",
    (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5),
)
FIRST_CHUNK_SECONDS = Family(
    "triton_tts_first_chunk_seconds",
    "HISTOGRAM",
    "tts_stream: seconds from start of work to the first audio sent",
    (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10),
)
STREAM_GAPS = Family(
    "triton_tts_stream_gaps_total",
    "COUNTER",
    "tts_stream: chunks sent after a listener playing from the first chunk would have run out "
    "of audio (pacing's lead too short for the load, or the server behind real time)",
)
IN_FLIGHT = Family(
    "triton_tts_requests_in_flight",
    "GAUGE",
    "Requests tts and tts_stream have started and not finished (triton-tts serve waits for 0 "
    "before it stops Triton, whose stop would refuse their later chunks)",
)
# Admission (triton_tts/runtime/admission.py). The ledger is the server's, so every instance
# reports the same capacity and load: take max over model_instance, not sum.
CAPACITY = Family(
    "triton_tts_capacity_audio_seconds_per_second",
    "GAUGE",
    "Seconds of audio per second the server makes of a voice when busy (measured at start, "
    "corrected from live throughput; the same in every instance: take max)",
)
STAGE_CAPACITY = Family(
    "triton_tts_stage_capacity_audio_seconds_per_second",
    "GAUGE",
    "Seconds of audio per busy second of one instance of a voice's stage, measured at start",
)
ADMITTED_WORK = Family(
    "triton_tts_admitted_work_seconds",
    "GAUGE",
    "Machine-seconds of admitted texts and first chunks not made yet, what a new text waits "
    "for (the same in every instance: take max)",
)
STREAM_DEMAND = Family(
    "triton_tts_stream_demand_ratio",
    "GAUGE",
    "Admitted listeners' real-time demand over capacity (the same in every instance: take max)",
)
DEMANDED = Family(
    "triton_tts_demanded_audio_seconds_total",
    "COUNTER",
    "Predicted seconds of audio asked of tts and tts_stream, per voice, admitted or refused "
    "(outcome); its rate over capacity is the demand autoscaling reads",
)
FAMILIES = (
    REQUESTS,
    IN_FLIGHT,
    CHARACTERS,
    AUDIO_SECONDS,
    PROCESSING_SECONDS,
    CHUNKS,
    REAL_TIME_FACTOR,
    FIRST_CHUNK_SECONDS,
    STREAM_GAPS,
    CAPACITY,
    STAGE_CAPACITY,
    ADMITTED_WORK,
    STREAM_DEMAND,
    DEMANDED,
)
STREAM_ONLY = (FIRST_CHUNK_SECONDS, STREAM_GAPS)
# An XTTS voice's own model (model_repository/xtts/1/model.py): its decode loop.
XTTS_DECODE_STEPS = Family(
    "tts_xtts_decode_steps_total",
    "COUNTER",
    "XTTS decode steps (one GPT run each), by how many generations ran in it",
)
XTTS_GENERATIONS = Family(
    "tts_xtts_generations",
    "GAUGE",
    "XTTS generations in the cache pool, or waiting for a slot",
)
XTTS_FAMILIES = (XTTS_DECODE_STEPS, XTTS_GENERATIONS)


class _Registry:
    """A model instance's families (made once; they must outlive their metrics: a family's
    Python object clears them all) and its metrics, each with the instance's labels."""

    def __init__(self, families: Iterable[Family], model: str, instance_name: str) -> None:
        import triton_python_backend_utils as pb_utils

        kinds = {
            "COUNTER": pb_utils.MetricFamily.COUNTER,
            "GAUGE": pb_utils.MetricFamily.GAUGE,
            "HISTOGRAM": pb_utils.MetricFamily.HISTOGRAM,
        }
        self._families = {
            f: pb_utils.MetricFamily(name=f.name, description=f.description, kind=kinds[f.kind])
            for f in families
        }
        self._base = {"model": model, "model_instance": f"{instance_name}:{os.getpid()}"}

    def metric(self, family: Family, **labels: str) -> Any:
        buckets = list(family.buckets) if family.kind == "HISTOGRAM" else None
        return self._families[family].Metric(labels={**self._base, **labels}, buckets=buckets)


@dataclass(frozen=True)
class _VoiceMetrics:
    characters: Any
    audio_seconds: Any
    processing_seconds: Any
    real_time_factor: Any
    first_chunk_seconds: Any | None


class TTSMetrics:
    """One model instance's metrics, made once in ``initialize``; recording is a few calls
    per request and never logs.

    The backend's Metric objects are not thread-safe (each call stages its value in the
    object before the round trip to Triton), so every recording holds one lock.
    """

    def __init__(self, model: str, instance_name: str, voices: Iterable[str], streaming: bool) -> None:
        families = [f for f in FAMILIES if streaming or f not in STREAM_ONLY]
        self._registry = _Registry(families, model, instance_name)
        metric = self._registry.metric

        self._lock = threading.Lock()
        self._requests = {reason: metric(REQUESTS, reason=reason) for reason in OUTCOMES}
        self._chunks = metric(CHUNKS)
        self._in_flight = metric(IN_FLIGHT)
        self._gaps = metric(STREAM_GAPS) if streaming else None
        self._metric = metric
        self._capacity: dict[str, Any] = {}
        self._stage_capacity: dict[tuple[str, str], Any] = {}
        self._admitted_work = metric(ADMITTED_WORK)
        self._stream_demand = metric(STREAM_DEMAND)
        self._demanded = {
            (voice, outcome): metric(DEMANDED, voice=voice, outcome=outcome)
            for voice in voices
            for outcome in ("admitted", "refused")
        }
        self._voices = {
            voice: _VoiceMetrics(
                characters=metric(CHARACTERS, voice=voice),
                audio_seconds=metric(AUDIO_SECONDS, voice=voice),
                processing_seconds=metric(PROCESSING_SECONDS, voice=voice),
                real_time_factor=metric(REAL_TIME_FACTOR, voice=voice),
                first_chunk_seconds=metric(FIRST_CHUNK_SECONDS, voice=voice) if streaming else None,
            )
            for voice in voices
        }

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Counts a request in ``triton_tts_requests_in_flight`` while the block runs."""
        with self._lock:
            self._in_flight.increment(1)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight.increment(-1)

    def record_ok(
        self, voice: str, characters: int, audio_s: float, processing_s: float, chunks: int, gaps: int = 0
    ) -> None:
        """A request whose audio was all delivered (``gaps``: a stream's,
        triton_tts.runtime.pacing.Pacer.gaps)."""
        per_voice = self._voices[voice]
        with self._lock:
            if self._gaps is not None and gaps:
                self._gaps.increment(gaps)
            self._requests["ok"].increment(1)
            per_voice.characters.increment(characters)
            per_voice.audio_seconds.increment(audio_s)
            per_voice.processing_seconds.increment(processing_s)
            self._chunks.observe(chunks)
            if audio_s > 0:
                per_voice.real_time_factor.observe(processing_s / audio_s)

    def record_error(self, reason: str) -> None:
        """A request that ended in an error (one of OUTCOMES other than ok)."""
        with self._lock:
            self._requests[reason].increment(1)

    def record_first_chunk(self, voice: str, seconds: float) -> None:
        metric = self._voices[voice].first_chunk_seconds
        if metric is not None:
            with self._lock:
                metric.observe(seconds)

    @contextmanager
    def demand(self, voice: str, audio_s: float) -> Iterator[None]:
        """Counts a request's predicted audio as refused if the block (its admission)
        raises, else as admitted."""
        try:
            yield
        except BaseException:
            self._record_demand(voice, audio_s, "refused")
            raise
        self._record_demand(voice, audio_s, "admitted")

    def record_demand(self, voice: str, audio_s: float, admitted: bool) -> None:
        """A request's predicted audio, admitted or refused (where :meth:`demand`'s block
        does not fit: a stream that waits for room is counted once, when it gets in or not)."""
        self._record_demand(voice, audio_s, "admitted" if admitted else "refused")

    def _record_demand(self, voice: str, audio_s: float, outcome: str) -> None:
        with self._lock:
            self._demanded[(voice, outcome)].increment(audio_s)

    def record_load(self, ledger: Any) -> None:
        """The admission ledger's capacity and load (a triton_tts.runtime.admission.Ledger)."""
        load, capacities = ledger.snapshot()
        with self._lock:
            self._admitted_work.set(load.text_work_s + load.first_work_s)
            self._stream_demand.set(load.stream_demand)
            for voice, (capacity, _, stages) in capacities.items():
                if voice not in self._capacity:
                    self._capacity[voice] = self._metric(CAPACITY, voice=voice)
                self._capacity[voice].set(capacity)
                for stage, value in stages.items():
                    if (voice, stage) not in self._stage_capacity:
                        self._stage_capacity[(voice, stage)] = self._metric(
                            STAGE_CAPACITY, voice=voice, stage=stage
                        )
                    self._stage_capacity[(voice, stage)].set(value)


class XttsMetrics:
    """An XTTS voice's model instance: decode steps by batch size and its generations,
    live and waiting (made once in ``initialize``; recording holds one lock, as
    :class:`TTSMetrics` does)."""

    def __init__(self, model: str, instance_name: str) -> None:
        self._registry = _Registry(XTTS_FAMILIES, model, instance_name)
        self._lock = threading.Lock()
        self._steps: dict[int, Any] = {}
        self._counted: dict[int, int] = {}
        self._live = self._registry.metric(XTTS_GENERATIONS, state="live")
        self._waiting = self._registry.metric(XTTS_GENERATIONS, state="waiting")

    def record(self, steps_by_size: dict[int, int], live: int, waiting: int) -> None:
        """The decode loop's totals so far (steps by how many generations ran in them)
        and its generations now."""
        with self._lock:
            for size, count in steps_by_size.items():
                if size not in self._steps:
                    self._steps[size] = self._registry.metric(XTTS_DECODE_STEPS, batch=str(size))
                    self._counted[size] = 0
                self._steps[size].increment(count - self._counted[size])
                self._counted[size] = count
            self._live.set(live)
            self._waiting.set(waiting)
