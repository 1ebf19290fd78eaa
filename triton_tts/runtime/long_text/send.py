"""Sending one chunk to its voice's ``tts_chunk`` ensemble: by BLS (:func:`send_by_bls`),
or with a Triton priority through the server's own gRPC endpoint (:class:`PrioritySender`,
:mod:`triton_tts.runtime.loopback`); a chunk the stages refuse as too long is said in
halves and joined (:func:`synthesize_chunk`). Only importable inside Triton's Python backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.runtime import internal
from triton_tts.runtime.chunking import halves, join_edges
from triton_tts.runtime.limits import TOO_LONG
from triton_tts.runtime.long_text.ending import ChunkFailed
from triton_tts.runtime.loopback import Loopback, LoopbackFailed, Unreachable
from triton_tts.runtime.pacing import Pacer
from triton_tts.runtime.priorities import chunk_priority
from triton_tts.text.speaks import pronounceable


class Audio(NamedTuple):
    """A chunk's audio, and with TIMESTAMPS the words its ensemble timed (the chunk's
    own words) with [start, end] seconds from the chunk's start."""

    samples: npt.NDArray[np.float32]
    rate: int
    words: list[str] | None = None
    times: npt.NDArray[np.float32] | None = None


def timed(names: list[str]) -> bool:
    """Whether a chunk's inputs ask for word timestamps."""
    return "TIMESTAMPS" in names


def chunk_words(
    words: npt.NDArray[Any], times: npt.NDArray[Any]
) -> tuple[list[str], npt.NDArray[np.float32]]:
    """WORDS and WORD_TIMES of a chunk's answer as a list and [n, 2]."""
    decoded = [w.decode("utf-8") if isinstance(w, bytes) else str(w) for w in words.reshape(-1)]
    return decoded, times.reshape(-1, 2).astype(np.float32, copy=False)


# How a chunk reaches its ensemble: (model, text, extras, chunk id) -> audio, or ChunkFailed.
ChunkSender = Callable[[str, str, list[Any], str], Audio]


def send_by_bls(model: str, text: str, extras: list[Any], chunk_id: str) -> Audio:
    """One chunk through the voice's ensemble, a blocking BLS call (default priority)."""
    inputs = [pb_utils.Tensor("TEXT", np.array([[text.encode("utf-8")]], dtype=np.object_)), *extras]
    with_words = timed([t.name() for t in extras])
    response = pb_utils.InferenceRequest(
        model_name=model,
        requested_output_names=["AUDIO", "SAMPLE_RATE", *(["WORDS", "WORD_TIMES"] if with_words else [])],
        inputs=inputs,
        request_id=chunk_id,
        parameters=internal.parameters(),  # what the stages answer (triton_tts/runtime/internal.py)
    ).exec()
    if response.has_error():
        error = response.error()
        raise ChunkFailed(error.message(), error.code() if hasattr(error, "code") else None)
    audio = pb_utils.get_output_tensor_by_name(response, "AUDIO").as_numpy().reshape(-1)
    rate = int(pb_utils.get_output_tensor_by_name(response, "SAMPLE_RATE").as_numpy().reshape(-1)[0])
    if not with_words:
        return Audio(audio.astype(np.float32, copy=False), rate)
    words, times = chunk_words(
        pb_utils.get_output_tensor_by_name(response, "WORDS").as_numpy(),
        pb_utils.get_output_tensor_by_name(response, "WORD_TIMES").as_numpy(),
    )
    return Audio(audio.astype(np.float32, copy=False), rate, words, times)


