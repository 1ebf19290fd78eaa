"""perf_analyzer against the ``tts`` model: concurrency sweep and request-rate mode, gRPC and HTTP.

Input data is a corpus of mixed lengths (short commands, ~150-character sentences,
~600-character paragraphs) written as perf_analyzer ``--input-data`` JSON. For each
level it records throughput (requests/s and seconds of audio per second), latency
percentiles and, from Triton's own statistics, the average executed batch size of every
model. Writes ``results/perf/``: perf.json, perf.md (the Markdown table) stamped with date,
commit and machine (benchmarks/stamp.py), and PNG plots; git ignores results/.

    python -m benchmarks.perf                                  # own server, full sweep
    python -m benchmarks.perf --url-grpc localhost:8001 --url-http localhost:8000
    python -m benchmarks.perf --smoke                          # what CI runs: tiny, fast

perf_analyzer ships in tritonclient[all]==2.51.0; it needs Debian's libb64-0d and
libcudart.so.12 (PyPI nvidia-cuda-runtime-cu12), found here automatically.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import PARAGRAPH
from triton_tts.client import TTSClient
from triton_tts.client.tts_client import env_api_key
from triton_tts.ops.keys import key_headers

log = logging.getLogger("perf")

COMMANDS = ["Yes.", "Turn left.", "Call mom.", "Stop the music.", "What time is it?", "Thanks!"]
SENTENCES = [
    "Your order has shipped and should arrive on Thursday; you will get a text message with the "
    "tracking number as soon as the courier picks it up.",
    "Please hold while I transfer you to the billing department, where someone will be able to "
    "answer your questions about the last invoice.",
    "The quarterly report shows steady growth in every region except the north, where sales fell "
    "slightly after the new competitor opened.",
    "If you would like to hear these options again, press nine, or stay on the line and the next "
    "available agent will take your call.",
]
# Mixed traffic: mostly short, some sentences, a few paragraphs.
CORPUS = COMMANDS * 2 + SENTENCES * 2 + [PARAGRAPH]
MODELS = ("preprocess", "acoustic", "vocoder", "postprocess", "tts_chunk", "tts")


# perf_analyzer lives in its own virtualenv (requirements/perf.txt, `make setup`): tritonclient
# 2.51's wheel is the last that carries it, and its protobuf<5 cannot share the project's
# environment (protobuf 6: tritonclient 2.73 and Riva's protos).
PERF_VENV = Path(__file__).resolve().parent.parent / ".bench" / "perf"


def perf_analyzer_env() -> dict[str, str]:
    """The environment perf_analyzer runs in: libcudart.so.12 from its virtualenv's
    nvidia-cuda-runtime-cu12 on the library path (the binary links against it, GPU or not)."""
    env = dict(os.environ)
    libs = sorted(PERF_VENV.glob("lib/python*/site-packages/nvidia/cuda_runtime/lib"))
    if libs:
        paths = (str(libs[-1]), env.get("LD_LIBRARY_PATH", ""))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in paths if p)
    return env


def perf_analyzer_binary() -> str:
    """.bench/perf's perf_analyzer, else one on PATH (a Triton SDK image has it)."""
    local = PERF_VENV / "bin" / "perf_analyzer"
    found = str(local) if local.exists() else shutil.which("perf_analyzer")
    if not found:
        raise SystemExit("perf_analyzer not found: `make setup` makes .bench/perf (requirements/perf.txt)")
    return found


