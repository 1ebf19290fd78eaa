"""One loaded Coqui model -> a voice folder: the family's ONNX files, voice.json, the
mask-free vocoder for one-item runs, and the chosen precision."""

from __future__ import annotations

import logging
from pathlib import Path

from triton_tts.contract.voice import VOCODER_FILE, VOCODER_UNPADDED_FILE, Voice
from triton_tts.export.coqui.arguments import PRECISIONS
from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.precision import convert_precision
from triton_tts.export.coqui.registry import family_of
from triton_tts.export.coqui.voice_description import voice_for
from triton_tts.export.vocoder_graph import write_unpadded
from triton_tts.quality.intelligibility import GateThresholds

log = logging.getLogger(__name__)


def export_coqui(
    loaded: Loaded,
    out: Path,
    name: str | None = None,
    precision: str = "fp32",
    gate: GateThresholds | None = None,
) -> Voice:
    """Export ``loaded`` into the voice folder ``out`` at ``precision``; FP16 and INT8
    through the precision gate, with ``gate``'s limits (a refusal raises ``GateRefused``
    and leaves the FP32 export in ``out``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    family = family_of(loaded)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    voice = voice_for(loaded, name or out.name, family.noise_scale, family.noise_w)
    voice = family.export(loaded, out, voice)
    voice.save(out)
    write_unpadded(out / VOCODER_FILE, out / VOCODER_UNPADDED_FILE)  # for one-item runs
    if precision != "fp32":
        voice = convert_precision(out, voice, precision, gate)
    log.info("exported %s (%s) to %s", loaded.source, loaded.family, out)
    return voice
