"""LiveKit Agents' OpenAI plugin (livekit-plugins-openai) pointed at the gateway with
``base_url``, as a voice agent uses it: ``synthesize()`` read through its async iterator,
no LiveKit server or room. With a model other than ``tts-1``/``tts-1-hd`` (its default,
gpt-4o-mini-tts) the plugin asks for ``stream_format: "sse"`` and reads OpenAI's events;
with ``tts-1`` it reads the audio bytes. Either way its frames are 24 kHz mono, the
offline recogniser hears the text in them, and (SSE) the done event's usage reaches the
plugin's metrics."""

from __future__ import annotations

import asyncio

import numpy as np
import numpy.typing as npt
import pytest
from livekit.agents import APIConnectOptions
from livekit.agents.metrics import TTSMetrics
from livekit.plugins import openai as lk_openai

from tests.test_gateway import TEXT
from tests.test_gateway_sse import MAX_WER
from triton_tts.quality.intelligibility import transcribe, word_error_rate

RATE = 24_000  # the plugin's, and OpenAI's pcm
NO_RETRY = APIConnectOptions(max_retry=0)  # a failure fails the test, not a silent second try


async def synthesize(
    base: str, model: str, response_format: str
) -> tuple[npt.NDArray[np.float32], set[tuple[int, int]], list[TTSMetrics]]:
    """The plugin's frames for TEXT: the joined audio, the (rate, channels) seen, its metrics."""
    tts = lk_openai.TTS(
        base_url=f"{base}/v1",
        api_key="not-needed",
        model=model,
        voice="alloy",
        response_format=response_format,
    )
    metrics: list[TTSMetrics] = []
    tts.on("metrics_collected", metrics.append)
    pieces: list[npt.NDArray[np.int16]] = []
    shapes: set[tuple[int, int]] = set()
    try:
        async with tts.synthesize(TEXT, conn_options=NO_RETRY) as stream:  # its exit awaits the metrics
            async for event in stream:
                shapes.add((event.frame.sample_rate, event.frame.num_channels))
                pieces.append(np.frombuffer(event.frame.data, np.int16).copy())
    finally:
        await tts.aclose()
    return np.concatenate(pieces).astype(np.float32) / 32768.0, shapes, metrics


@pytest.mark.parametrize(
    ("model", "response_format"),
    [("gpt-4o-mini-tts", "mp3"), ("tts-1", "pcm")],  # SSE with the plugin's defaults; plain audio
)
def test_livekits_openai_plugin_speaks_through_the_gateway(
    gateway: str, model: str, response_format: str
) -> None:
    audio, shapes, metrics = asyncio.run(synthesize(gateway, model, response_format))
    assert shapes == {(RATE, 1)}
    assert len(audio) / RATE > 5  # TEXT is four sentences, about 12 s
    wer = word_error_rate([TEXT], [transcribe(audio, RATE)])
    assert wer <= MAX_WER, (model, wer)
    assert len(metrics) == 1 and metrics[0].characters_count == len(TEXT)
    if model != "tts-1":  # the done event's usage: characters in, milliseconds out
        assert metrics[0].input_tokens == len(TEXT)
        assert abs(metrics[0].output_tokens - metrics[0].audio_duration * 1000) <= 100, metrics[0]
