"""The ``triton-tts export coqui`` command: arguments -> load -> export."""

from __future__ import annotations

import argparse

from triton_tts.contract.voice import Voice
from triton_tts.export.coqui.arguments import add_arguments
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import Loaded, load
from triton_tts.export.precision_gate import GateRefused, read_report
from triton_tts.quality.intelligibility import gate_thresholds
from triton_tts.xtts.card import XttsCard


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m triton_tts.export.coqui",
        description="Export a Coqui TTS model to a triton-tts voice folder",
    )
    add_arguments(parser)
    run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> Voice | XttsCard:
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
    if loaded.family == "xtts":
        return run_xtts(loaded, args)
    try:
        voice = export_coqui(loaded, args.out, args.name, args.precision, gate_thresholds(args))
    except GateRefused as refused:  # the FP32 export stays in --out
        raise SystemExit(f"{refused} ({args.out} holds the FP32 export)") from refused
    if args.precision != "fp32":
        print(read_report(args.out).summary())
    print(f"voice '{voice.name}' ({loaded.family}, {args.precision}) written to {args.out}")
    return voice


def run_xtts(loaded: Loaded, args: argparse.Namespace) -> XttsCard:
    """XTTS v2: its own folder (triton_tts.xtts), through its parity gate; FP32 only."""
    from triton_tts.export.coqui.xtts.export import ParityRefused, export_xtts

    if args.precision != "fp32":
        raise SystemExit("XTTS exports at fp32 only (its parity gate compares FP32 graphs with Coqui)")
    try:
        card = export_xtts(loaded, args.out, args.name)
    except ParityRefused as refused:
        raise SystemExit(f"{refused}; no voice was written to {args.out}") from refused
    print(f"licence: {card.licence}")
    print(f"voice '{card.name}' (xtts, fp32) written to {args.out}")
    return card
