"""XTTS v2 restated as four graphs that ONNX can carry, each from the loaded model's own
modules and weights.

- :class:`StyleGraph`: a clip's chunk (22.05 kHz) -> the GPT's 32 conditioning latents
  (Coqui's ``wav_to_mel_cloning`` + ``GPT.get_style_emb``); without the perceiver
  resampler, the whole clip -> a latent per spectrogram frame.
- :class:`SpeakerGraph`: a clip (22.05 kHz) -> the decoder's speaker embedding (Coqui's
  resampling to 16 kHz + the HiFi-GAN decoder's ResNet speaker encoder, L2-normalised).
- :class:`GptGraph`: one forward of the GPT over a key-value cache, the prompt's
  (conditioning latents, text, the start code) or one audio code per request of a batch
  (each request's cache padded to the batch's longest, a mask saying which positions are
  its own) -> the next code's logits, the latent the decoder reads, the new keys and
  values (the caller keeps each request's cache). Its input embeddings are table lookups
  the caller does (:func:`embedding_tables`): one graph, one copy of the weights.
- :class:`DecoderGraph`: GPT latents + speaker embedding -> 24 kHz waveform.

The spectrograms are DFT convolutions (ONNX's exporter takes no complex tensors): the same
window, padding and filter bank as the torchaudio transform they replace. The GPT blocks are
Hugging Face's GPT-2 blocks (layer norms, projections, MLP called as modules); only the
attention is written out, so that the cache is one tensor and the mask a padded batch's.
"""

from __future__ import annotations

import copy
import math
from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

NEG_INF = -1e9  # the masked attention score (finite: a row is never all masked)


class ConvMelSpectrogram(nn.Module):
    """torchaudio's ``MelSpectrogram`` (power 2, centred, reflect-padded) as a real DFT
    convolution: its window, its hop and its filter bank, read from ``mel``."""

    basis: torch.Tensor
    fb: torch.Tensor

    def __init__(self, mel: Any):
        super().__init__()
        spec = mel.spectrogram
        if spec.power != 2.0 or spec.normalized or not spec.center:
            raise ValueError("only a centred power-2 spectrogram without normalisation is restated")
        n_fft, win = spec.n_fft, spec.win_length
        window = torch.zeros(n_fft)
        left = (n_fft - win) // 2  # torch.stft centres a shorter window in the frame
        window[left : left + win] = spec.window.detach().double().float()
        bins = n_fft // 2 + 1
        n = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(bins, dtype=torch.float64)[:, None]
        angle = 2 * math.pi * k * n / n_fft
        real = torch.cos(angle) * window.double()
        imag = -torch.sin(angle) * window.double()
        self.register_buffer("basis", torch.cat([real, imag]).float()[:, None, :])
        self.register_buffer("fb", mel.mel_scale.fb.detach().clone())  # (bins, mels)
        self.n_fft, self.hop, self.bins = n_fft, spec.hop_length, bins
        self.pad_mode = spec.pad_mode

    def forward(self, audio: torch.Tensor) -> torch.Tensor:  # (B, N) -> (B, mels, frames)
        half = self.n_fft // 2
        padded = F.pad(audio[:, None, :], (half, half), mode=self.pad_mode)
        spectrum = F.conv1d(padded, self.basis, stride=self.hop)  # (B, 2*bins, frames)
        power = spectrum[:, : self.bins] ** 2 + spectrum[:, self.bins :] ** 2
        return torch.matmul(power.transpose(1, 2), self.fb).transpose(1, 2)


# Coqui's wav_to_mel_cloning settings in get_gpt_cond_latents: (n_fft, hop, window) for a
# chunk through the perceiver, and for the whole clip without it (XTTS v1's way).
PERCEIVER_MEL = (2048, 256, 1024)
WHOLE_CLIP_MEL = (4096, 1024, 4096)


def uses_perceiver(model: Any) -> bool:
    return bool(model.args.gpt_use_perceiver_resampler)


def style_frames(model: Any, samples: int) -> int:
    """Conditioning latents a clip of ``samples`` gives: 32 through the perceiver; without
    it one per frame of the centred cloning spectrogram."""
    if uses_perceiver(model):
        return int(model.gpt.conditioning_perceiver.latents.shape[0])
    return 1 + samples // WHOLE_CLIP_MEL[1]


