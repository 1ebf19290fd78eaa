"""Random-weight Coqui checkpoints, built from Coqui's own config classes.

Tests and benchmarks need Coqui models without a download. This builds one per family
with Coqui's config and model classes, perturbs every weight (Coqui zero-initialises the
last layer of each VITS / Glow-TTS flow coupling, which makes the flow an identity map and
parity tests vacuous), and saves it the way Coqui's trainer does: ``model.pth`` holding
``{"model": state_dict, "config": ...}`` next to ``config.json``. Coqui's ``Synthesizer``
loads the result like any downloaded model.

``size="tiny"`` is for tests (seconds to build, export and run); ``size="full"`` keeps
Coqui's default layer sizes, for benchmarks where the cost per second of audio matters.

    python -m testkit.coqui_checkpoints vits --out build/vits-random --speakers 2
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

TTS_FAMILIES = ("vits", "fast_pitch", "fastspeech2", "glow_tts", "tacotron2")
VOCODER_FAMILIES = ("hifigan", "melgan")
PHONEME_LANGUAGE = "en-us"
WEIGHT_NOISE = 0.05  # std of the noise added to every weight
FRAMES_PER_TOKEN = 5.0  # mel models: the typical duration the predictor is biased to


@dataclass(frozen=True)
class Checkpoint:
    checkpoint: Path
    config: Path


def _phonemes(config: Any) -> None:
    config.use_phonemes = True
    config.phonemizer = "espeak"
    config.phoneme_language = PHONEME_LANGUAGE
    config.text_cleaner = "phoneme_cleaners"
    config.phoneme_cache_path = None


def _vits(size: str, speakers: int, folder: Path) -> tuple[Any, Any]:
    from TTS.tts.configs.vits_config import VitsArgs, VitsConfig
    from TTS.tts.models.vits import Vits

    tiny = size == "tiny"
    args = VitsArgs(init_discriminator=False)
    if tiny:
        args = VitsArgs(
            hidden_channels=32,
            hidden_channels_ffn_text_encoder=64,
            num_layers_text_encoder=2,
            num_layers_flow=2,
            num_layers_posterior_encoder=2,
            upsample_initial_channel_decoder=32,
            init_discriminator=False,
        )
    if speakers > 1:  # a speakers.json (name -> id) next to the checkpoint, as Coqui keeps it
        folder.mkdir(parents=True, exist_ok=True)
        speakers_file = folder / "speakers.json"
        speakers_file.write_text(json.dumps({f"speaker_{i}": i for i in range(speakers)}), encoding="utf-8")
        args.use_speaker_embedding = True
        args.num_speakers = speakers
        args.speaker_embedding_channels = 16 if tiny else 256
        args.speakers_file = str(speakers_file)
    config = VitsConfig(model_args=args)
    _phonemes(config)
    if speakers > 1:
        config.use_speaker_embedding = True
        config.num_speakers = speakers
        config.speakers_file = args.speakers_file
    # Deterministic references: noise is a request option (SCALES), zero here.
    config.model_args.inference_noise_scale = 0.0
    config.model_args.inference_noise_scale_dp = 0.0
    model = Vits.init_from_config(config)
    return config, model


def _forward_tts(family: str, size: str) -> tuple[Any, Any]:
    from TTS.tts.configs.fast_pitch_config import FastPitchConfig
    from TTS.tts.configs.fastspeech2_config import Fastspeech2Config
    from TTS.tts.models.forward_tts import ForwardTTS, ForwardTTSArgs

    config_class = FastPitchConfig if family == "fast_pitch" else Fastspeech2Config
    config = config_class()
    if size == "tiny":
        args: ForwardTTSArgs = config.model_args
        args.hidden_channels = 64
        args.encoder_params = {**args.encoder_params, "num_layers": 2, "hidden_channels_ffn": 64}
        args.decoder_params = {**args.decoder_params, "num_layers": 2, "hidden_channels_ffn": 64}
    _phonemes(config)
    config.compute_f0 = False
    config.compute_energy = False
    model = ForwardTTS.init_from_config(config)
    return config, model


def _glow_tts(size: str) -> tuple[Any, Any]:
    from TTS.tts.configs.glow_tts_config import GlowTTSConfig
    from TTS.tts.models.glow_tts import GlowTTS

    config = GlowTTSConfig()
    if size == "tiny":
        config.hidden_channels_enc = 64
        config.hidden_channels_dec = 64
        config.hidden_channels_dp = 64
        config.num_flow_blocks_dec = 2
        config.encoder_params = {**config.encoder_params, "num_layers": 2, "hidden_channels_ffn": 64}
    _phonemes(config)
    config.inference_noise_scale = 0.0
    model = GlowTTS.init_from_config(config)
    return config, model


def _tacotron2(size: str, speakers: int = 1) -> tuple[Any, Any]:
    """Tacotron2-DDC (the layout of Coqui's released ``tacotron2-DDC`` models: a coarse
    decoder at ``ddc_r`` for training, the main one at ``r``).

    Coqui hard-codes Tacotron2's layer sizes (512-wide embedding, encoder and postnet,
    1024-wide decoder LSTMs), so ``tiny`` cannot shrink the network; it only lowers the
    decoder's step guard, which bounds the cost of a random model that never stops.
    Prenet dropout stays off at inference (Coqui's default), so inference is deterministic.
    ``speakers`` > 1: a speaker-embedding table (names in the config, as Coqui reads them).
    """
    from TTS.tts.configs.tacotron2_config import Tacotron2Config
    from TTS.tts.models.tacotron2 import Tacotron2

    config = Tacotron2Config(double_decoder_consistency=True, ddc_r=6, r=2)
    config.prenet_dropout_at_inference = False
    _phonemes(config)
    config.max_decoder_steps = 300 if size == "tiny" else 1000
    if speakers > 1:
        config.use_speaker_embedding = True
        config.speakers = [f"speaker_{i}" for i in range(speakers)]
        config.speaker_embedding_dim = 64 if size == "tiny" else 512
    model = Tacotron2(config)
    return config, model


def build_tts(family: str, folder: Path, size: str = "tiny", seed: int = 0, speakers: int = 1) -> Checkpoint:
    """Build, perturb and save a random-weight TTS model of ``family``."""
    torch.manual_seed(seed)
    if family == "vits":
        config, model = _vits(size, speakers, Path(folder))
    elif family in ("fast_pitch", "fastspeech2"):
        config, model = _forward_tts(family, size)
    elif family == "glow_tts":
        config, model = _glow_tts(size)
    elif family == "tacotron2":
        config, model = _tacotron2(size, speakers)
    else:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(TTS_FAMILIES)}")
    _perturb(model)
    _realistic_durations(family, model)
    return _save(model, config, Path(folder))


def _realistic_durations(family: str, model: Any) -> None:
    """Give the duration predictor of a mel model trained-like output (about 5 frames per token).

    At random init its log-durations sit near 0, so every token rounds up to Coqui's
    minimum of 1 frame: a length_scale of 1.3 would change nothing and the per-token
    rounding would never be exercised. A bias of log(1 + 5) on its last projection (the
    predictor's target is log(1 + frames)) keeps the perturbed weights' spread around it.
    """
    predictor = {
        "fast_pitch": "duration_predictor",
        "fastspeech2": "duration_predictor",
        "glow_tts": "encoder.duration_predictor",
    }.get(family)
    if predictor is None:
        return
    proj = model.get_submodule(predictor).proj
    with torch.no_grad():
        proj.bias.add_(math.log(1.0 + FRAMES_PER_TOKEN))


def build_vocoder(
    family: str, folder: Path, size: str = "tiny", seed: int = 0, audio: dict[str, Any] | None = None
) -> Checkpoint:
    """A random-weight HiFi-GAN or MelGAN generator; ``audio`` overrides its audio config
    (a different mel normalisation than the TTS model's exercises the conversion)."""
    from TTS.vocoder.configs.hifigan_config import HifiganConfig
    from TTS.vocoder.configs.melgan_config import MelganConfig
    from TTS.vocoder.models.gan import GAN

    torch.manual_seed(seed)
    if family == "hifigan":
        config: Any = HifiganConfig()
        if size == "tiny":
            config.generator_model_params = {**config.generator_model_params, "upsample_initial_channel": 32}
    elif family == "melgan":
        config = MelganConfig()
        if size == "tiny":
            config.generator_model_params = {**config.generator_model_params, "num_res_blocks": 1}
    else:
        raise ValueError(f"unknown vocoder {family!r}; one of {', '.join(VOCODER_FAMILIES)}")
    for key, value in (audio or {}).items():
        setattr(config.audio, key, value)
    model = GAN(config)
    _perturb(model.model_g)
    if size == "tiny":
        return _save_generator(model.model_g, config, Path(folder))
    return _save(model, config, Path(folder))


def _save_generator(generator: torch.nn.Module, config: Any, folder: Path) -> Checkpoint:
    """Save only the generator, in Coqui's older GAN checkpoint layout.

    A current GAN checkpoint must hold the discriminator too (Coqui builds one and loads
    strictly, then drops it for inference): ~70M parameters, 270 MB and seconds per
    test vocoder. A state with a ``model_disc`` key is Coqui's pre-0.0.15 layout, which
    ``GAN.load_checkpoint`` still loads into the generator alone.
    """
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint, config_path = folder / "model.pth", folder / "config.json"
    torch.save({"model": generator.state_dict(), "model_disc": {}, "config": config.to_dict()}, checkpoint)
    config.save_json(str(config_path))
    return Checkpoint(checkpoint, config_path)


@torch.no_grad()
def _perturb(model: torch.nn.Module) -> None:
    for parameter in model.parameters():
        parameter.add_(torch.randn_like(parameter) * WEIGHT_NOISE)


def _save(model: torch.nn.Module, config: Any, folder: Path) -> Checkpoint:
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint, config_path = folder / "model.pth", folder / "config.json"
    torch.save({"model": model.state_dict(), "config": config.to_dict()}, checkpoint)
    config.save_json(str(config_path))
    return Checkpoint(checkpoint, config_path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=TTS_FAMILIES + VOCODER_FAMILIES)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speakers", type=int, default=1)
    args = parser.parse_args(argv)
    if args.family in VOCODER_FAMILIES:
        saved = build_vocoder(args.family, args.out, args.size, args.seed)
    else:
        saved = build_tts(args.family, args.out, args.size, args.seed, args.speakers)
    print(saved.checkpoint)


if __name__ == "__main__":
    main()
