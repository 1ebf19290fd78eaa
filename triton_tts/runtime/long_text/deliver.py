"""The chunk loop: the one place a request's chunks go from first to last.

``tts`` and ``tts_stream`` hand each admitted request to a :class:`Delivery` once, with
where its chunks come from: a chunk voice's text (:func:`spoken`: a window of chunks in
flight while earlier ones are delivered, paced for streams, joined at their edges,
shaped by SSML, their words timed from the start of the audio, the request's
cancellation asked before each) or an XTTS voice's model (triton_tts/xtts/forward.py).
The delivery counts each chunk's audio as work done in the ledger, answers (a response per
chunk for a stream, one joined response for ``tts``), records the metrics, and ends the
request whatever happens: its error (unless no one listens), the final flag, its work
released. The model files are entered once per request. Only importable inside Triton's
Python backend."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.contract.errors import RequestErrors
from triton_tts.runtime.admission import Ledger, Work
from triton_tts.runtime.cancellation import Cancellation, RequestCancelled
from triton_tts.runtime.chunking import join_edges
from triton_tts.runtime.long_text.ending import error_response, outcome
from triton_tts.runtime.long_text.request import LongTextRequest
from triton_tts.runtime.long_text.send import TEXTS, Audio, Senders, synthesize_chunk
from triton_tts.runtime.metrics import TTSMetrics
from triton_tts.runtime.pacing import Pacer
from triton_tts.text.words import Word, WordClock

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


@dataclass(frozen=True)
class Said:
    """One chunk, ready to go out."""

    index: int
    samples: npt.NDArray[np.float32]
    rate: int  # 0: nothing was said
    last: bool
    # The words completed with this chunk, timed from the audio's start (None: not asked).
    words: list[Word] | None = None


def spoken(
    pool: ThreadPoolExecutor,
    request: LongTextRequest,
    window: int,
    cancellation: Callable[[], bool] | None = None,
    pacer: Pacer | None = None,
    senders: Senders = TEXTS,
) -> Iterator[Said]:
    """A chunk voice's chunks in reading order, ``window`` of them in flight.

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
    clock = None if request.written is None else WordClock(request.written, request.chunks, request.chinese)
    shape = request.shape
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
                _inputs(request, submitted),
                chunk_id,
                request.says_something,
                senders.for_chunk(submitted, pacer),
            )
            submitted += 1
        said = pending.pop(index).result()
        rate = said.rate
        joined = join_edges(said.samples, rate, index, count)
        if shape is not None and rate:  # SSML: its gain, and its silences (exact zeros)
            joined = shape.apply(index, joined, rate)
        seconds = joined.size / rate if rate else 0.0
        words = None
        if clock is not None:
            times = np.zeros((0, 2), np.float32) if said.times is None else said.times
            words = clock.add(said.words or [], times, seconds)
        yield Said(index, joined, rate, index == count - 1, words)
        if pacer is not None and rate:
            pacer.sent(seconds)


def _inputs(request: LongTextRequest, index: int) -> list[Any]:
    """The inputs sent with chunk ``index`` besides TEXT (SSML: its own SPEED)."""
    if request.shape is None:
        return request.passed_through
    speed = pb_utils.Tensor("SPEED", np.array([[request.shape.speeds[index]]], dtype=np.float32))
    return [*(t for t in request.passed_through if t.name() != "SPEED"), speed]


def word_tensors(words: list[Word]) -> list[Any]:
    """WORDS [1, n] and WORD_TIMES [1, n, 2] (seconds from the start of the audio)."""
    times = np.array([[w.start, w.end] for w in words], dtype=np.float32).reshape(-1, 2)
    return [
        pb_utils.Tensor("WORDS", np.array([[w.text.encode("utf-8") for w in words]], dtype=np.object_)),
        pb_utils.Tensor("WORD_TIMES", times[None]),
    ]


def audio_response(samples: npt.NDArray[np.float32], rate: int, *tensors: Any) -> Any:
    """AUDIO [1, samples], SAMPLE_RATE [1, 1] and any further tensors."""
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("AUDIO", samples[None, :]),
            pb_utils.Tensor("SAMPLE_RATE", np.array([[rate]], dtype=np.int32)),
            *tensors,
        ]
    )


def chunk_response(said: Said) -> Any:
    """A stream's response for one chunk: AUDIO, SAMPLE_RATE, CHUNK_INDEX, IS_LAST (and its words)."""
    return audio_response(
        said.samples,
        said.rate,
        pb_utils.Tensor("CHUNK_INDEX", np.array([[said.index]], dtype=np.int32)),
        pb_utils.Tensor("IS_LAST", np.array([[said.last]], dtype=np.bool_)),
        *(word_tensors(said.words) if said.words is not None else []),
    )


