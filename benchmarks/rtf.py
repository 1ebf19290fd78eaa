"""Real-time factor of the served voice: one request at a time, and N concurrent streams.

RTF = seconds spent synthesising / seconds of audio produced (lower is better; 0.05 means
20x faster than real time). Measured through a real tritonserver with tritonclient, next
to Piper's unsplit graph run directly with onnxruntime in this process as a reference.

    python -m benchmarks.rtf                        # starts its own server on free ports
    python -m benchmarks.rtf --url localhost:8000   # against a running server
    python -m benchmarks.rtf --rounds 1 --concurrency 2   # smoke run

Writes results/rtf.json and results/rtf.md (a Markdown table), stamped with date, commit and
machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import logging
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import SENTENCES
from triton_tts.client import TTSClient
from triton_tts.client.tts_client import Protocol
from triton_tts.runtime.onnx_session import available_cores


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def single_stream(client: TTSClient, rounds: int) -> dict[str, float]:
    spent = audio = 0.0
    latencies = []
    for _ in range(rounds):
        for text in SENTENCES:
            start = time.perf_counter()
            result = client.synthesize(text)
            elapsed = time.perf_counter() - start
            spent += elapsed
            audio += result.duration_s
            latencies.append(elapsed)
    return {
        "rtf": spent / audio,
        "x_real_time": audio / spent,
        "latency_p50_s": percentile(latencies, 50),
        "latency_p99_s": percentile(latencies, 99),
        "requests": len(latencies),
    }


def concurrent_streams(url: str, protocol: Protocol, concurrency: int, rounds: int) -> dict[str, float]:
    from benchmarks.loadgen import load, triton_call

    r = load(triton_call(url, protocol), concurrency, rounds)
    return {
        "rtf": 1 / r["x_real_time"],
        "x_real_time": r["x_real_time"],
        "latency_p50_s": r["p50_s"],
        "latency_p99_s": r["p99_s"],
        "requests": r["requests"],
        "concurrency": concurrency,
    }


def direct_onnxruntime(rounds: int) -> dict[str, float]:
    """Piper's unsplit graph in this process, batch 1, all cores: the no-server reference."""
    from benchmarks.reference import PiperReference

    reference = PiperReference(threads=available_cores())
    spent = audio = 0.0
    for _ in range(rounds):
        for text in SENTENCES:
            start = time.perf_counter()
            audio += reference.synthesize(text)
            spent += time.perf_counter() - start
    return {"rtf": spent / audio, "x_real_time": audio / spent}


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Eight sentences, {results['protocol']}:",
        "",
        "| setting | RTF | x real time | p50 latency | p99 latency |",
        "|---|---|---|---|---|",
    ]
    rows = [
        ("direct onnxruntime, batch 1 (reference)", results["direct_onnxruntime_batch1"]),
        ("triton-tts, 1 request at a time", results["served_single"]),
        (
            f"triton-tts, {results['served_concurrent']['concurrency']} concurrent",
            results["served_concurrent"],
        ),
    ]
    for name, r in rows:
        p50 = f"{r['latency_p50_s']:.3f} s" if "latency_p50_s" in r else "-"
        p99 = f"{r['latency_p99_s']:.3f} s" if "latency_p99_s" in r else "-"
        lines.append(f"| {name} | {r['rtf']:.4f} | {r['x_real_time']:.1f} | {p50} | {p99} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="running server (default: start one on free ports)")
    parser.add_argument("--protocol", choices=["http", "grpc"], default="grpc")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the sentence set")
    parser.add_argument("--out", type=Path, default=Path("results/rtf.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    with ExitStack() as stack:
        url = args.url
        if url is None:
            from triton_tts.ops.server import default_voice_server

            server = stack.enter_context(default_voice_server())
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
        client = stack.enter_context(TTSClient(url, args.protocol))
        client.synthesize(SENTENCES[0])  # connection set-up is not synthesis time
        results: dict[str, Any] = {
            **stamp(),
            "protocol": args.protocol,
            "direct_onnxruntime_batch1": direct_onnxruntime(args.rounds),
            "served_single": single_stream(client, args.rounds),
            "served_concurrent": concurrent_streams(url, args.protocol, args.concurrency, args.rounds),
        }
    write_report(args.out, results, [markdown(results)])
    return results


if __name__ == "__main__":
    main()
