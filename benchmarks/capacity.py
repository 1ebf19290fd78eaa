"""Capacity, not counts: the shipped admission by work against admission by request count.

Each variant is a repository built with its own admission options, served in turn on
free ports on this machine (its own ``TritonServer``, which measures its capacity once
ready), warmed up, then loaded the same way:

1. capacity: what the server measured (seconds of audio per second, and per stage);
2. perf_analyzer on ``tts`` with one-sentence texts (the mixed sentence set) at each
   ``--perf-levels`` concurrency: errors or not (perf_analyzer stops at a refusal),
   throughput, p50/p99 (benchmarks/perf.py runs it);
3. offered load: closed-loop clients sending three-sentence texts for ``--seconds`` at each
   of ``--levels`` (benchmarks/overload.py's users: a refused attempt waits the client's
   backoff and is sent again): goodput, refused share, accepted p99, refusal p99;
4. paced listeners: N ``tts_stream`` listeners (gRPC, ~600-character answers, no client
   retries) arriving uniformly over ``--spread-s``, N = 0.75 x the measured capacity of the
   first variant served (the shipped one), the same N for both: refused, listeners that
   heard a gap (benchmarks/first_audio.py's player), first chunk p50/p99. Then N + 4,
   N + 8, ... (at most ``--search-steps`` more) until a listener hears a gap or one is
   refused: the most listeners served at once without a gap;
5. a burst: ``--burst`` streams started in the same instant, ``--burst-rounds`` times, each
   closed (cancelled) after its first chunk: first chunk p99 against the p50 of single
   streams one at a time on the idle server.

    python -m benchmarks.capacity                        # both variants, 10-15 min on 2 cores
    python -m benchmarks.capacity --variants defaults --levels 16 64 --search-steps 0
    python -m benchmarks.capacity --quick                # smoke: about a minute

Writes results/capacity.json, results/capacity.md (tables, stamped with date, commit and
machine: benchmarks/stamp.py) and results/capacity.png (goodput and refused share against
offered load, both variants).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import tempfile
import threading
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from benchmarks import perf
from benchmarks.first_audio import listener_gaps
from benchmarks.overload import TEXTS, own_server, percentile
from benchmarks.overload import level as offered_load
from benchmarks.stamp import stamp, stamp_line, write_report
from testkit.sample_texts import SENTENCES, STREAM_PARAGRAPHS
from triton_tts.build.model_configs import BuildOptions
from triton_tts.client.tts_client import NO_RETRIES, ServerBusy, TTSClient, TTSError

# The count-based admission as it shipped before admission by work: 4 tts instances and
# 8 queued (12 texts), 16 streams.
COUNTED = BuildOptions(admission="requests", max_texts=12, max_streams=16)
VARIANTS: dict[str, BuildOptions] = {"defaults": BuildOptions(), "requests": COUNTED}
ADMISSION_FIELDS = (
    "admission",
    "text_budget_ms",
    "first_chunk_budget_ms",
    "stream_headroom_pct",
    "caller_share_pct",
    "max_texts",
    "max_streams",
)
LISTENER_SHARE = 0.75  # of the measured capacity: listeners the shipped server should serve gapless
LISTENER_STEP = 4  # more listeners per step of the search for the most gapless
BURST_PAUSE_S = 1.0  # between burst rounds: the cancelled streams' chunks in flight finish
QUICK = {
    "perf_levels": [1],
    "perf_requests": 4,
    "levels": [4],
    "seconds": 2.0,
    "listeners": 2,
    "spread_s": 1.0,
    "search_steps": 0,
    "burst": 2,
    "burst_rounds": 1,
    "singles": 2,
}


def describe(options: BuildOptions) -> str:
    if options.admission == "requests":
        return f"admission by count: at most {options.max_texts} texts and {options.max_streams} streams"
    return (
        f"admission by work: texts wait at most {options.text_budget_ms / 1000:g} s, first chunks "
        f"{options.first_chunk_budget_ms / 1000:g} s, listeners leave {options.stream_headroom_pct}% "
        f"of capacity free, a caller takes at most {options.caller_share_pct}%; safety bounds "
        f"{options.max_texts} texts, {options.max_streams} streams"
    )


def perf_row(
    grpc_url: str, input_data: Path, concurrency: int, requests: int, audio_s: float
) -> dict[str, Any]:
    """perf_analyzer at one concurrency; a refusal stops it (no figures then, the error)."""
    try:
        row = perf.run_level(grpc_url, "grpc", input_data, "concurrency", concurrency, requests)
    except RuntimeError as err:
        errors = re.findall(r"had error: (.+)", str(err))
        return {"concurrency": concurrency, "errors": True, "error": errors[0] if errors else str(err)[-300:]}
    return {
        "concurrency": concurrency,
        "errors": False,
        **row,
        "x_real_time": row["requests_per_s"] * audio_s,
    }


def listeners(
    grpc_url: str, count: int, spread_s: float, texts: list[str], first_only: bool = False
) -> dict[str, Any]:
    """``count`` streams, one per listener, starting uniformly over ``spread_s``; a refused
    stream is counted, not retried. ``first_only``: each is closed after its first chunk."""
    heard: list[tuple[float, int, float]] = []  # first chunk, gaps, seconds of silence
    refused: list[float] = []
    failed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count)

    def listener(k: int) -> None:
        with TTSClient(grpc_url, "grpc", timeout_s=600, retry=NO_RETRIES) as client:
            barrier.wait()
            time.sleep(spread_s * k / count)
            arrivals: list[float] = []
            durations: list[float] = []
            start = time.perf_counter()
            try:
                with closing(client.stream(texts[k % len(texts)])) as chunks:
                    for chunk in chunks:
                        arrivals.append(time.perf_counter() - start)
                        durations.append(chunk.audio.size / chunk.sample_rate)
                        if first_only:
                            break
                if not arrivals:
                    raise TTSError("the stream ended without audio")
            except ServerBusy:
                with lock:
                    refused.append(time.perf_counter() - start)
                return
            except TTSError as err:
                with lock:
                    failed.append(str(err))
                return
        gaps, silent = listener_gaps(arrivals, durations)
        with lock:
            heard.append((arrivals[0], gaps, silent))

    threads = [threading.Thread(target=listener, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    firsts = [first for first, _, _ in heard]
    return {
        "listeners": count,
        "spread_s": spread_s,
        "served": len(heard),
        "refused": len(refused),
        "failed": len(failed),
        "failure_samples": sorted(set(failed))[:3],
        "refusal_p99_s": percentile(refused, 99),
        "with_gaps": sum(1 for _, gaps, _ in heard if gaps),
        "gap_s_total": sum(silent for _, _, silent in heard),
        "first_chunk_p50_s": percentile(firsts, 50),
        "first_chunk_p99_s": percentile(firsts, 99),
        "first_chunk_s": sorted(round(f, 3) for f in firsts),
    }


def most_gapless(steps: list[dict[str, Any]]) -> int | None:
    """The most listeners one step served with no gap for anyone (None: every step had gaps)."""
    clean = [s["served"] for s in steps if not s["with_gaps"] and not s["failed"]]
    return max(clean) if clean else None


def listener_search(
    grpc_url: str, first: int, spread_s: float, texts: list[str], steps: int
) -> list[dict[str, Any]]:
    """``first`` listeners, then ``LISTENER_STEP`` more each time, until a listener hears a
    gap or is refused (more offered would not be more served), at most ``steps`` more runs."""
    runs = []
    for step in range(steps + 1):
        run = listeners(grpc_url, first + step * LISTENER_STEP, spread_s, texts)
        logging.info(
            "%d listeners: %d served, %d refused, %d heard gaps, first chunk p99 %.2f s",
            run["listeners"],
            run["served"],
            run["refused"],
            run["with_gaps"],
            run["first_chunk_p99_s"],
        )
        runs.append(run)
        if run["with_gaps"] or run["refused"] or run["failed"]:
            break
    return runs


def bursts(grpc_url: str, size: int, rounds: int, singles: int) -> dict[str, Any]:
    """``rounds`` bursts of ``size`` streams (first chunks only), against ``singles`` streams
    one at a time."""
    single = [
        listeners(grpc_url, 1, 0.0, [STREAM_PARAGRAPHS[k % 4]], first_only=True) for k in range(singles)
    ]
    single_firsts = [f for s in single for f in s["first_chunk_s"]]
    runs = []
    for _ in range(rounds):
        time.sleep(BURST_PAUSE_S)
        runs.append(listeners(grpc_url, size, 0.0, STREAM_PARAGRAPHS, first_only=True))
    firsts = [f for r in runs for f in r["first_chunk_s"]]
    single_p50 = percentile(single_firsts, 50)
    burst_p99 = percentile(firsts, 99)
    return {
        "streams": size,
        "rounds": rounds,
        "refused": sum(r["refused"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "first_chunk_p50_s": percentile(firsts, 50),
        "first_chunk_p99_s": burst_p99,
        "single_p50_s": single_p50,
        "p99_over_single_p50": burst_p99 / single_p50 if single_p50 > 0 else float("nan"),
        "first_chunk_s": sorted(firsts),
    }


def warm_up(grpc_url: str, texts: int) -> None:
    """The tts and tts_stream paths once each (the server's own warm-up ran tts_chunk)."""
    with TTSClient(grpc_url, "grpc") as client:
        for text in TEXTS[:texts]:
            client.synthesize(text)
        for text in STREAM_PARAGRAPHS[:texts]:
            with closing(client.stream(text)) as chunks:
                next(chunks)


def serve_variant(name: str, args: argparse.Namespace, listener_count: int | None) -> dict[str, Any]:
    options = VARIANTS[name]
    logging.info("variant %s: %s", name, describe(options))
    with ExitStack() as stack:
        server = stack.enter_context(own_server(options, stack))
        url = server.grpc_url
        capacity = {v: {"audio_per_s": c, "stages": stages} for v, (c, stages) in server.capacity.items()}
        warm_up(url, 2 if args.quick else len(TEXTS))
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triton-tts-capacity-")))
        input_data = perf.write_input_data(scratch / "input_data.json", SENTENCES)
        sentence_audio_s = perf.mean_audio_seconds(url, SENTENCES)
        perf_rows = []
        for concurrency in args.perf_levels:
            requests = args.perf_requests or max(8, 2 * concurrency)
            perf_rows.append(perf_row(url, input_data, concurrency, requests, sentence_audio_s))
            logging.info("perf_analyzer c%d: %s", concurrency, perf_rows[-1])
        load = []
        for clients in args.levels:
            load.append(offered_load(url, "grpc", False, clients, args.seconds))
            logging.info("%d clients: %s", clients, load[-1])
        # The first voice is the default one, which every text here is read in.
        voice_capacity = next(iter(server.capacity.values()))[0] if server.capacity else 0.0
        count = listener_count or max(1, round(LISTENER_SHARE * voice_capacity))
        texts = SENTENCES[:2] if args.quick else STREAM_PARAGRAPHS
        search = listener_search(url, count, args.spread_s, texts, args.search_steps)
        burst = bursts(url, args.burst, args.burst_rounds, args.singles)
        logging.info("burst of %d: %s", args.burst, {k: v for k, v in burst.items() if k != "first_chunk_s"})
    return {
        "name": name,
        "description": describe(options),
        "options": {field: getattr(options, field) for field in ADMISSION_FIELDS},
        "capacity": capacity,
        "sentence_audio_s": sentence_audio_s,
        "perf": perf_rows,
        "load": load,
        "listeners": search,
        "most_gapless_listeners": most_gapless(search),
        "burst": burst,
    }


def gapless(variant: dict[str, Any]) -> str:
    most, last = variant["most_gapless_listeners"], variant["listeners"][-1]
    if most is None:
        return f"{variant['name']}: none (every run had a gap)"
    clean = not (last["with_gaps"] or last["refused"] or last["failed"])
    return f"{variant['name']} {most}" + (" (the most tried: more may be)" if clean else "")


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{1000 * seconds:.0f} ms"  # NaN: nothing measured


def tables(results: dict[str, Any]) -> list[str]:
    variants = results["variants"]
    written = [
        "\n".join(
            ["Measured capacity (the server's warm-up burst of sentences):", ""]
            + ["| variant | capacity (s of audio per s) | per stage, per instance |", "|---|---|---|"]
            + [
                f"| {v['name']} | {c['audio_per_s']:.1f} ({voice}) | "
                + ", ".join(f"{stage} {value:.1f}" for stage, value in c["stages"].items())
                + " |"
                for v in variants
                for voice, c in v["capacity"].items()
            ]
        )
    ]
    lines = [
        f"perf_analyzer on `tts`, gRPC, one-sentence texts ({len(SENTENCES)}, mixed lengths, "
        f"{variants[0]['sentence_audio_s']:.1f} s of audio on average); perf_analyzer stops at "
        "the first refusal:",
        "",
        "| variant | concurrency | errors | req/s | x real time | p50 | p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        for r in v["perf"]:
            if r["errors"]:
                lines.append(f"| {v['name']} | {r['concurrency']} | {r['error']} | - | - | - | - |")
            else:
                lines.append(
                    f"| {v['name']} | {r['concurrency']} | none | {r['requests_per_s']:.2f} "
                    f"| {r['x_real_time']:.1f} | {r['p50_ms']:.0f} ms | {r['p99_ms']:.0f} ms |"
                )
    written.append("\n".join(lines))
    lines = [
        f"Offered load: closed-loop clients sending three-sentence texts to `tts` for "
        f"{results['seconds_per_level']:g} s, a refused attempt sent again after the client's backoff:",
        "",
        "| variant | clients | goodput (x real time) | refused | accepted p50 | accepted p99 "
        "| refusal p99 | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        for r in v["load"]:
            lines.append(
                f"| {v['name']} | {r['concurrency']} | {r['goodput_x_real_time']:.1f} "
                f"| {100 * r['refusal_rate']:.0f}% | {r['accepted_p50_s']:.2f} s "
                f"| {r['accepted_p99_s']:.2f} s "
                f"| {_ms(r['refusal_p99_s'])} | {r['errors']} |"
            )
    written.append("\n".join(lines))
    lines = [
        f"Paced listeners: `tts_stream`, gRPC, {results['listener_texts']}, arriving over "
        f"{results['spread_s']:g} s, no client retries; the first row of each variant is "
        f"{LISTENER_SHARE:.0%} of the measured capacity of {variants[0]['name']}, then "
        f"{LISTENER_STEP} more until a gap or a refusal:",
        "",
        "| variant | listeners | served | refused | heard a gap | silence | first chunk p50 | p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        for r in v["listeners"]:
            lines.append(
                f"| {v['name']} | {r['listeners']} | {r['served']} | {r['refused']} "
                f"| {r['with_gaps']} | {r['gap_s_total']:.1f} s | {_ms(r['first_chunk_p50_s'])} "
                f"| {_ms(r['first_chunk_p99_s'])} |"
            )
    lines.append("")
    lines += [f"- most listeners served at once without a gap: {gapless(v)}" for v in variants]
    written.append("\n".join(lines))
    lines = [
        "Bursts: that many streams started in the same instant (each closed after its first "
        "chunk), against single streams one at a time:",
        "",
        "| variant | streams x rounds | refused | first chunk p50 | p99 | single p50 | p99 / single p50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        b = v["burst"]
        lines.append(
            f"| {v['name']} | {b['streams']} x {b['rounds']} | {b['refused']} "
            f"| {_ms(b['first_chunk_p50_s'])} "
            f"| {_ms(b['first_chunk_p99_s'])} | {_ms(b['single_p50_s'])} | {b['p99_over_single_p50']:.1f} |"
        )
    written.append("\n".join(lines))
    written.append("Variants: " + "; ".join(f"**{v['name']}**: {v['description']}" for v in variants) + ".")
    return written


def plot(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (good, refused) = plt.subplots(1, 2, figsize=(11, 4.2))
    for v in results["variants"]:
        clients = [r["concurrency"] for r in v["load"]]
        good.plot(clients, [r["goodput_x_real_time"] for r in v["load"]], marker="o", label=v["name"])
        refused.plot(clients, [100 * r["refusal_rate"] for r in v["load"]], marker="o", label=v["name"])
    good.set(xlabel="closed-loop clients", ylabel="seconds of audio per second", title="Goodput")
    refused.set(xlabel="closed-loop clients", ylabel="% of attempts refused", title="Refused")
    for axis in (good, refused):
        axis.set_xscale("log", base=2)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(stamp_line(results), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--perf-levels", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument(
        "--perf-requests",
        type=int,
        default=0,
        help="per perf_analyzer window; 0: 2 x concurrency, 8 at least",
    )
    parser.add_argument("--levels", type=int, nargs="+", default=[8, 16, 32, 64], help="closed-loop clients")
    parser.add_argument("--seconds", type=float, default=20.0, help="offered load per level")
    parser.add_argument(
        "--listeners", type=int, default=0, help=f"paced listeners; 0: {LISTENER_SHARE} x measured capacity"
    )
    parser.add_argument("--spread-s", type=float, default=10.0, help="listeners arrive over this long")
    parser.add_argument("--search-steps", type=int, default=2, help=f"runs of {LISTENER_STEP} more listeners")
    parser.add_argument("--burst", type=int, default=8, help="streams started at once")
    parser.add_argument("--burst-rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=5, help="single streams, one at a time")
    parser.add_argument("--quick", action="store_true", help="smoke: tiny levels, short listener texts")
    parser.add_argument("--out", type=Path, default=Path("results/capacity.json"))
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    variants = []
    listener_count = args.listeners or None
    for name in args.variants:
        variants.append(serve_variant(name, args, listener_count))
        listener_count = listener_count or variants[0]["listeners"][0]["listeners"]
    results: dict[str, Any] = {
        **stamp(),
        "quick": args.quick,
        "seconds_per_level": args.seconds,
        "spread_s": args.spread_s,
        "listener_texts": "one-sentence answers" if args.quick else "~600-character answers",
        "variants": variants,
    }
    write_report(args.out, results, tables(results))
    print(f"plot: {plot(results, args.out.with_suffix('.png'))}")
    return results


if __name__ == "__main__":
    main()
