"""Several voices in one Triton server: the bundled Piper voice (default) and Coqui exports.

Each Coqui voice is a random-weight Coqui checkpoint, exported by the project's own code;
the audio the server returns must equal Coqui's own PyTorch inference on the same ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.helpers import DETERMINISTIC, synthesize, tts_inputs
from triton_tts.client import TTSClient
from triton_tts.cli import main as cli_main
from triton_tts.export import coqui
from triton_tts.export.coqui_checkpoints import build_tts
from triton_tts.server import TritonServer, default_voice_server

TEXT = "Hello world, this is a test."
PARITY_ATOL = 1e-4  # through the server: onnxruntime in Triton vs Coqui's PyTorch


@dataclass
class CoquiVoice:
    name: str
    folder: Path
    loaded: coqui.Loaded


@pytest.fixture(scope="module")
def coqui_voices(tmp_path_factory: pytest.TempPathFactory) -> list[CoquiVoice]:
    voices = []
    for name, family, speakers in [("coqui-vctk", "vits", 3)]:
        saved = build_tts(family, tmp_path_factory.mktemp(f"{name}-checkpoint"), speakers=speakers)
        loaded = coqui.load(checkpoint=saved.checkpoint, config=saved.config)
        folder = tmp_path_factory.mktemp("voices") / name
        coqui.export_coqui(loaded, folder)
        voices.append(CoquiVoice(name, folder, loaded))
    return voices


@pytest.fixture(scope="module")
def multi_server(
    voice_dir: Path, coqui_voices: list[CoquiVoice], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("multi") / "model_repository"
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-multi.log"
    folders = [voice_dir, *(v.folder for v in coqui_voices)]
    with default_voice_server(repo, log_file, voice_dir=folders) as running:
        yield running


@pytest.fixture()
def client(multi_server: TritonServer) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(multi_server.http_url, network_timeout=300)
    yield c
    c.close()


def test_voices_are_listed_default_first(multi_server: TritonServer, coqui_voices: list[CoquiVoice]) -> None:
    with TTSClient(multi_server.http_url) as tts:
        listed = tts.voices()
    assert [v.name for v in listed] == ["joe", *(v.name for v in coqui_voices)]
    vctk = listed[1]
    assert vctk.speakers == {"speaker_0": 0, "speaker_1": 1, "speaker_2": 2}
    assert vctk.sample_rate == coqui_voices[0].loaded.tts.ap.sample_rate


@pytest.mark.parametrize("speaker", [0, 2])
def test_coqui_voice_through_the_server_equals_coqui(
    client: httpclient.InferenceServerClient, coqui_voices: list[CoquiVoice], speaker: int
) -> None:
    voice = coqui_voices[0]
    audio, rate = synthesize(client, TEXT, VOICE=voice.name, SPEAKER_ID=speaker, **DETERMINISTIC)
    reference = coqui.coqui_waveform(voice.loaded, coqui.coqui_ids(voice.loaded, TEXT), speaker_id=speaker)
    assert rate == voice.loaded.tts.ap.sample_rate
    assert audio.shape == reference.shape
    np.testing.assert_allclose(audio, np.clip(reference, -1, 1), atol=PARITY_ATOL)


def test_each_voice_has_its_own_ensemble(
    multi_server: TritonServer, coqui_voices: list[CoquiVoice]
) -> None:
    client = grpcclient.InferenceServerClient(multi_server.grpc_url)
    try:
        for voice in coqui_voices:
            result = client.infer(f"tts_chunk__{voice.name}", tts_inputs(grpcclient, TEXT, **DETERMINISTIC))
            audio = result.as_numpy("AUDIO").reshape(-1)
            reference = coqui.coqui_waveform(voice.loaded, coqui.coqui_ids(voice.loaded, TEXT))
            np.testing.assert_allclose(audio, np.clip(reference, -1, 1), atol=PARITY_ATOL)
    finally:
        client.close()


def test_default_voice_is_unchanged_by_the_others(
    client: httpclient.InferenceServerClient, coqui_voices: list[CoquiVoice]
) -> None:
    plain, rate = synthesize(client, TEXT, **DETERMINISTIC)
    named, _ = synthesize(client, TEXT, VOICE="joe", **DETERMINISTIC)
    assert rate == 22050
    np.testing.assert_array_equal(plain, named)
    other, _ = synthesize(client, TEXT, VOICE=coqui_voices[0].name, **DETERMINISTIC)
    assert other.shape != plain.shape or not np.allclose(other, plain)


def test_unknown_voice_and_speaker_are_clear_errors(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="unknown VOICE 'nobody'.*'joe', 'coqui-vctk'"):
        synthesize(client, TEXT, VOICE="nobody")
    with pytest.raises(InferenceServerException, match="SPEAKER_ID"):
        synthesize(client, TEXT, VOICE="coqui-vctk", SPEAKER_ID=7)
    audio, _ = synthesize(client, TEXT, VOICE="coqui-vctk", SPEAKER_ID=1)  # the server is fine
    assert audio.size > 0


def test_streaming_with_a_named_voice(multi_server: TritonServer, coqui_voices: list[CoquiVoice]) -> None:
    voice = coqui_voices[0]
    with TTSClient(multi_server.grpc_url, protocol="grpc") as tts:
        chunks = list(tts.stream(f"{TEXT} And a second sentence follows.", voice=voice.name))
    assert chunks[-1].is_last and all(c.sample_rate == voice.loaded.tts.ap.sample_rate for c in chunks)


def test_cli_say_with_voice(multi_server: TritonServer, coqui_voices: list[CoquiVoice], tmp_path: Path) -> None:
    import soundfile as sf

    out = tmp_path / "vctk.wav"
    name = coqui_voices[0].name
    assert cli_main(["say", TEXT, "--voice", name, "-o", str(out), "--url", multi_server.http_url]) == 0
    audio, rate = sf.read(out)
    assert rate == coqui_voices[0].loaded.tts.ap.sample_rate and len(audio) > 0
