"""Several voices in one Triton server: the bundled Piper voice (default) and Coqui exports.

Each Coqui voice is a random-weight Coqui checkpoint, exported by the project's own code;
the audio the server returns must equal Coqui's own PyTorch inference on the same ids.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from testkit.coqui_reference import coqui_ids, coqui_waveform
from tests.helpers import DETERMINISTIC, export_random_coqui_voice, synthesize, tts_inputs
from triton_tts.cli import main as cli_main
from triton_tts.client import TTSClient
from triton_tts.export.coqui.loading import Loaded
from triton_tts.ops.server import TritonServer, default_voice_server

pytestmark = pytest.mark.server  # its own servers (module fixtures)

TEXT = "Hello world, this is a test."
PARITY_ATOL = 1e-4  # through the server: onnxruntime in Triton vs Coqui's PyTorch


@dataclass
class CoquiVoice:
    name: str
    folder: Path
    loaded: Loaded


# name, family, vocoder, speakers
VOICES = [
    ("coqui-vctk", "vits", None, 3),
    ("coqui-tacotron2", "tacotron2", "hifigan", 1),
    ("coqui-fastpitch", "fast_pitch", "hifigan", 1),
    ("coqui-fastspeech2", "fastspeech2", "hifigan", 1),
    ("coqui-glowtts", "glow_tts", "melgan", 1),
]


@pytest.fixture(scope="module")
def coqui_voices(tmp_path_factory: pytest.TempPathFactory) -> list[CoquiVoice]:
    voices = []
    for name, family, vocoder_family, speakers in VOICES:
        root = tmp_path_factory.mktemp(name)
        loaded = export_random_coqui_voice(root, family, vocoder_family, speakers, root / name)
        voices.append(CoquiVoice(name, root / name, loaded))
    return voices


OLD_EXPORT = "coqui-old"


def _old_export(voice: CoquiVoice, folder: Path) -> Path:
    """The VITS voice as exported before DURATIONS (word timestamps) existed, named apart."""
    import json
    import shutil

    import onnx

    shutil.copytree(voice.folder, folder)
    description = json.loads((folder / "voice.json").read_text())
    (folder / "voice.json").write_text(json.dumps({**description, "name": OLD_EXPORT}))
    acoustic = onnx.load(str(folder / "acoustic.onnx"))
    kept = [o for o in acoustic.graph.output if o.name != "DURATIONS"]
    del acoustic.graph.output[:]
    acoustic.graph.output.extend(kept)
    onnx.save(acoustic, str(folder / "acoustic.onnx"))
    return folder


@pytest.fixture(scope="module")
def multi_server(
    voice_dir: Path, coqui_voices: list[CoquiVoice], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("multi") / "model_repository"
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-multi.log"
    old = _old_export(coqui_voices[0], tmp_path_factory.mktemp("old") / OLD_EXPORT)
    folders = [voice_dir, *(v.folder for v in coqui_voices), old]
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
    assert [v.name for v in listed] == ["joe", *(v.name for v in coqui_voices), OLD_EXPORT]
    vctk = listed[1]
    assert vctk.speakers == {"speaker_0": 0, "speaker_1": 1, "speaker_2": 2}
    assert vctk.sample_rate == coqui_voices[0].loaded.tts.ap.sample_rate


@pytest.mark.parametrize("speaker", [0, 2])
def test_coqui_voice_through_the_server_equals_coqui(
    client: httpclient.InferenceServerClient, coqui_voices: list[CoquiVoice], speaker: int
) -> None:
    voice = coqui_voices[0]
    audio, rate = synthesize(client, TEXT, VOICE=voice.name, SPEAKER_ID=speaker, **DETERMINISTIC)
    reference = coqui_waveform(voice.loaded, coqui_ids(voice.loaded, TEXT), speaker_id=speaker)
    assert rate == voice.loaded.tts.ap.sample_rate
    assert audio.shape == reference.shape
    np.testing.assert_allclose(audio, np.clip(reference, -1, 1), atol=PARITY_ATOL)


@pytest.mark.parametrize("index", range(len(VOICES)), ids=[v[0] for v in VOICES])
def test_each_family_served_equals_coqui(
    multi_server: TritonServer, coqui_voices: list[CoquiVoice], index: int
) -> None:
    """Each voice's own ensemble (``tts_chunk__<name>``) and ``tts`` with VOICE: the audio
    is Coqui's own inference on the same ids (what the server's tokeniser made of TEXT)."""
    voice = coqui_voices[index]
    reference = np.clip(coqui_waveform(voice.loaded, coqui_ids(voice.loaded, TEXT)), -1, 1)
    assert np.abs(reference).max() > 1e-3  # real audio
    client = grpcclient.InferenceServerClient(multi_server.grpc_url)
    try:
        result = client.infer(
            f"tts_chunk__{voice.name}",
            tts_inputs(grpcclient, TEXT, **DETERMINISTIC),
            parameters=multi_server.internal_parameters(),
        )
        direct = result.as_numpy("AUDIO").reshape(-1)
        through_tts = client.infer("tts", tts_inputs(grpcclient, TEXT, VOICE=voice.name, **DETERMINISTIC))
    finally:
        client.close()
    assert direct.shape == reference.shape
    np.testing.assert_allclose(direct, reference, atol=PARITY_ATOL)
    np.testing.assert_array_equal(through_tts.as_numpy("AUDIO").reshape(-1), direct)


def test_voices_batch_in_their_own_models(multi_server: TritonServer, coqui_voices: list[CoquiVoice]) -> None:
    """Mixed traffic for all voices at once: every answer equals the voice's alone."""
    from concurrent.futures import ThreadPoolExecutor

    names = ["joe", *(v.name for v in coqui_voices)] * 3
    client = grpcclient.InferenceServerClient(multi_server.grpc_url)  # thread-safe
    try:
        alone = {name: synthesize(client, TEXT, VOICE=name, **DETERMINISTIC)[0] for name in set(names)}
        # 8 at once, well inside what tts admits (4 instances + 8 queued; an instance that
        # has answered may still count as busy for a moment): more could be refused as busy
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda n: synthesize(client, TEXT, VOICE=n, **DETERMINISTIC)[0], names))
    finally:
        client.close()
    for name, audio in zip(names, together, strict=True):
        np.testing.assert_allclose(audio, alone[name], atol=1e-4)


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
    with pytest.raises(
        InferenceServerException, match=r"unknown VOICE 'nobody'.*'joe', 'coqui-vctk', 'coqui-"
    ):
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


