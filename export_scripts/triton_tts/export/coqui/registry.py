"""The Coqui model families this export supports, and how each one is exported.

Adding a family: a wrapper module (see :mod:`.vits` for a one-graph family, whose
``stages`` returns the acoustic and vocoder wrappers, or :mod:`.tacotron2` for one that
writes its own files), then an entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_tts.contract.voice import Voice
from triton_tts.export.coqui import forward_tts, glow_tts, tacotron2, vits
from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.onnx_export import Stages, export_stages

# Writes a family's ONNX files into the voice folder; returns the voice set up for them.
Exporter = Callable[[Loaded, Path, Voice], Voice]


@dataclass(frozen=True)
class Family:
    export: Exporter
    # A mel model: its vocoder is a separate Coqui model (VITS decodes its own latent).
    needs_vocoder: bool
    # The voice's default noise, the request's NOISE_SCALE / NOISE_W when it gives none.
    noise_scale: float = 0.0
    noise_w: float = 0.0


def _one_graph(build: Callable[[Loaded], Stages]) -> Exporter:
    """The exporter of a family whose acoustic stage is one graph."""

    def export(loaded: Loaded, out: Path, voice: Voice) -> Voice:
        return export_stages(build(loaded), out, voice)

    return export


FAMILIES: dict[str, Family] = {  # Coqui's config ``model`` name -> how it is exported
    # Coqui's own inference defaults for VITS
    "vits": Family(_one_graph(vits.stages), needs_vocoder=False, noise_scale=0.667, noise_w=0.8),
    "fast_pitch": Family(_one_graph(forward_tts.stages), needs_vocoder=True),
    "fastspeech2": Family(_one_graph(forward_tts.stages), needs_vocoder=True),
    "glow_tts": Family(_one_graph(glow_tts.stages), needs_vocoder=True),
    "tacotron2": Family(tacotron2.export, needs_vocoder=True),  # step-wise: three acoustic graphs
}


def family_of(loaded: Loaded) -> Family:
    """The family entry of ``loaded``; ValueError when it cannot be exported."""
    family = FAMILIES.get(loaded.family)
    if family is None:
        raise ValueError(
            f"Coqui model family {loaded.family!r} is not supported; supported: {', '.join(FAMILIES)}"
        )
    if family.needs_vocoder and loaded.vocoder is None:
        raise ValueError(
            f"a {loaded.family} model needs a vocoder: give --vocoder-name or --vocoder-checkpoint"
        )
    return family
