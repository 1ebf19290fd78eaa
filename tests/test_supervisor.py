"""A supervisor no stage can take down: `triton-tts serve` as users run it, with real
``kill -9`` of Python-backend stubs at start-up and under load, and of serve itself.

One serve process for the module (its tests run in order, on the same server): a stub
killed during warm-up and another during the capacity measurement do not end serve,
Triton's own readiness stays false while serve measures itself, five kill-and-heal
cycles under traffic leave /dev/shm as it was, and ``kill -9`` of serve ends tritonserver,
its stubs, its shared memory and its run folder.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import model_counts, synthesize, tts_inputs, wait_until
from tests.test_lifecycle import Serve
from triton_tts.ops.server import READY_TIMEOUT_S
from triton_tts.ops.watchdog import LINGER_S, stub_instances

pytestmark = pytest.mark.server  # its own serve process (a module fixture)

SHM = Path("/dev/shm")  # the machine's: serve gives tritonserver a /dev/shm of its own
GONE_WITHIN_S = 10.0  # "within seconds": a deadline for a hang, not a speed claim
HEAL_WITHIN_S = 120.0
WARMUP = re.compile(r"model 'vocoder' instance (vocoder_0_\d) is running warmup sample")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def tritonserver_of(serve: Serve) -> int:
    def found() -> int:
        return next((p for p in children(serve.process.pid) if cmdline(p)[0].endswith("tritonserver")), 0)

    return wait_until(found, 60, "serve to start tritonserver")


def shm_prefix(triton_pid: int) -> str:
    flag = "--backend-config=python,shm-region-prefix-name="
    return next(a[len(flag) :] for a in cmdline(triton_pid) if a.startswith(flag))


def run_dir(triton_pid: int) -> Path:
    environ = Path(f"/proc/{triton_pid}/environ").read_bytes().decode(errors="replace").split("\0")
    admission = next(v.partition("=")[2] for v in environ if v.startswith("TRITON_TTS_ADMISSION_DIR="))
    return Path(admission).parent


def regions(prefix: str, triton_pid: int) -> list[int]:
    """The sizes of the run's shared-memory regions, sorted: in tritonserver's own /dev/shm
    (its mount namespace's, seen through /proc; none once it is gone) and the machine's."""
    own = Path(f"/proc/{triton_pid}/root") / SHM.relative_to("/")
    found = [*own.glob(f"{prefix}*"), *SHM.glob(f"{prefix}*")]
    return sorted(region.stat().st_size for region in found)


@pytest.fixture(scope="module")
def serve(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    started = Serve.start(voice_dir, tmp_path_factory.mktemp("supervisor"), "--log-verbose", "1")
    try:
        yield started
    finally:
        started.close()


def test_stubs_killed_at_start_up_do_not_end_serve(serve: Serve) -> None:
    """A vocoder stub killed while it warms up, an acoustic stub killed while serve measures
    its capacity: serve heals both, turns ready and synthesises. Triton's own
    /v2/health/ready is polled throughout: never 200 while the measurement's requests run."""
    triton = tritonserver_of(serve)
    # warm-up: the first vocoder instance Triton says is warming up
    warming = wait_until(
        lambda: WARMUP.search(serve.triton_log()) if serve.log.exists() else None,
        READY_TIMEOUT_S, "a vocoder warm-up",
    )  # fmt: skip
    assert warming is not None
    victim = stub_instances(triton).get(warming[1])
    if victim:
        os.kill(victim, signal.SIGKILL)
    ready_url = f"http://localhost:{serve.http_port}/v2/health/ready"
    stats = httpclient.InferenceServerClient(f"localhost:{serve.http_port}")
    killed_in_measurement = False
    measured_unready = 0  # polls that saw the measurement's requests and Triton unready
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while (status := serve.status(ready_url)) != 200:
            assert time.monotonic() < deadline, "serve not ready in time"
            try:
                made = model_counts(stats, "tts_chunk")[0] if status is not None else 0
            except (InferenceServerException, OSError):
                made = 0  # tts_chunk not loaded yet (its vocoder heals), or no answer yet
            if made:
                measured_unready += status is not None
                # tritonserver may be a second one (2.51 can crash when a stub dies in warm-up)
                victim = stub_instances(tritonserver_of(serve)).get("acoustic_0_0")
                if not killed_in_measurement and victim:
                    os.kill(victim, signal.SIGKILL)
                    killed_in_measurement = True
            time.sleep(0.05)
    finally:
        stats.close()
    assert killed_in_measurement and measured_unready, measured_unready
    output = serve.output()
    assert serve.process.poll() is None, output
    assert "measurement 1 of 3 failed" in output, output[-3000:]
    assert "capacity of voice joe:" in output  # measured on a later try
    client = httpclient.InferenceServerClient(f"localhost:{serve.http_port}", network_timeout=120)
    try:
        audio, rate = synthesize(client, "Healed before it was ready.")
    finally:
        client.close()
    assert audio.size > rate / 2
    assert serve.status(f"http://localhost:{serve.health_port}/ready") == 200


def test_kill_and_heal_cycles_leave_shared_memory_as_it_was(serve: Serve) -> None:
    """Five stubs killed under traffic, one after the other, each healed: the run's
    /dev/shm regions, count and sizes, are as before (Triton 2.51 keeps the dead instance's
    region and, when requests failed on it, the old version's: the watchdog removes them)."""
    serve.wait_ready()
    triton = tritonserver_of(serve)
    prefix = shm_prefix(triton)
    health = f"http://localhost:{serve.health_port}/ready"
    wait_until(lambda: serve.status(health) == 200, HEAL_WITHIN_S, "serve healthy")
    # one region per live stub, the kill during the measurement's included (its old
    # stubs are stopped LINGER_S after its reload)
    wait_until(
        lambda: len(regions(prefix, triton)) == len(stub_instances(triton)),
        LINGER_S + 60,
        "one region per live stub",
    )
    before = regions(prefix, triton)
    stop = threading.Event()
    failed: list[str] = []

    def traffic() -> None:
        client = httpclient.InferenceServerClient(f"localhost:{serve.http_port}", network_timeout=120)
        while not stop.is_set():
            try:
                client.infer("tts", tts_inputs(httpclient, "Traffic keeps flowing."))
            except InferenceServerException as err:
                failed.append(err.message())
        client.close()

    workers = [threading.Thread(target=traffic) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        for instance in ["acoustic_0_0", "vocoder_0_1", "preprocess_0_0", "acoustic_0_1", "vocoder_0_0"]:
            os.kill(stub_instances(triton)[instance], signal.SIGKILL)
            wait_until(lambda: serve.status(health) == 503, 10, f"/ready to see {instance} dead")
            wait_until(lambda: serve.status(health) == 200, HEAL_WITHIN_S, f"{instance} healed")
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert all("not healthy" in message for message in failed), failed
    # old stubs Triton keeps are stopped LINGER_S after their reload
    wait_until(lambda: regions(prefix, triton) == before, LINGER_S + 60, f"regions as before: {before}")
    assert len(stub_instances(triton)) == len(before)


def test_kill_9_of_serve_ends_tritonserver_and_what_it_holds(serve: Serve) -> None:
    """Nothing outlives serve: tritonserver, every stub, their regions and the run folder."""
    triton = tritonserver_of(serve)
    prefix, folder = shm_prefix(triton), run_dir(triton)
    stubs = list(stub_instances(triton).values())
    assert stubs and regions(prefix, triton) and folder.is_dir()
    serve.process.kill()
    serve.process.wait()

    def gone() -> bool:
        return (
            not any(alive(pid) for pid in [triton, *stubs])
            and not regions(prefix, triton)
            and not folder.exists()
        )

    wait_until(gone, GONE_WITHIN_S, "tritonserver, its stubs, regions and run folder to be gone")
