"""A full-precision Kokoro checkpoint (``kokoro-v1_0.pth`` and its ``config.json``) as a
voice folder: ``triton-tts export kokoro --checkpoint X.pth --config config.json``.

The model is built by the ``kokoro`` 0.9.4 package's own code (Apache-2.0), read from the
source distribution that ``make kokoro`` downloads (its modules are imported from a scratch
copy: the package's ``__init__`` would import its G2P, misaki, which needs a hub download).
Its two halves are exported separately with torch, FP32, at the same cut the registry
model is split at (triton_tts/export/kokoro.py), then wrapped the same way:

- acoustic: ``tokens``, ``style``, ``speed`` -> the aligned text encoding, F0, energy and
  the frames per token, as ``KModel.forward_with_tokens`` computes them;
- decoder: those and the style -> audio.

The split is checked against ``forward_with_tokens`` in torch on two sentences. Needs the
``export`` extra (torch, transformers).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx

from triton_tts.export.kokoro import (
    ASR,
    DECODER_STYLE,
    ENERGY,
    F0,
    HOP_LENGTH,
    SAMPLE_RATE,
    SPEED,
    STYLE,
    TOKENS,
    VOICES_SDIST,
    Reference,
    SourceMissing,
    default_packages_dir,
    read_packs,
    wrap_acoustic,
    wrap_vocoder,
    write_voice,
)
from triton_tts.runtime.limits import frame_budget

log = logging.getLogger(__name__)

MODEL_FILES = ("model.py", "modules.py", "istftnet.py", "custom_stft.py")
DURATIONS = "durations"
OPSET = 17
# FP32 in onnxruntime against FP32 in torch: kernels round differently, and the harmonic
# source's phase (a running sum) carries that to 6 % of peak in samples on random weights,
# while the STFT magnitudes agree to 0.15 %: the check compares magnitudes, within 1 %.
VERIFY_RTOL = 1e-2


def kokoro_model_code(packages: Path, scratch: Path) -> Path:
    """The ``kokoro`` package's model modules, copied from its sdist into ``scratch/kokoro``
    with an empty ``__init__`` (so that importing them loads no G2P)."""
    sdist = packages / VOICES_SDIST
    if not sdist.is_file():
        raise SourceMissing(f"no {VOICES_SDIST} in {packages}: `make kokoro` downloads it (its model code)")
    target = scratch / "kokoro"
    target.mkdir(parents=True, exist_ok=True)
    (target / "__init__.py").write_text("", encoding="utf-8")
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if parts[-2:-1] == ["kokoro"] and parts[-1] in MODEL_FILES:
                handle = archive.extractfile(member)
                if handle is not None:
                    (target / parts[-1]).write_bytes(handle.read())
    missing = [f for f in MODEL_FILES if not (target / f).is_file()]
    if missing:
        raise SourceMissing(f"{sdist} lacks kokoro/{', kokoro/'.join(missing)}")
    return scratch


def kmodel_class(packages: Path, scratch: Path) -> Any:
    """kokoro's ``KModel``, imported from its model code (:func:`kokoro_model_code`) as the
    package ``kokoro`` of that folder (found by its own path: nothing is added to the
    import path; an earlier ``kokoro`` import is forgotten)."""
    package = kokoro_model_code(packages, scratch) / "kokoro"
    for name in [m for m in sys.modules if m == "kokoro" or m.startswith("kokoro.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        "kokoro", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        raise SourceMissing(f"cannot import kokoro's model code from {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kokoro"] = module
    spec.loader.exec_module(module)
    return importlib.import_module("kokoro.model").KModel


def load_kmodel(checkpoint: Path, config: dict[str, Any], packages: Path, scratch: Path) -> Any:
    """kokoro's KModel with the checkpoint's weights (no download: both files are given)."""
    kmodel = kmodel_class(packages, scratch)
    model = kmodel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(checkpoint), disable_complex=True)
    return model.eval()


def _halves(kmodel: Any) -> tuple[Any, Any]:
    import torch

    class Acoustic(torch.nn.Module):
        """forward_with_tokens up to the decoder: what the registry graph's cut hands on."""

        def __init__(self) -> None:
            super().__init__()
            self.k = kmodel

        def forward(self, tokens: Any, style: Any, speed: Any) -> tuple[Any, Any, Any, Any]:
            k = self.k
            lengths = torch.full((tokens.shape[0],), tokens.shape[-1], dtype=torch.long)
            mask = torch.arange(tokens.shape[-1]).unsqueeze(0) + 1 > lengths.unsqueeze(1)
            bert = k.bert(tokens, attention_mask=(~mask).int())
            d_en = k.bert_encoder(bert).transpose(-1, -2)
            s = style[:, 128:]
            d = k.predictor.text_encoder(d_en, s, lengths, mask)
            x, _ = k.predictor.lstm(d)
            duration = torch.sigmoid(k.predictor.duration_proj(x)).sum(dim=-1) / speed
            frames = torch.round(duration).clamp(min=1).long().squeeze(0)
            indices = torch.repeat_interleave(torch.arange(tokens.shape[1]), frames)
            alignment = torch.zeros((tokens.shape[1], indices.shape[0]))
            alignment[indices, torch.arange(indices.shape[0])] = 1
            alignment = alignment.unsqueeze(0)
            f0, energy = k.predictor.F0Ntrain(d.transpose(-1, -2) @ alignment, s)
            asr = k.text_encoder(tokens, lengths, mask) @ alignment
            return asr, f0, energy, frames.float()

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k = kmodel

        def forward(self, asr: Any, f0: Any, energy: Any, style: Any) -> Any:
            return self.k.decoder(asr, f0, energy, style[:, :DECODER_STYLE]).squeeze()

    return Acoustic().eval(), Decoder().eval()


