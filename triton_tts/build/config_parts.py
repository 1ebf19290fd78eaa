"""The parts every rendered config is made of: a model config with its batch bound, its
tensors, instance groups, string parameters, the dynamic batcher's priority levels and
queue policy, and warm-up samples read from files. :mod:`triton_tts.build.model_configs`
puts them together per model."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from triton_tts.build.build_options import BuildOptions
from triton_tts.runtime.priorities import DEFAULT_PRIORITY


def add_tensor(
    container: object,
    name: str,
    dtype: int,
    dims: list[int],
    *,
    optional: bool = False,
    ragged: bool = False,
    reshape: list[int] | None = None,
) -> None:
    t = container.add()  # type: ignore[attr-defined]
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    if optional:
        t.optional = True
    if ragged:
        t.allow_ragged_batch = True
    if reshape is not None:
        t.reshape.SetInParent()
        t.reshape.shape.extend(reshape)


def new_config(name: str, opts: BuildOptions, backend: str = "python") -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend=backend, max_batch_size=opts.max_batch_size)
    return config


def add_instances(config: mc.ModelConfig, count: int, gpu: bool) -> None:
    group = config.instance_group.add()
    group.count = count
    group.kind = mc.ModelInstanceGroup.KIND_GPU if gpu else mc.ModelInstanceGroup.KIND_CPU


def set_parameters(config: mc.ModelConfig, **values: str) -> None:
    for key, value in values.items():
        config.parameters[key].string_value = value


# Priority levels of the stages' dynamic batchers: triton_tts/runtime/priorities.py says why.


def set_priorities(config: mc.ModelConfig) -> None:
    """Every level; Triton bounds each level's queue by the queue policy on its own."""
    config.dynamic_batching.priority_levels = DEFAULT_PRIORITY
    config.dynamic_batching.default_priority_level = DEFAULT_PRIORITY


def set_queue_policy(config: mc.ModelConfig, max_queue_size: int, timeout_us: int = 0) -> None:
    """Refuse at once (UNAVAILABLE: HTTP 503, gRPC UNAVAILABLE) a request that finds
    ``max_queue_size`` waiting (0: no bound), and one still queued after ``timeout_us``
    (0: never; else a client's own shorter timeout applies)."""
    policy = config.dynamic_batching.default_queue_policy
    policy.max_queue_size = max_queue_size
    policy.timeout_action = mc.ModelQueuePolicy.REJECT
    policy.default_timeout_microseconds = timeout_us
    policy.allow_timeout_override = timeout_us > 0


def add_warmup_file(config: mc.ModelConfig, sample: str, inputs: dict[str, tuple[int, list[int]]]) -> None:
    warmup = config.model_warmup.add()
    warmup.name = sample
    warmup.batch_size = 1
    for name, (dtype, dims) in inputs.items():
        warmup.inputs[name].data_type = dtype
        warmup.inputs[name].dims.extend(dims)
        warmup.inputs[name].input_data_file = name
