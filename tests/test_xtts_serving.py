"""XTTS v2 served (issue 26): a random-weight XTTS v2 in Coqui's layout (small
configuration) exported with the real command and served by a real tritonserver as the
decoupled ``xtts`` model beside the default voice.

First the scheduler alone (no server): generations decoding together give each the codes
it gets alone, and the stream, chunk by chunk with XTTS's overlap and crossfade, is the
whole decode but at its joins, where nothing clicks. Then through the server with
tritonclient: a streamed synthesis with a reference clip, another clip changes the
voice, a seed makes sampling reproducible, bad clips and controls are refused by name,
and two concurrent streams share decode batches (the model's own statistics). The
conditioning encoders and the decoder are stage models of their own (configs rendered
from each graph, a native variant for GPU nodes): the xtts model's work goes through
them, and a direct call is refused.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf
import soxr
import tritonclient.grpc as grpcclient
from google.protobuf import text_format

from testkit.xtts_checkpoints import build_xtts, voiced_clip
from tests.helpers import metric_total, stream_model, wait_until
from triton_tts.cli import main as cli_main
from triton_tts.export.coqui.cli import main as export_main
from triton_tts.export.coqui.xtts.export import snr_db
from triton_tts.ops.server import TritonServer, default_voice_server, free_port
from triton_tts.runtime.admission import Ledger, retry_after
from triton_tts.xtts import defaults as xtts_defaults
from triton_tts.xtts.card import Sampling
from triton_tts.xtts.runner import Conditioning, XttsRunner
from triton_tts.xtts.scheduler import OVERLAP, Job, Scheduler
from triton_tts.xtts.speakers import load_speaker, speaker_file, speaker_names

pytestmark = [pytest.mark.server, pytest.mark.export]
FloatArray = npt.NDArray[np.float32]

MAX_AUDIO_TOKENS = 53  # 50 codes a segment: two full chunks of 20 and a last of 10
GREEDY = Sampling(temperature=0.0, repetition_penalty=1.0)


def clip(seed: int, seconds: float, rate: int = 22050) -> FloatArray:
    clip_audio: FloatArray = voiced_clip(seed, seconds, rate)
    return clip_audio


STUDIO = "Studio One"  # a speaker of the checkpoint's speakers_xtts.pth, as Coqui ships them
NARRATOR = "narrator"


@pytest.fixture(scope="module")
def studio_speaker() -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(3)
    return {
        "gpt_cond_latent": torch.randn(1, 32, 128, generator=generator),  # the tiny GPT's width
        "speaker_embedding": torch.nn.functional.normalize(
            torch.randn(1, 512, 1, generator=generator), dim=1
        ),
    }


@pytest.fixture(scope="module")
def xtts_voice(tmp_path_factory: pytest.TempPathFactory, studio_speaker: dict[str, Any]) -> Path:
    import torch

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


@pytest.fixture(scope="module")
def runner(xtts_voice: Path) -> XttsRunner:
    return XttsRunner(xtts_voice)


def run_jobs(
    scheduler: Scheduler, jobs: list[tuple[list[list[int]], Conditioning, Sampling, int]]
) -> list[Any]:
    """Submit every job at once; each one's chunks (audio, is_last) and its end."""
    results: list[dict[str, Any]] = [{"chunks": [], "done": threading.Event(), "error": None} for _ in jobs]
    for (segments, cond, sampling, seed), out in zip(jobs, results, strict=True):

        def send(audio: FloatArray, last: bool, out: dict[str, Any] = out) -> None:
            out["chunks"].append((audio, last))

        def finish(err: Exception | None, out: dict[str, Any] = out) -> None:
            out["error"] = err
            out["done"].set()

        scheduler.submit(Job(segments=segments, conditioning=cond, sampling=sampling, seed=seed,
                             send=send, finish=finish))  # fmt: skip
    for out in results:
        assert out["done"].wait(300)
        assert out["error"] is None, out["error"]
    return results


