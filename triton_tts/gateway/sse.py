"""OpenAI's streamed speech events: ``POST /v1/audio/speech`` with ``"stream_format": "sse"``.

The answer is ``text/event-stream``, one ``data:`` line and a blank line per event, the
JSON compact, as OpenAI's own API sends them (its SDKs' ``SpeechAudioDeltaEvent`` and
``SpeechAudioDoneEvent``)::

    data: {"type":"speech.audio.delta","audio":"<base64>"}

    data: {"type":"speech.audio.done","usage":{"input_tokens":42,"output_tokens":2730,"total_tokens":2772}}

Each delta is the bytes the ``response_format`` encoder gave for one chunk as it was made
(joined in order, they are the file the plain answer would be); ``done`` comes last.

Usage is counted in units this server can state honestly (it has no tokens):
``input_tokens`` the characters (Unicode code points) of ``input``, ``output_tokens`` the
milliseconds of audio sent, ``total_tokens`` their sum because OpenAI's shape has one.

A failure once the stream has started is one last event, OpenAI's error object under
``error``, and then the body is cut (it ends without HTTP's terminating chunk, as a cut
plain answer does: :class:`triton_tts.gateway.app.AudioStream`), so a client that skips
events it does not know still fails instead of keeping a short clip::

    data: {"type":"error","error":{"message":"...","type":"server_error","param":null,"code":"timeout"}}
"""

from __future__ import annotations

import base64
import json
from typing import Any

from triton_tts.gateway.errors import ApiError

MEDIA_TYPE = "text/event-stream"
STREAM_FORMATS = ("audio", "sse")  # OpenAI's; "audio" is the plain answer and the default
DELTA, DONE, ERROR = "speech.audio.delta", "speech.audio.done", "error"


def event(value: dict[str, Any]) -> bytes:
    """One server-sent event: its ``data:`` line and the blank line that ends it."""
    return b"data: " + json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n\n"


def delta(audio: bytes) -> bytes:
    return event({"type": DELTA, "audio": base64.b64encode(audio).decode("ascii")})


def usage(input_text: str, audio_seconds: float) -> dict[str, int]:
    """OpenAI's usage object: characters in, milliseconds of audio out (see the module)."""
    characters, milliseconds = len(input_text), round(audio_seconds * 1000)
    return {
        "input_tokens": characters,
        "output_tokens": milliseconds,
        "total_tokens": characters + milliseconds,
    }


def done(input_text: str, audio_seconds: float) -> bytes:
    return event({"type": DONE, "usage": usage(input_text, audio_seconds)})


def error(err: ApiError) -> bytes:
    return event({"type": ERROR, **err.body()})
