"""Requests of different lengths share executions when the CPU stages batch what is
queued, and batching does not change results; by default each CPU instance takes one
request per execution, also under a backlog."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.helpers import DETERMINISTIC, model_counts, tts_inputs
from triton_tts.build.model_configs import BuildOptions
from triton_tts.ops.server import TritonServer, default_voice_server

pytestmark = pytest.mark.server  # its own servers (module fixtures)

MIXED = [
    "Yes.",
    "Good morning, how are you?",
    "The meeting has moved to the third floor conference room.",
    "Please remember to bring your badge, because the front desk will not let you in without it.",
    "Okay.",
    "Our store opens at nine and closes at six on weekdays.",
    "Thanks!",
    "If the package does not arrive by Friday, call us and we will send a replacement at no cost.",
    "Turn right.",
    "The quarterly report shows steady growth in every region except the north.",
    "See you soon.",
    "Music, books and films are all on the second shelf.",
]
BATCH_ATOL = 2e-4  # padded batch vs batch 1: float rounding only


STAGES = ("preprocess", "acoustic", "vocoder", "postprocess")


def all_at_once(
    http: httpclient.InferenceServerClient, inside: dict[str, str]
) -> tuple[list[Any], dict[str, tuple[int, int]]]:
    """MIXED sent together through the ensemble: the audio, and each stage's (inferences,
    executions) for them. (Its stages admit 32 waiting; tts admits 4 + 8 texts, one per
    instance, which leaves the stages too little backlog to batch reliably.)"""
    before = {m: model_counts(http, m) for m in STAGES}
    pending = [
        http.async_infer("tts_chunk", tts_inputs(httpclient, t, **DETERMINISTIC), parameters=inside)
        for t in MIXED
    ]
    audio = [p.get_result().as_numpy("AUDIO").reshape(-1) for p in pending]
    after = {m: model_counts(http, m) for m in STAGES}
    counts = {m: (after[m][0] - before[m][0], after[m][1] - before[m][1]) for m in STAGES}
    for model, (inferences, executions) in counts.items():
        assert inferences == len(MIXED), model
        assert executions <= inferences, model
    return audio, counts


@pytest.fixture(scope="module")
def batching(voice_dir: Path) -> Iterator[TritonServer]:
    """CPU stages that batch whatever is queued (no preferred size)."""
    with default_voice_server(
        voice_dir=voice_dir, options=replace(BuildOptions(), cpu_preferred_batch_sizes=())
    ) as s:
        yield s


def test_mixed_lengths_are_batched_and_match_unbatched(batching: TritonServer) -> None:
    http = httpclient.InferenceServerClient(batching.http_url, concurrency=len(MIXED), network_timeout=300)
    try:
        unbatched = []
        for text in MIXED:  # one at a time: each runs alone
            result = http.infer(
                "tts_chunk",
                tts_inputs(httpclient, text, **DETERMINISTIC),
                parameters=batching.internal_parameters(),
            )
            unbatched.append(result.as_numpy("AUDIO").reshape(-1))
        batched, counts = all_at_once(http, batching.internal_parameters())
    finally:
        http.close()
    # The expensive stages must really have batched requests of different lengths.
    for model in ("acoustic", "vocoder"):
        assert counts[model][1] < len(MIXED), (
            f"{model}: {counts[model][1]} executions for {len(MIXED)} requests"
        )
    for text, alone, together in zip(MIXED, unbatched, batched, strict=True):
        assert alone.shape == together.shape, text
        np.testing.assert_allclose(together, alone, atol=BATCH_ATOL, err_msg=text)


def test_by_default_each_cpu_instance_takes_one_request_at_a_time_also_under_a_backlog(
    server: TritonServer, http: httpclient.InferenceServerClient
) -> None:
    """Triton's batcher keeps the preferred size (1) only while no request has waited past
    the queue delay; with a delay, a backlog went to one instance as one batch while the
    other sat idle (model_configs._batching). The defaults wait 0."""
    _, counts = all_at_once(http, server.internal_parameters())
    for model in ("acoustic", "vocoder"):
        assert counts[model][1] == len(MIXED), (
            f"{model}: {counts[model][1]} executions for {len(MIXED)} requests"
        )
