"""Padding and grouping that let requests of different lengths share one execution.

Triton's dynamic batcher only joins requests whose shapes match. Two tools here:

- :func:`bucket_length` rounds a phoneme sequence up to one of a few lengths, so native
  backends (ONNX Runtime / TensorRT on GPU nodes) see equal shapes within a bucket.
- :func:`plan_sub_batches` splits one ragged Python-backend batch into groups of similar
  length whose padded size stays under a cap, which bounds memory and padded work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

# Geometric buckets (x1.5 / x1.33 steps): at most ~50% padding, a handful of shapes.
PHONEME_BUCKETS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
# LATENT's frame axis is zero-padded to a multiple of this (64 frames = 0.74 s at 22,050 Hz),
# so native GPU vocoders see a few shared shapes they can batch: inside the acoustic graphs
# (triton_tts.export.piper, triton_tts.export.coqui.masks), in Python for Tacotron2
# (triton_tts/runtime/tacotron.py).
FRAME_MULTIPLE = 64


def bucket_length(length: int, buckets: Sequence[int] = PHONEME_BUCKETS) -> int:
    for bucket in buckets:
        if length <= bucket:
            return bucket
    return length


def pad_stack(rows: Sequence[npt.NDArray[Any]], fill: float = 0) -> npt.NDArray[Any]:
    """Stack 1-D (or [C, T]) arrays along a new batch axis, padding the last axis."""
    longest = max(r.shape[-1] for r in rows)
    out = np.full((len(rows), *rows[0].shape[:-1], longest), fill, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, ..., : row.shape[-1]] = row
    return out


def plan_sub_batches(
    lengths: Sequence[int], max_padded: int, max_items: int | None = None
) -> list[list[int]]:
    """Group indices by length: at most ``max_items`` per group and
    len(group) * longest <= max_padded (a single item always forms a group)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    limit = max_items or len(lengths)
    for index in order:
        longest = lengths[index]  # sorted ascending: the newest item is the longest
        if current and ((len(current) + 1) * longest > max_padded or len(current) >= limit):
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups
