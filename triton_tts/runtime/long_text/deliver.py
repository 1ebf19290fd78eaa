"""The chunks of a request in reading order (:func:`in_order`): a window of them in
flight while earlier ones are delivered, paced for streams, joined at their edges and
shaped (SSML's gain and silences), the request's cancellation asked before each; and the
word tensors of what was said. Only importable inside Triton's Python backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.runtime.chunking import join_edges
from triton_tts.runtime.long_text.ending import Cancellation, RequestCancelled
from triton_tts.runtime.long_text.request import LongTextRequest
from triton_tts.runtime.long_text.send import TEXTS, Audio, Senders, synthesize_chunk
from triton_tts.runtime.pacing import Pacer
from triton_tts.text.words import Word


def in_order(
    pool: ThreadPoolExecutor,
    request: LongTextRequest,
    window: int,
    cancellation: Cancellation | None = None,
    pacer: Pacer | None = None,
    senders: Senders = TEXTS,
) -> Iterator[tuple[int, Audio]]:
    """Yield (index, joined audio) in reading order, ``window`` chunks in flight.

    Later chunks are synthesised while earlier ones are delivered; the caller has sent a
    chunk when it asks for the next. With a ``pacer`` (streams), a later chunk starts
    only when the audio sent leads playback by less than its lead. Each chunk goes by
    ``senders.for_chunk`` (streams: a priority by its deadline). ``cancellation`` is
    asked before each chunk is waited for: once it says stop, nothing new starts, the
    chunks in flight are left to finish unread, and :class:`RequestCancelled` is raised.
    """
    count = len(request.chunks)
    pending: dict[int, Future[Audio]] = {}
    submitted = 0
    stopped: Callable[[], bool] = cancellation if cancellation is not None else (lambda: False)
    for index in range(count):
        # The first chunk travels alone: the stages run a batch's items one after
        # another, so chunk 0 batched behind the (long) chunk 1 would wait for it.
        limit = 1 if index == 0 else window
        if pacer is not None and submitted < min(count, index + limit):
            pacer.wait(stopped)
        if stopped():
            raise RequestCancelled(
                getattr(cancellation, "reason", None) or Cancellation.CANCELLED, index, count
            )
        while submitted < count and submitted < index + limit:
            chunk_id = f"{request.request_id}/{submitted}"
            pending[submitted] = pool.submit(
                synthesize_chunk,
                request.model,
                request.chunks[submitted],
                request.extras(submitted),
                chunk_id,
                request.says_something,
                senders.for_chunk(submitted, pacer),
            )
            submitted += 1
        said = pending.pop(index).result()
        rate = said.rate
        joined = request.shaped(index, join_edges(said.samples, rate, index, count), rate)
        yield index, said._replace(samples=joined)
        if pacer is not None and rate:
            pacer.sent(joined.size / rate)


def chunk_times(times: npt.NDArray[np.float32] | None) -> npt.NDArray[np.float32]:
    """A chunk's WORD_TIMES, [0, 2] when it had none."""
    return np.zeros((0, 2), np.float32) if times is None else times


def word_tensors(words: list[Word]) -> list[Any]:
    """WORDS [1, n] and WORD_TIMES [1, n, 2] (seconds from the start of the audio)."""
    times = np.array([[w.start, w.end] for w in words], dtype=np.float32).reshape(-1, 2)
    return [
        pb_utils.Tensor("WORDS", np.array([[w.text.encode("utf-8") for w in words]], dtype=np.object_)),
        pb_utils.Tensor("WORD_TIMES", times[None]),
    ]
