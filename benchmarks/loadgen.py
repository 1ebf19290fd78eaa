"""Closed-loop load: N threads each sending the sentence set, for every peer alike."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from testkit.sample_texts import SENTENCES
from triton_tts.client import TTSClient


def load(call: Callable[[str], float], concurrency: int, rounds: int) -> dict[str, float]:
    """``call(text) -> seconds of audio``, from ``concurrency`` threads; throughput and latency."""
    latencies: list[float] = []
    audio = [0.0]
    lock = threading.Lock()

    def worker(offset: int) -> None:
        for r in range(rounds):
            for i in range(len(SENTENCES)):
                text = SENTENCES[(i + offset + r) % len(SENTENCES)]
                start = time.perf_counter()
                seconds = call(text)
                with lock:
                    latencies.append(time.perf_counter() - start)
                    audio[0] += seconds

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {
        "x_real_time": audio[0] / wall,
        "p50_s": float(np.percentile(latencies, 50)),
        "p99_s": float(np.percentile(latencies, 99)),
        "requests": len(latencies),
    }


def triton_call(url: str, protocol: str) -> Callable[[str], float]:
    local = threading.local()

    def call(text: str) -> float:
        if not hasattr(local, "client"):
            local.client = TTSClient(url, protocol)  # type: ignore[arg-type]
        return float(local.client.synthesize(text).duration_s)

    return call
