"""A Pipecat pipeline that speaks through triton-tts, with Pipecat's own NVIDIA TTS service.

The gateway serves Riva's TTS API (``triton-tts gateway --riva-port``, 50051 by default, and
``triton-tts serve`` starts it), which is what Pipecat's ``NvidiaTTSService`` calls: point it
at the gateway with ``use_ssl=False`` and one of the served voices (``triton-tts voices``). No
NVIDIA key is needed. A gateway started with keys takes one as ``api_key``; over a plain
(non-TLS) port the plugin sends it with each synthesis but not with the
``GetRivaSynthesisConfig`` of its start-up (riva.client puts the key on the channel only
with TLS).

Run it against a local server (``make serve``); it speaks the text into a WAV file:

    .venv/bin/python examples/pipecat_agent.py "Your order has shipped." -o order.wav

In a voice agent the service goes where any Pipecat TTS goes, after the LLM::

    Pipeline([transport.input(), stt, user_aggregator, llm, make_tts(), transport.output(),
              assistant_aggregator])

Needs ``pipecat-ai[nvidia]``; nothing here reaches the network until a pipeline runs.
"""

from __future__ import annotations

import argparse
import asyncio
import wave
from typing import Any

from pipecat.frames.frames import EndFrame, Frame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.nvidia.tts import NvidiaTTSService, NvidiaTTSSynthesisMode
from pipecat.workers.runner import WorkerRunner

SERVER = "localhost:50051"  # the gateway's Riva port
VOICE = "joe"  # a served voice: `triton-tts voices` lists them
SAMPLE_RATE = 24_000  # Pipecat's usual output rate; the server resamples to any rate asked


def make_tts(
    server: str = SERVER,
    voice: str = VOICE,
    *,
    synthesis_mode: str = NvidiaTTSSynthesisMode.PER_SENTENCE,
    sample_rate: int = SAMPLE_RATE,
    api_key: str | None = None,
    **options: Any,
) -> NvidiaTTSService:
    """Pipecat's NVIDIA TTS service, speaking through the triton-tts gateway at ``server``.

    ``synthesis_mode``: ``per_sentence`` opens one ``SynthesizeOnline`` call per sentence;
    ``stitched`` sends a whole LLM answer's sentences down one call, spoken in order.
    ``options``: Pipecat's other TTS service options (``stop_frame_timeout_s``, ...).
    """
    return NvidiaTTSService(
        server=server,
        use_ssl=False,  # a local server; behind a TLS proxy, True
        api_key=api_key,  # the gateway's key, when it was started with keys
        sample_rate=sample_rate,
        settings=NvidiaTTSService.Settings(
            voice=voice, synthesis_mode=NvidiaTTSSynthesisMode(synthesis_mode)
        ),
        **options,
    )


class AudioRecorder(FrameProcessor):
    """Keeps the TTS audio that passes, in place of a transport's output."""

    def __init__(self) -> None:
        super().__init__()
        self.pcm = bytearray()
        self.sample_rate = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.pcm.extend(frame.audio)
            self.sample_rate = frame.sample_rate
        await self.push_frame(frame, direction)


async def speak(tts: NvidiaTTSService, text: str) -> tuple[bytes, int]:
    """Run a pipeline of ``tts`` and a recorder over ``text``: its 16-bit mono PCM and rate."""
    recorder = AudioRecorder()
    worker = PipelineWorker(Pipeline([tts, recorder]), cancel_on_idle_timeout=False)
    await worker.queue_frames([TTSSpeakFrame(text), EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
    return bytes(recorder.pcm), recorder.sample_rate


def write_wav(path: str, pcm: bytes, sample_rate: int) -> None:
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("text")
    parser.add_argument("-o", "--output", default="pipecat.wav", help="the WAV file to write")
    parser.add_argument("--server", default=SERVER, help="the gateway's Riva address")
    parser.add_argument("--voice", default=VOICE)
    parser.add_argument("--mode", choices=[m.value for m in NvidiaTTSSynthesisMode], default="per_sentence")
    parser.add_argument("--api-key", default=None, help="the gateway's key, if it has keys")
    args = parser.parse_args()
    tts = make_tts(args.server, args.voice, synthesis_mode=args.mode, api_key=args.api_key)
    pcm, rate = asyncio.run(speak(tts, args.text))
    write_wav(args.output, pcm, rate)
    print(f"{args.output}: {len(pcm) / 2 / rate:.2f} s at {rate} Hz")


if __name__ == "__main__":
    main()
