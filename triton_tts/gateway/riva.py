"""Riva's TTS API on its own gRPC port: ``nvidia.riva.tts.RivaSpeechSynthesis``, as the
protos of ``nvidia-riva-client`` define it (their generated modules, used as they are),
so Riva's own clients and the voice-agent frameworks' NVIDIA plugins (Pipecat's
``NvidiaTTSService``, LiveKit's ``nvidia.TTS``) speak to this server unchanged.

- ``Synthesize``: one text, the whole audio in one answer.
- ``SynthesizeOnline`` (bidirectional): each request on the stream is one text, spoken in
  order, its audio answered chunk by chunk as the server makes it; the caller's
  half-close ends the call once the last text is spoken. A text with nothing to pronounce
  (a piece such as "..." of a text sent in pieces) is answered with no audio.
- ``GetRivaSynthesisConfig``: one ``Config`` per served voice (``model_name`` the voice;
  ``language_code``, ``voice_name``, ``subvoices`` and ``sample_rate_hz`` parameters).

A request is the OpenAI door's synthesis with Riva's fields: ``text`` (plain or SSML),
``voice_name`` (a served voice, ``voice.speaker``, an alias; see :func:`resolve_voice`),
``language_code``, ``encoding`` and ``sample_rate_hz`` (triton_tts.gateway.riva_audio),
``custom_dictionary`` (a per-request lexicon), ``zero_shot_data`` (a clip an XTTS voice
clones), ``enable_word_time_offsets`` (``meta.words``, milliseconds from the start of
the request's audio), ``custom_configuration`` (``speed`` only), ``id`` echoed.

It runs in the gateway's process and event loop, over the gateway's Triton client: the
same keys (``authorization: Bearer``; NVIDIA's cloud metadata such as ``function-id`` is
ignored; the voice list needs none, as the NVIDIA plugins ask for it without), the same
admission per caller, the same metrics (``api="riva"``). Errors are gRPC statuses: the
caller's mistakes INVALID_ARGUMENT (NOT_FOUND: no such voice in
``GetRivaSynthesisConfig``), a missing or wrong key UNAUTHENTICATED, a busy server
RESOURCE_EXHAUSTED (with ``retry-after`` seconds in the trailing metadata and the
message), an unreachable Triton UNAVAILABLE, no answer in time DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import grpc
import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from riva.client.proto import riva_tts_pb2 as rtts
from riva.client.proto import riva_tts_pb2_grpc as rtts_grpc

from triton_tts.client import AudioChunk, TTSError, VoiceInfo, WordTime
from triton_tts.client.voices import XTTS_KIND, split_voice_name
from triton_tts.contract.validation import MAX_SPEED, MIN_SPEED
from triton_tts.gateway import riva_audio
from triton_tts.gateway.access import authorized, caller_of, key_of
from triton_tts.gateway.errors import ApiError, from_tts_error, invalid
from triton_tts.gateway.metrics import CANCELLED, OK, GatewayMetrics
from triton_tts.gateway.schemas import MAX_WAIT_S, SpeechRequest
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.gateway.voices import Voices
from triton_tts.text.speaks import pronounceable


class Gateway(Protocol):
    """What the door uses of the gateway (triton_tts.gateway.app.Gateway)."""

    settings: GatewaySettings
    metrics: GatewayMetrics

    @property
    def voices(self) -> Voices: ...

    async def open_stream(
        self, request: SpeechRequest, **options: Any
    ) -> tuple[AudioChunk, AsyncGenerator[AudioChunk, None]]: ...


log = logging.getLogger(__name__)

API = "riva"  # the gateway metrics' api label
# A custom dictionary: Riva's "grapheme  phoneme" pairs (two spaces between), comma-separated.
MAX_DICTIONARY_CHARS = 16_384
# NVIDIA's voice names ("Magpie-Multilingual.EN-US.Aria"): model, language, voice.
NVIDIA_VOICE = re.compile(r"[^.]+\.([A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*)\.[^.]+")
CHINESE = ("zh", "cmn")  # one Mandarin, as the voices' lexicons see it


def language_tag(language: str) -> str:
    """A voice's language as BCP-47 writes it, as Riva's clients expect ("en-us" -> "en-US";
    Mandarin "cmn"/"zh" -> "zh-CN")."""
    parts = re.split(r"[-_]", language.strip())
    primary = parts[0].lower()
    if primary in CHINESE and len(parts) == 1:
        return "zh-CN"
    return "-".join([primary, *(p.upper() if len(p) == 2 else p for p in parts[1:])])


def same_language(asked: str, voice: VoiceInfo) -> bool:
    """Whether a request's language_code fits a voice: the primary language decides (en-GB
    is an English voice's language too; an XTTS voice speaks several)."""
    if voice.kind == XTTS_KIND or not asked.strip():
        return True
    want, have = (re.split(r"[-_]", x.strip())[0].lower() for x in (asked, voice.language))
    return want == have or (want in CHINESE and have in CHINESE)


