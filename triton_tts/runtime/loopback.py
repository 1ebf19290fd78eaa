"""A chunk sent back to this server over gRPC, with a Triton priority.

Why: a stream's chunks should be ordered by their deadlines in the stages (a first chunk
and a chunk its listener is about to need overtake the rest), and Triton's dynamic
batchers order their queues by request priority. A Python
model's own requests (BLS, ``pb_utils.InferenceRequest``) cannot carry a priority in
Triton 2.51, but a gRPC request can, and an ensemble passes its request's priority on to
every step. So ``tts_stream`` sends its chunks to the voice's ``tts_chunk``
ensemble through its own server's gRPC endpoint, whose address ``triton-tts serve``
gives every model in :data:`GRPC_URL_ENV` (a port of this server only: a guessed
address could be another server's).

When the endpoint cannot be reached (gRPC turned off, the variable not set), the chunk
goes by BLS instead, without a priority, and the model logs why once; a Triton error
(a refused chunk) is the chunk's answer, as it would be by BLS. Usable outside Triton:
it needs only tritonclient.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_tts.runtime import internal

GRPC_URL_ENV = "TRITON_TTS_GRPC_URL"  # host:port of this server's gRPC endpoint

# Status codes of a gRPC failure that came from Triton, not from the way there: the
# request reached the server, which answered it (a refusal, a queue full, a cancel).
_TRITON_ANSWERS = {
    "StatusCode.INVALID_ARGUMENT": "INVALID_ARG",
    "StatusCode.UNAVAILABLE": "UNAVAILABLE",
    "StatusCode.CANCELLED": "CANCELLED",
    "StatusCode.NOT_FOUND": "NOT_FOUND",
    "StatusCode.UNIMPLEMENTED": "UNSUPPORTED",
    "StatusCode.INTERNAL": "INTERNAL",
    "StatusCode.UNKNOWN": "UNKNOWN",
}
# gRPC's own words when it never reached a server (then UNAVAILABLE is not Triton's).
_UNREACHABLE = ("failed to connect", "connection refused", "connections to all backends failed", "dns")


class Unreachable(Exception):
    """The endpoint could not be reached: send the chunk another way."""


@dataclass(frozen=True)
class ChunkError:
    """Triton's answer to a chunk that failed, by code name (triton_tts.contract.errors' names)."""

    text: str
    code_name: str

    def message(self) -> str:
        return self.text


class LoopbackFailed(Exception):
    """The server answered the chunk with an error."""

    def __init__(self, error: ChunkError) -> None:
        super().__init__(error.text)
        self.error = error


class Loopback:
    """Chunks to this server's ``tts_chunk`` ensembles over gRPC, with a priority.

    One gRPC client per thread (tritonclient's clients are not shared between threads).
    """

    def __init__(self, url: str, priority: int) -> None:
        self.url = url
        self.priority = priority
        self._local = threading.local()
        # The server's API key, when its inference API takes one (TritonServer.start puts
        # it in the models' environment).
        from triton_tts.client.tts_client import auth_headers, env_api_key

        self.headers = auth_headers(env_api_key(), "grpc")

    @classmethod
    def from_environment(cls, priority: int) -> Loopback | None:
        """The server's own endpoint, if ``triton-tts serve`` named one and a priority is asked."""
        url = os.environ.get(GRPC_URL_ENV, "").strip()
        return cls(url, priority) if url and priority > 0 else None

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            import tritonclient.grpc as grpcclient

            client = self._local.client = grpcclient.InferenceServerClient(self.url)
        return client

    def synthesize(
        self,
        model: str,
        text: str,
        options: Sequence[tuple[str, npt.NDArray[np.generic]]],
        chunk_id: str,
        priority: int | None = None,
    ) -> tuple[npt.NDArray[np.float32], int, npt.NDArray[Any] | None, npt.NDArray[Any] | None]:
        """One chunk -> (audio, sample rate, WORDS, WORD_TIMES; the last two None unless a
        TIMESTAMPS option asks for them). ``options``: (input name, [1, 1] array) pairs
        sent with TEXT; ``priority``: this chunk's, else the loopback's. Raises
        :class:`LoopbackFailed` with Triton's error, or :class:`Unreachable` when no
        server answered."""
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException, np_to_triton_dtype

        inputs = []
        for name, value in [("TEXT", np.array([[text.encode("utf-8")]], dtype=np.object_)), *options]:
            tensor = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        names = ["AUDIO", "SAMPLE_RATE"]
        with_words = any(name == "TIMESTAMPS" for name, _ in options)
        if with_words:
            names += ["WORDS", "WORD_TIMES"]
        outputs = [grpcclient.InferRequestedOutput(name) for name in names]
        try:
            result = self._client().infer(
                model,
                inputs,
                outputs=outputs,
                request_id=chunk_id,
                priority=priority or self.priority,
                headers=self.headers,
                parameters=internal.parameters(),  # what the stages answer (triton_tts/runtime/internal.py)
            )
        except InferenceServerException as err:
            status, text_of = str(err.status()), str(err.message())
            if status == "StatusCode.UNAVAILABLE" and any(w in text_of.lower() for w in _UNREACHABLE):
                raise Unreachable(f"{self.url}: {text_of}") from err
            if status not in _TRITON_ANSWERS:  # a transport failure (deadline, reset, ...)
                raise Unreachable(f"{self.url}: {status} {text_of}") from err
            raise LoopbackFailed(ChunkError(text_of, _TRITON_ANSWERS[status])) from err
        audio = result.as_numpy("AUDIO").reshape(-1).astype(np.float32, copy=False)
        rate = int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
        if with_words:
            return audio, rate, result.as_numpy("WORDS"), result.as_numpy("WORD_TIMES")
        return audio, rate, None, None
