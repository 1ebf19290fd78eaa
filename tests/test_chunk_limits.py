"""Every chunk the API accepts fits the TensorRT profiles (triton_tts/runtime/limits.py).

The worst case is played offline with the real pieces: texts that are not calibration
texts, chunked as ``tts`` chunks them at the slowest SPEED and noisiest NOISE_W, refused
chunks halved as ``tts`` halves them, each accepted chunk's ids from the preprocess code
path and its frames from the voice's real acoustic graph, against the profiles
``export_scripts/triton_tts/export/tensorrt.py`` derives from the built repository. Then through the
server: ``tts_chunk`` refuses what would not fit, ``tts`` says it in pieces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import phoneme_ids
from tests.helpers import tts_inputs
from triton_tts.build.model_configs import BuildOptions
from triton_tts.contract.validation import MAX_NOISE, MAX_SPEED, MIN_SPEED
from triton_tts.export import tensorrt
from triton_tts.ops.repository import build_repository
from triton_tts.runtime import limits
from triton_tts.runtime.batching import bucket_length
from triton_tts.runtime.chunking import ChunkPlan, halves, split_text
from triton_tts.runtime.limits import CALIBRATION_TEXTS, TOO_LONG, ChunkLimits, chunk_scale, from_measurements
from triton_tts.runtime.stages import AcousticRunner, RunFailed
from triton_tts.text.normalize import normalize_english

# Server tests are those that ask for a server (tests/conftest.py); the rest run in `make test-unit`.

# Held out from the calibration: dense and slow texts of kinds it has, and others.
HELD_OUT = [
    "Oh... ah! Eh? Uh-huh, hmm. Wow! Ooh, aah; shh. Psst! Ugh, erm, well, mhm, yeah, nah, okay.",
    "Call 555 0199 or 555 0142 between 9 and 17, ext. 4411; ref. QX-7, ZK-9, WB-12, AF-3.",
    "X, Y, Z. Q? J! K; V, W: U... R, S, T. NASA's JPL, MIT's CSAIL, UCLA, NYU, USC, LSU.",
    "In 1999, 2001, 2012 and 2024 the rates were 3.5%, 12.25%, 7% and 0.75% respectively.",
    "The committee reviewed the proposal carefully, discussed its costs and benefits at "
    "length, and finally agreed to fund the first phase of the project next spring.",
]
SETTINGS = [(speed, w) for speed in (MIN_SPEED, 1.0, MAX_SPEED) for w in (0.0, 0.8, MAX_NOISE)]


def test_held_out_texts_are_not_the_calibration_texts() -> None:
    assert not set(HELD_OUT) & set(CALIBRATION_TEXTS)


def test_envelope_margin_and_refusals() -> None:
    measured = [(0.0, 100, 250), (0.0, 50, 150), (1.0, 100, 280), (2.0, 100, 260)]
    got = from_measurements(4160, measured, margin=1.25)
    assert got.frames_per_id == ((0.0, 3.75), (1.0, 3.75), (2.0, 3.75))  # never falls
    assert got.frames_per_id_at(0.5) == 3.75 and got.predicted_frames(100, 1.0, 0.0) == 375
    assert got.predicted_frames(100, 0.25, 0.0) == 1600  # + one frame per id of rounding
    assert got.refusal(100, 1.0, 0.0) is None
    too_slow = got.refusal(1200, 1.0, 0.0)
    assert too_slow and too_slow.startswith(TOO_LONG) and "SPEED 1" in too_slow and "tts_stream" in too_slow
    too_many = got.refusal(got.max_ids + 1, MAX_SPEED, 0.0)
    assert too_many and too_many.startswith(TOO_LONG) and str(got.max_ids) in too_many
    assert ChunkLimits.from_json(got.to_json()) == got


def test_slow_and_noisy_requests_get_shorter_chunks() -> None:
    limits_ = ChunkLimits(2048, 4160, ((0.0, 3.7), (1.0, 3.9), (2.0, 15.5)))
    assert chunk_scale(limits_, None, None) == 1.0 and chunk_scale(limits_, 2.0, 0.8) == 1.0
    assert chunk_scale(limits_, 0.25, None) == 0.25
    assert chunk_scale(limits_, 1.0, 2.0) == pytest.approx(3.9 / 15.5)
    plan = ChunkPlan(160, 400)
    assert plan.scaled(1.0) is plan and plan.scaled(0.25) == ChunkPlan(40, 100)
    assert plan.scaled(0.001) == ChunkPlan(16, 16)


def test_halves_cut_at_boundaries_and_keep_every_word() -> None:
    text = "First clause, second clause; a third one. Then another sentence follows here."
    pieces = halves(text)
    assert len(pieces) >= 2 and " ".join(pieces).split() == text.split()
    assert all(len(p) <= (len(text) + 1) // 2 for p in pieces)
    assert halves("Supercalifragilistic") == ["Supercalif", "ragilistic"]  # one word: cut it
    assert halves("a") == []


@pytest.fixture(scope="module")
def built(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository([voice_dir], tmp_path_factory.mktemp("limits") / "model_repository")


def test_the_worst_accepted_chunk_fits_the_engines(built: Path, voice, phonemizer) -> None:
    """At every SPEED / NOISE_W extreme, every chunk tts would send (halved where
    preprocess refuses) has ids and frames inside the voice's TensorRT profiles."""
    profiles = {
        path.parent.parent.name: p for path, _, p in tensorrt.engines(built, BuildOptions().max_batch_size)
    }
    max_ids = profiles["acoustic"].shapes["PHONEME_IDS"][2][1]
    max_frames = profiles["vocoder"].shapes["LATENT"][2][2]
    voice_limits = tensorrt.voice_limits(built, built / "acoustic")
    assert (max_ids, max_frames) == (voice_limits.max_ids, voice_limits.max_frames)
    runner = AcousticRunner(built / "acoustic" / "1" / "model.onnx", 2, 1, 1 << 20)
    worst = {"ids": 0, "frames": 0, "predicted_over_real": np.inf}
    capped: list[tuple[float, float, int]] = []
    text = normalize_english(" ".join(HELD_OUT))
    for speed, noise_w in SETTINGS:
        plan = ChunkPlan().scaled(chunk_scale(voice_limits, speed, noise_w))
        accepted: list[list[int]] = []
        queue = split_text(text, plan)
        while queue:
            chunk = queue.pop(0)
            ids = phoneme_ids(chunk, voice, phonemizer)
            if voice_limits.refusal(len(ids), speed, noise_w):
                queue[:0] = halves(chunk)  # as long_text.send.synthesize_chunk does
                continue
            accepted.append(ids)
        assert accepted, (speed, noise_w)
        scales = np.array([voice.noise_scale, voice.length_scale / speed, noise_w], dtype=np.float32)
        for _ in range(2 if noise_w else 1):  # the duration noise is random
            rows = [np.array(i, dtype=np.int64) for i in accepted]
            for ids, result in zip(accepted, runner.run(rows, [scales] * len(rows)), strict=True):
                assert not isinstance(result, RunFailed), result
                frames = result[1]
                assert bucket_length(len(ids)) <= max_ids, (speed, noise_w, len(ids))
                assert frames <= max_frames, (speed, noise_w, len(ids), frames)  # the graph's cap
                if frames == max_frames:
                    capped.append((speed, noise_w, len(ids)))
                if noise_w > 1.0:
                    continue  # NOISE_W 2's duration noise has a long tail: the cap is for it
                worst["ids"] = max(worst["ids"], len(ids))
                worst["frames"] = max(worst["frames"], frames)
                predicted = voice_limits.predicted_frames(len(ids), speed, noise_w)
                if frames > max_frames // 4:  # where the budget is at stake (short chunks vary more)
                    worst["predicted_over_real"] = min(worst["predicted_over_real"], predicted / frames)
    # Up to NOISE_W 1 the prediction bounds every long held-out chunk, and none is cut
    assert worst["predicted_over_real"] >= 1.0, worst
    assert not [c for c in capped if c[1] <= 1.0], capped
    assert worst["frames"] > max_frames // 3  # the chunks really were long


