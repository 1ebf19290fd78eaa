"""A LiveKit agent that speaks through triton-tts, with LiveKit's own NVIDIA or OpenAI plugin.

Two doors of the gateway fit LiveKit's plugins unchanged:

- Riva's TTS API (``--riva-port``, 50051 by default): ``livekit.plugins.nvidia.TTS`` with
  ``use_ssl=False`` and a served voice (``triton-tts voices``; ``voice.speaker`` for a
  speaker of a multi-speaker voice). It speaks one ``SynthesizeOnline`` call per sentence,
  at 16 kHz.
- The OpenAI-compatible API (``/v1`` on the gateway's HTTP port, 8080 by default):
  ``livekit.plugins.openai.TTS`` with ``base_url``. With ``tts-1`` it reads the audio as it
  arrives; with any other model it asks for OpenAI's streamed events (``stream_format: sse``).

Speak a text into a WAV file, with no LiveKit server (``make serve`` running)::

    .venv/bin/python examples/livekit_agent.py say "Your order has shipped." -o order.wav
    .venv/bin/python examples/livekit_agent.py say "Your order has shipped." --openai http://localhost:8080/v1

Or run it as an agent that greets whoever joins a room (LiveKit's CLI: ``dev``, ``start``,
``console``; it needs ``LIVEKIT_URL``, ``LIVEKIT_API_KEY`` and ``LIVEKIT_API_SECRET``)::

    .venv/bin/python examples/livekit_agent.py dev

Needs ``livekit-agents`` with ``livekit-plugins-nvidia`` (and ``livekit-plugins-openai``);
nothing here reaches the network until a synthesis starts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import wave
from typing import Any

from livekit.agents import Agent, AgentServer, AgentSession, JobContext, cli, tts

# livekit-plugins-nvidia ships no type information (mypy finds no `nvidia` to import)
from livekit.plugins import nvidia, openai  # type: ignore[attr-defined]

SERVER = "localhost:50051"  # the gateway's Riva port
BASE_URL = "http://localhost:8080/v1"  # the gateway's OpenAI-compatible API
VOICE = "joe"  # a served voice: `triton-tts voices` lists them
LANGUAGE = "en-US"


def make_tts(
    server: str = SERVER, voice: str = VOICE, language_code: str = LANGUAGE, api_key: str | None = None
) -> nvidia.TTS:
    """LiveKit's NVIDIA TTS, speaking through the triton-tts gateway's Riva port ``server``."""
    return nvidia.TTS(
        server=server,
        voice=voice,
        language_code=language_code,
        use_ssl=False,  # a local server; behind a TLS proxy, True
        # the gateway's key, when it has keys; over a plain port it goes with each synthesis,
        # not with list_voices() (riva.client puts it on the channel only with TLS)
        api_key=api_key,
    )


def make_openai_tts(
    base_url: str = BASE_URL, voice: str = VOICE, model: str = "tts-1", api_key: str = "unused"
) -> openai.TTS:
    """LiveKit's OpenAI TTS, speaking through the triton-tts gateway's ``/v1``. ``tts-1``: the
    audio as it is made; any other model: OpenAI's streamed events. The key is the gateway's
    (any text when it has none: OpenAI's client insists on one)."""
    return openai.TTS(base_url=base_url, voice=voice, model=model, api_key=api_key, response_format="pcm")


async def speak(engine: tts.TTS[Any], text: str) -> tuple[bytes, int]:
    """``text`` through ``engine``, outside any room: its 16-bit mono PCM and rate."""
    pcm = bytearray()
    rate = engine.sample_rate
    async with engine.synthesize(text) as stream:
        async for audio in stream:
            pcm.extend(audio.frame.data.tobytes())
            rate = audio.frame.sample_rate
    return bytes(pcm), rate


class Greeter(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You are a helpful voice assistant.")


async def entrypoint(ctx: JobContext) -> None:
    """A session whose voice is triton-tts; give it ``stt=``, ``llm=`` and ``vad=`` of your
    choice to hold a conversation."""
    session: AgentSession[None] = AgentSession(tts=make_tts())
    await session.start(room=ctx.room, agent=Greeter())
    await session.say("Hello! This voice comes from Triton.")


def write_wav(path: str, pcm: bytes, sample_rate: int) -> None:
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)


async def say(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="livekit_agent.py say",
        description="Speak a text into a WAV file through LiveKit's plugin, without a room.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("text")
    parser.add_argument("-o", "--output", default="livekit.wav", help="the WAV file to write")
    parser.add_argument("--server", default=SERVER, help="the gateway's Riva address")
    parser.add_argument("--openai", metavar="BASE_URL", help="use the OpenAI plugin at this /v1 instead")
    parser.add_argument("--model", default="tts-1", help="the OpenAI plugin's model")
    parser.add_argument("--voice", default=VOICE)
    args = parser.parse_args(argv)
    engine = (
        make_openai_tts(args.openai, args.voice, args.model)
        if args.openai
        else make_tts(args.server, args.voice)
    )
    try:
        pcm, rate = await speak(engine, args.text)
    finally:
        await engine.aclose()
    write_wav(args.output, pcm, rate)
    print(f"{args.output}: {len(pcm) / 2 / rate:.2f} s at {rate} Hz")


if __name__ == "__main__":
    if sys.argv[1:2] == ["say"]:
        asyncio.run(say(sys.argv[2:]))
    else:
        server = AgentServer()
        server.rtc_session(entrypoint)
        cli.run_app(server)
