"""`triton-tts say` against the test server, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from triton_tts.ops.server import TritonServer, free_port

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


# Command line ({tmp}: a scratch folder, {nowhere}: a closed port) -> a fragment of the one
# line it must end with. No server needed.
EXPECTED_FAILURES = {
    "synth-missing-input": (["synth", "--input", "{tmp}/absent.txt"], "cannot read --input"),
    "synth-out-dir-is-a-file": (
        ["synth", "--input", "{tmp}/a_file", "--out-dir", "{tmp}/a_file", "--url", "{nowhere}"],
        "cannot make --out-dir",
    ),
    "say-unreachable": (["say", "Hi.", "-o", "{tmp}/x.wav", "--url", "{nowhere}"], "cannot reach"),
    "say-grpc-unreachable": (
        ["say", "Hi.", "-o", "{tmp}/x.wav", "--url", "{nowhere}", "--protocol", "grpc"],
        "cannot reach",
    ),
    "say-no-such-folder": (["say", "Hi.", "-o", "{tmp}/absent/x.wav"], "there is no folder"),
    "say-output-is-a-folder": (["say", "Hi.", "-o", "{tmp}"], "it is a folder"),
    "voices-unreachable": (["voices", "--url", "{nowhere}"], "cannot reach"),
    "build-repo-missing-voice": (["build-repo", "--voice", "{tmp}/absent"], "no voice at"),
    "build-repo-out-is-a-file": (["build-repo", "--out", "{tmp}/a_file"], "is a file"),
    "export-piper-missing-onnx": (
        ["export", "piper", "--onnx", "{tmp}/absent.onnx", "--out", "{tmp}/v"],
        "no Piper voice at",
    ),
    "export-piper-corrupt-onnx": (
        ["export", "piper", "--onnx", "{tmp}/garbage.onnx", "--out", "{tmp}/v"],
        "is not a loadable ONNX model",
    ),
    "export-piper-out-is-a-file": (["export", "piper", "--out", "{tmp}/a_file"], "is a file"),
}


@pytest.mark.parametrize("case", list(EXPECTED_FAILURES))
def test_expected_failures_end_in_one_line(tmp_path: Path, case: str) -> None:
    """The cause and the way out in one line on stderr, exit code 1, never a traceback."""
    (tmp_path / "a_file").write_text("not a folder", encoding="utf-8")
    (tmp_path / "garbage.onnx").write_bytes(b"\x08\x07not an onnx graph" * 16)
    (tmp_path / "garbage.onnx.json").write_text("{}", encoding="utf-8")
    template, fragment = EXPECTED_FAILURES[case]
    args = [a.format(tmp=tmp_path, nowhere=f"localhost:{free_port()}") for a in template]
    done = triton_tts(*args)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("triton-tts: ") and fragment in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "v").exists() and not (tmp_path / "x.wav").exists()


def test_bugs_keep_their_traceback_and_v_shows_expected_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, voice_dir: Path
) -> None:
    from triton_tts import cli
    from triton_tts.cli.options import UserError
    from triton_tts.ops import repository

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    # The CLI imports the repository builder when a command needs it (the base install has
    # no serving dependencies), so the builder is replaced where it lives.
    monkeypatch.setattr(repository, "build_repository", broken)
    with pytest.raises(ZeroDivisionError):  # the voice is sound: not the user's fault
        cli.main(["build-repo", "--voice", str(voice_dir), "--out", str(tmp_path / "repo")])
    a_file = tmp_path / "a_file"
    a_file.touch()
    assert cli.main(["build-repo", "--out", str(a_file)]) == 1
    with pytest.raises(UserError, match="is a file"):
        cli.main(["-v", "build-repo", "--out", str(a_file)])


def test_coqui_export_without_network_says_so(tmp_path: Path) -> None:
    import importlib.util
    import os

    if importlib.util.find_spec("TTS") is None:
        pytest.skip("the Coqui export extra is not installed")
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "https_proxy", "http_proxy")}
    closed = f"http://127.0.0.1:{free_port()}"  # no network even where there is one
    env.update(HTTPS_PROXY=closed, https_proxy=closed, TTS_HOME=str(tmp_path / "tts_home"))
    done = subprocess.run(
        [*CLI, "export", "coqui", "--model-name", "tts_models/en/ljspeech/vits", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "ERROR" not in done.stderr, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("triton-tts:")]
    assert ours == done.stderr.strip().splitlines()[-1:]
    assert "cannot download Coqui model 'tts_models/en/ljspeech/vits'" in ours[0]
    assert "--checkpoint/--config" in ours[0]


# Runs the CLI where a module cannot be imported, as in an install without its extra (a
# serving-only `pip install triton-tts`): a finder ahead of all others refuses it.
WITHOUT_MODULE = """
import sys
from importlib.abc import MetaPathFinder

