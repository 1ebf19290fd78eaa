"""XTTS serving on CPU: the real batching loop (triton_tts/xtts/scheduler.py) in this
process, with and without cross-request batching, at several concurrencies.

Each level runs ``--requests`` requests from ``concurrency`` closed-loop clients (each
submits a request, waits for its end, submits the next), once with the shipped cache pool
(its slots, chunk size and overlap from the served model's config) and once with one slot,
where requests wait their turn. Every request is a different English sentence of 10 to 15
words, cloned from one 6 s synthetic reference clip, sampled with the voice's own settings
and a fixed seed per request. Per level and mode it reports:

- x real time: audio seconds produced / wall seconds, all requests together;
- first-chunk latency p50/p99: submit to the first audio chunk;
- decode step time per batch size (each ``runner.step``, and its GPT run alone);
- memory per active stream: the pool's bytes per cache position times the positions a
  stream fills, and the process's RSS growth over the level.

Random weights rarely choose the stop code, so every segment runs to its cap;
``--max-codes`` lowers the cap (the voice card's ``max_audio_tokens``, which sizes the
pool and ends each generation) to keep a run short. The figures are taken on whatever
else the machine runs: the CPU time of other processes during each level is recorded.

    python -m benchmarks.xtts --voice /work/xtts-full/voice --max-codes 120
    python -m benchmarks.xtts --voice build/xtts-tiny --requests 2 --concurrency 1 2   # smoke run

Writes results/xtts/xtts.json and results/xtts/xtts.md, stamped with date, commit and
machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import logging
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.stamp import stamp, write_report
from triton_tts.build.model_configs import XTTS_MODEL, xtts
from triton_tts.runtime.onnx_session import available_cores
from triton_tts.xtts.card import Sampling
from triton_tts.xtts.runner import CachePool, Conditioning, FloatArray, Generation, XttsRunner
from triton_tts.xtts.scheduler import Job, Scheduler
from triton_tts.xtts.text import XttsText

log = logging.getLogger(__name__)

LANGUAGE = "en"
REFERENCE_SECONDS = 6.0
REQUEST_TIMEOUT_S = 1800.0
# Sixteen sentences of 10 to 15 words: each request of a level reads a different one.
SENTENCES = (
    "Your order has shipped and should arrive at your door on Thursday afternoon.",
    "Please hold the line while I transfer you to the billing department now.",
    "The quarterly report shows steady growth in every region except the far north.",
    "Turn left at the next junction and continue for two hundred meters.",
    "We have updated our privacy policy, and you can read the changes online.",
    "If you would like to hear these options again, please press nine.",
    "The library opens at nine in the morning and closes at eight tonight.",
    "A member of our team will call you back within the next two days.",
    "The train to the airport leaves from platform four in ten minutes.",
    "Remember to bring your booking reference and a photo card to the desk.",
    "Our community garden needs volunteers every Wednesday evening through the summer months.",
    "The museum is closed on the first Monday of each month for repairs.",
    "You can renew your loans online, by phone, or at any local branch.",
    "The weather tomorrow will be cloudy with light rain spreading from the west.",
    "Thank you for your patience while we look into the problem with your account.",
    "The new science gallery drew thousands of visitors in its very first month.",
)


def shipped_settings() -> dict[str, int]:
    """The served model's scheduler settings, read from its rendered config (one owner)."""
    params = xtts(XTTS_MODEL).parameters
    return {
        "slots": int(params["slots"].string_value),
        "chunk_codes": int(params["chunk_codes"].string_value),
        "overlap": int(params["overlap_samples"].string_value),
        "served_threads": int(params["threads"].string_value),
    }


