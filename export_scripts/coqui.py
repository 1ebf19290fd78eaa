"""Coqui TTS models -> a voice folder (acoustic ONNX + vocoder ONNX + voice.json).

    triton-tts export coqui --model-name tts_models/en/ljspeech/vits --out voices/ljs
    triton-tts export coqui --checkpoint model.pth --config config.json \\
        --vocoder-checkpoint hifigan.pth --vocoder-config hifigan.json --out voices/mine

A model name is fetched through Coqui's own model manager (network needed, once); files
are loaded with Coqui's own ``Synthesizer``, the same object ``tts-server`` serves, so
what is exported is exactly what Coqui would run. Each family has a wrapper module that
re-states Coqui's inference with per-item lengths, speakers and scales, so that an item's
output in a padded batch equals its batch-1 output (Coqui's own inference assumes batch 1
in several places), and with noise scaled per request (zero noise: deterministic).

Families: ``vits`` (here), ``fast_pitch`` / ``fastspeech2`` / ``glow_tts``
(:mod:`coqui_forward`), ``tacotron2`` (:mod:`coqui_tacotron2`, step-wise). Export uses
torch's legacy TorchScript-based exporter at opset 17.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import numpy.typing as npt
import onnx
import torch
from torch import nn

# LATENT frames are padded to a multiple of this (native GPU batching)
from triton_tts.batching import FRAME_MULTIPLE as FRAME_MULTIPLE  # noqa: PLC0414 - re-exported
from triton_tts.export.coqui_arguments import PRECISIONS, add_arguments
from triton_tts.export.graph_surgery import cap_frames
from triton_tts.export.vocoder_graph import write_unpadded
from triton_tts.limits import frame_budget
from triton_tts.voice import ACOUSTIC_FILE, VOCODER_FILE, VOCODER_UNPADDED_FILE, Voice

log = logging.getLogger(__name__)

OPSET = 17
MEL_FAMILIES = ("fast_pitch", "fastspeech2", "glow_tts", "tacotron2")
FAMILIES = ("vits", *MEL_FAMILIES)


@dataclass
class Loaded:
    """A Coqui model as Coqui's Synthesizer loaded it, with where it came from."""

    synthesizer: Any
    family: str
    source: str

    @property
    def tts(self) -> Any:
        return self.synthesizer.tts_model

    @property
    def vocoder(self) -> Any:
        return self.synthesizer.vocoder_model


class DownloadFailed(RuntimeError):
    """A model name Coqui's model manager could not fetch (no network, an unknown name)."""


def _without_traceback(record: logging.LogRecord) -> bool:
    return record.exc_info is None  # Coqui logs the failure with its traceback; we say it once


def _download(manager: Any, name: str) -> Any:
    """Coqui's ``download_model``, a failure turned into one DownloadFailed with the way out."""
    import requests

    coqui_log = logging.getLogger("TTS.utils.manage")
    coqui_log.addFilter(_without_traceback)
    try:
        return manager.download_model(name)
    except requests.RequestException as err:
        cause: BaseException = err
        while cause.__cause__ or cause.__context__:  # the socket's own words
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        host = urlparse(str(err.request.url)).hostname if err.request and err.request.url else None
        where = f" from {host}" if host else ""
        raise DownloadFailed(
            f"cannot download Coqui model '{name}'{where} ({cause}): with no network, download it "
            "where there is one (Coqui keeps models under TTS_HOME) or export from files with "
            "--checkpoint/--config"
        ) from err
    except (KeyError, ValueError) as err:  # Coqui's catalogue lookup
        raise DownloadFailed(
            f"Coqui has no model named '{name}': names look like tts_models/en/ljspeech/vits "
            "(Coqui's `tts --list_models` lists them)"
        ) from err
    finally:
        coqui_log.removeFilter(_without_traceback)


