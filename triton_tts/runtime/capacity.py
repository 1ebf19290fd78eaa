"""A voice's capacity, measured once on the warm server at start (serve's start-up, before
readiness): a burst of sentences through the voice's ``tts_chunk``, audio over wall time,
and per stage the audio over the busy time Triton's statistics give. Admission
(:mod:`triton_tts.runtime.admission`) starts from what this measures."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping

CAPACITY_TEXT = "Thank you for calling. Your order has shipped and will arrive on Tuesday."
CAPACITY_TEXT_CHINESE = "感谢您的来电，您的订单已经发货，预计星期二送达。"


def measure_capacity(
    grpc_url: str,
    voices: Mapping[str, tuple[str, bool, list[str]]],
    concurrency: int = 0,
    headers: Mapping[str, str] | None = None,
    parameters: Mapping[str, str] | None = None,
) -> dict[str, tuple[float, dict[str, float]]]:
    """Each voice's capacity, measured on the warm server: ``concurrency`` sentences at once
    (twice the cores by default, so every stage instance stays busy), twice, through the
    voice's ``tts_chunk``; audio made over the wall time, the best of
    :data:`CAPACITY_PASSES` passes. Per stage, the audio over the
    busy time Triton's statistics give (audio seconds per second per instance).
    ``voices``: name -> (tts_chunk model, is Chinese, stage models); ``headers``: the keys
    (gRPC metadata) the server's restricted APIs need; ``parameters``: the internal models'
    token (triton_tts/runtime/internal.py)."""
    count = concurrency or max(8, 2 * (os.cpu_count() or 2))
    return {
        voice: _measure_voice(
            grpc_url,
            model,
            CAPACITY_TEXT_CHINESE if chinese else CAPACITY_TEXT,
            stages,
            count,
            dict(headers or {}),
            dict(parameters or {}),
        )
        for voice, (model, chinese, stages) in voices.items()
    }


RETRIES = 100  # of a sentence the stages refused for a full queue, 50 ms apart
CAPACITY_PASSES = 2
# A pass this long is its own average: a slow voice (Kokoro: ~40 s a pass on 2 cores) is
# measured once, so that serving it does not add minutes to start-up.
CAPACITY_LONG_PASS_S = 10.0
# A sentence's deadline within the burst (seconds here): a request lost with a killed stub
# fails the measurement, which the server retries, instead of holding start-up.
CAPACITY_REQUEST_TIMEOUT_S = 120.0


def _measure_voice(
    grpc_url: str,
    model: str,
    text: str,
    stages: list[str],
    count: int,
    headers: dict[str, str],
    parameters: dict[str, str],
) -> tuple[float, dict[str, float]]:
    import concurrent.futures

    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)

    def busy() -> dict[str, float]:
        stats = client.get_inference_statistics(headers=headers, as_json=True, client_timeout=30.0)
        stats = stats.get("model_stats", [])
        return {
            s["name"]: int(s["inference_stats"].get("compute_infer", {}).get("ns", 0)) / 1e9
            for s in stats
            if s["name"] in stages
        }

    def one(_: int) -> float:
        from tritonclient.utils import InferenceServerException

        own = grpcclient.InferenceServerClient(grpc_url)
        try:
            tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=np.object_))
            for attempt in itertools.count():
                try:
                    result = own.infer(
                        model,
                        [tensor],
                        headers=headers,
                        parameters=parameters or None,
                        client_timeout=CAPACITY_REQUEST_TIMEOUT_S,
                    )
                    break
                except InferenceServerException as err:  # a stage queue bounded below the burst
                    if "StatusCode.UNAVAILABLE" not in str(err.status()) or attempt >= RETRIES:
                        raise
                    time.sleep(0.05)
            rate = int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
            return float(result.as_numpy("AUDIO").size / rate)
        finally:
            own.close()

    def measured_pass() -> tuple[float, dict[str, float]]:
        before = busy()
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            audio = sum(pool.map(one, range(2 * count)))
        wall = time.monotonic() - started
        after = busy()
        per_stage = {
            stage: audio / (after[stage] - before.get(stage, 0.0))
            for stage in stages
            if after.get(stage, 0.0) > before.get(stage, 0.0)
        }
        return audio / wall, per_stage

    try:
        # The best of the passes: what else runs on the machine at start only ever slows a
        # pass down, and a capacity measured low refuses work the server would have done.
        started = time.monotonic()
        passes = [measured_pass()]
        if time.monotonic() - started < CAPACITY_LONG_PASS_S:
            passes += [measured_pass() for _ in range(CAPACITY_PASSES - 1)]
        return max(passes, key=lambda m: m[0])
    finally:
        client.close()
