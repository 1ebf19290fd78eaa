"""The ``triton-tts export coqui`` command: arguments -> load -> export."""

from __future__ import annotations

import argparse

from triton_tts.export.coqui.arguments import add_arguments
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import load
from triton_tts.export.precision_gate import GateRefused, read_report
from triton_tts.intelligibility import gate_thresholds
from triton_tts.voice import Voice


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m triton_tts.export.coqui",
        description="Export a Coqui TTS model to a triton-tts voice folder",
    )
    add_arguments(parser)
    run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> Voice:
    if args.checkpoint is not None and args.config is None:
        raise SystemExit("--checkpoint needs --config")
    if (args.vocoder_checkpoint is None) != (args.vocoder_config is None):
        raise SystemExit("--vocoder-checkpoint and --vocoder-config go together")
    loaded = load(
        model_name=args.model_name,
        checkpoint=args.checkpoint,
        config=args.config,
        vocoder_name=args.vocoder_name,
        vocoder_checkpoint=args.vocoder_checkpoint,
        vocoder_config=args.vocoder_config,
    )
    try:
        voice = export_coqui(loaded, args.out, args.name, args.precision, gate_thresholds(args))
    except GateRefused as refused:  # the FP32 export stays in --out
        raise SystemExit(f"{refused} ({args.out} holds the FP32 export)") from refused
    if args.precision != "fp32":
        print(read_report(args.out).summary())
    print(f"voice '{voice.name}' ({loaded.family}, {args.precision}) written to {args.out}")
    return voice
