"""Scaled dot-product attention in the one form openvino's SDPAToPagedAttention pass converts.

    bias[b, 0, i, j] = 0 if j <= (T - S) + i and attention_mask[b, j] > 0 else min_f32     [B, 1, S, T]
    k, v: [B, nKV, T, D] -> Unsqueeze(2) -> Broadcast [1, 1, G, 1, 1] -> Reshape [0, nH, -1, D]   (GQA, G = nH/nKV)
    out = ScaledDotProductAttention(q, k, v, bias, D^-0.5), causal=False                     [B, nH, S, D]

The mask comes from the KV length and attention_mask only, never from position_ids.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.core import const, named

I64 = np.int64


def heads(x: ov.Output, n: int, d: int, name: str) -> ov.Output:
    """[B, S, n*d] -> [B, S, n, d]"""
    return named(ops.reshape(x, const([0, 0, n, d], I64), special_zero=True), name)


def to_bnsd(x: ov.Output) -> ov.Output:
    """[B, S, N, D] -> [B, N, S, D]"""
    return ops.transpose(x, const([0, 2, 1, 3], I64)).output(0)


def _dim(x: ov.Output, axis: int) -> ov.Output:
    """x.shape[axis] as an i64 scalar."""
    return ops.gather(ops.shape_of(x, ov.Type.i64), const(axis, I64), const(0, I64)).output(0)


def attention_mask_bias(attention_mask: ov.Output, q: ov.Output, kv: ov.Output, name: str) -> ov.Output:
    """Additive f32 causal + padding mask [B, 1, S, T] for queries q [B, N, S, D] over keys kv [B, N, T, D]."""
    s, t = _dim(q, 2), _dim(kv, 2)
    q_idx = ops.range(const(0, I64), s, const(1, I64), ov.Type.i64)
    k_idx = ops.range(const(0, I64), t, const(1, I64), ov.Type.i64)
    last_visible = ops.add(ops.unsqueeze(q_idx, const(1, I64)), ops.subtract(t, s))  # [S, 1]
    causal = ops.less_equal(ops.unsqueeze(k_idx, const(0, I64)), last_visible)  # [S, T]
    keep = ops.greater(ops.unsqueeze(attention_mask, const([1, 2], I64)), const(0, I64))  # [B, 1, 1, T]
    visible = named(ops.logical_and(keep, causal), f"{name}/visible")  # [B, 1, S, T]
    return named(ops.select(visible, const(0.0), const(np.finfo(np.float32).min)), f"{name}/mask")


def expand_kv(x: ov.Output, groups: int, num_heads: int, head_dim: int, name: str) -> ov.Output:
    """Repeat each of the nKV heads of x [B, nKV, T, D] `groups` times -> [B, nH, T, D]."""
    if groups == 1:
        return x
    wide = ops.broadcast(ops.unsqueeze(x, const(2, I64)), const([1, 1, groups, 1, 1], I64),
                         broadcast_spec="BIDIRECTIONAL")
    return named(ops.reshape(wide, const([0, num_heads, -1, head_dim], I64), special_zero=True), name)


def sdpa(q: ov.Output, k: ov.Output, v: ov.Output, bias: ov.Output, head_dim: int, name: str) -> ov.Output:
    scale = const(head_dim ** -0.5)
    return named(ops.scaled_dot_product_attention(q, k, v, bias, scale, causal=False), name)
