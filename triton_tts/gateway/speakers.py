"""``POST /v1/audio/voices/{voice}/speakers``: a reference clip in, a named speaker of an
XTTS voice out, stored on the server (the voice's model keeps it in its ``speakers``
folder) and spoken with ``voice: "<voice>:<name>"`` from then on.

A multipart form (``curl -F name=ana -F file=@ana.wav``): ``name``, the speaker's name,
and ``file``, the clip in any format libsndfile reads (WAV, FLAC, OGG/Opus, MP3), mono or
mixed down. Only a gateway with API keys takes uploads: a stored speaker is the
server's, for every caller, so an open gateway refuses them (403). The body may be up to
``max_upload_bytes`` (the other routes keep ``max_body_bytes``).

Errors, each naming its field: not a form, a missing or second file, a bad name 400; a
clip the server refuses (too short, too long, silent, a rate out of range) 400 in the
server's words; a voice that does not clone 400; an unknown voice 404; a name the voice
has already 409.
"""

from __future__ import annotations

import asyncio
import io
import re
from typing import Annotated, Any

import numpy as np
import soundfile as sf
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError
from python_multipart.exceptions import MultipartParseError
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from triton_tts.client import AlreadyExists, AsyncTTSClient, RequestRejected, TTSError
from triton_tts.client.voices import XTTS_KIND
from triton_tts.gateway.errors import ApiError, from_tts_error, invalid
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.gateway.voices import Voices

UPLOAD_PATH = re.compile(r"/v1/audio/voices/[^/]+/speakers")


class SpeakerForm(BaseModel):
    """The form's text fields (the server checks the name's characters itself)."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]


def decode_clip(data: bytes) -> tuple[np.ndarray[Any, np.dtype[np.float32]], int]:
    """An uploaded file as mono float32 and its rate (ValueError: not audio)."""
    try:
        audio, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as err:
        raise ValueError(f"not an audio file libsndfile reads (WAV, FLAC, OGG, MP3): {err}") from None
    if audio.shape[0] == 0:
        raise ValueError("the audio file holds no samples")
    return np.ascontiguousarray(audio.mean(axis=1), dtype=np.float32), int(rate)


async def _read_form(form: FormData) -> tuple[SpeakerForm, bytes]:
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    files = [v for _, v in form.multi_items() if isinstance(v, UploadFile)]
    try:
        upload = SpeakerForm(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "form"
        what = "is required" if first["type"] == "missing" else first["msg"].lower()
        raise invalid(f"form field '{field}' {what}", field, "invalid_form") from None
    if len(files) != 1 or form.get("file") is not files[0]:
        raise invalid("send the clip as one file field named 'file'", "file", "missing_file")
    return upload, await files[0].read()


async def add_speaker(
    request: Request, settings: GatewaySettings, voices: Voices, client: AsyncTTSClient
) -> Response:
    if not settings.api_keys:
        raise ApiError(
            403,
            "speaker uploads need the gateway's API keys (TRITON_TTS_API_KEY): a stored speaker "
            "is the server's, for every caller",
            "uploads_need_keys",
        )
    served = {v.name: v for v in await voices.served()}
    voice = served.get(request.path_params["voice"])
    if voice is None:
        known = ", ".join(sorted(served))
        raise ApiError(
            404, f"no voice {request.path_params['voice']!r}; this server has: {known}", "voice_not_found"
        )
    if voice.kind != XTTS_KIND:
        raise invalid(f"voice {voice.name!r} does not clone voices: only XTTS voices store speakers", "voice")
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise invalid("send a multipart/form-data body with 'name' and 'file' (the clip)", code="not_a_form")
    try:
        form = await request.form(max_files=1, max_fields=4, max_part_size=settings.max_upload_bytes)
    except (MultiPartException, MultipartParseError) as err:
        raise invalid(f"the form cannot be read: {err}", code="bad_form") from None
    try:
        upload, data = await _read_form(form)
    finally:
        await form.close()
    try:
        audio, rate = await asyncio.to_thread(decode_clip, data)
    except ValueError as err:
        raise invalid(f"file: {err}", "file", "bad_audio") from None
    try:
        await client.add_speaker(voice, upload.name, audio, rate)
    except AlreadyExists as err:
        raise ApiError(409, str(err), "speaker_exists", "name") from None
    except RequestRejected as err:  # the clip or the name, in the server's words
        raise invalid(
            str(err),
            "file" if "clip" in str(err) or "REFERENCE" in str(err) else "name",
            "rejected_by_server",
        ) from None
    except TTSError as err:
        raise from_tts_error(err, settings) from None
    return JSONResponse(
        {
            "voice": voice.name,
            "speaker": upload.name,
            "use": f"{voice.name}:{upload.name}",
            "seconds": round(len(audio) / rate, 3),
        },
        status_code=201,
    )
