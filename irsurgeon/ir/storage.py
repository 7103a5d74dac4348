"""How an OpenVINO model stores its weights: per weight its element type, quantization, group size (read only).

A weight is a Constant that reaches the weight port of a MatMul (port 1), Gather (port 0, embedding tables) or
(Group)Convolution (port 1) through nothing but a decompression chain:

    W u4|i4|u8|i8 [O, I/g, g] -> Convert -> [Subtract zp] -> Multiply scale -> Reshape [O, I] -> [Convert] -> MatMul
    W u8|i8       [O, I]      -> Convert -> [Subtract zp] -> Multiply scale [O, 1]           -> [Convert] -> MatMul
    W f16|bf16    [O, I]      -> Convert (decompression)                                               -> MatMul
    W f32         [O, I]                                                                               -> MatMul

Group size g is the last dim of a weight one rank above what its consumer sees (undone by the Reshape); a quantized
weight without that extra rank is per-channel (group size -1). A missing zero point means symmetric quantization.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import openvino as ov

WEIGHT_PORTS = {"MatMul": 1, "Gather": 0, "Convolution": 1, "GroupConvolution": 1}
CHAIN_OPS = ("Convert", "Reshape", "Subtract", "Multiply")
QUANTIZED_BITS = {"u4": 4, "i4": 4, "u8": 8, "i8": 8}


@dataclass(frozen=True)
class Weight:
    name: str                   # friendly name of the weight Constant
    consumer: str               # friendly name of the op that uses it
    consumer_type: str          # MatMul, Gather, Convolution, GroupConvolution
    element_type: str           # u4, i4, u8, i8, f16, bf16, f32, ...
    shape: tuple[int, ...]
    nbytes: int                 # weight + zero point + scale
    group_size: int | None      # None: not quantized; -1: per-channel
    zero_point: str | None = None
    scale: str | None = None
    feeds_output: bool = False  # the consumer's result is a model output (an lm_head)

    @property
    def bits(self) -> int | None:
        return QUANTIZED_BITS.get(self.element_type)

    @property
    def mode(self) -> str:
        """nncf's name of the storage: int4_asym, int8_sym, ..., or the float element type."""
        if self.bits is None:
            return self.element_type
        return f"int{self.bits}_{'sym' if self.zero_point is None else 'asym'}"

    @property
    def params(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class TypeTotal:
    count: int
    nbytes: int


@dataclass(frozen=True)
class WeightSummary:
    weights: tuple[Weight, ...]
    by_type: dict[str, TypeTotal]  # every constant of the weight chains (weights, zero points, scales) per type

    @property
    def compressed(self) -> bool:
        return any(w.bits for w in self.weights)

    @property
    def bits(self) -> int | None:
        """The lowest bit width among quantized weights (4 for an int4 model with int8 backup layers)."""
        return min((w.bits for w in self.weights if w.bits), default=None)

    @property
    def group_sizes(self) -> Counter:
        """Group size -> number of weights, over the weights at the lowest bit width."""
        return Counter(w.group_size for w in self.weights if w.bits and w.bits == self.bits)

    @property
    def modes(self) -> Counter:
        return Counter(w.mode for w in self.weights)

    def get(self, name: str) -> Weight:
        for w in self.weights:
            if w.name == name:
                return w
        raise KeyError(name)


def weight_summary(model: ov.Model) -> WeightSummary:
    """Every weight of `model` with its storage, zero point, scale and group size; totals per element type."""
    weights, constants = [], {}
    for op in model.get_ordered_ops():
        port = WEIGHT_PORTS.get(op.get_type_name())
        if port is None or op.get_input_size() <= port:
            continue
        chain = _trace(op.input_value(port))
        if chain is None or chain.weight.get_instance_id() in constants:
            continue
        for c in (chain.weight, *chain.parts.values()):
            constants[c.get_instance_id()] = c
        weights.append(_describe(chain, op))
    totals: dict[str, list[int]] = {}
    for c in constants.values():
        t = totals.setdefault(c.get_element_type().get_type_name(), [0, 0])
        t[0], t[1] = t[0] + 1, t[1] + c.get_byte_size()
    return WeightSummary(tuple(weights), {k: TypeTotal(*v) for k, v in sorted(totals.items())})


@dataclass(frozen=True)
class _Chain:
    weight: ov.Node
    parts: dict[str, ov.Node]  # "zero_point", "scale" -> Constant
    reshaped: bool


def _trace(value: ov.Output) -> _Chain | None:
    """Walk up a decompression chain to its weight Constant; None when the port is fed by an activation."""
    parts, node, reshaped = {}, value.get_node(), False
    while node.get_type_name() != "Constant":
        kind = node.get_type_name()
        if kind not in CHAIN_OPS:
            return None
        if kind in ("Subtract", "Multiply"):
            side = _strip_converts(node.input_value(1).get_node())
            if side.get_type_name() != "Constant":
                return None
            parts["zero_point" if kind == "Subtract" else "scale"] = side
        reshaped |= kind == "Reshape"
        node = node.input_value(0).get_node()
    etype = node.get_element_type()
    if etype.is_integral_number() and etype.get_type_name() not in QUANTIZED_BITS:
        return None  # an index or shape constant, not a weight
    return _Chain(node, parts, reshaped)


def _strip_converts(node: ov.Node) -> ov.Node:
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node


def _describe(chain: _Chain, consumer: ov.Node) -> Weight:
    const, parts = chain.weight, chain.parts
    etype = const.get_element_type().get_type_name()
    shape = tuple(const.get_output_partial_shape(0).to_shape())
    group = None
    if etype in QUANTIZED_BITS:
        group = shape[-1] if chain.reshaped and len(shape) >= 3 else -1
    feeds_output = any(t.get_node().get_type_name() == "Result" for t in consumer.output(0).get_target_inputs())
    return Weight(const.get_friendly_name(), consumer.get_friendly_name(), consumer.get_type_name(), etype, shape,
                  const.get_byte_size() + sum(p.get_byte_size() for p in parts.values()), group,
                  parts["zero_point"].get_element_type().get_type_name() if "zero_point" in parts else None,
                  parts["scale"].get_element_type().get_type_name() if "scale" in parts else None, feeds_output)
