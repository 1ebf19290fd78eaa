"""Word timestamp accuracy, per voice: each served voice that has word timestamps says
held-out sentences with TIMESTAMPS, and each word's start is compared with where
pocketsphinx's forced alignment of the same audio (``Decoder.seg()``) starts it.

    python -m benchmarks.timestamps                      # the default voice, served here
    python -m benchmarks.timestamps --url-grpc host:8001 # a running server: all its timed voices

Per voice: the median and 90th-percentile start error (ms), the mean signed offset (ours
minus the recogniser's: positive is late), and the sentences it could not align. The
sentences were not used when the timing rules were set. Writes results/timestamps.json
and .md, stamped (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.stamp import stamp, write_report
from triton_tts.client import TTSClient
from triton_tts.intelligibility import word_starts

# Held out: none of these was used while the timing rules were set (tests/test_timestamps.py
# holds five others).
SENTENCES = [
    "The old lighthouse keeper climbed the stairs every evening at sunset.",
    "Our train was delayed by forty minutes because of snow on the tracks.",
    "She planted tomatoes, beans and peppers in the small garden behind the house.",
    "Please remember to bring your passport and a printed copy of the ticket.",
    "The museum reopened last spring after two years of careful restoration.",
    "A quiet breeze moved through the tall grass beside the river.",
    "He repaired the bicycle himself and rode it to work the next morning.",
    "Thousands of people gathered in the square to watch the fireworks.",
]


def measure(url: str, voice: str, sentences: list[str]) -> dict[str, Any]:
    errors: list[float] = []
    offsets: list[float] = []
    unaligned: list[str] = []
    with TTSClient(url, "grpc") as client:
        for text in sentences:
            result = client.synthesize(text, voice=voice, timestamps=True, noise_scale=0.0, noise_w=0.0)
            heard = word_starts(result.audio, result.sample_rate, text)
            if heard is None or len(heard) != len(result.words):
                unaligned.append(text)
                continue
            for word, aligned in zip(result.words, heard, strict=True):
                errors.append(abs(word.start - aligned))
                offsets.append(word.start - aligned)
    return {
        "voice": voice,
        "sentences": len(sentences),
        "words": len(errors),
        "median_start_error_ms": 1000 * float(np.median(errors)) if errors else None,
        "p90_start_error_ms": 1000 * float(np.percentile(errors, 90)) if errors else None,
        "mean_offset_ms": 1000 * float(np.mean(offsets)) if offsets else None,
        "unaligned": unaligned,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url-grpc", help="a running Triton's gRPC address (default: serve one here)")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--out", type=Path, default=Path("results/timestamps.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with ExitStack() as stack:
        url = args.url_grpc
        if url is None:
            from triton_tts.server import default_voice_server

            url = stack.enter_context(default_voice_server()).grpc_url
        grpcclient.InferenceServerClient(url).is_server_ready()
        with TTSClient(url, "grpc") as client:
            timed = [v.name for v in client.voices() if v.timestamps]
        voices = [measure(url, name, SENTENCES[: args.sentences]) for name in timed]
    results: dict[str, Any] = {**stamp(), "voices": voices}
    write_report(args.out, results, tables(results))
    return results


def tables(results: dict[str, Any]) -> list[str]:
    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}"

    rows = [
        f"| {v['voice']} | {v['words']} | {ms(v['median_start_error_ms'])} | {ms(v['p90_start_error_ms'])} "
        f"| {ms(v['mean_offset_ms'])} | {len(v['unaligned'])} |"
        for v in results["voices"]
    ]
    return [
        "\n".join(
            [
                "Word start error against pocketsphinx's forced alignment (ms; offset: ours minus its, "
                "positive is late):",
                "",
                "| voice | words | median | p90 | mean offset | sentences not aligned |",
                "|---|---|---|---|---|---|",
                *rows,
            ]
        )
    ]


if __name__ == "__main__":
    main()
