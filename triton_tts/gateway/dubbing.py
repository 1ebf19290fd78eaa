"""``POST /v1/audio/dub``: a subtitle file (and an optional original) in, one timed track
and its report out, as ``triton-tts dub`` makes them (triton_tts/client/dubbing.py).

A multipart form (``curl -F file=@film.srt -F original=@film.wav -o dub.zip``):

- ``file``: the cues, ``.srt`` or ``.vtt`` by its file name; or a ``.txt`` script, one
  line a cue, placed into the original's speech regions (the ``vad`` model);
- ``original`` (optional): the original's audio in any format libsndfile reads; the track
  gets its length, and a script (or ``snap``) its speech onsets;
- fields: ``voice`` (as for speech: OpenAI names, aliases, ``voice:speaker``),
  ``max_speed`` (1-4, default 1.25), ``snap`` (seconds), ``response_format`` (``wav``,
  ``flac``), ``strict`` (``true``: a cue the voice cannot say stops the dub, 400 with its
  line; by default it is left silent and listed in the report, as ``triton-tts dub``).

The answer is a zip: ``dub.wav`` (or ``.flac``), ``dub.json`` (the report) and ``dub.vtt``
(the speech as placed, with its words' times). Every cue goes through Triton with the
caller's name, so the server's admission holds the dub to the key's share as it does
speech; a busy refusal is retried within the gateway's timeout, then answered 503.

Limits (GatewaySettings): the body (``max_dub_upload_bytes``), the cues
(``max_dub_cues``) and the track's length (``max_dub_seconds``). Errors, each naming its
field: not a form, a missing file, a bad field 400; a subtitle file that cannot be dubbed
400 with its line (``film.srt:6: ...``; with ``strict``, a cue the voice cannot say, and
always a file of which no cue can be said); an original that is not audio 400.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import zipfile
from pathlib import PurePath
from typing import Annotated, Any, Literal

import numpy as np
import soundfile as sf
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from python_multipart.exceptions import MultipartParseError
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import Response

from triton_tts.client import SynthesisResult, TTSClient, TTSError
from triton_tts.client.dubbing import Dub, Dubber, gives_timestamps, place_by_speech
from triton_tts.client.subtitles import (
    FORMATS,
    Cue,
    SubtitleError,
    decode,
    parse_subtitles,
    script_lines,
)
from triton_tts.client.sync_client import PerThreadClients
from triton_tts.gateway.errors import from_tts_error, invalid
from triton_tts.gateway.settings import GatewaySettings
from triton_tts.gateway.speakers import decode_clip
from triton_tts.gateway.voices import Voices

DUB_PATH = re.compile(r"/v1/audio/dub")
CONCURRENCY = 8  # cues in flight, as the command's default
CONTAINERS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16")}


class DubForm(BaseModel):
    """The form's text fields."""

    model_config = ConfigDict(extra="forbid")
    voice: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    max_speed: Annotated[float, Field(ge=1.0, le=4.0)] = 1.25
    snap: Annotated[float, Field(gt=0.0, le=10.0)] | None = None
    response_format: Literal["wav", "flac"] = "wav"
    strict: bool = False


def _fields(form: FormData) -> DubForm:
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    try:
        return DubForm.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "form"
        raise invalid(f"form field '{field}': {first['msg'].lower()}", field, "invalid_form") from None


def _file(form: FormData, name: str, required: bool) -> UploadFile | None:
    files = [v for k, v in form.multi_items() if k == name and isinstance(v, UploadFile)]
    if len(files) > 1 or (required and not files):
        what = "the cues (.srt, .vtt) or a script (.txt)" if name == "file" else "the original's audio"
        raise invalid(f"send {what} as one file field named '{name}'", name, "missing_file")
    return files[0] if files else None


