"""Time to first audio with streaming, total latency without, and server memory on long text.

For a ~600-character paragraph at concurrency 1, 4 and 8: first-chunk latency (p50/p99)
through ``tts_stream`` (gRPC) and total latency through ``tts``; then the peak resident
memory of the whole server (tritonserver + every Python-backend stub) while ``tts``
synthesises a 20,000-character text.

    python -m benchmarks.streaming                 # starts its own server on free ports
    python -m benchmarks.streaming --url-grpc gpu-node:8001 --url-http gpu-node:8000 \
        --no-memory                                # a running server, e.g. a GPU node
    python -m benchmarks.streaming --rounds 1 --levels 1 --chapter-chars 2000   # smoke

Writes results/streaming.json and results/streaming.md (Markdown tables), stamped with date,
commit and machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import PARAGRAPH
from triton_tts.client import TTSClient


def p(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def latency_level(grpc_url: str, concurrency: int, rounds: int) -> dict[str, Any]:
    local = threading.local()

    def client() -> TTSClient:
        if not hasattr(local, "client"):
            local.client = TTSClient(grpc_url, "grpc")
        return local.client  # type: ignore[no-any-return]

    def streamed(_: int) -> tuple[float, float]:
        start = time.perf_counter()
        first = 0.0
        for chunk in client().stream(PARAGRAPH):
            if chunk.index == 0:
                first = time.perf_counter() - start
        return first, time.perf_counter() - start

    def whole(_: int) -> float:
        start = time.perf_counter()
        client().synthesize(PARAGRAPH)
        return time.perf_counter() - start

    count = concurrency * rounds
    with ThreadPoolExecutor(concurrency) as pool:
        stream_times = list(pool.map(streamed, range(count)))
        whole_times = list(pool.map(whole, range(count)))
    firsts = [f for f, _ in stream_times]
    return {
        "concurrency": concurrency,
        "requests": count,
        "first_chunk_p50_s": p(firsts, 50),
        "first_chunk_p99_s": p(firsts, 99),
        "stream_total_p50_s": p([t for _, t in stream_times], 50),
        "whole_p50_s": p(whole_times, 50),
        "whole_p99_s": p(whole_times, 99),
    }


def process_tree(root_pid: int) -> list[int]:
    """A process and all its descendants (tritonserver + stubs)."""
    children: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except (OSError, ValueError):
            continue
        children.setdefault(int(fields.get("PPid", "0").strip()), []).append(int(status.parent.name))
    found, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_tree_rss_kib(root_pid: int) -> int:
    """Resident memory of the tree; pages shared by two processes (the Python backend's
    shared-memory regions, mapped by a stub and by tritonserver) count twice."""
    return sum(_kib(Path(f"/proc/{pid}/status"), "VmRSS") for pid in process_tree(root_pid))


def process_tree_pss_kib(root_pid: int) -> int:
    """Proportional set size of the tree: shared pages counted once, what the machine holds."""
    return sum(_kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss") for pid in process_tree(root_pid))


def chapter_memory(http_url: str, server_pid: int, chars: int, settle_s: float = 60.0) -> dict[str, Any]:
    chapter = (PARAGRAPH + " ") * (chars // (len(PARAGRAPH) + 1) + 1)
    chapter = chapter[:chars].rsplit(" ", 1)[0] + "."
    baseline = process_tree_rss_kib(server_pid)
    baseline_pss = process_tree_pss_kib(server_pid)
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process_tree_rss_kib(server_pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    with TTSClient(http_url, "http", timeout_s=1800) as client:
        result = client.synthesize(chapter)
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    after, after_pss = process_tree_rss_kib(server_pid), process_tree_pss_kib(server_pid)
    time.sleep(settle_s)
    return {
        "chars": len(chapter),
        "audio_s": result.duration_s,
        "seconds": elapsed,
        "server_rss_before_mib": baseline / 1024,
        "server_rss_peak_mib": peak[0] / 1024,
        "server_rss_after_mib": after / 1024,
        "server_rss_settled_mib": process_tree_rss_kib(server_pid) / 1024,
        "settle_s": settle_s,
        "server_pss_before_mib": baseline_pss / 1024,
        "server_pss_after_mib": after_pss / 1024,
        "server_pss_settled_mib": process_tree_pss_kib(server_pid) / 1024,
        "audio_mib": result.audio.nbytes / 2**20,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=4, help="requests per client thread")
    parser.add_argument("--chapter-chars", type=int, default=20_000)
    parser.add_argument("--url-grpc", help="running server's gRPC address (with --url-http)")
    parser.add_argument("--url-http", help="running server's HTTP address")
    parser.add_argument("--no-memory", action="store_true", help="skip the long-text memory run")
    parser.add_argument("--memory-only", action="store_true", help="only the long-text memory run")
    parser.add_argument("--settle-s", type=float, default=60.0, help="wait before the last memory reading")
    parser.add_argument("--out", type=Path, default=Path("results/streaming.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from triton_tts.ops.server import default_voice_server

    with ExitStack() as stack:
        pid = None
        if args.url_grpc and args.url_http:
            grpc_url, http_url = args.url_grpc, args.url_http
        else:
            server = stack.enter_context(default_voice_server())
            assert server.process is not None
            grpc_url, http_url, pid = server.grpc_url, server.http_url, server.process.pid
        with TTSClient(grpc_url, "grpc") as warm:
            list(warm.stream(PARAGRAPH))
        results: dict[str, Any] = {
            **stamp(),
            "paragraph_chars": len(PARAGRAPH),
            "levels": []
            if args.memory_only
            else [latency_level(grpc_url, c, args.rounds) for c in args.levels],
        }
        if pid is not None and not args.no_memory:  # memory is read from /proc: local servers only
            results["chapter"] = chapter_memory(http_url, pid, args.chapter_chars, args.settle_s)
    write_report(args.out, results, tables(results))
    return results


def tables(results: dict[str, Any]) -> list[str]:
    written = []
    if results["levels"]:
        lines = [
            f"{results['paragraph_chars']}-character paragraph, gRPC:",
            "",
            "| concurrency | first chunk p50 | first chunk p99 | whole, no streaming p50 | p99 |",
            "|---|---|---|---|---|",
        ]
        for r in results["levels"]:
            lines.append(
                f"| {r['concurrency']} | {r['first_chunk_p50_s']:.2f} s | {r['first_chunk_p99_s']:.2f} s "
                f"| {r['whole_p50_s']:.2f} s | {r['whole_p99_s']:.2f} s |"
            )
        written.append("\n".join(lines))
    if "chapter" in results:
        c = results["chapter"]
        written.append(
            f"One {c['chars']}-character `tts` request: {c['audio_s'] / 60:.1f} min of audio "
            f"({c['audio_mib']:.0f} MiB) in {c['seconds']:.1f} s. "
            "Whole server (tritonserver and every stub):\n\n"
            f"| memory | before | peak | after | {c['settle_s']:.0f} s later |\n|---|---|---|---|---|\n"
            f"| RSS | {c['server_rss_before_mib']:.0f} MiB | {c['server_rss_peak_mib']:.0f} MiB "
            f"| {c['server_rss_after_mib']:.0f} MiB | {c['server_rss_settled_mib']:.0f} MiB |\n"
            f"| PSS (shared pages once) | {c['server_pss_before_mib']:.0f} MiB | - "
            f"| {c['server_pss_after_mib']:.0f} MiB | {c['server_pss_settled_mib']:.0f} MiB |"
        )
    return written


if __name__ == "__main__":
    main()
