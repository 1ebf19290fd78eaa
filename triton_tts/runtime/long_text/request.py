"""Reading a long-text request, once, before any chunk runs: TEXT checked, the voice and
options chosen (:mod:`triton_tts.runtime.request_options`), lexicons applied, the text
normalised (or its SSML read) and planned into chunks (:mod:`triton_tts.runtime.chunking`),
each with something to pronounce, the audio predicted for admission; the request's
``caller`` and ``max_wait_ms`` parameters. What ``tts`` and ``tts_stream`` read once in
``initialize`` is :class:`LongTextSettings`. Only importable inside Triton's Python backend."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.client.voices import CHUNKS_KIND, VoiceInfo
from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.validation import (
    MAX_LONG_TEXT_CHARS,
    InvalidRequest,
    check_timestamps,
    nothing_to_say,
)
from triton_tts.runtime import internal
from triton_tts.runtime.chunking import ChunkPlan, split_text
from triton_tts.runtime.limits import ChunkLimits, check_audio, chunk_scale
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

# Inputs sent on with every chunk as the client sent them (VOICE chose the ensemble).
CHUNK_OPTIONS = ("SPEED", "SPEAKER_ID", "NOISE_SCALE", "NOISE_W", "VOICE_MIX")


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
    before any chunk runs (a text with nothing to say: ``nothing_to_say``).
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
            raise nothing_to_say()
        plan = settings.plan.scaled(chars_scale(voice) * chunk_scale(limits, options.speed, options.noise_w))
        plan = plan.first_shorter(first_scale)
        chunks = [chunk for chunk in split_text(spoken, plan) if says_something(chunk)]
        written = text
    if not chunks:
        raise nothing_to_say()
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
