"""A caller's mistake is a 4xx, always: generated requests with missing, extra, mis-shaped
and mis-typed inputs through the real server, for tts, tts_chunk, vad and tts_stream.

Each answer is a success or a client error (HTTP 400 / gRPC INVALID_ARGUMENT, in a stream
a tagged error) that names an input; never a 5xx or INTERNAL, never a hang (every call
has a bounded timeout), and every stream ends: with its final flag where the model got
the request, or with Triton's own untagged refusal where it never did (docs/api.md,
"Errors"). Then what the client library and the CLI make of the same mistakes: one
error at once, one line, no traceback.
"""

from __future__ import annotations

import asyncio
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from triton_tts.client import TTSError
from triton_tts.client.errors import STREAM_CODE
from triton_tts.ops.server import TritonServer

TIMEOUT_S = 60  # a bound for a hang, not a claim about speed
EXAMPLES = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Each model's inputs as its config declares them: (datatype, dims after the batch axis).
TEXT_MODEL = {
    "TEXT": ("BYTES", [1]),
    "SPEED": ("FP32", [1]),
    "SPEAKER_ID": ("INT64", [1]),
    "NOISE_SCALE": ("FP32", [1]),
    "NOISE_W": ("FP32", [1]),
    "VOICE": ("BYTES", [1]),
    "NORMALIZE": ("BOOL", [1]),
    "TIMESTAMPS": ("BOOL", [1]),
}
LONG_TEXT_MODEL = {**TEXT_MODEL, "TEXT_FORMAT": ("BYTES", [1]), "LEXICON": ("BYTES", [1])}
VAD_MODEL = {"input": ("FP32", [-1, 576]), "h": ("FP32", [1, 1, 128]), "c": ("FP32", [1, 1, 128])}
MODELS = {"tts": (LONG_TEXT_MODEL, True), "tts_chunk": (TEXT_MODEL, True), "vad": (VAD_MODEL, False)}
DTYPES = {"BYTES": np.object_, "FP32": np.float32, "INT64": np.int64, "BOOL": np.bool_, "INT32": np.int32}
STRANGER = "FOO"  # an input no model has

# Values that are each input's own, good or bad (a voice, texts, numbers in and out of range).
TEXTS = [b"Hi.", b"Ok, go.", b"", b"?!", b"\xc3\x28", "caf\u00e9.".encode()]
WORDS = [b"joe", b"nobody", b"ssml", b"text", b"auto", b""]
NUMBERS = [1.0, 0.0, -1.0, 0.5, 9.0, float("nan")]


@dataclass(frozen=True)
class Sent:
    """One generated input: its name, datatype and array (batch axis included)."""

    name: str
    datatype: str
    array: np.ndarray[Any, Any]

    def tensor(self, lib: Any) -> Any:
        tensor = lib.InferInput(self.name, list(self.array.shape), self.datatype)
        tensor.set_data_from_numpy(self.array)
        return tensor


@st.composite
def one_input(draw: st.DrawFn, name: str, declared: tuple[str, list[int]], batch: int | None) -> Sent:
    """An input as declared (``batch``: its batch axis, None for a model without one), or
    with another datatype or another shape."""
    datatype, dims = declared
    if draw(st.integers(0, 9)) == 0:  # mis-typed, now and then
        datatype = draw(st.sampled_from(sorted(DTYPES)))
    shape = [d if d >= 0 else draw(st.integers(0, 3)) for d in dims]
    if draw(st.integers(0, 9)) == 0:  # mis-shaped: one more or one less element, or an axis
        shape = draw(st.sampled_from([[*shape, 1], shape[:-1] or [2], [*shape[:-1], 2], [*shape[:-1], 0]]))
    if batch is not None:
        shape = [batch if draw(st.integers(0, 19)) else draw(st.sampled_from([0, 2])), *shape]
    size = int(np.prod(shape))
    values: list[Any]
    if datatype == "BYTES":
        values = [draw(st.sampled_from(TEXTS if name == "TEXT" else WORDS)) for _ in range(size)]
    elif datatype == "BOOL":
        values = [draw(st.booleans()) for _ in range(size)]
    else:
        values = [draw(st.sampled_from([0.0, 1.0] if name in VAD_MODEL else NUMBERS)) for _ in range(size)]
        if np.issubdtype(DTYPES[datatype], np.integer):
            values = [0 if np.isnan(n) else int(n) for n in values]
    array = np.array(values, dtype=DTYPES[datatype]).reshape(shape)
    return Sent(name, datatype, array)


