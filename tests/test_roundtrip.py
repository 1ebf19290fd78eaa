"""The ensemble answers over HTTP and gRPC, and its audio is the Piper voice's audio."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

from tests.conftest import phoneme_ids, silence_free
from tests.helpers import DETERMINISTIC, synthesize
from triton_tts.contract.voice import Voice
from triton_tts.text.phonemize import EspeakPhonemizer

pytestmark = pytest.mark.server  # its own servers (module fixtures)

SENTENCE = "Triton serves this voice over HTTP and gRPC."
# Padding to length buckets and batching move float rounding around, nothing more.
PARITY_ATOL = 1e-4


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_round_trip(protocol: str, request: pytest.FixtureRequest, voice: Voice) -> None:
    client = request.getfixturevalue(protocol)
    assert client.is_server_ready()
    assert client.is_model_ready("tts")
    audio, rate = synthesize(client, SENTENCE)
    assert rate == voice.sample_rate == 22050
    assert audio.dtype == np.float32
    assert 1.5 < len(audio) / rate < 8.0  # a short sentence, not silence or a runaway
    assert np.abs(audio).max() <= 1.0
    assert silence_free(audio) > 0.01


def test_http_and_grpc_give_the_same_audio(http, grpc) -> None:
    via_http, _ = synthesize(http, SENTENCE, **DETERMINISTIC)
    via_grpc, _ = synthesize(grpc, SENTENCE, **DETERMINISTIC)
    np.testing.assert_allclose(via_http, via_grpc, atol=PARITY_ATOL)


@pytest.mark.parametrize(
    "text",
    [
        "Hello world.",
        "The quick brown fox jumps over the lazy dog, twice!",
        "On March 3rd, 2024, the price rose by 12.5% to $3.50 per item.",
    ],
)
def test_served_audio_equals_the_unsplit_piper_graph(
    text: str,
    http,
    voice: Voice,
    phonemizer: EspeakPhonemizer,
    unsplit_piper: ort.InferenceSession,
) -> None:
    from triton_tts.export.piper import run_unsplit

    served, _ = synthesize(http, text, **DETERMINISTIC)
    reference = run_unsplit(unsplit_piper, phoneme_ids(text, voice, phonemizer))
    assert served.shape == reference.shape
    np.testing.assert_allclose(served, np.clip(reference, -1, 1), atol=PARITY_ATOL)


def test_speed_changes_duration(http) -> None:
    normal, _ = synthesize(http, SENTENCE, SPEED=1.0, **DETERMINISTIC)
    fast, _ = synthesize(http, SENTENCE, SPEED=2.0, **DETERMINISTIC)
    slow, _ = synthesize(http, SENTENCE, SPEED=0.5, **DETERMINISTIC)
    assert 0.4 < len(fast) / len(normal) < 0.6
    assert 1.7 < len(slow) / len(normal) < 2.3


def test_default_noise_varies_the_voice_but_keeps_it_speaking(http) -> None:
    first, _ = synthesize(http, SENTENCE)
    second, _ = synthesize(http, SENTENCE)
    assert silence_free(first) > 0.01 and silence_free(second) > 0.01
    same_length = min(len(first), len(second))
    assert not np.allclose(first[:same_length], second[:same_length], atol=1e-3)


def test_model_metadata_names_the_contract(http) -> None:
    metadata = http.get_model_metadata("tts")
    inputs = {t["name"]: t["datatype"] for t in metadata["inputs"]}
    outputs = {t["name"]: t["datatype"] for t in metadata["outputs"]}
    assert inputs == {
        "TEXT": "BYTES",
        "SPEED": "FP32",
        "SPEAKER_ID": "INT64",
        "NOISE_SCALE": "FP32",
        "NOISE_W": "FP32",
        "VOICE": "BYTES",
        "NORMALIZE": "BOOL",
        "TIMESTAMPS": "BOOL",
        "TEXT_FORMAT": "BYTES",
        "LEXICON": "BYTES",
        "VOICE_MIX": "BYTES",  # a style voice's blend (Kokoro); other voices refuse it
        # passed on to an XTTS voice's model (triton_tts/xtts/forward.py)
        "LANGUAGE": "BYTES",
        "REFERENCE_AUDIO": "FP32",
        "REFERENCE_SAMPLE_RATE": "INT32",
        "TEMPERATURE": "FP32",
        "SEED": "INT64",
    }
    assert outputs == {"AUDIO": "FP32", "SAMPLE_RATE": "INT32", "WORDS": "BYTES", "WORD_TIMES": "FP32"}


def test_normalize_false_reads_text_as_written(server, http) -> None:
    """NORMALIZE false skips the normaliser (what tts sets on the chunks it normalised
    already): tts's audio is tts_chunk's on the normalised text read as written, and that
    is not what espeak makes of the raw text."""
    import tritonclient.http as httpclient

    from tests.helpers import tts_inputs
    from triton_tts.text.normalize import normalize_english

    text = "Dr. Smith paid $3.50 on 3/15/2024."
    written = normalize_english(text)
    assert written != text

    def chunk(value: str, **options: bool | float) -> npt.NDArray[np.float32]:
        inputs = tts_inputs(httpclient, value, **DETERMINISTIC, **options)
        result = http.infer("tts_chunk", inputs, parameters=server.internal_parameters())
        return np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1)

    as_written = chunk(written, NORMALIZE=False)
    np.testing.assert_allclose(chunk(text), as_written, atol=PARITY_ATOL)  # normalised once by preprocess
    np.testing.assert_allclose(synthesize(http, text, **DETERMINISTIC)[0], as_written, atol=PARITY_ATOL)
    raw = chunk(text, NORMALIZE=False)
    assert raw.shape != as_written.shape  # espeak reads "$3.50" and the date its own way