class StyleGraph(nn.Module):
    """AUDIO (1, N) at 22.05 kHz -> STYLE (1, S, D): conditioning latents; with the
    perceiver (XTTS v2) one chunk's 32, without it one per frame of the whole clip."""

    mel_stats: torch.Tensor

    def __init__(self, model: Any):
        super().__init__()
        import torchaudio

        n_fft, hop, window = PERCEIVER_MEL if uses_perceiver(model) else WHOLE_CLIP_MEL
        mel = torchaudio.transforms.MelSpectrogram(
            n_fft=n_fft, hop_length=hop, win_length=window, power=2, normalized=False,
            sample_rate=22050, f_min=0, f_max=8000, n_mels=80, norm="slaney",
        )  # fmt: skip
        self.mel = ConvMelSpectrogram(mel)
        self.register_buffer("mel_stats", model.mel_stats.detach().clone())
        self.gpt = model.gpt

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        mel = torch.log(torch.clamp(self.mel(audio), min=1e-5)) / self.mel_stats[None, :, None]
        return cast(torch.Tensor, self.gpt.get_style_emb(mel)).transpose(1, 2)


class SpeakerGraph(nn.Module):
    """AUDIO (1, N) at 22.05 kHz -> SPEAKER (1, d): the decoder's speaker embedding."""

    kernel: torch.Tensor

    def __init__(self, model: Any, input_rate: int = 22050):
        super().__init__()
        from torchaudio.functional.functional import _get_sinc_resample_kernel

        encoder = copy.deepcopy(model.hifigan_decoder.speaker_encoder)
        emphasis, mel = encoder.torch_spec[0], encoder.torch_spec[1]
        encoder.torch_spec = nn.Sequential(emphasis, ConvMelSpectrogram(mel))
        self.encoder = encoder
        rate = int(encoder.audio_config["sample_rate"])
        gcd = math.gcd(input_rate, rate)
        self.orig, self.new = input_rate // gcd, rate // gcd
        # torchaudio.functional.resample's own kernel (sinc, Hann window, width 6, rolloff 0.99)
        kernel, self.width = _get_sinc_resample_kernel(
            input_rate, rate, gcd, 6, 0.99, "sinc_interp_hann", None, torch.device("cpu"), torch.float32
        )
        self.register_buffer("kernel", kernel)

    def resample(self, audio: torch.Tensor) -> torch.Tensor:
        """torchaudio.functional.resample(audio, orig, new), with the length as a tensor."""
        length = audio.shape[-1]
        padded = F.pad(audio[:, None, :], (self.width, self.width + self.orig))
        out = F.conv1d(padded, self.kernel, stride=self.orig)  # (B, new, steps)
        out = out.transpose(1, 2).reshape(audio.shape[0], -1)
        target = torch.div(length * self.new + self.orig - 1, self.orig, rounding_mode="floor")
        return out[:, :target]

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.encoder(self.resample(audio)[:, None, :], l2_norm=True))


