"""What a built repository serves: one description per voice, in one JSON.

A build writes it (:meth:`VoiceInfo.list_to_json`) into the ``voices`` parameter of the
``tts`` and ``tts_stream`` configs; the long-text models (triton_tts/runtime/long_text/), the
gateway and :meth:`TTSClient.voices` read it back (:meth:`VoiceInfo.list_from_json`).
The standard library only: the models inside Triton import it, and they need none of
the client's transports.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# A voice's models are its stages' and its tts_chunk ensemble's: the default voice keeps
# the plain names, another's end in __<voice>.
VOICE_SEPARATOR = "__"
CHUNK_MODEL = "tts_chunk"
# What serves a voice: its tts_chunk ensemble (acoustic model and vocoder), or XTTS's own
# decoupled model (a cloning voice: REFERENCE_AUDIO, or a named speaker by SPEAKER_ID).
CHUNKS_KIND = "chunks"
XTTS_KIND = "xtts"


def chunk_model(voice: str, default: bool) -> str:
    """The name of a voice's ``tts_chunk`` ensemble in the repository."""
    return CHUNK_MODEL if default else f"{CHUNK_MODEL}{VOICE_SEPARATOR}{voice}"


def split_voice_name(name: str) -> tuple[str, str]:
    """A voice as requests name it, ``voice`` or ``voice:speaker``, as (voice, speaker),
    each stripped ("" when left out). The one place the name is split: the gateway, the
    Riva door, the client and the models all read it here."""
    voice, _, speaker = name.partition(":")
    return voice.strip(), speaker.strip()


@dataclass(frozen=True)
class VoiceInfo:
    """One served voice. The first four fields are what a caller chooses by; the rest are
    what the server needs to send a text on (defaults: the default voice's)."""

    name: str
    language: str
    sample_rate: int
    speakers: dict[str, int]  # speaker name -> SPEAKER_ID; empty for a one-speaker voice
    tokens: str = "phonemes"  # what the voice's ids are made of (triton_tts/contract/voice.py)
    model: str = CHUNK_MODEL  # its tts_chunk ensemble
    # Its chunk budget, measured at build: triton_tts.runtime.limits.ChunkLimits as JSON, which
    # the server reads and the client passes over.
    chunk_limits: dict[str, Any] = field(default_factory=dict)
    # Whether its acoustic model says its durations: word timestamps (TIMESTAMPS input).
    timestamps: bool = False
    kind: str = CHUNKS_KIND  # CHUNKS_KIND or XTTS_KIND (then ``model`` is the XTTS model)
    # Whether its speakers mix (a style voice, Kokoro: VOICE_MIX "a:0.7+b:0.3").
    mixes: bool = False

    def stage_model(self, stage: str) -> str:
        """The voice's model of ``stage`` (preprocess, acoustic, ...), named as its ensemble is."""
        return stage + self.model.removeprefix(CHUNK_MODEL)

    @staticmethod
    def list_to_json(voices: Sequence[VoiceInfo]) -> str:
        """The ``voices`` parameter: every voice served, the default first."""
        return json.dumps(
            [
                {
                    "name": v.name,
                    "language": v.language,
                    "tokens": v.tokens,
                    "sample_rate": v.sample_rate,
                    "speakers": dict(sorted(v.speakers.items())),
                    "model": v.model,
                    "chunk_limits": v.chunk_limits,
                    "timestamps": v.timestamps,
                    **({"kind": v.kind} if v.kind != CHUNKS_KIND else {}),
                    **({"mixes": True} if v.mixes else {}),
                }
                for v in voices
            ],
            ensure_ascii=False,
        )

    @classmethod
    def list_from_json(cls, text: str) -> list[VoiceInfo]:
        """The voices a ``voices`` parameter names, the default first."""
        return [
            cls(
                name=v["name"],
                language=v.get("language", "en-us"),
                sample_rate=int(v["sample_rate"]),
                speakers={str(s): int(i) for s, i in v["speakers"].items()},
                tokens=v.get("tokens", "phonemes"),
                model=v["model"],
                chunk_limits=v.get("chunk_limits", {}),
                timestamps=bool(v.get("timestamps", False)),
                kind=str(v.get("kind", CHUNKS_KIND)),
                mixes=bool(v.get("mixes", False)),
            )
            for v in json.loads(text)
        ]