@contextlib.contextmanager
def without_noise() -> Iterator[None]:
    """kokoro's harmonic source draws random phases and noise on every call (torch.rand,
    torch.randn_like); the registry's ONNX export has none of it (no random operator), so
    this export leaves it out too, which makes the voice deterministic and the split
    checkable against torch."""
    import torch

    saved = torch.rand, torch.randn_like
    torch.rand = lambda *size, **kw: torch.zeros(*size, **{k: v for k, v in kw.items() if k != "generator"})
    torch.randn_like = lambda x, **kw: torch.zeros_like(x)
    try:
        yield
    finally:
        torch.rand, torch.randn_like = saved


def export_halves(kmodel: Any, folder: Path) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    import torch

    acoustic, decoder = _halves(kmodel)
    tokens = torch.LongTensor([[0, *range(40, 80), 0]])
    style = torch.randn(1, 256) * 0.1
    speed = torch.ones(1)
    with torch.no_grad(), without_noise():
        asr, f0, energy, _ = acoustic(tokens, style, speed)
        torch.onnx.export(
            acoustic,
            (tokens, style, speed),
            str(folder / "acoustic_part.onnx"),
            input_names=[TOKENS, STYLE, SPEED],
            output_names=[ASR, F0, ENERGY, DURATIONS],
            dynamic_axes={
                TOKENS: {1: "tokens"},
                ASR: {2: "frames"},
                F0: {1: "frames2"},
                ENERGY: {1: "frames2"},
                DURATIONS: {0: "tokens"},
            },
            opset_version=OPSET,
            dynamo=False,
        )
        torch.onnx.export(
            decoder,
            (asr, f0, energy, style),
            str(folder / "decoder_part.onnx"),
            input_names=[ASR, F0, ENERGY, STYLE],
            output_names=["audio"],
            dynamic_axes={
                ASR: {2: "frames"},
                F0: {1: "frames2"},
                ENERGY: {1: "frames2"},
                "audio": {0: "samples"},
            },
            opset_version=OPSET,
            dynamo=False,
        )
    return onnx.load(str(folder / "acoustic_part.onnx")), onnx.load(str(folder / "decoder_part.onnx"))


def torch_reference(kmodel: Any) -> Reference:
    import torch

    def audio(ids: list[int], style: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with torch.no_grad(), without_noise():
            out, _ = kmodel.forward_with_tokens(torch.LongTensor([ids]), torch.from_numpy(style), 1.0)
        return np.asarray(out.numpy(), np.float32).reshape(-1)

    return audio


def export_checkpoint(
    out: Path,
    checkpoint: Path,
    config_path: Path,
    packages: Path | None = None,
    voices_dir: Path | None = None,
    name: str = "kokoro",
    verify: bool = True,
) -> Any:
    import hashlib

    packages = packages or default_packages_dir()
    config = json.loads(config_path.read_text(encoding="utf-8"))
    vocab = config.get("vocab")
    if not isinstance(vocab, dict):
        raise ValueError(f"{config_path}: no 'vocab' (a Kokoro config.json maps phonemes to ids)")
    packs = read_packs(packages, voices_dir)
    with tempfile.TemporaryDirectory(prefix="kokoro-export-") as scratch:
        kmodel = load_kmodel(checkpoint, config, packages, Path(scratch))
        acoustic, decoder = export_halves(kmodel, Path(scratch))
        return write_voice(
            out,
            wrap_acoustic(acoustic, DURATIONS, frame_budget(SAMPLE_RATE, HOP_LENGTH)),
            wrap_vocoder(decoder),
            {str(k): int(v) for k, v in vocab.items()},
            packs,
            name,
            f"checkpoint {checkpoint.name} (FP32, exported with torch)",
            hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
            {},
            torch_reference(kmodel) if verify else None,
            VERIFY_RTOL,
            spectral=True,
        )
