"""triton-tts side by side with the alternatives, same voice, same machine, one run.

Peers: (a) Piper's graph run directly with onnxruntime in one process per core, batch 1
(the CPU ceiling: measured here, batch 1 beats padded batches on CPU), and each served
voice folder's own graphs run the same way (the ceiling for that voice, e.g. with its
INT8 vocoder); (b) Piper's own
HTTP server (``piper-tts``, installed by ``make bench-peers`` in its own virtualenv,
never a dependency of the product); (c) triton-tts over HTTP and gRPC. Each server gets
the same mixed sentences at the same concurrency; (d) Coqui's own ``tts-server`` (eager
PyTorch, ``coqui-tts[server]`` in ``.bench/coqui``, also installed by ``make
bench-peers``) against triton-tts serving this project's export of the same Coqui model.
That model is a Coqui VITS at Coqui's default sizes with random weights (no download;
speed does not depend on the weights' values), built once into ``.bench/coqui-model``.

    python -m benchmarks.peers --concurrency 8 --rounds 3
    python -m benchmarks.peers --only-coqui --coqui-rounds 1    # just (d)

Writes results/peers.json and results/peers.md (Markdown tables), stamped with date, commit
and machine (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import subprocess
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import soundfile as sf

from benchmarks.loadgen import load, triton_call
from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import SENTENCES
from triton_tts.runtime.onnx_session import available_cores

log = logging.getLogger("peers")
ROOT = Path(__file__).resolve().parent.parent
PIPER_PYTHON = ROOT / ".bench" / "piper" / "bin" / "python"
COQUI_SERVER = ROOT / ".bench" / "coqui" / "bin" / "tts-server"
COQUI_MODEL = ROOT / ".bench" / "coqui-model"


def _direct_worker(rounds: int, offset: int, ready: Any, results: Any, voice_dir: Path | None) -> None:
    """One process, one thread, batch 1: the server's text path + Piper's unsplit graph,
    or a voice folder's own graphs."""
    from benchmarks.reference import PiperReference, VoiceReference

    reference = PiperReference(threads=1) if voice_dir is None else VoiceReference(voice_dir, threads=1)
    reference.synthesize(SENTENCES[0])  # warm-up, outside the timed part
    ready.wait()  # every process starts together, after loading
    audio = 0.0
    for r in range(rounds):
        for i in range(len(SENTENCES)):
            audio += reference.synthesize(SENTENCES[(i + offset + r) % len(SENTENCES)])
    results.put((audio, time.time()))


def direct_ceiling(rounds: int, voice_dir: Path | None = None) -> dict[str, float]:
    cores = available_cores()
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(cores + 1)
    results = context.Queue()
    workers = [
        context.Process(target=_direct_worker, args=(rounds, k, ready, results, voice_dir))
        for k in range(cores)
    ]
    for worker in workers:
        worker.start()
    ready.wait()
    start = time.time()
    finished = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    wall = max(end for _, end in finished) - start
    return {"x_real_time": sum(audio for audio, _ in finished) / wall, "processes": cores}


