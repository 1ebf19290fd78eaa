"""What each install brings: ranges in pyproject, exact versions in the locks, and a base
install that is the client alone.

pyproject.toml states compatible ranges, so users can install the client into their own
applications; requirements/lock.txt (`make`, CI, Python 3.11) and requirements/image.txt
(the image's Python 3.12) fix every version. The base install (no extras) is proven in a
fresh virtualenv from the committed tree and the wheels `make setup` fetched
(.wheelhouse/client), offline: it speaks through the test server with the `say` and
`voices` commands, and has none of the server's dependencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import soundfile as sf
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from tests.test_image_install import IMAGE_PYTHON, IMAGE_REQUIREMENTS, canonical, committed_tree, pinned, run
from triton_tts.ops.server import TritonServer

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
LOCK_PYTHON = "3.11"
CLIENT_WHEELS = ROOT / ".wheelhouse" / "client"
# What serving, the gateway and the export bring: none of it belongs in the base install.
SERVER_ONLY = ("onnxruntime", "onnx", "phonemizer", "jieba", "pypinyin", "cn2an", "num2words",
               "starlette", "pydantic", "uvicorn", "websockets", "soxr", "torch")  # fmt: skip
BASE = ("tritonclient", "numpy", "soundfile", "tqdm")


def project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]  # type: ignore[no-any-return]


def requirements(groups: list[str] | None = None) -> list[tuple[str, Requirement]]:
    """(group, requirement) of the base install ("") and of the named extras (all if None);
    the extras' references to the project itself are left out."""
    spec = project()
    optional: dict[str, list[str]] = spec["optional-dependencies"]  # type: ignore[assignment]
    found = [("", Requirement(line)) for line in spec["dependencies"]]  # type: ignore[attr-defined]
    for group, lines in optional.items():
        if groups is None or group in groups:
            found += [(group, Requirement(line)) for line in lines]
    return [(group, req) for group, req in found if canonical(req.name) != "triton-tts"]


def applies(req: Requirement, group: str, python: str) -> bool:
    if req.marker is None:
        return True
    return req.marker.evaluate({"python_version": python, "extra": group})  # the rest: this machine


def test_pyproject_states_ranges_not_pins() -> None:
    """The base install and the extras users combine with their own code take ranges."""
    for group, req in requirements(["serve", "gateway"]):
        assert not any(spec.operator == "==" for spec in req.specifier), f"{group or 'base'}: {req}"
    assert sorted(canonical(req.name) for group, req in requirements([]) if not group) == sorted(BASE)


def test_the_lock_satisfies_every_range() -> None:
    lock = pinned(LOCK.read_text(encoding="utf-8").splitlines())
    for group, req in requirements():
        if applies(req, group, LOCK_PYTHON):
            name = canonical(req.name)
            assert name in lock, f"{req} ({group or 'base'}) is not in {LOCK.name}"
            assert req.specifier.contains(lock[name], prereleases=True), f"{req}: locked {lock[name]}"


def test_this_environment_is_the_lock() -> None:
    """`make` installs with the lock as constraints: what runs the tests is what it says."""
    for name, version in pinned(LOCK.read_text(encoding="utf-8").splitlines()).items():
        assert metadata.version(name) == version, (
            f"{name}: locked {version}, installed {metadata.version(name)}"
        )


def test_the_image_set_satisfies_the_serving_ranges() -> None:
    image = pinned(IMAGE_REQUIREMENTS.read_text(encoding="utf-8").splitlines())
    lock = pinned(LOCK.read_text(encoding="utf-8").splitlines())
    for group, req in requirements(["serve", "gateway"]):
        if applies(req, group, IMAGE_PYTHON):
            name = canonical(req.name)
            assert name in image and req.specifier.contains(image[name]), (
                f"{req}: image set {image.get(name)}"
            )
            # One version on both Pythons where both have it: what CI tests is what ships.
            assert image[name] == lock[name], f"{name}: image {image[name]}, lock {lock[name]}"