def load(
    *,
    model_name: str | None = None,
    checkpoint: Path | None = None,
    config: Path | None = None,
    vocoder_name: str | None = None,
    vocoder_checkpoint: Path | None = None,
    vocoder_config: Path | None = None,
) -> Loaded:
    """Load through Coqui: names via its ModelManager (downloads), files directly."""
    from TTS.utils.synthesizer import Synthesizer

    source = model_name or str(checkpoint)
    if model_name:
        from TTS.utils.manage import ModelManager

        manager = ModelManager(progress_bar=False)
        checkpoint_str, config_str, item = _download(manager, model_name)
        checkpoint, config = Path(checkpoint_str), Path(config_str)
        vocoder_name = vocoder_name or (item or {}).get("default_vocoder")
        if vocoder_name:
            voc_checkpoint, voc_config, _ = _download(manager, vocoder_name)
            vocoder_checkpoint, vocoder_config = Path(voc_checkpoint), Path(voc_config)
    if checkpoint is None or config is None:
        raise ValueError("give --model-name, or --checkpoint and --config")
    synthesizer = Synthesizer(
        tts_checkpoint=checkpoint,
        tts_config_path=config,
        vocoder_checkpoint=vocoder_checkpoint,
        vocoder_config=vocoder_config,
    )
    family = synthesizer.tts_config.model
    if family not in FAMILIES:
        raise ValueError(f"Coqui model family {family!r} is not supported; supported: {', '.join(FAMILIES)}")
    if family in MEL_FAMILIES and synthesizer.vocoder_model is None:
        raise ValueError(f"a {family} model needs a vocoder: give --vocoder-name or --vocoder-checkpoint")
    return Loaded(synthesizer, family, source)


# --- the voice description ------------------------------------------------------------


def voice_for(loaded: Loaded, name: str) -> Voice:
    """Tokens, framing, speakers and audio facts, read from Coqui's tokenizer and configs."""
    tts = loaded.tts
    tokenizer = tts.tokenizer
    characters = tokenizer.characters
    config = loaded.synthesizer.tts_config
    symbols = {ch: [i] for i, ch in enumerate(characters.vocab) if ch}
    language = getattr(config, "phoneme_language", None) or "en-us"
    speakers = {}
    if getattr(tts, "speaker_manager", None) is not None and tts.num_speakers > 1:
        speakers = {str(k): int(v) for k, v in tts.speaker_manager.name_to_id.items()}
    blank = [characters.blank_id] if tokenizer.add_blank else None
    sample_rate = int(tts.ap.sample_rate)
    if (
        loaded.vocoder is not None
        and int(loaded.synthesizer.vocoder_config.audio["sample_rate"]) != sample_rate
    ):
        raise ValueError(
            "the vocoder's sample rate differs from the TTS model's; resampling is not supported"
        )
    return Voice(
        name=name,
        sample_rate=sample_rate,
        hop_length=int(tts.ap.hop_length),
        latent_channels=0,  # filled in from the exported vocoder
        phonemizer_language=language,
        symbols=symbols,
        speakers=speakers,
        noise_scale=0.667 if loaded.family == "vits" else 0.0,
        length_scale=1.0,
        noise_w=0.8 if loaded.family == "vits" else 0.0,
        source=f"coqui:{loaded.source}",
        bos=[characters.bos_id] if tokenizer.use_eos_bos else [],
        eos=[characters.eos_id] if tokenizer.use_eos_bos else [],
        intersperse=blank or [],
        pad_id=int(characters.pad_id) if characters.pad_id is not None else 0,
        tokens="phonemes" if tokenizer.phonemizer is not None else "characters",
        family=loaded.family,
    )


# --- shared pieces of the wrappers ----------------------------------------------------


def sequence_mask(lengths: torch.Tensor, max_len: torch.Tensor | int) -> torch.Tensor:
    steps = torch.arange(max_len, device=lengths.device)  # type: ignore[arg-type]
    return steps.unsqueeze(0) < lengths.unsqueeze(1)


def pad_frames(latent: torch.Tensor, multiple: int = FRAME_MULTIPLE) -> torch.Tensor:
    """Zero-pad the frame axis up to a multiple (same shapes batch on native backends)."""
    extra = (multiple - latent.shape[-1] % multiple) % multiple
    return torch.cat([latent, latent.new_zeros(latent.shape[0], latent.shape[1], extra)], dim=-1)


