"""Coqui VITS -> voice folder, checked against Coqui's own PyTorch inference.

The models are random-weight Coqui checkpoints built from Coqui's config classes
(testkit/coqui_checkpoints.py), loaded back through Coqui's ``Synthesizer`` like a
downloaded model. Weights are perturbed, so the flows are not the identity map they are
at Coqui's initialisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

from testkit.coqui_checkpoints import build_tts
from testkit.coqui_reference import coqui_ids, coqui_waveform
from triton_tts.contract.voice import Voice
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import Loaded, load
from triton_tts.quality.intelligibility import GateThresholds
from triton_tts.text.normalize import normalize_english
from triton_tts.text.phonemize import EspeakPhonemizer

pytestmark = pytest.mark.export  # builds and exports models

TEXTS = [
    "Hello world, this is a test.",
    "Short.",
    "A somewhat longer sentence, to check that padding in a batch changes nothing at all.",
]
PARITY_ATOL = 1e-4  # measured ~6e-8 (float rounding); Coqui's waveforms peak ~0.1-0.5
BATCH_ATOL = 1e-5


def _sessions(folder: Path) -> tuple[ort.InferenceSession, ort.InferenceSession]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    acoustic, vocoder = (
        ort.InferenceSession(str(folder / name), opts, providers=["CPUExecutionProvider"])
        for name in ("acoustic.onnx", "vocoder.onnx")
    )
    return acoustic, vocoder


def acoustic_feeds(
    acoustic: ort.InferenceSession,
    ids: list[list[int]],
    scales: tuple[float, float, float] = (0.0, 1.0, 0.0),
    speaker_ids: npt.NDArray[np.int64] | None = None,
) -> dict[str, Any]:
    """A padded batch of ``ids`` as the exported acoustic graph's inputs."""
    padded = np.zeros((len(ids), max(map(len, ids))), np.int64)
    for row, item in enumerate(ids):
        padded[row, : len(item)] = item
    feeds: dict[str, Any] = {
        "PHONEME_IDS": padded,
        "PHONEME_LENGTH": np.array([len(i) for i in ids], np.int64),
        "SCALES": np.array([scales] * len(ids), np.float32),
    }
    if "SPEAKER_ID" in {i.name for i in acoustic.get_inputs()}:
        feeds["SPEAKER_ID"] = speaker_ids if speaker_ids is not None else np.zeros(len(ids), np.int64)
    return feeds


def synthesize(
    folder: Path,
    ids: list[list[int]],
    scales: tuple[float, float, float] = (0.0, 1.0, 0.0),
    speakers: list[int] | None = None,
) -> list[npt.NDArray[np.float32]]:
    """A padded batch through the exported acoustic + vocoder, trimmed per item."""
    acoustic, vocoder = _sessions(folder)
    speaker_ids = np.array(speakers or [0] * len(ids), np.int64)
    latent, frames = acoustic.run(
        ["LATENT", "FRAME_COUNT"], acoustic_feeds(acoustic, ids, scales, speaker_ids)
    )
    vocoder_feeds: dict[str, Any] = {"LATENT": latent}
    if "SPEAKER_ID" in {i.name for i in vocoder.get_inputs()}:
        vocoder_feeds["SPEAKER_ID"] = speaker_ids
    waveform = vocoder.run(None, vocoder_feeds)[0]
    hop = waveform.shape[-1] // latent.shape[-1]
    return [waveform[row, : int(frames[row]) * hop] for row in range(len(ids))]


@pytest.fixture(scope="module")
def vits(tmp_path_factory: pytest.TempPathFactory) -> tuple[Loaded, Path]:
    saved = build_tts("vits", tmp_path_factory.mktemp("vits-checkpoint"))
    loaded = load(checkpoint=saved.checkpoint, config=saved.config)
    out = tmp_path_factory.mktemp("voices") / "coqui-vits"
    export_coqui(loaded, out)
    return loaded, out


@pytest.fixture(scope="module")
def vits_speakers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Loaded, Path]:
    saved = build_tts("vits", tmp_path_factory.mktemp("vctk-checkpoint"), speakers=3)
    loaded = load(checkpoint=saved.checkpoint, config=saved.config)
    out = tmp_path_factory.mktemp("voices") / "coqui-vctk"
    export_coqui(loaded, out)
    return loaded, out


