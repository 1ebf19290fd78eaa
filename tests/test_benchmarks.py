"""Benchmarks are not tests: CI only checks that the harnesses run, on a tiny setting."""

from __future__ import annotations

import json
from pathlib import Path

from triton_tts.server import TritonServer


def test_perf_analyzer_harness_smoke(server: TritonServer, tmp_path: Path) -> None:
    import perf  # benchmarks/ is put on sys.path by conftest

    results = perf.main(
        ["--smoke", "--url-grpc", server.grpc_url, "--url-http", server.http_url, "--out", str(tmp_path)]
    )
    assert [r["level"] for r in results["rows"]] == [1, 2]
    assert all(r["requests_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] for r in results["rows"])
    assert all(set(r["avg_batch"]) >= {"acoustic", "vocoder"} for r in results["rows"])
    assert (tmp_path / "report.md").read_text(encoding="utf-8").startswith("# perf_analyzer")
    assert (tmp_path / "throughput_latency.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "perf.json").read_text(encoding="utf-8"))["mean_audio_s"] > 1


def test_rtf_harness_smoke(server: TritonServer, tmp_path: Path) -> None:
    import rtf

    results = rtf.main(
        ["--url", server.grpc_url, "--rounds", "1", "--concurrency", "2", "--out", str(tmp_path / "rtf.json")]
    )
    for key in ("direct_onnxruntime_batch1", "served_single", "served_concurrent"):
        assert results[key]["x_real_time"] > 1


def test_locust_scenario_smoke(server: TritonServer, tmp_path: Path) -> None:
    import csv
    import subprocess
    import sys

    locustfile = Path(__file__).resolve().parent.parent / "benchmarks" / "locustfile.py"
    done = subprocess.run(
        [
            sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", "2", "-r", "2",
            "-t", "6s", "--host", server.http_url, "--grpc-url", server.grpc_url,
            "--csv", str(tmp_path / "locust"), "--only-summary", "--stop-timeout", "30",
        ],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "locust_stats.csv", encoding="utf-8") as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    assert ("Aggregated" in {name for _, name in rows}) and int(
        rows[("", "Aggregated")]["Failure Count"]
    ) == 0
    assert any(name == "RTF x1000" and int(r["Request Count"]) > 0 for (_, name), r in rows.items())


def test_streaming_harness_smoke(server: TritonServer, tmp_path: Path) -> None:
    import streaming

    results = streaming.main(
        [
            "--url-grpc", server.grpc_url, "--url-http", server.http_url, "--levels", "1", "--rounds", "1",
            "--no-memory", "--out", str(tmp_path / "streaming.json"),
        ]
    )  # fmt: skip
    level = results["levels"][0]
    assert 0 < level["first_chunk_p50_s"] <= level["stream_total_p50_s"]
