"""Vocoder graph rewrites that make the INT8 CPU vocoder fast, without changing its output.

Profiling the static INT8 vocoder on a CPU (onnxruntime 1.32, 2 cores) showed its integer
convolutions were a small part of its time (docs/performance.md, "INT8 vocoder"). The
rest was layout and precision plumbing:

- onnxruntime runs ``QLinearConv`` channels-last; around every one it added two
  ``Transpose`` nodes, because the FP32 residual adds in between stay channels-first;
- the upsampling ``ConvTranspose`` layers have no integer kernel, so they ran in FP32
  between a dequantise and a quantise.

Two rewrites remove both:

``polyphase_upsampling`` (FP32, exact to float rounding) turns a 1-D ``ConvTranspose``
(stride s, kernel k) into an ordinary ``Conv`` with ``ceil(k/s)`` taps and ``Co*s``
output channels, one channel block per output phase, followed by interleaving the phases
and cropping the padding. That ``Conv`` quantises like any other.

``channels_last`` (on a QOperator INT8 graph) runs the quantised part of the vocoder in
[batch, time, channels] layout: every ``QLinearConv`` becomes onnxruntime's
channels-last ``QLinearConv``, the element-wise operators between them need no change,
and a ``Transpose`` is left only where a tensor crosses to an operator that needs
channels-first (the FP32 first and last convolutions, masks computed from shapes). In
that layout the phase interleaving of a polyphase upsampler is a plain ``Reshape``: its
output channels are reordered phase-major.

    python -m triton_tts.export.vocoder_graph voices/joe-int8/vocoder.onnx  # layout summary
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
TO_CHANNELS_LAST = [0, 2, 1]  # [N, C, T] -> [N, T, C]; its own inverse
# Operators that do not care about layout when every tensor operand has the same layout
# and constants are scalars (or are permuted along).
ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "LeakyRelu", "Relu", "Tanh", "Sigmoid", "Identity", "Neg", "Abs"}
# Per-tensor (de)quantisation is element-wise too.
QUANTISE = {"QuantizeLinear", "DequantizeLinear"}
# onnxruntime's integer element-wise operators, and where their tensor operands are.
QLINEAR_ELEMENTWISE = {
    "QLinearLeakyRelu": (0,),
    "QLinearSigmoid": (0,),
    "QLinearAdd": (0, 3),
    "QLinearMul": (0, 3),
}
# Ops in the polyphase interleave pattern, in order.
INTERLEAVE = ("Reshape", "Transpose", "Reshape", "Slice")


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _prune_initializers(graph: onnx.GraphProto) -> None:
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)


def _int64(graph: onnx.GraphProto, name: str, values: list[int]) -> str:
    graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
    return name


def _is_plain_transpose_1d(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> bool:
    if node.op_type != "ConvTranspose" or node.input[1] not in weights:
        return False
    if len(weights[node.input[1]].dims) != 3:
        return False
    attrs = _attributes(node)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    return (
        attrs.get("group", 1) == 1
        and list(attrs.get("dilations", [1])) == [1]
        and not any(attrs.get("output_padding", [0]))
        and "output_shape" not in attrs
        and auto_pad in (b"NOTSET", "NOTSET")
    )


def polyphase_upsampling(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every 1-D ``ConvTranspose`` (group 1, no dilation) as ``Conv`` + phase interleave.

    With m = ceil(k/s) and the kernel zero-padded to m*s taps, output sample
    t = q*s + r - p_begin of the transposed convolution is
    sum_i sum_l x[i, q - l] * W[i, o, l*s + r]: a convolution over q with m taps
    (padded m-1 on both sides) whose output channel o*s + r holds phase r.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if not _is_plain_transpose_1d(node, weights):
            nodes.append(node)
            continue
        attrs = _attributes(node)
        w = numpy_helper.to_array(weights[node.input[1]])
        c_in, c_out, k = w.shape
        s = int(attrs["strides"][0])
        p_begin, p_end = list(attrs.get("pads", [0, 0]))
        taps = -(-k // s)
        padded = np.zeros((c_in, c_out, taps * s), dtype=w.dtype)
        padded[:, :, :k] = w
        # kernel[o*s + r, i, u] = W[i, o, (taps-1-u)*s + r]
        kernel = padded.reshape(c_in, c_out, taps, s)[:, :, ::-1, :].transpose(1, 3, 0, 2)
        prefix = f"{node.name or node.output[0]}_polyphase{index}"
        graph.initializer.append(
            numpy_helper.from_array(
                np.ascontiguousarray(kernel.reshape(c_out * s, c_in, taps)), f"{prefix}_w"
            )
        )
        conv_inputs = [node.input[0], f"{prefix}_w"]
        if len(node.input) > 2 and node.input[2]:
            bias = numpy_helper.to_array(weights[node.input[2]])
            graph.initializer.append(numpy_helper.from_array(np.repeat(bias, s), f"{prefix}_b"))
            conv_inputs.append(f"{prefix}_b")
        crop_end = p_end + taps * s - k
        nodes += [
            helper.make_node(
                "Conv",
                conv_inputs,
                [f"{prefix}_phases"],
                name=f"{prefix}_conv",
                kernel_shape=[taps],
                pads=[taps - 1, taps - 1],
                strides=[1],
                dilations=[1],
                group=1,
            ),
            helper.make_node(
                "Reshape",
                [f"{prefix}_phases", _int64(graph, f"{prefix}_split", [0, c_out, s, -1])],
                [f"{prefix}_r1"],
            ),
            helper.make_node("Transpose", [f"{prefix}_r1"], [f"{prefix}_r2"], perm=[0, 1, 3, 2]),
            helper.make_node(
                "Reshape",
                [f"{prefix}_r2", _int64(graph, f"{prefix}_join", [0, c_out, -1])],
                [f"{prefix}_full"],
            ),
            helper.make_node(
                "Slice",
                [
                    f"{prefix}_full",
                    _int64(graph, f"{prefix}_begin", [p_begin]),
                    _int64(graph, f"{prefix}_end", [-crop_end if crop_end else np.iinfo(np.int64).max]),
                    _int64(graph, f"{prefix}_axis", [2]),
                ],
                list(node.output),
            ),
        ]
    del graph.node[:]
    graph.node.extend(nodes)
    _prune_initializers(graph)
    return model


@dataclass
class _Interleave:
    """A polyphase interleave chain found in the graph: Reshape, Transpose, Reshape, Slice."""

    nodes: list[onnx.NodeProto]
    channels: int
    phases: int


def _find_interleaves(graph: onnx.GraphProto, consts: dict[str, npt.NDArray[Any]]) -> dict[str, _Interleave]:
    """Interleave chains keyed by the first Reshape's output name."""
    by_input: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            by_input.setdefault(name, []).append(node)
    found: dict[str, _Interleave] = {}
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] not in consts:
            continue
        split = consts[node.input[1]].tolist()
        if len(split) != 4 or split[0] != 0 or split[3] != -1:
            continue
        chain = [node]
        for op in INTERLEAVE[1:]:
            users = by_input.get(chain[-1].output[0], [])
            if len(users) != 1 or users[0].op_type != op:
                break
            chain.append(users[0])
        if len(chain) != 4:
            continue
        _, transpose, join, crop = chain
        axes = consts.get(crop.input[3]) if len(crop.input) > 3 else None
        if (
            list(_attributes(transpose).get("perm", [])) != [0, 1, 3, 2]
            or join.input[1] not in consts
            or consts[join.input[1]].tolist() != [0, split[1], -1]
            or axes is None
            or axes.tolist() != [2]
            or (len(crop.input) > 4 and crop.input[4])
        ):
            continue
        found[node.output[0]] = _Interleave(chain, split[1], split[2])
    return found


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """Known ranks of the graph's tensors (ONNX shape inference, before any rewrite)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if value.type.tensor_type.HasField("shape"):
            ranks[value.name] = len(value.type.tensor_type.shape.dim)
    return ranks


def _phase_major(channels: int, phases: int) -> npt.NDArray[np.int64]:
    """Channel order r*Co + o, as indices into the order o*s + r."""
    return np.array([o * phases + r for r in range(phases) for o in range(channels)])


def channels_last(model: onnx.ModelProto) -> onnx.ModelProto:
    """Run every ``QLinearConv`` of a rank-3 QOperator graph channels-last, and keep the
    tensors between them channels-last too, so onnxruntime adds no transposes there."""
    return _ChannelsLast(onnx.ModelProto.FromString(model.SerializeToString())).rewrite()


class _ChannelsLast:
    """One pass over the nodes in topological order. A tensor is channels-last when a
    rewritten node made it; a node that needs the other layout gets a transpose of its
    input (one per tensor and direction)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.consts = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        self.rank = _ranks(model)
        self.interleaves = _find_interleaves(self.graph, self.consts)
        self.producers = {out: node for node in self.graph.node for out in node.output}
        self.consumers: Counter[str] = Counter(name for node in self.graph.node for name in node.input)
        self.consumers.update(o.name for o in self.graph.output)
        self.last: set[str] = set()  # tensors that now hold [N, T, C]
        self.copies: dict[tuple[str, bool], str] = {}  # (tensor, to channels-last) -> transposed copy
        self.nodes: list[onnx.NodeProto] = []
        self.emitted: dict[str, onnx.NodeProto] = {}  # original output name -> the node now making it

    def rewrite(self) -> onnx.ModelProto:
        skip: set[str] = set()
        for node in list(self.graph.node):
            if node.output[0] in skip:
                continue
            if self._conv(node) or self._elementwise(node):
                continue
            chain = self.interleaves.get(node.output[0]) if node.op_type == "Reshape" else None
            if chain is not None and node.input[0] in self.last:
                self._interleave(node, chain)
                skip.update(n.output[0] for n in chain.nodes[1:])
                continue
            kept = onnx.NodeProto()
            kept.CopyFrom(node)
            for i, name in enumerate(node.input):
                kept.input[i] = self._layout(name, last=False)
            self.nodes.append(kept)
        for output in self.graph.output:
            if output.name in self.last:  # graph outputs keep their layout
                self._rename(output.name, f"{output.name}__channels_last")
                self.nodes.append(
                    helper.make_node(
                        "Transpose", [f"{output.name}__channels_last"], [output.name], perm=TO_CHANNELS_LAST
                    )
                )
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        del self.graph.value_info[:]  # shapes changed; onnxruntime infers them again
        if not any(o.domain == MS_DOMAIN for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
        _prune_initializers(self.graph)
        return self.model

    def _layout(self, name: str, last: bool) -> str:
        """``name`` in the wanted layout: itself, or a transposed copy."""
        if not name or (name in self.last) == last:
            return name
        if (name, last) not in self.copies:
            copy = f"{name}__{'channels_last' if last else 'channels_first'}"
            self.copies[(name, last)] = copy
            self.nodes.append(helper.make_node("Transpose", [name], [copy], perm=TO_CHANNELS_LAST))
        return self.copies[(name, last)]

    def _emit(self, original: onnx.NodeProto, node: onnx.NodeProto) -> None:
        self.nodes.append(node)
        self.emitted.update((out, node) for out in original.output)
        self.last.update(original.output)

    def _scalar(self, name: str) -> bool:
        return not name or (name in self.consts and self.consts[name].size == 1)

    def _conv(self, node: onnx.NodeProto) -> bool:
        if not (node.op_type == "QLinearConv" and node.domain in ("", "ai.onnx")):
            return False
        weights = self.consts.get(node.input[3])
        if weights is None or weights.ndim != 3:
            return False
        converted = helper.make_node(
            "QLinearConv",
            [self._layout(node.input[0], last=True), *node.input[1:]],
            list(node.output),
            name=node.name,
            domain=MS_DOMAIN,
            channels_last=1,
            **_attributes(node),
        )
        self._emit(node, converted)
        return True

    def _elementwise(self, node: onnx.NodeProto) -> bool:
        """Element-wise nodes fed by a channels-last tensor follow it, when every other
        tensor operand is rank 3 (it is transposed along) and constants are scalars."""
        if node.op_type in ELEMENTWISE:
            tensors, parameters = [n for n in node.input if not self._scalar(n)], []
        elif node.op_type in QUANTISE or (node.op_type in QLINEAR_ELEMENTWISE and node.domain == MS_DOMAIN):
            # tensors, then their scales and zero points
            positions = QLINEAR_ELEMENTWISE.get(node.op_type, (0,))
            tensors = [node.input[i] for i in positions]
            parameters = [n for i, n in enumerate(node.input) if i not in positions]
        else:
            return False
        if not (
            all(self._scalar(n) for n in parameters)
            and any(t in self.last for t in tensors)
            and all(t not in self.consts and (t in self.last or self.rank.get(t) == 3) for t in tensors)
        ):
            return False
        converted = onnx.NodeProto()
        converted.CopyFrom(node)
        for i, name in enumerate(node.input):
            if name in tensors:
                converted.input[i] = self._layout(name, last=True)
        self._emit(node, converted)
        return True

    def _interleave(self, first: onnx.NodeProto, chain: _Interleave) -> None:
        """A polyphase interleave on a channels-last [N, Q, Co*s] tensor. When the
        producing QLinearConv (maybe through a per-tensor dequantise) feeds nothing else,
        its output channels are reordered phase-major and the interleave is one reshape."""
        source = self.producers.get(first.input[0])
        single_use = self.consumers[first.input[0]] == 1
        if source is not None and source.op_type == "DequantizeLinear":
            single_use = single_use and self.consumers[source.input[0]] == 1
            source = self.producers.get(source.input[0])
        conv = self.emitted.get(source.output[0]) if source is not None else None
        prefix = first.output[0]
        joined = f"{prefix}__phase_major"
        join_shape = self._int64(f"{prefix}__join", [0, -1, chain.channels])
        if conv is not None and conv.op_type == "QLinearConv" and conv.domain == MS_DOMAIN and single_use:
            self._reorder_outputs(conv, _phase_major(chain.channels, chain.phases))
            self.nodes.append(helper.make_node("Reshape", [first.input[0], join_shape], [joined]))
        else:
            split_shape = self._int64(f"{prefix}__split", [0, 0, chain.channels, chain.phases])
            self.nodes += [
                helper.make_node("Reshape", [first.input[0], split_shape], [f"{prefix}__split"]),
                helper.make_node("Transpose", [f"{prefix}__split"], [f"{prefix}__swap"], perm=[0, 1, 3, 2]),
                helper.make_node("Reshape", [f"{prefix}__swap", join_shape], [joined]),
            ]
        crop = chain.nodes[3]
        time_axis = self._int64(f"{prefix}__time_axis", [1])
        self.nodes.append(
            helper.make_node("Slice", [joined, crop.input[1], crop.input[2], time_axis], list(crop.output))
        )
        self.last.update(crop.output)

    def _reorder_outputs(self, conv: onnx.NodeProto, order: npt.NDArray[np.int64]) -> None:
        """Permute a QLinearConv's output channels: weights, per-channel scales and zero
        points, bias (inputs 3, 4, 5, 8)."""
        for position in (3, 4, 5, 8):
            if position >= len(conv.input) or not conv.input[position]:
                continue
            name = conv.input[position]
            if self.consts[name].size == 1:  # per-tensor scale or zero point
                continue
            permuted = f"{name}__phase_major"
            if permuted not in self.consts:
                self.consts[permuted] = np.ascontiguousarray(self.consts[name][order])
                self.graph.initializer.append(numpy_helper.from_array(self.consts[permuted], permuted))
            conv.input[position] = permuted

    def _int64(self, name: str, values: list[int]) -> str:
        return _int64(self.graph, name, values)

    def _rename(self, old: str, new: str) -> None:
        for node in self.nodes:
            for field in (node.input, node.output):
                for i, name in enumerate(field):
                    if name == old:
                        field[i] = new


# Comparisons a padding mask is made from (PaddingSafe: steps < valid frames), and the
# shape-only operators between a mask and the Mul that applies it.
MASK_COMPARISONS = {"Less", "LessOrEqual", "Greater", "GreaterOrEqual"}
SHAPE_ONLY = {"Unsqueeze", "Reshape", "Transpose", "Squeeze", "Expand", "Identity"}


def drop_padding_masks(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """The graph without its padding masks, and how many multiplies that removed.

    Coqui vocoders are exported padding-safe (``coqui.padding_safe.PaddingSafe``): each convolution's
    input is multiplied by a 0/1 mask computed from each item's valid length. A run of one
    item has no padding, every mask is all ones, and the multiplies (a measurable share of
    the INT8 VITS vocoder's time) change nothing; this copy is what single-item runs use.
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}

    def origin(name: str) -> onnx.NodeProto | None:
        """The node that computes ``name``, looking through shape-only operators."""
        node = producers.get(name)
        while node is not None and node.op_type in SHAPE_ONLY:
            node = producers.get(node.input[0])
        return node

    def is_mask(name: str) -> bool:
        cast = origin(name)
        comparison = origin(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
        return comparison is not None and comparison.op_type in MASK_COMPARISONS

    dropped = 0
    for node in graph.node:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        masks = [is_mask(name) for name in node.input]
        if masks.count(True) == 1:
            kept = node.input[masks.index(False)]
            node.op_type = "Identity"
            del node.input[:]
            node.input.append(kept)
            dropped += 1
    _prune_dead_nodes(graph)
    return model, dropped


def _prune_dead_nodes(graph: onnx.GraphProto) -> None:
    """Remove nodes no graph output depends on (e.g. the masks' own computation)."""
    needed = {o.name for o in graph.output}
    alive = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            alive.append(node)
            needed.update(name for name in node.input if name)
    kept = list(reversed(alive))
    del graph.node[:]
    graph.node.extend(kept)
    _prune_initializers(graph)


def write_unpadded(vocoder: Path, out: Path) -> bool:
    """Write the mask-free copy of ``vocoder`` to ``out`` when it has padding masks
    (otherwise remove a stale ``out``); True if written."""
    model, dropped = drop_padding_masks(onnx.load(str(vocoder)))
    if not dropped:
        out.unlink(missing_ok=True)
        return False
    onnx.save(model, str(out))
    return True


def layout_summary(model: onnx.ModelProto) -> dict[str, int]:
    """Operator counts: how many convolutions run channels-last, how many transposes remain."""
    counts: Counter[str] = Counter()
    for node in model.graph.node:
        key = node.op_type
        if node.op_type == "QLinearConv":
            key += " (channels-last)" if _attributes(node).get("channels_last") else " (channels-first)"
        counts[key] += 1
    return dict(sorted(counts.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", type=Path, help="a vocoder ONNX file")
    args = parser.parse_args(argv)
    for op, count in layout_summary(onnx.load(str(args.onnx))).items():
        print(f"{count:4d}  {op}")


if __name__ == "__main__":
    main()
