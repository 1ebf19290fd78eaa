"""The voices Triton serves, and the names callers may use for them: the voices' own,
``voice:speaker`` (by speaker name or id), OpenAI's voice names and ``--voice-alias``."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from triton_tts.client import AsyncTTSClient, TTSError, VoiceInfo
from triton_tts.client.voices import XTTS_KIND, split_voice_name
from triton_tts.contract.styles import is_mix
from triton_tts.contract.validation import MAX_SPEED, MIN_SPEED
from triton_tts.gateway.errors import from_tts_error, invalid
from triton_tts.gateway.settings import GatewaySettings

# OpenAI's voice names: each is the default voice (its speaker of that name, if it has
# one) unless --voice-alias says otherwise.
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
)  # fmt: skip
VOICES_TTL_S = 30.0  # how long the voice list read from Triton is reused
SPEAKER_ID = re.compile(r"[0-9]{1,9}")  # ASCII digits only: str.isdigit() takes '³', int() does not


class Resolved(NamedTuple):
    """A voice name as Triton takes it: the voice, a speaker id, a style voice's mix."""

    voice: str
    speaker: int | None
    mix: str | None = None


class Voices:
    """The voices Triton serves (read from its config, reused for VOICES_TTL_S) and the
    names callers may use for them."""

    def __init__(self, client: Callable[[], AsyncTTSClient], aliases: dict[str, str]) -> None:
        self._client = client
        self._aliases = aliases
        self._served: list[VoiceInfo] = []
        self._read_at = -math.inf
        self._lock = asyncio.Lock()

    async def served(self) -> list[VoiceInfo]:
        async with self._lock:
            if time.monotonic() - self._read_at > VOICES_TTL_S or not self._served:
                try:
                    self._served = await self._client().voices()
                except TTSError as err:
                    raise from_tts_error(err, GatewaySettings()) from None
                self._read_at = time.monotonic()
            return self._served

    async def aliases(self) -> dict[str, str]:
        served = await self.served()
        default = served[0].name
        names = {v.name for v in served}
        # An OpenAI name reaches the default voice's speaker of that name when it has one
        # (Kokoro's af_alloy, am_echo, bm_fable, af_nova, am_onyx), else the default voice.
        speakers = {s.partition("_")[2]: s for s in served[0].speakers if s[:1].isalpha() and "_" in s}
        out = {
            name: f"{default}:{speakers[name]}" if name in speakers else default
            for name in OPENAI_VOICES
            if name not in names
        }
        out.update(self._aliases)
        return out

    async def resolve(self, name: str | None) -> Resolved:
        """``name`` (a served voice, ``voice:speaker`` by speaker name or id, a speaker's
        name alone, an alias, or a mix of a style voice's speakers) -> (voice, speaker id,
        mix). An XTTS voice's speaker that the build did not list (one uploaded since) goes
        on by name, as VOICE ``voice:speaker``."""
        served = {v.name: v for v in await self.served()}
        wanted = (name or "").strip() or next(iter(served))
        wanted = (await self.aliases()).get(wanted, wanted)
        mixed = self._mix(wanted, served)
        if mixed is not None:
            return mixed
        base, dot, sub = wanted.rpartition(".")
        if dot and base in served and ":" not in wanted:  # "kokoro.af_bella": as Riva names speakers
            wanted = f"{base}:{sub}"
        voice_name, speaker = split_voice_name(wanted)
        voice = served.get(voice_name)
        if voice is None and not speaker:
            # a bare speaker name ("af_bella", as Kokoro's own servers take it): the first
            # served voice, in order, that has a speaker of that name
            for candidate in served.values():
                if wanted in candidate.speakers:
                    return Resolved(candidate.name, int(candidate.speakers[wanted]))
        if voice is None:
            known = sorted(served) + sorted(await self.aliases())
            raise invalid(f"unknown voice {name!r}; this server has: {', '.join(known)}", "voice")
        if not speaker:
            return Resolved(voice.name, None)
        if speaker in voice.speakers:
            return Resolved(voice.name, int(voice.speakers[speaker]))
        if (
            SPEAKER_ID.fullmatch(speaker) and int(speaker) in voice.speakers.values()
        ):  # by id, as in tritonclient
            return Resolved(voice.name, int(speaker))
        if voice.kind == XTTS_KIND and not SPEAKER_ID.fullmatch(speaker):
            # a speaker stored since the build (the upload): the server looks it up by name
            return Resolved(f"{voice.name}:{speaker}", None)
        speakers = ", ".join(sorted(voice.speakers)) or "none"
        raise invalid(f"voice {voice.name!r} has no speaker {speaker!r}; it has: {speakers}", "voice")

    def _mix(self, wanted: str, served: dict[str, VoiceInfo]) -> Resolved | None:
        """A mix of a style voice's speakers (``af_bella:0.7+af_sky:0.3``, optionally after
        ``voice.`` or ``voice:``), or None when ``wanted`` is not one. The server checks the
        speakers and weights (triton_tts.contract.styles.parse_mix); only which voice is found here."""
        if not is_mix(wanted):
            return None
        head, sep, rest = wanted.partition(":")
        if head in served and sep and is_mix(rest):  # "kokoro:af_bella:0.7+af_sky:0.3"
            voice, mix = served[head], rest
        else:
            first = re.split(r"[+:(]", wanted, maxsplit=1)[0].strip()
            voice_name, dot, _ = first.rpartition(".")
            if dot and voice_name in served:  # "kokoro.af_bella:0.7+kokoro.af_sky:0.3"
                voice = served[voice_name]
            else:  # bare speaker names: the first style voice that has the first one
                found = [v for v in served.values() if v.mixes and first in v.speakers]
                if not found:
                    mixing = ", ".join(v.name for v in served.values() if v.mixes) or "none"
                    raise invalid(
                        f"voice {wanted!r} is a mix, but no mixing voice has speaker {first!r} "
                        f"(voices that mix: {mixing})",
                        "voice",
                    )
                voice = found[0]
            mix = wanted
        if not voice.mixes:
            raise invalid(
                f"voice {voice.name!r} does not mix speakers (style voices such as Kokoro do)", "voice"
            )
        return Resolved(voice.name, None, mix)

    async def listing(self) -> dict[str, Any]:
        served = await self.served()
        return {
            "default": served[0].name,
            "voices": [
                {
                    "id": v.name,
                    "name": v.name,
                    "language": v.language,
                    "sample_rate": v.sample_rate,
                    "speakers": sorted(v.speakers, key=lambda s: v.speakers[s]),
                    "timestamps": v.timestamps,  # word times (captioned speech, words messages)
                    "mixes": v.mixes,  # speakers mix ("af_bella:0.7+af_sky:0.3")
                }
                for v in served
            ],
            "aliases": await self.aliases(),
            # The bounds the server checks (validation), for a caller's own controls.
            "speed": {"min": MIN_SPEED, "max": MAX_SPEED},
        }
