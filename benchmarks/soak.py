"""Soak: mixed traffic for a long while, and the server's memory sampled all along.

``--clients`` threads each loop over a weighted mix (see ``SCHEDULE``): short ``tts``
texts (a sentence), long ``tts`` texts (~2,000 characters), paragraphs streamed through
``tts_stream`` (gRPC), streams cancelled after their first chunk (the client cancels on
the server), and bad input (nothing pronounceable, an unknown VOICE, SPEED 0) that must
be refused with 400 / INVALID_ARGUMENT naming the problem. ``tts`` requests alternate
between HTTP and gRPC. The clients never retry: a busy refusal (HTTP 503 / gRPC
UNAVAILABLE, :class:`ServerBusy`) is counted as "busy (expected under load)" and the
client waits the library's backoff before its next request; any other error on good
input, and any answer to bad input other than a clear refusal, is unexpected.

Every ``--sample-s`` the resident memory of tritonserver and of every Python-backend stub
(VmRSS, RssAnon, RssShmem from /proc/<pid>/status, PSS from smaps_rollup) is recorded. The
stubs and tritonserver map the same shared-memory regions, and tritonserver keeps a region's
older mappings when it grows, so the sum of VmRSS counts those pages once per mapping that
touched them: it overstates physical memory. The sum of PSS counts each page once.

Summary (on the sum of VmRSS; the same for each process and for the sums of PSS and RssAnon):

- warm-up: the first 20% of the run or 2 minutes, whichever is shorter (caches, arenas
  and thread pools fill up; growth then is not a leak);
- "start": one sample just before the traffic starts (idle, after the server's own
  warm-up and one request of each kind);
- "after warm-up" and "end": medians over a window of 10% of the run, at most a minute,
  right after the warm-up and at the end of the traffic (medians, because requests in
  flight move RSS up and down from one second to the next);
- growth after warm-up: (end - after warm-up) / after warm-up; the goal is under 5%;
- trend: the slope of a straight line through the second half of the traffic, MiB per
  minute (a pool that grew once, then stayed, has none; a leak keeps one);
- "idle after": the last sample, ``--settle-s`` after the traffic stopped.

    python -m benchmarks.soak                         # 30 minutes, 8 clients, own server
    python -m benchmarks.soak --minutes 10
    python -m benchmarks.soak --url-http host:8000 --url-grpc host:8001   # no memory then
    python -m benchmarks.soak --minutes 0.5 --clients 2 --settle-s 2      # smoke
    python -m benchmarks.soak --kill-every 120        # and a random stub killed (-9) every 2 min

With ``--kill-every``, the own server runs under the watchdog (as ``triton-tts serve`` does)
and a random Python-backend stub is killed with SIGKILL every so often (the OOM killer's
way); an error between a kill and its instance's return is counted as "lost to a kill",
not unexpected, and ``/dev/shm`` is counted before and after (a healed stub's region must
not stay behind). A request the killed stub of ``tts`` or ``tts_stream`` was answering is
never answered on Triton 2.51 (docs/deployment.md): it ends at the client's timeout
(``--timeout-s``, the client library's default unless given).

Writes results/soak.json and results/soak.md (Markdown tables), stamped with date, git commit
and machine (benchmarks/stamp.py), and results/soak.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
import secrets
import signal
import tempfile
import threading
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.soak_report import (
    SERVER,
    plot,
    summarise,
    tables,
)
from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import PARAGRAPH, SENTENCES
from triton_tts.client.core import DEFAULT_TIMEOUT_S
from triton_tts.client.tts_client import NO_RETRIES, RequestRejected, RetryPolicy, ServerBusy, TTSClient
from triton_tts.ops.lifecycle import supervised
from triton_tts.ops.repository import build_repository, ensure_default_voice
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.ops.startup_gate import GATE_MODEL
from triton_tts.ops.watchdog import Watchdog, model_of, stub_instances

log = logging.getLogger("soak")


BUSY = "busy (expected under load)"


UNEXPECTED = "unexpected"


KILLED = "lost to a kill"


HEAL_TIMEOUT_S = 120.0  # a heal takes seconds; past this the kill is reported unhealed


def long_text(offset: int, chars: int = 2000) -> str:
    """A few paragraphs (~``chars`` characters): the paragraph and the sentences, rotated."""
    parts = [PARAGRAPH, *SENTENCES[offset:], *SENTENCES[:offset], PARAGRAPH, *SENTENCES, PARAGRAPH]
    text = " ".join(parts)[:chars]
    return text.rsplit(". ", 1)[0] + "."


LONG_TEXTS = [long_text(k) for k in range(len(SENTENCES))]


# (kind, inputs of a bad request, words its refusal must contain)
BAD_REQUESTS: dict[str, tuple[dict[str, Any], str]] = {
    "bad_text": ({"text": "... ,,, !!!"}, "pronounce"),
    "bad_voice": ({"text": "Hello there.", "voice": "nobody"}, "VOICE"),
    "bad_speed": ({"text": "Hello there.", "speed": 0.0}, "SPEED"),
}


GOOD_KINDS = ["short", "long", "stream", "cancelled_stream"]


KINDS = GOOD_KINDS + list(BAD_REQUESTS)


# One pass of a client; the weights are the repeats (short 4, stream 2, cancelled 2, long 1,
# each bad kind 1), interleaved so that a short run still sees every kind. Each client
# starts at its own offset.
SCHEDULE = [
    "short", "stream", "bad_text", "short", "cancelled_stream", "long",
    "short", "bad_voice", "stream", "short", "cancelled_stream", "bad_speed",
]  # fmt: skip


@dataclasses.dataclass
class KindTally:
    ok: int = 0
    busy: int = 0
    unexpected: int = 0
    killed: int = 0  # failed while a killed stub's instance was down
    audio_s: float = 0.0
    latencies: list[float] = dataclasses.field(default_factory=list)  # of ok requests


@dataclasses.dataclass
class Traffic:
    """What every client saw (updated under ``lock``)."""

    tallies: dict[str, KindTally] = dataclasses.field(default_factory=lambda: {k: KindTally() for k in KINDS})
    error_samples: dict[str, int] = dataclasses.field(default_factory=dict)  # "kind: Type: msg" -> n
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    # (killed at, back at or None while down), by Killer; a request that failed between
    # them (or started before its kill and failed after it) was lost to that kill
    kills: list[list[float | None]] = dataclasses.field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(t.ok + t.busy + t.unexpected + t.killed for t in self.tallies.values())

    def during_a_kill(self, started: float) -> bool:
        now = time.monotonic()
        with self.lock:
            return any(
                started <= (back if back is not None else now) and now >= killed
                for killed, back in ((k[0], k[1]) for k in self.kills)
                if killed is not None
            )

    def record(self, kind: str, outcome: str, seconds: float, audio_s: float = 0.0, error: str = "") -> None:
        with self.lock:
            tally = self.tallies[kind]
            if outcome == "ok":
                tally.ok += 1
                tally.audio_s += audio_s
                tally.latencies.append(seconds)
            elif outcome == BUSY:
                tally.busy += 1
            elif outcome == KILLED:
                tally.killed += 1
            else:
                tally.unexpected += 1
                key = f"{kind}: {error}"[:300]
                self.error_samples[key] = self.error_samples.get(key, 0) + 1


class Clients:
    """One client's HTTP and gRPC connections (tritonclient clients are not thread-safe)."""

    def __init__(self, http_url: str, grpc_url: str, timeout_s: float) -> None:
        self.http = TTSClient(http_url, "http", retry=NO_RETRIES, timeout_s=timeout_s)
        self.grpc = TTSClient(grpc_url, "grpc", retry=NO_RETRIES, timeout_s=timeout_s)
        self.sent = 0

    def next_tts(self) -> TTSClient:
        """``tts`` requests alternate between the protocols."""
        self.sent += 1
        return self.http if self.sent % 2 else self.grpc

    def close(self) -> None:
        self.http.close()
        self.grpc.close()


