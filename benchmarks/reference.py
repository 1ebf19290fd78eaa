"""The no-server references: Piper's unsplit graph, or a voice folder's own graphs,
called directly with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from triton_tts.contract.voice import VOCODER_FILE, Voice
from triton_tts.export.piper import bundled_joe_paths
from triton_tts.export.voice_runs import acoustic_runner, text_ids
from triton_tts.ops.repository import ensure_default_voice
from triton_tts.runtime.stages import RunFailed, VocoderRunner


class PiperReference:
    """Same text path as the server (normaliser, espeak-ng, ids), then the whole graph, batch 1."""

    def __init__(self, threads: int) -> None:
        self.voice = Voice.load(ensure_default_voice())
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(bundled_joe_paths()[0]), opts, providers=["CPUExecutionProvider"]
        )

    def synthesize(self, text: str) -> float:
        """Seconds of audio made for ``text`` (with the voice's own noise settings)."""
        (ids,) = text_ids(self.voice, [text])
        wav = self.session.run(
            None,
            {
                "input": np.array([ids], dtype=np.int64),
                "input_lengths": np.array([len(ids)], dtype=np.int64),
                "scales": np.array([self.voice.noise_scale, 1.0, self.voice.noise_w], dtype=np.float32),
            },
        )[0]
        return float(wav.size / self.voice.sample_rate)


class VoiceReference:
    """A voice folder's own graphs (acoustic, then vocoder: FP32 or INT8) called directly
    with onnxruntime, batch 1, after the same text path: the ceiling for that voice."""

    def __init__(self, voice_dir: Path, threads: int) -> None:
        self.voice = Voice.load(voice_dir)
        self.acoustic = acoustic_runner(voice_dir, self.voice, threads)
        self.vocoder = VocoderRunner(
            voice_dir / VOCODER_FILE, threads, max_items_per_run=1, max_padded=1 << 20
        )
        self.scales = np.array(
            [self.voice.noise_scale, self.voice.length_scale, self.voice.noise_w], np.float32
        )

    def synthesize(self, text: str) -> float:
        (acoustic,) = self.acoustic.run(text_ids(self.voice, [text]), [self.scales])
        if isinstance(acoustic, RunFailed):
            raise RuntimeError(acoustic.message)
        (wav,) = self.vocoder.run([acoustic[0]])
        if isinstance(wav, RunFailed):
            raise RuntimeError(wav.message)
        return float(wav.size / self.voice.sample_rate)
