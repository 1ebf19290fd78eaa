"""Bad requests get a clear error of their own; neighbours succeed; the server keeps serving."""

from __future__ import annotations

import queue
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import DETERMINISTIC, synthesize, tts_inputs
from triton_tts.contract.validation import MAX_LONG_TEXT_CHARS
from triton_tts.ops.server import TritonServer
from triton_tts.runtime.limits import TOO_LONG

pytestmark = pytest.mark.server  # its own servers (module fixtures)

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
# Keeps preprocess busy for tens of milliseconds (9,000 characters of number words to
# phonemise), then is refused as over the voice's budget: the requests behind it queue up
# and are batched.
SLOW = "1234567 " * 120


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

    # tts_chunk all at once, twice, each time behind SLOW (a backlog for preprocess to
    # batch: it takes a short text in about a millisecond); tts in waves its admission
    # bound takes (4 instances + 8 queued)
    direct = [SLOW, *mixed, SLOW, *mixed]
    inside = server.internal_parameters()  # tts_chunk answers the server's own chunks only
    burst = httpclient.InferenceServerClient(server.http_url, concurrency=len(direct), network_timeout=300)
    chunked = [
        (t, burst.async_infer("tts_chunk", tts_inputs(httpclient, t, **DETERMINISTIC), parameters=inside))
        for t in direct
    ]
    answers: list[tuple[str, Any]] = []
    for wave in range(0, len(mixed), 6):
        texts = mixed[wave : wave + 6]
        handles = [http.async_infer("tts", tts_inputs(httpclient, t, **DETERMINISTIC)) for t in texts]
        answers += [(t, outcome(h)) for t, h in zip(texts, handles, strict=True)]
    answers += [(t, outcome(h)) for t, h in chunked]
    burst.close()

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
        if text == SLOW:
            assert isinstance(answer, InferenceServerException) and answer.status() == "400"
            assert TOO_LONG in answer.message()
        elif text in UNPRONOUNCEABLE:
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
    # every tts_chunk request reached preprocess; tts and tts_stream send only the good
    # texts on (they refuse the others themselves, by code: NOTHING_TO_SAY)
    assert requests == len(direct) + 2 * sum(text in GOOD for text in mixed)
    assert executions < requests, (requests, executions)  # items shared executions


def batch_sizes(http: httpclient.InferenceServerClient, model: str) -> dict[int, int]:
    """Executions so far, by batch size (Triton's batch statistics)."""
    stats = http.get_inference_statistics(model)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def test_a_bad_and_a_good_item_share_one_execution(server: TritonServer, http, grpc) -> None:
    """Proven by counting: behind SLOW, 4 good and 4 unpronounceable tts_chunk requests
    queue for preprocess (one instance). An execution of 6 or more items holds more than
    the 5 refused ones (4 + SLOW), so a good one, and more than the 4 good ones, so a bad
    one. In that shared execution each still gets its own answer."""
    texts = [SLOW, *[t for pair in zip(GOOD, UNPRONOUNCEABLE, strict=True) for t in pair]]
    solo = {text: synthesize(http, text, **DETERMINISTIC)[0] for text in GOOD}
    answers: queue.Queue[tuple[int, Any, Any]] = queue.Queue()  # each round takes out all it puts in
    shared = 0
    for _ in range(5):  # the batcher decides; a burst seldom leaves them all in small batches
        before = batch_sizes(http, "preprocess")
        for i, text in enumerate(texts):  # gRPC's async_infer returns at once: a burst
            grpc.async_infer(
                "tts_chunk",
                tts_inputs(grpcclient, text, **DETERMINISTIC),
                callback=lambda result, error, i=i: answers.put((i, result, error)),
                parameters=server.internal_parameters(),
            )
        for _ in texts:
            i, result, error = answers.get(timeout=300)
            if texts[i] in GOOD:
                assert error is None, error
                np.testing.assert_allclose(result.as_numpy("AUDIO").reshape(-1), solo[texts[i]], atol=2e-4)
            else:
                assert error is not None and error.status() == "StatusCode.INVALID_ARGUMENT", error
        after = batch_sizes(http, "preprocess")
        shared = sum(count - before.get(size, 0) for size, count in after.items() if size >= 6)
        if shared:
            break
    assert shared, "no execution held both a good and a bad item"


def _logged(server: TritonServer, needle: str, wait_s: float = 10.0) -> list[str]:
    """The lines of the server's log that hold ``needle``, once there are any (or after ``wait_s``)."""
    assert server.log_file is not None
    deadline = time.monotonic() + wait_s
    while True:
        text = Path(server.log_file).read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if needle in line]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


def test_every_refusal_is_logged_once_with_its_request_id(server: TritonServer, http, grpc) -> None:
    """What a client was told, an operator finds in the server's log: one warning line per
    refused request, naming the model, the request id the client gave and the message;
    through tts (checked there), tts_stream (gRPC stream) and tts_chunk (preprocess)."""
    run = uuid.uuid4().hex[:8]
    cases: dict[str, tuple[str, dict[str, Any], str, str]] = {
        f"tts-{run}": ("tts", {"SPEED": 9.0}, "Hello there.", "SPEED 9 is outside"),
        f"chunk-{run}": ("tts_chunk", {}, "?! -- ;;", "nothing the voice can pronounce"),
        f"stream-{run}": ("tts_stream", {"VOICE": "nobody"}, "Hello there.", "unknown VOICE 'nobody'"),
    }
    errors: queue.Queue[Any] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: errors.put(error))
    for rid, (model, extra, text, _) in cases.items():
        if model == "tts_stream":
            grpc.async_stream_infer(model, tts_inputs(grpcclient, text, **extra), request_id=rid)
            assert errors.get(timeout=60) is not None
        else:
            with pytest.raises(InferenceServerException):
                http.infer(
                    model,
                    tts_inputs(httpclient, text, **extra),
                    request_id=rid,
                    parameters=server.internal_parameters() if model == "tts_chunk" else None,
                )
    grpc.stop_stream()
    for rid, (model, _, _, words) in cases.items():
        lines = _logged(server, f"request {rid}")
        assert len(lines) == 1, lines  # one line per failed request
        refused = "preprocess" if model == "tts_chunk" else model
        assert lines[0].startswith("W"), lines  # a warning: the client's to fix
        assert f"{refused}: request {rid} refused (INVALID_ARG): " in lines[0] and words in lines[0], lines
    good = f"good-{run}"
    http.infer("tts", tts_inputs(httpclient, "A request that succeeds."), request_id=good)
    assert _logged(server, good, wait_s=1.0) == []  # nothing logged for what went well
