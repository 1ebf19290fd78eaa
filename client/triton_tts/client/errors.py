"""The client's error types, and how Triton's errors map to them.

A code decides first where there is one that settles it: an HTTP or gRPC status (403,
400, a deadline), or the tag a stream's error starts with (INVALID_ARG). Words decide only
what the code leaves open (UNAVAILABLE is a refusal for load, a queue wait past the
model's timeout, a model not ready, or no server at all) and what comes without a code
that says (Triton's own "Exceeds maximum queue size" can reach a stream as INTERNAL).
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from tritonclient.utils import InferenceServerException

from triton_tts.client.auth import API_KEY_ENV


class TTSError(RuntimeError):
    """Anything that kept a synthesis from completing."""


class ServerUnavailable(TTSError):
    """The server could not be reached, or the model is not ready."""


class ServerBusy(ServerUnavailable):
    """The server is at capacity and refused the request at once, before any work (HTTP
    503 / gRPC UNAVAILABLE): retryable. The clients retry it per their RetryPolicy, not
    before ``retry_after_s``, the server's own estimate of when it could take it (None:
    it gave none)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthorized(TTSError):
    """The server needs an API key this client did not send, or sent wrong (HTTP 403 from
    Triton's restricted APIs): not retried."""


class RequestRejected(TTSError):
    """The server refused this request (bad input); the message is the server's."""


class AlreadyExists(RequestRejected):
    """What the request would add is there already (a named speaker): not retried."""


class TimedOut(TTSError):
    """No answer within the client's timeout."""


# Triton's error codes as each way in spells them: HTTP statuses, gRPC status codes, and
# the tags tts_stream puts in front of its errors (triton_tts/contract/errors.py, CODE_TAG).
CODES = {
    "400": "INVALID_ARG",
    "StatusCode.INVALID_ARGUMENT": "INVALID_ARG",
    "INVALID_ARG": "INVALID_ARG",
    "403": "FORBIDDEN",
    "503": "UNAVAILABLE",
    "StatusCode.UNAVAILABLE": "UNAVAILABLE",
    "UNAVAILABLE": "UNAVAILABLE",
    "StatusCode.DEADLINE_EXCEEDED": "DEADLINE_EXCEEDED",
}

# A refusal for work says when to come back: "...; retry after 2.5 s"
# (triton_tts/runtime/admission.py's busy_message, held to this by tests/test_admission.py).
RETRY_AFTER = re.compile(r"retry after (\d+(?:\.\d+)?) s")

# What Triton and tts_stream say when they refuse for load: a full queue, a queue wait
# past the model's timeout, too many streams (model_repository/tts_stream/1/model.py).
# UNAVAILABLE alone does not say it was load, and Triton's own refusals have no tag.
BUSY_MESSAGES = ("exceeds maximum queue size", "server busy")
QUEUE_TIMEOUT = "request timeout expired"  # Triton's own message ends with it

# Triton's refusal of a call without the restricted API's header (2.51: HTTP 403 "This
# API is restricted, expecting header 'authorization'"; gRPC UNAVAILABLE "This protocol
# is restricted, ..."): gRPC gives no status of its own for it, so the words are the sign.
RESTRICTED = "is restricted, expecting header"

# An error inside a stream carries only the server's message. tts_stream puts its code
# in front ("[INVALID_ARG] ...": triton_tts/contract/errors.py, CODE_TAG); what has no code is the
# server's own failure (a dead instance, say), never the caller's.
STREAM_CODE = re.compile(r"^\[([A-Z_]+)\] ")


def retry_hint(message: str) -> float | None:
    """The seconds a refusal's message asks the client to wait, or None."""
    found = RETRY_AFTER.search(message)
    return float(found.group(1)) if found else None


def _is_busy(message: str) -> bool:
    lowered = message.lower().rstrip()
    return any(words in lowered for words in BUSY_MESSAGES) or lowered.endswith(QUEUE_TIMEOUT)


def _busy(message: str, url: str) -> ServerBusy:
    return ServerBusy(f"{url} is busy, retry later: {message}", retry_hint(message))


