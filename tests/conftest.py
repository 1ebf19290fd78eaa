"""A real tritonserver for the whole test session, on free ports, with the built repository;
and the suite's parts (markers, `make test-unit`).

Every test is one of: ``unit`` (no server; `make test-unit`), ``server`` (a real
tritonserver or gateway), ``browser``, ``image``, ``gpu``. A test that asks for the session
server or gateway is a server test; one that starts its own carries the marker (its
module's ``pytestmark``); every other test is a unit test, and a unit test that starts a
server anyway fails at once, naming the marker it lacks.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.helpers import running_gateway, shutdown_problems
from triton_tts.build.model_configs import BuildOptions
from triton_tts.contract import paths
from triton_tts.contract.voice import Voice
from triton_tts.ops.repository import ensure_default_voice
from triton_tts.ops.server import TritonServer, default_voice_server
from triton_tts.text.normalize import normalize_english
from triton_tts.text.phonemize import EspeakPhonemizer

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent


# The parts that are not unit tests; a test that needs none of them is a unit test.
PARTS = ("server", "browser", "image", "gpu", "export")
# Fixtures of this folder that start the session server (the others build on these). A
# module names its own server-starting fixtures in SERVER_FIXTURES, or marks itself.
SERVER_FIXTURES = {"server", "gateway"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(part) for part in PARTS):
            continue
        starting = SERVER_FIXTURES | set(getattr(getattr(item, "module", None), "SERVER_FIXTURES", ()))
        fixtures = set(getattr(item, "fixturenames", ()))
        item.add_marker(pytest.mark.server if fixtures & starting else pytest.mark.unit)


def _starts_a_server(args: object) -> bool:
    """A command line that runs tritonserver, or our server or gateway."""
    words = [str(a) for a in args] if isinstance(args, list | tuple) else str(args).split()
    ours = any(w.endswith(("triton-tts", "triton_tts.cli")) for w in words)
    triton = any(Path(w).name == "tritonserver" for w in words)
    return triton or (ours and bool({"serve", "gateway"} & set(words)))


class UnitStartedAServer(AssertionError):
    pass


class _NoServerPopen(subprocess.Popen):  # type: ignore[type-arg]
    """subprocess.Popen for the whole session: any command, but no server's while a unit
    test (its fixtures included, also module- and session-scoped ones) is being set up or run."""

    unit_test = ""  # the id of the unit test being set up or run, else ""

    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        if self.unit_test and _starts_a_server(args):
            raise UnitStartedAServer(f"{self.unit_test} starts a server: mark it `server`")
        super().__init__(args, *rest, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen = _NoServerPopen  # type: ignore[misc]


@contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    """While ``item`` is set up or run: no server, if it is a unit test."""
    _NoServerPopen.unit_test = item.nodeid if item.get_closest_marker("unit") else ""
    try:
        yield
    finally:
        _NoServerPopen.unit_test = ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary (`make setup` fetches it) for the chart's tests."""
    from tests.helm_chart import required_tool

    return required_tool("helm", "scripts/fetch_helm.py")


@pytest.fixture(scope="session")
def voice_dir() -> Path:
    return ensure_default_voice(paths.default_voice_dir())


@pytest.fixture(scope="session")
def voice(voice_dir: Path) -> Voice:
    return Voice.load(voice_dir)