def xtts_language(language_code: str) -> str | None:
    """A language_code as XTTS names its languages ("de-DE" -> "de", "zh-CN" -> "zh-cn");
    None for none (the voice's first). A language the voice lacks is refused by the server."""
    primary = re.split(r"[-_]", language_code.strip())[0].lower()
    if not primary:
        return None
    return "zh-cn" if primary in CHINESE else primary


def parse_dictionary(text: str) -> dict[str, str]:
    """Riva's ``custom_dictionary`` -> {written form: phonemes} (ValueError naming the entry)."""
    entries: dict[str, str] = {}
    for number, item in enumerate(text.split(","), 1):
        if not item.strip():
            continue
        grapheme, sep, phonemes = item.strip().partition("  ")
        if not sep:
            grapheme, sep, phonemes = item.strip().partition("\t")
        if not sep or not grapheme.strip() or not phonemes.strip():
            raise ValueError(
                f"custom_dictionary entry {number} ({item.strip()!r}) is not 'grapheme  phoneme' "
                "(two spaces between; entries separated by commas)"
            )
        entries[grapheme.strip()] = phonemes.strip()
    return entries


class RivaFields(BaseModel):
    """A SynthesizeSpeechRequest's values, checked (the message's types are the proto's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    text: Annotated[str, StringConstraints(min_length=1)]
    language_code: Annotated[
        str, StringConstraints(max_length=35, pattern=r"^([A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*)?$")
    ]
    sample_rate_hz: Annotated[int, Field(ge=0)]
    voice_name: Annotated[str, StringConstraints(max_length=256)]
    custom_dictionary: Annotated[str, StringConstraints(max_length=MAX_DICTIONARY_CHARS)]
    speed: Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED, allow_inf_nan=False)] = 1.0

    @field_validator("text")
    @classmethod
    def _spoken(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is empty: nothing to say")
        return text


@dataclass(frozen=True)
class RivaCall:
    """One request, parsed: what to say, how, and how to answer."""

    speech: SpeechRequest
    encoding: int
    rate: int  # of the answer
    voice_rate: int
    words: bool
    lexicon: dict[str, str] | None
    prompt: tuple[npt.NDArray[np.float32], int] | None
    text: str
    request_id: str
    language: str | None = None  # an XTTS voice's LANGUAGE (xtts_language)
    speaks: bool = True  # False: nothing the voice can pronounce ("...", "* * *")


async def resolve_voice(
    gateway: Gateway, name: str, language_code: str
) -> tuple[str, int | None, VoiceInfo, str | None]:
    """A Riva voice_name -> (voice as the server names it, speaker id, the voice).

    Empty: the first served voice of ``language_code`` (Riva's rule). Else the gateway's
    names (a voice, ``voice:speaker``, an alias, OpenAI's voice names) and Riva's
    ``voice.speaker`` for a speaker of a voice; an NVIDIA voice name no alias maps
    ("Magpie-Multilingual.EN-US.Aria") is the first served voice of its language, as
    OpenAI's voice names are the default voice."""
    served = await gateway.voices.served()
    by_name = {v.name: v for v in served}
    wanted = name.strip()
    aliases = await gateway.voices.aliases()
    if not wanted or (wanted not in by_name and wanted not in aliases and ":" not in wanted):
        base, dot, sub = wanted.rpartition(".")
        if dot and base in by_name:
            wanted = f"{base}:{sub}"
        elif not wanted or (nvidia := NVIDIA_VOICE.fullmatch(wanted)):
            language = nvidia.group(1) if wanted and nvidia else language_code
            voice = next((v for v in served if v.kind != XTTS_KIND and same_language(language, v)), None)
            if voice is None:
                languages = ", ".join(sorted({language_tag(v.language) for v in served}))
                message = f"no served voice speaks language_code {language!r}; languages: {languages}"
                raise invalid(message, "language_code")
            return voice.name, None, voice, None
    voice_name, speaker, mix = await gateway.voices.resolve(wanted)
    voice = by_name[split_voice_name(voice_name)[0]]
    if not same_language(language_code, voice):
        raise invalid(
            f"voice {voice.name!r} speaks {language_tag(voice.language)}, "
            f"not language_code {language_code!r}",
            "language_code",
        )
    return voice_name, speaker, voice, mix


def status_of(err: ApiError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """An error as the HTTP side answers it -> the gRPC status, message and trailing metadata."""
    trailers: tuple[tuple[str, str], ...] = ()
    if err.code == "server_busy":
        retry = err.headers.get("Retry-After", "1")
        return (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{err.message}; retry after {retry} s",
            (("retry-after", retry),),
        )
    codes = {
        401: grpc.StatusCode.UNAUTHENTICATED,
        403: grpc.StatusCode.PERMISSION_DENIED,
        404: grpc.StatusCode.NOT_FOUND,
        408: grpc.StatusCode.DEADLINE_EXCEEDED,
        502: grpc.StatusCode.UNAVAILABLE,
        503: grpc.StatusCode.UNAVAILABLE,
        504: grpc.StatusCode.DEADLINE_EXCEEDED,
    }
    code = codes.get(err.status)
    if code is None:
        code = grpc.StatusCode.INVALID_ARGUMENT if err.status < 500 else grpc.StatusCode.INTERNAL
    param = f" ({err.param})" if err.param and err.param not in err.message else ""
    return code, err.message + param, trailers


class _Peer:
    """A gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000") as caller_of reads peers."""

    def __init__(self, peer: str | None) -> None:
        address = (peer or "").partition(":")[2]
        self.host = address.rpartition(":")[0].strip("[]") or None


class RivaSpeech(rtts_grpc.RivaSpeechSynthesisServicer):  # type: ignore[misc]  # generated, untyped
    """The service, over the gateway's Triton client and voices."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings: GatewaySettings = gateway.settings

    # -- the three methods -------------------------------------------------------------

    async def GetRivaSynthesisConfig(  # noqa: N802 (the proto's name)
        self, request: rtts.RivaSynthesisConfigRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> rtts.RivaSynthesisConfigResponse:
        # No key needed, a wrong one refused: the NVIDIA plugins ask for it without their
        # metadata on a plaintext port (riva.client adds it per call only to syntheses),
        # and it tells only what GET /v1/audio/voices would (names, languages, rates).
        await self._guard(context, anonymous=True)
        try:
            served = await self.gateway.voices.served()
        except ApiError as err:
            await self._abort(context, err)
        configs = [self._config(v) for v in served if not request.model_name or v.name == request.model_name]
        if not configs:
            names = ", ".join(v.name for v in served)
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no model {request.model_name!r}; served: {names}"
            )
        return rtts.RivaSynthesisConfigResponse(model_config=configs)

    async def Synthesize(  # noqa: N802
        self, request: rtts.SynthesizeSpeechRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> rtts.SynthesizeSpeechResponse:
        caller = await self._guard(context)
        synthesis = self.gateway.metrics.synthesis(API)
        outcome = CANCELLED
        try:
            call = await self._parse(request, caller, context)
            synthesis.format = riva_audio.encoding_name(call.encoding).lower()
            encoder = riva_audio.encoder(call.encoding, call.voice_rate, call.rate)
            audio, words, seconds = bytearray(), list[WordTime](), 0.0
            async for chunk in self._chunks(call):
                audio += encoder.encode(chunk.audio)
                words += chunk.words
                seconds += len(chunk.audio) / chunk.sample_rate
            audio += encoder.finish()
            synthesis.audio_sent(seconds)
            outcome = OK
            return self._response(call, bytes(audio), words)
        except ApiError as err:
            outcome = synthesis.error_code = err.code or "error"
            await self._abort(context, err)
            raise AssertionError("unreachable") from None  # abort raises
        finally:
            synthesis.end(outcome)

    async def SynthesizeOnline(  # noqa: N802
        self,
        request_iterator: AsyncIterator[rtts.SynthesizeSpeechRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[rtts.SynthesizeSpeechResponse]:
        caller = await self._guard(context)
        async for request in request_iterator:
            synthesis = self.gateway.metrics.synthesis(API)
            outcome = CANCELLED
            try:
                call = await self._parse(request, caller, context)
                if not call.speaks:  # a piece of a longer text ("..."): nothing to say, the call goes on
                    outcome = OK
                    continue
                synthesis.format = riva_audio.encoding_name(call.encoding).lower()
                encoder = riva_audio.encoder(call.encoding, call.voice_rate, call.rate)
                async for chunk in self._chunks(call):
                    data = encoder.encode(chunk.audio)
                    synthesis.audio_sent(len(chunk.audio) / chunk.sample_rate)
                    if data or chunk.words:
                        yield self._response(call, data, chunk.words)
                rest = encoder.finish()
                if rest:
                    yield self._response(call, rest, ())
                outcome = OK
            except ApiError as err:
                outcome = synthesis.error_code = err.code or "error"
                await self._abort(context, err)
            finally:
                synthesis.end(outcome)

    # -- the parts ---------------------------------------------------------------------

    async def _guard(self, context: grpc.aio.ServicerContext[Any, Any], anonymous: bool = False) -> str:
        """The key check (``anonymous``: a call without one passes too); the caller's name
        for admission."""
        metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        key = key_of(metadata, {})
        if not authorized(self.settings, key) and not (anonymous and key is None):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "a valid API key is required: send the metadata 'authorization: Bearer KEY'",
            )
        return caller_of(self.settings, key, _Peer(context.peer()))

    async def _abort(self, context: grpc.aio.ServicerContext[Any, Any], err: ApiError) -> None:
        code, message, trailers = status_of(err)
        if trailers:
            context.set_trailing_metadata(trailers)
        await context.abort(code, message)

    def _config(self, voice: VoiceInfo) -> rtts.RivaSynthesisConfigResponse.Config:
        parameters = {
            "language_code": language_tag(voice.language),
            "voice_name": voice.name,
            "sample_rate_hz": str(voice.sample_rate),
            "type": "online",  # SynthesizeOnline streams it
        }
        if voice.speakers:
            ordered = sorted(voice.speakers.items(), key=lambda item: item[1])
            parameters["subvoices"] = ",".join(f"{name}:{sid}" for name, sid in ordered)
        return rtts.RivaSynthesisConfigResponse.Config(model_name=voice.name, parameters=parameters)

    async def _parse(
        self, request: rtts.SynthesizeSpeechRequest, caller: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> RivaCall:
        """The request checked and resolved (ApiError 400 naming the field at fault)."""
        try:
            options = dict(request.custom_configuration)
            unknown = sorted(set(options) - {"speed"})
            if unknown:
                raise invalid(
                    f"custom_configuration {', '.join(map(repr, unknown))} is not a setting here; "
                    "it takes 'speed'",
                    "custom_configuration",
                )
            fields = RivaFields(
                text=request.text,
                language_code=request.language_code,
                sample_rate_hz=request.sample_rate_hz,
                voice_name=request.voice_name,
                custom_dictionary=request.custom_dictionary,
                **({"speed": options["speed"]} if "speed" in options else {}),
            )
        except ValidationError as err:
            first = err.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "request"
            raise invalid(f"{field}: {first['msg']}", field) from None
        if len(fields.text) > self.settings.max_input_chars:
            raise invalid(
                f"text has {len(fields.text)} characters; at most {self.settings.max_input_chars}", "text"
            )
        voice, speaker, info, mix = await resolve_voice(self.gateway, fields.voice_name, fields.language_code)
        try:
            rate = riva_audio.output_rate(request.encoding, fields.sample_rate_hz, info.sample_rate)
            riva_audio.encoder(request.encoding, info.sample_rate, rate)  # refused by name here
            lexicon = parse_dictionary(fields.custom_dictionary) or None
        except ValueError as err:
            raise invalid(str(err), "encoding" if "encoding" in str(err) else "sample_rate_hz") from None
        prompt = None
        if request.HasField("zero_shot_data") and request.zero_shot_data.audio_prompt:
            shot = request.zero_shot_data
            try:
                prompt = riva_audio.decode_prompt(shot.audio_prompt, shot.encoding, shot.sample_rate_hz)
            except ValueError as err:
                raise invalid(str(err), "zero_shot_data") from None
        remaining = context.time_remaining()
        speech = SpeechRequest(
            fields.text,
            voice,
            speaker,
            fields.speed,
            response_format="pcm",
            caller=caller,
            timestamps=request.enable_word_time_offsets,
            max_wait_s=min(remaining, MAX_WAIT_S) if remaining is not None and remaining > 0 else None,
            voice_mix=mix,
        )
        return RivaCall(
            speech=speech,
            encoding=request.encoding,
            rate=rate,
            voice_rate=info.sample_rate,
            words=request.enable_word_time_offsets,
            lexicon=lexicon,
            prompt=prompt,
            text=fields.text,
            request_id=request.id.value if request.HasField("id") else "",
            language=xtts_language(fields.language_code) if info.kind == XTTS_KIND else None,
            speaks=info.kind == XTTS_KIND or pronounceable(fields.text, info.tokens),
        )

    async def _chunks(self, call: RivaCall) -> AsyncIterator[AudioChunk]:
        """The call's audio as the server makes it (ApiError for a refusal or a failure)."""
        extra: dict[str, Any] = {}
        if call.lexicon:
            extra["lexicon"] = call.lexicon
        if call.prompt is not None:
            extra["reference_audio"], extra["reference_sample_rate"] = call.prompt
        if call.language:
            extra["language"] = call.language
        first, rest = await self.gateway.open_stream(call.speech, **extra)
        async with aclosing(rest):
            yield first
            try:
                async for chunk in rest:
                    yield chunk
            except TTSError as err:
                raise from_tts_error(err, self.settings) from None

    def _response(self, call: RivaCall, audio: bytes, words: Iterable[Any]) -> rtts.SynthesizeSpeechResponse:
        response = rtts.SynthesizeSpeechResponse(audio=audio)
        response.meta.text = call.text
        if call.words:
            response.meta.words.extend(
                rtts.WordTiming(word=w.word, start_time=round(w.start * 1000), end_time=round(w.end * 1000))
                for w in words
            )
        if call.request_id:
            response.id.value = call.request_id
        return response


@dataclass
class RivaServer:
    """The Riva door's gRPC server, started and stopped with the gateway's app."""

    server: grpc.aio.Server
    port: int

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)


async def start(gateway: Gateway) -> RivaServer | None:
    """Listen on the settings' Riva port (None when it is 0); TLS with a certificate."""
    settings = gateway.settings
    if not settings.riva_port:
        return None
    # A zero-shot clip may be as large as an upload to the HTTP side, plus the message.
    limit = settings.max_upload_bytes + settings.max_body_bytes
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)],
    )
    rtts_grpc.add_RivaSpeechSynthesisServicer_to_server(RivaSpeech(gateway), server)
    address = (
        f"[{settings.riva_host}]:{settings.riva_port}"
        if ":" in settings.riva_host
        else (f"{settings.riva_host}:{settings.riva_port}")
    )
    if settings.riva_tls_cert:
        assert settings.riva_tls_key, "a certificate needs its key (command.settings_from checks it)"
        pair = (Path(settings.riva_tls_key).read_bytes(), Path(settings.riva_tls_cert).read_bytes())
        port = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"the Riva door cannot listen on {address}")
    await server.start()
    scheme = "TLS" if settings.riva_tls_cert else "plaintext"
    log.info("gateway: Riva's TTS API (gRPC, %s) on %s", scheme, address)
    return RivaServer(server, port)


__all__ = ["RivaServer", "RivaSpeech", "language_tag", "parse_dictionary", "resolve_voice", "start"]