def _not_served(lowered: str) -> bool:
    """Triton's words for a model it does not serve, or not yet (HTTP says 400 for one)."""
    return "unknown model" in lowered or "is not ready" in lowered or "is not found" in lowered


def classify(err: InferenceServerException, url: str) -> TTSError:
    """tritonclient's exception -> the client's error types, keeping the server's words."""
    status = str(err.status() or "")
    code = CODES.get(status)
    message = err.message() or str(err)
    lowered = message.lower()
    if code == "FORBIDDEN" or RESTRICTED in lowered:
        return Unauthorized(
            f"{url} needs an API key: pass api_key= (or --api-key) or set {API_KEY_ENV} ({message})"
        )
    if code == "INVALID_ARG" and not _not_served(lowered):
        return RequestRejected(message)
    if code == "DEADLINE_EXCEEDED":
        return TimedOut(message)
    if _is_busy(message):
        return _busy(message, url)
    if _not_served(lowered):
        return ServerUnavailable(f"{url} does not serve a ready model: {message}")
    if "deadline" in lowered or "timed out" in lowered or QUEUE_TIMEOUT in lowered:
        return TimedOut(message)
    if code == "UNAVAILABLE" or "failed to connect" in lowered:
        return ServerUnavailable(f"cannot reach {url}: {message}")
    return TTSError(f"{message} (status {status})" if status else message)


def ends_its_request(error: InferenceServerException) -> bool:
    """Whether nothing more comes for a stream's request after this error: the call's own
    failure (it has a status), or an error without a code tag. tts_stream and xtts tag
    every error they send and send the final flag after it; an untagged one is Triton's
    own: its refusal before the model ran (a shape or type the config does not take, a
    required input left out, a full queue), which no final flag follows, or a failure
    whose flag came with the error, where tritonclient shows the error alone."""
    return bool(error.status()) or not STREAM_CODE.match(error.message() or "")


def _stream_error(error: InferenceServerException, url: str) -> TTSError:
    """An error response inside a stream -> the client's error types (by its tag, see
    STREAM_CODE); one with a status is the call's own failure, as :func:`classify` has it."""
    if error.status():
        return classify(error, url)
    message = error.message() or str(error)
    tagged = STREAM_CODE.match(message)
    code = tagged.group(1) if tagged else None
    told = message[tagged.end() :] if tagged else message
    if code == "INVALID_ARG":
        return RequestRejected(told)
    if code == "ALREADY_EXISTS":
        return AlreadyExists(told)
    if _is_busy(message):  # UNAVAILABLE for load, or Triton's own queue without a code
        return _busy(message, url)
    if code == "UNAVAILABLE":
        return ServerUnavailable(f"{url} could not take the stream: {told}")
    return TTSError(f"{told} (status {code})" if code else told)


@contextmanager
def _server_errors(url: str, network: tuple[type[Exception], ...] = (ConnectionError,)) -> Iterator[None]:
    """tritonclient's exceptions and network failures (``network``) inside the block ->
    the client's error types."""
    try:
        yield
    except InferenceServerException as err:
        raise classify(err, url) from None
    except grpc.RpcError as err:  # a gRPC call that tritonclient lets through (asyncio streams)
        code = getattr(err, "code", lambda: None)()  # grpc.Call and grpc.aio's errors have them
        details = getattr(err, "details", lambda: None)() or str(err)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            raise TimedOut(f"no answer from {url} in time: {details}") from None
        if code == grpc.StatusCode.UNAVAILABLE:
            raise ServerUnavailable(f"cannot reach {url}: {details}") from None
        raise TTSError(f"{details} (status {code})") from None
    except network as err:
        raise ServerUnavailable(f"cannot reach {url}: {err}") from None
    except http.client.HTTPException as err:  # geventhttpclient's: what answered is no HTTP server
        raise ServerUnavailable(
            f"{url} does not answer in HTTP ({type(err).__name__}: {err}): is it the gRPC port? "
            "Call it with protocol grpc, or call the server's HTTP port (8000 by default)"
        ) from None
