"""XTTS's next-code choice (triton_tts/xtts/sampling.py) against Hugging Face's own logits
processors, the ones Coqui's ``Xtts.inference`` runs through ``generate``: the repetition
penalty, then temperature, top-k and top-p. Random logits over XTTS's 1026 codes, with
ties and repeated ids, across the settings users give; and the scheduler's crossfade join
(each sample sent once)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
import torch
from transformers import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from triton_tts.xtts.card import Sampling
from triton_tts.xtts.sampling import PROMPT_PLACEHOLDER, choose, first_seen, penalise, warp
from triton_tts.xtts.scheduler import crossfade_join

FloatArray = npt.NDArray[np.float32]

pytestmark = pytest.mark.unit

CODES, START = 1026, 1024
SETTINGS = [
    Sampling(),  # Coqui's XTTS v2 defaults
    Sampling(temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0),
    Sampling(temperature=0.3, top_k=5, top_p=0.5, repetition_penalty=2.0),
    Sampling(temperature=1.7, top_k=2000, top_p=0.99, repetition_penalty=10.0),
]


def logits_and_history(seed: int) -> tuple[FloatArray, list[int]]:
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(CODES) * 4).astype(np.float32)
    logits[rng.integers(0, CODES, 40)] = logits[7]  # ties
    history = [PROMPT_PLACEHOLDER] * 5 + [START] + list(rng.integers(0, START, 30))  # repeats too
    return logits, history


def hugging_face(logits: FloatArray, history: list[int], sampling: Sampling) -> FloatArray:
    ids = torch.tensor([history])
    scores = torch.from_numpy(logits.copy())[None]
    scores = RepetitionPenaltyLogitsProcessor(sampling.repetition_penalty)(ids, scores)
    if sampling.temperature != 1.0:
        scores = TemperatureLogitsWarper(sampling.temperature)(ids, scores)
    if sampling.top_k:
        scores = TopKLogitsWarper(sampling.top_k)(ids, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(sampling.top_p)(ids, scores)
    processed: FloatArray = scores[0].numpy()
    return processed


@pytest.mark.parametrize("sampling", SETTINGS)
@pytest.mark.parametrize("seed", range(8))
def test_the_warped_logits_are_hugging_faces(sampling: Sampling, seed: int) -> None:
    logits, history = logits_and_history(seed)
    seen = np.zeros(CODES, dtype=bool)
    seen[history] = True
    ours = warp(penalise(logits, seen, sampling.repetition_penalty), sampling)
    theirs = hugging_face(logits, history, sampling)
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))  # the same ids kept
    kept = np.isfinite(theirs)
    np.testing.assert_allclose(ours[kept], theirs[kept], rtol=1e-6)


def test_a_fresh_generation_has_seen_the_placeholder_and_the_start_code() -> None:
    assert set(np.flatnonzero(first_seen(CODES, START))) == {PROMPT_PLACEHOLDER, START}


def test_greedy_is_the_penalised_argmax_and_records_the_code() -> None:
    logits, history = logits_and_history(0)
    seen = np.zeros(CODES, dtype=bool)
    seen[history] = True
    expected = int(np.argmax(hugging_face(logits, history, Sampling(temperature=1.0, top_k=0, top_p=1.0))))
    greedy = Sampling(temperature=0.0)
    code = choose(logits, seen, greedy, np.random.default_rng(0))
    assert code == expected and seen[code]


def test_sampling_draws_only_kept_codes_and_a_seed_repeats_it() -> None:
    logits, history = logits_and_history(3)
    sampling = Sampling(temperature=0.9, top_k=20, top_p=0.7)
    seen = np.zeros(CODES, dtype=bool)
    seen[history] = True
    kept = set(np.flatnonzero(np.isfinite(hugging_face(logits, history, sampling))))

    def draws(seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        return [choose(logits, seen.copy(), sampling, rng) for _ in range(200)]

    first = draws(11)
    assert set(first) <= kept and len(set(first)) > 1
    assert draws(11) == first
    assert draws(12) != first


def test_crossfade_join_sends_each_sample_once() -> None:
    rng = np.random.default_rng(0)
    full = rng.standard_normal(10_000).astype(np.float32)
    sent, held, previous = [], None, 0
    for end in (3000, 6500, 10_000):
        chunk, held = crossfade_join(full[:end], previous, held, 512, last=end == 10_000)
        sent.append(chunk)
        previous = end
    assert held is None
    np.testing.assert_allclose(np.concatenate(sent), full, atol=1e-6)  # same signal: the fade is exact
