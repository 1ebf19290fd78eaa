"""Dubbing a long subtitle file: wall time, x real time, and how the cues fit, with the
shipped concurrency (8) against serial (1), measured side by side on one server.

The subtitle file is generated, seeded: ``--cues`` cues over ``--minutes`` (default 800
over an hour), each a sentence drawn from a pool, or two (3 in 10) where they fit in two
subtitle lines (84 characters), timed as subtitlers time
speech: its slot at a reading rate drawn from 12-20 characters a second (broadcast
guidelines sit at 15-17), a gap after it, the whole spread to fill the hour. So some
slots are roomy, some need speeding up and a few cannot be met: the shares are part of
the result. Both runs dub the same file with the real ``Dubber`` and ``TTSClient`` (the
command's code), at the shipped settings (``--max-speed`` 1.25).

    python -m benchmarks.dub                       # starts its own server on free ports
    python -m benchmarks.dub --url localhost:8001  # a running server (gRPC)
    python -m benchmarks.dub --minutes 1 --cues 8  # smoke run

Writes results/dub.json and .md, stamped (benchmarks/stamp.py).
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
from triton_tts.client import SynthesisResult, TTSClient
from triton_tts.client.dubbing import Dubber
from triton_tts.client.subtitles import Cue
from triton_tts.client.sync_client import PerThreadClients

POOL = [
    *SENTENCES,
    "I told you we should have left before the rain started.",
    "Nobody answered the door, so we waited in the car.",
    "The meeting has been moved to Friday at half past nine.",
    "Look at the map again; the bridge should be right here.",
    "He never said a word about the letter until the very end.",
    "Keep your voice down, the children are finally asleep.",
    "We can fix the engine tomorrow if the parts arrive in time.",
    "That is the last time I lend him my bicycle.",
    "Why did nobody tell me the shop closes early on Sundays?",
    "Come on, we are going to miss the beginning of the film.",
    "Yes.",
    "Of course not.",
]


MAX_CUE_CHARS = 84  # two lines of 42, the common subtitle guideline


def subtitle_cues(count: int, minutes: float, seed: int) -> list[Cue]:
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):  # a cue is one or two subtitle lines: at most 84 characters
        text = str(rng.choice(POOL))
        second = str(rng.choice(POOL))
        if rng.random() < 0.3 and len(text) + 1 + len(second) <= MAX_CUE_CHARS and second != text:
            text = f"{text} {second}"
        texts.append(text)
    slots = np.array([len(t) / rng.uniform(12.0, 20.0) for t in texts])
    gaps = rng.exponential(1.0, size=count)
    spare = minutes * 60 - slots.sum()
    gaps *= max(spare, 0.1 * count) / gaps.sum()  # the gaps fill the rest of the span
    cues, at = [], 0.0
    for i, (text, slot, gap) in enumerate(zip(texts, slots, gaps, strict=True)):
        start = round(at + gap, 3)
        end = round(start + slot, 3)
        cues.append(Cue(i + 1, i + 1, start, end, text))
        at = end
    return cues


def run(url: str, cues: list[Cue], concurrency: int) -> dict[str, Any]:
    client = PerThreadClients(lambda: TTSClient(url, "grpc"))
    calls = [0]

    def synthesize(text: str, speed: float) -> SynthesisResult:
        calls[0] += 1
        return client().synthesize(text, speed=speed)

    start = time.perf_counter()
    dub = Dubber(synthesize, concurrency=concurrency).dub(cues)
    wall = time.perf_counter() - start
    client.close()
    speech = sum(c.end - c.start for c in dub.cues)
    summary = dub.summary()
    return {
        "concurrency": concurrency,
        "wall_s": round(wall, 1),
        "track_s": round(dub.duration_s, 1),
        "speech_s": round(speech, 1),
        "x_real_time_track": round(dub.duration_s / wall, 2),
        "x_real_time_speech": round(speech / wall, 2),
        "takes": calls[0],
        **{k: summary[k] for k in ("cues", "fits", "sped_up", "overrun", "cut")},
    }


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Dub of {results['cues']} cues over {results['minutes']:g} min (seed {results['seed']}), "
        "gRPC, shipped settings:",
        "",
        "| concurrency | wall | x real time (track) | x real time (speech) | takes | fit as timed | sped up "
        "| overrun | cut |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        n = r["cues"]
        lines.append(
            f"| {r['concurrency']} | {r['wall_s']:.0f} s | {r['x_real_time_track']:.1f} | "
            f"{r['x_real_time_speech']:.1f} | {r['takes']} | {r['fits'] / n:.1%} | {r['sped_up'] / n:.1%} | "
            f"{r['overrun'] / n:.1%} | {r['cut'] / n:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="running server, gRPC (default: start one on free ports)")
    parser.add_argument("--cues", type=int, default=800)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 1], help="the runs, in order")
    parser.add_argument("--out", type=Path, default=Path("results/dub.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cues = subtitle_cues(args.cues, args.minutes, args.seed)
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from triton_tts.ops.server import default_voice_server

            url = stack.enter_context(default_voice_server()).grpc_url
        with TTSClient(url, "grpc") as client:
            client.synthesize(POOL[0])  # connection set-up is not dubbing time
        runs = [run(url, cues, concurrency) for concurrency in args.concurrency]
    results = {**stamp(), "cues": args.cues, "minutes": args.minutes, "seed": args.seed, "runs": runs}
    write_report(args.out, results, [markdown(results)])
    return results


if __name__ == "__main__":
    main()
