"""XTTS v2 export (issue 26): a random-weight XTTS v2 in Coqui's layout (model.pth,
config.json, vocab.json; testkit/xtts_checkpoints.py, the small configuration) exported
with the real command, and its graphs on ONNX Runtime against Coqui's own ``Xtts``: the
conditioning latents and speaker embedding of clips, greedy codes and audio for texts the
export's gate did not use, and a refusal when the graphs are not the model's.

Random weights rarely choose the stop code, so generations run to a cap (the checkpoint's
``gpt_max_audio_tokens``, lowered here): each comparison covers every step to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from testkit.xtts_checkpoints import build_xtts, voiced_clip
from triton_tts.export.coqui.cli import main as export_main
from triton_tts.export.coqui.loading import load
from triton_tts.export.coqui.xtts.export import (
    MIN_SNR_DB,
    PARITY_FILE,
    ParityRefused,
    check_parity,
    gate_clip,
    snr_db,
)
from triton_tts.xtts.card import CARD_FILE, CPML, GRAPH_FILES, Sampling, XttsCard, is_xtts_folder
from triton_tts.xtts.runner import XttsRunner

pytestmark = pytest.mark.export
FloatArray = npt.NDArray[np.float32]

MAX_AUDIO_TOKENS = 43  # 40 generated codes (Coqui generates gpt_max_audio_tokens - 3)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_xtts(tmp_path_factory.mktemp("xtts-ckpt"), "tiny", seed=0, max_audio_tokens=MAX_AUDIO_TOKENS)


@pytest.fixture(scope="module")
def coqui(checkpoint: Path) -> Any:
    model = load(checkpoint=checkpoint / "model.pth", config=checkpoint / "config.json").tts
    model.eval()
    return model


@pytest.fixture(scope="module")
def voice(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("xtts-voice") / "xtts"
    export_main(
        [
            "--checkpoint",
            str(checkpoint / "model.pth"),
            "--config",
            str(checkpoint / "config.json"),
            "--out",
            str(out),
        ]
    )
    return out


def clip(seed: int, seconds: float, rate: int = 22050) -> FloatArray:
    clip_audio: FloatArray = voiced_clip(seed, seconds, rate)
    return clip_audio


def coqui_conditioning(model: Any, audio: FloatArray) -> tuple[torch.Tensor, torch.Tensor]:
    config = model.config
    tensor = torch.from_numpy(audio)[None]
    with torch.no_grad():
        style = model.get_gpt_cond_latents(
            tensor, 22050, length=config.gpt_cond_len, chunk_length=config.gpt_cond_chunk_len
        )
        speaker = model.get_speaker_embedding(tensor[:, : int(22050 * config.max_ref_len)], 22050)
    return style, speaker


def test_the_folder_holds_the_graphs_the_card_and_the_licence(voice: Path, checkpoint: Path) -> None:
    assert is_xtts_folder(voice)
    for name in (*GRAPH_FILES, "vocab.json", "embeddings.npz"):
        assert (voice / name).is_file(), name
    card = XttsCard.load(voice)
    config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    args = config["model_args"]
    assert card.licence == CPML
    assert card.languages == config["languages"] and "zh-cn" in card.languages
    assert (card.layers, card.model_dim, card.heads) == (
        args["gpt_layers"],
        args["gpt_n_model_channels"],
        args["gpt_n_heads"],
    )
    assert card.max_text_tokens == args["gpt_max_text_tokens"]
    assert card.max_audio_tokens == MAX_AUDIO_TOKENS - 3
    assert (card.audio_start, card.audio_stop, card.audio_codes) == (1024, 1025, 1026)
    assert card.sampling == Sampling(
        temperature=config["temperature"],
        top_k=config["top_k"],
        top_p=config["top_p"],
        repetition_penalty=config["repetition_penalty"],
        length_penalty=config["length_penalty"],
    )
    report = json.loads((voice / PARITY_FILE).read_text(encoding="utf-8"))
    assert report["passed"] and all(t["snr_db"] >= MIN_SNR_DB for t in report["texts"])


@pytest.mark.parametrize(("seed", "seconds"), [(1, 1.2), (2, 9.5), (3, 31.0)])
def test_conditioning_equals_coquis(voice: Path, coqui: Any, seed: int, seconds: float) -> None:
    """One chunk, several with a short tail, and a clip past the 30 s reference limit."""
    audio = clip(seed, seconds)
    ours = XttsRunner(voice).conditioning(audio)
    style, speaker = coqui_conditioning(coqui, audio)
    np.testing.assert_allclose(ours.style, style[0].numpy(), atol=1e-4 * float(style.abs().max()))
    np.testing.assert_allclose(ours.speaker, speaker[0, :, 0].numpy(), atol=1e-5)


@pytest.mark.parametrize(
    "text", ["Good morning, this is a test of the export.", "Numbers like 42 are read too.", "Short."]
)
def test_greedy_codes_and_audio_equal_coquis(voice: Path, coqui: Any, text: str) -> None:
    style, speaker = coqui_conditioning(coqui, clip(4, 5.0))
    ids = coqui.tokenizer.encode(text.strip().lower(), lang="en")
    with torch.no_grad():
        reference = coqui.inference(
            text, "en", style, speaker, do_sample=False, repetition_penalty=coqui.config.repetition_penalty
        )
    runner = XttsRunner(voice)
    gen = runner.generate(
        style[0].numpy(), ids, Sampling(temperature=0.0, repetition_penalty=coqui.config.repetition_penalty)
    )
    latents = np.stack(gen.latents)
    np.testing.assert_allclose(latents, reference["gpt_latents"][0], atol=1e-4)
    assert len(gen.codes) == runner.card.max_audio_tokens  # ran to the cap: every step compared
    wav = runner.waveform(latents, speaker[0, :, 0].numpy())
    assert snr_db(np.asarray(reference["wav"], dtype=np.float32), wav) >= MIN_SNR_DB


@pytest.mark.parametrize("seed", [0, 1])
def test_teacher_forced_logits_equal_coquis_at_every_step(voice: Path, coqui: Any, seed: int) -> None:
    """Codes the model would not choose (random, stop code last), fed through the cached
    loop, against Coqui's own teacher-forced forward (GPT.get_logits over the whole prompt)."""
    rng = np.random.default_rng(seed)
    gpt = coqui.gpt
    style, _ = coqui_conditioning(coqui, clip(7 + seed, 3.0))
    ids = coqui.tokenizer.encode("teacher forcing, step by step.", lang="en")
    codes = [*rng.integers(0, gpt.start_audio_token, 30).tolist(), int(gpt.stop_audio_token)]
    ours = XttsRunner(voice).teacher_forced(style[0].numpy(), ids, codes)
    text = torch.tensor([[gpt.start_text_token, *ids, gpt.stop_text_token]])
    audio = torch.tensor([[gpt.start_audio_token, *codes[:-1]]])
    with torch.no_grad():
        _, logits = gpt.get_logits(
            gpt.text_embedding(text) + gpt.text_pos_embedding(text),
            gpt.text_head,
            gpt.mel_embedding(audio) + gpt.mel_pos_embedding(audio),
            gpt.mel_head,
            prompt=style,
        )
    theirs = logits[0].transpose(0, 1).numpy()  # (steps, codes)
    assert ours.shape == theirs.shape == (len(codes), gpt.num_audio_tokens)
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * float(np.abs(theirs).max()))


