"""The voice-agent frameworks' own TTS plugins against the gateway's doors, as their users run
them: Pipecat's NvidiaTTSService and LiveKit's nvidia.TTS through Riva's API (the gateway's
--riva-port), LiveKit's openai.TTS through /v1. Each plugin is built by the function of
examples/ that shows users how (make_tts, make_openai_tts), so the examples stay runnable.

Pipecat runs without a transport or a pipeline: the service gets the set-up a pipeline gives
its processors (a clock and a task manager, FrameProcessorSetup), and the test calls its
run_tts itself. LiveKit's TTS needs no room and no job: synthesize() is a stream of its own.
Syntheses are few and short: the suite shares two cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from pipecat.clocks.system_clock import SystemClock
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor, FrameProcessorSetup
from pipecat.services.nvidia.tts import NvidiaTTSService
from pipecat.utils.asyncio.task_manager import TaskManager

from examples import livekit_agent, pipecat_agent
from tests.helpers import running_gateway, synthesize, wait_until
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.quality.intelligibility import transcribe, word_error_rate

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")

# per_sentence sends each sentence in a call of its own, stitched all down one call.
# Sentences the recogniser follows whatever the voice draws (the Riva door speaks with the
# voice's noise), enough words that one misheard phrase ("at nine in": "a man") stays inside
# the margin: measured through the door, as four calls at 16 kHz and four requests on one
# call at 24 kHz, twelve draws each: at most two words missed. Shorter texts, and others
# ("Please call us if you have any questions."), score 0 to 0.5 from one draw to the next.
SENTENCES = (
    "Good morning, welcome to the hotel.",
    "I would like to book a table for two people.",
    "Would you like to hear the weather for today?",
    "The meeting starts at nine in the morning.",
)
TEXT = " ".join(SENTENCES)
# What the frameworks ask for: Pipecat's pipelines run at 24 kHz, LiveKit's nvidia plugin at 16.
PIPECAT_RATE = 24_000
LIVEKIT_RATE = 16_000
# The speech recogniser's errors on a plugin's audio against the same text through tts (the
# voice's noise makes each draw differ; broken audio scores near 1): as tests/test_gateway.py.
WER_MARGIN = 0.15
# Its length against tts's: the voice draws its durations, and a text sent in several
# requests has the edges of each.
DURATION_SLACK = 0.2
# How long Pipecat waits for a context's next audio before it ends the context (its default
# is 3 s). The tests check what arrives; on two cores shared with the suite a chunk may be
# late, and a context ended early drops what comes after.
PIPECAT_CONTEXT_WAIT_S = 30.0
HANG_S = 120  # a deadline for a plugin left waiting, not a claim about speed


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(work, HANG_S))


@dataclass(frozen=True)
class Doors:
    base: str  # the gateway's HTTP base URL
    riva: str  # its Riva address, host:port
    voices: list[dict[str, Any]]  # /v1/audio/voices's entries
    voice: str  # the default voice


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def doors(server: TritonServer) -> Iterator[Doors]:
    """A gateway in front of the session server with Riva's API on a free port."""
    riva_port = free_port()
    with running_gateway(server.grpc_url, "--riva-port", str(riva_port)) as base:
        wait_until(lambda: _accepts(riva_port), 60, f"the gateway's Riva port {riva_port}")
        with urllib.request.urlopen(f"{base}/v1/audio/voices", timeout=30) as response:
            listing = json.load(response)
        yield Doors(base, f"localhost:{riva_port}", listing["voices"], listing["default"])


@dataclass(frozen=True)
class Reference:
    wer: float  # the recogniser's word error rate on TEXT said by tts
    seconds: float


@pytest.fixture(scope="module")
def reference(server: TritonServer) -> Reference:
    """TEXT through tts, with the voice's own settings (what the Riva door uses)."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    try:
        audio, rate = synthesize(client, TEXT)
    finally:
        client.close()
    return Reference(word_error_rate([TEXT], [transcribe(audio, rate)]), len(audio) / rate)


def pcm16(data: bytes) -> npt.NDArray[np.float32]:
    assert data and len(data) % 2 == 0, len(data)
    return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0


def assert_speaks_text(pcm: bytes, rate: int, reference: Reference) -> None:
    heard = pcm16(pcm)
    seconds = len(heard) / rate
    assert abs(seconds - reference.seconds) <= DURATION_SLACK * reference.seconds, (
        seconds,
        reference.seconds,
    )
    said = transcribe(heard, rate)
    assert word_error_rate([TEXT], [said]) <= reference.wer + WER_MARGIN, (said, reference.wer)


# --- Pipecat ----------------------------------------------------------------------------------


class Downstream(FrameProcessor):
    """What a processor pushes downstream, kept in place of the pipeline's next processor."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []

    async def queue_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM, callback: Any = None
    ) -> None:
        self.frames.append(frame)


