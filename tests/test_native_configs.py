"""The GPU variants (native onnxruntime / TensorRT backends) proven against their graphs, on CPU.

No GPU and no native backend here, so this file plays their part with the graphs a built
repository serves, for every voice in it:

- the ``gpu`` and ``tensorrt`` configs of each native stage are checked against the ONNX
  graph the way those backends check them when they load a model (names, types, the batch
  axis, ``reshape``, fixed and variable dims), and the TensorRT profile against the graph;
- requests of different lengths go through the ensemble as Triton would run it under
  ``--model-config-name=gpu``: the real preprocess and postprocess model code, and for each
  native stage Triton's dynamic batcher (a batch takes queued requests in order while
  their shapes equal its own, up to max_batch_size), the inputs stacked on a batch axis
  and reshaped as the config says, and the graph run by onnxruntime on that batch. Every
  request's audio must equal its own run alone, and the CPU variant's.

The Coqui voices are tiny random-weight models exported by the project's own code (seconds
each); without the ``export`` extra (torch, coqui-tts) only the Piper voice is covered.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from google.protobuf import json_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from testkit.python_backend import Request, python_backend_stand_in
from tests.helpers import DETERMINISTIC, dims_compatible, export_random_coqui_voice
from triton_tts.build.model_configs import GPU_VARIANTS, VOICE_SEPARATOR, parse
from triton_tts.client.voices import VoiceInfo
from triton_tts.contract.voice import Voice
from triton_tts.export import tensorrt
from triton_tts.ops.repository import build_repository
from triton_tts.runtime.batching import FRAME_MULTIPLE
from triton_tts.runtime.onnx_session import cpu_session
from triton_tts.runtime.tacotron import PAD_PARAMETER

pytestmark = pytest.mark.server  # its own servers (module fixtures)

log = logging.getLogger(__name__)

Tensors = dict[str, npt.NDArray[Any]]  # one request's tensors, each with its batch axis of 1

# name -> (Coqui family, vocoder, speakers): a multi-speaker VITS (speaker-conditioned
# decoder, 32-channel latent), mel voices with HiFi-GAN and MelGAN (80 mels, edge frames,
# reflection padding), and Tacotron2, whose acoustic loop stays a Python model on GPU nodes.
COQUI_VOICES = {
    "coqui-vctk": ("vits", None, 3),
    "coqui-fastpitch": ("fast_pitch", "hifigan", 1),
    "coqui-glowtts": ("glow_tts", "melgan", 1),
    "coqui-tacotron2": ("tacotron2", "hifigan", 1),
}
VOICES = ("joe", *COQUI_VOICES)

# In queue order. The short ones first share a length bucket, so the batcher joins
# different lengths; the rest spread over other buckets and latent widths.
TEXTS = [
    "Yes.",
    "Okay.",
    "Thanks!",
    "Turn right.",
    "See you soon.",
    "Good morning, how are you?",
    "Music, books and films are all on the second shelf.",
    "The meeting has moved to the third floor conference room.",
    "Our store opens at nine and closes at six on weekdays.",
]
FASTER = 2  # this request asks for another speed: its own SCALES row in a shared batch
# Each request's audio from a batch vs alone, and vs the cpu variant. Padding-safe vocoders
# (Coqui exports mask every convolution to the item's length) leave float rounding only
# (measured <= 6e-8). Piper's decoder is not masked: its last frames see the zero padding
# up to the batch's 64-frame multiple rather than the end of the latent (measured 3e-5
# between batch widths, 1.1e-4 against the unpadded cpu run, with peaks of 0.66).
PADDING_SAFE_ATOL = 1e-6
UNMASKED_ATOL = 2e-4

NATIVE_BACKENDS = {"gpu": ("onnxruntime", "model.onnx"), "tensorrt": ("tensorrt", "model.plan")}
ONNX_TO_TRITON: dict[int, int] = {
    TensorProto.FLOAT: mc.TYPE_FP32,
    TensorProto.FLOAT16: mc.TYPE_FP16,
    TensorProto.DOUBLE: mc.TYPE_FP64,
    TensorProto.INT64: mc.TYPE_INT64,
    TensorProto.INT32: mc.TYPE_INT32,
    TensorProto.INT8: mc.TYPE_INT8,
    TensorProto.UINT8: mc.TYPE_UINT8,
    TensorProto.BOOL: mc.TYPE_BOOL,
}
NUMPY_TYPES: dict[int, type[Any]] = {
    mc.TYPE_FP32: np.float32,
    mc.TYPE_FP16: np.float16,
    mc.TYPE_FP64: np.float64,
    mc.TYPE_INT64: np.int64,
    mc.TYPE_INT32: np.int32,
    mc.TYPE_INT8: np.int8,
    mc.TYPE_UINT8: np.uint8,
    mc.TYPE_BOOL: np.bool_,
}


# --- the built repository -------------------------------------------------------------


def build_coqui_voices(root: Path) -> list[Path]:
    folders = []
    for name, (family, vocoder_family, speakers) in COQUI_VOICES.items():
        folder = root / "voices" / name
        export_random_coqui_voice(root / name, family, vocoder_family, speakers, folder)
        folders.append(folder)
    return folders


@pytest.fixture(scope="module")
def repository(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folders = [voice_dir]
    if importlib.util.find_spec("TTS") is not None:
        folders += build_coqui_voices(tmp_path_factory.mktemp("coqui"))
    return build_repository(folders, tmp_path_factory.mktemp("native") / "model_repository")


def load_config(repo: Path, model: str, variant: str) -> mc.ModelConfig:
    """What Triton loads with ``--model-config-name=<variant>``: the named config, or the
    default config where the model has none."""
    named = repo / model / "configs" / f"{variant}.pbtxt"
    path = named if named.exists() else repo / model / "config.pbtxt"
    return parse(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class VoiceUnderTest:
    name: str
    ensemble: mc.ModelConfig  # the voice's tts_chunk
    models: dict[str, str]  # stage -> model name in the repository
    voice: Voice


@pytest.fixture(params=VOICES)
def served(request: pytest.FixtureRequest, repository: Path) -> VoiceUnderTest:
    listed = load_config(repository, "tts", "cpu").parameters["voices"].string_value
    voices = {v.name: v.model for v in VoiceInfo.list_from_json(listed)}
    if request.param not in voices:
        pytest.skip("the Coqui test voices need the export extra (torch, coqui-tts)")
    ensemble = load_config(repository, voices[request.param], "cpu")
    models = {s.model_name.split(VOICE_SEPARATOR)[0]: s.model_name for s in ensemble.ensemble_scheduling.step}
    voice = Voice.load(repository / models["preprocess"] / "1")
    return VoiceUnderTest(request.param, ensemble, models, voice)


# --- 1. the configs against the graphs ---------------------------------------------------


def graph_tensors(path: Path) -> tuple[dict[str, tuple[int, list[int]]], dict[str, tuple[int, list[int]]]]:
    """(inputs, outputs): name -> (ONNX element type, dims with -1 where not fixed)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}

    def described(value: onnx.ValueInfoProto) -> tuple[int, list[int]]:
        tensor = value.type.tensor_type
        return tensor.elem_type, [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]

    inputs = {v.name: described(v) for v in graph.input if v.name not in weights}
    return inputs, {v.name: described(v) for v in graph.output}


