"""``tts`` and ``tts_stream`` for an XTTS voice: the request goes on whole to the voice's
decoupled model (it segments the text and batches across requests itself), by BLS, and
its chunks come back as they are made.

What the long-text models take and XTTS does not (NOISE_SCALE, NOISE_W, TIMESTAMPS, SSML)
is refused by name. VOICE ``voice:speaker`` picks a named speaker by name (one added
while serving too: ``triton-tts speakers add`` or the gateway's upload), SPEAKER_ID by
its index in the voice's list at build (``triton-tts voices`` shows them), else
REFERENCE_AUDIO with REFERENCE_SAMPLE_RATE clones a clip; LANGUAGE, SPEED, TEMPERATURE
and SEED go on as sent. The XTTS model's own errors come back with their codes (a bad clip: INVALID_ARG,
a full model: UNAVAILABLE). A client that cancels (or outlives its own timeout) stops its
generation in the model too: the request carries a job id, and the model is sent an
internal request that cancels that job.

Before it goes on, tts and tts_stream admit the request in the server's ledger as a text
(:func:`admit`: its predicted audio over the voice's capacity, the machine-seconds it
needs), so XTTS texts and the chunk voices' texts wait for one another's work; each chunk
made counts as done, and the work is released when the request ends. Only importable
inside Triton's Python backend.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.client.voices import XTTS_KIND, VoiceInfo, split_voice_name
from triton_tts.contract.errors import ERROR_OUTPUT
from triton_tts.contract.validation import InvalidRequest, one_item
from triton_tts.runtime import internal
from triton_tts.runtime.admission import Ledger, Work
from triton_tts.runtime.cancellation import RequestCancelled
from triton_tts.runtime.long_text.deliver import Said
from triton_tts.runtime.long_text.ending import ChunkFailed
from triton_tts.runtime.long_text.request import LongTextSettings, read_caller, wait_deadline_us
from triton_tts.runtime.metrics import TTSMetrics
from triton_tts.runtime.request_options import input_array, one_value
from triton_tts.xtts import defaults
from triton_tts.xtts.requests import CANCEL_PARAMETER, ERRORS_PARAMETER, JOB_PARAMETER

PASSED_ON = ("SPEED", "LANGUAGE", "REFERENCE_AUDIO", "REFERENCE_SAMPLE_RATE", "TEMPERATURE", "SEED")
NOT_FOR_XTTS = ("NOISE_SCALE", "NOISE_W", "LEXICON")  # LEXICON: XTTS reads letters, no phonemes
TAGGED = re.compile(r"^\[([A-Z_]+)\] ")
# Chinese, Japanese and Korean characters (defaults.CJK_CHAR_WEIGHT): CJK ideographs and
# their extension A, kana, hangul syllables.
CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Demand:
    """What admission needs of an XTTS voice's request."""

    characters: int  # of TEXT
    audio_s: float  # predicted
    caller: str
    deadline_us: int  # how long it may wait to be admitted (0: it does not say)


def _as_text(value: Any) -> str:
    """A BYTES tensor's element as text (undecodable bytes replaced)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def predicted_audio_s(text: str, speed: float | None) -> float:
    """Seconds of audio an XTTS voice takes to say ``text``: its characters (a CJK one
    counting as several) at XTTS's reading rate, over SPEED."""
    characters = len(text.strip()) + (defaults.CJK_CHAR_WEIGHT - 1) * len(CJK.findall(text))
    # A SPEED out of the model's bounds is refused there by name; here it only must not divide.
    fast = speed if speed is not None and speed > 0 else 1.0
    return characters * defaults.SECONDS_PER_CHAR / fast


def read_demand(request: Any) -> Demand:
    """The request's text, caller and deadline, for admission (a TEXT that is not one
    string: refused, as :func:`xtts_inputs` refuses it)."""
    raw = _text(request)
    speed = _flag(request, "SPEED")
    said = _as_text(raw)
    return Demand(
        len(said),
        predicted_audio_s(said, None if speed is None else float(speed)),
        read_caller(request),
        wait_deadline_us(request),
    )


def admit(
    ledger: Ledger, metrics: TTSMetrics, request: Any, voice: VoiceInfo, request_id: str
) -> tuple[Demand, Work]:
    """Admitted as any text is (XTTS is not paced: its model makes audio at its own rate),
    while its predicted wait fits its deadline or, stating none, the default budget;
    :class:`triton_tts.runtime.admission.Refused` at once otherwise."""
    demand = read_demand(request)
    with metrics.demand(voice.name, demand.audio_s):
        work = ledger.admit_text(
            request_id,
            voice.name,
            demand.caller,
            demand.audio_s,
            ledger.settings.text_budget(demand.deadline_us),
        )
    return demand, work