def alignment_path(durations: torch.Tensor, x_mask: torch.Tensor, y_mask: torch.Tensor) -> torch.Tensor:
    """[B, T_in] integer durations -> [B, T_in, T_out] hard alignment (masked)."""
    ends = torch.cumsum(durations, dim=1)
    starts = ends - durations
    frames = torch.arange(y_mask.shape[-1], device=durations.device).view(1, 1, -1)
    path = (frames >= starts.unsqueeze(-1)) & (frames < ends.unsqueeze(-1))
    mask = x_mask.unsqueeze(-1) & y_mask.unsqueeze(1)
    return (path & mask).to(torch.float32)


# --- VITS -----------------------------------------------------------------------------


class VitsAcoustic(nn.Module):
    """Text encoder + duration predictor + flow (reverse) -> masked latent, frame counts."""

    def __init__(self, vits: Any) -> None:
        super().__init__()
        self.vits = vits

    def speaker_embedding(self, speaker_id: torch.Tensor) -> torch.Tensor | None:
        vits = self.vits
        if vits.args.use_speaker_embedding and vits.num_speakers > 1:
            return vits.emb_g(speaker_id).unsqueeze(-1)  # type: ignore[no-any-return]
        return None

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, speaker_id: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        vits = self.vits
        g = self.speaker_embedding(speaker_id)
        noise_scale, length_scale, noise_w = (scales[:, i].view(-1, 1, 1) for i in range(3))
        x, m_p, logs_p, x_mask = vits.text_encoder(ids, lengths)
        g_dp = g if vits.args.condition_dp_on_speaker else None
        if vits.args.use_sdp:
            logw = vits.duration_predictor(x, x_mask, g=g_dp, reverse=True, noise_scale=noise_w)
        else:
            logw = vits.duration_predictor(x, x_mask, g=g_dp)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)  # padded tokens: 0 frames
        frame_count = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(frame_count, frame_count.max())
        path = alignment_path(w_ceil.squeeze(1), x_mask.squeeze(1) > 0, y_mask)
        m_p = torch.matmul(path.transpose(1, 2), m_p.transpose(1, 2)).transpose(1, 2)
        logs_p = torch.matmul(path.transpose(1, 2), logs_p.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        y_mask_f = y_mask.unsqueeze(1).to(z_p.dtype)
        z = vits.flow(z_p, y_mask_f, g=g, reverse=True)
        return pad_frames(z * y_mask_f), frame_count


def valid_frames(latent: torch.Tensor) -> torch.Tensor:
    """[B, C, T] -> [B]: frames up to the last one with any non-zero channel. Padding
    frames are exact zeros (acoustic outputs are masked); a real frame never is."""
    frames = torch.arange(1, latent.shape[-1] + 1, device=latent.device).unsqueeze(0)
    used = (latent != 0).any(dim=1).to(frames.dtype)
    return (used * frames).amax(dim=1)


class PaddingSafe(nn.Module):
    """Run a convolutional vocoder on a zero-padded batch as if each item were alone.

    A conv stack fed padded frames lets them leak into an item's last frames (a bias,
    a speaker conditioning term added everywhere); batch 1 sees zero padding instead. A
    pre-hook on every Conv1d / ConvTranspose1d zeroes its input past the item's valid
    length (scaled by how far the stack has upsampled by then), which is exactly what
    the convolution's own zero padding does at batch 1. Measured on VITS: the tail
    frames went from 5e-2 off Coqui's batch-1 output to float rounding.
    """

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self._valid: torch.Tensor | None = None
        self._frames: torch.Tensor | int = 0
        self._masks: dict[int, torch.Tensor] = {}
        for module in generator.modules():
            if isinstance(module, nn.Conv1d | nn.ConvTranspose1d):
                module.register_forward_pre_hook(self._mask_input)

    def _mask_input(
        self, module: nn.Module, inputs: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...] | None:
        x = inputs[0]
        if self._valid is None or x.shape[-1] < self._frames:  # e.g. a [B, C, 1] conditioning
            return None
        # One mask per resolution, shared by every conv at it (the trace records it once).
        key = int(x.shape[-1])
        if key not in self._masks:
            factor = torch.div(x.shape[-1], self._frames, rounding_mode="floor")
            steps = torch.arange(x.shape[-1], device=x.device).unsqueeze(0)
            self._masks[key] = (steps < (self._valid * factor).unsqueeze(1)).unsqueeze(1).to(x.dtype)
        return (x * self._masks[key], *inputs[1:])

    def run(self, latent: torch.Tensor, call: Callable[[], torch.Tensor]) -> torch.Tensor:
        self._valid, self._frames, self._masks = valid_frames(latent), latent.shape[-1], {}
        try:
            return call()
        finally:
            self._valid, self._masks = None, {}


class VitsVocoder(nn.Module):
    """VITS's HiFi-GAN waveform decoder (speaker-conditioned when the model has speakers)."""

    def __init__(self, vits: Any) -> None:
        super().__init__()
        self.vits = vits
        self.acoustic = VitsAcoustic(vits)
        self.safe = PaddingSafe(vits.waveform_decoder)

    def forward(self, latent: torch.Tensor, speaker_id: torch.Tensor | None = None) -> torch.Tensor:
        g = None if speaker_id is None else self.acoustic.speaker_embedding(speaker_id)
        waveform = self.safe.run(latent, lambda: self.vits.waveform_decoder(latent, g=g))
        return waveform.squeeze(1)


def _vits_stages(loaded: Loaded) -> tuple[nn.Module, nn.Module, bool]:
    vits = loaded.tts
    speaker_vocoder = bool(vits.args.use_speaker_embedding and vits.num_speakers > 1)
    return VitsAcoustic(vits), VitsVocoder(vits), speaker_vocoder


# --- ONNX export ------------------------------------------------------------------------

ACOUSTIC_INPUTS = ["PHONEME_IDS", "PHONEME_LENGTH", "SCALES", "SPEAKER_ID"]
ACOUSTIC_AXES = {
    "PHONEME_IDS": {0: "batch", 1: "phonemes"},
    "PHONEME_LENGTH": {0: "batch"},
    "SCALES": {0: "batch"},
    "SPEAKER_ID": {0: "batch"},
    "LATENT": {0: "batch", 2: "frames"},
    "FRAME_COUNT": {0: "batch"},
}


def example_inputs(voice: Voice, batch: int = 2, length: int = 40) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, max(2, len(voice.symbols)), (batch, length), generator=generator)
    lengths = torch.tensor([length - 7 * i for i in range(batch)], dtype=torch.long)
    scales = torch.tensor([[0.0, 1.0, 0.0]] * batch, dtype=torch.float32)
    speakers = torch.zeros(batch, dtype=torch.long)
    return ids, lengths, scales, speakers