@st.composite
def requests(draw: st.DrawFn, model: str) -> list[Sent]:
    """A request to ``model``: some of its inputs (the required ones usually), a stranger
    now and then; each input as declared or not."""
    inputs, batched = MODELS.get(model, (LONG_TEXT_MODEL, True))
    required = [name for name in inputs if name in ("TEXT", *VAD_MODEL)]
    chosen = [n for n in required if draw(st.integers(0, 5)) > 0]  # left out now and then
    optional = [n for n in inputs if n not in required]
    chosen += draw(st.lists(st.sampled_from(optional), max_size=3, unique=True)) if optional else []
    batch = draw(st.sampled_from([1] * 8 + [2, 0])) if batched else None  # a batch of 2, or none
    sent = [draw(one_input(name, inputs[name], batch)) for name in chosen]
    if draw(st.integers(0, 7)) == 0:
        sent.append(Sent(STRANGER, "FP32", np.ones([1, 1], np.float32)))
    return sent


def names_an_input(message: str, sent: list[Sent], model: str) -> bool:
    """Whether a refusal names an input: one sent, or one the model takes."""
    inputs = MODELS.get(model, (LONG_TEXT_MODEL, True))[0]
    return any(re.search(rf"\b{name}\b", message) for name in {*(s.name for s in sent), *inputs})


# tts_chunk is an ensemble: without TEXT, Triton's ensemble scheduler answers this 400 before
# preprocess runs, naming no input (docs/api.md, "Errors").
ENSEMBLE_WITHOUT_TEXT = "unexpected deadlock"


def check_refusal(err: InferenceServerException, sent: list[Sent], model: str, status: str) -> None:
    message = err.message() or ""
    assert err.status() == status, (err.status(), message, sent)
    if model == "tts_chunk" and ENSEMBLE_WITHOUT_TEXT in message:
        assert "TEXT" not in {s.name for s in sent}, (message, sent)
        return
    assert names_an_input(message, sent, model), (message, sent)


@pytest.fixture(scope="module")
def http_client(server: TritonServer) -> Any:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=TIMEOUT_S)
    yield client
    client.close()


@pytest.mark.parametrize("model", sorted(MODELS))
@EXAMPLES
@given(data=st.data())
def test_every_request_is_answered_with_success_or_a_400_naming_an_input(
    server: TritonServer, http_client: Any, model: str, data: st.DataObject
) -> None:
    sent = data.draw(requests(model))
    parameters = server.internal_parameters() if model == "tts_chunk" else None  # the server's own chunks
    try:
        http_client.infer(model, [s.tensor(httpclient) for s in sent], parameters=parameters)
    except InferenceServerException as err:
        check_refusal(err, sent, model, "400")


@pytest.mark.parametrize("model", ["tts"])
@EXAMPLES
@given(data=st.data())
def test_every_grpc_request_is_answered_with_success_or_invalid_argument(
    server: TritonServer, model: str, data: st.DataObject
) -> None:
    sent = data.draw(requests(model))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        try:
            client.infer(model, [s.tensor(grpcclient) for s in sent], client_timeout=TIMEOUT_S)
        except InferenceServerException as err:
            check_refusal(err, sent, model, "StatusCode.INVALID_ARGUMENT")


