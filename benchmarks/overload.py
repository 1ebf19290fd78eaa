"""Overload: goodput, accepted latency and refusals as concurrency passes what the server sustains.

Closed-loop users (1, 2, 4, ... 64) each send three-sentence texts to ``tts`` for
``--seconds``. A refused attempt (HTTP 503 / gRPC UNAVAILABLE: ``ServerBusy``) is
counted, and the user waits the client library's backoff (``RetryPolicy``, full jitter)
and sends the same text again, as a real client does; the client itself never retries
here, so every attempt is seen. Per level:

- goodput: seconds of audio of successful requests per second of wall time;
- accepted p50/p99: latency of attempts the server accepted (what admission bounds);
- refusal rate and refusal p99: share of attempts refused, and how fast they came back;
- end-to-end p50/p99: a user's wait from the first attempt to the audio, retries included;
- with ``--stream``: ``tts_stream``, and the accepted streams' time to their first audio.

    python -m benchmarks.overload                       # default build, own server
    python -m benchmarks.overload --set admission=requests --set max_texts=12 --out results/counts.json
    python -m benchmarks.overload --stream --levels 8 64  # tts_stream (admitted by demand)
    python -m benchmarks.overload --url localhost:8001  # a running server
    python -m benchmarks.overload --levels 1 4 --seconds 3    # smoke

Writes results/overload.json and results/overload.md (a Markdown table), stamped with date,
git commit and machine (benchmarks/stamp.py), and results/overload.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import SENTENCES
from triton_tts.build.model_configs import BuildOptions
from triton_tts.client.tts_client import NO_RETRIES, RetryPolicy, ServerBusy, TTSClient, TTSError
from triton_tts.ops.repository import build_repository, ensure_default_voice
from triton_tts.ops.server import TritonServer, free_port

LEVELS = [1, 2, 4, 8, 16, 32, 64]
# Three consecutive sentences of the mixed set: 2 chunks, 5 to 12 s of audio each.
TEXTS = [" ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(3)) for i in range(len(SENTENCES))]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


@dataclasses.dataclass
class Tally:
    """What every user saw at one level (appended under ``lock``)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    accepted: list[float] = dataclasses.field(default_factory=list)  # latency of successes
    end_to_end: list[float] = dataclasses.field(default_factory=list)  # first attempt -> audio
    refused: list[float] = dataclasses.field(default_factory=list)  # latency of refusals
    first_chunk: list[float] = dataclasses.field(default_factory=list)  # tts_stream: to the first audio
    errors: list[str] = dataclasses.field(default_factory=list)
    audio_s: float = 0.0
    last_done: float = 0.0


def attempt(client: TTSClient, text: str, streaming: bool) -> tuple[float, float]:
    """One try: (seconds of audio, seconds to its first audio)."""
    start = time.perf_counter()
    if not streaming:
        result = client.synthesize(text)
        return result.duration_s, time.perf_counter() - start
    audio, first = 0.0, 0.0
    for chunk in client.stream(text):
        first = first or time.perf_counter() - start
        audio += len(chunk.audio) / chunk.sample_rate
    return audio, first


def user(url: str, protocol: str, streaming: bool, offset: int, end: float, tally: Tally) -> None:
    backoff = RetryPolicy()
    with TTSClient(url, protocol, retry=NO_RETRIES) as client:  # type: ignore[arg-type]
        n = offset
        while time.monotonic() < end:
            text, first, refusals = TEXTS[n % len(TEXTS)], time.perf_counter(), 0
            while True:
                start = time.perf_counter()
                try:
                    audio_s, first_audio_s = attempt(client, text, streaming)
                except ServerBusy:
                    with tally.lock:
                        tally.refused.append(time.perf_counter() - start)
                    time.sleep(backoff.delay(refusals))
                    refusals += 1
                    continue
                except TTSError as err:
                    with tally.lock:
                        tally.errors.append(str(err))
                    break
                done = time.perf_counter()
                with tally.lock:
                    tally.accepted.append(done - start)
                    tally.end_to_end.append(done - first)
                    tally.first_chunk.append(first_audio_s)
                    tally.audio_s += audio_s
                    tally.last_done = max(tally.last_done, done)
                break
            n += 1


