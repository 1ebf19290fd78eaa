"""The image's install, proven without Docker: the wheel on the image's Python, serving.

The Triton image (nvcr.io/nvidia/tritonserver:26.08-py3) runs Python 3.12, and its
Python-backend stub embeds that interpreter. This test does what the Dockerfile does, on
Python 3.12 (pyenv's, fetched wheels from `make setup`, no network): build the wheel from
the committed tree, install it with exactly ``requirements/image.txt`` into a fresh
virtualenv, then run ``triton-tts serve`` from that install, from a folder that is not the
checkout, and check one sentence with the speech recogniser. The nvidia-pytriton wheel's
tritonserver stands in for the image's own: another release (2.51.0, not 2.72.0), with a
3.12 stub; docs/deployment.md, "Which Triton", says what that leaves unproven.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from packaging.requirements import Requirement

from tests.helpers import tts_inputs
from triton_tts.ops.server import free_port
from triton_tts.quality.intelligibility import transcribe, word_error_rate

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = ROOT / ".wheelhouse" / "py312"
IMAGE_REQUIREMENTS = ROOT / "requirements" / "image.txt"
LOCK = ROOT / "requirements" / "lock.txt"
IMAGE_PYTHON = "3.12"
PYENV_VERSION = "3.12.1"  # the image Python that pyenv has here
SENTENCE = "Please call me back when you get home."
SERVE_TIMEOUT_S = 300.0
pytestmark = pytest.mark.image


def pinned(lines: list[str]) -> dict[str, str]:
    """name -> version of every ``name==version`` line (comments and blanks skipped)."""
    pins = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins[canonical(req.name)] = str(req.specifier).removeprefix("==")
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(name: str) -> str:
    """``name==version`` as requirements/lock.txt (the exact versions `make` installs) has it."""
    lock = pinned(LOCK.read_text(encoding="utf-8").splitlines())
    return f"{name}=={lock[canonical(name)]}"


def image_python() -> Path:
    """PY312 (as `make` passes it), or pyenv's 3.12 (pyenv's shims only run the global one)."""
    found = os.environ.get("PY312", "")
    if not found:
        prefix = subprocess.run(
            ["pyenv", "prefix", PYENV_VERSION], capture_output=True, text=True, check=False
        ).stdout.strip()
        found = f"{prefix}/bin/python{IMAGE_PYTHON}" if prefix else ""
    if not found or not Path(found).exists():
        pytest.fail(f"no Python {IMAGE_PYTHON} (the Triton image's): `make setup` needs it (PY312=...)")
    return Path(found)


def run(cmd: Sequence[object], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, cwd=cwd, env=env
    )
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return str(done.stdout)


def committed_tree(target: Path) -> Path:
    """The files a fresh clone has (tracked, or new and not ignored): no voices, no builds."""
    listed = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT).split("\0")
    for relative in filter(None, listed):
        source = ROOT / relative
        if source.is_file() and not source.is_symlink():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
        elif source.exists():
            raise AssertionError(f"{relative} is a link or special file: a wheel would not carry it")
    return target


@pytest.fixture(scope="module")
def image_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh Python 3.12 virtualenv with the wheel and the image's requirement set."""
    if not (WHEELHOUSE / ".complete").exists():
        pytest.fail(f"no wheels at {WHEELHOUSE}: run `make setup`")
    python = image_python()
    scratch = tmp_path_factory.mktemp("image")
    source = committed_tree(scratch / "src")
    offline = ["--no-index", "--find-links", WHEELHOUSE]
    dist = scratch / "dist"
    run([python, "-m", "pip", "wheel", "-q", "--no-deps", *offline, "-w", dist, source])
    (wheel,) = dist.glob("triton_tts-*.whl")
    venv = scratch / "venv"
    run([python, "-m", "venv", venv])
    # As the Dockerfile installs it: the image set, the wheel with its serving extra, and
    # here the local tritonserver that stands in for the image's own.
    run([venv / "bin" / "pip", "install", "-q", *offline, "-r", IMAGE_REQUIREMENTS, f"{wheel}[serve]",
         locked("nvidia-pytriton")])  # fmt: skip
    return venv


