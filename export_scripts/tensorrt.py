"""Build TensorRT engines (``model.plan``) for the repository's ``tensorrt`` variant.

Run on the GPU node's architecture, with the TensorRT version of the Triton release that
serves them (Triton 2.51.0 = the ``nvcr.io/nvidia/tritonserver:24.10-py3`` container,
TensorRT 10.5): engines are not portable across GPUs or TensorRT versions. ::

    # inside the Triton container, after `triton-tts build-repo`:
    python -m triton_tts.export.tensorrt --repo model_repository
    tritonserver --model-repository=model_repository --model-config-name=tensorrt

    # or print the equivalent trtexec commands:
    python -m triton_tts.export.tensorrt --repo model_repository --print-trtexec

Dynamic shapes need an optimisation profile per input (min/opt/max). The profiles below
cover what the repository sends: any batch up to the configs' max_batch_size, phoneme
rows up to MAX_PHONEMES (preprocess pads to buckets), latents up to MAX_FRAMES (a
multiple of the acoustic model's 64-frame padding). Precision is chosen per stage: the
vocoder (most of the compute) in FP16; the acoustic model stays FP32 by default because
its durations are rounded up per phoneme and small errors change frame counts.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

import onnx

from triton_tts.model_configs import BuildOptions
from triton_tts.onnx_session import graph_inputs

log = logging.getLogger(__name__)

MIN_PHONEMES, OPT_PHONEMES, MAX_PHONEMES = 8, 192, 2048
MIN_FRAMES, OPT_FRAMES, MAX_FRAMES = 64, 512, 2048  # 64 frames = 0.74 s at 22,050 Hz
OPT_BATCH = 8
WORKSPACE_BYTES = 4 << 30
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    """min/opt/max shape of every input of one engine."""

    shapes: dict[str, tuple[Shape, Shape, Shape]]


def acoustic_profile(max_batch: int, speaker: bool = False) -> Profile:
    b = (1, min(OPT_BATCH, max_batch), max_batch)
    shapes: dict[str, tuple[Shape, Shape, Shape]] = {
        "PHONEME_IDS": ((b[0], MIN_PHONEMES), (b[1], OPT_PHONEMES), (b[2], MAX_PHONEMES)),
        "PHONEME_LENGTH": ((b[0],), (b[1],), (b[2],)),
        "SCALES": ((b[0], 3), (b[1], 3), (b[2], 3)),
    }
    if speaker:  # multi-speaker voices
        shapes["SPEAKER_ID"] = ((b[0],), (b[1],), (b[2],))
    return Profile(shapes)


def vocoder_profile(max_batch: int, channels: int, speaker: bool = False) -> Profile:
    b = (1, min(OPT_BATCH, max_batch), max_batch)
    shapes: dict[str, tuple[Shape, Shape, Shape]] = {
        "LATENT": (
            (b[0], channels, MIN_FRAMES),
            (b[1], channels, OPT_FRAMES),
            (b[2], channels, MAX_FRAMES),
        )
    }
    if speaker:  # speaker-conditioned decoders (multi-speaker VITS)
        shapes["SPEAKER_ID"] = ((b[0],), (b[1],), (b[2],))
    return Profile(shapes)


def engines(repo: Path, max_batch: int) -> list[tuple[Path, str, Profile]]:
    """(ONNX file, stage, profile) for every voice's native stages in the repository:
    ``acoustic``/``vocoder`` and the ``__<voice>`` copies. A Tacotron2 acoustic stage
    (a Python loop over three graphs) has no ``model.onnx`` and stays on onnxruntime."""
    found = []
    for stage in ("acoustic", "vocoder"):
        for folder in sorted([repo / stage, *repo.glob(f"{stage}__*")]):
            onnx_path = folder / "1" / "model.onnx"
            if not onnx_path.exists():
                continue
            if cpu_int8(onnx_path):
                raise ValueError(
                    f"{onnx_path} is an INT8 vocoder laid out for onnxruntime's CPU kernels "
                    "(`export int8` / `--precision int8`); on GPU nodes serve the fp32 or fp16 export"
                )
            speaker = "SPEAKER_ID" in graph_inputs(onnx_path)
            profile = (
                acoustic_profile(max_batch, speaker)
                if stage == "acoustic"
                else vocoder_profile(max_batch, latent_channels(onnx_path), speaker)
            )
            found.append((onnx_path, stage, profile))
    return found


def cpu_int8(onnx_path: Path) -> bool:
    """True for graphs with onnxruntime's CPU-only integer operators (the INT8 vocoder)."""
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    return any(node.op_type == "QLinearConv" for node in graph.node)


def latent_channels(vocoder_onnx: Path) -> int:
    model = onnx.load(str(vocoder_onnx), load_external_data=False)
    dim = model.graph.input[0].type.tensor_type.shape.dim[1]
    if dim.dim_value:
        return int(dim.dim_value)
    from triton_tts.export.piper import latent_channels as from_weights

    return from_weights(model)


def trtexec_command(onnx_path: Path, plan: Path, profile: Profile, fp16: bool) -> list[str]:
    def fmt(index: int) -> str:
        return ",".join(f"{name}:{'x'.join(map(str, s[index]))}" for name, s in profile.shapes.items())

    cmd = [
        "trtexec",
        f"--onnx={onnx_path}",
        f"--saveEngine={plan}",
        f"--minShapes={fmt(0)}",
        f"--optShapes={fmt(1)}",
        f"--maxShapes={fmt(2)}",
        f"--memPoolSize=workspace:{WORKSPACE_BYTES >> 20}M",
    ]
    return [*cmd, "--fp16"] if fp16 else cmd


def build_engine(onnx_path: Path, plan: Path, profile: Profile, fp16: bool) -> Path:  # pragma: no cover - GPU
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT cannot parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    optimisation = builder.create_optimization_profile()
    for name, (low, opt, high) in profile.shapes.items():
        optimisation.set_shape(name, low, opt, high)
    config.add_optimization_profile(optimisation)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT failed to build an engine for {onnx_path}")
    plan.write_bytes(bytes(serialized))
    log.info("wrote %s (%.1f MB)", plan, plan.stat().st_size / 1e6)
    return plan


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--repo", type=Path, default=Path("model_repository"))
    parser.add_argument("--max-batch-size", type=int, default=BuildOptions().max_batch_size)
    parser.add_argument("--fp16", nargs="*", default=["vocoder"], choices=["acoustic", "vocoder"])
    parser.add_argument("--print-trtexec", action="store_true", help="print commands, build nothing")
    parser.add_argument(
        "--trtexec", help="build with this trtexec binary instead of the tensorrt Python package"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for onnx_path, stage, profile in engines(args.repo, args.max_batch_size):
        plan = onnx_path.with_name("model.plan")
        fp16 = stage in args.fp16
        command = trtexec_command(onnx_path, plan, profile, fp16)
        if args.print_trtexec:
            print(" ".join(command))
        elif args.trtexec:
            subprocess.run([args.trtexec, *command[1:]], check=True)
        else:
            build_engine(onnx_path, plan, profile, fp16)


if __name__ == "__main__":
    main()
