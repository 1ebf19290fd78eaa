"""Every config variant (CPU, GPU ONNX Runtime, TensorRT) is valid and consistent.

The GPU variants cannot load here (no GPU, no native ONNX Runtime/TensorRT backend in
this Triton build), so their correctness is checked by construction: each parses as a
Triton ModelConfig, and every tensor the ensemble wires has the same name, type and
shape on both ends, in every variant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tests.helpers import dims_compatible
from triton_tts.build import model_configs
from triton_tts.build.model_configs import GPU_VARIANTS, BuildOptions, VoiceModels, parse
from triton_tts.contract.paths import repository_template

VARIANTS = ("cpu", *GPU_VARIANTS)


def load_variant(variant: str, rendered: dict[str, str]) -> dict[str, mc.ModelConfig]:
    models = {}
    for model in ("preprocess", "acoustic", "vocoder", "postprocess", "tts_chunk", "tts", "tts_stream"):
        named = f"{model}/configs/{variant}.pbtxt"
        models[model] = parse(rendered.get(named) or rendered[f"{model}/config.pbtxt"])
    return models


def test_committed_configs_are_the_renderer_output() -> None:
    for relative, text in model_configs.render().items():
        committed = (repository_template() / relative).read_text(encoding="utf-8")
        assert committed == text, f"{relative} drifted: run triton-tts build-repo"


@pytest.mark.parametrize("variant", VARIANTS)
def test_ensemble_wiring_matches_every_model(variant: str) -> None:
    models = load_variant(variant, model_configs.render())
    ensemble = models["tts_chunk"]
    produced: dict[str, tuple[int, list[int]]] = {t.name: (t.data_type, list(t.dims)) for t in ensemble.input}
    for step in ensemble.ensemble_scheduling.step:
        model = models[step.model_name]
        assert model.max_batch_size == ensemble.max_batch_size
        inputs = {t.name: t for t in model.input}
        assert set(step.input_map) <= set(inputs), step.model_name
        for required in (name for name, t in inputs.items() if not t.optional):
            assert required in step.input_map, f"{step.model_name}.{required} not wired"
        for model_input, tensor in step.input_map.items():
            dtype, dims = produced[tensor]
            assert inputs[model_input].data_type == dtype, (step.model_name, model_input)
            # Triton's rule: same rank, equal where both are fixed (-1 feeds a fixed dim)
            assert dims_compatible(list(inputs[model_input].dims), dims), (step.model_name, model_input)
        outputs = {t.name: t for t in model.output}
        for model_output, tensor in step.output_map.items():
            produced[tensor] = (outputs[model_output].data_type, list(outputs[model_output].dims))
    for out in ensemble.output:
        assert produced[out.name] == (out.data_type, list(out.dims))


@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_variants_run_natively_on_the_gpu(variant: str) -> None:
    models = load_variant(variant, model_configs.render())
    for stage in ("acoustic", "vocoder"):
        config = models[stage]
        assert config.backend == {"gpu": "onnxruntime", "tensorrt": "tensorrt"}[variant]
        assert config.default_model_filename == ("model.plan" if variant == "tensorrt" else "model.onnx")
        assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)
        assert not any(t.allow_ragged_batch for t in config.input)  # native: equal shapes only
        assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
        assert config.model_warmup, "GPU models must warm up before the server is ready"
    # espeak-ng and trimming stay on CPU in every variant
    for stage in ("preprocess", "postprocess"):
        assert all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in models[stage].instance_group)


def test_long_text_models() -> None:
    models = load_variant("cpu", model_configs.render())
    assert models["tts_stream"].model_transaction_policy.decoupled
    assert not models["tts"].model_transaction_policy.decoupled
    assert [t.name for t in models["tts_stream"].output] == [
        "AUDIO",
        "SAMPLE_RATE",
        "WORDS",
        "WORD_TIMES",
        "CHUNK_INDEX",
        "IS_LAST",
    ]
    for name in ("tts", "tts_stream"):
        # the chunk's inputs, TEXT_FORMAT (tts and tts_stream read SSML, their chunks are
        # text), LEXICON (the request's own pronunciations, marked in the chunks' text), and
        # what they pass on to an XTTS voice's model
        xtts = ["LANGUAGE", "REFERENCE_AUDIO", "REFERENCE_SAMPLE_RATE", "TEMPERATURE", "SEED"]
        chunk = [t.name for t in models["tts_chunk"].input]
        assert [t.name for t in models[name].input] == [*chunk, "TEXT_FORMAT", "LEXICON", *xtts]
        assert set(xtts) <= {t.name for t in model_configs.xtts("xtts").input}
        voices = json.loads(models[name].parameters["voices"].string_value)
        assert [v["name"] for v in voices] == ["joe"] and voices[0]["model"] == "tts_chunk"


def test_build_options_reach_the_configs(tmp_path: Path) -> None:
    options = BuildOptions(
        vocoder_instances=3, vocoder_threads="1", max_batch_size=8, voices=(VoiceModels(latent_channels=80),)
    )
    model_configs.write(tmp_path, options)
    vocoder = parse((tmp_path / "vocoder/config.pbtxt").read_text(encoding="utf-8"))
    assert vocoder.instance_group[0].count == 3
    assert vocoder.parameters["intra_op_threads"].string_value == "1"
    assert vocoder.max_batch_size == 8
    assert list(vocoder.model_warmup[0].inputs["LATENT"].dims) == [80, model_configs.WARMUP_FRAMES]
    tts = parse((tmp_path / "tts/config.pbtxt").read_text(encoding="utf-8"))
    assert tts.max_batch_size == 8
