"""FastPitch, FastSpeech2 and Glow-TTS (mel spectrogram) + a Coqui GAN vocoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

BUILDERS: dict[str, Callable[[Any], tuple[nn.Module, nn.Module, bool]]] = {}