def level(url: str, protocol: str, streaming: bool, concurrency: int, seconds: float) -> dict[str, Any]:
    tally = Tally()
    start = time.perf_counter()
    end = time.monotonic() + seconds  # users start nothing new after this; what runs finishes
    threads = [
        threading.Thread(target=user, args=(url, protocol, streaming, k, end, tally))
        for k in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(tally.last_done, time.perf_counter()) - start
    attempts = len(tally.accepted) + len(tally.refused) + len(tally.errors)
    return {
        "concurrency": concurrency,
        "seconds": wall,
        "ok": len(tally.accepted),
        "refused": len(tally.refused),
        "errors": len(tally.errors),
        "error_samples": sorted(set(tally.errors))[:3],
        "goodput_x_real_time": tally.audio_s / wall,
        "accepted_p50_s": percentile(tally.accepted, 50),
        "accepted_p99_s": percentile(tally.accepted, 99),
        "accepted_max_s": max(tally.accepted, default=float("nan")),
        "refusal_rate": len(tally.refused) / max(1, attempts),
        "refusal_p99_s": percentile(tally.refused, 99),
        "end_to_end_p50_s": percentile(tally.end_to_end, 50),
        "end_to_end_p99_s": percentile(tally.end_to_end, 99),
        "first_audio_p50_s": percentile(tally.first_chunk, 50),  # = accepted latency for tts
        "first_audio_p99_s": percentile(tally.first_chunk, 99),
        "load_average_1min": os.getloadavg()[0],  # the machine's, server and users included
    }


def build_options(settings: list[str]) -> BuildOptions:
    """``name=value`` pairs (integers) over the default BuildOptions."""
    fields = {f.name for f in dataclasses.fields(BuildOptions)}
    values: dict[str, Any] = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name not in fields or not value:
            raise SystemExit(f"--set {setting}: expected NAME=VALUE with NAME a BuildOptions field")
        values[name] = int(value)
    return dataclasses.replace(BuildOptions(), **values)


def own_server(options: BuildOptions, stack: ExitStack) -> TritonServer:
    """The default voice built with ``options`` into a scratch folder, served on free ports."""
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triton-tts-overload-")))
    repo = build_repository(ensure_default_voice(), scratch / "model_repository", options)
    return TritonServer(
        repo,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=scratch / "tritonserver.log",
    )


def plot(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["levels"]
    levels = [r["concurrency"] for r in rows]
    fig, (good, latency, refused) = plt.subplots(1, 3, figsize=(14, 4))
    good.plot(levels, [r["goodput_x_real_time"] for r in rows], marker="o")
    good.set(xlabel="concurrent users", ylabel="seconds of audio per second", title="Goodput")
    latency.plot(levels, [r["accepted_p50_s"] for r in rows], marker="o", label="accepted p50")
    latency.plot(
        levels, [r["accepted_p99_s"] for r in rows], marker="x", linestyle="--", label="accepted p99"
    )
    latency.plot(
        levels, [r["end_to_end_p99_s"] for r in rows], marker=".", linestyle=":", label="end to end p99"
    )
    latency.set(xlabel="concurrent users", ylabel="seconds", title="Latency")
    latency.legend()
    refused.plot(levels, [100 * r["refusal_rate"] for r in rows], marker="o")
    refused.set(
        xlabel="concurrent users", ylabel="% of attempts refused", title="Refusals (503 / UNAVAILABLE)"
    )
    for axis in (good, latency, refused):
        axis.set_xscale("log", base=2)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    fig.suptitle(f"{results['model']} overload, {results['machine']}, {results['date']}, {results['commit']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(results: dict[str, Any]) -> str:
    streaming = results["model"] == "tts_stream"
    lines = [
        f"`{results['model']}`, three-sentence texts, {results['protocol']}, "
        f"{results['seconds_per_level']:g} s per level, server: {results['server']}:",
        "",
        "| users | goodput (x real time) | of peak | accepted p50 | accepted p99 | "
        + ("first audio p99 | " if streaming else "")
        + "refused | refusal p99 | end-to-end p99 |",
        "|---|---|---|---|---|" + ("---|" if streaming else "") + "---|---|---|",
    ]
    for r in results["levels"]:
        refusal = f"{1000 * r['refusal_p99_s']:.0f} ms" if r["refused"] else "-"
        lines.append(
            f"| {r['concurrency']} | {r['goodput_x_real_time']:.1f} | {100 * r['goodput_of_peak']:.0f}% "
            f"| {r['accepted_p50_s']:.2f} s | {r['accepted_p99_s']:.2f} s | "
            + (f"{r['first_audio_p99_s']:.2f} s | " if streaming else "")
            + f"{100 * r['refusal_rate']:.0f}% | {refusal} | {r['end_to_end_p99_s']:.2f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--levels", type=int, nargs="+", default=LEVELS, help="concurrent users")
    parser.add_argument("--seconds", type=float, default=30.0, help="load per level")
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    parser.add_argument("--stream", action="store_true", help="tts_stream instead of tts (gRPC)")
    parser.add_argument("--url", help="a running server (of --protocol); default: start one")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="build option of the own server"
    )
    parser.add_argument("--out", type=Path, default=Path("results/overload.json"))
    args = parser.parse_args(argv)
    if args.stream and args.protocol != "grpc":
        parser.error("--stream needs --protocol grpc")
    model = "tts_stream" if args.stream else "tts"
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options = build_options(args.set)
    with ExitStack() as stack:
        if args.url:
            url = args.url
        else:
            server = stack.enter_context(own_server(options, stack))
            url = server.grpc_url if args.protocol == "grpc" else server.http_url
        with TTSClient(url, args.protocol) as warm:
            for text in TEXTS:
                warm.synthesize(text)
        results: dict[str, Any] = {
            **stamp(),
            "model": model,
            "protocol": args.protocol,
            "server": args.url or "own, " + ", ".join(args.set or ["default build"]),
            "admission": {
                "admission": options.admission,
                "text_budget_ms": options.text_budget_ms,
                "first_chunk_budget_ms": options.first_chunk_budget_ms,
                "stream_headroom_pct": options.stream_headroom_pct,
                "max_texts": options.max_texts,
                "max_streams": options.max_streams,
            },
            "seconds_per_level": args.seconds,
            "levels": [],
        }
        for concurrency in args.levels:
            results["levels"].append(level(url, args.protocol, args.stream, concurrency, args.seconds))
            logging.info("concurrency %d: %s", concurrency, results["levels"][-1])
    peak = max(r["goodput_x_real_time"] for r in results["levels"])
    for r in results["levels"]:
        r["goodput_of_peak"] = r["goodput_x_real_time"] / peak if peak else 0.0
    write_report(args.out, results, [markdown(results)])
    print(f"plot: {plot(results, args.out.with_suffix('.png'))}")
    return results


if __name__ == "__main__":
    main()
