"""Coqui FastPitch / FastSpeech2 / Glow-TTS + HiFi-GAN / MelGAN exports against Coqui itself.

Random-weight tiny checkpoints (``coqui_checkpoints``) are loaded through Coqui's
Synthesizer, exported, and run with onnxruntime: each item must equal Coqui's own batch-1
inference (mel and waveform), also inside a padded batch, also at another length_scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import torch
from torch.nn import functional

from testkit import coqui_checkpoints
from testkit.coqui_reference import coqui_ids, coqui_waveform
from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.export.coqui import glow_tts
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import Loaded, load
from triton_tts.export.coqui.masks import pad_frames
from triton_tts.export.coqui.mel_vocoder import MelConversion, MelVocoder, mel_vocoder
from triton_tts.runtime.batching import FRAME_MULTIPLE

pytestmark = pytest.mark.export  # builds and exports models

TEXTS = (
    "Hello world, this is a test.",
    "Hi.",
    "A somewhat longer sentence, to check how the padding of a batch behaves.",
)
# Measured (onnxruntime vs Coqui): waveforms HiFi-GAN <= 8e-9, MelGAN <= 9e-8 (peaks 0.02 / 0.07);
# mels FastPitch/FastSpeech2 <= 2e-5 (the torch wrappers are bit-exact, ORT's transformer
# arithmetic differs), Glow-TTS 2e-7.
WAVE_TOL = 1e-6
MEL_TOL = 1e-4
# The vocoder whose audio config differs from the TTS models' (conversion really runs).
RENORM_AUDIO = {"max_norm": 1.0, "symmetric_norm": False, "ref_level_db": 25}

Array = npt.NDArray[Any]


@dataclass
class Exported:
    vocoder_family: str
    loaded: Loaded
    voice: Voice
    acoustic: ort.InferenceSession
    vocoder: ort.InferenceSession

    def run(self, names: list[str], items: list[list[int]], scales: list[float] | None = None) -> list[Array]:
        """The acoustic graph's ``names`` outputs for a padded batch of ``items``."""
        batch = len(items)
        ids = np.zeros((batch, max(map(len, items))), np.int64)
        for i, item in enumerate(items):
            ids[i, : len(item)] = item
        feed = {
            "PHONEME_IDS": ids,
            "PHONEME_LENGTH": np.array([len(item) for item in items], np.int64),
            "SCALES": np.array([scales or [0.0, 1.0, 0.0]] * batch, np.float32),
            "SPEAKER_ID": np.zeros(batch, np.int64),
        }
        used = {i.name for i in self.acoustic.get_inputs()}
        return list(self.acoustic.run(names, {k: v for k, v in feed.items() if k in used}))

    def latent(self, items: list[list[int]], scales: list[float] | None = None) -> tuple[Array, Array]:
        latent, frames = self.run(["LATENT", "FRAME_COUNT"], items, scales)
        return latent, frames

    def waveforms(self, items: list[list[int]], scales: list[float] | None = None) -> list[Array]:
        latent, frames = self.latent(items, scales)
        waveform = self.vocoder.run(None, {"LATENT": latent})[0]
        assert waveform.shape == (len(items), latent.shape[-1] * self.voice.hop_length)
        return [waveform[i, : frames[i] * self.voice.hop_length] for i in range(len(items))]


CASES = {
    "fast_pitch": ("fast_pitch", "hifigan"),
    "fastspeech2": ("fastspeech2", "hifigan"),
    "glow_tts": ("glow_tts", "hifigan"),
    "glow_tts-melgan": ("glow_tts", "melgan"),
    "fast_pitch-renorm": ("fast_pitch", "hifigan_renorm"),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, coqui_checkpoints.Checkpoint]:
    root = tmp_path_factory.mktemp("coqui_mel")
    built = {
        family: coqui_checkpoints.build_tts(family, root / family)
        for family in ("fast_pitch", "fastspeech2", "glow_tts")
    }
    built["hifigan"] = coqui_checkpoints.build_vocoder("hifigan", root / "hifigan")
    built["melgan"] = coqui_checkpoints.build_vocoder("melgan", root / "melgan")
    built["hifigan_renorm"] = coqui_checkpoints.build_vocoder("hifigan", root / "renorm", audio=RENORM_AUDIO)
    return built


def _load(checkpoints: dict[str, coqui_checkpoints.Checkpoint], tts: str, vocoder: str) -> Loaded:
    return load(
        checkpoint=checkpoints[tts].checkpoint,
        config=checkpoints[tts].config,
        vocoder_checkpoint=checkpoints[vocoder].checkpoint,
        vocoder_config=checkpoints[vocoder].config,
    )


