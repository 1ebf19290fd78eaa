"""The mission's own tools on a plain `triton-tts serve` (what `make serve` runs: no keys,
the shipped budgets), as a new user would point them at it.

- perf_analyzer, gRPC and HTTP, ``-m tts`` and streaming ``-m tts_stream``, at concurrency
  up to 64, completes: nothing refused, no header needed (statistics are a caller's API);
- a burst of 64 raw tritonclient callers, each a text of one to three sentences, is served
  whole (queued within the default budget, not refused);
- a request that states a deadline its wait would pass is refused at once, with a hint,
  while one that states none is queued and served (admission by the caller's deadline);
- the shipped Locust scenario at 32 users has no failures.

Outcomes only: the figures (refusal shares and latencies side by side with admission off)
are benchmarks/admission.py's.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from testkit.sample_texts import PARAGRAPH, SENTENCES
from tests.helpers import tts_inputs
from tests.test_lifecycle import Serve
from tests.test_overload import flood
from triton_tts.client.tts_client import retry_hint

pytestmark = pytest.mark.server  # its own `triton-tts serve` (a module fixture)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plain(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """`triton-tts serve` as `make serve` runs it: the default build, no keys set."""
    env_keys = {k: os.environ.pop(k) for k in ("TRITON_TTS_API_KEY",) if k in os.environ}
    serve = Serve.start(voice_dir, tmp_path_factory.mktemp("plain"), "--gateway-port", "0")
    try:
        serve.wait_ready()
        yield serve
    finally:
        serve.stop()
        os.environ.update(env_keys)


def perf_analyzer(serve: Serve, protocol: str, model: str, concurrency: int, data: Path) -> str:
    """One perf_analyzer level as the docs write it; its output (it exits non-zero on the
    first failed request)."""
    from benchmarks.perf import perf_analyzer_binary, perf_analyzer_env

    port = serve.grpc_port if protocol == "grpc" else serve.http_port
    cmd = [
        perf_analyzer_binary(), "-m", model, "-u", f"localhost:{port}", "-i", protocol,
        "--input-data", str(data), "--shape", "TEXT:1",
        "--concurrency-range", f"{concurrency}:{concurrency}",
        # one window: a request for every concurrent caller
        "--request-count", str(max(concurrency, 4)),
    ]  # fmt: skip
    if model == "tts_stream":
        cmd.append("--streaming")
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=perf_analyzer_env(), check=False, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"perf_analyzer {protocol} {model} at {concurrency}:\n{output[-3000:]}"
    return output


@pytest.fixture(scope="module")
def one_sentence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmarks.perf import write_input_data

    return write_input_data(tmp_path_factory.mktemp("perf") / "one_sentence.json", [SENTENCES[1]])


@pytest.mark.parametrize(
    ("protocol", "model", "levels"),
    [
        ("grpc", "tts", (1, 16, 32, 64)),
        ("http", "tts", (64,)),
        ("grpc", "tts_stream", (64,)),
    ],
)
def test_perf_analyzer_runs_on_the_defaults(
    plain: Serve, one_sentence: Path, protocol: str, model: str, levels: tuple[int, ...]
) -> None:
    for concurrency in levels:
        output = perf_analyzer(plain, protocol, model, concurrency, one_sentence)
        assert "Throughput:" in output, output[-2000:]


def test_a_burst_of_64_short_texts_is_served_whole(plain: Serve) -> None:
    """64 callers at once, each one to three sentences, no retries: none refused."""
    rng = np.random.default_rng(7)
    texts = [
        " ".join(SENTENCES[int(i)] for i in rng.choice(len(SENTENCES), size=n))
        for n in rng.integers(1, 4, 64)
    ]
    counter = iter(range(64))
    lock = threading.Lock()

    def caller() -> None:
        with lock:
            index = next(counter)
        lib: Any = grpcclient if index % 2 else httpclient
        url = f"localhost:{plain.grpc_port if index % 2 else plain.http_port}"
        client: Any = (
            grpcclient.InferenceServerClient(url)
            if index % 2
            else httpclient.InferenceServerClient(url, network_timeout=600)
        )
        try:
            audio.append(client.infer("tts", tts_inputs(lib, texts[index])).as_numpy("AUDIO").size)
        finally:
            client.close()

    audio: list[int] = []
    outcomes = flood(64, caller)
    assert [o for o in outcomes if o[0] != "ok"] == []
    assert len(audio) == 64 and min(audio) > 22050 // 2, audio  # every caller has its speech


def test_a_deadline_the_wait_would_pass_is_refused_at_once(plain: Serve) -> None:
    """With paragraphs admitted ahead, a sentence that will wait at most 0.2 s (Triton's
    request timeout, or the max_wait_ms parameter) is refused before any of them is
    answered; the same sentence stating no deadline is queued and served."""
    url = f"localhost:{plain.grpc_port}"
    done: list[float] = []

    def paragraph() -> None:
        client = grpcclient.InferenceServerClient(url)
        try:
            client.infer("tts", tts_inputs(grpcclient, PARAGRAPH))
            done.append(time.monotonic())
        finally:
            client.close()

    backlog = [threading.Thread(target=paragraph) for _ in range(2)]
    for thread in backlog:
        thread.start()
    time.sleep(1.0)  # admitted by now
    client = grpcclient.InferenceServerClient(url)
    try:
        for deadline in ({"timeout": 200_000}, {"parameters": {"max_wait_ms": 200}}):
            with pytest.raises(Exception, match=r"its budget: 0\.2 s") as refused:
                client.infer("tts", tts_inputs(grpcclient, SENTENCES[0]), **deadline)
            assert (
                "StatusCode.UNAVAILABLE" in str(refused.value) and (retry_hint(str(refused.value)) or 0) > 0
            )
            refused_at = time.monotonic()
            assert not done, "refused only after a paragraph ahead was answered"
        patient = client.infer("tts", tts_inputs(grpcclient, SENTENCES[0]))
        assert patient.as_numpy("AUDIO").size > 22050 // 2  # its speech (under a second)
    finally:
        client.close()
        for thread in backlog:
            thread.join()
    assert min(done) > refused_at


def test_a_bad_max_wait_is_the_callers_error(plain: Serve) -> None:
    client = grpcclient.InferenceServerClient(f"localhost:{plain.grpc_port}")
    try:
        for bad in (-5, "soon", 0):
            with pytest.raises(Exception, match="max_wait_ms must be a positive") as refused:
                client.infer("tts", tts_inputs(grpcclient, SENTENCES[0]), parameters={"max_wait_ms": bad})
            assert "INVALID_ARGUMENT" in str(refused.value)
    finally:
        client.close()


def test_the_locust_scenario_has_no_failures_at_32_users(plain: Serve, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "locustfile.py"), "--headless",
            "-u", "32", "-r", "32", "-t", "15s", "--host", f"localhost:{plain.http_port}",
            "--grpc-url", f"localhost:{plain.grpc_port}", "--csv", str(tmp_path / "locust"),
            "--only-summary", "--stop-timeout", "60",
        ],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    with open(tmp_path / "locust_stats.csv", encoding="utf-8") as f:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(f)}
    failures = {name: int(row["Failure Count"]) for (_, name), row in rows.items()}
    assert int(rows[("", "Aggregated")]["Request Count"]) > 32, done.stderr[-2000:]
    assert failures["Aggregated"] == 0, (failures, done.stderr[-3000:])
