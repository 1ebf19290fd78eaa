"""Small, named ONNX graph edits shared by the voice exports."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper


def rename_input(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    for value in graph.input:
        if value.name == old:
            value.name = new


def set_dims(value: onnx.ValueInfoProto, dims: list[str | int]) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        else:
            dim.dim_param = d


def expose_output(
    graph: onnx.GraphProto, internal: str, public: str, dtype: int, dims: list[str | int]
) -> None:
    """Publish an internal tensor under a public name (Identity keeps the graph intact)."""
    graph.node.append(helper.make_node("Identity", [internal], [public], name=f"expose_{public}"))
    _replace_output(graph, internal, public, dtype, dims)


def expose_durations(graph: onnx.GraphProto, internal: str) -> None:
    """Publish a [batch, 1, ids] float tensor of frames per id (VITS' ``w_ceil``) as
    ``DURATIONS`` [batch, ids]: what word timestamps are made of (triton_tts/text/words.py).
    Padded ids have 0 frames."""
    axes = "expose_DURATIONS_axes"
    graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [1]))
    graph.node.append(helper.make_node("Squeeze", [internal, axes], ["DURATIONS"], name="expose_DURATIONS"))
    _replace_output(graph, internal, "DURATIONS", TensorProto.FLOAT, ["batch", "phonemes"])


def expose_padded_output(
    graph: onnx.GraphProto,
    internal: str,
    public: str,
    multiple: int,
    dims: list[str | int],
) -> None:
    """Publish a rank-3 float tensor with its last axis zero-padded up to a multiple.

    Native backends batch only equal shapes; rounding the frame axis up to a multiple
    turns "every utterance has its own length" into a few shared lengths.
    """
    p = f"{public}_pad"
    consts = {
        f"{p}_multiple": helper.make_tensor(f"{p}_multiple", TensorProto.INT64, [1], [multiple]),
        f"{p}_start": helper.make_tensor(f"{p}_start", TensorProto.INT64, [1], [2]),
        f"{p}_end": helper.make_tensor(f"{p}_end", TensorProto.INT64, [1], [3]),
        f"{p}_zeros": helper.make_tensor(f"{p}_zeros", TensorProto.INT64, [5], [0] * 5),
    }
    graph.initializer.extend(consts.values())
    graph.node.extend(
        [
            helper.make_node("Shape", [internal], [f"{p}_shape"]),
            helper.make_node("Slice", [f"{p}_shape", f"{p}_start", f"{p}_end"], [f"{p}_length"]),
            helper.make_node("Mod", [f"{p}_length", f"{p}_multiple"], [f"{p}_rem"]),
            helper.make_node("Sub", [f"{p}_multiple", f"{p}_rem"], [f"{p}_short"]),
            helper.make_node("Mod", [f"{p}_short", f"{p}_multiple"], [f"{p}_amount"]),
            helper.make_node("Concat", [f"{p}_zeros", f"{p}_amount"], [f"{p}_pads"], axis=0),
            helper.make_node("Pad", [internal, f"{p}_pads"], [public], mode="constant"),
        ]
    )
    _replace_output(graph, internal, public, TensorProto.FLOAT, dims)


def cap_frames(model: onnx.ModelProto, max_frames: int) -> None:
    """Cut the acoustic graph's LATENT to at most ``max_frames`` frames and clamp
    FRAME_COUNT to match: the hard guard that no chunk passes the vocoder's TensorRT
    profile (triton_tts/runtime/limits.py). Preprocess refuses chunks predicted past the budget
    and ``tts`` splits them, so only a freak draw of the duration noise (NOISE_W > 1 at
    SPEED 0.25) ever reaches it; it then loses the chunk's tail instead of failing its
    whole batch on the engine."""
    graph = model.graph
    if any(node.name == "cap_LATENT" for node in graph.node):
        return
    for public in ("LATENT", "FRAME_COUNT"):
        for node in graph.node:
            node.output[:] = [f"{public}_uncapped" if o == public else o for o in node.output]
            node.input[:] = [f"{public}_uncapped" if i == public else i for i in node.input]
    graph.initializer.extend(
        [
            helper.make_tensor("cap_zero", TensorProto.INT64, [1], [0]),
            helper.make_tensor("cap_frames", TensorProto.INT64, [1], [max_frames]),
            helper.make_tensor("cap_axis", TensorProto.INT64, [1], [2]),
            helper.make_tensor("cap_count", TensorProto.INT64, [], [max_frames]),
        ]
    )
    graph.node.extend(
        [
            helper.make_node(
                "Slice",
                ["LATENT_uncapped", "cap_zero", "cap_frames", "cap_axis"],
                ["LATENT"],
                name="cap_LATENT",
            ),
            helper.make_node(
                "Min", ["FRAME_COUNT_uncapped", "cap_count"], ["FRAME_COUNT"], name="cap_FRAME_COUNT"
            ),
        ]
    )


def _replace_output(
    graph: onnx.GraphProto, internal: str, public: str, dtype: int, dims: list[str | int]
) -> None:
    for i, value in enumerate(graph.output):
        if value.name == internal:
            graph.output[i].CopyFrom(helper.make_tensor_value_info(public, dtype, dims))
            return
    raise KeyError(f"{internal} is not an output of the graph")


def runtime_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs that are not weights (old exporters list initializers as inputs)."""
    weights = {t.name for t in model.graph.initializer}
    return {i.name for i in model.graph.input if i.name not in weights}