@pytest.fixture(scope="module", params=list(CASES))
def exported(
    request: pytest.FixtureRequest,
    checkpoints: dict[str, coqui_checkpoints.Checkpoint],
    tmp_path_factory: pytest.TempPathFactory,
) -> Exported:
    tts, vocoder = CASES[request.param]
    loaded = _load(checkpoints, tts, vocoder)
    out = tmp_path_factory.mktemp(request.param)
    voice = export_coqui(loaded, out)
    return Exported(
        vocoder.split("_")[0],
        loaded,
        voice,
        ort.InferenceSession(str(out / ACOUSTIC_FILE)),
        ort.InferenceSession(str(out / VOCODER_FILE)),
    )


def coqui_mel(loaded: Loaded, ids: list[int], length_scale: float = 1.0) -> Array:
    """Coqui's own batch-1 mel [n_mels, frames] (noise off)."""
    tts = loaded.tts
    previous, tts.length_scale = tts.length_scale, length_scale
    try:
        with torch.no_grad():
            aux = {"x_lengths": torch.tensor([len(ids)]), "speaker_ids": None, "d_vectors": None}
            mel = tts.inference(torch.tensor([ids]), aux_input=aux)["model_outputs"][0].T
    finally:
        tts.length_scale = previous
    return mel.numpy()  # type: ignore[no-any-return]


def _ids(exported: Exported) -> list[list[int]]:
    return [coqui_ids(exported.loaded, text) for text in TEXTS]


@pytest.mark.parametrize("length_scale", [1.0, 1.3])
def test_matches_coqui(exported: Exported, length_scale: float) -> None:
    """Batch 1: the mel (with its edge frames) and the waveform are Coqui's own."""
    edge = exported.voice.mel_edge_frames
    assert edge == {"hifigan": 5, "melgan": 2}[exported.vocoder_family]
    for ids in _ids(exported):
        latent, frames = exported.latent([ids], [0.0, length_scale, 0.0])
        mel = coqui_mel(exported.loaded, ids, length_scale)
        assert latent.shape[-1] % FRAME_MULTIPLE == 0
        assert frames[0] == mel.shape[1] + 2 * edge
        padded = functional.pad(torch.from_numpy(mel)[None], (edge, edge), "replicate")[0].numpy()
        np.testing.assert_allclose(latent[0, :, : frames[0]], padded, rtol=0, atol=MEL_TOL)
        assert not latent[0, :, frames[0] :].any(), "LATENT must be exact zeros past FRAME_COUNT"
        (waveform,) = exported.waveforms([ids], [0.0, length_scale, 0.0])
        reference = coqui_waveform(exported.loaded, ids, length_scale=length_scale)
        assert waveform.shape == reference.shape == ((mel.shape[1] + 2 * edge) * exported.voice.hop_length,)
        np.testing.assert_allclose(waveform, reference, rtol=0, atol=WAVE_TOL)


def coqui_durations(loaded: Loaded, ids: list[int]) -> Array:
    """Coqui's own frames per id (batch 1, noise off): its ``durations``, or for Glow-TTS
    its hard alignment's frames per id."""
    with torch.no_grad():
        aux = {"x_lengths": torch.tensor([len(ids)]), "speaker_ids": None, "d_vectors": None}
        outputs = loaded.tts.inference(torch.tensor([ids]), aux_input=aux)
    if outputs.get("durations") is not None:
        return outputs["durations"].reshape(-1).numpy()  # type: ignore[no-any-return]
    return outputs["alignments"][0].sum(0).numpy()  # type: ignore[no-any-return]  # [T_out, T_in]


def test_durations_are_coquis_with_the_edge_frames_first(exported: Exported) -> None:
    """DURATIONS (word timestamps) are Coqui's own frames per id, in a padded batch; the
    vocoder's leading edge frames count in the first id, so they sum to the item's frames
    less the trailing edge."""
    items = _ids(exported)
    edge = exported.voice.mel_edge_frames
    durations, frames = exported.run(["DURATIONS", "FRAME_COUNT"], items)
    for i, item in enumerate(items):
        reference = coqui_durations(exported.loaded, item).copy()
        reference[0] += edge
        np.testing.assert_array_equal(durations[i, : len(item)], reference)
        assert not durations[i, len(item) :].any()  # padded ids: no frames
        # Glow-TTS's flow drops an odd last frame: word times are clipped to the frames.
        assert frames[i] - edge <= durations[i].sum() <= frames[i] - edge + 1


def test_batch_matches_single(exported: Exported) -> None:
    """Each item of a padded batch of different lengths is its batch-1 output."""
    items = _ids(exported)
    assert len({len(ids) for ids in items}) == len(items)
    batch = exported.waveforms(items)
    for ids, waveform in zip(items, batch, strict=True):
        (single,) = exported.waveforms([ids])
        assert waveform.shape == single.shape
        np.testing.assert_allclose(waveform, single, rtol=0, atol=WAVE_TOL)


