"""The stage models trust no caller: direct calls to preprocess, acoustic, vocoder and
postprocess are held to the front door's bounds, each bad request refused on its own.

The checks themselves (triton_tts.contract.validation,
triton_tts.runtime.stage_bounds.StageBounds) first, then
through the real server: direct calls with a batch of 2, SCALES past what SPEED allows,
ids outside the voice's table or budget, latents past the frame budget, sent at the same
time as good direct calls and whole texts, which must all succeed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import DETERMINISTIC, synthesize
from triton_tts.contract.validation import (
    MAX_NOISE,
    MAX_SPEED,
    MIN_SPEED,
    InvalidRequest,
    check_latent,
    check_phoneme_ids,
    check_scales,
    one_item,
)
from triton_tts.contract.voice import Voice
from triton_tts.ops.server import TritonServer
from triton_tts.runtime.limits import MAX_CHUNK_IDS, TOO_LONG

# Server tests are those that ask for a server (tests/conftest.py); the rest run in `make test-unit`.

# --- the checks, without a server -------------------------------------------------------


def test_one_item_per_request() -> None:
    assert one_item("X", np.zeros((1, 3))).shape == (3,)
    for shape in [(2, 3), (0, 3)]:
        with pytest.raises(InvalidRequest, match="one item per request"):
            one_item("X", np.zeros(shape))


def test_scales_are_bounded_as_speed_and_noise_are() -> None:
    voice_scale = 1.08
    speed, noise_w = check_scales(np.array([0.667, voice_scale, 0.8], np.float32), voice_scale)
    assert speed == 1.0 and noise_w == pytest.approx(0.8)
    # The front door's extremes, as preprocess writes them in float32, pass.
    for speed in (MIN_SPEED, 0.3, MAX_SPEED):
        row = np.array([MAX_NOISE, voice_scale / speed, 0.0], np.float32)
        assert check_scales(row, voice_scale)[0] == pytest.approx(speed, rel=1e-5)
    bad = {
        "length_scale": [0.667, 100.0, 0.8],  # the tester's: 3,391 frames from 50 ids
        "length_scale ": [0.667, voice_scale / (MAX_SPEED * 1.01), 0.8],
        "length_scale  ": [0.667, 0.0, 0.8],
        "noise_scale": [MAX_NOISE * 1.01, voice_scale, 0.8],
        "noise_w": [0.667, voice_scale, -0.1],
        "finite": [float("nan"), voice_scale, 0.8],
    }
    for word, values in bad.items():
        with pytest.raises(InvalidRequest, match=word.strip()):
            check_scales(np.array(values, np.float32), voice_scale)


def test_ids_lengths_and_latents() -> None:
    row = np.array([1, 5, 9, 0, 0], np.int64)
    assert check_phoneme_ids(row, 3, 10, 2048).tolist() == [1, 5, 9]
    for length, vocabulary, max_ids, words in [
        (6, 10, 2048, "PHONEME_LENGTH 6"),
        (0, 10, 2048, "PHONEME_LENGTH 0"),
        (3, 9, 2048, "PHONEME_IDS holds 9"),
        (3, 10, 2, "at most 2"),
    ]:
        with pytest.raises(InvalidRequest, match=words):
            check_phoneme_ids(row, length, vocabulary, max_ids)
    with pytest.raises(InvalidRequest, match="PHONEME_IDS holds -1"):
        check_phoneme_ids(np.array([-1, 2]), 2, 10, 2048)
    assert check_latent(np.zeros((4, 7), np.float32), 4, 64).shape == (4, 7)
    for latent, words in [
        (np.zeros((3, 7)), "3 channels"),
        (np.zeros((4, 65)), "65 frames"),
        (np.zeros((4, 0)), "0 frames"),
        (np.zeros(4), "shape"),
    ]:
        with pytest.raises(InvalidRequest, match=words):
            check_latent(latent, 4, 64)


# --- through the real server ------------------------------------------------------------


def _tensor(name: str, value: Any) -> httpclient.InferInput:
    array = np.asarray(value)
    dtype = {"f": "FP32", "i": "INT64", "O": "BYTES"}[array.dtype.kind]
    tensor = httpclient.InferInput(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(
        array.astype({"FP32": np.float32, "INT64": np.int64, "BYTES": np.object_}[dtype])
    )
    return tensor


@dataclass(frozen=True)
class Call:
    """One direct request to a stage, and the words its refusal must hold (None: it works);
    ``inside``: it carries the server's internal token, as the server's own chunks do;
    ``priority``: Triton's, as a caller may set it."""

    model: str
    inputs: dict[str, Any]
    refused_for: str | None = None
    inside: bool = True
    priority: int = 0


