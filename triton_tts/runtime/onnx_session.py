"""ONNX Runtime sessions sized so Triton instances do not oversubscribe the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime as ort

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The container's CPU quota in cores (Kubernetes `limits.cpu`), or None if unlimited.

    cgroup v2 ``cpu.max`` ("200000 100000" = 2 cores, "max 100000" = no limit), else
    cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 = no limit).
    """
    try:
        quota, period = (root / "cpu.max").read_text(encoding="utf-8").split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text(encoding="utf-8").strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text(encoding="utf-8").strip()
        except OSError:
            return None
    if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or not period.isdigit():
        return None
    return int(quota) / int(period) if int(period) > 0 and int(quota) > 0 else None


def available_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """Cores this process may use: its CPU affinity, capped by the cgroup's CPU quota
    (a container limited to 2 CPUs on a 64-core node must size its pools for 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cores = min(cores, max(1, int(limit)))  # a fractional core does not run a thread
    return cores


def resolve_threads(setting: str | int | None, instances: int, cgroup_root: Path = CGROUP_ROOT) -> int:
    """'auto'/0/None -> the container's cores shared evenly between this model's instances."""
    if setting in (None, "", "auto", 0, "0"):
        return max(1, available_cores(cgroup_root) // max(1, instances))
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


def graph_outputs(path: Path) -> set[str]:
    """The names an ONNX file gives as outputs, read without weights."""
    import onnx

    return {o.name for o in onnx.load(str(path), load_external_data=False).graph.output}
