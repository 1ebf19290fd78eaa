"""Text in as an LLM writes it: first audio after the first sentence's last piece, on the
gateway's WebSocket text stream, side by side with ``speak`` of that sentence alone.

Each text is two sentences of the sample set, sent in pieces of ``--piece-chars``
characters at ``--pieces-per-s`` (an LLM's pace), then ``end``. Measured from the moment the
piece holding the first sentence's end mark is sent to the first binary frame: the stream
settles the sentence when the next word begins (one piece later), so this includes one
piece's wait. The baseline sends the first sentence whole in one ``speak`` and measures to
its first frame. One socket at a time, shipped settings.

    python -m benchmarks.text_stream                # own server and gateway, free ports
    python -m benchmarks.text_stream --texts 2      # smoke

Writes results/text_stream.json and .md, stamped (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from websockets.sync.client import connect

from benchmarks.gateway import server_and_gateway
from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import SENTENCES


def ws_url(gateway: str) -> str:
    return gateway.replace("http://", "ws://") + "/v1/audio/speech/ws"


def streamed(
    gateway: str, first: str, second: str, piece_chars: int, pieces_per_s: float
) -> dict[str, float]:
    """One text stream: seconds from the first sentence's last piece to the first audio,
    and from ``end`` to the stream's ``end``."""
    text = f"{first} {second}"
    pieces = [text[i : i + piece_chars] for i in range(0, len(text), piece_chars)]
    last_of_first = (len(first) - 1) // piece_chars  # the piece with its end mark
    sent_at: dict[str, float] = {}
    heard: dict[str, float] = {}
    with connect(ws_url(gateway), open_timeout=30) as ws:

        def receive() -> None:
            while True:
                message = ws.recv(timeout=600)
                if isinstance(message, bytes):
                    heard.setdefault("first_audio", time.perf_counter())
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    raise RuntimeError(event["error"]["message"])
                if event["type"] == "end":
                    heard["end"] = time.perf_counter()
                    return

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        for index, piece in enumerate(pieces):
            ws.send(json.dumps({"type": "append", "text": piece}))
            if index == last_of_first:
                sent_at["first_sentence"] = time.perf_counter()
            time.sleep(1 / pieces_per_s)
        ws.send(json.dumps({"type": "end"}))
        sent_at["end"] = time.perf_counter()
        receiver.join(600)
    return {
        "first_audio_after_sentence_s": heard["first_audio"] - sent_at["first_sentence"],
        "end_after_end_s": heard["end"] - sent_at["end"],
    }


def spoken_whole(gateway: str, sentence: str) -> float:
    """``speak`` of the sentence alone: seconds to its first binary frame."""
    with connect(ws_url(gateway), open_timeout=30) as ws:
        start = time.perf_counter()
        ws.send(json.dumps({"type": "speak", "input": sentence}))
        first = 0.0
        while True:
            message = ws.recv(timeout=600)
            if isinstance(message, bytes):
                first = first or time.perf_counter() - start
            elif json.loads(message)["type"] in ("end", "error"):
                return first


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=len(SENTENCES), help="two-sentence texts to send")
    parser.add_argument("--piece-chars", type=int, default=4, help="characters per append (about a token)")
    parser.add_argument("--pieces-per-s", type=float, default=40.0, help="an LLM's pace")
    parser.add_argument("--url-grpc", help="a running Triton's gRPC address (with --gateway)")
    parser.add_argument("--gateway", help="a running gateway's base URL, e.g. http://localhost:8080")
    parser.add_argument("--out", type=Path, default=Path("results/text_stream.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with ExitStack() as stack:
        _, gateway, _ = server_and_gateway(stack, args.url_grpc, args.gateway)
        spoken_whole(gateway, SENTENCES[0])  # warm
        runs, wholes = [], []
        for i in range(args.texts):  # one after the other: one socket at a time
            first, second = SENTENCES[i % len(SENTENCES)], SENTENCES[(i + 1) % len(SENTENCES)]
            runs.append(streamed(gateway, first, second, args.piece_chars, args.pieces_per_s))
            wholes.append(spoken_whole(gateway, first))
    after = [r["first_audio_after_sentence_s"] for r in runs]
    results: dict[str, Any] = {
        **stamp(),
        "texts": args.texts,
        "piece_chars": args.piece_chars,
        "pieces_per_s": args.pieces_per_s,
        "first_audio_after_sentence_p50_s": float(np.percentile(after, 50)),
        "first_audio_after_sentence_p90_s": float(np.percentile(after, 90)),
        "first_audio_after_sentence_max_s": float(max(after)),
        "speak_first_audio_p50_s": float(np.percentile(wholes, 50)),
        "speak_first_audio_p90_s": float(np.percentile(wholes, 90)),
        "end_after_end_p50_s": float(np.percentile([r["end_after_end_s"] for r in runs], 50)),
        "runs": runs,
    }
    write_report(args.out, results, tables(results))
    return results


def tables(results: dict[str, Any]) -> list[str]:
    r = results
    return [
        "\n".join(
            [
                f"{r['texts']} two-sentence texts, {r['piece_chars']}-character pieces at "
                f"{r['pieces_per_s']:g}/s, one socket; seconds:",
                "",
                "| measure | p50 | p90 |",
                "|---|---|---|",
                "| text stream: first audio after the first sentence's last piece | "
                f"{r['first_audio_after_sentence_p50_s']:.3f} | "
                f"{r['first_audio_after_sentence_p90_s']:.3f} |",
                f"| speak of that sentence whole: first audio | {r['speak_first_audio_p50_s']:.3f} | "
                f"{r['speak_first_audio_p90_s']:.3f} |",
            ]
        )
    ]


if __name__ == "__main__":
    main()
