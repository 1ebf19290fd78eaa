"""A started server's life under serve: supervised by the watchdog from start-up on
(:func:`supervised`, with the health port), and drained before it stops (:func:`drain`,
reading the requests in flight from Triton's metrics port)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_tts.ops.watchdog import Watchdog

from triton_tts.ops.server import TritonServer

DRAIN_TIMEOUT_S = 30.0  # the chart's grace period covers it, its preStop and Triton's exit
IN_FLIGHT_METRIC = "triton_tts_requests_in_flight"  # triton_tts.runtime.metrics.IN_FLIGHT


def requests_in_flight(metrics_url: str) -> int | None:
    """tts and tts_stream requests started and not finished, summed over instances, from
    Triton's metrics port; None if it cannot be read."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:  # noqa: S310 - an http:// URL this code builds
            text = response.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(IN_FLIGHT_METRIC + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return round(total)


def drain(server: TritonServer, timeout_s: float, poll_s: float = 0.2) -> int | None:
    """Wait until no tts or tts_stream request is in flight (at most ``timeout_s``): Triton's
    own stop refuses every new inference at once, BLS chunk requests included, so a
    multi-chunk request in flight would lose its later chunks. Returns what is left in
    flight (0: drained; None: the count could not be read)."""
    server.release_streams()  # paced streams send the rest now
    url = f"http://{server.local_host}:{server.metrics_port}/metrics"
    deadline = time.monotonic() + timeout_s
    while True:
        left = requests_in_flight(url)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)


@contextmanager
def supervised(server: TritonServer, health_port: int | None) -> Iterator[Watchdog]:
    """Watch a started server's Python-backend instances and heal dead ones (its
    ``admin_key`` must be set), from start-up on: enter it before wait_ready(), whose
    capacity measurement then waits for heals; with ``health_port``, serve /ready and
    /live there."""
    from triton_tts.ops.watchdog import HealthServer, Watchdog

    if server.process is None or not server.admin_key:
        raise RuntimeError("supervised() needs a started server with an admin_key")
    process = server.process
    watchdog = Watchdog(process.pid, server.http_url, server.headers(), shm_dir=server.shm_dir).start()
    server.watchdog = watchdog
    health = (
        HealthServer(health_port, watchdog, lambda: process.poll() is None, server.host).start()
        if health_port is not None
        else None
    )
    try:
        yield watchdog
    finally:
        if health is not None:
            health.stop()
        watchdog.stop()
        server.watchdog = None
