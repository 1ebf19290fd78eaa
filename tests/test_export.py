"""The Piper split: two halves that reproduce the original graph, with per-item scales."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.export.piper import bundled_joe_paths, export_piper_voice, verify_split


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    onnx_path, config_path = bundled_joe_paths()
    out = tmp_path_factory.mktemp("voice") / "joe"
    export_piper_voice(onnx_path, config_path, out)
    return out


def io_names(path: Path) -> tuple[list[str], list[str]]:
    model = onnx.load(str(path), load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in weights], [o.name for o in model.graph.output]


def test_public_tensor_names(exported: Path) -> None:
    assert io_names(exported / ACOUSTIC_FILE) == (
        ["PHONEME_IDS", "PHONEME_LENGTH", "SCALES"],
        ["LATENT", "FRAME_COUNT", "DURATIONS"],
    )
    assert io_names(exported / VOCODER_FILE) == (["LATENT"], ["WAVEFORM"])


def test_voice_description(exported: Path) -> None:
    voice = Voice.load(exported)
    assert (voice.name, voice.sample_rate, voice.hop_length) == ("joe", 22050, 256)
    assert voice.phonemizer_language == "en-us" and voice.latent_channels == 192
    assert voice.num_speakers == 1 and len(voice.symbols) > 100


def test_halves_reproduce_the_unsplit_graph(exported: Path, phonemizer, voice) -> None:
    ids = [
        voice.phonemes_to_ids(p)
        for p in phonemizer.phonemize(["Hello there.", "A longer test, with a pause."])
    ]
    assert verify_split(bundled_joe_paths()[0], exported, ids) <= 1e-5


def test_scales_are_per_item(exported: Path, phonemizer, voice) -> None:
    """Two copies of one sentence in one batch, different length scales, different lengths."""
    ids = voice.phonemes_to_ids(phonemizer.phonemize(["Per item scales."])[0])
    session = ort.InferenceSession(str(exported / ACOUSTIC_FILE), providers=["CPUExecutionProvider"])
    _, frames = session.run(
        ["LATENT", "FRAME_COUNT"],
        {
            "PHONEME_IDS": np.array([ids, ids], dtype=np.int64),
            "PHONEME_LENGTH": np.array([len(ids), len(ids)], dtype=np.int64),
            "SCALES": np.array([[0, 1.0, 0], [0, 2.0, 0]], dtype=np.float32),
        },
    )
    # Durations are rounded up per phoneme, so twice the length scale is a bit under 2x.
    assert 1.5 < frames[1] / frames[0] < 2.2
    for row, length_scale in enumerate((1.0, 2.0)):
        _, alone = session.run(
            ["LATENT", "FRAME_COUNT"],
            {
                "PHONEME_IDS": np.array([ids], dtype=np.int64),
                "PHONEME_LENGTH": np.array([len(ids)], dtype=np.int64),
                "SCALES": np.array([[0, length_scale, 0]], dtype=np.float32),
            },
        )
        assert alone[0] == frames[row]
