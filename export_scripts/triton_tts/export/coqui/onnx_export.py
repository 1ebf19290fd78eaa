"""Wrapper modules -> ONNX files: the exporter's settings, the public tensor names and
their dynamic axes, and the acoustic + vocoder pair of the one-graph families.

torch's legacy TorchScript-based exporter (``dynamo=False``) at opset 17; every file is
checked with ``onnx.checker``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import onnx
import torch
from torch import nn

from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.export.graph_surgery import cap_frames
from triton_tts.runtime.limits import frame_budget

OPSET = 17
ACOUSTIC_INPUTS = ["PHONEME_IDS", "PHONEME_LENGTH", "SCALES", "SPEAKER_ID"]
ACOUSTIC_OUTPUTS = ["LATENT", "FRAME_COUNT", "DURATIONS"]  # DURATIONS: frames per id
ACOUSTIC_AXES = {
    "PHONEME_IDS": {0: "batch", 1: "phonemes"},
    "PHONEME_LENGTH": {0: "batch"},
    "SCALES": {0: "batch"},
    "SPEAKER_ID": {0: "batch"},
    "LATENT": {0: "batch", 2: "frames"},
    "FRAME_COUNT": {0: "batch"},
    "DURATIONS": {0: "batch", 1: "phonemes"},
}
VOCODER_AXES = {
    "LATENT": {0: "batch", 2: "frames"},
    "SPEAKER_ID": {0: "batch"},
    "WAVEFORM": {0: "batch", 1: "samples"},
}


class Stages(NamedTuple):
    """A one-graph family's two wrappers: PHONEME_IDS... -> LATENT, FRAME_COUNT, DURATIONS and
    LATENT (+ SPEAKER_ID when ``speaker_vocoder``) -> WAVEFORM."""

    acoustic: nn.Module
    vocoder: nn.Module
    speaker_vocoder: bool


def example_inputs(voice: Voice, batch: int = 2, length: int = 40) -> tuple[torch.Tensor, ...]:
    """A padded batch of acoustic inputs to trace with (items of different lengths)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, max(2, len(voice.symbols)), (batch, length), generator=generator)
    lengths = torch.tensor([length - 7 * i for i in range(batch)], dtype=torch.long)
    scales = torch.tensor([[0.0, 1.0, 0.0]] * batch, dtype=torch.float32)
    speakers = torch.zeros(batch, dtype=torch.long)
    return ids, lengths, scales, speakers


def export_module(
    module: nn.Module,
    args: tuple[Any, ...],
    path: Path,
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> Path:
    module.eval()
    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={k: v for k, v in axes.items() if k in inputs + outputs},
            opset_version=OPSET,
            dynamo=False,
        )
    # An input the graph does not use (SPEAKER_ID of a one-speaker voice) is dropped by the
    # exporter; the repository builder reads which inputs survived from the file.
    onnx.checker.check_model(onnx.load(str(path)))
    return path


def export_stages(stages: Stages, out: Path, voice: Voice) -> Voice:
    """``acoustic.onnx`` (LATENT cut at the voice's frame budget) and ``vocoder.onnx``;
    returns ``voice`` set up for them."""
    acoustic, vocoder, speaker_vocoder = stages
    example = example_inputs(voice)
    export_module(acoustic, example, out / ACOUSTIC_FILE, ACOUSTIC_INPUTS, ACOUSTIC_OUTPUTS, ACOUSTIC_AXES)
    capped = onnx.load(str(out / ACOUSTIC_FILE))
    cap_frames(capped, frame_budget(voice.sample_rate, voice.hop_length))
    onnx.save(capped, str(out / ACOUSTIC_FILE))
    with torch.no_grad():
        latent = acoustic(*example)[0]
    vocoder_args: tuple[Any, ...] = (latent, example[3]) if speaker_vocoder else (latent,)
    vocoder_inputs = ["LATENT", "SPEAKER_ID"] if speaker_vocoder else ["LATENT"]
    export_module(vocoder, vocoder_args, out / VOCODER_FILE, vocoder_inputs, ["WAVEFORM"], VOCODER_AXES)
    # Mel acoustic wrappers repeat the GAN vocoder's edge frames per item (mel_acoustic).
    edge = int(getattr(acoustic, "edge_frames", 0))
    return replace(
        voice,
        latent_channels=int(latent.shape[1]),
        vocoder_uses_speaker=speaker_vocoder,
        mel_edge_frames=edge,
    )
