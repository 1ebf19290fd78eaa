"""Build TensorRT engines (``model.plan``) for the repository's ``tensorrt`` variant.

Run on the GPU node's architecture, with the TensorRT version of the Triton release that
serves them (the image's ``nvcr.io/nvidia/tritonserver:26.08-py3``, Triton 2.72.0, with the
TensorRT its release notes name): engines are not portable across GPUs or TensorRT versions. ::

    # inside the Triton container, after `triton-tts build-repo`:
    python -m triton_tts.export.tensorrt --repo model_repository
    tritonserver --model-repository=model_repository --model-config-name=tensorrt

    # or print the equivalent trtexec commands:
    python -m triton_tts.export.tensorrt --repo model_repository --print-trtexec

    # reuse engines across starts: a hit is copied into place, a miss is built and stored
    # (keyed by GPU model, TensorRT version and the graph, profile and precision):
    python -m triton_tts.export.tensorrt --repo model_repository --cache-dir /engine-cache

Dynamic shapes need an optimisation profile per input (min/opt/max). The profiles cover
every request the API accepts, voice by voice: any batch up to the configs'
max_batch_size, phoneme rows up to the voice's chunk budget (``max_ids``, a bucket:
preprocess pads to buckets and refuses longer chunks), latents up to its frame budget
(``max_frames``, a multiple of the acoustic model's 64-frame padding), as the build
measured them into the voice's preprocess config (triton_tts/runtime/limits.py: the longest chunk
at the slowest SPEED and noisiest NOISE_W is predicted within them, and ``tts`` splits a
chunk that is not). Precision is chosen per stage: the
vocoder (most of the compute) in FP16; the acoustic model stays FP32 by default because
its durations are rounded up per phoneme and small errors change frame counts.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from triton_tts.build.model_configs import DEFAULT_CHUNK_LIMITS, VOICE_SEPARATOR, BuildOptions, parse
from triton_tts.runtime.limits import MAX_CHUNK_IDS, ChunkLimits
from triton_tts.runtime.onnx_session import graph_inputs

log = logging.getLogger(__name__)

MIN_PHONEMES, OPT_PHONEMES = 8, 192
MIN_FRAMES, OPT_FRAMES = 64, 512  # 64 frames = 0.74 s at 22,050 Hz
OPT_BATCH = 8
DEFAULT_LIMITS = ChunkLimits.from_json(DEFAULT_CHUNK_LIMITS)
WORKSPACE_BYTES = 4 << 30
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Profile:
    """min/opt/max shape of every input of one engine."""

    shapes: dict[str, tuple[Shape, Shape, Shape]]


def acoustic_profile(max_batch: int, speaker: bool = False, max_phonemes: int = MAX_CHUNK_IDS) -> Profile:
    b = (1, min(OPT_BATCH, max_batch), max_batch)
    shapes: dict[str, tuple[Shape, Shape, Shape]] = {
        "PHONEME_IDS": ((b[0], MIN_PHONEMES), (b[1], OPT_PHONEMES), (b[2], max_phonemes)),
        "PHONEME_LENGTH": ((b[0],), (b[1],), (b[2],)),
        "SCALES": ((b[0], 3), (b[1], 3), (b[2], 3)),
    }
    if speaker:  # multi-speaker voices
        shapes["SPEAKER_ID"] = ((b[0],), (b[1],), (b[2],))
    return Profile(shapes)


def vocoder_profile(
    max_batch: int, channels: int, speaker: bool = False, max_frames: int | None = None
) -> Profile:
    b = (1, min(OPT_BATCH, max_batch), max_batch)
    high = max_frames or DEFAULT_LIMITS.max_frames
    shapes: dict[str, tuple[Shape, Shape, Shape]] = {
        "LATENT": (
            (b[0], channels, MIN_FRAMES),
            (b[1], channels, OPT_FRAMES),
            (b[2], channels, high),
        )
    }
    if speaker:  # speaker-conditioned decoders (multi-speaker VITS)
        shapes["SPEAKER_ID"] = ((b[0],), (b[1],), (b[2],))
    return Profile(shapes)


def voice_limits(repo: Path, stage_folder: Path) -> ChunkLimits:
    """The chunk budget the build measured for the voice of ``acoustic[__voice]`` or
    ``vocoder[__voice]``: its preprocess config's ``chunk_limits`` parameter."""
    suffix = stage_folder.name.partition(VOICE_SEPARATOR)[2]
    config_path = repo / (f"preprocess{VOICE_SEPARATOR}{suffix}" if suffix else "preprocess") / "config.pbtxt"
    if not config_path.exists():
        log.warning("%s not found: profiling %s with the default voice's limits", config_path, stage_folder)
        return DEFAULT_LIMITS
    config = parse(config_path.read_text(encoding="utf-8"))
    return ChunkLimits.from_json(config.parameters["chunk_limits"].string_value)