def send(kind: str, clients: Clients, n: int) -> float:
    """One request of ``kind``; seconds of audio received. Raises what the client raised;
    for bad input, a RequestRejected naming the problem is the expected answer (returns 0),
    anything else raises."""
    if kind == "short":
        return clients.next_tts().synthesize(SENTENCES[n % len(SENTENCES)]).duration_s
    if kind == "long":
        return clients.next_tts().synthesize(LONG_TEXTS[n % len(LONG_TEXTS)]).duration_s
    if kind == "stream":
        chunks = list(clients.grpc.stream(PARAGRAPH))
        if not chunks or not chunks[-1].is_last:
            raise RuntimeError(f"stream ended without its last chunk ({len(chunks)} chunks)")
        return sum(len(c.audio) / c.sample_rate for c in chunks)
    if kind == "cancelled_stream":
        with closing(clients.grpc.stream(PARAGRAPH)) as stream:
            for chunk in stream:
                return len(chunk.audio) / chunk.sample_rate  # leaving the loop cancels the rest
        raise RuntimeError("stream ended before its first chunk")
    inputs, expected = BAD_REQUESTS[kind]
    try:
        result = clients.next_tts().synthesize(**inputs)
    except RequestRejected as err:  # 400 / INVALID_ARGUMENT
        if expected.lower() not in str(err).lower():
            raise RuntimeError(f"refused without naming {expected}: {err}") from None
        return 0.0
    raise RuntimeError(f"bad input accepted: {result.duration_s:.1f} s of audio")


