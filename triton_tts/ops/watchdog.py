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
command line names its instance, e.g. ``acoustic_0_1``, and its shared-memory region); an
instance once seen that has no live stub any more is dead, and its model is reloaded. It
runs from tritonserver's start, so a stub killed during warm-up heals too: until Triton's
HTTP endpoint answers, the heal waits; a model whose load failed because its stub died
(reason "... is not healthy", Triton then keeps the model UNAVAILABLE under
``--exit-on-error=false``) is loaded again; a model down for any other reason (a broken
one, the start-up gate of triton_tts/ops/server.py, one unloaded on purpose) is not ours.

After a reload Triton 2.51 should unload the old version, ending its stubs; it never
does when requests failed on the dead stub (seen here: its surviving stubs and every
region stayed until tritonserver exited). So the dead stubs' regions are removed once the
reload is done, and old stubs still running :data:`LINGER_S` later are stopped and their
regions removed: a healed stub costs nothing that lasts. :class:`HealthServer`
answers ``/ready`` with 200 only when Triton is ready and every instance is alive
(checked at each call), and ``/live`` while tritonserver and the watchdog run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from triton_tts.ops.reaper import SHM_DIR, remove_region

log = logging.getLogger(__name__)

GENERATION_PARAMETER = "triton_tts_generation"
INSTANCE = re.compile(r".+_\d+_\d+")  # Triton's instance names: <model>_<group>_<index>
STUB_NAME = "triton_python_backend_stub"
POLL_S = 0.5
LOAD_TIMEOUT_S = 300.0  # a reload warms the new instances up before it returns
# Triton's reason for a model whose stub died while it loaded (warm-up, say).
STUB_DIED = "is not healthy"
# How long the old version's stubs may finish what they hold after a reload returned (a
# request to one stage takes a second or two here); Triton unloads them within seconds
# when it unloads them at all.
LINGER_S = 15.0


@dataclass(frozen=True)
class Stub:
    """One Python-backend stub process: its instance (``acoustic_0_1``), pid, shared-memory
    region and start time (clock ticks since boot, to tell a reused pid apart)."""

    instance: str
    pid: int
    region: str
    started: int


