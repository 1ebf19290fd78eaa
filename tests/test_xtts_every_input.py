"""A caller's mistake is a 4xx, always, at the XTTS doors too: generated requests with
missing, extra, mis-shaped and mis-typed inputs to a served XTTS voice, through the real
server, to the public ``xtts`` model itself (a gRPC stream: it is decoupled) and to ``tts``
(HTTP and gRPC) and ``tts_stream`` with the voice (issue 43).

The voice is a random-weight XTTS v2 in Coqui's layout (the small configuration),
exported with the real command, with a named speaker added by ``triton-tts speakers
add``, served beside the default voice: requests to ``tts`` and ``tts_stream`` name it
by VOICE (``xtts``, ``xtts:narrator``), now and then another or none.
Each answer is a success or a client error (HTTP 400 / gRPC INVALID_ARGUMENT, in a stream
a tagged ``[INVALID_ARG]`` error; ``[ALREADY_EXISTS]`` for a speaker stored twice) that
names an input; never a 5xx or INTERNAL, never a hang (every call has a bounded timeout),
and every stream ends: with its final flag where the model got the request, or with
Triton's own untagged refusal where it never did (docs/api.md, "Errors"). Triton's log
shows no traceback afterwards. Few examples: each success is a synthesis.
"""

from __future__ import annotations

import queue
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from testkit.xtts_checkpoints import build_xtts, voiced_clip
from triton_tts.cli import main as cli_main
from triton_tts.client.errors import STREAM_CODE
from triton_tts.export.coqui.cli import main as export_main
from triton_tts.ops.server import TritonServer, default_voice_server

pytestmark = [pytest.mark.server, pytest.mark.export]