def test_the_image_set_is_the_locks_versions_and_keeps_numpy_1() -> None:
    """Transitive packages too: the image's Python gets what the lock's Python runs (protobuf
    6 for tritonclient 2.73 and Riva's generated protos, gevent's stack for the HTTP client),
    where the lock has the package at all. numpy stays 1.x: Triton 2.51's Python-backend stub
    (the tests' tritonserver) sends outputs of the wrong size with numpy 2."""
    image = pinned(IMAGE_REQUIREMENTS.read_text(encoding="utf-8").splitlines())
    lock = pinned(LOCK.read_text(encoding="utf-8").splitlines())
    differ = {
        name: (version, lock[name]) for name, version in image.items() if lock.get(name, version) != version
    }
    assert not differ, f"image set vs lock: {differ}"
    assert Version(image["numpy"]).major == 1, image["numpy"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel of the committed tree, built offline, and that tree."""
    if not (CLIENT_WHEELS / ".complete").exists():
        pytest.fail(f"no wheels at {CLIENT_WHEELS}: run `make setup`")
    scratch = tmp_path_factory.mktemp("base")
    source = committed_tree(scratch / "src")
    offline = ["--no-index", "--find-links", str(CLIENT_WHEELS)]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-w", str(scratch / "dist"),
         str(source)],
        capture_output=True, text=True, check=False, env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # Set-up prints nothing to puzzle over: no "Package would be ignored" or other warning.
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    (wheel,) = (scratch / "dist").glob("triton_tts-*.whl")
    return wheel, source


@pytest.fixture(scope="module")
def base_install(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and no extras, offline."""
    venv = tmp_path_factory.mktemp("base-venv") / "venv"
    run([sys.executable, "-m", "venv", venv])  # from this virtualenv's base interpreter
    run([venv / "bin" / "pip", "install", "-q", "--no-index", "--find-links", str(CLIENT_WHEELS), built[0]])
    return venv


@pytest.mark.image
def test_the_wheel_merges_the_three_portions_and_the_template(built: tuple[Path, Path]) -> None:
    """What the wheel holds is exactly the committed files of triton_tts's three portions,
    each at its module path, and the repository template as triton_tts/model_repository/:
    no stale build output, no test helper, no voice."""
    wheel, source = built
    with zipfile.ZipFile(wheel) as archive:
        held = {name for name in archive.namelist() if ".dist-info/" not in name}
    expected = set()
    for path in source.rglob("*"):
        relative = path.relative_to(source).as_posix()
        if not path.is_file():
            continue
        for root in ("", "client/", "export_scripts/"):
            if relative.startswith(root + "triton_tts/"):
                expected.add(relative.removeprefix(root))
        if relative.startswith("model_repository/"):
            expected.add("triton_tts/" + relative)
    assert "triton_tts/client/core.py" in expected and "triton_tts/export/coqui/registry.py" in expected
    assert "triton_tts/model_repository/vocoder/1/model.py" in expected
    assert held == expected, {"missing": sorted(expected - held), "extra": sorted(held - expected)}


@pytest.mark.image
def test_the_base_install_has_no_server_dependency(base_install: Path) -> None:
    listed = json.loads(run([base_install / "bin" / "pip", "list", "--format", "json"]))
    installed = {canonical(item["name"]) for item in listed}
    assert set(BASE) <= installed
    assert not installed & set(SERVER_ONLY), installed & set(SERVER_ONLY)
    # A name of the client, not the package alone: the package loads its modules on first use.
    probe = "import sys; from triton_tts.client import TTSClient; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        run([base_install / "bin" / "python", "-c", "import json; " + probe], cwd=base_install)
    )
    assert "triton_tts.client.tts_client" in loaded
    # The client depends on nothing of the server: importing it loads only the client.
    ours = [m for m in loaded if m.startswith("triton_tts.") and not m.startswith("triton_tts.client")]
    assert ours == [], ours


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.image
def test_the_base_install_speaks(
    base_install: Path, server: TritonServer, tmp_path: Path, protocol: str
) -> None:
    """`say` and `voices` from the client alone, through the test server."""
    cli = base_install / "bin" / "triton-tts"
    url = server.http_url if protocol == "http" else server.grpc_url
    listed = run([cli, "voices", "--url", url, "--protocol", protocol], cwd=tmp_path)
    assert "joe" in listed, listed
    out = tmp_path / "hello.wav"
    run(
        [cli, "say", "Hello from the client alone.", "-o", out, "--url", url, "--protocol", protocol],
        cwd=tmp_path,
    )
    info = sf.info(str(out))
    assert info.samplerate == 22050 and info.duration > 0.8


@pytest.mark.image
def test_the_base_install_names_the_extra_for_serving(base_install: Path, tmp_path: Path) -> None:
    for command, extra in ((["serve"], "serve"), (["gateway"], "gateway"), (["frontend", "hi"], "serve")):
        done = subprocess.run(
            [str(base_install / "bin" / "triton-tts"), *command], capture_output=True, text=True,
            cwd=tmp_path, check=False, env={**os.environ, "TRITON_TTS_HOME": str(tmp_path)},
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert f"pip install 'triton-tts[{extra}]'" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
