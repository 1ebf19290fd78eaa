"""Long text through the ``tts_chunk`` ensemble with Triton's business logic scripting.

Shared by the ``tts`` (whole audio) and ``tts_stream`` (decoupled, chunk by chunk)
Python models: validate and normalise the text once, split it into chunks
(:mod:`triton_tts.chunking`), and send each chunk through the same ``tts_chunk``
ensemble that short requests use, so chunks of long texts batch with everyone else's
traffic in the acoustic and vocoder models. Only importable inside Triton's Python
backend (it needs ``triton_python_backend_utils``).

Work for a request that no one waits for stops: before each chunk starts, the request's
:class:`Cancellation` is asked, and a cancelled request starts no more chunks (those in
flight, at most ``chunks_in_flight``, finish and are dropped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.chunking import ChunkPlan, halves, join_edges, split_text
from triton_tts.config_parameters import string_parameters
from triton_tts.limits import TOO_LONG, ChunkLimits, chunk_scale
from triton_tts.request_options import read_options, requested_voice
from triton_tts.text.normalize import normalize_english
from triton_tts.validation import MAX_LONG_TEXT_CHARS, NOTHING_TO_SAY, InvalidRequest, decode_text

PASSED_THROUGH = ("SPEED", "SPEAKER_ID", "NOISE_SCALE", "NOISE_W", "VOICE")


class ChunkFailed(Exception):
    """A chunk's synthesis failed; carries Triton's error (message and code)."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message())
        self.error = error


class RequestCancelled(Exception):
    """A request stopped before its last chunk (see :class:`Cancellation`)."""

    def __init__(self, reason: str, done: int, total: int) -> None:
        super().__init__(f"{reason}: stopped after {done} of {total} chunks")
        self.timed_out = reason == Cancellation.TIMED_OUT


class Cancellation:
    """Asked before each chunk starts: should the request's remaining chunks be skipped?

    Yes once Triton marks the request cancelled (``is_cancelled``: the request's, or a
    decoupled model's response sender's): a gRPC client cancelled it, its ``client_timeout``
    (the gRPC deadline) passed, or it went away. Triton 2.51 does not mark a request whose
    HTTP client disconnects (tests/test_cancellation.py shows it): that one runs to its
    end, ``chunks_in_flight`` chunks at a time. Any request can bound itself, over either
    protocol, with its own ``timeout`` (tritonclient's ``timeout=``, in microseconds, read
    here with ``request.timeout()``): yes, too, once that long has passed since the model
    started it (the wait in Triton's queue before that is Triton's to bound). Each
    question is one round trip to Triton, once per chunk.
    """

    CANCELLED = "request cancelled"
    TIMED_OUT = "request timeout expired"

    def __init__(self, is_cancelled: Callable[[], bool], timeout_us: int = 0) -> None:
        self._is_cancelled = is_cancelled
        self._deadline = time.monotonic() + timeout_us / 1e6 if timeout_us > 0 else None
        self.reason: str | None = None

    def __call__(self) -> bool:
        if self.reason is None:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self.reason = self.TIMED_OUT
            elif self._is_cancelled():
                self.reason = self.CANCELLED
        return self.reason is not None


@dataclass
class LongTextRequest:
    chunks: list[str]
    passed_through: list[Any]  # pb_utils.Tensor inputs forwarded to every chunk
    model: str = "tts_chunk"  # the chosen voice's ensemble
    voice: str = ""  # the chosen voice's name
    characters: int = 0  # of the decoded TEXT, before normalisation (for metrics)


@dataclass(frozen=True)
class ServedVoice:
    """A voice and its ``tts_chunk`` ensemble, as the long-text models' parameters say."""

    name: str
    num_speakers: int
    model: str
    limits: ChunkLimits

    @classmethod
    def all_from_parameters(cls, params: dict[str, str]) -> list[ServedVoice]:
        """Every voice served, the default first (see model_configs.VoiceModels)."""
        return [
            cls(
                v["name"],
                max(1, len(v["speakers"])),
                v["model"],
                ChunkLimits.from_json(json.dumps(v["chunk_limits"])),
            )
            for v in json.loads(params["voices"])
        ]


@dataclass(frozen=True)
class LongTextSettings:
    """What ``tts`` and ``tts_stream`` read once in ``initialize``."""

    plan: ChunkPlan
    chunks_in_flight: int
    voices: list[ServedVoice]  # the default first
    threads: int

    def voice(self, name: str) -> ServedVoice:
        """The voice a request's VOICE names ("" or absent: the default)."""
        for voice in self.voices:
            if voice.name == name or (not name and voice is self.voices[0]):
                return voice
        served = ", ".join(f"'{v.name}'" for v in self.voices)
        raise InvalidRequest(f"unknown VOICE '{name}': this server serves {served}")

    @classmethod
    def from_model_config(cls, config: dict[str, Any]) -> LongTextSettings:
        params = string_parameters(config)
        return cls(
            plan=ChunkPlan(int(params["first_chunk_chars"]), int(params["chunk_chars"])),
            chunks_in_flight=int(params["chunks_in_flight"]),
            voices=ServedVoice.all_from_parameters(params),
            threads=int(params["bls_threads"]),
        )


