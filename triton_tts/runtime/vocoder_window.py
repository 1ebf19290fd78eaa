"""Long latents through a CPU vocoder in windows: the same samples, with bounded memory.

onnxruntime's CPU arena keeps the largest run's activations, and a vocoder's grow with
frames (HiFi-GAN holds several [channels, frames x hop] tensors at full rate): a 2,000-frame
chunk left an instance hundreds of MiB larger until an arena shrink gave it back, and the
shrink made the next run fault every page in again. A convolutional vocoder's sample
depends only on the latent frames within its receptive field, so a long latent can run in
windows of :data:`WINDOW_FRAMES` frames, each with ``context`` frames of the neighbouring
latent on both sides, and keep each window's middle: every kept sample saw all the frames
it would have seen in one run. Memory is then bounded by one window, whatever the chunk.

The context is measured on the graph itself when a runner loads (:func:`measure_context`):
one latent frame is changed, and the output samples that move show how far a frame
reaches. A vocoder whose reach spans the probe (not local), or whose windowed output
differs from its whole-run output on the probe, is never windowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

# Frames kept per window (~6 s at 22,050 Hz, hop 256). Smaller windows bound memory lower
# but recompute 2 x context frames more often (context / window per side).
WINDOW_FRAMES = 512
PROBE_FRAMES = 256  # a reach up to ~half of this is measurable
CONTEXT_MARGIN = 2  # frames beyond the measured reach
# Windowed against whole-run output on the probe, relative to its peak: onnxruntime may pick
# other kernels for other lengths, so allow rounding far below hearing (-100 dB), no more.
EXACTNESS = 1e-5


@dataclass(frozen=True)
class Window:
    """Latent frames [start, stop) run together; output frames [keep_start, keep_stop)
    (counted from ``start``) are kept."""

    start: int
    stop: int
    keep_start: int
    keep_stop: int


def plan_windows(frames: int, window: int, context: int) -> list[Window]:
    """Windows covering ``frames`` latent frames, each keeping up to ``window`` frames."""
    plan = []
    for keep in range(0, frames, window):
        keep_end = min(frames, keep + window)
        start, stop = max(0, keep - context), min(frames, keep_end + context)
        plan.append(Window(start, stop, keep - start, keep_end - start))
    return plan


def run_windowed(
    run: Callable[[FloatArray], FloatArray], latent: FloatArray, window: int, context: int
) -> FloatArray:
    """latent [C, frames] -> waveform [frames x hop], one ``run`` ([1, C, f] -> [1, f x hop])
    per window."""
    frames = latent.shape[-1]
    pieces = []
    for w in plan_windows(frames, window, context):
        out = run(np.ascontiguousarray(latent[np.newaxis, :, w.start : w.stop])).reshape(-1)
        hop = out.shape[0] // (w.stop - w.start)
        pieces.append(out[w.keep_start * hop : w.keep_stop * hop])
    return np.concatenate(pieces)


def measure_context(run: Callable[[FloatArray], FloatArray], channels: int) -> int | None:
    """Latent frames of context a window needs on each side, or None when windowing would
    change the output (the vocoder is not local within :data:`PROBE_FRAMES`)."""
    rng = np.random.default_rng(0)
    base = (0.5 * rng.standard_normal((1, channels, PROBE_FRAMES))).astype(np.float32)
    bumped = base.copy()
    centre = PROBE_FRAMES // 2
    bumped[:, :, centre] += 1.0
    whole = run(base).reshape(-1)
    moved = np.nonzero(run(bumped).reshape(-1) != whole)[0]
    hop = whole.shape[0] // PROBE_FRAMES
    if hop == 0 or moved.size == 0:
        return None  # the frame changed nothing: nothing to learn the reach from
    first, last = int(moved[0]), int(moved[-1])
    if first < hop or last >= whole.shape[0] - hop:
        return None  # one frame reaches (nearly) across the probe
    reach = max(centre * hop - first, last + 1 - (centre + 1) * hop)
    context = math.ceil(reach / hop) + CONTEXT_MARGIN
    windowed = run_windowed(run, base[0], PROBE_FRAMES // 4, context)
    peak = float(np.abs(whole).max()) or 1.0
    if windowed.shape != whole.shape or float(np.abs(windowed - whole).max()) > EXACTNESS * peak:
        return None
    return context
