"""One streamed chunk's walk through the code (benchmarks/chunk_walk.py, the figures in
docs/architecture.md): the model file hands a request to the chunk loop once, and the loop
in ``triton_tts/runtime/long_text/deliver.py`` is where control comes back to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = "model_repository/tts_stream/1/model.py"
LOOP = "triton_tts/runtime/long_text/deliver.py"


@pytest.mark.parametrize("timestamps", [False, True], ids=["plain", "timestamps"])
def test_a_streamed_chunk_enters_the_model_file_once_and_walks_from_the_loop(
    tmp_path: Path, timestamps: bool
) -> None:
    out = tmp_path / "walk.json"
    command = [sys.executable, "-m", "benchmarks.chunk_walk", "--runs", "1", "--json", str(out)]
    done = subprocess.run(
        [*command, *(["--timestamps"] if timestamps else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    walk = json.loads(out.read_text(encoding="utf-8"))
    assert walk["chunks"] == 1
    files = walk["files"]
    # In at the start, back at the end: nothing of the chunk's way returns to the model.
    assert files[0] == MODEL and files[-1] == MODEL
    assert walk["entries"][MODEL] == 2, files
    # The loop takes the request from the model and gives it back; it is where control
    # comes back to most (the rest are side trips from it: pacing, ledger, metrics, sending).
    inner = files[1:-1]
    assert inner[0] == LOOP and inner[-1] == LOOP
    assert max(walk["entries"], key=walk["entries"].get) == LOOP
    assert "triton_tts/runtime/long_text/send.py" in files  # the chunk went to its ensemble
    if timestamps:  # the words were timed in the loop (text/words.py, from deliver.py)
        assert "triton_tts/text/words.py" in files