def test_installed_versions_are_the_image_set(image_install: Path) -> None:
    freeze = run([image_install / "bin" / "pip", "freeze"]).splitlines()
    installed = pinned([line for line in freeze if "==" in line])
    for name, version in pinned(IMAGE_REQUIREMENTS.read_text(encoding="utf-8").splitlines()).items():
        assert installed.get(name) == version, f"{name}: want {version}, installed {installed.get(name)}"
    assert any(line.startswith("triton-tts @ file:") for line in freeze), freeze  # from the wheel


def test_the_installed_package_is_whole_and_finds_its_data(image_install: Path, tmp_path: Path) -> None:
    """Real files, no links; client, export, gateway (with its page) and the repository
    template importable from site-packages, whatever the working folder."""
    probe = (
        "import json, pathlib, triton_tts, triton_tts.client, triton_tts.export.piper\n"
        "import triton_tts.gateway.app\n"
        "from triton_tts.contract import paths\n"
        "(folder,) = triton_tts.__path__  # a namespace package: in the wheel, one folder\n"
        "package = pathlib.Path(folder)\n"
        "links = [str(p) for p in package.rglob('*') if p.is_symlink()]\n"
        "print(json.dumps({'package': str(package), 'links': links,\n"
        "  'template': str(paths.repository_template()),\n"
        "  'client': triton_tts.client.__file__, 'voice': str(paths.default_voice_dir())}))\n"
    )
    import json

    env = {**os.environ, "TRITON_TTS_HOME": str(tmp_path / "home")}
    env.pop("TRITON_TTS_REPOSITORY_TEMPLATE", None)
    found = json.loads(run([image_install / "bin" / "python", "-c", probe], cwd=tmp_path, env=env))
    package = Path(found["package"])
    assert "site-packages" in package.parts and found["links"] == []
    template = Path(found["template"])
    assert template == package / "model_repository"
    for model in ("preprocess", "acoustic", "vocoder", "postprocess", "tts", "tts_stream"):
        assert (template / model / "1" / "model.py").is_file()
        assert (template / model / "config.pbtxt").is_file()
    assert not list(template.rglob("*.onnx")) and not list(template.rglob("voice.json"))
    assert Path(found["client"]).is_relative_to(package)
    assert (package / "gateway" / "static" / "index.html").is_file()  # the gateway's page is package data
    assert Path(found["voice"]) == tmp_path / "home" / "voices" / "joe"


def test_plain_pip_install_of_the_source_tree(image_install: Path, tmp_path: Path) -> None:
    """`pip install .` (not editable) gives the same real files as the wheel, and they work."""
    python = image_python()
    source = committed_tree(tmp_path / "src")
    target = tmp_path / "site"
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--find-links", WHEELHOUSE,
         "--target", target, source])  # fmt: skip
    package = target / "triton_tts"
    for relative in (
        "client/tts_client.py",
        "export/piper.py",
        "export/coqui/registry.py",  # a subpackage of another portion
        "model_repository/vocoder/1/model.py",
    ):
        assert (package / relative).is_file() and not (package / relative).is_symlink(), relative
    probe = (
        "import triton_tts.client, triton_tts.export.piper\n"
        "from triton_tts.contract import paths\n"
        "print(triton_tts.client.__file__, triton_tts.export.piper.__file__, paths.repository_template())"
    )
    env = {key: value for key, value in os.environ.items() if key != "TRITON_TTS_REPOSITORY_TEMPLATE"}
    env["PYTHONPATH"] = str(target)  # this install first, the image set's packages behind it
    found = run([image_install / "bin" / "python", "-c", probe], cwd=tmp_path, env=env).split()
    assert all(Path(f).is_relative_to(package) for f in found), found


