"""FastPitch, FastSpeech2 and Glow-TTS (mel spectrogram) + a Coqui GAN vocoder.

The acoustic stage re-states each model's ``inference`` so a padded batch gives every item
its batch-1 mel; the vocoder stage is Synthesizer's vocoder step (mel renormalisation, then
the generator) made padding-safe. Coqui's GAN vocoders replicate ``inference_padding``
edge frames at each end of the mel before the generator; here the acoustic stage does that
per item (the vocoder only sees the padded batch), so FRAME_COUNT includes those frames and
an item's waveform is exactly Coqui's ``vocoder.inference`` output, (frames + 2p) * hop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from triton_tts.export.coqui import (
    Loaded,
    PaddingSafe,
    alignment_path,
    pad_frames,
    sequence_mask,
    valid_frames,
)

# --- the mel's edge frames --------------------------------------------------------------


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


# --- FastPitch / FastSpeech2 ------------------------------------------------------------


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


class _MelAcoustic(nn.Module):
    """What the mel acoustic wrappers share: the model, the vocoder's edge frames, and
    speaker conditioning by id only."""

    def __init__(self, model: Any, edge_frames: int) -> None:
        super().__init__()
        if getattr(model, "embedded_speaker_dim", 0) and not hasattr(model, "emb_g"):
            raise NotImplementedError("d-vector speaker conditioning is not supported; speaker ids are")
        self.model = model
        self.edge_frames = edge_frames


class ForwardTTSAcoustic(_MelAcoustic):
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
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
        return edge_pad(mel, frames, self.edge_frames)


# --- Glow-TTS ---------------------------------------------------------------------------


class GlowTTSAcoustic(_MelAcoustic):
    """Glow-TTS: encoder, durations, prior expansion, noise, reverse flow -> masked mel with
    edge frames.

    The encoder and the flow mask their own padding; what Coqui's ``inference`` gets wrong
    in a batch is the duration floor (``clamp_min(ceil(w), 1)`` after masking gives padded
    tokens a frame each) and a single noise scale. The flow squeezes frame pairs and drops
    an odd last frame, so an item has ``frames // num_squeeze * num_squeeze`` mel frames, as
    at batch 1. Noise is per item from SCALES[:, 0] (0: deterministic)."""

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, speaker_id: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
        return edge_pad(mel, frames, self.edge_frames)


# --- the vocoder ------------------------------------------------------------------------


@dataclass(frozen=True)
class MelNorm:
    """What decides an AudioProcessor's mel (de)normalisation (equal settings: a round trip
    that only clips). ``stats``: per-channel mean and std when it has a ``mel_scaler``."""

    signal_norm: bool
    symmetric: bool = False
    clip: bool = False
    max_norm: float = 1.0
    min_level_db: float = -100.0
    ref_level_db: float = 0.0
    stats: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @classmethod
    def of(cls, ap: Any) -> MelNorm:
        if not ap.signal_norm:
            return cls(False)
        if hasattr(ap, "mel_scaler"):
            scaler = ap.mel_scaler
            return cls(True, stats=(tuple(map(float, scaler.mean_)), tuple(map(float, scaler.scale_))))
        return cls(
            True,
            bool(ap.symmetric_norm),
            bool(ap.clip_norm),
            float(ap.max_norm),
            float(ap.min_level_db),
            float(ap.ref_level_db),
        )

    def clamp(self, x: torch.Tensor) -> torch.Tensor:
        if not self.clip or self.stats is not None:
            return x
        return torch.clamp(x, -self.max_norm if self.symmetric else 0.0, self.max_norm)

    def channel_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.stats is not None
        mean, scale = (torch.tensor(values, dtype=torch.float32).view(1, -1, 1) for values in self.stats)
        return mean, scale


class MelConversion(nn.Module):
    """Synthesizer's mel hand-over as torch ops: the TTS model's ``ap.denormalize`` (to dB)
    then the vocoder's ``vocoder_ap.normalize``, each in Coqui's operation order (float32,
    as Coqui's numpy runs it), so the vocoder gets the values Coqui feeds it.

    With identical settings the round trip is the identity except for the clip that
    ``denormalize`` applies with ``clip_norm``; then only that clamp is kept (``mode``
    "clip"), and without clipping nothing (``mode`` "identity")."""

    def __init__(self, source: Any, target: Any) -> None:
        super().__init__()
        self.source, self.target = MelNorm.of(source), MelNorm.of(target)
        self.mode = "convert"
        if self.source == self.target:
            clips = self.source.signal_norm and self.source.stats is None and self.source.clip
            self.mode = "clip" if clips else "identity"

    @property
    def identity(self) -> bool:
        return self.mode == "identity"

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        norm = self.source
        if not norm.signal_norm:
            return x
        if norm.stats is not None:
            mean, scale = norm.channel_stats()
            return x * scale + mean
        x = norm.clamp(x)
        if norm.symmetric:
            x = ((x + norm.max_norm) * -norm.min_level_db / (2 * norm.max_norm)) + norm.min_level_db
        else:
            x = (x * -norm.min_level_db / norm.max_norm) + norm.min_level_db
        return x + norm.ref_level_db

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        norm = self.target
        if not norm.signal_norm:
            return x
        if norm.stats is not None:
            mean, scale = norm.channel_stats()
            return (x - mean) / scale
        x = x - norm.ref_level_db
        x = (x - norm.min_level_db) / (-norm.min_level_db)
        x = ((2 * norm.max_norm) * x) - norm.max_norm if norm.symmetric else norm.max_norm * x
        return norm.clamp(x)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        if self.mode == "identity":
            return mel
        if self.mode == "clip":
            return self.source.clamp(mel)
        return self.normalize(self.denormalize(mel))


class ReflectionSafe(PaddingSafe):
    """``PaddingSafe`` for generators that pad with ``ReflectionPad1d`` (MelGAN).

    A reflection of the padded batch mirrors zeros (or garbage) into an item's last frames,
    where at batch 1 it mirrors the item's own frames. A forward hook replaces each pad's
    output with a per-item reflection at the item's length (scaled by the upsampling so
    far), which is what batch 1 computes for every frame inside the item. The convolution
    after a pad has no padding of its own and reads pad-shifted positions, so the input
    masking of ``PaddingSafe`` is skipped for convolutions without padding (it would cut
    the item's reflected tail); the transposed convolutions keep it."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__(generator)
        for module in generator.modules():
            if isinstance(module, nn.ReflectionPad1d):
                module.register_forward_hook(self._reflect_item)

    def _mask_input(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...] | None:
        if isinstance(module, nn.Conv1d) and module.padding in ((0,), "valid"):
            return None
        return super()._mask_input(module, inputs)

    def _reflect_item(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
    ) -> torch.Tensor | None:
        x = inputs[0]
        if self._valid is None:
            return None
        left, right = module.padding  # type: ignore[misc]
        factor = torch.div(x.shape[-1], self._frames, rounding_mode="floor")
        length = (self._valid * factor).unsqueeze(1)
        steps = torch.arange(x.shape[-1] + left + right, device=x.device).unsqueeze(0) - left
        source = torch.where(steps >= length, 2 * (length - 1) - steps, steps.abs())
        source = source.clamp(0, x.shape[-1] - 1)
        return torch.gather(x, 2, source.unsqueeze(1).expand(-1, x.shape[1], -1))


class MelVocoder(nn.Module):
    """LATENT (edge-padded mel in the TTS model's normalisation, zero past each item) ->
    WAVEFORM [B, samples]: Synthesizer's renormalisation, then the generator's ``forward``
    (its ``inference`` would pad the edges again; the acoustic stage did that per item).

    The conversion maps a zero frame to a non-zero one, so it is masked to each item's
    frames afterwards: the padding-safe generator finds the items' lengths from the zeros."""

    def __init__(self, generator: nn.Module, conversion: MelConversion) -> None:
        super().__init__()
        self.generator = generator
        self.conversion = conversion
        has_reflection = any(isinstance(m, nn.ReflectionPad1d) for m in generator.modules())
        self.safe = ReflectionSafe(generator) if has_reflection else PaddingSafe(generator)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        mel = latent
        if not self.conversion.identity:
            keep = sequence_mask(valid_frames(latent), latent.shape[-1]).unsqueeze(1).to(latent.dtype)
            mel = self.conversion(latent) * keep
        waveform = self.safe.run(mel, lambda: self.generator(mel))
        return waveform.squeeze(1)


SUPPORTED_GENERATORS = ("HifiganGenerator", "MelganGenerator")


def mel_vocoder(loaded: Loaded) -> tuple[nn.Module, int]:
    """The loaded Coqui GAN vocoder as a LATENT -> WAVEFORM module, and the number of edge
    frames (the generator's ``inference_padding``) the acoustic stage must add per item."""
    vocoder = loaded.vocoder
    if vocoder is None:
        raise ValueError(f"a {loaded.family} model needs a vocoder")
    generator = getattr(vocoder, "model_g", vocoder)
    kind = type(generator).__name__
    if kind not in SUPPORTED_GENERATORS:
        raise NotImplementedError(
            f"vocoder generator {kind}: supported are {', '.join(SUPPORTED_GENERATORS)}"
        )
    if getattr(generator, "cond_in_each_up_layer", False) or hasattr(generator, "cond_layer"):
        raise NotImplementedError("speaker-conditioned generators are not supported for mel models")
    conversion = MelConversion(loaded.tts.ap, loaded.synthesizer.vocoder_ap)
    return MelVocoder(generator, conversion), int(generator.inference_padding)


def _forward_tts_stages(loaded: Loaded) -> tuple[nn.Module, nn.Module, bool]:
    vocoder, edge = mel_vocoder(loaded)
    return ForwardTTSAcoustic(loaded.tts, edge), vocoder, False


def _glow_tts_stages(loaded: Loaded) -> tuple[nn.Module, nn.Module, bool]:
    vocoder, edge = mel_vocoder(loaded)
    return GlowTTSAcoustic(loaded.tts, edge), vocoder, False


BUILDERS: dict[str, Callable[[Loaded], tuple[nn.Module, nn.Module, bool]]] = {
    "fast_pitch": _forward_tts_stages,
    "fastspeech2": _forward_tts_stages,
    "glow_tts": _glow_tts_stages,
}
