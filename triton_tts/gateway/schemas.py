"""The gateway's edge: every HTTP body and WebSocket message is parsed into one of these
pydantic models, straight from its bytes (pydantic's own JSON parser: no recursion past
its depth limit, no lone surrogates, no NaN), or refused as an :class:`ApiError` 400 that
names the field. Everything behind the edge gets valid, typed values.

Each field says what it wants in its ``description``; the refusal quotes it ("'speed'
must be a number from 0.25 to 4, got \"fast\""). The codes are OpenAI's where it has one
(``invalid_value``, ``invalid_type``, ``string_above_max_length``, ...). The ranges are
the server's, imported from triton_tts/contract/validation.py (SPEED is OpenAI's range too), so the
gateway refuses what Triton would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from triton_tts.contract.validation import MAX_LONG_TEXT_CHARS, MAX_NOISE, MAX_SPEED, MIN_SPEED
from triton_tts.gateway import audio, sse
from triton_tts.gateway.errors import ApiError, invalid

# The ids OpenAI's clients send; all name the one served ensemble (its voices differ).
MODEL_IDS = ("triton-tts", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
MAX_VOICE_CHARS = 128  # a voice name, alias or voice:speaker; far past any served one
WS_FORMATS = ("s16le", "f32le")
SHOWN_CHARS = 40  # of a refused value, quoted in the message


def shown(value: Any) -> str:
    """A refused value as JSON, short and ASCII (whatever it is)."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):  # an int past Python's digit limit, say
        text = type(value).__name__
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _or_default(default: Any) -> Any:
    """null (and for strings "") mean the default, as OpenAI's SDKs send them."""

    def replace(value: Any) -> Any:
        return default if value is None or (isinstance(value, str) and value == "") else value

    return BeforeValidator(replace)


