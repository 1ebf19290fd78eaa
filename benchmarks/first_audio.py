"""Time to first audio under load: the streaming levers side by side.

Each variant is a repository built with its own options (pacing to playback, first-chunk
priority, first-chunk size), served in turn on free ports on this machine, warmed up,
then loaded the same way: at each concurrency, that many client threads each run
``--rounds`` ~600-character answers back to back, first through ``tts_stream`` (gRPC),
then through ``tts``. The threads start spread over ``--spread-s`` (listeners arrive at
different moments); a burst, the same number of streams started in the same instant,
is measured apart (``--bursts``).
Per level: first-chunk p50/p99, total latency p50/p99, aggregate throughput (seconds of
audio per second of wall time, "x real time"), and the gaps a listener would hear (a
player that starts at the first chunk and waits whenever it runs out of audio).

Paced streams last as long as their playback by design, so their throughput is the
listeners' demand, not the server's capacity; `tts` at the same level and the unpaced
variant show the capacity. Admission is the shipped one (benchmarks run the defaults): a
stream it refuses is retried by the client library after the server's hint, and that
wait is part of its first-chunk latency.

    python -m benchmarks.first_audio                                # every variant, c 1/4/8/16
    python -m benchmarks.first_audio --variants before default --levels 1 8 --rounds 2
    python -m benchmarks.first_audio --url-grpc gpu-node:8001        # a running server, as configured

Writes results/first_audio.json, results/first_audio.md (tables) and results/first_audio.png
(plot), stamped with date, commit and machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, stamp_line, write_report
from testkit.sample_texts import STREAM_PARAGRAPHS
from triton_tts.build.model_configs import BuildOptions
from triton_tts.client import TTSClient

DEFAULT = BuildOptions()
BEFORE = replace(DEFAULT, stream_lead_ms=0, first_chunk_priority=0, first_chunk_chars=160, chunk_growth=0)
VARIANTS: dict[str, tuple[str, BuildOptions]] = {
    "before": (
        "no pacing, no priority, first chunk up to 160 characters, no ramp (before the levers)",
        BEFORE,
    ),
    "pacing": ("pacing only (lead 10 s)", replace(BEFORE, stream_lead_ms=10_000)),
    "priority": ("first-chunk priority only", replace(BEFORE, first_chunk_priority=1)),
    "short-first": (
        "first chunk up to 40 characters and the ramp (x2) only",
        replace(BEFORE, first_chunk_chars=40, chunk_growth=2),
    ),
    "default": ("the defaults: every lever", DEFAULT),
    # The same options, served with a voice whose VITS flow is INT8 (--int8-flow-voice).
    "int8-flow": ("the defaults, with an INT8-flow export of the voice", DEFAULT),
}
GAP_S = 0.01  # shorter waits of the player are not counted (a scheduling hiccup)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def listener_gaps(arrivals: list[float], durations: list[float]) -> tuple[int, float]:
    """(gaps, seconds of silence) for a player that starts at the first chunk's arrival and
    plays each chunk when it has both finished the one before and received it."""
    gaps, silent = 0, 0.0
    clock = arrivals[0]
    for arrived, seconds in zip(arrivals, durations, strict=True):
        if arrived - clock > GAP_S:
            gaps, silent = gaps + 1, silent + arrived - clock
        clock = max(clock, arrived) + seconds
    return gaps, silent


def run_level(
    grpc_url: str, concurrency: int, rounds: int, streaming: bool, spread_s: float
) -> dict[str, Any]:
    records: list[dict[str, float]] = []
    failures: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(concurrency)

    def worker(offset: int) -> None:
        with TTSClient(grpc_url, "grpc", timeout_s=600) as client:
            barrier.wait()
            time.sleep(spread_s * offset / concurrency)
            for r in range(rounds):
                text = STREAM_PARAGRAPHS[(offset + r) % len(STREAM_PARAGRAPHS)]
                start = time.perf_counter()
                try:
                    if streaming:
                        arrivals, durations = [], []
                        for chunk in client.stream(text):
                            arrivals.append(time.perf_counter() - start)
                            durations.append(chunk.audio.size / chunk.sample_rate)
                        gaps, silent = listener_gaps(arrivals, durations)
                        record = {
                            "first_s": arrivals[0],
                            "total_s": arrivals[-1],
                            "audio_s": sum(durations),
                            "gaps": gaps,
                            "gap_s": silent,
                        }
                    else:
                        result = client.synthesize(text)
                        total = time.perf_counter() - start
                        record = {"first_s": total, "total_s": total, "audio_s": result.duration_s}
                except Exception as err:  # counted, not fatal: the table says how many
                    with lock:
                        failures.append(f"{type(err).__name__}: {err}")
                    continue
                with lock:
                    records.append(record)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    firsts = [r["first_s"] for r in records]
    totals = [r["total_s"] for r in records]
    return {
        "model": "tts_stream" if streaming else "tts",
        "concurrency": concurrency,
        "spread_s": spread_s,
        "requests": len(records),
        "failed": len(failures),
        "failures": failures[:5],
        "first_chunk_p50_s": percentile(firsts, 50),
        "first_chunk_p99_s": percentile(firsts, 99),
        "first_chunk_max_s": max(firsts, default=float("nan")),
        "total_p50_s": percentile(totals, 50),
        "total_p99_s": percentile(totals, 99),
        "x_real_time": sum(r["audio_s"] for r in records) / wall,
        "first_chunk_s": sorted(round(f, 3) for f in firsts),
        "streams_with_gaps": sum(1 for r in records if r.get("gaps", 0)),
        "gap_s_total": sum(r.get("gap_s", 0.0) for r in records),
    }


def measure(
    grpc_url: str, levels: list[int], rounds: int, spread_s: float, bursts: list[int]
) -> list[dict[str, Any]]:
    with TTSClient(grpc_url, "grpc") as warm:  # every text once, both ways
        for text in STREAM_PARAGRAPHS:
            list(warm.stream(text))
            warm.synthesize(text)
    results = []
    runs = [(True, level, rounds, spread_s) for level in levels]
    runs += [(False, level, rounds, spread_s) for level in levels]
    runs += [(True, level, 1, 0.0) for level in bursts]
    for streaming, level, level_rounds, spread in runs:
        result = run_level(grpc_url, level, level_rounds, streaming, spread)
        logging.info(
            "%s c%d: first p50 %.2f s p99 %.2f s, %.1fx real time",
            result["model"],
            level,
            result["first_chunk_p50_s"],
            result["first_chunk_p99_s"],
            result["x_real_time"],
        )
        results.append(result)
    return results


def serve_variant(
    options: BuildOptions,
    levels: list[int],
    rounds: int,
    spread_s: float,
    bursts: list[int],
    voice: Path | None,
) -> list[dict[str, Any]]:
    from triton_tts.ops.repository import build_repository, ensure_default_voice
    from triton_tts.ops.server import TritonServer, free_port

    # The shipped admission: what it refuses at a level is counted, never raised away.
    with tempfile.TemporaryDirectory(prefix="triton-tts-first-audio-") as scratch:
        repo = build_repository(voice or ensure_default_voice(), Path(scratch) / "repo", options)
        with TritonServer(
            repo,
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            log_file=Path(scratch) / "server.log",
        ) as server:
            return measure(server.grpc_url, levels, rounds, spread_s, bursts)


def tables(results: dict[str, Any]) -> list[str]:
    written = []
    for model in ("tts_stream", "tts"):
        lines = [
            f"`{model}`, ~600-character answers, gRPC, {results['rounds']} per client, clients "
            f"starting over {results['spread_s']:g} s:",
            "",
            "| variant | concurrency | first chunk p50 | p99 | total p50 | p99 | x real time "
            "| streams with gaps | failed |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for variant in results["variants"]:
            for r in variant["levels"]:
                if r["model"] != model or not r["spread_s"]:
                    continue
                gaps = f"{r['streams_with_gaps']}/{r['requests']}" if model == "tts_stream" else "-"
                lines.append(
                    f"| {variant['name']} | {r['concurrency']} | {r['first_chunk_p50_s']:.2f} s "
                    f"| {r['first_chunk_p99_s']:.2f} s | {r['total_p50_s']:.2f} s | {r['total_p99_s']:.2f} s "
                    f"| {r['x_real_time']:.1f} | {gaps} | {r['failed']} |"
                )
        written.append("\n".join(lines))
    bursts = [(v["name"], r) for v in results["variants"] for r in v["levels"] if not r["spread_s"]]
    if bursts:
        lines = [
            "Bursts: that many streams started in the same instant, one each:",
            "",
            "| variant | streams | first chunk p50 | slowest | streams with gaps |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {r['concurrency']} | {r['first_chunk_p50_s']:.2f} s "
            f"| {r['first_chunk_max_s']:.2f} s | {r['streams_with_gaps']}/{r['requests']} |"
            for name, r in bursts
        ]
        written.append("\n".join(lines))
    written.append(
        "Variants: "
        + "; ".join(f"**{v['name']}**: {v['description']}" for v in results["variants"])
        + ". `tts` rows show no first chunk: its whole answer is its first audio."
    )
    return written


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (first, throughput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for variant in results["variants"]:
        stream = [r for r in variant["levels"] if r["model"] == "tts_stream" and r["spread_s"]]
        levels = [r["concurrency"] for r in stream]
        first.plot(levels, [r["first_chunk_p99_s"] for r in stream], marker="o", label=variant["name"])
        throughput.plot(
            levels, [r["x_real_time"] for r in stream], marker="o", label=f"{variant['name']} (stream)"
        )
    whole = [r for r in results["variants"][0]["levels"] if r["model"] == "tts"]  # the first variant's
    throughput.plot(
        [r["concurrency"] for r in whole], [r["x_real_time"] for r in whole], "k--", label="tts (whole text)"
    )
    first.set(
        xlabel="concurrent streams", ylabel="first chunk p99 (s)", yscale="log", title="Time to first audio"
    )
    throughput.set(
        xlabel="concurrent requests", ylabel="seconds of audio per second", title="Aggregate throughput"
    )
    for axis in (first, throughput):
        axis.set_xticks(
            sorted({r["concurrency"] for v in results["variants"] for r in v["levels"] if r["spread_s"]})
        )
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(stamp_line(results), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[v for v in VARIANTS if v != "int8-flow"],
        help=f"of {', '.join(VARIANTS)}",
    )
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=3, help="answers per client thread")
    parser.add_argument("--spread-s", type=float, default=10.0, help="clients start spread over this long")
    parser.add_argument("--bursts", type=int, nargs="*", default=[8], help="streams started at once")
    parser.add_argument("--voice", type=Path, help="voice folder (default: the bundled voice)")
    parser.add_argument(
        "--int8-flow-voice", type=Path, help="the same voice exported with `export int8 --stages flow`"
    )
    parser.add_argument("--url-grpc", help="measure a running server instead (variant 'running')")
    parser.add_argument("--out", type=Path, default=Path("results/first_audio.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    variants = []
    if args.url_grpc:
        levels = measure(args.url_grpc, args.levels, args.rounds, args.spread_s, args.bursts)
        variants.append(
            {"name": "running", "description": f"the server at {args.url_grpc}", "levels": levels}
        )
    else:
        for name in args.variants:
            description, options = VARIANTS[name]
            logging.info("variant %s: %s", name, description)
            voice = args.voice
            if name == "int8-flow":
                if args.int8_flow_voice is None:
                    parser.error("the int8-flow variant needs --int8-flow-voice")
                voice = args.int8_flow_voice
            levels = serve_variant(options, args.levels, args.rounds, args.spread_s, args.bursts, voice)
            variants.append({"name": name, "description": description, "levels": levels})
    results: dict[str, Any] = {
        **stamp(),
        "rounds": args.rounds,
        "spread_s": args.spread_s,
        "variants": variants,
    }
    write_report(args.out, results, tables(results))
    plot(results, args.out.with_suffix(".png"))
    return results


if __name__ == "__main__":
    main()
