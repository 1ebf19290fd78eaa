"""Word timestamp accuracy, per voice: each served voice that has word timestamps says
held-out sentences with TIMESTAMPS, and each word's start is compared with where
pocketsphinx's forced alignment of the same audio (``Decoder.seg()``) starts it; for
Mandarin voices, with Whisper's word timestamps (triton_tts.quality.intelligibility.
mandarin_word_starts: words that begin at the same character; a sentence's first word is
left out, since Whisper starts it at the audio's start whatever the silence before it).

    python -m benchmarks.timestamps                      # the default voice, served here
    python -m benchmarks.timestamps --voice voices/joe --voice voices/baker
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
from triton_tts.quality.intelligibility import mandarin_word_starts, word_starts
from triton_tts.text.frontend import is_chinese

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
# Held out for Mandarin voices likewise (tests/test_mandarin_serving.py holds others).
SENTENCES_ZH = [
    "图书馆周末开放到晚上九点，欢迎同学们来自习。",
    "我的邻居养了一只小狗，每天早上都带它去散步。",
    "这座桥建成以后，过江只需要十分钟。",
    "妈妈在厨房里做饭，爸爸在客厅看报纸。",
    "下个月我们要去南方旅行，顺便看望爷爷奶奶。",
    "比赛结束的时候，观众们站起来热烈鼓掌。",
    "雨停了以后，天边出现了一道美丽的彩虹。",
    "医生建议他多喝水，早点休息。",
]


def measure(url: str, voice: str, sentences: list[str], chinese: bool = False) -> dict[str, Any]:
    errors: list[float] = []
    offsets: list[float] = []
    unaligned: list[str] = []
    with TTSClient(url, "grpc") as client:
        for text in sentences:
            result = client.synthesize(text, voice=voice, timestamps=True, noise_scale=0.0, noise_w=0.0)
            words = [w.word for w in result.words]
            if chinese:
                found = mandarin_word_starts(result.audio, result.sample_rate, words)
                pairs = [
                    (w.start, h) for w, h in zip(result.words[1:], found[1:], strict=True) if h is not None
                ]
            else:
                heard = word_starts(result.audio, result.sample_rate, text)
                ok = heard is not None and len(heard) == len(result.words)
                pairs = [(w.start, h) for w, h in zip(result.words, heard or [], strict=True)] if ok else []
            if not pairs:
                unaligned.append(text)
            errors.extend(abs(ours - theirs) for ours, theirs in pairs)
            offsets.extend(ours - theirs for ours, theirs in pairs)
    return {
        "voice": voice,
        "reference": "whisper-base word timestamps" if chinese else "pocketsphinx seg()",
        "sentences": len(sentences),
        "words": len(errors),
        "median_start_error_ms": 1000 * float(np.median(errors)) if errors else None,
        "p90_start_error_ms": 1000 * float(np.percentile(errors, 90)) if errors else None,
        "mean_offset_ms": 1000 * float(np.mean(offsets)) if offsets else None,
        # Agreement up to one constant lag (Whisper's word timestamps run early): the median
        # distance of each offset from the median offset.
        "median_error_less_lag_ms": 1000 * float(np.median(np.abs(np.subtract(offsets, np.median(offsets)))))
        if offsets
        else None,
        "unaligned": unaligned,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url-grpc", help="a running Triton's gRPC address (default: serve one here)")
    parser.add_argument(
        "--voice", action="append", type=Path, help="a voice folder to serve here (repeatable)"
    )
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--out", type=Path, default=Path("results/timestamps.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with ExitStack() as stack:
        url = args.url_grpc
        if url is None:
            from triton_tts.ops.server import default_voice_server

            url = stack.enter_context(default_voice_server(voice_dir=args.voice)).grpc_url
        grpcclient.InferenceServerClient(url).is_server_ready()
        with TTSClient(url, "grpc") as client:
            timed = [(v.name, is_chinese(v.language)) for v in client.voices() if v.timestamps]
        voices = [
            measure(url, name, (SENTENCES_ZH if chinese else SENTENCES)[: args.sentences], chinese)
            for name, chinese in timed
        ]
    results: dict[str, Any] = {**stamp(), "voices": voices}
    write_report(args.out, results, tables(results))
    return results


def tables(results: dict[str, Any]) -> list[str]:
    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}"

    rows = [
        f"| {v['voice']} | {v.get('reference', 'pocketsphinx seg()')} | {v['words']} "
        f"| {ms(v['median_start_error_ms'])} | {ms(v['p90_start_error_ms'])} "
        f"| {ms(v.get('median_error_less_lag_ms'))} "
        f"| {ms(v['mean_offset_ms'])} | {len(v['unaligned'])} |"
        for v in results["voices"]
    ]
    return [
        "\n".join(
            [
                "Word start error against an offline recogniser's alignment (ms; offset: ours minus its, "
                "positive is late):",
                "",
                "| voice | against | words | median | p90 | median less the lag | mean offset "
                "| sentences not aligned |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
    ]


if __name__ == "__main__":
    main()
