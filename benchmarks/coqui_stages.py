"""Per-stage speed and size of exported Coqui models: eager PyTorch vs onnxruntime, by precision.

For each family, a random-weight Coqui model at Coqui's default layer sizes
(``coqui_checkpoints --size full``; speed does not depend on the weights' values) is
exported at FP32, FP16 and INT8, and each stage is timed on the same phoneme ids:

- eager PyTorch: Coqui's own modules (the wrapper the export traces for the acoustic
  stage; the vocoder's generator), ``torch.set_num_threads(threads)``;
- onnxruntime: the runners the Triton models use (``triton_tts.runtime.stages``,
  ``triton_tts.runtime.tacotron``), CPU, the same thread count.

Speed is x real time (seconds of audio per second of compute; higher is better), the best
of ``--rounds`` over a few sentences of different lengths. FP16 is for GPUs: on a CPU
onnxruntime runs most of it through casts, which the table shows.

    python -m benchmarks.coqui_stages                        # every family
    python -m benchmarks.coqui_stages --family vits --size tiny --rounds 1   # smoke run

Writes results/coqui_stages.json and results/coqui_stages.md (a Markdown table), stamped with
date, commit and machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.stamp import stamp, write_report
from testkit.coqui_checkpoints import build_tts, build_vocoder
from testkit.coqui_reference import coqui_ids
from testkit.sample_texts import SENTENCES
from triton_tts.contract.voice import VOCODER_FILE, VOCODER_UNPADDED_FILE
from triton_tts.export.coqui.export import export_coqui
from triton_tts.export.coqui.loading import Loaded, load
from triton_tts.export.coqui.vits import VitsAcoustic
from triton_tts.export.voice_runs import acoustic_runner
from triton_tts.quality.intelligibility import GateThresholds
from triton_tts.runtime.onnx_session import available_cores
from triton_tts.runtime.stages import RunFailed, VocoderRunner

FAMILIES = {  # family -> vocoder (None: VITS has its own decoder)
    "vits": None,
    "fast_pitch": "hifigan",
    "fastspeech2": "hifigan",
    "glow_tts": "hifigan",
    "tacotron2": "hifigan",
}
PRECISIONS = ("fp32", "fp16", "int8")


def best_of(rounds: int, call: Callable[[], Any]) -> float:
    call()  # warm-up: first-run allocations and kernel choices are not the steady state
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def size_mb(folder: Path, stage: str) -> float:
    files = (
        [folder / VOCODER_FILE]
        if stage == "vocoder"
        else [f for f in folder.glob("*.onnx") if f.name not in (VOCODER_FILE, VOCODER_UNPADDED_FILE)]
    )
    return sum(f.stat().st_size for f in files) / 1e6


def measure_family(family: str, size: str, rounds: int, threads: int, work: Path) -> list[dict[str, Any]]:
    checkpoint = build_tts(family, work / f"{family}-checkpoint", size=size)
    vocoder_family = FAMILIES[family]
    vocoder = build_vocoder(vocoder_family, work / f"{family}-vocoder", size=size) if vocoder_family else None
    loaded = load(
        checkpoint=checkpoint.checkpoint,
        config=checkpoint.config,
        vocoder_checkpoint=vocoder.checkpoint if vocoder else None,
        vocoder_config=vocoder.config if vocoder else None,
    )
    ids = [np.array(coqui_ids(loaded, text), np.int64) for text in SENTENCES[:4]]
    scales = [np.array([0.0, 1.0, 0.0], np.float32)] * len(ids)
    rows: list[dict[str, Any]] = []
    latents: list[Any] = []
    audio_s = 0.0
    for precision in PRECISIONS:
        folder = work / f"{family}-{precision}"
        # random weights: the precision gate can judge their SNR only, and speed is the point
        gate = GateThresholds(measure_wer=False, accept_failed=True)
        voice = export_coqui(loaded, folder, precision=precision, gate=gate)
        acoustic = acoustic_runner(folder, voice, threads)
        results = acoustic.run(ids, scales)
        if any(isinstance(r, RunFailed) for r in results):
            rows.append({"family": family, "precision": precision, "error": str(results[0])})
            continue
        latents = [r[0] for r in results]
        audio_s = sum(r[1] for r in results) * voice.hop_length / voice.sample_rate
        acoustic_s = best_of(rounds, partial(acoustic.run, ids, scales))
        vocoder_runner = VocoderRunner(folder / VOCODER_FILE, threads, 1, 1 << 20)
        vocoder_s = best_of(rounds, partial(vocoder_runner.run, latents))
        rows.append(
            {
                "family": family,
                "precision": precision,
                "runtime": "onnxruntime",
                "acoustic_x_real_time": audio_s / acoustic_s,
                "vocoder_x_real_time": audio_s / vocoder_s,
                "acoustic_mb": size_mb(folder, "acoustic"),
                "vocoder_mb": size_mb(folder, "vocoder"),
            }
        )
    rows.insert(0, eager_row(family, loaded, ids, latents, audio_s, rounds, threads))
    return rows


def eager_row(
    family: str,
    loaded: Loaded,
    ids: list[Any],
    latents: list[Any],
    audio_s: float,
    rounds: int,
    threads: int,
) -> dict[str, Any]:
    """Coqui's own modules in eager PyTorch, one item at a time (as Coqui's server runs)."""
    torch.set_num_threads(threads)
    tts = loaded.tts
    vits_acoustic = VitsAcoustic(tts) if family == "vits" else None

    def acoustic() -> None:
        with torch.no_grad():
            for item in ids:
                x = torch.tensor(item[None])
                if vits_acoustic is not None:  # everything up to the latent (the decoder is the vocoder)
                    scales = torch.tensor([[0.0, 1.0, 0.0]])
                    vits_acoustic(x, torch.tensor([x.shape[1]]), scales, torch.tensor([0]))
                else:
                    tts.inference(x, aux_input={"x_lengths": torch.tensor([x.shape[1]])})

    generator = tts.waveform_decoder if family == "vits" else loaded.vocoder.model_g

    def vocoder() -> None:
        with torch.no_grad():
            for latent in latents:
                generator(torch.from_numpy(latent[None]))

    return {
        "family": family,
        "precision": "fp32",
        "runtime": "eager PyTorch",
        "acoustic_x_real_time": audio_s / best_of(rounds, acoustic),
        "vocoder_x_real_time": audio_s / best_of(rounds, vocoder),
        "parameters_m": sum(p.numel() for p in tts.parameters()) / 1e6,
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Layer sizes {results['size']}, {results['threads']} threads for both runtimes, "
        f"best of {results['rounds']}:",
        "",
        "| family | runtime | precision | acoustic x real time | vocoder x real time "
        "| acoustic MB | vocoder MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['family']} | onnxruntime | {r['precision']} | failed: {r['error']} | | | |")
            continue
        sizes = (f"{r['acoustic_mb']:.1f}", f"{r['vocoder_mb']:.1f}") if "acoustic_mb" in r else ("", "")
        lines.append(
            f"| {r['family']} | {r['runtime']} | {r['precision']} | {r['acoustic_x_real_time']:.1f} "
            f"| {r['vocoder_x_real_time']:.1f} | {sizes[0]} | {sizes[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="repeat; default: all")
    parser.add_argument("--size", choices=("tiny", "full"), default="full")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=available_cores())
    parser.add_argument("--out", type=Path, default=Path("results/coqui_stages.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="coqui-stages-") as scratch:
        for family in args.family or list(FAMILIES):
            rows.extend(measure_family(family, args.size, args.rounds, args.threads, Path(scratch)))
    results: dict[str, Any] = {
        **stamp(),
        "size": args.size,
        "threads": args.threads,
        "rounds": args.rounds,
        "rows": rows,
    }
    write_report(args.out, results, [markdown(results)])
    return results


if __name__ == "__main__":
    main()
