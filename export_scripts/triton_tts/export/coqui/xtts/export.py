"""A loaded Coqui XTTS v2 -> an XTTS voice folder (:mod:`triton_tts.xtts`), through a
parity gate against Coqui's own inference.

The gate runs a clip (a fixed synthetic voice-like signal) and texts through both Coqui's
``Xtts`` and the exported graphs on ONNX Runtime: the conditioning latents and speaker
embedding must agree, greedy decoding must choose the same codes, and the greedy audio must
reach ``MIN_SNR_DB``. A voice that fails is not written: its card is removed and the export
raises :class:`ParityRefused`. ``parity.json`` in the folder records what was measured,
for a refused export too (``passed`` false, with its ``failures``).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import torch
from torch import nn

from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.onnx_export import OPSET
from triton_tts.export.coqui.xtts import graphs
from triton_tts.xtts.card import (
    CARD_FILE,
    CPML,
    DECODER_FILE,
    EMBEDDINGS_FILE,
    GPT_FILE,
    SPEAKER_FILE,
    STYLE_FILE,
    VOCAB_FILE,
    Sampling,
    XttsCard,
)
from triton_tts.xtts.runner import XttsRunner
from triton_tts.xtts.speakers import from_coqui, save_speaker

log = logging.getLogger(__name__)
FloatArray = npt.NDArray[np.float32]

PARITY_FILE = "parity.json"
MIN_SNR_DB = 30.0
CONDITIONING_TOLERANCE = 1e-3  # largest difference, relative to the reference's largest value
GATE_CODES = 48  # codes each gate text generates at most (both sides capped alike)
GATE_TEXTS = (
    ("en", "Hello there, how are you today?"),
    ("en", "The quick brown fox jumps over the lazy dog."),
)


class ParityRefused(RuntimeError):
    """The exported graphs do not reproduce Coqui's XTTS; ``report``: what was measured."""

    def __init__(self, message: str, report: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.report = report or {}


def _export(
    module: nn.Module,
    args: tuple[Any, ...],
    path: Path,
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> None:
    module.eval()
    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))


