"""Coqui's own inference on one item: the reference the exported voices are compared
against (noise off), and Coqui's own tokenizer for the ids to feed both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from triton_tts.export.coqui.loading import Loaded


def coqui_waveform(
    loaded: Loaded, ids: Sequence[int], speaker_id: int = 0, length_scale: float = 1.0
) -> npt.NDArray[np.float32]:
    """One item through Coqui's own model inference and Synthesizer's vocoder step
    (noise off)."""
    tts = loaded.tts
    x = torch.tensor([list(ids)], dtype=torch.long)
    aux: dict[str, Any] = {"x_lengths": torch.tensor([len(ids)]), "speaker_ids": None, "d_vectors": None}
    if tts.num_speakers > 1:
        aux["speaker_ids"] = torch.tensor([speaker_id])
    previous = getattr(tts, "length_scale", None)
    if previous is not None:
        tts.length_scale = length_scale
    try:
        with torch.no_grad():
            outputs = tts.inference(x, aux_input=aux)
            if loaded.family == "vits":
                return outputs["model_outputs"].reshape(-1).numpy().astype(np.float32)  # type: ignore[no-any-return]
            mel = outputs["model_outputs"][0]  # [T, C]
            wav = loaded.synthesizer._run_vocoder(mel, "cpu")
    finally:
        if previous is not None:
            tts.length_scale = previous
    return wav.reshape(-1).numpy().astype(np.float32)  # type: ignore[no-any-return]


def coqui_ids(loaded: Loaded, text: str) -> list[int]:
    """Coqui's tokenizer (its cleaner, phonemizer and framing) on ``text``."""
    return list(loaded.tts.tokenizer.text_to_ids(text))
