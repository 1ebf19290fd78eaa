"""Heal dead Python-backend instances, and a readiness that knows about them.

Triton restarts no dead stub (2.51; 2.72, the image's, neither, though since 25.12 it
reports the model not ready): after ``kill -9`` of one instance's stub (what the OOM
killer does), the server and the model stay "ready" and every request routed to that
instance fails with "Stub process '<model>_0_1' is not healthy", for ever. What Triton
does offer (checked against a running 2.51 server, see tests/test_self_healing.py):

- a model-control ``load`` of a model whose config changed is a background reload: the
  new instances start and warm up while the old ones keep serving, then replace them;
  ``load`` with an unchanged config would update in place and keep the dead instance, so
  the heal sends the model's own config with a ``triton_tts_generation`` parameter bumped;
- ``--http-restricted-api`` / ``--grpc-restricted-protocol`` put the admin APIs (model
  repository among them) behind a header only this process knows, so clients cannot load
  or unload models.

:class:`Watchdog` polls the stubs (children of tritonserver, found in /proc: each stub's
command line names its instance, e.g. ``acoustic_0_1``); an instance seen at start that
has no live stub any more is dead, and its model is reloaded. :class:`HealthServer`
answers ``/ready`` with 200 only when Triton is ready and every instance is alive
(checked at each call), and ``/live`` while tritonserver and the watchdog run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ADMIN_HEADER = "triton-tts-admin"  # the restricted model-repository API's key header
GENERATION_PARAMETER = "triton_tts_generation"
STUB_NAME = "triton_python_backend_stub"
POLL_S = 0.5
LOAD_TIMEOUT_S = 300.0  # a reload warms the new instances up before it returns


def stub_instances(server_pid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """Live Python-backend instances of this tritonserver: instance name -> stub pid.
    Zombies (a killed stub Triton has not reaped) are not live."""
    found: dict[str, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) != server_pid or state == "Z":
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if len(args) > 8 and args[0].decode(errors="replace").endswith(STUB_NAME):
            found[args[8].decode(errors="replace")] = int(entry.name)
    return found


def model_of(instance: str) -> str:
    """``acoustic__ljs_0_1`` -> ``acoustic__ljs`` (Triton names instances model_group_index)."""
    return instance.rsplit("_", 2)[0]


@dataclass
class Watchdog:
    """Reloads a model when one of its instances' stub dies; see the module docstring."""

    server_pid: int
    http_url: str  # host:port of Triton's HTTP endpoint
    headers: dict[str, str]  # the admin key (and the API key, when set): TritonServer.headers()
    poll_s: float = POLL_S
    proc: Path = Path("/proc")
    expected: set[str] = field(default_factory=set)
    heals: list[tuple[str, float]] = field(default_factory=list)  # (model, seconds)
    # Models being reloaded: their new instances run (and warm up) before the dead one is
    # gone from Triton's routing, so "every name has a live stub" is not enough for ready.
    healing: set[str] = field(default_factory=set)
    on_heal: Callable[[str, float], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        """Record the instances running now (call once Triton is ready) and watch them."""
        self.expected = set(stub_instances(self.server_pid, self.proc))
        log.info("watchdog: %d Python-backend instances", len(self.expected))
        self._thread = threading.Thread(target=self._run, name="triton-tts-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def dead(self) -> set[str]:
        return self.expected - set(stub_instances(self.server_pid, self.proc))

    def server_running(self) -> bool:
        """tritonserver still runs (not stopped, not a zombie): no healing while it stops."""
        try:
            stat = (self.proc / str(self.server_pid) / "stat").read_text(encoding="utf-8")
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if not self.server_running():
                return  # stopping: its stubs go away on purpose
            try:
                dead_models = sorted({model_of(name) for name in self.dead()})
                self.healing.update(dead_models)
                for model in dead_models:
                    try:
                        self.heal(model)
                    finally:
                        self.healing.discard(model)
            except Exception as err:  # the watchdog must outlive any one failure
                if self.server_running():
                    log.warning("watchdog: healing failed (%s); retrying", err)

    def heal(self, model: str) -> None:
        started = time.monotonic()
        log.warning("watchdog: an instance of '%s' died; reloading it", model)
        config = self._request(f"/v2/models/{model}/config")
        parameters = config.setdefault("parameters", {})
        generation = int(parameters.get(GENERATION_PARAMETER, {}).get("string_value", "0")) + 1
        parameters[GENERATION_PARAMETER] = {"string_value": str(generation)}
        body = {"parameters": {"config": json.dumps(config)}}
        self._request(f"/v2/repository/models/{model}/load", body, timeout=LOAD_TIMEOUT_S)
        seconds = time.monotonic() - started
        self.heals.append((model, seconds))
        log.warning("watchdog: '%s' reloaded in %.1f s", model, seconds)
        if self.on_heal is not None:
            self.on_heal(model, seconds)

    def _request(self, path: str, body: object | None = None, timeout: float = 10.0) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{self.http_url}{path}",
            data=data,
            method="GET" if body is None else "POST",
            headers={**self.headers, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - an http:// URL this code builds
            text = response.read().decode("utf-8")
        return json.loads(text) if text else {}


def triton_ready(http_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2/health/ready", timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class HealthServer:
    """``/ready``: Triton ready and every instance alive; ``/live``: tritonserver and the
    watchdog running. For probes and load balancers (Triton's own ``/v2/health/ready``
    stays 200 with a dead instance)."""

    def __init__(self, port: int, watchdog: Watchdog, server_alive: Callable[[], bool]) -> None:
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/ready"):
                    status, why = health.readiness()
                elif self.path.startswith("/live"):
                    status, why = (
                        (200, "live") if health.live() else (503, "tritonserver or watchdog stopped")
                    )
                else:
                    status, why = 404, "try /ready or /live"
                payload = (why + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.watchdog = watchdog
        self.server_alive = server_alive
        self.httpd = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # noqa: S104 - in a container; the chart's NetworkPolicy bounds it
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="triton-tts-health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def live(self) -> bool:
        return self.server_alive() and self.watchdog.running

    def readiness(self) -> tuple[int, str]:
        dead = self.watchdog.dead()
        if dead or self.watchdog.healing:
            waiting = sorted(dead) + sorted(self.watchdog.healing)
            return 503, f"healing: {', '.join(waiting)}"
        if not triton_ready(self.watchdog.http_url):
            return 503, "tritonserver not ready"
        return 200, "ready"