@asynccontextmanager
async def set_up(service: NvidiaTTSService, *, playback: bool) -> AsyncIterator[list[Frame]]:
    """``service`` set up as a pipeline sets up its processors (its setup() fetches the Riva
    config: start-up fails if that errors); with ``playback``, also started, so that its
    audio contexts play, as when a StartFrame reaches it. Yields what it pushes downstream;
    on leaving, an EndFrame's stop (waits until every context has played) and clean-up."""
    downstream = Downstream()
    service.link(downstream)
    # No pipeline worker: nothing of a TTS service reads it (it is for app resources).
    clock = SystemClock()  # type: ignore[no-untyped-call]
    setup = FrameProcessorSetup(clock=clock, task_manager=TaskManager(), pipeline_worker=None)  # type: ignore[arg-type]
    await service.setup(setup)
    try:
        if playback:
            await service.start(StartFrame())
        yield downstream.frames
        if playback:
            await service.stop(EndFrame())
    finally:
        await service.cleanup()  # type: ignore[no-untyped-call]


def audio_of(frames: list[Frame]) -> tuple[bytes, list[TTSAudioRawFrame]]:
    audio = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert audio, [type(f).__name__ for f in frames]
    assert {(f.sample_rate, f.num_channels) for f in audio} == {(PIPECAT_RATE, 1)}
    return b"".join(f.audio for f in audio), audio


def test_pipecat_per_sentence_yields_the_audio_of_each_call(doors: Doors, reference: Reference) -> None:
    """per_sentence: each run_tts opens its SynthesizeOnline call and yields the audio itself."""

    async def drive() -> list[list[Frame]]:
        service = pipecat_agent.make_tts(doors.riva, doors.voice, synthesis_mode="per_sentence")
        calls = []
        async with set_up(service, playback=False):
            for sentence in SENTENCES:
                calls.append([f async for f in service.run_tts(sentence, "turn-1") if f is not None])
        return calls

    calls = run(drive())
    for frames in calls:
        assert not [f for f in frames if isinstance(f, ErrorFrame)], frames
        audio_of(frames)  # every call spoke
    assert isinstance(calls[0][0], TTSStartedFrame)  # the turn's first call opens it
    pcm, _ = audio_of([f for frames in calls for f in frames])
    assert_speaks_text(pcm, PIPECAT_RATE, reference)


def test_pipecat_stitched_speaks_a_turn_down_one_stream(doors: Doors, reference: Reference) -> None:
    """stitched: the turn's sentences go down one SynthesizeOnline call, each a request of its
    own; run_tts yields no audio, the audio comes through the turn's audio context and is
    played downstream; flush_audio half-closes the call, and the context ends when the
    server ends the call."""

    async def drive() -> tuple[list[Frame | None], list[Frame], float]:
        service = pipecat_agent.make_tts(
            doors.riva,
            doors.voice,
            synthesis_mode="stitched",
            stop_frame_timeout_s=PIPECAT_CONTEXT_WAIT_S,
        )
        async with set_up(service, playback=True) as downstream:
            yielded = [f for s in SENTENCES async for f in service.run_tts(s, "turn-1")]
            await service.flush_audio("turn-1")
            flushed = time.monotonic()
        return yielded, downstream, time.monotonic() - flushed

    yielded, downstream, ended_s = run(drive())
    # The context ends when the server ends the call; past the wait, Pipecat gave up on it.
    assert ended_s < PIPECAT_CONTEXT_WAIT_S, f"the call went on {ended_s:.0f} s after the half-close"
    assert isinstance(yielded[0], TTSStartedFrame) and yielded[1:] == [None] * len(SENTENCES), yielded
    assert not [f for f in downstream if isinstance(f, ErrorFrame)], downstream
    pcm, _ = audio_of(downstream)
    assert_speaks_text(pcm, PIPECAT_RATE, reference)


def test_the_pipecat_example_runs_a_pipeline(doors: Doors) -> None:
    """examples/pipecat_agent.py's pipeline (the service and a recorder, a TTSSpeakFrame then
    an EndFrame) ends with the audio recorded."""
    service = pipecat_agent.make_tts(doors.riva, doors.voice)
    pcm, rate = run(pipecat_agent.speak(service, "Hello."))
    assert rate == PIPECAT_RATE and len(pcm) / 2 / rate > 0.2, (rate, len(pcm))


# --- LiveKit ----------------------------------------------------------------------------------