def read_request(request: Any, settings: LongTextSettings) -> LongTextRequest:
    """TEXT -> normalised chunks; the optional inputs go to every chunk unchanged."""
    raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
    if raw.size != 1:
        raise InvalidRequest(f"TEXT must hold one string per request, got {raw.size}")
    decoded = decode_text(raw[0], limit=MAX_LONG_TEXT_CHARS)
    text = normalize_english(decoded)
    voice = settings.voice(requested_voice(request))
    options = read_options(request, voice.name, voice.num_speakers)  # fail before any chunk runs
    chunks = split_text(text, settings.plan.scaled(chunk_scale(voice.limits, options.speed, options.noise_w)))
    if not chunks:
        raise InvalidRequest(NOTHING_TO_SAY)
    extras = [
        t for name in PASSED_THROUGH if (t := pb_utils.get_input_tensor_by_name(request, name)) is not None
    ]
    return LongTextRequest(chunks, extras, voice.model, voice.name, len(decoded))


def synthesize_chunk(model: str, text: str, extras: list[Any]) -> tuple[npt.NDArray[np.float32], int]:
    """One chunk through the voice's ensemble (blocking BLS call). A chunk preprocess
    refuses as over the voice's budget (limits.TOO_LONG: dense text, slow SPEED, noisy
    NOISE_W) is said in halves, joined, until the pieces fit; nothing long fails on it."""
    inputs = [pb_utils.Tensor("TEXT", np.array([[text.encode("utf-8")]], dtype=np.object_)), *extras]
    response = pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["AUDIO", "SAMPLE_RATE"], inputs=inputs
    ).exec()
    if response.has_error():
        message = response.error().message()
        if message.endswith(NOTHING_TO_SAY):
            return np.zeros(0, dtype=np.float32), 0  # e.g. a "* * *" line in a chapter: skip it
        if TOO_LONG in message and (pieces := halves(text)):
            return _joined([synthesize_chunk(model, piece, extras) for piece in pieces])
        raise ChunkFailed(response.error())
    audio = pb_utils.get_output_tensor_by_name(response, "AUDIO").as_numpy().reshape(-1)
    rate = int(pb_utils.get_output_tensor_by_name(response, "SAMPLE_RATE").as_numpy().reshape(-1)[0])
    return audio.astype(np.float32, copy=False), rate


def _joined(parts: list[tuple[npt.NDArray[np.float32], int]]) -> tuple[npt.NDArray[np.float32], int]:
    spoken = [(audio, rate) for audio, rate in parts if audio.size]
    if not spoken:
        return np.zeros(0, dtype=np.float32), 0
    rate = spoken[0][1]
    joined = [join_edges(audio, rate, i, len(spoken)) for i, (audio, _) in enumerate(spoken)]
    return np.concatenate(joined).astype(np.float32, copy=False), rate


def in_order(
    pool: ThreadPoolExecutor,
    request: LongTextRequest,
    window: int,
    cancellation: Cancellation | None = None,
) -> Iterator[tuple[int, npt.NDArray[np.float32], int]]:
    """Yield (index, joined audio, rate) in reading order, ``window`` chunks in flight.

    Later chunks are synthesised while earlier ones are delivered. ``cancellation`` is
    asked before each chunk is waited for: once it says stop, nothing new starts, the
    chunks in flight are left to finish unread, and :class:`RequestCancelled` is raised.
    Chunks with nothing to pronounce are skipped (the last one is still yielded, empty, so
    a stream always gets its IS_LAST chunk).
    """
    count = len(request.chunks)
    rate_seen = 0
    pending: dict[int, Future[tuple[npt.NDArray[np.float32], int]]] = {}
    submitted = 0
    for index in range(count):
        # The first chunk travels alone: the stages run a batch's items one after
        # another, so chunk 0 batched behind the (long) chunk 1 would wait for it.
        limit = 1 if index == 0 else window
        if cancellation is not None and cancellation():
            raise RequestCancelled(cancellation.reason or Cancellation.CANCELLED, index, count)
        while submitted < count and submitted < index + limit:
            pending[submitted] = pool.submit(
                synthesize_chunk, request.model, request.chunks[submitted], request.passed_through
            )
            submitted += 1
        audio, rate = pending.pop(index).result()
        rate_seen = rate or rate_seen
        if audio.size == 0 and index < count - 1:
            continue
        if rate_seen == 0:
            raise InvalidRequest(NOTHING_TO_SAY)
        yield index, join_edges(audio, rate_seen, index, count), rate_seen


def error_response(err: Exception) -> Any:
    if isinstance(err, RequestCancelled):  # a timeout is UNAVAILABLE, as Triton's own queue says
        code = pb_utils.TritonError.UNAVAILABLE if err.timed_out else pb_utils.TritonError.CANCELLED
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err), code))
    if isinstance(err, ChunkFailed):  # keep the chunk's error code (e.g. INVALID_ARG)
        code = err.error.code() if hasattr(err.error, "code") else pb_utils.TritonError.INTERNAL
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(err.error.message(), code))
    if isinstance(err, InvalidRequest):
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(str(err), pb_utils.TritonError.INVALID_ARG)
        )
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"synthesis failed: {err}"))


def outcome(err: Exception) -> str:
    """The metrics' outcome (triton_tts.metrics.OUTCOMES) of a request that ended in ``err``."""
    if isinstance(err, RequestCancelled):
        return "cancelled"
    if isinstance(err, InvalidRequest):
        return "invalid"
    if isinstance(err, ChunkFailed) and hasattr(err.error, "code"):
        return {
            pb_utils.TritonError.INVALID_ARG: "invalid",
            pb_utils.TritonError.UNAVAILABLE: "busy",
            pb_utils.TritonError.CANCELLED: "cancelled",
        }.get(err.error.code(), "failed")
    return "failed"