def _text(request: Any) -> Any:
    """TEXT's one element as sent (its reading and checks are the XTTS model's)."""
    return one_value(request, "TEXT", required=True)


def _voice_name(request: Any) -> tuple[str, str] | None:
    """VOICE as (voice, speaker): "narrator" or "narrator:Ana" (a named speaker of an XTTS
    voice by name, one added while serving too); None for more than one value."""
    given = input_array(request, "VOICE")
    values = given.reshape(-1) if given is not None else np.array([b""], dtype=np.object_)
    if values.size != 1:
        return None
    return split_voice_name(_as_text(values[0]))


def xtts_voice(request: Any, settings: LongTextSettings) -> VoiceInfo | None:
    """The request's voice when it is an XTTS voice (VOICE names it, as ``voice`` or
    ``voice:speaker``, or it is the default), else None (an unknown VOICE too:
    read_request refuses it in its own words)."""
    named = _voice_name(request)
    if named is None:
        return None
    name, speaker = named
    voice = next((v for v in settings.voices if v.name == name), None) if name else settings.voices[0]
    if voice is None or voice.kind != XTTS_KIND:
        return None
    if (name or not speaker) and input_array(request, "VOICE_MIX") is not None:
        raise InvalidRequest(
            f"VOICE_MIX: voice '{voice.name}' does not mix speakers (style voices such as Kokoro do)"
        )
    return voice if name or not speaker else None


def _flag(request: Any, name: str) -> Any:
    return one_value(request, name)


def xtts_inputs(request: Any, voice: VoiceInfo) -> list[Any]:
    """The XTTS model's inputs from a long-text request (batch dimension taken off)."""
    for name in NOT_FOR_XTTS:
        if pb_utils.get_input_tensor_by_name(request, name) is not None:
            raise InvalidRequest(f"{name}: voice {voice.name!r} is an XTTS voice, which has no {name}")
    if bool(_flag(request, "TIMESTAMPS")):
        raise InvalidRequest(f"TIMESTAMPS: voice {voice.name!r} (XTTS) has no word timestamps")
    text_format = _flag(request, "TEXT_FORMAT")
    if isinstance(text_format, bytes) and text_format.decode("utf-8", "replace").strip().lower() == "ssml":
        raise InvalidRequest(f"TEXT_FORMAT ssml: voice {voice.name!r} (XTTS) reads plain text")
    inputs = [pb_utils.Tensor("TEXT", np.array([_text(request)], dtype=np.object_))]
    for name in PASSED_ON:
        given = input_array(request, name)
        if given is not None:  # tts's batch dimension taken off: one item, as the model checks
            inputs.append(pb_utils.Tensor(name, one_item(name, given).reshape(-1)))
    speaker_id = _flag(request, "SPEAKER_ID")
    named = _voice_name(request)
    by_name = named[1] if named else ""
    if by_name and speaker_id is not None:
        raise InvalidRequest(f"VOICE {voice.name}:{by_name} names a speaker: leave SPEAKER_ID out")
    if by_name:
        inputs.append(pb_utils.Tensor("SPEAKER", np.array([by_name.encode()], dtype=np.object_)))
    if speaker_id is not None:
        by_id = {index: name for name, index in voice.speakers.items()}
        if int(speaker_id) not in by_id:
            known = ", ".join(f"{i} {n}" for i, n in sorted(by_id.items())) or "none"
            raise InvalidRequest(f"SPEAKER_ID {int(speaker_id)}: voice {voice.name!r} has speakers {known}")
        inputs.append(
            pb_utils.Tensor("SPEAKER", np.array([by_id[int(speaker_id)].encode()], dtype=np.object_))
        )
    return inputs


def _speaker_given_as(request: Any) -> str | None:
    """How the caller named the speaker the model reads as SPEAKER: "VOICE xtts:ana" or
    "SPEAKER_ID 2" (None: no speaker named), so that the model's refusal of SPEAKER names
    what the caller sent."""
    named = _voice_name(request)
    if named and named[1]:
        return f"VOICE {named[0]}:{named[1]}"
    speaker_id = _flag(request, "SPEAKER_ID")
    return None if speaker_id is None else f"SPEAKER_ID {int(speaker_id)}"


