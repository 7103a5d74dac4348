"""RoPE tables of a DFlash draft: the inverse frequencies and cos/sin scale of transformers' Qwen3RotaryEmbedding.

transformers 5.2.0 models/qwen3/modeling_qwen3.py Qwen3RotaryEmbedding: "default" uses its own
compute_default_rope_parameters (every head dim rotates; partial_rotary_factor is not read), anything else
ROPE_INIT_FUNCTIONS[rope_type] of modeling_rope_utils.py. Only the types whose tables do not depend on the sequence
length are built: default, linear, yarn ("dynamic" and "longrope" change with the length, "llama3" is not ported).

    ang = position * inv_freq                         [B, S, D/2]
    cos, sin = cos/sin(concat(ang, ang)) * attention_scaling      [B, 1, S, D]
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.core import const, named

TYPES = ("default", "linear", "yarn")


@dataclass(frozen=True)
class Rope:
    rope_type: str
    theta: float
    factor: float | None = None  # linear, yarn
    original_max_position_embeddings: int | None = None  # yarn
    attention_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True


def base_freqs(theta: float, dim: int) -> np.ndarray:
    """theta^(2j/dim) as transformers computes it (float32 exponents)."""
    return np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))


def tables(rope: Rope, dim: int, max_position_embeddings: int) -> tuple[np.ndarray, float]:
    """(inv_freq [dim/2] float32, attention_scaling) of modeling_rope_utils.py 5.2.0."""
    if rope.rope_type == "default":
        return (1.0 / base_freqs(rope.theta, dim)).astype(np.float32), 1.0
    if rope.rope_type == "linear":  # _compute_linear_scaling_rope_parameters
        return (1.0 / base_freqs(rope.theta, dim) / np.float32(rope.factor)).astype(np.float32), 1.0
    return yarn(rope, dim, max_position_embeddings)


def yarn(rope: Rope, dim: int, max_position_embeddings: int) -> tuple[np.ndarray, float]:
    """_compute_yarn_parameters, transformers 5.2.0."""
    base, original = rope.theta, rope.original_max_position_embeddings
    factor = rope.factor if rope.factor is not None else max_position_embeddings / original

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = rope.attention_factor
    if attention is None:
        if rope.mscale and rope.mscale_all_dim:
            attention = float(get_mscale(factor, rope.mscale) / get_mscale(factor, rope.mscale_all_dim))
        else:
            attention = get_mscale(factor)
    beta_fast, beta_slow = rope.beta_fast or 32, rope.beta_slow or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1)
    pos = base_freqs(base, dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (np.float32(factor) * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation
    return inv.astype(np.float32), float(attention)


def cos_sin(position_ids: ov.Output, inv_freq: np.ndarray, scaling: float, name: str) -> tuple[ov.Output, ov.Output]:
    """cos and sin tables [B, 1, S, D] for int64 position_ids [B, S]."""
    pos = ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), const([-1], np.int64))  # [B, S, 1]
    ang = named(ops.multiply(pos, const(inv_freq, name=f"{name}.inv_freq")), f"{name}/angles")
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], np.int64))  # [B, 1, S, D]
    cos, sin = ops.cos(emb).output(0), ops.sin(emb).output(0)
    if scaling != 1.0:
        cos, sin = ops.multiply(cos, const(scaling)).output(0), ops.multiply(sin, const(scaling)).output(0)
    cos.get_node().set_friendly_name(f"{name}/cos")
    sin.get_node().set_friendly_name(f"{name}/sin")
    return cos, sin
