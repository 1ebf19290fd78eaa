"""The three graphs around the GPT (the conditioning encoders and the decoder), wherever
they run.

:class:`XttsRunner` (triton_tts/xtts/runner.py) runs the GPT's loop itself and reaches
these three through a :class:`Graphs`: in-process ONNX Runtime sessions
(:class:`LocalGraphs`, what the export's parity gate, the benchmarks and the tests use),
or, inside Triton, the voice's stage models (triton_tts/xtts/stage_calls.py), so that on
GPU nodes they run on Triton's native onnxruntime backend (``configs/gpu.pbtxt``) while
the GPT's loop stays in the ``xtts`` model.

:data:`STAGES` names each stage model's graph and tensors; the stage configs are rendered
from each graph (triton_tts/runtime/onnx_graph.py), so a native backend finds its own names,
types and fixed dims.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from triton_tts.xtts.card import DECODER_FILE, SPEAKER_FILE, STYLE_FILE

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Stage:
    """One graph beside the GPT, served as its own Triton model."""

    name: str  # the model's stem: xtts_<name> (xtts_style, xtts_speaker, xtts_decoder)
    graph: str  # its file in the voice folder
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


STYLE = Stage("style", STYLE_FILE, ("AUDIO",), ("STYLE",))
SPEAKER = Stage("speaker", SPEAKER_FILE, ("AUDIO",), ("SPEAKER",))
DECODER = Stage("decoder", DECODER_FILE, ("LATENTS", "SPEAKER"), ("WAVEFORM",))
STAGES = (STYLE, SPEAKER, DECODER)


class Graphs(Protocol):
    """What the runner asks of the three graphs; every array is one item, batch first."""

    def run(self, stage: Stage, inputs: dict[str, FloatArray]) -> FloatArray:
        """``stage``'s graph on ``inputs`` (its input names): its one output."""
        ...


class LocalGraphs:
    """The three graphs as ONNX Runtime sessions in this process."""

    def __init__(self, folder: Path, threads: int) -> None:
        # here, not at import: model_configs reads STAGES, and the base install (the client
        # commands, through triton_tts.cli) has no onnxruntime
        from triton_tts.runtime.onnx_session import cpu_session

        self.sessions = {stage.name: cpu_session(Path(folder) / stage.graph, threads) for stage in STAGES}

    def run(self, stage: Stage, inputs: dict[str, FloatArray]) -> FloatArray:
        return np.asarray(self.sessions[stage.name].run(list(stage.outputs), inputs)[0], dtype=np.float32)
