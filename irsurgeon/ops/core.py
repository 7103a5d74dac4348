"""Weights, constants, linear layers and the zero-centred RMSNorm.

    linear(x, W)      = x @ W^T                                   x [B, S, in], W [out, in]
    rms_norm(x, g)    = x * rsqrt(mean(x^2, -1) + eps) * g        g = 1 + w, already folded on load
"""
from __future__ import annotations

from enum import Enum

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino._offline_transformations import compress_model_transformation

from irsurgeon.ops.half import half_constant
from irsurgeon.weights.half import F16_MAX, F16_NORMAL, to_half

F32 = ov.Type.f32


class WeightFormat(str, Enum):
    """How float weights are stored in the IR; activations are always f32."""

    F32 = "f32"
    F16 = "f16"


def named(node: ov.Node, name: str) -> ov.Output:
    node.set_friendly_name(name)
    return node.output(0)


def const(value, dtype=np.float32, name: str | None = None) -> ov.Output:
    """A small non-weight constant (shapes, axes, scalars), always in the exact dtype given."""
    node = ops.constant(np.asarray(value, dtype=dtype))
    if name:
        node.set_friendly_name(name)
    return node.output(0)


def owned_f32(array: np.ndarray) -> np.ndarray:
    """A contiguous float32 array openvino may share: read-only memory (a mapped file) is copied, once."""
    data = np.ascontiguousarray(array, dtype=np.float32)
    return data if data.flags.writeable else data.copy()


def f16_range_note(data: np.ndarray, name: str) -> str:
    lo, hi = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
    return (f"warning: tensor {name}: values in [{lo:.3g}, {hi:.3g}] do not fit f16 (largest {F16_MAX:g}, "
            f"11-bit precision down to {F16_NORMAL:.3g}); kept as f32")


def weight(array: np.ndarray, name: str, fmt: WeightFormat, warn=print) -> ov.Output:
    """A float weight stored as `fmt`, produced as f32.

    f16: rounded slice by slice into its final buffer (`half.py`), stored as openvino's compression pass stores it
    (f16 Constant + Convert marked `decompression`, which the plugins key on to keep the weight compressed). A weight
    f16 cannot hold stays f32, reported through `warn`: one with values beyond f16's largest (the pass would clamp
    them), or one the pass itself keeps f32 (half.py: a value off by more than 1, or at least 75% of the values out
    of f16's range or losing precision in it, such as weights mostly below f16's normal range).
    """
    if fmt is WeightFormat.F16:
        data, tally = to_half(array)
        if tally.fits:
            return half_constant(data, name)
        del data
    return f32_weight(array, name, fmt, warn)


def half_weight(data: np.ndarray, name: str) -> ov.Output:
    """An f16 array whose values already passed `Tally.fits`, as the f16 build stores it (memory shared)."""
    return half_constant(data, name)


def f32_weight(array: np.ndarray, name: str, fmt: WeightFormat, warn=print) -> ov.Output:
    """The f32 path: an f32 constant, or for f16 whatever openvino's own compression pass makes of it."""
    data = owned_f32(array)
    node = ov.op.Constant(data, shared_memory=True)  # no copy
    node.set_friendly_name(name)
    if fmt is WeightFormat.F32:
        return node.output(0)
    if data.size and max(-float(data.min()), float(data.max())) > F16_MAX:
        warn(f16_range_note(data, name))
        return node.output(0)
    holder = ov.Model([ops.result(node)], [], "weight")
    compress_model_transformation(holder)
    out = holder.get_results()[0].input_value(0)
    out.get_tensor().set_names(set())  # drop the holder Result's counter-based name: builds stay byte-identical
    if out.get_node().get_type_name() != "Convert":  # the pass kept the constant as it was
        warn(f16_range_note(data, name))
        return out
    out.get_node().set_friendly_name(f"{name}/decompress")
    out.get_node().input_value(0).get_node().set_friendly_name(name)
    return out


def linear(x: ov.Output, w: ov.Output, name: str) -> ov.Output:
    return named(ops.matmul(x, w, transpose_a=False, transpose_b=True), name)


def rms_norm(x: ov.Output, gain: ov.Output, eps: float, name: str) -> ov.Output:
    """Normalise over the last axis in f32, then scale by the folded (1 + w) gain."""
    sq = named(ops.multiply(x, x), f"{name}/square")
    mean = named(ops.reduce_mean(sq, const([-1], np.int64), keep_dims=True), f"{name}/mean")
    inv = named(ops.sqrt(ops.add(mean, const(eps))), f"{name}/sqrt")
    normed = named(ops.divide(x, inv), f"{name}/normalize")
    return named(ops.multiply(normed, gain), name)
