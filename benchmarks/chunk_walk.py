"""A streamed chunk's walk through the code: the project's files it runs in, in order, and
how often it steps back into one it has been in already (docs/architecture.md).

``tts_stream``'s model code, built for the bundled voice, runs in this process under a
stand-in for Triton's Python-backend utilities (testkit.python_backend); the stand-in
answers each chunk's BLS request with a tone at the voice's rate (what the ensemble does is
other processes). Every Python call and return on the stream's threads (after
``execute`` has read and admitted the request) is traced with ``threading.setprofile``.
The walk is the sequence of project files (``triton_tts/``, ``model_repository/``) that
control is in, repeats in a row collapsed; a *return* is a step into a file the walk has
been in before. Chunks go by BLS (``serve`` sends them through its own gRPC endpoint with a
priority: the same files, and ``runtime/loopback.py`` in place of the BLS call).

    python -m benchmarks.chunk_walk                 # one sentence, one chunk, 5 runs
    python -m benchmarks.chunk_walk --timestamps --json results/chunk_walk.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from testkit.python_backend import STAND_IN, InferenceResponse, Request, Tensor, python_backend_stand_in
from triton_tts.build.model_configs import BuildOptions
from triton_tts.ops.repository import build_repository, ensure_default_voice
from triton_tts.runtime.admission import ADMISSION_DIR_ENV

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tts_stream"


@dataclass
class Walk:
    text: str
    timestamps: bool
    chunks: int  # sent to the ensemble
    files: list[str]  # the walk: project files in the order control reached them
    returns: int  # steps into a file already walked
    distinct: int
    entries: dict[str, int]  # file -> times the walk entered it


def walk_of(files: list[str]) -> tuple[list[str], int, dict[str, int]]:
    """The walk (repeats in a row collapsed), its returns, and each file's entries."""
    walk = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    seen: set[str] = set()
    returns = 0
    entries: dict[str, int] = {}
    for f in walk:
        returns += f in seen
        seen.add(f)
        entries[f] = entries.get(f, 0) + 1
    return walk, returns, entries


def _answer(rate: int, chunks: list[str]) -> Any:
    """A chunk's BLS answer: 0.2 s of tone per word, its words timed if asked."""

    def answer(model: str, inputs: dict[str, npt.NDArray[Any]], outputs: list[str], chunk_id: str) -> Any:
        chunks.append(chunk_id)
        text = inputs["TEXT"].reshape(-1)[0].decode("utf-8")
        words = text.split()
        samples = np.sin(np.arange(int(0.2 * rate * len(words))) * 0.05).astype(np.float32)
        tensors = [Tensor("AUDIO", samples[None]), Tensor("SAMPLE_RATE", np.array([[rate]], np.int32))]
        if "WORDS" in outputs:
            times = np.array([[0.2 * i, 0.2 * (i + 1)] for i in range(len(words))], np.float32)
            tensors += [
                Tensor("WORDS", np.array([[w.encode() for w in words]], np.object_)),
                Tensor("WORD_TIMES", times.reshape(1, -1, 2)),
            ]
        return InferenceResponse(tensors)

    return answer


def _load(model_file: Path, config: mc.ModelConfig, folder: Path) -> Any:
    """The model, imported and initialised as Triton would (under the stand-in)."""
    spec = importlib.util.spec_from_file_location("chunk_walk_model", model_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
            "model_repository": str(folder),
            "model_name": MODEL,
            "model_instance_name": f"{MODEL}_0",
        }
    )
    return model


def measure(text: str, timestamps: bool) -> Walk:
    with tempfile.TemporaryDirectory(prefix="chunk-walk-") as scratch:
        os.environ[ADMISSION_DIR_ENV] = scratch
        repo = build_repository(ensure_default_voice(), Path(scratch) / "model_repository", BuildOptions())
        config = text_format.Parse((repo / MODEL / "config.pbtxt").read_text(), mc.ModelConfig())
        voices = json.loads(config.parameters["voices"].string_value)
        model_file = repo / MODEL / "1" / "model.py"
        names = {str(model_file): f"model_repository/{MODEL}/1/model.py"}

        def project_file(path: str) -> str | None:
            if path in names:
                return names[path]
            resolved = Path(path)
            if resolved.is_relative_to(ROOT / "triton_tts"):
                return str(resolved.relative_to(ROOT))
            return None

        files: list[str] = []
        chunks: list[str] = []
        lock = threading.Lock()

        def trace(frame: FrameType, event: str, _: Any) -> None:
            if event not in ("call", "return") or not threading.current_thread().name.startswith("stream"):
                return
            target = frame if event == "call" else frame.f_back
            where = project_file(target.f_code.co_filename) if target is not None else None
            if where is not None:
                with lock:
                    files.append(where)

        with python_backend_stand_in(_answer(int(voices[0]["sample_rate"]), chunks)):
            model = _load(model_file, config, repo / MODEL)
            inputs: dict[str, npt.NDArray[Any]] = {"TEXT": np.array([[text.encode()]], np.object_)}
            if timestamps:
                inputs["TIMESTAMPS"] = np.array([[True]], np.bool_)
            request = Request(inputs, "walk")
            threading.setprofile(trace)
            try:
                model.execute([request])
                final = STAND_IN.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                deadline = time.monotonic() + 60
                while not any(flags & final for _, flags in request.sender.sent):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the stream sent no final flag within 60 s")
                    time.sleep(0.01)
                with model.lock:
                    model.lock.wait_for(lambda: model.active == 0, timeout=10)
            finally:
                threading.setprofile(None)
                model.finalize()
            errors = [r.error() for r in request.sender.responses if r.has_error()]
            if errors:
                raise RuntimeError(f"the stream failed: {errors[0]}")
    walk, returns, entries = walk_of(files)
    return Walk(text, timestamps, len(chunks), walk, returns, len(entries), entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default="Good morning, everyone.", help="default: one chunk")
    parser.add_argument("--timestamps", action="store_true", help="ask for word timestamps")
    parser.add_argument("--runs", type=int, default=5, help="the median run's walk is shown (default 5)")
    parser.add_argument("--json", type=Path, help="write the walk here")
    args = parser.parse_args(argv)
    # The stream's thread and its chunk's thread interleave a step or two differently
    # from run to run.
    walks = sorted((measure(args.text, args.timestamps) for _ in range(args.runs)), key=lambda w: w.returns)
    walk = walks[len(walks) // 2]
    print(f"returns over {args.runs} runs: " + ", ".join(str(w.returns) for w in walks))
    print(" -> ".join(walk.files))
    print(
        f"{len(walk.files)} steps in {walk.distinct} files, {walk.returns} returns to a file already walked"
    )
    for name, count in sorted(walk.entries.items(), key=lambda item: -item[1]):
        print(f"  {count:3d}  {name}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(walk), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
