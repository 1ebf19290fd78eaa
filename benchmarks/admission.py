"""Bursts against the default admission and against admission off, side by side.

Each burst is ``N`` raw tritonclient callers released together (no retries: a batch job
or perf_analyzer does not retry), each sending its text ``--rounds`` times; a caller
states no deadline, so the server's default budget applies. The same bursts run against
two servers in one run, one after the other on the same machine: the shipped build, and
the same build with admission off (budgets too large to refuse anything). Per burst:

- refused: the share of requests refused (UNAVAILABLE);
- admitted p99: the latency of the requests that were served;
- off p99: the same burst's p99 with admission off, every request served.

A refusal is right only where the p99 with admission off passes the default budget
(those requests would have waited past it); the burst of paragraphs shows the server
still refuses what it cannot serve in time.

    python -m benchmarks.admission                       # 16/32/64 one-sentence callers, paragraphs
    python -m benchmarks.admission --callers 16 --rounds 1 --no-paragraphs   # smoke

Writes results/admission.json and results/admission.md, stamped (benchmarks/stamp.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from benchmarks.overload import own_server, percentile
from benchmarks.stamp import stamp, write_report
from testkit.sample_texts import PARAGRAPH, SENTENCES
from triton_tts.build.model_configs import BuildOptions

CALLERS = [16, 32, 64]
OFF_MS = 10**9  # budgets no wait reaches: admission refuses nothing


def admission_off() -> BuildOptions:
    return dataclasses.replace(
        BuildOptions(), text_budget_ms=OFF_MS, stream_wait_ms=OFF_MS, max_wait_ms=OFF_MS
    )


def burst(url: str, texts: list[str], rounds: int) -> dict[str, Any]:
    """Every text's caller at once, each sending its text ``rounds`` times in a row."""
    gate = threading.Barrier(len(texts))
    lock = threading.Lock()
    served: list[float] = []
    refused: list[float] = []
    errors: list[str] = []

    def caller(text: str) -> None:
        client = grpcclient.InferenceServerClient(url)
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=np.object_))
        try:
            gate.wait()
            for _ in range(rounds):
                start = time.perf_counter()
                try:
                    client.infer("tts", [tensor])
                    outcome, kept = "ok", served
                except InferenceServerException as err:
                    outcome = "busy" if "UNAVAILABLE" in str(err.status()) else str(err)
                    kept = refused if outcome == "busy" else []
                with lock:
                    kept.append(time.perf_counter() - start)
                    if outcome not in ("ok", "busy"):
                        errors.append(outcome)
        finally:
            client.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=caller, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = len(texts) * rounds
    return {
        "requests": total,
        "refused_share": len(refused) / total,
        "admitted_p50_s": percentile(served, 50),
        "admitted_p99_s": percentile(served, 99),
        "refusal_p99_s": percentile(refused, 99),
        "wall_s": time.perf_counter() - started,
        "errors": errors[:5],
    }


def bursts(args: argparse.Namespace) -> list[tuple[str, list[str], int]]:
    found = [
        (f"{n} callers, one sentence x{args.rounds}", one_sentences(n), args.rounds) for n in args.callers
    ]
    if args.paragraphs:
        found.append(("64 callers, a paragraph each", [PARAGRAPH] * 64, 1))
    return found


def one_sentences(count: int) -> list[str]:
    return [SENTENCES[i % len(SENTENCES)] for i in range(count)]


def run_on(options: BuildOptions, plan: list[tuple[str, list[str], int]]) -> list[dict[str, Any]]:
    with ExitStack() as stack:
        server = stack.enter_context(own_server(options, stack))
        rows = []
        for name, texts, rounds in plan:
            time.sleep(2.0)  # the ledger empty, the previous burst's stubs idle
            rows.append({"burst": name, **burst(server.grpc_url, texts, rounds)})
            logging.info("%s: %s", name, rows[-1])
        return rows


def markdown(results: dict[str, Any]) -> str:
    budget = results["default_text_budget_s"]
    lines = [
        f"Bursts of raw tritonclient callers (gRPC, no retries, no deadline stated: the default "
        f"budget of {budget:g} s applies), the shipped build against the same build with "
        "admission off, one after the other in one run:",
        "",
        "| burst | refused | admitted p50 | admitted p99 | off: p99 | off: refused | refusal p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for on, off in zip(results["default"], results["off"], strict=True):
        refusal = f"{1000 * on['refusal_p99_s']:.0f} ms" if on["refused_share"] else "-"
        lines.append(
            f"| {on['burst']} | {100 * on['refused_share']:.0f}% | {on['admitted_p50_s']:.1f} s | "
            f"{on['admitted_p99_s']:.1f} s | {off['admitted_p99_s']:.1f} s | "
            f"{100 * off['refused_share']:.0f}% | {refusal} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--callers", type=int, nargs="+", default=CALLERS, help="callers per burst")
    parser.add_argument("--rounds", type=int, default=3, help="requests per caller, one after the other")
    parser.add_argument(
        "--no-paragraphs", dest="paragraphs", action="store_false", help="leave out the burst of paragraphs"
    )
    parser.add_argument("--out", type=Path, default=Path("results/admission.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    plan = bursts(args)
    results: dict[str, Any] = {
        **stamp(),
        "default_text_budget_s": BuildOptions().text_budget_ms / 1000,
        "default": run_on(BuildOptions(), plan),
        "off": run_on(admission_off(), plan),
    }
    write_report(args.out, results, [markdown(results)])
    return results


if __name__ == "__main__":
    main()