def test_the_image_install_serves_an_intelligible_sentence(image_install: Path, tmp_path: Path) -> None:
    """`triton-tts serve` from the 3.12 install: default voice exported into its home,
    repository built from the packaged template, real tritonserver with the 3.12 stub."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "PYTHONPATH", "TRITON_TTS_REPOSITORY_TEMPLATE")
    }
    env["TRITON_TTS_HOME"] = str(tmp_path / "home")
    env["TRITON_TTS_CACHE"] = str(tmp_path / "cache")
    # The image's PATH: its own Python first, never this test's virtualenv.
    env["PATH"] = os.pathsep.join(
        [str(image_install / "bin")]
        + [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)]
    )
    log = (tmp_path / "serve.log").open("w", encoding="utf-8")
    serve = subprocess.Popen(
        [str(image_install / "bin" / "triton-tts"), "serve", f"--http-port={http_port}",
         f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}", f"--health-port={free_port()}"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    client = httpclient.InferenceServerClient(f"localhost:{http_port}", network_timeout=120)
    try:
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while not _ready(client):
            assert serve.poll() is None, (tmp_path / "serve.log").read_text(encoding="utf-8")[-4000:]
            assert time.monotonic() < deadline, "not ready in time"
            time.sleep(1.0)
        result = client.infer("tts", tts_inputs(httpclient, SENTENCE, NOISE_SCALE=0.0, NOISE_W=0.0))
        audio = result.as_numpy("AUDIO").reshape(-1)
        rate = int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
        heard = transcribe(audio, rate)
        assert rate == 22050 and np.isfinite(audio).all()
        assert word_error_rate([SENTENCE], [heard]) <= 0.25, heard
        built = tmp_path / "home" / "build" / "model_repository"
        assert (built / "acoustic" / "1" / "model.onnx").exists()  # built where configured
        _check_gateway(image_install, grpc_port, tmp_path, env)
    finally:
        client.close()
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
    assert serve.returncode == 0, (tmp_path / "serve.log").read_text(encoding="utf-8")[-4000:]


# Riva's generated protos (nvidia-riva-client, protobuf 6) from the image install: its voices.
RIVA_VOICES = """
import sys, grpc
from riva.client.proto import riva_tts_pb2, riva_tts_pb2_grpc
with grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}") as channel:
    stub = riva_tts_pb2_grpc.RivaSpeechSynthesisStub(channel)
    config = stub.GetRivaSynthesisConfig(riva_tts_pb2.RivaSynthesisConfigRequest(), timeout=30)
print(" ".join(c.parameters["voice_name"] for c in config.model_config))
"""


def _check_gateway(image_install: Path, grpc_port: int, cwd: Path, env: dict[str, str]) -> None:
    """The image runs the gateway too (the chart's command, entry point overridden): from
    the 3.12 install it starts, reaches Triton over gRPC, answers Riva's API on its own port
    (nvidia-riva-client's protos on the image's protobuf), and stops cleanly on SIGTERM."""
    import urllib.error
    import urllib.request

    port, riva_port = free_port(), free_port()
    log_path = cwd / "gateway.log"
    with log_path.open("w", encoding="utf-8") as log:
        gateway = subprocess.Popen(
            [str(image_install / "bin" / "triton-tts"), "gateway", f"--triton-url=localhost:{grpc_port}",
             "--host=127.0.0.1", f"--port={port}", f"--riva-port={riva_port}"],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60.0
            status = {"live": 0, "ready": 0}
            while status != {"live": 200, "ready": 200}:
                assert gateway.poll() is None, log_path.read_text(encoding="utf-8")[-4000:]
                assert time.monotonic() < deadline, f"gateway probes {status}"
                for probe in status:
                    url = f"http://127.0.0.1:{port}/health/{probe}"
                    try:
                        with urllib.request.urlopen(url, timeout=5) as response:
                            status[probe] = response.status
                    except urllib.error.HTTPError as error:  # 503 until Triton is reached
                        status[probe] = error.code
                    except (urllib.error.URLError, OSError):  # not listening yet
                        status[probe] = 0
                time.sleep(0.5)
            voices = run([image_install / "bin" / "python", "-c", RIVA_VOICES, riva_port], cwd=cwd, env=env)
            assert "joe" in voices.split(), voices
        finally:
            gateway.terminate()  # SIGTERM, as the kubelet sends
            try:
                gateway.wait(30)
            except subprocess.TimeoutExpired:
                gateway.kill()
                gateway.wait()
    # uvicorn finishes what is in flight, then re-raises the SIGTERM it caught (exit 143)
    output = log_path.read_text(encoding="utf-8")
    assert gateway.returncode in (0, -signal.SIGTERM), output[-4000:]
    assert "Application shutdown complete" in output, output[-4000:]


def _ready(client: httpclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_server_ready())
    except Exception:  # not listening yet
        return False
