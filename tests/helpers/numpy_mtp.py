"""An independent numpy reference of the Qwen3.5 MTP layer, written from the math (not from irsurgeon's graph).

Weights are the raw checkpoint tensors (zero-centred norms, NOT folded), keyed by their names without `mtp.`.
All arithmetic in float64 so that the reference is the more accurate side of every comparison.
"""
from __future__ import annotations

import numpy as np


def rms(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w.astype(np.float64))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def rope(x, pos, rot, theta):
    """x [B, N, S, D], pos [B, S]; rotate_half on the first `rot` dims."""
    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = pos[:, None, :, None].astype(np.float64) * inv  # [B, 1, S, R/2]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    xr, xp = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = np.concatenate([-xr[..., half:], xr[..., :half]], -1)
    return np.concatenate([xr * cos + rotated * sin, xp], -1)


def moe(x, w, c):
    """Sparse MoE with a gated shared expert. x [B, S, H]."""
    L = "layers.0.mlp."
    logits = x @ w[L + "gate.weight"].T.astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[..., : c["top_k"]]
    out = np.zeros_like(x)
    gate_up, down = w[L + "experts.gate_up_proj"].astype(np.float64), w[L + "experts.down_proj"].astype(np.float64)
    inter = down.shape[-1]
    for idx in np.ndindex(*x.shape[:-1]):
        sel = top[idx]
        weights = p[idx][sel]
        if c.get("norm_topk_prob", True):
            weights = weights / weights.sum()
        for e, g in zip(sel, weights):
            gu = gate_up[e] @ x[idx]
            out[idx] += g * (down[e] @ (silu(gu[:inter]) * gu[inter:]))
    S = L + "shared_expert."
    shared = (silu(x @ w[S + "gate_proj.weight"].T) * (x @ w[S + "up_proj.weight"].T)) @ w[S + "down_proj.weight"].T
    return out + sigmoid(x @ w[L + "shared_expert_gate.weight"].T) * shared


class MTPReference:
    """Stateful reference: call step() repeatedly; keeps its own KV cache like the IR's state."""

    def __init__(self, weights: dict, cfg: dict):
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        self.c = cfg
        self.k = self.v = None

    def reorder(self, beam_idx):
        if self.k is not None:
            self.k, self.v = self.k[beam_idx], self.v[beam_idx]

    def step(self, hidden, embeds, attention_mask, position_ids):
        w, c = self.w, self.c
        eps, nH, nKV, D = c["eps"], c["heads"], c["kv_heads"], c["head_dim"]
        B, S, H = hidden.shape
        x = np.concatenate([rms(embeds, w["pre_fc_norm_embedding.weight"], eps),
                            rms(hidden, w["pre_fc_norm_hidden.weight"], eps)], -1) @ w["fc.weight"].T
        a = rms(x, w["layers.0.input_layernorm.weight"], eps)
        A = "layers.0.self_attn."
        qg = (a @ w[A + "q_proj.weight"].T).reshape(B, S, nH, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(B, S, nH * D)
        q = rms(q, w[A + "q_norm.weight"], eps).transpose(0, 2, 1, 3)
        k = rms((a @ w[A + "k_proj.weight"].T).reshape(B, S, nKV, D), w[A + "k_norm.weight"], eps).transpose(0, 2, 1, 3)
        v = (a @ w[A + "v_proj.weight"].T).reshape(B, S, nKV, D).transpose(0, 2, 1, 3)
        q, k = rope(q, position_ids, c["rot"], c["theta"]), rope(k, position_ids, c["rot"], c["theta"])
        self.k = k if self.k is None else np.concatenate([self.k, k], 2)
        self.v = v if self.v is None else np.concatenate([self.v, v], 2)
        T = self.k.shape[2]
        rep = nH // nKV
        kk, vv = np.repeat(self.k, rep, axis=1), np.repeat(self.v, rep, axis=1)
        scores = q @ kk.transpose(0, 1, 3, 2) / np.sqrt(D)  # [B, nH, S, T]
        visible = (np.arange(T)[None, :] <= (T - S) + np.arange(S)[:, None])[None, None] \
            & (attention_mask[:, None, None, :] > 0)
        scores = np.where(visible, scores, -np.inf)
        scores -= scores.max(-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(-1, keepdims=True)
        att = (p @ vv).transpose(0, 2, 1, 3).reshape(B, S, nH * D) * sigmoid(gate)
        x = x + att @ w[A + "o_proj.weight"].T
        h = rms(x, w["layers.0.post_attention_layernorm.weight"], eps)
        if "moe" in c:
            x = x + moe(h, w, c["moe"])
        else:
            M = "layers.0.mlp."
            x = x + (silu(h @ w[M + "gate_proj.weight"].T) * (h @ w[M + "up_proj.weight"].T)) @ w[M + "down_proj.weight"].T
        return rms(x, w["norm.weight"], eps)


def cfg_dict(cfg) -> dict:
    """The numbers the reference needs, from an irsurgeon MTPConfig."""
    d = dict(eps=cfg.rms_norm_eps, heads=cfg.num_heads, kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
             rot=cfg.rotary_dim, theta=cfg.rope_theta)
    if cfg.moe:
        d["moe"] = dict(top_k=cfg.moe.top_k, norm_topk_prob=cfg.moe.norm_topk_prob)
    return d
