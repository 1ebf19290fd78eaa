"""Glow-TTS: the acoustic wrapper, with the Coqui GAN vocoder of :mod:`.mel_vocoder`."""

from __future__ import annotations

import torch
from torch.nn import functional

from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.masks import alignment_path, sequence_mask
from triton_tts.export.coqui.mel_acoustic import MelAcoustic, edge_pad, lead_in
from triton_tts.export.coqui.mel_vocoder import mel_vocoder
from triton_tts.export.coqui.onnx_export import Stages


class GlowTTSAcoustic(MelAcoustic):
    """Glow-TTS: encoder, durations, prior expansion, noise, reverse flow -> masked mel with
    edge frames.

    The encoder and the flow mask their own padding; what Coqui's ``inference`` gets wrong
    in a batch is the duration floor (``clamp_min(ceil(w), 1)`` after masking gives padded
    tokens a frame each) and a single noise scale. The flow squeezes frame pairs and drops
    an odd last frame, so an item has ``frames // num_squeeze * num_squeeze`` mel frames, as
    at batch 1. Noise is per item from SCALES[:, 0] (0: deterministic)."""

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, speaker_id: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model = self.model
        noise_scale, length_scale = scales[:, 0].view(-1, 1, 1), scales[:, 1].view(-1, 1, 1)
        g = functional.normalize(model.emb_g(speaker_id)).unsqueeze(-1) if hasattr(model, "emb_g") else None
        o_mean, o_log_scale, o_dur_log, x_mask = model.encoder(ids, lengths, g=g)
        w = (torch.exp(o_dur_log) - 1) * x_mask * length_scale
        w_ceil = torch.clamp_min(torch.ceil(w), 1) * x_mask  # padded tokens: 0 frames
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(y_lengths, y_lengths.max())
        path = alignment_path(w_ceil.squeeze(1), x_mask.squeeze(1) > 0, y_mask).transpose(1, 2)
        y_mean = torch.matmul(path, o_mean.transpose(1, 2)).transpose(1, 2)
        y_log_scale = torch.matmul(path, o_log_scale.transpose(1, 2)).transpose(1, 2)
        y_mask_f = y_mask.unsqueeze(1).to(y_mean.dtype)
        z = (y_mean + torch.exp(y_log_scale) * torch.randn_like(y_mean) * noise_scale) * y_mask_f
        y, _ = model.decoder(z, y_mask_f, g=g, reverse=True)
        squeeze = int(model.decoder.num_squeeze)
        frames = torch.div(y_lengths, squeeze, rounding_mode="floor") * squeeze
        mel = y * sequence_mask(frames, y.shape[-1]).unsqueeze(1).to(y.dtype)
        durations = lead_in(w_ceil.squeeze(1), self.edge_frames)  # an odd last frame dropped: clipped
        return (*edge_pad(mel, frames, self.edge_frames), durations)


def stages(loaded: Loaded) -> Stages:
    vocoder, edge = mel_vocoder(loaded)
    return Stages(GlowTTSAcoustic(loaded.tts, edge), vocoder, False)
