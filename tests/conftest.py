"""A real tritonserver for the whole test session, on free ports, with the built repository."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.helpers import running_gateway, shutdown_problems
from triton_tts import paths
from triton_tts.model_configs import BuildOptions
from triton_tts.repository import ensure_default_voice
from triton_tts.server import TritonServer, default_voice_server
from triton_tts.text.normalize import normalize_english
from triton_tts.text.phonemize import EspeakPhonemizer
from triton_tts.voice import Voice

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
# Voices and builds live in the checkout, as under `make` (which sets the same).
os.environ.setdefault("TRITON_TTS_HOME", str(ROOT))


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