def test_voice_folder_describes_the_coqui_model(vits: tuple[Loaded, Path]) -> None:
    loaded, folder = vits
    voice = Voice.load(folder)
    characters = loaded.tts.tokenizer.characters
    assert voice.family == "vits" and voice.tokens == "phonemes"
    assert voice.intersperse == [characters.blank_id]  # Coqui VITS: add_blank
    assert voice.latent_channels == loaded.tts.args.hidden_channels
    assert voice.sample_rate == loaded.tts.ap.sample_rate and voice.hop_length == 256
    assert voice.symbols["a"] == [characters.vocab.index("a")]
    assert voice.source.startswith("coqui:")


def test_tokens_equal_coquis_tokenizer(vits: tuple[Loaded, Path]) -> None:
    """The server's path (normaliser, espeak-ng, the voice's framing) gives Coqui's ids.
    Texts without numbers or abbreviations: there the normalisers agree by design."""
    loaded, folder = vits
    voice = Voice.load(folder)
    phonemizer = EspeakPhonemizer(voice.phonemizer_language)
    texts = [*TEXTS, "Where are you going? I'm going home!"]
    ours = [voice.phonemes_to_ids(p) for p in phonemizer.symbols([normalize_english(t) for t in texts])]
    assert ours == [coqui_ids(loaded, t) for t in texts]


def test_equals_coqui_inference_at_batch_one(vits: tuple[Loaded, Path]) -> None:
    loaded, folder = vits
    for text in TEXTS:
        ids = coqui_ids(loaded, text)
        reference = coqui_waveform(loaded, ids)
        (ours,) = synthesize(folder, [ids])
        assert ours.shape == reference.shape
        assert np.abs(reference).max() > 0.01  # real audio, not silence
        np.testing.assert_allclose(ours, reference, atol=PARITY_ATOL)


def test_durations_are_coquis_w_ceil(vits: tuple[Loaded, Path]) -> None:
    """DURATIONS (word timestamps) are Coqui's own frames per id, in a padded batch."""
    import torch

    loaded, folder = vits
    acoustic, _ = _sessions(folder)
    items = [coqui_ids(loaded, text) for text in TEXTS]
    durations, frames = acoustic.run(["DURATIONS", "FRAME_COUNT"], acoustic_feeds(acoustic, items))
    for row, item in enumerate(items):
        aux = {"x_lengths": torch.tensor([len(item)]), "speaker_ids": None, "d_vectors": None}
        with torch.no_grad():
            reference = loaded.tts.inference(torch.tensor([item]), aux_input=aux)["durations"].reshape(-1)
        np.testing.assert_array_equal(durations[row, : len(item)], reference.numpy())
        assert not durations[row, len(item) :].any() and durations[row].sum() == frames[row]


def test_padded_batch_equals_batch_one(vits: tuple[Loaded, Path]) -> None:
    loaded, folder = vits
    ids = [coqui_ids(loaded, t) for t in TEXTS]
    batched = synthesize(folder, ids)
    for item, audio in zip(ids, batched, strict=True):
        (alone,) = synthesize(folder, [item])
        assert audio.shape == alone.shape
        np.testing.assert_allclose(audio, alone, atol=BATCH_ATOL)


def test_one_item_runs_use_the_mask_free_copy(vits: tuple[Loaded, Path]) -> None:
    """The export also writes the vocoder without its padding masks; the CPU runner uses
    it for runs of one item (nothing to mask) and the masked graph for padded runs."""
    import onnx

    from triton_tts.contract.voice import VOCODER_FILE, VOCODER_UNPADDED_FILE
    from triton_tts.runtime.stages import VocoderRunner

    loaded, folder = vits
    ops = [
        [n.op_type for n in onnx.load(str(folder / f)).graph.node]
        for f in (VOCODER_FILE, VOCODER_UNPADDED_FILE)
    ]
    assert ops[1].count("Mul") < ops[0].count("Mul") and "Less" in ops[0] and "Less" not in ops[1]
    acoustic, _ = _sessions(folder)
    latents = []
    for text in TEXTS[:2]:
        ids = np.array([coqui_ids(loaded, text)], np.int64)
        feeds = {
            "PHONEME_IDS": ids,
            "PHONEME_LENGTH": np.array([ids.shape[1]]),
            "SCALES": np.array([[0, 1, 0]], np.float32),
        }
        latent, frames = acoustic.run(["LATENT", "FRAME_COUNT"], feeds)
        latents.append(latent[0, :, : int(frames[0])])
    one_by_one = VocoderRunner(folder / VOCODER_FILE, 1, max_items_per_run=1, max_padded=10_000)
    padded = VocoderRunner(folder / VOCODER_FILE, 1, max_items_per_run=2, max_padded=10_000)
    assert one_by_one.unpadded is not None
    masked = ort.InferenceSession(str(folder / VOCODER_FILE), providers=["CPUExecutionProvider"])
    for latent, alone, in_batch in zip(latents, one_by_one.run(latents), padded.run(latents), strict=True):
        reference = masked.run(None, {"LATENT": latent[None]})[0][0]
        assert isinstance(alone, np.ndarray) and isinstance(in_batch, np.ndarray)
        np.testing.assert_allclose(alone, reference, atol=1e-6)
        np.testing.assert_allclose(in_batch, reference, atol=BATCH_ATOL)


