"""Convolutional generators run on a zero-padded batch as if each item were alone."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from triton_tts.export.coqui.masks import valid_frames


class PaddingSafe(nn.Module):
    """Run a convolutional vocoder on a zero-padded batch as if each item were alone.

    A conv stack fed padded frames lets them leak into an item's last frames (a bias,
    a speaker conditioning term added everywhere); batch 1 sees zero padding instead. A
    pre-hook on every Conv1d / ConvTranspose1d zeroes its input past the item's valid
    length (scaled by how far the stack has upsampled by then), which is exactly what
    the convolution's own zero padding does at batch 1. On VITS it brought the tail
    frames from visibly off Coqui's batch-1 output to float rounding
    (docs/voices-and-export.md).
    """

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self._valid: torch.Tensor | None = None
        self._frames: torch.Tensor | int = 0
        self._masks: dict[int, torch.Tensor] = {}
        for module in generator.modules():
            if isinstance(module, nn.Conv1d | nn.ConvTranspose1d):
                module.register_forward_pre_hook(self._mask_input)

    def _mask_input(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...] | None:
        x = inputs[0]
        if self._valid is None or x.shape[-1] < self._frames:  # e.g. a [B, C, 1] conditioning
            return None
        # One mask per resolution, shared by every conv at it (the trace records it once).
        key = int(x.shape[-1])
        if key not in self._masks:
            factor = torch.div(x.shape[-1], self._frames, rounding_mode="floor")
            steps = torch.arange(x.shape[-1], device=x.device).unsqueeze(0)
            self._masks[key] = (steps < (self._valid * factor).unsqueeze(1)).unsqueeze(1).to(x.dtype)
        return (x * self._masks[key], *inputs[1:])

    def run(self, latent: torch.Tensor, call: Callable[[], torch.Tensor]) -> torch.Tensor:
        self._valid, self._frames, self._masks = valid_frames(latent), latent.shape[-1], {}
        try:
            return call()
        finally:
            self._valid, self._masks = None, {}


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
