"""Which parts of a voice an INT8 export quantises, and the flag that picks them.

- ``vocoder``: the vocoder's convolutions (the default, and the vocoder's whole graph);
- ``flow``: the VITS flow's convolutions inside the acoustic graph, which runs after the
  duration predictor, so frame counts cannot change; the text encoder and the duration
  predictor stay FP32.

The recipes and their figures: :mod:`.quantize`. This module imports nothing heavy, so
the command line can build its parser without onnxruntime's quantisation tools.

    triton-tts export int8 --voice voices/joe --out voices/joe-int8-flow-vocoder --stages flow vocoder
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

FLOW = "flow"
VOCODER = "vocoder"
STAGES = (FLOW, VOCODER)  # in pipeline order, the order names and reports use
DEFAULT_STAGES = (VOCODER,)


def int8_stages(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` checked, without repeats, in pipeline order."""
    chosen = set(names)
    unknown = sorted(chosen - set(STAGES))
    if unknown or not chosen:
        given = f"unknown INT8 stage {', '.join(unknown)}" if unknown else "no INT8 stage given"
        raise ValueError(f"{given}: choose from {', '.join(STAGES)}")
    return tuple(stage for stage in STAGES if stage in chosen)


def add_stages_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stages",
        nargs="+",
        choices=STAGES,
        default=list(DEFAULT_STAGES),
        metavar="STAGE",
        help=f"what to quantise, one or more of: {', '.join(STAGES)} (flow: the VITS flow inside the "
        "acoustic graph; the text encoder and durations stay FP32)",
    )
