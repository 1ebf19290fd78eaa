"""VITS, split at its latent: text encoder + durations + flow (acoustic), HiFi-GAN
waveform decoder (vocoder). VITS needs no separate Coqui vocoder."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.masks import alignment_path, pad_frames, sequence_mask
from triton_tts.export.coqui.onnx_export import Stages
from triton_tts.export.coqui.padding_safe import PaddingSafe


class VitsAcoustic(nn.Module):
    """Text encoder + duration predictor + flow (reverse) -> masked latent, frame counts,
    frames per id (``w_ceil``: word timestamps)."""

    def __init__(self, vits: Any) -> None:
        super().__init__()
        self.vits = vits

    def speaker_embedding(self, speaker_id: torch.Tensor) -> torch.Tensor | None:
        vits = self.vits
        if vits.args.use_speaker_embedding and vits.num_speakers > 1:
            return vits.emb_g(speaker_id).unsqueeze(-1)  # type: ignore[no-any-return]
        return None

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, speaker_id: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        vits = self.vits
        g = self.speaker_embedding(speaker_id)
        noise_scale, length_scale, noise_w = (scales[:, i].view(-1, 1, 1) for i in range(3))
        x, m_p, logs_p, x_mask = vits.text_encoder(ids, lengths)
        g_dp = g if vits.args.condition_dp_on_speaker else None
        if vits.args.use_sdp:
            logw = vits.duration_predictor(x, x_mask, g=g_dp, reverse=True, noise_scale=noise_w)
        else:
            logw = vits.duration_predictor(x, x_mask, g=g_dp)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)  # padded tokens: 0 frames
        frame_count = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(frame_count, frame_count.max())
        path = alignment_path(w_ceil.squeeze(1), x_mask.squeeze(1) > 0, y_mask)
        m_p = torch.matmul(path.transpose(1, 2), m_p.transpose(1, 2)).transpose(1, 2)
        logs_p = torch.matmul(path.transpose(1, 2), logs_p.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        y_mask_f = y_mask.unsqueeze(1).to(z_p.dtype)
        z = vits.flow(z_p, y_mask_f, g=g, reverse=True)
        return pad_frames(z * y_mask_f), frame_count, w_ceil.squeeze(1)


class VitsVocoder(nn.Module):
    """VITS's HiFi-GAN waveform decoder (speaker-conditioned when the model has speakers)."""

    def __init__(self, vits: Any) -> None:
        super().__init__()
        self.vits = vits
        self.acoustic = VitsAcoustic(vits)
        self.safe = PaddingSafe(vits.waveform_decoder)

    def forward(self, latent: torch.Tensor, speaker_id: torch.Tensor | None = None) -> torch.Tensor:
        g = None if speaker_id is None else self.acoustic.speaker_embedding(speaker_id)
        waveform = self.safe.run(latent, lambda: self.vits.waveform_decoder(latent, g=g))
        return waveform.squeeze(1)


def stages(loaded: Loaded) -> Stages:
    vits = loaded.tts
    speaker_vocoder = bool(vits.args.use_speaker_embedding and vits.num_speakers > 1)
    return Stages(VitsAcoustic(vits), VitsVocoder(vits), speaker_vocoder)