def _within(low: float, high: float) -> AfterValidator:
    def check(value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not low <= value <= high:
            raise PydanticCustomError(
                "invalid_value",
                "'{field}' {value} is outside [{low}, {high}]",
                {"field": info.field_name, "value": f"{value:g}", "low": f"{low:g}", "high": f"{high:g}"},
            )
        return value

    return AfterValidator(check)


def _text(value: str, info: ValidationInfo) -> str:
    # --max-input-chars, never past what the server's tts models take (they would refuse).
    configured = (info.context or {}).get("max_input_chars")
    limit = MAX_LONG_TEXT_CHARS if configured is None else min(configured, MAX_LONG_TEXT_CHARS)
    if not value.strip():
        raise PydanticCustomError("empty_input", "'input' is empty: give some text to speak")
    if len(value) > limit:
        raise PydanticCustomError(
            "string_above_max_length",
            "'input' has {length} characters; this server takes at most {limit}",
            {"length": len(value), "limit": limit},
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # a str built in Python; JSON text cannot carry one
        raise PydanticCustomError(
            "invalid_value", "'input' is not valid Unicode (a lone surrogate at {at})", {"at": err.start}
        ) from None
    return value


def _piece(value: str, info: ValidationInfo) -> str:
    """An ``append``'s text: any piece of what is being written (a space, a word, a part of
    one), within --max-input-chars; the stream keeps at most that much unspoken."""
    configured = (info.context or {}).get("max_input_chars")
    limit = MAX_LONG_TEXT_CHARS if configured is None else min(configured, MAX_LONG_TEXT_CHARS)
    if len(value) > limit:
        raise PydanticCustomError(
            "string_above_max_length",
            "'text' has {length} characters; this server takes at most {limit}",
            {"length": len(value), "limit": limit},
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise PydanticCustomError(
            "invalid_value", "'text' is not valid Unicode (a lone surrogate at {at})", {"at": err.start}
        ) from None
    return value


def _model_id(value: str) -> str:
    if value not in MODEL_IDS:
        raise PydanticCustomError(
            "model_not_found",
            "unknown model {model}; this server answers to: {known}",
            {"model": shown(value), "known": ", ".join(MODEL_IDS)},
        )
    return value


def _response_format(value: str) -> str:
    known = ", ".join(audio.CONTENT_TYPES)
    if value in audio.NOT_ENCODABLE:
        raise PydanticCustomError(
            "unsupported_format",
            "response_format {fmt} is not supported here: {why}; use one of {known}",
            {"fmt": shown(value), "why": audio.NOT_ENCODABLE[value], "known": known},
        )
    if value not in audio.CONTENT_TYPES:
        raise PydanticCustomError(
            "invalid_value",
            "unknown response_format {fmt}; use one of {known}",
            {"fmt": shown(value), "known": known},
        )
    return value


def _stream_format(value: str) -> str:
    if value not in sse.STREAM_FORMATS:
        raise PydanticCustomError(
            "invalid_value",
            "unknown stream_format {fmt}; use one of {known}",
            {"fmt": shown(value), "known": ", ".join(sse.STREAM_FORMATS)},
        )
    return value


def _captioned_stream_format(value: str) -> str:
    if value != "audio":
        raise PydanticCustomError(
            "unsupported_format",
            "stream_format {fmt} is not supported by captioned speech: it streams JSON lines "
            "with 'stream': true; leave stream_format out",
            {"fmt": shown(value)},
        )
    return value


Speed = Annotated[
    float,
    _or_default(1.0),
    _within(MIN_SPEED, MAX_SPEED),
    Field(description=f"a number from {MIN_SPEED:g} to {MAX_SPEED:g}"),
]
# Beyond OpenAI's body (its SDK: extra_body): the server's NOISE_SCALE and NOISE_W.
Noise = Annotated[
    float | None,
    _within(0.0, MAX_NOISE),
    Field(description=f"a number from 0 to {MAX_NOISE:g}, or null for the voice's own"),
]


class Voicing(BaseModel):
    """How to speak: what the speech request, ``speak`` and a text stream's ``start`` share."""

    # strict: a number is a JSON number, a string a JSON string (no "1.5" for 1.5, no
    # true for 1); unknown fields are ignored.
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore", frozen=True)

    voice: Annotated[
        str | None,
        Field(
            max_length=MAX_VOICE_CHARS,
            description="a voice name, voice:speaker or alias (GET /v1/audio/voices lists them)",
        ),
    ] = None
    speed: Speed = 1.0
    noise_scale: Noise = None
    noise_w: Noise = None


class _Synthesis(Voicing):
    """What the speech request and the WebSocket's ``speak`` share: the voicing and a text."""

    input: Annotated[str, AfterValidator(_text), Field(description="a string of text to speak")]


# true: each chunk's words with their times (a 'words' message before its audio)
Timestamps = Annotated[bool, _or_default(False), Field(description="true or false")]
# true: JSON lines as the audio is made
Stream = Annotated[bool, _or_default(False), Field(description="true or false")]

PcmFormat = Annotated[
    Literal["s16le", "f32le"], _or_default("s16le"), Field(description=" or ".join(WS_FORMATS))
]


class SpeechBody(_Synthesis):
    """``POST /v1/audio/speech``: OpenAI's body."""

    model: Annotated[str, AfterValidator(_model_id), Field(description=f"one of: {', '.join(MODEL_IDS)}")]
    response_format: Annotated[
        str,
        _or_default("mp3"),
        AfterValidator(_response_format),
        Field(description=f"one of {', '.join(audio.CONTENT_TYPES)}"),
    ] = "mp3"
    stream_format: Annotated[
        str,
        _or_default("audio"),
        AfterValidator(_stream_format),
        Field(description=" or ".join(repr(f) for f in sse.STREAM_FORMATS)),
    ] = "audio"
    # OpenAI's prompt for gpt-4o-mini-tts ("speak cheerfully"). Accepted, so that clients
    # that always send it (LiveKit's plugin, when set) work, and ignored: the voice and its
    # speaker decide how it sounds here, and no served model reads a prompt (docs/api.md).
    instructions: Annotated[str | None, Field(description="a string (accepted and ignored)")] = None


class CaptionedBody(SpeechBody):
    """``POST /v1/audio/speech/captioned``: the speech body, the audio answered as base64
    with every word's time; ``stream``: as JSON lines, chunk by chunk."""

    stream: Stream = False
    stream_format: Annotated[
        str, _or_default("audio"), AfterValidator(_captioned_stream_format), Field(description="'audio'")
    ] = "audio"


class Speak(_Synthesis):
    """The WebSocket's ``speak``: the speech request's fields, and PCM's sample format."""

    type: Literal["speak"]
    format: PcmFormat = "s16le"
    timestamps: Timestamps = False


class StartText(Voicing):
    """A text stream's optional first message: how to speak the text that ``append`` brings."""

    type: Literal["start"]
    format: PcmFormat = "s16le"
    timestamps: Timestamps = False


class _Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Cancel(_Message):
    type: Literal["cancel"]


class Ping(_Message):
    type: Literal["ping"]


class Append(_Message):
    """A piece of a text being written (an LLM's tokens), spoken as its sentences settle."""

    type: Literal["append"]
    text: Annotated[str, AfterValidator(_piece), Field(description="a string, a piece of the text")]


class Flush(_Message):
    """Speak what the text stream holds now, settled or not."""

    type: Literal["flush"]


class End(_Message):
    """The text stream is whole: speak the rest, then ``end``."""

    type: Literal["end"]


Message = Speak | StartText | Append | Flush | End | Cancel | Ping
ClientMessage = Annotated[Message, Field(discriminator="type")]
_SPEECH_BODY = TypeAdapter(SpeechBody)
_CAPTIONED_BODY = TypeAdapter(CaptionedBody)
_CLIENT_MESSAGE: TypeAdapter[Message] = TypeAdapter(ClientMessage)
MESSAGE_HELP = (
    'send JSON text messages: {"type": "speak", "input": ...}; or a text stream: {"type": "start", ...} '
    '(optional), {"type": "append", "text": ...}, {"type": "flush"}, {"type": "end"}; '
    '{"type": "cancel"} or {"type": "ping"}'
)


@dataclass(frozen=True)
class SpeechRequest:
    """A parsed body or ``speak`` with its voice resolved against the served ones."""

    text: str
    voice: str  # a served voice
    speaker_id: int | None
    speed: float
    response_format: str = "mp3"
    noise_scale: float | None = None  # extensions (VITS voices): None is the voice's own
    noise_w: float | None = None
    caller: str | None = None  # who asks, for the server's fair shares (access.caller_of)
    timestamps: bool = False  # the words' times too (voices with word timestamps)
    text_format: str | None = None  # None: the server's auto (SSML when it starts with <speak)
    max_wait_s: float | None = None  # how long the caller waits to be admitted (MAX_WAIT_HEADER)
    voice_mix: str | None = None  # a style voice's speakers with weights (VOICE_MIX)


# A caller's own budget for admission, in seconds (as Retry-After counts): the server
# refuses at once a request it predicts would wait longer, and queues it otherwise. Without
# it, the server's default wait applies (docs/deployment.md, "Admission").
MAX_WAIT_HEADER = "x-max-wait"
MAX_WAIT_S = 3600.0
_MAX_WAIT: TypeAdapter[float] = TypeAdapter(Annotated[float, Field(gt=0, le=MAX_WAIT_S, allow_inf_nan=False)])


def parse_max_wait(value: str | None) -> float | None:
    """The X-Max-Wait header -> seconds (None: not sent), or ApiError 400."""
    if value is None:
        return None
    try:
        return _MAX_WAIT.validate_strings(value.strip())
    except ValidationError:
        raise invalid(
            f"{MAX_WAIT_HEADER} must be seconds above 0 and at most {MAX_WAIT_S:g}, got {value!r}",
            param=MAX_WAIT_HEADER,
        ) from None


def parse_speech_body(raw: bytes, max_input_chars: int) -> SpeechBody:
    """An HTTP body -> its SpeechBody, or ApiError 400."""
    try:
        return _SPEECH_BODY.validate_json(raw, context={"max_input_chars": max_input_chars})
    except ValidationError as err:
        raise refusal(err.errors(include_url=False), envelope="invalid_json") from None


def parse_captioned_body(raw: bytes, max_input_chars: int) -> CaptionedBody:
    """A captioned speech body -> its CaptionedBody, or ApiError 400."""
    try:
        return _CAPTIONED_BODY.validate_json(raw, context={"max_input_chars": max_input_chars})
    except ValidationError as err:
        raise refusal(err.errors(include_url=False), envelope="invalid_json") from None


class MessageRefused(ApiError):
    """A WebSocket message that was refused; ``speak``: whether it was a ``speak``."""

    def __init__(self, error: ApiError, speak: bool) -> None:
        super().__init__(error.status, error.message, error.code, error.param)
        self.speak = speak


def parse_message(text: str | bytes | None, max_input_chars: int) -> Message:
    """A WebSocket message -> its model, or MessageRefused (an ApiError 400)."""
    if not isinstance(text, str):
        raise MessageRefused(invalid(f"a binary message: {MESSAGE_HELP}", code="invalid_message"), False)
    try:
        return _CLIENT_MESSAGE.validate_json(text, context={"max_input_chars": max_input_chars})
    except ValidationError as err:
        errors = err.errors(include_url=False)
        speak = bool(errors) and errors[0]["loc"][:1] == ("speak",)
        # Every field's location starts with its message's type (the union's tag).
        raise MessageRefused(refusal(errors, envelope="invalid_message", tagged=True), speak) from None


_NO_MESSAGE_TYPE = {"union_tag_not_found", "union_tag_invalid"}
_CUSTOM = {"invalid_value", "empty_input", "string_above_max_length", "model_not_found", "unsupported_format"}


def _wants(field: str) -> str:
    for model in (CaptionedBody, Speak, Append):
        info = model.model_fields.get(field)
        if info is not None and info.description:
            return info.description
    return "valid"


def refusal(errors: list[ErrorDetails], envelope: str, tagged: bool = False) -> ApiError:
    """Pydantic's errors -> the first as a 400; ``envelope``: the code for a body that is
    not JSON or not an object (HTTP ``invalid_json``, WebSocket ``invalid_message``);
    ``tagged``: the fields' locations start with the message's type (the union's tag)."""
    if not errors:
        return invalid("the request could not be read", code=envelope)
    first = errors[0]
    kind, loc = first["type"], first["loc"][1:] if tagged else first["loc"]
    field = str(loc[0]) if loc else None
    if kind == "json_invalid":
        error = str(first.get("ctx", {}).get("error", first["msg"]))
        what = "body" if envelope == "invalid_json" else "message"
        return invalid(f"the {what} is not JSON: {error}", code=envelope)
    if field is None:  # the body or message as a whole
        if kind in _NO_MESSAGE_TYPE:
            return invalid(MESSAGE_HELP, code=envelope)
        what = "body" if envelope == "invalid_json" else "message"
        return invalid(f"the {what} must be a JSON object", code=envelope)
    if kind in _CUSTOM:
        return invalid(first["msg"], field, kind)
    if kind == "missing":
        code = f"missing_{field}" if field in ("input", "model") else "missing_value"
        return invalid(f"'{field}' is required: it must be {_wants(field)}", field, code)
    if kind == "string_too_long":
        return invalid(f"'{field}' is too long: it must be {_wants(field)}", field, "string_above_max_length")
    code = "invalid_type" if kind.endswith(("_type", "_parsing")) else "invalid_value"
    return invalid(f"'{field}' must be {_wants(field)}, got {shown(first.get('input'))}", field, code)