def test_generations_batched_together_get_the_codes_they_get_alone(runner: XttsRunner) -> None:
    cond = runner.conditioning(clip(3, 5.0))
    prompts = [[5, 17, 40, 22, 9], [31, 8, 77, 12, 60, 44, 19, 3, 51], [90, 14]]
    alone = [runner.generate(cond.style, ids, GREEDY).codes for ids in prompts]
    pool = runner.pool(4)
    gens = [runner.start(cond.style, ids, GREEDY, pool=pool) for ids in prompts]
    assert [g.slot for g in gens] == [0, 1, 2]
    sizes = []
    while not all(g.done for g in gens):
        sizes.append(runner.step(gens))
        for g in gens:  # a finished generation leaves at once; the last slot moves into its place
            if g.done and g.slot >= 0:
                pool.release(g)
    assert [g.codes for g in gens] == alone
    assert max(sizes) == 3 and pool.live == 0


def test_a_stream_is_the_whole_decode_but_at_its_joins(runner: XttsRunner) -> None:
    cond = runner.conditioning(clip(4, 6.0))
    ids = [12, 40, 7, 33, 28, 5]
    scheduler = Scheduler(runner, slots=2)
    try:
        (result,) = run_jobs(scheduler, [([ids], cond, GREEDY, 0)])
    finally:
        scheduler.stop()
    chunks = result["chunks"]
    assert len(chunks) == 3 and [last for _, last in chunks] == [False, False, True]
    stream = np.concatenate([audio for audio, _ in chunks])
    gen = runner.generate(cond.style, ids, GREEDY)
    whole = runner.waveform(np.stack(gen.latents), cond.speaker)
    assert stream.shape == whole.shape  # nothing lost, nothing repeated (XTTS drops its last overlap)
    # Between joins the stream is the whole decode; at a join the crossfade keeps it continuous.
    joins = np.cumsum([audio.shape[0] for audio, _ in chunks])[:-1]
    away = np.ones(whole.shape[0], dtype=bool)
    for j in joins:
        away[max(j - 4 * OVERLAP, 0) : j + OVERLAP] = False
    assert np.abs(stream[away] - whole[away]).max() < 1e-4
    step = np.abs(np.diff(whole)).max()
    for j in joins:
        assert abs(float(stream[j]) - float(stream[j - 1])) <= 2 * step  # no click at the join


# Through the server.


