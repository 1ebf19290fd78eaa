"""Coqui Tacotron2-DDC, step-wise ONNX (encoder, decoder step, postnet) + the Python loop.

The reference is Coqui's own ``Tacotron2.inference`` on a random-weight checkpoint. Its
prenet dropout is off at inference (Coqui's default, ``prenet_dropout_at_inference=False``),
so the reference is deterministic.

A random-weight decoder settles into a fixed point within a few dozen steps, with a stop
logit near zero that depends on the text. The fixture shifts the stopnet's bias by
``STOP_SHIFT`` so that, with seed 0, the texts below stop at clearly different steps
("Good morning to you all." after 5, "Hi." after 24) or never ("Hello there.", cut by the
guard): the tests then cover a real stop-token stop, per-item stops in one batch, and the
guard. The stop logits cross zero with margins above 2e-3, two orders above the ONNX vs
PyTorch differences, so the frame counts are not a matter of rounding.
"""

from __future__ import annotations

import copy
import logging
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import torch

from testkit.coqui_checkpoints import _perturb, _tacotron2, build_tts, build_vocoder
from testkit.coqui_reference import coqui_ids, coqui_waveform
from triton_tts.contract.voice import VOCODER_FILE, Voice
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import Loaded, load
from triton_tts.export.coqui.tacotron2 import check_supported, export_stages
from triton_tts.runtime.batching import FRAME_MULTIPLE
from triton_tts.runtime.stages import RunFailed, StageSettings
from triton_tts.runtime.tacotron import ONNX_FILES, PAD_PARAMETER, Tacotron2Runner

pytestmark = pytest.mark.export  # builds and exports models

STOP_SHIFT = -0.3
MAX_STEPS = 40
STOPS = "Hi."  # stops on its stop token after 24 steps
EARLY = "Good morning to you all."  # after 5 steps
NEVER = "Hello there."  # never: the guard cuts it
# Mel values reach ~7; measured: ONNX vs PyTorch 2e-5..4e-5, padded batch vs batch 1
# 1e-5..3e-5 (different GEMM shapes round differently, and 40 recurrent steps carry it).
PARITY = 1e-4
BATCH = 1e-4

FloatArray = npt.NDArray[np.float32]


@dataclass
class Exported:
    loaded: Loaded
    folder: Path

    def ids(self, text: str) -> npt.NDArray[np.int64]:
        return np.array(coqui_ids(self.loaded, text), dtype=np.int64)

    def runner(self, max_steps: int = MAX_STEPS, edge_frames: int = 0) -> Tacotron2Runner:
        return Tacotron2Runner(self.folder, 2, max_steps, edge_frames)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    root = tmp_path_factory.mktemp("tacotron2")
    tts = build_tts("tacotron2", root / "tts", size="tiny")
    vocoder = build_vocoder("hifigan", root / "vocoder")
    loaded = load(
        checkpoint=tts.checkpoint,
        config=tts.config,
        vocoder_checkpoint=vocoder.checkpoint,
        vocoder_config=vocoder.config,
    )
    model = loaded.tts
    with torch.no_grad():
        model.decoder.stopnet[1].linear_layer.bias.add_(STOP_SHIFT)
    model.decoder.max_decoder_steps = model.config.max_decoder_steps = MAX_STEPS
    folder = root / "voice"
    folder.mkdir()
    export_stages(model, folder)
    return Exported(loaded, folder)


@pytest.fixture
def max_steps(exported: Exported) -> Iterator[Any]:
    """Coqui's decoder with a temporary guard (restored afterwards)."""
    decoder = exported.loaded.tts.decoder
    saved = decoder.max_decoder_steps
    yield decoder
    decoder.max_decoder_steps = saved


def coqui_mel(exported: Exported, ids: npt.NDArray[np.int64]) -> FloatArray:
    """Coqui's postnet mel for one item, [n_mels, frames]."""
    with torch.no_grad():
        outputs = exported.loaded.tts.inference(
            torch.from_numpy(ids).unsqueeze(0), aux_input={"x_lengths": torch.tensor([len(ids)])}
        )
    return outputs["model_outputs"][0].T.numpy()  # type: ignore[no-any-return]


def mel_of(result: tuple[FloatArray, int] | RunFailed) -> FloatArray:
    assert not isinstance(result, RunFailed), result
    mel, frames = result
    assert mel.shape[-1] == frames
    return mel


def test_files_written(exported: Exported) -> None:
    assert all((exported.folder / name).is_file() for name in ONNX_FILES)


def test_mel_matches_coqui(exported: Exported) -> None:
    ids = exported.ids(STOPS)
    reference = coqui_mel(exported, ids)
    mel = mel_of(exported.runner().run([ids], [np.zeros(3, np.float32)])[0])
    r = exported.loaded.tts.decoder.r
    assert reference.shape[-1] < MAX_STEPS * r  # a stop-token stop, not the guard
    assert mel.shape == reference.shape
    assert float(np.abs(mel - reference).max()) < PARITY