def livekit_names(voices: list[dict[str, Any]]) -> set[str]:
    """The names LiveKit's list_voices() makes of the served voices: voice.speaker for each
    speaker of a multi-speaker voice (Riva's subvoices), else the voice's own name."""
    names = set()
    for voice in voices:
        speakers = voice["speakers"] if len(voice["speakers"]) > 1 else []
        names.update([f"{voice['id']}.{s}" for s in speakers] or [voice["id"]])
    return names


def test_livekit_nvidia_lists_the_voices_and_speaks(doors: Doors, reference: Reference) -> None:
    """LiveKit's nvidia.TTS: list_voices() (GetRivaSynthesisConfig) names the served voices;
    synthesize() (SynthesizeOnline per sentence, 16 kHz LINEAR_PCM) yields 16 kHz frames that
    say the text. The plugin logs a failed call and goes on, so no audio is its error."""

    async def drive() -> tuple[dict[str, Any], list[Any]]:
        engine = livekit_agent.make_tts(doors.riva, doors.voice, language_code="en-US")
        try:
            voices = await asyncio.to_thread(engine.list_voices)
            async with engine.synthesize(TEXT) as stream:
                frames = [audio.frame async for audio in stream]
        finally:
            await engine.aclose()
        return voices, frames

    voices, frames = run(drive())
    assert {name for entry in voices.values() for name in entry["voices"]} == livekit_names(doors.voices)
    assert frames and {(f.sample_rate, f.num_channels) for f in frames} == {(LIVEKIT_RATE, 1)}
    assert_speaks_text(b"".join(f.data.tobytes() for f in frames), LIVEKIT_RATE, reference)


def test_livekit_openai_speaks_through_v1(doors: Doors, reference: Reference) -> None:
    """LiveKit's openai.TTS with base_url at the gateway's /v1 and tts-1: the audio as it is
    made (pcm, 24 kHz), read by the plugin."""

    async def drive() -> tuple[bytes, int]:
        engine = livekit_agent.make_openai_tts(f"{doors.base}/v1", doors.voice, model="tts-1")
        try:
            return await livekit_agent.speak(engine, TEXT)
        finally:
            await engine.aclose()

    pcm, rate = run(drive())
    assert rate == 24_000
    assert_speaks_text(pcm, rate, reference)


# --- The examples themselves ------------------------------------------------------------------


def test_the_examples_build_their_services_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples' services are built without a key in the environment and without a
    server (the plugins connect on first use); the scripts' command lines parse."""
    for name in ("OPENAI_API_KEY", "NVIDIA_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(pipecat_agent.make_tts(synthesis_mode="stitched"), NvidiaTTSService)
    livekit_agent.make_tts()
    livekit_agent.make_openai_tts()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "NVIDIA_API_KEY")}
    for script in (["pipecat_agent.py", "--help"], ["livekit_agent.py", "say", "--help"]):
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / script[0]), *script[1:]],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and "--voice" in done.stdout, (script, done.stderr[-2000:])


def test_both_plugins_work_with_a_keyed_gateway_on_a_plaintext_port(server: TritonServer) -> None:
    """With API keys on and no TLS, riva.client sends the plugins' key with each synthesis
    but not with GetRivaSynthesisConfig (Pipecat's start-up, LiveKit's list_voices): the
    config answers without a key, the syntheses are served with it."""
    riva_port, key = free_port(), "frameworks-key"
    with running_gateway(server.grpc_url, "--riva-port", str(riva_port), env={"TRITON_TTS_API_KEY": key}):
        wait_until(lambda: _accepts(riva_port), 60, f"the gateway's Riva port {riva_port}")
        riva = f"localhost:{riva_port}"

        async def drive() -> tuple[list[Frame], dict[str, Any], list[Any]]:
            service = pipecat_agent.make_tts(riva, "joe", synthesis_mode="per_sentence", api_key=key)
            async with set_up(service, playback=False):  # start-up reads the config
                frames = [f async for f in service.run_tts(SENTENCES[0], "turn-1") if f is not None]
            engine = livekit_agent.make_tts(riva, "joe", language_code="en-US", api_key=key)
            try:
                voices = await asyncio.to_thread(engine.list_voices)
                async with engine.synthesize(SENTENCES[0]) as stream:
                    lk_frames = [audio.frame async for audio in stream]
            finally:
                await engine.aclose()
            return frames, voices, lk_frames

        frames, voices, lk_frames = run(drive())
    assert not [f for f in frames if isinstance(f, ErrorFrame)], frames
    audio_of(frames)
    assert "joe" in {name for entry in voices.values() for name in entry["voices"]}
    assert lk_frames and sum(f.samples_per_channel for f in lk_frames) > LIVEKIT_RATE // 4