class _Attention(nn.Module):
    """GPT-2 attention over a cache: the block's own projections, the scores written out."""

    def __init__(self, attn: Any, heads: int):
        super().__init__()
        self.c_attn, self.c_proj = attn.c_attn, attn.c_proj
        self.heads = heads

    def split(self, x: torch.Tensor) -> torch.Tensor:  # (B, S, D) -> (B, H, S, hd)
        b, s, d = x.shape
        return x.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(
        self, h: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.c_attn(h).split(h.shape[-1], dim=2)
        q, k, v = self.split(q), self.split(k), self.split(v)
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
        out = torch.matmul(torch.softmax(scores, dim=-1), values)
        b, _, s, _ = out.shape
        return self.c_proj(out.transpose(1, 2).reshape(b, s, -1)), k, v


class _Transformer(nn.Module):
    """The GPT-2 stack of XTTS (no token or position embeddings of its own) over a cache."""

    def __init__(self, gpt: Any):
        super().__init__()
        hf = gpt.gpt
        self.heads = hf.config.n_head
        self.blocks = nn.ModuleList(hf.h)
        self.attention = nn.ModuleList(_Attention(block.attn, self.heads) for block in hf.h)
        self.ln_f = hf.ln_f
        self.final_norm = gpt.final_norm
        self.mel_head = gpt.mel_head

    def forward(
        self, emb: torch.Tensor, past: torch.Tensor, bias: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """emb (B, S, D), past (B, L, 2, H, P, hd), bias (B, 1, S, P+S) ->
        logits and latents of the last position, and the S new keys/values per layer
        (B, L, 2, H, S, hd)."""
        h = emb
        new = []
        for i, (block, attention) in enumerate(zip(self.blocks, self.attention, strict=True)):
            layer: Any = block  # a Hugging Face GPT2Block
            a, k, v = attention(layer.ln_1(h), past[:, i, 0], past[:, i, 1], bias)
            h = h + a
            h = h + layer.mlp(layer.ln_2(h))
            new.append(torch.stack([k, v], dim=1))
        latent = self.final_norm(self.ln_f(h[:, -1]))
        return self.mel_head(latent), latent, torch.stack(new, dim=1)


class GptGraph(nn.Module):
    """One forward of XTTS's GPT over a key-value cache, for prefill and decode alike.

    EMBEDDINGS (B, S, D): the new positions' input embeddings (token + position, summed by
    the caller from the tables :func:`embedding_tables` writes); PAST (B, L, 2, H, P, hd):
    the cached keys and values, batch first so that a run over the first B slots of a
    server's cache pool is a view, not a copy; MASK (B, P+S): 1 where a position is the
    request's own, 0 for padding or a slot's unused room (the GPT has no positions of its
    own: the caller adds them, so where a position sits in the cache does not matter) ->
    LOGITS (B, codes) and LATENT (B, D) of each request's last position, and PRESENT
    (B, L, 2, H, S, hd): the new positions' keys and values, for the caller to keep.
    Attention is causal over the new positions and masked by MASK."""

    def __init__(self, model: Any):
        super().__init__()
        self.stack = _Transformer(model.gpt)

    def forward(
        self, embeddings: torch.Tensor, past: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        new, old = embeddings.shape[1], past.shape[4]
        rows = torch.arange(new, device=mask.device)[:, None] + old
        cols = torch.arange(old + new, device=mask.device)[None, :]
        causal = (cols <= rows).to(embeddings.dtype)  # (S, P+S)
        allowed = causal[None] * mask[:, None, :].to(embeddings.dtype)  # (B, S, P+S)
        bias = ((1.0 - allowed) * NEG_INF)[:, None]  # (B, 1, S, P+S)
        logits, latent, present = self.stack(embeddings, past, bias)
        return logits, latent, present


def embedding_tables(model: Any) -> dict[str, Any]:
    """The GPT's input tables as float32 arrays: text and audio-code embeddings and their
    learned positions (XTTS adds a token's row and its position's row)."""
    gpt = model.gpt
    tables = {
        "text": gpt.text_embedding.weight,
        "text_position": gpt.text_pos_embedding.emb.weight,
        "audio": gpt.mel_embedding.weight,
        "audio_position": gpt.mel_pos_embedding.emb.weight,
    }
    return {name: weight.detach().float().cpu().numpy() for name, weight in tables.items()}


class DecoderGraph(nn.Module):
    """LATENTS (B, T, D), SPEAKER (B, d) -> WAVEFORM (B, samples) at the output rate:
    Coqui's HifiDecoder.forward (two linear interpolations, then HiFi-GAN), weight norm
    folded away."""

    def __init__(self, model: Any):
        super().__init__()
        decoder = model.hifigan_decoder
        self.generator = copy.deepcopy(decoder.waveform_decoder)
        if torch.nn.utils.parametrize.is_parametrized(self.generator.conv_pre):  # Coqui's eval load folds it
            self.generator.remove_weight_norm()
        self.stretch = decoder.ar_mel_length_compression / decoder.output_hop_length
        self.rate = decoder.output_sample_rate / decoder.input_sample_rate

    def forward(self, latents: torch.Tensor, speaker: torch.Tensor) -> torch.Tensor:
        z = F.interpolate(latents.transpose(1, 2), scale_factor=[self.stretch], mode="linear")
        if self.rate != 1.0:
            z = F.interpolate(z, scale_factor=[self.rate], mode="linear")
        return cast(torch.Tensor, self.generator(z, g=speaker[:, :, None]))[:, 0]
