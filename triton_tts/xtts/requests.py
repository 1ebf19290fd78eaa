"""An ``xtts`` request's inputs, read and checked in one place (a pydantic schema for the
controls; Coqui's defaults, from the voice card, where a control is left out). Only
importable inside Triton's Python backend."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from triton_tts.contract.validation import InvalidRequest
from triton_tts.runtime import internal
from triton_tts.runtime.request_options import one_value, read_text
from triton_tts.xtts.card import Sampling, XttsCard
from triton_tts.xtts.runner import FloatArray
from triton_tts.xtts.speakers import check_name

MAX_TEXT_CHARS = 20_000
MAX_SEED = 2**63 - 1
# Request parameters between tts/tts_stream and the xtts model (triton_tts/xtts/forward.py):
# a generation's job id, and an internal request that cancels the job of that id.
JOB_PARAMETER = "tts_job"
CANCEL_PARAMETER = "tts_cancel_job"
# true: the request's errors come as a response with the ERROR output (the tagged message),
# then the final flag, not as error responses (contract/errors.py, RequestErrors.as_output:
# what a BLS caller needs on Triton 2.51). Any caller may ask; tts and tts_stream do.
ERRORS_PARAMETER = "tts_errors_as_output"
MAX_JOB_ID_CHARS = 64


class ControlSchema(BaseModel):
    """What a request may set; None: the voice's default."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = Field(None, ge=0.0, le=10.0, allow_inf_nan=False)  # 0: greedy
    top_k: int | None = Field(None, ge=0)  # 0: no top-k
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    repetition_penalty: float | None = Field(None, gt=0.0, le=100.0, allow_inf_nan=False)
    length_penalty: float | None = Field(None, ge=-10.0, le=10.0, allow_inf_nan=False)
    speed: float | None = Field(None, ge=0.25, le=4.0, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)


@dataclass(frozen=True)
class Controls:
    text: str
    language: str
    reference: FloatArray | None
    reference_rate: int | None
    speaker: str | None  # a named speaker instead of a clip
    sampling: Sampling
    seed: int


def _one(request: Any, name: str) -> Any | None:
    """:func:`one_value` as a Python value (text decoded)."""
    value = one_value(request, name)
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()


def read_clip(request: Any) -> tuple[FloatArray | None, int | None]:
    """REFERENCE_AUDIO (flattened) and REFERENCE_SAMPLE_RATE; a clip needs its rate."""
    reference = pb_utils.get_input_tensor_by_name(request, "REFERENCE_AUDIO")
    rate = _one(request, "REFERENCE_SAMPLE_RATE")
    clip = None if reference is None else np.asarray(reference.as_numpy(), dtype=np.float32).reshape(-1)
    if clip is not None and rate is None:
        raise InvalidRequest("REFERENCE_AUDIO needs REFERENCE_SAMPLE_RATE (INT32, Hz)")
    return clip, None if rate is None else int(rate)


@dataclass(frozen=True)
class SpeakerToStore:
    name: str
    reference: FloatArray | None
    reference_rate: int | None


def read_store(request: Any) -> SpeakerToStore | None:
    """A request with STORE_SPEAKER true: the name and the clip to store (no TEXT)."""
    if not _one(request, "STORE_SPEAKER"):
        return None
    name = _one(request, "SPEAKER")
    if name is None:
        raise InvalidRequest("STORE_SPEAKER needs SPEAKER, the name to store the clip's voice as")
    try:
        check_name(str(name))
    except ValueError as err:
        raise InvalidRequest(f"SPEAKER: {err}") from None
    if pb_utils.get_input_tensor_by_name(request, "TEXT") is not None:
        raise InvalidRequest("STORE_SPEAKER stores a voice and says nothing: leave TEXT out")
    clip, rate = read_clip(request)
    return SpeakerToStore(str(name), clip, rate)


def read_controls(request: Any, card: XttsCard) -> Controls:
    text = read_text(request, MAX_TEXT_CHARS)  # required: refused by name when left out
    language = _one(request, "LANGUAGE")
    values = {
        key: _one(request, key.upper())
        for key in ("temperature", "top_k", "top_p", "repetition_penalty", "length_penalty", "speed", "seed")
    }
    try:
        schema = ControlSchema(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as err:
        problems = "; ".join(f"{e['loc'][0]}".upper() + f": {e['msg']}" for e in err.errors())
        raise InvalidRequest(problems) from None
    chosen = {k: v for k, v in schema.model_dump().items() if v is not None and k != "seed"}
    sampling = replace(card.sampling, **chosen)
    clip, rate = read_clip(request)
    speaker = _one(request, "SPEAKER")
    if speaker is not None and clip is not None:
        raise InvalidRequest("give SPEAKER (a named speaker) or REFERENCE_AUDIO (a clip), not both")
    return Controls(
        text=text,
        language=str(language) if language is not None else card.languages[0],
        reference=clip,
        reference_rate=rate,
        speaker=None if speaker is None else str(speaker),
        sampling=sampling,
        seed=int(schema.seed) if schema.seed is not None else int(np.random.default_rng().integers(0, 2**31)),
    )


def _job_id(request: Any, key: str) -> str | None:
    value = internal.request_parameters(request).get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_JOB_ID_CHARS:
        raise InvalidRequest(f"parameter {key}: a job id is a string of 1 to {MAX_JOB_ID_CHARS} characters")
    return value


def errors_as_output(request: Any) -> bool:
    """Does the request ask for its errors in the ERROR output (:data:`ERRORS_PARAMETER`
    true)? Read before anything else can fail; any other value is no."""
    return internal.request_parameters(request).get(ERRORS_PARAMETER) is True


def read_job(request: Any) -> str | None:
    """The request's job id (the :data:`JOB_PARAMETER` parameter tts and tts_stream send),
    by which their internal cancel request names the generation; None when it has none."""
    return _job_id(request, JOB_PARAMETER)


def read_cancel(request: Any, token: str | None) -> str | None:
    """The job id an internal cancel request names (:data:`CANCEL_PARAMETER`), None for any
    other request. Only the server's own models may cancel (they carry its internal token,
    triton_tts/runtime/internal.py); a caller of the xtts model cancels its own request as Triton
    does, through its stream."""
    job = _job_id(request, CANCEL_PARAMETER)
    if job is not None and token is not None and not internal.carries_token(request, token):
        raise InvalidRequest(
            f"parameter {CANCEL_PARAMETER} is internal: only the server's own models cancel jobs "
            "(cancel your own request through its stream, or give it a timeout)"
        )
    return job
