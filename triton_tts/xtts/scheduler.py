"""Continuous (in-flight) batching of XTTS generations, and streamed audio out of them.

One thread runs the loop. Requests join the running batch between decode steps: a job
waiting for a slot of the cache pool is prefilled alone (its prompt), then steps with
all the others, one GPT run per step over the pool's live slots (a view, no copy). A
generation that stops (the stop code, its cap, or its request cancelled) leaves at once,
and the next waiting job takes its slot. The pool's slot count bounds the memory
(``slots x capacity`` cache positions); jobs beyond it wait.

Audio goes out every ``chunk_codes`` codes, as XTTS's own ``inference_stream`` makes it:
the segment's latents so far through the decoder, the new part of the waveform kept, its
first ``overlap`` samples crossfaded (linearly) with the previous decode's last ones, and
its own last ``overlap`` held back for the next join. The segment's last chunk ends with
the held-back samples (XTTS drops them), so a stream is the whole decode but for the
crossfades at its joins. Segments (sentences) follow one another in a request, each
generated and streamed on its own.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from triton_tts.runtime.cancellation import Cancellation, RequestCancelled
from triton_tts.xtts import defaults
from triton_tts.xtts.card import Sampling
from triton_tts.xtts.runner import CachePool, Conditioning, FloatArray, Generation, XttsRunner

CHUNK_CODES = defaults.CHUNK_CODES
OVERLAP = defaults.OVERLAP_SAMPLES
CANCEL_EVERY = 5  # codes between two questions whether a request was cancelled


def crossfade_join(
    wav: FloatArray, previous_length: int, held: FloatArray | None, overlap: int, last: bool
) -> tuple[FloatArray, FloatArray | None]:
    """The part of ``wav`` (a decode of every latent so far) to send, and what to hold back.

    ``previous_length``: the previous decode's length (0 for the first); ``held``: its last
    ``overlap`` samples, to crossfade with this decode's samples at the same place."""
    chunk = wav[max(previous_length - overlap, 0) :].copy() if previous_length else wav.copy()
    if held is not None and overlap:
        n = min(overlap, chunk.shape[0], held.shape[0])
        fade_in = np.linspace(0.0, 1.0, n, dtype=np.float32)
        chunk[:n] = chunk[:n] * fade_in + held[-n:] * (1.0 - fade_in)
    if last or overlap == 0:
        return chunk, None
    return chunk[:-overlap], wav[-overlap:].copy()


@dataclass
class Job:
    """One request: its segments' text ids, its voice, how it chooses, where audio goes."""

    segments: list[list[int]]
    conditioning: Conditioning
    sampling: Sampling
    seed: int
    send: Callable[[FloatArray, bool], None]  # audio chunk, is it the request's last
    finish: Callable[[Exception | None], None]  # once, at the end: None, or why it failed
    cancelled: Callable[[], bool] = lambda: False
    segment: int = 0
    gen: Generation | None = None
    decoded: int = 0  # codes of this segment already in sent audio
    previous_length: int = 0
    held: FloatArray | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def last_segment(self) -> bool:
        return self.segment == len(self.segments) - 1


