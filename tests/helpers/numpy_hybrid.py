"""A float64 numpy reference of a whole Qwen3.5 hybrid decoder with its caches, written from transformers' math.

Source: transformers 5.23.0 models/qwen3_5/modeling_qwen3_5.py — Qwen3_5DecoderLayer (token mixer chosen by
config.layer_types), Qwen3_5Attention (gated q, per-head q/k RMSNorm, partial RoPE), Qwen3_5GatedDeltaNet.forward
(causal_conv1d_update on [conv_state | x], l2norm(eps=1e-6), q / sqrt(Kd), torch_recurrent_gated_delta_rule,
Qwen3_5RMSNormGated), Qwen3_5RMSNorm (1 + w) and the SwiGLU / sparse-MoE MLP. It never looks at irsurgeon's graph:
only the checkpoint's tensors (by name) and the synth spec's sizes.

    ref = HybridReference(tensors, spec)
    logits = ref.step(ids[:5]); logits = ref.step(ids[5:6]) ...      # state carried like the IR's variables
"""
from __future__ import annotations

import numpy as np

from helpers.numpy_mtp import moe, rms, rope, sigmoid, silu

LINEAR = "linear_attention"


def softplus(x):
    return np.logaddexp(0.0, x)


def l2norm(x, eps=1e-6):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)


def gated_rms(x, gain, gate, eps):
    """Qwen3_5RMSNormGated: rmsnorm(x) * w * silu(gate), w a plain gain (not 1 + w)."""
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gain * silu(gate)


class HybridReference:
    """Batch 1, text positions; `step(ids)` runs len(ids) new tokens and returns their logits [S, V]."""

    def __init__(self, t: dict[str, np.ndarray], s, layer_types: list[str]):
        self.t = {k: v.astype(np.float64) for k, v in t.items()}
        self.s, self.types, self.pos = s, layer_types, 0
        self.kv = {i: None for i, kind in enumerate(layer_types) if kind != LINEAR}
        C = 2 * s.linear_key_heads * s.linear_key_head_dim + s.linear_value_heads * s.linear_value_head_dim
        self.conv = {i: np.zeros((C, s.linear_conv_kernel)) for i, k in enumerate(layer_types) if k == LINEAR}
        self.ssm = {i: np.zeros((s.linear_value_heads, s.linear_key_head_dim, s.linear_value_head_dim))
                    for i, k in enumerate(layer_types) if k == LINEAR}

    def step(self, ids: np.ndarray) -> np.ndarray:
        t, s, p = self.t, self.s, "model.language_model."
        x = t[p + "embed_tokens.weight"][ids]  # [S, H]
        positions = np.arange(self.pos, self.pos + len(ids))
        for i, kind in enumerate(self.types):
            L = f"{p}layers.{i}."
            a = rms(x, t[L + "input_layernorm.weight"], s.rms_norm_eps)
            x = x + (self.linear(a, i, L + "linear_attn.") if kind == LINEAR else self.attention(a, i, L, positions))
            h = rms(x, t[L + "post_attention_layernorm.weight"], s.rms_norm_eps)
            x = x + self.mlp(h, L)
        self.pos += len(ids)
        return rms(x, t[p + "norm.weight"], s.rms_norm_eps) @ t["lm_head.weight"].T

    def attention(self, a, i, L, positions):
        t, s = self.t, self.s
        nH, nKV, D, S = s.heads, s.kv_heads, s.head_dim, len(a)
        q = (a @ t[L + "self_attn.q_proj.weight"].T).reshape(S, nH, 2 * D)
        q, gate = q[..., :D], q[..., D:].reshape(S, nH * D)
        k = (a @ t[L + "self_attn.k_proj.weight"].T).reshape(S, nKV, D)
        v = (a @ t[L + "self_attn.v_proj.weight"].T).reshape(S, nKV, D).transpose(1, 0, 2)
        q = rms(q, t[L + "self_attn.q_norm.weight"], s.rms_norm_eps).transpose(1, 0, 2)[None]
        k = rms(k, t[L + "self_attn.k_norm.weight"], s.rms_norm_eps).transpose(1, 0, 2)[None]
        rot = int(D * s.partial_rotary_factor)
        q, k = rope(q, positions[None], rot, s.rope_theta)[0], rope(k, positions[None], rot, s.rope_theta)[0]
        if self.kv[i] is not None:
            k, v = np.concatenate([self.kv[i][0], k], 1), np.concatenate([self.kv[i][1], v], 1)
        self.kv[i] = (k, v)
        k, v = np.repeat(k, nH // nKV, 0), np.repeat(v, nH // nKV, 0)
        T = k.shape[1]
        causal = np.arange(T)[None, :] <= (T - S + np.arange(S))[:, None]
        scores = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(D), -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        att = ((probs / probs.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(S, nH * D)
        return (att * sigmoid(gate)) @ t[L + "self_attn.o_proj.weight"].T

    def linear(self, a, i, L):
        """Gated DeltaNet on a [S, H], one token at a time from the carried conv window and recurrent state."""
        t, s = self.t, self.s
        Kh, Vh, Kd, Vd = s.linear_key_heads, s.linear_value_heads, s.linear_key_head_dim, s.linear_value_head_dim
        qkv = a @ t[L + "in_proj_qkv.weight"].T  # [S, C]
        z = (a @ t[L + "in_proj_z.weight"].T).reshape(len(a), Vh, Vd)
        beta = sigmoid(a @ t[L + "in_proj_b.weight"].T)  # [S, Vh]
        g = -np.exp(t[L + "A_log"]) * softplus(a @ t[L + "in_proj_a.weight"].T + t[L + "dt_bias"])
        w = t[L + "conv1d.weight"][:, 0, :]  # [C, K]
        out = np.zeros((len(a), Vh, Vd))
        for n in range(len(a)):
            self.conv[i] = np.concatenate([self.conv[i][:, 1:], qkv[n][:, None]], 1)  # the last K inputs
            mixed = silu((self.conv[i] * w).sum(-1))
            q, k, v = np.split(mixed, [Kh * Kd, 2 * Kh * Kd])
            q = np.repeat(l2norm(q.reshape(Kh, Kd)), Vh // Kh, 0) / np.sqrt(Kd)
            k = np.repeat(l2norm(k.reshape(Kh, Kd)), Vh // Kh, 0)
            v = v.reshape(Vh, Vd)
            h = self.ssm[i] * np.exp(g[n])[:, None, None]
            delta = (v - np.einsum("hk,hkv->hv", k, h)) * beta[n][:, None]
            h = h + k[:, :, None] * delta[:, None, :]
            self.ssm[i] = h
            out[n] = np.einsum("hk,hkv->hv", q, h)
        normed = gated_rms(out, t[L + "norm.weight"], z, s.rms_norm_eps)
        return normed.reshape(len(a), Vh * Vd) @ t[L + "out_proj.weight"].T

    def mlp(self, h, L):
        t, s = self.t, self.s
        if s.num_experts:
            layer = {"layers.0.mlp." + k[len(L + "mlp."):]: v for k, v in t.items() if k.startswith(L + "mlp.")}
            return moe(h[None], layer, {"top_k": s.top_k})[0]
        return (silu(h @ t[L + "mlp.gate_proj.weight"].T) * (h @ t[L + "mlp.up_proj.weight"].T)) \
            @ t[L + "mlp.down_proj.weight"].T
