"""Where ``triton-tts build-repo`` finds Silero VAD's graph for the ``vad`` model.

Silero VAD (MIT) ships its ONNX graphs inside the ``silero-vad`` wheel; the one served is
``silero_vad_16k_sequence.onnx``: a block of 32 ms frames (512 samples at 16 kHz, each
after the 64 samples before it) in one run, the LSTM state in and out. Looked for, in
order:

1. ``TRITON_TTS_VAD_MODEL``: an ``.onnx`` file, a silero-vad wheel, or a folder holding one;
2. an installed ``silero_vad`` package (found without importing it: it imports torch);
3. the wheel that ``make`` downloads (requirements/vad.txt, ``pip download --no-deps``)
   into ``.wheelhouse/vad`` under the data home (the checkout, for an editable install).

None found: the repository has no ``vad`` model, and ``build-repo`` says how to get it.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path

from triton_tts.contract import paths

ENV = "TRITON_TTS_VAD_MODEL"
MEMBER = "silero_vad/data/silero_vad_16k_sequence.onnx"
HOW = (
    "no Silero VAD graph for the vad model: pip download --no-deps -r requirements/vad.txt "
    f"-d .wheelhouse/vad (make does), or set {ENV} to the .onnx or the wheel"
)


def _from(place: Path) -> bytes | None:
    if place.is_file() and place.suffix == ".onnx":
        return place.read_bytes()
    wheels = sorted(place.glob("silero_vad-*.whl")) if place.is_dir() else [place]
    for wheel in reversed(wheels):  # the newest name first
        if wheel.is_file() and wheel.suffix == ".whl":
            with zipfile.ZipFile(wheel) as archive:
                if MEMBER in archive.namelist():
                    return archive.read(MEMBER)
    return None


def vad_graph() -> bytes | None:
    """The graph's bytes, or None."""
    configured = os.environ.get(ENV)
    if configured:
        found = _from(Path(configured).expanduser())
        if found is None:
            raise FileNotFoundError(
                f"{ENV}={configured}: neither an .onnx file nor a silero-vad wheel with {MEMBER}"
            )
        return found
    spec = importlib.util.find_spec("silero_vad")
    for root in (spec.submodule_search_locations or []) if spec else []:
        graph = Path(root) / "data" / Path(MEMBER).name
        if graph.is_file():
            return graph.read_bytes()
    return _from(paths.data_home() / ".wheelhouse" / "vad")
