"""The three vision IRs openvino-genai's Qwen3.5 VLM pipeline loads, as one tiny vision transformer.

N patches, P = C * T * patch^2 pixels per patch, V vision width, h heads of size d = V / h, H text hidden size.

    openvino_vision_embeddings_model      hidden_states f32 [N, P] -> patch_embed                  -> [N, V]
    openvino_vision_embeddings_pos_model  input i64 [4, N]        -> pos_embed[input]             -> [4, N, V]
                                          (genai blends the four bilinear corners itself)
    openvino_vision_embeddings_merger_model
        hidden_states [N, V], attention_mask f32 [1, N, N] (additive), rotary_pos_emb f32 [N, d/2]
        x = x + proj(sdpa(rope(q), rope(k), v, attention_mask))        one block, qkv from norm1(x)
        x = x + fc2(gelu(fc1(norm2(x))))
        out = fc2(gelu(fc1(reshape(norm(x), [N/4, 4V]))))                                        -> [N/4, H]
Norms are RMSNorm (the real tower uses LayerNorm; the shapes and the I/O are what matter here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops import apply_rope, linear, rms_norm, sdpa
from irsurgeon.ops.core import const, named
from irsurgeon.synth.checkpoint import Draw
from irsurgeon.synth.target import Weights, parameter

I64 = np.int64
V_PREFIX = "model.visual."


@dataclass(frozen=True)
class VisionSpec:
    width: int = 32
    heads: int = 2
    patch: int = 16
    temporal_patch: int = 2
    channels: int = 3
    merge: int = 2
    positions: int = 64
    eps: float = 1e-6

    @property
    def patch_pixels(self) -> int:
        return self.channels * self.temporal_patch * self.patch * self.patch


def vision_tensors(v: VisionSpec, hidden: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    d, W, M = Draw(rng), v.width, v.width * v.merge ** 2
    b = V_PREFIX + "blocks.0."
    return {
        V_PREFIX + "patch_embed.proj.weight": d.mat(W, v.patch_pixels).reshape(
            W, v.channels, v.temporal_patch, v.patch, v.patch),
        V_PREFIX + "pos_embed.weight": d.mat(v.positions, W, np.sqrt(W)),
        b + "norm1.weight": d.gain(W), b + "attn.qkv.weight": d.mat(3 * W, W), b + "attn.proj.weight": d.mat(W, W),
        b + "norm2.weight": d.gain(W), b + "mlp.linear_fc1.weight": d.mat(2 * W, W),
        b + "mlp.linear_fc2.weight": d.mat(W, 2 * W),
        V_PREFIX + "merger.norm.weight": d.gain(W), V_PREFIX + "merger.linear_fc1.weight": d.mat(M, M),
        V_PREFIX + "merger.linear_fc2.weight": d.mat(hidden, M),
    }


def _result(out: ov.Output, params: list[ov.Node], title: str) -> ov.Model:
    result = ops.result(out)
    result.set_friendly_name("Result_last_hidden_state")
    result.output(0).set_names({"last_hidden_state"})
    return ov.Model([result], params, title)


def patch_embed_model(v: VisionSpec, w: Weights) -> ov.Model:
    x = parameter("hidden_states", ov.Type.f32, [-1, -1])
    table = w.tensors[V_PREFIX + "patch_embed.proj.weight"].reshape(v.width, -1)
    proj = Weights({V_PREFIX + "patch_embed.proj.weight": table}, w.fmt, False).mat(V_PREFIX + "patch_embed.proj.weight")
    flat = ops.reshape(x, const([-1, v.patch_pixels], I64), False)
    return _result(linear(flat, proj, "__module.patch_embed.proj/aten::linear/MatMul"), [x], "vision_embeddings")


def pos_embed_model(v: VisionSpec, w: Weights) -> ov.Model:
    idx = parameter("input", ov.Type.i64, [4, -1])
    out = named(ops.gather(w.mat(V_PREFIX + "pos_embed.weight"), idx, const(0, I64)), "ov_ext::embedding/Gather")
    return _result(out, [idx], "vision_embeddings_pos")


def merger_model(v: VisionSpec, hidden: int, w: Weights) -> ov.Model:
    params = [parameter("hidden_states", ov.Type.f32, [-1, v.width]),
              parameter("attention_mask", ov.Type.f32, [1, -1, -1]),
              parameter("rotary_pos_emb", ov.Type.f32, [-1, v.width // v.heads // 2])]
    x, mask, rot = (p.output(0) for p in params)
    x = vision_block(x, mask, rot, v, w)
    M = v.width * v.merge ** 2
    m = V_PREFIX + "merger."
    x = ops.reshape(rms_norm(x, w.gain(m + "norm.weight"), v.eps, "__module.merger.norm"), const([-1, M], I64), False)
    x = ops.gelu(linear(x, w.mat(m + "linear_fc1.weight"), "__module.merger.linear_fc1/aten::linear/MatMul"), "tanh")
    out = linear(x, w.mat(m + "linear_fc2.weight"), "__module.merger.linear_fc2/aten::linear/MatMul")
    return _result(out, params, "vision_embeddings_merger")


def vision_block(x: ov.Output, mask: ov.Output, rot: ov.Output, v: VisionSpec, w: Weights) -> ov.Output:
    """One pre-norm transformer block over all patches (one image: batch is the attention_mask's 1)."""
    b, n, d = V_PREFIX + "blocks.0.", "__module.blocks.0", v.width // v.heads
    a = rms_norm(x, w.gain(b + "norm1.weight"), v.eps, f"{n}.norm1")
    qkv = ops.reshape(linear(a, w.mat(b + "attn.qkv.weight"), f"{n}.attn.qkv/aten::linear/MatMul"),
                      const([-1, 3, v.heads, d], I64), False)
    q, k, val = (ops.transpose(ops.squeeze(t, const(1, I64)), const([1, 0, 2], I64))
                 for t in ops.split(qkv, const(1, I64), 3).outputs())  # [h, N, d]
    emb = ops.unsqueeze(ops.concat([rot, rot], axis=-1), const(0, I64))  # [1, N, d]
    cos, sin = ops.cos(emb).output(0), ops.sin(emb).output(0)
    q, k = apply_rope(q, cos, sin, d, d, f"{n}.attn/q_rope"), apply_rope(k, cos, sin, d, d, f"{n}.attn/k_rope")
    att = sdpa(q, k, val.output(0), mask, d, f"{n}.attn/aten::scaled_dot_product_attention/ScaledDotProductAttention")
    att = ops.reshape(ops.transpose(att, const([1, 0, 2], I64)), const([-1, v.width], I64), False)
    x = named(ops.add(x, linear(att, w.mat(b + "attn.proj.weight"), f"{n}.attn.proj/aten::linear/MatMul")),
              f"{n}/aten::add/Add")
    h = rms_norm(x, w.gain(b + "norm2.weight"), v.eps, f"{n}.norm2")
    h = ops.gelu(linear(h, w.mat(b + "mlp.linear_fc1.weight"), f"{n}.mlp.linear_fc1/aten::linear/MatMul"), "tanh")
    h = linear(h, w.mat(b + "mlp.linear_fc2.weight"), f"{n}.mlp.linear_fc2/aten::linear/MatMul")
    return named(ops.add(x, h), f"{n}/aten::add/Add_1")
