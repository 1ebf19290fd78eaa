"""Helpers shared by the tests: one ensemble call over HTTP or gRPC, waiting on a condition,
hand-worked chunk counts, and how a crashed tritonserver shows."""

from __future__ import annotations

import queue
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

DETERMINISTIC = {"NOISE_SCALE": 0.0, "NOISE_W": 0.0}
T = TypeVar("T")


def tts_inputs(lib: Any, text: str | bytes, **scalars: float | int | str | bool) -> list[Any]:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    tensor = lib.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[raw]], dtype=np.object_))
    inputs = [tensor]
    for name, value in scalars.items():
        if name in ("VOICE", "TEXT_FORMAT"):
            t = lib.InferInput(name, [1, 1], "BYTES")
            t.set_data_from_numpy(np.array([[str(value).encode()]], dtype=np.object_))
        elif name == "SPEAKER_ID":
            t = lib.InferInput(name, [1, 1], "INT64")
            t.set_data_from_numpy(np.array([[value]], dtype=np.int64))
        elif name in ("NORMALIZE", "TIMESTAMPS"):
            t = lib.InferInput(name, [1, 1], "BOOL")
            t.set_data_from_numpy(np.array([[value]], dtype=np.bool_))
        else:
            t = lib.InferInput(name, [1, 1], "FP32")
            t.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        inputs.append(t)
    return inputs


def synthesize(client: Any, text: str | bytes, **scalars: Any) -> tuple[npt.NDArray[np.float32], int]:
    lib = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    result = client.infer("tts", tts_inputs(lib, text, **scalars))
    audio = result.as_numpy("AUDIO").reshape(-1)
    rate = int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
    return audio, rate


def model_counts(
    client: httpclient.InferenceServerClient, model: str, headers: dict[str, str] | None = None
) -> tuple[int, int]:
    """(inference_count, execution_count) from Triton's own statistics (``headers``: the
    admin key of a server that restricts them, as `triton-tts serve` does)."""
    stats = client.get_inference_statistics(model, headers=headers)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def wait_until(condition: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy, and return that. Past
    ``timeout_s`` the test fails naming ``what``: a deadline for a hang, not a claim
    about speed."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)  # the polling interval, not a wait for something to happen
    return result


def metric_total(metrics_port: int | str, name: str, **labels: str) -> float:
    """The sum of every series of ``name`` that has ``labels``, on Triton's metrics port
    (a port number) or at a metrics URL (the gateway's)."""
    url = metrics_port if isinstance(metrics_port, str) else f"http://localhost:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as page:
        text = page.read().decode("utf-8")
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] == name and all(label in series for label in wanted):
            total += float(value)
    return total