def write_input_data(path: Path, texts: list[str]) -> Path:
    data = {"data": [{"TEXT": {"content": [t], "shape": [1]}} for t in texts]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def mean_audio_seconds(grpc_url: str, texts: list[str], api_key: str | None = None) -> float:
    with TTSClient(grpc_url, "grpc", api_key=api_key) as client:
        return sum(client.synthesize(t).duration_s for t in texts) / len(texts)


def batch_stats(http_url: str, headers: dict[str, str]) -> dict[str, tuple[int, int]]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(http_url)
    try:
        stats = {}
        for model in MODELS:
            s = client.get_inference_statistics(model, headers=headers)["model_stats"][0]
            stats[model] = (int(s["inference_count"]), int(s["execution_count"]))
        return stats
    finally:
        client.close()


def run_level(
    url: str,
    protocol: str,
    input_data: Path,
    mode: str,
    value: float,
    requests: int,
    headers: dict[str, str] | None = None,
    header_lines: list[str] | None = None,
) -> dict[str, float]:
    """One level; ``headers``: the server's keys (key_headers), passed with perf_analyzer's
    -H; ``header_lines``: -H values as a user writes them ("Authorization: Bearer KEY")."""
    level = f"{value:g}:{value:g}"
    cmd = [
        perf_analyzer_binary(),
        "-m", "tts", "-u", url, "-i", protocol,
        "--input-data", str(input_data),
        # One window of a fixed number of requests (whole corpus passes), not windows
        # repeated until two agree: mixed lengths make every window differ, and a window
        # that caught no completion made perf_analyzer give up on the level (CI, 80ac0a3).
        "--request-count", str(-(-requests // len(CORPUS)) * len(CORPUS)),
        "-f", "/dev/stdout",
    ]  # fmt: skip
    cmd += ["--concurrency-range", level] if mode == "concurrency" else ["--request-rate-range", level]
    for name, value_of in (headers or {}).items():
        cmd += ["-H", f"{name}:{value_of}"]
    for line in header_lines or []:
        cmd += ["-H", line]
    done = subprocess.run(cmd, capture_output=True, text=True, env=perf_analyzer_env(), check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"perf_analyzer failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    # The CSV follows the human-readable report; it starts at its header line.
    header = "Concurrency," if mode == "concurrency" else "Request Rate,"
    text = done.stdout[done.stdout.index(header) :]
    row = next(csv.DictReader(io.StringIO(text)))
    return {
        "requests_per_s": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p90_ms": float(row["p90 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
    }


def sweep(
    args: argparse.Namespace, urls: dict[str, str], http_url: str, input_data: Path
) -> list[dict[str, Any]]:
    rows = []
    for protocol in args.protocols:
        for mode, values in (("concurrency", args.levels), ("request-rate", args.rates)):
            for value in values:
                http_headers = key_headers(args.api_key, args.admin_key, "http")
                before = batch_stats(http_url, http_headers)
                result = run_level(
                    urls[protocol],
                    protocol,
                    input_data,
                    mode,
                    value,
                    args.requests,
                    key_headers(args.api_key, args.admin_key, protocol),
                )
                after = batch_stats(http_url, http_headers)
                batches = {}
                for model in MODELS:
                    inferences = after[model][0] - before[model][0]
                    executions = after[model][1] - before[model][1]
                    batches[model] = inferences / executions if executions else 0.0
                rows.append(
                    {"protocol": protocol, "mode": mode, "level": value, **result, "avg_batch": batches}
                )
                log.info(
                    "%s %s %g: %.2f req/s, p99 %.0f ms",
                    protocol,
                    mode,
                    value,
                    result["requests_per_s"],
                    result["p99_ms"],
                )
    return rows


def markdown(results: dict[str, Any]) -> str:
    audio = results["mean_audio_s"]
    lines = [
        f"perf_analyzer on `tts`, a corpus of {results['corpus_size']} texts of mixed length, "
        f"{audio:.2f} s of audio per request on average:",
        "",
        "| protocol | mode | level | req/s | x real time | p50 ms | p90 ms | p99 ms "
        "| avg batch acoustic | avg batch vocoder |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['protocol']} | {r['mode']} | {r['level']:g} | {r['requests_per_s']:.2f} | "
            f"{r['requests_per_s'] * audio:.1f} | {r['p50_ms']:.0f} | {r['p90_ms']:.0f} "
            f"| {r['p99_ms']:.0f} | "
            f"{r['avg_batch']['acoustic']:.2f} | {r['avg_batch']['vocoder']:.2f} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    audio = results["mean_audio_s"]
    written = []
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for protocol in sorted({r["protocol"] for r in results["rows"]}):
        rows = [r for r in results["rows"] if r["protocol"] == protocol and r["mode"] == "concurrency"]
        levels = [r["level"] for r in rows]
        left.plot(levels, [r["requests_per_s"] * audio for r in rows], marker="o", label=protocol)
        right.plot(levels, [r["p50_ms"] for r in rows], marker="o", label=f"{protocol} p50")
        right.plot(levels, [r["p99_ms"] for r in rows], marker="x", linestyle="--", label=f"{protocol} p99")
    left.set(xlabel="concurrency", ylabel="seconds of audio per second", title="Throughput")
    right.set(xlabel="concurrency", ylabel="latency (ms)", title="Latency")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend()
    fig.tight_layout()
    written.append(out / "throughput_latency.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    rows = [r for r in results["rows"] if r["mode"] == "concurrency"]
    if rows:
        top = max(rows, key=lambda r: r["level"])
        fig, axis = plt.subplots(figsize=(6, 3.5))
        axis.bar(list(top["avg_batch"]), list(top["avg_batch"].values()))
        axis.set(
            ylabel="average executed batch size",
            title=f"Batching at concurrency {top['level']:g} ({top['protocol']})",
        )
        fig.tight_layout()
        written.append(out / "batch_sizes.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url-grpc", help="running server's gRPC address (with --url-http)")
    parser.add_argument("--url-http", help="running server's HTTP address")
    parser.add_argument("--protocols", nargs="+", default=["grpc", "http"], choices=["grpc", "http"])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="concurrency")
    parser.add_argument("--rates", type=float, nargs="*", default=[2.0, 4.0], help="requests/s")
    parser.add_argument("--requests", type=int, default=120, help="requests per level (whole corpus passes)")
    parser.add_argument("--smoke", action="store_true", help="tiny run: concurrency 1 and 2, gRPC")
    parser.add_argument("--out", type=Path, default=Path("results/perf"))
    parser.add_argument("--api-key", default=env_api_key(), help="the server's API key (default: env)")
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("TRITON_TTS_ADMIN_KEY"),
        help="the server's admin key, for Triton's statistics (default: env TRITON_TTS_ADMIN_KEY)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.protocols, args.levels, args.rates, args.requests = ["grpc"], [1, 2], [], 1
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)

    with ExitStack() as stack:
        if args.url_grpc and args.url_http:
            urls = {"grpc": args.url_grpc, "http": args.url_http}
        else:
            from triton_tts.ops.server import default_voice_server

            server = stack.enter_context(default_voice_server())
            urls = {"grpc": server.grpc_url, "http": server.http_url}
        input_data = write_input_data(args.out / "input_data.json", CORPUS)
        results: dict[str, Any] = {
            **stamp(),
            "corpus_size": len(CORPUS),
            "mean_audio_s": mean_audio_seconds(urls["grpc"], CORPUS, args.api_key),
        }
        results["rows"] = sweep(args, urls, urls["http"], input_data)
    write_report(args.out / "perf.json", results, [markdown(results)])
    for path in plot(results, args.out):
        print(f"plot: {path}")
    return results


if __name__ == "__main__":
    main()
