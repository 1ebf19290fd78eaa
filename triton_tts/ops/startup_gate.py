"""The start-up gate: a run-private model that keeps Triton's readiness false until serve's
start-up (its capacity measurement) is done, then is released and loads. docs/deployment.md,
"Readiness and supervision"."""

from __future__ import annotations

from pathlib import Path

# The start-up gate: a model in a repository of the run's own (the served repository is
# not touched: it may be read-only or remote) that fails to load until the supervisor's
# start-up is done, so that Triton's /v2/health/ready (--strict-readiness: every model
# known to the repository manager READY) stays false while it measures itself. Its load
# failing at start must not end Triton, so a gated start runs --exit-on-error=false;
# wait_ready() still ends the start at once on any other model's failure. Released, it is
# loaded again and READY. Without a supervisor (tritonserver alone, the chart's plain
# image) there is no gate: nothing waits for what is not there. docs/deployment.md,
# "Readiness and supervision".
GATE_MODEL = "triton_tts_startup"
GATE_WAITING = "waiting for triton-tts serve's start-up (its capacity measurement)"
GATE_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_BOOL, dims: [1] }]
output [{ name: "OUT", data_type: TYPE_BOOL, dims: [1] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
parameters { key: "release_file" value: { string_value: "%s" } }
"""
GATE_CODE = f"""import json
import os


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        if not os.path.exists(parameters["release_file"]["string_value"]):
            raise RuntimeError("{GATE_WAITING}")

    def execute(self, requests):
        raise RuntimeError("the start-up gate takes no requests")
"""


def write_gate(repository: Path, release_file: Path) -> None:
    """The gate model in ``repository`` (the run's own), waiting for ``release_file``."""
    model = repository / GATE_MODEL
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(GATE_CONFIG % release_file, encoding="utf-8")
    (model / "1" / "model.py").write_text(GATE_CODE, encoding="utf-8")