TIMEOUT_S = 120  # a bound for a hang, not a claim about speed
EXAMPLES = settings(
    max_examples=30,
    deadline=None,
    database=None,  # the same draws each run: what failed once fails again
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
MAX_AUDIO_TOKENS = 23  # a short generation: each success is quick
RATE = 22050
NARRATOR = "narrator"  # a named speaker of the voice, added from a clip

# Each door's inputs as its config declares them: (datatype, dims after any batch axis).
XTTS_MODEL = {
    "TEXT": ("BYTES", [1]),
    "LANGUAGE": ("BYTES", [1]),
    "STORE_SPEAKER": ("BOOL", [1]),
    "REFERENCE_AUDIO": ("FP32", [-1]),
    "REFERENCE_SAMPLE_RATE": ("INT32", [1]),
    "SPEAKER": ("BYTES", [1]),
    "TEMPERATURE": ("FP32", [1]),
    "TOP_P": ("FP32", [1]),
    "REPETITION_PENALTY": ("FP32", [1]),
    "LENGTH_PENALTY": ("FP32", [1]),
    "SPEED": ("FP32", [1]),
    "TOP_K": ("INT32", [1]),
    "SEED": ("INT64", [1]),
}
LONG_TEXT_MODEL = {
    "TEXT": ("BYTES", [1]),
    "SPEED": ("FP32", [1]),
    "SPEAKER_ID": ("INT64", [1]),
    "NOISE_SCALE": ("FP32", [1]),
    "NOISE_W": ("FP32", [1]),
    "VOICE": ("BYTES", [1]),
    "NORMALIZE": ("BOOL", [1]),
    "TIMESTAMPS": ("BOOL", [1]),
    "TEXT_FORMAT": ("BYTES", [1]),
    "LANGUAGE": ("BYTES", [1]),
    "REFERENCE_AUDIO": ("FP32", [-1]),
    "REFERENCE_SAMPLE_RATE": ("INT32", [1]),
    "TEMPERATURE": ("FP32", [1]),
    "SEED": ("INT64", [1]),
}
DOORS = {"xtts": (XTTS_MODEL, False), "tts": (LONG_TEXT_MODEL, True), "tts_stream": (LONG_TEXT_MODEL, True)}
DTYPES = {"BYTES": np.object_, "FP32": np.float32, "INT64": np.int64, "BOOL": np.bool_, "INT32": np.int32}
STRANGER = "FOO"  # an input no model has

# Values that are each input's own, good or bad.
WORDS: dict[str, list[Any]] = {
    "TEXT": [b"Hi.", b"Ok.", b"", b"   ", b"\xc3\x28", "\u266a\u266a".encode(), b"<speak>Hi.</speak>"],
    "LANGUAGE": [b"en", b"en", b"EN", b"de", b"zh-cn", b"xx", b""],
    "SPEAKER": [NARRATOR.encode(), b"nobody", b"", b"../etc/passwd", b"a" * 80, b"Fresh one"],
    "VOICE": [b"", b"xtts", b"xtts", f"xtts:{NARRATOR}".encode(), b"xtts:nobody", b"xtts:", b"joe"],
    "TEXT_FORMAT": [b"text", b"auto", b"ssml", b"nope"],
}
NUMBERS = [0.0, 0.7, 1.0, -1.0, 11.0, 1e-44, 1e30, float("nan"), float("inf")]
INTEGERS = {
    "REFERENCE_SAMPLE_RATE": [RATE, RATE, 16000, 0, -1, 7999, 2**31 - 1],
    "SEED": [0, 1, -1, 2**63 - 1],
    "TOP_K": [0, 1, 50, -1],
    "SPEAKER_ID": [0, 1, 99, -1],
}
# Reference clips (FP32, mono): each kind a fixed clip, so the server conditions each once.
CLIPS = {
    "voiced": voiced_clip(5, 1.5, RATE).astype(np.float32),
    "short": voiced_clip(6, 0.05, RATE).astype(np.float32),
    "empty": np.zeros(0, np.float32),
    "silent": np.zeros(int(1.5 * RATE), np.float32),
    "nan": np.full(int(1.5 * RATE), np.nan, np.float32),
    "loud": np.full(int(1.5 * RATE), 3e38, np.float32),
}


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


# Each input's good value (what most generated requests send, so that many are served).
GOOD: dict[str, Any] = {"TEXT": b"Hi.", "LANGUAGE": b"en", "SPEAKER": NARRATOR.encode(), "VOICE": b"xtts"}
GOOD |= {"TEXT_FORMAT": b"text", "REFERENCE_SAMPLE_RATE": RATE, "SEED": 1, "TOP_K": 50, "SPEAKER_ID": 0}


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True one time in ``one_in``: at a middle value, which hypothesis does not favour as
    it favours the ends of a range."""
    return draw(st.integers(0, one_in - 1)) == one_in // 2


def _value(draw: st.DrawFn, name: str, datatype: str, good: Any = None) -> Any:
    """The input's good value (two draws in three), or any of its own values."""
    good = GOOD.get(name, 1.0) if good is None else good
    if datatype == "BOOL":
        return draw(st.booleans())
    if datatype == "BYTES":
        return (
            good
            if isinstance(good, bytes) and not rarely(draw, 3)
            else draw(st.sampled_from(WORDS.get(name, WORDS["VOICE"])))
        )
    if np.issubdtype(DTYPES[datatype], np.integer):
        info = np.iinfo(np.int32 if datatype == "INT32" else np.int64)
        value = good if not rarely(draw, 3) else draw(st.sampled_from(INTEGERS.get(name, [0, 1, -1])))
        return int(np.clip(value, info.min, info.max)) if isinstance(value, int) else 1
    return float(good) if isinstance(good, float) and not rarely(draw, 3) else draw(st.sampled_from(NUMBERS))


@st.composite
def one_input(
    draw: st.DrawFn, name: str, declared: tuple[str, list[int]], batch: int | None, good: Any = None
) -> Sent:
    """An input as declared (``batch``: its batch axis, None for a model without one), or
    now and then with another datatype or another shape."""
    datatype, dims = declared
    if rarely(draw, 15):  # mis-typed
        datatype = draw(st.sampled_from(sorted(DTYPES)))
    if name == "REFERENCE_AUDIO" and datatype == "FP32":
        clip = CLIPS["voiced" if not rarely(draw, 3) else draw(st.sampled_from(sorted(CLIPS)))]
        shape = [clip.size]
    else:
        clip, shape = None, [d if d >= 0 else draw(st.integers(0, 3)) for d in dims]
    if rarely(draw, 15):  # mis-shaped: one more or one less element, or an axis
        shape = draw(st.sampled_from([[*shape, 1], shape[:-1] or [2], [*shape[:-1], 2], [*shape[:-1], 0]]))
    if batch is not None:
        shape = [draw(st.sampled_from([0, 2])) if rarely(draw, 20) else batch, *shape]
    size = int(np.prod(shape))
    if clip is not None:
        array = np.resize(clip, size).reshape(shape)
    else:
        array = np.array([_value(draw, name, datatype, good) for _ in range(size)], dtype=DTYPES[datatype])
        array = array.reshape(shape)
    return Sent(name, datatype, array)


@st.composite
def requests(draw: st.DrawFn, door: str) -> list[Sent]:
    """A request to ``door``: TEXT and a voice (a clip and its rate, or a named speaker)
    usually, one of them left out now and then, up to two other inputs, a stranger rarely;
    each input as declared or not."""
    inputs, batched = DOORS[door]
    how = draw(st.sampled_from(["clip", "clip", "speaker", "none"]))
    chosen = [
        "TEXT",
        *{"clip": ["REFERENCE_AUDIO", "REFERENCE_SAMPLE_RATE"], "none": []}.get(how, ["SPEAKER"]),
    ]
    if door != "xtts":  # VOICE names the XTTS voice (the server's default is joe), or its speaker
        chosen = [name for name in chosen if name != "SPEAKER"] + ["VOICE"]
    if rarely(draw, 5):  # a required input or half a clip left out
        chosen.remove(draw(st.sampled_from(chosen)))
    optional = [n for n in inputs if n not in chosen]
    chosen += draw(st.lists(st.sampled_from(optional), max_size=2, unique=True))
    batch = draw(st.sampled_from([1] * 12 + [2, 0])) if batched else None
    good = {"VOICE": f"xtts:{NARRATOR}".encode()} if how == "speaker" else {}
    sent = [draw(one_input(name, inputs[name], batch, good.get(name))) for name in chosen]
    if rarely(draw, 12):
        sent.append(Sent(STRANGER, "FP32", np.ones([1] if batch is None else [1, 1], np.float32)))
    return sent


def names_an_input(message: str, sent: list[Sent], door: str) -> bool:
    """Whether a refusal names an input: one sent, or one the door takes."""
    return any(re.search(rf"\b{name}\b", message) for name in {*(s.name for s in sent), *DOORS[door][0]})


def stores(sent: list[Sent]) -> bool:
    return any(s.name == "STORE_SPEAKER" and s.datatype == "BOOL" and s.array.any() for s in sent)


def check_refusal(err: InferenceServerException, sent: list[Sent], door: str, status: str) -> None:
    message = err.message() or ""
    event(f"refused: {message[:60]}")  # shown by --hypothesis-show-statistics
    assert err.status() == status, (err.status(), message, sent)
    assert names_an_input(message, sent, door), (message, sent)


def stream_answers(url: str, door: str, sent: list[Sent]) -> list[tuple[str, Any]]:
    """One request to a decoupled ``door`` with plain tritonclient: ("chunk", last) and
    ("error", exception) in arrival order, up to the final flag, or up to an untagged error
    (Triton's refusal: nothing follows it) and a short wait that shows nothing did."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    seen: list[tuple[str, Any]] = []
    try:
        client.async_stream_infer(
            door, [s.tensor(grpcclient) for s in sent], enable_empty_final_response=True
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


# Through the server.


@pytest.fixture(scope="module")
def xtts_voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = build_xtts(
        tmp_path_factory.mktemp("xtts-ckpt"), "tiny", seed=2, max_audio_tokens=MAX_AUDIO_TOKENS
    )
    out = tmp_path_factory.mktemp("xtts-voice") / "xtts"
    export_main(["--checkpoint", str(checkpoint / "model.pth"), "--config", str(checkpoint / "config.json"),
                 "--out", str(out)])  # fmt: skip
    import soundfile as sf

    wav = tmp_path_factory.mktemp("clips") / f"{NARRATOR}.wav"
    sf.write(wav, voiced_clip(21, 3.0, 16000), 16000)
    assert cli_main(["speakers", "add", NARRATOR, str(wav), "--voice", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def xtts_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs") / "tritonserver-xtts.log"


@pytest.fixture(scope="module")
def xtts_server(
    xtts_voice: Path, xtts_log: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("xtts-repo") / "model_repository"
    with default_voice_server(repo, xtts_log, voice_dir=xtts_voice) as running:
        yield running


@pytest.mark.parametrize("door", ["xtts", "tts_stream"])
@EXAMPLES
@given(data=st.data())
def test_every_xtts_stream_ends_with_its_final_flag_or_tritons_refusal(
    xtts_server: TritonServer, door: str, data: st.DataObject
) -> None:
    sent = data.draw(requests(door))
    seen = stream_answers(xtts_server.grpc_url, door, sent)
    kinds = [kind for kind, _ in seen]
    first = seen[0][1]
    event(
        " ".join(kinds[:2])
        + (f": {first.message()[:60]}" if isinstance(first, InferenceServerException) else "")
    )
    if kinds[-1] == "final":  # the model had the request: audio ending IS_LAST, or one tagged error
        errors = [e for kind, e in seen if kind == "error"]
        if errors:
            assert kinds == ["error", "final"], seen
            message = errors[0].message()
            codes = ("[INVALID_ARG] ", "[ALREADY_EXISTS] ") if stores(sent) else ("[INVALID_ARG] ",)
            assert message.startswith(codes), message
            assert names_an_input(message, sent, door), (message, sent)
        else:
            assert kinds[-2] == "chunk" and seen[-2][1], seen  # the last chunk says IS_LAST
    else:  # refused by Triton before the model: one untagged error, nothing after it
        assert kinds == ["triton"], seen
        error = seen[0][1]
        assert error.status() is None and names_an_input(error.message(), sent, door), error


@EXAMPLES
@given(data=st.data())
def test_every_xtts_request_to_tts_is_a_success_or_a_400_naming_an_input(
    xtts_server: TritonServer, data: st.DataObject
) -> None:
    sent = data.draw(requests("tts"))
    client = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=TIMEOUT_S)
    try:
        client.infer("tts", [s.tensor(httpclient) for s in sent])
        event("served")
    except InferenceServerException as err:
        check_refusal(err, sent, "tts", "400")
    finally:
        client.close()


@EXAMPLES
@given(data=st.data())
def test_every_xtts_request_to_tts_over_grpc_is_a_success_or_invalid_argument(
    xtts_server: TritonServer, data: st.DataObject
) -> None:
    sent = data.draw(requests("tts"))
    with grpcclient.InferenceServerClient(xtts_server.grpc_url) as client:
        try:
            client.infer("tts", [s.tensor(grpcclient) for s in sent], client_timeout=TIMEOUT_S)
            event("served")
        except InferenceServerException as err:
            check_refusal(err, sent, "tts", "StatusCode.INVALID_ARGUMENT")


def test_the_server_logged_no_traceback(xtts_server: TritonServer, xtts_log: Path) -> None:
    """After every generated request above: nothing in Triton's log a server fault leaves."""
    log = xtts_log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in log
    assert "synthesis failed" not in log


def test_the_server_stops_with_every_model_unloaded(xtts_server: TritonServer, xtts_log: Path) -> None:
    """Last, after every refusal above: each model unloads when the server stops. (On
    Triton 2.51 a BLS caller never sees the end of a stream that carried an error response,
    and its stub then held tts and tts_stream for Triton's whole exit timeout, 20 s, before
    tritonserver gave up: the xtts model now answers tts and tts_stream's refusals in its
    ERROR output, RequestErrors.as_output.)"""
    xtts_server.stop()
    log = xtts_log.read_text(encoding="utf-8", errors="replace")
    assert "Exit timeout expired" not in log
    for model in ("tts", "tts_stream", "xtts", "preprocess"):
        assert f"successfully unloaded '{model}'" in log, model