def test_another_clip_changes_the_conditioning_and_the_audio(voice: Path) -> None:
    runner = XttsRunner(voice)
    one, other = runner.conditioning(clip(5, 4.0)), runner.conditioning(clip(6, 4.0))
    assert np.abs(one.speaker - other.speaker).max() > 1e-3
    assert np.abs(one.style - other.style).max() > 1e-3
    ids = [5, 9, 14, 22]
    greedy = Sampling(temperature=0.0)
    a, b = runner.synthesise(ids, one, greedy), runner.synthesise(ids, other, greedy)
    assert a.shape == b.shape and snr_db(a, b) < 20


def test_the_gate_refuses_graphs_that_are_not_the_models(voice: Path, tmp_path: Path) -> None:
    other = load(
        checkpoint=build_xtts(tmp_path / "other", "tiny", seed=1, max_audio_tokens=MAX_AUDIO_TOKENS)
        / "model.pth",
        config=tmp_path / "other" / "config.json",
    ).tts
    other.eval()
    with pytest.raises(ParityRefused, match="does not reproduce") as refused:
        check_parity(other, voice, gate_clip(22050 * 3))
    report = refused.value.report  # what export_xtts writes as parity.json beside no card
    assert report["passed"] is False and report["failures"] and report["style"] > 1e-3