def backend_shape(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    """The shape a batching backend compares with the graph: the batch axis, then the
    config's ``reshape`` where it has one (``dims: [1], reshape: []`` is a [batch] tensor),
    else its dims."""
    return [-1, *(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)]


def check_against_graph(
    tensor: mc.ModelInput | mc.ModelOutput, graph: tuple[int, list[int]], variant: str, output: bool
) -> None:
    """The checks the native backends make at load time (onnxruntime_backend
    ValidateInputs/ValidateOutputs; tensorrt_backend CompareDimsSupported)."""
    elem_type, dims = graph
    what = f"{'output' if output else 'input'} {tensor.name}"
    assert ONNX_TO_TRITON.get(elem_type) == tensor.data_type, f"{what}: graph type {elem_type}"
    shape = backend_shape(tensor)
    assert len(shape) == len(dims), f"{what}: config {shape} vs graph {dims}"
    assert dims[0] == -1, f"{what}: graph {dims} has no batch axis to batch on"
    if variant == "gpu":  # onnxruntime: a dim the graph fixes must be in the config; outputs exactly
        agree = shape == dims if output else all(d in (-1, s) for d, s in zip(dims, shape, strict=True))
    else:  # tensorrt: fixed dims agree where both sides fix them
        agree = dims_compatible(shape, dims)
    assert agree, f"{what}: config {shape} does not match graph {dims} ({variant})"


@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_native_configs_match_their_graphs(repository: Path, served: VoiceUnderTest, variant: str) -> None:
    consumed = {s.model_name: set(s.output_map) for s in served.ensemble.ensemble_scheduling.step}
    engines = {
        path.parent.parent.name: profile
        for path, _, profile in tensorrt.engines(repository, served.ensemble.max_batch_size)
    }
    backend, filename = NATIVE_BACKENDS[variant]
    for stage in ("acoustic", "vocoder"):
        model = served.models[stage]
        graph_file = repository / model / "1" / "model.onnx"
        # Every stage has its named config: Triton's fallback to config.pbtxt is no choice.
        assert (repository / model / "configs" / f"{variant}.pbtxt").exists(), model
        config = load_config(repository, model, variant)
        if config.backend == "python":
            # Only a loop in Python (Tacotron2's acoustic) has no native variant: no one graph.
            # It pads LATENT as the graphs do, for the native vocoder after it.
            assert stage == "acoustic" and not graph_file.exists() and model not in engines
            assert config.parameters[PAD_PARAMETER].string_value == str(FRAME_MULTIPLE)
            continue
        assert (config.backend, config.default_model_filename) == (backend, filename)
        assert config.instance_group and all(
            g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group
        )
        assert config.max_batch_size == served.ensemble.max_batch_size > 0
        preferred = list(config.dynamic_batching.preferred_batch_size)
        assert all(0 < size <= config.max_batch_size for size in preferred), preferred
        # Native backends take neither (onnxruntime refuses optional inputs when batching).
        assert not any(t.optional or t.allow_ragged_batch for t in config.input)

        inputs, outputs = graph_tensors(graph_file)
        assert sorted(t.name for t in config.input) == sorted(inputs), model  # every graph input fed
        assert consumed[model] <= {t.name for t in config.output} <= set(outputs), model
        for tensor in config.input:
            check_against_graph(tensor, inputs[tensor.name], variant, output=False)
        for tensor in config.output:
            check_against_graph(tensor, outputs[tensor.name], variant, output=True)
        declared = {t.name: t for t in config.input}
        for sample in config.model_warmup:  # warm-up requests are requests the config accepts
            for name, warm in sample.inputs.items():
                assert warm.data_type == declared[name].data_type
                assert dims_compatible(list(warm.dims), list(declared[name].dims)), (model, name)

        # The engine builder profiles exactly the graph's inputs, at their ranks, and keeps
        # the dims the graph fixes (the numeric limits are the builder's own business).
        profile = engines[model]
        assert sorted(profile.shapes) == sorted(inputs), model
        for name, shapes in profile.shapes.items():
            for shape in shapes:
                assert dims_compatible(list(shape[1:]), inputs[name][1][1:]), (model, name, shape)
    # Padded latents are never narrower than the vocoder engine's profile allows.
    lowest = engines[served.models["vocoder"]].shapes["LATENT"][0][-1]
    assert lowest <= FRAME_MULTIPLE, (served.models["vocoder"], lowest)
    # The stage after a native acoustic model can batch only what arrives in equal shapes.
    acoustic, vocoder = (load_config(repository, served.models[s], variant) for s in ("acoustic", "vocoder"))
    produced = {t.name: list(t.dims) for t in acoustic.output}
    for tensor in vocoder.input:
        if tensor.name in produced:
            assert dims_compatible(produced[tensor.name], list(tensor.dims)), tensor.name


# --- 2. the native batcher's part ----------------------------------------------------------


class Stage(Protocol):
    batches: list[list[int]]

    def execute(self, requests: list[Tensors]) -> list[Tensors]: ...


class PythonStage:
    """A Python-backend model of the built repository: its own model.py, in this process."""

    def __init__(self, repo: Path, model: str, config: mc.ModelConfig) -> None:
        self.batches: list[list[int]] = []
        spec = importlib.util.spec_from_file_location(f"native_test_{model}", repo / model / "1" / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        with python_backend_stand_in():
            spec.loader.exec_module(module)
            self.model = module.TritonPythonModel()
            self.model.initialize(
                {
                    "model_config": json.dumps(
                        json_format.MessageToDict(config, preserving_proto_field_name=True)
                    ),
                    "model_repository": str(repo / model),
                    "model_version": "1",
                    "model_name": model,
                    "model_instance_kind": "CPU",
                }
            )

    def execute(self, requests: list[Tensors]) -> list[Tensors]:
        """One execution with every request (Python models take ragged batches)."""
        self.batches.append(list(range(len(requests))))
        wrapped = [Request(r) for r in requests]
        returned = self.model.execute(wrapped)
        if returned is None:  # answered through the response senders
            assert all(len(r.sender.responses) == 1 for r in wrapped)
            returned = [r.sender.responses[0] for r in wrapped]
        for response in returned:
            assert not response.has_error(), str(response.error())
        return [response.tensors for response in returned]


def dynamic_batches(config: mc.ModelConfig, requests: Sequence[Tensors]) -> list[list[int]]:
    """Triton's dynamic batcher on a queue (core: DynamicBatchScheduler::GetDynamicBatch):
    the next request joins the pending batch if every input has the batch's shape and
    max_batch_size is not reached; the first one that does not starts the next batch."""
    batches: list[list[int]] = []
    shapes: dict[str, tuple[int, ...]] = {}
    for index, request in enumerate(requests):
        mine = {t.name: request[t.name].shape for t in config.input}
        if batches and mine == shapes and len(batches[-1]) < config.max_batch_size:
            batches[-1].append(index)
        else:
            batches.append([index])
            shapes = mine
    return batches


class NativeStage:
    """A model under a native config: the dynamic batcher, then the graph on each batch,
    with the tensors laid out as the config tells the backend."""

    def __init__(self, repo: Path, model: str, config: mc.ModelConfig) -> None:
        self.config = config
        self.session = cpu_session(repo / model / "1" / "model.onnx", 1)
        self.batches: list[list[int]] = []

    def execute(self, requests: list[Tensors]) -> list[Tensors]:
        results: list[Tensors] = [{} for _ in requests]
        for batch in dynamic_batches(self.config, requests):
            self.batches.append(batch)
            for index, result in zip(batch, self.run([requests[i] for i in batch]), strict=True):
                results[index] = result
        return results

    def run(self, batch: list[Tensors]) -> list[Tensors]:
        feeds = {}
        for tensor in self.config.input:
            rows = [request[tensor.name] for request in batch]
            for sent in rows:  # Triton checks each request against the config
                assert sent.shape[0] == 1 and dims_compatible(sent.shape[1:], list(tensor.dims)), (
                    f"{self.config.name}.{tensor.name}: sent {sent.shape}, dims {list(tensor.dims)}"
                )
            stacked = np.concatenate(rows).astype(NUMPY_TYPES[tensor.data_type], copy=False)
            if tensor.HasField("reshape"):
                stacked = stacked.reshape(len(batch), *tensor.reshape.shape)
            feeds[tensor.name] = stacked
        names = [t.name for t in self.config.output]
        values = self.session.run(names, feeds)
        results: list[Tensors] = [{} for _ in batch]
        for tensor, value in zip(self.config.output, values, strict=True):
            assert value.shape[0] == len(batch) and value.dtype == NUMPY_TYPES[tensor.data_type]
            for row, result in enumerate(results):
                item = value[row : row + 1]
                if tensor.HasField("reshape"):  # the graph's shape -> the config's dims
                    item = item.reshape(1, *tensor.dims)
                assert dims_compatible(item.shape[1:], list(tensor.dims)), (tensor.name, item.shape)
                result[tensor.name] = item
        return results


@dataclass
class Pipeline:
    """A voice's ``tts_chunk`` ensemble, step by step, under one variant's configs."""

    ensemble: mc.ModelConfig
    stages: dict[str, Stage] = field(default_factory=dict)

    @classmethod
    def load(cls, repo: Path, served: VoiceUnderTest, variant: str) -> Pipeline:
        pipeline = cls(served.ensemble)
        for step in served.ensemble.ensemble_scheduling.step:
            config = load_config(repo, step.model_name, variant)
            kind = PythonStage if config.backend == "python" else NativeStage
            pipeline.stages[step.model_name] = kind(repo, step.model_name, config)
        return pipeline

    def run(self, requests: list[Tensors]) -> list[Tensors]:
        """Ensemble tensors per request. Each step's requests reach its model in the order
        the previous step answered them."""
        tensors = [dict(request) for request in requests]
        for step in self.ensemble.ensemble_scheduling.step:
            inputs = [
                {name: t[source] for name, source in step.input_map.items() if source in t} for t in tensors
            ]
            for t, outputs in zip(tensors, self.stages[step.model_name].execute(inputs), strict=True):
                for name, target in step.output_map.items():
                    t[target] = outputs[name]
        return tensors

    def batches(self, model: str) -> list[list[int]]:
        return self.stages[model].batches


def sample_requests(voice: Voice) -> list[Tensors]:
    requests = []
    for index, text in enumerate(TEXTS):
        request: Tensors = {"TEXT": np.array([[text.encode("utf-8")]], dtype=np.object_)}
        for name, value in DETERMINISTIC.items():
            request[name] = np.array([[value]], dtype=np.float32)
        if voice.num_speakers > 1:  # neighbours in one batch with different speakers
            request["SPEAKER_ID"] = np.array([[index % voice.num_speakers]], dtype=np.int64)
        if index == FASTER and voice.acoustic_kind == "single":  # Tacotron2 has no speed
            request["SPEED"] = np.array([[1.25]], dtype=np.float32)
        requests.append(request)
    return requests


def frames(tensors: Tensors) -> int:
    return int(tensors["frame_count"].reshape(-1)[0])


def test_native_batches_equal_solo_runs(repository: Path, served: VoiceUnderTest) -> None:
    native = Pipeline.load(repository, served, "gpu")
    requests = sample_requests(served.voice)
    batched = native.run(requests)
    acoustic, vocoder = served.models["acoustic"], served.models["vocoder"]
    # What lets the vocoder batch: latents padded to a frame multiple, so one acoustic batch
    # goes on as one vocoder batch, and acoustic batches of the same padded width join.
    widths = [t["latent"].shape[-1] for t in batched]
    assert all(width % FRAME_MULTIPLE == 0 for width in widths), widths
    # Worth something only if the batchers really joined different lengths.
    lengths = [int(t["phoneme_length"].reshape(-1)[0]) for t in batched]
    if isinstance(native.stages[acoustic], NativeStage):
        joined = [[lengths[i] for i in b] for b in native.batches(acoustic)]
        assert any(len(set(b)) > 1 for b in joined), joined
    joined = [[frames(batched[i]) for i in b] for b in native.batches(vocoder)]
    assert any(len(set(b)) > 1 for b in joined), joined
    # postprocess cut padded waveforms to the item's own frames
    assert any(t["waveform"].shape[-1] > t["AUDIO"].shape[-1] for t in batched)

    cpu = Pipeline.load(repository, served, "cpu").run(requests)
    hop = served.voice.hop_length
    padding_safe = (repository / vocoder / "1" / "model_unpadded.onnx").exists()
    atol = PADDING_SAFE_ATOL if padding_safe else UNMASKED_ATOL
    for text, together, request_tensors, reference in zip(TEXTS, batched, requests, cpu, strict=True):
        alone = native.run([request_tensors])[0]
        assert frames(together) == frames(alone) == frames(reference), text
        audio = together["AUDIO"]
        assert audio.shape == alone["AUDIO"].shape == reference["AUDIO"].shape == (1, frames(alone) * hop)
        np.testing.assert_allclose(audio, alone["AUDIO"], rtol=0, atol=atol, err_msg=text)
        np.testing.assert_allclose(audio, reference["AUDIO"], rtol=0, atol=atol, err_msg=text)
        assert int(together["SAMPLE_RATE"].reshape(-1)[0]) == served.voice.sample_rate
