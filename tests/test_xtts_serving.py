"""XTTS v2 served (issue 26): a random-weight XTTS v2 in Coqui's layout (small
configuration) exported with the real command and served by a real tritonserver as the
decoupled ``xtts`` model beside the default voice.

Through the server (tests/conftest.py's ``xtts_server``) with tritonclient: a streamed
synthesis with a reference clip, another clip changes the voice, a seed makes sampling
reproducible, bad clips and controls are refused by name, and two concurrent streams
share decode batches (the model's own statistics). The conditioning encoders and the
decoder are stage models of their own (configs rendered from each graph, a native
variant for GPU nodes): the xtts model's work goes through them, and a direct call is
refused; cancellation, tts and tts_stream with the XTTS voice, and the client's clip.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import soxr
import tritonclient.grpc as grpcclient

from tests.helpers import metric_total, stream_model, wait_until
from tests.xtts_kit import (
    NARRATOR,
    ORT_TYPES,
    STUDIO,
    FloatArray,
    audio_of,
    clip,
    decode_steps,
    greedy_expected,
    live_generations,
    long_text_inputs,
    stage_counts,
    stream_xtts,
    xtts_inputs,
    xtts_server_voice,
)
from triton_tts.cli import main as cli_main
from triton_tts.export.coqui.xtts.export import snr_db
from triton_tts.ops.server import TritonServer
from triton_tts.xtts.runner import XttsRunner
from triton_tts.xtts.speakers import load_speaker, speaker_file, speaker_names

pytestmark = [pytest.mark.server, pytest.mark.export]


def test_a_streamed_synthesis_with_a_reference_clip(xtts_server: TritonServer, runner: XttsRunner) -> None:
    reference = clip(7, 6.0)
    text = "Hello there. This is a cloned voice, streamed in chunks."
    chunks, errors = stream_xtts(xtts_server.grpc_url, xtts_inputs(text, reference, TEMPERATURE=0.0, SEED=1))
    assert errors == []
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    assert [c["last"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert {c["rate"] for c in chunks} == {24000}
    assert len(chunks) >= 3  # 50 codes a segment: 3 chunks each
    # Greedy: the server's audio is the runner's whole decode of the same segments, joined.
    expected = greedy_expected(xtts_server, runner, text, reference)
    streamed = audio_of(chunks)
    assert streamed.shape == expected.shape
    assert snr_db(streamed, expected) > 30


def test_another_clip_changes_the_voice_and_a_seed_repeats_sampling(
    xtts_server: TritonServer, runner: XttsRunner
) -> None:
    url, text = xtts_server.grpc_url, "The same words in another voice."
    one, other = clip(8, 5.0), clip(9, 5.0)
    a = audio_of(stream_xtts(url, xtts_inputs(text, one, TEMPERATURE=0.0))[0])
    b = audio_of(stream_xtts(url, xtts_inputs(text, other, TEMPERATURE=0.0))[0])
    # Each is its own clip's voice: far nearer to it than to the other clip's.
    assert snr_db(b, greedy_expected(xtts_server, runner, text, other)) > snr_db(b, a) + 20
    assert snr_db(a, greedy_expected(xtts_server, runner, text, one)) > snr_db(a, b) + 20
    sampled = [audio_of(stream_xtts(url, xtts_inputs(text, one, SEED=seed))[0]) for seed in (5, 5, 6)]
    np.testing.assert_array_equal(sampled[0], sampled[1])
    assert sampled[0].shape != sampled[2].shape or not np.array_equal(sampled[0], sampled[2])


@pytest.mark.parametrize(
    ("reference", "rate", "controls", "message"),
    [
        (None, None, {}, "send REFERENCE_AUDIO"),
        (clip(1, 0.4), 22050, {}, "at least"),
        (np.zeros(22050 * 3, np.float32), 22050, {}, "silent"),
        (clip(1, 3.0), 1000, {}, "REFERENCE_SAMPLE_RATE 1000"),
        (clip(1, 3.0), None, {}, "needs REFERENCE_SAMPLE_RATE"),
        (clip(1, 61.0, 16000), 16000, {}, "at most"),
        (clip(1, 3.0), 22050, {"LANGUAGE": "xx"}, "this voice reads"),
        (clip(1, 3.0), 22050, {"TEMPERATURE": -1.0}, "TEMPERATURE"),
        (clip(1, 3.0), 22050, {"TOP_P": 1.5}, "TOP_P"),
        (clip(1, 3.0), 22050, {"SPEED": 9.0}, "SPEED"),
    ],
)
def test_bad_clips_and_controls_are_refused_by_name(
    xtts_server: TritonServer,
    reference: FloatArray | None,
    rate: int | None,
    controls: dict[str, Any],
    message: str,
) -> None:
    chunks, errors = stream_xtts(xtts_server.grpc_url, xtts_inputs("Hello.", reference, rate, **controls))
    assert chunks == []
    assert len(errors) == 1 and message in errors[0] and "INVALID_ARG" in errors[0], errors


def test_two_concurrent_streams_share_decode_batches(xtts_server: TritonServer) -> None:
    before = metric_total(xtts_server.metrics_port, "tts_xtts_decode_steps_total", batch="2")
    texts = ["One stream speaks this sentence now.", "Another stream speaks at the same time."]
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        results[i] = stream_xtts(xtts_server.grpc_url, xtts_inputs(texts[i], clip(10 + i, 4.0), SEED=i))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for chunks, errors in results:
        assert errors == [] and chunks[-1]["last"]
    after = metric_total(xtts_server.metrics_port, "tts_xtts_decode_steps_total", batch="2")
    assert after - before >= 10  # most of their steps ran as one GPT batch


def test_named_speakers_from_a_clip_and_from_coqui(
    xtts_server: TritonServer, xtts_voice: Path, runner: XttsRunner, studio_speaker: dict[str, Any]
) -> None:
    assert speaker_names(xtts_voice) == sorted([NARRATOR, STUDIO])
    studio = load_speaker(speaker_file(xtts_voice, STUDIO))  # converted from speakers_xtts.pth
    np.testing.assert_array_equal(studio.style, studio_speaker["gpt_cond_latent"][0].numpy())
    np.testing.assert_array_equal(studio.speaker, studio_speaker["speaker_embedding"].reshape(-1).numpy())
    # The narrator is its clip's conditioning: mixed to mono, resampled to 22.05 kHz.
    mono = np.asarray(soxr.resample(clip(21, 5.0, 16000), 16000, 22050), dtype=np.float32)
    narrator = load_speaker(speaker_file(xtts_voice, NARRATOR))
    np.testing.assert_allclose(narrator.speaker, runner.conditioning(mono).speaker, atol=1e-4)
    text = "A named speaker says this."
    for name, conditioning in ((NARRATOR, narrator), (STUDIO, studio)):
        chunks, errors = stream_xtts(
            xtts_server.grpc_url, xtts_inputs(text, None, SPEAKER=name, TEMPERATURE=0.0)
        )
        assert errors == []
        assert snr_db(audio_of(chunks), greedy_expected(xtts_server, runner, text, conditioning)) > 30


def test_a_speaker_added_while_serving_is_served_and_unknown_ones_are_refused(
    xtts_server: TritonServer, tmp_path: Path
) -> None:
    url = xtts_server.grpc_url
    _, errors = stream_xtts(url, xtts_inputs("Hello.", None, SPEAKER="latecomer"))
    assert len(errors) == 1 and "INVALID_ARG" in errors[0] and NARRATOR in errors[0] and STUDIO in errors[0]
    wav = tmp_path / "late.wav"
    sf.write(wav, clip(30, 4.0), 22050)
    assert (
        cli_main(["speakers", "add", "latecomer", str(wav), "--voice", str(xtts_server_voice(xtts_server))])
        == 0
    )
    chunks, errors = stream_xtts(url, xtts_inputs("Hello.", None, SPEAKER="latecomer"))
    assert errors == [] and chunks[-1]["last"]
    _, errors = stream_xtts(url, xtts_inputs("Hello.", clip(1, 3.0), SPEAKER=NARRATOR))
    assert len(errors) == 1 and "not both" in errors[0]


def test_the_stage_models_are_the_graphs_with_a_config_per_variant(
    xtts_server: TritonServer, xtts_voice: Path
) -> None:
    """The conditioning encoders and the decoder are models of their own: each holds its
    graph as model.onnx, and each config (CPU, gpu, tensorrt) names the graph's own
    tensors, types and fixed dims (symbolic: -1), read here by onnxruntime."""
    import json

    import onnxruntime as ort
    from tritonclient.grpc import model_config_pb2 as mc

    from triton_tts.build.model_configs import parse
    from triton_tts.xtts.graphs import STAGES

    repo = Path(xtts_server.model_repository)
    xtts = parse((repo / "xtts" / "config.pbtxt").read_text(encoding="utf-8"))
    models = json.loads(xtts.parameters["stage_models"].string_value)
    assert models == {"style": "xtts_style", "speaker": "xtts_speaker", "decoder": "xtts_decoder"}
    for stage in STAGES:
        session = ort.InferenceSession(str(xtts_voice / stage.graph), providers=["CPUExecutionProvider"])

        def described(args: list[Any]) -> list[tuple[str, str, list[int]]]:
            return [
                (a.name, ORT_TYPES[a.type], [d if isinstance(d, int) else -1 for d in a.shape]) for a in args
            ]

        folder = repo / models[stage.name]
        assert (folder / "1" / "model.onnx").read_bytes() == (xtts_voice / stage.graph).read_bytes()
        variants = (("config.pbtxt", "python"), ("configs/gpu.pbtxt", "onnxruntime"),
                    ("configs/tensorrt.pbtxt", "onnxruntime"))  # fmt: skip
        for file, backend in variants:
            config = parse((folder / file).read_text(encoding="utf-8"))
            assert config.name == models[stage.name] and config.backend == backend
            assert config.max_batch_size == 0
            native = backend != "python"
            kind = mc.ModelInstanceGroup.KIND_GPU if native else mc.ModelInstanceGroup.KIND_CPU
            assert [g.kind for g in config.instance_group] == [kind]
            assert config.default_model_filename == ("model.onnx" if native else "")
            for tensors, args in (
                (config.input, session.get_inputs()),
                (config.output, session.get_outputs()),
            ):
                got = [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in tensors]
                assert got == described(args), (file, stage.name)


def test_the_xtts_model_runs_its_stages_through_them_and_no_one_else_may(
    xtts_server: TritonServer, runner: XttsRunner
) -> None:
    from tritonclient.utils import InferenceServerException

    from triton_tts.runtime.internal import REFUSAL

    before = stage_counts(xtts_server)
    chunks, errors = stream_xtts(xtts_server.grpc_url, xtts_inputs("Through the stages.", clip(70, 5.0)))
    assert errors == [] and chunks[-1]["last"]
    after = stage_counts(xtts_server)
    # A new clip: one speaker embedding, a style latent per conditioning piece (Coqui's
    # gpt_cond_chunk_len; a last piece under min_chunk_seconds is skipped), a decode a chunk.
    card = runner.card
    conditioned = min(5.0, card.cond_seconds)
    whole, rest = divmod(conditioned, card.cond_chunk_seconds)
    pieces = int(whole) + (rest >= card.min_chunk_seconds)
    assert after["xtts_speaker"] - before["xtts_speaker"] == 1
    assert after["xtts_style"] - before["xtts_style"] == pieces
    assert after["xtts_decoder"] - before["xtts_decoder"] == len(chunks)
    latents = grpcclient.InferInput("LATENTS", [1, 4, card.model_dim], "FP32")
    latents.set_data_from_numpy(np.zeros((1, 4, card.model_dim), np.float32))
    speaker = grpcclient.InferInput("SPEAKER", [1, card.speaker_dim], "FP32")
    speaker.set_data_from_numpy(np.zeros((1, card.speaker_dim), np.float32))
    client = grpcclient.InferenceServerClient(xtts_server.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("xtts_decoder", [latents, speaker])
    finally:
        client.close()
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT" and REFUSAL in refused.value.message()


def test_a_cancelled_stream_leaves_the_batch(xtts_server: TritonServer) -> None:
    client = grpcclient.InferenceServerClient(xtts_server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    long_text = " ".join(
        f"Sentence number {i} of a long text that will not be heard to its end." for i in range(12)
    )
    try:
        client.async_stream_infer(
            "xtts", xtts_inputs(long_text, clip(40, 4.0)), enable_empty_final_response=True
        )
        result, error = answers.get(timeout=300)
        assert error is None and result.as_numpy("CHUNK_INDEX")[0] == 0
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    wait_until(lambda: live_generations(xtts_server) == 0, 60, "the cancelled generation to leave its slot")
    time.sleep(0.5)  # the model's counters follow its loop every 0.2 s
    steps = metric_total(xtts_server.metrics_port, "tts_xtts_decode_steps_total")
    time.sleep(1.0)
    assert metric_total(xtts_server.metrics_port, "tts_xtts_decode_steps_total") == steps  # nothing decodes


def test_a_stream_cancelled_at_tts_stream_stops_the_xtts_generation(xtts_server: TritonServer) -> None:
    """tts_stream reaches the xtts model by BLS: a cancelled client's generation must stop
    there too, not run the rest of its text for no one."""
    text = " ".join(f"Line {i} of a text that is long enough to be cut off early." for i in range(30))
    inputs = long_text_inputs(grpcclient, text, "xtts", clip(41, 4.0), TEMPERATURE=0.0)
    before, started = decode_steps(xtts_server), time.monotonic()
    chunks, errors = stream_model(xtts_server.grpc_url, "tts_stream", inputs)
    took = time.monotonic() - started
    assert not errors and chunks[-1]["last"]
    whole = decode_steps(xtts_server) - before  # the text's steps, heard to its end

    client = grpcclient.InferenceServerClient(xtts_server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    before = decode_steps(xtts_server)
    try:
        client.async_stream_infer("tts_stream", inputs, enable_empty_final_response=True)
        result, error = answers.get(timeout=300)
        assert error is None and result.get_response().outputs
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    wait_until(lambda: live_generations(xtts_server) == 0, 120, "the cancelled generation to leave its slot")
    cut = decode_steps(xtts_server) - before
    assert cut < whole / 4, f"{cut} decode steps after cancelling, {whole} for the whole text"
    # tts, whole: a request that outlives its own timeout (a fifth of the text's time)
    # is refused in those words, and its generation stops with it.
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    http = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=300)
    before = decode_steps(xtts_server)
    try:
        with pytest.raises(InferenceServerException, match="request timeout expired"):
            http.infer("tts", long_text_inputs(httpclient, text, "xtts", clip(41, 4.0), TEMPERATURE=0.0),
                       timeout=int(took / 5 * 1e6))  # fmt: skip
    finally:
        http.close()
    wait_until(lambda: live_generations(xtts_server) == 0, 120, "the timed-out generation to leave its slot")
    cut = decode_steps(xtts_server) - before
    assert cut < whole / 2, f"{cut} decode steps after the timeout, {whole} for the whole text"
    # The server goes on serving: the next stream is whole.
    chunks, errors = stream_model(
        xtts_server.grpc_url,
        "tts_stream",
        long_text_inputs(grpcclient, "Still here.", "xtts", clip(42, 3.0), TEMPERATURE=0.0),
    )
    assert not errors and chunks and chunks[-1]["last"]


def test_only_the_server_itself_may_cancel_a_job(xtts_server: TritonServer) -> None:
    """The cancel request is internal: a caller of the xtts model without the server's
    token is refused by name (it cancels its own request through its stream), and a job
    id that is not a short string is refused too."""
    client = grpcclient.InferenceServerClient(xtts_server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    refusals = []
    try:
        for parameters in ({"tts_cancel_job": "0" * 32}, {"tts_job": "x" * 65}):
            client.async_stream_infer(
                "xtts", xtts_inputs("Hello there.", clip(43, 3.0)), parameters=parameters,
                enable_empty_final_response=True,
            )  # fmt: skip
            while True:
                result, error = answers.get(timeout=120)
                if error is not None:
                    refusals.append(error.message())
                elif result.get_response().parameters["triton_final_response"].bool_param:
                    break
    finally:
        client.stop_stream()
        client.close()
    assert len(refusals) == 2, refusals
    assert "tts_cancel_job is internal" in refusals[0]
    assert "tts_job" in refusals[1] and "1 to 64 characters" in refusals[1]


def test_a_caller_that_asks_for_errors_as_outputs_gets_them_in_error(xtts_server: TritonServer) -> None:
    """tts_errors_as_output true (what tts and tts_stream send, by BLS): a refusal is a
    plain response whose ERROR output holds the tagged message, then the final flag; audio
    is as ever; any other value leaves errors as error responses."""
    asks = {"tts_errors_as_output": True}
    refused, errors = stream_model(xtts_server.grpc_url, "xtts", xtts_inputs("Hello.", None), asks)
    assert errors == [] and len(refused) == 1 and set(refused[0]) == {"ERROR"}, (refused, errors)
    assert refused[0]["ERROR"].startswith("[INVALID_ARG] ") and "REFERENCE_AUDIO" in refused[0]["ERROR"]
    served, errors = stream_model(xtts_server.grpc_url, "xtts", xtts_inputs("Hello.", clip(43, 3.0)), asks)
    assert errors == [] and served and all("audio" in c for c in served) and served[-1]["last"], errors
    chunks, errors = stream_model(
        xtts_server.grpc_url, "xtts", xtts_inputs("Hello.", None), {"tts_errors_as_output": "yes"}
    )
    assert chunks == [] and len(errors) == 1 and "REFERENCE_AUDIO" in errors[0], (chunks, errors)


def test_tts_and_tts_stream_serve_the_xtts_voice(xtts_server: TritonServer, runner: XttsRunner) -> None:
    import tritonclient.http as httpclient

    text, reference = "The long-text models pass this on. It has two sentences.", clip(60, 5.0)
    expected = greedy_expected(xtts_server, runner, text, reference)
    client = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=300)
    try:
        whole = client.infer("tts", long_text_inputs(httpclient, text, "xtts", reference, TEMPERATURE=0.0))
    finally:
        client.close()
    assert int(whole.as_numpy("SAMPLE_RATE").reshape(-1)[0]) == 24000
    assert snr_db(whole.as_numpy("AUDIO").reshape(-1), expected) > 30
    # tts_stream: the same audio chunk by chunk, over gRPC.
    grpc = grpcclient.InferenceServerClient(xtts_server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks = []
    try:
        grpc.async_stream_infer(
            "tts_stream",
            long_text_inputs(grpcclient, text, "xtts", reference, TEMPERATURE=0.0),
            enable_empty_final_response=True,
        )
        while True:
            result, error = answers.get(timeout=300)
            assert error is None, error
            if result.get_response().outputs:
                chunks.append(
                    (result.as_numpy("AUDIO").reshape(-1), bool(result.as_numpy("IS_LAST").reshape(-1)[0]))
                )
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        grpc.stop_stream()
        grpc.close()
    assert len(chunks) >= 3 and [last for _, last in chunks] == [False] * (len(chunks) - 1) + [True]
    assert snr_db(np.concatenate([a for a, _ in chunks]), expected) > 30


def test_tts_picks_named_speakers_by_id_and_refuses_what_xtts_lacks(
    xtts_server: TritonServer, xtts_voice: Path, runner: XttsRunner
) -> None:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    text = "Spoken by a stored speaker."
    names = speaker_names(xtts_voice)  # SPEAKER_ID is the index in this list
    narrator = load_speaker(speaker_file(xtts_voice, NARRATOR))
    client = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=300)
    try:
        inputs = long_text_inputs(
            httpclient, text, "xtts", None, SPEAKER_ID=names.index(NARRATOR), TEMPERATURE=0.0
        )
        audio = client.infer("tts", inputs).as_numpy("AUDIO").reshape(-1)
        assert snr_db(audio, greedy_expected(xtts_server, runner, text, narrator)) > 30
        for scalars, message in (
            ({"SPEAKER_ID": 99}, "SPEAKER_ID 99"),
            ({"NOISE_SCALE": 0.5}, "no NOISE_SCALE"),
            ({}, "send REFERENCE_AUDIO"),
        ):
            with pytest.raises(InferenceServerException, match=message) as refused:
                client.infer("tts", long_text_inputs(httpclient, text, "xtts", None, **scalars))
            assert refused.value.status() == "400"
    finally:
        client.close()


def test_the_clients_stream_sends_a_clip_to_clone_and_a_lexicon_is_refused(xtts_server: TritonServer) -> None:
    """The client library's reference_audio= reaches the XTTS voice through tts_stream (without
    a clip or a speaker the voice refuses the text); its lexicon= is refused by name."""
    import asyncio

    from triton_tts.client import AsyncTTSClient, RequestRejected

    text, reference = "Cloned through the client.", clip(61, 5.0)

    async def run() -> None:
        async with AsyncTTSClient(xtts_server.grpc_url, "grpc") as tts:
            chunks = [c async for c in tts.stream(text, voice="xtts", reference_audio=reference,
                                                  reference_sample_rate=22050)]  # fmt: skip
            assert chunks and chunks[-1].is_last and {c.sample_rate for c in chunks} == {24000}
            for options, message in (
                ({}, "REFERENCE_AUDIO"),
                ({"lexicon": {"client": "klaɪənt"}}, "LEXICON"),
            ):
                with pytest.raises(RequestRejected, match=message):
                    async for _ in tts.stream(text, voice="xtts", **options):
                        pass

    asyncio.run(run())