def engines(repo: Path, max_batch: int) -> list[tuple[Path, str, Profile]]:
    """(ONNX file, stage, profile) for every voice's native stages in the repository:
    ``acoustic``/``vocoder`` and the ``__<voice>`` copies, each profiled to its voice's
    chunk budget. A Tacotron2 acoustic stage (a Python loop over three graphs) has no
    ``model.onnx`` and stays on onnxruntime."""
    found = []
    for stage in ("acoustic", "vocoder"):
        for folder in sorted([repo / stage, *repo.glob(f"{stage}__*")]):
            onnx_path = folder / "1" / "model.onnx"
            if not onnx_path.exists():
                continue
            if cpu_int8(onnx_path):
                raise ValueError(
                    f"{onnx_path} is an INT8 {stage} graph laid out for onnxruntime's CPU kernels "
                    "(`export int8` / `--precision int8`); on GPU nodes serve the fp32 or fp16 export"
                )
            speaker = "SPEAKER_ID" in graph_inputs(onnx_path)
            limits = voice_limits(repo, folder)
            profile = (
                acoustic_profile(max_batch, speaker, limits.max_ids)
                if stage == "acoustic"
                else vocoder_profile(max_batch, latent_channels(onnx_path), speaker, limits.max_frames)
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


# --- engine cache ---------------------------------------------------------------------
# An engine is valid only for the GPU model and TensorRT version that built it, and only
# for the graph, optimisation profile and precision it was built from: all of them are
# in the key, so a cache can be shared by mixed GPU pools and image versions, and a
# changed graph or profile never reuses a stale engine.

ENGINE_CACHE_FORMAT = 1  # in every key: bump when what a key covers changes
GPU_NAME_ENV = "TRITON_TTS_GPU_NAME"
TENSORRT_VERSION_ENV = "TRITON_TTS_TENSORRT_VERSION"
# trtexec's first line: "&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] # ..."
TRTEXEC_BANNER = re.compile(r"\[TensorRT v(\d+)\](?:\s*\[b(\d+)\])?")


@dataclass(frozen=True)
class BuildTarget:
    """What a serialised engine runs on: the GPU model and the TensorRT that built it."""

    gpu_name: str
    tensorrt_version: str


def onnx_sha256(onnx_path: Path) -> str:
    """Hash of the graph file and of the external weight files its initializers name."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    external = sorted({ExternalDataInfo(t).location for t in graph.initializer if uses_external_data(t)})
    digest = hashlib.sha256()
    for path in [onnx_path, *(onnx_path.parent / name for name in external)]:
        digest.update(f"{path.name}\0".encode())
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def engine_cache_key(onnx_sha256: str, profile: Profile, fp16: bool, target: BuildTarget) -> str:
    fields = {
        "format": ENGINE_CACHE_FORMAT,
        "onnx_sha256": onnx_sha256,
        "profile": {name: [list(shape) for shape in shapes] for name, shapes in profile.shapes.items()},
        "precision": "fp16" if fp16 else "fp32",
        "gpu": target.gpu_name,
        "tensorrt": target.tensorrt_version,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def cached_plan_path(cache_dir: Path, key: str, target: BuildTarget) -> Path:
    """``<cache>/<gpu>/tensorrt-<version>/<key>.plan``: the key alone decides; the folders
    show what each GPU model and TensorRT version left behind, for pruning."""

    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"

    return cache_dir / slug(target.gpu_name) / f"tensorrt-{slug(target.tensorrt_version)}" / f"{key}.plan"


def tensorrt_version_from_banner(text: str) -> str | None:
    """``[TensorRT v100500] [b18]`` -> ``10.5.0+b18`` (TensorRT 8 wrote 8.6.1 as ``v8601``)."""
    match = TRTEXEC_BANNER.search(text)
    if match is None:
        return None
    number = int(match.group(1))
    major, minor = (
        (number // 10000, number // 100 % 100) if number >= 10000 else (number // 1000, number // 100 % 10)
    )
    version = f"{major}.{minor}.{number % 100}"
    return f"{version}+b{match.group(2)}" if match.group(2) else version


def detect_gpu_name(override: str | None = None) -> str | None:
    """The first GPU's model, as nvidia-smi names it (the engine is built on that one)."""
    if override:
        return override.strip()
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],  # noqa: S607 - the tool on PATH, by design
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return names[0] if names else None


