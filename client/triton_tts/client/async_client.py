"""The asyncio client: tritonclient's aio modules, HTTP or gRPC, the same calls awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from types import TracebackType
from typing import Any

import grpc
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE

from triton_tts.client.auth import Protocol
from triton_tts.client.core import STREAM_END_WAIT_S, ClientCore, _chunk, _needs_grpc, _result
from triton_tts.client.datatypes import AudioChunk, SynthesisOptions, SynthesisResult
from triton_tts.client.errors import ServerBusy, TTSError, _stream_error
from triton_tts.client.voices import VoiceInfo


async def _stream_ends(responses: Any) -> bool:
    """Read the rest of an asyncio stream call whose request has ended; True if the server
    ended the call within STREAM_END_WAIT_S."""

    async def rest() -> None:
        async for _ in responses:
            pass

    # asyncio.wait, not wait_for: before Python 3.12, wait_for loses a cancel that arrives
    # as the read ends (the caller then goes on as if never cancelled).
    reader = asyncio.ensure_future(rest())
    try:
        await asyncio.wait({reader}, timeout=STREAM_END_WAIT_S)
    finally:
        if not reader.done():
            reader.cancel()
    if not reader.done() or reader.cancelled():
        return False
    error = reader.exception()
    if isinstance(error, grpc.RpcError):
        return False
    if error is not None:
        raise error
    return True


def _channel_args(round_robin: bool) -> list[tuple[str, Any]] | None:
    """tritonclient's own gRPC channel options (they apply only when none are given), with
    the round-robin balancing policy added; None: tritonclient's defaults."""
    if not round_robin:
        return None
    keepalive = grpcclient.KeepAliveOptions()
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.lb_policy_name", "round_robin"),
    ]


class AsyncTTSClient(ClientCore):
    """asyncio client (tritonclient's aio modules), HTTP or gRPC."""

    # aiohttp's and grpc.aio's failures to connect are OSErrors, not all ConnectionErrors.
    network = (ConnectionError, OSError)

    def __init__(
        self, url: str | None = None, protocol: Protocol = "grpc", round_robin: bool = False, **settings: Any
    ) -> None:
        """``round_robin`` (gRPC): spread calls over every address ``url`` resolves to, one
        call to the next (e.g. ``dns:///triton-headless.ns.svc:8001``, or
        ``ipv4:10.0.0.1:8001,10.0.0.2:8001``) instead of pinning them all to the first."""
        super().__init__(url, protocol, **settings)
        self._lib = httpaio if protocol == "http" else grpcaio
        self._client: Any = (
            httpaio.InferenceServerClient(self.url, conn_timeout=self.timeout_s)
            if protocol == "http"
            else grpcaio.InferenceServerClient(self.url, channel_args=_channel_args(round_robin))
        )

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncTTSClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def is_ready(self) -> bool:
        """True when the server answers and both ``tts`` and ``tts_stream`` are ready."""
        try:
            ready = [
                await self._client.is_model_ready(m, headers=self.headers)
                for m in (self.model, self.stream_model)
            ]
        except Exception:  # refused connections and friends
            return False
        return all(ready)

    async def voices(self) -> list[VoiceInfo]:
        """As :meth:`TTSClient.voices`."""
        with self._errors():
            answer = await self._client.get_model_config(self.model, **self._config_request())
        return self._voices_of(answer)

    async def add_speaker(self, voice: VoiceInfo, name: str, audio: Any, sample_rate: int) -> None:
        """Store ``audio`` (a mono clip of a voice, at ``sample_rate``) as the named speaker
        ``name`` of the XTTS ``voice`` on the server; then ``voice="<voice>:<name>"`` speaks
        in it. Raises RequestRejected for a bad clip or name, AlreadyExists for a name the
        voice has (gRPC: the voice's model is decoupled)."""
        _needs_grpc(self.protocol)
        request = self._speaker_request(voice, name, audio, sample_rate)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        responses = self._client.stream_infer(requests(), stream_timeout=self.timeout_s, headers=self.headers)
        with self._errors():
            async for result, error in responses:
                if error is not None or bool(result.as_numpy("IS_LAST").reshape(-1)[0]):
                    if not await _stream_ends(responses):
                        responses.cancel()
                    if error is not None:
                        raise _stream_error(error, self.url)
                    return
        raise TTSError(f"{voice.model} ended without an answer to the speaker's store")

    async def synthesize(self, text: str | bytes, **options: Any) -> SynthesisResult:
        """As :meth:`TTSClient.synthesize` (busy refusals retried per ``retry``)."""
        settings = SynthesisOptions(**options)
        retries = self._retries()
        while True:
            try:
                return await self._synthesize_once(text, settings, retries.deadline)
            except ServerBusy as err:
                await asyncio.sleep(retries.wait(err))

    async def _synthesize_once(
        self, text: str | bytes, options: SynthesisOptions, deadline: float | None = None
    ) -> SynthesisResult:
        request = self._infer_request(text, options, deadline)
        with self._errors():
            result = await self._client.infer(self.model, **request)
        return _result(result)

    async def stream(self, text: str | bytes, **options: Any) -> AsyncGenerator[AudioChunk, None]:
        """As :meth:`TTSClient.stream` (busy refusals retried before the first chunk)."""
        _needs_grpc(self.protocol)
        settings = SynthesisOptions(**options)
        retries = self._retries()
        while True:
            chunks = self._stream_once(text, settings)
            try:
                first = await anext(chunks, None)
            except ServerBusy as err:
                await asyncio.sleep(retries.wait(err))
                continue
            async with aclosing(chunks):
                if first is not None:
                    yield first
                    async for chunk in chunks:
                        yield chunk
            return

    async def _stream_once(
        self, text: str | bytes, options: SynthesisOptions
    ) -> AsyncGenerator[AudioChunk, None]:
        """One try: the answers come from the call's iterator, an error as one of them."""
        request = self._stream_request(text, options)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        # The request stream ends after this one request (a half-close), so the server ends
        # the call once the request's final flag is sent; the call is cancelled only when
        # the caller leaves early or the server does not end it (see STREAM_END_WAIT_S).
        responses = self._client.stream_infer(requests(), stream_timeout=self.timeout_s, headers=self.headers)
        ended = False
        try:
            # A call that fails as a whole (no server there, a deadline) raises from the
            # iteration instead of yielding an error: the block maps that too.
            with self._errors():
                async for result, error in responses:
                    if error is not None:  # the call ends after it (at once after Triton's own refusal)
                        ended = await _stream_ends(responses)
                        raise _stream_error(error, self.url)
                    chunk = _chunk(result)
                    yield chunk
                    if chunk.is_last:
                        ended = await _stream_ends(responses)
                        return
            ended = True
        finally:
            if not ended:
                responses.cancel()