def client_loop(
    offset: int,
    http_url: str,
    grpc_url: str,
    end: float,
    traffic: Traffic,
    schedule: list[str],
    timeout_s: float,
) -> None:
    backoff, refusals = RetryPolicy(), 0
    clients = Clients(http_url, grpc_url, timeout_s)
    try:
        n = offset  # each client starts elsewhere in the mix
        while time.monotonic() < end:
            kind = schedule[n % len(schedule)]
            start = time.perf_counter()
            began = time.monotonic()
            try:
                audio_s = send(kind, clients, n)
            except ServerBusy:
                traffic.record(kind, BUSY, time.perf_counter() - start)
                time.sleep(backoff.delay(refusals))
                refusals += 1
            except Exception as err:  # any other failure is what a soak is for: count, go on
                outcome = KILLED if traffic.during_a_kill(began) else UNEXPECTED
                traffic.record(kind, outcome, 0.0, error=f"{type(err).__name__}: {err}")
            else:
                traffic.record(kind, "ok", time.perf_counter() - start, audio_s)
                refusals = 0
            n += 1
    finally:
        clients.close()


class Killer:
    """Kills a random stub of the server every ``every_s`` (SIGKILL) and waits for the
    watchdog's heal: the model reloaded and nothing dead or healing left (requests are
    routed to the dead instance until the reload swaps it out)."""

    def __init__(
        self, server_pid: int, every_s: float, traffic: Traffic, end: float, watchdog: Watchdog
    ) -> None:
        self.server_pid, self.every_s, self.traffic, self.end = server_pid, every_s, traffic, end
        self.watchdog = watchdog
        self.log: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._run, name="killer", daemon=True)

    def _run(self) -> None:
        rng = random.Random(7)  # noqa: S311 - a reproducible choice, not secrecy
        while time.monotonic() + self.every_s < self.end:
            time.sleep(self.every_s)
            # the start-up gate's stub is the supervisor's, not a stage: nothing heals it
            stubs = {k: v for k, v in stub_instances(self.server_pid).items() if model_of(k) != GATE_MODEL}
            if not stubs:
                continue
            instance = rng.choice(sorted(stubs))
            entry: list[float | None] = [time.monotonic(), None]
            with self.traffic.lock:
                self.traffic.kills.append(entry)
            healed = len(self.watchdog.heals)
            os.kill(stubs[instance], signal.SIGKILL)
            deadline = time.monotonic() + HEAL_TIMEOUT_S
            while time.monotonic() < deadline:
                if len(self.watchdog.heals) > healed and self.watchdog.settled():
                    break
                time.sleep(0.2)
            with self.traffic.lock:
                entry[1] = time.monotonic() + 1.0  # a request routed just before the swap
            assert entry[0] is not None and entry[1] is not None
            self.log.append({"instance": instance, "healed_s": round(entry[1] - 1.0 - entry[0], 1)})
            log.info("killed %s; back after %.1f s", instance, entry[1] - 1.0 - entry[0])

    def start(self) -> Killer:
        self.thread.start()
        return self


