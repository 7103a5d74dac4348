"""Partial rotary position embedding (rotate_half form) on plain 1-D positions.

    inv_freq[j] = theta^(-2j / R),  j < R/2,  R = rotary dims
    ang   = position * inv_freq                        [B, S, R/2]   (Multiply, not MatMul: nncf leaves it alone)
    cos, sin = cos/sin(concat(ang, ang))               [B, 1, S, R]
    rope(x) = concat(x_r * cos + rotate_half(x_r) * sin, x_pass),  x = [x_r (R) | x_pass (D - R)]
    rotate_half([a | b]) = [-b | a]
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.core import const, named


def inv_freq(rotary_dim: int, theta: float) -> np.ndarray:
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return (1.0 / theta ** exponents).astype(np.float32)


def rope_cos_sin(position_ids: ov.Output, rotary_dim: int, theta: float, name: str) -> tuple[ov.Output, ov.Output]:
    """cos and sin tables [B, 1, S, R] for int64 position_ids [B, S]."""
    pos = ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), const([-1], np.int64))  # [B, S, 1]
    ang = named(ops.multiply(pos, const(inv_freq(rotary_dim, theta), name=f"{name}.inv_freq")), f"{name}/angles")
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], np.int64))  # [B, 1, S, R]
    return named(ops.cos(emb), f"{name}/cos"), named(ops.sin(emb), f"{name}/sin")


def apply_rope(x: ov.Output, cos: ov.Output, sin: ov.Output, rotary_dim: int, head_dim: int, name: str,
               fusable: bool = False) -> ov.Output:
    """Rotate the first rotary_dim dims of x [B, N, S, D]; the rest pass through.

    fusable: the form openvino's RoPE fusion turns into one RoPE node per q/k, for heads that run; the default keeps
    the form the committed synthetic fixtures were generated with (their manifest pins the bytes). Same numbers.
    openvino's fuse_rotary_positional_embeddings.cpp (src/common/transformations/.../common_optimizations/, read at
    commit 003910ec): RoPEFusionGPTNEOX matches VariadicSplit(x, 3, [half, half]) or Slices on axis 3, the negation
    as Multiply(x2, -1.0) and Add(x * cos, concat(-x2, x1) * sin); RoPEFusionIOSlicing folds the pass-through
    VariadicSplit(x, 3, [R, D - R]) and its Concat, RoPEFusionPreprocess the [0, 2, 1, 3] Transpose before it. On
    openvino 2026.4.1 the split axis written as -1 stops the fusion (tests/families/qwen3_5/test_build.py checks the runtime graph).
    """
    fused_axis = const(3, np.int64) if fusable else None  # one axis constant shared by both splits

    def axis() -> ov.Output:
        return fused_axis if fusable else const(-1, np.int64)

    x_rot, x_pass = x, None
    if rotary_dim < head_dim:
        parts = ops.variadic_split(x, axis(), const([rotary_dim, head_dim - rotary_dim], np.int64))
        x_rot, x_pass = parts.output(0), parts.output(1)
    if fusable:
        halves = ops.variadic_split(x_rot, axis(), const([rotary_dim // 2] * 2, np.int64))
        minus = ops.multiply(halves.output(1), const(-1.0))
    else:
        halves = ops.split(x_rot, axis(), 2)
        minus = ops.negative(halves.output(1))
    rotated = ops.concat([minus, halves.output(0)], axis=-1)
    out = ops.add(ops.multiply(x_rot, cos), ops.multiply(rotated, sin))
    if x_pass is None:
        return named(out, name)
    return named(ops.concat([out, x_pass], axis=-1), name)