# Without the perceiver resampler (Coqui's gpt_use_perceiver_resampler false, XTTS v1's
# way): Coqui conditions on the whole clip in one pass, a latent per spectrogram frame.


@pytest.fixture(scope="module")
def whole_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """Coqui's model and its export, for a checkpoint without the perceiver."""
    work = tmp_path_factory.mktemp("xtts-whole-clip")
    checkpoint = build_xtts(work / "ckpt", "tiny", seed=5, max_audio_tokens=MAX_AUDIO_TOKENS, perceiver=False)
    paths = ["--checkpoint", str(checkpoint / "model.pth"), "--config", str(checkpoint / "config.json")]
    export_main([*paths, "--out", str(work / "voice")])
    model = load(checkpoint=checkpoint / "model.pth", config=checkpoint / "config.json").tts
    model.eval()
    return model, work / "voice"


def test_without_the_perceiver_the_export_passes_its_gate(whole_clip: tuple[Any, Path]) -> None:
    coqui, voice = whole_clip
    assert coqui.args.gpt_use_perceiver_resampler is False
    card = XttsCard.load(voice)
    # A latent per 1024 samples of the 30 s the GPT is conditioned on, at most.
    assert not card.perceiver and card.style_latents == 1 + 22050 * 30 // 1024
    report = json.loads((voice / PARITY_FILE).read_text(encoding="utf-8"))
    assert report["passed"] and report["conditioning"] == "whole clip"
    assert all(t["snr_db"] >= MIN_SNR_DB for t in report["texts"])


@pytest.mark.parametrize(("seed", "seconds"), [(1, 1.2), (2, 9.5), (3, 31.0)])
def test_without_the_perceiver_conditioning_equals_coquis(
    whole_clip: tuple[Any, Path], seed: int, seconds: float
) -> None:
    """One style over the whole clip: its latents follow the clip's length (up to 30 s)."""
    coqui, voice = whole_clip
    audio = clip(seed, seconds)
    ours = XttsRunner(voice).conditioning(audio)
    style, speaker = coqui_conditioning(coqui, audio)
    assert ours.style.shape == style[0].shape == (1 + int(22050 * min(seconds, 30)) // 1024, 128)
    np.testing.assert_allclose(ours.style, style[0].numpy(), atol=1e-4 * float(style.abs().max()))
    np.testing.assert_allclose(ours.speaker, speaker[0, :, 0].numpy(), atol=1e-5)
    assert XttsCard.load(voice).takes_style(ours.style.shape)  # a stored speaker of this voice


def test_without_the_perceiver_greedy_codes_and_audio_equal_coquis(whole_clip: tuple[Any, Path]) -> None:
    coqui, voice = whole_clip
    text = "A voice conditioned on the whole clip."
    style, speaker = coqui_conditioning(coqui, clip(4, 7.0))
    with torch.no_grad():
        reference = coqui.inference(
            text, "en", style, speaker, do_sample=False, repetition_penalty=coqui.config.repetition_penalty
        )
    runner = XttsRunner(voice)
    greedy = Sampling(temperature=0.0, repetition_penalty=coqui.config.repetition_penalty)
    gen = runner.generate(style[0].numpy(), coqui.tokenizer.encode(text.lower(), lang="en"), greedy)
    latents = np.stack(gen.latents)
    np.testing.assert_allclose(latents, reference["gpt_latents"][0], atol=1e-4)
    wav = runner.waveform(latents, speaker[0, :, 0].numpy())
    assert snr_db(np.asarray(reference["wav"], dtype=np.float32), wav) >= MIN_SNR_DB


def test_only_fp32_is_exported(checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "v"
    with pytest.raises(SystemExit, match="fp32 only"):
        export_main(
            [
                "--checkpoint",
                str(checkpoint / "model.pth"),
                "--config",
                str(checkpoint / "config.json"),
                "--out",
                str(folder),
                "--precision",
                "fp16",
            ]
        )
    assert not (folder / CARD_FILE).exists()