def test_cli_say_with_voice(
    multi_server: TritonServer, coqui_voices: list[CoquiVoice], tmp_path: Path
) -> None:
    import soundfile as sf

    out = tmp_path / "vctk.wav"
    name = coqui_voices[0].name
    assert cli_main(["say", TEXT, "--voice", name, "-o", str(out), "--url", multi_server.http_url]) == 0
    audio, rate = sf.read(out)
    assert rate == coqui_voices[0].loaded.tts.ap.sample_rate and len(audio) > 0


def test_a_voice_without_padding_masks_leaves_no_unpadded_vocoder_behind(
    voice_dir: Path, coqui_voices: list[CoquiVoice], tmp_path: Path
) -> None:
    """The default voice's vocoder folder, rebuilt from a Coqui voice to the Piper voice:
    the Coqui vocoder's mask-free copy must not stay there to be run for the Piper voice."""
    from triton_tts.ops.repository import build_repository

    unpadded = tmp_path / "model_repository" / "vocoder" / "1" / "model_unpadded.onnx"
    build_repository([coqui_voices[0].folder], tmp_path / "model_repository")
    assert unpadded.exists()
    build_repository([voice_dir], tmp_path / "model_repository")
    assert not unpadded.exists()


@pytest.mark.parametrize("name", [v[0] for v in VOICES])
def test_coqui_voices_time_their_words(multi_server: TritonServer, name: str) -> None:
    """VITS, FastPitch, FastSpeech2 and Glow-TTS exports say their frames per id
    (DURATIONS), Tacotron2's acoustic stage reads them off its attention: every written
    word, in order, within the audio, through tts and a stream."""
    from triton_tts.client import TTSClient

    text = "Hello world, it costs $3.50 today."
    with TTSClient(multi_server.grpc_url, "grpc") as tts:
        assert {v.name: v.timestamps for v in tts.voices()}[name] is True
        result = tts.synthesize(text, voice=name, timestamps=True, noise_scale=0.0, noise_w=0.0)
        streamed = [
            w
            for chunk in tts.stream(text, voice=name, timestamps=True, noise_scale=0.0, noise_w=0.0)
            for w in chunk.words
        ]
    duration = result.audio.size / result.sample_rate
    assert [w.word for w in result.words] == ["Hello", "world,", "it", "costs", "$3.50", "today."]
    # A random-weight Tacotron2's attention may pass over a word within one step: such a
    # word starts where it ends. Every other family gives each id at least a frame.
    taken = 0.0 if name == "coqui-tacotron2" else 1e-6
    for word, following in zip(result.words, [*result.words[1:], None], strict=True):
        assert 0.0 <= word.start <= word.end - taken <= (following.start if following else duration) + 1e-6
    # A stream cuts its first chunk shorter, so its times differ a little; its words do not.
    assert [w.word for w in streamed] == [w.word for w in result.words]
    assert all(a.end <= b.start + 1e-6 for a, b in itertools.pairwise(streamed))


def test_timestamps_are_refused_by_name_where_a_voice_has_none(multi_server: TritonServer) -> None:
    """A voice exported before DURATIONS existed has no word timestamps: its listing says
    so, and asking for timestamps (the client, the gateway's captioned speech) is the
    caller's error naming the voice; joe on the same server still times its words."""
    import json
    import urllib.error
    import urllib.request

    from tests.helpers import running_gateway
    from triton_tts.client import RequestRejected, TTSClient

    with TTSClient(multi_server.http_url) as client:
        voices = {v.name: v for v in client.voices()}
        assert voices[OLD_EXPORT].timestamps is False and voices["joe"].timestamps is True
        with pytest.raises(RequestRejected, match=f"voice '{OLD_EXPORT}' has no word timestamps"):
            client.synthesize("Hello.", voice=OLD_EXPORT, timestamps=True)
        timed = client.synthesize("Still timed.", timestamps=True).words
        assert [w.word for w in timed] == ["Still", "timed."]
    with running_gateway(multi_server.grpc_url) as base:
        body = json.dumps({"model": "tts-1", "input": "Hello.", "voice": OLD_EXPORT}).encode()
        request = urllib.request.Request(f"{base}/v1/audio/speech/captioned", body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=120)
    error = json.loads(refused.value.read())["error"]
    assert refused.value.code == 400 and "has no word timestamps" in error["message"], error