def test_tts_chunk_refuses_what_would_not_fit_and_tts_says_it_in_pieces(server, http) -> None:
    text = " ".join(HELD_OUT[4:] * 3)  # ~450 characters of prose
    with pytest.raises(InferenceServerException) as refused:
        http.infer(
            "tts_chunk",
            tts_inputs(httpclient, text, SPEED=MIN_SPEED, NOISE_SCALE=0.0, NOISE_W=0.0),
            parameters=server.internal_parameters(),
        )
    assert TOO_LONG in refused.value.message() and "tts_stream" in refused.value.message()
    normal = http.infer("tts", tts_inputs(httpclient, text, NOISE_SCALE=0.0, NOISE_W=0.0))
    slow = http.infer("tts", tts_inputs(httpclient, text, SPEED=MIN_SPEED, NOISE_SCALE=0.0, NOISE_W=0.0))
    normal_s = normal.as_numpy("AUDIO").size
    slow_s = slow.as_numpy("AUDIO").size
    # four times slower, said whole. Both are said in chunks (the ramp cuts the normal one
    # at clauses too), and the pauses between them do not all stretch with SPEED.
    assert 3.1 <= slow_s / normal_s <= 4.8, slow_s / normal_s
    assert np.isfinite(slow.as_numpy("AUDIO")).all()


def test_calibration_is_measured_per_voice_and_cached(voice_dir: Path) -> None:
    measured = limits.calibrate(voice_dir)
    assert (voice_dir / limits.CACHE_FILE).exists()
    assert limits.calibrate(voice_dir) == measured  # from the cache: same numbers
    # the budget: MAX_CHUNK_SECONDS of this voice's audio, in whole 64-frame blocks
    assert measured.max_frames == limits.frame_budget(22050, 256) and measured.max_frames % 64 == 0
    assert [w for w, _ in measured.frames_per_id] == list(limits.NOISE_W_GRID)