def shm_regions(folder: Path) -> dict[str, float]:
    """The shared-memory regions in ``folder`` (the server's /dev/shm): how many, and MiB
    allocated."""
    found = [p for p in folder.iterdir() if p.is_file()]
    sizes = []
    for region in found:
        try:
            sizes.append(region.stat().st_blocks * 512)
        except OSError:
            continue
    return {"count": len(sizes), "mib": sum(sizes) / 2**20}


def read_memory(pid: int) -> dict[str, int] | None:
    """VmRSS, RssAnon and RssShmem of a process in KiB, or None once it is gone."""
    fields = {"VmRSS": "rss_kib", "RssAnon": "anon_kib", "RssShmem": "shmem_kib"}
    try:
        lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    found = {"pid": pid}
    for line in lines:
        name, _, value = line.partition(":")
        if name in fields:
            found[fields[name]] = int(value.split()[0])
    if "rss_kib" not in found:
        return None  # a zombie has no VmRSS
    # PSS shares each page among the processes (and mappings) that hold it, so the sum over
    # processes counts every physical page once. Resident pages of the shared-memory regions
    # are held by tritonserver and a stub, and tritonserver keeps each region's earlier,
    # smaller mappings after it grows: VmRSS counts those pages two and three times.
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8").splitlines():
            if line.startswith("Pss:"):
                found["pss_kib"] = int(line.split()[1])
    except OSError:
        pass
    return found


class Sampler:
    """Memory of tritonserver and its stubs (when ``server_pid`` is known) and the number of
    finished requests, every ``interval_s``, in a thread, until stopped."""

    def __init__(self, server_pid: int | None, traffic: Traffic, interval_s: float, origin: float) -> None:
        self.server_pid, self.traffic, self.interval_s, self.origin = server_pid, traffic, interval_s, origin
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def sample(self) -> dict[str, Any]:
        processes: dict[str, dict[str, int]] = {}
        if self.server_pid is not None:
            pids = {SERVER: self.server_pid, **stub_instances(self.server_pid)}
            for name, pid in pids.items():
                memory = read_memory(pid)
                if memory is not None:
                    processes[name] = memory
        sample = {
            "t_s": round(time.monotonic() - self.origin, 3),
            "requests_done": self.traffic.done,
            "processes": processes,
        }
        if processes:
            for key in ("rss_kib", "pss_kib", "anon_kib", "shmem_kib"):
                sample[f"total_{key}"] = sum(p.get(key, 0) for p in processes.values())
        self.samples.append(sample)
        return sample

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def own_server(voice: Path | None, stack: ExitStack, log_file: Path) -> TritonServer:
    """The voice built with the default options into a scratch folder, served on free ports."""
    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="triton-tts-soak-")))
    repo = build_repository(ensure_default_voice(voice), scratch / "model_repository")
    log_file.unlink(missing_ok=True)
    return TritonServer(
        repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), log_file=log_file
    )


