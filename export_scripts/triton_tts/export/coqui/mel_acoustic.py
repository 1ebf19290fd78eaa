"""What the FastPitch, FastSpeech2 and Glow-TTS acoustic wrappers share.

Coqui's GAN vocoders replicate ``inference_padding`` edge frames at each end of the mel
before the generator; here the acoustic stage does that per item (the vocoder only sees
the padded batch), so FRAME_COUNT includes those frames and an item's waveform is exactly
Coqui's ``vocoder.inference`` output, (frames + 2p) * hop.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from triton_tts.export.coqui.masks import pad_frames


def edge_pad(mel: torch.Tensor, frames: torch.Tensor, edge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, C, T] mel with per-item ``frames`` -> each item's first and last frame repeated
    ``edge`` times at its own ends (Coqui's ``F.pad(..., "replicate")`` at batch 1), zeros
    after, frame axis padded to the LATENT multiple; and the new frame counts.

    ``F.pad`` on the batch would replicate the batch's last column, which for a shorter item
    is padding, so the source frame is gathered per item instead."""
    count = frames + 2 * edge
    steps = torch.arange(mel.shape[-1] + 2 * edge, device=mel.device).unsqueeze(0)
    source = torch.minimum(steps - edge, (frames - 1).unsqueeze(1)).clamp_min(0)
    gathered = torch.gather(mel, 2, source.unsqueeze(1).expand(-1, mel.shape[1], -1))
    keep = (steps < count.unsqueeze(1)).unsqueeze(1).to(mel.dtype)
    return pad_frames(gathered * keep), count


def lead_in(durations: torch.Tensor, edge: int) -> torch.Tensor:
    """Frames per id [B, T] with the ``edge`` frames :func:`edge_pad` puts before an item's
    first frame counted in its first id (a framing id, or the first sound repeated), so
    that word times start where the waveform says the words."""
    return torch.cat([durations[:, :1] + edge, durations[:, 1:]], dim=1)


class MelAcoustic(nn.Module):
    """The model, the vocoder's edge frames (see :func:`edge_pad`), and speaker
    conditioning by id only."""

    def __init__(self, model: Any, edge_frames: int) -> None:
        super().__init__()
        if getattr(model, "embedded_speaker_dim", 0) and not hasattr(model, "emb_g"):
            raise NotImplementedError("d-vector speaker conditioning is not supported; speaker ids are")
        self.model = model
        self.edge_frames = edge_frames
