"""Bad requests get a clear error of their own; neighbours succeed; the server keeps serving."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import DETERMINISTIC, synthesize, tts_inputs
from triton_tts.validation import MAX_LONG_TEXT_CHARS

# (text, extra inputs, words the error message must contain)
BAD_REQUESTS: list[tuple[str, bytes | str, dict[str, Any], str]] = [
    ("empty", "", {}, "empty"),
    ("whitespace", "   \t\n  ", {}, "empty"),
    ("too long", "word " * (MAX_LONG_TEXT_CHARS // 5 + 10), {}, "limit"),
    ("invalid utf-8", b"caf\xc3\x28 au lait", {}, "UTF-8"),
    ("control characters only", "\x00\x01\x07\x1b", {}, "control characters"),
    ("zero speed", "Hello there.", {"SPEED": 0.0}, "SPEED"),
    ("negative speed", "Hello there.", {"SPEED": -1.0}, "SPEED"),
    ("absurd speed", "Hello there.", {"SPEED": 1000.0}, "SPEED"),
    ("nan speed", "Hello there.", {"SPEED": float("nan")}, "SPEED"),
    ("unknown speaker", "Hello there.", {"SPEAKER_ID": 7}, "SPEAKER_ID"),
    ("negative speaker", "Hello there.", {"SPEAKER_ID": -1}, "SPEAKER_ID"),
    ("unknown voice", "Hello there.", {"VOICE": "nobody"}, "VOICE"),
    ("absurd noise", "Hello there.", {"NOISE_SCALE": 50.0}, "NOISE_SCALE"),
]
IDS = [case[0] for case in BAD_REQUESTS]


# HTTP answers 400, gRPC INVALID_ARGUMENT: the client-side mark of "your request is wrong".
PROTOCOLS = [("http", httpclient, "400"), ("grpc", grpcclient, "StatusCode.INVALID_ARGUMENT")]


@pytest.mark.parametrize(("protocol", "lib", "status"), PROTOCOLS, ids=[p[0] for p in PROTOCOLS])
@pytest.mark.parametrize(("name", "text", "extra", "expected"), BAD_REQUESTS, ids=IDS)
def test_bad_request_is_rejected_naming_the_problem(
    request: pytest.FixtureRequest, protocol, lib, status, name, text, extra, expected
) -> None:
    client = request.getfixturevalue(protocol)
    with pytest.raises(InferenceServerException) as info:
        client.infer("tts", tts_inputs(lib, text, **extra))
    assert info.value.status() == status, info.value
    assert expected.lower() in info.value.message().lower()


def test_bad_requests_do_not_harm_batched_neighbours(http) -> None:
    good_texts = ["The first good request.", "Another one that must succeed.", "And a third."]
    expected = [synthesize(http, t, **DETERMINISTIC)[0] for t in good_texts]
    # waves of 8 requests, well inside what tts admits at once (4 instances + 8 queued)
    for wave in range(0, len(BAD_REQUESTS), 4):
        pending: list[tuple[int | None, Any]] = []  # (index of the good text, or None if bad; handle)
        for i, (_, text, extra, _) in enumerate(BAD_REQUESTS[wave : wave + 4], start=wave):
            pending.append((None, http.async_infer("tts", tts_inputs(httpclient, text, **extra))))
            good = i % len(good_texts)
            inputs = tts_inputs(httpclient, good_texts[good], **DETERMINISTIC)
            pending.append((good, http.async_infer("tts", inputs)))
        for good_index, handle in pending:
            if good_index is None:
                with pytest.raises(InferenceServerException) as refused:
                    handle.get_result()
                assert refused.value.status() == "400", refused.value  # refused for itself, not busy
            else:
                audio = handle.get_result().as_numpy("AUDIO").reshape(-1)
                np.testing.assert_allclose(audio, expected[good_index], atol=2e-4)
    assert http.is_server_ready() and http.is_model_ready("tts")
    audio, _ = synthesize(http, "Still serving after all that.")
    assert len(audio) > 0


def test_text_with_nothing_pronounceable_is_rejected(http) -> None:
    with pytest.raises(InferenceServerException) as info:
        http.infer("tts", tts_inputs(httpclient, "?! ... --"))
    assert info.value.status() == "400"
    assert "nothing the voice can pronounce" in info.value.message()


UNPRONOUNCEABLE = ["." * 50, "... ,,, !!!", "?! -- ;;", "!!!"]
GOOD = ["A good sentence to say.", "Another fine request here.", "Short one.", "The last good text."]


def test_unpronounceable_texts_batched_with_good_ones_fail_alone(http, grpc, server) -> None:
    """Concurrent mixes through tts_chunk, tts and tts_stream: each unpronounceable text
    gets its own 400, each good one its solo audio, and preprocess really ran them in
    shared executions (Triton's statistics). phonemizer used to glue punctuation-only
    lines together, shifting every later result of the batch onto the wrong request."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import model_counts
    from triton_tts.client import TTSClient, TTSError

    solo = {text: synthesize(http, text, **DETERMINISTIC)[0] for text in GOOD}
    before = model_counts(http, "preprocess")
    # a good text, then two unpronounceable ones: the pattern phonemizer glued together
    mixed = [
        t
        for i in range(6)
        for t in (GOOD[i % 4], UNPRONOUNCEABLE[2 * i % 4], UNPRONOUNCEABLE[(2 * i + 1) % 4])
    ]

    def outcome(handle: Any) -> Any:
        try:
            return handle.get_result().as_numpy("AUDIO").reshape(-1)
        except InferenceServerException as err:
            return err

    # tts_chunk all at once; tts in waves its admission bound takes (4 instances + 8 queued)
    chunked = [(t, http.async_infer("tts_chunk", tts_inputs(httpclient, t, **DETERMINISTIC))) for t in mixed]
    answers: list[tuple[str, Any]] = []
    for wave in range(0, len(mixed), 6):
        texts = mixed[wave : wave + 6]
        handles = [http.async_infer("tts", tts_inputs(httpclient, t, **DETERMINISTIC)) for t in texts]
        answers += [(t, outcome(h)) for t, h in zip(texts, handles, strict=True)]
    answers += [(t, outcome(h)) for t, h in chunked]

    def stream(text: str) -> tuple[str, Any]:
        with TTSClient(server.grpc_url, protocol="grpc") as client:
            try:
                return text, np.concatenate(
                    [c.audio for c in client.stream(text, noise_scale=0.0, noise_w=0.0)]
                )
            except TTSError as err:
                return text, err

    with ThreadPoolExecutor(4) as pool:  # within the server's stream bound
        streamed = list(pool.map(stream, mixed))
    for text, answer in answers:
        if text in UNPRONOUNCEABLE:
            assert isinstance(answer, InferenceServerException), text
            assert answer.status() == "400" and "nothing the voice can pronounce" in answer.message()
        else:
            assert not isinstance(answer, InferenceServerException), answer
            np.testing.assert_allclose(answer, solo[text], atol=2e-4)
    for text, result in streamed:
        if text in UNPRONOUNCEABLE:
            assert isinstance(result, TTSError) and "nothing the voice can pronounce" in str(result)
        else:
            assert not isinstance(result, TTSError), result
            np.testing.assert_allclose(result, solo[text], atol=2e-4)
    after = model_counts(http, "preprocess")
    requests, executions = after[0] - before[0], after[1] - before[1]
    assert requests >= 3 * len(mixed) and executions < requests  # items shared executions
