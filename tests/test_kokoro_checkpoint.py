"""`triton-tts export kokoro --checkpoint`: a full-precision Kokoro checkpoint as a voice,
tested on one built here with random weights (kokoro 0.9.4's own model code, from the sdist
`make kokoro` downloads). The export checks its split against torch; the voice then runs
through the serving stages' own runners, and bad arguments are refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from triton_tts.contract.styles import StyleTable
from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.runtime.stages import AcousticRunner, RunFailed, VocoderRunner

pytestmark = pytest.mark.export  # builds and exports a model with torch

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / ".wheelhouse" / "kokoro"


def random_checkpoint(folder: Path) -> tuple[Path, Path]:
    """A Kokoro v1.0-shaped checkpoint with random weights (a small ALBERT; the decoder's
    sizes are fixed by its code) and its config.json. Two weights are tamed so that the
    random model speaks at a sane length and level: its durations (~2 frames a token) and
    the generator's last convolution (random log-magnitudes would overflow the iSTFT)."""
    import tempfile

    import torch

    from triton_tts.export.kokoro import read_vocab
    from triton_tts.export.kokoro_checkpoint import kmodel_class

    config = {
        "vocab": read_vocab(PACKAGES),
        "n_token": 178,
        "hidden_dim": 512,
        "style_dim": 128,
        "n_layer": 1,
        "max_dur": 50,
        "dropout": 0.2,
        "text_encoder_kernel_size": 5,
        "n_mels": 80,
        "plbert": {
            "hidden_size": 64,
            "num_attention_heads": 2,
            "intermediate_size": 128,
            "max_position_embeddings": 512,
            "num_hidden_layers": 1,
            "dropout": 0.1,
        },
        "istftnet": {
            "upsample_kernel_sizes": [20, 12],
            "upsample_rates": [10, 6],
            "gen_istft_hop_size": 5,
            "gen_istft_n_fft": 20,
            "resblock_dilation_sizes": [[1, 3, 5]],
            "resblock_kernel_sizes": [3],
            "upsample_initial_channel": 512,
        },
    }
    with tempfile.TemporaryDirectory() as scratch:
        try:
            kmodel = kmodel_class(PACKAGES, Path(scratch))
            torch.manual_seed(0)
            empty = folder / "empty.pth"
            torch.save({}, empty)  # no weights: KModel keeps its random initialisation
            model = kmodel(
                repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty), disable_complex=True
            )
        finally:
            for name in [m for m in sys.modules if m == "kokoro" or m.startswith("kokoro.")]:
                del sys.modules[name]
    parts = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
    state = {key: getattr(model, key).state_dict() for key in parts}
    state["decoder"]["generator.conv_post.weight_g"] *= 0.001
    state["decoder"]["generator.conv_post.bias"] *= 0.0
    state["predictor"]["duration_proj.linear_layer.weight"] *= 0.01
    state["predictor"]["duration_proj.linear_layer.bias"][:] = -3.0
    checkpoint, config_path = folder / "kokoro-random.pth", folder / "config.json"
    torch.save(state, checkpoint)
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return checkpoint, config_path


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "triton_tts.cli", "export", "kokoro", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=1200)


def test_a_random_checkpoint_exports_checked_and_speaks_through_the_stages(tmp_path: Path) -> None:
    if not PACKAGES.is_dir():
        pytest.fail(f"no Kokoro packages at {PACKAGES}: run `make kokoro` (make test does)")
    checkpoint, config = random_checkpoint(tmp_path)
    out = tmp_path / "voice"
    done = _export(
        "--checkpoint", str(checkpoint), "--config", str(config), "--out", str(out), "--name", "kr"
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    card = (out / "MODEL_CARD").read_text(encoding="utf-8")
    assert (
        "checkpoint kokoro-random.pth (FP32" in card
        and "Split checked against the whole graph on 2 items" in card
    )
    voice = Voice.load(out)
    assert voice.name == "kr" and voice.precision == {} and len(voice.speakers) == 28

    ids = np.array([0, *range(43, 83), 0], np.int64)
    style = StyleTable.load(out).style({3: 1.0}, len(ids) - 2)
    scales = np.array([0.0, 1.0, 0.0], np.float32)
    runner = AcousticRunner(out / ACOUSTIC_FILE, 1, 1, 4096)
    _, result = next(runner.iter_timed([ids], [scales], None, [style]))
    assert not isinstance(result, RunFailed), result
    latent, frames, durations = result
    assert latent.shape == (644, frames) and durations is not None and int(durations.sum()) == frames
    audio = VocoderRunner(out / VOCODER_FILE, 1, 1, 4096).run([latent])[0]
    assert isinstance(audio, np.ndarray) and audio.shape == (frames * 600,) and np.isfinite(audio).all()
    assert 0 < float(np.max(np.abs(audio))) < 10


def test_bad_checkpoint_arguments_are_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}", encoding="utf-8")
    alone = _export("--checkpoint", str(config), "--out", str(tmp_path / "a"))
    assert alone.returncode != 0 and "--checkpoint and --config go together" in alone.stderr
    missing = _export(
        "--checkpoint", str(tmp_path / "none.pth"), "--config", str(config), "--out", str(tmp_path / "b")
    )
    assert missing.returncode != 0 and "none.pth: no such file" in missing.stderr
    no_vocab = _export("--checkpoint", str(config), "--config", str(config), "--out", str(tmp_path / "c"))
    assert no_vocab.returncode != 0 and "no 'vocab'" in no_vocab.stderr