def _sentence_ids(voice: Voice) -> npt.NDArray[Any]:
    ids = voice.phonemes_to_ids("ðə kwˈɪk bɹˈaʊn fˈɑːks.")
    return np.array([ids], dtype=np.int64)


def _acoustic(
    ids: npt.NDArray[Any], scales: list[float], length: int | None = None, batch: int = 1
) -> dict[str, Any]:
    ids = np.repeat(ids, batch, axis=0)
    return {
        "PHONEME_IDS": ids,
        "PHONEME_LENGTH": np.full((batch, 1), ids.shape[1] if length is None else length, np.int64),
        "SCALES": np.repeat(np.array([scales], np.float32), batch, axis=0),
    }


def _calls(voice: Voice) -> list[Call]:
    ids = _sentence_ids(voice)
    plain = [0.0, voice.length_scale, 0.0]
    channels, hop = voice.latent_channels, voice.hop_length
    latent = np.zeros((1, channels, 40), np.float32)
    post = _post(np.zeros((1, 40 * hop)), 40, voice.sample_rate)
    durations = np.full((1, 4), 10.0, np.float32)
    words = np.array([[-1, 0, 0, 1]], np.int32)
    return [
        Call("acoustic", _acoustic(ids, plain)),
        Call("acoustic", _acoustic(ids, [0.0, voice.length_scale / MIN_SPEED, 0.0])),  # SPEED 0.25 works
        Call("acoustic", _acoustic(ids, plain, batch=2), "one item per request"),
        Call("acoustic", _acoustic(ids, [0.667, 100.0, 0.8]), "length_scale 100"),
        Call("acoustic", _acoustic(ids, [9.0, voice.length_scale, 0.8]), "noise_scale"),
        Call("acoustic", _acoustic(ids, plain, length=ids.shape[1] + 5), "PHONEME_LENGTH"),
        Call("acoustic", _acoustic(ids + 10_000, plain), "PHONEME_IDS holds"),
        Call("acoustic", _acoustic(np.zeros((1, MAX_CHUNK_IDS + 8), np.int64), plain), "at most"),
        # within the ids budget, past the frame budget at SPEED 0.25 (as preprocess refuses)
        Call(
            "acoustic",
            _acoustic(np.zeros((1, 2000), np.int64), [0.0, voice.length_scale / MIN_SPEED, 0.0]),
            TOO_LONG,
        ),
        Call("vocoder", {"LATENT": latent}),
        Call("vocoder", {"LATENT": np.zeros((2, channels, 40), np.float32)}, "one item per request"),
        Call("vocoder", {"LATENT": np.zeros((1, channels + 1, 40), np.float32)}, "channels"),
        Call("vocoder", {"LATENT": np.zeros((1, channels, 4200), np.float32)}, "4200 frames"),
        Call("postprocess", _post(np.zeros((1, 40 * hop)), 40, voice.sample_rate)),
        Call("postprocess", _post(np.zeros((1, 40 * hop)), 41, voice.sample_rate), "FRAME_COUNT 41"),
        Call("postprocess", _post(np.zeros((1, 40 * hop)), -1, voice.sample_rate), "FRAME_COUNT -1"),
        Call("postprocess", _post(np.zeros((1, 40 * hop)), 40, 8000), "SAMPLE_RATE 8000"),
        # word timestamps: the word of each id and the frames per id, together and in range
        Call("postprocess", {**post, "DURATIONS": durations, "WORD_INDEX": words}),
        Call("postprocess", {**post, "WORD_INDEX": words}, "WORD_INDEX needs DURATIONS"),
        Call("postprocess", {**post, "DURATIONS": durations, "WORD_INDEX": words + 9}, "WORD_INDEX holds"),
        # Without the token, good calls are refused before any work, whatever priority they
        # ask for: the first-chunk level (1) included (triton_tts/runtime/internal.py).
        Call("acoustic", _acoustic(ids, plain), "internal model", inside=False, priority=1),
        Call("vocoder", {"LATENT": latent}, "internal model", inside=False, priority=1),
        Call(
            "postprocess",
            _post(np.zeros((1, 40 * hop)), 40, voice.sample_rate),
            "internal model",
            inside=False,
        ),
        Call(
            "preprocess", {"TEXT": np.array([[b"Hello there."]], np.object_)}, "internal model", inside=False
        ),
        Call(
            "tts_chunk",
            {"TEXT": np.array([[b"Hello there."]], np.object_)},
            "internal model",
            inside=False,
            priority=1,
        ),
        Call("tts_chunk", {"TEXT": np.array([[b"Hello there."]], np.object_)}),
    ]