def read_cues(name: str, data: bytes, max_cues: int) -> tuple[list[Cue] | None, list[tuple[int, str]]]:
    """(timed cues, or None for a script; the script's lines), checked, named ``name``."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in (*FORMATS, ".txt"):
        why = "unsupported format: name the file .srt (SubRip), .vtt (WebVTT) or .txt (a script)"
        raise SubtitleError(why, None, name)
    text = decode(data, name)
    cues = parse_subtitles(text, FORMATS[suffix], name) if suffix in FORMATS else None
    lines = script_lines(text) if cues is None else []
    count = len(cues) if cues is not None else len(lines)
    if count == 0:
        raise SubtitleError("no lines to dub", None, name)
    if count > max_cues:
        raise SubtitleError(f"{count} cues, over the {max_cues} a dub may have", None, name)
    return cues, lines


def zipped(dub: Dub, response_format: str) -> bytes:
    container, subtype = CONTAINERS[response_format]
    track = io.BytesIO()
    sf.write(track, np.clip(dub.track, -1.0, 1.0), dub.sample_rate, subtype=subtype, format=container)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"dub.{response_format}", track.getvalue())
        archive.writestr("dub.json", dub.report_json())
        archive.writestr("dub.vtt", dub.report_vtt())
    return out.getvalue()


class DubJob:
    """One dub's work, in worker threads: each with its own blocking gRPC client to Triton."""

    def __init__(self, settings: GatewaySettings, voice: str, speaker: int | None, caller: str,
                 timestamps: bool, mix: str | None = None) -> None:  # fmt: skip
        self.settings, self.voice, self.speaker, self.caller = settings, voice, speaker, caller
        self.mix = mix
        self.timestamps = timestamps
        key = settings.api_keys[0] if settings.api_keys else None
        self.client = PerThreadClients(
            lambda: TTSClient(settings.triton_url, "grpc", timeout_s=settings.timeout_s, api_key=key)
        )

    def synthesize(self, text: str, speed: float) -> SynthesisResult:
        return self.client().synthesize(text, speed=speed, speaker_id=self.speaker, voice=self.voice,
                                        caller=self.caller, timestamps=self.timestamps,
                                        voice_mix=self.mix)  # fmt: skip

    def run(self, cues: list[Cue] | None, lines: list[tuple[int, str]], original: tuple[Any, int] | None,
            form: DubForm, source: str) -> Dub:  # fmt: skip
        try:
            if original is not None and (cues is None or form.snap is not None):
                cues = place_by_speech(
                    cues, lines, self.client().speech_regions(*original), form.snap, source
                )
            assert cues is not None
            length = len(original[0]) / original[1] if original is not None else None
            dubber = Dubber(self.synthesize, form.max_speed, CONCURRENCY, strict=form.strict,
                            max_seconds=self.settings.max_dub_seconds)  # fmt: skip
            return dubber.dub(cues, length, source)
        finally:
            self.client.close()


async def dub(request: Request, settings: GatewaySettings, voices: Voices, caller: str) -> Response:
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise invalid("send a multipart/form-data body with 'file' (the cues) and, if any, 'original'",
                      code="not_a_form")  # fmt: skip
    try:
        form = await request.form(max_files=2, max_fields=8, max_part_size=settings.max_dub_upload_bytes)
    except (MultiPartException, MultipartParseError) as err:
        raise invalid(f"the form cannot be read: {err}", code="bad_form") from None
    try:
        fields = _fields(form)
        cue_file = _file(form, "file", required=True)
        original_file = _file(form, "original", required=False)
        assert cue_file is not None
        source = PurePath(cue_file.filename or "file").name
        cue_data = await cue_file.read()
        original_data = await original_file.read() if original_file is not None else None
    finally:
        await form.close()
    try:
        cues, lines = read_cues(source, cue_data, settings.max_dub_cues)
    except SubtitleError as err:
        raise invalid(str(err), "file", "bad_subtitles") from None
    if (cues is None or fields.snap is not None) and original_data is None:
        raise invalid(
            f"{'a script' if cues is None else 'snap'} needs the 'original' to place by", "original"
        )
    original = None
    if original_data is not None:
        try:
            original = await asyncio.to_thread(decode_clip, original_data)
        except ValueError as err:
            raise invalid(f"original: {err}", "original", "bad_audio") from None
    voice, speaker, mix = await voices.resolve(fields.voice)
    job = DubJob(settings, voice, speaker, caller, gives_timestamps(await voices.served(), voice), mix)
    try:
        result = await asyncio.to_thread(job.run, cues, lines, original, fields, source)
    except SubtitleError as err:
        raise invalid(str(err), "file", "bad_subtitles") from None
    except TTSError as err:
        raise from_tts_error(err, settings) from None
    body = await asyncio.to_thread(zipped, result, fields.response_format)
    summary = result.summary()
    headers = {
        "Content-Disposition": 'attachment; filename="dub.zip"',
        "X-Voice": voice,
        "X-Dub-Summary": json.dumps(summary, separators=(",", ":")),
        "Cache-Control": "no-store",
    }
    return Response(body, media_type="application/zip", headers=headers)