def wait_until_serving(
    process: subprocess.Popen[bytes], call: Callable[[str], float], timeout_s: float, name: str
) -> subprocess.Popen[bytes]:
    """Return ``process`` once a synthesis through ``call`` succeeds; kill it on time-out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            call("Ready.")
            return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"{name} did not start")


def start_piper(port: int) -> subprocess.Popen[bytes] | None:
    if not PIPER_PYTHON.exists():
        log.warning("Piper's server is not installed (make bench-peers): skipped")
        return None
    from triton_tts.export.piper import bundled_joe_paths

    process = subprocess.Popen(
        [
            str(PIPER_PYTHON),
            "-m",
            "piper.http_server",
            "-m",
            str(bundled_joe_paths()[0]),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return wait_until_serving(process, piper_call(port), 60, "Piper's server")


def piper_call(port: int) -> Callable[[str], float]:
    def call(text: str) -> float:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/synthesize",
            data=json.dumps({"text": text}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - an http:// URL this code builds
            import io

            info = sf.info(io.BytesIO(response.read()))
        return float(info.duration)

    return call


def coqui_model(family: str, precisions: list[str]) -> tuple[Path, Path, list[Path]]:
    """(checkpoint, config, exported voice folder per precision) of the benchmark's Coqui
    model, built and exported once (Coqui's default layer sizes, random weights)."""
    folder = COQUI_MODEL / family
    checkpoint, config = folder / "checkpoint" / "model.pth", folder / "checkpoint" / "config.json"
    if not checkpoint.exists():
        from testkit.coqui_checkpoints import build_tts

        build_tts(family, folder / "checkpoint", size="full")
    # Coqui's Synthesizer trims "silence" off its output (do_trim_silence): on a random
    # model's quiet audio that cut most of it, so its server returned less audio for the
    # same work. Off, both servers return the model's whole output for the same text.
    settings = json.loads(config.read_text(encoding="utf-8"))
    if settings["audio"].get("do_trim_silence"):
        settings["audio"]["do_trim_silence"] = False
        config.write_text(json.dumps(settings, indent=2), encoding="utf-8")
    voice_dirs = [folder / f"coqui-{family}-{precision}" for precision in precisions]
    missing = [(p, d) for p, d in zip(precisions, voice_dirs, strict=True) if not (d / "voice.json").exists()]
    if missing:
        from triton_tts.export.coqui import export, loading
        from triton_tts.quality.intelligibility import GateThresholds

        loaded = loading.load(checkpoint=checkpoint, config=config)  # once for every precision
        for precision, voice_dir in missing:
            # random weights: the precision gate can judge their SNR only, and speed is the point
            gate = GateThresholds(measure_wer=False, accept_failed=True)
            export.export_coqui(loaded, voice_dir, precision=precision, gate=gate)
    return checkpoint, config, voice_dirs


def start_coqui(port: int, checkpoint: Path, config: Path) -> subprocess.Popen[bytes] | None:
    if not COQUI_SERVER.exists():
        log.warning("Coqui's tts-server is not installed (make bench-peers): skipped")
        return None
    model = ["--model_path", str(checkpoint), "--config_path", str(config)]
    process = subprocess.Popen(
        [str(COQUI_SERVER), *model, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return wait_until_serving(process, coqui_call(port), 180, "Coqui's tts-server")


def coqui_call(port: int) -> Callable[[str], float]:
    import io
    import urllib.parse

    def call(text: str) -> float:
        url = f"http://127.0.0.1:{port}/api/tts?{urllib.parse.urlencode({'text': text})}"
        with urllib.request.urlopen(url, timeout=900) as response:
            return float(sf.info(io.BytesIO(response.read())).duration)

    return call


def coqui_side_by_side(concurrency: int, rounds: int, family: str, precisions: list[str]) -> dict[str, Any]:
    """Coqui's tts-server and triton-tts on the same Coqui model, one after the other."""
    from triton_tts.ops.server import default_voice_server, free_port

    checkpoint, config, voice_dirs = coqui_model(family, precisions)
    results: dict[str, Any] = {}
    port = free_port()
    coqui_server = start_coqui(port, checkpoint, config)
    if coqui_server is not None:
        try:
            results["coqui_tts_server"] = load(coqui_call(port), concurrency, rounds)
        finally:
            coqui_server.kill()
            coqui_server.wait()
    for precision, voice_dir in zip(precisions, voice_dirs, strict=True):
        with default_voice_server(voice_dir=voice_dir) as server:
            call = triton_call(server.grpc_url, "grpc")
            load(call, 2, 1)  # warm-up
            results[f"triton_tts_coqui_{precision}_grpc"] = load(call, concurrency, rounds)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--voice",
        type=Path,
        action="append",
        default=None,
        help="voice folder(s) for triton-tts (default: joe)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/peers.json"))
    parser.add_argument("--coqui-family", default="vits", choices=["vits", "fast_pitch", "glow_tts"])
    parser.add_argument("--coqui-rounds", type=int, default=1, help="Coqui's server is slow: fewer rounds")
    parser.add_argument(
        "--coqui-precision",
        nargs="+",
        default=["fp32", "int8"],
        choices=["fp32", "int8"],
        help="triton-tts exports of the Coqui model to serve",
    )
    parser.add_argument("--only-coqui", action="store_true", help="only Coqui's server vs triton-tts")
    parser.add_argument("--no-coqui", action="store_true", help="skip Coqui's server")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from triton_tts.ops.repository import ensure_default_voice
    from triton_tts.ops.server import default_voice_server, free_port

    ensure_default_voice()
    results: dict[str, Any] = {**stamp(), "concurrency": args.concurrency}
    if not args.no_coqui:
        results["coqui"] = coqui_side_by_side(
            args.concurrency, args.coqui_rounds, args.coqui_family, args.coqui_precision
        )
        print(coqui_table(results["coqui"], args.concurrency, args.coqui_family))  # before the long part
    if args.only_coqui:
        write_report(args.out, results, [coqui_table(results["coqui"], args.concurrency, args.coqui_family)])
        return results
    results["direct_onnxruntime"] = direct_ceiling(args.rounds)
    for voice_dir in args.voice or []:
        results[f"direct_{voice_dir.name}"] = direct_ceiling(args.rounds, voice_dir)
    with ExitStack() as stack:
        port = free_port()
        piper = start_piper(port)
        if piper is not None:
            stack.callback(piper.kill)
            load(piper_call(port), 2, 1)  # warm-up
            results["piper_http_server"] = load(piper_call(port), args.concurrency, args.rounds)
            piper.kill()
            piper.wait()
    names = {"piper_http_server": "Piper's HTTP server"}
    voice_of: dict[str, str] = {}
    for voice_dir in args.voice or [None]:
        voice = voice_dir.name if voice_dir else "joe"
        with default_voice_server(voice_dir=voice_dir) as server:
            for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
                key = f"triton_tts_{voice}_{protocol}"
                names[key] = f"triton-tts ({voice}), {protocol.upper().replace('GRPC', 'gRPC')}"
                voice_of[key] = voice
                load(triton_call(url, protocol), 2, 1)
                results[key] = load(triton_call(url, protocol), args.concurrency, args.rounds)
    tables = [piper_table(results, args.concurrency, names, voice_of)]
    if "coqui" in results:
        tables.append(coqui_table(results["coqui"], args.concurrency, args.coqui_family))
    write_report(args.out, results, tables)
    return results


def piper_table(
    results: dict[str, Any], concurrency: int, names: dict[str, str], voice_of: dict[str, str]
) -> str:
    ceiling = results["direct_onnxruntime"]["x_real_time"]
    processes = results["direct_onnxruntime"]["processes"]
    direct = f"onnxruntime directly, {processes} processes x batch 1"
    lines = [
        f"The eight sentences, concurrency {concurrency}:",
        "",
        "| server | x real time | vs ceiling | vs same graphs direct | p50 | p99 |",
        "|---|---|---|---|---|---|",
        f"| {direct}, Piper's graph (ceiling) | {ceiling:.1f} | 1.00 | | - | - |",
    ]
    for voice in dict.fromkeys(voice_of.values()):
        if f"direct_{voice}" in results:
            own = results[f"direct_{voice}"]["x_real_time"]
            lines.append(f"| {direct}, {voice}'s graphs | {own:.1f} | {own / ceiling:.2f} | 1.00 | - | - |")
    for key, name in names.items():
        if key in results:
            r = results[key]
            own = results.get(f"direct_{voice_of.get(key)}", {}).get("x_real_time")
            same = f"{r['x_real_time'] / own:.2f}" if own else ""
            lines.append(
                f"| {name} | {r['x_real_time']:.1f} | {r['x_real_time'] / ceiling:.2f} | {same} "
                f"| {r['p50_s']:.2f} s | {r['p99_s']:.2f} s |"
            )
    return "\n".join(lines)


def coqui_table(results: dict[str, Any], concurrency: int, family: str) -> str:
    lines = [
        f"Coqui {family} (default sizes), concurrency {concurrency}:",
        "",
        "| server | x real time | vs Coqui's server | p50 | p99 |",
        "|---|---|---|---|---|",
    ]
    theirs = results.get("coqui_tts_server")
    rows = [("Coqui tts-server (eager PyTorch)", theirs)] + [
        (f"triton-tts {key.split('_')[3].upper()}, gRPC", r)
        for key, r in results.items()
        if key.startswith("triton_tts_coqui_")
    ]
    for name, r in rows:
        if r is None:
            continue
        ratio = f"{r['x_real_time'] / theirs['x_real_time']:.2f}" if theirs else "-"
        lines.append(
            f"| {name} | {r['x_real_time']:.2f} | {ratio} | {r['p50_s']:.2f} s | {r['p99_s']:.2f} s |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