def stubs(server_pid: int, proc: Path = Path("/proc")) -> list[Stub]:
    """Live Python-backend stubs of this tritonserver. Zombies (a killed stub Triton has not
    reaped) are not live. During a reload an instance has two: the old and the new one."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
            fields = stat.rsplit(")", 1)[1].split()
            state, ppid = fields[:2]
            if int(ppid) != server_pid or state == "Z":
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
            started = int(fields[19]) if len(fields) > 19 else 0
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        # stub argv: binary, model.py, region, shm sizes, server pid, backend dir, ..., instance
        if len(args) > 8 and args[0].decode(errors="replace").endswith(STUB_NAME):
            decoded = [a.decode(errors="replace") for a in args]
            found.append(Stub(decoded[8], int(entry.name), decoded[2], started))
    return found


def stub_instances(server_pid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """Live Python-backend instances of this tritonserver: instance name -> stub pid (the
    newest stub of the name, while a reload runs two)."""
    newest: dict[str, Stub] = {}
    for stub in stubs(server_pid, proc):
        if stub.instance not in newest or stub.started >= newest[stub.instance].started:
            newest[stub.instance] = stub
    return {name: stub.pid for name, stub in newest.items()}


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
    linger_s: float = LINGER_S
    shm_dir: Path = SHM_DIR
    # Every instance seen alive (from tritonserver's start): one without a stub is dead.
    expected: set[str] = field(default_factory=set)
    heals: list[tuple[str, float]] = field(default_factory=list)  # (model, seconds)
    # Models being reloaded: their new instances run (and warm up) before the dead one is
    # gone from Triton's routing, so "every name has a live stub" is not enough for ready.
    healing: set[str] = field(default_factory=set)
    # Models to load again though no stub of theirs was seen die (request_heal).
    requested: set[str] = field(default_factory=set)
    on_heal: Callable[[str, float], None] | None = None
    # The last stub seen of each instance (its region is removed once it is healed).
    _seen: dict[str, Stub] = field(default_factory=dict)
    # Old stubs after a reload: pid -> (the stub, when it must have ended).
    _lingering: dict[int, tuple[Stub, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        """Watch from now on (from tritonserver's start: instances are learnt as they appear)."""
        self._observe()
        log.info("watchdog: %d Python-backend instances so far", len(self.expected))
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
        """Instances whose newest stub seen has ended (an old version's stub of the same
        name, still running after a reload, does not hide that)."""
        live = {(stub.pid, stub.started) for stub in stubs(self.server_pid, self.proc)}
        seen = dict(self._seen)
        return {
            name
            for name in self.expected
            if name in seen and (seen[name].pid, seen[name].started) not in live
        }

    def settled(self) -> bool:
        """No instance dead, none being healed, none asked for."""
        return not (self.dead() or self.healing or self.requested)

    def request_heal(self, model: str) -> None:
        """Load ``model`` again at the next poll (a load that failed because its stub died)."""
        self.requested.add(model)

    def server_running(self) -> bool:
        """tritonserver still runs (not stopped, not a zombie): no healing while it stops."""
        try:
            stat = (self.proc / str(self.server_pid) / "stat").read_text(encoding="utf-8")
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def _observe(self) -> list[Stub]:
        live = stubs(self.server_pid, self.proc)
        for stub in live:
            seen = self._seen.get(stub.instance)
            if seen is None or stub.started >= seen.started:
                self._seen[stub.instance] = stub
        # Instances only: a model's load first runs a stub named after the model alone, for
        # its config's auto-completion, which then ends on purpose.
        self.expected.update(stub.instance for stub in live if INSTANCE.fullmatch(stub.instance))
        return live

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            if not self.server_running():
                return  # stopping: its stubs go away on purpose
            try:
                live = self._observe()
                dead_models = sorted({model_of(name) for name in self.dead()} | self.requested)
                self.healing.update(dead_models)
                for model in dead_models:
                    try:
                        self.heal(model)
                    finally:
                        self.healing.discard(model)
                self._end_lingering(live)
            except Exception as err:  # the watchdog must outlive any one failure
                if self.server_running():
                    log.warning("watchdog: healing failed (%s); retrying", err)

    def heal(self, model: str) -> bool:
        """Reload ``model`` (a dead instance) or load it again (its load failed because a
        stub died); False while Triton's HTTP endpoint does not answer yet (start-up), or
        when the model is down for a reason not ours to mend (then it is forgotten)."""
        try:
            index = self._request("/v2/repository/index", {})
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False  # not listening yet: Triton is still loading its models
        entry = next((m for m in index if isinstance(m, dict) and m.get("name") == model), {})
        state, reason = entry.get("state"), str(entry.get("reason", ""))
        dead = [self._seen[name] for name in self.dead() if model_of(name) == model and name in self._seen]
        if state == "UNAVAILABLE" and STUB_DIED in reason:
            body: dict[str, Any] = {}  # not loaded: its own config, from the repository
        elif state == "READY":
            body = {"parameters": {"config": json.dumps(self._next_generation(model))}}
        else:  # a broken model, the start-up gate, an unload: wait_ready and the caller see to it
            self.expected -= {name for name in self.expected if model_of(name) == model}
            self.requested.discard(model)
            return False
        started = time.monotonic()
        log.warning("watchdog: an instance of '%s' died; loading it again", model)
        old = [s for s in stubs(self.server_pid, self.proc) if model_of(s.instance) == model]
        self._request(f"/v2/repository/models/{model}/load", body, timeout=LOAD_TIMEOUT_S)
        self.requested.discard(model)
        seconds = time.monotonic() - started
        self.heals.append((model, seconds))
        log.warning("watchdog: '%s' loaded again in %.1f s", model, seconds)
        # Regions are per stub; Triton removes them when it destroys the instance, and a
        # dead instance's it may never destroy (see the module docstring).
        for stub in dead:
            remove_region(stub.region, self.shm_dir)
        deadline = time.monotonic() + self.linger_s
        self._lingering.update({stub.pid: (stub, deadline) for stub in old})
        if self.on_heal is not None:
            self.on_heal(model, seconds)
        return True

    def _next_generation(self, model: str) -> dict[str, Any]:
        """The model's config with its generation bumped: a load of an unchanged config
        would update in place and keep the dead instance."""
        config: dict[str, Any] = self._request(f"/v2/models/{model}/config")
        parameters = config.setdefault("parameters", {})
        generation = int(parameters.get(GENERATION_PARAMETER, {}).get("string_value", "0")) + 1
        parameters[GENERATION_PARAMETER] = {"string_value": str(generation)}
        return config

    def _end_lingering(self, live: list[Stub]) -> None:
        """Stop old stubs still running past their deadline (the version Triton kept)."""
        running = {(stub.pid, stub.started) for stub in live}
        now = time.monotonic()
        for pid, (stub, deadline) in list(self._lingering.items()):
            if (pid, stub.started) not in running:
                del self._lingering[pid]  # ended, as it should
            elif now >= deadline:
                log.warning(
                    "watchdog: the old '%s' still runs %.0f s after its reload; stopping it",
                    stub.instance,
                    self.linger_s,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                remove_region(stub.region, self.shm_dir)
                del self._lingering[pid]

    def _request(self, path: str, body: object | None = None, timeout: float = 10.0) -> Any:
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

    def __init__(self, port: int, watchdog: Watchdog, server_alive: Callable[[], bool], host: str) -> None:
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
        self.httpd = ThreadingHTTPServer((host, port), Handler)  # serve --host: 0.0.0.0 in a pod
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