class Scheduler:
    """The batching loop over one pool; :meth:`submit` from any thread."""

    def __init__(
        self, runner: XttsRunner, slots: int, chunk_codes: int = CHUNK_CODES, overlap: int = OVERLAP
    ):
        if chunk_codes < 1 or chunk_codes * runner.card.output_samples_per_code <= 2 * overlap:
            raise ValueError(f"{chunk_codes} codes a chunk are too few for an overlap of {overlap} samples")
        self.runner = runner
        self.pool: CachePool = runner.pool(slots)
        self.chunk_codes = chunk_codes
        self.overlap = overlap
        self.waiting: queue.Queue[Job] = queue.Queue()
        self.jobs: list[Job] = []  # in the pool
        self.batch_sizes: Counter[int] = Counter()  # decode steps by batch size
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="xtts-decode", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        self.waiting.put(job)

    def stop(self, timeout: float = 10.0) -> None:
        """End the loop; every job still live or waiting ends with an error (its request
        gets its final flag), so an unload leaves no request unanswered."""
        self.stopping = True
        self.thread.join(timeout)
        unloading = RuntimeError("the XTTS model is unloading")
        for job in list(self.jobs):
            self._end(job, unloading)
        while True:
            try:
                self.waiting.get_nowait().finish(unloading)
            except queue.Empty:
                break

    def statistics(self) -> dict[str, int]:
        with self.lock:
            sizes = dict(self.batch_sizes)
        return {
            "steps": sum(sizes.values()),
            "batched_steps": sum(n for size, n in sizes.items() if size > 1),
            "largest_batch": max(sizes, default=0),
            "live": self.pool.live,
            "waiting": self.waiting.qsize(),
        }

    # the loop
    def _loop(self) -> None:
        while not self.stopping:
            self._admit(block=not self.jobs)
            if not self.jobs:
                continue
            live = [job for job in self.jobs if job.gen is not None and not job.gen.done]
            if live:
                try:
                    size = self.runner.step([job.gen for job in live if job.gen is not None])
                except Exception as err:  # a failed GPT run fails its batch, not the loop
                    for job in live:
                        self._end(job, err)
                    continue
                with self.lock:
                    self.batch_sizes[size] += 1
            for job in list(self.jobs):
                self._advance(job)

    def _admit(self, block: bool) -> None:
        while self.pool.live < self.pool.slots:
            try:
                job = self.waiting.get(timeout=0.05) if block else self.waiting.get_nowait()
            except queue.Empty:
                return
            block = False
            self._start_segment(job)

    def _start_segment(self, job: Job) -> None:
        if job.cancelled():
            job.finish(RequestCancelled(Cancellation.CANCELLED))
            return
        try:
            job.gen = self.runner.start(
                job.conditioning.style,
                job.segments[job.segment],
                job.sampling,
                job.seed + job.segment,
                pool=self.pool,
            )
        except Exception as err:
            job.finish(err)
            return
        job.decoded, job.previous_length, job.held = 0, 0, None
        self.jobs.append(job)
        self._advance(job)

    def _advance(self, job: Job) -> None:
        """Send what a job has ready; move it on when its segment is done."""
        gen = job.gen
        if gen is None:
            return
        ready = gen.done or len(gen.codes) - job.decoded >= self.chunk_codes
        # Asking Triton is a round trip: every few codes, and before any audio goes out.
        if (ready or len(gen.codes) % CANCEL_EVERY == 0) and job.cancelled():
            self._end(job, RequestCancelled(Cancellation.CANCELLED))
            return
        if not ready:
            return
        try:
            self._send_audio(job, gen)
        except Exception as err:
            self._end(job, err)
            return
        if gen.done:
            self.pool.release(gen)
            self.jobs.remove(job)
            job.gen = None
            if job.last_segment:
                job.finish(None)
            else:
                job.segment += 1
                self._queue_next(job)

    def _queue_next(self, job: Job) -> None:
        # The next segment waits like a new request, behind none: it keeps its place.
        self._start_segment(job) if self.pool.live < self.pool.slots else self.waiting.put(job)

    def _send_audio(self, job: Job, gen: Generation) -> None:
        """Every latent of the segment so far through the decoder (the stop step's too, as
        XTTS's whole synthesis decodes them), the new part sent."""
        last = gen.done
        wav = self.runner.waveform(np.stack(gen.latents), job.conditioning.speaker, job.sampling.speed)
        chunk, job.held = crossfade_join(wav, job.previous_length, job.held, self.overlap, last)
        job.previous_length = wav.shape[0]
        job.decoded = len(gen.codes)
        job.send(chunk.astype(np.float32), last and job.last_segment)

    def _end(self, job: Job, err: Exception) -> None:
        if job.gen is not None:
            self.pool.release(job.gen)
            job.gen = None
        if job in self.jobs:
            self.jobs.remove(job)
        job.finish(err)
