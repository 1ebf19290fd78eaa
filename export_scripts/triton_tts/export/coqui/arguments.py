"""Arguments of ``triton-tts export coqui``, importable without torch (the CLI lists
every command; only running this one needs the export extra)."""

from __future__ import annotations

import argparse
from pathlib import Path

from triton_tts.quality.intelligibility import add_gate_arguments

PRECISIONS = ("fp32", "fp16", "int8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--model-name", help="a Coqui model name, e.g. tts_models/en/ljspeech/vits (downloads once)"
    )
    source.add_argument("--checkpoint", type=Path, help="a Coqui checkpoint (.pth); needs --config")
    parser.add_argument("--config", type=Path, help="the checkpoint's config.json")
    parser.add_argument("--vocoder-name", help="a Coqui vocoder, e.g. vocoder_models/en/ljspeech/hifigan_v2")
    parser.add_argument("--vocoder-checkpoint", type=Path, help="a Coqui vocoder checkpoint (.pth)")
    parser.add_argument("--vocoder-config", type=Path, help="the vocoder checkpoint's config.json")
    parser.add_argument("--out", type=Path, required=True, help="the voice folder to write")
    parser.add_argument("--name", help="the voice's name (default: the folder's name)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="fp16: both stages, for GPUs; int8: static INT8 vocoder; both gated against FP32",
    )
    add_gate_arguments(parser)
