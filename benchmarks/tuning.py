"""CPU build options side by side: instances x threads per stage and the batcher's
preferred batch size, each served in turn on the same machine, same load.

For every setting: a repository is built with those options, served on free ports, warmed
up, then one request at a time (one pass over the sentences) and ``--concurrency``
clients (``--rounds`` passes each), gRPC. Settings alternate, ``--runs`` times, so a
drift of the machine shows as spread rather than as a difference.

    python -m benchmarks.tuning --voice voices/joe --runs 2
    python -m benchmarks.tuning --settings default one-by-two --rounds 1 --runs 1   # smoke

Writes results/tuning.json and results/tuning.md (a Markdown table), stamped with date, commit
and machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.loadgen import load, triton_call
from benchmarks.stamp import stamp, write_report
from triton_tts.build.model_configs import BuildOptions
from triton_tts.contract import paths
from triton_tts.ops.repository import build_repository, ensure_default_voice
from triton_tts.ops.server import TritonServer, free_port

DEFAULT = BuildOptions()
SETTINGS: dict[str, tuple[str, BuildOptions]] = {
    "default": ("2 x 1, one request at a time (default)", DEFAULT),
    "two-by-one-batched": (
        "2 x 1, batches of what is queued",
        replace(DEFAULT, cpu_preferred_batch_sizes=()),
    ),
    "two-by-two": (
        "2 x 2, one request at a time",
        replace(DEFAULT, acoustic_threads="2", vocoder_threads="2"),
    ),
    "one-by-two": (
        "1 x 2, batches of what is queued",
        replace(DEFAULT, acoustic_instances=1, vocoder_instances=1, cpu_preferred_batch_sizes=()),
    ),
}


def counts(url: str) -> dict[str, tuple[int, int]]:
    """(inferences, executions) of the acoustic and vocoder models so far."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    try:
        found = {}
        for model in ("acoustic", "vocoder"):
            stats = client.get_inference_statistics(model)["model_stats"][0]
            found[model] = (int(stats["inference_count"]), int(stats["execution_count"]))
        return found
    finally:
        client.close()


def measure(voice_dir: Path, options: BuildOptions, concurrency: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="triton-tts-tuning-") as scratch:
        repo = build_repository(voice_dir, Path(scratch) / "model_repository", options)
        with TritonServer(
            repo,
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            log_file=Path(scratch) / "tritonserver.log",
        ) as server:
            call = triton_call(server.grpc_url, "grpc")
            load(call, 2, 1)  # warm-up
            single = load(call, 1, 1)
            before = counts(server.http_url)
            concurrent = load(call, concurrency, rounds)
            after = counts(server.http_url)
            batch = {  # average executed batch size under the concurrent load
                model: (after[model][0] - before[model][0]) / max(1, after[model][1] - before[model][1])
                for model in after
            }
            return {"single": single, "concurrent": concurrent, "batch": batch}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", type=Path, default=paths.default_voice_dir())
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="passes over the sentences per client")
    parser.add_argument("--runs", type=int, default=2, help="times each setting is measured, alternating")
    parser.add_argument("--out", type=Path, default=Path("results/tuning.json"))
    args = parser.parse_args(argv)
    ensure_default_voice(args.voice)
    results: dict[str, Any] = {
        **stamp(),
        "voice": args.voice.name,
        "concurrency": args.concurrency,
        "settings": {name: [] for name in args.settings},
    }
    for _ in range(args.runs):
        for name in args.settings:
            results["settings"][name].append(
                measure(args.voice, SETTINGS[name][1], args.concurrency, args.rounds)
            )
    write_report(args.out, results, [markdown(results)])
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"{results['voice']}, concurrency {results['concurrency']}, one column entry per run:",
        "",
        "| acoustic and vocoder: instances x threads, batcher | single, x real time "
        "| concurrent, x real time | p99 | average batch acoustic / vocoder |",
        "|---|---|---|---|---|",
    ]
    for name, runs in results["settings"].items():

        def joined(key: str, field: str, fmt: str, runs: list[dict[str, Any]] = runs) -> str:
            return " / ".join(format(r[key][field], fmt) for r in runs)

        batches = " / ".join(f"{r['batch']['acoustic']:.2f}, {r['batch']['vocoder']:.2f}" for r in runs)
        lines.append(
            f"| {SETTINGS[name][0]} | {joined('single', 'x_real_time', '.1f')} "
            f"| {joined('concurrent', 'x_real_time', '.1f')} | {joined('concurrent', 'p99_s', '.2f')} s "
            f"| {batches} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