def started(server: TritonServer, stack: ExitStack, watched: bool) -> tuple[TritonServer, Watchdog | None]:
    """``server`` started and ready until ``stack`` closes; ``watched``: as serve runs it,
    under the watchdog (model control behind a key of its own), healing from the start."""
    if not watched:
        return stack.enter_context(server), None
    server.admin_key = secrets.token_urlsafe(24)
    server.start()
    stack.callback(server.stop)
    watchdog = stack.enter_context(supervised(server, None))
    server.wait_ready()
    return server, watchdog


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="of traffic")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between memory samples")
    parser.add_argument("--settle-s", type=float, default=10.0, help="sampling after the traffic stops")
    parser.add_argument("--voice", type=Path, help="voice folder of the own server (default: joe)")
    parser.add_argument("--url-http", help="a running server's HTTP address (with --url-grpc); no memory")
    parser.add_argument("--url-grpc", help="a running server's gRPC address")
    parser.add_argument("--out", type=Path, default=Path("results/soak.json"))
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        help="only these kinds of request (default: the whole mix), to find which traffic grows what",
    )
    parser.add_argument(
        "--kill-every", type=float, default=0.0, help="seconds between stub kills (own server; 0: none)"
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="each request's client timeout (a request a killed stub held ends there)",
    )
    return parser


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = arguments()
    args = parser.parse_args(argv)
    schedule = [k for k in SCHEDULE if k in args.kinds] if args.kinds else SCHEDULE
    if bool(args.url_http) != bool(args.url_grpc):
        parser.error("--url-http and --url-grpc go together")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    load_s = 60 * args.minutes
    traffic = Traffic()
    with ExitStack() as stack:
        pid, watchdog = None, None
        shm = Path("/dev/shm")  # noqa: S108 - a running server's: the machine's
        if args.url_http:
            http_url, grpc_url = args.url_http, args.url_grpc
        else:
            log_file = args.out.with_name(args.out.stem + "-tritonserver.log")
            server, watchdog = started(own_server(args.voice, stack, log_file), stack, bool(args.kill_every))
            assert server.process is not None
            http_url, grpc_url, pid = server.http_url, server.grpc_url, server.process.pid
            shm = server.shm_dir  # its own /dev/shm where it has one
        warm = Clients(http_url, grpc_url, args.timeout_s)
        for n, kind in enumerate(KINDS):  # each kind once, and the server is what we think
            send(kind, warm, n)
        warm.close()
        origin = time.monotonic()
        sampler = Sampler(pid, traffic, args.sample_s, origin)
        start = sampler.sample()  # idle, before the traffic
        sampler.start()
        end = origin + load_s
        shm_before = shm_regions(shm)
        killer = Killer(pid, args.kill_every, traffic, end, watchdog).start() if watchdog and pid else None
        clients = [
            threading.Thread(
                target=client_loop,
                args=(
                    k * len(schedule) // args.clients,
                    http_url,
                    grpc_url,
                    end,
                    traffic,
                    schedule,
                    args.timeout_s,
                ),
                name=f"client-{k}",
            )
            for k in range(args.clients)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        traffic_s = time.monotonic() - origin  # what ran at the end finished after load_s
        if killer is not None:
            killer.thread.join(HEAL_TIMEOUT_S)
        time.sleep(args.settle_s)
        sampler.stop()
        sampler.sample()
        shm_after = shm_regions(shm)
    samples = sampler.samples
    summary = summarise(samples, load_s, traffic_s, start)
    requests = {
        kind: {
            "ok": t.ok,
            "busy": t.busy,
            "unexpected": t.unexpected,
            "killed": t.killed,
            "audio_s": t.audio_s,
            "p50_s": float(np.percentile(t.latencies, 50)) if t.latencies else None,
            "p99_s": float(np.percentile(t.latencies, 99)) if t.latencies else None,
        }
        for kind, t in traffic.tallies.items()
    }
    results: dict[str, Any] = {
        **stamp(),
        "server": "own, default build" if pid is not None else f"{http_url}, {grpc_url}",
        "load_s": load_s,
        "traffic_s": traffic_s,
        "clients": args.clients,
        "sample_s": args.sample_s,
        "schedule": schedule,
        "requests": requests,
        "errors": {
            BUSY: sum(t.busy for t in traffic.tallies.values()),
            UNEXPECTED: sum(t.unexpected for t in traffic.tallies.values()),
            "by_kind": {k: {BUSY: t.busy, UNEXPECTED: t.unexpected} for k, t in traffic.tallies.items()},
            "unexpected_samples": dict(sorted(traffic.error_samples.items(), key=lambda e: -e[1])[:20]),
        },
        "summary": summary,
        "kills": killer.log if killer is not None else [],
        "shm": {"before": shm_before, "after": shm_after},
        "samples": samples,
    }
    write_report(args.out, results, tables(results), indent=1)
    print(f"plot: {plot(results, args.out.with_suffix('.png'))}")
    return results


if __name__ == "__main__":
    main()
