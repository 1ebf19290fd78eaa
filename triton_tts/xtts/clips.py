"""Reference clips: checked, resampled to the voice's conditioning rate, conditioned once
per clip (content hash) and kept in a bounded LRU."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from triton_tts.xtts import defaults
from triton_tts.xtts.runner import Conditioning, FloatArray, XttsRunner, clip_refused

MIN_RATE, MAX_RATE = 8000, 192_000
SILENCE_RMS = 1e-4  # below -80 dBFS: no voice to clone
# Float audio lies within [-1, 1]; a little over is a clipped or resampled clip, far over is
# not audio (the conditioning encoders overflow to NaN on samples near float32's maximum).
MAX_PEAK = 2.0


@dataclass(frozen=True)
class ClipSettings:
    cache_entries: int = defaults.CONDITIONING_CACHE
    max_seconds: float = defaults.MAX_REFERENCE_S
    min_seconds: float = defaults.MIN_REFERENCE_S

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> ClipSettings:
        return cls(
            cache_entries=int(params.get("conditioning_cache", cls.cache_entries)),
            max_seconds=float(params.get("max_reference_seconds", cls.max_seconds)),
            min_seconds=float(params.get("min_reference_seconds", cls.min_seconds)),
        )


def check_clip(audio: FloatArray, rate: int, settings: ClipSettings) -> None:
    if not MIN_RATE <= rate <= MAX_RATE:
        raise clip_refused(f"REFERENCE_SAMPLE_RATE {rate} Hz: use {MIN_RATE} to {MAX_RATE} Hz")
    seconds = audio.shape[0] / rate
    if seconds < settings.min_seconds:
        raise clip_refused(
            f"REFERENCE_AUDIO: the reference clip is {seconds:.2f} s: "
            f"at least {settings.min_seconds:g} s is needed"
        )
    if seconds > settings.max_seconds:
        raise clip_refused(
            f"REFERENCE_AUDIO: the reference clip is {seconds:.1f} s: at most {settings.max_seconds:g} s"
        )
    if not np.all(np.isfinite(audio)):
        raise clip_refused("REFERENCE_AUDIO: the reference clip holds NaN or infinite samples")
    peak = float(np.max(np.abs(audio)))
    if peak > MAX_PEAK:
        raise clip_refused(
            f"REFERENCE_AUDIO: a sample reaches {peak:.3g}; float audio lies within [-1, 1] "
            f"(at most {MAX_PEAK:g} is taken)"
        )
    if float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) < SILENCE_RMS:
        raise clip_refused("REFERENCE_AUDIO: the reference clip is silent")


class ClipCache:
    def __init__(self, runner: XttsRunner, settings: ClipSettings):
        self.runner = runner
        self.settings = settings
        self.entries: OrderedDict[str, Conditioning] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def conditioning(self, audio: FloatArray | None, rate: int | None) -> Conditioning:
        if audio is None or rate is None:
            raise clip_refused(
                "XTTS clones a voice: send REFERENCE_AUDIO (FP32 mono) and REFERENCE_SAMPLE_RATE"
            )
        check_clip(audio, rate, self.settings)
        key = hashlib.sha256(np.int64(rate).tobytes() + audio.astype(np.float32).tobytes()).hexdigest()
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                self.hits += 1
                return self.entries[key]
        target = self.runner.card.conditioning_rate
        if rate != target:
            import soxr

            audio = np.asarray(soxr.resample(audio, rate, target), dtype=np.float32)
        conditioning = self.runner.conditioning(audio)
        with self.lock:
            self.misses += 1
            self.entries[key] = conditioning
            while len(self.entries) > self.settings.cache_entries:
                self.entries.popitem(last=False)
        return conditioning
