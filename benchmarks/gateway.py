"""What the OpenAI-compatible gateway costs: time to first audio and whole-request latency
through it, side by side with tritonclient gRPC straight to Triton, in one run.

Per concurrency level, each path runs the same requests, one path after the other (for
first audio the caller leaves after it, cancelling the stream: paced to playback, a
paragraph's stream would last about as long as its audio):
  grpc       tts_stream with triton_tts.client (first chunk; the baseline)
  http-pcm   POST /v1/audio/speech, response_format pcm (first body bytes)
  http-mp3   the same in MP3 (the encoder's first frame)
  websocket  /v1/audio/speech/ws (first binary frame)
  riva       Riva's SynthesizeOnline through nvidia-riva-client, at the voice's rate
             (triton_tts.gateway.riva: the NVIDIA plugins of Pipecat and LiveKit use it)
on a ~600-character paragraph (first audio) and on short sentences (whole request).

    python -m benchmarks.gateway                         # own server and gateway, free ports
    python -m benchmarks.gateway --levels 1 --rounds 1   # smoke
    python -m benchmarks.gateway --url-grpc localhost:8001 --gateway http://localhost:8080 \
        --riva localhost:50051                           # a running one (riva: left out without)

Writes results/gateway.json and .md, stamped (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
from websockets.sync.client import connect

from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import PARAGRAPH, SENTENCES
from triton_tts.client import TTSClient

PATHS = ("grpc", "http-pcm", "http-mp3", "websocket", "riva")
SETTLE_S = 1.0  # after a burst of left streams: their cancellation reaches the model


def p(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


Call = Callable[[str, bool], tuple[float, float]]


def timed(grpc_url: str, gateway: str, riva_url: str | None = None) -> dict[str, Call]:
    """Per path: (text, first audio only) -> (seconds to first audio, seconds to the end).
    First audio only: the caller leaves after it (the stream is cancelled), as a paced
    stream of a paragraph would otherwise last about as long as its audio."""
    local = threading.local()

    def grpc(text: str, first_only: bool) -> tuple[float, float]:
        if not hasattr(local, "client"):
            local.client = TTSClient(grpc_url, "grpc")
        start, first = time.perf_counter(), 0.0
        for _chunk in local.client.stream(text):
            first = first or time.perf_counter() - start
            if first_only:
                break
        return first, time.perf_counter() - start

    def http(response_format: str) -> Call:
        def call(text: str, first_only: bool) -> tuple[float, float]:
            body = json.dumps({"model": "tts-1", "input": text, "response_format": response_format}).encode()
            start = time.perf_counter()
            request = urllib.request.Request(f"{gateway}/v1/audio/speech", data=body)  # noqa: S310 - an http:// URL this code builds
            with urllib.request.urlopen(request, timeout=600) as response:  # noqa: S310 - an http:// URL this code builds
                response.read(1)
                first = time.perf_counter() - start
                if not first_only:
                    response.read()
            return first, time.perf_counter() - start

        return call

    def websocket(text: str, first_only: bool) -> tuple[float, float]:
        url = gateway.replace("http://", "ws://") + "/v1/audio/speech/ws"
        start, first = time.perf_counter(), 0.0
        with connect(url) as ws:
            ws.send(json.dumps({"type": "speak", "input": text}))
            while True:
                message = ws.recv(timeout=600)
                if isinstance(message, bytes):
                    first = first or time.perf_counter() - start
                    if first_only:
                        return first, first
                elif json.loads(message)["type"] in ("end", "error"):
                    return first, time.perf_counter() - start

    def riva(text: str, first_only: bool) -> tuple[float, float]:
        import riva.client

        if not hasattr(local, "riva"):
            local.riva = riva.client.SpeechSynthesisService(riva.client.Auth(uri=riva_url))
        start, first = time.perf_counter(), 0.0
        answers = local.riva.synthesize_online(text, sample_rate_hz=0)
        for _answer in answers:
            first = first or time.perf_counter() - start
            if first_only:
                answers.cancel()
                break
        return first, time.perf_counter() - start

    calls = {"grpc": grpc, "http-pcm": http("pcm"), "http-mp3": http("mp3"), "websocket": websocket}
    return {**calls, "riva": riva} if riva_url else calls


def level(calls: dict[str, Call], concurrency: int, rounds: int) -> dict[str, Any]:
    count = concurrency * rounds
    short = [SENTENCES[i % len(SENTENCES)] for i in range(count)]
    out: dict[str, Any] = {"concurrency": concurrency, "requests": count}
    for name in (n for n in PATHS if n in calls):
        call, firsts = calls[name], []
        with ThreadPoolExecutor(concurrency) as pool:
            # first audio: bursts of `concurrency` streams starting together; the streams
            # they leave are cancelled, and the server is given a moment to notice
            for _ in range(rounds):
                firsts += [f for f, _ in pool.map(call, [PARAGRAPH] * concurrency, [True] * concurrency)]
                time.sleep(SETTLE_S)
            wholes = [t for _, t in pool.map(call, short, [False] * count)]
        out[name] = {
            "first_audio_p50_s": p(firsts, 50),
            "first_audio_p99_s": p(firsts, 99),
            "short_whole_p50_s": p(wholes, 50),
            "short_whole_p99_s": p(wholes, 99),
        }
    return out


def server_and_gateway(
    stack: ExitStack, grpc_url: str | None, gateway: str | None, riva: str | None = None
) -> tuple[str, str, str | None]:
    """The running Triton and gateway given, or an own server (default build options) and
    gateway on free ports, stopped with ``stack``: their gRPC address, base URL and Riva
    address (a running gateway's only when given)."""
    if grpc_url and gateway:
        return grpc_url, gateway, riva
    from triton_tts.gateway.command import start_child, wait_live
    from triton_tts.ops.server import default_voice_server, free_port

    server = stack.enter_context(default_voice_server())
    port, riva_port = free_port(), free_port()
    child = start_child(port, server.grpc_url, ["--riva-port", str(riva_port)])
    stack.callback(child.wait, 60)
    stack.callback(child.terminate)
    wait_live(port, child)
    return server.grpc_url, f"http://localhost:{port}", f"localhost:{riva_port}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--rounds", type=int, default=4, help="requests per client thread and path")
    parser.add_argument("--url-grpc", help="a running Triton's gRPC address (with --gateway)")
    parser.add_argument("--gateway", help="a running gateway's base URL, e.g. http://localhost:8080")
    parser.add_argument("--riva", help="a running gateway's Riva address, e.g. localhost:50051")
    parser.add_argument("--out", type=Path, default=Path("results/gateway.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with ExitStack() as stack:
        grpc_url, gateway, riva = server_and_gateway(stack, args.url_grpc, args.gateway, args.riva)
        calls = timed(grpc_url, gateway, riva)
        for call in calls.values():  # warm every path once
            call(SENTENCES[0], False)
        results: dict[str, Any] = {
            **stamp(),
            "paragraph_chars": len(PARAGRAPH),
            "levels": [level(calls, c, args.rounds) for c in args.levels],
        }
    write_report(args.out, results, tables(results))
    return results


def tables(results: dict[str, Any]) -> list[str]:
    lines = [
        f"First audio of a {results['paragraph_chars']}-character paragraph, and whole short sentences "
        "(8 mixed, 1-7 s of audio), p50 / p99 in seconds:",
        "",
        "| concurrency | path | first audio p50 | p99 | short sentence p50 | p99 |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["levels"]:
        for name in (n for n in PATHS if n in r):
            x = r[name]
            keys = ("first_audio_p50_s", "first_audio_p99_s", "short_whole_p50_s", "short_whole_p99_s")
            lines.append(f"| {r['concurrency']} | {name} | " + " | ".join(f"{x[k]:.3f}" for k in keys) + " |")
    return ["\n".join(lines)]


if __name__ == "__main__":
    main()