def export_module(
    module: nn.Module,
    args: tuple[Any, ...],
    path: Path,
    inputs: list[str],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> Path:
    module.eval()
    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={k: v for k, v in axes.items() if k in inputs + outputs},
            opset_version=OPSET,
            dynamo=False,
        )
    # An input the graph does not use (SPEAKER_ID of a one-speaker voice) is dropped by the
    # exporter; the repository builder reads which inputs survived from the file.
    onnx.checker.check_model(onnx.load(str(path)))
    return path


StageBuilder = Callable[[Loaded], tuple[nn.Module, nn.Module, bool]]


def stage_builders() -> dict[str, StageBuilder]:
    from triton_tts.export import coqui_forward

    builders: dict[str, StageBuilder] = {"vits": _vits_stages}
    builders.update(coqui_forward.BUILDERS)
    return builders


def export_coqui(loaded: Loaded, out: Path, name: str | None = None, precision: str = "fp32") -> Voice:
    """Export ``loaded`` into the voice folder ``out`` at ``precision``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    voice = voice_for(loaded, name or out.name)
    if loaded.family == "tacotron2":
        from triton_tts.export import coqui_tacotron2

        voice = coqui_tacotron2.export(loaded, out, voice)
    else:
        acoustic, vocoder, speaker_vocoder = stage_builders()[loaded.family](loaded)
        example = example_inputs(voice)
        export_module(
            acoustic, example, out / ACOUSTIC_FILE, ACOUSTIC_INPUTS, ["LATENT", "FRAME_COUNT"], ACOUSTIC_AXES
        )
        capped = onnx.load(str(out / ACOUSTIC_FILE))
        cap_frames(capped, frame_budget(voice.sample_rate, voice.hop_length))
        onnx.save(capped, str(out / ACOUSTIC_FILE))
        with torch.no_grad():
            latent, _ = acoustic(*example)
        vocoder_args: tuple[Any, ...] = (latent, example[3]) if speaker_vocoder else (latent,)
        vocoder_inputs = ["LATENT", "SPEAKER_ID"] if speaker_vocoder else ["LATENT"]
        export_module(
            vocoder,
            vocoder_args,
            out / VOCODER_FILE,
            vocoder_inputs,
            ["WAVEFORM"],
            {
                "LATENT": {0: "batch", 2: "frames"},
                "SPEAKER_ID": {0: "batch"},
                "WAVEFORM": {0: "batch", 1: "samples"},
            },
        )
        # Mel acoustic wrappers repeat the GAN vocoder's edge frames per item (coqui_forward).
        edge = int(getattr(acoustic, "edge_frames", 0))
        voice = replace(
            voice,
            latent_channels=int(latent.shape[1]),
            vocoder_uses_speaker=speaker_vocoder,
            mel_edge_frames=edge,
        )
    voice.save(out)
    write_unpadded(out / VOCODER_FILE, out / VOCODER_UNPADDED_FILE)  # for one-item runs
    if precision != "fp32":
        voice = convert_precision(out, voice, precision)
    log.info("exported %s (%s) to %s", loaded.source, loaded.family, out)
    return voice


def convert_precision(folder: Path, voice: Voice, precision: str) -> Voice:
    """fp16: every stage in half precision with FP32 inputs/outputs (for GPUs).
    int8: the vocoder in static INT8 (checked against FP32); acoustic stays FP32, as
    static INT8 changed frame counts of acoustic models (see export_scripts/quantize.py)."""
    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        for onnx_file in sorted(folder.glob("*.onnx")):
            model = convert_float_to_float16(onnx.load(str(onnx_file)), keep_io_types=True)
            onnx.save(model, str(onnx_file))
        voice = replace(voice, precision={stage: "fp16" for stage in ("acoustic", "vocoder")})
        voice.save(folder)
        return voice
    from triton_tts.export.quantize import export_int8_voice

    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32"
        shutil.copytree(folder, fp32)
        export_int8_voice(fp32, folder)
    voice = replace(Voice.load(folder), name=voice.name)  # the name the user chose
    voice.save(folder)
    return voice


# --- Coqui's own inference, the reference the exports are checked against --------------


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Export a Coqui TTS model to a triton-tts voice folder")
    add_arguments(parser)
    run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> Voice:
    if args.checkpoint is not None and args.config is None:
        raise SystemExit("--checkpoint needs --config")
    if (args.vocoder_checkpoint is None) != (args.vocoder_config is None):
        raise SystemExit("--vocoder-checkpoint and --vocoder-config go together")
    loaded = load(
        model_name=args.model_name,
        checkpoint=args.checkpoint,
        config=args.config,
        vocoder_name=args.vocoder_name,
        vocoder_checkpoint=args.vocoder_checkpoint,
        vocoder_config=args.vocoder_config,
    )
    voice = export_coqui(loaded, args.out, args.name, args.precision)
    print(f"voice '{voice.name}' ({loaded.family}, {args.precision}) written to {args.out}")
    return voice


if __name__ == "__main__":
    main()