class PrioritySender:
    """Chunks sent with a Triton priority through this server's own gRPC endpoint
    (:mod:`triton_tts.runtime.loopback`), so they overtake what the stages have queued. When the
    endpoint cannot be reached, chunks go by BLS (no priority) for :data:`RETRY_AFTER_S`,
    and the model's log says why."""

    RETRY_AFTER_S = 60.0

    def __init__(self, loopback: Loopback, model_name: str) -> None:
        self.loopback = loopback
        self.model_name = model_name
        self._off_until = 0.0

    def at(self, priority: int) -> ChunkSender:
        """This sender with ``priority`` (a level of model_configs' priorities)."""
        return lambda model, text, extras, chunk_id: self(model, text, extras, chunk_id, priority)

    def __call__(
        self, model: str, text: str, extras: list[Any], chunk_id: str, priority: int | None = None
    ) -> Audio:
        if time.monotonic() >= self._off_until:
            options = [(t.name(), t.as_numpy()) for t in extras]
            try:
                audio, rate, words, times = self.loopback.synthesize(model, text, options, chunk_id, priority)
                if words is None or times is None:
                    return Audio(audio, rate)
                return Audio(audio, rate, *chunk_words(words, times))
            except LoopbackFailed as err:  # the server's answer: as by BLS
                code = getattr(pb_utils.TritonError, err.error.code_name, pb_utils.TritonError.INTERNAL)
                raise ChunkFailed(err.error.message(), code) from err
            except Unreachable as err:
                self._off_until = time.monotonic() + self.RETRY_AFTER_S
                pb_utils.Logger.log_warn(
                    f"{self.model_name}: chunks go without priority for {self.RETRY_AFTER_S:.0f} s, "
                    f"this server's gRPC endpoint did not answer: {err}"
                )
        return send_by_bls(model, text, extras, chunk_id)


def synthesize_chunk(
    model: str,
    text: str,
    extras: list[Any],
    chunk_id: str,
    says_something: Callable[[str], bool] = pronounceable,
    send: ChunkSender = send_by_bls,
) -> Audio:
    """One chunk (with something to pronounce: LongTextRequest's chunks have) through the
    voice's ensemble (blocking). A chunk preprocess refuses as over the voice's budget
    (limits.TOO_LONG: dense text, slow SPEED, noisy NOISE_W) is said in halves, joined,
    until the pieces fit; nothing long fails on it. A piece with nothing to pronounce (a
    cut can leave one of punctuation) is silence."""
    try:
        return send(model, text, extras, chunk_id)
    except ChunkFailed as err:
        if TOO_LONG in err.message and (pieces := halves(text)):
            said = [
                synthesize_chunk(model, piece, extras, chunk_id, says_something, send)
                if says_something(piece)
                else _silence(timed([t.name() for t in extras]))
                for piece in pieces
            ]
            return _joined(said)
        raise


def _silence(with_words: bool) -> Audio:
    if with_words:
        return Audio(np.zeros(0, dtype=np.float32), 0, [], np.zeros((0, 2), np.float32))
    return Audio(np.zeros(0, dtype=np.float32), 0)


def _joined(parts: list[Audio]) -> Audio:
    rate = next((part.rate for part in parts if part.rate), 0)  # 0: no piece was said
    spoken = [part for part in parts if part.samples.size]
    joined = [join_edges(part.samples, rate, i, len(spoken)) for i, part in enumerate(spoken)]
    samples = np.concatenate([np.zeros(0, dtype=np.float32), *joined]).astype(np.float32, copy=False)
    if any(part.words is None for part in parts):
        return Audio(samples, rate)
    words: list[str] = []
    times: list[npt.NDArray[np.float32]] = []
    offset = 0
    for part in spoken:  # each piece's words, from the joined audio's start
        assert part.words is not None and part.times is not None
        words.extend(part.words)
        times.append(part.times + np.float32(offset / rate))
        offset += part.samples.size
    return Audio(samples, rate, words, np.concatenate([np.zeros((0, 2), np.float32), *times]))


@dataclass(frozen=True)
class Senders:
    """How a stream's chunks reach the stages: ``at(priority)`` sends with a Triton
    priority by the chunk's deadline (triton_tts.runtime.priorities.chunk_priority); None: all by
    BLS, without one (the server's own gRPC endpoint is not known; tts's chunks)."""

    at: Callable[[int], ChunkSender] | None = None

    def for_chunk(self, index: int, pacer: Pacer | None) -> ChunkSender:
        if self.at is None:
            return send_by_bls
        return self.at(chunk_priority(index, pacer.lead() if pacer is not None else 0.0))


TEXTS = Senders()  # tts: every chunk by BLS, at the stages' default priority