def gateway_outcomes(base: str, api: str) -> dict[str, float]:
    """The gateway's triton_tts_gateway_requests_total for one API (http, websocket), by
    outcome."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as page:
        text = page.read().decode("utf-8")
    counts: dict[str, float] = {}
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if series.startswith("triton_tts_gateway_requests_total{") and f'api="{api}"' in series:
            outcome = series.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = counts.get(outcome, 0.0) + float(value)
    return counts


# PARAGRAPH's chunks, worked out by hand from the rules (docs/api.md, "Long text and
# streaming": the first sentence alone, then as many whole sentences as fit in 400
# characters), so that served chunk counts are checked against the rules and never
# against split_text itself. Its six sentences have no abbreviations, decimals or quotes:
# each ends at ". " (tests/test_chunking.py checks these lengths and counts).
PARAGRAPH_SENTENCE_LENGTHS = (39, 134, 96, 113, 117, 100)
PARAGRAPH_CHUNKS = 3  # tts: 39 | 134 96 113 (345 with the spaces) | 117 100 (218)


def paragraph_chunks(copies: int) -> int:
    """tts's chunks of ``copies`` PARAGRAPHs joined by spaces. Sentence 1 is the first chunk;
    from sentence 2 on they pack as [2 3 4] 345, [5 6 1 2] 393, [3 4 5] 328, [6 1 2 3]
    372, [4 5 6 1] 372 characters: five chunks for every 18 sentences, then the same
    again from sentence 2. A last, partial round has a chunk for each of these starts it
    reaches."""
    starts = (0, 3, 7, 10, 14)  # the round's chunks start at its 1st, 4th, 8th, 11th, 15th sentence
    rounds, left = divmod(6 * copies - 1, 18)
    return 1 + 5 * rounds + sum(start < left for start in starts)


# Each sentence's clauses (cut after ",;:"), where a stream's ramped chunk limit may cut it.
PARAGRAPH_CLAUSE_LENGTHS = ((39,), (42, 91), (46, 49), (32, 9, 17, 52), (42, 74), (56, 43))
STREAM_PARAGRAPH_CHUNKS = 7  # tts_stream: 39 | 42 | 91 | 96 | 113 | 117 | 100
FIRST_CHARS, MAX_CHARS, GROWTH = 40, 120, 2  # a stream's plan (model_configs.BuildOptions)


def stream_paragraph_chunks(copies: int) -> int:
    """tts_stream's chunks of ``copies`` PARAGRAPHs joined by spaces, by the rules of its
    plan: sentence 1 (39 characters) is the first chunk; each later chunk takes whole
    sentences while they fit in its limit, GROWTH x the characters before it (at least
    FIRST_CHARS, at most MAX_CHARS); a sentence longer than the limit goes clause by clause."""
    sentences = [PARAGRAPH_CLAUSE_LENGTHS[k % 6] for k in range(6 * copies)]
    said, count, length = sentences[0][0], 1, 0

    def limit() -> int:
        return min(MAX_CHARS, max(FIRST_CHARS, GROWTH * said))

    for clauses in sentences[1:]:
        whole = sum(clauses) + len(clauses) - 1
        for piece in [whole] if whole <= limit() else list(clauses):
            if length and length + 1 + piece > limit():
                said, count, length = said + length, count + 1, piece
            else:
                length = length + 1 + piece if length else piece
    return count + (1 if length else 0)


def assert_says_as_long(streamed: npt.NDArray[np.float32], whole: npt.NDArray[np.float32]) -> None:
    """A stream's audio against tts's for the same text: the stream is cut into more, shorter
    chunks (a short first chunk, the ramp, then at most 120 characters: an edge at nearly
    every sentence), so their joins differ, but the speech is the same, within the pauses
    those edges add or take (measured: +3.6 to +4.4% in English, -3.7% in Mandarin; 6%)."""
    assert np.isfinite(streamed).all() and streamed.size > 0
    assert abs(streamed.size - whole.size) <= 0.06 * whole.size, (streamed.size, whole.size)


# How tritonserver shows a crash: a fatal signal's message and stack trace, a failed stop,
# a Python-backend stub that saw its server die. SIGINT (2) and SIGTERM (15) are the
# normal stop and are logged the same way.
CRASH_SIGNS = re.compile(
    r"^Signal \((?!2\)|15\))\d+\) received|^\s*\d+# .* in /|Segmentation fault|core dumped"
    r"|terminate called|Fatal Python error|failed to stop server|Non-graceful termination",
    re.MULTILINE,
)


def shutdown_problems(returncode: int | None, log: str) -> list[str]:
    """What went wrong when tritonserver stopped: a non-zero exit code (negative: killed
    by that signal), or the lines of its log that show a crash. [] for a clean stop."""
    problems = [] if returncode == 0 else [f"tritonserver exit code {returncode}"]
    return problems + [match.group(0).strip() for match in CRASH_SIGNS.finditer(log)]


def dims_compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Triton's rule for two shapes that must agree (ensemble steps, a request against a
    config): same rank, and each dim equal unless either side is -1 (any size)."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


TACOTRON_STEPS = 40  # a random-weight decoder may never stop: keep the guard short
TACOTRON_STOP_SHIFT = -0.3  # and nudge its stop token (see tests/test_coqui_tacotron2.py)


def export_random_coqui_voice(
    root: Path, family: str, vocoder_family: str | None, speakers: int, folder: Path
) -> Any:
    """A random-weight Coqui checkpoint of ``family`` (and vocoder), loaded the way users
    load theirs and exported to the voice folder ``folder``; returns Coqui's loaded model.
    Tacotron2 gets a short decoder guard and a nudged stop token so that it stops."""
    import torch

    from testkit.coqui_checkpoints import build_tts, build_vocoder
    from triton_tts.export.coqui.export import export_coqui
    from triton_tts.export.coqui.loading import load

    saved = build_tts(family, root / "tts", speakers=speakers)
    vocoder = build_vocoder(vocoder_family, root / "vocoder") if vocoder_family else None
    loaded = load(
        checkpoint=saved.checkpoint,
        config=saved.config,
        vocoder_checkpoint=vocoder.checkpoint if vocoder else None,
        vocoder_config=vocoder.config if vocoder else None,
    )
    if family == "tacotron2":
        with torch.no_grad():
            loaded.tts.decoder.stopnet[1].linear_layer.bias.add_(TACOTRON_STOP_SHIFT)
        loaded.tts.decoder.max_decoder_steps = loaded.tts.config.max_decoder_steps = TACOTRON_STEPS
    export_coqui(loaded, folder)
    return loaded


def timed_words(result: Any) -> list[tuple[str, float, float]]:
    """A response's WORDS and WORD_TIMES as (word, start, end); [] when it has none."""
    words = result.as_numpy("WORDS")
    if words is None:
        return []
    times = result.as_numpy("WORD_TIMES").reshape(-1, 2)
    return [
        (w.decode("utf-8"), float(t[0]), float(t[1])) for w, t in zip(words.reshape(-1), times, strict=True)
    ]