def card_for(model: Any, name: str, source: str) -> XttsCard:
    gpt, config = model.gpt, model.config
    hf = gpt.gpt.config
    # Coqui's gpt_cond_len <= 0 conditions on the whole reference (up to max_ref_len).
    cond_seconds = float(config.gpt_cond_len) if config.gpt_cond_len > 0 else float(config.max_ref_len)
    return XttsCard(
        name=name,
        languages=list(config.languages),
        char_limits={str(k): int(v) for k, v in model.tokenizer.char_limits.items()},
        text_tokens=int(gpt.number_text_tokens),
        text_start=int(gpt.start_text_token),
        text_stop=int(gpt.stop_text_token),
        max_text_tokens=int(model.args.gpt_max_text_tokens),
        audio_codes=int(gpt.num_audio_tokens),
        audio_start=int(gpt.start_audio_token),
        audio_stop=int(gpt.stop_audio_token),
        max_audio_tokens=int(gpt.max_gen_mel_tokens),
        layers=int(hf.n_layer),
        heads=int(hf.n_head),
        head_dim=int(hf.n_embd // hf.n_head),
        model_dim=int(hf.n_embd),
        style_latents=graphs.style_frames(model, int(22050 * cond_seconds)),
        perceiver=graphs.uses_perceiver(model),
        speaker_dim=int(model.hifigan_decoder.speaker_encoder.fc.out_features),
        output_rate=int(model.hifigan_decoder.output_sample_rate),
        samples_per_code=int(gpt.code_stride_len),
        cond_seconds=cond_seconds,
        cond_chunk_seconds=float(config.gpt_cond_chunk_len),
        reference_seconds=float(config.max_ref_len),
        sampling=Sampling(
            temperature=float(config.temperature),
            top_k=int(config.top_k),
            top_p=float(config.top_p),
            repetition_penalty=float(config.repetition_penalty),
            length_penalty=float(config.length_penalty),
        ),
        source=source,
        licence=CPML,
    )


def write_graphs(model: Any, out: Path) -> None:
    """The four ONNX files and the GPT's input tables."""
    card_gpt = model.gpt.gpt.config
    layers, heads, dim = card_gpt.n_layer, card_gpt.n_head, card_gpt.n_embd
    clip = torch.from_numpy(gate_clip(22050 * 2))[None]
    style_axes = {"AUDIO": {1: "samples"}}
    if not graphs.uses_perceiver(model):  # a latent per frame of the clip
        style_axes["STYLE"] = {1: "latents"}
    _export(graphs.StyleGraph(model), (clip,), out / STYLE_FILE, ["AUDIO"], ["STYLE"], style_axes)
    _export(
        graphs.SpeakerGraph(model),
        (clip,),
        out / SPEAKER_FILE,
        ["AUDIO"],
        ["SPEAKER"],
        {"AUDIO": {1: "samples"}},
    )
    past = torch.randn(2, layers, 2, heads, 7, dim // heads)
    _export(
        graphs.GptGraph(model),
        (torch.randn(2, 5, dim), past, torch.ones(2, 12)),
        out / GPT_FILE,
        ["EMBEDDINGS", "PAST", "MASK"],
        ["LOGITS", "LATENT", "PRESENT"],
        {
            "EMBEDDINGS": {0: "batch", 1: "new"},
            "PAST": {0: "batch", 4: "past"},
            "MASK": {0: "batch", 1: "positions"},
            "LOGITS": {0: "batch"},
            "LATENT": {0: "batch"},
            "PRESENT": {0: "batch", 4: "new"},
        },
    )
    speaker_dim = int(model.hifigan_decoder.speaker_encoder.fc.out_features)
    _export(
        graphs.DecoderGraph(model),
        (torch.randn(1, 20, dim), torch.randn(1, speaker_dim)),
        out / DECODER_FILE,
        ["LATENTS", "SPEAKER"],
        ["WAVEFORM"],
        {
            "LATENTS": {0: "batch", 1: "codes"},
            "SPEAKER": {0: "batch"},
            "WAVEFORM": {0: "batch", 1: "samples"},
        },
    )
    np.savez(out / EMBEDDINGS_FILE, **graphs.embedding_tables(model))


def gate_clip(samples: int, rate: int = 22050, seed: int = 0) -> FloatArray:
    """A voice-like clip: a gliding harmonic tone with syllable-rate amplitude, and noise."""
    t = np.arange(samples) / rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    noise = np.random.default_rng(seed).standard_normal(samples) * 0.02
    signal: FloatArray = (0.2 * tone * envelope + noise).astype(np.float32)
    return signal


def snr_db(reference: FloatArray, test: FloatArray) -> float:
    if reference.shape != test.shape:
        return float("-inf")
    error = float(np.sum((reference - test) ** 2))
    return float("inf") if error == 0 else 10 * float(np.log10(float(np.sum(reference**2)) / error))


def relative_difference(ours: FloatArray, reference: FloatArray) -> float:
    """The largest difference relative to the reference's largest value; inf when the
    shapes differ (a refusal, not a numpy error)."""
    if ours.shape != reference.shape:
        return float("inf")
    return float(np.abs(ours - reference).max() / max(float(np.abs(reference).max()), 1e-30))


def check_parity(model: Any, folder: Path, clip: FloatArray | None = None) -> dict[str, Any]:
    """Coqui's XTTS ``model`` against the graphs in ``folder``; ParityRefused on a mismatch."""
    runner = XttsRunner(folder)
    clip = gate_clip(22050 * 6) if clip is None else clip
    audio = torch.from_numpy(clip)[None]
    config = model.config
    with torch.no_grad():
        style = model.get_gpt_cond_latents(
            audio, 22050, length=config.gpt_cond_len, chunk_length=config.gpt_cond_chunk_len
        )
        speaker = model.get_speaker_embedding(audio[:, : int(22050 * config.max_ref_len)], 22050)
    ours = runner.conditioning(clip)
    report: dict[str, Any] = {
        "conditioning": "perceiver" if runner.card.perceiver else "whole clip",
        "style": relative_difference(ours.style, style[0].numpy()),
        "speaker": relative_difference(ours.speaker, speaker[0, :, 0].numpy()),
        "texts": [],
    }
    failures = [
        f"{what} differs by {report[what]:.2e}"
        for what in ("style", "speaker")
        if not report[what] <= CONDITIONING_TOLERANCE
    ]
    cap = min(GATE_CODES, int(model.gpt.max_gen_mel_tokens))
    saved = model.gpt.max_gen_mel_tokens
    model.gpt.max_gen_mel_tokens = cap  # Coqui's generate reads its limit here
    try:
        for language, text in GATE_TEXTS:
            ids = model.tokenizer.encode(text.strip().lower(), lang=language)
            with torch.no_grad():
                reference = model.inference(
                    text,
                    language,
                    style,
                    speaker,
                    do_sample=False,
                    repetition_penalty=config.repetition_penalty,
                )
            gen = runner.generate(
                style[0].numpy(),
                ids,
                Sampling(temperature=0.0, repetition_penalty=config.repetition_penalty),
                limit=cap,
            )
            wav = runner.waveform(np.stack(gen.latents), speaker[0, :, 0].numpy())
            measured: dict[str, Any] = {
                "text": text,
                "codes": len(gen.codes),
                "reference_codes": int(reference["gpt_latents"].shape[1]),
                "snr_db": snr_db(np.asarray(reference["wav"], dtype=np.float32), wav),
            }
            report["texts"].append(measured)
            if measured["codes"] != measured["reference_codes"] or not measured["snr_db"] >= MIN_SNR_DB:
                failures.append(
                    f"{text!r}: {measured['codes']} codes vs Coqui's {measured['reference_codes']}, "
                    f"SNR {measured['snr_db']:.1f} dB (at least {MIN_SNR_DB} needed)"
                )
    finally:
        model.gpt.max_gen_mel_tokens = saved
    report["passed"] = not failures
    report["failures"] = failures
    if failures:
        raise ParityRefused(
            "the XTTS export does not reproduce Coqui's inference: " + "; ".join(failures), report
        )
    return report


def export_xtts(loaded: Loaded, out: Path, name: str | None = None) -> XttsCard:
    """Write the XTTS voice folder ``out`` from ``loaded``; ParityRefused (and no card)
    when the graphs do not reproduce Coqui."""
    model = loaded.tts
    model.eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / CARD_FILE).unlink(missing_ok=True)
    write_graphs(model, out)
    model.tokenizer.tokenizer.save(str(out / VOCAB_FILE))
    card = card_for(model, name or out.name, loaded.source)
    card.save(out)  # the runner reads it; removed again on a refusal
    try:
        report = check_parity(model, out)
    except ParityRefused as refused:  # no card, so nothing serves it; the figures stay
        (out / CARD_FILE).unlink(missing_ok=True)
        (out / PARITY_FILE).write_text(json.dumps(refused.report, indent=2), encoding="utf-8")
        raise
    finally:
        shutil.rmtree(out / "__pycache__", ignore_errors=True)
    (out / PARITY_FILE).write_text(json.dumps(report, indent=2), encoding="utf-8")
    manager = getattr(model, "speaker_manager", None)  # Coqui read speakers_xtts.pth, if there is one
    for speaker, conditioning in from_coqui(dict(getattr(manager, "speakers", None) or {})).items():
        save_speaker(out, speaker, conditioning)
    log.info("exported %s (xtts) to %s", loaded.source, out)
    return card
