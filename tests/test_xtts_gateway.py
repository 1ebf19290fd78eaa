"""The tiny XTTS voice through the gateway's doors (the session's ``xtts_server``): a stored
speaker by name, a clip uploaded to become a speaker, and Riva's zero-shot prompt in the
asked language."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr

from tests.xtts_kit import (
    NARRATOR,
    clip,
    stream_xtts,
    xtts_inputs,
    xtts_server_voice,
)
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.xtts.runner import XttsRunner
from triton_tts.xtts.speakers import load_speaker, speaker_file

pytestmark = [pytest.mark.server, pytest.mark.export]


def test_the_gateway_speaks_with_a_stored_speaker(xtts_server: TritonServer) -> None:
    import openai

    from tests.helpers import running_gateway

    with running_gateway(xtts_server.grpc_url, "--voice-alias", f"nova=xtts:{NARRATOR}") as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        for voice in (f"xtts:{NARRATOR}", "nova"):
            speech = client.audio.speech.create(model="tts-1", voice=voice, input="Hello from the gateway.",
                                                response_format="wav")  # fmt: skip
            import io

            audio, rate = sf.read(io.BytesIO(speech.content), dtype="float32")
            assert (
                rate == 24000 and audio.shape[0] >= 1024
            )  # a code's audio at least (sampling may stop early)


def test_a_clip_uploaded_to_the_gateway_becomes_a_speaker(
    xtts_server: TritonServer, runner: XttsRunner
) -> None:
    """POST /v1/audio/voices/xtts/speakers (multipart, keyed): the clip, mixed to mono and
    resampled, is stored as a named speaker in the server's voice folder, and the OpenAI
    SDK speaks with it as ``xtts:<name>`` though the build never listed it. A second
    upload of the name is 409; bad uploads are 400s naming their field; an unknown
    voice 404; a body past the upload limit 413; a gateway without keys takes none."""
    import io

    import openai
    import requests

    from tests.helpers import running_gateway

    key = "upload-key"
    voiced = clip(44, 4.0, 16000)
    stereo = np.stack([voiced, 0.5 * voiced], axis=1)
    wav = io.BytesIO()
    sf.write(wav, stereo, 16000, format="WAV", subtype="FLOAT")
    clip_file = ("ana.wav", wav.getvalue(), "audio/wav")
    silent = io.BytesIO()
    sf.write(silent, np.zeros(32000, dtype=np.float32), 16000, format="WAV")
    with running_gateway(xtts_server.grpc_url, env={"TRITON_TTS_API_KEY": key}) as base:
        url = f"{base}/v1/audio/voices/xtts/speakers"
        auth = {"Authorization": f"Bearer {key}"}

        def upload(
            name: Any, file: Any = clip_file, to: str = url, field: str = "file", **extra: Any
        ) -> requests.Response:
            files = {field: file}
            data = {"name": name} if name is not None else {}
            return requests.post(to, headers=auth, files=files, data={**data, **extra}, timeout=120)

        assert (
            requests.post(url, files={"file": clip_file}, data={"name": "ana"}, timeout=60).status_code == 401
        )
        stored = upload("ana")
        assert stored.status_code == 201, stored.text
        assert stored.json() == {"voice": "xtts", "speaker": "ana", "use": "xtts:ana", "seconds": 4.0}
        kept = load_speaker(speaker_file(xtts_server_voice(xtts_server), "ana"))
        mono = np.asarray(soxr.resample(stereo.mean(axis=1).astype(np.float32), 16000, 22050), np.float32)
        np.testing.assert_allclose(kept.speaker, runner.conditioning(mono).speaker, atol=1e-4)
        np.testing.assert_allclose(kept.style, runner.conditioning(mono).style, atol=1e-4)
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
        speech = sdk.audio.speech.create(
            model="tts-1", voice="xtts:ana", input="Hello, Ana.", response_format="wav"
        )
        audio, rate = sf.read(io.BytesIO(speech.content), dtype="float32")
        assert rate == 24000 and audio.shape[0] >= 1024
        with pytest.raises(openai.BadRequestError, match="nobody"):
            sdk.audio.speech.create(model="tts-1", voice="xtts:nobody", input="Hello.", response_format="wav")
        again = upload("ana")
        assert again.status_code == 409 and again.json()["error"]["code"] == "speaker_exists"
        for response, status, field, words in (
            (upload("quiet", ("q.wav", silent.getvalue(), "audio/wav")), 400, "file", "silent"),
            (upload("text", ("t.wav", b"not audio at all", "audio/wav")), 400, "file", "not an audio file"),
            (upload(None), 400, "name", "'name' is required"),
            (upload("a/b"), 400, "name", "speaker name"),
            (upload("extra", extra="1"), 400, "extra", "extra"),
            (upload("nofile", field="clip"), 400, "file", "one file field"),
            (upload("ana2", to=f"{base}/v1/audio/voices/joe/speakers"), 400, "voice", "does not clone"),
            (upload("ana3", to=f"{base}/v1/audio/voices/nobody/speakers"), 404, None, "no voice"),
        ):
            error = response.json()["error"]
            assert response.status_code == status and error["param"] == field and words in error["message"], (
                response.status_code,
                error,
            )
        huge = upload("huge", ("h.wav", b"\0" * (13 * 1024 * 1024), "audio/wav"))
        assert huge.status_code == 413
        assert not speaker_file(xtts_server_voice(xtts_server), "quiet").exists()
    with running_gateway(xtts_server.grpc_url) as open_base:
        refused = requests.post(
            f"{open_base}/v1/audio/voices/xtts/speakers",
            files={"file": clip_file},
            data={"name": "x"},
            timeout=60,
        )
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "uploads_need_keys"
    # The model itself: a store names its speaker and carries no text.
    _, errors = stream_xtts(xtts_server.grpc_url, xtts_inputs("Hello.", voiced, 16000, STORE_SPEAKER=True))
    assert len(errors) == 1 and "INVALID_ARG" in errors[0] and "needs SPEAKER" in errors[0]


def test_the_riva_door_clones_a_zero_shot_prompt_in_the_asked_language(xtts_server: TritonServer) -> None:
    """Riva's SynthesizeOnline with zero_shot_data (a WAV file's bytes, as Pipecat sends
    its prompt file) reaches the XTTS voice as a clip to clone, answered at the asked
    rate; language_code picks XTTS's language, one it lacks is refused by name, and a
    named speaker is Riva's ``voice.speaker``."""
    import io

    import grpc
    import riva.client
    from riva.client.proto import riva_tts_pb2 as rtts

    from tests.helpers import running_gateway

    prompt = io.BytesIO()
    sf.write(prompt, clip(62, 4.0, 16000), 16000, format="WAV")
    port = free_port()
    with running_gateway(xtts_server.grpc_url, "--riva-port", str(port)):
        service = riva.client.SpeechSynthesisService(riva.client.Auth(uri=f"localhost:{port}"))

        def request(language: str, voice: str = "xtts", clone: bool = True) -> rtts.SynthesizeSpeechRequest:
            asked = rtts.SynthesizeSpeechRequest(
                text="Hallo aus Triton.", language_code=language, voice_name=voice, sample_rate_hz=16000
            )
            if clone:
                asked.zero_shot_data.audio_prompt = prompt.getvalue()
            return asked

        answers = list(service.stub.SynthesizeOnline(iter([request("de-DE")])))
        audio = b"".join(a.audio for a in answers)
        assert answers and len(audio) % 2 == 0 and len(audio) >= 2 * 1024 * 16000 // 24000
        named = service.stub.Synthesize(request("en-US", f"xtts.{NARRATOR}", clone=False))
        assert len(named.audio) >= 2 * 1024 * 16000 // 24000
        for asked, words in ((request("xx-YY"), "xx"), (request("de-DE", clone=False), "REFERENCE_AUDIO")):
            with pytest.raises(grpc.RpcError) as refused:
                service.stub.Synthesize(asked)
            assert (
                refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in refused.value.details()
            )