def test_durations_are_coquis_alignment_argmax(exported: Exported) -> None:
    """Frames per id (word timestamps) read off the attention: each decoder step's r frames
    go to the id it attends to most, as in Coqui's own alignments; the same in a padded
    batch; with edge frames, the leading ones count in the first id."""
    texts = [STOPS, EARLY]
    ids = [exported.ids(text) for text in texts]
    r = exported.loaded.tts.decoder.r
    runner = exported.runner(edge_frames=3)
    assert runner.has_durations
    batch = runner.run_timed(ids, [np.zeros(3, np.float32)] * len(ids))
    for row, result in zip(ids, batch, strict=True):
        assert not isinstance(result, RunFailed), result
        _, frames, durations = result
        assert durations is not None and durations.shape == (len(row),)
        with torch.no_grad():
            outputs = exported.loaded.tts.inference(
                torch.from_numpy(row).unsqueeze(0), aux_input={"x_lengths": torch.tensor([len(row)])}
            )
        alignments = outputs["alignments"][0].numpy()  # [steps, ids]
        reference = np.bincount(alignments.argmax(axis=1), minlength=len(row)) * r
        reference[0] += 3
        np.testing.assert_array_equal(durations, reference)
        assert durations.sum() == frames - 3  # the trailing edge frames belong to no id


def test_padded_batch_items_equal_batch_one(exported: Exported) -> None:
    texts = [STOPS, EARLY, NEVER]
    ids = [exported.ids(text) for text in texts]
    runner = exported.runner()
    batch = [mel_of(result) for result in runner.run(ids, [np.zeros(3, np.float32)] * 3)]
    frames = [mel.shape[-1] for mel in batch]
    assert len(set(frames)) == 3  # each item stops at its own step
    assert max(frames) == MAX_STEPS * exported.loaded.tts.decoder.r  # one is cut by the guard
    for row, mel in zip(ids, batch, strict=True):
        alone = mel_of(runner.run([row], [np.zeros(3, np.float32)])[0])
        assert mel.shape == alone.shape
        assert float(np.abs(mel - alone).max()) < BATCH
        assert float(np.abs(mel - coqui_mel(exported, row)).max()) < PARITY


def test_guard_cuts_an_item_that_never_stops(
    exported: Exported, max_steps: Any, caplog: pytest.LogCaptureFixture
) -> None:
    steps = 7
    max_steps.max_decoder_steps = steps
    ids = exported.ids(NEVER)
    with caplog.at_level(logging.WARNING, logger="triton_tts.runtime.tacotron"):
        mel = mel_of(exported.runner(max_steps=steps).run([ids], [np.zeros(3, np.float32)])[0])
    assert mel.shape[-1] == steps * max_steps.r
    assert "max_decoder_steps" in caplog.text
    reference = coqui_mel(exported, ids)
    assert reference.shape == mel.shape and float(np.abs(mel - reference).max()) < PARITY


def test_edge_frames_repeat_the_ends(exported: Exported) -> None:
    ids = exported.ids(EARLY)
    plain = mel_of(exported.runner().run([ids], [np.zeros(3, np.float32)])[0])
    padded = mel_of(exported.runner(edge_frames=3).run([ids], [np.zeros(3, np.float32)])[0])
    assert padded.shape[-1] == plain.shape[-1] + 6
    np.testing.assert_array_equal(padded[:, 3:-3], plain)
    np.testing.assert_array_equal(padded[:, :3], np.repeat(plain[:, :1], 3, axis=1))
    np.testing.assert_array_equal(padded[:, -3:], np.repeat(plain[:, -1:], 3, axis=1))


def test_empty_item_fails_alone(exported: Exported) -> None:
    results = exported.runner().run(
        [np.zeros(0, np.int64), exported.ids(EARLY)], [np.zeros(3, np.float32)] * 2
    )
    assert isinstance(results[0], RunFailed)
    # The other item is made as if it ran alone.
    (alone,) = exported.runner().run([exported.ids(EARLY)], [np.zeros(3, np.float32)])
    np.testing.assert_array_equal(mel_of(results[1]), mel_of(alone))


def test_speakers_per_item(tmp_path: Path) -> None:
    """A multi-speaker model (speaker embedding concatenated to the encoder outputs): each
    item of a padded batch with its own speaker equals Coqui's batch-1 inference for it."""
    torch.manual_seed(1)
    _, model = _tacotron2("tiny", speakers=3)
    _perturb(model)
    model.eval()
    model.decoder.max_decoder_steps = 12
    export_stages(model, tmp_path)
    runner = Tacotron2Runner(tmp_path, 2, 12, 0)
    assert runner.uses_speaker
    generator = np.random.default_rng(0)
    ids = [generator.integers(1, 40, n).astype(np.int64) for n in (9, 21, 5)]
    speakers = [2, 0, 1]
    results = runner.run(ids, [np.zeros(3, np.float32)] * 3, speakers)
    for row, speaker, result in zip(ids, speakers, results, strict=True):
        aux = {"x_lengths": torch.tensor([len(row)]), "speaker_ids": torch.tensor([speaker])}
        with torch.no_grad():
            reference = model.inference(torch.from_numpy(row).unsqueeze(0), aux_input=aux)["model_outputs"]
        mel = mel_of(result)
        assert mel.shape == reference[0].T.shape
        assert float(np.abs(mel - reference[0].T.numpy()).max()) < PARITY