def stream_raw(url: str, text: str, **scalars: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """tts_stream as a user calls it with plain tritonclient: every response, in arrival order."""
    return stream_model(url, "tts_stream", tts_inputs(grpcclient, text, **scalars))


def stream_model(
    url: str, model: str, inputs: list[Any], parameters: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """One request to a decoupled ``model`` with plain tritonclient (and request
    ``parameters``): its chunks (audio, rate, index, last, words; a response with the ERROR
    output as {"ERROR": its message}) and its error responses' messages, in arrival order."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks: list[dict[str, Any]] = []
    errors = []
    try:
        client.async_stream_infer(model, inputs, parameters=parameters, enable_empty_final_response=True)
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                errors.append(error.message())
                continue
            response = result.get_response()
            if any(output.name == "ERROR" for output in response.outputs):
                chunks.append({"ERROR": result.as_numpy("ERROR").reshape(-1)[0].decode()})
            elif response.outputs:
                chunks.append(
                    {
                        "audio": result.as_numpy("AUDIO").reshape(-1),
                        "rate": int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]),
                        "index": int(result.as_numpy("CHUNK_INDEX").reshape(-1)[0]),
                        "last": bool(result.as_numpy("IS_LAST").reshape(-1)[0]),
                        "words": timed_words(result),
                    }
                )
            if response.parameters["triton_final_response"].bool_param:
                return chunks, errors
    finally:
        client.stop_stream()
        client.close()


@contextmanager
def running_gateway(
    grpc_url: str, *args: str, env: dict[str, str] | None = None, ready: bool = True
) -> Iterator[str]:
    """``triton-tts gateway`` as users start it, its own process in front of the Triton at
    ``grpc_url``, on a free port. Yields its base URL once /health/ready answers 200
    (``ready`` False: once /health/live does); stops it with SIGTERM, as Kubernetes does,
    and checks that it stopped cleanly. ``env`` is added to this process's environment."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    from triton_tts.ops.server import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "triton_tts.cli", "gateway", "--port", str(port), "--triton-url", grpc_url]
    if "--riva-port" not in args:  # a free one: gateways started side by side never share Riva's 50051
        cmd += ["--riva-port", str(free_port())]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log:
        process = subprocess.Popen(
            [*cmd, *args], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

        def output() -> str:
            log.seek(0)
            return log.read()[-4000:]

        probe = f"{base}/health/ready" if ready else f"{base}/health/live"
        try:
            wait_until(lambda: process.poll() is not None or _status(probe) == 200, 120, probe)
            assert process.poll() is None, f"the gateway exited with {process.returncode}:\n{output()}"
            yield base
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: -15 is a clean stop.
        stopped = process.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in output()
        assert stopped, f"the gateway did not stop cleanly ({process.returncode}):\n{output()}"


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0