def reference_clip(rate: int, seconds: float = REFERENCE_SECONDS, seed: int = 0) -> FloatArray:
    """A voiced clip: a gliding pitch with harmonics, syllable-rate loudness and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 140 * (1 + 0.2 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase + rng.uniform(0, 6)) / k for k in range(1, 9))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    noise = rng.standard_normal(t.shape[0]) * 0.02
    return np.asarray(0.2 * tone * envelope + noise, dtype=np.float32)


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process) so far."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # steal counted, guest not twice
    own = os.times()
    return busy, own.user + own.system


class TimedRunner(XttsRunner):
    """The runner, timing its decode steps (by batch size), GPT runs, prefills and decodes,
    and sampling the pool's filled positions and the process's RSS after each step."""

    def __init__(self, folder: Path, threads: int):
        super().__init__(folder, threads=threads)
        self.reset()

    def reset(self) -> None:
        self.steps: dict[int, list[float]] = defaultdict(list)
        self.step_gpt: dict[int, list[float]] = defaultdict(list)
        self.prefills: list[float] = []
        self.decodes: list[tuple[int, float]] = []  # (latents, seconds)
        self.generations: list[Generation] = []
        self.peak_positions = 0  # most cache positions one stream held
        self.peak_pool_positions = 0  # most positions all live streams held together
        self.peak_live = 0
        self.peak_rss = rss_bytes()
        self._in_step = False

    def _sample(self, pool: CachePool) -> None:
        filled = pool.filled[: pool.live]
        if filled.size:
            self.peak_positions = max(self.peak_positions, int(filled.max()))
            self.peak_pool_positions = max(self.peak_pool_positions, int(filled.sum()))
        self.peak_live = max(self.peak_live, pool.live)
        self.peak_rss = max(self.peak_rss, rss_bytes())

    def gpt(
        self, pool: CachePool, first: int, end: int, embeddings: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        start = time.perf_counter()
        out = super().gpt(pool, first, end, embeddings)
        if self._in_step:
            self.step_gpt[end - first].append(time.perf_counter() - start)
        return out

    def step(self, gens: list[Generation]) -> int:
        self._in_step = True
        start = time.perf_counter()
        try:
            size = super().step(gens)
        finally:
            self._in_step = False
        if size:
            self.steps[size].append(time.perf_counter() - start)
            self._sample(gens[0].pool)
        return size

    def start(self, style: FloatArray, text_ids: list[int], sampling: Sampling, seed: int = 0,
              limit: int | None = None, pool: CachePool | None = None) -> Generation:  # fmt: skip
        began = time.perf_counter()
        gen = super().start(style, text_ids, sampling, seed, limit, pool)
        self.prefills.append(time.perf_counter() - began)
        self.generations.append(gen)
        self._sample(gen.pool)
        return gen

    def waveform(self, latents: FloatArray, speaker: FloatArray, speed: float = 1.0) -> FloatArray:
        began = time.perf_counter()
        wav = super().waveform(latents, speaker, speed)
        self.decodes.append((int(latents.shape[0]), time.perf_counter() - began))
        self.peak_rss = max(self.peak_rss, rss_bytes())
        return wav


@dataclasses.dataclass
class Outcome:
    submitted: float = 0.0
    first_chunk: float | None = None
    ended: float = 0.0
    samples: int = 0
    chunks: int = 0
    error: Exception | None = None


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def run_level(
    runner: TimedRunner,
    requests: list[list[list[int]]],
    conditioning: Conditioning,
    settings: dict[str, int],
    slots: int,
    concurrency: int,
) -> dict[str, Any]:
    """``requests`` (each its segments' text ids) through a fresh Scheduler of ``slots``
    slots, from ``concurrency`` closed-loop clients."""
    runner.reset()
    rss_before = rss_bytes()
    scheduler = Scheduler(runner, slots, settings["chunk_codes"], settings["overlap"])
    pool = scheduler.pool
    rss_with_pool = rss_bytes()
    outcomes = [Outcome() for _ in requests]
    next_request = iter(range(len(requests)))
    take = threading.Lock()
    sampling = runner.card.sampling

    def client() -> None:
        while True:
            with take:
                index = next(next_request, None)
            if index is None:
                return
            out, done = outcomes[index], threading.Event()

            def send(audio: FloatArray, last: bool, out: Outcome = out) -> None:
                if out.first_chunk is None:
                    out.first_chunk = time.perf_counter()
                out.samples += int(audio.shape[0])
                out.chunks += 1

            def finish(err: Exception | None, out: Outcome = out, done: threading.Event = done) -> None:
                out.error, out.ended = err, time.perf_counter()
                done.set()

            out.submitted = time.perf_counter()
            scheduler.submit(Job(segments=requests[index], conditioning=conditioning, sampling=sampling,
                                 seed=index, send=send, finish=finish))  # fmt: skip
            if not done.wait(REQUEST_TIMEOUT_S):
                out.error = TimeoutError(f"request {index} did not end in {REQUEST_TIMEOUT_S:.0f} s")
                return

    load_before = os.getloadavg()
    busy_before, own_before = cpu_seconds()
    began = time.perf_counter()
    clients = [threading.Thread(target=client, name=f"client-{i}") for i in range(concurrency)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    wall = time.perf_counter() - began
    busy_after, own_after = cpu_seconds()
    statistics = scheduler.statistics()
    scheduler.stop()
    failed = [f"request {i}: {out.error!r}" for i, out in enumerate(outcomes) if out.error is not None]
    if failed:
        raise RuntimeError("; ".join(failed))

    card = runner.card
    audio_s = sum(out.samples for out in outcomes) / card.output_rate
    first = [out.first_chunk - out.submitted for out in outcomes if out.first_chunk is not None]
    latency = [out.ended - out.submitted for out in outcomes]
    steps = {
        str(size): {
            "steps": len(times),
            "mean_ms": 1000 * float(np.mean(times)),
            "p50_ms": 1000 * percentile(times, 50),
            "gpt_mean_ms": 1000 * float(np.mean(runner.step_gpt[size])),
            "per_stream_ms": 1000 * float(np.mean(times)) / size,
        }
        for size, times in sorted(runner.steps.items())
    }
    bpp = pool.bytes_per_position()
    decode_s = [seconds for _, seconds in runner.decodes]
    cores = available_cores()
    other_cpu = max(0.0, (busy_after - busy_before) - (own_after - own_before))
    return {
        "mode": "batched" if slots > 1 else "unbatched",
        "slots": slots,
        "concurrency": concurrency,
        "requests": len(requests),
        "wall_s": wall,
        "audio_s": audio_s,
        "x_real_time": audio_s / wall,
        "rtf": wall / audio_s,
        "first_chunk_p50_s": percentile(first, 50),
        "first_chunk_p99_s": percentile(first, 99),
        "latency_p50_s": percentile(latency, 50),
        "latency_p99_s": percentile(latency, 99),
        "chunks_per_request": float(np.mean([out.chunks for out in outcomes])),
        "codes_per_segment": float(np.mean([len(gen.codes) for gen in runner.generations])),
        "segments_stopped_by_stop_code": sum(
            bool(gen.codes) and gen.codes[-1] == card.audio_stop for gen in runner.generations
        ),
        "decode_steps": steps,
        "prefill_mean_ms": 1000 * float(np.mean(runner.prefills)),
        "decoder": {
            "calls": len(decode_s),
            "mean_ms": 1000 * float(np.mean(decode_s)),
            "total_s": float(np.sum(decode_s)),
            "share_of_wall": float(np.sum(decode_s)) / wall,
            "latents_decoded": sum(n for n, _ in runner.decodes),
        },
        "scheduler": statistics,
        "memory": {
            "pool_bytes_per_position": bpp,
            "pool_capacity_positions": pool.capacity,
            "pool_reserved_bytes": pool.slots * pool.capacity * bpp,
            "peak_positions_per_stream": runner.peak_positions,
            "cache_bytes_per_stream": runner.peak_positions * bpp,
            "peak_live_streams": runner.peak_live,
            "peak_cache_bytes_all_streams": runner.peak_pool_positions * bpp,
            "rss_before_bytes": rss_before,
            "rss_pool_allocated_bytes": rss_with_pool - rss_before,
            "rss_peak_bytes": runner.peak_rss,
            "rss_peak_growth_bytes": runner.peak_rss - rss_before,
            "rss_growth_per_peak_stream_bytes": (runner.peak_rss - rss_before) / max(1, runner.peak_live),
        },
        "load": {
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
            # CPU time other processes used during the level, in cores (this one excluded)
            "other_processes_cores": other_cpu / wall,
            "other_processes_share": other_cpu / (wall * cores),
        },
    }


def markdown(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [
        f"XTTS ({results['voice']['layers']} layers x {results['voice']['model_dim']}) on CPU, "
        f"in-process Scheduler, {results['threads']} onnxruntime thread(s), at most "
        f"{results['max_codes']} codes a segment, {runs[0]['requests']} requests a level:",
        "",
        "| mode | concurrency | x real time | first chunk p50 | first chunk p99 | decode step by batch "
        "size (mean ms) | decoder share of wall | cache per stream | RSS growth (peak) | other load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        steps = ", ".join(f"{size}: {s['mean_ms']:.3g}" for size, s in r["decode_steps"].items())
        memory = r["memory"]
        cache, growth = memory["cache_bytes_per_stream"], memory["rss_peak_growth_bytes"]
        peak = memory["rss_peak_bytes"]
        lines.append(
            f"| {r['mode']} ({r['slots']} slot{'s' if r['slots'] > 1 else ''}) | {r['concurrency']} | "
            f"{r['x_real_time']:.3f} | {r['first_chunk_p50_s']:.2f} s | {r['first_chunk_p99_s']:.2f} s | "
            f"{steps} | {r['decoder']['share_of_wall']:.0%} | {cache / 2**20:.1f} MiB | "
            f"{growth / 2**20:.0f} MiB ({peak / 2**30:.2f} GiB) | "
            f"{r['load']['other_processes_cores']:.2f} cores |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    settings = shipped_settings()
    runner_threads = inspect.signature(XttsRunner).parameters["threads"].default
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--voice", type=Path, required=True, help="an exported XTTS voice folder")
    parser.add_argument("--requests", type=int, default=8, help="requests per level and mode")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--max-codes", type=int, help="codes per segment at most (default: the card's)")
    parser.add_argument("--threads", type=int, default=runner_threads, help="onnxruntime intra-op threads")
    parser.add_argument("--slots", type=int, default=settings["slots"], help="the batched mode's slots")
    parser.add_argument("--out", type=Path, default=Path("results/xtts/xtts.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not 1 <= args.requests <= len(SENTENCES):
        parser.error(f"--requests: 1 to {len(SENTENCES)} (one sentence each)")

    load_at_start = os.getloadavg()
    rss_start = rss_bytes()
    began = time.perf_counter()
    runner = TimedRunner(args.voice, args.threads)
    load_s = time.perf_counter() - began
    rss_runner = rss_bytes() - rss_start
    card_cap = runner.card.max_audio_tokens
    cap = card_cap if args.max_codes is None else max(1, min(args.max_codes, card_cap))
    # runner.pool() (the Scheduler's pool) and runner.start() read the cap from the card
    runner.card = dataclasses.replace(runner.card, max_audio_tokens=cap)
    text = XttsText(args.voice, runner.card)
    requests = [text.read(sentence, LANGUAGE) for sentence in SENTENCES[: args.requests]]

    began = time.perf_counter()
    conditioning = runner.conditioning(reference_clip(runner.card.conditioning_rate))
    conditioning_s = time.perf_counter() - began
    # warm-up (not measured): one whole segment, so that onnxruntime's first runs and the
    # decoder's buffers for a segment at the cap are not charged to the first level
    runner.synthesise(requests[0][0], conditioning, runner.card.sampling, seed=0)
    rss_warm = rss_bytes()

    runs = []
    for concurrency in args.concurrency:
        for slots in (args.slots, 1):
            log.info("concurrency %d, %d slot(s), %d requests", concurrency, slots, args.requests)
            run = run_level(runner, requests, conditioning, settings, slots, concurrency)
            log.info(
                "x real time %.3f, first chunk p50 %.2f s, wall %.1f s",
                run["x_real_time"], run["first_chunk_p50_s"], run["wall_s"],
            )  # fmt: skip
            runs.append(run)

    card = runner.card
    others = [run["load"]["other_processes_cores"] for run in runs]
    results: dict[str, Any] = {
        **stamp(),
        "voice": {
            "folder": str(args.voice),
            "name": card.name,
            "layers": card.layers,
            "heads": card.heads,
            "model_dim": card.model_dim,
            "card_max_audio_tokens": card_cap,
        },
        "max_codes": cap,
        "threads": args.threads,
        "threads_note": ("XttsRunner's default" if args.threads == runner_threads else "--threads")
        + f"; the served model's config sets {settings['served_threads']}",
        "scheduler_settings": {
            "slots": args.slots,
            "chunk_codes": settings["chunk_codes"],
            "overlap": settings["overlap"],
        },
        "sampling": dataclasses.asdict(card.sampling),
        "language": LANGUAGE,
        "reference_seconds": REFERENCE_SECONDS,
        "segments_text_ids": [[len(s) for s in segments] for segments in requests],
        "load_runner_s": load_s,
        "rss_runner_bytes": rss_runner,  # the four graphs and the tables, loaded
        "rss_after_warm_up_bytes": rss_warm,
        "rss_at_end_bytes": rss_bytes(),
        "conditioning_s": conditioning_s,
        "cores": available_cores(),
        "loadavg_at_start": list(load_at_start),
        "shared_machine": bool(max(others, default=0.0) > 0.25 or load_at_start[0] > 0.5),
        "shared_machine_note": "other processes used CPU during the run: figures are from a shared machine"
        if max(others, default=0.0) > 0.25 or load_at_start[0] > 0.5
        else "no other load seen",
        "runs": runs,
    }
    write_report(args.out, results, [markdown(results)])
    return results


if __name__ == "__main__":
    main()
