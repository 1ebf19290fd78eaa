"""FastPitch and FastSpeech2 (Coqui's ``ForwardTTS``): the acoustic wrapper, with the
Coqui GAN vocoder of :mod:`.mel_vocoder`.

The acoustic stage re-states the model's ``inference`` so a padded batch gives every item
its batch-1 mel, with the vocoder's edge frames added per item (:mod:`.mel_acoustic`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.masks import alignment_path, sequence_mask
from triton_tts.export.coqui.mel_acoustic import MelAcoustic, edge_pad, lead_in
from triton_tts.export.coqui.mel_vocoder import mel_vocoder
from triton_tts.export.coqui.onnx_export import Stages


def self_attention(attn: nn.MultiheadAttention, x: torch.Tensor, key_padding: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention(x, x, x, key_padding_mask=...)`` on [B, T, C], batch first.

    The same arithmetic as torch's own (packed in-projection, queries scaled by
    1/sqrt(head_dim) before the product, softmax, out-projection), written with only
    constant reshapes: torch's functional version reshapes with the traced sequence length,
    which the legacy ONNX exporter bakes in as a constant (the graph then fails on any other
    length)."""
    heads = attn.num_heads
    head_dim = attn.embed_dim // heads
    q, k, v = functional.linear(x, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (torch.unflatten(t, -1, (heads, head_dim)).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
    scores = torch.matmul(q * math.sqrt(1.0 / float(head_dim)), k.transpose(-2, -1))
    scores = scores.masked_fill(key_padding.unsqueeze(1).unsqueeze(2), float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).flatten(2)
    return functional.linear(out, attn.out_proj.weight, attn.out_proj.bias)


def fft_block(block: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Coqui's ``FFTransformerBlock`` on [B, C, T] with a [B, 1, T] mask, padding-safe.

    Coqui's layer lets padding in twice: its two FFN convolutions (kernel 3) read padded
    positions into an item's last frame, and the decoder calls the block with no mask at
    all, so attention attends to padded frames. Here the attention gets the key-padding mask
    and each convolution a zeroed input past the item's length (what its zero padding sees
    at batch 1). The arithmetic is otherwise Coqui's, in its order (the residual is added
    twice before ``norm1``, as Coqui does); dropout is off in eval."""
    key_padding = mask.squeeze(1) == 0
    for layer in block.fft_layers:
        src = x.transpose(1, 2)
        src2 = self_attention(layer.self_attn, src, key_padding)
        src = src + src2
        src = layer.norm1(src + src2)
        src = src.transpose(1, 2)
        src2 = layer.conv2(functional.relu(layer.conv1(src * mask)) * mask)
        src = src + src2
        x = layer.norm2(src.transpose(1, 2)).transpose(1, 2)
    return x


def _check_fftransformer(model: Any) -> None:
    args = model.args
    for part, kind in (("encoder", args.encoder_type), ("decoder", args.decoder_type)):
        if kind.lower() != "fftransformer":
            raise NotImplementedError(
                f"{part}_type {kind!r}: only 'fftransformer' (Coqui's default) is supported"
            )


class ForwardTTSAcoustic(MelAcoustic):
    """FastPitch / FastSpeech2 (Coqui's ``ForwardTTS``): encoder, durations, pitch / energy,
    length regulation, decoder -> masked mel [B, n_mels, frames] with edge frames.

    Coqui's ``inference`` is batch-1 only: it takes the lengths from the shape, squeezes the
    batch axis, and its ``format_durations`` clamps durations to at least 1 before masking,
    so padded tokens would get a frame each. Here padded tokens get 0 frames, per-item
    length_scale comes from SCALES[:, 1], and the transformers are run padding-safe."""

    def __init__(self, model: Any, edge_frames: int) -> None:
        _check_fftransformer(model)
        super().__init__(model, edge_frames)

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, speaker_id: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model = self.model
        length_scale = scales[:, 1].view(-1, 1, 1)
        x_mask = sequence_mask(lengths, ids.shape[1]).unsqueeze(1).to(torch.float32)
        o_en = fft_block(model.encoder.encoder, model.emb(ids).transpose(1, 2), x_mask) * x_mask
        if hasattr(model, "emb_g"):
            o_en = o_en + model.emb_g(speaker_id).unsqueeze(-1)
        o_dr_log = model.duration_predictor(o_en, x_mask)
        o_dr = (torch.exp(o_dr_log) - 1) * x_mask * length_scale
        durations = (torch.round(torch.clamp_min(o_dr, 1.0)) * x_mask).squeeze(1)  # padded tokens: 0
        if model.args.use_pitch:
            o_en = o_en + model.pitch_emb(model.pitch_predictor(o_en, x_mask))
        if model.args.use_energy:
            o_en = o_en + model.energy_emb(model.energy_predictor(o_en, x_mask))
        frames = durations.sum(1).long()
        y_mask = sequence_mask(frames, frames.max())
        path = alignment_path(durations, x_mask.squeeze(1) > 0, y_mask)  # [B, T_in, T_out]
        y_mask_f = y_mask.unsqueeze(1).to(o_en.dtype)
        o_en_ex = torch.matmul(o_en, path)
        if hasattr(model, "pos_encoder"):
            o_en_ex = model.pos_encoder(o_en_ex, y_mask_f)
        decoder = model.decoder.decoder
        o_de = fft_block(decoder.transformer_block, o_en_ex, y_mask_f) * y_mask_f
        mel = decoder.postnet(o_de) * y_mask_f
        return (*edge_pad(mel, frames, self.edge_frames), lead_in(durations, self.edge_frames))


def stages(loaded: Loaded) -> Stages:
    vocoder, edge = mel_vocoder(loaded)
    return Stages(ForwardTTSAcoustic(loaded.tts, edge), vocoder, False)