def test_length_scale_stretches(exported: Exported) -> None:
    """length_scale 1.3 gives ~1.3x the mel frames (durations are rounded per token)."""
    ids = _ids(exported)[2]
    edge = 2 * exported.voice.mel_edge_frames
    _, normal = exported.latent([ids])
    _, slow = exported.latent([ids], [0.0, 1.3, 0.0])
    ratio = (slow[0] - edge) / (normal[0] - edge)
    assert normal[0] - edge > 2 * len(ids), "durations should be several frames per token"
    assert 1.2 < ratio < 1.4, ratio


def test_glow_noise_is_per_item(checkpoints: dict[str, coqui_checkpoints.Checkpoint], tmp_path: Path) -> None:
    """Glow-TTS noise comes from each item's SCALES[:, 0]; an item without noise is unchanged."""
    loaded = _load(checkpoints, "glow_tts", "hifigan")
    acoustic, _, _ = glow_tts.stages(loaded)
    ids = torch.tensor([coqui_ids(loaded, TEXTS[0])] * 2)
    lengths = torch.tensor([ids.shape[1]] * 2)
    speakers = torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        quiet, frames, _ = acoustic(ids, lengths, torch.tensor([[0.0, 1.0, 0.0]] * 2), speakers)
        noisy, noisy_frames, _ = acoustic(
            ids, lengths, torch.tensor([[0.0, 1.0, 0.0], [0.8, 1.0, 0.0]]), speakers
        )
    assert torch.equal(frames, noisy_frames)
    assert torch.equal(noisy[0], quiet[0])
    assert (noisy[1] - quiet[1]).abs().max() > 1e-2


def test_renormalization_is_exercised(checkpoints: dict[str, coqui_checkpoints.Checkpoint]) -> None:
    """With the renorm vocoder the conversion is a real one, and skipping it would be far
    outside the parity tolerance (the parity test above then checks it)."""
    loaded = _load(checkpoints, "fast_pitch", "hifigan_renorm")
    vocoder, edge = mel_vocoder(loaded)
    assert isinstance(vocoder, MelVocoder)
    assert vocoder.conversion.mode == "convert"
    ids = coqui_ids(loaded, TEXTS[0])
    mel = torch.from_numpy(coqui_mel(loaded, ids))[None]
    latent = pad_frames(functional.pad(mel, (edge, edge), "replicate"))
    samples = (mel.shape[-1] + 2 * edge) * int(loaded.tts.ap.hop_length)
    with torch.no_grad():
        converted = vocoder(latent)[0, :samples]
        raw = vocoder.safe.run(latent, lambda: vocoder.generator(latent))[0, 0, :samples]
    reference = torch.from_numpy(coqui_waveform(loaded, ids))
    assert (converted - reference).abs().max() < WAVE_TOL
    assert (raw - reference).abs().max() > 20 * WAVE_TOL


def _audio_processor(**overrides: Any) -> Any:
    from TTS.config.shared_configs import BaseAudioConfig
    from TTS.utils.audio import AudioProcessor

    stats = overrides.pop("stats", None)
    ap = AudioProcessor(BaseAudioConfig(**overrides))
    if stats is not None:
        rng = np.random.default_rng(stats)
        mean, std = rng.normal(-40, 10, ap.num_mels), rng.uniform(5, 20, ap.num_mels)
        ap.setup_scaler(mean.astype(np.float32), std.astype(np.float32), mean, std)
    return ap


@pytest.mark.parametrize(
    ("source", "target", "mode"),
    [
        ({}, {}, "clip"),
        ({"clip_norm": False}, {"clip_norm": False}, "identity"),
        ({"signal_norm": False}, {"signal_norm": False}, "identity"),
        ({}, {"max_norm": 1.0, "symmetric_norm": False}, "convert"),
        ({"clip_norm": False}, {"ref_level_db": 25, "min_level_db": -90}, "convert"),
        ({"stats": 1}, {}, "convert"),
        ({}, {"stats": 2}, "convert"),
        ({"stats": 3}, {"stats": 3}, "identity"),
        ({"signal_norm": False}, {"max_norm": 1.0}, "convert"),
    ],
)
def test_mel_conversion_matches_audio_processor(
    source: dict[str, Any], target: dict[str, Any], mode: str
) -> None:
    """MelConversion == Synthesizer's ``vocoder_ap.normalize(tts_ap.denormalize(mel))``."""
    source_ap, target_ap = _audio_processor(**source), _audio_processor(**target)
    conversion = MelConversion(source_ap, target_ap)
    assert conversion.mode == mode
    scale = 60.0 if not source_ap.signal_norm or hasattr(source_ap, "mel_scaler") else 5.0
    mel = (np.random.default_rng(0).standard_normal((80, 50)) * scale).astype(np.float32)
    expected = target_ap.normalize(source_ap.denormalize(mel))
    with torch.no_grad():
        got = conversion(torch.from_numpy(mel)[None])[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
