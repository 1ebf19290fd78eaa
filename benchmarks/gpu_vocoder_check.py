"""Device check: the exported vocoder on a GPU, batch size sweep, FP32 and FP16.

Production GPU nodes run the vocoder with Triton's native ONNX Runtime or TensorRT
backends (configs/gpu.pbtxt, configs/tensorrt.pbtxt). Where neither is installed (the
lent test GPU here has PyTorch but no onnxruntime-gpu or TensorRT), this check runs the
*same exported vocoder.onnx* on the GPU through onnx2torch, to measure what the GPU
variant is built around: equal-shape batches (LATENT frames padded to a multiple of 64)
and how throughput grows with batch size. It also checks the GPU output against
onnxruntime on the CPU, so the exported graph is known to compute the same thing there.

    python -m benchmarks.gpu_vocoder_check --vocoder voices/joe/vocoder.onnx --out results/gpu.json
    python -m benchmarks.gpu_vocoder_check --device cpu --batches 1 2 --frames 64   # smoke

Standalone on purpose (torch, onnx, onnx2torch, numpy; onnxruntime optional), so it runs
on a bare GPU machine without the project's serving dependencies. Writes the JSON and, next
to it, its Markdown tables (results/gpu_vocoder.md), stamped with date, commit and machine
(benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, write_report

HOP = 256
SAMPLE_RATE = 22050
PARITY_ATOL = 1e-3  # GPU FP32 convolutions (TF32 off) vs onnxruntime CPU


def parity(model: Any, vocoder: Path, channels: int, device: Any, rng: np.random.Generator) -> dict[str, Any]:
    """The converted graph on the GPU against onnxruntime on the CPU, same latent."""
    import torch

    latent = rng.normal(0, 1, size=(2, channels, 64)).astype(np.float32)
    with torch.inference_mode():
        gpu_out = model(torch.from_numpy(latent).to(device)).float().cpu().numpy()
    try:
        import onnxruntime as ort
    except ImportError:
        return {"parity_ok": None}
    session = ort.InferenceSession(str(vocoder), providers=["CPUExecutionProvider"])
    diff = float(np.abs(gpu_out - session.run(None, {"LATENT": latent})[0]).max())
    return {"parity_max_abs_diff_vs_onnxruntime_cpu": diff, "parity_ok": diff < PARITY_ATOL}


def sweep(
    model: Any,
    channels: int,
    device: Any,
    batches: list[int],
    frames: int,
    repeats: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    import torch

    rows = []
    for dtype_name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        if dtype is torch.float16 and device.type != "cuda":
            continue
        net = model.to(dtype)
        for batch in batches:
            x = torch.from_numpy(rng.normal(0, 1, size=(batch, channels, frames)).astype(np.float32))
            x = x.to(device=device, dtype=dtype)
            with torch.inference_mode():
                for _ in range(3):
                    net(x)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                start = time.perf_counter()
                for _ in range(repeats):
                    net(x)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = (time.perf_counter() - start) / repeats
            audio = batch * frames * HOP / SAMPLE_RATE
            row = {
                "dtype": dtype_name,
                "batch": batch,
                "latency_ms": seconds * 1000,
                "x_real_time": audio / seconds,
                "peak_mem_mib": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
            }
            rows.append(row)
            speed = f"{row['latency_ms']:8.2f} ms  {row['x_real_time']:9.1f}x real time"
            print(f"{dtype_name} batch {batch:>3}: {speed}")
    return rows


def extremes(
    model: Any, channels: int, device: Any, corners: list[tuple[int, int]], rng: np.random.Generator
) -> list[dict[str, Any]]:
    """The TensorRT profile's corners (min, one item at the frame budget, max batch at the
    budget): latency and peak memory in FP32 and FP16, or the error (out of memory)."""
    import torch

    rows: list[dict[str, Any]] = []
    for dtype_name, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        if device.type != "cuda":
            break
        net = model.to(dtype)
        for batch, frames in corners:
            row: dict[str, Any] = {"dtype": dtype_name, "batch": batch, "frames": frames}
            try:
                x = torch.from_numpy(rng.normal(0, 1, size=(batch, channels, frames)).astype(np.float32))
                x = x.to(device=device, dtype=dtype)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                with torch.inference_mode():
                    start = time.perf_counter()
                    out = net(x)
                    torch.cuda.synchronize()
                row["latency_ms"] = (time.perf_counter() - start) * 1000
                row["finite"] = bool(torch.isfinite(out).all())
                row["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
                del out, x
            except RuntimeError as err:  # out of memory: the corner does not fit this way
                row["error"] = str(err).splitlines()[0][:200]
            torch.cuda.empty_cache()
            rows.append(row)
            print(f"corner {dtype_name} batch {batch} x {frames} frames: {row}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocoder", type=Path, default=Path("voices/joe/vocoder.onnx"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--frames", type=int, default=256, help="latent frames per item (~3 s)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("results/gpu_vocoder.json"))
    parser.add_argument("--max-batch", type=int, default=32, help="the profile's max batch")
    parser.add_argument(
        "--burst-batch",
        type=int,
        default=16,
        help="the batch the capacity burst at start forms (gpu preferred max)",
    )
    parser.add_argument(
        "--max-frames", type=int, default=4160, help="the profile's max frames (limits.frame_budget)"
    )
    args = parser.parse_args()

    import onnx
    import torch
    from onnx2torch import convert

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(args.device)
    model = convert(onnx.load(str(args.vocoder))).eval().to(device)
    channels = int(next(p for p in model.parameters() if p.dim() == 3).shape[1])
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {
        **stamp(),
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "frames_per_item": args.frames,
        "audio_s_per_item": args.frames * HOP / SAMPLE_RATE,
    }
    report |= parity(model, args.vocoder, channels, device, rng)
    report["sweep"] = sweep(model, channels, device, args.batches, args.frames, args.repeats, rng)
    corners = [(1, 64), (1, args.max_frames), (8, args.max_frames), (args.max_batch, args.max_frames)]
    report["profile_corners"] = extremes(model, channels, device, corners, rng)
    report["capacity"] = capacity(report["sweep"], args.burst_batch)
    write_report(args.out, report, tables(report))


def capacity(rows: list[dict[str, Any]], burst_batch: int) -> list[dict[str, Any]]:
    """What admission would take of this GPU (triton_tts/runtime/admission.py), per dtype: the
    vocoder's best throughput, what the start-up burst's batches reach (the capacity
    measured at start, before live correction), and the listeners 1 - headroom of the
    best admits. The vocoder is the bulk of the work; the other stages lower it a little."""
    from triton_tts.runtime.admission import AdmissionSettings

    room = 1.0 - AdmissionSettings().stream_headroom
    out = []
    for dtype in sorted({r["dtype"] for r in rows}):
        mine = [r for r in rows if r["dtype"] == dtype]
        best = max(mine, key=lambda r: r["x_real_time"])
        burst = max((r for r in mine if r["batch"] <= burst_batch), key=lambda r: r["batch"], default=best)
        out.append(
            {
                "dtype": dtype,
                "best_batch": best["batch"],
                "best_x_real_time": best["x_real_time"],
                "burst_batch": burst["batch"],
                "burst_x_real_time": burst["x_real_time"],
                "burst_share_of_best": burst["x_real_time"] / best["x_real_time"],
                "listeners_admitted": int(room * best["x_real_time"]),
            }
        )
    return out


def tables(report: dict[str, Any]) -> list[str]:
    def mib(value: float | None) -> str:
        return f"{value:,.0f} MiB" if value is not None else "-"

    parity = report.get("parity_max_abs_diff_vs_onnxruntime_cpu")
    checked = (
        f"max abs diff {parity:.2e} (ok: {report['parity_ok']})" if parity is not None else "not checked"
    )
    sweep = [
        f"The exported vocoder on {report['device']} (torch {report['torch']}, onnx2torch), "
        f"{report['frames_per_item']} latent frames ({report['audio_s_per_item']:.2f} s of audio) per item; "
        f"against onnxruntime on the CPU: {checked}.",
        "",
        "| dtype | batch | latency | x real time | peak memory |",
        "|---|---|---|---|---|",
    ]
    for r in report["sweep"]:
        sweep.append(
            f"| {r['dtype']} | {r['batch']} | {r['latency_ms']:.2f} ms | {r['x_real_time']:,.1f} "
            f"| {mib(r['peak_mem_mib'])} |"
        )
    written = ["\n".join(sweep)]
    if report.get("capacity"):
        rows = [
            "What admission takes of it (vocoder only): the best batch, the batch the start-up",
            "burst forms, and the listeners admitted at the default headroom:",
            "",
            "| dtype | best batch | x real time | burst batch | x real time | share | listeners |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in report["capacity"]:
            rows.append(
                f"| {c['dtype']} | {c['best_batch']} | {c['best_x_real_time']:,.0f} | {c['burst_batch']} "
                f"| {c['burst_x_real_time']:,.0f} | {c['burst_share_of_best']:.0%} "
                f"| {c['listeners_admitted']:,} |"
            )
        written.append("\n".join(rows))
    if report["profile_corners"]:
        corners = [
            "The profile's corners:",
            "",
            "| dtype | batch | frames | latency | peak memory | result |",
            "|---|---|---|---|---|---|",
        ]
        for r in report["profile_corners"]:
            if "error" in r:
                error = r["error"].replace("|", "/")
                corners.append(f"| {r['dtype']} | {r['batch']} | {r['frames']} | - | - | {error} |")
            else:
                corners.append(
                    f"| {r['dtype']} | {r['batch']} | {r['frames']} | {r['latency_ms']:.1f} ms "
                    f"| {mib(r['peak_mem_mib'])} | {'finite' if r['finite'] else 'NOT finite'} |"
                )
        written.append("\n".join(corners))
    return written


if __name__ == "__main__":
    main()
