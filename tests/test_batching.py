"""Requests of different lengths share executions, and batching does not change results."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from tests.helpers import DETERMINISTIC, model_counts, tts_inputs

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


def test_mixed_lengths_are_batched_and_match_unbatched(http: httpclient.InferenceServerClient) -> None:
    unbatched = []
    for text in MIXED:  # one at a time: each runs alone
        result = http.infer("tts_chunk", tts_inputs(httpclient, text, **DETERMINISTIC))
        unbatched.append(result.as_numpy("AUDIO").reshape(-1))

    before = {m: model_counts(http, m) for m in ("preprocess", "acoustic", "vocoder", "postprocess")}
    # All at once through the ensemble (its stages admit 32 waiting; tts admits 4 + 8 texts,
    # one per instance, which leaves the stages too little backlog to batch reliably).
    pending = [http.async_infer("tts_chunk", tts_inputs(httpclient, t, **DETERMINISTIC)) for t in MIXED]
    batched = [p.get_result().as_numpy("AUDIO").reshape(-1) for p in pending]
    after = {m: model_counts(http, m) for m in before}

    for model in before:
        inferences = after[model][0] - before[model][0]
        executions = after[model][1] - before[model][1]
        assert inferences == len(MIXED), model
        assert executions <= inferences, model
    # The expensive stages must really have batched requests of different lengths.
    for model in ("acoustic", "vocoder"):
        executions = after[model][1] - before[model][1]
        assert executions < len(MIXED), f"{model}: {executions} executions for {len(MIXED)} requests"

    for text, alone, together in zip(MIXED, unbatched, batched, strict=True):
        assert alone.shape == together.shape, text
        np.testing.assert_allclose(together, alone, atol=BATCH_ATOL, err_msg=text)
