"""The XTTS serving tests' kit (tests/test_xtts_*.py): the tiny voice's constants, requests to
its model and to tts/tts_stream, and what they read back."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient

from testkit.xtts_checkpoints import voiced_clip
from tests.helpers import metric_total, stream_model
from triton_tts.ops.server import TritonServer
from triton_tts.xtts.card import Sampling
from triton_tts.xtts.runner import Conditioning, XttsRunner
from triton_tts.xtts.scheduler import Job, Scheduler

FloatArray = npt.NDArray[np.float32]


MAX_AUDIO_TOKENS = 53  # 50 codes a segment: two full chunks of 20 and a last of 10


GREEDY = Sampling(temperature=0.0, repetition_penalty=1.0)


def clip(seed: int, seconds: float, rate: int = 22050) -> FloatArray:
    clip_audio: FloatArray = voiced_clip(seed, seconds, rate)
    return clip_audio


STUDIO = "Studio One"  # a speaker of the checkpoint's speakers_xtts.pth, as Coqui ships them


NARRATOR = "narrator"


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


ORT_TYPES = {"tensor(float)": "TYPE_FP32", "tensor(int64)": "TYPE_INT64"}


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


def live_generations(server: TritonServer) -> float:
    return metric_total(server.metrics_port, "tts_xtts_generations", state="live")


def decode_steps(server: TritonServer) -> float:
    time.sleep(0.5)  # the model's counters follow its loop every 0.2 s
    return metric_total(server.metrics_port, "tts_xtts_decode_steps_total")


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
