"""The blocking client: tritonclient's HTTP and gRPC clients, calls in this thread."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Mapping
from contextlib import closing
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_tts.client.auth import Protocol
from triton_tts.client.core import STREAM_END_WAIT_S, ClientCore, _chunk, _input, _needs_grpc, _result
from triton_tts.client.datatypes import AudioChunk, SynthesisOptions, SynthesisResult
from triton_tts.client.errors import ServerBusy, TimedOut, TTSError, _stream_error, ends_its_request
from triton_tts.client.voices import VoiceInfo


class TTSClient(ClientCore):
    """Blocking client; one per thread (tritonclient clients are not shared across threads)."""

    def __init__(self, url: str | None = None, protocol: Protocol = "http", **settings: Any) -> None:
        super().__init__(url, protocol, **settings)
        timeout_s = self.timeout_s
        self._lib = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                self.url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self._client = grpcclient.InferenceServerClient(self.url)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TTSClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def is_ready(self) -> bool:
        try:
            return bool(self._client.is_model_ready(self.model, headers=self.headers))
        except Exception:  # refused connections and friends
            return False

    def voices(self) -> list[VoiceInfo]:
        """The voices the server serves (from the ``tts`` model's config)."""
        with self._errors():
            answer = self._client.get_model_config(self.model, **self._config_request())
        return self._voices_of(answer)

    def synthesize(
        self,
        text: str | bytes,
        speed: float | None = None,
        speaker_id: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        voice: str | None = None,
        caller: str | None = None,
        timestamps: bool = False,
        text_format: str | None = None,
        max_wait_s: float | None = None,
        lexicon: Mapping[str, str] | None = None,
        reference_audio: npt.NDArray[np.float32] | None = None,
        reference_sample_rate: int | None = None,
        language: str | None = None,
        voice_mix: str | None = None,
    ) -> SynthesisResult:
        """One text (any length) -> the whole audio; unset options take the server's defaults.
        ``lexicon``: this request's pronunciations, {"word": "phonemes"} in the voice's own
        symbols, over the voice's lexicon; ``reference_audio`` (float32 mono) at
        ``reference_sample_rate``: a clip for an XTTS voice to clone; ``voice_mix``: a style
        voice's speakers with weights ("af_bella:0.7+af_sky:0.3"). A busy server's
        refusal is retried per ``retry``."""
        options = SynthesisOptions(
            speed,
            speaker_id,
            noise_scale,
            noise_w,
            voice,
            caller,
            timestamps,
            text_format,
            max_wait_s,
            lexicon,
            reference_audio,
            reference_sample_rate,
            language,
            voice_mix,
        )
        retries = self._retries()
        while True:
            try:
                return self._synthesize_once(text, options, retries.deadline)
            except ServerBusy as err:
                time.sleep(retries.wait(err))

    def _synthesize_once(
        self, text: str | bytes, options: SynthesisOptions, deadline: float | None = None
    ) -> SynthesisResult:
        request = self._infer_request(text, options, deadline)
        try:
            with self._errors():
                result = self._client.infer(self.model, **request)
        except TimeoutError as err:  # not a ConnectionError: passes through the block above
            raise TimedOut(f"no answer from {self.url} within {self.timeout_s:g} s") from err
        return _result(result)

    def speech_regions(self, audio: Any, sample_rate: int, **settings: float) -> list[Any]:
        """Where ``audio`` (mono float samples) has speech: the server's ``vad`` model
        (Silero VAD), a call per 16 s, the regions as triton_tts/client/vad.py sets them
        (``settings``: its thresholds)."""
        from triton_tts.client import vad

        def call(block: Any, h: Any, c: Any) -> tuple[Any, Any, Any]:
            inputs = [
                _input(self._lib, name, value, "FP32")
                for name, value in (("input", block), ("h", h), ("c", c))
            ]
            try:
                with self._errors():
                    result = self._client.infer(vad.VAD_MODEL, inputs, headers=self.headers)
            except TimeoutError as err:
                raise TimedOut(f"no answer from {self.url} within {self.timeout_s:g} s") from err
            return result.as_numpy("speech_probs"), result.as_numpy("hn"), result.as_numpy("cn")

        return vad.speech_regions(vad.probabilities(call, audio, sample_rate), **settings)

    def stream(
        self,
        text: str | bytes,
        speed: float | None = None,
        speaker_id: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        voice: str | None = None,
        caller: str | None = None,
        timestamps: bool = False,
        text_format: str | None = None,
        max_wait_s: float | None = None,
        lexicon: Mapping[str, str] | None = None,
        reference_audio: npt.NDArray[np.float32] | None = None,
        reference_sample_rate: int | None = None,
        language: str | None = None,
        voice_mix: str | None = None,
    ) -> Generator[AudioChunk, None, None]:
        """Audio chunks in order as the server makes them (gRPC). Leaving the loop early
        (or closing the generator) cancels the request on the server. A busy server's
        refusal is retried per ``retry``, only before the first chunk."""
        _needs_grpc(self.protocol)
        options = SynthesisOptions(
            speed,
            speaker_id,
            noise_scale,
            noise_w,
            voice,
            caller,
            timestamps,
            text_format,
            max_wait_s,
            lexicon,
            reference_audio,
            reference_sample_rate,
            language,
            voice_mix,
        )
        retries = self._retries()
        while True:
            chunks = self._stream_once(text, options)
            try:
                first = next(chunks, None)
            except ServerBusy as err:
                time.sleep(retries.wait(err))
                continue
            with closing(chunks):
                if first is not None:
                    yield first
                    yield from chunks
            return

    def _stream_once(self, text: str | bytes, options: SynthesisOptions) -> Generator[AudioChunk, None, None]:
        """One try: the answers come to a callback, in order, the request's final flag last."""
        request = self._stream_request(text, options)  # a bad option raises before the call opens
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self._client.start_stream(
            callback=lambda result, error: answers.put((result, error)), headers=self.headers
        )
        finished = False
        refusal: TTSError | None = None
        try:
            try:
                self._client.async_stream_infer(**request, enable_empty_final_response=True)
            except InferenceServerException as err:
                # The call failed before the request went out (no gRPC server there, say):
                # tritonclient says only that; the cause came to the callback.
                try:
                    cause = answers.get(timeout=STREAM_END_WAIT_S)[1]
                except queue.Empty:
                    cause = None
                raise _stream_error(cause or err, self.url) from None
            while True:
                wait = self.timeout_s if refusal is None else min(self.timeout_s, STREAM_END_WAIT_S)
                try:
                    result, error = answers.get(timeout=wait)
                except queue.Empty:
                    if refusal is not None:
                        raise refusal from None
                    raise TimedOut(f"no audio from {self.url} within {self.timeout_s:g} s") from None
                if error is not None:
                    if ends_its_request(error):  # nothing follows it: no final flag to wait for
                        # The server ends the call by itself (closed, not cancelled: a cancel can
                        # leave the refused request's state behind in Triton 2.51).
                        finished = not error.status()
                        raise _stream_error(error, self.url)
                    # The server refused the request, and the final flag that ends it follows:
                    # read it before closing (see STREAM_END_WAIT_S).
                    refusal = refusal or _stream_error(error, self.url)
                    continue
                response = result.get_response()
                final = response.parameters["triton_final_response"].bool_param
                if response.outputs and refusal is None:
                    yield _chunk(result)
                if final:
                    finished = True
                    if refusal is not None:
                        raise refusal
                    return
        finally:
            self._client.stop_stream(cancel_requests=not finished)


class PerThreadClients:
    """One :class:`TTSClient` for each thread that asks (tritonclient's clients are not
    shared across threads), each made by ``make`` on its thread's first call; ``close``
    closes them all."""

    def __init__(self, make: Callable[[], TTSClient]) -> None:
        self.make = make
        self.local = threading.local()
        self.made: list[TTSClient] = []
        self.lock = threading.Lock()

    def __call__(self) -> TTSClient:
        client: TTSClient | None = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = self.make()
            with self.lock:
                self.made.append(client)
        return client

    def close(self) -> None:
        with self.lock:
            made, self.made = self.made, []
        for client in made:
            client.close()
