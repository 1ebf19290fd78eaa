"""ONNX Runtime sessions sized so Triton instances do not oversubscribe the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime as ort


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def resolve_threads(setting: str | int | None, instances: int) -> int:
    """'auto'/0/None -> cores shared evenly between this model's instances."""
    if setting in (None, "", "auto", 0, "0"):
        return max(1, available_cores() // max(1, instances))
    return max(1, int(setting))


def cpu_session(path: Path, intra_op_threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = intra_op_threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    # Idle worker threads must not spin: on a small CPU the other pipeline stages need it.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def graph_inputs(path: Path) -> set[str]:
    """The names an ONNX file takes as inputs (initializers excluded), read without weights."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return {i.name for i in graph.input} - {i.name for i in graph.initializer}
