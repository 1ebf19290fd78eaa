"""One key for every way in: `triton-tts serve` with TRITON_TTS_API_KEY and an admin key,
tried at each door as a caller would (docs/api.md, "Keys").

- Triton's HTTP and gRPC inference, metadata, model config and statistics need the API
  key (the first of TRITON_TTS_API_KEY's keys), health and the probes do not;
- every other Triton API (what changes state) needs the admin key;
- the gateway takes every key, and reaches Triton with the first;
- what the product calls itself carries the keys: the loopback of first chunks, the
  capacity measurement, the gateway, the CLI, perf_analyzer through benchmarks.perf;
- no key reaches a log line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.helpers import tts_inputs, wait_until
from tests.test_lifecycle import Serve
from triton_tts.client import TTSClient, Unauthorized, auth_headers
from triton_tts.server import free_port, key_headers

pytestmark = pytest.mark.server  # its own servers (module fixtures)

API_KEYS = ("first-key-4f1c", "second-key-9a2e")  # TRITON_TTS_API_KEY="first,second"
ADMIN_KEY = "admin-key-7d03"
TEXT = "The keys are checked at every door."


@pytest.fixture(scope="module")
def keyed(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, int]]:
    gateway_port = free_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_TTS_API_KEY", ",".join(API_KEYS))
        env.setenv("TRITON_TTS_ADMIN_KEY", ADMIN_KEY)
        serve = Serve.start(voice_dir, tmp_path_factory.mktemp("keyed"), "--gateway-port", str(gateway_port))
    try:
        wait_until(lambda: "triton-tts is ready" in serve.output(), 300, "serve with keys to be ready")
        yield serve, gateway_port
    finally:
        serve.stop()
        serve.close()


def request(url: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return int(response.status), response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", errors="replace")


def infer_body() -> bytes:
    tensor = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}
    return json.dumps({"inputs": [tensor]}).encode()


def test_triton_http_needs_the_first_key_and_health_stays_open(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    base = f"http://localhost:{serve.http_port}"
    for path in ("/v2/health/ready", "/v2/health/live", "/v2/models/tts/ready"):
        assert request(base + path)[0] == 200, path
    infer = f"{base}/v2/models/tts/infer"
    refused, message = request(infer, body=infer_body())
    assert refused == 403 and "authorization" in message
    assert request(infer, {"Authorization": "Bearer wrong"}, infer_body())[0] == 403
    # Triton compares one header value: the gateway's other keys do not open its ports
    assert request(infer, {"Authorization": f"Bearer {API_KEYS[1]}"}, infer_body())[0] == 403
    status, answer = request(infer, {"Authorization": f"Bearer {API_KEYS[0]}"}, infer_body())
    assert status == 200 and json.loads(answer)["outputs"]
    for path in ("/v2", "/v2/models/tts", "/v2/models/tts/config"):  # metadata, config
        assert request(base + path)[0] == 403, path
        assert request(base + path, {"authorization": f"Bearer {API_KEYS[0]}"})[0] == 200, path


def test_triton_grpc_needs_the_key(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    url = f"localhost:{serve.grpc_port}"
    raw = grpcclient.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            raw.infer("tts", tts_inputs(grpcclient, TEXT))
        assert raw.is_server_ready() and raw.is_model_ready("tts")  # health: open
        result = raw.infer("tts", tts_inputs(grpcclient, TEXT), headers=auth_headers(API_KEYS[0], "grpc"))
        assert result.as_numpy("AUDIO").size > 0
    finally:
        raw.close()
    with TTSClient(url, "grpc", api_key="wrong") as wrong, pytest.raises(Unauthorized, match="API key"):
        wrong.synthesize(TEXT)
    http_url = f"localhost:{serve.http_port}"
    with TTSClient(http_url, "http", api_key="wrong") as wrong, pytest.raises(Unauthorized):
        wrong.voices()


def test_the_client_library_carries_the_key_and_first_chunks_keep_their_path(
    keyed: tuple[Serve, int],
) -> None:
    """A stream's first chunk goes back to Triton's gRPC port with a priority (the
    loopback, triton_tts/loopback.py): it carries the key, or chunks fall back to BLS
    without priority and the log says so."""
    serve, _ = keyed
    with TTSClient(f"localhost:{serve.grpc_port}", "grpc", api_key=API_KEYS[0]) as client:
        assert [v.name for v in client.voices()]
        chunks = list(client.stream(TEXT + " " + TEXT))
        whole = client.synthesize(TEXT)
    assert chunks and chunks[-1].is_last and whole.duration_s > 1
    # the environment's key is the default (the first of a comma-separated list)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_TTS_API_KEY", ",".join(API_KEYS))
        with TTSClient(f"localhost:{serve.http_port}", "http") as client:
            assert client.synthesize(TEXT).duration_s > 1
    assert "chunks go without priority" not in serve.triton_log()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/logging", None),
        ("/v2/logging", b'{"log_verbose_level": 1}'),
        ("/v2/trace/setting", b'{"trace_level": ["TIMESTAMPS"]}'),
        ("/v2/systemsharedmemory/status", None),
        ("/v2/systemsharedmemory/region/probe/register", b'{"key": "/probe", "offset": 0, "byte_size": 64}'),
        ("/v2/cudasharedmemory/status", None),
        ("/v2/repository/index", b"{}"),
        ("/v2/repository/models/acoustic/unload", b"{}"),
    ],
)
def test_admin_apis_need_the_admin_key(keyed: tuple[Serve, int], path: str, body: bytes | None) -> None:
    serve, _ = keyed
    url = f"http://localhost:{serve.http_port}{path}"
    status, message = request(url, {"Authorization": f"Bearer {API_KEYS[0]}"}, body)
    assert status == 403 and "triton-tts-admin" in message, (status, message)


def test_the_admin_key_opens_them_over_http_and_grpc(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    admin = {"triton-tts-admin": ADMIN_KEY}
    assert request(f"http://localhost:{serve.http_port}/v2/logging", admin)[0] == 200
    grpc = grpcclient.InferenceServerClient(f"localhost:{serve.grpc_port}")
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.get_log_settings(headers=auth_headers(API_KEYS[0], "grpc"))
        assert "log_verbose_level" in str(grpc.get_log_settings(headers=key_headers(None, ADMIN_KEY, "grpc")))
    finally:
        grpc.close()


def test_statistics_take_the_api_key(keyed: tuple[Serve, int]) -> None:
    """Counts and times, no secret (the metrics port shows as much): whoever may run
    inference may read them, as perf_analyzer must; without the key they stay closed."""
    serve, _ = keyed
    stats = f"http://localhost:{serve.http_port}/v2/models/tts/stats"
    assert request(stats, {})[0] == 403
    status, body = request(stats, {"Authorization": f"Bearer {API_KEYS[0]}"})
    assert status == 200 and json.loads(body)["model_stats"][0]["name"] == "tts"
    grpc = grpcclient.InferenceServerClient(f"localhost:{serve.grpc_port}")
    try:
        answer = grpc.get_inference_statistics("tts", headers=auth_headers(API_KEYS[0], "grpc"), as_json=True)
        assert answer["model_stats"][0]["name"] == "tts"
    finally:
        grpc.close()


def test_the_gateway_takes_every_key_and_reaches_triton_with_one(keyed: tuple[Serve, int]) -> None:
    _, gateway_port = keyed
    base = f"http://localhost:{gateway_port}/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).audio.speech.create(
            model="tts-1", voice="joe", input=TEXT, response_format="wav"
        )
    for key in API_KEYS:
        speech = openai.OpenAI(base_url=base, api_key=key, max_retries=0).audio.speech.create(
            model="tts-1", voice="joe", input=TEXT, response_format="pcm"
        )
        assert np.frombuffer(speech.content, dtype=np.int16).size > 24_000  # over 1 s at 24 kHz


def test_the_cli_takes_the_key(keyed: tuple[Serve, int], tmp_path: Path) -> None:
    serve, _ = keyed
    env = {k: v for k, v in os.environ.items() if k != "TRITON_TTS_API_KEY"}
    base = [sys.executable, "-m", "triton_tts.cli", "say", TEXT, "--url", f"localhost:{serve.http_port}"]
    refused = subprocess.run(
        [*base, "-o", str(tmp_path / "no.wav")], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1 and "API key" in refused.stderr
    done = subprocess.run(
        [*base, "--api-key", API_KEYS[0], "-o", str(tmp_path / "yes.wav")],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "yes.wav").stat().st_size > 20_000


@pytest.mark.parametrize(
    ("protocol", "header"),
    [
        ("http", f"Authorization: Bearer {API_KEYS[0]}"),  # as users write it first
        ("grpc", f"triton-grpc-protocol-authorization:Bearer {API_KEYS[0]}"),  # docs/performance.md
    ],
)
def test_perf_analyzer_runs_with_the_api_key_alone(
    keyed: tuple[Serve, int], tmp_path: Path, protocol: str, header: str
) -> None:
    """perf_analyzer reads tts's metadata, config and Triton's statistics before it sends:
    with the API key in the form docs/performance.md gives (and without it: refused)."""
    from benchmarks import perf

    serve, _ = keyed
    data = perf.write_input_data(tmp_path / "input.json", [TEXT])
    url = f"localhost:{serve.http_port if protocol == 'http' else serve.grpc_port}"
    with pytest.raises(RuntimeError, match=r"restricted|403|Forbidden"):
        perf.run_level(url, protocol, data, "concurrency", 1, 2)
    row = perf.run_level(url, protocol, data, "concurrency", 1, 2, header_lines=[header])
    assert row["requests_per_s"] > 0


def test_no_key_reaches_a_log_line(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    logs = serve.output() + serve.triton_log()
    assert "triton-tts is ready" in serve.output() and "Started GRPCInferenceService" in serve.triton_log()
    for key in (*API_KEYS, ADMIN_KEY):
        assert key not in logs, f"a key is in the log: {key}"