def stream_answers(url: str, sent: list[Sent]) -> list[tuple[str, Any]]:
    """One tts_stream request with plain tritonclient: ("chunk", last) and ("error",
    exception) in arrival order, up to the final flag, or up to an untagged error (Triton's
    refusal: nothing follows it) and a short wait that shows nothing did."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    seen: list[tuple[str, Any]] = []
    try:
        client.async_stream_infer(
            "tts_stream", [s.tensor(grpcclient) for s in sent], enable_empty_final_response=True
        )
        while True:
            try:
                result, error = answers.get(timeout=1.0 if seen and seen[-1][0] == "triton" else TIMEOUT_S)
            except queue.Empty:
                assert seen and seen[-1][0] == "triton", f"no final flag within {TIMEOUT_S} s: {seen}"
                return seen
            if error is not None:
                tagged = STREAM_CODE.match(error.message() or "")
                seen.append(("error" if tagged else "triton", error))
                continue
            response = result.get_response()
            if response.outputs:
                seen.append(("chunk", bool(result.as_numpy("IS_LAST").reshape(-1)[0])))
            if response.parameters["triton_final_response"].bool_param:
                seen.append(("final", None))
                return seen
    finally:  # closed, not cancelled: the server ends the call once the request has ended
        client.stop_stream()
        client.close()


@EXAMPLES
@given(sent=requests("tts_stream"))
def test_every_stream_ends_with_its_final_flag_or_with_tritons_refusal(
    server: TritonServer, sent: list[Sent]
) -> None:
    seen = stream_answers(server.grpc_url, sent)
    kinds = [kind for kind, _ in seen]
    if kinds[-1] == "final":  # the model had the request: audio ending IS_LAST, or one tagged error
        errors = [e for kind, e in seen if kind == "error"]
        if errors:
            assert kinds == ["error", "final"], seen
            message = errors[0].message()
            assert message.startswith("[INVALID_ARG] "), message
            assert names_an_input(message, sent, "tts_stream"), (message, sent)
        else:
            assert kinds[-2] == "chunk" and seen[-2][1], seen  # the last chunk says IS_LAST
    else:  # refused by Triton before the model: one untagged error, nothing after it
        assert kinds == ["triton"], seen
        error = seen[0][1]
        assert error.status() is None and names_an_input(error.message(), sent, "tts_stream"), error


def test_a_refusal_before_the_model_ends_the_client_librarys_stream(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton refuses the client's stream request before any model runs (the stream
    model here is vad, whose tensors are not TEXT and AUDIO): the sync and asyncio clients raise the
    refusal at once instead of waiting for a final flag that never comes. With the waits
    for a final flag and the call's timeout made an hour, only ending on the refusal
    itself ends the call within the bound."""
    from triton_tts.client import AsyncTTSClient, TTSClient, async_client, sync_client

    monkeypatch.setattr(sync_client, "STREAM_END_WAIT_S", 3600.0)
    monkeypatch.setattr(async_client, "STREAM_END_WAIT_S", 3600.0)
    outcome: dict[str, BaseException | None] = {}

    def sync_stream() -> None:
        with TTSClient(server.grpc_url, "grpc", stream_model="vad", timeout_s=3600) as client:
            try:
                list(client.stream("Hello there."))
            except TTSError as err:
                outcome["sync"] = err

    async def async_stream() -> None:
        async with AsyncTTSClient(server.grpc_url, "grpc", stream_model="vad", timeout_s=3600) as client:
            try:
                async for _ in client.stream("Hello there."):
                    pass
            except TTSError as err:
                outcome["async"] = err

    threads = [
        threading.Thread(target=sync_stream, daemon=True),
        threading.Thread(target=lambda: asyncio.run(async_stream()), daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), f"a client still waits: {outcome}"
    for which in ("sync", "async"):
        assert "for model 'vad'" in str(outcome.get(which)), outcome  # Triton's words, naming a tensor


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        check=False,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit code 1 and one line on stderr, naming ``words``; no traceback."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("triton-tts: ") and all(w in lines[0] for w in words), lines


def test_the_cli_names_a_wrong_protocol_in_one_line(server: TritonServer, tmp_path: Path) -> None:
    """HTTP against the gRPC port and gRPC against the HTTP port, for say, say --stream
    and dub: one line naming the address, no traceback."""
    cues = tmp_path / "cues.srt"
    cues.write_text("1\n00:00:00,000 --> 00:00:02,000\nHello there.\n", encoding="utf-8")
    out = str(tmp_path / "out.wav")
    grpc_port, http_port = server.grpc_url, server.http_url
    assert_one_line(cli("say", "Hello.", "-o", out, "--url", grpc_port), grpc_port, "gRPC port")
    assert_one_line(cli("dub", str(cues), "-o", out, "--url", grpc_port, "--no-progress"), "gRPC port")
    assert_one_line(cli("say", "Hello.", "-o", out, "--url", http_port, "--protocol", "grpc"), http_port)
    assert_one_line(cli("say", "Hello.", "-o", out, "--url", http_port, "--stream"), http_port)
    assert_one_line(cli("voices", "--url", server.http_url, "--model", "vad"), "not a tts model")


def test_the_cli_names_a_lexicon_entry_the_voice_cannot_say(voice_dir: Path, tmp_path: Path) -> None:
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("hello\th\u4e2dlo\n", encoding="utf-8")
    done = cli("frontend", "--voice", str(voice_dir), "--lexicon", str(lexicon), "hello")
    assert_one_line(done, str(lexicon), "'hello'", "not among voice")
    assert_one_line(cli("frontend", "--language", "xx", "hello"), "--language xx")
