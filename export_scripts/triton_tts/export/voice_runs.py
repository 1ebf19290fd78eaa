"""A voice folder's stages run offline, item by item, as the Triton models run them:
texts -> phoneme ids (preprocess's reader) -> latents (the acoustic runner) -> waveforms.

For what checks a voice at export time (INT8 calibration, the precision gate) and for
the benchmarks that compare stages; serving runs the same runners inside Triton.

    from triton_tts.export.voice_runs import latents, run_vocoder
    items = latents(Path("voices/joe"), ["Hello there."])
    waveforms = run_vocoder(Path("voices/joe/vocoder.onnx"), items, speaker=False)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_tts.contract.voice import ACOUSTIC_FILE, Voice
from triton_tts.runtime.onnx_session import available_cores, cpu_session
from triton_tts.runtime.stages import AcousticRunner, RunFailed
from triton_tts.text.reader import TextReader

Latents = list[npt.NDArray[np.float32]]
Waveforms = list[npt.NDArray[np.float32]]


def acoustic_runner(voice_dir: Path, voice: Voice, threads: int) -> Any:
    """The acoustic stage of a voice folder as the Triton model runs it, one item per run:
    Tacotron2's step-wise loop, or the one-graph runner."""
    if voice.acoustic_kind == "tacotron2":
        from triton_tts.runtime.tacotron import Tacotron2Runner

        return Tacotron2Runner(voice_dir, threads, voice.max_decoder_steps, voice.mel_edge_frames)
    return AcousticRunner(voice_dir / ACOUSTIC_FILE, threads, 1, 1 << 20)


def text_ids(voice: Voice, texts: list[str]) -> list[npt.NDArray[np.int64]]:
    """The server's text path, preprocess's own reader: the voice language's normaliser,
    its pronunciation (espeak-ng or pinyin), the voice's symbols and framing."""
    reader = TextReader(voice)
    readings = reader.read([reader.normalize(t) for t in texts])
    return [np.array(r.ids, dtype=np.int64) for r in readings]


def latents(voice_dir: Path, texts: list[str]) -> Latents:
    """The acoustic stage's latents (or mels) for ``texts`` (noise off, speaker 0), as the
    vocoder receives them: through the same runner the Triton acoustic model uses."""
    voice = Voice.load(voice_dir)
    runner = acoustic_runner(voice_dir, voice, threads=2)
    ids = text_ids(voice, texts)
    scales = [np.array([0.0, voice.length_scale, 0.0], dtype=np.float32)] * len(ids)
    result = []
    for item in runner.run(ids, scales):
        if isinstance(item, RunFailed):
            raise RuntimeError(item.message)
        result.append(np.ascontiguousarray(item[0][None]))
    return result


def vocoder_feeds(latent: npt.NDArray[np.float32], speaker: bool) -> dict[str, Any]:
    """LATENT, plus speaker 0 for speaker-conditioned vocoders."""
    feeds: dict[str, Any] = {"LATENT": latent}
    if speaker:
        feeds["SPEAKER_ID"] = np.zeros(latent.shape[0], dtype=np.int64)
    return feeds


def run_vocoder(vocoder: Path, items: Latents, speaker: bool) -> Waveforms:
    """The vocoder graph (LATENT -> WAVEFORM, speaker 0 when ``speaker``) on each latent
    alone: batch 1, so items are compared without padding."""
    session = cpu_session(vocoder, available_cores())
    return [session.run(["WAVEFORM"], vocoder_feeds(latent, speaker))[0][0] for latent in items]