def _failure(message: str, code: int | None, speaker_given_as: str | None = None) -> ChunkFailed:
    """The model's error as the request's: the code its tag names (else ``code``), and a
    refusal of SPEAKER in the words the caller used."""
    tagged = TAGGED.match(message)
    if tagged:
        message = message[tagged.end() :]
        code = getattr(pb_utils.TritonError, tagged.group(1), code)
    if speaker_given_as and message.startswith("SPEAKER"):  # an input tts and tts_stream do not have
        message = f"{speaker_given_as}: {message}"
    return ChunkFailed(message, code)


def _answers(responses: Any, speaker_given_as: str | None = None) -> Iterator[Any]:
    """The xtts model's responses to one request, to its final flag; a failure raised
    (ChunkFailed): the model's own refusal, in its ERROR output (we ask for it there:
    ERRORS_PARAMETER), its stream read on to the final flag that follows it; or Triton's
    error response (the model unreachable, or its stub gone), which ends the stream."""
    for response in responses:
        if response.has_error():
            error = response.error()
            code = error.code() if hasattr(error, "code") else None
            raise _failure(str(error.message()), code, speaker_given_as)
        refusal = pb_utils.get_output_tensor_by_name(response, ERROR_OUTPUT)
        if refusal is not None:
            for _ in responses:  # so that this stream is done with
                pass
            raise _failure(_as_text(refusal.as_numpy().reshape(-1)[0]), None, speaker_given_as)
        yield response


def cancel_job(model: str, job: str, responses: Any = None) -> None:
    """Stop the generation of job id ``job`` in the XTTS ``model``. A BLS request of its
    own: the model does not see that a BLS caller's own caller went away, and Triton 2.51's
    Python backend cannot cancel a BLS request. Where Triton can (``responses.cancel()``,
    later releases), it is asked as well. Best effort: a failure is logged, not raised."""
    cancel = getattr(responses, "cancel", None)
    try:
        if callable(cancel):
            cancel()
        answers = pb_utils.InferenceRequest(
            model_name=model,
            requested_output_names=[ERROR_OUTPUT],
            inputs=[],
            parameters={**internal.parameters(), CANCEL_PARAMETER: job, ERRORS_PARAMETER: True},
        ).exec(decoupled=True)
        for _ in _answers(answers):
            pass
    except Exception as err:
        pb_utils.Logger.log_warn(f"{model}: cancelling job {job} failed: {err}")


def forward(request: Any, voice: VoiceInfo, request_id: str, cancelled: Any) -> Iterator[Said]:
    """The voice's chunks in order (for triton_tts.runtime.long_text.deliver.Delivery);
    ends at the model's final response, or (RequestCancelled) when ``cancelled()`` says
    the client went away. A request left before its end (cancelled, or its reader gone)
    has its generation stopped in the model (:func:`cancel_job`)."""
    job = uuid.uuid4().hex
    responses = pb_utils.InferenceRequest(
        model_name=voice.model,
        requested_output_names=["AUDIO", "SAMPLE_RATE", "IS_LAST", ERROR_OUTPUT],
        inputs=xtts_inputs(request, voice),
        request_id=request_id,
        # Its errors as outputs: an error response would leave this stream unended (ERRORS_PARAMETER)
        parameters={JOB_PARAMETER: job, ERRORS_PARAMETER: True},
    ).exec(decoupled=True)
    sent, ended = 0, False
    try:
        for response in _answers(responses, _speaker_given_as(request)):
            audio = pb_utils.get_output_tensor_by_name(response, "AUDIO")
            if audio is None:  # the final flag alone
                continue
            rate = int(pb_utils.get_output_tensor_by_name(response, "SAMPLE_RATE").as_numpy().reshape(-1)[0])
            last = bool(pb_utils.get_output_tensor_by_name(response, "IS_LAST").as_numpy().reshape(-1)[0])
            ended = last
            yield Said(sent, audio.as_numpy().reshape(-1).astype(np.float32, copy=False), rate, last)
            sent += 1
            # After the last chunk the caller has sent its final flag: its sender is gone, and
            # asking it (is_cancelled) would crash Triton 2.51.
            if not last and cancelled():
                raise RequestCancelled(cancelled.reason or "request cancelled", sent, sent)
        ended = True
    except ChunkFailed:
        ended = True  # the model ends a failed request itself
        raise
    finally:
        if not ended:
            cancel_job(voice.model, job, responses)
