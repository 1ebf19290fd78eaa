"""`triton-tts say` against the test server, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from triton_tts.server import TritonServer, free_port

CLI = [sys.executable, "-m", "triton_tts.cli"]


def triton_tts(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_say_writes_a_playable_wav(server: TritonServer, tmp_path: Path, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    out = tmp_path / f"hello_{protocol}.wav"
    done = triton_tts(
        "say",
        "Hello from the command line.",
        "-o",
        str(out),
        "--url",
        url,
        "--protocol",
        protocol,
        "--speed",
        "1.2",
    )
    assert done.returncode == 0, done.stderr
    info = sf.info(str(out))
    assert info.samplerate == 22050 and info.channels == 1 and info.subtype == "PCM_16"
    assert info.duration > 0.8
    assert f"at {info.samplerate} Hz" in done.stdout


def test_say_float_wav_and_voice_name(server: TritonServer, tmp_path: Path) -> None:
    out = tmp_path / "float.wav"
    done = triton_tts(
        "say",
        "Floating point.",
        "-o",
        str(out),
        "--url",
        server.http_url,
        "--format",
        "float",
        "--voice",
        "joe",
    )
    assert done.returncode == 0, done.stderr
    assert sf.info(str(out)).subtype == "FLOAT"


def test_say_reads_standard_input(server: TritonServer, tmp_path: Path) -> None:
    out = tmp_path / "stdin.wav"
    done = subprocess.run(
        [*CLI, "say", "-", "-o", str(out), "--url", server.http_url],
        input="Read from a pipe.",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sf.info(str(out)).duration > 0.5


def test_say_reports_rejections_and_unreachable_servers(server: TritonServer, tmp_path: Path) -> None:
    rejected = triton_tts(
        "say", "Hi.", "--speed", "0", "-o", str(tmp_path / "x.wav"), "--url", server.http_url
    )
    assert rejected.returncode == 1 and "SPEED" in rejected.stderr
    unknown_voice = triton_tts(
        "say", "Hi.", "--voice", "nobody", "-o", str(tmp_path / "v.wav"), "--url", server.http_url
    )
    assert unknown_voice.returncode == 1 and "nobody" in unknown_voice.stderr
    no_model = triton_tts(
        "say",
        "Hi.",
        "--model",
        "absent",
        "-o",
        str(tmp_path / "m.wav"),
        "--url",
        server.grpc_url,
        "--protocol",
        "grpc",
    )
    assert no_model.returncode == 1 and "does not serve a ready model" in no_model.stderr
    unreachable = triton_tts("say", "Hi.", "-o", str(tmp_path / "y.wav"), "--url", f"localhost:{free_port()}")
    assert unreachable.returncode == 1 and "triton-tts:" in unreachable.stderr
    assert not any(tmp_path.glob("*.wav"))