absent = sys.argv.pop(1)


class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == absent:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Absent())
from triton_tts.cli import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("absent", "named"), [("torch", "torch"), ("TTS", "TTS (coqui-tts)")])
def test_export_without_the_export_extra_says_how_to_get_it(tmp_path: Path, absent: str, named: str) -> None:
    done = subprocess.run(
        [
            sys.executable, "-c", WITHOUT_MODULE, absent,
            "export", "coqui", "--model-name", "tts_models/en/ljspeech/vits", "--out", str(tmp_path / "v"),
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"triton-tts: {named} is not installed (the export extra): "), last
    assert "pip install 'triton-tts[export]'" in last and "pip install -e '.[export]'" in last
    assert not (tmp_path / "v").exists()


def test_a_missing_module_no_extra_provides_keeps_its_traceback() -> None:
    """numpy is a core dependency: missing, the install is broken, not short of an extra."""
    from triton_tts.cli import _missing_extra

    assert _missing_extra(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None
    assert _missing_extra(ModuleNotFoundError("No module named 'triton_tts.x'", name="triton_tts.x")) is None
    torch = _missing_extra(ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn"))
    assert torch is not None and torch.startswith("torch is not installed (the export extra)")


# Flags that the README, the chart and benchmarks name: generated now, they must stay.
KNOWN_BUILD_FLAGS = {
    "--max-batch-size": "64", "--acoustic-instances": "3", "--vocoder-instances": "3",
    "--acoustic-threads": "2", "--vocoder-threads": "auto", "--queue-delay-us": "500",
    "--vocoder-items-per-run": "2", "--acoustic-items-per-run": "2", "--gpu-instances": "2",
    "--gpu-queue-delay-us": "100", "--long-text-instances": "2", "--max-texts": "0",
    "--max-streams": "3", "--chunk-queue-size": "0", "--admission": "requests",
    "--text-budget-ms": "2000", "--first-chunk-budget-ms": "500", "--stream-headroom-pct": "20",
    "--caller-share-pct": "25",
}  # fmt: skip


def test_build_flags_are_the_build_options_with_their_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    from triton_tts.build.model_configs import BuildOptions
    from triton_tts.cli import build_parser
    from triton_tts.cli.options import build_options

    parser = build_parser()
    assert build_options(parser.parse_args(["build-repo"])) == BuildOptions()
    argv = [part for flag, value in KNOWN_BUILD_FLAGS.items() for part in (flag, value)]
    built = build_options(parser.parse_args(["serve", *argv, "--cpu-preferred-batch-sizes"]))
    for flag, value in KNOWN_BUILD_FLAGS.items():
        got = getattr(built, flag[2:].replace("-", "_"))
        assert str(got) == value, flag
    assert built.cpu_preferred_batch_sizes == ()
    for bad, why in [
        (["--max-batch-size", "0"], "below the minimum"),
        (["--max-batch-size", "257"], "above the maximum"),
        (["--acoustic-threads", "lots"], "does not match"),
        (["--gpu-preferred-batch-sizes", "8", "0"], "below the minimum"),
        (["--admission", "counts"], "does not match"),
        (["--stream-headroom-pct", "95"], "above the maximum"),
    ]:
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(["build-repo", *bad])
        assert stop.value.code == 2 and why in capsys.readouterr().err


def test_one_home_for_voices_with_or_without_make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the checkout in a plain shell (no TRITON_TTS_HOME: `make` no longer sets
    it either), a bare voice name finds the checkout's voice, and nothing is exported into
    the per-user data folder a wheel install would use."""
    import os

    from triton_tts.contract import paths

    root = Path(__file__).resolve().parent.parent
    monkeypatch.delenv("TRITON_TTS_HOME", raising=False)
    assert paths.data_home() == root and paths.default_voice_dir() == root / "voices" / "joe"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_TTS_HOME"}
    env.update(XDG_DATA_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "home"), PYTHONIOENCODING="utf-8")
    done = subprocess.run(
        [*CLI, "frontend", "你好", "--voice", "baker"], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "symbols:" in done.stdout  # the Mandarin voice's own symbol line: baker was found
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "home" / ".local").exists()