@pytest.mark.parametrize(
    "option",
    [("attention_type", "graves"), ("use_forward_attn", True), ("attention_win", True), ("use_gst", True)],
)
def test_unsupported_options_are_refused(exported: Exported, option: tuple[str, Any]) -> None:
    config = copy.deepcopy(exported.loaded.tts.config)
    setattr(config, *option)
    with pytest.raises(ValueError, match=option[0]):
        check_supported(types.SimpleNamespace(config=config))


def test_waveform_matches_coqui(exported: Exported, tmp_path: Path) -> None:
    loaded = exported.loaded
    voice = export_coqui(loaded, tmp_path, "t2")  # the CLI's path: all four files + voice.json
    assert Voice.load(tmp_path) == voice
    assert all((tmp_path / name).is_file() for name in ONNX_FILES)
    assert (voice.acoustic_kind, voice.max_decoder_steps) == ("tacotron2", MAX_STEPS)
    assert voice.latent_channels == loaded.tts.decoder.frame_channels
    ids = exported.ids(STOPS)
    mel = mel_of(exported.runner(edge_frames=voice.mel_edge_frames).run([ids], [np.zeros(3, np.float32)])[0])
    session = ort.InferenceSession(str(tmp_path / VOCODER_FILE), providers=["CPUExecutionProvider"])
    waveform = session.run(["WAVEFORM"], {"LATENT": mel[None]})[0][0]
    reference = coqui_waveform(loaded, ids.tolist())
    assert waveform.shape == reference.shape
    assert float(np.abs(waveform - reference).max()) < 1e-6  # measured 6e-9 (peak 2e-2)


def test_padded_latents_give_the_same_audio(exported: Exported, tmp_path: Path) -> None:
    """GPU named configs set ``pad_latent_frames``: each mel is zero-padded to that multiple
    so the native vocoder can batch it with others of the same width; FRAME_COUNT stays the
    true count, and the padding-masked vocoder's audio, trimmed to it as postprocess does,
    is the unpadded mel's audio."""
    voice = export_coqui(exported.loaded, tmp_path, "t2")
    onnx_path = tmp_path / "model.onnx"  # what StageSettings names; its folder holds the voice
    padding = Tacotron2Runner.from_settings(
        StageSettings(onnx_path, 2, {PAD_PARAMETER: str(FRAME_MULTIPLE)}), voice
    )
    plain = Tacotron2Runner.from_settings(StageSettings(onnx_path, 2, {}), voice)
    assert (padding.frame_multiple, plain.frame_multiple) == (FRAME_MULTIPLE, 1)
    assert voice.mel_edge_frames > 0  # the edge frames come before the zeros
    ids = [exported.ids(text) for text in (STOPS, EARLY, NEVER)]
    no_scales = [np.zeros(3, np.float32)] * len(ids)
    mels = [mel_of(result) for result in plain.run(ids, no_scales)]
    latents: list[FloatArray] = []
    for mel, result in zip(mels, padding.run(ids, no_scales), strict=True):
        assert not isinstance(result, RunFailed), result
        latent, frames = result
        assert frames == mel.shape[-1] < latent.shape[-1]  # these texts' mels all get zeros
        assert latent.shape[-1] % FRAME_MULTIPLE == 0
        np.testing.assert_array_equal(latent[:, :frames], mel)
        assert not latent[:, frames:].any()
        latents.append(latent)
    # The native vocoder's batches: latents of one width stacked (the frame counts differ).
    session = ort.InferenceSession(str(tmp_path / VOCODER_FILE), providers=["CPUExecutionProvider"])
    widths = sorted({latent.shape[-1] for latent in latents})
    assert len(widths) < len(latents)  # at least one batch of two lengths
    for width in widths:
        batch = [i for i, latent in enumerate(latents) if latent.shape[-1] == width]
        waveforms = session.run(["WAVEFORM"], {"LATENT": np.stack([latents[i] for i in batch])})[0]
        for row, i in enumerate(batch):
            audio = waveforms[row, : mels[i].shape[-1] * voice.hop_length]
            alone = session.run(["WAVEFORM"], {"LATENT": mels[i][None]})[0][0]
            assert audio.shape == alone.shape
            np.testing.assert_allclose(audio, alone, rtol=0, atol=1e-6)  # measured <= 2e-9
