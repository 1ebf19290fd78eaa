"""benchmarks/kokoro.py's report: the Markdown tables of its results (results/kokoro.md)."""

from __future__ import annotations

from typing import Any


def tables(results: dict[str, Any]) -> list[str]:
    sides = [(key, name) for key, name in RUNNERS if key in results]
    lines = [
        f"Kokoro-82M int8, speaker {results['speaker']}: the eight sentences x {results['rounds']} "
        f"({results['sentences']} requests) from one queue, and the first chunk of a "
        f"{results['paragraph_chars']}-character paragraph (bursts of the concurrency). CPU s: "
        "what the sentences cost (the worker; tritonserver, its stubs and the gRPC clients); vs "
        "kokoro-onnx: its wall or CPU seconds over these on the same texts (kokoro-onnx trims the "
        "silence at the ends, so its audio is shorter). Others' load: CPU the machine spent beyond "
        "this run's, per second of the level (0 on an idle machine):",
        "",
        "| concurrency | runner | x real time | wall s | audio s | CPU s | vs kokoro-onnx: wall | CPU "
        "| request p50 | p99 | first chunk p50 | first chunk audio | others' load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, concurrency in enumerate(results["levels"]):
        peer = results.get("kokoro_onnx", {}).get("levels", [None] * (i + 1))[i]
        for key, name in sides:
            level = results[key]["levels"][i]
            w, f = level["whole"], level["first"]
            wall = f"{peer['whole']['wall_s'] / w['wall_s']:.2f}" if peer else "-"
            cpu = f"{peer['whole']['cpu_s'] / w['cpu_s']:.2f}" if peer else "-"
            lines.append(
                f"| {concurrency} | {name} | {w['x_real_time']:.2f} | {w['wall_s']:.1f} | {w['audio_s']:.1f} "
                f"| {w['cpu_s']:.1f} | {wall} | {cpu} | {w['p50_s']:.2f} s | {w['p99_s']:.2f} s "
                f"| {f['first_chunk_p50_s']:.2f} s | {f['first_chunk_audio_s']:.1f} s "
                f"| {level['cpu']['others_cores']:.2f} cores |"
            )
    threads = results["server_instances_threads"]
    memory = [
        "Per side: peak memory (the server's from ready on), wall time (the server's start "
        f"included) and what other processes ran meanwhile on the {threads['cores']} cores (CPU "
        "seconds of the machine less this run's, per second). triton-tts: acoustic "
        f"{threads['acoustic'][0]} x {threads['acoustic'][1]} intra-op thread(s), vocoder "
        f"{threads['vocoder'][0]} x {threads['vocoder'][1]}, joe served beside kokoro; kokoro-onnx: "
        f"one session, {results['peer_intra_op_threads']} intra-op thread(s) (0: onnxruntime's default):",
        "",
        "| runner | peak RSS (sum) | without joe's stages | PSS at most | processes | side's wall "
        "| others' load |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, name in sides:
        m, cpu = results[key]["memory"], results[key]["cpu"]
        rss = max(m["peak_rss_mib"], m.get("ru_maxrss_mib", 0.0))
        own = max(m["peak_rss_without_joe_mib"], m.get("ru_maxrss_mib", 0.0))
        memory.append(
            f"| {name} | {rss:.0f} MiB | {own:.0f} MiB | {m['peak_pss_mib']:.0f} MiB | {m['processes']} "
            f"| {cpu['wall_s']:.0f} s | {cpu['others_cores']:.2f} cores |"
        )
    return ["\n".join(lines), "\n".join(memory)]


RUNNERS = [("kokoro_onnx", "kokoro-onnx 0.6.1, one process"), ("triton_tts", "triton-tts, gRPC")]