@dataclass(frozen=True)
class Deliveries:
    """How a model delivers its admitted requests (made once in ``initialize``): where it
    writes what they did (the admission ledger, its metrics, its error responses), the
    pool its chunks run in and how many are in flight, and for ``tts_stream``
    (``streaming``) how its chunks are sent and paced."""

    ledger: Ledger
    metrics: TTSMetrics
    errors: RequestErrors
    pool: ThreadPoolExecutor
    window: int  # chunks in flight per request
    streaming: bool = False  # a response per chunk (tts_stream), else one joined response (tts)
    senders: Senders = TEXTS
    lead_s: float = 0.0  # pacing's lead (streams)
    released: Callable[[], bool] = lambda: False  # pacing ends (the server asked, or unloading)

    def text(self, request: Any, long_text: LongTextRequest, work: Work, started: float) -> None:
        """A chunk voice's admitted text, chunk by chunk through its ensemble."""
        delivery = Delivery(
            self, request, long_text.request_id, long_text.voice, long_text.characters, work, started
        )
        pacer = None
        if self.streaming:  # a lead is built only while no other stream's first chunk waits
            pacer = Pacer(self.lead_s, self.released, hold=lambda: self.ledger.load().first_work_s > 0)
        delivery.deliver(
            spoken(self.pool, long_text, self.window, delivery.cancellation, pacer, self.senders), pacer
        )

    def from_model(
        self,
        request: Any,
        request_id: str,
        voice: str,
        characters: int,
        work: Work,
        started: float,
        chunks: Callable[[Cancellation], Iterable[Said]],
    ) -> None:
        """An admitted request whose chunks another model makes (an XTTS voice's:
        ``chunks(cancellation)``), not paced (it makes audio at its own rate)."""
        delivery = Delivery(self, request, request_id, voice, characters, work, started)
        delivery.deliver(chunks(delivery.cancellation))


@dataclass
class Delivery:
    """One admitted request, from its first chunk to its end."""

    accounts: Deliveries
    request: Any  # the Triton request
    request_id: str
    voice: str
    characters: int  # of its text, for metrics
    work: Work  # its admitted work, released at the end
    started: float  # when the model took it (time.monotonic()): a wait for admission counts
    sender: Any = field(init=False)
    cancellation: Cancellation = field(init=False)

    def __post_init__(self) -> None:
        self.sender = self.request.get_response_sender()
        # A stream's response sender says whether its client went away.
        asked = self.sender.is_cancelled if self.accounts.streaming else self.request.is_cancelled
        self.cancellation = Cancellation(asked, self.request.timeout(), self.started)

    def deliver(self, chunks: Iterable[Said], pacer: Pacer | None = None) -> None:
        """As the model answers: a response per chunk (``tts_stream``), else one."""
        if self.accounts.streaming:
            self.stream(chunks, pacer)
        else:
            self.whole(chunks)

    def stream(self, chunks: Iterable[Said], pacer: Pacer | None = None) -> None:
        """Each chunk as its own response as soon as it is ready, in order, then the
        final flag (always: after an error too, which goes first unless the client went
        away). Processing time leaves out the waits for playback (the real-time factor of
        paced streams would otherwise read 1)."""
        metrics = self.accounts.metrics
        sent_final, sent, samples, rate = False, 0, 0, 0
        with self._logged():
            try:
                with metrics.in_flight():
                    for said in chunks:
                        self._done(said)
                        # After the final flag the sender is gone: not even is_cancelled()
                        # may be called on it (Triton 2.51 crashes).
                        self.sender.send(chunk_response(said), flags=FINAL if said.last else 0)
                        sent_final = said.last
                        if not sent:
                            metrics.record_first_chunk(self.voice, time.monotonic() - self.started)
                        sent, samples, rate = sent + 1, samples + said.samples.size, said.rate or rate
                waited, gaps = (pacer.waited_s, pacer.gaps) if pacer is not None else (0.0, 0)
                working = time.monotonic() - self.started - waited
                metrics.record_ok(
                    self.voice, self.characters, samples / rate if rate else 0.0, working, sent, gaps
                )
            except Exception as err:
                metrics.record_error(outcome(err))
                gone = isinstance(err, RequestCancelled) and not err.timed_out  # no one to tell
                if not sent_final and not gone:
                    self.sender.send(error_response(self.accounts.errors, self.request_id, err))
            finally:
                try:
                    if not sent_final:
                        self.sender.send(flags=FINAL)
                finally:  # a send that raised must not keep the work admitted
                    self._release()

    def whole(self, chunks: Iterable[Said]) -> None:
        """The chunks joined into one response (with their words, if asked), or the
        request's error."""
        metrics = self.accounts.metrics
        with self._logged():
            try:
                try:
                    with metrics.in_flight():
                        parts = []
                        for said in chunks:
                            self._done(said)
                            parts.append(said)
                    audio = np.concatenate([said.samples for said in parts])
                    rate = next((said.rate for said in parts if said.rate), 0)
                    timed = [said.words for said in parts if said.words is not None]
                    words = [word for chunk in timed for word in chunk]
                    seconds = audio.size / rate if rate else 0.0
                    processing = time.monotonic() - self.started
                    metrics.record_ok(self.voice, self.characters, seconds, processing, len(parts))
                    response = audio_response(audio, rate, *(word_tensors(words) if timed else []))
                except Exception as err:  # the request's own error; others are unaffected
                    metrics.record_error(outcome(err))
                    response = error_response(self.accounts.errors, self.request_id, err)
                self.sender.send(response, flags=FINAL)
            finally:
                self._release()

    def _done(self, said: Said) -> None:
        """The chunk's audio is work done (the capacity window counts it)."""
        if said.rate:
            self.accounts.ledger.completed(self.work, said.samples.size / said.rate, first=said.index == 0)

    def _release(self) -> None:
        self.accounts.ledger.release(self.work)
        self.accounts.metrics.record_load(self.accounts.ledger)

    @contextmanager
    def _logged(self) -> Iterator[None]:
        """What escapes is logged (a pool thread's exception is kept in its Future, unread)."""
        try:
            yield
        except BaseException:
            pb_utils.Logger.log_error(
                f"{self.accounts.errors.model}: request {self.request_id} failed:\n{traceback.format_exc()}"
            )
            raise
