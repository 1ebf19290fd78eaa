"""Per-item lengths in a padded batch, as torch ops the ONNX exporter traces: masks,
the LATENT frame padding, hard alignments from durations."""

from __future__ import annotations

import torch

# LATENT frames are padded to a multiple of this (native GPU batching); decided there.
from triton_tts.runtime.batching import FRAME_MULTIPLE


def sequence_mask(lengths: torch.Tensor, max_len: torch.Tensor | int) -> torch.Tensor:
    steps = torch.arange(max_len, device=lengths.device)  # type: ignore[arg-type]
    return steps.unsqueeze(0) < lengths.unsqueeze(1)


def pad_frames(latent: torch.Tensor, multiple: int = FRAME_MULTIPLE) -> torch.Tensor:
    """Zero-pad the frame axis up to a multiple (same shapes batch on native backends)."""
    extra = (multiple - latent.shape[-1] % multiple) % multiple
    return torch.cat([latent, latent.new_zeros(latent.shape[0], latent.shape[1], extra)], dim=-1)


def alignment_path(durations: torch.Tensor, x_mask: torch.Tensor, y_mask: torch.Tensor) -> torch.Tensor:
    """[B, T_in] integer durations -> [B, T_in, T_out] hard alignment (masked)."""
    ends = torch.cumsum(durations, dim=1)
    starts = ends - durations
    frames = torch.arange(y_mask.shape[-1], device=durations.device).view(1, 1, -1)
    path = (frames >= starts.unsqueeze(-1)) & (frames < ends.unsqueeze(-1))
    mask = x_mask.unsqueeze(-1) & y_mask.unsqueeze(1)
    return (path & mask).to(torch.float32)


def valid_frames(latent: torch.Tensor) -> torch.Tensor:
    """[B, C, T] -> [B]: frames up to the last one with any non-zero channel. Padding
    frames are exact zeros (acoustic outputs are masked); a real frame never is."""
    frames = torch.arange(1, latent.shape[-1] + 1, device=latent.device).unsqueeze(0)
    used = (latent != 0).any(dim=1).to(frames.dtype)
    return (used * frames).amax(dim=1)
