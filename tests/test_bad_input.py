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
    pending: list[tuple[int | None, Any]] = []  # (index of the good text, or None if bad; handle)
    for i, (_, text, extra, _) in enumerate(BAD_REQUESTS):
        pending.append((None, http.async_infer("tts", tts_inputs(httpclient, text, **extra))))
        good = i % len(good_texts)
        inputs = tts_inputs(httpclient, good_texts[good], **DETERMINISTIC)
        pending.append((good, http.async_infer("tts", inputs)))
    for good_index, handle in pending:
        if good_index is None:
            with pytest.raises(InferenceServerException):
                handle.get_result()
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
