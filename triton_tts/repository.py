"""Fill the model repository with a voice: ONNX files, voice description, warm-up data.

The repository's configs and Python model code are committed; what a voice brings
(ONNX files, ``voice.json``, warm-up tensors) is generated into place and ignored by git.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np

from triton_tts import model_configs
from triton_tts.model_configs import WARMUP_IDS_LENGTH, BuildOptions
from triton_tts.voice import ACOUSTIC_FILE, VOCODER_FILE, VOICE_FILE, Voice

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The committed repository (configs + model code): the checkout's, or wherever an
# installed copy put it (the container image sets TRITON_TTS_REPOSITORY_TEMPLATE).
DEFAULT_REPOSITORY = Path(os.environ.get("TRITON_TTS_REPOSITORY_TEMPLATE", PROJECT_ROOT / "model_repository"))
DEFAULT_VOICE_DIR = PROJECT_ROOT / "voices" / "joe"
WARMUP_TEXT = "Warming up the voice, so that the first request is fast."
# WARMUP_TEXT in IPA, typed in so that building a repository needs no espeak-ng.
WARMUP_PHONEMES = "wˈɔːɹmɪŋ ˈʌp ðə vˈɔɪs, sˌoʊ ðæt ðə fˈɜːst ɹɪkwˈɛst ɪz fˈæst."


def _place(source: Path, target: Path) -> None:
    """Hard-link (cheap, same disk) or copy, skipping files that are already current."""
    if target.exists():
        old, new = target.stat(), source.stat()
        if target.samefile(source) or (old.st_size == new.st_size and old.st_mtime >= new.st_mtime):
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _serialize_bytes(text: str) -> bytes:
    """Triton's raw BYTES layout: little-endian uint32 length, then the bytes."""
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def write_warmup_data(repo: Path, voice: Voice) -> None:
    (repo / "preprocess" / "warmup").mkdir(parents=True, exist_ok=True)
    (repo / "preprocess" / "warmup" / "TEXT").write_bytes(_serialize_bytes(WARMUP_TEXT))
    ids = voice.phonemes_to_ids(WARMUP_PHONEMES)[:WARMUP_IDS_LENGTH]
    padded = np.full(WARMUP_IDS_LENGTH, voice.padding_id, dtype=np.int64)
    padded[: len(ids)] = ids
    warm = repo / "acoustic" / "warmup"
    warm.mkdir(parents=True, exist_ok=True)
    (warm / "PHONEME_IDS").write_bytes(padded.tobytes())
    (warm / "PHONEME_LENGTH").write_bytes(np.array([len(ids)], np.int64).tobytes())
    scales = np.array([0.0, voice.length_scale, 0.0], np.float32)
    (warm / "SCALES").write_bytes(scales.tobytes())


def with_voice(options: BuildOptions, voice: Voice) -> BuildOptions:
    """What the configs need to know about the voice they serve."""
    return replace(
        options,
        latent_channels=voice.latent_channels,
        voice_name=voice.name,
        voice_language=voice.phonemizer_language,
        voice_sample_rate=voice.sample_rate,
        voice_speakers=json.dumps(voice.speakers, sort_keys=True),
    )


def build_repository(
    voice_dir: Path = DEFAULT_VOICE_DIR,
    repo: Path = DEFAULT_REPOSITORY,
    options: BuildOptions | None = None,
) -> Path:
    """Put ``voice_dir`` into ``repo`` (copying the committed model code first if elsewhere)
    and render every config for ``options`` (default: the committed defaults)."""
    voice_dir, repo = Path(voice_dir), Path(repo)
    voice = Voice.load(voice_dir)
    options = with_voice(options or BuildOptions(), voice)
    if repo.resolve() != DEFAULT_REPOSITORY.resolve():
        shutil.copytree(
            DEFAULT_REPOSITORY,
            repo,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("*.onnx", "*.plan", "__pycache__", "warmup", VOICE_FILE),
        )
    model_configs.write(repo, options)
    _place(voice_dir / ACOUSTIC_FILE, repo / "acoustic" / "1" / "model.onnx")
    _place(voice_dir / VOCODER_FILE, repo / "vocoder" / "1" / "model.onnx")
    for model in ("preprocess", "postprocess"):
        _place(voice_dir / VOICE_FILE, repo / model / "1" / VOICE_FILE)
    write_warmup_data(repo, voice)
    log.info("model repository %s serves voice '%s'", repo, voice.name)
    return repo


def ensure_default_voice(voice_dir: Path = DEFAULT_VOICE_DIR) -> Path:
    """Export the bundled Piper voice on first use (later runs reuse the folder)."""
    voice_dir = Path(voice_dir)
    if (voice_dir / VOICE_FILE).exists():
        return voice_dir
    if voice_dir.resolve() != DEFAULT_VOICE_DIR.resolve():
        raise SystemExit(f"no voice at {voice_dir} (export one with 'triton-tts export')")
    from triton_tts.export.piper import bundled_joe_paths, export_piper_voice

    onnx_path, config_path = bundled_joe_paths()
    log.info("exporting the default voice to %s", voice_dir)
    export_piper_voice(onnx_path, config_path, voice_dir)
    return voice_dir
