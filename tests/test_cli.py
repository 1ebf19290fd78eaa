"""`triton-tts say` against the test server, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from triton_tts.server import TritonServer, free_port

CLI = [sys.executable, "-m", "triton_tts.cli"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_say_writes_a_playable_wav(server: TritonServer, tmp_path: Path, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    out = tmp_path / f"hello_{protocol}.wav"
    done = subprocess.run(
        [
            *CLI,
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
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    info = sf.info(str(out))
    assert info.samplerate == 22050 and info.channels == 1 and info.subtype == "PCM_16"
    assert info.duration > 0.8


def test_say_float_wav_and_voice_name(server: TritonServer, tmp_path: Path) -> None:
    out = tmp_path / "float.wav"
    done = subprocess.run(
        [
            *CLI,
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
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sf.info(str(out)).subtype == "FLOAT"


def test_say_reports_rejections_and_unreachable_servers(server: TritonServer, tmp_path: Path) -> None:
    rejected = subprocess.run(
        [*CLI, "say", "Hi.", "--speed", "0", "-o", str(tmp_path / "x.wav"), "--url", server.http_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rejected.returncode == 1 and "SPEED" in rejected.stderr
    unreachable = subprocess.run(
        [*CLI, "say", "Hi.", "-o", str(tmp_path / "y.wav"), "--url", f"localhost:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert unreachable.returncode == 1 and "triton-tts:" in unreachable.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()