def detect_tensorrt_version(override: str | None = None, trtexec: str | None = None) -> str | None:
    """The version of the TensorRT that builds: ``trtexec``'s banner, or the Python package's."""
    if override:
        return override.strip()
    if trtexec:
        try:
            done = subprocess.run(
                [trtexec, "--help"], capture_output=True, text=True, encoding="utf-8", timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return tensorrt_version_from_banner(done.stdout + done.stderr)
    try:
        import tensorrt as trt
    except ImportError:
        return None
    return str(trt.__version__)


def _atomic_copy(source: Path, target: Path) -> None:
    """Readers see the old file or the whole new one, never part of it; concurrent
    writers of the same engine each rename a complete copy into place."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(handle)
    try:
        shutil.copyfile(source, temporary)
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)


def restore_cached_plan(cached: Path, plan: Path) -> bool:
    """Copy a cached engine into place (a hit); False on a miss. The model folder and the
    cache are different volumes (and only the export container mounts the cache): copy."""
    if not cached.is_file():
        return False
    try:
        _atomic_copy(cached, plan)
    except OSError as error:
        log.warning("cached engine %s unreadable (%s): rebuilding", cached, error)
        return False
    return True


def store_cached_plan(plan: Path, cached: Path) -> None:
    """A cache that cannot be written costs the next start a rebuild, never this one."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        _atomic_copy(plan, cached)
    except OSError as error:
        log.warning("engine not stored in the cache at %s (%s): the next start rebuilds it", cached, error)


def build_cached(
    onnx_path: Path,
    plan: Path,
    profile: Profile,
    fp16: bool,
    cache_dir: Path,
    target: BuildTarget,
    build: Callable[[], object],
) -> bool:
    """Put the engine for ``onnx_path`` at ``plan``: from the cache when it holds one for
    this graph, profile, precision, GPU model and TensorRT version (True), else ``build()``
    it and store it (False)."""
    cached = cached_plan_path(
        cache_dir, engine_cache_key(onnx_sha256(onnx_path), profile, fp16, target), target
    )
    if restore_cached_plan(cached, plan):
        log.info("%s: engine reused from %s", plan, cached)
        return True
    build()
    store_cached_plan(plan, cached)
    log.info("%s: engine built and stored as %s", plan, cached)
    return False


def build_plan(onnx_path: Path, plan: Path, profile: Profile, fp16: bool, trtexec: str | None) -> None:
    if trtexec:
        subprocess.run([trtexec, *trtexec_command(onnx_path, plan, profile, fp16)[1:]], check=True)
    else:
        build_engine(onnx_path, plan, profile, fp16)


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
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="reuse engines stored here and store the ones built (keyed by GPU model, TensorRT "
        "version, graph, profile and precision)",
    )
    parser.add_argument(
        "--gpu-name",
        default=os.environ.get(GPU_NAME_ENV),
        help=f"GPU model in the cache key (env {GPU_NAME_ENV}; unset: nvidia-smi's name of the first GPU)",
    )
    parser.add_argument(
        "--tensorrt-version",
        default=os.environ.get(TENSORRT_VERSION_ENV),
        help=f"TensorRT version in the cache key (env {TENSORRT_VERSION_ENV}; unset: from the builder)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    target = None
    if args.cache_dir and not args.print_trtexec:
        gpu = detect_gpu_name(args.gpu_name)
        version = detect_tensorrt_version(args.tensorrt_version, args.trtexec)
        if gpu and version:
            target = BuildTarget(gpu, version)
        else:  # a key without them could hand out an engine built for another GPU or TensorRT
            log.warning(
                "engine cache %s not used: GPU model (%s) or TensorRT version (%s) unknown; "
                "set --gpu-name / --tensorrt-version",
                args.cache_dir, gpu, version,
            )  # fmt: skip
    for onnx_path, stage, profile in engines(args.repo, args.max_batch_size):
        plan = onnx_path.with_name("model.plan")
        fp16 = stage in args.fp16
        if args.print_trtexec:
            print(" ".join(trtexec_command(onnx_path, plan, profile, fp16)))
            continue
        build = functools.partial(build_plan, onnx_path, plan, profile, fp16, args.trtexec)
        if target is not None:
            build_cached(onnx_path, plan, profile, fp16, args.cache_dir, target, build)
        else:
            build()


if __name__ == "__main__":
    main()
