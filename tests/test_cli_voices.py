"""Every kind of voice folder through the commands users type (issue 39): `triton-tts serve
--voice ...` and `triton-tts build-repo --voice ...` with chunk voices (joe; baker, the
Mandarin voice) and an XTTS voice together, and an XTTS voice alone, each speaking through
the served server with `triton-tts say`; a folder of neither kind, or a broken XTTS
folder, ends in one line that names what is wrong.

The XTTS voice is a tiny random-weight checkpoint in Coqui's layout (testkit) conditioned
without the perceiver resampler, exported with `triton-tts export coqui` and given a
named speaker with `triton-tts speakers add`: the whole path from checkpoint to speech is
the command line's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from testkit.xtts_checkpoints import build_xtts, voiced_clip
from tests.helpers import wait_until
from triton_tts.contract import paths
from triton_tts.ops.server import READY_TIMEOUT_S, free_port
from triton_tts.xtts.card import XttsCard

pytestmark = [pytest.mark.server, pytest.mark.export]  # its own servers; Coqui builds the checkpoint

# The entry point users type (`pip install` puts it next to the interpreter).
ENTRY = Path(sys.executable).parent / "triton-tts"
CLI = [str(ENTRY)] if ENTRY.is_file() else [sys.executable, "-m", "triton_tts.cli"]
NARRATOR = "narrator"
XTTS_NAME = "clone"  # the folder's name is the voice's name
MAX_AUDIO_TOKENS = 23  # 20 codes a segment: short speech, a short test
COMMAND_S = 300  # a deadline for a hang, not a speed bound


def triton_tts(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=COMMAND_S, check=False, cwd=cwd
    )


@pytest.fixture(scope="module")
def xtts_voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XTTS checkpoint without the perceiver, exported and given a speaker by the CLI."""
    work = tmp_path_factory.mktemp("xtts-cli")
    checkpoint = build_xtts(work / "ckpt", "tiny", seed=3, max_audio_tokens=MAX_AUDIO_TOKENS, perceiver=False)
    out = work / XTTS_NAME
    done = triton_tts("export", "coqui", "--checkpoint", checkpoint / "model.pth",
                      "--config", checkpoint / "config.json", "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert not XttsCard.load(out).perceiver
    sf.write(work / "narrator.wav", voiced_clip(21, 4.0, 22050), 22050)
    done = triton_tts("speakers", "add", NARRATOR, work / "narrator.wav", "--voice", out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def baker_dir() -> Path:
    folder = paths.voices_dir() / "baker"
    if not (folder / "voice.json").exists():
        pytest.fail(f"no Mandarin voice at {folder}: run `make voices/baker/voice.json` (make test does)")
    return folder


@contextmanager
def serving(tmp: Path, *voices: Path) -> Iterator[str]:
    """`triton-tts serve --voice ...` on free ports until exit; yields its HTTP address once
    it says it is ready. Stopped with Ctrl-C's signal, as users stop it."""
    ports = [str(free_port()) for _ in range(3)]
    command = [*CLI, "serve", *(a for v in voices for a in ("--voice", str(v))),
               "--model-repository", str(tmp / "repo"), "--http-port", ports[0], "--grpc-port", ports[1],
               "--metrics-port", ports[2], "--health-port", "0"]  # fmt: skip
    env = {**os.environ, "TRITON_TTS_ADMIN_KEY": "test-admin-cli-voices"}
    with (tmp / "serve.out").open("w+", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)

        def said() -> str:
            out.flush()
            return (tmp / "serve.out").read_text(encoding="utf-8")

        try:
            wait_until(
                lambda: process.poll() is not None or "triton-tts is ready" in said(),
                READY_TIMEOUT_S,
                "serve",
            )
            assert process.poll() is None, f"serve exited with {process.returncode}:\n{said()[-4000:]}"
            yield f"localhost:{ports[0]}"
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(COMMAND_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    assert process.returncode == 0, said()[-4000:]


def say(url: str, text: str, voice: str, out: Path) -> tuple[npt.NDArray[np.float32], int]:
    done = triton_tts("say", text, "--voice", voice, "--url", url, "-o", out)
    assert done.returncode == 0, done.stderr[-3000:]
    audio, rate = sf.read(out, dtype="float32")
    assert audio.ndim == 1 and audio.shape[0] > 0.2 * rate  # speech, not an empty file
    assert float(np.sqrt(np.mean(audio**2))) > 1e-3  # and not silence
    return audio, rate


@pytest.fixture(scope="module")
def mixed(
    voice_dir: Path, baker_dir: Path, xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("serve-mixed"), voice_dir, baker_dir, xtts_voice) as url:
        yield url


def test_joe_baker_and_an_xtts_voice_serve_together(mixed: str, tmp_path: Path) -> None:
    listed = triton_tts("voices", "--url", mixed)
    assert listed.returncode == 0, listed.stderr
    for name in ("joe", "baker", XTTS_NAME):
        assert name in listed.stdout, listed.stdout
    assert say(mixed, "Hello from the first voice.", "joe", tmp_path / "joe.wav")[1] == 22050
    assert say(mixed, "今天天气很好。", "baker", tmp_path / "baker.wav")[1] == 24000
    clone = f"{XTTS_NAME}:{NARRATOR}"
    assert say(mixed, "A cloned voice speaks.", clone, tmp_path / "xtts.wav")[1] == 24000


def test_an_xtts_voice_alone_serves_beside_the_bundled_default(
    xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    with serving(tmp_path_factory.mktemp("serve-xtts"), xtts_voice) as url:
        assert (
            say(url, "Only the cloned voice was named.", f"{XTTS_NAME}:{NARRATOR}", tmp_path / "x.wav")[1]
            == 24000
        )
        assert say(url, "The default voice.", "joe", tmp_path / "joe.wav")[1] == 22050


def test_build_repo_takes_xtts_and_chunk_voices_in_any_order(
    voice_dir: Path, xtts_voice: Path, tmp_path: Path
) -> None:
    done = triton_tts("build-repo", "--voice", xtts_voice, "--voice", voice_dir, "--out", tmp_path / "repo")
    assert done.returncode == 0, done.stderr[-3000:]
    for model in ("tts", "acoustic", "xtts", "xtts_style", "xtts_speaker", "xtts_decoder"):
        assert (tmp_path / "repo" / model / "config.pbtxt").is_file(), model
    assert (tmp_path / "repo" / "xtts" / "1" / "speakers" / f"{NARRATOR}.npz").is_file()


@pytest.mark.parametrize("command", ["serve", "build-repo"])
@pytest.mark.parametrize("folder", ["empty", "absent"])
def test_a_folder_of_neither_kind_is_named_in_one_line(tmp_path: Path, command: str, folder: str) -> None:
    (tmp_path / "empty").mkdir()
    target = tmp_path / folder
    if command == "serve":  # free ports, should it start after all
        ports = [
            a for flag in ("--http-port", "--grpc-port", "--metrics-port") for a in (flag, str(free_port()))
        ]
        args = ["--model-repository", str(tmp_path / "repo"), *ports, "--health-port", "0"]
    else:
        args = ["--out", str(tmp_path / "repo")]
    done = triton_tts(command, "--voice", target, *args)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"triton-tts: no voice at {target}: ")
    assert "voice.json" in lines[0] and "xtts.json" in lines[0]
    assert not (tmp_path / "repo").exists()  # refused before any work


def test_a_broken_xtts_folder_is_named_in_one_line(xtts_voice: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(xtts_voice, broken, copy_function=os.link)
    (broken / "style.onnx").unlink()  # a linked file: replaced, not written through
    (broken / "style.onnx").write_bytes(b"\x08\x07not an onnx graph" * 16)
    done = triton_tts("build-repo", "--voice", broken, "--out", tmp_path / "repo")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"triton-tts: {broken / 'style.onnx'} is not a loadable ONNX model")
    assert "Traceback" not in done.stderr