@pytest.fixture(scope="module")
def xtts_server(
    voice_dir: Path, xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    repo = tmp_path_factory.mktemp("xtts-repo") / "model_repository"
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-xtts.log"
    with default_voice_server(repo, log_file, voice_dir=[voice_dir, xtts_voice]) as running:
        yield running


def xtts_inputs(
    text: str, reference: FloatArray | None, rate: int | None = 22050, **controls: Any
) -> list[Any]:
    inputs = []
    text_in = grpcclient.InferInput("TEXT", [1], "BYTES")
    text_in.set_data_from_numpy(np.array([text.encode()], dtype=object))
    inputs.append(text_in)
    if reference is not None:
        audio = grpcclient.InferInput("REFERENCE_AUDIO", [reference.shape[0]], "FP32")
        audio.set_data_from_numpy(reference.astype(np.float32))
        inputs.append(audio)
    if rate is not None and reference is not None:
        rate_in = grpcclient.InferInput("REFERENCE_SAMPLE_RATE", [1], "INT32")
        rate_in.set_data_from_numpy(np.array([rate], dtype=np.int32))
        inputs.append(rate_in)
    types = {
        "TOP_K": ("INT32", np.int32),
        "SEED": ("INT64", np.int64),
        "LANGUAGE": ("BYTES", object),
        "SPEAKER": ("BYTES", object),
        "STORE_SPEAKER": ("BOOL", np.bool_),
    }
    for name, value in controls.items():
        kind, dtype = types.get(name, ("FP32", np.float32))
        tensor = grpcclient.InferInput(name, [1], kind)
        tensor.set_data_from_numpy(np.array([value.encode() if dtype is object else value], dtype=dtype))
        inputs.append(tensor)
    return inputs


def stream_xtts(url: str, inputs: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    return stream_model(url, "xtts", inputs)


def audio_of(chunks: list[dict[str, Any]]) -> FloatArray:
    return np.concatenate([c["audio"] for c in chunks])


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


def xtts_server_voice(server: TritonServer) -> Path:
    return Path(server.model_repository) / "xtts" / "1"


def greedy_expected(
    server: TritonServer, runner: XttsRunner, text: str, reference: FloatArray | Conditioning
) -> FloatArray:
    """The runner's whole greedy synthesis of the text's segments (what the server streams)."""
    from triton_tts.xtts.text import XttsText

    cond = reference if isinstance(reference, Conditioning) else runner.conditioning(reference)
    segments = XttsText(xtts_server_voice(server), runner.card).read(text, "en")
    return np.concatenate(
        [runner.waveform(np.stack(runner.generate(cond.style, ids, GREEDY_CARD).latents), cond.speaker)
         for ids in segments]
    )  # fmt: skip


GREEDY_CARD = Sampling(temperature=0.0)  # the card's repetition penalty, as a request leaves it


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


ORT_TYPES = {"tensor(float)": "TYPE_FP32", "tensor(int64)": "TYPE_INT64"}


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


def stage_counts(server: TritonServer) -> dict[str, int]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        counts = {}
        for name in ("xtts_style", "xtts_speaker", "xtts_decoder"):
            stats = client.get_inference_statistics(name, as_json=True)["model_stats"][0]
            counts[name] = int(stats["inference_stats"]["success"].get("count", 0))
        return counts
    finally:
        client.close()


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


def live_generations(server: TritonServer) -> float:
    return metric_total(server.metrics_port, "tts_xtts_generations", state="live")


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


def decode_steps(server: TritonServer) -> float:
    time.sleep(0.5)  # the model's counters follow its loop every 0.2 s
    return metric_total(server.metrics_port, "tts_xtts_decode_steps_total")


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


@pytest.fixture(scope="module")
def one_slot_server(
    voice_dir: Path, xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    """Raised limits for the test (not the shipped ones): one cache slot, one waiting."""
    from triton_tts.build.model_configs import HEADER, parse
    from triton_tts.ops.repository import build_repository

    repo = build_repository([voice_dir, xtts_voice], tmp_path_factory.mktemp("xtts-one") / "model_repository")
    path = repo / "xtts" / "config.pbtxt"
    config = parse(path.read_text(encoding="utf-8"))
    config.parameters["slots"].string_value = "1"
    config.parameters["max_waiting"].string_value = "1"
    path.write_text(HEADER + text_format.MessageToString(config), encoding="utf-8")
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-xtts-one.log"
    with TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      log_file=log_file) as running:  # fmt: skip
        yield running


def test_beyond_the_slots_requests_wait_and_beyond_the_wait_they_are_refused(
    one_slot_server: TritonServer,
) -> None:
    results: list[Any] = [None] * 3

    def run(i: int) -> None:
        # The first holds the slot for a while (four sentences); the others are short.
        text = " ".join([f"Request {i} of three, each several words long."] * (4 if i == 0 else 1))
        results[i] = stream_xtts(one_slot_server.grpc_url, xtts_inputs(text, clip(50 + i, 3.0), SEED=i))

    def at_model() -> float:
        return metric_total(one_slot_server.metrics_port, "tts_xtts_generations")

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
        if i < 2:  # the first takes the slot, the second waits
            wait_until(lambda: at_model() >= len(threads), 60, "the request to reach the model")
    for t in threads:
        t.join(300)
    refused = [errors for chunks, errors in results if errors]
    served = [chunks for chunks, errors in results if not errors]
    assert len(served) == 2 and all(chunks[-1]["last"] for chunks in served)
    assert len(refused) == 1 and "UNAVAILABLE" in refused[0][0] and "at capacity" in refused[0][0]
    # One slot: no step ran two generations.
    assert metric_total(one_slot_server.metrics_port, "tts_xtts_decode_steps_total", batch="2") == 0


def long_text_inputs(
    lib: Any, text: str, voice: str, reference: FloatArray | None, **scalars: Any
) -> list[Any]:
    """tts / tts_stream inputs (a batch of one) for an XTTS voice."""
    values: dict[str, tuple[str, Any]] = {
        "TEXT": ("BYTES", np.array([[text.encode()]], dtype=object)),
        "VOICE": ("BYTES", np.array([[voice.encode()]], dtype=object)),
    }
    if reference is not None:
        values["REFERENCE_AUDIO"] = ("FP32", reference[None, :].astype(np.float32))
        values["REFERENCE_SAMPLE_RATE"] = ("INT32", np.array([[22050]], dtype=np.int32))
    kinds = {
        "SPEAKER_ID": ("INT64", np.int64),
        "SEED": ("INT64", np.int64),
        "NOISE_SCALE": ("FP32", np.float32),
    }
    for name, value in scalars.items():
        kind, dtype = kinds.get(name, ("FP32", np.float32))
        values[name] = (kind, np.array([[value]], dtype=dtype))
    inputs = []
    for name, (kind, array) in values.items():
        tensor = lib.InferInput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


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


def stream_errors(url: str, inputs: list[Any], parameters: dict[str, Any]) -> list[str]:
    """A tts_stream request with request parameters: its errors' messages, to the final flag."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    errors = []
    try:
        client.async_stream_infer(
            "tts_stream", inputs, parameters=parameters, enable_empty_final_response=True
        )
        while True:
            result, error = answers.get(timeout=120)
            if error is not None:
                errors.append(error.message())
            elif result.get_response().parameters["triton_final_response"].bool_param:
                return errors
    finally:
        client.stop_stream()
        client.close()


XTTS_CAPACITY = 4.0  # audio s/s, pinned for the admission test: its texts are sized by it


@pytest.fixture
def xtts_ledger(xtts_server: TritonServer) -> Iterator[Ledger]:
    """The server's ledger, the XTTS voice's capacity pinned for the test and handed back
    to the model's own measurement afterwards."""
    assert xtts_server.admission_dir is not None
    book = Ledger(xtts_server.admission_dir)
    before, source, _ = book.capacities()["xtts"]
    assert source == "model"  # the xtts model reports its own capacity to the shared ledger
    book.set_capacity("xtts", XTTS_CAPACITY, pinned=True)
    yield book
    book.set_capacity("xtts", before)
    book.observe_capacity("xtts", None, xtts_defaults.CAPACITY)


def test_xtts_texts_are_admitted_by_their_work_in_the_shared_ledger(
    xtts_server: TritonServer, xtts_ledger: Ledger
) -> None:
    """tts and tts_stream admit an XTTS voice's text in the ledger the chunk voices share,
    by its predicted work: while a long stream's work is admitted, a text that may wait
    1 ms is refused at once (busy, with a retry hint) by both, before the stream ends; one
    that states no deadline is served; the work shows while it runs and is gone after."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    # ~1,100 characters: ~77 s of audio, ~19 s of work at the pinned capacity (within the
    # default budget), and twenty segments for the tiny model to decode.
    text = " ".join(f"Line {i} of a text that keeps the model busy." for i in range(20))
    reference = clip(70, 3.0)
    ahead: list[Any] = []
    runner = threading.Thread(
        target=lambda: ahead.append(
            stream_model(
                xtts_server.grpc_url, "tts_stream", long_text_inputs(grpcclient, text, "xtts", reference)
            )
        )
    )
    runner.start()
    try:
        wait_until(lambda: xtts_ledger.load().texts == 1, 60, "the stream's work in the ledger")
        assert metric_total(xtts_server.metrics_port, "triton_tts_admitted_work_seconds") > 0
        short = long_text_inputs(httpclient, "Hello there.", "xtts", reference)
        http = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=300)
        try:
            with pytest.raises(InferenceServerException, match="server busy") as refused:
                http.infer("tts", short, parameters={"max_wait_ms": 1})
            assert refused.value.status() == "503" and (retry_after(str(refused.value)) or 0) > 0
            streamed = long_text_inputs(grpcclient, "Hello there.", "xtts", reference)
            errors = stream_errors(xtts_server.grpc_url, streamed, {"max_wait_ms": 1})
            assert len(errors) == 1 and "server busy" in errors[0] and retry_after(errors[0]), errors
            assert not ahead, "the stream ended before the refusals: they prove nothing"
            served = http.infer("tts", short)  # no deadline: the default budget holds the work ahead
            assert served.as_numpy("AUDIO").size > 0
        finally:
            http.close()
    finally:
        runner.join(300)
    ((chunks, errors),) = ahead
    assert not errors and chunks[-1]["last"]
    wait_until(lambda: xtts_ledger.load().texts == 0, 30, "the XTTS work to leave the ledger")
    assert xtts_ledger.load().text_work_s == 0


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