@pytest.fixture(scope="session")
def server(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("repository") / "model_repository"
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver.log"
    # Streams unpaced: the tests of streaming check what is sent, and a paced stream lasts
    # as long as its playback. Pacing has its own tests (tests/test_first_audio.py).
    options = replace(BuildOptions(), stream_lead_ms=0)
    with default_voice_server(repo, log_file, options=options) as running:
        yield running
    # Stopped as users stop it (SIGINT, drain, exit): a crash at shutdown fails the session
    # here, by exit code or by its log (tests/test_lifecycle.py shows both are caught).
    assert running.process is not None
    log_text = log_file.read_text(encoding="utf-8", errors="replace")
    problems = shutdown_problems(running.process.returncode, log_text)
    stopping = log_text[log_text.rfind("Signal (2) received") :].splitlines()[:30]
    assert not problems, "tritonserver did not stop cleanly: {}\n{}".format(problems[:5], "\n".join(stopping))


@pytest.fixture(scope="session")
def gateway(server: TritonServer) -> Iterator[str]:
    """The OpenAI-compatible gateway (its own process) in front of the session server: its
    base URL, e.g. http://localhost:PORT."""
    with running_gateway(server.grpc_url) as base:
        yield base


@pytest.fixture()
def http(server: TritonServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=16, network_timeout=300)
    yield client
    client.close()


@pytest.fixture()
def grpc(server: TritonServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def phonemizer(voice: Voice) -> EspeakPhonemizer:
    return EspeakPhonemizer(voice.phonemizer_language)


@pytest.fixture(scope="session")
def unsplit_piper() -> ort.InferenceSession:
    """Piper's original, unsplit graph: the reference the served audio must match."""
    from triton_tts.export.piper import bundled_joe_paths

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(bundled_joe_paths()[0]), opts, providers=["CPUExecutionProvider"])


def phoneme_ids(text: str, voice: Voice, phonemizer: EspeakPhonemizer) -> list[int]:
    """The ids the server's preprocess computes for ``text`` (same code path)."""
    return voice.phonemes_to_ids(phonemizer.symbols([normalize_english(text)], voice.tokens)[0])


def silence_free(audio: npt.NDArray[np.float32]) -> float:
    return float(np.sqrt(np.mean(np.square(audio))))


# The tiny XTTS voice and its server, shared by tests/test_xtts_serving.py, _capacity.py and
# _gateway.py (built and started once; a module that defines its own overrides them).


@pytest.fixture(scope="session")
def studio_speaker() -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(3)
    return {
        "gpt_cond_latent": torch.randn(1, 32, 128, generator=generator),  # the tiny GPT's width
        "speaker_embedding": torch.nn.functional.normalize(
            torch.randn(1, 512, 1, generator=generator), dim=1
        ),
    }


@pytest.fixture(scope="session")
def xtts_voice(tmp_path_factory: pytest.TempPathFactory, studio_speaker: dict[str, Any]) -> Path:
    """The tiny XTTS voice (random weights, the project's own export), with a studio
    speaker from Coqui's speakers file and a named one from a clip."""
    import soundfile as sf
    import torch

    from testkit.xtts_checkpoints import build_xtts
    from tests.xtts_kit import MAX_AUDIO_TOKENS, NARRATOR, STUDIO, clip
    from triton_tts.cli import main as cli_main
    from triton_tts.export.coqui.cli import main as export_main

    folder = tmp_path_factory.mktemp("xtts-ckpt")
    checkpoint = build_xtts(folder, "tiny", seed=1, max_audio_tokens=MAX_AUDIO_TOKENS)
    torch.save({STUDIO: studio_speaker}, checkpoint / "speakers_xtts.pth")
    out = tmp_path_factory.mktemp("xtts-voice") / "xtts"
    export_main(["--checkpoint", str(checkpoint / "model.pth"), "--config", str(checkpoint / "config.json"),
                 "--out", str(out)])  # fmt: skip
    # A named speaker from a clip file at another rate, with the real command.
    wav = tmp_path_factory.mktemp("clips") / "narrator.wav"
    sf.write(wav, np.stack([clip(21, 5.0, 16000), clip(21, 5.0, 16000)], axis=1), 16000)  # stereo: mixed down
    assert cli_main(["speakers", "add", NARRATOR, str(wav), "--voice", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def runner(xtts_voice: Path) -> Any:
    """The tiny XTTS voice's runner in this process (its greedy audio is what the served
    voice must give)."""
    from triton_tts.xtts.runner import XttsRunner

    return XttsRunner(xtts_voice)


@pytest.fixture(scope="session")
def xtts_server(
    voice_dir: Path, xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    """joe and the tiny XTTS voice, served."""
    repo = tmp_path_factory.mktemp("xtts-repo") / "model_repository"
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-xtts.log"
    with default_voice_server(repo, log_file, voice_dir=[voice_dir, xtts_voice]) as running:
        yield running