def test_length_scale_per_item_matches_coqui(vits: tuple[Loaded, Path]) -> None:
    loaded, folder = vits
    ids = coqui_ids(loaded, TEXTS[0])
    (normal,) = synthesize(folder, [ids])
    (slow,) = synthesize(folder, [ids], scales=(0.0, 1.5, 0.0))
    assert 1.35 < len(slow) / len(normal) < 1.65
    np.testing.assert_allclose(slow, coqui_waveform(loaded, ids, length_scale=1.5), atol=PARITY_ATOL)


def test_noise_is_per_request_and_off_is_deterministic(vits: tuple[Loaded, Path]) -> None:
    loaded, folder = vits
    ids = coqui_ids(loaded, TEXTS[0])
    first, second = synthesize(folder, [ids, ids], scales=(0.667, 1.0, 0.8))
    assert first.shape != second.shape or not np.allclose(first, second)  # sampled per item
    quiet_a, quiet_b = synthesize(folder, [ids, ids])
    np.testing.assert_array_equal(quiet_a, quiet_b)


def test_multi_speaker_vits(vits_speakers: tuple[Loaded, Path]) -> None:
    """Per-item speaker ids, in the acoustic model and the speaker-conditioned decoder."""
    loaded, folder = vits_speakers
    voice = Voice.load(folder)
    assert voice.num_speakers == 3 and voice.vocoder_uses_speaker
    ids = coqui_ids(loaded, TEXTS[0])
    batched = synthesize(folder, [ids, ids, ids], speakers=[0, 1, 2])
    for speaker, audio in enumerate(batched):
        reference = coqui_waveform(loaded, ids, speaker_id=speaker)
        assert audio.shape == reference.shape
        np.testing.assert_allclose(audio, reference, atol=PARITY_ATOL)
    assert batched[0].shape != batched[1].shape or not np.allclose(batched[0], batched[1], atol=1e-3)


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_precisions(vits_speakers: tuple[Loaded, Path], precision: str, tmp_path: Path) -> None:
    """FP16 (both stages, FP32 at the edges) and INT8 (vocoder only, gated on quality),
    on the multi-speaker model so the speaker input goes through quantisation too."""
    import json

    import onnx

    loaded, fp32_folder = vits_speakers
    folder = tmp_path / f"vctk-{precision}"
    # Random weights: no recogniser follows them, so the gate judges SNR alone here (its WER
    # side is proven on real weights: tests/test_quantize.py, tests/test_precision_gates.py).
    gate = GateThresholds(measure_wer=False)
    voice = export_coqui(loaded, folder, name="vctk", precision=precision, gate=gate)
    assert voice.name == "vctk" and Voice.load(folder) == voice
    report = json.loads((folder / "quality.json").read_text(encoding="utf-8"))
    assert report["accepted"] and report["reason"] == "within the SNR floor", report
    vocoder = onnx.load(str(folder / "vocoder.onnx"))
    weights = {init.data_type for init in vocoder.graph.initializer}
    if precision == "fp16":
        assert voice.precision == {"acoustic": "fp16", "vocoder": "fp16"}
        assert onnx.TensorProto.FLOAT16 in weights
        atol = 0.05
    else:
        assert voice.precision == {"acoustic": "fp32", "vocoder": "int8"}
        assert any(node.op_type == "QuantizeLinear" for node in vocoder.graph.node)
        unpadded = onnx.load(str(folder / "vocoder_unpadded.onnx"))  # quantised, masks dropped
        assert any(node.op_type == "QLinearConv" for node in unpadded.graph.node)
        atol = 0.2
    ids = coqui_ids(loaded, TEXTS[0])
    (reference,) = synthesize(fp32_folder, [ids], speakers=[1])
    (ours,) = synthesize(folder, [ids], speakers=[1])
    assert ours.shape == reference.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, atol=atol)
