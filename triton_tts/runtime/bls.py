"""Long text through the ``tts_chunk`` ensemble with Triton's business logic scripting.

Shared by the ``tts`` (whole audio) and ``tts_stream`` (decoupled, chunk by chunk)
Python models: read and check the request, choose the voice and normalise the text once
(:mod:`triton_tts.runtime.request_options`), split it into chunks (:mod:`triton_tts.runtime.chunking`),
and send each chunk through the voice's ``tts_chunk`` ensemble, the one short requests
use, so chunks of long texts batch with everyone else's traffic in the acoustic and
vocoder models. Each chunk goes with NORMALIZE false (its text is normalised already),
the client's SPEED, SPEAKER_ID and NOISE_* as sent, no VOICE (the ensemble is the voice),
and the request id ``<id>/<chunk index>``. Chunks with nothing to pronounce
(:func:`triton_tts.text.speaks.pronounceable`: a "* * *" line) are never sent; one that
preprocess still finds nothing to say in (only letters the voice has no symbols for)
fails the request with preprocess's refusal, like any other refused chunk. Only
importable inside Triton's Python backend (it needs ``triton_python_backend_utils``).

Work for a request that no one waits for stops: before each chunk starts, the request's
:class:`Cancellation` is asked, and a cancelled request starts no more chunks (those in
flight, at most ``chunks_in_flight``, finish and are dropped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.client.voices import CHUNKS_KIND, VoiceInfo
from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors
from triton_tts.contract.validation import MAX_LONG_TEXT_CHARS, InvalidRequest, NothingToSay, check_timestamps
from triton_tts.runtime import internal
from triton_tts.runtime.admission import Refused, chunk_priority
from triton_tts.runtime.chunking import ChunkPlan, halves, join_edges, split_text
from triton_tts.runtime.limits import TOO_LONG, ChunkLimits, check_audio, chunk_scale
from triton_tts.runtime.loopback import Loopback, LoopbackFailed, Unreachable
from triton_tts.runtime.pacing import Pacer
from triton_tts.runtime.request_options import read_lexicon, read_options, read_text, refuse_clip, voice_mix
from triton_tts.runtime.shaping import ChunkShape, ssml_chunks
from triton_tts.text import ssml
from triton_tts.text.frontend import is_chinese, normalizer
from triton_tts.text.pronounce import (
    Lexicon,
    apply_lexicons,
    check_pinyin,
    check_pronunciations,
    parse_request_lexicon,
)
from triton_tts.text.speaks import pronounceable
from triton_tts.text.words import Word, WordClock

# Inputs sent on with every chunk as the client sent them (VOICE chose the ensemble).
CHUNK_OPTIONS = ("SPEED", "SPEAKER_ID", "NOISE_SCALE", "NOISE_W", "VOICE_MIX")


class ChunkFailed(Exception):
    """A chunk's synthesis failed; carries Triton's message and code (a
    pb_utils.TritonError code, or None when Triton gave none)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


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
    took it (its wait for admission included; the wait in Triton's queue before that is
    Triton's to bound). The same timeout is the request's deadline for admission
    (triton_tts.runtime.admission.AdmissionSettings.text_budget). Each
    question is one round trip to Triton, once per chunk.
    """

    CANCELLED = "request cancelled"
    TIMED_OUT = "request timeout expired"

    def __init__(
        self, is_cancelled: Callable[[], bool], timeout_us: int = 0, since: float | None = None
    ) -> None:
        """``since``: when the model took the request (time.monotonic()), if before now: a
        wait for admission counts against its timeout."""
        self._is_cancelled = is_cancelled
        start = time.monotonic() if since is None else since
        self._deadline = start + timeout_us / 1e6 if timeout_us > 0 else None
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
    request_id: str  # chunks are sent as "<request_id>/<index>"
    chunks: list[str]  # each with something to pronounce
    passed_through: list[Any]  # pb_utils.Tensor inputs sent with every chunk
    model: str  # the chosen voice's ensemble
    voice: str  # the chosen voice's name
    characters: int  # of the decoded TEXT, before normalisation (for metrics)
    says_something: Callable[[str], bool] = pronounceable  # text.speaks.pronounceable for the voice
    caller: str = ""  # the request's "caller" parameter (the gateway names API keys' callers)
    deadline_us: int = 0  # how long it may wait for admission (wait_deadline_us); 0: not stated
    audio_s: float = 0.0  # predicted audio of all chunks (admission)
    first_audio_s: float = 0.0  # of the first chunk
    written: str | None = None  # TIMESTAMPS: the text as written
    chinese: bool = False  # its words are cut as Chinese words (triton_tts/text/words.py)
    shape: ChunkShape | None = None  # SSML: each chunk's speed, gain and silence after

    def word_clock(self) -> WordClock | None:
        """The request's word timestamps, chunk by chunk (None: TIMESTAMPS not asked)."""
        return None if self.written is None else WordClock(self.written, self.chunks, self.chinese)

    def extras(self, index: int) -> list[Any]:
        """The inputs sent with chunk ``index`` besides TEXT."""
        if self.shape is None:
            return self.passed_through
        speed = pb_utils.Tensor("SPEED", np.array([[self.shape.speeds[index]]], dtype=np.float32))
        return [*(t for t in self.passed_through if t.name() != "SPEED"), speed]

    def shaped(self, index: int, samples: npt.NDArray[np.float32], rate: int) -> npt.NDArray[np.float32]:
        """Chunk ``index``'s audio with its gain, and its silences (exact zeros)."""
        if self.shape is None or not rate:
            return samples
        return self.shape.apply(index, samples, rate)


CHINESE_CHARS_SCALE = 0.25  # 400 -> 100 characters, about 20 s of Mandarin


def chars_scale(voice: VoiceInfo) -> float:
    """Chunk sizes are set in characters of English prose; a Chinese character says
    about as much as four of them (a syllable; Mandarin reads 4-6 a second)."""
    return CHINESE_CHARS_SCALE if is_chinese(voice.language) else 1.0


@dataclass(frozen=True)
class LongTextSettings:
    """What ``tts`` and ``tts_stream`` read once in ``initialize``."""

    plan: ChunkPlan
    chunks_in_flight: int
    voices: list[VoiceInfo]  # the default first, as the voices parameter says
    limits: dict[str, ChunkLimits]  # voice name -> its chunk budget
    threads: int
    lexicons: Mapping[str, Lexicon] = field(default_factory=dict)  # voice name -> --lexicon entries
    phonemes: Mapping[str, str] = field(default_factory=dict)  # voice -> its pronunciations' symbols
    syllables: Mapping[str, dict[str, list[str]]] = field(default_factory=dict)  # pinyin voices'

    @property
    def speakers(self) -> dict[str, int]:
        """Voice name -> number of speakers, the default first (what read_options checks)."""
        return {v.name: max(1, len(v.speakers)) for v in self.voices}

    def voice(self, name: str) -> VoiceInfo:
        """A served voice by name (read_options has checked it)."""
        return next(v for v in self.voices if v.name == name)

    @classmethod
    def from_model_config(cls, config: dict[str, Any]) -> LongTextSettings:
        params = string_parameters(config)
        voices = VoiceInfo.list_from_json(params["voices"])
        phonemes = json.loads(params.get("pronunciations", "{}"))
        syllables = json.loads(params.get("pinyin_syllables", "{}"))
        return cls(
            plan=ChunkPlan(
                int(params["first_chunk_chars"]),
                int(params["chunk_chars"]),
                int(params.get("chunk_growth", "0")),
            ),
            chunks_in_flight=int(params["chunks_in_flight"]),
            voices=voices,
            limits={
                v.name: ChunkLimits.from_json(json.dumps(v.chunk_limits))
                for v in voices
                if v.kind == CHUNKS_KIND
            },
            threads=int(params["bls_threads"]),
            phonemes=phonemes,
            syllables=syllables,
            lexicons=voice_lexicons(
                [v for v in voices if phonemes.get(v.name) != "" or v.name in syllables],
                [Lexicon.from_json(x) for x in json.loads(params.get("lexicons", "[]"))],
            ),
        )


def voice_lexicons(voices: list[VoiceInfo], lexicons: list[Lexicon]) -> Mapping[str, Lexicon]:
    """Each voice's entries: all of its language's lexicons (a later file's entry wins;
    Mandarin ones give pinyin). ``voices``: those that take pronunciations."""
    out = {}
    for voice in voices:
        serving = [x for x in lexicons if x.serves(voice.language)]
        if serving:
            out[voice.name] = Lexicon(voice.language, {k: v for x in serving for k, v in x.entries.items()})
    return MappingProxyType(out)


def read_request(
    request: Any, settings: LongTextSettings, request_id: str, first_scale: float = 1.0
) -> LongTextRequest:
    """TEXT -> the chunks to say, each with something to pronounce; everything checked
    before any chunk runs (a text with nothing to say: :class:`NothingToSay`).
    ``first_scale``: the first chunk that much shorter (streams in a burst)."""
    text = read_text(request, MAX_LONG_TEXT_CHARS)  # private-use characters (marks) taken out
    options = read_options(request, settings.speakers)
    voice = settings.voice(options.voice)
    limits = settings.limits[voice.name]
    refuse_clip(request, voice.name)
    voice_mix(options, voice.speakers, voice.mixes, voice.name)  # checked before any chunk runs
    given = read_lexicon(request)  # this request's entries first: they win over the voice's
    lexicons = [
        None
        if given is None
        else parse_request_lexicon(
            given,
            voice.language,
            voice.name,
            settings.phonemes.get(voice.name),
            settings.syllables.get(voice.name),
        ),
        settings.lexicons.get(voice.name),
    ]

    def says_something(piece: str) -> bool:
        return pronounceable(piece, voice.tokens)

    if options.timestamps:
        check_timestamps(voice.name, voice.timestamps)
    normalized = normalizer(voice.language) if options.normalize else (lambda t: t)

    def normalize(piece: str) -> str:
        return apply_lexicons(normalized(piece), lexicons)

    shape: ChunkShape | None = None
    if ssml.is_ssml(text, options.text_format):
        alphabet = (
            "x-pinyin"
            if voice.name in settings.syllables
            else "ipa"
            if settings.phonemes.get(voice.name)
            else ""
        )
        document = ssml.read(text, normalize, not is_chinese(voice.language), options.speed or 1.0, alphabet)
        speed = options.speed or 1.0

        def plan_at(rate: float) -> ChunkPlan:
            scale = chars_scale(voice) * chunk_scale(limits, speed * rate, options.noise_w)
            return settings.plan.scaled(scale)

        chunks, shape = ssml_chunks(document, plan_at, speed, says_something, first_scale)
        written = document.written
    else:
        spoken = normalize(text)
        if not says_something(spoken):
            raise NothingToSay()
        plan = settings.plan.scaled(chars_scale(voice) * chunk_scale(limits, options.speed, options.noise_w))
        plan = plan.first_shorter(first_scale)
        chunks = [chunk for chunk in split_text(spoken, plan) if says_something(chunk)]
        written = text
    if not chunks:
        raise NothingToSay()
    for chunk in chunks:  # given pronunciations: refused before any chunk runs
        if voice.name in settings.syllables:
            check_pinyin(chunk, settings.syllables[voice.name], voice.name)
        elif voice.name in settings.phonemes:
            check_pronunciations(chunk, settings.phonemes[voice.name], voice.name)
    extras = [
        t for name in CHUNK_OPTIONS if (t := pb_utils.get_input_tensor_by_name(request, name)) is not None
    ]
    extras.append(pb_utils.Tensor("NORMALIZE", np.array([[False]], dtype=np.bool_)))
    if options.timestamps:
        extras.append(pb_utils.Tensor("TIMESTAMPS", np.array([[True]], dtype=np.bool_)))

    def audio_s(count: int) -> float:
        speeds = shape.speeds if shape is not None else [options.speed] * len(chunks)
        said = sum(
            limits.audio_seconds(len(t), speed, options.noise_w)
            for t, speed in zip(chunks[:count], speeds[:count], strict=True)
        )
        silence = 0.0 if shape is None else shape.lead_s + sum(shape.pauses_s[:count])
        return said + silence

    silence = 0.0 if shape is None else shape.lead_s + sum(shape.pauses_s)
    audio = audio_s(len(chunks))
    check_audio(audio - silence, silence, len(text))  # before any chunk runs

    return LongTextRequest(
        request_id,
        chunks,
        extras,
        voice.model,
        voice.name,
        len(text),
        says_something,
        caller=read_caller(request),
        deadline_us=wait_deadline_us(request),
        audio_s=audio,
        first_audio_s=audio_s(1),
        written=written if options.timestamps else None,
        chinese=is_chinese(voice.language),
        shape=shape,
    )


CALLER_PARAMETER = "caller"  # request parameter naming who sends it (admission's shares)
MAX_CALLER_CHARS = 64


def read_caller(request: Any) -> str:
    """The request's ``caller`` parameter ("" when none): a string, cut to 64 characters."""
    caller = internal.request_parameters(request).get(CALLER_PARAMETER)
    return caller[:MAX_CALLER_CHARS] if isinstance(caller, str) else ""


MAX_WAIT_PARAMETER = "max_wait_ms"  # request parameter: how long it may wait for admission


def wait_deadline_us(request: Any) -> int:
    """How long the request may wait to be admitted, in microseconds (0: it does not say):
    its ``max_wait_ms`` parameter, else Triton's request ``timeout`` (the whole request's
    deadline: a wait past it would be cut anyway). A ``max_wait_ms`` that is not a
    positive whole number of milliseconds is the caller's error."""
    given = internal.request_parameters(request).get(MAX_WAIT_PARAMETER)
    if given is None:
        return int(request.timeout())
    try:
        milliseconds = int(given) if not isinstance(given, bool) else -1
    except (TypeError, ValueError):
        milliseconds = -1
    if milliseconds <= 0:
        raise InvalidRequest(
            f"parameter {MAX_WAIT_PARAMETER} must be a positive whole number of milliseconds, got {given!r}"
        )
    return milliseconds * 1000


class Audio(NamedTuple):
    """A chunk's audio, and with TIMESTAMPS the words its ensemble timed (the chunk's
    own words) with [start, end] seconds from the chunk's start."""

    samples: npt.NDArray[np.float32]
    rate: int
    words: list[str] | None = None
    times: npt.NDArray[np.float32] | None = None


def timed(names: list[str]) -> bool:
    """Whether a chunk's inputs ask for word timestamps."""
    return "TIMESTAMPS" in names


def chunk_words(
    words: npt.NDArray[Any], times: npt.NDArray[Any]
) -> tuple[list[str], npt.NDArray[np.float32]]:
    """WORDS and WORD_TIMES of a chunk's answer as a list and [n, 2]."""
    decoded = [w.decode("utf-8") if isinstance(w, bytes) else str(w) for w in words.reshape(-1)]
    return decoded, times.reshape(-1, 2).astype(np.float32, copy=False)


# How a chunk reaches its ensemble: (model, text, extras, chunk id) -> audio, or ChunkFailed.
ChunkSender = Callable[[str, str, list[Any], str], Audio]


def send_by_bls(model: str, text: str, extras: list[Any], chunk_id: str) -> Audio:
    """One chunk through the voice's ensemble, a blocking BLS call (default priority)."""
    inputs = [pb_utils.Tensor("TEXT", np.array([[text.encode("utf-8")]], dtype=np.object_)), *extras]
    with_words = timed([t.name() for t in extras])
    response = pb_utils.InferenceRequest(
        model_name=model,
        requested_output_names=["AUDIO", "SAMPLE_RATE", *(["WORDS", "WORD_TIMES"] if with_words else [])],
        inputs=inputs,
        request_id=chunk_id,
        parameters=internal.parameters(),  # what the stages answer (triton_tts/runtime/internal.py)
    ).exec()
    if response.has_error():
        error = response.error()
        raise ChunkFailed(error.message(), error.code() if hasattr(error, "code") else None)
    audio = pb_utils.get_output_tensor_by_name(response, "AUDIO").as_numpy().reshape(-1)
    rate = int(pb_utils.get_output_tensor_by_name(response, "SAMPLE_RATE").as_numpy().reshape(-1)[0])
    if not with_words:
        return Audio(audio.astype(np.float32, copy=False), rate)
    words, times = chunk_words(
        pb_utils.get_output_tensor_by_name(response, "WORDS").as_numpy(),
        pb_utils.get_output_tensor_by_name(response, "WORD_TIMES").as_numpy(),
    )
    return Audio(audio.astype(np.float32, copy=False), rate, words, times)


class PrioritySender:
    """Chunks sent with a Triton priority through this server's own gRPC endpoint
    (:mod:`triton_tts.runtime.loopback`), so they overtake what the stages have queued. When the
    endpoint cannot be reached, chunks go by BLS (no priority) for :data:`RETRY_AFTER_S`,
    and the model's log says why."""

    RETRY_AFTER_S = 60.0

    def __init__(self, loopback: Loopback, model_name: str) -> None:
        self.loopback = loopback
        self.model_name = model_name
        self._off_until = 0.0

    def at(self, priority: int) -> ChunkSender:
        """This sender with ``priority`` (a level of model_configs' priorities)."""
        return lambda model, text, extras, chunk_id: self(model, text, extras, chunk_id, priority)

    def __call__(
        self, model: str, text: str, extras: list[Any], chunk_id: str, priority: int | None = None
    ) -> Audio:
        if time.monotonic() >= self._off_until:
            options = [(t.name(), t.as_numpy()) for t in extras]
            try:
                audio, rate, words, times = self.loopback.synthesize(model, text, options, chunk_id, priority)
                if words is None or times is None:
                    return Audio(audio, rate)
                return Audio(audio, rate, *chunk_words(words, times))
            except LoopbackFailed as err:  # the server's answer: as by BLS
                code = getattr(pb_utils.TritonError, err.error.code_name, pb_utils.TritonError.INTERNAL)
                raise ChunkFailed(err.error.message(), code) from err
            except Unreachable as err:
                self._off_until = time.monotonic() + self.RETRY_AFTER_S
                pb_utils.Logger.log_warn(
                    f"{self.model_name}: chunks go without priority for {self.RETRY_AFTER_S:.0f} s, "
                    f"this server's gRPC endpoint did not answer: {err}"
                )
        return send_by_bls(model, text, extras, chunk_id)


def synthesize_chunk(
    model: str,
    text: str,
    extras: list[Any],
    chunk_id: str,
    says_something: Callable[[str], bool] = pronounceable,
    send: ChunkSender = send_by_bls,
) -> Audio:
    """One chunk through the voice's ensemble (blocking). A chunk preprocess refuses as
    over the voice's budget (limits.TOO_LONG: dense text, slow SPEED, noisy NOISE_W) is
    said in halves, joined, until the pieces fit; nothing long fails on it. A piece with
    nothing to pronounce (a cut can leave one of punctuation) is silence."""
    if not says_something(text):
        if timed([t.name() for t in extras]):
            return Audio(np.zeros(0, dtype=np.float32), 0, [], np.zeros((0, 2), np.float32))
        return Audio(np.zeros(0, dtype=np.float32), 0)
    try:
        return send(model, text, extras, chunk_id)
    except ChunkFailed as err:
        if TOO_LONG in err.message and (pieces := halves(text)):
            said = [
                synthesize_chunk(model, piece, extras, chunk_id, says_something, send) for piece in pieces
            ]
            return _joined(said)
        raise


def _joined(parts: list[Audio]) -> Audio:
    rate = next((part.rate for part in parts if part.rate), 0)  # 0: no piece was said
    spoken = [part for part in parts if part.samples.size]
    joined = [join_edges(part.samples, rate, i, len(spoken)) for i, part in enumerate(spoken)]
    samples = np.concatenate([np.zeros(0, dtype=np.float32), *joined]).astype(np.float32, copy=False)
    if any(part.words is None for part in parts):
        return Audio(samples, rate)
    words: list[str] = []
    times: list[npt.NDArray[np.float32]] = []
    offset = 0
    for part in spoken:  # each piece's words, from the joined audio's start
        assert part.words is not None and part.times is not None
        words.extend(part.words)
        times.append(part.times + np.float32(offset / rate))
        offset += part.samples.size
    return Audio(samples, rate, words, np.concatenate([np.zeros((0, 2), np.float32), *times]))


@dataclass(frozen=True)
class Senders:
    """How a stream's chunks reach the stages: ``at(priority)`` sends with a Triton
    priority by the chunk's deadline (triton_tts.runtime.admission.chunk_priority); None: all by
    BLS, without one (the server's own gRPC endpoint is not known; tts's chunks)."""

    at: Callable[[int], ChunkSender] | None = None

    def for_chunk(self, index: int, pacer: Pacer | None) -> ChunkSender:
        if self.at is None:
            return send_by_bls
        return self.at(chunk_priority(index, pacer.lead() if pacer is not None else 0.0))


TEXTS = Senders()  # tts: every chunk by BLS, at the stages' default priority


def in_order(
    pool: ThreadPoolExecutor,
    request: LongTextRequest,
    window: int,
    cancellation: Cancellation | None = None,
    pacer: Pacer | None = None,
    senders: Senders = TEXTS,
) -> Iterator[tuple[int, Audio]]:
    """Yield (index, joined audio) in reading order, ``window`` chunks in flight.

    Later chunks are synthesised while earlier ones are delivered; the caller has sent a
    chunk when it asks for the next. With a ``pacer`` (streams), a later chunk starts
    only when the audio sent leads playback by less than its lead. Each chunk goes by
    ``senders.for_chunk`` (streams: a priority by its deadline). ``cancellation`` is
    asked before each chunk is waited for: once it says stop, nothing new starts, the
    chunks in flight are left to finish unread, and :class:`RequestCancelled` is raised.
    """
    count = len(request.chunks)
    pending: dict[int, Future[Audio]] = {}
    submitted = 0
    stopped: Callable[[], bool] = cancellation if cancellation is not None else (lambda: False)
    for index in range(count):
        # The first chunk travels alone: the stages run a batch's items one after
        # another, so chunk 0 batched behind the (long) chunk 1 would wait for it.
        limit = 1 if index == 0 else window
        if pacer is not None and submitted < min(count, index + limit):
            pacer.wait(stopped)
        if stopped():
            raise RequestCancelled(
                getattr(cancellation, "reason", None) or Cancellation.CANCELLED, index, count
            )
        while submitted < count and submitted < index + limit:
            chunk_id = f"{request.request_id}/{submitted}"
            pending[submitted] = pool.submit(
                synthesize_chunk,
                request.model,
                request.chunks[submitted],
                request.extras(submitted),
                chunk_id,
                request.says_something,
                senders.for_chunk(submitted, pacer),
            )
            submitted += 1
        said = pending.pop(index).result()
        rate = said.rate
        joined = request.shaped(index, join_edges(said.samples, rate, index, count), rate)
        yield index, said._replace(samples=joined)
        if pacer is not None and rate:
            pacer.sent(joined.size / rate)


def error_response(errors: RequestErrors, request_id: str, err: Exception) -> Any:
    """The response (logged, triton_tts.contract.errors) for a request that ended in ``err``."""
    if isinstance(err, RequestCancelled):  # a timeout is UNAVAILABLE, as Triton's own queue says
        code = pb_utils.TritonError.UNAVAILABLE if err.timed_out else pb_utils.TritonError.CANCELLED
        return errors.response(request_id, str(err), code)
    if isinstance(err, ChunkFailed):  # keep the chunk's error code (e.g. INVALID_ARG)
        return errors.response(request_id, err.message, err.code)
    if isinstance(err, InvalidRequest):
        return errors.invalid(request_id, str(err))
    if isinstance(err, Refused):
        return errors.response(request_id, str(err), pb_utils.TritonError.UNAVAILABLE)
    return errors.response(request_id, f"synthesis failed: {err}")


def outcome(err: Exception) -> str:
    """The metrics' outcome (triton_tts.runtime.metrics.OUTCOMES) of a request that ended in ``err``."""
    if isinstance(err, Refused):
        return "busy"
    if isinstance(err, RequestCancelled):
        return "cancelled"
    if isinstance(err, InvalidRequest):
        return "invalid"
    if isinstance(err, ChunkFailed) and err.code is not None:
        return {
            pb_utils.TritonError.INVALID_ARG: "invalid",
            pb_utils.TritonError.UNAVAILABLE: "busy",
            pb_utils.TritonError.CANCELLED: "cancelled",
        }.get(err.code, "failed")
    return "failed"


def chunk_times(times: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32]:
    """A chunk's WORD_TIMES, [0, 2] when it had none."""
    return np.zeros((0, 2), np.float32) if times is None else times


def word_tensors(words: list[Word]) -> list[Any]:
    """WORDS [1, n] and WORD_TIMES [1, n, 2] (seconds from the start of the audio)."""
    times = np.array([[w.start, w.end] for w in words], dtype=np.float32).reshape(-1, 2)
    return [
        pb_utils.Tensor("WORDS", np.array([[w.text.encode("utf-8") for w in words]], dtype=np.object_)),
        pb_utils.Tensor("WORD_TIMES", times[None]),
    ]
