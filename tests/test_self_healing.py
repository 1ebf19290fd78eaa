"""A dead Python-backend instance heals, through the real server and ``kill -9``.

The server runs as ``triton-tts serve`` runs it (triton_tts.ops.server.supervised: watchdog,
health endpoint, model control behind a key), with clients sending traffic while one
stub is killed, as the OOM killer would.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import tts_inputs, wait_until
from triton_tts.client import auth_headers
from triton_tts.ops.keys import ADMIN_HEADER
from triton_tts.ops.lifecycle import supervised
from triton_tts.ops.repository import build_repository
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.ops.watchdog import Watchdog, model_of, stub_instances

# Server tests are those that ask for a server (tests/conftest.py); the rest run in `make test-unit`.
SERVER_FIXTURES = {"healing"}  # this module's own server

HEAL_WITHIN_S = 30.0
KEY = "test-admin-key"
# Healing with both keys set, as `triton-tts serve` runs with TRITON_TTS_API_KEY: the
# watchdog reads a model's config with the API key and reloads it with the admin key.
API_KEY = "test-api-key"
CALLER = auth_headers(API_KEY, "http")


def health(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://localhost:{port}/ready", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


@pytest.fixture(scope="module")
def healing(
    voice_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TritonServer, Watchdog, int]]:
    repo = build_repository([voice_dir], tmp_path_factory.mktemp("healing") / "model_repository")
    health_port = free_port()
    server = TritonServer(
        repo,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        admin_key=KEY,
        api_key=API_KEY,
        log_file=tmp_path_factory.mktemp("logs") / "tritonserver-healing.log",
    )
    with server, supervised(server, health_port) as watchdog:
        yield server, watchdog, health_port


def test_model_control_is_closed_to_clients(healing) -> None:
    server, _, _ = healing
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/repository/models/acoustic/unload", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403 and ADMIN_HEADER in refused.value.read().decode()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as grpc_refused:
        client.unload_model("acoustic")
    assert "restricted" in grpc_refused.value.message().lower()
    assert client.is_model_ready("acoustic")
    client.close()


@pytest.mark.parametrize("instance", ["acoustic_0_1", "preprocess_0_0"])
def test_a_killed_instance_heals_and_readiness_tells(healing, instance: str) -> None:
    """kill -9 of one stub: /ready turns 503 at once, the model is reloaded in the
    background, /ready is 200 again within 30 s and every request succeeds from then on;
    meanwhile only requests routed to the dead stub fail (the other instances serve)."""
    server, watchdog, health_port = healing
    assert health(health_port) == 200
    outcomes: list[tuple[float, str]] = []  # (time sent, "ok" or the error message)
    stop = threading.Event()

    def traffic() -> None:  # one client per thread: tritonclient.http's are not thread-safe
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        while not stop.is_set():
            sent = time.monotonic()
            try:
                client.infer(
                    "tts_chunk",
                    tts_inputs(httpclient, "Traffic keeps flowing."),
                    headers=CALLER,
                    parameters=server.internal_parameters(),
                )
                outcomes.append((sent, "ok"))
            except InferenceServerException as err:
                outcomes.append((sent, err.message()))
        client.close()

    workers = [threading.Thread(target=traffic) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: len(outcomes) >= 2, 120, "traffic before the kill")
        assert server.process is not None
        victim = stub_instances(server.process.pid)[instance]
        heals_before = len(watchdog.heals)
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        # never ready while an instance is dead (healing takes seconds; this sees it first)
        wait_until(lambda: health(health_port) == 503, 10, "/ready to report the dead instance")
        while health(health_port) != 200:
            assert time.monotonic() - killed < HEAL_WITHIN_S, "not healed in time"
            time.sleep(0.2)
        healed = time.monotonic()
        wait_until(lambda: sum(at >= healed for at, _ in outcomes) >= 4, 120, "traffic after the heal")
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert [model for model, _ in watchdog.heals[heals_before:]] == [model_of(instance)]
    during = [message for at, message in outcomes if killed <= at < healed]
    after = [message for at, message in outcomes if at >= healed]
    assert after and all(message == "ok" for message in after), after
    failed = [message for message in during if message != "ok"]
    assert all("is not healthy" in message or "Stub" in message for message in failed), failed
    if instance == "acoustic_0_1":  # two instances: the survivor kept serving
        assert "ok" in during, during
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    results = [
        client.infer(
            "tts_chunk",
            tts_inputs(httpclient, f"Healed {i}."),
            headers=CALLER,
            parameters=server.internal_parameters(),
        )
        for i in range(8)
    ]
    assert all(r.as_numpy("AUDIO").size > 0 for r in results)
    assert client.is_server_ready()
    client.close()


def test_instances_are_read_from_the_process_table(tmp_path: Path) -> None:
    """The /proc parsing on a fake table: children of the server only, zombies are dead,
    the instance name is the stub's ninth argument."""

    def process(pid: int, ppid: int, state: str, args: list[str]) -> None:
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "stat").write_text(f"{pid} (stub name) {state} {ppid} 1 1", encoding="utf-8")
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")

    stub = ["/x/triton_python_backend_stub", "/r/acoustic/1/model.py", "shm", "1", "1", "9", "/x", "336"]
    process(10, 1, "S", [*stub, "acoustic_0_0", "DEFAULT"])
    process(11, 1, "Z", [])  # a killed stub nobody reaped
    process(12, 1, "S", [*stub[:1], "/r/vocoder__ljs/1/model.py", *stub[2:], "vocoder__ljs_0_1", "DEFAULT"])
    process(13, 2, "S", [*stub, "acoustic_0_1", "DEFAULT"])  # another server's
    process(14, 1, "S", ["/usr/bin/python3", "-c", "pass"])
    (tmp_path / "self").mkdir()
    assert stub_instances(1, tmp_path) == {"acoustic_0_0": 10, "vocoder__ljs_0_1": 12}
    assert model_of("vocoder__ljs_0_1") == "vocoder__ljs" and model_of("tts_stream_0_0") == "tts_stream"
