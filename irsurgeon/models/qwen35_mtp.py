"""The Qwen3.5 MTP head: one full-attention decoder layer fed by the target's hidden state and the next embedding.

Shapes: B batch, S new tokens, T = past + S, H hidden, nH/nKV heads, D head_dim, R rotary dims.

    e = norm_emb(inputs_embeds), h = norm_hid(hidden_states)                       [B, S, H]
    x = fc(concat(e, h))                                    embedding half first     [B, S, H]
    a = norm_in(x)
    q|g = q_proj(a) viewed [B, S, nH, 2D];  q = rope(q_norm(q)),  k = rope(k_norm(k_proj(a))),  v = v_proj(a)
    k, v = cache(k), cache(v)                               stateful, [B, nKV, T, D]
    x = x + o_proj(sdpa(q, gqa(k), gqa(v), mask) * sigmoid(g))
    x = x + mlp(norm_post(x))                               SwiGLU, or sparse MoE + shared expert
    last_hidden_state = norm(x)                                                       [B, S, H]

Every norm is RMSNorm with the zero-centred gain folded to (1 + w) on load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.config import MTPConfig
from irsurgeon.contract import KEY_STATE, VALUE_STATE
from irsurgeon.ops import apply_rope, attention_mask_bias, expand_kv, kv_cache, linear, rms_norm, rope_cos_sin, sdpa, swiglu
from irsurgeon.ops.core import const, named

P = "mtp."
L = "mtp.layers.0."
I64 = np.int64
Weights = Callable[[str], ov.Output]  # full checkpoint name ("mtp.fc.weight") -> weight output


@dataclass(frozen=True)
class Inputs:
    hidden_states: ov.Output
    inputs_embeds: ov.Output
    attention_mask: ov.Output
    position_ids: ov.Output
    beam_idx: ov.Output


def mtp_head(x: Inputs, w: Weights, cfg: MTPConfig) -> tuple[ov.Output, list[ov.Node]]:
    """last_hidden_state and the two Assign sinks of the KV cache."""
    eps = cfg.rms_norm_eps
    e = rms_norm(x.inputs_embeds, w(P + "pre_fc_norm_embedding.weight"), eps, P + "pre_fc_norm_embedding")
    h = rms_norm(x.hidden_states, w(P + "pre_fc_norm_hidden.weight"), eps, P + "pre_fc_norm_hidden")
    hidden = linear(named(ops.concat([e, h], axis=-1), P + "fc/concat"), w(P + "fc.weight"), P + "fc")
    attn, sinks = self_attention(rms_norm(hidden, w(L + "input_layernorm.weight"), eps, L + "input_layernorm"),
                                 x, w, cfg)
    hidden = named(ops.add(hidden, attn), L + "attn_residual")
    post = rms_norm(hidden, w(L + "post_attention_layernorm.weight"), eps, L + "post_attention_layernorm")
    hidden = named(ops.add(hidden, mlp(post, w, cfg)), L + "mlp_residual")
    return rms_norm(hidden, w(P + "norm.weight"), eps, P + "norm"), sinks


def mlp(x: ov.Output, w: Weights, cfg: MTPConfig) -> ov.Output:
    if cfg.is_moe:
        from irsurgeon.ops.moe import sparse_moe
        return sparse_moe(x, w, cfg, L + "mlp")
    return swiglu(x, w(L + "mlp.gate_proj.weight"), w(L + "mlp.up_proj.weight"), w(L + "mlp.down_proj.weight"),
                  L + "mlp")


def heads(x: ov.Output, n: int, d: int, name: str) -> ov.Output:
    """[B, S, n*d] -> [B, S, n, d]"""
    return named(ops.reshape(x, const([0, 0, n, d], I64), special_zero=True), name)


def to_bnsd(x: ov.Output) -> ov.Output:
    """[B, S, N, D] -> [B, N, S, D]"""
    return ops.transpose(x, const([0, 2, 1, 3], I64)).output(0)


def self_attention(a: ov.Output, x: Inputs, w: Weights, cfg: MTPConfig) -> tuple[ov.Output, list[ov.Node]]:
    """Gated attention with q/k norms, partial RoPE, GQA and a stateful KV cache; returns o_proj output."""
    name, eps = L + "self_attn", cfg.rms_norm_eps
    nH, nKV, D, R = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim
    qg = heads(linear(a, w(f"{name}.q_proj.weight"), f"{name}.q_proj"), nH, 2 * D, f"{name}/q_heads")
    q_gate = ops.split(qg, const(-1, I64), 2)  # per head: [q (D) | gate (D)]
    q = rms_norm(q_gate.output(0), w(f"{name}.q_norm.weight"), eps, f"{name}.q_norm")
    gate = named(ops.reshape(q_gate.output(1), const([0, 0, nH * D], I64), special_zero=True), f"{name}/gate")
    k = rms_norm(heads(linear(a, w(f"{name}.k_proj.weight"), f"{name}.k_proj"), nKV, D, f"{name}/k_heads"),
                 w(f"{name}.k_norm.weight"), eps, f"{name}.k_norm")
    v = heads(linear(a, w(f"{name}.v_proj.weight"), f"{name}.v_proj"), nKV, D, f"{name}/v_heads")

    cos, sin = rope_cos_sin(x.position_ids, R, cfg.rope_theta, P + "rotary_emb")
    q = apply_rope(to_bnsd(q), cos, sin, R, D, f"{name}/q_rope", fusable=True)  # [B, nH, S, D]
    k = apply_rope(to_bnsd(k), cos, sin, R, D, f"{name}/k_rope", fusable=True)  # [B, nKV, S, D]
    batch = ops.gather(ops.shape_of(x.inputs_embeds, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    k_all, k_sink = kv_cache(k, x.beam_idx, batch, KEY_STATE, nKV, D, f"{name}/key_cache")
    v_all, v_sink = kv_cache(to_bnsd(v), x.beam_idx, batch, VALUE_STATE, nKV, D, f"{name}/value_cache")

    bias = attention_mask_bias(x.attention_mask, q, k_all, f"{name}/attention")
    k_all = expand_kv(k_all, cfg.kv_groups, nH, D, f"{name}/key_gqa")
    v_all = expand_kv(v_all, cfg.kv_groups, nH, D, f"{name}/value_gqa")
    out = to_bnsd(sdpa(q, k_all, v_all, bias, D, f"{name}/sdpa"))  # [B, S, nH, D]
    out = named(ops.reshape(out, const([0, 0, nH * D], I64), special_zero=True), f"{name}/merge_heads")
    gated = named(ops.multiply(out, ops.sigmoid(gate)), f"{name}/output_gate")
    return linear(gated, w(f"{name}.o_proj.weight"), f"{name}.o_proj"), [k_sink, v_sink]
