"""Request helpers shared by the tests: one ensemble call over HTTP or gRPC."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

DETERMINISTIC = {"NOISE_SCALE": 0.0, "NOISE_W": 0.0}


def tts_inputs(lib: Any, text: str | bytes, **scalars: float | int | str) -> list[Any]:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    tensor = lib.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[raw]], dtype=np.object_))
    inputs = [tensor]
    for name, value in scalars.items():
        if name == "VOICE":
            t = lib.InferInput(name, [1, 1], "BYTES")
            t.set_data_from_numpy(np.array([[str(value).encode()]], dtype=np.object_))
        elif name == "SPEAKER_ID":
            t = lib.InferInput(name, [1, 1], "INT64")
            t.set_data_from_numpy(np.array([[value]], dtype=np.int64))
        else:
            t = lib.InferInput(name, [1, 1], "FP32")
            t.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        inputs.append(t)
    return inputs


def synthesize(client: Any, text: str | bytes, **scalars: Any) -> tuple[npt.NDArray[np.float32], int]:
    lib = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    result = client.infer("tts", tts_inputs(lib, text, **scalars))
    audio = result.as_numpy("AUDIO").reshape(-1)
    rate = int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
    return audio, rate


def model_counts(client: httpclient.InferenceServerClient, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) from Triton's own statistics."""
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def dims_compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Triton's rule for two shapes that must agree (ensemble steps, a request against a
    config): same rank, and each dim equal unless either side is -1 (any size)."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


TACOTRON_STEPS = 40  # a random-weight decoder may never stop: keep the guard short
TACOTRON_STOP_SHIFT = -0.3  # and nudge its stop token (see tests/test_coqui_tacotron2.py)


def export_random_coqui_voice(
    root: Path, family: str, vocoder_family: str | None, speakers: int, folder: Path
) -> Any:
    """A random-weight Coqui checkpoint of ``family`` (and vocoder), loaded the way users
    load theirs and exported to the voice folder ``folder``; returns Coqui's loaded model.
    Tacotron2 gets a short decoder guard and a nudged stop token so that it stops."""
    import torch

    from triton_tts.export import coqui
    from triton_tts.export.coqui_checkpoints import build_tts, build_vocoder

    saved = build_tts(family, root / "tts", speakers=speakers)
    vocoder = build_vocoder(vocoder_family, root / "vocoder") if vocoder_family else None
    loaded = coqui.load(
        checkpoint=saved.checkpoint,
        config=saved.config,
        vocoder_checkpoint=vocoder.checkpoint if vocoder else None,
        vocoder_config=vocoder.config if vocoder else None,
    )
    if family == "tacotron2":
        with torch.no_grad():
            loaded.tts.decoder.stopnet[1].linear_layer.bias.add_(TACOTRON_STOP_SHIFT)
        loaded.tts.decoder.max_decoder_steps = loaded.tts.config.max_decoder_steps = TACOTRON_STEPS
    coqui.export_coqui(loaded, folder)
    return loaded
