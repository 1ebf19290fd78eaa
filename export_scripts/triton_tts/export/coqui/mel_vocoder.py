"""The vocoder stage of the mel families (FastPitch, FastSpeech2, Glow-TTS, Tacotron2):
a Coqui GAN vocoder (HiFi-GAN, MelGAN) as LATENT -> WAVEFORM, padding-safe, with
Synthesizer's mel renormalisation between the TTS model's and the vocoder's audio
settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.masks import sequence_mask, valid_frames
from triton_tts.export.coqui.padding_safe import PaddingSafe, ReflectionSafe

SUPPORTED_GENERATORS = ("HifiganGenerator", "MelganGenerator")


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