def _post(waveform: npt.NDArray[Any], frames: int, rate: int) -> dict[str, Any]:
    return {
        "WAVEFORM": waveform.astype(np.float32),
        "FRAME_COUNT": np.array([[frames]], np.int64),
        "SAMPLE_RATE": np.array([[rate]], np.int32),
    }


def _send(client: httpclient.InferenceServerClient, call: Call, token: dict[str, str]) -> Any:
    inputs = []
    for name, value in call.inputs.items():
        array = np.asarray(value)
        if array.dtype == np.int32:
            tensor = httpclient.InferInput(name, list(array.shape), "INT32")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        else:
            inputs.append(_tensor(name, array))
    return client.infer(call.model, inputs, parameters=token if call.inside else None, priority=call.priority)


def _check(client: httpclient.InferenceServerClient, call: Call, token: dict[str, str]) -> str | None:
    """None if the call went as it should, else what went wrong."""
    try:
        result = _send(client, call, token)
    except InferenceServerException as err:
        if call.refused_for is None:
            return f"{call.model}: a good call failed: {err}"
        if err.status() != "400" or call.refused_for not in err.message():
            return f"{call.model}: expected a 400 naming {call.refused_for!r}, got {err.status()}: {err}"
        return None
    if call.refused_for is not None:
        return f"{call.model}: accepted what must be refused ({call.refused_for})"
    if call.model == "acoustic":
        frames = int(result.as_numpy("FRAME_COUNT").reshape(-1)[0])
        assert result.as_numpy("LATENT").shape[-1] == frames > 0
    return None


def test_each_bad_direct_call_is_refused_naming_the_problem(server: TritonServer, voice: Voice) -> None:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        problems = [p for call in _calls(voice) if (p := _check(client, call, server.internal_parameters()))]
    finally:
        client.close()
    assert not problems, "\n".join(problems)


def test_bad_direct_calls_among_good_traffic(server: TritonServer, voice: Voice) -> None:
    """Bad and good direct calls at once, with whole texts through tts: each bad one gets
    its own 400, every good one its result (they share the stages' batches)."""
    calls = _calls(voice) * 3
    text = "The stages answer every request for itself."

    def client() -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(server.http_url, network_timeout=300)

    def check(call: Call) -> str | None:  # a client per call: tritonclient's are not thread-safe
        own = client()
        try:
            return _check(own, call, server.internal_parameters())
        finally:
            own.close()

    def say() -> npt.NDArray[Any]:
        own = client()
        try:
            return synthesize(own, text, **DETERMINISTIC)[0]
        finally:
            own.close()

    texts = client()
    try:
        expected, _ = synthesize(texts, text, **DETERMINISTIC)
        with ThreadPoolExecutor(8) as pool:
            spoken = [pool.submit(say) for _ in range(3)]
            problems = [p for p in pool.map(check, calls) if p]
            for future in spoken:
                np.testing.assert_allclose(future.result(), expected, atol=2e-4)
        assert texts.is_server_ready()
    finally:
        texts.close()
    assert not problems, "\n".join(problems)
